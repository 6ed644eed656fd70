//! What happened to a job: one variant per kind of timeline entry.
//!
//! A timeline entry is stored as `job_events.kind` (text) and `detail` (a
//! JSON object), and several kinds are written by the database's own
//! triggers (a claim, an attempt begun, a settlement), so that stored shape
//! is the contract: the API returns it unchanged. This type reads it once, at
//! the store's edge, and everything above matches on variants instead of
//! strings. An entry this build does not know (written by a newer one, or a
//! shape an old one wrote) reads as [`Happening::Unknown`], kept verbatim.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    AttemptState, Comparison, ErrorClass, FailureCode, JobId, JobStatus, ParkedStage, Purpose,
    Readiness, Review, ReviewAction, Usd,
};

/// One entry of a job's timeline, as its kind and detail are stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Happening {
    /// The job was accepted and its credits charged (a trigger).
    Created {
        credits: i64,
        #[serde(default)]
        estimated_usd: Option<Usd>,
    },
    /// A worker claimed the job under a new fencing token (a trigger).
    Claimed {
        #[serde(default)]
        worker: Option<String>,
        token: i64,
    },
    /// The job went back to the queue (a trigger).
    Released { token: i64 },
    /// A run found its claim had moved on; nothing it did after counts.
    LeaseLost { token: i64 },
    /// An attempt was written before its call, with its hold (a trigger).
    Attempt {
        attempt: i32,
        purpose: Purpose,
        provider: String,
        model: String,
        #[serde(default)]
        day: Option<NaiveDate>,
        #[serde(default)]
        hold_usd: Option<Usd>,
    },
    /// The provider accepted an attempt and named its job (a trigger).
    Submitted {
        attempt: i32,
        #[serde(default)]
        provider_job_id: Option<String>,
    },
    /// An attempt's outcome and cost; `usd` is `None` when unpriced (a
    /// trigger).
    AttemptEnded {
        attempt: i32,
        state: AttemptState,
        #[serde(default)]
        error_class: Option<ErrorClass>,
        #[serde(default)]
        usd: Option<Usd>,
        priced: bool,
    },
    /// An attempt's hold became spend (a trigger).
    Settled {
        attempt: i32,
        usd: Usd,
        priced: bool,
    },
    /// A workflow step finished, with what it found.
    Step(StepDone),
    /// The job ended well (a trigger).
    Succeeded {},
    /// The job ended failed, with its error's code (a trigger).
    Failed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<FailureCode>,
    },
    /// The job was cancelled (a trigger; a cancel writes no error, so its
    /// code is none).
    Cancelled {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<FailureCode>,
    },
    /// The job's credits came back.
    Refunded {},
    /// A repair's charge was given back as it was ordered: the version it
    /// mends was one our review flagged (issue 33, 2).
    Waived { credits: i64 },
    /// The job waits for a person (rule 12).
    Parked {
        stage: ParkedStage,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_job_id: Option<String>,
    },
    /// A reviewer's recovery parked again, for the next round.
    RecoveryFailed {
        stage: ParkedStage,
        #[serde(default)]
        reason: Option<String>,
    },
    /// A worker claimed the recovery a reviewer decided (a trigger).
    RecoveryClaimed {
        action: ReviewAction,
        #[serde(default)]
        worker: Option<String>,
        token: i64,
    },
    /// The parked record closed as the job ended (a trigger).
    ReviewClosed { outcome: JobStatus },
    /// The owner cancelled while the job was parked; the record stays open
    /// for a reviewer (a trigger).
    CancelledWhileParked { stage: ParkedStage },
    /// A reviewer's decision, as recorded.
    Decision(DecisionNote),
    /// A reviewer's note: evidence, not a decision.
    Note { text: String, by: String },
    /// A reviewer ordered a new job in this one's place.
    NewAttempt {
        job: JobId,
        #[serde(default)]
        duplicate_cost_usd: Option<Usd>,
    },
    /// This job was ordered in place of another.
    Replaces {
        job: JobId,
        #[serde(default)]
        duplicate_cost_usd: Option<Usd>,
    },
    /// An entry this build cannot read, kept as stored.
    #[serde(skip)]
    Unknown { kind: String, detail: Value },
}

/// A finished workflow step and what it found (`detail.step` names it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum StepDone {
    Readiness(Readiness),
    Generate(GeneratedNote),
    Review(Review),
    Compare(Comparison),
}

/// The generate step's entry: where the output was stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeneratedNote {
    pub key: String,
    pub bytes: u64,
    #[serde(default)]
    pub attempt: Option<i32>,
}

/// A reviewer's decision on the timeline. The job's owner reads only its
/// action: who decided, on what evidence and in which round are the
/// studio's (`None` in the owner's view).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionNote {
    pub action: ReviewAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_hold: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_job_id: Option<String>,
}

impl DecisionNote {
    /// What the job's owner may read of it: the action alone.
    pub fn for_owner(&self) -> DecisionNote {
        DecisionNote {
            action: self.action,
            reviewer: None,
            evidence: None,
            round: None,
            refund: None,
            release_hold: None,
            provider_job_id: None,
        }
    }
}

impl Happening {
    /// Reads a stored entry; one this build does not know is kept verbatim.
    pub fn from_stored(kind: String, detail: Value) -> Happening {
        let tagged = serde_json::json!({"kind": kind, "detail": detail});
        serde_json::from_value(tagged).unwrap_or(Happening::Unknown { kind, detail })
    }

    /// The stored kind and detail, exactly as [`Happening::from_stored`]
    /// reads them back.
    pub fn to_stored(&self) -> (String, Value) {
        if let Happening::Unknown { kind, detail } = self {
            return (kind.clone(), detail.clone());
        }
        match serde_json::to_value(self) {
            Ok(Value::Object(mut o)) => {
                let kind = match o.remove("kind") {
                    Some(Value::String(k)) => k,
                    _ => unreachable!("an adjacently tagged enum writes its tag as a string"),
                };
                (kind, o.remove("detail").unwrap_or(Value::Null))
            }
            _ => unreachable!("every known happening serializes to an object"),
        }
    }

    /// The stored kind alone.
    pub fn kind(&self) -> String {
        self.to_stored().0
    }

    /// Whether this entry ends the job's story: the terminal write stores
    /// it with the last step's entry, and a person reads it last.
    pub fn is_ending(&self) -> bool {
        matches!(
            self,
            Happening::Succeeded {}
                | Happening::Failed { .. }
                | Happening::Cancelled { .. }
                | Happening::Refunded {}
                | Happening::CancelledWhileParked { .. }
        )
    }
}

/// A timeline in the order things happened. The database writes a few
/// entries of one commit in another order than they happened: the
/// readiness finding goes in with the paid attempt it allowed, after that
/// attempt's own entry, and a settlement's trigger fires before its
/// attempt's end. Both are put back: the finding before the first paid
/// attempt, each settlement after its attempt's end. Everything else keeps
/// its stored order.
pub fn in_order_of_happening<T>(events: Vec<T>, happening: impl Fn(&T) -> &Happening) -> Vec<T> {
    let is_paid_attempt = |h: &Happening| {
        matches!(
            h,
            Happening::Attempt {
                purpose: Purpose::Generate,
                ..
            }
        )
    };
    let is_readiness = |h: &Happening| matches!(h, Happening::Step(StepDone::Readiness(_)));
    let ended = |h: &Happening, n: i32| matches!(h, Happening::AttemptEnded { attempt, .. } if *attempt == n);
    let mut out: Vec<T> = Vec::with_capacity(events.len());
    let mut first_paid: Option<usize> = None;
    let mut rest = events
        .into_iter()
        .collect::<std::collections::VecDeque<_>>();
    // Settlements waiting for their attempt's end, by attempt number.
    let mut waiting: Vec<(i32, T)> = Vec::new();
    while let Some(e) = rest.pop_front() {
        let h = happening(&e);
        if let (true, Some(at)) = (is_readiness(h), first_paid) {
            out.insert(at, e);
            first_paid = Some(at + 1);
            continue;
        }
        if let Happening::Settled { attempt, .. } = h {
            let n = *attempt;
            if rest.iter().any(|later| ended(happening(later), n)) {
                waiting.push((n, e));
                continue;
            }
        }
        if first_paid.is_none() && is_paid_attempt(h) {
            first_paid = Some(out.len());
        }
        let ended_n = match h {
            Happening::AttemptEnded { attempt, .. } => Some(*attempt),
            _ => None,
        };
        out.push(e);
        if let Some(n) = ended_n {
            while let Some(i) = waiting.iter().position(|(w, _)| *w == n) {
                out.push(waiting.remove(i).1);
            }
        }
    }
    out.extend(waiting.into_iter().map(|(_, e)| e));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeline_reads_in_the_order_things_happened() {
        let attempt = |purpose| Happening::Attempt {
            attempt: 1,
            purpose,
            provider: "p".into(),
            model: "m".into(),
            day: None,
            hold_usd: None,
        };
        let readiness = Happening::Step(StepDone::Readiness(Readiness {
            region_fraction: 0.2,
            observation: None,
        }));
        let settled = Happening::Settled {
            attempt: 1,
            usd: Usd::ZERO,
            priced: true,
        };
        let ended = Happening::AttemptEnded {
            attempt: 1,
            state: AttemptState::Succeeded,
            error_class: None,
            usd: None,
            priced: true,
        };
        let created = Happening::Created {
            credits: 3,
            estimated_usd: None,
        };
        let claimed = Happening::Claimed {
            worker: None,
            token: 1,
        };
        let stored = vec![
            created.clone(),
            claimed.clone(),
            attempt(Purpose::Generate),
            readiness.clone(),
            settled.clone(),
            ended.clone(),
            Happening::Succeeded {},
        ];
        let read = in_order_of_happening(stored, |h| h);
        assert_eq!(
            read,
            vec![
                created,
                claimed,
                readiness.clone(),
                attempt(Purpose::Generate),
                ended,
                settled,
                Happening::Succeeded {}
            ]
        );
        // A checker's attempt comes before its finding, and stays there.
        let checked = vec![attempt(Purpose::Readiness), readiness.clone()];
        assert_eq!(in_order_of_happening(checked.clone(), |h| h), checked);
    }
    use serde_json::json;

    fn round_trip(kind: &str, detail: Value) -> Happening {
        let h = Happening::from_stored(kind.into(), detail.clone());
        assert!(
            !matches!(h, Happening::Unknown { .. }),
            "{kind} {detail} did not read"
        );
        assert_eq!(h.to_stored(), (kind.to_string(), detail), "{kind}");
        h
    }

    /// Each shape the triggers and the store write today reads back as a
    /// known entry and writes back unchanged, so the API's JSON is stable.
    #[test]
    fn stored_shapes_read_and_write_back_unchanged() {
        round_trip(
            "created",
            json!({"credits": 4, "estimated_usd": "0.040000"}),
        );
        round_trip("claimed", json!({"worker": "node-a", "token": 3}));
        round_trip("released", json!({"token": 3}));
        round_trip("lease_lost", json!({"token": 3}));
        round_trip(
            "attempt",
            json!({"attempt": 1, "purpose": "generate", "provider": "mock", "model": "m",
                   "day": "2026-12-04", "hold_usd": null}),
        );
        round_trip("submitted", json!({"attempt": 1, "provider_job_id": "p-1"}));
        round_trip(
            "attempt_ended",
            json!({"attempt": 1, "state": "failed", "error_class": "timeout", "usd": null, "priced": false}),
        );
        round_trip(
            "settled",
            json!({"attempt": 1, "usd": "0.040000", "priced": true}),
        );
        let ready = round_trip(
            "step",
            json!({"step": "readiness", "region_fraction": 0.25, "observation": "a cat"}),
        );
        assert!(matches!(ready, Happening::Step(StepDone::Readiness(_))));
        round_trip(
            "step",
            json!({"step": "generate", "key": "outputs/x", "bytes": 10, "attempt": 1}),
        );
        round_trip(
            "step",
            json!({"step": "review", "verdict": "issues", "notes": "n"}),
        );
        round_trip(
            "step",
            json!({"step": "compare", "outcome": null,
                   "against": "6f1c2f7e-64a5-4b8f-9d7a-0f3a0b7c1d2e", "notes": "n"}),
        );
        round_trip("succeeded", json!({}));
        round_trip("failed", json!({"code": "NOT_READY"}));
        round_trip("cancelled", json!({}));
        round_trip("refunded", json!({}));
        round_trip(
            "parked",
            json!({"stage": "polling_exhausted", "reason": "r", "provider_job_id": "p-1"}),
        );
        round_trip(
            "recovery_failed",
            json!({"stage": "submission_uncertain", "reason": null}),
        );
        round_trip(
            "recovery_claimed",
            json!({"action": "resume_poll", "worker": "w", "token": 4}),
        );
        round_trip("review_closed", json!({"outcome": "cancelled"}));
        round_trip(
            "cancelled_while_parked",
            json!({"stage": "delivery_exhausted"}),
        );
        round_trip(
            "decision",
            json!({"action": "accept_failure", "reviewer": "r@x.example", "evidence": "e",
                   "round": 0, "refund": true, "release_hold": false}),
        );
        let decided = round_trip(
            "decision",
            json!({"action": "new_attempt", "reviewer": "r@x.example", "evidence": "e", "round": 1}),
        );
        // The owner's view of a decision is its action alone, and stays a
        // decision.
        let Happening::Decision(d) = decided else {
            panic!("not a decision")
        };
        let owners = Happening::Decision(d.for_owner());
        assert_eq!(owners.to_stored().1, json!({"action": "new_attempt"}));
        round_trip("decision", json!({"action": "new_attempt"}));
        round_trip("note", json!({"text": "t", "by": "r@x.example"}));
        round_trip(
            "new_attempt",
            json!({"job": "6f1c2f7e-64a5-4b8f-9d7a-0f3a0b7c1d2e", "duplicate_cost_usd": "0.040000"}),
        );
        round_trip(
            "replaces",
            json!({"job": "6f1c2f7e-64a5-4b8f-9d7a-0f3a0b7c1d2e", "duplicate_cost_usd": null}),
        );
    }

    #[test]
    fn an_unknown_entry_is_kept_verbatim() {
        let detail = json!({"anything": [1, 2]});
        let h = Happening::from_stored("from_the_future".into(), detail.clone());
        assert_eq!(h.to_stored(), ("from_the_future".into(), detail));
        // A known kind whose detail does not fit is kept too, not guessed.
        let odd = json!({"token": "not a number"});
        let h = Happening::from_stored("claimed".into(), odd.clone());
        assert!(matches!(h, Happening::Unknown { .. }));
        assert_eq!(h.to_stored(), ("claimed".into(), odd));
    }
}
