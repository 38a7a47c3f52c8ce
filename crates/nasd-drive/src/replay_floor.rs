//! The durable replay floor: what lets the drive refuse, after a restart, a request it accepted
//! before it (issue: a recorded write or setattr replayed after `kill -9` rolled an object
//! back). The replay cache lives in memory; what survives the process is a *ceiling*, a time
//! that every nonce the drive has accepted lies below. The drive persists a new ceiling before
//! it accepts a nonce at or above the current one, and on start-up the last persisted ceiling
//! becomes the floor below which every nonce is refused (protocol §2, `nonce_floor_us` in the
//! welcome, so clients stamp their nonces at or above it).
//!
//! The ceiling is kept up to [`CEILING_LEAD_US`] ahead of the clock: when less than half the
//! lead is left, a background thread moves it on, so honest requests (stamped with the drive's
//! clock) never wait for a sync; a request stamped at or past the ceiling pays for one sync
//! itself, after its digest verified. On restart the floor is at most
//! that lead past the moment of the crash, which is within the nonce window, so clients that
//! stamp at the floor are served at once.
//!
//! File `nonce.floor`, two slots so a torn write leaves the other one intact:
//! ```text
//! slot i at offset i * 512, 32 bytes:
//! 0 u8 version (1)   1 7B zero   8 u64 sequence   16 u64 ceiling_us   24 u32 crc32c of bytes 0..24
//! 28 4B zero
//! ```
//! The slot with the higher sequence whose CRC holds is current; writes alternate slots.

use crate::storage::Storage;
use parking_lot::{Condvar, Mutex};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How far ahead of the clock the ceiling is kept, microseconds. It bounds how long after a
/// crash's moment the floor can lie, so it must stay well inside the nonce window.
pub const CEILING_LEAD_US: u64 = 2_000_000;
/// After a failed background write, how long before the next try, milliseconds.
const RETRY_AFTER_MS: u64 = 100;
const SLOT_BYTES: u64 = 512;
const VERSION: u8 = 1;

const _: () = assert!(CEILING_LEAD_US < nasd_crypto::nonce::NONCE_WINDOW_MS * 1000 / 4);

pub struct ReplayFloor {
    inner: Arc<Inner>,
    worker: Option<std::thread::JoinHandle<()>>,
}

struct Inner {
    storage: Arc<dyn Storage>,
    /// Every nonce time below this may be accepted: it is durable (or was, before a restart).
    ceiling_us: AtomicU64,
    /// The next write's sequence number; held while a new ceiling is written and synced.
    write: Mutex<u64>,
    /// A ceiling the background thread should make durable, and whether to stop.
    wanted: Mutex<(u64, bool)>,
    wake: Condvar,
}

fn encode(seq: u64, ceiling_us: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0] = VERSION;
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..24].copy_from_slice(&ceiling_us.to_le_bytes());
    let crc = crc32c::crc32c(&b[..24]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

/// (sequence, ceiling) of a slot whose version and CRC hold.
fn decode(b: &[u8; 32]) -> Option<(u64, u64)> {
    let crc = u32::from_le_bytes(b[24..28].try_into().expect("4 bytes"));
    if b[0] != VERSION || crc32c::crc32c(&b[..24]) != crc {
        return None;
    }
    Some((
        u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
        u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
    ))
}

impl ReplayFloor {
    /// Opens the floor on `storage`: returns it and the floor below which nonces must now be
    /// refused. An empty storage (a new drive, or one made before the floor existed) starts at
    /// `fresh_floor_us`, which the caller picks so that nothing accepted before can be above it.
    pub fn open(storage: Arc<dyn Storage>, fresh_floor_us: u64) -> io::Result<(Self, u64)> {
        let size = storage.size()?;
        let mut best: Option<(u64, u64)> = None;
        for i in 0..2 {
            let at = i * SLOT_BYTES;
            if size < at + 32 {
                continue;
            }
            let mut b = [0u8; 32];
            storage.read(at, &mut b)?;
            if let Some(s) = decode(&b) {
                best = best.max(Some(s));
            }
        }
        let (seq, floor) = match best {
            Some((seq, ceiling)) => (seq + 1, ceiling),
            None if size == 0 => (0, fresh_floor_us),
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the replay floor (nonce.floor) is corrupt in both slots; \
                     the drive cannot know which requests it accepted before",
                ))
            }
        };
        let inner = Arc::new(Inner {
            storage,
            ceiling_us: AtomicU64::new(floor),
            write: Mutex::new(seq),
            wanted: Mutex::new((0, false)),
            wake: Condvar::new(),
        });
        if seq == 0 {
            inner.persist(floor)?;
        }
        let bg = inner.clone();
        let worker = std::thread::Builder::new()
            .name("nasd-replay-floor".into())
            .spawn(move || bg.run())?;
        Ok((
            ReplayFloor {
                inner,
                worker: Some(worker),
            },
            floor,
        ))
    }

    pub fn ceiling_us(&self) -> u64 {
        self.inner.ceiling_us.load(Ordering::Acquire)
    }

    /// Makes sure a nonce at `time_us` lies below the durable ceiling before it is accepted:
    /// at once if it already does (and the background thread is asked to move the ceiling on
    /// when less than half the lead is left), else by persisting a new ceiling now.
    pub fn cover(&self, time_us: u64, now_us: u64) -> io::Result<()> {
        let t = time_us.max(now_us);
        let ceiling = self.ceiling_us();
        if time_us >= ceiling {
            return self.inner.persist(t + CEILING_LEAD_US);
        }
        // The clock may have passed the ceiling (a slow disk held the background thread's
        // sync) while this nonce is still under it: covered, and the ceiling is moved on.
        if ceiling.saturating_sub(t) < CEILING_LEAD_US / 2 {
            let mut w = self.inner.wanted.lock();
            if w.0 < t + CEILING_LEAD_US {
                w.0 = t + CEILING_LEAD_US;
                self.inner.wake.notify_one();
            }
        }
        Ok(())
    }
}

impl Drop for ReplayFloor {
    fn drop(&mut self) {
        self.inner.wanted.lock().1 = true;
        self.inner.wake.notify_one();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Inner {
    /// The background thread: persists the ceilings [`ReplayFloor::cover`] asks for.
    fn run(&self) {
        loop {
            let want = {
                let mut w = self.wanted.lock();
                while !w.1 && w.0 <= self.ceiling_us.load(Ordering::Acquire) {
                    self.wake.wait(&mut w);
                }
                if w.1 {
                    return;
                }
                w.0
            };
            if let Err(e) = self.persist(want) {
                // Requests at or above the old ceiling persist it themselves, and fail if
                // that fails too: nothing is accepted that is not covered.
                tracing::warn!("persisting the replay floor failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(RETRY_AFTER_MS));
            }
        }
    }

    /// Writes and syncs `ceiling_us` if it raises the ceiling; the ceiling never falls.
    fn persist(&self, ceiling_us: u64) -> io::Result<()> {
        let mut seq = self.write.lock();
        if *seq > 0 && ceiling_us <= self.ceiling_us.load(Ordering::Acquire) {
            return Ok(());
        }
        self.storage
            .write((*seq % 2) * SLOT_BYTES, &encode(*seq, ceiling_us))?;
        self.storage.sync()?;
        *seq += 1;
        self.ceiling_us.fetch_max(ceiling_us, Ordering::AcqRel);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::SimDisk;

    #[test]
    fn the_floor_after_a_crash_is_above_every_covered_nonce() {
        let disk = Arc::new(SimDisk::new());
        let (f, floor) = ReplayFloor::open(disk.clone(), 1_000).unwrap();
        assert_eq!(floor, 1_000);
        let mut covered = 0;
        for (i, t) in [5_000u64, 9_000_000, 9_000_001, 30_000_000]
            .into_iter()
            .enumerate()
        {
            f.cover(t, t).unwrap();
            covered = covered.max(t);
            assert!(f.ceiling_us() > covered);
            disk.crash(i as u64, 500);
            let (g, floor) = ReplayFloor::open(disk.clone(), 0).unwrap();
            assert!(floor > covered, "floor {floor} not above {covered}");
            drop(g);
        }
    }

    /// A write torn by a crash leaves the slot before it, whose ceiling still bounds every
    /// accepted nonce (none is accepted above a ceiling before its write is synced). Both slots
    /// unreadable is refused: the drive cannot know what it accepted.
    #[test]
    fn a_torn_slot_falls_back_to_the_other_and_two_fail_loudly() {
        let disk = Arc::new(SimDisk::new());
        let (f, _) = ReplayFloor::open(disk.clone(), 0).unwrap(); // seq 0 in slot 0
        f.cover(10_000_000, 0).unwrap(); // seq 1 in slot 1
        let older = f.ceiling_us();
        f.cover(20_000_000, 0).unwrap(); // seq 2 in slot 0
        let newest = f.ceiling_us();
        drop(f);
        let (_, floor) = ReplayFloor::open(disk.clone(), 0).unwrap();
        assert_eq!(floor, newest);
        disk.corrupt(20, 0xff);
        let (_, floor) = ReplayFloor::open(disk.clone(), 0).unwrap();
        assert_eq!(floor, older);
        disk.corrupt(SLOT_BYTES + 20, 0xff);
        assert!(ReplayFloor::open(disk, 0).is_err());
    }

    /// A nonce under the ceiling while the clock has already passed it (the background
    /// sync was slow) is covered as it is, and the ceiling moves on ahead of the clock. (This
    /// once overflowed and killed the drive's request task, leaving its client waiting.)
    #[test]
    fn a_clock_past_the_ceiling_with_an_older_nonce_is_covered() {
        let disk = Arc::new(SimDisk::new());
        let (f, _) = ReplayFloor::open(disk, 0).unwrap();
        f.cover(50_000_000, 50_000_000).unwrap();
        let ceiling = f.ceiling_us();
        let now = ceiling + 5_000_000;
        f.cover(ceiling - 1, now).unwrap();
        let t0 = std::time::Instant::now();
        while f.ceiling_us() < now + CEILING_LEAD_US {
            assert!(t0.elapsed().as_secs() < 10, "the ceiling never moved");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn the_background_thread_keeps_the_lead() {
        let disk = Arc::new(SimDisk::new());
        let (f, _) = ReplayFloor::open(disk, 0).unwrap();
        f.cover(50_000_000, 50_000_000).unwrap(); // past the ceiling: synced at once
        assert_eq!(f.ceiling_us(), 50_000_000 + CEILING_LEAD_US);
        f.cover(50_000_001, 50_000_001).unwrap(); // more than half the lead left: nothing
        assert_eq!(f.ceiling_us(), 50_000_000 + CEILING_LEAD_US);
        let late = 50_000_000 + CEILING_LEAD_US * 3 / 4;
        f.cover(late, late).unwrap(); // under half left: the thread moves it on
        let t0 = std::time::Instant::now();
        while f.ceiling_us() != late + CEILING_LEAD_US {
            assert!(t0.elapsed().as_secs() < 10, "the ceiling never moved");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
