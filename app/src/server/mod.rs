//! The server side of the app (feature `ssr`): the axum router that joins
//! the pages, the form handlers and the engine's `/v1` API, behind the
//! session layer, the role guard and the cross-site check.

pub mod forms;
pub mod guard;
pub mod listen;
pub mod review;
pub mod webhooks;

use crate::app::{shell, App};
use axum::extract::FromRef;
use axum::http::HeaderValue;
use axum::response::Redirect;
use axum::routing::get;
use axum::Router;
use leptos::prelude::*;
use leptos_axum::{generate_route_list, LeptosRoutes};
use tollgate::Tollgate;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

#[derive(Clone, FromRef)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub tollgate: Tollgate,
}

/// Leptos options built from our configuration rather than Cargo metadata,
/// so the binary runs from anywhere.
pub fn leptos_options(tollgate: &Tollgate) -> LeptosOptions {
    let config = tollgate.config();
    LeptosOptions::builder()
        .output_name("tollgate")
        .site_root(config.site_root.to_string_lossy().to_string())
        .site_pkg_dir("pkg")
        .site_addr(config.listen)
        .build()
}

/// The address with no page of its own: the guard sends each caller home.
const FRONT_DOOR: &str = "/";

/// A router of `routes`, each path once.
fn routed(routes: Vec<(&'static str, axum::routing::MethodRouter<Tollgate>)>) -> Router<Tollgate> {
    routes
        .into_iter()
        .fold(Router::new(), |router, (path, method)| {
            router.route(path, method)
        })
}

/// Every page's path as the router serves it (`{id}` for a parameter).
pub fn page_paths() -> Vec<String> {
    let mut paths: Vec<String> = generate_route_list(App)
        .iter()
        .map(|route| route.path().to_string())
        .collect();
    paths.push(FRONT_DOOR.to_string());
    paths
}

/// Every form route's path.
pub fn form_paths() -> Vec<&'static str> {
    [forms::routes(), review::routes(), webhooks::routes()]
        .into_iter()
        .flatten()
        .map(|(path, _)| path)
        .collect()
}

/// Every server function's path and method, as registered.
pub fn server_fn_paths() -> Vec<(&'static str, axum::http::Method)> {
    leptos::server_fn::axum::server_fn_paths().collect()
}

/// How long one request may take, reading its body included.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Everything a `web` node serves.
pub fn router(tollgate: Tollgate) -> Router {
    let options = leptos_options(&tollgate);
    let state = AppState {
        leptos_options: options.clone(),
        tollgate: tollgate.clone(),
    };
    let context = {
        let t = tollgate.clone();
        move || provide_context(t.clone())
    };
    let pages = Router::new()
        .leptos_routes_with_context(&state, generate_route_list(App), context.clone(), {
            let o = options.clone();
            move || shell(o.clone())
        })
        .route(FRONT_DOOR, get(|| async { Redirect::to("/edits") }))
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(context, shell))
        .with_state(state);
    let app = pages
        .merge(forms::router(tollgate.clone()))
        .merge(review::router(tollgate.clone()))
        .merge(webhooks::router(tollgate.clone()))
        .merge(tollgate::api::router(tollgate.clone()))
        .layer(axum::middleware::from_fn_with_state(
            tollgate.clone(),
            guard::cross_site_check,
        ))
        .layer(axum::middleware::from_fn_with_state(
            tollgate.clone(),
            guard::role_guard,
        ))
        .layer(tollgate::usecases::auth::session_layer(&tollgate))
        .layer(axum::middleware::from_fn_with_state(
            tollgate.clone(),
            guard::host_check,
        ));
    // A request that takes longer than this as a whole is answered 408.
    let app = app.layer(tower_http::timeout::TimeoutLayer::with_status_code(
        axum::http::StatusCode::REQUEST_TIMEOUT,
        REQUEST_TIMEOUT,
    ));
    with_security_headers(app, &tollgate).layer(TraceLayer::new_for_http())
}

/// Issue 29, 7: a page is one person's (a token shown once, a secret, a
/// balance): no cache keeps it. Static files (CSS, wasm) stay cacheable.
async fn no_store_pages(mut response: axum::response::Response) -> axum::response::Response {
    use axum::http::header;
    let html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if html {
        response
            .headers_mut()
            .entry(header::CACHE_CONTROL)
            .or_insert(HeaderValue::from_static("no-store"));
    }
    response
}

/// Headers every answer carries unless it set its own: no framing, no
/// referrer beyond our origin, no sniffing, a deny-all policy for what is
/// not a page (pages set theirs, with a nonce), and HSTS over https.
fn with_security_headers(router: Router, tollgate: &Tollgate) -> Router {
    use axum::http::header;
    let hsts = tollgate
        .config()
        .secure_cookies
        .then(|| HeaderValue::from_static("max-age=31536000; includeSubDomains"));
    router
        .layer(axum::middleware::map_response(no_store_pages))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::STRICT_TRANSPORT_SECURITY,
            hsts,
        ))
}
