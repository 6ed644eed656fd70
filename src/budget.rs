//! The daily breaker's admin side (rule 11): a cap per UTC day, halt and
//! resume. Reservations and settlement happen in the workflow's steps.

use crate::error::{Error, Result};
use crate::model::Usd;
use crate::model::UserId;
use crate::store::{BudgetDay, Halt};
use crate::Tollgate;
use chrono::{NaiveDate, Utc};

/// Longest reason a halt may give.
pub const HALT_REASON_LEN_MAX: usize = 500;

/// A day as the API names it: YYYY-MM-DD.
pub fn parse_day(raw: &str) -> Result<NaiveDate> {
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .map_err(|_| Error::invalid("day", "must be a date like 2026-11-30"))
}

impl Tollgate {
    pub async fn budget(&self, day: NaiveDate) -> Result<BudgetDay> {
        Ok(self
            .store()
            .budget_day(day, self.config().daily_cap_usd)
            .await?)
    }

    pub async fn set_daily_cap(&self, day: NaiveDate, cap: &str) -> Result<BudgetDay> {
        let cap = Usd::parse(cap).map_err(|e| Error::invalid("cap_usd", e.to_string()))?;
        Ok(self
            .store()
            .set_budget(day, self.config().daily_cap_usd, Some(cap), None)
            .await?)
    }

    /// Halts (or resumes) a day, recording who did it and why: while
    /// halted, no paid call is sent (no hold succeeds).
    pub async fn set_halted(
        &self,
        day: NaiveDate,
        halted: bool,
        reason: Option<&str>,
        by: Option<UserId>,
    ) -> Result<BudgetDay> {
        let reason = reason.map(str::trim).filter(|r| !r.is_empty());
        if reason.is_some_and(|r| r.chars().any(char::is_control)) {
            return Err(Error::invalid(
                "reason",
                "must not contain control characters",
            ));
        }
        if reason.is_some_and(|r| r.chars().count() > HALT_REASON_LEN_MAX) {
            return Err(Error::invalid(
                "reason",
                format!("at most {HALT_REASON_LEN_MAX} characters"),
            ));
        }
        let halt = Halt {
            halted,
            reason: reason.map(str::to_string),
            by,
            at: Utc::now(),
        };
        Ok(self
            .store()
            .set_budget(day, self.config().daily_cap_usd, None, Some(&halt))
            .await?)
    }
}
