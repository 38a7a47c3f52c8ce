//! The namespace calls: stats, directory pages, directories, names, links, modes, owners,
//! sizes, times and the layouts directories give new files.

use super::Handle;
use crate::callbacks::{self, Changed};
use crate::service::{Caller, Manager};
use crate::MgrResult;
use nasd_proto::manager::{
    calls, DirEntry, DirReaders, FileStat, FsSpace, LayoutSpec, LinkTarget, MgrStatus,
};
use std::sync::Arc;

impl Handle for calls::Stat {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<FileStat> {
        m.stat(c, &self.path).await
    }
}

impl Handle for calls::Lstat {
    const DELEGATED: bool = true;
    /// A name that does not exist registers a callback on its directory (a mount keeps the
    /// absence as a negative entry while callbacks hold).
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<FileStat> {
        let r = m.lstat(c, &self.path).await;
        if matches!(&r, Err(e) if e.status == MgrStatus::NoSuchPath) {
            callbacks::register_missing(m, c, &self.path);
        }
        r
    }
}

impl Handle for calls::Readdir {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Vec<DirEntry>> {
        let limit = self.limit as usize;
        m.readdir(c, &self.path, &self.after, limit, self.xattr.as_deref())
            .await
    }
}

impl Handle for calls::Mkdir {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::made(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<FileStat> {
        m.mkdir(c, &self.path, self.mode)?;
        m.lstat(c, &self.path).await
    }
}

impl Handle for calls::Rmdir {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::gone(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.rmdir(c, &self.path)
    }
}

impl Handle for calls::Unlink {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::gone(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.unlink(c, &self.path).await
    }
}

impl Handle for calls::Rename {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        let mut out = callbacks::gone(m, c, &self.from);
        out.extend(callbacks::gone(m, c, &self.to));
        out
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.rename(c, &self.from, &self.to, self.flags).await
    }
}

impl Handle for calls::Symlink {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::made(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.symlink(c, &self.path, &self.target)
    }
}

impl Handle for calls::Readlink {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<LinkTarget> {
        m.readlink(c, &self.path).map(LinkTarget)
    }
}

impl Handle for calls::Link {
    const DELEGATED: bool = true;
    /// The linked file (its link count) and the new name's directory.
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        let mut out = vec![];
        if let Some((_, _, Some(ino))) = callbacks::entry(m, c, &self.existing) {
            out.push(Changed::file(ino));
        }
        out.extend(callbacks::made(m, c, &self.new));
        out
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.link(c, &self.existing, &self.new)
    }
}

impl Handle for calls::Chmod {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::file(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<FileStat> {
        m.chmod(c, &self.path, self.mode).await?;
        m.lstat(c, &self.path).await
    }
}

impl Handle for calls::Chown {
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::file(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<FileStat> {
        m.chown(c, &self.path, &self.owner, &self.group, self.nofollow)
            .await?;
        m.lstat(c, &self.path).await
    }
}

impl Handle for calls::Truncate {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::file(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<FileStat> {
        m.truncate(c, &self.path, self.size).await?;
        m.lstat(c, &self.path).await
    }
}

impl Handle for calls::Utimes {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::file(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<FileStat> {
        let (a, t) = (self.atime_us, self.mtime_us);
        m.utimes(c, &self.path, a, t, self.flags).await?;
        m.lstat(c, &self.path).await
    }
}

impl Handle for calls::LayoutGet {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<LayoutSpec> {
        m.layout_get(c, &self.path).map(LayoutSpec)
    }
}

impl Handle for calls::LayoutSet {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<DirReaders> {
        m.layout_set(c, &self.path, &self.spec).map(DirReaders)
    }
}

impl Handle for calls::PolicyLog {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.policy_log(c, self.readers)
    }
}

impl Handle for calls::Mknod {
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::made(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.mknod(c, &self.path, self.kind, self.mode, self.rdev)
    }
}

impl Handle for calls::Statfs {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<FsSpace> {
        m.statfs(c, &self.path).await
    }
}
