//! What the reviewer pages show (rule 12): the queue with its counts and
//! filters, and one record with its evidence, attempts, decisions and the
//! actions its stage permits. Money arrives as words; an unknown cost is
//! never turned into a zero on the way.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use tollgate::model::Role;

/// The queue's filters, as the URL carries them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ReviewFilters {
    pub stage: Option<String>,
    /// `open`, `decided`, `recovering`, `closed`; none: every active record.
    pub state: Option<String>,
    pub model: Option<String>,
    /// Only records parked at least this long ago: `1h`, `1d`, `7d`.
    pub age: Option<String>,
    /// `exposure`: most possibly spent first; none: oldest first.
    pub sort: Option<String>,
    pub cursor: Option<String>,
}

impl ReviewFilters {
    /// The query string these filters make (without a cursor).
    pub fn query(&self) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("stage", &self.stage),
            ("state", &self.state),
            ("model", &self.model),
            ("age", &self.age),
            ("sort", &self.sort),
        ] {
            if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
                parts.push(format!("{k}={}", urlencoding::encode(v)));
            }
        }
        parts.join("&")
    }

    /// `age` in seconds.
    pub fn min_age_s(&self) -> Option<i64> {
        match self.age.as_deref() {
            Some("1h") => Some(3600),
            Some("1d") => Some(86_400),
            Some("7d") => Some(7 * 86_400),
            _ => None,
        }
    }

    /// The queue these filters ask for, parsed (an empty field is no filter).
    #[cfg(feature = "ssr")]
    pub fn parked_query(
        &self,
        limit: i64,
    ) -> tollgate::Result<tollgate::usecases::parked::ParkedQuery> {
        let given = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        tollgate::usecases::parked::ParkedQuery::parse(
            &tollgate::usecases::parked::ParkedQueryText {
                stage: given(&self.stage),
                state: given(&self.state),
                model: given(&self.model),
                min_age_s: self.min_age_s(),
                cursor: given(&self.cursor),
                limit: Some(limit),
                sort: given(&self.sort),
            },
        )
    }
}

/// One stage's count of records that are not closed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StageCount {
    pub stage: String,
    pub label: String,
    pub open: i64,
    /// Decided or recovering: a recovery is on its way.
    pub in_recovery: i64,
    /// How long the oldest has waited, in words.
    pub oldest: Option<String>,
}

/// One row of the queue.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct QueueRow {
    pub id: String,
    pub job_id: String,
    pub user: String,
    pub stage: String,
    pub stage_label: String,
    pub state: tollgate::model::ParkedState,
    pub model: Option<String>,
    pub age: String,
    pub parked_at: String,
    pub exposure: String,
    pub hold: Option<String>,
    pub reason: String,
    /// For a decided or recovering record: what the latest decision was,
    /// and whose.
    pub decided: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReviewQueue {
    pub counts: Vec<StageCount>,
    pub page: super::Paged<QueueRow>,
    /// Open records the current filter matches (what a bulk decision covers).
    pub matching_open: i64,
    /// Actions every matching open record's stage allows (for bulk).
    pub bulk_actions: Vec<(String, String)>,
    /// What a bulk decision would cover, before it is confirmed.
    pub bulk: BulkCosts,
    /// Models that have parked records, for the filter.
    pub models: Vec<String>,
    /// Unresolved submissions (submission_uncertain, open), and how many
    /// parked in the last hour: the banner's numbers.
    pub unresolved: i64,
    pub unresolved_last_hour: i64,
}

/// The money a bulk decision touches: each record's possible duplicate
/// cost (what its job may already have cost), their sum, what new attempts
/// of all of them would reserve, and today's room.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BulkCosts {
    /// (short record id, its job's possible duplicate cost in dollars).
    pub records: Vec<(String, String)>,
    pub exposure_total: String,
    pub new_attempts_total: String,
    pub day_room: String,
    /// How many new attempts today's room holds, of `records.len()`.
    pub new_attempts_fit: usize,
}

/// One action a record's stage permits, as a form shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ActionRow {
    pub action: String,
    pub label: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DecisionRow {
    pub action: String,
    pub label: String,
    pub reviewer: String,
    pub when: String,
    pub evidence: String,
    /// "refund: yes · hold: released", "provider job id pred_…", …
    pub details: String,
    /// "pending", "claimed (1 claim)", "succeeded", "failed".
    pub recovery: Option<String>,
    pub new_job: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReviewAttemptRow {
    pub attempt_no: i32,
    pub model: String,
    pub provider: String,
    pub state: tollgate::model::AttemptState,
    pub error_class: Option<tollgate::model::ErrorClass>,
    pub error: Option<String>,
    pub provider_job_id: Option<String>,
    pub idempotency_key: String,
    pub started: String,
    /// "$0.10 quoted", "unpriced", "not yet known".
    pub cost: String,
    pub hold: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReviewRecord {
    pub id: String,
    pub job_id: String,
    pub job_status: String,
    /// Its owner cancelled it while it was parked (and was refunded then).
    pub job_cancelled: bool,
    pub user: String,
    pub stage: String,
    pub stage_label: String,
    pub known: String,
    pub state: tollgate::model::ParkedState,
    pub round: i32,
    pub reason: String,
    pub last_error: Option<String>,
    /// (label, value) pairs of the evidence: sent at, key, endpoint, …
    pub evidence: Vec<(String, String)>,
    pub evidence_json: String,
    pub provider_job_id: Option<String>,
    /// The request's SHA-256, as stored with the job.
    pub fingerprint: String,
    /// When the record last changed or was observed.
    pub observed: String,
    pub polls: i32,
    pub deliveries: i32,
    pub exposure: String,
    pub exposure_words: String,
    pub hold: Option<String>,
    pub parked_at: String,
    pub age: String,
    pub allowed: Vec<ActionRow>,
    pub attempts: Vec<ReviewAttemptRow>,
    pub decisions: Vec<DecisionRow>,
    pub events: Vec<super::EventRow>,
}

/// "3 h 12 min", "2 d 4 h", "45 s".
#[cfg(feature = "ssr")]
pub(crate) fn age_words(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(feature = "ssr")]
fn recovery_words(r: &tollgate::store::Recovery) -> String {
    use tollgate::model::RecoveryState;
    match r.state {
        RecoveryState::Pending => "pending: waiting for a worker to claim it".into(),
        RecoveryState::Claimed => format!(
            "claimed by a worker ({} claim{})",
            r.attempts,
            if r.attempts == 1 { "" } else { "s" }
        ),
        RecoveryState::Succeeded => "succeeded: the job finished".into(),
        RecoveryState::Failed => "failed: the job parked again or ended failed".into(),
    }
}

#[cfg(feature = "ssr")]
pub(crate) fn decision_row(d: &tollgate::store::Decision) -> DecisionRow {
    let mut details = Vec::new();
    if let Some(r) = d.refund {
        details.push(format!("refund: {}", if r { "yes" } else { "no" }));
    }
    if let Some(r) = d.release_hold {
        details.push(format!(
            "hold: {}",
            if r { "released" } else { "kept booked" }
        ));
    }
    if let Some(id) = &d.provider_job_id {
        details.push(format!("provider job id {id}"));
    }
    if let Some(c) = d.duplicate_cost_usd {
        details.push(format!(
            "the original may already have cost {}",
            c.dollars()
        ));
    }
    DecisionRow {
        action: d.action.as_str().to_string(),
        label: d.action.label().to_string(),
        reviewer: d.reviewer_email.as_str().to_string(),
        when: super::ssr::when(d.decided_at),
        evidence: d.evidence.clone(),
        details: details.join(" · "),
        recovery: d.recovery.as_ref().map(recovery_words),
        new_job: d.new_job_id.map(|j| j.to_string()),
    }
}

/// The queue page's parts, each from the engine's records.
#[cfg(feature = "ssr")]
mod queue {
    use super::super::ssr::when;
    use super::{age_words, BulkCosts, QueueRow, ReviewQueue, StageCount};
    use chrono::{DateTime, Utc};
    use tollgate::model::{ParkedStage, ParkedState};
    use tollgate::store::{Decision, Parked, ParkedCount};
    use tollgate::usecases::parked::{exposure_amount, ReviewDesk};

    /// Open and recovering records per stage, and the oldest one's age.
    pub fn stage_counts(counts: &[ParkedCount], now: DateTime<Utc>) -> Vec<StageCount> {
        ParkedStage::ALL
            .iter()
            .map(|s| {
                let of: Vec<_> = counts.iter().filter(|c| c.stage == *s).collect();
                let sum = |open: bool| {
                    of.iter()
                        .filter(|c| (c.state == ParkedState::Open) == open)
                        .map(|c| c.count)
                        .sum()
                };
                StageCount {
                    stage: s.as_str().to_string(),
                    label: s.label().to_string(),
                    open: sum(true),
                    in_recovery: sum(false),
                    oldest: of
                        .iter()
                        .map(|c| c.oldest)
                        .min()
                        .map(|o| age_words((now - o).num_seconds())),
                }
            })
            .collect()
    }

    /// The page's data from the engine's one view of the desk.
    pub fn of(desk: ReviewDesk, now: DateTime<Utc>) -> ReviewQueue {
        let matching = &desk.bulk.records;
        let preview = &desk.bulk;
        ReviewQueue {
            counts: stage_counts(&desk.counts, now),
            matching_open: matching.len() as i64,
            bulk_actions: bulk_actions(matching),
            bulk: BulkCosts {
                records: (matching.iter())
                    .map(|r| (r.id.to_string()[..8].to_string(), r.exposure_usd.dollars()))
                    .collect(),
                exposure_total: preview.exposure_total.dollars(),
                new_attempts_total: preview.new_attempts_usd.dollars(),
                day_room: preview.day_room_usd.dollars(),
                new_attempts_fit: preview.new_attempts_fit,
            },
            unresolved: desk.unresolved.len() as i64,
            unresolved_last_hour: (desk.unresolved.iter())
                .filter(|r| now - r.created_at < chrono::Duration::hours(1))
                .count() as i64,
            models: desk.models,
            page: super::super::paged(desk.queue, |(r, decisions)| row(&r, &decisions, now)),
        }
    }

    pub fn row(r: &Parked, decisions: &[Decision], now: DateTime<Utc>) -> QueueRow {
        QueueRow {
            id: r.id.to_string(),
            job_id: r.job_id.to_string(),
            user: r.user_email.as_str().to_string(),
            stage: r.stage.as_str().to_string(),
            stage_label: r.stage.label().to_string(),
            state: r.state,
            model: r.model.clone(),
            age: age_words((now - r.created_at).num_seconds()),
            parked_at: when(r.created_at),
            exposure: exposure_amount(r.exposure_usd),
            hold: r.hold_usd.map(|h| h.dollars()),
            reason: r.evidence.reason.clone(),
            // The record's latest decision, when its state says it has one.
            decided: decisions
                .last()
                .filter(|_| r.state != tollgate::model::ParkedState::Open)
                .map(|d| format!("{} ({})", d.action.label(), d.reviewer_email.as_str())),
        }
    }

    /// The bulk form offers what every matching record's stage allows.
    pub fn bulk_actions(matching: &[Parked]) -> Vec<(String, String)> {
        let mut bulk: Option<Vec<tollgate::model::ReviewAction>> = None;
        for r in matching {
            let allowed = r.stage.allows_for(r.job_status).to_vec();
            bulk = Some(match bulk {
                None => allowed,
                Some(b) => b.into_iter().filter(|a| allowed.contains(a)).collect(),
            });
        }
        bulk.unwrap_or_default()
            .into_iter()
            .map(|a| (a.as_str().to_string(), a.label().to_string()))
            .collect()
    }
}

#[server]
pub async fn load_review_queue(filters: ReviewFilters) -> Result<ReviewQueue, ServerFnError> {
    use super::ssr::*;
    use tollgate::usecases::parked::ParkedQuery;
    require(Role::Reviewer).await?;
    let query = ParkedQuery {
        counted: true,
        ..filters.parked_query(50).map_err(fail)?
    };
    let desk = engine()?.review_desk(&query).await.map_err(fail)?;
    Ok(queue::of(desk, chrono::Utc::now()))
}

/// The record page's parts.
#[cfg(feature = "ssr")]
mod record {
    use super::super::ssr::when;
    use super::ReviewAttemptRow;
    use serde_json::Value;
    use tollgate::model::ParkedEvidence;
    use tollgate::store::Attempt;

    /// A JSON value as text, none for null.
    pub fn text(v: &Value) -> Option<String> {
        match v {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    /// The evidence a reviewer reads first, labelled; the raw JSON is
    /// shown apart.
    /// The labelled parts of the evidence, those it has.
    pub fn evidence(e: &ParkedEvidence) -> Vec<(String, String)> {
        let a = e.attempt.as_ref();
        [
            ("Sent at", a.and_then(|a| a.sent_at).map(when)),
            ("Idempotency key", e.idempotency_key().map(str::to_string)),
            ("Provider", a.map(|a| a.provider.clone())),
            ("Endpoint", a.and_then(|a| a.endpoint.clone())),
            ("Model", a.and_then(|a| a.model.clone())),
            (
                "Attempt",
                a.and_then(|a| a.attempt_no).map(|n| n.to_string()),
            ),
            ("Waited (s)", e.waited_s.map(|s| s.to_string())),
        ]
        .into_iter()
        .filter_map(|(label, value)| value.map(|v| (label.to_string(), v)))
        .collect()
    }

    pub fn attempt_row(a: &Attempt) -> ReviewAttemptRow {
        ReviewAttemptRow {
            attempt_no: a.attempt_no,
            model: a.model.clone(),
            provider: a.provider.clone(),
            state: a.state,
            error_class: a.error_class,
            error: a.error.clone(),
            provider_job_id: a.provider_job_id.clone(),
            idempotency_key: a.idempotency_key.clone(),
            started: when(a.started_at),
            cost: match (a.cost_usd, a.state.is_open()) {
                (Some(c), _) => format!(
                    "{} {}",
                    c.dollars(),
                    a.cost_source.map(|s| s.as_str()).unwrap_or_default()
                ),
                (None, true) => "not yet known".into(),
                (None, false) => "unpriced".into(),
            },
            hold: a.hold_usd.map(|h| h.dollars()),
        }
    }
}

#[server]
pub async fn load_review_record(id: String) -> Result<ReviewRecord, ServerFnError> {
    use super::ssr::*;
    use tollgate::usecases::parked::exposure_words;
    require(Role::Reviewer).await?;
    let t = engine()?;
    let id = id
        .parse()
        .map_err(|_| fail(tollgate::Error::NotFound("parked record")))?;
    let v = t.parked_view(id).await.map_err(fail)?;
    let r = &v.record;
    let now = chrono::Utc::now();
    let e = &r.evidence;
    let text = record::text;
    Ok(ReviewRecord {
        id: r.id.to_string(),
        job_id: r.job_id.to_string(),
        job_status: r.job_status.label().to_string(),
        job_cancelled: r.job_status == tollgate::model::JobStatus::Cancelled,
        user: r.user_email.as_str().to_string(),
        stage: r.stage.as_str().to_string(),
        stage_label: r.stage.label().to_string(),
        known: r.stage.known().to_string(),
        state: r.state,
        round: r.round,
        reason: e.reason.clone(),
        last_error: text(&e["last_error"]),
        evidence: record::evidence(e),
        evidence_json: serde_json::to_string_pretty(&e.to_json()).unwrap_or_default(),
        provider_job_id: r.provider_job_id.clone(),
        fingerprint: r.request_sha256.clone(),
        observed: when(r.updated_at),
        polls: r.polls,
        deliveries: r.deliveries,
        exposure: r.exposure_usd.dollars(),
        exposure_words: exposure_words(r.exposure_usd),
        hold: r.hold_usd.map(|h| h.dollars()),
        parked_at: when(r.created_at),
        age: age_words((now - r.created_at).num_seconds()),
        allowed: if r.state == tollgate::model::ParkedState::Open {
            r.stage
                .allows_for(r.job_status)
                .iter()
                .map(|a| ActionRow {
                    action: a.as_str().to_string(),
                    label: a.label().to_string(),
                })
                .collect()
        } else {
            Vec::new()
        },
        attempts: v.attempts.iter().map(record::attempt_row).collect(),
        decisions: v.decisions.iter().map(decision_row).collect(),
        events: v.events.iter().map(super::EventRow::of).collect(),
    })
}
