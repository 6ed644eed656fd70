//! Units of work (DESIGN.md, "How a job commits"): the writes a run makes
//! after its claim, applied many runs at a time in one transaction. Each
//! unit's ops name its fencing token: the first op that finds the token
//! stale stops the unit, and it writes nothing; the others commit. On
//! PostgreSQL the first check locks the job's row, so the token cannot move
//! before the transaction commits.

use super::*;
use chrono::Utc;

/// How often a batch that met a deadlock or serialization failure is
/// applied again before its units are applied one by one.
const TRANSIENT_RETRIES_MAX: u32 = 3;

/// How many explicit events go in one statement (four parameters each).
const EVENTS_PER_STATEMENT: usize = 200;

/// What applying one unit came to inside the batch's transaction.
enum Ran {
    Applied(Applied),
    /// The token went stale after the unit had written: the batch must be
    /// rolled back and applied again without it.
    StaleAfterWrites,
}

/// What a batch came to.
enum Batch {
    Committed(Vec<Applied>),
    /// Unit `i` went stale after writing: apply again, skipping it.
    Redo(usize),
}

/// An explicit timeline event of a unit, written after its ops.
struct Event {
    job: JobId,
    kind: String,
    detail: serde_json::Value,
}

impl Backend {
    /// Applies many runs' units in one transaction; each result belongs to
    /// the unit at the same place. A stale unit is refused alone. When the
    /// transaction fails, each unit is applied on its own, so one unit's
    /// error is that unit's alone.
    pub async fn apply(&self, units: &[Unit]) -> Vec<StoreResult<Applied>> {
        let mut skip = vec![false; units.len()];
        let mut transient_left = TRANSIENT_RETRIES_MAX;
        loop {
            match self.apply_batch(units, &skip).await {
                Ok(Batch::Committed(applied)) => return applied.into_iter().map(Ok).collect(),
                Ok(Batch::Redo(i)) => skip[i] = true,
                // A deadlock or serialization failure rolled everything back:
                // the same batch again is the cure, not splitting it up.
                Err(e) if e.is_transient() && transient_left > 0 => {
                    transient_left -= 1;
                    tracing::debug!(error = %e, "a group commit met a transient failure; applying it again");
                    tokio::time::sleep(std::time::Duration::from_millis(
                        rand::random::<u64>() % 20 + 1,
                    ))
                    .await;
                }
                Err(e) if units.len() == 1 => return vec![Err(e)],
                Err(e) => {
                    tracing::debug!(error = %e, units = units.len(), "a group commit failed; applying its units one by one");
                    let mut out = Vec::with_capacity(units.len());
                    for (i, u) in units.iter().enumerate() {
                        if skip[i] {
                            out.push(Ok(Applied::Stale));
                            continue;
                        }
                        out.push(
                            match self.apply_batch(std::slice::from_ref(u), &[false]).await {
                                Ok(Batch::Committed(mut a)) => Ok(a.remove(0)),
                                Ok(Batch::Redo(_)) => Ok(Applied::Stale),
                                Err(e) => Err(e),
                            },
                        );
                    }
                    return out;
                }
            }
        }
    }

    async fn apply_batch(&self, units: &[Unit], skip: &[bool]) -> StoreResult<Batch> {
        let mut tx = self.writer.begin().await?;
        let mut applied = Vec::with_capacity(units.len());
        let mut events = Vec::new();
        let mut statements = 0u64;
        if super::super::LOCKS_ROWS {
            // Every unit's job row first, in one order: a cancel (job, then
            // the day's budget row through its triggers) can then never
            // hold a job this batch waits for while waiting for the budget
            // row this batch holds.
            let mut jobs: Vec<uuid::Uuid> = units
                .iter()
                .zip(skip)
                .filter(|(_, s)| !**s)
                .map(|(u, _)| u.job.0)
                .collect();
            jobs.sort_unstable();
            jobs.dedup();
            if !jobs.is_empty() {
                let marks: Vec<String> = (1..=jobs.len()).map(|i| format!("${i}")).collect();
                let sql = format!(
                    concat!(
                        "SELECT id FROM jobs WHERE id IN ({}) ORDER BY id ",
                        for_update!()
                    ),
                    marks.join(", ")
                );
                let mut q = sqlx::query(&sql).persistent(false);
                for j in &jobs {
                    q = q.bind(j);
                }
                q.fetch_all(&mut *tx).await?;
                statements += 1;
            }
        }
        for (i, unit) in units.iter().enumerate() {
            if skip[i] {
                applied.push(Applied::Stale);
                continue;
            }
            let mut mine = Vec::new();
            match apply_unit(&mut tx, unit, &mut mine, &mut statements).await? {
                Ran::Applied(a) => {
                    if !matches!(a, Applied::Stale) {
                        events.append(&mut mine);
                    }
                    applied.push(a);
                }
                Ran::StaleAfterWrites => return Ok(Batch::Redo(i)),
            }
        }
        statements += insert_events(&mut tx, &events).await?;
        tx.commit().await?;
        self.committed(Purpose::Units, statements);
        Ok(Batch::Committed(applied))
    }
}

/// Whether the run holds the job; on PostgreSQL the row stays locked.
async fn holds(conn: &mut Conn, job: JobId, token: i64) -> StoreResult<bool> {
    let held: Option<uuid::Uuid> = sqlx::query_scalar(concat!(
        "SELECT id FROM jobs WHERE id = $1 AND fencing_token = $2 AND status = 'running' ",
        for_update!()
    ))
    .bind(job.0)
    .bind(token)
    .fetch_optional(conn)
    .await?;
    Ok(held.is_some())
}

async fn apply_unit(
    conn: &mut Conn,
    unit: &Unit,
    events: &mut Vec<Event>,
    statements: &mut u64,
) -> StoreResult<Ran> {
    let (job, token) = (unit.job, unit.token);
    let mut wrote = false;
    let stale = |wrote: bool| {
        Ok(if wrote {
            Ran::StaleAfterWrites
        } else {
            Ran::Applied(Applied::Stale)
        })
    };
    let mut stored = None;
    let mut ops = unit.ops.iter().peekable();
    while let Some(op) = ops.next() {
        *statements += 1;
        match op {
            Op::Progress(p) => {
                // Recorded with the terminal write or the park when one follows.
                if let Some(next) = ops.next_if(|o| matches!(o, Op::Finish(_) | Op::Park(_))) {
                    match end_job(conn, job, token, next, Some(p), events, statements).await? {
                        Some(j) => stored = Some(Box::new(j)),
                        None => return stale(wrote),
                    }
                } else {
                    let r = sqlx::query(
                        "UPDATE jobs SET progress = $3 WHERE id = $1 AND fencing_token = $2 AND status = 'running'",
                    )
                    .bind(job.0)
                    .bind(token)
                    .bind(Json(p))
                    .execute(&mut *conn)
                    .await?;
                    if r.rows_affected() == 0 {
                        return stale(wrote);
                    }
                }
            }
            Op::BeginAttempt(a) => {
                let mut inserted = begin_attempt(conn, token, a).await?;
                if !inserted {
                    *statements += 1;
                    if !holds(conn, job, token).await? {
                        return stale(wrote);
                    }
                    let Some(hold) = a.hold else {
                        return Err(corrupt("an attempt without a hold was not written"));
                    };
                    // The day's first hold makes its row (or finds it just
                    // made by another transaction), then tries once more.
                    *statements += 2;
                    sqlx::query(
                        "INSERT INTO budget_days (day, cap_usd) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING",
                    )
                    .bind(hold.day)
                    .bind(hold.default_cap)
                    .execute(&mut *conn)
                    .await?;
                    inserted = begin_attempt(conn, token, a).await?;
                    if !inserted {
                        return Ok(Ran::Applied(Applied::Refused));
                    }
                }
            }
            Op::Submitted {
                attempt,
                provider_job_id,
            } => {
                let r = sqlx::query(concat!(
                    "UPDATE attempts SET state = 'submitted', provider_job_id = $2 \
                     WHERE id = $1 AND state = 'submitting' AND job_id = $3 AND ",
                    fence!("$3", "$4")
                ))
                .bind(attempt.0)
                .bind(provider_job_id)
                .bind(job.0)
                .bind(token)
                .execute(&mut *conn)
                .await?;
                if r.rows_affected() == 0 {
                    // Already past `submitting` (a repeat), or the claim is gone.
                    *statements += 1;
                    if !holds(conn, job, token).await? {
                        return stale(wrote);
                    }
                }
            }
            Op::EndAttempt { attempt, outcome } => {
                if !end_attempt(conn, job, token, *attempt, outcome).await? {
                    *statements += 1;
                    if !holds(conn, job, token).await? {
                        return stale(wrote);
                    }
                    // Rule 10: a repeated report leaves outcome and timing
                    // alone and only fills in what was unknown.
                    *statements += 1;
                    refresh_telemetry(conn, job, token, *attempt, outcome).await?;
                }
            }
            Op::Event { kind, detail } => {
                *statements -= 1;
                events.push(Event {
                    job,
                    kind: kind.clone(),
                    detail: detail.clone(),
                });
            }
            op @ (Op::Finish(_) | Op::Park(_)) => {
                match end_job(conn, job, token, op, None, events, statements).await? {
                    Some(j) => stored = Some(Box::new(j)),
                    None => return stale(wrote),
                }
            }
            Op::Release => {
                let r = sqlx::query(
                    "UPDATE jobs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL \
                     WHERE id = $1 AND fencing_token = $2 AND status = 'running'",
                )
                .bind(job.0)
                .bind(token)
                .execute(&mut *conn)
                .await?;
                if r.rows_affected() == 0 {
                    return stale(wrote);
                }
                if let Some(ring) = super::super::RING {
                    *statements += 1;
                    sqlx::query(ring)
                        .bind(job.to_string())
                        .execute(&mut *conn)
                        .await?;
                }
            }
        }
        wrote = true;
    }
    Ok(Ran::Applied(Applied::Done(stored)))
}

/// Rules 7 and 11 in one statement: the attempt is written only while the
/// run holds the job and, when it holds budget, only while the day is not
/// halted and its used, reserved and this hold stay within the cap (the
/// day's row is locked for the check; a trigger adds the hold to it).
async fn begin_attempt(conn: &mut Conn, token: i64, a: &NewAttempt) -> StoreResult<bool> {
    const WITH_HOLD: &str = concat!(
        "INSERT INTO attempts (id, job_id, purpose, provider, endpoint, model, attempt_no, state, \
         idempotency_key, started_at, hold_usd, budget_day) \
         SELECT $1, $2, $3, $4, $5, $6, $7, 'submitting', $8, $9, $11, day FROM budget_days \
         WHERE day = $12 AND NOT halted AND used_usd + reserved_usd + $11 <= cap_usd AND ",
        fence!("$2", "$10"),
        " ",
        for_update!()
    );
    const WITHOUT_HOLD: &str = concat!(
        "INSERT INTO attempts (id, job_id, purpose, provider, endpoint, model, attempt_no, state, \
         idempotency_key, started_at) \
         SELECT $1, $2, $3, $4, $5, $6, $7, 'submitting', $8, $9 WHERE ",
        fence!("$2", "$10")
    );
    let mut q = sqlx::query(if a.hold.is_some() {
        WITH_HOLD
    } else {
        WITHOUT_HOLD
    })
    .bind(a.id.0)
    .bind(a.job_id.0)
    .bind(a.purpose.as_str())
    .bind(&a.provider)
    .bind(&a.endpoint)
    .bind(&a.model)
    .bind(a.attempt_no)
    .bind(&a.idempotency_key)
    .bind(a.started_at)
    .bind(token);
    if let Some(hold) = &a.hold {
        q = q.bind(hold.amount).bind(hold.day);
    }
    Ok(q.execute(&mut *conn).await?.rows_affected() == 1)
}

/// Rule 10: the outcome, once, while the attempt is open; its hold settles
/// at the cost, or stays booked at the estimate when the cost is unknown.
async fn end_attempt(
    conn: &mut Conn,
    job: JobId,
    token: i64,
    attempt: AttemptId,
    o: &AttemptOutcome,
) -> StoreResult<bool> {
    let r = sqlx::query(concat!(
        "UPDATE attempts SET state = $2, provider_job_id = COALESCE($3, provider_job_id), error_class = $4, \
         error = $5, duration_ms = $6, usage = $7, cost_usd = $8, cost_source = $9, finished_at = $10, \
         settled_usd = CASE WHEN hold_usd IS NULL THEN NULL ELSE COALESCE($8, hold_usd) END \
         WHERE id = $1 AND state IN ('submitting', 'submitted') AND job_id = $11 AND ",
        fence!("$11", "$12")
    ))
    .bind(attempt.0)
    .bind(o.end.state().as_str())
    .bind(&o.provider_job_id)
    .bind(&o.error_class)
    .bind(&o.error)
    .bind(o.duration_ms)
    .bind(o.usage.as_ref().map(Json))
    .bind(o.cost.map(|c| c.0))
    .bind(o.cost.map(|c| c.1.as_str()))
    .bind(o.finished_at)
    .bind(job.0)
    .bind(token)
    .execute(&mut *conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// A repeated report: usage and a cost that was unknown are filled in (a
/// settled hold is corrected to the cost); outcome and timing stay.
async fn refresh_telemetry(
    conn: &mut Conn,
    job: JobId,
    token: i64,
    attempt: AttemptId,
    o: &AttemptOutcome,
) -> StoreResult<()> {
    sqlx::query(concat!(
        "UPDATE attempts SET usage = COALESCE($2, usage), \
         cost_source = CASE WHEN cost_usd IS NULL AND $3 IS NOT NULL THEN $4 ELSE cost_source END, \
         settled_usd = CASE WHEN cost_usd IS NULL AND $3 IS NOT NULL AND settled_usd IS NOT NULL THEN $3 \
                            ELSE settled_usd END, \
         cost_usd = COALESCE(cost_usd, $3) \
         WHERE id = $1 AND job_id = $5 AND ",
        fence!("$5", "$6")
    ))
    .bind(attempt.0)
    .bind(o.usage.as_ref().map(Json))
    .bind(o.cost.map(|c| c.0))
    .bind(o.cost.map(|c| c.1.as_str()))
    .bind(job.0)
    .bind(token)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The terminal write (rule 9, with the refund of rule 3) or the park
/// (rule 12); `None` when the run no longer holds the job.
async fn end_job(
    conn: &mut Conn,
    job: JobId,
    token: i64,
    op: &Op,
    progress: Option<&Progress>,
    events: &mut Vec<Event>,
    statements: &mut u64,
) -> StoreResult<Option<Job>> {
    let progress = progress.map(Json);
    let row = match op {
        Op::Finish(finish) => {
            let (status, error, output, lineage) = match finish {
                Finish::Succeeded {
                    output_key,
                    content_type,
                    review,
                    lineage,
                } => (
                    "succeeded",
                    None,
                    Some((output_key, content_type, review.as_ref().map(Json))),
                    *lineage,
                ),
                Finish::Failed(e) => ("failed", Some(Json(e)), None, None),
            };
            let sql = format!(
                "UPDATE jobs SET status = $3, error = $4, completed_at = $5, lease_owner = NULL, \
                 lease_expires_at = NULL, output_key = $6, output_content_type = $7, review = $8, \
                 progress = COALESCE($9, progress) \
                 WHERE id = $1 AND fencing_token = $2 AND status = 'running' RETURNING {JOB_COLUMNS}"
            );
            let Some(row) = sqlx::query(&sql)
                .bind(job.0)
                .bind(token)
                .bind(status)
                .bind(error)
                .bind(Utc::now())
                .bind(output.as_ref().map(|o| o.0))
                .bind(output.as_ref().map(|o| o.1))
                .bind(output.and_then(|o| o.2))
                .bind(progress)
                .fetch_optional(&mut *conn)
                .await?
            else {
                return Ok(None);
            };
            if status == "failed" {
                *statements += 2;
                super::jobs::refund_in(conn, job, Utc::now()).await?;
            }
            if let Some(effect) = lineage {
                let ended = job_from_row(&row)?;
                *statements +=
                    super::lineage::end_repair_in(conn, &ended, effect, Utc::now()).await?;
            }
            row
        }
        Op::Park(p) => {
            let sql = format!(
                "UPDATE jobs SET status = 'parked', lease_owner = NULL, lease_expires_at = NULL, \
                 progress = COALESCE($3, progress) \
                 WHERE id = $1 AND fencing_token = $2 AND status = 'running' RETURNING {JOB_COLUMNS}"
            );
            let Some(row) = sqlx::query(&sql)
                .bind(job.0)
                .bind(token)
                .bind(progress)
                .fetch_optional(&mut *conn)
                .await?
            else {
                return Ok(None);
            };
            *statements += 1;
            let now = Utc::now();
            // A recovery that parks again returns its record to the queue in
            // the next round (its failure goes on the timeline); otherwise
            // the job gets its one new record.
            let reopened = sqlx::query(
                "UPDATE parked SET state = 'open', stage = $2, evidence = $3, \
                 provider = COALESCE($4, provider), model = COALESCE($5, model), \
                 provider_job_id = COALESCE($6, provider_job_id), attempt_id = COALESCE($7, attempt_id), \
                 polls = polls + $8, deliveries = deliveries + $9, round = round + 1, updated_at = $10 \
                 WHERE job_id = $1 AND state IN ('decided', 'recovering') RETURNING id, round",
            )
            .bind(job.0)
            .bind(p.stage.as_str())
            .bind(Json(&p.evidence))
            .bind(&p.provider)
            .bind(&p.model)
            .bind(&p.provider_job_id)
            .bind(p.attempt_id.map(|a| a.0))
            .bind(p.polls)
            .bind(p.deliveries)
            .bind(now)
            .fetch_optional(&mut *conn)
            .await?;
            *statements += 1;
            if let Some(r) = reopened {
                let (parked, round): (uuid::Uuid, i32) = (r.try_get("id")?, r.try_get("round")?);
                sqlx::query(
                    "UPDATE parked_decisions SET recovery_state = 'failed', recovery_ended_at = $3 \
                     WHERE parked_id = $1 AND round = $2 AND recovery_state IN ('pending', 'claimed')",
                )
                .bind(parked)
                .bind(round - 1)
                .bind(now)
                .execute(&mut *conn)
                .await?;
                *statements += 1;
                events.push(Event {
                    job,
                    kind: "recovery_failed".into(),
                    detail: serde_json::json!({"stage": p.stage.as_str(), "reason": p.evidence["reason"]}),
                });
            } else {
                sqlx::query(
                    "INSERT INTO parked (id, job_id, stage, evidence, provider, model, provider_job_id, \
                     attempt_id, polls, deliveries, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)",
                )
                .bind(uuid::Uuid::new_v4())
                .bind(job.0)
                .bind(p.stage.as_str())
                .bind(Json(&p.evidence))
                .bind(&p.provider)
                .bind(&p.model)
                .bind(&p.provider_job_id)
                .bind(p.attempt_id.map(|a| a.0))
                .bind(p.polls)
                .bind(p.deliveries)
                .bind(now)
                .execute(&mut *conn)
                .await?;
                *statements += 1;
            }
            // The timeline says why in words; the evidence is on the record.
            let mut detail =
                serde_json::json!({"stage": p.stage.as_str(), "reason": p.evidence["reason"]});
            if let Some(id) = &p.provider_job_id {
                detail["provider_job_id"] = serde_json::json!(id);
            }
            events.push(Event {
                job,
                kind: "parked".into(),
                detail,
            });
            row
        }
        _ => return Err(corrupt("only a terminal write or a park ends a run")),
    };
    let job = job_from_row(&row)?;
    // Rule 13: what it announces goes in the same transaction.
    *statements += super::webhooks::write_outbox(conn, &job, Utc::now()).await?;
    Ok(Some(job))
}

/// The batch's explicit events, a few hundred rows a statement. Returns how
/// many statements that took.
async fn insert_events(conn: &mut Conn, events: &[Event]) -> StoreResult<u64> {
    let at = Utc::now();
    let mut statements = 0;
    for chunk in events.chunks(EVENTS_PER_STATEMENT) {
        let mut sql =
            String::from("INSERT INTO job_events (job_id, kind, detail, created_at) VALUES ");
        for i in 0..chunk.len() {
            let n = i * 4;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("(${}, ${}, ${}, ${})", n + 1, n + 2, n + 3, n + 4));
        }
        let mut q = sqlx::query(&sql).persistent(false);
        for e in chunk {
            q = q.bind(e.job.0).bind(&e.kind).bind(Json(&e.detail)).bind(at);
        }
        q.execute(&mut *conn).await?;
        statements += 1;
    }
    Ok(statements)
}
