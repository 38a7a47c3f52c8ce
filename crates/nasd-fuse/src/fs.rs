//! The mount's state and the steps its kernel requests share: whose client answers a request
//! ([`crate::users`]), the attributes of a path or an inode as this mount sees them (files it
//! has open show what their handles wrote: [`crate::open`]), commits, and unlinking a file
//! that is still open. The kernel's requests themselves are in [`crate::kernel`]; every call
//! waits on the client's runtime, and several event-loop threads serve the kernel at once.

use crate::errno::errno;
use crate::inodes::{join, Inodes};
use crate::links::Links;
use crate::open::{Open, OpenFiles};
use crate::users::Users;
use fuser::{Errno, FileAttr, FileType, FopenFlags, INodeNo, Request};
use nasd_client::files::Client;
use nasd_proto::manager::{FileKind, FileStat};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may keep names and attributes while the clients' callback channels
/// poll: a change elsewhere breaks the callback and drops them at once ([`crate::invalidate`]),
/// and a break that got lost (a channel failed) is healed within this time.
pub const CACHED_TTL: Duration = Duration::from_secs(1);
/// The block size `stat` shows: large, so `cp` and friends move data in large requests.
pub(crate) const BLOCK_BYTES: u32 = 1 << 20;
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
pub(crate) type Listing = Vec<(u64, FileType, String)>;

pub struct NasdFs {
    pub(crate) users: Arc<Users>,
    pub(crate) rt: tokio::runtime::Handle,
    pub(crate) inodes: Arc<Inodes>,
    /// Open files, one per inode and user, shared by their descriptors.
    pub(crate) open: OpenFiles,
    /// Directory listings taken at opendir, by handle (stable offsets while it is read).
    pub(crate) dirs: Mutex<HashMap<u64, Listing>>,
    /// Link targets as the host follows them ([`crate::links`]).
    pub(crate) links: Links,
}

pub(crate) fn kind_of(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// The attributes of a negative entry: inode 0 tells the kernel the name does not exist.
pub(crate) fn absent() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLOCK_BYTES,
        flags: 0,
    }
}

pub(crate) fn time_of(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}

pub(crate) fn us_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

pub(crate) fn name_str(name: &OsStr) -> Result<&str, Errno> {
    // nasd names are UTF-8.
    name.to_str().ok_or(Errno::EINVAL)
}

impl NasdFs {
    /// A file system showing the cluster's directory `remote` (which must exist) to `users`
    /// at `mountpoint` (absolute, canonical).
    pub fn new(
        users: Arc<Users>,
        rt: tokio::runtime::Handle,
        remote: &str,
        mountpoint: &std::path::Path,
    ) -> std::io::Result<NasdFs> {
        let point = mountpoint
            .to_str()
            .ok_or_else(|| std::io::Error::other("the mount point is not UTF-8"))?;
        let st = rt
            .block_on(users.own().stat(remote))
            .map_err(|e| std::io::Error::other(format!("{remote}: {e}")))?;
        if st.kind != FileKind::Dir {
            return Err(std::io::Error::other(format!("{remote}: not a directory")));
        }
        Ok(NasdFs {
            users,
            rt,
            inodes: Arc::new(Inodes::new(remote, st.ino)),
            open: OpenFiles::new(),
            dirs: Default::default(),
            links: Links::new(remote, point),
        })
    }

    /// The inode table (the callback hook maps the manager's numbers with it).
    pub fn inodes(&self) -> Arc<Inodes> {
        self.inodes.clone()
    }

    /// The client acting for the request's user; `EACCES` for a uid with no login.
    pub(crate) fn who(&self, req: &Request) -> Result<Arc<Client>, Errno> {
        self.users.client(req.uid()).ok_or(Errno::EACCES)
    }

    /// Whether the kernel may cache: while callbacks tell every client of this mount of every
    /// change elsewhere. Without them nothing is kept, so every open sees what other clients
    /// closed (close-to-open consistency, as NFS gives).
    pub(crate) fn cached(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.users.clients().iter().all(|c| c.callbacks.live(now))
    }

    /// How long the kernel may keep a name or attributes given now.
    pub(crate) fn ttl(&self) -> Duration {
        if self.cached() {
            CACHED_TTL
        } else {
            Duration::ZERO
        }
    }

    /// How an open file's pages are kept: across opens while callbacks tell of changes.
    pub(crate) fn open_flags(&self) -> FopenFlags {
        if self.cached() {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    pub(crate) fn attr(&self, s: &FileStat) -> FileAttr {
        FileAttr {
            ino: INodeNo(self.inodes.fuse_ino(s.ino)),
            size: s.size,
            blocks: s.size.div_ceil(512),
            atime: time_of(s.atime_us),
            mtime: time_of(s.mtime_us),
            ctime: time_of(s.ctime_us),
            crtime: time_of(s.ctime_us),
            kind: kind_of(s.kind),
            perm: (s.mode & 0o7777) as u16,
            nlink: s.nlink,
            uid: self.users.local_uid(s),
            gid: self.users.local_gid(s),
            // The kernel's encoding of the number `mknod` was given.
            rdev: s.rdev as u32,
            blksize: BLOCK_BYTES,
            flags: 0,
        }
    }

    pub(crate) fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        self.inodes.path(ino.0).ok_or(Errno::ESTALE)
    }

    pub(crate) fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        Ok(join(&self.path(parent)?, name_str(name)?))
    }

    /// The manager's stat of `path` for `c`.
    pub(crate) fn lstat(&self, c: &Client, path: &str) -> Result<FileStat, Errno> {
        self.rt.block_on(c.lstat(path)).map_err(errno)
    }

    /// `a` as the files open here show it: the size and modify time the latest handle to
    /// change the file gave it, and one name fewer once it was unlinked (it lives on under a
    /// hidden name).
    pub(crate) fn local(&self, mut a: FileAttr, open: &[Arc<Open>]) -> FileAttr {
        let latest = open
            .iter()
            .filter_map(|o| self.rt.block_on(o.h.local_attrs()))
            .max_by_key(|&(_, mtime_us)| mtime_us);
        if let Some((size, mtime_us)) = latest {
            a.size = size;
            a.blocks = size.div_ceil(512);
            a.mtime = time_of(mtime_us);
            a.ctime = a.ctime.max(a.mtime);
        }
        if open.iter().any(|o| o.unlinked()) {
            a.nlink = a.nlink.saturating_sub(1);
        }
        a
    }

    /// The attributes of `path` as this mount sees them (see [`crate::open`]): a file open
    /// here shows what its handles wrote; a stat that raced a commit here is taken again.
    pub(crate) fn stat_path(&self, c: &Client, path: &str) -> Result<FileAttr, Errno> {
        let epoch = self.open.epoch();
        let st = self.lstat(c, path)?;
        let ino = self.inodes.fuse_ino(st.ino);
        let a = self.open.view(ino, |open| {
            // A commit here may have landed after the stat read the manager (and the file
            // been opened again since, by a handle that has written nothing yet): read
            // again, now that no commit of this file by a handle without changes can start.
            let st = match self.open.epoch() == epoch {
                true => st,
                false => self.lstat(c, path)?,
            };
            Ok::<_, Errno>(self.local(self.attr(&st), open))
        })?;
        self.inodes.saw(a.ino.0, path);
        Ok(a)
    }

    /// The attributes of the kernel's inode `ino`: through an open file's path while it is
    /// open here (an unlinked one is at its hidden name), else its last path.
    pub(crate) fn stat_ino(&self, c: &Client, ino: INodeNo) -> Result<FileAttr, Errno> {
        self.open.view(ino.0, |open| {
            let path = match open.first() {
                Some(o) => o.path(),
                None => self.path(ino)?,
            };
            let st = self.lstat(c, &path)?;
            Ok(self.local(self.attr(&st), open))
        })
    }

    /// The file `uid` has open here as kernel inode `ino`, else anyone's.
    pub(crate) fn open_at_ino(&self, ino: INodeNo, uid: u32) -> Option<Arc<Open>> {
        self.open.view(ino.0, |open| {
            open.iter()
                .find(|o| o.uid == uid)
                .or_else(|| open.first())
                .cloned()
        })
    }

    pub(crate) fn open_file(&self, fh: u64) -> Result<Arc<Open>, Errno> {
        self.open.get(fh).ok_or(Errno::EBADF)
    }

    /// Commits what `o` wrote (a new file appears under its name).
    pub(crate) fn sync(&self, o: &Open) -> Result<(), Errno> {
        let r = self.rt.block_on(o.h.fsync()).map_err(errno);
        self.open.committed();
        r
    }

    /// Unlinks `path`; a file open here moves to a hidden name instead and goes at its last
    /// close (POSIX: an unlinked file stays usable through open descriptors).
    pub(crate) fn unlink_path(&self, c: &Client, path: &str) -> Result<(), Errno> {
        let open = self.open.at(path);
        let Some(first) = open.first() else {
            self.rt.block_on(c.unlink(path)).map_err(errno)?;
            self.inodes.unlinked(path);
            return Ok(());
        };
        // What is staged commits first: an upload commits only at the path it began at.
        for o in &open {
            self.sync(o)?;
        }
        let (dir, _) = path.rsplit_once('/').unwrap_or(("", path));
        let hidden = join(
            if dir.is_empty() { "/" } else { dir },
            &format!("{UNLINKED_PREFIX}{}", first.h.ino()),
        );
        self.rt.block_on(c.rename(path, &hidden)).map_err(errno)?;
        self.inodes.unlinked(path);
        for o in &open {
            o.moved(&hidden);
            o.set_unlinked();
            self.inodes.saw(o.ino, &hidden);
        }
        Ok(())
    }

    /// The files open here at `from` or under it, and where each goes when `from` becomes
    /// `to`.
    pub(crate) fn moving(&self, from: &str, to: &str) -> Vec<(Arc<Open>, String)> {
        let under = format!("{from}/");
        self.open
            .all()
            .into_iter()
            .filter_map(|o| {
                let p = o.path();
                let moved = match p.strip_prefix(&under) {
                    _ if p == from => to.to_string(),
                    Some(rest) => join(to, rest),
                    None => return None,
                };
                Some((o, moved))
            })
            .collect()
    }
}
