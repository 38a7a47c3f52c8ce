//! A cache of `tree` nodes the drive computed for reads, so repeated reads of an object cost
//! neither the merges of nodes below the stored levels nor database lookups; and of whole read
//! answers — the object's top and the proof of a chunk range — so a read of a range read before
//! (a hot file, a client rereading a block) takes one lookup instead of one per proof node.
//!
//! Consistency uses a per-object version in the manner of a seqlock: the writer makes an
//! object's version odd just before it commits a change to the object's tree and even again
//! just after. A reader notes the version before it opens its snapshot and uses or fills the
//! cache only when that version is even and still current, so nodes computed from one snapshot
//! are never served to a reader of another. A reader that meets an odd version simply computes
//! without the cache. The cache remembers the versions of at most [`VERSIONS_MAX`] objects; an
//! object it does not remember has the version `floor`, which moves past every version handed
//! out whenever remembered ones are forgotten, so no reader's note survives the forgetting.

use nasd_crypto::Digest;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

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

/// Most cached range answers per object; beyond it the object's answers are dropped and
/// refill with what reads use (each counts its proof's nodes against the node limit too).
pub const RANGES_PER_OBJECT_MAX: usize = 256;

/// Most objects whose version the cache remembers (about 40 bytes each, some 10 MiB); beyond
/// it the versions of stable objects are forgotten, with their cached entries.
pub const VERSIONS_MAX: usize = 1 << 18;

type ObjKey = (u16, u64);
/// A chunk range `[c0, c1)` and its proof.
pub type RangeProof = ((u64, u64), Arc<[Digest]>);

/// What is cached for one object, all computed from snapshots at `version`.
#[derive(Default)]
struct ObjNodes {
    version: u64,
    /// Complete nodes by (level, index).
    nodes: FastMap<(u32, u64), Digest>,
    /// The top of the object's `n` chunks, by `n`.
    top: Option<(u64, Digest)>,
    /// Proofs by chunk range `[c0, c1)`.
    ranges: FastMap<(u64, u64), Arc<[Digest]>>,
}

/// Cache slots a cached proof takes: its nodes and one for the range.
fn proof_weight(p: &[Digest]) -> usize {
    p.len() + 1
}

impl ObjNodes {
    fn weight(&self) -> usize {
        self.nodes.len() + self.ranges_weight()
    }
    fn ranges_weight(&self) -> usize {
        self.ranges.values().map(|p| proof_weight(p)).sum()
    }
}

#[derive(Default)]
struct Inner {
    versions: FastMap<ObjKey, u64>,
    /// The version of an object not in `versions`; even.
    floor: u64,
    /// The highest version handed out.
    high: u64,
    nodes: FastMap<ObjKey, ObjNodes>,
    total: usize,
}

impl Inner {
    fn version(&self, k: &ObjKey) -> u64 {
        self.versions.get(k).copied().unwrap_or(self.floor)
    }

    /// Sets the object's version to the next odd (`odd`) or even number, if it is not one.
    fn bump(&mut self, k: ObjKey, odd: bool) {
        let floor = self.floor;
        let v = self.versions.entry(k).or_insert(floor);
        if v.is_multiple_of(2) == odd {
            *v += 1;
        }
        self.high = self.high.max(*v);
    }

    /// Forgets every stable object's version and cached entries. Objects being changed keep
    /// theirs (their writer will end the change); every other object now reads as a `floor`
    /// above any version a reader may have noted.
    fn forget(&mut self) {
        self.floor = (self.high | 1) + 1;
        self.high = self.floor;
        self.versions.retain(|_, v| !v.is_multiple_of(2));
        self.nodes.clear();
        self.total = 0;
    }
}

#[derive(Default)]
pub struct TreeCache {
    inner: Mutex<Inner>,
}

impl TreeCache {
    /// The object's version; odd while a change to it is being committed.
    pub fn version(&self, k: ObjKey) -> u64 {
        self.inner.lock().version(&k)
    }

    /// Marks objects as changing (odd versions) and drops their cached nodes.
    pub fn begin_change(&self, keys: &[ObjKey]) {
        let mut g = self.inner.lock();
        for k in keys {
            g.bump(*k, true);
            if let Some(n) = g.nodes.remove(k) {
                g.total -= n.weight();
            }
        }
    }

    /// Marks objects as stable again (even versions), after the commit is visible.
    pub fn end_change(&self, keys: &[ObjKey]) {
        let mut g = self.inner.lock();
        for k in keys {
            g.bump(*k, false);
        }
        if g.versions.len() > VERSIONS_MAX {
            g.forget();
        }
    }

    pub fn get(&self, k: ObjKey, version: u64, level: u32, index: u64) -> Option<Digest> {
        self.current(k, version, |o| o.nodes.get(&(level, index)).copied())
    }

    /// The cached top of the object's `n` chunks and proof of chunks `[c0, c1)`, as far as
    /// they are cached for `version`.
    pub fn answer(
        &self,
        k: ObjKey,
        version: u64,
        n: u64,
        c0: u64,
        c1: u64,
    ) -> (Option<Digest>, Option<Arc<[Digest]>>) {
        self.current(k, version, |o| {
            let top = o.top.filter(|t| t.0 == n).map(|t| t.1);
            Some((top, o.ranges.get(&(c0, c1)).cloned()))
        })
        .unwrap_or((None, None))
    }

    /// Runs `f` on the object's cached entries when they were computed at `version`, still the
    /// object's current one.
    fn current<T>(
        &self,
        k: ObjKey,
        version: u64,
        f: impl FnOnce(&ObjNodes) -> Option<T>,
    ) -> Option<T> {
        if !version.is_multiple_of(2) {
            return None;
        }
        let g = self.inner.lock();
        match g.nodes.get(&k) {
            Some(o) if o.version == version => f(o),
            _ => None,
        }
    }

    /// Adds nodes computed from a snapshot taken at `version`, if that is still current.
    pub fn put(&self, k: ObjKey, version: u64, fresh: Vec<((u32, u64), Digest)>) {
        if fresh.is_empty() {
            return;
        }
        self.update(k, version, fresh.len(), |o| {
            let mut added = 0;
            for (key, d) in fresh {
                added += o.nodes.insert(key, d).is_none() as usize;
            }
            added as isize
        });
    }

    /// Adds a read's answer — the top of `n` chunks and the proofs of chunk ranges — computed
    /// from a snapshot taken at `version`, if that is still current.
    pub fn put_answer(
        &self,
        k: ObjKey,
        version: u64,
        n: u64,
        top: Digest,
        ranges: Vec<RangeProof>,
    ) {
        let weight = ranges.iter().map(|r| proof_weight(&r.1)).sum();
        self.update(k, version, weight, |o| {
            o.top = Some((n, top));
            let before = o.ranges_weight() as isize;
            for (key, proof) in ranges {
                if o.ranges.len() >= RANGES_PER_OBJECT_MAX && !o.ranges.contains_key(&key) {
                    o.ranges.clear();
                }
                o.ranges.insert(key, proof);
            }
            o.ranges_weight() as isize - before
        });
    }

    /// Applies `f` to the object's entries if `version` is current, making room for about
    /// `weight` more nodes first; `f` returns the change in node count it made.
    fn update(
        &self,
        k: ObjKey,
        version: u64,
        weight: usize,
        f: impl FnOnce(&mut ObjNodes) -> isize,
    ) {
        if !version.is_multiple_of(2) {
            return;
        }
        let mut g = self.inner.lock();
        if g.version(&k) != version {
            return;
        }
        if g.total + weight > TREE_CACHE_NODES_MAX {
            g.nodes.clear();
            g.total = 0;
        }
        let e = g.nodes.entry(k).or_insert_with(|| ObjNodes {
            version,
            ..Default::default()
        });
        let delta = f(e);
        g.total = (g.total as isize + delta).max(0) as usize;
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
    #[test]
    fn answers_follow_the_version_and_stay_bounded() {
        let c = TreeCache::default();
        let k = (1, 16);
        let v0 = c.version(k);
        let proof: Arc<[Digest]> = vec![[7; 32], [8; 32]].into();
        c.put_answer(k, v0, 10, [1; 32], vec![((0, 4), proof.clone())]);
        assert_eq!(
            c.answer(k, v0, 10, 0, 4),
            (Some([1; 32]), Some(proof.clone()))
        );
        // another object size (n) or range is not answered by it
        assert_eq!(c.answer(k, v0, 11, 0, 4).0, None);
        assert_eq!(c.answer(k, v0, 10, 0, 5).1, None);
        // a change hides every answer, and answers from before it are refused
        c.begin_change(&[k]);
        c.end_change(&[k]);
        let v1 = c.version(k);
        assert_eq!(c.answer(k, v1, 10, 0, 4), (None, None));
        c.put_answer(k, v0, 10, [1; 32], vec![((0, 4), proof.clone())]);
        assert_eq!(c.answer(k, v1, 10, 0, 4), (None, None));
        // ranges per object are bounded, and the node count follows what is kept
        for i in 0..(RANGES_PER_OBJECT_MAX as u64 + 10) {
            c.put_answer(k, v1, 10, [2; 32], vec![((i, i + 1), proof.clone())]);
        }
        let g = c.inner.lock();
        let o = &g.nodes[&k];
        assert!(o.ranges.len() <= RANGES_PER_OBJECT_MAX);
        assert_eq!(g.total, o.weight());
    }

    #[test]
    fn forgotten_versions_refuse_every_earlier_reader() {
        let c = TreeCache::default();
        let (hot, cold) = ((1, 1), (1, 2));
        c.begin_change(&[hot]);
        c.end_change(&[hot]);
        // readers note versions: one of a remembered object, one of an object never changed
        let (v_hot, v_cold) = (c.version(hot), c.version(cold));
        c.put(hot, v_hot, vec![((0, 0), [1; 32])]);
        assert_eq!(c.get(hot, v_hot, 0, 0), Some([1; 32]));
        // a writer in the middle of a change when the forgetting happens
        let busy = (2, 7);
        c.begin_change(&[busy]);
        for i in 0..=VERSIONS_MAX as u64 {
            c.begin_change(&[(3, i)]);
            c.end_change(&[(3, i)]);
        }
        {
            let g = c.inner.lock();
            assert!(g.versions.len() <= VERSIONS_MAX, "{}", g.versions.len());
        }
        // nothing a reader noted before is current any more, for either object
        assert_ne!(c.version(hot), v_hot);
        assert_ne!(c.version(cold), v_cold);
        assert_eq!(c.get(hot, v_hot, 0, 0), None);
        c.put(cold, v_cold, vec![((0, 0), [2; 32])]);
        assert_eq!(c.get(cold, c.version(cold), 0, 0), None);
        // the change in progress stays odd and ends even, above what readers saw before it
        let during = c.version(busy);
        assert!(!during.is_multiple_of(2));
        c.end_change(&[busy]);
        let after = c.version(busy);
        assert!(after.is_multiple_of(2) && after > during);
        // and the cache works again with fresh notes
        let v = c.version(cold);
        c.put(cold, v, vec![((0, 0), [3; 32])]);
        assert_eq!(c.get(cold, v, 0, 0), Some([3; 32]));
    }
}
