//! The `/v1` API over HTTP, on both backends: the error shape, every role
//! against every route group, tokens, and hostile bodies.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tollgate::model::Role;
use tollgate_testkit::api::PASSWORD;
use tollgate_testkit::both_backends;
use tollgate_testkit::{Api, TestDb};

/// The API served on a free port (testkit's one client).
async fn spawn(db: TestDb) -> Api {
    Api::serve(db).await
}

/// A new person's API token.
async fn token_for(s: &Api, email: &str, role: Role) -> String {
    s.person(email, role, 0).await.1
}

fn assert_error_shape(body: &Value, code: &str) {
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(body["error"]["details"].is_object(), "{body}");
}

both_backends!(
    me_needs_a_valid_token,
    every_role_against_every_route_group,
    credits_show_balance_and_history,
    hostile_bodies_get_the_error_shape,
    api_grants_are_idempotent_by_key,
    health_and_readiness,
    budget_days_are_admin_controlled,
    metrics_speak_prometheus,
    the_openapi_document_describes_what_is_served,
    answers_carrying_secrets_are_never_stored_by_a_cache,
);

/// `GET /v1/openapi.json` is the document the code generates from the
/// routes; every path and method in it is routed (an admin's call never
/// meets the router's 404 or 405); every operation names its errors and
/// its ways in.
async fn the_openapi_document_describes_what_is_served(db: TestDb) {
    let s = spawn(db).await;
    let admin = token_for(&s, "admin@example.com", Role::Admin).await;
    let doc: Value = s
        .http
        .get(s.url("/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(
        doc,
        serde_json::to_value(tollgate::api::document()).unwrap()
    );
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["bearer_token"]["scheme"], "bearer");
    assert_eq!(schemes["session_cookie"]["in"], "cookie");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 20);
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            assert!(op["operationId"].is_string(), "{method} {path}");
            if path.starts_with("/v1/") && path != "/v1/openapi.json" {
                assert!(op["security"].is_array(), "{method} {path} names no way in");
                assert!(op["responses"]["401"].is_object(), "{method} {path}");
            }
        }
    }
    // Every reference resolves (schemathesis refuses an operation whose
    // schema names a component the document does not have).
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get("$ref") {
                    out.push(r);
                }
                o.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("an unexpected reference {r}"));
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{r} does not resolve"
        );
    }
    // POST /v1/jobs links to the job's own operations (the stateful phase
    // of schemathesis follows them).
    let links = &doc["paths"]["/v1/jobs"]["post"]["responses"]["201"]["links"];
    for op in [
        "get_job",
        "list_attempts",
        "list_events",
        "get_output",
        "cancel_job",
    ] {
        assert!(
            links
                .as_object()
                .unwrap()
                .values()
                .any(|l| l["operationId"] == op),
            "no link to {op}: {links}"
        );
    }
    // The check below can tell an unrouted path.
    let r = s
        .http
        .get(s.url("/v1/nowhere"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        "route not found"
    );
    let some_id = "00000000-0000-4000-8000-000000000000";
    for (path, item) in paths {
        let concrete = path.replace("{id}", some_id).replace("{day}", "2026-01-01");
        for method in item.as_object().unwrap().keys() {
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let r = s
                .http
                .request(m, s.url(&concrete))
                .bearer_auth(&admin)
                .header("Idempotency-Key", "openapi-check")
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            let unrouted = status == 404 && body["error"]["message"] == "route not found";
            assert!(
                status != 405 && !unrouted,
                "{method} {path} is not served: {status} {body}"
            );
        }
    }
}

async fn me_needs_a_valid_token(db: TestDb) {
    let s = spawn(db).await;
    let token = token_for(&s, "Ana@example.com", Role::User).await;

    let r = s
        .http
        .get(s.url("/v1/me"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let me: Value = r.json().await.unwrap();
    assert_eq!(me["email"], "ana@example.com");
    assert_eq!(me["role"], "user");
    assert!(me["id"].as_str().unwrap().len() == 36);

    let r = s.http.get(s.url("/v1/me")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_error_shape(&r.json().await.unwrap(), "UNAUTHENTICATED");

    for bad in ["tg_notarealtoken", "Basic abc", &token[..token.len() - 1]] {
        let r = s
            .http
            .get(s.url("/v1/me"))
            .header("authorization", format!("Bearer {bad}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{bad}");
    }
}

async fn every_role_against_every_route_group(db: TestDb) {
    let s = spawn(db).await;
    let target =
        s.db.tollgate
            .add_user("target@example.com", Role::User, PASSWORD)
            .await
            .unwrap();
    let tokens = [
        (None, "anonymous"),
        (
            Some(token_for(&s, "user@example.com", Role::User).await),
            "user",
        ),
        (
            Some(token_for(&s, "reviewer@example.com", Role::Reviewer).await),
            "reviewer",
        ),
        (
            Some(token_for(&s, "admin@example.com", Role::Admin).await),
            "admin",
        ),
    ];
    // (method, path, body, least role) for each route group.
    let grant_path = format!("/v1/users/{}/credit-grants", target.id);
    let routes: Vec<(&str, String, Option<Value>, Role)> = vec![
        ("GET", "/v1/me".into(), None, Role::User),
        ("GET", "/v1/credits".into(), None, Role::User),
        ("GET", "/v1/users".into(), None, Role::Admin),
        ("POST", grant_path, Some(json!({"amount": 1})), Role::Admin),
    ];
    for (token, who) in &tokens {
        let role = match *who {
            "user" => Some(Role::User),
            "reviewer" => Some(Role::Reviewer),
            "admin" => Some(Role::Admin),
            _ => None,
        };
        for (method, path, body, least) in &routes {
            let mut req = match *method {
                "GET" => s.http.get(s.url(path)),
                _ => s.http.post(s.url(path)),
            };
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            let r = req.send().await.unwrap();
            let expected = match role {
                None => StatusCode::UNAUTHORIZED,
                Some(r) if r.allows(*least) => {
                    if *method == "POST" {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    }
                }
                Some(_) => StatusCode::FORBIDDEN,
            };
            assert_eq!(r.status(), expected, "{who} {method} {path}");
            if !expected.is_success() {
                let code = if expected == StatusCode::FORBIDDEN {
                    "FORBIDDEN"
                } else {
                    "UNAUTHENTICATED"
                };
                assert_error_shape(&r.json().await.unwrap(), code);
            }
        }
    }
}

async fn credits_show_balance_and_history(db: TestDb) {
    let s = spawn(db).await;
    let token = token_for(&s, "u@example.com", Role::User).await;
    let u = s.db.tollgate.user_by_email("u@example.com").await.unwrap();
    s.db.tollgate
        .grant_credits(
            None,
            u.id,
            tollgate::model::Credits(12),
            Some("welcome"),
            None,
        )
        .await
        .unwrap();
    s.db.tollgate
        .grant_credits(None, u.id, tollgate::model::Credits(3), None, None)
        .await
        .unwrap();
    let c: Value = s
        .http
        .get(s.url("/v1/credits"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(c["balance"], 15);
    let entries = c["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        entries
            .iter()
            .map(|e| e["amount"].as_i64().unwrap())
            .sum::<i64>(),
        15
    );
    assert!(entries.iter().all(|e| e["kind"] == "grant"));
    assert!(entries.iter().any(|e| e["reason"] == "welcome"));
}

async fn hostile_bodies_get_the_error_shape(db: TestDb) {
    let s = spawn(db).await;
    let admin = token_for(&s, "admin@example.com", Role::Admin).await;
    let u =
        s.db.tollgate
            .add_user("u@example.com", Role::User, PASSWORD)
            .await
            .unwrap();
    let path = s.url(&format!("/v1/users/{}/credit-grants", u.id));

    let unknown = s
        .http
        .post(&path)
        .bearer_auth(&admin)
        .json(&json!({"amount": 1, "admin": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_error_shape(&unknown.json().await.unwrap(), "INVALID_REQUEST");

    // The longest key the API accepts fits where it is kept (it was a 500:
    // the derived ledger reference outgrew its column); sent twice, one grant.
    let longest = "k".repeat(255);
    let v =
        s.db.tollgate
            .add_user("v@example.com", Role::User, PASSWORD)
            .await
            .unwrap();
    let v_path = s.url(&format!("/v1/users/{}/credit-grants", v.id));
    for expected in [StatusCode::CREATED, StatusCode::OK] {
        let r = s
            .http
            .post(&v_path)
            .bearer_auth(&admin)
            .header("Idempotency-Key", &longest)
            .json(&json!({"amount": 2.0, "reason": "a float that is whole"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), expected);
        assert_eq!(r.json::<Value>().await.unwrap()["amount"], 2);
    }
    assert_eq!(s.db.tollgate.user(v.id).await.unwrap().balance.get(), 2);
    let fractional = s
        .http
        .post(&path)
        .bearer_auth(&admin)
        .json(&json!({"amount": 2.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(fractional.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let too_long = s
        .http
        .post(&path)
        .bearer_auth(&admin)
        .header("Idempotency-Key", "k".repeat(256))
        .json(&json!({"amount": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(too_long.status(), StatusCode::BAD_REQUEST);

    let wrong_type = s
        .http
        .post(&path)
        .bearer_auth(&admin)
        .json(&json!({"amount": "lots"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_type.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let negative = s
        .http
        .post(&path)
        .bearer_auth(&admin)
        .json(&json!({"amount": -5}))
        .send()
        .await
        .unwrap();
    assert_eq!(negative.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = negative.json().await.unwrap();
    assert_error_shape(&body, "INVALID_REQUEST");
    assert!(
        body["error"]["details"]["fields"]["amount"].is_string(),
        "{body}"
    );

    let malformed = s
        .http
        .post(&path)
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body("{\"amount\":")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    assert_error_shape(&malformed.json().await.unwrap(), "MALFORMED_JSON");

    let no_type = s
        .http
        .post(&path)
        .bearer_auth(&admin)
        .body("{\"amount\":1}")
        .send()
        .await
        .unwrap();
    assert_eq!(no_type.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let bearer = format!("Bearer {admin}");
    let (status, too_big) = tollgate_testkit::declare_body(
        &path,
        "POST",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        200 * 1024,
    )
    .await;
    assert_eq!(status, 413);
    assert_error_shape(&too_big, "PAYLOAD_TOO_LARGE");

    let bad_key = s
        .http
        .post(&path)
        .bearer_auth(&admin)
        .header("idempotency-key", "x".repeat(256))
        .json(&json!({"amount": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_key.status(), StatusCode::BAD_REQUEST);

    let long_reason = s
        .http
        .post(&path)
        .bearer_auth(&admin)
        .json(&json!({"amount": 1, "reason": "r".repeat(501)}))
        .send()
        .await
        .unwrap();
    assert_eq!(long_reason.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let not_a_user = s
        .http
        .post(s.url("/v1/users/not-a-uuid/credit-grants"))
        .bearer_auth(&admin)
        .json(&json!({"amount": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(not_a_user.status(), StatusCode::NOT_FOUND);

    let no_route = s
        .http
        .get(s.url("/v1/nothing-here"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(no_route.status(), StatusCode::NOT_FOUND);
    assert_error_shape(&no_route.json().await.unwrap(), "NOT_FOUND");

    let wrong_method = s
        .http
        .delete(s.url("/v1/me"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_method.status(), StatusCode::METHOD_NOT_ALLOWED);

    // Nothing above changed the balance.
    assert_eq!(s.db.tollgate.user(u.id).await.unwrap().balance.get(), 0);
    assert!(s
        .db
        .tollgate
        .store()
        .ledger_for_user(u.id, 10)
        .await
        .unwrap()
        .is_empty());
}

async fn api_grants_are_idempotent_by_key(db: TestDb) {
    let s = spawn(db).await;
    let admin = token_for(&s, "admin@example.com", Role::Admin).await;
    let u =
        s.db.tollgate
            .add_user("u@example.com", Role::User, PASSWORD)
            .await
            .unwrap();
    let path = s.url(&format!("/v1/users/{}/credit-grants", u.id));
    let send = || {
        s.http
            .post(&path)
            .bearer_auth(&admin)
            .header("idempotency-key", "grant-42")
            .json(&json!({"amount": 4, "reason": "promo"}))
            .send()
    };
    let first = send().await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let second = send().await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    let a: Value = first.json().await.unwrap();
    let b: Value = second.json().await.unwrap();
    assert_eq!(a["id"], b["id"]);
    assert_eq!(s.db.tollgate.user(u.id).await.unwrap().balance.get(), 4);
}

async fn health_and_readiness(db: TestDb) {
    let s = spawn(db).await;
    let h = s.http.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(h.status(), StatusCode::OK);
    let r = s.http.get(s.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["database"], "ok");
    s.db.tollgate.store().close().await;
    let r = s.http.get(s.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
}

async fn budget_days_are_admin_controlled(db: TestDb) {
    let s = spawn(db).await;
    let admin = token_for(&s, "admin@example.com", Role::Admin).await;
    let user = token_for(&s, "user@example.com", Role::User).await;
    let day = s.url("/v1/budget/2026-12-01");
    let r = s.http.get(&day).bearer_auth(&user).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let d: Value = s
        .http
        .get(&day)
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(d["cap_usd"], "50.000000");
    assert_eq!(d["halted"], false);
    let d: Value = s
        .http
        .put(&day)
        .bearer_auth(&admin)
        .json(&json!({"cap_usd": "12.5"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(d["cap_usd"], "12.500000");
    let d: Value = s
        .http
        .post(format!("{day}/halt"))
        .bearer_auth(&admin)
        .json(&json!({"reason": "the provider bill looks wrong"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(d["halted"], true);
    assert_eq!(d["halted_reason"], "the provider bill looks wrong");
    // A NUL in text is refused at the edge (PostgreSQL cannot store it).
    let nul = s
        .http
        .post(format!("{day}/halt"))
        .bearer_auth(&admin)
        .json(&json!({"reason": "bad\u{0}reason"}))
        .send()
        .await
        .unwrap();
    assert_eq!(nul.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let d: Value = s
        .http
        .post(format!("{day}/resume"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(d["halted"], false);
    let bad = s
        .http
        .put(&day)
        .bearer_auth(&admin)
        .json(&json!({"cap_usd": "-3"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let bad = s
        .http
        .get(s.url("/v1/budget/yesterday"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let post_as_user = s
        .http
        .post(format!("{day}/halt"))
        .bearer_auth(&user)
        .json(&json!({"reason": "mine"}))
        .send()
        .await
        .unwrap();
    assert_eq!(post_as_user.status(), StatusCode::FORBIDDEN);
}

async fn metrics_speak_prometheus(db: TestDb) {
    let s = spawn(db).await;
    let u =
        s.db.tollgate
            .add_user("u@example.com", Role::User, PASSWORD)
            .await
            .unwrap();
    s.db.tollgate
        .grant_credits(None, u.id, tollgate::model::Credits(10), None, None)
        .await
        .unwrap();
    let body = json!({"kind": "video", "prompt": "p", "duration_s": 2, "resolution": "720p"});
    s.db.tollgate
        .submit_job(&u, None, Some("m1"), &body)
        .await
        .unwrap();
    // Admins only, here; a scraper uses a token or the internal listener.
    let r = s.http.get(s.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let (_, user_token) = s.db.tollgate.create_api_token(&u, "u").await.unwrap();
    let r = s
        .http
        .get(s.url("/metrics"))
        .bearer_auth(&user_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let admin =
        s.db.tollgate
            .add_user("ops@example.com", Role::Admin, PASSWORD)
            .await
            .unwrap();
    let (_, admin_token) = s.db.tollgate.create_api_token(&admin, "a").await.unwrap();
    let r = s
        .http
        .get(s.url("/metrics"))
        .bearer_auth(&admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("tollgate_jobs{status=\"queued\"} 1"),
        "{text}"
    );
    assert!(text.contains("tollgate_reservations_held 0"), "{text}");
    assert!(text.contains("# EOF"), "{text}");
}

/// Issue 29, 7: an answer that carries a secret or a token (and any other
/// caller's data under /v1) says `Cache-Control: no-store`, errors included.
async fn answers_carrying_secrets_are_never_stored_by_a_cache(db: TestDb) {
    let s = spawn(db).await;
    let token = token_for(&s, "secret@example.com", Role::User).await;
    for (method, path) in [
        ("GET", "/v1/webhook-secret"),
        ("GET", "/v1/me"),
        ("GET", "/v1/credits"),
        ("GET", "/v1/jobs/not-a-job"),
    ] {
        let r = s
            .http
            .request(method.parse().unwrap(), s.url(path))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        let cache = r
            .headers()
            .get("cache-control")
            .map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            cache.as_deref(),
            Some("no-store"),
            "{method} {path}: {}",
            r.status()
        );
    }
    let r = s
        .http
        .post(s.url("/v1/webhook-endpoints"))
        .bearer_auth(&token)
        .json(&json!({"url": "https://example.com/hook"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()
            .get("cache-control")
            .map(|v| v.to_str().unwrap()),
        Some("no-store"),
        "{}",
        r.status()
    );
}
