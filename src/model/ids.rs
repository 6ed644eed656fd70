//! Typed ids: a user id can never be passed where a token id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh random (v4) id.
            pub fn new() -> Self {
                Self(Uuid::new_v4())
            }
            pub fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

id_type!(
    /// A person or program that holds credits and a role.
    UserId
);
id_type!(
    /// An API token (its id, never its secret).
    ApiTokenId
);
id_type!(
    /// One row of the append-only credit ledger.
    LedgerEntryId
);
id_type!(
    /// A stored upload (photo or mask), private to its owner.
    AssetId
);
id_type!(
    /// A paid generation job.
    JobId
);
id_type!(
    /// One provider call of a job, written down before it is made (rule 7).
    AttemptId
);
id_type!(
    /// A parked job's record, awaiting a reviewer's decision (rule 12).
    ParkedId
);
id_type!(
    /// A reviewer's recorded decision on a parked record (rule 12).
    DecisionId
);
id_type!(
    /// A person's webhook endpoint (rule 13).
    WebhookEndpointId
);
id_type!(
    /// One delivery of one event to one target (rule 13).
    DeliveryId
);
