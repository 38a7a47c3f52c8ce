//! The kernel's requests answered through the client library: names and attributes from the
//! manager (as this mount's user), file contents through [`FileHandle`]s straight to and from
//! the drives. Every call waits on the client's runtime; several event-loop threads serve
//! the kernel at once.

use crate::inodes::{join, Inodes};
use crate::open::{Open, OpenFiles};
use fuser::{
    BsdFileFlags, Errno, FileAttr, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use nasd_client::files::{Client, FsError};
use nasd_client::handle::{FileHandle, OpenOptions};
use nasd_proto::manager::{FileKind, FileStat, MgrStatus};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may keep names and attributes while the client's callback channel
/// polls: a change elsewhere breaks the callback and drops them at once ([`crate::invalidate`]),
/// and a break that got lost (the channel failed) is healed within this time.
pub const CACHED_TTL: Duration = Duration::from_secs(1);
/// The block size `stat` shows: large, so `cp` and friends move data in large requests.
const BLOCK_BYTES: u32 = 1 << 20;
/// Largest write the kernel sends in one request (it caps this by its own limit).
const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Largest read-ahead the kernel asks for (seed 002 §4.5's largest window).
pub(crate) const MAX_READAHEAD_BYTES: u32 = 8 << 20;
/// A file at least this large opened for reading only is read past the kernel's page cache
/// (direct I/O): the client's read-ahead already holds the data verified, and the kernel then
/// copies each reply once, straight into the reader's buffer, instead of filling the page
/// cache and copying again (a 256 MiB stream through the mount went from 0.6x to about 0.8x of
/// `nasd cp`; docs/performance.md). Smaller files keep their pages across opens, where
/// caching pays (headers read by every compile, for one).
pub(crate) const DIRECT_READ_MIN_BYTES: u64 = 8 << 20;

/// The hidden name an unlinked open file is kept under (NFS's "silly rename"): its data
/// stays readable and writable through the descriptors that have it open, and goes at the
/// last close.
pub const UNLINKED_PREFIX: &str = ".nasd-unlinked-";

/// A directory as opendir saw it: (inode, kind, name) per entry, `.` and `..` first.
type Listing = Vec<(u64, FileType, String)>;

pub struct NasdFs {
    client: Arc<Client>,
    rt: tokio::runtime::Handle,
    inodes: Arc<Inodes>,
    /// Open files, one per inode, shared by their descriptors.
    open: OpenFiles,
    /// Files created here and not committed yet, by path: this mount shows them.
    pending: Mutex<HashMap<String, Arc<Open>>>,
    /// Directory listings taken at opendir, by handle (stable offsets while it is read).
    dirs: Mutex<HashMap<u64, Listing>>,
}

/// The errno a failed client call means to a program.
/// `name` when it is a `user.` extended attribute (the only namespace the manager keeps).
fn user_xattr(name: &OsStr) -> Option<&str> {
    name.to_str().filter(|n| n.starts_with("user."))
}

/// Answers a get or list of extended attributes: the size when asked for it (`size` 0), the
/// bytes when they fit, `ERANGE` otherwise.
fn xattr_reply(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() <= size as usize {
        reply.data(value);
    } else {
        reply.error(Errno::ERANGE);
    }
}

/// An extended attribute refused for its size or name is `E2BIG`/`ERANGE` to the caller.
fn xattr_errno(e: &FsError) -> Errno {
    match e.status() {
        Some(MgrStatus::InvalidArgument) => Errno::E2BIG,
        _ => errno_of(e),
    }
}

pub fn errno_of(e: &FsError) -> Errno {
    let Some(s) = e.status() else {
        return match e.drive_status() {
            Some(nasd_proto::Status::DiskFull) => Errno::ENOSPC,
            _ => Errno::EIO,
        };
    };
    match s {
        MgrStatus::NoSuchPath => Errno::ENOENT,
        MgrStatus::Exists => Errno::EEXIST,
        MgrStatus::NotEmpty => Errno::ENOTEMPTY,
        MgrStatus::NotADirectory => Errno::ENOTDIR,
        MgrStatus::IsADirectory => Errno::EISDIR,
        MgrStatus::PermissionDenied => Errno::EACCES,
        MgrStatus::NameTooLong => Errno::ENAMETOOLONG,
        MgrStatus::BadName | MgrStatus::InvalidArgument => Errno::EINVAL,
        MgrStatus::TooManyLinks => Errno::ELOOP,
        MgrStatus::DiskFull => Errno::ENOSPC,
        MgrStatus::QuotaExceeded => Errno::EDQUOT,
        MgrStatus::Busy => Errno::EBUSY,
        MgrStatus::NotLoggedIn | MgrStatus::SessionExpired | MgrStatus::WrongPassword => {
            Errno::EACCES
        }
        _ => Errno::EIO,
    }
}

/// Answers a request whose reply carries nothing but success or an errno.
fn answer(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn kind_of(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
    }
}

fn time_of(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}

fn us_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn name_str(name: &OsStr) -> Result<&str, Errno> {
    // nasd names are UTF-8.
    name.to_str().ok_or(Errno::EINVAL)
}

impl NasdFs {
    /// A file system showing the cluster's directory `remote` (which must exist).
    pub fn new(
        client: Arc<Client>,
        rt: tokio::runtime::Handle,
        remote: &str,
    ) -> std::io::Result<NasdFs> {
        let st = rt
            .block_on(client.stat(remote))
            .map_err(|e| std::io::Error::other(format!("{remote}: {e}")))?;
        if st.kind != FileKind::Dir {
            return Err(std::io::Error::other(format!("{remote}: not a directory")));
        }
        Ok(NasdFs {
            client,
            rt,
            inodes: Arc::new(Inodes::new(remote, st.ino)),
            open: OpenFiles::new(),
            pending: Default::default(),
            dirs: Default::default(),
        })
    }

    /// The inode table (the callback hook maps the manager's numbers with it).
    pub fn inodes(&self) -> Arc<Inodes> {
        self.inodes.clone()
    }

    /// Whether the kernel may cache: while callbacks tell of every change elsewhere. Without
    /// them nothing is kept, so every open sees what other clients closed (close-to-open
    /// consistency, as NFS gives).
    fn cached(&self) -> bool {
        self.client.callbacks.live(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        )
    }

    /// How long the kernel may keep a name or attributes given now.
    fn ttl(&self) -> Duration {
        if self.cached() {
            CACHED_TTL
        } else {
            Duration::ZERO
        }
    }

    /// How an open file's pages are kept: across opens while callbacks tell of changes.
    fn open_flags(&self) -> FopenFlags {
        if self.cached() {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    fn attr(&self, s: &FileStat) -> FileAttr {
        FileAttr {
            ino: INodeNo(self.inodes.fuse_ino(s.ino)),
            size: s.size,
            blocks: s.size.div_ceil(512),
            atime: time_of(s.mtime_us),
            mtime: time_of(s.mtime_us),
            ctime: time_of(s.ctime_us),
            crtime: time_of(s.ctime_us),
            kind: kind_of(s.kind),
            perm: (s.mode & 0o7777) as u16,
            nlink: s.nlink,
            uid: s.uid,
            gid: s.gid,
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

    /// The stat of `path`: a file created here and not committed yet from its handle, else
    /// the manager's.
    fn lstat(&self, path: &str) -> Result<FileStat, Errno> {
        let pending = self
            .pending
            .lock()
            .expect("pending lock")
            .get(path)
            .cloned();
        if let Some(st) = pending.and_then(|o| self.rt.block_on(o.h.staged_stat())) {
            return Ok(st);
        }
        self.rt
            .block_on(self.client.lstat(path))
            .map_err(|e| errno_of(&e))
    }

    /// `a` as the open file `o` shows it: the size and modify time its handle gave the file,
    /// and one name fewer once it was unlinked (it lives on under a hidden name).
    fn local(&self, mut a: FileAttr, o: &Open) -> FileAttr {
        if let Some((size, mtime_us)) = self.rt.block_on(o.h.local_attrs()) {
            a.size = size;
            a.blocks = size.div_ceil(512);
            a.mtime = time_of(mtime_us);
            a.ctime = a.ctime.max(a.mtime);
        }
        if o.unlinked() {
            a.nlink = a.nlink.saturating_sub(1);
        }
        a
    }

    /// The attributes of `path` as this mount sees them (see [`crate::open`]): a file open
    /// here shows what its handle wrote; a stat that raced a commit here is taken again.
    fn stat_path(&self, path: &str) -> Result<FileAttr, Errno> {
        let epoch = self.open.epoch();
        let st = self.lstat(path)?;
        let ino = self.inodes.fuse_ino(st.ino);
        let a = self.open.view(ino, |open| {
            // A commit here may have landed after the stat read the manager (and the file
            // been opened again since, by a handle that has written nothing yet): read
            // again, now that no commit of this file by a handle without changes can start.
            let st = match self.open.epoch() == epoch {
                true => st,
                false => self.lstat(path)?,
            };
            Ok::<_, Errno>(match open {
                Some(o) => self.local(self.attr(&st), o),
                None => self.attr(&st),
            })
        })?;
        self.inodes.saw(a.ino.0, path);
        Ok(a)
    }

    /// The attributes of the kernel's inode `ino`: through its open file's path while it is
    /// open here (an unlinked one is at its hidden name), else its last path.
    fn stat_ino(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        self.open.view(ino.0, |open| match open {
            Some(o) => {
                let st = self.lstat(&o.path())?;
                Ok(self.local(self.attr(&st), o))
            }
            None => {
                let st = self.lstat(&self.path(ino)?)?;
                Ok(self.attr(&st))
            }
        })
    }

    /// The file open here as kernel inode `ino`, if any.
    fn open_at_ino(&self, ino: INodeNo) -> Option<Arc<Open>> {
        self.open.view(ino.0, |o| o.cloned())
    }

    fn entry(&self, path: &str, reply: ReplyEntry) {
        match self.stat_path(path) {
            Ok(a) => reply.entry(&self.ttl(), &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open_file(&self, fh: u64) -> Result<Arc<Open>, Errno> {
        self.open.get(fh).ok_or(Errno::EBADF)
    }

    /// Commits what `o` wrote (a new file appears under its name).
    fn sync(&self, o: &Open) -> Result<(), Errno> {
        let r = self.rt.block_on(o.h.fsync()).map_err(|e| errno_of(&e));
        self.open.committed();
        r?;
        self.pending.lock().expect("pending lock").remove(&o.path());
        Ok(())
    }

    /// Unlinks `path`; a file open here moves to a hidden name instead and goes at its last
    /// close (POSIX: an unlinked file stays usable through open descriptors).
    fn unlink_path(&self, path: &str) -> Result<(), Errno> {
        let open = self.open.at(path);
        let e = |e: FsError| errno_of(&e);
        let Some(first) = open.first() else {
            return self.rt.block_on(self.client.unlink(path)).map_err(e);
        };
        // A new file is committed first, so there is a name to move.
        for o in &open {
            self.sync(o)?;
        }
        let (dir, _) = path.rsplit_once('/').unwrap_or(("", path));
        let hidden = join(
            if dir.is_empty() { "/" } else { dir },
            &format!("{UNLINKED_PREFIX}{}", first.h.ino()),
        );
        self.rt
            .block_on(self.client.rename(path, &hidden))
            .map_err(e)?;
        for o in &open {
            o.moved(&hidden);
            o.set_unlinked();
            self.inodes.saw(o.ino, &hidden);
        }
        Ok(())
    }
}

impl Filesystem for NasdFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The kernel caps both by its own limits; whatever it grants is fine.
        let _ = config.set_max_write(MAX_WRITE_BYTES);
        let _ = config.set_max_readahead(MAX_READAHEAD_BYTES);
        // Shared maps of a file read with direct I/O (kernel 6.6 and later; before, such a
        // map of a large file fails with ENODEV, private maps and exec work either way).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name) {
            Ok(p) => self.entry(&p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Option<fuser::FileHandle>,
        reply: ReplyAttr,
    ) {
        match self.stat_ino(ino) {
            Ok(a) => reply.attr(&self.ttl(), &a),
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
        fh: Option<fuser::FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = (|| -> Result<FileAttr, Errno> {
            let open = match fh {
                Some(f) => Some(self.open_file(f.0)?),
                None => self.open_at_ino(ino),
            };
            let path = match &open {
                Some(o) => o.path(),
                None => self.path(ino)?,
            };
            let e = |e: FsError| errno_of(&e);
            // What this mount wrote is committed first, as an NFS client flushes before a
            // SETATTR: a new file then has its name for the manager's change, and a later
            // commit does not undo the change (a modify time set now stays).
            if let Some(o) = open
                .as_ref()
                .filter(|_| mode.is_some() || uid.is_some() || gid.is_some() || mtime.is_some())
            {
                self.sync(o)?;
            }
            if let Some(m) = mode {
                self.rt
                    .block_on(self.client.chmod(&path, m & 0o7777))
                    .map_err(e)?;
            }
            if uid.is_some() || gid.is_some() {
                // The mount shows the manager's uids and gids, so the kernel's numbers name
                // nasd users and groups; the manager decides who may give what away.
                let now = self.lstat(&path)?;
                let owner = uid.filter(|&u| u != now.uid).map(|u| u.to_string());
                let group = gid.filter(|&g| g != now.gid).map(|g| g.to_string());
                if owner.is_some() || group.is_some() {
                    self.rt
                        .block_on(self.client.chown(
                            &path,
                            owner.as_deref().unwrap_or(""),
                            group.as_deref().unwrap_or(""),
                        ))
                        .map_err(|x| match x.status() {
                            // chown(2): EPERM when the caller may not give the file away, and
                            // EINVAL for an id no user or group of the cluster has.
                            Some(MgrStatus::PermissionDenied) => Errno::EPERM,
                            Some(MgrStatus::UnknownUser | MgrStatus::UnknownGroup) => Errno::EINVAL,
                            _ => e(x),
                        })?;
                }
            }
            if let Some(size) = size {
                match &open {
                    Some(o) => self.rt.block_on(o.h.truncate(size)).map_err(e)?,
                    None => self
                        .rt
                        .block_on(self.client.truncate(&path, size))
                        .map_err(e)?,
                }
            }
            if let Some(t) = mtime {
                let us = match t {
                    TimeOrNow::SpecificTime(t) => us_of(t),
                    TimeOrNow::Now => us_of(SystemTime::now()),
                };
                self.rt.block_on(self.client.utimes(&path, us)).map_err(e)?;
            }
            self.stat_ino(ino)
        })();
        match r {
            Ok(a) => reply.attr(&self.ttl(), &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self.path(ino).and_then(|p| {
            self.rt
                .block_on(self.client.readlink(&p))
                .map_err(|e| errno_of(&e))
        });
        match r {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let Some(name) = user_xattr(name) else {
            // Only `user.` attributes are kept; asking for another (the kernel asks for
            // `security.capability` before writes) costs no round trip.
            return reply.error(Errno::ENODATA);
        };
        let r = self.path(ino).and_then(|p| {
            self.rt
                .block_on(self.client.getxattrs(&p))
                .map_err(|e| errno_of(&e))
        });
        match r {
            Ok((_, x)) => match x.into_iter().find(|a| a.name == name) {
                Some(a) => xattr_reply(reply, size, &a.value),
                None => reply.error(Errno::ENODATA),
            },
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.path(ino).and_then(|p| {
            self.rt
                .block_on(self.client.getxattrs(&p))
                .map_err(|e| errno_of(&e))
        });
        match r {
            Ok((_, x)) => {
                let mut names = vec![];
                for a in x {
                    names.extend_from_slice(a.name.as_bytes());
                    names.push(0);
                }
                xattr_reply(reply, size, &names)
            }
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let Some(name) = user_xattr(name) else {
            return reply.error(Errno::ENOTSUP);
        };
        let r = self.path(ino).and_then(|p| {
            self.rt.block_on(async {
                if flags & (libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
                    let (_, x) = self.client.getxattrs(&p).await.map_err(|e| errno_of(&e))?;
                    let has = x.iter().any(|a| a.name == name);
                    if flags & libc::XATTR_CREATE != 0 && has {
                        return Err(Errno::EEXIST);
                    }
                    if flags & libc::XATTR_REPLACE != 0 && !has {
                        return Err(Errno::ENODATA);
                    }
                }
                self.client
                    .setxattr(&p, name, Some(value))
                    .await
                    .map_err(|e| xattr_errno(&e))
            })
        });
        answer(reply, r)
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = user_xattr(name) else {
            return reply.error(Errno::ENODATA);
        };
        let r = self.path(ino).and_then(|p| {
            self.rt
                .block_on(self.client.setxattr(&p, name, None))
                .map_err(|e| match e.status() {
                    Some(MgrStatus::NoSuchPath) => Errno::ENODATA,
                    _ => xattr_errno(&e),
                })
        });
        answer(reply, r)
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
            self.rt
                .block_on(self.client.mkdir(&p, mode & !umask & 0o7777))
                .map_err(|e| errno_of(&e))
                .map(|()| p)
        });
        match r {
            Ok(p) => self.entry(&p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.child(parent, name).and_then(|p| self.unlink_path(&p));
        answer(reply, r)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.child(parent, name).and_then(|p| {
            self.rt
                .block_on(self.client.rmdir(&p))
                .map_err(|e| errno_of(&e))
        });
        answer(reply, r)
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.child(parent, link_name).and_then(|p| {
            let t = target.to_str().ok_or(Errno::EINVAL)?;
            self.rt
                .block_on(self.client.symlink(t, &p))
                .map_err(|e| errno_of(&e))
                .map(|()| p)
        });
        match r {
            Ok(p) => self.entry(&p, reply),
            Err(e) => reply.error(e),
        }
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
            // RENAME_NOREPLACE / RENAME_EXCHANGE: callers fall back to rename(2).
            return reply.error(Errno::EINVAL);
        }
        let r = (|| {
            let (from, to) = (self.child(parent, name)?, self.child(newparent, newname)?);
            // A file made here and still open has no name at the manager yet, and an upload
            // commits at the path it began at: commit what is open at or under `from` first.
            let under = format!("{from}/");
            let moving: Vec<(Arc<Open>, String)> = self
                .open
                .all()
                .into_iter()
                .filter_map(|o| {
                    let p = o.path();
                    let moved = match p.strip_prefix(&under) {
                        _ if p == from => to.clone(),
                        Some(rest) => join(&to, rest),
                        None => return None,
                    };
                    Some((o, moved))
                })
                .collect();
            for (o, _) in &moving {
                self.sync(o)?;
            }
            self.rt
                .block_on(self.client.rename(&from, &to))
                .map_err(|e| errno_of(&e))?;
            self.inodes.renamed(&from, &to);
            // Open files move with their names.
            for (o, moved) in moving {
                o.moved(&moved);
            }
            Ok(())
        })();
        answer(reply, r)
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let (from, to) = (self.path(ino)?, self.child(newparent, newname)?);
            self.rt
                .block_on(self.client.link(&from, &to))
                .map_err(|e| errno_of(&e))?;
            Ok(to)
        })();
        match r {
            Ok(p) => self.entry(&p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let path = self.path(ino)?;
            // One handle per file, shared by its descriptors, so it is opened for writing
            // whatever this descriptor may do (the kernel refuses writes through a read-only
            // descriptor). `O_TRUNC` arrives as a setattr of the size.
            let (fh, o) = self.open.open(ino.0, &path, || {
                let o = OpenOptions {
                    write: true,
                    ..Default::default()
                };
                self.rt
                    .block_on(FileHandle::open(&self.client, &path, o))
                    .map_err(|e| errno_of(&e))
            })?;
            let mut f = self.open_flags();
            let read_only = flags.acc_mode() == OpenAccMode::O_RDONLY;
            if read_only && self.rt.block_on(o.h.size()) >= DIRECT_READ_MIN_BYTES {
                f |= FopenFlags::FOPEN_DIRECT_IO;
            }
            Ok((fh, f))
        })();
        match r {
            Ok((fh, f)) => reply.opened(fuser::FileHandle(fh), f),
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
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            let path = self.child(parent, name)?;
            let mode = mode & !umask & 0o7777;
            if let Some(o) = self.open.at(&path).into_iter().next() {
                // Made here and still open (so not yet at the manager): one more descriptor.
                // If its last one closed meanwhile, it is committed and found below.
                if flags & libc::O_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                if let Ok((fh, o)) = self.open.open(o.ino, &path, || Err(Errno::ESTALE)) {
                    if flags & libc::O_TRUNC != 0 {
                        self.rt
                            .block_on(o.h.truncate(0))
                            .map_err(|e| errno_of(&e))?;
                    }
                    return Ok((fh, self.stat_path(&path)?));
                }
            }
            if flags & libc::O_EXCL != 0 && self.rt.block_on(self.client.lstat(&path)).is_ok() {
                return Err(Errno::EEXIST);
            }
            let o = OpenOptions {
                write: true,
                create: true,
                truncate: flags & libc::O_TRUNC != 0,
                mode,
            };
            let h = self
                .rt
                .block_on(FileHandle::open(&self.client, &path, o))
                .map_err(|e| errno_of(&e))?;
            let fresh = self.rt.block_on(h.staged());
            let ino = self.inodes.fuse_ino(h.ino());
            let (fh, open) = self.open.open(ino, &path, || Ok::<_, Errno>(h))?;
            if fresh {
                self.pending
                    .lock()
                    .expect("pending lock")
                    .insert(path.clone(), open.clone());
            }
            Ok((fh, self.stat_path(&path)?))
        })();
        match r {
            Ok((fh, a)) => reply.created(
                &self.ttl(),
                &a,
                Generation(0),
                fuser::FileHandle(fh),
                self.open_flags(),
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
        let r = self.open_file(fh.0).and_then(|o| {
            self.rt
                .block_on(o.h.read_bytes(offset, u64::from(size)))
                .map_err(|e| errno_of(&e))
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
        let r = self.open_file(fh.0).and_then(|o| {
            self.rt
                .block_on(o.h.write_at(offset, data))
                .map_err(|e| match e {
                    FsError::Usage(_) => Errno::EBADF,
                    e => errno_of(&e),
                })
        });
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    /// Called at every close of a descriptor: what was written becomes visible to other
    /// clients (close-to-open).
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        answer(reply, self.open_file(fh.0).and_then(|o| self.sync(&o)))
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
        // The last descriptor commits; an unlinked file then goes with its hidden name.
        let r = match self.open.release(fh.0, |o| self.sync(o)) {
            Some((o, Ok(()))) if o.unlinked() => self
                .rt
                .block_on(self.client.unlink(&o.path()))
                .map_err(|e| errno_of(&e)),
            Some((_, r)) => r,
            None => Ok(()),
        };
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
        answer(reply, self.open_file(fh.0).and_then(|o| self.sync(&o)))
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let path = self.path(ino)?;
            let list = self
                .rt
                .block_on(self.client.list(&path))
                .map_err(|e| errno_of(&e))?;
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".to_string()),
                (ino.0, FileType::Directory, "..".to_string()),
            ];
            for e in list {
                let i = self.inodes.fuse_ino(e.stat.ino);
                self.inodes.saw(i, &join(&path, &e.name));
                entries.push((i, kind_of(e.stat.kind), e.name));
            }
            let fh = self.open.next_fh();
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
        // The cluster's capacity is an admin's figure (`nasd status`); report a large
        // file system so tools that check free space proceed, and the name limit.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_become_the_errnos_programs_expect() {
        let mgr = |s| FsError::Manager {
            path: "/x".into(),
            error: nasd_client::session::SessionError::Refused {
                op: "test",
                status: s,
                detail: String::new(),
            },
        };
        for (s, want) in [
            (MgrStatus::NoSuchPath, Errno::ENOENT),
            (MgrStatus::Exists, Errno::EEXIST),
            (MgrStatus::NotEmpty, Errno::ENOTEMPTY),
            (MgrStatus::PermissionDenied, Errno::EACCES),
            (MgrStatus::NameTooLong, Errno::ENAMETOOLONG),
            (MgrStatus::TooManyLinks, Errno::ELOOP),
            (MgrStatus::QuotaExceeded, Errno::EDQUOT),
            (MgrStatus::IsADirectory, Errno::EISDIR),
        ] {
            assert_eq!(errno_of(&mgr(s)), want, "{s:?}");
        }
    }
}
