//! The statements a method's transaction is made of, shared by the [`MetaStore`] methods of
//! [`PgStore`]: inodes and their layouts, directory entries, staged uploads and reservations,
//! quotas and escrows. Each takes the connection (or transaction) it runs in and leaves
//! committing to its caller, as the SQLite engine's do.

use super::conn::{params, Conn};
use super::*;
use nasd_proto::manager::Xattr;

impl PgStore {
    /// The components of inode `ino`, in order.
    pub(super) fn components(tx: &Conn, ino: u64) -> StoreResult<Vec<ObjRef>> {
        tx.query_map(
            "SELECT drive, part, object FROM components WHERE ino = $1 ORDER BY idx",
            params![ino as i64],
            obj_of,
        )
    }

    /// Reads a file inode's components into its layout.
    pub(super) fn fill_layout(tx: &Conn, mut i: Inode) -> StoreResult<Inode> {
        if let Some(l) = &mut i.layout {
            l.components = Self::components(tx, i.ino)?;
        }
        Ok(i)
    }

    /// How many names `i` has: its directory entries; a directory's `.` and its entry in its
    /// parent, plus each subdirectory's `..` (POSIX `st_nlink`).
    pub(super) fn links_in(tx: &Conn, i: &Inode) -> StoreResult<u32> {
        let count = |sql: &str| -> StoreResult<u32> {
            tx.query_row(sql, params![i.ino as i64], |r| r.get::<u32>(0))
        };
        match i.kind {
            FileKind::Dir => Ok(2 + count(
                "SELECT COUNT(*) FROM dirents d JOIN inodes c ON c.ino = d.ino
                 WHERE d.parent = $1 AND c.kind = 2",
            )?),
            _ => count("SELECT COUNT(*) FROM dirents WHERE ino = $1"),
        }
    }

    /// Removes the entry `parent`/`name` naming `i`, and `i` itself with its last name;
    /// whether it went.
    pub(super) fn drop_name(tx: &Conn, parent: u64, name: &str, i: &Inode) -> StoreResult<bool> {
        tx.execute(
            "DELETE FROM dirents WHERE parent = $1 AND name = $2",
            params![parent as i64, name],
        )?;
        let named = tx.query_row(
            "SELECT EXISTS(SELECT 1 FROM dirents WHERE ino = $1)",
            params![i.ino as i64],
            |r| r.get::<bool>(0),
        )?;
        if named {
            // One link fewer: a change of the inode (an unlink, a rename over a name).
            tx.execute(
                "UPDATE inodes SET ctime_us = $2 WHERE ino = $1",
                params![i.ino as i64, now_us() as i64],
            )?;
            return Ok(false);
        }
        Self::delete_inode(tx, i.ino)?;
        Ok(true)
    }

    /// Stores inode `i` (and its layout) inside `tx`. A file that changes owner takes its
    /// charge from the old owner's quota to the new one's (`i.charged`, `ChargeNeeded` when
    /// the new owner has a quota and it is `None`), with its file escrow.
    pub(super) fn update_inode_in(tx: &Conn, i: &Inode) -> StoreResult<()> {
        let before: Option<(u32, Option<i64>)> = tx.query_opt(
            "SELECT uid, charged FROM inodes WHERE ino = $1",
            params![i.ino as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if let Some((old_uid, old_charge)) = before.filter(|(u, _)| *u != i.uid) {
            if let Some(c) = old_charge {
                Self::move_usage(tx, old_uid, c as u64, 0)?;
            }
            let charge = match Self::quota_in(tx, i.uid)? {
                Some(_) if i.kind == FileKind::File => {
                    let c = i.charged.ok_or(StoreError::ChargeNeeded)?;
                    Self::move_usage(tx, i.uid, 0, c)?;
                    Some(db_bytes(c))
                }
                _ => None,
            };
            tx.execute(
                "UPDATE inodes SET charged = $2 WHERE ino = $1",
                params![i.ino as i64, charge],
            )?;
            tx.execute(
                "UPDATE escrows SET uid = $2 WHERE ino = $1",
                params![i.ino as i64, i.uid],
            )?;
        }
        let n = Self::counted(tx, i.ino, || {
            tx.execute(
                "UPDATE inodes SET mode = $2, uid = $3, gid = $4, mtime_us = $5, acv = $6, e2e = $7,
                     size = $8, dir_layout = $9, ctime_us = $10, atime_us = $11 WHERE ino = $1",
                params![
                    i.ino as i64,
                    i.mode,
                    i.uid,
                    i.gid,
                    i.mtime_us as i64,
                    i.acv as i64,
                    e2e_blob(&i.e2e),
                    i.size.map(|v| v as i64),
                    i.dir_layout,
                    i.ctime_us as i64,
                    i.atime_us as i64,
                ],
            )
        })?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        if let Some(l) = &i.layout {
            Self::set_layout(tx, i.ino, l, i.acv, i.size)?;
        }
        Ok(())
    }

    /// Points inode `ino` at `layout` (its version `acv`) and, for a file spread over several
    /// objects, `size`; the file counts follow.
    pub(super) fn set_layout(
        tx: &Conn,
        ino: u64,
        layout: &FileLayout,
        acv: u64,
        size: Option<u64>,
    ) -> StoreResult<()> {
        Self::counted(tx, ino, || Self::write_layout(tx, ino, layout, acv, size))
    }

    pub(super) fn write_layout(
        tx: &Conn,
        ino: u64,
        layout: &FileLayout,
        acv: u64,
        size: Option<u64>,
    ) -> StoreResult<()> {
        let n = tx.execute(
            "UPDATE inodes SET geometry = $2, layout_version = $3, stale = $4, acv = $5,
                     size = $6 WHERE ino = $1",
            params![
                ino as i64,
                layout.geometry,
                layout.version as i64,
                layout.stale as i64,
                acv as i64,
                size.map(|v| v as i64)
            ],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        tx.execute("DELETE FROM components WHERE ino = $1", params![ino as i64])?;
        for (idx, o) in layout.components.iter().enumerate() {
            tx.execute(
                "INSERT INTO components(ino, idx, drive, part, object) VALUES ($1, $2, $3, $4, $5)",
                params![
                    ino as i64,
                    idx as i64,
                    o.drive.0 as i64,
                    o.partition.0 as i64,
                    o.object.0 as i64
                ],
            )?;
        }
        Ok(())
    }

    /// The components of the staged upload whose first component is `key`.
    pub(super) fn staged_components(tx: &Conn, key: ObjRef) -> StoreResult<Vec<ObjRef>> {
        let rows = tx.query_map(
            "SELECT drive, part, object FROM staged_components
                 WHERE drive0 = $1 AND object0 = $2 ORDER BY idx",
            params![key.drive.0 as i64, key.object.0 as i64],
            obj_of,
        )?;
        let v: Vec<ObjRef> = rows;
        // A record staged before version 3 has its one object only in `staged`.
        Ok(if v.is_empty() { vec![key] } else { v })
    }

    pub(super) fn delete_staged(tx: &Conn, key: ObjRef) -> StoreResult<()> {
        for table in ["staged", "staged_components"] {
            let (d, o) = if table == "staged" {
                ("drive", "object")
            } else {
                ("drive0", "object0")
            };
            tx.execute(
                &format!("DELETE FROM {table} WHERE {d} = $1 AND {o} = $2"),
                params![key.drive.0 as i64, key.object.0 as i64],
            )?;
        }
        Ok(())
    }

    /// The staged upload with first component `key`.
    pub(super) fn staged_at(tx: &Conn, key: ObjRef) -> StoreResult<Option<Staged>> {
        let Some(mut s) = tx.query_opt(
            &format!("SELECT {STAGED_COLS} FROM staged WHERE drive = $1 AND object = $2"),
            params![key.drive.0 as i64, key.object.0 as i64],
            staged_of,
        )?
        else {
            return Ok(None);
        };
        s.layout.components = Self::staged_components(tx, key)?;
        Ok(Some(s))
    }

    /// The staged upload that `obj` is any component of.
    pub(super) fn staged_in(tx: &Conn, obj: ObjRef) -> StoreResult<Option<Staged>> {
        let key: Option<(i64, i64)> = tx.query_opt(
            "SELECT drive0, object0 FROM staged_components WHERE drive = $1 AND object = $2",
            params![obj.drive.0 as i64, obj.object.0 as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let key = match key {
            Some((d, o)) => ObjRef {
                drive: DriveId(d as u64),
                partition: obj.partition,
                object: ObjectId(o as u64),
            },
            None => obj,
        };
        Self::staged_at(tx, key)
    }

    pub(super) fn is_reserved(tx: &Conn, ino: u64) -> StoreResult<bool> {
        tx.query_row(
            "SELECT EXISTS(SELECT 1 FROM reserved WHERE ino = $1)",
            params![ino as i64],
            |r| r.get::<bool>(0),
        )
    }

    /// Deletes the reserved inode `ino` and its reservation (nothing if `ino` is not reserved,
    /// so a linked file can never be deleted this way).
    pub(super) fn drop_reserved(tx: &Conn, ino: u64) -> StoreResult<()> {
        if Self::is_reserved(tx, ino)? {
            Self::delete_inode(tx, ino)?;
        }
        tx.execute("DELETE FROM reserved WHERE ino = $1", params![ino as i64])?;
        Ok(())
    }

    /// Names the reserved inode `ino` `parent`/`name` and ends its reservation (the caller
    /// counts the file: [`PgStore::counted`]).
    pub(super) fn link_reservation(
        tx: &Conn,
        parent: u64,
        name: &str,
        ino: u64,
    ) -> StoreResult<()> {
        if !Self::is_reserved(tx, ino)? {
            return Err(StoreError::NotFound);
        }
        tx.execute(
            "INSERT INTO dirents(parent, name, ino) VALUES ($1, $2, $3)",
            params![parent as i64, name, ino as i64],
        )?;
        tx.execute(
            "UPDATE inodes SET parent = $2 WHERE ino = $1",
            params![ino as i64, parent as i64],
        )?;
        tx.execute("DELETE FROM reserved WHERE ino = $1", params![ino as i64])?;
        Self::touch_dir(tx, parent)
    }

    pub(super) fn reserve_inode_now(&mut self, parent: u64, inode: &Inode) -> StoreResult<u64> {
        let tx = self.db.transaction()?;
        Self::dir_inode(&tx, parent)?;
        // Above every inode there is and every file number handed out before: a file's number
        // is never reused, so neither a staged overwrite nor an object's fs_specific record can
        // ever name a later file. (SQLite alone would reuse the largest number once freed.)
        let high: Option<Vec<u8>> = tx.query_opt(
            "SELECT value FROM meta WHERE key = $1",
            params![FILE_INO_HIGH],
            |r| r.get(0),
        )?;
        let high = high
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map_or(0, u64::from_le_bytes);
        let max: i64 = tx.query_row("SELECT COALESCE(MAX(ino), 0) FROM inodes", &[], |r| {
            r.get(0)
        })?;
        let ino = high.max(max as u64) + 1;
        tx.execute(
            "INSERT INTO meta(key, value) VALUES ($1, $2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![FILE_INO_HIGH, ino.to_le_bytes().to_vec()],
        )
        ?;
        // Reserved first, so the inode is never counted as a file before it is linked.
        tx.execute(
            "INSERT INTO reserved(ino, created_ms) VALUES ($1, $2)",
            params![ino as i64, (inode.ctime_us / 1000) as i64],
        )?;
        Self::insert_inode(&tx, Some(ino), parent, inode)?;
        tx.commit()?;
        Ok(ino)
    }

    pub(super) fn put_staged_now(&mut self, s: &Staged) -> StoreResult<()> {
        let tx = self.db.transaction()?;
        let key = s.layout.key();
        // A record staged again under the same key replaces the old one.
        tx.execute(
            "DELETE FROM staged WHERE drive = $1 AND object = $2",
            params![key.drive.0 as i64, key.object.0 as i64],
        )?;
        tx.execute(
            &format!("INSERT INTO staged({STAGED_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"),
            params![
                key.drive.0 as i64,
                key.partition.0 as i64,
                key.object.0 as i64,
                s.acv as i64,
                s.uid,
                s.path,
                s.mode,
                s.created_ms as i64,
                s.ino as i64,
                s.new_file as i64,
                s.layout.geometry,
                s.base_version.map(|v| v as i64),
                s.layout.stale as i64,
                s.escrow.map(|e| e.uid),
                s.escrow.map(|e| db_bytes(e.base)),
                s.escrow.map(|e| db_bytes(e.end)),
                s.escrow.map(|e| db_bytes(e.expires_ms)),
            ],
        )
        ?;
        if let Some(e) = s.escrow {
            // The record's time is now; the row just written does not count twice.
            let held = e.held(s.created_ms);
            if held > 0 {
                Self::room(&tx, e.uid, s.created_ms, held, Skip::Staged(key))?;
            }
        }
        tx.execute(
            "DELETE FROM staged_components WHERE drive0 = $1 AND object0 = $2",
            params![key.drive.0 as i64, key.object.0 as i64],
        )?;
        for (idx, o) in s.layout.components.iter().enumerate() {
            tx.execute(
                "INSERT INTO staged_components(drive0, object0, idx, drive, part, object)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                params![
                    key.drive.0 as i64,
                    key.object.0 as i64,
                    idx as i64,
                    o.drive.0 as i64,
                    o.partition.0 as i64,
                    o.object.0 as i64
                ],
            )?;
        }
        if s.new_file {
            if !Self::is_reserved(&tx, s.ino)? {
                return Err(StoreError::NotFound);
            }
            Self::set_layout(&tx, s.ino, &s.layout, s.acv, None)?;
        }
        tx.commit()
    }

    /// Inserts an inodes row (at `ino`, or the next row id) and, for a file, its components;
    /// returns its number.
    pub(super) fn insert_inode(
        tx: &Conn,
        ino: Option<u64>,
        parent: u64,
        i: &Inode,
    ) -> StoreResult<u64> {
        let l = i.layout.as_ref();
        let ino = tx.query_row(
            "INSERT INTO inodes(ino, kind, mode, uid, gid, parent, ctime_us, mtime_us, acv, e2e,
                 geometry, layout_version, stale, size, dir_layout, target, charged, atime_us,
                 rdev)
             VALUES (COALESCE($1, (SELECT COALESCE(MAX(ino), 0) + 1 FROM inodes)), $2, $3, $4,
                 $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
             RETURNING ino",
            params![
                ino.map(|v| v as i64),
                i.kind as u8,
                i.mode,
                i.uid,
                i.gid,
                parent as i64,
                i.ctime_us as i64,
                i.mtime_us as i64,
                i.acv as i64,
                e2e_blob(&i.e2e),
                l.map(|l| l.geometry.clone()),
                l.map_or(1, |l| l.version as i64),
                l.map_or(0, |l| l.stale as i64),
                i.size.map(|v| v as i64),
                i.dir_layout,
                i.target,
                // A new file of a user with a quota starts charged nothing (it is empty).
                (i.kind == FileKind::File && Self::quota_in(tx, i.uid)?.is_some()).then_some(0i64),
                i.atime_us as i64,
                i.rdev as i64,
            ],
            |r| Ok(r.get::<i64>(0)? as u64),
        )?;
        Self::counted_insert(tx, ino)?;
        if let Some(l) = l {
            Self::set_layout(tx, ino, l, i.acv, i.size)?;
        }
        Ok(ino)
    }

    pub(super) fn abort_staged_now(&mut self, obj: ObjRef) -> StoreResult<Option<Staged>> {
        let tx = self.db.transaction()?;
        let Some(s) = Self::staged_at(&tx, obj)? else {
            return Ok(None);
        };
        Self::delete_staged(&tx, obj)?;
        if s.new_file {
            Self::drop_reserved(&tx, s.ino)?;
        }
        tx.commit()?;
        Ok(Some(s))
    }

    pub(super) fn quota_in(tx: &Conn, uid: u32) -> StoreResult<Option<Quota>> {
        tx.query_opt(
            "SELECT uid, limit_bytes, used_bytes FROM quotas WHERE uid = $1",
            params![uid],
            |r| {
                Ok(Quota {
                    uid: r.get(0)?,
                    limit_bytes: r.get::<i64>(1)? as u64,
                    used_bytes: r.get::<i64>(2)? as u64,
                })
            },
        )
    }

    /// Moves `uid`'s usage from a charge of `old` bytes to one of `new` (nothing without a
    /// quota).
    pub(super) fn move_usage(tx: &Conn, uid: u32, old: u64, new: u64) -> StoreResult<()> {
        if old == new {
            return Ok(());
        }
        let Some(q) = Self::quota_in(tx, uid)? else {
            return Ok(());
        };
        let used = q.used_bytes.saturating_sub(old).saturating_add(new);
        tx.execute(
            "UPDATE quotas SET used_bytes = $2 WHERE uid = $1",
            params![uid, db_bytes(used)],
        )?;
        Ok(())
    }

    /// A commit's quota (seed 002 §3.2): under the owner's quota the staged upload `s`'s
    /// `charge` (its size) becomes the file `target`'s, and growth its live escrow does not
    /// cover must fit now; `ChargeNeeded` when the caller did not measure it.
    pub(super) fn charge_staged(
        tx: &Conn,
        s: &Staged,
        target: &Inode,
        charge: Option<u64>,
        obj: ObjRef,
        now_ms: u64,
    ) -> StoreResult<()> {
        if Self::quota_in(tx, target.uid)?.is_none() {
            return Ok(());
        }
        let charge = charge.ok_or(StoreError::ChargeNeeded)?;
        let before = target.charged.unwrap_or(0);
        let covered = s
            .escrow
            .is_some_and(|e| e.held(now_ms) > 0 && charge <= e.end);
        if !covered && charge > before {
            Self::room(tx, target.uid, now_ms, charge - before, Skip::Staged(obj))?;
        }
        if target.charged.is_none() {
            tx.execute(
                "UPDATE inodes SET charged = 0 WHERE ino = $1",
                params![s.ino as i64],
            )?;
        }
        Self::charge_in(tx, s.ino, charge)
    }

    /// Sets file `ino`'s charge to `bytes`, its owner's usage moving by the difference;
    /// nothing for a file whose owner has no quota (no charge).
    pub(super) fn charge_in(tx: &Conn, ino: u64, bytes: u64) -> StoreResult<()> {
        let row: Option<(u32, Option<i64>)> = tx.query_opt(
            "SELECT uid, charged FROM inodes WHERE ino = $1",
            params![ino as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let Some((uid, Some(old))) = row else {
            return Ok(());
        };
        Self::move_usage(tx, uid, old as u64, bytes)?;
        tx.execute(
            "UPDATE inodes SET charged = $2 WHERE ino = $1",
            params![ino as i64, db_bytes(bytes)],
        )?;
        Ok(())
    }

    /// Bytes escrowed for `uid` at `now_ms`, leaving out the escrow `skip` names (the one
    /// being replaced).
    pub(super) fn escrowed_in(tx: &Conn, uid: u32, now_ms: u64, skip: Skip) -> StoreResult<u64> {
        let (sd, so, sf) = match skip {
            Skip::Nothing => (None, None, None),
            Skip::Staged(o) => (Some(o.drive.0 as i64), Some(o.object.0 as i64), None),
            Skip::File(ino) => (None, None, Some(ino as i64)),
        };
        let mut total = 0u64;
        {
            let rows = tx.query_map(
                    "SELECT escrow_end, escrow_base FROM staged WHERE escrow_uid = $1
                     AND escrow_expires_ms > $2 AND NOT (drive IS NOT DISTINCT FROM $3 AND object IS NOT DISTINCT FROM $4)", params![uid, db_bytes(now_ms), sd, so], |r| {
                    Ok((r.get::<i64>(0)? as u64, r.get::<i64>(1)? as u64))
                })?;
            for (end, base) in rows {
                total = total.saturating_add(end.saturating_sub(base));
            }
        }
        let rows = tx.query_map(
            "SELECT e.end_bytes, i.charged FROM escrows e LEFT JOIN inodes i ON i.ino = e.ino
                 WHERE e.uid = $1 AND NOT (e.ino IS NOT DISTINCT FROM $2)",
            params![uid, sf],
            |r| {
                Ok((
                    r.get::<i64>(0)? as u64,
                    r.get::<Option<i64>>(1)?.unwrap_or(0) as u64,
                ))
            },
        )?;
        for (end, charged) in rows {
            total = total.saturating_add(end.saturating_sub(charged));
        }
        Ok(total)
    }

    /// Whether `uid`'s quota has room for `asked` more bytes besides what it uses and every
    /// other escrow (`skip`) holds: `QuotaExceeded` otherwise. Always room without a quota.
    pub(super) fn room(
        tx: &Conn,
        uid: u32,
        now_ms: u64,
        asked: u64,
        skip: Skip,
    ) -> StoreResult<()> {
        let Some(q) = Self::quota_in(tx, uid)? else {
            return Ok(());
        };
        let escrowed = Self::escrowed_in(tx, uid, now_ms, skip)?;
        if crate::quota::fits(q.limit_bytes, q.used_bytes, escrowed, asked) {
            return Ok(());
        }
        Err(StoreError::QuotaExceeded {
            uid,
            limit: q.limit_bytes,
            used: q.used_bytes,
            escrowed,
            asked,
        })
    }

    pub(super) fn file_escrow_in(tx: &Conn, ino: u64) -> StoreResult<Option<FileEscrow>> {
        tx.query_opt(
            "SELECT ino, uid, end_bytes, expires_ms FROM escrows WHERE ino = $1",
            params![ino as i64],
            file_escrow_of,
        )
    }

    pub(super) fn dir_inode(tx: &Conn, ino: u64) -> StoreResult<Inode> {
        let i = tx
            .query_opt(
                &format!("SELECT {INODE_COLS} FROM inodes WHERE ino = $1"),
                params![ino as i64],
                inode_of,
            )?
            .ok_or(StoreError::NotFound)?;
        if i.kind != FileKind::Dir {
            return Err(StoreError::NotADirectory);
        }
        Ok(i)
    }

    pub(super) fn inode_in(tx: &Conn, ino: u64) -> StoreResult<Option<Inode>> {
        tx.query_opt(
            &format!("SELECT {INODE_COLS} FROM inodes WHERE ino = $1"),
            params![ino as i64],
            inode_of,
        )?
        .map(|i| Self::fill_layout(tx, i))
        .transpose()
    }

    pub(super) fn entry(tx: &Conn, parent: u64, name: &str) -> StoreResult<Option<Inode>> {
        tx.query_opt(
            &format!(
                "SELECT {} FROM dirents d JOIN inodes i ON i.ino = d.ino WHERE d.parent = $1 AND d.name = $2",
                INODE_COLS.split(", ").map(|c| format!("i.{}", c.trim())).collect::<Vec<_>>().join(", ")
            ),
            params![parent as i64, name],
            inode_of,
        )

        ?
        .map(|i| Self::fill_layout(tx, i))
        .transpose()
    }

    /// Deletes an inodes row and its components; its charge leaves its owner's usage, and its
    /// file escrow goes.
    pub(super) fn delete_inode(tx: &Conn, ino: u64) -> StoreResult<()> {
        Self::counted_delete(tx, ino)?;
        let charged: Option<(u32, Option<i64>)> = tx.query_opt(
            "SELECT uid, charged FROM inodes WHERE ino = $1",
            params![ino as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if let Some((uid, Some(c))) = charged {
            Self::move_usage(tx, uid, c as u64, 0)?;
        }
        tx.execute("DELETE FROM escrows WHERE ino = $1", params![ino as i64])?;
        tx.execute("DELETE FROM components WHERE ino = $1", params![ino as i64])?;
        Self::put_xattrs(tx, ino, &[])?;
        tx.execute("DELETE FROM inodes WHERE ino = $1", params![ino as i64])?;
        Ok(())
    }

    /// Makes `xattrs` the whole set of extended attributes of `ino`.
    pub(super) fn put_xattrs(tx: &Conn, ino: u64, xattrs: &[Xattr]) -> StoreResult<()> {
        tx.execute("DELETE FROM xattrs WHERE ino = $1", params![ino as i64])?;
        for x in xattrs {
            tx.execute(
                "INSERT INTO xattrs(ino, name, value) VALUES ($1, $2, $3)",
                params![ino as i64, x.name, x.value],
            )?;
        }
        Ok(())
    }

    pub(super) fn has_children(tx: &Conn, ino: u64) -> StoreResult<bool> {
        tx.query_row(
            "SELECT EXISTS(SELECT 1 FROM dirents WHERE parent = $1)",
            params![ino as i64],
            |r| r.get::<bool>(0),
        )
    }

    /// A directory's entries changed: its modify and change times are now.
    pub(super) fn touch_dir(tx: &Conn, ino: u64) -> StoreResult<()> {
        tx.execute(
            "UPDATE inodes SET mtime_us = $2, ctime_us = $2 WHERE ino = $1",
            params![ino as i64, now_us() as i64],
        )?;
        Ok(())
    }
}

/// The escrow a quota check leaves out: the one its caller is about to replace.
#[derive(Clone, Copy)]
pub(super) enum Skip {
    Nothing,
    Staged(ObjRef),
    File(u64),
}
