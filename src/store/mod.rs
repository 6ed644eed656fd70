//! Every SQL statement Tollgate runs lives under this module.
//!
//! `Store` is the one interface. Its statements are written once, in
//! `ops/`, and compiled for each backend (`sqlite`, `postgres`), which set
//! only their dialect: the few SQL fragments that must differ and how money
//! is stored (`codec`). The backend is chosen once, from the database URL,
//! at start; the conformance suites in `tests/` run every method on both.

mod codec;
mod postgres;
mod records;
mod sessions;
mod sqlite;

pub use postgres::PgDoorbell;
pub use records::{
    ApiToken, Applied, Asset, Attempt, AttemptCursor, AttemptFilter, AttemptListed, AttemptOutcome,
    BudgetChange, BudgetChangeKind, BudgetChangeListed, BudgetDay, Claim, Decided, Decision,
    Exposure, Finish, Hold, Job, JobCursor, JobEvent, JobFilter, LedgerCursor, LedgerEntry,
    LedgerFilter, MetricsSnapshot, NewApiToken, NewAsset, NewAttempt, NewDecision, NewJob,
    NewLedgerEntry, NewParked, NewRepair, NewUser, Op, Parked, ParkedCount, ParkedCursor,
    ParkedFilter, ParkedSort, ParkedStage, Purpose, Recovery, Remedy, Seek, SourceSpend, SpendRow,
    Spender, Submitted, ThresholdCrossed, TokenLabel, Unit, User,
};
pub use records::{
    ClaimedDelivery, Delivery, DeliveryCursor, DeliveryFilter, DeliveryOutcome, NewWebhookEndpoint,
    WebhookEndpoint, WebhookStats,
};
pub use sessions::SessionBackend;

use crate::model::{ApiTokenId, AssetId, Credits, Happening, JobId, ParkedId, Role, Usd, UserId};
use chrono::{DateTime, NaiveDate, Utc};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    /// The lineage takes no further repair (the conditional update found
    /// it stopped or at its limit); nothing was written.
    #[error("the lineage takes no further repair")]
    RepairRefused(crate::model::RepairRefusal),
    #[error("this run no longer holds the job (its fencing token is stale)")]
    StaleClaim,
    #[error("the ledger is append-only")]
    ImmutableLedger,
    #[error("a stored value is invalid: {0}")]
    Corrupt(String),
    /// Text the database cannot store (a NUL character): the caller's
    /// input, which validation should have caught first.
    #[error("text with a character the database cannot store")]
    UnstorableText,
    #[error("unsupported database URL {0:?}: expected sqlite://PATH or postgres://...")]
    UnsupportedUrl(String),
    #[error(transparent)]
    Database(sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl StoreError {
    /// The database could not be reached at all (no connection in time, or
    /// it broke): nothing about any one statement.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            StoreError::Database(
                sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::Io(_)
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::WorkerCrashed
            )
        )
    }

    /// A failure that says nothing about the statements, only about their
    /// timing (PostgreSQL's deadlock_detected and serialization_failure; a
    /// busy SQLite): the same transaction again may well succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(db)) => matches!(
                db.code().as_deref(),
                Some("40P01") | Some("40001") | Some("5") | Some("517")
            ),
            _ => false,
        }
    }
}

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
            // PostgreSQL: character_not_in_repertoire (a NUL in text).
            if db.code().as_deref() == Some("22021") {
                return StoreError::UnstorableText;
            }
        }
        if let sqlx::Error::RowNotFound = e {
            return StoreError::NotFound;
        }
        StoreError::Database(e)
    }
}

/// Commits (and the statements they carried) by purpose, for `/metrics`
/// and the benchmarks: what a job costs the database.
#[derive(Debug, Default)]
pub struct Counters {
    commits: [AtomicU64; 5],
    statements: [AtomicU64; 5],
}

impl Counters {
    fn index(purpose: Purpose) -> usize {
        Purpose::ALL
            .iter()
            .position(|p| *p == purpose)
            .unwrap_or(Purpose::ALL.len() - 1)
    }

    fn add(&self, purpose: Purpose, statements: u64) {
        let i = Counters::index(purpose);
        self.commits[i].fetch_add(1, Ordering::Relaxed);
        self.statements[i].fetch_add(statements, Ordering::Relaxed);
    }

    /// `(purpose, commits, statements)` so far.
    pub fn snapshot(&self) -> Vec<(Purpose, u64, u64)> {
        Purpose::ALL
            .iter()
            .map(|p| {
                let i = Counters::index(*p);
                (
                    *p,
                    self.commits[i].load(Ordering::Relaxed),
                    self.statements[i].load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

/// How an outbox row's envelope is written (rule 13). The envelope is the
/// job as stored by the change it announces, so the store calls this in
/// that change's transaction; but the wire format belongs to the layer
/// above (`wire::envelope`), which hands it over at `connect`: the store
/// never builds an API object itself.
pub type EnvelopeWriter = fn(
    crate::model::WebhookEvent,
    &Job,
    &[Attempt],
    Option<&crate::model::LineageState>,
    DateTime<Utc>,
) -> String;

/// Which database a store talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The one storage interface. Cheap to clone (pools inside).
#[derive(Clone, Debug)]
pub enum Store {
    Sqlite(sqlite::Backend),
    Postgres(postgres::Backend),
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

/// Jobs one claim statement takes at most (the dispatcher asks for fewer).
pub const CLAIMS_PER_STATEMENT_MAX: i64 = 1000;
/// Units one group commit applies at most (the committer sends fewer).
pub const UNITS_PER_BATCH_MAX: usize = 1024;

impl Store {
    /// Opens the database a URL names: `sqlite://PATH` (the file and its
    /// folder are created) or `postgres://...`.
    pub async fn connect(url: &str, envelope: EnvelopeWriter) -> StoreResult<Store> {
        let counters = Arc::new(Counters::default());
        if url.starts_with("sqlite:") {
            Ok(Store::Sqlite(
                sqlite::Backend::connect(url, counters, envelope).await?,
            ))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Store::Postgres(
                postgres::Backend::connect(url, counters, envelope).await?,
            ))
        } else {
            Err(StoreError::UnsupportedUrl(crate::config::redact_url(url)))
        }
    }

    /// A store for a writer on a runtime of its own (the group committer):
    /// on PostgreSQL the same database and counters over its own connection,
    /// opened on the runtime this is called on. SQLite has one writer
    /// connection, and a second would only wait for it: `None`.
    pub fn dedicated_writer(&self) -> Option<Store> {
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres(s) => Some(Store::Postgres(s.dedicated_writer())),
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

    /// Commits and statements so far, by purpose.
    pub fn counters(&self) -> Vec<(Purpose, u64, u64)> {
        match self {
            Store::Sqlite(s) => s.counters(),
            Store::Postgres(s) => s.counters(),
        }
    }

    /// How many browser sessions are stored (a failed sign-in must add none).
    pub async fn count_sessions(&self) -> StoreResult<i64> {
        // The session store's own tables (tower-sessions-sqlx-store).
        Ok(match self {
            Store::Sqlite(s) => {
                sqlx::query_scalar("SELECT COUNT(*) FROM tower_sessions")
                    .fetch_one(&s.writer())
                    .await?
            }
            Store::Postgres(s) => {
                sqlx::query_scalar("SELECT COUNT(*) FROM tower_sessions.session")
                    .fetch_one(&s.pool())
                    .await?
            }
        })
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

    /// A new password; sessions started before `sessions_from` end.
    pub async fn set_password_hash(
        &self,
        id: UserId,
        hash: &str,
        sessions_from: DateTime<Utc>,
    ) -> StoreResult<()> {
        dispatch!(self, s => s.set_password_hash(id, hash, sessions_from).await)
    }

    /// Revokes every live token of a user; how many.
    pub async fn revoke_all_tokens(&self, user: UserId, at: DateTime<Utc>) -> StoreResult<u64> {
        dispatch!(self, s => s.revoke_all_tokens(user, at).await)
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

    /// The enabled user owning a live token with this hash, with the token's
    /// id, and notes its use (at most once a minute, to keep reads from
    /// becoming writes).
    pub async fn user_by_token_hash(
        &self,
        hash: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(User, ApiTokenId)>> {
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

    /// A page of a user's entries, newest first, from a position either way.
    pub async fn list_ledger(&self, filter: &LedgerFilter) -> StoreResult<Vec<LedgerEntry>> {
        dispatch!(self, s => s.list_ledger(filter).await)
    }

    /// How many entries `filter` matches, ignoring its limit.
    pub async fn count_ledger(&self, filter: &LedgerFilter) -> StoreResult<i64> {
        dispatch!(self, s => s.count_ledger(filter).await)
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

    /// Where each of these assets is stored (unknown ids left out).
    pub async fn asset_object_keys(&self, ids: &[AssetId]) -> StoreResult<Vec<(AssetId, String)>> {
        dispatch!(self, s => s.asset_object_keys(ids).await)
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

    /// Rule 14: a repair and its charge in one transaction, taking one of
    /// its lineage's repairs with a conditional update (racing requests
    /// cannot pass the limit), or the job already made under the key.
    /// `RepairRefused` and `InsufficientCredits` leave nothing behind.
    pub async fn submit_repair(&self, new: &NewRepair) -> StoreResult<Submitted> {
        dispatch!(self, s => s.submit_repair(new).await)
    }

    /// A lineage's shared state; `None` before its first repair.
    pub async fn lineage(&self, root: JobId) -> StoreResult<Option<crate::model::LineageState>> {
        dispatch!(self, s => s.lineage(root).await)
    }

    /// The lineages of many roots in one read; roots without one are left out.
    pub async fn lineages_of(
        &self,
        roots: &[JobId],
    ) -> StoreResult<Vec<crate::model::LineageState>> {
        dispatch!(self, s => s.lineages_of(roots).await)
    }

    /// Makes a finished version of a lineage the person's; false when it
    /// is not one, or a repair is under way.
    pub async fn choose_version(
        &self,
        root: JobId,
        version: JobId,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        dispatch!(self, s => s.choose_version(root, version, at).await)
    }

    /// Every version of a lineage, the original first, then by creation.
    pub async fn lineage_versions(&self, root: JobId) -> StoreResult<Vec<Job>> {
        dispatch!(self, s => s.lineage_versions(root).await)
    }

    /// Jobs newest first, filtered, from a cursor.
    pub async fn list_jobs(&self, filter: &JobFilter) -> StoreResult<Vec<Job>> {
        dispatch!(self, s => s.list_jobs(filter).await)
    }

    /// How many jobs a filter matches; with `Before`, how many come before
    /// that position in the list.
    pub async fn count_jobs(&self, filter: &JobFilter) -> StoreResult<i64> {
        dispatch!(self, s => s.count_jobs(filter).await)
    }

    /// How many jobs are in each status (of one user, or everyone's).
    pub async fn count_jobs_by_status(
        &self,
        user: Option<UserId>,
    ) -> StoreResult<Vec<(crate::model::JobStatus, u64)>> {
        dispatch!(self, s => s.count_jobs_by_status(user).await)
    }

    /// The jobs ordered under an idempotency key, newest first.
    pub async fn jobs_under_key(&self, key: &str) -> StoreResult<Vec<Job>> {
        dispatch!(self, s => s.jobs_under_key(key).await)
    }

    /// Rule 9: cancels only a job that is not terminal, and in the same
    /// transaction refunds it and settles its holds. `None` when it was
    /// already terminal.
    pub async fn cancel_job(&self, id: JobId, at: DateTime<Utc>) -> StoreResult<Option<Job>> {
        dispatch!(self, s => s.cancel_job(id, at).await)
    }

    /// The person's job made under this idempotency key, if any.
    pub async fn job_by_idempotency_key(
        &self,
        user: UserId,
        key: &str,
    ) -> StoreResult<Option<Job>> {
        dispatch!(self, s => s.job_by_idempotency_key(user, key).await)
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

    /// Puts an observation on a job's timeline (a run that found its claim
    /// gone says so; it changes nothing else).
    pub async fn note_event(
        &self,
        job: JobId,
        happening: &Happening,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        dispatch!(self, s => s.note_event(job, happening, at).await)
    }

    /// The stored output's key and content type, once the job succeeded.
    pub async fn job_output(&self, job: JobId) -> StoreResult<Option<(String, String)>> {
        dispatch!(self, s => s.job_output(job).await)
    }

    // ---- execution: claims, units of work, attempts, the breaker ----

    /// Rule 5: claims up to `n` jobs that are queued or whose lease ran out,
    /// in one conditional update that leases each for `lease_s` seconds of
    /// the database's clock and bumps its fencing token (`FOR UPDATE SKIP
    /// LOCKED` on PostgreSQL).
    pub async fn claim_jobs(&self, worker: &str, n: i64, lease_s: f64) -> StoreResult<Vec<Claim>> {
        debug_assert!(
            (1..=CLAIMS_PER_STATEMENT_MAX).contains(&n),
            "claiming {n} jobs in one statement"
        );
        debug_assert!(lease_s > 0.0, "a lease of {lease_s} s");
        let claims = dispatch!(self, s => s.claim_jobs(worker, n, lease_s).await)?;
        // A claim bumps the token from the job's 0: a claim holds 1 or more.
        debug_assert!(
            claims.iter().all(|c| c.token >= 1),
            "a claim without a token"
        );
        debug_assert!(claims.len() as i64 <= n, "more claims than asked for");
        Ok(claims)
    }

    /// Extends this node's lease, and with it the lease of every job its
    /// runs hold: one row per beat however many jobs are in flight.
    pub async fn heartbeat_owner(&self, owner: &str, lease_s: f64) -> StoreResult<()> {
        debug_assert!(lease_s > 0.0, "a lease of {lease_s} s");
        dispatch!(self, s => s.heartbeat_owner(owner, lease_s).await)
    }

    /// Forgets node leases that ran out long ago and hold no running job.
    pub async fn forget_stopped_nodes(&self) -> StoreResult<u64> {
        dispatch!(self, s => s.forget_stopped_nodes().await)
    }

    /// Applies runs' units of work in one transaction (group commit), each
    /// with its own fencing check: a stale unit writes nothing and the rest
    /// commit. The results are in the units' order.
    pub async fn apply(&self, units: &[Unit]) -> Vec<StoreResult<Applied>> {
        debug_assert!(
            units.len() <= UNITS_PER_BATCH_MAX,
            "a group commit of {} units",
            units.len()
        );
        debug_assert!(
            units.iter().all(Unit::is_well_formed),
            "a unit without a claim's token, or with two endings"
        );
        let applied = dispatch!(self, s => s.apply(units).await);
        debug_assert_eq!(applied.len(), units.len(), "one result per unit");
        applied
    }

    /// Applies one unit of work on its own.
    pub async fn apply_one(&self, unit: Unit) -> StoreResult<Applied> {
        let mut out = self.apply(std::slice::from_ref(&unit)).await;
        out.pop().unwrap_or(Err(StoreError::NotFound))
    }

    /// What a person's uploads take in all.
    pub async fn asset_bytes_of(&self, user: UserId) -> StoreResult<u64> {
        dispatch!(self, s => s.asset_bytes_of(user).await)
    }

    /// Parked records, oldest first, filtered, after a cursor.
    pub async fn list_parked(&self, filter: &ParkedFilter) -> StoreResult<Vec<Parked>> {
        dispatch!(self, s => s.list_parked(filter).await)
    }

    /// How many records a filter matches; with `Before`, how many come
    /// before that position in the queue's order.
    pub async fn count_parked(&self, filter: &ParkedFilter) -> StoreResult<i64> {
        dispatch!(self, s => s.count_parked(filter).await)
    }

    pub async fn parked(&self, id: ParkedId) -> StoreResult<Option<Parked>> {
        dispatch!(self, s => s.parked(id).await)
    }

    /// The job's one record that is not closed, if it has one.
    pub async fn parked_for_job(&self, job: JobId) -> StoreResult<Option<Parked>> {
        dispatch!(self, s => s.parked_for_job(job).await)
    }

    /// The job's records, newest first, closed ones included.
    pub async fn parked_of_job(&self, job: JobId) -> StoreResult<Vec<Parked>> {
        dispatch!(self, s => s.parked_of_job(job).await)
    }

    /// Records that are not closed, by stage and state.
    pub async fn parked_counts(&self) -> StoreResult<Vec<ParkedCount>> {
        dispatch!(self, s => s.parked_counts().await)
    }

    /// Seconds from parking to decision, for decisions since `since`.
    pub async fn decision_latencies(&self, since: DateTime<Utc>) -> StoreResult<Vec<f64>> {
        dispatch!(self, s => s.decision_latencies(since).await)
    }

    /// Recoveries claimed more than once, and delivery retries that failed.
    pub async fn recovery_stats(&self) -> StoreResult<(i64, i64)> {
        dispatch!(self, s => s.recovery_stats().await)
    }

    /// A record's decisions, oldest first.
    pub async fn decisions(&self, parked: ParkedId) -> StoreResult<Vec<Decision>> {
        dispatch!(self, s => s.decisions(parked).await)
    }

    /// The decisions of each of `records`, oldest first per record.
    pub async fn decisions_of(&self, records: &[ParkedId]) -> StoreResult<Vec<Decision>> {
        dispatch!(self, s => s.decisions_of(records).await)
    }

    /// Rule 12: records a decision and applies it, in one transaction.
    pub async fn decide(&self, decision: &NewDecision) -> StoreResult<Decided> {
        dispatch!(self, s => s.decide(decision).await)
    }

    /// A note on a parked record's job timeline; the detail written.
    pub async fn note_parked(
        &self,
        parked: ParkedId,
        by: &crate::model::Email,
        text: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<JobEvent> {
        dispatch!(self, s => s.note_parked(parked, by, text, at).await)
    }

    // ---- webhooks (rule 13) ----

    pub async fn insert_webhook_endpoint(
        &self,
        e: &NewWebhookEndpoint,
    ) -> StoreResult<WebhookEndpoint> {
        dispatch!(self, s => s.insert_webhook_endpoint(e).await)
    }

    /// A person's endpoints (`None`: everyone's), deleted ones left out.
    pub async fn webhook_endpoints(
        &self,
        user: Option<UserId>,
    ) -> StoreResult<Vec<WebhookEndpoint>> {
        dispatch!(self, s => s.webhook_endpoints(user).await)
    }

    pub async fn webhook_endpoint(
        &self,
        id: crate::model::WebhookEndpointId,
    ) -> StoreResult<Option<WebhookEndpoint>> {
        dispatch!(self, s => s.webhook_endpoint(id).await)
    }

    pub async fn delete_webhook_endpoint(
        &self,
        id: crate::model::WebhookEndpointId,
        user: UserId,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        dispatch!(self, s => s.delete_webhook_endpoint(id, user, at).await)
    }

    pub async fn rotate_webhook_secret(
        &self,
        id: crate::model::WebhookEndpointId,
        user: UserId,
        secret: &str,
        previous_expires_at: DateTime<Utc>,
    ) -> StoreResult<Option<WebhookEndpoint>> {
        dispatch!(self, s => s.rotate_webhook_secret(id, user, secret, previous_expires_at).await)
    }

    /// A new account secret; the previous keeps signing until `until`.
    pub async fn rotate_account_webhook_secret(
        &self,
        user: UserId,
        secret: &str,
        until: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        dispatch!(self, s => s.rotate_account_webhook_secret(user, secret, until, at).await)
    }

    /// A person's account secret, made with `candidate` on first use.
    pub async fn account_webhook_secret(
        &self,
        user: UserId,
        candidate: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<String> {
        dispatch!(self, s => s.account_webhook_secret(user, candidate, at).await)
    }

    pub async fn insert_test_delivery(
        &self,
        endpoint: &WebhookEndpoint,
        webhook_id: &str,
        body: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<crate::model::DeliveryId> {
        dispatch!(self, s => s.insert_test_delivery(endpoint, webhook_id, body, at).await)
    }

    /// Claims up to `n` due deliveries, leased on the database's clock.
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        n: i64,
        lease_s: f64,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        dispatch!(self, s => s.claim_deliveries(owner, n, lease_s).await)
    }

    /// Records a try's outcome for the claim that made it; false when stale.
    pub async fn finish_delivery(
        &self,
        id: crate::model::DeliveryId,
        claim_token: i64,
        outcome: &DeliveryOutcome,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        dispatch!(self, s => s.finish_delivery(id, claim_token, outcome, at).await)
    }

    pub async fn list_deliveries(&self, filter: &DeliveryFilter) -> StoreResult<Vec<Delivery>> {
        dispatch!(self, s => s.list_deliveries(filter).await)
    }

    /// How many deliveries a filter matches; with `Before`, how many come
    /// before that position in the list.
    pub async fn count_deliveries(&self, filter: &DeliveryFilter) -> StoreResult<i64> {
        dispatch!(self, s => s.count_deliveries(filter).await)
    }

    pub async fn delivery(&self, id: crate::model::DeliveryId) -> StoreResult<Option<Delivery>> {
        dispatch!(self, s => s.delivery(id).await)
    }

    /// Makes delivered or dead deliveries due again; the ids replayed.
    pub async fn replay_deliveries(
        &self,
        ids: &[crate::model::DeliveryId],
        at: DateTime<Utc>,
    ) -> StoreResult<Vec<crate::model::DeliveryId>> {
        dispatch!(self, s => s.replay_deliveries(ids, at).await)
    }

    pub async fn webhook_stats(&self) -> StoreResult<WebhookStats> {
        dispatch!(self, s => s.webhook_stats().await)
    }

    /// On PostgreSQL, a listener for the doorbells every node rings when a
    /// job is queued (LISTEN/NOTIFY); SQLite is one node and has none.
    pub async fn doorbell(&self) -> StoreResult<Option<PgDoorbell>> {
        match self {
            Store::Sqlite(_) => Ok(None),
            Store::Postgres(p) => Ok(Some(p.doorbell().await?)),
        }
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

    pub async fn attempts(&self, job: JobId) -> StoreResult<Vec<Attempt>> {
        dispatch!(self, s => s.attempts(job).await)
    }

    /// Whether the next repair of `version` would be on the studio
    /// (`model::repair_is_free`), as `submit_repair` will judge it.
    pub async fn repair_is_free(&self, version: JobId) -> StoreResult<bool> {
        dispatch!(self, s => s.repair_is_free(version).await)
    }

    /// The jobs with these ids (a page of ledger entries names them).
    pub async fn jobs_of(&self, ids: &[JobId]) -> StoreResult<Vec<Job>> {
        dispatch!(self, s => s.jobs_of(ids).await)
    }

    /// The attempts of many jobs in one query (a page of the job list).
    pub async fn attempts_of(&self, jobs: &[JobId]) -> StoreResult<Vec<Attempt>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        dispatch!(self, s => s.attempts_of(jobs).await)
    }

    /// A day of the breaker (the default cap and nothing used when no hold
    /// was ever taken against it).
    pub async fn budget_day(&self, day: NaiveDate, default_cap: Usd) -> StoreResult<BudgetDay> {
        dispatch!(self, s => s.budget_day(day, default_cap).await)
    }

    /// Sets a day's cap, or halts or resumes it, and records who did it,
    /// when and why in the day's history: both, or neither.
    pub async fn set_budget(
        &self,
        day: NaiveDate,
        default_cap: Usd,
        change: &BudgetChange,
    ) -> StoreResult<BudgetDay> {
        dispatch!(self, s => s.set_budget(day, default_cap, change).await)
    }

    /// The breaker's changes on the days from `from` to `to`, newest first.
    pub async fn budget_changes(
        &self,
        from: NaiveDate,
        to: NaiveDate,
        limit: i64,
    ) -> StoreResult<Vec<BudgetChangeListed>> {
        dispatch!(self, s => s.budget_changes(from, to, limit).await)
    }

    /// The spend rollup's rows of the days from `from` to `to`.
    pub async fn spend_rows(&self, from: NaiveDate, to: NaiveDate) -> StoreResult<Vec<SpendRow>> {
        dispatch!(self, s => s.spend_rows(from, to).await)
    }

    /// The same, summed straight from the attempts (what the rollup equals).
    pub async fn spend_rows_raw(
        &self,
        from: NaiveDate,
        to: NaiveDate,
    ) -> StoreResult<Vec<SpendRow>> {
        dispatch!(self, s => s.spend_rows_raw(from, to).await)
    }

    /// The budget rows of the days in a range that have one.
    pub async fn budget_days(&self, from: NaiveDate, to: NaiveDate) -> StoreResult<Vec<BudgetDay>> {
        dispatch!(self, s => s.budget_days(from, to).await)
    }

    /// Attempts by day, filtered, a page at a time.
    pub async fn list_attempts(&self, filter: &AttemptFilter) -> StoreResult<Vec<AttemptListed>> {
        dispatch!(self, s => s.list_attempts(filter).await)
    }

    /// How many attempts a filter matches; with `Before`, how many come
    /// before that position in the list.
    pub async fn count_attempts(&self, filter: &AttemptFilter) -> StoreResult<i64> {
        dispatch!(self, s => s.count_attempts(filter).await)
    }

    /// What one person's work cost the studio on a day (settled, or held).
    pub async fn user_spend_on(
        &self,
        user: UserId,
        day: NaiveDate,
        since: DateTime<Utc>,
    ) -> StoreResult<Usd> {
        dispatch!(self, s => s.user_spend_on(user, day, since).await)
    }

    /// Writes down the shares of its cap `day` newly passed; returns them.
    pub async fn note_thresholds(
        &self,
        day: NaiveDate,
        shares: &[u32],
        at: DateTime<Utc>,
    ) -> StoreResult<Vec<u32>> {
        dispatch!(self, s => s.note_thresholds(day, shares, at).await)
    }

    /// The shares of its cap `day` has passed, lowest first.
    pub async fn thresholds_on(&self, day: NaiveDate) -> StoreResult<Vec<ThresholdCrossed>> {
        dispatch!(self, s => s.thresholds_on(day).await)
    }

    /// Spend over a range by person and API token.
    pub async fn spend_by_source(
        &self,
        from: NaiveDate,
        to: NaiveDate,
    ) -> StoreResult<Vec<SourceSpend>> {
        dispatch!(self, s => s.spend_by_source(from, to).await)
    }

    /// The people whose work cost the most on a day.
    pub async fn top_spenders_on(&self, day: NaiveDate, n: i64) -> StoreResult<Vec<Spender>> {
        dispatch!(self, s => s.top_spenders_on(day, n).await)
    }

    /// What may have been spent without a price, right now.
    pub async fn exposure(&self) -> StoreResult<Exposure> {
        dispatch!(self, s => s.exposure().await)
    }

    pub async fn metrics_snapshot(&self) -> StoreResult<MetricsSnapshot> {
        dispatch!(self, s => s.metrics_snapshot().await)
    }

    /// Rule 11's safety net: settles holds still counted for jobs that
    /// ended, from what their attempts recorded. Returns how many.
    pub async fn settle_left_holds(&self) -> StoreResult<u64> {
        dispatch!(self, s => s.settle_left_holds().await)
    }

    /// Retention: outputs of jobs that aged out (finished before `cutoff`,
    /// no open record, the whole lineage finished before it too).
    pub async fn expired_outputs(
        &self,
        cutoff: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<Vec<(JobId, String)>> {
        dispatch!(self, s => s.expired_outputs(cutoff, limit).await)
    }

    pub async fn mark_output_purged(&self, job: JobId, at: DateTime<Utc>) -> StoreResult<bool> {
        dispatch!(self, s => s.mark_output_purged(job, at).await)
    }

    /// Retention: uploads created before `cutoff`, not purged yet.
    pub async fn expired_assets(
        &self,
        cutoff: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<Vec<Asset>> {
        dispatch!(self, s => s.expired_assets(cutoff, limit).await)
    }

    /// Retention: requests of `user`'s jobs since `since` that must keep
    /// what they name.
    pub async fn kept_requests(
        &self,
        user: UserId,
        since: DateTime<Utc>,
        cutoff: DateTime<Utc>,
    ) -> StoreResult<Vec<crate::model::JobRequest>> {
        dispatch!(self, s => s.kept_requests(user, since, cutoff).await)
    }

    /// Retention: marks an upload purged; the object key to delete when no
    /// kept upload shares it.
    pub async fn mark_asset_purged(
        &self,
        asset: AssetId,
        at: DateTime<Utc>,
    ) -> StoreResult<Option<String>> {
        dispatch!(self, s => s.mark_asset_purged(asset, at).await)
    }

    pub async fn purge_events(&self, cutoff: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
        dispatch!(self, s => s.purge_events(cutoff, limit).await)
    }

    pub async fn purge_evidence(
        &self,
        cutoff: DateTime<Utc>,
        at: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<u64> {
        dispatch!(self, s => s.purge_evidence(cutoff, at, limit).await)
    }

    pub async fn purge_deliveries(&self, cutoff: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
        dispatch!(self, s => s.purge_deliveries(cutoff, limit).await)
    }
}

/// A connection idle at least this long is pinged before it is handed out.
const PING_IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// Pool options both backends start from. sqlx pings every connection it
/// takes back (its release check) and, by default, again before lending
/// it out: two extra round trips around every statement a pool runs. One
/// that came back moments ago was checked then, so only a connection idle
/// for a while is pinged before use (a restarted server, a dropped link).
fn pool_options<DB: sqlx::Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::<DB>::new()
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IDLE_AFTER {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}
