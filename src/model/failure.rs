//! Why a job failed: the `error` of its stored row and of its API object
//! (`{"code", "message", "questions"?, "details"?}`, API.md), typed once
//! here so that the engine writes it, the store reads it strictly, and the
//! pages say it without matching codes by name.

use super::attempt::ErrorClass;
use super::scrub;
use serde::{Deserialize, Serialize};

/// The stable codes a job fails with. Stored and answered as
/// `UPPER_SNAKE_CASE`; a client may match on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureCode {
    /// The uploaded photo could not be read back.
    SourceMissing,
    /// The look before paying found the target missing or ambiguous.
    NotReady,
    /// The day's spending was halted or at its cap before anything was sent.
    SpendingPaused,
    /// The configured checker could not look, so nothing was sent.
    CheckUnavailable,
    /// The job's model is no longer in the catalogue.
    ModelUnavailable,
    /// Another job's output sits at this job's key (never overwritten).
    OutputKeyConflict,
    /// The provider's output was not an image we serve, or plainly broken.
    InvalidOutput,
    /// The provider may have been paid and the model's policy refunds.
    SubmissionUncertain,
    ProviderAuth,
    ProviderRejectedInput,
    ProviderCancelled,
    ContentRefused,
    ProviderUnavailable,
    GenerationFailed,
    /// A reviewer's `new_attempt` moved the job's credits to a new job.
    ReplacedByNewAttempt,
    /// A reviewer's `accept_failure`.
    FailedAfterReview,
}

impl FailureCode {
    pub const ALL: [FailureCode; 16] = [
        FailureCode::SourceMissing,
        FailureCode::NotReady,
        FailureCode::SpendingPaused,
        FailureCode::CheckUnavailable,
        FailureCode::ModelUnavailable,
        FailureCode::OutputKeyConflict,
        FailureCode::InvalidOutput,
        FailureCode::SubmissionUncertain,
        FailureCode::ProviderAuth,
        FailureCode::ProviderRejectedInput,
        FailureCode::ProviderCancelled,
        FailureCode::ContentRefused,
        FailureCode::ProviderUnavailable,
        FailureCode::GenerationFailed,
        FailureCode::ReplacedByNewAttempt,
        FailureCode::FailedAfterReview,
    ];

    /// As stored and answered.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::SourceMissing => "SOURCE_MISSING",
            FailureCode::NotReady => "NOT_READY",
            FailureCode::SpendingPaused => "SPENDING_PAUSED",
            FailureCode::CheckUnavailable => "CHECK_UNAVAILABLE",
            FailureCode::ModelUnavailable => "MODEL_UNAVAILABLE",
            FailureCode::OutputKeyConflict => "OUTPUT_KEY_CONFLICT",
            FailureCode::InvalidOutput => "INVALID_OUTPUT",
            FailureCode::SubmissionUncertain => "SUBMISSION_UNCERTAIN",
            FailureCode::ProviderAuth => "PROVIDER_AUTH",
            FailureCode::ProviderRejectedInput => "PROVIDER_REJECTED_INPUT",
            FailureCode::ProviderCancelled => "PROVIDER_CANCELLED",
            FailureCode::ContentRefused => "CONTENT_REFUSED",
            FailureCode::ProviderUnavailable => "PROVIDER_UNAVAILABLE",
            FailureCode::GenerationFailed => "GENERATION_FAILED",
            FailureCode::ReplacedByNewAttempt => "REPLACED_BY_NEW_ATTEMPT",
            FailureCode::FailedAfterReview => "FAILED_AFTER_REVIEW",
        }
    }

    pub fn parse(s: &str) -> Option<FailureCode> {
        FailureCode::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// What the owner's timeline says when a job ends with this code.
    pub fn words(self) -> &'static str {
        match self {
            FailureCode::NotReady => {
                "Stopped before anything was paid for: the photo needs an answer from you first."
            }
            FailureCode::ReplacedByNewAttempt => {
                "Closed: a new attempt took its place, so this one stops here."
            }
            FailureCode::InvalidOutput => {
                "Stopped: the model's result was not usable, so it was not delivered; your credits are back."
            }
            FailureCode::SpendingPaused => "Stopped: spending is paused today, so nothing was sent.",
            FailureCode::SourceMissing => "Stopped: the uploaded photo could not be read.",
            FailureCode::CheckUnavailable => {
                "Stopped: the photo could not be checked before paying, so nothing was sent."
            }
            FailureCode::ModelUnavailable => {
                "Stopped: its model is no longer offered; your credits are back."
            }
            FailureCode::OutputKeyConflict => {
                "Stopped: its result could not be stored safely; your credits are back."
            }
            FailureCode::SubmissionUncertain => {
                "Stopped: the model may not have received it; your credits are back."
            }
            FailureCode::ProviderAuth => "Stopped: the model's provider refused our credentials.",
            FailureCode::ProviderRejectedInput => "Stopped: the model could not use this request.",
            FailureCode::ProviderCancelled => "Stopped: the model's provider cancelled it.",
            FailureCode::ContentRefused => "Stopped: the model refused it under its content policy.",
            FailureCode::ProviderUnavailable => "Stopped: the model's provider was unavailable.",
            FailureCode::GenerationFailed => "Stopped: it did not work (generation failed).",
            FailureCode::FailedAfterReview => "Stopped: a reviewer closed it as failed.",
        }
    }
}

impl std::fmt::Display for FailureCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job's failure: a code, words for a person, up to three questions when
/// the photo was not ready, and what the provider said when it said it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = JobError))]
pub struct JobFailure {
    pub code: FailureCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<ProviderSaid>,
}

/// The provider's own account of a failure that ended the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ProviderSaid {
    pub error_class: ErrorClass,
    pub provider_message: String,
}

/// The questions a not-ready answer may ask: at most this many are kept.
pub const QUESTIONS_MAX: usize = 3;

impl JobFailure {
    pub fn new(code: FailureCode, message: impl Into<String>) -> JobFailure {
        JobFailure {
            code,
            message: message.into(),
            questions: None,
            details: None,
        }
    }

    /// A look before paying that found the photo not ready, with its
    /// questions (the first three).
    pub fn not_ready(message: impl Into<String>, questions: Vec<String>) -> JobFailure {
        JobFailure {
            questions: Some(questions.into_iter().take(QUESTIONS_MAX).collect()),
            ..JobFailure::new(FailureCode::NotReady, message)
        }
    }

    pub fn with_details(mut self, said: ProviderSaid) -> JobFailure {
        self.details = Some(said);
        self
    }

    /// As it may be stored: every text a provider or a checker wrote passed
    /// through `scrub::text` (no credentials or signed URLs at rest).
    pub fn scrubbed(&self) -> JobFailure {
        JobFailure {
            code: self.code,
            message: scrub::text(&self.message),
            questions: (self.questions.as_ref())
                .map(|q| q.iter().map(|x| scrub::text(x)).collect()),
            details: self.details.as_ref().map(|d| ProviderSaid {
                error_class: d.error_class,
                provider_message: scrub::text(&d.provider_message),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_as_stored() {
        for c in FailureCode::ALL {
            assert_eq!(FailureCode::parse(c.as_str()), Some(c));
            let json = serde_json::to_value(c).unwrap();
            assert_eq!(json, serde_json::json!(c.as_str()));
        }
        assert_eq!(FailureCode::parse("not_ready"), None);
    }

    #[test]
    fn a_failure_stores_as_the_api_answers_it() {
        let f = JobFailure::not_ready("Which one?", vec!["a".into(); 5]);
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["code"], "NOT_READY");
        assert_eq!(v["questions"].as_array().unwrap().len(), 3);
        assert!(v.get("details").is_none());
        let stored = serde_json::json!({"code": "GENERATION_FAILED", "message": "m",
            "details": {"error_class": "failed", "provider_message": "boom"}});
        let back: JobFailure = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(
            back.details.as_ref().unwrap().error_class,
            ErrorClass::Failed
        );
        assert_eq!(serde_json::to_value(&back).unwrap(), stored);
    }
}
