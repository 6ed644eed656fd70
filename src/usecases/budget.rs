//! The daily breaker's admin side (rule 11): a cap per UTC day, halt and
//! resume. Reservations and settlement happen in the workflow's steps.

use crate::model::Usd;
use crate::model::UserId;
use crate::store::{
    BudgetChange, BudgetChangeKind, BudgetChangeListed, BudgetDay, Spender, ThresholdCrossed,
};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::{DateTime, NaiveDate, Utc};

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

/// The shares of a day's cap whose passing is told, once each.
pub const THRESHOLDS: [u32; 3] = [50, 80, 95];

/// When a day's cap is reached if spending goes on at the rate of the day
/// so far (issue 33, 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapForecast {
    /// The day has no cap to reach.
    NoCap,
    /// Used and held are at the cap already.
    Reached,
    /// Nothing spent yet: no rate to go by.
    Quiet,
    /// Around then, today.
    Around(DateTime<Utc>),
    /// Not before the day ends.
    NotToday,
}

/// The day's rate so far (booked over the time since its UTC midnight)
/// carried on to the cap. Exact decimals; the answer is rounded to the
/// second.
pub fn cap_forecast(day: NaiveDate, cap: Usd, booked: Usd, now: DateTime<Utc>) -> CapForecast {
    use rust_decimal::prelude::ToPrimitive;
    if cap == Usd::ZERO {
        return CapForecast::NoCap;
    }
    if booked >= cap {
        return CapForecast::Reached;
    }
    if booked == Usd::ZERO {
        return CapForecast::Quiet;
    }
    let start = day.and_time(chrono::NaiveTime::MIN).and_utc();
    let end = start + chrono::Duration::days(1);
    // At least a minute of history, so the first call is not a stampede.
    let elapsed = (now - start).num_seconds().max(60);
    let left = cap.decimal() - booked.decimal();
    let seconds = (left * rust_decimal::Decimal::from(elapsed) / booked.decimal())
        .round()
        .to_i64()
        .unwrap_or(i64::MAX);
    match now.checked_add_signed(chrono::Duration::seconds(seconds.min(86_400 * 2))) {
        Some(at) if at < end => CapForecast::Around(at),
        _ => CapForecast::NotToday,
    }
}

impl Tollgate {
    /// Writes down each share of `day`'s cap (`THRESHOLDS`) its spend has
    /// newly passed and logs it at warn: each is told once, whoever sees
    /// it first (the workers as they reserve, the overview as it reads).
    pub async fn note_thresholds(&self, day: NaiveDate) -> Result<Vec<u32>> {
        let passed = self
            .store()
            .note_thresholds(day, &THRESHOLDS, Utc::now())
            .await?;
        for percent in &passed {
            tracing::warn!(%day, percent, "the day's spend passed {percent}% of its cap");
        }
        Ok(passed)
    }

    /// The shares of its cap `day` has passed, lowest first.
    pub async fn thresholds_on(&self, day: NaiveDate) -> Result<Vec<ThresholdCrossed>> {
        Ok(self.store().thresholds_on(day).await?)
    }

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

/// The budget page: two weeks back and one ahead, the cap's changes, each
/// person's share of today, and every hold still standing with what they
/// come to (see `Tollgate::budget_overview`).
#[derive(Clone, Debug)]
pub struct BudgetOverview {
    pub report: crate::usecases::spend::SpendReport,
    pub history: Vec<BudgetChangeListed>,
    /// One person's share of today's cap, and each spender's use of it.
    pub share: Usd,
    pub shares: Vec<ShareUse>,
    pub holds: Vec<crate::store::AttemptListed>,
    /// What the standing holds reserve, summed.
    pub held_total: Usd,
    /// What the days of the report booked, summed.
    pub settled_total: Usd,
    /// Holds of runs that died (their lease ran out) and are not parked:
    /// the sweeper's to settle.
    pub dead_holds: usize,
}

/// Days of the budget page before today, and after it.
const OVERVIEW_DAYS_BACK: i64 = 13;
const OVERVIEW_DAYS_AHEAD: i64 = 7;
/// Standing holds the budget page lists.
const OVERVIEW_HOLDS_MAX: i64 = 200;

impl Tollgate {
    /// Everything the budget page shows, around `today`.
    pub async fn budget_overview(&self, today: NaiveDate) -> Result<BudgetOverview> {
        use crate::usecases::spend::{AttemptQuery, RANGE_DAYS_MAX};
        let from = today - chrono::Duration::days(OVERVIEW_DAYS_BACK);
        let to = today + chrono::Duration::days(OVERVIEW_DAYS_AHEAD);
        let standing = AttemptQuery {
            holding_only: true,
            limit: OVERVIEW_HOLDS_MAX,
            // Holds left standing on any day of the longest range a list takes.
            ..AttemptQuery::between(to - chrono::Duration::days(RANGE_DAYS_MAX - 1), to)
        };
        let (report, history, (share, shares), holds) = tokio::try_join!(
            self.spend(from, to),
            self.budget_history(from, to),
            self.shares_on(today),
            self.spend_attempts(&standing),
        )?;
        let holds = holds.items;
        Ok(BudgetOverview {
            held_total: (holds.iter().filter_map(|h| h.attempt.hold_usd))
                .fold(Usd::ZERO, Usd::plus),
            settled_total: (report.days.iter().map(|d| d.used_usd)).fold(Usd::ZERO, Usd::plus),
            dead_holds: (holds.iter())
                .filter(|h| h.lease_expired && h.job_status != crate::model::JobStatus::Parked)
                .count(),
            report,
            history,
            share,
            shares,
            holds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd(s: &str) -> Usd {
        Usd::parse(s).unwrap()
    }

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        day().and_hms_opt(h, m, 0).unwrap().and_utc()
    }

    fn day() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 12, 5).unwrap()
    }

    #[test]
    fn the_rate_so_far_carries_on_to_the_cap() {
        // $10 by 06:00 is $40 a day: $20 is reached at noon.
        assert_eq!(
            cap_forecast(day(), usd("20"), usd("10"), at(6, 0)),
            CapForecast::Around(at(12, 0))
        );
        // $5 by 12:00 is $10 a day: $20 is not reached today.
        assert_eq!(
            cap_forecast(day(), usd("20"), usd("5"), at(12, 0)),
            CapForecast::NotToday
        );
    }

    #[test]
    fn no_cap_no_spend_and_a_full_day_say_so() {
        assert_eq!(
            cap_forecast(day(), Usd::ZERO, usd("1"), at(1, 0)),
            CapForecast::NoCap
        );
        assert_eq!(
            cap_forecast(day(), usd("5"), Usd::ZERO, at(1, 0)),
            CapForecast::Quiet
        );
        assert_eq!(
            cap_forecast(day(), usd("5"), usd("5"), at(1, 0)),
            CapForecast::Reached
        );
        assert_eq!(
            cap_forecast(day(), usd("5"), usd("7"), at(1, 0)),
            CapForecast::Reached
        );
    }

    #[test]
    fn the_first_seconds_of_a_day_are_not_a_stampede() {
        // One cent at 00:00:01 is read as a cent a minute at most.
        let early = day().and_hms_opt(0, 0, 1).unwrap().and_utc();
        assert_eq!(
            cap_forecast(day(), usd("50"), usd("0.01"), early),
            CapForecast::NotToday
        );
    }
}
