//! Webhook form posts: a person adds, tests, rotates and deletes their
//! endpoints and rotates their account secret (a new secret is shown once); an admin replays
//! one delivery, or everything dead for an endpoint since a time.

use super::forms::report;
use crate::data::flash;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::response::Redirect;
use axum::routing::{post, MethodRouter};
use axum::{Form, Router};
use serde::Deserialize;
use tollgate::model::{DeliveryId, WebhookEndpointId, WebhookEvent};
use tollgate::usecases::auth::{AdminOnly, AnyUser, Authorized};
use tollgate::{Error, Tollgate};
use tower_sessions::Session;

/// The webhook forms, each once: the router is made from this list, and the
/// role matrix test (`app/tests/roles.rs`) reads it.
pub fn routes() -> Vec<(&'static str, MethodRouter<Tollgate>)> {
    vec![
        ("/account/webhooks", post(add)),
        ("/account/webhooks/{id}/test", post(test)),
        ("/account/webhooks/{id}/rotate", post(rotate)),
        (
            "/account/webhook-secret/rotate",
            post(rotate_account_secret),
        ),
        ("/account/webhooks/{id}/delete", post(delete)),
        ("/admin/webhooks/{id}/replay", post(replay)),
        ("/admin/webhooks/endpoints/{id}/replay", post(replay_since)),
    ]
}

pub fn router(tollgate: Tollgate) -> Router {
    super::routed(routes()).with_state(tollgate)
}

const BACK: &str = "/account";

fn endpoint_id(raw: &str) -> Result<WebhookEndpointId, Error> {
    raw.parse().map_err(|_| Error::NotFound("webhook endpoint"))
}

#[derive(Deserialize)]
pub struct AddForm {
    #[serde(default)]
    url: String,
    ev_succeeded: Option<String>,
    ev_failed: Option<String>,
    ev_cancelled: Option<String>,
    ev_parked: Option<String>,
}

/// The message in the flash; the secret in its own short-lived cookie,
/// never in the session row.
async fn with_secret(
    t: &Tollgate,
    session: &Session,
    message: String,
    secret: &str,
) -> axum::response::Response {
    flash::ok(session, message).await;
    flash::redirect_with_secret(session, BACK, secret, t.config().secure_cookies).await
}

async fn add(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    form: Result<Form<AddForm>, FormRejection>,
) -> axum::response::Response {
    let result = async {
        let Form(f) = form.map_err(|e| (Error::invalid("form", e.body_text()), String::new()))?;
        let typed = f.url.clone();
        let events: Vec<String> = [
            (&f.ev_succeeded, WebhookEvent::Succeeded),
            (&f.ev_failed, WebhookEvent::Failed),
            (&f.ev_cancelled, WebhookEvent::Cancelled),
            (&f.ev_parked, WebhookEvent::Parked),
        ]
        .into_iter()
        .filter(|(on, _)| on.is_some())
        .map(|(_, e)| e.as_str().to_string())
        .collect();
        if events.is_empty() {
            return Err((Error::invalid("events", "choose at least one event"), typed));
        }
        t.create_webhook_endpoint(who.user(), &f.url, &events)
            .await
            .map_err(|e| (e, typed))
    }
    .await;
    match result {
        Ok(made) => {
            with_secret(
                &t,
                &session,
                format!(
                    "Endpoint added for {}. Its signing secret:",
                    made.endpoint.url
                ),
                &made.secret,
            )
            .await
        }
        Err((e, typed)) => refused_endpoint(e, &typed).into_response(),
    }
}

/// Back to the form with what was typed and why it was refused, beside
/// the form rather than at the top of the page.
fn refused_endpoint(e: Error, typed: &str) -> Redirect {
    let why = match &e {
        Error::Invalid { message, .. } => message.clone(),
        other => other.public_message(),
    };
    Redirect::to(&format!(
        "{BACK}?webhook_url={}&webhook_error={}#add-endpoint",
        urlencoding::encode(typed),
        urlencoding::encode(&why)
    ))
}

async fn test(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    Path(id): Path<String>,
) -> Redirect {
    let result = async { t.send_test_webhook(who.user(), endpoint_id(&id)?).await }.await;
    match result {
        Ok(_) => {
            flash::ok(
                &session,
                "A test event is on its way; its delivery shows below.",
            )
            .await;
            Redirect::to(BACK)
        }
        Err(e) => report(&session, e, BACK).await,
    }
}

async fn rotate(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    Path(id): Path<String>,
) -> axum::response::Response {
    let result = async { t.rotate_webhook_secret(who.user(), endpoint_id(&id)?).await }.await;
    match result {
        Ok(made) => {
            with_secret(
                &t,
                &session,
                "New secret made. For 24 hours deliveries carry signatures by both the old and the new one:".into(),
                &made.secret,
            )
            .await
        }
        Err(e) => report(&session, e, BACK).await.into_response(),
    }
}

/// A new account secret (it signs deliveries to a job's own webhook_url),
/// shown once; the old one keeps signing beside it for 24 hours.
async fn rotate_account_secret(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
) -> axum::response::Response {
    match t.rotate_account_webhook_secret(who.user()).await {
        Ok(secret) => {
            with_secret(
                &t,
                &session,
                "New account secret made. For 24 hours deliveries to your jobs' own webhook URLs carry signatures by both the old and the new one:".into(),
                &secret,
            )
            .await
        }
        Err(e) => report(&session, e, BACK).await.into_response(),
    }
}

async fn delete(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    session: Session,
    Path(id): Path<String>,
) -> Redirect {
    let result = async {
        t.delete_webhook_endpoint(who.user(), endpoint_id(&id)?)
            .await
    }
    .await;
    match result {
        Ok(()) => {
            flash::ok(&session, "Endpoint deleted.").await;
            Redirect::to(BACK)
        }
        Err(e) => report(&session, e, BACK).await,
    }
}

async fn replay(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    session: Session,
    Path(id): Path<String>,
) -> Redirect {
    let back = "/admin/webhooks";
    let result = async {
        let id: DeliveryId = id.parse().map_err(|_| Error::NotFound("delivery"))?;
        t.replay_delivery(admin.user(), id).await
    }
    .await;
    match result {
        Ok(d) => {
            flash::ok(
                &session,
                format!(
                    "Replaying {}: the same id and body, signed anew.",
                    d.webhook_id
                ),
            )
            .await;
            Redirect::to(back)
        }
        Err(e) => report(&session, e, back).await,
    }
}

#[derive(Deserialize)]
pub struct SinceForm {
    #[serde(default)]
    since: String,
}

async fn replay_since(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    session: Session,
    Path(id): Path<String>,
    form: Result<Form<SinceForm>, FormRejection>,
) -> Redirect {
    let back = "/admin/webhooks?state=dead";
    let result = async {
        let Form(f) = form.map_err(|e| Error::invalid("form", e.body_text()))?;
        let since = chrono::NaiveDateTime::parse_from_str(&f.since, "%Y-%m-%dT%H:%M")
            .map(|n| n.and_utc())
            .map_err(|_| Error::invalid("since", "must be a time like 2026-12-01T09:00"))?;
        t.replay_dead_since(admin.user(), endpoint_id(&id)?, since)
            .await
    }
    .await;
    match result {
        Ok(n) => {
            flash::ok(
                &session,
                format!(
                    "Replaying {n} dead deliver{}.",
                    if n == 1 { "y" } else { "ies" }
                ),
            )
            .await;
            Redirect::to(back)
        }
        Err(e) => report(&session, e, back).await,
    }
}
