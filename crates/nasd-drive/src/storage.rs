//! The storage seam (redb's `StorageBackend` idea): every byte the drive persists goes through
//! [`Storage`], so tests can put a simulated disk underneath that loses unsynced writes on a
//! crash ([`SimDisk`]) or fails chosen operations ([`Faulty`]), while production uses real files
//! with `pread`/`pwrite`/`fdatasync` ([`FileStorage`]). [`SlowDisk`] makes a drive "slow and
//! cold" for experiments (seed 002 §4.6's prefetching only matters when reads wait for a disk).

use parking_lot::Mutex;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One durable byte array: a file, or a simulated one.
pub trait Storage: Send + Sync + fmt::Debug + 'static {
    /// Current length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Reads exactly `out.len()` bytes at `offset`; reading past the end is an error.
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()>;
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// New bytes read as zero.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes every earlier write and `set_len` durable.
    fn sync(&self) -> io::Result<()>;
    /// A hint: allocate space up to `len` bytes now, so later writes inside it need no
    /// allocation (and no file-size change) when they are synced. Writes past the end extend
    /// the storage whether or not this was called.
    fn reserve(&self, len: u64) -> io::Result<()> {
        if self.size()? < len {
            self.set_len(len)?;
        }
        Ok(())
    }
    /// A hint: the operating system may forget cached copies of these bytes, so the next read
    /// of them goes to the device. `len` 0 means to the end.
    fn drop_cached(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
}

/// A real file.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
}

impl FileStorage {
    /// Opens `path`, creating it private to its owner (mode 0600, whatever the umask) if it
    /// does not exist.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(nasd_private::PRIVATE_FILE_MODE)
            .open(path)?;
        Ok(Self { file })
    }

    /// Opens `path`, which must exist.
    pub fn open_existing(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Self { file })
    }
}

impl Storage for FileStorage {
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(out, offset)
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn drop_cached(&self, offset: u64, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid open descriptor; the advice changes no data.
        let r = unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        Ok(())
    }
    fn reserve(&self, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        if self.size()? >= len {
            return Ok(());
        }
        // SAFETY: a valid open descriptor; mode 0 allocates and extends the size.
        let r = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, len as libc::off_t) };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                return self.file.set_len(len);
            }
            return Err(e);
        }
        Ok(())
    }
}

/// Most simulated spindles of a [`SlowDisk`].
pub const SPINDLES_MAX: usize = 64;
/// Longest simulated seek of a [`SlowDisk`], milliseconds.
pub const SEEK_MS_MAX: u64 = 1_000;

/// A slow, cold disk for experiments: every read waits `seek_ms` (a simulated seek and
/// rotation), at most `spindles` reads wait at once (the seed's drive striped over three
/// disks, 002 §4.6), and with `cold` every read is followed by `posix_fadvise(DONTNEED)` of its
/// bytes, so no read is served from the page cache of an earlier one and the
/// experiment measures what the drive's own cache and prefetching do. Writes, sizes and syncs
/// pass through unchanged. (`O_DIRECT` would need aligned buffers on every path; the page
/// cache advice keeps the storage code as it is and is enough once the seek dominates.)
pub struct SlowDisk {
    inner: Arc<dyn Storage>,
    seek: std::time::Duration,
    cold: bool,
    spindles: usize,
    busy: Mutex<usize>,
    free: parking_lot::Condvar,
    reads: AtomicU64,
}

impl fmt::Debug for SlowDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlowDisk")
            .field("seek", &self.seek)
            .field("cold", &self.cold)
            .field("spindles", &self.spindles)
            .finish()
    }
}

impl SlowDisk {
    /// Wraps `inner`; with `cold`, first asks the operating system to forget all of it.
    pub fn new(inner: Arc<dyn Storage>, seek_ms: u64, spindles: usize, cold: bool) -> Self {
        assert!(seek_ms <= SEEK_MS_MAX && (1..=SPINDLES_MAX).contains(&spindles));
        if cold {
            // Best effort: a storage that keeps no OS cache has nothing to drop.
            let _ = inner.drop_cached(0, 0);
        }
        SlowDisk {
            inner,
            seek: std::time::Duration::from_millis(seek_ms),
            cold,
            spindles,
            busy: Mutex::new(0),
            free: parking_lot::Condvar::new(),
            reads: AtomicU64::new(0),
        }
    }

    /// Reads that went to the inner storage.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl Storage for SlowDisk {
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        {
            let mut busy = self.busy.lock();
            while *busy >= self.spindles {
                self.free.wait(&mut busy);
            }
            *busy += 1;
        }
        std::thread::sleep(self.seek);
        let r = self.inner.read(offset, out);
        if self.cold {
            let _ = self.inner.drop_cached(offset, out.len() as u64);
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        *self.busy.lock() -= 1;
        self.free.notify_one();
        r
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.inner.write(offset, data)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn reserve(&self, len: u64) -> io::Result<()> {
        self.inner.reserve(len)
    }
    fn drop_cached(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.drop_cached(offset, len)
    }
}

/// Adapts a [`Storage`] to redb.
#[derive(Debug)]
pub struct RedbBackend(pub Arc<dyn Storage>);

impl redb::StorageBackend for RedbBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.0.size()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), io::Error> {
        self.0.sync()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.0.write(offset, data)
    }
}

#[derive(Clone)]
enum Pending {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Default)]
struct SimState {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<Pending>,
}

fn apply(buf: &mut Vec<u8>, p: &Pending) {
    match p {
        Pending::Write(off, d) => {
            let end = *off as usize + d.len();
            if buf.len() < end {
                buf.resize(end, 0);
            }
            buf[*off as usize..end].copy_from_slice(d);
        }
        Pending::SetLen(n) => buf.resize(*n as usize, 0),
    }
}

/// An in-memory file that models a disk cache: writes are visible at once but durable only
/// after `sync`. [`SimDisk::crash`] throws away unsynced work, keeping each unsynced write with
/// a chosen probability (a power loss may persist some of them, in any order), so tests can
/// prove that every acknowledged write survives and nothing unacknowledged corrupts the rest.
#[derive(Clone, Default)]
pub struct SimDisk(Arc<Mutex<SimState>>);

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimDisk({} bytes)", self.0.lock().current.len())
    }
}

impl SimDisk {
    pub fn new() -> Self {
        Self::default()
    }
    /// Simulates a power loss: the file becomes its durable content plus, independently, each
    /// unsynced write with probability `keep_per_mille / 1000` (decided by `seed`).
    pub fn crash(&self, seed: u64, keep_per_mille: u64) {
        let mut s = self.0.lock();
        let mut rng = seed | 1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut img = s.durable.clone();
        let pending = std::mem::take(&mut s.pending);
        for p in &pending {
            if next() % 1000 < keep_per_mille {
                apply(&mut img, p);
            }
        }
        s.durable = img.clone();
        s.current = img;
    }
    /// Flips bits in the stored bytes (durable and current): on-disk corruption.
    pub fn corrupt(&self, offset: u64, xor: u8) {
        let mut s = self.0.lock();
        let o = offset as usize;
        if o < s.current.len() {
            s.current[o] ^= xor;
        }
        if o < s.durable.len() {
            s.durable[o] ^= xor;
        }
    }
}

impl Storage for SimDisk {
    fn reserve(&self, _len: u64) -> io::Result<()> {
        Ok(()) // nothing to allocate in memory; writes extend the image
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.lock().current.len() as u64)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let s = self.0.lock();
        let end = offset as usize + out.len();
        if end > s.current.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past end",
            ));
        }
        out.copy_from_slice(&s.current[offset as usize..end]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut s = self.0.lock();
        let p = Pending::Write(offset, data.to_vec());
        apply(&mut s.current, &p);
        s.pending.push(p);
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.0.lock();
        let p = Pending::SetLen(len);
        apply(&mut s.current, &p);
        s.pending.push(p);
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        let mut s = self.0.lock();
        s.durable = s.current.clone();
        s.pending.clear();
        Ok(())
    }
}

/// Wraps a storage and fails chosen operations: writes once a byte budget is spent (a full
/// disk: `ENOSPC`), or every operation after a switch is thrown (a dying disk: `EIO`).
#[derive(Debug)]
pub struct Faulty {
    inner: Arc<dyn Storage>,
    /// Bytes that may still be written before writes fail with ENOSPC.
    pub write_budget: AtomicU64,
    /// When non-zero, every operation fails with EIO.
    pub dead: AtomicU64,
    /// When non-zero, counts down one per operation; the operation that takes it to zero and
    /// every later one fail: the disk (or the power) dies at an exact instant.
    pub ops_until_death: AtomicU64,
}

impl Faulty {
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        Self {
            inner,
            write_budget: AtomicU64::new(u64::MAX),
            dead: AtomicU64::new(0),
            ops_until_death: AtomicU64::new(0),
        }
    }
    fn check(&self) -> io::Result<()> {
        let left = self.ops_until_death.load(Ordering::SeqCst);
        if left > 0 && self.ops_until_death.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.dead.store(1, Ordering::SeqCst);
        }
        if self.dead.load(Ordering::Relaxed) != 0 {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }
}

impl Storage for Faulty {
    fn reserve(&self, len: u64) -> io::Result<()> {
        self.check()?;
        self.inner.reserve(len)
    }
    fn size(&self) -> io::Result<u64> {
        self.check()?;
        self.inner.size()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.check()?;
        self.inner.read(offset, out)
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check()?;
        let n = data.len() as u64;
        let ok = self
            .write_budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(n))
            .is_ok();
        if !ok {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.inner.write(offset, data)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        self.check()?;
        self.inner.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_disk_loses_unsynced_writes_on_crash() {
        let d = SimDisk::new();
        d.write(0, b"durable").unwrap();
        d.sync().unwrap();
        d.write(0, b"DURABLE, then lost").unwrap();
        d.crash(1, 0);
        let mut out = vec![0u8; 7];
        d.read(0, &mut out).unwrap();
        assert_eq!(&out, b"durable");
        assert_eq!(d.size().unwrap(), 7);
    }

    #[test]
    fn faulty_reports_enospc_after_budget() {
        let f = Faulty::new(Arc::new(SimDisk::new()));
        f.write_budget.store(4, Ordering::SeqCst);
        f.write(0, b"abcd").unwrap();
        let e = f.write(4, b"e").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    }
}
