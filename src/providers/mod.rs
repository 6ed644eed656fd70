//! Paid model providers: the `Provider` trait (submit with our idempotency
//! key, poll, look up by key, fetch the output), its `local` and `http`
//! implementations, the checkers, and the mock provider server tests call
//! over HTTP. A provider knows one call at a time: what to do next (retry,
//! fall back, park) is the attempt runner's (`engine::runner`), and which
//! models exist is configuration's (`config::models`). This layer imports
//! only `model`, `config` and `net`.

pub mod checker;
pub mod http;
pub mod local;
pub mod mock;

use crate::config::models::ModelSpec;
use crate::model::Usd;
use serde_json::Value;
use std::time::Duration;

pub use crate::model::ErrorClass;

/// What a call cost, as far as anyone knows. `Unknown` is stored as NULL
/// and shown as unpriced: never as zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Nothing was created, so nothing was charged (a 429, 401, 422, 503).
    Nothing,
    /// The provider said what it charged.
    Quoted(Usd),
    /// Worked out from units and the rate card.
    Derived(Usd),
    /// Nobody could price it.
    Unknown,
}

impl Cost {
    /// The stored pair: `(cost_usd, cost_source)`.
    pub fn stored(self) -> (Option<Usd>, Option<&'static str>) {
        match self {
            Cost::Nothing => (Some(Usd::ZERO), Some("derived")),
            Cost::Quoted(u) => (Some(u), Some("quoted")),
            Cost::Derived(u) => (Some(u), Some("derived")),
            Cost::Unknown => (None, None),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ProviderError {
    pub class: ErrorClass,
    pub message: String,
    /// From a `Retry-After` header.
    pub retry_after: Option<Duration>,
    pub cost: Cost,
}

impl ProviderError {
    pub fn new(class: ErrorClass, message: impl Into<String>, cost: Cost) -> ProviderError {
        ProviderError {
            class,
            message: message.into(),
            retry_after: None,
            cost,
        }
    }
}

/// Where a finished prediction's output is.
#[derive(Clone, Debug)]
pub enum Output {
    Bytes {
        bytes: Vec<u8>,
        content_type: String,
    },
    Url(String),
}

#[derive(Clone, Debug)]
pub struct Finished {
    pub output: Output,
    pub cost: Cost,
    pub usage: Value,
}

pub enum Submission {
    /// Done in the call (the local provider).
    Finished(Finished),
    /// Accepted: poll this id.
    Accepted { provider_job_id: String },
}

/// What a look-up by our idempotency key found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The prediction made under our key.
    Found(String),
    /// The answer the model's configuration says means "nothing was made
    /// under this key": nothing was charged, and a new attempt is safe.
    NotFound,
    /// Any other answer: it proves nothing either way.
    Unclear(String),
}

pub enum Poll {
    Pending,
    Succeeded(Finished),
    Failed(ProviderError),
}

/// What the runner hands a provider.
#[derive(Clone, Debug)]
pub struct Input {
    pub request: crate::model::JobRequest,
    pub photo: Option<Vec<u8>>,
    pub mask: Option<Vec<u8>>,
    /// What the rate card says this job costs (the job's estimate).
    pub rate_card_usd: Usd,
    /// A repair: the version the person has now (what is repaired) and
    /// their instruction. The original `photo` stays the identity and scene
    /// authority.
    pub previous: Option<Vec<u8>>,
    pub instruction: Option<String>,
    /// What the readiness checker saw, for the edit to use.
    pub observation: Option<String>,
}

/// Anything that turns a request into an output for money.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// Sends the request under our idempotency key.
    async fn submit(
        &self,
        model: &ModelSpec,
        input: &Input,
        key: &str,
    ) -> Result<Submission, ProviderError>;
    async fn poll(&self, model: &ModelSpec, provider_job_id: &str) -> Result<Poll, ProviderError>;
    /// The prediction made under our key, if the provider can say.
    async fn lookup(&self, model: &ModelSpec, key: &str) -> Result<Lookup, ProviderError>;
    /// The output's bytes and content type.
    async fn fetch(
        &self,
        model: &ModelSpec,
        output: &Output,
    ) -> Result<(Vec<u8>, String), ProviderError>;
}
