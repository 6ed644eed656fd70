//! Execution: workers that claim jobs (leased, fenced), run each job's
//! fixed list of steps (a completed step is never run again), heartbeat
//! their leases, and give held jobs back on shutdown; and a sweeper that
//! repairs lost wake-ups by ringing for queued work on a schedule and lets
//! expired leases be claimed again. No transaction is held across a
//! provider call: every step is its own short write.

mod workflow;

use crate::store::{Claim, StoreError};
use crate::Tollgate;
use chrono::{Duration as ChronoDuration, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

/// How often an idle node looks for work even without a doorbell.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// Jobs claimed in one conditional update at most.
const CLAIM_BATCH: usize = 32;

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
/// heartbeat, its sweeper and, on PostgreSQL, its doorbell listener.
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
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(dispatch(
        tollgate.clone(),
        node.clone(),
        workers.max(1),
        stopped.clone(),
    )));
    tasks.push(tokio::spawn(heartbeat(
        tollgate.clone(),
        node,
        stopped.clone(),
    )));
    tasks.push(tokio::spawn(listen(tollgate.clone(), stopped.clone())));
    let sweeper = tollgate.clone();
    let mut sweeper_stop = stopped.clone();
    tasks.push(tokio::spawn(async move {
        // A lost wake-up costs at most one tick: the sweeper rings anyway,
        // and a claim also takes any job whose lease has expired. It also
        // settles holds a dead run left on a finished job, from what the
        // job's attempts recorded, never by calling again.
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    sweeper.doorbell().notify_one();
                    sweep_holds(&sweeper).await;
                }
                _ = sweeper_stop.changed() => break,
            }
        }
    }));
    EngineHandle { stop, tasks }
}

/// Claims in batches up to the free run slots and runs each claim as its
/// own task; a run waiting on a provider holds a slot, not a thread.
async fn dispatch(t: Tollgate, node: String, workers: usize, mut stopped: watch::Receiver<bool>) {
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
        let n = free.min(CLAIM_BATCH);
        let now = Utc::now();
        let until = now + ChronoDuration::seconds(t.config().lease_s);
        match t.store().claim_jobs(&node, n as i64, until, now).await {
            Ok(claims) if !claims.is_empty() => {
                let full = claims.len() == n;
                for claim in claims {
                    let Ok(permit) = slots.clone().acquire_owned().await else {
                        break;
                    };
                    runs.spawn(run_claim(t.clone(), claim, stopped.clone(), permit));
                }
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

/// One write per beat extends every lease this node holds, however many
/// runs are in flight. A process that dies stops beating, and its leases
/// expire for another node to claim.
async fn heartbeat(t: Tollgate, node: String, mut stopped: watch::Receiver<bool>) {
    let lease_s = t.config().lease_s;
    // Three beats per lease: one lost beat does not lose the jobs.
    let every = Duration::from_millis((lease_s as u64 * 1000 / 3).max(500));
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let until = Utc::now() + ChronoDuration::seconds(lease_s);
                if let Err(e) = t.store().heartbeat_owner(&node, until).await {
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

async fn run_claim(
    t: Tollgate,
    claim: Claim,
    stopped: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let job = claim.job.id;
    let token = claim.token;
    // The run is its own task so that a panic in it gives the job back
    // instead of leaving it leased (and heartbeated) by this node.
    let inner = {
        let t = t.clone();
        let fut = async move {
            let mut stopped = stopped;
            workflow::run(&t, &claim, &mut stopped).await
        };
        tokio::spawn(fut)
    };
    match inner.await {
        Ok(Ok(())) => {}
        Ok(Err(StoreError::StaleClaim)) => {
            t.note_claim_conflict();
            tracing::info!(%job, token, "run ended: the claim moved on");
            let lost = serde_json::json!({"token": token});
            if let Err(e) = t
                .store()
                .note_event(job, "lease_lost", &lost, Utc::now())
                .await
            {
                tracing::warn!(%job, error = %e, "recording a lost lease failed");
            }
            // Cancelled under this run: nobody else will settle its hold.
            if let Err(e) = settle_abandoned(&t, job).await {
                tracing::warn!(%job, error = %e, "settling an abandoned hold failed");
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(%job, error = %e, "run interrupted; giving the job back shortly");
            // A pause first, so a persistent fault does not spin.
            tokio::time::sleep(Duration::from_secs(5)).await;
            let _ = t.store().release_claim(job, token, Utc::now()).await;
        }
        Err(e) => {
            tracing::error!(%job, error = %e, "run panicked; giving the job back");
            let _ = t.store().release_claim(job, token, Utc::now()).await;
        }
    }
}

async fn sweep_holds(t: &Tollgate) {
    match t.store().held_on_finished_jobs(100).await {
        Ok(jobs) => {
            for job in jobs {
                if let Err(e) = settle_abandoned(t, job).await {
                    tracing::warn!(%job, error = %e, "settling a left-over hold failed");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "looking for left-over holds failed"),
    }
}

/// Settles the hold of a job that ended while a run held it (a cancel won),
/// from what its attempts recorded, never by calling again: nothing paid is
/// zero, a priced attempt its cost, and any attempt that may have been paid
/// without a price keeps the estimate booked. Does nothing for a job that is
/// not terminal (its new owner settles it) or whose hold is already settled.
pub async fn settle_abandoned(t: &Tollgate, job: crate::model::JobId) -> Result<bool, StoreError> {
    let Some(j) = t.store().job(job).await? else {
        return Ok(false);
    };
    if !j.status.is_terminal() {
        return Ok(false);
    }
    let attempts = t.store().attempts(job).await?;
    let cost = crate::providers::runner::spend_of(&attempts);
    t.store().settle(job, cost, Utc::now()).await
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into())
}
