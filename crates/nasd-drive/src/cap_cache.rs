//! The drive's cache of capability keys (seed 002 §2.4 and §4.4: a drive may keep the
//! capabilities it has seen and their keys, so a client's next request under the same
//! capability costs no key derivation). A pure memo of `nasd_crypto::capability::capability_key`:
//! an entry is found only by everything that key depends on — the digest suite, the working
//! key (by its [`Key::id`], never the key itself), the capability's canonical encoding and the
//! object's access control version — so a hit is exactly what recomputation gives, and an
//! access-control-version bump or a working-key rotation cannot return a stale key: the new
//! inputs simply miss. Revocation therefore works as without the cache.
//!
//! The cache is bounded ([`CAP_KEY_CACHE_ENTRIES`]) and evicts the least recently used entry
//! in constant time (`hashlink::LruCache`, a linked hash map), so a stream of never-seen
//! capabilities, forged or not, costs one insertion each and no scan.
//! Keys are [`Key`]s: zeroized when evicted or dropped, and never printed (no `Debug` here
//! shows one).

use hashlink::LruCache;
use nasd_crypto::{capability, Key, KEY_BYTES};
use nasd_proto::{CapabilityArgs, Suite};
use parking_lot::Mutex;
use std::hash::{Hash, Hasher};

/// Capability keys a drive keeps: each entry takes about 250 bytes (its slot, the key, the
/// map's links), so the cache stays under half a MiB.
pub const CAP_KEY_CACHE_ENTRIES: usize = 1024;

const _: () = assert!(CAP_KEY_CACHE_ENTRIES >= 1);

const ARGS_BYTES_MAX: usize = CapabilityArgs::BYTES_WITH_WRITER_KEY;
const _: () = assert!(ARGS_BYTES_MAX <= u8::MAX as usize);

/// Everything a capability key depends on. Two slots are equal exactly when the MAC inputs of
/// `capability_key` are: the suite picks the MAC, the working key's id stands for its key
/// (collision resistant), the encoding is what the MAC covers, and the version is MACed after
/// it. Bytes of `args` past `args_len` are always zero.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Slot {
    suite: u8,
    working_key_id: [u8; KEY_BYTES],
    args_len: u8,
    args: [u8; ARGS_BYTES_MAX],
    access_control_version: u64,
}

impl Slot {
    fn new(suite: Suite, working_key: &Key, args: &CapabilityArgs, acv: u64) -> Slot {
        let encoded = args.encode();
        let mut bytes = [0u8; ARGS_BYTES_MAX];
        bytes[..encoded.len()].copy_from_slice(&encoded);
        Slot {
            suite: suite as u8,
            working_key_id: working_key.id(),
            args_len: encoded.len() as u8,
            args: bytes,
            access_control_version: acv,
        }
    }
}

/// Hashes the encoding's own bytes only (the zero tail adds nothing); consistent with `Eq`.
impl Hash for Slot {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u8(self.suite);
        state.write(&self.working_key_id);
        state.write(&self.args[..self.args_len as usize]);
        state.write_u64(self.access_control_version);
    }
}

/// A bounded, thread-safe memo of capability keys; the lock is held for a map lookup,
/// never while a key is derived.
pub struct CapKeyCache {
    lru: Mutex<LruCache<Slot, Key>>,
}

impl CapKeyCache {
    pub fn new(entries_max: usize) -> CapKeyCache {
        assert!(
            entries_max >= 1,
            "a capability-key cache holds an entry at least"
        );
        CapKeyCache {
            lru: Mutex::new(LruCache::new(entries_max)),
        }
    }

    /// `capability::capability_key(suite, working_key, args, acv)`, from the cache when it
    /// holds it, otherwise derived (outside the lock) and kept.
    pub fn capability_key(
        &self,
        suite: Suite,
        working_key: &Key,
        args: &CapabilityArgs,
        acv: u64,
    ) -> Key {
        let slot = Slot::new(suite, working_key, args, acv);
        if let Some(key) = self.lru.lock().get(&slot) {
            return key.clone();
        }
        let key = capability::capability_key(suite, working_key, args, acv);
        // Two requests that missed at once both derived it (the keys are equal); the least
        // recently used entry goes when the cache is full, and its key is zeroized as dropped.
        self.lru.lock().insert(slot, key.clone());
        key
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.lru.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nasd_proto::{DriveId, ObjectId, PartitionId, Protection, Region, Rights};

    fn args(object: u64) -> CapabilityArgs {
        CapabilityArgs {
            drive: DriveId(7),
            partition: PartitionId(1),
            object: ObjectId(object),
            region: Region::new(0, u64::MAX),
            rights: Rights::READ,
            expiry_ms: 1 << 40,
            audit_id: 3,
            min_protection: Protection::INTEGRITY_ARGS,
            writer_key: None,
        }
    }

    #[test]
    fn a_hit_equals_recomputation() {
        let c = CapKeyCache::new(8);
        let wk = Key::generate();
        for suite in [Suite::Blake3, Suite::Sha256] {
            let fresh = capability::capability_key(suite, &wk, &args(5), 2);
            assert_eq!(c.capability_key(suite, &wk, &args(5), 2), fresh, "miss");
            assert_eq!(c.capability_key(suite, &wk, &args(5), 2), fresh, "hit");
        }
        // One entry per suite: the suite is part of what a key is found by.
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_new_access_control_version_misses_and_gives_the_new_key() {
        let c = CapKeyCache::new(8);
        let wk = Key::generate();
        let old = c.capability_key(Suite::Blake3, &wk, &args(5), 0);
        let new = c.capability_key(Suite::Blake3, &wk, &args(5), 1);
        assert_ne!(old, new);
        assert_eq!(
            new,
            capability::capability_key(Suite::Blake3, &wk, &args(5), 1)
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn another_working_key_misses_and_gives_its_own_key() {
        let c = CapKeyCache::new(8);
        let (wk1, wk2) = (Key::generate(), Key::generate());
        let k1 = c.capability_key(Suite::Blake3, &wk1, &args(5), 0);
        let k2 = c.capability_key(Suite::Blake3, &wk2, &args(5), 0);
        assert_ne!(k1, k2);
        assert_eq!(
            k2,
            capability::capability_key(Suite::Blake3, &wk2, &args(5), 0)
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_writer_key_is_part_of_the_capability() {
        let c = CapKeyCache::new(8);
        let wk = Key::generate();
        let mut signed = args(5);
        signed.writer_key = Some(nasd_proto::WriterPublicKey([9; 32]));
        let plain = c.capability_key(Suite::Blake3, &wk, &args(5), 0);
        let with = c.capability_key(Suite::Blake3, &wk, &signed, 0);
        assert_ne!(plain, with);
        assert_eq!(
            with,
            capability::capability_key(Suite::Blake3, &wk, &signed, 0)
        );
    }

    #[test]
    fn the_bound_holds_and_the_least_recently_used_goes() {
        const N: usize = 16;
        let c = CapKeyCache::new(N);
        let wk = Key::generate();
        for o in 0..N as u64 {
            c.capability_key(Suite::Blake3, &wk, &args(o), 0);
        }
        // Touch object 0, so object 1 is now the least recently used.
        c.capability_key(Suite::Blake3, &wk, &args(0), 0);
        for o in N as u64..3 * N as u64 {
            c.capability_key(Suite::Blake3, &wk, &args(o), 0);
            assert_eq!(c.len(), N);
            if o == N as u64 {
                let lru = c.lru.lock();
                assert!(lru.contains_key(&Slot::new(Suite::Blake3, &wk, &args(0), 0)));
                assert!(!lru.contains_key(&Slot::new(Suite::Blake3, &wk, &args(1), 0)));
            }
        }
        // Every key still held is the one recomputation gives.
        let lru = c.lru.lock();
        assert_eq!(lru.len(), N);
        for (slot, key) in lru.iter() {
            let o = u64::from_le_bytes(slot.args[10..18].try_into().unwrap());
            let fresh = capability::capability_key(Suite::Blake3, &wk, &args(o), 0);
            assert_eq!(*key, fresh);
        }
    }

    /// What a hit costs against a derivation, per key, in one process: the saving per
    /// capability-authorized request is this once per working key the partition holds.
    #[test]
    #[ignore = "a measurement: cargo test --release -p nasd-drive --lib cap_cache -- --ignored --nocapture"]
    fn a_hit_against_a_derivation() {
        const KEYS: u64 = 200_000;
        let c = CapKeyCache::new(CAP_KEY_CACHE_ENTRIES);
        let wk = Key::generate();
        for suite in [Suite::Blake3, Suite::Sha256] {
            let (mut derive, mut hit) = (vec![], vec![]);
            for _round in 0..11 {
                let t = std::time::Instant::now();
                for o in 0..KEYS {
                    std::hint::black_box(capability::capability_key(suite, &wk, &args(o % 64), 0));
                }
                derive.push(t.elapsed().as_nanos() as f64 / KEYS as f64);
                let t = std::time::Instant::now();
                for o in 0..KEYS {
                    std::hint::black_box(c.capability_key(suite, &wk, &args(o % 64), 0));
                }
                hit.push(t.elapsed().as_nanos() as f64 / KEYS as f64);
            }
            derive.sort_by(f64::total_cmp);
            hit.sort_by(f64::total_cmp);
            println!(
                "{}: derive {:.0} ns, cache hit {:.0} ns per key",
                suite.name(),
                derive[5],
                hit[5]
            );
        }
    }

    #[test]
    fn entries_go_in_the_order_of_their_last_use() {
        let c = CapKeyCache::new(5);
        let wk = Key::generate();
        for o in [1, 2, 3, 1, 4, 5, 6, 2, 7, 3, 3] {
            c.capability_key(Suite::Blake3, &wk, &args(o), 0);
        }
        let lru = c.lru.lock();
        let objects: Vec<u8> = lru.iter().rev().map(|(slot, _)| slot.args[10]).collect();
        assert_eq!(objects, [3, 7, 2, 6, 5], "newest first");
    }
}
