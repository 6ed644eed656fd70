//! Account: change password; create, list and revoke API tokens; webhooks.

use super::LoadError;
use crate::data::{my_tokens, TokenRow};
use crate::islands::PasswordField;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn AccountPage() -> impl IntoView {
    let tokens = Resource::new_blocking(|| (), |_| my_tokens());
    view! {
        <Title text="Account" />
        <header class="page-head">
            <h1>"Account"</h1>
            <p class="lede">"Your password and the API tokens your programs use."</p>
        </header>
        <div class="grid-2">
            <section class="card">
                <h2 class="card-title">"API tokens"</h2>
                <p class="muted">"Send a token as " <code>"Authorization: Bearer tg_…"</code> " to call the " <code>"/v1"</code> " API as yourself. "<a href="/docs/api">"Read the API reference"</a>"."</p>
                <form method="post" action="/account/tokens" class="form form-inline">
                    <div class="field grow">
                        <label for="field-token-name">"Token name"</label>
                        <input id="field-token-name" name="name" type="text" maxlength="100" placeholder="e.g. render farm" />
                    </div>
                    <button type="submit" class="btn btn-primary">"Create token"</button>
                </form>
                <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                    {move || Suspend::new(async move {
                        match tokens.await {
                            Ok(t) => view! { <TokenList tokens=t /> }.into_any(),
                            Err(e) => view! { <LoadError error=e /> }.into_any(),
                        }
                    })}
                </Suspense>
            </section>
            <section class="card">
                <h2 class="card-title">"Change password"</h2>
                <form method="post" action="/account/password" class="form">
                    <PasswordField name="current_password".to_string() label="Current password".to_string() autocomplete="current-password".to_string() />
                    <PasswordField
                        name="new_password".to_string()
                        label="New password".to_string()
                        autocomplete="new-password".to_string()
                        hint=format!("At least {} characters.", tollgate::model::PASSWORD_LEN_MIN)
                        minlength=tollgate::model::PASSWORD_LEN_MIN as u32
                    />
                    <PasswordField name="confirm".to_string() label="New password again".to_string() autocomplete="new-password".to_string() />
                    <label class="check"><input type="checkbox" name="revoke_tokens" value="1" />" Also revoke all my API tokens"</label>
                    <p class="hint">"Your other signed-in sessions end with the change."</p>
                    <button type="submit" class="btn btn-primary">"Change password"</button>
                </form>
            </section>
        </div>
        <super::WebhooksSection />
    }
}

#[component]
fn TokenList(tokens: Vec<TokenRow>) -> impl IntoView {
    if tokens.is_empty() {
        return view! { <p class="empty">"No tokens yet."</p> }.into_any();
    }
    let rows = tokens
        .into_iter()
        .map(|t| {
            let action = format!("/account/tokens/{}/revoke", t.id);
            view! {
                <tr class:revoked=t.revoked>
                    <td data-label="Name">{t.name}</td>
                    <td class="mono" data-label="Token">{format!("{}…", t.prefix)}</td>
                    <td class="nowrap" data-label="Created">{t.created}</td>
                    <td class="nowrap" data-label="Last used">{t.last_used.unwrap_or_else(|| "never".into())}</td>
                    <td class="actions">
                        {if t.revoked {
                            view! { <span class="badge badge-disabled">"Revoked"</span> }.into_any()
                        } else {
                            view! {
                                <form method="post" action=action class="inline-form">
                                    <button type="submit" class="btn btn-danger btn-small">"Revoke"</button>
                                </form>
                            }
                            .into_any()
                        }}
                    </td>
                </tr>
            }
        })
        .collect::<Vec<_>>();
    view! {
        <div class="table-wrap">
            <table class="table" data-testid="tokens">
                <thead>
                    <tr>
                        <th scope="col">"Name"</th>
                        <th scope="col">"Token"</th>
                        <th scope="col">"Created"</th>
                        <th scope="col">"Last used"</th>
                        <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
    .into_any()
}
