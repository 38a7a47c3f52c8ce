//! The cluster calls: drives registered, listed and replaced, a damaged range repaired, a
//! file scrubbed, and the cluster's health.
//! ```text
//! Drives    := u32 n, n x (u64 drive, string addr, u16 partition, bool healthy, u64 files,
//!              u64 key_rotated_ms, string detail, u64 stale, u64 capacity_bytes,
//!              u64 used_bytes)
//! Status    := Drives, u64 files, u64 degraded_files, u32 n (<= STATUS_PATHS_MAX),
//!              n x string path, option RebuildStatus, 7 x u64 ScrubStatus,
//!              u64 stale_files, u64 stale_components, u64 bytes, u64 stale_bytes,
//!              option FileCounts
//! FileCounts := u64 files, u64 stale_files, u64 stale_components, u64 bytes,
//!              u64 stale_bytes, u32 n, n x (u64 drive, u64 files, u64 stale)
//! ```

use super::no_fields;
use crate::codec::{Reader, Writer};
use crate::manager::codec::{get_bool, get_count, get_opt, get_str, put_opt, put_str};
use crate::manager::Wire;
use crate::types::{DriveId, PartitionId};
use crate::DecodeError;

/// Registers a drive: the manager takes its drive key, creates a partition, and sets the
/// partition and working keys. With the drive's master key file (`master_key_file`
/// non-empty) it first replaces the drive key with one only it knows (SetDriveKey), so the
/// drive key file on the drive's disk stops working. Re-registering a known drive updates
/// its address.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DriveAdd {
    pub addr: String,
    pub drive_key_file: String,
    pub master_key_file: String,
}

impl Wire for DriveAdd {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.addr);
        put_str(w, &self.drive_key_file);
        put_str(w, &self.master_key_file);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(DriveAdd {
            addr: get_str(r, "addr")?,
            drive_key_file: get_str(r, "drive key file")?,
            master_key_file: get_str(r, "master key file")?,
        })
    }
}

no_fields! {
    /// Every registered drive, answered with a [`DriveStatus`] each.
    DriveList
}

/// A reader found `len` bytes at `offset` of component `component` of the file damaged
/// (refused by the drive's integrity check, or unreadable) and served it from the others;
/// the manager rebuilds that range and rewrites it in place (read repair).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Repair {
    pub path: String,
    pub component: u16,
    pub offset: u64,
    pub len: u64,
}

impl Wire for Repair {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u16(self.component);
        w.u64(self.offset);
        w.u64(self.len);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Repair {
            path: get_str(r, "path")?,
            component: r.u16("component")?,
            offset: r.u64("offset")?,
            len: r.u64("length")?,
        })
    }
}

/// Checks every shard of a file against its drive's integrity data and against parity,
/// answered with a [`ScrubReport`]; with `repair`, damaged shards are rewritten and stale
/// components rebuilt. Admins only.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Scrub {
    pub path: String,
    pub repair: bool,
}

impl Wire for Scrub {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u8(self.repair as u8);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Scrub {
            path: get_str(r, "path")?,
            repair: get_bool(r, "repair")?,
        })
    }
}

/// The cluster's health, answered with a [`ClusterStatus`] from the counts the manager keeps
/// as files change. With `recount`, the manager also counts by walking every file (work in
/// proportion to the namespace), answers both, and keeps the walked counts from then on.
/// Admins only.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Status {
    pub recount: bool,
}

impl Wire for Status {
    fn put(&self, w: &mut Writer) {
        w.u8(self.recount as u8);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Status {
            recount: get_bool(r, "recount")?,
        })
    }
}

/// Rebuilds every component on drive `old` onto drive `new`, in the background (progress
/// in `Status`); reads and writes go on meanwhile. Admins only.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DriveReplace {
    pub old: DriveId,
    pub new: DriveId,
}

impl Wire for DriveReplace {
    fn put(&self, w: &mut Writer) {
        w.u64(self.old.0);
        w.u64(self.new.0);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(DriveReplace {
            old: DriveId(r.u64("old drive")?),
            new: DriveId(r.u64("new drive")?),
        })
    }
}

/// A registered drive as `DriveList` and `Status` show it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DriveStatus {
    pub drive: DriveId,
    pub addr: String,
    pub partition: PartitionId,
    pub healthy: bool,
    /// Files with a component on the drive (stale or not).
    pub files: u64,
    /// Milliseconds since the Unix epoch of the last working-key rotation.
    pub key_rotated_ms: u64,
    pub detail: String,
    /// Stale components on the drive: to be rebuilt.
    pub stale: u64,
    /// What the drive reported at its last health check (0 and 0: not yet).
    pub capacity_bytes: u64,
    pub used_bytes: u64,
}

/// The files of one drive as the manager counts them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct DriveCount {
    pub drive: DriveId,
    /// Files with a component on the drive.
    pub files: u64,
    /// Stale components on the drive.
    pub stale: u64,
}

/// What the manager counts of the files (every linked file with a layout; uploads in flight
/// not): kept as files change, or found by walking them (`Status { recount }`).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct FileCounts {
    pub files: u64,
    /// Files with at least one stale component.
    pub stale_files: u64,
    /// Stale components of all files.
    pub stale_components: u64,
    /// Logical bytes of the files whose size the manager keeps: every layout over several
    /// objects, and encrypted files (a plaintext one-object file's size is its object's).
    pub bytes: u64,
    /// Logical bytes of the files with a stale component.
    pub stale_bytes: u64,
    /// Drives with files, in drive order.
    pub drives: Vec<DriveCount>,
}

/// Most paths a [`ClusterStatus`] lists by name.
pub const STATUS_PATHS_MAX: usize = 100;

/// What a scrub of one file found and did.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ScrubReport {
    pub path: String,
    pub geometry: String,
    /// Bytes read back from the drives and checked.
    pub bytes_checked: u64,
    /// Parity groups (stripes for raid0, the whole file for single and mirror) checked.
    pub groups: u64,
    /// Shard ranges found damaged: refused by their drive's integrity check, unreadable, or
    /// located by parity.
    pub damaged: u64,
    /// Damaged ranges rewritten with the right bytes.
    pub repaired: u64,
    /// Stale or lost components rebuilt onto fresh objects.
    pub rebuilt: u64,
    /// Groups with more damage than the code corrects.
    pub unrecoverable: u64,
    /// Groups not wholly checked because a drive did not answer, plus stale components
    /// left as they are (a scrub without repair does not rebuild them).
    pub unchecked: u64,
    /// The first problems, in words.
    pub detail: String,
}

/// Progress of a `DriveReplace`.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RebuildStatus {
    pub old: DriveId,
    pub new: DriveId,
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Files whose components could not be rebuilt (named in `detail`); retried by the scrub.
    pub failed: u64,
    pub finished: bool,
    pub detail: String,
}

/// Progress of the manager's background scrub.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ScrubStatus {
    /// Completed passes over every file since the manager started.
    pub passes: u64,
    /// Files checked in the current pass.
    pub files: u64,
    pub bytes: u64,
    pub damaged: u64,
    pub repaired: u64,
    /// When the last pass ended (Unix ms; 0: none yet).
    pub last_pass_ms: u64,
    /// The rate limit, bytes per second (0: the background scrub is off).
    pub rate_bytes_per_s: u64,
}

/// The cluster's health (`Status`).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ClusterStatus {
    pub drives: Vec<DriveStatus>,
    pub files: u64,
    /// Files with a stale component or a component on an unhealthy drive.
    pub degraded_files: u64,
    /// The first [`STATUS_PATHS_MAX`] of them.
    pub degraded: Vec<String>,
    pub rebuild: Option<RebuildStatus>,
    pub scrub: ScrubStatus,
    /// Files with at least one stale component (counted as files change).
    pub stale_files: u64,
    pub stale_components: u64,
    /// See [`FileCounts::bytes`].
    pub bytes: u64,
    pub stale_bytes: u64,
    /// With `Status { recount }`: the counts a walk of every file found (the kept ones, in
    /// the fields above and in [`DriveStatus`], are what the counters said before it).
    pub recounted: Option<FileCounts>,
}

impl Wire for FileCounts {
    fn put(&self, w: &mut Writer) {
        for v in [
            self.files,
            self.stale_files,
            self.stale_components,
            self.bytes,
            self.stale_bytes,
        ] {
            w.u64(v);
        }
        w.u32(self.drives.len() as u32);
        for d in &self.drives {
            w.u64(d.drive.0);
            w.u64(d.files);
            w.u64(d.stale);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut c = FileCounts {
            files: r.u64("files")?,
            stale_files: r.u64("stale files")?,
            stale_components: r.u64("stale components")?,
            bytes: r.u64("bytes")?,
            stale_bytes: r.u64("stale bytes")?,
            drives: vec![],
        };
        let n = get_count(r, 24, "drive counts")?;
        c.drives.reserve(n);
        for _ in 0..n {
            c.drives.push(DriveCount {
                drive: DriveId(r.u64("drive")?),
                files: r.u64("files")?,
                stale: r.u64("stale")?,
            });
        }
        Ok(c)
    }
}

impl Wire for Vec<DriveStatus> {
    fn put(&self, w: &mut Writer) {
        w.u32(self.len() as u32);
        for d in self {
            w.u64(d.drive.0);
            put_str(w, &d.addr);
            w.u16(d.partition.0);
            w.u8(d.healthy as u8);
            w.u64(d.files);
            w.u64(d.key_rotated_ms);
            put_str(w, &d.detail);
            w.u64(d.stale);
            w.u64(d.capacity_bytes);
            w.u64(d.used_bytes);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = get_count(r, 59, "drives")?;
        let mut ds = Vec::with_capacity(n);
        for _ in 0..n {
            ds.push(DriveStatus {
                drive: DriveId(r.u64("drive")?),
                addr: get_str(r, "addr")?,
                partition: PartitionId(r.u16("partition")?),
                healthy: get_bool(r, "healthy")?,
                files: r.u64("files")?,
                key_rotated_ms: r.u64("rotated")?,
                detail: get_str(r, "detail")?,
                stale: r.u64("stale")?,
                capacity_bytes: r.u64("capacity")?,
                used_bytes: r.u64("used")?,
            });
        }
        Ok(ds)
    }
}

impl Wire for ScrubReport {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        put_str(w, &self.geometry);
        for v in [
            self.bytes_checked,
            self.groups,
            self.damaged,
            self.repaired,
            self.rebuilt,
            self.unrecoverable,
            self.unchecked,
        ] {
            w.u64(v);
        }
        put_str(w, &self.detail);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ScrubReport {
            path: get_str(r, "path")?,
            geometry: get_str(r, "geometry")?,
            bytes_checked: r.u64("bytes checked")?,
            groups: r.u64("groups")?,
            damaged: r.u64("damaged")?,
            repaired: r.u64("repaired")?,
            rebuilt: r.u64("rebuilt")?,
            unrecoverable: r.u64("unrecoverable")?,
            unchecked: r.u64("unchecked")?,
            detail: get_str(r, "detail")?,
        })
    }
}

impl Wire for RebuildStatus {
    fn put(&self, w: &mut Writer) {
        w.u64(self.old.0);
        w.u64(self.new.0);
        for v in [
            self.files_done,
            self.files_total,
            self.bytes_done,
            self.bytes_total,
            self.failed,
        ] {
            w.u64(v);
        }
        w.u8(self.finished as u8);
        put_str(w, &self.detail);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(RebuildStatus {
            old: DriveId(r.u64("old drive")?),
            new: DriveId(r.u64("new drive")?),
            files_done: r.u64("files done")?,
            files_total: r.u64("files total")?,
            bytes_done: r.u64("bytes done")?,
            bytes_total: r.u64("bytes total")?,
            failed: r.u64("failed")?,
            finished: get_bool(r, "finished")?,
            detail: get_str(r, "detail")?,
        })
    }
}

impl Wire for ScrubStatus {
    fn put(&self, w: &mut Writer) {
        for v in [
            self.passes,
            self.files,
            self.bytes,
            self.damaged,
            self.repaired,
            self.last_pass_ms,
            self.rate_bytes_per_s,
        ] {
            w.u64(v);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ScrubStatus {
            passes: r.u64("passes")?,
            files: r.u64("files")?,
            bytes: r.u64("bytes")?,
            damaged: r.u64("damaged")?,
            repaired: r.u64("repaired")?,
            last_pass_ms: r.u64("last pass")?,
            rate_bytes_per_s: r.u64("rate")?,
        })
    }
}

impl Wire for ClusterStatus {
    fn put(&self, w: &mut Writer) {
        self.drives.put(w);
        w.u64(self.files);
        w.u64(self.degraded_files);
        debug_assert!(self.degraded.len() <= STATUS_PATHS_MAX);
        w.u32(self.degraded.len() as u32);
        for p in &self.degraded {
            put_str(w, p);
        }
        put_opt(w, &self.rebuild, |w, b| b.put(w));
        self.scrub.put(w);
        for v in [
            self.stale_files,
            self.stale_components,
            self.bytes,
            self.stale_bytes,
        ] {
            w.u64(v);
        }
        put_opt(w, &self.recounted, |w, c| c.put(w));
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let drives = Vec::<DriveStatus>::get(r)?;
        let files = r.u64("files")?;
        let degraded_files = r.u64("degraded files")?;
        let n = get_count(r, 4, "degraded paths")?;
        if n > STATUS_PATHS_MAX {
            return Err(DecodeError::TooLong("degraded paths"));
        }
        let mut degraded = Vec::with_capacity(n);
        for _ in 0..n {
            degraded.push(get_str(r, "path")?);
        }
        Ok(ClusterStatus {
            drives,
            files,
            degraded_files,
            degraded,
            rebuild: get_opt(r, "rebuild", RebuildStatus::get)?,
            scrub: ScrubStatus::get(r)?,
            stale_files: r.u64("stale files")?,
            stale_components: r.u64("stale components")?,
            bytes: r.u64("bytes")?,
            stale_bytes: r.u64("stale bytes")?,
            recounted: get_opt(r, "recounted", FileCounts::get)?,
        })
    }
}
