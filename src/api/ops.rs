//! `/healthz` (the process answers), `/readyz` (its dependencies do) and
//! `/metrics` (Prometheus text).

use crate::wire::HealthObject;
use crate::Tollgate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(super::metrics::metrics))
}

/// The process is up.
#[utoipa::path(
    get, path = "/healthz", tag = "operations", operation_id = "healthz",
    responses((status = 200, description = "Up.", body = HealthObject))
)]
pub(super) async fn healthz() -> Json<HealthObject> {
    Json(HealthObject {
        status: "ok".into(),
        database: None,
    })
}

/// The database and the object store answer.
#[utoipa::path(
    get, path = "/readyz", tag = "operations", operation_id = "readyz",
    responses(
        (status = 200, description = "Ready.", body = HealthObject),
        (status = 503, description = "A dependency does not answer.", body = HealthObject),
    )
)]
pub(super) async fn readyz(State(t): State<Tollgate>) -> (StatusCode, Json<HealthObject>) {
    match t.ready().await {
        Ok(()) => (
            StatusCode::OK,
            Json(HealthObject {
                status: "ready".into(),
                database: Some("ok".into()),
            }),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(HealthObject {
                    status: "not_ready".into(),
                    database: Some("unreachable".into()),
                }),
            )
        }
    }
}
