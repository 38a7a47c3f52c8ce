//! The [`MetaStore`] methods of [`PgStore`], each the transaction SQLite's engine runs, in
//! PostgreSQL's dialect.

use super::conn::params;
use super::keylog;
use super::steps::Skip;
use super::*;
use nasd_proto::manager::{E2eCommit, KeyLogEntry, PolicyReaders, Xattr};
use nasd_proto::Suite;

impl MetaStore for PgStore {
    fn user_by_name(&self, name: &str) -> StoreResult<Option<User>> {
        self.db.query_opt(
            "SELECT uid, name, phc, admin, gid, gateway FROM users WHERE name = $1",
            params![name],
            user_of,
        )
    }

    fn user_by_uid(&self, uid: u32) -> StoreResult<Option<User>> {
        self.db.query_opt(
            "SELECT uid, name, phc, admin, gid, gateway FROM users WHERE uid = $1",
            params![uid],
            user_of,
        )
    }

    fn users(&self) -> StoreResult<Vec<User>> {
        self.db.query_map(
            "SELECT uid, name, phc, admin, gid, gateway FROM users ORDER BY uid",
            &[],
            user_of,
        )
    }

    fn add_user(&mut self, name: &str, phc: &str, admin: bool, gid: u32) -> StoreResult<u32> {
        let tx = self.db.transaction()?;
        // uids start at 1000 for ordinary users; the first user (the admin) gets 0.
        let uid = new_named_id(&tx, "users", "uid", name, 1000)?;
        tx.execute(
            "INSERT INTO users(uid, name, phc, admin, gid) VALUES ($1, $2, $3, $4, $5)",
            params![uid, name, phc, admin, gid],
        )?;
        tx.commit()?;
        Ok(uid)
    }

    fn set_credential(&mut self, uid: u32, phc: &str) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        let n = tx.execute(
            "UPDATE users SET phc = $2 WHERE uid = $1",
            params![uid, phc],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        tx.execute(
            "DELETE FROM sessions WHERE uid = $1 OR via = $1",
            params![uid],
        )?;
        tx.commit()
    }

    fn set_gateway(&mut self, uid: u32, on: bool) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        let n = tx.execute(
            "UPDATE users SET gateway = $2 WHERE uid = $1",
            params![uid, on],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        if !on {
            tx.execute("DELETE FROM sessions WHERE via = $1", params![uid])?;
        }
        tx.commit()
    }

    fn group_by_name(&self, name: &str) -> StoreResult<Option<Group>> {
        self.db.query_opt(
            "SELECT gid, name FROM groups WHERE name = $1",
            params![name],
            |r| {
                Ok(Group {
                    gid: r.get(0)?,
                    name: r.get(1)?,
                })
            },
        )
    }

    fn group_by_gid(&self, gid: u32) -> StoreResult<Option<Group>> {
        self.db.query_opt(
            "SELECT gid, name FROM groups WHERE gid = $1",
            params![gid],
            |r| {
                Ok(Group {
                    gid: r.get(0)?,
                    name: r.get(1)?,
                })
            },
        )
    }

    fn add_group(&mut self, name: &str) -> StoreResult<u32> {
        let tx = self.db.transaction()?;
        // gids start at 100; the first group gets 0.
        let gid = new_named_id(&tx, "groups", "gid", name, 100)?;
        tx.execute(
            "INSERT INTO groups(gid, name) VALUES ($1, $2)",
            params![gid, name],
        )?;
        tx.commit()?;
        Ok(gid)
    }

    fn add_member(&mut self, gid: u32, uid: u32) -> StoreResult<()> {
        self.db.execute(
            "INSERT INTO members(gid, uid) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            params![gid, uid],
        )?;
        Ok(())
    }

    fn remove_member(&mut self, gid: u32, uid: u32) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        super::groups::remove_member(&tx, gid, uid)?;
        tx.commit()
    }

    fn members_of(&self, gid: u32) -> StoreResult<Vec<u32>> {
        self.db.query_map(
                "SELECT uid FROM members WHERE gid = $1 UNION SELECT uid FROM users WHERE gid = $1 ORDER BY 1", params![gid], |r| r.get(0))
    }

    fn user_keys(&self, uid: u32) -> StoreResult<Option<UserKeys>> {
        let b: Option<Vec<u8>> = self
            .db
            .query_opt(
                "SELECT e2e_keys FROM users WHERE uid = $1",
                params![uid],
                |r| r.get(0),
            )?
            .flatten();
        Ok(b.and_then(|b| keys_of(&b)))
    }

    fn set_user_keys(&mut self, uid: u32, keys: &UserKeys) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        let n = tx.execute(
            "UPDATE users SET e2e_keys = $2 WHERE uid = $1",
            params![uid, keys_blob(keys)],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        keylog::append(
            &tx,
            &KeyLogEntry::Keys {
                uid,
                keys: keys.clone(),
            },
        )?;
        tx.commit()
    }

    fn set_password_file(&mut self, uid: u32, phc: &str, sealed: Option<&[u8]>) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        let keys: Option<Option<Vec<u8>>> = tx.query_opt(
            "SELECT e2e_keys FROM users WHERE uid = $1",
            params![uid],
            |r| r.get(0),
        )?;
        let Some(keys) = keys else {
            return Err(StoreError::NotFound);
        };
        tx.execute(
            "UPDATE users SET phc = $2 WHERE uid = $1",
            params![uid, phc],
        )?;
        if let (Some(sealed), Some(mut k)) = (sealed, keys.as_deref().and_then(keys_of)) {
            k.sealed = sealed.to_vec();
            tx.execute(
                "UPDATE users SET e2e_keys = $2 WHERE uid = $1",
                params![uid, keys_blob(&k)],
            )?;
        }
        tx.execute(
            "DELETE FROM sessions WHERE uid = $1 OR via = $1",
            params![uid],
        )?;
        tx.commit()
    }

    fn user_key_log(&self, uid: u32) -> StoreResult<Vec<KeyLogEntry>> {
        keylog::of_user(&self.db, uid)
    }

    fn log_policy_readers(&mut self, readers: &PolicyReaders) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        keylog::append(&tx, &KeyLogEntry::Readers(readers.clone()))?;
        tx.commit()
    }

    fn key_log(&self, from: u64, max: usize) -> StoreResult<Vec<KeyLogEntry>> {
        keylog::page(&self.db, from, max)
    }

    fn key_log_len(&self) -> StoreResult<u64> {
        keylog::len(&self.db)
    }

    fn reset_user_keys(&mut self, uid: u32, by: u32, at_ms: u64) -> StoreResult<u32> {
        let tx = self.db.transaction()?;
        let n = tx.execute(
            "UPDATE users SET e2e_keys = NULL WHERE uid = $1",
            params![uid],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        tx.execute("DELETE FROM group_wraps WHERE uid = $1", params![uid])?;
        let version = keylog::last_version(&tx, uid)? + 1;
        keylog::append(
            &tx,
            &KeyLogEntry::Reset {
                uid,
                version,
                by,
                at_ms,
            },
        )?;
        tx.commit()?;
        Ok(version)
    }

    fn user_key_version(&self, uid: u32) -> StoreResult<u32> {
        keylog::last_version(&self.db, uid)
    }

    fn group_key(&self, gid: u32) -> StoreResult<GroupKeyPair> {
        super::groups::group_key(&self.db, gid)
    }

    fn set_group_key(
        &mut self,
        gid: u32,
        version: u32,
        public: &[u8; 32],
        link: Option<&[u8]>,
        wraps: &[(u32, Vec<u8>)],
    ) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        super::groups::set_group_key(&tx, gid, version, public, link, wraps)?;
        tx.commit()
    }

    fn group_key_links(&self, gid: u32, max: usize) -> StoreResult<Vec<Vec<u8>>> {
        super::groups::group_key_links(&self.db, gid, max)
    }

    fn group_wrap(&self, gid: u32, uid: u32) -> StoreResult<Option<Vec<u8>>> {
        self.db.query_opt(
            "SELECT w.wrap FROM group_wraps w JOIN groups g ON g.gid = w.gid
                 WHERE w.gid = $1 AND w.uid = $2 AND w.version = g.key_version",
            params![gid, uid],
            |r| r.get(0),
        )
    }

    fn set_e2e(&mut self, ino: u64, expect: &[u8; 32], state: &E2eState) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        let i = Self::inode_in(&tx, ino)?.ok_or(StoreError::NotFound)?;
        if *expect != state_hash_of(&i.e2e) {
            return Err(StoreError::Conflict);
        }
        tx.execute(
            "UPDATE inodes SET e2e = $2 WHERE ino = $1",
            params![ino as i64, e2e_blob(&Some(state.clone()))],
        )?;
        tx.commit()
    }

    fn groups_of(&self, uid: u32) -> StoreResult<Vec<u32>> {
        self.db.query_map(
                "SELECT gid FROM members WHERE uid = $1 UNION SELECT gid FROM users WHERE uid = $1 ORDER BY 1", params![uid], |r| r.get(0))
    }

    fn inode(&self, ino: u64) -> StoreResult<Option<Inode>> {
        Self::inode_in(&self.db, ino)
    }

    fn links(&self, i: &Inode) -> StoreResult<u32> {
        Self::links_in(&self.db, i)
    }

    fn readdir_links(
        &self,
        parent: u64,
        after: &str,
        limit: usize,
    ) -> StoreResult<std::collections::HashMap<u64, u32>> {
        let rows = self.db.query_map(
            "SELECT i.ino, CASE WHEN i.kind = 2
                 THEN 2 + (SELECT COUNT(*) FROM dirents s JOIN inodes k ON k.ino = s.ino
                           WHERE s.parent = i.ino AND k.kind = 2)
                 ELSE (SELECT COUNT(*) FROM dirents s WHERE s.ino = i.ino) END
             FROM inodes i WHERE i.ino IN (SELECT d.ino FROM dirents d WHERE d.parent = $1
                 AND d.name > $2 ORDER BY d.name LIMIT $3)",
            params![parent as i64, after, limit.min(i64::MAX as usize) as i64],
            |r| Ok((r.get::<i64>(0)? as u64, r.get::<i64>(1)? as u32)),
        )?;
        Ok(rows.into_iter().collect())
    }

    fn lookup(&self, parent: u64, name: &str) -> StoreResult<Option<u64>> {
        self.db
            .query_opt(
                "SELECT ino FROM dirents WHERE parent = $1 AND name = $2",
                params![parent as i64, name],
                |r| r.get::<i64>(0),
            )
            .map(|o| o.map(|i| i as u64))
    }

    fn readdir(&self, parent: u64, after: &str, limit: usize) -> StoreResult<Vec<(String, Inode)>> {
        Self::dir_inode(&self.db, parent)?;
        let cols = INODE_COLS
            .split(", ")
            .map(|c| format!("i.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let entries: Vec<(String, Inode)> = {
            self.db.query_map(&format!(
                    "SELECT d.name, {cols} FROM dirents d JOIN inodes i ON i.ino = d.ino WHERE d.parent = $1 AND d.name > $2 ORDER BY d.name LIMIT $3"
                ),
                    params![parent as i64, after, limit.min(i64::MAX as usize) as i64],
                    |r| Ok((r.get(0)?, inode_at(r, 1)?)),
                )?
        };
        // The page's files' components in one statement (not a round trip per file).
        let mut comps: std::collections::HashMap<u64, Vec<ObjRef>> = Default::default();
        if entries.iter().any(|(_, i)| i.layout.is_some()) {
            let rows = self.db.query_map(
                "SELECT c.drive, c.part, c.object, c.ino FROM components c WHERE c.ino IN
                 (SELECT d.ino FROM dirents d WHERE d.parent = $1 AND d.name > $2
                  ORDER BY d.name LIMIT $3) ORDER BY c.ino, c.idx",
                params![parent as i64, after, limit.min(i64::MAX as usize) as i64],
                |r| Ok((r.get::<i64>(3)? as u64, obj_of(r)?)),
            )?;
            for (ino, o) in rows {
                comps.entry(ino).or_default().push(o);
            }
        }
        Ok(crate::store::with_components(entries, &comps))
    }

    fn link_new(&mut self, parent: u64, name: &str, inode: &Inode) -> StoreResult<u64> {
        let tx = self.db.transaction()?;
        Self::dir_inode(&tx, parent)?;
        if Self::entry(&tx, parent, name)?.is_some() {
            return Err(StoreError::Exists);
        }
        let ino = Self::insert_inode(&tx, None, parent, inode)?;
        tx.execute(
            "INSERT INTO dirents(parent, name, ino) VALUES ($1, $2, $3)",
            params![parent as i64, name, ino as i64],
        )?;
        Self::touch_dir(&tx, parent)?;
        tx.commit()?;
        Ok(ino)
    }

    fn unlink(&mut self, parent: u64, name: &str) -> StoreResult<Option<Inode>> {
        let tx = self.db.transaction()?;
        let i = Self::entry(&tx, parent, name)?.ok_or(StoreError::NotFound)?;
        if i.kind == FileKind::Dir && Self::has_children(&tx, i.ino)? {
            return Err(StoreError::NotEmpty);
        }
        let gone = Self::drop_name(&tx, parent, name, &i)?;
        Self::touch_dir(&tx, parent)?;
        tx.commit()?;
        Ok(gone.then_some(i))
    }

    fn link(&mut self, ino: u64, parent: u64, name: &str) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        Self::dir_inode(&tx, parent)?;
        let i = Self::inode_in(&tx, ino)?.ok_or(StoreError::NotFound)?;
        if i.kind == FileKind::Dir {
            return Err(StoreError::IsADirectory);
        }
        if Self::links_in(&tx, &i)? == 0 {
            // A reserved inode (an upload in flight) has no name to add to.
            return Err(StoreError::NotFound);
        }
        if Self::entry(&tx, parent, name)?.is_some() {
            return Err(StoreError::Exists);
        }
        tx.execute(
            "INSERT INTO dirents(parent, name, ino) VALUES ($1, $2, $3)",
            params![parent as i64, name, ino as i64],
        )?;
        Self::touch_dir(&tx, parent)?;
        tx.commit()
    }

    fn rename(
        &mut self,
        from_parent: u64,
        from_name: &str,
        to_parent: u64,
        to_name: &str,
    ) -> StoreResult<Option<Inode>> {
        let tx = self.db.transaction()?;
        Self::dir_inode(&tx, to_parent)?;
        let src = Self::entry(&tx, from_parent, from_name)?.ok_or(StoreError::NotFound)?;
        if from_parent == to_parent && from_name == to_name {
            return Ok(None);
        }
        let replaced = Self::entry(&tx, to_parent, to_name)?;
        if replaced.as_ref().is_some_and(|t| t.ino == src.ino) {
            // Two names of one file: POSIX rename does nothing.
            return Ok(None);
        }
        let mut gone = None;
        if let Some(t) = replaced {
            match (src.kind == FileKind::Dir, t.kind == FileKind::Dir) {
                (false, true) => return Err(StoreError::IsADirectory),
                (true, false) => return Err(StoreError::NotADirectory),
                (true, true) if Self::has_children(&tx, t.ino)? => {
                    return Err(StoreError::NotEmpty)
                }
                _ => {}
            }
            if Self::drop_name(&tx, to_parent, to_name, &t)? {
                gone = Some(t);
            }
        }
        tx.execute(
            "UPDATE dirents SET parent = $3, name = $4 WHERE parent = $1 AND name = $2",
            params![from_parent as i64, from_name, to_parent as i64, to_name],
        )?;
        tx.execute(
            "UPDATE inodes SET parent = $2, ctime_us = $3 WHERE ino = $1",
            params![src.ino as i64, to_parent as i64, now_us() as i64],
        )?;
        Self::touch_dir(&tx, from_parent)?;
        Self::touch_dir(&tx, to_parent)?;
        tx.commit()?;
        Ok(gone)
    }

    fn exchange(
        &mut self,
        a_parent: u64,
        a_name: &str,
        b_parent: u64,
        b_name: &str,
    ) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        let a = Self::entry(&tx, a_parent, a_name)?.ok_or(StoreError::NotFound)?;
        let b = Self::entry(&tx, b_parent, b_name)?.ok_or(StoreError::NotFound)?;
        let now = now_us() as i64;
        for (parent, name, ino) in [(a_parent, a_name, b.ino), (b_parent, b_name, a.ino)] {
            tx.execute(
                "UPDATE dirents SET ino = $3 WHERE parent = $1 AND name = $2",
                params![parent as i64, name, ino as i64],
            )?;
            tx.execute(
                "UPDATE inodes SET parent = $2, ctime_us = $3 WHERE ino = $1",
                params![ino as i64, parent as i64, now],
            )?;
            Self::touch_dir(&tx, parent)?;
        }
        tx.commit()
    }

    fn inode_count(&self) -> StoreResult<u64> {
        self.db
            .query_row("SELECT COUNT(*) FROM inodes", &[], |r| r.get::<i64>(0))
            .map(|n| n as u64)
    }

    fn set_times(
        &mut self,
        ino: u64,
        atime_us: Option<u64>,
        mtime_us: Option<u64>,
        ctime_us: u64,
    ) -> StoreResult<()> {
        let n = self.db.execute(
            "UPDATE inodes SET atime_us = COALESCE($2, atime_us),
                     mtime_us = COALESCE($3, mtime_us), ctime_us = $4 WHERE ino = $1",
            params![
                ino as i64,
                atime_us.map(|t| t as i64),
                mtime_us.map(|t| t as i64),
                ctime_us as i64
            ],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    fn update_inode(&mut self, i: &Inode) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        Self::update_inode_in(&tx, i)?;
        tx.commit()
    }

    fn begin_revocation(&mut self, i: &Inode) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        Self::update_inode_in(&tx, i)?;
        tx.execute(
            "INSERT INTO revocations(ino) VALUES ($1) ON CONFLICT DO NOTHING",
            params![i.ino as i64],
        )?;
        tx.commit()
    }

    fn end_revocation(&mut self, ino: u64) -> StoreResult<()> {
        self.db.execute(
            "DELETE FROM revocations WHERE ino = $1",
            params![ino as i64],
        )?;
        Ok(())
    }

    fn revocations(&self) -> StoreResult<Vec<u64>> {
        self.db
            .query_map("SELECT ino FROM revocations ORDER BY ino", &[], |r| {
                r.get::<i64>(0).map(|v| v as u64)
            })
    }

    fn counts(&self) -> StoreResult<nasd_proto::manager::FileCounts> {
        Self::counts_in(&self.db)
    }

    fn recount(&mut self, fix: bool) -> StoreResult<nasd_proto::manager::FileCounts> {
        self.recount_now(fix)
    }

    fn degraded(&self, down: &[DriveId], limit: usize) -> StoreResult<(u64, Vec<u64>)> {
        Self::degraded_in(&self.db, down, limit)
    }

    fn stale_files_after(&self, after: u64, limit: usize) -> StoreResult<Vec<u64>> {
        Self::stale_files_in(&self.db, after, limit)
    }

    fn name_of(&self, ino: u64) -> StoreResult<Option<(u64, String)>> {
        self.db.query_opt(
            "SELECT parent, name FROM dirents WHERE ino = $1 LIMIT 1",
            params![ino as i64],
            |r| Ok((r.get::<i64>(0)? as u64, r.get::<String>(1)?)),
        )
    }

    fn objects_on_drive(&self, drive: DriveId) -> StoreResult<Vec<ObjectId>> {
        self.db.query_map(
            "SELECT object FROM components WHERE drive = $1",
            params![drive.0 as i64],
            |r| Ok(ObjectId(r.get::<i64>(0)? as u64)),
        )
    }

    fn files_with_drive(&self, drive: DriveId, after: u64, limit: usize) -> StoreResult<Vec<u64>> {
        self.db.query_map(
            "SELECT DISTINCT ino FROM components WHERE drive = $1 AND ino > $2
                 ORDER BY ino LIMIT $3",
            params![drive.0 as i64, after as i64, limit as i64],
            |r| Ok(r.get::<i64>(0)? as u64),
        )
    }

    fn files_after(&self, after: u64, limit: usize) -> StoreResult<Vec<u64>> {
        self.db.query_map(
            "SELECT ino FROM inodes WHERE geometry IS NOT NULL AND ino > $1
                     AND ino NOT IN (SELECT ino FROM reserved)
                 ORDER BY ino LIMIT $2",
            params![after as i64, limit as i64],
            |r| Ok(r.get::<i64>(0)? as u64),
        )
    }

    fn reserve_inode(&mut self, parent: u64, inode: &Inode) -> StoreResult<u64> {
        self.relaxed(|s| s.reserve_inode_now(parent, inode))
    }

    fn forget_reserved(&mut self, ino: u64) -> StoreResult<()> {
        self.relaxed(|s| {
            let tx = s.db.transaction()?;
            Self::drop_reserved(&tx, ino)?;
            tx.commit()
        })
    }

    fn link_reserved(
        &mut self,
        parent: u64,
        name: &str,
        ino: u64,
        layout: &FileLayout,
        acv: u64,
    ) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        Self::dir_inode(&tx, parent)?;
        if Self::entry(&tx, parent, name)?.is_some() {
            return Err(StoreError::Exists);
        }
        let size = Self::inode_in(&tx, ino)?.and_then(|i| i.size);
        Self::counted(&tx, ino, || {
            Self::write_layout(&tx, ino, layout, acv, size)?;
            Self::link_reservation(&tx, parent, name, ino)
        })?;
        tx.commit()
    }

    fn put_staged(&mut self, s: &Staged) -> StoreResult<()> {
        self.relaxed(|st| st.put_staged_now(s))
    }

    fn staged(&self, obj: ObjRef) -> StoreResult<Option<Staged>> {
        Self::staged_in(&self.db, obj)
    }

    #[allow(clippy::too_many_arguments)]
    fn commit_staged(
        &mut self,
        parent: u64,
        name: &str,
        obj: ObjRef,
        replacing: Option<u64>,
        size: Option<u64>,
        stale: u64,
        xattrs: Option<&[Xattr]>,
        charge: Option<u64>,
        e2e: Option<&E2eCommit>,
        now_ms: u64,
    ) -> StoreResult<Option<Inode>> {
        let tx = self.db.transaction()?;
        let mut s = Self::staged_at(&tx, obj)?.ok_or(StoreError::NotFound)?;
        Self::dir_inode(&tx, parent)?;
        let old = Self::entry(&tx, parent, name)?;
        match (&old, replacing) {
            (Some(i), Some(want)) if i.ino == want => {}
            (None, None) => {}
            (None, Some(_)) => return Err(StoreError::NotFound),
            (Some(_), _) => return Err(StoreError::Exists),
        }
        if let Some(i) = &old {
            if i.kind == FileKind::Dir {
                return Err(StoreError::IsADirectory);
            }
        }
        let mut replaced = old.clone();
        // The file's share of the counts, moved once its reservation is linked and its layout
        // written (below).
        let before = counts::share_of(&tx, s.ino)?;
        if s.new_file {
            if let Some(i) = &old {
                if !Self::drop_name(&tx, parent, name, i)? {
                    // The replaced file keeps its other names, and its objects.
                    replaced = None;
                }
            }
            Self::link_reservation(&tx, parent, name, s.ino)?;
        } else if !matches!(&old, Some(i) if i.ino == s.ino) {
            // An overwrite commits only into the inode it was staged for.
            return Err(StoreError::NotFound);
        }
        let old_version = old
            .as_ref()
            .filter(|i| i.ino == s.ino)
            .and_then(|i| i.layout.as_ref())
            .map(|l| l.version);
        if let Some(base) = s.base_version {
            if old_version != Some(base) {
                return Err(StoreError::Conflict);
            }
        }
        s.layout.version = old_version.map_or(1, |v| v + 1);
        s.layout.stale |= stale;
        // Quota (seed 002 §3.2): the new content's size is charged to the file's owner; growth
        // the upload's live escrow does not cover must fit now.
        let target = Self::inode_in(&tx, s.ino)?.ok_or(StoreError::NotFound)?;
        // End to end: a change builds on the state it read; no commit goes back a key version.
        if let Some(c) = e2e {
            if c.expect != [0; 32] && c.expect != state_hash_of(&target.e2e) {
                return Err(StoreError::Conflict);
            }
            if key_version_of(&Some(c.state.clone())) < key_version_of(&target.e2e) {
                return Err(StoreError::Conflict);
            }
        }
        Self::charge_staged(&tx, &s, &target, charge, obj, now_ms)?;
        Self::write_layout(&tx, s.ino, &s.layout, s.acv, size)?;
        Self::counted_since(&tx, s.ino, before)?;
        tx.execute(
            "UPDATE inodes SET mtime_us = $2, ctime_us = $2 WHERE ino = $1",
            params![s.ino as i64, now_us() as i64],
        )?;
        if let Some(x) = xattrs {
            Self::put_xattrs(&tx, s.ino, x)?;
        }
        tx.execute(
            "UPDATE inodes SET e2e = $2 WHERE ino = $1",
            params![s.ino as i64, e2e_blob(&e2e.map(|c| c.state.clone()))],
        )?;
        Self::delete_staged(&tx, obj)?;
        tx.commit()?;
        Ok(replaced)
    }

    fn swap_layout(
        &mut self,
        ino: u64,
        expected: u64,
        layout: &FileLayout,
        size: Option<u64>,
    ) -> StoreResult<u64> {
        let tx = self.db.transaction()?;
        let i = Self::inode_in(&tx, ino)?.ok_or(StoreError::NotFound)?;
        let Some(l) = &i.layout else {
            return Err(StoreError::IsADirectory);
        };
        if l.version != expected {
            return Err(StoreError::Conflict);
        }
        let next = FileLayout {
            version: expected + 1,
            ..layout.clone()
        };
        Self::set_layout(&tx, ino, &next, i.acv, size.or(i.size))?;
        if let Some(n) = size {
            Self::charge_in(&tx, ino, n)?;
        }
        if size.is_some() {
            tx.execute(
                "UPDATE inodes SET mtime_us = $2, ctime_us = $2 WHERE ino = $1",
                params![ino as i64, now_us() as i64],
            )?;
        }
        tx.commit()?;
        Ok(next.version)
    }

    fn abort_staged(&mut self, obj: ObjRef) -> StoreResult<Option<Staged>> {
        self.relaxed(|s| s.abort_staged_now(obj))
    }

    fn touch_staged(&mut self, obj: ObjRef, created_ms: u64) -> StoreResult<()> {
        self.relaxed(|s| {
            let tx = s.db.transaction()?;
            let n = tx.execute(
                "UPDATE staged SET created_ms = $3 WHERE drive = $1 AND object = $2",
                params![obj.drive.0 as i64, obj.object.0 as i64, created_ms as i64],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound);
            }
            tx.commit()
        })
    }

    fn expire_staged(&mut self, before_ms: u64) -> StoreResult<Vec<Staged>> {
        let tx = self.db.transaction()?;
        let mut old: Vec<Staged> = {
            tx.query_map(
                &format!("SELECT {STAGED_COLS} FROM staged WHERE created_ms < $1"),
                params![before_ms as i64],
                staged_of,
            )?
        };
        for s in &mut old {
            let key = s.layout.components[0];
            s.layout.components = Self::staged_components(&tx, key)?;
            Self::delete_staged(&tx, key)?;
        }
        // Reservations as old as that which no live staged record holds: expired uploads,
        // and creates that crashed between reserving and staging.
        let orphaned = "SELECT ino FROM reserved WHERE created_ms < $1
             AND ino NOT IN (SELECT ino FROM staged WHERE ino IS NOT NULL)";
        for table in ["components", "inodes"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE ino IN ({orphaned})"),
                params![before_ms as i64],
            )?;
        }
        tx.execute(
            &format!("DELETE FROM reserved WHERE ino IN ({orphaned})"),
            params![before_ms as i64],
        )?;
        tx.commit()?;
        Ok(old)
    }

    fn set_key_seal(&mut self, seal: Option<std::sync::Arc<nasd_crypto::seal::KeySeal>>) {
        self.seal = seal;
    }

    fn lead(&mut self) -> StoreResult<crate::store::Leadership> {
        // A session lock: held until released or the session ends, however it ends. Taken
        // on the store's own connection, so the manager leads exactly while it can write.
        self.db
            .execute_batch(&format!("SELECT pg_advisory_lock({})", super::LEADER_LOCK))?;
        Ok(crate::store::Leadership::held_until(self.db.ended()))
    }

    fn drives(&self) -> StoreResult<Vec<DriveRecord>> {
        let seal = self.seal.as_deref();
        self.db.query_map("SELECT drive, addr, suite, drive_key, part, part_key, working_key, rotated_ms FROM drives ORDER BY drive", &[], |r| {
                let suite: u8 = r.get(2)?;
                let drive = DriveId(r.get::<i64>(0)? as u64);
                Ok(DriveRecord {
                    drive,
                    addr: r.get(1)?,
                    suite: Suite::from_u8(suite)
                        .map_err(|e| StoreError::Db(format!("drive of unknown suite {suite}: {e}")))?,
                    drive_key: drive_key_of(seal, drive, "drive", &r.get::<Vec<u8>>(3)?)?,
                    partition: PartitionId(r.get::<i64>(4)? as u16),
                    partition_key: drive_key_of(seal, drive, "partition", &r.get::<Vec<u8>>(5)?)?,
                    working_key: drive_key_of(seal, drive, "working", &r.get::<Vec<u8>>(6)?)?,
                    rotated_ms: r.get::<i64>(7)? as u64,
                })
            })
    }

    fn compact(&mut self) -> StoreResult<()> {
        self.db.execute_batch("VACUUM FULL drives")
    }

    fn reseal_drive_keys(
        &mut self,
        header: &[u8],
        seal: std::sync::Arc<nasd_crypto::seal::KeySeal>,
    ) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        // Read in the transaction, under the current seal: serializable with any writer.
        let drives = {
            let old = self.seal.as_deref();
            tx.query_map(
                "SELECT drive, drive_key, part_key, working_key FROM drives ORDER BY drive",
                &[],
                |r| {
                    let drive = DriveId(r.get::<i64>(0)? as u64);
                    Ok((
                        drive,
                        drive_key_of(old, drive, "drive", &r.get::<Vec<u8>>(1)?)?,
                        drive_key_of(old, drive, "partition", &r.get::<Vec<u8>>(2)?)?,
                        drive_key_of(old, drive, "working", &r.get::<Vec<u8>>(3)?)?,
                    ))
                },
            )?
        };
        tx.execute(
            "INSERT INTO meta(key, value) VALUES ($1, $2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![KEY_SEAL_META, header],
        )?;
        for (drive, dk, pk, wk) in &drives {
            let sealed =
                |which: &str, k: &nasd_crypto::Key| stored_drive_key(Some(&seal), *drive, which, k);
            tx.execute(
                "UPDATE drives SET drive_key = $2, part_key = $3, working_key = $4
                 WHERE drive = $1",
                params![
                    drive.0 as i64,
                    sealed("drive", dk),
                    sealed("partition", pk),
                    sealed("working", wk)
                ],
            )?;
        }
        tx.commit()?;
        self.seal = Some(seal);
        Ok(())
    }

    fn put_drive(&mut self, d: &DriveRecord) -> StoreResult<()> {
        self.db
            .execute(
                "INSERT INTO drives(drive, addr, suite, drive_key, part, part_key, working_key, rotated_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT(drive) DO UPDATE SET addr = excluded.addr, suite = excluded.suite, drive_key = excluded.drive_key, part = excluded.part, part_key = excluded.part_key, working_key = excluded.working_key, rotated_ms = excluded.rotated_ms",
                params![
                    d.drive.0 as i64,
                    d.addr,
                    d.suite as u8,
                    stored_drive_key(self.seal.as_deref(), d.drive, "drive", &d.drive_key),
                    d.partition.0 as i64,
                    stored_drive_key(self.seal.as_deref(), d.drive, "partition", &d.partition_key),
                    stored_drive_key(self.seal.as_deref(), d.drive, "working", &d.working_key),
                    d.rotated_ms as i64
                ],
            )
            ?;
        Ok(())
    }

    fn put_s3_key(&mut self, k: &S3Key) -> StoreResult<()> {
        let n = self.db.execute(
            "INSERT INTO s3_keys(access_key, uid, secret, created_ms) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
            params![k.access_key_id, k.uid, k.secret.0, k.created_ms as i64],
        )?;
        if n == 0 {
            return Err(StoreError::Exists);
        }
        Ok(())
    }

    fn xattrs(&self, ino: u64) -> StoreResult<Vec<Xattr>> {
        self.db.query_map(
            "SELECT name, value FROM xattrs WHERE ino = $1 ORDER BY name",
            params![ino as i64],
            |r| {
                Ok(Xattr {
                    name: r.get(0)?,
                    value: r.get(1)?,
                })
            },
        )
    }

    fn set_xattrs(&mut self, ino: u64, xattrs: &[Xattr]) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        Self::inode_in(&tx, ino)?.ok_or(StoreError::NotFound)?;
        Self::put_xattrs(&tx, ino, xattrs)?;
        tx.commit()
    }

    fn s3_key(&self, access_key_id: &str) -> StoreResult<Option<S3Key>> {
        self.db.query_opt(
            "SELECT access_key, uid, secret, created_ms FROM s3_keys WHERE access_key = $1",
            params![access_key_id],
            s3_key_of,
        )
    }

    fn s3_keys_of(&self, uid: u32) -> StoreResult<Vec<S3Key>> {
        self.db.query_map(
            "SELECT access_key, uid, secret, created_ms FROM s3_keys WHERE uid = $1
                 ORDER BY created_ms, access_key",
            params![uid],
            s3_key_of,
        )
    }

    fn delete_s3_key(&mut self, uid: u32, access_key_id: &str) -> StoreResult<bool> {
        let tx = self.db.transaction()?;
        let n = tx.execute(
            "DELETE FROM s3_keys WHERE uid = $1 AND access_key = $2",
            params![uid, access_key_id],
        )?;
        tx.execute(
            "DELETE FROM sessions WHERE uid = $1 AND via IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM s3_keys WHERE uid = $1)",
            params![uid],
        )?;
        tx.commit()?;
        Ok(n > 0)
    }

    fn put_session(&mut self, s: &SessionRecord) -> StoreResult<()> {
        self.db
            .execute(
                "INSERT INTO sessions(token_hash, uid, expires_ms, via)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT(token_hash) DO UPDATE SET uid = excluded.uid, expires_ms = excluded.expires_ms, via = excluded.via",
                params![s.token_hash.to_vec(), s.uid, s.expires_ms as i64, s.via],
            )
            ?;
        Ok(())
    }

    fn session(&self, token_hash: &[u8; 32]) -> StoreResult<Option<SessionRecord>> {
        self.db.query_opt(
            "SELECT uid, expires_ms, via FROM sessions WHERE token_hash = $1",
            params![token_hash.to_vec()],
            |r| {
                Ok(SessionRecord {
                    token_hash: *token_hash,
                    uid: r.get(0)?,
                    expires_ms: r.get::<i64>(1)? as u64,
                    via: r.get(2)?,
                })
            },
        )
    }

    fn delete_session(&mut self, token_hash: &[u8; 32]) -> StoreResult<bool> {
        self.db
            .execute(
                "DELETE FROM sessions WHERE token_hash = $1",
                params![token_hash.to_vec()],
            )
            .map(|n| n > 0)
    }

    fn expire_sessions(&mut self, now_ms: u64) -> StoreResult<u64> {
        self.db.execute(
            "DELETE FROM sessions WHERE expires_ms < $1",
            params![now_ms as i64],
        )
    }

    fn get_meta(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.db
            .query_opt("SELECT value FROM meta WHERE key = $1", params![key], |r| {
                r.get(0)
            })
    }

    fn put_meta(&mut self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.db
            .execute(
                "INSERT INTO meta(key, value) VALUES ($1, $2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            ?;
        Ok(())
    }

    fn quota(&self, uid: u32) -> StoreResult<Option<Quota>> {
        Self::quota_in(&self.db, uid)
    }

    fn quotas(&self) -> StoreResult<Vec<Quota>> {
        self.db.query_map(
            "SELECT uid, limit_bytes, used_bytes FROM quotas ORDER BY uid",
            &[],
            |r| {
                Ok(Quota {
                    uid: r.get(0)?,
                    limit_bytes: r.get::<i64>(1)? as u64,
                    used_bytes: r.get::<i64>(2)? as u64,
                })
            },
        )
    }

    fn set_quota(&mut self, uid: u32, limit_bytes: u64) -> StoreResult<bool> {
        let tx = self.db.transaction()?;
        let new = Self::quota_in(&tx, uid)?.is_none();
        if new {
            tx.execute(
                "INSERT INTO quotas(uid, limit_bytes, used_bytes) VALUES ($1, $2, 0)",
                params![uid, db_bytes(limit_bytes)],
            )?;
            tx.execute(
                "UPDATE inodes SET charged = 0 WHERE uid = $1 AND kind = $2",
                params![uid, FileKind::File as u8],
            )?;
        } else {
            tx.execute(
                "UPDATE quotas SET limit_bytes = $2 WHERE uid = $1",
                params![uid, db_bytes(limit_bytes)],
            )?;
        }
        tx.commit()?;
        Ok(new)
    }

    fn remove_quota(&mut self, uid: u32) -> StoreResult<bool> {
        let tx = self.db.transaction()?;
        let had = tx.execute("DELETE FROM quotas WHERE uid = $1", params![uid])? > 0;
        tx.execute_batch(&format!(
            "UPDATE inodes SET charged = NULL WHERE uid = {uid};
             DELETE FROM escrows WHERE uid = {uid};
             UPDATE staged SET escrow_uid = NULL, escrow_base = NULL, escrow_end = NULL,
                 escrow_expires_ms = NULL WHERE escrow_uid = {uid};"
        ))?;
        tx.commit()?;
        Ok(had)
    }

    fn files_owned(&self, uid: u32, after: u64, limit: usize) -> StoreResult<Vec<Inode>> {
        let found: Vec<Inode> = {
            self.db.query_map(
                &format!(
                    "SELECT {INODE_COLS} FROM inodes WHERE uid = $1 AND kind = $2 AND ino > $3
                     ORDER BY ino LIMIT $4"
                ),
                params![
                    uid,
                    FileKind::File as u8,
                    after as i64,
                    limit.min(i64::MAX as usize) as i64
                ],
                inode_of,
            )?
        };
        found
            .into_iter()
            .map(|i| Self::fill_layout(&self.db, i))
            .collect()
    }

    fn settle_charge(&mut self, ino: u64, seen: u64, bytes: u64) -> StoreResult<bool> {
        let tx = self.db.transaction()?;
        let now: Option<Option<i64>> = tx.query_opt(
            "SELECT charged FROM inodes WHERE ino = $1",
            params![ino as i64],
            |r| r.get(0),
        )?;
        if now != Some(Some(db_bytes(seen))) {
            return Ok(false);
        }
        Self::charge_in(&tx, ino, bytes)?;
        tx.commit()?;
        Ok(true)
    }

    fn escrowed(&self, uid: u32, now_ms: u64) -> StoreResult<u64> {
        Self::escrowed_in(&self.db, uid, now_ms, Skip::Nothing)
    }

    fn escrow_file(&mut self, e: &FileEscrow, now_ms: u64, check: bool) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        let i = Self::inode_in(&tx, e.ino)?.ok_or(StoreError::NotFound)?;
        let charged = i.charged.unwrap_or(0);
        let old = Self::file_escrow_in(&tx, e.ino)?;
        let end = old.map_or(e.end, |o| o.end.max(e.end));
        let expires_ms = old.map_or(e.expires_ms, |o| o.expires_ms.max(e.expires_ms));
        let held_before = old.map_or(0, |o| o.end.saturating_sub(charged));
        let held = end.saturating_sub(charged);
        if check && held > held_before {
            Self::room(&tx, e.uid, now_ms, held, Skip::File(e.ino))?;
        }
        tx.execute(
            "INSERT INTO escrows(ino, uid, end_bytes, expires_ms) VALUES ($1, $2, $3, $4) ON CONFLICT(ino) DO UPDATE SET uid = excluded.uid, end_bytes = excluded.end_bytes, expires_ms = excluded.expires_ms",
            params![e.ino as i64, e.uid, db_bytes(end), db_bytes(expires_ms)],
        )
        ?;
        tx.commit()
    }

    fn file_escrow(&self, ino: u64) -> StoreResult<Option<FileEscrow>> {
        Self::file_escrow_in(&self.db, ino)
    }

    fn file_escrows_expired(&self, now_ms: u64) -> StoreResult<Vec<FileEscrow>> {
        self.db.query_map(
            "SELECT ino, uid, end_bytes, expires_ms FROM escrows WHERE expires_ms <= $1
                 ORDER BY ino",
            params![db_bytes(now_ms)],
            file_escrow_of,
        )
    }

    fn settle_file(&mut self, ino: u64, bytes: u64, end_escrow: bool) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        Self::charge_in(&tx, ino, bytes)?;
        if end_escrow {
            tx.execute("DELETE FROM escrows WHERE ino = $1", params![ino as i64])?;
        }
        tx.commit()
    }

    fn escrow_staged(&mut self, obj: ObjRef, e: &StagedEscrow, now_ms: u64) -> StoreResult<()> {
        self.relaxed(|st| {
            let tx = st.db.transaction()?;
            let s = Self::staged_at(&tx, obj)?.ok_or(StoreError::NotFound)?;
            let held_before = s.escrow.map_or(0, |o| o.held(now_ms));
            let held = e.held(now_ms);
            if held > held_before {
                Self::room(&tx, e.uid, now_ms, held, Skip::Staged(obj))?;
            }
            tx.execute(
                "UPDATE staged SET escrow_uid = $3, escrow_base = $4, escrow_end = $5,
                     escrow_expires_ms = $6, created_ms = $7 WHERE drive = $1 AND object = $2",
                params![
                    obj.drive.0 as i64,
                    obj.object.0 as i64,
                    e.uid,
                    db_bytes(e.base),
                    db_bytes(e.end),
                    db_bytes(e.expires_ms),
                    db_bytes(now_ms)
                ],
            )?;
            tx.commit()
        })
    }
}
