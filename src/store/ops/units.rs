//! Units of work (DESIGN.md, "How a job commits"): the writes a run makes
//! after its claim, applied many runs at a time in one transaction. Each
//! unit's ops name its fencing token: the first op that finds the token
//! stale stops the unit, and it writes nothing; the others commit. On
//! PostgreSQL the first check locks the job's row, so the token cannot move
//! before the transaction commits.

use super::super::{col, Query};
use super::*;
use chrono::Utc;

/// How often a batch that met a deadlock or serialization failure is
/// applied again before its units are applied one by one.
const TRANSIENT_RETRIES_MAX: u32 = 3;

/// How many jobs one locking read names at most.
const JOBS_PER_LOCK: usize = 500;

/// How many explicit events go in one statement (four parameters each).
const EVENTS_PER_STATEMENT: usize = 200;

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

impl Event {
    fn of(job: JobId, happening: &Happening) -> Event {
        let (kind, detail) = happening.to_stored();
        Event { job, kind, detail }
    }
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
                // No connection: applying each unit alone would only wait
                // for one again, once per unit (minutes, in an outage).
                Err(e) if e.is_unreachable() => {
                    let why = e.to_string();
                    let mut out = vec![Err(e)];
                    out.extend((1..units.len()).map(|_| {
                        Err(StoreError::Database(sqlx::Error::Io(
                            std::io::Error::other(why.clone()),
                        )))
                    }));
                    return out;
                }
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
        let mut statements = 0u64;
        let held = holders(&mut tx, units, skip, &mut statements).await?;
        let mut going: Vec<Going> = units
            .iter()
            .zip(held)
            .map(|(unit, held)| Going {
                unit,
                steps: steps(&unit.ops),
                next: 0,
                wrote: false,
                ended: (!held).then_some(Applied::Stale),
                stored: None,
                events: Vec::new(),
            })
            .collect();
        // Phase by phase: the next step of every unit still going, grouped
        // by kind, one statement per kind. A unit's own steps keep their
        // order; different units' steps touch different jobs.
        loop {
            let phase = next_phase(&mut going);
            if phase.is_empty() {
                break;
            }
            let moved = apply_phase(&mut tx, phase, &mut going, &mut statements).await?;
            if let Some(redo) = advance(&mut going, &moved) {
                return Ok(Batch::Redo(redo));
            }
        }
        // Rule 13: what the ended jobs announce goes in the same transaction.
        let ended: Vec<&Job> = going.iter().filter_map(|g| g.stored.as_deref()).collect();
        statements +=
            super::within::write_outbox_many(&mut tx, self.envelope, &ended, Utc::now()).await?;
        let (events, applied) = settle(going);
        statements += insert_events(&mut tx, &events).await?;
        tx.commit().await?;
        self.committed(Purpose::Units, statements);
        Ok(Batch::Committed(applied))
    }
}

/// The next step of every unit still going, grouped by kind. Events take
/// no statement: they go in with the batch's last.
fn next_phase<'a>(going: &mut [Going<'a>]) -> Phase<'a> {
    let mut phase = Phase::default();
    for (i, g) in going.iter_mut().enumerate() {
        if g.ended.is_some() {
            continue;
        }
        // Events take no statement: they go in with the batch's last.
        while let Some(Step::Op(Op::Event(happening))) = g.steps.get(g.next) {
            g.events.push(Event::of(g.unit.job, happening));
            g.next += 1;
        }
        let Some(step) = g.steps.get(g.next).copied() else {
            continue;
        };
        let (job, token) = (g.unit.job, g.unit.token);
        match step {
            Step::Op(Op::Progress(p)) => phase.progress.push((i, job, token, p)),
            Step::Op(Op::BeginAttempt(a)) => phase.begin.push((i, token, a)),
            Step::Op(Op::Submitted {
                attempt,
                provider_job_id,
            }) => phase
                .submitted
                .push((i, job, token, *attempt, provider_job_id)),
            Step::Op(Op::EndAttempt { attempt, outcome }) => {
                phase.ended.push((i, job, token, *attempt, outcome))
            }
            Step::End(
                Op::Finish(Finish::Succeeded {
                    output_key,
                    content_type,
                    review,
                    lineage,
                }),
                progress,
            ) => phase.succeeded.push(Succeeded {
                unit: i,
                job,
                token,
                output_key,
                content_type,
                review: review.as_ref(),
                lineage: *lineage,
                progress,
            }),
            _ => phase.one_by_one.push(i),
        }
    }
    phase
}

/// Writes one phase, one statement per kind of step; which units moved
/// (a unit whose fence moved, or whose reservation was refused, did not).
async fn apply_phase(
    tx: &mut Conn,
    phase: Phase<'_>,
    going: &mut [Going<'_>],
    statements: &mut u64,
) -> StoreResult<Vec<bool>> {
    let mut moved = vec![false; going.len()];
    if !phase.progress.is_empty() {
        let rows: Vec<_> = phase.progress.iter().map(|r| (r.1, r.2, r.3)).collect();
        let took = progress_many(&mut *tx, &rows, statements).await?;
        for (i, job, ..) in &phase.progress {
            moved[*i] = took.contains(&job.0);
        }
    }
    if !phase.begin.is_empty() {
        let rows: Vec<_> = phase.begin.iter().map(|r| (r.1, r.2)).collect();
        let took = begin_many(&mut *tx, &rows, statements).await?;
        for (i, _, a) in &phase.begin {
            if took.contains(&a.id.0) {
                moved[*i] = true;
            } else {
                // The day is halted or its cap too close: this op
                // and the ones after it write nothing (rule 11).
                going[*i].ended = Some(Applied::Refused);
            }
        }
    }
    if !phase.submitted.is_empty() {
        let rows: Vec<_> = phase
            .submitted
            .iter()
            .map(|r| (r.1, r.2, r.3, r.4.as_str()))
            .collect();
        submitted_many(&mut *tx, &rows, statements).await?;
        // One not updated is a repeat: it is past `submitting`.
        for (i, ..) in &phase.submitted {
            moved[*i] = true;
        }
    }
    if !phase.ended.is_empty() {
        let rows: Vec<_> = phase.ended.iter().map(|r| (r.1, r.2, r.3, r.4)).collect();
        let took = end_many(&mut *tx, &rows, statements).await?;
        for (i, job, token, attempt, outcome) in &phase.ended {
            if !took.contains(&attempt.0) {
                // Rule 10: a repeated report leaves outcome and
                // timing alone and only fills in what was unknown.
                *statements += 1;
                refresh_telemetry(&mut *tx, *job, *token, *attempt, outcome).await?;
            }
            moved[*i] = true;
        }
    }
    if !phase.succeeded.is_empty() {
        apply_successes(tx, &phase.succeeded, going, &mut moved, statements).await?;
    }
    for i in phase.one_by_one {
        let g = &mut going[i];
        let step = g.steps[g.next];
        if let Some(stored) =
            apply_one_by_one(&mut *tx, g.unit, step, &mut g.events, statements).await?
        {
            if let Some(job) = stored {
                g.stored = Some(Box::new(job));
            }
            moved[i] = true;
        }
    }
    Ok(moved)
}

/// The phase's terminal successes in one statement (rule 9: the first
/// terminal write wins); a repair's success moves its lineage too.
async fn apply_successes(
    tx: &mut Conn,
    succeeded: &[Succeeded<'_>],
    going: &mut [Going<'_>],
    moved: &mut [bool],
    statements: &mut u64,
) -> StoreResult<()> {
    let ended = succeeded_many(&mut *tx, succeeded, statements).await?;
    for s in succeeded {
        if let Some(job) = ended.iter().find(|j| j.id == s.job) {
            if let Some(effect) = s.lineage {
                *statements +=
                    super::within::end_repair_in(&mut *tx, job, effect, Utc::now()).await?;
            }
            going[s.unit].stored = Some(Box::new(job.clone()));
            moved[s.unit] = true;
        }
    }
    Ok(())
}

/// Moves every unit that wrote to its next step, and ends one that did not
/// (stale). Some(unit) when a unit that had written lost its fence: the
/// batch is applied again without it.
fn advance(going: &mut [Going<'_>], moved: &[bool]) -> Option<usize> {
    for (i, g) in going.iter_mut().enumerate() {
        if g.ended.is_some() || g.next >= g.steps.len() {
            continue;
        }
        if moved[i] {
            g.next += 1;
            g.wrote = true;
        } else if g.wrote {
            // The token moved after the unit had written (it cannot
            // while its row is locked): apply the batch again without it.
            return Some(i);
        } else {
            g.ended = Some(Applied::Stale);
        }
    }
    None
}

/// What each unit came to, and the events of those that were not stale.
fn settle(going: Vec<Going<'_>>) -> (Vec<Event>, Vec<Applied>) {
    let mut events = Vec::new();
    let mut applied = Vec::with_capacity(going.len());
    for g in going {
        match g.ended {
            Some(Applied::Stale) => applied.push(Applied::Stale),
            Some(a) => {
                events.extend(g.events);
                applied.push(a);
            }
            None => {
                events.extend(g.events);
                applied.push(Applied::Done(g.stored));
            }
        }
    }
    (events, applied)
}

/// One step of a unit as a batch applies it: an op, or a terminal write or
/// park together with the progress written with it.
#[derive(Clone, Copy)]
enum Step<'a> {
    Op(&'a Op),
    End(&'a Op, Option<&'a Progress>),
}

fn steps(ops: &[Op]) -> Vec<Step<'_>> {
    let mut out = Vec::with_capacity(ops.len());
    let mut ops = ops.iter().peekable();
    while let Some(op) = ops.next() {
        match op {
            Op::Progress(p) => match ops.next_if(|o| matches!(o, Op::Finish(_) | Op::Park(_))) {
                Some(end) => out.push(Step::End(end, Some(p))),
                None => out.push(Step::Op(op)),
            },
            Op::Finish(_) | Op::Park(_) => out.push(Step::End(op, None)),
            _ => out.push(Step::Op(op)),
        }
    }
    out
}

/// Where a unit stands in its batch.
struct Going<'a> {
    unit: &'a Unit,
    steps: Vec<Step<'a>>,
    next: usize,
    wrote: bool,
    /// Why it stopped early: `Stale` (nothing written) or `Refused`.
    ended: Option<Applied>,
    stored: Option<Box<Job>>,
    events: Vec<Event>,
}

/// A terminal write that succeeded, as one row of `succeeded_many`.
struct Succeeded<'a> {
    unit: usize,
    job: JobId,
    token: i64,
    output_key: &'a String,
    content_type: &'a String,
    review: Option<&'a Review>,
    lineage: Option<crate::model::LineageEffect>,
    progress: Option<&'a Progress>,
}

/// The next step of every unit still going, by kind.
#[derive(Default)]
struct Phase<'a> {
    progress: Vec<(usize, JobId, i64, &'a Progress)>,
    begin: Vec<(usize, i64, &'a NewAttempt)>,
    submitted: Vec<(usize, JobId, i64, AttemptId, &'a String)>,
    ended: Vec<(usize, JobId, i64, AttemptId, &'a AttemptOutcome)>,
    succeeded: Vec<Succeeded<'a>>,
    /// Failures, parks and releases: rare, each its own statements.
    one_by_one: Vec<usize>,
}

impl Phase<'_> {
    fn is_empty(&self) -> bool {
        self.progress.is_empty()
            && self.begin.is_empty()
            && self.submitted.is_empty()
            && self.ended.is_empty()
            && self.succeeded.is_empty()
            && self.one_by_one.is_empty()
    }
}

/// Which units' runs still hold their jobs, read before anything is
/// written. On PostgreSQL it locks every unit's job row, in one order: a
/// cancel (job, then the day's budget row through its triggers) can then
/// never hold a job this batch waits for while waiting for the budget row
/// this batch holds, and no token can move before the batch commits. On
/// SQLite the one writer serialises the same.
async fn holders(
    conn: &mut Conn,
    units: &[Unit],
    skip: &[bool],
    statements: &mut u64,
) -> StoreResult<Vec<bool>> {
    let mut jobs: Vec<uuid::Uuid> = units
        .iter()
        .zip(skip)
        .filter(|(_, s)| !**s)
        .map(|(u, _)| u.job.0)
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    let mut tokens = std::collections::HashMap::new();
    for chunk in jobs.chunks(JOBS_PER_LOCK) {
        let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            concat!(
                "SELECT id, fencing_token FROM jobs WHERE id IN ({}) AND status = 'running' ORDER BY id ",
                for_update!()
            ),
            marks.join(", ")
        );
        let mut q = sqlx::query(&sql).persistent(false);
        for j in chunk {
            q = q.bind(j);
        }
        for row in q.fetch_all(&mut *conn).await? {
            let id: uuid::Uuid = row.try_get("id")?;
            let token: i64 = row.try_get("fencing_token")?;
            tokens.insert(id, token);
        }
        *statements += 1;
    }
    Ok(units
        .iter()
        .zip(skip)
        .map(|(u, s)| !*s && tokens.get(&u.job.0) == Some(&u.token))
        .collect())
}

/// Runs one set-based statement (`rows!`) over `items`: on PostgreSQL once,
/// each column bound as an array; on SQLite once per item. Returns the rows
/// it returned.
async fn each<'q, T>(
    conn: &mut Conn,
    sql: &'q str,
    items: &'q [T],
    bind: impl Fn(Query<'q>, &'q [T]) -> Query<'q>,
    statements: &mut u64,
) -> StoreResult<Vec<Row>> {
    let mut out = Vec::new();
    for chunk in super::super::row_chunks(items) {
        out.extend(bind(sqlx::query(sql), chunk).fetch_all(&mut *conn).await?);
        *statements += 1;
    }
    Ok(out)
}

fn ids(rows: &[Row]) -> StoreResult<std::collections::HashSet<uuid::Uuid>> {
    rows.iter()
        .map(|r| Ok(r.try_get::<uuid::Uuid, _>("id")?))
        .collect()
}

/// Progress on its own (no terminal write follows in the unit).
async fn progress_many(
    conn: &mut Conn,
    rows: &[(JobId, i64, &Progress)],
    statements: &mut u64,
) -> StoreResult<std::collections::HashSet<uuid::Uuid>> {
    const SQL: &str = concat!(
        "UPDATE jobs SET progress = v.p_progress FROM ",
        rows!("$1" p_job, "$2" p_token, "$3" p_progress),
        " WHERE jobs.id = v.p_job AND jobs.fencing_token = v.p_token AND jobs.status = 'running' RETURNING id"
    );
    let out = each(
        conn,
        SQL,
        rows,
        |q, r| {
            let q = col(q, r, |x| x.0 .0);
            let q = col(q, r, |x| x.1);
            col(q, r, |x| Json(x.2))
        },
        statements,
    )
    .await?;
    ids(&out)
}

/// New attempts that hold part of their day's budget: admitted together
/// only while the day is not halted and the running sum of their holds
/// stays under its cap (rule 11), each under its run's fence.
const WITH_HOLD: &str = concat!(
    "INSERT INTO attempts (id, job_id, purpose, provider, endpoint, model, attempt_no, state, \
     idempotency_key, started_at, hold_usd, budget_day) \
     SELECT w.b_id, w.b_job, w.b_purpose, w.b_provider, w.b_endpoint, w.b_model, w.b_no, 'submitting', \
     w.b_key, w.b_at, w.b_hold, b.day \
     FROM (SELECT v.*, SUM(v.b_hold) OVER (PARTITION BY v.b_day ORDER BY v.b_ord) AS b_running FROM ",
    rows!(
        "$1" b_id, "$2" b_job, "$3" b_purpose, "$4" b_provider, "$5" b_endpoint, "$6" b_model,
        "$7" b_no, "$8" b_key, "$9" b_at, "$10" b_token, "$11" b_hold, "$12" b_day, "$13" b_ord
    ),
    ") w JOIN budget_days b ON b.day = w.b_day \
     WHERE NOT b.halted AND b.used_usd + b.reserved_usd + w.b_running <= b.cap_usd AND ",
    fence!("w.b_job", "w.b_token"),
    " ",
    for_update_of!("b"),
    " RETURNING id"
);

/// New attempts that hold nothing (checker calls priced at nothing),
/// each under its run's fence.
const WITHOUT_HOLD: &str = concat!(
    "INSERT INTO attempts (id, job_id, purpose, provider, endpoint, model, attempt_no, state, \
     idempotency_key, started_at) \
     SELECT v.b_id, v.b_job, v.b_purpose, v.b_provider, v.b_endpoint, v.b_model, v.b_no, 'submitting', \
     v.b_key, v.b_at FROM ",
    rows!(
        "$1" b_id, "$2" b_job, "$3" b_purpose, "$4" b_provider, "$5" b_endpoint, "$6" b_model,
        "$7" b_no, "$8" b_key, "$9" b_at, "$10" b_token
    ),
    " WHERE ",
    fence!("v.b_job", "v.b_token"),
    " RETURNING id"
);

/// Rules 7 and 11 in one statement per kind: an attempt is written only
/// while its run holds the job and, when it holds budget, only while its day
/// is not halted and the day's used and reserved amounts, plus this hold and
/// the batch's holds before it, stay within the cap (the day's row is locked
/// for the check; a trigger adds the holds to it). What that refuses is tried
/// again one by one, after a day without a row gets one. Returns the
/// attempts written.
async fn begin_many(
    conn: &mut Conn,
    rows: &[(i64, &NewAttempt)],
    statements: &mut u64,
) -> StoreResult<std::collections::HashSet<uuid::Uuid>> {
    let (held, free): (Vec<_>, Vec<_>) = rows.iter().copied().partition(|r| r.1.hold.is_some());
    let mut took = std::collections::HashSet::new();
    if !free.is_empty() {
        let free: Vec<(i64, &NewAttempt, ())> = free.into_iter().map(|(t, a)| (t, a, ())).collect();
        let out = each(conn, WITHOUT_HOLD, &free, bind_attempt, statements).await?;
        took.extend(ids(&out)?);
    }
    if held.is_empty() {
        return Ok(took);
    }
    let first = begin_holding(conn, WITH_HOLD, &held, statements).await?;
    let refused: Vec<_> = held
        .into_iter()
        .filter(|r| !first.contains(&r.1.id.0))
        .collect();
    took.extend(first);
    if refused.is_empty() {
        return Ok(took);
    }
    // The day's first hold makes its row (or finds it just made by another
    // transaction), then what was refused tries once more.
    let holds: Vec<&Hold> = refused.iter().filter_map(|r| r.1.hold.as_ref()).collect();
    ensure_budget_days_in(conn, holds, statements).await?;
    // One at a time, in order: exactly what applying the units one by one
    // would admit (a smaller hold after a refused one may still fit). Only
    // a day at its cap or halted gets here.
    for r in refused {
        took.extend(begin_holding(conn, WITH_HOLD, &[r], statements).await?);
    }
    Ok(took)
}

/// Each day these holds fall on has its row, at its default cap.
async fn ensure_budget_days_in(
    conn: &mut Conn,
    mut days: Vec<&Hold>,
    statements: &mut u64,
) -> StoreResult<()> {
    days.sort_by_key(|h| h.day);
    days.dedup_by_key(|h| h.day);
    for hold in days {
        sqlx::query(
            "INSERT INTO budget_days (day, cap_usd) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING",
        )
        .bind(hold.day)
        .bind(hold.default_cap)
        .execute(&mut *conn)
        .await?;
        *statements += 1;
    }
    Ok(())
}

/// The columns every new attempt binds (`$1` to `$10`).
fn bind_attempt<'q, X>(q: Query<'q>, r: &'q [(i64, &NewAttempt, X)]) -> Query<'q> {
    let q = col(q, r, |x| x.1.id.0);
    let q = col(q, r, |x| x.1.job_id.0);
    let q = col(q, r, |x| x.1.purpose.as_str());
    let q = col(q, r, |x| x.1.provider.as_str());
    let q = col(q, r, |x| x.1.endpoint.as_deref());
    let q = col(q, r, |x| x.1.model.as_str());
    let q = col(q, r, |x| x.1.attempt_no);
    let q = col(q, r, |x| x.1.idempotency_key.as_str());
    let q = col(q, r, |x| x.1.started_at);
    col(q, r, |x| x.0)
}

/// Attempts that hold budget, with their place in the batch (the order in
/// which the day's cap admits them).
async fn begin_holding(
    conn: &mut Conn,
    sql: &str,
    rows: &[(i64, &NewAttempt)],
    statements: &mut u64,
) -> StoreResult<std::collections::HashSet<uuid::Uuid>> {
    let rows: Vec<(i64, &NewAttempt, i32)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.0, r.1, i as i32))
        .collect();
    let out = each(
        conn,
        sql,
        &rows,
        |q, r| {
            let q = bind_attempt(q, r);
            let q = col(q, r, |x| x.1.hold.as_ref().map(|h| h.amount));
            let q = col(q, r, |x| x.1.hold.as_ref().map(|h| h.day));
            col(q, r, |x| x.2)
        },
        statements,
    )
    .await?;
    ids(&out)
}

// fenced_first: an attempts update joins its rows to `attempts`, and its
// fence (a locking look at the job) was a filter on those rows. Planned from
// statistics taken while the table was nearly empty, PostgreSQL put the rows
// inside a nested loop under a scan of `attempts`, and ran the fence once per
// pair: seconds a statement, in about one drain in four. Fenced in a
// materialized set first, each row's fence runs once, whatever the plan.

/// Rule 7: the provider accepted these attempts under these ids.
async fn submitted_many(
    conn: &mut Conn,
    rows: &[(JobId, i64, AttemptId, &str)],
    statements: &mut u64,
) -> StoreResult<()> {
    // The fence is checked once per row, before the join: see `fenced_first`.
    const SQL: &str = concat!(
        "WITH v AS MATERIALIZED (SELECT * FROM ",
        rows!("$1" s_id, "$2" s_provider_job_id, "$3" s_job, "$4" s_token),
        " WHERE ",
        fence!("v.s_job", "v.s_token"),
        ") UPDATE attempts SET state = 'submitted', provider_job_id = v.s_provider_job_id FROM v",
        " WHERE attempts.id = v.s_id AND attempts.state = 'submitting' AND attempts.job_id = v.s_job"
    );
    each(
        conn,
        SQL,
        rows,
        |q, r| {
            let q = col(q, r, |x| x.2 .0);
            let q = col(q, r, |x| x.3);
            let q = col(q, r, |x| x.0 .0);
            col(q, r, |x| x.1)
        },
        statements,
    )
    .await?;
    Ok(())
}

/// Rule 10: each outcome, once, while its attempt is open; its hold settles
/// at the cost, or stays booked at the estimate when the cost is unknown.
/// Returns the attempts it ended.
async fn end_many(
    conn: &mut Conn,
    rows: &[(JobId, i64, AttemptId, &AttemptOutcome)],
    statements: &mut u64,
) -> StoreResult<std::collections::HashSet<uuid::Uuid>> {
    // The fence is checked once per row, before the join: see `fenced_first`.
    const SQL: &str = concat!(
        "WITH v AS MATERIALIZED (SELECT * FROM ",
        rows!(
            "$1" e_id, "$2" e_state, "$3" e_provider_job_id, "$4" e_class, "$5" e_error, "$6" e_ms,
            "$7" e_usage, "$8" e_cost, "$9" e_source, "$10" e_at, "$11" e_job, "$12" e_token
        ),
        " WHERE ",
        fence!("v.e_job", "v.e_token"),
        ") UPDATE attempts SET state = v.e_state, provider_job_id = COALESCE(v.e_provider_job_id, attempts.provider_job_id), \
         error_class = v.e_class, error = v.e_error, duration_ms = v.e_ms, usage = v.e_usage, cost_usd = v.e_cost, \
         cost_source = v.e_source, finished_at = v.e_at, \
         settled_usd = CASE WHEN attempts.hold_usd IS NULL THEN NULL ELSE COALESCE(v.e_cost, attempts.hold_usd) END \
         FROM v",
        " WHERE attempts.id = v.e_id AND attempts.state IN ('submitting', 'submitted') AND attempts.job_id = v.e_job",
        " RETURNING id"
    );
    let out = each(
        conn,
        SQL,
        rows,
        |q, r| {
            let q = col(q, r, |x| x.2 .0);
            let q = col(q, r, |x| x.3.end.state().as_str());
            let q = col(q, r, |x| x.3.provider_job_id.as_deref());
            let q = col(q, r, |x| {
                x.3.error_class.map(crate::model::ErrorClass::as_str)
            });
            let q = col(q, r, |x| x.3.error.as_deref().map(scrub::text));
            let q = col(q, r, |x| x.3.duration_ms);
            let q = col(q, r, |x| x.3.usage.as_ref().map(Json));
            let q = col(q, r, |x| x.3.cost.map(|c| c.0));
            let q = col(q, r, |x| x.3.cost.map(|c| c.1.as_str()));
            let q = col(q, r, |x| x.3.finished_at);
            let q = col(q, r, |x| x.0 .0);
            col(q, r, |x| x.1)
        },
        statements,
    )
    .await?;
    ids(&out)
}

/// Rule 9's terminal write for runs that succeeded, with their progress.
/// Returns the jobs it ended, as stored.
async fn succeeded_many(
    conn: &mut Conn,
    rows: &[Succeeded<'_>],
    statements: &mut u64,
) -> StoreResult<Vec<Job>> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| {
        format!(
            concat!(
                "UPDATE jobs SET status = 'succeeded', error = NULL, completed_at = v.f_at, lease_owner = NULL, \
                 lease_expires_at = NULL, output_key = v.f_key, output_content_type = v.f_type, review = v.f_review, \
                 progress = COALESCE(v.f_progress, jobs.progress) FROM ",
                rows!("$1" f_job, "$2" f_token, "$3" f_at, "$4" f_key, "$5" f_type, "$6" f_review, "$7" f_progress),
                " WHERE jobs.id = v.f_job AND jobs.fencing_token = v.f_token AND jobs.status = 'running' RETURNING {}"
            ),
            JOB_COLUMNS
        )
    });
    let at = Utc::now();
    let out = each(
        conn,
        sql,
        rows,
        |q, r| {
            let q = col(q, r, |x| x.job.0);
            let q = col(q, r, |x| x.token);
            let q = col(q, r, |_| at);
            let q = col(q, r, |x| x.output_key.as_str());
            let q = col(q, r, |x| x.content_type.as_str());
            let q = col(q, r, |x| x.review.map(Json));
            col(q, r, |x| x.progress.map(Json))
        },
        statements,
    )
    .await?;
    out.iter().map(job_from_row).collect()
}

/// A step no set-based statement takes (a failure with its refund, a park,
/// a release, progress between them): `None` when the run no longer holds
/// the job, else the job as stored when the step ended it.
async fn apply_one_by_one(
    conn: &mut Conn,
    unit: &Unit,
    step: Step<'_>,
    events: &mut Vec<Event>,
    statements: &mut u64,
) -> StoreResult<Option<Option<Job>>> {
    let (job, token) = (unit.job, unit.token);
    *statements += 1;
    match step {
        Step::End(op, progress) => Ok(end_job(conn, job, token, op, progress, events, statements)
            .await?
            .map(Some)),
        Step::Op(Op::Release) => {
            let r = sqlx::query(
                "UPDATE jobs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL \
                 WHERE id = $1 AND fencing_token = $2 AND status = 'running'",
            )
            .bind(job.0)
            .bind(token)
            .execute(&mut *conn)
            .await?;
            if r.rows_affected() == 0 {
                return Ok(None);
            }
            if let Some(ring) = super::super::RING {
                *statements += 1;
                sqlx::query(ring)
                    .bind(job.to_string())
                    .execute(&mut *conn)
                    .await?;
            }
            Ok(Some(None))
        }
        Step::Op(_) => Err(corrupt("a step with a set-based statement came one by one")),
    }
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

/// A failed run's terminal write (rule 9, with the refund of rule 3) or the
/// park (rule 12); `None` when the run no longer holds the job.
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
        Op::Finish(Finish::Failed(error)) => {
            fail_job_in(conn, job, token, error, progress, statements).await?
        }
        Op::Park(p) => park_job_in(conn, job, token, p, progress, events, statements).await?,
        _ => return Err(corrupt("a success ends its run in `succeeded_many`")),
    };
    row.as_ref().map(job_from_row).transpose()
}

/// A run's failure: the job's terminal write under its fence, and its
/// refund in the same transaction (rule 3). `None` when the fence moved.
async fn fail_job_in(
    conn: &mut Conn,
    job: JobId,
    token: i64,
    error: &crate::model::JobFailure,
    progress: Option<Json<&Progress>>,
    statements: &mut u64,
) -> StoreResult<Option<Row>> {
    let sql = format!(
        "UPDATE jobs SET status = 'failed', error = $3, completed_at = $4, lease_owner = NULL, \
         lease_expires_at = NULL, progress = COALESCE($5, progress) \
         WHERE id = $1 AND fencing_token = $2 AND status = 'running' RETURNING {JOB_COLUMNS}"
    );
    let Some(row) = sqlx::query(&sql)
        .bind(job.0)
        .bind(token)
        .bind(Json(error.scrubbed()))
        .bind(Utc::now())
        .bind(progress)
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    *statements += 2;
    super::within::refund_in(conn, job, Utc::now()).await?;
    Ok(Some(row))
}

/// A run that cannot know whether it was paid parks its job (rule 12):
/// the job leaves the run under its fence, and the record and timeline say
/// why. `None` when the fence moved.
async fn park_job_in(
    conn: &mut Conn,
    job: JobId,
    token: i64,
    p: &NewParked,
    progress: Option<Json<&Progress>>,
    events: &mut Vec<Event>,
    statements: &mut u64,
) -> StoreResult<Option<Row>> {
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
    // Back to `submission_uncertain` (a resumed poll the provider
    // answered "no such job"): the id it was checked under was
    // wrong, so the record and its attempt forget it, and a
    // reconcile can attach the right one.
    if p.stage == ParkedStage::SubmissionUncertain {
        if let Some(a) = p.attempt_id {
            sqlx::query(
                "UPDATE attempts SET state = 'submitting', provider_job_id = NULL \
                 WHERE id = $1 AND job_id = $2 AND state = 'submitted'",
            )
            .bind(a.0)
            .bind(job.0)
            .execute(&mut *conn)
            .await?;
            *statements += 1;
        }
    }
    park_record_in(conn, job, p, now, events, statements).await?;
    // The timeline says why in words; the evidence is on the record.
    let parked = Happening::Parked {
        stage: p.stage,
        reason: parked_reason(p),
        provider_job_id: p.provider_job_id.clone(),
    };
    events.push(Event::of(job, &parked));
    Ok(Some(row))
}

/// A recovery that parks again returns its record to the queue in the
/// next round (its failure goes on the timeline); otherwise the job gets
/// its one new record.
async fn park_record_in(
    conn: &mut Conn,
    job: JobId,
    p: &NewParked,
    now: chrono::DateTime<Utc>,
    events: &mut Vec<Event>,
    statements: &mut u64,
) -> StoreResult<()> {
    let reopened = sqlx::query(
        "UPDATE parked SET state = 'open', stage = $2, evidence = $3, \
         provider = COALESCE($4, provider), model = COALESCE($5, model), \
         provider_job_id = CASE WHEN $2 = 'submission_uncertain' THEN NULL \
                                ELSE COALESCE($6, provider_job_id) END, \
         attempt_id = COALESCE($7, attempt_id), \
         polls = polls + $8, deliveries = deliveries + $9, round = round + 1, updated_at = $10 \
         WHERE job_id = $1 AND state IN ('decided', 'recovering') RETURNING id, round",
    )
    .bind(job.0)
    .bind(p.stage.as_str())
    .bind(Json(scrub::json(&p.evidence.to_json())))
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
        let failed = Happening::RecoveryFailed {
            stage: p.stage,
            reason: parked_reason(p),
        };
        events.push(Event::of(job, &failed));
    } else {
        sqlx::query(
            "INSERT INTO parked (id, job_id, stage, evidence, provider, model, provider_job_id, \
             attempt_id, polls, deliveries, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(job.0)
        .bind(p.stage.as_str())
        .bind(Json(scrub::json(&p.evidence.to_json())))
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
    Ok(())
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
            q = q
                .bind(e.job.0)
                .bind(&e.kind)
                .bind(Json(scrub::json(&e.detail)))
                .bind(at);
        }
        q.execute(&mut *conn).await?;
        statements += 1;
    }
    Ok(statements)
}

/// The parked evidence's reason in words, for the timeline.
fn parked_reason(p: &NewParked) -> Option<String> {
    Some(p.evidence.reason.clone()).filter(|r| !r.is_empty())
}
