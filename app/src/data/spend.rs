//! What the admin money pages show: today at a glance with a 30-day chart,
//! spend over a range with the attempts behind it, and the breaker's days,
//! history and holds. Amounts arrive as words people read ("$12.40 + 3
//! unpriced"); an unknown cost is never turned into a zero on the way.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use tollgate::model::Role;

/// Height of the chart's plot area, in SVG units.
pub const CHART_HEIGHT: u32 = 160;

/// One UTC day of the breaker, with what it spent.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DayRow {
    pub day: String,
    pub cap: String,
    pub used: String,
    pub reserved: String,
    /// What the cap still allows (never below zero).
    pub remaining: String,
    /// Used plus held, as a whole percentage of the cap (0 when no cap).
    pub percent: u32,
    pub halted: bool,
    pub halted_reason: Option<String>,
    pub halted_by: Option<String>,
    pub halted_at: Option<String>,
    /// Past the configured warning share of the cap.
    pub warning: bool,
    /// "$12.40 + 3 unpriced".
    pub spend: String,
    pub attempts: i64,
    pub unpriced: i64,
}

/// One bar of the 30-day chart, measured on the server.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ChartBar {
    pub day: String,
    /// "3" for the third of the month; "Nov 3" on the first and every week.
    pub label: String,
    pub spend: String,
    /// The priced bar's height (0 to CHART_HEIGHT).
    pub height: u32,
    pub unpriced: i64,
    pub halted: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Overview {
    pub today: DayRow,
    pub warning_percent: u32,
    /// Each share of today's cap passed (told once), and when: "50% at
    /// 10:02 UTC".
    pub passed: Vec<String>,
    /// When today's cap is reached at the day's rate so far, in words.
    pub forecast: String,
    /// Holds kept by parked jobs (the calls may have been paid).
    pub parked_holds: i64,
    pub parked_hold: String,
    /// Attempts still in the uncertainty window.
    pub submitting: i64,
    pub submitting_hold: String,
    pub bars: Vec<ChartBar>,
    /// The tallest bar's amount (the chart's scale).
    pub chart_max: String,
    /// The 30 days' total, "$312.40 + 12 unpriced".
    pub month: String,
    pub month_unpriced: i64,
    pub from: String,
    pub to: String,
}

/// A slice of spend: a provider and model, or an error class.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TallyRow {
    pub label: String,
    /// The filter value this row stands for (model id or error class).
    pub key: String,
    pub attempts: i64,
    pub spend: String,
    pub unpriced: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpendAttemptRow {
    pub id: String,
    pub job_id: String,
    pub started: String,
    pub user: String,
    pub provider: String,
    pub model: String,
    pub attempt_no: i32,
    pub state: tollgate::model::AttemptState,
    pub error_class: Option<tollgate::model::ErrorClass>,
    /// None is unpriced (or not finished): shown as such, never as $0.
    pub cost: Option<String>,
    pub cost_source: Option<String>,
    pub hold: Option<String>,
    pub settled: Option<String>,
}

/// What the spend page asks for, as its URL carries it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SpendFilters {
    pub from: Option<String>,
    pub to: Option<String>,
    pub unpriced: bool,
    pub model: Option<String>,
    pub class: Option<String>,
    pub state: Option<String>,
    pub cursor: Option<String>,
}

impl SpendFilters {
    /// The query string of these filters (without the cursor).
    pub fn query(&self) -> String {
        let mut parts = Vec::new();
        let mut add = |k: &str, v: &Option<String>| {
            if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
                parts.push(format!("{k}={}", urlencoding::encode(v)));
            }
        };
        add("from", &self.from);
        add("to", &self.to);
        add("model", &self.model);
        add("class", &self.class);
        add("state", &self.state);
        if self.unpriced {
            parts.push("unpriced=1".into());
        }
        parts.join("&")
    }

    /// The attempts these filters ask for, parsed (an empty field is no
    /// filter).
    #[cfg(feature = "ssr")]
    pub fn attempt_query(
        &self,
        limit: i64,
    ) -> tollgate::Result<tollgate::usecases::spend::AttemptQuery> {
        let query = tollgate::usecases::spend::AttemptQuery::parse(
            &tollgate::usecases::spend::AttemptQueryText {
                from: self.from.clone(),
                to: self.to.clone(),
                model: self.model.clone(),
                error_class: self.class.clone(),
                state: self.state.clone(),
                cursor: self.cursor.clone(),
                limit: Some(limit),
            },
        )?;
        Ok(tollgate::usecases::spend::AttemptQuery {
            unpriced_only: self.unpriced,
            ..query
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpendView {
    pub from: String,
    pub to: String,
    pub days: Vec<DayRow>,
    pub models: Vec<TallyRow>,
    pub classes: Vec<TallyRow>,
    /// By person (key: their email, for the Jobs page's filter).
    pub people: Vec<TallyRow>,
    /// By API token, and what people ordered from the pages.
    pub tokens: Vec<TallyRow>,
    pub total: String,
    pub total_attempts: i64,
    pub total_unpriced: i64,
    pub attempts: super::Paged<SpendAttemptRow>,
    pub csv_href: String,
}

/// One change to a day's breaker, for the budget page's history.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ChangeRow {
    pub day: String,
    pub what: String,
    pub reason: Option<String>,
    pub by: String,
    pub when: String,
}

/// A hold not yet settled, and why it stands.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HoldRow {
    pub job_id: String,
    pub day: String,
    pub user: String,
    pub model: String,
    pub attempt_no: i32,
    pub state: tollgate::model::AttemptState,
    pub hold: String,
    pub started: String,
    pub standing: Standing,
}

/// Why a hold still stands.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Standing {
    /// Its job is parked: kept until a reviewer decides.
    Parked,
    /// Its worker's lease ran out: the job will be claimed again.
    DeadWorker,
    /// The call is still running.
    InFlight,
}

impl Standing {
    pub fn words(self) -> &'static str {
        match self {
            Standing::Parked => "parked",
            Standing::DeadWorker => "left by a dead worker",
            Standing::InFlight => "in flight",
        }
    }

    /// How the hold will be settled.
    pub fn settlement(self) -> &'static str {
        match self {
            Standing::Parked => "Kept until a reviewer decides: the call may have been paid.",
            Standing::DeadWorker => {
                "Settled when the job is claimed again: the attempt is recovered by its key, \
                 or the job is parked for review."
            }
            Standing::InFlight => {
                "Settled with the call's cost when it ends (at the estimate when unknown)."
            }
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BudgetView {
    pub today: String,
    pub default_cap: String,
    pub warning_percent: u32,
    pub days: Vec<DayRow>,
    pub history: Vec<ChangeRow>,
    pub holds: Vec<HoldRow>,
    pub held_total: String,
    pub dead_holds: i64,
    /// What the shown days settled (booked) in all.
    pub settled_total: String,
    /// One person's share of today's cap, in percent and in dollars.
    pub share_percent: u32,
    pub share: String,
    /// Who spent the most today, against their share.
    pub spenders: Vec<SpenderRow>,
}

/// One person's spend today against their share of the cap.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpenderRow {
    pub email: String,
    pub spent: String,
    pub attempts: i64,
    /// Of their share, as a whole percentage (100 and over: used).
    pub percent: u32,
}

#[cfg(feature = "ssr")]
mod convert {
    use super::*;
    use std::collections::HashMap;
    use tollgate::model::{JobStatus, Usd, UserId};
    use tollgate::store::AttemptListed;
    use tollgate::usecases::spend::SpendDay;

    /// One change of a day's breaker: what, why, by whom and when.
    pub fn change_row(c: &tollgate::store::BudgetChangeListed) -> ChangeRow {
        use tollgate::store::BudgetChangeKind;
        ChangeRow {
            day: c.day.to_string(),
            what: match c.change.kind {
                BudgetChangeKind::Cap(cap) => format!("Cap set to {}", cap.dollars()),
                BudgetChangeKind::Halt => "Halted".into(),
                BudgetChangeKind::Resume => "Resumed".into(),
            },
            reason: c.change.reason.clone(),
            by: c
                .by_email
                .as_ref()
                .map(|e| e.to_string())
                .unwrap_or_else(|| "the command line".into()),
            when: super::super::ssr::when(c.change.at),
        }
    }

    /// An attempt still holding budget, and what will settle it.
    pub fn hold_row(h: &AttemptListed) -> HoldRow {
        HoldRow {
            job_id: h.attempt.job_id.to_string(),
            day: h
                .attempt
                .budget_day
                .map(|d| d.to_string())
                .unwrap_or_default(),
            user: h.user_email.to_string(),
            model: h.attempt.model.clone(),
            attempt_no: h.attempt.attempt_no,
            state: h.attempt.state,
            hold: h.attempt.hold_usd.map(Usd::dollars).unwrap_or_default(),
            started: super::super::ssr::when(h.attempt.started_at),
            standing: standing(h),
        }
    }

    pub fn spender_row(u: &tollgate::usecases::budget::ShareUse) -> SpenderRow {
        SpenderRow {
            email: u.spender.email.to_string(),
            spent: u.spender.spent_usd.dollars(),
            attempts: u.spender.attempts,
            percent: u.percent,
        }
    }

    pub fn day_row(d: &SpendDay, emails: &HashMap<UserId, String>) -> DayRow {
        DayRow {
            day: d.day.to_string(),
            cap: d.cap_usd.dollars(),
            used: d.used_usd.dollars(),
            reserved: d.reserved_usd.dollars(),
            remaining: d.remaining().dollars(),
            percent: d.percent(),
            halted: d.halted,
            halted_reason: d.halted_reason.clone(),
            halted_by: d.halted_by.and_then(|u| emails.get(&u).cloned()),
            halted_at: d.halted_at.map(super::super::ssr::when),
            warning: d.warning,
            spend: d.tally.words(),
            attempts: d.tally.attempts,
            unpriced: d.tally.unpriced,
        }
    }

    pub fn attempt_row(a: &AttemptListed) -> SpendAttemptRow {
        let at = &a.attempt;
        SpendAttemptRow {
            id: at.id.to_string(),
            job_id: at.job_id.to_string(),
            started: super::super::ssr::when(at.started_at),
            user: a.user_email.to_string(),
            provider: at.provider.clone(),
            model: at.model.clone(),
            attempt_no: at.attempt_no,
            state: at.state,
            error_class: at.error_class,
            cost: at.cost_usd.map(Usd::dollars),
            cost_source: at.cost_source.map(|c| c.as_str().to_string()),
            hold: at.hold_usd.map(Usd::dollars),
            settled: at.settled_usd.map(Usd::dollars),
        }
    }

    /// Why a hold still stands.
    pub fn standing(a: &AttemptListed) -> Standing {
        if a.job_status == JobStatus::Parked {
            Standing::Parked
        } else if a.lease_expired {
            Standing::DeadWorker
        } else {
            Standing::InFlight
        }
    }

    pub async fn emails(t: &tollgate::Tollgate) -> Result<HashMap<UserId, String>, ServerFnError> {
        Ok(t.list_users()
            .await
            .map_err(super::super::ssr::fail)?
            .into_iter()
            .map(|u| (u.id, u.email.to_string()))
            .collect())
    }
}

#[server]
pub async fn load_overview() -> Result<Overview, ServerFnError> {
    use super::ssr::*;
    use chrono::{Datelike, Utc};
    use convert::*;
    require(Role::Admin).await?;
    let t = engine()?;
    let emails = emails(&t).await?;
    let to = Utc::now().date_naive();
    let overview = t.spend_overview(to, 30).await.map_err(fail)?;
    let (report, exposure) = (overview.report, overview.exposure);
    let from = report.from;
    let today = report
        .days
        .last()
        .ok_or_else(|| ServerFnError::new("no days in the report"))?;
    let max = report
        .days
        .iter()
        .map(|d| d.tally.priced_usd)
        .max()
        .unwrap_or_default();
    let bars = report
        .days
        .iter()
        .map(|d| {
            let label = if d.day.day() == 1 || d.day == from {
                d.day.format("%b %-d").to_string()
            } else {
                d.day.day().to_string()
            };
            ChartBar {
                day: d.day.to_string(),
                label,
                spend: d.tally.words(),
                height: d.tally.priced_usd.percent_of(max).min(100) * CHART_HEIGHT / 100,
                unpriced: d.tally.unpriced,
                halted: d.halted,
            }
        })
        .collect();
    let passed = (overview.passed.iter())
        .map(|c| format!("{}% at {} UTC", c.percent, c.crossed_at.format("%H:%M")))
        .collect();
    Ok(Overview {
        today: day_row(today, &emails),
        warning_percent: t.config().spend_warning_percent,
        passed,
        forecast: forecast_words(today),
        parked_holds: exposure.parked_holds,
        parked_hold: exposure.parked_hold_usd.dollars(),
        submitting: exposure.submitting,
        submitting_hold: exposure.submitting_hold_usd.dollars(),
        bars,
        chart_max: max.dollars(),
        month: report.total.words(),
        month_unpriced: report.total.unpriced,
        from: from.to_string(),
        to: to.to_string(),
    })
}

/// When today's cap is reached at the rate of the day so far, in words.
#[cfg(feature = "ssr")]
fn forecast_words(d: &tollgate::usecases::spend::SpendDay) -> String {
    use tollgate::usecases::budget::{cap_forecast, CapForecast};
    match cap_forecast(d.day, d.cap_usd, d.booked(), chrono::Utc::now()) {
        CapForecast::NoCap => "No cap today: nothing stops paid calls.".into(),
        CapForecast::Reached => {
            "The cap is reached: paid calls wait for tomorrow or a raise.".into()
        }
        CapForecast::Quiet => "Nothing spent yet today.".into(),
        CapForecast::Around(at) => format!(
            "At today's rate so far, the cap is reached around {} UTC.",
            at.format("%H:%M")
        ),
        CapForecast::NotToday => "At today's rate so far, the cap is not reached today.".into(),
    }
}

#[server]
pub async fn load_spend(filters: SpendFilters) -> Result<SpendView, ServerFnError> {
    use super::ssr::*;
    use convert::*;
    require(Role::Admin).await?;
    let t = engine()?;
    let emails = emails(&t).await?;
    let query = filters.attempt_query(50).map_err(fail)?;
    let (from, to) = (query.from, query.to);
    let report = t.spend(from, to).await.map_err(fail)?;
    let page = t
        .spend_attempts(&tollgate::usecases::spend::AttemptQuery {
            counted: true,
            ..query
        })
        .await
        .map_err(fail)?;
    Ok(SpendView {
        from: from.to_string(),
        to: to.to_string(),
        // Newest day first: the page reads from today backwards.
        days: report
            .days
            .iter()
            .rev()
            .map(|d| day_row(d, &emails))
            .collect(),
        models: report.models.iter().map(model_row).collect(),
        classes: report.classes.iter().map(class_row).collect(),
        people: report.people.iter().map(person_row).collect(),
        tokens: report.tokens.iter().map(token_row).collect(),
        total: report.total.words(),
        total_attempts: report.total.attempts,
        total_unpriced: report.total.unpriced,
        attempts: super::paged(page, |a| attempt_row(&a)),
        csv_href: format!("/v1/spend?from={from}&to={to}&format=csv"),
    })
}

/// One row of a spend table: what it is called, what it filters by, and
/// its tally.
#[cfg(feature = "ssr")]
fn tally_row(label: String, key: String, tally: &tollgate::usecases::spend::Tally) -> TallyRow {
    TallyRow {
        label,
        key,
        attempts: tally.attempts,
        spend: tally.words(),
        unpriced: tally.unpriced,
    }
}

/// A model's spend: "local · local-clip".
#[cfg(feature = "ssr")]
fn model_row(m: &tollgate::usecases::spend::SpendModel) -> TallyRow {
    tally_row(
        format!("{} · {}", m.provider, m.model),
        m.model.clone(),
        &m.tally,
    )
}

/// An error class's spend; attempts that did not fail are "no error".
#[cfg(feature = "ssr")]
fn class_row(c: &tollgate::usecases::spend::SpendClass) -> TallyRow {
    let key = c.error_class.map(|c| c.as_str()).unwrap_or_default();
    let label = c.error_class.map_or("no error", |c| c.as_str());
    tally_row(label.to_string(), key.to_string(), &c.tally)
}

/// A person's spend, by their email.
#[cfg(feature = "ssr")]
fn person_row(p: &tollgate::usecases::spend::PersonSpend) -> TallyRow {
    tally_row(p.email.to_string(), p.email.to_string(), &p.tally)
}

/// A token's spend, named as its owner knows it: "ci (tg_3fa…) · ana@…".
#[cfg(feature = "ssr")]
fn token_row(t: &tollgate::usecases::spend::TokenSpend) -> TallyRow {
    let label = match &t.token {
        Some(k) => format!(
            "{} ({}…){} · {}",
            k.name,
            k.prefix,
            if k.revoked { ", revoked" } else { "" },
            t.owner
        ),
        None => format!("From the pages · {}", t.owner),
    };
    tally_row(label, t.owner.to_string(), &t.tally)
}

#[server]
pub async fn load_budget() -> Result<BudgetView, ServerFnError> {
    use super::ssr::*;
    use chrono::Utc;
    use convert::*;
    require(Role::Admin).await?;
    let t = engine()?;
    let emails = emails(&t).await?;
    let today = Utc::now().date_naive();
    let o = t.budget_overview(today).await.map_err(fail)?;
    Ok(BudgetView {
        today: today.to_string(),
        default_cap: t.config().daily_cap_usd.dollars(),
        warning_percent: t.config().spend_warning_percent,
        days: (o.report.days.iter().rev())
            .map(|d| day_row(d, &emails))
            .collect(),
        history: o.history.iter().map(change_row).collect(),
        holds: o.holds.iter().map(hold_row).collect(),
        held_total: o.held_total.dollars(),
        dead_holds: o.dead_holds as i64,
        settled_total: o.settled_total.dollars(),
        share_percent: t.config().user_share_percent,
        share: o.share.dollars(),
        spenders: o.shares.iter().map(spender_row).collect(),
    })
}
