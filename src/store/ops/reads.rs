//! Attempts, the day's budget (rule 11's admin side), parked records and
//! the counts behind `/metrics`. Sums of money run in SQL: exact on both
//! backends (NUMERIC, or whole millionths).

use super::*;
use chrono::NaiveDate;

impl Backend {
    pub async fn attempts(&self, job: JobId) -> StoreResult<Vec<Attempt>> {
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = $1 ORDER BY started_at, attempt_no"
        );
        let rows = sqlx::query(&sql)
            .bind(job.0)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(attempt_from_row).collect()
    }

    /// The attempts of many jobs in one query (a page of the job list: a
    /// few hundred at most, well under either backend's parameter limit).
    pub async fn attempts_of(&self, jobs: &[JobId]) -> StoreResult<Vec<Attempt>> {
        let marks: Vec<String> = (1..=jobs.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id IN ({}) ORDER BY started_at, attempt_no",
            marks.join(", ")
        );
        let mut q = sqlx::query(&sql).persistent(false);
        for j in jobs {
            q = q.bind(j.0);
        }
        let rows = q.fetch_all(&self.reader).await?;
        rows.iter().map(attempt_from_row).collect()
    }

    /// The jobs with these ids, in no particular order (a page's worth).
    pub async fn jobs_of(&self, ids: &[JobId]) -> StoreResult<Vec<Job>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let marks: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE id IN ({})",
            marks.join(", ")
        );
        let mut q = sqlx::query(&sql).persistent(false);
        for j in ids {
            q = q.bind(j.0);
        }
        let rows = q.fetch_all(&self.reader).await?;
        rows.iter().map(job_from_row).collect()
    }

    /// A day of the breaker; a day nobody has reserved against yet has the
    /// default cap and nothing used (reading it writes nothing).
    pub async fn budget_day(
        &self,
        day: NaiveDate,
        default_cap: crate::model::Usd,
    ) -> StoreResult<BudgetDay> {
        let sql = format!("SELECT {DAY_COLUMNS} FROM budget_days WHERE day = $1");
        let row = sqlx::query(&sql)
            .bind(day)
            .fetch_optional(&self.reader)
            .await?;
        Ok(match row {
            Some(r) => day_from_row(&r)?,
            None => BudgetDay {
                day,
                cap_usd: default_cap,
                used_usd: crate::model::Usd::ZERO,
                reserved_usd: crate::model::Usd::ZERO,
                halted: false,
                halted_reason: None,
                halted_by: None,
                halted_at: None,
            },
        })
    }

    /// Sets a day's cap, or halts or resumes it with who and why.
    pub async fn set_budget(
        &self,
        day: NaiveDate,
        default_cap: crate::model::Usd,
        change: &BudgetChange,
    ) -> StoreResult<BudgetDay> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO budget_days (day, cap_usd) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING",
        )
        .bind(day)
        .bind(default_cap)
        .execute(&mut *tx)
        .await?;
        let (cap, halted) = match change.kind {
            BudgetChangeKind::Cap(cap) => (Some(cap), None),
            BudgetChangeKind::Halt => (None, Some(true)),
            BudgetChangeKind::Resume => (None, Some(false)),
        };
        if let Some(cap) = cap {
            sqlx::query("UPDATE budget_days SET cap_usd = $1 WHERE day = $2")
                .bind(cap)
                .bind(day)
                .execute(&mut *tx)
                .await?;
        }
        if let Some(halted) = halted {
            sqlx::query(
                "UPDATE budget_days SET halted = $1, halted_reason = $2, halted_by = $3, halted_at = $4 \
                 WHERE day = $5",
            )
            .bind(halted)
            .bind(&change.reason)
            .bind(change.by.map(|u| u.0))
            .bind(change.at)
            .bind(day)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO budget_changes (day, change, cap_usd, reason, by_user, at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(day)
        .bind(change.kind.as_str())
        .bind(cap)
        .bind(&change.reason)
        .bind(change.by.map(|u| u.0))
        .bind(change.at)
        .execute(&mut *tx)
        .await?;
        let sql = format!("SELECT {DAY_COLUMNS} FROM budget_days WHERE day = $1");
        let row = sqlx::query(&sql).bind(day).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        self.committed(Purpose::Other, 5);
        day_from_row(&row)
    }

    pub async fn budget_changes(
        &self,
        from: NaiveDate,
        to: NaiveDate,
        limit: i64,
    ) -> StoreResult<Vec<BudgetChangeListed>> {
        let rows = sqlx::query(
            "SELECT c.day, c.change, c.cap_usd, c.reason, c.by_user, c.at, u.email \
             FROM budget_changes c LEFT JOIN users u ON u.id = c.by_user \
             WHERE c.day >= $1 AND c.day <= $2 ORDER BY c.id DESC LIMIT $3",
        )
        .bind(from)
        .bind(to)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let change: String = r.try_get("change")?;
                let kind = match change.as_str() {
                    "cap" => BudgetChangeKind::Cap(
                        r.try_get::<Option<crate::model::Usd>, _>("cap_usd")?
                            .ok_or_else(|| corrupt("a cap change without a cap"))?,
                    ),
                    "halt" => BudgetChangeKind::Halt,
                    "resume" => BudgetChangeKind::Resume,
                    other => return Err(corrupt(other)),
                };
                Ok(BudgetChangeListed {
                    day: r.try_get("day")?,
                    change: BudgetChange {
                        kind,
                        reason: r.try_get("reason")?,
                        by: r.try_get::<Option<uuid::Uuid>, _>("by_user")?.map(UserId),
                        at: r.try_get("at")?,
                    },
                    by_email: r
                        .try_get::<Option<String>, _>("email")?
                        .map(Email::from_stored),
                })
            })
            .collect()
    }

    /// Counts for /metrics, read at scrape time.
    pub async fn metrics_snapshot(&self) -> StoreResult<MetricsSnapshot> {
        let jobs_by_status =
            sqlx::query_as::<_, (String, i64)>("SELECT status, COUNT(*) FROM jobs GROUP BY status")
                .fetch_all(&self.reader)
                .await?;
        let rows = sqlx::query(
            "SELECT model, state, COUNT(*) AS n, SUM(cost_usd) AS priced, \
             CAST(SUM(CASE WHEN cost_usd IS NULL AND state IN ('succeeded', 'failed') THEN 1 ELSE 0 END) AS BIGINT) \
             AS unpriced FROM attempts GROUP BY model, state ORDER BY model, state",
        )
        .fetch_all(&self.reader)
        .await?;
        let attempts_by_model = rows
            .iter()
            .map(|r| {
                let priced: Option<crate::model::Usd> = r.try_get("priced")?;
                Ok((
                    r.try_get("model")?,
                    r.try_get("state")?,
                    r.try_get("n")?,
                    priced.unwrap_or(crate::model::Usd::ZERO),
                    r.try_get::<Option<i64>, _>("unpriced")?.unwrap_or(0),
                ))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let held = sqlx::query(
            "SELECT COUNT(*) AS n, SUM(hold_usd) AS usd FROM attempts \
             WHERE hold_usd IS NOT NULL AND settled_usd IS NULL",
        )
        .fetch_one(&self.reader)
        .await?;
        let parked = sqlx::query(
            "SELECT stage, COUNT(*) AS n, MIN(created_at) AS oldest FROM parked WHERE state = 'open' GROUP BY stage",
        )
        .fetch_all(&self.reader)
        .await?
        .iter()
        .map(|r| Ok((r.try_get("stage")?, r.try_get("n")?, r.try_get("oldest")?)))
        .collect::<StoreResult<Vec<_>>>()?;
        Ok(MetricsSnapshot {
            jobs_by_status,
            attempts_by_model,
            reservations_held: held.try_get("n")?,
            reserved_usd: held
                .try_get::<Option<crate::model::Usd>, _>("usd")?
                .unwrap_or(crate::model::Usd::ZERO),
            parked,
        })
    }
}
