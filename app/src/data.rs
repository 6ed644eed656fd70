//! What pages show, and the server functions that fetch it. Each server
//! function checks the caller's role through the engine's one guard and
//! calls the engine; there is no SQL here.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use tollgate::model::{LedgerKind, Role};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Me {
    pub id: String,
    pub email: String,
    pub role: Role,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum FlashKind {
    Ok,
    Error,
}

/// A one-time message left by a form post for the page it redirects to.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Flash {
    pub kind: FlashKind,
    pub message: String,
    /// A secret to show exactly once (a new API token).
    pub secret: Option<String>,
    /// What the person typed, to fill the form again after an error.
    pub email: Option<String>,
}

/// Everything the layout needs: who is signed in, and any flash message.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PageContext {
    pub me: Option<Me>,
    pub flash: Option<Flash>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EntryRow {
    pub when: String,
    pub kind: LedgerKind,
    pub amount: i64,
    pub reference: String,
    pub reason: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CreditsData {
    pub balance: i64,
    pub entries: Vec<EntryRow>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub prefix: String,
    pub created: String,
    pub last_used: Option<String>,
    pub revoked: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct UserRow {
    pub id: String,
    pub email: String,
    pub role: Role,
    pub disabled: bool,
    pub balance: i64,
    pub created: String,
    pub is_me: bool,
}

#[cfg(feature = "ssr")]
mod ssr {
    use leptos::prelude::*;
    use tollgate::auth::{Principal, ResolvedPrincipal};
    use tollgate::model::Role;
    use tollgate::Tollgate;

    pub fn engine() -> Result<Tollgate, ServerFnError> {
        use_context::<Tollgate>().ok_or_else(|| ServerFnError::new("the engine is not available"))
    }

    /// The request's principal, as the guard middleware resolved it.
    pub async fn principal() -> Result<Option<Principal>, ServerFnError> {
        let axum::Extension(ResolvedPrincipal(p)) =
            leptos_axum::extract::<axum::Extension<ResolvedPrincipal>>().await?;
        Ok(p)
    }

    /// The principal, when their role allows `role`; the engine's guard decides.
    pub async fn require(role: Role) -> Result<Principal, ServerFnError> {
        let p = principal()
            .await?
            .ok_or_else(|| ServerFnError::new(tollgate::Error::Unauthenticated.public_message()))?;
        p.require(role)
            .map_err(|e| ServerFnError::new(e.public_message()))?;
        Ok(p)
    }

    pub fn fail(e: tollgate::Error) -> ServerFnError {
        if let tollgate::Error::Internal(cause) = &e {
            tracing::error!(%cause, "internal error in a server function");
        }
        ServerFnError::new(e.public_message())
    }

    pub fn when(t: chrono::DateTime<chrono::Utc>) -> String {
        t.format("%Y-%m-%d %H:%M UTC").to_string()
    }
}

#[server]
pub async fn load_page_context() -> Result<PageContext, ServerFnError> {
    use ssr::*;
    let me = principal().await?.map(|p| Me {
        id: p.user.id.to_string(),
        email: p.user.email.to_string(),
        role: p.user.role,
    });
    let flash = crate::server::flash::take().await;
    Ok(PageContext { me, flash })
}

#[server]
pub async fn setup_needed() -> Result<bool, ServerFnError> {
    ssr::engine()?.setup_needed().await.map_err(ssr::fail)
}

#[server]
pub async fn my_credits() -> Result<CreditsData, ServerFnError> {
    use ssr::*;
    let p = require(Role::User).await?;
    let view = engine()?.credits(&p.user).await.map_err(fail)?;
    Ok(CreditsData {
        balance: view.balance.get(),
        entries: view
            .entries
            .into_iter()
            .map(|e| EntryRow {
                when: when(e.created_at),
                kind: e.kind,
                amount: e.amount.get(),
                reference: e.reference,
                reason: e.reason,
            })
            .collect(),
    })
}

#[server]
pub async fn my_tokens() -> Result<Vec<TokenRow>, ServerFnError> {
    use ssr::*;
    let p = require(Role::User).await?;
    let tokens = engine()?.api_tokens(&p.user).await.map_err(fail)?;
    Ok(tokens
        .into_iter()
        .map(|t| TokenRow {
            id: t.id.to_string(),
            name: t.name,
            prefix: t.prefix,
            created: when(t.created_at),
            last_used: t.last_used_at.map(when),
            revoked: t.revoked_at.is_some(),
        })
        .collect())
}

#[server]
pub async fn all_users() -> Result<Vec<UserRow>, ServerFnError> {
    use ssr::*;
    let p = require(Role::Admin).await?;
    let users = engine()?.list_users().await.map_err(fail)?;
    Ok(users
        .into_iter()
        .map(|u| UserRow {
            is_me: u.id == p.user.id,
            id: u.id.to_string(),
            email: u.email.to_string(),
            role: u.role,
            disabled: u.disabled,
            balance: u.balance.get(),
            created: u.created_at.format("%Y-%m-%d").to_string(),
        })
        .collect())
}
