//! The attempt runner: the `generate` step of a job. It owns retries and
//! fallback (DESIGN.md, Providers), the uncertainty window (rule 7) and
//! what every call cost (rules 10 and 11):
//!
//! - every attempt reserves its own model's estimate against the day and is
//!   written down (`submitting`, key `<job>:<n>`) in one unit before the
//!   request leaves; a day that cannot hold it sends nothing;
//! - its provider job id is written when the provider accepts it, and its
//!   outcome and cost when it ends: a cost is a number only when the
//!   provider said it, the rate card derives it, or a refusal proves nothing
//!   was created; otherwise it stays unknown (booked at the estimate);
//! - an attempt a run left open is recovered with its own model's provider
//!   and endpoint, never silently re-sent: an accepted one is polled; a
//!   `submitting` one is re-sent under the same key where the model declares
//!   idempotency, looked up by key where it declares lookup, and otherwise
//!   parked (or, where the model's policy says `refund`, failed and
//!   refunded with the estimate booked). What a re-send is refused with
//!   proves nothing about the first send;
//! - authentication, invalid input and cancellation stop the chain; rate
//!   limits and timeouts back off (honouring `Retry-After`) and retry the
//!   same model; a refusal or failure uses the same model's remaining
//!   attempts, unless the prediction ran past the model's window (measured
//!   from the attempt's recorded start, so a restart does not reset it);
//!   the chain moves to the next model only where the policy allows it.
//!
//! The output goes to the job's one key, put-if-absent (rule 8).

use super::Run;
use crate::config::models::{FallbackReason, ModelSpec, OnFailure, OnUncertain};
use crate::model::{
    AttemptEnd, AttemptId, AttemptState, CostSource, FailureCode, JobFailure, JobKind, JobRequest,
    ParkedEvidence, ParkedState, ProviderSaid, Purpose, ReviewAction, SentAttempt, StoredOutput,
    Usd,
};
use crate::providers::{
    local, Cost, ErrorClass, Finished, Input, Lookup, Poll, Provider, ProviderError, Submission,
};
use crate::storage::{NewObjectMeta, ObjectKey, PutOutcome};
use crate::store::{
    Applied, Attempt, AttemptOutcome, Hold, NewAttempt, NewParked, Op, ParkedStage, StoreError,
    StoreResult,
};
use backon::BackoffBuilder;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use std::ops::ControlFlow;
use std::time::Duration;

/// Re-sends (same key) or look-ups tried before an uncertain attempt parks.
const RECOVERY_TRIES: usize = 3;
/// Output downloads tried before the job parks in `delivery_exhausted`.
const DELIVERY_TRIES: usize = 3;
/// Writes of a fetched output to our object store before the job parks in
/// `delivery_exhausted`.
const STORE_TRIES: usize = 4;
/// Pending polls between checks that the run still holds its claim.
const POLLS_PER_CLAIM_CHECK: u32 = 5;

/// How the generate step ended.
pub enum Generated {
    /// The output is stored at the job's key; the attempt that made it is
    /// recorded with the run's next commit.
    Stored(StoredOutput),
    /// The job fails (and is refunded).
    Failed(JobFailure),
    /// A person must decide; the budget holds stay.
    Parked(NewParked),
    /// This node is shutting down: give the job back; an accepted attempt
    /// stays on record and the next run polls it.
    Released,
}

/// What storing a fetched output came to.
enum Stored {
    Put(PutOutcome),
    /// The node is stopping: the job goes back, the attempt stays recorded.
    Released,
    /// Every try failed; the last error.
    Failed(String),
}

/// What one attempt came to.
enum Attempted {
    Succeeded(Finished),
    /// Ended without an output; `cost` on the error is what it cost.
    Failed(ProviderError),
    Parked(NewParked),
    /// Recorded as uncertain; the model's policy is to refund.
    UncertainRefund(String),
    Released,
}

/// Why a fetched output is not delivered.
enum Unusable {
    /// Not an image or clip we serve (what it claimed to be).
    NotServed(String),
    /// An image, but plainly not an edit of the photo (why, in words).
    Broken(String),
}

pub fn output_key(job: crate::model::JobId) -> StoreResult<ObjectKey> {
    ObjectKey::parse(&format!("outputs/{job}")).map_err(internal)
}

fn internal(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn failure(code: FailureCode, message: impl Into<String>) -> Generated {
    Generated::Failed(JobFailure::new(code, message))
}

/// What a run left that the next run must deal with first.
fn open(a: &Attempt) -> bool {
    a.purpose == Purpose::Generate && a.state.is_open()
}

pub async fn generate<'a>(run: &mut Run<'a>) -> StoreResult<Generated> {
    // Borrowed from the node's configuration, not copied: a run waiting on
    // a provider holds what it will need after, and no more (issue 32, 3).
    let t: &'a crate::Tollgate = run.t;
    let job = run.job().id;
    let key = output_key(job)?;
    let first = match &run.job().request {
        JobRequest::ImageEdit(_) => &t.models().default_for(JobKind::ImageEdit).id,
        JobRequest::Video(v) => &v.model,
    };
    let chain: Vec<&'a ModelSpec> = t.models().chain(first);
    if chain.is_empty() {
        return Ok(failure(
            FailureCode::ModelUnavailable,
            format!("The model {first:?} is no longer offered; your credits were refunded."),
        ));
    }
    // A job's first claim cannot have attempts yet: no read needed.
    let (previous, recovery) = if run.claim.token > 1 {
        (
            Box::pin(run.t.store().attempts(job)).await?,
            Box::pin(recovery_of(run.t, job)).await?,
        )
    } else {
        (Vec::new(), None)
    };
    // Checker calls are attempts too: numbered with the rest, but never
    // read as the edit's own (rule 14 asks them; rule 7 follows the edit's).
    let mut previous = previous;
    run.attempt_floor = run
        .attempt_floor
        .max(previous.iter().map(|a| a.attempt_no).max().unwrap_or(0));
    previous.retain(|a| a.purpose == Purpose::Generate);
    let mut r = Runner {
        run,
        key,
        resumed_until: recovery.as_ref().and_then(|r| r.deadline),
    };

    // Rule 8: an output this job already stored means no new call.
    if let Some(done) = Box::pin(r.existing_output(&previous)).await? {
        return Ok(done);
    }
    // Rule 12: a recovery does exactly the action decided, and nothing
    // after it: it never goes on into the chain's new paid attempts.
    if let Some(recovery) = recovery {
        return Box::pin(r.recover(recovery.action, &previous)).await;
    }
    // A finished attempt whose output never reached storage: fetch it again.
    if let Some(a) = previous
        .iter()
        .rev()
        .find(|a| a.state == AttemptState::Succeeded && a.provider_job_id.is_some())
    {
        return match r.spec_of(a) {
            Ok(spec) => Box::pin(r.redeliver(&spec, a)).await,
            Err(gone) => Ok(Generated::Parked(*gone)),
        };
    }
    // Rule 7: an attempt a run left open is recovered, never re-sent blindly.
    let after = match Box::pin(r.recover_open(&previous)).await? {
        ControlFlow::Continue(after) => after,
        ControlFlow::Break(done) => return Ok(done),
    };
    r.chain(&chain, previous, after).await
}

/// The reviewer's decision a run carries out: the job's record is
/// `recovering` (this run's claim is the recovery's claim) under a decision
/// with a recovery. `deadline` is when a `resume_poll` gives up.
struct Recovery {
    action: ReviewAction,
    deadline: Option<DateTime<Utc>>,
}

async fn recovery_of(
    t: &crate::Tollgate,
    job: crate::model::JobId,
) -> StoreResult<Option<Recovery>> {
    let Some(record) = t.store().parked_for_job(job).await? else {
        return Ok(None);
    };
    if record.state != ParkedState::Recovering {
        return Ok(None);
    }
    Ok(t.store()
        .decisions(record.id)
        .await?
        .into_iter()
        .rfind(|d| d.round == record.round)
        .and_then(|d| {
            d.recovery.map(|r| Recovery {
                action: d.action,
                deadline: r.deadline,
            })
        }))
}

/// What recovering a dead run's attempts leaves for the chain.
#[derive(Default)]
struct Recovered {
    /// Models not to try again (a prediction ran past their window).
    spent_models: Vec<String>,
    last: Option<ProviderError>,
}

fn end(attempt: AttemptId, outcome: AttemptOutcome) -> Op {
    Op::EndAttempt { attempt, outcome }
}

pub(crate) fn ended(
    end: AttemptEnd,
    class: Option<ErrorClass>,
    message: &str,
    cost: Cost,
    duration_ms: i64,
) -> AttemptOutcome {
    AttemptOutcome {
        end,
        provider_job_id: None,
        error_class: class,
        error: (!message.is_empty()).then(|| message.to_string()),
        duration_ms,
        usage: None,
        cost: stored_cost(cost),
        finished_at: Utc::now(),
    }
}

/// The stored pair: a number only when someone knows it.
fn stored_cost(cost: Cost) -> Option<(Usd, CostSource)> {
    match cost {
        // Nothing was created, so nothing was charged.
        Cost::Nothing => Some((Usd::ZERO, CostSource::Derived)),
        Cost::Quoted(u) => Some((u, CostSource::Quoted)),
        Cost::Derived(u) => Some((u, CostSource::Derived)),
        Cost::Unknown => None,
    }
}

fn since(at: DateTime<Utc>) -> Duration {
    (Utc::now() - at).to_std().unwrap_or_default()
}

struct Runner<'r, 'a> {
    run: &'r mut Run<'a>,
    key: ObjectKey,
    /// A reviewer resumed status checks: they run until then, however long
    /// ago the attempt started.
    resumed_until: Option<DateTime<Utc>>,
}

impl Runner<'_, '_> {
    /// Rule 7: each attempt a run left open is recovered (followed, or
    /// looked up under its key), never re-sent blindly. Breaks with the
    /// job's outcome when one of them settles it; otherwise what the chain
    /// must know: the last failure, and the models already spent.
    async fn recover_open(
        &mut self,
        previous: &[Attempt],
    ) -> StoreResult<ControlFlow<Generated, Recovered>> {
        let mut after = Recovered::default();
        for a in previous.iter().filter(|a| open(a)) {
            if a.provider == "local" && a.state == AttemptState::Submitting {
                // Local work runs in this process: it died with its run and
                // created nothing outside. Closed as interrupted, on record.
                self.run.defer(end(
                    a.id,
                    ended(
                        AttemptEnd::Failed,
                        Some(ErrorClass::Interrupted),
                        "the run that made this attempt stopped before it finished",
                        Cost::Nothing,
                        0,
                    ),
                ));
                continue;
            }
            let spec = match self.spec_of(a) {
                Ok(spec) => spec,
                Err(gone) => return Ok(ControlFlow::Break(Generated::Parked(*gone))),
            };
            let attempted = match &a.provider_job_id {
                Some(id) if a.state == AttemptState::Submitted => self.follow(&spec, a, id).await?,
                _ => self.recover_uncertain(&spec, a).await?,
            };
            if let Attempted::Failed(e) = &attempted {
                // Past its window it may have been charged in full: its model
                // is not tried again, however long ago the run that sent it died.
                if matches!(e.class, ErrorClass::Refused | ErrorClass::Failed)
                    && spec
                        .prediction_window
                        .is_some_and(|w| since(a.started_at) > w)
                {
                    after.spent_models.push(spec.id.clone());
                }
                after.last = Some(e.clone());
            }
            if let Some(done) = self.conclude(&spec, a, attempted).await? {
                return Ok(ControlFlow::Break(done));
            }
        }
        Ok(ControlFlow::Continue(after))
    }

    fn provider(&self, spec: &ModelSpec) -> &dyn Provider {
        self.run.t.provider(spec)
    }

    fn written_by(&self) -> String {
        format!("job:{}", self.run.job().id)
    }

    /// The model an attempt was made with, as it was: its provider and
    /// endpoint unchanged. Otherwise the attempt cannot be recovered safely
    /// under another model's policy, and the job parks.
    fn spec_of(&self, a: &Attempt) -> Result<ModelSpec, Box<NewParked>> {
        match self.run.t.models().get(&a.model) {
            Some(spec) if spec.provider_name() == a.provider && spec.endpoint == a.endpoint => {
                Ok(spec.clone())
            }
            current => {
                let stage = if a.provider_job_id.is_some() {
                    ParkedStage::PollingExhausted
                } else {
                    ParkedStage::SubmissionUncertain
                };
                let now =
                    current.map(|s| json!({"provider": s.provider_name(), "endpoint": s.endpoint}));
                Err(Box::new(NewParked {
                    stage,
                    evidence: ParkedEvidence {
                        attempt: Some(Box::new(SentAttempt {
                            provider: a.provider.clone(),
                            endpoint: a.endpoint.clone(),
                            idempotency_key: a.idempotency_key.clone(),
                            ..SentAttempt::default()
                        })),
                        ..ParkedEvidence::because(format!(
                            "The model {} that made attempt {} is no longer configured with the provider and endpoint it was sent to; it cannot be recovered under another model's policy.",
                            a.model, a.attempt_no
                        ))
                    }
                    .with("configured_now", now.unwrap_or(Value::Null)),
                    provider: Some(a.provider.clone()),
                    model: Some(a.model.clone()),
                    provider_job_id: a.provider_job_id.clone(),
                    attempt_id: Some(a.id),
                    polls: 0,
                    deliveries: 0,
                }))
            }
        }
    }

    /// The request with its images, loaded for each send and dropped after:
    /// a run that waits on a provider does not keep the photo in memory.
    async fn input(&self, spec: &ModelSpec) -> StoreResult<Input> {
        let job = self.run.job();
        let (photo, mask) = match &job.request {
            JobRequest::ImageEdit(e) => (
                self.run.asset_bytes(Some(e.source)).await?,
                self.run.asset_bytes(e.target.mask).await?,
            ),
            JobRequest::Video(v) => (self.run.asset_bytes(v.source).await?, None),
        };
        let previous = match job.repair_of {
            Some(parent) => self.run.t.job_output_bytes(parent).await?,
            None => None,
        };
        Ok(Input {
            request: job.request.clone(),
            photo,
            mask,
            rate_card_usd: spec.estimate(&job.request),
            previous,
            instruction: job.instruction.clone(),
            observation: self
                .run
                .progress
                .readiness
                .as_ref()
                .and_then(|r| r.observation.clone()),
        })
    }

    async fn existing_output(&mut self, previous: &[Attempt]) -> StoreResult<Option<Generated>> {
        let Some(meta) = self
            .run
            .t
            .objects()
            .head(&self.key)
            .await
            .map_err(internal)?
        else {
            return Ok(None);
        };
        if meta.written_by != self.written_by() {
            return Ok(Some(failure(
                FailureCode::OutputKeyConflict,
                "Another job's output is stored where this one's belongs.",
            )));
        }
        // The output exists, so the latest open attempt did its work even if
        // its run died before saying so: record it, with what it cost when
        // the provider can still say (a poll is not a paid call).
        let opened = previous.iter().rev().find(|a| open(a));
        if let Some(a) = opened {
            let mut cost = if a.provider == "local" {
                Cost::Derived(self.run.job().estimated_usd)
            } else {
                Cost::Unknown
            };
            if let (Some(id), Ok(spec)) = (&a.provider_job_id, self.spec_of(a)) {
                if let Ok(Poll::Succeeded(f)) = self.provider(&spec).poll(&spec, id).await {
                    cost = f.cost;
                }
            }
            let mut outcome = ended(AttemptEnd::Succeeded, None, "", cost, 0);
            outcome.usage = Some(json!({"recovered": true}));
            self.run.defer(end(a.id, outcome));
        }
        let winner = opened.or_else(|| {
            previous
                .iter()
                .rev()
                .find(|a| a.state == AttemptState::Succeeded)
        });
        Ok(Some(Generated::Stored(StoredOutput {
            key: self.key.as_str().to_string(),
            content_type: meta.content_type,
            bytes: meta.size,
            attempt_no: winner.map(|a| a.attempt_no),
            model: winner.map(|a| a.model.clone()),
        })))
    }

    /// Fetches and stores the output of an attempt recorded as succeeded.
    async fn redeliver(&mut self, spec: &ModelSpec, a: &Attempt) -> StoreResult<Generated> {
        let id = a.provider_job_id.clone().unwrap_or_default();
        let mut last = String::from("no answer");
        for n in 0..DELIVERY_TRIES {
            match self.provider(spec).poll(spec, &id).await {
                Ok(Poll::Succeeded(f)) => return self.deliver(spec, a, f, false).await,
                Ok(_) => last = "the provider no longer reports the output".into(),
                Err(e) => last = e.message,
            }
            if n + 1 < DELIVERY_TRIES && self.run.pause(spec.backoff_min).await {
                return Ok(Generated::Released);
            }
        }
        Ok(Generated::Parked(NewParked {
            deliveries: DELIVERY_TRIES as i32,
            ..parked(
                ParkedStage::DeliveryExhausted,
                spec,
                a,
                ParkedEvidence::because("The output could not be fetched again.")
                    .with("last_error", last),
            )
        }))
    }

    /// Downloads the output and stores it at the job's key, put-if-absent.
    /// The attempt's success is recorded with the run's next commit (when
    /// `record` is set: a re-delivery's attempt is already recorded).
    async fn deliver(
        &mut self,
        spec: &ModelSpec,
        a: &Attempt,
        f: Finished,
        record: bool,
    ) -> StoreResult<Generated> {
        let mut last = String::new();
        let mut delays = backoff(spec);
        // The attempt's success is recorded unless its output turns out to
        // be something we do not serve (then it failed, at what it cost).
        let mut succeeded = record.then(|| self.attempt_end(a, &f, AttemptEnd::Succeeded, None));
        for n in 0..DELIVERY_TRIES {
            match self.provider(spec).fetch(spec, &f.output).await {
                Ok((bytes, claimed)) => {
                    // Untrusted bytes: stored only as what they really are,
                    // and only if that is an image or clip we serve.
                    let Some(content_type) = crate::model::sniff_output(&bytes) else {
                        let claimed: String = claimed.chars().take(100).collect();
                        let why = Unusable::NotServed(claimed);
                        return Ok(self.invalid_output(a, &f, record, why));
                    };
                    if let Some(why) = self.broken_output(&bytes).await? {
                        return Ok(self.invalid_output(a, &f, record, Unusable::Broken(why)));
                    }
                    if let Some(op) = succeeded.take() {
                        self.run.defer(op);
                    }
                    return self.keep_output(spec, a, bytes, content_type).await;
                }
                Err(e) => last = e.message,
            }
            if n + 1 < DELIVERY_TRIES {
                let d = delays.next().unwrap_or(spec.backoff_max);
                if self.run.pause(d).await {
                    if let Some(op) = succeeded.take() {
                        self.run.defer(op);
                    }
                    return Ok(Generated::Released);
                }
            }
        }
        // It succeeded at the provider; only storing it failed.
        if let Some(op) = succeeded.take() {
            self.run.defer(op);
        }
        Ok(Generated::Parked(NewParked {
            deliveries: DELIVERY_TRIES as i32,
            ..parked(
                ParkedStage::DeliveryExhausted,
                spec,
                a,
                ParkedEvidence::because(
                    "The output exists at the provider but could not be stored.",
                )
                .with("last_error", last),
            )
        }))
    }

    /// The attempt's end at what the provider said it cost, with its usage.
    fn attempt_end(
        &self,
        a: &Attempt,
        f: &Finished,
        how: AttemptEnd,
        error: Option<(ErrorClass, &str)>,
    ) -> Op {
        let (class, message) = error.map_or((None, ""), |(c, m)| (Some(c), m));
        let mut outcome = ended(how, class, message, f.cost, duration_ms(a));
        outcome.usage = Some(f.usage.clone());
        end(a.id, outcome)
    }

    /// An output we will not deliver: not stored, and the attempt failed
    /// at what it cost (a provider failure: the job is refunded).
    fn invalid_output(
        &mut self,
        a: &Attempt,
        f: &Finished,
        record: bool,
        why: Unusable,
    ) -> Generated {
        let (recorded, told) = match why {
            Unusable::NotServed(claimed) => (
                format!("the output is not an image or clip we serve (it said {claimed:?})"),
                format!("The provider returned something that is not an image or clip ({claimed:?}); it was not stored. Your credits were refunded."),
            ),
            Unusable::Broken(why) => (
                format!("the output is plainly broken: {why}"),
                format!("The model's result was not usable: {why}. It was not delivered, and your credits were refunded."),
            ),
        };
        if record {
            let op = self.attempt_end(
                a,
                f,
                AttemptEnd::Failed,
                Some((ErrorClass::InvalidOutput, &recorded)),
            );
            self.run.defer(op);
        }
        failure(FailureCode::InvalidOutput, told)
    }

    /// Issue 33, 2: an image edit's result that is plainly not an edit of
    /// its photo (`local::sanity`). The photo read here is kept for the
    /// review that follows.
    async fn broken_output(&mut self, output: &[u8]) -> StoreResult<Option<String>> {
        let JobRequest::ImageEdit(edit) = &self.run.job().request else {
            return Ok(None);
        };
        let source = edit.source;
        // A photo that is gone is the review's to report, not the model's fault.
        let Some(photo) = self.run.asset_bytes(Some(source)).await? else {
            return Ok(None);
        };
        self.run.keep_for_send(source, &photo);
        let output = output.to_vec();
        let size = photo.len() + output.len();
        super::workflow::on_cpu(self.run.t, size, move || {
            local::sanity::plainly_broken(&photo, &output)
        })
        .await
    }

    /// Keeps a fetched output at the job's key (put-if-absent): stored, or
    /// another job's output already there, or parked when our store will
    /// not keep it.
    async fn keep_output(
        &mut self,
        spec: &ModelSpec,
        a: &Attempt,
        bytes: Vec<u8>,
        content_type: &str,
    ) -> StoreResult<Generated> {
        let meta = NewObjectMeta {
            written_by: self.written_by(),
            provider: Some(spec.provider_name().into()),
            content_type: content_type.to_string(),
        };
        let size = bytes.len() as u64;
        let bytes = bytes::Bytes::from(bytes);
        let put = match self.store_output(spec, &bytes, &meta).await {
            Stored::Put(put) => put,
            Stored::Released => return Ok(Generated::Released),
            Stored::Failed(why) => {
                return Ok(Generated::Parked(NewParked {
                    deliveries: STORE_TRIES as i32,
                    ..parked(
                        ParkedStage::DeliveryExhausted,
                        spec,
                        a,
                        ParkedEvidence::because("The output was fetched from the provider, but our object store would not keep it.")
                            .with("last_error", why),
                    )
                }))
            }
        };
        if let PutOutcome::Created = put {
            self.run.keep_stored_output(self.key.as_str(), bytes);
        }
        Ok(match put {
            PutOutcome::Exists(m) if m.written_by != self.written_by() => failure(
                FailureCode::OutputKeyConflict,
                "Another job's output is stored where this one's belongs.",
            ),
            PutOutcome::Created | PutOutcome::Exists(_) => Generated::Stored(StoredOutput {
                key: self.key.as_str().to_string(),
                content_type: content_type.to_string(),
                bytes: size,
                attempt_no: Some(a.attempt_no),
                model: Some(spec.id.clone()),
            }),
        })
    }

    /// Writes the output at the job's key, put-if-absent, a bounded number
    /// of times with backoff and jitter: our own store failing must not
    /// send the run round again (each round downloads the output anew).
    async fn store_output(
        &mut self,
        spec: &ModelSpec,
        bytes: &bytes::Bytes,
        meta: &NewObjectMeta,
    ) -> Stored {
        let mut delays = backoff(spec);
        let mut last = String::new();
        for n in 0..STORE_TRIES {
            match self
                .run
                .t
                .objects()
                .put_if_absent(&self.key, bytes.clone(), meta)
                .await
            {
                Ok(put) => return Stored::Put(put),
                Err(e) => last = e.to_string(),
            }
            tracing::warn!(job = %self.run.job().id, tries = n + 1, error = %last, "storing an output failed");
            if n + 1 < STORE_TRIES {
                let d = delays.next().unwrap_or(spec.backoff_max);
                if self.run.pause(d).await {
                    return Stored::Released;
                }
            }
        }
        Stored::Failed(last)
    }

    /// Rule 7 (b): the provider accepted the attempt under this id; written
    /// before polling, so a resumed run polls instead of re-sending.
    async fn accepted(&mut self, a: &mut Attempt, provider_job_id: String) -> StoreResult<()> {
        self.run
            .commit(vec![Op::Submitted {
                attempt: a.id,
                provider_job_id: provider_job_id.clone(),
            }])
            .await?;
        a.state = AttemptState::Submitted;
        a.provider_job_id = Some(provider_job_id);
        Ok(())
    }

    /// Polls an accepted prediction until it finishes, the node stops, or
    /// the model's polling time runs out (then the job parks).
    async fn follow(&mut self, spec: &ModelSpec, a: &Attempt, id: &str) -> StoreResult<Attempted> {
        // A unit that usually takes a while is not asked about before most
        // of that time has passed, then at a tenth of it.
        let (first, every) = match spec.expected {
            Some(e) => (
                e.mul_f64(0.8).saturating_sub(since(a.started_at)),
                (e / 10).max(spec.poll_interval),
            ),
            None => (spec.poll_interval, spec.poll_interval),
        };
        let mut wait = first;
        let mut last_error = None;
        let mut pending = 0u32;
        let mut polls = 0i32;
        // Polling time counts from the attempt's start, or from a
        // reviewer's decision to resume it.
        let deadline = {
            let own = a.started_at
                + chrono::Duration::from_std(spec.poll_timeout).unwrap_or(chrono::Duration::MAX);
            self.resumed_until.map_or(own, |d| d.max(own))
        };
        loop {
            if self.run.pause(wait).await {
                return Ok(Attempted::Released);
            }
            wait = every;
            polls += 1;
            match self.provider(spec).poll(spec, id).await {
                Ok(Poll::Pending) => {
                    // Cancelled or reclaimed meanwhile: stop waiting. The
                    // attempt stays `submitted`, its cost unknown; the
                    // terminal write settles its hold at the estimate.
                    pending += 1;
                    if pending.is_multiple_of(POLLS_PER_CLAIM_CHECK)
                        && !self
                            .run
                            .t
                            .store()
                            .claim_held(self.run.claim.job.id, self.run.claim.token)
                            .await?
                    {
                        return Err(StoreError::StaleClaim);
                    }
                }
                Ok(Poll::Succeeded(f)) => return Ok(Attempted::Succeeded(f)),
                Ok(Poll::Failed(e)) => return Ok(Attempted::Failed(e)),
                Err(e) if e.class == ErrorClass::Auth => {
                    return Ok(Attempted::Parked(checks_refused(spec, a, polls, &e)))
                }
                Err(e) if e.class == ErrorClass::NotFound && self.resumed_until.is_some() => {
                    return Ok(Attempted::Parked(unknown_to_provider(
                        spec, a, polls, id, &e,
                    )))
                }
                Err(e) => {
                    if let Some(after) = e.retry_after {
                        wait = wait.max(after);
                    }
                    last_error = Some(e.message);
                }
            }
            if Utc::now() > deadline {
                return Ok(Attempted::Parked(polling_exhausted(
                    spec, a, polls, last_error,
                )));
            }
        }
    }

    /// An attempt that may have been accepted without an answer.
    async fn recover_uncertain(&mut self, spec: &ModelSpec, a: &Attempt) -> StoreResult<Attempted> {
        let mut a = a.clone();
        let found = if spec.idempotency {
            self.resend_under_key(spec, &mut a).await?
        } else if spec.lookup {
            self.look_up_by_key(spec, &mut a).await?
        } else {
            ControlFlow::Continue(
                "the provider can neither deduplicate a re-send nor be asked by our key".into(),
            )
        };
        let last = match found {
            ControlFlow::Break(attempted) => return Ok(attempted),
            ControlFlow::Continue(last) => last,
        };
        // Nothing may be re-sent blindly.
        Ok(match spec.on_uncertain {
            OnUncertain::Park => Attempted::Parked(parked(
                ParkedStage::SubmissionUncertain,
                spec,
                &a,
                ParkedEvidence::because("The request may have been accepted and no answer came; whether it was paid is unknown.")
                    .with("idempotency_key", a.idempotency_key.clone())
                    .with("last_error", last),
            )),
            OnUncertain::Refund => Attempted::UncertainRefund(format!(
                "The provider may have accepted the request but never answered ({last}); by this model's policy the job is refunded."
            )),
        })
    }

    /// The provider deduplicates: the same key cannot be paid twice, so the
    /// request is sent again under it. Breaks with what the attempt came
    /// to; continues with why nothing was proved.
    async fn resend_under_key(
        &mut self,
        spec: &ModelSpec,
        a: &mut Attempt,
    ) -> StoreResult<ControlFlow<Attempted, String>> {
        let mut delays = backoff(spec);
        let mut last = String::from("no answer");
        for _ in 0..RECOVERY_TRIES {
            let input = Box::pin(self.input(spec)).await?;
            let sent = self
                .provider(spec)
                .submit(spec, &input, &a.idempotency_key)
                .await;
            drop(input);
            let e = match sent {
                Ok(Submission::Accepted { provider_job_id }) => {
                    self.accepted(a, provider_job_id.clone()).await?;
                    return Ok(ControlFlow::Break(
                        self.follow(spec, a, &provider_job_id).await?,
                    ));
                }
                Ok(Submission::Finished(f)) => {
                    return Ok(ControlFlow::Break(Attempted::Succeeded(f)))
                }
                Err(e) => e,
            };
            if !matches!(
                e.class,
                ErrorClass::Uncertain | ErrorClass::RateLimited | ErrorClass::Unavailable
            ) {
                // A refusal of the re-send proves nothing about the first
                // send, which may have been accepted and paid.
                let why = format!(
                    "the re-send was refused ({}): {}",
                    e.class.as_str(),
                    e.message
                );
                return Ok(ControlFlow::Continue(why));
            }
            last = e.message;
            let d = e
                .retry_after
                .unwrap_or_else(|| delays.next().unwrap_or(spec.backoff_max));
            if self.run.pause(d).await {
                return Ok(ControlFlow::Break(Attempted::Released));
            }
        }
        Ok(ControlFlow::Continue(last))
    }

    /// The provider can be asked what it made under our key.
    async fn look_up_by_key(
        &mut self,
        spec: &ModelSpec,
        a: &mut Attempt,
    ) -> StoreResult<ControlFlow<Attempted, String>> {
        let mut delays = backoff(spec);
        let mut last = String::from("no answer");
        for _ in 0..RECOVERY_TRIES {
            match self.provider(spec).lookup(spec, &a.idempotency_key).await {
                Ok(Lookup::Found(provider_job_id)) => {
                    self.accepted(a, provider_job_id.clone()).await?;
                    return Ok(ControlFlow::Break(
                        self.follow(spec, a, &provider_job_id).await?,
                    ));
                }
                // The provider says it made nothing under our key: nothing
                // was charged, and a new attempt is safe.
                Ok(Lookup::NotFound) => {
                    return Ok(ControlFlow::Break(Attempted::Failed(ProviderError::new(
                        ErrorClass::Timeout,
                        "no answer, and the provider has no prediction under our key",
                        Cost::Nothing,
                    ))))
                }
                Ok(Lookup::Unclear(why)) => last = format!("the look-up proved nothing: {why}"),
                Err(e) => last = e.message,
            }
            let d = delays.next().unwrap_or(spec.backoff_max);
            if self.run.pause(d).await {
                return Ok(ControlFlow::Break(Attempted::Released));
            }
        }
        Ok(ControlFlow::Continue(last))
    }

    /// Records an attempt's outcome with the next commit. `Some` ends the
    /// step; `None` means it failed in a way the chain may retry.
    async fn conclude(
        &mut self,
        spec: &ModelSpec,
        a: &Attempt,
        attempted: Attempted,
    ) -> StoreResult<Option<Generated>> {
        let duration_ms = duration_ms(a);
        match attempted {
            Attempted::Succeeded(f) => Ok(Some(self.deliver(spec, a, f, true).await?)),
            Attempted::Failed(e) => {
                let outcome = ended(
                    AttemptEnd::Failed,
                    Some(e.class),
                    &e.message,
                    e.cost,
                    duration_ms,
                );
                self.run.defer(end(a.id, outcome));
                Ok(match e.class {
                    ErrorClass::Auth | ErrorClass::InvalidInput | ErrorClass::Cancelled => {
                        Some(stop(&e))
                    }
                    _ => None,
                })
            }
            Attempted::UncertainRefund(message) => {
                // Unpriced: the estimate stays booked (rule 11).
                let outcome = ended(
                    AttemptEnd::Failed,
                    Some(ErrorClass::Uncertain),
                    &message,
                    Cost::Unknown,
                    duration_ms,
                );
                self.run.defer(end(a.id, outcome));
                Ok(Some(failure(FailureCode::SubmissionUncertain, message)))
            }
            Attempted::Parked(p) => Ok(Some(Generated::Parked(p))),
            Attempted::Released => Ok(Some(Generated::Released)),
        }
    }

    /// A reviewer's approved recovery, and only that: `resume_poll` polls
    /// the accepted attempt; `retry_delivery` fetches and stores the output
    /// of the attempt that made it. Whatever they learn ends the step or
    /// parks the job again; no new paid call is ever made here.
    async fn recover(
        &mut self,
        action: ReviewAction,
        previous: &[Attempt],
    ) -> StoreResult<Generated> {
        match action {
            ReviewAction::ResumePoll => {
                let Some(a) = previous
                    .iter()
                    .rev()
                    .find(|a| open(a) && a.provider_job_id.is_some())
                else {
                    return Ok(self.nothing_to_recover(
                        ParkedStage::PollingExhausted,
                        previous,
                        "No accepted attempt is left to check on.",
                    ));
                };
                let spec = match self.spec_of(a) {
                    Ok(spec) => spec,
                    Err(gone) => return Ok(Generated::Parked(*gone)),
                };
                let id = a.provider_job_id.clone().unwrap_or_default();
                let attempted = self.follow(&spec, a, &id).await?;
                self.conclude_resumed(&spec, a, attempted).await
            }
            ReviewAction::RetryDelivery => {
                let Some(a) = previous
                    .iter()
                    .rev()
                    .find(|a| a.state == AttemptState::Succeeded && a.provider_job_id.is_some())
                else {
                    return Ok(self.nothing_to_recover(
                        ParkedStage::DeliveryExhausted,
                        previous,
                        "No attempt has an output at the provider to fetch again.",
                    ));
                };
                match self.spec_of(a) {
                    Ok(spec) => self.redeliver(&spec, a).await,
                    Err(gone) => Ok(Generated::Parked(*gone)),
                }
            }
            other => Err(internal(format!(
                "{} is not a recovery a worker carries out",
                other.as_str()
            ))),
        }
    }

    /// A recovery that found nothing to act on parks again, saying so.
    fn nothing_to_recover(
        &self,
        stage: ParkedStage,
        previous: &[Attempt],
        reason: &str,
    ) -> Generated {
        let last = previous.last();
        Generated::Parked(NewParked {
            stage,
            evidence: ParkedEvidence::because(reason),
            provider: last.map(|a| a.provider.clone()),
            model: last.map(|a| a.model.clone()),
            provider_job_id: last.and_then(|a| a.provider_job_id.clone()),
            attempt_id: last.map(|a| a.id),
            polls: 0,
            deliveries: 0,
        })
    }

    /// What a resumed poll learned. A success is delivered; a reported
    /// failure or refusal parks in `generation_failed` with what was seen
    /// (a new paid call needs a reviewer's `new_attempt`); anything else
    /// parks where the follow left it.
    async fn conclude_resumed(
        &mut self,
        spec: &ModelSpec,
        a: &Attempt,
        attempted: Attempted,
    ) -> StoreResult<Generated> {
        let e = match attempted {
            Attempted::Failed(e) => e,
            other => {
                return Ok(self
                    .conclude(spec, a, other)
                    .await?
                    .unwrap_or_else(|| internal_park(spec, a)))
            }
        };
        let outcome = ended(
            AttemptEnd::Failed,
            Some(e.class),
            &e.message,
            e.cost,
            duration_ms(a),
        );
        self.run.defer(end(a.id, outcome));
        Ok(Generated::Parked(parked(
            ParkedStage::GenerationFailed,
            spec,
            a,
            ParkedEvidence::because("The resumed status checks found the generation ended without an output; a new paid attempt needs a reviewer's decision.")
                .with("error_class", e.class.as_str())
                .with("last_error", e.message.clone()),
        )))
    }

    /// Rules 7 and 11 (a): the attempt and its hold, in one unit with what
    /// the run deferred, before anything is sent. `None` when the day
    /// cannot hold it.
    async fn begin(&mut self, spec: &ModelSpec, attempt_no: i32) -> StoreResult<Option<Attempt>> {
        let job = self.run.job();
        let new = NewAttempt {
            id: AttemptId::new(),
            job_id: job.id,
            purpose: Purpose::Generate,
            provider: spec.provider_name().into(),
            endpoint: spec.endpoint.clone(),
            model: spec.id.clone(),
            attempt_no,
            idempotency_key: format!("{}:{attempt_no}", job.id),
            hold: Some(Hold {
                day: Utc::now().date_naive(),
                amount: spec.estimate(&job.request),
                default_cap: self.run.t.config().daily_cap_usd,
            }),
            started_at: Utc::now(),
        };
        let a = Attempt {
            id: new.id,
            job_id: new.job_id,
            purpose: new.purpose,
            provider: new.provider.clone(),
            endpoint: new.endpoint.clone(),
            model: new.model.clone(),
            attempt_no,
            state: AttemptState::Submitting,
            idempotency_key: new.idempotency_key.clone(),
            provider_job_id: None,
            error_class: None,
            error: None,
            duration_ms: None,
            usage: None,
            cost_usd: None,
            cost_source: None,
            hold_usd: new.hold.map(|h| h.amount),
            budget_day: new.hold.map(|h| h.day),
            settled_usd: None,
            started_at: new.started_at,
            finished_at: None,
        };
        Ok(match self.run.commit(vec![Op::BeginAttempt(new)]).await? {
            Applied::Refused => None,
            _ => {
                // The hold may carry the day past a share worth telling.
                if let Some(day) = a.budget_day {
                    if let Err(e) = self.run.t.note_thresholds(day).await {
                        tracing::warn!(error = %e, "could not note the day's spend thresholds");
                    }
                }
                Some(a)
            }
        })
    }

    /// One paid attempt of `spec`, written down before it is sent (rule 7)
    /// and only if the day can hold it (rule 11), then followed to its end.
    async fn try_once(
        &mut self,
        spec: &ModelSpec,
        previous: &mut Vec<Attempt>,
    ) -> StoreResult<Tried> {
        if self.run.stopping() {
            return Ok(Tried::Settled(Generated::Released));
        }
        let attempt_no = previous
            .iter()
            .map(|a| a.attempt_no)
            .max()
            .unwrap_or(0)
            .max(self.run.attempt_floor)
            + 1;
        self.run.attempt_floor = attempt_no;
        // Every await here but `follow`'s is boxed, so the run waiting in
        // `follow` is not as large as the largest of them (issue 32, 3).
        let Some(mut a) = Box::pin(self.begin(spec, attempt_no)).await? else {
            return Ok(Tried::Settled(failure(
                FailureCode::SpendingPaused,
                "Spending is paused for today; your credits were refunded. Please try again later.",
            )));
        };
        // Exactly one more: a first push would make room for four attempts,
        // a kilobyte that 100,000 waiting runs would each hold (heaptrack).
        previous.reserve_exact(1);
        previous.push(a.clone());
        let input = self.input(spec).await?;
        let sent = self
            .provider(spec)
            .submit(spec, &input, &a.idempotency_key)
            .await;
        drop(input);
        let attempted = match sent {
            Ok(Submission::Finished(f)) => Attempted::Succeeded(f),
            Ok(Submission::Accepted { provider_job_id }) => {
                Box::pin(self.accepted(&mut a, provider_job_id.clone())).await?;
                self.follow(spec, &a, &provider_job_id).await?
            }
            Err(e) if e.class == ErrorClass::Uncertain => {
                Box::pin(self.recover_uncertain(spec, &a)).await?
            }
            Err(e) => Attempted::Failed(e),
        };
        let failed = match &attempted {
            Attempted::Failed(e) => Some(e.clone()),
            _ => None,
        };
        if let Some(e) = &failed {
            // The class and the model, never the provider's message (it
            // may echo the request).
            tracing::warn!(job = %self.run.job().id, model = %spec.id, attempt = attempt_no, class = ?e.class, "a provider call failed");
        }
        if let Some(done) = Box::pin(self.conclude(spec, &a, attempted)).await? {
            return Ok(Tried::Settled(done));
        }
        Ok(match failed {
            Some(e) => Tried::Failed(e, Box::new(a)),
            None => Tried::Again,
        })
    }

    /// The chain: each model's remaining attempts, then the next model where
    /// the policy allows it. `previous` are the job's attempts so far (only
    /// how many there are, and of which model, is used).
    ///
    /// Long on purpose: one loop whose state (attempts used per model, the
    /// last failure and its attempt, the backoff) spans retry, fallback and
    /// the park-on-failure policy; one attempt (`try_once`) and the park
    /// (`parked_by_policy`) are already apart.
    async fn chain(
        &mut self,
        chain: &[&ModelSpec],
        mut previous: Vec<Attempt>,
        recovered: Recovered,
    ) -> StoreResult<Generated> {
        let job = self.run.job().id;
        let mut last: Option<ProviderError> = recovered.last;
        // The attempt that failed last, and its model's place in the chain.
        let mut failed_last: Option<(usize, Attempt)> = None;
        for (i, spec) in chain.iter().enumerate() {
            let mut used = previous
                .iter()
                .filter(|a| a.model == spec.id && a.purpose == Purpose::Generate)
                .count() as u32;
            if recovered.spent_models.contains(&spec.id) {
                used = spec.attempts;
            }
            let mut delays = backoff(spec);
            let mut leave = FallbackReason::Exhausted;
            while used < spec.attempts {
                let (error, a) = match self.try_once(spec, &mut previous).await? {
                    Tried::Settled(done) => return Ok(done),
                    Tried::Again => {
                        used += 1;
                        continue;
                    }
                    Tried::Failed(error, a) => {
                        used += 1;
                        (error, a)
                    }
                };
                failed_last = Some((i, (*a).clone()));
                let can_leave =
                    |r: FallbackReason| i + 1 < chain.len() && chain[0].fallback_on.contains(&r);
                match error.class {
                    ErrorClass::Unavailable if can_leave(FallbackReason::Unavailable) => {
                        leave = FallbackReason::Unavailable;
                        last = Some(error);
                        break;
                    }
                    // It may have been charged for the full run: past the
                    // window, the same model is not tried again.
                    ErrorClass::Refused | ErrorClass::Failed
                        if spec
                            .prediction_window
                            .is_some_and(|w| since(a.started_at) > w) =>
                    {
                        last = Some(error);
                        break;
                    }
                    _ => {}
                }
                let retry_after = error.retry_after;
                last = Some(error);
                if used < spec.attempts {
                    let d =
                        retry_after.unwrap_or_else(|| delays.next().unwrap_or(spec.backoff_max));
                    if self.run.pause(d).await {
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
        if let Some(parked) = parked_by_policy(chain, last.as_ref(), failed_last.as_ref()) {
            return Ok(Generated::Parked(parked));
        }
        Ok(match last {
            Some(e) => stop(&e),
            None => failure(
                FailureCode::GenerationFailed,
                "No attempts were left to make; your credits were refunded.",
            ),
        })
    }
}

/// The prediction was accepted and may be billed in full; refused status
/// checks prove nothing about it.
fn checks_refused(spec: &ModelSpec, a: &Attempt, polls: i32, e: &ProviderError) -> NewParked {
    NewParked {
        polls,
        ..parked(
            ParkedStage::PollingExhausted,
            spec,
            a,
            ParkedEvidence::because("The provider refused our credentials while we checked an accepted prediction; it may still be billed.")
                .with("last_error", e.message.clone()),
        )
    }
}

/// A reviewer resumed checks on an id the provider does not know (a
/// mistyped reconcile, or one it forgot): back to the stage where the
/// right one can be attached.
fn unknown_to_provider(
    spec: &ModelSpec,
    a: &Attempt,
    polls: i32,
    id: &str,
    e: &ProviderError,
) -> NewParked {
    NewParked {
        polls,
        provider_job_id: None,
        ..parked(
            ParkedStage::SubmissionUncertain,
            spec,
            a,
            ParkedEvidence::because(format!("The provider does not know the job {id} that status checks resumed for; find the prediction made under our idempotency key and reconcile again."))
                .with("unknown_provider_job_id", id)
                .with("idempotency_key", a.idempotency_key.clone())
                .with("last_error", e.message.clone()),
        )
    }
}

/// No final status within the polling time.
fn polling_exhausted(
    spec: &ModelSpec,
    a: &Attempt,
    polls: i32,
    last_error: Option<String>,
) -> NewParked {
    NewParked {
        polls,
        ..parked(
            ParkedStage::PollingExhausted,
            spec,
            a,
            ParkedEvidence::because(format!(
                "No final status after {polls} status checks ({} s of polling allowed).",
                spec.poll_timeout.as_secs()
            ))
            .with("last_error", last_error),
        )
    }
}

/// What one attempt of the chain came to.
enum Tried {
    /// The job's generate step ended (or the run was released).
    Settled(Generated),
    /// It failed in a way the chain may retry, and this is why.
    Failed(ProviderError, Box<Attempt>),
    /// It ended without settling the step or failing: try again.
    Again,
}

/// The provider said it failed and the model's policy is to park: a
/// reviewer accepts the failure or orders a new attempt.
fn parked_by_policy(
    chain: &[&ModelSpec],
    last: Option<&ProviderError>,
    failed_last: Option<&(usize, Attempt)>,
) -> Option<NewParked> {
    let (e, (i, a)) = (last?, failed_last?);
    let spec = &chain[*i];
    (e.class == ErrorClass::Failed && spec.on_failure == OnFailure::Park).then(|| {
        parked(
            ParkedStage::GenerationFailed,
            spec,
            a,
            ParkedEvidence::because("The provider reported the generation failed; by this model's policy a reviewer decides what happens next.")
                .with("last_error", e.message.clone()),
        )
    })
}

fn duration_ms(a: &Attempt) -> i64 {
    i64::try_from(since(a.started_at).as_millis()).unwrap_or(i64::MAX)
}

/// The failure a job ends with after this error.
fn stop(e: &ProviderError) -> Generated {
    let (code, message) = match e.class {
        ErrorClass::Auth => (
            FailureCode::ProviderAuth,
            "The provider refused Tollgate's credentials; an admin must fix the configuration.",
        ),
        ErrorClass::InvalidInput => (
            FailureCode::ProviderRejectedInput,
            "The provider could not use this request.",
        ),
        ErrorClass::Cancelled => (
            FailureCode::ProviderCancelled,
            "The provider cancelled the generation.",
        ),
        ErrorClass::Refused => (
            FailureCode::ContentRefused,
            "The provider refused this request under its content policy.",
        ),
        ErrorClass::Unavailable => (
            FailureCode::ProviderUnavailable,
            "The provider is unavailable; please try again later.",
        ),
        _ => (
            FailureCode::GenerationFailed,
            "The generation did not succeed.",
        ),
    };
    let said = ProviderSaid {
        error_class: e.class,
        provider_message: e.message.clone(),
    };
    Generated::Failed(
        JobFailure::new(code, format!("{message} Your credits were refunded.")).with_details(said),
    )
}

/// A park of attempt `a`: the evidence says why, and always what was sent,
/// when, under which key, and how long it has been.
fn parked(
    stage: ParkedStage,
    spec: &ModelSpec,
    a: &Attempt,
    mut evidence: ParkedEvidence,
) -> NewParked {
    evidence.attempt = Some(Box::new(SentAttempt {
        attempt_no: Some(a.attempt_no),
        model: Some(spec.id.clone()),
        provider: spec.provider_name().into(),
        endpoint: spec.endpoint.clone(),
        sent_at: Some(a.started_at),
        idempotency_key: a.idempotency_key.clone(),
        provider_job_id: a.provider_job_id.clone(),
    }));
    evidence.waited_s = Some(since(a.started_at).as_secs());
    NewParked {
        stage,
        evidence,
        provider: Some(spec.provider_name().into()),
        model: Some(spec.id.clone()),
        provider_job_id: a.provider_job_id.clone(),
        attempt_id: Some(a.id),
        polls: 0,
        deliveries: 0,
    }
}

/// A recovery whose attempt concluded with nothing to say (a retryable
/// failure never reaches here): it parks where a person can see it rather
/// than going on.
fn internal_park(spec: &ModelSpec, a: &Attempt) -> Generated {
    Generated::Parked(parked(
        ParkedStage::PollingExhausted,
        spec,
        a,
        ParkedEvidence::because("The resumed status checks ended without a final answer."),
    ))
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

/// Tests of the pure parts; the runner's behaviour is tested against the
/// mock provider in `tests/it/providers.rs` on both backends.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_costs_are_numbers() {
        assert_eq!(stored_cost(Cost::Unknown), None);
        assert_eq!(
            stored_cost(Cost::Nothing),
            Some((Usd::ZERO, CostSource::Derived))
        );
        let q = Usd::parse("0.05").unwrap();
        assert_eq!(stored_cost(Cost::Quoted(q)), Some((q, CostSource::Quoted)));
    }
}
