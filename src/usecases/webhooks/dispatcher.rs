//! The webhook dispatcher, one per worker node: it claims due deliveries
//! in batches (leased and fenced; `SKIP LOCKED` on PostgreSQL, so nodes
//! never post one row at once), signs each per Standard Webhooks, posts it
//! with a 15 s timeout to addresses the guard checked, follows no
//! redirect, reads at most a few KB of the answer, and records the outcome:
//! 2xx is delivered; anything else is tried again on the retry schedule
//! (with jitter, honouring `Retry-After`) until the last try, then dead.
//! A paid call, a claim or a terminal write never waits on it: it only
//! reads what the outbox holds. A crash between a post and its record
//! sends it again with the same id when the lease runs out (at least once).

use super::signing;
use crate::net::guard::GuardedResolver;
use crate::store::{ClaimedDelivery, Delivery, DeliveryOutcome};
use crate::Tollgate;
use chrono::{DateTime, Utc};
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Deliveries in flight on one node at most.
const IN_FLIGHT_MAX: usize = 16;
/// How long a claim lasts: longer than a post may take.
const LEASE_S: f64 = 60.0;
/// How long one post may take.
pub const POST_TIMEOUT: Duration = Duration::from_secs(15);
/// What is read of a receiver's answer at most.
const ANSWER_BYTES_MAX: usize = 4096;
/// A `Retry-After` is honoured up to this.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(86_400);
/// How often an idle dispatcher looks for due deliveries.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// The HTTP client every delivery goes through: no redirects, no proxy,
/// and a resolver that connects only to addresses the guard allows.
pub fn client(t: &Tollgate) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(POST_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver(t.webhook_guard())))
        .user_agent(concat!("Tollgate-Webhooks/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// Runs until `stopped`: claims what is due and posts it.
pub async fn run(t: Tollgate, node: String, mut stopped: watch::Receiver<bool>) {
    let http = client(&t);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
    let bell = t.webhook_bell();
    let mut posts = JoinSet::new();
    loop {
        while posts.try_join_next().is_some() {}
        if *stopped.borrow() {
            break;
        }
        let free = slots.available_permits();
        let claimed = if free > 0 {
            match t
                .store()
                .claim_deliveries(&format!("{node}:webhooks"), free as i64, LEASE_S)
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming webhook deliveries failed");
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        let idle = claimed.is_empty();
        for c in claimed {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                break;
            };
            let (t, http) = (t.clone(), http.clone());
            posts.spawn(async move {
                deliver(&t, &http, c).await;
                drop(permit);
            });
        }
        if idle {
            tokio::select! {
                _ = tokio::time::sleep(IDLE_POLL) => {}
                _ = bell.notified() => {}
                _ = stopped.changed() => {}
            }
        }
    }
    // Shutting down: posts get a moment to finish; one still waiting on a
    // slow receiver is dropped, and its lease lets another node send it
    // again, under the same id (at least once).
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while posts.join_next().await.is_some() {}
    })
    .await;
    posts.abort_all();
}

/// What one post came to: the status (none without an answer) and, when
/// it failed, why, with the receiver's `Retry-After`.
struct Posted {
    status: Option<u16>,
    error: Option<String>,
    retry_after: Option<Duration>,
}

/// Signs and posts one delivery, then records what happened.
pub async fn deliver(t: &Tollgate, http: &reqwest::Client, c: ClaimedDelivery) {
    let d = &c.delivery;
    let mut secrets = c.secrets.clone();
    if secrets.is_empty() {
        // A job's own webhook_url, before its owner ever asked for the
        // account secret: it is made now (first use).
        match t
            .store()
            .account_webhook_secret(d.user_id, &signing::new_secret(), Utc::now())
            .await
        {
            Ok(s) => secrets.push(s),
            Err(e) => {
                tracing::warn!(error = %e, delivery = %d.id, "no account secret; trying later");
                return;
            }
        }
    }
    let timestamp = Utc::now().timestamp();
    let refs: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let signature = signing::sign(&refs, &d.webhook_id, timestamp, &d.body);
    let posted = match t.webhook_guard().check_url(&d.url).await {
        // Checked again at every send: a URL that became internal is not called.
        Err(e) => Posted {
            status: None,
            error: Some(format!("refused: {e}")),
            retry_after: None,
        },
        Ok((url, _)) => post(http, url, &d.webhook_id, timestamp, &signature, &d.body).await,
    };
    let now = Utc::now();
    let outcome = outcome(t, d, posted, now);
    match t
        .store()
        .finish_delivery(d.id, c.claim_token, &outcome, now)
        .await
    {
        Ok(true) => {
            if let DeliveryOutcome::Dead { status, .. } = &outcome {
                // The event and the endpoint's id, never the URL (it may
                // carry a secret) or the body.
                tracing::warn!(delivery = %d.id, event = d.event.as_str(), endpoint = ?d.endpoint_id, ?status, "a webhook delivery died after its last try; an admin may replay it");
            }
        }
        // Another dispatcher took it over (our lease ran out): it will post
        // and record it; ours was at-least-once.
        Ok(false) => tracing::info!(delivery = %d.id, "a delivery's claim moved on"),
        Err(e) => tracing::warn!(delivery = %d.id, error = %e, "recording a delivery failed"),
    }
}

/// What a post came to: delivered, tried again after the schedule's next
/// delay (jittered, and no sooner than the receiver's `Retry-After` asks,
/// within reason), or dead when the schedule is spent or the receiver
/// answered 410.
fn outcome(t: &Tollgate, d: &Delivery, posted: Posted, now: DateTime<Utc>) -> DeliveryOutcome {
    match (posted.status, &posted.error) {
        (Some(s), None) => DeliveryOutcome::Delivered {
            status: i32::from(s),
        },
        (status, error) => {
            let status = status.map(i32::from);
            let error = error.clone().unwrap_or_else(|| "failed".into());
            let tries = usize::try_from(d.attempts).unwrap_or(0) + 1;
            let schedule = &t.config().webhook_retry_schedule;
            // A test event says how the endpoint answers now: no retries,
            // so a receiver that never answers is called once per test.
            let schedule = if d.event == crate::model::WebhookEvent::Test {
                &[]
            } else {
                &schedule[..]
            };
            match schedule.get(tries - 1) {
                // 410: the receiver asked not to be called again.
                Some(_) if status == Some(410) => DeliveryOutcome::Dead { status, error },
                Some(delay) => {
                    let jittered = delay.mul_f64(rand::thread_rng().gen_range(0.9..1.1));
                    let wait = posted
                        .retry_after
                        .map_or(jittered, |r| r.min(RETRY_AFTER_MAX).max(jittered));
                    DeliveryOutcome::Retry {
                        status,
                        error,
                        next_at: now + chrono::Duration::from_std(wait).unwrap_or_default(),
                    }
                }
                None => DeliveryOutcome::Dead { status, error },
            }
        }
    }
}

async fn post(
    http: &reqwest::Client,
    url: reqwest::Url,
    id: &str,
    timestamp: i64,
    signature: &str,
    body: &str,
) -> Posted {
    let sent = http
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body.to_string())
        .send()
        .await;
    let mut r = match sent {
        Ok(r) => r,
        Err(e) => {
            let why = if e.is_timeout() {
                "no answer within 15 s".to_string()
            } else if e.is_connect() {
                format!("could not connect: {e}")
            } else {
                e.to_string()
            };
            return Posted {
                status: None,
                error: Some(why),
                retry_after: None,
            };
        }
    };
    let status = r.status();
    let retry_after = r
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    // A few KB of the answer, for the record; the rest is never read.
    let mut answer = Vec::new();
    while answer.len() < ANSWER_BYTES_MAX {
        match r.chunk().await {
            Ok(Some(chunk)) => answer.extend_from_slice(&chunk),
            _ => break,
        }
    }
    answer.truncate(ANSWER_BYTES_MAX);
    if status.is_success() {
        return Posted {
            status: Some(status.as_u16()),
            error: None,
            retry_after: None,
        };
    }
    let text = String::from_utf8_lossy(&answer);
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    Posted {
        status: Some(status.as_u16()),
        error: Some(if text.is_empty() {
            format!("the receiver answered {status}")
        } else {
            format!("the receiver answered {status}: {text}")
        }),
        retry_after,
    }
}
