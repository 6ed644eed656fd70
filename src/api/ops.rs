//! `/healthz` (the process answers) and `/readyz` (its dependencies do).

use crate::Tollgate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

pub async fn readyz(State(t): State<Tollgate>) -> (StatusCode, Json<Value>) {
    match t.ready().await {
        Ok(()) => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "database": "ok" })),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "status": "not_ready", "database": "unreachable" })),
            )
        }
    }
}
