//! Parked work (rule 12): the stages a job waits in for a person, what a
//! parked record's state may become, the actions each stage permits, and a
//! recovery's states. Each is stored as TEXT under a CHECK naming exactly
//! these values; the stage table of DESIGN.md lives in `ParkedStage::allows`.

use serde::{Deserialize, Serialize};

/// The longest provider job id Tollgate keeps or sends.
pub const PROVIDER_JOB_ID_LEN_MAX: usize = 200;

/// A provider's job id that may go into a request path: 1 to 200 letters,
/// digits, `-`, `_` and `.`, with at least one letter or digit (so never
/// `.` or `..`, which would turn a status check into another URL).
pub fn is_plain_provider_job_id(id: &str) -> bool {
    (1..=PROVIDER_JOB_ID_LEN_MAX).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && id.bytes().any(|b| b.is_ascii_alphanumeric())
}

/// Why a job waits for a person: what is known about the money.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ParkedStage {
    /// A request may have been accepted; no answer.
    SubmissionUncertain,
    /// A provider job id exists; status checks ran out.
    PollingExhausted,
    /// The output exists at the provider; storing it failed.
    DeliveryExhausted,
    /// The provider said it failed (and the model's policy is to park).
    GenerationFailed,
}

impl ParkedStage {
    pub const ALL: [ParkedStage; 4] = [
        ParkedStage::SubmissionUncertain,
        ParkedStage::PollingExhausted,
        ParkedStage::DeliveryExhausted,
        ParkedStage::GenerationFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ParkedStage::SubmissionUncertain => "submission_uncertain",
            ParkedStage::PollingExhausted => "polling_exhausted",
            ParkedStage::DeliveryExhausted => "delivery_exhausted",
            ParkedStage::GenerationFailed => "generation_failed",
        }
    }

    pub fn parse(s: &str) -> Option<ParkedStage> {
        ParkedStage::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// The stage in a person's words.
    pub fn label(self) -> &'static str {
        match self {
            ParkedStage::SubmissionUncertain => "Submission uncertain",
            ParkedStage::PollingExhausted => "Status checks ran out",
            ParkedStage::DeliveryExhausted => "Delivery failed",
            ParkedStage::GenerationFailed => "Generation failed",
        }
    }

    /// What is known, as the reviewer reads it.
    pub fn known(self) -> &'static str {
        match self {
            ParkedStage::SubmissionUncertain => {
                "A request may have been accepted (and paid); no answer came."
            }
            ParkedStage::PollingExhausted => {
                "The provider accepted the request under a job id; status checks ran out."
            }
            ParkedStage::DeliveryExhausted => {
                "The output exists at the provider; storing or fetching it failed."
            }
            ParkedStage::GenerationFailed => "The provider said the generation failed.",
        }
    }

    /// The actions a reviewer may approve in this stage (DESIGN.md, rule 12).
    pub fn allows(self) -> &'static [ReviewAction] {
        use ReviewAction::*;
        match self {
            ParkedStage::SubmissionUncertain => &[Reconcile, AcceptFailure],
            ParkedStage::PollingExhausted => &[ResumePoll, AcceptFailure],
            ParkedStage::DeliveryExhausted => &[RetryDelivery, AcceptFailure],
            ParkedStage::GenerationFailed => &[AcceptFailure, NewAttempt],
        }
    }

    /// The actions a reviewer may approve now, given the job's status. A job
    /// its owner cancelled while parked has nothing left to run: its record
    /// stays only to settle the money, so a reconcile (to record what the
    /// provider made) and `accept_failure` (its accounting) remain.
    pub fn allows_for(self, job: crate::model::JobStatus) -> &'static [ReviewAction] {
        use ReviewAction::*;
        match (job, self) {
            (crate::model::JobStatus::Cancelled, ParkedStage::SubmissionUncertain) => {
                &[Reconcile, AcceptFailure]
            }
            (crate::model::JobStatus::Cancelled, _) => &[AcceptFailure],
            _ => self.allows(),
        }
    }
}

/// Where a parked record is. `open` waits for a decision; `decided` has one
/// whose recovery no worker has claimed yet; `recovering` is claimed;
/// `closed` is done (its job ended). A failed recovery returns the record
/// to `open` for a new decision; so does a reconcile, in its new stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ParkedState {
    Open,
    Decided,
    Recovering,
    Closed,
}

impl ParkedState {
    pub const ALL: [ParkedState; 4] = [
        ParkedState::Open,
        ParkedState::Decided,
        ParkedState::Recovering,
        ParkedState::Closed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ParkedState::Open => "open",
            ParkedState::Decided => "decided",
            ParkedState::Recovering => "recovering",
            ParkedState::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<ParkedState> {
        ParkedState::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Still the job's one record: not closed.
    pub fn is_active(self) -> bool {
        self != ParkedState::Closed
    }

    /// The allowed transitions, in one place.
    pub fn can_become(self, next: ParkedState) -> bool {
        use ParkedState::*;
        matches!(
            (self, next),
            (Open, Open | Decided | Closed)
                | (Decided, Recovering | Closed)
                | (Recovering, Recovering | Open | Closed)
        )
    }
}

/// What a reviewer may decide. Only `resume_poll` and `retry_delivery` are
/// recoveries (a worker claims and runs them); `new_attempt` is a new,
/// separately charged submission, never a retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReviewAction {
    /// Attach the provider job id an investigation found; the record moves
    /// to `polling_exhausted` and waits for its own decision.
    Reconcile,
    ResumePoll,
    RetryDelivery,
    /// End the job failed, refunded or not, its hold released or kept.
    AcceptFailure,
    NewAttempt,
}

impl ReviewAction {
    pub const ALL: [ReviewAction; 5] = [
        ReviewAction::Reconcile,
        ReviewAction::ResumePoll,
        ReviewAction::RetryDelivery,
        ReviewAction::AcceptFailure,
        ReviewAction::NewAttempt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReviewAction::Reconcile => "reconcile",
            ReviewAction::ResumePoll => "resume_poll",
            ReviewAction::RetryDelivery => "retry_delivery",
            ReviewAction::AcceptFailure => "accept_failure",
            ReviewAction::NewAttempt => "new_attempt",
        }
    }

    pub fn parse(s: &str) -> Option<ReviewAction> {
        ReviewAction::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// The action in a person's words.
    pub fn label(self) -> &'static str {
        match self {
            ReviewAction::Reconcile => "Reconcile with a provider job id",
            ReviewAction::ResumePoll => "Resume status checks",
            ReviewAction::RetryDelivery => "Retry delivery",
            ReviewAction::AcceptFailure => "Accept the failure",
            ReviewAction::NewAttempt => "Order a new attempt",
        }
    }

    /// Whether a worker must claim and run it after the decision.
    pub fn is_recovery(self) -> bool {
        matches!(self, ReviewAction::ResumePoll | ReviewAction::RetryDelivery)
    }
}

/// A recovery task's states: `pending` until a worker claims the job,
/// `claimed` while its run holds the lease, then `succeeded` when the job
/// ended as it should or `failed` when it parked again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RecoveryState {
    Pending,
    Claimed,
    Succeeded,
    Failed,
}

impl RecoveryState {
    pub const ALL: [RecoveryState; 4] = [
        RecoveryState::Pending,
        RecoveryState::Claimed,
        RecoveryState::Succeeded,
        RecoveryState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryState::Pending => "pending",
            RecoveryState::Claimed => "claimed",
            RecoveryState::Succeeded => "succeeded",
            RecoveryState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<RecoveryState> {
        RecoveryState::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_permits_what_the_design_says() {
        use ReviewAction::*;
        let allowed = |s: ParkedStage| s.allows().to_vec();
        assert_eq!(
            allowed(ParkedStage::SubmissionUncertain),
            [Reconcile, AcceptFailure]
        );
        assert_eq!(
            allowed(ParkedStage::PollingExhausted),
            [ResumePoll, AcceptFailure]
        );
        assert_eq!(
            allowed(ParkedStage::DeliveryExhausted),
            [RetryDelivery, AcceptFailure]
        );
        assert_eq!(
            allowed(ParkedStage::GenerationFailed),
            [AcceptFailure, NewAttempt]
        );
        // Uncertainty needs reconciliation first: no polling without an id.
        assert!(!ParkedStage::SubmissionUncertain
            .allows()
            .contains(&ResumePoll));
        // A new generation is not a recovery action.
        assert!(!NewAttempt.is_recovery());
        assert!(ResumePoll.is_recovery() && RetryDelivery.is_recovery());
    }

    #[test]
    fn names_round_trip() {
        for s in ParkedStage::ALL {
            assert_eq!(ParkedStage::parse(s.as_str()), Some(s));
        }
        for s in ParkedState::ALL {
            assert_eq!(ParkedState::parse(s.as_str()), Some(s));
        }
        for a in ReviewAction::ALL {
            assert_eq!(ReviewAction::parse(a.as_str()), Some(a));
        }
        for r in RecoveryState::ALL {
            assert_eq!(RecoveryState::parse(r.as_str()), Some(r));
        }
    }

    #[test]
    fn a_closed_record_stays_closed() {
        for next in ParkedState::ALL {
            assert!(!ParkedState::Closed.can_become(next));
        }
        assert!(!ParkedState::Open.can_become(ParkedState::Recovering));
        assert!(ParkedState::Recovering.can_become(ParkedState::Open));
    }
}
