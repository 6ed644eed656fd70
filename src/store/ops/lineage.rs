//! Repairs and lineages (rule 14): a repair submitted with its charge in
//! one transaction and one of its lineage's two repairs taken by a
//! conditional update; a failed repair's slot given back with its refund;
//! the lineage's delivered version moved (or its repairs stopped) in the
//! repair's terminal write.

use super::*;
use crate::model::{LineageEffect, LineageState, RepairRefusal, REPAIRS_MAX};
use chrono::{DateTime, Utc};

const LINEAGE_COLUMNS: &str = "root, delivered, repairs_used, stopped";

fn lineage_from_row(r: &Row) -> StoreResult<LineageState> {
    let used: i32 = r.try_get("repairs_used")?;
    Ok(LineageState {
        root: JobId(r.try_get("root")?),
        delivered: JobId(r.try_get("delivered")?),
        repairs_used: u32::try_from(used).map_err(corrupt)?,
        stopped: r.try_get("stopped")?,
    })
}

impl Backend {
    pub async fn submit_repair(&self, new: &NewRepair) -> StoreResult<Submitted> {
        let j = &new.job;
        let mut tx = self.writer.begin().await?;
        let existing =
            format!("SELECT {JOB_COLUMNS} FROM jobs WHERE user_id = $1 AND idempotency_key = $2");
        // A replay returns its job even once the lineage is full.
        if let Some(row) = sqlx::query(&existing)
            .bind(j.user_id.0)
            .bind(&j.idempotency_key)
            .fetch_optional(&mut *tx)
            .await?
        {
            return Ok(Submitted::Existing(job_from_row(&row)?));
        }
        sqlx::query(
            "INSERT INTO lineages (root, delivered, repairs_used, stopped, updated_at) \
             VALUES ($1, $1, 0, FALSE, $2) ON CONFLICT (root) DO NOTHING",
        )
        .bind(new.root.0)
        .bind(j.created_at)
        .execute(&mut *tx)
        .await?;
        // The one place the limit is enforced: racing requests queue on the
        // lineage's row, and each sees the count the previous one left.
        let taken: Option<uuid::Uuid> = sqlx::query_scalar(
            "UPDATE lineages SET repairs_used = repairs_used + 1, updated_at = $2 \
             WHERE root = $1 AND repairs_used < $3 AND NOT stopped RETURNING delivered",
        )
        .bind(new.root.0)
        .bind(j.created_at)
        .bind(REPAIRS_MAX as i32)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(delivered) = taken else {
            let stopped: bool = sqlx::query_scalar("SELECT stopped FROM lineages WHERE root = $1")
                .bind(new.root.0)
                .fetch_one(&mut *tx)
                .await?;
            return Err(StoreError::RepairRefused(if stopped {
                RepairRefusal::Stopped
            } else {
                RepairRefusal::LimitReached
            }));
        };
        let sql = format!(
            "INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, idempotency_key, credits, \
             estimated_usd, created_at, lineage_root, repair_of, instruction) \
             VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING \
             RETURNING {JOB_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(j.id.0)
            .bind(j.user_id.0)
            .bind(j.request.kind().as_str())
            .bind(Json(&j.request))
            .bind(&j.request_sha256)
            .bind(&j.idempotency_key)
            .bind(j.credits.0)
            .bind(j.estimated_usd)
            .bind(j.created_at)
            .bind(new.root.0)
            .bind(delivered)
            .bind(&new.instruction)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            // The same key won a race: its job is the answer, and the
            // repair taken here is given back with the rollback.
            let row = sqlx::query(&existing)
                .bind(j.user_id.0)
                .bind(&j.idempotency_key)
                .fetch_one(&mut *tx)
                .await?;
            return Ok(Submitted::Existing(job_from_row(&row)?));
        };
        let job = job_from_row(&row)?;
        let statements = 4 + super::jobs::charge_in(&mut tx, j, Some("repair")).await?;
        tx.commit().await?;
        self.committed(Purpose::Submit, statements);
        Ok(Submitted::Created(job))
    }

    pub async fn lineage(&self, root: JobId) -> StoreResult<Option<LineageState>> {
        let row = sqlx::query(&format!(
            "SELECT {LINEAGE_COLUMNS} FROM lineages WHERE root = $1"
        ))
        .bind(root.0)
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(lineage_from_row).transpose()
    }

    /// The lineages of many roots in one read (a page of jobs).
    pub async fn lineages_of(&self, roots: &[JobId]) -> StoreResult<Vec<LineageState>> {
        if roots.is_empty() {
            return Ok(Vec::new());
        }
        let marks: Vec<String> = (1..=roots.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT {LINEAGE_COLUMNS} FROM lineages WHERE root IN ({})",
            marks.join(", ")
        );
        let mut q = sqlx::query(&sql).persistent(false);
        for r in roots {
            q = q.bind(r.0);
        }
        let rows = q.fetch_all(&self.reader).await?;
        rows.iter().map(lineage_from_row).collect()
    }

    pub async fn lineage_versions(&self, root: JobId) -> StoreResult<Vec<Job>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 OR lineage_root = $1 \
             ORDER BY lineage_root IS NOT NULL, created_at, id"
        );
        let rows = sqlx::query(&sql)
            .bind(root.0)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(job_from_row).collect()
    }
}

/// An image edit's lineage state inside a transaction (a fresh one before
/// its first repair); `None` for a video.
pub(super) async fn lineage_in(conn: &mut Conn, job: &Job) -> StoreResult<Option<LineageState>> {
    if job.kind != JobKind::ImageEdit {
        return Ok(None);
    }
    let row = sqlx::query(&format!(
        "SELECT {LINEAGE_COLUMNS} FROM lineages WHERE root = $1"
    ))
    .bind(job.root().0)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(Some(match row {
        Some(r) => lineage_from_row(&r)?,
        None => LineageState::fresh(job.root()),
    }))
}

/// With a refund (rule 3): a failed or cancelled repair gives its slot
/// back, once, since its refund is written once.
pub(super) async fn free_repair_in(
    conn: &mut Conn,
    job: JobId,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "UPDATE lineages SET repairs_used = repairs_used - 1, updated_at = $2 \
         WHERE repairs_used > 0 AND root = \
               (SELECT lineage_root FROM jobs WHERE id = $1 AND repair_of IS NOT NULL)",
    )
    .bind(job.0)
    .bind(at)
    .execute(conn)
    .await?;
    Ok(())
}

/// In a repair's terminal write: what its comparison decided for the
/// lineage (`LineageEffect`). Returns the statements it took.
pub(super) async fn end_repair_in(
    conn: &mut Conn,
    job: &Job,
    effect: LineageEffect,
    at: DateTime<Utc>,
) -> StoreResult<u64> {
    let q = match effect {
        LineageEffect::Deliver => {
            sqlx::query("UPDATE lineages SET delivered = $2, updated_at = $3 WHERE root = $1")
                .bind(job.root().0)
                .bind(job.id.0)
                .bind(at)
        }
        LineageEffect::KeepAndStop => {
            sqlx::query("UPDATE lineages SET stopped = TRUE, updated_at = $2 WHERE root = $1")
                .bind(job.root().0)
                .bind(at)
        }
        LineageEffect::Keep => return Ok(0),
    };
    q.execute(conn).await?;
    Ok(1)
}
