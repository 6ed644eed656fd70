//! Parked work (rule 12): the reviewer queue, and decisions. A decision is
//! one transaction: the record is locked, the latest decision compared
//! (the same one again is answered with the first), the stage's permission
//! checked, the decision inserted under the record's round (one per round,
//! a unique index), and what it does applied with it. Recoveries are
//! claimed and closed by triggers on the job (migration 0008).

use super::*;
use chrono::{DateTime, Utc};

impl Backend {
    /// Parked records, filtered, in the filter's order, from a cursor
    /// either way.
    pub async fn list_parked(&self, f: &ParkedFilter) -> StoreResult<Vec<Parked>> {
        let mut q = sqlx::QueryBuilder::<Db>::new("SELECT *");
        parked_from(&mut q, f);
        // Before a position the list is read the other way round, nearest
        // first, so that the limit keeps the rows next to it.
        let back = matches!(f.seek, Some(Seek::Before(_)));
        let order = match (f.sort, back) {
            (ParkedSort::Exposure, false) => "q.exposure_usd DESC, q.created_at, q.id",
            (ParkedSort::Exposure, true) => "q.exposure_usd, q.created_at DESC, q.id DESC",
            (ParkedSort::Age, false) => "q.created_at, q.id",
            (ParkedSort::Age, true) => "q.created_at DESC, q.id DESC",
        };
        q.push(format!(" ORDER BY {order} LIMIT "))
            .push_bind(f.limit);
        let rows = q.build().fetch_all(&self.reader).await?;
        let mut list = rows
            .iter()
            .map(parked_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        if back {
            list.reverse();
        }
        Ok(list)
    }

    /// How many records the filter matches, ignoring its limit; with
    /// `Before`, how many come before that position in the queue's order.
    pub async fn count_parked(&self, f: &ParkedFilter) -> StoreResult<i64> {
        let mut q = sqlx::QueryBuilder::<Db>::new("SELECT COUNT(*)");
        parked_from(&mut q, f);
        Ok(q.build().fetch_one(&self.reader).await?.try_get(0)?)
    }

    pub async fn parked(&self, id: ParkedId) -> StoreResult<Option<Parked>> {
        let sql = format!("SELECT {PARKED_COLUMNS} FROM {PARKED_FROM} WHERE p.id = $1");
        let row = sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(parked_from_row).transpose()
    }

    /// The job's one record that is not closed, if it has one.
    pub async fn parked_for_job(&self, job: JobId) -> StoreResult<Option<Parked>> {
        let sql = format!(
            "SELECT {PARKED_COLUMNS} FROM {PARKED_FROM} WHERE p.job_id = $1 AND p.state <> 'closed'"
        );
        let row = sqlx::query(&sql)
            .bind(job.0)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(parked_from_row).transpose()
    }

    /// The job's records, newest first (closed ones included).
    pub async fn parked_of_job(&self, job: JobId) -> StoreResult<Vec<Parked>> {
        let sql = format!(
            "SELECT {PARKED_COLUMNS} FROM {PARKED_FROM} WHERE p.job_id = $1 ORDER BY p.created_at DESC"
        );
        let rows = sqlx::query(&sql)
            .bind(job.0)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(parked_from_row).collect()
    }

    /// Records that are not closed, by stage and state, with the oldest's
    /// time: the queue's counts and `/metrics`.
    pub async fn parked_counts(&self) -> StoreResult<Vec<ParkedCount>> {
        let rows = sqlx::query(
            "SELECT stage, state, COUNT(*) AS n, MIN(created_at) AS oldest FROM parked \
             WHERE state <> 'closed' GROUP BY stage, state ORDER BY stage, state",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let stage: String = r.try_get("stage")?;
                let state: String = r.try_get("state")?;
                Ok(ParkedCount {
                    stage: ParkedStage::parse(&stage).ok_or_else(|| corrupt(&stage))?,
                    state: ParkedState::parse(&state).ok_or_else(|| corrupt(&state))?,
                    count: r.try_get("n")?,
                    oldest: r.try_get("oldest")?,
                })
            })
            .collect()
    }

    /// How long reviewers took: seconds from parking to each decision,
    /// over the decisions made since `since`.
    pub async fn decision_latencies(&self, since: DateTime<Utc>) -> StoreResult<Vec<f64>> {
        let rows = sqlx::query(
            "SELECT p.created_at, d.decided_at FROM parked_decisions d \
             JOIN parked p ON p.id = d.parked_id WHERE d.decided_at >= $1",
        )
        .bind(since)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                let parked: DateTime<Utc> = r.try_get("created_at")?;
                let decided: DateTime<Utc> = r.try_get("decided_at")?;
                Ok((decided - parked).num_milliseconds() as f64 / 1000.0)
            })
            .collect()
    }

    /// `(recoveries claimed more than once, retry_delivery recoveries that
    /// failed)`: for `/metrics`.
    pub async fn recovery_stats(&self) -> StoreResult<(i64, i64)> {
        let row = sqlx::query(
            "SELECT \
             CAST(COALESCE(SUM(CASE WHEN recovery_attempts > 1 THEN 1 ELSE 0 END), 0) AS BIGINT) AS reclaimed, \
             CAST(COALESCE(SUM(CASE WHEN action = 'retry_delivery' AND recovery_state = 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS delivery_failed \
             FROM parked_decisions WHERE recovery_state IS NOT NULL",
        )
        .fetch_one(&self.reader)
        .await?;
        Ok((row.try_get("reclaimed")?, row.try_get("delivery_failed")?))
    }

    /// A record's decisions, oldest first.
    pub async fn decisions(&self, parked: ParkedId) -> StoreResult<Vec<Decision>> {
        let sql = format!(
            "SELECT {DECISION_COLUMNS} FROM {DECISION_FROM} WHERE d.parked_id = $1 ORDER BY d.round"
        );
        let rows = sqlx::query(&sql)
            .bind(parked.0)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(decision_from_row).collect()
    }

    /// The decisions of each of `records`, oldest first per record: one
    /// statement for a page of the queue.
    pub async fn decisions_of(&self, records: &[ParkedId]) -> StoreResult<Vec<Decision>> {
        debug_assert!(records.len() <= 1000, "a page of records, not the table");
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let mut q = sqlx::QueryBuilder::<Db>::new(format!(
            "SELECT {DECISION_COLUMNS} FROM {DECISION_FROM} WHERE d.parked_id IN ("
        ));
        let mut ids = q.separated(", ");
        for id in records {
            ids.push_bind(id.0);
        }
        ids.push_unseparated(") ORDER BY d.parked_id, d.round");
        let rows = q.build().fetch_all(&self.reader).await?;
        rows.iter().map(decision_from_row).collect()
    }

    /// Rule 12: records a reviewer's decision and applies it, in one
    /// transaction. The record's row is locked first, so racing reviewers
    /// are answered one at a time: the first decides, the same decision
    /// again gets the first back, another one is a conflict.
    pub async fn decide(&self, d: &NewDecision) -> StoreResult<Decided> {
        let mut tx = self.writer.begin().await?;
        let locked = lock_for_decision(&mut tx, d.parked_id).await?;
        if let Some(answer) = answered_already(&mut tx, &locked, d).await? {
            return Ok(answer);
        }
        if !locked
            .stage
            .allows_for(locked.job_status)
            .contains(&d.remedy.action())
        {
            return Ok(Decided::NotAllowed(locked.stage, locked.job_status));
        }
        // What the original may already have cost: known costs, and the
        // estimate held for each unknown one.
        let exposure: crate::model::Usd = sqlx::query_scalar(
            "SELECT COALESCE(sum(COALESCE(cost_usd, hold_usd)), 0) FROM attempts WHERE job_id = $1",
        )
        .bind(locked.job.0)
        .fetch_one(&mut *tx)
        .await?;
        let mut statements = 3u64;
        // The new job first: the decision names it.
        if let Some(n) = d.remedy.new_job() {
            insert_new_attempt_job(&mut tx, n, locked.job, d.decided_at).await?;
            statements += 1;
        }
        if !insert_decision(&mut tx, d, locked.round, exposure).await? {
            // The lock makes this unreachable; the index is the backstop.
            let last = latest_decision(&mut tx, d.parked_id)
                .await?
                .ok_or_else(|| corrupt("a decision round taken by nothing"))?;
            return Ok(Decided::Conflict(last));
        }
        match self.apply_decision(&mut tx, d, &locked, exposure).await? {
            Ok(n) => statements += n,
            Err(why) => return Ok(Decided::Stale(why)),
        }
        let decision = latest_decision(&mut tx, d.parked_id)
            .await?
            .ok_or_else(|| corrupt("a decision that was not written"))?;
        let note = decision_note(d, &decision.reviewer_email, locked.round);
        super::within::event_in(&mut tx, locked.job, &note, d.decided_at).await?;
        tx.commit().await?;
        self.committed(Purpose::Other, statements + 2);
        Ok(Decided::Created(decision))
    }

    /// What the decision does to the job, its attempts and its record.
    async fn apply_decision(
        &self,
        conn: &mut Conn,
        d: &NewDecision,
        locked: &LockedRecord,
        exposure: crate::model::Usd,
    ) -> StoreResult<AppliedDecision> {
        let job = locked.job;
        match &d.remedy {
            Remedy::Reconcile {
                provider_job_id,
                evidence,
            } => reconcile_in(conn, d, locked.attempt, provider_job_id, evidence).await,
            Remedy::ResumePoll { .. } | Remedy::RetryDelivery => requeue_in(conn, d, job).await,
            Remedy::AcceptFailure { .. } if locked.job_status == JobStatus::Cancelled => {
                close_cancelled_in(conn, d, job).await
            }
            Remedy::AcceptFailure { .. } | Remedy::NewAttempt { .. } => {
                end_in(conn, self.envelope, d, job, exposure).await
            }
        }
    }

    /// A reviewer's note: evidence on the job's timeline, not a decision.
    pub async fn note_parked(
        &self,
        parked: ParkedId,
        by: &Email,
        text: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<JobEvent> {
        let happening = Happening::Note {
            text: scrub::text(text),
            by: by.as_str().to_string(),
        };
        let detail = happening.to_stored().1;
        let row = sqlx::query(
            "INSERT INTO job_events (job_id, kind, detail, created_at) \
             SELECT job_id, 'note', $2, $3 FROM parked WHERE id = $1 RETURNING id, job_id",
        )
        .bind(parked.0)
        .bind(Json(&detail))
        .bind(at)
        .fetch_optional(&self.writer)
        .await?
        .ok_or(StoreError::NotFound)?;
        self.committed(Purpose::Other, 1);
        Ok(JobEvent {
            id: row.try_get("id")?,
            job_id: JobId(row.try_get("job_id")?),
            happening,
            created_at: at,
        })
    }
}

/// A parked record and its job, locked for a decision.
struct LockedRecord {
    job: JobId,
    job_status: JobStatus,
    stage: ParkedStage,
    state: ParkedState,
    round: i32,
    attempt: Option<uuid::Uuid>,
}

/// Locks the job's row, then the record's: the order every claim, park and
/// cancel takes them in (the job's update, then its triggers' update of the
/// record), so a decision racing a cancel waits instead of deadlocking.
async fn lock_for_decision(conn: &mut Conn, parked: ParkedId) -> StoreResult<LockedRecord> {
    let job_status: Option<String> = sqlx::query_scalar(concat!(
        "SELECT status FROM jobs WHERE id = (SELECT job_id FROM parked WHERE id = $1) ",
        for_update!()
    ))
    .bind(parked.0)
    .fetch_optional(&mut *conn)
    .await?;
    let job_status = job_status.ok_or(StoreError::NotFound)?;
    let row = sqlx::query(concat!(
        "SELECT job_id, stage, state, round, attempt_id FROM parked WHERE id = $1 ",
        for_update!()
    ))
    .bind(parked.0)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(StoreError::NotFound)?;
    let stage: String = row.try_get("stage")?;
    let state: String = row.try_get("state")?;
    Ok(LockedRecord {
        job: JobId(row.try_get("job_id")?),
        job_status: JobStatus::parse(&job_status).ok_or_else(|| corrupt(&job_status))?,
        stage: ParkedStage::parse(&stage).ok_or_else(|| corrupt(&stage))?,
        state: ParkedState::parse(&state).ok_or_else(|| corrupt(&state))?,
        round: row.try_get("round")?,
        attempt: row.try_get("attempt_id")?,
    })
}

/// The answer when the record's round is already decided, or closed.
/// An open record has no decision in its round yet: a reconcile or a
/// failed recovery moved it to the next. A reconcile sent again is answered
/// with the first; a recovery that failed may be decided anew.
async fn answered_already(
    conn: &mut Conn,
    locked: &LockedRecord,
    d: &NewDecision,
) -> StoreResult<Option<Decided>> {
    Ok(
        match (locked.state, latest_decision(conn, d.parked_id).await?) {
            (ParkedState::Open, Some(last))
                if last.action == ReviewAction::Reconcile && d.remedy.is_recorded_as(&last) =>
            {
                Some(Decided::Existing(last))
            }
            (ParkedState::Open, _) => None,
            (_, Some(last)) if d.remedy.is_recorded_as(&last) => Some(Decided::Existing(last)),
            (_, Some(last)) => Some(Decided::Conflict(last)),
            (_, None) => Some(Decided::Closed),
        },
    )
}

/// A new attempt's job: the original's request and price, no idempotency
/// key, and `replaces` naming the original.
async fn insert_new_attempt_job(
    conn: &mut Conn,
    new_job: JobId,
    original: JobId,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, idempotency_key, \
         credits, estimated_usd, created_at, replaces, token_id) \
         SELECT $1, user_id, kind, 'queued', request, request_sha256, NULL, credits, estimated_usd, $2, id, token_id \
         FROM jobs WHERE id = $3",
    )
    .bind(new_job.0)
    .bind(at)
    .bind(original.0)
    .execute(conn)
    .await?;
    Ok(())
}

/// The decision's row under the record's round; false when the round was
/// taken (the unique index's backstop).
async fn insert_decision(
    conn: &mut Conn,
    d: &NewDecision,
    round: i32,
    exposure: crate::model::Usd,
) -> StoreResult<bool> {
    let action = d.remedy.action();
    let new_job = d.remedy.new_job();
    let recovery_state = action.is_recovery().then_some(RecoveryState::Pending);
    let inserted = sqlx::query(
        "INSERT INTO parked_decisions (id, parked_id, round, action, evidence, reviewer, decided_at, \
         refund, release_hold, provider_job_id, new_job_id, duplicate_cost_usd, recovery_state, \
         recovery_deadline) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
         ON CONFLICT (parked_id, round) DO NOTHING",
    )
    .bind(d.id.0)
    .bind(d.parked_id.0)
    .bind(round)
    .bind(action.as_str())
    .bind(scrub::text(&d.evidence))
    .bind(d.reviewer.0)
    .bind(d.decided_at)
    .bind(d.remedy.refund())
    .bind(d.remedy.release_hold())
    .bind(d.remedy.provider_job_id())
    .bind(new_job.map(|n| n.0))
    .bind(new_job.map(|_| exposure))
    .bind(recovery_state.map(RecoveryState::as_str))
    .bind(d.remedy.recovery_deadline())
    .execute(conn)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

/// What one decision's application came to: the statements it took, or
/// why the job moved on meanwhile (then nothing is committed).
type AppliedDecision = Result<u64, String>;

/// `reconcile`: the attempt gets the provider job id an investigation
/// found, and the record moves to `polling_exhausted` in the next round.
async fn reconcile_in(
    conn: &mut Conn,
    d: &NewDecision,
    attempt: Option<uuid::Uuid>,
    id: &str,
    evidence: &crate::model::ParkedEvidence,
) -> StoreResult<AppliedDecision> {
    let moved = sqlx::query(
        "UPDATE attempts SET state = 'submitted', provider_job_id = $2 \
         WHERE id = $1 AND state = 'submitting'",
    )
    .bind(attempt)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    if moved.rows_affected() == 0 {
        return Ok(Err(
            "the attempt is no longer waiting for a provider job id".into(),
        ));
    }
    sqlx::query(
        "UPDATE parked SET stage = 'polling_exhausted', provider_job_id = $2, \
         round = round + 1, updated_at = $3, evidence = COALESCE($4, evidence) WHERE id = $1",
    )
    .bind(d.parked_id.0)
    .bind(id)
    .bind(d.decided_at)
    .bind(Json(scrub::json(&evidence.to_json())))
    .execute(&mut *conn)
    .await?;
    Ok(Ok(2))
}

/// `resume_poll` and `retry_delivery`: the job is queued again; the claim
/// that takes it is the recovery's claim (migration 0008's trigger).
async fn requeue_in(conn: &mut Conn, d: &NewDecision, job: JobId) -> StoreResult<AppliedDecision> {
    let queued =
        sqlx::query("UPDATE jobs SET status = 'queued' WHERE id = $1 AND status = 'parked'")
            .bind(job.0)
            .execute(&mut *conn)
            .await?;
    if queued.rows_affected() == 0 {
        return Ok(Err("the job is no longer parked".into()));
    }
    sqlx::query("UPDATE parked SET state = 'decided', updated_at = $2 WHERE id = $1")
        .bind(d.parked_id.0)
        .bind(d.decided_at)
        .execute(&mut *conn)
        .await?;
    let mut statements = 2;
    if let Some(ring) = super::super::RING {
        sqlx::query(ring)
            .bind(job.to_string())
            .execute(&mut *conn)
            .await?;
        statements += 1;
    }
    Ok(Ok(statements))
}

/// Attempts still open end now, their cost unknown; with `release_hold`
/// the reviewer found nothing was spent, so the holds of unknown costs are
/// released (a known cost stays booked).
async fn abandon_open_attempts(conn: &mut Conn, d: &NewDecision, job: JobId) -> StoreResult<u64> {
    sqlx::query(
        "UPDATE attempts SET state = 'failed', error_class = $2, error = $3, finished_at = $4 \
         WHERE job_id = $1 AND state IN ('submitting', 'submitted')",
    )
    .bind(job.0)
    .bind(crate::model::ErrorClass::Abandoned.as_str())
    .bind("closed by a reviewer's decision; what it cost is unknown")
    .bind(d.decided_at)
    .execute(&mut *conn)
    .await?;
    if d.remedy.release_hold() != Some(true) {
        return Ok(1);
    }
    sqlx::query(
        "UPDATE attempts SET settled_usd = COALESCE(cost_usd, 0) \
         WHERE job_id = $1 AND hold_usd IS NOT NULL AND settled_usd IS NULL",
    )
    .bind(job.0)
    .execute(&mut *conn)
    .await?;
    Ok(2)
}

/// `accept_failure` on a job its owner cancelled while it was parked: the
/// owner was refunded by the cancel and the job already ended, so the
/// decision settles what the job still holds (at its cost, or at the
/// estimate unless the hold is released) and closes the record.
async fn close_cancelled_in(
    conn: &mut Conn,
    d: &NewDecision,
    job: JobId,
) -> StoreResult<AppliedDecision> {
    let mut statements = abandon_open_attempts(conn, d, job).await?;
    sqlx::query(
        "UPDATE attempts SET settled_usd = COALESCE(cost_usd, hold_usd) \
         WHERE job_id = $1 AND hold_usd IS NOT NULL AND settled_usd IS NULL",
    )
    .bind(job.0)
    .execute(&mut *conn)
    .await?;
    sqlx::query("UPDATE parked SET state = 'closed', updated_at = $2 WHERE id = $1")
        .bind(d.parked_id.0)
        .bind(d.decided_at)
        .execute(&mut *conn)
        .await?;
    let closed = Happening::ReviewClosed {
        outcome: JobStatus::Cancelled,
    };
    super::within::event_in(conn, job, &closed, d.decided_at).await?;
    statements += 3;
    Ok(Ok(statements))
}

/// `accept_failure` and `new_attempt` on a parked job: its terminal write
/// (rule 9; its trigger settles every hold left at the estimate and closes
/// the record), the outbox, the refund, and a new attempt's charge.
async fn end_in(
    conn: &mut Conn,
    envelope: crate::store::EnvelopeWriter,
    d: &NewDecision,
    job: JobId,
    exposure: crate::model::Usd,
) -> StoreResult<AppliedDecision> {
    let new_job = d.remedy.new_job();
    let mut statements = abandon_open_attempts(conn, d, job).await?;
    let sql = format!(
        "UPDATE jobs SET status = 'failed', error = $2, completed_at = $3, replaced_by = $4 \
         WHERE id = $1 AND status = 'parked' RETURNING {JOB_COLUMNS}"
    );
    let ended = sqlx::query(&sql)
        .bind(job.0)
        .bind(d.remedy.failure().map(|f| Json(f.scrubbed())))
        .bind(d.decided_at)
        .bind(new_job.map(|n| n.0))
        .fetch_optional(&mut *conn)
        .await?;
    let Some(ended) = ended else {
        return Ok(Err("the job is no longer parked".into()));
    };
    statements += 1;
    // Rule 13: the failure is announced in the same transaction.
    statements +=
        super::within::write_outbox(conn, envelope, &job_from_row(&ended)?, d.decided_at).await?;
    // new_attempt: the original is refunded and the new job charged the
    // same, so the person pays once.
    if d.remedy.refund() == Some(true) || new_job.is_some() {
        super::within::refund_in(conn, job, d.decided_at).await?;
        statements += 2;
    }
    if let Some(n) = new_job {
        statements += charge_new_attempt_in(conn, d, job, n, exposure).await?;
    }
    Ok(Ok(statements))
}

/// The new attempt's job is charged what the original was, and both
/// timelines say what links them and what the original may have cost.
async fn charge_new_attempt_in(
    conn: &mut Conn,
    d: &NewDecision,
    job: JobId,
    n: JobId,
    exposure: crate::model::Usd,
) -> StoreResult<u64> {
    sqlx::query(
        "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
         SELECT $1, user_id, -credits, 'debit', $2, $3, 'a new attempt ordered by a reviewer', $4 \
         FROM jobs WHERE id = $5",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(format!("debit:job:{n}"))
    .bind(d.reviewer.0)
    .bind(d.decided_at)
    .bind(n.0)
    .execute(&mut *conn)
    .await?;
    let cost = Some(exposure);
    let (forward, back) = (
        Happening::NewAttempt {
            job: n,
            duplicate_cost_usd: cost,
        },
        Happening::Replaces {
            job,
            duplicate_cost_usd: cost,
        },
    );
    super::within::event_in(conn, job, &forward, d.decided_at).await?;
    super::within::event_in(conn, n, &back, d.decided_at).await?;
    let mut statements = 3;
    if let Some(ring) = super::super::RING {
        sqlx::query(ring)
            .bind(n.to_string())
            .execute(&mut *conn)
            .await?;
        statements += 1;
    }
    Ok(statements)
}

/// The decision on the job's timeline: what was decided, by whom and on
/// what evidence (the owner's view of the timeline keeps only the action).
fn decision_note(d: &NewDecision, reviewer: &Email, round: i32) -> Happening {
    Happening::Decision(crate::model::DecisionNote {
        action: d.remedy.action(),
        reviewer: Some(reviewer.as_str().to_string()),
        evidence: Some(scrub::text(&d.evidence)),
        round: Some(round),
        refund: d.remedy.refund(),
        release_hold: d.remedy.release_hold(),
        provider_job_id: d.remedy.provider_job_id().map(str::to_string),
    })
}

async fn latest_decision(conn: &mut Conn, parked: ParkedId) -> StoreResult<Option<Decision>> {
    let sql = format!(
        "SELECT {DECISION_COLUMNS} FROM {DECISION_FROM} WHERE d.parked_id = $1 ORDER BY d.round DESC LIMIT 1"
    );
    let row = sqlx::query(&sql)
        .bind(parked.0)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(decision_from_row).transpose()
}

/// The records a filter names, its seek among the conditions, as a
/// derived table `q` (the exposure is computed, hence the outer query).
fn parked_from<'a>(q: &mut sqlx::QueryBuilder<'a, Db>, f: &'a ParkedFilter) {
    q.push(format!(
        " FROM (SELECT {PARKED_COLUMNS} FROM {PARKED_FROM} WHERE TRUE"
    ));
    match f.state {
        Some(s) => q.push(" AND p.state = ").push_bind(s.as_str()),
        None => q.push(" AND p.state <> 'closed'"),
    };
    if let Some(s) = f.stage {
        q.push(" AND p.stage = ").push_bind(s.as_str());
    }
    if let Some(m) = &f.model {
        q.push(" AND p.model = ").push_bind(m.as_str());
    }
    if let Some(t) = f.parked_before {
        q.push(" AND p.created_at < ").push_bind(t);
    }
    q.push(") q WHERE TRUE");
    if let Some(seek) = f.seek {
        parked_seek(q, f.sort, seek);
    }
}

/// Rows after (or before) a position in the queue's order: oldest first,
/// or most exposed first with ties oldest first.
fn parked_seek(q: &mut sqlx::QueryBuilder<'_, Db>, sort: ParkedSort, seek: Seek<ParkedCursor>) {
    let (later, more) = match seek {
        Seek::After(_) => (">", "<"),
        Seek::Before(_) => ("<", ">"),
    };
    let c = *seek.key();
    let exposure = c.exposure_usd.filter(|_| sort == ParkedSort::Exposure);
    if let Some(e) = exposure {
        q.push(format!(" AND (q.exposure_usd {more} "))
            .push_bind(e)
            .push(" OR (q.exposure_usd = ")
            .push_bind(e)
            .push(" AND ");
    } else {
        q.push(" AND ");
    }
    push_past(q, ("q.created_at", "q.id"), later, c.created_at, c.id.0);
    if exposure.is_some() {
        q.push("))");
    }
}
