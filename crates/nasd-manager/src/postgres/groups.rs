//! Groups' key pairs in PostgreSQL (schema 2; issue 21 §5), as SQLite keeps them
//! (`sqlite/groups.rs`): a group's secret is wrapped to its members only, a removed member's
//! wrap goes with their membership and leaves the group due a new key pair, and each new
//! version keeps a *link* (the previous version's secret wrapped to its public key).
//!
//! ```text
//! groups(..., key_version BIGINT, key_public BYTEA NULL, key_rekey BOOLEAN)
//! group_wraps(gid BIGINT, uid BIGINT, version BIGINT, wrap BYTEA, PK(gid, uid))
//! group_key_links(gid BIGINT, version BIGINT, link BYTEA, PK(gid, version))
//! ```

use super::conn::{params, Conn};
use crate::store::{GroupKeyPair, StoreError, StoreResult};

/// What schema 2 adds (a new database and the migration both run it).
pub(super) const SCHEMA_GROUP_KEYS: &str = "
ALTER TABLE groups ADD COLUMN key_rekey BOOLEAN NOT NULL DEFAULT false;
CREATE TABLE group_key_links(gid BIGINT NOT NULL, version BIGINT NOT NULL,
    link BYTEA NOT NULL, PRIMARY KEY(gid, version));
";

/// Schema 1 to 2: the rekey mark and the links, and every wrap of a group's secret held by a
/// non-member (an admin's: admins held every group's) deleted.
pub(super) fn migrate_1_to_2(tx: &Conn) -> StoreResult<()> {
    tx.execute_batch(SCHEMA_GROUP_KEYS)?;
    let gone = tx.execute(
        "DELETE FROM group_wraps w WHERE NOT EXISTS (
             SELECT 1 FROM members m WHERE m.gid = w.gid AND m.uid = w.uid)
           AND NOT EXISTS (SELECT 1 FROM users u WHERE u.uid = w.uid AND u.gid = w.gid)",
        &[],
    )?;
    if gone > 0 {
        tracing::info!("deleted {gone} wrap(s) of group secrets held by non-members (admins)");
    }
    Ok(())
}

pub(super) fn group_key(c: &Conn, gid: u32) -> StoreResult<GroupKeyPair> {
    let (version, public, rekey): (u32, Option<Vec<u8>>, bool) = c
        .query_opt(
            "SELECT key_version, key_public, key_rekey FROM groups WHERE gid = $1",
            params![gid],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?
        .ok_or(StoreError::NotFound)?;
    Ok(GroupKeyPair {
        version,
        public: public.and_then(|p| p.try_into().ok()),
        rekey,
    })
}

pub(super) fn set_group_key(
    tx: &Conn,
    gid: u32,
    version: u32,
    public: &[u8; 32],
    link: Option<&[u8]>,
    wraps: &[(u32, Vec<u8>)],
) -> StoreResult<()> {
    let has = group_key(tx, gid)?;
    if version < has.version || (version == has.version && has.public != Some(*public)) {
        return Err(StoreError::Conflict);
    }
    if version > has.version {
        tx.execute(
            "UPDATE groups SET key_version = $2, key_public = $3, key_rekey = false
             WHERE gid = $1",
            params![gid, version, public.to_vec()],
        )?;
        tx.execute("DELETE FROM group_wraps WHERE gid = $1", params![gid])?;
        if let Some(link) = link {
            tx.execute(
                "INSERT INTO group_key_links(gid, version, link) VALUES ($1, $2, $3)
                 ON CONFLICT(gid, version) DO UPDATE SET link = excluded.link",
                params![gid, version, link],
            )?;
        }
    }
    for (uid, wrap) in wraps {
        tx.execute(
            "INSERT INTO group_wraps(gid, uid, version, wrap) VALUES ($1, $2, $3, $4)
             ON CONFLICT(gid, uid) DO UPDATE SET version = excluded.version, wrap = excluded.wrap",
            params![gid, uid, version, wrap],
        )?;
    }
    Ok(())
}

pub(super) fn group_key_links(c: &Conn, gid: u32, max: usize) -> StoreResult<Vec<Vec<u8>>> {
    c.query_map(
        "SELECT link FROM group_key_links WHERE gid = $1 ORDER BY version DESC LIMIT $2",
        params![gid, max.min(i64::MAX as usize)],
        |r| r.get(0),
    )
}

pub(super) fn remove_member(tx: &Conn, gid: u32, uid: u32) -> StoreResult<()> {
    let n = tx.execute(
        "DELETE FROM members WHERE gid = $1 AND uid = $2",
        params![gid, uid],
    )?;
    if n == 0 {
        return Err(StoreError::NotFound);
    }
    tx.execute(
        "DELETE FROM group_wraps WHERE gid = $1 AND uid = $2",
        params![gid, uid],
    )?;
    tx.execute(
        "UPDATE groups SET key_rekey = true WHERE gid = $1 AND key_public IS NOT NULL",
        params![gid],
    )?;
    Ok(())
}
