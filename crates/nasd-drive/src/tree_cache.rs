//! A cache of `tree` nodes the drive computed for reads, so repeated reads of an object cost
//! neither the merges of nodes below the stored levels nor database lookups.
//!
//! Consistency uses a per-object version in the manner of a seqlock: the writer makes an
//! object's version odd just before it commits a change to the object's tree and even again
//! just after. A reader notes the version before it opens its snapshot and uses or fills the
//! cache only when that version is even and still current, so nodes computed from one snapshot
//! are never served to a reader of another. A reader that meets an odd version simply computes
//! without the cache.

use nasd_crypto::Digest;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-rotate hasher for the cache's small integer keys: the keys are chosen by the
/// drive's own object and node numbering, not by clients' text, so SipHash's flooding
/// resistance buys nothing here and costs a third of a cache lookup.
#[derive(Default)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_u16(&mut self, i: u16) {
        self.write_u64(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Most nodes kept in the cache (32 bytes each plus map overhead: about 100 MiB at most);
/// when full it is emptied and refills with what reads use.
pub const TREE_CACHE_NODES_MAX: usize = 1 << 20;

type ObjKey = (u16, u64);
/// An object's cached nodes, keyed by (level, index), and the version they were computed at.
type ObjNodes = (u64, FastMap<(u32, u64), Digest>);

#[derive(Default)]
struct Inner {
    versions: FastMap<ObjKey, u64>,
    nodes: FastMap<ObjKey, ObjNodes>,
    total: usize,
}

#[derive(Default)]
pub struct TreeCache {
    inner: Mutex<Inner>,
}

impl TreeCache {
    /// The object's version; odd while a change to it is being committed.
    pub fn version(&self, k: ObjKey) -> u64 {
        self.inner.lock().versions.get(&k).copied().unwrap_or(0)
    }

    /// Marks objects as changing (odd versions) and drops their cached nodes.
    pub fn begin_change(&self, keys: &[ObjKey]) {
        let mut g = self.inner.lock();
        for k in keys {
            let v = g.versions.entry(*k).or_insert(0);
            if v.is_multiple_of(2) {
                *v += 1;
            }
            if let Some((_, n)) = g.nodes.remove(k) {
                g.total -= n.len();
            }
        }
    }

    /// Marks objects as stable again (even versions), after the commit is visible.
    pub fn end_change(&self, keys: &[ObjKey]) {
        let mut g = self.inner.lock();
        for k in keys {
            let v = g.versions.entry(*k).or_insert(0);
            if !v.is_multiple_of(2) {
                *v += 1;
            }
        }
    }

    pub fn get(&self, k: ObjKey, version: u64, level: u32, index: u64) -> Option<Digest> {
        if !version.is_multiple_of(2) {
            return None;
        }
        let g = self.inner.lock();
        match g.nodes.get(&k) {
            Some((v, n)) if *v == version => n.get(&(level, index)).copied(),
            _ => None,
        }
    }

    /// Adds nodes computed from a snapshot taken at `version`, if that is still current.
    pub fn put(&self, k: ObjKey, version: u64, fresh: Vec<((u32, u64), Digest)>) {
        if !version.is_multiple_of(2) || fresh.is_empty() {
            return;
        }
        let mut g = self.inner.lock();
        if g.versions.get(&k).copied().unwrap_or(0) != version {
            return;
        }
        if g.total + fresh.len() > TREE_CACHE_NODES_MAX {
            g.nodes.clear();
            g.total = 0;
        }
        let mut added = 0;
        let e = g
            .nodes
            .entry(k)
            .or_insert_with(|| (version, FastMap::default()));
        for (key, d) in fresh {
            if e.1.insert(key, d).is_none() {
                added += 1;
            }
        }
        g.total += added;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_from_an_old_snapshot_are_never_served() {
        let c = TreeCache::default();
        let k = (1, 16);
        let v0 = c.version(k);
        c.put(k, v0, vec![((3, 0), [1; 32])]);
        assert_eq!(c.get(k, v0, 3, 0), Some([1; 32]));
        // a writer changes the object: the reader that noted v0 may not insert any more
        c.begin_change(&[k]);
        assert_eq!(c.get(k, v0, 3, 0), None);
        let during = c.version(k);
        assert!(!during.is_multiple_of(2));
        c.put(k, v0, vec![((3, 0), [2; 32])]);
        c.put(k, during, vec![((3, 0), [2; 32])]);
        c.end_change(&[k]);
        let v1 = c.version(k);
        assert_eq!(
            c.get(k, v1, 3, 0),
            None,
            "nothing from before or during the change"
        );
        c.put(k, v1, vec![((3, 0), [3; 32])]);
        assert_eq!(c.get(k, v1, 3, 0), Some([3; 32]));
        assert_eq!(c.get(k, v0, 3, 0), None);
    }
}
