//! The key log in PostgreSQL (issue 21 §4), as SQLite keeps it (`sqlite/keylog.rs`): every
//! change of users' keys, and of directory policies' readers (schema 3), in the order the
//! manager took them, as clients read and hash it.
//!
//! ```text
//! key_log(idx BIGINT PK, uid BIGINT, version BIGINT NULL, entry BYTEA, UNIQUE(uid, version))
//! ```
//! A policy's readers are logged with `uid` their setter and no `version` (rows without one
//! never conflict).
//! `idx` is the entry's place in the log plus one, given as one more than the entries there
//! are (never deleted), so entries are numbered without gaps; the serializable transaction
//! that appends makes two appends at once conflict rather than take one number. `entry` is the
//! [`KeyLogEntry`] encoding clients hash, so what the manager serves is what it stored.

use super::conn::{params, Conn};
use crate::store::{StoreError, StoreResult};
use nasd_proto::manager::KeyLogEntry;

/// Schema 2 to 3: `version` may be NULL (a policy's readers).
pub(super) fn migrate_2_to_3(tx: &Conn) -> StoreResult<()> {
    tx.execute_batch("ALTER TABLE key_log ALTER COLUMN version DROP NOT NULL;")
}

/// Entries in the log.
pub(super) fn len(c: &Conn) -> StoreResult<u64> {
    let n: i64 = c.query_row("SELECT COUNT(*) FROM key_log", &[], |r| r.get(0))?;
    Ok(n as u64)
}

/// Appends `entry` unless its user's version is logged already (the same keys set again
/// with only their sealed seed changed). An entry's encoding carries no sealed seed.
pub(super) fn append(tx: &Conn, entry: &KeyLogEntry) -> StoreResult<()> {
    let next = len(tx)? + 1;
    tx.execute(
        "INSERT INTO key_log(idx, uid, version, entry) VALUES ($1, $2, $3, $4)
         ON CONFLICT DO NOTHING",
        params![next as i64, entry.uid(), entry.version(), entry.to_bytes()],
    )?;
    Ok(())
}

/// Up to `max` entries from place `from`.
pub(super) fn page(c: &Conn, from: u64, max: usize) -> StoreResult<Vec<KeyLogEntry>> {
    let rows = c.query_map(
        "SELECT idx, entry FROM key_log WHERE idx > $1 ORDER BY idx LIMIT $2",
        params![
            from.min(i64::MAX as u64) as i64,
            max.min(i64::MAX as usize) as i64
        ],
        |r| Ok((r.get::<i64>(0)?, r.get::<Vec<u8>>(1)?)),
    )?;
    rows.into_iter().map(decoded).collect()
}

/// A user's entries of their keys, in order.
pub(super) fn of_user(c: &Conn, uid: u32) -> StoreResult<Vec<KeyLogEntry>> {
    let rows = c.query_map(
        "SELECT idx, entry FROM key_log WHERE uid = $1 AND version IS NOT NULL ORDER BY idx",
        params![uid],
        |r| Ok((r.get::<i64>(0)?, r.get::<Vec<u8>>(1)?)),
    )?;
    rows.into_iter().map(decoded).collect()
}

/// The latest version a user's log has (0: none).
pub(super) fn last_version(c: &Conn, uid: u32) -> StoreResult<u32> {
    let v: Option<u32> = c.query_row(
        "SELECT MAX(version) FROM key_log WHERE uid = $1",
        params![uid],
        |r| r.get(0),
    )?;
    Ok(v.unwrap_or(0))
}

/// A row's entry; one that does not decode is an error naming its place (never skipped: a
/// gap would change every root after it).
fn decoded((idx, blob): (i64, Vec<u8>)) -> StoreResult<KeyLogEntry> {
    KeyLogEntry::from_bytes(&blob)
        .map_err(|e| StoreError::Db(format!("key log entry {}: {e}", idx - 1)))
}
