//! Record locks and `flock` across clients (manager protocol 17; issue 20): POSIX byte-range
//! locks, shared or exclusive, owned by a lock owner of a session, held in the manager's
//! memory under a lease the client renews ([`LockRenew`]); a client that stops renewing loses
//! its locks when the lease runs out. A manager that restarts has forgotten every lock: for one
//! lease time it grants only reclaims (`reclaim`) of locks clients held before, as NFSv4 does.
//! ```text
//! Lock       := string path, u64 ino, u64 owner, u32 pid, bool exclusive, u64 start,
//!               u64 end, bool reclaim
//! LockTest   := string path, u64 ino, u64 owner, bool exclusive, u64 start, u64 end
//! Unlock     := u64 ino, u64 owner, u64 start, u64 end
//! LockRenew  := (nothing);  LockDrop := (nothing)
//! LockAnswer := u8 outcome (0 granted | 1 conflict | 2 grace | 3 no grace),
//!               option LockHolder, u32 n (<= LOCK_RANGES_PER_FILE_MAX), n x LockSpan,
//!               LockLease
//! LockHolder := u64 start, u64 end, bool exclusive, u32 pid, bool mine
//! LockSpan   := u64 start, u64 end, bool exclusive
//! LockLease  := u64 boot, u64 lease_id, u32 lease_ms, bool grace
//! ```
//! Ranges are inclusive byte offsets (`start..=end`, as FUSE passes them; `end` `u64::MAX`
//! or `i64::MAX` reaches past any end of file).

use crate::codec::{Reader, Writer};
use crate::manager::codec::{get_bool, get_count, get_opt, get_str, put_bool, put_opt, put_str};
use crate::manager::Wire;
use crate::DecodeError;

/// Most lock ranges one file carries at the manager (all owners together); a lock or an
/// unlock that would split past it is refused ([`MgrStatus::NoLocks`](crate::manager::MgrStatus::NoLocks)).
/// It also bounds the spans a [`LockAnswer`] carries.
pub const LOCK_RANGES_PER_FILE_MAX: usize = 1024;

/// Takes (or changes, or reclaims) a lock on bytes `start..=end` of the file at `path`, whose
/// inode must be `ino`, for lock owner `owner` of the caller's session: shared or
/// `exclusive`. Never waits: a conflicting lock of another owner is answered
/// [`LockOutcome::Conflict`] with its holder. The owner's own ranges it overlaps are replaced
/// (an upgrade, a downgrade, a split), and adjacent ranges of one kind merge, as POSIX says.
/// `pid` is the locking process, shown to a `LockTest` of the same session.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Lock {
    pub path: String,
    pub ino: u64,
    pub owner: u64,
    pub pid: u32,
    pub exclusive: bool,
    pub start: u64,
    pub end: u64,
    /// A lock held before the manager restarted, taken again during its grace period.
    pub reclaim: bool,
}

impl Wire for Lock {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u64(self.ino);
        w.u64(self.owner);
        w.u32(self.pid);
        put_bool(w, self.exclusive);
        w.u64(self.start);
        w.u64(self.end);
        put_bool(w, self.reclaim);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Lock {
            path: get_str(r, "path")?,
            ino: r.u64("ino")?,
            owner: r.u64("owner")?,
            pid: r.u32("pid")?,
            exclusive: get_bool(r, "exclusive")?,
            start: r.u64("start")?,
            end: r.u64("end")?,
            reclaim: get_bool(r, "reclaim")?,
        })
    }
}

/// Whether `owner` could take the lock described (POSIX `F_GETLK`): answered
/// [`LockOutcome::Granted`] when nothing conflicts, else `Conflict` with the first conflicting
/// lock. Takes nothing.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LockTest {
    pub path: String,
    pub ino: u64,
    pub owner: u64,
    pub exclusive: bool,
    pub start: u64,
    pub end: u64,
}

impl Wire for LockTest {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u64(self.ino);
        w.u64(self.owner);
        put_bool(w, self.exclusive);
        w.u64(self.start);
        w.u64(self.end);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(LockTest {
            path: get_str(r, "path")?,
            ino: r.u64("ino")?,
            owner: r.u64("owner")?,
            exclusive: get_bool(r, "exclusive")?,
            start: r.u64("start")?,
            end: r.u64("end")?,
        })
    }
}

/// Releases what `owner` of the caller's session holds of bytes `start..=end` of file `ino`
/// (a range in the middle splits one in two). By inode only: it releases nothing of anyone
/// else, and must work on a file renamed or unlinked since it was locked.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Unlock {
    pub ino: u64,
    pub owner: u64,
    pub start: u64,
    pub end: u64,
}

impl Wire for Unlock {
    fn put(&self, w: &mut Writer) {
        w.u64(self.ino);
        w.u64(self.owner);
        w.u64(self.start);
        w.u64(self.end);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Unlock {
            ino: r.u64("ino")?,
            owner: r.u64("owner")?,
            start: r.u64("start")?,
            end: r.u64("end")?,
        })
    }
}

super::no_fields! {
    /// Renews the lease of the caller's session's locks, answered with [`LockLease`]; it
    /// never starts one (a lease that ran out is answered with `lease_id` 0: its locks are
    /// gone).
    LockRenew
}

super::no_fields! {
    /// Releases every lock of the caller's session (an unmount). A logout does it too.
    LockDrop
}

/// What became of a [`Lock`] or [`LockTest`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LockOutcome {
    /// Taken (a test: nothing conflicts).
    Granted = 0,
    /// Another owner holds a conflicting lock ([`LockAnswer::holder`]).
    Conflict = 1,
    /// The manager restarted less than a lease time ago and grants only reclaims: ask again.
    Grace = 2,
    /// A reclaim after the grace period: the lock was lost.
    NoGrace = 3,
}

impl LockOutcome {
    fn of(b: u8) -> Result<LockOutcome, DecodeError> {
        Ok(match b {
            0 => LockOutcome::Granted,
            1 => LockOutcome::Conflict,
            2 => LockOutcome::Grace,
            3 => LockOutcome::NoGrace,
            _ => return Err(DecodeError::BadValue("lock outcome")),
        })
    }
}

/// A conflicting lock: its range and kind, the process that took it and whether it is of the
/// asking session (`mine`: another session's `pid` is of another host's processes).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LockHolder {
    pub start: u64,
    pub end: u64,
    pub exclusive: bool,
    pub pid: u32,
    pub mine: bool,
}

/// One range an owner holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LockSpan {
    pub start: u64,
    pub end: u64,
    pub exclusive: bool,
}

/// The lease a session's locks are held under: the manager's run (`boot`, new at every start),
/// the lease's id in that run (0: the session has none; a new one means the old one ran out
/// and its locks went with it), its length, and whether the manager is in its grace period.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LockLease {
    pub boot: u64,
    pub lease_id: u64,
    pub lease_ms: u32,
    pub grace: bool,
}

/// The answer to [`Lock`], [`LockTest`] and [`Unlock`]: the outcome, the conflicting lock, the
/// ranges the owner holds of the file afterwards (a client keeps them to reclaim after a
/// restart), and the session's lease.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LockAnswer {
    pub outcome: LockOutcome,
    pub holder: Option<LockHolder>,
    pub held: Vec<LockSpan>,
    pub lease: LockLease,
}

impl Wire for LockLease {
    fn put(&self, w: &mut Writer) {
        w.u64(self.boot);
        w.u64(self.lease_id);
        w.u32(self.lease_ms);
        put_bool(w, self.grace);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(LockLease {
            boot: r.u64("boot")?,
            lease_id: r.u64("lease id")?,
            lease_ms: r.u32("lease ms")?,
            grace: get_bool(r, "grace")?,
        })
    }
}

impl Wire for LockAnswer {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.held.len() <= LOCK_RANGES_PER_FILE_MAX);
        w.u8(self.outcome as u8);
        put_opt(w, &self.holder, |w, h| {
            w.u64(h.start);
            w.u64(h.end);
            put_bool(w, h.exclusive);
            w.u32(h.pid);
            put_bool(w, h.mine);
        });
        w.u32(self.held.len() as u32);
        for s in &self.held {
            w.u64(s.start);
            w.u64(s.end);
            put_bool(w, s.exclusive);
        }
        self.lease.put(w);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let outcome = LockOutcome::of(r.u8("lock outcome")?)?;
        let holder = get_opt(r, "has holder", |r| {
            Ok(LockHolder {
                start: r.u64("holder start")?,
                end: r.u64("holder end")?,
                exclusive: get_bool(r, "holder exclusive")?,
                pid: r.u32("holder pid")?,
                mine: get_bool(r, "holder mine")?,
            })
        })?;
        let n = get_count(r, 17, "lock spans")?;
        if n > LOCK_RANGES_PER_FILE_MAX {
            return Err(DecodeError::TooLong("lock spans"));
        }
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            held.push(LockSpan {
                start: r.u64("span start")?,
                end: r.u64("span end")?,
                exclusive: get_bool(r, "span exclusive")?,
            });
        }
        Ok(LockAnswer {
            outcome,
            holder,
            held,
            lease: LockLease::get(r)?,
        })
    }
}
