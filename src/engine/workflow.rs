//! A job's workflow: a fixed list of named steps per kind. Each step's
//! output is recorded (with the run's fencing token) when it completes; a
//! resumed run skips completed steps and reuses their outputs (rule 6).
//!
//! image edit: reserve, readiness, generate, store_output, review, settle
//! video:      reserve, generate, store_output, settle
//! then the terminal write (first terminal state wins; a failure refunds).

use crate::model::{JobKind, JobRequest};
use crate::providers::local;
use crate::providers::runner::{self, Generated};
use crate::storage::ObjectKey;
use crate::store::{Claim, NewParked, Outcome, StoreError, StoreResult};
use crate::Tollgate;
use chrono::Utc;
use serde_json::{json, Value};
use std::collections::HashMap;
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

/// What a step produced: an output to record, a reason the job fails, a
/// reason a person must decide, or (shutting down) nothing yet.
enum Step {
    Done(Value),
    Fail(Value),
    Park(NewParked),
    Release,
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
        match run_step(t, claim, step, &outputs, stopped.clone()).await? {
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
                // Nothing more will be spent: settle what the attempts
                // cost (zero when none was paid; the estimate stays booked
                // when one may have been paid without a price).
                let spent = runner::spend_of(&store.attempts(job.id).await?);
                store.settle(job.id, spent, Utc::now()).await?;
                return Ok(());
            }
            Step::Park(parked) => {
                // The hold stays until a person decides (rule 7).
                store
                    .park_claimed(job.id, claim.token, &parked, Utc::now())
                    .await?;
                return Ok(());
            }
            Step::Release => {
                store.release_claim(job.id, claim.token, Utc::now()).await?;
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

async fn run_step(
    t: &Tollgate,
    claim: &Claim,
    step: &str,
    outputs: &HashMap<String, Value>,
    stopped: watch::Receiver<bool>,
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
            let Some(photo) = t.asset_bytes(Some(edit.source)).await? else {
                return Ok(fail(
                    "SOURCE_MISSING",
                    "The uploaded photo could not be read.",
                ));
            };
            let mask = t.asset_bytes(edit.target.mask).await?;
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
        "generate" => Ok(match runner::generate(t, claim, stopped).await? {
            Generated::Stored(out) => Step::Done(out),
            Generated::Failed(error) => Step::Fail(error),
            Generated::Parked(p) => Step::Park(p),
            Generated::Released => Step::Release,
        }),
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
            let photo = t.asset_bytes(Some(edit.source)).await?;
            let mask = t.asset_bytes(edit.target.mask).await?;
            let out = t
                .object_bytes(outputs["store_output"]["key"].as_str().unwrap_or_default())
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
            let cost = runner::spend_of(&t.store().attempts(job.id).await?);
            t.store().settle(job.id, cost, Utc::now()).await?;
            Ok(Step::Done(
                json!({"usd": cost.unwrap_or(job.estimated_usd), "priced": cost.is_some()}),
            ))
        }
        other => Err(internal(format!("unknown step {other}"))),
    }
}
