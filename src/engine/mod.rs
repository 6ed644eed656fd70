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
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// How often an idle worker looks for work even without a doorbell.
const IDLE_POLL: Duration = Duration::from_secs(1);

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

/// Starts `workers` workers and the sweeper on this node.
pub fn start(tollgate: Tollgate, workers: usize) -> EngineHandle {
    let (stop, stopped) = watch::channel(false);
    let node = format!("{}-{}", hostname(), std::process::id());
    let mut tasks = Vec::new();
    for n in 0..workers.max(1) {
        let worker = Worker {
            tollgate: tollgate.clone(),
            id: format!("{node}/w{n}"),
            stopped: stopped.clone(),
        };
        tasks.push(tokio::spawn(worker.run()));
    }
    let sweeper_bell = tollgate.doorbell();
    let mut sweeper_stop = stopped.clone();
    tasks.push(tokio::spawn(async move {
        // A lost wake-up costs at most one tick: the sweeper rings anyway,
        // and a claim also takes any job whose lease has expired.
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = tick.tick() => sweeper_bell.notify_waiters(),
                _ = sweeper_stop.changed() => break,
            }
        }
    }));
    EngineHandle { stop, tasks }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into())
}

struct Worker {
    tollgate: Tollgate,
    id: String,
    stopped: watch::Receiver<bool>,
}

impl Worker {
    async fn run(mut self) {
        let bell: Arc<Notify> = self.tollgate.doorbell();
        loop {
            if *self.stopped.borrow() {
                break;
            }
            let now = Utc::now();
            let claimed = self
                .tollgate
                .store()
                .claim_jobs(
                    &self.id,
                    1,
                    now + ChronoDuration::seconds(self.tollgate.config().lease_s),
                    now,
                )
                .await;
            match claimed {
                Ok(mut claims) if !claims.is_empty() => {
                    let claim = claims.remove(0);
                    self.run_claim(claim).await;
                }
                Ok(_) => {
                    tokio::select! {
                        _ = bell.notified() => {}
                        _ = tokio::time::sleep(IDLE_POLL) => {}
                        _ = self.stopped.changed() => {}
                    }
                }
                Err(e) => {
                    tracing::warn!(worker = %self.id, error = %e, "claiming failed; retrying");
                    tokio::time::sleep(IDLE_POLL).await;
                }
            }
        }
    }

    async fn run_claim(&mut self, claim: Claim) {
        let job = claim.job.id;
        let token = claim.token;
        let store = self.tollgate.store().clone();
        let lease_s = self.tollgate.config().lease_s;
        // Three heartbeats per lease: one lost beat does not lose the job.
        let every = Duration::from_millis((lease_s as u64 * 1000 / 3).max(500));
        let beat = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let until = Utc::now() + ChronoDuration::seconds(lease_s);
                match store.heartbeat(job, token, until).await {
                    Ok(true) => {}
                    // Lost (cancelled, or reclaimed after a stall): the
                    // run's next write is refused by its token.
                    _ => break,
                }
            }
        });
        let result = workflow::run(&self.tollgate, &claim, &mut self.stopped).await;
        beat.abort();
        match result {
            Ok(()) => {}
            Err(StoreError::StaleClaim) => {
                self.tollgate.note_claim_conflict();
                tracing::info!(%job, token, "run ended: the claim moved on");
            }
            Err(e) => {
                tracing::warn!(%job, error = %e, "run interrupted; the job will be retried after its lease");
            }
        }
    }
}
