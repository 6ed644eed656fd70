//! SQLite, the embedded default: its pools and its dialect. The statements
//! themselves are in `ops/`, written once and compiled here for SQLite.
//!
//! Writes go through a pool of one connection: SQLite has one writer anyway,
//! and queueing in-process avoids `SQLITE_BUSY` under contention. Reads use a
//! separate pool; WAL lets them run beside the writer.

use super::{Counters, StoreError, StoreResult};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::SqlitePool;
use std::str::FromStr;
use std::sync::Arc;

pub(super) type Db = sqlx::Sqlite;

/// The database's clock, written the way sqlx writes a `DateTime<Utc>`
/// (RFC 3339, `+00:00`), so stored times compare correctly as text.
macro_rules! now {
    () => {
        "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')"
    };
}

/// The database's clock plus a whole number of seconds bound at `$p`.
macro_rules! now_plus_seconds {
    ($p:literal) => {
        concat!(
            "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '+' || ",
            $p,
            " || ' seconds')"
        )
    };
}

/// Row locks: the single writer connection already serialises writes.
/// The day an attempt's spend counts on (as the rollup's triggers say).
macro_rules! spend_day {
    () => {
        "COALESCE(budget_day, substr(started_at, 1, 10))"
    };
}

macro_rules! for_update {
    () => {
        ""
    };
}

/// `column` among the values a subquery returns (SQLite runs the
/// subquery once and looks each value up in the column's index).
macro_rules! in_values_of {
    ($column:literal, $subquery:expr) => {
        concat!($column, " IN (", $subquery, ")")
    };
}

/// A claim's lock: nothing to skip with one writer.
macro_rules! for_update_skip_locked {
    () => {
        ""
    };
}

/// No row locks: the single writer connection serialises every write.
macro_rules! for_update_of {
    ($t:literal) => {
        ""
    };
}

/// A set of rows for one statement, named `v`: SQLite has no arrays, so the
/// statement runs once per item (`row_chunks`), its one row bound as plain
/// values (`col`). In process, a statement costs microseconds.
macro_rules! rows {
    ($p0:literal $n0:ident $(, $p:literal $n:ident)* $(,)?) => {
        concat!(
            "(SELECT ", $p0, " AS ", stringify!($n0),
            $(", ", $p, " AS ", stringify!($n),)* ") AS v"
        )
    };
}

type Query<'q> = sqlx::query::Query<'q, Db, sqlx::sqlite::SqliteArguments<'q>>;

/// How the items of a `rows!` statement are sent: one statement each.
fn row_chunks<T>(items: &[T]) -> std::slice::Chunks<'_, T> {
    items.chunks(1)
}

/// Binds one column of a `rows!` set: the one item's value.
fn col<'q, T, V>(q: Query<'q>, items: &[T], f: impl Fn(&T) -> V) -> Query<'q>
where
    V: 'q + sqlx::Encode<'q, Db> + sqlx::Type<Db>,
{
    q.bind(f(&items[0]))
}

// The one source of every statement, compiled for this backend (the other
// backend compiles it too: that is the point, not an accident).
#[allow(clippy::duplicate_mod)]
#[path = "ops/mod.rs"]
mod ops;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

const READERS_MAX: u32 = 8;

/// A doorbell other nodes can hear: SQLite is one node, so none.
const RING: Option<&str> = None;

#[derive(Clone, Debug)]
pub struct Backend {
    writer: SqlitePool,
    reader: SqlitePool,
    counters: Arc<Counters>,
    envelope: super::EnvelopeWriter,
}

impl Backend {
    pub async fn connect(
        url: &str,
        counters: Arc<Counters>,
        envelope: super::EnvelopeWriter,
    ) -> StoreResult<Backend> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(std::time::Duration::from_secs(10));
        if let Some(parent) = options.get_filename().parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
            }
        }
        let writer = super::pool_options::<Db>()
            .max_connections(1)
            .connect_with(options.clone())
            .await?;
        let reader = super::pool_options::<Db>()
            .max_connections(READERS_MAX)
            .connect_with(options)
            .await?;
        Ok(Backend {
            writer,
            reader,
            counters,
            envelope,
        })
    }

    pub fn writer(&self) -> SqlitePool {
        self.writer.clone()
    }

    /// Applies the migrations with foreign keys off, so that one may
    /// rebuild a table (SQLite's twelve steps: new table, copy, drop,
    /// rename), then checks every foreign key before going on.
    pub async fn migrate(&self) -> StoreResult<()> {
        let mut conn = self.writer.acquire().await?;
        sqlx::query("PRAGMA foreign_keys = OFF")
            .execute(&mut *conn)
            .await?;
        let ran = MIGRATOR.run(&mut *conn).await;
        sqlx::query("PRAGMA foreign_keys = ON")
            .execute(&mut *conn)
            .await?;
        ran?;
        let broken = sqlx::query("PRAGMA foreign_key_check")
            .fetch_all(&mut *conn)
            .await?;
        if !broken.is_empty() {
            return Err(StoreError::Corrupt(format!(
                "{} rows break a foreign key after migrating",
                broken.len()
            )));
        }
        drop(conn);
        tower_sessions_sqlx_store::SqliteStore::new(self.writer.clone())
            .migrate()
            .await?;
        Ok(())
    }
}
