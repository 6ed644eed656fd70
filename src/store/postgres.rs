//! The PostgreSQL implementation of `Store`: the same methods as `sqlite`,
//! in Postgres' dialect (`$n` parameters, native uuid, boolean, timestamptz).

use super::records::*;
use super::{is_unique_violation, StoreError, StoreResult};
use crate::model::{ApiTokenId, Credits, Email, LedgerEntryId, LedgerKind, Role, UserId};
use chrono::{DateTime, Duration, Utc};
use sqlx::postgres::{PgPoolOptions, PgRow};
use sqlx::{PgPool, Row};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

const CONNECTIONS_MAX: u32 = 16;

#[derive(Clone, Debug)]
pub struct PgStore {
    pub(super) pool: PgPool,
}

const USER_COLUMNS: &str = "id, email, role, disabled, balance, created_at";
const TOKEN_COLUMNS: &str = "id, user_id, name, prefix, created_at, last_used_at, revoked_at";
const LEDGER_COLUMNS: &str = "id, user_id, amount, kind, reference, actor_id, reason, created_at";

fn user_from_row(row: &PgRow) -> StoreResult<User> {
    let role: String = row.try_get("role")?;
    let email: String = row.try_get("email")?;
    Ok(User {
        id: UserId(row.try_get("id")?),
        email: Email::from_stored(email),
        role: Role::parse(&role).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        disabled: row.try_get("disabled")?,
        balance: Credits(row.try_get("balance")?),
        created_at: row.try_get("created_at")?,
    })
}

fn token_from_row(row: &PgRow) -> StoreResult<ApiToken> {
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

fn ledger_from_row(row: &PgRow) -> StoreResult<LedgerEntry> {
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

impl PgStore {
    pub async fn connect(url: &str) -> StoreResult<PgStore> {
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS_MAX)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(PgStore { pool })
    }

    pub fn pool(&self) -> PgPool {
        self.pool.clone()
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        tower_sessions_sqlx_store::PostgresStore::new(self.pool.clone())
            .migrate()
            .await?;
        Ok(())
    }

    pub async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    // ---- users ----

    pub async fn insert_user(&self, new: &NewUser) -> StoreResult<User> {
        let sql = format!(
            "INSERT INTO users (id, email, password_hash, role, created_at) VALUES ($1, $2, $3, $4, $5) RETURNING {USER_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.email.as_str())
            .bind(&new.password_hash)
            .bind(new.role.as_str())
            .bind(new.created_at)
            .fetch_one(&self.pool)
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
        let mut tx = self.pool.begin().await?;
        let blocked: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM users WHERE role = 'admin') OR EXISTS (SELECT 1 FROM instance_setup)",
        )
        .fetch_one(&mut *tx)
        .await?;
        if blocked {
            return Ok(None);
        }
        let sql = format!(
            "INSERT INTO users (id, email, password_hash, role, created_at) VALUES ($1, $2, $3, 'admin', $4) RETURNING {USER_COLUMNS}"
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
        // A racing setup waits here on the other's uncommitted row, then
        // sees the conflict and rolls back its user with it.
        let done = sqlx::query(
            "INSERT INTO instance_setup (id, admin_id, completed_at) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING",
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
        .fetch_one(&self.pool)
        .await?;
        Ok(!blocked)
    }

    pub async fn user_by_id(&self, id: UserId) -> StoreResult<Option<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    pub async fn user_by_email(&self, email: &str) -> StoreResult<Option<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE lower(email) = lower($1)");
        let row = sqlx::query(&sql)
            .bind(email)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    pub async fn password_hash(&self, id: UserId) -> StoreResult<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT password_hash FROM users WHERE id = $1")
                .bind(id.0)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    pub async fn list_users(&self) -> StoreResult<Vec<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users ORDER BY email");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(user_from_row).collect()
    }

    pub async fn set_user_role(&self, id: UserId, role: Role) -> StoreResult<()> {
        let r = sqlx::query("UPDATE users SET role = $1 WHERE id = $2")
            .bind(role.as_str())
            .bind(id.0)
            .execute(&self.pool)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn set_user_disabled(&self, id: UserId, disabled: bool) -> StoreResult<()> {
        let r = sqlx::query("UPDATE users SET disabled = $1 WHERE id = $2")
            .bind(disabled)
            .bind(id.0)
            .execute(&self.pool)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn set_password_hash(&self, id: UserId, hash: &str) -> StoreResult<()> {
        let r = sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2")
            .bind(hash)
            .bind(id.0)
            .execute(&self.pool)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn count_active_admins(&self) -> StoreResult<i64> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE role = 'admin' AND NOT disabled")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    // ---- API tokens ----

    pub async fn insert_api_token(&self, new: &NewApiToken) -> StoreResult<ApiToken> {
        let sql = format!(
            "INSERT INTO api_tokens (id, user_id, name, token_hash, prefix, created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING {TOKEN_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.user_id.0)
            .bind(&new.name)
            .bind(&new.token_hash)
            .bind(&new.prefix)
            .bind(new.created_at)
            .fetch_one(&self.pool)
            .await?;
        token_from_row(&row)
    }

    pub async fn list_api_tokens(&self, user: UserId) -> StoreResult<Vec<ApiToken>> {
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE user_id = $1 ORDER BY created_at DESC"
        );
        let rows = sqlx::query(&sql).bind(user.0).fetch_all(&self.pool).await?;
        rows.iter().map(token_from_row).collect()
    }

    pub async fn revoke_api_token(&self, user: UserId, id: ApiTokenId) -> StoreResult<bool> {
        let r = sqlx::query(
            "UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL",
        )
        .bind(Utc::now())
        .bind(id.0)
        .bind(user.0)
        .execute(&self.pool)
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
             WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND NOT u.disabled",
            USER_COLUMNS.split(", ").map(|c| format!("u.{c}")).collect::<Vec<_>>().join(", ")
        );
        let Some(row) = sqlx::query(&sql)
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        let last_used: Option<DateTime<Utc>> = row.try_get("last_used_at")?;
        if last_used.is_none_or(|t| now - t > Duration::minutes(1)) {
            let token_id: uuid::Uuid = row.try_get("token_id")?;
            sqlx::query("UPDATE api_tokens SET last_used_at = $1 WHERE id = $2")
                .bind(now)
                .bind(token_id)
                .execute(&self.pool)
                .await?;
        }
        user_from_row(&row).map(Some)
    }

    // ---- ledger ----

    pub async fn append_ledger(&self, new: &NewLedgerEntry) -> StoreResult<Option<LedgerEntry>> {
        let sql = format!(
            "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (reference) DO NOTHING RETURNING {LEDGER_COLUMNS}"
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
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(ledger_from_row).transpose()
    }

    pub async fn ledger_for_user(&self, user: UserId, limit: i64) -> StoreResult<Vec<LedgerEntry>> {
        let sql = format!(
            "SELECT {LEDGER_COLUMNS} FROM ledger WHERE user_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(user.0)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(ledger_from_row).collect()
    }

    pub async fn ledger_entry(&self, reference: &str) -> StoreResult<Option<LedgerEntry>> {
        let sql = format!("SELECT {LEDGER_COLUMNS} FROM ledger WHERE reference = $1");
        let row = sqlx::query(&sql)
            .bind(reference)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(ledger_from_row).transpose()
    }

    pub async fn ledger_sum(&self, user: UserId) -> StoreResult<Credits> {
        let sum: i64 = sqlx::query_scalar(
            "SELECT COALESCE(SUM(amount), 0)::bigint FROM ledger WHERE user_id = $1",
        )
        .bind(user.0)
        .fetch_one(&self.pool)
        .await?;
        Ok(Credits(sum))
    }
}
