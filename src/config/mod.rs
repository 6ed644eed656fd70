//! Configuration from the environment (and, optionally, a TOML file). Every
//! setting has a default that runs on a fresh machine; a bad one stops
//! start-up with a `ConfigError` naming the setting.

pub mod models;
pub mod public;
mod reader;

pub use public::{AllowedHosts, Exposure};
use reader::{Settings, FILE_SECTIONS, FILE_SETTINGS};
use std::net::SocketAddr;
use std::path::PathBuf;

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/tollgate.db";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3000";
pub const DEFAULT_STORAGE: &str = "data/objects";

/// A setting that cannot be used, and why. Displayed as one line.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct ConfigError {
    pub setting: &'static str,
    pub message: String,
}

impl ConfigError {
    pub fn new(setting: &'static str, message: impl Into<String>) -> Self {
        ConfigError {
            setting,
            message: message.into(),
        }
    }
}

/// A URL as it may be printed: a password in it becomes `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

/// Delays between a webhook delivery's tries (API.md).
pub const DEFAULT_WEBHOOK_RETRY_SCHEDULE: &str = "5s,5m,30m,2h,5h,10h,10h";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub database_url: String,
    pub listen: SocketAddr,
    /// An internal listener for `/healthz`, `/readyz`, `/metrics` (without
    /// a token) and the OpenAPI document.
    pub ops_listen: Option<SocketAddr>,
    pub storage: String,
    /// `TOLLGATE_STORAGE_SYNC`: how a folder store makes its files durable.
    pub storage_sync: crate::storage::FileSync,
    pub config_file: Option<PathBuf>,
    /// The parsed `TOLLGATE_CONFIG` file, when one is given.
    pub file: toml::Table,
    /// Session cookies carry `Secure` (set when Tollgate is served over https).
    pub secure_cookies: bool,
    /// Where people reach Tollgate (`TOLLGATE_PUBLIC_URL`): a form post's
    /// Origin must be this one; without it, first-run set-up is accepted
    /// only from loopback.
    pub public_origin: Option<String>,
    /// A session unused this long expires.
    pub session_idle_minutes: i64,
    pub log_format: LogFormat,
    /// Login attempts allowed per minute for one account, and from one address.
    pub logins_per_account_per_minute: u32,
    /// Paid requests (jobs and repairs) one person may make a minute, and
    /// in one burst (issue 29: fair use).
    pub jobs_per_user_per_minute: u32,
    pub jobs_burst_per_user: u32,
    pub logins_per_address_per_minute: u32,
    /// Workers this node runs (role all or worker).
    pub workers: usize,
    /// How long a claim lasts without a heartbeat (seconds).
    pub lease_s: i64,
    /// A day's spending cap unless an admin set one for that day.
    pub daily_cap_usd: crate::model::Usd,
    /// Past this share of its cap (percent), a day shows a warning and
    /// `/metrics` says so.
    pub spend_warning_percent: u32,
    /// The most of a day's cap one person's work may cost, in percent.
    pub user_share_percent: u32,
    /// Where the built site (CSS, wasm, static files) is served from.
    pub site_root: PathBuf,
    /// The models that may be called, their prices and runner policies,
    /// and the local provider's injected faults.
    pub models: crate::config::models::Models,
    /// Internal networks webhooks may reach although they are internal
    /// (tests: 127.0.0.0/8); everything else internal is refused.
    pub webhook_allow_networks: Vec<ipnet::IpNet>,
    /// Delays between a delivery's tries; after the last, it is dead.
    pub webhook_retry_schedule: Vec<std::time::Duration>,
    /// What one person's uploads may take in all (bytes).
    pub storage_quota_bytes: u64,
    /// Whether webhooks may reach public addresses at all (false: only the
    /// allowed networks; tests and closed networks).
    pub webhook_allow_public: bool,
    /// How long finished work's media, history and deliveries are kept.
    pub retention: Retention,
    /// Connections, proxies, host names and set-up on a node strangers reach.
    pub exposure: Exposure,
}

/// How long things are kept once nothing needs them (`None`: forever).
/// Money (jobs, attempts, the ledger, decisions) is never purged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Uploads and outputs, counted from when the work that used them ended
    /// (`TOLLGATE_RETAIN_MEDIA_DAYS`, 30).
    pub media_days: Option<u32>,
    /// A finished job's timeline and a closed record's evidence
    /// (`TOLLGATE_RETAIN_HISTORY_DAYS`, 365).
    pub history_days: Option<u32>,
    /// Webhook deliveries that were delivered or died
    /// (`TOLLGATE_RETAIN_DELIVERIES_DAYS`, 30).
    pub deliveries_days: Option<u32>,
}

impl Retention {
    pub const DEFAULT: Retention = Retention {
        media_days: Some(30),
        history_days: Some(365),
        deliveries_days: Some(30),
    };

    fn from_lookup(non_empty: impl Fn(&str) -> Option<String>) -> Result<Retention, ConfigError> {
        let days = |name: &'static str, default: Option<u32>| -> Result<Option<u32>, ConfigError> {
            match non_empty(name) {
                None => Ok(default),
                Some(v) if v.trim() == "forever" => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|d| (1..=36_500).contains(d))
                    .map(Some)
                    .ok_or_else(|| {
                        ConfigError::new(
                            name,
                            format!("{v:?} is not a number of days from 1 to 36,500, or forever"),
                        )
                    }),
            }
        };
        Ok(Retention {
            media_days: days("TOLLGATE_RETAIN_MEDIA_DAYS", Self::DEFAULT.media_days)?,
            history_days: days("TOLLGATE_RETAIN_HISTORY_DAYS", Self::DEFAULT.history_days)?,
            deliveries_days: days(
                "TOLLGATE_RETAIN_DELIVERIES_DAYS",
                Self::DEFAULT.deliveries_days,
            )?,
        })
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads settings through `get`, so tests can pass their own.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let config_file = get("TOLLGATE_CONFIG")
            .filter(|v| !v.trim().is_empty())
            .map(PathBuf::from);
        let file = read_file(config_file.as_deref())?;
        let s = Settings {
            get: &get,
            file: &file,
        };
        let database_url = database_url(&s)?;
        let listen = s.address("TOLLGATE_LISTEN", DEFAULT_LISTEN)?;
        let ops_listen = s.address("TOLLGATE_OPS_LISTEN", "127.0.0.1:9090")?;
        let storage = storage(&s)?;
        let storage_sync = storage_sync(&s)?;
        let models = crate::config::models::parse(&file, &get)?;
        let public_origin = public_origin(&s)?;
        let secure_cookies = s.flag(
            "TOLLGATE_SECURE_COOKIES",
            public_origin
                .as_deref()
                .is_some_and(|u| u.starts_with("https://")),
        )?;
        let log_format = log_format(&s)?;
        let limits = Limits::read(&s)?;
        let webhooks = WebhookSettings::read(&s)?;
        let lookup = |k: &str| s.value(k);
        Ok(Config {
            database_url,
            listen: listen.unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("a valid default")),
            ops_listen,
            storage,
            storage_sync,
            config_file,
            secure_cookies,
            public_origin,
            session_idle_minutes: s.number_said(
                "TOLLGATE_SESSION_IDLE_MINUTES",
                7 * 24 * 60,
                1..=525_600,
                "1 to 525600",
            )?,
            log_format,
            logins_per_account_per_minute: limits.logins_per_account_per_minute,
            jobs_per_user_per_minute: limits.jobs_per_user_per_minute,
            jobs_burst_per_user: limits.jobs_burst_per_user,
            logins_per_address_per_minute: limits.logins_per_address_per_minute,
            workers: limits.workers,
            lease_s: limits.lease_s,
            daily_cap_usd: limits.daily_cap_usd,
            spend_warning_percent: limits.spend_warning_percent,
            user_share_percent: limits.user_share_percent,
            site_root: PathBuf::from(
                s.value("TOLLGATE_SITE_ROOT")
                    .unwrap_or_else(|| "target/site".into()),
            ),
            models,
            webhook_allow_networks: webhooks.allow_networks,
            webhook_retry_schedule: webhooks.retry_schedule,
            webhook_allow_public: webhooks.allow_public,
            storage_quota_bytes: limits.storage_quota_bytes,
            retention: Retention::from_lookup(lookup)?,
            exposure: Exposure::from_lookup(lookup)?,
            file,
        })
    }
}

/// The TOML file named by `TOLLGATE_CONFIG` (an empty table without one),
/// refusing a setting it does not know.
fn read_file(path: Option<&std::path::Path>) -> Result<toml::Table, ConfigError> {
    let Some(path) = path else {
        return Ok(toml::Table::new());
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            "TOLLGATE_CONFIG",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let file = text.parse::<toml::Table>().map_err(|e| {
        ConfigError::new(
            "TOLLGATE_CONFIG",
            format!("{} is not valid TOML: {}", path.display(), e.message()),
        )
    })?;
    let known: Vec<&str> = FILE_SECTIONS
        .iter()
        .copied()
        .chain(FILE_SETTINGS.iter().map(|(key, _)| *key))
        .collect();
    if let Some(k) = file.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ConfigError::new(
            "TOLLGATE_CONFIG",
            format!("unknown setting {k:?}; known: {}", known.join(", ")),
        ));
    }
    Ok(file)
}

fn database_url(s: &Settings) -> Result<String, ConfigError> {
    let url = s
        .value("TOLLGATE_DATABASE_URL")
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
    let scheme_ok = url.starts_with("sqlite:")
        || url.starts_with("postgres://")
        || url.starts_with("postgresql://");
    if !scheme_ok {
        return Err(ConfigError::new(
            "TOLLGATE_DATABASE_URL",
            format!(
                "unsupported scheme in {:?}; use sqlite://PATH or postgres://USER@HOST/DB",
                redact_url(&url)
            ),
        ));
    }
    Ok(url)
}

fn storage(s: &Settings) -> Result<String, ConfigError> {
    let storage = s
        .value("TOLLGATE_STORAGE")
        .unwrap_or_else(|| DEFAULT_STORAGE.into());
    if storage.contains("://") && !storage.starts_with("s3://") {
        return Err(ConfigError::new(
            "TOLLGATE_STORAGE",
            format!("{storage:?} is neither a folder nor s3://BUCKET?endpoint=URL&region=R"),
        ));
    }
    Ok(storage)
}

fn storage_sync(s: &Settings) -> Result<crate::storage::FileSync, ConfigError> {
    use crate::storage::FileSync;
    let options = [("group", FileSync::Group), ("file", FileSync::File)];
    s.choice(
        "TOLLGATE_STORAGE_SYNC",
        FileSync::Group,
        &options,
        "group or file",
    )
}

fn log_format(s: &Settings) -> Result<LogFormat, ConfigError> {
    let options = [("text", LogFormat::Text), ("json", LogFormat::Json)];
    s.choice(
        "TOLLGATE_LOG_FORMAT",
        LogFormat::Text,
        &options,
        "text or json",
    )
}

/// `TOLLGATE_PUBLIC_URL` as an origin (`https://host[:port]`), if set.
fn public_origin(s: &Settings) -> Result<Option<String>, ConfigError> {
    let Some(raw) = s.value("TOLLGATE_PUBLIC_URL") else {
        return Ok(None);
    };
    reqwest::Url::parse(raw.trim())
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.host_str().is_some())
        .map(|url| Some(url.origin().ascii_serialization()))
        .ok_or_else(|| {
            ConfigError::new(
                "TOLLGATE_PUBLIC_URL",
                format!("{raw:?} is not a URL like https://tollgate.example.com"),
            )
        })
}

/// How much of anything one node, person or day may take.
struct Limits {
    logins_per_account_per_minute: u32,
    logins_per_address_per_minute: u32,
    jobs_per_user_per_minute: u32,
    jobs_burst_per_user: u32,
    workers: usize,
    lease_s: i64,
    daily_cap_usd: crate::model::Usd,
    spend_warning_percent: u32,
    user_share_percent: u32,
    storage_quota_bytes: u64,
}

impl Limits {
    fn read(s: &Settings) -> Result<Limits, ConfigError> {
        let per_minute = |var: &'static str, default: u32| s.number(var, default, 1..=100_000);
        let daily_cap_usd = match s.value("TOLLGATE_DAILY_CAP_USD") {
            None => crate::model::Usd::parse("50.00").unwrap_or_default(),
            Some(v) => crate::model::Usd::parse(&v).map_err(|_| {
                ConfigError::new(
                    "TOLLGATE_DAILY_CAP_USD",
                    format!("{v:?} is not an amount like 50.00"),
                )
            })?,
        };
        Ok(Limits {
            logins_per_account_per_minute: per_minute("TOLLGATE_LOGINS_PER_ACCOUNT_PER_MINUTE", 5)?,
            logins_per_address_per_minute: per_minute(
                "TOLLGATE_LOGINS_PER_ADDRESS_PER_MINUTE",
                20,
            )?,
            jobs_per_user_per_minute: per_minute("TOLLGATE_JOBS_PER_USER_PER_MINUTE", 60)?,
            jobs_burst_per_user: per_minute("TOLLGATE_JOBS_BURST_PER_USER", 30)?,
            // Runs in flight at once on this node: each waits on its
            // provider without a thread, so thousands are cheap. Enough by
            // default that a node's group commits and claims gather many
            // runs each (a drain at zero provider latency peaks near 256 on
            // two cores).
            workers: s.number("TOLLGATE_WORKERS", 256, 1..=100_000)?,
            lease_s: s.number("TOLLGATE_LEASE_SECONDS", 30, 2..=3600)?,
            daily_cap_usd,
            spend_warning_percent: s.number("TOLLGATE_SPEND_WARNING_PERCENT", 80, 1..=100)?,
            // Issue 29, 2: no one person may spend more than this share of
            // a day's cap, so one loop of orders cannot pause everyone's work.
            user_share_percent: s.number("TOLLGATE_USER_SHARE_PERCENT", 50, 1..=100)?,
            storage_quota_bytes: s.number_said(
                "TOLLGATE_STORAGE_QUOTA_MB",
                2_000,
                1..=10_000_000u64,
                "a number of megabytes from 1 to 10,000,000",
            )? * 1_000_000,
        })
    }
}

/// Where webhooks may go and when they are tried again.
struct WebhookSettings {
    allow_networks: Vec<ipnet::IpNet>,
    retry_schedule: Vec<std::time::Duration>,
    allow_public: bool,
}

impl WebhookSettings {
    fn read(s: &Settings) -> Result<WebhookSettings, ConfigError> {
        let allow_networks = s.list(
            "TOLLGATE_WEBHOOK_ALLOW_NETWORKS",
            "",
            |c| c.parse::<ipnet::IpNet>().ok(),
            "a network like 127.0.0.0/8",
        )?;
        let week = std::time::Duration::from_secs(7 * 86_400);
        let retry_schedule = s.list(
            "TOLLGATE_WEBHOOK_RETRY_SCHEDULE",
            DEFAULT_WEBHOOK_RETRY_SCHEDULE,
            |d| humantime::parse_duration(d).ok().filter(|d| *d <= week),
            "a delay like 5s, 5m or 2h (at most 7 days)",
        )?;
        if retry_schedule.len() > 50 {
            return Err(ConfigError::new(
                "TOLLGATE_WEBHOOK_RETRY_SCHEDULE",
                "at most 50 retries",
            ));
        }
        Ok(WebhookSettings {
            allow_networks,
            retry_schedule,
            allow_public: s.flag("TOLLGATE_WEBHOOK_ALLOW_PUBLIC", true)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_never_printed() {
        assert_eq!(
            redact_url("postgres://tg:s3cret@db.internal:5432/tollgate"),
            "postgres://tg:***@db.internal:5432/tollgate"
        );
        assert_eq!(redact_url("postgres://tg@db/t"), "postgres://tg@db/t");
        assert_eq!(redact_url("sqlite://data/t.db"), "sqlite://data/t.db");
        let e = from(&[("TOLLGATE_DATABASE_URL", "mysql://root:hunter2@db/x")]).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_run_on_a_fresh_machine() {
        let c = from(&[]).unwrap();
        assert_eq!(c.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert!(!c.secure_cookies);
        assert_eq!(c.storage_sync, crate::storage::FileSync::Group);
        let c = from(&[("TOLLGATE_STORAGE_SYNC", "file")]).unwrap();
        assert_eq!(c.storage_sync, crate::storage::FileSync::File);
    }

    #[test]
    fn bad_settings_name_themselves() {
        assert_eq!(
            from(&[("TOLLGATE_DATABASE_URL", "mysql://x")])
                .unwrap_err()
                .setting,
            "TOLLGATE_DATABASE_URL"
        );
        assert_eq!(
            from(&[("TOLLGATE_LISTEN", "nowhere")]).unwrap_err().setting,
            "TOLLGATE_LISTEN"
        );
        assert_eq!(
            from(&[("TOLLGATE_CONFIG", "/nonexistent/x.toml")])
                .unwrap_err()
                .setting,
            "TOLLGATE_CONFIG"
        );
        assert_eq!(
            from(&[("TOLLGATE_LOG_FORMAT", "xml")]).unwrap_err().setting,
            "TOLLGATE_LOG_FORMAT"
        );
        assert_eq!(
            from(&[("TOLLGATE_STORAGE_SYNC", "sometimes")])
                .unwrap_err()
                .setting,
            "TOLLGATE_STORAGE_SYNC"
        );
        let e = from(&[("TOLLGATE_DATABASE_URL", "mysql://x")])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("TOLLGATE_DATABASE_URL: "), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn the_file_sets_what_the_environment_does_not() {
        let path =
            std::env::temp_dir().join(format!("tollgate-config-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "workers = 64\ndaily_cap_usd = \"12.50\"\n[local.faults]\nlatency_ms = 5\n",
        )
        .unwrap();
        let file = path.display().to_string();
        let c = from(&[("TOLLGATE_CONFIG", &file)]).unwrap();
        assert_eq!(c.workers, 64);
        assert_eq!(c.daily_cap_usd, crate::model::Usd::parse("12.50").unwrap());
        assert_eq!(c.models.faults.latency_ms, 5);
        // The environment wins.
        let c = from(&[("TOLLGATE_CONFIG", &file), ("TOLLGATE_WORKERS", "3")]).unwrap();
        assert_eq!(c.workers, 3);
        std::fs::write(&path, "wokers = 64\n").unwrap();
        let e = from(&[("TOLLGATE_CONFIG", &file)]).unwrap_err();
        assert!(e.message.contains("wokers"), "{e}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn https_public_url_means_secure_cookies() {
        assert!(
            from(&[("TOLLGATE_PUBLIC_URL", "https://t.example")])
                .unwrap()
                .secure_cookies
        );
    }
}
