//! The rows the store reads and writes, in domain types.

pub use crate::model::ParkedStage;
use crate::model::{
    ApiTokenId, AssetId, AttemptEnd, AttemptId, AttemptState, CostSource, Credits, DecisionId,
    Email, ErrorClass, Happening, JobId, JobKind, JobRequest, JobStatus, LedgerEntryId, LedgerKind,
    ParkedId, ParkedState, Progress, Purpose as AttemptPurpose, RecoveryState, Review,
    ReviewAction, Role, Usd, UserId,
};
use crate::model::{DeliveryId, DeliveryState, WebhookEndpointId, WebhookEvent};
use chrono::{DateTime, Utc};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct User {
    pub id: UserId,
    pub email: Email,
    pub role: Role,
    pub disabled: bool,
    pub balance: Credits,
    pub created_at: DateTime<Utc>,
    /// Sessions started before this are no longer honoured.
    #[serde(skip)]
    pub sessions_valid_after: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug)]
pub struct NewUser {
    pub id: UserId,
    pub email: Email,
    pub password_hash: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ApiToken {
    pub id: ApiTokenId,
    pub user_id: UserId,
    pub name: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug)]
pub struct NewApiToken {
    pub id: ApiTokenId,
    pub user_id: UserId,
    pub name: String,
    pub token_hash: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LedgerEntry {
    pub id: LedgerEntryId,
    pub user_id: UserId,
    pub amount: Credits,
    pub kind: LedgerKind,
    pub reference: String,
    pub actor_id: Option<UserId>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug)]
pub struct NewLedgerEntry {
    pub id: LedgerEntryId,
    pub user_id: UserId,
    pub amount: Credits,
    pub kind: LedgerKind,
    pub reference: String,
    pub actor_id: Option<UserId>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Asset {
    pub id: AssetId,
    pub user_id: UserId,
    pub sha256: String,
    pub content_type: String,
    pub width: u32,
    pub height: u32,
    pub bytes: u64,
    pub object_key: String,
    pub created_at: DateTime<Utc>,
}

pub type NewAsset = Asset;

#[derive(Clone, Debug)]
pub struct Job {
    pub id: JobId,
    pub user_id: UserId,
    pub kind: JobKind,
    pub status: JobStatus,
    pub request: JobRequest,
    pub request_sha256: String,
    pub idempotency_key: Option<String>,
    pub credits: Credits,
    pub estimated_usd: Usd,
    pub error: Option<crate::model::JobFailure>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    /// Set when the output is stored.
    pub output_content_type: Option<String>,
    /// What the review found, when one ran.
    pub review: Option<Review>,
    /// The typed outputs of the steps completed so far (rule 6).
    pub progress: Progress,
    /// The job a reviewer's `new_attempt` made this one to replace.
    pub replaces: Option<JobId>,
    /// The job a reviewer's `new_attempt` made in this one's place.
    pub replaced_by: Option<JobId>,
    /// A repair's lineage (its original) and the version it repairs; both
    /// `None` for an original.
    pub lineage_root: Option<JobId>,
    pub repair_of: Option<JobId>,
    /// A repair's instruction, as the person wrote it.
    pub instruction: Option<String>,
    /// When retention removed its output (and so its lineage can no longer
    /// be repaired).
    pub media_purged_at: Option<DateTime<Utc>>,
}

impl Job {
    /// The original of this job's lineage (itself, for an original).
    pub fn root(&self) -> JobId {
        self.lineage_root.unwrap_or(self.id)
    }

    pub fn is_repair(&self) -> bool {
        self.repair_of.is_some()
    }

    /// A finished repair that did not improve on the version the person
    /// had: that version stays delivered, and this one is the candidate.
    pub fn retained_previous(&self) -> bool {
        self.is_repair()
            && self.status == JobStatus::Succeeded
            && self
                .progress
                .compare
                .as_ref()
                .is_none_or(|c| c.effect() != crate::model::LineageEffect::Deliver)
    }

    /// A finished image edit whose own output was the person's: the first
    /// edit, or a repair delivered as better (what may be chosen again).
    pub fn was_delivered(&self) -> bool {
        self.kind == JobKind::ImageEdit
            && self.status == JobStatus::Succeeded
            && !self.retained_previous()
    }

    /// The job whose output this one delivers: itself, or the previous
    /// version a repair kept.
    pub fn delivers(&self) -> JobId {
        if !self.retained_previous() {
            return self.id;
        }
        self.progress
            .compare
            .as_ref()
            .map(|c| c.against)
            .or(self.repair_of)
            .unwrap_or(self.id)
    }
}

/// A repair to submit: the job (its request the original's, frozen) and
/// its lineage. The version it repairs is the lineage's delivered one,
/// read in the submitting transaction.
#[derive(Clone, Debug)]
pub struct NewRepair {
    pub job: NewJob,
    pub root: JobId,
    pub instruction: String,
}

#[derive(Clone, Debug)]
pub struct NewJob {
    pub id: JobId,
    pub user_id: UserId,
    pub request: JobRequest,
    pub request_sha256: String,
    pub idempotency_key: String,
    pub credits: Credits,
    pub estimated_usd: Usd,
    pub created_at: DateTime<Utc>,
    /// The API token it was ordered with; `None` from the pages.
    pub token_id: Option<ApiTokenId>,
}

/// What a submission found: a new job (charged), or the one already made
/// under this key.
#[derive(Clone, Debug)]
pub enum Submitted {
    Created(Job),
    Existing(Job),
}

#[derive(Clone, Debug)]
pub struct JobEvent {
    pub id: i64,
    pub job_id: JobId,
    pub happening: Happening,
    pub created_at: DateTime<Utc>,
}

/// As stored: `kind` and `detail` beside the id and time.
impl Serialize for JobEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let (kind, detail) = self.happening.to_stored();
        let mut o = s.serialize_struct("JobEvent", 5)?;
        o.serialize_field("id", &self.id)?;
        o.serialize_field("job_id", &self.job_id)?;
        o.serialize_field("kind", &kind)?;
        o.serialize_field("detail", &detail)?;
        o.serialize_field("created_at", &self.created_at)?;
        o.end()
    }
}

impl JobEvent {
    /// The stored kind (`claimed`, `step`, …), as the API writes it.
    pub fn kind(&self) -> String {
        self.happening.kind()
    }

    /// The stored detail, as the API writes it.
    pub fn detail(&self) -> serde_json::Value {
        self.happening.to_stored().1
    }
}

/// Where a page of a list starts, in the list's own order: just after a
/// position (the next page) or just before it (the previous page). A list
/// read `Before` a position is still returned in the list's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek<K> {
    After(K),
    Before(K),
}

impl<K> Seek<K> {
    pub fn key(&self) -> &K {
        match self {
            Seek::After(k) | Seek::Before(k) => k,
        }
    }
}

/// A job's place in the newest-first list of jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobCursor {
    pub created_at: DateTime<Utc>,
    pub id: JobId,
}

/// A ledger entry's place in a person's newest-first history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerCursor {
    pub created_at: DateTime<Utc>,
    pub id: LedgerEntryId,
}

/// A page of one person's ledger, newest first.
#[derive(Clone, Debug)]
pub struct LedgerFilter {
    pub user_id: UserId,
    pub seek: Option<Seek<LedgerCursor>>,
    pub limit: i64,
}

#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    pub user_id: Option<UserId>,
    pub status: Option<JobStatus>,
    pub seek: Option<Seek<JobCursor>>,
    pub limit: i64,
    /// Only jobs that start a lineage (no repairs).
    pub roots_only: bool,
}

/// A job a worker holds: the job and the fencing token its writes must name.
#[derive(Clone, Debug)]
pub struct Claim {
    pub job: Job,
    pub token: i64,
}

/// A hold of a model's estimate against a day's budget (rule 11), taken by
/// the attempt's own write or not at all.
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    pub day: chrono::NaiveDate,
    pub amount: Usd,
    /// The day's cap when the day has no row yet.
    pub default_cap: Usd,
}

/// A provider attempt as it is written before the call (rule 7).
#[derive(Clone, Debug)]
pub struct NewAttempt {
    pub id: AttemptId,
    pub job_id: JobId,
    pub purpose: AttemptPurpose,
    pub provider: String,
    /// Where the call goes; recovery sends nowhere else.
    pub endpoint: Option<String>,
    pub model: String,
    pub attempt_no: i32,
    pub idempotency_key: String,
    pub hold: Option<Hold>,
    pub started_at: DateTime<Utc>,
}

/// What an attempt ended as. `cost_usd: None` is unpriced, never zero.
#[derive(Clone, Debug)]
pub struct AttemptOutcome {
    pub end: AttemptEnd,
    pub provider_job_id: Option<String>,
    pub error_class: Option<ErrorClass>,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub usage: Option<serde_json::Value>,
    pub cost: Option<(Usd, CostSource)>,
    pub finished_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Attempt {
    pub id: AttemptId,
    pub job_id: JobId,
    pub purpose: AttemptPurpose,
    pub provider: String,
    pub endpoint: Option<String>,
    pub model: String,
    pub attempt_no: i32,
    pub state: AttemptState,
    pub idempotency_key: String,
    pub provider_job_id: Option<String>,
    pub error_class: Option<ErrorClass>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
    pub usage: Option<serde_json::Value>,
    pub cost_usd: Option<Usd>,
    pub cost_source: Option<CostSource>,
    /// The estimate held against `budget_day` before the call.
    pub hold_usd: Option<Usd>,
    pub budget_day: Option<chrono::NaiveDate>,
    /// What settled the hold: the cost, or the hold when the cost is unknown.
    pub settled_usd: Option<Usd>,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl Attempt {
    /// Whether its hold still counts as reserved.
    pub fn holding(&self) -> bool {
        self.hold_usd.is_some() && self.settled_usd.is_none()
    }
}

/// A run's terminal write (rule 9).
#[derive(Clone, Debug)]
pub enum Finish {
    Succeeded {
        output_key: String,
        content_type: String,
        review: Option<Review>,
        /// A repair's effect on its lineage, from its comparison.
        lineage: Option<crate::model::LineageEffect>,
    },
    /// The job fails and is refunded (rule 3).
    Failed(crate::model::JobFailure),
}

/// One step of a run's durable write. Every op names the run's fencing
/// token through its `Unit`; the first that finds it stale stops the unit.
#[derive(Clone, Debug)]
pub enum Op {
    /// The run's progress (its typed step outputs), recorded as it stands.
    Progress(Progress),
    /// Rules 7 and 11: holds the attempt's estimate against its day and
    /// writes it `submitting`: both, or neither (`Applied::Refused`).
    BeginAttempt(NewAttempt),
    /// Rule 7: the provider accepted the attempt under this id.
    Submitted {
        attempt: AttemptId,
        provider_job_id: String,
    },
    /// Rule 10: the attempt's outcome and cost, written once; its hold is
    /// settled with the cost (or kept at the estimate when unknown). A
    /// repeated report refreshes only what was unknown.
    EndAttempt {
        attempt: AttemptId,
        outcome: AttemptOutcome,
    },
    /// An observation for the job's timeline.
    Event(Happening),
    /// Rule 9: the terminal write (a failure is refunded, every hold left
    /// is settled).
    Finish(Finish),
    /// Rule 12: the job waits for a person; its holds stay.
    Park(NewParked),
    /// Gives the job back to the queue.
    Release,
}

/// One run's durable write (DESIGN.md, "How a job commits"): its ops are
/// applied in order in one transaction, with the run's fencing token
/// checked by each, so a stale run writes nothing.
#[derive(Clone, Debug)]
pub struct Unit {
    pub job: JobId,
    pub token: i64,
    pub ops: Vec<Op>,
}

impl Unit {
    /// Written under a claim's fencing token (1 or more), with at most one
    /// ending (a finish, a park or a release).
    pub fn is_well_formed(&self) -> bool {
        let endings = self
            .ops
            .iter()
            .filter(|op| matches!(op, Op::Finish(_) | Op::Park(_) | Op::Release))
            .count();
        self.token >= 1 && endings <= 1
    }
}

/// What became of a unit.
#[derive(Clone, Debug)]
pub enum Applied {
    /// Every op was written; after a `Finish` or `Park`, the job as stored.
    Done(Option<Box<Job>>),
    /// A `BeginAttempt` found the day halted or its cap too close: that op
    /// and the ones after it wrote nothing; the ones before it stand.
    Refused,
    /// The run no longer holds the job: nothing of the unit was written.
    Stale,
}

/// What a commit was for, as `/metrics` counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// A batch of claims.
    Claim,
    /// A heartbeat for every lease a node holds.
    Heartbeat,
    /// A group of runs' units of work.
    Units,
    /// A submission (the job and its charge).
    Submit,
    /// Anything else: the API, admins, the sweeper.
    Other,
}

impl Purpose {
    pub const ALL: [Purpose; 5] = [
        Purpose::Claim,
        Purpose::Heartbeat,
        Purpose::Units,
        Purpose::Submit,
        Purpose::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Claim => "claim",
            Purpose::Heartbeat => "heartbeat",
            Purpose::Units => "units",
            Purpose::Submit => "submit",
            Purpose::Other => "other",
        }
    }
}

/// One UTC day of the spending breaker.
#[derive(Clone, Debug, Serialize)]
pub struct BudgetDay {
    pub day: chrono::NaiveDate,
    pub cap_usd: Usd,
    /// What the breaker booked: priced costs plus the estimate kept for
    /// each unpriced paid call.
    pub used_usd: Usd,
    /// Holds of attempts not yet settled.
    pub reserved_usd: Usd,
    pub halted: bool,
    pub halted_reason: Option<String>,
    pub halted_by: Option<UserId>,
    pub halted_at: Option<DateTime<Utc>>,
}

/// One change to a day's breaker, with who made it, when and why.
#[derive(Clone, Debug)]
pub struct BudgetChange {
    pub kind: BudgetChangeKind,
    pub reason: Option<String>,
    pub by: Option<UserId>,
    pub at: DateTime<Utc>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetChangeKind {
    /// The day's cap was set to this.
    Cap(Usd),
    /// No paid call is sent on the day until it is resumed.
    Halt,
    Resume,
}

impl BudgetChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetChangeKind::Cap(_) => "cap",
            BudgetChangeKind::Halt => "halt",
            BudgetChangeKind::Resume => "resume",
        }
    }
}

/// A day's change as the budget page lists it.
#[derive(Clone, Debug)]
pub struct BudgetChangeListed {
    pub day: chrono::NaiveDate,
    pub change: BudgetChange,
    pub by_email: Option<Email>,
}

/// Counts for /metrics, read at scrape time. Sums are exact; only the
/// Prometheus encoder turns them into floats.
#[derive(Clone, Debug, Default)]
pub struct MetricsSnapshot {
    pub jobs_by_status: Vec<(String, i64)>,
    /// (model, state, attempts, priced spend, unpriced finished attempts)
    pub attempts_by_model: Vec<(String, String, i64, Usd, i64)>,
    pub reservations_held: i64,
    pub reserved_usd: Usd,
    /// Open parked records: (stage, how many, the oldest one's time).
    pub parked: Vec<(String, i64, Option<DateTime<Utc>>)>,
}

/// Where parked work stands (rule 12's stages).
/// What a run records when it parks a job.
#[derive(Clone, Debug)]
pub struct NewParked {
    pub stage: ParkedStage,
    pub evidence: crate::model::ParkedEvidence,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub provider_job_id: Option<String>,
    pub attempt_id: Option<AttemptId>,
    /// Status checks and output downloads tried before it parked.
    pub polls: i32,
    pub deliveries: i32,
}

/// A parked record, with what its job may have spent and still holds.
#[derive(Clone, Debug, Serialize)]
pub struct Parked {
    pub id: ParkedId,
    pub job_id: JobId,
    pub stage: ParkedStage,
    pub state: ParkedState,
    /// Which decision round the record is in: each round has at most one
    /// decision; a failed recovery or a reconcile starts the next.
    pub round: i32,
    pub evidence: crate::model::ParkedEvidence,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub provider_job_id: Option<String>,
    pub attempt_id: Option<AttemptId>,
    pub polls: i32,
    pub deliveries: i32,
    /// Budget its attempts still hold (None when they hold nothing).
    pub hold_usd: Option<Usd>,
    /// What may already have been spent: every known cost of the job's
    /// attempts plus the estimate held for each whose cost is unknown.
    pub exposure_usd: Usd,
    /// The job's owner and state, for the queue.
    pub user_email: Email,
    pub job_status: JobStatus,
    /// What one more attempt of the job is estimated to cost (a
    /// `new_attempt` reserves this).
    pub job_estimated_usd: Usd,
    /// The request's fingerprint: the SHA-256 of its canonical body, as
    /// stored with the job.
    pub request_sha256: String,
    pub created_at: DateTime<Utc>,
    /// When the record last changed: parked, reconciled, or observed again.
    pub updated_at: DateTime<Utc>,
}

/// Which parked records a list shows.
#[derive(Clone, Debug, Default)]
pub struct ParkedFilter {
    pub stage: Option<ParkedStage>,
    /// `None`: every record that is not closed.
    pub state: Option<ParkedState>,
    pub model: Option<String>,
    /// Only records parked before this time.
    pub parked_before: Option<DateTime<Utc>>,
    /// Oldest first (the default), or most exposed first.
    pub sort: ParkedSort,
    /// Where a page starts, in the sort's order.
    pub seek: Option<Seek<ParkedCursor>>,
    pub limit: i64,
}

/// How the queue is ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ParkedSort {
    /// Oldest first: who has waited longest.
    #[default]
    Age,
    /// What may already have been spent, most first (ties oldest first).
    Exposure,
}

/// The last record of a page, in the sort's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParkedCursor {
    /// Only for `ParkedSort::Exposure`.
    pub exposure_usd: Option<Usd>,
    pub created_at: DateTime<Utc>,
    pub id: ParkedId,
}

/// A reviewer's decision on a parked record (rule 12).
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    pub id: DecisionId,
    pub parked_id: ParkedId,
    pub round: i32,
    pub action: ReviewAction,
    pub evidence: String,
    pub reviewer: UserId,
    pub reviewer_email: Email,
    pub decided_at: DateTime<Utc>,
    pub refund: Option<bool>,
    pub release_hold: Option<bool>,
    pub provider_job_id: Option<String>,
    pub new_job_id: Option<JobId>,
    pub duplicate_cost_usd: Option<Usd>,
    /// For `resume_poll` and `retry_delivery`: the recovery a worker claims.
    pub recovery: Option<Recovery>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Recovery {
    pub state: RecoveryState,
    /// Claims made of it so far (a run that dies and is reclaimed counts again).
    pub attempts: i32,
    /// The fencing token of the run that holds it.
    pub token: Option<i64>,
    /// Status checks resumed by it run until then.
    pub deadline: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// What a reviewer decides, as the engine checked it.
#[derive(Clone, Debug)]
pub struct NewDecision {
    pub id: DecisionId,
    pub parked_id: ParkedId,
    pub evidence: String,
    pub reviewer: UserId,
    pub decided_at: DateTime<Utc>,
    pub remedy: Remedy,
}

/// What a reviewer decided to do about parked work: the action with
/// exactly the parameters that action takes, so that a decision cannot
/// carry a refund it does not apply or lack the new job it names.
#[derive(Clone, Debug, PartialEq)]
pub enum Remedy {
    /// The attempt gets the provider job id an investigation found; the
    /// record's evidence in its next stage says what the provider told.
    Reconcile {
        provider_job_id: String,
        evidence: crate::model::ParkedEvidence,
    },
    /// Status checks resume until `deadline`.
    ResumePoll { deadline: DateTime<Utc> },
    /// The stored prediction's output is fetched again.
    RetryDelivery,
    /// The job ends failed with `failure`; the reviewer said whether the
    /// credits go back and whether the budget hold is released.
    AcceptFailure {
        refund: bool,
        release_hold: bool,
        failure: crate::model::JobFailure,
    },
    /// The job ends with `failure` and `new_job` (a copy of its request and
    /// price, charged as the original is refunded) takes its place.
    NewAttempt {
        new_job: JobId,
        failure: crate::model::JobFailure,
    },
}

impl Remedy {
    pub fn action(&self) -> ReviewAction {
        match self {
            Remedy::Reconcile { .. } => ReviewAction::Reconcile,
            Remedy::ResumePoll { .. } => ReviewAction::ResumePoll,
            Remedy::RetryDelivery => ReviewAction::RetryDelivery,
            Remedy::AcceptFailure { .. } => ReviewAction::AcceptFailure,
            Remedy::NewAttempt { .. } => ReviewAction::NewAttempt,
        }
    }

    pub fn refund(&self) -> Option<bool> {
        match self {
            Remedy::AcceptFailure { refund, .. } => Some(*refund),
            _ => None,
        }
    }

    pub fn release_hold(&self) -> Option<bool> {
        match self {
            Remedy::AcceptFailure { release_hold, .. } => Some(*release_hold),
            _ => None,
        }
    }

    pub fn provider_job_id(&self) -> Option<&str> {
        match self {
            Remedy::Reconcile {
                provider_job_id, ..
            } => Some(provider_job_id),
            _ => None,
        }
    }

    pub fn new_job(&self) -> Option<JobId> {
        match self {
            Remedy::NewAttempt { new_job, .. } => Some(*new_job),
            _ => None,
        }
    }

    pub fn recovery_deadline(&self) -> Option<DateTime<Utc>> {
        match self {
            Remedy::ResumePoll { deadline } => Some(*deadline),
            _ => None,
        }
    }

    /// The error the job ends with, for the two actions that end it.
    pub fn failure(&self) -> Option<&crate::model::JobFailure> {
        match self {
            Remedy::AcceptFailure { failure, .. } | Remedy::NewAttempt { failure, .. } => {
                Some(failure)
            }
            _ => None,
        }
    }

    /// Whether `recorded` is this same decision: the same action with the
    /// same parameters (evidence text is commentary, and may differ).
    pub fn is_recorded_as(&self, recorded: &Decision) -> bool {
        recorded.action == self.action()
            && recorded.refund == self.refund()
            && recorded.release_hold == self.release_hold()
            && recorded.provider_job_id.as_deref() == self.provider_job_id()
    }
}

/// What a decision came to.
#[derive(Clone, Debug)]
pub enum Decided {
    /// Recorded now, with everything it does, in one transaction.
    Created(Decision),
    /// The same decision was already recorded: the first one.
    Existing(Decision),
    /// Another decision stands for this record.
    Conflict(Decision),
    /// The record's stage does not permit the action (given its job's
    /// status: a cancelled job has nothing left to run).
    NotAllowed(ParkedStage, JobStatus),
    /// The job moved on meanwhile (it is no longer parked, or its attempt
    /// no longer waits for an id): nothing was written.
    Stale(String),
    /// The record closed without a decision (its job was cancelled).
    Closed,
}

/// Records that are not closed, of one stage and state.
#[derive(Clone, Debug)]
pub struct ParkedCount {
    pub stage: ParkedStage,
    pub state: ParkedState,
    pub count: i64,
    pub oldest: DateTime<Utc>,
}

/// One row of the spend rollup: what the attempts of a day, provider, model
/// and error class came to. Unpriced attempts are counted apart, never as 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpendRow {
    pub day: chrono::NaiveDate,
    pub provider: String,
    pub model: String,
    /// `None` for attempts without an error class.
    pub error_class: Option<ErrorClass>,
    pub attempts: i64,
    /// The sum of known costs only.
    pub priced_usd: Usd,
    /// Attempts with a known cost.
    pub priced: i64,
    /// Finished attempts nobody could price.
    pub unpriced: i64,
}

/// Which attempts a spend list shows.
#[derive(Clone, Debug, Default)]
pub struct AttemptFilter {
    pub from: Option<chrono::NaiveDate>,
    pub to: Option<chrono::NaiveDate>,
    /// Only finished attempts nobody could price.
    pub unpriced_only: bool,
    pub model: Option<String>,
    pub error_class: Option<ErrorClass>,
    pub state: Option<AttemptState>,
    /// Only attempts still holding budget.
    pub holding_only: bool,
    /// Where a page starts, in (day, started_at, id) order.
    pub seek: Option<Seek<AttemptCursor>>,
    pub limit: i64,
}

/// An attempt's place in the list of attempts by day, oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptCursor {
    pub day: chrono::NaiveDate,
    pub started_at: DateTime<Utc>,
    pub id: AttemptId,
}

/// An attempt with whose it was and where its job stands.
#[derive(Clone, Debug)]
pub struct AttemptListed {
    pub attempt: Attempt,
    pub user_email: Email,
    pub job_status: JobStatus,
    /// The job is running and its lease has run out: its run died.
    pub lease_expired: bool,
}

/// What may have been spent without a price, right now: holds kept by
/// parked jobs, and attempts still `submitting` (the uncertainty window).
/// One person's spend on a day, for the budget page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spender {
    pub user_id: UserId,
    pub email: crate::model::Email,
    pub spent_usd: Usd,
    pub attempts: i64,
}

/// A day's spend passing a share of its cap, as first seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThresholdCrossed {
    pub day: chrono::NaiveDate,
    pub percent: u32,
    pub crossed_at: DateTime<Utc>,
    /// Used plus held when it was seen, and the cap then.
    pub booked_usd: Usd,
    pub cap_usd: Usd,
}

/// What one source of work cost over a range: a person, and the API token
/// they ordered with (`None`: from the pages, or before tokens were kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceSpend {
    pub user_id: UserId,
    pub email: crate::model::Email,
    pub token: Option<TokenLabel>,
    pub attempts: i64,
    /// The sum of known costs only.
    pub priced_usd: Usd,
    pub priced: i64,
    /// Finished attempts nobody could price.
    pub unpriced: i64,
}

/// An API token as the spend page names it (never its secret).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TokenLabel {
    pub id: ApiTokenId,
    pub name: String,
    pub prefix: String,
    pub revoked: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Exposure {
    pub parked_holds: i64,
    pub parked_hold_usd: Usd,
    pub submitting: i64,
    pub submitting_hold_usd: Usd,
}

/// A person's webhook endpoint.
#[derive(Clone, Debug, Serialize)]
pub struct WebhookEndpoint {
    pub id: WebhookEndpointId,
    pub user_id: UserId,
    pub url: String,
    pub events: Vec<WebhookEvent>,
    #[serde(skip)]
    pub secret: String,
    /// Signs too, until it expires (24 hours after a rotation).
    #[serde(skip)]
    pub previous_secret: Option<String>,
    pub previous_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub failing_since: Option<DateTime<Utc>>,
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
}

#[derive(Clone, Debug)]
pub struct NewWebhookEndpoint {
    pub id: WebhookEndpointId,
    pub user_id: UserId,
    pub url: String,
    pub events: Vec<WebhookEvent>,
    pub secret: String,
    pub created_at: DateTime<Utc>,
}

/// One delivery of one event to one target, with its exact envelope.
#[derive(Clone, Debug, Serialize)]
pub struct Delivery {
    pub id: DeliveryId,
    /// The `webhook-id` header: the same on every try and replay.
    pub webhook_id: String,
    pub endpoint_id: Option<WebhookEndpointId>,
    pub user_id: UserId,
    pub user_email: Email,
    pub job_id: Option<JobId>,
    pub event: WebhookEvent,
    pub url: String,
    pub body: String,
    pub state: DeliveryState,
    pub attempts: i32,
    pub next_at: DateTime<Utc>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub replays: i32,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// A delivery a dispatcher claimed, with the secrets that sign it.
#[derive(Clone, Debug)]
pub struct ClaimedDelivery {
    pub delivery: Delivery,
    /// The claim's fencing token: the dispatcher's writes name it.
    pub claim_token: i64,
    /// The endpoint's secret and, within a rotation's 24 hours, the
    /// previous one; or the owner's account secret for a job's own URL
    /// (`None` until it is made on first use).
    pub secrets: Vec<String>,
}

/// What one try of a delivery came to.
#[derive(Clone, Debug)]
pub enum DeliveryOutcome {
    Delivered {
        status: i32,
    },
    /// Tried again at `next_at`.
    Retry {
        status: Option<i32>,
        error: String,
        next_at: DateTime<Utc>,
    },
    /// That was the last try.
    Dead {
        status: Option<i32>,
        error: String,
    },
}

/// Which deliveries a list shows.
#[derive(Clone, Debug, Default)]
pub struct DeliveryFilter {
    /// `None`: every user's (admins).
    pub user: Option<UserId>,
    pub state: Option<DeliveryState>,
    pub endpoint: Option<WebhookEndpointId>,
    pub since: Option<DateTime<Utc>>,
    /// Where a page starts, newest first.
    pub seek: Option<Seek<DeliveryCursor>>,
    pub limit: i64,
}

/// A delivery's place in the newest-first list of deliveries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliveryCursor {
    pub created_at: DateTime<Utc>,
    pub id: DeliveryId,
}

/// The backlog, for `/metrics` and the admin page.
#[derive(Clone, Debug, Default)]
pub struct WebhookStats {
    pub by_state: Vec<(DeliveryState, i64)>,
    pub oldest_pending: Option<DateTime<Utc>>,
    /// Failed tries' last statuses by class: "4xx", "5xx", "3xx", "none".
    pub failing_by_class: Vec<(String, i64)>,
}
