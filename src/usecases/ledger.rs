//! The credit ledger's operations. The rules themselves (no overdraw, no
//! update, no delete, balance = sum) are enforced by the database triggers;
//! this module only builds entries and names their references.

use crate::model::{Credits, LedgerEntryId, LedgerKind, UserId};
use crate::store::{LedgerEntry, NewLedgerEntry, User};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::Utc;

/// Longest reason an admin may give.
pub const REASON_LEN_MAX: usize = 500;
/// How many entries a credits view shows.
pub const HISTORY_LEN_MAX: i64 = 200;

/// A balance and the entries behind it, newest first.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CreditsView {
    pub balance: Credits,
    pub entries: Vec<LedgerEntry>,
}

/// SHA-256 of an idempotency key, hex.
fn key_digest(key: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn clean_reason(reason: Option<&str>) -> Result<Option<String>> {
    let Some(r) = reason.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    if r.chars().any(char::is_control) {
        return Err(Error::invalid(
            "reason",
            "must not contain control characters",
        ));
    }
    if r.chars().count() > REASON_LEN_MAX {
        return Err(Error::invalid(
            "reason",
            format!("at most {REASON_LEN_MAX} characters"),
        ));
    }
    Ok(Some(r.to_string()))
}

impl Tollgate {
    /// Appends a grant. With an idempotency key the reference is derived from
    /// it (`grant:<admin>:<key>`), so the same grant sent twice is one grant;
    /// without one, every call is a new grant. Returns the entry and whether
    /// it was new.
    pub async fn grant_credits(
        &self,
        actor: Option<UserId>,
        to: UserId,
        amount: Credits,
        reason: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Result<(LedgerEntry, bool)> {
        let amount =
            Credits::grant(amount.get()).map_err(|e| Error::invalid("amount", e.to_string()))?;
        let reason = clean_reason(reason)?;
        self.user(to).await?;
        let id = LedgerEntryId::new();
        // A key is up to 255 characters; its SHA-256 keeps every accepted
        // key within the reference's 200 (and keeps the key itself out of
        // the ledger).
        let reference = match (idempotency_key.map(key_digest), actor) {
            (Some(key), Some(a)) => format!("grant:{a}:{key}"),
            (Some(key), None) => format!("grant:cli:{key}"),
            (None, _) => format!("grant:{id}"),
        };
        let entry = NewLedgerEntry {
            id,
            user_id: to,
            amount,
            kind: LedgerKind::Grant,
            reference: reference.clone(),
            actor_id: actor,
            reason,
            created_at: Utc::now(),
        };
        match self.store().append_ledger(&entry).await? {
            Some(e) => Ok((e, true)),
            None => {
                // Read back by reference: the entry the key already made.
                let existing = self
                    .store()
                    .ledger_entry(&reference)
                    .await?
                    .ok_or_else(|| Error::Conflict {
                        code: "IDEMPOTENCY_CONFLICT",
                        message: "this idempotency key was used for another grant".into(),
                    })?;
                if existing.amount != amount || existing.user_id != to {
                    return Err(Error::Conflict {
                        code: "IDEMPOTENCY_CONFLICT",
                        message: "this idempotency key was used for another grant".into(),
                    });
                }
                Ok((existing, false))
            }
        }
    }

    pub async fn credits(&self, user: &User) -> Result<CreditsView> {
        let fresh = self.user(user.id).await?;
        Ok(CreditsView {
            balance: fresh.balance,
            entries: self
                .store()
                .ledger_for_user(user.id, HISTORY_LEN_MAX)
                .await?,
        })
    }
}
