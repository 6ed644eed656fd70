//! The engine's private object store: where uploads and provider outputs
//! live. It owns object keys and their validation, the metadata every object
//! carries (who wrote it, which provider made it), put-if-absent (rule 8: an
//! existing output is never overwritten), streamed reads, and choosing a
//! backend from `TOLLGATE_STORAGE`: a local folder ([`fs`]) or an
//! S3-compatible bucket ([`s3`]). Media is private: nothing here makes URLs;
//! bytes leave only through the engine, after its own access checks.

pub mod fs;
pub mod s3;

use bytes::Bytes;
use futures_core::Stream;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Longest key, in bytes. Well under S3's 1024 and leaves room in a folder path.
pub const MAX_KEY_LEN: usize = 512;

/// A validated object key: 1..=512 bytes of `[A-Za-z0-9/_.-]`, no leading
/// or trailing '/', no "..", no "//", and no "." segment (a folder would
/// collapse `a/./b` into `a/b`, and some servers normalise it too, so two
/// keys would name one object).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(String);

impl ObjectKey {
    pub fn parse(s: &str) -> Result<ObjectKey, StorageError> {
        let bad = |why: &str| Err(StorageError::InvalidKey(format!("{}: {why}", shorten(s))));
        if s.is_empty() {
            return bad("empty");
        }
        if s.len() > MAX_KEY_LEN {
            return bad(&format!("longer than {MAX_KEY_LEN} bytes"));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '.' | '-')))
        {
            return bad(&format!("{c:?} is not allowed (only A-Z a-z 0-9 / _ . -)"));
        }
        if s.starts_with('/') || s.ends_with('/') {
            return bad("starts or ends with '/'");
        }
        if s.contains("..") {
            return bad("contains \"..\"");
        }
        if s.contains("//") {
            return bad("contains \"//\"");
        }
        if s.split('/').any(|segment| segment == ".") {
            return bad("has a \".\" segment");
        }
        Ok(ObjectKey(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A bad key is echoed in errors; a huge one is cut so logs stay readable.
fn shorten(s: &str) -> String {
    if s.len() <= 80 {
        format!("{s:?}")
    } else {
        let cut = (0..=80).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
        format!("{:?}… ({} bytes)", &s[..cut], s.len())
    }
}

/// What a writer says about an object; stored as its metadata (S3 user
/// metadata `written-by` and `provider`, the content type as Content-Type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewObjectMeta {
    /// Who wrote it, e.g. the job id; put-if-absent losers compare this.
    pub written_by: String,
    /// The provider that produced it, when a provider did.
    pub provider: Option<String>,
    pub content_type: String,
}

/// An existing object's metadata. An object that some other program put in
/// the bucket, without our metadata, has an empty `written_by`: it was not
/// written by anyone the caller knows, so it is never mistaken for its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    pub written_by: String,
    pub provider: Option<String>,
    pub content_type: String,
    pub size: u64,
}

/// The answer of [`ObjectStore::put_if_absent`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// This call created the object.
    Created,
    /// The key was taken; this is the existing object's metadata (the caller
    /// decides whether `written_by` is itself, e.g. a retried put that had
    /// in fact succeeded). The existing bytes are untouched.
    Exists(ObjectMeta),
}

/// An object's bytes as they arrive, never read whole into memory.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, StorageError>> + Send>>;

/// An object being read: its metadata, then its bytes as a stream.
pub struct ObjectBody {
    pub meta: ObjectMeta,
    pub stream: BodyStream,
}

impl ObjectBody {
    /// Reads the whole body into memory: for small objects and tests only;
    /// serve media by forwarding `stream`.
    pub async fn bytes(mut self) -> Result<Bytes, StorageError> {
        // The size is what the store claims; it only sizes a first guess.
        let guess = usize::try_from(self.meta.size.min(16 << 20)).unwrap_or(0);
        let mut out = Vec::with_capacity(guess);
        while let Some(chunk) = std::future::poll_fn(|cx| self.stream.as_mut().poll_next(cx)).await
        {
            out.extend_from_slice(&chunk?);
        }
        Ok(Bytes::from(out))
    }
}

impl fmt::Debug for ObjectBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectBody")
            .field("meta", &self.meta)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("invalid object key {0}")]
    InvalidKey(String),
    /// A bad `TOLLGATE_STORAGE` (or missing S3 credentials).
    #[error("TOLLGATE_STORAGE: {0}")]
    InvalidSpec(String),
    #[error("object store (folder): {0}")]
    Io(String),
    #[error("object store (S3): {0}")]
    S3(String),
}

/// The object store, on whichever backend `TOLLGATE_STORAGE` names.
/// Cloning is cheap and shares the backend.
#[derive(Clone, Debug)]
pub enum ObjectStore {
    Fs(fs::FsStore),
    S3(s3::S3Store),
}

/// How a folder store makes the files it writes durable
/// (`TOLLGATE_STORAGE_SYNC`; see `fs::FileSyncs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileSync {
    /// One `syncfs` covers the files written meanwhile (Linux; elsewhere
    /// each file is fsynced).
    #[default]
    Group,
    /// One fsync per file.
    File,
}

impl ObjectStore {
    /// A store with folder files synced in groups; see [`ObjectStore::open_with`].
    pub async fn open(spec: &str) -> Result<ObjectStore, StorageError> {
        ObjectStore::open_with(spec, FileSync::default()).await
    }

    /// `spec` is `TOLLGATE_STORAGE`: a folder path (created if missing), or
    /// `s3://BUCKET?endpoint=URL&region=R` (region defaults to `us-east-1`;
    /// without an endpoint it is AWS itself; a custom endpoint is addressed
    /// path-style). S3 credentials come from `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN` when set).
    ///
    /// Opening an S3 store does not contact it; call [`ObjectStore::ping`]
    /// to find out whether the bucket is reachable.
    pub async fn open_with(spec: &str, sync: FileSync) -> Result<ObjectStore, StorageError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(StorageError::InvalidSpec(
                "empty; give a folder or s3://BUCKET?endpoint=URL&region=R".into(),
            ));
        }
        if let Some(rest) = spec.strip_prefix("s3://") {
            let spec = s3::S3Spec::parse(rest)?;
            let credentials = s3::credentials_from_env()?;
            Ok(ObjectStore::S3(s3::S3Store::new(spec, credentials)))
        } else if spec.contains("://") {
            Err(StorageError::InvalidSpec(format!(
                "{spec:?}: only folders and s3:// are supported"
            )))
        } else {
            Ok(ObjectStore::Fs(fs::FsStore::open(spec, sync).await?))
        }
    }

    /// Stores `bytes` at `key` unless something is already there; atomic
    /// against concurrent writers on every backend (exactly one `Created`).
    pub async fn put_if_absent(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        meta: &NewObjectMeta,
    ) -> Result<PutOutcome, StorageError> {
        match self {
            ObjectStore::Fs(s) => Box::pin(s.put_if_absent(key, bytes, meta)).await,
            ObjectStore::S3(s) => Box::pin(s.put_if_absent(key, bytes, meta)).await,
        }
    }

    pub async fn head(&self, key: &ObjectKey) -> Result<Option<ObjectMeta>, StorageError> {
        match self {
            ObjectStore::Fs(s) => Box::pin(s.head(key)).await,
            ObjectStore::S3(s) => Box::pin(s.head(key)).await,
        }
    }

    /// The object's metadata and a stream of its bytes, or `None`.
    pub async fn get(&self, key: &ObjectKey) -> Result<Option<ObjectBody>, StorageError> {
        match self {
            ObjectStore::Fs(s) => Box::pin(s.get(key)).await,
            ObjectStore::S3(s) => Box::pin(s.get(key)).await,
        }
    }

    /// The object's bytes, whole, or `None`: for the engine's own reading
    /// of photos and outputs. From a folder it is one blocking read, not a
    /// stream of them.
    pub async fn read(&self, key: &ObjectKey) -> Result<Option<Bytes>, StorageError> {
        match self {
            ObjectStore::Fs(s) => Box::pin(s.read(key)).await,
            ObjectStore::S3(s) => match Box::pin(s.get(key)).await? {
                Some(body) => Ok(Some(body.bytes().await?)),
                None => Ok(None),
            },
        }
    }

    /// Removes the object; removing a missing key is not an error.
    pub async fn delete(&self, key: &ObjectKey) -> Result<(), StorageError> {
        match self {
            ObjectStore::Fs(s) => Box::pin(s.delete(key)).await,
            ObjectStore::S3(s) => Box::pin(s.delete(key)).await,
        }
    }

    /// For readiness: the folder is writable, or the bucket is reachable
    /// with these credentials.
    pub async fn ping(&self) -> Result<(), StorageError> {
        match self {
            ObjectStore::Fs(s) => Box::pin(s.ping()).await,
            ObjectStore::S3(s) => Box::pin(s.ping()).await,
        }
    }
}

/// A stream that calls `next(state)` for each item until it says `None`:
/// how both backends turn "read the next chunk" into a [`BodyStream`]
/// without another dependency.
pub(crate) fn unfold<S, F, Fut>(state: S, next: F) -> BodyStream
where
    S: Send + 'static,
    F: FnMut(S) -> Fut + Send + 'static,
    Fut: Future<Output = Option<(Result<Bytes, StorageError>, S)>> + Send + 'static,
{
    Box::pin(Unfold {
        state: Some(state),
        next,
        pending: None,
    })
}

type Pending<S> = Pin<Box<dyn Future<Output = Option<(Result<Bytes, StorageError>, S)>> + Send>>;

struct Unfold<S, F> {
    state: Option<S>,
    next: F,
    pending: Option<Pending<S>>,
}

// The state and the closure are only ever moved, never pinned in place (the
// future that borrows nothing but owns the state is boxed), so moving the
// whole adapter is fine whatever they are.
impl<S, F> Unpin for Unfold<S, F> {}

impl<S, F, Fut> Stream for Unfold<S, F>
where
    S: Send + 'static,
    F: FnMut(S) -> Fut,
    Fut: Future<Output = Option<(Result<Bytes, StorageError>, S)>> + Send + 'static,
{
    type Item = Result<Bytes, StorageError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.pending.is_none() {
            match this.state.take() {
                Some(state) => this.pending = Some(Box::pin((this.next)(state))),
                None => return Poll::Ready(None),
            }
        }
        let Some(pending) = this.pending.as_mut() else {
            return Poll::Ready(None);
        };
        match pending.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(out) => {
                this.pending = None;
                Poll::Ready(out.map(|(item, state)| {
                    this.state = Some(state);
                    item
                }))
            }
        }
    }
}

/// S3 user metadata travels as HTTP header values, which must be visible
/// ASCII; anything else (and '%') is percent-encoded, and decoded on the way
/// back, so both backends return exactly what was written.
pub(crate) fn encode_meta_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`encode_meta_value`]; a value it did not write is
/// returned as it is, as far as it decodes.
pub(crate) fn decode_meta_value(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_validated() {
        for good in ["a", "jobs/123/out.png", "A-b_c.d/e", ".hidden", "a.b.c"] {
            assert!(ObjectKey::parse(good).is_ok(), "{good}");
        }
        let long = "a".repeat(MAX_KEY_LEN + 1);
        for bad in [
            "", "/abs", "../x", "a/../b", "a..b", "a//b", "a/", "./a", "a/./b", "a b", "é", "a\\b",
            &long,
        ] {
            assert!(
                matches!(ObjectKey::parse(bad), Err(StorageError::InvalidKey(_))),
                "{bad}"
            );
        }
        assert!(ObjectKey::parse(&"a".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn meta_values_round_trip() {
        for s in ["job:123", "", "50% off", "naïve ünïcode", "a\nb", "%41"] {
            let encoded = encode_meta_value(s);
            assert!(encoded.bytes().all(|b| b.is_ascii_graphic()), "{encoded}");
            assert_eq!(decode_meta_value(&encoded), s);
        }
        assert_eq!(decode_meta_value("100%"), "100%");
    }
}
