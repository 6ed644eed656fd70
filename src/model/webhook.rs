//! Webhooks (rule 13): the events a job announces and a delivery's states.
//! Each is stored as TEXT under a CHECK naming exactly these values.

use crate::model::JobStatus;
use serde::{Deserialize, Serialize};

/// What a delivery announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub enum WebhookEvent {
    #[serde(rename = "generation.succeeded")]
    Succeeded,
    #[serde(rename = "generation.failed")]
    Failed,
    #[serde(rename = "generation.cancelled")]
    Cancelled,
    #[serde(rename = "generation.parked")]
    Parked,
    /// Sent by "send test event"; no job.
    #[serde(rename = "webhook.test")]
    Test,
}

impl WebhookEvent {
    /// The events an endpoint may subscribe to.
    pub const JOB_EVENTS: [WebhookEvent; 4] = [
        WebhookEvent::Succeeded,
        WebhookEvent::Failed,
        WebhookEvent::Cancelled,
        WebhookEvent::Parked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WebhookEvent::Succeeded => "generation.succeeded",
            WebhookEvent::Failed => "generation.failed",
            WebhookEvent::Cancelled => "generation.cancelled",
            WebhookEvent::Parked => "generation.parked",
            WebhookEvent::Test => "webhook.test",
        }
    }

    pub fn parse(s: &str) -> Option<WebhookEvent> {
        Self::JOB_EVENTS
            .into_iter()
            .chain([WebhookEvent::Test])
            .find(|e| e.as_str() == s)
    }

    /// The event a job's new status announces, if it announces one.
    pub fn of(status: JobStatus) -> Option<WebhookEvent> {
        match status {
            JobStatus::Succeeded => Some(WebhookEvent::Succeeded),
            JobStatus::Failed => Some(WebhookEvent::Failed),
            JobStatus::Cancelled => Some(WebhookEvent::Cancelled),
            JobStatus::Parked => Some(WebhookEvent::Parked),
            JobStatus::Queued | JobStatus::Running => None,
        }
    }
}

/// Where a delivery is: `pending` until a 2xx (`delivered`) or until its
/// last try failed (`dead`, kept with its exact envelope for a replay).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Pending,
    Delivered,
    Dead,
}

impl DeliveryState {
    pub const ALL: [DeliveryState; 3] = [
        DeliveryState::Pending,
        DeliveryState::Delivered,
        DeliveryState::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryState> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_announcing_status_has_its_event() {
        assert_eq!(
            WebhookEvent::of(JobStatus::Succeeded),
            Some(WebhookEvent::Succeeded)
        );
        assert_eq!(WebhookEvent::of(JobStatus::Running), None);
        for e in WebhookEvent::JOB_EVENTS {
            assert_eq!(WebhookEvent::parse(e.as_str()), Some(e));
        }
        assert_eq!(
            serde_json::to_string(&WebhookEvent::Parked).unwrap(),
            "\"generation.parked\""
        );
        for s in DeliveryState::ALL {
            assert_eq!(DeliveryState::parse(s.as_str()), Some(s));
        }
    }
}
