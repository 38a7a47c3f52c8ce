//! The file counts `nasd status` reports, kept in the store as files change (schema 11), so a
//! status never walks the namespace.
//!
//! ```text
//! counters(name TEXT PK, value INT)   files, stale_files, stale_components, bytes, stale_bytes
//! drive_counts(drive INT PK, files INT, stale INT)   drives with a file component only
//! index inodes_stale ON inodes(ino) WHERE stale != 0
//! ```
//! What counts is a *linked file*: an `inodes` row with a geometry that `reserved` does not
//! list (an upload in flight counts once committed). Its share ([`Share`]) is one file; a stale
//! file when its stale mask is not zero; its stale components; its size when the manager
//! keeps one (`inodes.size`); and, per drive it has a component on, one file and that drive's
//! stale components.
//!
//! The four statements that change a file's share are wrapped here, each inside the
//! transaction that runs it: [`insert`](SqliteStore::counted_insert) of an inode,
//! [`delete`](SqliteStore::counted_delete), and any update of its layout, stale mask or size
//! or its reservation linked under a name ([`SqliteStore::counted`],
//! [`SqliteStore::counted_since`]): the share before is taken away and the share after added,
//! so the counters move in the same transaction as the file and stay right across any crash.
//! [`SqliteStore::recount_in`] counts the same things by walking every file with aggregate
//! queries, independently of this bookkeeping; the conformance suite checks that the two agree
//! after every kind of change, and `nasd status --recount` lets an operator check (and reset)
//! them on a live cluster.

use super::cached::Cached;
use super::{db, db_bytes, SqliteStore};
use crate::store::StoreResult;
use nasd_proto::manager::{DriveCount, FileCounts};
use nasd_proto::DriveId;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;

/// Tables and index of schema 11 (a new database and the migration both make them).
pub(super) const SCHEMA_COUNTS: &str = "
CREATE TABLE counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE drive_counts(drive INTEGER PRIMARY KEY, files INTEGER NOT NULL,
    stale INTEGER NOT NULL);
CREATE INDEX inodes_stale ON inodes(ino) WHERE stale != 0;
";

/// The rows of `counters`, in [`FileCounts`] order.
const COUNTERS: [&str; 5] = [
    "files",
    "stale_files",
    "stale_components",
    "bytes",
    "stale_bytes",
];

/// What one linked file adds to the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Share {
    stale_file: bool,
    stale_components: u64,
    bytes: u64,
    /// Each drive the file has a component on, with its stale components there.
    drives: BTreeMap<DriveId, u64>,
}

impl Share {
    /// The five global counters, in [`COUNTERS`] order.
    fn globals(&self) -> [i64; 5] {
        let bytes = db_bytes(self.bytes);
        [
            1,
            self.stale_file as i64,
            self.stale_components as i64,
            bytes,
            if self.stale_file { bytes } else { 0 },
        ]
    }
}

/// The share of inode `ino` now, or `None` when it is not a linked file.
pub(super) fn share_of(tx: &Connection, ino: u64) -> StoreResult<Option<Share>> {
    let row: Option<(i64, Option<i64>, bool, bool)> = tx
        .prepare_cached(
            "SELECT stale, size, geometry IS NOT NULL,
                 EXISTS(SELECT 1 FROM reserved r WHERE r.ino = inodes.ino)
             FROM inodes WHERE ino = ?1",
        )
        .map_err(db)?
        .query_row(params![ino as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()
        .map_err(db)?;
    let Some((stale, size, true, false)) = row else {
        return Ok(None);
    };
    let stale = stale as u64;
    let mut share = Share {
        stale_file: stale != 0,
        bytes: size.unwrap_or(0).max(0) as u64,
        ..Share::default()
    };
    let mut st = tx
        .prepare_cached("SELECT idx, drive FROM components WHERE ino = ?1")
        .map_err(db)?;
    let rows = st
        .query_map(params![ino as i64], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
        })
        .map_err(db)?;
    for row in rows {
        let (idx, drive) = row.map_err(db)?;
        let is_stale = (0..64).contains(&idx) && stale >> idx & 1 == 1;
        share.stale_components += is_stale as u64;
        *share.drives.entry(DriveId(drive as u64)).or_default() += is_stale as u64;
    }
    Ok(Some(share))
}

/// Moves the counters from `before` to `after` (either may be no file).
fn apply(tx: &Connection, before: Option<&Share>, after: Option<&Share>) -> StoreResult<()> {
    if before == after {
        return Ok(());
    }
    let of = |s: Option<&Share>| s.map_or([0; 5], Share::globals);
    let (b, a) = (of(before), of(after));
    for (k, name) in COUNTERS.iter().enumerate() {
        let delta = a[k] - b[k];
        if delta != 0 {
            tx.prepare_cached("UPDATE counters SET value = value + ?2 WHERE name = ?1")
                .map_err(db)?
                .execute(params![name, delta])
                .map_err(db)?;
        }
    }
    let mut per: BTreeMap<DriveId, (i64, i64)> = BTreeMap::new();
    for (s, sign) in [(before, -1i64), (after, 1)] {
        for (d, stale) in s.iter().flat_map(|s| &s.drives) {
            let e = per.entry(*d).or_default();
            e.0 += sign;
            e.1 += sign * *stale as i64;
        }
    }
    for (d, (files, stale)) in per.into_iter().filter(|(_, v)| *v != (0, 0)) {
        tx.prepare_cached(
            "INSERT INTO drive_counts(drive, files, stale) VALUES (?1, ?2, ?3)
             ON CONFLICT(drive) DO UPDATE SET files = files + excluded.files,
                 stale = stale + excluded.stale",
        )
        .map_err(db)?
        .execute(params![d.0 as i64, files, stale])
        .map_err(db)?;
        tx.prepare_cached("DELETE FROM drive_counts WHERE drive = ?1 AND files = 0 AND stale = 0")
            .map_err(db)?
            .execute(params![d.0 as i64])
            .map_err(db)?;
    }
    Ok(())
}

/// Sets the counters to `c` (a new database, a migration, a recount that fixes them).
fn put(tx: &Connection, c: &FileCounts) -> StoreResult<()> {
    let values = [
        c.files,
        c.stale_files,
        c.stale_components,
        c.bytes,
        c.stale_bytes,
    ];
    for (name, v) in COUNTERS.iter().zip(values) {
        tx.exec(
            "INSERT OR REPLACE INTO counters(name, value) VALUES (?1, ?2)",
            params![name, db_bytes(v)],
        )
        .map_err(db)?;
    }
    tx.exec("DELETE FROM drive_counts", []).map_err(db)?;
    for d in &c.drives {
        tx.exec(
            "INSERT INTO drive_counts(drive, files, stale) VALUES (?1, ?2, ?3)",
            params![d.drive.0 as i64, db_bytes(d.files), db_bytes(d.stale)],
        )
        .map_err(db)?;
    }
    Ok(())
}

/// Schema 10 to 11: the counters, set from what the database holds.
pub(super) fn migrate_10_to_11(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(SCHEMA_COUNTS).map_err(db)?;
    put(tx, &SqliteStore::recount_in(tx)?)
}

/// A new database's counters: nothing counted yet.
pub(super) fn create(tx: &Connection) -> StoreResult<()> {
    tx.execute_batch(SCHEMA_COUNTS).map_err(db)?;
    put(tx, &FileCounts::default())
}

/// The inodes that are linked files, as an SQL condition on `i`.
const LINKED_FILE: &str = "i.geometry IS NOT NULL AND i.ino NOT IN (SELECT ino FROM reserved)";

impl SqliteStore {
    /// Runs `f`, which changes inode `ino`'s layout, stale mask or size, and moves the
    /// counters by the difference it made to the file's share.
    pub(super) fn counted<T>(
        tx: &Connection,
        ino: u64,
        f: impl FnOnce() -> StoreResult<T>,
    ) -> StoreResult<T> {
        let before = share_of(tx, ino)?;
        let v = f()?;
        Self::counted_since(tx, ino, before)?;
        Ok(v)
    }

    /// Moves the counters by what changed in inode `ino`'s share since it was `before` (a
    /// change over several statements, with other work between them).
    pub(super) fn counted_since(
        tx: &Connection,
        ino: u64,
        before: Option<Share>,
    ) -> StoreResult<()> {
        apply(tx, before.as_ref(), share_of(tx, ino)?.as_ref())
    }

    /// Counts inode `ino`, just inserted.
    pub(super) fn counted_insert(tx: &Connection, ino: u64) -> StoreResult<()> {
        apply(tx, None, share_of(tx, ino)?.as_ref())
    }

    /// Takes inode `ino` out of the counts, before it is deleted.
    pub(super) fn counted_delete(tx: &Connection, ino: u64) -> StoreResult<()> {
        apply(tx, share_of(tx, ino)?.as_ref(), None)
    }

    /// The counters as kept.
    pub(super) fn counts_in(tx: &Connection) -> StoreResult<FileCounts> {
        let mut v = [0u64; 5];
        for (k, name) in COUNTERS.iter().enumerate() {
            v[k] = tx
                .prepare_cached("SELECT value FROM counters WHERE name = ?1")
                .map_err(db)?
                .query_row(params![name], |r| r.get::<_, i64>(0))
                .optional()
                .map_err(db)?
                .unwrap_or(0)
                .max(0) as u64;
        }
        let mut st = tx
            .prepare_cached("SELECT drive, files, stale FROM drive_counts")
            .map_err(db)?;
        let mut drives = st
            .query_map([], |r| {
                Ok(DriveCount {
                    drive: DriveId(r.get::<_, i64>(0)? as u64),
                    files: r.get::<_, i64>(1)?.max(0) as u64,
                    stale: r.get::<_, i64>(2)?.max(0) as u64,
                })
            })
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db)?;
        // In drive order (SQLite orders the ids' signed bit-casts).
        drives.sort_by_key(|d| d.drive);
        Ok(FileCounts {
            files: v[0],
            stale_files: v[1],
            stale_components: v[2],
            bytes: v[3],
            stale_bytes: v[4],
            drives,
        })
    }

    /// The same counts found by walking every file (aggregate queries over `inodes` and
    /// `components`), without the bookkeeping above.
    pub(super) fn recount_in(tx: &Connection) -> StoreResult<FileCounts> {
        let (files, stale_files, bytes, stale_bytes): (i64, i64, i64, i64) = tx
            .row(
                &format!(
                    "SELECT COUNT(*), COALESCE(SUM(i.stale != 0), 0), COALESCE(SUM(i.size), 0),
                         COALESCE(SUM(CASE WHEN i.stale != 0 THEN COALESCE(i.size, 0) END), 0)
                     FROM inodes i WHERE {LINKED_FILE}"
                ),
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .map_err(db)?;
        let mut st = tx
            .prepare(&format!(
                "SELECT c.drive, COUNT(DISTINCT c.ino), SUM((i.stale >> c.idx) & 1)
                 FROM components c JOIN inodes i ON i.ino = c.ino
                 WHERE {LINKED_FILE} GROUP BY c.drive"
            ))
            .map_err(db)?;
        let mut drives = st
            .query_map([], |r| {
                Ok(DriveCount {
                    drive: DriveId(r.get::<_, i64>(0)? as u64),
                    files: r.get::<_, i64>(1)? as u64,
                    stale: r.get::<_, i64>(2)? as u64,
                })
            })
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db)?;
        drives.sort_by_key(|d| d.drive);
        Ok(FileCounts {
            files: files as u64,
            stale_files: stale_files as u64,
            stale_components: drives.iter().map(|d| d.stale).sum(),
            bytes: bytes as u64,
            stale_bytes: stale_bytes as u64,
            drives,
        })
    }

    /// [`SqliteStore::recount_in`] in one transaction; with `fix`, the counters become it.
    pub(super) fn recount_now(&mut self, fix: bool) -> StoreResult<FileCounts> {
        let tx = self.db.transaction().map_err(db)?;
        let counted = Self::recount_in(&tx)?;
        if fix && Self::counts_in(&tx)? != counted {
            put(&tx, &counted)?;
        }
        tx.commit().map_err(db)?;
        Ok(counted)
    }

    /// Files with a stale component or a component on a drive in `down`: how many, and the
    /// first `limit` inodes (stale ones first). With no drive down this is a counter; with
    /// one, counters and the stale files; with more, the components of the down drives are
    /// counted through their index (work in proportion to the files on those drives).
    pub(super) fn degraded_in(
        tx: &Connection,
        down: &[DriveId],
        limit: usize,
    ) -> StoreResult<(u64, Vec<u64>)> {
        let kept = Self::counts_in(tx)?;
        let list = |sql: &str, p: &[&dyn rusqlite::ToSql]| -> StoreResult<Vec<u64>> {
            let mut st = tx.prepare_cached(sql).map_err(db)?;
            let rows = st
                .query_map(p, |r| Ok(r.get::<_, i64>(0)? as u64))
                .map_err(db)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(db)
        };
        let lim = limit.min(i64::MAX as usize) as i64;
        let mut inos = list(
            &format!(
                "SELECT i.ino FROM inodes i WHERE i.stale != 0 AND {LINKED_FILE}
                 ORDER BY i.ino LIMIT ?1"
            ),
            &[&lim],
        )?;
        let count = match down {
            [] => kept.stale_files,
            [d] => {
                let on = kept
                    .drives
                    .iter()
                    .find(|c| c.drive == *d)
                    .map_or(0, |c| c.files);
                let both = list(
                    &format!(
                        "SELECT COUNT(DISTINCT i.ino) FROM inodes i
                         JOIN components c ON c.ino = i.ino
                         WHERE i.stale != 0 AND c.drive = ?1 AND {LINKED_FILE}"
                    ),
                    &[&(d.0 as i64)],
                )?;
                (on + kept.stale_files).saturating_sub(both.first().copied().unwrap_or(0))
            }
            many => {
                let set = drive_set(many);
                list(
                    &format!(
                        "SELECT COUNT(*) FROM (SELECT c.ino AS ino FROM components c
                             WHERE c.drive IN ({set})
                             UNION SELECT ino FROM inodes WHERE stale != 0) u
                         JOIN inodes i ON i.ino = u.ino WHERE {LINKED_FILE}"
                    ),
                    &[],
                )?
                .first()
                .copied()
                .unwrap_or(0)
            }
        };
        for d in down {
            if inos.len() >= limit {
                break;
            }
            let more = list(
                &format!(
                    "SELECT DISTINCT c.ino FROM components c JOIN inodes i ON i.ino = c.ino
                     WHERE c.drive = ?1 AND {LINKED_FILE} LIMIT ?2"
                ),
                &[&(d.0 as i64), &lim],
            )?;
            for ino in more {
                if inos.len() < limit && !inos.contains(&ino) {
                    inos.push(ino);
                }
            }
        }
        Ok((count, inos))
    }

    /// Linked files with a stale component, in inode order after `after`, at most `limit`.
    pub(super) fn stale_files_in(
        tx: &Connection,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<u64>> {
        let mut st = tx
            .prepare_cached(&format!(
                "SELECT i.ino FROM inodes i WHERE i.stale != 0 AND i.ino > ?1 AND {LINKED_FILE}
                 ORDER BY i.ino LIMIT ?2"
            ))
            .map_err(db)?;
        let rows = st
            .query_map(
                params![after as i64, limit.min(i64::MAX as usize) as i64],
                |r| Ok(r.get::<_, i64>(0)? as u64),
            )
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }
}

/// Drive ids as an SQL list (numbers only: nothing from outside reaches the text).
fn drive_set(drives: &[DriveId]) -> String {
    drives
        .iter()
        .map(|d| (d.0 as i64).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
