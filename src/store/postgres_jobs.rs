//! PostgreSQL: assets, jobs (charge and job in one transaction), cancel, the one
//! refund, terminal outcomes and the timeline.

use super::postgres::PgStore;
use super::records::*;
use super::{StoreError, StoreResult};
use crate::model::{AssetId, Credits, JobId, JobKind, JobStatus, Usd, UserId};
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

const ASSET_COLUMNS: &str =
    "id, user_id, sha256, content_type, width, height, bytes, object_key, created_at";
const JOB_COLUMNS: &str =
    "id, user_id, kind, status, request::text AS request, request_sha256, idempotency_key, \
                           credits, estimated_usd, error::text AS error, created_at, completed_at, \
                           output_content_type, review::text AS review";
const ACTIVE: &str = "('queued', 'running', 'parked')";

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn asset_from_row(row: &PgRow) -> StoreResult<Asset> {
    Ok(Asset {
        id: AssetId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        sha256: row.try_get("sha256")?,
        content_type: row.try_get("content_type")?,
        width: row.try_get::<i32, _>("width")? as u32,
        height: row.try_get::<i32, _>("height")? as u32,
        bytes: row.try_get::<i64, _>("bytes")? as u64,
        object_key: row.try_get("object_key")?,
        created_at: row.try_get("created_at")?,
    })
}

pub(super) fn job_from_row(row: &PgRow) -> StoreResult<Job> {
    let kind: String = row.try_get("kind")?;
    let status: String = row.try_get("status")?;
    let request: String = row.try_get("request")?;
    let usd: rust_decimal::Decimal = row.try_get("estimated_usd")?;
    let error: Option<String> = row.try_get("error")?;
    Ok(Job {
        id: JobId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        kind: JobKind::parse(&kind).ok_or_else(|| corrupt(&kind))?,
        status: JobStatus::parse(&status).ok_or_else(|| corrupt(&status))?,
        request: serde_json::from_str(&request).map_err(corrupt)?,
        request_sha256: row.try_get("request_sha256")?,
        idempotency_key: row.try_get("idempotency_key")?,
        credits: Credits(row.try_get("credits")?),
        estimated_usd: Usd::new(usd),
        error: error
            .map(|e| serde_json::from_str(&e))
            .transpose()
            .map_err(corrupt)?,
        created_at: row.try_get("created_at")?,
        completed_at: row.try_get("completed_at")?,
        output_content_type: row.try_get("output_content_type")?,
        review: row
            .try_get::<Option<String>, _>("review")?
            .map(|r| serde_json::from_str(&r))
            .transpose()
            .map_err(corrupt)?,
    })
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

/// Rule 3, the one refund: derived reference, do-nothing-on-conflict, and
/// only while the job is failed or cancelled. True when this call refunded.
/// A job that ends while parked no longer waits for a decision: its open
/// parked record closes in the same transaction.
async fn close_parked(conn: &mut PgConnection, job: JobId) -> StoreResult<()> {
    sqlx::query("UPDATE parked SET state = 'closed' WHERE job_id = $1 AND state = 'open'")
        .bind(job.0)
        .execute(conn)
        .await?;
    Ok(())
}

pub(super) async fn refund_in(
    conn: &mut PgConnection,
    job: JobId,
    at: DateTime<Utc>,
) -> StoreResult<bool> {
    let r = sqlx::query(
        "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
         SELECT $1, user_id, credits, 'refund', 'refund:job:' || $2, NULL, 'job ' || status, $3 \
         FROM jobs WHERE id = $4 AND status IN ('failed', 'cancelled') \
         ON CONFLICT (reference) DO NOTHING",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(job.to_string())
    .bind(at)
    .bind(job.0)
    .execute(&mut *conn)
    .await?;
    let refunded = r.rows_affected() == 1;
    if refunded {
        event(conn, job, "refunded", serde_json::json!({}), at).await?;
    }
    Ok(refunded)
}

impl PgStore {
    pub async fn insert_asset(&self, new: &NewAsset) -> StoreResult<Asset> {
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "INSERT INTO assets ({ASSET_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (user_id, sha256) DO NOTHING RETURNING {ASSET_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.user_id.0)
            .bind(&new.sha256)
            .bind(&new.content_type)
            .bind(new.width as i32)
            .bind(new.height as i32)
            .bind(new.bytes as i64)
            .bind(&new.object_key)
            .bind(new.created_at)
            .fetch_optional(&mut *tx)
            .await?;
        let row = match row {
            Some(r) => r,
            None => {
                let sql = format!(
                    "SELECT {ASSET_COLUMNS} FROM assets WHERE user_id = $1 AND sha256 = $2"
                );
                sqlx::query(&sql)
                    .bind(new.user_id.0)
                    .bind(&new.sha256)
                    .fetch_one(&mut *tx)
                    .await?
            }
        };
        tx.commit().await?;
        asset_from_row(&row)
    }

    pub async fn asset(&self, id: AssetId) -> StoreResult<Option<Asset>> {
        let sql = format!("SELECT {ASSET_COLUMNS} FROM assets WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(asset_from_row).transpose()
    }

    pub async fn submit_job(&self, new: &NewJob) -> StoreResult<Submitted> {
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, idempotency_key, credits, estimated_usd, created_at) \
             VALUES ($1, $2, $3, 'queued', $4::jsonb, $5, $6, $7, $8, $9) \
             ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING {JOB_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.user_id.0)
            .bind(new.request.kind().as_str())
            .bind(new.request.canonical_json())
            .bind(&new.request_sha256)
            .bind(&new.idempotency_key)
            .bind(new.credits.0)
            .bind(new.estimated_usd.decimal())
            .bind(new.created_at)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            let sql = format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE user_id = $1 AND idempotency_key = $2"
            );
            let row = sqlx::query(&sql)
                .bind(new.user_id.0)
                .bind(&new.idempotency_key)
                .fetch_one(&mut *tx)
                .await?;
            return Ok(Submitted::Existing(job_from_row(&row)?));
        };
        let job = job_from_row(&row)?;
        // The charge: the trigger aborts this insert, and with it the job,
        // when the balance cannot cover it (rule 2).
        sqlx::query(
            "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
             VALUES ($1, $2, $3, 'debit', $4, NULL, NULL, $5)",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(new.user_id.0)
        .bind(-new.credits.0)
        .bind(format!("debit:job:{}", new.id))
        .bind(new.created_at)
        .execute(&mut *tx)
        .await?;
        let detail =
            serde_json::json!({ "credits": new.credits, "estimated_usd": new.estimated_usd });
        event(&mut tx, new.id, "created", detail, new.created_at).await?;
        // A doorbell for workers on every node; delivered only on commit.
        super::postgres_exec::ring(&mut tx, new.id).await?;
        tx.commit().await?;
        Ok(Submitted::Created(job))
    }

    pub async fn job(&self, id: JobId) -> StoreResult<Option<Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    pub async fn list_jobs(&self, f: &JobFilter) -> StoreResult<Vec<Job>> {
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE 1 = 1");
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        if f.user_id.is_some() {
            sql.push_str(&format!(" AND user_id = {}", next()));
        }
        if f.status.is_some() {
            sql.push_str(&format!(" AND status = {}", next()));
        }
        if f.after.is_some() {
            let (a, b, c) = (next(), next(), next());
            sql.push_str(&format!(
                " AND (created_at < {a} OR (created_at = {b} AND id < {c}))"
            ));
        }
        sql.push_str(&format!(
            " ORDER BY created_at DESC, id DESC LIMIT {}",
            next()
        ));
        let mut q = sqlx::query(&sql);
        if let Some(u) = f.user_id {
            q = q.bind(u.0);
        }
        if let Some(s) = f.status {
            q = q.bind(s.as_str());
        }
        if let Some(c) = f.after {
            q = q.bind(c.created_at).bind(c.created_at).bind(c.id.0);
        }
        let rows = q.bind(f.limit).fetch_all(&self.pool).await?;
        rows.iter().map(job_from_row).collect()
    }

    pub async fn cancel_job(&self, id: JobId, at: DateTime<Utc>) -> StoreResult<Option<Job>> {
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "UPDATE jobs SET status = 'cancelled', completed_at = $1 WHERE id = $2 AND status IN {ACTIVE} RETURNING {JOB_COLUMNS}"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(at)
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        event(&mut tx, id, "cancelled", serde_json::json!({}), at).await?;
        close_parked(&mut tx, id).await?;
        refund_in(&mut tx, id, at).await?;
        tx.commit().await?;
        job_from_row(&row).map(Some)
    }

    pub async fn finish_job(
        &self,
        id: JobId,
        outcome: &Outcome,
        at: DateTime<Utc>,
    ) -> StoreResult<Option<Job>> {
        let (status, error) = match outcome {
            Outcome::Succeeded => ("succeeded", None),
            Outcome::Failed(e) => ("failed", Some(e.to_string())),
        };
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "UPDATE jobs SET status = $1, error = $2::jsonb, completed_at = $3 WHERE id = $4 AND status IN {ACTIVE} RETURNING {JOB_COLUMNS}"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(status)
            .bind(error)
            .bind(at)
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        event(&mut tx, id, status, serde_json::json!({}), at).await?;
        close_parked(&mut tx, id).await?;
        refund_in(&mut tx, id, at).await?;
        tx.commit().await?;
        job_from_row(&row).map(Some)
    }

    pub async fn refund_job(&self, id: JobId, at: DateTime<Utc>) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let refunded = refund_in(&mut tx, id, at).await?;
        tx.commit().await?;
        Ok(refunded)
    }

    pub async fn job_events(&self, id: JobId) -> StoreResult<Vec<JobEvent>> {
        let rows = sqlx::query("SELECT id, job_id, kind, detail::text AS detail, created_at FROM job_events WHERE job_id = $1 ORDER BY id")
            .bind(id.0)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let detail: String = r.try_get("detail")?;
                Ok(JobEvent {
                    id: r.try_get("id")?,
                    job_id: JobId(r.try_get("job_id")?),
                    kind: r.try_get("kind")?,
                    detail: serde_json::from_str(&detail).map_err(corrupt)?,
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect()
    }

    pub async fn expire_idempotency_keys(&self, created_before: DateTime<Utc>) -> StoreResult<u64> {
        let r = sqlx::query("UPDATE jobs SET idempotency_key = NULL WHERE idempotency_key IS NOT NULL AND created_at < $1")
            .bind(created_before)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }
}
