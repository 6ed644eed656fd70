//! What one socket or one stranger can do to a real `tollgate serve`, with
//! real sockets (issue 29): connections that send nothing, one byte or an
//! HTTP/2 preface are closed after a bounded time; one address cannot hold
//! every connection; a request for a host name the node does not answer
//! for (DNS rebinding) is refused; first-run set-up needs the token the
//! server printed on its console; a new secret's one-time cookie shows it
//! only to the session that made it; and one person's uploads are received
//! a few at once.

use reqwest::StatusCode;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tollgate_testkit::TestDb;

tollgate_testkit::both_backends!(
    set_up_needs_the_printed_token_and_a_known_host,
    a_new_secret_shows_only_in_the_session_that_made_it,
    behind_a_trusted_proxy_a_guesser_slows_only_themselves,
);

const PASSWORD: &str = "correct horse battery";

struct Server {
    child: Child,
    addr: SocketAddr,
    base: String,
    /// What the server printed on standard output, line by line.
    printed: std::sync::mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `tollgate serve` on `database_url`, with `settings` on top of the test
/// defaults, once `/healthz` answers.
async fn serve(database_url: &str, dir: &std::path::Path, settings: &[(&str, &str)]) -> Server {
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .args(["serve", "--role", "web"])
        .env("TOLLGATE_DATABASE_URL", database_url)
        .env("TOLLGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("TOLLGATE_STORAGE", dir.join("objects"))
        .env("TOLLGATE_SITE_ROOT", dir.join("site"))
        .env("TOLLGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in settings {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("starting tollgate serve");
    let stdout = child.stdout.take().unwrap();
    let (lines, printed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let server = Server {
        child,
        addr,
        base: format!("http://{addr}"),
        printed,
    };
    assert!(
        tollgate_testkit::serving(&server.base).await,
        "tollgate serve did not come up"
    );
    server
}

/// A connection to `server` from `source` (any 127.0.0.0/8 address works
/// on loopback, so one test can be several clients).
async fn connect_from(source: &str, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(server).await.unwrap()
}

/// How long until the server closes `stream`, reading (and dropping)
/// whatever it sends meanwhile; `None` if still open after `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = limit.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_connection_closes_after_a_bounded_idle_time() {
    let db = TestDb::sqlite().await;
    let s = serve(
        &db.url,
        &db.dir,
        &[("TOLLGATE_IDLE_CONNECTION_SECONDS", "3")],
    )
    .await;
    const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    // An empty SETTINGS frame: the client half of an HTTP/2 handshake.
    const H2_SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];
    let mut silent = TcpStream::connect(s.addr).await.unwrap();
    let mut one_byte = TcpStream::connect(s.addr).await.unwrap();
    one_byte.write_all(b"P").await.unwrap();
    let mut preface = TcpStream::connect(s.addr).await.unwrap();
    preface.write_all(H2_PREFACE).await.unwrap();
    let mut h2 = TcpStream::connect(s.addr).await.unwrap();
    h2.write_all(H2_PREFACE).await.unwrap();
    h2.write_all(H2_SETTINGS).await.unwrap();
    let mut kept_alive = TcpStream::connect(s.addr).await.unwrap();
    kept_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    // A byte every second keeps a connection busy only until its first
    // request is due: trickling is not a request.
    let mut trickle = TcpStream::connect(s.addr).await.unwrap();
    let trickled = tokio::spawn(async move {
        for b in H2_PREFACE {
            if trickle.write_all(&[*b]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        closed_within(&mut trickle, Duration::from_secs(1))
            .await
            .is_some()
    });

    let limit = Duration::from_secs(20);
    for (what, stream) in [
        ("a socket that sends nothing", &mut silent),
        ("one byte (P)", &mut one_byte),
        ("the HTTP/2 preface", &mut preface),
        ("an HTTP/2 handshake", &mut h2),
        ("an idle keep-alive after a request", &mut kept_alive),
    ] {
        let closed = closed_within(stream, limit).await;
        assert!(closed.is_some(), "{what}: still open after {limit:?}");
    }
    assert!(trickled.await.unwrap(), "a trickled preface was not closed");
    // The node still serves.
    let r = reqwest::get(format!("{}/healthz", s.base)).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_address_cannot_hold_every_connection() {
    let db = TestDb::sqlite().await;
    let s = serve(
        &db.url,
        &db.dir,
        &[
            ("TOLLGATE_IDLE_CONNECTION_SECONDS", "60"),
            ("TOLLGATE_MAX_CONNECTIONS_PER_ADDRESS", "20"),
            ("TOLLGATE_MAX_CONNECTIONS", "40"),
        ],
    )
    .await;
    // One stranger opens 60 connections and sends nothing: 20 are held,
    // the rest are closed at once.
    let mut looks = tokio::task::JoinSet::new();
    for _ in 0..60 {
        let mut stream = connect_from("127.0.0.2", s.addr).await;
        looks.spawn(async move {
            let closed = closed_within(&mut stream, Duration::from_millis(500)).await;
            (stream, closed.is_some())
        });
    }
    let mut hoard = Vec::new();
    let mut closed_at_once = 0;
    while let Some(look) = looks.join_next().await {
        let (stream, closed) = look.unwrap();
        closed_at_once += usize::from(closed);
        hoard.push(stream);
    }
    assert_eq!(closed_at_once, 40, "one address keeps 20 connections");
    // Everyone else is served meanwhile.
    let started = Instant::now();
    let r = reqwest::get(format!("{}/healthz", s.base)).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(2));

    // At the cap in all, a new client waits for a slot instead of being
    // refused: a second stranger takes the remaining 20, a request waits
    // until one of them goes.
    let mut second: Vec<TcpStream> = Vec::new();
    for _ in 0..20 {
        second.push(connect_from("127.0.0.3", s.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = tokio::spawn({
        let base = s.base.clone();
        async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap();
            client.get(format!("{base}/healthz")).send().await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !waiting.is_finished(),
        "a connection over the cap was served"
    );
    second.pop();
    let r = waiting.await.unwrap().expect("served once a slot freed");
    assert_eq!(r.status(), StatusCode::OK);
}

async fn set_up_needs_the_printed_token_and_a_known_host(db: TestDb) {
    let s = serve(&db.url, &db.dir, &[]).await;
    let printed = s
        .printed
        .recv_timeout(Duration::from_secs(10))
        .expect("serve printed the set-up line");
    assert!(printed.starts_with("First-run set-up: "), "{printed}");
    let token = printed
        .split("token=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the line carries the token")
        .to_string();
    assert!(token.len() >= 20, "{token}");

    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let setup = |token: &str, host: &str| {
        let form = [
            ("token", token),
            ("email", "first@example.com"),
            ("password", PASSWORD),
            ("confirm", PASSWORD),
        ];
        browser
            .post(format!("{}/setup", s.base))
            .header("Host", host)
            .header("Origin", format!("http://{host}"))
            .form(&form)
            .send()
    };
    let own_host = s.addr.to_string();

    // A page whose name was rebound to this address names its own host.
    let rebound = setup(&token, &format!("rebind.example.net:{}", s.addr.port()))
        .await
        .unwrap();
    assert_eq!(rebound.status(), StatusCode::MISDIRECTED_REQUEST);
    let body: serde_json::Value = rebound.json().await.unwrap();
    assert_eq!(body["error"]["code"], "UNKNOWN_HOST");
    let page = browser
        .get(format!("{}/setup", s.base))
        .header("Host", "rebind.example.net")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::MISDIRECTED_REQUEST);
    let named = browser
        .get(format!("{}/setup", s.base))
        .header("Host", format!("localhost:{}", s.addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(named.status(), StatusCode::OK);

    // Without the token, or with a wrong one, nobody becomes admin.
    for wrong in ["", "not-the-token", &format!("{token}x")] {
        let r = setup(wrong, &own_host).await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let to = r.headers()["location"].to_str().unwrap();
        assert!(to.starts_with("/setup?failed=token"), "{to}");
        assert!(
            !to.contains("token=not"),
            "a wrong token is not echoed: {to}"
        );
    }
    assert!(db.tollgate.store().list_users().await.unwrap().is_empty());
    assert!(db.tollgate.setup_needed().await.unwrap());

    let r = setup(&token, &own_host).await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/admin/users");
    let users = db.tollgate.store().list_users().await.unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!(users[0].email.to_string(), "first@example.com");
    // And the token is spent: set-up is over.
    let again = setup(&token, &own_host).await.unwrap();
    let to = again.headers()["location"].to_str().unwrap();
    assert!(to.starts_with("/setup?failed=done"), "{to}");
}

/// A browser signed in as `email`, keeping its cookies by hand (so a test
/// can move one to another browser).
async fn sign_in(s: &Server, email: &str) -> (reqwest::Client, String) {
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = browser
        .post(format!("{}/login", s.base))
        .header("Origin", &s.base)
        .form(&[("email", email), ("password", PASSWORD), ("next", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "{email} signed in");
    (browser, cookies_of(&r))
}

/// `name=value` of every cookie `r` sets, joined for a `Cookie` header.
fn cookies_of(r: &reqwest::Response) -> String {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .collect::<Vec<_>>()
        .join("; ")
}

async fn account_page(s: &Server, browser: &reqwest::Client, cookies: &str) -> String {
    browser
        .get(format!("{}/account", s.base))
        .header("Cookie", cookies)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Issue 29, 7: the cookie that carries a new token to its page is bound
/// to the session that made it: another person's browser holding it (a
/// cookie planted from a sibling subdomain, a shared computer) sees nothing,
/// and the maker sees it once.
async fn a_new_secret_shows_only_in_the_session_that_made_it(db: TestDb) {
    let s = serve(&db.url, &db.dir, &[]).await;
    let t = &db.tollgate;
    for email in ["maker@example.com", "next@example.com"] {
        t.add_user(email, tollgate::model::Role::User, PASSWORD)
            .await
            .unwrap();
    }
    let (maker, maker_session) = sign_in(&s, "maker@example.com").await;
    let made = maker
        .post(format!("{}/account/tokens", s.base))
        .header("Origin", &s.base)
        .header("Cookie", &maker_session)
        .form(&[("name", "render farm")])
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::SEE_OTHER);
    // Only the one-time cookie moves (the maker's session cookie stays).
    let once = cookies_of(&made)
        .split("; ")
        .find(|c| c.starts_with("tollgate_once="))
        .expect("the secret's cookie")
        .to_string();

    // The next person's browser, given the cookie, shows no secret.
    let (other, other_session) = sign_in(&s, "next@example.com").await;
    let page = account_page(&s, &other, &format!("{other_session}; {once}")).await;
    assert!(
        !page.contains("id=\"new-secret\""),
        "another session saw the secret"
    );

    // The maker sees it, once.
    let page = account_page(&s, &maker, &format!("{maker_session}; {once}")).await;
    assert!(
        page.contains("id=\"new-secret\""),
        "the maker did not see it"
    );
    let again = account_page(&s, &maker, &format!("{maker_session}; {once}")).await;
    assert!(!again.contains("id=\"new-secret\""), "shown twice");
}

/// A small real PNG.
fn png() -> Vec<u8> {
    let img = image::RgbImage::from_fn(16, 12, |x, y| image::Rgb([x as u8 * 9, y as u8 * 13, 90]));
    let mut out = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

/// An upload's head and the first bytes of a long body, left waiting.
async fn stalled_upload(s: &Server, token: &str) -> TcpStream {
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /v1/assets HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: image/png\r\nContent-Length: 1000000\r\n\r\n",
        s.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&png()[..8]).await.unwrap();
    stream
}

async fn upload(s: &Server, token: &str) -> StatusCode {
    reqwest::Client::new()
        .post(format!("{}/v1/assets", s.base))
        .bearer_auth(token)
        .header("Content-Type", "image/png")
        .body(png())
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap()
        .status()
}

/// Issue 29, 9: one person's uploads are received a few at once: past
/// that, 429 before a byte of the body is read, while another person's go
/// on; a place comes back when an upload ends, even one given up halfway.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_sends_a_few_uploads_at_once() {
    let db = TestDb::sqlite().await;
    let s = serve(&db.url, &db.dir, &[]).await;
    let t = &db.tollgate;
    let mut tokens = Vec::new();
    for email in ["slow@example.com", "other@example.com"] {
        let user = t
            .add_user(email, tollgate::model::Role::User, PASSWORD)
            .await
            .unwrap();
        tokens.push(t.create_api_token(&user, "uploads").await.unwrap().1);
    }
    let (slow, other) = (&tokens[0], &tokens[1]);
    let mut stalled = Vec::new();
    for _ in 0..tollgate::usecases::limits::UPLOADS_PER_USER {
        stalled.push(stalled_upload(&s, slow).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(upload(&s, slow).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(upload(&s, other).await, StatusCode::CREATED);
    // One given up halfway: its place comes back.
    drop(stalled.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = upload(&s, slow).await;
        if status == StatusCode::CREATED {
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(Instant::now() < deadline, "the place never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn login_from(s: &Server, forwarded_for: &str, password: &str) -> String {
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/login", s.base))
        .header("Origin", &s.base)
        .header("X-Forwarded-For", forwarded_for)
        .form(&[
            ("email", "ana@example.com"),
            ("password", password),
            ("next", ""),
        ])
        .send()
        .await
        .unwrap();
    r.headers()["location"].to_str().unwrap().to_string()
}

/// Issue 29, 6: behind the documented reverse proxy (its address in
/// TOLLGATE_TRUSTED_PROXIES) every client arrives from the proxy's address;
/// the client is what the proxy appended to X-Forwarded-For. A guesser's
/// wrong passwords slow down that client, for that account, and nobody
/// else: the person signs in from their own address meanwhile.
async fn behind_a_trusted_proxy_a_guesser_slows_only_themselves(db: TestDb) {
    let s = serve(
        &db.url,
        &db.dir,
        &[("TOLLGATE_TRUSTED_PROXIES", "127.0.0.1")],
    )
    .await;
    db.tollgate
        .add_user("ana@example.com", tollgate::model::Role::User, PASSWORD)
        .await
        .unwrap();
    // What the guesser wrote themselves sits left of what the proxy saw.
    let guesser = "10.0.0.1, 203.0.113.7";
    for _ in 0..5 {
        let to = login_from(&s, guesser, "not the password!").await;
        assert!(to.starts_with("/login?failed=credentials"), "{to}");
    }
    let to = login_from(&s, guesser, "not the password!").await;
    assert!(to.starts_with("/login?failed=rate_limited"), "{to}");
    // The guesser cannot dodge it by writing another address first.
    let to = login_from(&s, "10.9.9.9, 203.0.113.7", PASSWORD).await;
    assert!(to.starts_with("/login?failed=rate_limited"), "{to}");
    // The person, through the same proxy, is not locked out.
    assert_eq!(login_from(&s, "198.51.100.20", PASSWORD).await, "/edits");
}
