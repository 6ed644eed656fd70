//! `GET /v1/me`: who the token or session belongs to.

use crate::auth::{AnyUser, Authorized};
use axum::Json;
use serde_json::{json, Value};

pub async fn show(who: Authorized<AnyUser>) -> Json<Value> {
    let u = who.user();
    Json(json!({ "id": u.id, "email": u.email, "role": u.role }))
}
