//! The wire: the JSON objects Tollgate sends, to `/v1` clients and in
//! webhook envelopes, as typed Rust. Each is both what is serialised and
//! (through `ToSchema`) what the OpenAPI document says, so the two cannot
//! disagree. Built from the store's rows here, once; the API answers with
//! them and the outbox keeps them (the store is handed `envelope`, it never
//! builds an API object itself).

use crate::model::{
    AssetId, AttemptState, CompareOutcome, CostSource, Credits, Email, ErrorClass, JobFailure,
    JobId, JobKind, JobRequest, JobStatus, LedgerEntryId, LedgerKind, LineageState, Purpose,
    Review, Role, Usd, UserId, WebhookEvent,
};
use crate::store::{Asset, Attempt, BudgetDay, Job, JobEvent, LedgerEntry, User};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use utoipa::ToSchema;

/// Times are RFC 3339 in UTC, to the millisecond.
pub fn millis<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

pub fn millis_opt<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => millis(t, s),
        None => s.serialize_none(),
    }
}

/// The envelope a delivery sends, fixed when the state change is stored:
/// `{"type", "timestamp", "data": <job object>}`. The store calls it in the
/// transaction that writes the outbox row (see `store::EnvelopeWriter`).
pub fn envelope(
    event: WebhookEvent,
    job: &Job,
    attempts: &[Attempt],
    lineage: Option<&LineageState>,
    at: DateTime<Utc>,
) -> String {
    serde_json::json!({
        "type": event.as_str(),
        "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": JobObject::new(job, attempts, lineage),
    })
    .to_string()
}

/// Every error: `{"error": {"code", "message", "details"}}`.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, UPPER_SNAKE_CASE: what a client switches on.
    #[schema(example = "INVALID_REQUEST", pattern = "^[A-Z][A-Z0-9_]*$")]
    pub code: String,
    /// What happened and what to do, for a person.
    pub message: String,
    /// `fields` for invalid requests (field name to message), `retry_after_s`
    /// when rate limited; empty otherwise.
    pub details: Value,
}

/// `GET /v1/me`.
#[derive(Serialize, ToSchema)]
pub struct MeObject {
    pub id: UserId,
    pub email: Email,
    pub role: Role,
}

impl From<&User> for MeObject {
    fn from(u: &User) -> Self {
        MeObject {
            id: u.id,
            email: u.email.clone(),
            role: u.role,
        }
    }
}

/// A person or program, as admins see them.
#[derive(Serialize, ToSchema)]
pub struct UserObject {
    pub id: UserId,
    pub email: Email,
    pub role: Role,
    pub disabled: bool,
    pub balance: Credits,
    #[serde(serialize_with = "millis")]
    pub created_at: DateTime<Utc>,
}

impl From<&User> for UserObject {
    fn from(u: &User) -> Self {
        UserObject {
            id: u.id,
            email: u.email.clone(),
            role: u.role,
            disabled: u.disabled,
            balance: u.balance,
            created_at: u.created_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct UserList {
    pub data: Vec<UserObject>,
}

/// One row of the append-only credit ledger.
#[derive(Serialize, ToSchema)]
pub struct LedgerEntryObject {
    pub id: LedgerEntryId,
    /// Positive for grants and refunds, negative for debits.
    pub amount: Credits,
    pub kind: LedgerKind,
    /// What the entry is for, e.g. `debit:job:<id>`, `refund:job:<id>`.
    pub reference: String,
    pub reason: Option<String>,
    #[serde(serialize_with = "millis")]
    pub created_at: DateTime<Utc>,
}

impl From<&LedgerEntry> for LedgerEntryObject {
    fn from(e: &LedgerEntry) -> Self {
        LedgerEntryObject {
            id: e.id,
            amount: e.amount,
            kind: e.kind,
            reference: e.reference.clone(),
            reason: e.reason.clone(),
            created_at: e.created_at,
        }
    }
}

/// `GET /v1/credits`: the balance and the entries behind it, newest first.
#[derive(Serialize, ToSchema)]
pub struct CreditsObject {
    pub balance: Credits,
    pub entries: Vec<LedgerEntryObject>,
}

/// An upload.
#[derive(Serialize, ToSchema)]
pub struct AssetObject {
    pub id: AssetId,
    #[schema(example = "image/png")]
    pub content_type: String,
    pub width: u32,
    pub height: u32,
    pub bytes: u64,
    /// SHA-256 of the bytes, hex.
    pub sha256: String,
    #[serde(serialize_with = "millis")]
    pub created_at: DateTime<Utc>,
}

impl From<&Asset> for AssetObject {
    fn from(a: &Asset) -> Self {
        AssetObject {
            id: a.id,
            content_type: a.content_type.clone(),
            width: a.width,
            height: a.height,
            bytes: a.bytes,
            sha256: a.sha256.clone(),
            created_at: a.created_at,
        }
    }
}

/// Where a succeeded job's output is read.
#[derive(Serialize, ToSchema)]
pub struct OutputRef {
    #[schema(example = "/v1/jobs/4c5e6f7a-0000-4000-8000-000000000000/output")]
    pub url: String,
    pub content_type: String,
}

/// An edit's place among its versions (rule 14).
#[derive(Serialize, ToSchema)]
pub struct Lineage {
    /// The original edit of this lineage.
    pub root: JobId,
    /// The version this repair was made on; null for the original.
    pub parent: Option<JobId>,
    /// Repairs the lineage still takes (0 once a repair kept the previous version).
    pub repairs_left: u32,
    /// A repair's comparison with the version the person had; null for the
    /// original, before the comparison, or when the checker could not run.
    pub outcome: Option<CompareOutcome>,
    /// A finished repair that did not improve on the previous version: the
    /// output is the previous version's, and the candidate is at `candidate_url`.
    pub retained_previous: bool,
    pub candidate_url: Option<String>,
}

impl Lineage {
    fn of(job: &Job, state: &LineageState) -> Lineage {
        let compare = job.progress.compare.as_ref();
        let retained = job.retained_previous();
        Lineage {
            root: job.root(),
            parent: job.repair_of,
            repairs_left: state.repairs_left(),
            outcome: compare.and_then(|c| c.outcome),
            retained_previous: retained,
            candidate_url: retained.then(|| format!("/v1/jobs/{}/output", job.id)),
        }
    }
}

/// What a job's provider calls cost: `usd` sums only the priced ones;
/// calls nobody could price are counted apart, never as zero.
#[derive(Serialize, ToSchema)]
pub struct CostSummary {
    pub usd: Usd,
    pub unpriced_attempts: u64,
    pub attempts: u64,
}

impl From<&[Attempt]> for CostSummary {
    fn from(attempts: &[Attempt]) -> Self {
        CostSummary {
            usd: attempts
                .iter()
                .filter_map(|a| a.cost_usd)
                .fold(Usd::ZERO, Usd::plus),
            unpriced_attempts: attempts
                .iter()
                .filter(|a| a.cost_usd.is_none() && a.state != AttemptState::Submitting)
                .count() as u64,
            attempts: attempts.len() as u64,
        }
    }
}

/// A paid generation job.
#[derive(Serialize, ToSchema)]
pub struct JobObject {
    pub id: JobId,
    pub kind: JobKind,
    pub status: JobStatus,
    /// What it was charged.
    pub credits: Credits,
    /// What the rate card says the provider will charge.
    pub estimated_usd: Usd,
    #[serde(serialize_with = "millis")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "millis_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub completed_at: Option<DateTime<Utc>>,
    /// The request in its canonical form (what the idempotency key is bound to).
    pub request: JobRequest,
    pub output: Option<OutputRef>,
    pub error: Option<JobFailure>,
    pub review: Option<Review>,
    /// Image edits only.
    pub lineage: Option<Lineage>,
    pub cost: CostSummary,
    /// The job this one was ordered in place of, by a reviewer's `new_attempt`.
    pub replaces: Option<JobId>,
    /// The job a reviewer's `new_attempt` ordered in this one's place: a
    /// client holding this id follows it there.
    pub replaced_by: Option<JobId>,
}

impl JobObject {
    /// `lineage` is the shared state of an image edit's lineage (see
    /// `Tollgate::lineage_state`); `None` for a video.
    pub fn new(job: &Job, attempts: &[Attempt], lineage: Option<&LineageState>) -> JobObject {
        let lineage = lineage.map(|state| Lineage::of(job, state));
        // A repair that kept the previous version delivers that version.
        let delivered = job.delivers();
        JobObject {
            id: job.id,
            kind: job.kind,
            status: job.status,
            credits: job.credits,
            estimated_usd: job.estimated_usd,
            created_at: job.created_at,
            completed_at: job.completed_at,
            request: job.request.clone(),
            output: match (&job.status, &job.output_content_type) {
                (JobStatus::Succeeded, Some(ct)) => Some(OutputRef {
                    url: format!("/v1/jobs/{delivered}/output"),
                    content_type: ct.clone(),
                }),
                _ => None,
            },
            error: job.error.clone(),
            review: job.review.clone(),
            lineage,
            cost: CostSummary::from(attempts),
            replaces: job.replaces,
            replaced_by: job.replaced_by,
        }
    }
}

/// A page of jobs, newest first.
#[derive(Serialize, ToSchema)]
pub struct JobPage {
    pub data: Vec<JobObject>,
    pub has_more: bool,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// One provider call of a job (failed ones included).
#[derive(Serialize, ToSchema)]
pub struct AttemptObject {
    pub purpose: Purpose,
    pub provider: String,
    pub model: String,
    pub attempt_no: i32,
    pub state: AttemptState,
    pub provider_job_id: Option<String>,
    pub error_class: Option<ErrorClass>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
    pub usage: Option<Value>,
    /// Null when nobody could price it: unpriced, never zero.
    pub cost_usd: Option<Usd>,
    pub cost_source: Option<CostSource>,
    /// The estimate held against the day's budget before the call.
    pub hold_usd: Option<Usd>,
    #[serde(serialize_with = "millis")]
    #[schema(value_type = String, format = DateTime)]
    pub started_at: DateTime<Utc>,
}

impl From<&Attempt> for AttemptObject {
    fn from(a: &Attempt) -> Self {
        AttemptObject {
            purpose: a.purpose,
            provider: a.provider.clone(),
            model: a.model.clone(),
            attempt_no: a.attempt_no,
            state: a.state,
            provider_job_id: a.provider_job_id.clone(),
            error_class: a.error_class,
            error: a.error.clone(),
            duration_ms: a.duration_ms,
            usage: a.usage.clone(),
            cost_usd: a.cost_usd,
            cost_source: a.cost_source,
            hold_usd: a.hold_usd,
            started_at: a.started_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct AttemptList {
    pub data: Vec<AttemptObject>,
}

/// One entry of a job's timeline.
#[derive(Serialize, ToSchema)]
pub struct EventObject {
    pub id: i64,
    #[schema(example = "claimed")]
    pub kind: String,
    pub detail: Value,
    #[serde(serialize_with = "millis")]
    #[schema(value_type = String, format = DateTime)]
    pub at: DateTime<Utc>,
}

impl From<&JobEvent> for EventObject {
    fn from(e: &JobEvent) -> Self {
        let (kind, detail) = e.happening.to_stored();
        EventObject {
            id: e.id,
            kind,
            detail,
            at: e.created_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct EventList {
    pub data: Vec<EventObject>,
}

/// What a request costs, charging nothing.
#[derive(Serialize, ToSchema)]
pub struct QuoteObject {
    pub credits: Credits,
    pub estimated_usd: Usd,
}

/// One UTC day of the spending breaker.
#[derive(Serialize, ToSchema)]
pub struct BudgetDayObject {
    #[schema(value_type = String, format = Date)]
    pub day: chrono::NaiveDate,
    pub cap_usd: Usd,
    /// What the breaker booked: priced costs plus the estimate kept for each
    /// unpriced paid call.
    pub used_usd: Usd,
    /// Holds of paid calls not yet settled.
    pub reserved_usd: Usd,
    pub halted: bool,
    pub halted_reason: Option<String>,
    /// The admin who last halted or resumed the day.
    #[schema(value_type = Option<String>, format = Uuid)]
    pub halted_by: Option<UserId>,
    #[serde(serialize_with = "millis_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub halted_at: Option<DateTime<Utc>>,
}

impl From<&BudgetDay> for BudgetDayObject {
    fn from(d: &BudgetDay) -> Self {
        BudgetDayObject {
            day: d.day,
            cap_usd: d.cap_usd,
            used_usd: d.used_usd,
            reserved_usd: d.reserved_usd,
            halted: d.halted,
            halted_reason: d.halted_reason.clone(),
            halted_by: d.halted_by,
            halted_at: d.halted_at,
        }
    }
}

/// `/healthz` and `/readyz`.
#[derive(Serialize, ToSchema)]
pub struct HealthObject {
    #[schema(example = "ok")]
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
}
