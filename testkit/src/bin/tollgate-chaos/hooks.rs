//! The webhook receiver: one endpoint per person, answering 2xx most of
//! the time and 503 or late now and then, so deliveries are retried. It
//! keeps every request it took (the webhook-id and the body) for the
//! verdict: every event delivered at least once, under one stable id.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One request the receiver answered 2xx.
#[derive(Clone, Debug)]
pub struct Receipt {
    pub person: usize,
    pub webhook_id: String,
    pub body: String,
}

#[derive(Default)]
struct Inbox {
    receipts: Vec<Receipt>,
    refused: u64,
    calls: u64,
}

#[derive(Clone)]
pub struct Receiver {
    inbox: Arc<Mutex<Inbox>>,
    pub base: String,
}

impl Receiver {
    pub async fn start() -> Result<Receiver, String> {
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let app = axum::Router::new()
            .route("/hook/{person}", axum::routing::post(take))
            .with_state(inbox.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("binding the webhook receiver: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver {
            inbox,
            base: format!("http://{addr}"),
        })
    }

    pub fn url(&self, person: usize) -> String {
        format!("{}/hook/{person}", self.base)
    }

    pub fn receipts(&self) -> Vec<Receipt> {
        self.inbox.lock().expect("the inbox").receipts.clone()
    }

    /// (requests, refused on purpose)
    pub fn counts(&self) -> (u64, u64) {
        let inbox = self.inbox.lock().expect("the inbox");
        (inbox.calls, inbox.refused)
    }
}

async fn take(
    State(inbox): State<Arc<Mutex<Inbox>>>,
    Path(person): Path<usize>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let webhook_id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    // Every ninth request fails, as a flaky receiver would (the sender
    // must try again under the same id).
    let refuse = {
        let mut inbox = inbox.lock().expect("the inbox");
        inbox.calls += 1;
        let refuse = inbox.calls.is_multiple_of(9);
        if refuse {
            inbox.refused += 1;
        } else {
            inbox.receipts.push(Receipt {
                person,
                webhook_id,
                body,
            });
        }
        refuse
    };
    if refuse {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::NO_CONTENT
    }
}

/// Receipts grouped by webhook-id.
pub fn by_id(receipts: &[Receipt]) -> HashMap<&str, Vec<&Receipt>> {
    let mut out: HashMap<&str, Vec<&Receipt>> = HashMap::new();
    for r in receipts {
        out.entry(r.webhook_id.as_str()).or_default().push(r);
    }
    out
}
