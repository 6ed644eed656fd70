//! Group commit: a node's runs hand their units of work to one committer,
//! which applies whatever has gathered (up to a bound) in one transaction,
//! each unit with its own fencing check, then answers every waiter. A run
//! acts on a unit only after its own answer, above all before a paid call.
//! Under load the batches grow by themselves: while one transaction is in
//! flight the next batch gathers, as in River's batch completer and
//! Restate's log writer (one batch, one commit, then every waiter).

use crate::store::{Applied, Store, StoreError, StoreResult, Unit};
use tokio::sync::{mpsc, oneshot};

/// Units applied in one transaction at most.
const BATCH_MAX: usize = 128;
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
    /// Starts the committer task over `store`.
    pub fn start(store: Store) -> Committer {
        let (queue, requests) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(commit_loop(store, requests));
        Committer { queue }
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
