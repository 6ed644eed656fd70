//! Spend (rule 10 and the admin side of rule 11): the rollup the attempts'
//! triggers keep, the days' budget rows, and lists of attempts for the
//! spend and budget pages. Money is summed in SQL, exactly.

use super::*;
use crate::model::Usd;
use chrono::{DateTime, NaiveDate, Utc};

const LISTED_COLUMNS: &str = "a.id, a.job_id, a.purpose, a.provider, a.endpoint, a.model, a.attempt_no, \
     a.state, a.idempotency_key, a.provider_job_id, a.error_class, a.error, a.duration_ms, a.usage, \
     a.cost_usd, a.cost_source, a.hold_usd, a.budget_day, a.settled_usd, a.started_at, a.finished_at, \
     u.email AS user_email, j.status AS job_status";

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
                Ok(SpendRow {
                    day: r.try_get("day")?,
                    provider: r.try_get("provider")?,
                    model: r.try_get("model")?,
                    error_class: error_class_of(r.try_get("error_class")?)?,
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
                Ok(SpendRow {
                    day: r.try_get("day")?,
                    provider: r.try_get("provider")?,
                    model: r.try_get("model")?,
                    error_class: error_class_of(r.try_get("error_class")?)?,
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
            concat!(
                "SELECT {}, (j.status = 'running' AND j.lease_expires_at < ",
                now!(),
                " AND EXISTS (SELECT 1 FROM node_leases n \
                   WHERE n.owner = j.lease_owner AND n.expires_at < ",
                now!(),
                ")) AS lease_expired"
            ),
            LISTED_COLUMNS
        ));
        attempts_from(&mut q, f);
        // Before a position the list is read the other way round, nearest
        // first, so that the limit keeps the rows next to it.
        let back = matches!(f.seek, Some(Seek::Before(_)));
        let order = if back { "DESC" } else { "ASC" };
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

    /// How many attempts the filter matches, ignoring its limit; with
    /// `Before`, how many come before that position in the list.
    pub async fn count_attempts(&self, f: &AttemptFilter) -> StoreResult<i64> {
        let mut q = sqlx::QueryBuilder::<Db>::new("SELECT COUNT(*)");
        attempts_from(&mut q, f);
        Ok(q.build().fetch_one(&self.reader).await?.try_get(0)?)
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

    /// Writes down each of `shares` (percentages of the cap) that `day`'s
    /// used plus held has reached and that nobody wrote before; returns the
    /// ones this call wrote, so each is told once however many workers
    /// look at the same moment (the key decides). Every paid call looks, so
    /// the look is a read: only a share that is due costs a write.
    pub async fn note_thresholds(
        &self,
        day: NaiveDate,
        shares: &[u32],
        at: DateTime<Utc>,
    ) -> StoreResult<Vec<u32>> {
        let due = self.thresholds_due(day, shares).await?;
        let mut written = Vec::new();
        for percent in due {
            let hit = sqlx::query(
                "INSERT INTO budget_thresholds (day, percent, crossed_at, booked_usd, cap_usd) \
                 SELECT day, $2, $3, used_usd + reserved_usd, cap_usd FROM budget_days \
                 WHERE day = $1 AND cap_usd > 0 AND (used_usd + reserved_usd) * 100 >= cap_usd * $2 \
                 ON CONFLICT (day, percent) DO NOTHING",
            )
            .bind(day)
            .bind(percent)
            .bind(at)
            .execute(&self.writer)
            .await?;
            if hit.rows_affected() == 1 {
                self.committed(Purpose::Other, 1);
                written.push(u32::try_from(percent).map_err(corrupt)?);
            }
        }
        Ok(written)
    }

    /// The shares `day` has reached and nobody wrote down yet.
    async fn thresholds_due(&self, day: NaiveDate, shares: &[u32]) -> StoreResult<Vec<i32>> {
        if shares.is_empty() {
            return Ok(Vec::new());
        }
        // The shares are our own numbers (u32), written into the text.
        let table = shares
            .iter()
            .map(|p| format!("SELECT {p} AS percent"))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let sql = format!(
            "SELECT s.percent FROM budget_days d CROSS JOIN ({table}) s \
             WHERE d.day = $1 AND d.cap_usd > 0 \
             AND (d.used_usd + d.reserved_usd) * 100 >= d.cap_usd * s.percent \
             AND NOT EXISTS (SELECT 1 FROM budget_thresholds t WHERE t.day = d.day AND t.percent = s.percent) \
             ORDER BY s.percent"
        );
        let rows = sqlx::query(&sql).bind(day).fetch_all(&self.reader).await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<i32, _>("percent")?))
            .collect()
    }

    /// The shares of its cap `day` has passed, lowest first.
    pub async fn thresholds_on(&self, day: NaiveDate) -> StoreResult<Vec<ThresholdCrossed>> {
        let rows = sqlx::query(
            "SELECT day, percent, crossed_at, booked_usd, cap_usd FROM budget_thresholds \
             WHERE day = $1 ORDER BY percent",
        )
        .bind(day)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(ThresholdCrossed {
                    day: r.try_get("day")?,
                    percent: u32::try_from(r.try_get::<i32, _>("percent")?).map_err(corrupt)?,
                    crossed_at: r.try_get("crossed_at")?,
                    booked_usd: r.try_get("booked_usd")?,
                    cap_usd: r.try_get("cap_usd")?,
                })
            })
            .collect()
    }

    /// Spend from `from` to `to` by who ordered the work and with which
    /// token, counted on the same days as the rollup (so the rows add up
    /// to the page's total); unpriced calls apart, never as zero.
    pub async fn spend_by_source(
        &self,
        from: NaiveDate,
        to: NaiveDate,
    ) -> StoreResult<Vec<SourceSpend>> {
        let day = spend_day!()
            .replace("budget_day", "a.budget_day")
            .replace("started_at", "a.started_at");
        let sql = format!(
            "SELECT j.user_id, u.email, j.token_id, t.name AS token_name, t.prefix AS token_prefix, \
             t.revoked_at, CAST(COUNT(*) AS BIGINT) AS attempts, \
             COALESCE(SUM(a.cost_usd), 0) AS priced_usd, CAST(COUNT(a.cost_usd) AS BIGINT) AS priced, \
             CAST(SUM(CASE WHEN a.cost_usd IS NULL AND a.state IN ('succeeded', 'failed') THEN 1 ELSE 0 END) AS BIGINT) AS unpriced \
             FROM attempts a JOIN jobs j ON j.id = a.job_id JOIN users u ON u.id = j.user_id \
             LEFT JOIN api_tokens t ON t.id = j.token_id \
             WHERE {day} >= $1 AND {day} <= $2 \
             GROUP BY j.user_id, u.email, j.token_id, t.name, t.prefix, t.revoked_at \
             ORDER BY u.email, t.name"
        );
        let rows = sqlx::query(&sql)
            .bind(from)
            .bind(to)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(source_spend_from_row).collect()
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

fn source_spend_from_row(r: &Row) -> StoreResult<SourceSpend> {
    let token = match r.try_get::<Option<uuid::Uuid>, _>("token_id")? {
        Some(id) => Some(TokenLabel {
            id: ApiTokenId(id),
            name: r.try_get("token_name")?,
            prefix: r.try_get("token_prefix")?,
            revoked: r
                .try_get::<Option<DateTime<Utc>>, _>("revoked_at")?
                .is_some(),
        }),
        None => None,
    };
    Ok(SourceSpend {
        user_id: UserId(r.try_get("user_id")?),
        email: Email::from_stored(r.try_get("email")?),
        token,
        attempts: r.try_get("attempts")?,
        priced_usd: r.try_get("priced_usd")?,
        priced: r.try_get("priced")?,
        unpriced: r.try_get("unpriced")?,
    })
}

/// The attempts a filter names, its seek among the conditions, in
/// (day, started_at, id) order: after a position is later, before earlier.
fn attempts_from<'a>(q: &mut sqlx::QueryBuilder<'a, Db>, f: &'a AttemptFilter) {
    q.push(
        " FROM attempts a JOIN jobs j ON j.id = a.job_id JOIN users u ON u.id = j.user_id \
         WHERE a.budget_day IS NOT NULL",
    );
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
        q.push(" AND a.model = ").push_bind(m.as_str());
    }
    if let Some(c) = &f.error_class {
        q.push(" AND a.error_class = ").push_bind(c.as_str());
    }
    if let Some(state) = f.state {
        q.push(" AND a.state = ").push_bind(state.as_str());
    }
    if let Some(seek) = f.seek {
        let op = match seek {
            Seek::After(_) => ">",
            Seek::Before(_) => "<",
        };
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
}
