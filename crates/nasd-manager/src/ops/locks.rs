//! Record locks and `flock` ([`crate::locks`]): a lock or a test after the caller's right to
//! lock the file ([`Manager::lockable`]); unlocks, renewals and drops of the caller's own
//! session's locks. Every call is answered at once: a client that waits for a lock asks again.

use super::Handle;
use crate::locks::ranges::Owner;
use crate::locks::{LockError, Want};
use crate::service::{Caller, Manager};
use crate::{now_ms, MgrError, MgrResult};
use nasd_proto::manager::{calls, LockAnswer, LockLease, MgrStatus};
use std::sync::Arc;

/// A refusal of the lock table: out of room (ENOLCK), or a range that is not one.
fn refused(e: LockError) -> MgrError {
    let status = match e {
        LockError::BadRange { .. } => MgrStatus::InvalidArgument,
        _ => MgrStatus::NoLocks,
    };
    MgrError::new(status, e.to_string())
}

fn owner(c: &Caller, id: u64) -> Owner {
    Owner {
        session: c.session,
        id,
    }
}

impl Handle for calls::Lock {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<LockAnswer> {
        m.lockable(c, &self.path, self.ino)?;
        let w = Want {
            ino: self.ino,
            owner: owner(c, self.owner),
            start: self.start,
            end: self.end,
            exclusive: self.exclusive,
            pid: self.pid,
        };
        m.locks
            .lock(&w, self.reclaim, now_ms())
            .map_err(|e| refused(e).at(&self.path))
    }
}

impl Handle for calls::LockTest {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<LockAnswer> {
        m.lockable(c, &self.path, self.ino)?;
        let w = Want {
            ino: self.ino,
            owner: owner(c, self.owner),
            start: self.start,
            end: self.end,
            exclusive: self.exclusive,
            pid: 0,
        };
        m.locks
            .test(&w, now_ms())
            .map_err(|e| refused(e).at(&self.path))
    }
}

impl Handle for calls::Unlock {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<LockAnswer> {
        let w = Want {
            ino: self.ino,
            owner: owner(c, self.owner),
            start: self.start,
            end: self.end,
            exclusive: false,
            pid: 0,
        };
        m.locks.unlock(&w, now_ms()).map_err(refused)
    }
}

impl Handle for calls::LockRenew {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<LockLease> {
        Ok(m.locks.renew(c.session, now_ms()))
    }
}

impl Handle for calls::LockDrop {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.locks.drop_session(c.session);
        Ok(())
    }
}
