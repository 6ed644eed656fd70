//! Standard Webhooks signatures, checked by the specification's own
//! reference library (`standardwebhooks`, by its authors): what we sign
//! verifies under each secret of a rotation, and a message changed in its
//! body, id or time does not.

use crate::usecases::webhooks::signing::{sign, sign_one};
use axum::http::{HeaderMap, HeaderValue};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use proptest::prelude::*;

/// A secret as Standard Webhooks writes one: `whsec_` and 24 to 64 bytes.
fn secret() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<u8>(), 24..=64)
        .prop_map(|k| format!("whsec_{}", STANDARD.encode(k)))
}

fn headers(id: &str, timestamp: i64, signature: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "webhook-id",
        HeaderValue::from_str(id).expect("an id is visible ASCII"),
    );
    h.insert("webhook-timestamp", HeaderValue::from(timestamp));
    h.insert(
        "webhook-signature",
        HeaderValue::from_str(signature).expect("base64"),
    );
    h
}

fn verifies(secret: &str, body: &str, h: &HeaderMap) -> bool {
    standardwebhooks::Webhook::new(secret)
        .expect("a well-formed secret")
        .verify(body.as_bytes(), h)
        .is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn what_we_sign_verifies_under_each_secret_of_a_rotation(
        secrets in prop::collection::vec(secret(), 1..4),
        id in "msg_[A-Za-z0-9]{1,32}",
        skew in -250i64..250,
        body in ".{0,200}",
    ) {
        let timestamp = chrono::Utc::now().timestamp() + skew;
        let all: Vec<&str> = secrets.iter().map(String::as_str).collect();
        let header = sign(&all, &id, timestamp, &body);
        prop_assert_eq!(header.split(' ').count(), secrets.len());
        let h = headers(&id, timestamp, &header);
        for s in &secrets {
            prop_assert!(verifies(s, &body, &h));
            prop_assert!(header.contains(&sign_one(s, &id, timestamp, &body).unwrap()));
        }
    }

    #[test]
    fn a_changed_message_does_not_verify(
        secret in secret(), other in secret(),
        id in "msg_[A-Za-z0-9]{1,32}", body in ".{0,120}", extra in ".{1,8}",
        change in 0u8..4,
    ) {
        let now = chrono::Utc::now().timestamp();
        let signature = sign_one(&secret, &id, now, &body).unwrap();
        let (id2, at2, body2, key2) = match change {
            0 => (id.clone(), now, format!("{body}{extra}"), secret.clone()),
            1 => (format!("{id}x"), now, body.clone(), secret.clone()),
            2 => (id.clone(), now - 1, body.clone(), secret.clone()),
            _ => (id.clone(), now, body.clone(), other.clone()),
        };
        prop_assume!(key2 != secret || change != 3);
        prop_assert!(!verifies(&key2, &body2, &headers(&id2, at2, &signature)));
    }
}
