//! Files and their grants: create (exclusive, or staged for a commit), prepared files,
//! commit, abort and renewal of staged uploads, open for reading or writing under the write
//! lease, copy-on-write changes, read repair, and the minting of capabilities.

use super::namespace::new_inode;
use super::perms::{may, R, W, X};
use super::resolve::{check_new_name, split_path};
use super::{denied, invalid_xattrs, store_err, Caller, Manager};
use crate::drives;
use crate::quota::{escrow_end, WriteBound};
use crate::store::*;
use crate::striping::{tolerated, Access};
use crate::{now_ms, MgrError, MgrResult};
use nasd_proto::manager::*;
use nasd_proto::{ObjectId, Rights};

/// Most bytes one `Repair` rewrites.
pub const REPAIR_BYTES_MAX: u64 = 64 << 20;

/// Where a prepared file is recorded as staged ([`Manager::prepare`]): its directory's names
/// joined, ending in `/` (no file's path does), so `Commit`, `Renew` and `Abort` find it.
pub(super) fn prepared_marker(dir: &[&str]) -> String {
    match dir {
        [] => "/".into(),
        names => format!("/{}/", names.join("/")),
    }
}

pub(super) fn is_prepared(s: &Staged) -> bool {
    s.new_file && s.path.ends_with('/')
}

/// Whether `path` names the prepared file `s`: as a file in its directory (a commit) or as
/// the directory itself (`Renew`, `Abort`).
pub(super) fn is_prepared_at(s: &Staged, path: &str) -> bool {
    let Ok(names) = split_path(path) else {
        return false;
    };
    is_prepared(s)
        && (prepared_marker(&names) == s.path
            || names
                .split_last()
                .is_some_and(|(_, dir)| prepared_marker(dir) == s.path))
}

impl Manager {
    /// Gives `c` the write lease of file `i` (or extends theirs) for a write capability's
    /// lifetime; `Busy` while another session holds it. The first lease on a file after a
    /// manager restart revokes older capabilities first; the inode returned carries the
    /// version to mint from.
    pub(super) async fn take_lease(&self, c: &Caller, path: &str, i: &Inode) -> MgrResult<Inode> {
        let now = now_ms();
        let until = now + self.policy.write_cap_ttl_ms;
        match self.leases.take(i.ino, c.holder(), now, until) {
            Ok(t) if t.revoke_first => match self.revoke_and_mirror(i.clone()).await {
                Ok(i) => Ok(i),
                Err(e) => {
                    self.leases.release(i.ino, c.holder(), now);
                    Err(e.at(path))
                }
            },
            Ok(_) => Ok(i.clone()),
            Err(busy) => {
                let who = self.names(busy.holder.uid, 0).0;
                Err(MgrError::new(
                    MgrStatus::Busy,
                    format!(
                        "{path}: {who} is writing it (lease for {} s more)",
                        busy.until_ms.saturating_sub(now).div_ceil(1000)
                    ),
                ))
            }
        }
    }

    /// The layout and capabilities for `c` on `i`.
    pub(super) fn mint(
        &self,
        c: &Caller,
        path: &str,
        i: &Inode,
        grant: Access,
    ) -> MgrResult<(Layout, Vec<CapGrant>)> {
        let (rights, bound) = match grant {
            Access::Read => (
                Rights::READ.union(Rights::GETATTR),
                WriteBound {
                    end: WRITE_END_UNBOUNDED,
                    expiry_ms: now_ms() + self.policy.read_cap_ttl_ms,
                },
            ),
            Access::Write(bound) => {
                let mut r = Rights::WRITE
                    .union(Rights::GETATTR)
                    .union(Rights::FLUSH)
                    .union(Rights::BLOCKSREQUIRED);
                if may(c, i, R) {
                    r = r.union(Rights::READ);
                }
                (r, bound)
            }
        };
        // Scheme 1 (seed 001 §3.3.1): the drives store only writes the writer signed.
        let writer_key = match grant {
            Access::Write(_) if self.policy_of_file(i)?.auth == WriterAuth::Signed => {
                Some(self.writer_key_of(c, path)?)
            }
            _ => None,
        };
        self.mint_layout(&c.name, path, i, rights, bound, writer_key)
    }

    /// Starts writing a file at `path`. Searching the directory needs its search permission;
    /// what else is needed depends on the name (POSIX):
    /// - an existing file is overwritten — never with `exclusive` (`Exists`) — which needs
    ///   write permission on the file, not on its directory ([`Manager::stage_overwrite`]);
    /// - a new name needs write permission on the directory. Its inode is reserved first (no
    ///   name shows it), so the object's `fs_specific` carries the inode number the file will
    ///   have; then the object is created. With `exclusive`, the name is linked at once and the
    ///   reply is `Opened` (an empty file: nothing partial can show); without, the upload is
    ///   staged and the name appears only at [`Manager::commit`].
    ///
    /// A crash at any step leaves at most an unreachable object and a reservation, which the
    /// orphan scrub reclaims.
    ///
    /// The writer may write `extend_by` bytes of content, escrowed against the owner's quota
    /// when there is one (seed 002 §3.2).
    pub async fn create(
        &self,
        c: &Caller,
        path: &str,
        mode: u32,
        exclusive: bool,
        extend_by: u64,
    ) -> MgrResult<Created> {
        let (dir, name) = self.parent(c, path, false)?;
        if !may(c, &dir, X) {
            return Err(denied(path, "search permission on the parent directory"));
        }
        let existing = self
            .st()
            .lookup(dir.ino, name)
            .map_err(|e| store_err(e, path))?;
        if let Some(ino) = existing {
            if exclusive {
                return Err(MgrError::new(MgrStatus::Exists, path.to_string()));
            }
            let i = self
                .st()
                .inode(ino)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
            if i.kind == FileKind::Symlink {
                return Err(MgrError::new(
                    MgrStatus::InvalidArgument,
                    format!("{path}: a symbolic link; write to its target"),
                ));
            }
            return self
                .stage_overwrite(c, path, i, extend_by)
                .await
                .map(Created::Staged);
        }
        if !may(c, &dir, W | X) {
            return Err(denied(path, "write permission on the parent directory"));
        }
        // The name is about to be made: it must be clean.
        check_new_name(path, name)?;
        let spec = self.layout_spec_for(&dir)?;
        let geo = crate::striping::geometry_of(&spec)?;
        // A new file is its creator's: refuse before any drive work if the quota is full.
        self.precheck(c.uid, escrow_end(&geo, 0, extend_by), path)?;
        let encrypted = self.policy_for(&dir)?.encrypted;
        let i = self.reserve_inode(c, &dir, mode).map_err(|e| e.at(path))?;
        let layout = match self.create_layout(&spec, &i, encrypted, extend_by).await {
            Ok(l) => l,
            Err(e) => {
                self.forget_reservation(i.ino);
                return Err(e.at(path));
            }
        };
        let size = (!layout.sized_by_object()).then_some(0);
        let i = Inode {
            layout: Some(layout),
            size,
            acv: 0,
            ..i
        };
        if exclusive {
            self.link_new_file(c, path, dir.ino, name, i, extend_by)
                .await
                .map(Created::Opened)
        } else {
            self.stage_new_file(c, path, i, extend_by)
                .await
                .map(Created::Staged)
        }
    }

    /// Stages `count` new files of `mode` in directory `dir` before their names are known
    /// (seed 002 §3: the manager stays off the data path; a client writing many small files
    /// then pays one round trip per file, `Commit`, instead of two). Each is what `create`
    /// stages for a new name, recorded at the directory's marker path (`dir/`) instead of a
    /// file's: its objects are made on every drive at once, so each drive group-commits the
    /// batch. The directory must be writable now; the commit checks again.
    ///
    /// Under a quota each file escrows `extend_by` bytes, and only as many files are prepared
    /// as the quota has room for (at least one, else `QuotaExceeded`).
    pub async fn prepare(
        &self,
        c: &Caller,
        dir_path: &str,
        mode: u32,
        count: u32,
        extend_by: u64,
    ) -> MgrResult<Vec<PreparedFile>> {
        if count == 0 || count > PREPARED_FILES_MAX {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("prepare {count} files: from 1 to {PREPARED_FILES_MAX} at once"),
            ));
        }
        let marker = prepared_marker(&split_path(dir_path)?);
        let dir = self.resolve(c, dir_path)?;
        if dir.kind != FileKind::Dir {
            return Err(MgrError::new(
                MgrStatus::NotADirectory,
                dir_path.to_string(),
            ));
        }
        if !may(c, &dir, W | X) {
            return Err(denied(dir_path, "write permission on the directory"));
        }
        let spec = self.layout_spec_for(&dir)?;
        let policy = self.policy_for(&dir)?;
        let count = self.prepared_room(c, &spec, count, extend_by, dir_path)?;
        // One escrow per file, all expiring with the capabilities minted below.
        let (escrow, bound) = self.staged_escrow(c.uid, &spec, 0, extend_by)?;
        let made = futures_util::future::join_all((0..count).map(|_| async {
            let i = self.reserve_inode(c, &dir, mode)?;
            match self
                .create_layout(&spec, &i, policy.encrypted, extend_by)
                .await
            {
                Ok(l) => Ok(Inode {
                    size: (!l.sized_by_object()).then_some(0),
                    layout: Some(l),
                    ..i
                }),
                Err(e) => {
                    self.forget_reservation(i.ino);
                    Err(e)
                }
            }
        }))
        .await;
        let mut files = Vec::with_capacity(made.len());
        let mut failure = None;
        for made in made {
            let i = match made {
                Ok(i) => i,
                Err(e) => {
                    failure.get_or_insert(e.at(dir_path));
                    continue;
                }
            };
            if let Err(e) = self.record_new_file(c, &i, &marker, dir_path, escrow).await {
                failure.get_or_insert(e);
                continue;
            }
            let (layout, caps) = self.mint(c, dir_path, &i, Access::Write(bound))?;
            files.push(PreparedFile {
                stat: self.stat_of(&i, Some((0, i.mtime_us))),
                layout,
                caps,
                write_end: bound.end,
                policy: policy.clone(),
            });
        }
        match failure {
            // Some files are better than none: the caller asks again when it runs out.
            Some(e) if files.is_empty() => Err(e),
            _ => Ok(files),
        }
    }

    /// How many of `count` prepared files of `extend_by` bytes each `c`'s quota has room
    /// for: all without a quota; `QuotaExceeded` when not even one fits.
    pub(super) fn prepared_room(
        &self,
        c: &Caller,
        spec: &str,
        count: u32,
        extend_by: u64,
        path: &str,
    ) -> MgrResult<u32> {
        let each = escrow_end(&crate::striping::geometry_of(spec)?, 0, extend_by);
        self.precheck(c.uid, each, path)?;
        let st = self.st();
        let Some(q) = st.quota(c.uid).map_err(|e| store_err(e, path))? else {
            return Ok(count);
        };
        if each == 0 {
            return Ok(count);
        }
        let escrowed = st
            .escrowed(c.uid, now_ms())
            .map_err(|e| store_err(e, path))?;
        let room = q
            .limit_bytes
            .saturating_sub(q.used_bytes)
            .saturating_sub(escrowed);
        Ok(count.min((room / each).min(u32::MAX as u64) as u32).max(1))
    }

    /// A new file's inode, stored without a name; its number is the file's from now on.
    pub(super) fn reserve_inode(&self, c: &Caller, dir: &Inode, mode: u32) -> MgrResult<Inode> {
        let mut i = new_inode(c, dir, FileKind::File, mode, None);
        i.ino = self
            .st()
            .reserve_inode(dir.ino, &i)
            .map_err(|e| store_err(e, "inode"))?;
        Ok(i)
    }

    /// Drops a reservation whose file will never exist (logged: the scrub sweeps it too).
    pub(super) fn forget_reservation(&self, ino: u64) {
        if let Err(e) = self.st().forget_reserved(ino) {
            tracing::warn!(ino, "reserved inode not dropped: {e}");
        }
    }

    /// Undoes a create whose name could not be linked or staged: the object goes, then the
    /// reservation.
    pub(super) async fn undo_create(&self, i: &Inode) {
        if let Some(l) = &i.layout {
            self.remove_objects(&l.components).await;
        }
        self.forget_reservation(i.ino);
    }

    /// Exclusive create: links the reserved inode (holding its empty objects) as `name`. Its
    /// write capabilities write the committed objects, so their escrow is the file's own,
    /// taken before the name shows (settled when they expire).
    pub(super) async fn link_new_file(
        &self,
        c: &Caller,
        path: &str,
        dir: u64,
        name: &str,
        i: Inode,
        extend_by: u64,
    ) -> MgrResult<Grant> {
        let layout = i.layout.clone().expect("created above");
        let expiry = self.write_expiry();
        let bound = match self.escrow_in_place(path, &i, 0, extend_by, expiry) {
            Ok(b) => b,
            Err(e) => {
                self.undo_create(&i).await;
                return Err(e);
            }
        };
        let linked = self.st().link_reserved(dir, name, i.ino, &layout, i.acv);
        if let Err(e) = linked {
            self.undo_create(&i).await;
            return Err(store_err(e, path));
        }
        let (layout, caps) = self.mint(c, path, &i, Access::Write(bound))?;
        Ok(Grant {
            stat: self.stat_of(&i, Some((0, i.mtime_us))),
            layout,
            caps,
            write_end: bound.end,
            policy: self.policy_of_file(&i)?,
            e2e: None,
        })
    }

    /// Records the new file `i` (its inode reserved, its objects made) as staged at
    /// `staged_at` (a file's path, or a directory's marker for a prepared file); if that
    /// fails, its objects and reservation go and the error names `path`.
    pub(super) async fn record_new_file(
        &self,
        c: &Caller,
        i: &Inode,
        staged_at: &str,
        path: &str,
        escrow: Option<StagedEscrow>,
    ) -> MgrResult<()> {
        let staged = Staged {
            layout: i.layout.clone().expect("created above"),
            acv: i.acv,
            uid: c.uid,
            path: staged_at.to_string(),
            mode: i.mode,
            created_ms: now_ms(),
            ino: i.ino,
            new_file: true,
            base_version: None,
            escrow,
        };
        let put = self.st().put_staged(&staged);
        if let Err(e) = put {
            self.undo_create(i).await;
            return Err(self.quota_err(e, path));
        }
        Ok(())
    }

    /// Non-exclusive create of a new name: records the upload as staged (so a manager restart
    /// does not lose it) and returns write capabilities for its objects. The name appears only
    /// when [`Manager::commit`] links it.
    pub(super) async fn stage_new_file(
        &self,
        c: &Caller,
        path: &str,
        i: Inode,
        extend_by: u64,
    ) -> MgrResult<StagedGrant> {
        let geometry = &i.layout.as_ref().expect("created above").geometry;
        let (escrow, bound) = match self.staged_escrow(c.uid, geometry, 0, extend_by) {
            Ok(x) => x,
            Err(e) => {
                self.undo_create(&i).await;
                return Err(e);
            }
        };
        self.record_new_file(c, &i, path, path, escrow).await?;
        let (layout, caps) = self.mint(c, path, &i, Access::Write(bound))?;
        Ok(StagedGrant {
            grant: Grant {
                stat: self.stat_of(&i, Some((0, i.mtime_us))),
                layout,
                caps,
                write_end: bound.end,
                policy: self.policy_of_file(&i)?,
                e2e: None,
            },
            replaces: false,
        })
    }

    /// The first half of an overwrite: a fresh object for the new content, recorded as staged
    /// (so a manager restart does not lose it) and returned with a write capability. Only
    /// write permission on the file is needed (POSIX: opening a file to truncate it does not
    /// touch its directory). The old content stays in place and readable until
    /// [`Manager::commit`]; an overwrite that never commits is aborted by the client or
    /// expires, and its object is removed.
    ///
    /// The new content is charged to the file's owner: its `extend_by` bytes are escrowed in
    /// full, since the staged objects sit beside the old content until the commit.
    pub(super) async fn stage_overwrite(
        &self,
        c: &Caller,
        path: &str,
        i: Inode,
        extend_by: u64,
    ) -> MgrResult<StagedGrant> {
        if i.kind == FileKind::Dir {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if !may(c, &i, W) {
            return Err(denied(path, "write permission on the file"));
        }
        let dir = self
            .st()
            .inode(i.parent)
            .map_err(|e| store_err(e, path))?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
        // The new content takes the layout the directory gives new files now.
        let spec = self.layout_spec_for(&dir)?;
        let geo = crate::striping::geometry_of(&spec)?;
        self.precheck(i.uid, escrow_end(&geo, 0, extend_by), path)?;
        let (escrow, bound) = self.staged_escrow(i.uid, &spec, 0, extend_by)?;
        let encrypted = self.policy_for(&dir)?.encrypted;
        let layout = self
            .create_layout(&spec, &i, encrypted, extend_by)
            .await
            .map_err(|e| e.at(path))?;
        let staged = Staged {
            layout: layout.clone(),
            acv: 0,
            uid: c.uid,
            path: path.to_string(),
            mode: i.mode,
            created_ms: now_ms(),
            ino: i.ino,
            new_file: false,
            base_version: None,
            escrow,
        };
        let put = self.st().put_staged(&staged);
        if let Err(e) = put {
            self.remove_objects(&layout.components).await;
            return Err(self.quota_err(e, path));
        }
        let times = self.file_times(&i).await.ok();
        let next = Inode {
            size: (!layout.sized_by_object()).then_some(0),
            layout: Some(layout),
            acv: 0,
            ..i.clone()
        };
        let (layout, caps) = self.mint(c, path, &next, Access::Write(bound))?;
        Ok(StagedGrant {
            grant: Grant {
                stat: self.stat_of(&i, times),
                layout,
                caps,
                write_end: bound.end,
                policy: self.policy_of_file(&i)?,
                e2e: i.e2e.clone(),
            },
            replaces: true,
        })
    }

    /// The staged upload of `object` on `drive`, if `c` staged it for `path`.
    pub(super) fn staged_for(
        &self,
        c: &Caller,
        path: &str,
        drive: nasd_proto::DriveId,
        object: ObjectId,
    ) -> MgrResult<Option<Staged>> {
        let partition = self
            .drives
            .record(drive)
            .map(|r| r.partition)
            .unwrap_or(drives::FILES_PARTITION);
        let obj = ObjRef {
            drive,
            partition,
            object,
        };
        let s = self.st().staged(obj).map_err(|e| store_err(e, path))?;
        Ok(s.filter(|s| s.uid == c.uid && (s.path == path || is_prepared_at(s, path))))
    }

    /// The second half of an upload, sent once every write to the staged object was
    /// acknowledged (the drive acknowledges only durable data). One store transaction makes it
    /// the file's content, then the object it replaces is removed, which revokes its
    /// capabilities. Only the user who staged the object may commit it, only at the path it
    /// was staged for, and only with the permissions that would let them start it now:
    /// - an overwrite lands only in the file it was staged for; if that file was removed or
    ///   replaced meanwhile, nothing is committed (`NoSuchPath`);
    /// - a new file is linked under its name. If another upload or create took the name
    ///   meanwhile, the last commit wins, as if each upload had been written under a temporary
    ///   name and renamed into place: the file there is replaced, provided the caller may
    ///   write it (and, in a sticky directory, owns it or the directory).
    ///
    /// Committing an object the name already holds succeeds, so a client may retry a commit
    /// whose reply it lost. With `exclusive`, a new file is linked only while its name is free.
    pub async fn commit(&self, c: &Caller, q: calls::Commit) -> MgrResult<()> {
        let calls::Commit {
            path,
            drive,
            object,
            size,
            stale,
            xattrs,
            e2e,
            exclusive,
        } = q;
        let (path, xattrs) = (path.as_str(), xattrs.as_deref());
        if let Some(x) = xattrs {
            check_xattrs(x).map_err(|e| invalid_xattrs(path, e))?;
        }
        // The manager says who committed a version, never the writer.
        let e2e = e2e.map(|mut e| {
            e.state.writer = c.uid;
            e
        });
        let (dir, name) = self.parent(c, path, false)?;
        let current = self.entry(&dir, name, path)?;
        let Some(s) = self.staged_for(c, path, drive, object)? else {
            return committed_already(path, current.as_ref(), drive, object);
        };
        if exclusive && s.new_file && current.is_some() {
            return Err(MgrError::new(MgrStatus::Exists, path.to_string()));
        }
        self.may_commit(c, path, (&dir, name), &s, current.as_ref(), stale)?;
        // Quota: the new content is charged to the file's owner, at its size as the manager
        // keeps it (a layout over several objects), or as its object says (the writer's word
        // is not taken for a one-object file).
        let owner = match &current {
            Some(i) if !s.new_file => i.uid,
            _ => c.uid,
        };
        // An encrypted file's size is kept here: its object may hold padding.
        let kept_here = !s.layout.sized_by_object() || e2e.is_some();
        let mut charge = kept_here.then_some(size);
        if charge.is_none() && self.has_quota(owner)? {
            charge = Some(self.staged_size(&s, path).await?);
        }
        let size = kept_here.then_some(size);
        let replaced = current.as_ref().map(|i| i.ino);
        let commit = |charge| {
            self.st().commit_staged(
                dir.ino,
                name,
                s.layout.key(),
                replaced,
                size,
                stale,
                xattrs,
                charge,
                e2e.as_ref(),
                now_ms(),
            )
        };
        let mut committed = commit(charge);
        if committed == Err(StoreError::ChargeNeeded) {
            // The owner's quota appeared since: measure and commit again.
            committed = commit(Some(self.staged_size(&s, path).await?));
        }
        let old = committed.map_err(|e| self.quota_err(e, path))?;
        if s.base_version.is_some() {
            self.leases.release(s.ino, c.holder(), now_ms());
        }
        if let Some(l) = old.and_then(|i| i.layout) {
            self.remove_objects(&l.not_in(Some(&s.layout))).await;
        }
        Ok(())
    }

    /// Whether `c` may commit the staged upload `s` as `dir`/`name` (`path`) now, where
    /// `current` is what the name holds, with components `stale` missed: the checks that
    /// would let `c` start it now, the layout still readable, and (for a copy-on-write change)
    /// no revocation since the copies were taken.
    fn may_commit(
        &self,
        c: &Caller,
        path: &str,
        (dir, name): (&Inode, &str),
        s: &Staged,
        current: Option<&Inode>,
        stale: u64,
    ) -> MgrResult<()> {
        if is_prepared(s) {
            self.may_link_prepared(c, path, dir, name, s, current)?;
        } else if s.new_file {
            self.may_link(c, path, dir, current)?;
        } else {
            match current {
                Some(i) if i.ino == s.ino => {
                    if !may(c, i, W) {
                        return Err(denied(path, "write permission on the file"));
                    }
                }
                _ => {
                    return Err(MgrError::new(
                        MgrStatus::NoSuchPath,
                        format!("{path}: the file was removed or replaced while the upload ran; nothing was committed"),
                    ))
                }
            }
        }
        let n = s.layout.components.len();
        let lost = (s.layout.stale | stale).count_ones() as usize;
        if (n < 64 && stale >> n != 0) || lost > tolerated(&s.layout) || lost >= n {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!(
                    "{path}: the upload missed {lost} of {n} components; its {} layout covers {}",
                    s.layout.geometry,
                    tolerated(&s.layout)
                ),
            ));
        }
        if s.base_version.is_some() && current.is_some_and(|i| i.acv != s.acv) {
            // A revocation (chmod, chown) happened since the copies were taken: they carry the
            // old version. Start over from the current objects.
            return Err(store_err(StoreError::Conflict, path));
        }
        Ok(())
    }

    /// The logical size of the staged one-object upload `s`, from its object.
    pub(super) async fn staged_size(&self, s: &Staged, path: &str) -> MgrResult<u64> {
        Ok(self
            .object_attributes(s.layout.first())
            .await
            .map_err(|e| e.at(path))?
            .logical_size)
    }

    /// Whether `c` may commit the prepared file `s` as `dir`/`name` (`path`): only into the
    /// directory it was prepared in, only under a free, clean name (a prepared file never
    /// replaces one: the writer overwrites through `Create`, which keeps the file's inode),
    /// and only with write permission on the directory now.
    pub(super) fn may_link_prepared(
        &self,
        c: &Caller,
        path: &str,
        dir: &Inode,
        name: &str,
        s: &Staged,
        current: Option<&Inode>,
    ) -> MgrResult<()> {
        let reserved = self.st().inode(s.ino).map_err(|e| store_err(e, path))?;
        if path.ends_with('/') || reserved.is_none_or(|i| i.parent != dir.ino) {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: the file was prepared in another directory"),
            ));
        }
        if current.is_some() {
            return Err(MgrError::new(MgrStatus::Exists, path.to_string()));
        }
        check_new_name(path, name)?;
        self.may_link(c, path, dir, None)
    }

    /// Whether `c` may link a new file into `dir`, replacing `current` if there is one.
    pub(super) fn may_link(
        &self,
        c: &Caller,
        path: &str,
        dir: &Inode,
        current: Option<&Inode>,
    ) -> MgrResult<()> {
        if !may(c, dir, W | X) {
            return Err(denied(path, "write permission on the parent directory"));
        }
        let Some(i) = current else {
            return Ok(());
        };
        if i.kind == FileKind::Dir {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if !may(c, i, W) {
            return Err(denied(
                path,
                "write permission on the file the upload would replace",
            ));
        }
        let sticky = dir.mode & 0o1000 != 0;
        if sticky && !c.admin && c.uid != i.uid && c.uid != dir.uid {
            return Err(denied(
                path,
                "the directory is sticky and the file there is another user's",
            ));
        }
        Ok(())
    }

    /// A fresh write capability for a staged upload still running, under the checks that
    /// would let the caller start it now (a writer whose permission was taken away gets no
    /// new capability); its record is moved to now, so it does not expire while the upload
    /// runs. The capability comes in a `Staged` reply, as from `create`.
    ///
    /// Under a quota the escrow is renewed with the capability, and `extend_by` moves its end
    /// further (seed 002 §3.2: a writer asks for more before writing past it).
    pub async fn renew(
        &self,
        c: &Caller,
        path: &str,
        drive: nasd_proto::DriveId,
        object: ObjectId,
        extend_by: u64,
    ) -> MgrResult<StagedGrant> {
        let s = self.staged_for(c, path, drive, object)?.ok_or_else(|| {
            MgrError::new(
                MgrStatus::NoSuchPath,
                format!(
                    "{path}: nothing staged for object {object} (expired, aborted or committed)"
                ),
            )
        })?;
        let (dir, name) = self.parent(c, path, false)?;
        let current = self.entry(&dir, name, path)?;
        let i = if s.new_file {
            self.may_link(c, path, &dir, current.as_ref())?;
            self.st()
                .inode(s.ino)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?
        } else {
            match current {
                Some(i) if i.ino == s.ino && may(c, &i, W) => Inode {
                    layout: Some(s.layout.clone()),
                    acv: s.acv,
                    ..i
                },
                Some(i) if i.ino == s.ino => {
                    return Err(denied(path, "write permission on the file"))
                }
                _ => {
                    return Err(MgrError::new(
                        MgrStatus::NoSuchPath,
                        format!("{path}: the file was removed or replaced while the upload ran"),
                    ))
                }
            }
        };
        if s.base_version.is_some() {
            self.take_lease(c, path, &i).await?;
        }
        let bound = self.renew_escrow(&s, &i, extend_by, path)?;
        let (layout, caps) = self.mint(c, path, &i, Access::Write(bound))?;
        Ok(StagedGrant {
            grant: Grant {
                stat: self.stat_of(&i, None),
                layout,
                caps,
                write_end: bound.end,
                policy: self.policy_of_file(&i)?,
                e2e: i.e2e.clone(),
            },
            replaces: !s.new_file,
        })
    }

    /// Renews the escrow of the staged upload `s` of file `i` (and the record's time): its end
    /// moves `extend_by` further. An upload staged before its owner had a quota starts one
    /// (from 0 for an upload, from the file's size for a copy-on-write change).
    pub(super) fn renew_escrow(
        &self,
        s: &Staged,
        i: &Inode,
        extend_by: u64,
        path: &str,
    ) -> MgrResult<WriteBound> {
        let key = s.layout.key();
        if !self.has_quota(i.uid)? {
            self.st()
                .touch_staged(key, now_ms())
                .map_err(|e| store_err(e, path))?;
            return Ok(self.unbounded());
        }
        let (base, from) = match s.escrow {
            Some(e) => (e.base, e.end),
            None if s.base_version.is_some() => (i.size.unwrap_or(0), i.size.unwrap_or(0)),
            None => (0, 0),
        };
        let (escrow, bound) = self.staged_escrow(i.uid, &s.layout.geometry, from, extend_by)?;
        let escrow = StagedEscrow {
            base,
            ..escrow.expect("the owner has a quota")
        };
        let renewed = self.st().escrow_staged(key, &escrow, now_ms());
        renewed.map_err(|e| self.quota_err(e, path))?;
        Ok(bound)
    }

    /// Gives up a staged upload: forgets it and removes its object now, so its space comes
    /// back without waiting for the orphan scrub. Aborting what is no longer staged succeeds.
    pub async fn abort(
        &self,
        c: &Caller,
        path: &str,
        drive: nasd_proto::DriveId,
        object: ObjectId,
    ) -> MgrResult<()> {
        let Some(s) = self.staged_for(c, path, drive, object)? else {
            return Ok(());
        };
        let gone = self
            .st()
            .abort_staged(s.layout.key())
            .map_err(|e| store_err(e, path))?;
        if gone.is_some() {
            if s.base_version.is_some() {
                self.leases.release(s.ino, c.holder(), now_ms());
            }
            // A change's stale components are the file's own objects: only the copies go.
            let current = self.st().inode(s.ino).ok().flatten().and_then(|i| i.layout);
            self.remove_objects(&s.layout.not_in(current.as_ref()))
                .await;
        }
        Ok(())
    }

    /// GetCapability / GetWCapability of NASD/AFS. A writer may grow the file by `extend_by`
    /// bytes past its size now, escrowed against the owner's quota (seed 002 §3.2).
    pub async fn open(
        &self,
        c: &Caller,
        path: &str,
        write: bool,
        extend_by: u64,
    ) -> MgrResult<Grant> {
        let mut i = self.resolve(c, path)?;
        // Never a grant from a version some drives do not have yet (`revoking`).
        if self.revoking.settled(i.ino).await {
            i = self.resolve(c, path)?;
        }
        if i.kind == FileKind::Dir {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if i.kind.special() {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: a special file has no content here (the kernel serves it where it is opened)"),
            ));
        }
        if write {
            return self.open_write(c, path, i, extend_by).await;
        }
        if !may(c, &i, R) {
            return Err(denied(path, "read permission on the file"));
        }
        let times = self.file_times(&i).await.map_err(|e| e.at(path))?;
        let (layout, caps) = self.mint(c, path, &i, Access::Read)?;
        Ok(Grant {
            stat: self.stat_of(&i, Some(times)),
            layout,
            caps,
            write_end: WRITE_END_UNBOUNDED,
            policy: self.policy_of_file(&i)?,
            e2e: i.e2e.clone(),
        })
    }

    /// GetWCapability: the file's write lease, then capabilities for its committed objects
    /// (one-object files only), with the file's escrow taken first under a quota.
    pub(super) async fn open_write(
        &self,
        c: &Caller,
        path: &str,
        i: Inode,
        extend_by: u64,
    ) -> MgrResult<Grant> {
        if !may(c, &i, W) {
            return Err(denied(path, "write permission on the file"));
        }
        if i.layout.as_ref().is_some_and(|l| !l.sized_by_object()) {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!(
                    "{path}: a file spread over several objects is changed copy-on-write (StageWrite), never in place"
                ),
            ));
        }
        if i.e2e.is_some() {
            // Its new content and its trusted record must commit together (seed 003).
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: an encrypted file is changed copy-on-write (StageWrite), never in place"),
            ));
        }
        let had = self
            .leases
            .holder(i.ino, now_ms())
            .is_some_and(|(h, _)| h == c.holder());
        let i = self.take_lease(c, path, &i).await?;
        let escrowed = async {
            let (size, mtime) = self.file_times(&i).await.map_err(|e| e.at(path))?;
            let expiry = self.write_expiry();
            let bound = self.escrow_in_place(path, &i, size, extend_by, expiry)?;
            Ok::<_, MgrError>((bound, (size, mtime)))
        };
        let (bound, times) = match escrowed.await {
            Ok(x) => x,
            Err(e) => {
                // A lease taken for this request only goes with it.
                if !had {
                    self.leases.release(i.ino, c.holder(), now_ms());
                }
                return Err(e);
            }
        };
        let (layout, caps) = self.mint(c, path, &i, Access::Write(bound))?;
        Ok(Grant {
            stat: self.stat_of(&i, Some(times)),
            layout,
            caps,
            write_end: bound.end,
            policy: self.policy_of_file(&i)?,
            e2e: i.e2e.clone(),
        })
    }

    /// `StageWrite`: copies of the file's components for a copy-on-write change, recorded as
    /// staged (so a manager restart keeps it), with write capabilities for them; takes the
    /// file's write lease, which the change's commit or abort ends. The change may grow the
    /// file by `extend_by` bytes past its size, escrowed against the owner's quota.
    pub async fn stage_write(
        &self,
        c: &Caller,
        path: &str,
        extend_by: u64,
    ) -> MgrResult<StagedGrant> {
        let i = self.resolve(c, path)?;
        if i.kind == FileKind::Dir {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if !may(c, &i, W) {
            return Err(denied(path, "write permission on the file"));
        }
        let i = self.take_lease(c, path, &i).await?;
        let release = || self.leases.release(i.ino, c.holder(), now_ms());
        let l = i.layout.clone().expect("a file has a layout");
        // The copies start as the file is: the escrow counts from its size.
        let escrowed = async {
            let (size, _) = self.file_times(&i).await.map_err(|e| e.at(path))?;
            let geo = crate::striping::geometry_of(&l.geometry)?;
            self.precheck(i.uid, escrow_end(&geo, size, extend_by) - size, path)?;
            self.staged_escrow(i.uid, &l.geometry, size, extend_by)
        };
        let (escrow, bound) = match escrowed.await {
            Ok(x) => x,
            Err(e) => {
                release();
                return Err(e);
            }
        };
        let staged = match self.stage_copies(&l).await {
            Ok(s) => s,
            Err(e) => {
                release();
                return Err(e.at(path));
            }
        };
        let record = Staged {
            layout: staged.clone(),
            acv: i.acv,
            uid: c.uid,
            path: path.to_string(),
            mode: i.mode,
            created_ms: now_ms(),
            ino: i.ino,
            new_file: false,
            base_version: Some(l.version),
            escrow,
        };
        let put = self.st().put_staged(&record);
        if let Err(e) = put {
            self.remove_objects(&staged.not_in(Some(&l))).await;
            release();
            return Err(self.quota_err(e, path));
        }
        let times = self.file_times(&i).await.ok();
        let next = Inode {
            layout: Some(staged),
            ..i.clone()
        };
        let (layout, caps) = self.mint(c, path, &next, Access::Write(bound))?;
        Ok(StagedGrant {
            grant: Grant {
                stat: self.stat_of(&i, times),
                layout,
                caps,
                write_end: bound.end,
                policy: self.policy_of_file(&i)?,
                e2e: i.e2e.clone(),
            },
            replaces: true,
        })
    }

    /// `Repair`: a reader found `len` bytes at `offset` of component `component` damaged; the
    /// striping layer rebuilds them from the other components and rewrites them in place.
    /// Only someone who may read the file can ask, and the bytes come from the other
    /// components, never from the asker.
    pub async fn repair(
        &self,
        c: &Caller,
        path: &str,
        component: usize,
        offset: u64,
        len: u64,
    ) -> MgrResult<u64> {
        let i = self.resolve(c, path)?;
        if !may(c, &i, R) {
            return Err(denied(path, "read permission on the file"));
        }
        let l = i
            .layout
            .as_ref()
            .ok_or_else(|| MgrError::new(MgrStatus::IsADirectory, path.to_string()))?;
        if component >= l.components.len() || len > REPAIR_BYTES_MAX {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!(
                    "{path}: repair of {len} bytes of component {component} (at most {REPAIR_BYTES_MAX} bytes of one of {})",
                    l.components.len()
                ),
            ));
        }
        if l.is_stale(component) || l.sized_by_object() {
            return Ok(0);
        }
        let (size, _) = self.file_times(&i).await.map_err(|e| e.at(path))?;
        let io = self.layout_io(l, size)?;
        let n = io
            .rebuild_range(component, offset, len, None)
            .await
            .map_err(|e| MgrError::new(MgrStatus::DriveUnreachable, format!("{path}: {e}")))?;
        tracing::info!(path, component, offset, len = n, "read repair");
        Ok(n)
    }
}

/// A commit of what nothing is staged for: done already (a client retrying a commit whose
/// reply it lost) when the name holds the object, else `NoSuchPath`.
fn committed_already(
    path: &str,
    current: Option<&Inode>,
    drive: nasd_proto::DriveId,
    object: ObjectId,
) -> MgrResult<()> {
    if current.and_then(|i| i.layout.as_ref()).is_some_and(|l| {
        l.components
            .iter()
            .any(|o| (o.drive, o.object) == (drive, object))
    }) {
        return Ok(());
    }
    Err(MgrError::new(
        MgrStatus::NoSuchPath,
        format!("{path}: nothing staged for object {object} (expired, aborted or committed)"),
    ))
}
