//! The clients: four people submitting (new keys and replays of old ones,
//! cancels, repairs), a reviewer deciding parked work and an admin moving
//! the day's cap (only ever up, to just above what is spent and held) and
//! halting the day now and then. Every answer is written in the `Book`,
//! which the verdict compares with the database.

use crate::cluster::Cluster;
use crate::hooks::Receiver;
use crate::rng::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Real photographs (tests/photos, licences in its README) and the target
/// each plainly shows.
const PHOTOS: [(&str, &str); 4] = [
    ("dog_corgi.jpg", "pet"),
    ("cat_tabby.jpg", "pet"),
    ("person_grace_hopper.jpg", "person"),
    ("dog_german_shepherd.jpg", "pet"),
];
const STYLES: [&str; 5] = ["embroidery", "origami", "mosaic", "linocut", "watercolour"];

pub struct Person {
    pub id: String,
    pub token: String,
    asset: String,
    target: &'static str,
}

pub struct People {
    pub users: Vec<Person>,
    reviewer: String,
    admin: String,
}

impl People {
    /// Creates the people with the command line (users, credits, tokens),
    /// uploads each one's photo and registers each one's webhook endpoint.
    pub async fn enrol(cluster: &Cluster, hooks: &Receiver) -> Result<People, String> {
        let photos = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/photos");
        let token = |email: &str, role: &str| -> Result<String, String> {
            cluster.cli(
                &["user", "add", "--email", email, "--role", role],
                Some("chaos password 1"),
            )?;
            cluster.cli(&["token", "create", "--email", email], None)
        };
        let api = cluster.api();
        let mut users = Vec::new();
        for (i, (file, target)) in PHOTOS.iter().enumerate() {
            let email = format!("person{i}@chaos.example");
            let token = token(&email, "user")?;
            cluster.cli(
                &["credits", "grant", "--email", &email, "--amount", "1000000"],
                None,
            )?;
            let bytes = std::fs::read(photos.join(file)).map_err(|e| format!("{file}: {e}"))?;
            let asset = call(
                &cluster.http,
                &api,
                &token,
                "POST",
                "/v1/assets",
                Body::Jpeg(bytes),
                None,
            )
            .await;
            let me = call(
                &cluster.http,
                &api,
                &token,
                "GET",
                "/v1/me",
                Body::None,
                None,
            )
            .await;
            let hook = json!({"url": hooks.url(i), "events": [
                "generation.succeeded", "generation.failed", "generation.cancelled", "generation.parked"]});
            let endpoint = call(
                &cluster.http,
                &api,
                &token,
                "POST",
                "/v1/webhook-endpoints",
                Body::Json(hook),
                None,
            )
            .await;
            match (asset, me, endpoint) {
                (Some((201, a)), Some((200, me)), Some((201, _))) => users.push(Person {
                    id: me["id"].as_str().unwrap_or_default().to_string(),
                    token,
                    asset: a["id"].as_str().unwrap_or_default().to_string(),
                    target,
                }),
                other => return Err(format!("enrolling {email}: {other:?}")),
            }
        }
        Ok(People {
            users,
            reviewer: token("reviewer@chaos.example", "reviewer")?,
            admin: token("admin@chaos.example", "admin")?,
        })
    }
}

pub enum Body {
    None,
    Json(Value),
    Jpeg(Vec<u8>),
}

/// One API call, tried again under the same key while the node is down,
/// restarting or answering 5xx (for up to 30 s): the status and body of
/// the first real answer, or None.
pub async fn call(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Body,
    key: Option<&str>,
) -> Option<(u16, Value)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = format!("{api}{path}");
    while Instant::now() < deadline {
        let mut r = match method {
            "GET" => http.get(&url),
            "PUT" => http.put(&url),
            _ => http.post(&url),
        }
        .bearer_auth(token);
        if let Some(k) = key {
            r = r.header("Idempotency-Key", k);
        }
        r = match &body {
            Body::None => r,
            Body::Json(v) => r.json(v),
            Body::Jpeg(b) => r.header("Content-Type", "image/jpeg").body(b.clone()),
        };
        if let Ok(resp) = r.send().await {
            let status = resp.status().as_u16();
            if status < 500 {
                let v = resp.json().await.unwrap_or(Value::Null);
                return Some((status, v));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// A submission as the client knows it.
#[derive(Clone, Debug)]
pub struct Submission {
    pub person: usize,
    pub key: String,
    pub body: Value,
    /// The job id the API answered, when it answered 201/202.
    pub job: Option<String>,
}

#[derive(Default)]
pub struct Ledger {
    pub submissions: Vec<Submission>,
    /// Jobs made otherwise: repairs and reviewers' new attempts.
    pub other_jobs: Vec<String>,
    pub refused: BTreeMap<u16, u64>,
    pub unanswered: u64,
    pub replays: u64,
    pub cancels: u64,
    pub repairs: u64,
    pub decisions: BTreeMap<String, u64>,
    pub decisions_refused: BTreeMap<String, u64>,
    pub cap_raises: u64,
    pub halts: u64,
    /// What a client saw that breaks a promise at once (a replay answered
    /// with another job, a cap exceeded).
    pub violations: Vec<String>,
}

#[derive(Default)]
pub struct Book(pub Mutex<Ledger>);

impl Book {
    fn with<T>(&self, f: impl FnOnce(&mut Ledger) -> T) -> T {
        f(&mut self.0.lock().expect("the book"))
    }

    pub fn summary(&self) -> String {
        self.with(|l| {
            let accepted = l.submissions.iter().filter(|s| s.job.is_some()).count();
            format!(
                "load: {} submissions ({accepted} accepted, refused {:?}, {} unanswered), {} replays, \
                 {} cancels, {} repairs, decisions {:?} (refused {:?}), {} cap raises, {} halts",
                l.submissions.len(),
                l.refused,
                l.unanswered,
                l.replays,
                l.cancels,
                l.repairs,
                l.decisions,
                l.decisions_refused,
                l.cap_raises,
                l.halts
            )
        })
    }
}

/// Starts every client; each stops when `stop` is set.
pub fn start(
    cluster: &Cluster,
    people: &People,
    book: &Arc<Book>,
    stop: &Arc<AtomicBool>,
    seed: u64,
) -> Vec<JoinHandle<()>> {
    // The clients hold what they need: the cluster stays with the nemesis.
    let ctx = Arc::new(Ctx {
        api: cluster.api(),
        http: cluster.http.clone(),
        keyed: (cluster.keyed.model, cluster.keyed.base.clone()),
        unkeyed: (cluster.unkeyed.model, cluster.unkeyed.base.clone()),
        users: people
            .users
            .iter()
            .map(|p| (p.token.clone(), p.asset.clone(), p.target))
            .collect(),
        reviewer: people.reviewer.clone(),
        admin: people.admin.clone(),
        book: book.clone(),
        stop: stop.clone(),
    });
    let mut tasks = Vec::new();
    for person in 0..people.users.len() {
        let (ctx, rng) = (
            ctx.clone(),
            Rng::new(seed.wrapping_add(person as u64 * 7919)),
        );
        tasks.push(tokio::spawn(
            async move { ctx.submitter(person, rng).await },
        ));
    }
    let (c, rng) = (ctx.clone(), Rng::new(seed ^ 0xDEC1DE));
    tasks.push(tokio::spawn(async move { c.reviewer(rng).await }));
    let (c, rng) = (ctx, Rng::new(seed ^ 0xCA9));
    tasks.push(tokio::spawn(async move { c.admin(rng).await }));
    tasks
}

struct Ctx {
    api: String,
    http: reqwest::Client,
    keyed: (&'static str, String),
    unkeyed: (&'static str, String),
    users: Vec<(String, String, &'static str)>,
    reviewer: String,
    admin: String,
    book: Arc<Book>,
    stop: Arc<AtomicBool>,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    async fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> Option<(u16, Value)> {
        let body = body.map_or(Body::None, Body::Json);
        call(&self.http, &self.api, token, method, path, body, key).await
    }

    /// One person's loop: mostly new jobs, some replays, cancels and repairs.
    async fn submitter(&self, person: usize, rng: Rng) {
        let mut n = 0u64;
        while !self.stopped() {
            tokio::time::sleep(rng.millis(150, 900)).await;
            let roll = rng.below(100);
            if roll < 62 {
                n += 1;
                self.submit(person, &rng, n).await;
            } else if roll < 77 {
                self.replay(person, &rng).await;
            } else if roll < 90 {
                self.cancel(person, &rng).await;
            } else {
                n += 1;
                self.repair(person, &rng, n).await;
            }
        }
    }

    fn request(&self, person: usize, rng: &Rng, n: u64) -> Value {
        let (_, asset, target) = &self.users[person];
        if rng.chance(25) {
            json!({"kind": "video", "prompt": format!("a paper boat, take {n}"), "model": self.unkeyed.0,
                   "duration_s": 2, "resolution": "720p"})
        } else {
            json!({"kind": "image_edit", "source": asset, "target": {"kind": target},
                   "style": rng.pick(&STYLES), "strength": "balanced"})
        }
    }

    async fn submit(&self, person: usize, rng: &Rng, n: u64) {
        let key = format!("p{person}-{n}");
        let body = self.request(person, rng, n);
        let answer = self
            .call(
                &self.users[person].0,
                "POST",
                "/v1/jobs",
                Some(body.clone()),
                Some(&key),
            )
            .await;
        let job = match &answer {
            Some((201 | 202, v)) => v["id"].as_str().map(str::to_string),
            _ => None,
        };
        self.book.with(|l| {
            match &answer {
                None => l.unanswered += 1,
                Some((201 | 202, _)) => {}
                Some((s, _)) => *l.refused.entry(*s).or_default() += 1,
            }
            l.submissions.push(Submission {
                person,
                key,
                body,
                job,
            });
        });
    }

    fn accepted(&self, person: usize, rng: &Rng) -> Option<Submission> {
        self.book.with(|l| {
            let mine: Vec<&Submission> = l
                .submissions
                .iter()
                .filter(|s| s.person == person && s.job.is_some())
                .collect();
            (!mine.is_empty()).then(|| (*rng.pick(&mine)).clone())
        })
    }

    /// The same key and body again: the same job, never a second one.
    async fn replay(&self, person: usize, rng: &Rng) {
        let Some(s) = self.accepted(person, rng) else {
            return;
        };
        let answer = self
            .call(
                &self.users[person].0,
                "POST",
                "/v1/jobs",
                Some(s.body.clone()),
                Some(&s.key),
            )
            .await;
        self.book.with(|l| {
            l.replays += 1;
            match answer {
                Some((201 | 202, v)) if v["id"].as_str() == s.job.as_deref() => {}
                None => l.unanswered += 1,
                Some((status, v)) => l.violations.push(format!(
                    "replay of {} answered {status} {v} instead of job {:?}",
                    s.key, s.job
                )),
            }
        });
    }

    async fn cancel(&self, person: usize, rng: &Rng) {
        let Some(s) = self.accepted(person, rng) else {
            return;
        };
        let job = s.job.unwrap_or_default();
        let answer = self
            .call(
                &self.users[person].0,
                "POST",
                &format!("/v1/jobs/{job}/cancel"),
                None,
                None,
            )
            .await;
        self.book.with(|l| match answer {
            Some((200, _)) => l.cancels += 1,
            None => l.unanswered += 1,
            Some((status, v)) => l
                .violations
                .push(format!("cancel of {job} answered {status} {v}")),
        });
    }

    /// A repair of one of the person's delivered image edits.
    async fn repair(&self, person: usize, rng: &Rng, n: u64) {
        let Some(s) = self.accepted(person, rng) else {
            return;
        };
        let job = s.job.unwrap_or_default();
        let token = &self.users[person].0;
        let Some((200, v)) = self
            .call(token, "GET", &format!("/v1/jobs/{job}"), None, None)
            .await
        else {
            return;
        };
        if v["status"] != "succeeded" || v["kind"] != "image_edit" {
            return;
        }
        let key = format!("p{person}-repair-{n}");
        let body = json!({"instruction": "keep the fur photographic"});
        let answer = self
            .call(
                token,
                "POST",
                &format!("/v1/jobs/{job}/repairs"),
                Some(body),
                Some(&key),
            )
            .await;
        self.book.with(|l| match answer {
            Some((201 | 202, v)) => {
                l.repairs += 1;
                l.other_jobs.extend(v["id"].as_str().map(str::to_string));
            }
            None => l.unanswered += 1,
            Some((s, _)) => *l.refused.entry(s).or_default() += 1,
        });
    }

    /// The reviewer: decides open records one by one, reconciling with the
    /// prediction the provider shows under the record's key when there is
    /// one (as a person reading the provider's dashboard would).
    async fn reviewer(&self, rng: Rng) {
        while !self.stopped() {
            tokio::time::sleep(rng.millis(300, 900)).await;
            let Some((200, page)) = self
                .call(
                    &self.reviewer,
                    "GET",
                    "/v1/parked?state=open&limit=20",
                    None,
                    None,
                )
                .await
            else {
                continue;
            };
            for record in page["data"].as_array().cloned().unwrap_or_default() {
                if self.stopped() {
                    return;
                }
                self.decide(&record, &rng).await;
            }
        }
    }

    async fn decide(&self, record: &Value, rng: &Rng) {
        let allowed: Vec<String> = record["allowed_actions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if allowed.is_empty() {
            return;
        }
        let found = self.prediction_for(record).await;
        let action = match (&found, allowed.iter().any(|a| a == "reconcile")) {
            (Some(_), true) if rng.chance(70) => "reconcile".to_string(),
            _ => {
                let others: Vec<&String> = allowed.iter().filter(|a| *a != "reconcile").collect();
                if others.is_empty() {
                    return;
                }
                rng.pick(&others).to_string()
            }
        };
        let mut body =
            json!({"action": action, "evidence": "chaos reviewer: looked at the provider's books"});
        if action == "reconcile" {
            body["provider_job_id"] = json!(found);
        }
        if action == "accept_failure" {
            body["refund"] = json!(true);
            body["release_hold"] = json!(true);
        }
        let id = record["id"].as_str().unwrap_or_default();
        let answer = self
            .call(
                &self.reviewer,
                "POST",
                &format!("/v1/parked/{id}/decisions"),
                Some(body),
                None,
            )
            .await;
        self.book.with(|l| match answer {
            Some((200 | 201, v)) => {
                *l.decisions.entry(action).or_default() += 1;
                l.other_jobs
                    .extend(v["new_attempt_job_id"].as_str().map(str::to_string));
            }
            None => l.unanswered += 1,
            Some((status, v)) => {
                let code = v["error"]["code"].as_str().unwrap_or("?");
                *l.decisions_refused
                    .entry(format!("{action} {status} {code}"))
                    .or_default() += 1;
            }
        });
    }

    /// The provider's prediction made under the record's key, if any.
    async fn prediction_for(&self, record: &Value) -> Option<String> {
        let key = record["idempotency_key"].as_str()?;
        let base = if record["model"].as_str() == Some(self.keyed.0)
            || record["attempts"].to_string().contains(self.keyed.0)
        {
            &self.keyed.1
        } else {
            &self.unkeyed.1
        };
        let stats: Value = self
            .http
            .get(format!("{base}/_mock/stats"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        stats["predictions"]
            .as_array()?
            .iter()
            .find(|p| p["idempotency_key"].as_str() == Some(key))
            .and_then(|p| p["id"].as_str().map(str::to_string))
    }

    /// The admin: keeps the day's cap just above what is spent and held
    /// (only ever raising it), and halts the day for a moment now and then.
    async fn admin(&self, rng: Rng) {
        while !self.stopped() {
            tokio::time::sleep(rng.millis(300, 800)).await;
            let day = chrono::Utc::now().date_naive().to_string();
            let path = format!("/v1/budget/{day}");
            let row = match self.call(&self.admin, "GET", &path, None, None).await {
                Some((200, row)) => row,
                None => continue,
                Some(other) => {
                    self.book
                        .with(|l| l.violations.push(format!("GET {path} answered {other:?}")));
                    continue;
                }
            };
            let usd = |k: &str| {
                tollgate::model::Usd::parse(row[k].as_str().unwrap_or("0"))
                    .unwrap_or(tollgate::model::Usd::ZERO)
            };
            let (cap, spent) = (usd("cap_usd"), usd("used_usd").plus(usd("reserved_usd")));
            let floor = spent.plus(tollgate::model::Usd::parse("2.00").expect("a sum"));
            if floor.decimal() > cap.decimal() {
                let new = spent.plus(tollgate::model::Usd::parse("5.00").expect("a sum"));
                let body = json!({"cap_usd": new.decimal().to_string()});
                match self
                    .call(&self.admin, "PUT", &path, Some(body.clone()), None)
                    .await
                {
                    Some((200, _)) => self.book.with(|l| l.cap_raises += 1),
                    None => {}
                    Some(other) => self.book.with(|l| {
                        l.violations
                            .push(format!("PUT {path} {body} answered {other:?}"))
                    }),
                }
            }
            // Rare and short: a halt fails every job claimed while it
            // lasts, and the queue is long under this load.
            if rng.chance(1) {
                let halt = self
                    .call(
                        &self.admin,
                        "POST",
                        &format!("{path}/halt"),
                        Some(json!({"reason": "chaos: a look at the bill"})),
                        None,
                    )
                    .await;
                tokio::time::sleep(rng.millis(100, 300)).await;
                let resume = self
                    .call(&self.admin, "POST", &format!("{path}/resume"), None, None)
                    .await;
                self.book.with(|l| {
                    l.halts += 1;
                    if !matches!(resume, Some((200, _))) {
                        l.violations
                            .push(format!("halt {halt:?} then resume answered {resume:?}"));
                    }
                });
            }
        }
    }
}
