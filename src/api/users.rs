//! Admin: `GET /v1/users` and `POST /v1/users/{id}/credit-grants`
//! (`Idempotency-Key` optional; with it, the same grant twice is one grant).

use super::ApiJson;
use crate::model::{Credits, UserId};
use crate::usecases::auth::{AdminOnly, Authorized};
use crate::usecases::error::{Error, Result};
use crate::wire::{ErrorBody, LedgerEntryObject, UserList, UserObject};
use crate::Tollgate;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new()
        .routes(routes!(list_users))
        .routes(routes!(grant_credits))
}

/// Every person and program, by email.
#[utoipa::path(
    get, path = "/users", tag = "admin", operation_id = "list_users",
    responses(
        (status = 200, description = "The users.", body = UserList),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not an admin.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn list_users(
    State(t): State<Tollgate>,
    _admin: Authorized<AdminOnly>,
) -> Result<Json<UserList>> {
    let users = t.list_users().await?;
    Ok(Json(UserList {
        data: users.iter().map(UserObject::from).collect(),
    }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantBody {
    /// Credits to add (1 to 1,000,000): a whole number.
    #[schema(minimum = 1, maximum = 1_000_000)]
    #[serde(deserialize_with = "whole_number")]
    amount: i64,
    #[schema(max_length = 500)]
    reason: Option<String>,
}

/// A whole number, written `5` or `5.0` (JSON does not tell them apart);
/// `5.5` is refused.
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<i64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    if let Some(i) = n.as_i64() {
        return Ok(i);
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
        _ => Err(serde::de::Error::custom("expected a whole number")),
    }
}

/// `Idempotency-Key`: optional here; with it, the same grant twice is one.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
struct OptionalIdempotencyKey {
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = "^[ -~]+$"
    )]
    idempotency_key: Option<String>,
}

/// Reads an `Idempotency-Key` header: 1 to 255 printable ASCII characters.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let s = v.to_str().map_err(|_| bad_key())?;
    if s.is_empty() || s.len() > 255 || !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(bad_key());
    }
    Ok(Some(s.to_string()))
}

fn bad_key() -> Error {
    Error::BadRequest {
        status: 400,
        code: "INVALID_IDEMPOTENCY_KEY",
        message: "Idempotency-Key must be 1 to 255 printable ASCII characters".into(),
    }
}

/// Appends a grant to a user's ledger.
#[utoipa::path(
    post, path = "/users/{id}/credit-grants", tag = "admin", operation_id = "grant_credits",
    params(("id" = UserId, Path, description = "The user's id."), OptionalIdempotencyKey),
    request_body = GrantBody,
    responses(
        (status = 201, description = "The new ledger entry.", body = LedgerEntryObject),
        (status = 200, description = "The entry made earlier under this key.", body = LedgerEntryObject),
        (status = 400, description = "A bad Idempotency-Key, or malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not an admin.", body = ErrorBody),
        (status = 404, description = "No such user.", body = ErrorBody),
        (status = 409, description = "This Idempotency-Key was used for another grant.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "Invalid fields (details name them).", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn grant_credits(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<GrantBody>,
) -> Result<(StatusCode, Json<LedgerEntryObject>)> {
    let id: UserId = id.parse().map_err(|_| Error::NotFound("user"))?;
    let key = idempotency_key(&headers)?;
    let (entry, new) = t
        .grant_credits(
            Some(admin.user().id),
            id,
            Credits(body.amount),
            body.reason.as_deref(),
            key.as_deref(),
        )
        .await?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(LedgerEntryObject::from(&entry))))
}
