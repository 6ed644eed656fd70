//! One run of a claimed job: its progress, the writes it has decided on but
//! not yet made durable, and the one way it commits them (a unit of work
//! through the node's committer, fenced by the claim's token).
//!
//! Local deterministic results (a readiness check, a review, a successful
//! attempt's outcome once its output is stored) are deferred and go out with
//! the run's next durable write (rule 6); a paid call is never made before
//! the unit that writes its attempt is acknowledged (rule 7).

use super::committer::Committer;
use crate::model::{AssetId, Progress};
use crate::store::{Applied, Claim, Job, Op, StoreError, StoreResult, Unit};
use crate::Tollgate;
use std::time::Duration;
use tokio::sync::watch;

pub struct Run<'a> {
    pub t: &'a Tollgate,
    pub claim: &'a Claim,
    committer: &'a Committer,
    stopped: watch::Receiver<bool>,
    /// The job's progress as this run knows it.
    pub progress: Progress,
    /// Whether `progress` changed since it was last written.
    progress_changed: bool,
    /// Ops decided on, written with the next commit.
    deferred: Vec<Op>,
    /// The highest attempt number this run has used (checker calls
    /// included), so the next attempt of any purpose is numbered after it.
    pub attempt_floor: i32,
    /// Where the assets this run read are stored: an asset's object never
    /// moves, so one look-up per run rather than one per step. The bytes
    /// themselves are not kept (a run waiting on a provider holds none).
    asset_keys: std::sync::Mutex<Vec<(AssetId, Option<String>)>>,
    /// Images the readiness check read, kept for the paid call's first
    /// send right after (which takes them): read once from the store, not
    /// twice, and not held while the run waits on a provider.
    kept_for_send: std::sync::Mutex<Vec<(AssetId, Vec<u8>)>>,
    /// The output this run just stored (its key and bytes), so the review
    /// right after reads it from memory, not back from the store. Only an
    /// output this run created: one found already stored is read back.
    stored_output: Option<(String, bytes::Bytes)>,
}

impl<'a> Run<'a> {
    pub fn new(
        t: &'a Tollgate,
        claim: &'a Claim,
        committer: &'a Committer,
        stopped: watch::Receiver<bool>,
        known_assets: Vec<(AssetId, Option<String>)>,
    ) -> Run<'a> {
        Run {
            t,
            claim,
            committer,
            stopped,
            progress: claim.job.progress.clone(),
            progress_changed: false,
            deferred: Vec::new(),
            attempt_floor: 0,
            asset_keys: std::sync::Mutex::new(known_assets),
            kept_for_send: Default::default(),
            stored_output: None,
        }
    }

    pub fn job(&self) -> &Job {
        &self.claim.job
    }

    /// An asset's bytes; `None` when the asset or its object is gone.
    pub async fn asset_bytes(&self, id: Option<AssetId>) -> StoreResult<Option<Vec<u8>>> {
        let Some(id) = id else { return Ok(None) };
        {
            let mut kept = self.kept_for_send.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = kept.iter().position(|(a, _)| *a == id) {
                return Ok(Some(kept.swap_remove(i).1));
            }
        }
        let keys = || self.asset_keys.lock().unwrap_or_else(|e| e.into_inner());
        let known = keys()
            .iter()
            .find(|(a, _)| *a == id)
            .map(|(_, k)| k.clone());
        let key = match known {
            Some(k) => k,
            None => {
                let k = self.t.store().asset(id).await?.map(|a| a.object_key);
                keys().push((id, k.clone()));
                k
            }
        };
        match key {
            Some(k) => self.t.object_bytes(&k).await,
            None => Ok(None),
        }
    }

    /// Keeps an image the readiness check read for the next `asset_bytes`
    /// of it (the paid call's input, built right after).
    pub fn keep_for_send(&self, id: AssetId, bytes: &[u8]) {
        self.kept_for_send
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, bytes.to_vec()));
    }

    /// Keeps the bytes this run just stored at `key` for the steps after.
    pub fn keep_stored_output(&mut self, key: &str, bytes: bytes::Bytes) {
        self.stored_output = Some((key.to_string(), bytes));
    }

    /// The object at `key`: from memory when this run stored it, else from
    /// the store; `None` when it is gone.
    pub async fn output_bytes(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        match &self.stored_output {
            Some((k, b)) if k == key => Ok(Some(b.to_vec())),
            _ => self.t.object_bytes(key).await,
        }
    }

    /// Records a step's output in the progress (written with the next commit).
    pub fn record(&mut self, change: impl FnOnce(&mut Progress)) {
        change(&mut self.progress);
        self.progress_changed = true;
    }

    /// An op to write with the next commit.
    pub fn defer(&mut self, op: Op) {
        self.deferred.push(op);
    }

    /// Writes the deferred ops, the progress when it changed, and `ops`, as
    /// one unit, and waits for its answer. A unit the claim no longer covers
    /// is `StaleClaim`: the run must stop.
    pub async fn commit(&mut self, ops: Vec<Op>) -> StoreResult<Applied> {
        let mut all = std::mem::take(&mut self.deferred);
        if self.progress_changed {
            // Just before a terminal write or a park, which then carries it.
            let at = ops
                .iter()
                .position(|o| matches!(o, Op::Finish(_) | Op::Park(_)))
                .map(|i| all.len() + i);
            all.extend(ops);
            let progress = Op::Progress(self.progress.clone());
            match at {
                Some(i) => all.insert(i, progress),
                None => all.insert(0, progress),
            }
        } else {
            all.extend(ops);
        }
        let unit = Unit {
            job: self.claim.job.id,
            token: self.claim.token,
            ops: all,
        };
        match self.committer.commit(unit).await? {
            Applied::Stale => Err(StoreError::StaleClaim),
            applied => {
                self.progress_changed = false;
                Ok(applied)
            }
        }
    }

    /// Whether the node is shutting down: give the job back at the next step.
    pub fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }

    /// Sleeps, unless the node stops first (then true).
    pub async fn pause(&mut self, d: Duration) -> bool {
        if self.stopping() {
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => self.stopping(),
            _ = self.stopped.changed() => true,
        }
    }
}
