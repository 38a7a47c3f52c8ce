//! Streaming transfers between local files and nasd files, and between two nasd files: pieces
//! the file's layout sizes (about [`CHUNK_BYTES`] per drive request,
//! [`crate::layer::FileIo::transfer_bytes`]) moved in parallel, at most
//! [`TRANSFER_BYTES_IN_FLIGHT_MAX`] of them at once, so memory stays bounded whatever the
//! file's size.
//!
//! - Whole-file reads ([`Client::get_each`]) hand each verified piece to the caller as it
//!   arrives, so a reader that streams (a download, a gateway, a benchmark) never holds the
//!   file; [`Client::get_bytes`] collects them for callers that want the file in memory.
//! - Uploads ([`Client::put_file`]) are staged ([`Client::begin_upload`]): the name shows the
//!   file only once all of it is on the drive. They read the source's data ranges with
//!   `SEEK_DATA`/`SEEK_HOLE` and send only those, so holes stay holes on the drive.
//! - Downloads ([`Client::get_file`]) write a temporary file beside the target (mode 0600 while
//!   partial), fsync it and rename it over the target only when every byte verified; on any
//!   failure the temporary file goes and an existing target is untouched. All-zero blocks are
//!   left unwritten after `set_len`, so they stay holes (as GNU `cp --sparse=auto` does).
//!   Unlike an in-place write, the replaced file is a new inode: owned by the caller, and no
//!   longer sharing hard links. A target the caller may not write is refused, as it would be
//!   in place.
//! - Remote-to-remote copies ([`Client::copy`]) read and write chunk by chunk, skipping
//!   all-zero chunks.
//!
//! A file whose data ends before its size (a trailing hole) gets its size from one zero byte
//! written at its last offset: a write capability cannot set the size otherwise.

use crate::escape::shown;
use crate::files::{
    Client, FsError, Upload, CHUNK_BYTES, TRANSFER_BYTES_IN_FLIGHT_MAX, TRANSFER_IN_FLIGHT_MAX,
    TRANSFER_IN_FLIGHT_MIN,
};
use nasd_proto::manager::Xattr;
use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Progress callback: told the bytes done so far (holes included).
pub type Progress = Arc<dyn Fn(u64) + Send + Sync>;

/// Mode of a download's temporary file while it is incomplete: only its owner can see the
/// partial bytes.
const PARTIAL_MODE: u32 = 0o600;
/// Attempts at a fresh temporary name before giving up (names are random; a collision means
/// another transfer to the same target at the same moment).
const TEMP_NAME_ATTEMPTS_MAX: usize = 8;
/// Granularity of hole detection on download: the local file system's block size, clamped to
/// this range (an all-zero block of it is left unwritten).
const SPARSE_BLOCK_BYTES_MIN: u64 = 512;
const SPARSE_BLOCK_BYTES_MAX: u64 = CHUNK_BYTES as u64;

const _: () = assert!(SPARSE_BLOCK_BYTES_MIN <= SPARSE_BLOCK_BYTES_MAX);

/// How a download leaves the local file once it is complete.
#[derive(Clone, Copy, Debug)]
pub struct LocalFinish {
    /// Permission bits (the caller applies the umask or keeps an existing file's mode).
    pub mode: u32,
    /// Modify time to set, in microseconds since the Unix epoch (`cp -p`); `None` leaves the
    /// time of the download.
    pub mtime_us: Option<u64>,
}

fn local(path: &Path) -> impl Fn(io::Error) -> FsError + '_ {
    move |source| FsError::Local {
        path: path.display().to_string(),
        source,
    }
}

fn shrank(remote: &str) -> FsError {
    FsError::Usage(format!(
        "nasd:{}: the file shrank while it was read",
        shown(remote)
    ))
}

fn join_error(e: tokio::task::JoinError) -> FsError {
    FsError::Usage(format!("transfer task failed: {e}"))
}

/// How many pieces of `piece` bytes a transfer keeps in flight.
fn in_flight(piece: u64) -> usize {
    let n = TRANSFER_BYTES_IN_FLIGHT_MAX / piece.max(1);
    (n as usize).clamp(TRANSFER_IN_FLIGHT_MIN, TRANSFER_IN_FLIGHT_MAX)
}

/// Runs the jobs `next` yields (`None` when done) for pieces of `piece` bytes, at most
/// [`in_flight`] at once; returns the first error, dropping (so cancelling) the jobs still
/// running.
async fn run_bounded<F>(
    piece: u64,
    mut next: impl FnMut() -> Option<Result<F, FsError>>,
) -> Result<(), FsError>
where
    F: Future<Output = Result<(), FsError>> + Send + 'static,
{
    let limit = in_flight(piece);
    let mut set = tokio::task::JoinSet::new();
    while let Some(job) = next() {
        while set.len() >= limit {
            set.join_next()
                .await
                .expect("non-empty")
                .map_err(join_error)??;
        }
        set.spawn(job?);
    }
    while let Some(r) = set.join_next().await {
        r.map_err(join_error)??;
    }
    Ok(())
}

/// Whether every byte of `b` is zero (in word-sized strides the compiler vectorizes).
pub fn is_zero(b: &[u8]) -> bool {
    let mut words = b.chunks_exact(32);
    let whole = words
        .by_ref()
        .all(|w| w.iter().fold(0u8, |acc, &x| acc | x) == 0);
    whole && words.remainder().iter().all(|&x| x == 0)
}

/// The data ranges `[start, end)` of a file below `size`, from `SEEK_DATA`/`SEEK_HOLE`; one
/// range for the whole file where the file system cannot tell. Lazily, one `lseek` pair per
/// range, so a file with many extents costs no memory.
pub struct DataRanges<'f> {
    file: &'f File,
    at: u64,
    size: u64,
}

impl<'f> DataRanges<'f> {
    pub fn new(file: &'f File, size: u64) -> Self {
        DataRanges { file, at: 0, size }
    }

    fn seek(&self, from: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
        use std::os::fd::AsRawFd;
        let from = libc::off_t::try_from(from)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: lseek on a descriptor we own; it moves only that descriptor's offset, which
        // this module never relies on (reads use pread).
        let r = unsafe { libc::lseek(self.file.as_raw_fd(), from, whence) };
        if r >= 0 {
            return Ok(Some(r as u64));
        }
        match io::Error::last_os_error() {
            // No data at or after `from`.
            e if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
            e => Err(e),
        }
    }
}

impl Iterator for DataRanges<'_> {
    type Item = io::Result<(u64, u64)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.size {
            return None;
        }
        let start = match self.seek(self.at, libc::SEEK_DATA) {
            Ok(Some(s)) => s,
            Ok(None) => return None,
            // The file system cannot tell holes (EINVAL): everything left is data.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.at,
            Err(e) => return Some(Err(e)),
        };
        if start >= self.size {
            self.at = self.size;
            return None;
        }
        let end = match self.seek(start, libc::SEEK_HOLE) {
            Ok(Some(e)) => e.min(self.size),
            Ok(None) => self.size,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.size,
            Err(e) => return Some(Err(e)),
        };
        // A hole reported at `start` would loop forever; the file changed under us.
        let end = end.max(start + 1).min(self.size);
        self.at = end;
        Some(Ok((start, end)))
    }
}

/// The pieces of the data ranges of `ranges`, cut at multiples of [`CHUNK_BYTES`] so every
/// request but a range's edges covers whole chunks.
///
/// With `whole` (a parity layout, whose writes must not share a group), every piece is
/// widened to its whole `chunk`, and a chunk is given once however many data ranges it
/// holds: two writes of one parity group at once would each read-modify-write its parity
/// and one would lose the other's update. Holes inside a chunk are then written as zeros.
fn pieces(
    ranges: DataRanges<'_>,
    chunk: u64,
    whole: bool,
    size: u64,
) -> impl Iterator<Item = io::Result<(u64, u64)>> + '_ {
    let mut last: Option<(u64, u64)> = None;
    ranges
        .flat_map(
            move |r| -> Box<dyn Iterator<Item = io::Result<(u64, u64)>>> {
                match r {
                    Ok((start, end)) => Box::new(chunk_cuts(start, end, chunk).map(Ok)),
                    Err(e) => Box::new(std::iter::once(Err(e))),
                }
            },
        )
        .filter_map(move |p| match p {
            Ok((a, _)) if whole => {
                let w = (a / chunk * chunk, (a / chunk * chunk + chunk).min(size));
                (last.replace(w) != Some(w)).then_some(Ok(w))
            }
            other => Some(other),
        })
}

/// `[start, end)` cut at multiples of `chunk`.
fn chunk_cuts(start: u64, end: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    let first = (start < end).then(|| (start, (((start / chunk) + 1) * chunk).min(end)));
    std::iter::successors(first, move |&(_, e)| {
        (e < end).then(|| (e, (e + chunk).min(end)))
    })
}

/// Writes `data` at `offset` of `f`, leaving every all-zero `block`-aligned block unwritten
/// (the caller extended the file with `set_len`, so those stay holes); runs of non-zero blocks
/// go in one write each.
pub fn write_sparse(f: &File, offset: u64, data: &[u8], block: u64) -> io::Result<()> {
    let mut run: Option<usize> = None;
    let mut at = 0usize;
    while at < data.len() {
        let boundary = ((offset + at as u64) / block + 1) * block;
        let end = ((boundary - offset) as usize).min(data.len());
        let zero = is_zero(&data[at..end]);
        match (zero, run) {
            (true, Some(s)) => {
                f.write_all_at(&data[s..at], offset + s as u64)?;
                run = None;
            }
            (false, None) => run = Some(at),
            _ => {}
        }
        at = end;
    }
    if let Some(s) = run {
        f.write_all_at(&data[s..], offset + s as u64)?;
    }
    Ok(())
}

/// A temporary file beside a download's target, removed when dropped unless renamed into
/// place by [`PartialFile::persist`]: whoever writes a file this way never leaves a partial
/// or unverified file under the target's name.
pub struct PartialFile {
    path: PathBuf,
    file: File,
    persisted: bool,
}

impl PartialFile {
    /// Creates `.NAME.nasd-RANDOM` in `target`'s directory, mode [`PARTIAL_MODE`], never
    /// following or replacing an existing file.
    pub fn beside(target: &Path) -> io::Result<PartialFile> {
        let dir = target.parent().unwrap_or(Path::new("."));
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "download".into());
        let mut last = None;
        for _ in 0..TEMP_NAME_ATTEMPTS_MAX {
            let tmp = dir.join(format!(".{name}.nasd-{:016x}", nasd_crypto::random_u64()));
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(PARTIAL_MODE)
                .open(&tmp)
            {
                Ok(file) => {
                    return Ok(PartialFile {
                        path: tmp,
                        file,
                        persisted: false,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// The open temporary file, to write the content into.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Makes the complete file durable with its final mode and time, renames it over
    /// `target`, and makes the rename durable.
    pub fn persist(mut self, target: &Path, finish: LocalFinish) -> io::Result<()> {
        self.file.sync_all()?;
        self.file
            .set_permissions(std::fs::Permissions::from_mode(finish.mode & 0o7777))?;
        if let Some(us) = finish.mtime_us {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us);
            self.file
                .set_times(std::fs::FileTimes::new().set_modified(t))?;
        }
        std::fs::rename(&self.path, target)?;
        self.persisted = true;
        let dir = target.parent().filter(|d| !d.as_os_str().is_empty());
        File::open(dir.unwrap_or(Path::new(".")))?.sync_all()
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.persisted {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Where a download lands: an existing symlink is followed (as `cp` writes through it), so
/// the rename replaces the file it points to, not the link.
fn download_target(local_path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(local_path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(local_path).unwrap_or_else(|_| local_path.to_path_buf())
        }
        _ => local_path.to_path_buf(),
    }
}

/// Refuses an existing `target` the caller may not write: renaming over it needs only the
/// directory's permission, but replacing a read-only file must stay refused, as it is for a
/// write in place.
fn refuse_unwritable(target: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if std::fs::symlink_metadata(target).is_err() {
        return Ok(());
    }
    let c = std::ffi::CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    // SAFETY: access reads the NUL-terminated path and touches nothing.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Records the end of each piece written, so the upload knows whether its data reached the
/// file's size.
#[derive(Default)]
struct Written(AtomicU64);

impl Written {
    fn record(&self, end: u64) {
        self.0.fetch_max(end, Ordering::Relaxed);
    }
}

impl Client {
    /// Ends an upload of `size` bytes whose data writes are done: if they stopped short of
    /// the size (a trailing hole), the upload is given its size.
    async fn seal_upload(&self, u: &Upload, size: u64, written: &Written) -> Result<(), FsError> {
        if written.0.load(Ordering::Relaxed) < size {
            self.upload_size(u, size).await?;
        }
        Ok(())
    }

    /// Creates or replaces `path` with `data` (staged, committed once all of it is written;
    /// a small new file in a directory being filled goes into a prepared file,
    /// [`crate::prepared`]).
    pub async fn put_bytes(
        self: &Arc<Self>,
        path: &str,
        data: &[u8],
        mode: u32,
    ) -> Result<(), FsError> {
        self.put_bytes_with(path, data, mode, None).await
    }

    /// [`Client::put_bytes`], the file's extended attributes becoming `xattrs` (when given)
    /// in the same commit as its content.
    pub async fn put_bytes_with(
        self: &Arc<Self>,
        path: &str,
        data: &[u8],
        mode: u32,
        xattrs: Option<Vec<Xattr>>,
    ) -> Result<(), FsError> {
        let fill = |u: Upload| async move { self.write_bytes(&u, data).await };
        let size = data.len() as u64;
        if let Some(r) = self
            .put_prepared(path, size, mode, xattrs.clone(), fill)
            .await
        {
            return r;
        }
        let u = self.begin_upload_sized(path, mode, Some(size)).await?;
        let r = self.write_bytes(&u, data).await;
        if r.is_err() {
            self.abort_upload(&u).await;
        }
        r?;
        self.finish_upload_with(u, xattrs).await
    }

    pub(crate) async fn write_bytes(
        self: &Arc<Self>,
        u: &Upload,
        data: &[u8],
    ) -> Result<(), FsError> {
        let data: Arc<[u8]> = Arc::from(data);
        let step = self.upload_granule(u).await?;
        let mut offsets = (0..data.len() as u64).step_by(step as usize);
        run_bounded(step, || {
            let off = offsets.next()?;
            let (d, me, u) = (data.clone(), self.clone(), u.clone());
            Some(Ok(async move {
                let end = (off + step).min(d.len() as u64);
                me.upload_write(&u, off, &d[off as usize..end as usize])
                    .await
            }))
        })
        .await?;
        self.upload_size(u, data.len() as u64).await
    }

    /// The whole file in memory (built on [`Client::get_each`]).
    pub async fn get_bytes(self: &Arc<Self>, path: &str) -> Result<Vec<u8>, FsError> {
        let out = Arc::new(std::sync::Mutex::new(Vec::new()));
        let buf = out.clone();
        self.get_each(
            path,
            None,
            |size| {
                *buf.lock().expect("buffer lock") = vec![0u8; size as usize];
                Ok(())
            },
            move |off, d| {
                let out = out.clone();
                async move {
                    out.lock().expect("buffer lock")[off as usize..off as usize + d.len()]
                        .copy_from_slice(&d);
                    Ok(())
                }
            },
        )
        .await?;
        let v = std::mem::take(&mut *buf.lock().expect("buffer lock"));
        Ok(v)
    }

    /// Reads the whole of `remote` in parallel pieces of `step` bytes (`None`: as its layout
    /// sizes them, [`crate::layer::FileIo::transfer_bytes`]), at most
    /// [`TRANSFER_BYTES_IN_FLIGHT_MAX`] at once: the first piece's read tells the size (given
    /// to `on_size` before any piece is handed on), then every verified piece goes to `sink`
    /// with its offset, in no particular order, and is dropped once `sink` is done with it. A
    /// piece shorter than the size promised means the file shrank meanwhile: an error.
    /// Returns the size.
    pub async fn get_each<S, Fut>(
        self: &Arc<Self>,
        remote: &str,
        step: Option<u64>,
        on_size: impl FnOnce(u64) -> Result<(), FsError>,
        sink: S,
    ) -> Result<u64, FsError>
    where
        S: Fn(u64, Vec<u8>) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Result<(), FsError>> + Send,
    {
        let step = match step {
            Some(s) => s.max(1),
            None => self
                .stack(&*self.open(remote, false).await?)?
                .transfer_bytes(),
        };
        let first = self.read_sized(remote, 0, step).await?;
        let size = first.size;
        if (first.data.len() as u64) < step.min(size) {
            return Err(shrank(remote));
        }
        on_size(size)?;
        sink(0, first.data).await?;
        let mut offsets = (step..size).step_by(step as usize);
        run_bounded(step, || {
            let off = offsets.next()?;
            let (me, p, sink) = (self.clone(), remote.to_string(), sink.clone());
            Some(Ok(async move {
                let len = step.min(size - off);
                let d = me.read_at(&p, off, len).await?;
                if d.len() as u64 != len {
                    return Err(shrank(&p));
                }
                sink(off, d).await
            }))
        })
        .await?;
        Ok(size)
    }

    /// Streams a local file to `remote` with parallel drive writes, sending only its data
    /// ranges; `mode` is a new file's mode. Returns the file's size.
    pub async fn put_file(
        self: &Arc<Self>,
        local_path: &Path,
        remote: &str,
        mode: u32,
        progress: Progress,
    ) -> Result<u64, FsError> {
        let f = File::open(local_path).map_err(local(local_path))?;
        let size = f.metadata().map_err(local(local_path))?.len();
        let fill = |u: Upload| {
            let (f, progress) = (&f, progress.clone());
            async move { self.put_ranges(f, local_path, &u, size, &progress).await }
        };
        if let Some(r) = self.put_prepared(remote, size, mode, None, fill).await {
            r?;
            progress(size);
            return Ok(size);
        }
        let u = self.begin_upload_sized(remote, mode, Some(size)).await?;
        let r = self.put_ranges(&f, local_path, &u, size, &progress).await;
        if r.is_err() {
            self.abort_upload(&u).await;
        }
        r?;
        self.finish_upload(u).await?;
        progress(size);
        Ok(size)
    }

    async fn put_ranges(
        self: &Arc<Self>,
        f: &File,
        local_path: &Path,
        u: &Upload,
        size: u64,
        progress: &Progress,
    ) -> Result<(), FsError> {
        let written = Arc::new(Written::default());
        let done = Arc::new(AtomicU64::new(0));
        let (chunk, granule) = self.upload_granules(u).await?;
        let mut pieces = pieces(DataRanges::new(f, size), chunk, granule > 1, size);
        run_bounded(chunk, || {
            let (at, end) = match pieces.next()? {
                Ok(p) => p,
                Err(e) => return Some(Err(local(local_path)(e))),
            };
            let mut buf = vec![0u8; (end - at) as usize];
            let n = match read_at_most(f, &mut buf, at) {
                Ok(n) => n,
                Err(e) => return Some(Err(local(local_path)(e))),
            };
            buf.truncate(n);
            let (me, u, written, done, progress) = (
                self.clone(),
                u.clone(),
                written.clone(),
                done.clone(),
                progress.clone(),
            );
            Some(Ok(async move {
                if !buf.is_empty() {
                    me.upload_write(&u, at, &buf).await?;
                    written.record(at + buf.len() as u64);
                }
                let sent = done.fetch_add(end - at, Ordering::Relaxed) + (end - at);
                progress(sent.min(size));
                Ok(())
            }))
        })
        .await?;
        self.seal_upload(u, size, &written).await
    }

    /// Streams `remote` into `local_path` through a temporary file beside it that replaces
    /// it only once every byte has verified; `finish` gives the complete file its mode and
    /// time. On failure nothing at `local_path` changes. Returns the file's size.
    pub async fn get_file(
        self: &Arc<Self>,
        remote: &str,
        local_path: &Path,
        finish: LocalFinish,
        progress: Progress,
    ) -> Result<u64, FsError> {
        let target = download_target(local_path);
        if let Ok(m) = std::fs::metadata(&target) {
            if !m.is_file() && !m.is_dir() {
                return self.get_to_special(remote, &target, progress).await;
            }
        }
        refuse_unwritable(&target).map_err(local(&target))?;
        let tmp = PartialFile::beside(&target).map_err(local(&target))?;
        let block = tmp
            .file
            .metadata()
            .map(|m| m.blksize())
            .unwrap_or(4096)
            .clamp(SPARSE_BLOCK_BYTES_MIN, SPARSE_BLOCK_BYTES_MAX);
        let file = Arc::new(tmp.file.try_clone().map_err(local(&target))?);
        let target_arc = Arc::new(target.clone());
        let done = Arc::new(AtomicU64::new(0));
        let sized = file.clone();
        let size = self
            .get_each(
                remote,
                None,
                |size| sized.set_len(size).map_err(local(&target)),
                move |off, d| {
                    let (file, done, progress, target) = (
                        file.clone(),
                        done.clone(),
                        progress.clone(),
                        target_arc.clone(),
                    );
                    async move {
                        write_sparse(&file, off, &d, block).map_err(local(&target))?;
                        let n = d.len() as u64;
                        progress(done.fetch_add(n, Ordering::Relaxed) + n);
                        Ok(())
                    }
                },
            )
            .await?;
        drop(sized);
        tmp.persist(&target, finish).map_err(local(&target))?;
        Ok(size)
    }

    /// Streams `remote` into a special file that exists (`/dev/null`, a FIFO, a terminal):
    /// written in order through the file itself, never replaced by a rename. A piece waits
    /// for the ones before it while holding its place among the pieces in flight (pieces
    /// start in offset order, so the earliest is always among them). Returns the size.
    async fn get_to_special(
        self: &Arc<Self>,
        remote: &str,
        target: &Path,
        progress: Progress,
    ) -> Result<u64, FsError> {
        use std::io::Write;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(target)
            .map_err(local(target))?;
        let out = Arc::new(std::sync::Mutex::new(file));
        let (next_tx, next_rx) = tokio::sync::watch::channel(0u64);
        let next_tx = Arc::new(next_tx);
        let target_arc = Arc::new(target.to_path_buf());
        self.get_each(
            remote,
            None,
            |_| Ok(()),
            move |off, d| {
                let (out, next_tx, mut next_rx, progress, target) = (
                    out.clone(),
                    next_tx.clone(),
                    next_rx.clone(),
                    progress.clone(),
                    target_arc.clone(),
                );
                async move {
                    if next_rx.wait_for(|&n| n == off).await.is_err() {
                        return Ok(());
                    }
                    out.lock()
                        .expect("special file lock")
                        .write_all(&d)
                        .map_err(local(&target))?;
                    let end = off + d.len() as u64;
                    progress(end);
                    next_tx.send_replace(end);
                    Ok(())
                }
            },
        )
        .await
    }

    /// Copies `src` to `dst` within the cluster, piece by piece (at most
    /// [`TRANSFER_BYTES_IN_FLIGHT_MAX`] in memory), leaving all-zero pieces as holes; `mode`
    /// is a new file's mode. Returns the size copied.
    pub async fn copy(
        self: &Arc<Self>,
        src: &str,
        dst: &str,
        mode: u32,
        progress: Progress,
    ) -> Result<u64, FsError> {
        let u = self.begin_upload(dst, mode).await?;
        let r = self.copy_pieces(src, &u, &progress).await;
        if r.is_err() {
            self.abort_upload(&u).await;
        }
        let size = r?;
        self.finish_upload(u).await?;
        Ok(size)
    }

    /// Writes the bytes of `src` into upload `u` as [`Client::copy`] does (holes kept) and
    /// seals it at the source's size; the caller commits or aborts `u`.
    pub async fn copy_into(self: &Arc<Self>, src: &str, u: &Upload) -> Result<u64, FsError> {
        self.copy_pieces(src, u, &(Arc::new(|_| {}) as Progress))
            .await
    }

    /// The pieces of a copy: read by the destination's write granule, so no two writes share
    /// a stripe group; all-zero pieces are left as holes.
    async fn copy_pieces(
        self: &Arc<Self>,
        src: &str,
        u: &Upload,
        progress: &Progress,
    ) -> Result<u64, FsError> {
        let written = Arc::new(Written::default());
        let done = Arc::new(AtomicU64::new(0));
        let step = self.upload_granule(u).await?;
        let (me, up, w, progress) = (self.clone(), u.clone(), written.clone(), progress.clone());
        let size = self
            .get_each(
                src,
                Some(step),
                |_| Ok(()),
                move |off, d| {
                    let (me, u, written, done, progress) = (
                        me.clone(),
                        up.clone(),
                        w.clone(),
                        done.clone(),
                        progress.clone(),
                    );
                    async move {
                        let n = d.len() as u64;
                        if !is_zero(&d) {
                            me.upload_write(&u, off, &d).await?;
                            written.record(off + n);
                        }
                        progress(done.fetch_add(n, Ordering::Relaxed) + n);
                        Ok(())
                    }
                },
            )
            .await?;
        self.seal_upload(u, size, &written).await?;
        Ok(size)
    }
}

/// Reads into `buf` at `offset` until it is full or the file ends (it may shrink while it is
/// read); returns the bytes read.
fn read_at_most(f: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocated(f: &File) -> u64 {
        f.metadata().unwrap().blocks() * 512
    }

    #[test]
    fn zero_detection_sees_every_byte() {
        for n in [0usize, 1, 31, 32, 33, 4096, 4099] {
            let mut v = vec![0u8; n];
            assert!(is_zero(&v));
            for i in 0..n {
                v[i] = 1;
                assert!(!is_zero(&v), "byte {i} of {n}");
                v[i] = 0;
            }
        }
    }

    #[test]
    fn sparse_writes_leave_zero_blocks_as_holes_and_keep_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        let size = 8u64 << 20;
        f.set_len(size).unwrap();
        let mut data = vec![0u8; 1 << 20];
        data[10] = 1;
        data[4096 * 3 + 7] = 2;
        data[(1 << 20) - 1] = 3;
        write_sparse(&f, 2 << 20, &data, 4096).unwrap();
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 2 << 20).unwrap();
        assert!(back == data);
        let whole = {
            let mut v = vec![0u8; size as usize];
            f.read_exact_at(&mut v, 0).unwrap();
            v
        };
        assert!(is_zero(&whole[..2 << 20]) && is_zero(&whole[3 << 20..]));
        if allocated(&f) > 0 {
            assert!(
                allocated(&f) <= 64 << 10,
                "{} bytes allocated for 3 blocks",
                allocated(&f)
            );
        }
        // An offset that is not block-aligned: blocks are cut at the file's block boundaries.
        let odd = vec![5u8; 100];
        write_sparse(&f, 4090, &odd, 4096).unwrap();
        let mut b = vec![0u8; 100];
        f.read_exact_at(&mut b, 4090).unwrap();
        assert_eq!(b, odd);
    }

    #[test]
    fn data_ranges_find_the_data_between_holes() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        let size = 16u64 << 20;
        f.set_len(size).unwrap();
        f.write_all_at(&[7u8; 8192], 1 << 20).unwrap();
        f.write_all_at(&[9u8; 100], 10 << 20).unwrap();
        f.sync_all().unwrap();
        let ranges: Vec<(u64, u64)> = DataRanges::new(&f, size).map(|r| r.unwrap()).collect();
        // Every data byte lies in a range, whatever the file system's granularity.
        for at in [(1u64 << 20), (1 << 20) + 8191, 10 << 20, (10 << 20) + 99] {
            assert!(
                ranges.iter().any(|&(s, e)| s <= at && at < e),
                "{at} outside {ranges:?}"
            );
        }
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "{ranges:?}");
        let covered: u64 = ranges.iter().map(|(s, e)| e - s).sum();
        if allocated(&f) < 1 << 20 {
            assert!(covered < 4 << 20, "holes not seen: {ranges:?}");
        }
        // Pieces never cross a chunk boundary and cover the ranges exactly.
        let chunk = CHUNK_BYTES as u64;
        let ps: Vec<(u64, u64)> = pieces(DataRanges::new(&f, size), chunk, false, size)
            .map(|r| r.unwrap())
            .collect();
        assert!(ps
            .iter()
            .all(|&(s, e)| s < e && s / chunk == (e - 1) / chunk));
        assert_eq!(ps.iter().map(|(s, e)| e - s).sum::<u64>(), covered);
        // For a parity layout: whole chunks of its granule, each once, covering every range.
        let granule = 12 << 10;
        let chunk = chunk.div_ceil(granule) * granule;
        let ws: Vec<(u64, u64)> = pieces(DataRanges::new(&f, size), chunk, true, size)
            .map(|r| r.unwrap())
            .collect();
        assert!(ws
            .iter()
            .all(|&(s, e)| s % chunk == 0 && e == (s + chunk).min(size)));
        assert!(
            ws.windows(2).all(|w| w[0].1 <= w[1].0),
            "each chunk once: {ws:?}"
        );
        for &(s, e) in &ranges {
            assert!(
                ws.iter().any(|&(a, b)| a <= s && s < b),
                "{s}..{e} in {ws:?}"
            );
            assert!(
                ws.iter().any(|&(a, b)| a < e && e <= b),
                "{s}..{e} in {ws:?}"
            );
        }
    }

    #[test]
    fn a_file_with_no_holes_is_one_range_and_an_empty_one_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![1u8; 10_000]).unwrap();
        let f = File::open(&p).unwrap();
        let r: Vec<_> = DataRanges::new(&f, 10_000).map(|r| r.unwrap()).collect();
        assert_eq!(r, vec![(0, 10_000)]);
        std::fs::write(&p, b"").unwrap();
        let f = File::open(&p).unwrap();
        assert_eq!(DataRanges::new(&f, 0).count(), 0);
    }

    #[test]
    fn a_read_only_target_is_refused_and_a_missing_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ro");
        assert!(refuse_unwritable(&p).is_ok());
        std::fs::write(&p, b"keep").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
        // SAFETY: geteuid only reads the process's credentials.
        if unsafe { libc::geteuid() } == 0 {
            eprintln!("skipped: root may write any file");
            return;
        }
        let e = refuse_unwritable(&p).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn a_temporary_file_vanishes_unless_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        std::fs::write(&target, b"old").unwrap();
        {
            let tmp = PartialFile::beside(&target).unwrap();
            assert_eq!(
                tmp.file.metadata().unwrap().permissions().mode() & 0o777,
                PARTIAL_MODE
            );
            tmp.file.write_all_at(b"new", 0).unwrap();
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let tmp = PartialFile::beside(&target).unwrap();
        tmp.file.write_all_at(b"new", 0).unwrap();
        tmp.persist(
            &target,
            LocalFinish {
                mode: 0o640,
                mtime_us: Some(1_000_000_123_456),
            },
        )
        .unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let m = std::fs::metadata(&target).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o640);
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_000_000, 123_456_000));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
