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

use crate::drives::{self, Registry, MANAGER_PROTECTION};
use crate::lease::{Holder, Leases};
use crate::quota::{escrow_end, WriteBound};
use crate::store::*;
use crate::striping::{tolerated, Access};
use crate::{now_ms, now_us, MgrError, MgrResult};
use nasd_client::object::Target;
use nasd_proto::manager::*;
use nasd_proto::{AttrMask, Attributes, ObjectId, Protection, Rights, FS_SPECIFIC_BYTES};
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
        }
    }
}

/// Most bytes one `Repair` rewrites.
pub const REPAIR_BYTES_MAX: u64 = 64 << 20;

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

const R: u32 = 4;
const W: u32 = 2;
const X: u32 = 1;
/// The sticky bit of a directory's mode (S_ISVTX).
pub const STICKY: u32 = 0o1000;

/// Whether `c` may remove or rename `entry` out of `dir`, as far as the sticky bit goes (write
/// permission on `dir` is checked apart).
pub fn sticky_allows(c: &Caller, dir: &Inode, entry: &Inode) -> bool {
    dir.mode & STICKY == 0 || c.admin || c.uid == entry.uid || c.uid == dir.uid
}

fn check_sticky(c: &Caller, dir: &Inode, entry: &Inode, path: &str) -> MgrResult<()> {
    if sticky_allows(c, dir, entry) {
        return Ok(());
    }
    Err(denied(
        path,
        "the directory is sticky: only the entry's owner, the directory's owner or an admin \
         may remove, rename or replace it",
    ))
}

/// Whether `c` has all of `want` (r=4, w=2, x=1) on `i`. Admins pass every check.
fn invalid_xattrs(path: &str, why: &str) -> MgrError {
    MgrError::new(MgrStatus::InvalidArgument, format!("{path}: {why}"))
}

pub fn may(c: &Caller, i: &Inode, want: u32) -> bool {
    if c.admin {
        return true;
    }
    let bits = if i.uid == c.uid {
        (i.mode >> 6) & 7
    } else if c.groups.contains(&i.gid) {
        (i.mode >> 3) & 7
    } else {
        i.mode & 7
    };
    bits & want == want
}

/// Splits an absolute path into checked names: no `..` (path traversal), no empty or
/// over-long names, no NUL. `.` and repeated slashes are ignored.
pub fn split_path(path: &str) -> MgrResult<Vec<&str>> {
    if path.len() > PATH_BYTES_MAX {
        return Err(MgrError::new(
            MgrStatus::NameTooLong,
            format!("path of {} bytes", path.len()),
        ));
    }
    if !path.starts_with('/') {
        return Err(MgrError::new(
            MgrStatus::BadName,
            format!("{path}: paths must be absolute"),
        ));
    }
    let mut v = vec![];
    for name in path.split('/') {
        match name {
            "" | "." => continue,
            ".." => {
                return Err(MgrError::new(
                    MgrStatus::BadName,
                    format!("{path}: `..` is not allowed (path traversal)"),
                ))
            }
            n => {
                check_name(n).map_err(|e| e.at(path))?;
                v.push(n);
            }
        }
    }
    Ok(v)
}

/// A name that is about to be created: [`check_name`], and no control character — C0
/// (U+0000..U+001F: newline, CR, ESC, ...), DEL (U+007F) or C1 (U+0080..U+009F), which is
/// exactly Unicode's `Cc` category, `char::is_control`. The detail shows the name escaped.
/// A new inode of `kind` made by `c` in directory `dir` now (its number is the store's to
/// give): permission bits of `mode` only, owned by the caller, a symbolic link's `target`.
fn new_inode(c: &Caller, dir: &Inode, kind: FileKind, mode: u32, target: Option<&str>) -> Inode {
    let now = now_us();
    Inode {
        ino: 0,
        kind,
        mode: mode & 0o7777,
        uid: c.uid,
        gid: c.gid,
        parent: dir.ino,
        ctime_us: now,
        mtime_us: now,
        layout: None,
        size: None,
        dir_layout: None,
        acv: 0,
        e2e: None,
        target: target.map(str::to_string),
        charged: None,
    }
}

/// Where a prepared file is recorded as staged ([`Manager::prepare`]): its directory's names
/// joined, ending in `/` (no file's path does), so `Commit`, `Renew` and `Abort` find it.
fn prepared_marker(dir: &[&str]) -> String {
    match dir {
        [] => "/".into(),
        names => format!("/{}/", names.join("/")),
    }
}

fn is_prepared(s: &Staged) -> bool {
    s.new_file && s.path.ends_with('/')
}

/// Whether `path` names the prepared file `s`: as a file in its directory (a commit) or as
/// the directory itself (`Renew`, `Abort`).
fn is_prepared_at(s: &Staged, path: &str) -> bool {
    let Ok(names) = split_path(path) else {
        return false;
    };
    is_prepared(s)
        && (prepared_marker(&names) == s.path
            || names
                .split_last()
                .is_some_and(|(_, dir)| prepared_marker(dir) == s.path))
}

pub fn check_new_name(path: &str, n: &str) -> MgrResult<()> {
    check_name(n)?;
    match n.chars().find(|ch| ch.is_control()) {
        None => Ok(()),
        Some(ch) => Err(MgrError::new(
            MgrStatus::BadName,
            format!(
                "\"{}\": a name may not contain a control character (U+{:04X})",
                path.escape_debug(),
                ch as u32
            ),
        )),
    }
}

/// A name of an existing file or directory, as lookups accept it (also names stored before
/// [`check_new_name`]'s rule).
pub fn check_name(n: &str) -> MgrResult<()> {
    if n.len() > NAME_BYTES_MAX {
        return Err(MgrError::new(
            MgrStatus::NameTooLong,
            format!("name of {} bytes (at most {NAME_BYTES_MAX})", n.len()),
        ));
    }
    if n.is_empty() || n == "." || n == ".." || n.contains('/') || n.contains('\0') {
        return Err(MgrError::new(
            MgrStatus::BadName,
            format!("invalid name {n:?}"),
        ));
    }
    Ok(())
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
    };
    MgrError::new(status, path.to_string())
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
    /// Connections for the manager's own reads and writes of file data (repair, truncation,
    /// scrub, rebuild).
    pub pool: Arc<nasd_client::pool::ConnPool>,
    /// Progress of the drive replacement and the background scrub.
    pub heal: crate::heal::HealState,
    /// AFS callbacks and the channels that carry their breaks (seed 002 §3.2).
    pub callbacks: crate::callbacks::Callbacks,
}

impl Manager {
    pub fn new(store: Box<dyn MetaStore>, policy: Policy) -> MgrResult<Arc<Manager>> {
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
        Ok(Arc::new(Manager {
            store: Mutex::new(store),
            drives: Registry::load(records),
            leases: Leases::new(now_ms(), policy.write_cap_ttl_ms),
            policy,
            min_protection,
            pool: Arc::new(nasd_client::pool::ConnPool::new()),
            heal: Default::default(),
            callbacks: Default::default(),
        }))
    }

    pub(crate) fn st(&self) -> std::sync::MutexGuard<'_, Box<dyn MetaStore>> {
        self.store.lock().expect("store lock")
    }

    /// Resolves `path`, checking search (x) permission on every directory on the way and
    /// following symbolic links, the last name's too (POSIX path resolution): a relative
    /// target continues from the link's directory, an absolute one from the root, `..` in a
    /// target goes up (the root's parent is the root). At most [`SYMLINK_HOPS_MAX`] links.
    pub(crate) fn resolve(&self, c: &Caller, path: &str) -> MgrResult<Inode> {
        let names = split_path(path)?;
        let st = self.st();
        let root = st
            .inode(ROOT_INO)
            .map_err(|e| store_err(e, "/"))?
            .ok_or_else(|| MgrError::new(MgrStatus::Internal, "no root directory"))?;
        let mut cur = root.clone();
        // Names still to walk, the next one last.
        let mut pending: Vec<std::borrow::Cow<'_, str>> =
            names.into_iter().rev().map(Into::into).collect();
        let mut hops = 0;
        while let Some(n) = pending.pop() {
            if cur.kind != FileKind::Dir {
                return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
            }
            if !may(c, &cur, X) {
                return Err(denied(path, "search permission on a directory on the path"));
            }
            let next = if n == ".." {
                // Only a link target holds `..` (split_path refuses it in a request).
                cur.parent
            } else {
                st.lookup(cur.ino, &n)
                    .map_err(|e| store_err(e, path))?
                    .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?
            };
            let next = st
                .inode(next)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
            if next.kind != FileKind::Symlink {
                cur = next;
                continue;
            }
            let target = next.target.unwrap_or_default();
            hops += 1;
            if hops > SYMLINK_HOPS_MAX {
                return Err(MgrError::new(MgrStatus::TooManyLinks, path.to_string()));
            }
            if target.starts_with('/') {
                cur = root.clone();
            }
            pending.extend(
                target
                    .split('/')
                    .rev()
                    .filter(|p| !p.is_empty() && *p != ".")
                    .map(|p| std::borrow::Cow::Owned(p.to_string())),
            );
        }
        Ok(cur)
    }

    /// The parent directory of `path` (with write and search permission checked when
    /// `modify`) and the last name.
    pub(crate) fn parent<'p>(
        &self,
        c: &Caller,
        path: &'p str,
        modify: bool,
    ) -> MgrResult<(Inode, &'p str)> {
        let names = split_path(path)?;
        let Some((last, _)) = names.split_last() else {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: the root has no parent"),
            ));
        };
        let last = *last;
        let cut = path.trim_end_matches('/').len() - last.len();
        let dir = self.resolve(c, &path[..cut.max(1)])?;
        if dir.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        if modify && !may(c, &dir, W | X) {
            return Err(denied(path, "write permission on the parent directory"));
        }
        // A name about to be made must be clean; an existing one (from before the rule) may
        // still be changed or removed. The lookup runs only for names that fail the rule.
        if modify && check_new_name(path, last).is_err() {
            let exists = self
                .st()
                .lookup(dir.ino, last)
                .map_err(|e| store_err(e, path))?
                .is_some();
            if !exists {
                check_new_name(path, last)?;
            }
        }
        Ok((dir, last))
    }

    fn names(&self, uid: u32, gid: u32) -> (String, String) {
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
    fn stat_of(&self, i: &Inode, times: Option<(u64, u64)>) -> FileStat {
        let (owner, group) = self.names(i.uid, i.gid);
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
            nlink: self.st().links(i).unwrap_or(0).max(1),
        }
    }

    /// The minimum protection written into every capability (seed 002 Table 7).
    pub(crate) fn min_protection(&self) -> Protection {
        self.min_protection
    }

    /// Revokes every capability of a file (its components' access_control_version moves on)
    /// and mirrors the inode (as given: a chmod's new mode included) into their
    /// `fs_specific`. Crash-safe: the inode with its new version is stored first together with
    /// a revocation intent, then the drives take the version, then the intent goes; an intent
    /// a crash left is completed before the manager serves again
    /// ([`Manager::complete_revocations`]), so capabilities are never minted from a version
    /// the drives do not have for long. Components that could not take the new version are
    /// marked stale (the layout covers them, or the revocation fails and its intent stays).
    async fn revoke_and_mirror(&self, mut i: Inode) -> MgrResult<Inode> {
        i.acv += 1;
        self.st()
            .begin_revocation(&i)
            .map_err(|e| store_err(e, "inode"))?;
        self.finish_revocation(i).await
    }

    /// The drives' half of a revocation whose intent is stored (see
    /// [`Manager::revoke_and_mirror`]).
    async fn finish_revocation(&self, mut i: Inode) -> MgrResult<Inode> {
        let missed = self.revoke_layout(&i).await?;
        if let (Some(l), true) = (&mut i.layout, missed != 0) {
            l.stale |= missed;
            l.version += 1;
            self.st()
                .update_inode(&i)
                .map_err(|e| store_err(e, "inode"))?;
        }
        self.st()
            .end_revocation(i.ino)
            .map_err(|e| store_err(e, "inode"))?;
        Ok(i)
    }

    /// Whether a revocation intent is stored (a crash or an unreachable drive interrupted it).
    pub fn revocations_pending(&self) -> bool {
        self.st().revocations().is_ok_and(|r| !r.is_empty())
    }

    /// Completes the revocations a crash interrupted (their intents in the store); returns
    /// how many are still pending (a drive did not answer; retried later).
    pub async fn complete_revocations(&self) -> usize {
        let pending = match self.st().revocations() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("reading revocation intents: {e}");
                return 0;
            }
        };
        let mut left = 0;
        for ino in pending {
            let i = match self.st().inode(ino) {
                Ok(Some(i)) => i,
                Ok(None) => {
                    let _ = self.st().end_revocation(ino);
                    continue;
                }
                Err(_) => {
                    left += 1;
                    continue;
                }
            };
            match self.finish_revocation(i).await {
                Ok(_) => tracing::info!(ino, "interrupted revocation completed"),
                Err(e) => {
                    tracing::warn!(ino, "interrupted revocation still pending: {}", e.detail);
                    left += 1;
                }
            }
        }
        left
    }

    /// Gives `c` the write lease of file `i` (or extends theirs) for a write capability's
    /// lifetime; `Busy` while another session holds it. The first lease on a file after a
    /// manager restart revokes older capabilities first; the inode returned carries the
    /// version to mint from.
    async fn take_lease(&self, c: &Caller, path: &str, i: &Inode) -> MgrResult<Inode> {
        let now = now_ms();
        let until = now + self.policy.write_cap_ttl_ms;
        match self.leases.take(i.ino, c.holder(), now, until) {
            Ok(t) if t.revoke_first => match self.revoke_and_mirror(i.clone()).await {
                Ok(i) => Ok(i),
                Err(e) => {
                    self.leases.release(i.ino, c.holder(), now);
                    Err(e.at(path))
                }
            },
            Ok(_) => Ok(i.clone()),
            Err(busy) => {
                let who = self.names(busy.holder.uid, 0).0;
                Err(MgrError::new(
                    MgrStatus::Busy,
                    format!(
                        "{path}: {who} is writing it (lease for {} s more)",
                        busy.until_ms.saturating_sub(now).div_ceil(1000)
                    ),
                ))
            }
        }
    }

    /// The layout and capabilities for `c` on `i`.
    fn mint(
        &self,
        c: &Caller,
        path: &str,
        i: &Inode,
        grant: Access,
    ) -> MgrResult<(Layout, Vec<CapGrant>)> {
        let (rights, bound) = match grant {
            Access::Read => (
                Rights::READ.union(Rights::GETATTR),
                WriteBound {
                    end: WRITE_END_UNBOUNDED,
                    expiry_ms: now_ms() + self.policy.read_cap_ttl_ms,
                },
            ),
            Access::Write(bound) => {
                let mut r = Rights::WRITE
                    .union(Rights::GETATTR)
                    .union(Rights::FLUSH)
                    .union(Rights::BLOCKSREQUIRED);
                if may(c, i, R) {
                    r = r.union(Rights::READ);
                }
                (r, bound)
            }
        };
        // Scheme 1 (seed 001 §3.3.1): the drives store only writes the writer signed.
        let writer_key = match grant {
            Access::Write(_) if self.policy_of_file(i)?.auth == WriterAuth::Signed => {
                Some(self.writer_key_of(c, path)?)
            }
            _ => None,
        };
        self.mint_layout(&c.name, path, i, rights, bound, writer_key)
    }

    /// The layout spec new files under `dir` get: the nearest one named by `dir` or an
    /// ancestor, else the cluster's default.
    pub(crate) fn layout_spec_for(&self, dir: &Inode) -> MgrResult<String> {
        let st = self.st();
        let mut cur = dir.clone();
        loop {
            if let Some(g) = cur
                .dir_layout
                .as_deref()
                .and_then(|s| crate::e2e::DirSpec::parse_stored(s).geometry)
            {
                return Ok(g);
            }
            if cur.ino == ROOT_INO {
                return Ok(self.policy.default_layout.clone());
            }
            cur = st
                .inode(cur.parent)
                .map_err(|e| store_err(e, "directory"))?
                .ok_or_else(|| {
                    MgrError::new(MgrStatus::Internal, "a directory's parent is gone")
                })?;
        }
    }

    /// The layout spec new files under the directory `path` get: the geometry, then the
    /// end-to-end policy's options.
    pub fn layout_get(&self, c: &Caller, path: &str) -> MgrResult<String> {
        let d = self.resolve(c, path)?;
        if d.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        let geometry = self.layout_spec_for(&d)?;
        let policy = self.policy_for(&d)?;
        Ok(format!("{geometry},{}", self.show_policy(&policy)))
    }

    /// Sets the layout spec of the directory `path` (its owner or an admin; `""` forgets it).
    /// Checked now, against the drives registered now: a layout that needs more drives than
    /// the cluster has is refused.
    pub fn layout_set(&self, c: &Caller, path: &str, spec: &str) -> MgrResult<()> {
        let mut d = self.resolve(c, path)?;
        if d.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        if !c.admin && d.uid != c.uid {
            return Err(denied(
                path,
                "only the directory's owner may set its layout",
            ));
        }
        if spec.is_empty() {
            d.dir_layout = None;
        } else {
            // What the spec leaves out stays as the directory has it now.
            let (geometry, policy) = self.merge_spec(&d, spec, path)?;
            let geometry = match geometry {
                Some(g) => {
                    let geo = crate::striping::geometry_of(&g)?;
                    geo.check_drives(self.drives.count()).map_err(|e| {
                        MgrError::new(MgrStatus::InvalidArgument, format!("{path}: {e}"))
                    })?;
                    geo.to_string()
                }
                None => self.layout_spec_for(&d)?,
            };
            let policy = match policy {
                Some(p) => p,
                None => self.policy_for(&d)?,
            };
            let spec = crate::e2e::DirSpec {
                geometry: Some(geometry),
                policy: Some(policy),
            };
            d.dir_layout = Some(spec.render());
        }
        self.st().update_inode(&d).map_err(|e| store_err(e, path))
    }

    pub async fn stat(&self, c: &Caller, path: &str) -> MgrResult<FileStat> {
        let i = self.resolve(c, path)?;
        let times = self.file_times(&i).await.map_err(|e| e.at(path))?;
        Ok(self.stat_of(&i, Some(times)))
    }

    /// [`Manager::stat`] of the last name itself: a symbolic link is not followed (lstat).
    pub async fn lstat(&self, c: &Caller, path: &str) -> MgrResult<FileStat> {
        if split_path(path)?.is_empty() {
            return self.stat(c, path).await;
        }
        let (dir, name) = self.parent(c, path, false)?;
        let i = self
            .entry(&dir, name, path)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
        let times = self.file_times(&i).await.map_err(|e| e.at(path))?;
        Ok(self.stat_of(&i, Some(times)))
    }

    /// A page of directory `path`: at most `limit` (and [`READDIR_PAGE_ENTRIES_MAX`]) entries
    /// named after `after`.
    pub async fn readdir(
        &self,
        c: &Caller,
        path: &str,
        after: &str,
        limit: usize,
        xattr: Option<&str>,
    ) -> MgrResult<Vec<DirEntry>> {
        let d = self.resolve(c, path)?;
        if d.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        if !may(c, &d, R | X) {
            return Err(denied(path, "read permission on the directory"));
        }
        let limit = limit.min(READDIR_PAGE_ENTRIES_MAX);
        let entries = self
            .st()
            .readdir(d.ino, after, limit)
            .map_err(|e| store_err(e, path))?;
        // One-object files' sizes come from their drives: ask for all of them at once
        // (pipelined connections); the others' are in the store.
        let mut set = tokio::task::JoinSet::new();
        for (k, (_, i)) in entries.iter().enumerate() {
            let Some(o) = i
                .layout
                .as_ref()
                .filter(|l| l.sized_by_object())
                .map(|l| l.first())
            else {
                continue;
            };
            let (conn, rec) = match self.drives.conn(o.drive).await {
                Ok(x) => x,
                Err(_) => continue,
            };
            set.spawn(async move {
                let auth = nasd_client::Auth::Key {
                    kind: nasd_proto::KeyType::Working,
                    key: rec.working_key.clone(),
                    suite: rec.suite,
                    drive: rec.drive,
                };
                let t = Target {
                    partition: o.partition,
                    object: o.object,
                    protection: MANAGER_PROTECTION,
                };
                (k, conn.getattr(&auth, t).await.ok())
            });
        }
        let mut times: Vec<Option<(u64, u64)>> = entries
            .iter()
            .map(|(_, i)| match &i.layout {
                Some(l) if l.sized_by_object() => None,
                _ => Some((i.size.unwrap_or(0), i.mtime_us)),
            })
            .collect();
        while let Some(r) = set.join_next().await {
            if let Ok((k, Some(a))) = r {
                // An encrypted file's size is kept here, its modify time is its object's.
                let i = &entries[k].1;
                let size = match i.sized_by_object() {
                    true => a.logical_size,
                    false => i.size.unwrap_or(0),
                };
                times[k] = Some((size, a.file_mtime_us()));
            }
        }
        // The attribute asked for, of each file the caller may read (its value tells about
        // the content: an ETag is the content's MD5).
        let mut values = vec![None; entries.len()];
        if let Some(x) = xattr {
            let st = self.st();
            for (k, (_, i)) in entries.iter().enumerate() {
                if i.kind == FileKind::File && may(c, i, R) {
                    values[k] = st
                        .xattrs(i.ino)
                        .map_err(|e| store_err(e, path))?
                        .into_iter()
                        .find(|a| a.name == x && a.value.len() <= READDIR_XATTR_BYTES_MAX)
                        .map(|a| a.value);
                }
            }
        }
        Ok(entries
            .iter()
            .zip(times)
            .zip(values)
            .map(|(((name, i), t), xattr)| DirEntry {
                name: name.clone(),
                stat: self.stat_of(i, t),
                xattr,
            })
            .collect())
    }

    pub fn mkdir(&self, c: &Caller, path: &str, mode: u32) -> MgrResult<()> {
        let (dir, name) = self.parent(c, path, true)?;
        let i = new_inode(c, &dir, FileKind::Dir, mode, None);
        self.st()
            .link_new(dir.ino, name, &i)
            .map_err(|e| store_err(e, path))?;
        Ok(())
    }

    pub fn rmdir(&self, c: &Caller, path: &str) -> MgrResult<()> {
        let (dir, name) = self.parent(c, path, true)?;
        let mut st = self.st();
        let ino = st.lookup(dir.ino, name).map_err(|e| store_err(e, path))?;
        let i = ino
            .and_then(|ino| st.inode(ino).ok().flatten())
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
        if i.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        check_sticky(c, &dir, &i, path)?;
        st.unlink(dir.ino, name).map_err(|e| store_err(e, path))?;
        Ok(())
    }

    /// Starts writing a file at `path`. Searching the directory needs its search permission;
    /// what else is needed depends on the name (POSIX):
    /// - an existing file is overwritten — never with `exclusive` (`Exists`) — which needs
    ///   write permission on the file, not on its directory ([`Manager::stage_overwrite`]);
    /// - a new name needs write permission on the directory. Its inode is reserved first (no
    ///   name shows it), so the object's `fs_specific` carries the inode number the file will
    ///   have; then the object is created. With `exclusive`, the name is linked at once and the
    ///   reply is `Opened` (an empty file: nothing partial can show); without, the upload is
    ///   staged and the name appears only at [`Manager::commit`].
    ///
    /// A crash at any step leaves at most an unreachable object and a reservation, which the
    /// orphan scrub reclaims.
    ///
    /// The writer may write `extend_by` bytes of content, escrowed against the owner's quota
    /// when there is one (seed 002 §3.2).
    pub async fn create(
        &self,
        c: &Caller,
        path: &str,
        mode: u32,
        exclusive: bool,
        extend_by: u64,
    ) -> MgrResult<MgrReply> {
        let (dir, name) = self.parent(c, path, false)?;
        if !may(c, &dir, X) {
            return Err(denied(path, "search permission on the parent directory"));
        }
        let existing = self
            .st()
            .lookup(dir.ino, name)
            .map_err(|e| store_err(e, path))?;
        if let Some(ino) = existing {
            if exclusive {
                return Err(MgrError::new(MgrStatus::Exists, path.to_string()));
            }
            let i = self
                .st()
                .inode(ino)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
            if i.kind == FileKind::Symlink {
                return Err(MgrError::new(
                    MgrStatus::InvalidArgument,
                    format!("{path}: a symbolic link; write to its target"),
                ));
            }
            return self.stage_overwrite(c, path, i, extend_by).await;
        }
        if !may(c, &dir, W | X) {
            return Err(denied(path, "write permission on the parent directory"));
        }
        // The name is about to be made: it must be clean.
        check_new_name(path, name)?;
        let spec = self.layout_spec_for(&dir)?;
        let geo = crate::striping::geometry_of(&spec)?;
        // A new file is its creator's: refuse before any drive work if the quota is full.
        self.precheck(c.uid, escrow_end(&geo, 0, extend_by), path)?;
        let encrypted = self.policy_for(&dir)?.encrypted;
        let i = self.reserve_inode(c, &dir, mode).map_err(|e| e.at(path))?;
        let layout = match self.create_layout(&spec, &i, encrypted).await {
            Ok(l) => l,
            Err(e) => {
                self.forget_reservation(i.ino);
                return Err(e.at(path));
            }
        };
        let size = (!layout.sized_by_object()).then_some(0);
        let i = Inode {
            layout: Some(layout),
            size,
            acv: 0,
            ..i
        };
        if exclusive {
            self.link_new_file(c, path, dir.ino, name, i, extend_by)
                .await
        } else {
            self.stage_new_file(c, path, i, extend_by).await
        }
    }

    /// Stages `count` new files of `mode` in directory `dir` before their names are known
    /// (seed 002 §3: the manager stays off the data path; a client writing many small files
    /// then pays one round trip per file, `Commit`, instead of two). Each is what `create`
    /// stages for a new name, recorded at the directory's marker path (`dir/`) instead of a
    /// file's: its objects are made on every drive at once, so each drive group-commits the
    /// batch. The directory must be writable now; the commit checks again.
    ///
    /// Under a quota each file escrows `extend_by` bytes, and only as many files are prepared
    /// as the quota has room for (at least one, else `QuotaExceeded`).
    pub async fn prepare(
        &self,
        c: &Caller,
        dir_path: &str,
        mode: u32,
        count: u32,
        extend_by: u64,
    ) -> MgrResult<Vec<PreparedFile>> {
        if count == 0 || count > PREPARED_FILES_MAX {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("prepare {count} files: from 1 to {PREPARED_FILES_MAX} at once"),
            ));
        }
        let marker = prepared_marker(&split_path(dir_path)?);
        let dir = self.resolve(c, dir_path)?;
        if dir.kind != FileKind::Dir {
            return Err(MgrError::new(
                MgrStatus::NotADirectory,
                dir_path.to_string(),
            ));
        }
        if !may(c, &dir, W | X) {
            return Err(denied(dir_path, "write permission on the directory"));
        }
        let spec = self.layout_spec_for(&dir)?;
        let policy = self.policy_for(&dir)?;
        let count = self.prepared_room(c, &spec, count, extend_by, dir_path)?;
        // One escrow per file, all expiring with the capabilities minted below.
        let (escrow, bound) = self.staged_escrow(c.uid, &spec, 0, extend_by)?;
        let made = futures_util::future::join_all((0..count).map(|_| async {
            let i = self.reserve_inode(c, &dir, mode)?;
            match self.create_layout(&spec, &i, policy.encrypted).await {
                Ok(l) => Ok(Inode {
                    size: (!l.sized_by_object()).then_some(0),
                    layout: Some(l),
                    ..i
                }),
                Err(e) => {
                    self.forget_reservation(i.ino);
                    Err(e)
                }
            }
        }))
        .await;
        let mut files = Vec::with_capacity(made.len());
        let mut failure = None;
        for made in made {
            let i = match made {
                Ok(i) => i,
                Err(e) => {
                    failure.get_or_insert(e.at(dir_path));
                    continue;
                }
            };
            if let Err(e) = self.record_new_file(c, &i, &marker, dir_path, escrow).await {
                failure.get_or_insert(e);
                continue;
            }
            let (layout, caps) = self.mint(c, dir_path, &i, Access::Write(bound))?;
            files.push(PreparedFile {
                stat: self.stat_of(&i, Some((0, i.mtime_us))),
                layout,
                caps,
                write_end: bound.end,
                policy: policy.clone(),
            });
        }
        match failure {
            // Some files are better than none: the caller asks again when it runs out.
            Some(e) if files.is_empty() => Err(e),
            _ => Ok(files),
        }
    }

    /// How many of `count` prepared files of `extend_by` bytes each `c`'s quota has room
    /// for: all without a quota; `QuotaExceeded` when not even one fits.
    fn prepared_room(
        &self,
        c: &Caller,
        spec: &str,
        count: u32,
        extend_by: u64,
        path: &str,
    ) -> MgrResult<u32> {
        let each = escrow_end(&crate::striping::geometry_of(spec)?, 0, extend_by);
        self.precheck(c.uid, each, path)?;
        let st = self.st();
        let Some(q) = st.quota(c.uid).map_err(|e| store_err(e, path))? else {
            return Ok(count);
        };
        if each == 0 {
            return Ok(count);
        }
        let escrowed = st
            .escrowed(c.uid, now_ms())
            .map_err(|e| store_err(e, path))?;
        let room = q
            .limit_bytes
            .saturating_sub(q.used_bytes)
            .saturating_sub(escrowed);
        Ok(count.min((room / each).min(u32::MAX as u64) as u32).max(1))
    }

    /// A new file's inode, stored without a name; its number is the file's from now on.
    fn reserve_inode(&self, c: &Caller, dir: &Inode, mode: u32) -> MgrResult<Inode> {
        let mut i = new_inode(c, dir, FileKind::File, mode, None);
        i.ino = self
            .st()
            .reserve_inode(dir.ino, &i)
            .map_err(|e| store_err(e, "inode"))?;
        Ok(i)
    }

    /// Drops a reservation whose file will never exist (logged: the scrub sweeps it too).
    fn forget_reservation(&self, ino: u64) {
        if let Err(e) = self.st().forget_reserved(ino) {
            tracing::warn!(ino, "reserved inode not dropped: {e}");
        }
    }

    /// Undoes a create whose name could not be linked or staged: the object goes, then the
    /// reservation.
    async fn undo_create(&self, i: &Inode) {
        if let Some(l) = &i.layout {
            self.remove_objects(&l.components).await;
        }
        self.forget_reservation(i.ino);
    }

    /// Exclusive create: links the reserved inode (holding its empty objects) as `name`. Its
    /// write capabilities write the committed objects, so their escrow is the file's own,
    /// taken before the name shows (settled when they expire).
    async fn link_new_file(
        &self,
        c: &Caller,
        path: &str,
        dir: u64,
        name: &str,
        i: Inode,
        extend_by: u64,
    ) -> MgrResult<MgrReply> {
        let layout = i.layout.clone().expect("created above");
        let expiry = self.write_expiry();
        let bound = match self.escrow_in_place(path, &i, 0, extend_by, expiry) {
            Ok(b) => b,
            Err(e) => {
                self.undo_create(&i).await;
                return Err(e);
            }
        };
        let linked = self.st().link_reserved(dir, name, i.ino, &layout, i.acv);
        if let Err(e) = linked {
            self.undo_create(&i).await;
            return Err(store_err(e, path));
        }
        let (layout, caps) = self.mint(c, path, &i, Access::Write(bound))?;
        Ok(MgrReply::Opened(Grant {
            stat: self.stat_of(&i, Some((0, i.mtime_us))),
            layout,
            caps,
            write_end: bound.end,
            policy: self.policy_of_file(&i)?,
            e2e: None,
        }))
    }

    /// Records the new file `i` (its inode reserved, its objects made) as staged at
    /// `staged_at` (a file's path, or a directory's marker for a prepared file); if that
    /// fails, its objects and reservation go and the error names `path`.
    async fn record_new_file(
        &self,
        c: &Caller,
        i: &Inode,
        staged_at: &str,
        path: &str,
        escrow: Option<StagedEscrow>,
    ) -> MgrResult<()> {
        let staged = Staged {
            layout: i.layout.clone().expect("created above"),
            acv: i.acv,
            uid: c.uid,
            path: staged_at.to_string(),
            mode: i.mode,
            created_ms: now_ms(),
            ino: i.ino,
            new_file: true,
            base_version: None,
            escrow,
        };
        let put = self.st().put_staged(&staged);
        if let Err(e) = put {
            self.undo_create(i).await;
            return Err(self.quota_err(e, path));
        }
        Ok(())
    }

    /// Non-exclusive create of a new name: records the upload as staged (so a manager restart
    /// does not lose it) and returns write capabilities for its objects. The name appears only
    /// when [`Manager::commit`] links it.
    async fn stage_new_file(
        &self,
        c: &Caller,
        path: &str,
        i: Inode,
        extend_by: u64,
    ) -> MgrResult<MgrReply> {
        let geometry = &i.layout.as_ref().expect("created above").geometry;
        let (escrow, bound) = match self.staged_escrow(c.uid, geometry, 0, extend_by) {
            Ok(x) => x,
            Err(e) => {
                self.undo_create(&i).await;
                return Err(e);
            }
        };
        self.record_new_file(c, &i, path, path, escrow).await?;
        let (layout, caps) = self.mint(c, path, &i, Access::Write(bound))?;
        Ok(MgrReply::Staged(StagedGrant {
            grant: Grant {
                stat: self.stat_of(&i, Some((0, i.mtime_us))),
                layout,
                caps,
                write_end: bound.end,
                policy: self.policy_of_file(&i)?,
                e2e: None,
            },
            replaces: false,
        }))
    }

    /// The first half of an overwrite: a fresh object for the new content, recorded as staged
    /// (so a manager restart does not lose it) and returned with a write capability. Only
    /// write permission on the file is needed (POSIX: opening a file to truncate it does not
    /// touch its directory). The old content stays in place and readable until
    /// [`Manager::commit`]; an overwrite that never commits is aborted by the client or
    /// expires, and its object is removed.
    ///
    /// The new content is charged to the file's owner: its `extend_by` bytes are escrowed in
    /// full, since the staged objects sit beside the old content until the commit.
    async fn stage_overwrite(
        &self,
        c: &Caller,
        path: &str,
        i: Inode,
        extend_by: u64,
    ) -> MgrResult<MgrReply> {
        if i.kind == FileKind::Dir {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if !may(c, &i, W) {
            return Err(denied(path, "write permission on the file"));
        }
        let dir = self
            .st()
            .inode(i.parent)
            .map_err(|e| store_err(e, path))?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
        // The new content takes the layout the directory gives new files now.
        let spec = self.layout_spec_for(&dir)?;
        let geo = crate::striping::geometry_of(&spec)?;
        self.precheck(i.uid, escrow_end(&geo, 0, extend_by), path)?;
        let (escrow, bound) = self.staged_escrow(i.uid, &spec, 0, extend_by)?;
        let encrypted = self.policy_for(&dir)?.encrypted;
        let layout = self
            .create_layout(&spec, &i, encrypted)
            .await
            .map_err(|e| e.at(path))?;
        let staged = Staged {
            layout: layout.clone(),
            acv: 0,
            uid: c.uid,
            path: path.to_string(),
            mode: i.mode,
            created_ms: now_ms(),
            ino: i.ino,
            new_file: false,
            base_version: None,
            escrow,
        };
        let put = self.st().put_staged(&staged);
        if let Err(e) = put {
            self.remove_objects(&layout.components).await;
            return Err(self.quota_err(e, path));
        }
        let times = self.file_times(&i).await.ok();
        let next = Inode {
            size: (!layout.sized_by_object()).then_some(0),
            layout: Some(layout),
            acv: 0,
            ..i.clone()
        };
        let (layout, caps) = self.mint(c, path, &next, Access::Write(bound))?;
        Ok(MgrReply::Staged(StagedGrant {
            grant: Grant {
                stat: self.stat_of(&i, times),
                layout,
                caps,
                write_end: bound.end,
                policy: self.policy_of_file(&i)?,
                e2e: i.e2e.clone(),
            },
            replaces: true,
        }))
    }

    /// The staged upload of `object` on `drive`, if `c` staged it for `path`.
    fn staged_for(
        &self,
        c: &Caller,
        path: &str,
        drive: nasd_proto::DriveId,
        object: ObjectId,
    ) -> MgrResult<Option<Staged>> {
        let partition = self
            .drives
            .record(drive)
            .map(|r| r.partition)
            .unwrap_or(drives::FILES_PARTITION);
        let obj = ObjRef {
            drive,
            partition,
            object,
        };
        let s = self.st().staged(obj).map_err(|e| store_err(e, path))?;
        Ok(s.filter(|s| s.uid == c.uid && (s.path == path || is_prepared_at(s, path))))
    }

    /// The second half of an upload, sent once every write to the staged object was
    /// acknowledged (the drive acknowledges only durable data). One store transaction makes it
    /// the file's content, then the object it replaces is removed, which revokes its
    /// capabilities. Only the user who staged the object may commit it, only at the path it
    /// was staged for, and only with the permissions that would let them start it now:
    /// - an overwrite lands only in the file it was staged for; if that file was removed or
    ///   replaced meanwhile, nothing is committed (`NoSuchPath`);
    /// - a new file is linked under its name. If another upload or create took the name
    ///   meanwhile, the last commit wins, as if each upload had been written under a temporary
    ///   name and renamed into place: the file there is replaced, provided the caller may
    ///   write it (and, in a sticky directory, owns it or the directory).
    ///
    /// Committing an object the name already holds succeeds, so a client may retry a commit
    /// whose reply it lost.
    #[allow(clippy::too_many_arguments)] // one per field of the Commit request
    pub async fn commit(
        &self,
        c: &Caller,
        path: &str,
        drive: nasd_proto::DriveId,
        object: ObjectId,
        size: u64,
        stale: u64,
        xattrs: Option<&[Xattr]>,
        e2e: Option<E2eCommit>,
    ) -> MgrResult<()> {
        if let Some(x) = xattrs {
            check_xattrs(x).map_err(|e| invalid_xattrs(path, e))?;
        }
        // The manager says who committed a version, never the writer.
        let e2e = e2e.map(|mut e| {
            e.state.writer = c.uid;
            e
        });
        let (dir, name) = self.parent(c, path, false)?;
        let current = self.entry(&dir, name, path)?;
        let Some(s) = self.staged_for(c, path, drive, object)? else {
            if current
                .as_ref()
                .and_then(|i| i.layout.as_ref())
                .is_some_and(|l| {
                    l.components
                        .iter()
                        .any(|o| (o.drive, o.object) == (drive, object))
                })
            {
                return Ok(());
            }
            return Err(MgrError::new(
                MgrStatus::NoSuchPath,
                format!(
                    "{path}: nothing staged for object {object} (expired, aborted or committed)"
                ),
            ));
        };
        if is_prepared(&s) {
            self.may_link_prepared(c, path, &dir, name, &s, current.as_ref())?;
        } else if s.new_file {
            self.may_link(c, path, &dir, current.as_ref())?;
        } else {
            match &current {
                Some(i) if i.ino == s.ino => {
                    if !may(c, i, W) {
                        return Err(denied(path, "write permission on the file"));
                    }
                }
                _ => {
                    return Err(MgrError::new(
                        MgrStatus::NoSuchPath,
                        format!("{path}: the file was removed or replaced while the upload ran; nothing was committed"),
                    ))
                }
            }
        }
        let n = s.layout.components.len();
        let lost = (s.layout.stale | stale).count_ones() as usize;
        if (n < 64 && stale >> n != 0) || lost > tolerated(&s.layout) || lost >= n {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!(
                    "{path}: the upload missed {lost} of {n} components; its {} layout covers {}",
                    s.layout.geometry,
                    tolerated(&s.layout)
                ),
            ));
        }
        if s.base_version.is_some() && current.as_ref().is_some_and(|i| i.acv != s.acv) {
            // A revocation (chmod, chown) happened since the copies were taken: they carry the
            // old version. Start over from the current objects.
            return Err(store_err(StoreError::Conflict, path));
        }
        // Quota: the new content is charged to the file's owner, at its size as the manager
        // keeps it (a layout over several objects), or as its object says (the writer's word
        // is not taken for a one-object file).
        let owner = match &current {
            Some(i) if !s.new_file => i.uid,
            _ => c.uid,
        };
        // An encrypted file's size is kept here: its object may hold padding.
        let kept_here = !s.layout.sized_by_object() || e2e.is_some();
        let mut charge = kept_here.then_some(size);
        if charge.is_none() && self.has_quota(owner)? {
            charge = Some(self.staged_size(&s, path).await?);
        }
        let size = kept_here.then_some(size);
        let mut committed = self.st().commit_staged(
            dir.ino,
            name,
            s.layout.key(),
            current.as_ref().map(|i| i.ino),
            size,
            stale,
            xattrs,
            charge,
            e2e.as_ref(),
            now_ms(),
        );
        if committed == Err(StoreError::ChargeNeeded) {
            // The owner's quota appeared since: measure and commit again.
            let charge = Some(self.staged_size(&s, path).await?);
            committed = self.st().commit_staged(
                dir.ino,
                name,
                s.layout.key(),
                current.as_ref().map(|i| i.ino),
                size,
                stale,
                xattrs,
                charge,
                e2e.as_ref(),
                now_ms(),
            );
        }
        let old = committed.map_err(|e| self.quota_err(e, path))?;
        if s.base_version.is_some() {
            self.leases.release(s.ino, c.holder(), now_ms());
        }
        if let Some(l) = old.and_then(|i| i.layout) {
            self.remove_objects(&l.not_in(Some(&s.layout))).await;
        }
        Ok(())
    }

    /// The logical size of the staged one-object upload `s`, from its object.
    async fn staged_size(&self, s: &Staged, path: &str) -> MgrResult<u64> {
        Ok(self
            .object_attributes(s.layout.first())
            .await
            .map_err(|e| e.at(path))?
            .logical_size)
    }

    /// Whether `c` may commit the prepared file `s` as `dir`/`name` (`path`): only into the
    /// directory it was prepared in, only under a free, clean name (a prepared file never
    /// replaces one: the writer overwrites through `Create`, which keeps the file's inode),
    /// and only with write permission on the directory now.
    fn may_link_prepared(
        &self,
        c: &Caller,
        path: &str,
        dir: &Inode,
        name: &str,
        s: &Staged,
        current: Option<&Inode>,
    ) -> MgrResult<()> {
        let reserved = self.st().inode(s.ino).map_err(|e| store_err(e, path))?;
        if path.ends_with('/') || reserved.is_none_or(|i| i.parent != dir.ino) {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: the file was prepared in another directory"),
            ));
        }
        if current.is_some() {
            return Err(MgrError::new(MgrStatus::Exists, path.to_string()));
        }
        check_new_name(path, name)?;
        self.may_link(c, path, dir, None)
    }

    /// The inode `dir`/`name` names now, if any.
    fn entry(&self, dir: &Inode, name: &str, path: &str) -> MgrResult<Option<Inode>> {
        let st = self.st();
        match st.lookup(dir.ino, name).map_err(|e| store_err(e, path))? {
            Some(ino) => st.inode(ino).map_err(|e| store_err(e, path)),
            None => Ok(None),
        }
    }

    /// Whether `c` may link a new file into `dir`, replacing `current` if there is one.
    fn may_link(
        &self,
        c: &Caller,
        path: &str,
        dir: &Inode,
        current: Option<&Inode>,
    ) -> MgrResult<()> {
        if !may(c, dir, W | X) {
            return Err(denied(path, "write permission on the parent directory"));
        }
        let Some(i) = current else {
            return Ok(());
        };
        if i.kind == FileKind::Dir {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if !may(c, i, W) {
            return Err(denied(
                path,
                "write permission on the file the upload would replace",
            ));
        }
        let sticky = dir.mode & 0o1000 != 0;
        if sticky && !c.admin && c.uid != i.uid && c.uid != dir.uid {
            return Err(denied(
                path,
                "the directory is sticky and the file there is another user's",
            ));
        }
        Ok(())
    }

    /// A fresh write capability for a staged upload still running, under the checks that
    /// would let the caller start it now (a writer whose permission was taken away gets no
    /// new capability); its record is moved to now, so it does not expire while the upload
    /// runs. The capability comes in a `Staged` reply, as from `create`.
    ///
    /// Under a quota the escrow is renewed with the capability, and `extend_by` moves its end
    /// further (seed 002 §3.2: a writer asks for more before writing past it).
    pub async fn renew(
        &self,
        c: &Caller,
        path: &str,
        drive: nasd_proto::DriveId,
        object: ObjectId,
        extend_by: u64,
    ) -> MgrResult<MgrReply> {
        let s = self.staged_for(c, path, drive, object)?.ok_or_else(|| {
            MgrError::new(
                MgrStatus::NoSuchPath,
                format!(
                    "{path}: nothing staged for object {object} (expired, aborted or committed)"
                ),
            )
        })?;
        let (dir, name) = self.parent(c, path, false)?;
        let current = self.entry(&dir, name, path)?;
        let i = if s.new_file {
            self.may_link(c, path, &dir, current.as_ref())?;
            self.st()
                .inode(s.ino)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?
        } else {
            match current {
                Some(i) if i.ino == s.ino && may(c, &i, W) => Inode {
                    layout: Some(s.layout.clone()),
                    acv: s.acv,
                    ..i
                },
                Some(i) if i.ino == s.ino => {
                    return Err(denied(path, "write permission on the file"))
                }
                _ => {
                    return Err(MgrError::new(
                        MgrStatus::NoSuchPath,
                        format!("{path}: the file was removed or replaced while the upload ran"),
                    ))
                }
            }
        };
        if s.base_version.is_some() {
            self.take_lease(c, path, &i).await?;
        }
        let bound = self.renew_escrow(&s, &i, extend_by, path)?;
        let (layout, caps) = self.mint(c, path, &i, Access::Write(bound))?;
        Ok(MgrReply::Staged(StagedGrant {
            grant: Grant {
                stat: self.stat_of(&i, None),
                layout,
                caps,
                write_end: bound.end,
                policy: self.policy_of_file(&i)?,
                e2e: i.e2e.clone(),
            },
            replaces: !s.new_file,
        }))
    }

    /// Renews the escrow of the staged upload `s` of file `i` (and the record's time): its end
    /// moves `extend_by` further. An upload staged before its owner had a quota starts one
    /// (from 0 for an upload, from the file's size for a copy-on-write change).
    fn renew_escrow(
        &self,
        s: &Staged,
        i: &Inode,
        extend_by: u64,
        path: &str,
    ) -> MgrResult<WriteBound> {
        let key = s.layout.key();
        if !self.has_quota(i.uid)? {
            self.st()
                .touch_staged(key, now_ms())
                .map_err(|e| store_err(e, path))?;
            return Ok(self.unbounded());
        }
        let (base, from) = match s.escrow {
            Some(e) => (e.base, e.end),
            None if s.base_version.is_some() => (i.size.unwrap_or(0), i.size.unwrap_or(0)),
            None => (0, 0),
        };
        let (escrow, bound) = self.staged_escrow(i.uid, &s.layout.geometry, from, extend_by)?;
        let escrow = StagedEscrow {
            base,
            ..escrow.expect("the owner has a quota")
        };
        let renewed = self.st().escrow_staged(key, &escrow, now_ms());
        renewed.map_err(|e| self.quota_err(e, path))?;
        Ok(bound)
    }

    /// Gives up a staged upload: forgets it and removes its object now, so its space comes
    /// back without waiting for the orphan scrub. Aborting what is no longer staged succeeds.
    pub async fn abort(
        &self,
        c: &Caller,
        path: &str,
        drive: nasd_proto::DriveId,
        object: ObjectId,
    ) -> MgrResult<()> {
        let Some(s) = self.staged_for(c, path, drive, object)? else {
            return Ok(());
        };
        let gone = self
            .st()
            .abort_staged(s.layout.key())
            .map_err(|e| store_err(e, path))?;
        if gone.is_some() {
            if s.base_version.is_some() {
                self.leases.release(s.ino, c.holder(), now_ms());
            }
            // A change's stale components are the file's own objects: only the copies go.
            let current = self.st().inode(s.ino).ok().flatten().and_then(|i| i.layout);
            self.remove_objects(&s.layout.not_in(current.as_ref()))
                .await;
        }
        Ok(())
    }

    /// GetCapability / GetWCapability of NASD/AFS. A writer may grow the file by `extend_by`
    /// bytes past its size now, escrowed against the owner's quota (seed 002 §3.2).
    pub async fn open(
        &self,
        c: &Caller,
        path: &str,
        write: bool,
        extend_by: u64,
    ) -> MgrResult<MgrReply> {
        let i = self.resolve(c, path)?;
        if i.kind == FileKind::Dir {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if write {
            return self.open_write(c, path, i, extend_by).await;
        }
        if !may(c, &i, R) {
            return Err(denied(path, "read permission on the file"));
        }
        let times = self.file_times(&i).await.map_err(|e| e.at(path))?;
        let (layout, caps) = self.mint(c, path, &i, Access::Read)?;
        Ok(MgrReply::Opened(Grant {
            stat: self.stat_of(&i, Some(times)),
            layout,
            caps,
            write_end: WRITE_END_UNBOUNDED,
            policy: self.policy_of_file(&i)?,
            e2e: i.e2e.clone(),
        }))
    }

    /// GetWCapability: the file's write lease, then capabilities for its committed objects
    /// (one-object files only), with the file's escrow taken first under a quota.
    async fn open_write(
        &self,
        c: &Caller,
        path: &str,
        i: Inode,
        extend_by: u64,
    ) -> MgrResult<MgrReply> {
        if !may(c, &i, W) {
            return Err(denied(path, "write permission on the file"));
        }
        if i.layout.as_ref().is_some_and(|l| !l.sized_by_object()) {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!(
                    "{path}: a file spread over several objects is changed copy-on-write (StageWrite), never in place"
                ),
            ));
        }
        if i.e2e.is_some() {
            // Its new content and its trusted record must commit together (seed 003).
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: an encrypted file is changed copy-on-write (StageWrite), never in place"),
            ));
        }
        let had = self
            .leases
            .holder(i.ino, now_ms())
            .is_some_and(|(h, _)| h == c.holder());
        let i = self.take_lease(c, path, &i).await?;
        let escrowed = async {
            let (size, mtime) = self.file_times(&i).await.map_err(|e| e.at(path))?;
            let expiry = self.write_expiry();
            let bound = self.escrow_in_place(path, &i, size, extend_by, expiry)?;
            Ok::<_, MgrError>((bound, (size, mtime)))
        };
        let (bound, times) = match escrowed.await {
            Ok(x) => x,
            Err(e) => {
                // A lease taken for this request only goes with it.
                if !had {
                    self.leases.release(i.ino, c.holder(), now_ms());
                }
                return Err(e);
            }
        };
        let (layout, caps) = self.mint(c, path, &i, Access::Write(bound))?;
        Ok(MgrReply::Opened(Grant {
            stat: self.stat_of(&i, Some(times)),
            layout,
            caps,
            write_end: bound.end,
            policy: self.policy_of_file(&i)?,
            e2e: i.e2e.clone(),
        }))
    }

    /// `StageWrite`: copies of the file's components for a copy-on-write change, recorded as
    /// staged (so a manager restart keeps it), with write capabilities for them; takes the
    /// file's write lease, which the change's commit or abort ends. The change may grow the
    /// file by `extend_by` bytes past its size, escrowed against the owner's quota.
    pub async fn stage_write(&self, c: &Caller, path: &str, extend_by: u64) -> MgrResult<MgrReply> {
        let i = self.resolve(c, path)?;
        if i.kind == FileKind::Dir {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if !may(c, &i, W) {
            return Err(denied(path, "write permission on the file"));
        }
        let i = self.take_lease(c, path, &i).await?;
        let release = || self.leases.release(i.ino, c.holder(), now_ms());
        let l = i.layout.clone().expect("a file has a layout");
        // The copies start as the file is: the escrow counts from its size.
        let escrowed = async {
            let (size, _) = self.file_times(&i).await.map_err(|e| e.at(path))?;
            let geo = crate::striping::geometry_of(&l.geometry)?;
            self.precheck(i.uid, escrow_end(&geo, size, extend_by) - size, path)?;
            self.staged_escrow(i.uid, &l.geometry, size, extend_by)
        };
        let (escrow, bound) = match escrowed.await {
            Ok(x) => x,
            Err(e) => {
                release();
                return Err(e);
            }
        };
        let staged = match self.stage_copies(&l).await {
            Ok(s) => s,
            Err(e) => {
                release();
                return Err(e.at(path));
            }
        };
        let record = Staged {
            layout: staged.clone(),
            acv: i.acv,
            uid: c.uid,
            path: path.to_string(),
            mode: i.mode,
            created_ms: now_ms(),
            ino: i.ino,
            new_file: false,
            base_version: Some(l.version),
            escrow,
        };
        let put = self.st().put_staged(&record);
        if let Err(e) = put {
            self.remove_objects(&staged.not_in(Some(&l))).await;
            release();
            return Err(self.quota_err(e, path));
        }
        let times = self.file_times(&i).await.ok();
        let next = Inode {
            layout: Some(staged),
            ..i.clone()
        };
        let (layout, caps) = self.mint(c, path, &next, Access::Write(bound))?;
        Ok(MgrReply::Staged(StagedGrant {
            grant: Grant {
                stat: self.stat_of(&i, times),
                layout,
                caps,
                write_end: bound.end,
                policy: self.policy_of_file(&i)?,
                e2e: i.e2e.clone(),
            },
            replaces: true,
        }))
    }

    /// `ReturnCapability`: the writer is done. If it held the file's write lease, the lease
    /// ends and every capability for the file's objects is revoked now (seed 002 §3.2), so the
    /// returned one stops working at once. Under a quota the file is then measured, its size
    /// charged and its escrow let go ("when the capability is returned ... the file manager
    /// examines the object to determine its new size").
    pub async fn return_capability(&self, c: &Caller, path: &str) -> MgrResult<()> {
        let i = self.resolve(c, path)?;
        if i.kind == FileKind::Dir || !self.leases.release(i.ino, c.holder(), now_ms()) {
            return Ok(());
        }
        let tracked = i.charged.is_some();
        let ino = i.ino;
        self.revoke_and_mirror(i).await.map_err(|e| e.at(path))?;
        if tracked {
            self.settle(ino, true).await.map_err(|e| e.at(path))?;
        }
        Ok(())
    }

    /// `Repair`: a reader found `len` bytes at `offset` of component `component` damaged; the
    /// striping layer rebuilds them from the other components and rewrites them in place.
    /// Only someone who may read the file can ask, and the bytes come from the other
    /// components, never from the asker.
    pub async fn repair(
        &self,
        c: &Caller,
        path: &str,
        component: usize,
        offset: u64,
        len: u64,
    ) -> MgrResult<u64> {
        let i = self.resolve(c, path)?;
        if !may(c, &i, R) {
            return Err(denied(path, "read permission on the file"));
        }
        let l = i
            .layout
            .as_ref()
            .ok_or_else(|| MgrError::new(MgrStatus::IsADirectory, path.to_string()))?;
        if component >= l.components.len() || len > REPAIR_BYTES_MAX {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!(
                    "{path}: repair of {len} bytes of component {component} (at most {REPAIR_BYTES_MAX} bytes of one of {})",
                    l.components.len()
                ),
            ));
        }
        if l.is_stale(component) || l.sized_by_object() {
            return Ok(0);
        }
        let (size, _) = self.file_times(&i).await.map_err(|e| e.at(path))?;
        let io = self.layout_io(l, size)?;
        let n = io
            .rebuild_range(component, offset, len, None)
            .await
            .map_err(|e| MgrError::new(MgrStatus::DriveUnreachable, format!("{path}: {e}")))?;
        tracing::info!(path, component, offset, len = n, "read repair");
        Ok(n)
    }

    pub async fn unlink(&self, c: &Caller, path: &str) -> MgrResult<()> {
        let (dir, name) = self.parent(c, path, true)?;
        let i = {
            let mut st = self.st();
            let ino = st
                .lookup(dir.ino, name)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
            let i = st
                .inode(ino)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
            if i.kind == FileKind::Dir {
                return Err(MgrError::new(
                    MgrStatus::IsADirectory,
                    format!("{path} (use rmdir)"),
                ));
            }
            check_sticky(c, &dir, &i, path)?;
            st.unlink(dir.ino, name).map_err(|e| store_err(e, path))?
        };
        // The objects go with the file's last name.
        if let Some(l) = i.and_then(|i| i.layout) {
            self.remove_objects(&l.components).await;
        }
        Ok(())
    }

    /// Makes `path` a symbolic link to `target` (POSIX symlink: the target is stored as
    /// given and need not exist; a relative one resolves from the link's directory).
    pub fn symlink(&self, c: &Caller, path: &str, target: &str) -> MgrResult<()> {
        if target.is_empty() || target.len() > PATH_BYTES_MAX || target.contains('\0') {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: a link target is 1 to {PATH_BYTES_MAX} bytes without NUL"),
            ));
        }
        let (dir, name) = self.parent(c, path, true)?;
        check_new_name(path, name)?;
        let i = new_inode(c, &dir, FileKind::Symlink, 0o777, Some(target));
        self.st()
            .link_new(dir.ino, name, &i)
            .map_err(|e| store_err(e, path))?;
        Ok(())
    }

    /// The stat and extended attributes of `path`; reading the attributes needs read
    /// permission on the file, as reading its bytes does.
    pub async fn getxattrs(&self, c: &Caller, path: &str) -> MgrResult<(FileStat, Vec<Xattr>)> {
        let i = self.resolve(c, path)?;
        if !may(c, &i, R) {
            return Err(denied(path, "read permission"));
        }
        let xattrs = self.st().xattrs(i.ino).map_err(|e| store_err(e, path))?;
        let times = self.file_times(&i).await.map_err(|e| e.at(path))?;
        Ok((self.stat_of(&i, Some(times)), xattrs))
    }

    /// Sets (`Some`) or removes (`None`) extended attribute `name` of `path`: the file's owner,
    /// an admin, or a user who may write it (Linux's rule for `user.` attributes). Removing
    /// an attribute the file lacks is `NoSuchPath`, as `ENODATA` is.
    pub fn setxattr(
        &self,
        c: &Caller,
        path: &str,
        name: &str,
        value: Option<&[u8]>,
    ) -> MgrResult<()> {
        check_xattr_name(name).map_err(|e| invalid_xattrs(path, e))?;
        let i = self.resolve(c, path)?;
        if i.uid != c.uid && !may(c, &i, W) {
            return Err(denied(path, "write permission or ownership"));
        }
        let mut st = self.st();
        let mut x = st.xattrs(i.ino).map_err(|e| store_err(e, path))?;
        let had = x.len();
        x.retain(|a| a.name != name);
        match value {
            Some(v) => x.push(Xattr {
                name: name.to_string(),
                value: v.to_vec(),
            }),
            None if x.len() == had => {
                return Err(MgrError::new(
                    MgrStatus::NoSuchPath,
                    format!("{path}: no extended attribute {name:?}"),
                ))
            }
            None => {}
        }
        check_xattrs(&x).map_err(|e| invalid_xattrs(path, e))?;
        st.set_xattrs(i.ino, &x).map_err(|e| store_err(e, path))
    }

    /// The target of the symbolic link `path` (its last name is not followed).
    pub fn readlink(&self, c: &Caller, path: &str) -> MgrResult<String> {
        let (dir, name) = self.parent(c, path, false)?;
        let i = self
            .entry(&dir, name, path)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
        i.target.ok_or_else(|| {
            MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: not a symbolic link"),
            )
        })
    }

    /// Gives the file `existing` the further name `new` (POSIX link; a symbolic link is
    /// linked itself, not followed). As Linux's `protected_hardlinks` asks, only the file's
    /// owner, an admin, or a user who may read and write it may link it, so nobody pins
    /// another user's file under a name they control.
    pub fn link(&self, c: &Caller, existing: &str, new: &str) -> MgrResult<()> {
        let (ed, en) = self.parent(c, existing, false)?;
        let i = self
            .entry(&ed, en, existing)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, existing.to_string()))?;
        if i.kind == FileKind::Dir {
            return Err(denied(
                existing,
                "hard links to directories are not allowed",
            ));
        }
        if !(c.admin || c.uid == i.uid || may(c, &i, R | W)) {
            return Err(denied(
                existing,
                "only the owner, or a user who may read and write it, links a file",
            ));
        }
        let (nd, nn) = self.parent(c, new, true)?;
        check_new_name(new, nn)?;
        self.st()
            .link(i.ino, nd.ino, nn)
            .map_err(|e| store_err(e, new))
    }

    pub async fn rename(&self, c: &Caller, from: &str, to: &str) -> MgrResult<()> {
        let (fd, fname) = self.parent(c, from, true)?;
        let (td, tname) = self.parent(c, to, true)?;
        let entry = |dir: &Inode, name: &str, path: &str| -> MgrResult<Option<Inode>> {
            let st = self.st();
            match st.lookup(dir.ino, name).map_err(|e| store_err(e, path))? {
                Some(ino) => st.inode(ino).map_err(|e| store_err(e, path)),
                None => Ok(None),
            }
        };
        let src = entry(&fd, fname, from)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, from.to_string()))?;
        check_sticky(c, &fd, &src, from)?;
        if let Some(target) = entry(&td, tname, to)? {
            check_sticky(c, &td, &target, to)?;
        }
        let src_ino = src.ino;
        // A directory may not move under itself.
        let mut up = td.ino;
        loop {
            if up == src_ino {
                return Err(MgrError::new(
                    MgrStatus::InvalidArgument,
                    format!("{to}: cannot move a directory into itself"),
                ));
            }
            if up == ROOT_INO {
                break;
            }
            up = match self.st().inode(up).map_err(|e| store_err(e, to))? {
                Some(i) => i.parent,
                None => break,
            };
        }
        let replaced = self
            .st()
            .rename(fd.ino, fname, td.ino, tname)
            .map_err(|e| store_err(e, to))?;
        if let Some(l) = replaced.and_then(|r| r.layout) {
            self.remove_objects(&l.components).await;
        }
        Ok(())
    }

    pub async fn chmod(&self, c: &Caller, path: &str, mode: u32) -> MgrResult<()> {
        let mut i = self.resolve(c, path)?;
        if !c.admin && i.uid != c.uid {
            return Err(denied(path, "only the owner may change the mode"));
        }
        i.mode = mode & 0o7777;
        self.revoke_and_mirror(i).await.map_err(|e| e.at(path))?;
        Ok(())
    }

    /// Under quotas the file's charge moves from its old owner to its new one (measured now),
    /// in the same transaction as the new owner.
    pub async fn chown(&self, c: &Caller, path: &str, owner: &str, group: &str) -> MgrResult<()> {
        let mut i = self.resolve(c, path)?;
        let was = i.uid;
        if !owner.is_empty() {
            // A number names a uid, as GNU chown reads one (names never start with a digit).
            let u = match owner.parse::<u32>() {
                Ok(uid) => self.st().user_by_uid(uid),
                Err(_) => self.st().user_by_name(owner),
            }
            .map_err(|e| store_err(e, owner))?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, owner.to_string()))?;
            if !c.admin && u.uid != i.uid {
                return Err(denied(path, "only an admin may give a file away"));
            }
            i.uid = u.uid;
        }
        if !group.is_empty() {
            let g = match group.parse::<u32>() {
                Ok(gid) => self.st().group_by_gid(gid),
                Err(_) => self.st().group_by_name(group),
            }
            .map_err(|e| store_err(e, group))?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownGroup, group.to_string()))?;
            if !c.admin && (i.uid != c.uid || !c.groups.contains(&g.gid)) {
                return Err(denied(
                    path,
                    "the owner may only choose a group they belong to",
                ));
            }
            i.gid = g.gid;
        }
        if i.uid != was && i.kind == FileKind::File && self.has_quota(i.uid)? {
            i.charged = Some(self.file_times(&i).await.map_err(|e| e.at(path))?.0);
        }
        self.revoke_and_mirror(i).await.map_err(|e| e.at(path))?;
        Ok(())
    }

    pub async fn truncate(&self, c: &Caller, path: &str, size: u64) -> MgrResult<()> {
        let i = self.resolve(c, path)?;
        if i.layout.is_none() {
            return Err(MgrError::new(MgrStatus::IsADirectory, path.to_string()));
        }
        if !may(c, &i, W) {
            return Err(denied(path, "write permission on the file"));
        }
        if i.e2e.is_some() {
            // Cutting re-encrypts the new last block and changes the trusted record: only a
            // writer holding the key can (seed 003).
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: an encrypted file is cut by its writer (a copy-on-write change), not by the manager"),
            ));
        }
        // The change holds the write lease; one the caller held before stays theirs.
        let had = self
            .leases
            .holder(i.ino, now_ms())
            .is_some_and(|(h, _)| h == c.holder());
        let i = self.take_lease(c, path, &i).await?;
        let r = self.truncate_charged(path, &i, size).await;
        if !had {
            self.leases.release(i.ino, c.holder(), now_ms());
        }
        r.map_err(|e| e.at(path))
    }

    /// [`Manager::truncate_layout`], under the owner's quota when there is one: the change is
    /// recorded first as a file escrow reaching the larger of the two sizes (checked when it
    /// grows the file), so a crash in between leaves the file to be measured and settled;
    /// then the file is measured, and the escrow goes unless a writer's was there already.
    async fn truncate_charged(&self, path: &str, i: &Inode, size: u64) -> MgrResult<()> {
        if i.charged.is_none() {
            return self.truncate_layout(path, i, size).await;
        }
        let (now_size, _) = self.file_times(i).await?;
        let had_escrow = self
            .st()
            .file_escrow(i.ino)
            .map_err(|e| store_err(e, path))?
            .is_some();
        let intent = FileEscrow {
            ino: i.ino,
            uid: i.uid,
            end: size.max(now_size),
            expires_ms: now_ms(),
        };
        let taken = self.st().escrow_file(&intent, now_ms(), size > now_size);
        taken.map_err(|e| self.quota_err(e, path))?;
        let r = self.truncate_layout(path, i, size).await;
        self.settle(i.ino, !had_escrow).await?;
        r
    }

    pub async fn utimes(&self, c: &Caller, path: &str, mtime_us: u64) -> MgrResult<()> {
        let mut i = self.resolve(c, path)?;
        if !c.admin && i.uid != c.uid && !may(c, &i, W) {
            return Err(denied(path, "only the owner or a writer may set times"));
        }
        match i
            .layout
            .as_ref()
            .filter(|l| l.sized_by_object())
            .map(|l| l.first())
        {
            Some(o) => {
                let attrs = Attributes {
                    fs_data_modify_time_us: mtime_us,
                    fs_attribute_modify_time_us: now_us(),
                    ..Attributes::default()
                };
                let mask = AttrMask::FS_DATA_MODIFY_TIME.with(AttrMask::FS_ATTRIBUTE_MODIFY_TIME);
                self.setattr(o, mask, attrs).await.map_err(|e| e.at(path))?;
            }
            None => {
                i.mtime_us = mtime_us;
                self.st().update_inode(&i).map_err(|e| store_err(e, path))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32, groups: Vec<u32>) -> Caller {
        Caller {
            uid,
            name: "u".into(),
            admin: false,
            gid: groups[0],
            groups,
            session: 0,
            via: None,
        }
    }

    #[test]
    fn modes_pick_user_group_other() {
        let mut i = crate::conformance::file(10, 16);
        i.gid = 50;
        i.mode = 0o640;
        assert!(may(&caller(10, vec![1]), &i, R | W));
        assert!(may(&caller(11, vec![50]), &i, R));
        assert!(!may(&caller(11, vec![50]), &i, W));
        assert!(!may(&caller(12, vec![1]), &i, R));
        let admin = Caller {
            admin: true,
            ..caller(12, vec![1])
        };
        assert!(may(&admin, &i, R | W | X));
    }

    #[test]
    fn a_prepared_file_is_named_by_its_directory_or_a_file_in_it() {
        let s = Staged {
            layout: FileLayout::single(ObjRef {
                drive: nasd_proto::DriveId(1),
                partition: nasd_proto::PartitionId(1),
                object: ObjectId(9),
            }),
            acv: 0,
            uid: 10,
            path: prepared_marker(&["a", "b"]),
            mode: 0o644,
            created_ms: 0,
            ino: 5,
            new_file: true,
            base_version: None,
            escrow: None,
        };
        assert_eq!(s.path, "/a/b/");
        assert_eq!(prepared_marker(&[]), "/");
        for yes in ["/a/b/f", "/a//b/./f", "/a/b/", "/a/b"] {
            assert!(is_prepared_at(&s, yes), "{yes}");
        }
        for no in ["/a/f", "/a/b/c/f", "/a/bb/f", "a/b/f", "/a/../a/b/f"] {
            assert!(!is_prepared_at(&s, no), "{no}");
        }
        // An ordinary upload's record is never taken for a prepared one.
        let upload = Staged {
            path: "/a/b/f".into(),
            ..s.clone()
        };
        assert!(!is_prepared(&upload) && !is_prepared_at(&upload, "/a/b/f"));
        let overwrite = Staged {
            new_file: false,
            ..s
        };
        assert!(!is_prepared_at(&overwrite, "/a/b/f"));
    }

    #[test]
    fn paths_refuse_traversal_and_long_names() {
        assert_eq!(split_path("/a//b/./c/").unwrap(), vec!["a", "b", "c"]);
        assert!(split_path("/").unwrap().is_empty());
        assert_eq!(
            split_path("/a/../b").unwrap_err().status,
            MgrStatus::BadName
        );
        assert_eq!(split_path("a/b").unwrap_err().status, MgrStatus::BadName);
        let long = format!("/{}", "x".repeat(NAME_BYTES_MAX + 1));
        assert_eq!(
            split_path(&long).unwrap_err().status,
            MgrStatus::NameTooLong
        );
        assert_eq!(split_path("/a\0b").unwrap_err().status, MgrStatus::BadName);
    }

    fn manager() -> Arc<Manager> {
        let st = crate::sqlite::SqliteStore::in_memory().unwrap();
        Manager::new(Box::new(st), Policy::default()).unwrap()
    }

    fn admin() -> Caller {
        Caller {
            admin: true,
            ..caller(0, vec![0])
        }
    }

    #[test]
    fn new_names_may_not_hold_control_characters() {
        for bad in [
            "a\nb",
            "a\rb",
            "x\u{1b}[31m",
            "t\tb",
            "d\u{7f}",
            "c1\u{85}",
            "c\u{9f}",
        ] {
            let e = check_new_name(&format!("/{bad}"), bad).unwrap_err();
            assert_eq!(e.status, MgrStatus::BadName, "{bad:?}");
            assert!(e.detail.contains("control character"), "{}", e.detail);
            assert!(
                !e.detail.chars().any(|c| c.is_control()),
                "escaped: {:?}",
                e.detail
            );
        }
        for ok in ["plain", "caf\u{e9}", "\u{a0}nbsp", "\u{200b}zw", "日本"] {
            check_new_name(ok, ok).unwrap();
        }
    }

    #[tokio::test]
    async fn names_stored_before_the_rule_stay_usable_but_none_is_made() {
        let m = manager();
        let a = admin();
        for bad in ["/a\nb", "/x\u{1b}[2J", "/d\u{7f}", "/c\u{85}"] {
            assert_eq!(
                m.mkdir(&a, bad, 0o755).unwrap_err().status,
                MgrStatus::BadName
            );
        }
        m.st()
            .link_new(ROOT_INO, "old\nname", &crate::conformance::dir(0))
            .unwrap();
        let names: Vec<_> = m.readdir(&a, "/", "", usize::MAX, None).await.unwrap();
        assert_eq!(names[0].name, "old\nname");
        m.stat(&a, "/old\nname").await.unwrap();
        m.mkdir(&a, "/old\nname/inside", 0o755).unwrap();
        m.rmdir(&a, "/old\nname/inside").unwrap();
        m.rename(&a, "/old\nname", "/clean").await.unwrap();
        let back = m.rename(&a, "/clean", "/old\nname").await.unwrap_err();
        assert_eq!(back.status, MgrStatus::BadName);
        m.st()
            .link_new(ROOT_INO, "gone\r", &crate::conformance::dir(0))
            .unwrap();
        m.rmdir(&a, "/gone\r").unwrap();
        m.rmdir(&a, "/clean").unwrap();
    }

    #[test]
    fn the_sticky_bit_leaves_removal_to_the_owners_and_admins() {
        let mut dir = crate::conformance::dir(10);
        dir.mode = 0o1777;
        let entry = crate::conformance::dir(11);
        assert!(
            sticky_allows(&caller(11, vec![1]), &dir, &entry),
            "entry owner"
        );
        assert!(
            sticky_allows(&caller(10, vec![1]), &dir, &entry),
            "dir owner"
        );
        assert!(sticky_allows(&admin(), &dir, &entry));
        assert!(!sticky_allows(&caller(12, vec![1]), &dir, &entry));
        dir.mode = 0o777;
        assert!(sticky_allows(&caller(12, vec![1]), &dir, &entry));
    }

    #[tokio::test]
    async fn in_a_sticky_directory_others_may_not_remove_rename_or_replace() {
        let m = manager();
        let (alice, bob) = (caller(1000, vec![100]), caller(1001, vec![100]));
        m.mkdir(&admin(), "/tmp", 0o1777).unwrap();
        m.mkdir(&alice, "/tmp/a", 0o755).unwrap();
        m.mkdir(&bob, "/tmp/b", 0o755).unwrap();
        let denied = |r: MgrResult<()>| {
            let e = r.unwrap_err();
            assert_eq!(e.status, MgrStatus::PermissionDenied);
            assert!(e.detail.contains("sticky"), "{}", e.detail);
        };
        denied(m.rmdir(&bob, "/tmp/a"));
        denied(m.rename(&bob, "/tmp/a", "/tmp/mine").await);
        denied(m.rename(&bob, "/tmp/b", "/tmp/a").await);
        m.rename(&bob, "/tmp/b", "/tmp/b2").await.unwrap();
        m.rmdir(&bob, "/tmp/b2").unwrap();
        m.rename(&alice, "/tmp/a", "/tmp/a2").await.unwrap();
        m.rmdir(&admin(), "/tmp/a2").unwrap();
    }

    #[test]
    fn fs_attr_round_trips() {
        let mut i = crate::conformance::file(1000, 16);
        i.ino = 77;
        i.gid = 100;
        assert_eq!(
            FsAttr::decode(&FsAttr::encode(&i, false)),
            Some((0o644, 1000, 100, 77))
        );
        assert_eq!(FsAttr::decode(&[0; FS_SPECIFIC_BYTES]), None);
    }

    /// The client reads the inode number out of the record the manager writes (pair check
    /// across the two crates: the client cannot depend on this one).
    #[test]
    fn the_client_reads_the_inode_the_manager_writes() {
        let mut i = crate::conformance::file(1000, 16);
        i.ino = 0x0102_0304_0506_0708;
        assert_eq!(
            nasd_client::files::fs_specific_ino(&FsAttr::encode(&i, false)),
            Some(i.ino)
        );
        assert!(nasd_client::files::fs_specific_encrypted(&FsAttr::encode(
            &i, true
        )));
        assert!(!nasd_client::files::fs_specific_encrypted(&FsAttr::encode(
            &i, false
        )));
        assert_eq!(
            nasd_client::files::fs_specific_ino(&[0; FS_SPECIFIC_BYTES]),
            None
        );
    }
}
