//! A job's workflow: its kind's steps (`model::Step::of`), in order. A step
//! the progress records as done is skipped and its output reused (rule 6).
//! On the happy path a paid job commits three times: before the paid call
//! (its progress and the attempt, with its hold), when the provider accepts
//! it (its prediction id), and at the end (outcome and cost, output, review,
//! settlement and the terminal write, in one unit).

use super::run::Run;
use crate::model::{
    direction, Comparison, JobRequest, LineageEffect, Readiness, Review, Step, Verdict,
};
use crate::providers::local;
use crate::providers::runner::{self, Generated};
use crate::store::{Finish, NewParked, Op, StoreError, StoreResult};
use serde_json::{json, Value};

/// What comes after a step.
enum Next {
    Continue,
    Fail(Value),
    Park(NewParked),
    Release,
}

fn internal(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// Images this small (their encoded bytes) are checked on the run's own
/// thread: decoding them takes microseconds, less than handing them to the
/// blocking pool and back. Anything larger goes to the blocking pool.
const INLINE_BYTES_MAX: usize = 16 * 1024;

/// Runs CPU work on the blocking pool (holding one of the node's decode
/// slots, so large images are decoded a few at a time), or inline when its
/// input is tiny.
async fn on_cpu<T: Send + 'static>(
    t: &crate::Tollgate,
    input_bytes: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> StoreResult<T> {
    if input_bytes <= INLINE_BYTES_MAX {
        Ok(work())
    } else {
        let slot = t.decode_slot().await;
        tokio::task::spawn_blocking(move || {
            let out = work();
            drop(slot);
            out
        })
        .await
        .map_err(internal)
    }
}

pub(super) async fn run(run: &mut Run<'_>) -> StoreResult<()> {
    let repair = run.job().is_repair();
    for step in Step::of(run.job().kind, repair) {
        if step.is_done(&run.progress) {
            continue;
        }
        if run.stopping() {
            // Shutting down: give the job back between steps.
            run.commit(vec![Op::Release]).await?;
            return Ok(());
        }
        let next = match step {
            Step::Readiness => readiness(run).await?,
            Step::Generate => generate(run).await?,
            Step::Review => review(run).await?,
            Step::Compare => compare(run).await?,
        };
        match next {
            Next::Continue => {}
            Next::Fail(error) => {
                // The terminal write names the token: a stale run stops here.
                // It refunds, and settles every hold from what was recorded.
                run.commit(vec![Op::Finish(Finish::Failed(error))]).await?;
                return Ok(());
            }
            Next::Park(parked) => {
                // The holds stay until a person decides (rule 12).
                run.commit(vec![Op::Park(parked)]).await?;
                return Ok(());
            }
            Next::Release => {
                run.commit(vec![Op::Release]).await?;
                return Ok(());
            }
        }
    }
    let output = run
        .progress
        .output
        .clone()
        .ok_or_else(|| internal("the workflow ended without an output"))?;
    let review = run.progress.review.clone();
    // A repair's comparison decides its lineage in the same write.
    let lineage = repair.then(|| {
        run.progress
            .compare
            .as_ref()
            .map_or(LineageEffect::Keep, Comparison::effect)
    });
    run.commit(vec![Op::Finish(Finish::Succeeded {
        output_key: output.key,
        content_type: output.content_type,
        review,
        lineage,
    })])
    .await?;
    Ok(())
}

/// Rule 14's look before paying, on the CPU: is the target there, and is it
/// unambiguous. Recorded with the next durable write.
async fn readiness(run: &mut Run<'_>) -> StoreResult<Next> {
    let JobRequest::ImageEdit(edit) = &run.job().request else {
        return Ok(Next::Continue);
    };
    let Some(photo) = run.t.asset_bytes(Some(edit.source)).await? else {
        return Ok(Next::Fail(
            json!({"code": "SOURCE_MISSING", "message": "The uploaded photo could not be read."}),
        ));
    };
    let mask = run.t.asset_bytes(edit.target.mask).await?;
    let (kind, description) = (edit.target.kind, edit.target.description.clone());
    let size = photo.len() + mask.as_ref().map_or(0, Vec::len);
    let checked = on_cpu(run.t, size, move || {
        let img = local::decode(&photo)?;
        let region = local::region(&img, kind, mask.as_deref())?;
        Ok::<_, String>(local::readiness(
            kind,
            &description,
            &img,
            &region,
            mask.is_some(),
        ))
    })
    .await?;
    Ok(match checked {
        Ok(Ok(ready)) => {
            let fraction = (ready.fraction * 1000.0).round() / 1000.0;
            let observation = ready.observation;
            run.defer(step_event(
                Step::Readiness,
                json!({"region_fraction": fraction, "observation": observation}),
            ));
            run.record(|p| {
                p.readiness = Some(Readiness {
                    region_fraction: fraction,
                    observation: Some(observation),
                })
            });
            Next::Continue
        }
        Ok(Err(not_ready)) => Next::Fail(json!({
            "code": "NOT_READY", "message": not_ready.message,
            "questions": not_ready.questions.into_iter().take(3).collect::<Vec<_>>(),
        })),
        Err(e) => Next::Fail(json!({"code": "NOT_READY", "message": e})),
    })
}

/// The paid step: the attempt runner, then the output stored at the job's key.
async fn generate(run: &mut Run<'_>) -> StoreResult<Next> {
    Ok(match runner::generate(run).await? {
        Generated::Stored(out) => {
            let detail = json!({"key": out.key, "bytes": out.bytes, "attempt": out.attempt_no});
            run.record(|p| p.output = Some(out));
            run.defer(step_event(Step::Generate, detail));
            Next::Continue
        }
        Generated::Failed(error) => Next::Fail(error),
        Generated::Parked(p) => Next::Park(p),
        Generated::Released => Next::Release,
    })
}

/// The local review after the call. A reviewer that cannot run yields "not
/// verified", never "passed" (rule 14).
async fn review(run: &mut Run<'_>) -> StoreResult<Next> {
    let JobRequest::ImageEdit(edit) = &run.job().request else {
        return Ok(Next::Continue);
    };
    let photo = run.t.asset_bytes(Some(edit.source)).await?;
    let mask = run.t.asset_bytes(edit.target.mask).await?;
    let key = run.progress.output.as_ref().map(|o| o.key.clone());
    let out = match key {
        Some(k) => run.t.object_bytes(&k).await?,
        None => None,
    };
    let kind = edit.target.kind;
    let size = [&photo, &mask, &out]
        .iter()
        .map(|b| b.as_ref().map_or(0, Vec::len))
        .sum();
    let reviewed = on_cpu(run.t, size, move || {
        let photo = local::decode(&photo.ok_or("the photo is gone")?)?;
        let out = image::load_from_memory(&out.ok_or("the output is gone")?)
            .map_err(|e| e.to_string())?
            .to_rgb8();
        let region = local::region(&photo, kind, mask.as_deref())?;
        Ok::<_, String>(local::review(&photo, &out, &region))
    })
    .await?;
    let review = match reviewed {
        Ok(r) => Review {
            verdict: if r.verdict == "passed" {
                Verdict::Passed
            } else {
                Verdict::Issues
            },
            notes: r.notes,
        },
        Err(e) => Review {
            verdict: Verdict::NotVerified,
            notes: e,
        },
    };
    run.defer(step_event(
        Step::Review,
        json!({"verdict": review.verdict, "notes": review.notes}),
    ));
    run.record(|p| p.review = Some(review));
    Ok(Next::Continue)
}

/// A repair only: the candidate against the version the person has now.
/// A checker that cannot run keeps the previous version without stopping
/// repairs (outcome `None`): nobody showed either way (rule 14).
async fn compare(run: &mut Run<'_>) -> StoreResult<Next> {
    let JobRequest::ImageEdit(edit) = &run.job().request else {
        return Ok(Next::Continue);
    };
    let job = run.job();
    let against = match run.t.store().lineage(job.root()).await? {
        Some(l) => l.delivered,
        None => job.repair_of.unwrap_or(job.root()),
    };
    let instruction = job.instruction.clone().unwrap_or_default();
    let photo = run.t.asset_bytes(Some(edit.source)).await?;
    let mask = run.t.asset_bytes(edit.target.mask).await?;
    let previous = run.t.job_output_bytes(against).await?;
    let key = run.progress.output.as_ref().map(|o| o.key.clone());
    let candidate = match key {
        Some(k) => run.t.object_bytes(&k).await?,
        None => None,
    };
    let kind = edit.target.kind;
    let size = [&photo, &mask, &previous, &candidate]
        .iter()
        .map(|b| b.as_ref().map_or(0, Vec::len))
        .sum();
    let compared = on_cpu(run.t, size, move || {
        let photo = local::decode(&photo.ok_or("the photo is gone")?)?;
        let load = |b: Option<Vec<u8>>, what: &str| -> Result<image::RgbImage, String> {
            Ok(
                image::load_from_memory(&b.ok_or(format!("the {what} is gone"))?)
                    .map_err(|e| format!("cannot decode the {what}: {e}"))?
                    .to_rgb8(),
            )
        };
        let previous = load(previous, "previous version")?;
        let candidate = load(candidate, "candidate")?;
        let region = local::region(&photo, kind, mask.as_deref())?;
        Ok::<_, String>(local::compare(
            &photo,
            &region,
            &previous,
            &candidate,
            direction(&instruction),
        ))
    })
    .await?;
    let comparison = match compared {
        Ok((outcome, notes)) => Comparison {
            outcome: Some(outcome),
            against,
            notes,
        },
        Err(e) => Comparison {
            outcome: None,
            against,
            notes: format!("The comparison could not run: {e}"),
        },
    };
    run.defer(step_event(
        Step::Compare,
        json!({"outcome": comparison.outcome, "against": against, "notes": comparison.notes}),
    ));
    run.record(|p| p.compare = Some(comparison));
    Ok(Next::Continue)
}

fn step_event(step: Step, mut detail: Value) -> Op {
    detail["step"] = json!(step.as_str());
    Op::Event {
        kind: "step".into(),
        detail,
    }
}
