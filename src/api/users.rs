//! Admin: `GET /v1/users` and `POST /v1/users/{id}/credit-grants`
//! (`Idempotency-Key` optional; with it, the same grant twice is one grant).

use super::credits::entry_json;
use super::ApiJson;
use crate::auth::{AdminOnly, Authorized};
use crate::error::{Error, Result};
use crate::model::{Credits, UserId};
use crate::store::User;
use crate::Tollgate;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

pub fn user_json(u: &User) -> Value {
    json!({
        "id": u.id, "email": u.email, "role": u.role, "disabled": u.disabled,
        "balance": u.balance,
        "created_at": u.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    })
}

pub async fn list(State(t): State<Tollgate>, _admin: Authorized<AdminOnly>) -> Result<Json<Value>> {
    let users = t.list_users().await?;
    Ok(Json(
        json!({ "data": users.iter().map(user_json).collect::<Vec<_>>() }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantBody {
    amount: i64,
    reason: Option<String>,
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

pub async fn grant(
    State(t): State<Tollgate>,
    admin: Authorized<AdminOnly>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<GrantBody>,
) -> Result<(StatusCode, Json<Value>)> {
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
    Ok((status, Json(entry_json(&entry))))
}
