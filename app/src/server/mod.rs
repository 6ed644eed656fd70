//! The server side of the app (feature `ssr`): the axum router that joins
//! the pages, the form handlers and the engine's `/v1` API, behind the
//! session layer, the role guard and the cross-site check.

pub mod flash;
pub mod forms;
pub mod guard;
pub mod review;
pub mod webhooks;

use crate::app::{shell, App};
use axum::extract::FromRef;
use axum::response::Redirect;
use axum::routing::get;
use axum::Router;
use leptos::prelude::*;
use leptos_axum::{generate_route_list, LeptosRoutes};
use tollgate::Tollgate;
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
        .route("/", get(|| async { Redirect::to("/edits") }))
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(context, shell))
        .with_state(state);
    pages
        .merge(forms::router(tollgate.clone()))
        .merge(review::router(tollgate.clone()))
        .merge(webhooks::router(tollgate.clone()))
        .merge(tollgate::api::router(tollgate.clone()))
        .layer(axum::middleware::from_fn(guard::cross_site_check))
        .layer(axum::middleware::from_fn_with_state(
            tollgate.clone(),
            guard::role_guard,
        ))
        .layer(tollgate::auth::session_layer(&tollgate))
        .layer(TraceLayer::new_for_http())
}
