//! Files: the client side of seed 002 §3. Namespace operations go to the manager over the
//! TLS session; bytes go straight to drives with the capabilities it grants, over a pool of
//! pipelined [`DriveConn`]s, many requests in flight at once. Every reply is verified by the
//! connection before a byte is returned.
//!
//! Manager round trips: writing a file costs two (`create`, which stages a fresh object and
//! returns its layout and a write capability, then `commit`) plus one drive write per chunk; a
//! read costs one (`open`) plus one drive read; capabilities are cached ([`crate::capcache`]),
//! the upload's one included, so repeated access costs none. While the manager is down, cached
//! capabilities keep the data path open until they expire. Streaming transfers of whole files
//! are in [`crate::transfer`].

use crate::auth::{Auth, Capability};
use crate::capcache::{CapCache, OpenFile};
use crate::escape::shown;
use crate::object::Target;
use crate::session::{Session, SessionConfig, SessionError};
use crate::{ClientError, DriveConn};
use nasd_crypto::Key;
use nasd_proto::manager::*;
use nasd_proto::{Region, Status};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes per drive request of a streaming transfer.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Requests a streaming transfer keeps in flight.
pub const TRANSFER_IN_FLIGHT_MAX: usize = 16;
/// Connections the pool keeps to each drive.
pub const CONNS_PER_DRIVE: usize = 4;
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

const _: () = assert!(CHUNK_BYTES <= nasd_proto::DATA_BYTES_MAX);

fn now_ms() -> u64 {
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
    #[error("{}: {source}", shown(.path))]
    Local {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
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

/// Version byte of the manager's `fs_specific` record, and where its inode number lies.
const FS_RECORD_VERSION: u8 = 1;
const FS_INO_AT: usize = 14;

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

fn drive_err(path: &str, layout: &Layout) -> impl Fn(ClientError) -> FsError {
    let (path, drive) = (path.to_string(), layout.addr.clone());
    move |error| FsError::Drive {
        path: path.clone(),
        drive: drive.clone(),
        error,
    }
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

fn open_file(path: &str, stat: FileStat, layout: Layout, cap: CapGrant) -> OpenFile {
    OpenFile {
        path: path.into(),
        stat,
        cap: Capability {
            args: cap.args,
            key: Key::from_bytes(cap.key),
            sealed: None,
            suite: layout.suite,
        },
        layout,
        issued_ms: now_ms(),
    }
}

/// Where an upload's bytes go: a staged object that no name shows until
/// [`Client::finish_upload`] commits it — as the new content of an existing file, or as a new
/// file — so a failed or interrupted upload never leaves a partial file visible, and an
/// overwritten file keeps its old content until the new one is complete.
#[derive(Clone)]
pub struct Upload {
    path: String,
    /// Where the staged object lives (fixed for the upload's life).
    layout: Layout,
    /// The staged object's current grant, shared by the upload's parallel writes. It is
    /// renewed with `Renew` once due (never through `open`, which would return the visible
    /// file's object), one renewal at a time.
    grant: Arc<tokio::sync::Mutex<Arc<OpenFile>>>,
    stat: FileStat,
    replaces: bool,
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
}

/// A connection to a nasd cluster as one user.
pub struct Client {
    cfg: SessionConfig,
    session: tokio::sync::Mutex<Option<Session>>,
    caps: CapCache,
    pool: Mutex<HashMap<String, Vec<Arc<DriveConn>>>>,
    next_conn: AtomicUsize,
    manager_down_until_ms: AtomicU64,
    /// Manager round trips so far (for benchmarks and tests).
    pub manager_round_trips: AtomicU64,
}

impl Client {
    /// Connects and logs in.
    pub async fn connect(cfg: SessionConfig) -> Result<Arc<Client>, FsError> {
        let s = Session::connect(&cfg)
            .await
            .map_err(|error| FsError::Manager {
                path: "/".into(),
                error,
            })?;
        Ok(Arc::new(Client {
            cfg,
            session: tokio::sync::Mutex::new(Some(s)),
            caps: CapCache::new(),
            pool: Mutex::new(HashMap::new()),
            next_conn: AtomicUsize::new(0),
            manager_down_until_ms: AtomicU64::new(0),
            manager_round_trips: AtomicU64::new(1),
        }))
    }

    /// The session token and its expiry (for `nasd login`).
    pub async fn token(&self) -> Option<([u8; TOKEN_BYTES], u64)> {
        self.session
            .lock()
            .await
            .as_ref()
            .map(|s| (s.token, s.expires_ms))
    }

    /// Sends a request to the manager; reconnects (and logs in again) once if the connection
    /// was lost, e.g. because the manager restarted.
    pub async fn request(&self, path: &str, req: MgrRequest) -> Result<MgrReply, FsError> {
        let mut g = self.session.lock().await;
        let mut last = None;
        for _ in 0..2 {
            if g.is_none() {
                match Session::connect(&self.cfg).await {
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
            match g.as_mut().expect("connected above").request(&req).await {
                Ok(r) => return Ok(r),
                Err(e) if e.is_unavailable() => {
                    *g = None;
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

    async fn ok(&self, path: &str, req: MgrRequest) -> Result<(), FsError> {
        self.request(path, req).await.map(|_| ())
    }

    fn opened(&self, path: &str, write: bool, r: MgrReply) -> Result<Arc<OpenFile>, FsError> {
        match r {
            MgrReply::Opened { stat, layout, cap } => {
                Ok(self.caps.put(write, open_file(path, stat, layout, cap)))
            }
            other => Err(FsError::Usage(format!(
                "{path}: unexpected manager reply {other:?}"
            ))),
        }
    }

    /// A grant for `path`: from the cache while fresh, else from the manager; while the
    /// manager cannot be reached, a cached grant that has not expired.
    pub async fn open(&self, path: &str, write: bool) -> Result<Arc<OpenFile>, FsError> {
        let now = now_ms();
        if let Some(o) = self.caps.get(path, write, true, now) {
            return Ok(o);
        }
        let stale = self.caps.get(path, write, false, now);
        if let Some(o) = &stale {
            if now < self.manager_down_until_ms.load(Ordering::Relaxed) {
                return Ok(o.clone());
            }
        }
        match self
            .request(
                path,
                MgrRequest::Open {
                    path: path.into(),
                    write,
                },
            )
            .await
        {
            Ok(r) => self.opened(path, write, r),
            Err(e) => match (&e, stale) {
                (FsError::Manager { error, .. }, Some(o)) if error.is_unavailable() => {
                    tracing::info!("manager unreachable; using the cached capability for {path}");
                    Ok(o)
                }
                _ => Err(e),
            },
        }
    }

    /// Creates a new file (`Exists` if the name is taken; [`Client::begin_upload`] replaces);
    /// one manager round trip that returns the layout and a write capability.
    pub async fn create(&self, path: &str, mode: u32) -> Result<Arc<OpenFile>, FsError> {
        self.caps.invalidate(path);
        let r = self
            .request(
                path,
                MgrRequest::Create {
                    path: path.into(),
                    mode,
                    exclusive: true,
                },
            )
            .await?;
        self.opened(path, true, r)
    }

    /// Starts writing `path`: the manager stages a fresh object for the content, whether the
    /// file exists or not (one manager round trip). `mode` is a new file's mode; an existing
    /// file keeps its own.
    pub async fn begin_upload(&self, path: &str, mode: u32) -> Result<Upload, FsError> {
        self.caps.invalidate(path);
        let r = self
            .request(
                path,
                MgrRequest::Create {
                    path: path.into(),
                    mode,
                    exclusive: false,
                },
            )
            .await?;
        match r {
            MgrReply::Staged {
                stat,
                layout,
                cap,
                replaces,
            } => Ok(Upload {
                path: path.into(),
                layout: layout.clone(),
                stat: stat.clone(),
                grant: Arc::new(tokio::sync::Mutex::new(Arc::new(open_file(
                    path, stat, layout, cap,
                )))),
                replaces,
            }),
            other => Err(FsError::Usage(format!(
                "{}: unexpected manager reply {other:?}",
                shown(path)
            ))),
        }
    }

    /// Writes `data` at `offset` of an upload, renewing its capability when it is due (or when
    /// the drive refused it as expired).
    pub async fn upload_write(&self, u: &Upload, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let g = self.upload_grant(u, None).await?;
        match self.write_granted(&u.path, &g, offset, data).await {
            Err(e) if e.drive_status() == Some(Status::CapabilityExpired) => {
                let g = self.upload_grant(u, Some(&g)).await?;
                self.write_granted(&u.path, &g, offset, data).await
            }
            r => r,
        }
    }

    /// The upload's grant, renewed first when it is past three quarters of its life, or when
    /// `expired` (the grant the drive just refused) is still the current one. While the
    /// manager cannot be reached, a grant that has not expired is used as it is.
    async fn upload_grant(
        &self,
        u: &Upload,
        expired: Option<&Arc<OpenFile>>,
    ) -> Result<Arc<OpenFile>, FsError> {
        let mut g = u.grant.lock().await;
        let now = now_ms();
        let due = match expired {
            Some(old) => Arc::ptr_eq(old, &g),
            None => g.needs_renewal(now),
        };
        if !due {
            return Ok(g.clone());
        }
        let renew = MgrRequest::Renew {
            path: u.path.clone(),
            drive: u.layout.drive,
            object: u.layout.object,
        };
        match self.request(&u.path, renew).await {
            Ok(MgrReply::Staged { layout, cap, .. }) => {
                *g = Arc::new(open_file(&u.path, u.stat.clone(), layout, cap));
                Ok(g.clone())
            }
            Ok(other) => Err(FsError::Usage(format!(
                "{}: unexpected manager reply {other:?}",
                shown(&u.path)
            ))),
            Err(FsError::Manager { error, .. })
                if error.is_unavailable() && expired.is_none() && g.usable(now) =>
            {
                tracing::info!(
                    "manager unreachable ({error}); writing under the current capability"
                );
                Ok(g.clone())
            }
            Err(e) => Err(e),
        }
    }

    /// Ends an upload whose writes were all acknowledged (so durable on the drive): the
    /// manager commits the staged object under the name and removes the object it replaces.
    /// While the manager cannot be reached the commit is retried for up to
    /// [`COMMIT_RETRY_MS`] (the data is safe on the drive; a restarting manager still knows
    /// the staged upload). A refused commit aborts the upload, so its space comes back.
    pub async fn finish_upload(&self, u: Upload) -> Result<(), FsError> {
        self.caps.invalidate(&u.path);
        let commit = MgrRequest::Commit {
            path: u.path.clone(),
            drive: u.layout.drive,
            object: u.layout.object,
        };
        let deadline = now_ms() + COMMIT_RETRY_MS;
        let mut wait_ms = COMMIT_RETRY_FIRST_MS;
        let r = loop {
            match self.ok(&u.path, commit.clone()).await {
                Err(FsError::Manager { error, .. })
                    if error.is_unavailable() && now_ms() + wait_ms < deadline =>
                {
                    tracing::info!("manager unreachable ({error}); retrying the commit");
                    tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
                    wait_ms = (wait_ms * 2).min(COMMIT_RETRY_EACH_MS_MAX);
                }
                r => break r,
            }
        };
        self.caps.invalidate(&u.path);
        match &r {
            // The staged object is now the file's, and the upload's capability for it is what
            // a write open would return: keep it, so reading the file back costs no manager
            // round trip.
            Ok(()) => {
                let g = u.grant.lock().await.clone();
                self.caps.put(true, (*g).clone());
            }
            Err(e) if e.status().is_some() => self.abort_upload(&u).await,
            Err(_) => {}
        }
        r
    }

    /// Gives up an upload: the manager forgets the staged object and removes it now, so its
    /// space comes back at once. Best effort (the manager may be why the upload failed): an
    /// upload that is never aborted expires and the orphan scrub reclaims its object.
    pub async fn abort_upload(&self, u: &Upload) {
        let abort = MgrRequest::Abort {
            path: u.path.clone(),
            drive: u.layout.drive,
            object: u.layout.object,
        };
        if let Err(e) = self.ok(&u.path, abort).await {
            tracing::warn!("could not abort the upload to {}: {e}", shown(&u.path));
        }
    }

    /// Writes under a fixed grant: reconnects once on a lost connection, never renews.
    async fn write_granted(
        &self,
        path: &str,
        g: &OpenFile,
        offset: u64,
        data: &[u8],
    ) -> Result<(), FsError> {
        let mut reconnected = false;
        loop {
            let c = self
                .conn(&g.layout)
                .await
                .map_err(drive_err(path, &g.layout))?;
            let t = Target {
                partition: g.layout.partition,
                object: g.layout.object,
                protection: g.cap.args.min_protection,
            };
            match c
                .write(&Auth::Capability(g.cap.clone()), t, offset, data)
                .await
            {
                Ok(_) => return Ok(()),
                Err(ClientError::ConnectionLost(_) | ClientError::Timeout { .. })
                    if !reconnected =>
                {
                    reconnected = true;
                    self.drop_conn(&g.layout.addr, &c);
                }
                Err(error) => return Err(drive_err(path, &g.layout)(error)),
            }
        }
    }

    /// A pooled connection to the drive of `layout`.
    async fn conn(&self, layout: &Layout) -> Result<Arc<DriveConn>, ClientError> {
        let i = self.next_conn.fetch_add(1, Ordering::Relaxed);
        {
            let pool = self.pool.lock().expect("pool lock");
            if let Some(v) = pool.get(&layout.addr) {
                if v.len() >= CONNS_PER_DRIVE {
                    return Ok(v[i % v.len()].clone());
                }
            }
        }
        let c = Arc::new(DriveConn::connect(&layout.addr).await?);
        let mut pool = self.pool.lock().expect("pool lock");
        let v = pool.entry(layout.addr.clone()).or_default();
        if v.len() < CONNS_PER_DRIVE {
            v.push(c.clone());
        }
        Ok(c)
    }

    fn drop_conn(&self, addr: &str, c: &Arc<DriveConn>) {
        if let Some(v) = self.pool.lock().expect("pool lock").get_mut(addr) {
            v.retain(|x| !Arc::ptr_eq(x, c));
        }
    }

    /// Runs a drive operation under the grant for `path`; on a refused capability (revoked or
    /// expired) fetches a new one and tries once more; on a lost connection, reconnects once.
    async fn with_cap<T, F, Fut>(&self, path: &str, write: bool, f: F) -> Result<T, FsError>
    where
        F: Fn(Arc<DriveConn>, Auth, Target) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        self.with_grant(path, write, f).await.map(|(v, _)| v)
    }

    /// [`Client::with_cap`], also returning the grant the operation ran under.
    async fn with_grant<T, F, Fut>(
        &self,
        path: &str,
        write: bool,
        f: F,
    ) -> Result<(T, Arc<OpenFile>), FsError>
    where
        F: Fn(Arc<DriveConn>, Auth, Target) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let mut o = self.open(path, write).await?;
        let mut refreshed = false;
        let mut reconnected = false;
        loop {
            let c = self
                .conn(&o.layout)
                .await
                .map_err(drive_err(path, &o.layout))?;
            let t = Target {
                partition: o.layout.partition,
                object: o.layout.object,
                protection: o.cap.args.min_protection,
            };
            match f(c.clone(), Auth::Capability(o.cap.clone()), t).await {
                Ok(v) => return Ok((v, o)),
                Err(e)
                    if !refreshed
                        && matches!(
                            e.status(),
                            Some(
                                Status::BadDigest
                                    | Status::CapabilityExpired
                                    | Status::NoSuchObject
                            )
                        ) =>
                {
                    refreshed = true;
                    self.caps.invalidate(path);
                    o = self.open(path, write).await?;
                }
                Err(e @ (ClientError::ConnectionLost(_) | ClientError::Timeout { .. }))
                    if !reconnected =>
                {
                    reconnected = true;
                    tracing::debug!("drive connection lost ({e}); reconnecting");
                    self.drop_conn(&o.layout.addr, &c);
                }
                Err(error) => return Err(drive_err(path, &o.layout)(error)),
            }
        }
    }

    /// Writes `data` at `offset` of an open file.
    pub async fn write_at(&self, path: &str, offset: u64, data: &[u8]) -> Result<(), FsError> {
        self.with_cap(path, true, |c, auth, t| async move {
            c.write(&auth, t, offset, data).await
        })
        .await
        .map(|_| ())
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file).
    pub async fn read_at(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>, FsError> {
        self.with_cap(path, false, |c, auth, t| async move {
            c.read(&auth, t, vec![Region::new(offset, len)])
                .await
                .map(|r| r.data)
        })
        .await
    }

    /// The file's size as its drive reports it now. The same getattr proves the object is
    /// the file's: its `fs_specific` record, which only the manager writes, must name the
    /// inode the manager's stat names ([`FsError::WrongObject`] otherwise).
    pub async fn size(&self, path: &str) -> Result<u64, FsError> {
        let (a, o) = self
            .with_grant(path, false, |c, auth, t| async move {
                c.getattr(&auth, t).await
            })
            .await?;
        check_owner(&a.fs_specific, o.stat.ino).map_err(|found| FsError::WrongObject {
            path: path.into(),
            drive: o.layout.addr.clone(),
            expected: o.stat.ino,
            found,
        })?;
        Ok(a.logical_size)
    }

    /// Creates or replaces `path` with `data`.
    pub async fn put_bytes(
        self: &Arc<Self>,
        path: &str,
        data: &[u8],
        mode: u32,
    ) -> Result<(), FsError> {
        let u = self.begin_upload(path, mode).await?;
        let r = self.write_all(&u, data).await;
        let r = self.cleanup_on_error(&u, r).await;
        r?;
        self.finish_upload(u).await
    }

    async fn write_all(self: &Arc<Self>, u: &Upload, data: &[u8]) -> Result<(), FsError> {
        let mut set = tokio::task::JoinSet::new();
        let data: Arc<[u8]> = Arc::from(data);
        let me = self.shared();
        for off in (0..data.len()).step_by(CHUNK_BYTES) {
            while set.len() >= TRANSFER_IN_FLIGHT_MAX {
                set.join_next()
                    .await
                    .expect("non-empty")
                    .map_err(|e| FsError::Usage(e.to_string()))??;
            }
            let (d, me, u) = (data.clone(), me.clone(), u.clone());
            set.spawn(async move {
                let end = (off + CHUNK_BYTES).min(d.len());
                me.upload_write(&u, off as u64, &d[off..end]).await
            });
        }
        while let Some(r) = set.join_next().await {
            r.map_err(|e| FsError::Usage(e.to_string()))??;
        }
        Ok(())
    }

    /// After a failed upload, aborts it so its staged object goes now. Nothing else needs
    /// undoing: the staged object was never visible, and an overwritten file keeps its content.
    async fn cleanup_on_error<T>(&self, u: &Upload, r: Result<T, FsError>) -> Result<T, FsError> {
        if r.is_err() {
            self.abort_upload(u).await;
        }
        r
    }

    /// The whole file.
    pub async fn get_bytes(self: &Arc<Self>, path: &str) -> Result<Vec<u8>, FsError> {
        // The size from the drive, not the cached grant's stat (it may predate a write).
        let size = self.size(path).await?;
        let mut out = vec![0u8; size as usize];
        let mut set = tokio::task::JoinSet::new();
        let me = self.shared();
        for off in (0..size).step_by(CHUNK_BYTES) {
            while set.len() >= TRANSFER_IN_FLIGHT_MAX {
                let (at, d): (u64, Vec<u8>) = set
                    .join_next()
                    .await
                    .expect("non-empty")
                    .map_err(|e| FsError::Usage(e.to_string()))??;
                out[at as usize..at as usize + d.len()].copy_from_slice(&d);
            }
            let (me, p) = (me.clone(), path.to_string());
            let len = (CHUNK_BYTES as u64).min(size - off);
            set.spawn(async move { me.read_at(&p, off, len).await.map(|d| (off, d)) });
        }
        while let Some(r) = set.join_next().await {
            let (at, d) = r.map_err(|e| FsError::Usage(e.to_string()))??;
            out[at as usize..at as usize + d.len()].copy_from_slice(&d);
        }
        Ok(out)
    }

    /// A handle sharing this client's session, cache and pool (for spawned tasks).
    fn shared(self: &Arc<Self>) -> Arc<Client> {
        self.clone()
    }

    pub async fn stat(&self, path: &str) -> Result<FileStat, FsError> {
        match self
            .request(path, MgrRequest::Stat { path: path.into() })
            .await?
        {
            MgrReply::Stat(s) => Ok(s),
            other => Err(FsError::Usage(format!(
                "{path}: unexpected reply {other:?}"
            ))),
        }
    }

    pub async fn list(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        match self
            .request(path, MgrRequest::Readdir { path: path.into() })
            .await?
        {
            MgrReply::Entries(e) => Ok(e),
            other => Err(FsError::Usage(format!(
                "{path}: unexpected reply {other:?}"
            ))),
        }
    }

    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<(), FsError> {
        self.ok(
            path,
            MgrRequest::Mkdir {
                path: path.into(),
                mode,
            },
        )
        .await
    }
    pub async fn rmdir(&self, path: &str) -> Result<(), FsError> {
        self.ok(path, MgrRequest::Rmdir { path: path.into() }).await
    }
    pub async fn unlink(&self, path: &str) -> Result<(), FsError> {
        self.caps.invalidate(path);
        self.ok(path, MgrRequest::Unlink { path: path.into() })
            .await
    }
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        self.caps.invalidate(from);
        self.caps.invalidate(to);
        self.ok(
            from,
            MgrRequest::Rename {
                from: from.into(),
                to: to.into(),
            },
        )
        .await
    }
    pub async fn chmod(&self, path: &str, mode: u32) -> Result<(), FsError> {
        self.caps.invalidate(path);
        self.ok(
            path,
            MgrRequest::Chmod {
                path: path.into(),
                mode,
            },
        )
        .await
    }
    pub async fn chown(&self, path: &str, owner: &str, group: &str) -> Result<(), FsError> {
        self.caps.invalidate(path);
        self.ok(
            path,
            MgrRequest::Chown {
                path: path.into(),
                owner: owner.into(),
                group: group.into(),
            },
        )
        .await
    }
    pub async fn truncate(&self, path: &str, size: u64) -> Result<(), FsError> {
        self.ok(
            path,
            MgrRequest::Truncate {
                path: path.into(),
                size,
            },
        )
        .await
    }
    pub async fn utimes(&self, path: &str, mtime_us: u64) -> Result<(), FsError> {
        self.ok(
            path,
            MgrRequest::Utimes {
                path: path.into(),
                mtime_us,
            },
        )
        .await
    }
    /// Tells the manager the writer is done with a capability (NASD/AFS ReturnCapability).
    pub async fn return_capability(&self, path: &str) -> Result<(), FsError> {
        let Some(o) = self.caps.get(path, true, false, now_ms()) else {
            return Ok(());
        };
        self.caps.invalidate(path);
        self.ok(
            path,
            MgrRequest::ReturnCapability {
                path: path.into(),
                audit_id: o.cap.args.audit_id,
            },
        )
        .await
    }
}
