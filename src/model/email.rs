//! An email address, parsed once at the edge: trimmed, lower-cased, bounded.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Email(String);

/// RFC 5321's limit on a path.
pub const EMAIL_LEN_MAX: usize = 254;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmailError {
    #[error("email is required")]
    Empty,
    #[error("email is longer than {EMAIL_LEN_MAX} characters")]
    TooLong,
    #[error("email must look like name@example.com")]
    Malformed,
}

impl Email {
    pub fn parse(raw: &str) -> Result<Email, EmailError> {
        let s = raw.trim();
        if s.is_empty() {
            return Err(EmailError::Empty);
        }
        if s.len() > EMAIL_LEN_MAX {
            return Err(EmailError::TooLong);
        }
        let (local, domain) = s.split_once('@').ok_or(EmailError::Malformed)?;
        let valid_part = |p: &str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_graphic() && c != '@' && c != '<' && c != '>')
        };
        if !valid_part(local) || !valid_part(domain) || !domain.contains('.') {
            return Err(EmailError::Malformed);
        }
        if domain.starts_with('.') || domain.ends_with('.') {
            return Err(EmailError::Malformed);
        }
        Ok(Email(s.to_ascii_lowercase()))
    }

    /// An address read back from the store, which only ever holds parsed ones.
    pub fn from_stored(s: String) -> Email {
        Email(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_normalises() {
        assert_eq!(
            Email::parse("  Ana@Example.COM ").unwrap().as_str(),
            "ana@example.com"
        );
        assert_eq!(Email::parse(""), Err(EmailError::Empty));
        assert_eq!(Email::parse("no-at-sign"), Err(EmailError::Malformed));
        assert_eq!(Email::parse("a@b"), Err(EmailError::Malformed));
        assert_eq!(Email::parse("a b@c.d"), Err(EmailError::Malformed));
        assert_eq!(
            Email::parse(&format!("{}@x.io", "a".repeat(260))),
            Err(EmailError::TooLong)
        );
    }
}
