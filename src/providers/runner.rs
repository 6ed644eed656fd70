//! The attempt runner: the `generate` step of a job. It owns retries and
//! fallback (DESIGN.md, Providers) and the uncertainty window (rule 7):
//!
//! - every attempt is written down (`submitting`, key `<job>:<n>`) before
//!   the request leaves, then its provider job id, then its outcome;
//! - an attempt a run left open is recovered, never silently re-sent: an
//!   accepted one is polled by its id; a `submitting` one is re-sent under
//!   the same key where the model declares idempotency, looked up by key
//!   where it declares lookup, and otherwise parked (or, where the model's
//!   policy says `refund`, failed and refunded);
//! - authentication, invalid input and cancellation stop the chain; rate
//!   limits and timeouts back off (honouring `Retry-After`) and retry the
//!   same model; a refusal or failure uses the same model's remaining
//!   attempts, unless the prediction ran past the model's window; the chain
//!   moves to the next model only where the policy allows it for that reason.
//!
//! The output goes to the job's one key, put-if-absent (rule 8).

use super::config::{FallbackReason, ModelSpec, OnUncertain, ProviderKind};
use super::{Cost, ErrorClass, Finished, Input, Poll, Provider, ProviderError, Submission};
use crate::model::{JobKind, JobRequest, Usd};
use crate::storage::{NewObjectMeta, ObjectKey, PutOutcome};
use crate::store::{
    Attempt, AttemptOutcome, Claim, NewAttempt, NewParked, ParkedStage, StoreError, StoreResult,
};
use crate::Tollgate;
use backon::BackoffBuilder;
use chrono::Utc;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Re-sends (same key) or look-ups tried before an uncertain attempt parks.
const RECOVERY_TRIES: usize = 3;
/// Output downloads tried before the job parks in `delivery_exhausted`.
const DELIVERY_TRIES: usize = 3;

/// How the generate step ended.
pub enum Generated {
    /// The output is stored at the job's key.
    Stored(Value),
    /// The job fails (and is refunded): `{"code", "message"}`.
    Failed(Value),
    /// A person must decide; the budget hold stays.
    Parked(NewParked),
    /// This node is shutting down: give the job back; an accepted attempt
    /// stays on record and the next run polls it.
    Released,
}

/// What one attempt came to.
enum Attempted {
    Succeeded(Finished),
    Failed(ProviderError),
    Parked(NewParked),
    /// Recorded as uncertain; the model's policy is to refund.
    UncertainRefund(String),
    Released,
}

/// What the job's attempts cost, as far as anyone knows: the sum of the
/// priced ones, or `None` when any attempt may have been paid without a
/// price (then the estimate stays booked). Attempts a dead local run left
/// (`interrupted`) cost nothing outside.
pub fn spend_of(attempts: &[Attempt]) -> Option<Usd> {
    let mut sum = Usd::ZERO;
    for a in attempts {
        match a.cost_usd {
            Some(c) => sum = sum.plus(c),
            None if a.error_class.as_deref() == Some("interrupted") => {}
            None => return None,
        }
    }
    Some(sum)
}

pub fn output_key(job: crate::model::JobId) -> StoreResult<ObjectKey> {
    ObjectKey::parse(&format!("outputs/{job}")).map_err(internal)
}

fn internal(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn failure(code: &str, message: impl Into<String>) -> Generated {
    Generated::Failed(json!({"code": code, "message": message.into()}))
}

struct Run<'a> {
    t: &'a Tollgate,
    claim: &'a Claim,
    stopped: watch::Receiver<bool>,
    key: ObjectKey,
    written_by: String,
}

pub async fn generate(
    t: &Tollgate,
    claim: &Claim,
    stopped: watch::Receiver<bool>,
) -> StoreResult<Generated> {
    let job = &claim.job;
    let mut run = Run {
        t,
        claim,
        stopped,
        key: output_key(job.id)?,
        written_by: format!("job:{}", job.id),
    };
    let first = match &job.request {
        JobRequest::ImageEdit(_) => t.models().default_for(JobKind::ImageEdit).id.clone(),
        JobRequest::Video(v) => v.model.clone(),
    };
    let chain: Vec<ModelSpec> = t.models().chain(&first).into_iter().cloned().collect();
    if chain.is_empty() {
        return Ok(failure(
            "MODEL_UNAVAILABLE",
            format!("The model {first:?} is no longer offered; your credits were refunded."),
        ));
    }
    let previous = t.store().attempts(job.id).await?;

    // Rule 8: an output this job already stored means no new call.
    if let Some(done) = run.existing_output(&previous).await? {
        return Ok(done);
    }
    // A finished attempt whose output never reached storage: fetch it again.
    if let Some(a) = previous
        .iter()
        .rev()
        .find(|a| a.state == "succeeded" && a.provider_job_id.is_some())
    {
        let spec = run.spec_for(a, &chain);
        return run.redeliver(&spec, a).await;
    }
    // Rule 7: an attempt a run left open is recovered, never re-sent blindly.
    for a in previous
        .iter()
        .filter(|a| a.state == "submitting" || a.state == "submitted")
    {
        let spec = run.spec_for(a, &chain);
        if spec.provider == ProviderKind::Local && a.state == "submitting" {
            // Local work runs in this process: it died with its run and cost
            // nothing outside. Closed as interrupted (unpriced), on record.
            run.end(
                a.id,
                failed_outcome(
                    "interrupted",
                    "the run that made this attempt stopped before it finished",
                    Cost::Unknown,
                    0,
                ),
            )
            .await?;
            continue;
        }
        let started = Instant::now();
        let attempted = match &a.provider_job_id {
            Some(id) if a.state == "submitted" => run.follow(&spec, a, id, started).await?,
            _ => run.recover_uncertain(&spec, a, started).await?,
        };
        match run.conclude(&spec, a, attempted, started).await? {
            Some(done) => return Ok(done),
            // It failed: the chain goes on with what attempts remain.
            None => continue,
        }
    }
    run.chain(&chain, previous).await
}

fn failed_outcome(class: &str, message: &str, cost: Cost, duration_ms: i64) -> AttemptOutcome {
    let (cost_usd, cost_source) = cost.stored();
    AttemptOutcome {
        state: "failed",
        provider_job_id: None,
        error_class: Some(class.into()),
        error: Some(message.into()),
        duration_ms,
        usage: None,
        cost_usd,
        cost_source,
        finished_at: Utc::now(),
    }
}

impl Run<'_> {
    fn provider(&self, spec: &ModelSpec) -> &dyn Provider {
        self.t.provider(spec)
    }

    /// The policy for an attempt's model; a model no longer configured is
    /// treated as the chain's head (same provider kind is all recovery needs).
    fn spec_for(&self, a: &Attempt, chain: &[ModelSpec]) -> ModelSpec {
        self.t
            .models()
            .get(&a.model)
            .cloned()
            .unwrap_or_else(|| chain[0].clone())
    }

    async fn end(&self, id: uuid::Uuid, outcome: AttemptOutcome) -> StoreResult<()> {
        self.t.store().end_attempt(id, &outcome).await
    }

    /// The request with its images, loaded for each send and dropped after:
    /// a run that waits on a provider does not keep the photo in memory.
    async fn input(&self) -> StoreResult<Input> {
        let job = &self.claim.job;
        let (photo, mask) = match &job.request {
            JobRequest::ImageEdit(e) => (
                self.t.asset_bytes(Some(e.source)).await?,
                self.t.asset_bytes(e.target.mask).await?,
            ),
            JobRequest::Video(v) => (self.t.asset_bytes(v.source).await?, None),
        };
        Ok(Input {
            request: job.request.clone(),
            photo,
            mask,
            rate_card_usd: job.estimated_usd,
        })
    }

    /// Sleeps, unless the node stops first (then true).
    async fn pause(&mut self, d: Duration) -> bool {
        if *self.stopped.borrow() {
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => *self.stopped.borrow(),
            _ = self.stopped.changed() => true,
        }
    }

    async fn existing_output(&self, previous: &[Attempt]) -> StoreResult<Option<Generated>> {
        let Some(meta) = self.t.objects().head(&self.key).await.map_err(internal)? else {
            return Ok(None);
        };
        if meta.written_by != self.written_by {
            return Ok(Some(failure(
                "OUTPUT_KEY_CONFLICT",
                "Another job's output is stored where this one's belongs.",
            )));
        }
        // The output exists, so the latest open attempt did its work even if
        // its run died before saying so: record it. Local work is priced from
        // the rate card; a remote call's price is unknown here.
        if let Some(open) = previous
            .iter()
            .rev()
            .find(|a| a.state == "submitting" || a.state == "submitted")
        {
            let cost = if open.provider == "local" {
                Cost::Derived(self.claim.job.estimated_usd)
            } else {
                Cost::Unknown
            };
            let (cost_usd, cost_source) = cost.stored();
            self.end(
                open.id,
                AttemptOutcome {
                    state: "succeeded",
                    provider_job_id: None,
                    error_class: None,
                    error: None,
                    duration_ms: 0,
                    usage: Some(json!({"recovered": true})),
                    cost_usd,
                    cost_source,
                    finished_at: Utc::now(),
                },
            )
            .await?;
        }
        let winner = previous
            .iter()
            .rev()
            .find(|a| a.state == "succeeded" || a.state == "submitting" || a.state == "submitted");
        Ok(Some(Generated::Stored(json!({
            "key": self.key.as_str(),
            "content_type": meta.content_type,
            "reused": true,
            "provider": winner.map(|a| a.provider.clone()),
            "model": winner.map(|a| a.model.clone()),
        }))))
    }

    /// Fetches and stores the output of an attempt recorded as succeeded.
    async fn redeliver(&mut self, spec: &ModelSpec, a: &Attempt) -> StoreResult<Generated> {
        let id = a.provider_job_id.clone().unwrap_or_default();
        let mut last = String::from("no answer");
        for n in 0..DELIVERY_TRIES {
            match self.provider(spec).poll(spec, &id).await {
                Ok(Poll::Succeeded(f)) => return self.deliver(spec, a, f).await,
                Ok(_) => last = "the provider no longer reports the output".into(),
                Err(e) => last = e.message,
            }
            if n + 1 < DELIVERY_TRIES && self.pause(spec.backoff_min).await {
                return Ok(Generated::Released);
            }
        }
        Ok(Generated::Parked(parked(
            ParkedStage::DeliveryExhausted,
            spec,
            a,
            json!({"reason": "The output could not be fetched again.", "last_error": last}),
        )))
    }

    /// Downloads the output and stores it at the job's key, put-if-absent.
    async fn deliver(
        &mut self,
        spec: &ModelSpec,
        a: &Attempt,
        f: Finished,
    ) -> StoreResult<Generated> {
        let mut last = String::new();
        let mut delays = backoff(spec);
        for n in 0..DELIVERY_TRIES {
            match self.provider(spec).fetch(spec, &f.output).await {
                Ok((bytes, content_type)) => {
                    let meta = NewObjectMeta {
                        written_by: self.written_by.clone(),
                        provider: Some(provider_name(spec).into()),
                        content_type: content_type.clone(),
                    };
                    let size = bytes.len();
                    return match self
                        .t
                        .objects()
                        .put_if_absent(&self.key, bytes.into(), &meta)
                        .await
                        .map_err(internal)?
                    {
                        PutOutcome::Exists(m) if m.written_by != self.written_by => Ok(failure(
                            "OUTPUT_KEY_CONFLICT",
                            "Another job's output is stored where this one's belongs.",
                        )),
                        PutOutcome::Created | PutOutcome::Exists(_) => {
                            Ok(Generated::Stored(json!({
                                "key": self.key.as_str(),
                                "content_type": content_type,
                                "bytes": size,
                                "provider": provider_name(spec),
                                "model": spec.id,
                                "attempt": a.attempt_no,
                                "cost_usd": f.cost.stored().0,
                            })))
                        }
                    };
                }
                Err(e) => last = e.message,
            }
            if n + 1 < DELIVERY_TRIES {
                let d = delays.next().unwrap_or(spec.backoff_max);
                if self.pause(d).await {
                    return Ok(Generated::Released);
                }
            }
        }
        Ok(Generated::Parked(parked(
            ParkedStage::DeliveryExhausted,
            spec,
            a,
            json!({"reason": "The output exists at the provider but could not be stored.", "last_error": last}),
        )))
    }

    /// Polls an accepted prediction until it finishes, the node stops, or
    /// the model's polling time runs out (then the job parks).
    async fn follow(
        &mut self,
        spec: &ModelSpec,
        a: &Attempt,
        provider_job_id: &str,
        started: Instant,
    ) -> StoreResult<Attempted> {
        // A unit that usually takes a while is not asked about before most
        // of that time has passed, then at a tenth of it.
        let (first, every) = match spec.expected {
            Some(e) => (e.mul_f64(0.8), (e / 10).max(spec.poll_interval)),
            None => (spec.poll_interval, spec.poll_interval),
        };
        let mut wait = first;
        let mut last_error = None;
        loop {
            if self.pause(wait).await {
                return Ok(Attempted::Released);
            }
            wait = every;
            match self.provider(spec).poll(spec, provider_job_id).await {
                Ok(Poll::Pending) => {
                    // Cancelled or reclaimed meanwhile: stop waiting. The
                    // attempt stays `submitted`, its cost unknown, and the
                    // hold is settled at the estimate (never by calling again).
                    if !self
                        .t
                        .store()
                        .claim_held(self.claim.job.id, self.claim.token)
                        .await?
                    {
                        return Err(StoreError::StaleClaim);
                    }
                }
                Ok(Poll::Succeeded(f)) => return Ok(Attempted::Succeeded(f)),
                Ok(Poll::Failed(e)) => return Ok(Attempted::Failed(e)),
                Err(e) if e.class == ErrorClass::Auth => return Ok(Attempted::Failed(e)),
                Err(e) => {
                    if let Some(after) = e.retry_after {
                        wait = wait.max(after);
                    }
                    last_error = Some(e.message);
                }
            }
            if started.elapsed() > spec.poll_timeout {
                return Ok(Attempted::Parked(parked(
                    ParkedStage::PollingExhausted,
                    spec,
                    a,
                    json!({
                        "reason": format!("No final status after {} s of polling.", spec.poll_timeout.as_secs()),
                        "last_error": last_error,
                    }),
                )));
            }
        }
    }

    /// An attempt that may have been accepted without an answer.
    async fn recover_uncertain(
        &mut self,
        spec: &ModelSpec,
        a: &Attempt,
        started: Instant,
    ) -> StoreResult<Attempted> {
        let mut delays = backoff(spec);
        if spec.idempotency {
            // The provider deduplicates: the same key cannot be paid twice.
            for _ in 0..RECOVERY_TRIES {
                let input = self.input().await?;
                let sent = self
                    .provider(spec)
                    .submit(spec, &input, &a.idempotency_key)
                    .await;
                drop(input);
                match sent {
                    Ok(Submission::Accepted { provider_job_id }) => {
                        self.t
                            .store()
                            .attempt_submitted(a.id, a.job_id, &provider_job_id, Utc::now())
                            .await?;
                        return self.follow(spec, a, &provider_job_id, started).await;
                    }
                    Ok(Submission::Finished(f)) => return Ok(Attempted::Succeeded(f)),
                    Err(e)
                        if e.class == ErrorClass::Uncertain
                            || e.class == ErrorClass::RateLimited
                            || e.class == ErrorClass::Unavailable =>
                    {
                        let d = e
                            .retry_after
                            .unwrap_or_else(|| delays.next().unwrap_or(spec.backoff_max));
                        if self.pause(d).await {
                            return Ok(Attempted::Released);
                        }
                    }
                    Err(e) => return Ok(Attempted::Failed(e)),
                }
            }
            return Ok(Attempted::Parked(parked(
                ParkedStage::SubmissionUncertain,
                spec,
                a,
                json!({"reason": format!("Re-sent {RECOVERY_TRIES} times under the same key without an answer.")}),
            )));
        }
        if spec.lookup {
            for _ in 0..RECOVERY_TRIES {
                match self.provider(spec).lookup(spec, &a.idempotency_key).await {
                    Ok(Some(provider_job_id)) => {
                        self.t
                            .store()
                            .attempt_submitted(a.id, a.job_id, &provider_job_id, Utc::now())
                            .await?;
                        return self.follow(spec, a, &provider_job_id, started).await;
                    }
                    // The provider made nothing under our key: nothing was
                    // charged, and a new attempt is safe.
                    Ok(None) => {
                        return Ok(Attempted::Failed(ProviderError::new(
                            ErrorClass::Timeout,
                            "no answer, and the provider has no prediction under our key",
                            Cost::Nothing,
                        )))
                    }
                    Err(e) => {
                        let d = e
                            .retry_after
                            .unwrap_or_else(|| delays.next().unwrap_or(spec.backoff_max));
                        if self.pause(d).await {
                            return Ok(Attempted::Released);
                        }
                    }
                }
            }
        }
        // Neither: nothing may be re-sent blindly.
        let evidence = json!({
            "reason": "The request may have been accepted and no answer came; the provider can neither deduplicate it nor be asked by our key.",
            "idempotency_key": a.idempotency_key,
        });
        Ok(match spec.on_uncertain {
            OnUncertain::Park => Attempted::Parked(parked(ParkedStage::SubmissionUncertain, spec, a, evidence)),
            OnUncertain::Refund => Attempted::UncertainRefund(
                "The provider may have accepted the request but never answered; by this model's policy the job is refunded.".into(),
            ),
        })
    }

    /// Records an attempt's outcome. `Some` ends the step; `None` means it
    /// failed in a way the chain may retry.
    async fn conclude(
        &mut self,
        spec: &ModelSpec,
        a: &Attempt,
        attempted: Attempted,
        started: Instant,
    ) -> StoreResult<Option<Generated>> {
        let duration_ms = started.elapsed().as_millis() as i64;
        match attempted {
            Attempted::Succeeded(f) => {
                let (cost_usd, cost_source) = f.cost.stored();
                self.end(
                    a.id,
                    AttemptOutcome {
                        state: "succeeded",
                        provider_job_id: None,
                        error_class: None,
                        error: None,
                        duration_ms,
                        usage: Some(f.usage.clone()),
                        cost_usd,
                        cost_source,
                        finished_at: Utc::now(),
                    },
                )
                .await?;
                Ok(Some(self.deliver(spec, a, f).await?))
            }
            Attempted::Failed(e) => {
                let mut outcome = failed_outcome(e.class.as_str(), &e.message, e.cost, duration_ms);
                outcome.usage = None;
                self.end(a.id, outcome).await?;
                Ok(match e.class {
                    ErrorClass::Auth | ErrorClass::InvalidInput | ErrorClass::Cancelled => {
                        Some(stop(&e))
                    }
                    _ => None,
                })
            }
            Attempted::UncertainRefund(message) => {
                self.end(
                    a.id,
                    failed_outcome("uncertain", &message, Cost::Unknown, duration_ms),
                )
                .await?;
                Ok(Some(failure("SUBMISSION_UNCERTAIN", message)))
            }
            Attempted::Parked(p) => Ok(Some(Generated::Parked(p))),
            Attempted::Released => Ok(Some(Generated::Released)),
        }
    }

    /// The chain: each model's remaining attempts, then the next model where
    /// the policy allows it.
    /// `previous` are the job's attempts so far (their states may have moved
    /// since; only how many there are, and of which model, is used).
    async fn chain(
        &mut self,
        chain: &[ModelSpec],
        mut previous: Vec<Attempt>,
    ) -> StoreResult<Generated> {
        let job = self.claim.job.id;
        let mut last: Option<ProviderError> = None;
        for (i, spec) in chain.iter().enumerate() {
            let mut used = previous.iter().filter(|a| a.model == spec.id).count() as u32;
            let mut delays = backoff(spec);
            let mut leave = FallbackReason::Exhausted;
            while used < spec.attempts {
                if *self.stopped.borrow() {
                    return Ok(Generated::Released);
                }
                let input = self.input().await?;
                let attempt_no = previous.len() as i32 + 1;
                let new = NewAttempt {
                    id: uuid::Uuid::new_v4(),
                    job_id: job,
                    provider: provider_name(spec).into(),
                    model: spec.id.clone(),
                    attempt_no,
                    idempotency_key: format!("{job}:{attempt_no}"),
                    started_at: Utc::now(),
                };
                // Rule 7: written down before the request leaves.
                self.t.store().begin_attempt(&new, self.claim.token).await?;
                let a = Attempt {
                    id: new.id,
                    job_id: job,
                    provider: new.provider.clone(),
                    model: new.model.clone(),
                    attempt_no,
                    state: "submitting".into(),
                    idempotency_key: new.idempotency_key.clone(),
                    provider_job_id: None,
                    error_class: None,
                    error: None,
                    duration_ms: None,
                    usage: None,
                    cost_usd: None,
                    cost_source: None,
                    started_at: new.started_at,
                };
                used += 1;
                previous.push(a.clone());
                let started = Instant::now();
                let sent = self
                    .provider(spec)
                    .submit(spec, &input, &a.idempotency_key)
                    .await;
                drop(input);
                let attempted = match sent {
                    Ok(Submission::Finished(f)) => Attempted::Succeeded(f),
                    Ok(Submission::Accepted { provider_job_id }) => {
                        self.t
                            .store()
                            .attempt_submitted(a.id, job, &provider_job_id, Utc::now())
                            .await?;
                        self.follow(spec, &a, &provider_job_id, started).await?
                    }
                    Err(e) if e.class == ErrorClass::Uncertain => {
                        self.recover_uncertain(spec, &a, started).await?
                    }
                    Err(e) => Attempted::Failed(e),
                };
                let class = match &attempted {
                    Attempted::Failed(e) => Some((e.class, e.retry_after, e.clone())),
                    _ => None,
                };
                if let Some(done) = self.conclude(spec, &a, attempted, started).await? {
                    return Ok(done);
                }
                let Some((class, retry_after, error)) = class else {
                    continue;
                };
                last = Some(error);
                let can_leave =
                    |r: FallbackReason| i + 1 < chain.len() && chain[0].fallback_on.contains(&r);
                match class {
                    ErrorClass::Unavailable if can_leave(FallbackReason::Unavailable) => {
                        leave = FallbackReason::Unavailable;
                        break;
                    }
                    // It may have been charged for the full run: past the
                    // window, the same model is not tried again.
                    ErrorClass::Refused | ErrorClass::Failed
                        if spec
                            .prediction_window
                            .is_some_and(|w| started.elapsed() > w) =>
                    {
                        break;
                    }
                    _ => {}
                }
                if used < spec.attempts {
                    let d =
                        retry_after.unwrap_or_else(|| delays.next().unwrap_or(spec.backoff_max));
                    if self.pause(d).await {
                        return Ok(Generated::Released);
                    }
                }
            }
            let next_allowed = i + 1 < chain.len() && chain[0].fallback_on.contains(&leave);
            if !next_allowed {
                break;
            }
            tracing::info!(%job, from = %spec.id, to = %chain[i + 1].id, reason = ?leave, "falling back to the next model");
        }
        Ok(match last {
            Some(e) => stop(&e),
            None => failure(
                "GENERATION_FAILED",
                "No attempts were left to make; your credits were refunded.",
            ),
        })
    }
}

/// The failure a job ends with after this error.
fn stop(e: &ProviderError) -> Generated {
    let (code, message) = match e.class {
        ErrorClass::Auth => (
            "PROVIDER_AUTH",
            "The provider refused Tollgate's credentials; an admin must fix the configuration.",
        ),
        ErrorClass::InvalidInput => (
            "PROVIDER_REJECTED_INPUT",
            "The provider could not use this request.",
        ),
        ErrorClass::Cancelled => (
            "PROVIDER_CANCELLED",
            "The provider cancelled the generation.",
        ),
        ErrorClass::Refused => (
            "CONTENT_REFUSED",
            "The provider refused this request under its content policy.",
        ),
        ErrorClass::Unavailable => (
            "PROVIDER_UNAVAILABLE",
            "The provider is unavailable; please try again later.",
        ),
        _ => ("GENERATION_FAILED", "The generation did not succeed."),
    };
    Generated::Failed(json!({
        "code": code,
        "message": format!("{message} Your credits were refunded."),
        "details": {"error_class": e.class.as_str(), "provider_message": e.message},
    }))
}

fn parked(stage: ParkedStage, spec: &ModelSpec, a: &Attempt, evidence: Value) -> NewParked {
    NewParked {
        stage,
        evidence,
        provider: Some(provider_name(spec).into()),
        model: Some(spec.id.clone()),
        provider_job_id: a.provider_job_id.clone(),
        attempt_id: Some(a.id),
    }
}

fn provider_name(spec: &ModelSpec) -> &'static str {
    match spec.provider {
        ProviderKind::Local => "local",
        ProviderKind::Http => "http",
    }
}

/// Exponential delays with jitter, from the model's minimum to its maximum.
fn backoff(spec: &ModelSpec) -> impl Iterator<Item = Duration> {
    backon::ExponentialBuilder::default()
        .with_min_delay(spec.backoff_min)
        .with_max_delay(spec.backoff_max)
        .with_jitter()
        .with_max_times(64)
        .build()
}
