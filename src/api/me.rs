//! `GET /v1/me` and `GET /v1/credits`: who the caller is, and their credits.

use crate::usecases::auth::{AnyUser, Authorized};
use crate::usecases::error::Result;
use crate::wire::{CreditsObject, ErrorBody, LedgerEntryObject, MeObject};
use crate::Tollgate;
use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new()
        .routes(routes!(me))
        .routes(routes!(credits))
}

/// Who the token or session belongs to.
#[utoipa::path(
    get, path = "/me", tag = "account", operation_id = "me",
    responses(
        (status = 200, description = "The caller.", body = MeObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn me(who: Authorized<AnyUser>) -> Json<MeObject> {
    Json(MeObject::from(who.user()))
}

/// The caller's balance and ledger, newest first.
#[utoipa::path(
    get, path = "/credits", tag = "account", operation_id = "credits",
    responses(
        (status = 200, description = "Balance and entries.", body = CreditsObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn credits(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
) -> Result<Json<CreditsObject>> {
    let view = t.credits(who.user()).await?;
    Ok(Json(CreditsObject {
        balance: view.balance,
        entries: view.entries.iter().map(LedgerEntryObject::from).collect(),
    }))
}
