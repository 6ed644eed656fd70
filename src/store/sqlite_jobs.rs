//! SQLite: assets, jobs (charge and job in one transaction), cancel, the one
//! refund, terminal outcomes and the timeline.

use super::records::*;
use super::sqlite::SqliteStore;
use super::{StoreError, StoreResult};
use crate::model::{AssetId, Credits, JobId, JobKind, JobStatus, Usd, UserId};
use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};

const ASSET_COLUMNS: &str =
    "id, user_id, sha256, content_type, width, height, bytes, object_key, created_at";
const JOB_COLUMNS: &str =
    "id, user_id, kind, status, request, request_sha256, idempotency_key, credits, \
                           estimated_usd, error, created_at, completed_at, output_content_type, review";
const ACTIVE: &str = "('queued', 'running', 'parked')";

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn asset_from_row(row: &SqliteRow) -> StoreResult<Asset> {
    Ok(Asset {
        id: AssetId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        sha256: row.try_get("sha256")?,
        content_type: row.try_get("content_type")?,
        width: row.try_get::<i64, _>("width")? as u32,
        height: row.try_get::<i64, _>("height")? as u32,
        bytes: row.try_get::<i64, _>("bytes")? as u64,
        object_key: row.try_get("object_key")?,
        created_at: row.try_get("created_at")?,
    })
}

pub(super) fn job_from_row(row: &SqliteRow) -> StoreResult<Job> {
    let kind: String = row.try_get("kind")?;
    let status: String = row.try_get("status")?;
    let request: String = row.try_get("request")?;
    let usd: String = row.try_get("estimated_usd")?;
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
        estimated_usd: Usd::parse(&usd).map_err(corrupt)?,
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

/// Rule 3, the one refund: derived reference, do-nothing-on-conflict, and
/// only while the job is failed or cancelled. True when this call refunded.
/// A job that ends while parked no longer waits for a decision: its open
/// parked record closes in the same transaction.
async fn close_parked(conn: &mut SqliteConnection, job: JobId) -> StoreResult<()> {
    sqlx::query("UPDATE parked SET state = 'closed' WHERE job_id = ? AND state = 'open'")
        .bind(job.0)
        .execute(conn)
        .await?;
    Ok(())
}

pub(super) async fn refund_in(
    conn: &mut SqliteConnection,
    job: JobId,
    at: DateTime<Utc>,
) -> StoreResult<bool> {
    let r = sqlx::query(
        "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
         SELECT ?, user_id, credits, 'refund', 'refund:job:' || ?, NULL, 'job ' || status, ? \
         FROM jobs WHERE id = ? AND status IN ('failed', 'cancelled') \
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

impl SqliteStore {
    pub async fn insert_asset(&self, new: &NewAsset) -> StoreResult<Asset> {
        let mut tx = self.writer.begin().await?;
        let sql = format!(
            "INSERT INTO assets ({ASSET_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (user_id, sha256) DO NOTHING RETURNING {ASSET_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.user_id.0)
            .bind(&new.sha256)
            .bind(&new.content_type)
            .bind(new.width as i64)
            .bind(new.height as i64)
            .bind(new.bytes as i64)
            .bind(&new.object_key)
            .bind(new.created_at)
            .fetch_optional(&mut *tx)
            .await?;
        let row = match row {
            Some(r) => r,
            None => {
                let sql =
                    format!("SELECT {ASSET_COLUMNS} FROM assets WHERE user_id = ? AND sha256 = ?");
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
        let sql = format!("SELECT {ASSET_COLUMNS} FROM assets WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(asset_from_row).transpose()
    }

    pub async fn submit_job(&self, new: &NewJob) -> StoreResult<Submitted> {
        let mut tx = self.writer.begin().await?;
        let sql = format!(
            "INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, idempotency_key, credits, estimated_usd, created_at) \
             VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?) \
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
            .bind(new.estimated_usd.to_string())
            .bind(new.created_at)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            let sql =
                format!("SELECT {JOB_COLUMNS} FROM jobs WHERE user_id = ? AND idempotency_key = ?");
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
             VALUES (?, ?, ?, 'debit', ?, NULL, NULL, ?)",
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
        tx.commit().await?;
        Ok(Submitted::Created(job))
    }

    pub async fn job(&self, id: JobId) -> StoreResult<Option<Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    pub async fn list_jobs(&self, f: &JobFilter) -> StoreResult<Vec<Job>> {
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE 1 = 1");
        if f.user_id.is_some() {
            sql.push_str(" AND user_id = ?");
        }
        if f.status.is_some() {
            sql.push_str(" AND status = ?");
        }
        if f.after.is_some() {
            sql.push_str(" AND (created_at < ? OR (created_at = ? AND id < ?))");
        }
        sql.push_str(" ORDER BY created_at DESC, id DESC LIMIT ?");
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
        let rows = q.bind(f.limit).fetch_all(&self.reader).await?;
        rows.iter().map(job_from_row).collect()
    }

    pub async fn cancel_job(&self, id: JobId, at: DateTime<Utc>) -> StoreResult<Option<Job>> {
        let mut tx = self.writer.begin().await?;
        let sql = format!(
            "UPDATE jobs SET status = 'cancelled', completed_at = ? WHERE id = ? AND status IN {ACTIVE} RETURNING {JOB_COLUMNS}"
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
        let mut tx = self.writer.begin().await?;
        let sql = format!(
            "UPDATE jobs SET status = ?, error = ?, completed_at = ? WHERE id = ? AND status IN {ACTIVE} RETURNING {JOB_COLUMNS}"
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
        let mut tx = self.writer.begin().await?;
        let refunded = refund_in(&mut tx, id, at).await?;
        tx.commit().await?;
        Ok(refunded)
    }

    pub async fn job_events(&self, id: JobId) -> StoreResult<Vec<JobEvent>> {
        let rows = sqlx::query("SELECT id, job_id, kind, detail, created_at FROM job_events WHERE job_id = ? ORDER BY id")
            .bind(id.0)
            .fetch_all(&self.reader)
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
        let r = sqlx::query("UPDATE jobs SET idempotency_key = NULL WHERE idempotency_key IS NOT NULL AND created_at < ?")
            .bind(created_before)
            .execute(&self.writer)
            .await?;
        Ok(r.rows_affected())
    }
}
