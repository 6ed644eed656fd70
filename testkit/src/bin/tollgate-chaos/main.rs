//! `tollgate-chaos`: Tollgate's promises checked under random faults.
//!
//! It runs real `tollgate serve` processes (one node on SQLite; a web node
//! and two worker nodes sharing S3 on PostgreSQL) against two
//! `tollgate-mock-provider` processes (one honours idempotency keys, one
//! does not), drives them from several API clients (new keys and replays,
//! cancels, repairs, reviewer decisions, an admin moving the day's cap),
//! and meanwhile kills nodes with SIGKILL, restarts PostgreSQL, stops the
//! S3 server and scripts provider faults. Then it waits for quiet and
//! checks, from the database and the providers' books, what must hold
//! (see `verdict`). It prints the counts and exits non-zero on any
//! violation. `scripts/chaos` sets up the servers and runs it.
//!
//! Owns: the run's order (set up, load and faults, quiet, verdict) and its
//! command line. The parts live in `cluster` (processes and faults),
//! `load` (the clients), `hooks` (the webhook receiver) and `verdict`.

mod cluster;
mod hooks;
mod load;
mod rng;
mod verdict;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one run is asked to do (from the command line).
#[derive(Clone, Debug)]
pub struct Plan {
    pub backend: cluster::Backend,
    /// SIGKILLs of a node in the run.
    pub kills: u32,
    pub seed: u64,
    /// Where the processes' logs and the database files go (kept on failure).
    pub dir: std::path::PathBuf,
}

const USAGE: &str =
    "usage: tollgate-chaos --backend sqlite|postgres [--kills N] [--seed S] [--dir D]\n\
  PostgreSQL needs CHAOS_POSTGRES_URL (a server to create a database on), CHAOS_PG_RESTART\n\
  (a command restarting it), TOLLGATE_TEST_S3_ENDPOINT with the AWS variables and\n\
  CHAOS_S3_PIDS (the S3 server's processes, stopped with SIGSTOP); scripts/chaos sets them.";

fn parse(args: &[String]) -> Result<Plan, String> {
    let mut backend = None;
    let mut kills = 200;
    let mut seed = None;
    let mut dir = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--backend" => backend = Some(cluster::Backend::parse(&value()?)?),
            "--kills" => kills = value()?.parse().map_err(|_| "--kills: a number")?,
            "--seed" => seed = Some(value()?.parse().map_err(|_| "--seed: a number")?),
            "--dir" => dir = Some(std::path::PathBuf::from(value()?)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let backend = backend.ok_or("--backend is required")?;
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tollgate-chaos-{}-{seed}", backend.name()))
    });
    Ok(Plan {
        backend,
        kills,
        seed,
        dir,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plan = match parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tollgate-chaos: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(plan)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("tollgate-chaos: {e}");
            ExitCode::from(3)
        }
    }
}

/// One run: true when no check was violated.
async fn run(plan: Plan) -> Result<bool, String> {
    let started = Instant::now();
    println!(
        "chaos: {} with {} kills, seed {} (logs in {})",
        plan.backend.name(),
        plan.kills,
        plan.seed,
        plan.dir.display()
    );
    let hooks = hooks::Receiver::start().await?;
    let mut cluster = cluster::Cluster::start(&plan).await?;
    let people = load::People::enrol(&cluster, &hooks).await?;
    let book = Arc::new(load::Book::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients = load::start(&cluster, &people, &book, &stop, plan.seed);
    let caps = verdict::watch_caps(cluster.db.clone(), stop.clone());
    let faults = cluster.nemesis(&plan).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for c in clients {
        let _ = c.await;
    }
    let (samples, excess) = caps.await.unwrap_or_default();
    book.0.lock().expect("the book").violations.extend(
        excess
            .into_iter()
            .map(|e| format!("over the cap while running: {e}")),
    );
    println!(
        "chaos: faults done after {:.0} s; waiting for quiet",
        started.elapsed().as_secs_f64()
    );
    cluster.calm().await?;
    let quiet = verdict::wait_for_quiet(&cluster, Duration::from_secs(240)).await;
    println!(
        "chaos: {} after {:.0} s",
        if quiet.is_ok() {
            "quiet"
        } else {
            "never quiet"
        },
        started.elapsed().as_secs_f64()
    );
    let ids: Vec<String> = people.users.iter().map(|p| p.id.clone()).collect();
    let mut report = verdict::check(&cluster, &book, &hooks, &ids, quiet).await?;
    report.count("breaker samples while running", samples);
    cluster.stop_nodes();
    println!("{}", faults.summary());
    println!("{}", book.summary());
    println!("{}", report.summary());
    println!(
        "chaos: {} in {:.0} s",
        if report.violations.is_empty() {
            "no violation"
        } else {
            "VIOLATIONS"
        },
        started.elapsed().as_secs_f64()
    );
    if report.violations.is_empty() {
        let _ = std::fs::remove_dir_all(&plan.dir);
    }
    Ok(report.violations.is_empty())
}
