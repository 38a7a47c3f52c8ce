//! Files: the client side of seed 002 §3, and the top of the file stack. Namespace operations
//! go to the manager over the TLS session; bytes go straight to drives with the capabilities
//! it grants, through the stack [`Client::stack`] builds for the file's layout — a layout layer
//! ([`crate::striped`]) over one [`ComponentIo`] per component object — behind the one
//! interface every layer shares ([`FileIo`]). Every reply is verified by the connection
//! before a byte is returned.
//!
//! Manager round trips: writing a file costs two (`create`, which stages a fresh object and
//! returns its layout and a write capability, then `commit`) plus one drive write per chunk; a
//! read costs one (`open`) plus one drive read; capabilities are cached ([`crate::capcache`]),
//! the upload's one included, so repeated access costs none. While the manager is down, cached
//! capabilities keep the data path open until they expire. Streaming transfers of whole files
//! are in [`crate::transfer`].
//!
//! Quotas (seed 002 §3.2): every request for write capabilities says how many bytes past the
//! file's size the writer means to write (`extend_by`). For a file whose owner has a quota
//! the manager escrows them and bounds the capabilities' regions to match, and the grant says
//! how far writes may go ([`OpenFile::write_end`]); a writer that would pass it asks for more
//! first — the exact amount when it knows the file's size, else [`ESCROW_CHUNK_BYTES`] at a
//! time, so a stream of unknown length writes under a quota in chunks. Grants of users
//! without a quota are unbounded and cost nothing more.

use crate::auth::Capability;
use crate::callbacks::{Cached, CallbackState};
use crate::capcache::{CapCache, OpenFile};
use crate::component::ComponentIo;
use crate::escape::shown;
use crate::layer::{FileIo, IoError};
use crate::pool::ConnPool;
use crate::session::{Session, SessionConfig, SessionError};
use crate::striped::{Damage, DamageHook};
use crate::ClientError;
use nasd_crypto::Key;
use nasd_proto::manager::*;
use nasd_proto::Status;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes per drive request of a streaming transfer.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Pieces a streaming transfer keeps in flight, at most.
pub const TRANSFER_IN_FLIGHT_MAX: usize = 16;
/// Bytes a streaming transfer keeps in flight, at most (pieces of a striped file are larger,
/// so fewer of them; never fewer than [`TRANSFER_IN_FLIGHT_MIN`]).
pub const TRANSFER_BYTES_IN_FLIGHT_MAX: u64 = 16 << 20;
pub const TRANSFER_IN_FLIGHT_MIN: usize = 2;
pub use crate::pool::CONNS_PER_DRIVE;
/// After the manager could not be reached, how long to use cached capabilities before trying
/// it again.
pub const MANAGER_RETRY_AFTER_MS: u64 = 2_000;
/// How long a finished upload keeps trying to commit while the manager cannot be reached:
/// its bytes are durable on the drive and the manager keeps the staged record across a
/// restart, so waiting out a manager restart saves the transfer. Far below the orphan
/// scrub's grace period, after which the staged record expires.
pub const COMMIT_RETRY_MS: u64 = 60_000;
/// First pause between commit attempts; it doubles up to [`COMMIT_RETRY_EACH_MS_MAX`].
pub const COMMIT_RETRY_FIRST_MS: u64 = 100;
pub const COMMIT_RETRY_EACH_MS_MAX: u64 = 2_000;
/// How often a copy-on-write change starts over when another change of the file committed
/// first.
pub const CHANGE_ATTEMPTS_MAX: usize = 8;
/// Most damaged ranges one read reports to the manager for repair.
pub const REPAIR_REPORTS_MAX: usize = 16;
/// Bytes of quota escrow a writer asks for at a time when it does not know how much it will
/// write (a stream, a handle): at several hundred MB/s that is a few manager round trips a
/// second, and an abandoned writer holds at most this much of its owner's quota until its
/// capability expires. Near the limit the writer asks for exactly what the next write needs.
pub const ESCROW_CHUNK_BYTES: u64 = 64 << 20;

const _: () = assert!(CHUNK_BYTES <= nasd_proto::DATA_BYTES_MAX);

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What went wrong, naming the path. Paths and the manager's details are printed through
/// [`shown`]: they may hold names other users chose.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The manager refused or could not be reached. The error is not a `source`, so a report
    /// prints it once.
    #[error("nasd:{}: {}", shown(.path), describe(.path, .error))]
    Manager { path: String, error: SessionError },
    /// A drive operation failed; `drive` is the drive's address. The error is not a
    /// `source`, so a report prints it once.
    #[error("nasd:{}: {} on drive {drive}: {}", shown(.path), drive_reason(.error), shown(&.error.to_string()))]
    Drive {
        path: String,
        drive: String,
        error: ClientError,
    },
    /// The object the drive holds under the file's layout is not the file the manager named:
    /// its `fs_specific` record names another inode (a pointer in the manager's database was
    /// changed), or none. Nothing was read.
    #[error("nasd:{}: the object on drive {drive} belongs to {found}, not to inode {expected}; refusing to read it", shown(.path))]
    WrongObject {
        path: String,
        drive: String,
        expected: u64,
        found: ObjectOwner,
    },
    /// The layout could not serve the request: too few components answered, or more of them
    /// disagree than its code corrects. Nothing wrong was returned or written.
    #[error("nasd:{}: {detail}", shown(.path))]
    Layout { path: String, detail: String },
    /// End-to-end protection refused (issue 10): the side data does not match the trusted
    /// record, a signature does not verify, a key cannot be had. Nothing was returned.
    #[error("nasd:{}: {detail}", shown(.path))]
    E2e { path: String, detail: String },
    /// The manager's key log was refused (issue 21 §4): an entry does not follow its user's
    /// chain, the root is not the signed one, the log shrank or changed its key, or the
    /// manager answered keys the log does not hold. No key from it was used.
    #[error("nasd: {0}")]
    KeyLog(crate::e2e::keylog::KeyLogError),
    #[error("{}: {source}", shown(.path))]
    Local {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
    /// The manager answered `call` with a reply of another kind (`reply`): it speaks the
    /// protocol otherwise than this client. Nothing was done with the reply.
    #[error("nasd:{}: the manager answered {call} with {reply}", shown(.path))]
    Protocol {
        path: String,
        call: &'static str,
        reply: &'static str,
    },
}

// Not a `source`: a report prints the key log's error once.
impl From<crate::e2e::keylog::KeyLogError> for FsError {
    fn from(e: crate::e2e::keylog::KeyLogError) -> FsError {
        FsError::KeyLog(e)
    }
}

/// [`FsError::Protocol`]: `call` about `path` answered with `reply`.
pub(crate) fn protocol(path: &str, call: &'static str, reply: &'static str) -> FsError {
    FsError::Protocol {
        path: path.into(),
        call,
        reply,
    }
}

/// Whose object a drive holds, as its `fs_specific` record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectOwner {
    Inode(u64),
    /// No version-1 record: not an object the manager made for a file.
    Unknown,
}

impl std::fmt::Display for ObjectOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectOwner::Inode(i) => write!(f, "inode {i}"),
            ObjectOwner::Unknown => f.write_str("no file (no file record)"),
        }
    }
}

/// The inode number in a version-1 `fs_specific` record, the layout the manager writes
/// (`nasd_manager::service::FsAttr`, docs/manager.md):
/// ```text
/// 0 u8 version (1)  1 u8 kind  2 u32 mode  6 u32 uid  10 u32 gid  14 u64 ino  22.. zero
/// ```
pub fn fs_specific_ino(b: &[u8; nasd_proto::FS_SPECIFIC_BYTES]) -> Option<u64> {
    if b[0] != FS_RECORD_VERSION {
        return None;
    }
    Some(u64::from_le_bytes(
        b[FS_INO_AT..FS_INO_AT + 8].try_into().expect("8 bytes"),
    ))
}

/// The path whose own stat `req` answers with after changing it (manager protocol 24).
fn changed_path(req: &MgrRequest) -> Option<&str> {
    match req {
        MgrRequest::Mkdir(calls::Mkdir { path, .. })
        | MgrRequest::Chmod(calls::Chmod { path, .. })
        | MgrRequest::Chown(calls::Chown { path, .. })
        | MgrRequest::Truncate(calls::Truncate { path, .. })
        | MgrRequest::Utimes(calls::Utimes { path, .. }) => Some(path),
        _ => None,
    }
}

/// The directory part of an absolute path (`/` for a name in the root).
fn parent_of(path: &str) -> &str {
    let p = path.trim_end_matches('/');
    match p.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &p[..i],
    }
}

/// Whether a version-1 `fs_specific` record flags its object as an encrypted file's (bit 0 of
/// the flags byte at 22).
pub fn fs_specific_encrypted(b: &[u8; nasd_proto::FS_SPECIFIC_BYTES]) -> bool {
    b[0] == FS_RECORD_VERSION && b[FS_FLAGS_AT] & 1 == 1
}

/// Mode, uid and gid in a version-1 `fs_specific` record (at 2, 6 and 10).
fn fs_specific_owner(b: &[u8; nasd_proto::FS_SPECIFIC_BYTES]) -> Option<(u32, u32, u32)> {
    if b[0] != FS_RECORD_VERSION {
        return None;
    }
    let at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    Some((at(2), at(6), at(10)))
}

/// Version byte of the manager's `fs_specific` record, and where its inode number lies.
const FS_RECORD_VERSION: u8 = 1;
const FS_INO_AT: usize = 14;
const FS_FLAGS_AT: usize = 22;

/// Checks that a drive object's `fs_specific` names inode `expected`. A record with inode 0
/// was written by a manager before protocol 3 (new files were mirrored before they had a
/// number) and is let through: a chmod, chown or overwrite rewrites it.
fn check_owner(fs: &[u8; nasd_proto::FS_SPECIFIC_BYTES], expected: u64) -> Result<(), ObjectOwner> {
    match fs_specific_ino(fs) {
        Some(i) if i == expected || i == 0 => Ok(()),
        Some(i) => Err(ObjectOwner::Inode(i)),
        None => Err(ObjectOwner::Unknown),
    }
}

/// What a drive failure means for the file, in words.
fn drive_reason(e: &ClientError) -> &'static str {
    match e {
        ClientError::Connect { .. }
        | ClientError::ConnectionLost(_)
        | ClientError::Timeout { .. } => "drive unreachable",
        e => match e.status() {
            Some(Status::DiskFull | Status::QuotaExceeded) => "disk full",
            _ => "drive error",
        },
    }
}

/// A layer's failure for `path`, as the user reads it.
pub(crate) fn io_err(path: &str, e: IoError) -> FsError {
    match e {
        IoError::Drive { addr, error, .. } => FsError::Drive {
            path: path.to_string(),
            drive: addr,
            error,
        },
        IoError::Unavailable(detail) | IoError::Uncorrectable(detail) => FsError::Layout {
            path: path.to_string(),
            detail,
        },
        IoError::Usage(d) => FsError::Usage(d),
    }
}

/// Whether a refusal means the grant is stale (revoked, expired, or its object replaced), so
/// a fresh one from the manager may succeed.
fn grant_refused(e: &IoError) -> bool {
    matches!(
        e.status(),
        Some(Status::BadDigest | Status::CapabilityExpired | Status::NoSuchObject)
    )
}

/// The manager's error for `path` in words: its status, then whatever its detail adds. The
/// detail often repeats the path the message already names; only that repetition is dropped,
/// never the rest of the detail.
fn describe(path: &str, e: &SessionError) -> String {
    match e {
        SessionError::Refused { status, detail, .. } => {
            let extra = match detail.strip_prefix(path) {
                Some(r) if r.is_empty() || r.starts_with([':', ' ']) => {
                    let r = r.trim_start_matches(':').trim();
                    r.strip_prefix('(')
                        .and_then(|r| r.strip_suffix(')'))
                        .unwrap_or(r)
                }
                _ => detail.as_str(),
            };
            if extra.is_empty() || extra == status.text() {
                status.text().to_string()
            } else {
                format!("{} ({})", status.text(), shown(extra))
            }
        }
        e => shown(&e.to_string()).into_owned(),
    }
}

impl FsError {
    pub fn status(&self) -> Option<MgrStatus> {
        match self {
            FsError::Manager { error, .. } => error.status(),
            _ => None,
        }
    }
    pub fn drive_status(&self) -> Option<Status> {
        match self {
            FsError::Drive { error, .. } => error.status(),
            _ => None,
        }
    }
}

/// The grant `g` for `path` as this client keeps it.
fn open_file(path: &str, g: Grant) -> OpenFile {
    let Grant {
        stat,
        layout,
        caps,
        write_end,
        policy,
        e2e,
    } = g;
    let caps = caps
        .into_iter()
        .zip(&layout.components)
        .map(|(g, c)| Capability {
            args: g.args,
            key: Key::from_bytes(g.key),
            sealed: None,
            suite: c.suite,
            signer: None,
        })
        .collect();
    OpenFile {
        path: path.into(),
        stat,
        caps,
        layout,
        issued_ms: now_ms(),
        owner_checked: Default::default(),
        write_end,
        policy,
        e2e,
        crypt: Default::default(),
        group_locks: crate::striped::group_locks(),
    }
}

/// Where an upload's bytes go: a staged layout (fresh component objects) that no name shows
/// until [`Client::finish_upload`] commits it — as the new content of an existing file, or as
/// a new file — so a failed or interrupted upload never leaves a partial file visible, and an
/// overwritten file keeps its old content until the new one is complete.
#[derive(Clone)]
pub struct Upload {
    path: String,
    /// Where the staged objects live (fixed for the upload's life).
    layout: Layout,
    /// The staged objects' current grant, shared by the upload's parallel writes. It is
    /// renewed with `Renew` once due (never through `open`, which would return the visible
    /// file's objects), one renewal at a time.
    grant: Arc<tokio::sync::Mutex<Arc<OpenFile>>>,
    stat: FileStat,
    replaces: bool,
    /// The end of the furthest write: the file's size at commit.
    end: Arc<AtomicU64>,
    /// Components a write could not reach (bit i: component i): stale at commit.
    missed: Arc<AtomicU64>,
}

impl Upload {
    pub fn path(&self) -> &str {
        &self.path
    }
    /// Whether this upload replaces an existing file.
    pub fn replaces(&self) -> bool {
        self.replaces
    }
    /// The file as the manager described it when the upload began: the existing file's
    /// attributes for an overwrite, the new file's otherwise.
    pub fn stat(&self) -> &FileStat {
        &self.stat
    }
    /// The staged layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// A file prepared by the manager ([`crate::prepared`]), not yet bound to a name.
    pub(crate) fn prepared(
        dir: &str,
        f: nasd_proto::manager::PreparedFile,
    ) -> Result<Upload, FsError> {
        check_grants(dir, &f.layout, &f.caps)?;
        let (stat, layout) = (f.stat.clone(), f.layout.clone());
        let grant = open_file(
            dir,
            Grant {
                stat: f.stat,
                layout: f.layout,
                caps: f.caps,
                write_end: f.write_end,
                policy: f.policy,
                e2e: None,
            },
        );
        // The objects were just made for this file by the manager.
        grant.owner_checked.store(true, Ordering::Release);
        Ok(Upload {
            path: dir.into(),
            layout,
            stat,
            grant: Arc::new(tokio::sync::Mutex::new(Arc::new(grant))),
            replaces: false,
            end: Arc::new(AtomicU64::new(0)),
            missed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The end of the upload's furthest write.
    pub(crate) fn written_end(&self) -> u64 {
        self.end.load(Ordering::Relaxed)
    }

    /// The staged objects' current grant.
    pub(crate) async fn grant(&self) -> Arc<OpenFile> {
        self.grant.lock().await.clone()
    }

    /// The same upload, committed (and renewed, aborted) as `path`.
    pub(crate) fn bound_to(mut self, path: &str) -> Upload {
        self.path = path.into();
        self
    }

    /// Whether its capabilities are still short of renewal at `now_ms`.
    pub(crate) fn usable_until(&self, now_ms: u64) -> bool {
        self.grant
            .try_lock()
            .is_ok_and(|g| !g.needs_renewal(now_ms))
    }

    /// The upload's name at the manager: its first component that is not stale.
    fn key(&self) -> (nasd_proto::DriveId, nasd_proto::ObjectId) {
        staged_key(&self.layout)
    }
}

/// The name a staged layout goes by at the manager: its first component that is not stale (a
/// fresh object; a stale one may be shared with the file's committed layout).
fn staged_key(l: &Layout) -> (nasd_proto::DriveId, nasd_proto::ObjectId) {
    let c = l
        .components
        .iter()
        .find(|c| !c.stale)
        .unwrap_or(&l.components[0]);
    (c.drive, c.object)
}

/// Bit i set for each stale component i.
fn stale_mask(l: &Layout) -> u64 {
    l.components
        .iter()
        .enumerate()
        .filter(|(_, c)| c.stale)
        .fold(0, |m, (i, _)| m | 1 << i)
}

/// A connection to a nasd cluster as one user.
pub struct Client {
    pub(crate) cfg: SessionConfig,
    /// How long a read waits on one component of a layout with redundancy before decoding
    /// around it, in ms.
    read_deadline_ms: AtomicU64,
    session: tokio::sync::Mutex<Option<Session>>,
    caps: CapCache,
    pool: Arc<ConnPool>,
    manager_down_until_ms: AtomicU64,
    /// New files the manager staged ahead of their names.
    pub(crate) prepared: crate::prepared::Pools,
    /// Manager round trips so far (for benchmarks and tests).
    pub manager_round_trips: AtomicU64,
    /// AFS callbacks: the channel's state and the attributes it keeps true.
    pub callbacks: CallbackState,
    /// End-to-end keys: this user's, others' public ones, group secrets (issue 10).
    pub(crate) keyring: crate::e2e::keyring::Keyring,
    /// Record locks this client's lock owners hold at the manager ([`crate::locks`]).
    pub(crate) held_locks: crate::locks::HeldLocks,
}

impl Client {
    /// The drive connections this client shares among its files.
    pub(crate) fn pool(&self) -> &Arc<ConnPool> {
        &self.pool
    }

    /// Connects and logs in.
    pub async fn connect(cfg: SessionConfig) -> Result<Arc<Client>, FsError> {
        let mut s = Session::connect(&cfg)
            .await
            .map_err(|error| FsError::Manager {
                path: "/".into(),
                error,
            })?;
        let seed_key = s.seed_key.take();
        let c = Arc::new(Client {
            cfg,
            session: tokio::sync::Mutex::new(Some(s)),
            caps: CapCache::new(),
            pool: Arc::new(ConnPool::new()),
            manager_down_until_ms: AtomicU64::new(0),
            prepared: Default::default(),
            manager_round_trips: AtomicU64::new(1),
            read_deadline_ms: AtomicU64::new(crate::striped::READ_DEADLINE_MS),
            callbacks: CallbackState::default(),
            keyring: Default::default(),
            held_locks: Default::default(),
        });
        c.set_seed_key(seed_key);
        Ok(c)
    }

    /// The live session, connected (and logged in with this client's credential) if there
    /// is none: for a sequence of calls that must go on one connection.
    pub(crate) async fn session_guard(
        &self,
    ) -> Result<tokio::sync::MutexGuard<'_, Option<Session>>, FsError> {
        let mut g = self.session.lock().await;
        if g.is_none() {
            let s = Session::connect(&self.cfg)
                .await
                .map_err(|error| FsError::Manager {
                    path: "/".into(),
                    error,
                })?;
            *g = Some(s);
        }
        Ok(g)
    }

    pub(crate) fn cfg_user(&self) -> String {
        self.cfg.user.clone()
    }

    pub(crate) fn caps_invalidate(&self, path: &str) {
        self.caps.invalidate(path);
    }

    /// A client acting for `user`, for a trusted front end (an S3 gateway, a file server)
    /// whose own user an admin made a gateway (`nasd user gateway NAME on`): the manager
    /// opens a session for `user` on this client's word, and the new client logs in with
    /// its token, so the user's password never reaches the front end. Refused for admins.
    pub async fn act_for(&self, user: &str) -> Result<Arc<Client>, FsError> {
        let ok = self.call("/", calls::ActFor { user: user.into() });
        let token = ok.await?.token;
        let principals = self.principals_of(user).await?;
        let cfg = SessionConfig {
            user: user.to_string(),
            credential: Credential::Token(token.0),
            signing_key: None,
            ..self.cfg.clone()
        };
        let c = Client::connect(cfg).await?;
        c.set_read_deadline_ms(self.read_deadline_ms.load(Ordering::Relaxed));
        // It decrypts what is wrapped for this (the gateway's) user, where the user's own
        // client would too, and signs as it.
        if let Ok(identity) = self.identity().await {
            c.set_identity_source(crate::e2e::keyring::IdentitySource::Delegate {
                identity,
                user: principals,
            });
        }
        Ok(c)
    }

    /// `user`'s uid and groups, as this client's session sees them.
    async fn principals_of(&self, user: &str) -> Result<crate::e2e::keyring::Principals, FsError> {
        let users = self.call("/", calls::UserList).await?;
        let u = users.into_iter().find(|u| u.name == user).ok_or_else(|| {
            FsError::Usage(format!("user {} is not in the manager's list", shown(user)))
        })?;
        let gids = match u.groups.is_empty() {
            true => vec![],
            false => self
                .call(
                    "/",
                    calls::GroupKeyGet {
                        gids: vec![],
                        names: u.groups,
                    },
                )
                .await?
                .into_iter()
                .map(|g| g.gid)
                .collect(),
        };
        Ok(crate::e2e::keyring::Principals {
            name: u.name,
            uid: u.uid,
            gids,
        })
    }

    /// The user this client logged in as.
    pub fn user(&self) -> &str {
        &self.cfg.user
    }

    /// Where this client's cluster is (the manager and its CA), for another login there: the
    /// user and credentials are left empty.
    pub fn cluster_config(&self) -> SessionConfig {
        SessionConfig {
            manager: self.cfg.manager.clone(),
            ca_der: self.cfg.ca_der.clone(),
            user: String::new(),
            credential: Credential::Password(String::new().into()),
            signing_key: None,
        }
    }

    /// Sets how long a read waits on one component before decoding around it.
    pub fn set_read_deadline_ms(&self, ms: u64) {
        self.read_deadline_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// The uid of the live session, if there is one.
    pub(crate) async fn session_uid(&self) -> Option<u32> {
        self.session.lock().await.as_ref().map(|s| s.uid)
    }

    /// The session token and its expiry (for `nasd login`).
    pub async fn token(&self) -> Option<([u8; TOKEN_BYTES], u64)> {
        self.session
            .lock()
            .await
            .as_ref()
            .map(|s| (s.token, s.expires_ms))
    }

    /// Sends call `c` about `path` to the manager and returns its reply: the one way this
    /// client talks to the manager. A lost connection is resumed once, with its session's
    /// token (the manager may have restarted); a write grant refused for want of this user's
    /// end-to-end keys is asked for again once they are registered; a refusal is
    /// [`FsError::Manager`], a reply of another kind [`FsError::Protocol`].
    pub async fn call<C: Call>(&self, path: &str, c: C) -> Result<C::Reply, FsError> {
        let r = self.request(path, c.into()).await?;
        C::Reply::from_reply(r).map_err(|reply| protocol(path, C::NAME, reply))
    }

    /// Sends a request to the manager (see [`Client::call`]); an `Error` reply is refused.
    async fn request(&self, path: &str, req: MgrRequest) -> Result<MgrReply, FsError> {
        // A write grant under scheme 1 names the writer's key: a user who has none registered
        // yet registers it (loading the identity does) and asks once more.
        let grant = matches!(
            req,
            MgrRequest::Open(calls::Open { write: true, .. })
                | MgrRequest::Create(_)
                | MgrRequest::StageWrite(_)
                | MgrRequest::Renew(_)
                | MgrRequest::Prepare(_)
        );
        if !grant || self.keyring_identity().is_some() {
            return self.request_once(path, req).await;
        }
        match self.request_once(path, req.clone()).await {
            Err(e) if e.status() == Some(MgrStatus::NoUserKeys) => {
                // Boxed: loading the identity sends requests of its own (none a grant).
                Box::pin(self.identity()).await?;
                self.request_once(path, req).await
            }
            r => r,
        }
    }

    /// Sends `req` once (resuming a lost session). What this client cached about what `req`
    /// changes is dropped before it is sent, so nothing stale is served meanwhile, and again
    /// once it landed: a stat sent before it on the shared session, and answered with the old
    /// state, may have been cached in between, and the manager breaks no callback of this
    /// client's own for its own change. A change that answers with the path's stat afterwards
    /// leaves that stat cached ([`crate::callbacks::CallbackState::put_own`]).
    async fn request_once(&self, path: &str, req: MgrRequest) -> Result<MgrReply, FsError> {
        self.own_change(&req);
        let (heard, sent_ms) = (self.callbacks.heard(), now_ms());
        let r = self.send(path, &req).await;
        self.own_change(&req);
        if let (Ok(MgrReply::Stat(stat)), Some(changed)) = (&r, changed_path(&req)) {
            let c = Cached {
                stat: stat.clone(),
                xattrs: None,
                fetched_ms: sent_ms,
            };
            self.callbacks.put_own(changed, c, heard);
        }
        r
    }

    async fn send(&self, path: &str, req: &MgrRequest) -> Result<MgrReply, FsError> {
        let mut g = self.session.lock().await;
        let mut last = None;
        // After a lost connection, the session it carried is resumed with its token (still
        // the same session to the manager: its write leases stay its own).
        let mut resume: Option<[u8; TOKEN_BYTES]> = None;
        for _ in 0..2 {
            if g.is_none() {
                let resumed = match resume {
                    Some(t) if self.cfg.signing_key.is_none() => {
                        let mut cfg = self.cfg.clone();
                        cfg.credential = Credential::Token(t);
                        Session::connect(&cfg).await.ok()
                    }
                    _ => None,
                };
                let made = match resumed {
                    Some(s) => Ok(s),
                    None => Session::connect(&self.cfg).await,
                };
                match made {
                    Ok(s) => *g = Some(s),
                    Err(e) => {
                        if e.is_unavailable() {
                            self.manager_down_until_ms
                                .store(now_ms() + MANAGER_RETRY_AFTER_MS, Ordering::Relaxed);
                        }
                        return Err(FsError::Manager {
                            path: path.into(),
                            error: e,
                        });
                    }
                }
            }
            self.manager_round_trips.fetch_add(1, Ordering::Relaxed);
            match g.as_mut().expect("connected above").request(req).await {
                Ok(r) => return Ok(r),
                Err(e) if e.is_unavailable() => {
                    resume = g
                        .take()
                        .filter(|s| s.expires_ms > now_ms())
                        .map(|s| s.token);
                    last = Some(e);
                }
                Err(e) => {
                    return Err(FsError::Manager {
                        path: path.into(),
                        error: e,
                    })
                }
            }
        }
        self.manager_down_until_ms
            .store(now_ms() + MANAGER_RETRY_AFTER_MS, Ordering::Relaxed);
        Err(FsError::Manager {
            path: path.into(),
            error: last.expect("set in the loop"),
        })
    }

    /// Drops cached attributes a request of this client's own may change (the manager breaks
    /// only other sessions' callbacks). A change to a file drops the file and its directory; a
    /// change to names drops everything, since a renamed or removed directory takes every path
    /// below it along.
    fn own_change(&self, req: &MgrRequest) {
        use MgrRequest as Q;
        match req {
            Q::Login(_)
            | Q::Stat(_)
            | Q::Lstat(_)
            | Q::Getxattrs(_)
            | Q::Readdir(_)
            | Q::Readlink(_)
            | Q::Open(calls::Open { write: false, .. })
            | Q::Create(calls::Create {
                exclusive: false, ..
            })
            | Q::Prepare(_)
            | Q::StageWrite(_)
            | Q::Renew(_)
            | Q::Abort(_)
            | Q::Repair(_)
            | Q::LayoutGet(_)
            | Q::Status(_)
            | Q::UserList(_)
            | Q::DriveList(_)
            | Q::Challenge(_)
            | Q::ActFor(_)
            | Q::S3KeyList(_)
            | Q::S3KeySecret(_)
            | Q::QuotaGet(_)
            | Q::WaitBreaks(_)
            | Q::Lock(_)
            | Q::LockTest(_)
            | Q::Unlock(_)
            | Q::LockRenew(_)
            | Q::LockDrop(_) => {}
            Q::Open(calls::Open { path, .. })
            | Q::ReturnCapability(calls::ReturnCapability { path, .. })
            | Q::Commit(calls::Commit { path, .. })
            | Q::Chmod(calls::Chmod { path, .. })
            | Q::Chown(calls::Chown { path, .. })
            | Q::Truncate(calls::Truncate { path, .. })
            | Q::Utimes(calls::Utimes { path, .. })
            | Q::Setxattr(calls::Setxattr { path, .. }) => {
                self.callbacks.forget(path);
                self.callbacks.forget(parent_of(path));
            }
            _ => self.callbacks.clear(),
        }
    }

    /// Starts this client's callback channel (seed 002 §3.2, [`crate::callbacks`]): from now
    /// on stats are cached while the manager promises to tell of changes, and every break is
    /// applied here and handed to the hooks added with [`CallbackState::add_hook`]. The
    /// channel runs until the client is dropped, reconnecting after failures.
    pub fn enable_callbacks(self: &Arc<Self>) {
        if self.callbacks.live(now_ms()) {
            return;
        }
        self.callbacks.set_enabled();
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(c) = weak.upgrade() else { return };
                let r = c.run_channel().await;
                c.callbacks.polling(false, 0);
                c.drop_cached();
                tracing::debug!("callback channel closed: {r:?}");
                drop(c);
                tokio::time::sleep(std::time::Duration::from_millis(
                    crate::callbacks::CHANNEL_RETRY_MS,
                ))
                .await;
            }
        });
    }

    /// Forgets every cached stat, and tells the hooks (a reset break). Cached capabilities
    /// stay: the drives judge them (a revoked one is refused there), and reads go on with
    /// them while the manager restarts, as they do without callbacks.
    fn drop_cached(&self) {
        self.callbacks.apply(&CallbackBreak {
            seq: 0,
            ino: 0,
            parent: 0,
            name: String::new(),
        });
    }

    /// One connection of the callback channel, polled until it fails or the client is gone.
    async fn run_channel(self: &Arc<Self>) -> Result<(), FsError> {
        let Some((token, _)) = self.token().await else {
            return Err(FsError::Usage("not logged in".into()));
        };
        let cfg = SessionConfig {
            credential: Credential::Token(token),
            signing_key: None,
            ..self.cfg.clone()
        };
        let mut s = Session::connect(&cfg)
            .await
            .map_err(|error| FsError::Manager {
                path: "/".into(),
                error,
            })?;
        // Whatever was cached before this channel's first poll is unknown to it.
        self.drop_cached();
        let me = Arc::downgrade(self);
        drop(cfg);
        let mut acked = 0;
        loop {
            let Some(c) = me.upgrade() else {
                return Ok(());
            };
            c.callbacks.polling(true, 0);
            drop(c);
            let poll = calls::WaitBreaks {
                acked,
                wait_ms: BREAK_WAIT_MS_MAX,
            };
            let r = s.call(poll).await;
            let Some(c) = me.upgrade() else {
                return Ok(());
            };
            c.callbacks.polling(false, now_ms());
            let breaks = r.map_err(|error| FsError::Manager {
                path: "/".into(),
                error,
            })?;
            for b in &breaks {
                if b.ino == 0 {
                    c.drop_cached();
                } else {
                    c.caps.invalidate_broken(b.ino, &b.name);
                    c.callbacks.apply(b);
                }
                acked = acked.max(b.seq);
            }
        }
    }

    /// The stat of a one-object file from its drive's attributes under the cached read grant
    /// (`None` when there is none, or the drive refuses it: revoked, replaced, removed).
    /// Size and modify time are the object's; mode and owners are checked against its
    /// `fs_specific` record (a chmod or chown revokes the grant anyway).
    pub(crate) async fn stat_from_drive(&self, path: &str, now: u64) -> Option<FileStat> {
        let o = self.caps.get(path, false, true, now)?;
        if o.layout.components.len() != 1 || o.stat.kind != FileKind::File {
            return None;
        }
        let c = &o.layout.components[0];
        let io = ComponentIo::new(self.pool.clone(), 0, c.addr.clone(), o.caps[0].clone());
        let a = match io.getattr().await {
            Ok(a) => a,
            Err(e) => {
                if grant_refused(&e) {
                    self.caps.invalidate(path);
                }
                return None;
            }
        };
        check_owner(&a.fs_specific, o.stat.ino).ok()?;
        let (mode, uid, gid) = fs_specific_owner(&a.fs_specific)?;
        if (mode, uid, gid) != (o.stat.mode, o.stat.uid, o.stat.gid) {
            return None;
        }
        // An encrypted file's size is its trusted record's (its object pads a short tail);
        // the object under the grant is that version's, or the drive refused the grant.
        let size = match &o.e2e {
            Some(e) => nasd_e2e::TrustedRecord::decode(&e.record).ok()?.length,
            None => a.logical_size,
        };
        Some(FileStat {
            size,
            mtime_us: a.file_mtime_us(),
            ..o.stat.clone()
        })
    }

    /// Caches the grant `g` the manager gave for `path`.
    fn opened(&self, path: &str, write: bool, g: Grant) -> Result<Arc<OpenFile>, FsError> {
        check_grants(path, &g.layout, &g.caps)?;
        Ok(self.caps.put(write, open_file(path, g)))
    }

    /// A grant for `path`: from the cache while fresh, else from the manager; while the
    /// manager cannot be reached, a cached grant that has not expired.
    pub async fn open(&self, path: &str, write: bool) -> Result<Arc<OpenFile>, FsError> {
        self.open_to(path, write, 0).await
    }

    /// [`Client::open`], a write grant letting writes reach logical offset `need_end` (its
    /// quota escrow covers them: seed 002 §3.2). The escrow asked for is what `need_end`
    /// passes the file's size as this client last saw it (0 when it has seen none: the
    /// writers of this crate open the file for reading first), and, if the file is smaller
    /// at the manager, what it passes the size the reply gives.
    pub async fn open_to(
        &self,
        path: &str,
        write: bool,
        need_end: u64,
    ) -> Result<Arc<OpenFile>, FsError> {
        let now = now_ms();
        let covers = |o: &Arc<OpenFile>| !write || o.write_end >= need_end;
        if let Some(o) = self.caps.get(path, write, true, now).filter(covers) {
            return Ok(o);
        }
        let stale = self.caps.get(path, write, false, now).filter(covers);
        if let Some(o) = &stale {
            if now < self.manager_down_until_ms.load(Ordering::Relaxed) {
                return Ok(o.clone());
            }
        }
        let seen = self
            .caps
            .get(path, false, false, now)
            .or_else(|| self.caps.get(path, true, false, now))
            .map_or(0, |o| o.stat.size);
        let mut extend_by = if write {
            need_end.saturating_sub(seen)
        } else {
            0
        };
        let mut attempts = 0;
        let e = loop {
            attempts += 1;
            let open = calls::Open {
                path: path.into(),
                write,
                extend_by,
            };
            match self.call(path, open).await {
                Ok(g) => {
                    let o = self.opened(path, write, g)?;
                    if covers(&o) || attempts > 1 {
                        return Ok(o);
                    }
                    // The file is smaller than this client thought: ask for the rest.
                    extend_by = need_end.saturating_sub(o.stat.size);
                }
                Err(e) => break e,
            }
        };
        match (&e, stale) {
            (FsError::Manager { error, .. }, Some(o)) if error.is_unavailable() => {
                tracing::info!("manager unreachable; using the cached capability for {path}");
                Ok(o)
            }
            _ => Err(e),
        }
    }

    /// The file stack for a grant: the layout's layer over one [`ComponentIo`] per component
    /// object (a one-object layout is its component itself).
    pub fn stack(&self, o: &OpenFile) -> Result<Arc<dyn FileIo>, FsError> {
        self.stack_with(o, 0, None)
    }

    /// [`Client::stack`], with components in `missed` left alone as if stale, and damage
    /// found by reads reported to `damage`.
    fn stack_with(
        &self,
        o: &OpenFile,
        missed: u64,
        damage: Option<DamageHook>,
    ) -> Result<Arc<dyn FileIo>, FsError> {
        // An encrypted file: pins on its components, the encryption layer on top.
        let crypt = o.crypt.get();
        // Scheme-1 capabilities carry the user's signing key (loaded by `signer_ready`).
        let signer = self.keyring_identity().map(|id| id.drive_signer());
        let parts: Vec<Arc<dyn FileIo>> = o
            .layout
            .components
            .iter()
            .zip(&o.caps)
            .enumerate()
            .map(|(i, (c, cap))| {
                let cap = match (&cap.args.writer_key, &signer) {
                    (Some(_), Some(s)) => cap.clone().with_signer(s.clone()),
                    _ => cap.clone(),
                };
                let io = ComponentIo::new(self.pool.clone(), i, c.addr.clone(), cap);
                let io = match crypt.and_then(|f| f.pins.get(i)) {
                    Some(pin) => io.with_pin(pin.clone()),
                    None => io,
                };
                Arc::new(io) as Arc<dyn FileIo>
            })
            .collect();
        let deadline =
            std::time::Duration::from_millis(self.read_deadline_ms.load(Ordering::Relaxed));
        // Components whose pin the writer could not learn are read around, as stale ones.
        let unpinned = crypt.map_or(0, |f| {
            f.pins
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.pin().known)
                .fold(0u64, |m, (i, _)| m | 1 << i)
        });
        // An encrypted file's size is its writer state's, kept for all its stacks at once.
        let size = match crypt {
            Some(f) => crate::striped::SizeCell::Shared(f.stored.clone()),
            None => crate::striped::SizeCell::Own(o.stat.size),
        };
        let layout = crate::striped::stack(
            &o.layout.geometry,
            parts,
            size,
            stale_mask(&o.layout) | missed | unpinned,
            damage,
            deadline,
            o.group_locks.clone(),
        )
        .map_err(|e| io_err(&o.path, e))?;
        Ok(match crypt.filter(|f| !f.plain) {
            Some(f) => Arc::new(crate::e2e::crypt::CryptIo {
                file: f.clone(),
                lower: layout,
            }),
            None => layout,
        })
    }

    /// The encryption layer of an encrypted file's grant, made once per grant (its keys
    /// unwrapped, its side data checked against its record and signature).
    pub(crate) async fn ensure_crypt(&self, o: &OpenFile) -> Result<(), FsError> {
        self.signer_ready(o).await?;
        let Some(e) = &o.e2e else {
            return Ok(());
        };
        o.crypt
            .get_or_try_init(|| self.open_crypt(o, e, false))
            .await?;
        Ok(())
    }

    /// Loads this user's identity when `o`'s capabilities name a writer key, so the stacks
    /// built for it sign their writes (a write cannot be sent unsigned under them).
    pub(crate) async fn signer_ready(&self, o: &OpenFile) -> Result<(), FsError> {
        if o.caps.iter().any(|c| c.args.writer_key.is_some()) {
            self.identity().await?;
        }
        Ok(())
    }

    /// The writer state of an encrypted upload, or of a plaintext one over several objects
    /// (its pins): made at its first use (a fresh key wrapped for the file's readers, fresh
    /// tracks); `None` for a plaintext one-object upload.
    pub(crate) async fn upload_crypt(
        &self,
        u: &Upload,
    ) -> Result<Option<Arc<crate::e2e::crypt::CryptFile>>, FsError> {
        let g = u.grant.lock().await.clone();
        self.signer_ready(&g).await?;
        if !g.policy.encrypted && u.layout.components.len() < 2 {
            return Ok(None);
        }
        let f = g
            .crypt
            .get_or_try_init(|| async {
                match g.policy.encrypted {
                    true => {
                        self.new_crypt(&u.path, &u.stat, &u.layout, &g.policy, g.e2e.as_ref())
                            .await
                    }
                    false => {
                        self.new_pins(&u.path, u.stat.ino, &u.layout, g.e2e.as_ref())
                            .await
                    }
                }
            })
            .await?;
        Ok(Some(f.clone()))
    }

    /// Asks the manager to rewrite the ranges a read found damaged (read repair); failures
    /// are logged, the read already has its bytes.
    async fn report_damage(&self, path: &str, damaged: &std::sync::Mutex<Vec<Damage>>) {
        let mut found = std::mem::take(&mut *damaged.lock().expect("damage lock"));
        if found.is_empty() {
            return;
        }
        found.sort_by_key(|d| (d.component, d.offset));
        found.dedup();
        for d in found.into_iter().take(REPAIR_REPORTS_MAX) {
            let repair = calls::Repair {
                path: path.into(),
                component: d.component as u16,
                offset: d.offset,
                len: d.len,
            };
            match self.call(path, repair).await {
                Ok(()) => tracing::info!(
                    "repaired {} bytes at {} of component {} of {}",
                    d.len,
                    d.offset,
                    d.component,
                    shown(path)
                ),
                Err(e) => tracing::warn!("read repair of {} not done: {e}", shown(path)),
            }
        }
    }

    /// Checks, once per grant, that every component object the manager named is this file's:
    /// its `fs_specific` record, which only the manager writes, names the stat's inode
    /// ([`FsError::WrongObject`] otherwise). A component that cannot be reached is left to
    /// the layout to route around.
    async fn check_owners(&self, o: &OpenFile) -> Result<(), FsError> {
        if o.owner_checked.load(Ordering::Acquire) {
            return Ok(());
        }
        let checks = o
            .layout
            .components
            .iter()
            .zip(&o.caps)
            .enumerate()
            .filter(|(i, _)| !o.layout.components[*i].stale)
            .map(|(i, (c, cap))| async move {
                let io = ComponentIo::new(self.pool.clone(), i, c.addr.clone(), cap.clone());
                (c.addr.clone(), io.getattr().await)
            });
        for (addr, r) in futures_util::future::join_all(checks).await {
            match r {
                Ok(a) => {
                    check_owner(&a.fs_specific, o.stat.ino).map_err(|found| {
                        FsError::WrongObject {
                            path: o.path.clone(),
                            drive: addr.clone(),
                            expected: o.stat.ino,
                            found,
                        }
                    })?;
                    // Ciphertext with no trusted record to check it against: the manager
                    // lost the record (or was made to drop it); never served as plaintext.
                    if fs_specific_encrypted(&a.fs_specific) && o.e2e.is_none() {
                        return Err(FsError::E2e {
                            path: o.path.clone(),
                            detail: format!(
                                "the object on {addr} holds an encrypted file's ciphertext, and \
                                 the manager has no end-to-end record for it (lost): refusing"
                            ),
                        });
                    }
                }
                // A component that refuses the grant serves nothing under it (the layout
                // reads around it, or the read itself asks for a fresh grant); its owner is
                // checked under the next grant.
                Err(e) if grant_refused(&e) => return Ok(()),
                Err(_) => {}
            }
        }
        o.owner_checked.store(true, Ordering::Release);
        Ok(())
    }

    /// Runs `f` on the stack of `path`'s grant (the owner check alongside, the first time);
    /// on a refused grant (revoked, expired, objects replaced) fetches a new one from the
    /// manager and tries once more. Returns the result and the grant it ran under.
    pub(crate) async fn with_file<T, F, Fut>(
        &self,
        path: &str,
        write: bool,
        f: F,
    ) -> Result<(T, Arc<OpenFile>), FsError>
    where
        F: Fn(Arc<dyn FileIo>) -> Fut,
        Fut: Future<Output = Result<T, IoError>>,
    {
        self.with_file_to(path, write, 0, f).await
    }

    /// [`Client::with_file`] for writes reaching logical offset `need_end` (the grant's quota
    /// escrow covers them, [`Client::open_to`]).
    pub(crate) async fn with_file_to<T, F, Fut>(
        &self,
        path: &str,
        write: bool,
        need_end: u64,
        f: F,
    ) -> Result<(T, Arc<OpenFile>), FsError>
    where
        F: Fn(Arc<dyn FileIo>) -> Fut,
        Fut: Future<Output = Result<T, IoError>>,
    {
        let mut o = self.open_to(path, write, need_end).await?;
        self.ensure_crypt(&o).await?;
        let mut refreshed = false;
        let damaged: Arc<std::sync::Mutex<Vec<Damage>>> = Default::default();
        let hook: DamageHook = {
            let d = damaged.clone();
            Arc::new(move |x| d.lock().expect("damage lock").push(x))
        };
        loop {
            let io = self.stack_with(&o, 0, Some(hook.clone()))?;
            let (checked, r) = tokio::join!(self.check_owners(&o), f(io));
            match r {
                Ok(v) => {
                    checked?;
                    self.report_damage(path, &damaged).await;
                    return Ok((v, o));
                }
                Err(e) if !refreshed && grant_refused(&e) => {
                    refreshed = true;
                    self.caps.invalidate(path);
                    o = self.open_to(path, write, need_end).await?;
                    self.ensure_crypt(&o).await?;
                }
                Err(e) => {
                    checked?;
                    return Err(io_err(path, e));
                }
            }
        }
    }

    /// The first read of a stream of reads that must all come from one version of `path`:
    /// `len` bytes at `offset`, read as [`Client::read_at`] reads (a refused cached grant is
    /// replaced by a fresh one), and the grant they came from, for [`Client::read_pinned`].
    pub async fn read_first(
        &self,
        path: &str,
        offset: u64,
        len: u64,
    ) -> Result<(Vec<u8>, Arc<OpenFile>), FsError> {
        let (r, o) = self
            .with_file(path, false, |io| async move { io.read(offset, len).await })
            .await?;
        Ok((r.data, o))
    }

    /// Reads `len` bytes at `offset` with grant `o` only: if the file was replaced since,
    /// the read fails (its objects are gone) instead of reading the new version, so a
    /// stream of reads never mixes two versions of a file.
    pub async fn read_pinned(
        &self,
        o: &Arc<OpenFile>,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, FsError> {
        let damaged: Arc<std::sync::Mutex<Vec<Damage>>> = Default::default();
        let hook: DamageHook = {
            let d = damaged.clone();
            Arc::new(move |x| d.lock().expect("damage lock").push(x))
        };
        self.ensure_crypt(o).await?;
        let io = self.stack_with(o, 0, Some(hook))?;
        let (checked, r) = tokio::join!(self.check_owners(o), io.read(offset, len));
        checked?;
        let r = r.map_err(|e| io_err(&o.path, e))?;
        self.report_damage(&o.path, &damaged).await;
        Ok(r.data)
    }

    /// Creates a new file (`Exists` if the name is taken; [`Client::begin_upload`] replaces);
    /// one manager round trip that returns the layout and write capabilities.
    pub async fn create(&self, path: &str, mode: u32) -> Result<Arc<OpenFile>, FsError> {
        self.caps.invalidate(path);
        let create = calls::Create {
            path: path.into(),
            mode,
            exclusive: true,
            extend_by: 0,
        };
        let r = self.call(path, create).await?;
        let g = r
            .opened()
            .map_err(|reply| protocol(path, calls::Create::NAME, reply))?;
        self.opened(path, true, g)
    }

    /// Starts writing `path`: the manager stages fresh objects for the content, whether the
    /// file exists or not (one manager round trip). `mode` is a new file's mode; an existing
    /// file keeps its own. Under a quota the upload escrows [`ESCROW_CHUNK_BYTES`] at first
    /// (or nothing, when not even that fits) and more as its writes need.
    pub async fn begin_upload(&self, path: &str, mode: u32) -> Result<Upload, FsError> {
        self.begin_upload_sized(path, mode, None).await
    }

    /// [`Client::begin_upload`] of content whose size is known (`Some`): under a quota it is
    /// escrowed in one piece, so the upload needs no further round trip for escrow.
    pub async fn begin_upload_sized(
        &self,
        path: &str,
        mode: u32,
        size: Option<u64>,
    ) -> Result<Upload, FsError> {
        self.caps.invalidate(path);
        let create = |extend_by| calls::Create {
            path: path.into(),
            mode,
            exclusive: false,
            extend_by,
        };
        let r = match self
            .call(path, create(size.unwrap_or(ESCROW_CHUNK_BYTES)))
            .await
        {
            // A stream of unknown length near its owner's quota starts with no escrow and
            // asks for what each write needs.
            Err(e) if size.is_none() && e.status() == Some(MgrStatus::QuotaExceeded) => {
                self.call(path, create(0)).await?
            }
            r => r?,
        };
        let StagedGrant { grant: g, replaces } = r
            .staged()
            .map_err(|reply| protocol(path, calls::Create::NAME, reply))?;
        check_grants(path, &g.layout, &g.caps)?;
        let (stat, layout) = (g.stat.clone(), g.layout.clone());
        let grant = open_file(path, g);
        // The staged objects were just made for this file by the manager.
        grant.owner_checked.store(true, Ordering::Release);
        Ok(Upload {
            path: path.into(),
            layout,
            stat,
            grant: Arc::new(tokio::sync::Mutex::new(Arc::new(grant))),
            replaces,
            end: Arc::new(AtomicU64::new(0)),
            missed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The span an upload's writes should cover, aligned, so that no two of them share a
    /// stripe group (the layout's transfer piece, [`crate::layer::FileIo::transfer_bytes`]).
    pub async fn upload_granule(&self, u: &Upload) -> Result<u64, FsError> {
        Ok(self.upload_granules(u).await?.0)
    }

    /// Whether the upload's bytes are enciphered end to end (its directory's policy): what
    /// a gateway checks before it tells a client the object is encrypted at rest.
    pub async fn upload_encrypted(&self, u: &Upload) -> bool {
        u.grant.lock().await.policy.encrypted
    }

    /// [`Client::upload_granule`], and the layout's own write granule (its parity group;
    /// 1 when writes need no alignment).
    pub async fn upload_granules(&self, u: &Upload) -> Result<(u64, u64), FsError> {
        self.upload_crypt(u).await?;
        let g = u.grant.lock().await.clone();
        let io = self.stack(&g)?;
        let granule = io.write_granule().max(1);
        Ok((io.transfer_bytes().div_ceil(granule) * granule, granule))
    }

    /// Writes `data` at `offset` of an upload, renewing its capabilities when they are due
    /// (or when a drive refused them as expired).
    ///
    /// Under a quota a write past the upload's escrow asks for more first
    /// ([`Client::upload_grant`]).
    pub async fn upload_write(&self, u: &Upload, offset: u64, data: &[u8]) -> Result<(), FsError> {
        self.upload_crypt(u).await?;
        let end = offset + data.len() as u64;
        let g = self.upload_grant(u, None, end).await?;
        let missed = || u.missed.load(Ordering::Acquire);
        let io = self.stack_with(&g, missed(), None)?;
        let r = match io.write(offset, data).await {
            Err(e) if e.status() == Some(Status::CapabilityExpired) => {
                let g = self.upload_grant(u, Some(&g), end).await?;
                let io = self.stack_with(&g, missed(), None)?;
                let r = io.write(offset, data).await;
                u.missed.fetch_or(io.missed(), Ordering::AcqRel);
                r
            }
            r => {
                u.missed.fetch_or(io.missed(), Ordering::AcqRel);
                r
            }
        };
        r.map_err(|e| io_err(&u.path, e))?;
        u.end
            .fetch_max(offset + data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Makes the uploaded file `size` bytes long when its writes stopped short of that (a
    /// trailing hole): a one-object file gets a zero byte at its last offset (a write
    /// capability cannot set the size otherwise); for other layouts the commit carries it.
    pub async fn upload_size(&self, u: &Upload, size: u64) -> Result<(), FsError> {
        if u.end.load(Ordering::Relaxed) >= size {
            return Ok(());
        }
        if self.upload_crypt(u).await?.is_some_and(|f| !f.plain) {
            // Encrypted: the rest is a hole in the counters (the partial last block padded).
            let g = u.grant.lock().await.clone();
            let io = self.stack_with(&g, u.missed.load(Ordering::Acquire), None)?;
            io.set_size(size).await.map_err(|e| io_err(&u.path, e))?;
            u.end.fetch_max(size, Ordering::Relaxed);
            return Ok(());
        }
        if u.layout.components.len() == 1 {
            return self.upload_write(u, size - 1, &[0]).await;
        }
        u.end.fetch_max(size, Ordering::Relaxed);
        Ok(())
    }

    /// The upload's grant, renewed first when it is past three quarters of its life, when
    /// `expired` (the grant a drive just refused) is still the current one, or when its
    /// quota escrow stops short of `need_end` (then it asks for at least
    /// [`ESCROW_CHUNK_BYTES`] more, or exactly what is missing when that much does not fit).
    /// While the manager cannot be reached, a grant that has not expired and covers
    /// `need_end` is used as it is.
    async fn upload_grant(
        &self,
        u: &Upload,
        expired: Option<&Arc<OpenFile>>,
        need_end: u64,
    ) -> Result<Arc<OpenFile>, FsError> {
        let mut g = u.grant.lock().await;
        let now = now_ms();
        let short = need_end.saturating_sub(g.write_end);
        let due = short > 0
            || match expired {
                Some(old) => Arc::ptr_eq(old, &g),
                None => g.needs_renewal(now),
            };
        if !due {
            return Ok(g.clone());
        }
        let (drive, object) = u.key();
        let renew = |extend_by| calls::Renew {
            path: u.path.clone(),
            drive,
            object,
            extend_by,
        };
        let ask = if short > 0 {
            short.max(ESCROW_CHUNK_BYTES)
        } else {
            0
        };
        let r = match self.call(&u.path, renew(ask)).await {
            Err(e) if ask > short && e.status() == Some(MgrStatus::QuotaExceeded) => {
                self.call(&u.path, renew(short)).await
            }
            r => r,
        };
        match r {
            Ok(StagedGrant { grant: fresh, .. }) => {
                check_grants(&u.path, &fresh.layout, &fresh.caps)?;
                // The upload's stat, policy, the state it replaces and its writer state stay.
                let fresh = Grant {
                    stat: u.stat.clone(),
                    policy: g.policy.clone(),
                    e2e: g.e2e.clone(),
                    ..fresh
                };
                let mut fresh = open_file(&u.path, fresh);
                fresh.crypt = g.crypt.clone();
                fresh.group_locks = g.group_locks.clone();
                fresh.owner_checked.store(true, Ordering::Release);
                *g = Arc::new(fresh);
                Ok(g.clone())
            }
            Err(FsError::Manager { error, .. })
                if error.is_unavailable() && expired.is_none() && g.usable(now) && short == 0 =>
            {
                tracing::info!(
                    "manager unreachable ({error}); writing under the current capability"
                );
                Ok(g.clone())
            }
            Err(e) => Err(e),
        }
    }

    /// Ends an upload whose writes were all acknowledged (so durable on the drives): the
    /// manager commits the staged layout under the name and removes the objects it replaces.
    /// While the manager cannot be reached the commit is retried for up to
    /// [`COMMIT_RETRY_MS`] (the data is safe on the drives; a restarting manager still knows
    /// the staged upload). A refused commit aborts the upload, so its space comes back.
    pub async fn finish_upload(&self, u: Upload) -> Result<(), FsError> {
        self.finish_upload_with(u, None).await
    }

    /// [`Client::finish_upload`], making `xattrs` (when given) the file's whole set of
    /// extended attributes in the same manager transaction as its new content.
    pub async fn finish_upload_with(
        &self,
        u: Upload,
        xattrs: Option<Vec<Xattr>>,
    ) -> Result<(), FsError> {
        self.finish(u, xattrs, false).await
    }

    /// [`Client::finish_upload`] of a new file that lands only while its name is free
    /// (`Exists` else, and the upload is given up): `O_CREAT | O_EXCL` across clients.
    pub async fn finish_upload_exclusive(&self, u: Upload) -> Result<(), FsError> {
        let r = self.finish(u.clone(), None, true).await;
        if r.is_err() {
            self.abort_upload(&u).await;
        }
        r
    }

    async fn finish(
        &self,
        u: Upload,
        xattrs: Option<Vec<Xattr>>,
        exclusive: bool,
    ) -> Result<(), FsError> {
        self.caps.invalidate(&u.path);
        let (drive, object) = u.key();
        let mut size = u.end.load(Ordering::Relaxed);
        let g = u.grant.lock().await.clone();
        let mut e2e = None;
        // An upload that wrote nothing still needs its (empty) encrypted or pinned version.
        let crypt = match self.upload_crypt(&u).await {
            Ok(f) => f,
            Err(e) => {
                self.abort_upload(&u).await;
                return Err(e);
            }
        };
        if let Some(f) = crypt {
            if f.plain {
                // A plain file's trailing hole is in its size, not its objects.
                f.stored.fetch_max(size, Ordering::AcqRel);
            }
            size = f.length();
            let missed = u.missed.load(Ordering::Acquire) | stale_mask(&g.layout);
            if let Err(e) = self.pin_missed(&g, &f, missed).await {
                self.abort_upload(&u).await;
                return Err(e);
            }
            match self.crypt_commit(&f, g.policy.auth, [0; 32]).await {
                Ok(c) => e2e = Some(c),
                Err(e) => {
                    self.abort_upload(&u).await;
                    return Err(e);
                }
            }
        }
        let commit = calls::Commit {
            path: u.path.clone(),
            drive,
            object,
            size,
            stale: u.missed.load(Ordering::Acquire),
            xattrs,
            e2e: e2e.clone(),
            exclusive,
        };
        let r = self.commit(&u.path, commit).await;
        self.caps.invalidate(&u.path);
        match &r {
            // The staged objects are now the file's: keep the upload's capabilities for reading
            // it back without a manager round trip (not for writing: an upload holds no write
            // lease).
            // A grant a quota bounds is not kept for reads (a read past its regions fails).
            Ok(()) if !u.grant.lock().await.whole() => {}
            Ok(()) => {
                let g = u.grant.lock().await.clone();
                let mut o = (*g).clone();
                // A prepared file's grant was made for its directory: keep it under the
                // file's own name.
                o.path = u.path.clone();
                o.stat.size = size;
                // Reads of the new version go through the writer's own layer (its tracks
                // are the pins), under the state just committed.
                o.e2e = e2e.map(|c| E2eState {
                    writer: o.stat.uid,
                    ..c.state
                });
                for (c, stale) in o.layout.components.iter_mut().zip(0..) {
                    c.stale |= u.missed.load(Ordering::Acquire) >> stale & 1 == 1;
                }
                self.caps.put(false, o);
            }
            Err(e) if e.status().is_some() => self.abort_upload(&u).await,
            Err(_) => {}
        }
        r
    }

    /// Sends a commit; while the manager cannot be reached, retries for up to
    /// [`COMMIT_RETRY_MS`] (the data is durable on the drives, and a restarting manager still
    /// knows what was staged).
    async fn commit(&self, path: &str, commit: calls::Commit) -> Result<(), FsError> {
        let deadline = now_ms() + COMMIT_RETRY_MS;
        let mut wait_ms = COMMIT_RETRY_FIRST_MS;
        loop {
            match self.call(path, commit.clone()).await {
                Err(FsError::Manager { error, .. })
                    if error.is_unavailable() && now_ms() + wait_ms < deadline =>
                {
                    tracing::info!("manager unreachable ({error}); retrying the commit");
                    tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
                    wait_ms = (wait_ms * 2).min(COMMIT_RETRY_EACH_MS_MAX);
                }
                r => return r,
            }
        }
    }

    /// Gives up a staged change named by `key` (best effort; an abandoned one expires).
    async fn abort_staged(&self, path: &str, key: (nasd_proto::DriveId, nasd_proto::ObjectId)) {
        let abort = calls::Abort {
            path: path.into(),
            drive: key.0,
            object: key.1,
        };
        if let Err(e) = self.call(path, abort).await {
            tracing::warn!("could not abort the change of {}: {e}", shown(path));
        }
    }

    /// Changes a file spread over several objects as one transaction (seed 002 §3.3's
    /// striping layer, written without a write hole): the manager stages copies of its
    /// components (`StageWrite`, which takes the file's write lease), `f` changes them through
    /// the layout layer, and the commit swaps them in with the file's new size, marking stale
    /// whatever the writes could not reach. A crash or failure at any point leaves the file
    /// as it was; if another change committed first, this one starts over on the new version.
    ///
    /// `end` is the furthest logical offset `f` writes to: under a quota, what passes the
    /// file's size is escrowed for the change (seed 002 §3.2).
    pub async fn change<F, Fut>(&self, path: &str, end: u64, f: F) -> Result<(), FsError>
    where
        F: Fn(Arc<dyn FileIo>) -> Fut,
        Fut: Future<Output = Result<(), IoError>>,
    {
        let seen = self
            .caps
            .get(path, false, false, now_ms())
            .map_or(0, |o| o.stat.size);
        let mut extend_by = end.saturating_sub(seen);
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.caps.invalidate(path);
            let stage = calls::StageWrite {
                path: path.into(),
                extend_by,
            };
            let g = self.call(path, stage).await?.grant;
            check_grants(path, &g.layout, &g.caps)?;
            let key = staged_key(&g.layout);
            if g.write_end < end && attempt < CHANGE_ATTEMPTS_MAX {
                // The file is smaller than this client thought: ask for the rest.
                self.abort_staged(path, key).await;
                extend_by = end.saturating_sub(g.stat.size);
                continue;
            }
            // An encrypted file changes under its writer's state: the copies' tracks start
            // at the pins, the counters and keys at the version the change builds on.
            let expect = crate::e2e::state_hash(g.e2e.as_ref());
            let auth = g.policy.auth;
            let grant = open_file(path, g);
            if let Err(err) = self.change_ready(&grant).await {
                self.abort_staged(path, key).await;
                return Err(err);
            }
            let io = self.stack_with(&grant, 0, None)?;
            let done = async {
                f(io.clone()).await?;
                io.size().await
            };
            let size = match done.await {
                Ok(size) => size,
                Err(e) => {
                    self.abort_staged(path, key).await;
                    return Err(io_err(path, e));
                }
            };
            let e2e = match grant.crypt.get() {
                None => None,
                Some(f) => match async {
                    self.pin_missed(&grant, f, io.missed() | stale_mask(&grant.layout))
                        .await?;
                    self.crypt_commit(f, auth, expect).await
                }
                .await
                {
                    Ok(c) => Some(c),
                    Err(e) => {
                        self.abort_staged(path, key).await;
                        return Err(e);
                    }
                },
            };
            let commit = calls::Commit {
                path: path.into(),
                drive: key.0,
                object: key.1,
                size,
                stale: io.missed(),
                xattrs: None,
                e2e: e2e.clone(),
                exclusive: false,
            };
            let r = self.commit(path, commit).await;
            self.caps.invalidate(path);
            if let (Ok(()), Some(c)) = (&r, &e2e) {
                self.note_committed(grant.stat.ino, c);
            }
            match r {
                Err(e)
                    if e.status() == Some(MgrStatus::Conflict) && attempt < CHANGE_ATTEMPTS_MAX =>
                {
                    self.abort_staged(path, key).await;
                }
                Err(e) => {
                    if e.status().is_some() {
                        self.abort_staged(path, key).await;
                    }
                    return Err(e);
                }
                Ok(()) => return Ok(()),
            }
        }
    }

    /// Readies the grant of a copy-on-write change of `path`: an encrypted file's writer state
    /// (its keys, and the copies' tracks starting at the pins) and this user's signer.
    async fn change_ready(&self, grant: &OpenFile) -> Result<(), FsError> {
        if let Some(e) = &grant.e2e {
            let f = self.open_crypt(grant, e, true).await?;
            let _ = grant.crypt.set(f);
        }
        self.signer_ready(grant).await
    }

    /// Gives up an upload: the manager forgets the staged objects and removes them now, so
    /// their space comes back at once. Best effort (the manager may be why the upload
    /// failed): an upload that is never aborted expires and the orphan scrub reclaims it.
    pub async fn abort_upload(&self, u: &Upload) {
        let (drive, object) = u.key();
        let abort = calls::Abort {
            path: u.path.clone(),
            drive,
            object,
        };
        if let Err(e) = self.call(&u.path, abort).await {
            tracing::warn!("could not abort the upload to {}: {e}", shown(&u.path));
        }
    }

    /// Writes `data` at `offset` of an existing file: a one-object file in place under its
    /// write lease (returned by [`Client::return_capability`], or when it expires); a file
    /// spread over several objects as a copy-on-write [`Client::change`].
    pub async fn write_at(&self, path: &str, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let o = self.open(path, false).await?;
        let end = offset + data.len() as u64;
        if o.layout.components.len() > 1 || o.e2e.is_some() {
            return self
                .change(path, end, |io| async move { io.write(offset, data).await })
                .await;
        }
        self.with_file_to(
            path,
            true,
            end,
            |io| async move { io.write(offset, data).await },
        )
        .await
        .map(|_| ())
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file).
    pub async fn read_at(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>, FsError> {
        self.read_sized(path, offset, len).await.map(|r| r.data)
    }

    /// [`Client::read_at`], with the file's size as the read saw it (a whole-file read takes
    /// it from its first piece instead of asking first).
    pub async fn read_sized(
        &self,
        path: &str,
        offset: u64,
        len: u64,
    ) -> Result<crate::layer::ReadOut, FsError> {
        self.with_file(path, false, |io| async move { io.read(offset, len).await })
            .await
            .map(|(r, _)| r)
    }

    /// The file's size now: a one-object file's as its drive reports it, another's as the
    /// manager keeps it.
    pub async fn size(&self, path: &str) -> Result<u64, FsError> {
        self.with_file(path, false, |io| async move { io.size().await })
            .await
            .map(|(s, _)| s)
    }

    pub async fn truncate(&self, path: &str, size: u64) -> Result<(), FsError> {
        // A striped file's cached grant carries its size: gone with the change.
        self.caps.invalidate(path);
        // An encrypted file is changed by its writer: extended copy-on-write (its last block
        // re-encrypted, the rest a hole), cut short by writing its first `size` bytes as a new
        // version (its objects then hold exactly the file, as a rebuild from the code would).
        let o = self.open(path, false).await?;
        if let Some(e) = &o.e2e {
            let length = nasd_e2e::TrustedRecord::decode(&e.record)
                .map(|r| r.length)
                .map_err(|x| FsError::E2e {
                    path: path.into(),
                    detail: x.to_string(),
                })?;
            self.caps.invalidate(path);
            if size >= length {
                return self
                    .change(path, size, |io| async move { io.set_size(size).await })
                    .await;
            }
            return self.rewrite_prefix(path, o.stat.mode, size).await;
        }
        let p = path.into();
        self.call(path, calls::Truncate { path: p, size }).await?;
        Ok(())
    }
    /// Writes the first `size` bytes of `path` as its new version (an encrypted file cut
    /// short), streamed in the layout's pieces.
    async fn rewrite_prefix(&self, path: &str, mode: u32, size: u64) -> Result<(), FsError> {
        let u = self
            .begin_upload_sized(path, mode & 0o7777, Some(size))
            .await?;
        let done = async {
            let step = self.upload_granule(&u).await?.max(1 << 20);
            let mut at = 0;
            while at < size {
                let piece = self.read_at(path, at, step.min(size - at)).await?;
                if piece.is_empty() {
                    break;
                }
                self.upload_write(&u, at, &piece).await?;
                at += piece.len() as u64;
            }
            self.upload_size(&u, size).await
        };
        match done.await {
            Ok(()) => self.finish_upload(u).await,
            Err(e) => {
                self.abort_upload(&u).await;
                Err(e)
            }
        }
    }

    /// Tells the manager the writer is done with a capability (NASD/AFS ReturnCapability).
    pub async fn return_capability(&self, path: &str) -> Result<(), FsError> {
        let Some(o) = self.caps.get(path, true, false, now_ms()) else {
            return Ok(());
        };
        self.caps.invalidate(path);
        let done = calls::ReturnCapability {
            path: path.into(),
            audit_id: o.caps[0].args.audit_id,
        };
        self.call(path, done).await
    }
}

/// Refuses a manager reply whose grants do not match its layout one for one.
fn check_grants(path: &str, layout: &Layout, caps: &[CapGrant]) -> Result<(), FsError> {
    let matches = caps.len() == layout.components.len()
        && caps
            .iter()
            .zip(&layout.components)
            .all(|(g, c)| g.args.drive == c.drive && g.args.object == c.object);
    if matches {
        Ok(())
    } else {
        Err(FsError::Usage(format!(
            "{}: the manager's capabilities do not match the file's layout",
            shown(path)
        )))
    }
}
