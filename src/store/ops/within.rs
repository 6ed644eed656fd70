//! The pieces of a write that run inside another write's transaction, in
//! one leaf module the rest of the store calls (and which calls none of
//! them back): the charge and the one refund (rules 2 and 3), a lineage's
//! state and its updates (rule 14), and the outbox rows announcing a job's
//! new state (rule 13). Each takes the open connection and says how many
//! statements it ran, for the commit counters.

use super::*;
use crate::model::{LineageEffect, LineageState, WebhookEvent};
use crate::store::EnvelopeWriter;
use chrono::{DateTime, Utc};

pub(super) const LINEAGE_COLUMNS: &str = "root, delivered, repairs_used, stopped";

pub(super) fn lineage_from_row(r: &Row) -> StoreResult<LineageState> {
    let used: i32 = r.try_get("repairs_used")?;
    Ok(LineageState {
        root: JobId(r.try_get("root")?),
        delivered: JobId(r.try_get("delivered")?),
        repairs_used: u32::try_from(used).map_err(corrupt)?,
        stopped: r.try_get("stopped")?,
    })
}

/// An image edit's lineage state inside a transaction (a fresh one before
/// its first repair); `None` for a video.
pub(super) async fn lineage_in(conn: &mut Conn, job: &Job) -> StoreResult<Option<LineageState>> {
    if job.kind != JobKind::ImageEdit {
        return Ok(None);
    }
    let row = sqlx::query(&format!(
        "SELECT {LINEAGE_COLUMNS} FROM lineages WHERE root = $1"
    ))
    .bind(job.root().0)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(Some(match row {
        Some(r) => lineage_from_row(&r)?,
        None => LineageState::fresh(job.root()),
    }))
}

/// Makes sure `root`'s lineage has its row (a lineage nobody repaired or
/// chose in yet has none: its first edit is what the person has), so
/// that writers to it can queue on that row.
pub(super) async fn ensure_lineage_in(
    conn: &mut Conn,
    root: JobId,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO lineages (root, delivered, repairs_used, stopped, updated_at) \
         VALUES ($1, $1, 0, FALSE, $2) ON CONFLICT (root) DO NOTHING",
    )
    .bind(root.0)
    .bind(at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// With a refund (rule 3): a failed or cancelled repair gives its slot
/// back. The lineage's count is recounted from its repairs, not
/// decremented, so running this again (a second refund attempt, or a free
/// repair, which has no refund to make it once) changes nothing.
pub(super) async fn free_repair_in(
    conn: &mut Conn,
    job: JobId,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "UPDATE lineages SET updated_at = $2, repairs_used = \
           (SELECT count(*) FROM jobs r WHERE r.lineage_root = lineages.root \
             AND r.repair_of IS NOT NULL AND r.status NOT IN ('failed', 'cancelled')) \
         WHERE root = (SELECT lineage_root FROM jobs WHERE id = $1 AND repair_of IS NOT NULL \
             AND status IN ('failed', 'cancelled'))",
    )
    .bind(job.0)
    .bind(at)
    .execute(conn)
    .await?;
    Ok(())
}

/// In a repair's terminal write: what its comparison decided for the
/// lineage (`LineageEffect`). Returns the statements it took.
pub(super) async fn end_repair_in(
    conn: &mut Conn,
    job: &Job,
    effect: LineageEffect,
    at: DateTime<Utc>,
) -> StoreResult<u64> {
    let q = match effect {
        LineageEffect::Deliver => {
            sqlx::query("UPDATE lineages SET delivered = $2, updated_at = $3 WHERE root = $1")
                .bind(job.root().0)
                .bind(job.id.0)
                .bind(at)
        }
        LineageEffect::KeepAndStop => {
            sqlx::query("UPDATE lineages SET stopped = TRUE, updated_at = $2 WHERE root = $1")
                .bind(job.root().0)
                .bind(at)
        }
        LineageEffect::Keep => return Ok(0),
    };
    q.execute(conn).await?;
    Ok(1)
}

/// Rule 2's charge of a job just inserted, in its transaction (the
/// ledger's trigger aborts both when the balance cannot pay), and its
/// doorbell on PostgreSQL. Returns the statements it took.
pub(super) async fn charge_in(
    conn: &mut Conn,
    new: &NewJob,
    reason: Option<&str>,
) -> StoreResult<u64> {
    sqlx::query(
        "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
         VALUES ($1, $2, $3, 'debit', $4, NULL, $5, $6)",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(new.user_id.0)
    .bind(-new.credits.0)
    .bind(format!("debit:job:{}", new.id))
    .bind(reason)
    .bind(new.created_at)
    .execute(&mut *conn)
    .await?;
    let mut statements = 1;
    if let Some(ring) = super::super::RING {
        sqlx::query(ring)
            .bind(new.id.to_string())
            .execute(&mut *conn)
            .await?;
        statements += 1;
    }
    Ok(statements)
}

/// Rule 3, the one refund: its reference is derived from the job, it is
/// inserted do-nothing-on-conflict, and only for a job that is failed or
/// cancelled. True when this call refunded (and then it goes on the
/// timeline).
pub(super) async fn refund_in(conn: &mut Conn, job: JobId, at: DateTime<Utc>) -> StoreResult<bool> {
    let r = sqlx::query(
        "INSERT INTO ledger (id, user_id, amount, kind, reference, actor_id, reason, created_at) \
         SELECT $1, user_id, credits, 'refund', $2, NULL, 'job ' || status, $3 \
         FROM jobs WHERE id = $4 AND status IN ('failed', 'cancelled') \
         ON CONFLICT (reference) DO NOTHING",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(format!("refund:job:{job}"))
    .bind(at)
    .bind(job.0)
    .execute(&mut *conn)
    .await?;
    let refunded = r.rows_affected() == 1;
    if refunded {
        event_in(conn, job, &Happening::Refunded {}, at).await?;
    }
    // Also when there was nothing left to refund (a free repair's charge
    // was given back when it was ordered): the count is recounted.
    free_repair_in(conn, job, at).await?;
    Ok(refunded)
}

/// Rule 13's outbox: the deliveries announcing `job`'s new state, written
/// in the transaction that stored it, one per target (the owner's enabled
/// endpoints that want the event, and the job's own webhook_url), each
/// under `<job>:<event>` and do-nothing-on-conflict: a re-run writes
/// nothing new. The envelope is built (by `envelope`, which the layer
/// owning the wire format handed the store) from the job as stored, now,
/// and is kept exactly. Returns how many statements it took.
pub(super) async fn write_outbox(
    conn: &mut Conn,
    envelope: EnvelopeWriter,
    job: &Job,
    at: DateTime<Utc>,
) -> StoreResult<u64> {
    write_outbox_many(conn, envelope, &[job], at).await
}

/// `write_outbox` for every job a batch ended: one look-up of their owners'
/// endpoints, then each job's deliveries. Returns the statements it took.
pub(super) async fn write_outbox_many(
    conn: &mut Conn,
    envelope: EnvelopeWriter,
    jobs: &[&Job],
    at: DateTime<Utc>,
) -> StoreResult<u64> {
    let mut users: Vec<uuid::Uuid> = jobs
        .iter()
        .filter(|j| WebhookEvent::of(j.status).is_some())
        .map(|j| j.user_id.0)
        .collect();
    users.sort_unstable();
    users.dedup();
    if users.is_empty() {
        return Ok(0);
    }
    let marks: Vec<String> = (1..=users.len()).map(|i| format!("${i}")).collect();
    let sql = format!(
        "SELECT user_id, id, url, events FROM webhook_endpoints WHERE user_id IN ({}) \
         AND disabled_at IS NULL AND deleted_at IS NULL",
        marks.join(", ")
    );
    let mut q = sqlx::query_as(&sql).persistent(false);
    for u in &users {
        q = q.bind(u);
    }
    let endpoints: Vec<(uuid::Uuid, uuid::Uuid, String, String)> = q.fetch_all(&mut *conn).await?;
    let mut statements = 1;
    for job in jobs {
        let Some(event) = WebhookEvent::of(job.status) else {
            continue;
        };
        // `events` is stored as `,a,b,`: the event is one of them.
        let wanted = format!(",{},", event.as_str());
        let mine: Vec<(uuid::Uuid, String)> = endpoints
            .iter()
            .filter(|e| e.0 == job.user_id.0 && e.3.contains(&wanted))
            .map(|e| (e.1, e.2.clone()))
            .collect();
        statements += write_deliveries(conn, envelope, job, event, mine, at).await?;
    }
    Ok(statements)
}

/// One ended job's deliveries, to its owner's `endpoints` and its own
/// webhook URL. Returns the statements it took.
async fn write_deliveries(
    conn: &mut Conn,
    envelope: EnvelopeWriter,
    job: &Job,
    event: WebhookEvent,
    endpoints: Vec<(uuid::Uuid, String)>,
    at: DateTime<Utc>,
) -> StoreResult<u64> {
    let own = job.request.webhook_url().map(str::to_string);
    if endpoints.is_empty() && own.is_none() {
        return Ok(0);
    }
    let sql = format!(
        "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = $1 ORDER BY started_at, attempt_no"
    );
    let attempts = sqlx::query(&sql)
        .bind(job.id.0)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(attempt_from_row)
        .collect::<StoreResult<Vec<_>>>()?;
    let lineage = lineage_in(conn, job).await?;
    let body = envelope(event, job, &attempts, lineage.as_ref(), at);
    let webhook_id = format!("{}:{}", job.id, event.as_str());
    let mut targets: Vec<(String, Option<uuid::Uuid>, String)> = endpoints
        .into_iter()
        .map(|(id, url)| (format!("endpoint:{id}"), Some(id), url))
        .collect();
    if let Some(url) = own {
        targets.push(("job".into(), None, url));
    }
    for (target, endpoint, url) in &targets {
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, webhook_id, target, endpoint_id, user_id, job_id, event, url, \
             body, next_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10) \
             ON CONFLICT (webhook_id, target) DO NOTHING",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(&webhook_id)
        .bind(target)
        .bind(endpoint)
        .bind(job.user_id.0)
        .bind(job.id.0)
        .bind(event.as_str())
        .bind(url)
        .bind(&body)
        .bind(at)
        .execute(&mut *conn)
        .await?;
    }
    Ok(2 + targets.len() as u64)
}

/// One entry on a job's timeline, written as it is stored (the kinds the
/// triggers write are read back by the same type).
pub(super) async fn event_in(
    conn: &mut Conn,
    job: JobId,
    happening: &Happening,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    let (kind, detail) = happening.to_stored();
    sqlx::query(
        "INSERT INTO job_events (job_id, kind, detail, created_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(job.0)
    .bind(kind)
    .bind(Json(detail))
    .bind(at)
    .execute(conn)
    .await?;
    Ok(())
}

/// A cancel that finds a provider request unanswered (its attempt
/// `submitting`) cannot know whether the provider was paid, and nothing
/// will run the job again to find out: the attempt is parked for a
/// reviewer in the cancel's transaction, before the job ends, so its hold
/// stays with the record (rule 12) as when parked work is cancelled. An
/// accepted call (`submitted`) was paid, only its price is unknown: the
/// cancel books its estimate, as for any unpriced paid call. Local checks
/// cost nothing and are left alone. Returns the statements run.
pub(super) async fn park_in_flight_in(
    conn: &mut Conn,
    job: JobId,
    at: DateTime<Utc>,
) -> StoreResult<u64> {
    let row = sqlx::query(
        "SELECT a.id, a.provider, a.model, a.idempotency_key \
         FROM attempts a WHERE a.job_id = $1 AND a.state = 'submitting' AND a.provider <> 'local' \
         AND NOT EXISTS (SELECT 1 FROM parked p WHERE p.job_id = a.job_id AND p.state <> 'closed') \
         ORDER BY a.started_at DESC LIMIT 1",
    )
    .bind(job.0)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(r) = row else { return Ok(1) };
    let stage = ParkedStage::SubmissionUncertain;
    let reason =
        "Cancelled while the request to the provider was unanswered; whether it was paid is unknown.";
    let evidence = crate::model::ParkedEvidence::because(reason)
        .with(
            "idempotency_key",
            r.try_get::<String, _>("idempotency_key")?,
        )
        .with("cancelled_in_flight", true);
    sqlx::query(
        "INSERT INTO parked (id, job_id, stage, evidence, provider, model, provider_job_id, \
         attempt_id, polls, deliveries, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, NULL, $7, 0, 0, $8, $8)",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(job.0)
    .bind(stage.as_str())
    .bind(Json(evidence.to_json()))
    .bind(r.try_get::<String, _>("provider")?)
    .bind(r.try_get::<String, _>("model")?)
    .bind(r.try_get::<uuid::Uuid, _>("id")?)
    .bind(at)
    .execute(&mut *conn)
    .await?;
    let parked = Happening::Parked {
        stage,
        reason: Some(reason.to_string()),
        provider_job_id: None,
    };
    event_in(conn, job, &parked, at).await?;
    Ok(3)
}
