//! Admin: `GET|PUT /v1/budget/{day}`, `POST /v1/budget/{day}/halt|resume`.

use super::ApiJson;
use crate::usecases::auth::{AdminOnly, Authorized};
use crate::usecases::budget::parse_day;
use crate::usecases::error::Result;
use crate::wire::{BudgetDayObject, ErrorBody};
use crate::Tollgate;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new()
        .routes(routes!(get_budget, set_cap))
        .routes(routes!(halt_day))
        .routes(routes!(resume_day))
}

/// A day's cap, what it has used and holds, and whether it is halted.
#[utoipa::path(
    get, path = "/budget/{day}", tag = "admin", operation_id = "get_budget",
    params(("day" = String, Path, format = Date, description = "A UTC day, YYYY-MM-DD.")),
    responses(
        (status = 200, description = "The day.", body = BudgetDayObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not an admin.", body = ErrorBody),
        (status = 422, description = "Not a date.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn get_budget(
    State(t): State<Tollgate>,
    _a: Authorized<AdminOnly>,
    Path(day): Path<String>,
) -> Result<Json<BudgetDayObject>> {
    Ok(Json(BudgetDayObject::from(
        &t.budget(parse_day(&day)?).await?,
    )))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CapBody {
    /// Dollars, as a string.
    #[schema(example = "50.00", pattern = "^[0-9]{1,6}(\\.[0-9]{1,6})?$")]
    cap_usd: String,
}

/// Sets a day's spending cap.
#[utoipa::path(
    put, path = "/budget/{day}", tag = "admin", operation_id = "set_cap",
    params(("day" = String, Path, format = Date, description = "A UTC day, YYYY-MM-DD.")),
    request_body = CapBody,
    responses(
        (status = 200, description = "The day.", body = BudgetDayObject),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not an admin.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "Not a date, or not an amount.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn set_cap(
    State(t): State<Tollgate>,
    a: Authorized<AdminOnly>,
    Path(day): Path<String>,
    ApiJson(body): ApiJson<CapBody>,
) -> Result<Json<BudgetDayObject>> {
    Ok(Json(BudgetDayObject::from(
        &t.set_daily_cap(parse_day(&day)?, &body.cap_usd, Some(a.user().id))
            .await?,
    )))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HaltBody {
    /// Why spending stops (1 to 500 characters); kept with who and when.
    #[schema(min_length = 1, max_length = 500)]
    reason: String,
}

/// Halts a day: no paid call is sent until it is resumed.
#[utoipa::path(
    post, path = "/budget/{day}/halt", tag = "admin", operation_id = "halt_day",
    params(("day" = String, Path, format = Date, description = "A UTC day, YYYY-MM-DD.")),
    request_body = HaltBody,
    responses(
        (status = 200, description = "The day.", body = BudgetDayObject),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not an admin.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "Not a date, or no reason.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn halt_day(
    State(t): State<Tollgate>,
    a: Authorized<AdminOnly>,
    Path(day): Path<String>,
    ApiJson(body): ApiJson<HaltBody>,
) -> Result<Json<BudgetDayObject>> {
    let d = t
        .halt_day(parse_day(&day)?, &body.reason, Some(a.user().id))
        .await?;
    Ok(Json(BudgetDayObject::from(&d)))
}

/// Resumes a halted day.
#[utoipa::path(
    post, path = "/budget/{day}/resume", tag = "admin", operation_id = "resume_day",
    params(("day" = String, Path, format = Date, description = "A UTC day, YYYY-MM-DD.")),
    responses(
        (status = 200, description = "The day.", body = BudgetDayObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not an admin.", body = ErrorBody),
        (status = 422, description = "Not a date.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn resume_day(
    State(t): State<Tollgate>,
    a: Authorized<AdminOnly>,
    Path(day): Path<String>,
) -> Result<Json<BudgetDayObject>> {
    let d = t
        .resume_day(parse_day(&day)?, None, Some(a.user().id))
        .await?;
    Ok(Json(BudgetDayObject::from(&d)))
}
