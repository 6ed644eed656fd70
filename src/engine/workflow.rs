//! A job's workflow: a fixed list of named steps per kind. Each step's
//! output is recorded (with the run's fencing token) when it completes; a
//! resumed run skips completed steps and reuses their outputs (rule 6).
//!
//! image edit: reserve, readiness, generate, store_output, review, settle
//! video:      reserve, generate, store_output, settle
//! then the terminal write (first terminal state wins; a failure refunds).

use crate::model::{JobKind, JobRequest, Usd};
use crate::providers::local;
use crate::storage::{NewObjectMeta, ObjectKey};
use crate::store::{AttemptOutcome, Claim, NewAttempt, Outcome, StoreError, StoreResult};
use crate::Tollgate;
use chrono::Utc;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Instant;
use tokio::sync::watch;

const IMAGE_EDIT: &[&str] = &[
    "reserve",
    "readiness",
    "generate",
    "store_output",
    "review",
    "settle",
];
const VIDEO: &[&str] = &["reserve", "generate", "store_output", "settle"];

/// What a step produced: an output to record, or a reason the job fails.
enum Step {
    Done(Value),
    Fail(Value),
}

fn fail(code: &str, message: impl Into<String>) -> Step {
    Step::Fail(json!({"code": code, "message": message.into()}))
}

fn internal(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

pub(super) async fn run(
    t: &Tollgate,
    claim: &Claim,
    stopped: &mut watch::Receiver<bool>,
) -> StoreResult<()> {
    let job = &claim.job;
    let store = t.store();
    let mut outputs: HashMap<String, Value> = store
        .steps(job.id)
        .await?
        .into_iter()
        .map(|s| (s.step, s.output))
        .collect();
    let steps = match job.kind {
        JobKind::ImageEdit => IMAGE_EDIT,
        JobKind::Video => VIDEO,
    };
    for step in steps {
        if outputs.contains_key(*step) {
            continue;
        }
        if *stopped.borrow() {
            // Shutting down: give the job back between steps.
            store.release_claim(job.id, claim.token, Utc::now()).await?;
            return Ok(());
        }
        match run_step(t, claim, step, &outputs).await? {
            Step::Done(out) => {
                store
                    .complete_step(job.id, claim.token, step, &out, Utc::now())
                    .await?;
                outputs.insert(step.to_string(), out);
            }
            Step::Fail(error) => {
                // The terminal write first: it names the token, so a stale
                // run stops here and cannot settle a hold its successor owns.
                store
                    .finish_claimed(
                        job.id,
                        claim.token,
                        &Outcome::Failed(error),
                        None,
                        None,
                        Utc::now(),
                    )
                    .await?;
                // Nothing more will be spent: release what is held at zero
                // unless a paid call happened (then its cost stands).
                let spent = outputs.get("generate").map(cost_of);
                store
                    .settle(job.id, spent.unwrap_or(Some(Usd::ZERO)), Utc::now())
                    .await?;
                return Ok(());
            }
        }
    }
    let stored = &outputs["store_output"];
    let key = stored["key"].as_str().unwrap_or_default().to_string();
    let content_type = stored["content_type"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    store
        .finish_claimed(
            job.id,
            claim.token,
            &Outcome::Succeeded,
            Some((&key, &content_type)),
            outputs.get("review"),
            Utc::now(),
        )
        .await?;
    Ok(())
}

fn cost_of(generate: &Value) -> Option<Usd> {
    generate["cost_usd"]
        .as_str()
        .and_then(|c| Usd::parse(c).ok())
}

async fn object_bytes(t: &Tollgate, key: &str) -> StoreResult<Option<Vec<u8>>> {
    let key = ObjectKey::parse(key).map_err(internal)?;
    match t.objects().get(&key).await.map_err(internal)? {
        Some(body) => Ok(Some(body.bytes().await.map_err(internal)?.to_vec())),
        None => Ok(None),
    }
}

async fn asset_bytes(t: &Tollgate, id: crate::model::AssetId) -> StoreResult<Option<Vec<u8>>> {
    match t.store().asset(id).await? {
        Some(a) => object_bytes(t, &a.object_key).await,
        None => Ok(None),
    }
}

async fn run_step(
    t: &Tollgate,
    claim: &Claim,
    step: &str,
    outputs: &HashMap<String, Value>,
) -> StoreResult<Step> {
    let job = &claim.job;
    match step {
        "reserve" => {
            let day = Utc::now().date_naive();
            let amount = job.estimated_usd;
            if t.store()
                .reserve(
                    job.id,
                    claim.token,
                    day,
                    t.config().daily_cap_usd,
                    amount,
                    Utc::now(),
                )
                .await?
            {
                Ok(Step::Done(json!({"day": day, "usd": amount})))
            } else {
                Ok(fail("SPENDING_PAUSED", "Spending is paused for today; your credits were refunded. Please try again later."))
            }
        }
        "readiness" => {
            let JobRequest::ImageEdit(edit) = &job.request else {
                return Ok(Step::Done(json!({})));
            };
            let Some(photo) = asset_bytes(t, edit.source).await? else {
                return Ok(fail(
                    "SOURCE_MISSING",
                    "The uploaded photo could not be read.",
                ));
            };
            let mask = match edit.target.mask {
                Some(m) => asset_bytes(t, m).await?,
                None => None,
            };
            let (kind, description) = (edit.target.kind, edit.target.description.clone());
            let checked = tokio::task::spawn_blocking(move || {
                let img = local::decode(&photo)?;
                let region = local::region(&img, kind, mask.as_deref())?;
                Ok::<_, String>(local::readiness(kind, &description, &region))
            })
            .await
            .map_err(internal)?;
            Ok(match checked {
                Ok(Ok(f)) => Step::Done(json!({"region_fraction": (f * 1000.0).round() / 1000.0})),
                Ok(Err(not_ready)) => Step::Fail(json!({
                    "code": "NOT_READY", "message": not_ready.message,
                    "questions": not_ready.questions.into_iter().take(3).collect::<Vec<_>>(),
                })),
                Err(e) => fail("NOT_READY", e),
            })
        }
        "generate" => generate(t, claim).await,
        "store_output" => {
            let generated = &outputs["generate"];
            let key = ObjectKey::parse(generated["key"].as_str().unwrap_or_default())
                .map_err(internal)?;
            match t.objects().head(&key).await.map_err(internal)? {
                Some(meta) if meta.written_by == format!("job:{}", job.id) => {
                    Ok(Step::Done(json!({
                        "key": key.as_str(), "content_type": meta.content_type, "bytes": meta.size,
                    })))
                }
                Some(_) => Ok(fail(
                    "OUTPUT_KEY_CONFLICT",
                    "Another job's output is stored where this one's belongs.",
                )),
                None => Ok(fail("OUTPUT_MISSING", "The output was not stored.")),
            }
        }
        "review" => {
            let JobRequest::ImageEdit(edit) = &job.request else {
                return Ok(Step::Done(json!({})));
            };
            let photo = asset_bytes(t, edit.source).await?;
            let mask = match edit.target.mask {
                Some(m) => asset_bytes(t, m).await?,
                None => None,
            };
            let out = object_bytes(
                t,
                outputs["store_output"]["key"].as_str().unwrap_or_default(),
            )
            .await?;
            let kind = edit.target.kind;
            let reviewed = tokio::task::spawn_blocking(move || {
                let photo = local::decode(&photo.ok_or("the photo is gone")?)?;
                let out = image::load_from_memory(&out.ok_or("the output is gone")?)
                    .map_err(|e| e.to_string())?
                    .to_rgb8();
                let region = local::region(&photo, kind, mask.as_deref())?;
                Ok::<_, String>(local::review(&photo, &out, &region))
            })
            .await
            .map_err(internal)?;
            // A reviewer that cannot run yields "not verified", never "passed".
            Ok(Step::Done(match reviewed {
                Ok(r) => json!({"verdict": r.verdict, "notes": r.notes}),
                Err(e) => json!({"verdict": "not_verified", "notes": e}),
            }))
        }
        "settle" => {
            let cost = cost_of(&outputs["generate"]);
            t.store().settle(job.id, cost, Utc::now()).await?;
            Ok(Step::Done(
                json!({"usd": cost.unwrap_or(job.estimated_usd), "priced": cost.is_some()}),
            ))
        }
        other => Err(internal(format!("unknown step {other}"))),
    }
}

/// Rule 8 then rule 7: an output already stored by this job means no new
/// call; another job's is a conflict. Otherwise the attempt is written down
/// before the (local) provider runs, and its outcome and cost after.
async fn generate(t: &Tollgate, claim: &Claim) -> StoreResult<Step> {
    let job = &claim.job;
    let (extension, content_type, model) = match &job.request {
        JobRequest::ImageEdit(_) => ("png", "image/png", t.catalogue().edit_model.id.clone()),
        JobRequest::Video(v) => ("gif", "image/gif", v.model.clone()),
    };
    let key = ObjectKey::parse(&format!("outputs/{}.{extension}", job.id)).map_err(internal)?;
    let written_by = format!("job:{}", job.id);
    let previous = t.store().attempts(job.id).await?;
    if let Some(meta) = t.objects().head(&key).await.map_err(internal)? {
        if meta.written_by != written_by {
            return Ok(fail(
                "OUTPUT_KEY_CONFLICT",
                "Another job's output is stored where this one's belongs.",
            ));
        }
        // The output exists, so the latest attempt did its work even if its
        // run died before saying so: record it (local work is priced from
        // the rate card) and make no new call (rule 8).
        let mut cost = previous
            .iter()
            .rev()
            .find(|a| a.state == "succeeded")
            .and_then(|a| a.cost_usd);
        if let Some(open) = previous.iter().rev().find(|a| a.state == "submitting") {
            let recovered = AttemptOutcome {
                state: "succeeded",
                provider_job_id: None,
                error_class: None,
                error: None,
                duration_ms: 0,
                usage: Some(json!({"recovered": true})),
                cost_usd: Some(job.estimated_usd),
                cost_source: Some("derived"),
                finished_at: Utc::now(),
            };
            t.store().end_attempt(open.id, &recovered).await?;
            cost = cost.or(Some(job.estimated_usd));
        }
        return Ok(Step::Done(
            json!({"key": key.as_str(), "content_type": content_type, "reused": true, "cost_usd": cost}),
        ));
    }
    // An attempt a dead run left `submitting` stays on record: the local
    // provider runs in-process, so it died with its run and cost nothing
    // outside; it is closed as interrupted (unpriced), never silently reused.
    for stale in previous.iter().filter(|a| a.state == "submitting") {
        let interrupted = AttemptOutcome {
            state: "failed",
            provider_job_id: None,
            error_class: Some("interrupted".into()),
            error: Some("the run that made this attempt stopped before it finished".into()),
            duration_ms: 0,
            usage: None,
            cost_usd: None,
            cost_source: None,
            finished_at: Utc::now(),
        };
        t.store().end_attempt(stale.id, &interrupted).await?;
    }
    let attempt_no = previous.len() as i32 + 1;
    let attempt = NewAttempt {
        id: uuid::Uuid::new_v4(),
        job_id: job.id,
        provider: "local".into(),
        model,
        attempt_no,
        idempotency_key: format!("{}:{attempt_no}", job.id),
        started_at: Utc::now(),
    };
    t.store().begin_attempt(&attempt, claim.token).await?;
    let started = Instant::now();
    let rendered = match job.request.clone() {
        JobRequest::ImageEdit(edit) => {
            let photo = asset_bytes(t, edit.source).await?;
            let mask = match edit.target.mask {
                Some(m) => asset_bytes(t, m).await?,
                None => None,
            };
            tokio::task::spawn_blocking(move || {
                let img = local::decode(&photo.ok_or("the photo is gone")?)?;
                let region = local::region(&img, edit.target.kind, mask.as_deref())?;
                local::encode_png(&local::render(&img, &region, &edit.style, edit.strength))
            })
            .await
            .map_err(internal)?
        }
        JobRequest::Video(v) => {
            tokio::task::spawn_blocking(move || local::clip(&v.prompt, v.duration_s, v.resolution))
                .await
                .map_err(internal)?
        }
    };
    let duration_ms = started.elapsed().as_millis() as i64;
    let bytes = match rendered {
        Ok(b) => b,
        Err(e) => {
            let outcome = AttemptOutcome {
                state: "failed",
                provider_job_id: None,
                error_class: Some("invalid_input".into()),
                error: Some(e.clone()),
                duration_ms,
                usage: None,
                cost_usd: None,
                cost_source: None,
                finished_at: Utc::now(),
            };
            t.store().end_attempt(attempt.id, &outcome).await?;
            return Ok(fail("GENERATION_FAILED", e));
        }
    };
    let size = bytes.len();
    let meta = NewObjectMeta {
        written_by: written_by.clone(),
        provider: Some("local".into()),
        content_type: content_type.into(),
    };
    match t
        .objects()
        .put_if_absent(&key, bytes.into(), &meta)
        .await
        .map_err(internal)?
    {
        crate::storage::PutOutcome::Created => {}
        crate::storage::PutOutcome::Exists(m) if m.written_by == written_by => {}
        crate::storage::PutOutcome::Exists(_) => {
            return Ok(fail(
                "OUTPUT_KEY_CONFLICT",
                "Another job's output is stored where this one's belongs.",
            ));
        }
    }
    // Local work is priced from the rate card: the job's estimate.
    let cost = job.estimated_usd;
    let outcome = AttemptOutcome {
        state: "succeeded",
        provider_job_id: None,
        error_class: None,
        error: None,
        duration_ms,
        usage: Some(json!({"bytes": size})),
        cost_usd: Some(cost),
        cost_source: Some("derived"),
        finished_at: Utc::now(),
    };
    t.store().end_attempt(attempt.id, &outcome).await?;
    Ok(Step::Done(
        json!({"key": key.as_str(), "content_type": content_type, "attempt": attempt_no, "cost_usd": cost}),
    ))
}
