//! The orphan scrub: reclaims drive objects no name points to.
//!
//! An object becomes an orphan when the manager crashes between creating it on a drive and
//! committing its name, when an overwrite is abandoned before its commit, or when removing an
//! unlinked file's object failed. At start and every [`ORPHAN_SCRUB_INTERVAL_MS`] the manager
//! lists each drive's partition (the Partition Contents object, seed 002 Table 4, read with the
//! partition key) and removes every object that no file references, that no live staged
//! overwrite holds, and that is older than [`ORPHAN_GRACE_MS`]. The grace period is longer than
//! any write capability lives, so an upload in progress can never lose its object: a new file's
//! object is young until its name is committed, and a staged overwrite either commits within
//! its capability's lifetime or no longer can. Well-known objects, the First Object among them,
//! are never touched.

use crate::drives::MANAGER_PROTECTION;
use crate::service::Manager;
use crate::store::ObjRef;
use crate::{now_ms, now_us, MgrError, MgrResult};
use nasd_client::object::Target;
use nasd_client::Auth;
use nasd_proto::manager::MgrStatus;
use nasd_proto::{DriveId, KeyType, ObjectId, Region, DATA_BYTES_MAX};
use std::collections::HashSet;

/// How old an unreferenced object must be before the scrub removes it.
pub const ORPHAN_GRACE_MS: u64 = 30 * 60_000;
/// How often the manager scrubs every drive.
pub const ORPHAN_SCRUB_INTERVAL_MS: u64 = 15 * 60_000;
/// Longest write capability a policy may ask for: shorter than the grace period, so no live
/// writer's object is ever reclaimed.
pub const WRITE_CAP_TTL_MS_MAX: u64 = ORPHAN_GRACE_MS / 2;

const _: () = assert!(WRITE_CAP_TTL_MS_MAX < ORPHAN_GRACE_MS);
const _: () = assert!(ORPHAN_SCRUB_INTERVAL_MS <= ORPHAN_GRACE_MS);

/// What one scrub did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubReport {
    /// Objects listed on the drives (well-known ones excluded).
    pub listed: u64,
    /// Unreferenced objects removed.
    pub removed: u64,
    /// Unreferenced objects kept because they are younger than the grace period or staged.
    pub young: u64,
    /// Staged overwrites forgotten because they outlived the grace period.
    pub expired_staged: u64,
}

/// Scrubs every registered drive, removing orphans older than `grace_ms` (the manager passes
/// [`ORPHAN_GRACE_MS`]; tests pass less). A drive that cannot be reached is skipped and logged.
pub async fn reclaim_orphans(m: &Manager, grace_ms: u64) -> MgrResult<ScrubReport> {
    let mut report = ScrubReport::default();
    // First forget staged overwrites too old to commit, so their objects count as orphans.
    let expired = m
        .store
        .lock()
        .expect("store lock")
        .expire_staged(now_ms().saturating_sub(grace_ms))
        .map_err(|e| MgrError::new(MgrStatus::Internal, e.to_string()))?;
    report.expired_staged = expired.len() as u64;
    for d in m.drives.ids() {
        if let Err(e) = scrub_drive(m, d, grace_ms, &mut report).await {
            tracing::warn!(drive = %format!("{:016x}", d.0), "orphan scrub skipped: {}", e.detail);
        }
    }
    if report.removed > 0 {
        tracing::info!(?report, "orphan scrub");
    }
    Ok(report)
}

async fn scrub_drive(
    m: &Manager,
    d: DriveId,
    grace_ms: u64,
    report: &mut ScrubReport,
) -> MgrResult<()> {
    let listed = partition_contents(m, d).await?;
    let referenced: HashSet<ObjectId> = m
        .store
        .lock()
        .expect("store lock")
        .objects_on_drive(d)
        .map_err(|e| MgrError::new(MgrStatus::Internal, e.to_string()))?
        .into_iter()
        .collect();
    let rec = m
        .drives
        .record(d)
        .ok_or_else(|| MgrError::new(MgrStatus::DriveUnreachable, format!("drive {:016x}", d.0)))?;
    for o in listed {
        if o < ObjectId::FIRST_ORDINARY {
            continue;
        }
        report.listed += 1;
        if referenced.contains(&o) {
            continue;
        }
        let obj = ObjRef {
            drive: d,
            partition: rec.partition,
            object: o,
        };
        if is_staged(m, obj)? || younger_than(m, obj, grace_ms).await? {
            report.young += 1;
            continue;
        }
        m.remove_object(obj).await;
        report.removed += 1;
    }
    Ok(())
}

fn is_staged(m: &Manager, obj: ObjRef) -> MgrResult<bool> {
    m.store
        .lock()
        .expect("store lock")
        .staged(obj)
        .map(|s| s.is_some())
        .map_err(|e| MgrError::new(MgrStatus::Internal, e.to_string()))
}

async fn younger_than(m: &Manager, obj: ObjRef, grace_ms: u64) -> MgrResult<bool> {
    let a = m.object_attributes(obj).await?;
    Ok(now_us().saturating_sub(a.create_time_us) < grace_ms.saturating_mul(1000))
}

/// The object ids of drive `d`'s files partition, from its Partition Contents object (a list
/// of little-endian u64), read in requests of at most [`DATA_BYTES_MAX`] bytes.
pub async fn partition_contents(m: &Manager, d: DriveId) -> MgrResult<Vec<ObjectId>> {
    let (conn, rec) = m.drives.conn(d).await?;
    let auth = Auth::Key {
        kind: KeyType::Partition,
        key: rec.partition_key.clone(),
        suite: rec.suite,
        drive: rec.drive,
    };
    let t = Target {
        partition: rec.partition,
        object: ObjectId::PARTITION_CONTENTS,
        protection: MANAGER_PROTECTION,
    };
    let mut bytes = vec![];
    loop {
        let r = conn
            .read(
                &auth,
                t,
                vec![Region::new(bytes.len() as u64, DATA_BYTES_MAX as u64)],
            )
            .await
            .map_err(|e| {
                MgrError::new(
                    MgrStatus::DriveUnreachable,
                    format!("drive {:016x}: partition contents: {e}", d.0),
                )
            })?;
        let done = r.data.is_empty() || bytes.len() as u64 + r.data.len() as u64 >= r.logical_size;
        bytes.extend_from_slice(&r.data);
        if done {
            break;
        }
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| ObjectId(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
        .collect())
}
