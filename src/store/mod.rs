//! Every SQL statement Tollgate runs lives under this module.
//!
//! `Store` is the one interface; `sqlite` and `postgres` implement it with the
//! same method names, and the backend is chosen once, from the database URL,
//! at start. The conformance suite in `tests/` runs every method on both.

mod postgres;
mod postgres_exec;
mod postgres_jobs;
mod records;
mod sessions;
mod sqlite;
mod sqlite_exec;
mod sqlite_jobs;

pub use postgres_exec::PgDoorbell;
pub use records::{
    ApiToken, Asset, Attempt, AttemptOutcome, BudgetDay, Claim, Job, JobCursor, JobEvent,
    JobFilter, LedgerEntry, MetricsSnapshot, NewApiToken, NewAsset, NewAttempt, NewJob,
    NewLedgerEntry, NewParked, NewUser, Outcome, Parked, ParkedStage, StepRecord, Submitted, User,
};
pub use sessions::SessionBackend;

use crate::model::{ApiTokenId, AssetId, Credits, JobId, Role, UserId};
use chrono::{DateTime, Utc};

/// What can go wrong below the engine. Constraint and trigger failures that
/// carry meaning get their own variant; the rest is `Database`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("{0} already exists")]
    Conflict(&'static str),
    #[error("insufficient credits")]
    InsufficientCredits,
    #[error("this run no longer holds the job (its fencing token is stale)")]
    StaleClaim,
    #[error("the ledger is append-only")]
    ImmutableLedger,
    #[error("a stored value is invalid: {0}")]
    Corrupt(String),
    #[error("unsupported database URL {0:?}: expected sqlite://PATH or postgres://...")]
    UnsupportedUrl(String),
    #[error(transparent)]
    Database(sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl From<sqlx::Error> for StoreError {
    /// Gives trigger and constraint failures their meaning, once, for both
    /// backends: the triggers raise the same messages on each.
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            let msg = db.message();
            if msg.contains("insufficient_credits") {
                return StoreError::InsufficientCredits;
            }
            if msg.contains("immutable_ledger") {
                return StoreError::ImmutableLedger;
            }
        }
        if let sqlx::Error::RowNotFound = e {
            return StoreError::NotFound;
        }
        StoreError::Database(e)
    }
}

/// Whether an error is a unique-constraint violation (either backend).
fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// Which database a store talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The one storage interface. Cheap to clone (pools inside).
#[derive(Clone, Debug)]
pub enum Store {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PgStore),
}

/// Calls the backend's method. The call's future is boxed: a caller that
/// waits (a run polling a provider for a minute) then holds a pointer, not
/// the database driver's whole state, so thousands of runs stay small.
macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Store::Sqlite($s) => Box::pin(async { $e }).await,
            Store::Postgres($s) => Box::pin(async { $e }).await,
        }
    };
}

impl Store {
    /// Opens the database a URL names: `sqlite://PATH` (the file and its
    /// folder are created) or `postgres://...`.
    pub async fn connect(url: &str) -> StoreResult<Store> {
        if url.starts_with("sqlite:") {
            Ok(Store::Sqlite(sqlite::SqliteStore::connect(url).await?))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Store::Postgres(postgres::PgStore::connect(url).await?))
        } else {
            Err(StoreError::UnsupportedUrl(url.to_string()))
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Store::Sqlite(_) => Backend::Sqlite,
            Store::Postgres(_) => Backend::Postgres,
        }
    }

    /// Applies the embedded migrations (and the session table).
    pub async fn migrate(&self) -> StoreResult<()> {
        dispatch!(self, s => s.migrate().await)
    }

    pub async fn ping(&self) -> StoreResult<()> {
        dispatch!(self, s => s.ping().await)
    }

    pub fn session_backend(&self) -> SessionBackend {
        match self {
            Store::Sqlite(s) => SessionBackend::sqlite(s.writer()),
            Store::Postgres(s) => SessionBackend::postgres(s.pool()),
        }
    }

    /// Raw pools for tests that must bypass the application.
    pub fn sqlite_pool(&self) -> Option<sqlx::SqlitePool> {
        match self {
            Store::Sqlite(s) => Some(s.writer()),
            Store::Postgres(_) => None,
        }
    }

    pub fn postgres_pool(&self) -> Option<sqlx::PgPool> {
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres(s) => Some(s.pool()),
        }
    }

    pub async fn close(&self) {
        dispatch!(self, s => s.close().await)
    }

    // ---- users ----

    /// Inserts a user; `Conflict("email")` when the address is taken
    /// (case-insensitively).
    pub async fn insert_user(&self, new: &NewUser) -> StoreResult<User> {
        dispatch!(self, s => s.insert_user(new).await)
    }

    /// First-run setup: creates the first admin only while no admin exists
    /// and setup has never completed. Two racing calls make one admin; the
    /// loser gets `None` and leaves nothing behind.
    pub async fn complete_setup(&self, new: &NewUser) -> StoreResult<Option<User>> {
        dispatch!(self, s => s.complete_setup(new).await)
    }

    /// True while no admin exists and setup has not run.
    pub async fn setup_needed(&self) -> StoreResult<bool> {
        dispatch!(self, s => s.setup_needed().await)
    }

    pub async fn user_by_id(&self, id: UserId) -> StoreResult<Option<User>> {
        dispatch!(self, s => s.user_by_id(id).await)
    }

    pub async fn user_by_email(&self, email: &str) -> StoreResult<Option<User>> {
        dispatch!(self, s => s.user_by_email(email).await)
    }

    /// The stored argon2 hash of a user's password.
    pub async fn password_hash(&self, id: UserId) -> StoreResult<Option<String>> {
        dispatch!(self, s => s.password_hash(id).await)
    }

    pub async fn list_users(&self) -> StoreResult<Vec<User>> {
        dispatch!(self, s => s.list_users().await)
    }

    pub async fn set_user_role(&self, id: UserId, role: Role) -> StoreResult<()> {
        dispatch!(self, s => s.set_user_role(id, role).await)
    }

    pub async fn set_user_disabled(&self, id: UserId, disabled: bool) -> StoreResult<()> {
        dispatch!(self, s => s.set_user_disabled(id, disabled).await)
    }

    pub async fn set_password_hash(&self, id: UserId, hash: &str) -> StoreResult<()> {
        dispatch!(self, s => s.set_password_hash(id, hash).await)
    }

    /// Admins who are not disabled: the last one may not be demoted or disabled.
    pub async fn count_active_admins(&self) -> StoreResult<i64> {
        dispatch!(self, s => s.count_active_admins().await)
    }

    // ---- API tokens ----

    pub async fn insert_api_token(&self, new: &NewApiToken) -> StoreResult<ApiToken> {
        dispatch!(self, s => s.insert_api_token(new).await)
    }

    pub async fn list_api_tokens(&self, user: UserId) -> StoreResult<Vec<ApiToken>> {
        dispatch!(self, s => s.list_api_tokens(user).await)
    }

    /// Revokes one of `user`'s tokens; false when there is no such live token.
    pub async fn revoke_api_token(&self, user: UserId, id: ApiTokenId) -> StoreResult<bool> {
        dispatch!(self, s => s.revoke_api_token(user, id).await)
    }

    /// The enabled user owning a live token with this hash, and notes its use
    /// (at most once a minute, to keep reads from becoming writes).
    pub async fn user_by_token_hash(
        &self,
        hash: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<User>> {
        dispatch!(self, s => s.user_by_token_hash(hash, now).await)
    }

    // ---- ledger ----

    /// Appends an entry. `Ok(None)` when an entry with this reference already
    /// exists (the insert does nothing on conflict); `InsufficientCredits`
    /// when it would overdraw (the trigger aborts it).
    pub async fn append_ledger(&self, new: &NewLedgerEntry) -> StoreResult<Option<LedgerEntry>> {
        dispatch!(self, s => s.append_ledger(new).await)
    }

    /// A user's entries, newest first.
    pub async fn ledger_for_user(&self, user: UserId, limit: i64) -> StoreResult<Vec<LedgerEntry>> {
        dispatch!(self, s => s.ledger_for_user(user, limit).await)
    }

    /// The entry with this reference, if any.
    pub async fn ledger_entry(&self, reference: &str) -> StoreResult<Option<LedgerEntry>> {
        dispatch!(self, s => s.ledger_entry(reference).await)
    }

    /// The sum of a user's entries: always equal to the stored balance.
    pub async fn ledger_sum(&self, user: UserId) -> StoreResult<Credits> {
        dispatch!(self, s => s.ledger_sum(user).await)
    }

    // ---- assets and jobs ----

    /// Records an upload; the same person uploading the same bytes gets the
    /// existing asset back.
    pub async fn insert_asset(&self, new: &NewAsset) -> StoreResult<Asset> {
        dispatch!(self, s => s.insert_asset(new).await)
    }

    pub async fn asset(&self, id: AssetId) -> StoreResult<Option<Asset>> {
        dispatch!(self, s => s.asset(id).await)
    }

    /// Rules 1 and 2: inserts the job (do nothing when the user's key exists)
    /// and its debit in one transaction, or reads back the job already made
    /// under the key. `InsufficientCredits` leaves nothing behind.
    pub async fn submit_job(&self, new: &NewJob) -> StoreResult<Submitted> {
        dispatch!(self, s => s.submit_job(new).await)
    }

    pub async fn job(&self, id: JobId) -> StoreResult<Option<Job>> {
        dispatch!(self, s => s.job(id).await)
    }

    /// Jobs newest first, filtered, from a cursor.
    pub async fn list_jobs(&self, filter: &JobFilter) -> StoreResult<Vec<Job>> {
        dispatch!(self, s => s.list_jobs(filter).await)
    }

    /// Rule 9: cancels only a job that is not terminal, and refunds it in the
    /// same transaction. `None` when it was already terminal.
    pub async fn cancel_job(&self, id: JobId, at: DateTime<Utc>) -> StoreResult<Option<Job>> {
        dispatch!(self, s => s.cancel_job(id, at).await)
    }

    /// Rule 9: writes a terminal outcome only over a job that is not
    /// terminal; a failure is refunded in the same transaction. `None` when
    /// another terminal state won.
    pub async fn finish_job(
        &self,
        id: JobId,
        outcome: &Outcome,
        at: DateTime<Utc>,
    ) -> StoreResult<Option<Job>> {
        dispatch!(self, s => s.finish_job(id, outcome, at).await)
    }

    /// Rule 3: refunds a failed or cancelled job, once, however often called.
    pub async fn refund_job(&self, id: JobId, at: DateTime<Utc>) -> StoreResult<bool> {
        dispatch!(self, s => s.refund_job(id, at).await)
    }

    pub async fn job_events(&self, id: JobId) -> StoreResult<Vec<JobEvent>> {
        dispatch!(self, s => s.job_events(id).await)
    }

    /// Frees idempotency keys of jobs created before `created_before`.
    pub async fn expire_idempotency_keys(&self, created_before: DateTime<Utc>) -> StoreResult<u64> {
        dispatch!(self, s => s.expire_idempotency_keys(created_before).await)
    }

    // ---- execution: claims, steps, attempts, the breaker ----

    /// Rule 5: claims up to `n` jobs that are queued or whose lease expired,
    /// in one conditional update that sets the lease and bumps each job's
    /// fencing token (`FOR UPDATE SKIP LOCKED` on PostgreSQL).
    pub async fn claim_jobs(
        &self,
        worker: &str,
        n: i64,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Claim>> {
        dispatch!(self, s => s.claim_jobs(worker, n, lease_until, now).await)
    }

    /// Extends a lease; false when the token is stale.
    pub async fn heartbeat(
        &self,
        job: JobId,
        token: i64,
        lease_until: DateTime<Utc>,
    ) -> StoreResult<bool> {
        dispatch!(self, s => s.heartbeat(job, token, lease_until).await)
    }

    /// Extends the lease of every job this node's runs hold: one write per
    /// beat however many jobs are in flight. Returns how many were extended.
    pub async fn heartbeat_owner(
        &self,
        owner: &str,
        lease_until: DateTime<Utc>,
    ) -> StoreResult<u64> {
        dispatch!(self, s => s.heartbeat_owner(owner, lease_until).await)
    }

    /// Rule 7: the provider accepted the attempt under this id; a resumed
    /// run polls it and never submits it again.
    pub async fn attempt_submitted(
        &self,
        id: uuid::Uuid,
        job: JobId,
        provider_job_id: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        dispatch!(self, s => s.attempt_submitted(id, job, provider_job_id, at).await)
    }

    /// Parks a held job for a person's decision, with its evidence, in one
    /// transaction with the token check; its budget hold stays.
    pub async fn park_claimed(
        &self,
        job: JobId,
        token: i64,
        parked: &NewParked,
        at: DateTime<Utc>,
    ) -> StoreResult<Parked> {
        dispatch!(self, s => s.park_claimed(job, token, parked, at).await)
    }

    /// Parked records, newest first: open ones, optionally of one stage.
    pub async fn list_parked(
        &self,
        stage: Option<ParkedStage>,
        limit: i64,
    ) -> StoreResult<Vec<Parked>> {
        dispatch!(self, s => s.list_parked(stage, limit).await)
    }

    /// The job's open parked record, if it has one.
    pub async fn parked_for_job(&self, job: JobId) -> StoreResult<Option<Parked>> {
        dispatch!(self, s => s.parked_for_job(job).await)
    }

    /// On PostgreSQL, a listener for the doorbells every node rings when a
    /// job is queued (LISTEN/NOTIFY); SQLite is one node and has none.
    pub async fn doorbell(&self) -> StoreResult<Option<PgDoorbell>> {
        match self {
            Store::Sqlite(_) => Ok(None),
            Store::Postgres(p) => Ok(Some(p.doorbell().await?)),
        }
    }

    /// Gives a held job back to the queue (graceful shutdown).
    pub async fn release_claim(
        &self,
        job: JobId,
        token: i64,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        dispatch!(self, s => s.release_claim(job, token, at).await)
    }

    /// Rule 6: the steps a job has completed, with their recorded outputs.
    pub async fn steps(&self, job: JobId) -> StoreResult<Vec<StepRecord>> {
        dispatch!(self, s => s.steps(job).await)
    }

    /// Records a completed step in one transaction with the token check;
    /// `StaleClaim` when the run no longer holds the job.
    pub async fn complete_step(
        &self,
        job: JobId,
        token: i64,
        step: &str,
        output: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        dispatch!(self, s => s.complete_step(job, token, step, output, at).await)
    }

    /// Rule 9 for a held job: the terminal write names the token and matches
    /// only a running job; a failure is refunded in the same transaction.
    pub async fn finish_claimed(
        &self,
        job: JobId,
        token: i64,
        outcome: &Outcome,
        output: Option<(&str, &str)>,
        review: Option<&serde_json::Value>,
        at: DateTime<Utc>,
    ) -> StoreResult<Job> {
        dispatch!(self, s => s.finish_claimed(job, token, outcome, output, review, at).await)
    }

    /// The stored output's key and content type, once the job succeeded.
    pub async fn job_output(&self, job: JobId) -> StoreResult<Option<(String, String)>> {
        dispatch!(self, s => s.job_output(job).await)
    }

    /// Puts an observation on a job's timeline (a run that found its claim
    /// gone says so; it changes nothing else).
    pub async fn note_event(
        &self,
        job: JobId,
        kind: &str,
        detail: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        dispatch!(self, s => s.note_event(job, kind, detail, at).await)
    }

    /// Whether a run still holds its claim (the job is running under this
    /// token): a long poll asks now and then, and stops when it does not.
    pub async fn claim_held(&self, job: JobId, token: i64) -> StoreResult<bool> {
        dispatch!(self, s => s.claim_held(job, token).await)
    }

    /// Who holds a job and its current fencing token.
    pub async fn job_lease(&self, job: JobId) -> StoreResult<Option<(Option<String>, i64)>> {
        dispatch!(self, s => s.job_lease(job).await)
    }

    /// Rule 7: writes the attempt (`submitting`) before the request leaves.
    pub async fn begin_attempt(&self, new: &NewAttempt, token: i64) -> StoreResult<()> {
        dispatch!(self, s => s.begin_attempt(new, token).await)
    }

    /// Rule 10: records an attempt's outcome once; telemetry may be refreshed.
    pub async fn end_attempt(&self, id: uuid::Uuid, outcome: &AttemptOutcome) -> StoreResult<()> {
        dispatch!(self, s => s.end_attempt(id, outcome).await)
    }

    pub async fn attempts(&self, job: JobId) -> StoreResult<Vec<Attempt>> {
        dispatch!(self, s => s.attempts(job).await)
    }

    /// The attempts of many jobs in one query (a page of the job list).
    pub async fn attempts_of(&self, jobs: &[JobId]) -> StoreResult<Vec<Attempt>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        dispatch!(self, s => s.attempts_of(jobs).await)
    }

    pub async fn budget_day(
        &self,
        day: chrono::NaiveDate,
        default_cap: crate::model::Usd,
    ) -> StoreResult<BudgetDay> {
        dispatch!(self, s => s.budget_day(day, default_cap).await)
    }

    pub async fn set_budget(
        &self,
        day: chrono::NaiveDate,
        default_cap: crate::model::Usd,
        cap: Option<crate::model::Usd>,
        halted: Option<bool>,
    ) -> StoreResult<BudgetDay> {
        dispatch!(self, s => s.set_budget(day, default_cap, cap, halted).await)
    }

    /// Rule 11: a reservation against the day's cap, refused when halted or
    /// when it would go over.
    pub async fn reserve(
        &self,
        job: JobId,
        token: i64,
        day: chrono::NaiveDate,
        default_cap: crate::model::Usd,
        amount: crate::model::Usd,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        dispatch!(self, s => s.reserve(job, token, day, default_cap, amount, at).await)
    }

    /// Settles a job's held reservation (an unknown cost stays at the estimate).
    pub async fn settle(
        &self,
        job: JobId,
        cost: Option<crate::model::Usd>,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        dispatch!(self, s => s.settle(job, cost, at).await)
    }

    pub async fn metrics_snapshot(&self) -> StoreResult<MetricsSnapshot> {
        dispatch!(self, s => s.metrics_snapshot().await)
    }

    /// Finished jobs whose budget hold was never settled (their run died
    /// between the terminal write and the settlement).
    pub async fn held_on_finished_jobs(&self, limit: i64) -> StoreResult<Vec<JobId>> {
        dispatch!(self, s => s.held_on_finished_jobs(limit).await)
    }
}
