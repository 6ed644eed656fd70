//! The mock provider keeps its word: idempotency and lookup as configured,
//! paid calls counted per key, and every scripted behaviour.

use serde_json::{json, Value};
use std::time::Duration;
use tollgate::providers::mock::{DropConnection, MockConfig, MockProvider};

async fn serve(config: MockConfig) -> String {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<DropConnection>().is_none() {
            default_hook(info);
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = MockConfig {
        public_base: format!("http://{addr}"),
        ..config
    };
    tokio::spawn(async move {
        let _ = axum::serve(listener, MockProvider::new(config).router()).await;
    });
    format!("http://{addr}")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

async fn submit(base: &str, key: &str) -> Result<reqwest::Response, reqwest::Error> {
    client()
        .post(format!("{base}/v1/predictions"))
        .header("idempotency-key", key)
        .json(&json!({"model": "mock-edit", "input": {"prompt": "x"}}))
        .send()
        .await
}

async fn stats(base: &str) -> Value {
    client()
        .get(format!("{base}/_mock/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn script(base: &str, next: Value) {
    let r = client()
        .post(format!("{base}/_mock/script"))
        .json(&json!({ "next": next }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn idempotency_on_pays_once_per_key() {
    let base = serve(MockConfig::default()).await;
    let first = submit(&base, "job:1").await.unwrap();
    assert_eq!(first.status(), 201);
    let a: Value = first.json().await.unwrap();
    assert_eq!(a["status"], "starting");
    let again = submit(&base, "job:1").await.unwrap();
    assert_eq!(again.status(), 200);
    let b: Value = again.json().await.unwrap();
    assert_eq!(a["id"], b["id"]);
    let s = stats(&base).await;
    assert_eq!(s["paid_predictions"], 1);
    assert_eq!(s["by_idempotency_key"]["job:1"], 1);
    // Done at zero latency: succeeded, priced, with an output that exists.
    let p: Value = client()
        .get(format!(
            "{base}/v1/predictions/{}",
            a["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(p["status"], "succeeded");
    assert_eq!(p["cost_usd"], "0.100000");
    let out = client()
        .get(p["output"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 200);
    assert_eq!(out.headers()["content-type"], "image/png");
}

#[tokio::test]
async fn idempotency_off_pays_every_time_and_lookup_can_be_off() {
    let base = serve(MockConfig {
        idempotency: false,
        lookup: false,
        ..MockConfig::default()
    })
    .await;
    assert_eq!(submit(&base, "job:1").await.unwrap().status(), 201);
    assert_eq!(submit(&base, "job:1").await.unwrap().status(), 201);
    assert_eq!(stats(&base).await["by_idempotency_key"]["job:1"], 2);
    let r = client()
        .get(format!("{base}/v1/predictions?idempotency_key=job:1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn lookup_finds_a_prediction_by_key() {
    let base = serve(MockConfig::default()).await;
    let a: Value = submit(&base, "job:7").await.unwrap().json().await.unwrap();
    let found: Value = client()
        .get(format!("{base}/v1/predictions?idempotency_key=job:7"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(found["id"], a["id"]);
    let missing = client()
        .get(format!("{base}/v1/predictions?idempotency_key=job:8"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn refused_statuses_create_nothing() {
    let base = serve(MockConfig::default()).await;
    script(
        &base,
        json!(["rate_limit", "unavailable", "unauthorized", "invalid"]),
    )
    .await;
    let r = submit(&base, "a").await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(submit(&base, "b").await.unwrap().status(), 503);
    assert_eq!(submit(&base, "c").await.unwrap().status(), 401);
    assert_eq!(submit(&base, "d").await.unwrap().status(), 422);
    assert_eq!(stats(&base).await["paid_predictions"], 0);
    // Then back to ok.
    assert_eq!(submit(&base, "e").await.unwrap().status(), 201);
    assert_eq!(stats(&base).await["paid_predictions"], 1);
}

#[tokio::test]
async fn failures_refusals_and_missing_costs_are_reported() {
    let base = serve(MockConfig::default()).await;
    script(&base, json!(["fail", "refuse", "omit_cost"])).await;
    let mut seen = Vec::new();
    for key in ["f", "r", "o"] {
        let p: Value = submit(&base, key).await.unwrap().json().await.unwrap();
        let p: Value = client()
            .get(format!(
                "{base}/v1/predictions/{}",
                p["id"].as_str().unwrap()
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        seen.push(p);
    }
    assert_eq!(seen[0]["status"], "failed");
    assert_eq!(seen[0]["error"]["code"], "generation_failed");
    assert_eq!(seen[1]["status"], "failed");
    assert_eq!(seen[1]["error"]["code"], "content_refused");
    assert_eq!(seen[2]["status"], "succeeded");
    assert!(seen[2]["cost_usd"].is_null());
    assert_eq!(stats(&base).await["paid_predictions"], 3);
}

#[tokio::test]
async fn accept_then_drop_is_paid_but_unanswered() {
    let base = serve(MockConfig::default()).await;
    script(&base, json!(["accept_then_drop"])).await;
    let r = submit(&base, "job:9").await;
    assert!(r.is_err(), "the client must get no answer: {r:?}");
    let s = stats(&base).await;
    assert_eq!(s["paid_predictions"], 1);
    assert_eq!(s["by_idempotency_key"]["job:9"], 1);
    // The prediction exists and can be found by its key.
    let found = client()
        .get(format!("{base}/v1/predictions?idempotency_key=job:9"))
        .send()
        .await
        .unwrap();
    assert_eq!(found.status(), 200);
}

#[tokio::test]
async fn hang_never_answers() {
    let base = serve(MockConfig::default()).await;
    script(&base, json!(["hang"])).await;
    let r = submit(&base, "job:h").await;
    assert!(r.is_err_and(|e| e.is_timeout()));
    assert_eq!(stats(&base).await["paid_predictions"], 0);
}

#[tokio::test]
async fn latency_keeps_a_prediction_running() {
    let base = serve(MockConfig {
        latency: Duration::from_millis(400),
        price_usd: None,
        ..MockConfig::default()
    })
    .await;
    let p: Value = submit(&base, "slow").await.unwrap().json().await.unwrap();
    let url = format!("{base}/v1/predictions/{}", p["id"].as_str().unwrap());
    let early: Value = client()
        .get(&url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(["starting", "processing"].contains(&early["status"].as_str().unwrap()));
    assert!(early["output"].is_null());
    tokio::time::sleep(Duration::from_millis(450)).await;
    let late: Value = client()
        .get(&url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(late["status"], "succeeded");
    assert!(late["cost_usd"].is_null(), "--no-price reports null");
}

#[tokio::test]
async fn bad_scripts_are_refused() {
    let base = serve(MockConfig::default()).await;
    let r = client()
        .post(format!("{base}/_mock/script"))
        .json(&json!({"next": ["explode"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
}
