//! Configuration from the environment (and, optionally, a TOML file). Every
//! setting has a default that runs on a fresh machine; a bad one stops
//! start-up with a `ConfigError` naming the setting.

pub mod public;

pub use public::{AllowedHosts, Exposure};
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
    pub models: crate::providers::config::Models,
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
        let non_empty = |k: &str| get(k).filter(|v| !v.trim().is_empty());

        let database_url =
            non_empty("TOLLGATE_DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
        let scheme_ok = database_url.starts_with("sqlite:")
            || database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://");
        if !scheme_ok {
            return Err(ConfigError::new(
                "TOLLGATE_DATABASE_URL",
                format!(
                    "unsupported scheme in {:?}; use sqlite://PATH or postgres://USER@HOST/DB",
                    redact_url(&database_url)
                ),
            ));
        }

        let listen_raw = non_empty("TOLLGATE_LISTEN").unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen: SocketAddr = listen_raw.parse().map_err(|_| {
            ConfigError::new(
                "TOLLGATE_LISTEN",
                format!("{listen_raw:?} is not an address like 127.0.0.1:3000"),
            )
        })?;

        let ops_listen = match non_empty("TOLLGATE_OPS_LISTEN") {
            None => None,
            Some(raw) => Some(raw.trim().parse::<SocketAddr>().map_err(|_| {
                ConfigError::new(
                    "TOLLGATE_OPS_LISTEN",
                    format!("{raw:?} is not an address like 127.0.0.1:9090"),
                )
            })?),
        };

        let storage = non_empty("TOLLGATE_STORAGE").unwrap_or_else(|| DEFAULT_STORAGE.into());
        if storage.contains("://") && !storage.starts_with("s3://") {
            return Err(ConfigError::new(
                "TOLLGATE_STORAGE",
                format!("{storage:?} is neither a folder nor s3://BUCKET?endpoint=URL&region=R"),
            ));
        }

        let storage_sync = match non_empty("TOLLGATE_STORAGE_SYNC").as_deref() {
            None | Some("group") => crate::storage::FileSync::Group,
            Some("file") => crate::storage::FileSync::File,
            Some(other) => {
                return Err(ConfigError::new(
                    "TOLLGATE_STORAGE_SYNC",
                    format!("{other:?} is not group or file"),
                ))
            }
        };

        let config_file = non_empty("TOLLGATE_CONFIG").map(PathBuf::from);
        let file = match &config_file {
            None => toml::Table::new(),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::new(
                        "TOLLGATE_CONFIG",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                text.parse::<toml::Table>().map_err(|e| {
                    ConfigError::new(
                        "TOLLGATE_CONFIG",
                        format!("{} is not valid TOML: {}", path.display(), e.message()),
                    )
                })?
            }
        };

        if let Some(k) = file.keys().find(|k| {
            !matches!(
                k.as_str(),
                "models"
                    | "checker"
                    | "local"
                    | "workers"
                    | "lease_seconds"
                    | "daily_cap_usd"
                    | "spend_warning_percent"
                    | "user_share_percent"
                    | "webhook_allow_networks"
                    | "webhook_retry_schedule"
                    | "storage_quota_mb"
                    | "jobs_per_user_per_minute"
                    | "jobs_burst_per_user"
            )
        }) {
            return Err(ConfigError::new(
                "TOLLGATE_CONFIG",
                format!("unknown setting {k:?}; known: models, checker, local, workers, lease_seconds, daily_cap_usd, spend_warning_percent, user_share_percent, webhook_allow_networks, webhook_retry_schedule, storage_quota_mb, jobs_per_user_per_minute, jobs_burst_per_user"),
            ));
        }
        let models = crate::providers::config::parse(&file, &get)?;
        // A file's value stands where the environment sets none.
        let from_file = |key: &str| -> Option<String> {
            file.get(key).map(|v| match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        let non_empty = |k: &str| {
            non_empty(k).or_else(|| match k {
                "TOLLGATE_WORKERS" => from_file("workers"),
                "TOLLGATE_LEASE_SECONDS" => from_file("lease_seconds"),
                "TOLLGATE_DAILY_CAP_USD" => from_file("daily_cap_usd"),
                "TOLLGATE_SPEND_WARNING_PERCENT" => from_file("spend_warning_percent"),
                "TOLLGATE_USER_SHARE_PERCENT" => from_file("user_share_percent"),
                "TOLLGATE_WEBHOOK_ALLOW_NETWORKS" => from_file("webhook_allow_networks"),
                "TOLLGATE_WEBHOOK_RETRY_SCHEDULE" => from_file("webhook_retry_schedule"),
                "TOLLGATE_STORAGE_QUOTA_MB" => from_file("storage_quota_mb"),
                "TOLLGATE_JOBS_PER_USER_PER_MINUTE" => from_file("jobs_per_user_per_minute"),
                "TOLLGATE_JOBS_BURST_PER_USER" => from_file("jobs_burst_per_user"),
                _ => None,
            })
        };

        let secure_cookies = match non_empty("TOLLGATE_SECURE_COOKIES").as_deref() {
            None => non_empty("TOLLGATE_PUBLIC_URL").is_some_and(|u| u.starts_with("https://")),
            Some("true" | "1") => true,
            Some("false" | "0") => false,
            Some(other) => {
                return Err(ConfigError::new(
                    "TOLLGATE_SECURE_COOKIES",
                    format!("{other:?} is not true or false"),
                ))
            }
        };

        let public_origin = match non_empty("TOLLGATE_PUBLIC_URL") {
            None => None,
            Some(u) => {
                let url = reqwest::Url::parse(u.trim()).ok().filter(|url| {
                    matches!(url.scheme(), "http" | "https") && url.host_str().is_some()
                });
                match url {
                    Some(url) => Some(url.origin().ascii_serialization()),
                    None => {
                        return Err(ConfigError::new(
                            "TOLLGATE_PUBLIC_URL",
                            format!("{u:?} is not a URL like https://tollgate.example.com"),
                        ))
                    }
                }
            }
        };

        let session_idle_minutes = match non_empty("TOLLGATE_SESSION_IDLE_MINUTES") {
            None => 7 * 24 * 60,
            Some(v) => v
                .parse::<i64>()
                .ok()
                .filter(|m| (1..=525_600).contains(m))
                .ok_or_else(|| {
                    ConfigError::new(
                        "TOLLGATE_SESSION_IDLE_MINUTES",
                        format!("{v:?} is not 1 to 525600"),
                    )
                })?,
        };

        let log_format = match non_empty("TOLLGATE_LOG_FORMAT").as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(ConfigError::new(
                    "TOLLGATE_LOG_FORMAT",
                    format!("{other:?} is not text or json"),
                ))
            }
        };

        // A whole number from 1 to `max`, or `default` when unset.
        let number = |var: &'static str, default: u32, max: u32| -> Result<u32, ConfigError> {
            match non_empty(var) {
                None => Ok(default),
                Some(v) => v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=max).contains(n))
                    .ok_or_else(|| {
                        ConfigError::new(var, format!("{v:?} is not a number from 1 to {max}"))
                    }),
            }
        };
        let per_minute = |var: &'static str, default: u32| number(var, default, 100_000);
        let logins_per_account_per_minute =
            per_minute("TOLLGATE_LOGINS_PER_ACCOUNT_PER_MINUTE", 5)?;
        let logins_per_address_per_minute =
            per_minute("TOLLGATE_LOGINS_PER_ADDRESS_PER_MINUTE", 20)?;
        let jobs_per_user_per_minute = per_minute("TOLLGATE_JOBS_PER_USER_PER_MINUTE", 60)?;
        let jobs_burst_per_user = per_minute("TOLLGATE_JOBS_BURST_PER_USER", 30)?;

        // Runs in flight at once on this node: each waits on its provider
        // without a thread, so thousands are cheap. Enough by default that
        // a node's group commits and claims gather many runs each (a drain
        // at zero provider latency peaks near 256 on two cores).
        let workers = match non_empty("TOLLGATE_WORKERS") {
            None => 256,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=100_000).contains(n))
                .ok_or_else(|| {
                    ConfigError::new(
                        "TOLLGATE_WORKERS",
                        format!("{v:?} is not a number from 1 to 100000"),
                    )
                })?,
        };
        let lease_s = match non_empty("TOLLGATE_LEASE_SECONDS") {
            None => 30,
            Some(v) => v
                .parse::<i64>()
                .ok()
                .filter(|n| (2..=3600).contains(n))
                .ok_or_else(|| {
                    ConfigError::new(
                        "TOLLGATE_LEASE_SECONDS",
                        format!("{v:?} is not a number from 2 to 3600"),
                    )
                })?,
        };
        let daily_cap_usd = match non_empty("TOLLGATE_DAILY_CAP_USD") {
            None => crate::model::Usd::parse("50.00").unwrap_or_default(),
            Some(v) => crate::model::Usd::parse(&v).map_err(|_| {
                ConfigError::new(
                    "TOLLGATE_DAILY_CAP_USD",
                    format!("{v:?} is not an amount like 50.00"),
                )
            })?,
        };

        let spend_warning_percent = number("TOLLGATE_SPEND_WARNING_PERCENT", 80, 100)?;
        // Issue 29, 2: no one person may spend more than this share of a
        // day's cap, so one loop of orders cannot pause everyone's work.
        let user_share_percent = number("TOLLGATE_USER_SHARE_PERCENT", 50, 100)?;

        let site_root =
            PathBuf::from(non_empty("TOLLGATE_SITE_ROOT").unwrap_or_else(|| "target/site".into()));

        let webhook_allow_networks = match non_empty("TOLLGATE_WEBHOOK_ALLOW_NETWORKS") {
            None => Vec::new(),
            Some(v) => v
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(|c| {
                    c.parse::<ipnet::IpNet>().map_err(|_| {
                        ConfigError::new(
                            "TOLLGATE_WEBHOOK_ALLOW_NETWORKS",
                            format!("{c:?} is not a network like 127.0.0.0/8"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let schedule_raw = non_empty("TOLLGATE_WEBHOOK_RETRY_SCHEDULE")
            .unwrap_or_else(|| DEFAULT_WEBHOOK_RETRY_SCHEDULE.into());
        let webhook_retry_schedule: Vec<std::time::Duration> = schedule_raw
            .split(',')
            .map(str::trim)
            .map(|d| {
                humantime::parse_duration(d)
                    .ok()
                    .filter(|d| *d <= std::time::Duration::from_secs(7 * 86_400))
                    .ok_or_else(|| {
                        ConfigError::new(
                            "TOLLGATE_WEBHOOK_RETRY_SCHEDULE",
                            format!("{d:?} is not a delay like 5s, 5m or 2h (at most 7 days)"),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        let storage_quota_bytes = match non_empty("TOLLGATE_STORAGE_QUOTA_MB") {
            None => 2_000 * 1_000_000,
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|mb| (1..=10_000_000).contains(mb))
                .map(|mb| mb * 1_000_000)
                .ok_or_else(|| {
                    ConfigError::new(
                        "TOLLGATE_STORAGE_QUOTA_MB",
                        format!("{v:?} is not a number of megabytes from 1 to 10,000,000"),
                    )
                })?,
        };
        let webhook_allow_public = match non_empty("TOLLGATE_WEBHOOK_ALLOW_PUBLIC").as_deref() {
            None | Some("true" | "1") => true,
            Some("false" | "0") => false,
            Some(other) => {
                return Err(ConfigError::new(
                    "TOLLGATE_WEBHOOK_ALLOW_PUBLIC",
                    format!("{other:?} is not true or false"),
                ))
            }
        };
        let retention = Retention::from_lookup(non_empty)?;
        let exposure = Exposure::from_lookup(non_empty)?;
        if webhook_retry_schedule.len() > 50 {
            return Err(ConfigError::new(
                "TOLLGATE_WEBHOOK_RETRY_SCHEDULE",
                "at most 50 retries",
            ));
        }

        Ok(Config {
            database_url,
            listen,
            ops_listen,
            storage,
            storage_sync,
            config_file,
            file,
            secure_cookies,
            public_origin,
            session_idle_minutes,
            log_format,
            logins_per_account_per_minute,
            jobs_per_user_per_minute,
            jobs_burst_per_user,
            logins_per_address_per_minute,
            workers,
            lease_s,
            daily_cap_usd,
            spend_warning_percent,
            user_share_percent,
            site_root,
            models,
            webhook_allow_networks,
            webhook_retry_schedule,
            webhook_allow_public,
            storage_quota_bytes,
            retention,
            exposure,
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
