//! Users, first-run setup, API tokens and the credit ledger (rule 2: the
//! ledger's triggers keep the balance and refuse an overdraw).

use super::*;
use chrono::{DateTime, Duration, Utc};

impl Backend {
    pub async fn insert_user(&self, new: &NewUser) -> StoreResult<User> {
        let sql = format!(
            "INSERT INTO users (id, email, password_hash, role, created_at) VALUES ($1, $2, $3, $4, $5) \
             RETURNING {USER_COLUMNS}"
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

    /// The first admin, made only while no admin exists and setup never
    /// ran: the `instance_setup` row's primary key lets one of two racing
    /// setups through.
    pub async fn complete_setup(&self, new: &NewUser) -> StoreResult<Option<User>> {
        let mut tx = self.writer.begin().await?;
        let blocked: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM users WHERE role = 'admin') OR EXISTS (SELECT 1 FROM instance_setup)",
        )
        .fetch_one(&mut *tx)
        .await?;
        if blocked {
            return Ok(None);
        }
        let done = sqlx::query(
            "INSERT INTO instance_setup (id, admin_id, completed_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(new.id.0)
        .bind(new.created_at);
        // The admin first: instance_setup refers to it.
        let sql = format!(
            "INSERT INTO users (id, email, password_hash, role, created_at) VALUES ($1, $2, $3, 'admin', $4) \
             RETURNING {USER_COLUMNS}"
        );
        let row = match sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.email.as_str())
            .bind(&new.password_hash)
            .bind(new.created_at)
            .fetch_one(&mut *tx)
            .await
        {
            Ok(row) => row,
            Err(e) if is_unique_violation(&e) => return Err(StoreError::Conflict("email")),
            Err(e) => return Err(e.into()),
        };
        let user = user_from_row(&row)?;
        match done.execute(&mut *tx).await {
            Ok(r) if r.rows_affected() == 1 => {}
            // Another setup won; this one leaves nothing behind.
            Ok(_) => return Ok(None),
            Err(e) if is_unique_violation(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        tx.commit().await?;
        self.committed(Purpose::Other, 3);
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
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    /// Emails are stored lower-case, so equality is case-insensitive.
    pub async fn user_by_email(&self, email: &str) -> StoreResult<Option<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
        let row = sqlx::query(&sql)
            .bind(email.to_ascii_lowercase())
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    pub async fn password_hash(&self, id: UserId) -> StoreResult<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT password_hash FROM users WHERE id = $1")
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

    async fn update_user(&self, sql: &str, id: UserId, bind: UserField<'_>) -> StoreResult<()> {
        let q = sqlx::query(sql);
        let q = match bind {
            UserField::Text(t) => q.bind(t.to_string()),
        };
        let r = q.bind(id.0).execute(&self.writer).await?;
        self.committed(Purpose::Other, 1);
        if r.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn set_user_role(&self, id: UserId, role: Role) -> StoreResult<()> {
        let sql = "UPDATE users SET role = $1 WHERE id = $2";
        self.update_user(sql, id, UserField::Text(role.as_str()))
            .await
    }

    /// Disabling also ends every session the user has.
    pub async fn set_user_disabled(&self, id: UserId, disabled: bool) -> StoreResult<()> {
        let r = sqlx::query(
            "UPDATE users SET disabled = $1, \
             sessions_valid_after = CASE WHEN $1 THEN $3 ELSE sessions_valid_after END WHERE id = $2",
        )
        .bind(disabled)
        .bind(id.0)
        .bind(chrono::Utc::now())
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        if r.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    /// A new password ends every session started before `sessions_from`.
    pub async fn set_password_hash(
        &self,
        id: UserId,
        hash: &str,
        sessions_from: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<()> {
        let r = sqlx::query(
            "UPDATE users SET password_hash = $1, sessions_valid_after = $3 WHERE id = $2",
        )
        .bind(hash)
        .bind(id.0)
        .bind(sessions_from)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        if r.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    /// Revokes every token of a user that is not revoked yet; how many.
    pub async fn revoke_all_tokens(
        &self,
        user: UserId,
        at: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<u64> {
        let r = sqlx::query(
            "UPDATE api_tokens SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL",
        )
        .bind(user.0)
        .bind(at)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(r.rows_affected())
    }

    pub async fn count_active_admins(&self) -> StoreResult<i64> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE role = 'admin' AND disabled = $1")
                .bind(false)
                .fetch_one(&self.reader)
                .await?,
        )
    }

    // ---- API tokens ----

    pub async fn insert_api_token(&self, new: &NewApiToken) -> StoreResult<ApiToken> {
        let sql = format!(
            "INSERT INTO api_tokens (id, user_id, name, token_hash, prefix, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {TOKEN_COLUMNS}"
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
        self.committed(Purpose::Other, 1);
        token_from_row(&row)
    }

    pub async fn list_api_tokens(&self, user: UserId) -> StoreResult<Vec<ApiToken>> {
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE user_id = $1 ORDER BY created_at DESC"
        );
        let rows = sqlx::query(&sql)
            .bind(user.0)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(token_from_row).collect()
    }

    pub async fn revoke_api_token(&self, user: UserId, id: ApiTokenId) -> StoreResult<bool> {
        let r = sqlx::query(
            "UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL",
        )
        .bind(Utc::now())
        .bind(id.0)
        .bind(user.0)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(r.rows_affected() == 1)
    }

    /// The enabled owner of a live token, and the token's id; its use is
    /// noted at most once a minute, so that reads do not become writes.
    pub async fn user_by_token_hash(
        &self,
        hash: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(User, ApiTokenId)>> {
        let sql = "SELECT t.id AS token_id, t.last_used_at, u.id, u.email, u.role, u.disabled, \
                   u.balance, u.created_at, u.sessions_valid_after FROM api_tokens t JOIN users u ON u.id = t.user_id \
                   WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND u.disabled = $2";
        let Some(row) = sqlx::query(sql)
            .bind(hash)
            .bind(false)
            .fetch_optional(&self.reader)
            .await?
        else {
            return Ok(None);
        };
        let last_used: Option<DateTime<Utc>> = row.try_get("last_used_at")?;
        let token_id: uuid::Uuid = row.try_get("token_id")?;
        if last_used.is_none_or(|t| now - t > Duration::minutes(1)) {
            sqlx::query("UPDATE api_tokens SET last_used_at = $1 WHERE id = $2")
                .bind(now)
                .bind(token_id)
                .execute(&self.writer)
                .await?;
            self.committed(Purpose::Other, 1);
        }
        Ok(Some((user_from_row(&row)?, ApiTokenId(token_id))))
    }

    // ---- ledger ----

    /// `None` when an entry with this reference exists (do nothing on
    /// conflict); `InsufficientCredits` when the trigger refuses it.
    pub async fn append_ledger(&self, new: &NewLedgerEntry) -> StoreResult<Option<LedgerEntry>> {
        let sql = format!(
            "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (reference) DO NOTHING \
             RETURNING {LEDGER_COLUMNS}"
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
        self.committed(Purpose::Other, 1);
        row.as_ref().map(ledger_from_row).transpose()
    }

    pub async fn ledger_for_user(&self, user: UserId, limit: i64) -> StoreResult<Vec<LedgerEntry>> {
        let sql = format!(
            "SELECT {LEDGER_COLUMNS} FROM ledger WHERE user_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(user.0)
            .bind(limit)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(ledger_from_row).collect()
    }

    pub async fn list_ledger(&self, f: &LedgerFilter) -> StoreResult<Vec<LedgerEntry>> {
        let mut q = sqlx::QueryBuilder::<Db>::new(format!("SELECT {LEDGER_COLUMNS} FROM ledger"));
        ledger_where(&mut q, f);
        // Before a position it reads the other way round (see `list_jobs`).
        let order = match f.seek {
            Some(Seek::Before(_)) => "ASC",
            _ => "DESC",
        };
        q.push(format!(" ORDER BY created_at {order}, id {order} LIMIT "))
            .push_bind(f.limit);
        let rows = q.build().fetch_all(&self.reader).await?;
        let mut entries = rows
            .iter()
            .map(ledger_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        if order == "ASC" {
            entries.reverse();
        }
        Ok(entries)
    }

    /// How many entries the filter matches, ignoring its limit (see
    /// `count_jobs`).
    pub async fn count_ledger(&self, f: &LedgerFilter) -> StoreResult<i64> {
        let mut q = sqlx::QueryBuilder::<Db>::new("SELECT COUNT(*) FROM ledger");
        ledger_where(&mut q, f);
        Ok(q.build().fetch_one(&self.reader).await?.try_get(0)?)
    }

    pub async fn ledger_entry(&self, reference: &str) -> StoreResult<Option<LedgerEntry>> {
        let sql = format!("SELECT {LEDGER_COLUMNS} FROM ledger WHERE reference = $1");
        let row = sqlx::query(&sql)
            .bind(reference)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(ledger_from_row).transpose()
    }

    /// The sum of a user's entries: always equal to the stored balance.
    pub async fn ledger_sum(&self, user: UserId) -> StoreResult<Credits> {
        let sum: Option<i64> =
            sqlx::query_scalar("SELECT CAST(SUM(amount) AS BIGINT) FROM ledger WHERE user_id = $1")
                .bind(user.0)
                .fetch_one(&self.reader)
                .await?;
        Ok(Credits(sum.unwrap_or(0)))
    }
}

/// The one value an account update writes.
enum UserField<'a> {
    Text(&'a str),
}

fn ledger_where<'a>(q: &mut sqlx::QueryBuilder<'a, Db>, f: &'a LedgerFilter) {
    q.push(" WHERE user_id = ").push_bind(f.user_id.0);
    if let Some(seek) = f.seek {
        let op = match seek {
            Seek::After(_) => "<",
            Seek::Before(_) => ">",
        };
        let at = seek.key();
        q.push(" AND ");
        push_past(q, ("created_at", "id"), op, at.created_at, at.id.0);
    }
}
