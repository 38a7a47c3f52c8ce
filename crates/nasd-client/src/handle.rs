//! Open files as handles — `read_at`, `write_at`, `truncate`, `flush`, `fsync`, `close` at
//! any offset, without whole-file buffers — the interface the FUSE mount and the S3 gateway
//! build on (issue 11's "streaming handles").
//!
//! A handle keeps what was written since its last flush as an overlay of byte runs over a
//! *base*, and reads see the overlay over the base, zeros past the base's end (holes):
//! - a new file, or one opened with truncate, has a staged upload as its base
//!   ([`crate::files::Upload`]): nothing is visible under the name until the handle is
//!   synced or closed, when the upload commits (close-to-open consistency, as NFS gives).
//!   [`FileHandle::create_now`] gives a new file its name at once instead (an empty version,
//!   as a local file system's create does); its content is staged the same way;
//!   Runs go to the staged objects in parallel pieces once the overlay holds
//!   [`DIRTY_BYTES_MAX`] (write-behind), so a file of any size streams through bounded memory;
//! - an existing file opened without truncate has the committed file as its base: a flush
//!   cuts it where the handle truncated it, writes the runs (in place under the file's write
//!   lease for a one-object file; as one copy-on-write change for a striped one, so parity
//!   never disagrees with data), and extends it to the handle's size.
//!
//! Sequential reads of the committed file read ahead as seed 002 §4.5 describes: a window of
//! [`READ_AHEAD_FIRST_BYTES`] that doubles on each sequential read up to
//! [`READ_AHEAD_MAX_BYTES`], fetched in the layout's transfer pieces at once; a random read
//! starts over. A handle serializes its own calls; open several for parallel streams.

use crate::files::{Client, FsError, Upload};
use crate::layer::FileIo;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Bytes a handle holds written but not yet sent before it sends them: bounds its memory and
/// sizes write-behind batches (large enough to keep every drive busy with parallel pieces).
pub const DIRTY_BYTES_MAX: u64 = 32 << 20;
/// The first read-ahead window (seed 002 §4.5).
pub const READ_AHEAD_FIRST_BYTES: u64 = 256 << 10;
/// The largest read-ahead window (seed 002 §4.5).
pub const READ_AHEAD_MAX_BYTES: u64 = 8 << 20;
/// Pieces of one write-out or read-ahead fetch in flight at once.
const PIECES_IN_FLIGHT: usize = 16;

/// How to open a handle (the `open(2)` flags that matter here).
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    pub write: bool,
    /// Make the file if it does not exist (with `mode`).
    pub create: bool,
    /// Start from empty content (the old content stays readable to others until commit).
    pub truncate: bool,
    pub mode: u32,
}

/// Disjoint runs of written bytes, by offset.
#[derive(Default)]
struct Overlay {
    runs: BTreeMap<u64, Vec<u8>>,
    bytes: u64,
}

impl Overlay {
    /// Adds `data` at `off`, over whatever runs it overlaps; touching runs merge. Appending
    /// to the end of a run extends it in place (amortized copies).
    fn write(&mut self, off: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = off + data.len() as u64;
        // The run starting at or before `off` that reaches `off`, if any, is extended.
        let mut start = off;
        let mut buf = match self.runs.range(..=off).next_back() {
            Some((&s, r)) if s + r.len() as u64 >= off => {
                start = s;
                let r = self.runs.remove(&s).expect("just seen");
                self.bytes -= r.len() as u64;
                r
            }
            _ => Vec::new(),
        };
        let at = (off - start) as usize;
        if buf.len() < at + data.len() {
            buf.resize(at + data.len(), 0);
        }
        buf[at..at + data.len()].copy_from_slice(data);
        // Runs that start inside or right after the new bytes are absorbed.
        let later: Vec<u64> = self.runs.range(off..=end).map(|(&s, _)| s).collect();
        for s in later {
            let r = self.runs.remove(&s).expect("just seen");
            self.bytes -= r.len() as u64;
            let r_end = s + r.len() as u64;
            if r_end > end {
                let keep = (end - s) as usize;
                buf.extend_from_slice(&r[keep..]);
            }
        }
        self.bytes += buf.len() as u64;
        self.runs.insert(start, buf);
    }

    /// Drops every byte at and past `size`.
    fn truncate(&mut self, size: u64) {
        let after: Vec<u64> = self.runs.range(size..).map(|(&s, _)| s).collect();
        for s in after {
            self.bytes -= self.runs.remove(&s).expect("just seen").len() as u64;
        }
        if let Some((&s, r)) = self.runs.range_mut(..size).next_back() {
            if s + r.len() as u64 > size {
                let cut = r.len() - (size - s) as usize;
                r.truncate((size - s) as usize);
                self.bytes -= cut as u64;
            }
        }
    }

    /// Copies the runs' bytes that fall in `[off, off + out.len())` into `out`.
    /// Whether any written run touches `[off, end)`.
    fn touches(&self, off: u64, end: u64) -> bool {
        let first = self.runs.range(..=off).next_back().map_or(off, |(&s, _)| s);
        self.runs
            .range(first..end)
            .any(|(&s, r)| s.max(off) < (s + r.len() as u64).min(end))
    }

    fn read_into(&self, off: u64, out: &mut [u8]) {
        let end = off + out.len() as u64;
        let first = self.runs.range(..=off).next_back().map_or(off, |(&s, _)| s);
        for (&s, r) in self.runs.range(first..end) {
            let (a, b) = (s.max(off), (s + r.len() as u64).min(end));
            if a < b {
                out[(a - off) as usize..(b - off) as usize]
                    .copy_from_slice(&r[(a - s) as usize..(b - s) as usize]);
            }
        }
    }

    fn take(&mut self) -> Vec<(u64, Vec<u8>)> {
        self.bytes = 0;
        std::mem::take(&mut self.runs).into_iter().collect()
    }
}

/// What the overlay lies over.
enum Base {
    /// The file as committed under the handle's path, `size` bytes, read as zeros from
    /// `cut` on (the handle truncated it since its last flush).
    Committed { size: u64, cut: u64 },
    /// A staged upload that becomes the file's content at commit; bytes below the end of its
    /// furthest write ([`Upload`] keeps it) were written to it, the rest read as zeros.
    Staged { upload: Box<Upload> },
}

struct State {
    /// The file's size as the handle sees it.
    size: u64,
    base: Base,
    dirty: Overlay,
    /// Read-ahead: the window cached (offset, bytes), where the last read ended, the next
    /// window's size.
    ahead: Option<(u64, Arc<Window>)>,
    /// The window after it, being fetched while the reader consumes this one.
    next: Option<Prefetch>,
    last_end: u64,
    window: u64,
    /// Written since the last commit or flush reached the drives.
    changed: bool,
    /// When this handle last changed the file (a write, a cut, a new or truncated file), in
    /// microseconds since the epoch; `None` while it changed nothing. Kept after commits: from
    /// the first change on, this handle's size and time are the file's as its opener sees it.
    changed_us: Option<u64>,
    /// Write-behind batches still being sent to a staged upload (at most
    /// [`BEHIND_BATCHES_MAX`]); their errors surface at the next write, read or flush.
    behind: Vec<tokio::task::JoinHandle<Result<(), FsError>>>,
}

impl State {
    /// A handle's state over `base` of `size` bytes; a staged base is a change already.
    fn new(base: Base, size: u64) -> State {
        let changed = matches!(base, Base::Staged { .. });
        State {
            size,
            base,
            dirty: Overlay::default(),
            ahead: None,
            next: None,
            last_end: u64::MAX,
            window: READ_AHEAD_FIRST_BYTES,
            changed,
            changed_us: changed.then(now_us),
            behind: vec![],
        }
    }
}

/// A read-ahead window on its way: `[start, end)` of the committed file.
struct Prefetch {
    start: u64,
    end: u64,
    task: tokio::task::JoinHandle<Result<Window, FsError>>,
}

/// A read-ahead window: the verified pieces as they came from the cluster, each
/// `step` bytes but the last, kept apart so serving a read copies its bytes once.
struct Window {
    step: u64,
    pieces: Vec<Vec<u8>>,
}

/// Bytes a read returned: a slice of the read-ahead window it came from (no copy), or bytes
/// of its own. Dereferences to the bytes.
pub struct ReadBytes(Held);

enum Held {
    Window {
        window: Arc<Window>,
        piece: usize,
        from: usize,
        to: usize,
    },
    Owned(Vec<u8>),
}

impl std::ops::Deref for ReadBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Held::Window {
                window,
                piece,
                from,
                to,
            } => &window.pieces[*piece][*from..*to],
            Held::Owned(v) => v,
        }
    }
}

impl ReadBytes {
    fn owned(v: Vec<u8>) -> ReadBytes {
        ReadBytes(Held::Owned(v))
    }

    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Held::Owned(v) => v,
            Held::Window { .. } => self.to_vec(),
        }
    }
}

impl Window {
    /// `[from, to)` as a slice of one piece, when it lies in one.
    fn slice(self: &Arc<Self>, from: u64, to: u64) -> ReadBytes {
        let (i, within) = ((from / self.step) as usize, (from % self.step) as usize);
        match self.pieces.get(i) {
            Some(p) if within + (to - from) as usize <= p.len() => ReadBytes(Held::Window {
                window: self.clone(),
                piece: i,
                from: within,
                to: within + (to - from) as usize,
            }),
            _ => ReadBytes::owned(self.copy_out(from, to)),
        }
    }

    fn len(&self) -> u64 {
        self.pieces.iter().map(|p| p.len() as u64).sum()
    }

    /// Bytes `[from, to)` of the window (offsets within it).
    fn copy_out(&self, from: u64, to: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity((to - from) as usize);
        let mut at = from;
        while at < to {
            let (i, within) = ((at / self.step) as usize, at % self.step);
            let Some(p) = self.pieces.get(i) else { break };
            let b = (within + (to - at)).min(p.len() as u64);
            out.extend_from_slice(&p[within as usize..b as usize]);
            at += b - within;
        }
        out
    }
}

/// Write-behind batches of [`DIRTY_BYTES_MAX`] in flight at once: the writer fills the next
/// while these go out, and the handle holds at most this many batches more.
const BEHIND_BATCHES_MAX: usize = 2;

/// An open file. Dropping a handle that holds unflushed writes loses them (a staged upload
/// expires): call [`FileHandle::close`].
pub struct FileHandle {
    client: Arc<Client>,
    /// Where the committed file is (it moves when a mount renames an open file aside).
    path: std::sync::RwLock<String>,
    /// The file's inode number (a new file's is reserved when its upload begins).
    ino: u64,
    write: bool,
    st: tokio::sync::Mutex<State>,
}

impl FileHandle {
    /// Opens `path` as `o` asks. A new file (or a truncated one) is staged and appears at
    /// the first [`FileHandle::fsync`] or at [`FileHandle::close`].
    pub async fn open(
        client: &Arc<Client>,
        path: &str,
        o: OpenOptions,
    ) -> Result<FileHandle, FsError> {
        let existing = match client.stat(path).await {
            Ok(st) if st.kind == nasd_proto::manager::FileKind::Dir => {
                return Err(FsError::Usage(format!(
                    "{}: is a directory",
                    crate::escape::shown(path)
                )))
            }
            Ok(st) => Some(st),
            Err(e)
                if o.create && e.status() == Some(nasd_proto::manager::MgrStatus::NoSuchPath) =>
            {
                None
            }
            Err(e) => return Err(e),
        };
        let mut ino = existing.as_ref().map_or(0, |st| st.ino);
        let (base, size) = match existing {
            // The stat's size is the file's (a drive's attributes or the manager's record).
            Some(st) if !(o.write && o.truncate) => (
                Base::Committed {
                    size: st.size,
                    cut: st.size,
                },
                st.size,
            ),
            None if !o.write => {
                return Err(FsError::Usage(format!(
                    "{}: creating a file needs a handle open for writing",
                    crate::escape::shown(path)
                )))
            }
            _ => {
                let upload = client.begin_upload(path, o.mode).await?;
                ino = upload.stat().ino;
                (
                    Base::Staged {
                        upload: Box::new(upload),
                    },
                    0,
                )
            }
        };
        Ok(FileHandle {
            client: client.clone(),
            path: std::sync::RwLock::new(path.to_string()),
            ino,
            write: o.write,
            st: tokio::sync::Mutex::new(State::new(base, size)),
        })
    }

    /// Creates `path` as a local file system does: the name exists from now on (an empty
    /// version, committed at once, as NFS and AFS give a file its name at create), and what is
    /// written is staged and lands at [`FileHandle::fsync`] or close. `None` when the name is
    /// taken: with `exclusive`, at any moment up to the commit (`O_CREAT | O_EXCL` across
    /// clients); without, at the stat before (the caller opens the file there).
    /// [`FileHandle::open`] with `create` keeps a new file invisible until whole instead.
    pub async fn create_now(
        client: &Arc<Client>,
        path: &str,
        mode: u32,
        exclusive: bool,
    ) -> Result<Option<FileHandle>, FsError> {
        if let Some(made) = client.create_prepared(path, mode).await {
            return Ok(made?.map(|ino| FileHandle::created(client, path, ino)));
        }
        let upload = client.begin_upload(path, mode).await?;
        if upload.replaces() {
            client.abort_upload(&upload).await;
            return Ok(None);
        }
        let ino = upload.stat().ino;
        let landed = match exclusive {
            true => client.finish_upload_exclusive(upload).await,
            false => client.finish_upload(upload).await,
        };
        match landed {
            Err(e) if e.status() == Some(nasd_proto::manager::MgrStatus::Exists) => Ok(None),
            Err(e) => Err(e),
            Ok(()) => Ok(Some(FileHandle::created(client, path, ino))),
        }
    }

    /// A handle on the empty file `ino` just committed at `path`.
    fn created(client: &Arc<Client>, path: &str, ino: u64) -> FileHandle {
        FileHandle {
            client: client.clone(),
            path: std::sync::RwLock::new(path.to_string()),
            ino,
            write: true,
            st: tokio::sync::Mutex::new(State::new(Base::Committed { size: 0, cut: 0 }, 0)),
        }
    }

    pub fn path(&self) -> String {
        self.path.read().expect("path lock").clone()
    }

    /// The client the handle reads and writes with (its user's).
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// The committed file was renamed to `path` (a mount keeping an unlinked file open
    /// under a hidden name, as NFS does): later flushes and reads go there.
    pub fn moved(&self, path: &str) {
        *self.path.write().expect("path lock") = path.to_string();
    }

    /// The file's inode number.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// The file's size as this handle sees it.
    pub async fn size(&self) -> u64 {
        self.st.lock().await.size
    }

    /// The size and modify time (microseconds) this handle gave the file, once it changed it
    /// (a write, a cut, a new or truncated file), committed or not; `None` while it changed
    /// nothing, when the file as committed is what others may have changed since.
    pub async fn local_attrs(&self) -> Option<(u64, u64)> {
        let st = self.st.lock().await;
        st.changed_us.map(|t| (st.size, t))
    }

    /// The committed file's times are the file's from now on (a time was set on it after
    /// everything this handle wrote was committed): this handle's own modify time no longer
    /// stands for the file's, until it changes the file again.
    pub async fn times_set(&self) {
        let mut st = self.st.lock().await;
        if !st.changed {
            st.changed_us = None;
        }
    }

    /// Up to `len` bytes at `off` (fewer at the end of the file).
    pub async fn read_at(&self, off: u64, len: u64) -> Result<Vec<u8>, FsError> {
        self.read_bytes(off, len).await.map(ReadBytes::into_vec)
    }

    /// [`FileHandle::read_at`] without copying what the read-ahead window already holds (a
    /// front end hands the slice straight to the kernel or the network).
    pub async fn read_bytes(&self, off: u64, len: u64) -> Result<ReadBytes, FsError> {
        let mut st = self.st.lock().await;
        let end = (off.saturating_add(len)).min(st.size);
        if off >= end {
            return Ok(ReadBytes::owned(vec![]));
        }
        if matches!(st.base, Base::Staged { .. }) {
            Self::settle(&mut st).await?;
        }
        // The common case of a reader: committed bytes nobody wrote over, served with one copy.
        if let Base::Committed { size, cut } = st.base {
            if end <= size.min(cut) && !st.dirty.touches(off, end) {
                let got = self.read_ahead(&mut st, off, end).await?;
                if got.len() as u64 == end - off {
                    st.last_end = end;
                    return Ok(got);
                }
            }
        }
        let mut out = vec![0u8; (end - off) as usize];
        match &st.base {
            Base::Committed { size, cut } => {
                let base_end = end.min(*size).min(*cut);
                if off < base_end {
                    let got = self.read_ahead(&mut st, off, base_end).await?;
                    out[..got.len()].copy_from_slice(&got);
                }
            }
            Base::Staged { upload } => {
                let base_end = end.min(upload.written_end());
                if off < base_end {
                    let got = self.client.upload_read(upload, off, base_end - off).await?;
                    out[..got.len()].copy_from_slice(&got);
                }
            }
        }
        st.dirty.read_into(off, &mut out);
        st.last_end = end;
        Ok(ReadBytes::owned(out))
    }

    /// Bytes `[off, end)` of the committed file, through the read-ahead window; while a
    /// sequential reader consumes one window the next is fetched.
    async fn read_ahead(&self, st: &mut State, off: u64, end: u64) -> Result<ReadBytes, FsError> {
        let Base::Committed { size, cut } = st.base else {
            unreachable!("read ahead only over the committed file")
        };
        let limit = size.min(cut);
        let sequential = off == st.last_end;
        let covered = |st: &State| {
            st.ahead
                .as_ref()
                .is_some_and(|(at, w)| *at <= off && end <= at + w.len())
        };
        if !covered(st) {
            match st.next.take() {
                Some(p) if p.start <= off && end <= p.end => {
                    let w = p
                        .task
                        .await
                        .unwrap_or_else(|e| Err(FsError::Usage(format!("read-ahead task: {e}"))))?;
                    st.ahead = Some((p.start, Arc::new(w)));
                }
                other => {
                    if let Some(p) = other {
                        p.task.abort();
                    }
                    st.window = if sequential {
                        (st.window * 2).min(READ_AHEAD_MAX_BYTES)
                    } else {
                        READ_AHEAD_FIRST_BYTES
                    };
                    let fetch_end = (off + st.window.max(end - off)).min(limit);
                    let w = read_pieces(self.client.clone(), self.path(), off, fetch_end).await?;
                    st.ahead = Some((off, Arc::new(w)));
                }
            }
        }
        let (at, w) = st.ahead.clone().expect("filled above");
        let w_end = at + w.len();
        // A sequential reader past the middle of its window: fetch the next one now.
        if sequential && st.next.is_none() && end >= at + (w_end - at) / 2 && w_end < limit {
            st.window = (st.window * 2).min(READ_AHEAD_MAX_BYTES);
            let next_end = (w_end + st.window).min(limit);
            let (client, path) = (self.client.clone(), self.path());
            st.next = Some(Prefetch {
                start: w_end,
                end: next_end,
                task: tokio::spawn(read_pieces(client, path, w_end, next_end)),
            });
        }
        let from = (off - at).min(w.len());
        let to = (end - at).min(w.len()).max(from);
        Ok(w.slice(from, to))
    }

    /// Writes `data` at `off` (past the end: the gap reads as zeros).
    pub async fn write_at(&self, off: u64, data: &[u8]) -> Result<(), FsError> {
        self.writable()?;
        let mut st = self.st.lock().await;
        if matches!(st.base, Base::Committed { cut: 0, .. }) && st.dirty.bytes == 0 {
            self.restage(&mut st).await?;
        }
        st.dirty.write(off, data);
        st.size = st.size.max(off + data.len() as u64);
        st.changed = true;
        st.changed_us = Some(now_us());
        st.ahead = None;
        if let Some(p) = st.next.take() {
            p.task.abort();
        }
        if st.dirty.bytes >= DIRTY_BYTES_MAX {
            if matches!(st.base, Base::Staged { .. }) {
                self.write_behind(&mut st).await?;
            } else {
                self.write_out(&mut st).await?;
            }
        }
        Ok(())
    }

    /// Makes the file `size` bytes long: cut short, or extended with zeros.
    pub async fn truncate(&self, size: u64) -> Result<(), FsError> {
        self.writable()?;
        let mut st = self.st.lock().await;
        st.dirty.truncate(size);
        st.ahead = None;
        if let Some(p) = st.next.take() {
            p.task.abort();
        }
        // Batches still going out count as written.
        Self::settle(&mut st).await?;
        let staged_past =
            matches!(&st.base, Base::Staged { upload } if upload.written_end() > size);
        if staged_past {
            // Staged objects cannot be cut with a write capability: commit what there is,
            // then cut the committed file (it was this handle's to shape anyway).
            self.commit(&mut st).await?;
        }
        if let Base::Committed { cut, .. } = &mut st.base {
            *cut = (*cut).min(size);
        }
        st.size = size;
        st.changed = true;
        st.changed_us = Some(now_us());
        Ok(())
    }

    /// Sends what was written to the drives (durable there); for an existing file, applies
    /// it to the file. A staged file stays invisible until [`FileHandle::fsync`] or close.
    pub async fn flush(&self) -> Result<(), FsError> {
        let mut st = self.st.lock().await;
        self.write_out(&mut st).await
    }

    /// [`FileHandle::flush`], and a staged file commits: durable and visible under its name.
    pub async fn fsync(&self) -> Result<(), FsError> {
        let mut st = self.st.lock().await;
        self.commit(&mut st).await
    }

    /// Syncs and ends the handle. A new or truncated file whose writes failed is given up
    /// at once (its staged objects' space and quota escrow come back), since nothing can
    /// retry them once the handle is gone.
    pub async fn close(self) -> Result<(), FsError> {
        let mut st = self.st.lock().await;
        let r = self.commit(&mut st).await;
        if let (Err(_), Base::Staged { upload }) = (&r, &st.base) {
            self.client.abort_upload(upload).await;
        }
        r
    }

    /// Gives up what the handle wrote and did not flush; a staged file never appears.
    pub async fn abort(self) {
        let mut st = self.st.into_inner();
        // Batches still going out are waited for, so none lands after the abort.
        let _ = Self::settle(&mut st).await;
        if let Base::Staged { upload, .. } = &st.base {
            self.client.abort_upload(upload).await;
        }
    }

    /// A committed file this handle made empty (created, or cut to nothing) is written whole:
    /// its new content is staged and lands at commit in one swap, as an `O_TRUNC` open's
    /// does, instead of as copy-on-write changes of an empty file. Only while the name still
    /// holds this file; otherwise the writes go to the committed file as before.
    async fn restage(&self, st: &mut State) -> Result<(), FsError> {
        let upload = self.client.begin_upload(&self.path(), 0).await?;
        if !upload.replaces() || upload.stat().ino != self.ino {
            self.client.abort_upload(&upload).await;
            return Ok(());
        }
        st.base = Base::Staged {
            upload: Box::new(upload),
        };
        st.changed = true;
        Ok(())
    }

    fn writable(&self) -> Result<(), FsError> {
        if self.write {
            return Ok(());
        }
        Err(FsError::Usage(format!(
            "{}: the handle is open for reading",
            crate::escape::shown(&self.path())
        )))
    }

    /// Waits for the write-behind batches; the first error among them is returned.
    async fn settle(st: &mut State) -> Result<(), FsError> {
        let mut first = Ok(());
        for t in st.behind.drain(..) {
            let r = t
                .await
                .unwrap_or_else(|e| Err(FsError::Usage(format!("write-behind task: {e}"))));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Sends the overlay to the staged upload in the background, once fewer than
    /// [`BEHIND_BATCHES_MAX`] batches are still going out.
    async fn write_behind(&self, st: &mut State) -> Result<(), FsError> {
        if st.behind.len() >= BEHIND_BATCHES_MAX {
            Self::settle(st).await?;
        }
        let runs = st.dirty.take();
        let Base::Staged { upload } = &st.base else {
            unreachable!("write-behind only to a staged upload")
        };
        let (client, upload) = (self.client.clone(), (**upload).clone());
        st.behind.push(tokio::spawn(async move {
            send_runs(&client, &upload, &runs).await
        }));
        Ok(())
    }

    /// Sends the overlay to the base: staged objects, or the committed file.
    async fn write_out(&self, st: &mut State) -> Result<(), FsError> {
        if let Base::Staged { upload } = &st.base {
            let upload = (**upload).clone();
            let sent = match Self::settle(st).await {
                Ok(()) => send_runs(&self.client, &upload, &st.dirty.take()).await,
                Err(e) => Err(e),
            };
            if let Err(e) = sent {
                self.give_up_staged(st, &upload).await;
                return Err(e);
            }
            return Ok(());
        }
        Self::settle(st).await?;
        let runs = st.dirty.take();
        let size = st.size;
        match &mut st.base {
            Base::Staged { .. } => unreachable!("written out above"),
            Base::Committed { size: base, cut } => {
                if !st.changed {
                    return Ok(());
                }
                let path = self.path();
                if let Err(e) = self.apply(&path, (*base, *cut), &runs, size).await {
                    self.fall_back(st).await;
                    return Err(e);
                }
                if let Base::Committed { size: base, cut } = &mut st.base {
                    (*base, *cut) = (size, size);
                }
                st.ahead = None;
                if let Some(p) = st.next.take() {
                    p.task.abort();
                }
            }
        }
        st.changed = matches!(st.base, Base::Staged { .. });
        Ok(())
    }

    /// Applies a committed file's change: the cut (`base` bytes cut to `cut`), the written
    /// `runs`, and the extension to `size`.
    async fn apply(
        &self,
        path: &str,
        (base, cut): (u64, u64),
        runs: &[(u64, Vec<u8>)],
        size: u64,
    ) -> Result<(), FsError> {
        if cut < base {
            self.client.truncate(path, cut).await?;
        }
        self.client.write_runs(path, runs).await?;
        if self.client.size(path).await? < size {
            self.client.truncate(path, size).await?;
        }
        Ok(())
    }

    /// After a change to the committed file that failed (past a quota, say), what it carried
    /// is gone and was reported as an error: the handle falls back to the file as stored, so
    /// neither its reads nor the size it reports (to every descriptor sharing it) show bytes
    /// the file does not hold.
    async fn fall_back(&self, st: &mut State) {
        // A staged base's file as stored is the one its name holds (empty when just made).
        let base = match st.base {
            Base::Committed { size, .. } => size,
            Base::Staged { .. } => 0,
        };
        let stored = self.client.size(&self.path()).await.unwrap_or(base);
        st.base = Base::Committed {
            size: stored,
            cut: stored,
        };
        st.size = stored;
        st.changed = false;
        st.ahead = None;
        if let Some(p) = st.next.take() {
            p.task.abort();
        }
    }

    /// A staged upload that failed (a write or its commit: past a quota, say) is given up,
    /// and the handle falls back to the file as stored ([`FileHandle::fall_back`]): what it
    /// carried is gone and was reported as an error, so neither reads nor the size the open
    /// file shows may offer it.
    async fn give_up_staged(&self, st: &mut State, upload: &Upload) {
        st.dirty.take();
        self.client.abort_upload(upload).await;
        self.fall_back(st).await;
    }

    /// Writes out, and commits a staged file: from then on the handle changes the committed
    /// file in place.
    async fn commit(&self, st: &mut State) -> Result<(), FsError> {
        self.write_out(st).await?;
        let size = st.size;
        let Base::Staged { upload, .. } = &st.base else {
            return Ok(());
        };
        let upload: Upload = (**upload).clone();
        let r = async {
            self.client.upload_size(&upload, size).await?;
            self.client.finish_upload(upload.clone()).await
        }
        .await;
        if let Err(e) = r {
            self.give_up_staged(st, &upload).await;
            return Err(e);
        }
        st.base = Base::Committed { size, cut: size };
        st.changed = false;
        Ok(())
    }
}

/// Microseconds since the epoch (a local change's modify time).
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Bytes `[off, end)` of the committed file at `path`, in the layout's transfer pieces, at
/// most [`PIECES_IN_FLIGHT`] at once; fewer if the file is shorter now.
async fn read_pieces(
    client: Arc<Client>,
    path: String,
    off: u64,
    end: u64,
) -> Result<Window, FsError> {
    let o = client.open(&path, false).await?;
    let step = client.stack(&o)?.transfer_bytes().max(1 << 20);
    let starts: Vec<u64> = (off..end).step_by(step as usize).collect();
    let mut out = Window {
        step,
        pieces: Vec::with_capacity(starts.len()),
    };
    for batch in starts.chunks(PIECES_IN_FLIGHT) {
        let reads = batch
            .iter()
            .map(|&s| client.read_at(&path, s, step.min(end - s)));
        for (r, &s) in futures_util::future::join_all(reads)
            .await
            .into_iter()
            .zip(batch)
        {
            let piece = r?;
            let short = (piece.len() as u64) < step.min(end - s);
            out.pieces.push(piece);
            if short {
                // The file is shorter than it was: what is missing reads as zeros.
                return Ok(out);
            }
        }
    }
    Ok(out)
}

/// Writes `runs` into a staged upload in the layout's transfer pieces, at most
/// [`PIECES_IN_FLIGHT`] at once.
async fn send_runs(
    client: &Client,
    upload: &Upload,
    runs: &[(u64, Vec<u8>)],
) -> Result<(), FsError> {
    let step = client.upload_granule(upload).await?.max(1 << 20);
    let mut pieces = vec![];
    for (off, run) in runs {
        for (i, chunk) in run.chunks(step as usize).enumerate() {
            pieces.push((off + i as u64 * step, chunk));
        }
    }
    for batch in pieces.chunks(PIECES_IN_FLIGHT) {
        let writes = batch
            .iter()
            .map(|(off, d)| client.upload_write(upload, *off, d));
        for r in futures_util::future::join_all(writes).await {
            r?;
        }
    }
    Ok(())
}

impl Client {
    /// Applies `runs` (offset, bytes) to the existing file `path`: a plaintext one-object file
    /// in place under its write lease, a file spread over several objects or encrypted as one
    /// copy-on-write change.
    pub async fn write_runs(&self, path: &str, runs: &[(u64, Vec<u8>)]) -> Result<(), FsError> {
        if runs.is_empty() {
            return Ok(());
        }
        let o = self.open(path, false).await?;
        let apply = |io: Arc<dyn FileIo>| async move {
            for (off, run) in runs {
                io.write(*off, run).await?;
            }
            Ok(())
        };
        // Under a quota the grant's escrow must reach the furthest run.
        let end = runs
            .iter()
            .map(|(off, run)| off + run.len() as u64)
            .max()
            .unwrap_or(0);
        // Encrypted files too: their content and trusted record commit together.
        if o.layout.components.len() > 1 || o.e2e.is_some() {
            return self.change(path, end, apply).await;
        }
        self.with_file_to(path, true, end, apply).await.map(|_| ())
    }

    /// Reads back up to `len` bytes at `off` of an upload's staged objects (up to the end of
    /// its furthest write: a striped layout reads up to the size it is given).
    pub async fn upload_read(&self, u: &Upload, off: u64, len: u64) -> Result<Vec<u8>, FsError> {
        let mut g = (*u.grant().await).clone();
        g.stat.size = u.written_end();
        let io = self.stack(&g)?;
        io.read(off, len)
            .await
            .map(|r| r.data)
            .map_err(|e| crate::files::io_err(u.path(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The overlay against a plain buffer: random writes and truncates.
    #[test]
    fn the_overlay_reads_back_what_was_written() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..200 {
            let mut o = Overlay::default();
            let mut model: Vec<Option<u8>> = vec![];
            for step in 0..40 {
                if next(5) == 0 {
                    let n = next(3000);
                    o.truncate(n);
                    model.truncate(n as usize);
                } else {
                    let off = next(2500);
                    let len = next(600) as usize;
                    let data: Vec<u8> = (0..len).map(|i| (i as u64 + step) as u8).collect();
                    o.write(off, &data);
                    if model.len() < off as usize + len {
                        model.resize(off as usize + len, None);
                    }
                    for (i, b) in data.iter().enumerate() {
                        model[off as usize + i] = Some(*b);
                    }
                }
                let mut out = vec![0xAAu8; 3600];
                o.read_into(0, &mut out);
                for (i, m) in model.iter().enumerate() {
                    if let Some(b) = m {
                        assert_eq!(out[i], *b, "byte {i}");
                    }
                }
                assert!(
                    out[model.len()..].iter().all(|&b| b == 0xAA),
                    "past the end"
                );
                let held: u64 = o.runs.values().map(|r| r.len() as u64).sum();
                assert_eq!(o.bytes, held);
                // Runs stay disjoint and apart (touching runs merge).
                let mut prev_end = None;
                for (&s, r) in &o.runs {
                    assert!(prev_end.is_none_or(|e| e < s), "runs touch at {s}");
                    prev_end = Some(s + r.len() as u64);
                }
            }
        }
    }
}
