//! A job's workflow: its kind's steps (`model::Step::of`), in order. A step
//! the progress records as done is skipped and its output reused (rule 6).
//! On the happy path a paid job commits three times: before the paid call
//! (its progress and the attempt, with its hold), when the provider accepts
//! it (its prediction id), and at the end (outcome and cost, output, review,
//! settlement and the terminal write, in one unit).

use super::run::Run;
use super::runner::{self, Generated};
use crate::config::models::Checker;
use crate::model::{
    direction, Comparison, GeneratedNote, Happening, ImageEdit, JobId, JobRequest, LineageEffect,
    Readiness, Review, Step, StepDone, TargetKind, Verdict,
};
use crate::model::{AttemptEnd, AttemptId, FailureCode, JobFailure, Purpose};
use crate::providers::{checker, local};
use crate::store::{
    Applied, Attempt, Finish, Hold, NewAttempt, NewParked, Op, StoreError, StoreResult,
};
use chrono::Utc;
use serde_json::json;

/// What comes after a step.
enum Next {
    Continue,
    Fail(JobFailure),
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
pub(super) async fn on_cpu<T: Send + 'static>(
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
        // The steps that do not wait on a provider are boxed: a future is
        // as large as its largest state, and a run waiting in `generate`
        // (100,000 of them at once, issue 32) should not carry room for
        // the others.
        let next = match step {
            Step::Readiness => Box::pin(readiness(run)).await?,
            Step::Generate => generate(run).await?,
            Step::Review => Box::pin(review(run)).await?,
            Step::Compare => Box::pin(compare(run)).await?,
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
                tracing::warn!(job = %run.job().id, stage = parked.stage.as_str(), "job parked for a reviewer");
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
    let Some(photo) = run.asset_bytes(Some(edit.source)).await? else {
        return Ok(Next::Fail(JobFailure::new(
            FailureCode::SourceMissing,
            "The uploaded photo could not be read.",
        )));
    };
    let mask = run.asset_bytes(edit.target.mask).await?;
    run.keep_for_send(edit.source, &photo);
    if let (Some(id), Some(m)) = (edit.target.mask, &mask) {
        run.keep_for_send(id, m);
    }
    let (kind, description) = (edit.target.kind, edit.target.description.clone());
    if let Some(checker) = run.t.models().checker.clone() {
        let edit = edit.clone();
        return checked_readiness(run, &checker, &edit, photo, mask).await;
    }
    let size = photo.len() + mask.as_ref().map_or(0, Vec::len);
    let checked = on_cpu(run.t, size, move || {
        let looked = local::memo::looked(&photo, kind, &description, mask.as_deref())?;
        let target = looked.target.as_ref();
        Ok::<_, String>(
            target
                .map(|t| (t.fraction, t.observation.clone()))
                .map_err(Clone::clone),
        )
    })
    .await?;
    Ok(match checked {
        Ok(Ok((fraction, observation))) => {
            let fraction = (fraction * 1000.0).round() / 1000.0;
            record_readiness(run, fraction, observation);
            Next::Continue
        }
        Ok(Err(not_ready)) => Next::Fail(JobFailure::not_ready(
            not_ready.message,
            not_ready.questions,
        )),
        Err(e) => Next::Fail(JobFailure::new(FailureCode::NotReady, e)),
    })
}

/// The paid step: the attempt runner, then the output stored at the job's key.
async fn generate(run: &mut Run<'_>) -> StoreResult<Next> {
    Ok(match runner::generate(run).await? {
        Generated::Stored(out) => {
            let note = GeneratedNote {
                key: out.key.clone(),
                bytes: out.bytes,
                attempt: out.attempt_no,
            };
            run.record(|p| p.output = Some(out));
            run.defer(step_event(StepDone::Generate(note)));
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
    let photo = run.asset_bytes(Some(edit.source)).await?;
    let mask = run.asset_bytes(edit.target.mask).await?;
    let key = run.progress.output.as_ref().map(|o| o.key.clone());
    let out = match key {
        Some(k) => run.output_bytes(&k).await?,
        None => None,
    };
    let (kind, description) = (edit.target.kind, edit.target.description.clone());
    if let Some(checker) = run.t.models().checker.clone() {
        let edit = edit.clone();
        let review = checked_review(run, &checker, &edit, photo, mask, out).await?;
        run.defer(step_event(StepDone::Review(review.clone())));
        run.record(|p| p.review = Some(review));
        return Ok(Next::Continue);
    }
    let size = [&photo, &mask, &out]
        .iter()
        .map(|b| b.as_ref().map_or(0, Vec::len))
        .sum();
    let reviewed = on_cpu(run.t, size, move || {
        let photo = photo.ok_or("the photo is gone")?;
        let looked = local::memo::looked(&photo, kind, &description, mask.as_deref())?;
        // Decoded within the limits, and once: the check for a plainly
        // broken output decoded it a moment ago.
        let out = local::memo::decoded(&out.ok_or("the output is gone")?)?;
        Ok::<_, String>(local::review(&looked.photo, &out, &looked.region()?))
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
    run.defer(step_event(StepDone::Review(review.clone())));
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
    let photo = run.asset_bytes(Some(edit.source)).await?;
    let mask = run.asset_bytes(edit.target.mask).await?;
    let previous = run.t.job_output_bytes(against).await?;
    let key = run.progress.output.as_ref().map(|o| o.key.clone());
    let candidate = match key {
        Some(k) => run.output_bytes(&k).await?,
        None => None,
    };
    let (kind, description) = (edit.target.kind, edit.target.description.clone());
    if let Some(checker) = run.t.models().checker.clone() {
        let edit = edit.clone();
        let comparison = checked_compare(
            run,
            &checker,
            &edit,
            against,
            &instruction,
            photo,
            previous,
            candidate,
        )
        .await?;
        record_comparison(run, comparison);
        return Ok(Next::Continue);
    }
    let images = CompareImages {
        photo,
        mask,
        previous,
        candidate,
    };
    let comparison = compare_on_cpu(run, images, kind, description, instruction, against).await?;
    record_comparison(run, comparison);
    Ok(Next::Continue)
}

/// The stored bytes a comparison reads (each may be gone).
struct CompareImages {
    photo: Option<Vec<u8>>,
    mask: Option<Vec<u8>>,
    previous: Option<Vec<u8>>,
    candidate: Option<Vec<u8>>,
}

/// The local comparison, off the async threads: the candidate against
/// the previous version, inside the target's region only.
async fn compare_on_cpu(
    run: &Run<'_>,
    images: CompareImages,
    kind: TargetKind,
    description: String,
    instruction: String,
    against: JobId,
) -> StoreResult<Comparison> {
    let CompareImages {
        photo,
        mask,
        previous,
        candidate,
    } = images;
    let size = [&photo, &mask, &previous, &candidate]
        .iter()
        .map(|b| b.as_ref().map_or(0, Vec::len))
        .sum();
    let compared = on_cpu(run.t, size, move || {
        let photo = photo.ok_or("the photo is gone")?;
        let looked = local::memo::looked(&photo, kind, &description, mask.as_deref())?;
        let load = |b: Option<Vec<u8>>, what: &str| {
            local::memo::decoded(&b.ok_or(format!("the {what} is gone"))?)
                .map_err(|e| format!("cannot decode the {what}: {e}"))
        };
        let previous = load(previous, "previous version")?;
        let candidate = load(candidate, "candidate")?;
        Ok::<_, String>(local::compare(
            &looked.photo,
            &looked.region()?,
            &previous,
            &candidate,
            direction(&instruction),
        ))
    })
    .await?;
    Ok(match compared {
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
    })
}

/// The comparison on the timeline and in the job's progress.
fn record_comparison(run: &mut Run<'_>, comparison: Comparison) {
    run.defer(step_event(StepDone::Compare(comparison.clone())));
    run.record(|p| p.compare = Some(comparison));
}

const ROLE_ORIGINAL: &str =
    "original: the photo to edit, and the only authority on identity and the scene";
const ROLE_MASK: &str =
    "mask: its painted (non-transparent) pixels mark where pixels may change; nothing else may";

/// The person's request, as data for a checker (never as instructions).
fn request_data(edit: &ImageEdit) -> serde_json::Value {
    json!({
        "target_kind": edit.target.kind.as_str(),
        "target_description": edit.target.description,
        "style": edit.style,
        "strength": edit.strength.as_str(),
    })
}

/// Readiness by the configured checker. Not ready fails the job with its
/// questions (refunded; the expensive model is never called); a checker
/// that cannot answer fails it too, since nobody looked before paying.
async fn checked_readiness(
    run: &mut Run<'_>,
    checker: &Checker,
    edit: &ImageEdit,
    photo: Vec<u8>,
    mask: Option<Vec<u8>>,
) -> StoreResult<Next> {
    let mut images: Vec<(&str, &[u8])> = vec![(ROLE_ORIGINAL, &photo)];
    if let Some(m) = &mask {
        images.push((ROLE_MASK, m));
    }
    let asked = ask(
        run,
        checker,
        Purpose::Readiness,
        &images,
        request_data(edit),
    )
    .await?;
    let answer = match asked {
        Asked::Refused => {
            return Ok(Next::Fail(JobFailure::new(
                FailureCode::SpendingPaused,
                "Spending is paused for today, so the photo could not be checked; your credits were refunded. Please try again later.",
            )))
        }
        Asked::Answered(a) => a.and_then(|out| checker::readiness(&out)),
    };
    Ok(match answer {
        Ok(a) if a.ready => {
            let (kind, description) = (edit.target.kind, edit.target.description.clone());
            let size = photo.len() + mask.as_ref().map_or(0, Vec::len);
            let fraction = on_cpu(run.t, size, move || {
                let looked = local::memo::looked(&photo, kind, &description, mask.as_deref())?;
                Ok::<_, String>(local::fraction(&looked.region()?))
            })
            .await?
            .unwrap_or(0.0);
            let fraction = (fraction * 1000.0).round() / 1000.0;
            record_readiness(run, fraction, a.observation);
            Next::Continue
        }
        Ok(a) => Next::Fail(JobFailure::not_ready(a.observation, a.questions)),
        Err(e) => Next::Fail(JobFailure::new(
            FailureCode::CheckUnavailable,
            format!("The photo could not be checked before paying, so nothing was sent; your credits were refunded. ({e})"),
        )),
    })
}

/// Review by the configured checker: a checker that is down or answers
/// nonsense yields "not verified", never "passed".
async fn checked_review(
    run: &mut Run<'_>,
    checker: &Checker,
    edit: &ImageEdit,
    photo: Option<Vec<u8>>,
    mask: Option<Vec<u8>>,
    out: Option<Vec<u8>>,
) -> StoreResult<Review> {
    let not_verified = |notes: String| Review {
        verdict: Verdict::NotVerified,
        notes,
    };
    let (Some(photo), Some(out)) = (photo, out) else {
        return Ok(not_verified("the photo or the output is gone".into()));
    };
    let mut images: Vec<(&str, &[u8])> = vec![(ROLE_ORIGINAL, &photo)];
    if let Some(m) = &mask {
        images.push((ROLE_MASK, m));
    }
    images.push(("result: the edit to review", &out));
    Ok(
        match ask(run, checker, Purpose::Review, &images, request_data(edit)).await? {
            Asked::Refused => {
                not_verified("spending is paused for today, so the result was not reviewed".into())
            }
            Asked::Answered(a) => match a.and_then(|out| checker::review(&out)) {
                Ok(r) => Review {
                    verdict: match r.verdict {
                        checker::CheckedVerdict::Passed => Verdict::Passed,
                        checker::CheckedVerdict::Issues => Verdict::Issues,
                    },
                    notes: r.notes,
                },
                Err(e) => not_verified(e),
            },
        },
    )
}

/// The comparison by the configured checker; one that cannot answer keeps
/// the previous version without stopping repairs.
#[allow(clippy::too_many_arguments)]
async fn checked_compare(
    run: &mut Run<'_>,
    checker: &Checker,
    edit: &ImageEdit,
    against: crate::model::JobId,
    instruction: &str,
    photo: Option<Vec<u8>>,
    previous: Option<Vec<u8>>,
    candidate: Option<Vec<u8>>,
) -> StoreResult<Comparison> {
    let unknown = |notes: String| Comparison {
        outcome: None,
        against,
        notes,
    };
    let (Some(photo), Some(previous), Some(candidate)) = (photo, previous, candidate) else {
        return Ok(unknown("an image to compare is gone".into()));
    };
    let images: Vec<(&str, &[u8])> = vec![
        (ROLE_ORIGINAL, &photo),
        ("current: the version the person has now", &previous),
        (
            "candidate: the repair, made from the current version",
            &candidate,
        ),
    ];
    let mut data = request_data(edit);
    data["repair_instruction"] = json!(instruction);
    Ok(
        match ask(run, checker, Purpose::Compare, &images, data).await? {
            Asked::Refused => {
                unknown("spending is paused for today, so the repair was not compared".into())
            }
            Asked::Answered(a) => match a.and_then(|out| checker::compare(&out)) {
                Ok(c) => Comparison {
                    outcome: Some(c.outcome),
                    against,
                    notes: c.notes,
                },
                Err(e) => unknown(format!("The comparison could not run: {e}")),
            },
        },
    )
}

/// What asking the configured checker came to.
enum Asked {
    /// The day cannot hold the check's price (rule 11): nothing was sent.
    Refused,
    /// The checker's output, or why there is none.
    Answered(Result<serde_json::Value, String>),
}

/// Rule 14's checker call, as an attempt like any other (rule 7): written
/// with its hold before it is sent, ended with its cost after (with the
/// next commit). Its failures are answers (`Err`), never a pass.
async fn ask(
    run: &mut Run<'_>,
    checker: &Checker,
    purpose: Purpose,
    images: &[(&str, &[u8])],
    data: serde_json::Value,
) -> StoreResult<Asked> {
    let job = run.job().clone();
    let attempts = run.t.store().attempts(job.id).await?;
    // Rule 7: a check a run that died left open is asked again under its
    // own key (an idempotent checker answers it without charging twice),
    // never as a new call; its hold is already booked.
    let open = attempts
        .iter()
        .find(|a| a.purpose == purpose && a.model == checker.spec.id && a.state.is_open());
    let (attempt, key) = match open {
        Some(a) => (a.id, a.idempotency_key.clone()),
        None => match begin_check(run, checker, purpose, &attempts).await? {
            Some(begun) => begun,
            None => return Ok(Asked::Refused),
        },
    };
    let input = checker::input(purpose, images, data);
    let started = std::time::Instant::now();
    let answer = run
        .t
        .http_provider()
        .check(&checker.spec, &input, &key)
        .await;
    let ms = started.elapsed().as_millis() as i64;
    let (outcome, answer) = match answer {
        Ok((output, cost)) => (
            runner::ended(AttemptEnd::Succeeded, None, "", cost, ms),
            Ok(output),
        ),
        Err(e) => (
            runner::ended(AttemptEnd::Failed, Some(e.class), &e.message, e.cost, ms),
            Err(format!("the checker could not answer: {}", e.message)),
        ),
    };
    run.defer(Op::EndAttempt { attempt, outcome });
    Ok(Asked::Answered(answer))
}

/// A new checker call, written down (and its hold booked) before it is
/// made (rules 7 and 11); none when the day cannot hold it.
async fn begin_check(
    run: &mut Run<'_>,
    checker: &Checker,
    purpose: Purpose,
    attempts: &[Attempt],
) -> StoreResult<Option<(AttemptId, String)>> {
    let job = run.job().id;
    // Numbered after every attempt the job has, whichever run made it.
    let known = attempts.iter().map(|a| a.attempt_no).max().unwrap_or(0);
    let attempt_no = known.max(run.attempt_floor) + 1;
    run.attempt_floor = attempt_no;
    let new = NewAttempt {
        id: AttemptId::new(),
        job_id: job,
        purpose,
        provider: checker.spec.provider_name().into(),
        endpoint: checker.spec.endpoint.clone(),
        model: checker.spec.id.clone(),
        attempt_no,
        idempotency_key: format!("{job}:{attempt_no}"),
        hold: Some(Hold {
            day: Utc::now().date_naive(),
            amount: checker.price,
            default_cap: run.t.config().daily_cap_usd,
        }),
        started_at: Utc::now(),
    };
    let begun = (new.id, new.idempotency_key.clone());
    if let Applied::Refused = run.commit(vec![Op::BeginAttempt(new)]).await? {
        return Ok(None);
    }
    Ok(Some(begun))
}

fn step_event(done: StepDone) -> Op {
    Op::Event(Happening::Step(done))
}

/// The readiness step's finding, on the timeline and in the job's progress.
fn record_readiness(run: &mut Run<'_>, fraction: f64, observation: String) {
    let readiness = Readiness {
        region_fraction: fraction,
        observation: Some(observation),
    };
    run.defer(step_event(StepDone::Readiness(readiness.clone())));
    run.record(|p| p.readiness = Some(readiness));
}
