//! Webhooks (rule 13): endpoints and secrets, the outbox written in the
//! same transaction as the state change it announces, dispatchers' claims
//! (leased and fenced; `SKIP LOCKED` on PostgreSQL, so two nodes never post
//! one row at once), each try's outcome, replays, and the backlog.

use super::*;
use crate::model::{DeliveryId, DeliveryState, WebhookEndpointId, WebhookEvent};
use chrono::{DateTime, Utc};

const ENDPOINT_COLUMNS: &str = "id, user_id, url, events, secret, previous_secret, \
     previous_expires_at, created_at, failing_since, disabled_at, disabled_reason";
const DELIVERY_COLUMNS: &str = "d.id, d.webhook_id, d.endpoint_id, d.user_id, d.job_id, d.event, \
     d.url, d.body, d.state, d.attempts, d.next_at, d.last_status, d.last_error, d.replays, \
     d.created_at, d.delivered_at, u.email AS user_email";
/// An endpoint failing every try for this long is disabled.
const FAILING_DAYS_MAX: i64 = 5;
/// Posts to one URL in flight at once at most, across every dispatcher.
pub const DELIVERIES_PER_URL_MAX: i64 = 4;

/// `,generation.succeeded,generation.failed,`: matched with LIKE '%,e,%'.
fn events_text(events: &[WebhookEvent]) -> String {
    let mut s = String::from(",");
    for e in events {
        s.push_str(e.as_str());
        s.push(',');
    }
    s
}

fn parse_events(s: &str) -> Vec<WebhookEvent> {
    s.split(',').filter_map(WebhookEvent::parse).collect()
}

fn endpoint_from_row(r: &Row) -> StoreResult<WebhookEndpoint> {
    let events: String = r.try_get("events")?;
    Ok(WebhookEndpoint {
        id: WebhookEndpointId(r.try_get("id")?),
        user_id: UserId(r.try_get("user_id")?),
        url: r.try_get("url")?,
        events: parse_events(&events),
        secret: r.try_get("secret")?,
        previous_secret: r.try_get("previous_secret")?,
        previous_expires_at: r.try_get("previous_expires_at")?,
        created_at: r.try_get("created_at")?,
        failing_since: r.try_get("failing_since")?,
        disabled_at: r.try_get("disabled_at")?,
        disabled_reason: r.try_get("disabled_reason")?,
    })
}

fn delivery_from_row(r: &Row) -> StoreResult<Delivery> {
    let event: String = r.try_get("event")?;
    let state: String = r.try_get("state")?;
    Ok(Delivery {
        id: DeliveryId(r.try_get("id")?),
        webhook_id: r.try_get("webhook_id")?,
        endpoint_id: r
            .try_get::<Option<uuid::Uuid>, _>("endpoint_id")?
            .map(WebhookEndpointId),
        user_id: UserId(r.try_get("user_id")?),
        user_email: Email::from_stored(r.try_get("user_email")?),
        job_id: r.try_get::<Option<uuid::Uuid>, _>("job_id")?.map(JobId),
        event: WebhookEvent::parse(&event).ok_or_else(|| corrupt(&event))?,
        url: r.try_get("url")?,
        body: r.try_get("body")?,
        state: DeliveryState::parse(&state).ok_or_else(|| corrupt(&state))?,
        attempts: r.try_get("attempts")?,
        next_at: r.try_get("next_at")?,
        last_status: r.try_get("last_status")?,
        last_error: r.try_get("last_error")?,
        replays: r.try_get("replays")?,
        created_at: r.try_get("created_at")?,
        delivered_at: r.try_get("delivered_at")?,
    })
}

impl Backend {
    pub async fn insert_webhook_endpoint(
        &self,
        e: &NewWebhookEndpoint,
    ) -> StoreResult<WebhookEndpoint> {
        let sql = format!(
            "INSERT INTO webhook_endpoints (id, user_id, url, events, secret, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {ENDPOINT_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(e.id.0)
            .bind(e.user_id.0)
            .bind(&e.url)
            .bind(events_text(&e.events))
            .bind(&e.secret)
            .bind(e.created_at)
            .fetch_one(&self.writer)
            .await?;
        self.committed(Purpose::Other, 1);
        endpoint_from_row(&row)
    }

    /// A person's endpoints (`None`: everyone's), oldest first, deleted ones left out.
    pub async fn webhook_endpoints(
        &self,
        user: Option<UserId>,
    ) -> StoreResult<Vec<WebhookEndpoint>> {
        let sql = match user {
            Some(_) => format!(
                "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE user_id = $1 AND deleted_at IS NULL \
                 ORDER BY created_at, id"
            ),
            None => format!(
                "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE deleted_at IS NULL ORDER BY created_at, id"
            ),
        };
        let mut q = sqlx::query(&sql);
        if let Some(u) = user {
            q = q.bind(u.0);
        }
        q.fetch_all(&self.reader)
            .await?
            .iter()
            .map(endpoint_from_row)
            .collect()
    }

    pub async fn webhook_endpoint(
        &self,
        id: WebhookEndpointId,
    ) -> StoreResult<Option<WebhookEndpoint>> {
        let sql = format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = $1 AND deleted_at IS NULL"
        );
        sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(endpoint_from_row)
            .transpose()
    }

    /// Deletes a person's endpoint; its pending deliveries end dead (kept,
    /// with their envelopes). False when it is not theirs.
    pub async fn delete_webhook_endpoint(
        &self,
        id: WebhookEndpointId,
        user: UserId,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        let r = sqlx::query(
            "UPDATE webhook_endpoints SET deleted_at = $3 WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL",
        )
        .bind(id.0)
        .bind(user.0)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE webhook_deliveries SET state = 'dead', last_error = 'the endpoint was deleted', \
             lease_owner = NULL, lease_expires_at = NULL WHERE endpoint_id = $1 AND state = 'pending'",
        )
        .bind(id.0)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.committed(Purpose::Other, 2);
        Ok(true)
    }

    /// A new secret for a person's endpoint; the old one keeps signing
    /// until `previous_expires_at`.
    pub async fn rotate_webhook_secret(
        &self,
        id: WebhookEndpointId,
        user: UserId,
        secret: &str,
        previous_expires_at: DateTime<Utc>,
    ) -> StoreResult<Option<WebhookEndpoint>> {
        let sql = format!(
            "UPDATE webhook_endpoints SET previous_secret = secret, previous_expires_at = $4, secret = $3 \
             WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL RETURNING {ENDPOINT_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(id.0)
            .bind(user.0)
            .bind(secret)
            .bind(previous_expires_at)
            .fetch_optional(&self.writer)
            .await?;
        self.committed(Purpose::Other, 1);
        row.as_ref().map(endpoint_from_row).transpose()
    }

    /// A person's account secret (it signs deliveries to a job's own
    /// webhook_url), made with `candidate` on first use.
    pub async fn account_webhook_secret(
        &self,
        user: UserId,
        candidate: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<String> {
        sqlx::query(
            "INSERT INTO webhook_secrets (user_id, secret, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (user_id) DO NOTHING",
        )
        .bind(user.0)
        .bind(candidate)
        .bind(at)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(
            sqlx::query_scalar("SELECT secret FROM webhook_secrets WHERE user_id = $1")
                .bind(user.0)
                .fetch_one(&self.writer)
                .await?,
        )
    }

    /// A new account secret for `user`; the one it replaces (if any) keeps
    /// signing until `until`.
    pub async fn rotate_account_webhook_secret(
        &self,
        user: UserId,
        secret: &str,
        until: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO webhook_secrets (user_id, secret, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (user_id) DO UPDATE SET previous_secret = webhook_secrets.secret, \
             previous_expires_at = $4, secret = excluded.secret, created_at = excluded.created_at",
        )
        .bind(user.0)
        .bind(secret)
        .bind(at)
        .bind(until)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(())
    }

    /// A test event to one endpoint, outside any job.
    pub async fn insert_test_delivery(
        &self,
        endpoint: &WebhookEndpoint,
        webhook_id: &str,
        body: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<DeliveryId> {
        let id = DeliveryId::new();
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, webhook_id, target, endpoint_id, user_id, job_id, event, url, \
             body, next_at, created_at) VALUES ($1, $2, $3, $4, $5, NULL, $6, $7, $8, $9, $9)",
        )
        .bind(id.0)
        .bind(webhook_id)
        .bind(format!("endpoint:{}", endpoint.id))
        .bind(endpoint.id.0)
        .bind(endpoint.user_id.0)
        .bind(WebhookEvent::Test.as_str())
        .bind(&endpoint.url)
        .bind(body)
        .bind(at)
        .execute(&self.writer)
        .await?;
        self.committed(Purpose::Other, 1);
        Ok(id)
    }

    /// Claims up to `n` due deliveries for `owner`, leased for `lease_s`
    /// seconds of the database's clock; each claim bumps the row's token.
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        n: i64,
        lease_s: f64,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        let mut tx = self.writer.begin().await?;
        // The lease is checked again where the rows are locked: on
        // PostgreSQL a row another dispatcher claimed and committed since
        // this statement's snapshot is re-read there, and the window
        // subquery (computed once, from the snapshot) would let it through.
        // Fair, not first come first served (issue 29, 3): each person's
        // due deliveries take turns with everyone else's, and one address
        // never has more than `DELIVERIES_PER_URL_MAX` posts in flight,
        // counting those other dispatchers hold, so a receiver that never
        // answers holds a few slots, not the node's.
        let sql = concat!(
            "UPDATE webhook_deliveries SET lease_owner = $1, lease_expires_at = ",
            now_plus_seconds!("$2"),
            ", claim_token = claim_token + 1 \
             WHERE id IN (SELECT id FROM webhook_deliveries WHERE id IN (\
             SELECT r.id FROM (SELECT id, url, next_at, \
             ROW_NUMBER() OVER (PARTITION BY url ORDER BY next_at, id) AS url_turn, \
             ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY next_at, id) AS user_turn \
             FROM webhook_deliveries WHERE state = 'pending' AND next_at <= ",
            now!(),
            " AND (lease_expires_at IS NULL OR lease_expires_at < ",
            now!(),
            ")) r LEFT JOIN (SELECT url, COUNT(*) AS n FROM webhook_deliveries \
             WHERE state = 'pending' AND lease_expires_at >= ",
            now!(),
            " GROUP BY url) busy ON busy.url = r.url \
             WHERE r.url_turn + COALESCE(busy.n, 0) <= $4 \
             ORDER BY r.user_turn, r.next_at LIMIT $3) \
             AND state = 'pending' AND (lease_expires_at IS NULL OR lease_expires_at < ",
            now!(),
            ") ",
            for_update_skip_locked!(),
            ") RETURNING id"
        );
        let ids: Vec<uuid::Uuid> = sqlx::query_scalar(sql)
            .bind(owner)
            .bind(lease_s)
            .bind(n)
            .bind(DELIVERIES_PER_URL_MAX)
            .fetch_all(&mut *tx)
            .await?;
        // One statement for every claimed row: what to send and the secrets
        // that sign it.
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS}, d.claim_token, e.secret AS endpoint_secret, \
             CASE WHEN e.previous_expires_at > {} THEN e.previous_secret END AS previous_secret, \
             s.secret AS account_secret, \
             CASE WHEN s.previous_expires_at > {} THEN s.previous_secret END AS previous_account_secret \
             FROM webhook_deliveries d JOIN users u ON u.id = d.user_id \
             LEFT JOIN webhook_endpoints e ON e.id = d.endpoint_id \
             LEFT JOIN webhook_secrets s ON s.user_id = d.user_id WHERE d.id = $1",
            now!(),
            now!()
        );
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let row = sqlx::query(&sql).bind(id).fetch_one(&mut *tx).await?;
            out.push(claimed_from_row(&row)?);
        }
        tx.commit().await?;
        self.committed(Purpose::Other, 1 + out.len() as u64);
        Ok(out)
    }

    /// Records one try's outcome, only for the claim that made it (a
    /// dispatcher whose lease ran out writes nothing). Keeps the endpoint's
    /// health: a success clears its failing streak; a 410, or five days of
    /// failures, disables it, saying why. False when the claim was stale.
    pub async fn finish_delivery(
        &self,
        id: DeliveryId,
        claim_token: i64,
        outcome: &DeliveryOutcome,
        at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        let (state, status, error, next_at) = match outcome {
            DeliveryOutcome::Delivered { status } => ("delivered", Some(*status), None, None),
            DeliveryOutcome::Retry {
                status,
                error,
                next_at,
            } => ("pending", *status, Some(error.as_str()), Some(*next_at)),
            DeliveryOutcome::Dead { status, error } => {
                ("dead", *status, Some(error.as_str()), None)
            }
        };
        let row = sqlx::query(
            "UPDATE webhook_deliveries SET state = $3, attempts = attempts + 1, last_status = $4, \
             last_error = $5, next_at = COALESCE($6, next_at), lease_owner = NULL, lease_expires_at = NULL, \
             delivered_at = CASE WHEN $3 = 'delivered' THEN $7 ELSE delivered_at END \
             WHERE id = $1 AND claim_token = $2 AND state = 'pending' RETURNING endpoint_id",
        )
        .bind(id.0)
        .bind(claim_token)
        .bind(state)
        .bind(status)
        .bind(error)
        .bind(next_at)
        .bind(at)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(false);
        };
        let mut statements = 1;
        if let Some(endpoint) = row.try_get::<Option<uuid::Uuid>, _>("endpoint_id")? {
            statements += endpoint_health_in(&mut tx, endpoint, outcome, at).await?;
        }
        tx.commit().await?;
        self.committed(Purpose::Other, statements);
        Ok(true)
    }

    /// Deliveries, newest first, filtered, from a cursor either way.
    pub async fn list_deliveries(&self, f: &DeliveryFilter) -> StoreResult<Vec<Delivery>> {
        let mut q = sqlx::QueryBuilder::<Db>::new(format!("SELECT {DELIVERY_COLUMNS}"));
        deliveries_from(&mut q, f);
        // Before a position the list is read the other way round, nearest
        // first, so that the limit keeps the rows next to it.
        let back = matches!(f.seek, Some(Seek::Before(_)));
        let order = if back { "ASC" } else { "DESC" };
        q.push(format!(
            " ORDER BY d.created_at {order}, d.id {order} LIMIT "
        ))
        .push_bind(f.limit);
        let rows = q.build().fetch_all(&self.reader).await?;
        let mut list = rows
            .iter()
            .map(delivery_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        if back {
            list.reverse();
        }
        Ok(list)
    }

    /// How many deliveries the filter matches, ignoring its limit; with
    /// `Before`, how many come before that position (newer ones).
    pub async fn count_deliveries(&self, f: &DeliveryFilter) -> StoreResult<i64> {
        let mut q = sqlx::QueryBuilder::<Db>::new("SELECT COUNT(*)");
        deliveries_from(&mut q, f);
        Ok(q.build().fetch_one(&self.reader).await?.try_get(0)?)
    }

    pub async fn delivery(&self, id: DeliveryId) -> StoreResult<Option<Delivery>> {
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries d JOIN users u ON u.id = d.user_id WHERE d.id = $1"
        );
        sqlx::query(&sql)
            .bind(id.0)
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(delivery_from_row)
            .transpose()
    }

    /// Sends a delivered or dead delivery again: the same webhook-id and
    /// body, due now, its tries counted afresh. The ids replayed.
    pub async fn replay_deliveries(
        &self,
        ids: &[DeliveryId],
        at: DateTime<Utc>,
    ) -> StoreResult<Vec<DeliveryId>> {
        let mut tx = self.writer.begin().await?;
        let mut replayed = Vec::new();
        for id in ids {
            let r = sqlx::query(
                "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, next_at = $2, \
                 replays = replays + 1, lease_owner = NULL, lease_expires_at = NULL \
                 WHERE id = $1 AND state IN ('delivered', 'dead')",
            )
            .bind(id.0)
            .bind(at)
            .execute(&mut *tx)
            .await?;
            if r.rows_affected() == 1 {
                replayed.push(*id);
            }
        }
        tx.commit().await?;
        self.committed(Purpose::Other, ids.len() as u64);
        Ok(replayed)
    }

    /// The backlog by state, the oldest pending, and failing deliveries
    /// by the class of their last status.
    pub async fn webhook_stats(&self) -> StoreResult<WebhookStats> {
        let by_state = sqlx::query_as::<_, (String, i64)>(
            "SELECT state, COUNT(*) FROM webhook_deliveries GROUP BY state",
        )
        .fetch_all(&self.reader)
        .await?
        .into_iter()
        .filter_map(|(s, n)| DeliveryState::parse(&s).map(|s| (s, n)))
        .collect();
        let oldest_pending: Option<DateTime<Utc>> = sqlx::query_scalar(
            "SELECT MIN(created_at) FROM webhook_deliveries WHERE state = 'pending'",
        )
        .fetch_one(&self.reader)
        .await?;
        let failing_by_class = sqlx::query_as::<_, (String, i64)>(
            "SELECT CASE WHEN last_status IS NULL THEN 'none' \
                         WHEN last_status >= 500 THEN '5xx' WHEN last_status >= 400 THEN '4xx' \
                         WHEN last_status >= 300 THEN '3xx' ELSE 'other' END AS class, COUNT(*) \
             FROM webhook_deliveries WHERE attempts > 0 AND state <> 'delivered' GROUP BY 1",
        )
        .fetch_all(&self.reader)
        .await?;
        Ok(WebhookStats {
            by_state,
            oldest_pending,
            failing_by_class,
        })
    }
}

/// A claimed delivery and the secrets that sign it: the endpoint's (and its
/// previous one, during a rotation), or for a job's own URL the account's
/// (and its previous one).
fn claimed_from_row(row: &Row) -> StoreResult<ClaimedDelivery> {
    let delivery = delivery_from_row(row)?;
    let (current, previous) = if delivery.endpoint_id.is_some() {
        ("endpoint_secret", "previous_secret")
    } else {
        ("account_secret", "previous_account_secret")
    };
    let secrets = [
        row.try_get::<Option<String>, _>(current)?,
        row.try_get::<Option<String>, _>(previous)?,
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok(ClaimedDelivery {
        claim_token: row.try_get("claim_token")?,
        delivery,
        secrets,
    })
}

/// An endpoint's health after one try: a success clears its failing
/// streak; a 410, or five days of failures, disables it, saying why.
/// Returns the statements it took.
async fn endpoint_health_in(
    conn: &mut Conn,
    endpoint: uuid::Uuid,
    outcome: &DeliveryOutcome,
    at: DateTime<Utc>,
) -> StoreResult<u64> {
    let (status, error) = match outcome {
        DeliveryOutcome::Delivered { status } => (Some(*status), None),
        DeliveryOutcome::Retry { status, error, .. } | DeliveryOutcome::Dead { status, error } => {
            (*status, Some(error.as_str()))
        }
    };
    if matches!(outcome, DeliveryOutcome::Delivered { .. }) {
        sqlx::query("UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1")
            .bind(endpoint)
            .execute(&mut *conn)
            .await?;
    } else if status == Some(410) {
        sqlx::query(
            "UPDATE webhook_endpoints SET disabled_at = $2, disabled_reason = $3 \
             WHERE id = $1 AND disabled_at IS NULL",
        )
        .bind(endpoint)
        .bind(at)
        .bind("the receiver answered 410 Gone: it asked not to be called again")
        .execute(&mut *conn)
        .await?;
    } else {
        sqlx::query(
            "UPDATE webhook_endpoints SET failing_since = COALESCE(failing_since, $2) WHERE id = $1",
        )
        .bind(endpoint)
        .bind(at)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "UPDATE webhook_endpoints SET disabled_at = $2, disabled_reason = $3 \
             WHERE id = $1 AND disabled_at IS NULL AND failing_since < $4",
        )
        .bind(endpoint)
        .bind(at)
        .bind(format!(
            "every try failed for {FAILING_DAYS_MAX} days (last: {})",
            error.unwrap_or("no answer")
        ))
        .bind(at - chrono::Duration::days(FAILING_DAYS_MAX))
        .execute(&mut *conn)
        .await?;
        return Ok(2);
    }
    Ok(1)
}

/// The deliveries a filter names, its seek among the conditions: newest
/// first, so after a position is older and before it is newer.
fn deliveries_from<'a>(q: &mut sqlx::QueryBuilder<'a, Db>, f: &'a DeliveryFilter) {
    q.push(" FROM webhook_deliveries d JOIN users u ON u.id = d.user_id WHERE TRUE");
    if let Some(u) = f.user {
        q.push(" AND d.user_id = ").push_bind(u.0);
    }
    if let Some(s) = f.state {
        q.push(" AND d.state = ").push_bind(s.as_str());
    }
    if let Some(e) = f.endpoint {
        q.push(" AND d.endpoint_id = ").push_bind(e.0);
    }
    if let Some(t) = f.since {
        q.push(" AND d.created_at >= ").push_bind(t);
    }
    if let Some(seek) = f.seek {
        let op = match seek {
            Seek::After(_) => "<",
            Seek::Before(_) => ">",
        };
        let c = seek.key();
        q.push(" AND ");
        push_past(q, ("d.created_at", "d.id"), op, c.created_at, c.id.0);
    }
}
