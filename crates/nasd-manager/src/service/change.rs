//! Changes to a file's attributes — mode, owners, size, times — and the revocation of its
//! capabilities that comes with them (and with a returned write capability).

use super::perms::{may, R, W};
use super::{denied, store_err, Caller, Manager};
use crate::store::*;
use crate::{now_ms, now_us, MgrError, MgrResult};
use nasd_proto::manager::*;
use nasd_proto::{AttrMask, Attributes};

impl Manager {
    /// Revokes every capability of a file (its components' access_control_version moves on)
    /// and mirrors the inode (as given: a chmod's new mode included) into their
    /// `fs_specific`. Crash-safe: the inode with its new version is stored first together with
    /// a revocation intent, then the drives take the version, then the intent goes; an intent
    /// a crash left is completed before the manager serves again
    /// ([`Manager::complete_revocations`]), and an `Open` of the file waits while this runs
    /// ([`super::revoking`]), so capabilities are never minted from a version the drives do
    /// not have yet. Components that could not take the new version are
    /// marked stale (the layout covers them, or the revocation fails and its intent stays).
    pub(super) async fn revoke_and_mirror(&self, mut i: Inode) -> MgrResult<Inode> {
        // Opens of the file wait from before the new version is stored until every drive
        // has it (`revoking`).
        let _in_flight = self.revoking.begin(i.ino).await;
        i.acv += 1;
        self.st()
            .begin_revocation(&i)
            .map_err(|e| store_err(e, "inode"))?;
        self.drives_take_revocation(i).await
    }

    /// The drives' half of a revocation whose intent is stored (see
    /// [`Manager::revoke_and_mirror`]).
    async fn finish_revocation(&self, i: Inode) -> MgrResult<Inode> {
        let _in_flight = self.revoking.begin(i.ino).await;
        self.drives_take_revocation(i).await
    }

    /// [`Manager::finish_revocation`], its file marked in flight by the caller.
    async fn drives_take_revocation(&self, mut i: Inode) -> MgrResult<Inode> {
        let missed = self.revoke_layout(&i).await?;
        if let (Some(l), true) = (&mut i.layout, missed != 0) {
            l.stale |= missed;
            l.version += 1;
            self.st()
                .update_inode(&i)
                .map_err(|e| store_err(e, "inode"))?;
        }
        self.st()
            .end_revocation(i.ino)
            .map_err(|e| store_err(e, "inode"))?;
        Ok(i)
    }

    /// Whether a revocation intent is stored (a crash or an unreachable drive interrupted it).
    pub fn revocations_pending(&self) -> bool {
        self.st().revocations().is_ok_and(|r| !r.is_empty())
    }

    /// Completes the revocations a crash interrupted (their intents in the store); returns
    /// how many are still pending (a drive did not answer; retried later).
    pub async fn complete_revocations(&self) -> usize {
        let pending = match self.st().revocations() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("reading revocation intents: {e}");
                return 0;
            }
        };
        let mut left = 0;
        for ino in pending {
            let i = match self.st().inode(ino) {
                Ok(Some(i)) => i,
                Ok(None) => {
                    let _ = self.st().end_revocation(ino);
                    continue;
                }
                Err(_) => {
                    left += 1;
                    continue;
                }
            };
            match self.finish_revocation(i).await {
                Ok(_) => tracing::info!(ino, "interrupted revocation completed"),
                Err(e) => {
                    tracing::warn!(ino, "interrupted revocation still pending: {}", e.detail);
                    left += 1;
                }
            }
        }
        left
    }

    /// `ReturnCapability`: the writer is done. If it held the file's write lease, the lease
    /// ends and every capability for the file's objects is revoked now (seed 002 §3.2), so the
    /// returned one stops working at once. Under a quota the file is then measured, its size
    /// charged and its escrow let go ("when the capability is returned ... the file manager
    /// examines the object to determine its new size").
    pub async fn return_capability(&self, c: &Caller, path: &str) -> MgrResult<()> {
        let i = self.resolve(c, path)?;
        if i.kind == FileKind::Dir || !self.leases.release(i.ino, c.holder(), now_ms()) {
            return Ok(());
        }
        let tracked = i.charged.is_some();
        let ino = i.ino;
        self.revoke_and_mirror(i).await.map_err(|e| e.at(path))?;
        if tracked {
            self.settle(ino, true).await.map_err(|e| e.at(path))?;
        }
        Ok(())
    }

    /// Only the owner (or an admin) changes a mode, except that a writer may take the
    /// set-user-ID and set-group-ID bits away and nothing else: what a write by anyone but
    /// root does on Linux (the kernel asks a mount for it before the write goes out). Who
    /// may read or write is unchanged by that, so no capability is revoked.
    pub async fn chmod(&self, c: &Caller, path: &str, mode: u32) -> MgrResult<()> {
        let mut i = self.resolve(c, path)?;
        let mode = mode & 0o7777;
        if !c.admin && i.uid != c.uid {
            const SET_ID: u32 = 0o6000;
            let rest_kept = mode & !SET_ID == i.mode & !SET_ID;
            let set_id_dropped = mode & SET_ID & !i.mode == 0 && mode != i.mode;
            if !(rest_kept && set_id_dropped && may(c, &i, W)) {
                return Err(denied(path, "only the owner may change the mode"));
            }
            i.mode = mode;
            i.ctime_us = now_us();
            return self.st().update_inode(&i).map_err(|e| store_err(e, path));
        }
        i.mode = mode;
        i.ctime_us = now_us();
        self.revoke_and_mirror(i).await.map_err(|e| e.at(path))?;
        Ok(())
    }

    /// Under quotas the file's charge moves from its old owner to its new one (measured now),
    /// in the same transaction as the new owner. With `nofollow` a symbolic link itself
    /// changes owners (`lchown`), never what it names.
    pub async fn chown(
        &self,
        c: &Caller,
        path: &str,
        owner: &str,
        group: &str,
        nofollow: bool,
    ) -> MgrResult<()> {
        let mut i = self.resolve_at(c, path, nofollow)?;
        let was = i.uid;
        if !owner.is_empty() {
            // A number names a uid, as GNU chown reads one (names never start with a digit).
            let u = match owner.parse::<u32>() {
                Ok(uid) => self.st().user_by_uid(uid),
                Err(_) => self.st().user_by_name(owner),
            }
            .map_err(|e| store_err(e, owner))?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, owner.to_string()))?;
            if !c.admin && u.uid != i.uid {
                return Err(denied(path, "only an admin may give a file away"));
            }
            i.uid = u.uid;
        }
        if !group.is_empty() {
            let g = match group.parse::<u32>() {
                Ok(gid) => self.st().group_by_gid(gid),
                Err(_) => self.st().group_by_name(group),
            }
            .map_err(|e| store_err(e, group))?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownGroup, group.to_string()))?;
            if !c.admin && (i.uid != c.uid || !c.groups.contains(&g.gid)) {
                return Err(denied(
                    path,
                    "the owner may only choose a group they belong to",
                ));
            }
            i.gid = g.gid;
        }
        if i.uid != was && i.kind == FileKind::File && self.has_quota(i.uid)? {
            i.charged = Some(self.file_times(&i).await.map_err(|e| e.at(path))?.0);
        }
        i.ctime_us = now_us();
        self.revoke_and_mirror(i).await.map_err(|e| e.at(path))?;
        Ok(())
    }

    pub async fn truncate(&self, c: &Caller, path: &str, size: u64) -> MgrResult<()> {
        let i = self.resolve(c, path)?;
        if i.layout.is_none() {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if !may(c, &i, W) {
            return Err(denied(path, "write permission on the file"));
        }
        if i.e2e.is_some() {
            // Cutting re-encrypts the new last block and changes the trusted record: only a
            // writer holding the key can (seed 003).
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: an encrypted file is cut by its writer (a copy-on-write change), not by the manager"),
            ));
        }
        // The change holds the write lease; one the caller held before stays theirs.
        let had = self
            .leases
            .holder(i.ino, now_ms())
            .is_some_and(|(h, _)| h == c.holder());
        let i = self.take_lease(c, path, &i).await?;
        let r = self.truncate_charged(path, &i, size).await;
        if !had {
            self.leases.release(i.ino, c.holder(), now_ms());
        }
        r.map_err(|e| e.at(path))?;
        self.st()
            .set_times(i.ino, None, None, now_us())
            .map_err(|e| store_err(e, path))
    }

    /// [`Manager::truncate_layout`], under the owner's quota when there is one: the change is
    /// recorded first as a file escrow reaching the larger of the two sizes (checked when it
    /// grows the file), so a crash in between leaves the file to be measured and settled;
    /// then the file is measured, and the escrow goes unless a writer's was there already.
    pub(super) async fn truncate_charged(&self, path: &str, i: &Inode, size: u64) -> MgrResult<()> {
        if i.charged.is_none() {
            return self.truncate_layout(path, i, size).await;
        }
        let (now_size, _) = self.file_times(i).await?;
        let had_escrow = self
            .st()
            .file_escrow(i.ino)
            .map_err(|e| store_err(e, path))?
            .is_some();
        let intent = FileEscrow {
            ino: i.ino,
            uid: i.uid,
            end: size.max(now_size),
            expires_ms: now_ms(),
        };
        let taken = self.st().escrow_file(&intent, now_ms(), size > now_size);
        taken.map_err(|e| self.quota_err(e, path))?;
        let r = self.truncate_layout(path, i, size).await;
        self.settle(i.ino, !had_escrow).await?;
        r
    }

    /// Sets the access and modify times (each `None` left as it is; `UTIMES_NOFOLLOW`: a
    /// symbolic link's own). A one-object file's modify time lives in its object's
    /// attributes (seed 002 Table 5); every other time in the inode, whose change time
    /// moves now. `UTIMES_ACCESSED` is a read's access time (a mount's `relatime`): any
    /// reader may set it, to now at the latest, and the change time stays.
    pub async fn utimes(
        &self,
        c: &Caller,
        path: &str,
        atime_us: Option<u64>,
        mtime_us: Option<u64>,
        flags: u8,
    ) -> MgrResult<()> {
        let i = self.resolve_at(c, path, flags & UTIMES_NOFOLLOW != 0)?;
        if flags & UTIMES_ACCESSED != 0 {
            if mtime_us.is_some() || !may(c, &i, R) {
                return Err(denied(path, "a read's access time, by a reader"));
            }
            let at = atime_us.map(|t| t.min(now_us()));
            return self
                .st()
                .set_times(i.ino, at, None, i.ctime_us)
                .map_err(|e| store_err(e, path));
        }
        if !c.admin && i.uid != c.uid && !may(c, &i, W) {
            return Err(denied(path, "only the owner or a writer may set times"));
        }
        let on_object = i
            .layout
            .as_ref()
            .filter(|l| l.sized_by_object())
            .map(|l| l.first());
        let mut inode_mtime = mtime_us;
        if let (Some(mtime_us), Some(o)) = (mtime_us, on_object) {
            let attrs = Attributes {
                fs_data_modify_time_us: mtime_us,
                fs_attribute_modify_time_us: now_us(),
                ..Attributes::default()
            };
            let mask = AttrMask::FS_DATA_MODIFY_TIME.with(AttrMask::FS_ATTRIBUTE_MODIFY_TIME);
            self.setattr(o, mask, attrs).await.map_err(|e| e.at(path))?;
            inode_mtime = None;
        }
        self.st()
            .set_times(i.ino, atime_us, inode_mtime, now_us())
            .map_err(|e| store_err(e, path))
    }
}
