//! The execution store on both backends: fenced claims (16 racing
//! claimers), leases on the database's clock, units of work (a stale one
//! writes nothing, the rest of its group commits), progress that survives a
//! resume, attempts (null is not zero; the first outcome stands) and the
//! daily breaker with one hold per paid attempt, racing at the cap's edge.

use chrono::{NaiveDate, Utc};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Barrier;
use tollgate::model::{
    AttemptEnd, AttemptId, AttemptState, CostSource, Credits, FailureCode, Happening, JobFailure,
    JobId, JobStatus, ParkedEvidence, Progress, Purpose as AttemptPurpose, Readiness, Role, Usd,
};
use tollgate::store::{
    Applied, AttemptOutcome, BudgetChange, BudgetChangeKind, Claim, Finish, Hold, NewAttempt,
    NewParked, Op, ParkedStage, Store, Unit, User,
};
use tollgate_testkit::both_backends;
use tollgate_testkit::TestDb;

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
            t.submit_job(&u, None, Some(&format!("k{i}")), &body)
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

fn unit(c: &Claim, ops: Vec<Op>) -> Unit {
    Unit {
        job: c.job.id,
        token: c.token,
        ops,
    }
}

fn attempt(job: JobId, n: i32, hold: Option<Hold>) -> NewAttempt {
    NewAttempt {
        id: AttemptId::new(),
        job_id: job,
        purpose: AttemptPurpose::Generate,
        provider: "http".into(),
        endpoint: Some("http://127.0.0.1:9".into()),
        model: "mock-edit".into(),
        attempt_no: n,
        idempotency_key: format!("{job}:{n}"),
        hold,
        started_at: Utc::now(),
    }
}

fn outcome(end: AttemptEnd, cost: Option<(&str, CostSource)>) -> AttemptOutcome {
    AttemptOutcome {
        end,
        provider_job_id: None,
        error_class: (end == AttemptEnd::Failed).then_some(tollgate::model::ErrorClass::Failed),
        error: None,
        duration_ms: 12,
        usage: None,
        cost: cost.map(|(u, s)| (usd(u), s)),
        finished_at: Utc::now(),
    }
}

async fn apply(s: &Store, u: Unit) -> Applied {
    s.apply_one(u).await.unwrap()
}

fn stale(a: &Applied) -> bool {
    matches!(a, Applied::Stale)
}

both_backends!(
    racing_claimers_take_each_job_once,
    leases_run_on_the_database_clock_and_a_stale_token_cannot_write,
    progress_survives_a_resume,
    a_stopped_node_loses_every_job_and_is_forgotten_once_it_holds_none,
    cancel_wins_over_a_running_worker,
    attempts_keep_null_costs_and_first_outcomes,
    the_breaker_holds_the_cap_one_hold_per_attempt,
    racing_paid_calls_at_the_cap_never_go_over,
    one_group_commit_admits_holds_in_order_up_to_the_cap,
    one_group_commit_applies_every_kind_of_unit,
    racing_first_holds_of_a_new_day_are_not_refused,
    a_group_commit_refuses_a_stale_unit_alone,
    a_failing_unit_does_not_sink_its_group,
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
                let got = store.claim_jobs(&format!("w{w}"), 2, 60.0).await.unwrap();
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
    // Each claim put itself on the job's timeline.
    let events = db.store().job_events(ids[0]).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.kind() == "claimed").count(), 1);
}

async fn leases_run_on_the_database_clock_and_a_stale_token_cannot_write(db: TestDb) {
    let (_, ids) = jobs(&db, 1).await;
    let s = db.store();
    let first = s.claim_jobs("a", 1, 0.4).await.unwrap().remove(0);
    // The node's heartbeat holds the job past its own lease.
    tokio::time::sleep(Duration::from_millis(250)).await;
    s.heartbeat_owner("a", 1.0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(
        s.claim_jobs("b", 1, 60.0).await.unwrap().is_empty(),
        "leased through its node"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Expired: claimable again, and the token moves on.
    let second = s.claim_jobs("b", 1, 60.0).await.unwrap().remove(0);
    assert_eq!(second.token, first.token + 1);
    // A late beat of the first node does not win the job back.
    s.heartbeat_owner("a", 60.0).await.unwrap();
    assert_eq!(
        s.job_lease(ids[0]).await.unwrap(),
        Some((Some("b".into()), second.token))
    );
    let p = Progress {
        readiness: Some(Readiness {
            region_fraction: 0.5,
            observation: None,
        }),
        ..Progress::default()
    };
    let a = attempt(ids[0], 1, None);
    for op in [
        Op::Progress(p),
        Op::BeginAttempt(a.clone()),
        Op::Submitted {
            attempt: a.id,
            provider_job_id: "pred_1".into(),
        },
        Op::EndAttempt {
            attempt: a.id,
            outcome: outcome(AttemptEnd::Succeeded, None),
        },
        Op::Finish(Finish::Failed(failed("x"))),
        Op::Park(NewParked {
            stage: ParkedStage::SubmissionUncertain,
            evidence: ParkedEvidence::because("test"),
            provider: None,
            model: None,
            provider_job_id: None,
            attempt_id: None,
            polls: 0,
            deliveries: 0,
        }),
        Op::Release,
    ] {
        let what = format!("{op:?}");
        assert!(stale(&apply(s, unit(&first, vec![op])).await), "{what}");
    }
    assert!(s.attempts(ids[0]).await.unwrap().is_empty());
    assert!(s.parked_for_job(ids[0]).await.unwrap().is_none());
    // The current holder writes.
    let done = apply(
        s,
        unit(
            &second,
            vec![Op::Finish(Finish::Succeeded {
                output_key: "outputs/x".into(),
                content_type: "image/gif".into(),
                review: None,
                lineage: None,
            })],
        ),
    )
    .await;
    let Applied::Done(Some(job)) = done else {
        panic!("{done:?}")
    };
    assert_eq!(job.status, JobStatus::Succeeded);
    assert_eq!(
        s.job_output(ids[0]).await.unwrap(),
        Some(("outputs/x".into(), "image/gif".into()))
    );
    // Terminal: nobody claims it again, and its terminal write was once.
    assert!(s.claim_jobs("c", 1, 60.0).await.unwrap().is_empty());
    assert!(stale(
        &apply(
            s,
            unit(&second, vec![Op::Finish(Finish::Failed(failed("")))])
        )
        .await
    ));
    let events = s.job_events(ids[0]).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.kind() == "succeeded").count(), 1);
    assert_eq!(events.iter().filter(|e| e.kind() == "failed").count(), 0);
}

/// Issue 32, 3: a job's lease is held through its node's. A node that
/// stops beating loses every job it ran; its row goes once it holds none.
async fn a_stopped_node_loses_every_job_and_is_forgotten_once_it_holds_none(db: TestDb) {
    let (_, ids) = jobs(&db, 3).await;
    let s = db.store();
    assert_eq!(s.claim_jobs("a", 3, 0.3).await.unwrap().len(), 3);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let taken = s.claim_jobs("b", 2, 60.0).await.unwrap();
    assert_eq!(
        taken.len(),
        2,
        "the stopped node's jobs are claimable together"
    );
    // Its row ran out long ago, but a job still runs under it: kept.
    let sql = "UPDATE node_leases SET expires_at = $1 WHERE owner = 'a'";
    let long_ago = Utc::now() - chrono::Duration::hours(2);
    assert_eq!(db.backdate(sql, long_ago, None).await, 1);
    assert_eq!(s.forget_stopped_nodes().await.unwrap(), 0);
    let last = s.claim_jobs("b", 2, 60.0).await.unwrap();
    assert_eq!(last.len(), 1);
    let mut held: Vec<_> = taken.iter().chain(&last).map(|c| c.job.id.0).collect();
    held.sort();
    let mut all: Vec<_> = ids.iter().map(|id| id.0).collect();
    all.sort();
    assert_eq!(held, all, "every job of the stopped node, once each");
    assert_eq!(s.forget_stopped_nodes().await.unwrap(), 1, "a, not b");
    assert_eq!(s.forget_stopped_nodes().await.unwrap(), 0);
    // The live node's jobs are still its own.
    assert!(s.claim_jobs("c", 3, 60.0).await.unwrap().is_empty());
}

async fn progress_survives_a_resume(db: TestDb) {
    let (_, _ids) = jobs(&db, 1).await;
    let s = db.store();
    let first = s.claim_jobs("a", 1, 0.3).await.unwrap().remove(0);
    assert_eq!(first.job.progress, Progress::default());
    let p = Progress {
        readiness: Some(Readiness {
            region_fraction: 0.25,
            observation: None,
        }),
        ..Progress::default()
    };
    let step = Op::Event(Happening::Unknown {
        kind: "step".into(),
        detail: json!({"step": "readiness"}),
    });
    assert!(matches!(
        apply(s, unit(&first, vec![Op::Progress(p.clone()), step])).await,
        Applied::Done(None)
    ));
    // The worker dies; another resumes after the lease with the progress.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = s.claim_jobs("b", 1, 60.0).await.unwrap().remove(0);
    assert_eq!(second.job.progress, p);
    let events = s.job_events(second.job.id).await.unwrap();
    let steps: Vec<_> = events.iter().filter(|e| e.kind() == "step").collect();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].detail(), json!({"step": "readiness"}));
    // Given back: queued again, and the timeline says so.
    assert!(matches!(
        apply(s, unit(&second, vec![Op::Release])).await,
        Applied::Done(None)
    ));
    let j = s.job(second.job.id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Queued);
    assert_eq!(j.progress, p);
    let events = s.job_events(j.id).await.unwrap();
    assert!(events.iter().any(|e| e.kind() == "released"));
}

async fn cancel_wins_over_a_running_worker(db: TestDb) {
    let (u, ids) = jobs(&db, 1).await;
    let s = db.store();
    let claim = s.claim_jobs("a", 1, 60.0).await.unwrap().remove(0);
    let day = Utc::now().date_naive();
    let hold = Hold {
        day,
        amount: usd("0.04"),
        default_cap: usd("50"),
    };
    let a = attempt(ids[0], 1, Some(hold));
    apply(s, unit(&claim, vec![Op::BeginAttempt(a)])).await;
    let cancelled = s.cancel_job(ids[0], Utc::now()).await.unwrap().unwrap();
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    // The run's writes are refused from now on.
    assert!(stale(
        &apply(
            s,
            unit(
                &claim,
                vec![Op::Finish(Finish::Succeeded {
                    output_key: "outputs/x".into(),
                    content_type: "image/png".into(),
                    review: None,
                    lineage: None,
                })]
            )
        )
        .await
    ));
    let balance = db.tollgate.user(u.id).await.unwrap().balance;
    assert_eq!(balance, Credits(10_000), "the cancel refunded the job");
    assert_eq!(s.ledger_sum(u.id).await.unwrap(), balance);
    assert!(!db.tollgate.refund(ids[0]).await.unwrap(), "refunded once");
    // The request was never answered: whether it was paid is unknown, so
    // the cancel parked it and its hold waits for a reviewer (issue 31's
    // chaos run found it left `submitting` with the hold booked, unseen).
    let d = s.budget_day(day, usd("50")).await.unwrap();
    assert_eq!((d.used_usd, d.reserved_usd), (Usd::ZERO, usd("0.04")));
    let record = s.parked_for_job(ids[0]).await.unwrap().expect("parked");
    assert_eq!(
        record.stage,
        tollgate::model::ParkedStage::SubmissionUncertain
    );
    assert_eq!(record.hold_usd, Some(usd("0.04")));
}

async fn attempts_keep_null_costs_and_first_outcomes(db: TestDb) {
    let (_, ids) = jobs(&db, 1).await;
    let s = db.store();
    let claim = s.claim_jobs("a", 1, 60.0).await.unwrap().remove(0);
    let (a1, a2) = (attempt(ids[0], 1, None), attempt(ids[0], 2, None));
    let begun = apply(
        s,
        unit(
            &claim,
            vec![Op::BeginAttempt(a1.clone()), Op::BeginAttempt(a2.clone())],
        ),
    )
    .await;
    assert!(matches!(begun, Applied::Done(None)), "{begun:?}");
    let dup = s
        .apply_one(unit(
            &claim,
            vec![Op::BeginAttempt(attempt(ids[0], 1, None))],
        ))
        .await;
    assert!(dup.is_err(), "(job, provider, attempt) is unique: {dup:?}");
    let mut failed = outcome(AttemptEnd::Failed, None);
    failed.provider_job_id = Some("pred_1".into());
    failed.error_class = Some(tollgate::model::ErrorClass::RateLimited);
    let mut ok = outcome(
        AttemptEnd::Succeeded,
        Some(("0.123456", CostSource::Quoted)),
    );
    ok.usage = Some(json!({"seconds": 2}));
    ok.duration_ms = 40;
    apply(
        s,
        unit(
            &claim,
            vec![
                Op::EndAttempt {
                    attempt: a1.id,
                    outcome: failed,
                },
                Op::EndAttempt {
                    attempt: a2.id,
                    outcome: ok.clone(),
                },
            ],
        ),
    )
    .await;
    // A repeated report leaves outcome and timing alone; telemetry only
    // fills in what was unknown.
    let mut again = outcome(AttemptEnd::Failed, Some(("9.99", CostSource::Quoted)));
    again.duration_ms = 999;
    let mut late_cost = outcome(AttemptEnd::Succeeded, Some(("0.05", CostSource::Quoted)));
    late_cost.usage = Some(json!({"late": true}));
    apply(
        s,
        unit(
            &claim,
            vec![
                Op::EndAttempt {
                    attempt: a2.id,
                    outcome: again,
                },
                Op::EndAttempt {
                    attempt: a1.id,
                    outcome: late_cost,
                },
            ],
        ),
    )
    .await;
    let list = s.attempts(ids[0]).await.unwrap();
    assert_eq!(list.len(), 2);
    let first = list.iter().find(|a| a.attempt_no == 1).unwrap();
    assert_eq!(first.state, AttemptState::Failed);
    assert_eq!(first.error_class.map(|c| c.as_str()), Some("rate_limited"));
    assert_eq!(first.provider_job_id.as_deref(), Some("pred_1"));
    assert_eq!(
        (first.cost_usd, first.cost_source),
        (Some(usd("0.05")), Some(CostSource::Quoted)),
        "a cost learned later fills in the unknown one"
    );
    let second = list.iter().find(|a| a.attempt_no == 2).unwrap();
    assert_eq!(second.state, AttemptState::Succeeded);
    assert_eq!(second.duration_ms, Some(40));
    assert_eq!(second.cost_usd, Some(usd("0.123456")), "a known cost stays");
    assert_eq!(second.usage, Some(json!({"seconds": 2})));

    // Unpriced stays NULL, never 0.
    let a3 = attempt(ids[0], 3, None);
    apply(
        s,
        unit(
            &claim,
            vec![
                Op::BeginAttempt(a3.clone()),
                Op::EndAttempt {
                    attempt: a3.id,
                    outcome: outcome(AttemptEnd::Succeeded, None),
                },
            ],
        ),
    )
    .await;
    let third = s.attempts(ids[0]).await.unwrap().remove(2);
    assert_eq!((third.cost_usd, third.cost_source), (None, None));
}

async fn the_breaker_holds_the_cap_one_hold_per_attempt(db: TestDb) {
    let (_, ids) = jobs(&db, 4).await;
    let s = db.store();
    let day = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap();
    let cap = usd("0.100000");
    let hold = |amount: &str| {
        Some(Hold {
            day,
            amount: usd(amount),
            default_cap: cap,
        })
    };
    let claims = s.claim_jobs("a", 4, 60.0).await.unwrap();
    let claim = |id: JobId| claims.iter().find(|c| c.job.id == id).unwrap();
    // Reading a day nobody reserved against writes nothing.
    let d = s.budget_day(day, cap).await.unwrap();
    assert_eq!((d.cap_usd, d.used_usd, d.halted), (cap, Usd::ZERO, false));
    let a1 = attempt(ids[0], 1, hold("0.04"));
    let a2 = attempt(ids[0], 2, hold("0.04"));
    let b1 = attempt(ids[1], 1, hold("0.02"));
    for (id, a) in [(ids[0], &a1), (ids[0], &a2), (ids[1], &b1)] {
        let r = apply(s, unit(claim(id), vec![Op::BeginAttempt(a.clone())])).await;
        assert!(matches!(r, Applied::Done(None)), "{r:?}");
    }
    // 0.10 reserved: not a millionth more.
    let over = apply(
        s,
        unit(
            claim(ids[2]),
            vec![Op::BeginAttempt(attempt(ids[2], 1, hold("0.000001")))],
        ),
    )
    .await;
    assert!(matches!(over, Applied::Refused), "{over:?}");
    let d = s.budget_day(day, cap).await.unwrap();
    assert_eq!((d.used_usd, d.reserved_usd), (Usd::ZERO, usd("0.10")));
    // A real cost settles below the estimate; an unknown one stays at it;
    // a refusal that created nothing settles at zero.
    let ended = [
        (
            &a1,
            outcome(AttemptEnd::Failed, Some(("0.01", CostSource::Quoted))),
        ),
        (&a2, outcome(AttemptEnd::Succeeded, None)),
        (
            &b1,
            outcome(AttemptEnd::Failed, Some(("0", CostSource::Derived))),
        ),
    ];
    for (a, o) in ended {
        let id = a.job_id;
        apply(
            s,
            unit(
                claim(id),
                vec![Op::EndAttempt {
                    attempt: a.id,
                    outcome: o,
                }],
            ),
        )
        .await;
    }
    let d = s.budget_day(day, cap).await.unwrap();
    assert_eq!((d.used_usd, d.reserved_usd), (usd("0.05"), Usd::ZERO));
    // A terminal write settles every hold left: an open attempt's at the
    // estimate (it may have been paid).
    let c1 = attempt(ids[2], 1, hold("0.03"));
    apply(s, unit(claim(ids[2]), vec![Op::BeginAttempt(c1.clone())])).await;
    apply(
        s,
        unit(claim(ids[2]), vec![Op::Finish(Finish::Failed(failed("x")))]),
    )
    .await;
    let d = s.budget_day(day, cap).await.unwrap();
    assert_eq!((d.used_usd, d.reserved_usd), (usd("0.08"), Usd::ZERO));
    let c = s.attempts(ids[2]).await.unwrap().remove(0);
    assert_eq!((c.cost_usd, c.settled_usd), (None, Some(usd("0.03"))));
    // Halted: nothing more, however small; who and why are kept.
    let halt = BudgetChange {
        kind: BudgetChangeKind::Halt,
        reason: Some("bill review".into()),
        by: None,
        at: Utc::now(),
    };
    let d = s.set_budget(day, cap, &halt).await.unwrap();
    assert_eq!(
        (d.halted, d.halted_reason.as_deref()),
        (true, Some("bill review"))
    );
    let r = apply(
        s,
        unit(
            claim(ids[3]),
            vec![Op::BeginAttempt(attempt(ids[3], 1, hold("0.000001")))],
        ),
    )
    .await;
    assert!(matches!(r, Applied::Refused));
    let resume = BudgetChange {
        kind: BudgetChangeKind::Resume,
        reason: None,
        by: None,
        at: Utc::now(),
    };
    s.set_budget(day, cap, &resume).await.unwrap();
    let raise = BudgetChange {
        kind: BudgetChangeKind::Cap(usd("5.00")),
        ..resume
    };
    let d = s.set_budget(day, cap, &raise).await.unwrap();
    assert!(!d.halted);
    assert_eq!(d.cap_usd.to_string(), "5.000000");
    let r = apply(
        s,
        unit(
            claim(ids[3]),
            vec![Op::BeginAttempt(attempt(ids[3], 1, hold("0.02")))],
        ),
    )
    .await;
    assert!(matches!(r, Applied::Done(None)));
    // The day's counters are the sums over its attempts.
    let mut used = Usd::ZERO;
    let mut reserved = Usd::ZERO;
    for id in &ids {
        for a in s.attempts(*id).await.unwrap() {
            match (a.hold_usd, a.settled_usd) {
                (Some(_), Some(settled)) => used = used.plus(settled),
                (Some(h), None) => reserved = reserved.plus(h),
                _ => {}
            }
        }
    }
    let d = s.budget_day(day, cap).await.unwrap();
    assert_eq!((d.used_usd, d.reserved_usd), (used, reserved));
}

async fn racing_paid_calls_at_the_cap_never_go_over(db: TestDb) {
    let (_, _) = jobs(&db, 100).await;
    let s = db.store();
    let claims = s.claim_jobs("a", 100, 60.0).await.unwrap();
    assert_eq!(claims.len(), 100);
    let day = Utc::now().date_naive();
    let cap = usd("0.50");
    let barrier = Arc::new(Barrier::new(claims.len()));
    let mut tasks = Vec::new();
    for c in claims {
        let (s, b) = (s.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let a = attempt(
                c.job.id,
                1,
                Some(Hold {
                    day,
                    amount: usd("0.01"),
                    default_cap: cap,
                }),
            );
            b.wait().await;
            s.apply_one(unit(&c, vec![Op::BeginAttempt(a)]))
                .await
                .unwrap()
        }));
    }
    let mut held = 0;
    for t in tasks {
        if matches!(t.await.unwrap(), Applied::Done(_)) {
            held += 1;
        }
    }
    assert_eq!(held, 50, "exactly what the cap holds");
    let d = s.budget_day(day, cap).await.unwrap();
    assert_eq!((d.used_usd, d.reserved_usd), (Usd::ZERO, cap));
}

/// Many runs' holds in one transaction (the set-based statement): the cap
/// admits them in the batch's order, exactly as one by one would, and never
/// more than it holds.
async fn one_group_commit_admits_holds_in_order_up_to_the_cap(db: TestDb) {
    let (_, _) = jobs(&db, 103).await;
    let s = db.store();
    let claims = s.claim_jobs("a", 103, 60.0).await.unwrap();
    let day = Utc::now().date_naive();
    let cap = usd("0.50");
    let hold = |amount: &str| Hold {
        day,
        amount: usd(amount),
        default_cap: cap,
    };
    // 0.30 fits; 0.30 more would pass the cap; 0.10 after it still fits;
    // then 100 holds of 0.01 of which exactly 10 fit.
    let amounts: Vec<&str> = ["0.30", "0.30", "0.10"]
        .into_iter()
        .chain(std::iter::repeat_n("0.01", 100))
        .collect();
    let units: Vec<Unit> = claims
        .iter()
        .zip(&amounts)
        .map(|(c, a)| {
            unit(
                c,
                vec![Op::BeginAttempt(attempt(c.job.id, 1, Some(hold(a))))],
            )
        })
        .collect();
    let results: Vec<Applied> = s
        .apply(&units)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let admitted: Vec<bool> = results
        .iter()
        .map(|r| match r {
            Applied::Done(_) => true,
            Applied::Refused => false,
            Applied::Stale => panic!("no unit is stale"),
        })
        .collect();
    assert_eq!(&admitted[..3], [true, false, true]);
    assert_eq!(admitted[3..].iter().filter(|a| **a).count(), 10);
    assert!(admitted[3..13].iter().all(|a| *a), "the first ten that fit");
    let d = s.budget_day(day, cap).await.unwrap();
    assert_eq!((d.used_usd, d.reserved_usd), (Usd::ZERO, cap));
    let mut attempts = 0;
    for c in &claims {
        attempts += s.attempts(c.job.id).await.unwrap().len();
    }
    assert_eq!(attempts, 12, "a refused hold writes no attempt");
}

/// One transaction with a unit of every shape a run writes (the set-based
/// statements and the one-by-one ones side by side): each comes out as it
/// would alone, with its timeline in order, and a stale one writes nothing.
async fn one_group_commit_applies_every_kind_of_unit(db: TestDb) {
    let (u, _) = jobs(&db, 6).await;
    let s = db.store();
    let c = s.claim_jobs("a", 6, 60.0).await.unwrap();
    let day = Utc::now().date_naive();
    let hold = Hold {
        day,
        amount: usd("0.10"),
        default_cap: usd("100"),
    };
    // Job 0 has an attempt waiting for its prediction id; job 2 one that
    // the provider accepted.
    let waiting = attempt(c[0].job.id, 1, Some(hold));
    let accepted = attempt(c[2].job.id, 1, Some(hold));
    apply(s, unit(&c[0], vec![Op::BeginAttempt(waiting.clone())])).await;
    apply(s, unit(&c[2], vec![Op::BeginAttempt(accepted.clone())])).await;
    apply(
        s,
        unit(
            &c[2],
            vec![Op::Submitted {
                attempt: accepted.id,
                provider_job_id: "p-2".into(),
            }],
        ),
    )
    .await;
    s.cancel_job(c[5].job.id, Utc::now()).await.unwrap();
    let progress = Progress {
        readiness: Some(Readiness {
            region_fraction: 0.5,
            observation: None,
        }),
        ..Progress::default()
    };
    let step = |name: &str| {
        Op::Event(Happening::Unknown {
            kind: "step".into(),
            detail: json!({"step": name}),
        })
    };
    let begun = attempt(c[1].job.id, 1, Some(hold));
    let units = vec![
        unit(
            &c[0],
            vec![Op::Submitted {
                attempt: waiting.id,
                provider_job_id: "p-0".into(),
            }],
        ),
        unit(
            &c[1],
            vec![
                Op::Progress(progress.clone()),
                step("readiness"),
                Op::BeginAttempt(begun.clone()),
            ],
        ),
        unit(
            &c[2],
            vec![
                Op::EndAttempt {
                    attempt: accepted.id,
                    outcome: outcome(AttemptEnd::Succeeded, Some(("0.04", CostSource::Quoted))),
                },
                step("generate"),
                step("review"),
                Op::Progress(progress.clone()),
                Op::Finish(Finish::Succeeded {
                    output_key: "outputs/x".into(),
                    content_type: "image/png".into(),
                    review: None,
                    lineage: None,
                }),
            ],
        ),
        unit(
            &c[3],
            vec![Op::Finish(Finish::Failed(JobFailure::not_ready(
                "no",
                Vec::new(),
            )))],
        ),
        unit(&c[4], vec![Op::Release]),
        unit(&c[5], vec![Op::Progress(progress.clone())]),
    ];
    let results: Vec<Applied> = s
        .apply(&units)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(matches!(results[0], Applied::Done(None)));
    assert!(matches!(results[1], Applied::Done(None)));
    let Applied::Done(Some(ended)) = &results[2] else {
        panic!("the success returns the job as stored: {:?}", results[2]);
    };
    assert_eq!(ended.status, JobStatus::Succeeded);
    assert_eq!(ended.progress, progress);
    assert!(matches!(&results[3], Applied::Done(Some(j)) if j.status == JobStatus::Failed));
    assert!(matches!(results[4], Applied::Done(None)));
    assert!(stale(&results[5]), "a cancelled job's run is stale");

    let a0 = s.attempts(c[0].job.id).await.unwrap();
    assert_eq!(
        (a0[0].state, a0[0].provider_job_id.as_deref()),
        (AttemptState::Submitted, Some("p-0"))
    );
    assert_eq!(
        s.job(c[1].job.id).await.unwrap().unwrap().progress,
        progress
    );
    assert_eq!(s.attempts(c[1].job.id).await.unwrap().len(), 1);
    let a2 = s.attempts(c[2].job.id).await.unwrap();
    assert_eq!(a2[0].state, AttemptState::Succeeded);
    assert_eq!(a2[0].settled_usd, Some(usd("0.04")));
    assert_eq!(
        s.job(c[4].job.id).await.unwrap().unwrap().status,
        JobStatus::Queued
    );
    assert_eq!(
        s.job(c[5].job.id).await.unwrap().unwrap().progress,
        Progress::default(),
        "the stale unit wrote nothing"
    );
    // Holds: 0.10 each for jobs 0 and 1 (still open), job 2 settled at its
    // cost, nothing else.
    let d = s.budget_day(day, usd("100")).await.unwrap();
    assert_eq!((d.reserved_usd, d.used_usd), (usd("0.20"), usd("0.04")));
    // The failure was refunded; the cancel too; the rest are charged.
    let balance = db.tollgate.user(u.id).await.unwrap().balance;
    assert_eq!(s.ledger_sum(u.id).await.unwrap(), balance);
    let kinds = |events: Vec<tollgate::store::JobEvent>| -> Vec<String> {
        events
            .into_iter()
            .map(|e| match e.detail()["step"].as_str() {
                Some(step) => format!("step:{step}"),
                None => e.kind(),
            })
            .collect()
    };
    // An attempt's end and its settlement are one statement's two trigger
    // events: SQLite fires them in the other order, so they are compared
    // as a pair.
    let mut ended = kinds(s.job_events(c[2].job.id).await.unwrap());
    ended[4..6].sort();
    assert_eq!(
        ended,
        [
            "created",
            "claimed",
            "attempt",
            "submitted",
            "attempt_ended",
            "settled",
            "succeeded",
            "step:generate",
            "step:review"
        ]
    );
    assert_eq!(
        kinds(s.job_events(c[1].job.id).await.unwrap()),
        ["created", "claimed", "attempt", "step:readiness"]
    );
    assert_eq!(
        kinds(s.job_events(c[4].job.id).await.unwrap()),
        ["created", "claimed", "released"]
    );
}

async fn a_group_commit_refuses_a_stale_unit_alone(db: TestDb) {
    let (_, ids) = jobs(&db, 3).await;
    let s = db.store();
    let claims = s.claim_jobs("a", 3, 60.0).await.unwrap();
    s.cancel_job(claims[1].job.id, Utc::now()).await.unwrap();
    let units: Vec<Unit> = claims
        .iter()
        .map(|c| unit(c, vec![Op::BeginAttempt(attempt(c.job.id, 1, None))]))
        .collect();
    let results = s.apply(&units).await;
    let results: Vec<Applied> = results.into_iter().map(Result::unwrap).collect();
    assert!(matches!(results[0], Applied::Done(None)));
    assert!(stale(&results[1]));
    assert!(matches!(results[2], Applied::Done(None)));
    let counts: Vec<usize> = {
        let mut v = Vec::new();
        for c in &claims {
            v.push(s.attempts(c.job.id).await.unwrap().len());
        }
        v
    };
    assert_eq!(counts, [1, 0, 1]);
    assert_eq!(ids.len(), 3);
}

async fn a_failing_unit_does_not_sink_its_group(db: TestDb) {
    let (_, _) = jobs(&db, 2).await;
    let s = db.store();
    let claims = s.claim_jobs("a", 2, 60.0).await.unwrap();
    let first = attempt(claims[0].job.id, 1, None);
    apply(s, unit(&claims[0], vec![Op::BeginAttempt(first)])).await;
    // The same attempt number again is a unique violation: that unit fails,
    // the other commits.
    let units = [
        unit(
            &claims[0],
            vec![Op::BeginAttempt(attempt(claims[0].job.id, 1, None))],
        ),
        unit(
            &claims[1],
            vec![Op::BeginAttempt(attempt(claims[1].job.id, 1, None))],
        ),
    ];
    let results = s.apply(&units).await;
    assert!(results[0].is_err(), "{:?}", results[0]);
    assert!(matches!(results[1], Ok(Applied::Done(None))));
    assert_eq!(s.attempts(claims[1].job.id).await.unwrap().len(), 1);
    assert_eq!(s.attempts(claims[0].job.id).await.unwrap().len(), 1);
}

/// The first holds of a day race to make its row: a hold that finds the row
/// made meanwhile by another transaction is taken, not refused. Four group
/// commits race, each long enough for the others to meet it.
async fn racing_first_holds_of_a_new_day_are_not_refused(db: TestDb) {
    let (_, _) = jobs(&db, 48).await;
    let s = db.store();
    let claims = s.claim_jobs("a", 48, 60.0).await.unwrap();
    let day = NaiveDate::from_ymd_opt(2031, 1, 2).unwrap();
    let barrier = Arc::new(Barrier::new(4));
    let mut tasks = Vec::new();
    for group in claims.chunks(12) {
        let units: Vec<Unit> = group
            .iter()
            .map(|c| {
                let hold = Hold {
                    day,
                    amount: usd("0.01"),
                    default_cap: usd("100"),
                };
                let mut ops = vec![Op::BeginAttempt(attempt(c.job.id, 1, Some(hold)))];
                // Later units make the transaction longer.
                ops.push(Op::BeginAttempt(attempt(c.job.id, 2, None)));
                unit(c, ops)
            })
            .collect();
        let (s, b) = (s.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            s.apply(&units).await
        }));
    }
    for t in tasks {
        for a in t.await.unwrap() {
            let a = a.unwrap();
            assert!(matches!(a, Applied::Done(_)), "{a:?}");
        }
    }
    let d = s.budget_day(day, usd("100")).await.unwrap();
    assert_eq!(d.reserved_usd, usd("0.48"));
}

/// A run's failure as the store takes it.
fn failed(message: &str) -> JobFailure {
    JobFailure::new(FailureCode::GenerationFailed, message)
}
