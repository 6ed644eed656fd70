//! Spend (rule 10 and the admin side of rule 11): the rollup the attempts'
//! triggers keep, the days' budget rows, and lists of attempts for the
//! spend and budget pages. Money is summed in SQL, exactly.

use super::*;
use crate::model::Usd;
use chrono::{DateTime, NaiveDate, Utc};

const LISTED_COLUMNS: &str = "a.id, a.job_id, a.purpose, a.provider, a.endpoint, a.model, a.attempt_no, \
     a.state, a.idempotency_key, a.provider_job_id, a.error_class, a.error, a.duration_ms, a.usage, \
     a.cost_usd, a.cost_source, a.hold_usd, a.budget_day, a.settled_usd, a.started_at, a.finished_at, \
     u.email AS user_email, j.status AS job_status, \
     (j.status = 'running' AND j.lease_expires_at < ";

impl Backend {
    /// The rollup rows of the days from `from` to `to`, both included (a
    /// row its attempts all moved out of is left out).
    pub async fn spend_rows(&self, from: NaiveDate, to: NaiveDate) -> StoreResult<Vec<SpendRow>> {
        let rows = sqlx::query(
            "SELECT day, provider, model, error_class, attempts, priced_usd, priced, unpriced \
             FROM spend_rollup WHERE day >= $1 AND day <= $2 AND attempts <> 0 \
             ORDER BY day, provider, model, error_class",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let class: String = r.try_get("error_class")?;
                Ok(SpendRow {
                    day: r.try_get("day")?,
                    provider: r.try_get("provider")?,
                    model: r.try_get("model")?,
                    error_class: (!class.is_empty()).then_some(class),
                    attempts: r.try_get("attempts")?,
                    priced_usd: r.try_get("priced_usd")?,
                    priced: r.try_get("priced")?,
                    unpriced: r.try_get("unpriced")?,
                })
            })
            .collect()
    }

    /// The same numbers summed straight from the attempts: what the rollup
    /// must always equal (tests and the benchmark compare them).
    pub async fn spend_rows_raw(
        &self,
        from: NaiveDate,
        to: NaiveDate,
    ) -> StoreResult<Vec<SpendRow>> {
        let sql = format!(
            "SELECT {day} AS day, provider, model, COALESCE(error_class, '') AS error_class, \
             CAST(COUNT(*) AS BIGINT) AS attempts, COALESCE(SUM(cost_usd), 0) AS priced_usd, \
             CAST(COUNT(cost_usd) AS BIGINT) AS priced, \
             CAST(SUM(CASE WHEN cost_usd IS NULL AND state IN ('succeeded', 'failed') THEN 1 ELSE 0 END) AS BIGINT) AS unpriced \
             FROM attempts WHERE {day} >= $1 AND {day} <= $2 \
             GROUP BY {day}, provider, model, COALESCE(error_class, '') \
             ORDER BY 1, 2, 3, 4",
            day = spend_day!()
        );
        let rows = sqlx::query(&sql)
            .bind(from)
            .bind(to)
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|r| {
                let class: String = r.try_get("error_class")?;
                Ok(SpendRow {
                    day: r.try_get("day")?,
                    provider: r.try_get("provider")?,
                    model: r.try_get("model")?,
                    error_class: (!class.is_empty()).then_some(class),
                    attempts: r.try_get("attempts")?,
                    priced_usd: r.try_get("priced_usd")?,
                    priced: r.try_get("priced")?,
                    unpriced: r.try_get("unpriced")?,
                })
            })
            .collect()
    }

    /// The budget rows of the days that have one, from `from` to `to`.
    pub async fn budget_days(&self, from: NaiveDate, to: NaiveDate) -> StoreResult<Vec<BudgetDay>> {
        let sql = format!(
            "SELECT {DAY_COLUMNS} FROM budget_days WHERE day >= $1 AND day <= $2 ORDER BY day"
        );
        let rows = sqlx::query(&sql)
            .bind(from)
            .bind(to)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(day_from_row).collect()
    }

    /// Attempts by day, filtered, oldest first, a page at a time; each with
    /// its owner's email and its job's state.
    pub async fn list_attempts(&self, f: &AttemptFilter) -> StoreResult<Vec<AttemptListed>> {
        let mut q = sqlx::QueryBuilder::<Db>::new(format!(
            "SELECT {LISTED_COLUMNS}{}) AS lease_expired FROM attempts a \
             JOIN jobs j ON j.id = a.job_id JOIN users u ON u.id = j.user_id WHERE a.budget_day IS NOT NULL",
            now!()
        ));
        if let Some(d) = f.from {
            q.push(" AND a.budget_day >= ").push_bind(d);
        }
        if let Some(d) = f.to {
            q.push(" AND a.budget_day <= ").push_bind(d);
        }
        if f.unpriced_only {
            q.push(" AND a.cost_usd IS NULL AND a.state IN ('succeeded', 'failed')");
        }
        if f.holding_only {
            q.push(" AND a.hold_usd IS NOT NULL AND a.settled_usd IS NULL");
        }
        if let Some(m) = &f.model {
            q.push(" AND a.model = ").push_bind(m.clone());
        }
        if let Some(c) = &f.error_class {
            q.push(" AND a.error_class = ").push_bind(c.clone());
        }
        if let Some(state) = f.state {
            q.push(" AND a.state = ").push_bind(state.as_str());
        }
        // From the cursor in (day, started_at, id) order; before it the
        // list is read the other way round, nearest first.
        let back = matches!(f.seek, Some(Seek::Before(_)));
        let (op, order) = if back { ("<", "DESC") } else { (">", "ASC") };
        if let Some(seek) = f.seek {
            let c = seek.key();
            q.push(format!(" AND (a.budget_day {op} ")).push_bind(c.day);
            q.push(" OR (a.budget_day = ").push_bind(c.day);
            q.push(format!(" AND (a.started_at {op} "))
                .push_bind(c.started_at);
            q.push(" OR (a.started_at = ").push_bind(c.started_at);
            q.push(format!(" AND a.id {op} "))
                .push_bind(c.id.0)
                .push("))))");
        }
        q.push(format!(
            " ORDER BY a.budget_day {order}, a.started_at {order}, a.id {order} LIMIT "
        ))
        .push_bind(f.limit);
        let rows = q.build().fetch_all(&self.reader).await?;
        let mut list = rows
            .iter()
            .map(|r| {
                let status: String = r.try_get("job_status")?;
                Ok(AttemptListed {
                    attempt: attempt_from_row(r)?,
                    user_email: Email::from_stored(r.try_get("user_email")?),
                    job_status: JobStatus::parse(&status).ok_or_else(|| corrupt(&status))?,
                    lease_expired: r
                        .try_get::<Option<bool>, _>("lease_expired")?
                        .unwrap_or(false),
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        if back {
            list.reverse();
        }
        Ok(list)
    }

    /// What may have been spent without a price, right now.
    /// What `user`'s work has cost the studio on `day`: the settled cost of
    /// each attempt counted on that day, or its hold while unsettled or
    /// never priced (an unknown cost is never counted as nothing). Refunds
    /// to the person do not lower it: the provider was paid. Only jobs
    /// made since `since` are read (the person's own index).
    pub async fn user_spend_on(
        &self,
        user: UserId,
        day: NaiveDate,
        since: DateTime<Utc>,
    ) -> StoreResult<Usd> {
        let usd: Option<Usd> = sqlx::query_scalar(
            "SELECT SUM(COALESCE(a.settled_usd, a.hold_usd)) FROM jobs j \
             JOIN attempts a ON a.job_id = j.id \
             WHERE j.user_id = $1 AND j.created_at >= $2 AND a.budget_day = $3",
        )
        .bind(user.0)
        .bind(since)
        .bind(day)
        .fetch_one(&self.reader)
        .await?;
        Ok(usd.unwrap_or(Usd::ZERO))
    }

    /// The people whose work cost the most on `day`, most first.
    pub async fn top_spenders_on(&self, day: NaiveDate, n: i64) -> StoreResult<Vec<Spender>> {
        let rows = sqlx::query(
            "SELECT u.id, u.email, SUM(COALESCE(a.settled_usd, a.hold_usd)) AS usd, \
             CAST(COUNT(*) AS BIGINT) AS attempts \
             FROM attempts a JOIN jobs j ON j.id = a.job_id JOIN users u ON u.id = j.user_id \
             WHERE a.budget_day = $1 AND a.hold_usd IS NOT NULL \
             GROUP BY u.id, u.email ORDER BY usd DESC, u.email LIMIT $2",
        )
        .bind(day)
        .bind(n)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Spender {
                    user_id: UserId(r.try_get("id")?),
                    email: crate::model::Email::from_stored(r.try_get("email")?),
                    spent_usd: r.try_get::<Option<Usd>, _>("usd")?.unwrap_or(Usd::ZERO),
                    attempts: r.try_get("attempts")?,
                })
            })
            .collect()
    }

    pub async fn exposure(&self) -> StoreResult<Exposure> {
        let parked = sqlx::query(
            "SELECT CAST(COUNT(*) AS BIGINT) AS n, SUM(a.hold_usd) AS usd FROM attempts a JOIN jobs j ON j.id = a.job_id \
             WHERE j.status = 'parked' AND a.hold_usd IS NOT NULL AND a.settled_usd IS NULL",
        )
        .fetch_one(&self.reader)
        .await?;
        let submitting = sqlx::query(
            "SELECT CAST(COUNT(*) AS BIGINT) AS n, SUM(hold_usd) AS usd FROM attempts WHERE state = 'submitting'",
        )
        .fetch_one(&self.reader)
        .await?;
        Ok(Exposure {
            parked_holds: parked.try_get("n")?,
            parked_hold_usd: parked
                .try_get::<Option<Usd>, _>("usd")?
                .unwrap_or(Usd::ZERO),
            submitting: submitting.try_get("n")?,
            submitting_hold_usd: submitting
                .try_get::<Option<Usd>, _>("usd")?
                .unwrap_or(Usd::ZERO),
        })
    }
}
