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
                    sweeper.doorbell().notify_waiters();
                    sweep_holds(&sweeper).await;
                }
                _ = sweeper_stop.changed() => break,
            }
        }
    }));
    EngineHandle { stop, tasks }
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
    let cost = if attempts
        .iter()
        .any(|a| a.cost_usd.is_none() && a.error_class.as_deref() != Some("interrupted"))
    {
        None
    } else {
        Some(
            attempts
                .iter()
                .filter_map(|a| a.cost_usd)
                .fold(crate::model::Usd::ZERO, |s, c| s.plus(c)),
        )
    };
    t.store().settle(job, cost, Utc::now()).await
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
                // Cancelled under this run: nobody else will settle its hold.
                if let Err(e) = settle_abandoned(&self.tollgate, job).await {
                    tracing::warn!(%job, error = %e, "settling an abandoned hold failed");
                }
            }
            Err(e) => {
                tracing::warn!(%job, error = %e, "run interrupted; the job will be retried after its lease");
            }
        }
    }
}
