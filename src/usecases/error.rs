//! The engine's one error type. Each variant knows its API code and status;
//! `api::error` turns it into the `{"error": {...}}` shape in one place.

use crate::store::StoreError;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request that fails validation; `fields` names each bad field.
    #[error("{message}")]
    Invalid {
        message: String,
        fields: BTreeMap<String, String>,
    },
    #[error("sign in, or send an API token as `Authorization: Bearer <token>`")]
    Unauthenticated,
    #[error("email or password is incorrect")]
    InvalidCredentials,
    #[error("this account is disabled; ask an admin to enable it")]
    AccountDisabled,
    #[error("too many attempts; wait a minute and try again")]
    RateLimited { retry_after_s: u64 },
    /// Fair use of the day's cap: this person's work used their share.
    #[error("your work today has cost your share of the studio's daily budget; new paid work is accepted again when the day ends (UTC)")]
    ShareUsed { retry_after_s: u64 },
    #[error("your role does not allow this")]
    Forbidden,
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("not enough credits for this")]
    InsufficientCredits,
    /// A request the HTTP layer cannot read (bad JSON, wrong content type,
    /// too large), with its own status and code.
    #[error("{message}")]
    BadRequest {
        status: u16,
        code: &'static str,
        message: String,
    },
    #[error("internal error")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// One invalid field.
    pub fn invalid(field: &str, message: impl Into<String>) -> Error {
        let message = message.into();
        let mut fields = BTreeMap::new();
        fields.insert(field.to_string(), message.clone());
        Error::Invalid {
            message: format!("{field}: {message}"),
            fields,
        }
    }

    /// The stable code clients switch on.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Invalid { .. } => "INVALID_REQUEST",
            Error::Unauthenticated => "UNAUTHENTICATED",
            Error::InvalidCredentials => "INVALID_CREDENTIALS",
            Error::AccountDisabled => "ACCOUNT_DISABLED",
            Error::RateLimited { .. } | Error::ShareUsed { .. } => "RATE_LIMITED",
            Error::Forbidden => "FORBIDDEN",
            Error::NotFound(_) => "NOT_FOUND",
            Error::Conflict { code, .. } => code,
            Error::InsufficientCredits => "INSUFFICIENT_CREDITS",
            Error::BadRequest { code, .. } => code,
            Error::Internal(_) => "INTERNAL",
        }
    }

    /// The HTTP status for this error.
    pub fn status(&self) -> u16 {
        match self {
            Error::Invalid { .. } => 422,
            Error::Unauthenticated | Error::InvalidCredentials => 401,
            Error::AccountDisabled | Error::Forbidden => 403,
            Error::RateLimited { .. } | Error::ShareUsed { .. } => 429,
            Error::NotFound(_) => 404,
            Error::Conflict { .. } => 409,
            Error::InsufficientCredits => 402,
            Error::BadRequest { status, .. } => *status,
            Error::Internal(_) => 500,
        }
    }

    /// What a person may be shown. Internal details stay in the logs.
    pub fn public_message(&self) -> String {
        match self {
            Error::Internal(_) => {
                "something went wrong on our side; it has been logged".to_string()
            }
            other => other.to_string(),
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Error::NotFound("record"),
            StoreError::Conflict(what) => Error::Conflict {
                code: "ALREADY_EXISTS",
                message: format!("that {what} is already taken"),
            },
            StoreError::InsufficientCredits => Error::InsufficientCredits,
            StoreError::RepairRefused(why) => match why {
                crate::model::RepairRefusal::Stopped => Error::Conflict {
                    code: "REPAIRS_STOPPED",
                    message: "a repair of this edit kept the previous version, so it takes no further repairs; order a new edit to try again".into(),
                },
                crate::model::RepairRefusal::LimitReached => Error::Conflict {
                    code: "REPAIR_LIMIT_REACHED",
                    message: format!(
                        "this edit has had its {} repairs; order a new edit to try again",
                        crate::model::REPAIRS_MAX
                    ),
                },
            },
            StoreError::UnstorableText => {
                Error::invalid("body", "text must not contain NUL characters")
            }
            StoreError::ImmutableLedger => Error::Internal("attempted to change the ledger".into()),
            other => Error::Internal(other.to_string()),
        }
    }
}
