//! Admin: `GET /v1/spend`: spend per day, per provider and model, per error
//! class and in total, unpriced calls apart; as CSV (`Accept: text/csv` or
//! `format=csv`), one row per attempt, streamed.

use crate::model::{ApiTokenId, ErrorClass, Usd, UserId};
use crate::store::AttemptListed;
use crate::usecases::auth::{AdminOnly, Authorized};
use crate::usecases::cursor;
use crate::usecases::error::{Error, Result};
use crate::usecases::spend::{parse_range, AttemptQuery, SpendReport, Tally};
use crate::wire::ErrorBody;
use crate::Tollgate;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Attempts read for each chunk of the CSV.
const CSV_CHUNK: i64 = 500;

pub fn router() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new().routes(routes!(get_spend))
}

/// Priced spend, and the calls nobody could price counted apart.
#[derive(Serialize, ToSchema)]
pub struct TallyObject {
    pub attempts: i64,
    /// The sum of known costs only: an unpriced call never adds 0 here.
    pub priced_usd: Usd,
    pub unpriced_attempts: i64,
    /// Sent, and their outcome and cost not known yet (never counted as 0).
    pub pending_attempts: i64,
    /// Said as a person reads it: "$12.40 + 3 unpriced".
    #[schema(example = "$12.40 + 3 unpriced")]
    pub in_words: String,
}

impl From<Tally> for TallyObject {
    fn from(t: Tally) -> Self {
        TallyObject {
            attempts: t.attempts,
            priced_usd: t.priced_usd,
            unpriced_attempts: t.unpriced,
            pending_attempts: t.pending(),
            in_words: t.words(),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct SpendDayObject {
    #[schema(value_type = String, format = Date)]
    pub day: chrono::NaiveDate,
    pub cap_usd: Usd,
    /// What the breaker booked: priced costs plus the estimate kept for each
    /// unpriced paid call.
    pub used_usd: Usd,
    pub reserved_usd: Usd,
    pub halted: bool,
    pub halted_reason: Option<String>,
    /// Used and reserved are past the warning share of the cap.
    pub warning: bool,
    #[serde(flatten)]
    pub tally: TallyObject,
}

#[derive(Serialize, ToSchema)]
pub struct SpendModelObject {
    pub provider: String,
    pub model: String,
    #[serde(flatten)]
    pub tally: TallyObject,
}

#[derive(Serialize, ToSchema)]
pub struct SpendClassObject {
    /// Null for attempts without an error (succeeded, or still open).
    pub error_class: Option<ErrorClass>,
    #[serde(flatten)]
    pub tally: TallyObject,
}

/// One person's spend over the range.
#[derive(Serialize, ToSchema)]
pub struct SpendPersonObject {
    pub user_id: UserId,
    pub email: String,
    #[serde(flatten)]
    pub tally: TallyObject,
}

/// What was ordered with one API token (`token_id` null: from the pages).
#[derive(Serialize, ToSchema)]
pub struct SpendTokenObject {
    pub token_id: Option<ApiTokenId>,
    /// The token's name, as its owner gave it (null: from the pages).
    pub token_name: Option<String>,
    pub revoked: bool,
    pub owner_email: String,
    #[serde(flatten)]
    pub tally: TallyObject,
}

#[derive(Serialize, ToSchema)]
pub struct SpendObject {
    #[schema(value_type = String, format = Date)]
    pub from: chrono::NaiveDate,
    #[schema(value_type = String, format = Date)]
    pub to: chrono::NaiveDate,
    pub days: Vec<SpendDayObject>,
    pub models: Vec<SpendModelObject>,
    pub error_classes: Vec<SpendClassObject>,
    /// By the person whose work it was, most first.
    pub people: Vec<SpendPersonObject>,
    /// By the API token the work was ordered with, most first.
    pub tokens: Vec<SpendTokenObject>,
    pub total: TallyObject,
}

impl From<SpendReport> for SpendObject {
    fn from(r: SpendReport) -> Self {
        SpendObject {
            from: r.from,
            to: r.to,
            days: r
                .days
                .into_iter()
                .map(|d| SpendDayObject {
                    day: d.day,
                    cap_usd: d.cap_usd,
                    used_usd: d.used_usd,
                    reserved_usd: d.reserved_usd,
                    halted: d.halted,
                    halted_reason: d.halted_reason,
                    warning: d.warning,
                    tally: d.tally.into(),
                })
                .collect(),
            models: r
                .models
                .into_iter()
                .map(|m| SpendModelObject {
                    provider: m.provider,
                    model: m.model,
                    tally: m.tally.into(),
                })
                .collect(),
            error_classes: r
                .classes
                .into_iter()
                .map(|c| SpendClassObject {
                    error_class: c.error_class,
                    tally: c.tally.into(),
                })
                .collect(),
            people: r
                .people
                .into_iter()
                .map(|p| SpendPersonObject {
                    user_id: p.user_id,
                    email: p.email.to_string(),
                    tally: p.tally.into(),
                })
                .collect(),
            tokens: r
                .tokens
                .into_iter()
                .map(|t| SpendTokenObject {
                    token_id: t.token.as_ref().map(|k| k.id),
                    token_name: t.token.as_ref().map(|k| k.name.clone()),
                    revoked: t.token.as_ref().is_some_and(|k| k.revoked),
                    owner_email: t.owner.to_string(),
                    tally: t.tally.into(),
                })
                .collect(),
            total: r.total.into(),
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct SpendQuery {
    /// The first UTC day (YYYY-MM-DD); 29 days before `to` when absent.
    #[param(format = Date)]
    from: Option<String>,
    /// The last UTC day, included; today when absent. At most 366 days.
    #[param(format = Date)]
    to: Option<String>,
    /// `csv` for one row per attempt (as `Accept: text/csv`).
    #[param(pattern = "^(json|csv)$")]
    format: Option<String>,
}

/// Spend per day, per provider and model, per error class and in total.
/// Unpriced calls are counted apart and never add 0 to a sum. As CSV: one
/// row per attempt (`started_at,job_id,user,provider,model,attempt_no,
/// state,error_class,cost_usd,cost_source`), an empty `cost_usd` when
/// unpriced.
#[utoipa::path(
    get, path = "/spend", tag = "admin", operation_id = "get_spend",
    params(SpendQuery),
    responses(
        (status = 200, description = "The report, or the attempts as CSV.", content(
            (SpendObject = "application/json"), (String = "text/csv"))),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not an admin.", body = ErrorBody),
        (status = 422, description = "Not dates, from after to, or more than 366 days.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn get_spend(
    State(t): State<Tollgate>,
    _a: Authorized<AdminOnly>,
    headers: HeaderMap,
    query: std::result::Result<Query<SpendQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let Query(q) = query.map_err(|e| Error::invalid("query", e.body_text()))?;
    // Given but empty is not absent: the document says a date (or a format).
    for (field, v) in [("from", &q.from), ("to", &q.to), ("format", &q.format)] {
        if v.as_deref() == Some("") {
            return Err(Error::invalid(field, "must not be empty"));
        }
    }
    let (from, to) = parse_range(q.from.as_deref(), q.to.as_deref())?;
    let csv = match q.format.as_deref() {
        None => headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/csv")),
        Some("csv") => true,
        Some("json") => false,
        Some(_) => return Err(Error::invalid("format", "must be json or csv")),
    };
    if !csv {
        return Ok(Json(SpendObject::from(t.spend(from, to).await?)).into_response());
    }
    Ok(spend_csv(t, from, to))
}

/// The attempts of `from..=to` as CSV, streamed: each page of attempts is
/// written as its chunk as it is read, so a year's export never sits in
/// memory.
fn spend_csv(t: Tollgate, from: chrono::NaiveDate, to: chrono::NaiveDate) -> Response {
    let header_row = csv_line(&[
        "started_at",
        "job_id",
        "user",
        "provider",
        "model",
        "attempt_no",
        "state",
        "error_class",
        "cost_usd",
        "cost_source",
    ]);
    // Pages of attempts, each written as its chunk of CSV as it is read.
    let stream = crate::storage::unfold(
        (t, Some(None), Some(header_row)),
        move |(t, cursor, first): (_, Option<Option<String>>, _)| async move {
            if let Some(h) = first {
                return Some((Ok(h.into()), (t, cursor, None)));
            }
            let cursor = cursor?;
            let page = match cursor::decode_opt(cursor.as_deref()) {
                Ok(seek) => {
                    let q = AttemptQuery {
                        seek,
                        limit: CSV_CHUNK,
                        ..AttemptQuery::between(from, to)
                    };
                    t.spend_attempts(&q).await
                }
                Err(e) => Err(e),
            };
            match page {
                Ok(page) if !page.items.is_empty() => {
                    let chunk: String = page.items.iter().map(csv_row).collect();
                    Some((Ok(chunk.into()), (t, page.next.map(Some), None)))
                }
                Ok(_) => None,
                Err(e) => Some((
                    Err(crate::storage::StorageError::Io(e.to_string())),
                    (t, None, None),
                )),
            }
        },
    );
    let mut response = axum::body::Body::from_stream(stream).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!(
        "attachment; filename=\"tollgate-spend-{from}-{to}.csv\""
    )) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    response
}

fn csv_line(fields: &[&str]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    // Writing to memory cannot fail; a field that could not be written
    // would leave the line empty rather than wrong.
    let _ = w.write_record(fields);
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

fn csv_row(l: &AttemptListed) -> String {
    let a = &l.attempt;
    csv_line(&[
        &a.started_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        &a.job_id.to_string(),
        l.user_email.as_str(),
        &a.provider,
        &a.model,
        &a.attempt_no.to_string(),
        a.state.as_str(),
        a.error_class.map(ErrorClass::as_str).unwrap_or(""),
        &a.cost_usd.map(|c| c.to_string()).unwrap_or_default(),
        a.cost_source.map(|c| c.as_str()).unwrap_or(""),
    ])
}
