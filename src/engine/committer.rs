//! Group commit: a node's runs hand their units of work to one committer,
//! which applies whatever has gathered (up to a bound) in one transaction,
//! each unit with its own fencing check, then answers every waiter. A run
//! acts on a unit only after its own answer, above all before a paid call.
//! Under load the batches grow by themselves: while one transaction is in
//! flight the next batch gathers, as in River's batch completer and
//! Restate's log writer (one batch, one commit, then every waiter).
//!
//! On PostgreSQL the committer has a thread, a runtime and a connection of
//! its own: on the node's busy runtime it waited longer to be polled than
//! its transaction took, and every run waits on it.

use crate::store::{Applied, Backend, Store, StoreError, StoreResult, Unit};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Units applied in one transaction at most.
const BATCH_MAX: usize = 128;
const _: () = assert!(BATCH_MAX <= crate::store::UNITS_PER_BATCH_MAX);
/// Units waiting for the committer at most; a run waits for room.
const QUEUE_MAX: usize = 4096;

struct Request {
    unit: Unit,
    done: oneshot::Sender<StoreResult<Applied>>,
}

/// The handle runs commit through. Cheap to clone; the committer stops
/// when the last handle is dropped.
#[derive(Clone)]
pub struct Committer {
    queue: mpsc::Sender<Request>,
}

impl Committer {
    /// Starts the committer over `store`. The handle it also returns ends
    /// once the last `Committer` is dropped and every unit is answered.
    pub fn start(store: Store) -> (Committer, JoinHandle<()>) {
        let (queue, requests) = mpsc::channel(QUEUE_MAX);
        let finished = match store.backend() {
            Backend::Postgres => match on_own_thread(store.clone(), requests) {
                Ok(finished) => finished,
                Err((e, requests)) => {
                    tracing::warn!(error = %e, "no thread for the committer; it shares the runtime");
                    tokio::spawn(commit_loop(store, requests))
                }
            },
            // One writer connection: a committer elsewhere would wait for it.
            Backend::Sqlite => tokio::spawn(commit_loop(store, requests)),
        };
        (Committer { queue }, finished)
    }

    /// Applies `unit` (with others gathered meanwhile) and waits for its
    /// own answer.
    pub async fn commit(&self, unit: Unit) -> StoreResult<Applied> {
        let (done, answer) = oneshot::channel();
        self.queue
            .send(Request { unit, done })
            .await
            .map_err(|_| StoreError::Corrupt("the committer has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Corrupt("the committer dropped a unit".into()))?
    }
}

type Requests = mpsc::Receiver<Request>;

/// Runs the loop on a thread with a single-threaded runtime and a writer
/// connection of its own; the requests come back if there is no thread or
/// no runtime. The thread exists before the runtime is built, so a runtime
/// is only ever dropped there (dropping one inside the node's runtime would
/// panic).
fn on_own_thread(
    store: Store,
    requests: Requests,
) -> Result<JoinHandle<()>, (std::io::Error, Requests)> {
    let (done, finished) = oneshot::channel::<()>();
    let (hand_over, handed) =
        std::sync::mpsc::sync_channel::<(tokio::runtime::Runtime, Requests)>(1);
    let spawned = std::thread::Builder::new()
        .name("tollgate-committer".into())
        .spawn(move || {
            let Ok((runtime, requests)) = handed.recv() else {
                return;
            };
            runtime.block_on(async move {
                // Opened here: its connection belongs to this runtime.
                if let Some(own) = store.dedicated_writer() {
                    commit_loop(own.clone(), requests).await;
                    own.close().await;
                }
            });
            let _ = done.send(());
        });
    if let Err(e) = spawned {
        return Err((e, requests));
    }
    // Without a runtime the hand-over is dropped, and the thread ends.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return Err((e, requests)),
    };
    if let Err(std::sync::mpsc::SendError((runtime, requests))) =
        hand_over.send((runtime, requests))
    {
        // The thread has gone already; the only drop allowed here.
        runtime.shutdown_background();
        return Err((
            std::io::Error::other("the committer's thread ended"),
            requests,
        ));
    }
    Ok(tokio::spawn(async move {
        let _ = finished.await;
    }))
}

async fn commit_loop(store: Store, mut requests: mpsc::Receiver<Request>) {
    let mut batch = Vec::with_capacity(BATCH_MAX);
    while requests.recv_many(&mut batch, BATCH_MAX).await > 0 {
        let (units, waiters): (Vec<Unit>, Vec<_>) =
            batch.drain(..).map(|r| (r.unit, r.done)).unzip();
        let results = store.apply(&units).await;
        for (done, result) in waiters.into_iter().zip(results) {
            // A run that stopped waiting has gone; its unit stands.
            let _ = done.send(result);
        }
    }
}
