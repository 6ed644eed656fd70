//! A scriptable provider speaking the async prediction protocol of API.md
//! ("The mock provider"): submit with an `Idempotency-Key`, poll, look up by
//! key, and per-test behaviours (429, 5xx, refusals, hangs, accept-then-drop,
//! cost present or absent). It counts paid predictions per key, so a test
//! can assert "paid once". It also acts as a checker model (rule 14): a
//! prediction whose input has `"task": "check"` answers with the next
//! scripted checker answer (`{"check": [...]}`: an object returned as the
//! output verbatim, or `"invalid_json"`, `"fail"`, `"down"`), or by default
//! a pass for its purpose; every check it received is kept, its images
//! reduced to their index, role and size, for `GET /_mock/checks`. Run as `tollgate-mock-provider`, a separate
//! process that survives Tollgate's crash, or in-process via `router`.

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Scripted behaviours queued at most (a bound on test input).
const SCRIPT_LEN_MAX: usize = 10_000;

/// What the next `POST /v1/predictions` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Behaviour {
    Ok,
    /// Created and paid; later reports `failed`.
    Fail,
    /// Created and paid; later reports a content refusal.
    Refuse,
    /// 429 with `Retry-After: 1`; nothing created.
    RateLimit,
    /// 503; nothing created.
    Unavailable,
    /// 401; nothing created.
    Unauthorized,
    /// 422; nothing created.
    Invalid,
    /// The request is read and never answered; nothing created.
    Hang,
    /// Created and paid, then the connection is closed without an answer.
    AcceptThenDrop,
    /// Succeeds with `cost_usd: null`.
    OmitCost,
    /// Succeeds, but its output is an HTML page (a hostile provider).
    HtmlOutput,
    /// Succeeds, but its output URL names another host (169.254.169.254).
    ForeignOutput,
    /// Succeeds, but its output is a 16×16 image of one colour: a broken
    /// result, whatever the photo.
    TinyOutput,
}

/// What the next `GET /v1/predictions/{id}` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PollBehaviour {
    /// The prediction's real state.
    Ok,
    /// 401: the credentials were refused (a key rotated mid-prediction).
    Unauthorized,
    /// 404: no such prediction.
    NotFound,
    /// 503.
    Unavailable,
    /// The request is read and never answered.
    Hang,
}

#[derive(Clone, Debug)]
pub struct MockConfig {
    /// A repeated `Idempotency-Key` returns the first prediction, unpaid.
    pub idempotency: bool,
    /// `GET /v1/predictions?idempotency_key=K` answers.
    pub lookup: bool,
    /// How long a prediction runs before it reports its outcome.
    pub latency: Duration,
    /// What a successful prediction reports it cost; `None` reports null.
    pub price_usd: Option<String>,
    /// Base of output URLs (`{base}/outputs/{id}.png`).
    pub public_base: String,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            idempotency: true,
            lookup: true,
            latency: Duration::ZERO,
            price_usd: Some("0.100000".into()),
            public_base: String::new(),
        }
    }
}

#[derive(Clone, Debug)]
struct Prediction {
    id: String,
    key: Option<String>,
    model: String,
    behaviour: Behaviour,
    created: Instant,
    cancelled: bool,
    /// A check's answer, its output once it succeeds.
    answer: Option<Value>,
    /// The size of the image it answers with: the input photo's shape.
    shape: (u32, u32),
}

#[derive(Default)]
struct Book {
    script: VecDeque<Behaviour>,
    polls: VecDeque<PollBehaviour>,
    predictions: Vec<Prediction>,
    by_id: HashMap<String, usize>,
    /// Paid predictions per idempotency key ("" when a call had none).
    paid_by_key: BTreeMap<String, u64>,
    /// Paid predictions that were not checks (the expensive calls).
    paid: u64,
    /// Scripted checker answers, and the checks received.
    checks: VecDeque<Value>,
    received_checks: Vec<Value>,
    paid_checks: u64,
}

#[derive(Clone)]
pub struct MockProvider {
    config: Arc<MockConfig>,
    book: Arc<Mutex<Book>>,
}

/// The payload of the panic that drops a connection without an answer; the
/// binary's panic hook stays quiet about it.
pub struct DropConnection;

impl MockProvider {
    pub fn new(config: MockConfig) -> MockProvider {
        MockProvider {
            config: Arc::new(config),
            book: Arc::new(Mutex::new(Book::default())),
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // A panic while holding the lock cannot leave the book half-written
        // (every update is a single step), so a poisoned lock is still usable.
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn status_of(&self, p: &Prediction) -> &'static str {
        if p.cancelled {
            return "canceled";
        }
        let elapsed = p.created.elapsed();
        if elapsed < self.config.latency / 4 {
            "starting"
        } else if elapsed < self.config.latency {
            "processing"
        } else {
            match p.behaviour {
                Behaviour::Fail | Behaviour::Refuse => "failed",
                _ => "succeeded",
            }
        }
    }

    fn prediction_json(&self, p: &Prediction) -> Value {
        let status = self.status_of(p);
        let done = status == "succeeded";
        let error = match (status, p.behaviour) {
            ("failed", Behaviour::Refuse) => {
                json!({"code": "content_refused", "message": "the request was refused by the content policy"})
            }
            ("failed", _) => {
                json!({"code": "generation_failed", "message": "the model failed to produce an output"})
            }
            _ => Value::Null,
        };
        let cost = match (done || status == "failed", p.behaviour) {
            (true, Behaviour::OmitCost) | (false, _) => Value::Null,
            (true, _) => self
                .config
                .price_usd
                .clone()
                .map(Value::String)
                .unwrap_or(Value::Null),
        };
        json!({
            "id": p.id,
            "model": p.model,
            "status": status,
            "output": match (done, p.behaviour) {
                (false, _) => Value::Null,
                (true, _) if p.answer.is_some() => p.answer.clone().unwrap_or_default(),
                (true, Behaviour::HtmlOutput) => json!(format!("{}/outputs/{}.html", self.config.public_base, p.id)),
                (true, Behaviour::ForeignOutput) => json!("http://169.254.169.254/latest/meta-data/iam"),
                (true, _) => json!(format!("{}/outputs/{}.png", self.config.public_base, p.id)),
            },
            "error": error,
            "metrics": { "predict_time": if done { json!(self.config.latency.as_secs_f64()) } else { Value::Null } },
            "cost_usd": cost,
        })
    }

    /// The router of the mock provider.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/v1/predictions", post(create).get(lookup))
            .route("/v1/predictions/{id}", get(show))
            .route("/v1/predictions/{id}/cancel", post(cancel))
            .route("/outputs/{file}", get(output))
            .route("/_mock/script", post(script))
            .route("/_mock/stats", get(stats))
            .route("/_mock/checks", get(checks))
            .with_state(self.clone())
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

#[derive(Deserialize)]
struct CreateBody {
    model: String,
    #[serde(default)]
    input: Value,
}

/// What a checker answers when nothing is scripted: a pass for its purpose.
fn default_answer(purpose: &str) -> Value {
    match purpose {
        "readiness" => {
            json!({"ready": true, "observation": "mock checker: the target is there", "questions": []})
        }
        "review" => {
            json!({"verdict": "passed", "notes": "mock checker: the change is where it was asked"})
        }
        _ => {
            json!({"outcome": "improved", "notes": "mock checker: the candidate follows the instruction"})
        }
    }
}

/// A received check as kept for `GET /_mock/checks`: its images reduced
/// to their index, role and size.
fn received(input: &Value) -> Value {
    let mut kept = input.clone();
    if let Some(images) = kept.get_mut("images").and_then(Value::as_array_mut) {
        for i in images {
            let len = i["image"].as_str().map_or(0, str::len);
            i["image"] = json!(format!("<{len} characters>"));
        }
    }
    kept
}

async fn create(
    State(m): State<MockProvider>,
    headers: HeaderMap,
    body: Result<Json<CreateBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(body)) = body else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            "the body must be {\"model\", \"input\"}",
        );
    };
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // With idempotency on, a repeated key is the first prediction, unpaid,
    // before any scripted behaviour is taken (as a real provider would).
    if let Some(k) = key.as_ref().filter(|_| m.config.idempotency) {
        let book = m.book();
        if let Some(p) = book
            .predictions
            .iter()
            .find(|p| p.key.as_deref() == Some(k.as_str()))
        {
            return (StatusCode::OK, Json(m.prediction_json(p))).into_response();
        }
    }
    let is_check = body.input["task"] == "check";
    let (behaviour, answer) = if is_check {
        next_check(&m, &body.input)
    } else {
        (m.book().script.pop_front().unwrap_or(Behaviour::Ok), None)
    };
    if let Some(refused) = refusal(behaviour).await {
        return refused;
    }
    let shape = output_shape(&body.input);
    let (json, created) =
        record_prediction(&m, key, body.model, (behaviour, answer, shape), is_check);
    if created && behaviour == Behaviour::AcceptThenDrop {
        // Paid, and then no answer at all: the uncertain case.
        std::panic::panic_any(DropConnection);
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (status, Json(json)).into_response()
}

/// A checker question: recorded, then answered as scripted (or with the
/// default answer for its purpose).
fn next_check(m: &MockProvider, input: &Value) -> (Behaviour, Option<Value>) {
    let mut book = m.book();
    book.received_checks.push(received(input));
    let purpose = input["purpose"].as_str().unwrap_or_default().to_string();
    match book.checks.pop_front() {
        None => (Behaviour::Ok, Some(default_answer(&purpose))),
        Some(Value::String(s)) if s == "down" => (Behaviour::Unavailable, None),
        Some(Value::String(s)) if s == "fail" => (Behaviour::Fail, Some(Value::Null)),
        Some(Value::String(s)) if s == "invalid_json" => {
            (Behaviour::Ok, Some(json!("Sure! The edit looks {great")))
        }
        Some(answer) => (Behaviour::Ok, Some(answer)),
    }
}

/// The answer of a scripted refusal (nothing paid), or none when the
/// prediction is made. A hang never answers.
async fn refusal(behaviour: Behaviour) -> Option<Response> {
    Some(match behaviour {
        Behaviour::RateLimit => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, "rate_limited", "slow down");
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            r
        }
        Behaviour::Unavailable => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "try again later",
        ),
        Behaviour::Unauthorized => {
            error(StatusCode::UNAUTHORIZED, "unauthorized", "bad credentials")
        }
        Behaviour::Invalid => error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            "the input is invalid",
        ),
        Behaviour::Hang => {
            std::future::pending::<()>().await;
            unreachable!("pending never resolves");
        }
        _ => return None,
    })
}

/// The prediction, paid and counted, or (idempotency on, a repeated key)
/// the first one again unpaid. `true` when it was made now.
fn record_prediction(
    m: &MockProvider,
    key: Option<String>,
    model: String,
    (behaviour, answer, shape): (Behaviour, Option<Value>, (u32, u32)),
    is_check: bool,
) -> (Value, bool) {
    let mut book = m.book();
    let existing = key.as_ref().filter(|_| m.config.idempotency).and_then(|k| {
        book.predictions
            .iter()
            .position(|p| p.key.as_deref() == Some(k.as_str()))
    });
    if let Some(i) = existing {
        return (m.prediction_json(&book.predictions[i].clone()), false);
    }
    let p = Prediction {
        id: format!("pred_{}", uuid::Uuid::new_v4().simple()),
        key: key.clone(),
        model,
        behaviour,
        created: Instant::now(),
        cancelled: false,
        answer,
        shape,
    };
    if is_check {
        book.paid_checks += 1;
    } else {
        book.paid += 1;
    }
    *book.paid_by_key.entry(key.unwrap_or_default()).or_insert(0) += 1;
    let i = book.predictions.len();
    book.by_id.insert(p.id.clone(), i);
    let json = json!({"id": p.id, "status": "starting"});
    book.predictions.push(p);
    (json, true)
}

async fn show(State(m): State<MockProvider>, Path(id): Path<String>) -> Response {
    let scripted = m.book().polls.pop_front().unwrap_or(PollBehaviour::Ok);
    match scripted {
        PollBehaviour::Ok => {}
        PollBehaviour::Unauthorized => {
            return error(StatusCode::UNAUTHORIZED, "unauthorized", "bad credentials")
        }
        PollBehaviour::NotFound => {
            return error(StatusCode::NOT_FOUND, "not_found", "no such prediction")
        }
        PollBehaviour::Unavailable => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "try again later",
            )
        }
        PollBehaviour::Hang => {
            std::future::pending::<()>().await;
            unreachable!("pending never resolves");
        }
    }
    let book = m.book();
    match book.by_id.get(&id).map(|i| &book.predictions[*i]) {
        Some(p) => Json(m.prediction_json(p)).into_response(),
        None => error(StatusCode::NOT_FOUND, "not_found", "no such prediction"),
    }
}

async fn cancel(State(m): State<MockProvider>, Path(id): Path<String>) -> Response {
    let mut book = m.book();
    let Some(i) = book.by_id.get(&id).copied() else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such prediction");
    };
    if m.status_of(&book.predictions[i]) != "succeeded" {
        book.predictions[i].cancelled = true;
    }
    Json(m.prediction_json(&book.predictions[i])).into_response()
}

#[derive(Deserialize)]
struct LookupQuery {
    idempotency_key: Option<String>,
}

async fn lookup(State(m): State<MockProvider>, Query(q): Query<LookupQuery>) -> Response {
    if !m.config.lookup {
        return error(
            StatusCode::NOT_FOUND,
            "lookup_unsupported",
            "this provider cannot look predictions up by key",
        );
    }
    let Some(key) = q.idempotency_key else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            "idempotency_key is required",
        );
    };
    let book = m.book();
    match book
        .predictions
        .iter()
        .find(|p| p.key.as_deref() == Some(key.as_str()))
    {
        Some(p) => Json(m.prediction_json(p)).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "not_found",
            "no prediction was made under that key",
        ),
    }
}

/// Longest side of the mock's output images.
const OUTPUT_SIDE: u32 = 256;

/// The output's size: the input photo's shape at `OUTPUT_SIDE` on its
/// long side (as a model answers at its own size), or 4:3 without one.
fn output_shape(input: &Value) -> (u32, u32) {
    let photo = input["image"]
        .as_str()
        .and_then(|uri| uri.split_once(";base64,"))
        .and_then(|(_, b64)| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(b64).ok()
        });
    let size = photo.and_then(|bytes| {
        image::ImageReader::new(std::io::Cursor::new(bytes))
            .with_guessed_format()
            .ok()?
            .into_dimensions()
            .ok()
    });
    let (w, h) = size.filter(|&(w, h)| w > 0 && h > 0).unwrap_or((4, 3));
    let long = f64::from(w.max(h));
    let side = |v: u32| ((f64::from(v) * f64::from(OUTPUT_SIDE) / long).round() as u32).max(1);
    (side(w), side(h))
}

/// An image standing in for a generated one: the photo's shape, a
/// gradient tinted by the prediction's id (so outputs differ).
async fn output(State(m): State<MockProvider>, Path(file): Path<String>) -> Response {
    if file.ends_with(".html") {
        // What a hostile provider might answer: a page that would run on
        // whatever origin served it.
        return (
            [(header::CONTENT_TYPE, "image/png")],
            "<html><body><script>fetch('/v1/me')</script></body></html>",
        )
            .into_response();
    }
    let id = file.strip_suffix(".png").unwrap_or(&file).to_string();
    let shape = {
        let book = m.book();
        book.by_id
            .get(&id)
            .map(|i| &book.predictions[*i])
            .filter(|p| m.status_of(p) == "succeeded")
            .map(|p| (p.shape, p.behaviour))
    };
    let Some(((w, h), behaviour)) = shape else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such output");
    };
    let shade = id.bytes().fold(0u8, |a, b| a.wrapping_add(b));
    let img = if behaviour == Behaviour::TinyOutput {
        image::RgbImage::from_pixel(16, 16, image::Rgb([shade, 128, 255 - shade]))
    } else {
        image::RgbImage::from_fn(w, h, |x, y| {
            let (fx, fy) = (x * 255 / w.max(1), y * 255 / h.max(1));
            image::Rgb([
                shade ^ fx as u8,
                128u8.wrapping_add(fy as u8 / 2),
                255 - shade,
            ])
        })
    };
    let mut out = std::io::Cursor::new(Vec::new());
    if img.write_to(&mut out, image::ImageFormat::Png).is_err() {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "could not draw the output",
        );
    }
    ([(header::CONTENT_TYPE, "image/png")], out.into_inner()).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptBody {
    #[serde(default)]
    next: Vec<Behaviour>,
    #[serde(default)]
    poll: Vec<PollBehaviour>,
    /// Checker answers, in order.
    #[serde(default)]
    check: Vec<Value>,
}

async fn script(
    State(m): State<MockProvider>,
    body: Result<Json<ScriptBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(body)) = body else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_script",
            "send {\"next\": [behaviour, ...], \"poll\": [behaviour, ...], \"check\": [answer, ...]}",
        );
    };
    let mut book = m.book();
    if book.script.len() + body.next.len() > SCRIPT_LEN_MAX
        || book.polls.len() + body.poll.len() > SCRIPT_LEN_MAX
        || book.checks.len() + body.check.len() > SCRIPT_LEN_MAX
    {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "script_too_long",
            "at most 10000 queued behaviours of each kind",
        );
    }
    book.script.extend(body.next);
    book.polls.extend(body.poll);
    book.checks.extend(body.check);
    Json(json!({"queued": book.script.len(), "queued_polls": book.polls.len(), "queued_checks": book.checks.len()})).into_response()
}

/// Every check received, oldest first.
async fn checks(State(m): State<MockProvider>) -> Json<Value> {
    Json(json!({"data": m.book().received_checks}))
}

async fn stats(State(m): State<MockProvider>) -> Json<Value> {
    let book = m.book();
    Json(json!({
        "paid_predictions": book.paid,
        "paid_checks": book.paid_checks,
        "by_idempotency_key": book.paid_by_key,
        "predictions": book.predictions.iter().map(|p| json!({
            "id": p.id, "idempotency_key": p.key, "status": m.status_of(p),
        })).collect::<Vec<_>>(),
    }))
}
