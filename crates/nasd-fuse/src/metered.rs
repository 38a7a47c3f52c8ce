//! The mount's request entry for `nasd mount --metrics ADDR` (docs/metrics.md): [`Metered`]
//! wraps the file system and counts every kernel request it forwards — requests, latency,
//! bytes the kernel wrote and asked to read — per FUSE operation, in one table of forwarded
//! operations rather than code in each handler. fuser answers the kernel through reply
//! objects the handlers consume, so a failure is seen where a client call's error becomes an
//! errno ([`crate::errno::errno_of`] notes it for the request this thread serves): errors
//! are requests during which a call to the cluster failed, by that errno; refusals the mount
//! makes alone (a name it never saw, a non-`user.` attribute) are not counted. Health: the
//! mounter's session stats the mounted directory.

use fuser::{
    BsdFileFlags, Errno, Filesystem, INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use nasd_client::files::Client;
use nasd_metrics::ops::{OpStats, Outcome};
use nasd_metrics::Exposition;
use std::cell::Cell;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

thread_local! {
    /// The errno a failed client call became while this thread serves a request.
    static FAILED: Cell<Option<Errno>> = const { Cell::new(None) };
}

/// Notes that the request this thread serves met `e` (the first one noted counts).
pub(crate) fn note_failure(e: Errno) {
    FAILED.with(|f| {
        if f.get().is_none() {
            f.set(Some(e));
        }
    });
}

/// The errnos errors are labelled with; others count as `other`.
const ERRNOS: &[(i32, &str)] = &[
    (libc::EPERM, "EPERM"),
    (libc::ENOENT, "ENOENT"),
    (libc::EIO, "EIO"),
    (libc::EBADF, "EBADF"),
    (libc::EACCES, "EACCES"),
    (libc::EBUSY, "EBUSY"),
    (libc::EEXIST, "EEXIST"),
    (libc::EXDEV, "EXDEV"),
    (libc::ENOTDIR, "ENOTDIR"),
    (libc::EISDIR, "EISDIR"),
    (libc::EINVAL, "EINVAL"),
    (libc::EFBIG, "EFBIG"),
    (libc::ENOSPC, "ENOSPC"),
    (libc::EROFS, "EROFS"),
    (libc::E2BIG, "E2BIG"),
    (libc::ENAMETOOLONG, "ENAMETOOLONG"),
    (libc::ENOLCK, "ENOLCK"),
    (libc::ENOSYS, "ENOSYS"),
    (libc::ENOTEMPTY, "ENOTEMPTY"),
    (libc::ELOOP, "ELOOP"),
    (libc::ENODATA, "ENODATA"),
    (libc::EOPNOTSUPP, "EOPNOTSUPP"),
    (libc::EDQUOT, "EDQUOT"),
    (libc::EAGAIN, "EAGAIN"),
];

/// The mount's counters, and what its health check needs.
pub struct MountMetrics {
    ops: OpStats,
    client: Arc<Client>,
    remote: String,
    rt: tokio::runtime::Handle,
}

impl MountMetrics {
    /// Counters for a mount of `remote` whose mounter's session is `client`.
    pub fn new(client: Arc<Client>, remote: &str, rt: tokio::runtime::Handle) -> MountMetrics {
        MountMetrics {
            ops: OpStats::new(OPS.iter().copied(), ERRNOS.iter().map(|e| e.1)),
            client,
            remote: remote.to_string(),
            rt,
        }
    }

    /// Requests of FUSE operation `op` so far (tests).
    pub fn requests(&self, op: &str) -> u64 {
        self.ops.requests(op)
    }
}

impl nasd_metrics::Source for MountMetrics {
    fn render(&self, e: &mut Exposition) {
        self.ops.render(e, "nasd_mount", "FUSE requests");
    }

    fn health(&self) -> Result<(), String> {
        let (c, remote) = (self.client.clone(), self.remote.clone());
        // On the metrics server's blocking pool, where waiting for the runtime is allowed.
        match self.rt.block_on(async move { c.stat(&remote).await }) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("nasd:{} does not answer: {e}", self.remote)),
        }
    }
}

/// A file system whose requests are counted.
pub struct Metered<F> {
    fs: F,
    metrics: Option<Arc<MountMetrics>>,
}

impl<F> Metered<F> {
    pub fn new(fs: F, metrics: Option<Arc<MountMetrics>>) -> Metered<F> {
        Metered { fs, metrics }
    }

    /// Runs one request of operation `op` through `f`, counting it.
    fn serve(&self, op: Op, bytes_in: u64, bytes_out: u64, f: impl FnOnce(&F)) {
        let Some(m) = &self.metrics else {
            return f(&self.fs);
        };
        FAILED.with(|c| c.set(None));
        let started = Instant::now();
        f(&self.fs);
        let error = FAILED.with(Cell::take).map(|e| {
            ERRNOS
                .iter()
                .position(|x| x.0 == e.code())
                .unwrap_or(ERRNOS.len())
        });
        let outcome = Outcome {
            error,
            bytes_in,
            bytes_out,
            elapsed: started.elapsed(),
        };
        m.ops.record(op as usize, outcome);
    }
}

/// Forwards each listed operation through [`Metered::serve`]: `name(args) [in BYTES]
/// [out BYTES];` (either optional), where `in` counts bytes the kernel sent (a write's) and
/// `out` bytes it asked for (a read's size: a read at the end of a file gets fewer).
macro_rules! metered {
    ($($op:ident($($arg:ident: $ty:ty),*) $([in $bin:expr])? $([out $bout:expr])?;)*) => {
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy)]
        enum Op { $($op,)* }

        /// The operations forwarded, in [`Op`]'s order.
        const OPS: &[&str] = &[$(stringify!($op),)*];

        impl<F: Filesystem> Filesystem for Metered<F> {
            fn init(&mut self, req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
                self.fs.init(req, config)
            }

            fn destroy(&mut self) {
                self.fs.destroy()
            }

            $(
                #[allow(clippy::too_many_arguments)]
                fn $op(&self, req: &Request, $($arg: $ty),*) {
                    let bytes_in = 0 $(+ ($bin) as u64)?;
                    let bytes_out = 0 $(+ ($bout) as u64)?;
                    self.serve(Op::$op, bytes_in, bytes_out, |fs| fs.$op(req, $($arg),*));
                }
            )*
        }
    };
}

metered! {
    getlk(ino: INodeNo, fh: fuser::FileHandle, lock_owner: LockOwner, start: u64, end: u64, typ: i32, pid: u32, reply: ReplyLock);
    setlk(ino: INodeNo, fh: fuser::FileHandle, lock_owner: LockOwner, start: u64, end: u64, typ: i32, pid: u32, sleep: bool, reply: ReplyEmpty);
    lookup(parent: INodeNo, name: &OsStr, reply: ReplyEntry);
    getattr(ino: INodeNo, fh: Option<fuser::FileHandle>, reply: ReplyAttr);
    setattr(ino: INodeNo, mode: Option<u32>, uid: Option<u32>, gid: Option<u32>, size: Option<u64>, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>, ctime: Option<SystemTime>, fh: Option<fuser::FileHandle>, crtime: Option<SystemTime>, chgtime: Option<SystemTime>, bkuptime: Option<SystemTime>, flags: Option<BsdFileFlags>, reply: ReplyAttr);
    readlink(ino: INodeNo, reply: ReplyData);
    getxattr(ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr);
    listxattr(ino: INodeNo, size: u32, reply: ReplyXattr);
    setxattr(ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, position: u32, reply: ReplyEmpty) [in value.len()];
    removexattr(ino: INodeNo, name: &OsStr, reply: ReplyEmpty);
    mkdir(parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry);
    unlink(parent: INodeNo, name: &OsStr, reply: ReplyEmpty);
    rmdir(parent: INodeNo, name: &OsStr, reply: ReplyEmpty);
    symlink(parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry);
    rename(parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty);
    link(ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry);
    open(ino: INodeNo, flags: OpenFlags, reply: ReplyOpen);
    create(parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate);
    read(ino: INodeNo, fh: fuser::FileHandle, offset: u64, size: u32, flags: OpenFlags, lock_owner: Option<LockOwner>, reply: ReplyData) [out size];
    write(ino: INodeNo, fh: fuser::FileHandle, offset: u64, data: &[u8], write_flags: WriteFlags, flags: OpenFlags, lock_owner: Option<LockOwner>, reply: ReplyWrite) [in data.len()];
    flush(ino: INodeNo, fh: fuser::FileHandle, lock_owner: LockOwner, reply: ReplyEmpty);
    release(ino: INodeNo, fh: fuser::FileHandle, flags: OpenFlags, lock_owner: Option<LockOwner>, flush: bool, reply: ReplyEmpty);
    fsync(ino: INodeNo, fh: fuser::FileHandle, datasync: bool, reply: ReplyEmpty);
    opendir(ino: INodeNo, flags: OpenFlags, reply: ReplyOpen);
    readdir(ino: INodeNo, fh: fuser::FileHandle, offset: u64, reply: ReplyDirectory);
    releasedir(ino: INodeNo, fh: fuser::FileHandle, flags: OpenFlags, reply: ReplyEmpty);
    statfs(ino: INodeNo, reply: ReplyStatfs);
    mknod(parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry);
}

#[cfg(test)]
mod tests {
    use super::OPS;

    /// The wrapper forwards exactly what the file system implements: an operation it
    /// implements but the wrapper does not forward would silently answer ENOSYS.
    #[test]
    fn every_operation_the_file_system_implements_is_forwarded() {
        let src = include_str!("kernel.rs");
        let start = src
            .find("impl Filesystem for NasdFs {")
            .expect("the file system's impl");
        let body = &src[start..];
        let end = body.find("\n}\n").expect("its end");
        let mut implemented: Vec<&str> = body[..end]
            .lines()
            .filter_map(|l| l.strip_prefix("    fn "))
            .map(|l| l.split('(').next().unwrap_or(l))
            .filter(|n| *n != "init" && *n != "destroy")
            .collect();
        implemented.sort_unstable();
        let mut forwarded = OPS.to_vec();
        forwarded.sort_unstable();
        assert_eq!(implemented, forwarded);
    }
}
