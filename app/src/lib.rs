//! The Tollgate app: server-rendered Leptos pages with small islands of
//! interactivity, the server functions that feed them, and (with `ssr`) the
//! axum server and the `tollgate` command line.
//!
//! Layers, bottom first: `data` (what pages show and the server functions
//! that fetch it, through the engine's use cases), `islands`, `pages`, `app`
//! (the shell and routes), `server` (router and form handlers). The engine
//! crate's `layers.rs` checks that none names a layer above it.

#![recursion_limit = "256"]

pub mod app;
pub mod data;
pub mod islands;
pub mod pages;

#[cfg(feature = "ssr")]
pub mod server;

/// The browser entry point: wakes the islands on a server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_islands();
}
