//! Who may do what, against a real `tollgate serve` on each backend: every
//! `/v1` operation of the OpenAPI document and every form route, called as
//! nobody, a user, a reviewer, an admin and another user; and what a
//! session may outlive: a failed sign-in writes no session row, a password
//! change ends the other sessions, disabling a user ends theirs, a new
//! password set by an admin or at the command line ends theirs, a token
//! drives no form, and a client that never finishes its request head is
//! dropped.

use reqwest::StatusCode;
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::model::{Credits, Role};
use tollgate::store::User;
use tollgate_testkit::TestDb;

tollgate_testkit::both_backends!(
    every_route_answers_each_role_as_it_should,
    sessions_end_when_they_must,
    pages_are_never_stored_by_a_cache,
    each_role_signs_in_to_its_home,
);

const PASSWORD: &str = "correct horse battery";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The app on the test database (all roles), until dropped.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn serve(db: &TestDb) -> Server {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--role", "all"])
        .env("TOLLGATE_DATABASE_URL", &db.url)
        .env("TOLLGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("TOLLGATE_STORAGE", db.dir.join("objects"))
        .env("TOLLGATE_SITE_ROOT", db.dir.join("site"))
        .env("TOLLGATE_LOG", "warn")
        .env("TOLLGATE_WEBHOOK_ALLOW_PUBLIC", "false")
        .env("TOLLGATE_LOGINS_PER_ACCOUNT_PER_MINUTE", "100")
        .env("TOLLGATE_LOGINS_PER_ADDRESS_PER_MINUTE", "500")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tollgate serve");
    let base = format!("http://127.0.0.1:{port}");
    let server = Server { child, base };
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if http
            .get(format!("{}/healthz", server.base))
            .send()
            .await
            .is_ok()
        {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("tollgate serve did not come up");
}

struct Person {
    user: User,
    token: String,
    /// A signed-in browser (cookies kept).
    browser: reqwest::Client,
}

async fn person(db: &TestDb, s: &Server, email: &str, role: Role) -> Person {
    let t = &db.tollgate;
    let user = t.add_user(email, role, PASSWORD).await.unwrap();
    t.grant_credits(None, user.id, Credits(100), None, None)
        .await
        .unwrap();
    let (_, token) = t.create_api_token(&user, "matrix").await.unwrap();
    let browser = signed_in(s, email).await;
    Person {
        user,
        token,
        browser,
    }
}

async fn signed_in(s: &Server, email: &str) -> reqwest::Client {
    signed_in_with(s, email, PASSWORD).await
}

async fn signed_in_with(s: &Server, email: &str, password: &str) -> reqwest::Client {
    let browser = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = browser
        .post(format!("{}/login", s.base))
        .header("Origin", &s.base)
        .form(&[("email", email), ("password", password), ("next", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let home = r.headers()["location"].to_str().unwrap();
    assert!(
        ["/edits", "/review", "/admin"].contains(&home),
        "{email} signed in to {home}"
    );
    browser
}

/// Where a redirect points, or "" when there is none.
async fn location(browser: &reqwest::Client, url: String) -> String {
    let r = browser.get(url).send().await.unwrap();
    r.headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// Issue 33, 12: an admin's day starts on the spend overview, a
/// reviewer's on the queue, a person's on their edits; a sign-in sent from
/// a page goes back to it, and the front door sends each to their home.
async fn each_role_signs_in_to_its_home(db: TestDb) {
    let s = serve(&db).await;
    let anonymous = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    db.tollgate
        .add_user("first-admin@example.com", Role::Admin, PASSWORD)
        .await
        .unwrap();
    assert_eq!(location(&anonymous, format!("{}/", s.base)).await, "/login");
    for (email, role, home) in [
        ("u@example.com", Role::User, "/edits"),
        ("r@example.com", Role::Reviewer, "/review"),
        ("a@example.com", Role::Admin, "/admin"),
    ] {
        db.tollgate.add_user(email, role, PASSWORD).await.unwrap();
        let browser = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let login = |next: &'static str| {
            browser
                .post(format!("{}/login", s.base))
                .header("Origin", &s.base)
                .form(&[("email", email), ("password", PASSWORD), ("next", next)])
                .send()
        };
        let r = login("").await.unwrap();
        assert_eq!(r.headers()["location"], home, "{email}");
        assert_eq!(location(&browser, format!("{}/", s.base)).await, home);
        assert_eq!(location(&browser, format!("{}/login", s.base)).await, home);
        let r = login("/credits").await.unwrap();
        assert_eq!(
            r.headers()["location"],
            "/credits",
            "sent back where they were"
        );
        let r = login("https://evil.example/").await.unwrap();
        assert_eq!(r.headers()["location"], home, "never off the site");
    }
}

/// What a call's answer says about who may make it.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Seen {
    Unauthenticated,
    Forbidden,
    NotFound,
    Allowed,
}

fn seen(status: StatusCode) -> Seen {
    match status.as_u16() {
        401 => Seen::Unauthenticated,
        403 => Seen::Forbidden,
        404 => Seen::NotFound,
        _ => Seen::Allowed,
    }
}

async fn every_route_answers_each_role_as_it_should(db: TestDb) {
    let s = serve(&db).await;
    let owner = person(&db, &s, "owner@example.com", Role::User).await;
    let other = person(&db, &s, "other@example.com", Role::User).await;
    let reviewer = person(&db, &s, "reviewer@example.com", Role::Reviewer).await;
    let admin = person(&db, &s, "admin@example.com", Role::Admin).await;
    let t = &db.tollgate;
    // What the owner has, for the paths that name something.
    let asset = t
        .upload_asset(
            &owner.user,
            Some("image/png"),
            tollgate_testkit::photo_of_a_dog(64, 48).into(),
        )
        .await
        .unwrap();
    let body = json!({"kind": "video", "prompt": "a crane", "duration_s": 2, "resolution": "720p"});
    let job = t
        .submit_job(&owner.user, None, Some("matrix-job"), &body)
        .await
        .unwrap()
        .job;
    let endpoint = t
        .check_webhook_url("url", "http://127.0.0.1:9/hook")
        .await
        .is_ok();
    assert!(!endpoint, "no allowed networks here: loopback is refused");

    let http = reqwest::Client::new();
    let doc = tollgate::api::document();
    let doc = serde_json::to_value(doc).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let secured = op["security"].is_array();
            if !secured {
                continue;
            }
            let tag = op["tags"][0].as_str().unwrap_or_default();
            let id = op["operationId"].as_str().unwrap();
            // The least role an operation needs, from what it is.
            let least = match (tag, id) {
                ("admin", _) | (_, "metrics") => Role::Admin,
                ("webhooks", "replay_webhook_delivery" | "replay_webhook_endpoint") => Role::Admin,
                ("parked", _) => Role::Reviewer,
                _ => Role::User,
            };
            // A path naming the owner's job or asset; other ids name nothing.
            // (The output is 404 until there is one, whoever asks.)
            let owned = (path.contains("/jobs/{id}") || path.contains("/assets/{id}"))
                && !path.ends_with("/output");
            let filled = path
                .replace(
                    "{id}",
                    &if path.contains("/assets/") {
                        asset.id.to_string()
                    } else if path.contains("/jobs/") {
                        job.id.to_string()
                    } else if path.contains("/users/") {
                        owner.user.id.to_string()
                    } else {
                        uuid::Uuid::new_v4().to_string()
                    },
                )
                .replace("{day}", "2026-12-01");
            let url = format!("{}{filled}", s.base);
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let call = |token: Option<&str>| {
                let mut r = http
                    .request(method.clone(), &url)
                    .header("Idempotency-Key", "matrix");
                if method != reqwest::Method::GET && method != reqwest::Method::DELETE {
                    r = r.json(&json!({}));
                }
                if let Some(t) = token {
                    r = r.bearer_auth(t);
                }
                async move { r.send().await.unwrap().status() }
            };
            assert_eq!(
                seen(call(None).await),
                Seen::Unauthenticated,
                "anonymous {method} {path}"
            );
            for (who, p) in [("user", &owner), ("reviewer", &reviewer), ("admin", &admin)] {
                let got = seen(call(Some(&p.token)).await);
                let expected = match (id, p.user.role) {
                    // Reviewers see jobs, but only the owner or an admin
                    // cancels one (a reviewer decides parked work instead).
                    ("cancel_job", Role::Reviewer) => Seen::NotFound,
                    // A repair is charged to the edit's owner: only they
                    // ask for one; to anyone else the job is not theirs.
                    ("submit_repair", Role::Reviewer | Role::Admin) => Seen::NotFound,
                    _ if p.user.role.allows(least) => Seen::Allowed,
                    _ => Seen::Forbidden,
                };
                // A path naming a random id may answer 404 once allowed.
                let ok = got == expected
                    || (expected == Seen::Allowed && got == Seen::NotFound && !owned);
                assert!(ok, "{who} {method} {path}: {got:?}, expected {expected:?}");
            }
            if owned && least == Role::User {
                // Another person's job or asset is not there at all.
                assert_eq!(
                    seen(call(Some(&other.token)).await),
                    Seen::NotFound,
                    "another user {method} {path}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "{checked} operations");

    // Another person's job cannot be cancelled from a form either.
    let theirs = t
        .submit_job(&owner.user, None, Some("matrix-form-job"), &body)
        .await
        .unwrap()
        .job;
    let r = other
        .browser
        .post(format!("{}/edits/{}/cancel", s.base, theirs.id))
        .header("Origin", &s.base)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let events = db.history(theirs.id).await;
    assert!(
        events.iter().all(|e| e.kind() != "cancelled"),
        "another person cancelled it: {events:?}"
    );

    // Form routes: cookie-only, from our own pages, by role.
    let any = uuid::Uuid::new_v4();
    let forms: Vec<(String, Role)> = vec![
        ("/account/password".into(), Role::User),
        ("/account/tokens".into(), Role::User),
        (format!("/account/tokens/{any}/revoke"), Role::User),
        (format!("/edits/{}/cancel", job.id), Role::User),
        (format!("/edits/{}/choose", job.id), Role::User),
        ("/account/webhooks".into(), Role::User),
        (format!("/account/webhooks/{any}/test"), Role::User),
        (format!("/account/webhooks/{any}/rotate"), Role::User),
        ("/account/webhook-secret/rotate".into(), Role::User),
        (format!("/account/webhooks/{any}/delete"), Role::User),
        (format!("/review/{any}/decide"), Role::Reviewer),
        (format!("/review/{any}/note"), Role::Reviewer),
        ("/review/bulk".into(), Role::Reviewer),
        ("/admin/users".into(), Role::Admin),
        (format!("/admin/users/{}/role", owner.user.id), Role::Admin),
        (
            format!("/admin/users/{}/disabled", owner.user.id),
            Role::Admin,
        ),
        (
            format!("/admin/users/{}/grants", owner.user.id),
            Role::Admin,
        ),
        (
            format!("/admin/users/{}/password", owner.user.id),
            Role::Admin,
        ),
        ("/admin/budget/cap".into(), Role::Admin),
        ("/admin/budget/halt".into(), Role::Admin),
        ("/admin/budget/resume".into(), Role::Admin),
        (format!("/admin/webhooks/{any}/replay"), Role::Admin),
        (
            format!("/admin/webhooks/endpoints/{any}/replay"),
            Role::Admin,
        ),
    ];
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (path, least) in &forms {
        let url = format!("{}{path}", s.base);
        // Nobody, and a token without a session: not signed in.
        let r = plain
            .post(&url)
            .header("Origin", &s.base)
            .form(&[("x", "1")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "anonymous {path}");
        let r = plain
            .post(&url)
            .header("Origin", &s.base)
            .bearer_auth(&admin.token)
            .form(&[("x", "1")])
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "a token drives no form: {path}"
        );
        // A signed-in browser, from another site: refused whoever it is.
        let r = admin
            .browser
            .post(&url)
            .header("Origin", "https://evil.example")
            .form(&[("x", "1")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "cross-site {path}");
        for (who, p) in [("user", &owner), ("reviewer", &reviewer), ("admin", &admin)] {
            let r = p
                .browser
                .post(&url)
                .header("Origin", &s.base)
                .form(&[("x", "1")])
                .send()
                .await
                .unwrap();
            let expected = if p.user.role.allows(*least) {
                StatusCode::SEE_OTHER
            } else {
                StatusCode::FORBIDDEN
            };
            assert_eq!(r.status(), expected, "{who} {path}");
        }
    }
}

async fn sessions_end_when_they_must(db: TestDb) {
    let s = serve(&db).await;
    let t = &db.tollgate;
    let admin = person(&db, &s, "admin@example.com", Role::Admin).await;
    let ana = person(&db, &s, "ana@example.com", Role::User).await;
    let me = |c: reqwest::Client| {
        let url = format!("{}/v1/me", s.base);
        async move { c.get(url).send().await.unwrap().status() }
    };

    // A failed (or rate-limited) sign-in writes no session row.
    let before = db.store().count_sessions().await.unwrap();
    let anonymous = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for _ in 0..5 {
        let r = anonymous
            .post(format!("{}/login", s.base))
            .header("Origin", &s.base)
            .form(&[
                ("email", "ana@example.com"),
                ("password", "not the password"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let to = r.headers()["location"].to_str().unwrap().to_string();
        assert!(
            to.starts_with("/login?failed=credentials&email=ana%40example.com"),
            "{to}"
        );
    }
    assert_eq!(db.store().count_sessions().await.unwrap(), before);
    // The page says why, with the email filled in.
    let page = anonymous
        .get(format!(
            "{}/login?failed=credentials&email=ana%40example.com",
            s.base
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Email or password is incorrect"));
    assert!(page.contains("value=\"ana@example.com\""));
    assert_eq!(db.store().count_sessions().await.unwrap(), before);

    // A password change ends every other session (and, when asked, tokens).
    let second = signed_in(&s, "ana@example.com").await;
    assert_eq!(me(second.clone()).await, StatusCode::OK);
    let r = ana
        .browser
        .post(format!("{}/account/password", s.base))
        .header("Origin", &s.base)
        .form(&[
            ("current_password", PASSWORD),
            ("new_password", "a brand new password"),
            ("confirm", "a brand new password"),
            ("revoke_tokens", "1"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        me(ana.browser.clone()).await,
        StatusCode::OK,
        "this session goes on"
    );
    assert_eq!(
        me(second).await,
        StatusCode::UNAUTHORIZED,
        "the other one ended"
    );
    let r = reqwest::Client::new()
        .get(format!("{}/v1/me", s.base))
        .bearer_auth(&ana.token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "tokens revoked as asked"
    );

    // Disabling a user ends their sessions.
    let bo = person(&db, &s, "bo@example.com", Role::User).await;
    assert_eq!(me(bo.browser.clone()).await, StatusCode::OK);
    t.set_disabled(&admin.user, bo.user.id, true).await.unwrap();
    t.set_disabled(&admin.user, bo.user.id, false)
        .await
        .unwrap();
    assert_eq!(
        me(bo.browser.clone()).await,
        StatusCode::UNAUTHORIZED,
        "re-enabled, but the old session stays ended"
    );

    // An admin's new password for someone ends their sessions; so does
    // the command line's (`tollgate user set-password`).
    let fresh = "a password set for bo";
    let r = admin
        .browser
        .post(format!("{}/admin/users/{}/password", s.base, bo.user.id))
        .header("Origin", &s.base)
        .form(&[("new_password", fresh), ("confirm_password", fresh)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let bo_again = signed_in_with(&s, "bo@example.com", fresh).await;
    assert_eq!(me(bo_again.clone()).await, StatusCode::OK);
    let by_hand = "a password from the shell";
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["user", "set-password", "--email", "bo@example.com"])
        .env("TOLLGATE_DATABASE_URL", &db.url)
        .env("TOLLGATE_STORAGE", db.dir.join("objects"))
        .env("TOLLGATE_LOG", "warn")
        .env("TOLLGATE_PASSWORD", by_hand)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("bo@example.com"));
    assert_eq!(me(bo_again).await, StatusCode::UNAUTHORIZED, "ended");
    signed_in_with(&s, "bo@example.com", by_hand).await;
    // Too short, or nobody by that email: said, and nothing changed.
    for (email, password) in [
        ("bo@example.com", "short"),
        ("nobody@example.com", "long enough password"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["user", "set-password", "--email", email])
            .env("TOLLGATE_DATABASE_URL", &db.url)
            .env("TOLLGATE_STORAGE", db.dir.join("objects"))
            .env("TOLLGATE_LOG", "warn")
            .env("TOLLGATE_PASSWORD", password)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{out:?}");
        assert!(!out.stderr.is_empty());
    }
    signed_in_with(&s, "bo@example.com", by_hand).await;

    // A client that never finishes its request head is dropped.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let started = Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(30), slow.read(&mut buf))
        .await
        .expect("the server closed the connection");
    assert!(
        matches!(read, Ok(0) | Err(_)) || String::from_utf8_lossy(&buf).contains("408"),
        "{read:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 29, 7: a page (the account page shows a new token once) says
/// `Cache-Control: no-store`, as the API does; a signed-out page too.
async fn pages_are_never_stored_by_a_cache(db: TestDb) {
    let s = serve(&db).await;
    person(&db, &s, "pages@example.com", Role::User).await;
    let browser = signed_in(&s, "pages@example.com").await;
    for path in ["/account", "/edits", "/credits"] {
        let r = browser
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_eq!(r.headers()["cache-control"], "no-store", "{path}");
    }
    let r = reqwest::get(format!("{}/login", s.base)).await.unwrap();
    assert_eq!(r.headers()["cache-control"], "no-store", "/login");
    let r = browser
        .get(format!("{}/v1/me", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["cache-control"], "no-store", "/v1/me");
}
