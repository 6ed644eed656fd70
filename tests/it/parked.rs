//! Parked work on both backends (rule 12): the DLQ design's four
//! state-machine tests (uncertainty needs reconciliation first; duplicate and
//! conflicting decisions; review, then racing claims make one owner and only
//! the owner finishes; a new generation is not a recovery action), 50 racing
//! identical decisions, 16 workers racing for one recovery, the accounting
//! of accept_failure, a failed recovery returning the record to the queue,
//! and the whole path against the mock provider: an accept_then_drop
//! parks, a reviewer reconciles and resumes polling, the job succeeds and
//! the provider was paid once.

use chrono::Utc;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Barrier;
use tollgate::model::{
    AttemptId, AttemptState, Credits, FailureCode, JobFailure, JobId, JobStatus, ParkedEvidence,
    ParkedStage, ParkedState, Purpose as AttemptPurpose, RecoveryState, ReviewAction, Role, Usd,
};
use tollgate::providers::mock::MockConfig;
use tollgate::store::{
    Applied, Claim, Finish, Hold, NewAttempt, NewParked, Op, Parked, Unit, User,
};
use tollgate::usecases::parked::{DecisionRequest, ParkedQuery, ParkedQueryText};
use tollgate::wire::JobObject;
use tollgate::Error;
use tollgate_testkit::{both_backends, wait_until};
use tollgate_testkit::{MockServer, TestDb};

both_backends!(
    uncertainty_needs_reconciliation_first,
    duplicate_and_conflicting_decisions,
    review_then_racing_claims_make_one_owner_and_only_the_owner_finishes,
    a_new_generation_is_not_a_recovery_action,
    fifty_racing_identical_decisions_make_one,
    accept_failure_records_its_accounting,
    a_failed_recovery_returns_the_record_to_the_queue,
    a_lost_answer_is_reconciled_resumed_and_paid_once,
    a_reported_failure_parks_where_the_model_says_so,
    only_reviewers_decide_and_evidence_is_required,
    bulk_decides_each_matching_record_and_lists_the_skipped,
    a_resumed_poll_that_finds_a_failure_parks_and_pays_for_nothing_new,
    an_owners_cancel_refunds_but_the_record_and_its_hold_wait_for_a_decision,
    a_cancel_during_an_approved_recovery_reopens_the_record,
    a_cancel_while_the_call_is_unanswered_parks_it_for_a_reviewer,
    a_reconcile_onto_an_unknown_prediction_is_refused,
    a_resumed_poll_the_provider_answers_not_found_can_be_reconciled_again,
    the_owner_never_sees_who_decided,
    a_store_that_will_not_keep_the_output_parks_it_for_delivery,
    a_recovery_does_exactly_the_action_decided,
    evidence_is_sanitised_where_it_is_written,
    the_queue_sorts_by_exposure_and_pages_through_it,
    bulk_new_attempts_show_their_costs_and_stop_where_the_day_has_no_room,
);

fn usd(s: &str) -> Usd {
    Usd::parse(s).unwrap()
}

struct People {
    owner: User,
    reviewer: User,
    other_reviewer: User,
}

async fn people(db: &TestDb) -> People {
    let t = &db.tollgate;
    let owner = t
        .add_user("owner@example.com", Role::User, "correct horse battery")
        .await
        .unwrap();
    t.grant_credits(None, owner.id, Credits(100), None, None)
        .await
        .unwrap();
    let reviewer = t
        .add_user(
            "reviewer@example.com",
            Role::Reviewer,
            "correct horse battery",
        )
        .await
        .unwrap();
    let other_reviewer = t
        .add_user("admin@example.com", Role::Admin, "correct horse battery")
        .await
        .unwrap();
    People {
        owner: t.user(owner.id).await.unwrap(),
        reviewer,
        other_reviewer,
    }
}

async fn balance(db: &TestDb, u: &User) -> Credits {
    db.tollgate.user(u.id).await.unwrap().balance
}

/// A job parked in `stage` the way a run parks it: claimed, an attempt
/// written with its hold (sent, for every stage but submission_uncertain),
/// then the park.
async fn parked_job(db: &TestDb, owner: &User, key: &str, stage: ParkedStage) -> (JobId, Parked) {
    parked_job_holding(db, owner, key, stage, "0.04").await
}

/// `parked_job` with a hold of `hold` dollars on its attempt.
async fn parked_job_holding(
    db: &TestDb,
    owner: &User,
    key: &str,
    stage: ParkedStage,
    hold: &str,
) -> (JobId, Parked) {
    let t = &db.tollgate;
    let body = json!({"kind": "video", "prompt": key, "duration_s": 2, "resolution": "720p"});
    let job = t
        .submit_job(owner, None, Some(key), &body)
        .await
        .unwrap()
        .job;
    let claim = claim_one(db, job.id).await;
    let (a, first) = first_call(job.id, hold);
    let mut ops = vec![first];
    let provider_job_id = (stage != ParkedStage::SubmissionUncertain).then(|| "pred_1".to_string());
    if let Some(id) = &provider_job_id {
        ops.push(Op::Submitted {
            attempt: a,
            provider_job_id: id.clone(),
        });
    }
    ops.push(Op::Park(NewParked {
        stage,
        evidence: ParkedEvidence::because("a test parks it")
            .with("idempotency_key", format!("{}:1", job.id)),
        provider: Some("http".into()),
        model: Some("local-clip".into()),
        provider_job_id,
        attempt_id: Some(a),
        polls: 3,
        deliveries: 0,
    }));
    let applied = db
        .store()
        .apply_one(Unit {
            job: job.id,
            token: claim.token,
            ops,
        })
        .await
        .unwrap();
    assert!(matches!(applied, Applied::Done(_)), "{applied:?}");
    let record = db.store().parked_for_job(job.id).await.unwrap().unwrap();
    (job.id, record)
}

/// A run's first call to the provider, written down before it is sent,
/// holding `hold` dollars of today's budget.
pub(crate) fn first_call(job: JobId, hold: &str) -> (AttemptId, Op) {
    let a = AttemptId::new();
    let op = Op::BeginAttempt(NewAttempt {
        id: a,
        job_id: job,
        purpose: AttemptPurpose::Generate,
        provider: "http".into(),
        endpoint: Some("http://127.0.0.1:9".into()),
        model: "local-clip".into(),
        attempt_no: 1,
        idempotency_key: format!("{job}:1"),
        hold: Some(Hold {
            day: Utc::now().date_naive(),
            amount: usd(hold),
            default_cap: usd("50"),
        }),
        started_at: Utc::now(),
    });
    (a, op)
}

/// Claims `job` (and only it) for a test worker.
pub(crate) async fn claim_one(db: &TestDb, job: JobId) -> Claim {
    for _ in 0..50 {
        let claims = db
            .store()
            .claim_jobs("test-worker", 10, 60.0)
            .await
            .unwrap();
        let mut mine = None;
        for c in claims {
            if c.job.id == job {
                mine = Some(c);
            } else {
                // Others go back to the queue.
                db.store()
                    .apply_one(Unit {
                        job: c.job.id,
                        token: c.token,
                        ops: vec![Op::Release],
                    })
                    .await
                    .unwrap();
            }
        }
        if let Some(c) = mine {
            return c;
        }
    }
    panic!("job {job} was never claimed");
}

fn decision(action: &str) -> DecisionRequest {
    DecisionRequest {
        action: tollgate::usecases::parked::parse_action(action).unwrap(),
        evidence: format!("checked the provider's dashboard before {action}"),
        provider_job_id: None,
        refund: None,
        release_hold: None,
    }
}

/// The queue as a query string would ask for it.
fn queue(text: ParkedQueryText) -> tollgate::Result<ParkedQuery> {
    ParkedQuery::parse(&text)
}

fn code(e: &Error) -> &'static str {
    e.code()
}

/// DLQ 1: a submission that may have been accepted cannot be polled before
/// someone attaches the provider's job id; reconcile moves it to
/// polling_exhausted, where it waits for its own decision.
async fn uncertainty_needs_reconciliation_first(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let (job, record) = parked_job(&db, &p.owner, "u1", ParkedStage::SubmissionUncertain).await;
    assert_eq!(
        (record.state, record.round, record.polls),
        (ParkedState::Open, 1, 3)
    );
    assert_eq!(
        record.exposure_usd,
        usd("0.04"),
        "the hold of the unknown call"
    );
    assert_eq!(record.hold_usd, Some(usd("0.04")));
    for action in ["resume_poll", "retry_delivery", "new_attempt"] {
        let e = t
            .decide(&p.reviewer, record.id, &decision(action))
            .await
            .unwrap_err();
        assert_eq!(code(&e), "ACTION_NOT_ALLOWED", "{action}");
    }
    // Nothing was recorded by the refusals.
    assert!(db.store().decisions(record.id).await.unwrap().is_empty());
    let e = t
        .decide(&p.reviewer, record.id, &decision("reconcile"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "INVALID_REQUEST", "reconcile needs the id");

    let reconcile = DecisionRequest {
        provider_job_id: Some("pred_found_by_support".into()),
        ..decision("reconcile")
    };
    let (d, created) = t.decide(&p.reviewer, record.id, &reconcile).await.unwrap();
    assert!(created);
    assert_eq!(d.action, ReviewAction::Reconcile);
    assert!(d.recovery.is_none(), "reconcile is not a recovery");
    let after = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(
        (after.stage, after.state, after.round),
        (ParkedStage::PollingExhausted, ParkedState::Open, 2)
    );
    assert_eq!(
        after.provider_job_id.as_deref(),
        Some("pred_found_by_support")
    );
    let a = db.store().attempts(job).await.unwrap().remove(0);
    assert_eq!(a.state, AttemptState::Submitted);
    assert_eq!(a.provider_job_id.as_deref(), Some("pred_found_by_support"));
    // Sent again: the first reconcile, not a second.
    let (again, created) = t.decide(&p.reviewer, record.id, &reconcile).await.unwrap();
    assert!(!created);
    assert_eq!(again.id, d.id);
    // Now, and only now, polling may resume: its own decision.
    let (resume, created) = t
        .decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(resume.round, 2);
    assert_eq!(
        resume.recovery.as_ref().map(|r| r.state),
        Some(RecoveryState::Pending)
    );
    let job = db.store().job(job).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Queued, "handed to the workers");
    let events = db.history(job.id).await;
    let decided: Vec<_> = events.iter().filter(|e| e.kind() == "decision").collect();
    assert_eq!(decided.len(), 2);
    assert_eq!(decided[0].detail()["reviewer"], "reviewer@example.com");
    assert_eq!(decided[0].detail()["action"], "reconcile");
}

/// DLQ 2: the same decision twice is the first one; a different one on a
/// decided record is a conflict and changes nothing.
async fn duplicate_and_conflicting_decisions(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let (job, record) = parked_job(&db, &p.owner, "d1", ParkedStage::PollingExhausted).await;
    let (first, created) = t
        .decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    assert!(created);
    // Another reviewer, another wording: the same decision.
    let (second, created) = t
        .decide(
            &p.other_reviewer,
            record.id,
            &DecisionRequest {
                evidence: "same call, other words".into(),
                ..decision("resume_poll")
            },
        )
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(second.id, first.id);
    assert_eq!(second.reviewer_email.as_str(), "reviewer@example.com");
    let conflicting = DecisionRequest {
        refund: Some(true),
        release_hold: Some(false),
        ..decision("accept_failure")
    };
    let e = t
        .decide(&p.other_reviewer, record.id, &conflicting)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "DECISION_CONFLICT");
    assert_eq!(db.store().decisions(record.id).await.unwrap().len(), 1);
    let job = db.store().job(job).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Queued, "not failed by the loser");
}

/// DLQ 3: after a resume_poll decision, sixteen workers race for the
/// recovery: one owner. When its lease runs out another worker owns it;
/// the first owner's finish is refused, and the record closes only when
/// the owner's run verifies the outcome.
async fn review_then_racing_claims_make_one_owner_and_only_the_owner_finishes(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let (job, record) = parked_job(&db, &p.owner, "r1", ParkedStage::PollingExhausted).await;
    t.decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    let n = 16;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for w in 0..n {
        let (store, b) = (db.store().clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            store.claim_jobs(&format!("w{w}"), 1, 1.0).await.unwrap()
        }));
    }
    let mut claims = Vec::new();
    for task in tasks {
        claims.extend(task.await.unwrap());
    }
    assert_eq!(claims.len(), 1, "one owner");
    let first = claims.remove(0);
    assert_eq!(first.job.id, job);
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(r.state, ParkedState::Recovering);
    let d = db.store().decisions(record.id).await.unwrap().remove(0);
    let recovery = d.recovery.unwrap();
    assert_eq!(
        (recovery.state, recovery.attempts, recovery.token),
        (RecoveryState::Claimed, 1, Some(first.token))
    );
    // The owner's lease (one second) runs out; another worker takes over.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let second = claim_one(&db, job).await;
    assert!(second.token > first.token);
    let d = db.store().decisions(record.id).await.unwrap().remove(0);
    assert_eq!(d.recovery.as_ref().unwrap().attempts, 2);
    // The stale owner cannot finish it.
    let finish = |c: &Claim| Unit {
        job,
        token: c.token,
        ops: vec![Op::Finish(Finish::Failed(JobFailure::new(
            FailureCode::GenerationFailed,
            "x",
        )))],
    };
    assert!(matches!(
        db.store().apply_one(finish(&first)).await.unwrap(),
        Applied::Stale
    ));
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(r.state, ParkedState::Recovering, "still the owner's");
    // The owner finishes: the record closes with the verified outcome.
    assert!(matches!(
        db.store().apply_one(finish(&second)).await.unwrap(),
        Applied::Done(_)
    ));
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(r.state, ParkedState::Closed);
    let d = db.store().decisions(record.id).await.unwrap().remove(0);
    assert_eq!(d.recovery.unwrap().state, RecoveryState::Failed);
    let events = db.history(job).await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind() == "recovery_claimed")
            .count(),
        2
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind() == "review_closed")
            .count(),
        1
    );
}

/// DLQ 4: a new generation is never a retry of the old one: it is only
/// allowed where the provider said it failed, makes a distinct job linked
/// both ways, shows what the original may already have cost, moves the
/// charge (the person pays once) and takes its own holds when it runs.
async fn a_new_generation_is_not_a_recovery_action(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let (_, polling) = parked_job(&db, &p.owner, "n0", ParkedStage::PollingExhausted).await;
    let e = t
        .decide(&p.reviewer, polling.id, &decision("new_attempt"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "ACTION_NOT_ALLOWED");
    let before = balance(&db, &p.owner).await;
    let (job, record) = parked_job(&db, &p.owner, "n1", ParkedStage::GenerationFailed).await;
    let charged = balance(&db, &p.owner).await;
    assert!(charged < before);
    let (d, created) = t
        .decide(&p.reviewer, record.id, &decision("new_attempt"))
        .await
        .unwrap();
    assert!(created);
    assert!(d.recovery.is_none(), "not a recovery");
    let new = d.new_job_id.expect("a new job");
    assert_ne!(new, job);
    assert_eq!(d.duplicate_cost_usd, Some(usd("0.04")));
    let original = db.store().job(job).await.unwrap().unwrap();
    assert_eq!(original.status, JobStatus::Failed);
    assert_eq!(
        original.error.clone().unwrap().code.as_str(),
        "REPLACED_BY_NEW_ATTEMPT"
    );
    // An API client holding the old id follows it to the new job (the
    // failure's webhook envelope is this job object too).
    assert_eq!(original.replaced_by, Some(new));
    let object = serde_json::to_value(JobObject::new(&original, &[], None)).unwrap();
    assert_eq!(object["replaced_by"], json!(new));
    assert_eq!(object["replaces"], json!(null));
    let replacement = db.store().job(new).await.unwrap().unwrap();
    assert_eq!(replacement.status, JobStatus::Queued);
    assert_eq!(replacement.replaces, Some(job));
    let object = serde_json::to_value(JobObject::new(&replacement, &[], None)).unwrap();
    assert_eq!(object["replaces"], json!(job));
    assert_eq!(object["replaced_by"], json!(null));
    assert_eq!(replacement.request_sha256, original.request_sha256);
    assert!(replacement.idempotency_key.is_none());
    // The person pays once: the original refunded, the new one charged.
    assert_eq!(balance(&db, &p.owner).await, charged);
    assert_eq!(
        db.store().ledger_sum(p.owner.id).await.unwrap(),
        balance(&db, &p.owner).await
    );
    // Its own attempts: none yet (it holds nothing until it runs).
    assert!(db.store().attempts(new).await.unwrap().is_empty());
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(r.state, ParkedState::Closed);
    let old_events = db.history(job).await;
    let link = old_events
        .iter()
        .find(|e| e.kind() == "new_attempt")
        .unwrap();
    assert_eq!(link.detail()["job"], json!(new));
    let new_events = db.history(new).await;
    let back = new_events.iter().find(|e| e.kind() == "replaces").unwrap();
    assert_eq!(back.detail()["job"], json!(job));
}

/// Fifty reviewers send the same decision at once: one is recorded.
async fn fifty_racing_identical_decisions_make_one(db: TestDb) {
    let p = people(&db).await;
    let (job, record) = parked_job(&db, &p.owner, "f1", ParkedStage::DeliveryExhausted).await;
    let n = 50;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (t, b, reviewer) = (db.tollgate.clone(), barrier.clone(), p.reviewer.clone());
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            t.decide(&reviewer, record.id, &decision("retry_delivery"))
                .await
                .unwrap()
        }));
    }
    let mut created = 0;
    let mut ids = std::collections::HashSet::new();
    for task in tasks {
        let (d, c) = task.await.unwrap();
        created += usize::from(c);
        ids.insert(d.id);
    }
    assert_eq!((created, ids.len()), (1, 1));
    assert_eq!(db.store().decisions(record.id).await.unwrap().len(), 1);
    let events = db.history(job).await;
    assert_eq!(events.iter().filter(|e| e.kind() == "decision").count(), 1);
}

/// accept_failure ends the job failed with the accounting the reviewer
/// chose: refund or not; the hold released or kept booked at the estimate.
async fn accept_failure_records_its_accounting(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let today = Utc::now().date_naive();
    let accept = |refund, release_hold| DecisionRequest {
        refund: Some(refund),
        release_hold: Some(release_hold),
        ..decision("accept_failure")
    };
    let e = t
        .decide(
            &p.reviewer,
            parked_job(&db, &p.owner, "a0", ParkedStage::PollingExhausted)
                .await
                .1
                .id,
            &decision("accept_failure"),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "INVALID_REQUEST", "the accounting is required");

    // Refund, keep the hold booked: the call may have been paid.
    let before = balance(&db, &p.owner).await;
    let (job, record) = parked_job(&db, &p.owner, "a1", ParkedStage::SubmissionUncertain).await;
    let day_before = db.tollgate.budget(today).await.unwrap();
    t.decide(&p.reviewer, record.id, &accept(true, false))
        .await
        .unwrap();
    let j = db.store().job(job).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(j.error.unwrap().code.as_str(), "FAILED_AFTER_REVIEW");
    assert_eq!(balance(&db, &p.owner).await, before, "refunded");
    let a = db.store().attempts(job).await.unwrap().remove(0);
    assert_eq!(a.state, AttemptState::Failed);
    assert_eq!(a.cost_usd, None, "still unpriced, never 0");
    assert_eq!(a.settled_usd, Some(usd("0.04")), "booked at the estimate");
    let day = db.tollgate.budget(today).await.unwrap();
    assert_eq!(day.used_usd, day_before.used_usd.plus(usd("0.04")));
    assert_eq!(
        db.store().parked(record.id).await.unwrap().unwrap().state,
        ParkedState::Closed
    );

    // No refund, release the hold: the reviewer found nothing was spent.
    let before = balance(&db, &p.owner).await;
    let (job, record) = parked_job(&db, &p.owner, "a2", ParkedStage::SubmissionUncertain).await;
    let charged = balance(&db, &p.owner).await;
    assert!(charged < before);
    let day_before = db.tollgate.budget(today).await.unwrap();
    t.decide(&p.reviewer, record.id, &accept(false, true))
        .await
        .unwrap();
    assert_eq!(balance(&db, &p.owner).await, charged, "not refunded");
    let a = db.store().attempts(job).await.unwrap().remove(0);
    assert_eq!(a.settled_usd, Some(Usd::ZERO), "released");
    let day = db.tollgate.budget(today).await.unwrap();
    assert_eq!(day.used_usd, day_before.used_usd);
    assert_eq!(day.reserved_usd.plus(usd("0.04")), day_before.reserved_usd);
    let events = db.history(job).await;
    let d = events.iter().find(|e| e.kind() == "decision").unwrap();
    assert_eq!(
        (&d.detail()["refund"], &d.detail()["release_hold"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(events.iter().filter(|e| e.kind() == "refunded").count(), 0);
}

fn mock_model(m: &MockServer, extra: &str) -> String {
    format!(
        "[[models]]\nid = \"mock-clip\"\nkind = \"video\"\nprovider = \"http\"\nendpoint = \"{}\"\n\
         price = {{ per_generation = \"0.10\" }}\ndurations_s = [2]\ndefault = true\n\
         poll_ms = 20\nbackoff_ms = 20\nbackoff_max_ms = 50\ntimeout_ms = 2000\n{extra}\n",
        m.base
    )
}

async fn run_until(db: &TestDb, job: JobId, done: impl Fn(JobStatus) -> bool) -> JobStatus {
    db.job_when(job, Duration::from_secs(12), |j| done(j.status))
        .await
        .status
}

async fn clip(db: &TestDb, u: &User, key: &str) -> JobId {
    let body = json!({"kind": "video", "prompt": key, "model": "mock-clip", "duration_s": 2, "resolution": "720p"});
    db.tollgate
        .submit_job(u, None, Some(key), &body)
        .await
        .unwrap()
        .job
        .id
}

/// A recovery that fails (the status checks run out again) returns the
/// record to the queue in a new round, with the failure on the timeline.
async fn a_failed_recovery_returns_the_record_to_the_queue(db: TestDb) {
    let m = MockServer::start(MockConfig {
        idempotency: false,
        lookup: false,
        ..MockConfig::default()
    })
    .await;
    let db = db.with_config(&mock_model(&m, "poll_timeout_s = 1")).await;
    let p = people(&db).await;
    let t = &db.tollgate;
    // Every status check is refused as unavailable: polling runs out.
    m.script(json!({"poll": vec!["unavailable"; 400]})).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &p.owner, "fr1").await;
    assert_eq!(
        run_until(&db, job, |s| s == JobStatus::Parked).await,
        JobStatus::Parked
    );
    let record = db.store().parked_for_job(job).await.unwrap().unwrap();
    assert_eq!(record.stage, ParkedStage::PollingExhausted);
    assert!(record.polls > 0);
    t.decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    // It runs again, fails again, and is back in the queue.
    wait_for_record(&db, record.id, |r| {
        r.state == ParkedState::Open && r.round == 2
    })
    .await;
    engine.shutdown().await;
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!((r.state, r.round), (ParkedState::Open, 2));
    assert!(r.polls > record.polls, "the resumed checks are counted");
    let d = db.store().decisions(record.id).await.unwrap().remove(0);
    assert_eq!(d.recovery.unwrap().state, RecoveryState::Failed);
    let events = db.history(job).await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind() == "recovery_failed")
            .count(),
        1
    );
    // A new decision may be made in the new round.
    let (again, created) = t
        .decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(again.round, 2);
    assert_eq!(m.paid().await, 1, "nothing was sent again");
}

/// With the mock provider: the answer to the only paid call is lost, the
/// job parks; a reviewer finds the prediction, reconciles, resumes polling;
/// the job succeeds and the provider was paid once.
async fn a_lost_answer_is_reconciled_resumed_and_paid_once(db: TestDb) {
    let m = MockServer::start(MockConfig {
        idempotency: false,
        lookup: false,
        ..MockConfig::default()
    })
    .await;
    let db = db.with_config(&mock_model(&m, "")).await;
    let p = people(&db).await;
    let t = &db.tollgate;
    m.script(json!({"next": ["accept_then_drop"]})).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &p.owner, "lost1").await;
    assert_eq!(
        run_until(&db, job, |s| s == JobStatus::Parked).await,
        JobStatus::Parked
    );
    let record = db.store().parked_for_job(job).await.unwrap().unwrap();
    assert_eq!(record.stage, ParkedStage::SubmissionUncertain);
    // The reviewer looks the prediction up at the provider.
    let stats = m.stats().await;
    let prediction = stats["predictions"][0]["id"].as_str().unwrap().to_string();
    t.decide(
        &p.reviewer,
        record.id,
        &DecisionRequest {
            provider_job_id: Some(prediction.clone()),
            ..decision("reconcile")
        },
    )
    .await
    .unwrap();
    t.decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    assert_eq!(
        run_until(&db, job, |s| s.is_terminal()).await,
        JobStatus::Succeeded
    );
    engine.shutdown().await;
    assert_eq!(m.paid().await, 1, "paid once");
    let a = db.store().attempts(job).await.unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].provider_job_id.as_deref(), Some(prediction.as_str()));
    assert_eq!(a[0].state, AttemptState::Succeeded);
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(r.state, ParkedState::Closed);
    let decisions = db.store().decisions(record.id).await.unwrap();
    assert_eq!(decisions.len(), 2);
    assert_eq!(
        decisions[1].recovery.as_ref().unwrap().state,
        RecoveryState::Succeeded
    );
    assert_eq!(
        balance(&db, &p.owner).await,
        Credits(100 - db.store().job(job).await.unwrap().unwrap().credits.get())
    );
}

/// `on_failure = "park"`: a generation the provider reports failed parks in
/// generation_failed (the default refunds).
async fn a_reported_failure_parks_where_the_model_says_so(db: TestDb) {
    let m = MockServer::start(MockConfig::default()).await;
    let db = db
        .with_config(&mock_model(&m, "attempts = 1\non_failure = \"park\""))
        .await;
    let p = people(&db).await;
    m.script(json!({"next": ["fail"]})).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &p.owner, "gf1").await;
    assert_eq!(
        run_until(&db, job, |s| s == JobStatus::Parked || s.is_terminal()).await,
        JobStatus::Parked
    );
    engine.shutdown().await;
    let record = db.store().parked_for_job(job).await.unwrap().unwrap();
    assert_eq!(record.stage, ParkedStage::GenerationFailed);
    assert_eq!(
        record.stage.allows(),
        [ReviewAction::AcceptFailure, ReviewAction::NewAttempt]
    );
    assert!(record.evidence["last_error"].is_string());
    assert_eq!(record.evidence.attempt.unwrap().attempt_no, Some(1));
}

/// The role is checked by the engine too, and a decision needs evidence.
async fn only_reviewers_decide_and_evidence_is_required(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let (_, record) = parked_job(&db, &p.owner, "o1", ParkedStage::PollingExhausted).await;
    let e = t
        .decide(&p.owner, record.id, &decision("resume_poll"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "FORBIDDEN");
    let blank = DecisionRequest {
        evidence: "   ".into(),
        ..decision("resume_poll")
    };
    let e = t.decide(&p.reviewer, record.id, &blank).await.unwrap_err();
    assert_eq!(code(&e), "INVALID_REQUEST");
    let stray = DecisionRequest {
        refund: Some(true),
        ..decision("resume_poll")
    };
    let e = t.decide(&p.reviewer, record.id, &stray).await.unwrap_err();
    assert_eq!(code(&e), "INVALID_REQUEST");
    let e = t
        .decide(
            &p.reviewer,
            tollgate::model::ParkedId::new(),
            &decision("resume_poll"),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "NOT_FOUND");
    let note = t
        .note_parked(&p.reviewer, record.id, "called the provider, waiting")
        .await
        .unwrap();
    assert_eq!(note.detail()["by"], "reviewer@example.com");
    assert!(db.store().decisions(record.id).await.unwrap().is_empty());
}

/// One decision for every open record a filter matches, across pages:
/// each record gets its own decision; what its stage refuses is skipped
/// and listed, and records already decided are not matched.
async fn bulk_decides_each_matching_record_and_lists_the_skipped(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let mut polling = Vec::new();
    for i in 0..3 {
        polling.push(
            parked_job(
                &db,
                &p.owner,
                &format!("b{i}"),
                ParkedStage::PollingExhausted,
            )
            .await
            .1,
        );
    }
    let (_, uncertain) = parked_job(&db, &p.owner, "bu", ParkedStage::SubmissionUncertain).await;
    // One is decided beforehand: not open, so not matched.
    t.decide(&p.reviewer, polling[0].id, &decision("resume_poll"))
        .await
        .unwrap();
    let everything = ParkedQuery::default();
    assert_eq!(t.parked_matching(&everything).await.unwrap().len(), 3);
    let out = t
        .decide_bulk(&p.reviewer, &everything, &decision("resume_poll"))
        .await
        .unwrap();
    let decided: Vec<_> = out.decided.iter().map(|(id, _)| *id).collect();
    assert_eq!(decided.len(), 2);
    assert!(decided.contains(&polling[1].id) && decided.contains(&polling[2].id));
    assert_eq!(out.skipped.len(), 1);
    assert_eq!(out.skipped[0].0, uncertain.id);
    assert!(
        out.skipped[0].1.contains("not allowed"),
        "{:?}",
        out.skipped
    );
    // Each got a decision of its own.
    let ids: std::collections::HashSet<_> = out.decided.iter().map(|(_, d)| d.id).collect();
    assert_eq!(ids.len(), 2);
    for r in &polling {
        assert_eq!(db.store().decisions(r.id).await.unwrap().len(), 1);
    }
    assert!(db.store().decisions(uncertain.id).await.unwrap().is_empty());
    // A user cannot decide in bulk.
    let e = t
        .decide_bulk(&p.owner, &everything, &decision("resume_poll"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "FORBIDDEN");
}

mod http {
    //! The API over HTTP: every action on every stage, allowed and refused;
    //! the reviewer recorded is the caller; roles and bad input.
    use super::*;
    use tollgate_testkit::TestDb;

    tollgate_testkit::both_backends!(every_action_on_every_stage_over_http);

    fn body(action: ReviewAction) -> serde_json::Value {
        let mut b =
            json!({"action": action.as_str(), "evidence": "seen on the provider's dashboard"});
        match action {
            ReviewAction::Reconcile => b["provider_job_id"] = json!("pred_from_support"),
            ReviewAction::AcceptFailure => {
                b["refund"] = json!(true);
                b["release_hold"] = json!(false);
            }
            _ => {}
        }
        b
    }

    async fn every_action_on_every_stage_over_http(db: TestDb) {
        let p = people(&db).await;
        let t = &db.tollgate;
        let base = db.serve_api().await;
        let http = reqwest::Client::new();
        let (_, reviewer) = t.create_api_token(&p.reviewer, "r").await.unwrap();
        let (_, admin) = t.create_api_token(&p.other_reviewer, "a").await.unwrap();
        let (_, owner) = t.create_api_token(&p.owner, "o").await.unwrap();
        let post = |path: String, token: String, b: serde_json::Value| {
            let http = http.clone();
            let url = format!("{base}{path}");
            async move {
                let r = http
                    .post(url)
                    .bearer_auth(token)
                    .json(&b)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                (status, r.json::<serde_json::Value>().await.unwrap())
            }
        };
        let mut n = 0;
        for stage in ParkedStage::ALL {
            for action in ReviewAction::ALL {
                n += 1;
                let (_, record) = parked_job(&db, &p.owner, &format!("h{n}"), stage).await;
                let path = format!("/v1/parked/{}/decisions", record.id);
                let (status, v) = post(path.clone(), reviewer.clone(), body(action)).await;
                if stage.allows().contains(&action) {
                    assert_eq!(status, 201, "{stage:?} {action:?}: {v}");
                    assert_eq!(v["action"], action.as_str());
                    assert_eq!(v["reviewer"], "reviewer@example.com", "the caller");
                    // The same again, by another reviewer: the first one.
                    let (again, w) = post(path, admin.clone(), body(action)).await;
                    assert_eq!(again, 200, "{w}");
                    assert_eq!(w["id"], v["id"]);
                    assert_eq!(w["reviewer"], "reviewer@example.com");
                } else {
                    assert_eq!(status, 422, "{stage:?} {action:?}: {v}");
                    assert_eq!(v["error"]["code"], "ACTION_NOT_ALLOWED");
                }
            }
        }
        // A conflicting decision on a decided record.
        let (_, record) = parked_job(&db, &p.owner, "hc", ParkedStage::PollingExhausted).await;
        let path = format!("/v1/parked/{}/decisions", record.id);
        assert_eq!(
            post(
                path.clone(),
                reviewer.clone(),
                body(ReviewAction::ResumePoll)
            )
            .await
            .0,
            201
        );
        let (status, v) = post(
            path.clone(),
            admin.clone(),
            body(ReviewAction::AcceptFailure),
        )
        .await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (409, Some("DECISION_CONFLICT"))
        );

        // Roles, and bad input, on a fresh record.
        let (_, record) = parked_job(&db, &p.owner, "hr", ParkedStage::PollingExhausted).await;
        let path = format!("/v1/parked/{}/decisions", record.id);
        let (status, _) = post(path.clone(), owner.clone(), body(ReviewAction::ResumePoll)).await;
        assert_eq!(status, 403, "a user is not a reviewer");
        let r = http
            .post(format!("{base}{path}"))
            .json(&body(ReviewAction::ResumePoll))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        for bad in [
            json!({"action": "resume_poll"}),
            json!({"action": "resume_poll", "evidence": ""}),
            json!({"action": "resume_poll", "evidence": "x", "reviewer": "someone@else"}),
            json!({"action": "retry", "evidence": "x"}),
            json!({"action": "resume_poll", "evidence": "x", "refund": true}),
            json!({"action": "accept_failure", "evidence": "x"}),
        ] {
            let (status, v) = post(path.clone(), reviewer.clone(), bad.clone()).await;
            assert_eq!(status, 422, "{bad}: {v}");
            assert_eq!(v["error"]["code"], "INVALID_REQUEST", "{bad}");
        }
        let (status, _) = post(
            format!("/v1/parked/{}/decisions", tollgate::model::ParkedId::new()),
            reviewer.clone(),
            body(ReviewAction::ResumePoll),
        )
        .await;
        assert_eq!(status, 404);
        let (status, _) = post(
            "/v1/parked/not-an-id/decisions".into(),
            reviewer.clone(),
            body(ReviewAction::ResumePoll),
        )
        .await;
        assert_eq!(status, 404);
        assert!(db.store().decisions(record.id).await.unwrap().is_empty());

        // Reading: the queue and one record, for reviewers only.
        let get = |path: String, token: String| {
            let http = http.clone();
            let url = format!("{base}{path}");
            async move {
                let r = http.get(url).bearer_auth(token).send().await.unwrap();
                (
                    r.status().as_u16(),
                    r.json::<serde_json::Value>().await.unwrap(),
                )
            }
        };
        let (status, one) = get(format!("/v1/parked/{}", record.id), reviewer.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(one["stage"], "polling_exhausted");
        assert_eq!(one["state"], "open");
        assert_eq!(
            one["allowed_actions"],
            json!(["resume_poll", "accept_failure"])
        );
        assert_eq!(one["exposure_usd"], "0.040000");
        assert_eq!(one["hold_usd"], "0.040000");
        assert_eq!(one["attempts"].as_array().unwrap().len(), 1);
        assert!(one["idempotency_key"].is_string());
        let (status, page) = get(
            "/v1/parked?stage=polling_exhausted&state=open".into(),
            admin.clone(),
        )
        .await;
        assert_eq!(status, 200);
        assert!(page["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == one["id"]));
        // The queue carries each record's decisions, as the record does.
        let (status, active) = get("/v1/parked?limit=100".into(), admin.clone()).await;
        assert_eq!(status, 200);
        let rows = active["data"].as_array().unwrap();
        for row in rows {
            let id = row["id"].as_str().unwrap();
            let (_, whole) = get(format!("/v1/parked/{id}"), admin.clone()).await;
            assert_eq!(row["decisions"], whole["decisions"], "{id}");
        }
        let decided = rows
            .iter()
            .filter(|r| !r["decisions"].as_array().unwrap().is_empty())
            .count();
        assert!(
            decided >= 2,
            "records with a decision in the queue: {active}"
        );
        assert_eq!(get("/v1/parked".into(), owner.clone()).await.0, 403);
        for bad in [
            "/v1/parked?stage=lost",
            "/v1/parked?state=",
            "/v1/parked?limit=0",
            "/v1/parked?cursor=zz",
            "/v1/parked?colour=red",
        ] {
            assert_eq!(get(bad.into(), reviewer.clone()).await.0, 422, "{bad}");
        }
        // A note is evidence, not a decision.
        let (status, note) = post(
            format!("/v1/parked/{}/notes", record.id),
            reviewer.clone(),
            json!({"text": "asked the provider"}),
        )
        .await;
        assert_eq!(status, 201, "{note}");
        assert_eq!(note["kind"], "note");
        assert_eq!(note["detail"]["by"], "reviewer@example.com");
        let (status, _) = post(
            format!("/v1/parked/{}/notes", record.id),
            reviewer.clone(),
            json!({"text": ""}),
        )
        .await;
        assert_eq!(status, 422);

        // /metrics: the queue by stage and state, unresolved submissions
        // (one per stage loop above), and how long reviewers took.
        let text = http
            .get(format!("{base}/metrics"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.contains("tollgate_unresolved_submissions "), "{text}");
        assert!(
            text.contains("tollgate_parked_records{stage=\"polling_exhausted\",state=\"open\"}")
        );
        assert!(text.contains("tollgate_review_latency_seconds{quantile=\"0.5\"}"));
        assert!(text.contains("tollgate_recovery_claim_conflicts "));
    }
}

// ---------------------------------------------------------------------------
// Recovery spends only what a reviewer approved, and parked work closes
// only by a decision (rule 12; issue 27). Each test asserts what the
// provider's bill shows (the mock's paid count) and what the owner sees.

/// Creates a prediction at the mock the way another client would, with
/// `behaviour` scripted for it: the prediction a reviewer finds.
async fn outside_prediction(m: &MockServer, behaviour: &str) -> String {
    m.script(json!({"next": [behaviour]})).await;
    let r: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/predictions", m.base))
        .header(
            "Idempotency-Key",
            format!("outside-{}", uuid::Uuid::new_v4()),
        )
        .json(&json!({"model": "mock-clip", "input": {}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["id"].as_str().unwrap().to_string()
}

async fn wait_for_record(
    db: &TestDb,
    record: tollgate::model::ParkedId,
    done: impl Fn(&Parked) -> bool,
) -> Parked {
    wait_until(
        &format!("record {record}"),
        Duration::from_secs(10),
        async || {
            let r = db.store().parked(record).await.unwrap().unwrap();
            done(&r).then_some(r)
        },
    )
    .await
}

/// The job's owner's view of its timeline, as one string.
async fn owner_timeline(db: &TestDb, owner: &User, job: JobId) -> String {
    serde_json::to_string(&db.tollgate.job_events(owner, job).await.unwrap()).unwrap()
}

/// Issue 27, 1: an approved status check learns the generation failed and
/// parks in generation_failed; the model's remaining attempts are never
/// spent without a reviewer's new_attempt.
async fn a_resumed_poll_that_finds_a_failure_parks_and_pays_for_nothing_new(db: TestDb) {
    let m = MockServer::start(MockConfig {
        idempotency: false,
        lookup: false,
        ..MockConfig::default()
    })
    .await;
    let db = db
        .with_config(&mock_model(&m, "attempts = 3\non_uncertain = \"park\""))
        .await;
    let p = people(&db).await;
    let t = &db.tollgate;
    m.script(json!({"next": ["accept_then_drop"]})).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &p.owner, "rf1").await;
    run_until(&db, job, |s| s == JobStatus::Parked).await;
    let record = db.store().parked_for_job(job).await.unwrap().unwrap();
    assert_eq!(record.stage, ParkedStage::SubmissionUncertain);
    let failed = outside_prediction(&m, "fail").await;
    assert_eq!(m.paid().await, 2, "the job's lost call and the one found");
    t.decide(
        &p.reviewer,
        record.id,
        &DecisionRequest {
            provider_job_id: Some(failed.clone()),
            ..decision("reconcile")
        },
    )
    .await
    .unwrap();
    t.decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    let r = wait_for_record(&db, record.id, |r| {
        r.state == ParkedState::Open && r.round == 3
    })
    .await;
    engine.shutdown().await;
    assert_eq!(m.paid().await, 2, "nothing new was paid for");
    assert_eq!(r.stage, ParkedStage::GenerationFailed);
    assert_eq!(
        r.stage.allows(),
        [ReviewAction::AcceptFailure, ReviewAction::NewAttempt]
    );
    assert_eq!(r.evidence["error_class"], "failed", "{}", r.evidence);
    assert!(r.evidence["last_error"].is_string());
    // The failed prediction was quoted: its cost is booked, not held.
    assert_eq!(r.exposure_usd, usd("0.10"));
    let j = db.store().job(job).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Parked);
    let attempts = db.store().attempts(job).await.unwrap();
    assert_eq!(attempts.len(), 1, "one attempt, no new one: {attempts:?}");
    assert_eq!(attempts[0].state, AttemptState::Failed);
    assert_eq!(
        attempts[0].provider_job_id.as_deref(),
        Some(failed.as_str())
    );
    let decisions = db.store().decisions(record.id).await.unwrap();
    assert_eq!(
        decisions[1].recovery.as_ref().unwrap().state,
        RecoveryState::Failed
    );
    assert_eq!(
        balance(&db, &p.owner).await,
        Credits(100 - j.credits.get()),
        "still charged"
    );

    // Only a new_attempt spends again: a linked job, its own reservation,
    // the possible duplicate cost shown.
    let (d, _) = t
        .decide(&p.reviewer, r.id, &decision("new_attempt"))
        .await
        .unwrap();
    assert_eq!(d.duplicate_cost_usd, Some(usd("0.10")), "{d:?}");
    let replacement = d.new_job_id.unwrap();
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    run_until(&db, replacement, |s| s.is_terminal()).await;
    engine.shutdown().await;
    assert_eq!(m.paid().await, 3, "the approved new attempt, once");
    let new = db.store().job(replacement).await.unwrap().unwrap();
    assert_eq!(new.status, JobStatus::Succeeded);
    assert_eq!(new.replaces, Some(job));
    assert_eq!(
        balance(&db, &p.owner).await,
        Credits(100 - new.credits.get()),
        "paid once"
    );
}

/// Issue 27, 2: the owner's cancel refunds them, but the record stays open
/// with its stage and its hold until a reviewer's decision closes it.
async fn an_owners_cancel_refunds_but_the_record_and_its_hold_wait_for_a_decision(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let today = Utc::now().date_naive();
    for (key, canceller) in [("c1", &p.owner), ("c2", &p.other_reviewer)] {
        let (job, record) = parked_job(&db, &p.owner, key, ParkedStage::SubmissionUncertain).await;
        let day_before = t.budget(today).await.unwrap();
        let cancelled = t.cancel_job(canceller, job).await.unwrap();
        assert_eq!(cancelled.status, JobStatus::Cancelled);
        assert_eq!(
            balance(&db, &p.owner).await,
            Credits(100),
            "refunded at once"
        );
        let r = db.store().parked(record.id).await.unwrap().unwrap();
        assert_eq!(
            (r.state, r.stage, r.round),
            (ParkedState::Open, record.stage, 1)
        );
        assert_eq!(r.hold_usd, Some(usd("0.04")), "the hold stays");
        let day = t.budget(today).await.unwrap();
        assert_eq!(
            (day.used_usd, day.reserved_usd),
            (day_before.used_usd, day_before.reserved_usd)
        );
        assert_eq!(db.store().decisions(record.id).await.unwrap().len(), 0);
        let timeline = owner_timeline(&db, &p.owner, job).await;
        assert!(timeline.contains("cancelled_while_parked"), "{timeline}");
        assert!(!timeline.contains("review_closed"), "{timeline}");
        // Nothing can run again; the money can still be settled.
        assert_eq!(
            r.stage.allows_for(r.job_status),
            [ReviewAction::Reconcile, ReviewAction::AcceptFailure]
        );
        let e = t
            .decide(
                &p.reviewer,
                record.id,
                &DecisionRequest {
                    refund: Some(false),
                    release_hold: Some(false),
                    ..decision("accept_failure")
                },
            )
            .await
            .unwrap_err();
        assert_eq!(code(&e), "INVALID_REQUEST", "the cancel already refunded");
        // The reviewer finds the prediction, then accepts the failure with
        // the hold kept: the estimate is booked as spent, once.
        t.decide(
            &p.reviewer,
            record.id,
            &DecisionRequest {
                provider_job_id: Some(format!("pred_{key}")),
                ..decision("reconcile")
            },
        )
        .await
        .unwrap();
        let e = t
            .decide(&p.reviewer, record.id, &decision("resume_poll"))
            .await
            .unwrap_err();
        assert_eq!(code(&e), "ACTION_NOT_ALLOWED", "the job is gone: {e}");
        t.decide(
            &p.reviewer,
            record.id,
            &DecisionRequest {
                refund: Some(true),
                release_hold: Some(false),
                ..decision("accept_failure")
            },
        )
        .await
        .unwrap();
        let r = db.store().parked(record.id).await.unwrap().unwrap();
        assert_eq!(r.state, ParkedState::Closed);
        assert_eq!(r.hold_usd, None);
        let day = t.budget(today).await.unwrap();
        assert_eq!(day.used_usd, day_before.used_usd.plus(usd("0.04")));
        assert_eq!(day.reserved_usd.plus(usd("0.04")), day_before.reserved_usd);
        let a = db.store().attempts(job).await.unwrap().remove(0);
        assert_eq!(
            (a.state, a.cost_usd),
            (AttemptState::Failed, None),
            "unpriced, never 0"
        );
        let events = db.history(job).await;
        assert_eq!(events.iter().filter(|e| e.kind() == "refunded").count(), 1);
        assert_eq!(
            events
                .iter()
                .filter(|e| e.kind() == "review_closed")
                .count(),
            1
        );
        assert_eq!(balance(&db, &p.owner).await, Credits(100), "refunded once");
        assert_eq!(
            db.store().job(job).await.unwrap().unwrap().status,
            JobStatus::Cancelled
        );
    }
}

/// Found by the chaos run (issue 31): an owner cancels while the request to
/// a provider that does not honour keys is unanswered. Whether it was paid
/// is unknown and nothing will run the job again, so the cancel parks the
/// attempt for a reviewer: the owner is refunded, the hold stays with the
/// record, and the late end of the call changes none of it.
async fn a_cancel_while_the_call_is_unanswered_parks_it_for_a_reviewer(db: TestDb) {
    let m = MockServer::start(MockConfig {
        idempotency: false,
        lookup: false,
        ..MockConfig::default()
    })
    .await;
    let db = db.with_config(&mock_model(&m, "")).await;
    let p = people(&db).await;
    let t = &db.tollgate;
    let today = Utc::now().date_naive();
    m.script(json!({"next": ["hang"]})).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &p.owner, "in-flight").await;
    tollgate_testkit::wait_until(
        "the call is in flight",
        Duration::from_secs(10),
        async || {
            let a = db.store().attempts(job).await.unwrap();
            a.iter()
                .any(|a| a.state == AttemptState::Submitting)
                .then_some(())
        },
    )
    .await;
    let cancelled = t.cancel_job(&p.owner, job).await.unwrap();
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    assert_eq!(
        balance(&db, &p.owner).await,
        Credits(100),
        "refunded at once"
    );
    // The hung request runs into its timeout (2 s) after the cancel.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    engine.shutdown().await;
    let record = db
        .store()
        .parked_for_job(job)
        .await
        .unwrap()
        .expect("a record");
    assert_eq!(
        (record.stage, record.state, record.job_status),
        (
            ParkedStage::SubmissionUncertain,
            ParkedState::Open,
            JobStatus::Cancelled
        )
    );
    assert_eq!(record.hold_usd, Some(usd("0.10")), "the hold stays");
    assert_eq!(t.budget(today).await.unwrap().reserved_usd, usd("0.10"));
    assert_eq!(
        record.stage.allows_for(record.job_status),
        [ReviewAction::Reconcile, ReviewAction::AcceptFailure]
    );
    assert_eq!(m.paid().await, 0, "nothing was sent again");
    // The reviewer settles it: nothing was made, the hold is released.
    t.decide(
        &p.reviewer,
        record.id,
        &DecisionRequest {
            refund: Some(true),
            release_hold: Some(true),
            ..decision("accept_failure")
        },
    )
    .await
    .unwrap();
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(r.state, ParkedState::Closed);
    let day = t.budget(today).await.unwrap();
    assert_eq!((day.used_usd, day.reserved_usd), (Usd::ZERO, Usd::ZERO));
    assert_eq!(balance(&db, &p.owner).await, Credits(100), "refunded once");
}

/// A cancel that arrives while a run's unit is writing its first call down
/// waits for the unit and parks the call it wrote: one open
/// submission_uncertain record keeping its hold, never a cancelled job whose
/// call is left `submitting` with nobody to look (the chaos run found that
/// once). PostgreSQL only: SQLite has one writer, so a unit and a cancel
/// never overlap there. Deterministic: a lock the test holds on the job's
/// row queues the unit, then the cancel, behind it, and is let go.
#[tokio::test]
async fn postgres_a_cancel_behind_a_unit_parks_the_call_the_unit_wrote() {
    let db = TestDb::postgres().await;
    let p = people(&db).await;
    let body = json!({"kind": "video", "prompt": "raced", "duration_s": 2, "resolution": "720p"});
    let t = &db.tollgate;
    let job = t.submit_job(&p.owner, None, Some("raced"), &body).await;
    let job = job.unwrap().job.id;
    let claim = claim_one(&db, job).await;
    let watcher = sqlx::PgPool::connect(&db.url).await.unwrap();
    let mut gate = watcher.begin().await.unwrap();
    sqlx::query("SELECT id FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(job.0)
        .fetch_one(&mut *gate)
        .await
        .unwrap();
    // How many of the store's statements wait on a lock, seen from outside.
    let waiting = async |n: i64| {
        let sql = "SELECT count(*) FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
        wait_until(
            &format!("{n} waiting on the job's row"),
            Duration::from_secs(10),
            async || {
                let now: i64 = sqlx::query_scalar(sql).fetch_one(&watcher).await.unwrap();
                (now >= n).then_some(())
            },
        )
        .await
    };
    let (attempt, op) = first_call(job, "0.04");
    let unit = tokio::spawn({
        let t = t.clone();
        let ops = vec![op];
        async move {
            t.store()
                .apply_one(Unit {
                    job,
                    token: claim.token,
                    ops,
                })
                .await
        }
    });
    waiting(1).await;
    let cancel = tokio::spawn({
        let (t, owner) = (t.clone(), p.owner.clone());
        async move { t.cancel_job(&owner, job).await }
    });
    waiting(2).await;
    gate.commit().await.unwrap();
    let applied = unit.await.unwrap().unwrap();
    assert!(matches!(applied, Applied::Done(_)), "{applied:?}");
    let cancelled = cancel.await.unwrap().unwrap();
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    let record = db.store().parked_for_job(job).await.unwrap();
    let record = record.expect("the call the unit wrote is parked");
    assert_eq!(
        (record.stage, record.state, record.attempt_id),
        (
            ParkedStage::SubmissionUncertain,
            ParkedState::Open,
            Some(attempt)
        )
    );
    assert_eq!(record.hold_usd, Some(usd("0.04")), "the hold stays");
    let today = t.budget(Utc::now().date_naive()).await.unwrap();
    assert_eq!(today.reserved_usd, usd("0.04"));
}

/// A cancel after a recovery was approved (the job queued for it) ends that
/// recovery and opens the record again for a decision.
async fn a_cancel_during_an_approved_recovery_reopens_the_record(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let (job, record) = parked_job(&db, &p.owner, "cr1", ParkedStage::PollingExhausted).await;
    t.decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    t.cancel_job(&p.owner, job).await.unwrap();
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!((r.state, r.round), (ParkedState::Open, 2));
    assert_eq!(r.hold_usd, Some(usd("0.04")));
    let d = db.store().decisions(record.id).await.unwrap().remove(0);
    assert_eq!(d.recovery.unwrap().state, RecoveryState::Failed);
    assert_eq!(
        r.stage.allows_for(r.job_status),
        [ReviewAction::AcceptFailure]
    );
    t.decide(
        &p.reviewer,
        record.id,
        &DecisionRequest {
            refund: Some(true),
            release_hold: Some(true),
            ..decision("accept_failure")
        },
    )
    .await
    .unwrap();
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(r.state, ParkedState::Closed);
    let a = db.store().attempts(job).await.unwrap().remove(0);
    assert_eq!(a.settled_usd, Some(Usd::ZERO), "released by the decision");
}

/// A parked clip of `mock-clip` whose one paid call's answer was lost.
async fn lost_answer(db: &TestDb, m: &MockServer, owner: &User, key: &str) -> (JobId, Parked) {
    m.script(json!({"next": ["accept_then_drop"]})).await;
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(db, owner, key).await;
    run_until(db, job, |s| s == JobStatus::Parked).await;
    engine.shutdown().await;
    let record = db.store().parked_for_job(job).await.unwrap().unwrap();
    assert_eq!(record.stage, ParkedStage::SubmissionUncertain);
    (job, record)
}

/// Issue 27, 7: a reconcile is checked with the provider: an id it does
/// not know is refused, so the real prediction can still be attached.
async fn a_reconcile_onto_an_unknown_prediction_is_refused(db: TestDb) {
    let m = MockServer::start(MockConfig {
        idempotency: false,
        lookup: false,
        ..MockConfig::default()
    })
    .await;
    let db = db.with_config(&mock_model(&m, "")).await;
    let p = people(&db).await;
    let t = &db.tollgate;
    let (job, record) = lost_answer(&db, &m, &p.owner, "u1").await;
    let reconcile = |id: &str| DecisionRequest {
        provider_job_id: Some(id.into()),
        ..decision("reconcile")
    };
    let e = t
        .decide(&p.reviewer, record.id, &reconcile("pred_doesnotexist"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "UNKNOWN_PROVIDER_JOB", "{e}");
    for bad in [".", "..", "a/b", "pred 1"] {
        let e = t
            .decide(&p.reviewer, record.id, &reconcile(bad))
            .await
            .unwrap_err();
        assert_eq!(code(&e), "INVALID_REQUEST", "{bad}: {e}");
    }
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(
        (r.state, r.stage, r.round),
        (ParkedState::Open, ParkedStage::SubmissionUncertain, 1)
    );
    assert_eq!(
        db.store().decisions(record.id).await.unwrap().len(),
        0,
        "nothing recorded"
    );
    // The real one is accepted, and what the provider said is evidence.
    let real = m.stats().await["predictions"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    t.decide(&p.reviewer, record.id, &reconcile(&real))
        .await
        .unwrap();
    let r = db.store().parked(record.id).await.unwrap().unwrap();
    assert_eq!(r.stage, ParkedStage::PollingExhausted);
    assert!(
        r.evidence["reconcile_check"]
            .as_str()
            .unwrap()
            .contains("succeeded"),
        "{}",
        r.evidence
    );
    assert_eq!(m.paid().await, 1);
    assert_eq!(
        db.store().job(job).await.unwrap().unwrap().status,
        JobStatus::Parked
    );
}

/// Issue 27, 7: a resumed poll the provider answers "no such prediction"
/// returns the record at once to submission_uncertain, its wrong id
/// forgotten, where the right one can be attached.
async fn a_resumed_poll_the_provider_answers_not_found_can_be_reconciled_again(db: TestDb) {
    let m = MockServer::start(MockConfig {
        idempotency: false,
        lookup: false,
        ..MockConfig::default()
    })
    .await;
    let db = db
        .with_config(&mock_model(&m, "poll_timeout_s = 600"))
        .await;
    let p = people(&db).await;
    let t = &db.tollgate;
    let (job, record) = lost_answer(&db, &m, &p.owner, "nf1").await;
    let real = m.stats().await["predictions"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let reconcile = |id: &str| DecisionRequest {
        provider_job_id: Some(id.into()),
        ..decision("reconcile")
    };
    t.decide(&p.reviewer, record.id, &reconcile(&real))
        .await
        .unwrap();
    // The provider forgets it (or it was the wrong one all along).
    m.script(json!({"poll": ["not_found"]})).await;
    t.decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let r = wait_for_record(&db, record.id, |r| {
        r.state == ParkedState::Open && r.round == 3
    })
    .await;
    assert_eq!(
        r.stage,
        ParkedStage::SubmissionUncertain,
        "at once, not after 600 s"
    );
    assert_eq!(r.provider_job_id, None);
    assert_eq!(r.evidence["unknown_provider_job_id"], real.as_str());
    let a = db.store().attempts(job).await.unwrap().remove(0);
    assert_eq!(
        (a.state, a.provider_job_id),
        (AttemptState::Submitting, None)
    );
    // Reconciled again, resumed: it succeeds, paid once.
    t.decide(&p.reviewer, record.id, &reconcile(&real))
        .await
        .unwrap();
    t.decide(&p.reviewer, record.id, &decision("resume_poll"))
        .await
        .unwrap();
    assert_eq!(
        run_until(&db, job, |s| s.is_terminal()).await,
        JobStatus::Succeeded
    );
    engine.shutdown().await;
    assert_eq!(m.paid().await, 1);
}

/// Issue 27, 5: the owner's views say what happened, never who on the
/// staff did it.
async fn the_owner_never_sees_who_decided(db: TestDb) {
    let m = MockServer::start(MockConfig {
        idempotency: false,
        lookup: false,
        ..MockConfig::default()
    })
    .await;
    let db = db.with_config(&mock_model(&m, "")).await;
    let p = people(&db).await;
    let t = &db.tollgate;
    let (job, record) = lost_answer(&db, &m, &p.owner, "w1").await;
    let real = m.stats().await["predictions"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    t.decide(
        &p.reviewer,
        record.id,
        &DecisionRequest {
            provider_job_id: Some(real),
            ..decision("reconcile")
        },
    )
    .await
    .unwrap();
    t.note_parked(&p.reviewer, record.id, "called the provider")
        .await
        .unwrap();
    let owner_records = serde_json::to_string(&t.parked_of_job(job).await.unwrap()).unwrap();
    assert!(
        !owner_records.contains("reviewer@example.com"),
        "{owner_records}"
    );
    let timeline = owner_timeline(&db, &p.owner, job).await;
    assert!(!timeline.contains("reviewer@example.com"), "{timeline}");
    assert!(
        timeline.contains("reconcile"),
        "what happened is there: {timeline}"
    );
}

/// Issue 27, 6: our own object store failing is tried a bounded number of
/// times, then parks in delivery_exhausted; retry_delivery fetches the
/// output again, and the provider is never asked to generate again.
async fn a_store_that_will_not_keep_the_output_parks_it_for_delivery(db: TestDb) {
    let m = MockServer::start(MockConfig::default()).await;
    let db = db.with_config(&mock_model(&m, "")).await;
    let p = people(&db).await;
    let t = &db.tollgate;
    // A file where the outputs' folder belongs: every put fails.
    let objects = db.dir.join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("outputs"), b"in the way").unwrap();
    let engine = tollgate::engine::start(db.tollgate.clone(), 4);
    let job = clip(&db, &p.owner, "st1").await;
    run_until(&db, job, |s| s == JobStatus::Parked).await;
    let record = db.store().parked_for_job(job).await.unwrap().unwrap();
    assert_eq!(record.stage, ParkedStage::DeliveryExhausted);
    assert_eq!(record.deliveries, 4, "bounded");
    assert!(
        record.evidence.reason.contains("object store"),
        "{}",
        record.evidence
    );
    assert_eq!(m.paid().await, 1);
    let a = db.store().attempts(job).await.unwrap().remove(0);
    assert_eq!(
        a.state,
        AttemptState::Succeeded,
        "it succeeded at the provider"
    );
    // The store recovers; a reviewer retries the delivery.
    std::fs::remove_file(objects.join("outputs")).unwrap();
    t.decide(&p.reviewer, record.id, &decision("retry_delivery"))
        .await
        .unwrap();
    assert_eq!(
        run_until(&db, job, |s| s.is_terminal()).await,
        JobStatus::Succeeded
    );
    engine.shutdown().await;
    assert_eq!(m.paid().await, 1, "never generated again");
    assert_eq!(db.store().attempts(job).await.unwrap().len(), 1);
}

/// Rule 12 over every recovery a worker carries out and every answer the
/// provider can give: no paid call is made that the decision did not name,
/// and the job ends, or parks where a person can act on what was learned.
async fn a_recovery_does_exactly_the_action_decided(db: TestDb) {
    use ParkedStage::*;
    let case =
        |name, action, parked_in, behaviour, polls: Vec<&'static str>, latency_s, status, parks| {
            RecoveryCase {
                name,
                action,
                parked_in,
                behaviour,
                polls,
                latency_s,
                status,
                parks,
            }
        };
    let (waits, done) = (JobStatus::Parked, JobStatus::Succeeded);
    let cases = [
        case(
            "poll-succeeded",
            "resume_poll",
            PollingExhausted,
            "ok",
            vec![],
            0,
            done,
            None,
        ),
        case(
            "poll-failed",
            "resume_poll",
            PollingExhausted,
            "fail",
            vec![],
            0,
            waits,
            Some(GenerationFailed),
        ),
        case(
            "poll-refused",
            "resume_poll",
            PollingExhausted,
            "refuse",
            vec![],
            0,
            waits,
            Some(GenerationFailed),
        ),
        case(
            "poll-running",
            "resume_poll",
            PollingExhausted,
            "ok",
            vec![],
            600,
            waits,
            Some(PollingExhausted),
        ),
        case(
            "poll-unreachable",
            "resume_poll",
            PollingExhausted,
            "ok",
            vec!["unavailable"; 400],
            0,
            waits,
            Some(PollingExhausted),
        ),
        case(
            "poll-not-found",
            "resume_poll",
            PollingExhausted,
            "ok",
            vec!["not_found"],
            0,
            waits,
            Some(SubmissionUncertain),
        ),
        case(
            "fetch-succeeded",
            "retry_delivery",
            DeliveryExhausted,
            "ok",
            vec![],
            0,
            done,
            None,
        ),
        case(
            "fetch-failed",
            "retry_delivery",
            DeliveryExhausted,
            "fail",
            vec![],
            0,
            waits,
            Some(DeliveryExhausted),
        ),
        case(
            "fetch-unreachable",
            "retry_delivery",
            DeliveryExhausted,
            "ok",
            vec!["unavailable"; 400],
            0,
            waits,
            Some(DeliveryExhausted),
        ),
    ];
    let mut mocks = Vec::new();
    let mut toml = String::new();
    for (i, c) in cases.iter().enumerate() {
        let m = MockServer::start(MockConfig {
            idempotency: false,
            lookup: false,
            latency: Duration::from_secs(c.latency_s),
            ..MockConfig::default()
        })
        .await;
        toml += &format!(
            "[[models]]\nid = \"mock-{i}\"\nkind = \"video\"\nprovider = \"http\"\nendpoint = \"{}\"\n\
             price = {{ per_generation = \"0.10\" }}\ndurations_s = [2]\ndefault = {}\nattempts = 3\n\
             poll_ms = 20\nbackoff_ms = 20\nbackoff_max_ms = 50\ntimeout_ms = 2000\npoll_timeout_s = 1\n\n",
            m.base,
            i == 0
        );
        mocks.push(m);
    }
    let db = db.with_config(&toml).await;
    let p = people(&db).await;
    let t = &db.tollgate;
    // Every record parked first (claimed by the test), then the workers.
    let mut parked = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let m = &mocks[i];
        let prediction = outside_prediction(m, c.behaviour).await;
        parked.push(
            parked_on(
                &db,
                &p.owner,
                c.name,
                &format!("mock-{i}"),
                m,
                c.parked_in,
                &prediction,
            )
            .await,
        );
    }
    let engine = tollgate::engine::start(db.tollgate.clone(), 8);
    for (i, c) in cases.into_iter().enumerate() {
        let RecoveryCase {
            name,
            action,
            polls,
            status,
            parks,
            ..
        } = c;
        let m = &mocks[i];
        let (job, record) = parked[i].clone();
        if !polls.is_empty() {
            m.script(json!({"poll": polls})).await;
        }
        let paid = m.paid().await;
        t.decide(&p.reviewer, record.id, &decision(action))
            .await
            .unwrap();
        let after = run_until(&db, job, |s| {
            s != JobStatus::Queued && s != JobStatus::Running
        })
        .await;
        assert_eq!(after, status, "{name}");
        assert_eq!(
            m.paid().await,
            paid,
            "{name}: nothing paid that {action} did not name"
        );
        let r = db.store().parked(record.id).await.unwrap().unwrap();
        match parks {
            Some(stage) => {
                assert_eq!(
                    (r.state, r.stage, r.round),
                    (ParkedState::Open, stage, 2),
                    "{name}: {}",
                    r.evidence
                );
            }
            None => assert_eq!(r.state, ParkedState::Closed, "{name}"),
        }
        let generated = db
            .store()
            .attempts(job)
            .await
            .unwrap()
            .into_iter()
            .filter(|a| a.purpose == AttemptPurpose::Generate)
            .count();
        assert_eq!(generated, 1, "{name}: no new attempt");
    }
    engine.shutdown().await;
}

/// One row of the table of recoveries: the action a reviewer approves on a
/// record parked in `parked_in`, what the provider's prediction does
/// (`behaviour`, scripted status checks, latency), and what must follow.
struct RecoveryCase {
    name: &'static str,
    action: &'static str,
    parked_in: ParkedStage,
    behaviour: &'static str,
    polls: Vec<&'static str>,
    latency_s: u64,
    status: JobStatus,
    parks: Option<ParkedStage>,
}

/// A clip of `model` parked in `stage` after its one attempt was accepted
/// as `prediction` (and, for delivery_exhausted, ended as succeeded).
async fn parked_on(
    db: &TestDb,
    owner: &User,
    key: &str,
    model: &str,
    m: &MockServer,
    stage: ParkedStage,
    prediction: &str,
) -> (JobId, Parked) {
    let body = json!({"kind": "video", "prompt": key, "model": model, "duration_s": 2, "resolution": "720p"});
    let job = db
        .tollgate
        .submit_job(owner, None, Some(key), &body)
        .await
        .unwrap()
        .job;
    let claim = claim_one(db, job.id).await;
    let a = AttemptId::new();
    let mut ops = vec![
        Op::BeginAttempt(NewAttempt {
            id: a,
            job_id: job.id,
            purpose: AttemptPurpose::Generate,
            provider: "http".into(),
            endpoint: Some(m.base.clone()),
            model: model.into(),
            attempt_no: 1,
            idempotency_key: format!("{}:1", job.id),
            hold: Some(Hold {
                day: Utc::now().date_naive(),
                amount: usd("0.10"),
                default_cap: usd("50"),
            }),
            started_at: Utc::now(),
        }),
        Op::Submitted {
            attempt: a,
            provider_job_id: prediction.into(),
        },
    ];
    if stage == ParkedStage::DeliveryExhausted {
        ops.push(Op::EndAttempt {
            attempt: a,
            outcome: tollgate::store::AttemptOutcome {
                end: tollgate::model::AttemptEnd::Succeeded,
                provider_job_id: None,
                error_class: None,
                error: None,
                duration_ms: 10,
                usage: None,
                cost: None,
                finished_at: Utc::now(),
            },
        });
    }
    ops.push(Op::Park(NewParked {
        stage,
        evidence: ParkedEvidence::because("a test parks it"),
        provider: Some("http".into()),
        model: Some(model.into()),
        provider_job_id: Some(prediction.into()),
        attempt_id: Some(a),
        polls: 1,
        deliveries: 0,
    }));
    let applied = db
        .store()
        .apply_one(Unit {
            job: job.id,
            token: claim.token,
            ops,
        })
        .await
        .unwrap();
    assert!(matches!(applied, Applied::Done(_)), "{applied:?}");
    let record = db.store().parked_for_job(job.id).await.unwrap().unwrap();
    (job.id, record)
}

/// Issue 27, 4: error texts carry whole URLs (signed query strings,
/// credentials) and sometimes tokens; what is stored keeps the words, the
/// host and the path, never the secrets, whoever wrote it.
async fn evidence_is_sanitised_where_it_is_written(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let body = json!({"kind": "video", "prompt": "scrub", "duration_s": 2, "resolution": "720p"});
    let job = t
        .submit_job(&p.owner, None, Some("scrub"), &body)
        .await
        .unwrap()
        .job;
    let claim = claim_one(&db, job.id).await;
    let a = AttemptId::new();
    let signed = "https://bucket.s3.example.com/out/x.png?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIAEXAMPLE";
    let leaky =
        format!("error sending request for url ({signed}): Authorization: Bearer sekrit-token");
    let ops = vec![
        Op::BeginAttempt(NewAttempt {
            id: a,
            job_id: job.id,
            purpose: AttemptPurpose::Generate,
            provider: "http".into(),
            endpoint: Some("http://127.0.0.1:9".into()),
            model: "local-clip".into(),
            attempt_no: 1,
            idempotency_key: format!("{}:1", job.id),
            hold: None,
            started_at: Utc::now(),
        }),
        Op::EndAttempt {
            attempt: a,
            outcome: tollgate::store::AttemptOutcome {
                end: tollgate::model::AttemptEnd::Succeeded,
                provider_job_id: Some("pred_s".into()),
                error_class: None,
                error: Some(leaky.clone()),
                duration_ms: 1,
                usage: None,
                cost: None,
                finished_at: Utc::now(),
            },
        },
        Op::Park(NewParked {
            stage: ParkedStage::DeliveryExhausted,
            evidence: ParkedEvidence::because("storing failed")
                .with("last_error", leaky.clone())
                .with("nested", json!([signed])),
            provider: Some("http".into()),
            model: Some("local-clip".into()),
            provider_job_id: Some("pred_s".into()),
            attempt_id: Some(a),
            polls: 0,
            deliveries: 1,
        }),
    ];
    let applied = db
        .store()
        .apply_one(Unit {
            job: job.id,
            token: claim.token,
            ops,
        })
        .await
        .unwrap();
    assert!(matches!(applied, Applied::Done(_)), "{applied:?}");
    let record = db.store().parked_for_job(job.id).await.unwrap().unwrap();
    t.note_parked(
        &p.reviewer,
        record.id,
        &format!("the provider sent {signed}"),
    )
    .await
    .unwrap();
    let stored = serde_json::to_string(&(
        db.store().attempts(job.id).await.unwrap(),
        db.store().parked(record.id).await.unwrap(),
        db.history(job.id).await,
    ))
    .unwrap();
    for secret in ["deadbeef", "AKIAEXAMPLE", "X-Amz", "sekrit-token"] {
        assert!(!stored.contains(secret), "{secret} was stored: {stored}");
    }
    assert!(
        stored.contains("https://bucket.s3.example.com/out/x.png"),
        "the words stay: {stored}"
    );
}

/// Issue 27, 4: the queue can be ordered by what may already have been
/// spent, most first, and paged through in that order.
async fn the_queue_sorts_by_exposure_and_pages_through_it(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let mut made = Vec::new();
    for (key, hold) in [
        ("e1", "0.02"),
        ("e2", "0.30"),
        ("e3", "0.05"),
        ("e4", "0.30"),
        ("e5", "0.11"),
    ] {
        made.push((
            parked_job_holding(&db, &p.owner, key, ParkedStage::PollingExhausted, hold)
                .await
                .1
                .id,
            hold,
        ));
    }
    let mut seen = Vec::new();
    let mut pages = Vec::new();
    let mut cursor = None;
    let exposure_page = |cursor: Option<String>| {
        let t = t.clone();
        async move {
            let q = queue(ParkedQueryText {
                sort: Some("exposure".into()),
                limit: Some(2),
                cursor,
                ..Default::default()
            })
            .unwrap();
            t.parked_list(&ParkedQuery { counted: true, ..q })
                .await
                .unwrap()
        }
    };
    let last = loop {
        let page = exposure_page(cursor.clone()).await;
        // Each page says where it sits: "Showing 3–4 of 5".
        let place = page.place.unwrap();
        assert_eq!((place.before, place.total), (seen.len() as u64, 5));
        seen.extend(page.items.iter().map(|r| (r.id, r.exposure_usd)));
        pages.push(page.items.iter().map(|r| r.id).collect::<Vec<_>>());
        match page.next.clone() {
            Some(n) => cursor = Some(n),
            None => break page,
        }
    };
    // And back from the end, page by page, to the first.
    let mut back = vec![pages.last().unwrap().clone()];
    let mut prev = last.prev;
    while let Some(p) = prev {
        let page = exposure_page(Some(p)).await;
        back.push(page.items.iter().map(|r| r.id).collect());
        prev = page.prev;
    }
    back.reverse();
    assert_eq!(back, pages, "the pages back are the pages forward");
    let exposures: Vec<Usd> = seen.iter().map(|(_, e)| *e).collect();
    let expected: Vec<Usd> = ["0.30", "0.30", "0.11", "0.05", "0.02"]
        .into_iter()
        .map(usd)
        .collect();
    assert_eq!(exposures, expected, "most first, every record once");
    // Ties keep the queue's order: the older first.
    assert_eq!(seen[0].0, made[1].0);
    assert_eq!(seen[1].0, made[3].0);
    // A cursor of one order is refused by the other.
    let next = t
        .parked_list(&ParkedQuery {
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .next;
    let e = queue(ParkedQueryText {
        sort: Some("exposure".into()),
        cursor: next,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(code(&e), "INVALID_REQUEST");
    let e = queue(ParkedQueryText {
        sort: Some("price".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(code(&e), "INVALID_REQUEST");
    // An empty sort is not a sort (the pages send none for the default).
    let e = queue(ParkedQueryText {
        sort: Some(String::new()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(code(&e), "INVALID_REQUEST");
}

/// Issue 27, 3: a bulk decision shows each record's possible duplicate cost,
/// the total and today's room before it is confirmed, and starts no more
/// new attempts than the day can hold; each record decided gets its own
/// decision and new job.
async fn bulk_new_attempts_show_their_costs_and_stop_where_the_day_has_no_room(db: TestDb) {
    let p = people(&db).await;
    let t = &db.tollgate;
    let (_, a) =
        parked_job_holding(&db, &p.owner, "b1", ParkedStage::GenerationFailed, "0.04").await;
    let (_, b) =
        parked_job_holding(&db, &p.owner, "b2", ParkedStage::GenerationFailed, "0.06").await;
    let today = Utc::now().date_naive();
    let day = t.budget(today).await.unwrap();
    // Room for one new attempt, and a millionth of a dollar more.
    let each = a.job_estimated_usd;
    let cap = day
        .used_usd
        .plus(day.reserved_usd)
        .plus(each)
        .plus(usd("0.000001"));
    t.set_daily_cap(today, &cap.decimal().to_string(), Some(p.other_reviewer.id))
        .await
        .unwrap();
    let q = ParkedQuery {
        stage: Some(ParkedStage::GenerationFailed),
        ..Default::default()
    };
    let preview = t.bulk_preview(&q).await.unwrap();
    assert_eq!(preview.records.len(), 2);
    assert_eq!(preview.exposure_total, usd("0.10"));
    assert_eq!(preview.new_attempts_usd, each.plus(b.job_estimated_usd));
    assert_eq!(preview.new_attempts_fit, 1);
    let out = t
        .decide_bulk(&p.reviewer, &q, &decision("new_attempt"))
        .await
        .unwrap();
    assert_eq!(out.decided.len(), 1, "{out:?}");
    assert_eq!(out.skipped.len(), 1);
    assert!(out.skipped[0].1.contains("room"), "{:?}", out.skipped);
    let (decided, d) = &out.decided[0];
    assert_eq!(*decided, a.id, "the oldest first");
    assert!(d.new_job_id.is_some());
    assert_eq!(d.duplicate_cost_usd, Some(usd("0.04")));
    let left = db.store().parked(b.id).await.unwrap().unwrap();
    assert_eq!(left.state, ParkedState::Open, "still in the queue");
}
