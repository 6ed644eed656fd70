//! The local-folder backend of the object store (the default,
//! `TOLLGATE_STORAGE=data/objects`).
//!
//! Layout under the root folder:
//! - `KEY~obj`: one file per object, e.g. `jobs/7/out.png~obj`. The suffix
//!   holds a character keys cannot contain, so a key's file never collides
//!   with the folder of a longer key (`a` and `a/b` both work, as on S3).
//!   The file is one JSON line of metadata, then the object's bytes: the
//!   metadata becomes visible in the same instant as the object, so `head`
//!   never sees one without the other.
//! - `~tmp/`: files being written. A put writes a temporary file there,
//!   makes it durable (with the other puts' files: see `FileSyncs`), then
//!   hard-links it to the final name, which fails if that name
//!   exists: the link is the atomic put-if-absent, across threads, processes
//!   and nodes sharing the folder. The folder must therefore support hard
//!   links (any local Linux file system does). On Linux the temporary file
//!   has no name at all (`O_TMPFILE`) where the file system allows it, so
//!   nothing is created in or removed from `~tmp/` and a crash leaves
//!   nothing there. The folder a put links into is synced once for all the
//!   puts that linked into it meanwhile.
//!
//! Everything blocking runs in `spawn_blocking`; reads stream through
//! `tokio::fs`.

use super::{
    unfold, BodyStream, FileSync, NewObjectMeta, ObjectBody, ObjectKey, ObjectMeta, PutOutcome,
    StorageError,
};
use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::AsyncReadExt;

/// Appended to every object's file name; '~' cannot appear in a key.
const SUFFIX: &str = "~obj";
/// Where puts write before they link; not a valid key segment either.
const TMP_DIR: &str = "~tmp";
/// Longest file name most file systems take (ext4, xfs, btrfs).
const MAX_NAME: usize = 255;
/// The metadata line is small; a longer one means a damaged file.
const MAX_HEADER: u64 = 64 * 1024;
/// Bytes per chunk when streaming a file out.
const CHUNK: usize = 64 * 1024;
/// Temporary files older than this were left by a crash; `open` removes
/// them. Long enough that no live put (on any node) is that slow.
const STALE_TMP: Duration = Duration::from_secs(60 * 60);

/// A store in a local folder. Cloning shares the root.
#[derive(Clone, Debug)]
pub struct FsStore {
    root: Arc<Path>,
    folders: Arc<FolderSyncs>,
    files: Arc<FileSyncs>,
    /// Whether puts write unnamed files (see `unnamed_files_work`).
    unnamed: bool,
}

/// Group fsync of folders: the puts that linked into a folder while one
/// fsync of it ran share the next one, instead of each syncing it again
/// (a folder's fsync costs about as much as the object's own). A put
/// returns only once an fsync that began after its link has finished.
#[derive(Debug, Default)]
struct FolderSyncs {
    gates: std::sync::Mutex<std::collections::HashMap<PathBuf, Arc<SyncGroup>>>,
}

/// Callers that need one sync each share it: whoever arrives while no sync
/// runs starts one that covers everyone counted so far; whoever arrives
/// while one runs waits for the next.
#[derive(Debug, Default)]
struct SyncGroup {
    state: std::sync::Mutex<SyncState>,
    finished: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct SyncState {
    /// Callers counted so far (each one's ticket).
    joined: u64,
    /// Every ticket up to this count is covered by a finished sync.
    synced: u64,
    /// Whether a sync is running right now.
    running: bool,
    /// Syncs made, counted (for the tests).
    runs: u64,
    /// Every ticket up to this one may have been covered by a failed sync.
    failed_through: u64,
}

impl SyncGroup {
    /// Returns once a `sync` that began after this call has finished:
    /// this call's ticket, what was covered then, and whether the sync
    /// covering it succeeded.
    fn join(&self, sync: impl Fn() -> bool) -> (u64, u64, bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.joined += 1;
        let ticket = s.joined;
        while s.synced < ticket {
            if s.running {
                s = self.finished.wait(s).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // This caller syncs for itself and for everyone counted so far.
            s.running = true;
            let covers = s.joined;
            drop(s);
            let ok = sync();
            s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.running = false;
            s.runs += 1;
            s.synced = s.synced.max(covers);
            if !ok {
                s.failed_through = s.failed_through.max(covers);
            }
            self.finished.notify_all();
        }
        (ticket, s.synced, ticket > s.failed_through)
    }
}

impl FolderSyncs {
    /// Makes the folder's entries durable, covering every link made before
    /// this call. Failures are not reported: the link already happened.
    /// Returns this call's place in the count and what was durable then.
    fn sync(&self, folder: &Path) -> (u64, u64) {
        let gate = {
            let mut gates = self.gates.lock().unwrap_or_else(|e| e.into_inner());
            gates.entry(folder.to_path_buf()).or_default().clone()
        };
        // A failed sync is not retried by the puts it would have covered
        // (as before, each put's own sync was best effort).
        let (ticket, synced, _) =
            gate.join(|| File::open(folder).and_then(|dir| dir.sync_all()).is_ok());
        (ticket, synced)
    }
}

/// Group durability of the files puts write. An fsync per file costs a
/// data write, an inode-table write and a cache flush each, and with many
/// puts at once they queue behind one another; on Linux one `syncfs` of
/// the store's file system writes what every put meanwhile wrote (inodes
/// sharing their blocks) with one flush, and the puts that wrote before it
/// began share it. A put whose group sync fails fsyncs its own file, so
/// its error is its own. `syncfs` also writes whatever else is pending on
/// that file system: a store on a file system busy with other writers can
/// turn this off (`TOLLGATE_STORAGE_SYNC=file`).
#[derive(Debug)]
struct FileSyncs {
    /// The store's root folder, open since the store opened, so its
    /// `syncfs` reports every write error on the file system since then.
    /// `None`: each file is fsynced on its own.
    fs: Option<File>,
    group: SyncGroup,
}

impl FileSyncs {
    fn per_file() -> FileSyncs {
        FileSyncs {
            fs: None,
            group: SyncGroup::default(),
        }
    }

    fn for_root(root: &Path, sync: FileSync) -> FileSyncs {
        let grouped = sync == FileSync::Group && cfg!(target_os = "linux");
        FileSyncs {
            fs: grouped.then(|| File::open(root).ok()).flatten(),
            group: SyncGroup::default(),
        }
    }

    /// Returns once `file`'s bytes and metadata are durable.
    fn sync(&self, file: &File) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(fs) = &self.fs {
            let (_, _, ok) = self.group.join(|| rustix::fs::syncfs(fs).is_ok());
            if ok {
                return Ok(());
            }
        }
        file.sync_all()
    }
}

/// The first line of every object file.
#[derive(Serialize, Deserialize)]
struct Header {
    v: u32,
    key: String,
    written_by: String,
    provider: Option<String>,
    content_type: String,
    size: u64,
}

impl FsStore {
    /// Opens (creating it, private to this user, if missing) the folder at
    /// `root`, and clears temporary files a crash left behind.
    pub async fn open(root: impl Into<PathBuf>, sync: FileSync) -> Result<FsStore, StorageError> {
        let root: PathBuf = root.into();
        let tmp = root.join(TMP_DIR);
        let unnamed = blocking(move || {
            create_private_dir_all(&tmp)
                .map_err(|e| io_err(&format!("creating {}", tmp.display()), e))?;
            sweep_stale_temps(&tmp);
            Ok(unnamed_files_work(&tmp))
        })
        .await?;
        Ok(FsStore {
            files: Arc::new(FileSyncs::for_root(&root, sync)),
            root: Arc::from(root.as_path()),
            folders: Arc::default(),
            unnamed,
        })
    }

    /// The folder this store lives in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub async fn put_if_absent(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        meta: &NewObjectMeta,
    ) -> Result<PutOutcome, StorageError> {
        let path = self.object_path(key)?;
        let tmp = self
            .root
            .join(TMP_DIR)
            .join(uuid::Uuid::new_v4().simple().to_string());
        let header = Header {
            v: 1,
            key: key.as_str().to_string(),
            written_by: meta.written_by.clone(),
            provider: meta.provider.clone(),
            content_type: meta.content_type.clone(),
            size: bytes.len() as u64,
        };
        let (folders, files, unnamed) = (self.folders.clone(), self.files.clone(), self.unnamed);
        blocking(move || put_blocking(&path, &tmp, &header, &bytes, (&files, &folders), unnamed))
            .await
    }

    pub async fn head(&self, key: &ObjectKey) -> Result<Option<ObjectMeta>, StorageError> {
        let path = self.object_path(key)?;
        blocking(move || Ok(open_object(&path)?.map(|(_, meta, _)| meta))).await
    }

    pub async fn get(&self, key: &ObjectKey) -> Result<Option<ObjectBody>, StorageError> {
        let path = self.object_path(key)?;
        let opened = blocking(move || {
            let Some((mut file, meta, header_len)) = open_object(&path)? else {
                return Ok(None);
            };
            file.seek(SeekFrom::Start(header_len))
                .map_err(|e| io_err(&format!("reading {}", path.display()), e))?;
            Ok(Some((file, meta, path)))
        })
        .await?;
        let Some((file, meta, path)) = opened else {
            return Ok(None);
        };
        let stream = file_stream(tokio::fs::File::from_std(file), meta.size, path);
        Ok(Some(ObjectBody { meta, stream }))
    }

    pub async fn read(&self, key: &ObjectKey) -> Result<Option<Bytes>, StorageError> {
        let path = self.object_path(key)?;
        blocking(move || {
            let Some((mut file, meta, header_len)) = open_object(&path)? else {
                return Ok(None);
            };
            let reading = |e| io_err(&format!("reading {}", path.display()), e);
            file.seek(SeekFrom::Start(header_len)).map_err(reading)?;
            let mut out = Vec::with_capacity(usize::try_from(meta.size).unwrap_or(0));
            file.read_to_end(&mut out).map_err(reading)?;
            if out.len() as u64 != meta.size {
                return Err(StorageError::Io(format!(
                    "{} holds {} bytes, its metadata says {}",
                    path.display(),
                    out.len(),
                    meta.size
                )));
            }
            Ok(Some(Bytes::from(out)))
        })
        .await
    }

    pub async fn delete(&self, key: &ObjectKey) -> Result<(), StorageError> {
        let path = self.object_path(key)?;
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(io_err(&format!("deleting {}", path.display()), e)),
        }
    }

    /// Writes, syncs and removes a probe file in the temporary folder.
    pub async fn ping(&self) -> Result<(), StorageError> {
        let probe = self
            .root
            .join(TMP_DIR)
            .join(format!("ping-{}", uuid::Uuid::new_v4().simple()));
        blocking(move || {
            let result = (|| {
                if let Some(tmp_dir) = probe.parent() {
                    create_private_dir_all(tmp_dir)?;
                }
                let mut f = private_create_new(&probe)?;
                f.write_all(b"ping")?;
                f.sync_all()
            })();
            let _ = std::fs::remove_file(&probe);
            result.map_err(|e| io_err(&format!("writing {}", probe.display()), e))
        })
        .await
    }

    /// `ROOT/KEY~obj`. Every segment must fit in a file name; keys are valid
    /// already, so nothing here can climb out of the root.
    fn object_path(&self, key: &ObjectKey) -> Result<PathBuf, StorageError> {
        let name = format!("{}{SUFFIX}", key.as_str());
        if name.split('/').any(|segment| segment.len() > MAX_NAME) {
            return Err(StorageError::InvalidKey(format!(
                "{:?}: a segment longer than {} bytes does not fit in a file name",
                key.as_str(),
                MAX_NAME - SUFFIX.len()
            )));
        }
        Ok(self.root.join(name))
    }
}

fn put_blocking(
    path: &Path,
    tmp: &Path,
    header: &Header,
    bytes: &[u8],
    (files, folders): (&FileSyncs, &FolderSyncs),
    unnamed: bool,
) -> Result<PutOutcome, StorageError> {
    // Cheap early answer for the common "already there" case; the link
    // below is what decides a race.
    if let Some((_, meta, _)) = open_object(path)? {
        return Ok(PutOutcome::Exists(meta));
    }
    let mut line = serde_json::to_vec(header)
        .map_err(|e| StorageError::Io(format!("encoding metadata: {e}")))?;
    line.push(b'\n');

    let written = if unnamed {
        write_unnamed(tmp, &line, bytes, files)
    } else {
        write_named(tmp, &line, bytes, files)
    }
    .map_err(|e| {
        // An unnamed file has no path of its own: name its folder.
        let through = if unnamed {
            tmp.parent().unwrap_or(tmp)
        } else {
            tmp
        };
        let what = format!("writing {} through {}", path.display(), through.display());
        io_err(&what, e)
    })?;

    let parent = path
        .parent()
        .ok_or_else(|| StorageError::Io(format!("{} has no parent folder", path.display())))?;
    // A folder can vanish between creating it and linking into it (an
    // operator tidying up); a few tries cover that without looping forever.
    let mut tries = 0;
    loop {
        tries += 1;
        if tries > 1 {
            create_private_dir_all(parent)
                .map_err(|e| io_err(&format!("creating {}", parent.display()), e))?;
        }
        match written.link(path) {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return match open_object(path)? {
                    Some((_, meta, _)) => Ok(PutOutcome::Exists(meta)),
                    // Deleted between our link attempt and this read: the
                    // key is free again, so try to take it.
                    None if tries < 5 => continue,
                    None => Err(StorageError::Io(format!(
                        "{} keeps appearing and vanishing",
                        path.display()
                    ))),
                };
            }
            Err(e) if is_missing(&e) && tries < 5 => continue,
            Err(e) => return Err(io_err(&format!("linking {}", path.display()), e)),
        }
    }
    // The link is the commit; make the folder entry durable too (with the
    // other puts into it meanwhile). A failure here does not undo the put,
    // so it is not reported as one.
    folders.sync(parent);
    Ok(PutOutcome::Created)
}

/// Opens an object file and reads its metadata line. Returns the file (its
/// position somewhere after the header), the metadata and the header's
/// length, or `None` when there is no such object.
fn open_object(path: &Path) -> Result<Option<(File, ObjectMeta, u64)>, StorageError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if is_missing(&e) => return Ok(None),
        Err(e) => return Err(io_err(&format!("opening {}", path.display()), e)),
    };
    let damaged = |why: &str| StorageError::Io(format!("{} is damaged: {why}", path.display()));
    let file_len = file
        .metadata()
        .map_err(|e| io_err(&format!("reading {}", path.display()), e))?
        .len();
    let mut reader = BufReader::new(file).take(MAX_HEADER);
    let mut line = Vec::new();
    reader
        .read_until(b'\n', &mut line)
        .map_err(|e| io_err(&format!("reading {}", path.display()), e))?;
    if line.last() != Some(&b'\n') {
        return Err(damaged("no metadata line"));
    }
    let header: Header = serde_json::from_slice(&line[..line.len() - 1])
        .map_err(|e| damaged(&format!("metadata: {e}")))?;
    let header_len = line.len() as u64;
    if header.v != 1 {
        return Err(damaged(&format!("unknown format version {}", header.v)));
    }
    if header_len + header.size != file_len {
        return Err(damaged(&format!(
            "{} bytes of data, metadata says {}",
            file_len.saturating_sub(header_len),
            header.size
        )));
    }
    let meta = ObjectMeta {
        written_by: header.written_by,
        provider: header.provider,
        content_type: header.content_type,
        size: header.size,
    };
    Ok(Some((reader.into_inner().into_inner(), meta, header_len)))
}

/// Streams `remaining` bytes of `file` in chunks; a file that ends early is
/// an error, not a short object.
fn file_stream(file: tokio::fs::File, remaining: u64, path: PathBuf) -> BodyStream {
    // `None` once the stream has failed, so it ends after its one error.
    let state = Some((file, remaining, path));
    unfold(state, |state| async move {
        let (mut file, remaining, path) = state?;
        if remaining == 0 {
            return None;
        }
        let want = usize::try_from(remaining).map_or(CHUNK, |r| r.min(CHUNK));
        let mut buf = BytesMut::with_capacity(want);
        match (&mut file).take(want as u64).read_buf(&mut buf).await {
            Ok(0) => Some((
                Err(StorageError::Io(format!(
                    "{} ended {remaining} bytes early",
                    path.display()
                ))),
                None,
            )),
            Ok(n) => Some((Ok(buf.freeze()), Some((file, remaining - n as u64, path)))),
            Err(e) => Some((Err(io_err(&format!("reading {}", path.display()), e)), None)),
        }
    })
}

/// Best effort: a temporary file that cannot be removed now will be next
/// time.
fn sweep_stale_temps(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > STALE_TMP);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// An object's file, written and synced, waiting for its name.
enum Written<'a> {
    /// A temporary file in `~tmp`, removed when this is dropped.
    Named(RemoveOnDrop<'a>),
    /// A file without a name (Linux's `O_TMPFILE`): nothing to remove, no
    /// folder's lock taken while it was made, and nothing left by a crash.
    #[cfg(target_os = "linux")]
    Unnamed(File),
}

impl Written<'_> {
    /// Gives the file its name; fails if the name is taken.
    fn link(&self, to: &Path) -> io::Result<()> {
        match self {
            Written::Named(tmp) => std::fs::hard_link(tmp.0, to),
            #[cfg(target_os = "linux")]
            Written::Unnamed(file) => {
                use std::os::fd::AsRawFd;
                // The descriptor's /proc link names the unnamed inode;
                // following it needs no privilege (AT_EMPTY_PATH would).
                let source = format!("/proc/self/fd/{}", file.as_raw_fd());
                rustix::fs::linkat(
                    rustix::fs::CWD,
                    source.as_str(),
                    rustix::fs::CWD,
                    to,
                    rustix::fs::AtFlags::SYMLINK_FOLLOW,
                )
                .map_err(io::Error::from)
            }
        }
    }
}

/// The header line and the bytes, durable, in a file `create` makes in
/// `folder` (the folder made again if an operator removed it).
fn write_synced(
    folder: &Path,
    create: impl Fn() -> io::Result<File>,
    line: &[u8],
    bytes: &[u8],
    files: &FileSyncs,
) -> io::Result<File> {
    // Folders are made only when missing: making one that exists still
    // takes its parent's lock, which every put would contend for.
    let mut f = match create() {
        Err(e) if is_missing(&e) => {
            create_private_dir_all(folder)?;
            create()?
        }
        opened => opened?,
    };
    f.write_all(line)?;
    f.write_all(bytes)?;
    // Durable before it is visible: a crash must not leave a linked
    // object whose bytes never reached the disk.
    files.sync(&f)?;
    Ok(f)
}

/// The object's file as a temporary file named `tmp`.
fn write_named<'a>(
    tmp: &'a Path,
    line: &[u8],
    bytes: &[u8],
    files: &FileSyncs,
) -> io::Result<Written<'a>> {
    let cleanup = RemoveOnDrop(tmp);
    let folder = tmp.parent().unwrap_or(tmp);
    write_synced(folder, || private_create_new(tmp), line, bytes, files)?;
    Ok(Written::Named(cleanup))
}

/// The object's file without a name, in `tmp`'s folder.
#[cfg(target_os = "linux")]
fn write_unnamed<'a>(
    tmp: &'a Path,
    line: &[u8],
    bytes: &[u8],
    files: &FileSyncs,
) -> io::Result<Written<'a>> {
    let folder = tmp.parent().unwrap_or(tmp);
    let f = write_synced(folder, || create_unnamed(folder), line, bytes, files)?;
    Ok(Written::Unnamed(f))
}

#[cfg(not(target_os = "linux"))]
fn write_unnamed<'a>(
    tmp: &'a Path,
    line: &[u8],
    bytes: &[u8],
    files: &FileSyncs,
) -> io::Result<Written<'a>> {
    write_named(tmp, line, bytes, files)
}

/// A private file without a name in `folder`, for writing.
#[cfg(target_os = "linux")]
fn create_unnamed(folder: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        folder,
        OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    Ok(File::from(fd))
}

/// Whether this folder's file system makes and links unnamed files (Linux
/// with /proc, and a file system with `O_TMPFILE`: ext4, xfs, btrfs,
/// tmpfs). Tried once when the store opens; otherwise puts use named
/// temporary files.
#[cfg(target_os = "linux")]
fn unnamed_files_work(tmp_dir: &Path) -> bool {
    let probe = tmp_dir.join(format!("probe-{}", uuid::Uuid::new_v4().simple()));
    let linked =
        write_unnamed(&probe, b"", b"", &FileSyncs::per_file()).and_then(|w| w.link(&probe));
    let _ = std::fs::remove_file(&probe);
    linked.is_ok()
}

#[cfg(not(target_os = "linux"))]
fn unnamed_files_work(_tmp_dir: &Path) -> bool {
    false
}

struct RemoveOnDrop<'a>(&'a Path);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        // After a successful link the object lives on under its final name;
        // this only drops the temporary name.
        let _ = std::fs::remove_file(self.0);
    }
}

/// Media is private: files are readable by this user only.
fn private_create_new(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

fn create_private_dir_all(path: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(path)
}

fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

fn io_err(what: &str, e: io::Error) -> StorageError {
    StorageError::Io(format!("{what}: {e}"))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StorageError::Io(format!("a blocking file task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(syncs: &FolderSyncs, folder: &Path) -> (u64, u64, u64) {
        let gates = syncs.gates.lock().unwrap();
        let s = gates[folder].state.lock().unwrap();
        (s.joined, s.synced, s.runs)
    }

    fn put(root: &Path, key: &str, unnamed: bool, folders: &FolderSyncs) -> PutOutcome {
        put_with(
            root,
            key,
            unnamed,
            folders,
            &FileSyncs::for_root(root, FileSync::Group),
        )
    }

    fn put_with(
        root: &Path,
        key: &str,
        unnamed: bool,
        folders: &FolderSyncs,
        files: &FileSyncs,
    ) -> PutOutcome {
        let header = Header {
            v: 1,
            key: key.into(),
            written_by: "test".into(),
            provider: None,
            content_type: "image/png".into(),
            size: 5,
        };
        let tmp = root
            .join(TMP_DIR)
            .join(uuid::Uuid::new_v4().simple().to_string());
        let path = root.join(format!("{key}{SUFFIX}"));
        put_blocking(&path, &tmp, &header, b"bytes", (files, folders), unnamed).unwrap()
    }

    #[test]
    fn puts_with_named_and_unnamed_temporary_files_alike() {
        let root = std::env::temp_dir().join(format!("tg-put-{}", uuid::Uuid::new_v4()));
        let tmp = root.join(TMP_DIR);
        create_private_dir_all(&tmp).unwrap();
        // Linux's file systems here take unnamed files; elsewhere puts
        // always name them.
        assert_eq!(unnamed_files_work(&tmp), cfg!(target_os = "linux"));
        let folders = FolderSyncs::default();
        for unnamed in [false, true] {
            let key = format!("outputs/{unnamed}");
            assert!(matches!(
                put(&root, &key, unnamed, &folders),
                PutOutcome::Created
            ));
            // The second put of a key finds the first, whichever way.
            for again in [false, true] {
                match put(&root, &key, again, &folders) {
                    PutOutcome::Exists(meta) => assert_eq!(meta.written_by, "test"),
                    PutOutcome::Created => panic!("{key} was put twice"),
                }
            }
            let path = root.join(format!("{key}{SUFFIX}"));
            let (mut file, meta, header_len) = open_object(&path).unwrap().unwrap();
            assert_eq!((meta.size, meta.content_type.as_str()), (5, "image/png"));
            file.seek(SeekFrom::Start(header_len)).unwrap();
            let mut body = Vec::new();
            file.read_to_end(&mut body).unwrap();
            assert_eq!(body, b"bytes");
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&path).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{key} is private");
            }
        }
        // Nothing is left in the temporary folder by either way.
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
        // A missing temporary folder is made again, either way.
        std::fs::remove_dir(&tmp).unwrap();
        assert!(matches!(
            put(&root, "outputs/a", true, &folders),
            PutOutcome::Created
        ));
        std::fs::remove_dir(&tmp).unwrap();
        assert!(matches!(
            put(&root, "outputs/b", false, &folders),
            PutOutcome::Created
        ));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn one_put_at_a_time_syncs_the_folder_each_time() {
        let dir = std::env::temp_dir().join(format!("tg-sync-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let syncs = FolderSyncs::default();
        for _ in 0..3 {
            syncs.sync(&dir);
        }
        assert_eq!(state(&syncs, &dir), (3, 3, 3));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn racing_puts_share_folder_syncs_and_each_is_covered() {
        let dir = std::env::temp_dir().join(format!("tg-sync-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let syncs = Arc::new(FolderSyncs::default());
        let n = 64;
        let barrier = Arc::new(std::sync::Barrier::new(n));
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (syncs, barrier, dir) = (syncs.clone(), barrier.clone(), dir.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    // On return, a sync that began after this call's link
                    // has finished.
                    let (ticket, synced) = syncs.sync(&dir);
                    assert!(synced >= ticket, "{ticket} returned at {synced}");
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (linked, synced, runs) = state(&syncs, &dir);
        assert_eq!((linked, synced), (n as u64, n as u64));
        assert!((1..=n as u64).contains(&runs), "{runs} folder syncs");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn racing_puts_share_file_syncs_and_each_object_is_whole() {
        let root = std::env::temp_dir().join(format!("tg-files-{}", uuid::Uuid::new_v4()));
        create_private_dir_all(&root.join(TMP_DIR)).unwrap();
        let files = Arc::new(FileSyncs::for_root(&root, FileSync::Group));
        assert_eq!(files.fs.is_some(), cfg!(target_os = "linux"));
        let folders = Arc::new(FolderSyncs::default());
        let n = 64;
        let barrier = Arc::new(std::sync::Barrier::new(n));
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let (files, folders, barrier, root) = (
                    files.clone(),
                    folders.clone(),
                    barrier.clone(),
                    root.clone(),
                );
                std::thread::spawn(move || {
                    barrier.wait();
                    let key = format!("outputs/{i}");
                    let unnamed = cfg!(target_os = "linux") && i % 2 == 0;
                    put_with(&root, &key, unnamed, &folders, &files)
                })
            })
            .collect();
        for t in threads {
            assert!(matches!(t.join().unwrap(), PutOutcome::Created));
        }
        let s = files.group.state.lock().unwrap();
        if files.fs.is_some() {
            assert_eq!((s.joined, s.synced), (n as u64, n as u64));
            assert!((1..=n as u64).contains(&s.runs), "{} file syncs", s.runs);
        }
        for i in 0..n {
            let path = root.join(format!("outputs/{i}{SUFFIX}"));
            let (_, meta, _) = open_object(&path).unwrap().expect("every put is there");
            assert_eq!(meta.size, 5);
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_failed_group_sync_is_reported_to_the_callers_it_covered() {
        let group = SyncGroup::default();
        let (ticket, synced, ok) = group.join(|| false);
        assert_eq!((ticket, synced, ok), (1, 1, false));
        // The next sync succeeds: its callers are told so.
        let (ticket, synced, ok) = group.join(|| true);
        assert_eq!((ticket, synced, ok), (2, 2, true));
    }
}
