//! What the providers were paid, as admins read it (rule 10): per day,
//! provider, model and error class, from the rollup the attempts' own
//! writes keep, with calls nobody could price counted apart and never as
//! zero; the day's breaker (rule 11) beside it; and the attempts behind the
//! numbers, a page at a time or as CSV.

use crate::model::{AttemptState, Email, ErrorClass, Usd, UserId};
use crate::store::{
    AttemptCursor, AttemptFilter, AttemptListed, Exposure, Seek, SourceSpend, SpendRow, TokenLabel,
};
use crate::usecases::budget::parse_day_field;
use crate::usecases::cursor::{self, Page, Position};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::{DateTime, NaiveDate, Utc};
use std::collections::BTreeMap;

/// The longest range one report covers.
pub const RANGE_DAYS_MAX: i64 = 366;
/// Attempts a page of the list at most.
pub const ATTEMPTS_PAGE_MAX: i64 = 500;

/// Priced spend, and the calls nobody could price beside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub attempts: i64,
    pub priced_usd: Usd,
    /// Attempts with a known cost (what `priced_usd` sums).
    pub priced: i64,
    /// Finished attempts nobody could price.
    pub unpriced: i64,
}

impl Tally {
    fn add(&mut self, r: &SpendRow) {
        self.attempts += r.attempts;
        self.priced_usd = self.priced_usd.plus(r.priced_usd);
        self.priced += r.priced;
        self.unpriced += r.unpriced;
    }

    fn merge(&mut self, o: &Tally) {
        self.attempts += o.attempts;
        self.priced_usd = self.priced_usd.plus(o.priced_usd);
        self.priced += o.priced;
        self.unpriced += o.unpriced;
    }

    /// Attempts sent whose outcome and cost are not known yet (still
    /// `submitting` or `submitted`).
    pub fn pending(&self) -> i64 {
        self.attempts - self.priced - self.unpriced
    }

    /// "$12.40 + 3 unpriced": never a bare total that hides the unknown,
    /// and no "$0.00" for calls that have no known cost at all
    /// ("2 unpriced", "1 pending").
    pub fn words(&self) -> String {
        let mut parts = Vec::new();
        if self.priced > 0 || (self.unpriced == 0 && self.pending() == 0) {
            parts.push(self.priced_usd.dollars());
        }
        if self.unpriced > 0 {
            parts.push(format!("{} unpriced", self.unpriced));
        }
        if self.pending() > 0 {
            parts.push(format!("{} pending", self.pending()));
        }
        parts.join(" + ")
    }
}

#[derive(Clone, Debug)]
pub struct SpendDay {
    pub day: NaiveDate,
    pub cap_usd: Usd,
    /// What the breaker booked (priced costs plus the estimate kept for
    /// each unpriced paid call).
    pub used_usd: Usd,
    pub reserved_usd: Usd,
    pub halted: bool,
    pub halted_reason: Option<String>,
    pub halted_by: Option<crate::model::UserId>,
    pub halted_at: Option<DateTime<Utc>>,
    /// Used and reserved are past the warning share of the cap.
    pub warning: bool,
    pub tally: Tally,
}

impl SpendDay {
    /// What the day has booked or holds: used plus reserved.
    pub fn booked(&self) -> Usd {
        self.used_usd.plus(self.reserved_usd)
    }

    /// What the cap still allows (nothing once it is reached).
    pub fn remaining(&self) -> Usd {
        let left = self.cap_usd.decimal() - self.booked().decimal();
        Usd::new(left.max(rust_decimal::Decimal::ZERO))
    }

    /// Booked as a whole percentage of the cap (0 when there is no cap).
    pub fn percent(&self) -> u32 {
        self.booked().percent_of(self.cap_usd)
    }
}

#[derive(Clone, Debug)]
pub struct SpendModel {
    pub provider: String,
    pub model: String,
    pub tally: Tally,
}

#[derive(Clone, Debug)]
pub struct SpendClass {
    /// `None`: attempts without an error (succeeded, or still open).
    pub error_class: Option<ErrorClass>,
    pub tally: Tally,
}

#[derive(Clone, Debug)]
pub struct SpendReport {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub days: Vec<SpendDay>,
    pub models: Vec<SpendModel>,
    pub classes: Vec<SpendClass>,
    /// By the person whose work it was, most first.
    pub people: Vec<PersonSpend>,
    /// By the API token the work was ordered with; `token: None` is what
    /// people ordered from the pages.
    pub tokens: Vec<TokenSpend>,
    pub total: Tally,
}

#[derive(Clone, Debug)]
pub struct PersonSpend {
    pub user_id: UserId,
    pub email: Email,
    pub tally: Tally,
}

#[derive(Clone, Debug)]
pub struct TokenSpend {
    pub owner: Email,
    pub token: Option<TokenLabel>,
    pub tally: Tally,
}

/// Spend by person and by token, each most first. Priced spend orders
/// them; a source with unpriced calls is never ranked as if it cost
/// nothing, it keeps its count beside its dollars.
fn by_source(rows: Vec<SourceSpend>) -> (Vec<PersonSpend>, Vec<TokenSpend>) {
    let mut people: BTreeMap<UserId, PersonSpend> = BTreeMap::new();
    let mut tokens = Vec::with_capacity(rows.len());
    for r in rows {
        let tally = Tally {
            attempts: r.attempts,
            priced_usd: r.priced_usd,
            priced: r.priced,
            unpriced: r.unpriced,
        };
        let person = people.entry(r.user_id).or_insert_with(|| PersonSpend {
            user_id: r.user_id,
            email: r.email.clone(),
            tally: Tally::default(),
        });
        person.tally.merge(&tally);
        tokens.push(TokenSpend {
            owner: r.email,
            token: r.token,
            tally,
        });
    }
    let rank = |t: &Tally| {
        (
            std::cmp::Reverse(t.priced_usd),
            std::cmp::Reverse(t.unpriced),
        )
    };
    let mut people: Vec<PersonSpend> = people.into_values().collect();
    people.sort_by_key(|p| rank(&p.tally));
    tokens.sort_by_key(|t| rank(&t.tally));
    (people, tokens)
}

/// `from` and `to` (both included), at most a year apart.
pub fn parse_range(from: Option<&str>, to: Option<&str>) -> Result<(NaiveDate, NaiveDate)> {
    let today = Utc::now().date_naive();
    let to = match to.filter(|s| !s.is_empty()) {
        Some(t) => parse_day_field("to", t)?,
        None => today,
    };
    let from = match from.filter(|s| !s.is_empty()) {
        Some(f) => parse_day_field("from", f)?,
        None => to - chrono::Duration::days(29),
    };
    if from > to {
        return Err(Error::invalid("from", "must not be after to"));
    }
    if (to - from).num_days() >= RANGE_DAYS_MAX {
        return Err(Error::invalid(
            "to",
            format!("a range is at most {RANGE_DAYS_MAX} days"),
        ));
    }
    Ok((from, to))
}

/// `day|started_at|id`.
impl Position for AttemptCursor {
    fn parts(&self) -> Vec<String> {
        vec![
            self.day.to_string(),
            cursor::time_part(self.started_at),
            self.id.to_string(),
        ]
    }

    fn read(parts: &[&str]) -> Option<Self> {
        let [day, at, id] = parts else { return None };
        Some(AttemptCursor {
            day: NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()?,
            started_at: cursor::read_time(at)?,
            id: id.parse().ok()?,
        })
    }
}

/// Attempts a page lists when the asker does not say.
pub const ATTEMPTS_PAGE_DEFAULT: i64 = 100;

/// What a list of attempts asks for, parsed once at the edge
/// (`AttemptQuery::parse` reads a query string's or a form's text).
#[derive(Clone, Debug)]
pub struct AttemptQuery {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub unpriced_only: bool,
    pub model: Option<String>,
    pub error_class: Option<ErrorClass>,
    pub state: Option<AttemptState>,
    pub holding_only: bool,
    pub seek: Option<Seek<AttemptCursor>>,
    pub limit: i64,
    /// Say where the page sits in the whole list (two counts more).
    pub counted: bool,
}

/// An attempt list's filters as a query string or a form sends them.
#[derive(Clone, Debug, Default)]
pub struct AttemptQueryText {
    pub from: Option<String>,
    pub to: Option<String>,
    pub model: Option<String>,
    pub error_class: Option<String>,
    pub state: Option<String>,
    pub cursor: Option<String>,
    pub limit: Option<i64>,
}

impl AttemptQuery {
    /// Every attempt from `from` to `to`, the first page.
    pub fn between(from: NaiveDate, to: NaiveDate) -> AttemptQuery {
        AttemptQuery {
            from,
            to,
            unpriced_only: false,
            model: None,
            error_class: None,
            state: None,
            holding_only: false,
            seek: None,
            limit: ATTEMPTS_PAGE_DEFAULT,
            counted: false,
        }
    }

    /// Reads the text a person sent; an empty field is no filter.
    pub fn parse(text: &AttemptQueryText) -> Result<AttemptQuery> {
        let (from, to) = parse_range(text.from.as_deref(), text.to.as_deref())?;
        let limit = text.limit.unwrap_or(ATTEMPTS_PAGE_DEFAULT);
        if !(1..=ATTEMPTS_PAGE_MAX).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be 1 to {ATTEMPTS_PAGE_MAX}"),
            ));
        }
        let state = match text.state.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(AttemptState::parse(s).ok_or_else(|| {
                Error::invalid(
                    "state",
                    "must be submitting, submitted, succeeded or failed",
                )
            })?),
        };
        Ok(AttemptQuery {
            model: text.model.clone().filter(|m| !m.is_empty()),
            error_class: match text.error_class.as_deref().filter(|c| !c.is_empty()) {
                None => None,
                Some(c) => Some(ErrorClass::parse(c).ok_or_else(|| {
                    Error::invalid("error_class", "is not an error class Tollgate records")
                })?),
            },
            state,
            seek: cursor::decode_opt(text.cursor.as_deref())?,
            limit,
            ..AttemptQuery::between(from, to)
        })
    }

    /// The store's filter for this query, reading at most `limit`.
    fn filter(&self, limit: i64) -> AttemptFilter {
        debug_assert!(limit >= 1, "a list reads at least one row");
        AttemptFilter {
            from: Some(self.from),
            to: Some(self.to),
            unpriced_only: self.unpriced_only,
            model: self.model.clone(),
            error_class: self.error_class,
            state: self.state,
            holding_only: self.holding_only,
            seek: self.seek,
            limit,
        }
    }
}

impl Tollgate {
    /// Spend from `from` to `to`: per day (with the breaker), per provider
    /// and model, per error class, and in total.
    pub async fn spend(&self, from: NaiveDate, to: NaiveDate) -> Result<SpendReport> {
        let rows = self.store().spend_rows(from, to).await?;
        let budgets = self.store().budget_days(from, to).await?;
        let warn = self.config().spend_warning_percent;
        let mut days = Vec::new();
        let mut d = from;
        while d <= to {
            let tally = rows
                .iter()
                .filter(|r| r.day == d)
                .fold(Tally::default(), |mut t, r| {
                    t.add(r);
                    t
                });
            let b = budgets.iter().find(|b| b.day == d);
            let cap = b.map(|b| b.cap_usd).unwrap_or(self.config().daily_cap_usd);
            let used = b.map(|b| b.used_usd).unwrap_or(Usd::ZERO);
            let reserved = b.map(|b| b.reserved_usd).unwrap_or(Usd::ZERO);
            let threshold = cap.decimal() * rust_decimal::Decimal::from(warn)
                / rust_decimal::Decimal::from(100);
            days.push(SpendDay {
                day: d,
                cap_usd: cap,
                used_usd: used,
                reserved_usd: reserved,
                halted: b.is_some_and(|b| b.halted),
                halted_reason: b.and_then(|b| b.halted_reason.clone()),
                halted_by: b.and_then(|b| b.halted_by),
                halted_at: b.and_then(|b| b.halted_at),
                warning: used.plus(reserved).decimal() >= threshold && cap > Usd::ZERO,
                tally,
            });
            d += chrono::Duration::days(1);
        }
        let mut models: BTreeMap<(String, String), Tally> = BTreeMap::new();
        let mut classes: BTreeMap<Option<ErrorClass>, Tally> = BTreeMap::new();
        let mut total = Tally::default();
        for r in &rows {
            models
                .entry((r.provider.clone(), r.model.clone()))
                .or_default()
                .add(r);
            classes.entry(r.error_class).or_default().add(r);
            total.add(r);
        }
        let (people, tokens) = by_source(self.store().spend_by_source(from, to).await?);
        Ok(SpendReport {
            from,
            to,
            people,
            tokens,
            days,
            models: models
                .into_iter()
                .filter(|(_, t)| t.attempts > 0)
                .map(|((provider, model), tally)| SpendModel {
                    provider,
                    model,
                    tally,
                })
                .collect(),
            classes: classes
                .into_iter()
                .filter(|(_, t)| t.attempts > 0)
                .map(|(error_class, tally)| SpendClass { error_class, tally })
                .collect(),
            total,
        })
    }

    /// The attempts behind a report, filtered, a page at a time.
    pub async fn spend_attempts(&self, q: &AttemptQuery) -> Result<Page<AttemptListed>> {
        debug_assert!((1..=ATTEMPTS_PAGE_MAX).contains(&q.limit));
        let limit = q.limit;
        // One row more than the page says whether there is a next one.
        let filter = q.filter(limit + 1);
        let list = self.store().list_attempts(&filter).await?;
        let at = |a: &AttemptListed| AttemptCursor {
            // Listed attempts all have a day: the list is by day.
            day: a.attempt.budget_day.unwrap_or(NaiveDate::MIN),
            started_at: a.attempt.started_at,
            id: a.attempt.id,
        };
        let mut page = Page::of(list, limit as usize, filter.seek, at);
        if q.counted {
            let count = |seek| {
                let f = AttemptFilter {
                    seek,
                    ..filter.clone()
                };
                async move { self.store().count_attempts(&f).await }
            };
            page.place = Some(cursor::place_of(&page, at, count).await?);
        }
        Ok(page)
    }

    /// Holds kept by parked jobs and attempts still in the uncertainty window.
    pub async fn exposure(&self) -> Result<Exposure> {
        Ok(self.store().exposure().await?)
    }

    /// The admin's overview: the last `days` days ending `today`, what
    /// parked and unanswered work holds, and the shares of today's cap
    /// passed so far (settled costs can carry the day past a share too,
    /// so looking records any newly passed).
    pub async fn spend_overview(&self, today: NaiveDate, days: u32) -> Result<SpendOverview> {
        let from = today - chrono::Duration::days(i64::from(days.max(1)) - 1);
        let (report, exposure) = tokio::try_join!(self.spend(from, today), self.exposure())?;
        self.note_thresholds(today).await?;
        let passed = self.thresholds_on(today).await?;
        Ok(SpendOverview {
            report,
            exposure,
            passed,
        })
    }
}

/// What the admin's money page opens on (see `Tollgate::spend_overview`).
#[derive(Clone, Debug)]
pub struct SpendOverview {
    /// One row per day, oldest first; the last is today.
    pub report: SpendReport,
    pub exposure: Exposure,
    pub passed: Vec<crate::store::ThresholdCrossed>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_real_and_bounded() {
        assert!(parse_range(Some("2026-01-01"), Some("2026-12-31")).is_ok());
        // Both days count: 366 days is the most a range may cover.
        assert!(parse_range(Some("2026-01-01"), Some("2027-01-01")).is_ok());
        assert!(parse_range(Some("2026-01-01"), Some("2027-01-02")).is_err());
        assert!(parse_range(Some("2026-02-30"), None).is_err());
        assert!(parse_range(Some("2026-03-02"), Some("2026-03-01")).is_err());
        let (from, to) = parse_range(None, Some("2026-03-30")).unwrap();
        assert_eq!((to - from).num_days(), 29);
    }

    #[test]
    fn unpriced_is_said_apart() {
        let t = Tally {
            attempts: 5,
            priced_usd: Usd::parse("12.4").unwrap(),
            priced: 2,
            unpriced: 3,
        };
        assert_eq!(t.words(), "$12.40 + 3 unpriced");
        let t = Tally {
            attempts: 2,
            unpriced: 0,
            ..t
        };
        assert_eq!(t.words(), "$12.40");
        // Nothing known: no "$0.00" that reads as free.
        let none = Tally {
            attempts: 3,
            priced_usd: Usd::ZERO,
            priced: 0,
            unpriced: 2,
        };
        assert_eq!(none.words(), "2 unpriced + 1 pending");
        assert_eq!(Tally::default().words(), "$0.00");
    }
}
