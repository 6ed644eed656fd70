//! The credit ledger's operations. The rules themselves (no overdraw, no
//! update, no delete, balance = sum) are enforced by the database triggers;
//! this module only builds entries and names their references.

use crate::model::{job_of_reference, Credits, LedgerEntryId, LedgerKind, UserId};
use crate::store::{Job, LedgerCursor, LedgerEntry, LedgerFilter, NewLedgerEntry, Seek, User};
use crate::usecases::cursor::{self, Page, Position};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::Utc;

/// Longest reason an admin may give.
pub const REASON_LEN_MAX: usize = 500;
/// How many entries a credits view shows.
pub const HISTORY_LEN_MAX: i64 = 200;

/// A page of a person's history, newest first.
#[derive(Clone, Copy, Debug)]
pub struct LedgerQuery {
    pub limit: i64,
    pub seek: Option<Seek<LedgerCursor>>,
}

impl LedgerQuery {
    pub fn parse(limit: i64, cursor: Option<&str>) -> Result<Self> {
        if !(1..=HISTORY_LEN_MAX).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be 1 to {HISTORY_LEN_MAX}"),
            ));
        }
        Ok(LedgerQuery {
            limit,
            seek: cursor::decode_opt(cursor)?,
        })
    }
}

/// One line of a person's credits: the entry, and the job it charged or
/// refunded, when it was one (so a page can name the edit).
#[derive(Clone, Debug)]
pub struct LedgerLine {
    pub entry: LedgerEntry,
    pub job: Option<Job>,
}

impl Position for LedgerCursor {
    fn parts(&self) -> Vec<String> {
        vec![cursor::time_part(self.created_at), self.id.to_string()]
    }

    fn read(parts: &[&str]) -> Option<Self> {
        let [at, id] = parts else { return None };
        Some(LedgerCursor {
            created_at: cursor::read_time(at)?,
            id: LedgerEntryId(id.parse().ok()?),
        })
    }
}

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

    /// A page of `viewer`'s own history, counted, each charge and refund
    /// with its job (two reads for the page, whatever its length).
    pub async fn ledger_page(&self, viewer: &User, q: &LedgerQuery) -> Result<Page<LedgerLine>> {
        let filter = LedgerFilter {
            user_id: viewer.id,
            seek: q.seek,
            limit: q.limit + 1,
        };
        let rows = self.store().list_ledger(&filter).await?;
        let at = |e: &LedgerEntry| LedgerCursor {
            created_at: e.created_at,
            id: e.id,
        };
        let mut page = Page::of(rows, q.limit as usize, q.seek, at);
        let count = |seek| {
            let f = LedgerFilter {
                seek,
                ..filter.clone()
            };
            async move { self.store().count_ledger(&f).await }
        };
        page.place = Some(cursor::place_of(&page, at, count).await?);
        let ids: Vec<_> = page
            .items
            .iter()
            .filter_map(|e| job_of_reference(&e.reference))
            .collect();
        let jobs = self.store().jobs_of(&ids).await?;
        Ok(page.map(|entry| {
            let id = job_of_reference(&entry.reference);
            let job = jobs.iter().find(|j| Some(j.id) == id).cloned();
            LedgerLine { entry, job }
        }))
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
