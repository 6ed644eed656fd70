//! What a ledger entry is for. Stored as TEXT with a CHECK constraint.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum LedgerKind {
    /// Credits given by an admin (positive).
    Grant,
    /// Credits spent on a job (negative), in the transaction that creates it.
    Debit,
    /// Credits returned for a failed or cancelled job (positive), once.
    Refund,
    /// A correction by an admin (either sign).
    Adjustment,
}

/// The job a ledger entry charged or refunded, read from its reference
/// (`debit:job:<id>`, `refund:job:<id>`); `None` for a grant.
pub fn job_of_reference(reference: &str) -> Option<super::JobId> {
    reference
        .strip_prefix("debit:job:")
        .or_else(|| reference.strip_prefix("refund:job:"))?
        .parse()
        .ok()
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown ledger kind {0:?}")]
pub struct UnknownLedgerKind(pub String);

impl LedgerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerKind::Grant => "grant",
            LedgerKind::Debit => "debit",
            LedgerKind::Refund => "refund",
            LedgerKind::Adjustment => "adjustment",
        }
    }

    pub fn parse(s: &str) -> Result<Self, UnknownLedgerKind> {
        match s {
            "grant" => Ok(LedgerKind::Grant),
            "debit" => Ok(LedgerKind::Debit),
            "refund" => Ok(LedgerKind::Refund),
            "adjustment" => Ok(LedgerKind::Adjustment),
            other => Err(UnknownLedgerKind(other.to_string())),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            LedgerKind::Grant => "Grant",
            LedgerKind::Debit => "Debit",
            LedgerKind::Refund => "Refund",
            LedgerKind::Adjustment => "Adjustment",
        }
    }
}

impl fmt::Display for LedgerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
