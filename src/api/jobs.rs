//! `/v1/jobs`, `/v1/quote` and `/v1/catalogue`: each handler and its
//! OpenAPI operation in one place.

use super::ApiJson;
use crate::model::{
    JobId, JobStatus, RawImageEdit, RawVideo, Resolution, Strength, TargetKind, Usd, STYLES,
};
use crate::usecases::auth::{AnyUser, Authorized};
use crate::usecases::error::{Error, Result};
use crate::usecases::jobs::{JobQuery, JobView};
use crate::wire::{
    AttemptList, AttemptObject, ErrorBody, EventList, EventObject, JobObject, JobPage, QuoteObject,
};
use crate::Tollgate;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<Tollgate> {
    OpenApiRouter::new()
        .routes(routes!(submit_job, list_jobs))
        .routes(routes!(get_job))
        .routes(routes!(list_attempts))
        .routes(routes!(list_events))
        .routes(routes!(get_output))
        .routes(routes!(cancel_job))
        .routes(routes!(submit_repair))
        .routes(routes!(get_lineage))
        .routes(routes!(quote))
        .routes(routes!(catalogue))
}

/// A job request: an image edit or a video (`kind` says which).
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum JobRequestBody {
    ImageEdit(RawImageEdit),
    Video(RawVideo),
}

fn job_id(raw: &str) -> Result<JobId> {
    raw.parse().map_err(|_| Error::NotFound("job"))
}

/// The job object of a view: the one shape `/v1` answers with.
pub(super) fn object(v: &JobView) -> JobObject {
    JobObject::new(&v.job, &v.attempts, v.lineage.as_ref())
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>> {
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => Ok(Some(v.to_str().map_err(|_| Error::BadRequest {
            status: 400,
            code: "INVALID_IDEMPOTENCY_KEY",
            message: "Idempotency-Key must be 1 to 255 printable ASCII characters".into(),
        })?)),
    }
}

/// 201 with `Location` for a new job, 202 with `Idempotent-Replayed` for
/// the one made earlier under the key.
async fn submitted(
    t: &Tollgate,
    submission: crate::usecases::jobs::Submission,
) -> Result<Response> {
    let id = submission.job.id;
    let created = submission.created;
    let object = object(&t.submission_view(submission).await?);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::ACCEPTED
    };
    let mut response = (status, Json(object)).into_response();
    if !created {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    if let Ok(v) = HeaderValue::from_str(&format!("/v1/jobs/{id}")) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    Ok(response)
}

/// `Idempotency-Key`: required on every paid request; one key and one body
/// make one job.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
struct IdempotencyKeyHeader {
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = "^[ -~]+$"
    )]
    idempotency_key: String,
}

/// Submits a job: one key and one body make one job, charged once.
///
/// The job and its charge are one transaction: too few credits make no job
/// (402). The same key with the same body answers the first job (202, with
/// `Idempotent-Replayed: true`); the same key with another body is 409. Keys
/// are kept for seven days.
#[utoipa::path(
    post, path = "/jobs", tag = "jobs", operation_id = "submit_job",
    params(IdempotencyKeyHeader),
    request_body(content = JobRequestBody, description = "The request; see GET /v1/catalogue for styles and models."),
    responses(
        (status = 201, description = "A new job, charged.", body = JobObject,
            headers(("Location" = String, description = "/v1/jobs/{id}")),
            links(
                ("GetJob" = (operation_id = "get_job", parameters(("id" = "$response.body#/id")))),
                ("JobAttempts" = (operation_id = "list_attempts", parameters(("id" = "$response.body#/id")))),
                ("JobEvents" = (operation_id = "list_events", parameters(("id" = "$response.body#/id")))),
                ("JobOutput" = (operation_id = "get_output", parameters(("id" = "$response.body#/id")))),
                ("CancelJob" = (operation_id = "cancel_job", parameters(("id" = "$response.body#/id")))),
            )),
        (status = 202, description = "The job made earlier under this key and body.", body = JobObject,
            headers(("Idempotent-Replayed" = String, description = "true"), ("Location" = String))),
        (status = 400, description = "No Idempotency-Key, or one that is not 1 to 255 printable ASCII characters; malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 402, description = "Too few credits: no job is made.", body = ErrorBody),
        (status = 409, description = "This key was used with another body.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "Invalid fields (details name them).", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: the caller's paid requests came faster than its rate, or their work today already cost their share of the day's cap (TOLLGATE_USER_SHARE_PERCENT); nothing is charged. Retry after the header's seconds.", body = ErrorBody,
            headers(("Retry-After" = String, description = "seconds until the next paid request is accepted"))),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn submit_job(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response> {
    let submission = t
        .submit_job(who.user(), who.0.token(), idempotency_key(&headers)?, &body)
        .await?;
    submitted(&t, submission).await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only jobs in this state.
    #[param(value_type = Option<JobStatus>)]
    status: Option<String>,
    /// Jobs a page (1 to 100; 20 when absent).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
    /// `next_cursor` of the previous page.
    #[param(max_length = 200)]
    cursor: Option<String>,
}

/// The caller's jobs, newest first.
#[utoipa::path(
    get, path = "/jobs", tag = "jobs", operation_id = "list_jobs",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of jobs.", body = JobPage),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 422, description = "A bad status, limit or cursor.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn list_jobs(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    query: std::result::Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobPage>> {
    let Query(q) = query.map_err(|e| Error::invalid("query", e.body_text()))?;
    let query = JobQuery::parse(q.status.as_deref(), q.limit, q.cursor.as_deref())?;
    let page = t.list_jobs(who.user(), &query).await?;
    let data = t.job_views(page.items).await?.iter().map(object).collect();
    let next = page.next;
    Ok(Json(JobPage {
        data,
        has_more: next.is_some(),
        next_cursor: next,
    }))
}

/// A job: its owner's, or any job for reviewers and admins (404 otherwise).
#[utoipa::path(
    get, path = "/jobs/{id}", tag = "jobs", operation_id = "get_job",
    params(("id" = JobId, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job.", body = JobObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such job of yours.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn get_job(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<JobObject>> {
    Ok(Json(object(&t.job_view(who.user(), job_id(&id)?).await?)))
}

/// Every provider call of a job, failed ones included; a cost is null when
/// nobody could price the call.
#[utoipa::path(
    get, path = "/jobs/{id}/attempts", tag = "jobs", operation_id = "list_attempts",
    params(("id" = JobId, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The attempts, oldest first.", body = AttemptList),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such job of yours.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn list_attempts(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<AttemptList>> {
    let attempts = t.job_attempts(who.user(), job_id(&id)?).await?;
    Ok(Json(AttemptList {
        data: attempts.iter().map(AttemptObject::from).collect(),
    }))
}

/// The job's output bytes, to the owner, reviewers and admins.
#[utoipa::path(
    get, path = "/jobs/{id}/output", tag = "jobs", operation_id = "get_output",
    params(("id" = JobId, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The output.", content(
            (Vec<u8> = "image/png"), (Vec<u8> = "image/jpeg"), (Vec<u8> = "image/webp"), (Vec<u8> = "image/gif"))),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such job of yours, or it has no output yet.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn get_output(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Response> {
    let id = job_id(&id)?;
    let (content_type, body) = t.job_output_content(who.user(), id).await?;
    Ok(super::private_object(
        &content_type,
        &format!("tollgate-{id}"),
        body,
    ))
}

/// The job's timeline, oldest first.
#[utoipa::path(
    get, path = "/jobs/{id}/events", tag = "jobs", operation_id = "list_events",
    params(("id" = JobId, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The timeline.", body = EventList),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such job of yours.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn list_events(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<EventList>> {
    let events = t.job_events(who.user(), job_id(&id)?).await?;
    Ok(Json(EventList {
        data: events.iter().map(EventObject::from).collect(),
    }))
}

/// Cancels a job that has not finished, and refunds it once; answers the
/// job as stored either way.
#[utoipa::path(
    post, path = "/jobs/{id}/cancel", tag = "jobs", operation_id = "cancel_job",
    params(("id" = JobId, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job as stored.", body = JobObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such job of yours.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn cancel_job(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<JobObject>> {
    let job = t.cancel_job(who.user(), job_id(&id)?).await?;
    Ok(Json(object(&t.view_of(job).await?)))
}

/// A repair: `{"instruction"}` and nothing else.
#[derive(Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct RepairBody {
    /// What to change about the version you have now (1 to 500 characters).
    #[schema(min_length = 1, max_length = 500)]
    instruction: String,
}

/// Asks for a repair of an edit that succeeded: a new instruction, the
/// same settings, charged like its parent and refunded if it fails.
///
/// The repair is made on the lineage's delivered version and compared with
/// it: `improved` delivers the candidate; `unchanged` or `worse` keeps the
/// previous version (`lineage.retained_previous`, the candidate at
/// `lineage.candidate_url`) and stops repairs on that lineage. Two repairs
/// per lineage at most. The same key with the same instruction answers the
/// first repair (202).
#[utoipa::path(
    post, path = "/jobs/{id}/repairs", tag = "jobs", operation_id = "submit_repair",
    params(("id" = JobId, Path, description = "Any version of the lineage to repair."), IdempotencyKeyHeader),
    request_body(content = RepairBody),
    responses(
        (status = 201, description = "The repair, charged.", body = JobObject,
            headers(("Location" = String, description = "/v1/jobs/{id}")),
            links(
                ("GetJob" = (operation_id = "get_job", parameters(("id" = "$response.body#/id")))),
                ("GetLineage" = (operation_id = "get_lineage", parameters(("id" = "$response.body#/id")))),
            )),
        (status = 202, description = "The repair made earlier under this key and instruction.", body = JobObject,
            headers(("Idempotent-Replayed" = String, description = "true"), ("Location" = String))),
        (status = 400, description = "No Idempotency-Key, or a bad one; malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 402, description = "Too few credits: no repair is made.", body = ErrorBody),
        (status = 404, description = "No such job of yours (only the edit's owner repairs it).", body = ErrorBody),
        (status = 409, description = "REPAIR_LIMIT_REACHED, REPAIRS_STOPPED, or the key was used with another body.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "The job did not succeed, is not an image edit, or the body has a field but `instruction`.", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: the caller's paid requests came faster than its rate, or their work today already cost their share of the day's cap (TOLLGATE_USER_SHARE_PERCENT); nothing is charged.", body = ErrorBody,
            headers(("Retry-After" = String, description = "seconds until the next paid request is accepted"))),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn submit_repair(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response> {
    let id = job_id(&id)?;
    let submission = t
        .submit_repair(
            who.user(),
            who.0.token(),
            id,
            idempotency_key(&headers)?,
            &body,
        )
        .await?;
    submitted(&t, submission).await
}

/// One version of a lineage.
#[derive(Serialize, ToSchema)]
pub struct LineageVersion {
    pub job: JobObject,
    /// The repair's instruction; null for the original.
    pub instruction: Option<String>,
}

/// Every version of an edit's lineage, oldest first.
#[derive(Serialize, ToSchema)]
pub struct LineageObject {
    pub root: JobId,
    /// The version whose output the person has now.
    pub delivered: JobId,
    pub repairs_left: u32,
    pub versions: Vec<LineageVersion>,
}

/// The lineage of an image edit: the original and its repairs, oldest
/// first, and which version is delivered.
#[utoipa::path(
    get, path = "/jobs/{id}/lineage", tag = "jobs", operation_id = "get_lineage",
    params(("id" = JobId, Path, description = "Any version of the lineage.")),
    responses(
        (status = 200, description = "The lineage.", body = LineageObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 404, description = "No such job of yours.", body = ErrorBody),
        (status = 422, description = "A video has no lineage.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn get_lineage(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<LineageObject>> {
    let (state, versions) = t.lineage(who.user(), job_id(&id)?).await?;
    let versions = t.job_views(versions).await?;
    Ok(Json(LineageObject {
        root: state.root,
        delivered: state.delivered,
        repairs_left: state.repairs_left(),
        versions: versions
            .iter()
            .map(|v| LineageVersion {
                job: object(v),
                instruction: v.job.instruction.clone(),
            })
            .collect(),
    }))
}

/// What a request would cost, by the same `quote()` that charges; charges
/// nothing.
#[utoipa::path(
    post, path = "/quote", tag = "jobs", operation_id = "quote",
    request_body(content = JobRequestBody),
    responses(
        (status = 200, description = "The price.", body = QuoteObject),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
        (status = 413, description = "The body is too large.", body = ErrorBody),
        (status = 415, description = "Not JSON.", body = ErrorBody),
        (status = 422, description = "Invalid fields (details name them).", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn quote(
    State(t): State<Tollgate>,
    _who: Authorized<AnyUser>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Json<QuoteObject>> {
    let (_, q) = t.price(&body)?;
    Ok(Json(QuoteObject {
        credits: q.credits,
        estimated_usd: q.estimated_usd,
    }))
}

#[derive(Serialize, ToSchema)]
pub struct Choice {
    pub id: String,
    pub label: String,
}

#[derive(Serialize, ToSchema)]
pub struct StyleObject {
    pub id: String,
    pub name: String,
    pub description: String,
    /// Three colours (CSS hex) that show the medium.
    pub swatch: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub struct EditModelObject {
    pub id: String,
    pub name: String,
    pub per_generation: Usd,
}

#[derive(Serialize, ToSchema)]
pub struct VideoModelObject {
    pub id: String,
    pub name: String,
    pub durations_s: Vec<u32>,
    pub resolutions: Vec<Resolution>,
    /// `{"per_second": {"720p": "0.05"}}` or `{"per_generation": {...}}`.
    pub price: crate::model::VideoPrice,
}

/// What can be ordered and what it costs.
#[derive(Serialize, ToSchema)]
pub struct CatalogueObject {
    pub targets: Vec<Choice>,
    pub styles: Vec<StyleObject>,
    pub strengths: Vec<Choice>,
    /// What one credit is worth.
    pub credit_usd: Usd,
    pub edit_model: EditModelObject,
    pub video_models: Vec<VideoModelObject>,
    pub default_video_model: String,
}

/// Targets, the fifteen media, strengths, and the models with their prices.
#[utoipa::path(
    get, path = "/catalogue", tag = "jobs", operation_id = "catalogue",
    responses(
        (status = 200, description = "The catalogue.", body = CatalogueObject),
        (status = 401, description = "No valid token or session.", body = ErrorBody),
    ),
    security(("bearer_token" = []), ("session_cookie" = []))
)]
async fn catalogue(State(t): State<Tollgate>, _who: Authorized<AnyUser>) -> Json<CatalogueObject> {
    let c = t.catalogue();
    Json(CatalogueObject {
        targets: TargetKind::ALL
            .iter()
            .map(|k| Choice {
                id: k.as_str().into(),
                label: k.label().into(),
            })
            .collect(),
        styles: STYLES
            .iter()
            .map(|s| StyleObject {
                id: s.id.into(),
                name: s.name.into(),
                description: s.description.into(),
                swatch: s.swatch.iter().map(|c| c.to_string()).collect(),
            })
            .collect(),
        strengths: Strength::ALL
            .iter()
            .map(|s| Choice {
                id: s.as_str().into(),
                label: s.label().into(),
            })
            .collect(),
        credit_usd: c.credit_usd,
        edit_model: EditModelObject {
            id: c.edit_model.id.clone(),
            name: c.edit_model.name.clone(),
            per_generation: c.edit_model.per_generation,
        },
        video_models: c
            .video_models
            .iter()
            .map(|m| VideoModelObject {
                id: m.id.clone(),
                name: m.name.clone(),
                durations_s: m.durations_s.clone(),
                resolutions: m.resolutions(),
                price: m.price.clone(),
            })
            .collect(),
        default_video_model: c.default_video_model.clone(),
    })
}
