//! Retention (issue 27, 8): what Tollgate keeps once nothing needs it, and
//! for how long (`config::Retention`). A task on the `worker` role purges,
//! a bounded batch of each kind per pass:
//!
//! - outputs of jobs that ended before the media age, whose record (if any)
//!   is closed and whose whole lineage ended before it too (a version a
//!   person can still repair keeps every version's output);
//! - uploads older than the media age that no job which is not yet aged
//!   out names (as its photo or its mask); the object itself only when no
//!   kept upload shares it (the same bytes are stored once);
//! - the timelines of jobs that ended before the history age, and the
//!   evidence of records closed before it;
//! - webhook deliveries delivered or dead before the deliveries age.
//!
//! An output's object is deleted before its job is marked, so a purge that
//! dies half-way deletes it again next time (a delete of nothing is fine)
//! and marks it then. An upload is marked first (whether another kept
//! upload shares its object is decided with the mark), so a purge that dies
//! between leaves an object nothing names, never a name without its
//! object. Money is never purged: jobs, attempts, the ledger and
//! decisions stay. `now` is a parameter so tests can age things.

use crate::model::{AssetId, JobRequest, UserId};
use crate::storage::ObjectKey;
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::{DateTime, Duration, Utc};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Rows or objects of one kind a pass purges at most.
pub const PURGE_BATCH_MAX: i64 = 200;

/// What one pass purged, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    pub outputs: u64,
    pub uploads: u64,
    pub events: u64,
    pub evidence: u64,
    pub deliveries: u64,
}

impl Purged {
    pub fn total(&self) -> u64 {
        self.outputs + self.uploads + self.events + self.evidence + self.deliveries
    }
}

/// What this process purged since it started, for `/metrics`.
#[derive(Debug, Default)]
pub struct PurgeCounters {
    outputs: AtomicU64,
    uploads: AtomicU64,
    events: AtomicU64,
    evidence: AtomicU64,
    deliveries: AtomicU64,
}

impl PurgeCounters {
    fn add(&self, p: &Purged) {
        self.outputs.fetch_add(p.outputs, Ordering::Relaxed);
        self.uploads.fetch_add(p.uploads, Ordering::Relaxed);
        self.events.fetch_add(p.events, Ordering::Relaxed);
        self.evidence.fetch_add(p.evidence, Ordering::Relaxed);
        self.deliveries.fetch_add(p.deliveries, Ordering::Relaxed);
    }

    /// `(kind, count)` for each kind.
    pub fn snapshot(&self) -> [(&'static str, u64); 5] {
        [
            ("outputs", self.outputs.load(Ordering::Relaxed)),
            ("uploads", self.uploads.load(Ordering::Relaxed)),
            ("events", self.events.load(Ordering::Relaxed)),
            ("evidence", self.evidence.load(Ordering::Relaxed)),
            ("deliveries", self.deliveries.load(Ordering::Relaxed)),
        ]
    }
}

fn cutoff(now: DateTime<Utc>, days: Option<u32>) -> Option<DateTime<Utc>> {
    days.map(|d| now - Duration::days(i64::from(d)))
}

impl Tollgate {
    /// One bounded pass of the retention policy as of `now`.
    pub async fn purge_expired(&self, now: DateTime<Utc>) -> Result<Purged> {
        let r = self.config().retention;
        let mut purged = Purged::default();
        if let Some(media) = cutoff(now, r.media_days) {
            purged.outputs = self.purge_outputs(media, now).await?;
            purged.uploads = self.purge_uploads(media, now).await?;
        }
        if let Some(history) = cutoff(now, r.history_days) {
            purged.events = self.store().purge_events(history, PURGE_BATCH_MAX).await?;
            purged.evidence = self
                .store()
                .purge_evidence(history, now, PURGE_BATCH_MAX)
                .await?;
        }
        if let Some(deliveries) = cutoff(now, r.deliveries_days) {
            purged.deliveries = self
                .store()
                .purge_deliveries(deliveries, PURGE_BATCH_MAX)
                .await?;
        }
        self.purge_counters().add(&purged);
        Ok(purged)
    }

    async fn purge_outputs(&self, cutoff: DateTime<Utc>, now: DateTime<Utc>) -> Result<u64> {
        let mut n = 0;
        for (job, key) in self
            .store()
            .expired_outputs(cutoff, PURGE_BATCH_MAX)
            .await?
        {
            self.delete_object(&key).await?;
            if self.store().mark_output_purged(job, now).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    async fn purge_uploads(&self, cutoff: DateTime<Utc>, now: DateTime<Utc>) -> Result<u64> {
        let candidates = self.store().expired_assets(cutoff, PURGE_BATCH_MAX).await?;
        // What each owner's jobs that are not aged out still name, read
        // once per owner from their oldest candidate on.
        let mut since: HashMap<UserId, DateTime<Utc>> = HashMap::new();
        for a in &candidates {
            let at = since.entry(a.user_id).or_insert(a.created_at);
            *at = (*at).min(a.created_at);
        }
        let mut named: HashMap<UserId, Vec<AssetId>> = HashMap::new();
        for (user, from) in since {
            let requests = self.store().kept_requests(user, from, cutoff).await?;
            named.insert(user, requests.iter().flat_map(assets_named).collect());
        }
        let mut n = 0;
        for a in candidates {
            if named.get(&a.user_id).is_some_and(|ids| ids.contains(&a.id)) {
                continue;
            }
            if let Some(key) = self.store().mark_asset_purged(a.id, now).await? {
                self.delete_object(&key).await?;
            }
            n += 1;
        }
        Ok(n)
    }

    async fn delete_object(&self, key: &str) -> Result<()> {
        let key = ObjectKey::parse(key).map_err(|e| Error::Internal(e.to_string()))?;
        self.objects()
            .delete(&key)
            .await
            .map_err(|e| Error::Internal(format!("purging {}: {e}", key.as_str())))
    }
}

/// The uploads a request names: its photo and its mask.
fn assets_named(request: &JobRequest) -> Vec<AssetId> {
    match request {
        JobRequest::ImageEdit(e) => [Some(e.source), e.target.mask]
            .into_iter()
            .flatten()
            .collect(),
        JobRequest::Video(v) => v.source.into_iter().collect(),
    }
}
