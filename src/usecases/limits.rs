//! Fair use (issue 29): how fast one person may ask for paid work. Every
//! new job and repair takes a token from its owner's bucket (refilled at
//! `TOLLGATE_JOBS_PER_USER_PER_MINUTE`, holding at most
//! `TOLLGATE_JOBS_BURST_PER_USER`); an empty bucket is 429 `RATE_LIMITED`
//! with `Retry-After`, before anything is charged. A replay of a job
//! already made costs nothing and is never limited (rule 1 first). The
//! buckets live in memory per node: with several web nodes each allows the
//! rate, which bounds a burst, not a day (the day's cap does that).
//!
//! Requests racing under one key are one request: while the first is being
//! admitted and written, the others take no token of their own (the store
//! answers them with the first's job, or a conflict), so a client that
//! retries a timed-out submission is never refused for it.

use crate::model::{UserId, WebhookEndpointId};
use crate::usecases::error::{Error, Result};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::Mutex;

pub struct PaidLimits {
    per_user: DefaultKeyedRateLimiter<UserId>,
    clock: DefaultClock,
    /// (person, idempotency key) of the paid requests being written now.
    in_flight: Mutex<HashSet<(UserId, String)>>,
}

/// A paid request admitted: while it lives, the same person's requests
/// under the same key are admitted without a token of their own.
pub struct Admission<'a> {
    limits: &'a PaidLimits,
    key: Option<(UserId, String)>,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.limits.in_flight().remove(&k);
        }
    }
}

impl PaidLimits {
    /// `per_minute` paid requests a minute for one person, in bursts of at
    /// most `burst`.
    pub fn new(per_minute: u32, burst: u32) -> Self {
        let n = |v: u32| NonZeroU32::new(v).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_minute(n(per_minute)).allow_burst(n(burst));
        PaidLimits {
            per_user: RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
            in_flight: Mutex::new(HashSet::new()),
        }
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<(UserId, String)>> {
        // Every change is one insert or remove: a poisoned set is whole.
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits one paid request of `user` under `key`: a token from the
    /// bucket, or none when the same key is already in flight.
    pub fn admit(&self, user: UserId, key: &str) -> Result<Admission<'_>> {
        let entry = (user, key.to_string());
        // One lock around the look, the token and the mark: two racers
        // under one key cannot both take a token.
        let mut in_flight = self.in_flight();
        if in_flight.contains(&entry) {
            return Ok(Admission {
                limits: self,
                key: None,
            });
        }
        self.check(user)?;
        in_flight.insert(entry.clone());
        Ok(Admission {
            limits: self,
            key: Some(entry),
        })
    }

    /// Takes one token from `user`'s bucket, or says when the next one
    /// comes (whole seconds, at least one).
    fn check(&self, user: UserId) -> Result<()> {
        self.per_user.check_key(&user).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            Error::RateLimited {
                retry_after_s: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            }
        })
    }

    /// Forgets people whose buckets are full again: memory stays bounded by
    /// who asked in the last minutes.
    pub fn forget_idle(&self) {
        self.per_user.retain_recent();
        self.per_user.shrink_to_fit();
    }
}

/// Test events (issue 29, 3): each is a POST to an address the person
/// chose, held up to 15 s by a receiver that does not answer, so they are
/// few: `TEST_EVENTS_PER_ENDPOINT_PER_MINUTE` for one endpoint and
/// `TEST_EVENTS_PER_USER_PER_MINUTE` for one person, 429 beyond.
pub struct TestEventLimits {
    per_endpoint: DefaultKeyedRateLimiter<WebhookEndpointId>,
    per_user: DefaultKeyedRateLimiter<UserId>,
    clock: DefaultClock,
}

pub const TEST_EVENTS_PER_ENDPOINT_PER_MINUTE: u32 = 5;
pub const TEST_EVENTS_PER_USER_PER_MINUTE: u32 = 20;

impl Default for TestEventLimits {
    fn default() -> Self {
        let quota = |n: u32| Quota::per_minute(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN));
        TestEventLimits {
            per_endpoint: RateLimiter::keyed(quota(TEST_EVENTS_PER_ENDPOINT_PER_MINUTE)),
            per_user: RateLimiter::keyed(quota(TEST_EVENTS_PER_USER_PER_MINUTE)),
            clock: DefaultClock::default(),
        }
    }
}

impl TestEventLimits {
    /// Takes one test event from the endpoint's allowance and its owner's.
    pub fn check(&self, user: UserId, endpoint: WebhookEndpointId) -> Result<()> {
        let limited = |not_until: governor::NotUntil<_>| {
            let wait = not_until.wait_time_from(self.clock.now());
            Error::RateLimited {
                retry_after_s: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            }
        };
        self.per_endpoint.check_key(&endpoint).map_err(limited)?;
        self.per_user.check_key(&user).map_err(limited)
    }

    pub fn forget_idle(&self) {
        self.per_endpoint.retain_recent();
        self.per_user.retain_recent();
    }
}

/// Uploads being received (issue 29, 9): a body is read whole into memory
/// (at most `ASSET_BYTES_MAX`) before it is decoded, so a person may send
/// `UPLOADS_PER_USER` at once (429 beyond, before a byte of the body is
/// read), and the node reads at most `UPLOADS_AT_ONCE` bodies at once (the
/// rest wait): memory for uploads stays bounded whoever sends them.
pub struct UploadSlots {
    per_user: Mutex<std::collections::HashMap<UserId, usize>>,
    bodies: std::sync::Arc<tokio::sync::Semaphore>,
}

pub const UPLOADS_PER_USER: usize = 3;
pub const UPLOADS_AT_ONCE: usize = 16;

/// One upload's place, given back on drop.
pub struct UploadSlot<'a> {
    slots: &'a UploadSlots,
    user: UserId,
    _body: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for UploadSlot<'_> {
    fn drop(&mut self) {
        self.slots.release(self.user);
    }
}

impl Default for UploadSlots {
    fn default() -> Self {
        UploadSlots {
            per_user: Mutex::new(std::collections::HashMap::new()),
            bodies: std::sync::Arc::new(tokio::sync::Semaphore::new(UPLOADS_AT_ONCE)),
        }
    }
}

impl UploadSlots {
    fn per_user(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<UserId, usize>> {
        // Every change is one increment or decrement: a poisoned map is whole.
        self.per_user.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives back one of `user`'s places (an upload ended or was dropped).
    fn release(&self, user: UserId) {
        let mut open = self.per_user();
        if let Some(n) = open.get_mut(&user) {
            *n -= 1;
            if *n == 0 {
                open.remove(&user);
            }
        }
    }

    /// A place for one more upload of `user`'s, or 429 when they already
    /// send `UPLOADS_PER_USER`; waits for the node's body slots.
    pub async fn begin(&self, user: UserId) -> Result<UploadSlot<'_>> {
        {
            let mut open = self.per_user();
            let n = open.entry(user).or_insert(0);
            if *n >= UPLOADS_PER_USER {
                return Err(Error::RateLimited { retry_after_s: 1 });
            }
            *n += 1;
        }
        // Counted before the wait, so the guard gives it back if the wait
        // is dropped (the client went away).
        let mut pending = PendingUpload {
            slots: self,
            user: Some(user),
        };
        let body = self
            .bodies
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| Error::Internal(e.to_string()))?;
        pending.user = None;
        Ok(UploadSlot {
            slots: self,
            user,
            _body: body,
        })
    }
}

/// An upload counted for its person but still waiting for a body slot.
struct PendingUpload<'a> {
    slots: &'a UploadSlots,
    user: Option<UserId>,
}

impl Drop for PendingUpload<'_> {
    fn drop(&mut self) {
        if let Some(user) = self.user {
            self.slots.release(user);
        }
    }
}
