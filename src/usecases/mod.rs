//! The use cases: what Tollgate does for people and programs, as methods
//! of one cheap-to-clone handle, `Tollgate`. Pages, the API and the command
//! line all call them; none of them touch SQL. Each file is one use case:
//! submitting and reading jobs (`jobs`, `assets`), the ledger and credits
//! (`ledger`), the day's budget and spend (`budget`, `spend`), parked work
//! and its decisions (`parked`), repairs and lineage (`repairs`), webhooks
//! (`webhooks`: endpoints, the dispatcher, signing), accounts and sign-in
//! (`accounts`, `auth`), retention, the fair-use limits (`limits`), and
//! what operators watch (`observe`, read for `/metrics`).
//! `error` is this layer's one error type, which the API maps to its
//! answer in one place.

pub mod accounts;
pub mod assets;
pub mod auth;
pub mod budget;
pub mod cursor;
pub mod error;
pub mod jobs;
pub mod ledger;
pub mod limits;
pub mod observe;
pub mod parked;
pub mod repairs;
pub mod retention;
pub mod spend;
pub mod webhooks;

pub use error::{Error, Result};

use crate::config::Config;
use crate::model::Catalogue;
use crate::storage::ObjectStore;
use crate::store::Store;
use crate::usecases::auth::LoginLimits;
use std::sync::Arc;

#[derive(Clone)]
pub struct Tollgate {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    objects: ObjectStore,
    catalogue: Catalogue,
    config: Config,
    local: crate::providers::local::LocalProvider,
    http: crate::providers::http::HttpProvider,
    login_limits: LoginLimits,
    /// Paid requests per person (fair use).
    paid_limits: crate::usecases::limits::PaidLimits,
    /// Test webhook events per endpoint and person.
    test_event_limits: crate::usecases::limits::TestEventLimits,
    /// Uploads being received, per person and in all.
    upload_slots: crate::usecases::limits::UploadSlots,
    /// Wakes idle workers when a job is queued. It carries nothing: the
    /// database is the truth, and the sweeper rings anyway (rule 4).
    doorbell: Arc<tokio::sync::Notify>,
    /// Wakes this node's webhook dispatcher when deliveries are due now
    /// (a test event, a replay); otherwise it looks every second.
    webhook_bell: Arc<tokio::sync::Notify>,
    /// Image decodes running at once at most (uploads and checks): a burst
    /// of large images cannot take every core and all the memory.
    decode_slots: Arc<tokio::sync::Semaphore>,
    /// Runs on this node whose claim was taken (a stale fencing token).
    claim_conflicts: std::sync::atomic::AtomicU64,
    /// Guards first-run set-up: the operator's, or one made up at start
    /// that `serve` prints.
    setup_token: String,
    /// What retention purged on this node.
    purged: crate::usecases::retention::PurgeCounters,
}

/// Image decodes at once, at most.
pub const DECODES_MAX: usize = 4;

/// The address guard for webhook posts and for what providers tell us to
/// download: no internal address unless the operator allowed it.
pub(crate) fn webhook_guard(config: &Config) -> crate::net::guard::Guard {
    let g = crate::net::guard::Guard::new(config.webhook_allow_networks.clone());
    if config.webhook_allow_public {
        g
    } else {
        g.allowed_networks_only()
    }
}

impl Tollgate {
    pub fn new(store: Store, objects: ObjectStore, config: Config) -> Tollgate {
        let paid_limits = crate::usecases::limits::PaidLimits::new(
            config.jobs_per_user_per_minute,
            config.jobs_burst_per_user,
        );
        let login_limits = LoginLimits::new(
            config.logins_per_account_per_minute,
            config.logins_per_address_per_minute,
        );
        let setup_token = (config.exposure.setup_token.clone())
            .unwrap_or_else(crate::usecases::auth::new_setup_token);
        Tollgate {
            inner: Arc::new(Inner {
                store,
                objects,
                catalogue: config.models.catalogue(),
                local: crate::providers::local::LocalProvider {
                    faults: config.models.faults.clone(),
                },
                http: crate::providers::http::HttpProvider::with_guard(webhook_guard(&config)),
                config,
                login_limits,
                paid_limits,
                test_event_limits: Default::default(),
                upload_slots: Default::default(),
                doorbell: Arc::new(tokio::sync::Notify::new()),
                webhook_bell: Arc::new(tokio::sync::Notify::new()),
                decode_slots: Arc::new(tokio::sync::Semaphore::new(DECODES_MAX)),
                claim_conflicts: std::sync::atomic::AtomicU64::new(0),
                setup_token,
                purged: crate::usecases::retention::PurgeCounters::default(),
            }),
        }
    }

    /// Connects to the configured database (applying migrations) and
    /// object store.
    pub async fn open(config: Config) -> crate::Result<Tollgate> {
        let store = Store::connect(&config.database_url, crate::wire::envelope)
            .await
            .map_err(|e| {
                // The driver's message may quote the URL: never its password.
                let password = reqwest::Url::parse(&config.database_url)
                    .ok()
                    .and_then(|u| u.password().map(str::to_string))
                    .filter(|p| !p.is_empty());
                let mut message = e.to_string();
                if let Some(p) = password {
                    message = message.replace(&p, "***");
                }
                crate::Error::Internal(format!(
                    "TOLLGATE_DATABASE_URL: cannot open the database {}: {message}",
                    crate::config::redact_url(&config.database_url)
                ))
            })?;
        store.migrate().await.map_err(|e| {
            crate::Error::Internal(format!("TOLLGATE_DATABASE_URL: migrations failed: {e}"))
        })?;
        let objects = ObjectStore::open_with(&config.storage, config.storage_sync)
            .await
            .map_err(|e| {
                crate::Error::Internal(format!(
                    "TOLLGATE_STORAGE: cannot open the object store: {e}"
                ))
            })?;
        Ok(Tollgate::new(store, objects, config))
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Which database this node runs on.
    pub fn backend(&self) -> crate::store::Backend {
        self.inner.store.backend()
    }

    /// Where the app keeps sign-in sessions: the same database.
    pub fn session_backend(&self) -> crate::store::SessionBackend {
        self.inner.store.session_backend()
    }

    /// Closes the database pools at shutdown, after the node has stopped.
    pub async fn close(&self) {
        self.inner.store.close().await
    }

    pub fn objects(&self) -> &ObjectStore {
        &self.inner.objects
    }

    /// What can be ordered and what it costs: the same value prices a page
    /// and a charge.
    pub fn catalogue(&self) -> &Catalogue {
        &self.inner.catalogue
    }

    /// The models that may be called and the runner's policy for each.
    pub fn models(&self) -> &crate::config::models::Models {
        &self.inner.config.models
    }

    /// The http provider, for calls outside a model's chain (a checker's).
    pub fn http_provider(&self) -> &crate::providers::http::HttpProvider {
        &self.inner.http
    }

    /// The provider that serves a model.
    pub fn provider(
        &self,
        model: &crate::config::models::ModelSpec,
    ) -> &dyn crate::providers::Provider {
        match model.provider {
            crate::config::models::ProviderKind::Local => &self.inner.local,
            crate::config::models::ProviderKind::Http => &self.inner.http,
        }
    }

    pub fn claim_conflicts(&self) -> u64 {
        self.inner
            .claim_conflicts
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What retention purged on this node since it started.
    pub fn purge_counters(&self) -> &crate::usecases::retention::PurgeCounters {
        &self.inner.purged
    }

    pub(crate) fn note_claim_conflict(&self) {
        self.inner
            .claim_conflicts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn doorbell(&self) -> Arc<tokio::sync::Notify> {
        self.inner.doorbell.clone()
    }

    /// A slot for one image decode; held while it runs.
    pub async fn decode_slot(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.inner
            .decode_slots
            .clone()
            .acquire_owned()
            .await
            .expect("the decode semaphore is never closed")
    }

    pub fn webhook_bell(&self) -> Arc<tokio::sync::Notify> {
        self.inner.webhook_bell.clone()
    }

    /// The token first-run set-up asks for (printed by `serve`).
    pub fn setup_token(&self) -> &str {
        &self.inner.setup_token
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn inner_upload_slots(&self) -> &crate::usecases::limits::UploadSlots {
        &self.inner.upload_slots
    }

    pub(crate) fn test_event_limits(&self) -> &crate::usecases::limits::TestEventLimits {
        &self.inner.test_event_limits
    }

    pub(crate) fn paid_limits(&self) -> &crate::usecases::limits::PaidLimits {
        &self.inner.paid_limits
    }

    pub(crate) fn login_limits(&self) -> &LoginLimits {
        &self.inner.login_limits
    }

    /// Database and object store reachable.
    pub async fn ready(&self) -> crate::Result<()> {
        self.store().ping().await?;
        self.objects()
            .ping()
            .await
            .map_err(|e| crate::Error::Internal(format!("object store: {e}")))?;
        Ok(())
    }
}

impl std::fmt::Debug for Tollgate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tollgate")
            .field("backend", &self.store().backend())
            .finish()
    }
}
