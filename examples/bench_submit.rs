//! Submissions per second through the HTTP API, next to the raw rate of the
//! same transaction (job insert plus ledger debit) issued directly with sqlx,
//! on SQLite and PostgreSQL, with 1, 16 and 64 concurrent clients. Half of
//! the API clients replay one key (the 202 path); half make new jobs.
//!
//! Run: TOLLGATE_TEST_POSTGRES_URL=postgres://... cargo run --release --example bench_submit
//! (scripts/bench starts the PostgreSQL for you). Prints a Markdown table.

use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate::model::{Credits, Role};
use tollgate::store::Backend;
use tollgate_testkit::TestDb;

const SECONDS_PER_RUN: u64 = 4;
const CLIENTS: [usize; 3] = [1, 16, 64];

/// Runs `clients` loops of `one` for the run's duration; returns calls per second.
async fn measure<F, Fut>(clients: usize, one: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let one = Arc::new(one);
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(SECONDS_PER_RUN);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (one, done) = (one.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while Instant::now() < deadline {
                if one(c, i).await {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// The raw transaction: the same two inserts, straight through sqlx.
async fn raw_rate(db: &TestDb, clients: usize, user: uuid::Uuid) -> f64 {
    let body = json!({"kind": "video", "prompt": "raw", "model": "local-clip", "duration_s": 2, "resolution": "720p"}).to_string();
    let hash = "0".repeat(64);
    match db.store().backend() {
        Backend::Sqlite => {
            let pool = db.store().sqlite_pool().expect("sqlite");
            measure(clients, move |c, i| {
                let (pool, body, hash) = (pool.clone(), body.clone(), hash.clone());
                async move {
                    let id = uuid::Uuid::new_v4();
                    let Ok(mut tx) = pool.begin().await else { return false };
                    let ok = sqlx::query("INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, idempotency_key, credits, estimated_usd, created_at) VALUES (?, ?, 'video', 'queued', ?, ?, ?, 1, '0.040000', ?) ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING")
                        .bind(id).bind(user).bind(&body).bind(&hash).bind(format!("raw-{c}-{i}-{id}")).bind(chrono::Utc::now())
                        .execute(&mut *tx).await.is_ok()
                        && sqlx::query("INSERT INTO ledger (id, user_id, amount, kind, reference, created_at) VALUES (?, ?, -1, 'debit', ?, ?)")
                            .bind(uuid::Uuid::new_v4()).bind(user).bind(format!("debit:job:{id}")).bind(chrono::Utc::now())
                            .execute(&mut *tx).await.is_ok();
                    ok && tx.commit().await.is_ok()
                }
            })
            .await
        }
        Backend::Postgres => {
            let pool = db.store().postgres_pool().expect("postgres");
            measure(clients, move |c, i| {
                let (pool, body, hash) = (pool.clone(), body.clone(), hash.clone());
                async move {
                    let id = uuid::Uuid::new_v4();
                    let Ok(mut tx) = pool.begin().await else { return false };
                    let ok = sqlx::query("INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, idempotency_key, credits, estimated_usd, created_at) VALUES ($1, $2, 'video', 'queued', $3::jsonb, $4, $5, 1, 0.04, $6) ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING")
                        .bind(id).bind(user).bind(&body).bind(&hash).bind(format!("raw-{c}-{i}-{id}")).bind(chrono::Utc::now())
                        .execute(&mut *tx).await.is_ok()
                        && sqlx::query("INSERT INTO ledger (id, user_id, amount, kind, reference, created_at) VALUES ($1, $2, -1, 'debit', $3, $4)")
                            .bind(uuid::Uuid::new_v4()).bind(user).bind(format!("debit:job:{id}")).bind(chrono::Utc::now())
                            .execute(&mut *tx).await.is_ok();
                    ok && tx.commit().await.is_ok()
                }
            })
            .await
        }
    }
}

async fn api_rate(db: &TestDb, clients: usize, token: &str, base: &str) -> f64 {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()
        .expect("client");
    let token = token.to_string();
    let url = format!("{base}/v1/jobs");
    let body = json!({"kind": "video", "prompt": "a paper boat on a pond", "model": "local-clip", "duration_s": 2, "resolution": "720p"});
    let _ = db;
    measure(clients, move |c, i| {
        let (http, token, url, body) = (http.clone(), token.clone(), url.clone(), body.clone());
        async move {
            // Even clients replay their one key; odd clients always make new jobs.
            let key = if c % 2 == 0 {
                format!("replay-{c}")
            } else {
                format!("new-{c}-{i}-{}", uuid::Uuid::new_v4())
            };
            match http
                .post(&url)
                .bearer_auth(&token)
                .header("idempotency-key", key)
                .json(&body)
                .send()
                .await
            {
                Ok(r) => r.status().as_u16() == 201 || r.status().as_u16() == 202,
                Err(_) => false,
            }
        }
    })
    .await
}

#[tokio::main]
async fn main() {
    println!("| backend | clients | API submissions/s | raw transactions/s | API / raw |");
    println!("|---|---:|---:|---:|---:|");
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let db = TestDb::new(backend).await;
        let t = &db.tollgate;
        let user = t
            .add_user("bench@example.com", Role::User, "bench password 1")
            .await
            .expect("user");
        t.grant_credits(None, user.id, Credits(1_000_000), None, None)
            .await
            .expect("grant");
        let token = t.create_api_token(&user, "bench").await.expect("token").1;
        let base = db.serve_api().await;
        for clients in CLIENTS {
            let api = api_rate(&db, clients, &token, &base).await;
            let raw = raw_rate(&db, clients, user.id.0).await;
            println!(
                "| {backend:?} | {clients} | {api:.0} | {raw:.0} | {:.2} |",
                if raw > 0.0 { api / raw } else { 0.0 }
            );
        }
        // The ledger still sums to the balance after all of it.
        let balance = t.user(user.id).await.expect("user").balance;
        assert_eq!(t.store().ledger_sum(user.id).await.expect("sum"), balance);
    }
}
