//! Roles and the one rule of who may do what: admin > reviewer > user.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a person may do. Stored as TEXT with a CHECK constraint naming
/// exactly these three values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Submits jobs, holds credits, manages their own tokens.
    User,
    /// Also works the queue of parked jobs.
    Reviewer,
    /// Also watches spend, manages users, credits, budgets and webhooks.
    Admin,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?}: expected user, reviewer or admin")]
pub struct UnknownRole(pub String);

impl Role {
    pub const ALL: [Role; 3] = [Role::User, Role::Reviewer, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Reviewer => "reviewer",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Result<Self, UnknownRole> {
        match s {
            "user" => Ok(Role::User),
            "reviewer" => Ok(Role::Reviewer),
            "admin" => Ok(Role::Admin),
            other => Err(UnknownRole(other.to_string())),
        }
    }

    /// Whether a holder of `self` may do what needs `required`. The only
    /// place a role is compared; every guard calls this.
    pub fn allows(self, required: Role) -> bool {
        self >= required
    }

    pub fn label(self) -> &'static str {
        match self {
            Role::User => "User",
            Role::Reviewer => "Reviewer",
            Role::Admin => "Admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered() {
        assert!(Role::Admin.allows(Role::Reviewer));
        assert!(Role::Admin.allows(Role::User));
        assert!(Role::Reviewer.allows(Role::User));
        assert!(!Role::Reviewer.allows(Role::Admin));
        assert!(!Role::User.allows(Role::Reviewer));
        for r in Role::ALL {
            assert!(r.allows(r));
            assert_eq!(Role::parse(r.as_str()), Ok(r));
        }
        assert!(Role::parse("root").is_err());
    }
}
