//! `GET /metrics`: the Prometheus text format, built at scrape time from the
//! database (the truth) with prometheus-client: jobs by status, attempts and
//! spend by model (unpriced attempts counted apart), held reservations,
//! parked work by stage and age, this node's claim conflicts, and its
//! database commits and statements by purpose.

use crate::store::MetricsSnapshot;
use crate::usecases::observe::Reading;
use crate::Tollgate;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// The `q` quantile of sorted values (nearest rank), none when empty.
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    sorted.get(((last as f64) * q).round() as usize).copied()
}

/// Money is exported in whole millionths of a dollar, as integers, so a
/// scrape is as exact as the ledger (never a float).
fn micros(usd: crate::model::Usd) -> i64 {
    usd.micros().unwrap_or(i64::MAX)
}

/// Jobs, attempts and spend by model (unpriced counted apart), holds,
/// parked work, claim conflicts and database commits, in the OpenMetrics
/// text format.
///
/// Admins only here; `TOLLGATE_OPS_LISTEN` serves it (with `/healthz`,
/// `/readyz` and the OpenAPI document) on an internal listener without a
/// token, for a scraper.
#[utoipa::path(
    get, path = "/metrics", tag = "operations", operation_id = "metrics",
    responses(
        (status = 200, description = "The metrics.", content_type = "application/openmetrics-text", body = String),
        (status = 401, description = "No valid token or session.", body = crate::wire::ErrorBody),
        (status = 403, description = "Not an admin.", body = crate::wire::ErrorBody),
        (status = 503, description = "The database does not answer.", content_type = "text/plain", body = String),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
pub async fn metrics(
    State(t): State<Tollgate>,
    _admin: crate::usecases::auth::Authorized<crate::usecases::auth::AdminOnly>,
) -> Response {
    render(&t).await
}

/// `/metrics` on the internal listener: no token (the listener is not
/// reachable from outside).
pub async fn metrics_internal(State(t): State<Tollgate>) -> Response {
    render(&t).await
}

async fn render(t: &Tollgate) -> Response {
    let reading = match t.reading().await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "metrics unavailable");
            return (StatusCode::SERVICE_UNAVAILABLE, "database unreachable\n").into_response();
        }
    };
    let mut registry = Registry::with_prefix("tollgate");
    register_work(&mut registry, &reading.work);
    register_holds(&mut registry, &reading.work);
    register_parked(&mut registry, &reading.work, reading.at);
    register_review_queue(&mut registry, &reading);
    register_webhooks(&mut registry, &reading);
    register_breaker(&mut registry, &reading);
    register_node(&mut registry, &reading);
    register_retention(&mut registry, &reading);

    let mut body = String::new();
    if encode(&mut body, &registry).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n").into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// Jobs by status; attempts, priced spend and unpriced attempts by model.
fn register_work(registry: &mut Registry, snapshot: &MetricsSnapshot) {
    let jobs = Family::<Labels, Gauge>::default();
    for (status, n) in &snapshot.jobs_by_status {
        jobs.get_or_create(&vec![("status".into(), status.clone())])
            .set(*n);
    }
    registry.register("jobs", "Jobs by status", jobs);
    let attempts = Family::<Labels, Gauge>::default();
    let spend = Family::<Labels, Gauge>::default();
    let unpriced = Family::<Labels, Gauge>::default();
    for (model, state, n, usd, unpriced_n) in &snapshot.attempts_by_model {
        let labels = vec![
            ("model".into(), model.clone()),
            ("state".into(), state.clone()),
        ];
        attempts.get_or_create(&labels).set(*n);
        spend
            .get_or_create(&vec![("model".into(), model.clone())])
            .inc_by(micros(*usd));
        unpriced
            .get_or_create(&vec![("model".into(), model.clone())])
            .inc_by(*unpriced_n);
    }
    registry.register("attempts", "Provider attempts by model and state", attempts);
    registry.register(
        "spend_microusd",
        "Priced provider spend by model, in millionths of a US dollar",
        spend,
    );
    registry.register(
        "unpriced_attempts",
        "Finished attempts nobody could price, by model",
        unpriced,
    );
}

/// Budget reservations not yet settled, and what they hold.
fn register_holds(registry: &mut Registry, snapshot: &MetricsSnapshot) {
    let held: Gauge = Gauge::default();
    held.set(snapshot.reservations_held);
    registry.register(
        "reservations_held",
        "Budget reservations not yet settled",
        held,
    );
    let reserved: Gauge = Gauge::default();
    reserved.set(micros(snapshot.reserved_usd));
    registry.register(
        "reserved_microusd",
        "Millionths of a US dollar held by unsettled reservations",
        reserved,
    );
}

/// Parked jobs by stage, and how long the oldest of each has waited.
fn register_parked(registry: &mut Registry, snapshot: &MetricsSnapshot, now: DateTime<Utc>) {
    let parked = Family::<Labels, Gauge>::default();
    let parked_age = Family::<Labels, FloatGauge>::default();
    for (stage, n, oldest) in &snapshot.parked {
        let labels = vec![("stage".into(), stage.clone())];
        parked.get_or_create(&labels).set(*n);
        if let Some(oldest) = oldest {
            let age = (now - *oldest).num_milliseconds() as f64 / 1000.0;
            parked_age.get_or_create(&labels).set(age.max(0.0));
        }
    }
    registry.register(
        "parked",
        "Jobs waiting for a reviewer's decision, by stage",
        parked,
    );
    registry.register(
        "parked_oldest_age_seconds",
        "How long the oldest parked job of each stage has waited",
        parked_age,
    );
}

/// The reviewer queue: every record not closed by stage and state, the
/// unresolved submissions, how long reviewers take, recoveries that had
/// to be claimed again, and delivery retries that failed.
fn register_review_queue(registry: &mut Registry, reading: &Reading) {
    if let Some(counts) = &reading.parked {
        let records = Family::<Labels, Gauge>::default();
        for c in counts {
            records
                .get_or_create(&vec![
                    ("stage".into(), c.stage.as_str().into()),
                    ("state".into(), c.state.as_str().into()),
                ])
                .set(c.count);
        }
        registry.register(
            "parked_records",
            "Parked records not closed, by stage and state (open, decided, recovering)",
            records,
        );
    }
    if let Some(unresolved) = reading.unresolved_submissions() {
        let g: Gauge = Gauge::default();
        g.set(unresolved);
        registry.register(
            "unresolved_submissions",
            "Submissions that may have been paid, with no answer and no decision yet",
            g,
        );
    }
    if let Some(latencies) = &reading.review_latencies {
        let latency = Family::<Labels, FloatGauge>::default();
        for (q, label) in [(0.5, "0.5"), (0.95, "0.95"), (1.0, "1")] {
            if let Some(v) = quantile(latencies, q) {
                latency
                    .get_or_create(&vec![("quantile".into(), label.into())])
                    .set(v);
            }
        }
        registry.register(
            "review_latency_seconds",
            "From parking to a reviewer's decision, over the decisions of the last day",
            latency,
        );
    }
    if let Some(r) = &reading.recoveries {
        let g: Gauge = Gauge::default();
        g.set(r.reclaimed);
        registry.register(
            "recovery_claim_conflicts",
            "Recoveries claimed more than once (a run lost its lease and another took over)",
            g,
        );
        let g: Gauge = Gauge::default();
        g.set(r.delivery_failed_again);
        registry.register(
            "delivery_failures_repeated",
            "Deliveries that failed again after a reviewer's retry_delivery",
            g,
        );
    }
}

/// Webhooks: the backlog by state, how long the oldest pending one has
/// waited, and failing deliveries by the class of their last answer.
fn register_webhooks(registry: &mut Registry, reading: &Reading) {
    let now = reading.at;
    if let Some(w) = &reading.webhooks {
        let backlog = Family::<Labels, Gauge>::default();
        for s in crate::model::DeliveryState::ALL {
            let n = w
                .by_state
                .iter()
                .find(|(x, _)| *x == s)
                .map_or(0, |(_, n)| *n);
            backlog
                .get_or_create(&vec![("state".into(), s.as_str().into())])
                .set(n);
        }
        registry.register(
            "webhook_deliveries",
            "Webhook deliveries by state (pending, delivered, dead)",
            backlog,
        );
        let oldest: FloatGauge = FloatGauge::default();
        oldest.set(w.oldest_pending.map_or(0.0, |o| {
            ((now - o).num_milliseconds() as f64 / 1000.0).max(0.0)
        }));
        registry.register(
            "webhook_oldest_pending_age_seconds",
            "How long the oldest pending webhook delivery has waited (0 when none)",
            oldest,
        );
        let failing = Family::<Labels, Gauge>::default();
        for (class, n) in &w.failing_by_class {
            failing
                .get_or_create(&vec![("class".into(), class.clone())])
                .set(*n);
        }
        registry.register(
            "webhook_failing",
            "Deliveries not delivered after a failed try, by their last answer's class",
            failing,
        );
    }
}

/// Today's breaker: cap, what it booked and holds, and whether it is
/// past the warning share or halted.
fn register_breaker(registry: &mut Registry, reading: &Reading) {
    let Some(d) = &reading.today else {
        return;
    };
    for (name, help, value) in [
        (
            "budget_cap_microusd",
            "Today's spending cap, in millionths of a US dollar",
            micros(d.cap_usd),
        ),
        (
            "budget_used_microusd",
            "What today's breaker booked, in millionths of a US dollar",
            micros(d.used_usd),
        ),
        (
            "spend_warning",
            "1 when today's used and reserved spend is past the warning share of its cap",
            i64::from(d.warning),
        ),
        (
            "budget_halted",
            "1 when today is halted: no paid call is sent",
            i64::from(d.halted),
        ),
        (
            "unpriced_attempts_today",
            "Finished attempts today nobody could price",
            d.tally.unpriced,
        ),
    ] {
        let g: Gauge = Gauge::default();
        g.set(value);
        registry.register(name, help, g);
    }
}

/// This node's own counts: claim conflicts, and what the work costs the
/// database.
fn register_node(registry: &mut Registry, reading: &Reading) {
    let conflicts: Gauge = Gauge::default();
    conflicts.set(i64::try_from(reading.claim_conflicts).unwrap_or(i64::MAX));
    registry.register(
        "claim_conflicts",
        "Runs on this node that found their claim taken (stale fencing token)",
        conflicts,
    );

    // What the work costs the database: commits (and the statements they
    // carried) by this node since it started, by purpose.
    let commits = Family::<Labels, Counter>::default();
    let statements = Family::<Labels, Counter>::default();
    for &(purpose, n, stmts) in &reading.commits {
        let labels = vec![("purpose".into(), purpose.as_str().to_string())];
        commits.get_or_create(&labels).inc_by(n);
        statements.get_or_create(&labels).inc_by(stmts);
    }
    registry.register(
        "db_commits",
        "Database commits by this node, by purpose (claim, heartbeat, units, submit, other)",
        commits,
    );
    registry.register(
        "db_statements",
        "Statements those commits carried, by purpose",
        statements,
    );
}

/// What retention purged on this node, by kind (outputs, uploads, events,
/// evidence, deliveries).
fn register_retention(registry: &mut Registry, reading: &Reading) {
    let purged = Family::<Labels, Counter>::default();
    for (kind, n) in reading.purged {
        purged
            .get_or_create(&vec![("kind".into(), kind.to_string())])
            .inc_by(n);
    }
    registry.register(
        "retention_purged",
        "What the retention policy purged on this node, by kind",
        purged,
    );
}
