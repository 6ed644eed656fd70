//! Sign in and first-run setup: the two pages a stranger may see.

use super::FlashMessage;
use crate::data::{load_page_context, setup_needed, PageContext};
use crate::islands::PasswordField;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
fn AuthCard(title: &'static str, lede: &'static str, children: Children) -> impl IntoView {
    view! {
        <main id="main" class="auth">
            <div class="auth-card">
                <div class="brand brand-large">
                    <span class="brand-mark" aria-hidden="true"></span>
                    "Tollgate"
                </div>
                <h1>{title}</h1>
                <p class="lede">{lede}</p>
                {children()}
            </div>
        </main>
    }
}

/// What a failed sign-in or set-up says, from the code in the address (it
/// keeps nothing on the server for someone who is not signed in).
fn failure_words(code: &str) -> Option<&'static str> {
    Some(match code {
        "credentials" => "Email or password is incorrect.",
        "rate_limited" => "Too many attempts; wait a minute and try again.",
        "disabled" => "This account is disabled; ask an admin to enable it.",
        "email" => "Enter an email address like ana@studio.example.",
        "password" => "The password must be at least 10 characters (and at most 1,024).",
        "confirm" => "The two passwords do not match.",
        "done" => "Setup is already complete: an admin exists.",
        "token" => "That is not the set-up token this server printed when it started. Copy it from the server's console: the line that starts “First-run set-up”.",
        "remote" => "Set up the first admin from this machine (http://127.0.0.1:…), or set TOLLGATE_PUBLIC_URL to where people reach Tollgate.",
        "form" => "The form could not be read; please try again.",
        _ => return None,
    })
}

/// The failure and the email echoed in the address, bounded.
fn echoed() -> (Option<&'static str>, Option<String>) {
    let q = use_query_map().get_untracked();
    let failed = q.get("failed").as_deref().and_then(failure_words);
    let email = q
        .get("email")
        .map(|e| e.chars().take(254).collect::<String>())
        .filter(|e| !e.is_empty());
    (failed, email)
}

#[component]
pub fn LoginPage() -> impl IntoView {
    let ctx = Resource::new_blocking(|| (), |_| load_page_context());
    let next = use_query_map()
        .get_untracked()
        .get("next")
        .unwrap_or_default();
    let (failed, echoed_email) = echoed();
    view! {
        <Title text="Sign in" />
        <AuthCard title="Sign in" lede="Use the email and password your admin gave you.">
            <Suspense fallback=|| ()>
                {
                    let next = next.clone();
                    move || {
                        let next = next.clone();
                        let echoed_email = echoed_email.clone();
                        Suspend::new(async move {
                            let PageContext { flash, .. } = ctx.await.unwrap_or(PageContext { me: None, flash: None });
                            let email = echoed_email.or_else(|| flash.as_ref().and_then(|f| f.email.clone()));
                            view! {
                                {failed.map(|m| view! { <div class="flash flash-error" role="alert"><p>{m}</p></div> })}
                                {flash.map(|f| view! { <FlashMessage flash=f /> })}
                                <form method="post" action="/login" class="form">
                                    <input type="hidden" name="next" value=next />
                                    <div class="field">
                                        <label for="field-email">"Email"</label>
                                        <input id="field-email" name="email" type="email" autocomplete="username" required value=email />
                                    </div>
                                    <PasswordField name="password".to_string() label="Password".to_string() autocomplete="current-password".to_string() />
                                    <button type="submit" class="btn btn-primary btn-block">"Sign in"</button>
                                </form>
                            }
                        })
                    }
                }
            </Suspense>
        </AuthCard>
    }
}

#[component]
pub fn SetupPage() -> impl IntoView {
    let needed = Resource::new_blocking(|| (), |_| setup_needed());
    let ctx = Resource::new_blocking(|| (), |_| load_page_context());
    let (failed, echoed_email) = echoed();
    // The address the server printed carries the token: nothing to copy.
    let token = use_query_map()
        .get_untracked()
        .get("token")
        .map(|t| t.chars().take(200).collect::<String>())
        .unwrap_or_default();
    view! {
        <Title text="First-run setup" />
        <AuthCard title="Welcome to Tollgate" lede="Create the first admin account. This page disappears once an admin exists.">
            <Suspense fallback=|| ()>
                {move || {
                    let echoed_email = echoed_email.clone();
                    let token = token.clone();
                    Suspend::new(async move {
                    let needed = needed.await.unwrap_or(false);
                    let PageContext { flash, .. } = ctx.await.unwrap_or(PageContext { me: None, flash: None });
                    if !needed {
                        return view! {
                            <div class="flash flash-ok" role="status">
                                <p>"Setup is complete: an admin already exists."</p>
                            </div>
                            <a class="btn btn-primary btn-block" href="/login">"Go to sign in"</a>
                        }
                        .into_any();
                    }
                    let email = echoed_email.or_else(|| flash.as_ref().and_then(|f| f.email.clone()));
                    view! {
                        {failed.map(|m| view! { <div class="flash flash-error" role="alert"><p>{m}</p></div> })}
                        {flash.map(|f| view! { <FlashMessage flash=f /> })}
                        <form method="post" action="/setup" class="form">
                            <div class="field">
                                <label for="field-token">"Set-up token"</label>
                                <input id="field-token" name="token" type="text" autocomplete="off" spellcheck="false" required value=token.clone() aria-describedby="field-token-hint" />
                                <p class="hint" id="field-token-hint">"Printed by the server when it started, on the line that starts “First-run set-up”. It proves you run this server."</p>
                            </div>
                            <div class="field">
                                <label for="field-email">"Admin email"</label>
                                <input id="field-email" name="email" type="email" autocomplete="username" required value=email />
                            </div>
                            <PasswordField
                                name="password".to_string()
                                label="Password".to_string()
                                autocomplete="new-password".to_string()
                                hint=format!("At least {} characters.", tollgate::model::PASSWORD_LEN_MIN)
                                minlength=tollgate::model::PASSWORD_LEN_MIN as u32
                            />
                            <PasswordField
                                name="confirm".to_string()
                                label="Password again".to_string()
                                autocomplete="new-password".to_string()
                            />
                            <button type="submit" class="btn btn-primary btn-block">"Create admin"</button>
                        </form>
                    }
                    .into_any()
                })}}
            </Suspense>
        </AuthCard>
    }
}
