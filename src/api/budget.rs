//! Admin: `GET|PUT /v1/budget/{day}`, `POST /v1/budget/{day}/halt|resume`.

use super::ApiJson;
use crate::auth::{AdminOnly, Authorized};
use crate::budget::parse_day;
use crate::error::Result;
use crate::store::BudgetDay;
use crate::Tollgate;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

pub fn day_json(d: &BudgetDay) -> Value {
    json!({
        "day": d.day, "cap_usd": d.cap_usd, "used_usd": d.used_usd,
        "reserved_usd": d.reserved_usd, "halted": d.halted,
        "halted_reason": d.halted_reason, "halted_at": d.halted_at,
    })
}

pub async fn show(
    State(t): State<Tollgate>,
    _a: Authorized<AdminOnly>,
    Path(day): Path<String>,
) -> Result<Json<Value>> {
    Ok(Json(day_json(&t.budget(parse_day(&day)?).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapBody {
    cap_usd: String,
}

pub async fn set_cap(
    State(t): State<Tollgate>,
    _a: Authorized<AdminOnly>,
    Path(day): Path<String>,
    ApiJson(body): ApiJson<CapBody>,
) -> Result<Json<Value>> {
    Ok(Json(day_json(
        &t.set_daily_cap(parse_day(&day)?, &body.cap_usd).await?,
    )))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaltBody {
    reason: String,
}

pub async fn halt(
    State(t): State<Tollgate>,
    a: Authorized<AdminOnly>,
    Path(day): Path<String>,
    ApiJson(body): ApiJson<HaltBody>,
) -> Result<Json<Value>> {
    if body.reason.trim().is_empty() {
        return Err(crate::error::Error::invalid(
            "reason",
            "say why spending is halted",
        ));
    }
    Ok(Json(day_json(
        &t.set_halted(
            parse_day(&day)?,
            true,
            Some(&body.reason),
            Some(a.user().id),
        )
        .await?,
    )))
}

pub async fn resume(
    State(t): State<Tollgate>,
    a: Authorized<AdminOnly>,
    Path(day): Path<String>,
) -> Result<Json<Value>> {
    Ok(Json(day_json(
        &t.set_halted(parse_day(&day)?, false, None, Some(a.user().id))
            .await?,
    )))
}
