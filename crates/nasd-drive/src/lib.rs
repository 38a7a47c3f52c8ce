//! The nasd drive: a NASD storage node (seed 002 §2) that holds objects in partitions and
//! enforces, on every request, the access decision a file manager sealed into a capability.
//!
//! Storage sits behind the [`storage::Storage`] seam (real files in production; a simulated
//! disk that loses unsynced writes, and a fault injector, in tests). The engine keeps data in
//! copy-on-write 8 KiB blocks and all metadata — attributes, block maps, each block's CRC and
//! integrity metadata, tree nodes, allocator state, keys — in one redb database, committed
//! atomically after the data is synced: an acknowledged write survives a crash, and data and
//! its integrity metadata never disagree.
//!
//! # Layout
//! - [`storage`]: the storage trait, real files, the crash simulator, fault injection.
//! - [`records`]: versioned on-disk records.
//! - [`replay_floor`]: the durable bound that keeps replays refused across restarts.
//! - [`store`]: the engine's read side, tree node access, block accounting.
//! - [`tree_cache`]: tree nodes computed for reads, kept consistent with commits.
//! - [`writer`]: the single writer thread, jobs, transactions, group commit.
//! - [`handler`]: request decoding, every check of seed 002 §2.4 (one function each, in
//!   `handler/checks.rs`), the operations (one function each, in `handler/ops.rs`), replies.
//! - [`cap_cache`]: the capability-key cache (seed 002 §2.4, §4.4), bounded in entries.
//! - [`cache`]: the block cache, bounded in bytes.
//! - [`prefetch`]: the `prefetch` extension's hint streams and fetcher threads (seed 002 §4.6).
//! - [`options`]: run-time options (cache size, prefetch budgets, a slow and cold disk).
//! - [`server`]: the TCP server (tokio), time and memory limits, graceful shutdown.
//! - [`conns`]: the connection table: limits in all and per source, unproved peers give way.
//! - [`audit`]: the append-only audit trail.
//! - [`metrics`]: what `--metrics` shows (per-operation counters, capacity) and health.
//! - [`init`]: creating a drive and its key files.

pub mod audit;
pub mod cache;
pub mod cap_cache;
pub mod conns;
pub mod handler;
pub mod init;
pub mod metrics;
pub mod options;
pub mod prefetch;
pub mod records;
pub mod replay_floor;
pub mod server;
pub mod storage;
pub mod store;
pub mod tree_cache;
pub mod writer;

pub use handler::{Drive, Metrics};
pub use init::{init, is_sealed, seal_keys, InitOptions, InitReport};
pub use options::DriveOptions;
pub use server::serve;

use nasd_proto::{ObjectId, PartitionId, Status};

/// CPU time this thread has used, in nanoseconds (for the drive's work-per-request metric).
pub fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Errors of the drive library.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("metadata database: {0}")]
    Db(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("drive not initialized (run `nasd drive init`)")]
    NotInitialized,
    #[error("the drive's keys are sealed: give its passphrase ($NASD_DRIVE_PASSPHRASE or --passphrase-file)")]
    Sealed,
    #[error("no such partition {0}")]
    NoSuchPartition(PartitionId),
    #[error("no such object {1} in partition {0}")]
    NoSuchObject(PartitionId, ObjectId),
    #[error("partition {0} exists")]
    PartitionExists(PartitionId),
    #[error("partition {0} has {1} objects")]
    PartitionNotEmpty(PartitionId, u64),
    #[error("partition {0} quota exceeded")]
    QuotaExceeded(PartitionId),
    #[error("drive full")]
    DiskFull,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("request too large")]
    TooLarge,
    #[error("drive shutting down")]
    ShuttingDown,
    #[error("{0}")]
    Config(String),
}

impl DriveError {
    /// The wire status for this error.
    pub fn status(&self) -> Status {
        match self {
            DriveError::Io(e) if e.raw_os_error() == Some(libc::ENOSPC) => Status::DiskFull,
            DriveError::Io(_) | DriveError::Db(_) | DriveError::Config(_) | DriveError::Sealed => {
                Status::IoError
            }
            DriveError::Corrupt(_) => Status::Corrupt,
            DriveError::NotInitialized => Status::NotInitialized,
            DriveError::NoSuchPartition(_) => Status::NoSuchPartition,
            DriveError::NoSuchObject(..) => Status::NoSuchObject,
            DriveError::PartitionExists(_) => Status::PartitionExists,
            DriveError::PartitionNotEmpty(..) => Status::PartitionNotEmpty,
            DriveError::QuotaExceeded(_) => Status::QuotaExceeded,
            DriveError::DiskFull => Status::DiskFull,
            DriveError::Invalid(_) => Status::InvalidArgument,
            DriveError::TooLarge => Status::TooLarge,
            DriveError::ShuttingDown => Status::ShuttingDown,
        }
    }
}
