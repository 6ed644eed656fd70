//! The models Tollgate may call, read from `TOLLGATE_CONFIG` (`[[models]]`)
//! or, without a file, the built-in local models. Each entry says which
//! provider serves it, what it costs, and the attempt runner's policy for
//! it: attempts, fallback, prediction window, backoff, and what to do when
//! a request may have been accepted without an answer (`on_uncertain`) or
//! the provider reported it failed (`on_failure`).
//! What a provider honours (idempotency keys, lookup by key) is declared
//! here, never guessed.

use crate::config::ConfigError;
use crate::model::{Catalogue, EditModel, JobKind, Resolution, Usd, VideoModel, VideoPrice};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    Local,
    Http,
}

/// What happens to a job whose request may have been accepted but got no
/// answer, when the provider can neither deduplicate nor be asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUncertain {
    /// Parked in `submission_uncertain` for a reviewer's decision.
    Park,
    /// Failed and refunded to the user; the budget hold stays booked.
    Refund,
}

/// What happens to a job whose generation the provider reported failed,
/// once the model's attempts and fallbacks are spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// Failed and refunded to the user.
    Refund,
    /// Parked in `generation_failed` for a reviewer, who may accept the
    /// failure or order a new attempt.
    Park,
}

/// Why the chain may move on to the next model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackReason {
    /// The model's attempts ran out (failures, refusals, an expired window).
    Exhausted,
    /// The provider answered 503 or could not be reached.
    Unavailable,
}

/// One model and the runner's policy for it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    pub id: String,
    pub name: String,
    pub kind: JobKind,
    pub provider: ProviderKind,
    /// Base URL of an `http` provider.
    pub endpoint: Option<String>,
    /// The provider's own name for the model (defaults to `id`).
    pub remote_model: String,
    /// Sent as a bearer token when set (read from this environment variable).
    pub api_key: Option<String>,
    /// Hosts other than the endpoint's that its output URLs may name (a
    /// CDN); our API key is never sent to them.
    pub output_hosts: Vec<String>,
    pub price: Price,
    /// Video durations the model accepts.
    pub durations_s: Vec<u32>,
    pub attempts: u32,
    pub on_uncertain: OnUncertain,
    pub on_failure: OnFailure,
    pub default: bool,
    /// A repeated `Idempotency-Key` is not paid again.
    pub idempotency: bool,
    /// A prediction can be found by our key.
    pub lookup: bool,
    /// The `error.code` of the 404 a lookup answers when nothing was made
    /// under our key: only that answer may start a new paid attempt.
    pub lookup_not_found_code: String,
    /// What a 503 to a submission means: it may come from a load balancer
    /// after the request was accepted, so it is uncertain unless the model
    /// declares that its 503s create nothing.
    pub submit_503: Submit503,
    pub fallback: Vec<String>,
    pub fallback_on: Vec<FallbackReason>,
    /// After this long a prediction may have been charged in full: the same
    /// model is not retried once a prediction ran past it.
    pub prediction_window: Option<Duration>,
    /// How long one unit of work usually runs: polling waits most of it
    /// before asking, and backoff grows from a tenth of it.
    pub expected: Option<Duration>,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// One HTTP request's limit.
    pub request_timeout: Duration,
    pub poll_interval: Duration,
    /// After this long without a final status the job is parked.
    pub poll_timeout: Duration,
    /// A local model's own faults, instead of `[local.faults]`.
    pub faults: Option<LocalFaults>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Price {
    PerGeneration(BTreeMap<Resolution, Usd>),
    PerSecond(BTreeMap<Resolution, Usd>),
}

impl ModelSpec {
    /// What this model would charge for a request: the hold a paid attempt
    /// on it takes (rule 11). A resolution the model does not price takes
    /// its dearest rate, so a hold is never too small.
    pub fn estimate(&self, request: &crate::model::JobRequest) -> Usd {
        use crate::model::JobRequest;
        let (rates, per_second) = match &self.price {
            Price::PerGeneration(m) => (m, false),
            Price::PerSecond(m) => (m, true),
        };
        let dearest = rates.values().copied().max().unwrap_or(Usd::ZERO);
        match request {
            JobRequest::ImageEdit(e) => rates
                .values()
                .next()
                .copied()
                .unwrap_or(Usd::ZERO)
                .times(e.strength.price_factor()),
            JobRequest::Video(v) => {
                let rate = rates.get(&v.resolution).copied().unwrap_or(dearest);
                if per_second {
                    rate.times(rust_decimal::Decimal::from(v.duration_s))
                } else {
                    rate
                }
            }
        }
    }

    /// The provider's name as attempts record it.
    pub fn provider_name(&self) -> &'static str {
        match self.provider {
            ProviderKind::Local => "local",
            ProviderKind::Http => "http",
        }
    }
}

/// What a 503 answer to a submission means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Submit503 {
    /// It may have been accepted: the uncertainty window (rule 7).
    Uncertain,
    /// The provider declares a 503 creates nothing: unavailable.
    NotCreated,
}

/// Faults the local provider injects, so every rule can be shown on a laptop.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalFaults {
    #[serde(default)]
    pub latency_ms: u64,
    /// Fractions from 0 to 1 of local calls that fail in each way.
    #[serde(default)]
    pub failure_rate: f64,
    #[serde(default)]
    pub refusal_rate: f64,
    #[serde(default)]
    pub rate_limit_rate: f64,
    /// Succeed without a price.
    #[serde(default)]
    pub unpriced_rate: f64,
    /// Accept (and charge), then drop the answer: the uncertain case.
    #[serde(default)]
    pub drop_after_accept_rate: f64,
}

/// The `[[models]]` list, the checker and the local provider's faults.
#[derive(Clone, Debug)]
pub struct Models {
    pub models: Vec<ModelSpec>,
    pub faults: LocalFaults,
    /// The checker model behind readiness, review and comparison (rule 14),
    /// from `[checker]`; `None` is the built-in local checker, which
    /// measures on this machine's CPU and calls nobody.
    pub checker: Option<Checker>,
}

/// An http checker: a cheap model answering strict JSON about images, never
/// the expensive edit. Its calls are attempts like any other: priced, held
/// against the day's budget, recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Checker {
    /// Endpoint, key and timeouts, in the shape every http call takes.
    pub spec: ModelSpec,
    /// What one check costs (held before each call).
    pub price: Usd,
}

impl Models {
    pub fn get(&self, id: &str) -> Option<&ModelSpec> {
        self.models.iter().find(|m| m.id == id)
    }

    /// The model a request of this kind uses when it names none.
    pub fn default_for(&self, kind: JobKind) -> &ModelSpec {
        self.models
            .iter()
            .find(|m| m.kind == kind && m.default)
            .or_else(|| self.models.iter().find(|m| m.kind == kind))
            .expect("every kind keeps a model: parse adds the local one when none is declared")
    }

    /// The model, then its fallbacks, in order.
    pub fn chain(&self, first: &str) -> Vec<&ModelSpec> {
        let Some(m) = self.get(first) else {
            return Vec::new();
        };
        let mut chain = vec![m];
        for id in &m.fallback {
            if let Some(f) = self.get(id) {
                if !chain.iter().any(|c| c.id == f.id) {
                    chain.push(f);
                }
            }
        }
        chain
    }

    /// What the pages and `quote()` price from.
    pub fn catalogue(&self) -> Catalogue {
        let builtin = Catalogue::builtin();
        let edit = self.default_for(JobKind::ImageEdit);
        let edit_price = match &edit.price {
            Price::PerGeneration(m) | Price::PerSecond(m) => {
                m.values().next().copied().unwrap_or(Usd::ZERO)
            }
        };
        let video_models = self
            .models
            .iter()
            .filter(|m| m.kind == JobKind::Video)
            .map(|m| VideoModel {
                id: m.id.clone(),
                name: m.name.clone(),
                durations_s: m.durations_s.clone(),
                price: match &m.price {
                    Price::PerGeneration(p) => VideoPrice::PerGeneration(p.clone()),
                    Price::PerSecond(p) => VideoPrice::PerSecond(p.clone()),
                },
            })
            .collect();
        Catalogue {
            credit_usd: builtin.credit_usd,
            edit_model: EditModel {
                id: edit.id.clone(),
                name: edit.name.clone(),
                per_generation: edit_price,
            },
            video_models,
            default_video_model: self.default_for(JobKind::Video).id.clone(),
        }
    }

    /// The built-in local models: what a fresh install runs.
    pub fn builtin() -> Models {
        let c = Catalogue::builtin();
        let mut models = vec![local_spec(
            &c.edit_model.id,
            &c.edit_model.name,
            JobKind::ImageEdit,
            Price::PerGeneration(BTreeMap::from([
                (Resolution::P720, c.edit_model.per_generation),
                (Resolution::P1080, c.edit_model.per_generation),
            ])),
            Vec::new(),
        )];
        for v in &c.video_models {
            let price = match &v.price {
                VideoPrice::PerGeneration(p) => Price::PerGeneration(p.clone()),
                VideoPrice::PerSecond(p) => Price::PerSecond(p.clone()),
            };
            let mut spec = local_spec(&v.id, &v.name, JobKind::Video, price, v.durations_s.clone());
            spec.default = v.id == c.default_video_model;
            models.push(spec);
        }
        models[0].default = true;
        Models {
            models,
            faults: LocalFaults::default(),
            checker: None,
        }
    }
}

fn local_spec(
    id: &str,
    name: &str,
    kind: JobKind,
    price: Price,
    durations_s: Vec<u32>,
) -> ModelSpec {
    ModelSpec {
        id: id.into(),
        name: name.into(),
        kind,
        provider: ProviderKind::Local,
        endpoint: None,
        remote_model: id.into(),
        api_key: None,
        output_hosts: Vec::new(),
        price,
        durations_s,
        attempts: 3,
        on_uncertain: OnUncertain::Park,
        on_failure: OnFailure::Refund,
        default: false,
        idempotency: false,
        lookup: false,
        lookup_not_found_code: "not_found".into(),
        submit_503: Submit503::Uncertain,
        fallback: Vec::new(),
        fallback_on: vec![FallbackReason::Exhausted, FallbackReason::Unavailable],
        prediction_window: None,
        expected: None,
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(10),
        request_timeout: Duration::from_secs(120),
        poll_interval: Duration::from_millis(500),
        poll_timeout: Duration::from_secs(600),
        faults: None,
    }
}

// ---- the TOML shape ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    id: String,
    name: Option<String>,
    kind: RawKind,
    #[serde(default = "local")]
    provider: ProviderKind,
    endpoint: Option<String>,
    remote_model: Option<String>,
    api_key_env: Option<String>,
    #[serde(default)]
    output_hosts: Vec<String>,
    price: Option<toml::Table>,
    durations_s: Option<Vec<u32>>,
    attempts: Option<u32>,
    on_uncertain: Option<OnUncertain>,
    on_failure: Option<OnFailure>,
    #[serde(default)]
    default: bool,
    #[serde(default)]
    idempotency: bool,
    #[serde(default)]
    lookup: bool,
    lookup_not_found_code: Option<String>,
    submit_503: Option<Submit503>,
    #[serde(default)]
    fallback: Vec<String>,
    fallback_on: Option<Vec<FallbackReason>>,
    prediction_window_s: Option<f64>,
    expected_s: Option<f64>,
    backoff_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
    timeout_ms: Option<u64>,
    poll_ms: Option<u64>,
    poll_timeout_s: Option<u64>,
    faults: Option<LocalFaults>,
}

/// `[checker]`: which model checks before and after the edit.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChecker {
    #[serde(default = "local")]
    provider: ProviderKind,
    id: Option<String>,
    endpoint: Option<String>,
    remote_model: Option<String>,
    api_key_env: Option<String>,
    /// Per check, as a string ("0.002").
    price: Option<toml::Value>,
    timeout_ms: Option<u64>,
    poll_ms: Option<u64>,
    poll_timeout_s: Option<u64>,
}

fn checker(
    raw: RawChecker,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Checker>, ConfigError> {
    let at = "checker";
    if raw.provider == ProviderKind::Local {
        if raw.endpoint.is_some() || raw.price.is_some() || raw.api_key_env.is_some() {
            return Err(bad(format!(
                "{at}: the local checker takes no endpoint, price or key (it runs on this machine)"
            )));
        }
        return Ok(None);
    }
    let id = raw.id.unwrap_or_else(|| "checker".into());
    if !valid_id(&id) {
        return Err(bad(format!(
            "{at}.id: 1 to 64 letters, digits, '-', '_' or '.'"
        )));
    }
    let endpoint = raw
        .endpoint
        .ok_or_else(|| bad(format!("{at}: an http checker needs an endpoint")))?;
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(bad(format!(
            "{at}.endpoint: {endpoint:?} is not an http(s) URL"
        )));
    }
    let price = amount(
        raw.price
            .as_ref()
            .ok_or_else(|| bad(format!("{at}: an http checker needs a price per check")))?,
        &format!("{at}.price"),
    )?;
    let api_key = match raw.api_key_env {
        None => None,
        Some(var) => Some(
            env(&var)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad(format!("{at}.api_key_env: the variable {var} is not set")))?,
        ),
    };
    let ms = |v: Option<u64>, default: u64, name: &str| -> Result<Duration, ConfigError> {
        let v = v.unwrap_or(default);
        if (1..=3_600_000).contains(&v) {
            Ok(Duration::from_millis(v))
        } else {
            Err(bad(format!("{at}.{name}: {v} is not 1 to 3600000 ms")))
        }
    };
    let mut spec = local_spec(
        &id,
        &id,
        JobKind::ImageEdit,
        Price::PerGeneration(Resolution::ALL.into_iter().map(|r| (r, price)).collect()),
        Vec::new(),
    );
    spec.provider = ProviderKind::Http;
    spec.endpoint = Some(endpoint.trim_end_matches('/').to_string());
    spec.remote_model = raw.remote_model.unwrap_or_else(|| id.clone());
    spec.api_key = api_key;
    spec.attempts = 1;
    spec.request_timeout = ms(raw.timeout_ms, 30_000, "timeout_ms")?;
    spec.poll_interval = ms(raw.poll_ms, 500, "poll_ms")?;
    spec.poll_timeout = Duration::from_secs(raw.poll_timeout_s.unwrap_or(120).clamp(1, 3_600));
    Ok(Some(Checker { spec, price }))
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawKind {
    ImageEdit,
    Video,
}

fn local() -> ProviderKind {
    ProviderKind::Local
}

#[derive(Deserialize)]
struct RawLocal {
    #[serde(default)]
    faults: LocalFaults,
}

fn bad(message: impl Into<String>) -> ConfigError {
    ConfigError::new("TOLLGATE_CONFIG", message)
}

/// An amount written as a string ("0.05"), or an integer. Floats are
/// refused: they cannot hold every cent exactly.
fn amount(v: &toml::Value, at: &str) -> Result<Usd, ConfigError> {
    let text = match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(_) => {
            return Err(bad(format!(
                "{at}: write amounts as strings, like \"0.05\" (floats are not exact)"
            )))
        }
        _ => return Err(bad(format!("{at}: expected an amount like \"0.05\""))),
    };
    let usd = Usd::parse(&text).map_err(|e| bad(format!("{at}: {e}")))?;
    if usd < Usd::ZERO {
        return Err(bad(format!("{at}: must not be negative")));
    }
    Ok(usd)
}

/// One rate for every resolution, or a table `{ "720p" = .., "1080p" = .. }`.
fn rates(v: &toml::Value, at: &str) -> Result<BTreeMap<Resolution, Usd>, ConfigError> {
    match v {
        toml::Value::Table(t) => {
            let mut out = BTreeMap::new();
            for (k, v) in t {
                let r = Resolution::parse(k)
                    .ok_or_else(|| bad(format!("{at}: {k:?} is not 720p or 1080p")))?;
                out.insert(r, amount(v, &format!("{at}.{k}"))?);
            }
            if out.is_empty() {
                return Err(bad(format!("{at}: no resolutions priced")));
            }
            Ok(out)
        }
        other => {
            let a = amount(other, at)?;
            Ok(Resolution::ALL.into_iter().map(|r| (r, a)).collect())
        }
    }
}

fn price(t: &toml::Table, kind: JobKind, at: &str) -> Result<Price, ConfigError> {
    let per_generation = t.get("per_generation");
    let per_second = t.get("per_second");
    let by_resolution: toml::Table = t
        .iter()
        .filter(|(k, _)| Resolution::parse(k).is_some())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(k) = t.keys().find(|k| {
        !matches!(k.as_str(), "per_generation" | "per_second") && Resolution::parse(k).is_none()
    }) {
        return Err(bad(format!(
            "{at}: unknown price {k:?}; use per_generation, per_second, or per resolution (\"720p\", \"1080p\")"
        )));
    }
    let given = [
        per_generation.is_some(),
        per_second.is_some(),
        !by_resolution.is_empty(),
    ]
    .iter()
    .filter(|g| **g)
    .count();
    if given != 1 {
        return Err(bad(format!(
            "{at}: give exactly one of per_generation, per_second, or prices per resolution"
        )));
    }
    if let Some(v) = per_second {
        if kind == JobKind::ImageEdit {
            return Err(bad(format!("{at}: per_second applies to video models")));
        }
        return Ok(Price::PerSecond(rates(v, &format!("{at}.per_second"))?));
    }
    if let Some(v) = per_generation {
        return Ok(Price::PerGeneration(rates(
            v,
            &format!("{at}.per_generation"),
        )?));
    }
    Ok(Price::PerGeneration(rates(
        &toml::Value::Table(by_resolution),
        at,
    )?))
}

fn check_rates(f: &LocalFaults, at: &str) -> Result<(), ConfigError> {
    for (name, rate) in [
        ("failure_rate", f.failure_rate),
        ("refusal_rate", f.refusal_rate),
        ("rate_limit_rate", f.rate_limit_rate),
        ("unpriced_rate", f.unpriced_rate),
        ("drop_after_accept_rate", f.drop_after_accept_rate),
    ] {
        if !(0.0..=1.0).contains(&rate) {
            return Err(bad(format!("{at}.{name}: {rate} is not from 0 to 1")));
        }
    }
    Ok(())
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Reads `[[models]]` and `[local]` from the parsed file. Without models,
/// the built-in local ones; a kind with no declared model keeps its local
/// default, so a file naming only an edit model still offers clips.
pub fn parse(
    file: &toml::Table,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Models, ConfigError> {
    let mut models = Models::builtin();
    if let Some(l) = file.get("local") {
        let raw: RawLocal = l
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| bad(format!("local: {}", e.message())))?;
        check_rates(&raw.faults, "local.faults")?;
        models.faults = raw.faults;
    }
    if let Some(c) = file.get("checker") {
        let raw: RawChecker = c
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| bad(format!("checker: {}", e.message())))?;
        models.checker = checker(raw, env)?;
    }
    let Some(list) = file.get("models") else {
        return Ok(models);
    };
    let toml::Value::Array(list) = list else {
        return Err(bad("models: write each model as a [[models]] table"));
    };
    let mut declared: Vec<ModelSpec> = Vec::new();
    for (i, v) in list.iter().enumerate() {
        let raw: RawModel = v
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| bad(format!("models[{i}]: {}", e.message())))?;
        let at = format!("models[{i}] ({})", raw.id);
        if !valid_id(&raw.id) {
            return Err(bad(format!(
                "{at}: an id is 1 to 64 letters, digits, '-', '_' or '.'"
            )));
        }
        if declared.iter().any(|m| m.id == raw.id) {
            return Err(bad(format!("{at}: the id is declared twice")));
        }
        declared.push(model_spec(&at, raw, env)?);
    }
    check_fallbacks(&declared)?;
    check_defaults(&declared)?;
    // A kind nobody declared keeps its local models.
    for kind in [JobKind::ImageEdit, JobKind::Video] {
        if !declared.iter().any(|m| m.kind == kind) {
            declared.extend(models.models.iter().filter(|m| m.kind == kind).cloned());
        }
    }
    models.models = declared;
    Ok(models)
}

/// One declared model, every field checked (`at` names it in errors).
fn model_spec(
    at: &str,
    mut raw: RawModel,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ModelSpec, ConfigError> {
    let kind = match raw.kind {
        RawKind::ImageEdit => JobKind::ImageEdit,
        RawKind::Video => JobKind::Video,
    };
    let price = match (&raw.price, raw.provider) {
        (Some(t), _) => price(t, kind, &format!("{at}.price"))?,
        (None, ProviderKind::Local) => Models::builtin().default_for(kind).price.clone(),
        (None, ProviderKind::Http) => {
            return Err(bad(format!("{at}: an http model needs a price")))
        }
    };
    let endpoint = endpoint(at, raw.provider, raw.endpoint.take())?;
    let api_key = api_key(at, raw.api_key_env.take(), env)?;
    let attempts = raw.attempts.unwrap_or(3);
    if !(1..=10).contains(&attempts) {
        return Err(bad(format!("{at}.attempts: {attempts} is not 1 to 10")));
    }
    check_local_settings(at, &raw)?;
    let expected = secs(at, raw.expected_s, "expected_s")?;
    // Backoff is sized to how long a unit runs: a tenth of it.
    let backoff_default = expected
        .map(|e| (e.as_millis() as u64 / 10).clamp(200, 60_000))
        .unwrap_or(500);
    let spec = ModelSpec {
        name: raw.name.unwrap_or_else(|| raw.id.clone()),
        remote_model: raw.remote_model.unwrap_or_else(|| raw.id.clone()),
        id: raw.id,
        kind,
        provider: raw.provider,
        endpoint,
        api_key,
        output_hosts: raw
            .output_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect(),
        price,
        durations_s: raw.durations_s.unwrap_or_else(|| vec![2, 3, 5]),
        attempts,
        on_uncertain: raw.on_uncertain.unwrap_or(OnUncertain::Park),
        on_failure: raw.on_failure.unwrap_or(OnFailure::Refund),
        default: raw.default,
        idempotency: raw.idempotency,
        lookup: raw.lookup,
        lookup_not_found_code: raw
            .lookup_not_found_code
            .unwrap_or_else(|| "not_found".into()),
        submit_503: raw.submit_503.unwrap_or(Submit503::Uncertain),
        fallback: raw.fallback,
        fallback_on: raw
            .fallback_on
            .unwrap_or_else(|| vec![FallbackReason::Exhausted, FallbackReason::Unavailable]),
        prediction_window: secs(at, raw.prediction_window_s, "prediction_window_s")?,
        expected,
        backoff_min: ms(at, raw.backoff_ms, backoff_default, "backoff_ms")?,
        backoff_max: ms(at, raw.backoff_max_ms, 30_000, "backoff_max_ms")?,
        request_timeout: ms(at, raw.timeout_ms, 30_000, "timeout_ms")?,
        poll_interval: ms(at, raw.poll_ms, 500, "poll_ms")?,
        poll_timeout: Duration::from_secs(raw.poll_timeout_s.unwrap_or(600).clamp(1, 86_400)),
        faults: raw.faults,
    };
    check_durations(at, &spec)?;
    Ok(spec)
}

/// The key named by `api_key_env`, read once at start-up; a variable that
/// is named but unset stops start-up rather than calling without a key.
fn api_key(
    at: &str,
    var: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    let Some(var) = var else {
        return Ok(None);
    };
    env(&var)
        .filter(|v| !v.is_empty())
        .map(Some)
        .ok_or_else(|| bad(format!("{at}.api_key_env: the variable {var} is not set")))
}

/// A video model offers clips of 1 to 60 seconds, at least one length.
fn check_durations(at: &str, spec: &ModelSpec) -> Result<(), ConfigError> {
    let out_of_range = spec.durations_s.iter().any(|d| !(1..=60).contains(d));
    if spec.kind == JobKind::Video && (spec.durations_s.is_empty() || out_of_range) {
        return Err(bad(format!(
            "{at}.durations_s: give durations from 1 to 60 seconds"
        )));
    }
    Ok(())
}

/// An http model's endpoint (an http(s) URL, no trailing slash); a local
/// model takes none.
fn endpoint(
    at: &str,
    provider: ProviderKind,
    endpoint: Option<String>,
) -> Result<Option<String>, ConfigError> {
    match (provider, endpoint) {
        (ProviderKind::Http, None) => Err(bad(format!("{at}: an http model needs an endpoint"))),
        (ProviderKind::Http, Some(e)) => {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(bad(format!("{at}.endpoint: {e:?} is not an http(s) URL")));
            }
            Ok(Some(e.trim_end_matches('/').to_string()))
        }
        (ProviderKind::Local, Some(_)) => {
            Err(bad(format!("{at}: a local model takes no endpoint")))
        }
        (ProviderKind::Local, None) => Ok(None),
    }
}

/// Local work runs inside this process: nothing to deduplicate, look up
/// or be unsure about at a provider; only local models take faults.
fn check_local_settings(at: &str, raw: &RawModel) -> Result<(), ConfigError> {
    if raw.provider == ProviderKind::Local {
        for (set, name) in [
            (raw.idempotency, "idempotency"),
            (raw.lookup, "lookup"),
            (raw.lookup_not_found_code.is_some(), "lookup_not_found_code"),
            (raw.submit_503.is_some(), "submit_503"),
        ] {
            if set {
                return Err(bad(format!(
                    "{at}.{name}: applies to http models only (local work runs in this process)"
                )));
            }
        }
    }
    if let Some(f) = &raw.faults {
        if raw.provider != ProviderKind::Local {
            return Err(bad(format!("{at}.faults: only a local model takes faults")));
        }
        check_rates(f, &format!("{at}.faults"))?;
    }
    Ok(())
}

/// Seconds from 0 (exclusive) to a day, or none when unset.
fn secs(at: &str, v: Option<f64>, name: &str) -> Result<Option<Duration>, ConfigError> {
    match v {
        None => Ok(None),
        Some(s) if s > 0.0 && s <= 86_400.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(bad(format!("{at}.{name}: {s} is not 0 to 86400 seconds"))),
    }
}

/// Milliseconds from 1 to an hour, or `default`.
fn ms(at: &str, v: Option<u64>, default: u64, name: &str) -> Result<Duration, ConfigError> {
    let v = v.unwrap_or(default);
    if (1..=3_600_000).contains(&v) {
        Ok(Duration::from_millis(v))
    } else {
        Err(bad(format!("{at}.{name}: {v} is not 1 to 3600000 ms")))
    }
}

/// Each fallback names another declared model of the same kind.
fn check_fallbacks(declared: &[ModelSpec]) -> Result<(), ConfigError> {
    for m in declared {
        for f in &m.fallback {
            let why = match declared.iter().find(|d| &d.id == f) {
                None => "is not a declared model",
                Some(d) if d.kind != m.kind => "is a different kind",
                Some(d) if d.id == m.id => {
                    return Err(bad(format!(
                        "models ({}): a model cannot fall back to itself",
                        m.id
                    )))
                }
                Some(_) => continue,
            };
            return Err(bad(format!("models ({}): fallback {f:?} {why}", m.id)));
        }
    }
    Ok(())
}

/// At most one default model per kind.
fn check_defaults(declared: &[ModelSpec]) -> Result<(), ConfigError> {
    for kind in [JobKind::ImageEdit, JobKind::Video] {
        if declared
            .iter()
            .filter(|m| m.kind == kind && m.default)
            .count()
            > 1
        {
            return Err(bad(format!(
                "models: more than one {} model is marked default",
                kind.as_str()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Models, ConfigError> {
        parse(&s.parse::<toml::Table>().unwrap(), &|_| None)
    }

    #[test]
    fn the_issue_shape_works() {
        let m = parse_str(
            r#"
[[models]]
id = "mock-edit"
kind = "image_edit"
provider = "http"
endpoint = "http://127.0.0.1:9100"
price = { per_generation = "0.05" }
attempts = 3
on_uncertain = "park"
default = true
"#,
        )
        .unwrap();
        let e = m.default_for(JobKind::ImageEdit);
        assert_eq!(e.id, "mock-edit");
        assert_eq!(e.provider, ProviderKind::Http);
        assert_eq!(e.endpoint.as_deref(), Some("http://127.0.0.1:9100"));
        assert!(!e.idempotency && !e.lookup);
        let c = m.catalogue();
        assert_eq!(c.edit_model.per_generation, Usd::parse("0.05").unwrap());
        // Video keeps its local models.
        assert_eq!(c.default_video_model, "local-clip");
    }

    #[test]
    fn a_checker_is_declared_apart_from_the_models() {
        let m = parse_str(
            "[checker]\nprovider = \"http\"\nid = \"judge\"\nendpoint = \"http://127.0.0.1:9200/\"\nprice = \"0.002\"\n",
        )
        .unwrap();
        let c = m.checker.as_ref().unwrap();
        assert_eq!(c.spec.id, "judge");
        assert_eq!(c.spec.endpoint.as_deref(), Some("http://127.0.0.1:9200"));
        assert_eq!(c.price, Usd::parse("0.002").unwrap());
        // Never a model a job may be sent to.
        assert!(m.get("judge").is_none());
        assert!(parse_str("").unwrap().checker.is_none());
        for (text, needle) in [
            (
                "[checker]\nprovider = \"http\"\nprice = \"0.01\"",
                "endpoint",
            ),
            (
                "[checker]\nprovider = \"http\"\nendpoint = \"http://x\"",
                "price",
            ),
            ("[checker]\nendpoint = \"http://x\"", "local checker"),
            (
                "[checker]\nprovider = \"http\"\nendpoint = \"http://x\"\nprice = 0.01",
                "floats",
            ),
            ("[checker]\nprovder = \"http\"", "provder"),
        ] {
            let e = parse_str(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn without_a_file_the_local_models_are_defaults() {
        let m = parse_str("").unwrap();
        assert_eq!(m.catalogue(), Catalogue::builtin());
    }

    #[test]
    fn mistakes_name_the_model_and_field() {
        for (text, needle) in [
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\nprovider = \"http\"\nprice = { per_generation = \"1\" }", "endpoint"),
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\nprice = { per_generation = 0.05 }", "floats"),
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\natempts = 3", "atempts"),
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\nattempts = 0", "attempts"),
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\nfallback = [\"b\"]", "fallback"),
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\nprice = { per_second = \"1\" }", "per_second"),
            ("[[models]]\nid = \"a\"\nkind = \"sound\"", "sound"),
            ("[local.faults]\nfailure_rate = 2.0", "failure_rate"),
            // Local work runs in this process: nothing to deduplicate or ask.
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\nidempotency = true", "idempotency"),
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\nlookup = true", "lookup"),
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\nsubmit_503 = \"not_created\"", "submit_503"),
            ("[[models]]\nid = \"a\"\nkind = \"image_edit\"\nprovider = \"http\"\nendpoint = \"http://x\"\nprice = { per_generation = \"1\" }\nsubmit_503 = \"maybe\"", "not_created"),
        ] {
            let e = parse_str(text).unwrap_err();
            assert_eq!(e.setting, "TOLLGATE_CONFIG");
            assert!(e.message.contains(needle), "{text}: {e}");
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }

    #[test]
    fn chains_and_prices_per_resolution() {
        let m = parse_str(
            r#"
[[models]]
id = "fast"
kind = "video"
provider = "http"
endpoint = "http://x"
price = { per_second = { "720p" = "0.02", "1080p" = "0.04" } }
fallback = ["slow"]
fallback_on = ["unavailable"]
prediction_window_s = 30
[[models]]
id = "slow"
kind = "video"
provider = "http"
endpoint = "http://y"
price = { "720p" = "0.10" }
"#,
        )
        .unwrap();
        let chain: Vec<_> = m.chain("fast").iter().map(|s| s.id.clone()).collect();
        assert_eq!(chain, ["fast", "slow"]);
        assert_eq!(
            m.get("fast").unwrap().fallback_on,
            [FallbackReason::Unavailable]
        );
        assert_eq!(
            m.get("fast").unwrap().prediction_window,
            Some(Duration::from_secs(30))
        );
        let c = m.catalogue();
        assert_eq!(c.default_video_model, "fast");
        assert_eq!(c.video_models.len(), 2);
        assert_eq!(c.edit_model.id, "local-edit");
    }
}
