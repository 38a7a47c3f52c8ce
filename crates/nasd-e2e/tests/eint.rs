//! Seed 003's three constructions end to end over the in-memory store: round trips against a
//! plain model, the attacks a dishonest drive can mount (each detected, each checked to pass
//! before the tampering), key versions, and the metrics' sanity.

use nasd_e2e::counters::CounterIntervals;
use nasd_e2e::eint::{BlockCheck, EintError, EintFile};
use nasd_e2e::keys::{FileId, FileKey};
use nasd_e2e::record::{Scheme, TrustedRecord};
use nasd_e2e::store::{MemStore, MetaKey};
use proptest::prelude::*;

const B: usize = 4096;
const FILE: FileId = FileId([0x11; 16]);
const OTHER_FILE: FileId = FileId([0x22; 16]);

fn key() -> FileKey {
    FileKey::from_bytes([0x5a; 32])
}

fn prng(seed: u64, len: usize) -> Vec<u8> {
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    let mut out = vec![0u8; len];
    h.finalize_xof().fill(&mut out);
    out
}

/// Low-entropy, compressible content (words), unique per seed.
fn text(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "drive",
        "object",
        "capability ",
        "manager",
        "client ",
        "block",
        "tree",
        "leaf",
        "the ",
        "of ",
        "nasd\n",
        "seed ",
    ];
    let r = prng(seed, len);
    let mut out = format!("seed {seed}: ").into_bytes();
    let mut k = 0;
    while out.len() < len {
        out.extend_from_slice(WORDS[(r[k % len] % 12) as usize].as_bytes());
        k += 1;
    }
    out.truncate(len);
    out
}

/// Content of block `i` of the test file: text at even blocks, random at odd ones, and a short
/// text tail at block 5.
fn content(i: u64, version: u64) -> Vec<u8> {
    let seed = i * 100 + version;
    match i {
        5 => text(seed, 1000),
        i if i % 2 == 0 => text(seed, B),
        _ => prng(seed, B),
    }
}

struct World {
    writer: EintFile,
    store: MemStore,
}

impl World {
    fn new(scheme: Scheme, file: FileId) -> World {
        let mut writer = EintFile::create(file, scheme, B as u32, 1, &key(), 1024).unwrap();
        let mut store = MemStore::new();
        for i in 0..6 {
            writer.write_block(&mut store, i, &content(i, 0)).unwrap();
        }
        World { writer, store }
    }

    /// A fresh reader (nothing cached) holding the writer's current record.
    fn reader(&self) -> EintFile {
        reader_for(self.writer.file_id(), *self.writer.record())
    }

    fn read(&self, i: u64) -> Result<Vec<u8>, EintError> {
        self.reader().read_block(&self.store, i).map(|(b, _)| b)
    }
}

fn reader_for(file: FileId, record: TrustedRecord) -> EintFile {
    let mut r = EintFile::open(file, record, 0).unwrap();
    r.add_key(1, &key());
    r
}

/// Which block an attack targets: a low-entropy one (2) or a random one (3).
const TEXT_BLOCK: u64 = 2;
const RANDOM_BLOCK: u64 = 3;
const TAIL_BLOCK: u64 = 5;

fn expect_detected(scheme: Scheme, target: u64, what: &str, tamper: impl Fn(&mut World)) {
    let mut w = World::new(scheme, FILE);
    assert_eq!(
        w.read(target).unwrap(),
        content(target, 0),
        "{what}: the untampered read passes"
    );
    tamper(&mut w);
    match w.read(target) {
        Err(e) => assert!(
            e.is_integrity_violation(),
            "{} {what} on block {target}: {e:?} is not an integrity violation",
            scheme.name()
        ),
        Ok(b) => panic!(
            "{} {what} on block {target} went undetected (got {} bytes, original {})",
            scheme.name(),
            b.len(),
            b == content(target, 0)
        ),
    }
}

fn for_all(what: &str, targets: &[u64], tamper: impl Fn(&mut World, u64)) {
    for scheme in Scheme::ALL {
        for &t in targets {
            expect_detected(scheme, t, what, |w| tamper(w, t));
        }
    }
}

#[test]
fn flipped_ciphertext_bit() {
    for bit in [0usize, 7, 8 * 100 + 3, 8 * 4095] {
        for_all("bit flip", &[TEXT_BLOCK, RANDOM_BLOCK], |w, t| {
            w.store.blocks.get_mut(&t).unwrap()[bit / 8] ^= 1 << (bit % 8);
        });
    }
    for_all("tail bit flip", &[TAIL_BLOCK], |w, t| {
        w.store.blocks.get_mut(&t).unwrap()[999] ^= 0x80;
    });
}

#[test]
fn block_swapped_between_positions() {
    for_all("swap", &[TEXT_BLOCK, RANDOM_BLOCK], |w, t| {
        let other = t + 2; // same kind of content
        let c = w.store.blocks[&other].clone();
        w.store.blocks.insert(t, c);
    });
    // Swapping the leaves along with the blocks does not help.
    for_all("swap with leaves", &[TEXT_BLOCK, RANDOM_BLOCK], |w, t| {
        let other = t - 2;
        let (a, b) = (w.store.blocks[&t].clone(), w.store.blocks[&other].clone());
        w.store.blocks.insert(t, b);
        w.store.blocks.insert(other, a);
        let la = MetaKey::Node { level: 0, index: t };
        let lb = MetaKey::Node {
            level: 0,
            index: other,
        };
        let (na, nb) = (
            w.store.meta.get(&la).cloned(),
            w.store.meta.get(&lb).cloned(),
        );
        for (k, v) in [(la, nb), (lb, na)] {
            match v {
                Some(v) => w.store.meta.insert(k, v),
                None => w.store.meta.remove(&k),
            };
        }
    });
}

#[test]
fn block_swapped_between_files() {
    // The other file shares the key (B.1 allows files with one access list to share one) and has
    // the same layout, so only the tweak's file id tells the blocks apart.
    for_all(
        "cross-file swap",
        &[TEXT_BLOCK, RANDOM_BLOCK, TAIL_BLOCK],
        |w, t| {
            let other = World::new(w.writer.record().scheme, OTHER_FILE);
            w.store.blocks.insert(t, other.store.blocks[&t].clone());
            if let Some(leaf) = other.store.meta.get(&MetaKey::Node { level: 0, index: t }) {
                w.store
                    .meta
                    .insert(MetaKey::Node { level: 0, index: t }, leaf.clone());
            }
        },
    );
}

/// The drive answers with the state before the latest write of block `t`: the block alone, the
/// block with its leaf and path, or everything (blocks and all metadata).
#[test]
fn rollback_to_an_older_version() {
    for scope in ["block", "block and tree", "whole store"] {
        for_all(scope, &[TEXT_BLOCK, RANDOM_BLOCK, TAIL_BLOCK], |w, t| {
            let before = w.store.clone();
            let len = content(t, 0).len();
            let newer = if t == TAIL_BLOCK {
                text(77, len)
            } else {
                content(t, 1)
            };
            w.writer.write_block(&mut w.store, t, &newer).unwrap();
            assert_eq!(w.read(t).unwrap(), newer);
            match scope {
                "block" => {
                    w.store.blocks.insert(t, before.blocks[&t].clone());
                }
                "block and tree" => {
                    w.store.blocks.insert(t, before.blocks[&t].clone());
                    w.store.meta.retain(|k, _| *k == MetaKey::Counters);
                    for (k, v) in &before.meta {
                        if *k != MetaKey::Counters {
                            w.store.meta.insert(*k, v.clone());
                        }
                    }
                }
                _ => w.store = before,
            }
        });
    }
}

#[test]
fn counter_rolled_back() {
    for_all("counter rollback", &[TEXT_BLOCK, RANDOM_BLOCK], |w, t| {
        let old_counters = w.store.meta[&MetaKey::Counters].clone();
        let old_block = w.store.blocks[&t].clone();
        w.writer
            .write_block(&mut w.store, t, &content(t, 1))
            .unwrap();
        // The old block with the old counters: consistent with each other, not with the record.
        w.store.blocks.insert(t, old_block);
        w.store.meta.insert(MetaKey::Counters, old_counters);
    });
    for_all("counter decremented", &[TEXT_BLOCK], |w, _| {
        let mut c = CounterIntervals::decode(&w.store.meta[&MetaKey::Counters]).unwrap();
        // Rebuild the same shape with block 0's counter lowered by writing fewer times.
        let blocks = c.blocks();
        c = CounterIntervals::new();
        for i in 0..blocks {
            c.inc(i, 1);
        }
        c.inc(0, 1);
        w.store.meta.insert(MetaKey::Counters, c.encode());
    });
}

#[test]
fn truncated_or_extended_file() {
    for_all("last block removed", &[TAIL_BLOCK], |w, t| {
        w.store.blocks.remove(&t);
    });
    for_all("block shortened", &[TEXT_BLOCK, TAIL_BLOCK], |w, t| {
        w.store.blocks.get_mut(&t).unwrap().pop();
    });
    for_all("tail extended", &[TAIL_BLOCK], |w, t| {
        w.store.blocks.get_mut(&t).unwrap().push(0);
    });
    for_all("counters claim fewer blocks", &[TEXT_BLOCK], |w, _| {
        let mut c = CounterIntervals::decode(&w.store.meta[&MetaKey::Counters]).unwrap();
        c.truncate(3);
        w.store.meta.insert(MetaKey::Counters, c.encode());
    });
    // A block appended by the drive is never read: the record says where the file ends.
    for scheme in Scheme::ALL {
        let mut w = World::new(scheme, FILE);
        let extra = w.store.blocks[&1].clone();
        w.store.blocks.insert(6, extra);
        assert!(matches!(
            w.read(6),
            Err(EintError::OutOfRange {
                index: 6,
                blocks: 6
            })
        ));
        assert_eq!(w.writer.record().length, 5 * B as u64 + 1000);
    }
}

#[test]
fn side_metadata_tampered() {
    // Random-looking blocks depend on the tree; every block depends on the counters. A sibling
    // on the path is flipped where stored and forged where the tree says it is empty.
    for level in 0..3u8 {
        for scheme in Scheme::ALL {
            // COMP-EINT's compressed tail carries a tag and no leaf: the tree does not vouch
            // for it, so tampering the tree cannot touch it.
            let targets: &[u64] = if scheme == Scheme::Comp {
                &[RANDOM_BLOCK]
            } else {
                &[RANDOM_BLOCK, TAIL_BLOCK]
            };
            for &t in targets {
                expect_detected(scheme, t, "sibling tampered", |w| {
                    let k = MetaKey::Node {
                        level,
                        index: (t >> level) ^ 1,
                    };
                    match w.store.meta.get_mut(&k) {
                        Some(v) => v[0] ^= 1,
                        None => {
                            w.store.meta.insert(k, vec![9; 32]);
                        }
                    }
                });
                expect_detected(
                    scheme,
                    t,
                    "block replaced, its leaf and path deleted",
                    |w| {
                        let leaf = MetaKey::Node { level: 0, index: t };
                        assert!(w.store.meta.remove(&leaf).is_some(), "the leaf was stored");
                        // Deleting a leaf changes nothing the reader uses unless the path goes
                        // through it; delete the path too, as a drive hiding the block would.
                        for l in 1..=3u8 {
                            w.store.meta.remove(&MetaKey::Node {
                                level: l,
                                index: t >> l,
                            });
                        }
                        w.store.blocks.insert(t, vec![0; w.store.blocks[&t].len()]);
                    },
                );
            }
        }
    }
    for_all("counters flipped", &[TEXT_BLOCK, RANDOM_BLOCK], |w, _| {
        w.store.meta.get_mut(&MetaKey::Counters).unwrap()[6] ^= 1;
    });
    for_all("counters deleted", &[TEXT_BLOCK], |w, _| {
        w.store.meta.remove(&MetaKey::Counters);
    });
    // MT-EINT: even a low-entropy block's leaf is checked.
    expect_detected(Scheme::Mt, TEXT_BLOCK, "sibling flipped", |w| {
        let k = MetaKey::Node {
            level: 0,
            index: TEXT_BLOCK ^ 1,
        };
        w.store.meta.get_mut(&k).unwrap()[31] ^= 1;
    });
}

#[test]
fn a_write_refuses_forged_siblings() {
    for scheme in Scheme::ALL {
        let mut w = World::new(scheme, FILE);
        // A writer that has cached nothing fetches block 3's level-1 sibling (blocks 0–1).
        let mut writer = reader_for(FILE, *w.writer.record());
        let k = MetaKey::Node { level: 1, index: 0 };
        w.store.meta.insert(k, vec![7; 32]);
        let r = writer.write_block(&mut w.store, RANDOM_BLOCK, &prng(9, B));
        assert!(
            matches!(r, Err(EintError::MerklePath { index: 3 })),
            "{}: {r:?}",
            scheme.name()
        );
    }
}

#[test]
fn a_tampered_stored_leaf_stops_the_next_write_of_its_block() {
    for scheme in Scheme::ALL {
        let mut w = World::new(scheme, FILE);
        let mut writer = reader_for(FILE, *w.writer.record());
        let k = MetaKey::Node {
            level: 0,
            index: RANDOM_BLOCK,
        };
        w.store.meta.get_mut(&k).unwrap()[0] ^= 1;
        let r = writer.write_block(&mut w.store, RANDOM_BLOCK, &text(1, B));
        assert!(
            matches!(r, Err(EintError::MerklePath { index: 3 })),
            "{r:?}"
        );
    }
}

#[test]
fn a_cached_reader_still_checks_blocks() {
    for scheme in Scheme::ALL {
        let w = World::new(scheme, FILE);
        let mut r = w.reader();
        let mut r_cache = EintFile::open(FILE, *w.writer.record(), 4096).unwrap();
        r_cache.add_key(1, &key());
        for i in 0..6 {
            assert_eq!(r.read_block(&w.store, i).unwrap().0, content(i, 0));
            assert_eq!(r_cache.read_block(&w.store, i).unwrap().0, content(i, 0));
        }
        let mut bad = w.store.clone();
        bad.blocks.get_mut(&RANDOM_BLOCK).unwrap()[10] ^= 4;
        assert!(r_cache.read_block(&bad, RANDOM_BLOCK).is_err());
        bad.blocks.get_mut(&TEXT_BLOCK).unwrap()[10] ^= 4;
        assert!(r_cache.read_block(&bad, TEXT_BLOCK).is_err());
    }
}

#[test]
fn key_versions() {
    for scheme in Scheme::ALL {
        let mut w = World::new(scheme, FILE);
        let k2 = FileKey::from_bytes([0x77; 32]);
        w.writer.rotate_key(2, &k2);
        w.writer
            .write_block(&mut w.store, 1, &content(1, 5))
            .unwrap();
        assert_eq!(w.writer.record().key_version, 2);
        // A reader holding both versions reads everything.
        let mut both = w.reader();
        both.add_key(2, &k2);
        assert_eq!(both.read_block(&w.store, 1).unwrap().0, content(1, 5));
        assert_eq!(both.read_block(&w.store, 0).unwrap().0, content(0, 0));
        // One holding only version 1 gets a typed error for the rewritten block.
        let mut old = w.reader();
        assert!(matches!(
            old.read_block(&w.store, 1),
            Err(EintError::MissingKey { key_version: 2 })
        ));
        // A wrong key under the right version number is caught as tampering would be.
        let mut wrong = EintFile::open(FILE, *w.writer.record(), 0).unwrap();
        wrong.add_key(1, &FileKey::from_bytes([0x01; 32]));
        wrong.add_key(2, &k2);
        for i in [0u64, 3, 5] {
            match wrong.read_block(&w.store, i) {
                Err(e) => assert!(e.is_integrity_violation(), "{e:?}"),
                Ok(_) => panic!("{}: block {i} read under a wrong key", scheme.name()),
            }
        }
        // Writing needs the current version's key.
        let mut no_key = EintFile::open(FILE, *w.writer.record(), 0).unwrap();
        no_key.add_key(1, &key());
        assert!(matches!(
            no_key.write_block(&mut w.store, 0, &content(0, 9)),
            Err(EintError::MissingKey { key_version: 2 })
        ));
    }
}

#[test]
fn writes_keep_the_file_shape() {
    let mut w = World::new(Scheme::Rand, FILE);
    let bad = |r: Result<_, EintError>| matches!(r, Err(EintError::BadWrite { .. }));
    assert!(
        bad(w.writer.write_block(&mut w.store, 1, &[1; 100])),
        "short middle block"
    );
    assert!(
        bad(w.writer.write_block(&mut w.store, 6, &[1; B])),
        "append after a short tail"
    );
    assert!(bad(w.writer.write_block(&mut w.store, 8, &[1; B])), "gap");
    assert!(
        bad(w.writer.write_block(&mut w.store, 5, &[])),
        "empty block"
    );
    assert!(
        bad(w.writer.write_block(&mut w.store, 5, &[1; B + 1])),
        "oversized block"
    );
    // Fill the tail, then append.
    w.writer.write_block(&mut w.store, 5, &text(1, B)).unwrap();
    w.writer.write_block(&mut w.store, 6, &text(2, 10)).unwrap();
    assert_eq!(w.writer.record().length, 6 * B as u64 + 10);
    assert_eq!(w.read(6).unwrap(), text(2, 10));
    // The tail can shrink.
    w.writer.write_block(&mut w.store, 6, b"x").unwrap();
    assert_eq!(w.read(6).unwrap(), b"x");
}

#[test]
fn checks_follow_the_scheme_and_content() {
    let cases = [
        (Scheme::Mt, TEXT_BLOCK, BlockCheck::MerkleLeaf),
        (Scheme::Mt, RANDOM_BLOCK, BlockCheck::MerkleLeaf),
        (Scheme::Rand, TEXT_BLOCK, BlockCheck::LowEntropy),
        (Scheme::Rand, RANDOM_BLOCK, BlockCheck::MerkleLeaf),
        (Scheme::Rand, TAIL_BLOCK, BlockCheck::MerkleLeaf),
        (Scheme::Comp, TEXT_BLOCK, BlockCheck::CompressedTag),
        (Scheme::Comp, RANDOM_BLOCK, BlockCheck::MerkleLeaf),
        (Scheme::Comp, TAIL_BLOCK, BlockCheck::CompressedTag),
    ];
    for (scheme, i, check) in cases {
        let w = World::new(scheme, FILE);
        let (b, m) = w.reader().read_block(&w.store, i).unwrap();
        assert_eq!(b, content(i, 0));
        assert_eq!(m.check, check, "{} block {i}", scheme.name());
    }
}

#[test]
fn metrics_show_the_seeds_trade_offs() {
    // A low-entropy file: RAND and COMP keep (almost) no tree, MT keeps one per block.
    let blocks = 64u64;
    let mut storage = vec![];
    let mut read_bw = vec![];
    for scheme in Scheme::ALL {
        let mut f = EintFile::create(FILE, scheme, B as u32, 1, &key(), 0).unwrap();
        let mut s = MemStore::new();
        for i in 0..blocks {
            f.write_block(&mut s, i, &text(i, B)).unwrap();
        }
        storage.push(f.storage(&s).unwrap().untrusted_integrity_bytes);
        assert_eq!(f.storage(&s).unwrap().trusted_bytes, 90);
        let mut r = reader_for(FILE, *f.record());
        let mut total = 0;
        for i in 0..blocks {
            total += r.read_block(&s, i).unwrap().1.integrity_bytes();
        }
        read_bw.push(total);
    }
    let (mt, rand, comp) = (storage[0], storage[1], storage[2]);
    // MT: 2·64 − 1 nodes of 32 bytes plus one interval.
    assert_eq!(mt, (2 * blocks - 1) * 32 + 5 + 28);
    assert_eq!(rand, 5 + 28, "no leaves for low-entropy blocks");
    assert_eq!(comp, 5 + 28);
    // Reads: RAND/COMP fetch the counters once (33 bytes), MT fetches 6 siblings per block.
    assert_eq!(read_bw[1], 33);
    assert_eq!(read_bw[2], 33);
    assert_eq!(read_bw[0], 33 + blocks * 6 * 32);
}

#[test]
fn the_node_cache_cuts_integrity_bandwidth() {
    let blocks = 64u64;
    let mut f = EintFile::create(FILE, Scheme::Mt, B as u32, 1, &key(), 0).unwrap();
    let mut s = MemStore::new();
    for i in 0..blocks {
        f.write_block(&mut s, i, &prng(i, B)).unwrap();
    }
    let mut last = u64::MAX;
    for cache in [0usize, 1024, 2048, 4096] {
        let mut r = EintFile::open(FILE, *f.record(), cache).unwrap();
        r.add_key(1, &key());
        let bw: u64 = (0..blocks)
            .map(|i| r.read_block(&s, i).unwrap().1.integrity_bytes())
            .sum();
        assert!(bw < last || cache == 0, "cache {cache}: {bw} vs {last}");
        last = bw;
    }
}

#[derive(Clone, Debug)]
enum Content {
    Text,
    Random,
    Zeros,
}

fn make(c: &Content, seed: u64, len: usize) -> Vec<u8> {
    match c {
        Content::Text => text(seed, len),
        Content::Random => prng(seed, len),
        Content::Zeros => vec![0; len],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any sequence of legal writes reads back as a plain vector of blocks says, through the
    /// writer and through a fresh reader, under every scheme and cache size.
    #[test]
    fn reads_match_a_plain_model(
        scheme in prop_oneof![Just(Scheme::Mt), Just(Scheme::Rand), Just(Scheme::Comp)],
        cache in prop_oneof![Just(0usize), Just(1024), Just(4096)],
        ops in proptest::collection::vec(
            (0u64..12, prop_oneof![Just(Content::Text), Just(Content::Random), Just(Content::Zeros)], 1usize..=1024, any::<bool>()),
            1..40),
    ) {
        const BB: usize = 1024;
        let mut f = EintFile::create(FILE, scheme, BB as u32, 1, &key(), cache).unwrap();
        let mut s = MemStore::new();
        let mut model: Vec<Vec<u8>> = Vec::new();
        for (n, (i, c, len, whole)) in ops.into_iter().enumerate() {
            let i = i.min(model.len() as u64);
            let tail_whole = model.last().is_none_or(|b| b.len() == BB);
            let last = i + 1 >= model.len() as u64;
            let len = if whole || !last { BB } else { len };
            if i == model.len() as u64 && !tail_whole {
                continue;
            }
            let data = make(&c, n as u64, len);
            f.write_block(&mut s, i, &data).unwrap();
            if i == model.len() as u64 { model.push(data) } else { model[i as usize] = data }
            let j = (n as u64 * 7) % model.len() as u64;
            prop_assert_eq!(&f.read_block(&s, j).unwrap().0, &model[j as usize]);
        }
        let mut r = EintFile::open(FILE, *f.record(), cache).unwrap();
        r.add_key(1, &key());
        for (i, b) in model.iter().enumerate() {
            prop_assert_eq!(&r.read_block(&s, i as u64).unwrap().0, b);
        }
        prop_assert_eq!(f.record().length, model.iter().map(|b| b.len() as u64).sum::<u64>());
    }
}
