//! The `tree` scheme: a Merkle tree over 1 KiB chunks with BLAKE3's shape and, in the BLAKE3
//! suite, BLAKE3's own nodes (chunk chaining values with the chunk index as counter, parent nodes
//! by `merge_subtrees_non_root`), so a verifier can hash any aligned run of chunks in one SIMD
//! pass instead of chunk by chunk.
//!
//! Shape: `node(lo, hi)` over chunks `[lo, hi)` is the leaf when `hi - lo == 1`, otherwise
//! `merge(node(lo, s), node(s, hi))` with `s = lo + ` the largest power of two below `hi - lo`
//! (left-balanced, as BLAKE3). The object's top is `node(0, n)` over its `n = ceil(size / 1 KiB)`
//! chunks, and what a reply MAC covers is `size || top`, so the size is bound too.
//!
//! Holes: a full chunk of zeros has the constant leaf `Z0`, and an aligned all-zero subtree of
//! `2^k` chunks the constant `Zk`, so sparse objects cost nothing to hash and a drive need store
//! nothing for a hole. A writer's zero chunk gets the same constant: zero runs read back as holes.
//!
//! A drive answers a read with the chunk-aligned range and the sibling nodes on the paths from
//! the range to the top ([`prove`]); it hashes no object data. The client recomputes the top from
//! the data and the proof ([`verify_range`]).
//!
//! A drive never sends bytes outside the capability's region, so when the region does not cover
//! the widened range the returned range is cut at the region's edge: [`range_parts`] splits it
//! into chunks held whole (proved through the tree as above) and at most two cut edge chunks,
//! whose pieces the drive hashes ([`partial`], after checking the whole stored chunk against its
//! leaf) into the MAC-covered material, as HierMAC does for partial blocks.

use super::CHUNK_BYTES;
use crate::primitives::{hash_data, Digest, Hasher};
use crate::Cost;
use blake3::hazmat::{merge_subtrees_non_root, HasherExt, Mode};
use nasd_proto::Suite;
use std::sync::OnceLock;

/// Most levels a tree can have (2^64 bytes / 1 KiB chunks).
pub const LEVELS_MAX: usize = 55;

fn is_zero_chunk(c: &[u8]) -> bool {
    // The first byte settles it for almost every chunk of real data; the rest is one
    // vectorized pass.
    c.len() as u64 == CHUNK_BYTES && c[0] == 0 && c.iter().fold(0u8, |a, &b| a | b) == 0
}

/// The leaf of chunk `index`: its BLAKE3 chaining value with counter `index`
/// (SHA-256 suite: `H(0x00 || index || chunk)`), or `Z0` for a full zero chunk.
pub fn leaf(suite: Suite, index: u64, chunk: &[u8], cost: &mut Cost) -> Digest {
    debug_assert!(chunk.len() as u64 <= CHUNK_BYTES);
    if is_zero_chunk(chunk) {
        return zero(suite, 0);
    }
    match suite {
        Suite::Blake3 => {
            cost.data(chunk.len(), chunk.len());
            let mut h = blake3::Hasher::new();
            h.set_input_offset(index * CHUNK_BYTES);
            h.update(chunk);
            h.finalize_non_root()
        }
        Suite::Sha256 => {
            let mut d = [0u8; 9];
            d[1..].copy_from_slice(&index.to_le_bytes());
            hash_data(suite, &d, chunk, cost)
        }
    }
}

/// BLAKE3's IV (the key words of an unkeyed hash; BLAKE3 spec §2.2, the SHA-256 IV).
const BLAKE3_IV: [u32; 8] = [
    0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19,
];
/// BLAKE3's `CHUNK_START` and `CHUNK_END` domain flags (BLAKE3 spec §2.1, Table 3).
const BLAKE3_CHUNK_START: u8 = 1;
const BLAKE3_CHUNK_END: u8 = 2;

/// The leaves of the consecutive chunks of `data`, the first being chunk `first` (the last
/// may be short): [`leaf`] of each. Runs of full non-zero chunks of the BLAKE3 suite go
/// through BLAKE3's own multi-chunk kernel, which hashes 16 chunks at once with AVX-512 and
/// 8 with AVX2, where [`leaf`] hashes one chunk in one lane (about 5x slower per byte; a
/// writer computes a leaf per KiB it writes). The values are the same (tested against
/// [`leaf`]).
pub fn leaves(suite: Suite, first: u64, data: &[u8], cost: &mut Cost) -> Vec<Digest> {
    const C: usize = CHUNK_BYTES as usize;
    if suite != Suite::Blake3 {
        return data
            .chunks(C)
            .enumerate()
            .map(|(j, c)| leaf(suite, first + j as u64, c, cost))
            .collect();
    }
    let platform = blake3::platform::Platform::detect();
    let mut out: Vec<Digest> = Vec::with_capacity(data.len().div_ceil(C));
    let mut run: Vec<&[u8; C]> = Vec::with_capacity(data.len() / C);
    let mut run_first = first;
    let flush = |run: &mut Vec<&[u8; C]>, run_first: u64, out: &mut Vec<Digest>| {
        if run.is_empty() {
            return;
        }
        let at = out.len();
        out.resize(at + run.len(), [0; 32]);
        platform.hash_many(
            run,
            &BLAKE3_IV,
            run_first,
            blake3::IncrementCounter::Yes,
            0,
            BLAKE3_CHUNK_START,
            BLAKE3_CHUNK_END,
            out[at..].as_flattened_mut(),
        );
        run.clear();
    };
    for (j, c) in data.chunks(C).enumerate() {
        let index = first + j as u64;
        match <&[u8; C]>::try_from(c) {
            Ok(full) if !is_zero_chunk(c) => {
                if run.is_empty() {
                    run_first = index;
                }
                cost.data(C, C);
                run.push(full);
            }
            _ => {
                flush(&mut run, run_first, &mut out);
                out.push(leaf(suite, index, c, cost));
            }
        }
    }
    flush(&mut run, run_first, &mut out);
    out
}

/// A parent node (BLAKE3: `merge_subtrees_non_root`; SHA-256: `H(0x01 || l || r)`).
pub fn merge(suite: Suite, l: &Digest, r: &Digest) -> Digest {
    match suite {
        Suite::Blake3 => merge_subtrees_non_root(l, r, Mode::Hash),
        Suite::Sha256 => {
            let mut h = Hasher::new(suite);
            h.update(&[1]);
            h.update(l);
            h.update(r);
            h.finalize()
        }
    }
}

/// Write-form value of a piece that does not start its chunk.
pub fn partial(suite: Suite, index: u64, within: u64, bytes: &[u8], cost: &mut Cost) -> Digest {
    let mut d = [0u8; 17];
    d[0] = 2;
    d[1..9].copy_from_slice(&index.to_le_bytes());
    d[9..].copy_from_slice(&within.to_le_bytes());
    hash_data(suite, &d, bytes, cost)
}

/// `Zk`: the node of an aligned all-zero subtree of `2^level` chunks.
pub fn zero(suite: Suite, level: u32) -> Digest {
    static TABLES: [OnceLock<Vec<Digest>>; 2] = [OnceLock::new(), OnceLock::new()];
    let t = TABLES[(suite as usize) - 1].get_or_init(|| {
        let z0 = match suite {
            Suite::Blake3 => blake3::derive_key("nasd zero chunk v1", b""),
            Suite::Sha256 => {
                let mut h = Hasher::new(suite);
                h.update(b"nasd zero chunk v1");
                h.finalize()
            }
        };
        let mut v = vec![z0];
        for _ in 1..LEVELS_MAX {
            let p = *v.last().unwrap();
            v.push(merge(suite, &p, &p));
        }
        v
    });
    t[level as usize]
}

/// The top of an empty object.
pub fn empty_top(suite: Suite) -> Digest {
    match suite {
        Suite::Blake3 => blake3::derive_key("nasd empty tree v1", b""),
        Suite::Sha256 => {
            let mut h = Hasher::new(suite);
            h.update(b"nasd empty tree v1");
            h.finalize()
        }
    }
}

/// What a reply MAC covers for a `tree` object: `size || top`.
pub fn root_material(size: u64, top: &Digest) -> [u8; 40] {
    let mut m = [0u8; 40];
    m[..8].copy_from_slice(&size.to_le_bytes());
    m[8..].copy_from_slice(top);
    m
}

/// Chunks in an object of `size` bytes.
pub fn chunk_count(size: u64) -> u64 {
    size.div_ceil(CHUNK_BYTES)
}

/// A piece of one chunk: the part of a cut edge chunk that a read returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPiece {
    pub chunk: u64,
    /// Byte offset in the object.
    pub offset: u64,
    pub len: u64,
}

impl ChunkPiece {
    /// Offset of the piece inside its chunk.
    pub fn within(&self) -> u64 {
        self.offset - self.chunk * CHUNK_BYTES
    }
}

/// How a returned range `[offset, offset + len)` of an object of `size` bytes splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeParts {
    /// Chunks held whole, `[lo, hi)`; empty when `lo == hi`.
    pub whole: (u64, u64),
    /// The cut head chunk's piece, then the cut tail chunk's (a range inside one chunk that is
    /// cut is one head piece).
    pub cut: [Option<ChunkPiece>; 2],
}

/// Splits a non-empty returned range that lies inside the object into whole and cut chunks.
/// A chunk is whole when the range holds all of its bytes (the last chunk ends at `size`).
pub fn range_parts(offset: u64, len: u64, size: u64) -> RangeParts {
    debug_assert!(len > 0 && offset + len <= size);
    let end = offset + len;
    let c0 = offset / CHUNK_BYTES;
    let c1 = end.div_ceil(CHUNK_BYTES);
    let chunk_end = |c: u64| ((c + 1) * CHUNK_BYTES).min(size);
    let piece = |chunk: u64, a: u64, b: u64| ChunkPiece {
        chunk,
        offset: a,
        len: b - a,
    };
    let head_cut = offset != c0 * CHUNK_BYTES;
    let tail_cut = end != chunk_end(c1 - 1);
    if c1 - c0 == 1 {
        return if head_cut || tail_cut {
            RangeParts {
                whole: (c1, c1),
                cut: [Some(piece(c0, offset, end)), None],
            }
        } else {
            RangeParts {
                whole: (c0, c1),
                cut: [None, None],
            }
        };
    }
    RangeParts {
        whole: (c0 + head_cut as u64, c1 - tail_cut as u64),
        cut: [
            head_cut.then(|| piece(c0, offset, chunk_end(c0))),
            tail_cut.then(|| piece(c1 - 1, (c1 - 1) * CHUNK_BYTES, end)),
        ],
    }
}

/// Where `node(lo, hi)` splits.
pub fn split_point(lo: u64, hi: u64) -> u64 {
    debug_assert!(hi - lo >= 2);
    let n = hi - lo;
    lo + (1u64 << (63 - (n - 1).leading_zeros()))
}

/// A source of *complete* nodes: aligned subtrees of exactly `2^level` chunks, all inside the
/// object. The drive implements it from stored leaves and stored upper nodes.
pub trait CompleteNodes {
    type Error;
    fn complete(&mut self, level: u32, index: u64) -> Result<Digest, Self::Error>;
}

/// Any node of the tree, built from complete nodes (right-edge nodes are merged on the fly).
pub fn node<S: CompleteNodes>(
    suite: Suite,
    src: &mut S,
    lo: u64,
    hi: u64,
) -> Result<Digest, S::Error> {
    let n = hi - lo;
    if n.is_power_of_two() {
        return src.complete(n.trailing_zeros(), lo >> n.trailing_zeros());
    }
    let s = split_point(lo, hi);
    let l = node(suite, src, lo, s)?;
    let r = node(suite, src, s, hi)?;
    Ok(merge(suite, &l, &r))
}

/// The top of an object of `n` chunks.
pub fn top<S: CompleteNodes>(suite: Suite, src: &mut S, n: u64) -> Result<Digest, S::Error> {
    if n == 0 {
        return Ok(empty_top(suite));
    }
    node(suite, src, 0, n)
}

/// The sibling nodes a verifier of chunks `[c0, c1)` of an `n`-chunk object needs, in the
/// order [`verify_range`] consumes them.
pub fn prove<S: CompleteNodes>(
    suite: Suite,
    src: &mut S,
    n: u64,
    c0: u64,
    c1: u64,
) -> Result<Vec<Digest>, S::Error> {
    fn walk<S: CompleteNodes>(
        suite: Suite,
        src: &mut S,
        lo: u64,
        hi: u64,
        c0: u64,
        c1: u64,
        out: &mut Vec<Digest>,
    ) -> Result<(), S::Error> {
        if hi <= c0 || lo >= c1 {
            out.push(node(suite, src, lo, hi)?);
        } else if !(c0 <= lo && hi <= c1) {
            let s = split_point(lo, hi);
            walk(suite, src, lo, s, c0, c1, out)?;
            walk(suite, src, s, hi, c0, c1, out)?;
        }
        Ok(())
    }
    let mut out = vec![];
    if n > 0 && c0 < c1 {
        walk(suite, src, 0, n, c0, c1, &mut out)?;
    }
    Ok(out)
}

/// Why a range did not verify.
#[derive(Debug, PartialEq, Eq)]
pub enum ProofError {
    Shape,
    Short,
    Long,
}

/// Recomputes the top of an `n`-chunk object from chunks `[c0, c1)` (`data`, clipped at the
/// object's end) and the proof. The caller compares the result with the MAC-covered top.
pub fn verify_range(
    suite: Suite,
    n: u64,
    c0: u64,
    c1: u64,
    data: &[u8],
    proof: &[Digest],
    cost: &mut Cost,
) -> Result<Digest, ProofError> {
    if !(c0 < c1 && c1 <= n) {
        return Err(ProofError::Shape);
    }
    let want = ((c1 - c0) * CHUNK_BYTES) as usize;
    if data.len() > want || data.len() + CHUNK_BYTES as usize <= want {
        return Err(ProofError::Shape);
    }
    // zeros[k] = number of full zero chunks among the first k chunks of `data`.
    let mut zeros = Vec::with_capacity((c1 - c0) as usize + 1);
    zeros.push(0u32);
    for c in data.chunks(CHUNK_BYTES as usize) {
        zeros.push(zeros.last().unwrap() + is_zero_chunk(c) as u32);
    }
    struct V<'a> {
        suite: Suite,
        c0: u64,
        c1: u64,
        data: &'a [u8],
        zeros: Vec<u32>,
        proof: &'a [Digest],
        next: usize,
    }
    impl V<'_> {
        fn inside(&self, lo: u64, hi: u64, cost: &mut Cost) -> Digest {
            let a = ((lo - self.c0) * CHUNK_BYTES) as usize;
            let b = (((hi - self.c0) * CHUNK_BYTES) as usize).min(self.data.len());
            let bytes = &self.data[a..b];
            let no_zero =
                self.zeros[(hi - self.c0) as usize] == self.zeros[(lo - self.c0) as usize];
            if self.suite == Suite::Blake3 && no_zero {
                cost.data(bytes.len(), bytes.len());
                let mut h = blake3::Hasher::new();
                h.set_input_offset(lo * CHUNK_BYTES);
                // One thread: BLAKE3's SIMD already hashes 16 chunks at once here, and measured
                // with the drive on the same 2 cores, `update_rayon` made 1 MiB reads slower.
                h.update(bytes);
                return h.finalize_non_root();
            }
            if hi - lo == 1 {
                return leaf(self.suite, lo, bytes, cost);
            }
            let s = split_point(lo, hi);
            let l = self.inside(lo, s, cost);
            let r = self.inside(s, hi, cost);
            merge(self.suite, &l, &r)
        }
        fn walk(&mut self, lo: u64, hi: u64, cost: &mut Cost) -> Result<Digest, ProofError> {
            if hi <= self.c0 || lo >= self.c1 {
                let d = *self.proof.get(self.next).ok_or(ProofError::Short)?;
                self.next += 1;
                return Ok(d);
            }
            if self.c0 <= lo && hi <= self.c1 {
                return Ok(self.inside(lo, hi, cost));
            }
            let s = split_point(lo, hi);
            let l = self.walk(lo, s, cost)?;
            let r = self.walk(s, hi, cost)?;
            Ok(merge(self.suite, &l, &r))
        }
    }
    let mut v = V {
        suite,
        c0,
        c1,
        data,
        zeros,
        proof,
        next: 0,
    };
    let top = v.walk(0, n, cost)?;
    if v.next != proof.len() {
        return Err(ProofError::Long);
    }
    Ok(top)
}

/// Complete nodes computed from a full in-memory leaf list: the naive oracle for tests and the
/// way a drive builds small subtrees.
pub struct LeafNodes<'a> {
    pub suite: Suite,
    pub leaves: &'a [Digest],
}

impl CompleteNodes for LeafNodes<'_> {
    type Error = std::convert::Infallible;
    fn complete(&mut self, level: u32, index: u64) -> Result<Digest, Self::Error> {
        let lo = (index << level) as usize;
        let hi = lo + (1usize << level);
        Ok(subtree(self.suite, &self.leaves[lo..hi]))
    }
}

/// The node over a power-of-two run of leaves.
pub fn subtree(suite: Suite, leaves: &[Digest]) -> Digest {
    debug_assert!(leaves.len().is_power_of_two());
    let mut level: Vec<Digest> = leaves.to_vec();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| merge(suite, &p[0], &p[1]))
            .collect();
    }
    level[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves_of(suite: Suite, data: &[u8]) -> Vec<Digest> {
        let mut c = Cost::default();
        data.chunks(CHUNK_BYTES as usize)
            .enumerate()
            .map(|(i, ch)| leaf(suite, i as u64, ch, &mut c))
            .collect()
    }

    proptest::proptest! {
        /// The batched leaves equal [`leaf`] chunk by chunk, with zero chunks, a short last
        /// chunk and counters past 32 bits among the cases.
        #[test]
        fn batched_leaves_equal_leaf_by_leaf(
            seed in proptest::prelude::any::<u64>(),
            chunks in 0usize..70,
            tail in 0usize..1024,
            zero_mask in proptest::prelude::any::<u64>(),
            high in proptest::prelude::any::<bool>(),
        ) {
            let c = CHUNK_BYTES as usize;
            let mut x = seed | 1;
            let mut data: Vec<u8> = (0..chunks * c + tail)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            for k in 0..chunks {
                if zero_mask >> (k % 64) & 1 == 1 && k % 3 == 0 {
                    data[k * c..(k + 1) * c].fill(0);
                }
            }
            let first = if high { (1u64 << 40) + 5 } else { seed % 1000 };
            for suite in [Suite::Blake3, Suite::Sha256] {
                let (mut c1, mut c2) = (Cost::default(), Cost::default());
                let batched = leaves(suite, first, &data, &mut c1);
                let one_by_one: Vec<Digest> = data
                    .chunks(c)
                    .enumerate()
                    .map(|(j, ch)| leaf(suite, first + j as u64, ch, &mut c2))
                    .collect();
                proptest::prop_assert_eq!(batched, one_by_one);
                proptest::prop_assert_eq!(c1.data_bytes, c2.data_bytes);
            }
        }
    }

    #[test]
    fn blake3_tree_equals_blake3_subtree_hash() {
        // With no zero chunks, our top is BLAKE3's own non-root subtree value of the whole input.
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8 + 1).collect();
        let l = leaves_of(Suite::Blake3, &data);
        let t = top(
            Suite::Blake3,
            &mut LeafNodes {
                suite: Suite::Blake3,
                leaves: &l,
            },
            l.len() as u64,
        )
        .unwrap();
        let mut h = blake3::Hasher::new();
        h.set_input_offset(0);
        h.update(&data);
        assert_eq!(t, h.finalize_non_root());
    }

    #[test]
    fn large_ranges_verify_on_all_cores_to_the_same_top() {
        let data: Vec<u8> = (0..600 * 1024u32).map(|i| (i % 251) as u8 + 1).collect();
        let l = leaves_of(Suite::Blake3, &data);
        let n = l.len() as u64;
        let mut src = LeafNodes {
            suite: Suite::Blake3,
            leaves: &l,
        };
        let t = top(Suite::Blake3, &mut src, n).unwrap();
        let mut c = Cost::default();
        assert_eq!(
            verify_range(Suite::Blake3, n, 0, n, &data, &[], &mut c),
            Ok(t)
        );
        let proof = prove(Suite::Blake3, &mut src, n, 32, 32 + 512).unwrap();
        let got = verify_range(
            Suite::Blake3,
            n,
            32,
            544,
            &data[32 * 1024..544 * 1024],
            &proof,
            &mut c,
        );
        assert_eq!(got, Ok(t));
    }

    /// `range_parts` against a byte-by-byte oracle: every byte of the range is in exactly one
    /// part, whole chunks are exactly the chunks the range holds completely, and cut pieces
    /// lie inside one chunk each.
    #[test]
    fn range_parts_cover_every_byte_once() {
        let c = CHUNK_BYTES;
        for size in [1u64, c - 1, c, c + 1, 3 * c, 3 * c + 7] {
            // Every position near a chunk boundary, and the object's end.
            let mut at: Vec<u64> = (0..=4u64)
                .flat_map(|k| [k * c, k * c + 1, (k * c).saturating_sub(1), k * c + 5])
                .chain([size, size - 1])
                .filter(|&x| x <= size)
                .collect();
            at.sort();
            at.dedup();
            for &offset in at.iter().filter(|&&x| x < size) {
                for &end in at.iter().filter(|&&x| x > offset) {
                    let p = range_parts(offset, end - offset, size);
                    let mut seen = vec![0u8; size as usize];
                    for ch in p.whole.0..p.whole.1 {
                        let (a, b) = (ch * c, ((ch + 1) * c).min(size));
                        assert!(
                            offset <= a && b <= end,
                            "whole chunk {ch} outside the range"
                        );
                        seen[a as usize..b as usize]
                            .iter_mut()
                            .for_each(|x| *x += 1);
                    }
                    for pc in p.cut.iter().flatten() {
                        assert_eq!(pc.offset / c, pc.chunk);
                        assert_eq!((pc.offset + pc.len - 1) / c, pc.chunk);
                        let whole = pc.within() == 0
                            && pc.offset + pc.len == ((pc.chunk + 1) * c).min(size);
                        assert!(!whole, "a whole chunk reported cut");
                        let (a, b) = (pc.offset as usize, (pc.offset + pc.len) as usize);
                        seen[a..b].iter_mut().for_each(|x| *x += 1);
                    }
                    for (i, &k) in seen.iter().enumerate() {
                        let inside = (offset..end).contains(&(i as u64));
                        assert_eq!(k, inside as u8, "byte {i} of {offset}..{end} in {size}");
                    }
                }
            }
        }
    }

    #[test]
    fn zero_subtrees_are_constants() {
        for suite in [Suite::Blake3, Suite::Sha256] {
            let l = vec![zero(suite, 0); 8];
            assert_eq!(subtree(suite, &l), zero(suite, 3));
        }
    }

    #[test]
    fn prove_and_verify_every_range() {
        for suite in [Suite::Blake3, Suite::Sha256] {
            for size in [1u64, 1024, 1025, 3000, 7 * 1024, 9 * 1024 + 5] {
                let mut data: Vec<u8> = (0..size).map(|i| (i * 7 % 256) as u8).collect();
                if size > 2048 {
                    data[1024..2048].fill(0); // a hole-like chunk
                }
                let l = leaves_of(suite, &data);
                let n = l.len() as u64;
                let mut src = LeafNodes { suite, leaves: &l };
                let t = top(suite, &mut src, n).unwrap();
                for c0 in 0..n {
                    for c1 in c0 + 1..=n {
                        let proof = prove(suite, &mut src, n, c0, c1).unwrap();
                        let a = (c0 * CHUNK_BYTES) as usize;
                        let b = ((c1 * CHUNK_BYTES) as usize).min(data.len());
                        let mut c = Cost::default();
                        assert_eq!(
                            verify_range(suite, n, c0, c1, &data[a..b], &proof, &mut c),
                            Ok(t)
                        );
                        // any single-bit change in the data or the proof changes the top
                        let mut bad = data[a..b].to_vec();
                        bad[(b - a) / 2] ^= 0x10;
                        assert_ne!(verify_range(suite, n, c0, c1, &bad, &proof, &mut c), Ok(t));
                        if !proof.is_empty() {
                            let mut badp = proof.clone();
                            badp[0][3] ^= 1;
                            assert_ne!(
                                verify_range(suite, n, c0, c1, &data[a..b], &badp, &mut c),
                                Ok(t)
                            );
                        }
                    }
                }
            }
        }
    }
}
