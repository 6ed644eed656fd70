//! PostgreSQL, for production and several nodes: its pool, its dialect
//! (`FOR UPDATE SKIP LOCKED`, `now()`) and its doorbell (`LISTEN/NOTIFY`).
//! The statements themselves are in `ops/`, written once and compiled here
//! for PostgreSQL.

use super::{Counters, StoreResult};
use crate::model::JobId;
use sqlx::PgPool;
use std::sync::Arc;

pub(super) type Db = sqlx::Postgres;

/// The database's clock.
macro_rules! now {
    () => {
        "now()"
    };
}

/// The database's clock plus a whole number of seconds bound at `$p`.
macro_rules! now_plus_seconds {
    ($p:literal) => {
        concat!("now() + ", $p, " * interval '1 second'")
    };
}

/// A row lock taken by a check, so the row cannot change before the
/// transaction that checked it commits.
/// The day an attempt's spend counts on (as the rollup's triggers say).
macro_rules! spend_day {
    () => {
        "COALESCE(budget_day, (started_at AT TIME ZONE 'UTC')::date)"
    };
}

macro_rules! for_update {
    () => {
        "FOR UPDATE"
    };
}

/// `column` among the values a subquery returns, the subquery run first
/// (an init plan) and its values used as the index's condition: left to
/// itself, the planner may instead walk the column's index and test each
/// row against the subquery (every running job, to find none expired).
macro_rules! in_values_of {
    ($column:literal, $subquery:expr) => {
        concat!($column, " = ANY (ARRAY(", $subquery, "))")
    };
}

/// A claim's lock: rows another node is claiming are skipped, not waited for.
macro_rules! for_update_skip_locked {
    () => {
        "FOR UPDATE SKIP LOCKED"
    };
}

/// A locking read's lock on one of its tables only (the others may be the
/// nullable side of a join, or a set of rows).
macro_rules! for_update_of {
    ($t:literal) => {
        concat!("FOR UPDATE OF ", $t)
    };
}

/// A set of rows for one statement, named `v`: each column is bound as an
/// array (`col`) and `UNNEST` zips them back into rows, so many runs' writes
/// of one kind take one statement.
macro_rules! rows {
    ($p0:literal $n0:ident $(, $p:literal $n:ident)* $(,)?) => {
        concat!(
            "UNNEST(", $p0, $(", ", $p,)* ") AS v(",
            stringify!($n0), $(", ", stringify!($n),)* ")"
        )
    };
}

type Query<'q> = sqlx::query::Query<'q, Db, sqlx::postgres::PgArguments>;

/// How the items of a `rows!` statement are sent: all in one statement.
fn row_chunks<T>(items: &[T]) -> std::slice::Chunks<'_, T> {
    items.chunks(items.len().max(1))
}

/// Binds one column of a `rows!` set: every item's value, as one array.
fn col<'q, T, V>(q: Query<'q>, items: &[T], f: impl Fn(&T) -> V) -> Query<'q>
where
    Vec<V>: 'q + sqlx::Encode<'q, Db> + sqlx::Type<Db>,
{
    q.bind(items.iter().map(f).collect::<Vec<V>>())
}

// The one source of every statement, compiled for this backend (the other
// backend compiles it too: that is the point, not an accident).
#[allow(clippy::duplicate_mod)]
#[path = "ops/mod.rs"]
mod ops;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

const CONNECTIONS_MAX: u32 = 16;

/// The LISTEN/NOTIFY channel that carries queued job ids between nodes.
pub const JOBS_CHANNEL: &str = "tollgate_jobs";

/// Rule 4: a doorbell carrying only the id, rung in the transaction that
/// queues the job, so it is heard only once that commits.
const RING: Option<&str> = Some("SELECT pg_notify('tollgate_jobs', $1)");

#[derive(Clone, Debug)]
pub struct Backend {
    writer: PgPool,
    reader: PgPool,
    counters: Arc<Counters>,
    envelope: super::EnvelopeWriter,
}

impl Backend {
    pub async fn connect(
        url: &str,
        counters: Arc<Counters>,
        envelope: super::EnvelopeWriter,
    ) -> StoreResult<Backend> {
        let pool = super::pool_options::<Db>()
            .max_connections(CONNECTIONS_MAX)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(Backend {
            writer: pool.clone(),
            reader: pool,
            counters,
            envelope,
        })
    }

    pub fn pool(&self) -> PgPool {
        self.writer.clone()
    }

    /// The same database and counters over a pool of one connection of its
    /// own, opened lazily on the runtime this is called on (a pool's
    /// connections belong to the runtime that opened them).
    pub fn dedicated_writer(&self) -> Backend {
        let options = (*self.writer.connect_options()).clone();
        let pool = super::pool_options::<Db>()
            .max_connections(1)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_lazy_with(options);
        Backend {
            writer: pool.clone(),
            reader: pool,
            counters: self.counters.clone(),
            envelope: self.envelope,
        }
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        tower_sessions_sqlx_store::PostgresStore::new(self.writer.clone())
            .migrate()
            .await?;
        Ok(())
    }

    pub async fn doorbell(&self) -> StoreResult<PgDoorbell> {
        let mut l = sqlx::postgres::PgListener::connect_with(&self.writer).await?;
        l.listen(JOBS_CHANNEL).await?;
        Ok(PgDoorbell(l))
    }
}

/// Hears the doorbells other nodes ring (its own connection, LISTENing).
pub struct PgDoorbell(sqlx::postgres::PgListener);

impl PgDoorbell {
    /// The next rung job id. A dropped connection is re-established by
    /// sqlx; whatever rang meanwhile is found by the sweeper.
    pub async fn next(&mut self) -> StoreResult<Option<JobId>> {
        let n = self.0.recv().await?;
        Ok(n.payload().parse::<uuid::Uuid>().ok().map(JobId))
    }
}
