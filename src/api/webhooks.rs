//! Webhooks: `/v1/webhook-endpoints` (each person's own; a secret shown
//! once, rotation, a test event), `GET /v1/webhook-secret` (the account
//! secret for a job's own webhook_url), `/v1/webhook-deliveries` (the
//! caller's, or everyone's for admins) and replays (admins).

use super::ApiJson;
use crate::model::{DeliveryId, DeliveryState, JobId, WebhookEndpointId, WebhookEvent};
use crate::store::{Delivery, WebhookEndpoint};
use crate::usecases::auth::{AdminOnly, AnyUser, Authorized};
use crate::usecases::error::{Error, Result};
use crate::usecases::webhooks::DeliveryQuery;
use crate::wire::{millis, millis_opt, ErrorBody};
use crate::Tollgate;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new()
        .routes(routes!(create_endpoint, list_endpoints))
        .routes(routes!(delete_endpoint))
        .routes(routes!(rotate_secret))
        .routes(routes!(send_test))
        .routes(routes!(replay_endpoint))
        .routes(routes!(account_secret))
        .routes(routes!(rotate_account_secret))
        .routes(routes!(list_deliveries))
        .routes(routes!(replay_delivery))
}

fn endpoint_id(raw: &str) -> Result<WebhookEndpointId> {
    raw.parse().map_err(|_| Error::NotFound("webhook endpoint"))
}

/// A webhook endpoint (its secret is only in the answer that made it).
#[derive(Serialize, ToSchema)]
pub struct EndpointObject {
    #[schema(value_type = String, format = Uuid)]
    pub id: WebhookEndpointId,
    pub url: String,
    pub events: Vec<WebhookEvent>,
    #[serde(serialize_with = "millis")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// Until then the previous secret signs too (after a rotation).
    #[serde(serialize_with = "millis_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// Set when every try has failed since then.
    #[serde(serialize_with = "millis_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub failing_since: Option<DateTime<Utc>>,
    pub disabled: bool,
    /// Why it was disabled (a 410, or five days of failures).
    pub disabled_reason: Option<String>,
}

impl From<&WebhookEndpoint> for EndpointObject {
    fn from(e: &WebhookEndpoint) -> Self {
        EndpointObject {
            id: e.id,
            url: e.url.clone(),
            events: e.events.clone(),
            created_at: e.created_at,
            previous_secret_expires_at: e.previous_expires_at.filter(|t| *t > Utc::now()),
            failing_since: e.failing_since,
            disabled: e.disabled_at.is_some(),
            disabled_reason: e.disabled_reason.clone(),
        }
    }
}

/// A new endpoint, or a rotated secret: the secret is shown this once.
#[derive(Serialize, ToSchema)]
pub struct EndpointWithSecret {
    #[serde(flatten)]
    pub endpoint: EndpointObject,
    /// `whsec_` and base64 of 32 random bytes. Store it now.
    #[schema(example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]
    pub secret: String,
}

#[derive(Serialize, ToSchema)]
pub struct EndpointList {
    pub data: Vec<EndpointObject>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointBody {
    /// `https://` (plain `http://` only to networks the operator allows);
    /// internal addresses are refused.
    #[schema(min_length = 1, max_length = 2000)]
    pub url: String,
    /// The events it wants; all of them when absent or empty.
    #[serde(default)]
    #[schema(value_type = Vec<WebhookEvent>)]
    pub events: Vec<String>,
}

/// Adds an endpoint for the caller's own jobs' events.
#[utoipa::path(
    post, path = "/webhook-endpoints", tag = "webhooks", operation_id = "create_webhook_endpoint",
    request_body = EndpointBody,
    responses(
        (status = 201, description = "The endpoint and its secret, shown once.", body = EndpointWithSecret,
            links(
                ("Rotate" = (operation_id = "rotate_webhook_secret", parameters(("id" = "$response.body#/id")))),
                ("Delete" = (operation_id = "delete_webhook_endpoint", parameters(("id" = "$response.body#/id")))),
            )),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 409, description = "Too many endpoints.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "A URL that is not https, or that resolves inside our network; an unknown event.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn create_endpoint(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    ApiJson(body): ApiJson<EndpointBody>,
) -> Result<(StatusCode, Json<EndpointWithSecret>)> {
    let made = t
        .create_webhook_endpoint(who.user(), &body.url, &body.events)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(EndpointWithSecret {
            endpoint: EndpointObject::from(&made.endpoint),
            secret: made.secret,
        }),
    ))
}

/// The caller's endpoints.
#[utoipa::path(
    get, path = "/webhook-endpoints", tag = "webhooks", operation_id = "list_webhook_endpoints",
    responses(
        (status = 200, description = "The endpoints.", body = EndpointList),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn list_endpoints(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
) -> Result<Json<EndpointList>> {
    let data = t
        .webhook_endpoints(who.user())
        .await?
        .iter()
        .map(EndpointObject::from)
        .collect();
    Ok(Json(EndpointList { data }))
}

/// Deletes one of the caller's endpoints; its pending deliveries end dead.
#[utoipa::path(
    delete, path = "/webhook-endpoints/{id}", tag = "webhooks", operation_id = "delete_webhook_endpoint",
    params(("id" = String, Path, format = Uuid, description = "The endpoint's id.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such endpoint of yours.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn delete_endpoint(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    t.delete_webhook_endpoint(who.user(), endpoint_id(&id)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new secret; for 24 hours every delivery carries signatures by both.
#[utoipa::path(
    post, path = "/webhook-endpoints/{id}/rotate-secret", tag = "webhooks", operation_id = "rotate_webhook_secret",
    params(("id" = String, Path, format = Uuid, description = "The endpoint's id.")),
    responses(
        (status = 201, description = "The new secret, shown once.", body = EndpointWithSecret),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such endpoint of yours.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn rotate_secret(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<EndpointWithSecret>)> {
    let made = t
        .rotate_webhook_secret(who.user(), endpoint_id(&id)?)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(EndpointWithSecret {
            endpoint: EndpointObject::from(&made.endpoint),
            secret: made.secret,
        }),
    ))
}

#[derive(Serialize, ToSchema)]
pub struct Queued {
    /// The delivery's id (see GET /v1/webhook-deliveries).
    #[schema(value_type = String, format = Uuid)]
    pub delivery_id: DeliveryId,
}

/// Sends a `webhook.test` event to one of the caller's endpoints, tried
/// once: a few a minute per endpoint and per person.
#[utoipa::path(
    post, path = "/webhook-endpoints/{id}/test", tag = "webhooks", operation_id = "send_test_webhook",
    params(("id" = String, Path, format = Uuid, description = "The endpoint's id.")),
    responses(
        (status = 202, description = "Queued for delivery.", body = Queued),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such endpoint of yours.", body = ErrorBody),
        (status = 409, description = "The endpoint is disabled.", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: more than 5 test events a minute for this endpoint, or 20 for this person. Retry after the header's seconds.", body = ErrorBody,
            headers(("Retry-After" = String, description = "seconds until the next test event is accepted"))),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn send_test(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Queued>)> {
    let delivery_id = t.send_test_webhook(who.user(), endpoint_id(&id)?).await?;
    Ok((StatusCode::ACCEPTED, Json(Queued { delivery_id })))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaySinceBody {
    /// Replays every dead delivery of the endpoint made since then.
    #[schema(value_type = String, format = DateTime)]
    pub since: DateTime<Utc>,
    /// False (the default) only counts them; true sends them.
    #[serde(default)]
    pub confirm: bool,
}

#[derive(Serialize, ToSchema)]
pub struct ReplayCount {
    /// How many dead deliveries match (and, when confirmed, were replayed).
    pub count: usize,
    pub replayed: bool,
}

/// Admins: replays everything dead for an endpoint since a time, in one
/// action (without `confirm`, only counts it).
#[utoipa::path(
    post, path = "/webhook-endpoints/{id}/replay", tag = "webhooks", operation_id = "replay_webhook_endpoint",
    params(("id" = String, Path, format = Uuid, description = "The endpoint's id.")),
    request_body = ReplaySinceBody,
    responses(
        (status = 200, description = "The count, nothing sent.", body = ReplayCount),
        (status = 202, description = "Replayed.", body = ReplayCount),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not an admin.", body = ErrorBody),
        (status = 404, description = "No such endpoint.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "A bad time.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn replay_endpoint(
    State(t): State<Tollgate>,
    who: Authorized<AdminOnly>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ReplaySinceBody>,
) -> Result<(StatusCode, Json<ReplayCount>)> {
    let id = endpoint_id(&id)?;
    if body.confirm {
        let count = t.replay_dead_since(who.user(), id, body.since).await?;
        Ok((
            StatusCode::ACCEPTED,
            Json(ReplayCount {
                count,
                replayed: true,
            }),
        ))
    } else {
        let count = t.dead_since(who.user(), id, body.since).await?.len();
        Ok((
            StatusCode::OK,
            Json(ReplayCount {
                count,
                replayed: false,
            }),
        ))
    }
}

#[derive(Serialize, ToSchema)]
pub struct SecretObject {
    /// Signs every delivery to a job's own `webhook_url`.
    pub secret: String,
}

/// The caller's account secret, which signs deliveries to a job's own
/// `webhook_url` (made on first use).
#[utoipa::path(
    get, path = "/webhook-secret", tag = "webhooks", operation_id = "account_webhook_secret",
    responses(
        (status = 200, description = "The secret.", body = SecretObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn account_secret(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
) -> Result<Json<SecretObject>> {
    Ok(Json(SecretObject {
        secret: t.account_webhook_secret(who.user()).await?,
    }))
}

/// A new account secret, shown once; the previous one keeps signing
/// deliveries to jobs' own `webhook_url`s beside it for 24 hours.
#[utoipa::path(
    post, path = "/webhook-secret/rotate", tag = "webhooks", operation_id = "rotate_account_webhook_secret",
    responses(
        (status = 201, description = "The new secret.", body = SecretObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn rotate_account_secret(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
) -> Result<(StatusCode, Json<SecretObject>)> {
    let secret = t.rotate_account_webhook_secret(who.user()).await?;
    Ok((StatusCode::CREATED, Json(SecretObject { secret })))
}

/// One delivery of one event to one target.
#[derive(Serialize, ToSchema)]
pub struct DeliveryObject {
    /// The `webhook-id`: the job and the event, stable across retries and replays.
    pub id: String,
    /// This delivery's own id (one per target), for replays.
    #[schema(value_type = String, format = Uuid)]
    pub delivery_id: DeliveryId,
    pub event: WebhookEvent,
    #[schema(value_type = Option<String>, format = Uuid)]
    pub job_id: Option<JobId>,
    #[schema(value_type = Option<String>, format = Uuid)]
    pub endpoint_id: Option<WebhookEndpointId>,
    pub url: String,
    pub state: DeliveryState,
    pub attempts: i32,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    #[serde(serialize_with = "millis")]
    #[schema(value_type = String, format = DateTime)]
    pub next_at: DateTime<Utc>,
    pub replays: i32,
    #[serde(serialize_with = "millis")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "millis_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub delivered_at: Option<DateTime<Utc>>,
}

impl From<&Delivery> for DeliveryObject {
    fn from(d: &Delivery) -> Self {
        DeliveryObject {
            id: d.webhook_id.clone(),
            delivery_id: d.id,
            event: d.event,
            job_id: d.job_id,
            endpoint_id: d.endpoint_id,
            url: d.url.clone(),
            state: d.state,
            attempts: d.attempts,
            last_status: d.last_status,
            last_error: d.last_error.clone(),
            next_at: d.next_at,
            replays: d.replays,
            created_at: d.created_at,
            delivered_at: d.delivered_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct DeliveryPage {
    pub data: Vec<DeliveryObject>,
    pub next_cursor: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct DeliveryListQuery {
    #[param(value_type = Option<DeliveryState>)]
    state: Option<String>,
    /// Only deliveries to this endpoint.
    #[param(value_type = Option<String>, format = Uuid)]
    endpoint: Option<String>,
    /// 1 to 100 (50 when absent).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
    #[param(max_length = 200)]
    cursor: Option<String>,
}

/// Deliveries, newest first: the caller's own, or everyone's for admins.
#[utoipa::path(
    get, path = "/webhook-deliveries", tag = "webhooks", operation_id = "list_webhook_deliveries",
    params(DeliveryListQuery),
    responses(
        (status = 200, description = "A page of deliveries.", body = DeliveryPage),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 422, description = "A bad state, endpoint, limit or cursor.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn list_deliveries(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    query: std::result::Result<Query<DeliveryListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DeliveryPage>> {
    let Query(q) = query.map_err(|e| Error::invalid("query", e.body_text()))?;
    if q.state.as_deref() == Some("") {
        return Err(Error::invalid(
            "state",
            "must be pending, delivered or dead",
        ));
    }
    let query = DeliveryQuery::parse(
        q.state.as_deref(),
        q.endpoint.as_deref(),
        q.limit,
        q.cursor.as_deref(),
    )?;
    let page = t.deliveries(who.user(), &query).await?;
    Ok(Json(DeliveryPage {
        data: page.items.iter().map(DeliveryObject::from).collect(),
        next_cursor: page.next,
    }))
}

/// Admins: sends a delivered or dead delivery again, the same webhook-id
/// and body, a new timestamp and signature. `{id}` is the delivery's own id.
#[utoipa::path(
    post, path = "/webhook-deliveries/{id}/replay", tag = "webhooks", operation_id = "replay_webhook_delivery",
    params(("id" = String, Path, format = Uuid, description = "The delivery's own id (delivery_id).")),
    responses(
        (status = 202, description = "Queued again.", body = DeliveryObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not an admin.", body = ErrorBody),
        (status = 404, description = "No such delivery.", body = ErrorBody),
        (status = 409, description = "Still pending.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn replay_delivery(
    State(t): State<Tollgate>,
    who: Authorized<AdminOnly>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<DeliveryObject>)> {
    let id: DeliveryId = id.parse().map_err(|_| Error::NotFound("delivery"))?;
    let d = t.replay_delivery(who.user(), id).await?;
    Ok((StatusCode::ACCEPTED, Json(DeliveryObject::from(&d))))
}
