//! The `http` provider: a client for async prediction APIs (API.md, "The
//! mock provider"): submit with `Idempotency-Key`, poll, look up by key,
//! `Retry-After`, quoted cost. It classifies every answer; what to do about
//! it is the runner's business.

use super::{
    Cost, ErrorClass, Finished, Input, Lookup, Output, Poll, Provider, ProviderError, Submission,
};
use crate::config::models::{ModelSpec, Submit503};
use crate::model::{JobRequest, Usd};
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

/// Outputs larger than this are refused (a bound on what we download).
const OUTPUT_BYTES_MAX: usize = 256 * 1024 * 1024;

#[derive(Clone)]
pub struct HttpProvider {
    client: reqwest::Client,
    /// Fetches outputs from hosts other than the model's endpoint: its
    /// resolver is the address guard, so it connects only to addresses the
    /// guard checked when it connects, whatever the name says by then (a
    /// name rebound to an internal address between the check and the
    /// connection is never reached; issue 29, 8).
    outputs: reqwest::Client,
    /// Checks output hosts other than the model's endpoint.
    guard: crate::net::guard::Guard,
}

impl Default for HttpProvider {
    fn default() -> Self {
        HttpProvider::new()
    }
}

/// Redirects are followed only within the host first asked (at most five):
/// a provider cannot send us, or our key, anywhere else.
fn same_host_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt
            .previous()
            .first()
            .map(|u| (u.host_str().map(str::to_string), u.port_or_known_default()));
        let next = (
            attempt.url().host_str().map(str::to_string),
            attempt.url().port_or_known_default(),
        );
        if attempt.previous().len() > 5 || first != Some(next) {
            attempt.stop()
        } else {
            attempt.follow()
        }
    })
}

impl HttpProvider {
    pub fn new() -> HttpProvider {
        HttpProvider::with_guard(crate::net::guard::Guard::default())
    }

    pub fn with_guard(guard: crate::net::guard::Guard) -> HttpProvider {
        HttpProvider {
            client: reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_secs(30))
                // Thousands of runs wait on predictions at once; a bounded
                // pool keeps memory flat instead of a socket per run. As
                // many as a node's runs in flight by default (256): fewer
                // closed and reopened a connection for most calls under load.
                .pool_max_idle_per_host(256)
                .redirect(same_host_redirects())
                .build()
                .unwrap_or_default(),
            outputs: reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_secs(30))
                .redirect(same_host_redirects())
                .no_proxy()
                .dns_resolver(std::sync::Arc::new(crate::net::guard::GuardedResolver(
                    guard.clone(),
                )))
                .build()
                .unwrap_or_default(),
            guard,
        }
    }

    fn request(
        &self,
        model: &ModelSpec,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let base = model.endpoint.as_deref().unwrap_or_default();
        let mut r = self
            .client
            .request(method, format!("{base}{path}"))
            .timeout(model.request_timeout);
        if let Some(key) = &model.api_key {
            r = r.bearer_auth(key);
        }
        r
    }
}

impl HttpProvider {
    /// `POST /v1/predictions` under our key, and the provider's answer.
    /// What a failure proves about whether anything was created (and so
    /// charged) decides its cost: refused before sending, nothing; sent
    /// without an answer, it may have been accepted.
    async fn create(
        &self,
        model: &ModelSpec,
        input: &Value,
        key: &str,
    ) -> Result<Value, ProviderError> {
        let sent = self
            .request(model, reqwest::Method::POST, "/v1/predictions")
            .header("Idempotency-Key", key)
            .json(&json!({"model": model.remote_model, "input": input}))
            .send()
            .await;
        let r = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => {
                return Err(ProviderError::new(
                    ErrorClass::Unavailable,
                    format!("cannot connect: {e}"),
                    Cost::Nothing,
                ))
            }
            Err(e) => {
                return Err(ProviderError::new(
                    ErrorClass::Uncertain,
                    format!("no answer to the submission: {e}"),
                    Cost::Unknown,
                ))
            }
        };
        if !r.status().is_success() {
            return Err(classify(r, model, Asked::Submit).await);
        }
        r.json().await.map_err(|e| {
            ProviderError::new(
                ErrorClass::Uncertain,
                format!("the submission's answer was unreadable: {e}"),
                Cost::Unknown,
            )
        })
    }

    /// One checker call (rule 14): the question sent under our key, then
    /// polled until it is answered or the checker's window passes. Returns
    /// the prediction's `output` as it came (the checker module reads it
    /// strictly) and what it cost.
    pub async fn check(
        &self,
        checker: &ModelSpec,
        input: &Value,
        key: &str,
    ) -> Result<(Value, Cost), ProviderError> {
        let body = self.create(checker, input, key).await?;
        // The id goes into a path: only plain ids are accepted.
        let Some(id) = body["id"].as_str().map(str::to_string).filter(|id| {
            !id.is_empty()
                && id.len() <= 200
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }) else {
            return Err(ProviderError::new(
                ErrorClass::Uncertain,
                "the check's answer named no usable prediction",
                Cost::Unknown,
            ));
        };
        let deadline = tokio::time::Instant::now() + checker.poll_timeout;
        let mut v = body;
        loop {
            match v["status"].as_str() {
                Some("succeeded") => return Ok((v["output"].clone(), cost_of(&v))),
                Some("failed" | "canceled" | "cancelled") => {
                    return Err(ProviderError::new(
                        ErrorClass::Failed,
                        v["error"]["message"]
                            .as_str()
                            .unwrap_or("the check failed")
                            .to_string(),
                        cost_of(&v),
                    ))
                }
                _ => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ProviderError::new(
                    ErrorClass::Timeout,
                    "the checker did not answer in time",
                    Cost::Unknown,
                ));
            }
            tokio::time::sleep(checker.poll_interval).await;
            let r = self
                .request(
                    checker,
                    reqwest::Method::GET,
                    &format!("/v1/predictions/{id}"),
                )
                .send()
                .await
                .map_err(|e| {
                    ProviderError::new(ErrorClass::Timeout, e.to_string(), Cost::Unknown)
                })?;
            if !r.status().is_success() {
                return Err(classify(r, checker, Asked::Read).await);
            }
            v = r.json().await.map_err(|e| {
                ProviderError::new(ErrorClass::Timeout, e.to_string(), Cost::Unknown)
            })?;
        }
    }
}

/// An image as a data URI, for a provider's JSON.
pub(crate) fn data_uri(bytes: &[u8]) -> String {
    let kind = match bytes {
        [0x89, b'P', b'N', b'G', ..] => "image/png",
        [0xFF, 0xD8, ..] => "image/jpeg",
        _ => "image/webp",
    };
    format!(
        "data:{kind};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The provider's `input`: the request's settings as labelled data, images
/// as data URIs. User text is a field, never an instruction.
fn input_json(input: &Input) -> Value {
    match &input.request {
        JobRequest::ImageEdit(e) => json!({
            "task": "image_edit",
            "image": input.photo.as_deref().map(data_uri),
            "mask": input.mask.as_deref().map(data_uri),
            "target": {"kind": e.target.kind.as_str(), "description": e.target.description},
            "style": e.style,
            "strength": e.strength.as_str(),
            // What the readiness check saw, and a repair's version and
            // instruction: labelled data, never instructions to follow blindly.
            "observation": input.observation,
            "repair": input.instruction.as_ref().map(|i| json!({
                "instruction": i,
                "current_version": input.previous.as_deref().map(data_uri),
            })),
        }),
        JobRequest::Video(v) => json!({
            "task": "video",
            "prompt": v.prompt,
            "duration_s": v.duration_s,
            "resolution": v.resolution.as_str(),
            "image": input.photo.as_deref().map(data_uri),
        }),
    }
}

fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let secs: f64 = v.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(3600.0)))
}

async fn error_message(r: reqwest::Response) -> String {
    let status = r.status();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    let message = body["error"]["message"]
        .as_str()
        .or(body["error"].as_str())
        .unwrap_or("no message");
    format!("{status}: {message}")
}

/// Where an answer that was not 2xx came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// A submission: what the status proves about whether anything was
    /// created (and so charged) decides the cost.
    Submit,
    /// A poll, a look-up or a download: it creates nothing; what the
    /// prediction cost is the runner's to decide.
    Read,
}

/// What an answer to a submit or a poll that was not 2xx means.
async fn classify(r: reqwest::Response, model: &ModelSpec, asked: Asked) -> ProviderError {
    let status = r.status();
    let after = retry_after(r.headers());
    let message = error_message(r).await;
    let class = match status {
        StatusCode::TOO_MANY_REQUESTS => ErrorClass::RateLimited,
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ErrorClass::Auth,
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => ErrorClass::InvalidInput,
        // A load balancer may answer 503 after the request was accepted.
        StatusCode::SERVICE_UNAVAILABLE
            if asked == Asked::Submit && model.submit_503 == Submit503::Uncertain =>
        {
            ErrorClass::Uncertain
        }
        StatusCode::SERVICE_UNAVAILABLE => ErrorClass::Unavailable,
        // A gateway error after a submit may hide an accepted request.
        s if s.is_server_error() && asked == Asked::Submit => ErrorClass::Uncertain,
        s if s.is_server_error() => ErrorClass::Timeout,
        StatusCode::NOT_FOUND if asked == Asked::Read => ErrorClass::NotFound,
        _ if asked == Asked::Submit => ErrorClass::InvalidInput,
        _ => ErrorClass::Timeout,
    };
    // Only a submission refused outright proves nothing was created.
    let cost = if asked == Asked::Submit && class != ErrorClass::Uncertain {
        Cost::Nothing
    } else {
        Cost::Unknown
    };
    ProviderError {
        class,
        message,
        retry_after: after,
        cost,
    }
}

fn cost_of(v: &Value) -> Cost {
    match v["cost_usd"].as_str().map(Usd::parse) {
        Some(Ok(u)) => Cost::Quoted(u),
        _ => Cost::Unknown,
    }
}

#[async_trait::async_trait]
impl Provider for HttpProvider {
    async fn submit(
        &self,
        model: &ModelSpec,
        input: &Input,
        key: &str,
    ) -> Result<Submission, ProviderError> {
        let body = self.create(model, &input_json(input), key).await?;
        match body["id"].as_str() {
            Some(id) if !id.is_empty() => Ok(Submission::Accepted {
                provider_job_id: id.to_string(),
            }),
            _ => Err(ProviderError::new(
                ErrorClass::Uncertain,
                "the submission's answer named no prediction",
                Cost::Unknown,
            )),
        }
    }

    async fn poll(&self, model: &ModelSpec, provider_job_id: &str) -> Result<Poll, ProviderError> {
        // The id goes into a path: only plain ids are accepted.
        if !crate::model::is_plain_provider_job_id(provider_job_id) {
            return Ok(Poll::Failed(ProviderError::new(
                ErrorClass::Failed,
                format!("the provider's prediction id {provider_job_id:?} is not usable"),
                Cost::Unknown,
            )));
        }
        let path = format!("/v1/predictions/{provider_job_id}");
        let r = self
            .request(model, reqwest::Method::GET, &path)
            .send()
            .await
            .map_err(|e| ProviderError::new(ErrorClass::Timeout, e.to_string(), Cost::Unknown))?;
        if !r.status().is_success() {
            return Err(classify(r, model, Asked::Read).await);
        }
        let v: Value = r
            .json()
            .await
            .map_err(|e| ProviderError::new(ErrorClass::Timeout, e.to_string(), Cost::Unknown))?;
        let usage = json!({"predict_time": v["metrics"]["predict_time"]});
        Ok(match v["status"].as_str() {
            Some("succeeded") => match v["output"].as_str() {
                Some(url) => Poll::Succeeded(Finished {
                    output: Output::Url(url.to_string()),
                    cost: cost_of(&v),
                    usage,
                }),
                None => Poll::Failed(ProviderError::new(
                    ErrorClass::Failed,
                    "the provider reported success without an output",
                    cost_of(&v),
                )),
            },
            Some("failed") => {
                let code = v["error"]["code"].as_str().unwrap_or_default();
                let message = v["error"]["message"]
                    .as_str()
                    .unwrap_or("the prediction failed")
                    .to_string();
                let class = if code.contains("refus") || code.contains("content") {
                    ErrorClass::Refused
                } else {
                    ErrorClass::Failed
                };
                Poll::Failed(ProviderError::new(class, message, cost_of(&v)))
            }
            Some("canceled" | "cancelled") => Poll::Failed(ProviderError::new(
                ErrorClass::Cancelled,
                "the provider cancelled the prediction",
                cost_of(&v),
            )),
            _ => Poll::Pending,
        })
    }

    async fn lookup(&self, model: &ModelSpec, key: &str) -> Result<Lookup, ProviderError> {
        let r = self
            .request(model, reqwest::Method::GET, "/v1/predictions")
            .query(&[("idempotency_key", key)])
            .send()
            .await
            .map_err(|e| ProviderError::new(ErrorClass::Timeout, e.to_string(), Cost::Unknown))?;
        let status = r.status();
        if status == StatusCode::NOT_FOUND {
            // Only the answer the model declares means "nothing under this
            // key"; any other 404 (a provider without look-ups) proves nothing.
            let body: Value = r.json().await.unwrap_or(Value::Null);
            let code = body["error"]["code"].as_str().unwrap_or_default();
            return Ok(if code == model.lookup_not_found_code {
                Lookup::NotFound
            } else {
                Lookup::Unclear(format!("404 with error code {code:?}"))
            });
        }
        if !status.is_success() {
            return Err(classify(r, model, Asked::Read).await);
        }
        let v: Value = r
            .json()
            .await
            .map_err(|e| ProviderError::new(ErrorClass::Timeout, e.to_string(), Cost::Unknown))?;
        Ok(match v["id"].as_str() {
            Some(id) if !id.is_empty() => Lookup::Found(id.to_string()),
            _ => Lookup::Unclear(format!("{status} without a prediction id")),
        })
    }

    async fn fetch(
        &self,
        model: &ModelSpec,
        output: &Output,
    ) -> Result<(Vec<u8>, String), ProviderError> {
        let url = match output {
            Output::Bytes {
                bytes,
                content_type,
            } => return Ok((bytes.clone(), content_type.clone())),
            Output::Url(u) => u,
        };
        let request = self.output_request(model, url).await?;
        let r = request.send().await.map_err(output_timeout)?;
        if !r.status().is_success() {
            return Err(classify(r, model, Asked::Read).await);
        }
        read_output(r).await
    }
}

impl HttpProvider {
    /// The request for an output URL, joined to the endpoint with a URL
    /// parser (a relative path stays on the endpoint's host); another host
    /// only where the model lists it, through the address guard, and never
    /// with our key.
    async fn output_request(
        &self,
        model: &ModelSpec,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, ProviderError> {
        let base = reqwest::Url::parse(model.endpoint.as_deref().unwrap_or_default())
            .map_err(|e| output_refused(format!("the endpoint is not a URL ({e})")))?;
        let target = base
            .join(url)
            .map_err(|e| output_refused(format!("{url:?} is not a URL ({e})")))?;
        if !matches!(target.scheme(), "http" | "https") {
            return Err(output_refused(format!(
                "{} is not http(s)",
                target.scheme()
            )));
        }
        let same_host = target.host_str() == base.host_str()
            && target.port_or_known_default() == base.port_or_known_default();
        if same_host {
            let mut r = self.client.get(target).timeout(model.request_timeout);
            if let Some(key) = &model.api_key {
                r = r.bearer_auth(key);
            }
            return Ok(r);
        }
        let host = target.host_str().unwrap_or_default().to_ascii_lowercase();
        if !model.output_hosts.contains(&host) {
            return Err(output_refused(format!(
                "{host} is neither the endpoint's host nor in the model's output_hosts"
            )));
        }
        self.guard
            .check_url(target.as_str())
            .await
            .map_err(|e| output_refused(e.to_string()))?;
        Ok(self.outputs.get(target).timeout(model.request_timeout))
    }
}

/// The output's bytes and claimed type, refused past `OUTPUT_BYTES_MAX`.
async fn read_output(mut r: reqwest::Response) -> Result<(Vec<u8>, String), ProviderError> {
    let content_type = r
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_string();
    let mut bytes = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(output_timeout)? {
        if bytes.len() + chunk.len() > OUTPUT_BYTES_MAX {
            return Err(ProviderError::new(
                ErrorClass::Failed,
                "the output is larger than 256 MiB",
                Cost::Unknown,
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, content_type))
}

fn output_timeout(e: reqwest::Error) -> ProviderError {
    ProviderError::new(ErrorClass::Timeout, format!("output: {e}"), Cost::Unknown)
}

fn output_refused(why: String) -> ProviderError {
    ProviderError::new(
        ErrorClass::Failed,
        format!("output URL refused: {why}"),
        Cost::Unknown,
    )
}
