//! A job's timeline as stored: any kind and detail (written by a trigger,
//! an older build or a newer one) reads without a panic, and what this
//! build reads it writes back to a shape that reads the same.

use super::json;
use crate::model::Happening;
use proptest::prelude::*;
use serde_json::Value;

/// The kinds this build knows, and a few it does not.
fn kind() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "created",
            "claimed",
            "released",
            "lease_lost",
            "attempt",
            "submitted",
            "attempt_ended",
            "settled",
            "step",
            "succeeded",
            "failed",
            "cancelled",
            "refunded",
            "parked",
            "decided",
            "cancelled_while_parked",
            "unheard_of",
        ])
        .prop_map(str::to_string),
        "[a-z_]{0,16}",
    ]
}

/// A detail object made of the fields real entries carry, with values of
/// the right kinds or not.
fn detail() -> impl Strategy<Value = Value> {
    let field = prop::sample::select(vec![
        "attempt",
        "credits",
        "estimated_usd",
        "token",
        "worker",
        "purpose",
        "provider",
        "model",
        "day",
        "hold_usd",
        "provider_job_id",
        "state",
        "error_class",
        "usd",
        "priced",
        "code",
        "stage",
        "action",
        "refund",
        "step",
        "verdict",
    ]);
    let value = prop_oneof![
        json(),
        (0i64..10).prop_map(Value::from),
        prop::sample::select(vec![
            "0.040000",
            "failed",
            "succeeded",
            "paid",
            "2026-12-05",
            "checked"
        ])
        .prop_map(Value::from),
    ];
    prop_oneof![
        json(),
        prop::collection::btree_map(field, value, 0..6)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_stored_entry_reads_and_writes_back_stably(kind in kind(), detail in detail()) {
        let read = Happening::from_stored(kind.clone(), detail.clone());
        let (k2, d2) = read.to_stored();
        if let Happening::Unknown { .. } = read {
            prop_assert_eq!((&k2, &d2), (&kind, &detail), "an unknown entry is kept verbatim");
        }
        let _ = read.is_ending();
        prop_assert_eq!(Happening::from_stored(k2, d2), read);
    }
}
