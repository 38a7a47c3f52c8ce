//! POSIX record locks and `flock` on the mount, held at the manager so every mount and client
//! of the cluster sees them ([`nasd_client::locks`]). The kernel sends `fcntl` locks with the
//! id of the process's descriptor table as lock owner, and (with `FUSE_FLOCK_LOCKS`) `flock`
//! as a whole-file lock whose owner is the open file description; fuser does not pass the
//! kernel's flag telling the two apart, so they share one table, as Linux's NFS client emulates
//! `flock` with whole-file byte-range locks: a process's `flock` and its own `fcntl` lock on a
//! file conflict here, unlike on a local file system. The kernel keeps locks on directories
//! to itself (FUSE passes only files' on), so those hold within one mount only.
//!
//! - A lock (`F_SETLK`, `F_SETLKW`, `flock`) is tried on a task of the client runtime, so a
//!   blocked one never holds one of the mount's few event-loop threads: while another owner
//!   holds a conflicting lock a blocking one asks again, backing off from
//!   [`LOCK_RETRY_MS_MIN`] to [`LOCK_RETRY_MS_MAX`]; while the manager is in its grace period
//!   after a restart, any lock or test asks again. No deadlock detection: two owners waiting
//!   on each other wait until one is interrupted. A signal ends a wait with `EINTR` (the kernel
//!   restarts the call after a handler with `SA_RESTART`): fuser does not pass the kernel's
//!   interrupts on, so the waiter's pending signals are read from `/proc` between attempts.
//! - `F_GETLK` reports the conflicting lock's range and kind; its pid when the holder is a
//!   process of this mount's same user (its session), else 0, since another host's pid
//!   means nothing here.
//! - An unlock first commits what the file's handle wrote, as a close does, so the next
//!   holder, on any mount, reads it. Every close (`flush`) releases the closing process's
//!   `fcntl` locks on the file, and the last close of an open file description (`release`) its
//!   `flock`; an unmount releases every lock of the mount's sessions, and a mount that dies
//!   loses its locks when its lease runs out at the manager.

use crate::errno::errno;
use crate::fs::NasdFs;
use fuser::{Errno, INodeNo, LockOwner, ReplyEmpty, ReplyLock, Request};
use nasd_client::files::Client;
use nasd_client::locks::Locked;
use nasd_proto::manager::calls;
use std::sync::Arc;
use std::time::Duration;

/// First wait before a blocked lock asks again; each wait doubles, up to
/// [`LOCK_RETRY_MS_MAX`] (how late a waiter may notice a lock was freed).
pub const LOCK_RETRY_MS_MIN: u64 = 10;
pub const LOCK_RETRY_MS_MAX: u64 = 250;

/// What a lock request of the kernel is about: whose client asks, the file's path and the
/// manager's inode number.
struct Target {
    client: Arc<Client>,
    path: String,
    ino: u64,
}

impl NasdFs {
    /// The file a lock names: through its open handle (its current path), else by its inode.
    fn lock_target(&self, req: &Request, ino: INodeNo, fh: u64) -> Result<Target, Errno> {
        let client = self.who(req)?;
        let Ok(o) = self.open_file(fh) else {
            let path = self.path(ino)?;
            let ino = self.inodes.manager_ino(ino.0);
            return Ok(Target { client, path, ino });
        };
        let (path, ino) = (o.path(), o.h.ino());
        Ok(Target { client, path, ino })
    }

    /// The lock `req` asks for on the file `ino` (through its open handle `fh`), and the
    /// client that asks for it.
    fn lock_request(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: u64,
        owner: LockOwner,
        range: (u64, u64),
        typ: i32,
    ) -> Result<(Arc<Client>, calls::Lock), Errno> {
        let t = self.lock_target(req, ino, fh)?;
        let r = calls::Lock {
            path: t.path,
            ino: t.ino,
            owner: owner.0,
            pid: req.pid(),
            exclusive: typ == libc::F_WRLCK,
            start: range.0,
            end: range.1,
            reclaim: false,
        };
        Ok((t.client, r))
    }

    /// `F_GETLK`: the first lock that conflicts, or `F_UNLCK`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_lock(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: u64,
        owner: LockOwner,
        range: (u64, u64),
        typ: i32,
        reply: ReplyLock,
    ) {
        let (client, r) = match self.lock_request(req, ino, fh, owner, range, typ) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        let tid = req.pid();
        self.rt.spawn(async move {
            match test_lock(&client, &r, tid).await {
                Ok(None) => reply.locked(r.start, r.end, libc::F_UNLCK, 0),
                Ok(Some(h)) => {
                    let typ = if h.exclusive {
                        libc::F_WRLCK
                    } else {
                        libc::F_RDLCK
                    };
                    reply.locked(h.start, h.end, typ, if h.mine { h.pid } else { 0 });
                }
                Err(e) => reply.error(e),
            }
        });
    }

    /// `F_SETLK`, `F_SETLKW` (`sleep`) and `flock`: a lock is taken on a task of its own, an
    /// unlock commits the file's writes and releases.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn set_lock(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: u64,
        owner: LockOwner,
        range: (u64, u64),
        typ: i32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        if typ == libc::F_UNLCK {
            return crate::errno::answer(reply, self.unlock_range(req, ino, fh, owner, range));
        }
        if typ != libc::F_RDLCK && typ != libc::F_WRLCK {
            return reply.error(Errno::EINVAL);
        }
        let (client, r) = match self.lock_request(req, ino, fh, owner, range, typ) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        let tid = req.pid();
        self.rt.spawn(async move {
            crate::errno::answer(reply, take_lock(&client, &r, sleep, tid).await)
        });
    }

    fn unlock_range(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: u64,
        owner: LockOwner,
        range: (u64, u64),
    ) -> Result<(), Errno> {
        let client = self.who(req)?;
        let mino = match self.open_file(fh) {
            Ok(o) if client.holds_locks(o.h.ino(), owner.0) => {
                self.sync(&o)?;
                o.h.ino()
            }
            Ok(o) => o.h.ino(),
            Err(_) => self.inodes.manager_ino(ino.0),
        };
        self.rt
            .block_on(client.unlock(mino, owner.0, range.0, range.1))
            .map_err(errno)
    }

    /// Releases every lock `owner` holds of the file open as `fh` (kernel inode `ino`), for
    /// whichever of the mount's users took them. Nothing is sent for an owner that holds none.
    pub(crate) fn release_locks(
        &self,
        ino: INodeNo,
        fh: u64,
        owner: LockOwner,
    ) -> Result<(), Errno> {
        let mino = match self.open_file(fh) {
            Ok(o) => o.h.ino(),
            Err(_) => self.inodes.manager_ino(ino.0),
        };
        let mut r = Ok(());
        for c in self.users.clients() {
            if c.holds_locks(mino, owner.0) {
                if let Err(e) = self.rt.block_on(c.unlock_owner(mino, owner.0)) {
                    r = Err(errno(e));
                }
            }
        }
        r
    }

    /// Releases every lock of the mount's sessions (an unmount).
    pub(crate) fn drop_locks(&self) {
        for c in self.users.clients() {
            if let Err(e) = self.rt.block_on(c.drop_locks()) {
                tracing::warn!("releasing the mount's locks: {e}");
            }
        }
    }
}

/// Tries `r` until it is taken, or (not `sleep`) until another owner is found to hold it;
/// `EINTR` when thread `tid` has a signal waiting.
async fn take_lock(c: &Arc<Client>, r: &calls::Lock, sleep: bool, tid: u32) -> Result<(), Errno> {
    let mut wait_ms = LOCK_RETRY_MS_MIN;
    loop {
        match c.lock(r).await.map_err(errno)? {
            Locked::Granted => return Ok(()),
            Locked::Conflict(_) if !sleep => return Err(Errno::EAGAIN),
            Locked::Conflict(_) | Locked::Grace => {}
        }
        if signal_pending(tid) {
            return Err(Errno::EINTR);
        }
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        wait_ms = (wait_ms * 2).min(LOCK_RETRY_MS_MAX);
    }
}

/// The lock that conflicts with `r`, if one does (waiting out a grace period).
async fn test_lock(
    c: &Client,
    r: &calls::Lock,
    tid: u32,
) -> Result<Option<nasd_proto::manager::LockHolder>, Errno> {
    let mut wait_ms = LOCK_RETRY_MS_MIN;
    loop {
        match c.lock_test(r).await.map_err(errno)? {
            Locked::Granted => return Ok(None),
            Locked::Conflict(h) => return Ok(Some(h)),
            Locked::Grace => {}
        }
        if signal_pending(tid) {
            return Err(Errno::EINTR);
        }
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        wait_ms = (wait_ms * 2).min(LOCK_RETRY_MS_MAX);
    }
}

/// Whether thread `tid` has a signal pending that it does not block (or is gone): its wait
/// should end. From `/proc/<tid>/status` (`SigPnd`, `ShdPnd`, `SigBlk`, in hex).
fn signal_pending(tid: u32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    (field("SigPnd:") | field("ShdPnd:")) & !field("SigBlk:") != 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_signal_pending_and_unblocked_ends_a_wait() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        assert!(!super::signal_pending(me));
        assert!(super::signal_pending(u32::MAX), "a thread that is gone");
    }
}
