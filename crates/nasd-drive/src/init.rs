//! Creating a drive (seed 002 Table 3 `initialize`, done offline by the drive's owner): the data
//! files, the master key (read from a file or generated into a 0600 file), a drive key, and
//! optionally a first partition with its partition and working keys, so an operator can mint
//! capabilities at once. Key files go under `DIR/keys/` in the format of
//! `nasd_crypto::keyfile`.

use crate::records::DriveRecord;
use crate::storage::FileStorage;
use crate::store::Store;
use crate::writer::{run_now, Job};
use crate::DriveError;
use nasd_crypto::keyfile::KeyFile;
use nasd_crypto::seal::KeySeal;
use nasd_crypto::Key;
use nasd_proto::{DriveId, KeyType, PartitionId, Protection, Scheme, Suite};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct InitOptions {
    pub data_dir: PathBuf,
    pub master_key_file: Option<PathBuf>,
    pub partition: Option<PartitionId>,
    pub suite: Suite,
    /// Default: the free space of the data directory's file system at init.
    pub capacity_bytes: Option<u64>,
    /// Default: the drive's capacity.
    pub quota_bytes: Option<u64>,
    /// Drive-wide minimum protection (seed 002 §2.4).
    pub min_protection: Protection,
    /// Default scheme of the first partition.
    pub scheme: Scheme,
    /// Seal the key hierarchy in the metadata under this passphrase (seed 002 §2.4's protected
    /// key storage); the drive then needs it to start.
    pub seal_passphrase: Option<Vec<u8>>,
}

impl InitOptions {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        InitOptions {
            data_dir: data_dir.into(),
            master_key_file: None,
            partition: None,
            suite: Suite::Blake3,
            capacity_bytes: None,
            quota_bytes: None,
            min_protection: Protection::INTEGRITY_ARGS,
            scheme: Scheme::Tree,
            seal_passphrase: None,
        }
    }
}

#[derive(Debug)]
pub struct InitReport {
    pub drive: DriveId,
    pub master_key_file: PathBuf,
    pub drive_key_file: PathBuf,
    pub partition_key_file: Option<PathBuf>,
    pub working_key_file: Option<PathBuf>,
}

/// Writes a key file with mode 0600, refusing to overwrite one.
pub fn write_key_file(path: &Path, kf: &KeyFile) -> Result<(), DriveError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            DriveError::Config(format!("cannot create key file {}: {e}", path.display()))
        })?;
    f.write_all(kf.encode().as_bytes())?;
    f.sync_all()?;
    Ok(())
}

fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail as u64 * s.f_frsize as u64)
}

pub fn init(opts: &InitOptions) -> Result<InitReport, DriveError> {
    let dir = &opts.data_dir;
    if dir.join("meta.redb").exists() {
        return Err(DriveError::Config(format!(
            "{} already holds a drive",
            dir.display()
        )));
    }
    let private = |e: nasd_private::PrivacyError| DriveError::Config(e.to_string());
    nasd_private::create_dir(dir).map_err(private)?;
    let keys = dir.join("keys");
    nasd_private::create_dir(&keys).map_err(private)?;
    let drive = DriveId(nasd_crypto::random_u64());
    let suite = opts.suite;
    let master_key_file = keys.join("master.key");
    let master = match &opts.master_key_file {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| DriveError::Config(format!("cannot read {}: {e}", f.display())))?;
            let k = match KeyFile::decode(&text) {
                Ok(kf) => kf.key,
                Err(_) => Key::from_hex(text.trim()).ok_or_else(|| {
                    DriveError::Config(format!(
                        "{} holds neither a key file nor 64 hex digits",
                        f.display()
                    ))
                })?,
            };
            k
        }
        None => Key::generate(),
    };
    write_key_file(
        &master_key_file,
        &KeyFile {
            kind: KeyType::Master,
            drive,
            suite,
            partition: None,
            key: master.clone(),
        },
    )?;
    let drive_key = Key::generate();
    let drive_key_file = keys.join("drive.key");
    write_key_file(
        &drive_key_file,
        &KeyFile {
            kind: KeyType::Drive,
            drive,
            suite,
            partition: None,
            key: drive_key.clone(),
        },
    )?;
    let capacity = opts
        .capacity_bytes
        .or_else(|| free_space(dir))
        .unwrap_or(u64::MAX / 2);
    let rec = DriveRecord {
        drive,
        suite,
        master_key: master,
        drive_key: Some(drive_key),
        min_protection: opts.min_protection,
        capacity_bytes: capacity,
        next_phys: 0,
    };
    let meta = Arc::new(FileStorage::open(&dir.join("meta.redb"))?);
    let data = Arc::new(FileStorage::open(&dir.join("data.blk"))?);
    let seal = match &opts.seal_passphrase {
        Some(p) => Some(KeySeal::create(p).map_err(|e| DriveError::Config(e.to_string()))?),
        None => None,
    };
    let store = Arc::new(Store::create_with(meta, data, rec, seal)?);
    // A new drive has accepted no nonce: its replay floor starts at 0.
    crate::replay_floor::ReplayFloor::open(
        Arc::new(FileStorage::open(
            &dir.join(crate::handler::NONCE_FLOOR_FILE),
        )?),
        0,
    )?;
    let mut report = InitReport {
        drive,
        master_key_file,
        drive_key_file,
        partition_key_file: None,
        working_key_file: None,
    };
    if let Some(p) = opts.partition {
        let (pk, wk) = (Key::generate(), Key::generate());
        run_now(
            &store,
            Job::CreatePartition {
                p,
                quota_bytes: opts.quota_bytes.unwrap_or(capacity),
                scheme: opts.scheme,
            },
        )?;
        run_now(&store, Job::SetPartitionKey { p, key: pk.clone() })?;
        run_now(&store, Job::SetWorkingKey { p, key: wk.clone() })?;
        let pf = keys.join(format!("partition-{}.key", p.0));
        let wf = keys.join(format!("partition-{}-working.key", p.0));
        write_key_file(
            &pf,
            &KeyFile {
                kind: KeyType::Partition,
                drive,
                suite,
                partition: Some(p),
                key: pk,
            },
        )?;
        write_key_file(
            &wf,
            &KeyFile {
                kind: KeyType::Working,
                drive,
                suite,
                partition: Some(p),
                key: wk,
            },
        )?;
        report.partition_key_file = Some(pf);
        report.working_key_file = Some(wf);
    }
    Ok(report)
}

/// Whether the drive in `data_dir` keeps its keys sealed.
pub fn is_sealed(data_dir: &Path) -> Result<bool, DriveError> {
    Store::is_sealed(Arc::new(FileStorage::open_existing(
        &data_dir.join("meta.redb"),
    )?))
}

/// Seals the keys of the (stopped) drive in `data_dir` under `new_passphrase`, or changes the
/// passphrase of a sealed one (`passphrase` opens it). Keys the drive held in clear before may
/// still lie in pages its database has freed: rotate them afterwards (docs/storage.md).
pub fn seal_keys(
    data_dir: &Path,
    passphrase: Option<&[u8]>,
    new_passphrase: &[u8],
) -> Result<(), DriveError> {
    nasd_private::check_tree(data_dir).map_err(|e| DriveError::Config(e.to_string()))?;
    let meta = Arc::new(FileStorage::open_existing(&data_dir.join("meta.redb"))?);
    let data = Arc::new(FileStorage::open_existing(&data_dir.join("data.blk"))?);
    let seal = KeySeal::create(new_passphrase).map_err(|e| DriveError::Config(e.to_string()))?;
    Store::seal_keys(meta, data, passphrase, seal)
}
