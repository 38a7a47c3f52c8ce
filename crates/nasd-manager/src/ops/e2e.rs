//! The end-to-end calls: a file's state replaced without its content, users' and groups'
//! keys set and looked up.

use super::Handle;
use crate::callbacks::{self, Changed};
use crate::service::{Caller, Manager};
use crate::MgrResult;
use nasd_proto::manager::{calls, GroupKeyInfo, KeyLogPage, UserKeyInfo, WrappedFile};
use std::sync::Arc;

/// Delegated: wraps follow a mode a gateway sets (S3 ACLs), and a new wrap can carry only a key
/// the session already opens, so a gateway reads nothing more through it; dropping wraps takes
/// no more than removing the file, which a delegate may do.
impl Handle for calls::E2eUpdate {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::file(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.e2e_update(c, &self.path, self.update)
    }
}

impl Handle for calls::UserKeySet {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.user_key_set(c, &self.user, &self.keys)
    }
}

impl Handle for calls::UserKeyGet {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Vec<UserKeyInfo>> {
        m.user_key_get(c, &self.uids, &self.names)
    }
}

/// Read by a gateway's sessions too: it wraps the keys of files it writes for its users.
impl Handle for calls::KeyLog {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, _c: &Caller) -> MgrResult<KeyLogPage> {
        m.key_log_page(self.from)
    }
}

impl Handle for calls::UserKeyReset {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.user_key_reset(c, &self.user)
    }
}

impl Handle for calls::GroupKeySet {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.group_key_set(c, &self)
    }
}

impl Handle for calls::GroupKeyGet {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Vec<GroupKeyInfo>> {
        m.group_key_get(c, &self.gids, &self.names)
    }
}

impl Handle for calls::E2eWrappedFiles {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Vec<WrappedFile>> {
        let (mgr, c) = (m.clone(), c.clone());
        tokio::task::spawn_blocking(move || mgr.e2e_wrapped_files(&c, self.after, self.limit))
            .await
            .map_err(super::joined)?
    }
}

impl Handle for calls::E2eRewrap {
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::file(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.e2e_rewrap(c, &self.path, self.update)
    }
}

impl Handle for calls::GroupWrapSet {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.group_wrap_set(c, &self.wraps)
    }
}
