//! The baseline's FUSE client (`nasd lab andrew-mount`): the baseline server's files as a
//! mounted directory, every kernel request turned into one request to the server
//! ([`super::proto`]). It mirrors nasd's own mount (`nasd-fuse`) where the two could differ
//! for reasons other than the data path: the same kernel options and event-loop threads, the
//! same inode bookkeeping ([`nasd_fuse::Inodes`]), and no caching of names or attributes
//! (a zero time to live). Writes go to the server as the kernel sends them, and closing (or
//! fsyncing) a file this mount wrote sends a commit, as an NFSv3 client does: data is on the
//! server's disk when `close` returns, as it is on the drive with nasd's mount.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};
use nasd_fuse::{Inodes, FUSE_THREADS};

use super::proto::Request as ServerRequest;
use super::proto::{self, Attr, Kind, Op, Reply, DATA_BYTES_MAX};
use crate::error::LabError;

/// Names and attributes are not cached by the kernel, as in nasd's mount.
const TTL: Duration = Duration::ZERO;
/// Block size `stat` shows, as nasd's mount does.
const BLOCK_BYTES: u32 = 1 << 20;
/// Largest write the kernel sends in one request: one protocol write.
const MAX_WRITE_BYTES: u32 = DATA_BYTES_MAX as u32;
/// Largest read-ahead the kernel asks for, as nasd's mount.
const MAX_READAHEAD_BYTES: u32 = 8 << 20;
/// Idle connections kept for reuse (one per event-loop thread is enough).
const IDLE_CONNECTIONS_MAX: usize = FUSE_THREADS;
/// How long a request may wait for the server's reply.
const REPLY_TIMEOUT_MS: u64 = 30_000;

/// Mounts the baseline server at `server` on `mountpoint` and serves it until unmounted.
pub fn serve(server: SocketAddr, mountpoint: &Path) -> Result<(), LabError> {
    let fs = BaselineFs::connect(server)?;
    let mut c = fuser::Config::default();
    c.mount_options = vec![
        fuser::MountOption::FSName("andrew-baseline".into()),
        fuser::MountOption::Subtype("andrew-baseline".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    c.n_threads = Some(FUSE_THREADS);
    fuser::mount(fs, mountpoint, &c)
        .map_err(|e| LabError::Baseline(format!("mounting at {}: {e}", mountpoint.display())))
}

/// A directory as opendir saw it: (inode, kind, name) per entry, `.` and `..` first.
type Listing = Vec<(u64, FileType, String)>;

/// An open file: its path, and whether it was written since its last commit.
struct OpenFile {
    path: String,
    dirty: bool,
}

/// The mounted file system: a path per inode, a path per open file.
pub struct BaselineFs {
    server: SocketAddr,
    idle: Mutex<Vec<TcpStream>>,
    inodes: Inodes,
    files: Mutex<HashMap<u64, OpenFile>>,
    /// Directory listings taken at opendir, by handle.
    dirs: Mutex<HashMap<u64, Listing>>,
    next_fh: AtomicU64,
}

fn kind_of(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
    }
}

fn time_of(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}

fn name_str(name: &OsStr) -> Result<&str, Errno> {
    name.to_str().ok_or(Errno::EINVAL)
}

fn answer(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl BaselineFs {
    /// Connects to the server and reads its root's attributes.
    pub fn connect(server: SocketAddr) -> Result<BaselineFs, LabError> {
        let mut fs = BaselineFs {
            server,
            idle: Mutex::new(vec![]),
            inodes: Inodes::new("/", 0),
            files: Default::default(),
            dirs: Default::default(),
            next_fh: AtomicU64::new(1),
        };
        let root = fs
            .stat("/")
            .map_err(|e| LabError::Baseline(format!("the server's root at {server}: {e:?}")))?;
        fs.inodes = Inodes::new("/", root.ino);
        Ok(fs)
    }

    /// One request and its reply, on an idle connection or a new one. A reply that is an
    /// error becomes its errno; a connection that fails is dropped and the request fails
    /// with EIO.
    fn call(&self, path: &str, op: Op) -> Result<Reply, Errno> {
        let conn = self.idle.lock().expect("idle lock").pop();
        let mut conn = match conn {
            Some(c) => c,
            None => self.dial().map_err(|e| {
                tracing::warn!("baseline client: connecting to {}: {e}", self.server);
                Errno::EIO
            })?,
        };
        let req = ServerRequest {
            path: path.to_string(),
            op,
        };
        let r = (|| -> std::io::Result<Reply> {
            proto::write_frame(&mut conn, &req.encode())?;
            let body = proto::read_frame(&mut conn)?
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
            Reply::decode(&body)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })();
        let reply = r.map_err(|e| {
            tracing::warn!("baseline client: {path}: {e}");
            Errno::EIO
        })?;
        let mut idle = self.idle.lock().expect("idle lock");
        if idle.len() < IDLE_CONNECTIONS_MAX {
            idle.push(conn);
        }
        drop(idle);
        match reply {
            Reply::Error(code) => Err(Errno::from_i32(code.errno())),
            r => Ok(r),
        }
    }

    fn dial(&self) -> std::io::Result<TcpStream> {
        let c = TcpStream::connect(self.server)?;
        c.set_nodelay(true)?;
        c.set_read_timeout(Some(Duration::from_millis(REPLY_TIMEOUT_MS)))?;
        Ok(c)
    }

    fn attr_reply(&self, path: &str, op: Op) -> Result<Attr, Errno> {
        match self.call(path, op)? {
            Reply::Attr(a) => Ok(a),
            _ => Err(Errno::EIO),
        }
    }

    fn done(&self, path: &str, op: Op) -> Result<(), Errno> {
        match self.call(path, op)? {
            Reply::Done => Ok(()),
            _ => Err(Errno::EIO),
        }
    }

    fn stat(&self, path: &str) -> Result<Attr, Errno> {
        self.attr_reply(path, Op::Stat)
    }

    /// The kernel's view of `a`, found at `path`.
    fn attr(&self, a: &Attr, path: &str) -> FileAttr {
        let ino = self.inodes.fuse_ino(a.ino);
        self.inodes.saw(ino, path);
        FileAttr {
            ino: INodeNo(ino),
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: time_of(a.mtime_us),
            mtime: time_of(a.mtime_us),
            ctime: time_of(a.ctime_us),
            crtime: time_of(a.ctime_us),
            kind: kind_of(a.kind),
            perm: (a.mode & 0o7777) as u16,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: 0,
            blksize: BLOCK_BYTES,
            flags: 0,
        }
    }

    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        self.inodes.path(ino.0).ok_or(Errno::ESTALE)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        Ok(join(&self.path(parent)?, name_str(name)?))
    }

    fn entry(&self, r: Result<(String, Attr), Errno>, reply: ReplyEntry) {
        match r {
            Ok((p, a)) => reply.entry(&TTL, &self.attr(&a, &p), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn add_open(&self, path: &str) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let f = OpenFile {
            path: path.to_string(),
            dirty: false,
        };
        self.files.lock().expect("files lock").insert(fh, f);
        fh
    }

    fn open_path(&self, fh: u64) -> Result<String, Errno> {
        self.files
            .lock()
            .expect("files lock")
            .get(&fh)
            .map(|f| f.path.clone())
            .ok_or(Errno::EBADF)
    }

    /// Marks `fh` written (`true`) or committed (`false`); returns whether it was written.
    fn set_dirty(&self, fh: u64, dirty: bool) -> Result<bool, Errno> {
        let mut files = self.files.lock().expect("files lock");
        let f = files.get_mut(&fh).ok_or(Errno::EBADF)?;
        Ok(std::mem::replace(&mut f.dirty, dirty))
    }

    /// Sends a commit for `fh` if it was written since the last one.
    fn commit(&self, fh: u64) -> Result<(), Errno> {
        let path = self.open_path(fh)?;
        if self.set_dirty(fh, false)? {
            if let Err(e) = self.done(&path, Op::Commit) {
                self.set_dirty(fh, true)?;
                return Err(e);
            }
        }
        Ok(())
    }
}

impl Filesystem for BaselineFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE_BYTES);
        let _ = config.set_max_readahead(MAX_READAHEAD_BYTES);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self
            .child(parent, name)
            .and_then(|p| self.stat(&p).map(|a| (p, a)));
        self.entry(r, reply)
    }

    fn getattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Option<fuser::FileHandle>,
        reply: ReplyAttr,
    ) {
        match self.path(ino).and_then(|p| self.stat(&p).map(|a| (p, a))) {
            Ok((p, a)) => reply.attr(&TTL, &self.attr(&a, &p)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<fuser::FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = (|| -> Result<(String, Attr), Errno> {
            let path = self.path(ino)?;
            if uid.is_some() || gid.is_some() {
                // The server's files belong to the server's user; owners do not change.
                let now = self.stat(&path)?;
                if uid.is_some_and(|u| u != now.uid) || gid.is_some_and(|g| g != now.gid) {
                    return Err(Errno::EPERM);
                }
            }
            let mut a = None;
            if let Some(m) = mode {
                a = Some(self.attr_reply(&path, Op::Chmod { mode: m & 0o7777 })?);
            }
            if let Some(size) = size {
                a = Some(self.attr_reply(&path, Op::Truncate { size })?);
            }
            if let Some(t) = mtime {
                let t = match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                };
                let mtime_us = t
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_micros() as u64)
                    .unwrap_or(0);
                a = Some(self.attr_reply(&path, Op::Utimes { mtime_us })?);
            }
            let a = match a {
                Some(a) => a,
                None => self.stat(&path)?,
            };
            Ok((path, a))
        })();
        match r {
            Ok((p, a)) => reply.attr(&TTL, &self.attr(&a, &p)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.child(parent, name).and_then(|p| {
            let mode = mode & !umask & 0o7777;
            self.attr_reply(&p, Op::Mkdir { mode }).map(|a| (p, a))
        });
        self.entry(r, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .child(parent, name)
            .and_then(|p| self.done(&p, Op::Unlink));
        answer(reply, r)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .child(parent, name)
            .and_then(|p| self.done(&p, Op::Rmdir));
        answer(reply, r)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let r = (|| {
            let (from, to) = (self.child(parent, name)?, self.child(newparent, newname)?);
            self.done(&from, Op::Rename { to: to.clone() })?;
            self.inodes.renamed(&from, &to);
            let under = format!("{from}/");
            for f in self.files.lock().expect("files lock").values_mut() {
                if f.path == from {
                    f.path = to.clone();
                } else if let Some(rest) = f.path.strip_prefix(&under) {
                    f.path = join(&to, rest);
                }
            }
            Ok(())
        })();
        answer(reply, r)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let path = self.path(ino)?;
            if flags.0 & libc::O_TRUNC != 0 {
                self.attr_reply(&path, Op::Truncate { size: 0 })?;
            } else {
                self.stat(&path)?;
            }
            Ok(self.add_open(&path))
        })();
        match r {
            Ok(fh) => reply.opened(fuser::FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            let path = self.child(parent, name)?;
            let mode = mode & !umask & 0o7777;
            let a = self.attr_reply(&path, Op::Create { mode })?;
            Ok((self.add_open(&path), self.attr(&a, &path)))
        })();
        match r {
            Ok((fh, a)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                fuser::FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.open_path(fh.0).and_then(|p| {
            let length = size.min(DATA_BYTES_MAX as u32);
            match self.call(&p, Op::Read { offset, length })? {
                Reply::Data(d) => Ok(d),
                _ => Err(Errno::EIO),
            }
        });
        match r {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.open_path(fh.0).and_then(|p| {
            let mut done = 0usize;
            // The kernel sends at most max_write; split anyway, so a larger grant still works.
            for piece in data.chunks(DATA_BYTES_MAX) {
                let op = Op::Write {
                    offset: offset + done as u64,
                    data: piece.to_vec(),
                };
                match self.call(&p, op)? {
                    Reply::Written(n) if n as usize == piece.len() => done += piece.len(),
                    _ => return Err(Errno::EIO),
                }
            }
            self.set_dirty(fh.0, true)?;
            Ok(done as u32)
        });
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        answer(reply, self.commit(fh.0))
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.commit(fh.0);
        self.files.lock().expect("files lock").remove(&fh.0);
        answer(reply, r)
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        answer(reply, self.commit(fh.0))
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let path = self.path(ino)?;
            let Reply::Entries(list) = self.call(&path, Op::List)? else {
                return Err(Errno::EIO);
            };
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".to_string()),
                (ino.0, FileType::Directory, "..".to_string()),
            ];
            for (name, a) in list {
                let i = self.inodes.fuse_ino(a.ino);
                self.inodes.saw(i, &join(&path, &name));
                entries.push((i, kind_of(a.kind), name));
            }
            let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
            self.dirs.lock().expect("dirs lock").insert(fh, entries);
            Ok(fh)
        })();
        match r {
            Ok(fh) => reply.opened(fuser::FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dirs = self.dirs.lock().expect("dirs lock");
        let Some(entries) = dirs.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().expect("dirs lock").remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // As nasd's mount: a large file system, so tools that check free space proceed.
        let blocks = 1u64 << 40 >> 12;
        reply.statfs(
            blocks,
            blocks / 2,
            blocks / 2,
            1 << 32,
            1 << 31,
            4096,
            255,
            4096,
        );
    }
}

/// `dir`/`name` as a server path.
fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}
