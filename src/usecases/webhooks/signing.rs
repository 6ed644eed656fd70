//! Standard Webhooks signatures: `webhook-signature: v1,<base64 of
//! HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`, the key being the
//! base64 after `whsec_`. During a rotation a delivery carries one
//! signature per secret, space-separated.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

const PREFIX: &str = "whsec_";
/// Random bytes in a new secret (Standard Webhooks asks for 24 to 64).
const SECRET_BYTES: usize = 32;

/// A new secret: `whsec_` and the base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; SECRET_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut key);
    format!("{PREFIX}{}", STANDARD.encode(key))
}

fn key(secret: &str) -> Option<Vec<u8>> {
    STANDARD
        .decode(secret.strip_prefix(PREFIX).unwrap_or(secret))
        .ok()
}

/// `v1,<signature>` of one message under one secret.
pub fn sign_one(secret: &str, id: &str, timestamp: i64, body: &str) -> Option<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(&key(secret)?).ok()?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// The header value: a signature per secret, space-separated.
pub fn sign(secrets: &[&str], id: &str, timestamp: i64, body: &str) -> String {
    secrets
        .iter()
        .filter_map(|s| sign_one(s, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector of the Standard Webhooks specification.
    #[test]
    fn the_specifications_test_vector() {
        let sig = sign_one(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(
            sig.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn secrets_are_fresh_and_well_formed() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with("whsec_"));
        assert_eq!(key(&a).unwrap().len(), SECRET_BYTES);
        let two = sign(&[&a, &b], "id", 1, "{}");
        assert_eq!(two.split(' ').count(), 2);
    }
}
