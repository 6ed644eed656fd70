//! The processes of a run and the faults done to them: the Tollgate nodes
//! (started, killed with SIGKILL, started again on the same port), the two
//! mock providers (never killed: they are the providers' books), the
//! database (PostgreSQL restarted with `-m immediate`) and the S3 server
//! (stopped with SIGSTOP for a few seconds).

use crate::rng::Rng;
use crate::Plan;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn parse(s: &str) -> Result<Backend, String> {
        match s {
            "sqlite" => Ok(Backend::Sqlite),
            "postgres" => Ok(Backend::Postgres),
            other => Err(format!("--backend: {other:?} is not sqlite or postgres")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The database as the verdict reads it: every column comes back as text
/// (ids, money in micro-dollars, days), so one set of checks reads both.
#[derive(Clone)]
pub enum Db {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Db {
    /// A uuid column as text (SQLite keeps ids as 16-byte blobs).
    pub fn id(&self, col: &str) -> String {
        match self {
            Db::Sqlite(_) => format!("lower(hex({col}))"),
            Db::Postgres(_) => format!("CAST({col} AS TEXT)"),
        }
    }

    /// A money column as integer micro-dollars, as text (SQLite keeps micros).
    pub fn usd(&self, col: &str) -> String {
        match self {
            Db::Sqlite(_) => format!("CAST({col} AS TEXT)"),
            Db::Postgres(_) => format!("CAST(CAST(ROUND({col} * 1000000) AS BIGINT) AS TEXT)"),
        }
    }

    /// Any other column as text.
    pub fn text(&self, col: &str) -> String {
        format!("CAST({col} AS TEXT)")
    }

    pub async fn rows(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        use sqlx::Row;
        fn texts<R: Row>(r: &R) -> Result<Vec<Option<String>>, sqlx::Error>
        where
            for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
            usize: sqlx::ColumnIndex<R>,
        {
            (0..r.len()).map(|i| r.try_get(i)).collect()
        }
        let out = match self {
            Db::Sqlite(p) => sqlx::query(sql)
                .fetch_all(p)
                .await
                .and_then(|rows| rows.iter().map(texts).collect()),
            Db::Postgres(p) => sqlx::query(sql)
                .fetch_all(p)
                .await
                .and_then(|rows| rows.iter().map(texts).collect()),
        };
        out.map_err(|e| format!("reading the database ({sql}): {e}"))
    }
}

/// A mock provider process and what it honours.
pub struct Mock {
    child: Child,
    pub base: String,
    pub model: &'static str,
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Tollgate node: its role, its fixed port and its current process.
struct Node {
    role: &'static str,
    port: u16,
    child: Option<Child>,
    starts: u32,
}

/// What the nemesis did, for the report.
#[derive(Default, Debug)]
pub struct Faults {
    pub kills: u32,
    pub kills_by_role: std::collections::BTreeMap<&'static str, u32>,
    pub pg_restarts: u32,
    pub s3_stops: u32,
    pub provider_scripts: u32,
    pub provider_faults: u32,
}

impl Faults {
    pub fn summary(&self) -> String {
        format!(
            "faults: {} kills {:?}, {} PostgreSQL restarts, {} S3 stops, {} provider faults in {} scripts",
            self.kills,
            self.kills_by_role,
            self.pg_restarts,
            self.s3_stops,
            self.provider_faults,
            self.provider_scripts
        )
    }
}

pub struct Cluster {
    pub backend: Backend,
    pub dir: PathBuf,
    pub db: Db,
    db_url: String,
    storage: String,
    config: PathBuf,
    bin_dir: PathBuf,
    nodes: Vec<Node>,
    pub keyed: Mock,
    pub unkeyed: Mock,
    pg_restart: Option<String>,
    s3_pids: Vec<String>,
    pub http: reqwest::Client,
    rng: Rng,
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (scripts/chaos sets it)"))
}

impl Cluster {
    pub async fn start(plan: &Plan) -> Result<Cluster, String> {
        std::fs::create_dir_all(&plan.dir).map_err(|e| format!("{}: {e}", plan.dir.display()))?;
        let bin_dir = std::env::current_exe()
            .map_err(|e| e.to_string())?
            .parent()
            .ok_or("the binary has no folder")?
            .to_path_buf();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        let keyed = start_mock(&bin_dir, &plan.dir, "keyed-edit", true, &http).await?;
        let unkeyed = start_mock(&bin_dir, &plan.dir, "unkeyed-clip", false, &http).await?;
        let (db_url, storage, db) = match plan.backend {
            Backend::Sqlite => sqlite(&plan.dir).await?,
            Backend::Postgres => postgres(plan.seed).await?,
        };
        let config = plan.dir.join("tollgate.toml");
        std::fs::write(&config, models(&keyed, &unkeyed)).map_err(|e| e.to_string())?;
        let roles: &[&'static str] = match plan.backend {
            Backend::Sqlite => &["all"],
            Backend::Postgres => &["web", "worker", "worker"],
        };
        let mut nodes = Vec::new();
        for role in roles {
            nodes.push(Node {
                role,
                port: free_port()?,
                child: None,
                starts: 0,
            });
        }
        let (pg_restart, s3_pids) = match plan.backend {
            Backend::Sqlite => (None, Vec::new()),
            Backend::Postgres => (
                Some(env("CHAOS_PG_RESTART")?),
                env("CHAOS_S3_PIDS")?
                    .split([',', ' '])
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect(),
            ),
        };
        let mut cluster = Cluster {
            backend: plan.backend,
            dir: plan.dir.clone(),
            db,
            db_url,
            storage,
            config,
            bin_dir,
            nodes,
            keyed,
            unkeyed,
            pg_restart,
            s3_pids,
            http,
            rng: Rng::new(plan.seed ^ 0x5EED),
        };
        cluster.cli(&["migrate"], None)?;
        for i in 0..cluster.nodes.len() {
            cluster.start_node(i).await?;
        }
        Ok(cluster)
    }

    /// Runs a `tollgate` command on the run's database; its standard output.
    pub fn cli(&self, args: &[&str], password: Option<&str>) -> Result<String, String> {
        let mut c = Command::new(self.bin_dir.join("tollgate"));
        c.args(args)
            .env("TOLLGATE_DATABASE_URL", &self.db_url)
            .env("TOLLGATE_STORAGE", &self.storage)
            .env("TOLLGATE_CONFIG", &self.config)
            .env("TOLLGATE_LOG", "warn");
        if let Some(p) = password {
            c.env("TOLLGATE_PASSWORD", p);
        }
        let out = c.output().map_err(|e| format!("tollgate {args:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "tollgate {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The base URL clients call (the node serving the API).
    pub fn api(&self) -> String {
        format!("http://127.0.0.1:{}", self.nodes[0].port)
    }

    fn spawn(&self, i: usize) -> Result<Child, String> {
        let node = &self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node-{i}-{}.log", node.role)))
            .map_err(|e| e.to_string())?;
        Command::new(self.bin_dir.join("tollgate"))
            .args(["serve", "--role", node.role])
            .env("TOLLGATE_DATABASE_URL", &self.db_url)
            .env("TOLLGATE_LISTEN", format!("127.0.0.1:{}", node.port))
            .env("TOLLGATE_STORAGE", &self.storage)
            .env("TOLLGATE_CONFIG", &self.config)
            .env("TOLLGATE_SITE_ROOT", self.dir.join("site"))
            .env("TOLLGATE_WORKERS", "8")
            .env("TOLLGATE_LEASE_SECONDS", "2")
            .env("TOLLGATE_LOG", "warn")
            .env("TOLLGATE_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")
            .env(
                "TOLLGATE_WEBHOOK_RETRY_SCHEDULE",
                "1s,1s,2s,2s,3s,3s,5s,5s,5s,5s,5s,5s",
            )
            // Fair use is tested apart: here four people submit all the time.
            .env("TOLLGATE_JOBS_PER_USER_PER_MINUTE", "100000")
            .env("TOLLGATE_JOBS_BURST_PER_USER", "100000")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting tollgate serve: {e}"))
    }

    /// Starts node `i` and waits until it serves; a node that cannot start
    /// (the database is restarting) is started again, for up to a minute.
    async fn start_node(&mut self, i: usize) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let base = format!("http://127.0.0.1:{}", self.nodes[i].port);
        while Instant::now() < deadline {
            let mut child = self.spawn(i)?;
            self.nodes[i].starts += 1;
            let up =
                tokio::time::timeout(Duration::from_secs(20), tollgate_testkit::serving(&base))
                    .await
                    .unwrap_or(false);
            if up {
                self.nodes[i].child = Some(child);
                return Ok(());
            }
            let _ = child.kill();
            let _ = child.wait();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(format!(
            "node {i} ({}) did not come up in a minute: read {}",
            self.nodes[i].role,
            self.dir.display()
        ))
    }

    fn kill_node(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn stop_nodes(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill_node(i);
        }
    }

    /// The fault loop: runs until `plan.kills` nodes were killed. Every
    /// fortieth kill (from the tenth, the twentieth) an S3 stop or a
    /// PostgreSQL restart comes instead, so a short run has one of each.
    pub async fn nemesis(&mut self, plan: &Plan) -> Faults {
        let mut faults = Faults::default();
        let mut step = 0u32;
        while faults.kills < plan.kills {
            tokio::time::sleep(self.rng.millis(150, 1200)).await;
            step += 1;
            if self.backend == Backend::Postgres && step % 40 == 10 {
                self.stop_s3().await;
                faults.s3_stops += 1;
            } else if self.backend == Backend::Postgres && step % 40 == 20 {
                self.restart_postgres().await;
                faults.pg_restarts += 1;
            } else if self.rng.chance(25) {
                faults.provider_faults += self.provider_fault().await;
                faults.provider_scripts += 1;
            } else {
                let i = self.rng.below(self.nodes.len() as u64) as usize;
                self.kill_node(i);
                faults.kills += 1;
                *faults.kills_by_role.entry(self.nodes[i].role).or_default() += 1;
                if self.rng.chance(30) {
                    tokio::time::sleep(self.rng.millis(100, 1500)).await;
                }
                if let Err(e) = self.start_node(i).await {
                    eprintln!("chaos: {e}");
                }
            }
            if step.is_multiple_of(20) {
                println!("chaos: {} kills so far", faults.kills);
            }
        }
        faults
    }

    /// Scripts a few faults at one provider: hung, refused, dropped and
    /// failed submissions, and status checks that fail or hang.
    async fn provider_fault(&self) -> u32 {
        const NEXT: [&str; 6] = [
            "hang",
            "unavailable",
            "rate_limit",
            "accept_then_drop",
            "fail",
            "omit_cost",
        ];
        const POLL: [&str; 3] = ["unavailable", "hang", "unavailable"];
        let mock = if self.rng.chance(50) {
            &self.keyed
        } else {
            &self.unkeyed
        };
        let next: Vec<&str> = (0..1 + self.rng.below(3))
            .map(|_| *self.rng.pick(&NEXT))
            .collect();
        let poll: Vec<&str> = (0..self.rng.below(3))
            .map(|_| *self.rng.pick(&POLL))
            .collect();
        let n = (next.len() + poll.len()) as u32;
        let _ = self
            .http
            .post(format!("{}/_mock/script", mock.base))
            .json(&serde_json::json!({"next": next, "poll": poll}))
            .send()
            .await;
        n
    }

    async fn restart_postgres(&self) {
        let Some(cmd) = &self.pg_restart else { return };
        let out = Command::new("sh").args(["-c", cmd]).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("chaos: restarting PostgreSQL failed: {out:?}");
        }
    }

    async fn stop_s3(&self) {
        self.signal_s3("-STOP");
        tokio::time::sleep(self.rng.millis(2000, 5000)).await;
        self.signal_s3("-CONT");
    }

    fn signal_s3(&self, signal: &str) {
        for pid in &self.s3_pids {
            let _ = Command::new("kill").args([signal, pid]).status();
        }
    }

    /// After the faults: the S3 server running and every node up.
    pub async fn calm(&mut self) -> Result<(), String> {
        self.signal_s3("-CONT");
        for i in 0..self.nodes.len() {
            let running = self.nodes[i]
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
            if !running {
                self.kill_node(i);
                self.start_node(i).await?;
            }
        }
        Ok(())
    }

    /// Every node's log, for the panic check.
    pub fn logs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if name.ends_with(".log") {
                    out.push((name, std::fs::read_to_string(e.path()).unwrap_or_default()));
                }
            }
        }
        out
    }

    /// A mock's books: `/_mock/stats`.
    pub async fn stats(&self, mock: &Mock) -> Result<serde_json::Value, String> {
        let r = self
            .http
            .get(format!("{}/_mock/stats", mock.base))
            .send()
            .await
            .map_err(|e| format!("reading {}: {e}", mock.model))?;
        r.json().await.map_err(|e| e.to_string())
    }
}

async fn start_mock(
    bin_dir: &Path,
    dir: &Path,
    model: &'static str,
    idempotency: bool,
    http: &reqwest::Client,
) -> Result<Mock, String> {
    let port = free_port()?;
    let on = |b: bool| if b { "on" } else { "off" };
    let log =
        std::fs::File::create(dir.join(format!("mock-{model}.log"))).map_err(|e| e.to_string())?;
    let child = Command::new(bin_dir.join("tollgate-mock-provider"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--idempotency",
            on(idempotency),
            "--lookup",
            on(idempotency),
        ])
        .args(["--latency-ms", "300", "--price-usd", "0.10"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting tollgate-mock-provider: {e}"))?;
    let mock = Mock {
        child,
        base: format!("http://127.0.0.1:{port}"),
        model,
    };
    let url = format!("{}/_mock/stats", mock.base);
    tollgate_testkit::try_wait_until(Duration::from_secs(10), async || {
        http.get(&url).send().await.ok().map(|_| ())
    })
    .await
    .ok_or("the mock provider did not come up")?;
    Ok(mock)
}

/// The models: image edits at the provider that honours keys, videos at
/// the one that does not (so an unanswered video submission must park).
fn models(keyed: &Mock, unkeyed: &Mock) -> String {
    let common = "attempts = 3\non_uncertain = \"park\"\ndefault = true\npoll_ms = 100\n\
                  backoff_ms = 50\nbackoff_max_ms = 400\ntimeout_ms = 3000\npoll_timeout_s = 15\n";
    format!(
        "daily_cap_usd = \"2.00\"\n\n\
         [[models]]\nid = \"{}\"\nkind = \"image_edit\"\nprovider = \"http\"\nendpoint = \"{}\"\n\
         price = {{ per_generation = \"0.10\" }}\nidempotency = true\nlookup = true\n{common}\n\
         [[models]]\nid = \"{}\"\nkind = \"video\"\nprovider = \"http\"\nendpoint = \"{}\"\n\
         price = {{ per_generation = \"0.10\" }}\ndurations_s = [2]\n{common}",
        keyed.model, keyed.base, unkeyed.model, unkeyed.base
    )
}

async fn sqlite(dir: &Path) -> Result<(String, String, Db), String> {
    let url = format!("sqlite://{}?mode=rwc", dir.join("tollgate.db").display());
    let storage = dir.join("objects").display().to_string();
    let pool = sqlx::SqlitePool::connect(&url)
        .await
        .map_err(|e| format!("opening {url}: {e}"))?;
    Ok((url, storage, Db::Sqlite(pool)))
}

/// A new database on the given server, and a new bucket on the S3 server.
async fn postgres(seed: u64) -> Result<(String, String, Db), String> {
    let server = env("CHAOS_POSTGRES_URL")?;
    let name = format!("chaos_{}", seed % 1_000_000_000);
    let admin = sqlx::PgPool::connect(&server)
        .await
        .map_err(|e| format!("connecting to {server}: {e}"))?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .map_err(|e| format!("creating the database: {e}"))?;
    // A commit Tollgate was told of must survive a crash of the server
    // (the test server runs with synchronous_commit off, for speed).
    sqlx::query(&format!(
        "ALTER DATABASE {name} SET synchronous_commit = on"
    ))
    .execute(&admin)
    .await
    .map_err(|e| format!("setting synchronous_commit: {e}"))?;
    admin.close().await;
    let url = tollgate_testkit::replace_database(&server, &name);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .map_err(|e| format!("connecting to {url}: {e}"))?;
    let endpoint = env("TOLLGATE_TEST_S3_ENDPOINT")?;
    let bucket = format!("tg-chaos-{}", seed % 1_000_000_000);
    let spec = format!("s3://{bucket}?endpoint={endpoint}");
    let store = tollgate::storage::ObjectStore::open(&spec)
        .await
        .map_err(|e| format!("opening {spec}: {e}"))?;
    let tollgate::storage::ObjectStore::S3(s3) = &store else {
        return Err("an s3:// spec opened another store".into());
    };
    s3.client()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .map_err(|e| format!("creating the bucket: {e}"))?;
    Ok((url, spec, Db::Postgres(pool)))
}
