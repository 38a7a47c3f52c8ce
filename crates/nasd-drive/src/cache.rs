//! The drive's block cache (seed 002 §4: the prototype drives had 14 MB caches; §4.6 prefetches
//! into one): whole 8 KiB physical blocks, keyed by physical block number, bounded in bytes.
//!
//! Two kinds of entry share the bound:
//! - *pinned* blocks, fetched ahead for a hint stream ([`crate::prefetch`]). A pinned block is
//!   never evicted; it is dropped when every stream that pinned it has been told its hinted
//!   reads are consumed (or its hints were replaced);
//! - *unpinned* blocks, only on a drive run with `--cache-reads`: kept after a demand read
//!   that used part of a block (the rest is likely read next), evicted least recently used
//!   first. Whole-block reads bypass the cache, so a streaming read does not flush it. Off by
//!   default because a cached copy answers reads that should reach the media: the manager's
//!   scrub (and any reread meant to find at-rest damage) would find a block flipped on disk
//!   only once its verified copy left the cache.
//!
//! Why a physical key is safe: blocks are copy-on-write, so the bytes of a physical block do
//! not change until the block is freed, and [`BlockCache::forget`] drops freed blocks when the
//! commit that frees them lands. A block read from an older snapshot could otherwise be
//! inserted after that; every insert names the [`BlockCache::generation`] it started under and
//! is refused if a `forget` came in between. Every entry also keeps the CRC it was checked
//! against when it was read, and a lookup must name the same CRC (paired assertion with the
//! block map). A reader reaches a physical block only through its own object's block map, so
//! the cache serves no object's bytes to a request for another.

use nasd_crypto::integrity::BLOCK_BYTES;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Default size of the block cache: the 14 MB of the seed's drives, rounded to a power of two.
pub const CACHE_BYTES_DEFAULT: u64 = 16 << 20;
/// Largest block cache a drive accepts.
pub const CACHE_BYTES_MAX: u64 = 4 << 30;

/// Counters over the cache's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Block reads served from the cache.
    pub hits: u64,
    /// Block reads that went to storage with the cache on.
    pub misses: u64,
    /// Blocks evicted to make room (unpinned only).
    pub evicted: u64,
    /// Bytes held now.
    pub bytes: u64,
    /// Bytes pinned now.
    pub pinned_bytes: u64,
}

struct Entry {
    crc: u32,
    data: Arc<[u8]>,
    /// Streams holding the block; 0 = unpinned (in the LRU list).
    pins: u32,
    /// Position in the LRU list while unpinned.
    tick: u64,
    /// The hit counter of the stream that fetched the block, if a stream did.
    hits_to: Option<Arc<AtomicU64>>,
}

#[derive(Default)]
struct Inner {
    map: HashMap<u64, Entry>,
    /// Unpinned blocks by last use, oldest first.
    lru: BTreeMap<u64, u64>,
    tick: u64,
    bytes: u64,
    pinned_bytes: u64,
    generation: u64,
    stats: CacheStats,
}

/// A bounded cache of checked physical blocks. See the module documentation.
pub struct BlockCache {
    bytes_max: u64,
    /// Demand reads of part of a block insert it (unpinned).
    cache_reads: bool,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("bytes_max", &self.bytes_max)
            .field("stats", &self.stats())
            .finish()
    }
}

impl BlockCache {
    /// A cache of at most `bytes_max` bytes (rounded down to whole blocks); `cache_reads`: demand
    /// reads of part of a block keep it.
    pub fn new(bytes_max: u64, cache_reads: bool) -> Self {
        BlockCache {
            bytes_max: bytes_max.min(CACHE_BYTES_MAX) / BLOCK_BYTES * BLOCK_BYTES,
            cache_reads,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn bytes_max(&self) -> u64 {
        self.bytes_max
    }

    /// Whether demand reads of part of a block keep it.
    pub fn caches_reads(&self) -> bool {
        self.cache_reads
    }

    pub fn stats(&self) -> CacheStats {
        let i = self.inner.lock();
        CacheStats {
            bytes: i.bytes,
            pinned_bytes: i.pinned_bytes,
            ..i.stats
        }
    }

    /// The generation an insert must name: read it before the snapshot the block comes from.
    pub fn generation(&self) -> u64 {
        self.inner.lock().generation
    }

    /// The cached block `phys`, if it is cached with `crc`; counts a hit or a miss.
    pub fn get(&self, phys: u64, crc: u32) -> Option<Arc<[u8]>> {
        let mut i = self.inner.lock();
        let i = &mut *i;
        let hit = match i.map.get_mut(&phys) {
            Some(e) if e.crc == crc => {
                if e.pins == 0 {
                    i.lru.remove(&e.tick);
                    i.tick += 1;
                    e.tick = i.tick;
                    i.lru.insert(e.tick, phys);
                }
                if let Some(h) = &e.hits_to {
                    h.fetch_add(1, Ordering::Relaxed);
                }
                Some(e.data.clone())
            }
            _ => None,
        };
        match hit {
            Some(_) => i.stats.hits += 1,
            None => i.stats.misses += 1,
        }
        hit
    }

    /// Whether `phys` is cached with `crc`, without counting a hit; pins it for the stream
    /// whose hit counter `hits` is if so, so a block several hints share is fetched once.
    pub fn pin_if_cached(&self, phys: u64, crc: u32, hits: Arc<AtomicU64>) -> bool {
        let mut i = self.inner.lock();
        let i = &mut *i;
        match i.map.get_mut(&phys) {
            Some(e) if e.crc == crc => {
                if e.pins == 0 {
                    i.lru.remove(&e.tick);
                    i.pinned_bytes += BLOCK_BYTES;
                    e.hits_to = Some(hits);
                }
                e.pins += 1;
                true
            }
            _ => false,
        }
    }

    /// Whether one more pinned insert could find room (free bytes, or unpinned blocks to
    /// evict) after `pending` pinned inserts already under way.
    pub fn has_room(&self, pending: u64) -> bool {
        let i = self.inner.lock();
        i.pinned_bytes + (pending + 1) * BLOCK_BYTES <= self.bytes_max
    }

    /// Inserts a checked block read under `generation`; `pinned_for` pins it for a stream whose
    /// hit counter it is. Returns whether the block is now cached (and pinned, if asked): not
    /// when a `forget` came after `generation`, or no room can be made.
    pub fn insert(
        &self,
        generation: u64,
        phys: u64,
        crc: u32,
        data: Arc<[u8]>,
        pinned_for: Option<Arc<AtomicU64>>,
    ) -> bool {
        assert_eq!(
            data.len() as u64,
            BLOCK_BYTES,
            "the cache holds whole blocks"
        );
        let mut i = self.inner.lock();
        let i = &mut *i;
        if i.generation != generation {
            return false;
        }
        if let Some(e) = i.map.get_mut(&phys) {
            if e.crc != crc {
                return false;
            }
            if pinned_for.is_some() {
                if e.pins == 0 {
                    i.lru.remove(&e.tick);
                    i.pinned_bytes += BLOCK_BYTES;
                    e.hits_to = pinned_for;
                }
                e.pins += 1;
            }
            return true;
        }
        while i.bytes + BLOCK_BYTES > self.bytes_max {
            let Some((_, victim)) = i.lru.pop_first() else {
                return false;
            };
            i.map.remove(&victim);
            i.bytes -= BLOCK_BYTES;
            i.stats.evicted += 1;
        }
        i.tick += 1;
        let pins = pinned_for.is_some() as u32;
        if pins == 0 {
            i.lru.insert(i.tick, phys);
        } else {
            i.pinned_bytes += BLOCK_BYTES;
        }
        i.map.insert(
            phys,
            Entry {
                crc,
                data,
                pins,
                tick: i.tick,
                hits_to: pinned_for,
            },
        );
        i.bytes += BLOCK_BYTES;
        debug_assert!(i.bytes <= self.bytes_max && i.pinned_bytes <= i.bytes);
        true
    }

    /// A stream lets go of `phys` (its hinted reads were consumed or replaced): the block is
    /// dropped once no stream holds it. Returns whether this stream's pin was the last.
    pub fn unpin(&self, phys: u64) -> bool {
        let mut i = self.inner.lock();
        let i = &mut *i;
        let Some(e) = i.map.get_mut(&phys) else {
            return false;
        };
        if e.pins == 0 {
            return false;
        }
        e.pins -= 1;
        if e.pins > 0 {
            return false;
        }
        i.map.remove(&phys);
        i.bytes -= BLOCK_BYTES;
        i.pinned_bytes -= BLOCK_BYTES;
        true
    }

    /// Drops freed physical blocks (called when the commit that frees them lands) and starts
    /// a new generation, so no read that began before can insert one of them.
    pub fn forget(&self, freed: &[u64]) {
        let mut i = self.inner.lock();
        let i = &mut *i;
        i.generation += 1;
        for phys in freed {
            if let Some(e) = i.map.remove(phys) {
                i.bytes -= BLOCK_BYTES;
                if e.pins == 0 {
                    i.lru.remove(&e.tick);
                } else {
                    i.pinned_bytes -= BLOCK_BYTES;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(b: u8) -> Arc<[u8]> {
        vec![b; BLOCK_BYTES as usize].into()
    }

    #[test]
    fn the_cache_stays_within_its_bound_and_evicts_unpinned_blocks_oldest_first() {
        let c = BlockCache::new(4 * BLOCK_BYTES + 100, true);
        assert_eq!(
            c.bytes_max(),
            4 * BLOCK_BYTES,
            "rounded down to whole blocks"
        );
        let g = c.generation();
        for phys in 0..10u64 {
            assert!(c.insert(g, phys, phys as u32, block(phys as u8), None));
            assert!(c.stats().bytes <= c.bytes_max());
        }
        // the last four are cached; the first six were evicted in order
        assert_eq!(c.stats().evicted, 6);
        assert!(c.get(5, 5).is_none());
        assert_eq!(c.get(6, 6).unwrap()[0], 6);
        // using 6 makes 7 the oldest
        assert!(c.insert(g, 10, 10, block(10), None));
        assert!(c.get(7, 7).is_none());
        assert!(c.get(6, 6).is_some());
    }

    #[test]
    fn pinned_blocks_are_never_evicted_and_leave_when_unpinned() {
        let c = BlockCache::new(2 * BLOCK_BYTES, true);
        let g = c.generation();
        let hits = Arc::new(AtomicU64::new(0));
        assert!(c.insert(g, 1, 1, block(1), Some(hits.clone())));
        assert!(c.insert(g, 2, 2, block(2), Some(hits.clone())));
        assert!(!c.has_room(0));
        // neither a demand insert nor another pin can push a pinned block out
        assert!(!c.insert(g, 3, 3, block(3), None));
        assert!(!c.insert(g, 3, 3, block(3), Some(hits.clone())));
        assert_eq!(c.stats().pinned_bytes, 2 * BLOCK_BYTES);
        // a read hit is counted for the stream that fetched the block
        assert!(c.get(1, 1).is_some());
        assert_eq!(hits.load(Ordering::Relaxed), 1);
        // a second pin keeps the block through the first unpin
        assert!(c.pin_if_cached(1, 1, hits.clone()));
        assert!(!c.unpin(1));
        assert!(c.get(1, 1).is_some());
        assert!(c.unpin(1));
        assert!(c.get(1, 1).is_none());
        assert_eq!(c.stats().bytes, BLOCK_BYTES);
        assert!(c.has_room(0));
        assert!(!c.has_room(1));
    }

    #[test]
    fn a_lookup_needs_the_crc_and_freed_blocks_cannot_come_back() {
        let c = BlockCache::new(8 * BLOCK_BYTES, true);
        let g = c.generation();
        assert!(c.insert(g, 1, 7, block(1), None));
        assert!(c.get(1, 8).is_none(), "another CRC is another block");
        c.forget(&[1]);
        assert!(c.get(1, 7).is_none());
        // a read that started before the free cannot insert the old bytes
        assert!(!c.insert(g, 1, 7, block(1), None));
        assert!(c.insert(c.generation(), 1, 9, block(2), None));
        assert_eq!(c.stats().bytes, BLOCK_BYTES);
    }

    #[test]
    fn a_zero_byte_cache_holds_nothing() {
        let c = BlockCache::new(0, true);
        assert!(!c.insert(c.generation(), 1, 1, block(1), None));
        assert!(!c.has_room(0));
        assert_eq!(c.stats().bytes, 0);
    }
}
