//! Reading one setting: the environment first, then (for the settings a
//! file may hold) the TOML file's value; each kind of value (a choice, a
//! number in a range, an address, a list) is parsed and refused in one
//! place, with the setting named.

use super::ConfigError;
use std::fmt::Display;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// The settings a TOML file may hold besides `models`, `checker` and
/// `local`, and the variable each stands in for.
pub(super) const FILE_SETTINGS: &[(&str, &str)] = &[
    ("workers", "TOLLGATE_WORKERS"),
    ("lease_seconds", "TOLLGATE_LEASE_SECONDS"),
    ("daily_cap_usd", "TOLLGATE_DAILY_CAP_USD"),
    ("spend_warning_percent", "TOLLGATE_SPEND_WARNING_PERCENT"),
    ("user_share_percent", "TOLLGATE_USER_SHARE_PERCENT"),
    ("webhook_allow_networks", "TOLLGATE_WEBHOOK_ALLOW_NETWORKS"),
    ("webhook_retry_schedule", "TOLLGATE_WEBHOOK_RETRY_SCHEDULE"),
    ("storage_quota_mb", "TOLLGATE_STORAGE_QUOTA_MB"),
    (
        "jobs_per_user_per_minute",
        "TOLLGATE_JOBS_PER_USER_PER_MINUTE",
    ),
    ("jobs_burst_per_user", "TOLLGATE_JOBS_BURST_PER_USER"),
];

/// The file's sections read elsewhere (`config::models`).
pub(super) const FILE_SECTIONS: &[&str] = &["models", "checker", "local"];

/// Where settings come from: a lookup (the environment, or a test's map)
/// and the parsed file.
pub(super) struct Settings<'a> {
    pub get: &'a dyn Fn(&str) -> Option<String>,
    pub file: &'a toml::Table,
}

impl Settings<'_> {
    /// A setting's value, unless unset or blank: the environment's, else
    /// the file's where the file may hold it.
    pub fn value(&self, var: &str) -> Option<String> {
        (self.get)(var)
            .filter(|v| !v.trim().is_empty())
            .or_else(|| {
                let (key, _) = FILE_SETTINGS.iter().find(|(_, v)| *v == var)?;
                self.file.get(*key).map(|v| match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
            })
    }

    /// One of a few words (`words` says which, for the error), or
    /// `default` when unset.
    pub fn choice<T: Copy>(
        &self,
        var: &'static str,
        default: T,
        options: &[(&str, T)],
        words: &str,
    ) -> Result<T, ConfigError> {
        let Some(raw) = self.value(var) else {
            return Ok(default);
        };
        options
            .iter()
            .find(|(word, _)| *word == raw)
            .map(|(_, value)| *value)
            .ok_or_else(|| ConfigError::new(var, format!("{raw:?} is not {words}")))
    }

    /// `true`/`1` or `false`/`0`, or `default` when unset.
    pub fn flag(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        let options = [("true", true), ("1", true), ("false", false), ("0", false)];
        self.choice(var, default, &options, "true or false")
    }

    /// A whole number in `range`, or `default` when unset.
    pub fn number<T>(
        &self,
        var: &'static str,
        default: T,
        range: RangeInclusive<T>,
    ) -> Result<T, ConfigError>
    where
        T: FromStr + PartialOrd + Display,
    {
        let said = format!("a number from {} to {}", range.start(), range.end());
        self.number_said(var, default, range, &said)
    }

    /// As `number`, with the error saying what is expected in `said`.
    pub fn number_said<T>(
        &self,
        var: &'static str,
        default: T,
        range: RangeInclusive<T>,
        said: &str,
    ) -> Result<T, ConfigError>
    where
        T: FromStr + PartialOrd,
    {
        let Some(raw) = self.value(var) else {
            return Ok(default);
        };
        raw.trim()
            .parse::<T>()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| ConfigError::new(var, format!("{raw:?} is not {said}")))
    }

    /// A socket address like `example`, or none when unset.
    pub fn address(
        &self,
        var: &'static str,
        example: &str,
    ) -> Result<Option<SocketAddr>, ConfigError> {
        let Some(raw) = self.value(var) else {
            return Ok(None);
        };
        raw.trim()
            .parse()
            .map(Some)
            .map_err(|_| ConfigError::new(var, format!("{raw:?} is not an address like {example}")))
    }

    /// A comma-separated list, each item parsed by `parse` (the error says
    /// `said` of the first item it refuses); `default` stands when unset.
    pub fn list<T>(
        &self,
        var: &'static str,
        default: &str,
        parse: impl Fn(&str) -> Option<T>,
        said: &str,
    ) -> Result<Vec<T>, ConfigError> {
        let raw = self.value(var).unwrap_or_else(|| default.to_string());
        raw.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                parse(item).ok_or_else(|| ConfigError::new(var, format!("{item:?} is not {said}")))
            })
            .collect()
    }
}
