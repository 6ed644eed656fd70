//! Evidence is sanitised where it is written (rule 12): error texts from
//! HTTP clients and object stores carry whole URLs, and a URL may carry a
//! signed query string (`X-Amz-Signature=…`), credentials (`user:pass@`)
//! or a token. `text` keeps what a person needs to understand a failure
//! (the scheme, host and path, the status, the words) and drops the rest;
//! `json` does the same to every string in a value. Pure and wasm-safe.

use serde_json::Value;

/// The longest error text kept: a provider's message is evidence, not a
/// place to store a page of HTML.
pub const TEXT_LEN_MAX: usize = 2000;

/// Prefixes of secrets that must never be stored: our own API tokens and
/// webhook secrets, and the usual bearer schemes.
const SECRET_PREFIXES: [&str; 3] = ["tg_", "whsec_", "sk-"];

/// `text` without URL query strings, fragments and credentials, without
/// bearer or basic credentials and known secret prefixes, and at most
/// `TEXT_LEN_MAX` characters.
pub fn text(text: &str) -> String {
    if !needed(text) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len().min(TEXT_LEN_MAX));
    let mut redact_next = false;
    for word in text.split_inclusive(char::is_whitespace) {
        let (core, space) = split_trailing_space(word);
        if redact_next && !core.is_empty() {
            out.push_str("[redacted]");
            out.push_str(space);
            redact_next = false;
            continue;
        }
        let lower = core.to_ascii_lowercase();
        redact_next = lower == "bearer" || lower == "basic";
        out.push_str(&scrub_word(core));
        out.push_str(space);
        if out.chars().count() > TEXT_LEN_MAX {
            break;
        }
    }
    if out.chars().count() > TEXT_LEN_MAX {
        out = out.chars().take(TEXT_LEN_MAX - 1).collect();
        out.push('…');
    }
    out
}

/// Every string in `value` passed through `text` (keys are ours and stay).
pub fn json(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(text(s)),
        Value::Array(items) => Value::Array(items.iter().map(json).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), json(v))).collect())
        }
        other => other.clone(),
    }
}

/// True when `text` would change: most texts are our own sentences and
/// are kept as they are without copying.
pub fn needed(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    text.len() > TEXT_LEN_MAX
        || text.contains("://")
        || SECRET_PREFIXES.iter().any(|p| text.contains(p))
        || lower.contains("bearer")
        || lower.contains("basic")
}

fn split_trailing_space(word: &str) -> (&str, &str) {
    let core = word.trim_end_matches(char::is_whitespace);
    (core, &word[core.len()..])
}

/// One whitespace-free word: a URL inside it loses its userinfo, query
/// and fragment; a secret-looking token is replaced.
fn scrub_word(word: &str) -> String {
    if let Some(at) = word.find("://") {
        let scheme_start = word[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let (before, url) = word.split_at(scheme_start);
        return format!("{before}{}", scrub_url(url));
    }
    let bare = word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-');
    if SECRET_PREFIXES
        .iter()
        .any(|p| bare.starts_with(p) && bare.len() > p.len() + 7)
    {
        return word.replace(bare, "[redacted]");
    }
    word.to_string()
}

/// `scheme://user:pass@host:port/path?query#fragment` (with whatever
/// punctuation follows it) kept as `scheme://host:port/path` and the
/// trailing punctuation.
fn scrub_url(url: &str) -> String {
    // The URL ends where a character no URL ends with begins (a closing
    // bracket or quote around it in an error message).
    let end = url
        .find([')', ']', '"', '\'', '>', ',', ';'])
        .unwrap_or(url.len());
    let (url, rest) = url.split_at(end);
    let Some(sep) = url.find("://") else {
        return format!("{url}{rest}");
    };
    let (scheme, after) = url.split_at(sep + 3);
    let cut = after.find(['?', '#']).unwrap_or(after.len());
    let after = &after[..cut];
    let authority_end = after.find('/').unwrap_or(after.len());
    let (authority, path) = after.split_at(authority_end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let dropped = if cut < url.len() - sep - 3 || host.len() < authority.len() {
        "[…]"
    } else {
        ""
    };
    format!("{scheme}{host}{path}{dropped}{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_urls_lose_their_query_and_credentials() {
        let raw = "error sending request for url (https://bucket.s3.amazonaws.com/outputs/x.png?X-Amz-Signature=abc123&X-Amz-Credential=AKIA): connection refused";
        let clean = text(raw);
        assert_eq!(
            clean,
            "error sending request for url (https://bucket.s3.amazonaws.com/outputs/x.png[…]): connection refused"
        );
        let raw = "GET http://user:secret@provider.test:8080/v1/predictions/p1#frag failed";
        assert_eq!(
            text(raw),
            "GET http://provider.test:8080/v1/predictions/p1[…] failed"
        );
    }

    #[test]
    fn tokens_and_bearer_credentials_are_redacted() {
        assert_eq!(
            text("401: Authorization: Bearer abc.def.ghi was refused"),
            "401: Authorization: Bearer [redacted] was refused"
        );
        assert_eq!(
            text("key tg_0123456789abcdef leaked"),
            "key [redacted] leaked"
        );
        assert_eq!(
            text("\"whsec_c2VjcmV0c2VjcmV0\" is wrong"),
            "\"[redacted]\" is wrong"
        );
    }

    #[test]
    fn plain_words_and_short_prefixes_stay() {
        let s = "503 Service Unavailable: try again later (tg_ is our prefix)";
        assert_eq!(text(s), s);
        assert!(!needed("No final status after 3 status checks."));
    }

    #[test]
    fn json_scrubs_every_string_and_long_texts_are_cut() {
        let v = serde_json::json!({"reason": "ours", "last_error": "https://h/p?sig=1", "n": 3, "list": ["http://a@b/c"]});
        let clean = json(&v);
        assert_eq!(clean["last_error"], "https://h/p[…]");
        assert_eq!(clean["list"][0], "http://b/c[…]");
        assert_eq!(clean["n"], 3);
        let long = "x".repeat(5000);
        assert_eq!(text(&long).chars().count(), TEXT_LEN_MAX);
    }
}
