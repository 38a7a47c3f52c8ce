//! The kernel's requests, one short function each: names and attributes from the manager as
//! the request's user, file contents through [`FileHandle`]s straight to and from the drives.

use crate::errno::{answer, chown_errno, errno, errno_of, user_xattr, xattr_errno, xattr_reply};
use crate::fs::{
    absent, kind_of, us_of, NasdFs, CACHED_TTL, DIRECT_READ_MIN_BYTES, MAX_READAHEAD_BYTES,
};
use crate::inodes::join;
use fuser::{
    BsdFileFlags, Errno, FileAttr, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use nasd_client::files::{Client, FsError};
use nasd_client::handle::{FileHandle, OpenOptions};
use nasd_proto::manager::{
    FileKind, MgrStatus, NAME_BYTES_MAX, RENAME_EXCHANGE, RENAME_NOREPLACE, UTIMES_ACCESSED,
    UTIMES_NOFOLLOW,
};
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

/// Largest write the kernel sends in one request (it caps this by its own limit).
const MAX_WRITE_BYTES: u32 = 1 << 20;

/// What a setattr asks for, beside the file it names.
struct Change {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
}

fn us_of_time(t: TimeOrNow) -> u64 {
    match t {
        TimeOrNow::SpecificTime(t) => us_of(t),
        TimeOrNow::Now => us_of(SystemTime::now()),
    }
}

/// The bytes `statfs` counts in (its `bsize` and `frsize`).
const STATFS_BLOCK_BYTES: u64 = 4096;
/// The files `statfs` shows free: nasd's namespace has no fixed inode table.
const STATFS_FILES_FREE: u64 = 1 << 32;
/// How stale a file's access time may get before a read moves it (Linux's `relatime`: also
/// whenever it is not after the modify time).
const RELATIME_US: u64 = 24 * 3600 * 1_000_000;

impl NasdFs {
    /// Notes `name` in `parent` as kept absent by the kernel
    /// ([`crate::inodes::Inodes::note_absent`]).
    fn keep_absent(&self, parent: INodeNo, name: &OsStr) -> bool {
        let keep_ms = CACHED_TTL.as_millis() as u64;
        let now = us_of(SystemTime::now()) / 1000;
        let name = name.to_string_lossy();
        self.inodes.note_absent(parent.0, &name, now, keep_ms)
    }

    fn entry(&self, c: &Client, path: &str, reply: ReplyEntry) {
        match self.stat_path(c, path) {
            Ok(a) => reply.entry(&self.ttl(), &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// The entry `req` just made at `path` in `parent`, with the group POSIX gives it
    /// ([`NasdFs::creator_group`]).
    fn new_entry(&self, req: &Request, parent: INodeNo, c: &Client, path: &str, reply: ReplyEntry) {
        match self.creator_group(req, parent, c, path) {
            Ok(a) => reply.entry(&self.ttl(), &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// The attributes of the entry `req` just made at `path`, its group moved to the creating
    /// process's if need be. The manager gives a new entry its creator's primary nasd group
    /// (or a set-group-ID directory's); POSIX gives it the process's group unless the
    /// directory is set-group-ID. On a shared mount, where local groups stand for nasd
    /// groups, a process running as another group gets that one, if the nasd user is in it
    /// (else the manager refuses, and the primary group stays). One more round trip, only
    /// when the groups differ.
    fn creator_group(
        &self,
        req: &Request,
        parent: INodeNo,
        c: &Client,
        path: &str,
    ) -> Result<FileAttr, Errno> {
        let a = self.stat_path(c, path)?;
        if !self.users.shared() || a.gid == req.gid() {
            return Ok(a);
        }
        let dir = self.stat_ino(c, parent)?;
        let group = self.users.nasd_group(req.gid());
        let (Some(group), false) = (group, u32::from(dir.perm) & libc::S_ISGID != 0) else {
            return Ok(a);
        };
        match self.rt.block_on(c.chown_with(path, "", &group, true)) {
            Ok(()) => self.stat_path(c, path),
            Err(e) => {
                tracing::debug!("{path} keeps its primary group, not {group}: {e}");
                Ok(a)
            }
        }
    }
    /// A setattr: what this mount wrote is committed first, as an NFS client flushes before
    /// a SETATTR, so a later commit does not undo it (a modify time set now stays). It acts on the inode the kernel names, so a
    /// symbolic link's own owners and times change (`chown -h`, `touch -h`), never what it
    /// names; a link has no mode of its own to change (`EOPNOTSUPP`, as on Linux).
    fn change(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: Option<fuser::FileHandle>,
        ch: Change,
    ) -> Result<FileAttr, Errno> {
        let c = self.who(req)?;
        let open = match fh {
            Some(f) => Some(self.open_file(f.0)?),
            None => self.open_at_ino(ino, req.uid()),
        };
        let path = match &open {
            Some(o) => o.path(),
            None => self.path(ino)?,
        };
        let attrs = ch.mode.is_some() || ch.uid.is_some() || ch.gid.is_some();
        let times = ch.atime.is_some() || ch.mtime.is_some();
        if let Some(o) = open.as_ref().filter(|_| attrs || times) {
            self.sync(o)?;
        }
        if let Some(m) = ch.mode {
            if self.lstat(&c, &path)?.kind == FileKind::Symlink {
                return Err(Errno::EOPNOTSUPP);
            }
            self.rt
                .block_on(c.chmod(&path, m & 0o7777))
                .map_err(errno)?;
        }
        if ch.uid.is_some() || ch.gid.is_some() {
            self.chown(&c, &path, ch.uid, ch.gid)?;
        }
        if let Some(size) = ch.size {
            match &open {
                Some(o) => self.rt.block_on(o.h.truncate(size)).map_err(errno)?,
                None => self.rt.block_on(c.truncate(&path, size)).map_err(errno)?,
            }
        }
        if times {
            let (a, m) = (ch.atime.map(us_of_time), ch.mtime.map(us_of_time));
            self.rt
                .block_on(c.set_times(&path, a, m, UTIMES_NOFOLLOW))
                .map_err(errno)?;
            if let Some(o) = open.as_ref().filter(|_| m.is_some()) {
                self.rt.block_on(o.h.times_set());
            }
        }
        self.stat_ino(&c, ino)
    }

    /// chown/chgrp to local ids: the nasd user and group they stand for ([`crate::users`]).
    fn chown(
        &self,
        c: &Client,
        path: &str,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<(), Errno> {
        let now = self.lstat(c, path)?;
        let a = self.attr(&now);
        let owner = match uid.filter(|&u| u != a.uid) {
            Some(u) => self.users.nasd_user(u).ok_or(Errno::EINVAL)?,
            None => String::new(),
        };
        let group = match gid.filter(|&g| g != a.gid) {
            Some(g) => self.users.nasd_group(g).ok_or(Errno::EINVAL)?,
            None => String::new(),
        };
        if owner.is_empty() && group.is_empty() {
            return Ok(());
        }
        self.rt
            .block_on(c.chown_with(path, &owner, &group, true))
            .map_err(chown_errno)
    }
    fn rename_paths(
        &self,
        req: &Request,
        from: (INodeNo, &OsStr),
        to: (INodeNo, &OsStr),
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let bits = match flags {
            f if f.is_empty() => 0,
            f if f == RenameFlags::RENAME_NOREPLACE => RENAME_NOREPLACE,
            f if f == RenameFlags::RENAME_EXCHANGE => RENAME_EXCHANGE,
            // RENAME_WHITEOUT is for overlay file systems.
            _ => return Err(Errno::EINVAL),
        };
        let c = self.who(req)?;
        let (from, to) = (self.child(from.0, from.1)?, self.child(to.0, to.1)?);
        // An upload commits only at the path it began at: commit what is open at or under
        // `from` first.
        let moving = self.moving(&from, &to);
        for (o, _) in &moving {
            self.sync(o)?;
        }
        self.rt
            .block_on(c.rename_with(&from, &to, bits))
            .map_err(errno)?;
        if bits == RENAME_EXCHANGE {
            // Each name now holds the other's file.
            let back = self.moving(&to, &from);
            self.inodes.exchanged(&from, &to);
            for (o, moved) in moving.into_iter().chain(back) {
                o.moved(&moved);
            }
            return Ok(());
        }
        self.inodes.renamed(&from, &to);
        // Open files move with their names.
        for (o, moved) in moving {
            o.moved(&moved);
        }
        Ok(())
    }

    fn open_ino(
        &self,
        req: &Request,
        ino: INodeNo,
        flags: OpenFlags,
    ) -> Result<(u64, FopenFlags), Errno> {
        let c = self.who(req)?;
        let path = self.path(ino)?;
        // One handle per file and user, shared by their descriptors, so it is opened for
        // writing whatever this descriptor may do (the kernel refuses writes through a
        // read-only descriptor). `O_TRUNC` arrives as a setattr of the size.
        let (fh, o) = self.open.open(ino.0, req.uid(), &path, || {
            let o = OpenOptions {
                write: true,
                ..Default::default()
            };
            self.rt
                .block_on(FileHandle::open(&c, &path, o))
                .map_err(errno)
        })?;
        let mut f = self.open_flags();
        let read_only = flags.acc_mode() == OpenAccMode::O_RDONLY;
        if flags.acc_mode() != OpenAccMode::O_WRONLY {
            self.relatime(&c, &path);
        }
        if read_only && self.rt.block_on(o.h.size()) >= DIRECT_READ_MIN_BYTES {
            f |= FopenFlags::FOPEN_DIRECT_IO;
        }
        Ok((fh, f))
    }

    fn create_file(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Result<(u64, FileAttr), Errno> {
        let c = self.who(req)?;
        let path = self.child(parent, name)?;
        let exclusive = flags & libc::O_EXCL != 0;
        if let Some(o) = self.open.at(&path).into_iter().find(|o| o.uid == req.uid()) {
            // Open here already: one more descriptor. If its last one closed meanwhile, the
            // file is opened below.
            if exclusive {
                return Err(Errno::EEXIST);
            }
            if let Ok((fh, o)) = self
                .open
                .open(o.ino, req.uid(), &path, || Err(Errno::ESTALE))
            {
                if flags & libc::O_TRUNC != 0 {
                    self.rt.block_on(o.h.truncate(0)).map_err(errno)?;
                }
                return Ok((fh, self.stat_path(&c, &path)?));
            }
        }
        // A new file has its name from here on (an empty version at the manager); an
        // exclusive create keeps it only if no other client took the name first. The kernel
        // asks only for names its lookup did not find, so the name is tried at once; one
        // that exists after all is opened below.
        let made = self
            .rt
            .block_on(FileHandle::create_now(&c, &path, mode, exclusive))
            .map_err(errno)?;
        let made_here = made.is_some();
        let h = match made {
            Some(h) => h,
            None if exclusive => return Err(Errno::EEXIST),
            None => {
                let o = OpenOptions {
                    write: true,
                    create: true,
                    truncate: flags & libc::O_TRUNC != 0,
                    mode,
                };
                self.rt
                    .block_on(FileHandle::open(&c, &path, o))
                    .map_err(errno)?
            }
        };
        self.open.committed();
        let ino = self.inodes.fuse_ino(h.ino());
        let (fh, _) = self
            .open
            .open(ino, req.uid(), &path, || Ok::<_, Errno>(h))?;
        if made_here {
            return Ok((fh, self.creator_group(req, parent, &c, &path)?));
        }
        Ok((fh, self.stat_path(&c, &path)?))
    }
    /// Moves a file's access time as Linux's `relatime` does when a reader opens it: if the
    /// access time is not after the modify time, or is a day old. In the background: an open
    /// does not wait for it, and a refusal is only logged.
    fn relatime(&self, c: &Arc<Client>, path: &str) {
        let Ok(st) = self.rt.block_on(c.lstat(path)) else {
            return;
        };
        let now = us_of(SystemTime::now());
        if st.atime_us > st.mtime_us && now < st.atime_us + RELATIME_US {
            return;
        }
        let (c, path) = (c.clone(), path.to_string());
        self.rt.spawn(async move {
            if let Err(e) = c.set_times(&path, Some(now), None, UTIMES_ACCESSED).await {
                tracing::debug!("access time of {path} not moved: {e}");
            }
        });
    }

    /// A FIFO, socket or device node (or, as `mknod` may be asked, an empty regular file).
    fn make_node(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Result<(Arc<Client>, String), Errno> {
        let c = self.who(req)?;
        let p = self.child(parent, name)?;
        let kind = match mode & libc::S_IFMT {
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            libc::S_IFREG => {
                let made = FileHandle::create_now(&c, &p, mode & 0o7777, true);
                let h = self.rt.block_on(made).map_err(errno)?;
                let h = h.ok_or(Errno::EEXIST)?;
                self.rt.block_on(h.close()).map_err(errno)?;
                return Ok((c, p));
            }
            _ => return Err(Errno::EINVAL),
        };
        let made = c.mknod(&p, kind, mode & 0o7777, u64::from(rdev));
        self.rt.block_on(made).map_err(|e| match e.status() {
            // mknod(2) of a device without the right to: EPERM.
            Some(MgrStatus::PermissionDenied) if kind != FileKind::Fifo => Errno::EPERM,
            _ => errno_of(&e),
        })?;
        Ok((c, p))
    }

    fn list_dir(&self, req: &Request, ino: INodeNo) -> Result<u64, Errno> {
        let c = self.who(req)?;
        let path = self.path(ino)?;
        let list = self.rt.block_on(c.list(&path)).map_err(errno)?;
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
    }

    fn set_xattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &str,
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        let c = self.who(req)?;
        let p = self.path(ino)?;
        self.rt.block_on(async {
            if flags & (libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
                let (_, x) = c.getxattrs(&p).await.map_err(errno)?;
                let has = x.iter().any(|a| a.name == name);
                if flags & libc::XATTR_CREATE != 0 && has {
                    return Err(Errno::EEXIST);
                }
                if flags & libc::XATTR_REPLACE != 0 && !has {
                    return Err(Errno::ENODATA);
                }
            }
            c.setxattr(&p, name, Some(value))
                .await
                .map_err(|e| xattr_errno(&e))
        })
    }

    /// The extended attributes of `ino`, as `req`'s user reads them.
    fn xattrs(
        &self,
        req: &Request,
        ino: INodeNo,
    ) -> Result<Vec<nasd_proto::manager::Xattr>, Errno> {
        let c = self.who(req)?;
        let p = self.path(ino)?;
        self.rt
            .block_on(c.getxattrs(&p))
            .map(|(_, x)| x)
            .map_err(errno)
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
        // Locks go to this file system (and on to the manager) instead of staying in this
        // host's kernel: `fcntl` locks, and `flock` sent as whole-file locks.
        let locks = fuser::InitFlags::FUSE_POSIX_LOCKS | fuser::InitFlags::FUSE_FLOCK_LOCKS;
        if let Err(missing) = config.add_capabilities(locks) {
            tracing::warn!("the kernel keeps some locks local to this host: {missing:?}");
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.drop_locks();
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        self.get_lock(req, ino, fh.0, lock_owner, (start, end), typ, reply);
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.set_lock(req, ino, fh.0, lock_owner, (start, end), typ, sleep, reply);
    }

    /// A name that does not exist is kept absent by the kernel (a negative entry: inode 0)
    /// while callbacks hold, as a name is: the manager tells this client when it is made
    /// elsewhere, and the break drops the entry. Not on a mount shared by several users,
    /// where each asks for itself (another may not search the directory: `EACCES`).
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let (c, path) = match self
            .who(req)
            .and_then(|c| Ok((c, self.child(parent, name)?)))
        {
            Ok(found) => found,
            Err(e) => return reply.error(e),
        };
        match self.stat_path(&c, &path) {
            Ok(a) => reply.entry(&self.ttl(), &a, Generation(0)),
            Err(Errno::ENOENT)
                if !self.users.shared() && self.cached() && self.keep_absent(parent, name) =>
            {
                reply.entry(&CACHED_TTL, &absent(), Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: Option<fuser::FileHandle>,
        reply: ReplyAttr,
    ) {
        match self.who(req).and_then(|c| self.stat_ino(&c, ino)) {
            Ok(a) => reply.attr(&self.ttl(), &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<fuser::FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ch = Change {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        match self.change(req, ino, fh, ch) {
            Ok(a) => reply.attr(&self.ttl(), &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self.who(req).and_then(|c| {
            let p = self.path(ino)?;
            let t = self.rt.block_on(c.readlink(&p)).map_err(errno)?;
            Ok(self.links.shown(&p, &t))
        });
        match r {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let Some(name) = user_xattr(name) else {
            // Only `user.` attributes are kept; asking for another (the kernel asks for
            // `security.capability` before writes) costs no round trip.
            return reply.error(Errno::ENODATA);
        };
        match self.xattrs(req, ino) {
            Ok(x) => match x.into_iter().find(|a| a.name == name) {
                Some(a) => xattr_reply(reply, size, &a.value),
                None => reply.error(Errno::ENODATA),
            },
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.xattrs(req, ino) {
            Ok(x) => {
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
        req: &Request,
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
        answer(reply, self.set_xattr(req, ino, name, value, flags))
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = user_xattr(name) else {
            return reply.error(Errno::ENODATA);
        };
        let r = self.who(req).and_then(|c| {
            let p = self.path(ino)?;
            self.rt
                .block_on(c.setxattr(&p, name, None))
                .map_err(|e| match e.status() {
                    Some(MgrStatus::NoSuchPath) => Errno::ENODATA,
                    _ => xattr_errno(&e),
                })
        });
        answer(reply, r)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.who(req).and_then(|c| {
            let p = self.child(parent, name)?;
            self.rt
                .block_on(c.mkdir(&p, mode & !umask & 0o7777))
                .map_err(errno)?;
            Ok((c, p))
        });
        match r {
            Ok((c, p)) => self.new_entry(req, parent, &c, &p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .who(req)
            .and_then(|c| self.unlink_path(&c, &self.child(parent, name)?));
        answer(reply, r)
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.who(req).and_then(|c| {
            let p = self.child(parent, name)?;
            self.rt.block_on(c.rmdir(&p)).map_err(errno)
        });
        answer(reply, r)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.who(req).and_then(|c| {
            let p = self.child(parent, link_name)?;
            let t = self.links.stored(target.to_str().ok_or(Errno::EINVAL)?);
            self.rt.block_on(c.symlink(&t, &p)).map_err(errno)?;
            Ok((c, p))
        });
        match r {
            Ok((c, p)) => self.new_entry(req, parent, &c, &p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        answer(
            reply,
            self.rename_paths(req, (parent, name), (newparent, newname), flags),
        )
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.who(req).and_then(|c| {
            let (from, to) = (self.path(ino)?, self.child(newparent, newname)?);
            self.rt.block_on(c.link(&from, &to)).map_err(errno)?;
            Ok((c, to))
        });
        match r {
            Ok((c, p)) => self.entry(&c, &p, reply),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.open_ino(req, ino, flags) {
            Ok((fh, f)) => reply.opened(fuser::FileHandle(fh), f),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.create_file(req, parent, name, mode & !umask & 0o7777, flags) {
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
                .map_err(errno)
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
    /// clients (close-to-open), then the closing process's `fcntl` locks on the file are
    /// released (POSIX: any close of the file by the process releases them).
    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let synced = self.open_file(fh.0).and_then(|o| self.sync(&o));
        let released = self.release_locks(ino, fh.0, lock_owner);
        answer(reply, synced.and(released))
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // The last descriptor commits; an unlinked file then goes with its hidden name.
        let r = match self.open.release(fh.0, |o| self.sync(o)) {
            Some((o, Ok(()))) if o.unlinked() && self.open.at(&o.path()).is_empty() => self
                .rt
                .block_on(o.h.client().unlink(&o.path()))
                .map_err(errno),
            Some((_, r)) => r,
            None => Ok(()),
        };
        // Then the open file description's `flock` ends with it (the kernel names its owner
        // only when it took one).
        let released = lock_owner.map_or(Ok(()), |o| self.release_locks(ino, fh.0, o));
        answer(reply, r.and(released))
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

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.list_dir(req, ino) {
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

    /// The drives' capacity and free bytes; for a user with a quota, the quota's, when it
    /// is the smaller (as a quota'd NFS export shows it). Raw bytes: what the layouts'
    /// redundancy takes is paid from them as files are written.
    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let r = self.who(req).and_then(|c| {
            let p = self.path(ino)?;
            self.rt.block_on(c.statfs(&p)).map_err(errno)
        });
        let s = match r {
            Ok(s) => s,
            Err(e) => return reply.error(e),
        };
        let (mut total, mut free) = (s.total_bytes, s.free_bytes);
        if let Some((limit, used)) = s.quota.filter(|&(limit, _)| limit < total) {
            total = limit;
            free = free.min(limit.saturating_sub(used));
        }
        let b = STATFS_BLOCK_BYTES;
        reply.statfs(
            total / b,
            free / b,
            free / b,
            s.files + STATFS_FILES_FREE,
            STATFS_FILES_FREE,
            b as u32,
            NAME_BYTES_MAX as u32,
            b as u32,
        );
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let mode = (mode & libc::S_IFMT) | (mode & !umask & 0o7777);
        match self.make_node(req, parent, name, mode, rdev) {
            Ok((c, p)) => self.new_entry(req, parent, &c, &p, reply),
            Err(e) => reply.error(e),
        }
    }
}
