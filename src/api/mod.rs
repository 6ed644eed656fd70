//! The `/v1` JSON API and the operations endpoints, as one axum router over
//! the engine. Handlers are thin: an extractor checks the role, the engine
//! does the work, `error` shapes every failure.

mod assets;
mod budget;
mod error;
mod jobs;
mod json;
mod me;
mod metrics;
mod ops;
mod parked;
mod spend;
mod users;
mod webhooks;

pub use error::error_body;
pub use json::ApiJson;

use crate::Tollgate;
use axum::extract::DefaultBodyLimit;
use axum::Router;
use std::sync::OnceLock;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi as Document;
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Streams a stored object to the one who may see it: never cached by
/// anyone else, never sniffed into another type, never run as a page of
/// our origin (a sandbox with nothing allowed), and saved under `name`.
pub(crate) fn private_object(
    content_type: &str,
    name: &str,
    body: crate::storage::ObjectBody,
) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    use axum::response::IntoResponse;
    let size = body.meta.size;
    let mut response = axum::body::Body::from_stream(body.stream).into_response();
    let h = response.headers_mut();
    // Only the types we store are ever named; anything else is bytes.
    let served =
        crate::model::served_content_type(content_type).unwrap_or("application/octet-stream");
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(served));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=3600"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    let ext = served.rsplit('/').next().unwrap_or("bin");
    let ext = if ext == "octet-stream" { "bin" } else { ext };
    let safe: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(80)
        .collect();
    if let Ok(v) = HeaderValue::from_str(&format!("inline; filename=\"{safe}.{ext}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    response
}

/// Largest JSON body the API reads.
pub const JSON_BODY_BYTES_MAX: usize = 64 * 1024;

/// What the document says before the routes add themselves.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tollgate",
        description = "The control plane for paid AI generation: submit image edits and videos, \
            charged once; watch them run; read every provider call's cost (null when nobody could \
            price it, never zero). Every error is `{\"error\": {\"code\", \"message\", \"details\"}}`. \
            Programs send `Authorization: Bearer tg_...`; the browser uses its session."
    ),
    modifiers(&WaysIn),
    tags(
        (name = "jobs", description = "Paid generation jobs, their attempts and timeline."),
        (name = "assets", description = "Private uploads: photos and masks."),
        (name = "account", description = "Who you are and your credits."),
        (name = "admin", description = "Users, credit grants and the daily spending breaker (admins)."),
        (name = "webhooks", description = "Signed webhooks: endpoints, secrets, deliveries and replays."),
        (name = "parked", description = "Parked work: the reviewer queue and decisions (reviewers and admins)."),
        (name = "operations", description = "Health, readiness, metrics and this document."),
    )
)]
struct ApiDoc;

/// Both ways in: an API token as a bearer token, or the browser's session.
struct WaysIn;

impl Modify for WaysIn {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("tg_...")
                    .description(Some(
                        "An API token made on the Account page or with `tollgate token create`.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "session_cookie",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new("tollgate_session"))),
        );
    }
}

/// `GET /v1/openapi.json`: this document, generated from the routes.
#[utoipa::path(
    get, path = "/openapi.json", tag = "operations", operation_id = "openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document.", body = Object))
)]
async fn openapi_json() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        document_json().to_string(),
    )
        .into_response()
}

/// The routes under `/v1`, each with its operation: a route cannot be
/// served undocumented, nor documented and not served.
fn v1() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new()
        .merge(jobs::router())
        .merge(assets::router())
        .merge(me::router())
        .merge(users::router())
        .merge(budget::router())
        .merge(spend::router())
        .merge(parked::router())
        .merge(webhooks::router())
        .routes(routes!(openapi_json))
}

/// The body length a request declares, if it declares one.
fn declared_length(headers: &axum::http::HeaderMap) -> Option<usize> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The routers and the document they make together.
fn parts() -> (Router<Tollgate>, Router<Tollgate>, Document) {
    let (v1, v1_doc) = v1().split_for_parts();
    let (ops, ops_doc) = ops::router().split_for_parts();
    let mut doc = ApiDoc::openapi().nest("/v1", v1_doc);
    doc.merge(ops_doc);
    (ops, v1, doc)
}

/// The OpenAPI document, as the code generates it.
pub fn document() -> &'static Document {
    static DOC: OnceLock<Document> = OnceLock::new();
    DOC.get_or_init(|| parts().2)
}

fn document_json() -> &'static serde_json::Value {
    static JSON: OnceLock<serde_json::Value> = OnceLock::new();
    JSON.get_or_init(|| serde_json::to_value(document()).unwrap_or_default())
}

/// The internal listener (`TOLLGATE_OPS_LISTEN`): `/healthz`, `/readyz`,
/// `/metrics` without a token, and the OpenAPI document.
pub fn internal_router(state: Tollgate) -> Router {
    use axum::routing::get;
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(metrics::metrics_internal))
        .route("/v1/openapi.json", get(openapi_json))
        .with_state(state)
}

/// Only `/healthz`, `/readyz` and `/metrics`: what a node without pages serves.
pub fn ops_router(state: Tollgate) -> Router {
    parts().0.with_state(state)
}

/// `/healthz`, `/readyz`, `/metrics` and everything under `/v1`. The caller
/// adds the session layer (the app does; so do the tests).
pub fn router(state: Tollgate) -> Router {
    let (ops, v1, _) = parts();
    let v1 = v1
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(JSON_BODY_BYTES_MAX))
        .layer(axum::middleware::map_response(no_store));
    ops.nest("/v1", v1).with_state(state)
}

/// Issue 29, 7: what `/v1` answers is one caller's (a token, a secret, a
/// balance): no cache keeps it, unless the answer says otherwise (a stored
/// object is `private`, for its owner's browser only).
async fn no_store(mut response: axum::response::Response) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    response
        .headers_mut()
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}
