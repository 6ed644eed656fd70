//! A new password's rules. Bounded above too: hashing is deliberately slow,
//! and an unbounded input would make it slower still.

use std::fmt;

pub const PASSWORD_LEN_MIN: usize = 10;
pub const PASSWORD_LEN_MAX: usize = 256;

/// A password that satisfies the rules for a new password. Its `Debug`
/// never shows the secret.
#[derive(Clone)]
pub struct Password(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    #[error("password must be at least {PASSWORD_LEN_MIN} characters")]
    TooShort,
    #[error("password must be at most {PASSWORD_LEN_MAX} characters")]
    TooLong,
    #[error("the two passwords do not match")]
    Mismatch,
}

impl Password {
    pub fn new(raw: &str) -> Result<Password, PasswordError> {
        let n = raw.chars().count();
        if n < PASSWORD_LEN_MIN {
            Err(PasswordError::TooShort)
        } else if n > PASSWORD_LEN_MAX {
            Err(PasswordError::TooLong)
        } else {
            Ok(Password(raw.to_string()))
        }
    }

    /// A new password typed twice.
    pub fn confirmed(raw: &str, again: &str) -> Result<Password, PasswordError> {
        let p = Password::new(raw)?;
        if raw != again {
            return Err(PasswordError::Mismatch);
        }
        Ok(p)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(***)")
    }
}
