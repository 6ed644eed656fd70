//! What the webhook pages show: a person's endpoints and recent deliveries
//! (Account), and every delivery by state for admins, dead ones first, with
//! what a replay would send counted before it is confirmed.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use tollgate::model::Role;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EndpointRow {
    pub id: String,
    pub url: String,
    pub events: Vec<tollgate::model::WebhookEvent>,
    pub created: String,
    pub disabled: bool,
    pub disabled_reason: Option<String>,
    pub failing_since: Option<String>,
    /// Until then the previous secret signs too.
    pub rotating_until: Option<String>,
    pub owner: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DeliveryRow {
    pub id: String,
    pub webhook_id: String,
    pub event: tollgate::model::WebhookEvent,
    pub job_id: Option<String>,
    pub url: String,
    pub owner: String,
    pub state: tollgate::model::DeliveryState,
    pub attempts: i32,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    /// When the next try goes, for a pending one.
    pub next_try: Option<String>,
    pub created: String,
    pub replays: i32,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MyWebhooks {
    pub endpoints: Vec<EndpointRow>,
    pub deliveries: super::Paged<DeliveryRow>,
    /// The events an endpoint may want.
    pub events: Vec<tollgate::model::WebhookEvent>,
}

/// Deliveries a page on the admin's Webhooks page.
pub const DELIVERIES_PAGE: i64 = 50;
/// A person's own deliveries a page on their Account page.
pub const MY_DELIVERIES_PAGE: i64 = 20;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AdminWebhooks {
    /// (state, count) across everyone.
    pub counts: Vec<(String, i64)>,
    pub oldest_pending: Option<String>,
    pub deliveries: super::Paged<DeliveryRow>,
    pub endpoints: Vec<EndpointRow>,
    /// The filter's state ("dead" first when none is chosen).
    pub state: String,
    /// A replay of everything dead for an endpoint since a time, counted.
    pub preview: Option<ReplayPreview>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReplayPreview {
    pub endpoint: String,
    pub url: String,
    pub since: String,
    pub count: usize,
}

#[cfg(feature = "ssr")]
fn endpoint_row(e: &tollgate::store::WebhookEndpoint, owner: String) -> EndpointRow {
    use super::ssr::when;
    EndpointRow {
        id: e.id.to_string(),
        url: e.url.clone(),
        events: e.events.clone(),
        created: when(e.created_at),
        disabled: e.disabled_at.is_some(),
        disabled_reason: e.disabled_reason.clone(),
        failing_since: e.failing_since.map(when),
        rotating_until: e
            .previous_expires_at
            .filter(|t| *t > chrono::Utc::now())
            .map(when),
        owner,
    }
}

#[cfg(feature = "ssr")]
fn delivery_row(d: &tollgate::store::Delivery) -> DeliveryRow {
    use super::ssr::when;
    use tollgate::model::DeliveryState;
    DeliveryRow {
        id: d.id.to_string(),
        webhook_id: d.webhook_id.clone(),
        event: d.event,
        job_id: d.job_id.map(|j| j.to_string()),
        url: d.url.clone(),
        owner: d.user_email.as_str().to_string(),
        state: d.state,
        attempts: d.attempts,
        last_status: d.last_status,
        last_error: d.last_error.clone(),
        next_try: (d.state == DeliveryState::Pending).then(|| when(d.next_at)),
        created: when(d.created_at),
        replays: d.replays,
    }
}

/// A person's endpoints and their own deliveries, newest first, a page at
/// a time from `cursor` (the Account page's).
#[server]
pub async fn load_my_webhooks(cursor: Option<String>) -> Result<MyWebhooks, ServerFnError> {
    use super::ssr::*;
    use tollgate::usecases::webhooks::DeliveryQuery;
    let p = require(Role::User).await?;
    let t = engine()?;
    let endpoints = t.webhook_endpoints(&p.user).await.map_err(fail)?;
    let mut query = DeliveryQuery::parse(None, None, Some(MY_DELIVERIES_PAGE), cursor.as_deref())
        .map_err(fail)?;
    query.counted = true;
    // Only the caller's own, whatever their role, on their Account page.
    let deliveries = t.own_deliveries(&p.user, &query).await.map_err(fail)?;
    let me = p.user.email.as_str().to_string();
    Ok(MyWebhooks {
        endpoints: endpoints
            .iter()
            .map(|e| endpoint_row(e, me.clone()))
            .collect(),
        deliveries: super::paged(deliveries, |d| delivery_row(&d)),
        events: tollgate::model::WebhookEvent::JOB_EVENTS.to_vec(),
    })
}

/// What "replay the dead deliveries of an endpoint since a time" would
/// send, before the admin confirms it.
#[cfg(feature = "ssr")]
async fn replay_preview(
    t: &tollgate::Tollgate,
    admin: &tollgate::store::User,
    endpoints: &[tollgate::store::WebhookEndpoint],
    endpoint: String,
    since: String,
) -> Result<ReplayPreview, ServerFnError> {
    use super::ssr::fail;
    let id = endpoint
        .parse()
        .map_err(|_| fail(tollgate::Error::NotFound("webhook endpoint")))?;
    let since_at = chrono::NaiveDateTime::parse_from_str(&since, "%Y-%m-%dT%H:%M")
        .map(|n| n.and_utc())
        .or_else(|_| chrono::DateTime::parse_from_rfc3339(&since).map(|d| d.to_utc()))
        .map_err(|_| {
            fail(tollgate::Error::invalid(
                "since",
                "must be a time like 2026-12-01T09:00",
            ))
        })?;
    let dead = t.dead_since(admin, id, since_at).await.map_err(fail)?;
    let url = endpoints
        .iter()
        .find(|x| x.id == id)
        .map(|x| x.url.clone())
        .unwrap_or_default();
    Ok(ReplayPreview {
        endpoint,
        url,
        since,
        count: dead.len(),
    })
}

#[server]
pub async fn load_admin_webhooks(
    state: Option<String>,
    endpoint: Option<String>,
    since: Option<String>,
    cursor: Option<String>,
) -> Result<AdminWebhooks, ServerFnError> {
    use super::ssr::*;
    let p = require(Role::Admin).await?;
    let t = engine()?;
    let state = state
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "dead".into());
    let mut query = tollgate::usecases::webhooks::DeliveryQuery::parse(
        Some(&state),
        None,
        Some(DELIVERIES_PAGE),
        cursor.as_deref(),
    )
    .map_err(fail)?;
    query.counted = true;
    let deliveries = t.deliveries(&p.user, &query).await.map_err(fail)?;
    let stats = t.webhook_stats(&p.user).await.map_err(fail)?;
    let owners: std::collections::HashMap<_, _> = t
        .list_users()
        .await
        .map_err(fail)?
        .into_iter()
        .map(|u| (u.id, u.email.to_string()))
        .collect();
    let endpoints = t.all_webhook_endpoints(&p.user).await.map_err(fail)?;
    let preview = match (
        endpoint.filter(|e| !e.is_empty()),
        since.filter(|s| !s.is_empty()),
    ) {
        (Some(e), Some(s)) => Some(replay_preview(&t, &p.user, &endpoints, e, s).await?),
        _ => None,
    };
    Ok(AdminWebhooks {
        counts: tollgate::model::DeliveryState::ALL
            .iter()
            .map(|s| {
                (
                    s.as_str().to_string(),
                    stats
                        .by_state
                        .iter()
                        .find(|(x, _)| x == s)
                        .map(|(_, n)| *n)
                        .unwrap_or(0),
                )
            })
            .collect(),
        oldest_pending: stats.oldest_pending.map(when),
        deliveries: super::paged(deliveries, |d| delivery_row(&d)),
        endpoints: endpoints
            .iter()
            .map(|e| endpoint_row(e, owners.get(&e.user_id).cloned().unwrap_or_default()))
            .collect(),
        state,
        preview,
    })
}
