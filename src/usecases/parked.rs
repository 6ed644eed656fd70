//! Parked work, as reviewers meet it (rule 12): the queue, a record with its
//! evidence, and decisions. What a person sends is checked here (the action
//! against the stage, the evidence, the accounting choices); the decision
//! and everything it does are written by the store in one transaction. The
//! reviewer is always the caller, never a field of the request.

use crate::model::{
    DecisionId, FailureCode, JobFailure, JobId, JobStatus, ParkedEvidence, ParkedId, ParkedStage,
    ParkedState, ReviewAction, Role, Usd,
};
use crate::providers::{ErrorClass, Poll};
use crate::store::{
    Attempt, Decided, Decision, JobEvent, NewDecision, Parked, ParkedCount, ParkedCursor,
    ParkedFilter, ParkedSort, Remedy, Seek, User,
};
use crate::usecases::cursor::{self, Page, Position};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::{DateTime, Utc};

pub const PARKED_PAGE_MAX: i64 = 100;
pub const EVIDENCE_LEN_MAX: usize = 5000;
pub use crate::model::PROVIDER_JOB_ID_LEN_MAX;
/// Records one bulk decision may cover at most.
pub const BULK_MAX: i64 = 500;

/// Records a page of the queue holds when the asker does not say.
pub const PARKED_PAGE_DEFAULT: i64 = 50;

/// The queue as asked for, parsed once at the edge (`ParkedQuery::parse`
/// reads a query string's or a form's text).
#[derive(Clone, Debug)]
pub struct ParkedQuery {
    pub stage: Option<ParkedStage>,
    /// Every record that is not closed when `None`.
    pub state: Option<ParkedState>,
    pub model: Option<String>,
    /// Only records parked at least this long ago.
    pub min_age: Option<chrono::Duration>,
    pub sort: ParkedSort,
    pub seek: Option<Seek<ParkedCursor>>,
    pub limit: i64,
    /// Say where the page sits in the whole queue (two counts more).
    pub counted: bool,
}

impl Default for ParkedQuery {
    fn default() -> Self {
        ParkedQuery {
            stage: None,
            state: None,
            model: None,
            min_age: None,
            sort: ParkedSort::Age,
            seek: None,
            limit: PARKED_PAGE_DEFAULT,
            counted: false,
        }
    }
}

/// The queue's filters as a query string or a form sends them.
#[derive(Clone, Debug, Default)]
pub struct ParkedQueryText {
    pub stage: Option<String>,
    pub state: Option<String>,
    pub model: Option<String>,
    pub min_age_s: Option<i64>,
    pub cursor: Option<String>,
    pub limit: Option<i64>,
    /// `age` (oldest first, the default) or `exposure` (most first).
    pub sort: Option<String>,
}

/// What a reviewer decides, its action parsed at the edge
/// (`parse_action`); the rest is checked against that action.
#[derive(Clone, Debug)]
pub struct DecisionRequest {
    pub action: ReviewAction,
    pub evidence: String,
    pub provider_job_id: Option<String>,
    pub refund: Option<bool>,
    pub release_hold: Option<bool>,
}

/// An action's name as a form sends it.
pub fn parse_action(raw: &str) -> Result<ReviewAction> {
    ReviewAction::parse(raw.trim()).ok_or_else(|| {
        Error::invalid(
            "action",
            "must be reconcile, resume_poll, retry_delivery, accept_failure or new_attempt",
        )
    })
}

/// A record with everything a reviewer reads before deciding.
#[derive(Clone, Debug)]
pub struct ParkedView {
    pub record: Parked,
    pub attempts: Vec<Attempt>,
    pub decisions: Vec<Decision>,
    pub events: Vec<JobEvent>,
}

/// What a bulk decision would cover (see `Tollgate::bulk_preview`).
#[derive(Clone, Debug)]
pub struct BulkPreview {
    /// The open records it covers, oldest first.
    pub records: Vec<Parked>,
    /// What their jobs may already have cost, summed: a new attempt of
    /// each may pay for that work again.
    pub exposure_total: Usd,
    /// What new attempts of all of them would reserve.
    pub new_attempts_usd: Usd,
    /// What today's budget can still reserve (nothing when it is halted).
    pub day_room_usd: Usd,
    /// How many of them, in order, today's room holds as new attempts.
    pub new_attempts_fit: usize,
}

/// The reviewer's desk: a page of the queue with each record's decisions,
/// the counts by stage and state, what a bulk decision on the filter would
/// cover, and the submissions nobody has answered. One read model: the
/// page and `GET /v1/parked` take the queue's page from `parked_queue`.
#[derive(Clone, Debug)]
pub struct ReviewDesk {
    pub queue: Page<(Parked, Vec<Decision>)>,
    pub counts: Vec<ParkedCount>,
    pub bulk: BulkPreview,
    /// Open `submission_uncertain` records, oldest first.
    pub unresolved: Vec<Parked>,
    /// Models that have open records (for the model filter), sorted.
    pub models: Vec<String>,
}

/// What a day can still reserve: its cap less what is used and held, and
/// nothing while it is halted.
fn room_of(day: &crate::store::BudgetDay) -> Usd {
    if day.halted {
        return Usd::ZERO;
    }
    let room = day.cap_usd.decimal() - day.used_usd.decimal() - day.reserved_usd.decimal();
    Usd::new(room.max(rust_decimal::Decimal::ZERO))
}

fn sum(amounts: impl Iterator<Item = Usd>) -> Usd {
    amounts.fold(Usd::ZERO, Usd::plus)
}

/// What one decision applied to many records came to.
#[derive(Clone, Debug, Default)]
pub struct BulkOutcome {
    pub decided: Vec<(ParkedId, Decision)>,
    /// Records that changed meanwhile (or refused the action), and why.
    pub skipped: Vec<(ParkedId, String)>,
}

/// Text a person wrote: trimmed, required, bounded, printable (new lines
/// and tabs allowed).
pub fn checked_text(field: &str, text: &str, max: usize) -> Result<String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::invalid(field, "say what you found; it is required"));
    }
    if text.chars().count() > max {
        return Err(Error::invalid(field, format!("at most {max} characters")));
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t' && c != '\r')
    {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    Ok(text.to_string())
}

fn parse_stage(raw: Option<&str>) -> Result<Option<ParkedStage>> {
    raw.filter(|s| !s.is_empty())
        .map(|s| {
            ParkedStage::parse(s).ok_or_else(|| {
                Error::invalid(
                    "stage",
                    "must be submission_uncertain, polling_exhausted, delivery_exhausted or generation_failed",
                )
            })
        })
        .transpose()
}

fn parse_state(raw: Option<&str>) -> Result<Option<ParkedState>> {
    raw.filter(|s| !s.is_empty())
        .map(|s| {
            ParkedState::parse(s).ok_or_else(|| {
                Error::invalid("state", "must be open, decided, recovering or closed")
            })
        })
        .transpose()
}

fn parse_sort(raw: Option<&str>) -> Result<ParkedSort> {
    match raw {
        None | Some("age") => Ok(ParkedSort::Age),
        Some("exposure") => Ok(ParkedSort::Exposure),
        Some(_) => Err(Error::invalid("sort", "must be age or exposure")),
    }
}

/// `created_at|id`, and the exposure in micros in the exposure sort.
impl Position for ParkedCursor {
    fn parts(&self) -> Vec<String> {
        let mut parts = vec![cursor::time_part(self.created_at), self.id.to_string()];
        if let Some(e) = self.exposure_usd {
            parts.push(e.micros().unwrap_or(i64::MAX).to_string());
        }
        parts
    }

    fn read(parts: &[&str]) -> Option<Self> {
        let (at, id, exposure) = match parts {
            [at, id] => (at, id, None),
            [at, id, e] => (at, id, Some(Usd::from_micros(e.parse().ok()?))),
            _ => return None,
        };
        Some(ParkedCursor {
            exposure_usd: exposure,
            created_at: cursor::read_time(at)?,
            id: id.parse().ok()?,
        })
    }
}

/// A record's place in the queue's order.
fn place_in(p: &Parked, sort: ParkedSort) -> ParkedCursor {
    ParkedCursor {
        exposure_usd: (sort == ParkedSort::Exposure).then_some(p.exposure_usd),
        created_at: p.created_at,
        id: p.id,
    }
}

/// A cursor of this sort: one of the other sort's would start anywhere.
fn decode_seek(c: Option<&str>, sort: ParkedSort) -> Result<Option<Seek<ParkedCursor>>> {
    let seek = cursor::decode_opt::<ParkedCursor>(c)?;
    if seek.is_some_and(|s| s.key().exposure_usd.is_some() != (sort == ParkedSort::Exposure)) {
        return Err(Error::invalid(
            "cursor",
            "is not a cursor returned by this API for this sort",
        ));
    }
    Ok(seek)
}

impl ParkedQuery {
    pub fn parse(text: &ParkedQueryText) -> Result<ParkedQuery> {
        let limit = text.limit.unwrap_or(PARKED_PAGE_DEFAULT);
        if !(1..=PARKED_PAGE_MAX).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be 1 to {PARKED_PAGE_MAX}"),
            ));
        }
        if text
            .min_age_s
            .is_some_and(|s| !(0..=10 * 365 * 86_400).contains(&s))
        {
            return Err(Error::invalid(
                "min_age_s",
                "must be 0 to ten years in seconds",
            ));
        }
        let model = text.model.clone().filter(|m| !m.is_empty());
        if model.as_ref().is_some_and(|m| m.len() > 200) {
            return Err(Error::invalid("model", "at most 200 characters"));
        }
        let sort = parse_sort(text.sort.as_deref())?;
        Ok(ParkedQuery {
            stage: parse_stage(text.stage.as_deref())?,
            state: parse_state(text.state.as_deref())?,
            model,
            min_age: text
                .min_age_s
                .filter(|s| *s > 0)
                .map(chrono::Duration::seconds),
            sort,
            seek: decode_seek(text.cursor.as_deref(), sort)?,
            limit,
            counted: false,
        })
    }

    /// The store's filter for this query as of now, reading at most `limit`.
    fn filter(&self, limit: i64) -> ParkedFilter {
        debug_assert!(limit >= 1, "a list reads at least one row");
        ParkedFilter {
            stage: self.stage,
            state: self.state,
            model: self.model.clone(),
            parked_before: self.min_age.map(|age| Utc::now() - age),
            sort: self.sort,
            seek: self.seek,
            limit,
        }
    }
}

impl Tollgate {
    /// The queue: records that are not closed (or of one state), oldest or
    /// most exposed first, a page at a time.
    pub async fn parked_list(&self, q: &ParkedQuery) -> Result<Page<Parked>> {
        let limit = q.limit;
        if !(1..=PARKED_PAGE_MAX).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be 1 to {PARKED_PAGE_MAX}"),
            ));
        }
        let filter = q.filter(limit + 1);
        let list = self.store().list_parked(&filter).await?;
        let sort = filter.sort;
        let at = |p: &Parked| place_in(p, sort);
        let mut page = Page::of(list, limit as usize, filter.seek, at);
        if q.counted {
            let count = |seek| {
                let f = ParkedFilter {
                    seek,
                    ..filter.clone()
                };
                async move { self.store().count_parked(&f).await }
            };
            page.place = Some(cursor::place_of(&page, at, count).await?);
        }
        Ok(page)
    }

    /// Counts of records that are not closed, by stage and state.
    pub async fn parked_counts(&self) -> Result<Vec<ParkedCount>> {
        Ok(self.store().parked_counts().await?)
    }

    /// A record with its job's attempts, its decisions and the timeline.
    pub async fn parked_view(&self, id: ParkedId) -> Result<ParkedView> {
        let record = self
            .store()
            .parked(id)
            .await?
            .ok_or(Error::NotFound("parked record"))?;
        let (attempts, decisions, events) = tokio::try_join!(
            self.store().attempts(record.job_id),
            self.store().decisions(id),
            self.store().job_events(record.job_id),
        )?;
        Ok(ParkedView {
            record,
            attempts,
            decisions,
            events: crate::model::in_order_of_happening(events, |e| &e.happening),
        })
    }

    /// A page of the queue, each record with its decisions (oldest first),
    /// read in one statement for the page.
    pub async fn parked_queue(&self, q: &ParkedQuery) -> Result<Page<(Parked, Vec<Decision>)>> {
        let page = self.parked_list(q).await?;
        let ids: Vec<ParkedId> = page.items.iter().map(|p| p.id).collect();
        let mut by_record: std::collections::HashMap<ParkedId, Vec<Decision>> =
            std::collections::HashMap::new();
        for d in self.store().decisions_of(&ids).await? {
            by_record.entry(d.parked_id).or_default().push(d);
        }
        Ok(page.map(|p| {
            let decisions = by_record.remove(&p.id).unwrap_or_default();
            (p, decisions)
        }))
    }

    /// Everything the review page shows, for one filter (see `ReviewDesk`).
    pub async fn review_desk(&self, q: &ParkedQuery) -> Result<ReviewDesk> {
        let uncertain = ParkedQuery {
            stage: Some(ParkedStage::SubmissionUncertain),
            ..Default::default()
        };
        let every = ParkedQuery::default();
        let (queue, counts, bulk, unresolved, open) = tokio::try_join!(
            self.parked_queue(q),
            self.parked_counts(),
            self.bulk_preview(q),
            self.parked_matching(&uncertain),
            self.parked_matching(&every),
        )?;
        let mut models: Vec<String> = (queue.items.iter().map(|(p, _)| p))
            .chain(&open)
            .filter_map(|r| r.model.clone())
            .chain(q.model.clone())
            .collect();
        models.sort();
        models.dedup();
        Ok(ReviewDesk {
            queue,
            counts,
            bulk,
            unresolved,
            models,
        })
    }

    /// The decisions recorded on one parked record, oldest first.
    pub async fn decisions(&self, id: ParkedId) -> Result<Vec<Decision>> {
        Ok(self.store().decisions(id).await?)
    }

    /// A job's record that is not closed, if any (the end user's view).
    pub async fn parked_of_job(&self, job: JobId) -> Result<Vec<Parked>> {
        Ok(self.store().parked_of_job(job).await?)
    }

    /// Rule 12: records a reviewer's decision and applies it in one
    /// transaction. `Ok((decision, true))` when it was made now; `false`
    /// when the same decision was already recorded (the first is returned).
    pub async fn decide(
        &self,
        reviewer: &User,
        id: ParkedId,
        req: &DecisionRequest,
    ) -> Result<(Decision, bool)> {
        if !reviewer.role.allows(Role::Reviewer) {
            return Err(Error::Forbidden);
        }
        let action = req.action;
        let evidence = checked_text("evidence", &req.evidence, EVIDENCE_LEN_MAX)?;
        refuse_stray_fields(action, req)?;
        let record = self
            .store()
            .parked(id)
            .await?
            .ok_or(Error::NotFound("parked record"))?;
        let decided_at = Utc::now();
        let remedy = self.remedy(action, req, &record, decided_at).await?;
        let d = NewDecision {
            id: DecisionId::new(),
            parked_id: id,
            evidence,
            reviewer: reviewer.id,
            decided_at,
            remedy,
        };
        let decided = self.store().decide(&d).await?;
        if let Decided::Created(_) = decided {
            if action.is_recovery() || action == ReviewAction::NewAttempt {
                self.doorbell().notify_one();
            }
            tracing::info!(parked = %id, action = action.as_str(), reviewer = %reviewer.email.as_str(), "decision recorded");
        }
        decision_outcome(action, decided)
    }

    /// The request as the one action it names, with that action's
    /// parameters checked (a reconcile's id with the provider too).
    async fn remedy(
        &self,
        action: ReviewAction,
        req: &DecisionRequest,
        record: &Parked,
        decided_at: DateTime<Utc>,
    ) -> Result<Remedy> {
        Ok(match action {
            ReviewAction::Reconcile => {
                let raw = req.provider_job_id.as_deref().unwrap_or("").trim();
                if !crate::model::is_plain_provider_job_id(raw) {
                    return Err(Error::invalid(
                        "provider_job_id",
                        format!("the provider's job id: 1 to {PROVIDER_JOB_ID_LEN_MAX} letters, digits, '-', '_' or '.'"),
                    ));
                }
                let seen = self.reconcile_check(record, raw).await?;
                Remedy::Reconcile {
                    provider_job_id: raw.to_string(),
                    evidence: reconciled_evidence(&record.evidence, raw, &seen),
                }
            }
            ReviewAction::ResumePoll => Remedy::ResumePoll {
                deadline: decided_at + self.resumed_polling(record),
            },
            ReviewAction::RetryDelivery => Remedy::RetryDelivery,
            ReviewAction::AcceptFailure => accept_failure(req, record)?,
            ReviewAction::NewAttempt => Remedy::NewAttempt {
                new_job: JobId::new(),
                failure: JobFailure::new(
                    FailureCode::ReplacedByNewAttempt,
                    "A reviewer ordered a new attempt in its place; this job's credits moved to the new one.",
                ),
            },
        })
    }

    /// Status checks resume for the model's own polling time.
    fn resumed_polling(&self, record: &Parked) -> chrono::Duration {
        let timeout = record
            .model
            .as_deref()
            .and_then(|m| self.models().get(m))
            .map(|spec| spec.poll_timeout)
            .unwrap_or(std::time::Duration::from_secs(600));
        chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::minutes(10))
    }

    /// Rule 12: a reconcile is checked with the provider where it can be
    /// asked. An id the provider does not know is refused (it would send
    /// status checks after nothing, while the real prediction could never
    /// be attached); what the provider says of a known one goes into the
    /// evidence; a provider that cannot answer now is said so, and the
    /// reviewer's word stands.
    async fn reconcile_check(&self, record: &crate::store::Parked, id: &str) -> Result<String> {
        let Some(spec) = record.model.as_deref().and_then(|m| self.models().get(m)) else {
            return Ok("the model is no longer configured, so the provider was not asked".into());
        };
        if spec.provider_name() != "http" {
            return Ok("this provider cannot be asked about a job id".into());
        }
        Ok(match self.provider(spec).poll(spec, id).await {
            Ok(Poll::Pending) => "the provider says it is still running".into(),
            Ok(Poll::Succeeded(_)) => "the provider says it succeeded".into(),
            Ok(Poll::Failed(e)) => format!(
                "the provider says it ended without an output ({})",
                e.class.as_str()
            ),
            Err(e) if e.class == ErrorClass::NotFound => {
                return Err(Error::BadRequest {
                    status: 422,
                    code: "UNKNOWN_PROVIDER_JOB",
                    message: format!(
                        "the provider has no job {id}; look it up again (it is the id the provider's dashboard or logs show for our idempotency key)"
                    ),
                })
            }
            Err(e) => format!(
                "the provider could not be asked now ({}), so the id is taken on the reviewer's word",
                e.class.as_str()
            ),
        })
    }

    /// How many open records a filter matches (what a bulk decision would
    /// cover, shown before it is confirmed).
    pub async fn parked_matching(&self, q: &ParkedQuery) -> Result<Vec<Parked>> {
        let q = ParkedQuery {
            state: Some(ParkedState::Open),
            seek: None,
            ..q.clone()
        };
        Ok(self.store().list_parked(&q.filter(BULK_MAX)).await?)
    }

    /// What a bulk decision on a filter would cover, shown before it is
    /// confirmed: each record's possible duplicate cost and their sum, what
    /// new attempts of all of them would reserve, and today's room.
    pub async fn bulk_preview(&self, q: &ParkedQuery) -> Result<BulkPreview> {
        let records = self.parked_matching(q).await?;
        let day = self.budget(Utc::now().date_naive()).await?;
        let day_room_usd = room_of(&day);
        let mut preview = BulkPreview {
            exposure_total: sum(records.iter().map(|r| r.exposure_usd)),
            new_attempts_usd: sum(records.iter().map(|r| r.job_estimated_usd)),
            day_room_usd,
            new_attempts_fit: 0,
            records,
        };
        let mut left = day_room_usd.decimal();
        for r in &preview.records {
            if r.job_estimated_usd.decimal() > left {
                break;
            }
            left -= r.job_estimated_usd.decimal();
            preview.new_attempts_fit += 1;
        }
        Ok(preview)
    }

    /// One decision applied to every open record a filter matches (not just
    /// one page), each with its own decision; a record that changed
    /// meanwhile, or whose stage refuses the action, is skipped and listed.
    /// New attempts stop where today's budget has no room for another
    /// (rule 11 reserves each again when it runs).
    pub async fn decide_bulk(
        &self,
        reviewer: &User,
        q: &ParkedQuery,
        req: &DecisionRequest,
    ) -> Result<BulkOutcome> {
        if !reviewer.role.allows(Role::Reviewer) {
            return Err(Error::Forbidden);
        }
        let new_attempts = req.action == ReviewAction::NewAttempt;
        let mut room = room_of(&self.budget(Utc::now().date_naive()).await?).decimal();
        let mut out = BulkOutcome::default();
        for record in self.parked_matching(q).await? {
            let estimate = record.job_estimated_usd.decimal();
            if new_attempts && estimate > room {
                out.skipped.push((
                    record.id,
                    format!(
                        "today's budget has room for no more new attempts ({} left, this one needs {})",
                        Usd::new(room).dollars(),
                        record.job_estimated_usd.dollars()
                    ),
                ));
                continue;
            }
            match self.decide(reviewer, record.id, req).await {
                Ok((d, true)) => {
                    if new_attempts {
                        room -= estimate;
                    }
                    out.decided.push((record.id, d))
                }
                Ok((_, false)) => out
                    .skipped
                    .push((record.id, "already decided the same way".into())),
                Err(
                    e @ (Error::Conflict { .. } | Error::BadRequest { .. } | Error::Invalid { .. }),
                ) => out.skipped.push((record.id, e.to_string())),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// A reviewer's note on a record: evidence on the timeline, no decision.
    pub async fn note_parked(&self, by: &User, id: ParkedId, text: &str) -> Result<JobEvent> {
        if !by.role.allows(Role::Reviewer) {
            return Err(Error::Forbidden);
        }
        let text = checked_text("text", text, EVIDENCE_LEN_MAX)?;
        Ok(self
            .store()
            .note_parked(id, &by.email, &text, Utc::now())
            .await?)
    }
}

/// The record's story in its new stage after a reconcile; what came before
/// stays on the timeline. It names what was found and what the provider
/// said of it, never who found it (owners read the reason).
fn reconciled_evidence(before: &ParkedEvidence, id: &str, seen: &str) -> ParkedEvidence {
    let found = format!(
        "A reviewer found the provider's job {id} for this request ({seen}); status checks may resume."
    );
    ParkedEvidence {
        reason: found,
        ..before.clone()
    }
    .with("before_reconcile", before.reason.clone())
    .with("reconcile_check", seen)
}

/// What an exposure is in words: "up to $0.10 may have been spent".
pub fn exposure_words(exposure: Usd) -> String {
    if exposure == Usd::ZERO {
        "nothing known to be spent".into()
    } else {
        format!("{} may have been spent", exposure_amount(exposure))
    }
}

/// An exposure under a "may have spent" heading: "up to $0.10".
pub fn exposure_amount(exposure: Usd) -> String {
    if exposure == Usd::ZERO {
        "nothing known".into()
    } else {
        format!("up to {}", exposure.dollars())
    }
}

/// Each field belongs to one action: anything else is refused, so a
/// decision records exactly what was decided.
fn refuse_stray_fields(action: ReviewAction, req: &DecisionRequest) -> Result<()> {
    let stray = |field: &str| {
        Err(Error::invalid(
            field,
            format!("does not belong to the {} action", action.as_str()),
        ))
    };
    if action != ReviewAction::Reconcile && req.provider_job_id.is_some() {
        return stray("provider_job_id");
    }
    if action != ReviewAction::AcceptFailure {
        if req.refund.is_some() {
            return stray("refund");
        }
        if req.release_hold.is_some() {
            return stray("release_hold");
        }
    }
    Ok(())
}

/// `accept_failure` records its accounting: both choices are required, and
/// a job its owner cancelled was refunded then, so it cannot keep credits.
fn accept_failure(req: &DecisionRequest, record: &Parked) -> Result<Remedy> {
    if record.job_status == JobStatus::Cancelled && req.refund == Some(false) {
        return Err(Error::invalid(
            "refund",
            "the owner cancelled this job and got their credits back then; refund must be true",
        ));
    }
    let (Some(refund), Some(release_hold)) = (req.refund, req.release_hold) else {
        let missing = if req.refund.is_none() {
            "refund"
        } else {
            "release_hold"
        };
        return Err(Error::invalid(
            missing,
            "accept_failure records its accounting: say whether to refund the credits (refund) and whether to release the budget hold (release_hold)",
        ));
    };
    let message = if refund {
        "A reviewer closed this job as failed; your credits were refunded."
    } else {
        "A reviewer closed this job as failed; the provider may have been paid, so the credits were kept."
    };
    Ok(Remedy::AcceptFailure {
        refund,
        release_hold,
        failure: JobFailure::new(FailureCode::FailedAfterReview, message),
    })
}

/// What the store's answer means to the reviewer: the decision, or why
/// it was not made.
fn decision_outcome(action: ReviewAction, decided: Decided) -> Result<(Decision, bool)> {
    let conflict = |message: String| Error::Conflict {
        code: "DECISION_CONFLICT",
        message,
    };
    match decided {
        Decided::Created(decision) => Ok((decision, true)),
        Decided::Existing(decision) => Ok((decision, false)),
        Decided::Conflict(existing) => Err(conflict(format!(
            "this record was already decided ({} by {}); a different decision cannot replace it",
            existing.action.as_str(),
            existing.reviewer_email.as_str()
        ))),
        Decided::Closed => Err(conflict(
            "this record is closed: its job ended without a decision".into(),
        )),
        Decided::Stale(why) => Err(conflict(format!(
            "the job changed meanwhile ({why}); reload the record"
        ))),
        Decided::NotAllowed(stage, job_status) => Err(Error::BadRequest {
            status: 422,
            code: "ACTION_NOT_ALLOWED",
            message: format!(
                "{} is not allowed in stage {}{}; allowed: {}",
                action.as_str(),
                stage.as_str(),
                if job_status == JobStatus::Cancelled {
                    " of a job its owner cancelled"
                } else {
                    ""
                },
                stage
                    .allows_for(job_status)
                    .iter()
                    .map(|a| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}
