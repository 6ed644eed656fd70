//! Claims (rule 5): one conditional update takes a batch of queued jobs, or
//! jobs whose lease ran out, bumps each one's fencing token and sets its
//! lease, with the database's clock. Heartbeats extend every lease a node
//! holds in one write.

use super::*;

impl Backend {
    /// Claims up to `n` jobs for `worker`, each leased for `lease_s`
    /// seconds of the database's clock, oldest first. Every claim's
    /// `claimed` event is written by a trigger. The queued and the expired
    /// are looked up apart, each in its own index's order (`jobs_queued`,
    /// `jobs_claimable`), so a claim reads about `n` rows, not every job in
    /// flight ahead of the queue.
    pub async fn claim_jobs(&self, worker: &str, n: i64, lease_s: f64) -> StoreResult<Vec<Claim>> {
        let sql = format!(
            concat!(
                "UPDATE jobs SET status = 'running', lease_owner = $1, lease_expires_at = ",
                now_plus_seconds!("$2"),
                ", fencing_token = fencing_token + 1 \
                 WHERE id IN (SELECT id FROM (\
                   SELECT id, created_at FROM (SELECT id, created_at FROM jobs \
                     WHERE status = 'queued' ORDER BY created_at LIMIT $3 ",
                for_update_skip_locked!(),
                ") AS queued UNION ALL \
                   SELECT id, created_at FROM (SELECT id, created_at FROM jobs \
                     WHERE status = 'running' AND lease_expires_at < ",
                now!(),
                " ORDER BY created_at LIMIT $3 ",
                for_update_skip_locked!(),
                ") AS expired) AS claimable ORDER BY created_at LIMIT $3) \
                 RETURNING {}, fencing_token"
            ),
            JOB_COLUMNS
        );
        let rows = sqlx::query(&sql)
            .bind(worker)
            .bind(lease_s)
            .bind(n)
            .fetch_all(&self.writer)
            .await?;
        self.committed(Purpose::Claim, 1);
        rows.iter()
            .map(|row| {
                Ok(Claim {
                    job: job_from_row(row)?,
                    token: row.try_get("fencing_token")?,
                })
            })
            .collect()
    }

    /// Extends the lease of every job `owner` runs: one write per beat
    /// however many runs are in flight. Returns how many were extended.
    pub async fn heartbeat_owner(&self, owner: &str, lease_s: f64) -> StoreResult<u64> {
        // Rows a unit of work holds right now are skipped, not waited for:
        // waiting could deadlock with that unit's transaction, and the next
        // beat (three per lease) extends them.
        let r = sqlx::query(concat!(
            "UPDATE jobs SET lease_expires_at = ",
            now_plus_seconds!("$2"),
            " WHERE id IN (SELECT id FROM jobs WHERE lease_owner = $1 AND status = 'running' ",
            for_update_skip_locked!(),
            ")"
        ))
        .bind(owner)
        .bind(lease_s)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Heartbeat, 1);
        Ok(r.rows_affected())
    }

    /// Whether a run still holds its claim (the job is running under this
    /// token): a long poll asks now and then, and stops when it does not.
    pub async fn claim_held(&self, job: JobId, token: i64) -> StoreResult<bool> {
        let held: Option<uuid::Uuid> = sqlx::query_scalar(
            "SELECT id FROM jobs WHERE id = $1 AND fencing_token = $2 AND status = 'running'",
        )
        .bind(job.0)
        .bind(token)
        .fetch_optional(&self.reader)
        .await?;
        Ok(held.is_some())
    }

    /// Who holds a job and its current fencing token.
    pub async fn job_lease(&self, job: JobId) -> StoreResult<Option<(Option<String>, i64)>> {
        let row = sqlx::query("SELECT lease_owner, fencing_token FROM jobs WHERE id = $1")
            .bind(job.0)
            .fetch_optional(&self.reader)
            .await?;
        row.map(|r| Ok((r.try_get("lease_owner")?, r.try_get("fencing_token")?)))
            .transpose()
    }

    /// Rule 11's safety net: holds still counted for jobs that already
    /// ended are settled from what their attempts recorded (the cost, or
    /// the hold when unknown), never by calling again. A terminal write
    /// settles them itself (the `jobs_ended` trigger), so this finds
    /// nothing unless that was bypassed. A job whose record still waits for
    /// a reviewer (its owner cancelled it while parked) keeps its holds
    /// until the decision (rule 12).
    pub async fn settle_left_holds(&self) -> StoreResult<u64> {
        let r = sqlx::query(
            "UPDATE attempts SET settled_usd = COALESCE(cost_usd, hold_usd) \
             WHERE hold_usd IS NOT NULL AND settled_usd IS NULL \
               AND job_id IN (SELECT id FROM jobs WHERE status IN ('succeeded', 'failed', 'cancelled')) \
               AND NOT EXISTS (SELECT 1 FROM parked p WHERE p.job_id = attempts.job_id AND p.state <> 'closed')",
        )
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(r.rows_affected())
    }
}
