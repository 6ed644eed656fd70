//! Jobs run for real on both backends: workers claim them, run their steps
//! with the local provider, store the output, record every attempt and
//! cent, and end each job in exactly one state, refunding failures.

use chrono::{NaiveDate, Utc};
use serde_json::{json, Value};
use std::time::Duration;
use tollgate::model::{
    AttemptEnd, AttemptId, AttemptState, CostSource, Credits, JobId, JobStatus, Progress,
    Purpose as AttemptPurpose, Readiness, Role, Usd, Verdict,
};
use tollgate::store::{
    Applied, AttemptOutcome, BudgetChange, BudgetChangeKind, Claim, Hold, Job, NewAttempt, Op,
    Purpose, Unit, User,
};
use tollgate_testkit::both_backends;
use tollgate_testkit::TestDb;

fn photo() -> Vec<u8> {
    tollgate_testkit::photo_of_a_dog(160, 120)
}

fn empty_mask() -> Vec<u8> {
    let img = image::RgbaImage::new(160, 120);
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

async fn person(db: &TestDb, credits: i64) -> User {
    let t = &db.tollgate;
    let u = t
        .add_user("u@example.com", Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, u.id, Credits(credits), None, None)
        .await
        .unwrap();
    u
}

async fn edit(db: &TestDb, u: &User, key: &str, target: Value) -> JobId {
    let t = &db.tollgate;
    let source = t
        .upload_asset(u, Some("image/png"), photo().into())
        .await
        .unwrap();
    let mut target = target;
    if target["mask"] == json!("EMPTY") {
        let mask = t
            .upload_asset(u, Some("image/png"), empty_mask().into())
            .await
            .unwrap();
        target["mask"] = json!(mask.id);
    }
    let body = json!({"kind": "image_edit", "source": source.id, "target": target, "style": "stained_glass", "strength": "strong"});
    t.submit_job(u, None, Some(key), &body)
        .await
        .unwrap()
        .job
        .id
}

/// Waits (bounded) until the job is terminal.
async fn settled(db: &TestDb, id: JobId) -> Job {
    db.job_when(id, Duration::from_secs(30), |j| j.status.is_terminal())
        .await
}

fn local_attempt(claim: &Claim, n: i32) -> NewAttempt {
    let id = claim.job.id;
    NewAttempt {
        id: AttemptId::new(),
        job_id: id,
        purpose: AttemptPurpose::Generate,
        provider: "local".into(),
        endpoint: None,
        model: "local-edit".into(),
        attempt_no: n,
        idempotency_key: format!("{id}:{n}"),
        hold: Some(Hold {
            day: Utc::now().date_naive(),
            amount: claim.job.estimated_usd,
            default_cap: Usd::parse("50").unwrap(),
        }),
        started_at: Utc::now(),
    }
}

async fn commit(db: &TestDb, claim: &Claim, ops: Vec<Op>) -> Applied {
    db.store()
        .apply_one(Unit {
            job: claim.job.id,
            token: claim.token,
            ops,
        })
        .await
        .unwrap()
}

fn units_committed(db: &TestDb) -> u64 {
    db.store()
        .counters()
        .into_iter()
        .find(|c| c.0 == Purpose::Units)
        .map(|c| c.1)
        .unwrap_or(0)
}

both_backends!(
    an_edit_runs_to_success_with_its_output_and_costs,
    a_video_renders_a_clip,
    not_ready_fails_with_questions_and_refunds,
    a_halted_day_pauses_spending_and_refunds,
    a_resumed_job_skips_its_completed_steps,
    a_dead_runs_attempt_is_closed_not_reused,
    a_cancel_mid_run_settles_the_holds,
);

async fn an_edit_runs_to_success_with_its_output_and_costs(db: TestDb) {
    let u = person(&db, 10).await;
    let id = edit(
        &db,
        &u,
        "e1",
        json!({"kind": "pet", "description": "the dog"}),
    )
    .await;
    let before = units_committed(&db);
    let engine = tollgate::engine::start(db.tollgate.clone(), 2);
    let job = settled(&db, id).await;
    engine.shutdown().await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    // The local provider answers in the call: no prediction id to record,
    // so the whole job is two units (before the call, and the end).
    assert_eq!(units_committed(&db) - before, 2);
    assert_eq!(job.review.as_ref().unwrap().verdict, Verdict::Passed);
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
    let attempts = db.store().attempts(id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].state, AttemptState::Succeeded);
    assert_eq!(attempts[0].cost_source, Some(CostSource::Derived));
    assert_eq!(attempts[0].cost_usd, Some(job.estimated_usd));
    assert_eq!(attempts[0].settled_usd, Some(job.estimated_usd));
    // Paid once: the charge stands, nothing refunded; the day's spend is booked.
    let user = db.tollgate.user(u.id).await.unwrap();
    assert_eq!(user.balance, Credits(10 - job.credits.get()));
    assert_eq!(db.store().ledger_sum(u.id).await.unwrap(), user.balance);
    let day = db
        .store()
        .budget_day(Utc::now().date_naive(), Usd::parse("50").unwrap())
        .await
        .unwrap();
    assert_eq!(day.used_usd, job.estimated_usd);
    assert_eq!(day.reserved_usd, Usd::ZERO);
    // The metrics' spend is the exact sum of priced attempts.
    let m = db.store().metrics_snapshot().await.unwrap();
    let edit = m
        .attempts_by_model
        .iter()
        .find(|a| a.0 == "local-edit" && a.1 == "succeeded")
        .unwrap();
    assert_eq!((edit.2, edit.3, edit.4), (1, job.estimated_usd, 0));
    // Every step left its typed output, and its event on the timeline.
    assert!(job.progress.readiness.is_some());
    assert_eq!(job.progress.output.as_ref().unwrap().key, key);
    assert_eq!(
        job.progress.review.as_ref().unwrap().verdict,
        Verdict::Passed
    );
    let steps: Vec<String> = db
        .history(id)
        .await
        .into_iter()
        .filter(|e| e.kind() == "step")
        .map(|e| e.detail()["step"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(steps, ["readiness", "generate", "review"]);
}

async fn a_video_renders_a_clip(db: TestDb) {
    let u = person(&db, 10).await;
    let body = json!({"kind": "video", "prompt": "a paper boat on a pond", "duration_s": 2, "resolution": "720p"});
    let id = db
        .tollgate
        .submit_job(&u, None, Some("v1"), &body)
        .await
        .unwrap()
        .job
        .id;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    let job = settled(&db, id).await;
    engine.shutdown().await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    assert_eq!(job.output_content_type.as_deref(), Some("image/gif"));
}

async fn not_ready_fails_with_questions_and_refunds(db: TestDb) {
    let u = person(&db, 10).await;
    let id = edit(&db, &u, "n1", json!({"kind": "area", "mask": "EMPTY"})).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    let job = settled(&db, id).await;
    engine.shutdown().await;
    assert_eq!(job.status, JobStatus::Failed);
    let error = job.error.unwrap();
    assert_eq!(error.code.as_str(), "NOT_READY");
    let questions = error.questions.as_ref().unwrap();
    assert!(!questions.is_empty() && questions.len() <= 3);
    // The expensive model was never called, and the job was refunded.
    assert!(db.store().attempts(id).await.unwrap().is_empty());
    assert_eq!(db.tollgate.user(u.id).await.unwrap().balance, Credits(10));
    let day = db
        .store()
        .budget_day(Utc::now().date_naive(), Usd::parse("50").unwrap())
        .await
        .unwrap();
    assert_eq!((day.used_usd, day.reserved_usd), (Usd::ZERO, Usd::ZERO));
}

async fn a_halted_day_pauses_spending_and_refunds(db: TestDb) {
    let u = person(&db, 10).await;
    let today: NaiveDate = Utc::now().date_naive();
    let halt = BudgetChange {
        kind: BudgetChangeKind::Halt,
        reason: Some("checking the bill".into()),
        by: Some(u.id),
        at: Utc::now(),
    };
    db.store()
        .set_budget(today, Usd::parse("50").unwrap(), &halt)
        .await
        .unwrap();
    let id = edit(&db, &u, "h1", json!({"kind": "pet"})).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    let job = settled(&db, id).await;
    engine.shutdown().await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.error.unwrap().code.as_str(), "SPENDING_PAUSED");
    assert!(db.store().attempts(id).await.unwrap().is_empty());
    assert_eq!(db.tollgate.user(u.id).await.unwrap().balance, Credits(10));
}

async fn a_resumed_job_skips_its_completed_steps(db: TestDb) {
    let u = person(&db, 10).await;
    let id = edit(&db, &u, "r1", json!({"kind": "pet"})).await;
    // A first run records its readiness, then its worker dies (lease 1 s).
    let claim = db
        .store()
        .claim_jobs("dead", 1, 1.0)
        .await
        .unwrap()
        .remove(0);
    let marker = Progress {
        readiness: Some(Readiness {
            region_fraction: 0.123,
            observation: None,
        }),
        ..Progress::default()
    };
    commit(&db, &claim, vec![Op::Progress(marker)]).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    let job = settled(&db, id).await;
    engine.shutdown().await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    assert_eq!(
        job.progress.readiness.unwrap().region_fraction,
        0.123,
        "a completed step is never run again"
    );
    let events = db.history(id).await;
    let readiness_runs = events
        .iter()
        .filter(|e| e.kind() == "step" && e.detail()["step"] == "readiness")
        .count();
    assert_eq!(
        readiness_runs, 0,
        "the first run deferred it; it was not re-run"
    );
    let claims: Vec<i64> = events
        .iter()
        .filter(|e| e.kind() == "claimed")
        .map(|e| e.detail()["token"].as_i64().unwrap())
        .collect();
    assert_eq!(claims, [1, 2]);
    let day = db
        .store()
        .budget_day(Utc::now().date_naive(), Usd::parse("50").unwrap())
        .await
        .unwrap();
    assert_eq!(
        (day.used_usd, day.reserved_usd),
        (job.estimated_usd, Usd::ZERO)
    );
}

async fn a_dead_runs_attempt_is_closed_not_reused(db: TestDb) {
    let u = person(&db, 10).await;
    let id = edit(&db, &u, "d1", json!({"kind": "pet"})).await;
    // A run gets as far as writing its attempt down, then dies (lease 1 s).
    let claim = db
        .store()
        .claim_jobs("dead", 1, 1.0)
        .await
        .unwrap()
        .remove(0);
    let first = local_attempt(&claim, 1);
    commit(&db, &claim, vec![Op::BeginAttempt(first)]).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 1);
    let job = settled(&db, id).await;
    engine.shutdown().await;
    assert_eq!(job.status, JobStatus::Succeeded, "{:?}", job.error);
    let attempts = db.store().attempts(id).await.unwrap();
    assert_eq!(attempts.len(), 2, "every attempt is kept");
    let first = attempts.iter().find(|a| a.attempt_no == 1).unwrap();
    assert_eq!(
        (first.state, first.error_class.map(|c| c.as_str())),
        (AttemptState::Failed, Some("interrupted"))
    );
    // Local work dies with its run and creates nothing outside.
    assert_eq!(
        (first.cost_usd, first.settled_usd),
        (Some(Usd::ZERO), Some(Usd::ZERO))
    );
    let second = attempts.iter().find(|a| a.attempt_no == 2).unwrap();
    assert_eq!(second.state, AttemptState::Succeeded);
    let day = db
        .store()
        .budget_day(Utc::now().date_naive(), Usd::parse("50").unwrap())
        .await
        .unwrap();
    assert_eq!(
        (day.used_usd, day.reserved_usd),
        (job.estimated_usd, Usd::ZERO)
    );
}

async fn a_cancel_mid_run_settles_the_holds(db: TestDb) {
    let u = person(&db, 10).await;
    let id = edit(&db, &u, "c1", json!({"kind": "pet"})).await;
    let day = Utc::now().date_naive();
    let cap = Usd::parse("50").unwrap();
    let claim = db.store().claim_jobs("w", 1, 60.0).await.unwrap().remove(0);
    let (paid, open) = (local_attempt(&claim, 1), local_attempt(&claim, 2));
    let ended = AttemptOutcome {
        end: AttemptEnd::Succeeded,
        provider_job_id: None,
        error_class: None,
        error: None,
        duration_ms: 5,
        usage: None,
        cost: Some((Usd::parse("0.01").unwrap(), CostSource::Derived)),
        finished_at: Utc::now(),
    };
    commit(
        &db,
        &claim,
        vec![
            Op::BeginAttempt(paid.clone()),
            Op::EndAttempt {
                attempt: paid.id,
                outcome: ended,
            },
            Op::BeginAttempt(open),
        ],
    )
    .await;
    // The ended attempt settled at its cost; the open one still holds.
    let d = db.store().budget_day(day, cap).await.unwrap();
    assert_eq!(
        (d.used_usd, d.reserved_usd),
        (Usd::parse("0.01").unwrap(), claim.job.estimated_usd)
    );
    // The owner cancels while the run still holds the job: the open
    // attempt may have been paid, so its estimate is booked.
    db.store()
        .cancel_job(id, Utc::now())
        .await
        .unwrap()
        .unwrap();
    let d = db.store().budget_day(day, cap).await.unwrap();
    assert_eq!(
        (d.used_usd, d.reserved_usd),
        (
            Usd::parse("0.01").unwrap().plus(claim.job.estimated_usd),
            Usd::ZERO
        )
    );
    assert_eq!(
        db.store().settle_left_holds().await.unwrap(),
        0,
        "settled once"
    );
}
