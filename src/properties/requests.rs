//! A job request's parsing and the canonical hash an idempotency key is
//! bound to: a replay with the same key and the same request, however the
//! client wrote it, must be the same job; a different request under the
//! same key must be refused (rule 1).

use super::{json, typed_text};
use crate::model::{parse_request, Catalogue, STYLES};
use proptest::prelude::*;
use serde_json::Value;
use uuid::Uuid;

/// What a valid image edit says, before any client writes it down.
#[derive(Clone, Debug, PartialEq)]
struct Edit {
    source: Uuid,
    kind: &'static str,
    mask: Option<Uuid>,
    description: String,
    style: &'static str,
    strength: &'static str,
    webhook_url: Option<String>,
}

fn edit() -> impl Strategy<Value = Edit> {
    let kinds = prop::sample::select(vec!["pet", "person", "background", "area"]);
    let styles = prop::sample::select(STYLES.iter().map(|s| s.id).collect::<Vec<_>>());
    let strengths = prop::sample::select(vec!["subtle", "balanced", "strong"]);
    let hook = prop::option::of("[a-z]{1,10}")
        .prop_map(|h| h.map(|h| format!("https://{h}.example/hook")));
    (
        any::<u128>(),
        kinds,
        any::<u128>(),
        typed_text(40),
        styles,
        strengths,
        hook,
    )
        .prop_map(
            |(source, kind, mask, description, style, strength, webhook_url)| Edit {
                source: Uuid::from_u128(source),
                kind,
                mask: (kind == "area").then(|| Uuid::from_u128(mask)),
                // What the canonical form keeps: padding is never part of it.
                description: description.trim().to_string(),
                style,
                strength,
                webhook_url,
            },
        )
}

/// How one client writes a request down: key order, the whitespace between
/// tokens, padding around text and ids, the letter case of ids, and whether
/// an empty description is sent at all.
#[derive(Clone, Debug)]
struct Writing {
    order: Vec<u8>,
    space: Vec<&'static str>,
    pad: (&'static str, &'static str),
    upper_ids: bool,
    omit_empty: bool,
}

fn writing() -> impl Strategy<Value = Writing> {
    let gaps = prop::sample::select(vec!["", " ", "\n", "\t", "\r\n  "]);
    let pads = prop::sample::select(vec!["", " ", "  ", "\u{a0}", "\u{3000}", "\n"]);
    (
        prop::collection::vec(any::<u8>(), 9),
        prop::collection::vec(gaps, 24),
        (pads.clone(), pads),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(order, space, pad, upper_ids, omit_empty)| Writing {
            order,
            space,
            pad,
            upper_ids,
            omit_empty,
        })
}

/// An object's text with its members in `order`, `space` between tokens.
fn object(members: Vec<(&str, String)>, w: &Writing, at: &mut usize) -> String {
    let mut gap = || {
        *at += 1;
        w.space[*at % w.space.len()]
    };
    let mut members: Vec<(u8, (&str, String))> = members
        .into_iter()
        .enumerate()
        .map(|(i, m)| (w.order[i % w.order.len()], m))
        .collect();
    members.sort_by_key(|(o, _)| *o);
    let body: Vec<String> = members
        .into_iter()
        .map(|(_, (k, v))| format!("{}\"{k}\"{}:{}{v}", gap(), gap(), gap()))
        .collect();
    format!("{{{}{}}}", body.join(","), gap())
}

fn text(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// The request as one client would send it.
fn written(e: &Edit, w: &Writing) -> Value {
    let id = |u: Uuid| {
        let id = u.to_string();
        let id = if w.upper_ids { id.to_uppercase() } else { id };
        text(&format!("{}{id}{}", w.pad.0, w.pad.1))
    };
    let mut at = 0;
    let mut target = vec![("kind", text(e.kind))];
    if !(e.description.is_empty() && w.omit_empty) {
        let padded = format!("{}{}{}", w.pad.0, e.description, w.pad.1);
        target.push(("description", text(&padded)));
    }
    if let Some(m) = e.mask {
        target.push(("mask", id(m)));
    }
    let mut members = vec![
        ("kind", text("image_edit")),
        ("source", id(e.source)),
        ("target", object(target, w, &mut at)),
        ("style", text(e.style)),
        ("strength", text(e.strength)),
    ];
    if let Some(url) = &e.webhook_url {
        members.push(("webhook_url", text(url)));
    }
    let body = object(members, w, &mut at);
    serde_json::from_str(&body).unwrap_or_else(|err| panic!("{body}: {err}"))
}

fn hash(body: &Value) -> String {
    parse_request(body, &Catalogue::builtin())
        .unwrap_or_else(|e| panic!("{body}: {e:?}"))
        .canonical_hash()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever a client sends, the answer is a request or a refusal that
    /// names at least one field; never a panic.
    #[test]
    fn any_json_is_a_request_or_names_what_is_wrong(body in json()) {
        if let Err(errors) = parse_request(&body, &Catalogue::builtin()) {
            prop_assert!(!errors.is_empty());
        }
    }

    /// A valid edit with one member replaced by anything: still no panic,
    /// and a refusal names a field.
    #[test]
    fn a_request_with_any_one_member_replaced_never_panics(
        e in edit(), w in writing(), key in "kind|source|target|style|strength|webhook_url|extra",
        value in json(),
    ) {
        let mut body = written(&e, &w);
        body[key.as_str()] = value;
        if let Err(errors) = parse_request(&body, &Catalogue::builtin()) {
            prop_assert!(!errors.is_empty());
        }
    }

    /// Two clients writing the same edit differently bind a key to the
    /// same hash (rule 1's "same request").
    #[test]
    fn the_hash_ignores_how_a_request_is_written(e in edit(), a in writing(), b in writing()) {
        prop_assert_eq!(hash(&written(&e, &a)), hash(&written(&e, &b)));
    }

    /// Two edits that differ in anything the provider would see never share
    /// a hash: a key reused for another request is refused, not replayed.
    #[test]
    fn the_hash_tells_different_requests_apart(a in edit(), b in edit(), w in writing()) {
        let same = hash(&written(&a, &w)) == hash(&written(&b, &w));
        prop_assert_eq!(same, a == b);
    }

    /// One field changed, the rest kept: the hash changes with it.
    #[test]
    fn changing_the_description_alone_changes_the_hash(
        e in edit(), other in typed_text(40), w in writing(),
    ) {
        let mut changed = e.clone();
        changed.description = other.trim().to_string();
        let same = hash(&written(&e, &w)) == hash(&written(&changed, &w));
        prop_assert_eq!(same, e.description == changed.description);
    }

    /// The canonical form is itself a request that hashes the same.
    #[test]
    fn the_canonical_form_reads_back_as_itself(e in edit(), w in writing()) {
        let request = parse_request(&written(&e, &w), &Catalogue::builtin()).unwrap();
        let canonical: Value = serde_json::from_str(&request.canonical_json()).unwrap();
        prop_assert_eq!(hash(&canonical), request.canonical_hash());
    }
}
