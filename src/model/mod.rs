//! The pure domain: ids, roles, credits, ledger kinds and the parsing of
//! everything a person types. No I/O here; this module compiles to wasm so a
//! page can validate with the very functions the server uses.

mod credits;
mod email;
mod ids;
mod ledger;
mod password;
mod role;

pub use credits::{Credits, CreditsError};
pub use email::{Email, EmailError};
pub use ids::{ApiTokenId, LedgerEntryId, UserId};
pub use ledger::{LedgerKind, UnknownLedgerKind};
pub use password::{Password, PasswordError, PASSWORD_LEN_MAX, PASSWORD_LEN_MIN};
pub use role::{Role, UnknownRole};
