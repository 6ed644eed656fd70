//! Form posts from the pages. Each handler checks the role (the engine's
//! extractor), calls the engine, leaves a flash message, and redirects
//! (post/redirect/get), so they work without JavaScript.

use super::listen::ClientAddress;
use crate::data::flash;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::response::Redirect;
use axum::routing::{post, MethodRouter};
use axum::{Extension, Form, Router};
use serde::Deserialize;
use tollgate::model::{ApiTokenId, Credits, Happening, JobId, Role, UserId};
use tollgate::usecases::auth::{begin_session, end_session, AdminOnly, AnyUser, Authorized};
use tollgate::{Error, Tollgate};
use tower_sessions::Session;

/// The form routes of the pages, each once: the router is made from this list, and the
/// role matrix test (`app/tests/roles.rs`) reads it.
pub fn routes() -> Vec<(&'static str, MethodRouter<Tollgate>)> {
    vec![
        ("/setup", post(setup)),
        ("/login", post(login)),
        ("/logout", post(logout)),
        ("/account/password", post(change_password)),
        ("/account/tokens", post(create_token)),
        ("/account/tokens/{id}/revoke", post(revoke_token)),
        ("/edits/{id}/cancel", post(cancel_edit)),
        ("/edits/{id}/repairs", post(repair_edit)),
        ("/edits/{id}/choose", post(choose_version)),
        ("/admin/users", post(add_user)),
        ("/admin/users/{id}/role", post(set_role)),
        ("/admin/users/{id}/disabled", post(set_disabled)),
        ("/admin/users/{id}/password", post(set_password)),
        ("/admin/users/{id}/grants", post(grant)),
        ("/admin/budget/cap", post(set_cap)),
        ("/admin/budget/halt", post(halt_day)),
        ("/admin/budget/resume", post(resume_day)),
    ]
}

pub fn router(tollgate: Tollgate) -> Router {
    super::routed(routes()).with_state(tollgate)
}

/// A form body that did not parse: said as a flash, never a bare 4xx page.
fn unreadable(e: FormRejection) -> Error {
    Error::invalid("form", e.body_text())
}

/// Reports an engine error on the page we return to.
pub(crate) async fn report(session: &Session, e: Error, back: &str) -> Redirect {
    if let Error::Internal(cause) = &e {
        tracing::error!(%cause, "internal error in a form post");
    }
    flash::error(session, sentence(&e.public_message())).await;
    Redirect::to(back)
}

/// "email: must look like…" reads better as "Email: must look like…".
fn sentence(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// Only a path of this app may be a post-login destination (no open
/// redirect); the engine decides.
fn safe_next(next: &str) -> &str {
    tollgate::usecases::auth::safe_redirect(next)
}

/// Where a sign-in lands: the page the person was sent away from, or
/// else their role's home.
fn after_sign_in(next: &str, role: tollgate::model::Role) -> &str {
    match safe_next(next) {
        safe if !next.is_empty() && safe == next => safe,
        _ => crate::app::home_of(role),
    }
}

#[derive(Deserialize)]
pub struct SetupForm {
    #[serde(default)]
    token: String,
    email: String,
    password: String,
    confirm: String,
}

async fn setup(
    State(t): State<Tollgate>,
    Extension(ClientAddress(client)): Extension<ClientAddress>,
    session: Session,
    form: Result<Form<SetupForm>, FormRejection>,
) -> Redirect {
    // A fresh instance without a public URL is set up from this machine
    // only: whoever reaches it first over the network must not become admin.
    if t.config().public_origin.is_none() && !client.is_loopback() {
        return Redirect::to("/setup?failed=remote");
    }
    let Form(f) = match form {
        Ok(f) => f,
        Err(_) => return Redirect::to("/setup?failed=form"),
    };
    match t
        .complete_setup(&f.token, &f.email, &f.password, &f.confirm)
        .await
    {
        Ok(user) => {
            if let Err(e) = begin_session(&session, user.id).await {
                return report(&session, e, "/login").await;
            }
            flash::ok(
                &session,
                "Your admin account is ready. Add people and grant them credits here.",
            )
            .await;
            Redirect::to("/admin/users")
        }
        Err(e) => {
            let failed = match &e {
                Error::Invalid { fields, .. } if fields.contains_key("token") => "token",
                Error::Invalid { fields, .. } if fields.contains_key("email") => "email",
                Error::Invalid { fields, .. } if fields.contains_key("confirm") => "confirm",
                Error::Invalid { .. } => "password",
                Error::Conflict { .. } => "done",
                _ => "form",
            };
            let mut back = auth_back("/setup", failed, &f.email, "");
            if failed != "token" {
                // Kept, so a mistyped password does not mean copying it again.
                back.push_str(&format!("&token={}", encode(f.token.trim())));
            }
            Redirect::to(&back)
        }
    }
}

#[derive(Deserialize)]
pub struct LoginForm {
    email: String,
    password: String,
    #[serde(default)]
    next: String,
}

async fn login(
    State(t): State<Tollgate>,
    Extension(ClientAddress(client)): Extension<ClientAddress>,
    session: Session,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Redirect {
    let Form(f) = match form {
        Ok(f) => f,
        Err(e) => return report(&session, unreadable(e), "/login").await,
    };
    match t.login(&f.email, &f.password, Some(client)).await {
        Ok(user) => {
            if let Err(e) = begin_session(&session, user.id).await {
                return report(&session, e, "/login").await;
            }
            tracing::info!(user = %user.id, "signed in");
            Redirect::to(after_sign_in(&f.next, user.role))
        }
        Err(e) => {
            // An anonymous failure writes no session row: what went wrong
            // and what was typed ride in the address, short and bounded.
            let failed = match e {
                Error::RateLimited { .. } => "rate_limited",
                Error::AccountDisabled => "disabled",
                _ => "credentials",
            };
            Redirect::to(&auth_back("/login", failed, &f.email, &f.next))
        }
    }
}

/// `/login?failed=CODE&email=…&next=…` (or `/setup?…`): the page says why,
/// with the email filled in again. The echo is at most 254 characters.
fn auth_back(page: &str, failed: &str, email: &str, next: &str) -> String {
    let email: String = email.trim().chars().take(254).collect();
    let mut back = format!("{page}?failed={failed}&email={}", encode(&email));
    if !next.is_empty() {
        back.push_str(&format!("&next={}", encode(safe_next(next))));
    }
    back
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

async fn logout(session: Session) -> Redirect {
    if let Err(e) = end_session(&session).await {
        tracing::error!(error = %e, "ending a session");
    }
    Redirect::to("/login")
}

#[derive(Deserialize)]
pub struct PasswordForm {
    current_password: String,
    new_password: String,
    confirm: String,
    /// "1": also revoke every API token.
    revoke_tokens: Option<String>,
}

async fn change_password(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    form: Result<Form<PasswordForm>, FormRejection>,
) -> Redirect {
    let mut revoked = false;
    let result = match form {
        Ok(Form(f)) => {
            revoked = f.revoke_tokens.is_some();
            t.change_password(
                who.user(),
                &f.current_password,
                &f.new_password,
                &f.confirm,
                revoked,
            )
            .await
        }
        Err(e) => Err(unreadable(e)),
    };
    match result {
        Ok(from) => {
            // Every other session ended with the change; this one goes on.
            if let Err(e) = tollgate::usecases::auth::stamp_session(&session, from).await {
                return report(&session, e, "/login").await;
            }
            flash::ok(
                &session,
                if revoked {
                    "Your password is changed. Your other sessions and all your API tokens have ended."
                } else {
                    "Your password is changed. Your other sessions have ended."
                },
            )
            .await;
            Redirect::to("/account")
        }
        Err(e) => report(&session, e, "/account").await,
    }
}

#[derive(Deserialize)]
pub struct TokenForm {
    #[serde(default)]
    name: String,
}

async fn create_token(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    form: Result<Form<TokenForm>, FormRejection>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let result = match form {
        Ok(Form(f)) => t.create_api_token(who.user(), &f.name).await,
        Err(e) => Err(unreadable(e)),
    };
    match result {
        Ok((token, secret)) => {
            let message = format!(
                "Token “{}” created. This is the only time it is shown:",
                token.name
            );
            flash::ok(&session, message).await;
            flash::redirect_with_secret(&session, "/account", &secret, t.config().secure_cookies)
                .await
        }
        Err(e) => report(&session, e, "/account").await.into_response(),
    }
}

async fn revoke_token(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    Path(id): Path<String>,
) -> Redirect {
    let result = match id.parse::<ApiTokenId>() {
        Ok(id) => t.revoke_api_token(who.user(), id).await,
        Err(_) => Err(Error::NotFound("token")),
    };
    match result {
        Ok(()) => {
            flash::ok(
                &session,
                "Token revoked. Programs using it can no longer call the API.",
            )
            .await;
            Redirect::to("/account")
        }
        Err(e) => report(&session, e, "/account").await,
    }
}

#[derive(Deserialize)]
pub struct AddUserForm {
    email: String,
    role: String,
    password: String,
}

async fn add_user(
    State(t): State<Tollgate>,
    _admin: Authorized<AdminOnly>,
    session: Session,
    form: Result<Form<AddUserForm>, FormRejection>,
) -> Redirect {
    let result = match form {
        Ok(Form(f)) => match Role::parse(&f.role) {
            Ok(role) => t.add_user(&f.email, role, &f.password).await,
            Err(e) => Err(Error::invalid("role", e.to_string())),
        },
        Err(e) => Err(unreadable(e)),
    };
    match result {
        Ok(user) => {
            flash::ok(
                &session,
                format!("Added {} as {}.", user.email, user.role.label()),
            )
            .await;
            Redirect::to("/admin/users")
        }
        Err(e) => report(&session, e, "/admin/users").await,
    }
}

#[derive(Deserialize)]
pub struct RoleForm {
    role: String,
}

fn user_id(raw: &str) -> Result<UserId, Error> {
    raw.parse().map_err(|_| Error::NotFound("user"))
}

async fn set_role(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    session: Session,
    Path(id): Path<String>,
    form: Result<Form<RoleForm>, FormRejection>,
) -> Redirect {
    let result = async {
        let id = user_id(&id)?;
        let Form(f) = form.map_err(unreadable)?;
        let role = Role::parse(&f.role).map_err(|e| Error::invalid("role", e.to_string()))?;
        t.set_role(admin.user(), id, role).await
    }
    .await;
    match result {
        Ok(user) => {
            flash::ok(
                &session,
                format!("{} is now {}.", user.email, user.role.label()),
            )
            .await;
            Redirect::to("/admin/users")
        }
        Err(e) => report(&session, e, "/admin/users").await,
    }
}

#[derive(Deserialize)]
pub struct DisabledForm {
    disabled: String,
}

async fn set_disabled(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    session: Session,
    Path(id): Path<String>,
    form: Result<Form<DisabledForm>, FormRejection>,
) -> Redirect {
    let result = async {
        let id = user_id(&id)?;
        let Form(f) = form.map_err(unreadable)?;
        let disabled = match f.disabled.as_str() {
            "true" => true,
            "false" => false,
            _ => return Err(Error::invalid("disabled", "must be true or false")),
        };
        t.set_disabled(admin.user(), id, disabled).await
    }
    .await;
    match result {
        Ok(user) => {
            let what = if user.disabled {
                "disabled: their sessions and tokens no longer work"
            } else {
                "enabled"
            };
            flash::ok(&session, format!("{} is {what}.", user.email)).await;
            Redirect::to("/admin/users")
        }
        Err(e) => report(&session, e, "/admin/users").await,
    }
}

#[derive(Deserialize)]
pub struct SetPasswordForm {
    new_password: String,
    confirm_password: String,
}

async fn set_password(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    session: Session,
    Path(id): Path<String>,
    form: Result<Form<SetPasswordForm>, FormRejection>,
) -> Redirect {
    let result = async {
        let id = user_id(&id)?;
        let Form(f) = form.map_err(unreadable)?;
        t.set_password(Some(admin.user()), id, &f.new_password, &f.confirm_password)
            .await
    }
    .await;
    match result {
        Ok(user) => {
            let done = format!(
                "New password set for {}: tell them in person or by a channel you trust. Their sessions have ended.",
                user.email
            );
            flash::ok(&session, done).await;
            Redirect::to("/admin/users")
        }
        Err(e) => report(&session, e, "/admin/users").await,
    }
}

#[derive(Deserialize)]
pub struct GrantForm {
    amount: String,
    #[serde(default)]
    reason: String,
    /// The grant's idempotency key, made when the form was rendered.
    #[serde(default)]
    key: String,
}

async fn grant(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    session: Session,
    Path(id): Path<String>,
    form: Result<Form<GrantForm>, FormRejection>,
) -> Redirect {
    let result = async {
        let id = user_id(&id)?;
        let Form(f) = form.map_err(unreadable)?;
        let amount =
            Credits::parse_grant(&f.amount).map_err(|e| Error::invalid("amount", e.to_string()))?;
        let user = t.user(id).await?;
        let key = Some(f.key.as_str()).filter(|k| !k.is_empty() && k.len() <= 100);
        let (_, new) = t
            .grant_credits(Some(admin.user().id), id, amount, Some(&f.reason), key)
            .await?;
        Ok::<_, Error>((user, amount, new))
    }
    .await;
    match result {
        Ok((user, amount, new)) => {
            let note = if new {
                ""
            } else {
                " (this grant was already recorded)"
            };
            flash::ok(
                &session,
                format!("Granted {amount} credits to {}{note}.", user.email),
            )
            .await;
            Redirect::to("/admin/users")
        }
        Err(e) => report(&session, e, "/admin/users").await,
    }
}

async fn cancel_edit(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    Path(id): Path<String>,
) -> Redirect {
    let back = format!("/edits/{id}");
    let result = match id.parse::<JobId>() {
        Ok(id) => t.cancel_job(who.user(), id).await,
        Err(_) => Err(Error::NotFound("edit")),
    };
    match result {
        Ok(job) if job.status == tollgate::model::JobStatus::Cancelled => {
            flash::ok(
                &session,
                format!(
                    "Cancelled. {} credits are back on your balance.",
                    job.credits
                ),
            )
            .await;
            Redirect::to(&back)
        }
        Ok(job) => {
            flash::error(
                &session,
                format!(
                    "It could not be cancelled: it is already {}.",
                    job.status.label().to_lowercase()
                ),
            )
            .await;
            Redirect::to(&back)
        }
        Err(e) => report(&session, e, "/edits").await,
    }
}

#[derive(Deserialize)]
pub struct RepairForm {
    #[serde(default)]
    instruction: String,
    /// The repair's idempotency key, made when the page was rendered: a
    /// double click or a resent form makes one repair.
    #[serde(default)]
    key: String,
}

async fn repair_edit(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    Path(id): Path<String>,
    form: Result<Form<RepairForm>, FormRejection>,
) -> Redirect {
    let back = format!("/edits/{id}");
    let result = async {
        let id = id.parse::<JobId>().map_err(|_| Error::NotFound("edit"))?;
        let Form(f) = form.map_err(unreadable)?;
        let body = serde_json::json!({"instruction": f.instruction});
        t.submit_repair(who.user(), None, id, Some(f.key.as_str()), &body)
            .await
    }
    .await;
    match result {
        Ok(s) => {
            let note = if !s.created {
                "This repair was already ordered.".to_string()
            } else if repair_was_waived(&t, who.user(), s.job.id).await {
                "Repair ordered, on us: the review found issues with the version before. We will compare it with the version you have and keep the better one.".to_string()
            } else {
                format!("Repair ordered; {} credits charged. We will compare it with the version you have and keep the better one.", s.job.credits)
            };
            flash::ok(&session, note).await;
            Redirect::to(&format!("/edits/{}", s.job.id))
        }
        Err(e) => report(&session, e, &back).await,
    }
}

/// Whether the repair's charge was given back at once (a free repair of a
/// version whose review found issues): its timeline says so.
async fn repair_was_waived(t: &Tollgate, user: &tollgate::store::User, repair: JobId) -> bool {
    t.job_events(user, repair).await.is_ok_and(|events| {
        events
            .iter()
            .any(|e| matches!(e.happening, Happening::Waived { .. }))
    })
}

/// "Make this mine": one version of an edit becomes the person's.
async fn choose_version(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    Path(id): Path<String>,
) -> Redirect {
    let back = format!("/edits/{id}");
    let result = async {
        let id = id.parse::<JobId>().map_err(|_| Error::NotFound("edit"))?;
        t.choose_version(who.user(), id).await
    }
    .await;
    match result {
        Ok(_) => {
            flash::ok(
                &session,
                "This version is yours now: My edits shows it, and a repair starts from it.",
            )
            .await;
            Redirect::to(&back)
        }
        Err(e) => report(&session, e, &back).await,
    }
}

#[derive(Deserialize)]
pub struct BudgetForm {
    day: String,
    #[serde(default)]
    cap_usd: String,
    #[serde(default)]
    reason: String,
    /// The page the form was on: the overview or the budget page.
    #[serde(default)]
    back: String,
}

/// Where a budget form returns: only the two pages that post one.
fn budget_back(form: &Result<Form<BudgetForm>, FormRejection>) -> &'static str {
    match form {
        Ok(Form(f)) if f.back == "/admin" => "/admin",
        _ => "/admin/budget",
    }
}

async fn set_cap(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    session: Session,
    form: Result<Form<BudgetForm>, FormRejection>,
) -> Redirect {
    let back = budget_back(&form);
    let result = async {
        let Form(f) = form.map_err(unreadable)?;
        let day = tollgate::usecases::budget::parse_day(&f.day)?;
        t.set_daily_cap(day, &f.cap_usd, Some(admin.user().id))
            .await
    }
    .await;
    match result {
        Ok(d) => {
            flash::ok(
                &session,
                format!("The cap for {} is now {}.", d.day, d.cap_usd.dollars()),
            )
            .await;
            Redirect::to(back)
        }
        Err(e) => report(&session, e, back).await,
    }
}

async fn halt_day(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    session: Session,
    form: Result<Form<BudgetForm>, FormRejection>,
) -> Redirect {
    let back = budget_back(&form);
    let result = async {
        let Form(f) = form.map_err(unreadable)?;
        let day = tollgate::usecases::budget::parse_day(&f.day)?;
        t.halt_day(day, &f.reason, Some(admin.user().id)).await
    }
    .await;
    match result {
        Ok(d) => {
            flash::ok(
                &session,
                format!(
                    "Spending is halted for {}: no paid call is sent until it is resumed.",
                    d.day
                ),
            )
            .await;
            Redirect::to(back)
        }
        Err(e) => report(&session, e, back).await,
    }
}

async fn resume_day(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    session: Session,
    form: Result<Form<BudgetForm>, FormRejection>,
) -> Redirect {
    let back = budget_back(&form);
    let result = async {
        let Form(f) = form.map_err(unreadable)?;
        let day = tollgate::usecases::budget::parse_day(&f.day)?;
        t.resume_day(day, Some(&f.reason), Some(admin.user().id))
            .await
    }
    .await;
    match result {
        Ok(d) => {
            flash::ok(&session, format!("Spending on {} is resumed.", d.day)).await;
            Redirect::to(back)
        }
        Err(e) => report(&session, e, back).await,
    }
}
