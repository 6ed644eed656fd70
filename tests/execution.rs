//! The execution store on both backends: fenced claims (16 racing
//! claimers), stale tokens, checkpointed steps, attempts (null is not zero)
//! and the daily breaker.

use chrono::{Duration, NaiveDate, Utc};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Barrier;
use tollgate::both_backends;
use tollgate::model::{Credits, JobId, JobStatus, Role, Usd};
use tollgate::store::{AttemptOutcome, NewAttempt, Outcome, StoreError, User};
use tollgate::testkit::TestDb;

async fn jobs(db: &TestDb, n: usize) -> (User, Vec<JobId>) {
    let t = &db.tollgate;
    let u = t
        .add_user("u@example.com", Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, u.id, Credits(10_000), None, None)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let body = json!({"kind": "video", "prompt": format!("clip {i}"), "duration_s": 2, "resolution": "720p"});
        ids.push(
            t.submit_job(&u, Some(&format!("k{i}")), &body)
                .await
                .unwrap()
                .job
                .id,
        );
    }
    (u, ids)
}

fn usd(s: &str) -> Usd {
    Usd::parse(s).unwrap()
}

both_backends!(
    racing_claimers_take_each_job_once,
    a_stale_token_cannot_write,
    completed_steps_survive_a_resume,
    cancel_wins_over_a_running_worker,
    attempts_keep_null_costs_and_first_outcomes,
    the_breaker_holds_the_cap,
);

async fn racing_claimers_take_each_job_once(db: TestDb) {
    let (_, ids) = jobs(&db, 40).await;
    let n = 16;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for w in 0..n {
        let (store, b) = (db.store().clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            let mut mine = Vec::new();
            loop {
                let now = Utc::now();
                let got = store
                    .claim_jobs(&format!("w{w}"), 2, now + Duration::seconds(60), now)
                    .await
                    .unwrap();
                if got.is_empty() {
                    break;
                }
                mine.extend(got.into_iter().map(|c| (c.job.id, c.token)));
            }
            mine
        }));
    }
    let mut seen: HashMap<JobId, usize> = HashMap::new();
    for t in tasks {
        for (id, token) in t.await.unwrap() {
            assert_eq!(token, 1, "a first claim has token 1");
            *seen.entry(id).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), ids.len());
    assert!(
        seen.values().all(|&c| c == 1),
        "a job was claimed twice: {seen:?}"
    );
}

async fn a_stale_token_cannot_write(db: TestDb) {
    let (_, ids) = jobs(&db, 1).await;
    let s = db.store();
    let now = Utc::now();
    let first = s
        .claim_jobs("a", 1, now + Duration::seconds(1), now)
        .await
        .unwrap()
        .remove(0);
    assert!(s
        .heartbeat(ids[0], first.token, now + Duration::seconds(2))
        .await
        .unwrap());
    // Not claimable while the lease holds...
    assert!(s
        .claim_jobs("b", 1, now + Duration::seconds(60), now)
        .await
        .unwrap()
        .is_empty());
    // ...and claimable once it has expired: the token moves on.
    let later = now + Duration::seconds(5);
    let second = s
        .claim_jobs("b", 1, later + Duration::seconds(60), later)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(second.token, first.token + 1);
    assert!(!s.heartbeat(ids[0], first.token, later).await.unwrap());
    let stale = s
        .complete_step(ids[0], first.token, "generate", &json!({}), later)
        .await;
    assert!(matches!(stale, Err(StoreError::StaleClaim)), "{stale:?}");
    let stale = s
        .finish_claimed(ids[0], first.token, &Outcome::Succeeded, None, None, later)
        .await;
    assert!(matches!(stale, Err(StoreError::StaleClaim)));
    let attempt = NewAttempt {
        id: uuid::Uuid::new_v4(),
        job_id: ids[0],
        provider: "local".into(),
        model: "local-clip".into(),
        attempt_no: 1,
        idempotency_key: format!("{}:1", ids[0]),
        started_at: later,
    };
    assert!(matches!(
        s.begin_attempt(&attempt, first.token).await,
        Err(StoreError::StaleClaim)
    ));
    let done = s
        .finish_claimed(
            ids[0],
            second.token,
            &Outcome::Succeeded,
            Some(("outputs/x", "image/gif")),
            None,
            later,
        )
        .await
        .unwrap();
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(
        s.job_output(ids[0]).await.unwrap(),
        Some(("outputs/x".into(), "image/gif".into()))
    );
    // Terminal: nobody claims it again.
    let much_later = later + Duration::hours(1);
    assert!(s
        .claim_jobs("c", 1, much_later, much_later)
        .await
        .unwrap()
        .is_empty());
}

async fn completed_steps_survive_a_resume(db: TestDb) {
    let (_, ids) = jobs(&db, 1).await;
    let s = db.store();
    let now = Utc::now();
    let first = s
        .claim_jobs("a", 1, now + Duration::seconds(1), now)
        .await
        .unwrap()
        .remove(0);
    s.complete_step(ids[0], first.token, "reserve", &json!({"usd": "0.04"}), now)
        .await
        .unwrap();
    // The worker dies; another resumes after the lease.
    let later = now + Duration::seconds(5);
    let second = s
        .claim_jobs("b", 1, later + Duration::seconds(60), later)
        .await
        .unwrap()
        .remove(0);
    let steps = s.steps(ids[0]).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(
        (steps[0].step.as_str(), &steps[0].output),
        ("reserve", &json!({"usd": "0.04"}))
    );
    // Writing the same step again records nothing new.
    s.complete_step(
        ids[0],
        second.token,
        "reserve",
        &json!({"usd": "9.99"}),
        later,
    )
    .await
    .unwrap();
    let steps = s.steps(ids[0]).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].output, json!({"usd": "0.04"}));
    // The timeline has the step once, written with it.
    let events = s.job_events(ids[0]).await.unwrap();
    let step_events: Vec<_> = events.iter().filter(|e| e.kind == "step").collect();
    assert_eq!(step_events.len(), 1);
    assert_eq!(step_events[0].detail, json!({"step": "reserve"}));
}

async fn cancel_wins_over_a_running_worker(db: TestDb) {
    let (u, ids) = jobs(&db, 1).await;
    let s = db.store();
    let now = Utc::now();
    let claim = s
        .claim_jobs("a", 1, now + Duration::seconds(60), now)
        .await
        .unwrap()
        .remove(0);
    let cancelled = s.cancel_job(ids[0], now).await.unwrap().unwrap();
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert!(matches!(
        s.complete_step(ids[0], claim.token, "generate", &json!({}), now)
            .await,
        Err(StoreError::StaleClaim)
    ));
    assert!(matches!(
        s.finish_claimed(ids[0], claim.token, &Outcome::Succeeded, None, None, now)
            .await,
        Err(StoreError::StaleClaim)
    ));
    let balance = db.tollgate.user(u.id).await.unwrap().balance;
    assert_eq!(balance, Credits(10_000), "the cancel refunded the job");
    assert_eq!(s.ledger_sum(u.id).await.unwrap(), balance);
}

async fn attempts_keep_null_costs_and_first_outcomes(db: TestDb) {
    let (_, ids) = jobs(&db, 1).await;
    let s = db.store();
    let now = Utc::now();
    let claim = s
        .claim_jobs("a", 1, now + Duration::seconds(60), now)
        .await
        .unwrap()
        .remove(0);
    let mk = |n: i32| NewAttempt {
        id: uuid::Uuid::new_v4(),
        job_id: ids[0],
        provider: "http".into(),
        model: "mock-edit".into(),
        attempt_no: n,
        idempotency_key: format!("{}:{n}", ids[0]),
        started_at: now,
    };
    let (a1, a2) = (mk(1), mk(2));
    s.begin_attempt(&a1, claim.token).await.unwrap();
    s.begin_attempt(&a2, claim.token).await.unwrap();
    assert!(
        s.begin_attempt(&mk(1), claim.token).await.is_err(),
        "(job, provider, attempt) is unique"
    );
    let failed = AttemptOutcome {
        state: "failed",
        provider_job_id: Some("pred_1".into()),
        error_class: Some("rate_limited".into()),
        error: Some("429".into()),
        duration_ms: 12,
        usage: None,
        cost_usd: None,
        cost_source: None,
        finished_at: now,
    };
    s.end_attempt(a1.id, &failed).await.unwrap();
    let ok = AttemptOutcome {
        state: "succeeded",
        provider_job_id: Some("pred_2".into()),
        error_class: None,
        error: None,
        duration_ms: 40,
        usage: Some(json!({"seconds": 2})),
        cost_usd: Some(usd("0.123456")),
        cost_source: Some("quoted"),
        finished_at: now,
    };
    s.end_attempt(a2.id, &ok).await.unwrap();
    // A repeated report refreshes telemetry and leaves outcome and timing alone.
    let again = AttemptOutcome {
        state: "failed",
        duration_ms: 999,
        ..ok.clone()
    };
    s.end_attempt(a2.id, &again).await.unwrap();
    let list = s.attempts(ids[0]).await.unwrap();
    assert_eq!(list.len(), 2);
    let first = list.iter().find(|a| a.attempt_no == 1).unwrap();
    assert_eq!(first.cost_usd, None, "unpriced stays NULL, never 0");
    assert_eq!(first.cost_source, None);
    assert_eq!(first.error_class.as_deref(), Some("rate_limited"));
    let second = list.iter().find(|a| a.attempt_no == 2).unwrap();
    assert_eq!(second.state, "succeeded");
    assert_eq!(second.duration_ms, Some(40));
    assert_eq!(second.cost_usd.unwrap().to_string(), "0.123456");
    assert_eq!(second.usage, Some(json!({"seconds": 2})));
}

async fn the_breaker_holds_the_cap(db: TestDb) {
    let (_, ids) = jobs(&db, 4).await;
    let s = db.store();
    let now = Utc::now();
    let day = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap();
    let cap = usd("0.100000");
    let claims = s
        .claim_jobs("a", 4, now + Duration::seconds(60), now)
        .await
        .unwrap();
    let token = |id: JobId| claims.iter().find(|c| c.job.id == id).unwrap().token;
    assert!(s
        .reserve(ids[0], token(ids[0]), day, cap, usd("0.04"), now)
        .await
        .unwrap());
    assert!(
        s.reserve(ids[0], token(ids[0]), day, cap, usd("0.04"), now)
            .await
            .unwrap(),
        "asking again is the same hold"
    );
    assert!(s
        .reserve(ids[1], token(ids[1]), day, cap, usd("0.06"), now)
        .await
        .unwrap());
    assert!(
        !s.reserve(ids[2], token(ids[2]), day, cap, usd("0.000001"), now)
            .await
            .unwrap(),
        "over the cap"
    );
    let d = s.budget_day(day, cap).await.unwrap();
    assert_eq!(
        (d.used_usd.to_string(), d.reserved_usd.to_string()),
        ("0.000000".into(), "0.100000".into())
    );
    // A real cost settles below the estimate; an unknown one stays at it.
    assert!(s.settle(ids[0], Some(usd("0.01")), now).await.unwrap());
    assert!(
        !s.settle(ids[0], Some(usd("0.01")), now).await.unwrap(),
        "settling twice changes nothing"
    );
    assert!(s.settle(ids[1], None, now).await.unwrap());
    let d = s.budget_day(day, cap).await.unwrap();
    assert_eq!(
        (d.used_usd.to_string(), d.reserved_usd.to_string()),
        ("0.070000".into(), "0.000000".into())
    );
    assert!(s
        .reserve(ids[2], token(ids[2]), day, cap, usd("0.03"), now)
        .await
        .unwrap());
    // Halted: nothing more, however small.
    s.set_budget(day, cap, None, Some(true)).await.unwrap();
    assert!(!s
        .reserve(ids[3], token(ids[3]), day, cap, usd("0.000001"), now)
        .await
        .unwrap());
    let d = s
        .set_budget(day, cap, Some(usd("5.00")), Some(false))
        .await
        .unwrap();
    assert!(!d.halted);
    assert_eq!(d.cap_usd.to_string(), "5.000000");
    assert!(s
        .reserve(ids[3], token(ids[3]), day, cap, usd("0.02"), now)
        .await
        .unwrap());
}
