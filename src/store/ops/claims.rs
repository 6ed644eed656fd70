//! Claims (rule 5): one conditional update takes a batch of queued jobs, or
//! jobs whose lease ran out, bumps each one's fencing token and sets its
//! lease, with the database's clock. A job's lease is held through its
//! node's (`node_leases`): a claim upserts the node's row and a heartbeat
//! extends that row alone, so a beat is one row however many jobs the node
//! runs, and a running job is claimable again once its own lease and its
//! node's have both run out.

use super::*;

impl Backend {
    /// Claims up to `n` jobs for `worker`, each leased for `lease_s`
    /// seconds of the database's clock, oldest first, and extends the
    /// worker's node lease as far, in one transaction. Every claim's
    /// `claimed` event is written by a trigger. The queued and the expired
    /// are looked up apart: the oldest queued from `jobs_queued`, the
    /// expired from the nodes whose lease ran out (`jobs_lease_owner`), so
    /// a claim reads about `n` rows, not every job in flight.
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
                " AND ",
                in_values_of!(
                    "lease_owner",
                    concat!("SELECT owner FROM node_leases WHERE expires_at < ", now!())
                ),
                " ORDER BY created_at LIMIT $3 ",
                for_update_skip_locked!(),
                ") AS expired) AS claimable ORDER BY created_at LIMIT $3) \
                 RETURNING {}, fencing_token"
            ),
            JOB_COLUMNS
        );
        let mut tx = self.writer.begin().await?;
        node_lease(&mut tx, worker, lease_s).await?;
        let rows = sqlx::query(&sql)
            .bind(worker)
            .bind(lease_s)
            .bind(n)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        self.committed(Purpose::Claim, 2);
        rows.iter()
            .map(|row| {
                Ok(Claim {
                    job: job_from_row(row)?,
                    token: row.try_get("fencing_token")?,
                })
            })
            .collect()
    }

    /// Extends `owner`'s node lease, and with it the lease of every job it
    /// runs: one row however many runs are in flight.
    pub async fn heartbeat_owner(&self, owner: &str, lease_s: f64) -> StoreResult<()> {
        let mut conn = self.writer.acquire().await?;
        node_lease(&mut conn, owner, lease_s).await?;
        self.committed(Purpose::Heartbeat, 1);
        Ok(())
    }

    /// Forgets the node leases that ran out over an hour ago and hold no
    /// running job (nodes that stopped, their jobs taken over). Returns
    /// how many.
    pub async fn forget_stopped_nodes(&self) -> StoreResult<u64> {
        let r = sqlx::query(
            "DELETE FROM node_leases WHERE expires_at < $1 AND NOT EXISTS (SELECT 1 FROM jobs j \
               WHERE j.status = 'running' AND j.lease_owner = node_leases.owner)",
        )
        .bind(chrono::Utc::now() - chrono::Duration::hours(1))
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
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

/// Upserts `owner`'s node lease to `lease_s` seconds from now.
async fn node_lease(
    conn: &mut <Db as sqlx::Database>::Connection,
    owner: &str,
    lease_s: f64,
) -> StoreResult<()> {
    sqlx::query(concat!(
        "INSERT INTO node_leases (owner, expires_at) VALUES ($1, ",
        now_plus_seconds!("$2"),
        ") ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at"
    ))
    .bind(owner)
    .bind(lease_s)
    .execute(conn)
    .await?;
    Ok(())
}
