//! The manager's metadata behind one trait, so a second store (PostgreSQL, DESIGN.md) can sit
//! beside the embedded SQLite one and pass the same conformance suite ([`crate::conformance`]).
//!
//! Every method that changes the namespace is one transaction: after a crash a store shows
//! either all of a change or none of it. Changes are durable when the method returns, except
//! the records of an upload in flight — [`MetaStore::reserve_inode`],
//! [`MetaStore::forget_reserved`], [`MetaStore::put_staged`], [`MetaStore::abort_staged`],
//! [`MetaStore::touch_staged`] —
//! which a power failure (not a process crash) may lose until the next durable change: losing
//! them fails that upload's commit and leaves nothing visible. Per-file state is small and
//! bounded: kind, mode, owner, group, times, the file's layout (a geometry over at most
//! `COMPONENTS_MAX` component objects, seed 002 §3.3), its access_control_version, and, for
//! an encrypted file, its end-to-end state: seed 003's constant-size trusted record and side
//! data the manager stores for readers without being able to read it (issue 10).
//!
//! Quotas (seed 002 §3.2): a user with a [`Quota`] has every file they own carry a charge
//! ([`Inode::charged`], the file's logical size when last settled), and the quota's
//! `used_bytes` is the sum of those charges. Every method that creates, deletes, re-owns or
//! re-sizes a file moves `used_bytes` in the same transaction, so usage survives any crash.
//! Escrows — bytes reserved for writes in flight — are [`StagedEscrow`]s in staged records
//! and [`FileEscrow`]s on committed files; a method that takes or grows one checks, in the
//! same transaction, that `used + escrowed` stays within the limit
//! ([`StoreError::QuotaExceeded`]).

use nasd_crypto::seal::{KeySeal, SEALED_KEY_BYTES};
use nasd_crypto::{Key, KEY_BYTES};
use nasd_proto::manager::{
    E2eCommit, E2eState, FileKind, KeyLogEntry, PolicyReaders, UserKeys, Xattr,
};
use nasd_proto::{DriveId, ObjectId, PartitionId, Suite};

/// The meta row (`MetaStore::get_meta`) that holds the seal header of the drives' keys
/// (`nasd_crypto::seal::SealHeader`) when they are sealed.
pub const KEY_SEAL_META: &str = "key_seal";

/// The seal slot of key `which` (`drive`, `partition`, `working`) of drive `drive`.
fn drive_key_slot(drive: DriveId, which: &str) -> String {
    format!("manager drive {:016x}/{which}", drive.0)
}

/// What a store keeps of drive `drive`'s key `which`: the key sealed under `seal`, or in
/// clear without one.
pub fn stored_drive_key(seal: Option<&KeySeal>, drive: DriveId, which: &str, key: &Key) -> Vec<u8> {
    match seal {
        Some(s) => s.seal(&drive_key_slot(drive, which), key).to_vec(),
        None => key.expose().to_vec(),
    }
}

/// A drive key as a store kept it ([`stored_drive_key`]): a sealed one needs the seal; one in
/// clear reads with or without (a seal interrupted before this drive was put again).
pub fn drive_key_of(
    seal: Option<&KeySeal>,
    drive: DriveId,
    which: &str,
    stored: &[u8],
) -> StoreResult<Key> {
    let slot = drive_key_slot(drive, which);
    match (stored.len(), seal) {
        (KEY_BYTES, _) => {
            Key::from_slice(stored).ok_or_else(|| StoreError::Db(format!("{slot}: not a key")))
        }
        (SEALED_KEY_BYTES, Some(s)) => {
            let sealed: &[u8; SEALED_KEY_BYTES] = stored.try_into().expect("length checked");
            s.open(&slot, sealed)
                .ok_or_else(|| StoreError::Sealed(format!("{slot} does not open under this seal")))
        }
        (SEALED_KEY_BYTES, None) => Err(StoreError::Sealed(format!(
            "{slot} is sealed and the store was opened without the passphrase"
        ))),
        (n, _) => Err(StoreError::Db(format!("{slot}: {n} bytes, not a key"))),
    }
}

/// The root directory's inode number.
pub const ROOT_INO: u64 = 1;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("already exists")]
    Exists,
    #[error("not found")]
    NotFound,
    #[error("directory not empty")]
    NotEmpty,
    #[error("not a directory")]
    NotADirectory,
    #[error("is a directory")]
    IsADirectory,
    /// The file's layout, or its end-to-end state, is no longer what the change was based on.
    #[error("the file changed")]
    Conflict,
    /// The owner's quota has no room for what was asked (nothing changed).
    #[error("user {uid} is over quota: limit {limit} bytes, {used} used, {escrowed} escrowed, {asked} more asked")]
    QuotaExceeded {
        uid: u32,
        limit: u64,
        used: u64,
        escrowed: u64,
        asked: u64,
    },
    /// The file's owner has a quota and the change did not say what to charge for it
    /// (nothing changed; the caller measures the file and asks again).
    #[error("the owner has a quota: the file's size is needed")]
    ChargeNeeded,
    #[error("metadata store: {0}")]
    Db(String),
    /// The drives' keys are sealed (issue 21 §8) and the store was opened without the seal,
    /// or a sealed key does not open under the one given.
    #[error("the drives' keys are sealed: {0}")]
    Sealed(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub name: String,
    /// The credential verifier (`crate::users`): an OPAQUE password file, an enrollment
    /// code's hash, an Ed25519 public key, or a legacy Argon2id PHC string.
    pub phc: String,
    pub admin: bool,
    /// Primary group.
    pub gid: u32,
    /// May open sessions as other (non-admin) users without their credentials
    /// (`ActFor`): a trusted front end such as the S3 gateway.
    pub gateway: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub gid: u32,
    pub name: String,
}

/// A group's key pair as the store keeps it (issue 21 §5).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupKeyPair {
    /// The current version (0: none yet).
    pub version: u32,
    /// Its public half; `None` until the group has a key pair.
    pub public: Option<[u8; 32]>,
    /// A member left since this version was made: the group is due a new key pair.
    pub rekey: bool,
}

impl GroupKeyPair {
    /// The group has a key pair that file keys are wrapped to (one, and none due).
    pub fn is_current(&self) -> bool {
        self.public.is_some() && !self.rekey
    }
}

/// Where a file's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjRef {
    pub drive: DriveId,
    pub partition: PartitionId,
    pub object: ObjectId,
}

/// Where a file's bytes live: seed 002 §3.3's stripe map. A geometry in `nasd_ec`'s spec
/// syntax over component objects on distinct drives; `version` changes whenever a component
/// is replaced or marked stale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileLayout {
    pub version: u64,
    pub geometry: String,
    pub components: Vec<ObjRef>,
    /// Bit `i` set: component `i` missed writes or lost its drive, and must not be read until
    /// a rebuild makes it current.
    pub stale: u64,
}

impl FileLayout {
    /// The one-object layout.
    pub fn single(obj: ObjRef) -> FileLayout {
        FileLayout {
            version: 1,
            geometry: "single".into(),
            components: vec![obj],
            stale: 0,
        }
    }

    /// The first component.
    pub fn first(&self) -> ObjRef {
        self.components[0]
    }

    /// The name of a staged layout: its first component that is not stale (a fresh object; a
    /// stale one may be shared with the file's committed layout).
    pub fn key(&self) -> ObjRef {
        (0..self.components.len())
            .find(|&i| !self.is_stale(i))
            .map_or(self.components[0], |i| self.components[i])
    }

    /// Bits of the components that are real objects of this layout and not of `other` (what
    /// goes when `other` replaces it, or when it is dropped while `other` stays).
    pub fn not_in(&self, other: Option<&FileLayout>) -> Vec<ObjRef> {
        self.components
            .iter()
            .filter(|o| other.is_none_or(|l| !l.components.contains(o)))
            .copied()
            .collect()
    }

    pub fn is_stale(&self, i: usize) -> bool {
        self.stale >> i & 1 == 1
    }

    /// Whether the file's size lives in its one object's attributes (`single`), rather than
    /// with the manager (every layout that spreads a file over several objects, whose sizes
    /// include padding: seed 002 §3.3 "the aggregate length ... maintained by the striping
    /// manager").
    pub fn sized_by_object(&self) -> bool {
        self.components.len() == 1
    }
}

impl Inode {
    /// Whether the file's size and modify time are its one object's (a plaintext one-object
    /// file). An encrypted file's object is longer than its content when the content is
    /// shorter than a cipher block, so the manager keeps its size, as for a striped file.
    pub fn sized_by_object(&self) -> bool {
        self.e2e.is_none() && self.layout.as_ref().is_some_and(|l| l.sized_by_object())
    }
}

/// One file or directory. Bounded size: no per-block state at the manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub ino: u64,
    pub kind: FileKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// The directory holding this one (for directories: loop checks on rename).
    pub parent: u64,
    pub ctime_us: u64,
    /// Directories, and files spread over several objects; a one-object file's modify time
    /// comes from its object's attributes.
    pub mtime_us: u64,
    /// Files: where the bytes live.
    pub layout: Option<FileLayout>,
    /// Files spread over several objects: the logical size (one-object files: `None`, the
    /// object's attributes hold it).
    pub size: Option<u64>,
    /// Directories: the layout spec new files under it get (`None`: the parent's).
    pub dir_layout: Option<String>,
    /// The object's current access_control_version (seed 002 §2.4); bumped to revoke.
    pub acv: u64,
    /// Files written encrypted (issue 10): seed 003's trusted record, the writer who committed
    /// it and their signature, and the side data readers check against it. Constant size per
    /// file in what the manager trusts (the record); the side data it only stores.
    pub e2e: Option<E2eState>,
    /// Symbolic links: the target, as given.
    pub target: Option<String>,
    /// Files whose owner has a quota: the bytes charged to it, the file's logical size when
    /// it was last settled (`None` otherwise). Read from the store; writes of an inode change
    /// it only when the owner changes (a chown gives the new owner's charge here).
    pub charged: Option<u64>,
    /// Last access as `utimes` or a mount's reads (relatime) set it.
    pub atime_us: u64,
    /// Devices: the device number; 0 for every other kind.
    pub rdev: u64,
}

/// A user's quota (seed 002 §3.2's volume quota, per user): the most bytes of files (logical
/// sizes) the user may own, and the bytes charged now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quota {
    pub uid: u32,
    pub limit_bytes: u64,
    /// The sum of the charges of the files the user owns.
    pub used_bytes: u64,
}

/// Bytes escrowed for a staged upload (seed 002 §3.2): its capabilities let writes reach
/// logical offset `end`, of which `base` bytes were there already (a copy-on-write change
/// starts from the file's size; an upload from 0), so `end - base` is held against `uid`'s
/// quota until `expires_ms` (the capabilities' expiry) or the record goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagedEscrow {
    pub uid: u32,
    pub base: u64,
    pub end: u64,
    pub expires_ms: u64,
}

impl StagedEscrow {
    /// The bytes held at `now_ms` (none once expired).
    pub fn held(&self, now_ms: u64) -> u64 {
        if self.expires_ms > now_ms {
            self.end.saturating_sub(self.base)
        } else {
            0
        }
    }
}

/// Bytes escrowed on a committed file whose objects may grow until `expires_ms`: in-place
/// writes under a write lease, or a truncation in flight. Until settled — the file measured,
/// its charge set, the escrow gone — it holds `end - charged` against `uid`'s quota, expired
/// or not (the bytes may be on the drive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileEscrow {
    pub ino: u64,
    pub uid: u32,
    pub end: u64,
    pub expires_ms: u64,
}

/// A registered drive and the keys the manager shares with its partition.
#[derive(Clone, Debug)]
pub struct DriveRecord {
    pub drive: DriveId,
    pub addr: String,
    pub suite: Suite,
    pub drive_key: Key,
    pub partition: PartitionId,
    pub partition_key: Key,
    pub working_key: Key,
    pub rotated_ms: u64,
}

/// A fresh object a writer is filling: the new content of an existing file (an overwrite) or
/// the content of a new file. It becomes visible only when committed; until then no name
/// points to it, and if it is never committed it is aborted or expires, and its object goes.
///
/// A new file's inode is reserved before its object is created (a row without a directory
/// entry), so the object's `fs_specific` names the inode number the file will have; the
/// reservation carries the object from [`MetaStore::put_staged`] on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staged {
    /// The staged component objects; the record's key is the first.
    pub layout: FileLayout,
    /// The object's access_control_version when it was created.
    pub acv: u64,
    /// Who may commit it, and where.
    pub uid: u32,
    pub path: String,
    /// The mode the upload asked for (a new file's inode holds it too).
    pub mode: u32,
    pub created_ms: u64,
    /// The inode the object belongs to: the existing file's for an overwrite, the reserved
    /// one for a new file. 0 for a record written before schema 2 (it can only expire).
    pub ino: u64,
    /// Whether commit links the reserved inode `ino` as a new name (else it swaps the object
    /// into the existing inode `ino`).
    pub new_file: bool,
    /// For a copy-on-write change of an existing file (`StageWrite`): the layout version its
    /// copies were taken from; the commit is refused once the file's layout moved on. `None`
    /// for an upload, which replaces whatever is there.
    pub base_version: Option<u64>,
    /// The escrow its capabilities hold when the file's owner has a quota.
    pub escrow: Option<StagedEscrow>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// BLAKE3 of the token: a stolen database does not yield live tokens.
    pub token_hash: [u8; 32],
    pub uid: u32,
    pub expires_ms: u64,
    /// The gateway user that opened this session for `uid` (`ActFor`), if one did.
    pub via: Option<u32>,
}

/// An S3 access key of a user: the id is public, the secret signs requests (SigV4), so the
/// gateway that checks them must read it; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Key {
    pub access_key_id: String,
    pub uid: u32,
    pub secret: nasd_proto::manager::SecretString,
    pub created_ms: u64,
}

impl std::fmt::Debug for S3Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Key")
            .field("access_key_id", &self.access_key_id)
            .field("uid", &self.uid)
            .field("created_ms", &self.created_ms)
            .finish_non_exhaustive()
    }
}

/// A manager's lead of its database ([`MetaStore::lead`]), which lasts as long as the
/// connection that holds it: a database server's session lock, released when the session
/// ends, however it ends (the manager killed, its host gone, the server restarted).
pub struct Leadership {
    /// Changes, or closes, when the connection holding the lead ends; `None`: never ends.
    ended: Option<tokio::sync::watch::Receiver<()>>,
}

impl Leadership {
    /// The lead of an embedded store, which ends only with the process.
    pub fn embedded() -> Leadership {
        Leadership { ended: None }
    }

    /// A lead held by a connection whose end `ended` reports (its sender dropped).
    pub fn held_until(ended: tokio::sync::watch::Receiver<()>) -> Leadership {
        Leadership { ended: Some(ended) }
    }

    /// Completes when the lead has ended: the manager must then stop serving, since another
    /// one may lead already.
    pub async fn lost(self) {
        match self.ended {
            None => std::future::pending().await,
            Some(mut rx) => while rx.changed().await.is_ok() {},
        }
    }
}

pub trait MetaStore: Send {
    fn user_by_name(&self, name: &str) -> StoreResult<Option<User>>;
    fn user_by_uid(&self, uid: u32) -> StoreResult<Option<User>>;
    fn users(&self) -> StoreResult<Vec<User>>;
    /// Adds a user; `Exists` if the name is taken. Returns the new uid.
    fn add_user(&mut self, name: &str, phc: &str, admin: bool, gid: u32) -> StoreResult<u32>;
    /// Replaces a user's credential verifier (an Argon2id PHC string or an Ed25519 key) and, in
    /// the same transaction, forgets every session of the user: a session never outlives the
    /// credential it was opened with. `NotFound` for an unknown uid.
    fn set_credential(&mut self, uid: u32, phc: &str) -> StoreResult<()>;
    /// Replaces a user's credential with an OPAQUE password file and, when `sealed` is given
    /// and the user has keys, their sealed seed (keys unchanged), forgetting every session of
    /// the user, all in one transaction. `NotFound` for an unknown uid.
    fn set_password_file(&mut self, uid: u32, phc: &str, sealed: Option<&[u8]>) -> StoreResult<()>;
    /// `uid`'s entries of the key log, oldest first: each version of their keys as it was
    /// registered (with the signature of its change) and each reset.
    fn user_key_log(&self, uid: u32) -> StoreResult<Vec<KeyLogEntry>>;
    /// Appends a directory policy's readers, as their setter signed them, to the key log.
    fn log_policy_readers(&mut self, readers: &PolicyReaders) -> StoreResult<()>;
    /// Up to `max` entries of the key log (issue 21 §4) from place `from` (0: the first), in
    /// the order they were appended. Entries are never changed or removed.
    fn key_log(&self, from: u64, max: usize) -> StoreResult<Vec<KeyLogEntry>>;
    /// The number of entries in the key log.
    fn key_log_len(&self) -> StoreResult<u64>;
    /// Clears `uid`'s keys (their sealed seed and their wraps of group secrets with them) and
    /// appends a reset by admin `by` at `at_ms` at the version after the user's last, in one
    /// transaction; returns that version.
    /// `NotFound` for an unknown uid.
    fn reset_user_keys(&mut self, uid: u32, by: u32, at_ms: u64) -> StoreResult<u32>;
    /// The latest version of `uid`'s keys the key log holds, a reset's too (0: none).
    fn user_key_version(&self, uid: u32) -> StoreResult<u32>;
    /// Makes `uid` a gateway or not; turning it off forgets, in the same transaction, every
    /// session it opened for others. `NotFound` for an unknown uid.
    fn set_gateway(&mut self, uid: u32, on: bool) -> StoreResult<()>;

    fn group_by_name(&self, name: &str) -> StoreResult<Option<Group>>;
    fn group_by_gid(&self, gid: u32) -> StoreResult<Option<Group>>;
    /// Adds a group; `Exists` if the name is taken. Returns the new gid.
    fn add_group(&mut self, name: &str) -> StoreResult<u32>;
    fn add_member(&mut self, gid: u32, uid: u32) -> StoreResult<()>;
    /// Ends `uid`'s membership of `gid` (one `add_member` made, not a primary group) and,
    /// in the same transaction, drops their wrap of the group's secret and marks the group
    /// due a new key pair if it has one (`GroupKeyPair::rekey`). `NotFound` when `uid` is
    /// no added member of `gid`.
    fn remove_member(&mut self, gid: u32, uid: u32) -> StoreResult<()>;
    /// The members of `gid`: users with it as primary group and those added to it.
    fn members_of(&self, gid: u32) -> StoreResult<Vec<u32>>;

    /// A user's end-to-end keys (issue 10), if set.
    fn user_keys(&self, uid: u32) -> StoreResult<Option<UserKeys>>;
    /// Sets a user's end-to-end keys; a new version is also appended to the key log (without
    /// the sealed seed), in the same transaction.
    /// `NotFound` for an unknown uid.
    fn set_user_keys(&mut self, uid: u32, keys: &UserKeys) -> StoreResult<()>;
    /// A group's key pair. `NotFound` for an unknown group.
    fn group_key(&self, gid: u32) -> StoreResult<GroupKeyPair>;
    /// Makes `version` with `public` the group's key pair, dropping wraps of older versions
    /// and the mark of a due new key pair, keeping `link` (the previous version's secret
    /// wrapped to this one's public key) when given, and stores `wraps` of its secret to
    /// members (uid, wrap; replacing a wrap the uid holds). The same version again with the
    /// same public key adds or replaces wraps (and ignores `link`); an older version, or the
    /// same with another public key, is `Conflict`. `NotFound` for an unknown group.
    fn set_group_key(
        &mut self,
        gid: u32,
        version: u32,
        public: &[u8; 32],
        link: Option<&[u8]>,
        wraps: &[(u32, Vec<u8>)],
    ) -> StoreResult<()>;
    /// The links of group `gid`'s versions, newest first, at most `max` of them.
    fn group_key_links(&self, gid: u32, max: usize) -> StoreResult<Vec<Vec<u8>>>;
    /// The wrap of the group's current secret to `uid`, if there is one.
    fn group_wrap(&self, gid: u32, uid: u32) -> StoreResult<Option<Vec<u8>>>;
    /// Replaces file `ino`'s end-to-end state, provided its current state is the one `expect`
    /// names (nasd-e2e's `state_hash`; zeros: none); `Conflict` otherwise, `NotFound` if the
    /// file is gone.
    fn set_e2e(&mut self, ino: u64, expect: &[u8; 32], state: &E2eState) -> StoreResult<()>;
    /// Every group `uid` belongs to, its primary group included.
    fn groups_of(&self, uid: u32) -> StoreResult<Vec<u32>>;

    fn inode(&self, ino: u64) -> StoreResult<Option<Inode>>;
    /// How many names `i` has (POSIX `st_nlink`): its directory entries; for a directory,
    /// 2 plus its subdirectories. Counted when asked (a stat), not on every inode read, which
    /// path resolution does for each name.
    fn links(&self, i: &Inode) -> StoreResult<u32>;
    fn lookup(&self, parent: u64, name: &str) -> StoreResult<Option<u64>>;
    /// The entries of directory `parent` named after `after` in byte order (all when `after`
    /// is empty), at most `limit` of them.
    fn readdir(&self, parent: u64, after: &str, limit: usize) -> StoreResult<Vec<(String, Inode)>>;
    /// [`MetaStore::links`] of each inode of the [`MetaStore::readdir`] page of the same
    /// arguments, by inode number, counted in one statement (not one per entry).
    fn readdir_links(
        &self,
        parent: u64,
        after: &str,
        limit: usize,
    ) -> StoreResult<std::collections::HashMap<u64, u32>>;
    /// Creates `inode` (its `ino` is ignored) under `parent` as `name`, in one transaction.
    /// `Exists` if the name is taken, `NotFound`/`NotADirectory` for a bad parent.
    fn link_new(&mut self, parent: u64, name: &str, inode: &Inode) -> StoreResult<u64>;
    /// Removes the entry, and its inode with its last name: the inode is returned then (its
    /// objects are the caller's to remove), `None` while other names remain. `NotEmpty` for
    /// a directory with entries.
    fn unlink(&mut self, parent: u64, name: &str) -> StoreResult<Option<Inode>>;
    /// Gives the existing inode `ino` (not a directory) the further name `parent`/`name`.
    /// `Exists` if the name is taken, `IsADirectory` for a directory, `NotFound` for an
    /// unknown inode or parent.
    fn link(&mut self, ino: u64, parent: u64, name: &str) -> StoreResult<()>;
    /// Swaps two existing entries (`RENAME_EXCHANGE`): each name then names the other's
    /// inode, a moved directory's parent follows it, both inodes' change times and both
    /// directories' times are now. `NotFound` when either is missing.
    fn exchange(
        &mut self,
        a_parent: u64,
        a_name: &str,
        b_parent: u64,
        b_name: &str,
    ) -> StoreResult<()>;
    /// Inodes in the namespace (files, directories, links: `statfs`'s file count).
    fn inode_count(&self) -> StoreResult<u64>;
    /// Sets an inode's times and nothing else: the access and modify times when given, the
    /// change time always (its status changed: names, links, content, times). `NotFound` for
    /// an unknown inode.
    fn set_times(
        &mut self,
        ino: u64,
        atime_us: Option<u64>,
        mtime_us: Option<u64>,
        ctime_us: u64,
    ) -> StoreResult<()>;
    /// Moves an entry; an existing target file is replaced (and returned if that was its
    /// last name), an existing target directory only when empty and the source is a
    /// directory too. The moved inode's change time is now.
    fn rename(
        &mut self,
        from_parent: u64,
        from_name: &str,
        to_parent: u64,
        to_name: &str,
    ) -> StoreResult<Option<Inode>>;
    fn update_inode(&mut self, inode: &Inode) -> StoreResult<()>;
    /// Stores `inode` (a revocation's new access_control_version among it) and, in the same
    /// transaction, an intent saying its components have yet to take that version.
    /// `NotFound` for an unknown inode.
    fn begin_revocation(&mut self, inode: &Inode) -> StoreResult<()>;
    /// Forgets the revocation intent of `ino` (done, or the inode is gone).
    fn end_revocation(&mut self, ino: u64) -> StoreResult<()>;
    /// Inodes with a revocation intent, in order.
    fn revocations(&self) -> StoreResult<Vec<u64>>;
    /// The file counts as kept: every method that links, removes or changes a file's layout,
    /// stale mask or size moves them in its own transaction (linked files only; an upload in
    /// flight counts once committed).
    fn counts(&self) -> StoreResult<nasd_proto::manager::FileCounts>;
    /// The same counts found by walking every file, in one transaction, independently of the
    /// kept ones; with `fix`, the kept counts become these.
    fn recount(&mut self, fix: bool) -> StoreResult<nasd_proto::manager::FileCounts>;
    /// Linked files with a stale component or a component on a drive in `down`: how many, and
    /// the first `limit` inodes (those with a stale component first). Work in proportion to
    /// the stale files, and with two or more drives down to the files on them.
    fn degraded(&self, down: &[DriveId], limit: usize) -> StoreResult<(u64, Vec<u64>)>;
    /// Inodes of linked files with a stale component, in inode order after `after`, at most
    /// `limit` (an index of them, not a walk of every file).
    fn stale_files_after(&self, after: u64, limit: usize) -> StoreResult<Vec<u64>>;
    /// One name of inode `ino`: its directory and its name there (`None` for the root, a
    /// reserved inode or one that is gone).
    fn name_of(&self, ino: u64) -> StoreResult<Option<(u64, String)>>;
    /// Every object of `drive` that a file's layout names.
    fn objects_on_drive(&self, drive: DriveId) -> StoreResult<Vec<ObjectId>>;
    /// Inodes of files with a component on `drive`, in inode order from `after` on, at most
    /// `limit` (a rebuild or a scrub walks them in pages).
    fn files_with_drive(&self, drive: DriveId, after: u64, limit: usize) -> StoreResult<Vec<u64>>;
    /// Inodes of files, in inode order from `after` on, at most `limit`.
    fn files_after(&self, after: u64, limit: usize) -> StoreResult<Vec<u64>>;

    /// Reserves an inode number for a new file in directory `parent`: stores `inode` (its
    /// `ino` is ignored) with no directory entry, so no name shows it. `NotFound` or
    /// `NotADirectory` for a bad parent.
    fn reserve_inode(&mut self, parent: u64, inode: &Inode) -> StoreResult<u64>;
    /// Drops a reservation that never got a name (its object could not be made).
    fn forget_reserved(&mut self, ino: u64) -> StoreResult<()>;
    /// Links the reserved inode `ino`, now holding `layout` at version `acv`, as
    /// `parent`/`name`, in one transaction. `Exists` if the name is taken.
    fn link_reserved(
        &mut self,
        parent: u64,
        name: &str,
        ino: u64,
        layout: &FileLayout,
        acv: u64,
    ) -> StoreResult<()>;
    /// Records a staged upload; for a new file, in the same transaction, its reserved inode
    /// takes the object. With an escrow, the owner's quota must have room for it
    /// (`QuotaExceeded`, nothing recorded).
    fn put_staged(&mut self, s: &Staged) -> StoreResult<()>;
    /// The staged upload that `obj` is a component of.
    fn staged(&self, obj: ObjRef) -> StoreResult<Option<Staged>>;
    /// In one transaction, provided `parent`/`name` still holds the inode `replacing` (`None`:
    /// no entry), else `Exists`/`NotFound`: an overwrite points its inode at the staged object;
    /// a new file links its reserved inode under the name, replacing the entry there (as a
    /// rename would). The staged record goes. Returns the inode whose objects the caller then
    /// removes (the file as it was before; a replaced file only if that was its last name). `NotFound` if nothing is staged under `obj` (its
    /// first component), `IsADirectory` if the name is a directory.
    /// With `xattrs`, they become the file's extended attributes in the same transaction.
    /// `size` is the file's size after the upload, kept for layouts spread over several
    /// objects (`None` for a one-object file, whose object holds it); their modify time
    /// becomes now. The committed layout's version is one past the replaced layout's (1 for a
    /// new file), and its stale set is the staged one plus `stale`. A change staged on a base
    /// version the file's layout no longer has is refused (`Conflict`), and nothing changes.
    ///
    /// Quotas: when the file's owner has one, `charge` (the new content's logical size) becomes
    /// the file's charge and the owner's usage moves by the difference (`ChargeNeeded` without
    /// it). Growth the upload's live escrow does not cover (it expired, or the content passes
    /// its end) must fit the quota now (`QuotaExceeded`); `now_ms` says which escrows live.
    ///
    /// End to end (issue 10): with `e2e`, the file's state becomes its state in the same
    /// transaction, provided the file's current state is the one its `expect` names (when
    /// `expect` is not zeros: a copy-on-write change) and its record's key version is not
    /// older than the current record's (an upload started before an `unshare` must not commit
    /// content under the key it revoked); `Conflict` otherwise. Without `e2e` the file is
    /// plaintext from now on.
    #[allow(clippy::too_many_arguments)] // the entry, the upload and what the commit sets
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
    ) -> StoreResult<Option<Inode>>;
    /// Replaces the layout of file `ino` by `layout` (a rebuilt component, a component marked
    /// stale, components cut short) provided its version is still `expected`; the stored
    /// version becomes `expected + 1`, which is returned. With `size`, the file's size becomes
    /// that and its modify time now (and its charge, when its owner has a quota). `Conflict`
    /// if the layout moved on, `NotFound` if the file is gone.
    fn swap_layout(
        &mut self,
        ino: u64,
        expected: u64,
        layout: &FileLayout,
        size: Option<u64>,
    ) -> StoreResult<u64>;
    /// Forgets the staged record of `obj` and, for a new file, its reserved inode; returns
    /// the record (`None` if nothing was staged).
    fn abort_staged(&mut self, obj: ObjRef) -> StoreResult<Option<Staged>>;
    /// Moves the staged record of `obj` to `created_ms`, so a running upload whose capability
    /// was renewed does not expire; `NotFound` if nothing is staged.
    fn touch_staged(&mut self, obj: ObjRef, created_ms: u64) -> StoreResult<()>;
    /// Forgets staged records created before `before_ms` (with their reserved inodes) and
    /// reservations older than that which never got an object (a crash between reserving and
    /// staging); returns the records.
    fn expire_staged(&mut self, before_ms: u64) -> StoreResult<Vec<Staged>>;

    /// Waits until this manager leads the database: one manager serves a database at a time,
    /// the others stand by, each waiting here, and the first to get the lead when the leader's
    /// connection ends serves next ([`Leadership`]). Blocking. An embedded store (SQLite) has
    /// one manager, which leads at once.
    fn lead(&mut self) -> StoreResult<Leadership> {
        Ok(Leadership::embedded())
    }

    /// Keeps the drives' keys sealed under `seal` from now on (issue 21 §8): `drives` opens
    /// them and `put_drive` seals them ([`stored_drive_key`], [`drive_key_of`]). A key stored
    /// in clear still reads (a seal interrupted) until its drive is put again.
    fn set_key_seal(&mut self, seal: Option<std::sync::Arc<KeySeal>>);
    /// Seals the drives' keys under `seal` in place of the current seal (a new passphrase),
    /// in one transaction that also makes `header` (the new seal's) the [`KEY_SEAL_META`]
    /// row: after a crash either every key and the header are the new seal's or none is.
    /// The keys are read under the current seal first; one that does not open fails the
    /// change and changes nothing. The store keeps `seal` from then on.
    fn reseal_drive_keys(
        &mut self,
        header: &[u8],
        seal: std::sync::Arc<KeySeal>,
    ) -> StoreResult<()>;
    /// Rewrites the engine's storage of the drives so no page or old row version keeps what
    /// was replaced (after the drives' keys were sealed).
    fn compact(&mut self) -> StoreResult<()>;

    fn drives(&self) -> StoreResult<Vec<DriveRecord>>;
    /// Inserts or replaces a drive record.
    fn put_drive(&mut self, d: &DriveRecord) -> StoreResult<()>;

    /// The extended attributes of file `ino`, by name.
    fn xattrs(&self, ino: u64) -> StoreResult<Vec<Xattr>>;
    /// Makes `xattrs` the whole set of extended attributes of `ino` (`NotFound` if it is gone).
    fn set_xattrs(&mut self, ino: u64, xattrs: &[Xattr]) -> StoreResult<()>;

    /// Stores a new S3 key; `Exists` if its id is taken.
    fn put_s3_key(&mut self, k: &S3Key) -> StoreResult<()>;
    fn s3_key(&self, access_key_id: &str) -> StoreResult<Option<S3Key>>;
    /// The keys of `uid`, oldest first.
    fn s3_keys_of(&self, uid: u32) -> StoreResult<Vec<S3Key>>;
    /// Forgets key `access_key_id` of `uid`; whether it existed. When `uid` has no key left,
    /// the sessions gateways opened for `uid` end with it (same transaction).
    fn delete_s3_key(&mut self, uid: u32, access_key_id: &str) -> StoreResult<bool>;

    fn put_session(&mut self, s: &SessionRecord) -> StoreResult<()>;
    fn session(&self, token_hash: &[u8; 32]) -> StoreResult<Option<SessionRecord>>;
    /// Forgets one session (a logout); whether it existed.
    fn delete_session(&mut self, token_hash: &[u8; 32]) -> StoreResult<bool>;
    /// Forgets sessions that expired before `now_ms`.
    fn expire_sessions(&mut self, now_ms: u64) -> StoreResult<u64>;

    fn get_meta(&self, key: &str) -> StoreResult<Option<Vec<u8>>>;
    fn put_meta(&mut self, key: &str, value: &[u8]) -> StoreResult<()>;

    fn quota(&self, uid: u32) -> StoreResult<Option<Quota>>;
    /// Every quota, by uid.
    fn quotas(&self) -> StoreResult<Vec<Quota>>;
    /// Gives `uid` a limit of `limit_bytes`; returns whether the quota is new. A new quota
    /// starts with nothing used and every file of `uid` charged 0, in one transaction; the
    /// caller then measures each file ([`MetaStore::settle_charge`]). An existing one keeps
    /// its usage.
    fn set_quota(&mut self, uid: u32, limit_bytes: u64) -> StoreResult<bool>;
    /// Forgets `uid`'s quota, its files' charges and its escrows; whether it had one.
    fn remove_quota(&mut self, uid: u32) -> StoreResult<bool>;
    /// Files `uid` owns (linked or reserved), in inode order from `after`, at most `limit`.
    fn files_owned(&self, uid: u32, after: u64, limit: usize) -> StoreResult<Vec<Inode>>;
    /// If file `ino`'s charge is still `seen` (nobody settled it meanwhile), makes it `bytes`
    /// and moves its owner's usage by the difference; whether it did.
    fn settle_charge(&mut self, ino: u64, seen: u64, bytes: u64) -> StoreResult<bool>;
    /// Bytes escrowed for `uid` at `now_ms`: live staged escrows and every file escrow.
    fn escrowed(&self, uid: u32, now_ms: u64) -> StoreResult<u64>;
    /// Takes or extends the escrow of file `e.ino` (its end and expiry never move back). The
    /// bytes it adds must fit `e.uid`'s quota (`QuotaExceeded`, nothing changed) when
    /// `check`; an escrow that only renews, or a truncation that shrinks, passes unchecked.
    fn escrow_file(&mut self, e: &FileEscrow, now_ms: u64, check: bool) -> StoreResult<()>;
    fn file_escrow(&self, ino: u64) -> StoreResult<Option<FileEscrow>>;
    /// File escrows that expired by `now_ms` (their capabilities are dead: settle them).
    fn file_escrows_expired(&self, now_ms: u64) -> StoreResult<Vec<FileEscrow>>;
    /// Settles file `ino`, measured at `bytes`: its charge becomes that (usage moves by the
    /// difference) and, with `end_escrow`, its file escrow goes. A file that is gone only
    /// loses its escrow.
    fn settle_file(&mut self, ino: u64, bytes: u64, end_escrow: bool) -> StoreResult<()>;
    /// Replaces the escrow of the staged upload `obj` (a renewal) and moves its record's time
    /// to `now_ms`; bytes it adds beyond what it held live must fit the quota
    /// (`QuotaExceeded`). `NotFound` if nothing is staged.
    fn escrow_staged(&mut self, obj: ObjRef, e: &StagedEscrow, now_ms: u64) -> StoreResult<()>;
}

/// A listing page's inodes with their components (`comps`, by inode) in their layouts.
pub(crate) fn with_components(
    entries: Vec<(String, Inode)>,
    comps: &std::collections::HashMap<u64, Vec<ObjRef>>,
) -> Vec<(String, Inode)> {
    entries
        .into_iter()
        .map(|(n, mut i)| {
            if let Some(l) = &mut i.layout {
                l.components = comps.get(&i.ino).cloned().unwrap_or_default();
            }
            (n, i)
        })
        .collect()
}
