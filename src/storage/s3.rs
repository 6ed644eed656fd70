//! The S3-compatible backend of the object store (AWS S3, Cloudflare R2,
//! MinIO, SeaweedFS), through `aws-sdk-s3` with a configuration built here
//! (no aws-config: no profile files, no instance metadata lookups).
//!
//! It owns parsing `s3://BUCKET?endpoint=URL&region=R`, reading credentials
//! from the usual AWS variables, and mapping the store's operations onto
//! S3: put-if-absent is `PutObject` with `If-None-Match: *`, metadata is S3
//! user metadata (`written-by`, `provider`) plus the Content-Type.

use super::{
    decode_meta_value, encode_meta_value, unfold, NewObjectMeta, ObjectBody, ObjectKey, ObjectMeta,
    PutOutcome, StorageError,
};
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use aws_smithy_http_client::tls;
use bytes::Bytes;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_REGION: &str = "us-east-1";
const META_WRITTEN_BY: &str = "written-by";
const META_PROVIDER: &str = "provider";
/// Tries of one put when the store answers 409 ConditionalRequestConflict
/// (another conditional write to the key is in flight) or the object
/// vanished between our 412 and our read of it.
const PUT_TRIES: u32 = 5;
/// First pause after a 409; doubled each time (50, 100, 200, 400 ms).
const CONFLICT_BACKOFF: Duration = Duration::from_millis(50);
/// How long `ping` waits for the bucket before calling it unreachable.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the bucket is: the parsed `s3://` part of `TOLLGATE_STORAGE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Spec {
    pub bucket: String,
    /// `None` is AWS itself (virtual-hosted addressing); any other endpoint
    /// is addressed path-style, which every S3-compatible server takes.
    pub endpoint: Option<String>,
    pub region: String,
}

impl S3Spec {
    /// Parses what follows `s3://`: `BUCKET` then optionally
    /// `?endpoint=URL&region=R` (values may be percent-encoded).
    pub fn parse(rest: &str) -> Result<S3Spec, StorageError> {
        let bad = |why: String| Err(StorageError::InvalidSpec(why));
        let (bucket, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        let bucket = bucket.strip_suffix('/').unwrap_or(bucket);
        if !valid_bucket(bucket) {
            return bad(format!(
                "s3 bucket {bucket:?} is not a bucket name (3-63 of a-z 0-9 . -, starting and ending with a letter or digit)"
            ));
        }
        let mut endpoint = None;
        let mut region = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode_meta_value(value);
            match name {
                "endpoint" => {
                    if !(value.starts_with("http://") || value.starts_with("https://")) {
                        return bad(format!(
                            "s3 endpoint {value:?} must start with http:// or https://"
                        ));
                    }
                    endpoint = Some(value.trim_end_matches('/').to_string());
                }
                "region" => {
                    if value.is_empty()
                        || !value
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                    {
                        return bad(format!("s3 region {value:?} is not a region name"));
                    }
                    region = Some(value);
                }
                other => {
                    return bad(format!(
                        "unknown s3 setting {other:?} (known: endpoint, region)"
                    ))
                }
            }
        }
        Ok(S3Spec {
            bucket: bucket.to_string(),
            endpoint,
            region: region.unwrap_or_else(|| DEFAULT_REGION.to_string()),
        })
    }
}

fn valid_bucket(b: &str) -> bool {
    (3..=63).contains(&b.len())
        && b.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
        && b.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && b.bytes().last().is_some_and(|c| c.is_ascii_alphanumeric())
}

/// Credentials from `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (and
/// `AWS_SESSION_TOKEN` when set). The values are never logged or shown.
pub fn credentials_from_env() -> Result<Credentials, StorageError> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => Ok(Credentials::new(
            id,
            secret,
            var("AWS_SESSION_TOKEN"),
            None,
            "tollgate-environment",
        )),
        _ => Err(StorageError::InvalidSpec(
            "an s3:// store needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".into(),
        )),
    }
}

/// A store in one bucket. Cloning shares the client and its connections.
#[derive(Clone)]
pub struct S3Store {
    client: Client,
    spec: Arc<S3Spec>,
}

impl fmt::Debug for S3Store {
    // The spec has no secrets; the client's configuration is left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store").field("spec", &self.spec).finish()
    }
}

impl S3Store {
    /// Builds the client; does not contact the store (see [`S3Store::ping`]).
    pub fn new(spec: S3Spec, credentials: Credentials) -> S3Store {
        let https = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let mut config = aws_sdk_s3::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .http_client(https)
            .region(Region::new(spec.region.clone()))
            .credentials_provider(credentials)
            // A dead endpoint should fail a request soon, not hang it.
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .build(),
            );
        if let Some(endpoint) = &spec.endpoint {
            config = config.endpoint_url(endpoint).force_path_style(true);
        }
        S3Store {
            client: Client::from_conf(config.build()),
            spec: Arc::new(spec),
        }
    }

    /// The SDK client, for set-up and tests (creating the bucket).
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn bucket(&self) -> &str {
        &self.spec.bucket
    }

    pub async fn put_if_absent(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        meta: &NewObjectMeta,
    ) -> Result<PutOutcome, StorageError> {
        let size = i64::try_from(bytes.len())
            .map_err(|_| StorageError::S3(format!("{key}: object too large")))?;
        for attempt in 0..PUT_TRIES {
            let mut request = self
                .client
                .put_object()
                .bucket(self.bucket())
                .key(key.as_str())
                .if_none_match("*")
                .content_type(&meta.content_type)
                .content_length(size)
                .metadata(META_WRITTEN_BY, encode_meta_value(&meta.written_by))
                // Bytes clones share the buffer: a retry does not copy it.
                .body(ByteStream::from(bytes.clone()));
            if let Some(provider) = &meta.provider {
                request = request.metadata(META_PROVIDER, encode_meta_value(provider));
            }
            let err = match request.send().await {
                Ok(_) => return Ok(PutOutcome::Created),
                Err(err) => err,
            };
            if is(&err, 412, "PreconditionFailed") {
                // Someone else's object (or our own from a retried request
                // that had succeeded): report it, never overwrite it.
                match self.head(key).await? {
                    Some(existing) => return Ok(PutOutcome::Exists(existing)),
                    // Deleted in between: the key is free, try again.
                    None => continue,
                }
            }
            if is(&err, 409, "ConditionalRequestConflict") {
                // Another conditional write to this key is in flight; its
                // outcome decides ours, so wait a little and ask again.
                tracing::debug!(
                    key = key.as_str(),
                    attempt,
                    "conditional put conflict; retrying"
                );
                tokio::time::sleep(CONFLICT_BACKOFF * 2u32.pow(attempt)).await;
                continue;
            }
            return Err(s3_err("putting", key, &err));
        }
        Err(StorageError::S3(format!(
            "putting {key}: still conflicting after {PUT_TRIES} tries"
        )))
    }

    pub async fn head(&self, key: &ObjectKey) -> Result<Option<ObjectMeta>, StorageError> {
        let result = self
            .client
            .head_object()
            .bucket(self.bucket())
            .key(key.as_str())
            .send()
            .await;
        match result {
            Ok(out) => Ok(Some(object_meta(
                out.metadata(),
                out.content_type(),
                out.content_length(),
            ))),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(None),
            // A HEAD answer has no body, so a missing bucket looks the
            // same; `ping` (readiness) is what tells those apart.
            Err(err) if is(&err, 404, "NotFound") => Ok(None),
            Err(err) => Err(s3_err("reading the metadata of", key, &err)),
        }
    }

    pub async fn get(&self, key: &ObjectKey) -> Result<Option<ObjectBody>, StorageError> {
        let result = self
            .client
            .get_object()
            .bucket(self.bucket())
            .key(key.as_str())
            .send()
            .await;
        let out = match result {
            Ok(out) => out,
            Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Ok(None)
            }
            // Only a missing key is "no object": a missing bucket is an
            // error, or a misconfigured store would look empty.
            Err(err) if err.code() == Some("NoSuchKey") => return Ok(None),
            Err(err) => return Err(s3_err("reading", key, &err)),
        };
        let meta = object_meta(out.metadata(), out.content_type(), out.content_length());
        let what = format!("reading {key}");
        // `None` once the body has failed, so the stream ends after its one
        // error.
        let stream = unfold(Some(out.body), move |body| {
            let what = what.clone();
            async move {
                let mut body = body?;
                match body.next().await? {
                    Ok(chunk) => Some((Ok(chunk), Some(body))),
                    Err(e) => Some((
                        Err(StorageError::S3(format!(
                            "{what}: {}",
                            DisplayErrorContext(&e)
                        ))),
                        None,
                    )),
                }
            }
        });
        Ok(Some(ObjectBody { meta, stream }))
    }

    pub async fn delete(&self, key: &ObjectKey) -> Result<(), StorageError> {
        let result = self
            .client
            .delete_object()
            .bucket(self.bucket())
            .key(key.as_str())
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // S3 answers 204 for a missing key; some compatibles say 404
            // NoSuchKey (but NoSuchBucket stays an error).
            Err(err) if err.code() == Some("NoSuchKey") => Ok(()),
            Err(err) => Err(s3_err("deleting", key, &err)),
        }
    }

    /// HeadBucket: the bucket exists and these credentials may use it.
    pub async fn ping(&self) -> Result<(), StorageError> {
        let request = self.client.head_bucket().bucket(self.bucket()).send();
        match tokio::time::timeout(PING_TIMEOUT, request).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(StorageError::S3(format!(
                "bucket {}: {}",
                self.bucket(),
                DisplayErrorContext(&err)
            ))),
            Err(_) => Err(StorageError::S3(format!(
                "bucket {}: no answer within {}s",
                self.bucket(),
                PING_TIMEOUT.as_secs()
            ))),
        }
    }
}

/// Our metadata from S3's; a missing `written-by` (an object some other
/// program wrote) reads as an empty writer, which matches no job.
fn object_meta(
    metadata: Option<&HashMap<String, String>>,
    content_type: Option<&str>,
    content_length: Option<i64>,
) -> ObjectMeta {
    let find = |name: &str| {
        metadata.and_then(|m| {
            m.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| decode_meta_value(v))
        })
    };
    ObjectMeta {
        written_by: find(META_WRITTEN_BY).unwrap_or_default(),
        provider: find(META_PROVIDER),
        content_type: content_type
            .unwrap_or("application/octet-stream")
            .to_string(),
        size: content_length
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
    }
}

/// Whether an SDK error is this HTTP status or this S3 error code (servers
/// differ in which of the two they get right).
fn is<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>, status: u16, code: &str) -> bool {
    err.raw_response().map(|r| r.status().as_u16()) == Some(status) || err.code() == Some(code)
}

fn s3_err<E, R>(what: &str, key: &ObjectKey, err: &SdkError<E, R>) -> StorageError
where
    E: std::error::Error + 'static,
    R: fmt::Debug,
{
    StorageError::S3(format!("{what} {key}: {}", DisplayErrorContext(err)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            S3Spec::parse("media").unwrap(),
            S3Spec {
                bucket: "media".into(),
                endpoint: None,
                region: DEFAULT_REGION.into()
            }
        );
        assert_eq!(
            S3Spec::parse("my-media?endpoint=http://127.0.0.1:9000/&region=auto").unwrap(),
            S3Spec {
                bucket: "my-media".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: "auto".into()
            }
        );
        assert_eq!(
            S3Spec::parse("b12?endpoint=https%3A%2F%2Fx.r2.cloudflarestorage.com")
                .unwrap()
                .endpoint
                .as_deref(),
            Some("https://x.r2.cloudflarestorage.com")
        );
        for bad in [
            "",
            "ab",
            "Upper",
            "-lead",
            "bucket?endpoint=ftp://x",
            "bucket?endpoint=127.0.0.1:9000",
            "bucket?regoin=x",
            "bucket?region=",
        ] {
            assert!(
                matches!(S3Spec::parse(bad), Err(StorageError::InvalidSpec(_))),
                "{bad}"
            );
        }
    }
}
