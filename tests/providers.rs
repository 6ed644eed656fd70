//! The attempt runner against the mock provider, on both backends: every
//! error class, fallback and the prediction window, the uncertainty window
//! (re-send with the same key, look up by key, or park or refund), unpriced
//! costs, a resumed poll, and the local provider's injected faults.

use chrono::Utc;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tollgate::both_backends;
use tollgate::model::AttemptState;
use tollgate::model::{CostSource, Credits, JobId, JobStatus, Role, Usd};
use tollgate::providers::mock::{MockConfig, MockProvider};
use tollgate::store::{Job, ParkedStage, User};
use tollgate::testkit::TestDb;

/// A mock provider in this process on a free port; returns its base URL.
async fn mock(idempotency: bool, lookup: bool, latency_ms: u64, price: Option<&str>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let m = MockProvider::new(MockConfig {
        idempotency,
        lookup,
        latency: Duration::from_millis(latency_ms),
        price_usd: price.map(str::to_string),
        public_base: base.clone(),
    });
    let app = m.router();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    base
}

async fn script(base: &str, next: &[&str]) {
    let r = reqwest::Client::new()
        .post(format!("{base}/_mock/script"))
        .json(&json!({ "next": next }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

async fn stats(base: &str) -> Value {
    reqwest::get(format!("{base}/_mock/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// One http edit model (plus `extra` TOML), fast timings for tests.
fn model(id: &str, base: &str, extra: &str) -> String {
    format!(
        "[[models]]\nid = \"{id}\"\nkind = \"image_edit\"\nprovider = \"http\"\nendpoint = \"{base}\"\n\
         price = {{ per_generation = \"0.10\" }}\npoll_ms = 30\nbackoff_ms = 30\nbackoff_max_ms = 200\n{extra}\n"
    )
}

fn photo() -> Vec<u8> {
    tollgate::testkit::photo_of_a_dog(160, 120)
}

async fn person(db: &TestDb) -> User {
    let t = &db.tollgate;
    let u = t
        .add_user("u@example.com", Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, u.id, Credits(100), None, None)
        .await
        .unwrap();
    u
}

async fn edit(db: &TestDb, u: &User, key: &str) -> JobId {
    let t = &db.tollgate;
    let source = t
        .upload_asset(u, Some("image/png"), photo().into())
        .await
        .unwrap();
    let body = json!({"kind": "image_edit", "source": source.id,
        "target": {"kind": "pet", "description": "the dog"}, "style": "embroidery", "strength": "balanced"});
    t.submit_job(u, Some(key), &body).await.unwrap().job.id
}

/// Runs the engine until the job is terminal or parked (bounded).
async fn run_until_settled(db: &TestDb, id: JobId) -> Job {
    let engine = tollgate::engine::start(db.tollgate.clone(), 2);
    let mut job = None;
    for _ in 0..400 {
        let j = db.store().job(id).await.unwrap().unwrap();
        if j.status.is_terminal() || j.status == JobStatus::Parked {
            job = Some(j);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    engine.shutdown().await;
    job.unwrap_or_else(|| panic!("job {id} did not settle in 20 s"))
}

async fn balance(db: &TestDb, u: &User) -> Credits {
    db.tollgate.user(u.id).await.unwrap().balance
}

fn classes(attempts: &[tollgate::store::Attempt]) -> Vec<(String, String, Option<String>)> {
    attempts
        .iter()
        .map(|a| {
            (
                a.model.clone(),
                a.state.as_str().to_string(),
                a.error_class.clone(),
            )
        })
        .collect()
}

fn usd(s: &str) -> Usd {
    Usd::parse(s).unwrap()
}

async fn held(db: &TestDb) -> (Usd, Usd) {
    let d = db
        .store()
        .budget_day(Utc::now().date_naive(), usd("50"))
        .await
        .unwrap();
    (d.used_usd, d.reserved_usd)
}

both_backends!(
    an_http_edit_is_paid_once_with_a_quoted_cost,
    rate_limits_back_off_and_retry_the_same_model,
    auth_and_invalid_input_stop_the_chain,
    a_refusal_uses_the_same_models_attempts_first,
    unavailable_falls_back_only_where_allowed,
    exhausted_attempts_fall_back_or_fail_and_refund,
    past_the_prediction_window_the_model_is_not_retried,
    a_dropped_answer_is_resent_under_the_same_key,
    a_dropped_answer_is_looked_up_by_key,
    a_dropped_answer_without_either_parks_and_keeps_the_hold,
    a_dropped_answer_refunds_where_the_policy_says,
    a_hang_is_uncertain_and_resent_when_idempotent,
    an_omitted_cost_is_unpriced_not_zero,
    a_shutdown_mid_poll_resumes_the_same_prediction,
    local_faults_show_the_rules_on_a_laptop,
    a_cancel_mid_poll_stops_the_run_and_books_the_estimate,
);

async fn a_cancel_mid_poll_stops_the_run_and_books_the_estimate(db: TestDb) {
    let base = mock(true, true, 5000, Some("0.100000")).await;
    let db = db.with_config(&model("m", &base, "")).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    for _ in 0..200 {
        let a = db.store().attempts(id).await.unwrap();
        if a.first()
            .is_some_and(|a| a.state == AttemptState::Submitted)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let job = db.tollgate.cancel_job(&u, id).await.unwrap();
    assert_eq!(job.status, JobStatus::Cancelled);
    // The run notices at its next poll and settles the hold: the call may
    // have been paid, so the estimate is booked, not zero.
    let mut day = held(&db).await;
    for _ in 0..100 {
        if day.1 == Usd::ZERO {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        day = held(&db).await;
    }
    engine.shutdown().await;
    assert_eq!(day, (job.estimated_usd, Usd::ZERO));
    assert_eq!(balance(&db, &u).await, Credits(100));
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!((a.len(), a[0].state.as_str()), (1, "submitted"));
    let events = db.store().job_events(id).await.unwrap();
    assert!(events.iter().any(|e| e.kind == "lease_lost"), "{events:?}");
    // Nothing was stored for a cancelled job.
    assert!(db.store().job_output(id).await.unwrap().is_none());
}

async fn an_http_edit_is_paid_once_with_a_quoted_cost(db: TestDb) {
    let base = mock(true, true, 100, Some("0.120000")).await;
    let db = db
        .with_config(&model("mock-edit", &base, "default = true"))
        .await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k1").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].state, AttemptState::Succeeded);
    assert_eq!(a[0].provider, "http");
    assert_eq!(a[0].idempotency_key, format!("{id}:1"));
    assert!(a[0]
        .provider_job_id
        .as_deref()
        .unwrap()
        .starts_with("pred_"));
    assert_eq!(a[0].cost_usd, Some(usd("0.12")));
    assert_eq!(a[0].cost_source, Some(CostSource::Quoted));
    let s = stats(&base).await;
    assert_eq!(s["paid_predictions"], 1);
    assert_eq!(s["by_idempotency_key"][format!("{id}:1")], 1);
    // The output came from the provider and is stored privately, tagged.
    let (key, ct) = db.store().job_output(id).await.unwrap().unwrap();
    assert_eq!(ct, "image/png");
    let meta = db
        .tollgate
        .objects()
        .head(&tollgate::storage::ObjectKey::parse(&key).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.written_by, format!("job:{id}"));
    assert_eq!(meta.provider.as_deref(), Some("http"));
    // The day's spend is the quoted cost, not the estimate.
    assert_eq!(held(&db).await, (usd("0.12"), Usd::ZERO));
    // /metrics reports that spend exactly, in millionths of a dollar.
    let api = db.serve_api().await;
    let text = reqwest::get(format!("{api}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("tollgate_spend_microusd{model=\"mock-edit\"} 120000"),
        "{text}"
    );
    assert!(text.contains("tollgate_reserved_microusd 0"), "{text}");
    // The timeline names the attempt and the provider's id.
    let kinds: Vec<String> = db
        .store()
        .job_events(id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    for k in [
        "created",
        "claimed",
        "attempt",
        "submitted",
        "attempt_ended",
        "settled",
        "succeeded",
    ] {
        assert!(kinds.iter().any(|x| x == k), "{k} missing from {kinds:?}");
    }
}

async fn rate_limits_back_off_and_retry_the_same_model(db: TestDb) {
    let base = mock(true, true, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &base, "attempts = 3")).await;
    script(&base, &["rate_limit", "rate_limit"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k1").await;
    let started = Instant::now();
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    // Retry-After: 1 was honoured twice (a lower bound, not a speed claim).
    assert!(started.elapsed() >= Duration::from_millis(1900));
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(
        classes(&a),
        [
            ("m".into(), "failed".into(), Some("rate_limited".into())),
            ("m".into(), "failed".into(), Some("rate_limited".into())),
            ("m".into(), "succeeded".into(), None),
        ]
    );
    // A 429 created nothing: known to cost zero, not unpriced.
    assert_eq!(a[0].cost_usd, Some(Usd::ZERO));
    assert_eq!(stats(&base).await["paid_predictions"], 1);
}

async fn auth_and_invalid_input_stop_the_chain(db: TestDb) {
    let base = mock(true, true, 0, Some("0.100000")).await;
    let backup = mock(true, true, 0, Some("0.100000")).await;
    let toml = model("m", &base, "default = true\nfallback = [\"b\"]") + &model("b", &backup, "");
    let db = db.with_config(&toml).await;
    let u = person(&db).await;
    for (behaviour, code) in [
        ("unauthorized", "PROVIDER_AUTH"),
        ("invalid", "PROVIDER_REJECTED_INPUT"),
    ] {
        script(&base, &[behaviour]).await;
        let before = balance(&db, &u).await;
        let id = edit(&db, &u, behaviour).await;
        let job = run_until_settled(&db, id).await;
        assert_eq!(job.status, JobStatus::Failed);
        assert_eq!(job.error.as_ref().unwrap()["code"], code);
        // One attempt, no retry, no fallback; refunded.
        assert_eq!(db.store().attempts(id).await.unwrap().len(), 1);
        assert_eq!(balance(&db, &u).await, before);
    }
    assert_eq!(stats(&backup).await["paid_predictions"], 0);
    assert_eq!(stats(&base).await["paid_predictions"], 0);
    // Nothing was spent, so the holds were released at zero.
    assert_eq!(held(&db).await, (Usd::ZERO, Usd::ZERO));
}

async fn a_refusal_uses_the_same_models_attempts_first(db: TestDb) {
    let base = mock(true, true, 0, Some("0.100000")).await;
    let backup = mock(true, true, 0, Some("0.100000")).await;
    let toml = model(
        "m",
        &base,
        "default = true\nattempts = 2\nfallback = [\"b\"]",
    ) + &model("b", &backup, "");
    let db = db.with_config(&toml).await;
    script(&base, &["refuse"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(
        classes(&a),
        [
            ("m".into(), "failed".into(), Some("refused".into())),
            ("m".into(), "succeeded".into(), None),
        ]
    );
    // The refused prediction was charged, and says so.
    assert_eq!(a[0].cost_usd, Some(usd("0.1")));
    assert_eq!(held(&db).await.0, usd("0.2"));
    assert_eq!(stats(&backup).await["paid_predictions"], 0);

    // Refused on every attempt: the chain moves on (exhausted is allowed).
    script(&base, &["refuse", "refuse"]).await;
    let id = edit(&db, &u, "k2").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded);
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(a.last().unwrap().model, "b");
}

async fn unavailable_falls_back_only_where_allowed(db: TestDb) {
    let base = mock(true, true, 0, Some("0.100000")).await;
    let backup = mock(true, true, 0, Some("0.100000")).await;
    let other = mock(true, true, 0, Some("0.100000")).await;
    let toml = model(
        "m",
        &base,
        "default = true\nfallback = [\"b\"]\nfallback_on = [\"unavailable\"]\nsubmit_503 = \"not_created\"",
    ) + &model("b", &backup, "")
        + &model(
            "n",
            &other,
            "fallback = [\"b\"]\nfallback_on = [\"exhausted\"]",
        );
    let db = db.with_config(&toml).await;
    script(&base, &["unavailable"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded);
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(
        classes(&a),
        [
            ("m".into(), "failed".into(), Some("unavailable".into())),
            ("b".into(), "succeeded".into(), None),
        ]
    );

    // Where only exhaustion may fall back, a 503 retries the same model.
    let db = db
        .with_config(
            &(model(
                "n",
                &other,
                "default = true\nfallback = [\"b\"]\nfallback_on = [\"exhausted\"]\nsubmit_503 = \"not_created\"",
            ) + &model("b", &backup, "")),
        )
        .await;
    script(&other, &["unavailable"]).await;
    let id = edit(&db, &u, "k2").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded);
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(
        classes(&a),
        [
            ("n".into(), "failed".into(), Some("unavailable".into())),
            ("n".into(), "succeeded".into(), None),
        ]
    );
}

async fn exhausted_attempts_fall_back_or_fail_and_refund(db: TestDb) {
    let base = mock(true, true, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &base, "attempts = 2")).await;
    script(&base, &["fail", "fail"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.error.as_ref().unwrap()["code"], "GENERATION_FAILED");
    assert_eq!(balance(&db, &u).await, Credits(100));
    // Both failed predictions were charged: the day books what they cost.
    assert_eq!(held(&db).await, (usd("0.2"), Usd::ZERO));
    assert_eq!(db.store().attempts(id).await.unwrap().len(), 2);
}

async fn past_the_prediction_window_the_model_is_not_retried(db: TestDb) {
    // Each prediction runs 400 ms; the window is 0.2 s: a failure arrives
    // after it, so the model may have charged in full and is not retried.
    let slow = mock(true, true, 400, Some("0.100000")).await;
    let db = db
        .with_config(&model(
            "m",
            &slow,
            "attempts = 3\nprediction_window_s = 0.2",
        ))
        .await;
    script(&slow, &["fail"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(db.store().attempts(id).await.unwrap().len(), 1);

    // A fast failure inside the window keeps its retries.
    let fast = mock(true, true, 0, Some("0.100000")).await;
    let db = db
        .with_config(&model("m", &fast, "attempts = 3\nprediction_window_s = 5"))
        .await;
    script(&fast, &["fail"]).await;
    let id = edit(&db, &u, "k2").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(db.store().attempts(id).await.unwrap().len(), 2);
}

async fn a_dropped_answer_is_resent_under_the_same_key(db: TestDb) {
    let base = mock(true, false, 0, Some("0.100000")).await;
    let db = db
        .with_config(&model("m", &base, "idempotency = true"))
        .await;
    script(&base, &["accept_then_drop"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    // One attempt row, re-sent under its key; the provider charged once.
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(a.len(), 1);
    let s = stats(&base).await;
    assert_eq!(s["paid_predictions"], 1);
    assert_eq!(s["by_idempotency_key"][format!("{id}:1")], 1);
}

async fn a_dropped_answer_is_looked_up_by_key(db: TestDb) {
    let base = mock(false, true, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &base, "lookup = true")).await;
    script(&base, &["accept_then_drop"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(a.len(), 1);
    assert!(a[0].provider_job_id.is_some());
    assert_eq!(stats(&base).await["paid_predictions"], 1);
}

async fn a_dropped_answer_without_either_parks_and_keeps_the_hold(db: TestDb) {
    let base = mock(false, false, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &base, "")).await;
    script(&base, &["accept_then_drop"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Parked);
    // Nothing was re-sent blindly.
    assert_eq!(stats(&base).await["paid_predictions"], 1);
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].state, AttemptState::Submitting);
    let p = db.store().parked_for_job(id).await.unwrap().unwrap();
    assert_eq!(p.stage, ParkedStage::SubmissionUncertain);
    assert_eq!(p.attempt_id, Some(a[0].id));
    assert_eq!(p.hold_usd, Some(job.estimated_usd));
    let listed = db
        .store()
        .list_parked(Some(ParkedStage::SubmissionUncertain), 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    // Not refunded, and the budget hold stays until a decision.
    assert_eq!(balance(&db, &u).await, Credits(100 - job.credits.get()));
    assert_eq!(held(&db).await, (Usd::ZERO, job.estimated_usd));
    // The sweeper leaves it alone: a parked job is not finished.
    assert_eq!(db.store().settle_left_holds().await.unwrap(), 0);
    assert_eq!(held(&db).await, (Usd::ZERO, job.estimated_usd));
    // /metrics shows it by stage, with its age.
    let api = db.serve_api().await;
    let text = reqwest::get(format!("{api}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("tollgate_parked{stage=\"submission_uncertain\"} 1"),
        "{text}"
    );
    assert!(text.contains("tollgate_parked_oldest_age_seconds{stage=\"submission_uncertain\"}"));

    // Its owner cancels it: refunded once, and it no longer waits for a
    // decision; the possibly-paid call stays booked at the estimate.
    let cancelled = db.tollgate.cancel_job(&u, id).await.unwrap();
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert_eq!(balance(&db, &u).await, Credits(100));
    assert!(db.store().parked_for_job(id).await.unwrap().is_none());
    assert!(db.store().list_parked(None, 10).await.unwrap().is_empty());
    assert_eq!(held(&db).await, (job.estimated_usd, Usd::ZERO));
}

async fn a_dropped_answer_refunds_where_the_policy_says(db: TestDb) {
    let base = mock(false, false, 0, Some("0.100000")).await;
    let db = db
        .with_config(&model("m", &base, "on_uncertain = \"refund\""))
        .await;
    script(&base, &["accept_then_drop"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.error.as_ref().unwrap()["code"], "SUBMISSION_UNCERTAIN");
    assert_eq!(balance(&db, &u).await, Credits(100));
    assert_eq!(stats(&base).await["paid_predictions"], 1);
    // The possibly-paid call stays booked at the estimate, unpriced.
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(a[0].cost_usd, None);
    assert_eq!(held(&db).await, (job.estimated_usd, Usd::ZERO));
}

async fn a_hang_is_uncertain_and_resent_when_idempotent(db: TestDb) {
    let base = mock(true, false, 0, Some("0.100000")).await;
    let db = db
        .with_config(&model("m", &base, "idempotency = true\ntimeout_ms = 300"))
        .await;
    script(&base, &["hang"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    assert_eq!(db.store().attempts(id).await.unwrap().len(), 1);
    assert_eq!(stats(&base).await["paid_predictions"], 1);
}

async fn an_omitted_cost_is_unpriced_not_zero(db: TestDb) {
    let base = mock(true, true, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &base, "")).await;
    script(&base, &["omit_cost"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded);
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!((a[0].cost_usd, a[0].cost_source), (None, None));
    // Unknown cost stays booked at the estimate.
    assert_eq!(held(&db).await, (job.estimated_usd, Usd::ZERO));
    let api = db.serve_api().await;
    let (_, token) = db.tollgate.create_api_token(&u, "t").await.unwrap();
    let v: Value = reqwest::Client::new()
        .get(format!("{api}/v1/jobs/{id}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["cost"]["unpriced_attempts"], 1, "{v}");
    assert_eq!(v["cost"]["usd"], "0.000000");
}

async fn a_shutdown_mid_poll_resumes_the_same_prediction(db: TestDb) {
    let base = mock(false, false, 1500, Some("0.100000")).await;
    let db = db.with_config(&model("m", &base, "")).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    // Wait until the provider accepted it, then stop this node.
    for _ in 0..200 {
        let a = db.store().attempts(id).await.unwrap();
        if a.first()
            .is_some_and(|a| a.state == AttemptState::Submitted)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    engine.shutdown().await;
    let j = db.store().job(id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Queued, "given back on shutdown");
    // Another run polls the same prediction: never submitted again.
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(db.store().attempts(id).await.unwrap().len(), 1);
    assert_eq!(stats(&base).await["paid_predictions"], 1);
}

async fn local_faults_show_the_rules_on_a_laptop(db: TestDb) {
    // Every call is accepted and its answer lost: the local provider
    // cannot be asked, so the job parks.
    let db = db
        .with_config("[local.faults]\ndrop_after_accept_rate = 1.0\n")
        .await;
    let u = person(&db).await;
    let id = edit(&db, &u, "drop").await;
    assert_eq!(run_until_settled(&db, id).await.status, JobStatus::Parked);

    let db = db
        .with_config("[local.faults]\nunpriced_rate = 1.0\n")
        .await;
    let id = edit(&db, &u, "unpriced").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(db.store().attempts(id).await.unwrap()[0].cost_usd, None);

    let db = db.with_config("[local.faults]\nrefusal_rate = 1.0\n").await;
    let id = edit(&db, &u, "refused").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.error.as_ref().unwrap()["code"], "CONTENT_REFUSED");
    assert_eq!(db.store().attempts(id).await.unwrap().len(), 3);
}

/// Doorbells cross nodes on PostgreSQL: a listener hears a queued job's id.
#[tokio::test]
async fn postgres_rings_a_doorbell_when_a_job_is_queued() {
    let db = TestDb::postgres().await;
    let mut bell = db.store().doorbell().await.unwrap().unwrap();
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let rung = tokio::time::timeout(Duration::from_secs(10), bell.next())
        .await
        .expect("a doorbell within 10 s")
        .unwrap();
    assert_eq!(rung, Some(id));
}
