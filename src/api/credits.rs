//! `GET /v1/credits`: the caller's balance and ledger, newest first.

use crate::auth::{AnyUser, Authorized};
use crate::error::Result;
use crate::store::LedgerEntry;
use crate::Tollgate;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

pub fn entry_json(e: &LedgerEntry) -> Value {
    json!({
        "id": e.id,
        "amount": e.amount,
        "kind": e.kind,
        "reference": e.reference,
        "reason": e.reason,
        "created_at": e.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    })
}

pub async fn show(State(t): State<Tollgate>, who: Authorized<AnyUser>) -> Result<Json<Value>> {
    let view = t.credits(who.user()).await?;
    let entries: Vec<Value> = view.entries.iter().map(entry_json).collect();
    Ok(Json(json!({ "balance": view.balance, "entries": entries })))
}
