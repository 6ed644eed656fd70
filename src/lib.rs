//! Tollgate's engine: everything that is true without a web page.
//!
//! Layers, bottom first, each naming only those below it (`layers.rs`
//! checks it): `model` (pure, compiles to wasm); `storage`, `config`, `net`;
//! `store` (all SQL); `providers`; `wire` (what clients read); `usecases`
//! (the `Tollgate` handle: what people and programs ask for); `engine` (the
//! node that runs jobs); `api` (`/v1`). Everything but `model` needs the
//! `server` feature (on by default). The app crate sits on top; this crate
//! never uses it.

pub mod model;

#[cfg(feature = "server")]
pub mod api;
#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "server")]
pub mod engine;
#[cfg(feature = "server")]
pub mod net;
#[cfg(feature = "server")]
pub mod providers;
#[cfg(feature = "server")]
pub mod storage;
#[cfg(feature = "server")]
pub mod store;
#[cfg(feature = "server")]
pub mod usecases;
#[cfg(feature = "server")]
pub mod wire;

#[cfg(all(test, feature = "server"))]
mod layers;
#[cfg(all(test, feature = "server"))]
mod properties;

#[cfg(feature = "server")]
pub use usecases::Tollgate;
#[cfg(feature = "server")]
pub use usecases::{Error, Result};
