//! Record locks and `flock` across clients (issue 20), held in the manager's memory as write
//! leases are ([`crate::lease`]): a table of lock ranges by inode ([`ranges`]), each owned by a
//! lock owner of a login session, and one lease per session that holds locks. A session's
//! lease lasts [`Locks::lease_ms`] from its last lock call or renewal (`LockRenew`); a session
//! whose lease ran out has lost every lock it held (its client died, or was cut off for
//! longer than the lease), and a renewal says so (`lease_id` 0). Nothing is evicted: past
//! [`LOCK_RANGES_MAX`] ranges, [`LOCK_RANGES_PER_FILE_MAX`] on one file or
//! [`LOCK_SESSIONS_MAX`] sessions, the ranges of sessions whose lease ran out are dropped, and
//! then a lock is refused ([`LockError`], ENOLCK to a program).
//!
//! A manager that restarts has forgotten every lock while its clients still believe they hold
//! them. For one lease time after it starts (the grace period, as NFSv4's) it grants only
//! reclaims: a client that saw the manager's `boot` change takes its locks again with
//! `reclaim`, and every other lock and test is answered "grace" (ask again). Clients renew
//! several times per lease, so each has reclaimed before the grace ends; a reclaim after it is
//! refused ("no grace": that lock is lost), never granted over what others took meanwhile.

pub mod ranges;

use nasd_proto::manager::{
    LockAnswer, LockHolder, LockLease, LockOutcome, LockSpan, LOCK_RANGES_PER_FILE_MAX,
};
use ranges::{Change, FileLocks, Owner, Range};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Most lock ranges the manager keeps, all files together.
pub const LOCK_RANGES_MAX: usize = 65_536;
/// Most sessions holding a lock lease at once.
pub const LOCK_SESSIONS_MAX: usize = 16_384;
/// Shortest and longest lock lease a policy may set (`lock_lease_ms`): a client renews a few
/// times per lease, and a dead client's locks are held for up to one.
pub const LOCK_LEASE_MS_MIN: u64 = 500;
pub const LOCK_LEASE_MS_MAX: u64 = 600_000;

const _: () = assert!(LOCK_RANGES_PER_FILE_MAX <= LOCK_RANGES_MAX);
const _: () = assert!(LOCK_LEASE_MS_MAX <= u32::MAX as u64);

/// Why a lock (or an unlock that splits a range) was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    #[error("the manager holds {LOCK_RANGES_MAX} lock ranges, the most it keeps")]
    TableFull,
    #[error("the file has {LOCK_RANGES_PER_FILE_MAX} lock ranges, the most one file carries")]
    FileFull,
    #[error("{LOCK_SESSIONS_MAX} sessions hold locks, the most the manager keeps")]
    TooManySessions,
    #[error("a lock range ends before it starts ({start} > {end})")]
    BadRange { start: u64, end: u64 },
}

/// A lock asked for: bytes `start..=end` of file `ino`, for `owner`.
#[derive(Clone, Copy, Debug)]
pub struct Want {
    pub ino: u64,
    pub owner: Owner,
    pub start: u64,
    pub end: u64,
    pub exclusive: bool,
    pub pid: u32,
}

/// A session's lease on its locks.
struct Lease {
    id: u64,
    expires_ms: u64,
    /// Files it may hold ranges of.
    files: HashSet<u64>,
}

#[derive(Default)]
struct Table {
    files: HashMap<u64, FileLocks>,
    sessions: HashMap<u64, Lease>,
    /// Ranges in `files`, all together.
    ranges: usize,
    last_lease_id: u64,
}

pub struct Locks {
    inner: Mutex<Table>,
    boot: u64,
    lease_ms: u64,
    /// Until when only reclaims are granted: one lease from the start of serving.
    grace_end_ms: AtomicU64,
}

impl Locks {
    /// The locks of a manager run `boot` (a number new at every start) that started at
    /// `started_ms`, with leases of `lease_ms`.
    pub fn new(boot: u64, started_ms: u64, lease_ms: u64) -> Locks {
        debug_assert!((LOCK_LEASE_MS_MIN..=LOCK_LEASE_MS_MAX).contains(&lease_ms));
        Locks {
            inner: Mutex::new(Table::default()),
            boot,
            lease_ms,
            grace_end_ms: AtomicU64::new(started_ms.saturating_add(lease_ms)),
        }
    }

    /// Starts the grace period over at `now_ms`, when the manager begins to serve (its start
    /// may have spent part of a lease on drives first; clients can reclaim only from now).
    pub fn begin_grace(&self, now_ms: u64) {
        let end = now_ms.saturating_add(self.lease_ms);
        self.grace_end_ms.fetch_max(end, Ordering::AcqRel);
    }

    fn grace(&self, now_ms: u64) -> bool {
        now_ms < self.grace_end_ms.load(Ordering::Acquire)
    }

    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.inner.lock().expect("locks lock")
    }

    /// Takes `w` (a reclaim only in the grace period, anything else only after it).
    pub fn lock(&self, w: &Want, reclaim: bool, now_ms: u64) -> Result<LockAnswer, LockError> {
        check_range(w.start, w.end)?;
        let grace = self.grace(now_ms);
        let mut t = self.table();
        match (grace, reclaim) {
            (true, false) => return Ok(self.answer(&t, w, LockOutcome::Grace, None, now_ms)),
            (false, true) => return Ok(self.answer(&t, w, LockOutcome::NoGrace, None, now_ms)),
            _ => {}
        }
        t.expire_at(w.ino, now_ms);
        t.expire(w.owner.session, now_ms);
        let file = t.files.get(&w.ino);
        if let Some(r) = file.and_then(|f| f.conflict(w.owner, w.start, w.end, w.exclusive)) {
            return Ok(self.answer(&t, w, LockOutcome::Conflict, Some(r), now_ms));
        }
        let change = Change::Lock {
            exclusive: w.exclusive,
            pid: w.pid,
        };
        t.lease(w.owner.session, now_ms + self.lease_ms, now_ms)?;
        t.apply(w, change, now_ms)?;
        Ok(self.answer(&t, w, LockOutcome::Granted, None, now_ms))
    }

    /// Whether `w` could be taken now (`F_GETLK`); takes nothing.
    pub fn test(&self, w: &Want, now_ms: u64) -> Result<LockAnswer, LockError> {
        check_range(w.start, w.end)?;
        let mut t = self.table();
        if self.grace(now_ms) {
            return Ok(self.answer(&t, w, LockOutcome::Grace, None, now_ms));
        }
        t.expire_at(w.ino, now_ms);
        let conflict = t
            .files
            .get(&w.ino)
            .and_then(|f| f.conflict(w.owner, w.start, w.end, w.exclusive));
        let outcome = match conflict {
            Some(_) => LockOutcome::Conflict,
            None => LockOutcome::Granted,
        };
        Ok(self.answer(&t, w, outcome, conflict, now_ms))
    }

    /// Releases what `w.owner` holds of `w`'s range (in the grace period too).
    pub fn unlock(&self, w: &Want, now_ms: u64) -> Result<LockAnswer, LockError> {
        check_range(w.start, w.end)?;
        let mut t = self.table();
        t.expire(w.owner.session, now_ms);
        if t.files.contains_key(&w.ino) {
            t.apply(w, Change::Unlock, now_ms)?;
        }
        if let Some(l) = t.sessions.get_mut(&w.owner.session) {
            l.expires_ms = now_ms + self.lease_ms;
        }
        Ok(self.answer(&t, w, LockOutcome::Granted, None, now_ms))
    }

    /// Renews `session`'s lease, if it has one that has not run out.
    pub fn renew(&self, session: u64, now_ms: u64) -> LockLease {
        let mut t = self.table();
        t.expire(session, now_ms);
        if let Some(l) = t.sessions.get_mut(&session) {
            l.expires_ms = now_ms + self.lease_ms;
        }
        self.lease_of(&t, session, now_ms)
    }

    /// Releases every lock of `session` and ends its lease (an unmount, a logout).
    pub fn drop_session(&self, session: u64) {
        self.table().remove_session(session);
    }

    /// Lock ranges held now, all files together (for tests and status).
    pub fn held(&self) -> usize {
        self.table().ranges
    }

    /// Sessions with a lock lease now (metrics).
    pub fn sessions(&self) -> usize {
        self.table().sessions.len()
    }

    fn lease_of(&self, t: &Table, session: u64, now_ms: u64) -> LockLease {
        LockLease {
            boot: self.boot,
            lease_id: t.sessions.get(&session).map_or(0, |l| l.id),
            lease_ms: self.lease_ms as u32,
            grace: self.grace(now_ms),
        }
    }

    fn answer(
        &self,
        t: &Table,
        w: &Want,
        outcome: LockOutcome,
        conflict: Option<Range>,
        now_ms: u64,
    ) -> LockAnswer {
        let held: Vec<LockSpan> = t
            .files
            .get(&w.ino)
            .map(|f| f.spans(w.owner))
            .unwrap_or_default();
        LockAnswer {
            outcome,
            holder: conflict.map(|r| LockHolder {
                start: r.start,
                end: r.end,
                exclusive: r.exclusive,
                pid: r.pid,
                mine: r.owner.session == w.owner.session,
            }),
            held,
            lease: self.lease_of(t, w.owner.session, now_ms),
        }
    }
}

fn check_range(start: u64, end: u64) -> Result<(), LockError> {
    match start <= end {
        true => Ok(()),
        false => Err(LockError::BadRange { start, end }),
    }
}

impl Table {
    /// Drops `session`'s locks and lease if the lease ran out.
    fn expire(&mut self, session: u64, now_ms: u64) {
        if self
            .sessions
            .get(&session)
            .is_some_and(|l| l.expires_ms <= now_ms)
        {
            self.remove_session(session);
        }
    }

    /// Drops the locks of every session with ranges on `ino` whose lease ran out.
    fn expire_at(&mut self, ino: u64, now_ms: u64) {
        let sessions = self.files.get(&ino).map(FileLocks::sessions);
        for s in sessions.unwrap_or_default() {
            self.expire(s, now_ms);
        }
    }

    /// Drops the locks of every session whose lease ran out.
    fn expire_all(&mut self, now_ms: u64) {
        let ended: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, l)| l.expires_ms <= now_ms)
            .map(|(s, _)| *s)
            .collect();
        for s in ended {
            self.remove_session(s);
        }
    }

    fn remove_session(&mut self, session: u64) {
        let Some(l) = self.sessions.remove(&session) else {
            return;
        };
        for ino in l.files {
            if let Some(f) = self.files.get_mut(&ino) {
                self.ranges -= f.remove_session(session);
                if f.is_empty() {
                    self.files.remove(&ino);
                }
            }
        }
    }

    /// `session`'s lease, extended to `until_ms` (started, with a new id, when it has none).
    fn lease(&mut self, session: u64, until_ms: u64, now_ms: u64) -> Result<(), LockError> {
        if let Some(l) = self.sessions.get_mut(&session) {
            l.expires_ms = until_ms;
            return Ok(());
        }
        if self.sessions.len() >= LOCK_SESSIONS_MAX {
            self.expire_all(now_ms);
            if self.sessions.len() >= LOCK_SESSIONS_MAX {
                return Err(LockError::TooManySessions);
            }
        }
        self.last_lease_id += 1;
        let l = Lease {
            id: self.last_lease_id,
            expires_ms: until_ms,
            files: HashSet::new(),
        };
        self.sessions.insert(session, l);
        Ok(())
    }

    /// Applies `change` of `w`'s range for `w.owner`, within the bounds.
    fn apply(&mut self, w: &Want, change: Change, now_ms: u64) -> Result<(), LockError> {
        let (mine, old) = {
            let f = self.files.entry(w.ino).or_default();
            (
                f.after(w.owner, w.start, w.end, change),
                f.count_of(w.owner),
            )
        };
        let file_len = self.files[&w.ino].len() - old + mine.len();
        if file_len > LOCK_RANGES_PER_FILE_MAX {
            self.drop_if_empty(w.ino);
            return Err(LockError::FileFull);
        }
        if self.ranges - old + mine.len() > LOCK_RANGES_MAX {
            self.expire_all(now_ms);
            if self.ranges - self.count(w) + mine.len() > LOCK_RANGES_MAX {
                self.drop_if_empty(w.ino);
                return Err(LockError::TableFull);
            }
        }
        let f = self.files.entry(w.ino).or_default();
        self.ranges = self.ranges - f.count_of(w.owner) + mine.len();
        f.replace(w.owner, mine);
        let holds = f.has_session(w.owner.session);
        self.drop_if_empty(w.ino);
        if let Some(l) = self.sessions.get_mut(&w.owner.session) {
            match holds {
                true => l.files.insert(w.ino),
                false => l.files.remove(&w.ino),
            };
        }
        Ok(())
    }

    fn count(&self, w: &Want) -> usize {
        self.files.get(&w.ino).map_or(0, |f| f.count_of(w.owner))
    }

    fn drop_if_empty(&mut self, ino: u64) {
        if self.files.get(&ino).is_some_and(FileLocks::is_empty) {
            self.files.remove(&ino);
        }
    }
}

#[cfg(test)]
mod tests;
