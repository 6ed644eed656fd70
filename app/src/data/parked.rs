//! What a job's page says about parked work (rule 12). Its owner reads one
//! status in plain words: why a person must look, what happens next, and
//! what was decided (issue 33, 3). The studio's staff also read the stage,
//! the evidence, the budget held and the provider's id.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ParkedRow {
    /// The one line that says how it stands.
    pub headline: String,
    /// Why, and what happens next, in words.
    pub explain: String,
    /// Still waiting for a decision (shown as a warning).
    pub waiting: bool,
    /// The edit a reviewer's new attempt made in this one's place.
    pub new_job: Option<String>,
    /// For reviewers and admins only.
    pub staff: Option<ParkedFacts>,
}

/// What the studio's staff read beside the owner's words.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ParkedFacts {
    pub stage: String,
    pub evidence: String,
    pub hold_usd: Option<String>,
    pub provider_job_id: Option<String>,
    pub since: String,
    pub record: String,
}

#[cfg(feature = "ssr")]
pub(super) use ssr::parked_row;

#[cfg(feature = "ssr")]
mod ssr {
    use super::*;
    use tollgate::model::{JobStatus, ParkedStage};
    use tollgate::store::{Decision, Parked};

    /// Why a job waits for a person, and what was decided, for its page;
    /// `None` when there is nothing left to say (cancelled before anyone
    /// decided, once the record closed).
    pub fn parked_row(
        p: Parked,
        decision: Option<Decision>,
        job_status: JobStatus,
        staff: bool,
    ) -> Option<ParkedRow> {
        let active = p.state.is_active();
        let (headline, explain, waiting) = match (&decision, active) {
            _ if active && job_status == JobStatus::Cancelled => (
                "Cancelled: your credits are back".to_string(),
                "The provider may already have done, and charged for, the work you cancelled. A reviewer still settles what it cost; nothing more happens to this edit, and you pay nothing more.".to_string(),
                false,
            ),
            (None, false) => return None,
            (Some(d), false) => ("Reviewed".into(), decided_in_words(d, p.state), false),
            (Some(d), true) => ("Checked by a person".into(), decided_in_words(d, p.state), false),
            (None, true) => (
                "Waiting for a person to check it".into(),
                format!(
                    "{} Nothing more is spent, and nothing is sent again, until then. If it cannot be finished, your credits come back. Waiting since {}.",
                    owner_reason(p.stage),
                    super::super::ssr::when(p.created_at)
                ),
                true,
            ),
        };
        Some(ParkedRow {
            headline,
            explain,
            waiting,
            new_job: decision
                .as_ref()
                .and_then(|d| d.new_job_id)
                .map(|j| j.to_string()),
            staff: staff.then(|| facts(&p)),
        })
    }

    fn facts(p: &Parked) -> ParkedFacts {
        ParkedFacts {
            stage: p.stage.label().to_string(),
            evidence: p.evidence.reason.clone(),
            hold_usd: p.hold_usd.map(|h| h.to_string()),
            provider_job_id: p.provider_job_id.clone(),
            since: p.created_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            record: format!("/review/{}", p.id),
        }
    }

    /// Why a person must look, as the job's owner reads it.
    fn owner_reason(stage: ParkedStage) -> &'static str {
        match stage {
            ParkedStage::SubmissionUncertain => "We sent your edit to the model but lost its answer, so we cannot tell whether it started. Rather than risk paying twice, a person checks with the provider first.",
            ParkedStage::PollingExhausted => "The model stopped telling us how your edit is going, so we cannot tell whether it finished. A person checks with the provider.",
            ParkedStage::DeliveryExhausted => "Your edit was made, but we could not fetch and keep the result yet. A person will get it for you.",
            ParkedStage::GenerationFailed => "The model could not make your edit. A person decides whether to try again.",
        }
    }

    /// A reviewer's decision as the job's owner reads it.
    fn decided_in_words(
        d: &tollgate::store::Decision,
        state: tollgate::model::ParkedState,
    ) -> String {
        use tollgate::model::{ParkedState, RecoveryState, ReviewAction};
        let when = super::super::ssr::when(d.decided_at);
        let recovering = matches!(state, ParkedState::Decided | ParkedState::Recovering);
        match d.action {
            ReviewAction::Reconcile => format!(
                "A reviewer found the provider's record of this request ({when}); the next step is being decided."
            ),
            ReviewAction::ResumePoll | ReviewAction::RetryDelivery => {
                let what = if d.action == ReviewAction::ResumePoll {
                    "checking with the provider again"
                } else {
                    "fetching the result again"
                };
                match d.recovery.as_ref().map(|r| r.state) {
                    _ if recovering => format!("A reviewer approved {what} ({when}); it is under way."),
                    Some(RecoveryState::Succeeded) => format!("A reviewer approved {what} ({when}), and it worked."),
                    _ => format!("A reviewer approved {what} ({when}), but it did not work out."),
                }
            }
            ReviewAction::AcceptFailure => format!(
                "A reviewer closed this edit as failed ({when}){}.",
                if d.refund == Some(true) {
                    "; your credits were refunded"
                } else {
                    "; the provider may have been paid, so the credits were kept"
                }
            ),
            ReviewAction::NewAttempt => format!(
                "A reviewer ordered a new attempt in this one's place ({when}); your credits moved to it."
            ),
        }
    }
}
