//! The file calls: grants (create, open, return), staged uploads (commit, abort, renew),
//! prepared files and copy-on-write changes.

use super::Handle;
use crate::callbacks::{self, Changed};
use crate::service::{Caller, Manager};
use crate::MgrResult;
use nasd_proto::manager::{calls, Created, Grant, PreparedFile, StagedGrant};
use std::sync::Arc;

impl Handle for calls::Create {
    const DELEGATED: bool = true;
    /// An exclusive create makes its name at once; a staged one only at its commit.
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        match self.exclusive {
            true => callbacks::made(m, c, &self.path),
            false => vec![],
        }
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Created> {
        m.create(c, &self.path, self.mode, self.exclusive, self.extend_by)
            .await
    }
}

impl Handle for calls::Open {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Grant> {
        m.open(c, &self.path, self.write, self.extend_by).await
    }
}

impl Handle for calls::ReturnCapability {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::file(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        let (audit_id, path) = (self.audit_id, &self.path);
        tracing::info!(audit_id, user = %c.name, path, "capability returned");
        m.return_capability(c, path).await
    }
}

impl Handle for calls::Commit {
    const DELEGATED: bool = true;
    /// The file the name holds now (its content changes), else the directory the new name
    /// goes into.
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        match callbacks::entry(m, c, &self.path) {
            Some((_, _, Some(ino))) => vec![Changed::file(ino)],
            Some((dir, name, None)) => vec![Changed::name(dir, dir, &name)],
            None => vec![],
        }
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.commit(c, self).await
    }
}

impl Handle for calls::Abort {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.abort(c, &self.path, self.drive, self.object).await
    }
}

impl Handle for calls::Renew {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<StagedGrant> {
        m.renew(c, &self.path, self.drive, self.object, self.extend_by)
            .await
    }
}

impl Handle for calls::Prepare {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Vec<PreparedFile>> {
        m.prepare(c, &self.dir, self.mode, self.count, self.extend_by)
            .await
    }
}

impl Handle for calls::StageWrite {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<StagedGrant> {
        m.stage_write(c, &self.path, self.extend_by).await
    }
}
