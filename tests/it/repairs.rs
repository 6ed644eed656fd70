//! Repairs and lineages (rule 14) through the API, on both backends: a
//! repair that improves is delivered; one that does not keeps the previous
//! version readable and stops the lineage; two per lineage even when ten
//! race; settings frozen; replays; who may repair what; a cancelled repair
//! refunded with its slot given back; a result whose review found issues
//! repaired once for free.

use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Barrier;
use tollgate::model::Role;
use tollgate::store::User;
use tollgate_testkit::{both_backends, wait_until, Api, TestDb};

async fn api(db: TestDb) -> Api {
    Api::serve(db).await
}

/// An edit of a photo of a dog, ordered through the API.
async fn order(a: &Api, u: &User, token: &str, key: &str) -> Value {
    let source =
        a.db.tollgate
            .upload_asset(
                u,
                Some("image/png"),
                tollgate_testkit::photo_of_a_dog(160, 120).into(),
            )
            .await
            .unwrap();
    let body = json!({"kind": "image_edit", "source": source.id,
        "target": {"kind": "pet", "description": "the dog"},
        "style": "cross_stitch", "strength": "balanced"});
    let (s, job) = a.post(token, "/v1/jobs", Some(key), &body).await;
    assert_eq!(s, StatusCode::CREATED, "{job}");
    job
}

/// Waits (bounded) until the job is terminal, and reads it.
async fn settled(a: &Api, token: &str, id: &str) -> Value {
    wait_until(
        &format!("job {id} finishes"),
        Duration::from_secs(30),
        async || {
            let (_, j) = a.get(token, &format!("/v1/jobs/{id}")).await;
            ["succeeded", "failed", "cancelled"]
                .contains(&j["status"].as_str().unwrap_or(""))
                .then_some(j)
        },
    )
    .await
}

/// Whether a repair's charge was given back as it was ordered.
async fn waived(a: &Api, job: &Value) -> bool {
    let id: tollgate::model::JobId = job["id"].as_str().unwrap().parse().unwrap();
    a.db.history(id).await.iter().any(|e| e.kind() == "waived")
}

/// An edit, run to success.
async fn delivered_edit(a: &Api, u: &User, token: &str) -> Value {
    delivered_edit_under(a, u, token, "original").await
}

async fn delivered_edit_under(a: &Api, u: &User, token: &str, key: &str) -> Value {
    let job = order(a, u, token, key).await;
    let engine = tollgate::engine::start(a.db.tollgate.clone(), 1);
    let job = settled(a, token, job["id"].as_str().unwrap()).await;
    engine.shutdown().await;
    assert_eq!(job["status"], "succeeded", "{job}");
    job
}

fn repairs_of(id: &Value) -> String {
    format!("/v1/jobs/{}/repairs", id.as_str().unwrap())
}

both_backends!(
    a_repair_that_improves_is_delivered,
    a_repair_that_changes_nothing_keeps_the_previous_and_stops,
    racing_repairs_take_two_and_no_more,
    repairs_keep_their_settings_and_replay,
    only_the_owner_repairs_an_edit_that_succeeded,
    a_cancelled_repair_is_refunded_and_gives_its_slot_back,
    a_flagged_result_is_repaired_once_for_free,
    racing_repairs_of_a_flagged_result_make_one_free,
    the_person_chooses_which_version_is_theirs,
    a_choice_racing_a_repair_leaves_the_repair_on_the_persons_version,
);

async fn a_repair_that_improves_is_delivered(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("owner@example.com", Role::User, 20).await;
    let original = delivered_edit(&a, &u, &token).await;
    assert_eq!(original["lineage"]["repairs_left"], 2);
    assert_eq!(original["lineage"]["parent"], Value::Null);
    let before = a.balance(&u).await;
    let (s, repair) = a
        .post(
            &token,
            &repairs_of(&original["id"]),
            Some("r1"),
            &json!({"instruction": "make the stitches bolder"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{repair}");
    // Charged like its parent.
    assert_eq!(repair["credits"], original["credits"]);
    assert_eq!(
        a.balance(&u).await,
        before - original["credits"].as_i64().unwrap()
    );
    assert_eq!(repair["lineage"]["root"], original["id"]);
    assert_eq!(repair["lineage"]["parent"], original["id"]);
    assert_eq!(repair["lineage"]["repairs_left"], 1);
    assert_eq!(repair["request"], original["request"]);

    let engine = tollgate::engine::start(a.db.tollgate.clone(), 1);
    let done = settled(&a, &token, repair["id"].as_str().unwrap()).await;
    engine.shutdown().await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["lineage"]["outcome"], "improved", "{done}");
    assert_eq!(done["lineage"]["retained_previous"], false);
    assert_eq!(done["lineage"]["candidate_url"], Value::Null);
    let own = format!("/v1/jobs/{}/output", done["id"].as_str().unwrap());
    assert_eq!(done["output"]["url"], own.as_str());

    let (s, lineage) = a
        .get(
            &token,
            &format!("/v1/jobs/{}/lineage", original["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(lineage["root"], original["id"]);
    assert_eq!(lineage["delivered"], done["id"]);
    assert_eq!(lineage["repairs_left"], 1);
    let versions = lineage["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0]["job"]["id"], original["id"]);
    assert_eq!(versions[0]["instruction"], Value::Null);
    assert_eq!(versions[1]["instruction"], "make the stitches bolder");
    // A page of jobs carries each one's lineage, read for the page at once.
    let (_, page) = a.get(&token, "/v1/jobs").await;
    let listed: Vec<(Value, Value)> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].clone(), j["lineage"]["repairs_left"].clone()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (done["id"].clone(), json!(1)),
            (original["id"].clone(), json!(1))
        ]
    );
    // The same lineage from any version.
    let (_, again) = a
        .get(
            &token,
            &format!("/v1/jobs/{}/lineage", done["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(again["delivered"], lineage["delivered"]);

    // The next repair is made on the delivered version.
    let (s, next) = a
        .post(
            &token,
            &repairs_of(&original["id"]),
            Some("r2"),
            &json!({"instruction": "bolder still"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{next}");
    assert_eq!(next["lineage"]["parent"], done["id"]);
    assert_eq!(next["lineage"]["repairs_left"], 0);
    // The timeline says what the comparison found.
    let (_, events) = a
        .get(
            &token,
            &format!("/v1/jobs/{}/events", done["id"].as_str().unwrap()),
        )
        .await;
    assert!(
        events["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["detail"]["step"] == "compare" && e["detail"]["outcome"] == "improved"),
        "{events}"
    );
}

async fn a_repair_that_changes_nothing_keeps_the_previous_and_stops(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("owner@example.com", Role::User, 20).await;
    let original = delivered_edit(&a, &u, &token).await;
    let (s, repair) = a
        .post(
            &token,
            &repairs_of(&original["id"]),
            Some("r1"),
            &json!({"instruction": "keep the leash photographic"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{repair}");
    let engine = tollgate::engine::start(a.db.tollgate.clone(), 1);
    let done = settled(&a, &token, repair["id"].as_str().unwrap()).await;
    engine.shutdown().await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["lineage"]["outcome"], "unchanged", "{done}");
    assert_eq!(done["lineage"]["retained_previous"], true);
    assert_eq!(done["lineage"]["repairs_left"], 0);
    // The person keeps the version they had; the candidate stays readable.
    let previous = format!("/v1/jobs/{}/output", original["id"].as_str().unwrap());
    assert_eq!(done["output"]["url"], previous.as_str());
    let candidate = done["lineage"]["candidate_url"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        candidate,
        format!("/v1/jobs/{}/output", done["id"].as_str().unwrap())
    );
    let (s, bytes) = a.bytes(&token, &candidate).await;
    assert_eq!(s, StatusCode::OK);
    assert!(!bytes.is_empty());
    let (_, lineage) = a
        .get(
            &token,
            &format!("/v1/jobs/{}/lineage", done["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(lineage["delivered"], original["id"]);
    // Repairs stopped on this lineage, whichever version is named.
    let before = a.balance(&u).await;
    for of in [&original["id"], &done["id"]] {
        let (s, e) = a
            .post(
                &token,
                &repairs_of(of),
                Some("r2"),
                &json!({"instruction": "try again"}),
            )
            .await;
        assert_eq!(s, StatusCode::CONFLICT, "{e}");
        assert_eq!(e["error"]["code"], "REPAIRS_STOPPED");
    }
    assert_eq!(a.balance(&u).await, before);
    // A replay of the first repair still answers it.
    let (s, replay) = a
        .post(
            &token,
            &repairs_of(&original["id"]),
            Some("r1"),
            &json!({"instruction": "keep the leash photographic"}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{replay}");
    assert_eq!(replay["id"], done["id"]);
}

async fn racing_repairs_take_two_and_no_more(db: TestDb) {
    let a = Arc::new(api(db).await);
    let (u, token) = a.person("owner@example.com", Role::User, 100).await;
    let original = delivered_edit(&a, &u, &token).await;
    let before = a.balance(&u).await;
    let barrier = Arc::new(Barrier::new(10));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (a, token, barrier) = (a.clone(), token.clone(), barrier.clone());
        let path = repairs_of(&original["id"]);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            a.post(
                &token,
                &path,
                Some(&format!("race-{i}")),
                &json!({"instruction": format!("bolder, take {i}")}),
            )
            .await
        }));
    }
    let mut created = 0;
    for t in tasks {
        let (s, body) = t.await.unwrap();
        match s {
            StatusCode::CREATED => created += 1,
            StatusCode::CONFLICT => assert_eq!(body["error"]["code"], "REPAIR_LIMIT_REACHED"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(created, 2);
    let root: tollgate::model::JobId = original["id"].as_str().unwrap().parse().unwrap();
    let versions = a.db.store().lineage_versions(root).await.unwrap();
    assert_eq!(versions.len(), 3);
    let credits = original["credits"].as_i64().unwrap();
    assert_eq!(a.balance(&u).await, before - 2 * credits);
    let state = a.db.store().lineage(root).await.unwrap().unwrap();
    assert_eq!(state.repairs_used, 2);
}

async fn repairs_keep_their_settings_and_replay(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("owner@example.com", Role::User, 20).await;
    let original = delivered_edit(&a, &u, &token).await;
    let path = repairs_of(&original["id"]);
    let before = a.balance(&u).await;
    for (body, field) in [
        (json!({"instruction": "bolder", "style": "quilt"}), "style"),
        (
            json!({"instruction": "bolder", "strength": "strong"}),
            "strength",
        ),
        (json!({"instruction": ""}), "instruction"),
        (json!({"instruction": "x".repeat(501)}), "instruction"),
        (json!({"instruction": 7}), "instruction"),
        (json!({}), "instruction"),
    ] {
        let (s, e) = a.post(&token, &path, Some("bad"), &body).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {e}");
        assert_eq!(e["error"]["code"], "INVALID_REQUEST");
        assert!(e["error"]["details"]["fields"][field].is_string(), "{e}");
    }
    let (s, e) = a
        .post(&token, &path, None, &json!({"instruction": "bolder"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(e["error"]["code"], "IDEMPOTENCY_KEY_REQUIRED");
    assert_eq!(a.balance(&u).await, before, "nothing was charged");

    let body = json!({"instruction": "bolder"});
    let (s, first) = a.post(&token, &path, Some("k"), &body).await;
    assert_eq!(s, StatusCode::CREATED, "{first}");
    let (s, replay) = a.post(&token, &path, Some("k"), &body).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_eq!(replay["id"], first["id"]);
    let (s, e) = a
        .post(&token, &path, Some("k"), &json!({"instruction": "subtler"}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(e["error"]["code"], "IDEMPOTENCY_CONFLICT");
    // The original's key for another repair is a conflict too.
    let (s, _) = a.post(&token, &path, Some("original"), &body).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(
        a.balance(&u).await,
        before - original["credits"].as_i64().unwrap(),
        "one repair charged once"
    );
}

async fn only_the_owner_repairs_an_edit_that_succeeded(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("owner@example.com", Role::User, 20).await;
    let (_, stranger) = a.person("stranger@example.com", Role::User, 20).await;
    let (_, reviewer) = a.person("reviewer@example.com", Role::Reviewer, 0).await;
    let original = delivered_edit(&a, &u, &token).await;
    let body = json!({"instruction": "bolder"});
    let (s, e) = a
        .post(&stranger, &repairs_of(&original["id"]), Some("s"), &body)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{e}");
    let (s, _) = a
        .get(
            &stranger,
            &format!("/v1/jobs/{}/lineage", original["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // A reviewer sees the job, but a repair is its owner's to ask for.
    let (s, e) = a
        .post(&reviewer, &repairs_of(&original["id"]), Some("s"), &body)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{e}");
    let (s, _) = a
        .post(&token, "/v1/jobs/not-a-uuid/repairs", Some("s"), &body)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // A job still queued, and one cancelled, cannot be repaired.
    let queued = order(&a, &u, &token, "second").await;
    let (s, e) = a
        .post(&token, &repairs_of(&queued["id"]), Some("q"), &body)
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    let (s, _) = a
        .post(
            &token,
            &format!("/v1/jobs/{}/cancel", queued["id"].as_str().unwrap()),
            None,
            &json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, e) = a
        .post(&token, &repairs_of(&queued["id"]), Some("c"), &body)
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cancelled"));
}

async fn a_cancelled_repair_is_refunded_and_gives_its_slot_back(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("owner@example.com", Role::User, 20).await;
    let original = delivered_edit(&a, &u, &token).await;
    let path = repairs_of(&original["id"]);
    let before = a.balance(&u).await;
    let (_, r1) = a
        .post(&token, &path, Some("r1"), &json!({"instruction": "bolder"}))
        .await;
    let (_, r2) = a
        .post(
            &token,
            &path,
            Some("r2"),
            &json!({"instruction": "subtler"}),
        )
        .await;
    let (s, e) = a
        .post(&token, &path, Some("r3"), &json!({"instruction": "again"}))
        .await;
    assert_eq!(
        (s, e["error"]["code"].clone()),
        (StatusCode::CONFLICT, json!("REPAIR_LIMIT_REACHED"))
    );
    let (s, cancelled) = a
        .post(
            &token,
            &format!("/v1/jobs/{}/cancel", r2["id"].as_str().unwrap()),
            None,
            &json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["lineage"]["repairs_left"], 1);
    let credits = original["credits"].as_i64().unwrap();
    assert_eq!(
        a.balance(&u).await,
        before - credits,
        "the cancelled repair is refunded"
    );
    // A second cancel refunds nothing and frees nothing more.
    a.post(
        &token,
        &format!("/v1/jobs/{}/cancel", r2["id"].as_str().unwrap()),
        None,
        &json!({}),
    )
    .await;
    let (s, r3) = a
        .post(&token, &path, Some("r3b"), &json!({"instruction": "again"}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{r3}");
    let (s, _) = a
        .post(&token, &path, Some("r4"), &json!({"instruction": "more"}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(a.balance(&u).await, before - 2 * credits);
    assert_ne!(r1["id"], r3["id"]);
}

/// An API over a model at the mock provider, whose answer (a gradient of
/// the photo's shape) the local review finds issues with: it changed the
/// whole picture, not the dog.
async fn api_with_flagged_results(db: TestDb) -> (Api, tollgate_testkit::MockServer) {
    let m = tollgate_testkit::MockServer::start(Default::default()).await;
    let config = format!(
        "[[models]]\nid = \"m\"\nkind = \"image_edit\"\nprovider = \"http\"\nendpoint = \"{}\"\n\
         price = {{ per_generation = \"0.10\" }}\npoll_ms = 30\nbackoff_ms = 30\ndefault = true\n",
        m.base
    );
    (api(db.with_config(&config).await).await, m)
}

async fn a_flagged_result_is_repaired_once_for_free(db: TestDb) {
    let (a, _mock) = api_with_flagged_results(db).await;
    let (u, token) = a.person("owner@example.com", Role::User, 20).await;
    let original = delivered_edit(&a, &u, &token).await;
    assert_eq!(original["review"]["verdict"], "issues", "{original}");
    let credits = original["credits"].as_i64().unwrap();
    assert!(credits > 0);
    let path = repairs_of(&original["id"]);
    let version: tollgate::model::JobId = original["id"].as_str().unwrap().parse().unwrap();
    // What the store judges before each repair, as `submit_repair` will.
    let free_next = async || a.db.store().repair_is_free(version).await.unwrap();
    assert!(free_next().await, "a flagged result's first repair is free");
    let before = a.balance(&u).await;
    let (s, free) = a
        .post(
            &token,
            &path,
            Some("r1"),
            &json!({"instruction": "only the dog"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{free}");
    // Charged like its parent, and the charge given back at once.
    assert_eq!(free["credits"], credits, "{free}");
    assert_eq!(a.balance(&u).await, before, "nothing paid");
    assert!(waived(&a, &free).await);
    // While the free one is live, the next repair is charged.
    assert!(!free_next().await);
    let (s, paid) = a
        .post(
            &token,
            &path,
            Some("r2"),
            &json!({"instruction": "only the dog, bolder"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{paid}");
    assert_eq!(paid["credits"], credits);
    assert!(!waived(&a, &paid).await);
    assert_eq!(a.balance(&u).await, before - credits);
    // Cancelling the free one refunds nothing (nothing was paid) and gives
    // its slot back, once; the repair after it is free again.
    let cancel = format!("/v1/jobs/{}/cancel", free["id"].as_str().unwrap());
    for _ in 0..2 {
        let (s, c) = a.post(&token, &cancel, None, &json!({})).await;
        assert_eq!(
            (s, c["status"].clone()),
            (StatusCode::OK, json!("cancelled"))
        );
        assert_eq!(c["lineage"]["repairs_left"], 1, "{c}");
    }
    assert_eq!(a.balance(&u).await, before - credits);
    assert!(
        free_next().await,
        "the cancelled free repair's slot is back"
    );
    let (s, again) = a
        .post(
            &token,
            &path,
            Some("r3"),
            &json!({"instruction": "the dog only"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{again}");
    assert!(waived(&a, &again).await);
    assert!(!free_next().await);
    let (s, full) = a
        .post(&token, &path, Some("r4"), &json!({"instruction": "more"}))
        .await;
    assert_eq!(
        (s, full["error"]["code"].clone()),
        (StatusCode::CONFLICT, json!("REPAIR_LIMIT_REACHED"))
    );
    assert_eq!(a.balance(&u).await, before - credits);
    // The free repair fails like any other: nothing to refund, and the
    // ledger still adds up (checked by `balance`).
    let engine = tollgate::engine::start(a.db.tollgate.clone(), 1);
    let done = settled(&a, &token, again["id"].as_str().unwrap()).await;
    engine.shutdown().await;
    assert!(
        ["succeeded", "failed"].contains(&done["status"].as_str().unwrap()),
        "{done}"
    );
    assert_eq!(a.balance(&u).await, before - credits);
}

async fn racing_repairs_of_a_flagged_result_make_one_free(db: TestDb) {
    let (a, _mock) = api_with_flagged_results(db).await;
    let a = Arc::new(a);
    let (u, token) = a.person("owner@example.com", Role::User, 100).await;
    let original = delivered_edit(&a, &u, &token).await;
    assert_eq!(original["review"]["verdict"], "issues", "{original}");
    let before = a.balance(&u).await;
    let barrier = Arc::new(Barrier::new(10));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (a, token, barrier) = (a.clone(), token.clone(), barrier.clone());
        let path = repairs_of(&original["id"]);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            a.post(
                &token,
                &path,
                Some(&format!("race-{i}")),
                &json!({"instruction": format!("take {i}")}),
            )
            .await
        }));
    }
    let mut given_back = Vec::new();
    for t in tasks {
        let (s, body) = t.await.unwrap();
        if s == StatusCode::CREATED {
            given_back.push(waived(&a, &body).await);
        }
    }
    given_back.sort();
    assert_eq!(
        given_back,
        vec![false, true],
        "two made: one free, one charged"
    );
    let credits = original["credits"].as_i64().unwrap();
    assert_eq!(a.balance(&u).await, before - credits);
}

/// Issue 33, 6: after a repair was delivered, the person takes the first
/// edit back. The lineage says so, the next repair is made on (and
/// compared with) the chosen version, and nobody else, no unfinished
/// version and no moment while a repair runs can choose.
async fn the_person_chooses_which_version_is_theirs(db: TestDb) {
    let a = api(db).await;
    let (u, token) = a.person("chooser@example.com", Role::User, 40).await;
    let (other, _) = a.person("other@example.com", Role::Admin, 0).await;
    let t = a.db.tollgate.clone();
    let original = delivered_edit(&a, &u, &token).await;
    let first: tollgate::model::JobId = original["id"].as_str().unwrap().parse().unwrap();

    // Nothing repaired yet: the first edit is already theirs.
    let state = t.choose_version(&u, first).await.unwrap();
    assert_eq!(state.delivered, first);

    let (s, repair) = a
        .post(
            &token,
            &repairs_of(&original["id"]),
            Some("c1"),
            &json!({"instruction": "make the stitches bolder"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{repair}");
    let repaired: tollgate::model::JobId = repair["id"].as_str().unwrap().parse().unwrap();
    // A version that has not finished is never chosen.
    match t.choose_version(&u, repaired).await {
        Err(e) => assert_eq!(e.code(), "NOT_CHOOSABLE", "{e:?}"),
        Ok(s) => panic!("an unfinished version was chosen: {s:?}"),
    }
    // While the repair runs, its comparison is with the version it was made on.
    match t.choose_version(&u, first).await {
        Err(e) => assert_eq!(e.code(), "REPAIR_UNDER_WAY", "{e:?}"),
        Ok(s) => panic!("chosen while a repair runs: {s:?}"),
    }
    let engine = tollgate::engine::start(t.clone(), 1);
    let done = settled(&a, &token, repair["id"].as_str().unwrap()).await;
    engine.shutdown().await;
    assert_eq!(done["lineage"]["outcome"], "improved", "{done}");
    assert_eq!(t.lineage(&u, first).await.unwrap().0.delivered, repaired);

    // Someone else cannot choose for them, not even an admin.
    match t.choose_version(&other, first).await {
        Err(e) => assert_eq!(e.code(), "NOT_FOUND", "{e:?}"),
        Ok(s) => panic!("another person chose: {s:?}"),
    }
    // The person takes the first edit back.
    let state = t.choose_version(&u, first).await.unwrap();
    assert_eq!(state.delivered, first);
    let (_, lineage) = a
        .get(
            &token,
            &format!("/v1/jobs/{}/lineage", repair["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(lineage["delivered"], original["id"], "{lineage}");
    // The next repair is made on the version they chose.
    let (s, next) = a
        .post(
            &token,
            &repairs_of(&original["id"]),
            Some("c2"),
            &json!({"instruction": "softer"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{next}");
    assert_eq!(next["lineage"]["parent"], original["id"]);
    let engine = tollgate::engine::start(t.clone(), 1);
    let last = settled(&a, &token, next["id"].as_str().unwrap()).await;
    engine.shutdown().await;
    assert_eq!(last["status"], "succeeded", "{last}");
    let (_, events) = a
        .get(
            &token,
            &format!("/v1/jobs/{}/events", next["id"].as_str().unwrap()),
        )
        .await;
    assert!(
        events["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["detail"]["step"] == "compare" && e["detail"]["against"] == original["id"]),
        "compared with the chosen version: {events}"
    );
}

/// A person's choice and a repair ordered at the same moment: whichever
/// goes first, a repair under way works on the version the lineage says
/// is theirs (its comparison is with that one), and a choice made while a
/// repair runs is refused. Three lineages, each raced behind a barrier.
async fn a_choice_racing_a_repair_leaves_the_repair_on_the_persons_version(db: TestDb) {
    let a = Arc::new(api(db).await);
    let t = a.db.tollgate.clone();
    for round in 0..3 {
        // A person a round: an edit is ordered under one key per person.
        let (u, token) = a
            .person(&format!("racer{round}@example.com"), Role::User, 100)
            .await;
        let original = delivered_edit(&a, &u, &token).await;
        let first: tollgate::model::JobId = original["id"].as_str().unwrap().parse().unwrap();
        let (s, repair) = a
            .post(
                &token,
                &repairs_of(&original["id"]),
                Some(&format!("improve-{round}")),
                &json!({"instruction": "make the stitches bolder"}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{repair}");
        let engine = tollgate::engine::start(t.clone(), 1);
        settled(&a, &token, repair["id"].as_str().unwrap()).await;
        engine.shutdown().await;
        let barrier = Arc::new(Barrier::new(2));
        let choose = {
            let (t, u, barrier) = (t.clone(), u.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                t.choose_version(&u, first).await
            })
        };
        let order = {
            let (a, token, barrier) = (a.clone(), token.clone(), barrier.clone());
            let path = repairs_of(&original["id"]);
            tokio::spawn(async move {
                barrier.wait().await;
                a.post(
                    &token,
                    &path,
                    Some(&format!("race-{round}")),
                    &json!({"instruction": "softer"}),
                )
                .await
            })
        };
        let chosen = choose.await.unwrap();
        let (s, raced) = order.await.unwrap();
        assert_eq!(s, StatusCode::CREATED, "{raced}");
        let raced: tollgate::model::JobId = raced["id"].as_str().unwrap().parse().unwrap();
        let state = a.db.store().lineage(first).await.unwrap().unwrap();
        let job = a.db.store().job(raced).await.unwrap().unwrap();
        assert_eq!(
            job.repair_of,
            Some(state.delivered),
            "round {round}: the repair works on the person's version (chosen: {chosen:?})"
        );
        if let Err(e) = chosen {
            assert_eq!(e.code(), "REPAIR_UNDER_WAY", "{e:?}");
        }
    }
}
