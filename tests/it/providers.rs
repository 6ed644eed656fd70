//! The attempt runner against the mock provider, on both backends: every
//! error class, fallback and the prediction window, the uncertainty window
//! (re-send with the same key, look up by key, or park or refund), unpriced
//! costs, a resumed poll, and the local provider's injected faults.

use chrono::Utc;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tollgate::model::AttemptState;
use tollgate::model::{
    AttemptId, CostSource, Credits, JobId, JobStatus, Purpose as AttemptPurpose, Role, Usd,
};
use tollgate::providers::mock::MockConfig;
use tollgate::store::{Hold, Job, NewAttempt, Op, ParkedFilter, ParkedStage, Unit, User};
use tollgate_testkit::{both_backends, wait_until};
use tollgate_testkit::{MockServer, TestDb};

/// A mock provider in this process on a free port.
async fn mock(idempotency: bool, lookup: bool, latency_ms: u64, price: Option<&str>) -> MockServer {
    MockServer::start(MockConfig {
        idempotency,
        lookup,
        latency: Duration::from_millis(latency_ms),
        price_usd: price.map(str::to_string),
        public_base: String::new(),
    })
    .await
}

async fn script(m: &MockServer, next: &[&str]) {
    m.script(json!({ "next": next })).await;
}

async fn stats(m: &MockServer) -> Value {
    m.stats().await
}

/// One http edit model (plus `extra` TOML), fast timings for tests.
fn model(id: &str, m: &MockServer, extra: &str) -> String {
    let base = &m.base;
    format!(
        "[[models]]\nid = \"{id}\"\nkind = \"image_edit\"\nprovider = \"http\"\nendpoint = \"{base}\"\n\
         price = {{ per_generation = \"0.10\" }}\npoll_ms = 30\nbackoff_ms = 30\nbackoff_max_ms = 200\n{extra}\n"
    )
}

fn photo() -> Vec<u8> {
    tollgate_testkit::photo_of_a_dog(160, 120)
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
    t.submit_job(u, None, Some(key), &body)
        .await
        .unwrap()
        .job
        .id
}

/// Waits (bounded) until the provider accepted the job's first attempt.
async fn until_submitted(db: &TestDb, id: JobId) {
    wait_until(
        "the provider accepts the attempt",
        Duration::from_secs(4),
        async || {
            let a = db.store().attempts(id).await.unwrap();
            a.first()
                .is_some_and(|a| a.state == AttemptState::Submitted)
                .then_some(())
        },
    )
    .await
}

/// Runs the engine until the job is terminal or parked (bounded).
async fn run_until_settled(db: &TestDb, id: JobId) -> Job {
    let engine = tollgate::engine::start(db.tollgate.clone(), 2);
    let job = db
        .job_when(id, Duration::from_secs(20), |j| {
            j.status.is_terminal() || j.status == JobStatus::Parked
        })
        .await;
    engine.shutdown().await;
    job
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
                a.error_class.map(|c| c.as_str().to_string()),
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
    a_refused_resend_proves_nothing_and_parks_unpriced,
    a_refused_resend_refunds_with_the_estimate_booked_where_the_policy_says,
    a_refused_poll_after_acceptance_parks_unpriced,
    a_known_cost_is_kept_beside_an_unknown_one,
    retries_stop_at_the_cap,
    a_lookup_the_model_does_not_vouch_for_starts_nothing_new,
    an_attempt_is_recovered_only_with_its_own_model,
    a_run_that_lost_its_lease_writes_nothing_after_the_call,
    the_prediction_window_counts_from_the_attempts_start,
    a_submit_503_is_uncertain_unless_the_model_says_otherwise,
    a_hostile_output_is_not_stored_and_fails_the_attempt,
    a_broken_output_fails_the_attempt_before_delivery,
    an_output_on_another_host_is_never_fetched,
    outputs_and_uploads_cannot_run_on_our_origin,
);

/// A provider that answers with an HTML page (claiming image/png): sniffed,
/// refused, never stored; the attempt fails as an invalid output at what it
/// cost, and the job is refunded.
async fn a_hostile_output_is_not_stored_and_fails_the_attempt(db: TestDb) {
    let m = mock(true, true, 0, Some("0.100000")).await;
    let db = db
        .with_config(&model("m", &m, "default = true\nattempts = 1"))
        .await;
    let u = person(&db).await;
    script(&m, &["html_output"]).await;
    let id = edit(&db, &u, "hostile").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.error.as_ref().unwrap().code.as_str(), "INVALID_OUTPUT");
    let a = db.store().attempts(id).await.unwrap();
    let generate: Vec<_> = a
        .iter()
        .filter(|a| a.purpose == AttemptPurpose::Generate)
        .collect();
    assert_eq!(generate.len(), 1);
    assert_eq!(generate[0].state, AttemptState::Failed);
    assert_eq!(
        generate[0].error_class.map(|c| c.as_str()),
        Some("invalid_output")
    );
    assert_eq!(generate[0].cost_usd, Some(usd("0.1")), "it was paid for");
    let key = tollgate::storage::ObjectKey::parse(&format!("outputs/{id}")).unwrap();
    assert!(
        db.tollgate.objects().head(&key).await.unwrap().is_none(),
        "nothing stored"
    );
    assert_eq!(balance(&db, &u).await, Credits(100), "refunded");
}

/// Issue 33, 2: a result that is plainly not an edit of the photo (a
/// 16×16 image of one colour) is not delivered as done: the attempt fails
/// at what the provider billed, nothing is stored, the job is refunded and
/// says why. The mock's ordinary output (the photo's shape) is delivered.
async fn a_broken_output_fails_the_attempt_before_delivery(db: TestDb) {
    let m = mock(true, true, 0, Some("0.100000")).await;
    let db = db
        .with_config(&model("m", &m, "default = true\nattempts = 1"))
        .await;
    let u = person(&db).await;
    script(&m, &["tiny_output"]).await;
    let id = edit(&db, &u, "tiny").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Failed);
    let error = job.error.as_ref().unwrap();
    assert_eq!(error.code.as_str(), "INVALID_OUTPUT");
    let message = error.message.as_str();
    assert!(
        message.contains("16×16") && message.contains("refunded"),
        "{message}"
    );
    let a = db.store().attempts(id).await.unwrap();
    let generate: Vec<_> = a
        .iter()
        .filter(|a| a.purpose == AttemptPurpose::Generate)
        .collect();
    assert_eq!(generate.len(), 1);
    assert_eq!(generate[0].state, AttemptState::Failed);
    assert_eq!(
        generate[0].error_class.map(|c| c.as_str()),
        Some("invalid_output")
    );
    assert_eq!(
        generate[0].cost_usd,
        Some(usd("0.1")),
        "the provider billed it"
    );
    assert_eq!(m.paid().await, 1);
    let key = tollgate::storage::ObjectKey::parse(&format!("outputs/{id}")).unwrap();
    assert!(db.tollgate.objects().head(&key).await.unwrap().is_none());
    assert_eq!(balance(&db, &u).await, Credits(100), "refunded");

    // The mock's ordinary answer has the photo's shape and is delivered.
    let ok = edit(&db, &u, "fine").await;
    let job = run_until_settled(&db, ok).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
}

/// An output URL on a host the model does not list is refused before any
/// connection (it names 169.254.169.254); the job parks with the reason.
async fn an_output_on_another_host_is_never_fetched(db: TestDb) {
    let m = mock(true, true, 0, Some("0.100000")).await;
    let db = db
        .with_config(&model("m", &m, "default = true\nattempts = 1"))
        .await;
    let u = person(&db).await;
    script(&m, &["foreign_output"]).await;
    let id = edit(&db, &u, "foreign").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Parked, "{:?}", job.error);
    let p = db.store().parked_for_job(id).await.unwrap().unwrap();
    assert_eq!(p.stage, ParkedStage::DeliveryExhausted);
    let last = p.evidence["last_error"].as_str().unwrap();
    assert!(last.contains("output URL refused"), "{last}");
    assert!(last.contains("169.254.169.254"), "{last}");
}

/// What we serve from storage is never a page of our origin.
async fn outputs_and_uploads_cannot_run_on_our_origin(db: TestDb) {
    let m = mock(true, true, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &m, "default = true")).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "served").await;
    assert_eq!(
        run_until_settled(&db, id).await.status,
        JobStatus::Succeeded
    );
    let (_, token) = db.tollgate.create_api_token(&u, "t").await.unwrap();
    let base = db.serve_api().await;
    let http = reqwest::Client::new();
    let asset = db
        .tollgate
        .upload_asset(&u, Some("image/png"), photo().into())
        .await
        .unwrap();
    for path in [
        format!("/v1/jobs/{id}/output"),
        format!("/v1/assets/{}/content", asset.id),
    ] {
        let r = http
            .get(format!("{base}{path}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers();
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert!(
            h["content-security-policy"]
                .to_str()
                .unwrap()
                .starts_with("sandbox"),
            "{path}"
        );
        let disposition = h["content-disposition"].to_str().unwrap();
        assert!(
            disposition.starts_with("inline; filename=\""),
            "{disposition}"
        );
        assert!(disposition.ends_with(".png\""), "{disposition}");
        assert_eq!(h["content-type"], "image/png");
    }
}

async fn a_cancel_mid_poll_stops_the_run_and_books_the_estimate(db: TestDb) {
    let base = mock(true, true, 5000, Some("0.100000")).await;
    let db = db.with_config(&model("m", &base, "")).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    until_submitted(&db, id).await;
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
    let events = db.history(id).await;
    assert!(
        events.iter().any(|e| e.kind() == "lease_lost"),
        "{events:?}"
    );
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
    let api = db.serve_ops().await;
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
    // What it cost the database: the job's three units (before the call,
    // the prediction id, the end), whatever else this node committed.
    let units: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_db_commits_total{purpose=\"units\"} "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no units counter in {text}"));
    assert_eq!(units, 3, "{text}");
    // The timeline names the attempt and the provider's id.
    let kinds: Vec<String> = db.history(id).await.into_iter().map(|e| e.kind()).collect();
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
        assert_eq!(job.error.as_ref().unwrap().code.as_str(), code);
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
    assert_eq!(
        job.error.as_ref().unwrap().code.as_str(),
        "GENERATION_FAILED"
    );
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
        .list_parked(&ParkedFilter {
            stage: Some(ParkedStage::SubmissionUncertain),
            limit: 10,
            ..Default::default()
        })
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
    let api = db.serve_ops().await;
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

    // Its owner cancels it: refunded once, but the record still waits for
    // a decision (rule 12: a record closes only by one), and the
    // possibly-paid call stays held, not settled, until then.
    let cancelled = db.tollgate.cancel_job(&u, id).await.unwrap();
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert_eq!(balance(&db, &u).await, Credits(100));
    let record = db.store().parked_for_job(id).await.unwrap().unwrap();
    assert_eq!(record.stage, ParkedStage::SubmissionUncertain);
    assert_eq!(held(&db).await, (Usd::ZERO, job.estimated_usd));
    assert_eq!(
        db.store().settle_left_holds().await.unwrap(),
        0,
        "the sweeper leaves it"
    );
    assert_eq!(held(&db).await, (Usd::ZERO, job.estimated_usd));
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
    assert_eq!(
        job.error.as_ref().unwrap().code.as_str(),
        "SUBMISSION_UNCERTAIN"
    );
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
    until_submitted(&db, id).await;
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
    assert_eq!(job.error.as_ref().unwrap().code.as_str(), "CONTENT_REFUSED");
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

// ---- cost truth: what a provider's bill would show ----

/// The day's (used, reserved) and the attempts' stored costs.
async fn bill(db: &TestDb, id: JobId) -> ((Usd, Usd), Vec<Option<Usd>>) {
    let costs = db
        .store()
        .attempts(id)
        .await
        .unwrap()
        .iter()
        .map(|a| a.cost_usd)
        .collect();
    (held(db).await, costs)
}

/// 1. A provider that says it honours keys but refuses the re-send: the
///    first send was accepted and paid, so its attempt stays unpriced and
///    the job parks with its hold; never "failed, $0, refunded".
async fn a_refused_resend_proves_nothing_and_parks_unpriced(db: TestDb) {
    let m = mock(false, false, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &m, "idempotency = true")).await;
    script(&m, &["accept_then_drop", "unauthorized"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Parked, "{:?}", job.error);
    assert_eq!(m.paid().await, 1);
    let (day, costs) = bill(&db, id).await;
    assert_eq!(costs, [None], "unpriced, never 0");
    assert_eq!(day, (Usd::ZERO, job.estimated_usd), "the hold stays");
    let p = db.store().parked_for_job(id).await.unwrap().unwrap();
    assert_eq!(p.stage, ParkedStage::SubmissionUncertain);
    assert!(p.evidence["last_error"]
        .as_str()
        .unwrap()
        .contains("re-send was refused"));
    assert_eq!(
        balance(&db, &u).await,
        Credits(100 - job.credits.get()),
        "not refunded"
    );
}

async fn a_refused_resend_refunds_with_the_estimate_booked_where_the_policy_says(db: TestDb) {
    let m = mock(false, false, 0, Some("0.100000")).await;
    let db = db
        .with_config(&model(
            "m",
            &m,
            "idempotency = true\non_uncertain = \"refund\"",
        ))
        .await;
    script(&m, &["accept_then_drop", "unauthorized"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(
        job.error.as_ref().unwrap().code.as_str(),
        "SUBMISSION_UNCERTAIN"
    );
    assert_eq!(m.paid().await, 1);
    let (day, costs) = bill(&db, id).await;
    assert_eq!(costs, [None]);
    assert_eq!(
        day,
        (job.estimated_usd, Usd::ZERO),
        "the estimate is booked"
    );
    assert_eq!(balance(&db, &u).await, Credits(100), "refunded once");
}

/// 2. A 401 while polling an accepted prediction (a key rotated mid-run):
///    it may be billed in full, so it stays unpriced and the job parks in
///    `polling_exhausted` with the provider's id.
async fn a_refused_poll_after_acceptance_parks_unpriced(db: TestDb) {
    let m = mock(true, true, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &m, "")).await;
    m.script(json!({"poll": ["unauthorized"]})).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Parked, "{:?}", job.error);
    assert_eq!(m.paid().await, 1);
    let (day, costs) = bill(&db, id).await;
    assert_eq!(costs, [None]);
    assert_eq!(day, (Usd::ZERO, job.estimated_usd));
    let a = db.store().attempts(id).await.unwrap().remove(0);
    assert_eq!(a.state, AttemptState::Submitted);
    let p = db.store().parked_for_job(id).await.unwrap().unwrap();
    assert_eq!(p.stage, ParkedStage::PollingExhausted);
    assert_eq!(p.provider_job_id, a.provider_job_id);
    assert!(p.provider_job_id.is_some());
}

/// 3. One quoted cost and one unknown: the day books the quote plus the
///    estimate kept for the unknown one, not one estimate for both.
async fn a_known_cost_is_kept_beside_an_unknown_one(db: TestDb) {
    let m = mock(true, true, 0, Some("0.050000")).await;
    let db = db.with_config(&model("m", &m, "attempts = 2")).await;
    script(&m, &["fail", "omit_cost"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    assert_eq!(m.paid().await, 2);
    let (day, costs) = bill(&db, id).await;
    assert_eq!(costs, [Some(usd("0.05")), None]);
    assert_eq!(day, (usd("0.05").plus(job.estimated_usd), Usd::ZERO));
}

/// 4. Every paid attempt reserves before it is sent: a cap with room for
///    two calls sends two, and the job fails cleanly, refunded.
async fn retries_stop_at_the_cap(db: TestDb) {
    let m = mock(true, true, 0, Some("0.100000")).await;
    let toml = format!(
        "daily_cap_usd = \"0.20\"\n{}",
        model("m", &m, "attempts = 3")
    );
    let db = db.with_config(&toml).await;
    script(&m, &["fail", "fail", "ok"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.error.as_ref().unwrap().code.as_str(), "SPENDING_PAUSED");
    assert!(job.error.as_ref().unwrap().message.contains("paused"));
    assert_eq!(m.paid().await, 2, "no call the day could not hold");
    let (day, costs) = bill(&db, id).await;
    assert_eq!(costs, [Some(usd("0.1")), Some(usd("0.1"))]);
    assert_eq!(day, (usd("0.2"), Usd::ZERO));
    assert_eq!(balance(&db, &u).await, Credits(100), "refunded");
}

/// 5. A 404 from a provider that cannot look up (or any answer the model
///    does not declare as "not found") is no proof that nothing was made.
async fn a_lookup_the_model_does_not_vouch_for_starts_nothing_new(db: TestDb) {
    let m = mock(false, false, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &m, "lookup = true")).await;
    script(&m, &["accept_then_drop"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Parked, "{:?}", job.error);
    assert_eq!(m.paid().await, 1);
    let (day, costs) = bill(&db, id).await;
    assert_eq!(
        costs,
        [None],
        "one attempt, unpriced; none started after it"
    );
    assert_eq!(day, (Usd::ZERO, job.estimated_usd));

    // The declared answer does start a new one: the mock's own 404 code.
    let m = mock(false, true, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &m, "lookup = true")).await;
    script(&m, &["hang"]).await;
    let db = db
        .with_config(&model("m", &m, "lookup = true\ntimeout_ms = 300"))
        .await;
    let id = edit(&db, &u, "k2").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    let a = db.store().attempts(id).await.unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(
        a[0].cost_usd,
        Some(Usd::ZERO),
        "nothing was made: known zero"
    );
    assert_eq!(m.paid().await, 1);
}

/// 6. An attempt whose model is gone, or now points elsewhere, is never
///    closed as free or re-sent under another model's policy: it parks.
async fn an_attempt_is_recovered_only_with_its_own_model(db: TestDb) {
    let m = mock(true, true, 0, Some("0.100000")).await;
    let other = mock(true, true, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &m, "idempotency = true")).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    // A run writes its attempt down, then dies before sending.
    let claim = db
        .store()
        .claim_jobs("dead", 1, 1.0)
        .await
        .unwrap()
        .remove(0);
    let attempt = NewAttempt {
        id: AttemptId::new(),
        job_id: id,
        purpose: AttemptPurpose::Generate,
        provider: "http".into(),
        endpoint: Some(m.base.clone()),
        model: "m".into(),
        attempt_no: 1,
        idempotency_key: format!("{id}:1"),
        hold: Some(Hold {
            day: Utc::now().date_naive(),
            amount: claim.job.estimated_usd,
            default_cap: usd("50"),
        }),
        started_at: Utc::now(),
    };
    db.store()
        .apply_one(Unit {
            job: id,
            token: claim.token,
            ops: vec![Op::BeginAttempt(attempt)],
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Now "m" points at another provider.
    let db = db
        .with_config(&model("m", &other, "idempotency = true"))
        .await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Parked, "{:?}", job.error);
    assert_eq!((m.paid().await, other.paid().await), (0, 0));
    let (day, costs) = bill(&db, id).await;
    assert_eq!(costs, [None]);
    assert_eq!(day, (Usd::ZERO, job.estimated_usd));
    let p = db.store().parked_for_job(id).await.unwrap().unwrap();
    assert_eq!(p.stage, ParkedStage::SubmissionUncertain);
    assert!(p.evidence.reason.contains("no longer configured"));
}

/// 7. A run whose claim moved on (a long failover, a clock ahead) cannot
///    overwrite its successor: its writes after the call are refused, and
///    the successor polls the same prediction; paid once.
async fn a_run_that_lost_its_lease_writes_nothing_after_the_call(db: TestDb) {
    let m = mock(true, true, 1500, Some("0.100000")).await;
    let db = db.with_config(&model("m", &m, "")).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    until_submitted(&db, id).await;
    // Its lease runs out behind its back and another node claims the job.
    expire_lease(&db, id).await;
    let thief = db.store().claim_jobs("thief", 1, 1.0).await.unwrap();
    assert_eq!(thief.len(), 1);
    // The first run finishes its poll: everything it writes is refused.
    for _ in 0..100 {
        let events = db.history(id).await;
        if events.iter().any(|e| e.kind() == "lease_lost") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let a = db.store().attempts(id).await.unwrap().remove(0);
    assert_eq!((a.state, a.cost_usd), (AttemptState::Submitted, None));
    // The thief dies too; this node claims the job and polls the same one.
    let job = {
        let mut job = None;
        for _ in 0..200 {
            let j = db.store().job(id).await.unwrap().unwrap();
            if j.status.is_terminal() {
                job = Some(j);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        job.expect("the job finished")
    };
    engine.shutdown().await;
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(m.paid().await, 1);
    let (day, costs) = bill(&db, id).await;
    assert_eq!(costs, [Some(usd("0.1"))]);
    assert_eq!(day, (usd("0.1"), Usd::ZERO));
}

/// Ends a job's lease and its node's now (as a long failover would),
/// straight in the database.
async fn expire_lease(db: &TestDb, id: JobId) {
    let past = Utc::now() - chrono::Duration::hours(1);
    for sql in [
        "UPDATE jobs SET lease_expires_at = $1 WHERE id = $2",
        "UPDATE node_leases SET expires_at = $1 \
         WHERE owner = (SELECT lease_owner FROM jobs WHERE id = $2)",
    ] {
        assert_eq!(db.backdate(sql, past, Some(id.0)).await, 1, "{sql}");
    }
}

/// 8. A prediction that failed after its window is not retried, even when
///    the run that sees the failure started after a crash.
async fn the_prediction_window_counts_from_the_attempts_start(db: TestDb) {
    let m = mock(true, true, 0, Some("0.100000")).await;
    let db = db
        .with_config(&model("m", &m, "attempts = 3\nprediction_window_s = 5"))
        .await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    // A run sent attempt 1 ten minutes ago and died; it failed at the provider.
    let claim = db
        .store()
        .claim_jobs("dead", 1, 1.0)
        .await
        .unwrap()
        .remove(0);
    m.script(json!({"next": ["fail"]})).await;
    let key = format!("{id}:1");
    let sent: Value = reqwest::Client::new()
        .post(format!("{}/v1/predictions", m.base))
        .header("idempotency-key", &key)
        .json(&json!({"model": "m", "input": {}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let attempt = NewAttempt {
        id: AttemptId::new(),
        job_id: id,
        purpose: AttemptPurpose::Generate,
        provider: "http".into(),
        endpoint: Some(m.base.clone()),
        model: "m".into(),
        attempt_no: 1,
        idempotency_key: key,
        hold: Some(Hold {
            day: Utc::now().date_naive(),
            amount: claim.job.estimated_usd,
            default_cap: usd("50"),
        }),
        started_at: Utc::now() - chrono::Duration::minutes(10),
    };
    let a = attempt.id;
    db.store()
        .apply_one(Unit {
            job: id,
            token: claim.token,
            ops: vec![
                Op::BeginAttempt(attempt),
                Op::Submitted {
                    attempt: a,
                    provider_job_id: sent["id"].as_str().unwrap().into(),
                },
            ],
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(
        job.status,
        JobStatus::Failed,
        "not retried after its window"
    );
    assert_eq!(m.paid().await, 1);
    let (day, costs) = bill(&db, id).await;
    assert_eq!(costs, [Some(usd("0.1"))]);
    assert_eq!(day, (usd("0.1"), Usd::ZERO));
    assert_eq!(balance(&db, &u).await, Credits(100));
}

/// 9. A 503 to a submission may come from a load balancer after the request
///    was accepted: re-sent under the same key where the model declares
///    idempotency, parked where it declares nothing.
async fn a_submit_503_is_uncertain_unless_the_model_says_otherwise(db: TestDb) {
    let m = mock(true, true, 0, Some("0.100000")).await;
    let db = db.with_config(&model("m", &m, "idempotency = true")).await;
    script(&m, &["unavailable"]).await;
    let u = person(&db).await;
    let id = edit(&db, &u, "k").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    assert_eq!(
        db.store().attempts(id).await.unwrap().len(),
        1,
        "re-sent, not a new attempt"
    );
    assert_eq!(m.paid().await, 1);

    let db = db.with_config(&model("m", &m, "")).await;
    script(&m, &["unavailable"]).await;
    let id = edit(&db, &u, "k2").await;
    let job = run_until_settled(&db, id).await;
    assert_eq!(job.status, JobStatus::Parked, "{:?}", job.error);
    let (_, costs) = bill(&db, id).await;
    assert_eq!(costs, [None]);
}

/// A look-up answered 200 without a prediction id, or a 404 the model does
/// not declare, proves nothing; the declared 404 means "nothing made".
#[tokio::test]
async fn lookup_answers_are_read_as_the_model_declares() {
    use axum::routing::get;
    use tollgate::config::models::{Models, ProviderKind};
    use tollgate::providers::{http::HttpProvider, Lookup, Provider};
    let app = axum::Router::new().route(
        "/v1/predictions",
        get(
            |q: axum::extract::Query<std::collections::HashMap<String, String>>| async move {
                match q.0.get("idempotency_key").map(String::as_str) {
                    Some("empty") => (axum::http::StatusCode::OK, axum::Json(json!({}))),
                    Some("known") => (axum::http::StatusCode::OK, axum::Json(json!({"id": "p1"}))),
                    Some("gone") => (
                        axum::http::StatusCode::NOT_FOUND,
                        axum::Json(json!({"error": {"code": "no_such_prediction"}})),
                    ),
                    _ => (
                        axum::http::StatusCode::NOT_FOUND,
                        axum::Json(json!({"error": {"code": "route_not_found"}})),
                    ),
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let mut spec = Models::builtin().models[0].clone();
    spec.provider = ProviderKind::Http;
    spec.endpoint = Some(base);
    spec.lookup = true;
    spec.lookup_not_found_code = "no_such_prediction".into();
    let http = HttpProvider::new();
    assert_eq!(
        http.lookup(&spec, "known").await.unwrap(),
        Lookup::Found("p1".into())
    );
    assert_eq!(http.lookup(&spec, "gone").await.unwrap(), Lookup::NotFound);
    assert!(matches!(
        http.lookup(&spec, "empty").await.unwrap(),
        Lookup::Unclear(_)
    ));
    assert!(matches!(
        http.lookup(&spec, "other").await.unwrap(),
        Lookup::Unclear(_)
    ));
}
