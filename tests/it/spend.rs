//! Spend you can trust, on both backends: the day's ceiling holds for every
//! paid call (retries and a dearer fallback included) under a hundred racing
//! jobs; a halt sends nothing new while calls are in flight; an unknown cost
//! stays unknown through every sum; the rollup equals a plain sum over the
//! attempts; and `GET /v1/spend` with its CSV, for each role and bad input.

use chrono::{Duration as Days, NaiveDate, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate::model::{
    AttemptEnd, AttemptId, AttemptState, CostSource, Credits, JobId, JobStatus,
    Purpose as AttemptPurpose, Role, Usd,
};
use tollgate::providers::mock::MockConfig;
use tollgate::store::{AttemptOutcome, Claim, Hold, NewAttempt, Op, Unit, User};
use tollgate::usecases::spend::{AttemptQuery, AttemptQueryText};
use tollgate_testkit::{both_backends, wait_until};
use tollgate_testkit::{Api, MockServer, TestDb};

both_backends!(
    racing_paid_calls_with_retries_and_a_dearer_fallback_never_pass_the_cap,
    a_halt_while_calls_are_in_flight_sends_nothing_new,
    unknown_costs_stay_unknown_and_the_rollup_equals_the_raw_sum,
    the_attempt_list_filters_and_pages,
    spend_over_http_is_for_admins_and_refuses_bad_ranges,
    spend_as_csv_is_one_row_per_attempt_with_unpriced_left_empty,
    one_person_cannot_spend_more_than_their_share_of_the_day,
    spend_is_told_by_person_and_by_the_token_that_ordered_it,
    racing_calls_tell_each_share_of_the_cap_once,
);

fn usd(s: &str) -> Usd {
    Usd::parse(s).unwrap()
}

async fn mock(latency_ms: u64, price: &str) -> MockServer {
    MockServer::start(MockConfig {
        idempotency: true,
        lookup: true,
        latency: Duration::from_millis(latency_ms),
        price_usd: Some(price.to_string()),
        public_base: String::new(),
    })
    .await
}

/// An http edit model priced at `price` per generation.
fn model(id: &str, m: &MockServer, price: &str, extra: &str) -> String {
    let base = &m.base;
    format!(
        "[[models]]\nid = \"{id}\"\nkind = \"image_edit\"\nprovider = \"http\"\nendpoint = \"{base}\"\n\
         price = {{ per_generation = \"{price}\" }}\npoll_ms = 20\nbackoff_ms = 10\nbackoff_max_ms = 50\n{extra}\n"
    )
}

async fn person(db: &TestDb, email: &str) -> User {
    let t = &db.tollgate;
    let u = t
        .add_user(email, Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, u.id, Credits(10_000), None, None)
        .await
        .unwrap();
    u
}

async fn edits(db: &TestDb, u: &User, prefix: &str, n: usize) -> Vec<JobId> {
    let t = &db.tollgate;
    let source = t
        .upload_asset(
            u,
            Some("image/png"),
            tollgate_testkit::photo_of_a_dog(64, 48).into(),
        )
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let body = json!({"kind": "image_edit", "source": source.id,
            "target": {"kind": "pet", "description": "the dog"}, "style": "embroidery", "strength": "balanced"});
        ids.push(
            t.submit_job(u, None, Some(&format!("{prefix}{i}")), &body)
                .await
                .unwrap()
                .job
                .id,
        );
    }
    ids
}

/// Waits (bounded) until every job is terminal or parked.
async fn settle_all(db: &TestDb, ids: &[JobId]) -> Vec<tollgate::store::Job> {
    wait_until("every job settles", Duration::from_secs(60), async || {
        let mut all = Vec::new();
        for id in ids {
            all.push(db.store().job(*id).await.unwrap().unwrap());
        }
        all.iter()
            .all(|j| j.status.is_terminal() || j.status == JobStatus::Parked)
            .then_some(all)
    })
    .await
}

async fn predictions(m: &MockServer) -> usize {
    m.stats().await["predictions"].as_array().unwrap().len()
}

/// A hundred jobs race for a day that holds their first calls and most of
/// their retries, but not all of their fallbacks. The cheap model fails
/// two times in three (a retry on itself, then a fallback to a model three
/// times dearer); the dear one sometimes cannot say what it cost.
/// Sampled all along, used plus reserved never passes the cap; what the
/// providers were really paid never does either; the jobs that the day
/// could not hold fail with SPENDING_PAUSED and are refunded.
async fn racing_paid_calls_with_retries_and_a_dearer_fallback_never_pass_the_cap(db: TestDb) {
    let cheap = mock(30, "0.100000").await;
    let dear = mock(30, "0.300000").await;
    let cap = usd("22.00");
    let toml = format!(
        "daily_cap_usd = \"22.00\"\n{}{}",
        model(
            "cheap",
            &cheap,
            "0.10",
            "default = true\nattempts = 2\nfallback = [\"dear\"]\nfallback_on = [\"exhausted\"]"
        ),
        model("dear", &dear, "0.30", "attempts = 2")
    );
    let db = db.with_config(&toml).await;
    // Two of three cheap predictions fail: many jobs retry, many fall back.
    let cheap_script: Vec<&str> = (0..300)
        .map(|i| if i % 3 == 2 { "ok" } else { "fail" })
        .collect();
    cheap.script(json!({ "next": cheap_script })).await;
    let dear_script: Vec<&str> = (0..300)
        .map(|i| ["ok", "omit_cost", "fail"][i % 3])
        .collect();
    dear.script(json!({ "next": dear_script })).await;
    let u = person(&db, "racer@example.com").await;
    let before = db.tollgate.user(u.id).await.unwrap().balance;
    let ids = edits(&db, &u, "race", 100).await;

    // Watch the day while the hundred run at once.
    let today = Utc::now().date_naive();
    let done = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(Mutex::new((Usd::ZERO, 0u32)));
    let watcher = {
        let (store, done, worst) = (db.store().clone(), done.clone(), worst.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                let d = store.budget_day(today, cap).await.unwrap();
                {
                    let mut w = worst.lock().unwrap();
                    w.0 = w.0.max(d.used_usd.plus(d.reserved_usd));
                    w.1 += 1;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let engine = tollgate::engine::start(db.tollgate.clone(), 100);
    let jobs = settle_all(&db, &ids).await;
    engine.shutdown().await;
    done.store(true, Ordering::Relaxed);
    watcher.await.unwrap();

    let (worst, samples) = *worst.lock().unwrap();
    assert!(samples > 20, "the day was watched ({samples} samples)");
    assert!(worst <= cap, "used plus reserved reached {worst}");
    let d = db.store().budget_day(today, cap).await.unwrap();
    assert!(d.used_usd <= cap, "used {}", d.used_usd);
    assert_eq!(d.reserved_usd, Usd::ZERO, "every hold settled");
    // What the providers were really paid (each charged its estimate).
    let paid = usd("0.10").decimal() * rust_decimal::Decimal::from(cheap.paid().await)
        + usd("0.30").decimal() * rust_decimal::Decimal::from(dear.paid().await);
    assert!(paid <= cap.decimal(), "the providers were paid {paid}");
    // Booked is paid: priced costs plus the estimate kept for each unpriced call.
    assert_eq!(d.used_usd.decimal(), paid);

    let mut retried = 0;
    let mut fell_back = 0;
    let mut paused = 0;
    let mut charged = 0i64;
    for j in &jobs {
        let a = db.store().attempts(j.id).await.unwrap();
        if a.iter().filter(|a| a.model == "cheap").count() == 2 {
            retried += 1;
        }
        if a.iter().any(|a| a.model == "dear") {
            fell_back += 1;
        }
        match j.status {
            JobStatus::Succeeded => charged += j.credits.0,
            JobStatus::Failed => {
                let code = j.error.as_ref().unwrap().code.as_str();
                if code == "SPENDING_PAUSED" {
                    paused += 1;
                    assert!(j.error.as_ref().unwrap().message.contains("paused"));
                }
            }
            other => panic!("job {} is {other:?}", j.id),
        }
    }
    assert!(retried > 10, "{retried} jobs retried");
    assert!(fell_back > 5, "{fell_back} jobs fell back");
    assert!(paused > 10, "{paused} jobs found the day full");
    // Only what succeeded was charged; every failure was refunded.
    let after = db.tollgate.user(u.id).await.unwrap().balance;
    assert_eq!(before.0 - after.0, charged);
    // The rollup agrees with the attempts, unpriced calls apart.
    let rolled = db.store().spend_rows(today, today).await.unwrap();
    assert_eq!(
        rolled,
        db.store().spend_rows_raw(today, today).await.unwrap()
    );
    let report = db.tollgate.spend(today, today).await.unwrap();
    assert!(report.total.unpriced > 0, "omitted costs are counted apart");
    assert_eq!(
        report.total.priced_usd.decimal()
            + usd("0.30").decimal() * rust_decimal::Decimal::from(report.total.unpriced),
        d.used_usd.decimal(),
        "priced plus the estimate of each unpriced call is what the breaker booked"
    );
}

/// Twenty predictions are in flight when an admin halts the day: they
/// finish (the money is spent either way), but nothing new is sent, not a
/// retry of the ones that fail and not a new job.
async fn a_halt_while_calls_are_in_flight_sends_nothing_new(db: TestDb) {
    // Each call is held 3 s, so all twenty are in flight together even on
    // a busy machine (the suite's other tests share its two cores): the
    // halt must come before any answer, or a retry, could.
    let m = mock(3000, "0.100000").await;
    let db = db
        .with_config(&model("m", &m, "0.10", "default = true\nattempts = 3"))
        .await;
    let script: Vec<&str> = (0..20)
        .map(|i| if i % 2 == 0 { "ok" } else { "fail" })
        .collect();
    m.script(json!({ "next": script })).await;
    let u = person(&db, "halted@example.com").await;
    let admin = db
        .tollgate
        .add_user("admin@example.com", Role::Admin, "correct horse battery")
        .await
        .unwrap();
    let first = edits(&db, &u, "before", 20).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 20);
    wait_until(
        "twenty calls in flight",
        Duration::from_secs(30),
        async || (predictions(&m).await == 20).then_some(()),
    )
    .await;
    assert_eq!(predictions(&m).await, 20, "all twenty are in flight");
    let today = Utc::now().date_naive();
    let d = db
        .tollgate
        .halt_day(today, "the provider's invoice looks wrong", Some(admin.id))
        .await
        .unwrap();
    assert!(d.halted);
    assert_eq!(d.halted_by, Some(admin.id));
    let later = edits(&db, &u, "after", 5).await;
    let all: Vec<JobId> = first.iter().chain(&later).copied().collect();
    let jobs = settle_all(&db, &all).await;
    engine.shutdown().await;

    assert_eq!(predictions(&m).await, 20, "nothing was sent after the halt");
    let succeeded = jobs
        .iter()
        .filter(|j| j.status == JobStatus::Succeeded)
        .count();
    let paused: Vec<_> = jobs
        .iter()
        .filter(|j| {
            j.status == JobStatus::Failed
                && j.error.as_ref().unwrap().code.as_str() == "SPENDING_PAUSED"
        })
        .collect();
    assert_eq!((succeeded, paused.len()), (10, 15), "{jobs:#?}");
    for j in &later {
        assert!(db.store().attempts(*j).await.unwrap().is_empty());
    }
    // The twenty calls were paid and booked; nothing is held.
    let d = db.tollgate.budget(today).await.unwrap();
    assert_eq!((d.used_usd, d.reserved_usd), (usd("2.0"), Usd::ZERO));
    let history = db.tollgate.budget_history(today, today).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        history[0].by_email.as_ref().map(|e| e.as_str().to_string()),
        Some("admin@example.com".to_string())
    );
    assert_eq!(
        history[0].change.reason.as_deref(),
        Some("the provider's invoice looks wrong")
    );
}

/// Attempts written straight through units of work on three days: known,
/// zero and unknown costs; an unknown cost learnt later; a failure that
/// changes its error class. Every sum keeps unknown apart, and the rollup
/// the triggers keep equals a plain SUM over the attempts.
async fn unknown_costs_stay_unknown_and_the_rollup_equals_the_raw_sum(db: TestDb) {
    let u = person(&db, "sums@example.com").await;
    let ids = edits(&db, &u, "sum", 6).await;
    let s = db.store();
    let claims = s.claim_jobs("w", 6, 60.0).await.unwrap();
    let day = |d: u32| NaiveDate::from_ymd_opt(2026, 11, d).unwrap();
    // (job, day, model, cost written first, cost learnt later, error class)
    type Case = (
        usize,
        u32,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
    );
    let cases: [Case; 8] = [
        (0, 10, "a", Some("0.10"), None, None),
        (0, 10, "a", None, None, None),
        (1, 10, "b", Some("0"), None, Some("rate_limited")),
        (2, 11, "a", None, Some("0.07"), None),
        (3, 11, "b", None, None, Some("failed")),
        (3, 11, "b", Some("0.25"), None, None),
        (4, 12, "a", None, None, None),
        (5, 12, "a", Some("1.5"), None, Some("failed")),
    ];
    for (n, (job, d, model, cost, later, class)) in cases.iter().enumerate() {
        let claim: &Claim = claims.iter().find(|c| c.job.id == ids[*job]).unwrap();
        let attempt = NewAttempt {
            id: AttemptId::new(),
            job_id: ids[*job],
            purpose: AttemptPurpose::Generate,
            provider: "http".into(),
            endpoint: Some("http://127.0.0.1:9".into()),
            model: model.to_string(),
            attempt_no: n as i32 + 1,
            idempotency_key: format!("{}:{n}", ids[*job]),
            hold: Some(Hold {
                day: day(*d),
                amount: usd("2"),
                default_cap: usd("100"),
            }),
            started_at: Utc::now(),
        };
        let end = |cost: Option<&str>| Op::EndAttempt {
            attempt: attempt.id,
            outcome: AttemptOutcome {
                end: if class.is_some() {
                    AttemptEnd::Failed
                } else {
                    AttemptEnd::Succeeded
                },
                provider_job_id: None,
                error_class: class.map(|c| tollgate::model::ErrorClass::parse(c).unwrap()),
                error: None,
                duration_ms: 5,
                usage: None,
                cost: cost.map(|c| (usd(c), CostSource::Quoted)),
                finished_at: Utc::now(),
            },
        };
        let mut ops = vec![Op::BeginAttempt(attempt.clone()), end(*cost)];
        if later.is_some() {
            ops.push(end(*later));
        }
        s.apply_one(Unit {
            job: claim.job.id,
            token: claim.token,
            ops,
        })
        .await
        .unwrap();
    }
    // One more still open (submitting): counted, neither priced nor unpriced.
    let claim = claims.iter().find(|c| c.job.id == ids[4]).unwrap();
    s.apply_one(Unit {
        job: ids[4],
        token: claim.token,
        ops: vec![Op::BeginAttempt(NewAttempt {
            id: AttemptId::new(),
            job_id: ids[4],
            purpose: AttemptPurpose::Generate,
            provider: "http".into(),
            endpoint: None,
            model: "a".into(),
            attempt_no: 99,
            idempotency_key: format!("{}:99", ids[4]),
            hold: Some(Hold {
                day: day(12),
                amount: usd("2"),
                default_cap: usd("100"),
            }),
            started_at: Utc::now(),
        })],
    })
    .await
    .unwrap();

    let rolled = s.spend_rows(day(1), day(30)).await.unwrap();
    assert_eq!(rolled, s.spend_rows_raw(day(1), day(30)).await.unwrap());
    let r = db.tollgate.spend(day(10), day(12)).await.unwrap();
    let by_day: Vec<(i64, String, i64)> = r
        .days
        .iter()
        .map(|d| {
            (
                d.tally.attempts,
                d.tally.priced_usd.to_string(),
                d.tally.unpriced,
            )
        })
        .collect();
    assert_eq!(
        by_day,
        [
            (3, "0.100000".to_string(), 1),
            (3, "0.320000".to_string(), 1),
            (3, "1.500000".to_string(), 1),
        ]
    );
    // The open one is said apart too: neither priced nor unpriced yet.
    assert_eq!(r.total.words(), "$1.92 + 3 unpriced + 1 pending");
    assert_eq!(r.total.pending(), 1);
    let a = r.models.iter().find(|m| m.model == "a").unwrap();
    assert_eq!(
        (a.tally.attempts, a.tally.priced_usd, a.tally.unpriced),
        (6, usd("1.67"), 2)
    );
    let failed = r
        .classes
        .iter()
        .find(|c| c.error_class.map(|c| c.as_str()) == Some("failed"))
        .unwrap();
    assert_eq!(failed.tally.words(), "$1.50 + 1 unpriced");
    // A day before any of it: nothing, not zero-priced rows.
    let empty = db.tollgate.spend(day(1), day(2)).await.unwrap();
    assert_eq!(empty.total.attempts, 0);
    assert!(empty.models.is_empty());
    // The unpriced filter lists exactly the three.
    let list = db
        .tollgate
        .spend_attempts(&AttemptQuery {
            unpriced_only: true,
            ..AttemptQuery::between(day(10), day(12))
        })
        .await
        .unwrap()
        .items;
    assert_eq!(list.len(), 3);
    assert!(list.iter().all(|a| a.attempt.cost_usd.is_none()
        && matches!(
            a.attempt.state,
            AttemptState::Succeeded | AttemptState::Failed
        )));
}

async fn the_attempt_list_filters_and_pages(db: TestDb) {
    let m = mock(0, "0.100000").await;
    let db = db
        .with_config(&model("m", &m, "0.10", "default = true\nattempts = 2"))
        .await;
    m.script(json!({ "next": ["fail", "ok", "omit_cost", "ok", "ok", "ok", "ok"] }))
        .await;
    let u = person(&db, "pages@example.com").await;
    let ids = edits(&db, &u, "p", 6).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    settle_all(&db, &ids).await;
    engine.shutdown().await;
    let today = Utc::now().date_naive().to_string();
    // The filters as a query string sends them, parsed as the API does.
    let q = |f: &dyn Fn(&mut AttemptQueryText)| {
        let mut text = AttemptQueryText {
            from: Some(today.clone()),
            to: Some(today.clone()),
            ..AttemptQueryText::default()
        };
        f(&mut text);
        AttemptQuery::parse(&text)
    };
    let t = &db.tollgate;
    let first = t.spend_attempts(&q(&|_| ()).unwrap()).await.unwrap();
    assert_eq!((first.items.len(), first.next, first.prev), (7, None, None));
    let all = first.items;
    assert!(all
        .iter()
        .all(|a| a.user_email.as_str() == "pages@example.com"));
    let failed = t
        .spend_attempts(&q(&|q| q.error_class = Some("failed".into())).unwrap())
        .await
        .unwrap()
        .items;
    assert_eq!(failed.len(), 1);
    let unpriced = t
        .spend_attempts(&AttemptQuery {
            unpriced_only: true,
            ..q(&|_| ()).unwrap()
        })
        .await
        .unwrap()
        .items;
    assert_eq!(unpriced.len(), 1);
    let ok = t
        .spend_attempts(&q(&|q| q.state = Some("succeeded".into())).unwrap())
        .await
        .unwrap()
        .items;
    assert_eq!(ok.len(), 6);
    let none = t
        .spend_attempts(&q(&|q| q.model = Some("other".into())).unwrap())
        .await
        .unwrap()
        .items;
    assert!(none.is_empty());
    // Pages of three, in order, each attempt once.
    let page_of = |cursor: Option<String>| {
        let query = AttemptQuery {
            counted: true,
            ..q(&|q| {
                q.limit = Some(3);
                q.cursor = cursor.clone();
            })
            .unwrap()
        };
        async move { t.spend_attempts(&query).await }
    };
    let mut pages = Vec::new();
    let mut cursor = None;
    let last = loop {
        let page = page_of(cursor.clone()).await.unwrap();
        // Each page says where it sits: "Showing 4–6 of 7".
        let before = pages.iter().map(Vec::len).sum::<usize>() as u64;
        let place = page.place.unwrap();
        assert_eq!((place.before, place.total), (before, 7));
        pages.push(page.items.iter().map(|a| a.attempt.id).collect::<Vec<_>>());
        match page.next.clone() {
            Some(n) => cursor = Some(n),
            None => break page,
        }
    };
    let seen: Vec<_> = pages.concat();
    assert_eq!(seen, all.iter().map(|a| a.attempt.id).collect::<Vec<_>>());
    // And back, page by page, to the first.
    let mut back = vec![pages.last().unwrap().clone()];
    let mut prev = last.prev;
    while let Some(p) = prev {
        let page = page_of(Some(p)).await.unwrap();
        back.push(page.items.iter().map(|a| a.attempt.id).collect());
        prev = page.prev;
    }
    back.reverse();
    assert_eq!(back, pages, "the pages back are the pages forward");
    // Bad filters are refused, not ignored.
    for bad in [
        q(&|q| q.state = Some("paid".into())),
        q(&|q| q.limit = Some(0)),
        q(&|q| q.limit = Some(501)),
        q(&|q| q.cursor = Some("not a cursor".into())),
        q(&|q| q.from = Some("2026-13-01".into())),
    ] {
        let e = bad.unwrap_err();
        assert_eq!(e.code(), "INVALID_REQUEST", "{e:?}");
    }
}

/// The API served with an admin and a user, each with a token.
struct Spend {
    api: Api,
    admin: String,
    user: String,
}

async fn api(db: TestDb) -> Spend {
    let api = Api::serve(db).await;
    let (_, admin) = api.person("admin@example.com", Role::Admin, 0).await;
    let (_, user) = api.person("user@example.com", Role::User, 0).await;
    Spend { api, admin, user }
}

impl Spend {
    async fn get(&self, path: &str, token: Option<&str>) -> (StatusCode, String) {
        self.api.get_text(token, path).await
    }
}

async fn spend_over_http_is_for_admins_and_refuses_bad_ranges(db: TestDb) {
    let s = api(db).await;
    let (status, _) = s.get("/v1/spend", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = s.get("/v1/spend", Some(&s.user)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        "FORBIDDEN"
    );
    // Thirty days ending today by default, one row per day.
    let (status, body) = s.get("/v1/spend", Some(&s.admin)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["days"].as_array().unwrap().len(), 30);
    assert_eq!(r["to"], Utc::now().date_naive().to_string());
    assert_eq!(r["total"]["priced_usd"], "0.000000");
    assert_eq!(r["total"]["unpriced_attempts"], 0);
    assert_eq!(r["days"][0]["cap_usd"], "50.000000");
    let today = Utc::now().date_naive();
    let year_ago = today - Days::days(365);
    let (status, _) = s
        .get(
            &format!("/v1/spend?from={year_ago}&to={today}"),
            Some(&s.admin),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "366 days is allowed");
    for bad in [
        format!("/v1/spend?from={}&to={today}", year_ago - Days::days(1)),
        "/v1/spend?from=2026-11-30&to=2026-11-01".to_string(),
        "/v1/spend?from=2026-02-30".to_string(),
        "/v1/spend?from=yesterday".to_string(),
        "/v1/spend?to=2026-11-31".to_string(),
        "/v1/spend?format=xml".to_string(),
        "/v1/spend?colour=red".to_string(),
        "/v1/spend?from=%00".to_string(),
        // Given but empty is not absent (schemathesis found this one).
        "/v1/spend?to=".to_string(),
        "/v1/spend?from=".to_string(),
        "/v1/spend?format=".to_string(),
    ] {
        let (status, body) = s.get(&bad, Some(&s.admin)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["error"]["code"], "INVALID_REQUEST", "{bad}");
    }
}

async fn spend_as_csv_is_one_row_per_attempt_with_unpriced_left_empty(db: TestDb) {
    let m = mock(0, "0.120000").await;
    let db = db
        .with_config(&model("m", &m, "0.12", "default = true"))
        .await;
    m.script(json!({ "next": ["ok", "omit_cost", "ok"] })).await;
    let u = person(&db, "csv@example.com").await;
    let ids = edits(&db, &u, "c", 3).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    settle_all(&db, &ids).await;
    engine.shutdown().await;
    let s = api(db).await;
    let today = Utc::now().date_naive();
    let r = s
        .api
        .http
        .get(format!("{}/v1/spend?from={today}&to={today}", s.api.base))
        .header("accept", "text/csv")
        .bearer_auth(&s.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let text = r.text().await.unwrap();
    let mut rows = csv::Reader::from_reader(text.as_bytes());
    assert_eq!(
        rows.headers().unwrap().iter().collect::<Vec<_>>(),
        [
            "started_at",
            "job_id",
            "user",
            "provider",
            "model",
            "attempt_no",
            "state",
            "error_class",
            "cost_usd",
            "cost_source"
        ]
    );
    let rows: Vec<csv::StringRecord> = rows.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 3, "{text}");
    let mut costs: Vec<&str> = rows.iter().map(|r| &r[8]).collect();
    costs.sort();
    assert_eq!(
        costs,
        ["", "0.120000", "0.120000"],
        "unpriced is empty, not 0"
    );
    assert!(rows
        .iter()
        .all(|r| &r[2] == "csv@example.com" && &r[6] == "succeeded"));
    // The same with format=csv; JSON agrees with it.
    let (status, again) = s
        .get(
            &format!("/v1/spend?from={today}&to={today}&format=csv"),
            Some(&s.admin),
        )
        .await;
    assert_eq!((status, again.lines().count()), (StatusCode::OK, 4));
    let (_, json) = s
        .get(
            &format!("/v1/spend?from={today}&to={today}"),
            Some(&s.admin),
        )
        .await;
    let r: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(r["total"]["priced_usd"], "0.240000");
    assert_eq!(r["total"]["unpriced_attempts"], 1);
    assert_eq!(r["total"]["in_words"], "$0.24 + 1 unpriced");
    assert_eq!(
        r["days"][0]["used_usd"], "0.360000",
        "the unpriced call is booked at its estimate"
    );
    // A user cannot read it as CSV either.
    let (status, _) = s.get("/v1/spend?format=csv", Some(&s.user)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// Issue 29, 2: once one person's work has cost their share of the day's
/// cap, their new paid requests are 429 (nothing charged, no job), a replay
/// of a job already made is still answered, and everyone else's work goes
/// on; the budget page's list says who spent what.
async fn one_person_cannot_spend_more_than_their_share_of_the_day(db: TestDb) {
    let m = mock(0, "0.200000").await;
    let toml = format!(
        "daily_cap_usd = \"1.00\"\nuser_share_percent = 50\n{}",
        model("m", &m, "0.20", "default = true")
    );
    let db = db.with_config(&toml).await;
    let t = &db.tollgate;
    let (ana, bo) = (
        person(&db, "ana@example.com").await,
        person(&db, "bo@example.com").await,
    );
    let source = t
        .upload_asset(
            &ana,
            Some("image/png"),
            tollgate_testkit::photo_of_a_dog(64, 48).into(),
        )
        .await
        .unwrap();
    let body = json!({"kind": "image_edit", "source": source.id,
        "target": {"kind": "pet", "description": "the dog"}, "style": "embroidery", "strength": "balanced"});
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let mut made = Vec::new();
    for key in ["a1", "a2", "a3"] {
        made.push(
            t.submit_job(&ana, None, Some(key), &body)
                .await
                .unwrap()
                .job
                .id,
        );
    }
    for job in settle_all(&db, &made).await {
        assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    }
    let balance = db.tollgate.user(ana.id).await.unwrap().balance;

    // $0.60 of a $1.00 day: past the half that is ana's.
    let refused = t.submit_job(&ana, None, Some("a4"), &body).await;
    match refused {
        Err(tollgate::Error::ShareUsed { retry_after_s }) => {
            assert!((1..=86_400).contains(&retry_after_s), "{retry_after_s}")
        }
        other => panic!(
            "expected the share to be used: {:?}",
            other.map(|s| s.job.id)
        ),
    }
    assert_eq!(
        db.tollgate.user(ana.id).await.unwrap().balance,
        balance,
        "nothing charged"
    );
    let replay = t.submit_job(&ana, None, Some("a1"), &body).await.unwrap();
    assert!(!replay.created);
    assert_eq!(replay.job.id, made[0], "a replay is answered");

    // Bo's work still runs on the rest of the day.
    let theirs = edits(&db, &bo, "b", 1).await;
    let done = settle_all(&db, &theirs).await;
    assert_eq!(done[0].status, JobStatus::Succeeded, "{:?}", done[0].error);
    engine.shutdown().await;

    let today = Utc::now().date_naive();
    let spenders = db.store().top_spenders_on(today, 10).await.unwrap();
    let seen: Vec<(String, Usd)> = spenders
        .iter()
        .map(|s| (s.email.to_string(), s.spent_usd))
        .collect();
    assert_eq!(
        seen,
        [
            ("ana@example.com".to_string(), usd("0.60")),
            ("bo@example.com".to_string(), usd("0.20"))
        ]
    );
    assert_eq!(m.paid().await, 4, "four generations paid in all");
}

/// Spend by who ordered it (issue 33, 11): each job made with an API token
/// is counted under that token, work ordered from the pages apart, and the
/// people's rows add up to the day's total to the cent.
async fn spend_is_told_by_person_and_by_the_token_that_ordered_it(db: TestDb) {
    let m = mock(0, "0.200000").await;
    let db = db
        .with_config(&model("m", &m, "0.20", "default = true"))
        .await;
    let t = db.tollgate.clone();
    let (ana, bo) = (
        person(&db, "ana@example.com").await,
        person(&db, "bo@example.com").await,
    );
    let (ana_ci, ana_ci_secret) = t.create_api_token(&ana, "ci").await.unwrap();
    let (_, ana_app_secret) = t.create_api_token(&ana, "mobile app").await.unwrap();
    let (_, bo_secret) = t.create_api_token(&bo, "bo's script").await.unwrap();
    let app = tollgate::api::router(t.clone()).layer(tollgate::usecases::auth::session_layer(&t));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let engine = tollgate::engine::start(t.clone(), 4);

    let http = reqwest::Client::new();
    let mut made = Vec::new();
    for (who, secret, key) in [
        (&ana, &ana_ci_secret, "ci-1"),
        (&ana, &ana_ci_secret, "ci-2"),
        (&ana, &ana_app_secret, "app-1"),
        (&bo, &bo_secret, "bo-1"),
    ] {
        let photo = t
            .upload_asset(
                who,
                Some("image/png"),
                tollgate_testkit::photo_of_a_dog(64, 48).into(),
            )
            .await
            .unwrap();
        let body = json!({"kind": "image_edit", "source": photo.id,
            "target": {"kind": "pet", "description": "the dog"}, "style": "embroidery", "strength": "balanced"});
        let r = http
            .post(format!("{base}/v1/jobs"))
            .bearer_auth(secret)
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED, "{key}");
        let job: Value = r.json().await.unwrap();
        made.push(JobId(job["id"].as_str().unwrap().parse().unwrap()));
    }
    made.extend(edits(&db, &ana, "pages", 1).await);
    for job in settle_all(&db, &made).await {
        assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    }
    engine.shutdown().await;

    let today = Utc::now().date_naive();
    let report = t.spend(today, today).await.unwrap();
    let tokens: Vec<(String, Option<String>, i64, Usd)> = report
        .tokens
        .iter()
        .map(|r| {
            let token = r.token.as_ref().map(|t| t.name.clone());
            (
                r.owner.to_string(),
                token,
                r.tally.attempts,
                r.tally.priced_usd,
            )
        })
        .collect();
    assert_eq!(
        tokens[0],
        ("ana@example.com".into(), Some("ci".into()), 2, usd("0.40"))
    );
    assert_eq!(tokens.len(), 4, "{tokens:?}");
    for row in [
        (
            "ana@example.com".to_string(),
            Some("mobile app".to_string()),
            1,
            usd("0.20"),
        ),
        ("ana@example.com".to_string(), None, 1, usd("0.20")),
        (
            "bo@example.com".to_string(),
            Some("bo's script".to_string()),
            1,
            usd("0.20"),
        ),
    ] {
        assert!(tokens.contains(&row), "{row:?} in {tokens:?}");
    }
    assert_eq!(report.tokens[0].token.as_ref().unwrap().id, ana_ci.id);
    let people: Vec<(String, Usd)> = report
        .people
        .iter()
        .map(|p| (p.email.to_string(), p.tally.priced_usd))
        .collect();
    assert_eq!(
        people,
        vec![
            ("ana@example.com".to_string(), usd("0.80")),
            ("bo@example.com".to_string(), usd("0.20")),
        ]
    );
    let summed = report
        .people
        .iter()
        .fold(Usd::ZERO, |sum, p| sum.plus(p.tally.priced_usd));
    assert_eq!(
        summed, report.total.priced_usd,
        "the rows add up to the total"
    );
    assert_eq!(
        report.total.priced_usd,
        usd("1.00"),
        "what the provider billed"
    );

    // The API says the same to an admin.
    let admin = t
        .add_user("boss@example.com", Role::Admin, "correct horse battery")
        .await
        .unwrap();
    let (_, admin_secret) = t.create_api_token(&admin, "dashboard").await.unwrap();
    let body: Value = http
        .get(format!("{base}/v1/spend?from={today}&to={today}"))
        .bearer_auth(admin_secret)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["people"].as_array().unwrap().len(), 2, "{body}");
    assert_eq!(body["people"][0]["email"], "ana@example.com");
    assert_eq!(body["people"][0]["priced_usd"], "0.800000");
    let tokens = body["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 4, "{body}");
    assert_eq!(tokens[0]["token_name"], "ci");
    assert_eq!(tokens[0]["token_id"], ana_ci.id.to_string());
    assert_eq!(tokens[0]["priced_usd"], "0.400000");
    assert!(
        tokens
            .iter()
            .any(|t| t["token_id"].is_null() && t["owner_email"] == "ana@example.com"),
        "work from the pages is its own row: {body}"
    );
}

/// Five calls race through a $1.00 day at $0.20 each: every reservation
/// looks at the day, yet 50, 80 and 95% are each written down once, with
/// what was booked when they were passed; then the day forecasts "reached".
async fn racing_calls_tell_each_share_of_the_cap_once(db: TestDb) {
    let m = mock(0, "0.200000").await;
    let toml = format!(
        "daily_cap_usd = \"1.00\"\nuser_share_percent = 100\n{}",
        model("m", &m, "0.20", "default = true")
    );
    let db = db.with_config(&toml).await;
    let t = db.tollgate.clone();
    let u = person(&db, "racer@example.com").await;
    let ids = edits(&db, &u, "race", 5).await;
    let engine = tollgate::engine::start(t.clone(), 5);
    for job in settle_all(&db, &ids).await {
        assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    }
    engine.shutdown().await;
    let today = Utc::now().date_naive();
    // Looking again, from many tasks at once, writes nothing more.
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let lookers: Vec<_> = (0..8)
        .map(|_| {
            let (t, barrier) = (t.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                t.note_thresholds(today).await.unwrap().len()
            })
        })
        .collect();
    for l in lookers {
        assert_eq!(l.await.unwrap(), 0, "each share is told once");
    }
    let passed = t.thresholds_on(today).await.unwrap();
    let percents: Vec<u32> = passed.iter().map(|c| c.percent).collect();
    assert_eq!(percents, vec![50, 80, 95]);
    for c in &passed {
        assert_eq!(c.cap_usd, usd("1.00"));
        assert!(
            c.booked_usd.decimal() * rust_decimal::Decimal::from(100)
                >= usd("1.00").decimal() * rust_decimal::Decimal::from(c.percent),
            "{c:?} was past its share when written"
        );
    }
    let day = t.budget(today).await.unwrap();
    assert_eq!(
        tollgate::usecases::budget::cap_forecast(
            today,
            day.cap_usd,
            day.used_usd.plus(day.reserved_usd),
            Utc::now()
        ),
        tollgate::usecases::budget::CapForecast::Reached
    );
}
