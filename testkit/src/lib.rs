//! Helpers for the tests and benchmarks of the engine and the app (a
//! dev-only crate: the shipped library carries none of it): a fresh database on either
//! backend, so every behaviour can be proven on SQLite and on PostgreSQL.
//!
//! PostgreSQL tests need `TOLLGATE_TEST_POSTGRES_URL` (a server where the
//! user may create databases); `scripts/test` starts one and sets it. Each
//! test gets its own database, so tests never share rows.

pub mod api;

pub use api::Api;
use std::path::PathBuf;
use tollgate::config::Config;
use tollgate::store::{Backend, Store};
use tollgate::Tollgate;

pub const POSTGRES_URL_VAR: &str = "TOLLGATE_TEST_POSTGRES_URL";

/// How often `wait_until` asks again.
const POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The tests' one polling loop: asks `check` every 20 ms until it answers
/// `Some`, and returns that; past `within`, fails the test naming `what`.
/// A test waits for something the engine does in the background, never
/// sleeps a guessed time.
pub async fn wait_until<T>(
    what: &str,
    within: std::time::Duration,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    match try_wait_until(within, check).await {
        Some(found) => found,
        None => panic!("{what}: not within {within:?}"),
    }
}

/// `wait_until` for a caller with something to clean up first: `None`
/// past `within`.
pub async fn try_wait_until<T>(
    within: std::time::Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(found) = check().await {
            return Some(found);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether a server at `base` answers `/healthz` within a minute (a
/// `tollgate serve` a test started).
pub async fn serving(base: &str) -> bool {
    let http = reqwest::Client::new();
    let within = std::time::Duration::from_secs(60);
    try_wait_until(within, async || {
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .ok()
            .map(|_| ())
    })
    .await
    .is_some()
}

/// A migrated, empty database and an engine over it. The SQLite file is
/// removed when this is dropped.
pub struct TestDb {
    pub tollgate: Tollgate,
    /// The database's URL, for a second process (a real `tollgate serve`).
    pub url: String,
    /// This test's folder: its object store lives in `objects/` inside it.
    pub dir: PathBuf,
}

impl TestDb {
    pub async fn new(backend: Backend) -> TestDb {
        match backend {
            Backend::Sqlite => TestDb::sqlite().await,
            Backend::Postgres => TestDb::postgres().await,
        }
    }

    pub async fn sqlite() -> TestDb {
        let dir =
            std::env::temp_dir().join(format!("tollgate-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("creating a temporary folder");
        let url = format!("sqlite://{}", dir.join("test.db").display());
        let objects = dir.join("objects");
        TestDb {
            tollgate: open(&url, &objects).await,
            url,
            dir,
        }
    }

    pub async fn postgres() -> TestDb {
        let admin_url = std::env::var(POSTGRES_URL_VAR).unwrap_or_else(|_| {
            panic!("{POSTGRES_URL_VAR} is not set: run scripts/test, which starts a PostgreSQL for the tests")
        });
        let name = format!("tg_test_{}", uuid::Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&admin_url)
            .await
            .expect("connecting to the test PostgreSQL");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("creating a test database");
        admin.close().await;
        let url = replace_database(&admin_url, &name);
        let dir =
            std::env::temp_dir().join(format!("tollgate-test-{}", uuid::Uuid::new_v4().simple()));
        let objects = dir.join("objects");
        TestDb {
            tollgate: open(&url, &objects).await,
            url,
            dir,
        }
    }

    pub fn store(&self) -> &Store {
        self.tollgate.store()
    }

    /// Runs one statement straight on the database, past the store, to move
    /// a time into the past (a lease that ran out, a node that stopped):
    /// `at` is bound as `$1` and `id`, when given, as `$2`. How many rows
    /// it changed.
    pub async fn backdate(
        &self,
        sql: &str,
        at: chrono::DateTime<chrono::Utc>,
        id: Option<uuid::Uuid>,
    ) -> u64 {
        if let Some(pool) = self.store().sqlite_pool() {
            let q = sqlx::query(sql).bind(at);
            let q = if let Some(id) = id { q.bind(id) } else { q };
            return q.execute(&pool).await.unwrap().rows_affected();
        }
        let pool = self
            .store()
            .postgres_pool()
            .expect("one backend or the other");
        let q = sqlx::query(sql).bind(at);
        let q = if let Some(id) = id { q.bind(id) } else { q };
        q.execute(&pool).await.unwrap().rows_affected()
    }

    /// Waits (bounded by `within`) until job `id` is as `done` says, and
    /// reads it.
    pub async fn job_when(
        &self,
        id: tollgate::model::JobId,
        within: std::time::Duration,
        done: impl Fn(&tollgate::store::Job) -> bool,
    ) -> tollgate::store::Job {
        wait_until(&format!("job {id}"), within, async || {
            let job = self.store().job(id).await.expect("reading a job")?;
            done(&job).then_some(job)
        })
        .await
    }

    /// A job's timeline, checked on the way: every entry, whether a trigger
    /// or the engine wrote it, reads back as a known `Happening` (none is
    /// left to a string match above the store).
    pub async fn history(&self, job: tollgate::model::JobId) -> Vec<tollgate::store::JobEvent> {
        let events = self
            .store()
            .job_events(job)
            .await
            .expect("reading a timeline");
        for e in &events {
            assert!(
                !matches!(e.happening, tollgate::model::Happening::Unknown { .. }),
                "an entry this build cannot read: {} {}",
                e.kind(),
                e.detail()
            );
        }
        events
    }

    /// Re-opens the engine over the same database and objects with a
    /// `TOLLGATE_CONFIG` file holding `toml` (models, faults, caps).
    pub async fn with_config(mut self, toml: &str) -> TestDb {
        let path = self.dir.join("tollgate.toml");
        std::fs::write(&path, toml).expect("writing the test configuration");
        let storage = self.dir.join("objects").display().to_string();
        self.tollgate = open_with(&self.url, &storage, Some(&path)).await;
        self
    }

    /// Re-opens the engine over the same database with its objects in a new
    /// bucket of the test S3 server (`TOLLGATE_TEST_S3_ENDPOINT`, which
    /// `scripts/test` starts), keeping any configuration file.
    pub async fn with_s3(mut self) -> TestDb {
        let endpoint = std::env::var("TOLLGATE_TEST_S3_ENDPOINT").unwrap_or_else(|_| {
            panic!(
                "TOLLGATE_TEST_S3_ENDPOINT is not set: run scripts/test, which starts an S3 server"
            )
        });
        let bucket = format!("tg-test-{}", uuid::Uuid::new_v4().simple());
        let spec = format!("s3://{bucket}?endpoint={endpoint}");
        let store = tollgate::storage::ObjectStore::open(&spec)
            .await
            .expect("opening the test S3 store");
        let tollgate::storage::ObjectStore::S3(s3) = &store else {
            panic!("an s3:// spec opened another store");
        };
        s3.client()
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("creating the test bucket");
        let config = self.dir.join("tollgate.toml");
        let config = config.exists().then_some(config);
        self.tollgate = open_with(&self.url, &spec, config.as_deref()).await;
        self
    }

    /// Serves the internal operations listener (`/metrics` without a
    /// token) on 127.0.0.1 and a free port; returns its base URL.
    pub async fn serve_ops(&self) -> String {
        let app = tollgate::api::internal_router(self.tollgate.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a test port");
        let addr = listener.local_addr().expect("a local address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}")
    }

    /// Serves the `/v1` API (with sessions) on 127.0.0.1 and a free port;
    /// returns its base URL. The server lives as long as the runtime.
    pub async fn serve_api(&self) -> String {
        let t = self.tollgate.clone();
        let app =
            tollgate::api::router(t.clone()).layer(tollgate::usecases::auth::session_layer(&t));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a test port");
        let addr = listener.local_addr().expect("a local address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn open(url: &str, objects: &std::path::Path) -> Tollgate {
    open_with(url, &objects.display().to_string(), None).await
}

async fn open_with(url: &str, storage: &str, config_file: Option<&std::path::Path>) -> Tollgate {
    let site = std::env::temp_dir().join("tollgate-test-site");
    // Tests and benchmarks order thousands of jobs as one person: fair use
    // is out of their way unless a test's own configuration sets it.
    let sets_fair_use = config_file
        .and_then(|p| std::fs::read_to_string(p).ok())
        .is_some_and(|toml| toml.contains("jobs_per_user_per_minute"));
    let config = Config::from_lookup(|k| match k {
        "TOLLGATE_JOBS_PER_USER_PER_MINUTE" | "TOLLGATE_JOBS_BURST_PER_USER" if !sets_fair_use => {
            Some("100000".into())
        }
        "TOLLGATE_CONFIG" => config_file.map(|p| p.display().to_string()),
        "TOLLGATE_DATABASE_URL" => Some(url.to_string()),
        "TOLLGATE_LISTEN" => Some("127.0.0.1:0".into()),
        "TOLLGATE_SITE_ROOT" => Some(site.display().to_string()),
        "TOLLGATE_STORAGE" => Some(storage.to_string()),
        // A test calls nothing but loopback, whatever a URL says.
        "TOLLGATE_WEBHOOK_ALLOW_PUBLIC" => Some("false".into()),
        _ => None,
    })
    .expect("test configuration");
    Tollgate::open(config)
        .await
        .expect("opening the test database")
}

/// `postgres://u@h:p/db?x` with its database replaced by `name`.
pub fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[scheme_end..]
        .find('/')
        .map(|i| i + scheme_end)
        .unwrap_or(base.len());
    let mut out = format!("{}/{}", &base[..path_start], name);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Declares each listed `async fn name(db: TestDb)` as two tests,
/// `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::TestDb::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::TestDb::postgres().await).await;
                }
            )*
        }
    };
}

/// The mock provider served in this process on 127.0.0.1 and a free port,
/// for tests that script it and read its bill.
pub struct MockServer {
    /// Its base URL, for a model's `endpoint`.
    pub base: String,
    http: reqwest::Client,
}

impl MockServer {
    /// Serves `config` (its `public_base` is set to the server's address).
    /// The panic that drops a connection without an answer is kept quiet.
    pub async fn start(config: tollgate::providers::mock::MockConfig) -> MockServer {
        use tollgate::providers::mock::{DropConnection, MockConfig, MockProvider};
        static QUIET: std::sync::Once = std::sync::Once::new();
        QUIET.call_once(|| {
            let default_hook = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if info.payload().downcast_ref::<DropConnection>().is_none() {
                    default_hook(info);
                }
            }));
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a port for the mock provider");
        let base = format!("http://{}", listener.local_addr().expect("an address"));
        let app = MockProvider::new(MockConfig {
            public_base: base.clone(),
            ..config
        })
        .router();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MockServer {
            base,
            http: reqwest::Client::new(),
        }
    }

    /// Queues behaviours: `{"next": [...], "poll": [...]}`.
    pub async fn script(&self, body: serde_json::Value) {
        let r = self
            .http
            .post(format!("{}/_mock/script", self.base))
            .json(&body)
            .send()
            .await
            .expect("scripting the mock provider");
        assert!(r.status().is_success(), "the mock refused the script");
    }

    /// What the provider would bill: `paid_predictions`, per key, and each
    /// prediction.
    pub async fn stats(&self) -> serde_json::Value {
        self.http
            .get(format!("{}/_mock/stats", self.base))
            .send()
            .await
            .expect("reading the mock's stats")
            .json()
            .await
            .expect("the mock's stats")
    }

    /// Every check the mock received as a checker, oldest first.
    pub async fn checks(&self) -> Vec<serde_json::Value> {
        let v: serde_json::Value = self
            .http
            .get(format!("{}/_mock/checks", self.base))
            .send()
            .await
            .expect("reading the mock's checks")
            .json()
            .await
            .expect("the mock's checks");
        v["data"].as_array().cloned().unwrap_or_default()
    }

    /// Predictions paid for (checks apart).
    pub async fn paid(&self) -> u64 {
        self.stats().await["paid_predictions"].as_u64().unwrap_or(0)
    }
}

/// Sends only the head of a request that declares a `length`-byte body,
/// and reads the answer: what a server says to a body too large to read.
/// (A client that writes the whole body races the server's early answer
/// and its close; this cannot.) Returns the status and the JSON body.
pub async fn declare_body(
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    length: usize,
) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {length}\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(host)
        .await
        .expect("connecting to the server");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("writing the head");
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        stream.read_to_end(&mut answer),
    )
    .await
    .expect("the server answered without waiting for the body")
    .expect("reading the answer");
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or_default())
}

/// A test photo: sky above, lawn below, and a brown dog the local
/// readiness check finds (`width` by `height`, as PNG).
pub fn photo_of_a_dog(width: u32, height: u32) -> Vec<u8> {
    let (w, h) = (f64::from(width), f64::from(height));
    let img = image::RgbImage::from_fn(width, height, |x, y| {
        let dx = (f64::from(x) - 0.375 * w) / (0.156 * w);
        let dy = (f64::from(y) - 0.583 * h) / (0.15 * h);
        if dx * dx + dy * dy < 1.0 {
            image::Rgb([150, 95, 50])
        } else if y < height / 2 {
            image::Rgb([130, 180, 235])
        } else {
            image::Rgb([70, 150, 60])
        }
    });
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .expect("encoding a PNG in memory");
    out.into_inner()
}

#[cfg(test)]
mod tests {
    #[test]
    fn database_is_replaced() {
        assert_eq!(
            super::replace_database("postgres://pg@127.0.0.1:5555/postgres?sslmode=disable", "x"),
            "postgres://pg@127.0.0.1:5555/x?sslmode=disable"
        );
        assert_eq!(
            super::replace_database("postgres://pg@h:1", "y"),
            "postgres://pg@h:1/y"
        );
    }
}
