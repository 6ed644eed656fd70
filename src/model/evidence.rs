//! What a parked record's evidence says. Its labelled parts are typed: why
//! it waits (always, in words) and, when an attempt was sent, what was sent,
//! where, when and under which key, and how long it had waited. What each
//! stage adds besides (a provider's last error, the configuration now, what
//! a reconcile's check saw) is free evidence for a reviewer, kept as it was
//! written and shown raw. Stored as one JSON object, as the API answers it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ParkedEvidence {
    /// Why the record waits for a person.
    #[serde(default)]
    pub reason: String,
    /// The attempt whose outcome is unknown, as it was sent (boxed: most
    /// records are moved about without reading it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<Box<SentAttempt>>,
    /// Seconds from sending to parking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_s: Option<u64>,
    /// Everything else the stage recorded, by name.
    #[serde(flatten)]
    pub more: Map<String, Value>,
}

/// An attempt as it was sent: enough to look it up at the provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SentAttempt {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_no: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub provider: String,
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<DateTime<Utc>>,
    pub idempotency_key: String,
    #[serde(default)]
    pub provider_job_id: Option<String>,
}

/// What a missing part reads as through `evidence["name"]`.
static NOTHING: Value = Value::Null;

impl ParkedEvidence {
    /// Evidence that says why, and nothing else yet.
    pub fn because(reason: impl Into<String>) -> ParkedEvidence {
        ParkedEvidence {
            reason: reason.into(),
            ..ParkedEvidence::default()
        }
    }

    /// The same, with one more part of free evidence.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> ParkedEvidence {
        self.more.insert(name.to_string(), value.into());
        self
    }

    /// The key the unknown attempt was sent under, wherever the stage put it.
    pub fn idempotency_key(&self) -> Option<&str> {
        (self.attempt.as_ref().map(|a| a.idempotency_key.as_str()))
            .or_else(|| self.more.get("idempotency_key").and_then(Value::as_str))
    }

    /// As stored and answered: one JSON object.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Free evidence by name (null when absent), as a reviewer's tools read it.
impl std::ops::Index<&str> for ParkedEvidence {
    type Output = Value;
    fn index(&self, name: &str) -> &Value {
        // The labelled parts are fields: reading one by name is a mistake
        // that would otherwise read as null.
        debug_assert!(
            !matches!(name, "reason" | "attempt" | "waited_s"),
            "evidence[{name:?}] is a typed field; read evidence.{name}"
        );
        self.more.get(name).unwrap_or(&NOTHING)
    }
}

impl std::fmt::Display for ParkedEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evidence_reads_back_as_it_was_written() {
        let stored = json!({"reason": "no answer", "attempt": {"provider": "http",
            "endpoint": null, "idempotency_key": "j:1", "attempt_no": 1,
            "provider_job_id": null},
            "waited_s": 40, "last_error": "timeout", "nested": [1, 2]});
        let e: ParkedEvidence = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(e.reason, "no answer");
        assert_eq!(e.idempotency_key(), Some("j:1"));
        assert_eq!(e["last_error"], "timeout");
        assert_eq!(e["absent"], Value::Null);
        assert_eq!(e.to_json(), stored);
    }

    #[test]
    fn a_key_kept_outside_an_attempt_is_found_too() {
        let e = ParkedEvidence::because("cancelled").with("idempotency_key", "j:2");
        assert_eq!(e.idempotency_key(), Some("j:2"));
        let old: ParkedEvidence = serde_json::from_value(json!({"x": 1})).unwrap();
        assert_eq!(old.reason, "", "a record without a reason still reads");
    }
}
