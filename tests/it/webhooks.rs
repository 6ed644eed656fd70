//! Signed webhooks on both backends (rule 13), against a real HTTP receiver
//! on 127.0.0.1 (the only address any test sends to): deliveries verify
//! with the Standard Webhooks reference library; retries keep the id and
//! the body and follow the schedule; dead after the last try; a replay is
//! the identical envelope; a rotation signs with both secrets; a 410
//! disables the endpoint; a receiver that hangs does not slow the job; two
//! dispatchers never post one row at once; a crash after a post sends it
//! again under the same id; the outbox writes nothing new when a terminal
//! write is repeated; internal URLs are refused with 422 and never called.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tollgate::model::{Credits, DeliveryState, JobId, JobStatus, Role};
use tollgate::store::{Delivery, DeliveryFilter, User};
use tollgate_testkit::TestDb;
use tollgate_testkit::{both_backends, wait_until};

both_backends!(
    a_delivery_verifies_and_its_retries_keep_the_id_and_body,
    dead_after_the_last_try_and_a_replay_is_the_same_envelope,
    a_rotation_signs_with_both_secrets,
    a_410_disables_the_endpoint,
    a_hanging_receiver_does_not_slow_the_job,
    two_dispatchers_never_post_one_row_at_once,
    racing_claimers_take_each_delivery_once,
    a_crash_after_posting_sends_again_under_the_same_id,
    a_job_url_is_signed_with_the_account_secret_and_written_once,
    internal_urls_are_refused_and_never_called,
    a_receiver_that_never_answers_holds_a_few_posts_and_others_go_first,
    test_events_are_few_and_tried_once,
    a_rotated_account_secret_signs_beside_the_old_one,
    deliveries_page_both_ways_and_say_where_they_sit,
);

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Got {
    id: String,
    timestamp: i64,
    signature: String,
    body: String,
    headers: HeaderMap,
    at: Instant,
}

/// How the receiver answers the next request.
#[derive(Clone, Copy)]
struct Answer {
    status: u16,
    delay: Duration,
}

#[derive(Default)]
struct Log {
    got: Vec<Got>,
    script: VecDeque<Answer>,
    /// Requests in flight per webhook-id, and the most ever seen at once.
    in_flight: HashMap<String, usize>,
    most_at_once: usize,
    /// Requests in flight of any id, and the most ever at once.
    open: usize,
    most_open: usize,
    /// Answer every request after the script with this delay (a hang).
    default_delay: Duration,
}

#[derive(Clone)]
struct Receiver {
    url: String,
    log: Arc<Mutex<Log>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let log = Arc::new(Mutex::new(Log::default()));
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(log.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url, log }
    }

    fn script(&self, answers: &[(u16, u64)]) {
        let mut l = self.log.lock().unwrap();
        l.script = answers
            .iter()
            .map(|(status, ms)| Answer {
                status: *status,
                delay: Duration::from_millis(*ms),
            })
            .collect();
    }

    fn got(&self) -> Vec<Got> {
        self.log.lock().unwrap().got.clone()
    }

    async fn wait_for(&self, n: usize) -> Vec<Got> {
        wait_until(
            &format!("the receiver gets {n} requests"),
            Duration::from_secs(10),
            async || {
                let got = self.got();
                (got.len() >= n).then_some(got)
            },
        )
        .await
    }
}

async fn receive(
    State(log): State<Arc<Mutex<Log>>>,
    headers: HeaderMap,
    body: String,
) -> impl IntoResponse {
    let header = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let id = header("webhook-id");
    let answer = {
        let mut l = log.lock().unwrap();
        l.got.push(Got {
            id: id.clone(),
            timestamp: header("webhook-timestamp").parse().unwrap_or(0),
            signature: header("webhook-signature"),
            body,
            headers: headers.clone(),
            at: Instant::now(),
        });
        let n = l.in_flight.entry(id.clone()).or_default();
        *n += 1;
        let now = *n;
        l.most_at_once = l.most_at_once.max(now);
        l.open += 1;
        l.most_open = l.most_open.max(l.open);
        l.script.pop_front().unwrap_or(Answer {
            status: 200,
            delay: l.default_delay,
        })
    };
    tokio::time::sleep(answer.delay).await;
    let mut l = log.lock().unwrap();
    *l.in_flight.entry(id).or_default() -= 1;
    l.open -= 1;
    drop(l);
    StatusCode::from_u16(answer.status).unwrap()
}

/// Only loopback may be called, and retries come fast.
fn config(schedule: &str) -> String {
    format!(
        "webhook_allow_networks = \"127.0.0.0/8\"\nwebhook_retry_schedule = \"{schedule}\"\n\
         [[models]]\nid = \"local-clip\"\nname = \"Local clip\"\nkind = \"video\"\n\
         price = {{ per_generation = \"0.02\" }}\ndurations_s = [2]\ndefault = true\n"
    )
}

async fn person(db: &TestDb, email: &str) -> User {
    let t = &db.tollgate;
    let u = t
        .add_user(email, Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, u.id, Credits(100), None, None)
        .await
        .unwrap();
    t.user(u.id).await.unwrap()
}

async fn clip(db: &TestDb, u: &User, key: &str, webhook_url: Option<&str>) -> JobId {
    let mut body = json!({"kind": "video", "prompt": key, "duration_s": 2, "resolution": "720p"});
    if let Some(url) = webhook_url {
        body["webhook_url"] = json!(url);
    }
    db.tollgate
        .submit_job(u, None, Some(key), &body)
        .await
        .unwrap()
        .job
        .id
}

async fn settled(db: &TestDb, job: JobId) -> JobStatus {
    db.job_when(job, Duration::from_secs(10), |j| j.status.is_terminal())
        .await
        .status
}

async fn deliveries(db: &TestDb) -> Vec<Delivery> {
    db.store()
        .list_deliveries(&DeliveryFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
}

async fn until_state(db: &TestDb, state: DeliveryState) -> Vec<Delivery> {
    wait_until(
        &format!("every delivery {state:?}"),
        Duration::from_secs(10),
        async || {
            let d = deliveries(db).await;
            (!d.is_empty() && d.iter().all(|d| d.state == state)).then_some(d)
        },
    )
    .await
}

fn verifies(secret: &str, g: &Got) -> bool {
    standardwebhooks::Webhook::new(secret)
        .unwrap()
        .verify(g.body.as_bytes(), &g.headers)
        .is_ok()
}

async fn a_delivery_verifies_and_its_retries_keep_the_id_and_body(db: TestDb) {
    let db = db.with_config(&config("150ms,150ms,150ms")).await;
    let r = Receiver::start().await;
    let u = person(&db, "hooks@example.com").await;
    let made = db
        .tollgate
        .create_webhook_endpoint(&u, &r.url, &["generation.succeeded".into()])
        .await
        .unwrap();
    assert!(made.secret.starts_with("whsec_"));
    r.script(&[(500, 0), (503, 0)]);
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &u, "v1", None).await;
    assert_eq!(settled(&db, job).await, JobStatus::Succeeded);
    let got = r.wait_for(3).await;
    let d = until_state(&db, DeliveryState::Delivered).await;
    engine.shutdown().await;
    assert_eq!(got.len(), 3);
    // The same id and body on every try; a new timestamp and signature.
    assert!(got
        .iter()
        .all(|g| g.id == format!("{job}:generation.succeeded")));
    assert!(got.iter().all(|g| g.body == got[0].body));
    for g in &got {
        assert!(
            verifies(&made.secret, g),
            "the reference library verifies it"
        );
        assert!(g.signature.starts_with("v1,"));
    }
    // The schedule: about 150 ms between tries (with jitter), not at once.
    for w in got.windows(2) {
        assert!(
            w[1].at - w[0].at >= Duration::from_millis(120),
            "{:?}",
            w[1].at - w[0].at
        );
    }
    // The envelope: type, timestamp, the job object as stored.
    let v: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(v["type"], "generation.succeeded");
    assert_eq!(v["data"]["id"], json!(job));
    assert_eq!(v["data"]["status"], "succeeded");
    assert!(v["timestamp"].is_string());
    assert_eq!(
        (d.len(), d[0].attempts, d[0].last_status),
        (1, 3, Some(200))
    );
}

async fn dead_after_the_last_try_and_a_replay_is_the_same_envelope(db: TestDb) {
    let db = db.with_config(&config("50ms,50ms")).await;
    let r = Receiver::start().await;
    let u = person(&db, "dead@example.com").await;
    let admin = db
        .tollgate
        .add_user("admin@example.com", Role::Admin, "correct horse battery")
        .await
        .unwrap();
    let made = db
        .tollgate
        .create_webhook_endpoint(&u, &r.url, &[])
        .await
        .unwrap();
    r.script(&[(500, 0), (500, 0), (500, 0)]);
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &u, "d1", None).await;
    settled(&db, job).await;
    let dead = until_state(&db, DeliveryState::Dead).await;
    assert_eq!(dead[0].attempts, 3, "the first try and two retries");
    assert_eq!(r.got().len(), 3);
    // The user may not replay; an admin may, and it is the same envelope.
    assert!(db.tollgate.replay_delivery(&u, dead[0].id).await.is_err());
    db.tollgate
        .replay_delivery(&admin, dead[0].id)
        .await
        .unwrap();
    let got = r.wait_for(4).await;
    until_state(&db, DeliveryState::Delivered).await;
    engine.shutdown().await;
    let (first, replayed) = (&got[0], &got[3]);
    assert_eq!(replayed.id, first.id);
    assert_eq!(replayed.body, first.body, "the exact envelope");
    assert!(replayed.timestamp >= first.timestamp);
    assert!(verifies(&made.secret, replayed));
    assert_eq!(deliveries(&db).await[0].replays, 1);
    // /metrics shows the backlog by state.
    let base = db.serve_ops().await;
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("tollgate_webhook_deliveries{state=\"delivered\"} 1"),
        "{text}"
    );
    assert!(text.contains("tollgate_webhook_oldest_pending_age_seconds"));
    // Everything dead since a time: counted first, then replayed in one go.
    let since = chrono::Utc::now() - chrono::Duration::hours(1);
    assert_eq!(
        db.tollgate
            .dead_since(&admin, made.endpoint.id, since)
            .await
            .unwrap()
            .len(),
        0
    );
}

async fn a_rotation_signs_with_both_secrets(db: TestDb) {
    let db = db.with_config(&config("50ms")).await;
    let r = Receiver::start().await;
    let u = person(&db, "rotate@example.com").await;
    let made = db
        .tollgate
        .create_webhook_endpoint(&u, &r.url, &[])
        .await
        .unwrap();
    let rotated = db
        .tollgate
        .rotate_webhook_secret(&u, made.endpoint.id)
        .await
        .unwrap();
    assert_ne!(rotated.secret, made.secret);
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &u, "r1", None).await;
    settled(&db, job).await;
    let got = r.wait_for(1).await;
    engine.shutdown().await;
    assert_eq!(
        got[0].signature.split(' ').count(),
        2,
        "{}",
        got[0].signature
    );
    assert!(
        verifies(&made.secret, &got[0]),
        "the old secret still verifies"
    );
    assert!(verifies(&rotated.secret, &got[0]), "the new one does too");
    assert!(!verifies(
        &tollgate::usecases::webhooks::signing::new_secret(),
        &got[0]
    ));
}

async fn a_410_disables_the_endpoint(db: TestDb) {
    let db = db.with_config(&config("50ms,50ms")).await;
    let r = Receiver::start().await;
    let u = person(&db, "gone@example.com").await;
    let made = db
        .tollgate
        .create_webhook_endpoint(&u, &r.url, &[])
        .await
        .unwrap();
    r.script(&[(410, 0)]);
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &u, "g1", None).await;
    settled(&db, job).await;
    let d = until_state(&db, DeliveryState::Dead).await;
    assert_eq!(
        (d[0].attempts, d[0].last_status),
        (1, Some(410)),
        "not retried"
    );
    let e = db
        .store()
        .webhook_endpoint(made.endpoint.id)
        .await
        .unwrap()
        .unwrap();
    assert!(e.disabled_at.is_some());
    assert!(e.disabled_reason.unwrap().contains("410"));
    // A disabled endpoint gets nothing new.
    let next = clip(&db, &u, "g2", None).await;
    settled(&db, next).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    engine.shutdown().await;
    assert_eq!(deliveries(&db).await.len(), 1);
    assert_eq!(r.got().len(), 1);
}

async fn a_hanging_receiver_does_not_slow_the_job(db: TestDb) {
    let db = db.with_config(&config("50ms")).await;
    let r = Receiver::start().await;
    r.log.lock().unwrap().default_delay = Duration::from_secs(60);
    let u = person(&db, "hang@example.com").await;
    db.tollgate
        .create_webhook_endpoint(&u, &r.url, &[])
        .await
        .unwrap();
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let started = Instant::now();
    let jobs = [
        clip(&db, &u, "h1", None).await,
        clip(&db, &u, "h2", None).await,
    ];
    for j in jobs {
        assert_eq!(settled(&db, j).await, JobStatus::Succeeded);
    }
    let took = started.elapsed();
    r.wait_for(1).await;
    engine.shutdown().await;
    // Both jobs finished while their deliveries still waited on the receiver.
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(deliveries(&db)
        .await
        .iter()
        .all(|d| d.state == DeliveryState::Pending));
}

async fn two_dispatchers_never_post_one_row_at_once(db: TestDb) {
    let db = db.with_config(&config("50ms")).await;
    let r = Receiver::start().await;
    r.log.lock().unwrap().default_delay = Duration::from_millis(30);
    let u = person(&db, "two@example.com").await;
    let made = db
        .tollgate
        .create_webhook_endpoint(&u, &r.url, &[])
        .await
        .unwrap();
    let n = 40;
    queue_test_events(&db, &made.endpoint, n).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let a = tokio::spawn(tollgate::usecases::webhooks::dispatcher::run(
        db.tollgate.clone(),
        "node-a".into(),
        stopped.clone(),
    ));
    let b = tokio::spawn(tollgate::usecases::webhooks::dispatcher::run(
        db.tollgate.clone(),
        "node-b".into(),
        stopped,
    ));
    let got = r.wait_for(n).await;
    until_state(&db, DeliveryState::Delivered).await;
    let _ = stop.send(true);
    let _ = tokio::join!(a, b);
    let mut ids: Vec<_> = got.iter().map(|g| g.id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!((got.len(), ids.len()), (n, n), "each posted exactly once");
    assert_eq!(r.log.lock().unwrap().most_at_once, 1);
}

/// The delivery claim, raced: claimers released together by one barrier
/// take what is due until nothing is left; each delivery is leased to one
/// of them only (the leases outlive the test), however the claims
/// interleave. On PostgreSQL a claim that re-read a row another claimer had
/// just committed used to take it again.
async fn racing_claimers_take_each_delivery_once(db: TestDb) {
    let db = db.with_config(&config("50ms")).await;
    // The window is short: several rounds, each with its own deliveries.
    for round in 0..5 {
        let claimed = race_claimers(&db, round).await;
        let distinct: std::collections::HashSet<_> = claimed.iter().collect();
        assert_eq!(
            distinct.len(),
            claimed.len(),
            "round {round}: a delivery was claimed twice"
        );
        // Every address gets its few posts in flight, and no more.
        assert!(
            claimed.len() >= 10,
            "round {round}: {} claimed",
            claimed.len()
        );
        assert!(
            claimed.len() <= 80,
            "round {round}: {} claimed",
            claimed.len()
        );
    }
}

/// Ten addresses with eight due deliveries each, then eight claimers
/// released by one barrier claim until nothing is left: every id claimed.
async fn race_claimers(db: &TestDb, round: usize) -> Vec<uuid::Uuid> {
    let u = person(db, &format!("race{round}@example.com")).await;
    for i in 0..10 {
        let url = format!("http://127.0.0.1:9/r{round}/hook{i}");
        let made = db
            .tollgate
            .create_webhook_endpoint(&u, &url, &[])
            .await
            .unwrap();
        queue_test_events(db, &made.endpoint, 8).await;
    }
    let claimers = 8;
    let barrier = Arc::new(tokio::sync::Barrier::new(claimers));
    let mut tasks = Vec::new();
    for k in 0..claimers {
        let (t, barrier) = (db.tollgate.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut mine = Vec::new();
            loop {
                let got = t
                    .store()
                    .claim_deliveries(&format!("claimer-{k}"), 3, 60.0)
                    .await
                    .unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|c| c.delivery.id.0));
            }
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.extend(task.await.unwrap());
    }
    claimed
}

async fn a_crash_after_posting_sends_again_under_the_same_id(db: TestDb) {
    let db = db.with_config(&config("50ms")).await;
    let r = Receiver::start().await;
    let u = person(&db, "crash@example.com").await;
    let made = db
        .tollgate
        .create_webhook_endpoint(&u, &r.url, &[])
        .await
        .unwrap();
    db.tollgate
        .send_test_webhook(&u, made.endpoint.id)
        .await
        .unwrap();
    // A dispatcher claims it (a one-second lease) and dies after posting,
    // before it could record the answer. (SQLite's clock has millisecond
    // steps: a delivery due this microsecond is claimable from the next.)
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut claimed = db
        .store()
        .claim_deliveries("dying-node", 10, 1.0)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let first = claimed.remove(0);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Another node takes it over when the lease runs out, and posts it.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let live = tokio::spawn(tollgate::usecases::webhooks::dispatcher::run(
        db.tollgate.clone(),
        "live-node".into(),
        stopped,
    ));
    r.wait_for(1).await;
    until_state(&db, DeliveryState::Delivered).await;
    // The dead node's post happens late, its record is refused.
    let http = tollgate::usecases::webhooks::dispatcher::client(&db.tollgate);
    tollgate::usecases::webhooks::dispatcher::deliver(&db.tollgate, &http, first).await;
    let _ = stop.send(true);
    live.await.unwrap();
    let got = r.got();
    assert_eq!(got.len(), 2, "at least once: sent again");
    assert_eq!(got[0].id, got[1].id, "under the same id");
    assert_eq!(got[0].body, got[1].body);
    let d = deliveries(&db).await;
    assert_eq!((d[0].state, d[0].attempts), (DeliveryState::Delivered, 1));
}

async fn a_job_url_is_signed_with_the_account_secret_and_written_once(db: TestDb) {
    let db = db.with_config(&config("50ms")).await;
    let r = Receiver::start().await;
    let u = person(&db, "own@example.com").await;
    // Cancelled before any worker runs it, then cancelled again: one delivery.
    let job = clip(&db, &u, "o1", Some(&r.url)).await;
    db.tollgate.cancel_job(&u, job).await.unwrap();
    db.tollgate.cancel_job(&u, job).await.unwrap();
    let d = deliveries(&db).await;
    assert_eq!(d.len(), 1, "do nothing on conflict: {d:?}");
    assert_eq!(d[0].webhook_id, format!("{job}:generation.cancelled"));
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let got = r.wait_for(1).await;
    until_state(&db, DeliveryState::Delivered).await;
    engine.shutdown().await;
    let secret = db.tollgate.account_webhook_secret(&u).await.unwrap();
    assert!(verifies(&secret, &got[0]), "signed with the account secret");
    let v: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(v["data"]["status"], "cancelled");
}

async fn internal_urls_are_refused_and_never_called(db: TestDb) {
    // No allowed networks here: loopback is internal like any other.
    let r = Receiver::start().await;
    let u = person(&db, "ssrf@example.com").await;
    let (_, token) = db.tollgate.create_api_token(&u, "t").await.unwrap();
    let base = db.serve_api().await;
    let http = reqwest::Client::new();
    let mut refusals = Vec::new();
    for url in [
        r.url.clone(),
        r.url.replace("http://", "https://"),
        r.url
            .replace("127.0.0.1", "localhost")
            .replace("http://", "https://"),
        "https://[::1]/hook".into(),
        "https://[::ffff:127.0.0.1]/hook".into(),
        "https://0x7f000001/hook".into(),
        "https://10.1.2.3/hook".into(),
        "https://169.254.169.254/latest/meta-data".into(),
        "https://100.64.0.1/hook".into(),
        "https://user:pw@example.com/hook".into(),
        "ftp://example.com/hook".into(),
        "https://no-such-host.invalid/hook".into(),
    ] {
        let res = http
            .post(format!("{base}/v1/webhook-endpoints"))
            .bearer_auth(&token)
            .json(&json!({"url": url}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY, "{url}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["code"], "INVALID_REQUEST", "{url}");
        // No oracle: the answer names no address, and an internal name
        // reads like one that does not resolve at all.
        let said = v.to_string();
        for word in ["loopback", "private", "link-local", "resolves", "shared"] {
            assert!(!said.contains(word), "{url}: {said}");
        }
        if url.contains("localhost") {
            assert!(!said.contains("127.0.0.1"), "{url}: {said}");
            let unknown = said.replace("localhost", "no-such-host.invalid");
            refusals.push(unknown);
        }
        if url.contains(".invalid") {
            refusals.push(said.clone());
        }
        // A job's own webhook_url is refused the same way.
        let res = http
            .post(format!("{base}/v1/jobs"))
            .bearer_auth(&token)
            .header("Idempotency-Key", format!("k-{url}").chars().filter(|c| c.is_ascii_graphic()).take(200).collect::<String>())
            .json(&json!({"kind": "video", "prompt": "x", "duration_s": 2, "resolution": "720p", "webhook_url": url}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY, "job {url}");
    }
    assert_eq!(refusals.len(), 2);
    assert_eq!(
        refusals[0], refusals[1],
        "an internal name reads as one that does not resolve"
    );
    let res = http
        .post(format!("{base}/v1/webhook-endpoints"))
        .bearer_auth(&token)
        .json(&json!({"url": "https://example.com/hook", "events": ["generation.exploded"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.got().is_empty(), "nothing was ever sent");
    assert!(db
        .store()
        .webhook_endpoints(Some(u.id))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(db.tollgate.user(u.id).await.unwrap().balance, Credits(100));
}

/// `n` test events for `endpoint`, due now, written straight into the
/// outbox (through the API they are a few a minute).
async fn queue_test_events(db: &TestDb, endpoint: &tollgate::store::WebhookEndpoint, n: usize) {
    for i in 0..n {
        let body = json!({"type": "webhook.test", "data": {"n": i}}).to_string();
        db.store()
            .insert_test_delivery(
                endpoint,
                &format!("test:{}", uuid::Uuid::new_v4()),
                &body,
                chrono::Utc::now(),
            )
            .await
            .unwrap();
    }
}

/// Issue 29, 3: one person's receiver that never answers holds at most a
/// few posts in flight, and another person's deliveries, queued after its
/// thirty, are posted meanwhile instead of waiting behind them.
async fn a_receiver_that_never_answers_holds_a_few_posts_and_others_go_first(db: TestDb) {
    let db = db.with_config(&config("50ms")).await;
    let hanging = Receiver::start().await;
    hanging.log.lock().unwrap().default_delay = Duration::from_secs(8);
    let prompt = Receiver::start().await;
    let (ana, bo) = (
        person(&db, "hangs@example.com").await,
        person(&db, "prompt@example.com").await,
    );
    let slow = db
        .tollgate
        .create_webhook_endpoint(&ana, &hanging.url, &[])
        .await
        .unwrap();
    let fast = db
        .tollgate
        .create_webhook_endpoint(&bo, &prompt.url, &[])
        .await
        .unwrap();
    queue_test_events(&db, &slow.endpoint, 30).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    queue_test_events(&db, &fast.endpoint, 3).await;
    tokio::time::sleep(Duration::from_millis(5)).await;

    let started = Instant::now();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let dispatchers: Vec<_> = ["node-a", "node-b"]
        .into_iter()
        .map(|node| {
            tokio::spawn(tollgate::usecases::webhooks::dispatcher::run(
                db.tollgate.clone(),
                node.into(),
                stopped.clone(),
            ))
        })
        .collect();
    prompt.wait_for(3).await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = hanging.log.lock().unwrap().most_open;
    let _ = stop.send(true);
    for d in dispatchers {
        d.await.unwrap();
    }
    assert!(
        took < Duration::from_secs(4),
        "the prompt receiver waited {took:?}"
    );
    assert!(
        (1..=4).contains(&held),
        "the hanging receiver held {held} posts at once"
    );
}

/// Issue 29, 3: test events are a few a minute per endpoint (429 beyond,
/// nothing queued), another endpoint still has its own, and a test event
/// that fails is not retried.
async fn test_events_are_few_and_tried_once(db: TestDb) {
    let db = db.with_config(&config("50ms")).await;
    let r = Receiver::start().await;
    r.script(&[(500, 0)]);
    let u = person(&db, "tests@example.com").await;
    let first = db
        .tollgate
        .create_webhook_endpoint(&u, &r.url, &[])
        .await
        .unwrap();
    let second = db
        .tollgate
        .create_webhook_endpoint(&u, &format!("{}?second", r.url), &[])
        .await
        .unwrap();
    for _ in 0..tollgate::usecases::limits::TEST_EVENTS_PER_ENDPOINT_PER_MINUTE {
        db.tollgate
            .send_test_webhook(&u, first.endpoint.id)
            .await
            .unwrap();
    }
    let refused = db.tollgate.send_test_webhook(&u, first.endpoint.id).await;
    assert!(
        matches!(refused, Err(tollgate::Error::RateLimited { retry_after_s }) if retry_after_s >= 1),
        "{refused:?}"
    );
    db.tollgate
        .send_test_webhook(&u, second.endpoint.id)
        .await
        .unwrap();
    let queued = TEST_EVENTS_QUEUED;
    assert_eq!(deliveries(&db).await.len(), queued);

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let d = tokio::spawn(tollgate::usecases::webhooks::dispatcher::run(
        db.tollgate.clone(),
        "node".into(),
        stopped,
    ));
    r.wait_for(queued).await;
    let done = loop {
        let all = deliveries(&db).await;
        if all.iter().all(|d| d.state != DeliveryState::Pending) {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = stop.send(true);
    d.await.unwrap();
    let dead: Vec<_> = done
        .iter()
        .filter(|d| d.state == DeliveryState::Dead)
        .collect();
    assert_eq!(dead.len(), 1, "the one answered 500 is dead: {done:?}");
    assert_eq!(dead[0].attempts, 1, "and was tried once");
    assert_eq!(r.got().len(), queued, "nothing was sent again");
}

const TEST_EVENTS_QUEUED: usize =
    tollgate::usecases::limits::TEST_EVENTS_PER_ENDPOINT_PER_MINUTE as usize + 1;

/// Issue 29, 7: the account secret (it signs deliveries to a job's own
/// webhook_url) rotates like an endpoint's: a new one, and for a day both
/// sign; a first rotation, before any secret was made, has nothing to keep.
async fn a_rotated_account_secret_signs_beside_the_old_one(db: TestDb) {
    let db = db.with_config(&config("50ms")).await;
    let r = Receiver::start().await;
    let u = person(&db, "own-rotate@example.com").await;
    let first = db.tollgate.rotate_account_webhook_secret(&u).await.unwrap();
    assert_eq!(db.tollgate.account_webhook_secret(&u).await.unwrap(), first);
    let second = db.tollgate.rotate_account_webhook_secret(&u).await.unwrap();
    assert_ne!(first, second);
    assert_eq!(
        db.tollgate.account_webhook_secret(&u).await.unwrap(),
        second
    );

    let job = clip(&db, &u, "or1", Some(&r.url)).await;
    db.tollgate.cancel_job(&u, job).await.unwrap();
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let got = r.wait_for(1).await;
    until_state(&db, DeliveryState::Delivered).await;
    engine.shutdown().await;
    assert_eq!(
        got[0].signature.split(' ').count(),
        2,
        "{}",
        got[0].signature
    );
    assert!(verifies(&second, &got[0]), "the new secret verifies");
    assert!(
        verifies(&first, &got[0]),
        "the old one still does, for a day"
    );
}

/// Issue 33, 1: a person's deliveries (their Account page) and everyone's
/// (the admin's) page forward and back, each page saying where it sits in
/// the whole list ("Showing 4–6 of 7"), and a person counts only their own.
async fn deliveries_page_both_ways_and_say_where_they_sit(db: TestDb) {
    use tollgate::usecases::cursor::Place;
    use tollgate::usecases::webhooks::DeliveryQuery;
    let db = db.with_config(&config("50ms")).await;
    let r = Receiver::start().await;
    let t = &db.tollgate;
    let (mine, theirs) = (
        person(&db, "pages@example.com").await,
        person(&db, "other@example.com").await,
    );
    let start = chrono::Utc::now() - chrono::Duration::minutes(10);
    for (who, n) in [(&mine, 7), (&theirs, 2)] {
        let e = t.create_webhook_endpoint(who, &r.url, &[]).await.unwrap();
        for i in 0..n {
            let at = start + chrono::Duration::seconds(i);
            t.store()
                .insert_test_delivery(
                    &e.endpoint,
                    &format!("test:{}", uuid::Uuid::new_v4()),
                    "{}",
                    at,
                )
                .await
                .unwrap();
        }
    }
    let me = &mine;
    let page_of = |cursor: Option<String>| {
        let mut q = DeliveryQuery::parse(None, None, Some(3), cursor.as_deref()).unwrap();
        q.counted = true;
        async move { t.own_deliveries(me, &q).await.unwrap() }
    };
    let (mut pages, mut cursor) = (Vec::new(), None);
    let last = loop {
        let page = page_of(cursor.clone()).await;
        let before = pages.iter().map(Vec::len).sum::<usize>() as u64;
        assert_eq!(page.place, Some(Place { before, total: 7 }));
        assert!(page.items.iter().all(|d| d.user_id == mine.id));
        pages.push(page.items.iter().map(|d| d.id).collect::<Vec<_>>());
        match page.next.clone() {
            Some(n) => cursor = Some(n),
            None => break page,
        }
    };
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
    let mut back = vec![pages.last().unwrap().clone()];
    let mut prev = last.prev;
    while let Some(p) = prev {
        let page = page_of(Some(p)).await;
        back.push(page.items.iter().map(|d| d.id).collect());
        prev = page.prev;
    }
    back.reverse();
    assert_eq!(back, pages, "the pages back are the pages forward");
    // An admin's list counts everyone's.
    let admin = t
        .add_user("admin@example.com", Role::Admin, "correct horse battery")
        .await
        .unwrap();
    let mut q = DeliveryQuery::parse(None, None, Some(3), None).unwrap();
    q.counted = true;
    let all = t.deliveries(&admin, &q).await.unwrap();
    assert_eq!(
        all.place,
        Some(Place {
            before: 0,
            total: 9
        })
    );
}
