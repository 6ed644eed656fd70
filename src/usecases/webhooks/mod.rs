//! Signed webhooks (rule 13), as people and programs use them: endpoints
//! with a secret shown once, rotation (both secrets sign for 24 hours), the
//! account secret for a job's own `webhook_url`, deliveries and replays.
//! The outbox rows are written by the store in the transaction of the state
//! change they announce (the envelope comes from `wire`); `dispatcher`
//! claims and posts them; the address guard (`net::guard`) keeps every
//! request out of our own network; `signing` is Standard Webhooks.

pub mod dispatcher;
pub mod signing;

use crate::model::{DeliveryId, DeliveryState, Role, UserId, WebhookEndpointId, WebhookEvent};
use crate::store::{
    Delivery, DeliveryCursor, DeliveryFilter, NewWebhookEndpoint, Seek, User, WebhookEndpoint,
    WebhookStats,
};
use crate::usecases::cursor::{self, Page, Position};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::{DateTime, Utc};

/// How long the previous secret keeps signing after a rotation.
pub const ROTATION_OVERLAP_HOURS: i64 = 24;
/// Endpoints one person may have.
pub const ENDPOINTS_PER_USER_MAX: usize = 20;
pub const DELIVERIES_PAGE_MAX: i64 = 100;
/// Deliveries one replay-since action covers at most.
pub const REPLAY_MAX: i64 = 1000;

/// A new endpoint as asked for, and the secret shown once.
#[derive(Clone, Debug)]
pub struct CreatedEndpoint {
    pub endpoint: WebhookEndpoint,
    pub secret: String,
}

fn refused(field: &str, e: crate::net::guard::Refused) -> Error {
    Error::invalid(field, e.to_string())
}

fn parse_events(raw: &[String]) -> Result<Vec<WebhookEvent>> {
    if raw.is_empty() {
        return Ok(WebhookEvent::JOB_EVENTS.to_vec());
    }
    let mut out = Vec::new();
    for r in raw {
        let e = WebhookEvent::parse(r)
            .filter(|e| WebhookEvent::JOB_EVENTS.contains(e))
            .ok_or_else(|| {
                Error::invalid(
                    "events",
                    "each must be generation.succeeded, generation.failed, generation.cancelled or generation.parked",
                )
            })?;
        if !out.contains(&e) {
            out.push(e);
        }
    }
    Ok(out)
}

/// A list of deliveries as asked for, parsed once at the edge.
#[derive(Clone, Copy, Debug)]
pub struct DeliveryQuery {
    pub state: Option<DeliveryState>,
    pub endpoint: Option<WebhookEndpointId>,
    pub limit: i64,
    pub seek: Option<Seek<DeliveryCursor>>,
    /// Say where the page sits in the whole list (two counts more).
    pub counted: bool,
}

impl DeliveryQuery {
    /// From the query string's text; `limit` is 50 when absent.
    pub fn parse(
        state: Option<&str>,
        endpoint: Option<&str>,
        limit: Option<i64>,
        cursor: Option<&str>,
    ) -> Result<Self> {
        let limit = limit.unwrap_or(50);
        if !(1..=DELIVERIES_PAGE_MAX).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be 1 to {DELIVERIES_PAGE_MAX}"),
            ));
        }
        let state = state
            .map(|s| {
                DeliveryState::parse(s)
                    .ok_or_else(|| Error::invalid("state", "must be pending, delivered or dead"))
            })
            .transpose()?;
        let endpoint = endpoint
            .map(|e| {
                e.parse()
                    .map_err(|_| Error::invalid("endpoint", "must be an endpoint id"))
            })
            .transpose()?;
        Ok(DeliveryQuery {
            state,
            endpoint,
            limit,
            seek: cursor::decode_opt(cursor)?,
            counted: false,
        })
    }
}

/// `created_at|id`.
impl Position for DeliveryCursor {
    fn parts(&self) -> Vec<String> {
        vec![cursor::time_part(self.created_at), self.id.to_string()]
    }

    fn read(parts: &[&str]) -> Option<Self> {
        let [at, id] = parts else { return None };
        Some(DeliveryCursor {
            created_at: cursor::read_time(at)?,
            id: id.parse().ok()?,
        })
    }
}

impl Tollgate {
    /// The address guard, with the operator's allowed networks.
    pub fn webhook_guard(&self) -> crate::net::guard::Guard {
        crate::usecases::webhook_guard(self.config())
    }

    /// Checks a URL we are asked to call later: its shape, and every
    /// address its host resolves to (422 when refused; it is never called).
    pub async fn check_webhook_url(&self, field: &str, url: &str) -> Result<String> {
        let (url, _) = self
            .webhook_guard()
            .check_url(url.trim())
            .await
            .map_err(|e| refused(field, e))?;
        Ok(url.to_string())
    }

    /// A new endpoint for `user`; its secret is in the answer, and only there.
    pub async fn create_webhook_endpoint(
        &self,
        user: &User,
        url: &str,
        events: &[String],
    ) -> Result<CreatedEndpoint> {
        let events = parse_events(events)?;
        let url = self.check_webhook_url("url", url).await?;
        if self.store().webhook_endpoints(Some(user.id)).await?.len() >= ENDPOINTS_PER_USER_MAX {
            return Err(Error::Conflict {
                code: "TOO_MANY_ENDPOINTS",
                message: format!("at most {ENDPOINTS_PER_USER_MAX} endpoints; delete one first"),
            });
        }
        let secret = signing::new_secret();
        let endpoint = self
            .store()
            .insert_webhook_endpoint(&NewWebhookEndpoint {
                id: WebhookEndpointId::new(),
                user_id: user.id,
                url,
                events,
                secret: secret.clone(),
                created_at: Utc::now(),
            })
            .await?;
        Ok(CreatedEndpoint { endpoint, secret })
    }

    pub async fn webhook_endpoints(&self, user: &User) -> Result<Vec<WebhookEndpoint>> {
        Ok(self.store().webhook_endpoints(Some(user.id)).await?)
    }

    /// Every person's endpoints (admins).
    pub async fn all_webhook_endpoints(&self, admin: &User) -> Result<Vec<WebhookEndpoint>> {
        if !admin.role.allows(Role::Admin) {
            return Err(Error::Forbidden);
        }
        Ok(self.store().webhook_endpoints(None).await?)
    }

    async fn own_endpoint(&self, user: &User, id: WebhookEndpointId) -> Result<WebhookEndpoint> {
        match self.store().webhook_endpoint(id).await? {
            Some(e) if e.user_id == user.id => Ok(e),
            _ => Err(Error::NotFound("webhook endpoint")),
        }
    }

    pub async fn delete_webhook_endpoint(&self, user: &User, id: WebhookEndpointId) -> Result<()> {
        if self
            .store()
            .delete_webhook_endpoint(id, user.id, Utc::now())
            .await?
        {
            Ok(())
        } else {
            Err(Error::NotFound("webhook endpoint"))
        }
    }

    /// A new secret; the previous one keeps signing for 24 hours.
    pub async fn rotate_webhook_secret(
        &self,
        user: &User,
        id: WebhookEndpointId,
    ) -> Result<CreatedEndpoint> {
        let secret = signing::new_secret();
        let until = Utc::now() + chrono::Duration::hours(ROTATION_OVERLAP_HOURS);
        let endpoint = self
            .store()
            .rotate_webhook_secret(id, user.id, &secret, until)
            .await?
            .ok_or(Error::NotFound("webhook endpoint"))?;
        Ok(CreatedEndpoint { endpoint, secret })
    }

    /// A new account secret (it signs deliveries to a job's own
    /// webhook_url); the previous one keeps signing beside it for 24 hours.
    pub async fn rotate_account_webhook_secret(&self, user: &User) -> Result<String> {
        let secret = signing::new_secret();
        let now = Utc::now();
        let until = now + chrono::Duration::hours(ROTATION_OVERLAP_HOURS);
        self.store()
            .rotate_account_webhook_secret(user.id, &secret, until, now)
            .await?;
        Ok(secret)
    }

    /// The account secret that signs a job's own webhook_url (made on first use).
    pub async fn account_webhook_secret(&self, user: &User) -> Result<String> {
        Ok(self
            .store()
            .account_webhook_secret(user.id, &signing::new_secret(), Utc::now())
            .await?)
    }

    /// Sends a `webhook.test` event to one of the caller's endpoints: a few
    /// a minute (429 beyond), tried once (it says how the endpoint answers now).
    pub async fn send_test_webhook(
        &self,
        user: &User,
        id: WebhookEndpointId,
    ) -> Result<DeliveryId> {
        let endpoint = self.own_endpoint(user, id).await?;
        if let Some(why) = &endpoint.disabled_reason {
            return Err(Error::Conflict {
                code: "ENDPOINT_DISABLED",
                message: format!("this endpoint is disabled: {why}"),
            });
        }
        self.test_event_limits().check(user.id, endpoint.id)?;
        let at = Utc::now();
        let webhook_id = format!("test:{}", uuid::Uuid::new_v4());
        let body = serde_json::json!({
            "type": WebhookEvent::Test.as_str(),
            "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "data": {"message": "A test event from Tollgate.", "endpoint": endpoint.id},
        })
        .to_string();
        let id = self
            .store()
            .insert_test_delivery(&endpoint, &webhook_id, &body, at)
            .await?;
        self.webhook_bell().notify_one();
        Ok(id)
    }

    /// Deliveries, newest first: the caller's own, or everyone's for admins.
    pub async fn deliveries(&self, viewer: &User, q: &DeliveryQuery) -> Result<Page<Delivery>> {
        let user = (!viewer.role.allows(Role::Admin)).then_some(viewer.id);
        self.delivery_page(user, q).await
    }

    /// The caller's own deliveries, newest first, whatever their role (the
    /// Account page shows a person only what was sent for them).
    pub async fn own_deliveries(&self, viewer: &User, q: &DeliveryQuery) -> Result<Page<Delivery>> {
        self.delivery_page(Some(viewer.id), q).await
    }

    /// A page of deliveries, of one person or (`None`) everyone's.
    async fn delivery_page(
        &self,
        user: Option<UserId>,
        q: &DeliveryQuery,
    ) -> Result<Page<Delivery>> {
        let filter = DeliveryFilter {
            user,
            state: q.state,
            endpoint: q.endpoint,
            since: None,
            seek: q.seek,
            limit: q.limit + 1,
        };
        let list = self.store().list_deliveries(&filter).await?;
        let at = |d: &Delivery| DeliveryCursor {
            created_at: d.created_at,
            id: d.id,
        };
        let mut page = Page::of(list, q.limit as usize, q.seek, at);
        if q.counted {
            let count = |seek| {
                let f = DeliveryFilter {
                    seek,
                    ..filter.clone()
                };
                async move { self.store().count_deliveries(&f).await }
            };
            page.place = Some(cursor::place_of(&page, at, count).await?);
        }
        Ok(page)
    }

    /// Deliveries by state, and the endpoints failing, for the admin page.
    pub async fn webhook_stats(&self, admin: &User) -> Result<WebhookStats> {
        if !admin.role.allows(Role::Admin) {
            return Err(Error::Forbidden);
        }
        Ok(self.store().webhook_stats().await?)
    }

    /// Replays one delivered or dead delivery (admins): the same webhook-id
    /// and body, a new timestamp and signature.
    pub async fn replay_delivery(&self, admin: &User, id: DeliveryId) -> Result<Delivery> {
        if !admin.role.allows(Role::Admin) {
            return Err(Error::Forbidden);
        }
        let d = self
            .store()
            .delivery(id)
            .await?
            .ok_or(Error::NotFound("delivery"))?;
        if d.state == DeliveryState::Pending {
            return Err(Error::Conflict {
                code: "DELIVERY_PENDING",
                message:
                    "this delivery is still being tried; replay it once it is delivered or dead"
                        .into(),
            });
        }
        self.store().replay_deliveries(&[id], Utc::now()).await?;
        self.webhook_bell().notify_one();
        self.store()
            .delivery(id)
            .await?
            .ok_or(Error::NotFound("delivery"))
    }

    /// The dead deliveries of an endpoint since a time: what a replay of
    /// them all would send (shown before it is confirmed).
    pub async fn dead_since(
        &self,
        admin: &User,
        endpoint: WebhookEndpointId,
        since: DateTime<Utc>,
    ) -> Result<Vec<Delivery>> {
        if !admin.role.allows(Role::Admin) {
            return Err(Error::Forbidden);
        }
        if self.store().webhook_endpoint(endpoint).await?.is_none() {
            return Err(Error::NotFound("webhook endpoint"));
        }
        Ok(self
            .store()
            .list_deliveries(&DeliveryFilter {
                user: None,
                state: Some(DeliveryState::Dead),
                endpoint: Some(endpoint),
                since: Some(since),
                seek: None,
                limit: REPLAY_MAX,
            })
            .await?)
    }

    /// Replays every dead delivery of an endpoint since a time, in one
    /// action; how many went.
    pub async fn replay_dead_since(
        &self,
        admin: &User,
        endpoint: WebhookEndpointId,
        since: DateTime<Utc>,
    ) -> Result<usize> {
        let dead = self.dead_since(admin, endpoint, since).await?;
        let ids: Vec<DeliveryId> = dead.iter().map(|d| d.id).collect();
        let replayed = self.store().replay_deliveries(&ids, Utc::now()).await?;
        self.webhook_bell().notify_one();
        Ok(replayed.len())
    }
}
