//! Repairs and lineages (rule 14): a repair submitted with its charge in
//! one transaction and one of its lineage's two repairs taken by a
//! conditional update; a failed repair's slot given back with its refund;
//! the lineage's delivered version moved (or its repairs stopped) in the
//! repair's terminal write.

use super::within::{ensure_lineage_in, lineage_from_row, LINEAGE_COLUMNS};
use super::*;
use crate::model::{repair_is_free, Happening, LineageState, RepairRefusal, Review, REPAIRS_MAX};
use chrono::{DateTime, Utc};

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
        // The one place the limit is enforced (see `take_repair_in`).
        let delivered = take_repair_in(&mut tx, new.root, j.created_at).await?;
        // Judged under the lineage's lock, so two racing repairs of a
        // flagged version cannot both be the free one.
        let free = free_repair_in(&mut tx, delivered).await?;
        let sql = format!(
            "INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, idempotency_key, credits, \
             estimated_usd, created_at, lineage_root, repair_of, instruction, token_id) \
             VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
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
            .bind(j.token_id.map(|t| t.0))
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
        let mut statements = 4;
        if free {
            statements += waive_in(&mut tx, j).await?;
        }
        statements += super::within::charge_in(&mut tx, j, Some("repair")).await?;
        tx.commit().await?;
        self.committed(Purpose::Submit, statements);
        Ok(Submitted::Created(job))
    }

    /// Whether the next repair of `version` would be on the studio.
    pub async fn repair_is_free(&self, version: JobId) -> StoreResult<bool> {
        let mut conn = self.reader.acquire().await?;
        free_repair_in(&mut conn, version.0).await
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

    /// Makes `version` the one the person has in `root`'s lineage (issue
    /// 33, 6): only a finished version of that lineage, and only while no
    /// repair of it is under way, whose comparison would be with the
    /// version it was made on. False when either does not hold.
    pub async fn choose_version(
        &self,
        root: JobId,
        version: JobId,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        ensure_lineage_in(&mut tx, root, at).await?;
        // Queued behind a repair being ordered on the same row (PostgreSQL),
        // so the check below, a statement of its own, sees that repair.
        sqlx::query(&format!(
            "SELECT root FROM lineages WHERE root = $1 {}",
            for_update!()
        ))
        .bind(root.0)
        .fetch_one(&mut *tx)
        .await?;
        let chosen = sqlx::query(
            "UPDATE lineages SET delivered = $2, updated_at = $3 WHERE root = $1 \
             AND EXISTS (SELECT 1 FROM jobs v WHERE v.id = $2 AND v.status = 'succeeded' \
                 AND (v.id = $1 OR v.lineage_root = $1)) \
             AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.lineage_root = $1 \
                 AND r.status IN ('queued', 'running', 'parked'))",
        )
        .bind(root.0)
        .bind(version.0)
        .bind(at)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        tx.commit().await?;
        self.committed(Purpose::Other, 3);
        Ok(chosen)
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

/// Whether a repair of `version` is on the studio (`model::repair_is_free`):
/// its review, and whether a free repair of it is live (one whose charge
/// was waived, not failed or cancelled).
async fn free_repair_in(conn: &mut Conn, version: uuid::Uuid) -> StoreResult<bool> {
    let review: Option<Json<Review>> = sqlx::query_scalar("SELECT review FROM jobs WHERE id = $1")
        .bind(version)
        .fetch_one(&mut *conn)
        .await?;
    let live_free: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs j WHERE j.repair_of = $1 \
         AND j.status NOT IN ('failed', 'cancelled') \
         AND EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = j.id AND e.kind = 'waived')",
    )
    .bind(version)
    .fetch_one(&mut *conn)
    .await?;
    Ok(repair_is_free(review.as_ref().map(|r| &r.0), live_free > 0))
}

/// A free repair: charged like its parent (the job's `credits` are the
/// quote), and the charge given back at once under the job's one refund
/// reference. Written before the debit, so a person with no credits left
/// can still have it; and since the refund is written once (rule 3), the
/// repair failing later refunds nothing more. Returns its statements.
async fn waive_in(conn: &mut Conn, j: &NewJob) -> StoreResult<u64> {
    sqlx::query(
        "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
         VALUES ($1, $2, $3, 'refund', $4, NULL, $5, $6)",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(j.user_id.0)
    .bind(j.credits.0)
    .bind(format!("refund:job:{}", j.id))
    .bind("repair on us: the review found issues with the version before")
    .bind(j.created_at)
    .execute(&mut *conn)
    .await?;
    let waived = Happening::Waived {
        credits: j.credits.0,
    };
    super::within::event_in(conn, j.id, &waived, j.created_at).await?;
    Ok(2)
}

/// Takes one of the lineage's repairs (creating its row on the first):
/// racing requests queue on the lineage's row, and each sees the count the
/// previous one left. Returns the version delivered now, which the repair
/// works on; refused when the lineage is full or stopped.
async fn take_repair_in(
    conn: &mut Conn,
    root: JobId,
    at: DateTime<Utc>,
) -> StoreResult<uuid::Uuid> {
    ensure_lineage_in(conn, root, at).await?;
    // The one place the limit is enforced: racing requests queue on the
    // lineage's row, and each sees the count the previous one left.
    let taken: Option<uuid::Uuid> = sqlx::query_scalar(
        "UPDATE lineages SET repairs_used = repairs_used + 1, updated_at = $2 \
         WHERE root = $1 AND repairs_used < $3 AND NOT stopped RETURNING delivered",
    )
    .bind(root.0)
    .bind(at)
    .bind(REPAIRS_MAX as i32)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(delivered) = taken else {
        let stopped: bool = sqlx::query_scalar("SELECT stopped FROM lineages WHERE root = $1")
            .bind(root.0)
            .fetch_one(&mut *conn)
            .await?;
        return Err(StoreError::RepairRefused(if stopped {
            RepairRefusal::Stopped
        } else {
            RepairRefusal::LimitReached
        }));
    };
    Ok(delivered)
}
