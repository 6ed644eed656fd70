//! Charge once, on both backends: idempotent submission, the charge and the
//! job in one transaction, cancel and the one refund, uploads. Races are
//! real: many tasks, one barrier, then count rows.

use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::Barrier;
use tollgate::model::{Credits, JobStatus, ParkedEvidence, Role};
use tollgate::store::{Applied, Finish, Op, Unit, User};
use tollgate::usecases::jobs::{JobQuery, Whose};
use tollgate::usecases::ledger::LedgerQuery;
use tollgate::usecases::webhooks::DeliveryQuery;
use tollgate_testkit::api::PASSWORD;
use tollgate_testkit::both_backends;
use tollgate_testkit::{Api, TestDb};

async fn api(db: TestDb) -> Api {
    Api::serve(db).await
}

/// A small plain photo uploaded through the API; its asset id.
async fn photo(a: &Api, token: &str) -> String {
    let r = a
        .upload(token, png(64, 48, [200, 120, 40]), "image/png")
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn png(w: u32, h: u32, rgb: [u8; 3]) -> Vec<u8> {
    let img = image::RgbImage::from_pixel(w, h, image::Rgb(rgb));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

fn edit(source: &str) -> Value {
    json!({"kind": "image_edit", "source": source,
           "target": {"kind": "pet", "description": "the dog on the left"},
           "style": "embroidery", "strength": "balanced"})
}

both_backends!(
    identical_racing_submits_make_one_job,
    racing_submits_never_overdraw,
    same_key_other_body_is_a_conflict_and_charges_nothing,
    racing_cancels_refund_once,
    a_refund_never_follows_a_job_that_finished_first,
    bad_submissions_change_nothing,
    jobs_are_private_and_paginated,
    a_long_credit_history_pages_to_the_end_and_back,
    admins_count_filter_and_find_jobs,
    quote_matches_the_charge,
    uploads_are_sniffed_bounded_and_private,
    expired_keys_can_be_reused,
    a_persons_uploads_have_a_quota,
);

/// Noise compresses badly: a PNG of about `side * side * 3` bytes.
fn noise_png(side: u32, seed: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(side, side, |x, y| {
        let v = x
            .wrapping_mul(2654435761)
            .wrapping_add(y.wrapping_mul(40503))
            .wrapping_add(seed)
            ^ (x * y);
        image::Rgb([(v >> 3) as u8, (v >> 11) as u8, (v >> 19) as u8])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// With a 1 MB quota, a second large upload does not fit: 413 with its
/// own code, and nothing is stored for it.
async fn a_persons_uploads_have_a_quota(db: TestDb) {
    let db = db.with_config("storage_quota_mb = 1\n").await;
    let a = api(db).await;
    let (u, token) = a.person("q@example.com", Role::User, 10).await;
    let first = noise_png(360, 1);
    assert!(
        first.len() > 300_000 && first.len() < 1_000_000,
        "{}",
        first.len()
    );
    let r = a.upload(&token, first.clone(), "image/png").await;
    let status = r.status();
    assert_eq!(status, StatusCode::CREATED, "{}", r.text().await.unwrap());
    // Another large image does not fit beside it.
    let r = a.upload(&token, noise_png(520, 2), "image/png").await;
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "STORAGE_QUOTA_EXCEEDED");
    assert!(v["error"]["message"].as_str().unwrap().contains("MB"));
    let used = a.db.store().asset_bytes_of(u.id).await.unwrap();
    assert_eq!(
        used,
        first.len() as u64,
        "nothing was stored for the refused one"
    );
}

async fn identical_racing_submits_make_one_job(db: TestDb) {
    let a = Arc::new(api(db).await);
    let (u, token) = a.person("u@example.com", Role::User, 10).await;
    let source = photo(&a, &token).await;
    let n = 50;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (a, b, token, body) = (a.clone(), barrier.clone(), token.clone(), edit(&source));
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            let r = a.submit(&token, "same-key", &body).await;
            let status = r.status();
            let replayed = r.headers().get("idempotent-replayed").is_some();
            let job: Value = r.json().await.unwrap();
            (
                status,
                replayed,
                job["id"].as_str().unwrap_or_default().to_string(),
            )
        }));
    }
    let mut created = 0;
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let (status, replayed, id) = t.await.unwrap();
        match status {
            StatusCode::CREATED => created += 1,
            StatusCode::ACCEPTED => assert!(replayed),
            other => panic!("unexpected {other}"),
        }
        ids.insert(id);
    }
    assert_eq!(created, 1);
    assert_eq!(ids.len(), 1, "every reply names the same job");
    let jobs =
        a.db.tollgate
            .list_jobs(&u, &JobQuery::parse(None, Some(100), None).unwrap())
            .await
            .unwrap()
            .items;
    assert_eq!(jobs.len(), 1);
    assert_eq!(a.balance(&u).await, 10 - 2);
    let debits = a.db.store().ledger_for_user(u.id, 100).await.unwrap();
    assert_eq!(
        debits
            .iter()
            .filter(|e| e.reference.starts_with("debit:job:"))
            .count(),
        1
    );
}

async fn racing_submits_never_overdraw(db: TestDb) {
    let a = Arc::new(api(db).await);
    // Each edit costs 2 credits: 6 pays for exactly 3.
    let (u, token) = a.person("u@example.com", Role::User, 6).await;
    let source = photo(&a, &token).await;
    let n = 20;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (a, b, token, body) = (a.clone(), barrier.clone(), token.clone(), edit(&source));
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            let r = a.submit(&token, &format!("key-{i}"), &body).await;
            let status = r.status();
            let body: Value = r.json().await.unwrap();
            (status, body)
        }));
    }
    let (mut created, mut refused) = (0, 0);
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            StatusCode::CREATED => created += 1,
            StatusCode::PAYMENT_REQUIRED => {
                assert_eq!(body["error"]["code"], "INSUFFICIENT_CREDITS");
                refused += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((created, refused), (3, 17));
    assert_eq!(a.balance(&u).await, 0);
    let jobs =
        a.db.tollgate
            .list_jobs(&u, &JobQuery::parse(None, Some(100), None).unwrap())
            .await
            .unwrap()
            .items;
    assert_eq!(jobs.len(), 3, "a refused charge leaves no job behind");
}

async fn same_key_other_body_is_a_conflict_and_charges_nothing(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("u@example.com", Role::User, 10).await;
    let source = photo(&a, &token).await;
    assert_eq!(
        a.submit(&token, "k1", &edit(&source)).await.status(),
        StatusCode::CREATED
    );
    // Key order and whitespace do not matter: this is the same body.
    let same: Value = serde_json::from_str(&format!(
        r#"{{"strength":"balanced","style":"embroidery","target":{{"description":" the dog on the left ","kind":"pet"}},"source":"{source}","kind":"image_edit"}}"#
    ))
    .unwrap();
    let replay = a.submit(&token, "k1", &same).await;
    assert_eq!(replay.status(), StatusCode::ACCEPTED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let mut other = edit(&source);
    other["style"] = json!("origami");
    let conflict = a.submit(&token, "k1", &other).await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    assert_eq!(
        conflict.json::<Value>().await.unwrap()["error"]["code"],
        "IDEMPOTENCY_CONFLICT"
    );
    assert_eq!(a.balance(&u).await, 8);
    // Keys are per user: another person may use the same key.
    let (v, token2) = a.person("v@example.com", Role::User, 10).await;
    let source2 = photo(&a, &token2).await;
    assert_eq!(
        a.submit(&token2, "k1", &edit(&source2)).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(a.balance(&v).await, 8);
}

async fn racing_cancels_refund_once(db: TestDb) {
    let a = Arc::new(api(db).await);
    let (u, token) = a.person("u@example.com", Role::User, 10).await;
    let source = photo(&a, &token).await;
    let job: Value = a
        .submit(&token, "c1", &edit(&source))
        .await
        .json()
        .await
        .unwrap();
    let id = job["id"].as_str().unwrap().to_string();
    let n = 5;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (a, b, token, id) = (a.clone(), barrier.clone(), token.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            let r = a
                .http
                .post(a.url(&format!("/v1/jobs/{id}/cancel")))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            r.json::<Value>().await.unwrap()["status"]
                .as_str()
                .unwrap()
                .to_string()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), "cancelled");
    }
    let refunds = a.db.store().ledger_for_user(u.id, 100).await.unwrap();
    assert_eq!(
        refunds
            .iter()
            .filter(|e| e.reference == format!("refund:job:{id}"))
            .count(),
        1
    );
    assert_eq!(a.balance(&u).await, 10);
    // The one refund function, called again from anywhere, does nothing more.
    for _ in 0..5 {
        assert!(!a.db.tollgate.refund(id.parse().unwrap()).await.unwrap());
    }
    assert_eq!(a.balance(&u).await, 10);
    let events: Value = a
        .http
        .get(a.url(&format!("/v1/jobs/{id}/events")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["created", "cancelled", "refunded"]);
}

async fn a_refund_never_follows_a_job_that_finished_first(db: TestDb) {
    let a = Arc::new(api(db).await);
    let (u, token) = a.person("u@example.com", Role::User, 40).await;
    let source = photo(&a, &token).await;
    let mut refunds_seen = 0;
    for round in 0..10 {
        let job: Value = a
            .submit(&token, &format!("r{round}"), &edit(&source))
            .await
            .json()
            .await
            .unwrap();
        let id: tollgate::model::JobId = job["id"].as_str().unwrap().parse().unwrap();
        let barrier = Arc::new(Barrier::new(4));
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (a, b, token) = (a.clone(), barrier.clone(), token.clone());
            tasks.push(tokio::spawn(async move {
                b.wait().await;
                a.http
                    .post(a.url(&format!("/v1/jobs/{id}/cancel")))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .unwrap()
                    .status()
            }));
        }
        // A worker holds the job and writes its success as the cancels land.
        let claim =
            a.db.store()
                .claim_jobs("w", 1, 60.0)
                .await
                .unwrap()
                .remove(0);
        assert_eq!(claim.job.id, id);
        let (store, b) = (a.db.store().clone(), barrier.clone());
        let finisher = tokio::spawn(async move {
            let finish = Unit {
                job: id,
                token: claim.token,
                ops: vec![Op::Finish(Finish::Succeeded {
                    output_key: format!("outputs/{id}"),
                    content_type: "image/png".into(),
                    review: None,
                    lineage: None,
                })],
            };
            b.wait().await;
            store.apply_one(finish).await.unwrap()
        });
        for t in tasks {
            assert_eq!(t.await.unwrap(), StatusCode::OK);
        }
        let finished_first = matches!(finisher.await.unwrap(), Applied::Done(Some(_)));
        let stored = a.db.store().job(id).await.unwrap().unwrap();
        let refunded =
            a.db.store()
                .ledger_for_user(u.id, 200)
                .await
                .unwrap()
                .iter()
                .filter(|e| e.reference == format!("refund:job:{id}"))
                .count();
        if finished_first {
            assert_eq!(stored.status, JobStatus::Succeeded);
            assert_eq!(refunded, 0, "a succeeded job was refunded");
        } else {
            assert_eq!(stored.status, JobStatus::Cancelled);
            assert_eq!(refunded, 1);
            refunds_seen += 1;
        }
        // The loser wrote no event.
        let events = a.db.history(id).await;
        let terminal = events
            .iter()
            .filter(|e| ["succeeded", "failed", "cancelled"].contains(&e.kind().as_str()))
            .count();
        assert_eq!(terminal, 1);
    }
    let _ = refunds_seen;
    a.balance(&u).await;
}

async fn bad_submissions_change_nothing(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("u@example.com", Role::User, 10).await;
    let (_, other_token) = a.person("v@example.com", Role::User, 10).await;
    let source = photo(&a, &token).await;
    let others = photo(&a, &other_token).await;

    let no_key = a
        .http
        .post(a.url("/v1/jobs"))
        .bearer_auth(&token)
        .json(&edit(&source))
        .send()
        .await
        .unwrap();
    assert_eq!(no_key.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        no_key.json::<Value>().await.unwrap()["error"]["code"],
        "IDEMPOTENCY_KEY_REQUIRED"
    );

    let long = a.submit(&token, &"k".repeat(256), &edit(&source)).await;
    assert_eq!(long.status(), StatusCode::BAD_REQUEST);
    let tab = a.submit(&token, "bad\tkey", &edit(&source)).await;
    assert_eq!(tab.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        a.submit(&token, &"k".repeat(255), &json!({}))
            .await
            .status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );

    let mut unknown = edit(&source);
    unknown["priority"] = json!("high");
    let r = a.submit(&token, "u1", &unknown).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "INVALID_REQUEST");
    assert!(
        body["error"]["details"]["fields"]["priority"].is_string(),
        "{body}"
    );

    let mut wrong = edit(&source);
    wrong["style"] = json!("chalk");
    wrong["strength"] = json!(3);
    assert_eq!(
        a.submit(&token, "u2", &wrong).await.status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );

    let mut missing = edit(&source);
    missing.as_object_mut().unwrap().remove("style");
    let r = a.submit(&token, "u3", &missing).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.json::<Value>().await.unwrap()["error"]["details"]["fields"]["style"].is_string());

    let stolen = a.submit(&token, "u4", &edit(&others)).await;
    assert_eq!(stolen.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        stolen.json::<Value>().await.unwrap()["error"]["details"]["fields"]["source"].is_string()
    );

    let bearer = format!("Bearer {token}");
    let (status, body) = tollgate_testkit::declare_body(
        &a.url("/v1/jobs"),
        "POST",
        &[
            ("authorization", &bearer),
            ("idempotency-key", "u5"),
            ("content-type", "application/json"),
        ],
        100_000,
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["code"], "PAYLOAD_TOO_LARGE");

    let malformed = a
        .http
        .post(a.url("/v1/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "u6")
        .header("content-type", "application/json")
        .body("{\"kind\":")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);

    assert_eq!(a.balance(&u).await, 10);
    assert!(a
        .db
        .tollgate
        .list_jobs(&u, &JobQuery::parse(None, Some(10), None).unwrap())
        .await
        .unwrap()
        .items
        .is_empty());
}

/// Issue 33, 1 and 9: 250 entries page to the end and back, each page
/// saying where it sits, and each charge names its job.
async fn a_long_credit_history_pages_to_the_end_and_back(db: TestDb) {
    let a = api(db).await;
    let (owner, token) = a.person("u@example.com", Role::User, 0).await;
    let t = &a.db.tollgate;
    for i in 0..249 {
        t.grant_credits(
            None,
            owner.id,
            Credits(1),
            Some("top-up"),
            Some(&format!("g{i}")),
        )
        .await
        .unwrap();
    }
    let source = photo(&a, &token).await;
    let job: Value = a
        .submit(&token, "named", &edit(&source))
        .await
        .json()
        .await
        .unwrap();
    let page_at = |cursor: Option<String>| {
        let owner = owner.clone();
        async move {
            let q = LedgerQuery::parse(50, cursor.as_deref()).unwrap();
            t.ledger_page(&owner, &q).await.unwrap()
        }
    };
    let mut pages: Vec<Vec<String>> = Vec::new();
    let mut page = page_at(None).await;
    // The newest entry is the charge, and it names its job.
    let first = &page.items[0];
    assert_eq!(first.entry.kind, tollgate::model::LedgerKind::Debit);
    assert_eq!(
        first.job.as_ref().map(|j| j.id.to_string()),
        job["id"].as_str().map(str::to_string)
    );
    loop {
        let place = page.place.unwrap();
        assert_eq!((place.before, place.total), (50 * pages.len() as u64, 250));
        pages.push(page.items.iter().map(|l| l.entry.id.to_string()).collect());
        match page.next.clone() {
            Some(n) => page = page_at(Some(n)).await,
            None => break,
        }
    }
    assert_eq!(pages.len(), 5);
    assert!(pages.iter().all(|p| p.len() == 50));
    let all: Vec<String> = pages.concat();
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), 250, "each entry once");
    let mut back = vec![pages.last().unwrap().clone()];
    while let Some(p) = page.prev.clone() {
        page = page_at(Some(p)).await;
        back.push(page.items.iter().map(|l| l.entry.id.to_string()).collect());
    }
    back.reverse();
    assert_eq!(back, pages, "the pages back are the pages forward");
    assert!(LedgerQuery::parse(50, Some("nonsense")).is_err());
    assert!(LedgerQuery::parse(0, None).is_err());
}

/// Issue 33, 10: an admin counts jobs per status (everyone's or one
/// person's), lists one person's, and finds jobs by idempotency key;
/// nobody else may.
async fn admins_count_filter_and_find_jobs(db: TestDb) {
    let a = api(db).await;
    let (ana, ana_token) = a.person("ana@example.com", Role::User, 30).await;
    let (bo, bo_token) = a.person("bo@example.com", Role::User, 30).await;
    let (admin, _) = a.person("admin@example.com", Role::Admin, 0).await;
    let t = &a.db.tollgate;
    for (token, key) in [
        (&ana_token, "a1"),
        (&ana_token, "a2"),
        (&bo_token, "shared"),
    ] {
        let source = photo(&a, token).await;
        assert!(a
            .submit(token, key, &edit(&source))
            .await
            .status()
            .is_success());
    }
    let source = photo(&a, &ana_token).await;
    let shared: Value = a
        .submit(&ana_token, "shared", &edit(&source))
        .await
        .json()
        .await
        .unwrap();
    t.cancel_job(&ana, shared["id"].as_str().unwrap().parse().unwrap())
        .await
        .unwrap();
    let counts = t.job_counts(&admin, Whose::Everyone).await.unwrap();
    assert_eq!(
        counts,
        vec![(JobStatus::Queued, 3), (JobStatus::Cancelled, 1)]
    );
    let anas = t.job_counts(&admin, Whose::Of(ana.id)).await.unwrap();
    assert_eq!(
        anas,
        vec![(JobStatus::Queued, 2), (JobStatus::Cancelled, 1)]
    );
    let mut q = JobQuery::parse(None, None, None).unwrap();
    q.whose = Whose::Of(bo.id);
    let bos = t.list_jobs(&admin, &q).await.unwrap();
    assert_eq!(bos.items.len(), 1);
    assert!(bos.items.iter().all(|j| j.user_id == bo.id));
    // One key, two people's jobs.
    let found = t.jobs_under_key(&admin, "shared").await.unwrap();
    assert_eq!(found.len(), 2);
    assert!(t.jobs_under_key(&ana, "shared").await.is_err());
    assert!(t.job_counts(&ana, Whose::Everyone).await.is_err());
    assert!(
        t.list_jobs(&ana, &q).await.is_err(),
        "another's jobs are an admin's to list"
    );
    assert_eq!(t.job_counts(&ana, Whose::Own).await.unwrap().len(), 2);
}

async fn jobs_are_private_and_paginated(db: TestDb) {
    let a = api(db).await;
    let (owner, token) = a.person("u@example.com", Role::User, 30).await;
    let (_, other) = a.person("v@example.com", Role::User, 0).await;
    let (admin_user, admin) = a.person("admin@example.com", Role::Admin, 0).await;
    let source = photo(&a, &token).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let job: Value = a
            .submit(&token, &format!("p{i}"), &edit(&source))
            .await
            .json()
            .await
            .unwrap();
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    let get = |t: &str, path: String| a.http.get(a.url(&path)).bearer_auth(t.to_string()).send();
    assert_eq!(
        get(&other, format!("/v1/jobs/{}", ids[0]))
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&other, format!("/v1/jobs/{}/events", ids[0]))
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    let cancel = a
        .http
        .post(a.url(&format!("/v1/jobs/{}/cancel", ids[0])))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        get(&admin, format!("/v1/jobs/{}", ids[0]))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let mine: Value = get(&token, format!("/v1/jobs/{}", ids[0]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(mine["status"], "queued");
    assert_eq!(mine["credits"], 2);
    assert_eq!(mine["request"]["style"], "embroidery");
    assert_eq!(mine["cost"]["unpriced_attempts"], 0);

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("/v1/jobs?limit=2&cursor={c}"),
            None => "/v1/jobs?limit=2".into(),
        };
        let page: Value = get(&token, q).await.unwrap().json().await.unwrap();
        for j in page["data"].as_array().unwrap() {
            seen.push(j["id"].as_str().unwrap().to_string());
        }
        if !page["has_more"].as_bool().unwrap() {
            break;
        }
        cursor = page["next_cursor"].as_str().map(str::to_string);
    }
    ids.reverse();
    assert_eq!(seen, ids, "newest first, each once");
    // The pages walk to the end and back, each saying where it sits.
    let t = &a.db.tollgate;
    for (viewer, whose) in [(&owner, Whose::Own), (&admin_user, Whose::Everyone)] {
        let page_at = |cursor: Option<String>| async move {
            let mut q = JobQuery::parse(None, Some(2), cursor.as_deref()).unwrap();
            (q.whose, q.counted) = (whose, true);
            t.list_jobs(viewer, &q).await.unwrap()
        };
        let mut pages = Vec::new();
        let mut page = page_at(None).await;
        loop {
            let place = page.place.unwrap();
            assert_eq!((place.before, place.total), (2 * pages.len() as u64, 5));
            pages.push(
                page.items
                    .iter()
                    .map(|j| j.id.to_string())
                    .collect::<Vec<_>>(),
            );
            match page.next.clone() {
                Some(n) => page = page_at(Some(n)).await,
                None => break,
            }
        }
        assert_eq!(pages.concat(), ids);
        let mut back = vec![pages.last().unwrap().clone()];
        while let Some(p) = page.prev.clone() {
            page = page_at(Some(p)).await;
            back.push(page.items.iter().map(|j| j.id.to_string()).collect());
        }
        back.reverse();
        assert_eq!(back, pages, "the pages back are the pages forward");
    }
    // Everyone's jobs are an admin's to list, nobody else's.
    let mut q = JobQuery::parse(None, None, None).unwrap();
    q.whose = Whose::Everyone;
    assert!(t.list_jobs(&owner, &q).await.is_err());
    let none: Value = get(&other, "/v1/jobs".into())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(none["data"].as_array().unwrap().is_empty());
    assert_eq!(
        get(&token, "/v1/jobs?status=exploded".into())
            .await
            .unwrap()
            .status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        get(&token, "/v1/jobs?limit=0".into())
            .await
            .unwrap()
            .status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        get(&token, "/v1/jobs?cursor=nonsense".into())
            .await
            .unwrap()
            .status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let queued: Value = get(&token, "/v1/jobs?status=queued".into())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(queued["data"].as_array().unwrap().len(), 5);
}

async fn quote_matches_the_charge(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("u@example.com", Role::User, 100).await;
    let source = photo(&a, &token).await;
    let cat: Value = a
        .http
        .get(a.url("/v1/catalogue"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cat["styles"].as_array().unwrap().len(), 15);
    let bodies = [
        edit(&source),
        json!({"kind": "image_edit", "source": source, "target": {"kind": "background"}, "style": "linocut", "strength": "strong"}),
        json!({"kind": "video", "prompt": "a paper boat on a pond", "duration_s": 5, "resolution": "1080p"}),
        json!({"kind": "video", "prompt": "a paper boat", "model": "local-reel", "duration_s": 8, "resolution": "720p", "source": source}),
    ];
    let mut spent = 0;
    for (i, body) in bodies.iter().enumerate() {
        let q: Value = a
            .http
            .post(a.url("/v1/quote"))
            .bearer_auth(&token)
            .json(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let before = a.balance(&u).await;
        let job: Value = a
            .submit(&token, &format!("q{i}"), body)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(job["credits"], q["credits"], "{body}");
        assert_eq!(job["estimated_usd"], q["estimated_usd"]);
        let charged = before - a.balance(&u).await;
        assert_eq!(charged, q["credits"].as_i64().unwrap());
        spent += charged;
    }
    assert_eq!(a.balance(&u).await, 100 - spent);
    let bad = a
        .http
        .post(a.url("/v1/quote"))
        .bearer_auth(&token)
        .json(&json!({"kind": "video"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

async fn uploads_are_sniffed_bounded_and_private(db: TestDb) {
    let a = api(db).await;
    let (_, token) = a.person("u@example.com", Role::User, 0).await;
    let (_, other) = a.person("v@example.com", Role::User, 0).await;
    let (_, reviewer) = a.person("r@example.com", Role::Reviewer, 0).await;
    let bytes = png(64, 48, [1, 2, 3]);
    let r = a.upload(&token, bytes.clone(), "image/png").await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let asset: Value = r.json().await.unwrap();
    assert_eq!(
        (asset["width"].as_u64(), asset["height"].as_u64()),
        (Some(64), Some(48))
    );
    assert_eq!(asset["bytes"].as_u64(), Some(bytes.len() as u64));
    assert_eq!(asset["sha256"].as_str().unwrap().len(), 64);
    let again: Value = a
        .upload(&token, bytes.clone(), "image/png")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["id"], asset["id"], "same bytes, same asset");

    assert_eq!(
        a.upload(&token, bytes.clone(), "image/jpeg").await.status(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(
        a.upload(&token, bytes.clone(), "text/html").await.status(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(
        a.upload(&token, b"<svg onload=alert(1)>".to_vec(), "image/png")
            .await
            .status(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let mut broken = bytes.clone();
    broken.truncate(60);
    let r = a.upload(&token, broken, "image/png").await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "UNDECODABLE_IMAGE"
    );
    let bearer = format!("Bearer {token}");
    let (status, body) = tollgate_testkit::declare_body(
        &a.url("/v1/assets"),
        "POST",
        &[("authorization", &bearer), ("content-type", "image/png")],
        21 * 1024 * 1024,
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["code"], "PAYLOAD_TOO_LARGE");

    let id = asset["id"].as_str().unwrap();
    let own = a
        .http
        .get(a.url(&format!("/v1/assets/{id}/content")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), StatusCode::OK);
    assert_eq!(own.headers()["content-type"], "image/png");
    assert_eq!(own.bytes().await.unwrap().to_vec(), bytes);
    let theirs = a
        .http
        .get(a.url(&format!("/v1/assets/{id}/content")))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), StatusCode::NOT_FOUND);
    let anon = a
        .http
        .get(a.url(&format!("/v1/assets/{id}/content")))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), StatusCode::UNAUTHORIZED);
    let rev = a
        .http
        .get(a.url(&format!("/v1/assets/{id}/content")))
        .bearer_auth(&reviewer)
        .send()
        .await
        .unwrap();
    assert_eq!(rev.status(), StatusCode::OK);
}

async fn expired_keys_can_be_reused(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("u@example.com", Role::User, 10).await;
    let source = photo(&a, &token).await;
    assert_eq!(
        a.submit(&token, "old-key", &edit(&source)).await.status(),
        StatusCode::CREATED
    );
    // Within the window nothing expires.
    assert_eq!(a.db.tollgate.expire_idempotency_keys().await.unwrap(), 0);
    assert_eq!(
        a.submit(&token, "old-key", &edit(&source)).await.status(),
        StatusCode::ACCEPTED
    );
    // Past it, the key is freed: the same key makes a new job.
    let later = chrono::Utc::now() + chrono::Duration::seconds(1);
    assert_eq!(
        a.db.store().expire_idempotency_keys(later).await.unwrap(),
        1
    );
    assert_eq!(
        a.submit(&token, "old-key", &edit(&source)).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(a.balance(&u).await, 6);
}

mod retention {
    //! Retention (issue 27, 8): rows and objects aged with a clock the test
    //! sets (`purge_expired(now)`), counted purged and kept, on both
    //! backends and both object stores.
    use super::*;
    use chrono::{Duration, Utc};
    use tollgate::model::{AssetId, JobId, ParkedStage};
    use tollgate::storage::ObjectKey;
    use tollgate::store::NewParked;
    use tollgate::usecases::parked::DecisionRequest;
    use tollgate::usecases::retention::Purged;

    tollgate_testkit::both_backends!(
        retention_purges_what_nobody_needs_in_a_folder,
        retention_purges_what_nobody_needs_on_s3
    );

    async fn retention_purges_what_nobody_needs_in_a_folder(db: TestDb) {
        purges_what_nobody_needs(db.with_config(CONFIG).await).await;
    }

    async fn retention_purges_what_nobody_needs_on_s3(db: TestDb) {
        purges_what_nobody_needs(db.with_config(CONFIG).await.with_s3().await).await;
    }

    /// Webhooks to a closed port on loopback, tried once more a second
    /// later: they die, and retention may purge them.
    const CONFIG: &str =
        "webhook_allow_networks = \"127.0.0.0/8\"\nwebhook_retry_schedule = \"1s\"\n";

    async fn upload(db: &TestDb, u: &User, w: u32) -> AssetId {
        let png = tollgate_testkit::photo_of_a_dog(w, 48);
        db.tollgate
            .upload_asset(u, Some("image/png"), png.into())
            .await
            .unwrap()
            .id
    }

    async fn edit(db: &TestDb, u: &User, key: &str, photo: AssetId) -> JobId {
        let body = json!({"kind": "image_edit", "source": photo, "target": {"kind": "pet", "description": "the dog"},
                          "style": "origami", "strength": "balanced"});
        db.tollgate
            .submit_job(u, None, Some(key), &body)
            .await
            .unwrap()
            .job
            .id
    }

    async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
        tollgate_testkit::wait_until(what, std::time::Duration::from_secs(10), async || {
            done().await.then_some(())
        })
        .await
    }

    async fn asset_object(db: &TestDb, id: AssetId, owner: &User) -> Option<String> {
        // Read before it is purged: the key outlives the row's purge.
        let a = db.tollgate.visible_asset(owner, id).await.ok()?;
        Some(a.object_key)
    }

    async fn exists(db: &TestDb, key: &str) -> bool {
        let key = ObjectKey::parse(key).unwrap();
        db.tollgate.objects().head(&key).await.unwrap().is_some()
    }

    /// Parks `job` (claimed by the test) with one uncertain attempt.
    async fn park(db: &TestDb, job: JobId) {
        let claim = crate::parked::claim_one(db, job).await;
        let (a, first) = crate::parked::first_call(job, "0.04");
        let ops = vec![
            first,
            Op::Park(NewParked {
                stage: ParkedStage::SubmissionUncertain,
                evidence: ParkedEvidence::because("a test parks it"),
                provider: Some("http".into()),
                model: Some("local-clip".into()),
                provider_job_id: None,
                attempt_id: Some(a),
                polls: 0,
                deliveries: 0,
            }),
        ];
        let applied = db
            .store()
            .apply_one(Unit {
                job,
                token: claim.token,
                ops,
            })
            .await
            .unwrap();
        assert!(matches!(applied, Applied::Done(_)), "{applied:?}");
    }

    async fn purges_what_nobody_needs(db: TestDb) {
        let t = &db.tollgate;
        let ana = t
            .add_user("ana@example.com", Role::User, PASSWORD)
            .await
            .unwrap();
        let bo = t
            .add_user("bo@example.com", Role::User, PASSWORD)
            .await
            .unwrap();
        let judge = t
            .add_user("judge@example.com", Role::Reviewer, PASSWORD)
            .await
            .unwrap();
        for u in [&ana, &bo] {
            t.grant_credits(None, u.id, Credits(100), None, None)
                .await
                .unwrap();
        }
        let (ana, bo) = (t.user(ana.id).await.unwrap(), t.user(bo.id).await.unwrap());
        t.create_webhook_endpoint(
            &ana,
            "http://127.0.0.1:9/hook",
            &["generation.succeeded".into()],
        )
        .await
        .unwrap();
        // Photos: A (also uploaded by bo: one object), B, C, D (never used), E.
        let (pa, pb, pc, pd, pe) = (
            upload(&db, &ana, 64).await,
            upload(&db, &ana, 65).await,
            upload(&db, &ana, 66).await,
            upload(&db, &ana, 67).await,
            upload(&db, &ana, 68).await,
        );
        let pa_bo = upload(&db, &bo, 64).await;
        let key_a = asset_object(&db, pa, &ana).await.unwrap();
        let key_d = asset_object(&db, pd, &ana).await.unwrap();
        assert_eq!(
            asset_object(&db, pa_bo, &bo).await.unwrap(),
            key_a,
            "one object"
        );

        // Finished work: jA (photo A) and jL (photo E, repaired below).
        let engine = tollgate::engine::start(t.clone(), 4);
        let (ja, jl) = (
            edit(&db, &ana, "a", pa).await,
            edit(&db, &ana, "l", pe).await,
        );
        wait_until("both edits and their webhooks end", async || {
            let done = |id| async move {
                t.store().job(id).await.unwrap().unwrap().status == JobStatus::Succeeded
            };
            let dead = t
                .deliveries(
                    &ana,
                    &DeliveryQuery::parse(Some("dead"), None, Some(10), None).unwrap(),
                )
                .await
                .unwrap()
                .items
                .len();
            done(ja).await && done(jl).await && dead == 2
        })
        .await;
        engine.shutdown().await;
        // Work nobody may lose: a queued edit (B), a parked one (C), bo's
        // queued edit of his copy of A, and a queued repair of jL (E).
        let jb = edit(&db, &ana, "b", pb).await;
        let jc = edit(&db, &ana, "c", pc).await;
        park(&db, jc).await;
        edit(&db, &bo, "bo", pa_bo).await;
        t.submit_repair(
            &ana,
            None,
            jl,
            Some("r"),
            &json!({"instruction": "softer folds"}),
        )
        .await
        .unwrap();
        // A record a reviewer closed: its evidence ages with the history.
        let body = json!({"kind": "video", "prompt": "x", "duration_s": 2, "resolution": "720p"});
        let jx = t
            .submit_job(&ana, None, Some("x"), &body)
            .await
            .unwrap()
            .job
            .id;
        park(&db, jx).await;
        let rx = db.store().parked_for_job(jx).await.unwrap().unwrap();
        t.decide(
            &judge,
            rx.id,
            &DecisionRequest {
                action: tollgate::model::ReviewAction::AcceptFailure,
                evidence: "nothing was made".into(),
                provider_job_id: None,
                refund: Some(true),
                release_hold: Some(true),
            },
        )
        .await
        .unwrap();
        let output_a = t.job_output_content(&ana, ja).await;
        assert!(output_a.is_ok());

        let now = Utc::now();
        assert_eq!(
            t.purge_expired(now + Duration::days(29)).await.unwrap(),
            Purged::default(),
            "nothing is 30 days old"
        );

        // Past the media and deliveries age (30 days).
        let p = t.purge_expired(now + Duration::days(31)).await.unwrap();
        assert_eq!(
            (p.outputs, p.uploads, p.deliveries, p.events, p.evidence),
            (1, 2, 2, 0, 0),
            "jA's output; uploads A and D; the two dead deliveries: {p:?}"
        );
        assert!(
            t.job_output_content(&ana, ja).await.is_err(),
            "jA's output is gone"
        );
        assert!(
            t.job_output_content(&ana, jl).await.is_ok(),
            "a lineage with a repair to come keeps it"
        );
        for kept in [pb, pc, pe] {
            assert!(
                t.visible_asset(&ana, kept).await.is_ok(),
                "{kept} is still needed"
            );
        }
        assert!(t.visible_asset(&ana, pa).await.is_err());
        assert!(t.visible_asset(&ana, pd).await.is_err());
        assert!(t.visible_asset(&bo, pa_bo).await.is_ok());
        assert!(
            exists(&db, &key_a).await,
            "bo's upload still names A's bytes"
        );
        assert!(!exists(&db, &key_d).await, "D's bytes are deleted");
        assert!(!t.store().job_events(jc).await.unwrap().is_empty());
        assert_eq!(
            t.store().job(jb).await.unwrap().unwrap().status,
            JobStatus::Queued
        );
        let e = t
            .submit_repair(
                &ana,
                None,
                ja,
                Some("late"),
                &json!({"instruction": "again"}),
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("retention"), "{e}");
        // The same pass again purges nothing: it is idempotent.
        assert_eq!(
            t.purge_expired(now + Duration::days(31)).await.unwrap(),
            Purged::default()
        );

        // Past the history age (365 days): timelines and closed evidence.
        let p = t.purge_expired(now + Duration::days(366)).await.unwrap();
        assert!(p.events > 0 && p.evidence == 1, "{p:?}");
        assert!(t.store().job_events(ja).await.unwrap().is_empty());
        assert!(t.store().job_events(jx).await.unwrap().is_empty());
        assert!(
            !t.store().job_events(jc).await.unwrap().is_empty(),
            "an open record's job keeps its timeline"
        );
        let open = db.store().parked_for_job(jc).await.unwrap().unwrap();
        assert_eq!(
            open.evidence.reason, "a test parks it",
            "an open record keeps its evidence"
        );
        let closed = db.store().parked(rx.id).await.unwrap().unwrap();
        assert!(closed.evidence.reason.contains("retention"));
        assert_eq!(
            t.purge_expired(now + Duration::days(366)).await.unwrap(),
            Purged::default()
        );
        // What this node purged is counted for /metrics.
        let counted: u64 = t.purge_counters().snapshot().iter().map(|(_, n)| n).sum();
        assert_eq!(counted, 5 + p.total());

        // Uploading D again brings it back, bytes and all.
        assert_eq!(upload(&db, &ana, 67).await, pd);
        assert!(exists(&db, &key_d).await);
        assert!(t.visible_asset(&ana, pd).await.is_ok());
    }
}

mod fair_use {
    //! Issue 29, 2: one person cannot take more than their share of paid
    //! work at once: past their burst, 429 `RATE_LIMITED` with
    //! `Retry-After`, and nothing is charged; replays are never limited.
    use super::*;

    tollgate_testkit::both_backends!(
        paid_requests_past_a_persons_burst_are_refused_and_charge_nothing
    );

    async fn paid_requests_past_a_persons_burst_are_refused_and_charge_nothing(db: TestDb) {
        let db = db
            .with_config("jobs_per_user_per_minute = 1\njobs_burst_per_user = 5\n")
            .await;
        let a = Arc::new(api(db).await);
        let (u, token) = a.person("burst@example.com", Role::User, 100).await;
        let (_, other) = a.person("calm@example.com", Role::User, 100).await;
        let source = photo(&a, &token).await;
        let calm_source = photo(&a, &other).await;
        let n = 12;
        let barrier = Arc::new(Barrier::new(n));
        let mut tasks = Vec::new();
        for i in 0..n {
            let (a, b, token, body) = (a.clone(), barrier.clone(), token.clone(), edit(&source));
            tasks.push(tokio::spawn(async move {
                b.wait().await;
                let r = a.submit(&token, &format!("burst-{i}"), &body).await;
                let retry_after = r
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_string());
                let status = r.status();
                let v: Value = r.json().await.unwrap();
                (status, retry_after, v, format!("burst-{i}"))
            }));
        }
        let mut made = Vec::new();
        for t in tasks {
            let (status, retry_after, v, key) = t.await.unwrap();
            match status {
                StatusCode::CREATED => made.push((key, v["credits"].as_i64().unwrap())),
                StatusCode::TOO_MANY_REQUESTS => {
                    assert_eq!(v["error"]["code"], "RATE_LIMITED", "{v}");
                    let s: u64 = retry_after.expect("a Retry-After").parse().unwrap();
                    assert!((1..=60).contains(&s), "{s}");
                }
                other => panic!("{other}: {v}"),
            }
        }
        assert_eq!(made.len(), 5, "exactly the burst");
        let jobs =
            a.db.tollgate
                .list_jobs(&u, &JobQuery::parse(None, Some(100), None).unwrap())
                .await
                .unwrap()
                .items;
        assert_eq!(jobs.len(), 5, "no job for a refused request");
        let charged: i64 = made.iter().map(|(_, c)| c).sum();
        assert_eq!(
            a.balance(&u).await,
            100 - charged,
            "nothing charged past the burst"
        );
        // A replay of a job already made is never limited; a new one is.
        let replay = a.submit(&token, &made[0].0, &edit(&source)).await;
        assert_eq!(replay.status(), StatusCode::ACCEPTED);
        let fresh = a.submit(&token, "burst-new", &edit(&source)).await;
        assert_eq!(fresh.status(), StatusCode::TOO_MANY_REQUESTS);
        // Somebody else's bucket is their own, and requests racing under
        // one key are one request: twenty at once take one token and make
        // one job (rule 1), though the bucket holds five.
        let n = 20;
        let barrier = Arc::new(Barrier::new(n));
        let mut tasks = Vec::new();
        for _ in 0..n {
            let (a, b, token, body) = (
                a.clone(),
                barrier.clone(),
                other.clone(),
                edit(&calm_source),
            );
            tasks.push(tokio::spawn(async move {
                b.wait().await;
                let r = a.submit(&token, "calm-1", &body).await;
                let status = r.status();
                let v: Value = r.json().await.unwrap();
                (status, v["id"].as_str().map(str::to_string))
            }));
        }
        let mut ids = std::collections::HashSet::new();
        for t in tasks {
            let (status, id) = t.await.unwrap();
            assert!(
                matches!(status, StatusCode::CREATED | StatusCode::ACCEPTED),
                "{status}"
            );
            ids.insert(id.unwrap());
        }
        assert_eq!(ids.len(), 1, "one job");
        let calm = a.submit(&other, "calm-2", &edit(&calm_source)).await;
        assert_eq!(
            calm.status(),
            StatusCode::CREATED,
            "that took one token of five"
        );
    }
}
