//! The drive registry: which drives the manager uses, the keys it shares with each drive's
//! partition (seed 002 Table 6), one connection per drive for the manager's own requests,
//! health, working-key rotation, and the choice of a drive for a new file.
//!
//! The manager authorizes its own object operations (create, remove, getattr, setattr) with the
//! partition's working key, and partition setup with the drive and partition keys; keys are
//! set on drives only wrapped (`set_key`), never in clear.

use crate::store::DriveRecord;
use crate::{now_ms, MgrError};
use nasd_client::object::Target;
use nasd_client::{Auth, DriveConn};
use nasd_crypto::keyfile::KeyFile;
use nasd_crypto::Key;
use nasd_proto::manager::MgrStatus;
use nasd_proto::{DriveId, KeyType, ObjectId, OpCode, PartitionId, Protection, Scheme, Status};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// How long a health check waits for a drive's answer before calling it unhealthy.
pub const HEALTH_CHECK_TIMEOUT_MS: u64 = 2_000;

/// The partition the manager creates on every drive it registers.
pub const FILES_PARTITION: PartitionId = PartitionId(1);
/// Protection of the manager's own requests to drives.
pub const MANAGER_PROTECTION: Protection = Protection::INTEGRITY_DATA;

/// What the manager knows about one drive at run time.
pub struct DriveState {
    pub rec: DriveRecord,
    pub conn: Option<Arc<DriveConn>>,
    pub healthy: bool,
    pub detail: String,
    /// Bytes the drive holds and could hold, as its last health check answered.
    pub space: Option<DriveSpace>,
}

/// A drive's bytes used and capacity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriveSpace {
    pub used_bytes: u64,
    pub capacity_bytes: u64,
}

#[derive(Default)]
pub struct Registry {
    drives: Mutex<HashMap<DriveId, DriveState>>,
    next: AtomicUsize,
}

fn drive_err(d: DriveId, e: nasd_client::ClientError) -> MgrError {
    let status = match e.status() {
        Some(Status::DiskFull) | Some(Status::QuotaExceeded) => MgrStatus::DiskFull,
        Some(_) => MgrStatus::Internal,
        None => MgrStatus::DriveUnreachable,
    };
    MgrError::new(status, format!("drive {:016x}: {e}", d.0))
}

impl Registry {
    pub fn load(records: Vec<DriveRecord>) -> Registry {
        let r = Registry::default();
        {
            let mut g = r.drives.lock().expect("registry lock");
            for rec in records {
                g.insert(
                    rec.drive,
                    DriveState {
                        rec,
                        conn: None,
                        healthy: false,
                        detail: "not yet contacted".into(),
                        space: None,
                    },
                );
            }
        }
        r
    }

    pub fn record(&self, d: DriveId) -> Option<DriveRecord> {
        self.drives
            .lock()
            .expect("registry lock")
            .get(&d)
            .map(|s| s.rec.clone())
    }

    pub fn ids(&self) -> Vec<DriveId> {
        let mut v: Vec<_> = self
            .drives
            .lock()
            .expect("registry lock")
            .keys()
            .copied()
            .collect();
        v.sort();
        v
    }

    /// Whether drive `d` passed its last health check.
    pub fn healthy(&self, d: DriveId) -> bool {
        self.drives
            .lock()
            .expect("registry lock")
            .get(&d)
            .is_some_and(|s| s.healthy)
    }

    /// (record, healthy, detail) of every drive.
    pub fn snapshot(&self) -> Vec<(DriveRecord, bool, String)> {
        let g = self.drives.lock().expect("registry lock");
        let mut v: Vec<_> = g
            .values()
            .map(|s| (s.rec.clone(), s.healthy, s.detail.clone()))
            .collect();
        v.sort_by_key(|x| x.0.drive);
        v
    }

    pub fn upsert(&self, rec: DriveRecord, conn: Option<Arc<DriveConn>>) {
        let mut g = self.drives.lock().expect("registry lock");
        let healthy = conn.is_some();
        g.insert(
            rec.drive,
            DriveState {
                rec,
                conn,
                healthy,
                detail: String::new(),
                space: None,
            },
        );
    }

    fn set_health(&self, d: DriveId, healthy: bool, detail: String, conn: Option<Arc<DriveConn>>) {
        if let Some(s) = self.drives.lock().expect("registry lock").get_mut(&d) {
            s.healthy = healthy;
            s.detail = detail;
            if conn.is_some() || !healthy {
                s.conn = conn;
            }
        }
    }
    /// The bytes every drive holds and could hold, as their last health checks answered; if
    /// a drive has not answered one yet, every drive is asked now.
    pub async fn space(&self) -> DriveSpace {
        let known = |g: &HashMap<DriveId, DriveState>| g.values().all(|s| s.space.is_some());
        if !known(&self.drives.lock().expect("registry lock")) {
            self.check_health().await;
        }
        let g = self.drives.lock().expect("registry lock");
        g.values()
            .filter_map(|s| s.space)
            .fold(DriveSpace::default(), |t, s| DriveSpace {
                used_bytes: t.used_bytes + s.used_bytes,
                capacity_bytes: t.capacity_bytes + s.capacity_bytes,
            })
    }

    /// A connection to drive `d`, connecting when there is none.
    pub async fn conn(&self, d: DriveId) -> Result<(Arc<DriveConn>, DriveRecord), MgrError> {
        let (conn, rec) = {
            let g = self.drives.lock().expect("registry lock");
            let s = g.get(&d).ok_or_else(|| {
                MgrError::new(
                    MgrStatus::DriveUnreachable,
                    format!("drive {:016x} is not registered", d.0),
                )
            })?;
            (s.conn.clone(), s.rec.clone())
        };
        if let Some(c) = conn {
            return Ok((c, rec));
        }
        match DriveConn::connect(&rec.addr).await {
            Ok(c) => {
                let c = Arc::new(c);
                self.set_health(d, true, String::new(), Some(c.clone()));
                Ok((c, rec))
            }
            Err(e) => {
                self.set_health(d, false, e.to_string(), None);
                Err(drive_err(d, e))
            }
        }
    }

    /// Forgets a connection that failed, so the next request reconnects.
    pub fn drop_conn(&self, d: DriveId, why: &str) {
        self.set_health(d, false, why.to_string(), None);
    }

    /// A healthy drive for a new file, round robin.
    pub fn choose(&self) -> Result<DriveId, MgrError> {
        let g = self.drives.lock().expect("registry lock");
        let mut healthy: Vec<DriveId> = g
            .iter()
            .filter(|(_, s)| s.healthy || s.conn.is_none() && s.detail == "not yet contacted")
            .map(|(d, _)| *d)
            .collect();
        if healthy.is_empty() {
            healthy = g.keys().copied().collect();
        }
        if healthy.is_empty() {
            return Err(MgrError::new(
                MgrStatus::NoDrives,
                "register a drive first (nasd up does)",
            ));
        }
        healthy.sort();
        let i = self.next.fetch_add(1, Ordering::Relaxed) % healthy.len();
        Ok(healthy[i])
    }

    /// `n` distinct healthy drives for a new layout's components, starting at a rotating
    /// point so files spread over the cluster.
    pub fn choose_n(&self, n: usize) -> Result<Vec<DriveId>, MgrError> {
        let g = self.drives.lock().expect("registry lock");
        let mut healthy: Vec<DriveId> = g
            .iter()
            .filter(|(_, s)| s.healthy || s.conn.is_none() && s.detail == "not yet contacted")
            .map(|(d, _)| *d)
            .collect();
        if g.is_empty() {
            return Err(MgrError::new(
                MgrStatus::NoDrives,
                "register a drive first (nasd up does)",
            ));
        }
        if healthy.len() < n {
            // Name the drives that are not, and why, so an operator knows which to look at.
            let down: Vec<String> = g
                .values()
                .filter(|s| !healthy.contains(&s.rec.drive))
                .map(|s| {
                    format!(
                        "drive {} at {} unreachable: {}",
                        s.rec.drive, s.rec.addr, s.detail
                    )
                })
                .collect();
            return Err(MgrError::new(
                MgrStatus::NoDrives,
                format!(
                    "the layout needs {n} healthy drives; {} of {} are ({})",
                    healthy.len(),
                    g.len(),
                    down.join("; ")
                ),
            ));
        }
        healthy.sort();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % healthy.len();
        Ok((0..n)
            .map(|k| healthy[(start + k) % healthy.len()])
            .collect())
    }

    /// Drives registered.
    pub fn count(&self) -> usize {
        self.drives.lock().expect("registry lock").len()
    }

    /// Runs one object operation with the working key; on a lost connection, reconnects and
    /// tries once more.
    pub async fn with_working<T, F, Fut>(&self, d: DriveId, f: F) -> Result<T, MgrError>
    where
        F: Fn(Arc<DriveConn>, Auth, PartitionId) -> Fut,
        Fut: std::future::Future<Output = Result<T, nasd_client::ClientError>>,
    {
        for attempt in 0..2 {
            let (c, rec) = self.conn(d).await?;
            let auth = Auth::Key {
                kind: KeyType::Working,
                key: rec.working_key.clone(),
                suite: rec.suite,
                drive: rec.drive,
            };
            match f(c, auth, rec.partition).await {
                Ok(v) => return Ok(v),
                Err(e) if e.status().is_none() && attempt == 0 => {
                    self.drop_conn(d, &e.to_string());
                }
                Err(e) => return Err(drive_err(d, e)),
            }
        }
        unreachable!("the loop returns on its second attempt")
    }

    /// Checks every drive with an inquiry (drive key), all at once, and records what each
    /// says. A drive that does not answer within [`HEALTH_CHECK_TIMEOUT_MS`] is unhealthy: a
    /// hung drive (or one whose process is dying with a thread stuck in the kernel) keeps its
    /// socket open, and waiting out the request timeout for it would leave every other
    /// drive's health unchecked meanwhile.
    pub async fn check_health(&self) {
        let checks = self.ids().into_iter().map(|d| async move {
            // A connection the drive closed (it restarted since) is not a verdict on the
            // drive: the check connects again and asks once more.
            let inquiry = async {
                for attempt in 0..2 {
                    let (c, rec) = self.conn(d).await?;
                    let auth = Auth::Key {
                        kind: KeyType::Drive,
                        key: rec.drive_key.clone(),
                        suite: rec.suite,
                        drive: rec.drive,
                    };
                    let t = Target {
                        partition: rec.partition,
                        object: ObjectId(0),
                        protection: MANAGER_PROTECTION,
                    };
                    match c.inquiry(&auth, t).await {
                        Ok(info) => return Ok(info),
                        Err(e) if e.status().is_none() && attempt == 0 => {
                            self.drop_conn(d, &e.to_string());
                        }
                        Err(e) => return Err(drive_err(d, e)),
                    }
                }
                unreachable!("the loop returns on its second attempt")
            };
            let timeout = std::time::Duration::from_millis(HEALTH_CHECK_TIMEOUT_MS);
            match tokio::time::timeout(timeout, inquiry).await {
                Ok(Ok(info)) => {
                    let detail =
                        format!("{} of {} bytes used", info.used_bytes, info.capacity_bytes);
                    self.set_health(d, true, detail, None);
                    let space = DriveSpace {
                        used_bytes: info.used_bytes,
                        capacity_bytes: info.capacity_bytes,
                    };
                    if let Some(s) = self.drives.lock().expect("registry lock").get_mut(&d) {
                        s.space = Some(space);
                    }
                }
                Ok(Err(e)) => self.drop_conn(d, &e.detail),
                Err(_) => self.drop_conn(
                    d,
                    &format!("no answer to a health check within {HEALTH_CHECK_TIMEOUT_MS} ms"),
                ),
            }
        });
        futures_util::future::join_all(checks).await;
    }
}

fn key_file(text: &str, want: KeyType) -> Result<KeyFile, MgrError> {
    let what = format!("{} key file", want.name());
    let kf = KeyFile::decode(text)
        .map_err(|e| MgrError::new(MgrStatus::InvalidArgument, format!("{what}: {e}")))?;
    if kf.kind != want {
        return Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!("expected a {what}, got a {} key", kf.kind.name()),
        ));
    }
    Ok(kf)
}

/// Replaces the drive key of `kf.drive` with a fresh one (SetDriveKey, authorized by the
/// master key, the new key wrapped): afterwards the drive key file on the drive's disk no
/// longer authorizes anything, and only the manager, which keeps the new key in its store,
/// holds the drive key (seed 002: the file manager takes over the drive).
async fn take_over_drive_key(
    conn: &DriveConn,
    kf: &mut KeyFile,
    master_text: &str,
) -> Result<(), MgrError> {
    let mk = key_file(master_text, KeyType::Master)?;
    if mk.drive != kf.drive {
        return Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!(
                "the master key file is for drive {:016x}, the drive is {:016x}",
                mk.drive.0, kf.drive.0
            ),
        ));
    }
    let t = Target {
        partition: FILES_PARTITION,
        object: ObjectId(0),
        protection: MANAGER_PROTECTION,
    };
    let dk = Key::generate();
    conn.set_key(&Auth::from_key_file(&mk), t, OpCode::SetDriveKey, &dk)
        .await
        .map_err(|e| drive_err(kf.drive, e))?;
    kf.key = dk;
    Ok(())
}

/// Registers a drive (seed 002 §2: the file manager owns the drive's partitions): checks the
/// key file against the drive's handshake, replaces the drive key when given the master key
/// file, creates [`FILES_PARTITION`] with the drive's whole capacity as quota, and sets fresh
/// partition and working keys, wrapped.
pub async fn register(
    addr: &str,
    key_file_text: &str,
    master_key_file_text: Option<&str>,
) -> Result<(DriveRecord, Arc<DriveConn>), MgrError> {
    let mut kf = key_file(key_file_text, KeyType::Drive)?;
    let conn = DriveConn::connect(addr)
        .await
        .map_err(|e| drive_err(kf.drive, e))?;
    if conn.welcome().drive != kf.drive {
        return Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!(
                "the drive at {addr} is {:016x}, the key file is for {:016x}",
                conn.welcome().drive.0,
                kf.drive.0
            ),
        ));
    }
    if let Some(m) = master_key_file_text {
        take_over_drive_key(&conn, &mut kf, m).await?;
    }
    let drive_auth = Auth::from_key_file(&kf);
    let t = Target {
        partition: FILES_PARTITION,
        object: ObjectId(0),
        protection: MANAGER_PROTECTION,
    };
    let info = conn
        .inquiry(&drive_auth, t)
        .await
        .map_err(|e| drive_err(kf.drive, e))?;
    if !info.partitions.iter().any(|p| p.id == FILES_PARTITION) {
        conn.create_partition(&drive_auth, t, info.capacity_bytes, Scheme::Tree)
            .await
            .map_err(|e| drive_err(kf.drive, e))?;
    }
    let (pk, wk) = (Key::generate(), Key::generate());
    conn.set_key(&drive_auth, t, OpCode::SetPartitionKey, &pk)
        .await
        .map_err(|e| drive_err(kf.drive, e))?;
    let part_auth = Auth::Key {
        kind: KeyType::Partition,
        key: pk.clone(),
        suite: kf.suite,
        drive: kf.drive,
    };
    conn.set_key(&part_auth, t, OpCode::SetWorkingKey, &wk)
        .await
        .map_err(|e| drive_err(kf.drive, e))?;
    let rec = DriveRecord {
        drive: kf.drive,
        addr: addr.to_string(),
        suite: kf.suite,
        drive_key: kf.key.clone(),
        partition: FILES_PARTITION,
        partition_key: pk,
        working_key: wk,
        rotated_ms: now_ms(),
    };
    Ok((rec, Arc::new(conn)))
}

/// Sets a fresh working key on the drive (authorized by the partition key) and returns the
/// updated record. The drive keeps the previous key valid, so capabilities minted before the
/// rotation keep working until the next one (graceful rotation, DESIGN.md).
pub async fn rotate(reg: &Registry, d: DriveId) -> Result<DriveRecord, MgrError> {
    let (c, mut rec) = reg.conn(d).await?;
    let wk = Key::generate();
    let part_auth = Auth::Key {
        kind: KeyType::Partition,
        key: rec.partition_key.clone(),
        suite: rec.suite,
        drive: rec.drive,
    };
    let t = Target {
        partition: rec.partition,
        object: ObjectId(0),
        protection: MANAGER_PROTECTION,
    };
    c.set_key(&part_auth, t, OpCode::SetWorkingKey, &wk)
        .await
        .map_err(|e| drive_err(d, e))?;
    rec.working_key = wk;
    rec.rotated_ms = now_ms();
    reg.upsert(rec.clone(), Some(c));
    Ok(rec)
}

impl crate::service::Manager {
    /// Registers a new drive (taking over its drive key when given its master key file, see
    /// [`register`]), or records a known drive's new address.
    pub async fn add_drive(
        &self,
        addr: &str,
        key_file: &str,
        master_key_file: Option<&str>,
    ) -> Result<(), MgrError> {
        let kf = nasd_crypto::keyfile::KeyFile::decode(key_file).map_err(|e| {
            MgrError::new(MgrStatus::InvalidArgument, format!("drive key file: {e}"))
        })?;
        if let Some(mut rec) = self.drives.record(kf.drive) {
            if rec.addr != addr {
                rec.addr = addr.to_string();
                self.store
                    .lock()
                    .expect("store lock")
                    .put_drive(&rec)
                    .map_err(crate::service::db)?;
                self.drives.upsert(rec, None);
            }
            return Ok(());
        }
        let (rec, conn) = register(addr, key_file, master_key_file).await?;
        self.store
            .lock()
            .expect("store lock")
            .put_drive(&rec)
            .map_err(crate::service::db)?;
        tracing::info!(drive = %format!("{:016x}", rec.drive.0), addr, "drive registered");
        self.drives.upsert(rec, Some(conn));
        Ok(())
    }
}
