//! PostgreSQL: claims (`FOR UPDATE SKIP LOCKED`) with leases and fencing
//! tokens, checkpointed steps, attempts, and the daily breaker. Rows a
//! decision depends on are locked (`FOR UPDATE`) inside its transaction.

use super::postgres::PgStore;
use super::records::*;
use super::{StoreError, StoreResult};
use crate::model::{JobId, Usd};
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

const JOB_COLUMNS: &str =
    "id, user_id, kind, status, request::text AS request, request_sha256, idempotency_key, \
                           credits, estimated_usd, error::text AS error, created_at, completed_at, \
                           output_content_type, review::text AS review";

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn usd(d: rust_decimal::Decimal) -> Usd {
    Usd::new(d)
}

async fn event(
    conn: &mut PgConnection,
    job: JobId,
    kind: &str,
    detail: serde_json::Value,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO job_events (job_id, kind, detail, created_at) VALUES ($1, $2, $3::jsonb, $4)",
    )
    .bind(job.0)
    .bind(kind)
    .bind(detail.to_string())
    .bind(at)
    .execute(conn)
    .await?;
    Ok(())
}

/// The run still holds the job: it is running under this token.
async fn holds(conn: &mut PgConnection, job: JobId, token: i64) -> StoreResult<bool> {
    // Locks the job row: a claim or a terminal write waits for this
    // transaction, so the token cannot go stale between check and write.
    let held: Option<i64> = sqlx::query_scalar(
        "SELECT fencing_token FROM jobs WHERE id = $1 AND fencing_token = $2 AND status = 'running' FOR UPDATE",
    )
    .bind(job.0)
    .bind(token)
    .fetch_optional(conn)
    .await?;
    Ok(held.is_some())
}

/// The LISTEN/NOTIFY channel that carries queued job ids between nodes.
pub const JOBS_CHANNEL: &str = "tollgate_jobs";

/// Rule 4: a doorbell carrying only the id, sent when the transaction commits.
pub(super) async fn ring(conn: &mut PgConnection, job: JobId) -> StoreResult<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(JOBS_CHANNEL)
        .bind(job.0.to_string())
        .execute(conn)
        .await?;
    Ok(())
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

impl PgStore {
    pub async fn doorbell(&self) -> StoreResult<PgDoorbell> {
        let mut l = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        l.listen(JOBS_CHANNEL).await?;
        Ok(PgDoorbell(l))
    }
}

fn parked_from_row(r: &PgRow) -> StoreResult<Parked> {
    let evidence: String = r.try_get("evidence")?;
    let stage: String = r.try_get("stage")?;
    let hold: Option<rust_decimal::Decimal> = r.try_get("hold_usd")?;
    Ok(Parked {
        id: r.try_get("id")?,
        job_id: JobId(r.try_get("job_id")?),
        stage: ParkedStage::parse(&stage)
            .ok_or_else(|| StoreError::Corrupt(format!("parked stage {stage}")))?,
        open: r.try_get::<String, _>("state")? == "open",
        evidence: serde_json::from_str(&evidence)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        provider: r.try_get("provider")?,
        model: r.try_get("model")?,
        provider_job_id: r.try_get("provider_job_id")?,
        attempt_id: r.try_get("attempt_id")?,
        hold_usd: hold.map(Usd::new),
        created_at: r.try_get("created_at")?,
    })
}

fn attempt_from_row(r: &PgRow) -> StoreResult<Attempt> {
    let usage: Option<String> = r.try_get("usage")?;
    let cost: Option<rust_decimal::Decimal> = r.try_get("cost_usd")?;
    Ok(Attempt {
        id: r.try_get("id")?,
        job_id: JobId(r.try_get("job_id")?),
        provider: r.try_get("provider")?,
        model: r.try_get("model")?,
        attempt_no: r.try_get("attempt_no")?,
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
        cost_usd: cost.map(usd),
        cost_source: r.try_get("cost_source")?,
        started_at: r.try_get("started_at")?,
    })
}

fn day_from_row(r: &PgRow) -> StoreResult<BudgetDay> {
    Ok(BudgetDay {
        day: r.try_get("day")?,
        cap_usd: usd(r.try_get("cap_usd")?),
        used_usd: usd(r.try_get("used_usd")?),
        reserved_usd: usd(r.try_get("reserved_usd")?),
        halted: r.try_get("halted")?,
    })
}

impl PgStore {
    pub async fn claim_jobs(
        &self,
        worker: &str,
        n: i64,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Claim>> {
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "UPDATE jobs SET status = 'running', lease_owner = $1, lease_expires_at = $2, fencing_token = fencing_token + 1 \
             WHERE id IN (SELECT id FROM jobs WHERE status = 'queued' OR (status = 'running' AND lease_expires_at < $3) \
                          ORDER BY created_at LIMIT $4 FOR UPDATE SKIP LOCKED) \
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
            let job = super::postgres_jobs::job_from_row(row)?;
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
        let r = sqlx::query("UPDATE jobs SET lease_expires_at = $1 WHERE id = $2 AND fencing_token = $3 AND status = 'running'")
            .bind(lease_until)
            .bind(job.0)
            .bind(token)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn heartbeat_owner(
        &self,
        owner: &str,
        lease_until: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let r = sqlx::query(
            "UPDATE jobs SET lease_expires_at = $1 WHERE lease_owner = $2 AND status = 'running'",
        )
        .bind(lease_until)
        .bind(owner)
        .execute(&self.pool)
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
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query(
            "UPDATE attempts SET state = 'submitted', provider_job_id = $1 \
             WHERE id = $2 AND state = 'submitting'",
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
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query(
            "UPDATE jobs SET status = 'parked', lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND fencing_token = $2 AND status = 'running'",
        )
        .bind(job.0)
        .bind(token)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() != 1 {
            return Err(StoreError::StaleClaim);
        }
        let hold: Option<rust_decimal::Decimal> = sqlx::query_scalar(
            "SELECT amount_usd FROM reservations WHERE job_id = $1 AND state = 'held'",
        )
        .bind(job.0)
        .fetch_optional(&mut *tx)
        .await?;
        let id = uuid::Uuid::new_v4();
        sqlx::query(
            "INSERT INTO parked (id, job_id, stage, evidence, provider, model, provider_job_id, attempt_id, hold_usd, created_at) \
             VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10)",
        )
        .bind(id)
        .bind(job.0)
        .bind(p.stage.as_str())
        .bind(p.evidence.to_string())
        .bind(&p.provider)
        .bind(&p.model)
        .bind(&p.provider_job_id)
        .bind(p.attempt_id)
        .bind(hold)
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
            hold_usd: hold.map(Usd::new),
            created_at: at,
        })
    }

    pub async fn list_parked(
        &self,
        stage: Option<ParkedStage>,
        limit: i64,
    ) -> StoreResult<Vec<Parked>> {
        let rows = sqlx::query(
            "SELECT id, job_id, stage, state, evidence::text AS evidence, provider, model, provider_job_id, attempt_id, hold_usd, created_at \
             FROM parked WHERE state = 'open' AND ($1::text IS NULL OR stage = $1) ORDER BY created_at DESC LIMIT $2",
        )
        .bind(stage.map(|s| s.as_str()))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(parked_from_row).collect()
    }

    pub async fn parked_for_job(&self, job: JobId) -> StoreResult<Option<Parked>> {
        let row = sqlx::query(
            "SELECT id, job_id, stage, state, evidence::text AS evidence, provider, model, provider_job_id, attempt_id, hold_usd, created_at \
             FROM parked WHERE job_id = $1 AND state = 'open'",
        )
        .bind(job.0)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(parked_from_row).transpose()
    }

    pub async fn release_claim(
        &self,
        job: JobId,
        token: i64,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query(
            "UPDATE jobs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND fencing_token = $2 AND status = 'running'",
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
            ring(&mut tx, job).await?;
        }
        tx.commit().await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn steps(&self, job: JobId) -> StoreResult<Vec<StepRecord>> {
        let rows = sqlx::query("SELECT step, output::text AS output FROM job_steps WHERE job_id = $1 ORDER BY completed_at")
            .bind(job.0)
            .fetch_all(&self.pool)
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
    /// holds the job (the job row is locked, so a claim or terminal write
    /// cannot slip between check and insert), and a trigger puts it on the
    /// timeline. Recording a step twice keeps the first output.
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
             SELECT id, $1, $2::jsonb, fencing_token, $3 FROM jobs \
             WHERE id = $4 AND fencing_token = $5 AND status = 'running' FOR UPDATE \
             ON CONFLICT (job_id, step) DO NOTHING",
        )
        .bind(step)
        .bind(output.to_string())
        .bind(at)
        .bind(job.0)
        .bind(token)
        .execute(&self.pool)
        .await?;
        if r.rows_affected() == 1 {
            return Ok(());
        }
        // Nothing inserted: already recorded (fine), or the claim is gone.
        let mut conn = self.pool.acquire().await?;
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
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "UPDATE jobs SET status = $1, error = $2::jsonb, completed_at = $3, lease_owner = NULL, lease_expires_at = NULL, \
             output_key = $4, output_content_type = $5, review = $6::jsonb \
             WHERE id = $7 AND fencing_token = $8 AND status = 'running' RETURNING {JOB_COLUMNS}"
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
        super::postgres_jobs::refund_in(&mut tx, job, at).await?;
        tx.commit().await?;
        super::postgres_jobs::job_from_row(&row)
    }

    pub async fn job_output(&self, job: JobId) -> StoreResult<Option<(String, String)>> {
        let row = sqlx::query("SELECT output_key, output_content_type FROM jobs WHERE id = $1 AND output_key IS NOT NULL")
            .bind(job.0)
            .fetch_optional(&self.pool)
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
        let mut conn = self.pool.acquire().await?;
        event(&mut conn, job, kind, detail.clone(), at).await
    }

    pub async fn claim_held(&self, job: JobId, token: i64) -> StoreResult<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE id = $1 AND fencing_token = $2 AND status = 'running'",
        )
        .bind(job.0)
        .bind(token)
        .fetch_one(&self.pool)
        .await?;
        Ok(n == 1)
    }

    pub async fn job_lease(&self, job: JobId) -> StoreResult<Option<(Option<String>, i64)>> {
        let row = sqlx::query("SELECT lease_owner, fencing_token FROM jobs WHERE id = $1")
            .bind(job.0)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Ok((r.try_get("lease_owner")?, r.try_get("fencing_token")?)))
            .transpose()
    }

    // ---- attempts ----

    pub async fn begin_attempt(&self, new: &NewAttempt, token: i64) -> StoreResult<()> {
        let mut tx = self.pool.begin().await?;
        if !holds(&mut tx, new.job_id, token).await? {
            return Err(StoreError::StaleClaim);
        }
        sqlx::query(
            "INSERT INTO attempts (id, job_id, provider, model, attempt_no, state, idempotency_key, started_at) \
             VALUES ($1, $2, $3, $4, $5, 'submitting', $6, $7)",
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
        let mut tx = self.pool.begin().await?;
        let ended = sqlx::query(
            "UPDATE attempts SET state = $1, provider_job_id = COALESCE($2, provider_job_id), error_class = $3, error = $4, \
             duration_ms = $5, finished_at = $6 WHERE id = $7 AND state IN ('submitting', 'submitted')",
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
        sqlx::query(
            "UPDATE attempts SET usage = $1::jsonb, cost_usd = $2, cost_source = $3 WHERE id = $4",
        )
        .bind(o.usage.as_ref().map(|u| u.to_string()))
        .bind(o.cost_usd.map(|c| c.decimal()))
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
                 SELECT job_id, 'attempt_ended', $1::jsonb || jsonb_build_object('attempt', attempt_no), $2 FROM attempts WHERE id = $3",
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
             duration_ms, usage::text AS usage, cost_usd, cost_source, started_at FROM attempts WHERE job_id = $1 ORDER BY started_at, attempt_no",
        )
        .bind(job.0)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(attempt_from_row).collect()
    }

    pub async fn attempts_of(&self, jobs: &[JobId]) -> StoreResult<Vec<Attempt>> {
        let ids: Vec<uuid::Uuid> = jobs.iter().map(|j| j.0).collect();
        let rows = sqlx::query(
            "SELECT id, job_id, provider, model, attempt_no, state, idempotency_key, provider_job_id, error_class, error, \
             duration_ms, usage::text AS usage, cost_usd, cost_source, started_at FROM attempts WHERE job_id = ANY($1) \
             ORDER BY started_at, attempt_no",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(attempt_from_row).collect()
    }

    // ---- the daily breaker ----

    async fn ensure_day(
        conn: &mut PgConnection,
        day: NaiveDate,
        default_cap: Usd,
    ) -> StoreResult<BudgetDay> {
        sqlx::query(
            "INSERT INTO budget_days (day, cap_usd) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING",
        )
        .bind(day)
        .bind(default_cap.decimal())
        .execute(&mut *conn)
        .await?;
        let row = sqlx::query("SELECT day, cap_usd, used_usd, reserved_usd, halted FROM budget_days WHERE day = $1 FOR UPDATE")
            .bind(day)
            .fetch_one(&mut *conn)
            .await?;
        day_from_row(&row)
    }

    pub async fn budget_day(&self, day: NaiveDate, default_cap: Usd) -> StoreResult<BudgetDay> {
        let mut tx = self.pool.begin().await?;
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
        let mut tx = self.pool.begin().await?;
        Self::ensure_day(&mut tx, day, default_cap).await?;
        if let Some(cap) = cap {
            sqlx::query("UPDATE budget_days SET cap_usd = $1 WHERE day = $2")
                .bind(cap.decimal())
                .bind(day)
                .execute(&mut *tx)
                .await?;
        }
        if let Some(h) = halted {
            sqlx::query("UPDATE budget_days SET halted = $1 WHERE day = $2")
                .bind(h)
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
        let mut tx = self.pool.begin().await?;
        if !holds(&mut tx, job, token).await? {
            return Err(StoreError::StaleClaim);
        }
        let existing: Option<String> =
            sqlx::query_scalar("SELECT state FROM reservations WHERE job_id = $1")
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
        sqlx::query("UPDATE budget_days SET reserved_usd = $1 WHERE day = $2")
            .bind(d.reserved_usd.plus(amount).decimal())
            .bind(day)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO reservations (job_id, day, amount_usd, state, created_at) VALUES ($1, $2, $3, 'held', $4)")
            .bind(job.0)
            .bind(day)
            .bind(amount.decimal())
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
        let mut tx = self.pool.begin().await?;
        let Some(row) = sqlx::query("SELECT day, amount_usd FROM reservations WHERE job_id = $1 AND state = 'held' FOR UPDATE")
            .bind(job.0)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(false);
        };
        let day: NaiveDate = row.try_get("day")?;
        let held = usd(row.try_get("amount_usd")?);
        let spent = cost.unwrap_or(held);
        let d = sqlx::query("SELECT day, cap_usd, used_usd, reserved_usd, halted FROM budget_days WHERE day = $1 FOR UPDATE")
            .bind(day)
            .fetch_one(&mut *tx)
            .await?;
        let d = day_from_row(&d)?;
        let reserved =
            Usd::new((d.reserved_usd.decimal() - held.decimal()).max(rust_decimal::Decimal::ZERO));
        sqlx::query("UPDATE budget_days SET used_usd = $1, reserved_usd = $2 WHERE day = $3")
            .bind(d.used_usd.plus(spent).decimal())
            .bind(reserved.decimal())
            .bind(day)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "UPDATE reservations SET state = 'settled', settled_usd = $1 WHERE job_id = $2",
        )
        .bind(spent.decimal())
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
                .fetch_all(&self.pool)
                .await?;
        let rows = sqlx::query_as::<_, (String, String, i64, rust_decimal::Decimal, i64)>(
            "SELECT model, state, COUNT(*), COALESCE(SUM(cost_usd), 0), \
             COUNT(*) FILTER (WHERE cost_usd IS NULL AND state IN ('succeeded', 'failed')) \
             FROM attempts GROUP BY model, state",
        )
        .fetch_all(&self.pool)
        .await?;
        let attempts_by_model = rows
            .into_iter()
            .map(|(m, s, n, u, un)| (m, s, n, usd(u), un))
            .collect();
        let (reservations_held, reserved) = sqlx::query_as::<_, (i64, rust_decimal::Decimal)>(
            "SELECT COUNT(*), COALESCE(SUM(amount_usd), 0) FROM reservations WHERE state = 'held'",
        )
        .fetch_one(&self.pool)
        .await?;
        let reserved_usd = usd(reserved);
        let parked = sqlx::query_as::<_, (String, i64, Option<DateTime<Utc>>)>(
            "SELECT stage, COUNT(*), MIN(created_at) FROM parked WHERE state = 'open' GROUP BY stage",
        )
        .fetch_all(&self.pool)
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
             WHERE r.state = 'held' AND j.status IN ('succeeded', 'failed', 'cancelled') LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(ids.into_iter().map(JobId).collect())
    }
}
