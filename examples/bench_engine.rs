//! Engine benchmarks (docs/benchmarks.md):
//!
//! - `throughput`: end-to-end image edits per second through the engine
//!   (claim, reserve, readiness, an attempt on the mock provider at zero
//!   latency: submit, poll, download, put-if-absent, review, settle, the
//!   terminal write) on SQLite and PostgreSQL; next to graphile-worker's
//!   no-op jobs per second on the same PostgreSQL, in the same run.
//! - `inflight`: 10,000 jobs waiting on a provider with 60 s latency (the
//!   mock provider as its own process): resident memory and CPU of this
//!   process (engine and, on SQLite, the database) while they wait.
//!
//! Run through scripts/bench, which starts PostgreSQL, installs the
//! graphile-worker peer, and builds in release mode.

use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::model::{Credits, JobStatus, Role};
use tollgate::providers::mock::{MockConfig, MockProvider};
use tollgate::store::{Backend, User};
use tollgate::testkit::TestDb;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn photo() -> Vec<u8> {
    tollgate::testkit::photo_of_a_dog(64, 48)
}

async fn in_process_mock() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = MockProvider::new(MockConfig {
        public_base: base.clone(),
        ..MockConfig::default()
    })
    .router();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    base
}

fn model_toml(base: &str, extra: &str) -> String {
    format!(
        "daily_cap_usd = \"100000\"\n[[models]]\nid = \"mock-edit\"\nkind = \"image_edit\"\nprovider = \"http\"\nendpoint = \"{base}\"\n\
         price = {{ per_generation = \"0.0001\" }}\nidempotency = true\ndefault = true\n{extra}\n"
    )
}

/// Submits `n` edits with 16 concurrent submitters; returns submissions/s.
async fn submit(db: &TestDb, u: &User, n: usize) -> f64 {
    let source = db
        .tollgate
        .upload_asset(u, Some("image/png"), photo().into())
        .await
        .unwrap();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..16 {
        let (t, u) = (db.tollgate.clone(), u.clone());
        let source = source.id;
        tasks.push(tokio::spawn(async move {
            for i in (c..n).step_by(16) {
                let body = json!({"kind": "image_edit", "source": source,
                    "target": {"kind": "pet"}, "style": "embroidery", "strength": "balanced"});
                t.submit_job(&u, Some(&format!("bench-{i}")), &body)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / started.elapsed().as_secs_f64()
}

async fn person(db: &TestDb) -> User {
    let u = db
        .tollgate
        .add_user("bench@example.com", Role::User, "correct horse battery")
        .await
        .unwrap();
    db.tollgate
        .grant_credits(None, u.id, Credits(1_000_000), None, None)
        .await
        .unwrap();
    u
}

async fn count(db: &TestDb, status: JobStatus) -> i64 {
    let m = db.store().metrics_snapshot().await.unwrap();
    m.jobs_by_status
        .iter()
        .filter(|(s, _)| s == status.as_str())
        .map(|(_, n)| *n)
        .sum()
}

async fn throughput() {
    let jobs: usize = arg("--jobs", "2000").parse().unwrap();
    let workers: usize = arg("--workers", "64").parse().unwrap();
    println!("| backend | jobs | in flight | jobs/s through the engine |");
    println!("|---|---:|---:|---:|");
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let base = in_process_mock().await;
        let db = TestDb::new(backend)
            .await
            .with_config(&model_toml(&base, "poll_ms = 5"))
            .await;
        let u = person(&db).await;
        submit(&db, &u, jobs).await;
        let started = Instant::now();
        let engine = tollgate::engine::start(db.tollgate.clone(), workers);
        loop {
            let done = count(&db, JobStatus::Succeeded).await + count(&db, JobStatus::Failed).await;
            if done as usize >= jobs {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let rate = jobs as f64 / started.elapsed().as_secs_f64();
        engine.shutdown().await;
        let ok = count(&db, JobStatus::Succeeded).await;
        assert_eq!(ok as usize, jobs, "every job succeeds");
        println!("| {backend:?} | {jobs} | {workers} | {rate:.0} |");
    }
    // The peer: graphile-worker's no-op jobs on a fresh database of the same server.
    let db = TestDb::postgres().await;
    for concurrency in [16usize, 64] {
        let name = format!("graphile_{}", uuid::Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&std::env::var("TOLLGATE_TEST_POSTGRES_URL").unwrap())
            .await
            .unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        let url = db.url.rsplit_once('/').unwrap().0.to_string() + "/" + &name;
        let out = Command::new("node")
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/bench/graphile"))
            .args(["noop.mjs", "--url", &url, "--jobs", &jobs.to_string()])
            .args(["--concurrency", &concurrency.to_string()])
            .stderr(Stdio::inherit())
            .output()
            .expect("running node bench/graphile/noop.mjs");
        assert!(out.status.success(), "graphile-worker benchmark failed");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        println!(
            "| graphile-worker no-op (Postgres) | {jobs} | {concurrency} | {:.0} |",
            v["jobs_per_s"].as_f64().unwrap()
        );
    }
}

/// (resident bytes, peak resident bytes, CPU seconds) of this process.
fn usage() -> (u64, u64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (11, 12 here).
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    (
        kib("VmRSS:") * 1024,
        kib("VmHWM:") * 1024,
        ticks as f64 / 100.0,
    )
}

async fn inflight() {
    let jobs: usize = arg("--jobs", "10000").parse().unwrap();
    let window: u64 = arg("--window-s", "20").parse().unwrap();
    let mock_bin = arg("--mock", "target/release/tollgate-mock-provider");
    let backend = match arg("--backend", "sqlite").as_str() {
        "postgres" => Backend::Postgres,
        _ => Backend::Sqlite,
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut mock = Command::new(&mock_bin)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--latency-ms",
            "60000",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {mock_bin}: {e}"));
    let base = format!("http://127.0.0.1:{port}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let db = TestDb::new(backend)
        .await
        .with_config(&model_toml(
            &base,
            "expected_s = 60\npoll_ms = 1000\npoll_timeout_s = 900",
        ))
        .await;
    let u = person(&db).await;
    submit(&db, &u, jobs).await;
    let (before, _, _) = usage();
    let started = Instant::now();
    let _engine = tollgate::engine::start(db.tollgate.clone(), jobs);
    // Wait until every job's call was accepted and is being waited on.
    loop {
        let m = db.store().metrics_snapshot().await.unwrap();
        let submitted: i64 = m
            .attempts_by_model
            .iter()
            .filter(|a| a.1 == "submitted")
            .map(|a| a.2)
            .sum();
        if submitted as usize >= jobs {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "ramp-up took over 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ramp = started.elapsed();
    let (_, _, cpu0) = usage();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(window)).await;
    let (rss, peak, cpu1) = usage();
    let cpu = (cpu1 - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    println!("| backend | jobs in flight | ramp-up | resident memory before the engine | resident memory | peak | CPU while waiting |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {backend:?} | {jobs} | {:.1} s | {:.0} MiB | {:.0} MiB | {:.0} MiB | {cpu:.2}% of a core |",
        ramp.as_secs_f64(),
        before as f64 / 1048576.0,
        rss as f64 / 1048576.0,
        peak as f64 / 1048576.0,
    );
    let _ = mock.kill();
    let _ = mock.wait();
    std::process::exit(0);
}

#[tokio::main]
async fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("throughput") => throughput().await,
        Some("inflight") => inflight().await,
        _ => {
            eprintln!("usage: bench_engine throughput [--jobs N --workers W] | inflight [--jobs N --backend sqlite|postgres --mock PATH --window-s S]");
            std::process::exit(2);
        }
    }
}
