//! Credits: whole units a person spends on jobs. Signed, because a ledger
//! entry is a signed change; a balance is never negative (the database says so).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A signed number of credits.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Credits(pub i64);

/// The most credits one grant may move: a typo guard, not an economic rule.
pub const GRANT_MAX: i64 = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreditsError {
    #[error("amount must be a whole number")]
    NotANumber,
    #[error("amount must be at least 1")]
    NotPositive,
    #[error("amount must be at most {GRANT_MAX}")]
    TooLarge,
}

impl Credits {
    pub const ZERO: Credits = Credits(0);

    /// Parses the amount of a grant: a positive whole number, bounded.
    pub fn parse_grant(s: &str) -> Result<Credits, CreditsError> {
        let n: i64 = s.trim().parse().map_err(|_| CreditsError::NotANumber)?;
        Credits::grant(n)
    }

    pub fn grant(n: i64) -> Result<Credits, CreditsError> {
        if n < 1 {
            Err(CreditsError::NotPositive)
        } else if n > GRANT_MAX {
            Err(CreditsError::TooLarge)
        } else {
            Ok(Credits(n))
        }
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Credits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_bounded() {
        assert_eq!(Credits::parse_grant(" 12 "), Ok(Credits(12)));
        assert_eq!(Credits::parse_grant("0"), Err(CreditsError::NotPositive));
        assert_eq!(Credits::parse_grant("-3"), Err(CreditsError::NotPositive));
        assert_eq!(Credits::parse_grant("1.5"), Err(CreditsError::NotANumber));
        assert_eq!(
            Credits::parse_grant("99999999"),
            Err(CreditsError::TooLarge)
        );
    }
}
