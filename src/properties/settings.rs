//! Configuration from whatever an operator writes: every setting is read
//! or refused with a message naming it, never a panic and never another
//! setting's name; a models table of any shape is read or refused, and
//! what is read is whole (every model reachable, every chain finite).

use crate::config::models;
use crate::config::Config;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Every environment setting but the two that name files to read
/// (`TOLLGATE_CONFIG`, `TOLLGATE_MODELS_DIR`): those are read, not parsed.
const SETTINGS: &[&str] = &[
    "TOLLGATE_ALLOWED_HOSTS",
    "TOLLGATE_DAILY_CAP_USD",
    "TOLLGATE_DATABASE_URL",
    "TOLLGATE_IDLE_CONNECTION_SECONDS",
    "TOLLGATE_JOBS_BURST_PER_USER",
    "TOLLGATE_JOBS_PER_USER_PER_MINUTE",
    "TOLLGATE_LEASE_SECONDS",
    "TOLLGATE_LISTEN",
    "TOLLGATE_LOGINS_PER_ACCOUNT_PER_MINUTE",
    "TOLLGATE_LOGINS_PER_ADDRESS_PER_MINUTE",
    "TOLLGATE_LOG_FORMAT",
    "TOLLGATE_MAX_CONNECTIONS",
    "TOLLGATE_MAX_CONNECTIONS_PER_ADDRESS",
    "TOLLGATE_OPS_LISTEN",
    "TOLLGATE_PUBLIC_URL",
    "TOLLGATE_RETAIN_DELIVERIES_DAYS",
    "TOLLGATE_RETAIN_HISTORY_DAYS",
    "TOLLGATE_RETAIN_MEDIA_DAYS",
    "TOLLGATE_SECURE_COOKIES",
    "TOLLGATE_SESSION_IDLE_MINUTES",
    "TOLLGATE_SETUP_TOKEN",
    "TOLLGATE_SITE_ROOT",
    "TOLLGATE_SPEND_WARNING_PERCENT",
    "TOLLGATE_STORAGE",
    "TOLLGATE_STORAGE_QUOTA_MB",
    "TOLLGATE_STORAGE_SYNC",
    "TOLLGATE_TRUSTED_PROXIES",
    "TOLLGATE_USER_SHARE_PERCENT",
    "TOLLGATE_WEBHOOK_ALLOW_NETWORKS",
    "TOLLGATE_WEBHOOK_ALLOW_PUBLIC",
    "TOLLGATE_WEBHOOK_RETRY_SCHEDULE",
    "TOLLGATE_WORKERS",
];

/// What an operator might write for a setting: numbers of every size and
/// sign, words, addresses, lists, durations, and anything at all.
fn setting_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        (0u64..100_000).prop_map(|n| n.to_string()),
        "[0-9]{1,4}\\.[0-9]{1,8}",
        prop::sample::select(vec![
            "",
            " ",
            "true",
            "false",
            "yes",
            "0",
            "-1",
            "json",
            "text",
            "group",
            "file",
            "127.0.0.1:0",
            "[::1]:8080",
            "localhost",
            "10.0.0.0/8, 192.168.0.0/16",
            "1s,5s,30s",
            "1m, 1h",
            "0s",
            "https://example.com",
            "http://a.example:99999",
            "s3://bucket?endpoint=http://127.0.0.1:9000&region=us",
            "ftp://nope",
            "postgres://u:p@127.0.0.1:1/db",
            "sqlite::memory:",
            "mysql://x",
            "18446744073709551616",
            "1e9",
            "NaN",
            "\u{0}",
            "ünïcødé",
        ])
        .prop_map(str::to_string),
        ".{0,24}",
    ]
}

/// A value in a model table: the right kinds for its keys, often, and
/// anything, sometimes.
fn toml_value() -> impl Strategy<Value = toml::Value> {
    let leaf = prop_oneof![
        prop::sample::select(vec![
            "image_edit",
            "video",
            "local",
            "http",
            "park",
            "refund",
            "exhausted",
            "unavailable",
            "uncertain",
            "not_created",
            "fast",
            "slow",
            "m1",
            "m2",
            "https://provider.example/v1",
            "720p",
            "1080p",
            "",
        ])
        .prop_map(|s| toml::Value::String(s.into())),
        ".{0,10}".prop_map(toml::Value::String),
        any::<i64>().prop_map(toml::Value::Integer),
        (0i64..100).prop_map(toml::Value::Integer),
        any::<f64>().prop_map(toml::Value::Float),
        (0.0f64..100.0).prop_map(toml::Value::Float),
        any::<bool>().prop_map(toml::Value::Boolean),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(toml::Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["per_generation", "per_second", "720p", "1080p", "x"]),
                inner,
                0..3,
            )
            .prop_map(|m| toml::Value::Table(
                m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

const MODEL_KEYS: &[&str] = &[
    "id",
    "name",
    "kind",
    "provider",
    "endpoint",
    "remote_model",
    "api_key_env",
    "output_hosts",
    "price",
    "durations_s",
    "attempts",
    "on_uncertain",
    "on_failure",
    "default",
    "idempotency",
    "lookup",
    "lookup_not_found_code",
    "submit_503",
    "fallback",
    "fallback_on",
    "prediction_window_s",
    "expected_s",
    "backoff_ms",
    "backoff_max_ms",
    "timeout_ms",
    "poll_ms",
    "poll_timeout_s",
    "faults",
    "unheard_of",
];

fn model_table() -> impl Strategy<Value = toml::Value> {
    let id = prop::sample::select(vec!["m1", "m2", "fast", "slow"]);
    let kind = prop::sample::select(vec!["image_edit", "video"]);
    let others = prop::collection::btree_map(
        prop::sample::select(MODEL_KEYS.to_vec()),
        toml_value(),
        0..6,
    );
    (id, kind, others).prop_map(|(id, kind, others)| {
        let mut t = toml::Table::new();
        t.insert("id".into(), toml::Value::String(id.into()));
        t.insert("kind".into(), toml::Value::String(kind.into()));
        for (k, v) in others {
            t.insert(k.to_string(), v);
        }
        toml::Value::Table(t)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any environment: a configuration, or a refusal naming a setting the
    /// operator wrote (the defaults themselves are always good).
    #[test]
    fn any_environment_is_read_or_refused_by_name(
        env in prop::collection::btree_map(prop::sample::select(SETTINGS.to_vec()), setting_value(), 0..8),
    ) {
        let env: BTreeMap<&str, String> = env;
        match Config::from_lookup(|k| env.get(k).cloned()) {
            Ok(_) => {}
            Err(e) => prop_assert!(
                env.contains_key(e.setting),
                "refused {} ({}) which was not set: {:?}", e.setting, e.message, env
            ),
        }
    }

    /// Any `[[models]]` list: read or refused, and a list that is read
    /// offers each kind a default and only chains of models it has, each
    /// model once.
    #[test]
    fn any_model_table_is_read_whole_or_refused(list in prop::collection::vec(model_table(), 0..4)) {
        let mut file = toml::Table::new();
        file.insert("models".into(), toml::Value::Array(list));
        if let Ok(m) = models::parse(&file, &|_| None) {
            for kind in [crate::model::JobKind::ImageEdit, crate::model::JobKind::Video] {
                let first = m.default_for(kind);
                let chain = m.chain(&first.id);
                prop_assert_eq!(&chain[0].id, &first.id);
                let mut ids: Vec<&str> = chain.iter().map(|c| c.id.as_str()).collect();
                ids.sort_unstable();
                ids.dedup();
                prop_assert_eq!(ids.len(), chain.len(), "a model twice in a chain");
            }
            let _ = m.catalogue();
        }
    }
}
