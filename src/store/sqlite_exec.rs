//! SQLite: claims with leases and fencing tokens, checkpointed steps,
//! attempts, and the daily breaker. The one writer connection makes each
//! of these transactions atomic; decimals are summed in Rust, exactly.

use super::records::*;
use super::sqlite::SqliteStore;
use super::{StoreError, StoreResult};
use crate::model::{JobId, Usd};
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};

const JOB_COLUMNS: &str =
    "id, user_id, kind, status, request, request_sha256, idempotency_key, credits, \
                           estimated_usd, error, created_at, completed_at, output_content_type, review";

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn usd(s: &str) -> StoreResult<Usd> {
    Usd::parse(s).map_err(corrupt)
}

async fn event(
    conn: &mut SqliteConnection,
    job: JobId,
    kind: &str,
    detail: serde_json::Value,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query("INSERT INTO job_events (job_id, kind, detail, created_at) VALUES (?, ?, ?, ?)")
        .bind(job.0)
        .bind(kind)
        .bind(detail.to_string())
        .bind(at)
        .execute(conn)
        .await?;
    Ok(())
}

/// The run still holds the job: it is running under this token.
async fn holds(conn: &mut SqliteConnection, job: JobId, token: i64) -> StoreResult<bool> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM jobs WHERE id = ? AND fencing_token = ? AND status = 'running'",
    )
    .bind(job.0)
    .bind(token)
    .fetch_one(conn)
    .await?;
    Ok(n == 1)
}

fn attempt_from_row(r: &SqliteRow) -> StoreResult<Attempt> {
    let usage: Option<String> = r.try_get("usage")?;
    let cost: Option<String> = r.try_get("cost_usd")?;
    Ok(Attempt {
        id: r.try_get("id")?,
        job_id: JobId(r.try_get("job_id")?),
        provider: r.try_get("provider")?,
        model: r.try_get("model")?,
        attempt_no: r.try_get::<i64, _>("attempt_no")? as i32,
        state: r.try_get("state")?,
        idempotency_key: r.try_get("idempotency_key")?,
        provider_job_id: r.try_get("provider_job_id")?,
        error_class: r.try_get("error_class")?,
        error: r.try_get("error")?,
        duration_ms: r.try_get("duration_ms")?,
        usage: usage
            .map(|u| serde_json::from_str(&u))
            .transpose()
            .map_err(corrupt)?,
        cost_usd: cost.as_deref().map(usd).transpose()?,
        cost_source: r.try_get("cost_source")?,
        started_at: r.try_get("started_at")?,
    })
}

fn parked_from_row(r: &SqliteRow) -> StoreResult<Parked> {
    let evidence: String = r.try_get("evidence")?;
    let stage: String = r.try_get("stage")?;
    let hold: Option<String> = r.try_get("hold_usd")?;
    Ok(Parked {
        id: r.try_get("id")?,
        job_id: JobId(r.try_get("job_id")?),
        stage: ParkedStage::parse(&stage)
            .ok_or_else(|| corrupt(format!("parked stage {stage}")))?,
        open: r.try_get::<String, _>("state")? == "open",
        evidence: serde_json::from_str(&evidence).map_err(corrupt)?,
        provider: r.try_get("provider")?,
        model: r.try_get("model")?,
        provider_job_id: r.try_get("provider_job_id")?,
        attempt_id: r.try_get("attempt_id")?,
        hold_usd: hold.as_deref().map(usd).transpose()?,
        created_at: r.try_get("created_at")?,
    })
}

fn day_from_row(r: &SqliteRow) -> StoreResult<BudgetDay> {
    Ok(BudgetDay {
        day: r.try_get("day")?,
        cap_usd: usd(&r.try_get::<String, _>("cap_usd")?)?,
        used_usd: usd(&r.try_get::<String, _>("used_usd")?)?,
        reserved_usd: usd(&r.try_get::<String, _>("reserved_usd")?)?,
        halted: r.try_get::<i64, _>("halted")? != 0,
    })
}

impl SqliteStore {
    pub async fn claim_jobs(
        &self,
        worker: &str,
        n: i64,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Claim>> {
        let mut tx = self.writer.begin().await?;
        let sql = format!(
            "UPDATE jobs SET status = 'running', lease_owner = ?, lease_expires_at = ?, fencing_token = fencing_token + 1 \
             WHERE id IN (SELECT id FROM jobs WHERE status = 'queued' OR (status = 'running' AND lease_expires_at < ?) \
                          ORDER BY created_at LIMIT ?) \
             RETURNING {JOB_COLUMNS}, fencing_token"
        );
        let rows = sqlx::query(&sql)
            .bind(worker)
            .bind(lease_until)
            .bind(now)
            .bind(n)
            .fetch_all(&mut *tx)
            .await?;
        let mut claims = Vec::with_capacity(rows.len());
        for row in &rows {
            let job = super::sqlite_jobs::job_from_row(row)?;
            let token: i64 = row.try_get("fencing_token")?;
            event(
                &mut tx,
                job.id,
                "claimed",
                serde_json::json!({"worker": worker, "token": token}),
                now,
            )
            .await?;
            claims.push(Claim { job, token });
        }
        tx.commit().await?;
        Ok(claims)
    }

    pub async fn heartbeat(
        &self,
        job: JobId,
        token: i64,
        lease_until: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let r = sqlx::query("UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND fencing_token = ? AND status = 'running'")
            .bind(lease_until)
            .bind(job.0)
            .bind(token)
            .execute(&self.writer)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn heartbeat_owner(
        &self,
        owner: &str,
        lease_until: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let r = sqlx::query(
            "UPDATE jobs SET lease_expires_at = ? WHERE lease_owner = ? AND status = 'running'",
        )
        .bind(lease_until)
        .bind(owner)
        .execute(&self.writer)
        .await?;
        Ok(r.rows_affected())
    }

    pub async fn attempt_submitted(
        &self,
        id: uuid::Uuid,
        job: JobId,
        provider_job_id: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        let mut tx = self.writer.begin().await?;
        let r = sqlx::query(
            "UPDATE attempts SET state = 'submitted', provider_job_id = ? \
             WHERE id = ? AND state = 'submitting'",
        )
        .bind(provider_job_id)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() == 1 {
            let detail = serde_json::json!({"provider_job_id": provider_job_id});
            event(&mut tx, job, "submitted", detail, at).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub async fn park_claimed(
        &self,
        job: JobId,
        token: i64,
        p: &NewParked,
        at: DateTime<Utc>,
    ) -> StoreResult<Parked> {
        let mut tx = self.writer.begin().await?;
        let r = sqlx::query(
            "UPDATE jobs SET status = 'parked', lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = ? AND fencing_token = ? AND status = 'running'",
        )
        .bind(job.0)
        .bind(token)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() != 1 {
            return Err(StoreError::StaleClaim);
        }
        let hold: Option<String> = sqlx::query_scalar(
            "SELECT amount_usd FROM reservations WHERE job_id = ? AND state = 'held'",
        )
        .bind(job.0)
        .fetch_optional(&mut *tx)
        .await?;
        let id = uuid::Uuid::new_v4();
        sqlx::query(
            "INSERT INTO parked (id, job_id, stage, evidence, provider, model, provider_job_id, attempt_id, hold_usd, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(id)
        .bind(job.0)
        .bind(p.stage.as_str())
        .bind(p.evidence.to_string())
        .bind(&p.provider)
        .bind(&p.model)
        .bind(&p.provider_job_id)
        .bind(p.attempt_id)
        .bind(&hold)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        // The timeline says why in words; the full evidence is on the record.
        let mut detail =
            serde_json::json!({"stage": p.stage.as_str(), "reason": p.evidence["reason"]});
        if let Some(id) = &p.provider_job_id {
            detail["provider_job_id"] = serde_json::json!(id);
        }
        event(&mut tx, job, "parked", detail, at).await?;
        tx.commit().await?;
        Ok(Parked {
            id,
            job_id: job,
            stage: p.stage,
            open: true,
            evidence: p.evidence.clone(),
            provider: p.provider.clone(),
            model: p.model.clone(),
            provider_job_id: p.provider_job_id.clone(),
            attempt_id: p.attempt_id,
            hold_usd: hold.as_deref().map(usd).transpose()?,
            created_at: at,
        })
    }

    pub async fn list_parked(
        &self,
        stage: Option<ParkedStage>,
        limit: i64,
    ) -> StoreResult<Vec<Parked>> {
        let rows = sqlx::query(
            "SELECT id, job_id, stage, state, evidence, provider, model, provider_job_id, attempt_id, hold_usd, created_at \
             FROM parked WHERE state = 'open' AND (? IS NULL OR stage = ?) ORDER BY created_at DESC LIMIT ?",
        )
        .bind(stage.map(|s| s.as_str()))
        .bind(stage.map(|s| s.as_str()))
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(parked_from_row).collect()
    }

    pub async fn parked_for_job(&self, job: JobId) -> StoreResult<Option<Parked>> {
        let row = sqlx::query(
            "SELECT id, job_id, stage, state, evidence, provider, model, provider_job_id, attempt_id, hold_usd, created_at \
             FROM parked WHERE job_id = ? AND state = 'open'",
        )
        .bind(job.0)
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(parked_from_row).transpose()
    }

    pub async fn release_claim(
        &self,
        job: JobId,
        token: i64,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        let r = sqlx::query(
            "UPDATE jobs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = ? AND fencing_token = ? AND status = 'running'",
        )
        .bind(job.0)
        .bind(token)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() == 1 {
            event(
                &mut tx,
                job,
                "released",
                serde_json::json!({"token": token}),
                at,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn steps(&self, job: JobId) -> StoreResult<Vec<StepRecord>> {
        let rows = sqlx::query(
            "SELECT step, output FROM job_steps WHERE job_id = ? ORDER BY completed_at",
        )
        .bind(job.0)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let out: String = r.try_get("output")?;
                Ok(StepRecord {
                    step: r.try_get("step")?,
                    output: serde_json::from_str(&out).map_err(corrupt)?,
                })
            })
            .collect()
    }

    /// One conditional statement: the step is recorded only while the run
    /// holds the job (the single writer makes check and insert atomic), and
    /// a trigger puts it on the timeline. Recording a step twice keeps the
    /// first output.
    pub async fn complete_step(
        &self,
        job: JobId,
        token: i64,
        step: &str,
        output: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        let r = sqlx::query(
            "INSERT INTO job_steps (job_id, step, output, fencing_token, completed_at) \
             SELECT id, ?, ?, fencing_token, ? FROM jobs WHERE id = ? AND fencing_token = ? AND status = 'running' \
             ON CONFLICT (job_id, step) DO NOTHING",
        )
        .bind(step)
        .bind(output.to_string())
        .bind(at)
        .bind(job.0)
        .bind(token)
        .execute(&self.writer)
        .await?;
        if r.rows_affected() == 1 {
            return Ok(());
        }
        // Nothing inserted: already recorded (fine), or the claim is gone.
        let mut conn = self.writer.acquire().await?;
        if holds(&mut conn, job, token).await? {
            Ok(())
        } else {
            Err(StoreError::StaleClaim)
        }
    }

    pub async fn finish_claimed(
        &self,
        job: JobId,
        token: i64,
        outcome: &Outcome,
        output: Option<(&str, &str)>,
        review: Option<&serde_json::Value>,
        at: DateTime<Utc>,
    ) -> StoreResult<Job> {
        let (status, error) = match outcome {
            Outcome::Succeeded => ("succeeded", None),
            Outcome::Failed(e) => ("failed", Some(e.to_string())),
        };
        let mut tx = self.writer.begin().await?;
        let sql = format!(
            "UPDATE jobs SET status = ?, error = ?, completed_at = ?, lease_owner = NULL, lease_expires_at = NULL, \
             output_key = ?, output_content_type = ?, review = ? \
             WHERE id = ? AND fencing_token = ? AND status = 'running' RETURNING {JOB_COLUMNS}"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(status)
            .bind(error)
            .bind(at)
            .bind(output.map(|o| o.0))
            .bind(output.map(|o| o.1))
            .bind(review.map(|r| r.to_string()))
            .bind(job.0)
            .bind(token)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Err(StoreError::StaleClaim);
        };
        event(&mut tx, job, status, serde_json::json!({}), at).await?;
        super::sqlite_jobs::refund_in(&mut tx, job, at).await?;
        tx.commit().await?;
        super::sqlite_jobs::job_from_row(&row)
    }

    pub async fn job_output(&self, job: JobId) -> StoreResult<Option<(String, String)>> {
        let row = sqlx::query("SELECT output_key, output_content_type FROM jobs WHERE id = ? AND output_key IS NOT NULL")
            .bind(job.0)
            .fetch_optional(&self.reader)
            .await?;
        row.map(|r| Ok((r.try_get("output_key")?, r.try_get("output_content_type")?)))
            .transpose()
    }

    pub async fn note_event(
        &self,
        job: JobId,
        kind: &str,
        detail: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        let mut conn = self.writer.acquire().await?;
        event(&mut conn, job, kind, detail.clone(), at).await
    }

    pub async fn claim_held(&self, job: JobId, token: i64) -> StoreResult<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE id = ? AND fencing_token = ? AND status = 'running'",
        )
        .bind(job.0)
        .bind(token)
        .fetch_one(&self.reader)
        .await?;
        Ok(n == 1)
    }

    pub async fn job_lease(&self, job: JobId) -> StoreResult<Option<(Option<String>, i64)>> {
        let row = sqlx::query("SELECT lease_owner, fencing_token FROM jobs WHERE id = ?")
            .bind(job.0)
            .fetch_optional(&self.reader)
            .await?;
        row.map(|r| Ok((r.try_get("lease_owner")?, r.try_get("fencing_token")?)))
            .transpose()
    }

    // ---- attempts ----

    pub async fn begin_attempt(&self, new: &NewAttempt, token: i64) -> StoreResult<()> {
        let mut tx = self.writer.begin().await?;
        if !holds(&mut tx, new.job_id, token).await? {
            return Err(StoreError::StaleClaim);
        }
        sqlx::query(
            "INSERT INTO attempts (id, job_id, provider, model, attempt_no, state, idempotency_key, started_at) \
             VALUES (?, ?, ?, ?, ?, 'submitting', ?, ?)",
        )
        .bind(new.id)
        .bind(new.job_id.0)
        .bind(&new.provider)
        .bind(&new.model)
        .bind(new.attempt_no)
        .bind(&new.idempotency_key)
        .bind(new.started_at)
        .execute(&mut *tx)
        .await?;
        let detail = serde_json::json!({"provider": new.provider, "model": new.model, "attempt": new.attempt_no});
        event(&mut tx, new.job_id, "attempt", detail, new.started_at).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records an attempt's outcome. Outcome and timing are written once
    /// (while it is still open); a repeated report only refreshes telemetry.
    pub async fn end_attempt(&self, id: uuid::Uuid, o: &AttemptOutcome) -> StoreResult<()> {
        let mut tx = self.writer.begin().await?;
        let ended = sqlx::query(
            "UPDATE attempts SET state = ?, provider_job_id = COALESCE(?, provider_job_id), error_class = ?, error = ?, \
             duration_ms = ?, finished_at = ? WHERE id = ? AND state IN ('submitting', 'submitted')",
        )
        .bind(o.state)
        .bind(&o.provider_job_id)
        .bind(&o.error_class)
        .bind(&o.error)
        .bind(o.duration_ms)
        .bind(o.finished_at)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE attempts SET usage = ?, cost_usd = ?, cost_source = ? WHERE id = ?")
            .bind(o.usage.as_ref().map(|u| u.to_string()))
            .bind(o.cost_usd.map(|c| c.to_string()))
            .bind(o.cost_source)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if ended.rows_affected() == 1 {
            // The outcome goes on the job's timeline once, with what it cost.
            let detail = serde_json::json!({
                "state": o.state, "error_class": o.error_class,
                "usd": o.cost_usd, "priced": o.cost_usd.is_some(),
            });
            sqlx::query(
                "INSERT INTO job_events (job_id, kind, detail, created_at) \
                 SELECT job_id, 'attempt_ended', json_set(?, '$.attempt', attempt_no), ? FROM attempts WHERE id = ?",
            )
            .bind(detail.to_string())
            .bind(o.finished_at)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub async fn attempts(&self, job: JobId) -> StoreResult<Vec<Attempt>> {
        let rows = sqlx::query(
            "SELECT id, job_id, provider, model, attempt_no, state, idempotency_key, provider_job_id, error_class, error, \
             duration_ms, usage, cost_usd, cost_source, started_at FROM attempts WHERE job_id = ? ORDER BY started_at, attempt_no",
        )
        .bind(job.0)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(attempt_from_row).collect()
    }

    pub async fn attempts_of(&self, jobs: &[JobId]) -> StoreResult<Vec<Attempt>> {
        // A page is at most a few hundred jobs: well under SQLite's limit
        // on bound parameters.
        let marks = vec!["?"; jobs.len()].join(", ");
        let sql = format!(
            "SELECT id, job_id, provider, model, attempt_no, state, idempotency_key, provider_job_id, error_class, error, \
             duration_ms, usage, cost_usd, cost_source, started_at FROM attempts WHERE job_id IN ({marks}) \
             ORDER BY started_at, attempt_no"
        );
        let mut q = sqlx::query(&sql);
        for j in jobs {
            q = q.bind(j.0);
        }
        let rows = q.fetch_all(&self.reader).await?;
        rows.iter().map(attempt_from_row).collect()
    }

    // ---- the daily breaker ----

    async fn ensure_day(
        conn: &mut SqliteConnection,
        day: NaiveDate,
        default_cap: Usd,
    ) -> StoreResult<BudgetDay> {
        sqlx::query(
            "INSERT INTO budget_days (day, cap_usd) VALUES (?, ?) ON CONFLICT (day) DO NOTHING",
        )
        .bind(day)
        .bind(default_cap.to_string())
        .execute(&mut *conn)
        .await?;
        let row = sqlx::query(
            "SELECT day, cap_usd, used_usd, reserved_usd, halted FROM budget_days WHERE day = ?",
        )
        .bind(day)
        .fetch_one(&mut *conn)
        .await?;
        day_from_row(&row)
    }

    pub async fn budget_day(&self, day: NaiveDate, default_cap: Usd) -> StoreResult<BudgetDay> {
        let mut tx = self.writer.begin().await?;
        let d = Self::ensure_day(&mut tx, day, default_cap).await?;
        tx.commit().await?;
        Ok(d)
    }

    pub async fn set_budget(
        &self,
        day: NaiveDate,
        default_cap: Usd,
        cap: Option<Usd>,
        halted: Option<bool>,
    ) -> StoreResult<BudgetDay> {
        let mut tx = self.writer.begin().await?;
        Self::ensure_day(&mut tx, day, default_cap).await?;
        if let Some(cap) = cap {
            sqlx::query("UPDATE budget_days SET cap_usd = ? WHERE day = ?")
                .bind(cap.to_string())
                .bind(day)
                .execute(&mut *tx)
                .await?;
        }
        if let Some(h) = halted {
            sqlx::query("UPDATE budget_days SET halted = ? WHERE day = ?")
                .bind(h as i64)
                .bind(day)
                .execute(&mut *tx)
                .await?;
        }
        let d = Self::ensure_day(&mut tx, day, default_cap).await?;
        tx.commit().await?;
        Ok(d)
    }

    /// Rule 11: holds `amount` against the day only while it is not halted
    /// and used + reserved + amount stays within the cap. A job holds one
    /// reservation; asking again returns whether it is held.
    pub async fn reserve(
        &self,
        job: JobId,
        token: i64,
        day: NaiveDate,
        default_cap: Usd,
        amount: Usd,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        if !holds(&mut tx, job, token).await? {
            return Err(StoreError::StaleClaim);
        }
        let existing: Option<String> =
            sqlx::query_scalar("SELECT state FROM reservations WHERE job_id = ?")
                .bind(job.0)
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(state) = existing {
            return Ok(state == "held" || state == "settled");
        }
        let d = Self::ensure_day(&mut tx, day, default_cap).await?;
        let after = d.used_usd.plus(d.reserved_usd).plus(amount);
        if d.halted || after > d.cap_usd {
            return Ok(false);
        }
        sqlx::query("UPDATE budget_days SET reserved_usd = ? WHERE day = ?")
            .bind(d.reserved_usd.plus(amount).to_string())
            .bind(day)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO reservations (job_id, day, amount_usd, state, created_at) VALUES (?, ?, ?, 'held', ?)")
            .bind(job.0)
            .bind(day)
            .bind(amount.to_string())
            .bind(at)
            .execute(&mut *tx)
            .await?;
        event(
            &mut tx,
            job,
            "reserved",
            serde_json::json!({"usd": amount, "day": day}),
            at,
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Settles a held reservation with the real cost; an unknown cost stays
    /// booked at the estimate. Settling twice changes nothing.
    pub async fn settle(
        &self,
        job: JobId,
        cost: Option<Usd>,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        let Some(row) = sqlx::query(
            "SELECT day, amount_usd FROM reservations WHERE job_id = ? AND state = 'held'",
        )
        .bind(job.0)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(false);
        };
        let day: NaiveDate = row.try_get("day")?;
        let held = usd(&row.try_get::<String, _>("amount_usd")?)?;
        let spent = cost.unwrap_or(held);
        let d = sqlx::query(
            "SELECT day, cap_usd, used_usd, reserved_usd, halted FROM budget_days WHERE day = ?",
        )
        .bind(day)
        .fetch_one(&mut *tx)
        .await?;
        let d = day_from_row(&d)?;
        let reserved =
            Usd::new((d.reserved_usd.decimal() - held.decimal()).max(rust_decimal::Decimal::ZERO));
        sqlx::query("UPDATE budget_days SET used_usd = ?, reserved_usd = ? WHERE day = ?")
            .bind(d.used_usd.plus(spent).to_string())
            .bind(reserved.to_string())
            .bind(day)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE reservations SET state = 'settled', settled_usd = ? WHERE job_id = ?")
            .bind(spent.to_string())
            .bind(job.0)
            .execute(&mut *tx)
            .await?;
        event(
            &mut tx,
            job,
            "settled",
            serde_json::json!({"usd": spent, "priced": cost.is_some()}),
            at,
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Gauges for /metrics (floats are fine here: they are for charts).
    pub async fn metrics_snapshot(&self) -> StoreResult<MetricsSnapshot> {
        let jobs_by_status =
            sqlx::query_as::<_, (String, i64)>("SELECT status, COUNT(*) FROM jobs GROUP BY status")
                .fetch_all(&self.reader)
                .await?;
        // TEXT decimals are summed in Rust, exactly (SQLite would use floats).
        let rows = sqlx::query_as::<_, (String, String, Option<String>)>(
            "SELECT model, state, cost_usd FROM attempts",
        )
        .fetch_all(&self.reader)
        .await?;
        let mut by: std::collections::BTreeMap<(String, String), (i64, Usd, i64)> =
            std::collections::BTreeMap::new();
        for (model, state, cost) in rows {
            let finished = state == "succeeded" || state == "failed";
            let e = by.entry((model, state)).or_insert((0, Usd::ZERO, 0));
            e.0 += 1;
            match cost {
                Some(c) => e.1 = e.1.plus(usd(&c)?),
                None if finished => e.2 += 1,
                None => {}
            }
        }
        let attempts_by_model = by
            .into_iter()
            .map(|((m, s), (n, u, un))| (m, s, n, u, un))
            .collect();
        let held = sqlx::query_scalar::<_, String>(
            "SELECT amount_usd FROM reservations WHERE state = 'held'",
        )
        .fetch_all(&self.reader)
        .await?;
        let reservations_held = held.len() as i64;
        let mut reserved_usd = Usd::ZERO;
        for h in held {
            reserved_usd = reserved_usd.plus(usd(&h)?);
        }
        let parked = sqlx::query_as::<_, (String, i64, Option<DateTime<Utc>>)>(
            "SELECT stage, COUNT(*), MIN(created_at) FROM parked WHERE state = 'open' GROUP BY stage",
        )
        .fetch_all(&self.reader)
        .await?;
        Ok(MetricsSnapshot {
            jobs_by_status,
            attempts_by_model,
            reservations_held,
            reserved_usd,
            parked,
        })
    }

    pub async fn held_on_finished_jobs(&self, limit: i64) -> StoreResult<Vec<JobId>> {
        let ids: Vec<uuid::Uuid> = sqlx::query_scalar(
            "SELECT r.job_id FROM reservations r JOIN jobs j ON j.id = r.job_id \
             WHERE r.state = 'held' AND j.status IN ('succeeded', 'failed', 'cancelled') LIMIT ?",
        )
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        Ok(ids.into_iter().map(JobId).collect())
    }
}
