//! Execution: one dispatcher per node claims jobs (leased, fenced) in
//! batches sized to its free run slots, runs each job's steps (`workflow`;
//! a completed step is never run again, and the paid `generate` step is the
//! attempt runner, `runner`), heartbeats its node lease (every job it holds),
//! and gives held jobs back on shutdown; one committer applies the runs'
//! units of work in group commits; and a sweeper repairs lost wake-ups by
//! ringing for queued work on a schedule. No transaction is held across a
//! provider call.

mod committer;
mod run;
mod runner;
mod workflow;

pub use committer::Committer;
pub use run::Run;

use crate::model::{AssetId, JobId};
use crate::store::{Claim, Op, StoreError, StoreResult, Unit};
use crate::Tollgate;
use chrono::Utc;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

/// How often an idle node looks for work even without a doorbell.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// Jobs claimed in one conditional update at most.
const CLAIM_BATCH: usize = 32;
const _: () = assert!(CLAIM_BATCH as i64 <= crate::store::CLAIMS_PER_STATEMENT_MAX);
/// How long a claim waits for more runs to finish when only a few slots
/// are free.
const CLAIM_GATHER: Duration = Duration::from_millis(2);

/// Running workers; `shutdown` stops them claiming and gives back what they hold.
pub struct EngineHandle {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl EngineHandle {
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Starts this node's dispatcher (at most `workers` runs in flight), its
/// heartbeat, its webhook dispatcher, its sweeper and, on PostgreSQL, its
/// doorbell listener.
pub fn start(tollgate: Tollgate, workers: usize) -> EngineHandle {
    let (stop, stopped) = watch::channel(false);
    // Unique per start: a restarted process must not inherit the leases
    // (and heartbeat the jobs) of the one that died.
    let node = format!(
        "{}-{}-{}",
        hostname(),
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let (committer, committer_finished) = Committer::start(tollgate.store().clone());
    let mut tasks = vec![
        tokio::spawn(dispatch(
            tollgate.clone(),
            committer,
            node.clone(),
            workers.max(1),
            stopped.clone(),
        )),
        tokio::spawn(heartbeat(tollgate.clone(), node.clone(), stopped.clone())),
        // Rule 13: the outbox is posted beside the runs, never by them.
        tokio::spawn(crate::usecases::webhooks::dispatcher::run(
            tollgate.clone(),
            node,
            stopped.clone(),
        )),
        tokio::spawn(listen(tollgate.clone(), stopped.clone())),
    ];
    let sweeper = tollgate.clone();
    let mut sweeper_stop = stopped.clone();
    tasks.push(tokio::spawn(async move {
        // A lost wake-up costs at most one tick: the sweeper rings anyway,
        // and a claim also takes any job whose lease has expired. It also
        // settles any hold left counted for a finished job, from what its
        // attempts recorded, never by calling again.
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    sweeper.doorbell().notify_one();
                    match sweeper.store().settle_left_holds().await {
                        Ok(0) => {}
                        Ok(n) => tracing::warn!(holds = n, "settled holds left on finished jobs"),
                        Err(e) => tracing::warn!(error = %e, "settling left-over holds failed"),
                    }
                    if let Err(e) = sweeper.store().forget_stopped_nodes().await {
                        tracing::warn!(error = %e, "forgetting stopped nodes' leases failed");
                    }
                }
                _ = sweeper_stop.changed() => break,
            }
        }
    }));
    tasks.push(tokio::spawn(retention(tollgate.clone(), stopped.clone())));
    // Last: it finishes once the runs above have gone and their units are answered.
    tasks.push(committer_finished);
    EngineHandle { stop, tasks }
}

/// Retention's task: a pass every ten minutes, a few passes more while a
/// pass finds full batches (a backlog), each bounded.
async fn retention(t: Tollgate, mut stopped: watch::Receiver<bool>) {
    const PASSES_PER_TICK_MAX: usize = 10;
    let mut tick = tokio::time::interval(Duration::from_secs(600));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.changed() => return,
        }
        for _ in 0..PASSES_PER_TICK_MAX {
            match t.purge_expired(Utc::now()).await {
                Ok(p) if p.total() > 0 => {
                    tracing::info!(
                        outputs = p.outputs,
                        uploads = p.uploads,
                        events = p.events,
                        evidence = p.evidence,
                        deliveries = p.deliveries,
                        "retention purged"
                    );
                    if p.total() < crate::usecases::retention::PURGE_BATCH_MAX as u64 {
                        break;
                    }
                }
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "retention's purge failed; trying again later");
                    break;
                }
            }
        }
    }
}

/// Claims in batches up to the free run slots and runs each claim as its
/// own task; a run waiting on a provider holds a slot, not a thread.
async fn dispatch(
    t: Tollgate,
    committer: Committer,
    node: String,
    workers: usize,
    mut stopped: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(workers));
    let bell: Arc<Notify> = t.doorbell();
    let mut runs = JoinSet::new();
    loop {
        while runs.try_join_next().is_some() {}
        if *stopped.borrow() {
            break;
        }
        let free = slots.available_permits();
        if free == 0 {
            tokio::select! {
                _ = runs.join_next() => {}
                _ = stopped.changed() => {}
            }
            continue;
        }
        gather_slots(&slots, &mut runs, workers, &mut stopped).await;
        if *stopped.borrow() {
            continue;
        }
        let free = slots.available_permits();
        let n = free.min(CLAIM_BATCH);
        let lease_s = t.config().lease_s as f64;
        match t.store().claim_jobs(&node, n as i64, lease_s).await {
            Ok(claims) if !claims.is_empty() => {
                let full = claims.len() == n;
                start_runs(&t, &committer, claims, &slots, &mut runs, &stopped).await;
                if full {
                    continue;
                }
            }
            Ok(_) => {
                tokio::select! {
                    _ = bell.notified() => {}
                    _ = tokio::time::sleep(IDLE_POLL) => {}
                    _ = stopped.changed() => {}
                }
            }
            Err(e) => {
                tracing::warn!(%node, error = %e, "claiming failed; retrying");
                tokio::time::sleep(IDLE_POLL).await;
            }
        }
    }
    // Shutting down: runs give their jobs back at the next step or poll.
    while runs.join_next().await.is_some() {}
}

/// A claim is a statement and a commit: while runs are finishing, wait a
/// moment for a few more free slots rather than claiming one or two jobs
/// at a time.
async fn gather_slots(
    slots: &Semaphore,
    runs: &mut JoinSet<()>,
    workers: usize,
    stopped: &mut watch::Receiver<bool>,
) {
    let gather = (CLAIM_BATCH.min(workers) / 4).max(1);
    if slots.available_permits() >= gather {
        return;
    }
    let until = tokio::time::Instant::now() + CLAIM_GATHER;
    while slots.available_permits() < gather && !runs.is_empty() {
        tokio::select! {
            _ = runs.join_next() => {}
            _ = tokio::time::sleep_until(until) => break,
            _ = stopped.changed() => break,
        }
    }
}

/// One run per claim, each its own task holding a slot; the stored keys of
/// the claims' uploads are read once for the batch.
async fn start_runs(
    t: &Tollgate,
    committer: &Committer,
    claims: Vec<Claim>,
    slots: &Arc<Semaphore>,
    runs: &mut JoinSet<()>,
    stopped: &watch::Receiver<bool>,
) {
    let stored_at = asset_keys(t, &claims).await;
    for claim in claims {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let known = claim
            .job
            .request
            .assets()
            .into_iter()
            .filter_map(|a| stored_at.as_ref().map(|m| (a, m.get(&a).cloned())))
            .collect();
        runs.spawn(run_claim(
            t.clone(),
            committer.clone(),
            claim,
            known,
            stopped.clone(),
            permit,
        ));
    }
}

/// One row per beat extends every lease this node holds (its node lease),
/// however many runs are in flight. A process that dies stops beating, and
/// its jobs expire together for another node to claim.
async fn heartbeat(t: Tollgate, node: String, mut stopped: watch::Receiver<bool>) {
    let lease_s = t.config().lease_s;
    // Three beats per lease: one lost beat does not lose the jobs.
    let every = Duration::from_millis((lease_s as u64 * 1000 / 3).max(500));
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Err(e) = t.store().heartbeat_owner(&node, lease_s as f64).await {
                    tracing::warn!(%node, error = %e, "heartbeat failed");
                }
            }
            _ = stopped.changed() => break,
        }
    }
}

/// On PostgreSQL, turns other nodes' doorbells (LISTEN/NOTIFY) into local
/// wake-ups. A lost connection is re-made; what rang meanwhile the sweeper
/// finds (rule 4).
async fn listen(t: Tollgate, mut stopped: watch::Receiver<bool>) {
    loop {
        let mut bell = match t.store().doorbell().await {
            Ok(Some(b)) => b,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN for doorbells; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(5)) => continue,
                    _ = stopped.changed() => return,
                }
            }
        };
        loop {
            tokio::select! {
                rung = bell.next() => match rung {
                    Ok(_) => t.doorbell().notify_one(),
                    Err(e) => {
                        tracing::warn!(error = %e, "the doorbell connection failed");
                        break;
                    }
                },
                _ = stopped.changed() => return,
            }
        }
    }
}

/// Where the assets of a claimed batch are stored, in one look-up (an
/// asset's object never moves), so no run asks on its own. `None` when the
/// look-up failed: each run then asks itself.
async fn asset_keys(t: &Tollgate, claims: &[Claim]) -> Option<HashMap<AssetId, String>> {
    let mut ids: Vec<AssetId> = claims.iter().flat_map(|c| c.job.request.assets()).collect();
    ids.sort_unstable_by_key(|a| a.0);
    ids.dedup();
    if ids.is_empty() {
        return Some(HashMap::new());
    }
    match t.store().asset_object_keys(&ids).await {
        Ok(found) => Some(found.into_iter().collect()),
        Err(e) => {
            tracing::warn!(error = %e, "looking up the claimed jobs' assets failed; each run will");
            None
        }
    }
}

/// Starts the run of `claim` and returns what waits for it to end.
///
/// The run is its own task so that a panic in it gives the job back instead
/// of leaving it leased (and heartbeated) by this node. The waiting half is
/// a plain function returning an `async` block, not an `async fn`: an async
/// function's future keeps room for its arguments (the claim, its assets)
/// for as long as it waits, about 850 bytes that 100,000 waiting runs would
/// each hold twice over (heaptrack, issue 32).
fn run_claim(
    t: Tollgate,
    committer: Committer,
    claim: Claim,
    known_assets: Vec<(AssetId, Option<String>)>,
    stopped: watch::Receiver<bool>,
    slot: OwnedSemaphorePermit,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let job = claim.job.id;
    let token = claim.token;
    let inner = {
        let t = t.clone();
        tokio::spawn(async move {
            let mut run = Run::new(&t, &claim, &committer, stopped, known_assets);
            workflow::run(&mut run).await
        })
    };
    async move {
        let _slot = slot;
        ended(t, job, token, inner).await
    }
}

/// What a run's end leaves to do: nothing, or, when it was interrupted or
/// panicked, giving the job back.
async fn ended(t: Tollgate, job: JobId, token: i64, inner: JoinHandle<StoreResult<()>>) {
    let give_back = match inner.await {
        Ok(Ok(())) => false,
        Ok(Err(StoreError::StaleClaim)) => {
            t.note_claim_conflict();
            tracing::info!(%job, token, "run ended: the claim moved on");
            let lost = crate::model::Happening::LeaseLost { token };
            if let Err(e) = Box::pin(t.store().note_event(job, &lost, Utc::now())).await {
                tracing::warn!(%job, error = %e, "recording a lost lease failed");
            }
            false
        }
        Ok(Err(e)) => {
            tracing::warn!(%job, error = %e, "run interrupted; giving the job back shortly");
            // A pause first, so a persistent fault does not spin.
            tokio::time::sleep(Duration::from_secs(5)).await;
            true
        }
        Err(e) => {
            tracing::error!(%job, error = %e, "run panicked; giving the job back");
            true
        }
    };
    if give_back {
        let release = Unit {
            job,
            token,
            ops: vec![Op::Release],
        };
        match Box::pin(t.store().apply_one(release)).await {
            Ok(_) => {}
            // Its lease runs out and another run claims it.
            Err(e) => {
                tracing::warn!(%job, error = %e, "giving the job back failed; its lease will expire")
            }
        }
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into())
}
