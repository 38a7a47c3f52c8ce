//! The embedded metadata store: one SQLite database in WAL mode with `synchronous=FULL`, so a
//! committed transaction survives power loss; every namespace change is one transaction. The
//! records of an upload in flight (inode reservations, staged uploads, aborts) are committed
//! without an fsync of their own ([`SqliteStore::relaxed`]): a power failure may lose them,
//! which only fails that upload's commit; the commit that makes a name visible is durable.
//!
//! Schema version 15 (the `meta` row `schema` holds it):
//! ```text
//! meta(key TEXT PK, value BLOB)
//! users(uid INTEGER PK, name TEXT UNIQUE, phc TEXT, admin INT, gid INT, gateway INT,
//!        e2e_keys BLOB NULL)   phc: the credential verifier (an OPAQUE password file, an
//!        enrollment code's hash, an Ed25519 key, or a legacy Argon2id hash; `users.rs`);
//!        e2e_keys: the user's current public keys, their version and change signature, and
//!        sealed seed (UserKeys)
//! key_log(idx INTEGER PK, uid INT, version INT NULL, entry BLOB, UNIQUE(uid, version))
//!        every change of users' keys and of policies' readers, in order (KeyLogEntry;
//!        [`keylog`])
//! groups(gid INTEGER PK, name TEXT UNIQUE, key_version INT, key_public BLOB NULL,
//!        key_rekey INT)   key_rekey: a member left since key_version was made
//! group_wraps(gid INT, uid INT, version INT, wrap BLOB, PK(gid, uid))   the group's secret
//!        of `version` wrapped to member `uid` (members only)
//! group_key_links(gid INT, version INT, link BLOB, PK(gid, version))   version - 1's secret
//!        wrapped to version's public key ([`groups`])
//! members(gid INT, uid INT, PK(gid, uid))
//! inodes(ino INTEGER PK, kind INT, mode INT, uid INT, gid INT, parent INT, ctime_us INT,
//!        mtime_us INT, acv INT, e2e BLOB NULL, geometry TEXT NULL, layout_version INT,
//!        stale INT, size INT NULL, dir_layout TEXT NULL, target TEXT NULL,
//!        charged INT NULL)   charged: a file's bytes counted against its owner's quota;
//!        e2e: an encrypted file's end-to-end state (E2eState encoding)
//! xattrs(ino INT, name TEXT, value BLOB, PK(ino, name))
//! components(ino INT, idx INT, drive INT, part INT, object INT, PK(ino, idx))
//!        index components_drive(drive, object)
//! dirents(parent INT, name TEXT, ino INT, PK(parent, name))   index dirents_ino(ino)
//! drives(drive INT PK, addr TEXT, suite INT, drive_key BLOB, part INT, part_key BLOB,
//!        working_key BLOB, rotated_ms INT)   keys of 32 bytes, or 48 sealed under the
//!        passphrase whose header is the `meta` row `key_seal` (`store::stored_drive_key`)
//! sessions(token_hash BLOB PK, uid INT, expires_ms INT, via INT NULL)
//! s3_keys(access_key TEXT PK, uid INT, secret TEXT, created_ms INT)
//! staged(drive INT, part INT, object INT, acv INT, uid INT, path TEXT, mode INT,
//!        created_ms INT, ino INT NULL, new_file INT, geometry TEXT, base_version INT NULL,
//!        stale INT, escrow_uid INT NULL, escrow_base INT NULL, escrow_end INT NULL,
//!        escrow_expires_ms INT NULL, PK(drive, object))
//! staged_components(drive0 INT, object0 INT, idx INT, drive INT, part INT, object INT,
//!        PK(drive0, object0, idx))   index staged_components_obj(drive, object)
//! reserved(ino INTEGER PK, created_ms INT)
//! revocations(ino INTEGER PK)   a revocation stored but maybe not yet on every drive
//! quotas(uid INTEGER PK, limit_bytes INT, used_bytes INT)   used = SUM(inodes.charged)
//! escrows(ino INTEGER PK, uid INT, end_bytes INT, expires_ms INT)   a committed file's
//!        objects may grow to end_bytes until expires_ms, and are settled after
//! counters(name TEXT PK, value INT), drive_counts(drive INT PK, files INT, stale INT)
//!        the file counts `nasd status` shows, kept as files change ([`counts`])
//!        index inodes_stale ON inodes(ino) WHERE stale != 0
//! ```
//! A file's layout is its `inodes` row (geometry, version, stale bits, size) and its
//! `components` rows; a staged upload is keyed by its first component, and
//! `staged_components` lists all of them, so any component finds its upload.
//! `reserved` lists inodes of new files being uploaded: rows of `inodes` that no `dirents` row
//! names yet. A file's inode number is above every number a file had before (the `meta` row
//! `file_ino_high`), so it is never reused.
//!
//! Migrations are numbered ([`MIGRATIONS`]): opening a database of version `v` runs every
//! migration from `v` on, each in one transaction that also records the version it reaches.
//! Version 2 added `staged.ino`, `staged.new_file` and `reserved` (version-1 staged rows keep a
//! NULL `ino`, so they can only expire); version 3 moved a file's object into `components`
//! and added layouts, sizes and directory layouts; version 4 `revocations`; version 6
//! symbolic and hard links, gateways and S3 keys; version 7 extended attributes; version 8
//! quotas (`quotas`, `escrows`, `inodes.charged`, the `staged.escrow_*` columns). No user has
//! a quota after the migration: usage is counted when one is first set. Version 9 end-to-end
//! protection: `inodes.root` (never written) became `inodes.e2e`, users gained `e2e_keys`,
//! groups a key pair, and `group_wraps` holds its secret wrapped to members. Version 10
//! (issue 20): `inodes.atime_us` (first the modify time) and `inodes.rdev`; special files
//! (FIFOs, sockets, devices) are inodes of their kinds with neither layout nor target.
//! Version 11 the file counters (`counters`, `drive_counts`, set from the files there are) and
//! the index of stale files.
//! Version 12 signed
//! key changes: `e2e_keys` gained the keys' version and signature (keys stored before are
//! version 1 with an all-zero signature: made before key changes were signed) and
//! `user_key_log` the history; credentials may now be OPAQUE password files or enrollment
//! codes (the Argon2id hashes stay until each user's next login moves them over).
//! Version 13 the key log (issue 21 §4): `user_key_log` became the one ordered `key_log`.
//! Version 14 groups' secrets for members only (issue 21 §5): `groups.key_rekey`,
//! `group_key_links`, and every wrap held by a non-member (admins held every group's) deleted.
//! 64-bit ids are stored as SQLite's signed INTEGER by bit-cast.

use crate::store::*;
use cached::Cached;
use nasd_proto::manager::{
    E2eCommit, E2eState, FileKind, KeyLogEntry, PolicyReaders, UserKeys, Xattr,
};
use nasd_proto::{DriveId, ObjectId, PartitionId, Suite};
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::collections::HashMap;
use std::path::Path;

mod cached;
mod counts;
mod groups;
mod keylog;

pub const SCHEMA_VERSION: u32 = 15;
/// The `meta` key of the largest inode number given to a file (u64, little-endian).
const FILE_INO_HIGH: &str = "file_ino_high";

pub struct SqliteStore {
    db: Connection,
    /// Seals the drives' keys when set (`MetaStore::set_key_seal`).
    seal: Option<std::sync::Arc<nasd_crypto::seal::KeySeal>>,
}

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Db(e.to_string())
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS users(uid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
    phc TEXT NOT NULL, admin INTEGER NOT NULL, gid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS groups(gid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS members(gid INTEGER NOT NULL, uid INTEGER NOT NULL,
    PRIMARY KEY(gid, uid));
CREATE TABLE IF NOT EXISTS dirents(parent INTEGER NOT NULL, name TEXT NOT NULL,
    ino INTEGER NOT NULL, PRIMARY KEY(parent, name));
CREATE TABLE IF NOT EXISTS drives(drive INTEGER PRIMARY KEY, addr TEXT NOT NULL,
    suite INTEGER NOT NULL, drive_key BLOB NOT NULL, part INTEGER NOT NULL,
    part_key BLOB NOT NULL, working_key BLOB NOT NULL, rotated_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sessions(token_hash BLOB PRIMARY KEY, uid INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS reserved(ino INTEGER PRIMARY KEY, created_ms INTEGER NOT NULL);
";

/// Tables as the current version has them, for a new database (an old one gets them by
/// migration).
const SCHEMA_NEW: &str = "
CREATE TABLE inodes(ino INTEGER PRIMARY KEY, kind INTEGER NOT NULL,
    mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL, parent INTEGER NOT NULL,
    ctime_us INTEGER NOT NULL, mtime_us INTEGER NOT NULL, acv INTEGER NOT NULL, e2e BLOB,
    geometry TEXT, layout_version INTEGER NOT NULL DEFAULT 1,
    stale INTEGER NOT NULL DEFAULT 0, size INTEGER, dir_layout TEXT, target TEXT,
    charged INTEGER, atime_us INTEGER NOT NULL DEFAULT 0, rdev INTEGER NOT NULL DEFAULT 0);
CREATE INDEX dirents_ino ON dirents(ino);
ALTER TABLE users ADD COLUMN gateway INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN via INTEGER;
CREATE TABLE s3_keys(access_key TEXT PRIMARY KEY, uid INTEGER NOT NULL,
    secret TEXT NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE staged(drive INTEGER NOT NULL, part INTEGER NOT NULL,
    object INTEGER NOT NULL, acv INTEGER NOT NULL, uid INTEGER NOT NULL, path TEXT NOT NULL,
    mode INTEGER NOT NULL, created_ms INTEGER NOT NULL, ino INTEGER,
    new_file INTEGER NOT NULL DEFAULT 0, geometry TEXT NOT NULL DEFAULT 'single',
    base_version INTEGER, stale INTEGER NOT NULL DEFAULT 0, escrow_uid INTEGER,
    escrow_base INTEGER, escrow_end INTEGER, escrow_expires_ms INTEGER,
    PRIMARY KEY(drive, object));
CREATE TABLE revocations(ino INTEGER PRIMARY KEY);
CREATE TABLE xattrs(ino INTEGER NOT NULL, name TEXT NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY(ino, name));
CREATE TABLE quotas(uid INTEGER PRIMARY KEY, limit_bytes INTEGER NOT NULL,
    used_bytes INTEGER NOT NULL);
CREATE TABLE escrows(ino INTEGER PRIMARY KEY, uid INTEGER NOT NULL,
    end_bytes INTEGER NOT NULL, expires_ms INTEGER NOT NULL);
ALTER TABLE users ADD COLUMN e2e_keys BLOB;
ALTER TABLE groups ADD COLUMN key_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE groups ADD COLUMN key_public BLOB;
CREATE TABLE group_wraps(gid INTEGER NOT NULL, uid INTEGER NOT NULL,
    version INTEGER NOT NULL, wrap BLOB NOT NULL, PRIMARY KEY(gid, uid));
";

/// What version 3 adds to any database (new, or migrated from 2).
const SCHEMA_V3_TABLES: &str = "
CREATE TABLE IF NOT EXISTS components(ino INTEGER NOT NULL, idx INTEGER NOT NULL,
    drive INTEGER NOT NULL, part INTEGER NOT NULL, object INTEGER NOT NULL,
    PRIMARY KEY(ino, idx));
CREATE INDEX IF NOT EXISTS components_drive ON components(drive, object);
CREATE TABLE IF NOT EXISTS staged_components(drive0 INTEGER NOT NULL, object0 INTEGER NOT NULL,
    idx INTEGER NOT NULL, drive INTEGER NOT NULL, part INTEGER NOT NULL,
    object INTEGER NOT NULL, PRIMARY KEY(drive0, object0, idx));
CREATE INDEX IF NOT EXISTS staged_components_obj ON staged_components(drive, object);
";

/// The migration from version `i + 1` to `i + 2` is `MIGRATIONS[i]`.
type Migration = fn(&rusqlite::Transaction<'_>) -> StoreResult<()>;
const MIGRATIONS: &[Migration] = &[
    migrate_1_to_2,
    migrate_2_to_3,
    migrate_3_to_4,
    migrate_4_to_5,
    migrate_5_to_6,
    migrate_6_to_7,
    migrate_7_to_8,
    migrate_8_to_9,
    migrate_9_to_10,
    counts::migrate_10_to_11,
    migrate_11_to_12,
    keylog::migrate_12_to_13,
    groups::migrate_13_to_14,
    keylog::migrate_14_to_15,
];
const _: () = assert!(MIGRATIONS.len() + 1 == SCHEMA_VERSION as usize);

const STAGED_COLS: &str = "drive, part, object, acv, uid, path, mode, created_ms, ino, new_file, \
     geometry, base_version, stale, escrow_uid, escrow_base, escrow_end, escrow_expires_ms";

/// A staged row; its components are read separately ([`SqliteStore::staged_components`]).
fn staged_of(r: &Row<'_>) -> rusqlite::Result<Staged> {
    Ok(Staged {
        layout: FileLayout {
            version: 1,
            geometry: r.get(10)?,
            components: vec![ObjRef {
                drive: DriveId(r.get::<_, i64>(0)? as u64),
                partition: PartitionId(r.get::<_, i64>(1)? as u16),
                object: ObjectId(r.get::<_, i64>(2)? as u64),
            }],
            stale: r.get::<_, i64>(12)? as u64,
        },
        acv: r.get::<_, i64>(3)? as u64,
        uid: r.get(4)?,
        path: r.get(5)?,
        mode: r.get(6)?,
        created_ms: r.get::<_, i64>(7)? as u64,
        ino: r.get::<_, Option<i64>>(8)?.unwrap_or(0) as u64,
        new_file: r.get::<_, i64>(9)? != 0,
        base_version: r.get::<_, Option<i64>>(11)?.map(|v| v as u64),
        escrow: match r.get::<_, Option<u32>>(13)? {
            None => None,
            Some(uid) => Some(StagedEscrow {
                uid,
                base: r.get::<_, i64>(14)? as u64,
                end: r.get::<_, i64>(15)? as u64,
                expires_ms: r.get::<_, i64>(16)? as u64,
            }),
        },
    })
}

const INODE_COLS: &str = "ino, kind, mode, uid, gid, parent, ctime_us, mtime_us, acv, e2e, \
     geometry, layout_version, stale, size, dir_layout, target, charged, atime_us, rdev";

/// An inodes row, its columns from `at` on; a file's components are read separately
/// ([`SqliteStore::fill_layout`]).
fn inode_at(r: &Row<'_>, at: usize) -> rusqlite::Result<Inode> {
    let kind: u8 = r.get(at + 1)?;
    let e2e: Option<Vec<u8>> = r.get(at + 9)?;
    let geometry: Option<String> = r.get(at + 10)?;
    Ok(Inode {
        ino: r.get::<_, i64>(at)? as u64,
        kind: FileKind::from_u8(kind).unwrap_or(FileKind::File),
        mode: r.get(at + 2)?,
        uid: r.get(at + 3)?,
        gid: r.get(at + 4)?,
        parent: r.get::<_, i64>(at + 5)? as u64,
        ctime_us: r.get::<_, i64>(at + 6)? as u64,
        mtime_us: r.get::<_, i64>(at + 7)? as u64,
        acv: r.get::<_, i64>(at + 8)? as u64,
        e2e: e2e_of(e2e),
        layout: geometry
            .map(|geometry| -> rusqlite::Result<FileLayout> {
                Ok(FileLayout {
                    version: r.get::<_, i64>(at + 11)? as u64,
                    geometry,
                    components: vec![],
                    stale: r.get::<_, i64>(at + 12)? as u64,
                })
            })
            .transpose()?,
        size: r.get::<_, Option<i64>>(at + 13)?.map(|v| v as u64),
        dir_layout: r.get(at + 14)?,
        target: r.get(at + 15)?,
        charged: r.get::<_, Option<i64>>(at + 16)?.map(|v| v as u64),
        atime_us: r.get::<_, i64>(at + 17)? as u64,
        rdev: r.get::<_, i64>(at + 18)? as u64,
    })
}

fn inode_of(r: &Row<'_>) -> rusqlite::Result<Inode> {
    inode_at(r, 0)
}

/// A `(drive, part, object)` row.
fn obj_of(r: &Row<'_>) -> rusqlite::Result<ObjRef> {
    Ok(ObjRef {
        drive: DriveId(r.get::<_, i64>(0)? as u64),
        partition: PartitionId(r.get::<_, i64>(1)? as u16),
        object: ObjectId(r.get::<_, i64>(2)? as u64),
    })
}

/// Schema 1 to 2: the staged table gains `ino` and `new_file` (`reserved` was created by
/// [`SCHEMA`] already). A version-1 database may lack `staged` altogether (it was added within
/// version 1); then it is made here as version 2 had it. Files made before version 2 took
/// SQLite's next row id; new ones start above them.
fn migrate_1_to_2(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS staged(drive INTEGER NOT NULL, part INTEGER NOT NULL,
             object INTEGER NOT NULL, acv INTEGER NOT NULL, uid INTEGER NOT NULL,
             path TEXT NOT NULL, mode INTEGER NOT NULL, created_ms INTEGER NOT NULL,
             PRIMARY KEY(drive, object));",
    )
    .map_err(db)?;
    let cols = columns(tx, "staged")?;
    if !cols.iter().any(|c| c == "ino") {
        tx.exec("ALTER TABLE staged ADD COLUMN ino INTEGER", [])
            .map_err(db)?;
    }
    if !cols.iter().any(|c| c == "new_file") {
        tx.exec(
            "ALTER TABLE staged ADD COLUMN new_file INTEGER NOT NULL DEFAULT 0",
            [],
        )
        .map_err(db)?;
    }
    let max: i64 = tx
        .row("SELECT COALESCE(MAX(ino), 0) FROM inodes", [], |r| r.get(0))
        .map_err(db)?;
    tx.exec(
        "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
        params![FILE_INO_HIGH, (max as u64).to_le_bytes().to_vec()],
    )
    .map_err(db)?;
    Ok(())
}

/// Schema 2 to 3: each file's one object becomes component 0 of a `single` layout; staged
/// uploads likewise; the old object columns of `inodes` go.
fn migrate_2_to_3(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(SCHEMA_V3_TABLES).map_err(db)?;
    tx.execute_batch(
        "ALTER TABLE inodes ADD COLUMN geometry TEXT;
         ALTER TABLE inodes ADD COLUMN layout_version INTEGER NOT NULL DEFAULT 1;
         ALTER TABLE inodes ADD COLUMN stale INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE inodes ADD COLUMN size INTEGER;
         ALTER TABLE inodes ADD COLUMN dir_layout TEXT;
         INSERT INTO components(ino, idx, drive, part, object)
             SELECT ino, 0, drive, part, object FROM inodes WHERE object IS NOT NULL;
         UPDATE inodes SET geometry = 'single' WHERE object IS NOT NULL;
         DROP INDEX IF EXISTS inodes_drive;
         ALTER TABLE inodes DROP COLUMN drive;
         ALTER TABLE inodes DROP COLUMN part;
         ALTER TABLE inodes DROP COLUMN object;
         ALTER TABLE staged ADD COLUMN geometry TEXT NOT NULL DEFAULT 'single';
         INSERT INTO staged_components(drive0, object0, idx, drive, part, object)
             SELECT drive, object, 0, drive, part, object FROM staged;",
    )
    .map_err(db)
}

/// Schema 3 to 4: a staged record knows the layout version a copy-on-write change was based
/// on (`NULL` for uploads) and which of its components were staged stale.
fn migrate_3_to_4(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "ALTER TABLE staged ADD COLUMN base_version INTEGER;
         ALTER TABLE staged ADD COLUMN stale INTEGER NOT NULL DEFAULT 0;",
    )
    .map_err(db)
}

/// Schema 4 to 5: revocation intents (a revocation's new version is stored before the drives
/// take it; the intent says they may not have yet).
fn migrate_4_to_5(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch("CREATE TABLE revocations(ino INTEGER PRIMARY KEY);")
        .map_err(db)
}

/// Schema 5 to 6: POSIX names. Symbolic links keep their target in `inodes.target`; hard
/// links are several `dirents` rows naming one inode, counted through `dirents_ino`.
/// Gateways: `users.gateway`, and `sessions.via` for the sessions a gateway opened. S3
/// access keys: `s3_keys`.
fn migrate_5_to_6(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "ALTER TABLE inodes ADD COLUMN target TEXT;
         CREATE INDEX IF NOT EXISTS dirents_ino ON dirents(ino);
         ALTER TABLE users ADD COLUMN gateway INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE sessions ADD COLUMN via INTEGER;
         CREATE TABLE s3_keys(access_key TEXT PRIMARY KEY, uid INTEGER NOT NULL,
             secret TEXT NOT NULL, created_ms INTEGER NOT NULL);",
    )
    .map_err(db)
}

/// Schema 6 to 7: extended attributes (`xattrs`), one row per file and name.
fn migrate_6_to_7(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "CREATE TABLE xattrs(ino INTEGER NOT NULL, name TEXT NOT NULL, value BLOB NOT NULL,
             PRIMARY KEY(ino, name));",
    )
    .map_err(db)
}

/// Schema 7 to 8: quotas. `quotas` per user; `inodes.charged`, a file's bytes counted against
/// its owner's quota (NULL: the owner has none); escrows of staged uploads in `staged`, and of
/// committed files in `escrows`. No quota exists yet, so nothing needs counting.
fn migrate_7_to_8(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "ALTER TABLE inodes ADD COLUMN charged INTEGER;
         ALTER TABLE staged ADD COLUMN escrow_uid INTEGER;
         ALTER TABLE staged ADD COLUMN escrow_base INTEGER;
         ALTER TABLE staged ADD COLUMN escrow_end INTEGER;
         ALTER TABLE staged ADD COLUMN escrow_expires_ms INTEGER;
         CREATE TABLE quotas(uid INTEGER PRIMARY KEY, limit_bytes INTEGER NOT NULL,
             used_bytes INTEGER NOT NULL);
         CREATE TABLE escrows(ino INTEGER PRIMARY KEY, uid INTEGER NOT NULL,
             end_bytes INTEGER NOT NULL, expires_ms INTEGER NOT NULL);",
    )
    .map_err(db)
}

/// Schema 9 to 10: the mount's POSIX (issue 20). Inodes gain an access time (the modify time
/// until something sets it) and a device number; special files are new kinds of inode.
fn migrate_9_to_10(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "ALTER TABLE inodes ADD COLUMN atime_us INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE inodes ADD COLUMN rdev INTEGER NOT NULL DEFAULT 0;
         UPDATE inodes SET atime_us = mtime_us;",
    )
    .map_err(db)
}

/// Schema 8 to 9: end-to-end protection (issue 10). The never-written `inodes.root` becomes
/// `inodes.e2e`; users gain their keys, groups a key pair and its wraps to members. Files
/// stay as they were: plaintext.
fn migrate_8_to_9(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "ALTER TABLE inodes RENAME COLUMN root TO e2e;
         UPDATE inodes SET e2e = NULL;
         ALTER TABLE users ADD COLUMN e2e_keys BLOB;
         ALTER TABLE groups ADD COLUMN key_version INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE groups ADD COLUMN key_public BLOB;
         CREATE TABLE group_wraps(gid INTEGER NOT NULL, uid INTEGER NOT NULL,
             version INTEGER NOT NULL, wrap BLOB NOT NULL, PRIMARY KEY(gid, uid));",
    )
    .map_err(db)
}

/// Schema 11 to 12: users' keys carry a version and the signature of their change, and a log
/// of every version. Keys stored before become version 1 with an all-zero signature (they
/// were made before key changes were signed) and the first entry of their user's log.
fn migrate_11_to_12(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.execute_batch(
        "CREATE TABLE user_key_log(uid INTEGER NOT NULL, version INTEGER NOT NULL,
             keys BLOB NOT NULL, PRIMARY KEY(uid, version));",
    )
    .map_err(db)?;
    let old: Vec<(u32, Vec<u8>)> = {
        let mut st = tx
            .prepare("SELECT uid, e2e_keys FROM users WHERE e2e_keys IS NOT NULL")
            .map_err(db)?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)?
    };
    for (uid, blob) in old {
        // Schema 9 to 11's encoding: [32] enc_public, [32] sign_public, blob sealed.
        let mut r = nasd_proto::codec::Reader::new(&blob);
        let decoded = (|| -> Result<UserKeys, nasd_proto::DecodeError> {
            let k = UserKeys {
                enc_public: r.array("enc public")?,
                sign_public: r.array("sign public")?,
                version: 1,
                signature: [0; 64],
                sealed: r
                    .blob(nasd_proto::e2e::SEALED_SECRET_BYTES_MAX, "sealed secret")?
                    .to_vec(),
            };
            r.finish("user keys")?;
            Ok(k)
        })();
        let Ok(keys) = decoded else {
            // Never written by us: the user makes keys anew at their next login.
            tx.exec(
                "UPDATE users SET e2e_keys = NULL WHERE uid = ?1",
                params![uid],
            )
            .map_err(db)?;
            continue;
        };
        tx.exec(
            "UPDATE users SET e2e_keys = ?2 WHERE uid = ?1",
            params![uid, keys_blob(&keys)],
        )
        .map_err(db)?;
        tx.exec(
            "INSERT INTO user_key_log(uid, version, keys) VALUES (?1, 1, ?2)",
            params![
                uid,
                keys_blob(&UserKeys {
                    sealed: vec![],
                    ..keys
                })
            ],
        )
        .map_err(db)?;
    }
    Ok(())
}

/// A user's keys as their columns hold them.
fn keys_blob(keys: &UserKeys) -> Vec<u8> {
    let mut w = nasd_proto::codec::Writer::new();
    keys.put(&mut w);
    w.into_vec()
}

/// The keys of a column; a value that does not decode reads as none (never written by us).
fn keys_of(b: &[u8]) -> Option<UserKeys> {
    let mut r = nasd_proto::codec::Reader::new(b);
    let k = UserKeys::get(&mut r).ok()?;
    r.finish("user keys").ok()?;
    Some(k)
}

/// An end-to-end state as its column holds it.
fn e2e_blob(e: &Option<E2eState>) -> Option<Vec<u8>> {
    e.as_ref().map(|e| {
        let mut w = nasd_proto::codec::Writer::new();
        e.put(&mut w);
        w.into_vec()
    })
}

/// The column's state; a value that does not decode reads as none (never written by us).
fn e2e_of(b: Option<Vec<u8>>) -> Option<E2eState> {
    let b = b?;
    let mut r = nasd_proto::codec::Reader::new(&b);
    let e = E2eState::get(&mut r).ok()?;
    r.finish("e2e state").ok()?;
    Some(e)
}

/// nasd-e2e's `state_hash` of a file's state (zeros: none).
fn state_hash_of(e: &Option<E2eState>) -> [u8; 32] {
    match e {
        None => [0; 32],
        Some(e) => nasd_e2e::record::state_hash(&e.record, &e.side),
    }
}

/// Whether `new` may replace `old` by key version: an unreadable record counts as version 0.
fn key_version_of(e: &Option<E2eState>) -> u32 {
    e.as_ref()
        .and_then(|e| nasd_e2e::TrustedRecord::decode(&e.record).ok())
        .map_or(0, |r| r.key_version)
}

/// A byte count as SQLite stores it: at most `i64::MAX` (no file or quota comes near).
fn db_bytes(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// The column names of `table` (one of this module's own).
fn columns(tx: &Connection, table: &'static str) -> StoreResult<Vec<String>> {
    let mut st = tx
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .map_err(db)?;
    let rows = st.query_map([], |r| r.get(0)).map_err(db)?;
    rows.collect::<Result<_, _>>().map_err(db)
}

impl SqliteStore {
    /// Rewrites the database so no free page keeps what was deleted or replaced (after the
    /// drives' keys were sealed): secure deletion on, `VACUUM`, the write-ahead log emptied.
    pub fn compact(&mut self) -> StoreResult<()> {
        self.db
            .execute_batch("PRAGMA secure_delete = ON; VACUUM; PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(db)
    }

    /// Opens (creating if missing) the database at `path`.
    pub fn open(path: &Path) -> StoreResult<SqliteStore> {
        Self::setup(Connection::open(path).map_err(db)?)
    }

    /// A private in-memory database (tests).
    pub fn in_memory() -> StoreResult<SqliteStore> {
        Self::setup(Connection::open_in_memory().map_err(db)?)
    }

    fn setup(db_: Connection) -> StoreResult<SqliteStore> {
        db_.pragma_update(None, "journal_mode", "WAL").map_err(db)?;
        db_.pragma_update(None, "synchronous", "FULL").map_err(db)?;
        db_.pragma_update(None, "foreign_keys", "ON").map_err(db)?;
        db_.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(db)?;
        db_.set_prepared_statement_cache_capacity(cached::STATEMENTS_CACHED);
        db_.execute_batch(SCHEMA).map_err(db)?;
        let mut s = SqliteStore {
            db: db_,
            seal: None,
        };
        let version = match s.get_meta("schema")? {
            None => return s.create_fresh(),
            Some(v) => <[u8; 4]>::try_from(v)
                .map(u32::from_le_bytes)
                .map_err(|_| StoreError::Db("unreadable schema version".into()))?,
        };
        if version == 0 || version > SCHEMA_VERSION {
            return Err(StoreError::Db(format!(
                "unsupported schema version {version} (this build reads 1 to {SCHEMA_VERSION})"
            )));
        }
        for (i, migrate) in MIGRATIONS.iter().enumerate().skip(version as usize - 1) {
            let tx = s.db.transaction().map_err(db)?;
            migrate(&tx)?;
            tx.exec(
                "UPDATE meta SET value = ?1 WHERE key = 'schema'",
                params![(i as u32 + 2).to_le_bytes().to_vec()],
            )
            .map_err(db)?;
            tx.commit().map_err(db)?;
        }
        Ok(s)
    }

    /// A new database: every table as the current version has it, and the root directory.
    fn create_fresh(mut self) -> StoreResult<SqliteStore> {
        let tx = self.db.transaction().map_err(db)?;
        tx.execute_batch(SCHEMA_NEW).map_err(db)?;
        tx.execute_batch(SCHEMA_V3_TABLES).map_err(db)?;
        counts::create(&tx)?;
        tx.execute_batch(keylog::SCHEMA_KEY_LOG).map_err(db)?;
        tx.execute_batch(groups::SCHEMA_GROUP_KEYS).map_err(db)?;
        tx.execute_batch(keylog::MIGRATE_14_TO_15).map_err(db)?;
        tx.exec(
            "INSERT INTO meta(key, value) VALUES ('schema', ?1)",
            params![SCHEMA_VERSION.to_le_bytes().to_vec()],
        )
        .map_err(db)?;
        tx.exec(
            "INSERT INTO inodes(ino, kind, mode, uid, gid, parent, ctime_us, mtime_us, acv)
             VALUES (?1, ?2, ?3, 0, 0, ?1, ?4, ?4, 0)",
            params![
                ROOT_INO as i64,
                FileKind::Dir as u8,
                0o755u32,
                now_us() as i64
            ],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(self)
    }

    /// The components of inode `ino`, in order.
    fn components(tx: &Connection, ino: u64) -> StoreResult<Vec<ObjRef>> {
        let mut st = tx
            .prepare_cached(
                "SELECT drive, part, object FROM components WHERE ino = ?1 ORDER BY idx",
            )
            .map_err(db)?;
        let rows = st.query_map(params![ino as i64], obj_of).map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    /// Reads a file inode's components into its layout.
    fn fill_layout(tx: &Connection, mut i: Inode) -> StoreResult<Inode> {
        if let Some(l) = &mut i.layout {
            l.components = Self::components(tx, i.ino)?;
        }
        Ok(i)
    }

    /// How many names `i` has: its directory entries; a directory's `.` and its entry in its
    /// parent, plus each subdirectory's `..` (POSIX `st_nlink`).
    fn links_in(tx: &Connection, i: &Inode) -> StoreResult<u32> {
        let count = |sql: &str| -> StoreResult<u32> {
            tx.prepare_cached(sql)
                .map_err(db)?
                .query_row(params![i.ino as i64], |r| r.get::<_, i64>(0))
                .map(|n| n as u32)
                .map_err(db)
        };
        match i.kind {
            FileKind::Dir => Ok(2 + count(
                "SELECT COUNT(*) FROM dirents d JOIN inodes c ON c.ino = d.ino
                 WHERE d.parent = ?1 AND c.kind = 2",
            )?),
            _ => count("SELECT COUNT(*) FROM dirents WHERE ino = ?1"),
        }
    }

    /// Removes the entry `parent`/`name` naming `i`, and `i` itself with its last name;
    /// whether it went.
    fn drop_name(tx: &Connection, parent: u64, name: &str, i: &Inode) -> StoreResult<bool> {
        tx.exec(
            "DELETE FROM dirents WHERE parent = ?1 AND name = ?2",
            params![parent as i64, name],
        )
        .map_err(db)?;
        let named = tx
            .row(
                "SELECT EXISTS(SELECT 1 FROM dirents WHERE ino = ?1)",
                params![i.ino as i64],
                |r| r.get::<_, bool>(0),
            )
            .map_err(db)?;
        if named {
            // One link fewer: a change of the inode (an unlink, a rename over a name).
            tx.exec(
                "UPDATE inodes SET ctime_us = ?2 WHERE ino = ?1",
                params![i.ino as i64, now_us() as i64],
            )
            .map_err(db)?;
            return Ok(false);
        }
        Self::delete_inode(tx, i.ino)?;
        Ok(true)
    }

    /// Stores inode `i` (and its layout) inside `tx`. A file that changes owner takes its
    /// charge from the old owner's quota to the new one's (`i.charged`, `ChargeNeeded` when
    /// the new owner has a quota and it is `None`), with its file escrow.
    fn update_inode_in(tx: &Connection, i: &Inode) -> StoreResult<()> {
        let before: Option<(u32, Option<i64>)> = tx
            .row(
                "SELECT uid, charged FROM inodes WHERE ino = ?1",
                params![i.ino as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db)?;
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
            tx.exec(
                "UPDATE inodes SET charged = ?2 WHERE ino = ?1",
                params![i.ino as i64, charge],
            )
            .map_err(db)?;
            tx.exec(
                "UPDATE escrows SET uid = ?2 WHERE ino = ?1",
                params![i.ino as i64, i.uid],
            )
            .map_err(db)?;
        }
        let n = Self::counted(tx, i.ino, || {
            tx.exec(
                "UPDATE inodes SET mode = ?2, uid = ?3, gid = ?4, mtime_us = ?5, acv = ?6, e2e = ?7,
                     size = ?8, dir_layout = ?9, ctime_us = ?10, atime_us = ?11 WHERE ino = ?1",
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
            .map_err(db)
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
    fn set_layout(
        tx: &Connection,
        ino: u64,
        layout: &FileLayout,
        acv: u64,
        size: Option<u64>,
    ) -> StoreResult<()> {
        Self::counted(tx, ino, || Self::write_layout(tx, ino, layout, acv, size))
    }

    fn write_layout(
        tx: &Connection,
        ino: u64,
        layout: &FileLayout,
        acv: u64,
        size: Option<u64>,
    ) -> StoreResult<()> {
        let n = tx
            .exec(
                "UPDATE inodes SET geometry = ?2, layout_version = ?3, stale = ?4, acv = ?5,
                     size = ?6 WHERE ino = ?1",
                params![
                    ino as i64,
                    layout.geometry,
                    layout.version as i64,
                    layout.stale as i64,
                    acv as i64,
                    size.map(|v| v as i64)
                ],
            )
            .map_err(db)?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        tx.exec("DELETE FROM components WHERE ino = ?1", params![ino as i64])
            .map_err(db)?;
        for (idx, o) in layout.components.iter().enumerate() {
            tx.exec(
                "INSERT INTO components(ino, idx, drive, part, object) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    ino as i64,
                    idx as i64,
                    o.drive.0 as i64,
                    o.partition.0 as i64,
                    o.object.0 as i64
                ],
            )
            .map_err(db)?;
        }
        Ok(())
    }

    /// The components of the staged upload whose first component is `key`.
    fn staged_components(tx: &Connection, key: ObjRef) -> StoreResult<Vec<ObjRef>> {
        let mut st = tx
            .prepare_cached(
                "SELECT drive, part, object FROM staged_components
                 WHERE drive0 = ?1 AND object0 = ?2 ORDER BY idx",
            )
            .map_err(db)?;
        let rows = st
            .query_map(params![key.drive.0 as i64, key.object.0 as i64], obj_of)
            .map_err(db)?;
        let v: Vec<ObjRef> = rows.collect::<Result<_, _>>().map_err(db)?;
        // A record staged before version 3 has its one object only in `staged`.
        Ok(if v.is_empty() { vec![key] } else { v })
    }

    fn delete_staged(tx: &Connection, key: ObjRef) -> StoreResult<()> {
        for table in ["staged", "staged_components"] {
            let (d, o) = if table == "staged" {
                ("drive", "object")
            } else {
                ("drive0", "object0")
            };
            tx.exec(
                &format!("DELETE FROM {table} WHERE {d} = ?1 AND {o} = ?2"),
                params![key.drive.0 as i64, key.object.0 as i64],
            )
            .map_err(db)?;
        }
        Ok(())
    }

    /// The staged upload with first component `key`.
    fn staged_at(tx: &Connection, key: ObjRef) -> StoreResult<Option<Staged>> {
        let Some(mut s) = tx
            .row(
                &format!("SELECT {STAGED_COLS} FROM staged WHERE drive = ?1 AND object = ?2"),
                params![key.drive.0 as i64, key.object.0 as i64],
                staged_of,
            )
            .optional()
            .map_err(db)?
        else {
            return Ok(None);
        };
        s.layout.components = Self::staged_components(tx, key)?;
        Ok(Some(s))
    }

    /// The staged upload that `obj` is any component of.
    fn staged_in(tx: &Connection, obj: ObjRef) -> StoreResult<Option<Staged>> {
        let key: Option<(i64, i64)> = tx
            .row(
                "SELECT drive0, object0 FROM staged_components WHERE drive = ?1 AND object = ?2",
                params![obj.drive.0 as i64, obj.object.0 as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db)?;
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

    fn is_reserved(tx: &Connection, ino: u64) -> StoreResult<bool> {
        tx.row(
            "SELECT EXISTS(SELECT 1 FROM reserved WHERE ino = ?1)",
            params![ino as i64],
            |r| r.get::<_, bool>(0),
        )
        .map_err(db)
    }

    /// Deletes the reserved inode `ino` and its reservation (nothing if `ino` is not reserved,
    /// so a linked file can never be deleted this way).
    fn drop_reserved(tx: &Connection, ino: u64) -> StoreResult<()> {
        if Self::is_reserved(tx, ino)? {
            Self::delete_inode(tx, ino)?;
        }
        tx.exec("DELETE FROM reserved WHERE ino = ?1", params![ino as i64])
            .map_err(db)?;
        Ok(())
    }

    /// Names the reserved inode `ino` `parent`/`name` and ends its reservation (the caller
    /// counts the file: [`SqliteStore::counted`]).
    fn link_reservation(tx: &Connection, parent: u64, name: &str, ino: u64) -> StoreResult<()> {
        if !Self::is_reserved(tx, ino)? {
            return Err(StoreError::NotFound);
        }
        tx.exec(
            "INSERT INTO dirents(parent, name, ino) VALUES (?1, ?2, ?3)",
            params![parent as i64, name, ino as i64],
        )
        .map_err(db)?;
        tx.exec(
            "UPDATE inodes SET parent = ?2 WHERE ino = ?1",
            params![ino as i64, parent as i64],
        )
        .map_err(db)?;
        tx.exec("DELETE FROM reserved WHERE ino = ?1", params![ino as i64])
            .map_err(db)?;
        Self::touch_dir(tx, parent)
    }

    /// Runs `f` with commits that reach the WAL but are not fsynced (`synchronous=NORMAL`),
    /// for records whose loss in a power failure is harmless: an inode reservation, a staged
    /// upload, an abort. Losing them makes an upload in flight fail at its commit, with
    /// nothing visible, and leaves an object the orphan scrub reclaims. A process crash loses
    /// nothing, and the next durable commit makes them durable too (the WAL is synced in
    /// order). Commits that make a name visible stay durable before the reply.
    fn relaxed<T>(&mut self, f: impl FnOnce(&mut Self) -> StoreResult<T>) -> StoreResult<T> {
        self.db
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(db)?;
        let r = f(self);
        let restored = self
            .db
            .pragma_update(None, "synchronous", "FULL")
            .map_err(db);
        let v = r?;
        restored?;
        Ok(v)
    }

    fn reserve_inode_now(&mut self, parent: u64, inode: &Inode) -> StoreResult<u64> {
        let tx = self.db.transaction().map_err(db)?;
        Self::dir_inode(&tx, parent)?;
        // Above every inode there is and every file number handed out before: a file's number
        // is never reused, so neither a staged overwrite nor an object's fs_specific record can
        // ever name a later file. (SQLite alone would reuse the largest number once freed.)
        let high: Option<Vec<u8>> = tx
            .row(
                "SELECT value FROM meta WHERE key = ?1",
                params![FILE_INO_HIGH],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        let high = high
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map_or(0, u64::from_le_bytes);
        let max: i64 = tx
            .row("SELECT COALESCE(MAX(ino), 0) FROM inodes", [], |r| r.get(0))
            .map_err(db)?;
        let ino = high.max(max as u64) + 1;
        tx.exec(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
            params![FILE_INO_HIGH, ino.to_le_bytes().to_vec()],
        )
        .map_err(db)?;
        // Reserved first, so the inode is never counted as a file before it is linked.
        tx.exec(
            "INSERT INTO reserved(ino, created_ms) VALUES (?1, ?2)",
            params![ino as i64, (inode.ctime_us / 1000) as i64],
        )
        .map_err(db)?;
        Self::insert_inode(&tx, Some(ino), parent, inode)?;
        tx.commit().map_err(db)?;
        Ok(ino)
    }

    fn put_staged_now(&mut self, s: &Staged) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        let key = s.layout.key();
        tx.exec(
            &format!("INSERT OR REPLACE INTO staged({STAGED_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"),
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
        .map_err(db)?;
        if let Some(e) = s.escrow {
            // The record's time is now; the row just written does not count twice.
            let held = e.held(s.created_ms);
            if held > 0 {
                Self::room(&tx, e.uid, s.created_ms, held, Skip::Staged(key))?;
            }
        }
        tx.exec(
            "DELETE FROM staged_components WHERE drive0 = ?1 AND object0 = ?2",
            params![key.drive.0 as i64, key.object.0 as i64],
        )
        .map_err(db)?;
        for (idx, o) in s.layout.components.iter().enumerate() {
            tx.exec(
                "INSERT INTO staged_components(drive0, object0, idx, drive, part, object)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    key.drive.0 as i64,
                    key.object.0 as i64,
                    idx as i64,
                    o.drive.0 as i64,
                    o.partition.0 as i64,
                    o.object.0 as i64
                ],
            )
            .map_err(db)?;
        }
        if s.new_file {
            if !Self::is_reserved(&tx, s.ino)? {
                return Err(StoreError::NotFound);
            }
            Self::set_layout(&tx, s.ino, &s.layout, s.acv, None)?;
        }
        tx.commit().map_err(db)
    }

    /// Inserts an inodes row (at `ino`, or the next row id) and, for a file, its components;
    /// returns its number.
    fn insert_inode(tx: &Connection, ino: Option<u64>, parent: u64, i: &Inode) -> StoreResult<u64> {
        let l = i.layout.as_ref();
        tx.exec(
            "INSERT INTO inodes(ino, kind, mode, uid, gid, parent, ctime_us, mtime_us, acv, e2e,
                 geometry, layout_version, stale, size, dir_layout, target, charged, atime_us,
                 rdev)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18, ?19)",
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
        )
        .map_err(db)?;
        let ino = tx.last_insert_rowid() as u64;
        Self::counted_insert(tx, ino)?;
        if let Some(l) = l {
            Self::set_layout(tx, ino, l, i.acv, i.size)?;
        }
        Ok(ino)
    }

    fn abort_staged_now(&mut self, obj: ObjRef) -> StoreResult<Option<Staged>> {
        let tx = self.db.transaction().map_err(db)?;
        let Some(s) = Self::staged_at(&tx, obj)? else {
            return Ok(None);
        };
        Self::delete_staged(&tx, obj)?;
        if s.new_file {
            Self::drop_reserved(&tx, s.ino)?;
        }
        tx.commit().map_err(db)?;
        Ok(Some(s))
    }

    fn quota_in(tx: &Connection, uid: u32) -> StoreResult<Option<Quota>> {
        tx.prepare_cached("SELECT uid, limit_bytes, used_bytes FROM quotas WHERE uid = ?1")
            .map_err(db)?
            .query_row(params![uid], |r| {
                Ok(Quota {
                    uid: r.get(0)?,
                    limit_bytes: r.get::<_, i64>(1)? as u64,
                    used_bytes: r.get::<_, i64>(2)? as u64,
                })
            })
            .optional()
            .map_err(db)
    }

    /// Moves `uid`'s usage from a charge of `old` bytes to one of `new` (nothing without a
    /// quota).
    fn move_usage(tx: &Connection, uid: u32, old: u64, new: u64) -> StoreResult<()> {
        if old == new {
            return Ok(());
        }
        let Some(q) = Self::quota_in(tx, uid)? else {
            return Ok(());
        };
        let used = q.used_bytes.saturating_sub(old).saturating_add(new);
        tx.exec(
            "UPDATE quotas SET used_bytes = ?2 WHERE uid = ?1",
            params![uid, db_bytes(used)],
        )
        .map_err(db)?;
        Ok(())
    }

    /// A commit's quota (seed 002 §3.2): under the owner's quota the staged upload `s`'s
    /// `charge` (its size) becomes the file `target`'s, and growth its live escrow does not
    /// cover must fit now; `ChargeNeeded` when the caller did not measure it.
    fn charge_staged(
        tx: &Connection,
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
            tx.exec(
                "UPDATE inodes SET charged = 0 WHERE ino = ?1",
                params![s.ino as i64],
            )
            .map_err(db)?;
        }
        Self::charge_in(tx, s.ino, charge)
    }

    /// Sets file `ino`'s charge to `bytes`, its owner's usage moving by the difference;
    /// nothing for a file whose owner has no quota (no charge).
    fn charge_in(tx: &Connection, ino: u64, bytes: u64) -> StoreResult<()> {
        let row: Option<(u32, Option<i64>)> = tx
            .row(
                "SELECT uid, charged FROM inodes WHERE ino = ?1",
                params![ino as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db)?;
        let Some((uid, Some(old))) = row else {
            return Ok(());
        };
        Self::move_usage(tx, uid, old as u64, bytes)?;
        tx.exec(
            "UPDATE inodes SET charged = ?2 WHERE ino = ?1",
            params![ino as i64, db_bytes(bytes)],
        )
        .map_err(db)?;
        Ok(())
    }

    /// Bytes escrowed for `uid` at `now_ms`, leaving out the escrow `skip` names (the one
    /// being replaced).
    fn escrowed_in(tx: &Connection, uid: u32, now_ms: u64, skip: Skip) -> StoreResult<u64> {
        let (sd, so, sf) = match skip {
            Skip::Nothing => (None, None, None),
            Skip::Staged(o) => (Some(o.drive.0 as i64), Some(o.object.0 as i64), None),
            Skip::File(ino) => (None, None, Some(ino as i64)),
        };
        let mut total = 0u64;
        {
            let mut st = tx
                .prepare_cached(
                    "SELECT escrow_end, escrow_base FROM staged WHERE escrow_uid = ?1
                     AND escrow_expires_ms > ?2 AND NOT (drive IS ?3 AND object IS ?4)",
                )
                .map_err(db)?;
            let rows = st
                .query_map(params![uid, db_bytes(now_ms), sd, so], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
                })
                .map_err(db)?;
            for row in rows {
                let (end, base) = row.map_err(db)?;
                total = total.saturating_add(end.saturating_sub(base));
            }
        }
        let mut st = tx
            .prepare_cached(
                "SELECT e.end_bytes, i.charged FROM escrows e LEFT JOIN inodes i ON i.ino = e.ino
                 WHERE e.uid = ?1 AND NOT (e.ino IS ?2)",
            )
            .map_err(db)?;
        let rows = st
            .query_map(params![uid, sf], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get::<_, Option<i64>>(1)?.unwrap_or(0) as u64,
                ))
            })
            .map_err(db)?;
        for row in rows {
            let (end, charged) = row.map_err(db)?;
            total = total.saturating_add(end.saturating_sub(charged));
        }
        Ok(total)
    }

    /// Whether `uid`'s quota has room for `asked` more bytes besides what it uses and every
    /// other escrow (`skip`) holds: `QuotaExceeded` otherwise. Always room without a quota.
    fn room(tx: &Connection, uid: u32, now_ms: u64, asked: u64, skip: Skip) -> StoreResult<()> {
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

    fn file_escrow_in(tx: &Connection, ino: u64) -> StoreResult<Option<FileEscrow>> {
        tx.row(
            "SELECT ino, uid, end_bytes, expires_ms FROM escrows WHERE ino = ?1",
            params![ino as i64],
            file_escrow_of,
        )
        .optional()
        .map_err(db)
    }

    fn dir_inode(tx: &Connection, ino: u64) -> StoreResult<Inode> {
        let i = tx
            .row(
                &format!("SELECT {INODE_COLS} FROM inodes WHERE ino = ?1"),
                params![ino as i64],
                inode_of,
            )
            .optional()
            .map_err(db)?
            .ok_or(StoreError::NotFound)?;
        if i.kind != FileKind::Dir {
            return Err(StoreError::NotADirectory);
        }
        Ok(i)
    }

    fn inode_in(tx: &Connection, ino: u64) -> StoreResult<Option<Inode>> {
        tx.row(
            &format!("SELECT {INODE_COLS} FROM inodes WHERE ino = ?1"),
            params![ino as i64],
            inode_of,
        )
        .optional()
        .map_err(db)?
        .map(|i| Self::fill_layout(tx, i))
        .transpose()
    }

    fn entry(tx: &Connection, parent: u64, name: &str) -> StoreResult<Option<Inode>> {
        tx.row(
            &format!(
                "SELECT {} FROM dirents d JOIN inodes i ON i.ino = d.ino WHERE d.parent = ?1 AND d.name = ?2",
                INODE_COLS.split(", ").map(|c| format!("i.{}", c.trim())).collect::<Vec<_>>().join(", ")
            ),
            params![parent as i64, name],
            inode_of,
        )
        .optional()
        .map_err(db)?
        .map(|i| Self::fill_layout(tx, i))
        .transpose()
    }

    /// Deletes an inodes row and its components; its charge leaves its owner's usage, and its
    /// file escrow goes.
    fn delete_inode(tx: &Connection, ino: u64) -> StoreResult<()> {
        Self::counted_delete(tx, ino)?;
        let charged: Option<(u32, Option<i64>)> = tx
            .row(
                "SELECT uid, charged FROM inodes WHERE ino = ?1",
                params![ino as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db)?;
        if let Some((uid, Some(c))) = charged {
            Self::move_usage(tx, uid, c as u64, 0)?;
        }
        tx.exec("DELETE FROM escrows WHERE ino = ?1", params![ino as i64])
            .map_err(db)?;
        tx.exec("DELETE FROM components WHERE ino = ?1", params![ino as i64])
            .map_err(db)?;
        Self::put_xattrs(tx, ino, &[])?;
        tx.exec("DELETE FROM inodes WHERE ino = ?1", params![ino as i64])
            .map_err(db)?;
        Ok(())
    }

    /// Makes `xattrs` the whole set of extended attributes of `ino`.
    fn put_xattrs(tx: &Connection, ino: u64, xattrs: &[Xattr]) -> StoreResult<()> {
        tx.exec("DELETE FROM xattrs WHERE ino = ?1", params![ino as i64])
            .map_err(db)?;
        for x in xattrs {
            tx.exec(
                "INSERT INTO xattrs(ino, name, value) VALUES (?1, ?2, ?3)",
                params![ino as i64, x.name, x.value],
            )
            .map_err(db)?;
        }
        Ok(())
    }

    fn has_children(tx: &Connection, ino: u64) -> StoreResult<bool> {
        tx.row(
            "SELECT EXISTS(SELECT 1 FROM dirents WHERE parent = ?1)",
            params![ino as i64],
            |r| r.get::<_, bool>(0),
        )
        .map_err(db)
    }

    /// A directory's entries changed: its modify and change times are now.
    fn touch_dir(tx: &Connection, ino: u64) -> StoreResult<()> {
        tx.exec(
            "UPDATE inodes SET mtime_us = ?2, ctime_us = ?2 WHERE ino = ?1",
            params![ino as i64, now_us() as i64],
        )
        .map_err(db)?;
        Ok(())
    }
}

/// The escrow a quota check leaves out: the one its caller is about to replace.
#[derive(Clone, Copy)]
enum Skip {
    Nothing,
    Staged(ObjRef),
    File(u64),
}

fn file_escrow_of(r: &Row<'_>) -> rusqlite::Result<FileEscrow> {
    Ok(FileEscrow {
        ino: r.get::<_, i64>(0)? as u64,
        uid: r.get(1)?,
        end: r.get::<_, i64>(2)? as u64,
        expires_ms: r.get::<_, i64>(3)? as u64,
    })
}

fn s3_key_of(r: &Row<'_>) -> rusqlite::Result<S3Key> {
    Ok(S3Key {
        access_key_id: r.get(0)?,
        uid: r.get(1)?,
        secret: nasd_proto::manager::SecretString(r.get(2)?),
        created_ms: r.get::<_, i64>(3)? as u64,
    })
}

fn user_of(r: &Row<'_>) -> rusqlite::Result<User> {
    Ok(User {
        uid: r.get(0)?,
        name: r.get(1)?,
        phc: r.get(2)?,
        admin: r.get(3)?,
        gid: r.get(4)?,
        gateway: r.get(5)?,
    })
}

impl MetaStore for SqliteStore {
    fn user_by_name(&self, name: &str) -> StoreResult<Option<User>> {
        self.db
            .row(
                "SELECT uid, name, phc, admin, gid, gateway FROM users WHERE name = ?1",
                params![name],
                user_of,
            )
            .optional()
            .map_err(db)
    }

    fn user_by_uid(&self, uid: u32) -> StoreResult<Option<User>> {
        self.db
            .row(
                "SELECT uid, name, phc, admin, gid, gateway FROM users WHERE uid = ?1",
                params![uid],
                user_of,
            )
            .optional()
            .map_err(db)
    }

    fn users(&self) -> StoreResult<Vec<User>> {
        let mut st = self
            .db
            .prepare("SELECT uid, name, phc, admin, gid, gateway FROM users ORDER BY uid")
            .map_err(db)?;
        let rows = st.query_map([], user_of).map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn add_user(&mut self, name: &str, phc: &str, admin: bool, gid: u32) -> StoreResult<u32> {
        let tx = self.db.transaction().map_err(db)?;
        // uids start at 1000 for ordinary users; the first user (the admin) gets 0.
        let uid = new_named_id(&tx, "users", "uid", name, 1000)?;
        tx.exec(
            "INSERT INTO users(uid, name, phc, admin, gid) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![uid, name, phc, admin, gid],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(uid)
    }

    fn set_credential(&mut self, uid: u32, phc: &str) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        let n = tx
            .exec(
                "UPDATE users SET phc = ?2 WHERE uid = ?1",
                params![uid, phc],
            )
            .map_err(db)?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        tx.exec(
            "DELETE FROM sessions WHERE uid = ?1 OR via = ?1",
            params![uid],
        )
        .map_err(db)?;
        tx.commit().map_err(db)
    }

    fn set_gateway(&mut self, uid: u32, on: bool) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        let n = tx
            .exec(
                "UPDATE users SET gateway = ?2 WHERE uid = ?1",
                params![uid, on],
            )
            .map_err(db)?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        if !on {
            tx.exec("DELETE FROM sessions WHERE via = ?1", params![uid])
                .map_err(db)?;
        }
        tx.commit().map_err(db)
    }

    fn group_by_name(&self, name: &str) -> StoreResult<Option<Group>> {
        self.db
            .row(
                "SELECT gid, name FROM groups WHERE name = ?1",
                params![name],
                |r| {
                    Ok(Group {
                        gid: r.get(0)?,
                        name: r.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(db)
    }

    fn group_by_gid(&self, gid: u32) -> StoreResult<Option<Group>> {
        self.db
            .row(
                "SELECT gid, name FROM groups WHERE gid = ?1",
                params![gid],
                |r| {
                    Ok(Group {
                        gid: r.get(0)?,
                        name: r.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(db)
    }

    fn add_group(&mut self, name: &str) -> StoreResult<u32> {
        let tx = self.db.transaction().map_err(db)?;
        // gids start at 100; the first group gets 0.
        let gid = new_named_id(&tx, "groups", "gid", name, 100)?;
        tx.exec(
            "INSERT INTO groups(gid, name) VALUES (?1, ?2)",
            params![gid, name],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(gid)
    }

    fn add_member(&mut self, gid: u32, uid: u32) -> StoreResult<()> {
        self.db
            .exec(
                "INSERT OR IGNORE INTO members(gid, uid) VALUES (?1, ?2)",
                params![gid, uid],
            )
            .map_err(db)?;
        Ok(())
    }

    fn remove_member(&mut self, gid: u32, uid: u32) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        groups::remove_member(&tx, gid, uid)?;
        tx.commit().map_err(db)
    }

    fn members_of(&self, gid: u32) -> StoreResult<Vec<u32>> {
        let mut st = self
            .db
            .prepare(
                "SELECT uid FROM members WHERE gid = ?1 UNION SELECT uid FROM users WHERE gid = ?1 ORDER BY 1",
            )
            .map_err(db)?;
        let rows = st.query_map(params![gid], |r| r.get(0)).map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn user_keys(&self, uid: u32) -> StoreResult<Option<UserKeys>> {
        let b: Option<Vec<u8>> = self
            .db
            .row(
                "SELECT e2e_keys FROM users WHERE uid = ?1",
                params![uid],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?
            .flatten();
        Ok(b.and_then(|b| keys_of(&b)))
    }

    fn set_user_keys(&mut self, uid: u32, keys: &UserKeys) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        let n = tx
            .exec(
                "UPDATE users SET e2e_keys = ?2 WHERE uid = ?1",
                params![uid, keys_blob(keys)],
            )
            .map_err(db)?;
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
        tx.commit().map_err(db)
    }

    fn set_password_file(&mut self, uid: u32, phc: &str, sealed: Option<&[u8]>) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        let keys: Option<Option<Vec<u8>>> = tx
            .row(
                "SELECT e2e_keys FROM users WHERE uid = ?1",
                params![uid],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        let Some(keys) = keys else {
            return Err(StoreError::NotFound);
        };
        tx.exec(
            "UPDATE users SET phc = ?2 WHERE uid = ?1",
            params![uid, phc],
        )
        .map_err(db)?;
        if let (Some(sealed), Some(mut k)) = (sealed, keys.as_deref().and_then(keys_of)) {
            k.sealed = sealed.to_vec();
            tx.exec(
                "UPDATE users SET e2e_keys = ?2 WHERE uid = ?1",
                params![uid, keys_blob(&k)],
            )
            .map_err(db)?;
        }
        tx.exec(
            "DELETE FROM sessions WHERE uid = ?1 OR via = ?1",
            params![uid],
        )
        .map_err(db)?;
        tx.commit().map_err(db)
    }

    fn user_key_log(&self, uid: u32) -> StoreResult<Vec<KeyLogEntry>> {
        keylog::of_user(&self.db, uid)
    }

    fn log_policy_readers(&mut self, readers: &PolicyReaders) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        keylog::append(&tx, &KeyLogEntry::Readers(readers.clone()))?;
        tx.commit().map_err(db)
    }

    fn key_log(&self, from: u64, max: usize) -> StoreResult<Vec<KeyLogEntry>> {
        keylog::page(&self.db, from, max)
    }

    fn key_log_len(&self) -> StoreResult<u64> {
        keylog::len(&self.db)
    }

    fn reset_user_keys(&mut self, uid: u32, by: u32, at_ms: u64) -> StoreResult<u32> {
        let tx = self.db.transaction().map_err(db)?;
        let n = tx
            .exec(
                "UPDATE users SET e2e_keys = NULL WHERE uid = ?1",
                params![uid],
            )
            .map_err(db)?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        tx.exec("DELETE FROM group_wraps WHERE uid = ?1", params![uid])
            .map_err(db)?;
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
        tx.commit().map_err(db)?;
        Ok(version)
    }

    fn user_key_version(&self, uid: u32) -> StoreResult<u32> {
        keylog::last_version(&self.db, uid)
    }

    fn group_key(&self, gid: u32) -> StoreResult<GroupKeyPair> {
        groups::group_key(&self.db, gid)
    }

    fn set_group_key(
        &mut self,
        gid: u32,
        version: u32,
        public: &[u8; 32],
        link: Option<&[u8]>,
        wraps: &[(u32, Vec<u8>)],
    ) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        groups::set_group_key(&tx, gid, version, public, link, wraps)?;
        tx.commit().map_err(db)
    }

    fn group_key_links(&self, gid: u32, max: usize) -> StoreResult<Vec<Vec<u8>>> {
        groups::group_key_links(&self.db, gid, max)
    }

    fn group_wrap(&self, gid: u32, uid: u32) -> StoreResult<Option<Vec<u8>>> {
        self.db
            .row(
                "SELECT w.wrap FROM group_wraps w JOIN groups g ON g.gid = w.gid
                 WHERE w.gid = ?1 AND w.uid = ?2 AND w.version = g.key_version",
                params![gid, uid],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)
    }

    fn set_e2e(&mut self, ino: u64, expect: &[u8; 32], state: &E2eState) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        let i = Self::inode_in(&tx, ino)?.ok_or(StoreError::NotFound)?;
        if *expect != state_hash_of(&i.e2e) {
            return Err(StoreError::Conflict);
        }
        tx.exec(
            "UPDATE inodes SET e2e = ?2 WHERE ino = ?1",
            params![ino as i64, e2e_blob(&Some(state.clone()))],
        )
        .map_err(db)?;
        tx.commit().map_err(db)
    }

    fn groups_of(&self, uid: u32) -> StoreResult<Vec<u32>> {
        let mut st = self
            .db
            .prepare(
                "SELECT gid FROM members WHERE uid = ?1 UNION SELECT gid FROM users WHERE uid = ?1 ORDER BY 1",
            )
            .map_err(db)?;
        let rows = st.query_map(params![uid], |r| r.get(0)).map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
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
    ) -> StoreResult<HashMap<u64, u32>> {
        let mut st = self
            .db
            .prepare_cached(
                "SELECT i.ino, CASE WHEN i.kind = 2
                 THEN 2 + (SELECT COUNT(*) FROM dirents s JOIN inodes k ON k.ino = s.ino
                           WHERE s.parent = i.ino AND k.kind = 2)
                 ELSE (SELECT COUNT(*) FROM dirents s WHERE s.ino = i.ino) END
             FROM inodes i WHERE i.ino IN (SELECT d.ino FROM dirents d WHERE d.parent = ?1
                 AND d.name > ?2 ORDER BY d.name LIMIT ?3)",
            )
            .map_err(db)?;
        let rows = st
            .query_map(
                params![parent as i64, after, limit.min(i64::MAX as usize) as i64],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u32)),
            )
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn lookup(&self, parent: u64, name: &str) -> StoreResult<Option<u64>> {
        self.db
            .row(
                "SELECT ino FROM dirents WHERE parent = ?1 AND name = ?2",
                params![parent as i64, name],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map(|o| o.map(|i| i as u64))
            .map_err(db)
    }

    fn readdir(&self, parent: u64, after: &str, limit: usize) -> StoreResult<Vec<(String, Inode)>> {
        Self::dir_inode(&self.db, parent)?;
        let cols = INODE_COLS
            .split(", ")
            .map(|c| format!("i.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let entries: Vec<(String, Inode)> = {
            let mut st = self
                .db
                .prepare(&format!(
                    "SELECT d.name, {cols} FROM dirents d JOIN inodes i ON i.ino = d.ino WHERE d.parent = ?1 AND d.name > ?2 ORDER BY d.name LIMIT ?3"
                ))
                .map_err(db)?;
            let rows = st
                .query_map(
                    params![parent as i64, after, limit.min(i64::MAX as usize) as i64],
                    |r| Ok((r.get(0)?, inode_at(r, 1)?)),
                )
                .map_err(db)?;
            rows.collect::<Result<_, _>>().map_err(db)?
        };
        // The page's files' components in one statement (not one per file).
        let mut comps: HashMap<u64, Vec<ObjRef>> = HashMap::new();
        if entries.iter().any(|(_, i)| i.layout.is_some()) {
            let mut st = self
                .db
                .prepare_cached(
                    "SELECT c.drive, c.part, c.object, c.ino FROM components c WHERE c.ino IN
                     (SELECT d.ino FROM dirents d WHERE d.parent = ?1 AND d.name > ?2
                      ORDER BY d.name LIMIT ?3) ORDER BY c.ino, c.idx",
                )
                .map_err(db)?;
            let rows = st
                .query_map(
                    params![parent as i64, after, limit.min(i64::MAX as usize) as i64],
                    |r| Ok((r.get::<_, i64>(3)? as u64, obj_of(r)?)),
                )
                .map_err(db)?;
            for row in rows {
                let (ino, o) = row.map_err(db)?;
                comps.entry(ino).or_default().push(o);
            }
        }
        Ok(crate::store::with_components(entries, &comps))
    }

    fn link_new(&mut self, parent: u64, name: &str, inode: &Inode) -> StoreResult<u64> {
        let tx = self.db.transaction().map_err(db)?;
        Self::dir_inode(&tx, parent)?;
        if Self::entry(&tx, parent, name)?.is_some() {
            return Err(StoreError::Exists);
        }
        let ino = Self::insert_inode(&tx, None, parent, inode)?;
        tx.exec(
            "INSERT INTO dirents(parent, name, ino) VALUES (?1, ?2, ?3)",
            params![parent as i64, name, ino as i64],
        )
        .map_err(db)?;
        Self::touch_dir(&tx, parent)?;
        tx.commit().map_err(db)?;
        Ok(ino)
    }

    fn unlink(&mut self, parent: u64, name: &str) -> StoreResult<Option<Inode>> {
        let tx = self.db.transaction().map_err(db)?;
        let i = Self::entry(&tx, parent, name)?.ok_or(StoreError::NotFound)?;
        if i.kind == FileKind::Dir && Self::has_children(&tx, i.ino)? {
            return Err(StoreError::NotEmpty);
        }
        let gone = Self::drop_name(&tx, parent, name, &i)?;
        Self::touch_dir(&tx, parent)?;
        tx.commit().map_err(db)?;
        Ok(gone.then_some(i))
    }

    fn link(&mut self, ino: u64, parent: u64, name: &str) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
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
        tx.exec(
            "INSERT INTO dirents(parent, name, ino) VALUES (?1, ?2, ?3)",
            params![parent as i64, name, ino as i64],
        )
        .map_err(db)?;
        Self::touch_dir(&tx, parent)?;
        tx.commit().map_err(db)
    }

    fn rename(
        &mut self,
        from_parent: u64,
        from_name: &str,
        to_parent: u64,
        to_name: &str,
    ) -> StoreResult<Option<Inode>> {
        let tx = self.db.transaction().map_err(db)?;
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
        tx.exec(
            "UPDATE dirents SET parent = ?3, name = ?4 WHERE parent = ?1 AND name = ?2",
            params![from_parent as i64, from_name, to_parent as i64, to_name],
        )
        .map_err(db)?;
        tx.exec(
            "UPDATE inodes SET parent = ?2, ctime_us = ?3 WHERE ino = ?1",
            params![src.ino as i64, to_parent as i64, now_us() as i64],
        )
        .map_err(db)?;
        Self::touch_dir(&tx, from_parent)?;
        Self::touch_dir(&tx, to_parent)?;
        tx.commit().map_err(db)?;
        Ok(gone)
    }

    fn exchange(
        &mut self,
        a_parent: u64,
        a_name: &str,
        b_parent: u64,
        b_name: &str,
    ) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        let a = Self::entry(&tx, a_parent, a_name)?.ok_or(StoreError::NotFound)?;
        let b = Self::entry(&tx, b_parent, b_name)?.ok_or(StoreError::NotFound)?;
        let now = now_us() as i64;
        for (parent, name, ino) in [(a_parent, a_name, b.ino), (b_parent, b_name, a.ino)] {
            tx.exec(
                "UPDATE dirents SET ino = ?3 WHERE parent = ?1 AND name = ?2",
                params![parent as i64, name, ino as i64],
            )
            .map_err(db)?;
            tx.exec(
                "UPDATE inodes SET parent = ?2, ctime_us = ?3 WHERE ino = ?1",
                params![ino as i64, parent as i64, now],
            )
            .map_err(db)?;
            Self::touch_dir(&tx, parent)?;
        }
        tx.commit().map_err(db)
    }

    fn inode_count(&self) -> StoreResult<u64> {
        self.db
            .row("SELECT COUNT(*) FROM inodes", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(db)
    }

    fn set_times(
        &mut self,
        ino: u64,
        atime_us: Option<u64>,
        mtime_us: Option<u64>,
        ctime_us: u64,
    ) -> StoreResult<()> {
        let n = self
            .db
            .exec(
                "UPDATE inodes SET atime_us = COALESCE(?2, atime_us),
                     mtime_us = COALESCE(?3, mtime_us), ctime_us = ?4 WHERE ino = ?1",
                params![
                    ino as i64,
                    atime_us.map(|t| t as i64),
                    mtime_us.map(|t| t as i64),
                    ctime_us as i64
                ],
            )
            .map_err(db)?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    fn update_inode(&mut self, i: &Inode) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        Self::update_inode_in(&tx, i)?;
        tx.commit().map_err(db)
    }

    fn begin_revocation(&mut self, i: &Inode) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        Self::update_inode_in(&tx, i)?;
        tx.exec(
            "INSERT OR IGNORE INTO revocations(ino) VALUES (?1)",
            params![i.ino as i64],
        )
        .map_err(db)?;
        tx.commit().map_err(db)
    }

    fn end_revocation(&mut self, ino: u64) -> StoreResult<()> {
        self.db
            .exec(
                "DELETE FROM revocations WHERE ino = ?1",
                params![ino as i64],
            )
            .map_err(db)?;
        Ok(())
    }

    fn revocations(&self) -> StoreResult<Vec<u64>> {
        let mut st = self
            .db
            .prepare("SELECT ino FROM revocations ORDER BY ino")
            .map_err(db)?;
        let rows = st
            .query_map([], |r| r.get::<_, i64>(0).map(|v| v as u64))
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
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
        self.db
            .prepare_cached("SELECT parent, name FROM dirents WHERE ino = ?1 LIMIT 1")
            .map_err(db)?
            .query_row(params![ino as i64], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?))
            })
            .optional()
            .map_err(db)
    }

    fn objects_on_drive(&self, drive: DriveId) -> StoreResult<Vec<ObjectId>> {
        let mut st = self
            .db
            .prepare("SELECT object FROM components WHERE drive = ?1")
            .map_err(db)?;
        let rows = st
            .query_map(params![drive.0 as i64], |r| {
                Ok(ObjectId(r.get::<_, i64>(0)? as u64))
            })
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn files_with_drive(&self, drive: DriveId, after: u64, limit: usize) -> StoreResult<Vec<u64>> {
        let mut st = self
            .db
            .prepare(
                "SELECT DISTINCT ino FROM components WHERE drive = ?1 AND ino > ?2
                 ORDER BY ino LIMIT ?3",
            )
            .map_err(db)?;
        let rows = st
            .query_map(params![drive.0 as i64, after as i64, limit as i64], |r| {
                Ok(r.get::<_, i64>(0)? as u64)
            })
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn files_after(&self, after: u64, limit: usize) -> StoreResult<Vec<u64>> {
        let mut st = self
            .db
            .prepare(
                "SELECT ino FROM inodes WHERE geometry IS NOT NULL AND ino > ?1
                     AND ino NOT IN (SELECT ino FROM reserved)
                 ORDER BY ino LIMIT ?2",
            )
            .map_err(db)?;
        let rows = st
            .query_map(params![after as i64, limit as i64], |r| {
                Ok(r.get::<_, i64>(0)? as u64)
            })
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn reserve_inode(&mut self, parent: u64, inode: &Inode) -> StoreResult<u64> {
        self.relaxed(|s| s.reserve_inode_now(parent, inode))
    }

    fn forget_reserved(&mut self, ino: u64) -> StoreResult<()> {
        self.relaxed(|s| {
            let tx = s.db.transaction().map_err(db)?;
            Self::drop_reserved(&tx, ino)?;
            tx.commit().map_err(db)
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
        let tx = self.db.transaction().map_err(db)?;
        Self::dir_inode(&tx, parent)?;
        if Self::entry(&tx, parent, name)?.is_some() {
            return Err(StoreError::Exists);
        }
        let size = Self::inode_in(&tx, ino)?.and_then(|i| i.size);
        Self::counted(&tx, ino, || {
            Self::write_layout(&tx, ino, layout, acv, size)?;
            Self::link_reservation(&tx, parent, name, ino)
        })?;
        tx.commit().map_err(db)
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
        let tx = self.db.transaction().map_err(db)?;
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
        tx.exec(
            "UPDATE inodes SET mtime_us = ?2, ctime_us = ?2 WHERE ino = ?1",
            params![s.ino as i64, now_us() as i64],
        )
        .map_err(db)?;
        if let Some(x) = xattrs {
            Self::put_xattrs(&tx, s.ino, x)?;
        }
        tx.exec(
            "UPDATE inodes SET e2e = ?2 WHERE ino = ?1",
            params![s.ino as i64, e2e_blob(&e2e.map(|c| c.state.clone()))],
        )
        .map_err(db)?;
        Self::delete_staged(&tx, obj)?;
        tx.commit().map_err(db)?;
        Ok(replaced)
    }

    fn swap_layout(
        &mut self,
        ino: u64,
        expected: u64,
        layout: &FileLayout,
        size: Option<u64>,
    ) -> StoreResult<u64> {
        let tx = self.db.transaction().map_err(db)?;
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
            tx.exec(
                "UPDATE inodes SET mtime_us = ?2, ctime_us = ?2 WHERE ino = ?1",
                params![ino as i64, now_us() as i64],
            )
            .map_err(db)?;
        }
        tx.commit().map_err(db)?;
        Ok(next.version)
    }

    fn abort_staged(&mut self, obj: ObjRef) -> StoreResult<Option<Staged>> {
        self.relaxed(|s| s.abort_staged_now(obj))
    }

    fn touch_staged(&mut self, obj: ObjRef, created_ms: u64) -> StoreResult<()> {
        self.relaxed(|s| {
            let n =
                s.db.exec(
                    "UPDATE staged SET created_ms = ?3 WHERE drive = ?1 AND object = ?2",
                    params![obj.drive.0 as i64, obj.object.0 as i64, created_ms as i64],
                )
                .map_err(db)?;
            if n == 0 {
                return Err(StoreError::NotFound);
            }
            Ok(())
        })
    }

    fn expire_staged(&mut self, before_ms: u64) -> StoreResult<Vec<Staged>> {
        let tx = self.db.transaction().map_err(db)?;
        let mut old: Vec<Staged> = {
            let mut st = tx
                .prepare(&format!(
                    "SELECT {STAGED_COLS} FROM staged WHERE created_ms < ?1"
                ))
                .map_err(db)?;
            let rows = st
                .query_map(params![before_ms as i64], staged_of)
                .map_err(db)?;
            rows.collect::<Result<_, _>>().map_err(db)?
        };
        for s in &mut old {
            let key = s.layout.components[0];
            s.layout.components = Self::staged_components(&tx, key)?;
            Self::delete_staged(&tx, key)?;
        }
        // Reservations as old as that which no live staged record holds: expired uploads,
        // and creates that crashed between reserving and staging.
        let orphaned = "SELECT ino FROM reserved WHERE created_ms < ?1
             AND ino NOT IN (SELECT ino FROM staged WHERE ino IS NOT NULL)";
        for table in ["components", "inodes"] {
            tx.exec(
                &format!("DELETE FROM {table} WHERE ino IN ({orphaned})"),
                params![before_ms as i64],
            )
            .map_err(db)?;
        }
        tx.exec(
            &format!("DELETE FROM reserved WHERE ino IN ({orphaned})"),
            params![before_ms as i64],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(old)
    }

    fn set_key_seal(&mut self, seal: Option<std::sync::Arc<nasd_crypto::seal::KeySeal>>) {
        self.seal = seal;
    }

    fn reseal_drive_keys(
        &mut self,
        header: &[u8],
        seal: std::sync::Arc<nasd_crypto::seal::KeySeal>,
    ) -> StoreResult<()> {
        let drives = self.drives()?;
        let tx = self.db.transaction().map_err(db)?;
        tx.exec(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
            params![KEY_SEAL_META, header],
        )
        .map_err(db)?;
        for d in &drives {
            let sealed = |which: &str, k: &nasd_crypto::Key| {
                stored_drive_key(Some(&seal), d.drive, which, k)
            };
            tx.exec(
                "UPDATE drives SET drive_key = ?2, part_key = ?3, working_key = ?4
                 WHERE drive = ?1",
                params![
                    d.drive.0 as i64,
                    sealed("drive", &d.drive_key),
                    sealed("partition", &d.partition_key),
                    sealed("working", &d.working_key)
                ],
            )
            .map_err(db)?;
        }
        tx.commit().map_err(db)?;
        self.seal = Some(seal);
        Ok(())
    }

    /// Secure deletion on, `VACUUM`, the write-ahead log emptied.
    fn compact(&mut self) -> StoreResult<()> {
        self.db
            .execute_batch("PRAGMA secure_delete = ON; VACUUM; PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(db)
    }

    fn drives(&self) -> StoreResult<Vec<DriveRecord>> {
        type Row = (i64, String, u8, Vec<u8>, i64, Vec<u8>, Vec<u8>, i64);
        let mut st = self
            .db
            .prepare("SELECT drive, addr, suite, drive_key, part, part_key, working_key, rotated_ms FROM drives ORDER BY drive")
            .map_err(db)?;
        let rows: Vec<Row> = st
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ))
            })
            .map_err(db)?
            .collect::<Result<_, _>>()
            .map_err(db)?;
        let seal = self.seal.as_deref();
        rows.into_iter()
            .map(|(d, addr, suite, dk, part, pk, wk, rotated)| {
                let drive = DriveId(d as u64);
                Ok(DriveRecord {
                    drive,
                    addr,
                    suite: Suite::from_u8(suite).unwrap_or(Suite::Blake3),
                    drive_key: drive_key_of(seal, drive, "drive", &dk)?,
                    partition: PartitionId(part as u16),
                    partition_key: drive_key_of(seal, drive, "partition", &pk)?,
                    working_key: drive_key_of(seal, drive, "working", &wk)?,
                    rotated_ms: rotated as u64,
                })
            })
            .collect()
    }

    fn put_drive(&mut self, d: &DriveRecord) -> StoreResult<()> {
        self.db
            .exec(
                "INSERT OR REPLACE INTO drives(drive, addr, suite, drive_key, part, part_key, working_key, rotated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
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
            .map_err(db)?;
        Ok(())
    }

    fn put_s3_key(&mut self, k: &S3Key) -> StoreResult<()> {
        let r = self.db.exec(
            "INSERT INTO s3_keys(access_key, uid, secret, created_ms) VALUES (?1, ?2, ?3, ?4)",
            params![k.access_key_id, k.uid, k.secret.0, k.created_ms as i64],
        );
        match r {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Err(StoreError::Exists)
            }
            Err(e) => Err(db(e)),
        }
    }

    fn xattrs(&self, ino: u64) -> StoreResult<Vec<Xattr>> {
        let mut st = self
            .db
            .prepare_cached("SELECT name, value FROM xattrs WHERE ino = ?1 ORDER BY name")
            .map_err(db)?;
        let rows = st
            .query_map(params![ino as i64], |r| {
                Ok(Xattr {
                    name: r.get(0)?,
                    value: r.get(1)?,
                })
            })
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn set_xattrs(&mut self, ino: u64, xattrs: &[Xattr]) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        Self::inode_in(&tx, ino)?.ok_or(StoreError::NotFound)?;
        Self::put_xattrs(&tx, ino, xattrs)?;
        tx.commit().map_err(db)
    }

    fn s3_key(&self, access_key_id: &str) -> StoreResult<Option<S3Key>> {
        self.db
            .row(
                "SELECT access_key, uid, secret, created_ms FROM s3_keys WHERE access_key = ?1",
                params![access_key_id],
                s3_key_of,
            )
            .optional()
            .map_err(db)
    }

    fn s3_keys_of(&self, uid: u32) -> StoreResult<Vec<S3Key>> {
        let mut st = self
            .db
            .prepare(
                "SELECT access_key, uid, secret, created_ms FROM s3_keys WHERE uid = ?1
                 ORDER BY created_ms, access_key",
            )
            .map_err(db)?;
        let rows = st.query_map(params![uid], s3_key_of).map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn delete_s3_key(&mut self, uid: u32, access_key_id: &str) -> StoreResult<bool> {
        let tx = self.db.transaction().map_err(db)?;
        let n = tx
            .exec(
                "DELETE FROM s3_keys WHERE uid = ?1 AND access_key = ?2",
                params![uid, access_key_id],
            )
            .map_err(db)?;
        tx.exec(
            "DELETE FROM sessions WHERE uid = ?1 AND via IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM s3_keys WHERE uid = ?1)",
            params![uid],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(n > 0)
    }

    fn put_session(&mut self, s: &SessionRecord) -> StoreResult<()> {
        self.db
            .exec(
                "INSERT OR REPLACE INTO sessions(token_hash, uid, expires_ms, via)
                 VALUES (?1, ?2, ?3, ?4)",
                params![s.token_hash.to_vec(), s.uid, s.expires_ms as i64, s.via],
            )
            .map_err(db)?;
        Ok(())
    }

    fn session(&self, token_hash: &[u8; 32]) -> StoreResult<Option<SessionRecord>> {
        self.db
            .row(
                "SELECT uid, expires_ms, via FROM sessions WHERE token_hash = ?1",
                params![token_hash.to_vec()],
                |r| {
                    Ok(SessionRecord {
                        token_hash: *token_hash,
                        uid: r.get(0)?,
                        expires_ms: r.get::<_, i64>(1)? as u64,
                        via: r.get(2)?,
                    })
                },
            )
            .optional()
            .map_err(db)
    }

    fn delete_session(&mut self, token_hash: &[u8; 32]) -> StoreResult<bool> {
        self.db
            .exec(
                "DELETE FROM sessions WHERE token_hash = ?1",
                params![token_hash.to_vec()],
            )
            .map(|n| n > 0)
            .map_err(db)
    }

    fn expire_sessions(&mut self, now_ms: u64) -> StoreResult<u64> {
        self.db
            .exec(
                "DELETE FROM sessions WHERE expires_ms < ?1",
                params![now_ms as i64],
            )
            .map(|n| n as u64)
            .map_err(db)
    }

    fn get_meta(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.db
            .row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(db)
    }

    fn put_meta(&mut self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.db
            .exec(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
                params![key, value],
            )
            .map_err(db)?;
        Ok(())
    }

    fn quota(&self, uid: u32) -> StoreResult<Option<Quota>> {
        Self::quota_in(&self.db, uid)
    }

    fn quotas(&self) -> StoreResult<Vec<Quota>> {
        let mut st = self
            .db
            .prepare("SELECT uid, limit_bytes, used_bytes FROM quotas ORDER BY uid")
            .map_err(db)?;
        let rows = st
            .query_map([], |r| {
                Ok(Quota {
                    uid: r.get(0)?,
                    limit_bytes: r.get::<_, i64>(1)? as u64,
                    used_bytes: r.get::<_, i64>(2)? as u64,
                })
            })
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn set_quota(&mut self, uid: u32, limit_bytes: u64) -> StoreResult<bool> {
        let tx = self.db.transaction().map_err(db)?;
        let new = Self::quota_in(&tx, uid)?.is_none();
        if new {
            tx.exec(
                "INSERT INTO quotas(uid, limit_bytes, used_bytes) VALUES (?1, ?2, 0)",
                params![uid, db_bytes(limit_bytes)],
            )
            .map_err(db)?;
            tx.exec(
                "UPDATE inodes SET charged = 0 WHERE uid = ?1 AND kind = ?2",
                params![uid, FileKind::File as u8],
            )
            .map_err(db)?;
        } else {
            tx.exec(
                "UPDATE quotas SET limit_bytes = ?2 WHERE uid = ?1",
                params![uid, db_bytes(limit_bytes)],
            )
            .map_err(db)?;
        }
        tx.commit().map_err(db)?;
        Ok(new)
    }

    fn remove_quota(&mut self, uid: u32) -> StoreResult<bool> {
        let tx = self.db.transaction().map_err(db)?;
        let had = tx
            .exec("DELETE FROM quotas WHERE uid = ?1", params![uid])
            .map_err(db)?
            > 0;
        tx.execute_batch(&format!(
            "UPDATE inodes SET charged = NULL WHERE uid = {uid};
             DELETE FROM escrows WHERE uid = {uid};
             UPDATE staged SET escrow_uid = NULL, escrow_base = NULL, escrow_end = NULL,
                 escrow_expires_ms = NULL WHERE escrow_uid = {uid};"
        ))
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(had)
    }

    fn files_owned(&self, uid: u32, after: u64, limit: usize) -> StoreResult<Vec<Inode>> {
        let found: Vec<Inode> = {
            let mut st = self
                .db
                .prepare(&format!(
                    "SELECT {INODE_COLS} FROM inodes WHERE uid = ?1 AND kind = ?2 AND ino > ?3
                     ORDER BY ino LIMIT ?4"
                ))
                .map_err(db)?;
            let rows = st
                .query_map(
                    params![
                        uid,
                        FileKind::File as u8,
                        after as i64,
                        limit.min(i64::MAX as usize) as i64
                    ],
                    inode_of,
                )
                .map_err(db)?;
            rows.collect::<Result<_, _>>().map_err(db)?
        };
        found
            .into_iter()
            .map(|i| Self::fill_layout(&self.db, i))
            .collect()
    }

    fn settle_charge(&mut self, ino: u64, seen: u64, bytes: u64) -> StoreResult<bool> {
        let tx = self.db.transaction().map_err(db)?;
        let now: Option<Option<i64>> = tx
            .row(
                "SELECT charged FROM inodes WHERE ino = ?1",
                params![ino as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        if now != Some(Some(db_bytes(seen))) {
            return Ok(false);
        }
        Self::charge_in(&tx, ino, bytes)?;
        tx.commit().map_err(db)?;
        Ok(true)
    }

    fn escrowed(&self, uid: u32, now_ms: u64) -> StoreResult<u64> {
        Self::escrowed_in(&self.db, uid, now_ms, Skip::Nothing)
    }

    fn escrow_file(&mut self, e: &FileEscrow, now_ms: u64, check: bool) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
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
        tx.exec(
            "INSERT OR REPLACE INTO escrows(ino, uid, end_bytes, expires_ms) VALUES (?1, ?2, ?3, ?4)",
            params![e.ino as i64, e.uid, db_bytes(end), db_bytes(expires_ms)],
        )
        .map_err(db)?;
        tx.commit().map_err(db)
    }

    fn file_escrow(&self, ino: u64) -> StoreResult<Option<FileEscrow>> {
        Self::file_escrow_in(&self.db, ino)
    }

    fn file_escrows_expired(&self, now_ms: u64) -> StoreResult<Vec<FileEscrow>> {
        let mut st = self
            .db
            .prepare(
                "SELECT ino, uid, end_bytes, expires_ms FROM escrows WHERE expires_ms <= ?1
                 ORDER BY ino",
            )
            .map_err(db)?;
        let rows = st
            .query_map(params![db_bytes(now_ms)], file_escrow_of)
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn settle_file(&mut self, ino: u64, bytes: u64, end_escrow: bool) -> StoreResult<()> {
        let tx = self.db.transaction().map_err(db)?;
        Self::charge_in(&tx, ino, bytes)?;
        if end_escrow {
            tx.exec("DELETE FROM escrows WHERE ino = ?1", params![ino as i64])
                .map_err(db)?;
        }
        tx.commit().map_err(db)
    }

    fn escrow_staged(&mut self, obj: ObjRef, e: &StagedEscrow, now_ms: u64) -> StoreResult<()> {
        self.relaxed(|st| {
            let tx = st.db.transaction().map_err(db)?;
            let s = Self::staged_at(&tx, obj)?.ok_or(StoreError::NotFound)?;
            let held_before = s.escrow.map_or(0, |o| o.held(now_ms));
            let held = e.held(now_ms);
            if held > held_before {
                Self::room(&tx, e.uid, now_ms, held, Skip::Staged(obj))?;
            }
            tx.exec(
                "UPDATE staged SET escrow_uid = ?3, escrow_base = ?4, escrow_end = ?5,
                     escrow_expires_ms = ?6, created_ms = ?7 WHERE drive = ?1 AND object = ?2",
                params![
                    obj.drive.0 as i64,
                    obj.object.0 as i64,
                    e.uid,
                    db_bytes(e.base),
                    db_bytes(e.end),
                    db_bytes(e.expires_ms),
                    db_bytes(now_ms)
                ],
            )
            .map_err(db)?;
            tx.commit().map_err(db)
        })
    }
}

/// The id for a new row named `name` in `table` (users or groups): `Exists` if the name is
/// taken; otherwise 0 for the first row, then one past the largest id but at least `floor`.
/// `table` and `id_col` are this module's own constants, never caller text.
fn new_named_id(
    tx: &rusqlite::Transaction<'_>,
    table: &'static str,
    id_col: &'static str,
    name: &str,
    floor: u32,
) -> StoreResult<u32> {
    let taken: bool = tx
        .row(
            &format!("SELECT EXISTS(SELECT 1 FROM {table} WHERE name = ?1)"),
            params![name],
            |r| r.get(0),
        )
        .map_err(db)?;
    if taken {
        return Err(StoreError::Exists);
    }
    let next: u32 = tx
        .row(
            &format!("SELECT COALESCE(MAX({id_col}) + 1, 0) FROM {table}"),
            [],
            |r| r.get(0),
        )
        .map_err(db)?;
    Ok(if next == 0 { 0 } else { next.max(floor) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformance_in_memory() {
        crate::conformance::run(|| SqliteStore::in_memory().unwrap());
    }

    #[test]
    fn conformance_on_disk_and_reopen_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("meta.sqlite");
        let n = std::sync::atomic::AtomicU32::new(0);
        crate::conformance::run(|| {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            SqliteStore::open(&dir.path().join(format!("c{i}.sqlite"))).unwrap()
        });
        {
            let mut s = SqliteStore::open(&p).unwrap();
            s.add_group("g").unwrap();
            s.add_user("u", "phc", false, 0).unwrap();
            s.link_new(ROOT_INO, "d", &crate::conformance::dir(0))
                .unwrap();
        }
        let s = SqliteStore::open(&p).unwrap();
        assert!(s.user_by_name("u").unwrap().is_some());
        assert!(s.lookup(ROOT_INO, "d").unwrap().is_some());
    }

    /// A database written by a version-1 manager (its schema as that manager made it, with a
    /// staged overwrite in flight) opens as version 2: the old record reads back with no inode,
    /// so it can only expire, and new files get numbers above the old ones.
    #[test]
    fn a_version_12_key_history_becomes_the_key_log_in_the_order_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("meta.sqlite");
        let keys = |v: u32, b: u8| UserKeys {
            enc_public: [b; 32],
            sign_public: [b + 1; 32],
            version: v,
            signature: [b + 2; 64],
            sealed: vec![],
        };
        let (a, b) = {
            let mut s = SqliteStore::open(&p).unwrap();
            let a = s.add_user("ann", "phc", false, 0).unwrap();
            let b = s.add_user("ben", "phc", false, 0).unwrap();
            // Schema 12's table, rows written b1, a1, a2.
            s.db.execute_batch(groups::UNDO_14).unwrap();
            s.db.execute_batch(
                "DROP TABLE key_log;
                 CREATE TABLE user_key_log(uid INTEGER NOT NULL, version INTEGER NOT NULL,
                     keys BLOB NOT NULL, PRIMARY KEY(uid, version));",
            )
            .unwrap();
            for (uid, k) in [(b, keys(1, 30)), (a, keys(1, 10)), (a, keys(2, 20))] {
                s.db.exec(
                    "INSERT INTO user_key_log(uid, version, keys) VALUES (?1, ?2, ?3)",
                    params![uid, k.version, keys_blob(&k)],
                )
                .unwrap();
            }
            s.put_meta("schema", &12u32.to_le_bytes()).unwrap();
            (a, b)
        };
        let s = SqliteStore::open(&p).unwrap();
        let entry = |uid, keys| KeyLogEntry::Keys { uid, keys };
        assert_eq!(
            s.key_log(0, 10).unwrap(),
            vec![
                entry(b, keys(1, 30)),
                entry(a, keys(1, 10)),
                entry(a, keys(2, 20))
            ]
        );
        assert_eq!(
            (s.user_key_version(a).unwrap(), s.key_log_len().unwrap()),
            (2, 3)
        );
    }

    /// A version-14 key log (every row a key change, `version NOT NULL`) keeps its rows and
    /// places at version 15, and takes policies' readers after them.
    #[test]
    fn a_version_14_key_log_takes_policy_readers_after_its_entries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("meta.sqlite");
        let k = UserKeys {
            enc_public: [1; 32],
            sign_public: [2; 32],
            version: 1,
            signature: [3; 64],
            sealed: vec![],
        };
        let a = {
            let mut s = SqliteStore::open(&p).unwrap();
            let a = s.add_user("ann", "phc", false, 0).unwrap();
            s.db.execute_batch(&format!("DROP TABLE key_log; {}", keylog::SCHEMA_KEY_LOG))
                .unwrap();
            s.set_user_keys(a, &k).unwrap();
            s.put_meta("schema", &14u32.to_le_bytes()).unwrap();
            a
        };
        let mut s = SqliteStore::open(&p).unwrap();
        let readers = PolicyReaders {
            by: a,
            at_ms: 1,
            dir: "/s3".into(),
            readers: vec![],
            signature: [4; 64],
        };
        s.log_policy_readers(&readers).unwrap();
        s.log_policy_readers(&readers).unwrap();
        let keys = KeyLogEntry::Keys { uid: a, keys: k };
        let logged = KeyLogEntry::Readers(readers);
        assert_eq!(
            s.key_log(0, 10).unwrap(),
            vec![keys.clone(), logged.clone(), logged]
        );
        assert_eq!(s.user_key_log(a).unwrap(), vec![keys]);
    }

    #[test]
    fn a_version_1_database_migrates_to_version_2() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v1.sqlite");
        {
            let c = Connection::open(&p).unwrap();
            c.execute_batch(
                "CREATE TABLE meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);
                 CREATE TABLE inodes(ino INTEGER PRIMARY KEY, kind INTEGER NOT NULL,
                     mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
                     parent INTEGER NOT NULL, ctime_us INTEGER NOT NULL,
                     mtime_us INTEGER NOT NULL, drive INTEGER, part INTEGER, object INTEGER,
                     acv INTEGER NOT NULL, root BLOB);
                 CREATE TABLE dirents(parent INTEGER NOT NULL, name TEXT NOT NULL,
                     ino INTEGER NOT NULL, PRIMARY KEY(parent, name));
                 CREATE TABLE staged(drive INTEGER NOT NULL, part INTEGER NOT NULL,
                     object INTEGER NOT NULL, acv INTEGER NOT NULL, uid INTEGER NOT NULL,
                     path TEXT NOT NULL, mode INTEGER NOT NULL, created_ms INTEGER NOT NULL,
                     PRIMARY KEY(drive, object));
                 INSERT INTO inodes VALUES (1, 2, 493, 0, 0, 1, 1, 1, NULL, NULL, NULL, 0, NULL);
                 INSERT INTO inodes VALUES (9, 1, 420, 0, 0, 1, 1, 1, 7, 1, 16, 0, NULL);
                 INSERT INTO dirents VALUES (1, 'f', 9);
                 INSERT INTO staged VALUES (7, 1, 17, 0, 0, '/f', 420, 5);",
            )
            .unwrap();
            c.exec(
                "INSERT INTO meta(key, value) VALUES ('schema', ?1)",
                params![1u32.to_le_bytes().to_vec()],
            )
            .unwrap();
        }
        let mut s = SqliteStore::open(&p).unwrap();
        assert_eq!(
            s.get_meta("schema").unwrap(),
            Some(SCHEMA_VERSION.to_le_bytes().to_vec())
        );
        let obj = crate::conformance::obj(17);
        let old = s.staged(obj).unwrap().unwrap();
        assert_eq!((old.ino, old.new_file, old.path.as_str()), (0, false, "/f"));
        assert_eq!(
            s.commit_staged(ROOT_INO, "f", obj, Some(9), None, 0, None, None, None, 0),
            Err(StoreError::NotFound)
        );
        assert_eq!(s.lookup(ROOT_INO, "f").unwrap(), Some(9));
        // Version 6: names are counted, and a file has no link target.
        let f = s.inode(9).unwrap().unwrap();
        assert_eq!((s.links(&f).unwrap(), f.target), (1, None));
        // Version 8: no quota yet; one set charges the old file 0 until it is measured.
        assert_eq!((f.charged, s.quotas().unwrap()), (None, vec![]));
        assert!(s.set_quota(0, 1 << 20).unwrap());
        assert_eq!(s.inode(9).unwrap().unwrap().charged, Some(0));
        assert!(s.remove_quota(0).unwrap());
        // Version 11: the old file is counted.
        let c = s.counts().unwrap();
        assert_eq!(
            (c.files, c.drives.len(), c.drives[0].drive),
            (1, 1, DriveId(7))
        );
        let fresh = crate::conformance::file(0, 0);
        assert_eq!(s.reserve_inode(ROOT_INO, &fresh).unwrap(), 10);
        assert_eq!(s.expire_staged(6).unwrap(), vec![old]);
        drop(s);
        // Opening it again changes nothing.
        let s = SqliteStore::open(&p).unwrap();
        assert_eq!(s.lookup(ROOT_INO, "f").unwrap(), Some(9));
    }

    /// A version-10 database (no counters) holding files, one of them with stale components,
    /// opens as version 11 with counters that say what a walk says.
    #[test]
    fn a_version_10_database_gains_counters_of_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v10.sqlite");
        let want = {
            let mut s = SqliteStore::open(&p).unwrap();
            s.link_new(ROOT_INO, "a", &crate::conformance::file(0, 16))
                .unwrap();
            let mut b = crate::conformance::file(0, 17);
            b.layout = Some(FileLayout {
                version: 1,
                geometry: "mirror:2".into(),
                components: vec![crate::conformance::obj(17), {
                    let mut o = crate::conformance::obj(18);
                    o.drive = DriveId(8);
                    o
                }],
                stale: 0b10,
            });
            b.size = Some(123);
            s.link_new(ROOT_INO, "b", &b).unwrap();
            let want = s.counts().unwrap();
            assert_eq!(
                (
                    want.files,
                    want.stale_files,
                    want.stale_components,
                    want.bytes
                ),
                (2, 1, 1, 123)
            );
            // Back to version 10: no counters (11), no key log (12; no user has keys here).
            s.db.execute_batch(groups::UNDO_14).unwrap();
            s.db.execute_batch(
                "DROP TABLE counters; DROP TABLE drive_counts; DROP INDEX inodes_stale;
                 DROP TABLE key_log;",
            )
            .unwrap();
            s.put_meta("schema", &10u32.to_le_bytes()).unwrap();
            want
        };
        let mut s = SqliteStore::open(&p).unwrap();
        assert_eq!(s.counts().unwrap(), want);
        assert_eq!(s.recount(false).unwrap(), want);
    }
}
