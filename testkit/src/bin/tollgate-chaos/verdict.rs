//! What must hold after the faults, read from the database, the providers'
//! books, the webhook receiver and the clients' book: every accepted
//! submission is one job; no key paid twice; every job charged once and
//! refunded at most once (and exactly when it did not deliver); every
//! balance equals its ledger; every day's used and reserved equal its
//! attempts and never passed its cap; no hold but by parked work; every
//! uncertain attempt parked; every webhook event delivered under one id.

use crate::cluster::{Cluster, Db};
use crate::hooks::{self, Receiver};
use crate::load::Book;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// Violations kept in full per check; the rest are counted.
const SHOWN: usize = 8;

#[derive(Default)]
pub struct Report {
    pub violations: Vec<String>,
    counts: BTreeMap<String, String>,
}

impl Report {
    fn fail(&mut self, check: &str, what: String) {
        let n = self
            .violations
            .iter()
            .filter(|v| v.starts_with(check))
            .count();
        if n < SHOWN {
            self.violations.push(format!("{check}: {what}"));
        } else if n == SHOWN {
            self.violations.push(format!("{check}: ... and more"));
        }
    }

    pub fn count(&mut self, what: &str, value: impl std::fmt::Display) {
        self.counts.insert(what.to_string(), value.to_string());
    }

    pub fn summary(&self) -> String {
        let mut out = String::from("checked:");
        for (k, v) in &self.counts {
            out += &format!("\n  {k}: {v}");
        }
        out += &format!("\nviolations: {}", self.violations.len());
        for v in &self.violations {
            out += &format!("\n  VIOLATION {v}");
        }
        out
    }
}

/// A uuid in one spelling (SQLite gives 32 hex digits, PostgreSQL and the
/// API the hyphenated form).
fn uid(s: &str) -> String {
    uuid::Uuid::parse_str(s).map_or_else(|_| s.to_string(), |u| u.simple().to_string())
}

fn col(row: &[Option<String>], i: usize) -> String {
    row.get(i).cloned().flatten().unwrap_or_default()
}

fn micros(row: &[Option<String>], i: usize) -> Option<i64> {
    row.get(i).cloned().flatten().and_then(|s| s.parse().ok())
}

async fn one(db: &Db, sql: &str) -> i64 {
    db.rows(sql)
        .await
        .ok()
        .and_then(|r| r.first().map(|row| micros(row, 0).unwrap_or(0)))
        .unwrap_or(-1)
}

/// Waits until nothing is queued or running, no decision is being carried
/// out and no webhook delivery is pending; false if that never came.
pub async fn wait_for_quiet(cluster: &Cluster, limit: Duration) -> Result<(), String> {
    let db = &cluster.db;
    let busy = async || {
        [
            one(db, "SELECT CAST(count(*) AS TEXT) FROM jobs WHERE status IN ('queued', 'running')").await,
            one(db, "SELECT CAST(count(*) AS TEXT) FROM parked WHERE state IN ('decided', 'recovering')").await,
            one(db, "SELECT CAST(count(*) AS TEXT) FROM webhook_deliveries WHERE state = 'pending'").await,
        ]
    };
    let quiet =
        tollgate_testkit::try_wait_until(limit, async || (busy().await == [0, 0, 0]).then_some(()))
            .await;
    match quiet {
        Some(()) => Ok(()),
        None => {
            let [jobs, records, hooks] = busy().await;
            Err(format!(
                "after {} s: {jobs} jobs queued or running, {records} decisions being carried out, {hooks} webhooks pending",
                limit.as_secs()
            ))
        }
    }
}

/// Samples every day's breaker while the faults run: `used + reserved`
/// above the cap at any moment is a violation. Returns (samples, excesses).
pub fn watch_caps(
    db: Db,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    tokio::spawn(async move {
        let sql = format!(
            "SELECT {}, {}, {}, {} FROM budget_days",
            db.text("day"),
            db.usd("cap_usd"),
            db.usd("used_usd"),
            db.usd("reserved_usd")
        );
        let (mut samples, mut excess) = (0, Vec::new());
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            if let Ok(rows) = db.rows(&sql).await {
                samples += 1;
                for r in rows {
                    let (cap, used, held) = (micros(&r, 1), micros(&r, 2), micros(&r, 3));
                    if let (Some(cap), Some(used), Some(held)) = (cap, used, held) {
                        if used + held > cap && excess.len() < SHOWN {
                            excess.push(format!(
                                "{}: used {used} + reserved {held} > cap {cap} (micro-dollars)",
                                col(&r, 0)
                            ));
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        (samples, excess)
    })
}

pub async fn check(
    cluster: &Cluster,
    book: &Book,
    hooks: &Receiver,
    people: &[String],
    quiet: Result<(), String>,
) -> Result<Report, String> {
    let mut report = Report::default();
    if let Err(busy) = quiet {
        report.fail("quiet", busy);
    }
    let jobs = Jobs::read(&cluster.db).await?;
    report.count("jobs by status", format!("{:?}", jobs.by_status()));
    let errors = cluster
        .db
        .rows("SELECT CAST(error AS TEXT) FROM jobs WHERE status = 'failed'")
        .await?;
    let mut codes: BTreeMap<String, usize> = BTreeMap::new();
    for r in errors {
        let e: serde_json::Value = serde_json::from_str(&col(&r, 0)).unwrap_or_default();
        *codes
            .entry(e["code"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    report.count("failed jobs by code", format!("{codes:?}"));
    submissions(&mut report, &jobs, book, people);
    providers(&mut report, cluster).await?;
    charges(&mut report, &cluster.db, &jobs).await?;
    budget(&mut report, &cluster.db).await?;
    uncertain(&mut report, &cluster.db).await?;
    webhooks(&mut report, &cluster.db, hooks, &jobs, people).await?;
    for (name, log) in cluster.logs() {
        for line in log.lines().filter(|l| l.contains("panicked at")) {
            report.fail("panics", format!("{name}: {line}"));
        }
    }
    for v in &book.0.lock().expect("the book").violations {
        report.fail("clients", v.clone());
    }
    Ok(report)
}

/// Every job: id, owner, key, status, credits.
struct Jobs(Vec<(String, String, Option<String>, String, i64)>);

impl Jobs {
    async fn read(db: &Db) -> Result<Jobs, String> {
        let sql = format!(
            "SELECT {}, {}, idempotency_key, status, CAST(credits AS TEXT) FROM jobs",
            db.id("id"),
            db.id("user_id")
        );
        let rows = db.rows(&sql).await?;
        Ok(Jobs(
            rows.iter()
                .map(|r| {
                    (
                        uid(&col(r, 0)),
                        uid(&col(r, 1)),
                        r[2].clone(),
                        col(r, 3),
                        micros(r, 4).unwrap_or(0),
                    )
                })
                .collect(),
        ))
    }

    fn by_status(&self) -> BTreeMap<&str, usize> {
        let mut out = BTreeMap::new();
        for j in &self.0 {
            *out.entry(j.3.as_str()).or_default() += 1;
        }
        out
    }
}

/// Every accepted submission is one job, the one the API named; a refused
/// one made none.
fn submissions(report: &mut Report, jobs: &Jobs, book: &Book, people: &[String]) {
    let mut by_key: HashMap<(String, String), Vec<String>> = HashMap::new();
    for (id, user, key, _, _) in &jobs.0 {
        if let Some(k) = key {
            by_key
                .entry((user.clone(), k.clone()))
                .or_default()
                .push(id.clone());
        }
    }
    let ledger = book.0.lock().expect("the book");
    let mut accepted = 0;
    for s in &ledger.submissions {
        let found = by_key
            .get(&(uid(&people[s.person]), s.key.clone()))
            .cloned()
            .unwrap_or_default();
        match &s.job {
            Some(job) => {
                accepted += 1;
                if found != [uid(job)] {
                    report.fail(
                        "one job per accepted submission",
                        format!("key {} answered {job}, the database has {found:?}", s.key),
                    );
                }
            }
            None if found.len() > 1 => report.fail(
                "one job per accepted submission",
                format!("unanswered key {} made {found:?}", s.key),
            ),
            None => {}
        }
    }
    report.count("accepted submissions", accepted);
}

/// The providers' books: no key paid twice, and nothing paid that
/// Tollgate has no attempt for.
async fn providers(report: &mut Report, cluster: &Cluster) -> Result<(), String> {
    let db = &cluster.db;
    let keys: HashSet<String> = db
        .rows("SELECT idempotency_key FROM attempts")
        .await?
        .iter()
        .map(|r| col(r, 0))
        .collect();
    for mock in [&cluster.keyed, &cluster.unkeyed] {
        let stats = cluster.stats(mock).await?;
        let paid = stats["paid_predictions"].as_u64().unwrap_or(0);
        report.count(
            &format!(
                "{} paid predictions (the provider's bill at $0.10)",
                mock.model
            ),
            paid,
        );
        for (key, n) in stats["by_idempotency_key"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            if n.as_u64().unwrap_or(0) > 1 {
                report.fail(
                    "no key paid twice",
                    format!("{} billed key {key} {n} times", mock.model),
                );
            }
            if !keys.contains(&key) {
                report.fail(
                    "no unknown spend",
                    format!("{} billed key {key}, which no attempt has", mock.model),
                );
            }
        }
    }
    let priced = db
        .rows(&format!(
            "SELECT model, CAST(count(*) AS TEXT), CAST(count(cost_usd) AS TEXT), CAST(SUM({}) AS TEXT) FROM attempts GROUP BY model",
            match db {
                Db::Sqlite(_) => "cost_usd".to_string(),
                Db::Postgres(_) => "CAST(ROUND(cost_usd * 1000000) AS BIGINT)".to_string(),
            }
        ))
        .await?;
    for r in priced {
        report.count(
            &format!("{} attempts (priced, micro-dollars)", col(&r, 0)),
            format!("{} ({}, {})", col(&r, 1), col(&r, 2), col(&r, 3)),
        );
    }
    Ok(())
}

/// Charged once, refunded at most once and exactly when the job did not
/// deliver; every balance equals its ledger.
async fn charges(report: &mut Report, db: &Db, jobs: &Jobs) -> Result<(), String> {
    let rows = db
        .rows("SELECT reference, CAST(amount AS TEXT) FROM ledger")
        .await?;
    let mut debits: HashMap<String, Vec<i64>> = HashMap::new();
    let mut refunds: HashMap<String, Vec<i64>> = HashMap::new();
    for r in &rows {
        let (reference, amount) = (col(r, 0), micros(r, 1).unwrap_or(0));
        if let Some(job) = reference.strip_prefix("debit:job:") {
            debits.entry(uid(job)).or_default().push(amount);
        } else if let Some(job) = reference.strip_prefix("refund:job:") {
            refunds.entry(uid(job)).or_default().push(amount);
        }
    }
    // A repair of a version whose review found issues is on us: charged
    // and refunded when it is made (its timeline says `waived`).
    let waived: HashSet<String> = db
        .rows(&format!(
            "SELECT {} FROM job_events WHERE kind = 'waived'",
            db.id("job_id")
        ))
        .await?
        .iter()
        .map(|r| uid(&col(r, 0)))
        .collect();
    let mut refunded = 0;
    for (id, _, _, status, credits) in &jobs.0 {
        let d = debits.get(id).cloned().unwrap_or_default();
        let r = refunds.get(id).cloned().unwrap_or_default();
        refunded += r.len();
        if d != [-credits] {
            report.fail(
                "charged once",
                format!("job {id} ({status}) has debits {d:?} for {credits} credits"),
            );
        }
        if r.len() > 1 || r.iter().any(|a| a != credits) {
            report.fail(
                "refunded once",
                format!("job {id} ({status}) has refunds {r:?} for {credits} credits"),
            );
        }
        let should = match status.as_str() {
            _ if waived.contains(id) => Some(true),
            "succeeded" => Some(false),
            "failed" | "cancelled" => Some(true),
            _ => None,
        };
        if should.is_some_and(|s| s != (r.len() == 1)) {
            report.fail(
                "refunded exactly when not delivered",
                format!("job {id} {status} with refunds {r:?}"),
            );
        }
    }
    report.count(
        "refunds",
        format!("{refunded} ({} repairs on us)", waived.len()),
    );
    let balances = db
        .rows(&format!(
            "SELECT {}, CAST(u.balance AS TEXT), CAST((SELECT SUM(amount) FROM ledger l WHERE l.user_id = u.id) AS TEXT) FROM users u",
            db.id("u.id")
        ))
        .await?;
    for r in balances {
        let (balance, sum) = (micros(&r, 1).unwrap_or(0), micros(&r, 2).unwrap_or(0));
        if balance != sum {
            report.fail(
                "balance equals ledger",
                format!(
                    "user {} has {balance}, its ledger sums to {sum}",
                    col(&r, 0)
                ),
            );
        }
    }
    Ok(())
}

/// Each day's used and reserved equal its attempts' settled amounts and
/// unsettled holds, within its cap; no hold is left but by parked work.
async fn budget(report: &mut Report, db: &Db) -> Result<(), String> {
    let days = db
        .rows(&format!(
            "SELECT {}, {}, {}, {} FROM budget_days",
            db.text("day"),
            db.usd("cap_usd"),
            db.usd("used_usd"),
            db.usd("reserved_usd")
        ))
        .await?;
    let holds = db
        .rows(&format!(
            "SELECT {}, {}, {} FROM attempts WHERE hold_usd IS NOT NULL",
            db.text("budget_day"),
            db.usd("hold_usd"),
            db.usd("settled_usd")
        ))
        .await?;
    let mut sums: HashMap<String, (i64, i64)> = HashMap::new();
    for h in &holds {
        let e = sums.entry(col(h, 0)).or_default();
        match micros(h, 2) {
            Some(settled) => e.0 += settled,
            None => e.1 += micros(h, 1).unwrap_or(0),
        }
    }
    for d in &days {
        let day = col(d, 0);
        let (cap, used, held) = (
            micros(d, 1).unwrap_or(0),
            micros(d, 2).unwrap_or(0),
            micros(d, 3).unwrap_or(0),
        );
        let (settled, holding) = sums.get(&day).copied().unwrap_or_default();
        report.count(
            &format!("day {day} (micro-dollars)"),
            format!("cap {cap}, used {used}, reserved {held}"),
        );
        if (used, held) != (settled, holding) {
            report.fail("day equals its attempts", format!("{day}: used {used}, reserved {held}; attempts settled {settled}, hold {holding}"));
        }
        if used + held > cap {
            report.fail(
                "never over the cap",
                format!("{day}: used {used} + reserved {held} > cap {cap}"),
            );
        }
    }
    let stray = db
        .rows(&format!(
            "SELECT {} FROM attempts a WHERE a.hold_usd IS NOT NULL AND a.settled_usd IS NULL \
             AND NOT EXISTS (SELECT 1 FROM parked p WHERE p.job_id = a.job_id AND p.state <> 'closed')",
            db.id("a.job_id")
        ))
        .await?;
    for r in stray {
        report.fail(
            "no hold but by parked work",
            format!("job {} holds budget with no open parked record", col(&r, 0)),
        );
    }
    Ok(())
}

/// Every attempt left unanswered is parked work, never sent again (an
/// accepted one, `submitted`, was paid: a cancel books its estimate, which
/// the budget check covers).
async fn uncertain(report: &mut Report, db: &Db) -> Result<(), String> {
    let open = db
        .rows(&format!(
            "SELECT {}, state, idempotency_key FROM attempts a WHERE state = 'submitting' \
             AND NOT EXISTS (SELECT 1 FROM parked p WHERE p.job_id = a.job_id)",
            db.id("a.job_id")
        ))
        .await?;
    for r in open {
        report.fail(
            "uncertain attempts parked",
            format!(
                "job {}: attempt {} left {} with no parked record",
                col(&r, 0),
                col(&r, 2),
                col(&r, 1)
            ),
        );
    }
    let parked = db
        .rows("SELECT stage, state, CAST(count(*) AS TEXT) FROM parked GROUP BY stage, state")
        .await?;
    let parked: Vec<String> = parked
        .iter()
        .map(|r| format!("{} {} {}", col(r, 0), col(r, 1), col(r, 2)))
        .collect();
    report.count("parked records", parked.join(", "));
    let twice = db
        .rows(&format!(
            "SELECT {} FROM job_events WHERE kind = 'succeeded' GROUP BY job_id HAVING count(*) > 1",
            db.id("job_id")
        ))
        .await?;
    for r in twice {
        report.fail(
            "one end per job",
            format!("job {} succeeded twice", col(&r, 0)),
        );
    }
    Ok(())
}

/// Every event is delivered at least once, each under one webhook-id with
/// one body however often it was sent; every ended job told its owner.
async fn webhooks(
    report: &mut Report,
    db: &Db,
    hooks: &Receiver,
    jobs: &Jobs,
    people: &[String],
) -> Result<(), String> {
    let rows = db
        .rows(&format!(
            "SELECT webhook_id, event, {}, state, {} FROM webhook_deliveries",
            db.id("job_id"),
            db.id("user_id")
        ))
        .await?;
    let receipts = hooks.receipts();
    let by_id = hooks::by_id(&receipts);
    let mut events: HashSet<(String, String)> = HashSet::new();
    for r in &rows {
        let (webhook_id, event, job, state, user) = (
            col(r, 0),
            col(r, 1),
            uid(&col(r, 2)),
            col(r, 3),
            uid(&col(r, 4)),
        );
        events.insert((job.clone(), event.clone()));
        if state != "delivered" {
            report.fail("webhooks delivered", format!("{webhook_id} is {state}"));
            continue;
        }
        let person = people.iter().position(|p| uid(p) == user);
        let got = by_id
            .get(webhook_id.as_str())
            .map(|v| v.iter().any(|x| Some(x.person) == person));
        if got != Some(true) {
            report.fail(
                "webhooks delivered",
                format!("{webhook_id} is delivered but its endpoint never took it"),
            );
        }
    }
    for (id, got) in &by_id {
        let bodies: HashSet<&str> = got.iter().map(|r| r.body.as_str()).collect();
        if bodies.len() > 1 {
            report.fail(
                "one webhook-id, one body",
                format!("{id} came with {} bodies", bodies.len()),
            );
        }
        if !rows.iter().any(|r| col(r, 0) == *id) {
            report.fail(
                "one webhook-id, one body",
                format!("{id} was received but is not on record"),
            );
        }
    }
    for (id, _, _, status, _) in &jobs.0 {
        let event = match status.as_str() {
            "succeeded" => "generation.succeeded",
            "failed" => "generation.failed",
            "cancelled" => "generation.cancelled",
            "parked" => "generation.parked",
            _ => continue,
        };
        if !events.contains(&(id.clone(), event.to_string())) {
            report.fail(
                "every end is told",
                format!("job {id} is {status} with no {event} event"),
            );
        }
    }
    let (calls, refused) = hooks.counts();
    report.count("webhook deliveries", format!("{} on record, {calls} requests received ({refused} refused on purpose), {} distinct ids", rows.len(), by_id.len()));
    Ok(())
}
