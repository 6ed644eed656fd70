//! How fast `GET /v1/spend` answers as history grows (issue: spend you can
//! trust): 1,000,000 jobs and 5,000,000 attempts over 90 days, priced and
//! unpriced, three models and three error classes; then the latency of
//! `GET /v1/spend` for one day and for 30 days, over HTTP to an in-process
//! server with an admin token, on SQLite and PostgreSQL. Prints p50, p95
//! and p99 and checks that the rollup the triggers kept equals a plain sum
//! over the attempts.
//!
//! The seed is written with bulk SQL, only by this benchmark. On SQLite the
//! attempts' triggers keep the rollup as they do for real attempts; on
//! PostgreSQL the seed turns row triggers off (millions of updates of a few
//! rollup rows in one transaction are quadratic there) and sums the rollup
//! once. Either way the rollup is then checked against a plain sum.
//!
//! Run: TOLLGATE_TEST_POSTGRES_URL=postgres://... cargo run --release --example bench_spend -- [--jobs N] [--backend sqlite|postgres]
//! (scripts/bench starts the PostgreSQL for you).

use std::time::{Duration, Instant};
use tollgate::model::Role;
use tollgate::store::Backend;
use tollgate_testkit::TestDb;

const ATTEMPTS_PER_JOB: i64 = 5;
const DAYS: i64 = 90;
const CALLS: usize = 400;
/// Jobs seeded per statement, so no single statement runs for minutes.
const JOBS_PER_CHUNK: i64 = 100_000;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// SQLite: a recursive count, ids from the counter (16 bytes), money in
/// millionths, times as RFC 3339 text. Attempt `n` of job `g` started on
/// day `g % 90` before today; one attempt in twenty has no known cost.
async fn seed_sqlite(pool: &sqlx::SqlitePool, user: uuid::Uuid, jobs: i64) {
    let mut tx = pool.begin().await.expect("a transaction");
    sqlx::query(
        "INSERT OR IGNORE INTO budget_days (day, cap_usd) \
         WITH RECURSIVE d(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM d WHERE n < $1) \
         SELECT date('now', '-' || n || ' days'), 50000000 FROM d",
    )
    .bind(DAYS)
    .execute(&mut *tx)
    .await
    .expect("budget days");
    let mut start = 0;
    while start < jobs {
        let end = (start + JOBS_PER_CHUNK).min(jobs);
        sqlx::query(
            "INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, credits, estimated_usd, created_at, completed_at) \
             WITH RECURSIVE g(x) AS (SELECT $1 UNION ALL SELECT x + 1 FROM g WHERE x + 1 < $2) \
             SELECT unhex(printf('%032x', x)), $3, 'image_edit', 'succeeded', '{}', printf('%064d', 0), 3, 50000, \
                    strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '-' || (x % $4) || ' days', '-' || (x % 3600) || ' seconds'), \
                    strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '-' || (x % $4) || ' days', '-' || (x % 3600) || ' seconds') \
             FROM g",
        )
        .bind(start)
        .bind(end)
        .bind(user)
        .bind(DAYS)
        .execute(&mut *tx)
        .await
        .expect("jobs");
        sqlx::query(
            "INSERT INTO attempts (id, job_id, purpose, provider, model, attempt_no, state, idempotency_key, \
                                   error_class, cost_usd, cost_source, hold_usd, budget_day, settled_usd, started_at, finished_at) \
             WITH RECURSIVE g(x) AS (SELECT $1 UNION ALL SELECT x + 1 FROM g WHERE x + 1 < $2), \
                  n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < $3) \
             SELECT unhex(printf('%016x%016x', x, k)), unhex(printf('%032x', x)), 'generate', 'http', \
                    CASE (x + k) % 3 WHEN 0 THEN 'edit-a' WHEN 1 THEN 'edit-b' ELSE 'clip-c' END, k, \
                    CASE WHEN k < $3 THEN 'failed' ELSE 'succeeded' END, x || '-' || k, \
                    CASE WHEN k < $3 THEN CASE (x * k) % 3 WHEN 0 THEN 'rate_limited' WHEN 1 THEN 'unavailable' ELSE 'refused' END END, \
                    CASE WHEN (x + k) % 20 = 0 THEN NULL ELSE 50000 END, \
                    CASE WHEN (x + k) % 20 = 0 THEN NULL ELSE 'quoted' END, \
                    50000, date('now', '-' || (x % $4) || ' days'), 50000, \
                    strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '-' || (x % $4) || ' days', '-' || (x % 3600) || ' seconds', '+' || k || ' seconds'), \
                    strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '-' || (x % $4) || ' days', '-' || (x % 3600) || ' seconds', '+' || k || ' seconds') \
             FROM g, n",
        )
        .bind(start)
        .bind(end)
        .bind(ATTEMPTS_PER_JOB)
        .bind(DAYS)
        .execute(&mut *tx)
        .await
        .expect("attempts");
        start = end;
    }
    // Seeded attempts arrive settled; the days' counters say so.
    sqlx::query(
        "UPDATE budget_days SET reserved_usd = 0, \
         used_usd = (SELECT COALESCE(SUM(settled_usd), 0) FROM attempts WHERE budget_day = budget_days.day)",
    )
    .execute(&mut *tx)
    .await
    .expect("the days' counters");
    tx.commit().await.expect("committing the seed");
    sqlx::query("ANALYZE").execute(pool).await.expect("analyze");
}

/// PostgreSQL: the same rows from generate_series.
async fn seed_postgres(pool: &sqlx::PgPool, user: uuid::Uuid, jobs: i64) {
    sqlx::query(
        "INSERT INTO budget_days (day, cap_usd) \
         SELECT current_date - n, 50 FROM generate_series(0, $1::int) n ON CONFLICT DO NOTHING",
    )
    .bind(DAYS)
    .execute(pool)
    .await
    .expect("budget days");
    let mut start = 0;
    while start < jobs {
        let end = (start + JOBS_PER_CHUNK).min(jobs);
        let mut tx = pool.begin().await.expect("a transaction");
        // Row triggers off for the seed: a hundred thousand updates of one
        // rollup row in one transaction walk an ever longer version chain
        // (quadratic). The rollup is summed once below instead.
        sqlx::query("SET LOCAL session_replication_role = replica")
            .execute(&mut *tx)
            .await
            .expect("triggers off");
        sqlx::query(
            "INSERT INTO jobs (id, user_id, kind, status, request, request_sha256, credits, estimated_usd, created_at, completed_at) \
             SELECT lpad(to_hex(x), 32, '0')::uuid, $3, 'image_edit', 'succeeded', '{}', repeat('0', 64), 3, 0.05, t, t \
             FROM generate_series($1, $2 - 1) x, \
                  LATERAL (SELECT now() - (x % $4) * interval '1 day' - (x % 3600) * interval '1 second' AS t) s",
        )
        .bind(start)
        .bind(end)
        .bind(user)
        .bind(DAYS)
        .execute(&mut *tx)
        .await
        .expect("jobs");
        sqlx::query(
            "INSERT INTO attempts (id, job_id, purpose, provider, model, attempt_no, state, idempotency_key, \
                                   error_class, cost_usd, cost_source, hold_usd, budget_day, settled_usd, started_at, finished_at) \
             SELECT (lpad(to_hex(x), 16, '0') || lpad(to_hex(k), 16, '0'))::uuid, lpad(to_hex(x), 32, '0')::uuid, \
                    'generate', 'http', (ARRAY['edit-a', 'edit-b', 'clip-c'])[1 + (x + k) % 3], k, \
                    CASE WHEN k < $3 THEN 'failed' ELSE 'succeeded' END, x || '-' || k, \
                    CASE WHEN k < $3 THEN (ARRAY['rate_limited', 'unavailable', 'refused'])[1 + (x * k) % 3] END, \
                    CASE WHEN (x + k) % 20 = 0 THEN NULL ELSE 0.05 END, \
                    CASE WHEN (x + k) % 20 = 0 THEN NULL ELSE 'quoted' END, \
                    0.05, (now() - (x % $4) * interval '1 day')::date, 0.05, t, t \
             FROM generate_series($1, $2 - 1) x, generate_series(1, $3) k, \
                  LATERAL (SELECT now() - (x % $4) * interval '1 day' - (x % 3600) * interval '1 second' \
                                  + k * interval '1 second' AS t) s",
        )
        .bind(start)
        .bind(end)
        .bind(ATTEMPTS_PER_JOB as i32)
        .bind(DAYS)
        .execute(&mut *tx)
        .await
        .expect("attempts");
        tx.commit().await.expect("committing a chunk");
        start = end;
    }
    sqlx::query(
        "INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced) \
         SELECT budget_day, provider, model, COALESCE(error_class, ''), count(*), COALESCE(sum(cost_usd), 0), \
                count(cost_usd), count(*) FILTER (WHERE cost_usd IS NULL AND state IN ('succeeded', 'failed')) \
         FROM attempts GROUP BY 1, 2, 3, 4 \
         ON CONFLICT (day, provider, model, error_class) DO UPDATE SET \
             attempts = spend_rollup.attempts + excluded.attempts, \
             priced_usd = spend_rollup.priced_usd + excluded.priced_usd, \
             priced = spend_rollup.priced + excluded.priced, \
             unpriced = spend_rollup.unpriced + excluded.unpriced",
    )
    .execute(pool)
    .await
    .expect("the rollup");
    sqlx::query(
        "UPDATE budget_days b SET reserved_usd = 0, \
         used_usd = (SELECT COALESCE(SUM(settled_usd), 0) FROM attempts a WHERE a.budget_day = b.day)",
    )
    .execute(pool)
    .await
    .expect("the days' counters");
    sqlx::query("VACUUM ANALYZE")
        .execute(pool)
        .await
        .expect("analyze");
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

async fn run(db: TestDb, jobs: i64) {
    let t = &db.tollgate;
    let admin = t
        .add_user("admin@bench.test", Role::Admin, "benchmark password")
        .await
        .expect("admin");
    let owner = t
        .add_user("user@bench.test", Role::User, "benchmark password")
        .await
        .expect("user");
    let (_, token) = t.create_api_token(&admin, "bench").await.expect("token");
    let backend = db.store().backend();
    let seeded = Instant::now();
    match backend {
        Backend::Sqlite => seed_sqlite(&db.store().sqlite_pool().unwrap(), owner.id.0, jobs).await,
        Backend::Postgres => {
            seed_postgres(&db.store().postgres_pool().unwrap(), owner.id.0, jobs).await
        }
    }
    let seed_s = seeded.elapsed().as_secs_f64();

    let today = chrono::Utc::now().date_naive();
    let month_ago = today - chrono::Duration::days(29);
    let rolled = db.store().spend_rows(month_ago, today).await.unwrap();
    let raw = db.store().spend_rows_raw(month_ago, today).await.unwrap();
    assert_eq!(
        rolled, raw,
        "the rollup equals a plain sum over the attempts"
    );

    let base = db.serve_api().await;
    let http = reqwest::Client::new();
    for (label, from) in [("1 day", today), ("30 days", month_ago)] {
        let url = format!("{base}/v1/spend?from={from}&to={today}");
        // Warm the connection and the caches first.
        for _ in 0..20 {
            let r = http.get(&url).bearer_auth(&token).send().await.unwrap();
            assert!(r.status().is_success());
            r.bytes().await.unwrap();
        }
        let mut took = Vec::with_capacity(CALLS);
        let mut attempts = 0;
        for _ in 0..CALLS {
            let start = Instant::now();
            let r = http.get(&url).bearer_auth(&token).send().await.unwrap();
            let v: serde_json::Value = r.json().await.unwrap();
            took.push(start.elapsed());
            attempts = v["total"]["attempts"].as_i64().unwrap_or(0);
        }
        took.sort();
        println!(
            "| {backend:?} | {jobs} | {} | {seed_s:.0} s | {label} | {attempts} | {:.2} | {:.2} | {:.2} |",
            jobs * ATTEMPTS_PER_JOB,
            percentile(&took, 0.5),
            percentile(&took, 0.95),
            percentile(&took, 0.99),
        );
    }
}

#[tokio::main]
async fn main() {
    let jobs: i64 = arg("--jobs")
        .map(|j| j.parse().expect("--jobs N"))
        .unwrap_or(1_000_000);
    let only = arg("--backend");
    println!("| backend | jobs | attempts | seeding | range | attempts in range | p50 ms | p95 ms | p99 ms |");
    println!("|---|---:|---:|---:|---|---:|---:|---:|---:|");
    if only.as_deref().is_none_or(|b| b == "sqlite") {
        run(TestDb::sqlite().await, jobs).await;
    }
    if only.as_deref().is_none_or(|b| b == "postgres") {
        run(TestDb::postgres().await, jobs).await;
    }
}
