//! The SQLite implementation of `Store`.
//!
//! Writes go through a pool of one connection: SQLite has one writer anyway,
//! and queueing in-process avoids `SQLITE_BUSY` under contention. Reads use a
//! separate pool; WAL lets them run beside the writer.

use super::records::*;
use super::{is_unique_violation, StoreError, StoreResult};
use crate::model::{ApiTokenId, Credits, Email, LedgerEntryId, LedgerKind, Role, UserId};
use chrono::{DateTime, Duration, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool};
use std::str::FromStr;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

const READERS_MAX: u32 = 8;

#[derive(Clone, Debug)]
pub struct SqliteStore {
    pub(super) writer: SqlitePool,
    pub(super) reader: SqlitePool,
}

const USER_COLUMNS: &str = "id, email, role, disabled, balance, created_at";
const TOKEN_COLUMNS: &str = "id, user_id, name, prefix, created_at, last_used_at, revoked_at";
const LEDGER_COLUMNS: &str = "id, user_id, amount, kind, reference, actor_id, reason, created_at";

fn user_from_row(row: &SqliteRow) -> StoreResult<User> {
    let role: String = row.try_get("role")?;
    let email: String = row.try_get("email")?;
    Ok(User {
        id: UserId(row.try_get("id")?),
        email: Email::from_stored(email),
        role: Role::parse(&role).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        disabled: row.try_get::<i64, _>("disabled")? != 0,
        balance: Credits(row.try_get("balance")?),
        created_at: row.try_get("created_at")?,
    })
}

fn token_from_row(row: &SqliteRow) -> StoreResult<ApiToken> {
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

fn ledger_from_row(row: &SqliteRow) -> StoreResult<LedgerEntry> {
    let kind: String = row.try_get("kind")?;
    let actor: Option<uuid::Uuid> = row.try_get("actor_id")?;
    Ok(LedgerEntry {
        id: LedgerEntryId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        amount: Credits(row.try_get("amount")?),
        kind: LedgerKind::parse(&kind).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        reference: row.try_get("reference")?,
        actor_id: actor.map(UserId),
        reason: row.try_get("reason")?,
        created_at: row.try_get("created_at")?,
    })
}

impl SqliteStore {
    pub async fn connect(url: &str) -> StoreResult<SqliteStore> {
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
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(READERS_MAX)
            .connect_with(options)
            .await?;
        Ok(SqliteStore { writer, reader })
    }

    pub fn writer(&self) -> SqlitePool {
        self.writer.clone()
    }

    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        tower_sessions_sqlx_store::SqliteStore::new(self.writer.clone())
            .migrate()
            .await?;
        Ok(())
    }

    pub async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    // ---- users ----

    pub async fn insert_user(&self, new: &NewUser) -> StoreResult<User> {
        let sql = format!(
            "INSERT INTO users (id, email, password_hash, role, created_at) VALUES (?, ?, ?, ?, ?) RETURNING {USER_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.email.as_str())
            .bind(&new.password_hash)
            .bind(new.role.as_str())
            .bind(new.created_at)
            .fetch_one(&self.writer)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict("email")
                } else {
                    e.into()
                }
            })?;
        user_from_row(&row)
    }

    pub async fn complete_setup(&self, new: &NewUser) -> StoreResult<Option<User>> {
        // The single writer connection serialises this whole transaction.
        let mut tx = self.writer.begin().await?;
        let blocked: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM users WHERE role = 'admin') OR EXISTS (SELECT 1 FROM instance_setup)",
        )
        .fetch_one(&mut *tx)
        .await?;
        if blocked {
            return Ok(None);
        }
        let sql = format!(
            "INSERT INTO users (id, email, password_hash, role, created_at) VALUES (?, ?, ?, 'admin', ?) RETURNING {USER_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.email.as_str())
            .bind(&new.password_hash)
            .bind(new.created_at)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict("email")
                } else {
                    e.into()
                }
            })?;
        let user = user_from_row(&row)?;
        let done = sqlx::query(
            "INSERT INTO instance_setup (id, admin_id, completed_at) VALUES (1, ?, ?) ON CONFLICT (id) DO NOTHING",
        )
        .bind(new.id.0)
        .bind(new.created_at)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        tx.commit().await?;
        Ok(Some(user))
    }

    pub async fn setup_needed(&self) -> StoreResult<bool> {
        let blocked: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM users WHERE role = 'admin') OR EXISTS (SELECT 1 FROM instance_setup)",
        )
        .fetch_one(&self.reader)
        .await?;
        Ok(!blocked)
    }

    pub async fn user_by_id(&self, id: UserId) -> StoreResult<Option<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    pub async fn user_by_email(&self, email: &str) -> StoreResult<Option<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = ?");
        let row = sqlx::query(&sql)
            .bind(email)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    pub async fn password_hash(&self, id: UserId) -> StoreResult<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT password_hash FROM users WHERE id = ?")
                .bind(id.0)
                .fetch_optional(&self.reader)
                .await?,
        )
    }

    pub async fn list_users(&self) -> StoreResult<Vec<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users ORDER BY email");
        let rows = sqlx::query(&sql).fetch_all(&self.reader).await?;
        rows.iter().map(user_from_row).collect()
    }

    pub async fn set_user_role(&self, id: UserId, role: Role) -> StoreResult<()> {
        let r = sqlx::query("UPDATE users SET role = ? WHERE id = ?")
            .bind(role.as_str())
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn set_user_disabled(&self, id: UserId, disabled: bool) -> StoreResult<()> {
        let r = sqlx::query("UPDATE users SET disabled = ? WHERE id = ?")
            .bind(disabled as i64)
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn set_password_hash(&self, id: UserId, hash: &str) -> StoreResult<()> {
        let r = sqlx::query("UPDATE users SET password_hash = ? WHERE id = ?")
            .bind(hash)
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn count_active_admins(&self) -> StoreResult<i64> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE role = 'admin' AND disabled = 0")
                .fetch_one(&self.reader)
                .await?,
        )
    }

    // ---- API tokens ----

    pub async fn insert_api_token(&self, new: &NewApiToken) -> StoreResult<ApiToken> {
        let sql = format!(
            "INSERT INTO api_tokens (id, user_id, name, token_hash, prefix, created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING {TOKEN_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.user_id.0)
            .bind(&new.name)
            .bind(&new.token_hash)
            .bind(&new.prefix)
            .bind(new.created_at)
            .fetch_one(&self.writer)
            .await?;
        token_from_row(&row)
    }

    pub async fn list_api_tokens(&self, user: UserId) -> StoreResult<Vec<ApiToken>> {
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE user_id = ? ORDER BY created_at DESC"
        );
        let rows = sqlx::query(&sql)
            .bind(user.0)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(token_from_row).collect()
    }

    pub async fn revoke_api_token(&self, user: UserId, id: ApiTokenId) -> StoreResult<bool> {
        let r = sqlx::query(
            "UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND user_id = ? AND revoked_at IS NULL",
        )
        .bind(Utc::now())
        .bind(id.0)
        .bind(user.0)
        .execute(&self.writer)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn user_by_token_hash(
        &self,
        hash: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<User>> {
        let sql = format!(
            "SELECT t.id AS token_id, t.last_used_at, {} FROM api_tokens t JOIN users u ON u.id = t.user_id \
             WHERE t.token_hash = ? AND t.revoked_at IS NULL AND u.disabled = 0",
            USER_COLUMNS.split(", ").map(|c| format!("u.{c}")).collect::<Vec<_>>().join(", ")
        );
        let Some(row) = sqlx::query(&sql)
            .bind(hash)
            .fetch_optional(&self.reader)
            .await?
        else {
            return Ok(None);
        };
        let last_used: Option<DateTime<Utc>> = row.try_get("last_used_at")?;
        if last_used.is_none_or(|t| now - t > Duration::minutes(1)) {
            let token_id: uuid::Uuid = row.try_get("token_id")?;
            sqlx::query("UPDATE api_tokens SET last_used_at = ? WHERE id = ?")
                .bind(now)
                .bind(token_id)
                .execute(&self.writer)
                .await?;
        }
        user_from_row(&row).map(Some)
    }

    // ---- ledger ----

    pub async fn append_ledger(&self, new: &NewLedgerEntry) -> StoreResult<Option<LedgerEntry>> {
        let sql = format!(
            "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (reference) DO NOTHING RETURNING {LEDGER_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.user_id.0)
            .bind(new.amount.0)
            .bind(new.kind.as_str())
            .bind(&new.reference)
            .bind(new.actor_id.map(|a| a.0))
            .bind(&new.reason)
            .bind(new.created_at)
            .fetch_optional(&self.writer)
            .await?;
        row.as_ref().map(ledger_from_row).transpose()
    }

    pub async fn ledger_for_user(&self, user: UserId, limit: i64) -> StoreResult<Vec<LedgerEntry>> {
        let sql = format!(
            "SELECT {LEDGER_COLUMNS} FROM ledger WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT ?"
        );
        let rows = sqlx::query(&sql)
            .bind(user.0)
            .bind(limit)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(ledger_from_row).collect()
    }

    pub async fn ledger_entry(&self, reference: &str) -> StoreResult<Option<LedgerEntry>> {
        let sql = format!("SELECT {LEDGER_COLUMNS} FROM ledger WHERE reference = ?");
        let row = sqlx::query(&sql)
            .bind(reference)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(ledger_from_row).transpose()
    }

    pub async fn ledger_sum(&self, user: UserId) -> StoreResult<Credits> {
        let sum: i64 =
            sqlx::query_scalar("SELECT COALESCE(SUM(amount), 0) FROM ledger WHERE user_id = ?")
                .bind(user.0)
                .fetch_one(&self.reader)
                .await?;
        Ok(Credits(sum))
    }
}
