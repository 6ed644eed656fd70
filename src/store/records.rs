//! The rows the store reads and writes, in domain types.

use crate::model::{
    ApiTokenId, AssetId, Credits, Email, JobId, JobKind, JobRequest, JobStatus, LedgerEntryId,
    LedgerKind, Role, Usd, UserId,
};
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
    pub error: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    /// Set when the output is stored.
    pub output_content_type: Option<String>,
    /// What the review found, when one ran.
    pub review: Option<serde_json::Value>,
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
}

/// What a submission found: a new job (charged), or the one already made
/// under this key.
#[derive(Clone, Debug)]
pub enum Submitted {
    Created(Job),
    Existing(Job),
}

/// A terminal outcome a worker (or a test) writes; the first one wins.
#[derive(Clone, Debug)]
pub enum Outcome {
    Succeeded,
    Failed(serde_json::Value),
}

#[derive(Clone, Debug, Serialize)]
pub struct JobEvent {
    pub id: i64,
    pub job_id: JobId,
    pub kind: String,
    pub detail: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

/// Where a page of jobs starts: after this (created_at, id), newest first.
#[derive(Clone, Copy, Debug)]
pub struct JobCursor {
    pub created_at: DateTime<Utc>,
    pub id: JobId,
}

#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    pub user_id: Option<UserId>,
    pub status: Option<JobStatus>,
    pub after: Option<JobCursor>,
    pub limit: i64,
}

/// A job a worker holds: the job and the fencing token its writes must name.
#[derive(Clone, Debug)]
pub struct Claim {
    pub job: Job,
    pub token: i64,
}

/// A completed step's recorded output.
#[derive(Clone, Debug)]
pub struct StepRecord {
    pub step: String,
    pub output: serde_json::Value,
}

/// A provider attempt as it is written before the call (rule 7).
#[derive(Clone, Debug)]
pub struct NewAttempt {
    pub id: uuid::Uuid,
    pub job_id: JobId,
    pub provider: String,
    pub model: String,
    pub attempt_no: i32,
    pub idempotency_key: String,
    pub started_at: DateTime<Utc>,
}

/// What an attempt ended as. `cost_usd: None` is unpriced, never zero.
#[derive(Clone, Debug)]
pub struct AttemptOutcome {
    pub state: &'static str,
    pub provider_job_id: Option<String>,
    pub error_class: Option<String>,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub usage: Option<serde_json::Value>,
    pub cost_usd: Option<Usd>,
    pub cost_source: Option<&'static str>,
    pub finished_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Attempt {
    pub id: uuid::Uuid,
    pub job_id: JobId,
    pub provider: String,
    pub model: String,
    pub attempt_no: i32,
    pub state: String,
    pub idempotency_key: String,
    pub provider_job_id: Option<String>,
    pub error_class: Option<String>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
    pub usage: Option<serde_json::Value>,
    pub cost_usd: Option<Usd>,
    pub cost_source: Option<String>,
    pub started_at: DateTime<Utc>,
}

/// One UTC day of the spending breaker.
#[derive(Clone, Debug, Serialize)]
pub struct BudgetDay {
    pub day: chrono::NaiveDate,
    pub cap_usd: Usd,
    pub used_usd: Usd,
    pub reserved_usd: Usd,
    pub halted: bool,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkedStage {
    /// A request may have been accepted; no answer.
    SubmissionUncertain,
    /// A provider job id exists; status checks ran out.
    PollingExhausted,
    /// The output exists at the provider; storing it failed.
    DeliveryExhausted,
    /// The provider said it failed.
    GenerationFailed,
}

impl ParkedStage {
    pub fn as_str(self) -> &'static str {
        match self {
            ParkedStage::SubmissionUncertain => "submission_uncertain",
            ParkedStage::PollingExhausted => "polling_exhausted",
            ParkedStage::DeliveryExhausted => "delivery_exhausted",
            ParkedStage::GenerationFailed => "generation_failed",
        }
    }

    pub fn parse(s: &str) -> Option<ParkedStage> {
        [
            ParkedStage::SubmissionUncertain,
            ParkedStage::PollingExhausted,
            ParkedStage::DeliveryExhausted,
            ParkedStage::GenerationFailed,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }
}

/// What a run records when it parks a job.
#[derive(Clone, Debug)]
pub struct NewParked {
    pub stage: ParkedStage,
    pub evidence: serde_json::Value,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub provider_job_id: Option<String>,
    pub attempt_id: Option<uuid::Uuid>,
}

/// A parked record, with the hold it keeps.
#[derive(Clone, Debug, Serialize)]
pub struct Parked {
    pub id: uuid::Uuid,
    pub job_id: JobId,
    pub stage: ParkedStage,
    pub open: bool,
    pub evidence: serde_json::Value,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub provider_job_id: Option<String>,
    pub attempt_id: Option<uuid::Uuid>,
    pub hold_usd: Option<Usd>,
    pub created_at: DateTime<Utc>,
}
