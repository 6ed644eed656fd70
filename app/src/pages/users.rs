//! Admin: users, their roles, the disabled flag, credit grants, and a new
//! password for someone who forgot theirs.

use super::LoadError;
use super::RoleBadge;
use crate::data::{all_users, UserRow};
use leptos::prelude::*;
use leptos_meta::Title;
use tollgate::model::Role;

#[component]
pub fn UsersPage() -> impl IntoView {
    let users = Resource::new_blocking(|| (), |_| all_users());
    view! {
        <Title text="Users" />
        <header class="page-head">
            <h1>"Users"</h1>
            <p class="lede">"Who can sign in, what they may do, and their credits."</p>
        </header>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match users.await {
                    Ok(u) => view! { <UserTable users=u /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
        <section class="card">
            <h2 class="card-title">"Add a user"</h2>
            <form method="post" action="/admin/users" class="form form-inline">
                <div class="field grow">
                    <label for="field-new-email">"Email"</label>
                    <input id="field-new-email" name="email" type="email" required />
                </div>
                <div class="field">
                    <label for="field-new-role">"Role"</label>
                    <select id="field-new-role" name="role">
                        {Role::ALL.map(|r| view! { <option value=r.as_str()>{r.label()}</option> }).collect_view()}
                    </select>
                </div>
                <div class="field grow">
                    <label for="field-new-password">"Initial password"</label>
                    <input id="field-new-password" name="password" type="password" autocomplete="new-password" required minlength=tollgate::model::PASSWORD_LEN_MIN />
                </div>
                <button type="submit" class="btn btn-primary">"Add user"</button>
            </form>
        </section>
    }
}

#[component]
fn UserTable(users: Vec<UserRow>) -> impl IntoView {
    let rows = users
        .into_iter()
        .map(|u| view! { <UserLine u=u /> })
        .collect::<Vec<_>>();
    view! {
        <section class="card">
            <div class="table-wrap">
                <table class="table" data-testid="users">
                    <thead>
                        <tr>
                            <th scope="col">"User"</th>
                            <th scope="col">"Role"</th>
                            <th scope="col" class="num">"Balance"</th>
                            <th scope="col">"Change role"</th>
                            <th scope="col">"Grant credits"</th>
                            <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                        </tr>
                    </thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        </section>
    }
}

/// One person: their role, balance, and what an admin may do for them.
#[component]
fn UserLine(u: UserRow) -> impl IntoView {
    let role_action = format!("/admin/users/{}/role", u.id);
    let disable_action = format!("/admin/users/{}/disabled", u.id);
    let grant_action = format!("/admin/users/{}/grants", u.id);
    let current = u.role;
    let email = u.email.clone();
    view! {
        <tr class:disabled-row=u.disabled data-email=u.email.clone()>
            <td data-label="User">
                <div class="cell-title">{u.email.clone()}</div>
                <div class="small muted">"since " {u.created}</div>
            </td>
            <td data-label="Role">
                <div class="cell-stack">
                    <RoleBadge role=u.role />
                    {u.disabled.then(|| view! { <span class="badge badge-disabled">"Disabled"</span> })}
                </div>
            </td>
            <td class="num" data-label="Balance">{u.balance}</td>
            <td data-label="Change role">
                <form method="post" action=role_action class="inline-form">
                    <label class="visually-hidden" for=format!("role-{}", u.id)>{format!("Role for {email}")}</label>
                    <select id=format!("role-{}", u.id) name="role" disabled=u.is_me>
                        {Role::ALL
                            .map(|r| view! { <option value=r.as_str() selected=r == current>{r.label()}</option> })
                            .collect_view()}
                    </select>
                    <button type="submit" class="btn btn-ghost btn-small" disabled=u.is_me>"Save"</button>
                </form>
            </td>
            <td data-label="Grant">
                <form method="post" action=grant_action class="inline-form grant-form">
                    <label class="visually-hidden" for=format!("amount-{}", u.id)>{format!("Credits to grant {}", u.email)}</label>
                    <input id=format!("amount-{}", u.id) name="amount" type="number" min="1" max="1000000" step="1" required placeholder="Credits" class="input-narrow" />
                    <label class="visually-hidden" for=format!("reason-{}", u.id)>"Reason"</label>
                    <input id=format!("reason-{}", u.id) name="reason" type="text" maxlength="500" placeholder="Reason (optional)" />
                    // Made when the page was rendered: a double click grants once.
                    <input type="hidden" name="key" value=uuid::Uuid::new_v4().to_string() />
                    <button type="submit" class="btn btn-primary btn-small">"Grant"</button>
                </form>
            </td>
            <td class="actions">
                {(!u.is_me).then(|| view! { <SetPassword id=u.id.clone() email=u.email.clone() /> })}
                {(!u.is_me).then(|| view! {
                    <form method="post" action=disable_action class="inline-form">
                        <input type="hidden" name="disabled" value=if u.disabled { "false" } else { "true" } />
                        <button type="submit" class=if u.disabled { "btn btn-ghost btn-small" } else { "btn btn-danger btn-small" }>
                            {if u.disabled { "Enable" } else { "Disable" }}
                        </button>
                    </form>
                })}
            </td>
        </tr>
    }
}

/// A new password for someone who forgot theirs, behind a disclosure so
/// the table stays one line per person.
#[component]
fn SetPassword(id: String, email: String) -> impl IntoView {
    let action = format!("/admin/users/{id}/password");
    let (new_id, confirm_id) = (
        format!("new-password-{id}"),
        format!("confirm-password-{id}"),
    );
    view! {
        <details class="set-password" data-testid="set-password">
            <summary class="btn btn-ghost btn-small">"Set password"</summary>
            <form method="post" action=action class="form set-password-form">
                <p class="small muted">{format!("A new password for {email}. Their sessions end; their API tokens keep working.")}</p>
                <div class="field">
                    <label for=new_id.clone()>"New password"</label>
                    <input id=new_id name="new_password" type="password" autocomplete="new-password" required minlength=tollgate::model::PASSWORD_LEN_MIN />
                </div>
                <div class="field">
                    <label for=confirm_id.clone()>"Confirm"</label>
                    <input id=confirm_id name="confirm_password" type="password" autocomplete="new-password" required minlength=tollgate::model::PASSWORD_LEN_MIN />
                </div>
                <button type="submit" class="btn btn-primary btn-small">"Set password"</button>
            </form>
        </details>
    }
}
