//! Retention's statements: what is old enough to purge, and the marks that
//! make a purge idempotent. Each look-up is bounded by its `limit`; none
//! touches what an unfinished job, an open parked record or a lineage that
//! is still young needs.

use super::*;
use chrono::{DateTime, Utc};

/// A job that is finished, past `cutoff`, whose record (if any) is closed
/// and whose whole lineage finished before `cutoff` too: nobody can still
/// repair it, recover it or be waiting for it.
const AGED_OUT: &str = "j.status IN ('succeeded', 'failed', 'cancelled') AND j.completed_at < $1 \
     AND NOT EXISTS (SELECT 1 FROM parked p WHERE p.job_id = j.id AND p.state <> 'closed') \
     AND NOT EXISTS (SELECT 1 FROM jobs k WHERE k.id <> j.id \
         AND (k.lineage_root = COALESCE(j.lineage_root, j.id) OR k.id = j.lineage_root) \
         AND (k.status NOT IN ('succeeded', 'failed', 'cancelled') OR k.completed_at >= $1 \
              OR EXISTS (SELECT 1 FROM parked p2 WHERE p2.job_id = k.id AND p2.state <> 'closed')))";

impl Backend {
    /// Outputs of aged-out jobs still stored: `(job, output key)`, oldest
    /// first.
    pub async fn expired_outputs(
        &self,
        cutoff: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<Vec<(JobId, String)>> {
        let sql = format!(
            "SELECT j.id, j.output_key FROM jobs j \
             WHERE j.output_key IS NOT NULL AND j.media_purged_at IS NULL AND {AGED_OUT} \
             ORDER BY j.completed_at, j.id LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(cutoff)
            .bind(limit)
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|r| Ok((JobId(r.try_get("id")?), r.try_get("output_key")?)))
            .collect()
    }

    /// Marks a job's output purged (after its object was deleted). False
    /// when it already was.
    pub async fn mark_output_purged(&self, job: JobId, at: DateTime<Utc>) -> StoreResult<bool> {
        let r = sqlx::query(
            "UPDATE jobs SET media_purged_at = $2 WHERE id = $1 AND media_purged_at IS NULL",
        )
        .bind(job.0)
        .bind(at)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(r.rows_affected() == 1)
    }

    /// Uploads created before `cutoff` and not purged, oldest first.
    pub async fn expired_assets(
        &self,
        cutoff: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<Vec<Asset>> {
        let sql = format!(
            "SELECT {ASSET_COLUMNS} FROM assets WHERE purged_at IS NULL AND created_at < $1 \
             ORDER BY created_at, id LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(cutoff)
            .bind(limit)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(asset_from_row).collect()
    }

    /// The requests of `user`'s jobs created since `since` that are not
    /// aged out: an upload one of them names must be kept.
    pub async fn kept_requests(
        &self,
        user: UserId,
        since: DateTime<Utc>,
        cutoff: DateTime<Utc>,
    ) -> StoreResult<Vec<JobRequest>> {
        let sql = format!(
            "SELECT j.request FROM jobs j WHERE j.user_id = $2 AND j.created_at >= $3 AND NOT ({AGED_OUT})"
        );
        let rows = sqlx::query(&sql)
            .bind(cutoff)
            .bind(user.0)
            .bind(since)
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|r| {
                let request: Json<JobRequest> = r.try_get("request")?;
                Ok(request.0)
            })
            .collect()
    }

    /// Marks an upload purged. `Some(key)` when its object is no longer
    /// named by any upload that is kept (the same bytes uploaded by someone
    /// else share it), so the caller deletes it; `None` when it must stay
    /// or the upload was already purged.
    pub async fn mark_asset_purged(
        &self,
        asset: AssetId,
        at: DateTime<Utc>,
    ) -> StoreResult<Option<String>> {
        let mut tx = self.writer.begin().await?;
        let key: Option<String> = sqlx::query_scalar(
            "UPDATE assets SET purged_at = $2 WHERE id = $1 AND purged_at IS NULL RETURNING object_key",
        )
        .bind(asset.0)
        .bind(at)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(key) = key else {
            return Ok(None);
        };
        let shared: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM assets WHERE object_key = $1 AND purged_at IS NULL LIMIT 1",
        )
        .bind(&key)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        self.committed(Purpose::Other, 2);
        Ok(shared.is_none().then_some(key))
    }

    /// Deletes the timelines of up to `limit` aged-out jobs (their events
    /// past `cutoff`); returns the events deleted.
    pub async fn purge_events(&self, cutoff: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
        let sql = format!(
            "DELETE FROM job_events WHERE job_id IN (SELECT j.id FROM jobs j WHERE {AGED_OUT} \
             AND EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = j.id) LIMIT $2)"
        );
        let r = sqlx::query(&sql)
            .bind(cutoff)
            .bind(limit)
            .execute(&self.writer)
            .await?;
        self.committed(Purpose::Other, 1);
        Ok(r.rows_affected())
    }

    /// Clears the evidence of up to `limit` records closed before `cutoff`
    /// (their decisions, which hold the accounting, stay).
    pub async fn purge_evidence(
        &self,
        cutoff: DateTime<Utc>,
        at: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<u64> {
        let r = sqlx::query(
            "UPDATE parked SET evidence = $3, evidence_purged_at = $2 WHERE id IN \
             (SELECT id FROM parked WHERE state = 'closed' AND evidence_purged_at IS NULL \
              AND updated_at < $1 ORDER BY updated_at LIMIT $4)",
        )
        .bind(cutoff)
        .bind(at)
        .bind(Json(
            serde_json::json!({"reason": "The evidence was removed by the retention policy."}),
        ))
        .bind(limit)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(r.rows_affected())
    }

    /// Deletes up to `limit` webhook deliveries that were delivered or died
    /// before `cutoff` (pending ones are never touched).
    pub async fn purge_deliveries(&self, cutoff: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
        let r = sqlx::query(
            "DELETE FROM webhook_deliveries WHERE id IN \
             (SELECT id FROM webhook_deliveries WHERE state IN ('delivered', 'dead') \
              AND created_at < $1 ORDER BY created_at LIMIT $2)",
        )
        .bind(cutoff)
        .bind(limit)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(r.rows_affected())
    }
}
