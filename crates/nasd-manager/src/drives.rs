//! The drive registry: which drives the manager uses, the keys it shares with each drive's
//! partition (seed 002 Table 6), one connection per drive for the manager's own requests,
//! health and free space, working-key rotation, and where a new file's components go.
//!
//! **Placement.** A drive takes new components while its last health check found it up and
//! its room — free space as it reported then, less what was placed on it since, less a
//! reserve ([`reserve_bytes`]) — holds them. Among those, drives are chosen in proportion
//! to their room by smooth weighted round robin (each layout adds every candidate's share of
//! the components to its credit, the drives with the most credit are taken, distinct, and
//! pay one each): deterministic, spread evenly between equal drives, and a fuller drive gets
//! fewer components long before it is full. A layout that can lose `t` components is laid
//! out on as few as `n - t` such drives; the others get an absent component
//! ([`ObjectId::ABSENT`]) on a drive that cannot take one now, stale until rebuilt.
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
use std::sync::{Arc, Mutex};

/// How long a health check waits for a drive's answer.
pub const HEALTH_CHECK_TIMEOUT_MS: u64 = 2_000;
/// Health checks in a row without an answer in time that make a drive unhealthy. One alone
/// may be a machine too busy to schedule the drive or the manager for two seconds (every
/// drive of a starved host then misses the same check, and every new file would be refused);
/// a definite failure (a refused connection, an error answer) counts at once.
pub const HEALTH_CHECK_MISSES_DOWN: u32 = 2;

/// The partition the manager creates on every drive it registers.
pub const FILES_PARTITION: PartitionId = PartitionId(1);
/// Protection of the manager's own requests to drives.
pub const MANAGER_PROTECTION: Protection = Protection::INTEGRITY_DATA;

/// A drive keeps this share of its capacity (1/64) free of new components: room for its
/// own metadata and for bytes written beyond what the manager placed (streams past their
/// first escrow, repairs, uploads in flight when it last reported).
pub const RESERVE_CAPACITY_DIVISOR: u64 = 64;
/// ... and at least this many bytes.
pub const RESERVE_BYTES_MIN: u64 = 1 << 20;
/// Placement credit a drive may bank (in components): one that is chosen less than its
/// share (a very large drive among small ones) cannot build up a debt without bound.
pub const PLACEMENT_CREDIT_MAX: f64 = 4.0;

/// The room a drive of `capacity` bytes keeps free of new components.
pub fn reserve_bytes(capacity: u64) -> u64 {
    (capacity / RESERVE_CAPACITY_DIVISOR).max(RESERVE_BYTES_MIN)
}

/// What the manager knows about one drive at run time.
pub struct DriveState {
    pub rec: DriveRecord,
    pub conn: Option<Arc<DriveConn>>,
    pub healthy: bool,
    pub detail: String,
    /// What the drive said at its last health check (both 0 until it has).
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    /// Bytes of components placed on it since then.
    pub placed_bytes: u64,
    /// Its placement credit (module docs).
    credit: f64,
    /// Health checks in a row it gave no answer to in time.
    missed_checks: u32,
}

impl DriveState {
    fn new(rec: DriveRecord, conn: Option<Arc<DriveConn>>, healthy: bool, detail: String) -> Self {
        DriveState {
            rec,
            conn,
            healthy,
            detail,
            capacity_bytes: 0,
            used_bytes: 0,
            placed_bytes: 0,
            credit: 0.0,
            missed_checks: 0,
        }
    }

    /// Bytes it can take in new components now; `None` until it reported its capacity.
    fn room(&self) -> Option<u64> {
        (self.capacity_bytes > 0).then(|| {
            self.capacity_bytes
                .saturating_sub(self.used_bytes)
                .saturating_sub(self.placed_bytes)
                .saturating_sub(reserve_bytes(self.capacity_bytes))
        })
    }

    /// Whether it takes a new component of `need` bytes now.
    fn takes(&self, need: u64) -> bool {
        self.healthy && self.room().is_none_or(|r| r >= need.max(1))
    }

    /// Why it takes no new component of `need` bytes, for an error message.
    fn why_not(&self, need: u64) -> String {
        let d = format!("drive {:016x} at {}", self.rec.drive.0, self.rec.addr);
        match self.room() {
            _ if !self.healthy => format!("{d} is down ({})", self.detail),
            Some(r) => format!("{d} is full ({r} bytes of room, {need} needed)"),
            None => format!("{d} cannot take it"),
        }
    }
}

/// Bytes used and capacity, summed over drives ([`Registry::space`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriveSpace {
    pub used_bytes: u64,
    pub capacity_bytes: u64,
}

/// Where the components of a new layout go ([`Registry::place`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Drives that take a real component, in component order.
    pub drives: Vec<DriveId>,
    /// Drives that cannot take one now and hold the layout's absent components (after the
    /// real ones), distinct from those and from each other.
    pub absent: Vec<DriveId>,
}

#[derive(Default)]
pub struct Registry {
    drives: Mutex<HashMap<DriveId, DriveState>>,
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
                    DriveState::new(rec, None, false, "not yet contacted".into()),
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

    /// Every drive as it stands: record, health, detail, capacity and use last reported.
    pub fn snapshot(&self) -> Vec<DriveView> {
        let g = self.drives.lock().expect("registry lock");
        let mut v: Vec<_> = g
            .values()
            .map(|s| DriveView {
                rec: s.rec.clone(),
                healthy: s.healthy,
                detail: s.detail.clone(),
                capacity_bytes: s.capacity_bytes,
                used_bytes: s.used_bytes,
            })
            .collect();
        v.sort_by_key(|x| x.rec.drive);
        v
    }

    /// Records a drive (registered, or its key rotated); what it last reported stays.
    pub fn upsert(&self, rec: DriveRecord, conn: Option<Arc<DriveConn>>) {
        let mut g = self.drives.lock().expect("registry lock");
        let healthy = conn.is_some();
        match g.get_mut(&rec.drive) {
            Some(s) => {
                s.rec = rec;
                s.conn = conn;
                s.healthy = healthy;
                s.detail = String::new();
            }
            None => {
                g.insert(
                    rec.drive,
                    DriveState::new(rec, conn, healthy, String::new()),
                );
            }
        }
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
        let known = |g: &HashMap<DriveId, DriveState>| g.values().all(|s| s.capacity_bytes > 0);
        if !known(&self.drives.lock().expect("registry lock")) {
            self.check_health().await;
        }
        let g = self.drives.lock().expect("registry lock");
        g.values().fold(DriveSpace::default(), |t, s| DriveSpace {
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

    /// Where the `n` components of a new layout go, each of `need` bytes, avoiding
    /// `exclude`: on distinct drives that take them now, chosen by room (module docs). When
    /// fewer than `n` do, the layout may still be made with up to `tolerated` absent
    /// components, each on another registered drive (those that are down first); beyond that
    /// the refusal names every drive that cannot take a component and why. `what` names the
    /// layout in it.
    pub fn place(
        &self,
        n: usize,
        tolerated: usize,
        need: u64,
        exclude: &[DriveId],
        what: &str,
    ) -> Result<Placement, MgrError> {
        let mut g = self.drives.lock().expect("registry lock");
        if g.is_empty() {
            return Err(MgrError::new(
                MgrStatus::NoDrives,
                "register a drive first (nasd up does)",
            ));
        }
        let mut ids: Vec<DriveId> = g.keys().copied().filter(|d| !exclude.contains(d)).collect();
        ids.sort();
        if ids.len() < n {
            return Err(MgrError::new(
                MgrStatus::NoDrives,
                format!(
                    "{what} needs {n} drives, one per component, and the cluster has {}",
                    ids.len()
                ),
            ));
        }
        let takers: Vec<DriveId> = ids.iter().copied().filter(|d| g[d].takes(need)).collect();
        let k = takers.len().min(n);
        if k + tolerated < n {
            return Err(refusal(&g, &ids, n, tolerated, need, what));
        }
        let chosen = choose_by_room(&mut g, &takers, k);
        for d in &chosen {
            let s = g.get_mut(d).expect("chosen among the drives");
            s.credit -= 1.0;
            s.placed_bytes = s.placed_bytes.saturating_add(need);
        }
        // Absent components wait on drives that are down (they come back) before full ones.
        let mut others: Vec<DriveId> = ids.into_iter().filter(|d| !chosen.contains(d)).collect();
        others.sort_by_key(|d| (g[d].healthy, *d));
        others.truncate(n - k);
        Ok(Placement {
            drives: chosen,
            absent: others,
        })
    }

    /// One drive outside `exclude` that takes a component of `need` bytes now (a rebuild, or
    /// a component whose drive failed while its layout was made).
    pub fn spare(&self, exclude: &[DriveId], need: u64) -> Option<DriveId> {
        self.place(1, 0, need, exclude, "a component")
            .ok()
            .and_then(|p| p.drives.first().copied())
    }

    /// Whether drive `d` takes a component of `need` bytes now.
    pub fn takes(&self, d: DriveId, need: u64) -> bool {
        self.drives
            .lock()
            .expect("registry lock")
            .get(&d)
            .is_some_and(|s| s.takes(need))
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
    /// says, its capacity and use among it (what was placed on it before is in that use from
    /// now on). A drive that does not answer within [`HEALTH_CHECK_TIMEOUT_MS`] is unhealthy:
    /// a hung drive (or one whose process is dying with a thread stuck in the kernel) keeps
    /// its socket open, and waiting out the request timeout for it would leave every other
    /// drive's health unchecked meanwhile. Returns the drives that were not healthy before
    /// and are now.
    pub async fn check_health(&self) -> Vec<DriveId> {
        let was: Vec<DriveId> = self
            .snapshot()
            .into_iter()
            .filter(|v| !v.healthy)
            .map(|v| v.rec.drive)
            .collect();
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
                Ok(Ok(info)) => self.reported(d, info.capacity_bytes, info.used_bytes),
                Ok(Err(e)) => self.drop_conn(d, &e.detail),
                Err(_) => self.missed_check(d),
            }
        });
        futures_util::future::join_all(checks).await;
        was.into_iter().filter(|&d| self.healthy(d)).collect()
    }

    /// Records a health check `d` gave no answer to in time: its connection is dropped (a
    /// hung process keeps its socket open), and after [`HEALTH_CHECK_MISSES_DOWN`] in a row
    /// it is unhealthy.
    fn missed_check(&self, d: DriveId) {
        let mut g = self.drives.lock().expect("registry lock");
        let Some(s) = g.get_mut(&d) else { return };
        s.missed_checks += 1;
        s.conn = None;
        let n = s.missed_checks;
        s.detail = format!(
            "no answer to {n} health check(s) in a row, each within {HEALTH_CHECK_TIMEOUT_MS} ms"
        );
        if n >= HEALTH_CHECK_MISSES_DOWN {
            s.healthy = false;
        }
    }

    /// Records a health check's answer: the drive is up, with `capacity` bytes of which `used`
    /// are in use (components placed on it before count in `used` from now on).
    pub fn reported(&self, d: DriveId, capacity: u64, used: u64) {
        if let Some(s) = self.drives.lock().expect("registry lock").get_mut(&d) {
            s.healthy = true;
            s.missed_checks = 0;
            s.detail = format!("{used} of {capacity} bytes used");
            s.capacity_bytes = capacity;
            s.used_bytes = used;
            s.placed_bytes = 0;
        }
    }
}

/// A drive as [`Registry::snapshot`] shows it.
#[derive(Clone, Debug)]
pub struct DriveView {
    pub rec: DriveRecord,
    pub healthy: bool,
    pub detail: String,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
}

/// `k` distinct drives of `takers` by room (module docs): each adds its share of `k` to its
/// credit, and the `k` with the most credit go (ties to the lower id). A drive that has not
/// reported its capacity yet weighs what the others weigh on average.
fn choose_by_room(
    g: &mut HashMap<DriveId, DriveState>,
    takers: &[DriveId],
    k: usize,
) -> Vec<DriveId> {
    if k == 0 {
        return vec![];
    }
    let known: Vec<u64> = takers.iter().filter_map(|d| g[d].room()).collect();
    let mean = match known.len() {
        0 => 1.0,
        n => known.iter().map(|&r| r as f64).sum::<f64>() / n as f64,
    };
    let weight = |s: &DriveState| s.room().map_or(mean, |r| r as f64).max(1.0);
    let total: f64 = takers.iter().map(|d| weight(&g[d])).sum();
    for d in takers {
        let s = g.get_mut(d).expect("a taker is a drive");
        let share = k as f64 * weight(s) / total;
        s.credit = (s.credit + share).clamp(-PLACEMENT_CREDIT_MAX, PLACEMENT_CREDIT_MAX);
    }
    let mut order = takers.to_vec();
    order.sort_by(|a, b| g[b].credit.total_cmp(&g[a].credit).then(a.cmp(b)));
    order.truncate(k);
    order
}

/// Why a layout of `n` components that can do without `tolerated` cannot be placed now.
fn refusal(
    g: &HashMap<DriveId, DriveState>,
    ids: &[DriveId],
    n: usize,
    tolerated: usize,
    need: u64,
    what: &str,
) -> MgrError {
    let not: Vec<&DriveState> = ids
        .iter()
        .map(|d| &g[d])
        .filter(|s| !s.takes(need))
        .collect();
    let status = match not.iter().all(|s| s.healthy) {
        true => MgrStatus::DiskFull,
        false => MgrStatus::NoDrives,
    };
    let why: Vec<String> = not.iter().map(|s| s.why_not(need)).collect();
    MgrError::new(
        status,
        format!(
            "{what} needs {} of its {n} drives to take a component now ({tolerated} may be \
             absent until rebuilt); {} of {} can: {}",
            n - tolerated,
            ids.len() - not.len(),
            ids.len(),
            why.join("; ")
        ),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// A registry of drives 1..=n, each up with `capacity` bytes of which `used[i]` are used.
    fn registry(capacity: u64, used: &[u64]) -> Registry {
        let records = (1..=used.len() as u64)
            .map(|d| DriveRecord {
                drive: DriveId(d),
                addr: format!("10.0.0.{d}:7000"),
                suite: nasd_proto::Suite::Blake3,
                drive_key: Key::generate(),
                partition: FILES_PARTITION,
                partition_key: Key::generate(),
                working_key: Key::generate(),
                rotated_ms: 0,
            })
            .collect();
        let r = Registry::load(records);
        for (i, &u) in used.iter().enumerate() {
            r.reported(DriveId(i as u64 + 1), capacity, u);
        }
        r
    }

    /// A drive whose address accepts connections and never answers (a hung process) stays
    /// up through one missed health check and is down after two in a row; an answer resets
    /// the count (here: a report).
    #[tokio::test]
    async fn a_drive_is_down_after_two_health_checks_in_a_row_get_no_answer() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let r = Registry::load(vec![DriveRecord {
            addr: silent.local_addr().unwrap().to_string(),
            ..registry(GIB, &[0]).snapshot()[0].rec.clone()
        }]);
        let d = DriveId(1);
        r.reported(d, GIB, 0);
        r.check_health().await;
        assert!(
            r.healthy(d),
            "one missed check: {:?}",
            r.snapshot()[0].detail
        );
        r.check_health().await;
        assert!(!r.healthy(d), "two in a row");
        assert!(r.snapshot()[0]
            .detail
            .contains("2 health check(s) in a row"));
        r.reported(d, GIB, 0);
        r.check_health().await;
        assert!(r.healthy(d), "the count starts over after an answer");
        drop(silent);
    }

    /// How many of `files` layouts of `n` components each drive got.
    fn tally(r: &Registry, files: usize, n: usize, need: u64) -> Vec<usize> {
        let mut got = vec![0; r.count()];
        for _ in 0..files {
            let p = r.place(n, 0, need, &[], "test").unwrap();
            let mut ds = p.drives.clone();
            ds.sort();
            ds.dedup();
            assert_eq!(ds.len(), n, "two components on one drive: {p:?}");
            for d in p.drives {
                got[d.0 as usize - 1] += 1;
            }
        }
        got
    }

    #[test]
    fn equal_drives_take_turns_and_nothing_advances_twice() {
        // Two drives, one-component files: every other file on each (the double advance of
        // the round robin sent every file to the first drive).
        let r = registry(GIB, &[0, 0]);
        let order: Vec<u64> = (0..6)
            .map(|_| r.place(1, 0, 0, &[], "single").unwrap().drives[0].0)
            .collect();
        assert_eq!(order, vec![1, 2, 1, 2, 1, 2]);
        // Three of four drives per file: each drive in three of every four files.
        assert_eq!(tally(&registry(GIB, &[0; 4]), 400, 3, 0), vec![300; 4]);
    }

    #[test]
    fn drives_are_chosen_in_proportion_to_their_room() {
        // Room 3 : 1 (reserve aside).
        let reserve = reserve_bytes(4 * GIB);
        let r = registry(4 * GIB, &[GIB - reserve, 3 * GIB - reserve]);
        assert_eq!(tally(&r, 400, 1, 0), vec![300, 100]);
        // What is placed counts against a drive's room until it reports again.
        let r = registry(GIB, &[0, 0]);
        let room = GIB - reserve_bytes(GIB);
        let big = room / 2 + 1;
        let first = r.place(1, 0, big, &[], "single").unwrap().drives[0];
        let second = r.place(1, 0, big, &[], "single").unwrap().drives[0];
        assert_ne!(first, second);
        let err = r.place(1, 0, big, &[], "a new single file").unwrap_err();
        assert_eq!(err.status, MgrStatus::DiskFull, "{}", err.detail);
        assert!(
            err.detail.contains("a new single file") && err.detail.contains("is full"),
            "{}",
            err.detail
        );
        // Its next report says what is on it now (the upload was aborted): room again.
        r.reported(first, GIB, 0);
        assert_eq!(
            r.place(1, 0, big, &[], "single").unwrap().drives,
            vec![first]
        );
    }

    #[test]
    fn a_full_drive_gets_nothing_and_the_others_take_its_share() {
        let r = registry(GIB, &[GIB - reserve_bytes(GIB), 0, 0]);
        assert_eq!(tally(&r, 30, 1, 4096), vec![0, 15, 15]);
        assert_eq!(r.spare(&[DriveId(2)], 4096), Some(DriveId(3)));
        assert_eq!(r.spare(&[DriveId(2), DriveId(3)], 4096), None);
    }

    #[test]
    fn a_layout_with_redundancy_is_placed_while_enough_drives_take_it() {
        let r = registry(GIB, &[0; 4]);
        r.drop_conn(DriveId(2), "connection refused");
        let p = r.place(4, 2, 0, &[], "rs:2+2").unwrap();
        assert_eq!(p.drives.len(), 3);
        assert_eq!(p.absent, vec![DriveId(2)]);
        r.drop_conn(DriveId(4), "connection refused");
        let p = r.place(4, 2, 0, &[], "rs:2+2").unwrap();
        let mut real = p.drives.clone();
        real.sort();
        assert_eq!(
            (real, p.absent),
            (vec![DriveId(1), DriveId(3)], vec![DriveId(2), DriveId(4)])
        );
        // Without redundancy every component needs a drive that takes it.
        let err = r.place(4, 0, 0, &[], "a new raid0:4 file").unwrap_err();
        assert_eq!(err.status, MgrStatus::NoDrives);
        // A third drive down: more than the code covers, refused with every reason.
        r.drop_conn(DriveId(1), "no answer");
        let err = r.place(4, 2, 0, &[], "a new rs:2+2 file").unwrap_err();
        assert_eq!(err.status, MgrStatus::NoDrives);
        for want in [
            "a new rs:2+2 file needs 2 of its 4 drives",
            "1 of 4 can",
            "no answer",
            "0000000000000002 at 10.0.0.2:7000 is down",
        ] {
            assert!(err.detail.contains(want), "{want}: {}", err.detail);
        }
        // More components than drives: refused whatever their health.
        let err = r.place(5, 2, 0, &[], "a new rs:3+2 file").unwrap_err();
        assert!(err.detail.contains("needs 5 drives"), "{}", err.detail);
    }

    #[test]
    fn absent_components_wait_on_drives_that_are_down_before_full_ones() {
        let full = GIB - reserve_bytes(GIB);
        let r = registry(GIB, &[0, full, 0, 0]);
        r.drop_conn(DriveId(4), "connection refused");
        let p = r.place(4, 2, 4096, &[], "rs:2+2").unwrap();
        let mut real = p.drives.clone();
        real.sort();
        assert_eq!(real, vec![DriveId(1), DriveId(3)]);
        assert_eq!(p.absent, vec![DriveId(4), DriveId(2)]);
    }
}
