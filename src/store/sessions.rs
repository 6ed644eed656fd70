//! Browser sessions kept in the same database as everything else, on either
//! backend: one `SessionStore` that forwards to the matching sqlx store.

use async_trait::async_trait;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, ExpiredDeletion, SessionStore};
use tower_sessions_sqlx_store::{PostgresStore, SqliteStore};

#[derive(Clone, Debug)]
pub enum SessionBackend {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

impl SessionBackend {
    pub fn sqlite(pool: sqlx::SqlitePool) -> Self {
        SessionBackend::Sqlite(SqliteStore::new(pool))
    }

    pub fn postgres(pool: sqlx::PgPool) -> Self {
        SessionBackend::Postgres(PostgresStore::new(pool))
    }
}

#[async_trait]
impl SessionStore for SessionBackend {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        match self {
            SessionBackend::Sqlite(s) => s.create(record).await,
            SessionBackend::Postgres(s) => s.create(record).await,
        }
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        match self {
            SessionBackend::Sqlite(s) => s.save(record).await,
            SessionBackend::Postgres(s) => s.save(record).await,
        }
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        match self {
            SessionBackend::Sqlite(s) => s.load(id).await,
            SessionBackend::Postgres(s) => s.load(id).await,
        }
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        match self {
            SessionBackend::Sqlite(s) => s.delete(id).await,
            SessionBackend::Postgres(s) => s.delete(id).await,
        }
    }
}

#[async_trait]
impl ExpiredDeletion for SessionBackend {
    async fn delete_expired(&self) -> session_store::Result<()> {
        match self {
            SessionBackend::Sqlite(s) => s.delete_expired().await,
            SessionBackend::Postgres(s) => s.delete_expired().await,
        }
    }
}
