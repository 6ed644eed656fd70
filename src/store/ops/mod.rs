//! Every statement Tollgate runs, written once. This module is compiled
//! twice, once inside `sqlite.rs` and once inside `postgres.rs` (each sets
//! `Db` and the dialect macros `now!`, `now_plus_seconds!`, `for_update!`,
//! `for_update_skip_locked!`, `in_values_of!` and `new_uuid!`), so each
//! rule's statements and logic exist in one place and each backend's driver
//! checks them with its own types. The backends differ only in that SQL text and in how money is
//! stored (`store::codec`).

mod accounts;
mod claims;
mod jobs;
mod lineage;
mod parked;
mod reads;
mod retention;
mod spend;
mod units;
mod webhooks;
mod within;

use super::{Backend, Db};
use crate::model::scrub;
use crate::model::{
    ApiTokenId, AssetId, AttemptId, AttemptState, CostSource, Credits, DecisionId, Email,
    Happening, JobId, JobKind, JobRequest, JobStatus, LedgerEntryId, LedgerKind, ParkedId,
    ParkedState, Progress, Purpose as AttemptPurpose, RecoveryState, Review, ReviewAction, Role,
    UserId,
};
use crate::store::records::*;
use crate::store::{StoreError, StoreResult};
use sqlx::types::Json;
use sqlx::Row as _;

type Row = <Db as sqlx::Database>::Row;
type Conn = <Db as sqlx::Database>::Connection;

/// The run still holds job `$j` under token `$t`: it is running under it.
/// On PostgreSQL the check locks the job's row, so no claim can move the
/// token before the transaction that checked it commits.
macro_rules! fence {
    ($j:literal, $t:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM jobs WHERE id = ",
            $j,
            " AND fencing_token = ",
            $t,
            " AND status = 'running' ",
            for_update!(),
            ")"
        )
    };
}
use fence;

/// Rows past a place in a list ordered by a time and then an id: `op` is
/// `<` or `>` for the way the page reads. Every keyset cursor ends in this.
fn push_past<'a>(
    q: &mut sqlx::QueryBuilder<'a, Db>,
    (at_col, id_col): (&str, &str),
    op: &str,
    at: chrono::DateTime<chrono::Utc>,
    id: uuid::Uuid,
) {
    q.push(format!("({at_col} {op} "))
        .push_bind(at)
        .push(format!(" OR ({at_col} = "))
        .push_bind(at)
        .push(format!(" AND {id_col} {op} "))
        .push_bind(id)
        .push("))");
}

const USER_COLUMNS: &str = "id, email, role, disabled, balance, created_at, sessions_valid_after";
const TOKEN_COLUMNS: &str = "id, user_id, name, prefix, created_at, last_used_at, revoked_at";
const LEDGER_COLUMNS: &str = "id, user_id, amount, kind, reference, actor_id, reason, created_at";
const ASSET_COLUMNS: &str =
    "id, user_id, sha256, content_type, width, height, bytes, object_key, created_at";
const JOB_COLUMNS: &str = "id, user_id, kind, status, request, request_sha256, idempotency_key, \
     credits, estimated_usd, error, created_at, completed_at, output_content_type, review, progress, \
     replaces, replaced_by, lineage_root, repair_of, instruction, media_purged_at";
const ATTEMPT_COLUMNS: &str = "id, job_id, purpose, provider, endpoint, model, attempt_no, state, \
     idempotency_key, provider_job_id, error_class, error, duration_ms, usage, cost_usd, cost_source, \
     hold_usd, budget_day, settled_usd, started_at, finished_at";
const DAY_COLUMNS: &str =
    "day, cap_usd, used_usd, reserved_usd, halted, halted_reason, halted_by, halted_at";
const PARKED_COLUMNS: &str = "p.id, p.job_id, p.stage, p.state, p.round, p.evidence, p.provider, \
     p.model, p.provider_job_id, p.attempt_id, p.polls, p.deliveries, p.created_at, p.updated_at, \
     u.email AS user_email, j.status AS job_status, j.estimated_usd AS job_estimated_usd, \
     j.request_sha256 AS request_sha256, \
     (SELECT sum(a.hold_usd) FROM attempts a WHERE a.job_id = p.job_id AND a.hold_usd IS NOT NULL \
      AND a.settled_usd IS NULL) AS hold_usd, \
     (SELECT COALESCE(sum(COALESCE(a.cost_usd, a.hold_usd)), 0) FROM attempts a \
      WHERE a.job_id = p.job_id) AS exposure_usd";
/// What `PARKED_COLUMNS` reads from.
const PARKED_FROM: &str =
    "parked p JOIN jobs j ON j.id = p.job_id JOIN users u ON u.id = j.user_id";
const DECISION_COLUMNS: &str = "d.id, d.parked_id, d.round, d.action, d.evidence, d.reviewer, \
     d.decided_at, d.refund, d.release_hold, d.provider_job_id, d.new_job_id, d.duplicate_cost_usd, \
     d.recovery_state, d.recovery_attempts, d.recovery_token, d.recovery_deadline, d.recovery_ended_at, \
     r.email AS reviewer_email";
/// What `DECISION_COLUMNS` reads from.
const DECISION_FROM: &str = "parked_decisions d JOIN users r ON r.id = d.reviewer";

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// A stored error class; none when the column is NULL or empty (the spend
/// rollup keeps "no class" as '').
fn error_class_of(stored: Option<String>) -> StoreResult<Option<crate::model::ErrorClass>> {
    match stored.as_deref() {
        None | Some("") => Ok(None),
        Some(c) => crate::model::ErrorClass::parse(c)
            .map(Some)
            .ok_or_else(|| corrupt(c)),
    }
}

fn user_from_row(row: &Row) -> StoreResult<User> {
    let role: String = row.try_get("role")?;
    Ok(User {
        id: UserId(row.try_get("id")?),
        email: Email::from_stored(row.try_get("email")?),
        role: Role::parse(&role).map_err(corrupt)?,
        disabled: row.try_get("disabled")?,
        balance: Credits(row.try_get("balance")?),
        created_at: row.try_get("created_at")?,
        sessions_valid_after: row.try_get("sessions_valid_after")?,
    })
}

fn token_from_row(row: &Row) -> StoreResult<ApiToken> {
    Ok(ApiToken {
        id: ApiTokenId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        name: row.try_get("name")?,
        prefix: row.try_get("prefix")?,
        created_at: row.try_get("created_at")?,
        last_used_at: row.try_get("last_used_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

fn ledger_from_row(row: &Row) -> StoreResult<LedgerEntry> {
    let kind: String = row.try_get("kind")?;
    let actor: Option<uuid::Uuid> = row.try_get("actor_id")?;
    Ok(LedgerEntry {
        id: LedgerEntryId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        amount: Credits(row.try_get("amount")?),
        kind: LedgerKind::parse(&kind).map_err(corrupt)?,
        reference: row.try_get("reference")?,
        actor_id: actor.map(UserId),
        reason: row.try_get("reason")?,
        created_at: row.try_get("created_at")?,
    })
}

fn asset_from_row(row: &Row) -> StoreResult<Asset> {
    Ok(Asset {
        id: AssetId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        sha256: row.try_get("sha256")?,
        content_type: row.try_get("content_type")?,
        width: u32::try_from(row.try_get::<i32, _>("width")?).map_err(corrupt)?,
        height: u32::try_from(row.try_get::<i32, _>("height")?).map_err(corrupt)?,
        bytes: u64::try_from(row.try_get::<i64, _>("bytes")?).map_err(corrupt)?,
        object_key: row.try_get("object_key")?,
        created_at: row.try_get("created_at")?,
    })
}

fn job_from_row(row: &Row) -> StoreResult<Job> {
    let kind: String = row.try_get("kind")?;
    let status: String = row.try_get("status")?;
    let request: Json<JobRequest> = row.try_get("request")?;
    let review: Option<Json<Review>> = row.try_get("review")?;
    let progress: Option<Json<Progress>> = row.try_get("progress")?;
    let error: Option<Json<crate::model::JobFailure>> = row.try_get("error")?;
    Ok(Job {
        id: JobId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        kind: JobKind::parse(&kind).ok_or_else(|| corrupt(&kind))?,
        status: JobStatus::parse(&status).ok_or_else(|| corrupt(&status))?,
        request: request.0,
        request_sha256: row.try_get("request_sha256")?,
        idempotency_key: row.try_get("idempotency_key")?,
        credits: Credits(row.try_get("credits")?),
        estimated_usd: row.try_get("estimated_usd")?,
        error: error.map(|e| e.0),
        created_at: row.try_get("created_at")?,
        completed_at: row.try_get("completed_at")?,
        output_content_type: row.try_get("output_content_type")?,
        review: review.map(|r| r.0),
        progress: progress.map(|p| p.0).unwrap_or_default(),
        replaces: row.try_get::<Option<uuid::Uuid>, _>("replaces")?.map(JobId),
        replaced_by: row
            .try_get::<Option<uuid::Uuid>, _>("replaced_by")?
            .map(JobId),
        lineage_root: row
            .try_get::<Option<uuid::Uuid>, _>("lineage_root")?
            .map(JobId),
        repair_of: row
            .try_get::<Option<uuid::Uuid>, _>("repair_of")?
            .map(JobId),
        instruction: row.try_get("instruction")?,
        media_purged_at: row.try_get("media_purged_at")?,
    })
}

fn attempt_from_row(r: &Row) -> StoreResult<Attempt> {
    let purpose: String = r.try_get("purpose")?;
    let state: String = r.try_get("state")?;
    let source: Option<String> = r.try_get("cost_source")?;
    let usage: Option<Json<serde_json::Value>> = r.try_get("usage")?;
    Ok(Attempt {
        id: AttemptId(r.try_get("id")?),
        job_id: JobId(r.try_get("job_id")?),
        purpose: AttemptPurpose::parse(&purpose).ok_or_else(|| corrupt(&purpose))?,
        provider: r.try_get("provider")?,
        endpoint: r.try_get("endpoint")?,
        model: r.try_get("model")?,
        attempt_no: r.try_get("attempt_no")?,
        state: AttemptState::parse(&state).ok_or_else(|| corrupt(&state))?,
        idempotency_key: r.try_get("idempotency_key")?,
        provider_job_id: r.try_get("provider_job_id")?,
        error_class: error_class_of(r.try_get("error_class")?)?,
        error: r.try_get("error")?,
        duration_ms: r.try_get("duration_ms")?,
        usage: usage.map(|u| u.0),
        cost_usd: r.try_get("cost_usd")?,
        cost_source: source
            .map(|s| CostSource::parse(&s).ok_or_else(|| corrupt(&s)))
            .transpose()?,
        hold_usd: r.try_get("hold_usd")?,
        budget_day: r.try_get("budget_day")?,
        settled_usd: r.try_get("settled_usd")?,
        started_at: r.try_get("started_at")?,
        finished_at: r.try_get("finished_at")?,
    })
}

fn day_from_row(r: &Row) -> StoreResult<BudgetDay> {
    let by: Option<uuid::Uuid> = r.try_get("halted_by")?;
    Ok(BudgetDay {
        day: r.try_get("day")?,
        cap_usd: r.try_get("cap_usd")?,
        used_usd: r.try_get("used_usd")?,
        reserved_usd: r.try_get("reserved_usd")?,
        halted: r.try_get("halted")?,
        halted_reason: r.try_get("halted_reason")?,
        halted_by: by.map(UserId),
        halted_at: r.try_get("halted_at")?,
    })
}

fn parked_from_row(r: &Row) -> StoreResult<Parked> {
    let stage: String = r.try_get("stage")?;
    let state: String = r.try_get("state")?;
    let status: String = r.try_get("job_status")?;
    let evidence: Json<crate::model::ParkedEvidence> = r.try_get("evidence")?;
    let attempt: Option<uuid::Uuid> = r.try_get("attempt_id")?;
    Ok(Parked {
        id: ParkedId(r.try_get("id")?),
        job_id: JobId(r.try_get("job_id")?),
        stage: ParkedStage::parse(&stage).ok_or_else(|| corrupt(&stage))?,
        state: ParkedState::parse(&state).ok_or_else(|| corrupt(&state))?,
        round: r.try_get("round")?,
        evidence: evidence.0,
        provider: r.try_get("provider")?,
        model: r.try_get("model")?,
        provider_job_id: r.try_get("provider_job_id")?,
        attempt_id: attempt.map(AttemptId),
        polls: r.try_get("polls")?,
        deliveries: r.try_get("deliveries")?,
        hold_usd: r.try_get("hold_usd")?,
        exposure_usd: r.try_get("exposure_usd")?,
        user_email: Email::from_stored(r.try_get("user_email")?),
        job_status: JobStatus::parse(&status).ok_or_else(|| corrupt(&status))?,
        job_estimated_usd: r.try_get("job_estimated_usd")?,
        request_sha256: r.try_get("request_sha256")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

fn decision_from_row(r: &Row) -> StoreResult<Decision> {
    let action: String = r.try_get("action")?;
    let recovery: Option<String> = r.try_get("recovery_state")?;
    let recovery = match recovery {
        None => None,
        Some(state) => Some(Recovery {
            state: RecoveryState::parse(&state).ok_or_else(|| corrupt(&state))?,
            attempts: r.try_get("recovery_attempts")?,
            token: r.try_get("recovery_token")?,
            deadline: r.try_get("recovery_deadline")?,
            ended_at: r.try_get("recovery_ended_at")?,
        }),
    };
    Ok(Decision {
        id: DecisionId(r.try_get("id")?),
        parked_id: ParkedId(r.try_get("parked_id")?),
        round: r.try_get("round")?,
        action: ReviewAction::parse(&action).ok_or_else(|| corrupt(&action))?,
        evidence: r.try_get("evidence")?,
        reviewer: UserId(r.try_get("reviewer")?),
        reviewer_email: Email::from_stored(r.try_get("reviewer_email")?),
        decided_at: r.try_get("decided_at")?,
        refund: r.try_get("refund")?,
        release_hold: r.try_get("release_hold")?,
        provider_job_id: r.try_get("provider_job_id")?,
        new_job_id: r.try_get::<Option<uuid::Uuid>, _>("new_job_id")?.map(JobId),
        duplicate_cost_usd: r.try_get("duplicate_cost_usd")?,
        recovery,
    })
}

/// Whether an error is a unique-constraint violation.
fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

impl Backend {
    pub async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }

    pub fn counters(&self) -> Vec<(Purpose, u64, u64)> {
        self.counters.snapshot()
    }

    /// Counts a commit (and the statements it carried) for `/metrics`.
    fn committed(&self, purpose: Purpose, statements: u64) {
        self.counters.add(purpose, statements);
    }
}
