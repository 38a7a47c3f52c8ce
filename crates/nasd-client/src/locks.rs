//! Record locks and `flock` through the manager (manager protocol 17; issue 20). Each call is
//! one attempt, answered at once ([`Locked`]); a caller that waits for a lock asks again.
//!
//! The client keeps what each of its lock owners holds ([`HeldLocks`], the ranges the manager
//! answered), which serves three ends: a close releases locks only when its owner holds some
//! (no round trip for the files nobody locked), a task renews the session's lock lease while
//! anything is held (four times per lease), and when a renewal shows the manager restarted
//! (its `boot` changed) every range is reclaimed in its grace period. A renewal or an answer
//! showing the lease ran out means the locks are gone: they are dropped here and a warning is
//! logged (a program is not told; POSIX has no way to, and Linux's NFS client does the same).

use crate::files::{Client, FsError};
use nasd_proto::manager::{calls, LockAnswer, LockHolder, LockLease, LockOutcome, LockSpan};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// What one attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Locked {
    /// Taken (a test: nothing conflicts).
    Granted,
    /// Another owner holds a conflicting lock.
    Conflict(LockHolder),
    /// The manager restarted and takes only reclaims for now: ask again shortly.
    Grace,
}

/// What this client's lock owners hold, and the lease they hold it under.
#[derive(Default)]
pub struct HeldLocks {
    inner: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    /// The manager run and lease the ranges were granted under (`lease_id` 0: none yet, or
    /// being reclaimed after a restart).
    boot: u64,
    lease_id: u64,
    lease_ms: u32,
    /// By (inode, owner).
    files: HashMap<(u64, u64), HeldFile>,
    renewing: bool,
}

#[derive(Clone)]
struct HeldFile {
    path: String,
    pid: u32,
    spans: Vec<LockSpan>,
}

/// Shortest wait between two renewals, whatever the lease.
const RENEW_PERIOD_MS_MIN: u64 = 100;

impl Held {
    /// Takes in the lease an answer shows (`granted`: the answer of a lock granted, which
    /// after a restart means the grace period is over). A lease other than the one the ranges
    /// were granted under, in the same manager run, means they ran out.
    fn observe(&mut self, lease: &LockLease, granted: bool) {
        self.lease_ms = lease.lease_ms;
        let same_boot = lease.boot == self.boot;
        if same_boot && lease.lease_id == self.lease_id {
            return;
        }
        if !same_boot && !granted && !self.files.is_empty() {
            // A restart: the renewal task reclaims.
            return;
        }
        if self.lease_id != 0 && !self.files.is_empty() {
            tracing::warn!(
                ranges = self.files.len(),
                "record locks lost: their lease ran out before it was renewed"
            );
            self.files.clear();
        }
        self.boot = lease.boot;
        self.lease_id = lease.lease_id;
    }

    /// Sets what `key` holds to the answer's ranges.
    fn set(&mut self, key: (u64, u64), path: &str, pid: u32, spans: Vec<LockSpan>) {
        if spans.is_empty() {
            self.files.remove(&key);
            return;
        }
        let f = HeldFile {
            path: path.to_string(),
            pid,
            spans,
        };
        self.files.insert(key, f);
    }
}

impl Client {
    /// One attempt at the lock `r` (bytes `start..=end` of the file at `path`, inode `ino`,
    /// for lock owner `owner`: the kernel's id of a descriptor table, or of an open file for
    /// `flock`).
    pub async fn lock(self: &Arc<Self>, r: &calls::Lock) -> Result<Locked, FsError> {
        let a = self.call(&r.path, r.clone()).await?;
        self.record((r.ino, r.owner), &r.path, r.pid, &a);
        Ok(outcome(a))
    }

    /// Whether `r` could be taken now (`F_GETLK`): `Granted` when nothing conflicts.
    pub async fn lock_test(&self, r: &calls::Lock) -> Result<Locked, FsError> {
        let call = calls::LockTest {
            path: r.path.clone(),
            ino: r.ino,
            owner: r.owner,
            exclusive: r.exclusive,
            start: r.start,
            end: r.end,
        };
        Ok(outcome(self.call(&r.path, call).await?))
    }

    /// Releases what `owner` holds of bytes `start..=end` of file `ino` (nothing is sent when
    /// it holds nothing there).
    pub async fn unlock(
        self: &Arc<Self>,
        ino: u64,
        owner: u64,
        start: u64,
        end: u64,
    ) -> Result<(), FsError> {
        let Some(f) = self.held_file(ino, owner) else {
            return Ok(());
        };
        let call = calls::Unlock {
            ino,
            owner,
            start,
            end,
        };
        let a = self.call(&f.path, call).await?;
        self.record((ino, owner), &f.path, f.pid, &a);
        Ok(())
    }

    /// Releases every lock `owner` holds of file `ino` (a close).
    pub async fn unlock_owner(self: &Arc<Self>, ino: u64, owner: u64) -> Result<(), FsError> {
        self.unlock(ino, owner, 0, u64::MAX).await
    }

    /// Releases every lock of this client's session (an unmount).
    pub async fn drop_locks(&self) -> Result<(), FsError> {
        if self
            .held_locks
            .inner
            .lock()
            .expect("held locks")
            .files
            .is_empty()
        {
            return Ok(());
        }
        self.call("/", calls::LockDrop).await?;
        self.held_locks
            .inner
            .lock()
            .expect("held locks")
            .files
            .clear();
        Ok(())
    }

    /// Whether `owner` holds any lock of file `ino`.
    pub fn holds_locks(&self, ino: u64, owner: u64) -> bool {
        self.held_file(ino, owner).is_some()
    }

    fn held_file(&self, ino: u64, owner: u64) -> Option<HeldFile> {
        let h = self.held_locks.inner.lock().expect("held locks");
        h.files.get(&(ino, owner)).cloned()
    }

    /// Keeps what an answer says `key` holds, and renews the lease while anything is held.
    fn record(self: &Arc<Self>, key: (u64, u64), path: &str, pid: u32, a: &LockAnswer) {
        let mut h = self.held_locks.inner.lock().expect("held locks");
        h.observe(&a.lease, a.outcome == LockOutcome::Granted);
        if a.lease.boot == h.boot {
            h.set(key, path, pid, a.held.clone());
        }
        if !h.files.is_empty() && !h.renewing {
            h.renewing = true;
            tokio::spawn(renew_while_held(Arc::downgrade(self)));
        }
    }

    /// Takes in a renewal's answer: a restart has every range reclaimed, a lost lease drops
    /// them.
    async fn renewed(self: &Arc<Self>, lease: LockLease) {
        let reclaim: Vec<((u64, u64), HeldFile)> = {
            let mut h = self.held_locks.inner.lock().expect("held locks");
            if lease.boot == h.boot {
                h.observe(&lease, false);
                return;
            }
            tracing::info!(
                "the manager restarted: reclaiming {} locked files",
                h.files.len()
            );
            h.boot = lease.boot;
            h.lease_id = 0;
            h.files.iter().map(|(k, f)| (*k, f.clone())).collect()
        };
        for ((ino, owner), f) in reclaim {
            self.reclaim(ino, owner, f).await;
        }
    }

    /// Takes again, in the manager's grace period, each range `owner` held of `ino`.
    async fn reclaim(self: &Arc<Self>, ino: u64, owner: u64, f: HeldFile) {
        for s in &f.spans {
            let r = calls::Lock {
                path: f.path.clone(),
                ino,
                owner,
                pid: f.pid,
                exclusive: s.exclusive,
                start: s.start,
                end: s.end,
                reclaim: true,
            };
            let why = match self.lock(&r).await {
                Ok(Locked::Granted) => continue,
                Ok(other) => format!("{other:?}"),
                Err(e) => e.to_string(),
            };
            // Not taken again (refused, the file renamed or gone meanwhile): it is lost, and
            // this client no longer counts it as held.
            tracing::warn!(path = %f.path, "record lock lost in a manager restart: {why}");
            self.held_locks
                .inner
                .lock()
                .expect("held locks")
                .files
                .remove(&(ino, owner));
            // What of the owner's ranges was taken again goes too (best effort), so no half
            // of its locks stays held.
            let all = calls::Unlock {
                ino,
                owner,
                start: 0,
                end: u64::MAX,
            };
            let _ = self.call(&f.path, all).await;
            return;
        }
    }
}

fn outcome(a: LockAnswer) -> Locked {
    match (a.outcome, a.holder) {
        (LockOutcome::Granted, _) => Locked::Granted,
        (LockOutcome::Conflict, Some(h)) => Locked::Conflict(h),
        (LockOutcome::Grace, _) => Locked::Grace,
        // A conflict without its holder, or a reclaim refused: taken by someone else.
        (LockOutcome::Conflict | LockOutcome::NoGrace, _) => Locked::Conflict(LockHolder {
            start: 0,
            end: u64::MAX,
            exclusive: true,
            pid: 0,
            mine: false,
        }),
    }
}

/// Renews the client's lock lease four times per lease while it holds any lock.
async fn renew_while_held(me: Weak<Client>) {
    loop {
        let period_ms = {
            let Some(c) = me.upgrade() else { return };
            let mut h = c.held_locks.inner.lock().expect("held locks");
            if h.files.is_empty() {
                h.renewing = false;
                return;
            }
            (u64::from(h.lease_ms) / 4).max(RENEW_PERIOD_MS_MIN)
        };
        tokio::time::sleep(Duration::from_millis(period_ms)).await;
        let Some(c) = me.upgrade() else { return };
        match c.call("/", calls::LockRenew).await {
            Ok(lease) => c.renewed(lease).await,
            Err(e) => tracing::debug!("renewing the lock lease: {e}"),
        }
    }
}
