//! The key log in SQLite (schema 13; issue 21 §4): every change of users' keys, and of
//! directory policies' readers (schema 15), in the order the manager took them, as clients
//! read and hash it.
//!
//! ```text
//! key_log(idx INTEGER PK, uid INT, version INT NULL, entry BLOB, UNIQUE(uid, version))
//! ```
//! A policy's readers are logged with `uid` their setter and no `version` (rows without one
//! never conflict).
//! `idx` is the entry's place in the log plus one, given as one more than the entries there
//! are (never deleted), so entries are numbered without gaps; `entry` is the
//! [`KeyLogEntry`] encoding clients hash, so what the manager serves is what it stored.

use super::cached::Cached;
use super::{db, keys_of};
use crate::store::{StoreError, StoreResult};
use nasd_proto::manager::KeyLogEntry;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

/// The table of schema 13 (a new database and the migration both make it).
pub(super) const SCHEMA_KEY_LOG: &str = "
CREATE TABLE key_log(idx INTEGER PRIMARY KEY, uid INTEGER NOT NULL, version INTEGER NOT NULL,
    entry BLOB NOT NULL, UNIQUE(uid, version));
";

/// Schema 14 to 15: `version` may be NULL (a policy's readers), the table rebuilt as SQLite
/// changes a column's constraint, its rows and their places kept.
pub(super) const MIGRATE_14_TO_15: &str = "
CREATE TABLE key_log_15(idx INTEGER PRIMARY KEY, uid INTEGER NOT NULL, version INTEGER,
    entry BLOB NOT NULL, UNIQUE(uid, version));
INSERT INTO key_log_15(idx, uid, version, entry) SELECT idx, uid, version, entry FROM key_log;
DROP TABLE key_log;
ALTER TABLE key_log_15 RENAME TO key_log;
";

pub(super) fn migrate_14_to_15(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(MIGRATE_14_TO_15).map_err(db)
}

/// Schema 12 to 13: the per-user `user_key_log` becomes the one ordered `key_log`, in the
/// order the rows were written (a user's versions in order).
pub(super) fn migrate_12_to_13(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(SCHEMA_KEY_LOG).map_err(db)?;
    let old: Vec<(u32, Vec<u8>)> = {
        let mut st = tx
            .prepare("SELECT uid, keys FROM user_key_log ORDER BY rowid, uid, version")
            .map_err(db)?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)?
    };
    for (uid, blob) in old {
        // Rows schema 12 wrote decode; one that does not was never written by a manager.
        if let Some(keys) = keys_of(&blob) {
            append(tx, &KeyLogEntry::Keys { uid, keys })?;
        }
    }
    tx.execute_batch("DROP TABLE user_key_log;").map_err(db)
}

/// Entries in the log.
pub(super) fn len(c: &Connection) -> StoreResult<u64> {
    let n: i64 = c
        .row("SELECT COUNT(*) FROM key_log", [], |r| r.get(0))
        .map_err(db)?;
    Ok(n as u64)
}

/// Appends `entry` unless its user's version is logged already (the same keys set again
/// with only their sealed seed changed). An entry's encoding carries no sealed seed.
pub(super) fn append(tx: &Transaction<'_>, entry: &KeyLogEntry) -> StoreResult<()> {
    let next = len(tx)? + 1;
    tx.exec(
        "INSERT OR IGNORE INTO key_log(idx, uid, version, entry) VALUES (?1, ?2, ?3, ?4)",
        params![next as i64, entry.uid(), entry.version(), entry.to_bytes()],
    )
    .map_err(db)?;
    Ok(())
}

/// Up to `max` entries from place `from`.
pub(super) fn page(c: &Connection, from: u64, max: usize) -> StoreResult<Vec<KeyLogEntry>> {
    let mut st = c
        .prepare_cached("SELECT idx, entry FROM key_log WHERE idx > ?1 ORDER BY idx LIMIT ?2")
        .map_err(db)?;
    let rows = st
        .query_map(params![from.min(i64::MAX as u64) as i64, max as i64], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
        })
        .map_err(db)?;
    rows.map(|row| decoded(row.map_err(db)?)).collect()
}

/// A user's entries of their keys, in order.
pub(super) fn of_user(c: &Connection, uid: u32) -> StoreResult<Vec<KeyLogEntry>> {
    let mut st = c
        .prepare_cached(
            "SELECT idx, entry FROM key_log WHERE uid = ?1 AND version IS NOT NULL ORDER BY idx",
        )
        .map_err(db)?;
    let rows = st
        .query_map(params![uid], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
        })
        .map_err(db)?;
    rows.map(|row| decoded(row.map_err(db)?)).collect()
}

/// The latest version a user's log has (0: none).
pub(super) fn last_version(c: &Connection, uid: u32) -> StoreResult<u32> {
    let v: Option<i64> = c
        .row(
            "SELECT MAX(version) FROM key_log WHERE uid = ?1",
            params![uid],
            |r| r.get(0),
        )
        .optional()
        .map_err(db)?
        .flatten();
    Ok(v.unwrap_or(0) as u32)
}

/// A row's entry; one that does not decode is an error naming its place (never skipped: a
/// gap would change every root after it).
fn decoded((idx, blob): (i64, Vec<u8>)) -> StoreResult<KeyLogEntry> {
    KeyLogEntry::from_bytes(&blob)
        .map_err(|e| StoreError::Db(format!("key log entry {}: {e}", idx - 1)))
}
