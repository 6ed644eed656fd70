//! A provider attempt's states and where its cost came from (rules 7 and
//! 10). Each is stored as TEXT under a CHECK naming exactly these values.

use serde::{Deserialize, Serialize};

/// Where an attempt is. The transitions run one way:
/// `submitting` → `submitted` → `succeeded` | `failed`, and `submitting`
/// may end directly (the call was refused, or nothing was sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    /// Written down; the request may be on its way (the uncertainty window).
    Submitting,
    /// The provider accepted it under its prediction id: poll, never re-send.
    Submitted,
    Succeeded,
    Failed,
}

impl AttemptState {
    pub const ALL: [AttemptState; 4] = [
        AttemptState::Submitting,
        AttemptState::Submitted,
        AttemptState::Succeeded,
        AttemptState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Submitting => "submitting",
            AttemptState::Submitted => "submitted",
            AttemptState::Succeeded => "succeeded",
            AttemptState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<AttemptState> {
        AttemptState::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// Still open: a run that stopped left it without an outcome.
    pub fn is_open(self) -> bool {
        matches!(self, AttemptState::Submitting | AttemptState::Submitted)
    }

    /// The allowed transitions, in one place.
    pub fn can_become(self, next: AttemptState) -> bool {
        use AttemptState::*;
        matches!(
            (self, next),
            (Submitting, Submitted | Succeeded | Failed) | (Submitted, Succeeded | Failed)
        )
    }
}

/// Why an attempt did not produce an output. The runner decides what to do
/// next from a provider's class alone (DESIGN.md, Providers); the last three
/// are recorded by Tollgate itself, never answered by a provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Credentials refused: stops the chain.
    Auth,
    /// The provider rejected the input: stops the chain.
    InvalidInput,
    /// The prediction was cancelled: stops the chain.
    Cancelled,
    /// 429: back off (honouring `Retry-After`) and retry the same model.
    RateLimited,
    /// A poll or download timed out: nothing was sent that could be paid.
    Timeout,
    /// A content refusal: the same model's remaining attempts first.
    Refused,
    /// The prediction ran and failed.
    Failed,
    /// 503 or unreachable; nothing was created.
    Unavailable,
    /// A status check or download the provider answered 404: it does not
    /// know that prediction (a mistyped reconcile, or one it forgot).
    NotFound,
    /// The request may have been accepted, and no answer came (a dropped
    /// connection or a timeout after sending): the uncertainty window.
    Uncertain,
    /// The provider answered with something we do not serve, or plainly
    /// broken (recorded by the runner).
    InvalidOutput,
    /// Left open, then closed by a reviewer's decision (recorded by the
    /// decision).
    Abandoned,
    /// Local work whose run stopped before it finished (recorded when the
    /// job is taken up again).
    Interrupted,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 13] = [
        ErrorClass::Auth,
        ErrorClass::InvalidInput,
        ErrorClass::Cancelled,
        ErrorClass::RateLimited,
        ErrorClass::Timeout,
        ErrorClass::Refused,
        ErrorClass::Failed,
        ErrorClass::Unavailable,
        ErrorClass::NotFound,
        ErrorClass::Uncertain,
        ErrorClass::InvalidOutput,
        ErrorClass::Abandoned,
        ErrorClass::Interrupted,
    ];

    /// As stored, and as the API and the spend filters say it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Auth => "auth",
            ErrorClass::InvalidInput => "invalid_input",
            ErrorClass::Cancelled => "cancelled",
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Refused => "refused",
            ErrorClass::Failed => "failed",
            ErrorClass::Unavailable => "unavailable",
            ErrorClass::NotFound => "not_found",
            ErrorClass::Uncertain => "uncertain",
            ErrorClass::InvalidOutput => "invalid_output",
            ErrorClass::Abandoned => "abandoned",
            ErrorClass::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorClass> {
        ErrorClass::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Why, in a person's words: "failed: timed out".
    pub fn words(self) -> &'static str {
        match self {
            ErrorClass::Auth => "our credentials were refused",
            ErrorClass::InvalidInput => "the provider refused the input",
            ErrorClass::Cancelled => "cancelled",
            ErrorClass::RateLimited => "the provider was busy",
            ErrorClass::Timeout => "timed out",
            ErrorClass::Refused => "the model refused it",
            ErrorClass::Failed => "it did not work",
            ErrorClass::Unavailable => "the provider was down",
            ErrorClass::NotFound => "the provider lost it",
            ErrorClass::Uncertain => "no answer came",
            ErrorClass::InvalidOutput => "the result was not usable",
            ErrorClass::Abandoned => "closed by a reviewer",
            ErrorClass::Interrupted => "interrupted",
        }
    }
}

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptEnd {
    Succeeded,
    Failed,
}

impl AttemptEnd {
    pub fn state(self) -> AttemptState {
        match self {
            AttemptEnd::Succeeded => AttemptState::Succeeded,
            AttemptEnd::Failed => AttemptState::Failed,
        }
    }
}

/// Who priced an attempt. An attempt nobody could price has no source and
/// no cost: it is *unpriced*, never zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CostSource {
    /// The provider said what it charged.
    Quoted,
    /// Worked out from units and the rate card (or nothing was created).
    Derived,
    /// The local provider's own rate card.
    Local,
}

impl CostSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CostSource::Quoted => "quoted",
            CostSource::Derived => "derived",
            CostSource::Local => "local",
        }
    }

    pub fn parse(s: &str) -> Option<CostSource> {
        [CostSource::Quoted, CostSource::Derived, CostSource::Local]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

/// What a provider call was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// The paid edit or video.
    Generate,
    /// A checker's look before the paid call.
    Readiness,
    /// A checker's look after it.
    Review,
    /// A checker comparing a repair with the version the person has.
    Compare,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Generate => "generate",
            Purpose::Readiness => "readiness",
            Purpose::Review => "review",
            Purpose::Compare => "compare",
        }
    }

    pub fn parse(s: &str) -> Option<Purpose> {
        [
            Purpose::Generate,
            Purpose::Readiness,
            Purpose::Review,
            Purpose::Compare,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_move_one_way() {
        for s in AttemptState::ALL {
            assert_eq!(AttemptState::parse(s.as_str()), Some(s));
            assert!(!s.can_become(AttemptState::Submitting));
        }
        assert!(AttemptState::Submitting.can_become(AttemptState::Failed));
        assert!(!AttemptState::Succeeded.can_become(AttemptState::Failed));
        assert!(AttemptState::Submitted.is_open());
        assert!(!AttemptState::Failed.is_open());
        assert_eq!(CostSource::parse("quoted"), Some(CostSource::Quoted));
        assert_eq!(CostSource::parse("free"), None);
        assert_eq!(Purpose::parse("compare"), Some(Purpose::Compare));
    }
}
