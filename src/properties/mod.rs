//! Properties: what must hold for every input, not only for the examples
//! the unit tests beside the code name (issue 31, 3). Each module states its
//! promises over generated inputs with `proptest`, which shrinks a failure
//! to its smallest case and prints it (and keeps the seed in
//! `proptest-regressions/`, so a found case is tried first ever after).
//!
//! - `requests`: parsing any JSON never panics and names what it refuses;
//!   the canonical hash an idempotency key is bound to ignores key order,
//!   whitespace, padding and letter case of ids, and tells any two
//!   different requests apart, whatever the unicode in them.
//! - `images`: uploads and providers' outputs as arbitrary, mangled or
//!   lying bytes: never a panic, never a decode past the limits.
//! - `settings`: configuration from arbitrary environment values and model
//!   tables: read, or refused naming the setting; never a panic.
//! - `cursors`: every cursor reads back as written, any other text is a
//!   field error, and pages walk any list to its end and back.
//! - `signing`: Standard Webhooks signatures verify with the reference
//!   library under each secret of a rotation; no other message does.
//! - `states`: the job, attempt and parked-record state machines: no walk
//!   leaves an end, every state is reachable, none is a trap, and a
//!   cancelled job's record allows nothing that spends.
//! - `money`: dollars and credits are exact, read back as written, never
//!   overflow; an unknown cost is never read or shown as zero.
//! - `timeline`: any stored timeline entry reads without a panic, and what
//!   is read writes back to what reads the same.

mod cursors;
mod images;
mod money;
mod requests;
mod settings;
mod signing;
mod states;
mod timeline;

use proptest::prelude::*;
use serde_json::Value;

/// Any JSON value a client could send, a few levels deep.
pub fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Text a person might type: any characters but controls.
pub fn typed_text(max_chars: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        any::<char>().prop_filter("no control characters", |c| !c.is_control()),
        0..=max_chars,
    )
    .prop_map(String::from_iter)
}
