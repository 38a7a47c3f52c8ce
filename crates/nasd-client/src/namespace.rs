//! The namespace as a client sees it: each manager call a short method over [`Client::call`]
//! (stats, listings, directories, names, links, extended attributes, modes, owners, times,
//! layouts, quotas, key lookups). Stats and attributes are cached while the callback channel
//! keeps them true ([`crate::callbacks`]); a change of this client's own drops what it
//! touches (`Client::request`), as the manager breaks only other sessions' callbacks, and a
//! change that answers with the path's new stat (mkdir, chmod, chown, truncate, utimes)
//! leaves that one cached.

use crate::callbacks::{AttrKind, Cached};
use crate::e2e::keyring::READER_MODE_BITS;
use crate::escape::shown;
use crate::files::{now_ms, Client, FsError};
use nasd_proto::manager::{
    calls, Call, DirEntry, FileKind, FileStat, FsSpace, MgrStatus, Principal, QuotaInfo, Xattr,
    READDIR_PAGE_ENTRIES_MAX,
};
use std::sync::Arc;

impl Client {
    /// The uid this client is logged in as.
    pub async fn uid(&self) -> Result<u32, FsError> {
        if let Some(uid) = self.session_uid().await {
            return Ok(uid);
        }
        // Reconnect (a lost connection is resumed by the next request).
        let nobody = calls::UserKeyGet {
            uids: vec![],
            names: vec![],
        };
        self.call("/", nobody).await?;
        self.session_uid()
            .await
            .ok_or_else(|| FsError::Usage("not logged in".into()))
    }

    /// The uid of user `name` or the gid of group `name` (for `share`).
    pub async fn principal_named(&self, name: &str, group: bool) -> Result<Principal, FsError> {
        let missing = || {
            FsError::Usage(format!(
                "no {} named {name} with keys",
                if group { "group" } else { "user" }
            ))
        };
        if group {
            let gs = self.group_key_get(vec![], vec![name.into()]).await?;
            gs.first()
                .map(|g| Principal::Group(g.gid))
                .ok_or_else(missing)
        } else {
            let one = calls::UserKeyGet {
                uids: vec![],
                names: vec![name.into()],
            };
            let us = self.call("/", one).await?;
            us.first()
                .map(|u| Principal::User(u.uid))
                .ok_or_else(missing)
        }
    }

    pub async fn stat(&self, path: &str) -> Result<FileStat, FsError> {
        let call = calls::Stat { path: path.into() };
        self.stat_cached(path, AttrKind::Stat, call).await
    }

    /// [`Client::stat`] of the last name itself: a symbolic link is not followed.
    pub async fn lstat(&self, path: &str) -> Result<FileStat, FsError> {
        let call = calls::Lstat { path: path.into() };
        self.stat_cached(path, AttrKind::Lstat, call).await
    }

    /// A stat from the callback cache, else straight from the drive (for `Stat` of a
    /// one-object file whose read grant is cached: seed 002 §3, no manager round trip), else
    /// from the manager with `call`.
    async fn stat_cached<C: Call<Reply = FileStat>>(
        &self,
        path: &str,
        kind: AttrKind,
        call: C,
    ) -> Result<FileStat, FsError> {
        let now = now_ms();
        if let Some(c) = self.callbacks.get(path, kind, now) {
            return Ok(c.stat);
        }
        if kind == AttrKind::Stat {
            if let Some(st) = self.stat_from_drive(path, now).await {
                return Ok(st);
            }
        }
        let epoch = self.callbacks.epoch();
        let stat = self.call(path, call).await?;
        let c = Cached {
            stat: stat.clone(),
            xattrs: None,
            fetched_ms: now,
        };
        self.callbacks.put(path, kind, c, epoch);
        Ok(stat)
    }

    /// Every entry of directory `path`, in name order, read a page at a time.
    pub async fn list(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        self.list_with(path, None).await
    }

    /// [`Client::list`], each file's entry carrying extended attribute `xattr`
    /// ([`Client::list_page_with`]).
    pub async fn list_with(
        &self,
        path: &str,
        xattr: Option<&str>,
    ) -> Result<Vec<DirEntry>, FsError> {
        let mut all: Vec<DirEntry> = vec![];
        loop {
            let after = all.last().map(|e| e.name.clone()).unwrap_or_default();
            let page = self
                .list_page_with(path, &after, READDIR_PAGE_ENTRIES_MAX, xattr)
                .await?;
            let last = page.len() < READDIR_PAGE_ENTRIES_MAX;
            all.extend(page);
            if last {
                return Ok(all);
            }
        }
    }

    /// A page of directory `path`: at most `limit` entries (and
    /// [`READDIR_PAGE_ENTRIES_MAX`]) named after `after` in byte order, from the first when
    /// `after` is empty. A page shorter than `limit` is the last.
    pub async fn list_page(
        &self,
        path: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<DirEntry>, FsError> {
        self.list_page_with(path, after, limit, None).await
    }

    /// [`Client::list_page`], each file's entry carrying extended attribute `xattr` (when
    /// the file has it, this user may read the file, and it is short: an ETag, a checksum).
    pub async fn list_page_with(
        &self,
        path: &str,
        after: &str,
        limit: usize,
        xattr: Option<&str>,
    ) -> Result<Vec<DirEntry>, FsError> {
        let call = calls::Readdir {
            path: path.into(),
            after: after.into(),
            limit: limit.min(READDIR_PAGE_ENTRIES_MAX) as u32,
            xattr: xattr.map(str::to_string),
        };
        let page = self.call(path, call).await?;
        if page.len() > limit {
            return Err(FsError::Protocol {
                path: path.into(),
                call: calls::Readdir::NAME,
                reply: "more entries than the page holds",
            });
        }
        Ok(page)
    }

    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<(), FsError> {
        let p = path.into();
        self.call(path, calls::Mkdir { path: p, mode }).await?;
        Ok(())
    }

    pub async fn rmdir(&self, path: &str) -> Result<(), FsError> {
        self.call(path, calls::Rmdir { path: path.into() }).await
    }

    pub async fn unlink(&self, path: &str) -> Result<(), FsError> {
        self.caps_invalidate(path);
        self.call(path, calls::Unlink { path: path.into() }).await
    }

    pub async fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        self.rename_with(from, to, 0).await
    }

    /// [`Client::rename`] with `flags`: `RENAME_NOREPLACE` (`Exists` rather than replace) or
    /// `RENAME_EXCHANGE` (swap two names, both of which exist).
    pub async fn rename_with(&self, from: &str, to: &str, flags: u8) -> Result<(), FsError> {
        self.caps_invalidate(from);
        self.caps_invalidate(to);
        let (f, to) = (from.into(), to.into());
        self.call(from, calls::Rename { from: f, to, flags }).await
    }

    /// Makes `path` a FIFO, socket or device of `kind` with permission bits `mode` and device
    /// number `rdev` (devices: admins only).
    pub async fn mknod(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<(), FsError> {
        self.caps_invalidate(path);
        let p = path.into();
        let call = calls::Mknod {
            path: p,
            kind,
            mode,
            rdev,
        };
        self.call(path, call).await
    }

    /// The cluster's capacity and the caller's quota, as `statfs` shows them.
    pub async fn statfs(&self, path: &str) -> Result<FsSpace, FsError> {
        self.call(path, calls::Statfs { path: path.into() }).await
    }

    /// Makes `path` a symbolic link to `target` (stored as given; it need not exist).
    pub async fn symlink(&self, target: &str, path: &str) -> Result<(), FsError> {
        self.caps_invalidate(path);
        let (p, target) = (path.into(), target.into());
        self.call(path, calls::Symlink { path: p, target }).await
    }

    /// The target of the symbolic link `path`.
    pub async fn readlink(&self, path: &str) -> Result<String, FsError> {
        let target = self.call(path, calls::Readlink { path: path.into() });
        Ok(target.await?.0)
    }

    /// Gives the file `existing` the further name `new` (a hard link).
    pub async fn link(&self, existing: &str, new: &str) -> Result<(), FsError> {
        self.caps_invalidate(new);
        let (existing, n) = (existing.into(), new.into());
        self.call(new, calls::Link { existing, new: n }).await
    }

    /// The stat and extended attributes of `path` (one manager round trip).
    pub async fn getxattrs(&self, path: &str) -> Result<(FileStat, Vec<Xattr>), FsError> {
        let now = now_ms();
        if let Some(c) = self.callbacks.get(path, AttrKind::Xattrs, now) {
            if let Some(x) = c.xattrs {
                return Ok((c.stat, (*x).clone()));
            }
        }
        let epoch = self.callbacks.epoch();
        let got = self.call(path, calls::Getxattrs { path: path.into() });
        let got = got.await?;
        let c = Cached {
            stat: got.stat.clone(),
            xattrs: Some(Arc::new(got.xattrs.clone())),
            fetched_ms: now,
        };
        self.callbacks.put(path, AttrKind::Xattrs, c, epoch);
        Ok((got.stat, got.xattrs))
    }

    /// Sets extended attribute `name` of `path` to `value`, or removes it (`None`).
    pub async fn setxattr(
        &self,
        path: &str,
        name: &str,
        value: Option<&[u8]>,
    ) -> Result<(), FsError> {
        let call = calls::Setxattr {
            path: path.into(),
            name: name.into(),
            value: value.map(<[u8]>::to_vec),
        };
        self.call(path, call).await
    }

    pub async fn chmod(&self, path: &str, mode: u32) -> Result<(), FsError> {
        let before = self.callbacks.get(path, AttrKind::Lstat, now_ms());
        self.caps_invalidate(path);
        let p = path.into();
        self.call(path, calls::Chmod { path: p, mode }).await?;
        // An encrypted file's readers follow its group and other read bits
        // ([`Client::readers_of`]): a change that keeps them, seen against the stat the
        // callback kept true, keeps the wraps as they are.
        let kept = before.is_some_and(|b| {
            b.stat.kind == FileKind::File && (b.stat.mode ^ mode) & READER_MODE_BITS == 0
        });
        if !kept {
            self.follow_readers(path).await;
        }
        Ok(())
    }

    pub async fn chown(&self, path: &str, owner: &str, group: &str) -> Result<(), FsError> {
        self.chown_with(path, owner, group, false).await
    }

    /// [`Client::chown`]; with `nofollow`, of a symbolic link itself (`lchown`).
    pub async fn chown_with(
        &self,
        path: &str,
        owner: &str,
        group: &str,
        nofollow: bool,
    ) -> Result<(), FsError> {
        self.caps_invalidate(path);
        let call = calls::Chown {
            path: path.into(),
            owner: owner.into(),
            group: group.into(),
            nofollow,
        };
        self.call(path, call).await?;
        self.follow_readers(path).await;
        Ok(())
    }

    /// After a change of mode or owners, an encrypted file's wraps follow its new readers
    /// ([`Client::rewrap`]); the change itself stands if that fails (a caller without a wrap
    /// of the file's key cannot), and the failure is logged.
    async fn follow_readers(&self, path: &str) {
        match self.rewrap(path).await {
            Ok(()) => {}
            Err(e) if e.status() == Some(MgrStatus::IsADirectory) => {}
            Err(e) => tracing::warn!(
                "{}: keys not rewrapped for the new readers: {e}",
                shown(path)
            ),
        }
    }

    /// Sets the modify time of `path` (its access time stays).
    pub async fn utimes(&self, path: &str, mtime_us: u64) -> Result<(), FsError> {
        self.set_times(path, None, Some(mtime_us), 0).await
    }

    /// Sets the access and modify times of `path` (`None` leaves one as it is); `flags`:
    /// `UTIMES_NOFOLLOW` (a symbolic link's own), `UTIMES_ACCESSED` (a read's access time:
    /// the change time stays).
    pub async fn set_times(
        &self,
        path: &str,
        atime_us: Option<u64>,
        mtime_us: Option<u64>,
        flags: u8,
    ) -> Result<(), FsError> {
        let p = path.into();
        let call = calls::Utimes {
            path: p,
            atime_us,
            mtime_us,
            flags,
        };
        self.call(path, call).await?;
        Ok(())
    }

    /// The layout spec new files under the directory `path` get.
    pub async fn layout_get(&self, path: &str) -> Result<String, FsError> {
        let spec = self.call(path, calls::LayoutGet { path: path.into() });
        Ok(spec.await?.0)
    }

    /// Sets `user`'s quota to `limit` bytes, or removes it (`None`); admins only. Returns the
    /// quota as set (none when removed).
    pub async fn quota_set(
        &self,
        user: &str,
        limit: Option<u64>,
    ) -> Result<Vec<QuotaInfo>, FsError> {
        let user = user.into();
        self.call("/", calls::QuotaSet { user, limit }).await
    }

    /// `user`'s quota (one's own, or anyone's for an admin), or with `""` every quota this
    /// user may see.
    pub async fn quota_get(&self, user: &str) -> Result<Vec<QuotaInfo>, FsError> {
        self.call("/", calls::QuotaGet { user: user.into() }).await
    }
}
