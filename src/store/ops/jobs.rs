//! Uploads, submission (rules 1 and 2: the job and its charge in one
//! transaction), cancel and the one refund (rules 3 and 9), and the reads
//! behind the job pages.

use super::*;
use chrono::{DateTime, Utc};

/// Assets one look-up names at most (a claim batch's sources and masks).
const ASSETS_PER_LOOKUP: usize = 500;

impl Backend {
    /// The same person uploading the same bytes gets the same asset back.
    pub async fn insert_asset(&self, new: &NewAsset) -> StoreResult<Asset> {
        let mut tx = self.writer.begin().await?;
        let sql = format!(
            "INSERT INTO assets ({ASSET_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (user_id, sha256) DO NOTHING RETURNING {ASSET_COLUMNS}"
        );
        let inserted = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.user_id.0)
            .bind(&new.sha256)
            .bind(&new.content_type)
            .bind(i32::try_from(new.width).map_err(corrupt)?)
            .bind(i32::try_from(new.height).map_err(corrupt)?)
            .bind(i64::try_from(new.bytes).map_err(corrupt)?)
            .bind(&new.object_key)
            .bind(new.created_at)
            .fetch_optional(&mut *tx)
            .await?;
        let row = match inserted {
            Some(r) => r,
            None => {
                // Uploaded again after retention purged it: the caller has
                // just stored the bytes again, so the asset is back.
                sqlx::query(
                    "UPDATE assets SET purged_at = NULL \
                     WHERE user_id = $1 AND sha256 = $2 AND purged_at IS NOT NULL",
                )
                .bind(new.user_id.0)
                .bind(&new.sha256)
                .execute(&mut *tx)
                .await?;
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
        self.committed(Purpose::Other, 2);
        asset_from_row(&row)
    }

    /// What a person's uploads take in all.
    pub async fn asset_bytes_of(&self, user: UserId) -> StoreResult<u64> {
        let sum: Option<i64> =
            sqlx::query_scalar("SELECT CAST(SUM(bytes) AS BIGINT) FROM assets WHERE user_id = $1 AND purged_at IS NULL")
                .bind(user.0)
                .fetch_one(&self.reader)
                .await?;
        Ok(sum.unwrap_or(0).max(0) as u64)
    }

    pub async fn asset(&self, id: AssetId) -> StoreResult<Option<Asset>> {
        // A purged upload is gone: its bytes were removed by retention.
        let sql = format!("SELECT {ASSET_COLUMNS} FROM assets WHERE id = $1 AND purged_at IS NULL");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(asset_from_row).transpose()
    }

    /// Where each of these assets is stored, in one statement: a worker
    /// asks once per claimed batch, not once per run. Unknown ids are left
    /// out.
    pub async fn asset_object_keys(&self, ids: &[AssetId]) -> StoreResult<Vec<(AssetId, String)>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(ASSETS_PER_LOOKUP) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT id, object_key FROM assets WHERE id IN ({})",
                marks.join(", ")
            );
            let mut q = sqlx::query(&sql).persistent(false);
            for id in chunk {
                q = q.bind(id.0);
            }
            for row in q.fetch_all(&self.reader).await? {
                out.push((AssetId(row.try_get("id")?), row.try_get("object_key")?));
            }
        }
        Ok(out)
    }

    /// Rules 1 and 2: the job is inserted (nothing when the user's key
    /// exists, then the existing job is read back) and charged in the same
    /// transaction; the ledger's trigger aborts both when the balance
    /// cannot pay. Its `created` event is written by a trigger.
    pub async fn submit_job(&self, new: &NewJob) -> StoreResult<Submitted> {
        let mut tx = self.writer.begin().await?;
        let sql = format!(
            "INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, idempotency_key, credits, \
             estimated_usd, created_at, token_id) VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING \
             RETURNING {JOB_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.0)
            .bind(new.user_id.0)
            .bind(new.request.kind().as_str())
            .bind(Json(&new.request))
            .bind(&new.request_sha256)
            .bind(&new.idempotency_key)
            .bind(new.credits.0)
            .bind(new.estimated_usd)
            .bind(new.created_at)
            .bind(new.token_id.map(|t| t.0))
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
        let statements = 1 + super::within::charge_in(&mut tx, new, None).await?;
        tx.commit().await?;
        self.committed(Purpose::Submit, statements);
        Ok(Submitted::Created(job))
    }

    pub async fn job(&self, id: JobId) -> StoreResult<Option<Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Jobs newest first, filtered, from a cursor either way. Each filter
    /// adds its condition, so every one can use an index.
    pub async fn list_jobs(&self, f: &JobFilter) -> StoreResult<Vec<Job>> {
        let mut q = sqlx::QueryBuilder::<Db>::new(format!("SELECT {JOB_COLUMNS} FROM jobs"));
        jobs_where(&mut q, f);
        // Before a position the list is read the other way round, nearest
        // first, so that the limit keeps the rows next to it.
        let order = match f.seek {
            Some(Seek::Before(_)) => "ASC",
            _ => "DESC",
        };
        q.push(format!(" ORDER BY created_at {order}, id {order} LIMIT "))
            .push_bind(f.limit);
        let rows = q.build().fetch_all(&self.reader).await?;
        let mut jobs = rows
            .iter()
            .map(job_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        if order == "ASC" {
            jobs.reverse();
        }
        Ok(jobs)
    }

    /// How many jobs the filter matches, ignoring its limit: all of them, or
    /// (with `Before`) those newer than a position, which is where a page
    /// starts in the whole list.
    pub async fn count_jobs(&self, f: &JobFilter) -> StoreResult<i64> {
        let mut q = sqlx::QueryBuilder::<Db>::new("SELECT COUNT(*) FROM jobs");
        jobs_where(&mut q, f);
        Ok(q.build().fetch_one(&self.reader).await?.try_get(0)?)
    }

    pub async fn count_jobs_by_status(
        &self,
        user: Option<UserId>,
    ) -> StoreResult<Vec<(JobStatus, u64)>> {
        let mut q = sqlx::QueryBuilder::<Db>::new("SELECT status, COUNT(*) FROM jobs WHERE TRUE");
        if let Some(u) = user {
            q.push(" AND user_id = ").push_bind(u.0);
        }
        q.push(" GROUP BY status");
        let rows = q.build().fetch_all(&self.reader).await?;
        let mut counts = Vec::with_capacity(rows.len());
        for row in rows {
            let status: String = row.try_get(0)?;
            let n: i64 = row.try_get(1)?;
            let status = JobStatus::parse(&status)
                .ok_or_else(|| StoreError::Corrupt(format!("job status {status:?}")))?;
            counts.push((status, n.max(0) as u64));
        }
        counts.sort_by_key(|(s, _)| JobStatus::ALL.iter().position(|a| a == s));
        Ok(counts)
    }

    pub async fn jobs_under_key(&self, key: &str) -> StoreResult<Vec<Job>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = $1 ORDER BY created_at DESC, id DESC LIMIT 100"
        );
        let rows = sqlx::query(&sql).bind(key).fetch_all(&self.reader).await?;
        rows.iter().map(job_from_row).collect()
    }

    /// Rule 9: cancels only a job that is not terminal; in the same
    /// transaction it is refunded (rule 3) and its holds are settled (the
    /// `jobs_changed` trigger), but for parked work: a parked record stays
    /// open with its holds for a reviewer, and a provider request found
    /// unanswered is parked first (`park_in_flight_in`). `None` when it
    /// was already terminal.
    pub async fn cancel_job(&self, id: JobId, at: DateTime<Utc>) -> StoreResult<Option<Job>> {
        let mut tx = self.writer.begin().await?;
        // Queued behind a run's unit on the same row (PostgreSQL): a unit
        // that writes an attempt down before its call commits first, so the
        // look for unanswered calls below, a statement of its own, sees it.
        // Without the lock the cancel could miss it, end the job, and leave
        // the call `submitting` with nobody to look (the chaos run found it).
        sqlx::query(&format!(
            "SELECT id FROM jobs WHERE id = $1 {}",
            for_update!()
        ))
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await?;
        // First, so the cancel below sees the record and keeps the hold.
        let parked = super::within::park_in_flight_in(&mut tx, id, at).await?;
        let sql = format!(
            "UPDATE jobs SET status = 'cancelled', completed_at = $1, lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $2 AND status IN ('queued', 'running', 'parked') RETURNING {JOB_COLUMNS}"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(at)
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        super::within::refund_in(&mut tx, id, at).await?;
        let job = job_from_row(&row)?;
        let outbox = super::within::write_outbox(&mut tx, self.envelope, &job, at).await?;
        tx.commit().await?;
        self.committed(Purpose::Other, 4 + parked + outbox);
        Ok(Some(job))
    }

    /// The person's job made under this idempotency key, if any.
    pub async fn job_by_idempotency_key(
        &self,
        user: UserId,
        key: &str,
    ) -> StoreResult<Option<Job>> {
        let sql =
            format!("SELECT {JOB_COLUMNS} FROM jobs WHERE user_id = $1 AND idempotency_key = $2");
        let row = sqlx::query(&sql)
            .bind(user.0)
            .bind(key)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Rule 3: refunds a failed or cancelled job, once, however often called.
    pub async fn refund_job(&self, id: JobId, at: DateTime<Utc>) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        let refunded = super::within::refund_in(&mut tx, id, at).await?;
        tx.commit().await?;
        self.committed(Purpose::Other, 2);
        Ok(refunded)
    }

    pub async fn job_events(&self, id: JobId) -> StoreResult<Vec<JobEvent>> {
        let rows = sqlx::query(
            "SELECT id, job_id, kind, detail, created_at FROM job_events WHERE job_id = $1 ORDER BY id",
        )
        .bind(id.0)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let detail: Json<serde_json::Value> = r.try_get("detail")?;
                Ok(JobEvent {
                    id: r.try_get("id")?,
                    job_id: JobId(r.try_get("job_id")?),
                    happening: Happening::from_stored(r.try_get("kind")?, detail.0),
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Puts an observation on a job's timeline; it changes nothing else.
    pub async fn note_event(
        &self,
        job: JobId,
        happening: &Happening,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        let mut conn = self.writer.acquire().await?;
        super::within::event_in(&mut conn, job, happening, at).await?;
        self.committed(Purpose::Other, 1);
        Ok(())
    }

    /// Frees idempotency keys of jobs created before `created_before`.
    pub async fn expire_idempotency_keys(&self, created_before: DateTime<Utc>) -> StoreResult<u64> {
        let r = sqlx::query(
            "UPDATE jobs SET idempotency_key = NULL WHERE idempotency_key IS NOT NULL AND created_at < $1",
        )
        .bind(created_before)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(r.rows_affected())
    }

    /// The stored output's key and content type, once the job succeeded.
    pub async fn job_output(&self, job: JobId) -> StoreResult<Option<(String, String)>> {
        let row = sqlx::query(
            "SELECT output_key, output_content_type FROM jobs \
             WHERE id = $1 AND output_key IS NOT NULL AND media_purged_at IS NULL",
        )
        .bind(job.0)
        .fetch_optional(&self.reader)
        .await?;
        row.map(|r| Ok((r.try_get("output_key")?, r.try_get("output_content_type")?)))
            .transpose()
    }
}

/// The filter's conditions, the seek's among them: newest first, so after a
/// position is older and before it is newer.
fn jobs_where<'a>(q: &mut sqlx::QueryBuilder<'a, Db>, f: &'a JobFilter) {
    q.push(" WHERE TRUE");
    if let Some(u) = f.user_id {
        q.push(" AND user_id = ").push_bind(u.0);
    }
    if let Some(s) = f.status {
        q.push(" AND status = ").push_bind(s.as_str());
    }
    if f.roots_only {
        q.push(" AND lineage_root IS NULL");
    }
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
