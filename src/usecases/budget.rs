//! The daily breaker's admin side (rule 11): a cap per UTC day, halt and
//! resume. Reservations and settlement happen in the workflow's steps.

use crate::model::Usd;
use crate::model::UserId;
use crate::store::{BudgetChange, BudgetChangeKind, BudgetChangeListed, BudgetDay, Spender};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::{NaiveDate, Utc};

/// Longest reason a halt may give.
pub const HALT_REASON_LEN_MAX: usize = 500;
/// Changes a history shows at most.
const HISTORY_LEN_MAX: i64 = 200;

/// A day as the API names it: YYYY-MM-DD (`field` names it in an error).
pub fn parse_day_field(field: &str, raw: &str) -> Result<NaiveDate> {
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .map_err(|_| Error::invalid(field, "must be a date like 2026-11-30"))
}

/// A path's `{day}`.
pub fn parse_day(raw: &str) -> Result<NaiveDate> {
    parse_day_field("day", raw)
}

/// How one person's work stands against their share of a day's cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareUse {
    pub spender: Spender,
    /// Their spend as a whole percentage of their share.
    pub percent: u32,
}

/// The people who spent the most today, at most this many, on the page.
const SPENDERS_SHOWN: i64 = 20;

impl Tollgate {
    /// One person's share of `day`'s cap (`TOLLGATE_USER_SHARE_PERCENT`),
    /// and the people whose work cost the most that day against it, most
    /// first: who is near their share (issue 29, 2).
    pub async fn shares_on(&self, day: NaiveDate) -> Result<(Usd, Vec<ShareUse>)> {
        let cap = self.budget(day).await?.cap_usd;
        let percent = self.config().user_share_percent;
        let share = cap.times(rust_decimal::Decimal::new(i64::from(percent), 2));
        let spenders = self.store().top_spenders_on(day, SPENDERS_SHOWN).await?;
        let uses = spenders
            .into_iter()
            .map(|spender| ShareUse {
                percent: spender.spent_usd.percent_of(share),
                spender,
            })
            .collect();
        Ok((share, uses))
    }

    /// Whether an order placed now would be refused for money the studio
    /// will not spend today: the day is halted, or its cap is used or held
    /// to the end. Told before a person orders (issue 33, 8); the budget's
    /// figures and the admin's reason stay the studio's.
    pub async fn spending_paused_now(&self) -> Result<bool> {
        let day = self.budget(chrono::Utc::now().date_naive()).await?;
        Ok(day.halted || day.used_usd.plus(day.reserved_usd) >= day.cap_usd)
    }

    pub async fn budget(&self, day: NaiveDate) -> Result<BudgetDay> {
        Ok(self
            .store()
            .budget_day(day, self.config().daily_cap_usd)
            .await?)
    }

    /// Sets a day's cap, recording who set it.
    pub async fn set_daily_cap(
        &self,
        day: NaiveDate,
        cap: &str,
        by: Option<UserId>,
    ) -> Result<BudgetDay> {
        let cap = Usd::parse(cap).map_err(|e| Error::invalid("cap_usd", e.to_string()))?;
        self.change_budget(day, BudgetChangeKind::Cap(cap), None, by)
            .await
    }

    /// Halts a day: while halted no paid call is sent (no hold succeeds).
    /// A halt says why; who and when are recorded with it.
    pub async fn halt_day(
        &self,
        day: NaiveDate,
        reason: &str,
        by: Option<UserId>,
    ) -> Result<BudgetDay> {
        let reason = checked_reason(Some(reason))?
            .ok_or_else(|| Error::invalid("reason", "say why spending is halted"))?;
        self.change_budget(day, BudgetChangeKind::Halt, Some(reason), by)
            .await
    }

    /// Lifts a day's halt (a reason is optional).
    pub async fn resume_day(
        &self,
        day: NaiveDate,
        reason: Option<&str>,
        by: Option<UserId>,
    ) -> Result<BudgetDay> {
        let reason = checked_reason(reason)?;
        self.change_budget(day, BudgetChangeKind::Resume, reason, by)
            .await
    }

    /// Who changed the breaker on the days from `from` to `to`, newest first.
    pub async fn budget_history(
        &self,
        from: NaiveDate,
        to: NaiveDate,
    ) -> Result<Vec<BudgetChangeListed>> {
        Ok(self
            .store()
            .budget_changes(from, to, HISTORY_LEN_MAX)
            .await?)
    }

    async fn change_budget(
        &self,
        day: NaiveDate,
        kind: BudgetChangeKind,
        reason: Option<String>,
        by: Option<UserId>,
    ) -> Result<BudgetDay> {
        let change = BudgetChange {
            kind,
            reason,
            by,
            at: Utc::now(),
        };
        Ok(self
            .store()
            .set_budget(day, self.config().daily_cap_usd, &change)
            .await?)
    }
}

/// A reason as stored: trimmed, `None` when blank, printable and bounded.
fn checked_reason(reason: Option<&str>) -> Result<Option<String>> {
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
    Ok(reason.map(str::to_string))
}
