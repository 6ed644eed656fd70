//! The crash test, with real processes: `tollgate serve` is killed with
//! SIGKILL while jobs are mid-flight and started again on the same
//! database. Every job ends in one terminal state, paid once, with every
//! attempt on record; the ledger matches the outcomes and no reservation is
//! left unsettled. Runs on SQLite and on PostgreSQL.
#![cfg(feature = "ssr")]

use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tollgate::model::AttemptState;
use tollgate::model::{Credits, JobId, JobStatus, Role, Usd};
use tollgate_testkit::both_backends;
use tollgate_testkit::{try_wait_until, wait_until, TestDb};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `tollgate serve` on the test's database and folder; waits for /healthz.
async fn serve(db: &TestDb) -> Child {
    serve_with(db, None).await
}

async fn serve_with(db: &TestDb, config: Option<&std::path::Path>) -> Child {
    serve_as(db, config, "all").await.0
}

/// A node in `role` (all, web or worker); returns it and its base URL.
async fn serve_as(db: &TestDb, config: Option<&std::path::Path>, role: &str) -> (Child, String) {
    // Short leases make recovery quick; the two-node test wants none to run
    // out on a loaded machine.
    let lease_s = if role == "all" { "2" } else { "5" };
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    if let Some(c) = config {
        command.env("TOLLGATE_CONFIG", c);
    }
    let mut child = command
        .args(["serve", "--role", role])
        .env("TOLLGATE_DATABASE_URL", &db.url)
        .env("TOLLGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("TOLLGATE_STORAGE", db.dir.join("objects"))
        .env("TOLLGATE_SITE_ROOT", db.dir.join("site"))
        .env("TOLLGATE_WORKERS", "8")
        .env("TOLLGATE_LEASE_SECONDS", lease_s)
        .env("TOLLGATE_LOG", "warn")
        .env("TOLLGATE_WEBHOOK_ALLOW_PUBLIC", "false")
        // Hundreds of jobs from one person: fair use is tested apart.
        .env("TOLLGATE_JOBS_PER_USER_PER_MINUTE", "100000")
        .env("TOLLGATE_JOBS_BURST_PER_USER", "100000")
        .stdout(Stdio::null())
        // Kept beside the test's database, so a failure can be read.
        .stderr(std::fs::File::create(db.dir.join(format!("{role}-{port}.log"))).unwrap())
        .spawn()
        .expect("starting tollgate serve");
    let base = format!("http://127.0.0.1:{port}");
    if tollgate_testkit::serving(&base).await {
        return (child, base);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("tollgate serve did not come up");
}

/// The jobs as they stand.
async fn read_jobs(db: &TestDb, ids: &[JobId]) -> Vec<tollgate::store::Job> {
    let mut jobs = Vec::new();
    for id in ids {
        jobs.push(db.store().job(*id).await.unwrap().unwrap());
    }
    jobs
}

/// The jobs once every one is as `done` says, or as they stand after two
/// minutes (the assertions that follow say which is not).
async fn jobs_when(
    db: &TestDb,
    ids: &[JobId],
    done: impl Fn(&tollgate::store::Job) -> bool,
) -> Vec<tollgate::store::Job> {
    let all_done = try_wait_until(Duration::from_secs(120), async || {
        let jobs = read_jobs(db, ids).await;
        jobs.iter().all(&done).then_some(jobs)
    })
    .await;
    match all_done {
        Some(jobs) => jobs,
        None => read_jobs(db, ids).await,
    }
}

/// Calls on record but not answered: (submitting, submitted).
async fn open_calls(db: &TestDb, ids: &[JobId]) -> (usize, usize) {
    let mut open = (0, 0);
    for id in ids {
        for a in db.store().attempts(*id).await.unwrap() {
            match a.state {
                AttemptState::Submitting => open.0 += 1,
                AttemptState::Submitted => open.1 += 1,
                AttemptState::Succeeded | AttemptState::Failed => {}
            }
        }
    }
    open
}

fn photo() -> Vec<u8> {
    tollgate_testkit::photo_of_a_dog(240, 180)
}

both_backends!(
    sigkill_mid_flight_then_restart,
    sigkill_mid_call_with_provider_idempotency_pays_each_key_once,
    sigkill_mid_call_without_idempotency_parks_instead_of_resending,
    sigkill_between_the_commits,
);

async fn sigkill_mid_flight_then_restart(db: TestDb) {
    let t = &db.tollgate;
    let u = t
        .add_user("u@example.com", Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, u.id, Credits(1_000), None, None)
        .await
        .unwrap();
    let source = t
        .upload_asset(&u, Some("image/png"), photo().into())
        .await
        .unwrap();
    let styles = [
        "embroidery",
        "origami",
        "mosaic",
        "linocut",
        "watercolour",
        "quilt",
    ];
    let mut ids: Vec<JobId> = Vec::new();
    for i in 0..24 {
        let body = if i % 6 == 5 {
            json!({"kind": "video", "prompt": format!("boat {i}"), "duration_s": 2, "resolution": "720p"})
        } else {
            json!({"kind": "image_edit", "source": source.id, "target": {"kind": "pet"},
                   "style": styles[i % styles.len()], "strength": "strong"})
        };
        ids.push(
            t.submit_job(&u, None, Some(&format!("crash-{i}")), &body)
                .await
                .unwrap()
                .job
                .id,
        );
    }

    // Kill the first node as soon as some jobs have finished and others have not.
    let mut first = serve(&db).await;
    try_wait_until(Duration::from_secs(60), async || {
        let jobs = read_jobs(&db, &ids).await;
        (jobs.iter().filter(|j| j.status.is_terminal()).count() >= 3).then_some(())
    })
    .await;
    first.kill().expect("SIGKILL");
    first.wait().unwrap();
    let mut unfinished = 0;
    for id in &ids {
        if !db
            .store()
            .job(*id)
            .await
            .unwrap()
            .unwrap()
            .status
            .is_terminal()
        {
            unfinished += 1;
        }
    }
    assert!(unfinished > 0, "the kill came too late to test anything");

    // A second node on the same database finishes the rest.
    let mut second = serve(&db).await;
    let jobs = jobs_when(&db, &ids, |j| j.status.is_terminal()).await;
    second.kill().ok();
    second.wait().ok();

    let mut spent_credits = 0;
    let mut spent_usd = Usd::ZERO;
    for job in &jobs {
        assert_eq!(
            job.status,
            JobStatus::Succeeded,
            "job {} ended {:?}: {:?}",
            job.id,
            job.status,
            job.error
        );
        spent_credits += job.credits.get();
        spent_usd = spent_usd.plus(job.estimated_usd);
        // One terminal state, one succeeded (paid) attempt, every attempt kept.
        let events = db.history(job.id).await;
        assert_eq!(events.iter().filter(|e| e.kind() == "succeeded").count(), 1);
        let attempts = db.store().attempts(job.id).await.unwrap();
        assert_eq!(
            attempts
                .iter()
                .filter(|a| a.state == AttemptState::Succeeded)
                .count(),
            1,
            "{attempts:?}"
        );
        assert!(attempts.iter().all(|a| a.state == AttemptState::Succeeded
            || a.error_class == Some(tollgate::model::ErrorClass::Interrupted)));
        let (key, _) = db
            .store()
            .job_output(job.id)
            .await
            .unwrap()
            .expect("an output");
        let meta = t
            .objects()
            .head(&tollgate::storage::ObjectKey::parse(&key).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.written_by, format!("job:{}", job.id));
    }
    // The ledger matches the outcomes: charged once each, nothing refunded.
    let balance = t.user(u.id).await.unwrap().balance;
    assert_eq!(balance, Credits(1_000 - spent_credits));
    assert_eq!(db.store().ledger_sum(u.id).await.unwrap(), balance);
    // No reservation is left unsettled, and each job was booked once.
    let day = db
        .store()
        .budget_day(chrono::Utc::now().date_naive(), Usd::parse("50").unwrap())
        .await
        .unwrap();
    assert_eq!(day.reserved_usd, Usd::ZERO);
    assert_eq!(day.used_usd, spent_usd);
}

/// The mock provider as its own process: it outlives every Tollgate we kill.
struct MockProcess {
    child: Child,
    base: String,
}

impl Drop for MockProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tollgate-mock-provider` is the engine crate's binary, built beside ours
/// by `cargo test --workspace` (scripts/test).
async fn mock_provider(idempotency: bool, latency_ms: u64) -> MockProcess {
    let ours = std::path::PathBuf::from(env!("CARGO_BIN_EXE_tollgate"));
    let binary = ours.with_file_name("tollgate-mock-provider");
    assert!(
        binary.exists(),
        "{} is missing: build it with cargo build -p tollgate --bin tollgate-mock-provider",
        binary.display()
    );
    let port = free_port();
    let child = Command::new(binary)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--idempotency", if idempotency { "on" } else { "off" }])
        .args(["--lookup", "off"])
        .args(["--latency-ms", &latency_ms.to_string()])
        .args(["--price-usd", "0.10"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tollgate-mock-provider");
    let mock = MockProcess {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let http = reqwest::Client::new();
    let url = format!("{}/_mock/stats", mock.base);
    wait_until(
        "the mock provider comes up",
        Duration::from_secs(10),
        async || http.get(&url).send().await.ok().map(|_| ()),
    )
    .await;
    mock
}

async fn sigkill_mid_call_with_provider_idempotency_pays_each_key_once(db: TestDb) {
    sigkill_mid_call(db, true).await;
}

async fn sigkill_mid_call_without_idempotency_parks_instead_of_resending(db: TestDb) {
    sigkill_mid_call(db, false).await;
}

/// Tollgate is killed while requests to the provider are unanswered (the
/// provider "hangs" them: `submitting`) and others are accepted and being
/// polled (`submitted`). After a restart: accepted ones are polled, never
/// re-sent; unanswered ones are re-sent under the same key only when the
/// model declares idempotency, and otherwise parked.
async fn sigkill_mid_call(db: TestDb, idempotency: bool) {
    // An accepted prediction is `submitted` for as long as the provider
    // takes: the kill below needs one of them and the hung ones at once,
    // and on a loaded machine a window of 1.5 s was sometimes missed
    // (then the hung calls ran into their timeout before the kill).
    let mock = mock_provider(idempotency, 5000).await;
    let config = db.dir.join("models.toml");
    std::fs::write(
        &config,
        format!(
            "[[models]]\nid = \"mock-edit\"\nkind = \"image_edit\"\nprovider = \"http\"\n\
             endpoint = \"{}\"\nprice = {{ per_generation = \"0.05\" }}\nattempts = 3\n\
             on_uncertain = \"park\"\ndefault = true\nidempotency = {idempotency}\n\
             poll_ms = 100\ntimeout_ms = 60000\n",
            mock.base
        ),
    )
    .unwrap();
    let db = db
        .with_config(&std::fs::read_to_string(&config).unwrap())
        .await;
    let t = &db.tollgate;
    let u = t
        .add_user("u@example.com", Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, u.id, Credits(1_000), None, None)
        .await
        .unwrap();
    let source = t
        .upload_asset(&u, Some("image/png"), photo().into())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    // Four of the first seven submissions are never answered.
    http.post(format!("{}/_mock/script", mock.base))
        .json(&json!({"next": ["hang", "ok", "hang", "ok", "hang", "ok", "hang"]}))
        .send()
        .await
        .unwrap();
    let mut ids: Vec<JobId> = Vec::new();
    for i in 0..16 {
        let body = json!({"kind": "image_edit", "source": source.id, "target": {"kind": "pet"},
                          "style": "embroidery", "strength": "balanced"});
        ids.push(
            t.submit_job(&u, None, Some(&format!("crash-{i}")), &body)
                .await
                .unwrap()
                .job
                .id,
        );
    }

    let mut first = serve_with(&db, Some(&config)).await;
    // Kill once the four hung requests are in flight, some accepted ones too.
    try_wait_until(Duration::from_secs(60), async || {
        let (submitting, submitted) = open_calls(&db, &ids).await;
        (submitting >= 4 && submitted >= 1).then_some(())
    })
    .await;
    first.kill().expect("SIGKILL");
    first.wait().unwrap();
    let mut open_at_kill = 0;
    for id in &ids {
        open_at_kill += db
            .store()
            .attempts(*id)
            .await
            .unwrap()
            .iter()
            .filter(|a| a.state == AttemptState::Submitting)
            .count();
    }
    assert!(
        open_at_kill >= 4,
        "the kill came too late to test anything ({open_at_kill} calls open)"
    );

    let mut second = serve_with(&db, Some(&config)).await;
    let jobs = jobs_when(&db, &ids, |j| {
        j.status.is_terminal() || j.status == JobStatus::Parked
    })
    .await;
    second.kill().ok();
    second.wait().ok();

    let stats: serde_json::Value = http
        .get(format!("{}/_mock/stats", mock.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // No key was ever paid twice.
    for (key, n) in stats["by_idempotency_key"].as_object().unwrap() {
        assert_eq!(n, 1, "key {key} was paid {n} times");
    }
    let mut kept_credits = 0;
    let mut held = Usd::ZERO;
    let mut parked = 0;
    for job in &jobs {
        let attempts = db.store().attempts(job.id).await.unwrap();
        match job.status {
            JobStatus::Succeeded => {
                kept_credits += job.credits.get();
                assert_eq!(
                    attempts
                        .iter()
                        .filter(|a| a.state == AttemptState::Succeeded)
                        .count(),
                    1,
                    "{attempts:?}"
                );
            }
            JobStatus::Parked => {
                assert!(!idempotency, "with idempotency every job can finish");
                parked += 1;
                kept_credits += job.credits.get();
                held = held.plus(job.estimated_usd);
                // Parked on the attempt nobody answered; it was not re-sent.
                let p = db.store().parked_for_job(job.id).await.unwrap().unwrap();
                assert_eq!(p.stage, tollgate::store::ParkedStage::SubmissionUncertain);
                let open: Vec<_> = attempts
                    .iter()
                    .filter(|a| a.state == AttemptState::Submitting)
                    .collect();
                assert_eq!(open.len(), 1);
                assert!(
                    stats["by_idempotency_key"][&open[0].idempotency_key]
                        .as_u64()
                        .unwrap_or(0)
                        <= 1
                );
            }
            other => panic!("job {} ended {other:?}: {:?}", job.id, job.error),
        }
    }
    if !idempotency {
        assert!(parked >= 4, "the unanswered requests park ({parked})");
    }
    // The ledger matches the outcomes: parked jobs stay charged until a decision.
    let balance = t.user(u.id).await.unwrap().balance;
    assert_eq!(balance, Credits(1_000 - kept_credits));
    assert_eq!(db.store().ledger_sum(u.id).await.unwrap(), balance);
    // No reservation is left unsettled but the holds parked jobs keep.
    let day = db
        .store()
        .budget_day(chrono::Utc::now().date_naive(), Usd::parse("50").unwrap())
        .await
        .unwrap();
    assert_eq!(day.reserved_usd, held);
    // What the day booked is exactly what the finished jobs' attempts were
    // quoted; a parked job's possibly-paid call stays a hold, not spend.
    let mut quoted = Usd::ZERO;
    for job in jobs.iter().filter(|j| j.status == JobStatus::Succeeded) {
        for a in db.store().attempts(job.id).await.unwrap() {
            quoted = quoted.plus(a.cost_usd.expect("the mock quotes every call"));
        }
    }
    assert_eq!(day.used_usd, quoted);
}

/// A model file for the mock process (written beside the test's database).
fn mock_models(db: &TestDb, mock: &MockProcess, idempotency: bool) -> std::path::PathBuf {
    let config = db.dir.join("models.toml");
    std::fs::write(
        &config,
        format!(
            "[[models]]\nid = \"mock-edit\"\nkind = \"image_edit\"\nprovider = \"http\"\n\
             endpoint = \"{}\"\nprice = {{ per_generation = \"0.05\" }}\nattempts = 3\n\
             on_uncertain = \"park\"\ndefault = true\nidempotency = {idempotency}\n\
             poll_ms = 50\ntimeout_ms = 60000\n",
            mock.base
        ),
    )
    .unwrap();
    config
}

/// `n` edits of one photo by one person with plenty of credits.
async fn edits(db: &TestDb, n: usize) -> (tollgate::store::User, Vec<JobId>) {
    let t = &db.tollgate;
    let u = t
        .add_user("u@example.com", Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, u.id, Credits(100_000), None, None)
        .await
        .unwrap();
    let source = t
        .upload_asset(&u, Some("image/png"), photo().into())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let body = json!({"kind": "image_edit", "source": source.id, "target": {"kind": "pet"},
                          "style": "embroidery", "strength": "balanced"});
        ids.push(
            t.submit_job(&u, None, Some(&format!("edit-{i}")), &body)
                .await
                .unwrap()
                .job
                .id,
        );
    }
    (u, ids)
}

/// The kill points between a paid job's commits: after (a), the attempt
/// written, with the request unanswered; and after the call, the provider
/// done and the prediction id written, before (c). A second node finishes
/// everything: no job lost, no key paid twice, nothing refunded, and every
/// attempt priced as the provider quoted it.
async fn sigkill_between_the_commits(db: TestDb) {
    let mock = mock_provider(true, 0).await;
    let config = mock_models(&db, &mock, true);
    let db = db
        .with_config(&std::fs::read_to_string(&config).unwrap())
        .await;
    let http = reqwest::Client::new();
    // Three requests are never answered; three finished predictions are
    // never reported (their status checks hang).
    http.post(format!("{}/_mock/script", mock.base))
        .json(&json!({"next": ["hang", "ok", "hang", "ok", "hang"],
                      "poll": ["hang", "hang", "hang"]}))
        .send()
        .await
        .unwrap();
    let (u, ids) = edits(&db, 12).await;
    let mut first = serve_with(&db, Some(&config)).await;
    try_wait_until(Duration::from_secs(60), async || {
        let (submitting, submitted) = open_calls(&db, &ids).await;
        (submitting >= 3 && submitted >= 3).then_some(())
    })
    .await;
    first.kill().expect("SIGKILL");
    first.wait().unwrap();
    let at_kill = open_calls(&db, &ids).await;
    assert!(
        at_kill.0 >= 3 && at_kill.1 >= 3,
        "the kill missed its points: {at_kill:?}"
    );

    let mut second = serve_with(&db, Some(&config)).await;
    let jobs = jobs_when(&db, &ids, |j| j.status.is_terminal()).await;
    second.kill().ok();
    second.wait().ok();

    let stats: serde_json::Value = http
        .get(format!("{}/_mock/stats", mock.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for (key, n) in stats["by_idempotency_key"].as_object().unwrap() {
        assert_eq!(n, 1, "key {key} was paid {n} times");
    }
    let mut spent = Usd::ZERO;
    let mut credits = 0;
    for job in &jobs {
        assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
        credits += job.credits.get();
        let attempts = db.store().attempts(job.id).await.unwrap();
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        // Recovered attempts were polled for their price: never unpriced here.
        assert_eq!(attempts[0].cost_usd, Some(Usd::parse("0.1").unwrap()));
        spent = spent.plus(attempts[0].cost_usd.unwrap());
        let events = db.history(job.id).await;
        assert_eq!(events.iter().filter(|e| e.kind() == "succeeded").count(), 1);
        assert_eq!(events.iter().filter(|e| e.kind() == "refunded").count(), 0);
    }
    assert_eq!(stats["paid_predictions"], 12);
    let balance = db.tollgate.user(u.id).await.unwrap().balance;
    assert_eq!(balance, Credits(100_000 - credits));
    assert_eq!(db.store().ledger_sum(u.id).await.unwrap(), balance);
    let day = db
        .store()
        .budget_day(chrono::Utc::now().date_naive(), Usd::parse("50").unwrap())
        .await
        .unwrap();
    assert_eq!((day.used_usd, day.reserved_usd), (spent, Usd::ZERO));
}

/// Roles for several nodes on one PostgreSQL: a web node takes the
/// submissions and runs nothing; two worker nodes share the work, and each
/// job is claimed and finished exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_worker_nodes_share_the_work_on_postgres() {
    let db = TestDb::postgres().await;
    let mock = mock_provider(true, 0).await;
    let config = mock_models(&db, &mock, true);
    let db = db
        .with_config(&std::fs::read_to_string(&config).unwrap())
        .await;
    let t = &db.tollgate;
    let (u, _) = edits(&db, 0).await;
    let (_, token) = t.create_api_token(&u, "web").await.unwrap();
    let source = t
        .upload_asset(&u, Some("image/png"), photo().into())
        .await
        .unwrap();
    let (mut web, base) = serve_as(&db, Some(&config), "web").await;
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in 0..300 {
        let r = http
            .post(format!("{base}/v1/jobs"))
            .bearer_auth(&token)
            .header("Idempotency-Key", format!("two-nodes-{i}"))
            .json(
                &json!({"kind": "image_edit", "source": source.id, "target": {"kind": "pet"},
                          "style": "origami", "strength": "balanced"}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: serde_json::Value = r.json().await.unwrap();
        ids.push(v["id"].as_str().unwrap().parse::<JobId>().unwrap());
    }
    // The web node runs nothing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let m = db.store().metrics_snapshot().await.unwrap();
    assert_eq!(
        m.jobs_by_status,
        [("queued".to_string(), 300)],
        "a web node claims no job"
    );
    let (mut a, _) = serve_as(&db, Some(&config), "worker").await;
    let (mut b, _) = serve_as(&db, Some(&config), "worker").await;
    try_wait_until(Duration::from_secs(180), async || {
        let m = db.store().metrics_snapshot().await.unwrap();
        let done: i64 = m
            .jobs_by_status
            .iter()
            .filter(|(s, _)| s == "succeeded" || s == "failed")
            .map(|(_, n)| n)
            .sum();
        (done == 300).then_some(())
    })
    .await;
    for node in [&mut a, &mut b, &mut web] {
        node.kill().ok();
        node.wait().ok();
    }
    // What the nodes warned about, printed with any failure below.
    for entry in std::fs::read_dir(&db.dir).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
            eprintln!("{}:\n{log}", entry.path().display());
        }
    }
    let mut workers = std::collections::HashSet::new();
    for id in &ids {
        let job = db.store().job(*id).await.unwrap().unwrap();
        assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
        let events = db.history(*id).await;
        let claims: Vec<_> = events.iter().filter(|e| e.kind() == "claimed").collect();
        assert_eq!(claims.len(), 1, "claimed once: {events:?}");
        workers.insert(claims[0].detail()["worker"].as_str().unwrap().to_string());
        assert_eq!(events.iter().filter(|e| e.kind() == "succeeded").count(), 1);
        assert_eq!(db.store().attempts(*id).await.unwrap().len(), 1);
    }
    assert_eq!(workers.len(), 2, "both worker nodes took jobs: {workers:?}");
    let stats: serde_json::Value = http
        .get(format!("{}/_mock/stats", mock.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["paid_predictions"], 300);
}
