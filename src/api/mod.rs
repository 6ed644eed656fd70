//! The `/v1` JSON API and the operations endpoints, as one axum router over
//! the engine. Handlers are thin: an extractor checks the role, the engine
//! does the work, `error` shapes every failure.

mod assets;
mod budget;
mod credits;
mod error;
mod jobs;
mod json;
mod me;
mod metrics;
mod ops;
mod users;

pub use error::error_body;
pub use jobs::{attempt_json, event_json, job_json, job_json_with};
pub use json::ApiJson;

use crate::Tollgate;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

/// Streams a stored object to the one who may see it: never cached by
/// anyone else, never sniffed into another type.
pub(crate) fn private_object(
    content_type: &str,
    body: crate::storage::ObjectBody,
) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    use axum::response::IntoResponse;
    let size = body.meta.size;
    let mut response = axum::body::Body::from_stream(body.stream).into_response();
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=3600"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Largest JSON body the API reads.
pub const JSON_BODY_BYTES_MAX: usize = 64 * 1024;

/// Only `/healthz` and `/readyz`: what a node without pages serves.
pub fn ops_router(state: Tollgate) -> Router {
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(metrics::metrics))
        .with_state(state)
}

/// `GET /v1/openapi.json`: the API described in OpenAPI 3.1. Written by
/// hand next to the handlers; a test checks every path in it is served.
pub const OPENAPI: &str = include_str!("openapi.json");

async fn openapi() -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
}

/// `/healthz`, `/readyz` and everything under `/v1`. The caller adds the
/// session layer (the app does; so do the tests).
pub fn router(state: Tollgate) -> Router {
    let v1 = Router::new()
        .route("/me", get(me::show))
        .route("/credits", get(credits::show))
        .route("/users", get(users::list))
        .route("/users/{id}/credit-grants", post(users::grant))
        .route("/jobs", post(jobs::submit).get(jobs::list))
        .route("/jobs/{id}", get(jobs::show))
        .route("/jobs/{id}/events", get(jobs::events))
        .route("/jobs/{id}/attempts", get(jobs::attempts))
        .route("/jobs/{id}/output", get(jobs::output))
        .route("/jobs/{id}/cancel", post(jobs::cancel))
        .route("/quote", post(jobs::quote))
        .route("/budget/{day}", get(budget::show).put(budget::set_cap))
        .route("/budget/{day}/halt", post(budget::halt))
        .route("/budget/{day}/resume", post(budget::resume))
        .route("/catalogue", get(jobs::catalogue))
        .route("/openapi.json", get(openapi))
        .route("/assets/{id}", get(assets::show))
        .route("/assets/{id}/content", get(assets::content))
        .route(
            "/assets",
            post(assets::upload).layer(DefaultBodyLimit::max(crate::assets::ASSET_BYTES_MAX)),
        )
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(JSON_BODY_BYTES_MAX));
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(metrics::metrics))
        .nest("/v1", v1)
        .with_state(state)
}
