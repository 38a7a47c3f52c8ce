//! The PostgreSQL metadata store: the same records, transactions and semantics as the embedded
//! [`crate::sqlite`] store, on a server the operator runs (`nasd manager run --meta
//! postgres://...`) or on a private one `nasd up --meta postgres` starts ([`server`]). It
//! passes the same conformance suite ([`crate::conformance`]).
//!
//! # Transactions
//! Every method that changes more than one row is one transaction at `SERIALIZABLE`
//! isolation, where SQLite relies on its single writer: each sees and changes the database as
//! if no other transaction ran meanwhile, or its commit fails. The checks the namespace
//! makes before it writes (a name is free, a directory is empty, a layout is still at the
//! version a change was based on, a quota has room) therefore hold at commit, whoever else
//! writes to the database; a conflict surfaces as an error of the call, never as a broken
//! invariant. Serializable rather than row locks (`SELECT ... FOR UPDATE`) because the checks
//! read rows that may not exist yet (a free name, the escrows of a user), which only
//! predicate locks cover. A method of one statement runs alone (PostgreSQL makes each
//! statement atomic); reads that take several statements (an inode and its components) run
//! outside a transaction, which is exact as long as one manager writes, as today.
//!
//! # Durability
//! A commit returns once the server has flushed it (`synchronous_commit` as the server sets
//! it, `on` by default). As in SQLite, the records of an upload in flight (reservations,
//! staged uploads, aborts, renewals) commit with `synchronous_commit = off`
//! ([`PgStore::relaxed`]): a server crash may lose the last of them, which fails that
//! upload's commit and leaves nothing visible.
//!
//! # Schema
//! Version 1 (the `meta` row `schema`, u32 little-endian, as in SQLite) is SQLite's schema 13
//! with PostgreSQL's types: every integer `BIGINT` (64-bit ids by bit-cast), blobs `BYTEA`,
//! flags `BOOLEAN`, and names `COLLATE "C"` so listings come in byte order whatever the
//! database's collation; version 2 is SQLite's 14 (groups' secrets for members only, `groups`);
//! version 3 is SQLite's 15 (key log entries without a key version: policies' readers).
//! Migrations are numbered as SQLite's are ([`MIGRATIONS`]):
//! opening a database of version `v` runs every migration from `v` on, each in one
//! transaction that also records the version it reaches, under an advisory lock so two
//! managers opening one database at once do not both migrate it.
//!
//! # Layout
//! - [`conn`]: the connection, its thread and statement cache, parameters and columns.
//! - `steps`: the statements a method's transaction is made of (inodes, names, layouts,
//!   staged uploads, quotas), shared by the methods.
//! - `store`: the [`MetaStore`] methods.
//! - `counts`: the file counts `nasd status` shows, kept as files change; `keylog`: the
//!   ordered log of users' key changes; `groups`: groups' key pairs, wraps and links.
//! - [`server`]: a private PostgreSQL server (initdb, pg_ctl) for `nasd up` and the tests.

use crate::store::*;
use conn::{params, Conn, Row};
use nasd_proto::manager::{E2eState, FileKind, UserKeys};
use nasd_proto::{DriveId, ObjectId, PartitionId};

pub mod conn;
mod counts;
mod groups;
mod keylog;
pub mod server;
mod steps;
mod store;
#[cfg(test)]
mod tests;

pub const SCHEMA_VERSION: u32 = 3;
/// The `meta` key of the largest inode number given to a file (u64, little-endian).
const FILE_INO_HIGH: &str = "file_ino_high";
/// The advisory lock held while a database is created or migrated (any number that no other
/// user of the database takes: "nasd" in ASCII).
const MIGRATION_LOCK: i64 = 0x6e61_7364;
/// The session advisory lock the manager that serves the database holds ("nasdlead" in
/// ASCII; [`crate::store::MetaStore::lead`]).
pub const LEADER_LOCK: i64 = 0x6e61_7364_6c65_6164;

/// The metadata store on a PostgreSQL database.
pub struct PgStore {
    db: Conn,
    /// Seals the drives' keys when set (`MetaStore::set_key_seal`).
    seal: Option<std::sync::Arc<nasd_crypto::seal::KeySeal>>,
}

fn now_us() -> u64 {
    crate::now_us()
}

/// Tables as version 1 has them.
const SCHEMA_V1: &str = r#"
CREATE TABLE users(uid BIGINT PRIMARY KEY, name TEXT COLLATE "C" NOT NULL UNIQUE,
    phc TEXT NOT NULL, admin BOOLEAN NOT NULL, gid BIGINT NOT NULL,
    gateway BOOLEAN NOT NULL DEFAULT false, e2e_keys BYTEA);
CREATE TABLE key_log(idx BIGINT PRIMARY KEY, uid BIGINT NOT NULL, version BIGINT NOT NULL,
    entry BYTEA NOT NULL, UNIQUE(uid, version));
CREATE TABLE groups(gid BIGINT PRIMARY KEY, name TEXT COLLATE "C" NOT NULL UNIQUE,
    key_version BIGINT NOT NULL DEFAULT 0, key_public BYTEA);
CREATE TABLE group_wraps(gid BIGINT NOT NULL, uid BIGINT NOT NULL,
    version BIGINT NOT NULL, wrap BYTEA NOT NULL, PRIMARY KEY(gid, uid));
CREATE TABLE members(gid BIGINT NOT NULL, uid BIGINT NOT NULL, PRIMARY KEY(gid, uid));
CREATE TABLE inodes(ino BIGINT PRIMARY KEY, kind BIGINT NOT NULL,
    mode BIGINT NOT NULL, uid BIGINT NOT NULL, gid BIGINT NOT NULL, parent BIGINT NOT NULL,
    ctime_us BIGINT NOT NULL, mtime_us BIGINT NOT NULL, acv BIGINT NOT NULL, e2e BYTEA,
    geometry TEXT, layout_version BIGINT NOT NULL DEFAULT 1,
    stale BIGINT NOT NULL DEFAULT 0, size BIGINT, dir_layout TEXT, target TEXT,
    charged BIGINT, atime_us BIGINT NOT NULL DEFAULT 0, rdev BIGINT NOT NULL DEFAULT 0);
CREATE INDEX inodes_stale ON inodes(ino) WHERE stale != 0;
CREATE TABLE xattrs(ino BIGINT NOT NULL, name TEXT COLLATE "C" NOT NULL, value BYTEA NOT NULL,
    PRIMARY KEY(ino, name));
CREATE TABLE components(ino BIGINT NOT NULL, idx BIGINT NOT NULL,
    drive BIGINT NOT NULL, part BIGINT NOT NULL, object BIGINT NOT NULL,
    PRIMARY KEY(ino, idx));
CREATE INDEX components_drive ON components(drive, object);
CREATE TABLE dirents(parent BIGINT NOT NULL, name TEXT COLLATE "C" NOT NULL,
    ino BIGINT NOT NULL, PRIMARY KEY(parent, name));
CREATE INDEX dirents_ino ON dirents(ino);
CREATE TABLE drives(drive BIGINT PRIMARY KEY, addr TEXT NOT NULL,
    suite BIGINT NOT NULL, drive_key BYTEA NOT NULL, part BIGINT NOT NULL,
    part_key BYTEA NOT NULL, working_key BYTEA NOT NULL, rotated_ms BIGINT NOT NULL);
CREATE TABLE sessions(token_hash BYTEA PRIMARY KEY, uid BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL, via BIGINT);
CREATE TABLE s3_keys(access_key TEXT COLLATE "C" PRIMARY KEY, uid BIGINT NOT NULL,
    secret TEXT NOT NULL, created_ms BIGINT NOT NULL);
CREATE TABLE staged(drive BIGINT NOT NULL, part BIGINT NOT NULL,
    object BIGINT NOT NULL, acv BIGINT NOT NULL, uid BIGINT NOT NULL, path TEXT NOT NULL,
    mode BIGINT NOT NULL, created_ms BIGINT NOT NULL, ino BIGINT,
    new_file BIGINT NOT NULL DEFAULT 0, geometry TEXT NOT NULL DEFAULT 'single',
    base_version BIGINT, stale BIGINT NOT NULL DEFAULT 0, escrow_uid BIGINT,
    escrow_base BIGINT, escrow_end BIGINT, escrow_expires_ms BIGINT,
    PRIMARY KEY(drive, object));
CREATE TABLE staged_components(drive0 BIGINT NOT NULL, object0 BIGINT NOT NULL,
    idx BIGINT NOT NULL, drive BIGINT NOT NULL, part BIGINT NOT NULL,
    object BIGINT NOT NULL, PRIMARY KEY(drive0, object0, idx));
CREATE INDEX staged_components_obj ON staged_components(drive, object);
CREATE TABLE reserved(ino BIGINT PRIMARY KEY, created_ms BIGINT NOT NULL);
CREATE TABLE revocations(ino BIGINT PRIMARY KEY);
CREATE TABLE quotas(uid BIGINT PRIMARY KEY, limit_bytes BIGINT NOT NULL,
    used_bytes BIGINT NOT NULL);
CREATE TABLE escrows(ino BIGINT PRIMARY KEY, uid BIGINT NOT NULL,
    end_bytes BIGINT NOT NULL, expires_ms BIGINT NOT NULL);
CREATE TABLE counters(name TEXT COLLATE "C" PRIMARY KEY, value BIGINT NOT NULL);
CREATE TABLE drive_counts(drive BIGINT PRIMARY KEY, files BIGINT NOT NULL,
    stale BIGINT NOT NULL);
"#;

/// The migration from version `i + 1` to `i + 2` is `MIGRATIONS[i]`.
type Migration = fn(&Conn) -> StoreResult<()>;
const MIGRATIONS: &[Migration] = &[groups::migrate_1_to_2, keylog::migrate_2_to_3];
const _: () = assert!(MIGRATIONS.len() + 1 == SCHEMA_VERSION as usize);

impl PgStore {
    /// Connects to the database `conninfo` names (a `postgres://` URL, or `key=value` pairs
    /// such as `host=/path/to/socket dbname=nasd`) and brings its schema to this version,
    /// creating it in an empty database.
    pub fn connect(conninfo: &str) -> StoreResult<PgStore> {
        let mut s = PgStore {
            db: Conn::connect(conninfo)?,
            seal: None,
        };
        s.migrate()?;
        Ok(s)
    }

    /// Creates the schema in an empty database, or runs the migrations an older one needs,
    /// each step one transaction under [`MIGRATION_LOCK`].
    fn migrate(&mut self) -> StoreResult<()> {
        loop {
            let tx = self.db.transaction()?;
            tx.query_row(
                "SELECT pg_advisory_xact_lock($1)::text",
                params![MIGRATION_LOCK],
                |_| Ok(()),
            )?;
            tx.execute_batch(
                r#"CREATE TABLE IF NOT EXISTS meta(key TEXT COLLATE "C" PRIMARY KEY,
                   value BYTEA NOT NULL)"#,
            )?;
            let version =
                tx.query_opt("SELECT value FROM meta WHERE key = 'schema'", &[], |r| {
                    r.get::<Vec<u8>>(0)
                })?;
            let Some(version) = version else {
                Self::create_fresh(&tx)?;
                return tx.commit();
            };
            let version = <[u8; 4]>::try_from(version)
                .map(u32::from_le_bytes)
                .map_err(|_| StoreError::Db("unreadable schema version".into()))?;
            if version == 0 || version > SCHEMA_VERSION {
                return Err(StoreError::Db(format!(
                    "unsupported schema version {version} (this build reads 1 to {SCHEMA_VERSION})"
                )));
            }
            let Some(migrate) = MIGRATIONS.get(version as usize - 1) else {
                return tx.commit();
            };
            migrate(&tx)?;
            tx.execute(
                "UPDATE meta SET value = $1 WHERE key = 'schema'",
                params![(version + 1).to_le_bytes().to_vec()],
            )?;
            tx.commit()?;
        }
    }

    /// Runs `f` with commits that need not wait for the disk (`synchronous_commit = off`),
    /// for records whose loss in a crash of the server is harmless: an inode reservation, a
    /// staged upload, an abort, a renewal. Losing them makes an upload in flight fail at its
    /// commit, with nothing visible, and leaves an object the orphan scrub reclaims. The next
    /// durable commit makes them durable too (the WAL is flushed in order).
    fn relaxed<T>(&mut self, f: impl FnOnce(&mut Self) -> StoreResult<T>) -> StoreResult<T> {
        self.db.set_relaxed(true);
        let r = f(self);
        self.db.set_relaxed(false);
        r
    }

    /// A new database: every table as the current version has it, and the root directory.
    fn create_fresh(tx: &Conn) -> StoreResult<()> {
        tx.execute_batch(SCHEMA_V1)?;
        tx.execute_batch(groups::SCHEMA_GROUP_KEYS)?;
        keylog::migrate_2_to_3(tx)?;
        counts::create(tx)?;
        tx.execute(
            "INSERT INTO meta(key, value) VALUES ('schema', $1)",
            params![SCHEMA_VERSION.to_le_bytes().to_vec()],
        )?;
        tx.execute(
            "INSERT INTO inodes(ino, kind, mode, uid, gid, parent, ctime_us, mtime_us, acv)
             VALUES ($1, $2, $3, 0, 0, $1, $4, $4, 0)",
            params![
                ROOT_INO as i64,
                FileKind::Dir as u8,
                0o755u32,
                now_us() as i64
            ],
        )?;
        Ok(())
    }
}

const STAGED_COLS: &str = "drive, part, object, acv, uid, path, mode, created_ms, ino, new_file, \
     geometry, base_version, stale, escrow_uid, escrow_base, escrow_end, escrow_expires_ms";

/// A staged row; its components are read separately ([`PgStore::staged_components`]).
fn staged_of(r: &Row<'_>) -> StoreResult<Staged> {
    Ok(Staged {
        layout: FileLayout {
            version: 1,
            geometry: r.get(10)?,
            components: vec![ObjRef {
                drive: DriveId(r.get::<i64>(0)? as u64),
                partition: PartitionId(r.get::<i64>(1)? as u16),
                object: ObjectId(r.get::<i64>(2)? as u64),
            }],
            stale: r.get::<i64>(12)? as u64,
        },
        acv: r.get::<i64>(3)? as u64,
        uid: r.get(4)?,
        path: r.get(5)?,
        mode: r.get(6)?,
        created_ms: r.get::<i64>(7)? as u64,
        ino: r.get::<Option<i64>>(8)?.unwrap_or(0) as u64,
        new_file: r.get::<i64>(9)? != 0,
        base_version: r.get::<Option<i64>>(11)?.map(|v| v as u64),
        escrow: match r.get::<Option<u32>>(13)? {
            None => None,
            Some(uid) => Some(StagedEscrow {
                uid,
                base: r.get::<i64>(14)? as u64,
                end: r.get::<i64>(15)? as u64,
                expires_ms: r.get::<i64>(16)? as u64,
            }),
        },
    })
}

const INODE_COLS: &str = "ino, kind, mode, uid, gid, parent, ctime_us, mtime_us, acv, e2e, \
     geometry, layout_version, stale, size, dir_layout, target, charged, atime_us, rdev";

/// An inodes row, its columns from `at` on; a file's components are read separately
/// ([`PgStore::fill_layout`]).
fn inode_at(r: &Row<'_>, at: usize) -> StoreResult<Inode> {
    let kind: u8 = r.get(at + 1)?;
    let e2e: Option<Vec<u8>> = r.get(at + 9)?;
    let geometry: Option<String> = r.get(at + 10)?;
    Ok(Inode {
        ino: r.get::<i64>(at)? as u64,
        kind: FileKind::from_u8(kind)
            .map_err(|e| StoreError::Db(format!("inode of unknown kind {kind}: {e}")))?,
        mode: r.get(at + 2)?,
        uid: r.get(at + 3)?,
        gid: r.get(at + 4)?,
        parent: r.get::<i64>(at + 5)? as u64,
        ctime_us: r.get::<i64>(at + 6)? as u64,
        mtime_us: r.get::<i64>(at + 7)? as u64,
        acv: r.get::<i64>(at + 8)? as u64,
        e2e: e2e_of(e2e),
        layout: geometry
            .map(|geometry| -> StoreResult<FileLayout> {
                Ok(FileLayout {
                    version: r.get::<i64>(at + 11)? as u64,
                    geometry,
                    components: vec![],
                    stale: r.get::<i64>(at + 12)? as u64,
                })
            })
            .transpose()?,
        size: r.get::<Option<i64>>(at + 13)?.map(|v| v as u64),
        dir_layout: r.get(at + 14)?,
        target: r.get(at + 15)?,
        charged: r.get::<Option<i64>>(at + 16)?.map(|v| v as u64),
        atime_us: r.get::<i64>(at + 17)? as u64,
        rdev: r.get::<i64>(at + 18)? as u64,
    })
}

fn inode_of(r: &Row<'_>) -> StoreResult<Inode> {
    inode_at(r, 0)
}

/// A `(drive, part, object)` row.
fn obj_of(r: &Row<'_>) -> StoreResult<ObjRef> {
    Ok(ObjRef {
        drive: DriveId(r.get::<i64>(0)? as u64),
        partition: PartitionId(r.get::<i64>(1)? as u16),
        object: ObjectId(r.get::<i64>(2)? as u64),
    })
}

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

/// A byte count as the engine stores it: at most `i64::MAX` (no file or quota comes near).
fn db_bytes(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

fn file_escrow_of(r: &Row<'_>) -> StoreResult<FileEscrow> {
    Ok(FileEscrow {
        ino: r.get::<i64>(0)? as u64,
        uid: r.get(1)?,
        end: r.get::<i64>(2)? as u64,
        expires_ms: r.get::<i64>(3)? as u64,
    })
}

fn s3_key_of(r: &Row<'_>) -> StoreResult<S3Key> {
    Ok(S3Key {
        access_key_id: r.get(0)?,
        uid: r.get(1)?,
        secret: nasd_proto::manager::SecretString(r.get(2)?),
        created_ms: r.get::<i64>(3)? as u64,
    })
}

fn user_of(r: &Row<'_>) -> StoreResult<User> {
    Ok(User {
        uid: r.get(0)?,
        name: r.get(1)?,
        phc: r.get(2)?,
        admin: r.get(3)?,
        gid: r.get(4)?,
        gateway: r.get(5)?,
    })
}

/// The id for a new row named `name` in `table` (users or groups): `Exists` if the name is
/// taken; otherwise 0 for the first row, then one past the largest id but at least `floor`.
/// `table` and `id_col` are this module's own constants, never caller text.
fn new_named_id(
    tx: &Conn,
    table: &'static str,
    id_col: &'static str,
    name: &str,
    floor: u32,
) -> StoreResult<u32> {
    let taken: bool = tx.query_row(
        &format!("SELECT EXISTS(SELECT 1 FROM {table} WHERE name = $1)"),
        params![name],
        |r| r.get(0),
    )?;
    if taken {
        return Err(StoreError::Exists);
    }
    let next: u32 = tx.query_row(
        &format!("SELECT COALESCE(MAX({id_col}) + 1, 0) FROM {table}"),
        &[],
        |r| r.get(0),
    )?;
    Ok(if next == 0 { 0 } else { next.max(floor) })
}
