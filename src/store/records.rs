//! The rows the store reads and writes, in domain types.

use crate::model::{ApiTokenId, Credits, Email, LedgerEntryId, LedgerKind, Role, UserId};
use chrono::{DateTime, Utc};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct User {
    pub id: UserId,
    pub email: Email,
    pub role: Role,
    pub disabled: bool,
    pub balance: Credits,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug)]
pub struct NewUser {
    pub id: UserId,
    pub email: Email,
    pub password_hash: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ApiToken {
    pub id: ApiTokenId,
    pub user_id: UserId,
    pub name: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug)]
pub struct NewApiToken {
    pub id: ApiTokenId,
    pub user_id: UserId,
    pub name: String,
    pub token_hash: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LedgerEntry {
    pub id: LedgerEntryId,
    pub user_id: UserId,
    pub amount: Credits,
    pub kind: LedgerKind,
    pub reference: String,
    pub actor_id: Option<UserId>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug)]
pub struct NewLedgerEntry {
    pub id: LedgerEntryId,
    pub user_id: UserId,
    pub amount: Credits,
    pub kind: LedgerKind,
    pub reference: String,
    pub actor_id: Option<UserId>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
}
