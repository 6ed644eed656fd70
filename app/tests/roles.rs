//! Who may do what, against a real `tollgate serve` on each backend: every
//! page, form route, server function and `/v1` operation the app serves,
//! called as nobody, the owner, another user, a reviewer, an admin and an
//! admin from another site, against one table (`MATRIX`); and what a
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
    every_route_has_a_row_and_answers_as_it_says,
    another_persons_edit_cannot_be_cancelled_from_a_form,
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
    assert!(
        tollgate_testkit::serving(&server.base).await,
        "tollgate serve did not come up"
    );
    server
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

/// Who calls, in the order of a row's cells.
const CALLERS: [&str; 6] = [
    "anonymous",
    "owner",
    "another user",
    "reviewer",
    "admin",
    "admin from another site",
];

/// The one table of who may do what: every page (GET), form route (POST),
/// server function and `/v1` operation the app serves, with what each
/// caller gets. A cell is `ok` (let through: a page renders, an operation
/// answers for itself), `303` (a form's redirect back, or a page's to sign
/// in or to the caller's home), `401`, `403`, `404`, or `-` (not called:
/// signing in or out as that caller would end its session). Paths name the
/// owner's edit, the owner as a user, or ids that name nothing; server
/// functions by name. A route served without a row, or a row naming
/// nothing served, fails the test.
const MATRIX: &[(&str, &str, &str)] = &[
    // Pages.
    ("page", "/", "303 303 303 303 303 303"),
    ("page", "/login", "ok 303 303 303 303 303"),
    ("page", "/setup", "303 303 303 303 303 303"),
    ("page", "/forbidden", "403 403 403 403 403 403"),
    ("page", "/docs/api", "ok ok ok ok ok ok"),
    ("page", "/edits", "303 ok ok ok ok ok"),
    ("page", "/edits/new", "303 ok ok ok ok ok"),
    ("page", "/edits/{id}", "303 ok 404 ok ok ok"),
    ("page", "/credits", "303 ok ok ok ok ok"),
    ("page", "/account", "303 ok ok ok ok ok"),
    ("page", "/review", "303 403 403 ok ok ok"),
    ("page", "/review/{id}", "303 403 403 404 404 404"),
    ("page", "/admin", "303 403 403 403 ok ok"),
    ("page", "/admin/spend", "303 403 403 403 ok ok"),
    ("page", "/admin/budget", "303 403 403 403 ok ok"),
    ("page", "/admin/jobs", "303 403 403 403 ok ok"),
    ("page", "/admin/webhooks", "303 403 403 403 ok ok"),
    ("page", "/admin/users", "303 403 403 403 ok ok"),
    // Form routes (POST). Signing in or out is for anyone, and only from
    // our own pages; the rest need a session and a role.
    ("form", "/setup", "303 - - - - 403"),
    ("form", "/login", "303 - - - - 403"),
    ("form", "/logout", "303 - - - - 403"),
    ("form", "/account/password", "401 303 303 303 303 403"),
    ("form", "/account/tokens", "401 303 303 303 303 403"),
    (
        "form",
        "/account/tokens/{id}/revoke",
        "401 303 303 303 303 403",
    ),
    ("form", "/edits/{id}/cancel", "401 303 303 303 303 403"),
    ("form", "/edits/{id}/repairs", "401 303 303 303 303 403"),
    ("form", "/edits/{id}/choose", "401 303 303 303 303 403"),
    ("form", "/admin/users", "401 403 403 403 303 403"),
    ("form", "/admin/users/{id}/role", "401 403 403 403 303 403"),
    (
        "form",
        "/admin/users/{id}/disabled",
        "401 403 403 403 303 403",
    ),
    (
        "form",
        "/admin/users/{id}/password",
        "401 403 403 403 303 403",
    ),
    (
        "form",
        "/admin/users/{id}/grants",
        "401 403 403 403 303 403",
    ),
    ("form", "/admin/budget/cap", "401 403 403 403 303 403"),
    ("form", "/admin/budget/halt", "401 403 403 403 303 403"),
    ("form", "/admin/budget/resume", "401 403 403 403 303 403"),
    ("form", "/review/{id}/decide", "401 403 403 303 303 403"),
    ("form", "/review/{id}/note", "401 403 403 303 303 403"),
    ("form", "/review/bulk", "401 403 403 303 303 403"),
    ("form", "/account/webhooks", "401 303 303 303 303 403"),
    (
        "form",
        "/account/webhooks/{id}/test",
        "401 303 303 303 303 403",
    ),
    (
        "form",
        "/account/webhooks/{id}/rotate",
        "401 303 303 303 303 403",
    ),
    (
        "form",
        "/account/webhook-secret/rotate",
        "401 303 303 303 303 403",
    ),
    (
        "form",
        "/account/webhooks/{id}/delete",
        "401 303 303 303 303 403",
    ),
    (
        "form",
        "/admin/webhooks/{id}/replay",
        "401 403 403 403 303 403",
    ),
    (
        "form",
        "/admin/webhooks/endpoints/{id}/replay",
        "401 403 403 403 303 403",
    ),
    // Server functions: a refusal comes back as the error's message.
    ("fn", "setup_needed", "ok ok ok ok ok 403"),
    ("fn", "load_page_context", "ok ok ok ok ok 403"),
    ("fn", "load_api_reference", "ok ok ok ok ok 403"),
    ("fn", "my_jobs", "401 ok ok ok ok 403"),
    ("fn", "my_credits", "401 ok ok ok ok 403"),
    ("fn", "my_tokens", "401 ok ok ok ok 403"),
    ("fn", "load_composer", "401 ok ok ok ok 403"),
    ("fn", "load_my_webhooks", "401 ok ok ok ok 403"),
    ("fn", "load_job_detail", "401 ok 404 ok ok 403"),
    ("fn", "load_review_queue", "401 403 403 ok ok 403"),
    ("fn", "load_review_record", "401 403 403 404 404 403"),
    ("fn", "load_overview", "401 403 403 403 ok 403"),
    ("fn", "load_spend", "401 403 403 403 ok 403"),
    ("fn", "load_budget", "401 403 403 403 ok 403"),
    ("fn", "load_admin_jobs", "401 403 403 403 ok 403"),
    ("fn", "load_admin_webhooks", "401 403 403 403 ok 403"),
    ("fn", "all_users", "401 403 403 403 ok 403"),
    // `/v1` by token (a token carries no ambient authority, so another
    // site's page may send one). Another person's things are not there;
    // a reviewer reads jobs but does not cancel or repair them; the
    // ids of endpoints, deliveries and records name nothing.
    ("v1", "healthz", "ok ok ok ok ok ok"),
    ("v1", "readyz", "ok ok ok ok ok ok"),
    ("v1", "openapi", "ok ok ok ok ok ok"),
    ("v1", "metrics", "401 403 403 403 ok ok"),
    ("v1", "me", "401 ok ok ok ok ok"),
    ("v1", "catalogue", "401 ok ok ok ok ok"),
    ("v1", "quote", "401 ok ok ok ok ok"),
    ("v1", "credits", "401 ok ok ok ok ok"),
    ("v1", "upload_asset", "401 ok ok ok ok ok"),
    ("v1", "get_asset", "401 ok 404 ok ok ok"),
    ("v1", "get_asset_content", "401 ok 404 ok ok ok"),
    ("v1", "list_jobs", "401 ok ok ok ok ok"),
    ("v1", "submit_job", "401 ok ok ok ok ok"),
    ("v1", "get_job", "401 ok 404 ok ok ok"),
    ("v1", "list_attempts", "401 ok 404 ok ok ok"),
    ("v1", "list_events", "401 ok 404 ok ok ok"),
    ("v1", "get_lineage", "401 ok 404 ok ok ok"),
    ("v1", "get_output", "401 ok 404 ok ok ok"),
    ("v1", "cancel_job", "401 ok 404 404 ok ok"),
    ("v1", "submit_repair", "401 ok 404 404 404 404"),
    ("v1", "list_webhook_deliveries", "401 ok ok ok ok ok"),
    ("v1", "list_webhook_endpoints", "401 ok ok ok ok ok"),
    ("v1", "create_webhook_endpoint", "401 ok ok ok ok ok"),
    ("v1", "delete_webhook_endpoint", "401 404 404 404 404 404"),
    ("v1", "rotate_webhook_secret", "401 404 404 404 404 404"),
    ("v1", "send_test_webhook", "401 404 404 404 404 404"),
    ("v1", "account_webhook_secret", "401 ok ok ok ok ok"),
    ("v1", "rotate_account_webhook_secret", "401 ok ok ok ok ok"),
    ("v1", "list_parked", "401 403 403 ok ok ok"),
    ("v1", "get_parked", "401 403 403 404 404 404"),
    ("v1", "decide", "401 403 403 ok ok ok"),
    ("v1", "add_note", "401 403 403 ok ok ok"),
    ("v1", "get_budget", "401 403 403 403 ok ok"),
    ("v1", "set_cap", "401 403 403 403 ok ok"),
    ("v1", "halt_day", "401 403 403 403 ok ok"),
    ("v1", "resume_day", "401 403 403 403 ok ok"),
    ("v1", "get_spend", "401 403 403 403 ok ok"),
    ("v1", "list_users", "401 403 403 403 ok ok"),
    ("v1", "grant_credits", "401 403 403 403 ok ok"),
    ("v1", "replay_webhook_delivery", "401 403 403 403 404 404"),
    ("v1", "replay_webhook_endpoint", "401 403 403 403 ok ok"),
];

/// What a caller got, as a cell of `MATRIX` says it.
fn cell(kind: &str, status: StatusCode, body: &str) -> &'static str {
    match status.as_u16() {
        302 | 303 | 307 => "303",
        401 => "401",
        403 => "403",
        404 => "404",
        // A server function's refusal is its message, whatever the status.
        _ if kind == "fn" && body.contains(&tollgate::Error::Unauthenticated.public_message()) => {
            "401"
        }
        _ if kind == "fn" && body.contains(&tollgate::Error::Forbidden.public_message()) => "403",
        _ if kind == "fn" && body.contains("not found") => "404",
        _ => "ok",
    }
}

/// Every route the app serves, as `(kind, key)`: pages and form routes by
/// path, server functions by name, `/v1` operations by operation id (with
/// their method and path).
fn served() -> Vec<(&'static str, String, String, reqwest::Method)> {
    use reqwest::Method;
    let mut all = Vec::new();
    for path in tollgate_app::server::page_paths() {
        all.push(("page", path.clone(), path, Method::GET));
    }
    for path in tollgate_app::server::form_paths() {
        all.push(("form", path.to_string(), path.to_string(), Method::POST));
    }
    for (path, method) in tollgate_app::server::server_fn_paths() {
        let name = path
            .trim_start_matches("/api/")
            .trim_end_matches(|c: char| c.is_ascii_digit());
        let method = Method::from_bytes(method.as_str().as_bytes()).unwrap();
        all.push(("fn", name.to_string(), path.to_string(), method));
    }
    let doc = serde_json::to_value(tollgate::api::document()).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap().to_string();
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            all.push(("v1", id, path.clone(), method));
        }
    }
    all
}

/// What a server function is called with: enough to get past reading its
/// arguments, so that what answers is its role check.
fn arguments(name: &str, job: &str) -> String {
    match name {
        "load_job_detail" => format!("id={job}"),
        "load_review_record" => format!("id={}", uuid::Uuid::new_v4()),
        "load_spend" => "filters[unpriced]=false".into(),
        "load_review_queue" => "filters[sort]=".into(),
        _ => String::new(),
    }
}

async fn every_route_has_a_row_and_answers_as_it_says(db: TestDb) {
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
        .unwrap()
        .id
        .to_string();
    let body = json!({"kind": "video", "prompt": "a crane", "duration_s": 2, "resolution": "720p"});
    let job = t
        .submit_job(&owner.user, None, Some("matrix-job"), &body)
        .await
        .unwrap()
        .job;
    // The served worker runs the edit; the rows read it finished, so that
    // what a row says does not depend on how fast this machine is.
    tollgate_testkit::wait_until(
        "the matrix's edit finishes",
        Duration::from_secs(120),
        async || {
            let now = t.visible_job(&owner.user, job.id).await.unwrap();
            now.status.is_terminal().then_some(())
        },
    )
    .await;
    let job = job.id.to_string();
    let fill = |path: &str| {
        let id = if path.contains("/assets/") {
            asset.clone()
        } else if path.contains("/jobs/") || path.starts_with("/edits/") {
            job.clone()
        } else if path.contains("/users/") {
            owner.user.id.to_string()
        } else {
            uuid::Uuid::new_v4().to_string()
        };
        path.replace("{id}", &id).replace("{day}", "2026-12-01")
    };
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let people = [&owner, &other, &reviewer, &admin];
    let mut served = served();
    // Forms last: a form may change what the other rows read.
    served.sort_by_key(|(kind, ..)| *kind == "form");
    let mut wrong = Vec::new();
    let mut seen = Vec::new();
    for (kind, key, path, method) in &served {
        let url = format!("{}{}", s.base, fill(path));
        let row = MATRIX.iter().find(|(k, p, _)| k == kind && p == key);
        let expected: Vec<&str> = match row {
            Some((_, _, cells)) => cells.split_whitespace().collect(),
            None => vec!["?"; 6],
        };
        assert_eq!(expected.len(), 6, "{kind} {key}: six cells");
        let mut got = Vec::new();
        for (i, want) in expected.iter().enumerate() {
            if *want == "-" {
                got.push("-");
                continue;
            }
            // Caller i: nobody, a person's browser or token, or the admin
            // from a page of another site.
            let who = match i {
                0 => None,
                5 => Some(&admin),
                i => Some(people[i - 1]),
            };
            let origin = if i == 5 {
                "https://evil.example"
            } else {
                &s.base
            };
            // `/v1` by token, everything else by the browser's session.
            let client = match (*kind, who) {
                ("v1", _) | (_, None) => &plain,
                (_, Some(p)) => &p.browser,
            };
            let mut r = client
                .request(method.clone(), &url)
                .header("Origin", origin);
            if let (Some(p), "v1") = (who, *kind) {
                r = r.bearer_auth(&p.token);
            }
            r = match *kind {
                "v1" if *method != reqwest::Method::GET && *method != reqwest::Method::DELETE => {
                    r.header("Idempotency-Key", "matrix").json(&json!({}))
                }
                "form" => r.form(&[("x", "1")]),
                "fn" => r
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .body(arguments(key, &job)),
                _ => r,
            };
            let answer = r.send().await.unwrap();
            let status = answer.status();
            let text = answer.text().await.unwrap_or_default();
            got.push(cell(kind, status, &text));
        }
        if *kind == "form" && got[0] == "401" {
            // A token drives no form: without a session it is nobody.
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
                "a token drives no form: {key}"
            );
        }
        let line = format!("    (\"{kind}\", \"{key}\", \"{}\"),", got.join(" "));
        if got != expected {
            wrong.push(format!("{line}  // row says {:?}", expected.join(" ")));
        }
        seen.push((*kind, key.clone()));
    }
    let unserved: Vec<_> = MATRIX
        .iter()
        .filter(|(k, p, _)| !seen.iter().any(|(kind, key)| kind == k && key == p))
        .collect();
    assert!(
        wrong.is_empty() && unserved.is_empty(),
        "answers that differ from their row (as the server answered them):\n{}\nrows naming nothing served: {unserved:?}\n(callers: {CALLERS:?})",
        wrong.join("\n"),
    );
    assert!(seen.len() >= 90, "{} routes", seen.len());
}

/// Issue 31, 4: another person's job cannot be cancelled from a form either
/// (the form answers as for anyone's, and nothing happens).
async fn another_persons_edit_cannot_be_cancelled_from_a_form(db: TestDb) {
    let s = serve(&db).await;
    let owner = person(&db, &s, "owner@example.com", Role::User).await;
    let other = person(&db, &s, "other@example.com", Role::User).await;
    let body = json!({"kind": "video", "prompt": "a crane", "duration_s": 2, "resolution": "720p"});
    let theirs = db
        .tollgate
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
