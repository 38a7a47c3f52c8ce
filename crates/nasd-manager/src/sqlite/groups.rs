//! Groups' key pairs in SQLite (schema 14; issue 21 §5): a group's secret is wrapped to its
//! members only, a removed member's wrap goes with their membership and leaves the group due
//! a new key pair, and each new version keeps a *link* (the previous version's secret wrapped
//! to its public key) so the newest secret opens the older ones.
//!
//! ```text
//! groups(..., key_version INT, key_public BLOB NULL, key_rekey INT)   key_rekey: a member
//!        left since key_version was made
//! group_wraps(gid INT, uid INT, version INT, wrap BLOB, PK(gid, uid))
//! group_key_links(gid INT, version INT, link BLOB, PK(gid, version))   version's link
//! ```

use super::cached::Cached;
use super::db;
use crate::store::{GroupKeyPair, StoreError, StoreResult};
use rusqlite::{params, Connection, OptionalExtension, Transaction};

/// What schema 14 adds (a new database and the migration both run it).
pub(super) const SCHEMA_GROUP_KEYS: &str = "
ALTER TABLE groups ADD COLUMN key_rekey INTEGER NOT NULL DEFAULT 0;
CREATE TABLE group_key_links(gid INTEGER NOT NULL, version INTEGER NOT NULL,
    link BLOB NOT NULL, PRIMARY KEY(gid, version));
";

/// Wraps held by users who are not members of the group: admins held every group's
/// (issue 21 §5 ends that).
const DELETE_NON_MEMBER_WRAPS: &str = "
DELETE FROM group_wraps WHERE NOT EXISTS (
    SELECT 1 FROM members m WHERE m.gid = group_wraps.gid AND m.uid = group_wraps.uid)
  AND NOT EXISTS (
    SELECT 1 FROM users u WHERE u.uid = group_wraps.uid AND u.gid = group_wraps.gid);
";

/// Schema 13 to 14: the rekey mark and the links, and every wrap of a group's secret held by
/// a non-member (an admin's) deleted.
pub(super) fn migrate_13_to_14(tx: &Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(SCHEMA_GROUP_KEYS).map_err(db)?;
    let gone = tx.exec(DELETE_NON_MEMBER_WRAPS, []).map_err(db)?;
    if gone > 0 {
        tracing::info!("deleted {gone} wrap(s) of group secrets held by non-members (admins)");
    }
    Ok(())
}

pub(super) fn group_key(c: &Connection, gid: u32) -> StoreResult<GroupKeyPair> {
    let (version, public, rekey): (u32, Option<Vec<u8>>, bool) = c
        .row(
            "SELECT key_version, key_public, key_rekey FROM groups WHERE gid = ?1",
            params![gid],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    Ok(GroupKeyPair {
        version,
        public: public.and_then(|p| p.try_into().ok()),
        rekey,
    })
}

pub(super) fn set_group_key(
    tx: &Transaction<'_>,
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
        tx.exec(
            "UPDATE groups SET key_version = ?2, key_public = ?3, key_rekey = 0 WHERE gid = ?1",
            params![gid, version, public.to_vec()],
        )
        .map_err(db)?;
        tx.exec("DELETE FROM group_wraps WHERE gid = ?1", params![gid])
            .map_err(db)?;
        if let Some(link) = link {
            tx.exec(
                "INSERT OR REPLACE INTO group_key_links(gid, version, link) VALUES (?1, ?2, ?3)",
                params![gid, version, link],
            )
            .map_err(db)?;
        }
    }
    for (uid, wrap) in wraps {
        tx.exec(
            "INSERT OR REPLACE INTO group_wraps(gid, uid, version, wrap) VALUES (?1, ?2, ?3, ?4)",
            params![gid, uid, version, wrap],
        )
        .map_err(db)?;
    }
    Ok(())
}

pub(super) fn group_key_links(c: &Connection, gid: u32, max: usize) -> StoreResult<Vec<Vec<u8>>> {
    let mut st = c
        .prepare("SELECT link FROM group_key_links WHERE gid = ?1 ORDER BY version DESC LIMIT ?2")
        .map_err(db)?;
    let rows = st
        .query_map(params![gid, max.min(i64::MAX as usize) as i64], |r| {
            r.get(0)
        })
        .map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

pub(super) fn remove_member(tx: &Transaction<'_>, gid: u32, uid: u32) -> StoreResult<()> {
    let n = tx
        .exec(
            "DELETE FROM members WHERE gid = ?1 AND uid = ?2",
            params![gid, uid],
        )
        .map_err(db)?;
    if n == 0 {
        return Err(StoreError::NotFound);
    }
    tx.exec(
        "DELETE FROM group_wraps WHERE gid = ?1 AND uid = ?2",
        params![gid, uid],
    )
    .map_err(db)?;
    tx.exec(
        "UPDATE groups SET key_rekey = 1 WHERE gid = ?1 AND key_public IS NOT NULL",
        params![gid],
    )
    .map_err(db)?;
    Ok(())
}

/// What turns a schema-14 database back into a schema-13 one (for migration tests).
#[cfg(test)]
pub(super) const UNDO_14: &str = "
DROP TABLE group_key_links;
ALTER TABLE groups DROP COLUMN key_rekey;
";

#[cfg(test)]
mod tests {
    use super::super::SqliteStore;
    use super::UNDO_14;
    use crate::store::MetaStore;

    /// A version-13 database where an admin held a wrap of a group they are not in (as every
    /// admin did) opens as version 14 without it; members keep theirs.
    #[test]
    fn a_version_13_database_loses_the_wraps_of_admins_who_are_not_members() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v13.sqlite");
        let (g, root, member, admin_member) = {
            let mut s = SqliteStore::open(&p).unwrap();
            let admins = s.add_group("admin").unwrap();
            let users = s.add_group("users").unwrap();
            let g = s.add_group("staff").unwrap();
            let root = s.add_user("root", "phc", true, admins).unwrap();
            let member = s.add_user("ann", "phc", false, users).unwrap();
            let admin_member = s.add_user("boss", "phc", true, admins).unwrap();
            s.add_member(g, member).unwrap();
            s.add_member(g, admin_member).unwrap();
            let wraps = [
                (root, vec![1; 93]),
                (member, vec![2; 93]),
                (admin_member, vec![3; 93]),
            ];
            s.set_group_key(g, 1, &[7; 32], None, &wraps).unwrap();
            // The admins' primary group: wrapped to its members, who are admins.
            s.set_group_key(admins, 1, &[8; 32], None, &[(root, vec![4; 93])])
                .unwrap();
            s.db.execute_batch(UNDO_14).unwrap();
            s.put_meta("schema", &13u32.to_le_bytes()).unwrap();
            (g, root, member, admin_member)
        };
        let s = SqliteStore::open(&p).unwrap();
        assert_eq!(
            s.get_meta("schema").unwrap(),
            Some(super::super::SCHEMA_VERSION.to_le_bytes().to_vec())
        );
        assert_eq!(
            s.group_wrap(g, root).unwrap(),
            None,
            "a non-member admin's wrap"
        );
        assert_eq!(s.group_wrap(g, member).unwrap(), Some(vec![2; 93]));
        assert_eq!(s.group_wrap(g, admin_member).unwrap(), Some(vec![3; 93]));
        let admins = s.group_by_name("admin").unwrap().unwrap().gid;
        assert_eq!(s.group_wrap(admins, root).unwrap(), Some(vec![4; 93]));
        assert!(!s.group_key(g).unwrap().rekey);
        assert_eq!(s.group_key_links(g, 4).unwrap(), Vec::<Vec<u8>>::new());
    }
}
