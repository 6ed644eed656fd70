//! Reviewers and admins: `GET /v1/parked`, `GET /v1/parked/{id}`,
//! `POST /v1/parked/{id}/decisions` and `POST /v1/parked/{id}/notes`. The
//! reviewer is the caller (session or token), never a field of the body.

use super::ApiJson;
use crate::model::{JobId, ParkedId, ParkedStage, ParkedState, RecoveryState, ReviewAction, Usd};
use crate::store::{Decision, Parked};
use crate::usecases::auth::{Authorized, ReviewerOnly};
use crate::usecases::error::{Error, Result};
use crate::usecases::parked::{DecisionRequest, ParkedQuery, ParkedQueryText, ParkedView};
use crate::wire::{millis, millis_opt, AttemptObject, ErrorBody, EventObject};
use crate::Tollgate;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new()
        .routes(routes!(list_parked))
        .routes(routes!(get_parked))
        .routes(routes!(decide))
        .routes(routes!(add_note))
}

fn parked_id(raw: &str) -> Result<ParkedId> {
    raw.parse().map_err(|_| Error::NotFound("parked record"))
}

/// A recovery a worker claims after the decision (resume_poll, retry_delivery).
#[derive(Serialize, ToSchema)]
pub struct RecoveryObject {
    pub state: RecoveryState,
    /// Claims made of it (a run that died and was claimed again counts again).
    pub attempts: i32,
    /// Resumed status checks run until then.
    #[serde(serialize_with = "millis_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub deadline: Option<DateTime<Utc>>,
    #[serde(serialize_with = "millis_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub ended_at: Option<DateTime<Utc>>,
}

/// A reviewer's decision, recorded with who made it and why.
#[derive(Serialize, ToSchema)]
pub struct DecisionObject {
    #[schema(value_type = String, format = Uuid)]
    pub id: crate::model::DecisionId,
    pub action: ReviewAction,
    pub evidence: String,
    /// The reviewer's email: the caller who decided.
    pub reviewer: String,
    #[serde(serialize_with = "millis")]
    #[schema(value_type = String, format = DateTime)]
    pub decided_at: DateTime<Utc>,
    /// accept_failure: whether the credits were refunded.
    pub refund: Option<bool>,
    /// accept_failure: whether the budget hold was released.
    pub release_hold: Option<bool>,
    /// reconcile: the provider job id attached.
    pub provider_job_id: Option<String>,
    pub recovery: Option<RecoveryObject>,
    /// new_attempt: the new job.
    #[schema(value_type = Option<String>, format = Uuid)]
    pub new_attempt_job_id: Option<JobId>,
    /// new_attempt: what the original may already have cost.
    pub duplicate_cost_usd: Option<Usd>,
}

impl From<&Decision> for DecisionObject {
    fn from(d: &Decision) -> Self {
        DecisionObject {
            id: d.id,
            action: d.action,
            evidence: d.evidence.clone(),
            reviewer: d.reviewer_email.as_str().to_string(),
            decided_at: d.decided_at,
            refund: d.refund,
            release_hold: d.release_hold,
            provider_job_id: d.provider_job_id.clone(),
            recovery: d.recovery.as_ref().map(|r| RecoveryObject {
                state: r.state,
                attempts: r.attempts,
                deadline: r.deadline,
                ended_at: r.ended_at,
            }),
            new_attempt_job_id: d.new_job_id,
            duplicate_cost_usd: d.duplicate_cost_usd,
        }
    }
}

/// A parked job's record: what is known, what it may have cost, what it
/// still holds, and what a reviewer may do.
#[derive(Serialize, ToSchema)]
pub struct ParkedObject {
    #[schema(value_type = String, format = Uuid)]
    pub id: ParkedId,
    #[schema(value_type = String, format = Uuid)]
    pub job_id: JobId,
    pub stage: ParkedStage,
    pub state: ParkedState,
    /// What was sent and when, under which key, the provider's last words,
    /// how long it waited.
    pub evidence: Value,
    /// Null until known.
    pub provider_job_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// Status checks and output downloads tried.
    pub polls: i32,
    pub deliveries: i32,
    /// What may already have been spent: known costs, and the estimate
    /// held for each call whose cost is unknown.
    pub exposure_usd: Usd,
    /// The budget still held; null when nothing is.
    pub hold_usd: Option<Usd>,
    pub age_s: i64,
    #[serde(serialize_with = "millis")]
    #[schema(value_type = String, format = DateTime)]
    pub parked_at: DateTime<Utc>,
    /// When the record last changed or was observed (parked, reconciled,
    /// checked again).
    #[serde(serialize_with = "millis")]
    #[schema(value_type = String, format = DateTime)]
    pub last_observed_at: DateTime<Utc>,
    /// The request's fingerprint: SHA-256 of its canonical body (hex).
    pub request_sha256: String,
    /// The job's owner.
    pub user: String,
    /// The job's attempts (only on `GET /v1/parked/{id}` and decisions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptObject>>,
    pub decisions: Vec<DecisionObject>,
    /// What the stage permits now (empty unless the record is open).
    pub allowed_actions: Vec<ReviewAction>,
}

impl ParkedObject {
    fn new(p: &Parked, decisions: &[Decision], attempts: Option<Vec<AttemptObject>>) -> Self {
        let key = p.evidence.idempotency_key().map(str::to_string);
        ParkedObject {
            id: p.id,
            job_id: p.job_id,
            stage: p.stage,
            state: p.state,
            evidence: p.evidence.to_json(),
            provider_job_id: p.provider_job_id.clone(),
            idempotency_key: key,
            provider: p.provider.clone(),
            model: p.model.clone(),
            polls: p.polls,
            deliveries: p.deliveries,
            exposure_usd: p.exposure_usd,
            hold_usd: p.hold_usd,
            age_s: (Utc::now() - p.created_at).num_seconds().max(0),
            parked_at: p.created_at,
            last_observed_at: p.updated_at,
            request_sha256: p.request_sha256.clone(),
            user: p.user_email.as_str().to_string(),
            attempts,
            decisions: decisions.iter().map(DecisionObject::from).collect(),
            allowed_actions: if p.state == ParkedState::Open {
                p.stage.allows_for(p.job_status).to_vec()
            } else {
                Vec::new()
            },
        }
    }
}

impl From<&ParkedView> for ParkedObject {
    fn from(v: &ParkedView) -> Self {
        ParkedObject::new(
            &v.record,
            &v.decisions,
            Some(v.attempts.iter().map(AttemptObject::from).collect()),
        )
    }
}

/// A page of parked records, oldest first.
#[derive(Serialize, ToSchema)]
pub struct ParkedPage {
    pub data: Vec<ParkedObject>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ParkedListQuery {
    #[param(value_type = Option<ParkedStage>)]
    stage: Option<String>,
    /// Every record that is not closed when absent.
    #[param(value_type = Option<ParkedState>)]
    state: Option<String>,
    /// Only records of this model.
    #[param(max_length = 200)]
    model: Option<String>,
    /// Only records parked at least this many seconds ago.
    #[param(minimum = 0, maximum = 315360000)]
    min_age_s: Option<i64>,
    /// Records a page (1 to 100; 50 when absent).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
    /// `next_cursor` of the previous page (of the same sort).
    #[param(max_length = 200)]
    cursor: Option<String>,
    /// `age` (oldest first, the default) or `exposure` (what may already
    /// have been spent, most first).
    #[param(pattern = "^(age|exposure)$")]
    sort: Option<String>,
}

/// The reviewer queue: parked records, oldest first.
#[utoipa::path(
    get, path = "/parked", tag = "parked", operation_id = "list_parked",
    params(ParkedListQuery),
    responses(
        (status = 200, description = "A page of records.", body = ParkedPage),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not a reviewer or admin.", body = ErrorBody),
        (status = 422, description = "A bad filter, limit or cursor.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn list_parked(
    State(t): State<Tollgate>,
    _who: Authorized<ReviewerOnly>,
    query: std::result::Result<Query<ParkedListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ParkedPage>> {
    let Query(q) = query.map_err(|e| Error::invalid("query", e.body_text()))?;
    for (field, v) in [("stage", &q.stage), ("state", &q.state)] {
        if v.as_deref() == Some("") {
            return Err(Error::invalid(field, "must not be empty"));
        }
    }
    let query = ParkedQuery::parse(&ParkedQueryText {
        stage: q.stage,
        state: q.state,
        model: q.model,
        min_age_s: q.min_age_s,
        cursor: q.cursor,
        limit: q.limit,
        sort: q.sort,
    })?;
    let page = t.parked_queue(&query).await?;
    let data = page
        .items
        .iter()
        .map(|(r, decisions)| ParkedObject::new(r, decisions, None))
        .collect();
    Ok(Json(ParkedPage {
        data,
        next_cursor: page.next,
    }))
}

/// A parked record with its evidence, the job's attempts and its decisions.
#[utoipa::path(
    get, path = "/parked/{id}", tag = "parked", operation_id = "get_parked",
    params(("id" = String, Path, format = Uuid, description = "The record's id.")),
    responses(
        (status = 200, description = "The record.", body = ParkedObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not a reviewer or admin.", body = ErrorBody),
        (status = 404, description = "No such record.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn get_parked(
    State(t): State<Tollgate>,
    _who: Authorized<ReviewerOnly>,
    Path(id): Path<String>,
) -> Result<Json<ParkedObject>> {
    let view = t.parked_view(parked_id(&id)?).await?;
    Ok(Json(ParkedObject::from(&view)))
}

/// A decision: the action, the evidence that supports it, and for
/// `reconcile` the provider job id, for `accept_failure` the accounting.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    pub action: ReviewAction,
    /// What the reviewer found (1 to 5,000 characters).
    #[schema(min_length = 1, max_length = 5000)]
    pub evidence: String,
    /// reconcile only: the provider job id the investigation found.
    #[schema(min_length = 1, max_length = 200, pattern = "^[!-~]+$")]
    pub provider_job_id: Option<String>,
    /// accept_failure only (required there): refund the credits.
    pub refund: Option<bool>,
    /// accept_failure only (required there): release the budget hold (the
    /// reviewer found nothing was spent) instead of keeping it booked.
    pub release_hold: Option<bool>,
}

/// A decision as answered: the decision, and the record as it stands now.
#[derive(Serialize, ToSchema)]
pub struct DecidedObject {
    #[serde(flatten)]
    pub decision: DecisionObject,
    pub record: ParkedObject,
}

/// Records a decision (rule 12): one transaction with everything it does.
///
/// The same decision again answers the first (200); a different decision on
/// a decided record is 409 `DECISION_CONFLICT`; an action the stage does not
/// permit is 422 `ACTION_NOT_ALLOWED`.
#[utoipa::path(
    post, path = "/parked/{id}/decisions", tag = "parked", operation_id = "decide",
    params(("id" = String, Path, format = Uuid, description = "The record's id.")),
    request_body = DecisionBody,
    responses(
        (status = 201, description = "Decided now.", body = DecidedObject,
            links(("DecidedRecord" = (operation_id = "get_parked", parameters(("id" = "$request.path.id")))))),
        (status = 200, description = "The same decision, made before: the first one.", body = DecidedObject),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not a reviewer or admin.", body = ErrorBody),
        (status = 404, description = "No such record.", body = ErrorBody),
        (status = 409, description = "Another decision stands, or the job moved on.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "No evidence, a field of another action, or an action the stage does not permit.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn decide(
    State(t): State<Tollgate>,
    who: Authorized<ReviewerOnly>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DecisionBody>,
) -> Result<(StatusCode, Json<DecidedObject>)> {
    let id = parked_id(&id)?;
    let (decision, created) = t
        .decide(
            who.user(),
            id,
            &DecisionRequest {
                action: body.action,
                evidence: body.evidence,
                provider_job_id: body.provider_job_id,
                refund: body.refund,
                release_hold: body.release_hold,
            },
        )
        .await?;
    let view = t.parked_view(id).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(DecidedObject {
            decision: DecisionObject::from(&decision),
            record: ParkedObject::from(&view),
        }),
    ))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteBody {
    /// 1 to 5,000 characters.
    #[schema(min_length = 1, max_length = 5000)]
    pub text: String,
}

/// Adds a note: evidence on the job's timeline, not a decision.
#[utoipa::path(
    post, path = "/parked/{id}/notes", tag = "parked", operation_id = "add_note",
    params(("id" = String, Path, format = Uuid, description = "The record's id.")),
    request_body = NoteBody,
    responses(
        (status = 201, description = "The note, as the timeline shows it.", body = EventObject),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 403, description = "Not a reviewer or admin.", body = ErrorBody),
        (status = 404, description = "No such record.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "An empty or overlong note.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn add_note(
    State(t): State<Tollgate>,
    who: Authorized<ReviewerOnly>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<NoteBody>,
) -> Result<(StatusCode, Json<EventObject>)> {
    let event = t
        .note_parked(who.user(), parked_id(&id)?, &body.text)
        .await?;
    Ok((StatusCode::CREATED, Json(EventObject::from(&event))))
}
