//! The daily breaker's admin side (rule 11): a cap per UTC day, halt and
//! resume. Reservations and settlement happen in the workflow's steps.

use crate::error::{Error, Result};
use crate::model::Usd;
use crate::store::BudgetDay;
use crate::Tollgate;
use chrono::NaiveDate;

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

    /// Halts (or resumes) a day: while halted, no reservation succeeds.
    pub async fn set_halted(&self, day: NaiveDate, halted: bool) -> Result<BudgetDay> {
        Ok(self
            .store()
            .set_budget(day, self.config().daily_cap_usd, None, Some(halted))
            .await?)
    }
}
