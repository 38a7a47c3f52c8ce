//! The namespace: stats, directory pages, directories, names (unlink, rename, symbolic and
//! hard links), extended attributes, and the layout a directory gives new files.

use super::perms::{check_sticky, may, R, W, X};
use super::resolve::{check_new_name, split_path};
use super::{denied, invalid_xattrs, store_err, Caller, Manager};
use crate::drives::MANAGER_PROTECTION;
use crate::store::*;
use crate::{now_us, MgrError, MgrResult};
use nasd_client::object::Target;
use nasd_proto::manager::*;
use std::collections::HashMap;

/// A new inode of `kind` made by `c` in directory `dir` now (its number is the store's to
/// give): permission bits of `mode` only, owned by the caller, a symbolic link's `target`.
pub(super) fn new_inode(
    c: &Caller,
    dir: &Inode,
    kind: FileKind,
    mode: u32,
    target: Option<&str>,
) -> Inode {
    let now = now_us();
    Inode {
        ino: 0,
        kind,
        mode: mode & 0o7777,
        uid: c.uid,
        gid: c.gid,
        parent: dir.ino,
        ctime_us: now,
        mtime_us: now,
        atime_us: now,
        rdev: 0,
        layout: None,
        size: None,
        dir_layout: None,
        acv: 0,
        e2e: None,
        target: target.map(str::to_string),
        charged: None,
    }
}

impl Manager {
    /// The layout spec new files under `dir` get: the nearest one named by `dir` or an
    /// ancestor, else the cluster's default.
    pub(crate) fn layout_spec_for(&self, dir: &Inode) -> MgrResult<String> {
        let st = self.st();
        let mut cur = dir.clone();
        loop {
            if let Some(g) = cur
                .dir_layout
                .as_deref()
                .and_then(|s| crate::e2e::DirSpec::parse_stored(s).geometry)
            {
                return Ok(g);
            }
            if cur.ino == ROOT_INO {
                return Ok(self.policy.default_layout.clone());
            }
            cur = st
                .inode(cur.parent)
                .map_err(|e| store_err(e, "directory"))?
                .ok_or_else(|| {
                    MgrError::new(MgrStatus::Internal, "a directory's parent is gone")
                })?;
        }
    }

    /// The layout spec new files under the directory `path` get: the geometry, then the
    /// end-to-end policy's options.
    pub fn layout_get(&self, c: &Caller, path: &str) -> MgrResult<String> {
        let d = self.resolve(c, path)?;
        if d.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        let geometry = self.layout_spec_for(&d)?;
        let policy = self.policy_for(&d)?;
        Ok(format!("{geometry},{}", self.show_policy(&policy)))
    }

    /// Sets the layout spec of the directory `path` (its owner or an admin; `""` forgets it).
    /// Checked now, against the drives registered now: a layout that needs more drives than
    /// the cluster has is refused. Returns the further readers the directory's policy names
    /// now (sorted), which the caller's client signs into the key log ([`Manager::policy_log`]).
    pub fn layout_set(&self, c: &Caller, path: &str, spec: &str) -> MgrResult<Vec<Principal>> {
        let mut d = self.resolve(c, path)?;
        if d.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        if !c.admin && d.uid != c.uid {
            return Err(denied(
                path,
                "only the directory's owner may set its layout",
            ));
        }
        if spec.is_empty() {
            d.dir_layout = None;
        } else {
            // What the spec leaves out stays as the directory has it now.
            let (geometry, policy) = self.merge_spec(&d, spec, path)?;
            let geometry = match geometry {
                Some(g) => {
                    let geo = crate::striping::geometry_of(&g)?;
                    geo.check_drives(self.drives.count()).map_err(|e| {
                        MgrError::new(MgrStatus::InvalidArgument, format!("{path}: {e}"))
                    })?;
                    geo.to_string()
                }
                None => self.layout_spec_for(&d)?,
            };
            let policy = match policy {
                Some(p) => p,
                None => self.policy_for(&d)?,
            };
            let spec = crate::e2e::DirSpec {
                geometry: Some(geometry),
                policy: Some(policy),
            };
            d.dir_layout = Some(spec.render());
        }
        self.st().update_inode(&d).map_err(|e| store_err(e, path))?;
        self.policy_readers(&d)
    }

    /// The further readers directory `d`'s policy names, sorted and distinct.
    fn policy_readers(&self, d: &Inode) -> MgrResult<Vec<Principal>> {
        let mut readers = self.policy_for(d)?.readers;
        readers.sort();
        readers.dedup();
        Ok(readers)
    }

    /// Logs `p`, the caller's signed statement of the further readers directory `p.dir`'s
    /// policy names (issue 21 §5; `nasd_proto::manager::calls::keylog`): its owner or an
    /// admin, the readers those the policy names now, the signature made with the caller's
    /// current identity key. Writers wrap for policy readers only as the log names them.
    pub fn policy_log(&self, c: &Caller, p: PolicyReaders) -> MgrResult<()> {
        let path = p.dir.clone();
        if p.by != c.uid {
            return Err(denied(
                &path,
                "a policy's readers are logged by who set them",
            ));
        }
        let d = self.resolve(c, &path)?;
        if d.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path));
        }
        if !c.admin && d.uid != c.uid {
            return Err(denied(
                &path,
                "only the directory's owner may set its policy's readers",
            ));
        }
        if self.policy_readers(&d)? != p.readers {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: these are not the readers the directory's policy names now"),
            ));
        }
        let keys = self
            .st()
            .user_keys(c.uid)
            .map_err(|e| store_err(e, &path))?
            .ok_or_else(|| {
                denied(
                    &path,
                    "a policy's readers are signed with the setter's keys, and they have none",
                )
            })?;
        let signed = nasd_crypto::wsig::verify(
            &nasd_proto::WriterPublicKey(keys.sign_public),
            &p.message(),
            &nasd_proto::WriterSignature(p.signature),
        )
        .is_ok();
        if !signed {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: the readers' signature does not verify with the caller's keys"),
            ));
        }
        self.st()
            .log_policy_readers(&p)
            .map_err(|e| store_err(e, &path))?;
        Ok(())
    }

    pub async fn stat(&self, c: &Caller, path: &str) -> MgrResult<FileStat> {
        let i = self.resolve(c, path)?;
        let times = self.file_times(&i).await.map_err(|e| e.at(path))?;
        Ok(self.stat_of(&i, Some(times)))
    }

    /// [`Manager::stat`] of the last name itself: a symbolic link is not followed (lstat).
    pub async fn lstat(&self, c: &Caller, path: &str) -> MgrResult<FileStat> {
        if split_path(path)?.is_empty() {
            return self.stat(c, path).await;
        }
        let (dir, name) = self.parent(c, path, false)?;
        let i = self
            .entry(&dir, name, path)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
        let times = self.file_times(&i).await.map_err(|e| e.at(path))?;
        Ok(self.stat_of(&i, Some(times)))
    }

    /// A page of directory `path`: at most `limit` (and [`READDIR_PAGE_ENTRIES_MAX`]) entries
    /// named after `after`.
    pub async fn readdir(
        &self,
        c: &Caller,
        path: &str,
        after: &str,
        limit: usize,
        xattr: Option<&str>,
    ) -> MgrResult<Vec<DirEntry>> {
        let d = self.resolve(c, path)?;
        if d.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        if !may(c, &d, R) {
            return Err(denied(path, "read permission on the directory"));
        }
        let limit = limit.min(READDIR_PAGE_ENTRIES_MAX);
        if !may(c, &d, X) {
            // Read without search permission: the names, as Linux lists such a directory,
            // with the inode numbers and kinds the directory itself holds, and nothing
            // that would need a lookup of the entry.
            let entries = self
                .st()
                .readdir(d.ino, after, limit)
                .map_err(|e| store_err(e, path))?;
            return Ok(entries.iter().map(|(n, i)| names_only(n, i)).collect());
        }
        // The page and its link counts under one hold of the store: no change between them.
        let (entries, links) = {
            let st = self.st();
            let entries = st
                .readdir(d.ino, after, limit)
                .map_err(|e| store_err(e, path))?;
            let links = st
                .readdir_links(d.ino, after, limit)
                .map_err(|e| store_err(e, path))?;
            (entries, links)
        };
        // One-object files' sizes come from their drives: ask for all of them at once
        // (pipelined connections); the others' are in the store.
        let mut set = tokio::task::JoinSet::new();
        for (k, (_, i)) in entries.iter().enumerate() {
            let Some(o) = i
                .layout
                .as_ref()
                .filter(|l| l.sized_by_object())
                .map(|l| l.first())
            else {
                continue;
            };
            let (conn, rec) = match self.drives.conn(o.drive).await {
                Ok(x) => x,
                Err(_) => continue,
            };
            set.spawn(async move {
                let auth = nasd_client::Auth::Key {
                    kind: nasd_proto::KeyType::Working,
                    key: rec.working_key.clone(),
                    suite: rec.suite,
                    drive: rec.drive,
                };
                let t = Target {
                    partition: o.partition,
                    object: o.object,
                    protection: MANAGER_PROTECTION,
                };
                (k, conn.getattr(&auth, t).await.ok())
            });
        }
        let mut times: Vec<Option<(u64, u64)>> = entries
            .iter()
            .map(|(_, i)| match &i.layout {
                Some(l) if l.sized_by_object() => None,
                _ => Some((i.size.unwrap_or(0), i.mtime_us)),
            })
            .collect();
        while let Some(r) = set.join_next().await {
            if let Ok((k, Some(a))) = r {
                // An encrypted file's size is kept here, its modify time is its object's.
                let i = &entries[k].1;
                let size = match i.sized_by_object() {
                    true => a.logical_size,
                    false => i.size.unwrap_or(0),
                };
                times[k] = Some((size, a.file_mtime_us()));
            }
        }
        // The attribute asked for, of each file the caller may read (its value tells about
        // the content: an ETag is the content's MD5).
        let mut values = vec![None; entries.len()];
        if let Some(x) = xattr {
            let st = self.st();
            for (k, (_, i)) in entries.iter().enumerate() {
                if i.kind == FileKind::File && may(c, i, R) {
                    values[k] = st
                        .xattrs(i.ino)
                        .map_err(|e| store_err(e, path))?
                        .into_iter()
                        .find(|a| a.name == x && a.value.len() <= READDIR_XATTR_BYTES_MAX)
                        .map(|a| a.value);
                }
            }
        }
        // Owners' and groups' names, read once per page (not twice per entry).
        let mut names: HashMap<(u32, u32), (String, String)> = HashMap::new();
        Ok(entries
            .iter()
            .zip(times)
            .zip(values)
            .map(|(((name, i), t), xattr)| {
                let n = names
                    .entry((i.uid, i.gid))
                    .or_insert_with(|| self.names(i.uid, i.gid))
                    .clone();
                DirEntry {
                    name: name.clone(),
                    stat: self.stat_linked(i, t, links.get(&i.ino).copied(), n),
                    xattr,
                }
            })
            .collect())
    }

    pub fn mkdir(&self, c: &Caller, path: &str, mode: u32) -> MgrResult<()> {
        let (dir, name) = self.parent(c, path, true)?;
        let i = new_inode(c, &dir, FileKind::Dir, mode, None);
        self.st()
            .link_new(dir.ino, name, &i)
            .map_err(|e| store_err(e, path))?;
        Ok(())
    }

    pub fn rmdir(&self, c: &Caller, path: &str) -> MgrResult<()> {
        let (dir, name) = self.parent(c, path, true)?;
        let mut st = self.st();
        let ino = st.lookup(dir.ino, name).map_err(|e| store_err(e, path))?;
        let i = ino
            .and_then(|ino| st.inode(ino).ok().flatten())
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
        if i.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        check_sticky(c, &dir, &i, path)?;
        st.unlink(dir.ino, name).map_err(|e| store_err(e, path))?;
        Ok(())
    }

    pub async fn unlink(&self, c: &Caller, path: &str) -> MgrResult<()> {
        let (dir, name) = self.parent(c, path, true)?;
        let i = {
            let mut st = self.st();
            let ino = st
                .lookup(dir.ino, name)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
            let i = st
                .inode(ino)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
            if i.kind == FileKind::Dir {
                return Err(MgrError::new(
                    MgrStatus::IsADirectory,
                    format!("{path} (use rmdir)"),
                ));
            }
            check_sticky(c, &dir, &i, path)?;
            let gone = st.unlink(dir.ino, name).map_err(|e| store_err(e, path))?;
            if gone.is_none() {
                // Other names remain: the file's link count changed.
                st.set_times(i.ino, None, None, now_us())
                    .map_err(|e| store_err(e, path))?;
            }
            gone
        };
        // The objects go with the file's last name.
        if let Some(l) = i.and_then(|i| i.layout) {
            self.remove_objects(&l.components).await;
        }
        Ok(())
    }

    /// Makes `path` a symbolic link to `target` (POSIX symlink: the target is stored as
    /// given and need not exist; a relative one resolves from the link's directory).
    pub fn symlink(&self, c: &Caller, path: &str, target: &str) -> MgrResult<()> {
        if target.is_empty() || target.len() > LINK_TARGET_BYTES_MAX || target.contains('\0') {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: a link target is 1 to {LINK_TARGET_BYTES_MAX} bytes without NUL"),
            ));
        }
        let (dir, name) = self.parent(c, path, true)?;
        check_new_name(path, name)?;
        let i = new_inode(c, &dir, FileKind::Symlink, 0o777, Some(target));
        self.st()
            .link_new(dir.ino, name, &i)
            .map_err(|e| store_err(e, path))?;
        Ok(())
    }

    /// Makes `path` a FIFO, socket or device of `kind` (POSIX mknod: an entry with no content
    /// of its own; whoever opens it gets the kernel's behaviour, and mounts are `nodev`).
    /// Devices are an admin's to make, as `CAP_MKNOD` is root's.
    pub fn mknod(
        &self,
        c: &Caller,
        path: &str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> MgrResult<()> {
        if !kind.special() {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: mknod makes FIFOs, sockets and devices"),
            ));
        }
        let device = matches!(kind, FileKind::CharDevice | FileKind::BlockDevice);
        if device && !c.admin {
            return Err(denied(path, "only an admin makes device nodes"));
        }
        let (dir, name) = self.parent(c, path, true)?;
        check_new_name(path, name)?;
        let i = Inode {
            rdev: if device { rdev } else { 0 },
            ..new_inode(c, &dir, kind, mode, None)
        };
        self.st()
            .link_new(dir.ino, name, &i)
            .map_err(|e| store_err(e, path))?;
        Ok(())
    }

    /// The cluster's capacity as the caller's `statfs` shows it: the drives' bytes from their
    /// last health checks, the caller's quota, the namespace's inodes.
    pub async fn statfs(&self, c: &Caller, path: &str) -> MgrResult<FsSpace> {
        self.resolve(c, path)?;
        let space = self.drives.space().await;
        let st = self.st();
        let quota = st
            .quota(c.uid)
            .map_err(|e| store_err(e, path))?
            .map(|q| (q.limit_bytes, q.used_bytes));
        Ok(FsSpace {
            total_bytes: space.capacity_bytes,
            free_bytes: space.capacity_bytes.saturating_sub(space.used_bytes),
            quota,
            files: st.inode_count().map_err(|e| store_err(e, path))?,
        })
    }

    /// The stat and extended attributes of `path`; reading the attributes needs read
    /// permission on the file, as reading its bytes does.
    pub async fn getxattrs(&self, c: &Caller, path: &str) -> MgrResult<(FileStat, Vec<Xattr>)> {
        let i = self.resolve(c, path)?;
        if !may(c, &i, R) {
            return Err(denied(path, "read permission"));
        }
        let xattrs = self.st().xattrs(i.ino).map_err(|e| store_err(e, path))?;
        let times = self.file_times(&i).await.map_err(|e| e.at(path))?;
        Ok((self.stat_of(&i, Some(times)), xattrs))
    }

    /// Sets (`Some`) or removes (`None`) extended attribute `name` of `path`: the file's owner,
    /// an admin, or a user who may write it (Linux's rule for `user.` attributes). Removing
    /// an attribute the file lacks is `NoSuchPath`, as `ENODATA` is.
    pub fn setxattr(
        &self,
        c: &Caller,
        path: &str,
        name: &str,
        value: Option<&[u8]>,
    ) -> MgrResult<()> {
        check_xattr_name(name).map_err(|e| invalid_xattrs(path, e))?;
        let i = self.resolve(c, path)?;
        if i.uid != c.uid && !may(c, &i, W) {
            return Err(denied(path, "write permission or ownership"));
        }
        let mut st = self.st();
        let mut x = st.xattrs(i.ino).map_err(|e| store_err(e, path))?;
        let had = x.len();
        x.retain(|a| a.name != name);
        match value {
            Some(v) => x.push(Xattr {
                name: name.to_string(),
                value: v.to_vec(),
            }),
            None if x.len() == had => {
                return Err(MgrError::new(
                    MgrStatus::NoSuchPath,
                    format!("{path}: no extended attribute {name:?}"),
                ))
            }
            None => {}
        }
        check_xattrs(&x).map_err(|e| invalid_xattrs(path, e))?;
        st.set_xattrs(i.ino, &x).map_err(|e| store_err(e, path))?;
        st.set_times(i.ino, None, None, now_us())
            .map_err(|e| store_err(e, path))
    }

    /// The target of the symbolic link `path` (its last name is not followed).
    pub fn readlink(&self, c: &Caller, path: &str) -> MgrResult<String> {
        let (dir, name) = self.parent(c, path, false)?;
        let i = self
            .entry(&dir, name, path)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
        i.target.ok_or_else(|| {
            MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: not a symbolic link"),
            )
        })
    }

    /// Gives the file `existing` the further name `new` (POSIX link; a symbolic link is
    /// linked itself, not followed). As Linux's `protected_hardlinks` asks, only the file's
    /// owner, an admin, or a user who may read and write it may link it, so nobody pins
    /// another user's file under a name they control.
    pub fn link(&self, c: &Caller, existing: &str, new: &str) -> MgrResult<()> {
        let (ed, en) = self.parent(c, existing, false)?;
        let i = self
            .entry(&ed, en, existing)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, existing.to_string()))?;
        if i.kind == FileKind::Dir {
            return Err(denied(
                existing,
                "hard links to directories are not allowed",
            ));
        }
        if !(c.admin || c.uid == i.uid || may(c, &i, R | W)) {
            return Err(denied(
                existing,
                "only the owner, or a user who may read and write it, links a file",
            ));
        }
        let (nd, nn) = self.parent(c, new, true)?;
        check_new_name(new, nn)?;
        let mut st = self.st();
        st.link(i.ino, nd.ino, nn).map_err(|e| store_err(e, new))?;
        st.set_times(i.ino, None, None, now_us())
            .map_err(|e| store_err(e, new))
    }

    /// Renames `from` to `to`. `flags`: [`RENAME_NOREPLACE`] refuses an existing `to`
    /// (`Exists`); [`RENAME_EXCHANGE`] swaps the two names, both of which must exist.
    pub async fn rename(&self, c: &Caller, from: &str, to: &str, flags: u8) -> MgrResult<()> {
        let (fd, fname) = self.parent(c, from, true)?;
        let (td, tname) = self.parent(c, to, true)?;
        let entry = |dir: &Inode, name: &str, path: &str| -> MgrResult<Option<Inode>> {
            let st = self.st();
            match st.lookup(dir.ino, name).map_err(|e| store_err(e, path))? {
                Some(ino) => st.inode(ino).map_err(|e| store_err(e, path)),
                None => Ok(None),
            }
        };
        let src = entry(&fd, fname, from)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, from.to_string()))?;
        check_sticky(c, &fd, &src, from)?;
        let target = entry(&td, tname, to)?;
        if let Some(t) = &target {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(MgrError::new(MgrStatus::Exists, to.to_string()));
            }
            check_sticky(c, &td, t, to)?;
        }
        // A directory may not move under itself (nor, swapped, the target under it).
        self.not_under(src.ino, td.ino, to)?;
        if flags & RENAME_EXCHANGE != 0 {
            let t = target.ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, to.to_string()))?;
            self.not_under(t.ino, fd.ino, from)?;
            return self
                .st()
                .exchange(fd.ino, fname, td.ino, tname)
                .map_err(|e| store_err(e, to));
        }
        let replaced = self
            .st()
            .rename(fd.ino, fname, td.ino, tname)
            .map_err(|e| store_err(e, to))?;
        if let Some(l) = replaced.and_then(|r| r.layout) {
            self.remove_objects(&l.components).await;
        }
        Ok(())
    }

    /// `InvalidArgument` when directory `ino` is `dir` or one of its ancestors (a directory
    /// moved there would be under itself).
    fn not_under(&self, ino: u64, dir: u64, path: &str) -> MgrResult<()> {
        let mut up = dir;
        loop {
            if up == ino {
                return Err(MgrError::new(
                    MgrStatus::InvalidArgument,
                    format!("{path}: cannot move a directory into itself"),
                ));
            }
            if up == ROOT_INO {
                return Ok(());
            }
            up = match self.st().inode(up).map_err(|e| store_err(e, path))? {
                Some(i) => i.parent,
                None => return Ok(()),
            };
        }
    }
}

/// A directory entry of a directory its caller may read but not search: name, inode number
/// and kind, every other field zero.
fn names_only(name: &str, i: &Inode) -> DirEntry {
    DirEntry {
        name: name.to_string(),
        stat: FileStat {
            ino: i.ino,
            kind: i.kind,
            mode: 0,
            uid: 0,
            gid: 0,
            owner: String::new(),
            group: String::new(),
            size: 0,
            mtime_us: 0,
            ctime_us: 0,
            nlink: 0,
            atime_us: 0,
            rdev: 0,
        },
        xattr: None,
    }
}
