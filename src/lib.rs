//! Tollgate's engine: everything that is true without a web page.
//!
//! `model` is pure and compiles to wasm; everything else needs the `server`
//! feature (on by default) and does I/O. The app crate uses this crate; this
//! crate never uses the app.

pub mod model;

#[cfg(feature = "server")]
pub mod accounts;
#[cfg(feature = "server")]
pub mod api;
#[cfg(feature = "server")]
pub mod assets;
#[cfg(feature = "server")]
pub mod auth;
#[cfg(feature = "server")]
pub mod budget;
#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "server")]
pub mod engine;
#[cfg(feature = "server")]
pub mod error;
#[cfg(feature = "server")]
pub mod jobs;
#[cfg(feature = "server")]
pub mod ledger;
#[cfg(feature = "server")]
pub mod limits;
#[cfg(feature = "server")]
pub mod parked;
#[cfg(feature = "server")]
pub mod providers;
#[cfg(feature = "server")]
pub mod repairs;
#[cfg(feature = "server")]
pub mod retention;
#[cfg(feature = "server")]
pub mod service;
#[cfg(feature = "server")]
pub mod spend;
#[cfg(feature = "server")]
pub mod storage;
#[cfg(feature = "server")]
pub mod store;
#[cfg(feature = "server")]
pub mod testkit;
#[cfg(feature = "server")]
pub mod webhooks;

#[cfg(feature = "server")]
pub use error::{Error, Result};
#[cfg(feature = "server")]
pub use service::Tollgate;
