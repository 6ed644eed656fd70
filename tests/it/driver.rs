//! The store at the driver level, on SQLite and PostgreSQL: the `Store`
//! methods the use cases reach (accounts and tokens, reads of jobs, claims
//! and leases, the ledger, counts and rollups, retention's purges), each
//! called directly, so that a statement one backend gets wrong fails here
//! under its own name rather than somewhere behind a use case.

use chrono::{Duration, Utc};
use serde_json::json;
use tollgate::model::{
    ApiTokenId, AssetId, Credits, DeliveryState, Email, Happening, JobId, JobRequest, JobStatus,
    LedgerEntryId, LedgerKind, Role, Usd, UserId, WebhookEndpointId, WebhookEvent,
};
use tollgate::store::{
    AttemptFilter, DeliveryFilter, DeliveryOutcome, JobFilter, LedgerFilter, NewApiToken, NewAsset,
    NewLedgerEntry, NewUser, NewWebhookEndpoint, ParkedFilter, User,
};
use tollgate_testkit::{both_backends, TestDb};

both_backends!(
    people_and_their_tokens_round_trip,
    a_person_s_jobs_read_back_by_key_id_and_count,
    a_claim_is_held_under_its_token_only,
    the_ledger_reads_back_by_reference_and_page,
    a_refund_happens_once_and_only_for_an_ended_job,
    empty_rollups_read_as_nothing_not_an_error,
    retention_purges_nothing_younger_than_its_cutoff,
    an_upload_s_object_is_released_only_when_no_upload_shares_it,
    an_endpoint_is_deleted_by_its_owner_once,
    an_output_is_marked_purged_once,
    a_quiet_studio_reads_as_zero_everywhere,
    a_delivery_is_finished_under_its_claim_and_replayed,
    an_observation_lands_on_the_timeline_and_changes_nothing_else,
    retention_keeps_what_a_person_s_live_jobs_name,
    a_repair_of_an_unreviewed_version_is_charged,
);

async fn person(db: &TestDb, email: &str, credits: i64) -> User {
    let t = &db.tollgate;
    let u = (t
        .add_user(email, Role::User, tollgate_testkit::api::PASSWORD)
        .await)
        .unwrap();
    if credits > 0 {
        (t.grant_credits(None, u.id, Credits(credits), None, None)
            .await)
            .unwrap();
    }
    u
}

/// `n` queued videos of `u`, under keys `k0`, `k1`, ….
async fn queued(db: &TestDb, u: &User, n: usize) -> Vec<JobId> {
    let mut ids = Vec::new();
    for i in 0..n {
        let body = json!({"kind": "video", "prompt": format!("clip {i}"), "duration_s": 2, "resolution": "720p"});
        let key = format!("k{i}");
        let submitted = db.tollgate.submit_job(u, None, Some(&key), &body).await;
        ids.push(submitted.unwrap().job.id);
    }
    ids
}

async fn people_and_their_tokens_round_trip(db: TestDb) {
    let s = db.store();
    let now = Utc::now();
    let new = NewUser {
        id: UserId::new(),
        email: Email::parse("Driver@Example.com").unwrap(),
        password_hash: "hash-1".into(),
        role: Role::User,
        created_at: now,
    };
    let u = s.insert_user(&new).await.unwrap();
    let read = s.user_by_id(u.id).await.unwrap().unwrap();
    assert_eq!(
        (read.email.as_str(), read.role),
        (u.email.as_str(), Role::User)
    );
    assert_eq!(read.balance, Credits(0));
    assert!(s.user_by_id(UserId::new()).await.unwrap().is_none());

    assert_eq!(
        s.password_hash(u.id).await.unwrap().as_deref(),
        Some("hash-1")
    );
    s.set_password_hash(u.id, "hash-2", now).await.unwrap();
    assert_eq!(
        s.password_hash(u.id).await.unwrap().as_deref(),
        Some("hash-2")
    );
    s.set_user_role(u.id, Role::Reviewer).await.unwrap();
    s.set_user_disabled(u.id, true).await.unwrap();
    let changed = s.user_by_id(u.id).await.unwrap().unwrap();
    assert_eq!((changed.role, changed.disabled), (Role::Reviewer, true));

    // The schema keeps a SHA-256 in hex, never the token.
    for (name, hash) in [("ci", "a"), ("laptop", "b")] {
        let token = NewApiToken {
            id: ApiTokenId::new(),
            user_id: u.id,
            name: name.into(),
            token_hash: hash.repeat(64),
            prefix: format!("tg_{name}"),
            created_at: now,
        };
        let stored = s.insert_api_token(&token).await.unwrap();
        assert_eq!((stored.name.as_str(), stored.revoked_at), (name, None));
    }
    let tokens = s.list_api_tokens(u.id).await.unwrap();
    assert_eq!(tokens.len(), 2);
    assert_eq!(s.revoke_all_tokens(u.id, now).await.unwrap(), 2);
    assert_eq!(
        s.revoke_all_tokens(u.id, now).await.unwrap(),
        0,
        "none left live"
    );
    let tokens = s.list_api_tokens(u.id).await.unwrap();
    assert!(tokens.iter().all(|t| t.revoked_at.is_some()));
}

async fn a_person_s_jobs_read_back_by_key_id_and_count(db: TestDb) {
    let u = person(&db, "jobs@example.com", 1_000).await;
    let other = person(&db, "other@example.com", 1_000).await;
    let ids = queued(&db, &u, 3).await;
    queued(&db, &other, 1).await;
    let s = db.store();

    let by_key = s.job_by_idempotency_key(u.id, "k1").await.unwrap().unwrap();
    assert_eq!(by_key.id, ids[1]);
    assert!(s
        .job_by_idempotency_key(u.id, "k9")
        .await
        .unwrap()
        .is_none());
    assert!(
        (s.job_by_idempotency_key(other.id, "k1").await.unwrap()).is_none(),
        "a key is its owner's"
    );

    let mut read: Vec<JobId> = (s.jobs_of(&ids).await.unwrap().iter())
        .map(|j| j.id)
        .collect();
    read.sort_by_key(|id| id.to_string());
    let mut want = ids.clone();
    want.sort_by_key(|id| id.to_string());
    assert_eq!(read, want);
    assert!(s.jobs_of(&[]).await.unwrap().is_empty());
    assert!(s.attempts_of(&ids).await.unwrap().is_empty(), "none ran");

    let mine = JobFilter {
        user_id: Some(u.id),
        limit: 10,
        ..Default::default()
    };
    assert_eq!(s.count_jobs(&mine).await.unwrap(), 3);
    let queued_only = JobFilter {
        status: Some(JobStatus::Succeeded),
        ..mine.clone()
    };
    assert_eq!(s.count_jobs(&queued_only).await.unwrap(), 0);
    assert_eq!(
        s.count_jobs_by_status(Some(u.id)).await.unwrap(),
        vec![(JobStatus::Queued, 3)]
    );
    assert_eq!(
        s.count_jobs_by_status(None).await.unwrap(),
        vec![(JobStatus::Queued, 4)]
    );
}

async fn a_claim_is_held_under_its_token_only(db: TestDb) {
    let u = person(&db, "claims@example.com", 1_000).await;
    let ids = queued(&db, &u, 1).await;
    let s = db.store();
    let (owner, token) = s.job_lease(ids[0]).await.unwrap().unwrap();
    assert_eq!(owner, None, "nobody holds a queued job");
    let claim = s.claim_jobs("node-a", 1, 30.0).await.unwrap().remove(0);
    assert_eq!(claim.job.id, ids[0]);
    assert!(claim.token > token, "a claim moves the fencing token");
    let (owner, held) = s.job_lease(ids[0]).await.unwrap().unwrap();
    assert_eq!((owner.as_deref(), held), (Some("node-a"), claim.token));
    assert!(s.claim_held(ids[0], claim.token).await.unwrap());
    assert!(!s.claim_held(ids[0], claim.token - 1).await.unwrap());
    assert!(s.job_lease(JobId::new()).await.unwrap().is_none());
}

async fn the_ledger_reads_back_by_reference_and_page(db: TestDb) {
    let u = person(&db, "ledger@example.com", 0).await;
    let s = db.store();
    for n in 0..5 {
        let entry = NewLedgerEntry {
            id: LedgerEntryId::new(),
            user_id: u.id,
            amount: Credits(10 + n),
            kind: LedgerKind::Grant,
            reference: format!("driver:{n}"),
            actor_id: None,
            reason: None,
            created_at: Utc::now(),
        };
        s.append_ledger(&entry).await.unwrap();
    }
    let third = s.ledger_entry("driver:2").await.unwrap().unwrap();
    assert_eq!((third.user_id, third.amount), (u.id, Credits(12)));
    assert!(s.ledger_entry("driver:9").await.unwrap().is_none());
    let filter = LedgerFilter {
        user_id: u.id,
        seek: None,
        limit: 3,
    };
    assert_eq!(s.list_ledger(&filter).await.unwrap().len(), 3);
    assert_eq!(s.count_ledger(&filter).await.unwrap(), 5);
    assert_eq!(s.ledger_sum(u.id).await.unwrap(), Credits(60));
}

async fn a_refund_happens_once_and_only_for_an_ended_job(db: TestDb) {
    let u = person(&db, "refund@example.com", 1_000).await;
    let ids = queued(&db, &u, 1).await;
    let s = db.store();
    let charged = s.ledger_sum(u.id).await.unwrap();
    assert!(
        !s.refund_job(ids[0], Utc::now()).await.unwrap(),
        "a queued job is not refunded"
    );
    assert_eq!(s.ledger_sum(u.id).await.unwrap(), charged);
    let cancelled = s.cancel_job(ids[0], Utc::now()).await.unwrap().unwrap();
    assert_eq!(cancelled.status, JobStatus::Cancelled);
    let refunded = s.ledger_sum(u.id).await.unwrap();
    assert_eq!(refunded, Credits(1_000), "the cancel refunded it");
    assert!(
        !s.refund_job(ids[0], Utc::now()).await.unwrap(),
        "only once"
    );
    assert_eq!(s.ledger_sum(u.id).await.unwrap(), refunded);
}

async fn empty_rollups_read_as_nothing_not_an_error(db: TestDb) {
    let s = db.store();
    let today = Utc::now().date_naive();
    assert!(s.parked_counts().await.unwrap().is_empty());
    let none = ParkedFilter {
        limit: 10,
        ..Default::default()
    };
    assert_eq!(s.count_parked(&none).await.unwrap(), 0);
    assert!(s.decisions_of(&[]).await.unwrap().is_empty());
    let since = Utc::now() - Duration::days(1);
    assert!(s.decision_latencies(since).await.unwrap().is_empty());
    assert_eq!(s.recovery_stats().await.unwrap(), (0, 0));
    let hooks = s.webhook_stats().await.unwrap();
    assert!(hooks.by_state.iter().all(|(_, n)| *n == 0));
    assert_eq!(hooks.oldest_pending, None);
    assert!(s.budget_days(today, today).await.unwrap().len() <= 1);
    assert!(s.budget_changes(today, today, 10).await.unwrap().is_empty());
}

async fn retention_purges_nothing_younger_than_its_cutoff(db: TestDb) {
    let u = person(&db, "kept@example.com", 1_000).await;
    queued(&db, &u, 2).await;
    let s = db.store();
    let long_ago = Utc::now() - Duration::days(365);
    assert!(s.expired_outputs(long_ago, 10).await.unwrap().is_empty());
    assert!(s.expired_assets(long_ago, 10).await.unwrap().is_empty());
    assert_eq!(s.purge_events(long_ago, 100).await.unwrap(), 0);
    assert_eq!(s.purge_deliveries(long_ago, 100).await.unwrap(), 0);
    let purged = s.purge_evidence(long_ago, Utc::now(), 100).await.unwrap();
    assert_eq!(purged, 0);
    // Nothing of today's two jobs was purged: their timelines stand.
    for id in queued_ids(&db, &u).await {
        assert!(!db.history(id).await.is_empty());
    }
}

async fn queued_ids(db: &TestDb, u: &User) -> Vec<JobId> {
    let mine = JobFilter {
        user_id: Some(u.id),
        limit: 10,
        ..Default::default()
    };
    let jobs = db.store().list_jobs(&mine).await.unwrap();
    jobs.into_iter().map(|j| j.id).collect()
}

fn upload(u: &User, key: &str) -> NewAsset {
    NewAsset {
        id: AssetId::new(),
        user_id: u.id,
        sha256: "c".repeat(64),
        content_type: "image/png".into(),
        width: 64,
        height: 48,
        bytes: 1234,
        object_key: key.into(),
        created_at: Utc::now() - Duration::days(2),
    }
}

async fn an_upload_s_object_is_released_only_when_no_upload_shares_it(db: TestDb) {
    let u = person(&db, "uploads@example.com", 0).await;
    let other = person(&db, "same-photo@example.com", 0).await;
    let s = db.store();
    let first = s.insert_asset(&upload(&u, "uploads/same")).await.unwrap();
    let again = s.insert_asset(&upload(&u, "uploads/same")).await.unwrap();
    assert_eq!(again.id, first.id, "one person's same photo is one upload");
    // Two people's same photo: two uploads, one stored object.
    let second = s
        .insert_asset(&upload(&other, "uploads/same"))
        .await
        .unwrap();
    assert_ne!(second.id, first.id);
    let read = s.asset(first.id).await.unwrap().unwrap();
    assert_eq!((read.width, read.height, read.bytes), (64, 48, 1234));
    assert!(s.asset(AssetId::new()).await.unwrap().is_none());
    let cutoff = Utc::now() - Duration::days(1);
    assert_eq!(s.expired_assets(cutoff, 10).await.unwrap().len(), 2);

    let now = Utc::now();
    assert_eq!(
        s.mark_asset_purged(first.id, now).await.unwrap(),
        None,
        "another upload still refers to the object"
    );
    assert_eq!(s.mark_asset_purged(first.id, now).await.unwrap(), None);
    assert_eq!(
        s.mark_asset_purged(second.id, now)
            .await
            .unwrap()
            .as_deref(),
        Some("uploads/same"),
        "the last one out releases it"
    );
    assert!(s.expired_assets(cutoff, 10).await.unwrap().is_empty());
}

async fn an_endpoint_is_deleted_by_its_owner_once(db: TestDb) {
    let owner = person(&db, "hooks@example.com", 0).await;
    let other = person(&db, "nosy@example.com", 0).await;
    let s = db.store();
    let new = NewWebhookEndpoint {
        id: WebhookEndpointId::new(),
        user_id: owner.id,
        url: "https://hooks.example.com/tollgate".into(),
        events: vec![WebhookEvent::Succeeded],
        secret: format!("whsec_{}", "d".repeat(32)),
        created_at: Utc::now(),
    };
    let e = s.insert_webhook_endpoint(&new).await.unwrap();
    assert_eq!((e.user_id, e.url.as_str()), (owner.id, new.url.as_str()));
    let now = Utc::now();
    assert!(!s
        .delete_webhook_endpoint(e.id, other.id, now)
        .await
        .unwrap());
    assert!(s
        .delete_webhook_endpoint(e.id, owner.id, now)
        .await
        .unwrap());
    assert!(!s
        .delete_webhook_endpoint(e.id, owner.id, now)
        .await
        .unwrap());
}

async fn an_output_is_marked_purged_once(db: TestDb) {
    let u = person(&db, "outputs@example.com", 1_000).await;
    let ids = queued(&db, &u, 1).await;
    let s = db.store();
    assert!(s.mark_output_purged(ids[0], Utc::now()).await.unwrap());
    assert!(!s.mark_output_purged(ids[0], Utc::now()).await.unwrap());
    let job = s.job(ids[0]).await.unwrap().unwrap();
    assert!(job.media_purged_at.is_some());
}

async fn a_quiet_studio_reads_as_zero_everywhere(db: TestDb) {
    let u = person(&db, "quiet@example.com", 1_000).await;
    queued(&db, &u, 1).await;
    let s = db.store();
    let today = Utc::now().date_naive();
    let exposure = s.exposure().await.unwrap();
    assert_eq!((exposure.parked_holds, exposure.submitting), (0, 0));
    assert_eq!(exposure.parked_hold_usd, Usd::ZERO);
    assert!(s.spend_by_source(today, today).await.unwrap().is_empty());
    let since = Utc::now() - Duration::hours(1);
    assert_eq!(
        s.user_spend_on(u.id, today, since).await.unwrap(),
        Usd::ZERO
    );
    let attempts = AttemptFilter {
        limit: 10,
        ..Default::default()
    };
    assert!(s.list_attempts(&attempts).await.unwrap().is_empty());
    assert_eq!(s.count_attempts(&attempts).await.unwrap(), 0);
    let deliveries = DeliveryFilter {
        limit: 10,
        ..Default::default()
    };
    assert_eq!(s.count_deliveries(&deliveries).await.unwrap(), 0);
    assert!(s.lineages_of(&[]).await.unwrap().is_empty());
}

async fn a_delivery_is_finished_under_its_claim_and_replayed(db: TestDb) {
    let u = person(&db, "outbox@example.com", 1_000).await;
    let s = db.store();
    let endpoint = NewWebhookEndpoint {
        id: WebhookEndpointId::new(),
        user_id: u.id,
        url: "https://hooks.example.com/cancelled".into(),
        events: vec![WebhookEvent::Cancelled],
        secret: format!("whsec_{}", "e".repeat(32)),
        created_at: Utc::now(),
    };
    s.insert_webhook_endpoint(&endpoint).await.unwrap();
    let ids = queued(&db, &u, 1).await;
    s.cancel_job(ids[0], Utc::now()).await.unwrap().unwrap();
    // The cancel wrote its announcement in its own transaction.
    let mine = DeliveryFilter {
        user: Some(u.id),
        limit: 10,
        ..Default::default()
    };
    let listed = s.list_deliveries(&mine).await.unwrap();
    assert_eq!(listed.len(), 1);
    let id = listed[0].id;
    let read = s.delivery(id).await.unwrap().unwrap();
    assert_eq!(
        (read.event, read.job_id),
        (WebhookEvent::Cancelled, Some(ids[0]))
    );
    assert_eq!(read.state, DeliveryState::Pending);

    let claim = s
        .claim_deliveries("node-a", 10, 30.0)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(claim.delivery.id, id);
    let done = DeliveryOutcome::Delivered { status: 204 };
    let stale = claim.claim_token + 1;
    assert!(!s
        .finish_delivery(id, stale, &done, Utc::now())
        .await
        .unwrap());
    assert!(s
        .finish_delivery(id, claim.claim_token, &done, Utc::now())
        .await
        .unwrap());
    let delivered = s.delivery(id).await.unwrap().unwrap();
    assert_eq!(
        (delivered.state, delivered.last_status),
        (DeliveryState::Delivered, Some(204))
    );

    assert_eq!(
        s.replay_deliveries(&[id], Utc::now()).await.unwrap(),
        vec![id]
    );
    let replayed = s.delivery(id).await.unwrap().unwrap();
    assert_eq!(
        (replayed.state, replayed.replays),
        (DeliveryState::Pending, 1)
    );
    assert_eq!(replayed.body, read.body, "a replay sends the same envelope");
    assert_eq!(s.count_deliveries(&mine).await.unwrap(), 1);
}

/// `note_event` (a run that found its claim gone says so): the observation
/// is on the timeline, after what was there, and the job is as it was.
async fn an_observation_lands_on_the_timeline_and_changes_nothing_else(db: TestDb) {
    let u = person(&db, "observed@example.com", 1_000).await;
    let job = queued(&db, &u, 1).await[0];
    let s = db.store();
    let before = s.job(job).await.unwrap().unwrap();
    let lease_before = s.job_lease(job).await.unwrap();
    let events_before = db.history(job).await;
    let lost = Happening::LeaseLost { token: 7 };
    s.note_event(job, &lost, Utc::now()).await.unwrap();
    let events = db.history(job).await;
    assert_eq!(events.len(), events_before.len() + 1);
    let last = events.last().unwrap();
    assert_eq!((last.job_id, &last.happening), (job, &lost));
    assert!(
        events_before.iter().all(|e| e.id < last.id),
        "kept in order"
    );
    let after = s.job(job).await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.credits, after.completed_at),
        (before.status, before.credits, before.completed_at)
    );
    assert_eq!(s.job_lease(job).await.unwrap(), lease_before);
    // On a job that is not there, an error, and nothing written.
    assert!(s.note_event(JobId::new(), &lost, Utc::now()).await.is_err());
}

/// `kept_requests`: retention keeps the uploads named by a person's jobs
/// that have not aged out (live, or ended after the cutoff), since a day.
async fn retention_keeps_what_a_person_s_live_jobs_name(db: TestDb) {
    let u = person(&db, "keeps@example.com", 1_000).await;
    let other = person(&db, "someone-else@example.com", 1_000).await;
    let jobs = queued(&db, &u, 2).await;
    queued(&db, &other, 1).await;
    db.tollgate.cancel_job(&u, jobs[1]).await.unwrap();
    let s = db.store();
    let prompts = |kept: Vec<JobRequest>| -> Vec<String> {
        let mut p: Vec<String> = kept
            .into_iter()
            .map(|r| match r {
                JobRequest::Video(v) => v.prompt,
                JobRequest::ImageEdit(e) => panic!("an edit nobody ordered: {e:?}"),
            })
            .collect();
        p.sort();
        p
    };
    let yesterday = Utc::now() - Duration::days(1);
    let long_ago = Utc::now() - Duration::days(365);
    let soon = Utc::now() + Duration::minutes(1);
    // Both are kept while the cutoff is before the cancel.
    let kept = s.kept_requests(u.id, yesterday, long_ago).await.unwrap();
    assert_eq!(prompts(kept), ["clip 0", "clip 1"]);
    // The cancelled one ended before a later cutoff: only the queued one.
    let kept = s.kept_requests(u.id, yesterday, soon).await.unwrap();
    assert_eq!(prompts(kept), ["clip 0"]);
    // Nothing created since a later day; nobody's jobs but the person's.
    assert!(s
        .kept_requests(u.id, soon, long_ago)
        .await
        .unwrap()
        .is_empty());
    let theirs = s.kept_requests(other.id, yesterday, soon).await.unwrap();
    assert_eq!(prompts(theirs), ["clip 0"]);
}

/// `repair_is_free`: only a version whose review found issues is repaired
/// on the studio (the flagged case is in `repairs`); a version with no
/// review is charged, and a version that is not there is an error.
async fn a_repair_of_an_unreviewed_version_is_charged(db: TestDb) {
    let u = person(&db, "unreviewed@example.com", 1_000).await;
    let job = queued(&db, &u, 1).await[0];
    let s = db.store();
    assert!(!s.repair_is_free(job).await.unwrap());
    assert!(s.repair_is_free(JobId::new()).await.is_err());
}
