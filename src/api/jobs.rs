//! `/v1/jobs`, `/v1/quote` and `/v1/catalogue`.

use super::ApiJson;
use crate::auth::{AnyUser, Authorized};
use crate::error::{Error, Result};
use crate::model::{JobId, JobKind, JobStatus, Strength, TargetKind, Usd, STYLES};
use crate::store::{Attempt, Job, JobEvent};
use crate::Tollgate;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The cost block of a job from its attempts: priced spend, and how many
/// attempts nobody could price (never counted as zero).
pub fn cost_json(attempts: &[Attempt]) -> Value {
    let priced = attempts
        .iter()
        .filter_map(|a| a.cost_usd)
        .fold(Usd::ZERO, |sum, c| sum.plus(c));
    let unpriced = attempts
        .iter()
        .filter(|a| a.cost_usd.is_none() && a.state != crate::model::AttemptState::Submitting)
        .count();
    json!({ "usd": priced, "unpriced_attempts": unpriced, "attempts": attempts.len() })
}

pub fn attempt_json(a: &Attempt) -> Value {
    json!({
        "provider": a.provider, "model": a.model, "attempt_no": a.attempt_no, "state": a.state,
        "provider_job_id": a.provider_job_id,
        "error_class": a.error_class, "error": a.error, "duration_ms": a.duration_ms, "usage": a.usage,
        "cost_usd": a.cost_usd, "cost_source": a.cost_source, "started_at": rfc3339(a.started_at),
    })
}

/// The job object of API.md, with its attempts' cost.
pub fn job_json_with(job: &Job, attempts: &[Attempt]) -> Value {
    let mut v = job_json(job);
    v["cost"] = cost_json(attempts);
    v
}

/// The job object of API.md.
pub fn job_json(job: &Job) -> Value {
    let lineage = match job.kind {
        JobKind::ImageEdit => json!({
            "root": job.id, "parent": null, "repairs_left": 2, "outcome": null, "retained_previous": false
        }),
        JobKind::Video => Value::Null,
    };
    json!({
        "id": job.id,
        "kind": job.kind,
        "status": job.status,
        "credits": job.credits,
        "estimated_usd": job.estimated_usd,
        "created_at": rfc3339(job.created_at),
        "completed_at": job.completed_at.map(rfc3339),
        "request": job.request,
        "output": match (&job.status, &job.output_content_type) {
            (JobStatus::Succeeded, Some(ct)) => json!({"url": format!("/v1/jobs/{}/output", job.id), "content_type": ct}),
            _ => Value::Null,
        },
        "error": job.error,
        "review": job.review,
        "lineage": lineage,
        "cost": null,
    })
}

pub fn event_json(e: &JobEvent) -> Value {
    json!({ "id": e.id, "kind": e.kind, "detail": e.detail, "at": rfc3339(e.created_at) })
}

fn job_id(raw: &str) -> Result<JobId> {
    raw.parse().map_err(|_| Error::NotFound("job"))
}

pub async fn submit(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response> {
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| Error::BadRequest {
            status: 400,
            code: "INVALID_IDEMPOTENCY_KEY",
            message: "Idempotency-Key must be 1 to 255 printable ASCII characters".into(),
        })?),
    };
    let submission = t.submit_job(who.user(), key, &body).await?;
    // A job made just now has no attempts; only a replay needs to look.
    let attempts = if submission.created {
        Vec::new()
    } else {
        t.store().attempts(submission.job.id).await?
    };
    let location = format!("/v1/jobs/{}", submission.job.id);
    let mut response = if submission.created {
        (
            StatusCode::CREATED,
            Json(job_json_with(&submission.job, &attempts)),
        )
            .into_response()
    } else {
        let mut r = (
            StatusCode::ACCEPTED,
            Json(job_json_with(&submission.job, &attempts)),
        )
            .into_response();
        r.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
        r
    };
    if let Ok(v) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    Ok(response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

pub async fn list(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    query: std::result::Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>> {
    let Query(q) = query.map_err(|e| Error::invalid("query", e.body_text()))?;
    let (jobs, next) = t
        .list_jobs(
            who.user(),
            q.status.as_deref(),
            q.limit,
            q.cursor.as_deref(),
            false,
        )
        .await?;
    // One query for the whole page's attempts, grouped here.
    let ids: Vec<_> = jobs.iter().map(|j| j.id).collect();
    let mut by_job: std::collections::HashMap<_, Vec<_>> = std::collections::HashMap::new();
    for a in t.store().attempts_of(&ids).await? {
        by_job.entry(a.job_id).or_default().push(a);
    }
    let data: Vec<Value> = jobs
        .iter()
        .map(|j| job_json_with(j, by_job.get(&j.id).map(Vec::as_slice).unwrap_or(&[])))
        .collect();
    Ok(Json(json!({
        "data": data,
        "has_more": next.is_some(),
        "next_cursor": next,
    })))
}

pub async fn show(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let job = t.visible_job(who.user(), job_id(&id)?).await?;
    let attempts = t.store().attempts(job.id).await?;
    Ok(Json(job_json_with(&job, &attempts)))
}

pub async fn attempts(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let job = t.visible_job(who.user(), job_id(&id)?).await?;
    let attempts = t.store().attempts(job.id).await?;
    Ok(Json(
        json!({ "data": attempts.iter().map(attempt_json).collect::<Vec<_>>() }),
    ))
}

/// The output's bytes, to the owner, reviewers and admins.
pub async fn output(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Response> {
    let (content_type, body) = t.job_output_content(who.user(), job_id(&id)?).await?;
    Ok(super::private_object(&content_type, body))
}

pub async fn events(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let events = t.job_events(who.user(), job_id(&id)?).await?;
    Ok(Json(
        json!({ "data": events.iter().map(event_json).collect::<Vec<_>>() }),
    ))
}

pub async fn cancel(
    State(t): State<Tollgate>,
    who: Authorized<AnyUser>,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let job = t.cancel_job(who.user(), job_id(&id)?).await?;
    let attempts = t.store().attempts(job.id).await?;
    Ok(Json(job_json_with(&job, &attempts)))
}

pub async fn quote(
    State(t): State<Tollgate>,
    _who: Authorized<AnyUser>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Json<Value>> {
    let (_, q) = t.price(&body)?;
    Ok(Json(
        json!({ "credits": q.credits, "estimated_usd": q.estimated_usd }),
    ))
}

pub async fn catalogue(State(t): State<Tollgate>, _who: Authorized<AnyUser>) -> Json<Value> {
    let c = t.catalogue();
    Json(json!({
        "targets": TargetKind::ALL.iter().map(|k| json!({"id": k.as_str(), "label": k.label()})).collect::<Vec<_>>(),
        "styles": STYLES,
        "strengths": Strength::ALL.iter().map(|s| json!({"id": s.as_str(), "label": s.label()})).collect::<Vec<_>>(),
        "credit_usd": c.credit_usd,
        "edit_model": c.edit_model,
        "video_models": c.video_models.iter().map(|m| json!({
            "id": m.id, "name": m.name, "durations_s": m.durations_s,
            "resolutions": m.resolutions(), "price": m.price,
        })).collect::<Vec<_>>(),
        "default_video_model": c.default_video_model,
    }))
}
