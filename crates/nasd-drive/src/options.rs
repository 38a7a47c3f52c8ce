//! How a drive runs, beyond what its data directory says: the block cache's size, the
//! prefetching extension's budgets (seed 002 §4.6), the capability-key cache (seed 002 §2.4,
//! §4.4), and, for experiments, a slow and cold disk ([`crate::storage::SlowDisk`]).
//! `nasd drive run` sets them from its flags.

use crate::cache::CACHE_BYTES_DEFAULT;
use crate::prefetch::PrefetchOptions;

/// Default simulated spindles of a slow disk: the seed's prefetching drive striped over three
/// disks (seed 002 §4.6).
pub const SPINDLES_DEFAULT: usize = 3;

/// A drive's run-time options.
#[derive(Clone, Copy, Debug)]
pub struct DriveOptions {
    /// Bytes of the block cache; 0 turns the cache off, and the `prefetch` extension with it.
    pub cache_bytes: u64,
    /// Demand reads of part of a block keep it in the cache (`crate::cache` says why this is
    /// off by default).
    pub cache_reads: bool,
    /// The `prefetch` extension's budgets; `None` serves no extension (the Drive Control
    /// object lists none, and `hint`/`consume` are refused as unknown operations).
    pub prefetch: Option<PrefetchOptions>,
    /// A simulated seek before every data read, milliseconds (0: none).
    pub seek_ms: u64,
    /// Reads that may wait for a seek at once.
    pub spindles: usize,
    /// Every data read is followed by dropping its bytes from the page cache.
    pub cold: bool,
    /// Capability keys are kept in [`crate::cap_cache`] instead of derived on every request
    /// (on by default; off only to measure what the cache saves).
    pub cap_key_cache: bool,
}

impl Default for DriveOptions {
    fn default() -> Self {
        DriveOptions {
            cache_bytes: CACHE_BYTES_DEFAULT,
            cache_reads: false,
            prefetch: Some(PrefetchOptions::default()),
            seek_ms: 0,
            spindles: SPINDLES_DEFAULT,
            cold: false,
            cap_key_cache: true,
        }
    }
}

impl DriveOptions {
    /// Whether data reads may wait on a (simulated) disk, so they must not run on the
    /// server's async workers.
    pub fn slow(&self) -> bool {
        self.seek_ms > 0 || self.cold
    }

    /// Whether the `prefetch` extension is served.
    pub fn prefetching(&self) -> bool {
        self.prefetch.is_some() && self.cache_bytes > 0
    }
}
