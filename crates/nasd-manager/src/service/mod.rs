//! The manager's policy: every request of the manager protocol, checked against POSIX-like
//! modes for user, group and other, then carried out on the metadata store and, where a file's
//! object is concerned, on its drive (seed 002 §3: NASD/NFS and NASD/AFS).
//!
//! A file's bytes live in the component objects of its layout; what a layout means on the
//! drives — allocation, attributes, revocation, capabilities — is the striping manager's
//! ([`crate::striping`]), and this module sees an object-like file. A new file gets the layout
//! its directory names (or an ancestor's, or the cluster's default). Owner, group, mode and
//! inode number are mirrored into every component's `fs_specific` attribute ([`FsAttr`]).
//! Capabilities are minted per component: read/getattr to readers, time-limited write
//! capabilities to writers, rights never wider than the mode allows; regions cover whole
//! objects unless the file's owner has a quota, when write capabilities end where the escrow
//! taken for them does ([`crate::quota`], seed 002 §3.2).
//! Revocation (chmod, chown, unlink, rename over a file) bumps the components'
//! access_control_version with a `setattr`, or removes the objects.
//!
//! Writers: a write capability for a file's committed objects is a lease ([`crate::lease`]),
//! one session at a time, ended by `ReturnCapability`. One-object files are written in place
//! under it; files spread over several objects change copy-on-write only (`StageWrite` stages
//! copies of the components, `Commit` swaps them in), so their committed objects are never
//! written except to repair them with the bytes they should hold.
//!
//! In a sticky directory (mode bit 0o1000) only an entry's owner, the directory's owner or an
//! admin may remove or rename the entry, or replace it by a rename ([`sticky_allows`]). A name
//! that comes into being (mkdir, create, the target of a rename) may not hold control
//! characters ([`check_new_name`]): they let one user forge what another sees in a listing.
//! Names stored before that rule stay reachable: lookups accept them, and they can be stat'ed,
//! read, renamed to a clean name and removed.
//!
//! # Layout
//! - this module: [`Policy`], [`Caller`], [`Manager`] and its state, the `fs_specific` record
//!   ([`FsAttr`]), and the errors every part shares;
//! - `perms`: modes and the sticky bit; `resolve`: paths checked and resolved;
//! - `namespace`: stats, listings, directories, names, links, extended attributes, layouts;
//! - `files`: create, prepare, commit, abort, renew, open, copy-on-write changes, repair,
//!   capabilities minted;
//! - `change`: mode, owners, size and times, and the revocations they bring;
//! - `locks`: who may lock a file (the lock table itself is [`crate::locks`]).

mod change;
mod files;
mod locks;
mod namespace;
mod perms;
mod resolve;
pub mod revoking;
#[cfg(test)]
mod tests;

pub use files::REPAIR_BYTES_MAX;
pub use perms::{may, sticky_allows, STICKY};
pub use resolve::{check_name, check_new_name, split_path};

use crate::drives::Registry;
use crate::lease::{Holder, Leases};
use crate::store::*;
use crate::{now_ms, MgrError, MgrResult};
use nasd_proto::manager::*;
use nasd_proto::{Protection, FS_SPECIFIC_BYTES};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Policy knobs, with the defaults `nasd manager init` writes.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    pub read_cap_ttl_ms: u64,
    pub write_cap_ttl_ms: u64,
    pub session_ttl_ms: u64,
    pub key_rotation_ms: u64,
    pub health_check_ms: u64,
    /// Minimum protection written into every capability (seed 002 Table 7).
    pub cap_min_protection: String,
    /// The layout of files whose directory (and every ancestor) names none.
    #[serde(default = "default_layout")]
    pub default_layout: String,
    /// The end-to-end policy of files whose directory (and every ancestor) names none
    /// (issue 10): encrypted, MT-EINT, versions signed for readers, 64 KiB blocks.
    #[serde(default = "default_e2e", with = "policy_spec")]
    pub default_e2e: E2ePolicy,
    /// The background scrub's read rate, bytes per second (0: no background scrub).
    #[serde(default = "default_scrub_rate")]
    pub scrub_bytes_per_s: u64,
    /// Time between the starts of background scrub passes (the first one this long after
    /// the manager starts).
    #[serde(default = "default_scrub_interval")]
    pub scrub_interval_ms: u64,
    /// How long a session's record locks outlive its last renewal ([`crate::locks`]): a
    /// client that dies loses its locks this long after it stopped renewing, and a manager
    /// that restarts grants only reclaims for this long.
    #[serde(default = "default_lock_lease")]
    pub lock_lease_ms: u64,
}

fn default_lock_lease() -> u64 {
    15_000
}

fn default_scrub_rate() -> u64 {
    32 << 20
}

fn default_scrub_interval() -> u64 {
    24 * 3_600_000
}

fn default_layout() -> String {
    crate::striping::DEFAULT_LAYOUT.into()
}

fn default_e2e() -> E2ePolicy {
    E2ePolicy::default()
}

/// A policy in the config file as its options (`encrypted,mt,auth=2,block=64K`).
mod policy_spec {
    use nasd_proto::manager::E2ePolicy;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &E2ePolicy, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::e2e::DirSpec::of_policy(p).render())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<E2ePolicy, D::Error> {
        let spec = String::deserialize(d)?;
        crate::e2e::DirSpec::parse_stored(&spec)
            .policy
            .ok_or_else(|| serde::de::Error::custom(format!("not a policy: {spec:?}")))
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            read_cap_ttl_ms: 10 * 60_000,
            write_cap_ttl_ms: 5 * 60_000,
            session_ttl_ms: 12 * 3_600_000,
            key_rotation_ms: 3_600_000,
            health_check_ms: 2_000,
            cap_min_protection: "integrity-data".into(),
            default_layout: default_layout(),
            default_e2e: default_e2e(),
            scrub_bytes_per_s: default_scrub_rate(),
            scrub_interval_ms: default_scrub_interval(),
            lock_lease_ms: default_lock_lease(),
        }
    }
}

/// Who is asking.
#[derive(Clone, Debug)]
pub struct Caller {
    pub uid: u32,
    pub name: String,
    pub admin: bool,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// The login session (from its token): who holds a write lease. 0 for the manager's own
    /// work and for tests.
    pub session: u64,
    /// The gateway whose session acts for this user, if one does (it signs their scheme-1
    /// writes with its own key).
    pub via: Option<u32>,
}

impl Caller {
    fn holder(&self) -> Holder {
        Holder {
            uid: self.uid,
            session: self.session,
        }
    }
}

/// `fs_specific` layout, version 1 (seed 002 §3: file-system attributes the drive stores
/// uninterpreted):
/// ```text
/// 0 u8 version (1)  1 u8 kind  2 u32 mode  6 u32 uid  10 u32 gid  14 u64 ino
/// 22 u8 flags (bit 0: the object holds an encrypted file's ciphertext)  23.. zero
/// ```
/// The flag lets a reader tell an encrypted file whose trusted record the manager lost from
/// a plaintext one (issue 10: a lost record is detected, not accepted).
pub struct FsAttr;

/// `fs_specific` flag: the object holds ciphertext of an end-to-end encrypted file.
pub const FS_FLAG_ENCRYPTED: u8 = 1;

impl FsAttr {
    /// The record of file `i`, whose objects hold ciphertext when `encrypted`.
    pub fn encode(i: &Inode, encrypted: bool) -> [u8; FS_SPECIFIC_BYTES] {
        let mut b = [0u8; FS_SPECIFIC_BYTES];
        b[0] = 1;
        b[1] = i.kind as u8;
        b[2..6].copy_from_slice(&i.mode.to_le_bytes());
        b[6..10].copy_from_slice(&i.uid.to_le_bytes());
        b[10..14].copy_from_slice(&i.gid.to_le_bytes());
        b[14..22].copy_from_slice(&i.ino.to_le_bytes());
        if encrypted {
            b[22] |= FS_FLAG_ENCRYPTED;
        }
        b
    }
    /// (mode, uid, gid, ino) when `b` holds a version-1 record.
    pub fn decode(b: &[u8; FS_SPECIFIC_BYTES]) -> Option<(u32, u32, u32, u64)> {
        if b[0] != 1 {
            return None;
        }
        Some((
            u32::from_le_bytes(b[2..6].try_into().ok()?),
            u32::from_le_bytes(b[6..10].try_into().ok()?),
            u32::from_le_bytes(b[10..14].try_into().ok()?),
            u64::from_le_bytes(b[14..22].try_into().ok()?),
        ))
    }
}

/// A refusal of extended attributes that no file may carry.
pub(super) fn invalid_xattrs(path: &str, why: &str) -> MgrError {
    MgrError::new(MgrStatus::InvalidArgument, format!("{path}: {why}"))
}

pub(crate) fn store_err(e: StoreError, path: &str) -> MgrError {
    let status = match e {
        StoreError::Conflict => {
            return MgrError::new(
                MgrStatus::Conflict,
                format!(
                    "{path}: the file changed since the change was staged; nothing was committed"
                ),
            )
        }
        StoreError::Exists => MgrStatus::Exists,
        StoreError::NotFound => MgrStatus::NoSuchPath,
        StoreError::NotEmpty => MgrStatus::NotEmpty,
        StoreError::NotADirectory => MgrStatus::NotADirectory,
        StoreError::IsADirectory => MgrStatus::IsADirectory,
        e @ StoreError::QuotaExceeded { .. } => {
            return MgrError::new(MgrStatus::QuotaExceeded, format!("{path}: {e}"))
        }
        StoreError::ChargeNeeded => {
            return MgrError::new(
                MgrStatus::Conflict,
                format!("{path}: the owner's quota changed meanwhile; nothing was done, try again"),
            )
        }
        StoreError::Db(d) => return MgrError::new(MgrStatus::Internal, d),
        e @ StoreError::Sealed(_) => return MgrError::new(MgrStatus::Internal, e.to_string()),
    };
    MgrError::new(status, path.to_string())
}

/// A store error no request could cause: internal, with its text.
pub(crate) fn db(e: StoreError) -> MgrError {
    MgrError::new(MgrStatus::Internal, e.to_string())
}

/// Refuses a policy whose lock lease is outside the bounds of [`crate::locks`].
fn check_lock_lease(ms: u64) -> MgrResult<()> {
    use crate::locks::{LOCK_LEASE_MS_MAX, LOCK_LEASE_MS_MIN};
    if (LOCK_LEASE_MS_MIN..=LOCK_LEASE_MS_MAX).contains(&ms) {
        return Ok(());
    }
    Err(MgrError::new(
        MgrStatus::InvalidArgument,
        format!("lock_lease_ms {ms} is outside {LOCK_LEASE_MS_MIN}..={LOCK_LEASE_MS_MAX}"),
    ))
}

/// A number for this run of the manager, new at every start (clients see a restart in it).
fn boot_id() -> u64 {
    let mut b = [0u8; 8];
    nasd_crypto::random_bytes(&mut b);
    u64::from_le_bytes(b).max(1)
}

pub(crate) fn denied(path: &str, what: &str) -> MgrError {
    MgrError::new(MgrStatus::PermissionDenied, format!("{path}: {what}"))
}

pub struct Manager {
    pub store: Mutex<Box<dyn MetaStore>>,
    pub drives: Registry,
    pub policy: Policy,
    min_protection: Protection,
    /// Write leases: one writer per file.
    pub leases: Leases,
    /// Record locks and `flock`, under leases of their sessions.
    pub locks: crate::locks::Locks,
    /// Connections for the manager's own reads and writes of file data (repair, truncation,
    /// scrub, rebuild).
    pub pool: Arc<nasd_client::pool::ConnPool>,
    /// Progress of the drive replacement and the background scrub.
    pub heal: crate::heal::HealState,
    /// AFS callbacks and the channels that carry their breaks (seed 002 §3.2).
    pub callbacks: crate::callbacks::Callbacks,
    /// Moves after every logout and credential change. A logged-in connection remembers the
    /// value it last saw; when it has moved, the connection checks that its session is still in
    /// the store before serving the next request. Nothing moves it on the hot path, so a
    /// request costs one atomic load.
    pub session_epoch: AtomicU64,
    /// The OPAQUE server keys (OPRF seed and key pair) password logins run under; kept in a
    /// key file of their own, never in the store ([`crate::login`]).
    pub opaque: nasd_client::opaque::ServerKeys,
    /// The key log's signing key, derived from the OPAQUE server keys ([`crate::keylog`]).
    pub key_log: crate::keylog::KeyLogSigner,
    /// Files whose revocation is in flight, which an `Open` waits for ([`revoking`]).
    pub revoking: revoking::Revoking,
    /// Per-call counters and the store's latency ([`crate::metrics`]).
    pub metrics: crate::metrics::ManagerMetrics,
}

impl Manager {
    /// A manager with OPAQUE server keys of its own making (tests; `nasd manager run` gives
    /// the keys of its key file, [`Manager::with_keys`]).
    pub fn new(store: Box<dyn MetaStore>, policy: Policy) -> MgrResult<Arc<Manager>> {
        Manager::with_keys(store, policy, nasd_client::opaque::ServerKeys::generate())
    }

    pub fn with_keys(
        store: Box<dyn MetaStore>,
        policy: Policy,
        opaque: nasd_client::opaque::ServerKeys,
    ) -> MgrResult<Arc<Manager>> {
        let records = store.drives().map_err(|e| store_err(e, "drives"))?;
        let min_protection = Protection::parse(&policy.cap_min_protection).ok_or_else(|| {
            MgrError::new(
                MgrStatus::InvalidArgument,
                "cap_min_protection is not a protection level",
            )
        })?;
        if policy.write_cap_ttl_ms > crate::scrub::WRITE_CAP_TTL_MS_MAX {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!(
                    "write_cap_ttl_ms {} exceeds {} (the orphan scrub's grace period must outlast every write capability)",
                    policy.write_cap_ttl_ms,
                    crate::scrub::WRITE_CAP_TTL_MS_MAX
                ),
            ));
        }
        check_lock_lease(policy.lock_lease_ms)?;
        Ok(Arc::new(Manager {
            store: Mutex::new(store),
            drives: Registry::load(records),
            leases: Leases::new(now_ms(), policy.write_cap_ttl_ms),
            locks: crate::locks::Locks::new(boot_id(), now_ms(), policy.lock_lease_ms),
            policy,
            min_protection,
            pool: Arc::new(nasd_client::pool::ConnPool::new()),
            heal: Default::default(),
            callbacks: Default::default(),
            session_epoch: AtomicU64::new(0),
            key_log: crate::keylog::KeyLogSigner::from_secret(&opaque.to_bytes()),
            opaque,
            revoking: Default::default(),
            metrics: Default::default(),
        }))
    }

    /// The store, locked (its wait and hold are timed: [`crate::metrics`]).
    pub(crate) fn st(&self) -> crate::metrics::StoreGuard<'_> {
        self.metrics.lock(&self.store)
    }

    pub(super) fn names(&self, uid: u32, gid: u32) -> (String, String) {
        let st = self.st();
        let u = st
            .user_by_uid(uid)
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| uid.to_string());
        let g = st
            .group_by_gid(gid)
            .ok()
            .flatten()
            .map(|g| g.name)
            .unwrap_or_else(|| gid.to_string());
        (u, g)
    }

    /// A stat of `i`; `times` is its size and modify time ([`Manager::file_times`]), or
    /// `None` where they could not be read (0 and the inode's).
    pub(super) fn stat_of(&self, i: &Inode, times: Option<(u64, u64)>) -> FileStat {
        self.stat_linked(i, times, None, self.names(i.uid, i.gid))
    }

    /// [`Manager::stat_of`] with `i`'s owner's and group's names, and its link count when
    /// it is known (`None`: counted here).
    pub(super) fn stat_linked(
        &self,
        i: &Inode,
        times: Option<(u64, u64)>,
        links: Option<u32>,
        (owner, group): (String, String),
    ) -> FileStat {
        let (mut size, mtime_us) = times.unwrap_or((i.size.unwrap_or(0), i.mtime_us));
        if let Some(t) = &i.target {
            size = t.len() as u64;
        }
        FileStat {
            ino: i.ino,
            kind: i.kind,
            mode: i.mode,
            uid: i.uid,
            gid: i.gid,
            owner,
            group,
            size,
            mtime_us,
            ctime_us: i.ctime_us,
            // A file about to be linked has the one name it will get.
            nlink: links
                .unwrap_or_else(|| self.st().links(i).unwrap_or(0))
                .max(1),
            atime_us: i.atime_us,
            rdev: i.rdev,
        }
    }

    /// Sessions may have ended (a logout, a credential change) or a membership changed:
    /// every live connection checks its own, and reads its user's groups again, before its
    /// next request ([`Manager::session_epoch`]).
    pub fn sessions_changed(&self) {
        self.session_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The minimum protection written into every capability (seed 002 Table 7).
    pub(crate) fn min_protection(&self) -> Protection {
        self.min_protection
    }
}
