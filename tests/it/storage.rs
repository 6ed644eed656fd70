//! The object store suite: every behaviour on the folder backend and on a
//! real S3-compatible server (SeaweedFS, started by `scripts/with-s3` or
//! `scripts/test`). Each test gets its own folder or bucket. Races are real:
//! many tasks, one barrier, one key.
//!
//! S3 tests need `TOLLGATE_TEST_S3_ENDPOINT`, `AWS_ACCESS_KEY_ID` and
//! `AWS_SECRET_ACCESS_KEY`; without them they fail, they never skip.

use bytes::Bytes;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Barrier;
use tollgate::storage::{
    NewObjectMeta, ObjectKey, ObjectMeta, ObjectStore, PutOutcome, StorageError,
};

const S3_ENDPOINT_VAR: &str = "TOLLGATE_TEST_S3_ENDPOINT";

/// Declares each listed `async fn name(t: TestStore)` as two tests,
/// `fs::name` and `s3::name`.
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod fs {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(super::TestStore::fs().await).await;
                }
            )*
        }
        mod s3 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(super::TestStore::s3().await).await;
                }
            )*
        }
    };
}

both_stores!(
    put_then_head_and_get_round_trip,
    second_writer_is_refused_and_sees_the_first,
    racing_writers_make_exactly_one_object,
    missing_keys_are_none,
    delete_removes_and_frees_the_key,
    invalid_keys_are_rejected_and_long_valid_ones_work,
    get_streams_a_large_object_intact,
    ping_answers,
);

struct TestStore {
    store: ObjectStore,
    /// How many writers race for one key: SeaweedFS is slow with racing
    /// conditional writes, so S3 gets a few.
    racers: usize,
    dir: Option<PathBuf>,
}

impl TestStore {
    async fn fs() -> TestStore {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-storage-test-{}",
            uuid::Uuid::new_v4().simple()
        ));
        // `open` creates the folder itself.
        let store = ObjectStore::open(dir.join("objects").to_str().unwrap())
            .await
            .expect("opening a folder store");
        TestStore {
            store,
            racers: 16,
            dir: Some(dir),
        }
    }

    async fn s3() -> TestStore {
        let bucket = format!("tg-test-{}", uuid::Uuid::new_v4().simple());
        let store = ObjectStore::open(&format!("s3://{bucket}?endpoint={}", s3_endpoint()))
            .await
            .expect("opening an S3 store (are AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set?)");
        let ObjectStore::S3(s3) = &store else {
            panic!("an s3:// spec opened {store:?}");
        };
        s3.client()
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("creating the test bucket");
        TestStore {
            store,
            racers: 4,
            dir: None,
        }
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn s3_endpoint() -> String {
    std::env::var(S3_ENDPOINT_VAR).unwrap_or_else(|_| {
        panic!(
            "{S3_ENDPOINT_VAR} is not set: run `scripts/with-s3 cargo test --test storage` \
             (or scripts/test), which starts a SeaweedFS S3 server for these tests"
        )
    })
}

/// A bucket name no test creates.
fn missing_bucket() -> String {
    format!("tg-missing-{}", uuid::Uuid::new_v4().simple())
}

fn key(s: &str) -> ObjectKey {
    ObjectKey::parse(s).expect("a valid key")
}

fn meta(written_by: &str, provider: Option<&str>, content_type: &str) -> NewObjectMeta {
    NewObjectMeta {
        written_by: written_by.into(),
        provider: provider.map(Into::into),
        content_type: content_type.into(),
    }
}

async fn read_all(store: &ObjectStore, k: &ObjectKey) -> (ObjectMeta, Bytes) {
    let body = store.get(k).await.expect("get").expect("the object exists");
    let meta = body.meta.clone();
    (meta, body.bytes().await.expect("reading the body"))
}

async fn put_then_head_and_get_round_trip(t: TestStore) {
    let s = &t.store;
    let k = key("jobs/0192/out.png");
    let written = meta("job:0192", Some("local"), "image/png");
    let outcome = s
        .put_if_absent(&k, Bytes::from_static(b"\x89PNG fake"), &written)
        .await
        .unwrap();
    assert_eq!(outcome, PutOutcome::Created);

    let expected = ObjectMeta {
        written_by: "job:0192".into(),
        provider: Some("local".into()),
        content_type: "image/png".into(),
        size: 9,
    };
    assert_eq!(s.head(&k).await.unwrap(), Some(expected.clone()));
    let (got_meta, got) = read_all(s, &k).await;
    assert_eq!(got_meta, expected);
    assert_eq!(&got[..], b"\x89PNG fake");
    // Read whole, in one go (the engine's own reading): the same bytes.
    assert_eq!(
        s.read(&k).await.unwrap().as_deref(),
        Some(&b"\x89PNG fake"[..])
    );
    assert_eq!(s.read(&key("jobs/none/out.png")).await.unwrap(), None);

    // No provider stays no provider; any writer text survives the trip
    // (S3 metadata is an HTTP header, so it is encoded on the way).
    let k2 = key("uploads/a.b-c_d");
    let odd = meta("upload by Zoë 50% ✓", None, "application/octet-stream");
    assert_eq!(
        s.put_if_absent(&k2, Bytes::new(), &odd).await.unwrap(),
        PutOutcome::Created
    );
    let head = s.head(&k2).await.unwrap().expect("the empty object exists");
    assert_eq!(head.written_by, "upload by Zoë 50% ✓");
    assert_eq!(head.provider, None);
    assert_eq!(head.size, 0);
    let (_, empty) = read_all(s, &k2).await;
    assert!(empty.is_empty());

    // A key and a longer key under it are two objects, on both backends.
    let k3 = key("jobs/0192/out.png/thumb");
    assert_eq!(
        s.put_if_absent(&k3, Bytes::from_static(b"thumb"), &written)
            .await
            .unwrap(),
        PutOutcome::Created
    );
    assert_eq!(&read_all(s, &k).await.1[..], b"\x89PNG fake");
    assert_eq!(&read_all(s, &k3).await.1[..], b"thumb");
}

async fn second_writer_is_refused_and_sees_the_first(t: TestStore) {
    let s = &t.store;
    let k = key("outputs/job-1.png");
    let first = meta("job-1", Some("fal"), "image/png");
    let second = meta("job-2", Some("replicate"), "image/webp");
    assert_eq!(
        s.put_if_absent(&k, Bytes::from_static(b"first bytes"), &first)
            .await
            .unwrap(),
        PutOutcome::Created
    );
    let outcome = s
        .put_if_absent(&k, Bytes::from_static(b"second, longer bytes"), &second)
        .await
        .unwrap();
    let PutOutcome::Exists(existing) = outcome else {
        panic!("the second put overwrote the first: {outcome:?}");
    };
    assert_eq!(
        existing,
        ObjectMeta {
            written_by: "job-1".into(),
            provider: Some("fal".into()),
            content_type: "image/png".into(),
            size: 11,
        }
    );
    let (now, bytes) = read_all(s, &k).await;
    assert_eq!(&bytes[..], b"first bytes");
    assert_eq!(now.written_by, "job-1");

    // The same writer retrying is told the same, and decides for itself.
    let again = s
        .put_if_absent(&k, Bytes::from_static(b"first bytes"), &first)
        .await
        .unwrap();
    assert!(matches!(again, PutOutcome::Exists(m) if m.written_by == "job-1"));
}

async fn racing_writers_make_exactly_one_object(t: TestStore) {
    let store = t.store.clone();
    let n = t.racers;
    let k = key("race/output.bin");
    // Racer i writes 1000 + i bytes of value i, so size and bytes say who.
    let body = |i: usize| Bytes::from(vec![i as u8; 1000 + i]);

    let race = async {
        let barrier = Arc::new(Barrier::new(n + 1));
        let done = Arc::new(AtomicBool::new(false));
        // A reader heads the key throughout: whenever it sees an object, its
        // metadata is whole and matches one writer's bytes.
        let watcher = {
            let (store, k, barrier, done) =
                (store.clone(), k.clone(), barrier.clone(), done.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let mut seen = 0;
                while !done.load(Ordering::SeqCst) {
                    if let Some(m) = store.head(&k).await.expect("head during the race") {
                        let i: usize = m
                            .written_by
                            .strip_prefix("racer-")
                            .and_then(|i| i.parse().ok())
                            .unwrap_or_else(|| panic!("half-written metadata: {m:?}"));
                        assert_eq!(m.size, 1000 + i as u64, "{m:?}");
                        assert_eq!(m.content_type, "application/octet-stream");
                        seen += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                seen
            })
        };
        let racers: Vec<_> = (0..n)
            .map(|i| {
                let (store, k, barrier) = (store.clone(), k.clone(), barrier.clone());
                let m = meta(&format!("racer-{i}"), None, "application/octet-stream");
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.put_if_absent(&k, body(i), &m).await
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for r in racers {
            outcomes.push(r.await.expect("racer task").expect("racing put"));
        }
        done.store(true, Ordering::SeqCst);
        watcher.await.expect("watcher task");
        outcomes
    };
    let outcomes = tokio::time::timeout(Duration::from_secs(120), race)
        .await
        .expect("the race finished within two minutes");

    let winners: Vec<usize> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| **o == PutOutcome::Created)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one Created: {outcomes:?}");
    let winner = winners[0];
    let losers: HashSet<String> = outcomes
        .iter()
        .filter_map(|o| match o {
            PutOutcome::Exists(m) => Some(m.written_by.clone()),
            PutOutcome::Created => None,
        })
        .collect();
    assert_eq!(losers.len(), if n > 1 { 1 } else { 0 }, "{outcomes:?}");
    assert!(losers.iter().all(|w| *w == format!("racer-{winner}")));

    let (m, bytes) = read_all(&t.store, &k).await;
    assert_eq!(m.written_by, format!("racer-{winner}"));
    assert_eq!(bytes, body(winner));
}

async fn missing_keys_are_none(t: TestStore) {
    let s = &t.store;
    let k = key("nothing/here.png");
    assert_eq!(s.head(&k).await.unwrap(), None);
    assert!(s.get(&k).await.unwrap().is_none());
    // Under an existing object's key, as if it were a folder: still nothing.
    s.put_if_absent(
        &key("file"),
        Bytes::from_static(b"x"),
        &meta("a", None, "text/plain"),
    )
    .await
    .unwrap();
    assert_eq!(s.head(&key("file/child")).await.unwrap(), None);
    assert!(s.get(&key("file/child")).await.unwrap().is_none());
}

async fn delete_removes_and_frees_the_key(t: TestStore) {
    let s = &t.store;
    let k = key("tmp/delete-me.txt");
    s.put_if_absent(
        &k,
        Bytes::from_static(b"old"),
        &meta("job-a", None, "text/plain"),
    )
    .await
    .unwrap();
    s.delete(&k).await.unwrap();
    assert_eq!(s.head(&k).await.unwrap(), None);
    assert!(s.get(&k).await.unwrap().is_none());
    // Deleting what is not there is fine.
    s.delete(&k).await.unwrap();
    s.delete(&key("never/was")).await.unwrap();
    // The key is free again.
    assert_eq!(
        s.put_if_absent(
            &k,
            Bytes::from_static(b"new"),
            &meta("job-b", None, "text/plain")
        )
        .await
        .unwrap(),
        PutOutcome::Created
    );
    let (m, bytes) = read_all(s, &k).await;
    assert_eq!((m.written_by.as_str(), &bytes[..]), ("job-b", &b"new"[..]));
}

async fn invalid_keys_are_rejected_and_long_valid_ones_work(t: TestStore) {
    let too_long = "a".repeat(513);
    for bad in [
        "../x", "/abs", "", &too_long, "a/../b", "a//b", "a/", "a/./b", "a b", "ü", "a?b",
    ] {
        assert!(
            matches!(ObjectKey::parse(bad), Err(StorageError::InvalidKey(_))),
            "{bad:?} was accepted"
        );
    }
    // 512 bytes, in segments short enough for any file system's names.
    let long = format!("{}{}", "abcdefghi/".repeat(51), "xy");
    assert_eq!(long.len(), 512);
    let k = key(&long);
    assert_eq!(k.as_str(), long);
    let s = &t.store;
    assert_eq!(
        s.put_if_absent(
            &k,
            Bytes::from_static(b"deep"),
            &meta("job", None, "text/plain")
        )
        .await
        .unwrap(),
        PutOutcome::Created
    );
    assert_eq!(s.head(&k).await.unwrap().map(|m| m.size), Some(4));
}

async fn get_streams_a_large_object_intact(t: TestStore) {
    let s = &t.store;
    let k = key("videos/big.mp4");
    let size = 5 * 1024 * 1024;
    // Not a repeating byte, so a misplaced chunk would show.
    let data: Bytes = (0..size)
        .map(|i| (i * 31 % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    s.put_if_absent(&k, data.clone(), &meta("job-v", Some("kling"), "video/mp4"))
        .await
        .unwrap();

    let mut body = s.get(&k).await.unwrap().expect("the object exists");
    assert_eq!(body.meta.size, size as u64);
    assert_eq!(body.meta.content_type, "video/mp4");
    let (mut chunks, mut offset) = (0, 0usize);
    while let Some(chunk) = std::future::poll_fn(|cx| body.stream.as_mut().poll_next(cx)).await {
        let chunk = chunk.expect("a chunk");
        assert_eq!(
            chunk[..],
            data[offset..offset + chunk.len()],
            "chunk at {offset}"
        );
        offset += chunk.len();
        chunks += 1;
    }
    assert_eq!(offset, size);
    assert!(chunks > 1, "the body came as one piece, not streamed");
    assert_eq!(s.read(&k).await.unwrap(), Some(data), "read whole, intact");
}

async fn ping_answers(t: TestStore) {
    t.store.ping().await.expect("ping");
}

// Backend-specific behaviour.

#[tokio::test]
async fn bad_specs_are_refused() {
    for bad in [
        "",
        "  ",
        "s3://",
        "s3://Bad_Bucket",
        "ftp://host/x",
        "s3://bucket?bogus=1",
    ] {
        let err = ObjectStore::open(bad).await.expect_err(bad);
        assert!(
            matches!(err, StorageError::InvalidSpec(_)),
            "{bad:?}: {err}"
        );
    }
}

#[tokio::test]
async fn s3_ping_fails_for_a_missing_bucket() {
    let store = ObjectStore::open(&format!(
        "s3://{}?endpoint={}",
        missing_bucket(),
        s3_endpoint()
    ))
    .await
    .expect("opening does not contact the server");
    let err = store
        .ping()
        .await
        .expect_err("a missing bucket is not ready");
    assert!(matches!(err, StorageError::S3(_)), "{err}");
}

#[tokio::test]
async fn s3_errors_name_no_secret() {
    let store = ObjectStore::open(&format!(
        "s3://{}?endpoint={}",
        missing_bucket(),
        s3_endpoint()
    ))
    .await
    .unwrap();
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").expect("AWS_SECRET_ACCESS_KEY");
    let err = store
        .put_if_absent(
            &key("k"),
            Bytes::from_static(b"x"),
            &meta("j", None, "text/plain"),
        )
        .await
        .expect_err("no such bucket");
    let shown = format!("{err} {err:?} {store:?}");
    assert!(!shown.contains(&secret), "a secret leaked: {shown}");
}

#[tokio::test]
async fn fs_store_is_private_and_leaves_no_temporary_files() {
    let t = TestStore::fs().await;
    let ObjectStore::Fs(fs) = &t.store else {
        unreachable!()
    };
    let k = key("a/b/c.png");
    t.store
        .put_if_absent(&k, Bytes::from_static(b"x"), &meta("j", None, "image/png"))
        .await
        .unwrap();
    t.store
        .put_if_absent(&k, Bytes::from_static(b"y"), &meta("k", None, "image/png"))
        .await
        .unwrap();
    let tmp: Vec<_> = std::fs::read_dir(fs.root().join("~tmp")).unwrap().collect();
    assert!(tmp.is_empty(), "temporary files left: {tmp:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let file = std::fs::metadata(fs.root().join("a/b/c.png~obj")).unwrap();
        assert_eq!(file.permissions().mode() & 0o777, 0o600);
    }
}

/// A put makes the folders it needs only when they are missing (making an
/// existing one still takes its parent's lock): one removed between puts,
/// the temporary folder included, is made again, private to this user.
#[tokio::test]
async fn fs_store_makes_missing_folders_again() {
    let t = TestStore::fs().await;
    let ObjectStore::Fs(fs) = &t.store else {
        unreachable!()
    };
    let put = |k: &'static str| {
        let store = &t.store;
        async move {
            store
                .put_if_absent(
                    &key(k),
                    Bytes::from_static(b"x"),
                    &meta("j", None, "image/png"),
                )
                .await
                .unwrap()
        }
    };
    assert!(matches!(put("outputs/one").await, PutOutcome::Created));
    std::fs::remove_dir_all(fs.root().join("~tmp")).unwrap();
    std::fs::remove_dir_all(fs.root().join("outputs")).unwrap();
    assert!(matches!(put("outputs/two").await, PutOutcome::Created));
    assert!(matches!(put("deep/er/three").await, PutOutcome::Created));
    assert_eq!(read_all(&t.store, &key("outputs/two")).await.1, "x");
    assert_eq!(read_all(&t.store, &key("deep/er/three")).await.1, "x");
    assert!(t.store.head(&key("outputs/one")).await.unwrap().is_none());
    let tmp: Vec<_> = std::fs::read_dir(fs.root().join("~tmp")).unwrap().collect();
    assert!(tmp.is_empty(), "temporary files left: {tmp:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for dir in ["~tmp", "outputs", "deep", "deep/er"] {
            let m = std::fs::metadata(fs.root().join(dir)).unwrap();
            assert_eq!(m.permissions().mode() & 0o777, 0o700, "{dir}");
        }
    }
}
