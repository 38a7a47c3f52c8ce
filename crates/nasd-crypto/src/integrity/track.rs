//! A writer's own account of an object's `tree` top, so a client can pin what an object must
//! hold without believing the drive that holds it (seed 003's MT-EINT over nasd's drive trees:
//! requirements B.3's "shortcut for nasd").
//!
//! A drive answers every read of a `tree` object with `size || top` under its reply MAC and a
//! proof of the bytes against that top ([`super::tree`]). A reader that knows what the top
//! *should* be — a value pinned at the file manager by the file's last writer — compares the
//! two, and a drive that serves an older copy of the object, another object, or bytes under a
//! tree of its own making is caught even though its MAC is good. The writer therefore has to
//! know the new top after its writes without asking the drive: [`TreeTrack`] keeps the object's
//! tree as a partition of its chunks into tree nodes whose digests the writer computed from
//! bytes it wrote or checked, and folds them into the top.
//!
//! - A fresh object starts empty and known; writes that start on a chunk boundary (or append to
//!   a tail chunk whose bytes it kept) and only replace whole nodes are applied at once, so a
//!   streaming upload costs one pass of hashing and nothing more.
//! - Anything else — a write into the middle of a node it merged, an object it did not write
//!   (a copy-on-write copy of a committed file: only its pinned top is known), a cut inside a
//!   node — needs the digests or bytes of a few chunks as the object holds them now:
//!   [`TreeTrack::plan_write`] and [`TreeTrack::plan_set_size`] name those chunks ([`Need`]);
//!   the caller reads them with their proofs (one request, one region per chunk) while no
//!   other write to the object is in flight, and [`TreeTrack::install`] checks the reply
//!   against the top the writer expects (`size` and `top` must be exactly its own) before it
//!   refines the partition from the proofs. A drive cannot steer a writer: whatever it sends
//!   must fold into the top the writer already knew.
//!
//! Invariant: the partition's entries are nodes of the tree of the current size (every aligned
//! power-of-two run of chunks inside the object is one; right-edge nodes of other widths are
//! nodes only for this size) whose digests are those of the current content, and they tile
//! `[0, chunk_count(size))` exactly.

use super::{tree, CHUNK_BYTES};
use crate::primitives::Digest;
use crate::Cost;
use nasd_proto::Suite;
use std::collections::{BTreeMap, BTreeSet, HashMap};

const C: u64 = CHUNK_BYTES;

/// One node of the partition: chunks `[lo, hi)` (the key is `lo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    hi: u64,
    digest: Digest,
    /// An aligned run of full zero chunks: split into zero halves without reading anything.
    zero: bool,
}

/// Chunks whose current bytes and proofs a write or a cut needs first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    /// Chunk indices, ascending, each inside the object.
    pub chunks: Vec<u64>,
}

/// One chunk as the object holds it now, with the proof the drive sent for it.
#[derive(Clone, Debug)]
pub struct ChunkProof {
    pub index: u64,
    /// The chunk's bytes (shorter than a chunk only as the object's last).
    pub data: Vec<u8>,
    /// The drive's proof for the one-chunk region, in [`tree::prove`]'s order.
    pub proof: Vec<Digest>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrackError {
    /// The object is not what the writer last left it as (or was pinned at).
    #[error("the object's tree is not the one expected (drive reports {size} bytes)")]
    Mismatch { size: u64 },
    #[error("a proof for chunk {index} does not have the shape of the object's tree")]
    Proof { index: u64 },
    #[error("chunk {index} was asked for but not supplied, or is outside the object")]
    Missing { index: u64 },
}

/// A writer's account of one `tree` object's top (module docs).
#[derive(Clone, Debug)]
pub struct TreeTrack {
    suite: Suite,
    size: u64,
    /// `None`: only the pinned top is known.
    entries: Option<BTreeMap<u64, Entry>>,
    pinned: Digest,
    /// Current bytes of chunks the writer holds: the last chunk when partial, and the chunks
    /// a slow path read.
    known: BTreeMap<u64, Vec<u8>>,
}

fn pow2(n: u64) -> bool {
    n.is_power_of_two()
}

/// The aligned power-of-two runs that tile `[lo, hi)`, greatest first from the left.
pub fn decompose(lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut out = vec![];
    let mut p = lo;
    while p < hi {
        let align = if p == 0 { 63 } else { p.trailing_zeros() };
        let room = 63 - (hi - p).leading_zeros();
        let k = align.min(room);
        out.push((p, p + (1u64 << k)));
        p += 1u64 << k;
    }
    out
}

/// The node ranges [`tree::prove`] returns for chunks `[c0, c1)` of an `n`-chunk object, in
/// its order.
pub fn proof_ranges(n: u64, c0: u64, c1: u64) -> Vec<(u64, u64)> {
    fn walk(lo: u64, hi: u64, c0: u64, c1: u64, out: &mut Vec<(u64, u64)>) {
        if hi <= c0 || lo >= c1 {
            out.push((lo, hi));
        } else if !(c0 <= lo && hi <= c1) {
            let s = tree::split_point(lo, hi);
            walk(lo, s, c0, c1, out);
            walk(s, hi, c0, c1, out);
        }
    }
    let mut out = vec![];
    if n > 0 && c0 < c1 {
        walk(0, n, c0, c1, &mut out);
    }
    out
}

impl TreeTrack {
    /// A fresh, empty object.
    pub fn empty(suite: Suite) -> TreeTrack {
        TreeTrack {
            suite,
            size: 0,
            entries: Some(BTreeMap::new()),
            pinned: tree::empty_top(suite),
            known: BTreeMap::new(),
        }
    }

    /// An object known only by its pinned `size` and `top` (a copy of a committed one). An
    /// empty object's tree is known whatever the pin says.
    pub fn pinned(suite: Suite, size: u64, top: Digest) -> TreeTrack {
        if size == 0 {
            return TreeTrack::empty(suite);
        }
        TreeTrack {
            suite,
            size,
            entries: None,
            pinned: top,
            known: BTreeMap::new(),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    fn n(&self) -> u64 {
        tree::chunk_count(self.size)
    }

    /// Whether the last chunk is partial (its leaf changes when the object grows).
    fn tail_partial(&self) -> bool {
        !self.size.is_multiple_of(C)
    }

    /// The top the object must have now.
    pub fn top(&self) -> Digest {
        match &self.entries {
            None => self.pinned,
            Some(e) if e.is_empty() => tree::empty_top(self.suite),
            Some(e) => self.node(e, 0, self.n()),
        }
    }

    fn node(&self, e: &BTreeMap<u64, Entry>, lo: u64, hi: u64) -> Digest {
        if let Some(x) = e.get(&lo) {
            if x.hi == hi {
                return x.digest;
            }
        }
        debug_assert!(
            hi - lo >= 2,
            "the partition tiles the object with tree nodes"
        );
        let s = tree::split_point(lo, hi);
        let l = self.node(e, lo, s);
        let r = self.node(e, s, hi);
        tree::merge(self.suite, &l, &r)
    }

    /// The entry holding chunk `c`, if the partition is known.
    fn holding(e: &BTreeMap<u64, Entry>, c: u64) -> Option<(u64, Entry)> {
        e.range(..=c)
            .next_back()
            .filter(|(_, x)| c < x.hi)
            .map(|(&lo, &x)| (lo, x))
    }

    /// Whether chunk `c`'s entry can be cut at `c` (or at `c + 1`) without reading: it starts
    /// (ends) there already, or it is a run of zeros.
    fn cuts_at(e: &BTreeMap<u64, Entry>, c: u64) -> bool {
        match Self::holding(e, c) {
            None => true,
            Some((lo, x)) => lo == c || x.zero,
        }
    }

    /// What a write of `len` bytes at `offset` needs read first; `Ok` when it can be applied
    /// now.
    pub fn plan_write(&self, offset: u64, len: u64) -> Result<(), Need> {
        if len == 0 {
            return Ok(());
        }
        let (n, end) = (self.n(), offset + len);
        let (c0, c1) = (offset / C, end.div_ceil(C));
        let mut need = BTreeSet::new();
        let Some(e) = &self.entries else {
            for c in [c0, c1 - 1] {
                if c < n {
                    need.insert(c);
                }
            }
            if end > self.size && n > 0 {
                need.insert(n - 1);
            }
            return Err(Need {
                chunks: need.into_iter().collect(),
            });
        };
        // The head chunk's bytes before `offset`, if they are the object's.
        if !offset.is_multiple_of(C) && c0 < n && !self.bytes_known(e, c0) {
            need.insert(c0);
        }
        // The tail chunk's bytes after the write, if the object goes on past it.
        if !end.is_multiple_of(C) && end < self.size && !self.bytes_known(e, c1 - 1) {
            need.insert(c1 - 1);
        }
        // Nodes crossing the write's edges.
        if c0 < n && !Self::cuts_at(e, c0) {
            need.insert(c0);
        }
        if c1 < n && !Self::cuts_at(e, c1) {
            need.insert(c1 - 1);
        }
        // Growing: the old last chunk is padded with zeros and right-edge nodes change shape.
        if end > self.size && n > 0 && c0 > n - 1 {
            let (lo, x) = Self::holding(e, n - 1).expect("the partition covers the object");
            let edge_bound = !pow2(x.hi - lo) || self.tail_partial();
            let single = lo == n - 1;
            if (edge_bound && !single)
                || (self.tail_partial() && !self.known.contains_key(&(n - 1)))
            {
                need.insert(n - 1);
            }
        }
        if need.is_empty() {
            return Ok(());
        }
        // An install rebuilds the partition from the proofs it is given: ask for every chunk
        // the write's edges need, not only the one that was missing.
        for c in [c0, c1 - 1] {
            if c < n {
                need.insert(c);
            }
        }
        if end > self.size && n > 0 {
            need.insert(n - 1);
        }
        Err(Need {
            chunks: need.into_iter().collect(),
        })
    }

    /// Whether chunk `c`'s current bytes are known: kept, or a run of zeros.
    fn bytes_known(&self, e: &BTreeMap<u64, Entry>, c: u64) -> bool {
        self.known.contains_key(&c) || Self::holding(e, c).is_some_and(|(_, x)| x.zero)
    }

    /// Applies a write that [`TreeTrack::plan_write`] allowed.
    pub fn apply_write(&mut self, offset: u64, data: &[u8], cost: &mut Cost) {
        if data.is_empty() {
            return;
        }
        debug_assert_eq!(self.plan_write(offset, data.len() as u64), Ok(()));
        let (n, old) = (self.n(), self.size);
        let end = offset + data.len() as u64;
        let (c0, c1) = (offset / C, end.div_ceil(C));
        let size = old.max(end);
        // Growing past a partial last chunk the write does not start: it is padded with zeros.
        if end > old && self.tail_partial() && c0 > n - 1 {
            self.pad_tail(n - 1, C.min(size - (n - 1) * C), cost);
        }
        // The bytes of chunks [c0, c1) after the write.
        let from = c0 * C;
        let mut bytes = self.current_bytes(from, offset);
        bytes.extend_from_slice(data);
        let upto = (c1 * C).min(size);
        if end < upto {
            let tail = self.current_bytes(end, upto);
            bytes.extend_from_slice(&tail);
        }
        let leaves = tree::leaves(self.suite, c0, &bytes, cost);
        let e = self.entries.as_mut().expect("planned");
        // Zero runs crossing the edges are split; nothing else crosses (planned).
        for c in [c0, c1] {
            split_zero(self.suite, e, c);
        }
        let inside: Vec<u64> = e.range(c0..c1).map(|(&lo, _)| lo).collect();
        for lo in inside {
            e.remove(&lo);
        }
        // A gap between the old end and the write is zeros.
        if c0 > n {
            insert_zeros(self.suite, e, n, c0);
        }
        for (lo, hi) in decompose(c0, c1) {
            let run = &leaves[(lo - c0) as usize..(hi - c0) as usize];
            let digest = tree::subtree(self.suite, run);
            e.insert(
                lo,
                Entry {
                    hi,
                    digest,
                    zero: false,
                },
            );
        }
        self.size = size;
        // Keep the last chunk's bytes when it is partial; nothing else is needed later.
        let last = self.n().saturating_sub(1);
        let keep_last = if self.tail_partial() && c1 == self.n() {
            let at = ((last - c0) * C) as usize;
            Some(bytes[at..].to_vec())
        } else if self.tail_partial() {
            self.known.get(&last).cloned()
        } else {
            None
        };
        self.known.clear();
        if let Some(b) = keep_last {
            self.known.insert(last, b);
        }
    }

    /// The object's current bytes `[from, to)`, all inside one chunk at the start or the end of
    /// a write: from a known chunk, or zeros past the end.
    fn current_bytes(&self, from: u64, to: u64) -> Vec<u8> {
        if from >= to {
            return vec![];
        }
        let c = from / C;
        debug_assert_eq!(c, (to - 1) / C);
        let mut out = vec![0u8; (to - from) as usize];
        if from < self.size {
            // A chunk not kept is in a run of zeros (planned).
            if let Some(have) = self.known.get(&c) {
                let a = (from - c * C) as usize;
                let b = ((to.min(self.size)) - c * C) as usize;
                out[..b - a].copy_from_slice(&have[a..b]);
            }
        }
        out
    }

    /// Chunk `c` (the last, partial) grows to `len` bytes of which the new ones are zeros.
    fn pad_tail(&mut self, c: u64, len: u64, cost: &mut Cost) {
        let mut b = self
            .known
            .get(&c)
            .cloned()
            .expect("planned: the tail chunk's bytes are known");
        b.resize(len as usize, 0);
        let leaf = tree::leaf(self.suite, c, &b, cost);
        let e = self.entries.as_mut().expect("planned");
        e.insert(
            c,
            Entry {
                hi: c + 1,
                digest: leaf,
                zero: false,
            },
        );
        self.known.insert(c, b);
    }

    /// What cutting or extending the object to `size` bytes needs read first.
    pub fn plan_set_size(&self, size: u64) -> Result<(), Need> {
        if size == self.size || size == 0 {
            return Ok(());
        }
        let n = self.n();
        let new_n = tree::chunk_count(size);
        let mut need = BTreeSet::new();
        let Some(e) = &self.entries else {
            let c = if size < self.size { new_n } else { n };
            if c > 0 {
                need.insert(c - 1);
            }
            return Err(Need {
                chunks: need.into_iter().collect(),
            });
        };
        if size < self.size {
            if new_n > 0 {
                let last = new_n - 1;
                let partial = !size.is_multiple_of(C);
                let (lo, x) = Self::holding(e, last).expect("the partition covers the object");
                let whole = x.hi == new_n && (!partial || lo == last);
                if !(whole || x.zero) || (partial && !x.zero && !self.known.contains_key(&last)) {
                    need.insert(last);
                }
            }
        } else if n > 0 {
            let (lo, x) = Self::holding(e, n - 1).expect("the partition covers the object");
            let edge_bound = !pow2(x.hi - lo) || self.tail_partial();
            if (edge_bound && lo != n - 1)
                || (self.tail_partial() && !self.known.contains_key(&(n - 1)))
            {
                need.insert(n - 1);
            }
        }
        if need.is_empty() {
            Ok(())
        } else {
            Err(Need {
                chunks: need.into_iter().collect(),
            })
        }
    }

    /// Applies a cut or extension that [`TreeTrack::plan_set_size`] allowed.
    pub fn apply_set_size(&mut self, size: u64, cost: &mut Cost) {
        if size == self.size {
            return;
        }
        debug_assert_eq!(self.plan_set_size(size), Ok(()));
        if size == 0 {
            *self = TreeTrack::empty(self.suite);
            return;
        }
        let n = self.n();
        let new_n = tree::chunk_count(size);
        if size < self.size {
            let e = self.entries.as_mut().expect("planned");
            split_zero(self.suite, e, new_n);
            let gone: Vec<u64> = e.range(new_n..).map(|(&lo, _)| lo).collect();
            for lo in gone {
                e.remove(&lo);
            }
            if !size.is_multiple_of(C) {
                let last = new_n - 1;
                let len = (size - last * C) as usize;
                let b = match self.known.get(&last) {
                    Some(b) => b[..len].to_vec(),
                    None => vec![0u8; len], // a zero run (planned)
                };
                // A zero run holding the new last chunk is cut around it first.
                split_zero_around(self.suite, e, last);
                let leaf = tree::leaf(self.suite, last, &b, cost);
                e.insert(
                    last,
                    Entry {
                        hi: last + 1,
                        digest: leaf,
                        zero: false,
                    },
                );
                self.known.clear();
                self.known.insert(last, b);
            } else {
                self.known.clear();
            }
            self.size = size;
            return;
        }
        if self.tail_partial() {
            self.pad_tail(n - 1, C.min(size - (n - 1) * C), cost);
        }
        let e = self.entries.as_mut().expect("planned");
        let full_end = size / C;
        insert_zeros(self.suite, e, n, full_end.max(n));
        let mut keep = None;
        if !size.is_multiple_of(C) && new_n > n {
            let last = new_n - 1;
            let b = vec![0u8; (size - last * C) as usize];
            let leaf = tree::leaf(self.suite, last, &b, cost);
            e.insert(
                last,
                Entry {
                    hi: last + 1,
                    digest: leaf,
                    zero: false,
                },
            );
            keep = Some((last, b));
        }
        self.size = size;
        if let Some((last, b)) = keep {
            self.known.clear();
            self.known.insert(last, b);
        } else if !self.tail_partial() {
            self.known.clear();
        }
    }

    /// Takes the chunks a [`Need`] asked for, read from the object as it is now with their
    /// proofs, after checking that the drive reported exactly the size and top this writer
    /// expects and that every proof leads to that top; then refines the partition so the
    /// planned operation can be applied.
    pub fn install(
        &mut self,
        size: u64,
        top: &Digest,
        chunks: &[ChunkProof],
        cost: &mut Cost,
    ) -> Result<(), TrackError> {
        if size != self.size || !crate::ct_eq(top, &self.top()) {
            return Err(TrackError::Mismatch { size });
        }
        let n = self.n();
        let mut nodes: HashMap<(u64, u64), Digest> = HashMap::new();
        let mut read: BTreeMap<u64, &ChunkProof> = BTreeMap::new();
        for c in chunks {
            if c.index >= n {
                return Err(TrackError::Missing { index: c.index });
            }
            let got =
                tree::verify_range(self.suite, n, c.index, c.index + 1, &c.data, &c.proof, cost)
                    .map_err(|_| TrackError::Proof { index: c.index })?;
            if !crate::ct_eq(&got, top) {
                return Err(TrackError::Mismatch { size });
            }
            for (r, d) in proof_ranges(n, c.index, c.index + 1)
                .into_iter()
                .zip(&c.proof)
            {
                nodes.insert(r, *d);
            }
            read.insert(c.index, c);
        }
        let mut e = BTreeMap::new();
        let mut stack = if n == 0 { vec![] } else { vec![(0u64, n)] };
        while let Some((lo, hi)) = stack.pop() {
            let holds_read = read.range(lo..hi).next().is_some();
            if !holds_read {
                let digest = *nodes
                    .get(&(lo, hi))
                    .ok_or(TrackError::Proof { index: lo })?;
                let zero = pow2(hi - lo)
                    && hi * C <= size
                    && digest == tree::zero(self.suite, (hi - lo).trailing_zeros());
                e.insert(lo, Entry { hi, digest, zero });
            } else if hi - lo == 1 {
                let c = read[&lo];
                let digest = tree::leaf(self.suite, lo, &c.data, cost);
                e.insert(
                    lo,
                    Entry {
                        hi,
                        digest,
                        zero: false,
                    },
                );
            } else {
                let s = tree::split_point(lo, hi);
                stack.push((s, hi));
                stack.push((lo, s));
            }
        }
        self.entries = Some(e);
        let tail = self.known.remove(&n.saturating_sub(1));
        self.known.clear();
        if let Some(b) = tail {
            self.known.insert(n - 1, b);
        }
        for (i, c) in read {
            self.known.insert(i, c.data.clone());
        }
        Ok(())
    }
}

/// Cuts a zero run that crosses chunk boundary `at` into zero runs that do not.
fn split_zero(suite: Suite, e: &mut BTreeMap<u64, Entry>, at: u64) {
    let Some((lo, x)) = TreeTrack::holding(e, at) else {
        return;
    };
    if lo == at || !x.zero {
        return;
    }
    e.remove(&lo);
    insert_zeros(suite, e, lo, at);
    insert_zeros(suite, e, at, x.hi);
}

/// Chunks `[lo, hi)` as zero runs, one per aligned subtree.
fn insert_zeros(suite: Suite, e: &mut BTreeMap<u64, Entry>, lo: u64, hi: u64) {
    for (a, b) in decompose(lo, hi) {
        e.insert(
            a,
            Entry {
                hi: b,
                digest: tree::zero(suite, (b - a).trailing_zeros()),
                zero: true,
            },
        );
    }
}

/// Cuts a zero run holding chunk `c` so that `c` is a run of its own.
fn split_zero_around(suite: Suite, e: &mut BTreeMap<u64, Entry>, c: u64) {
    split_zero(suite, e, c);
    split_zero(suite, e, c + 1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Suite = Suite::Blake3;

    /// The drive's view: the whole object's bytes.
    fn top_of(bytes: &[u8]) -> Digest {
        let mut c = Cost::default();
        let leaves = tree::leaves(S, 0, bytes, &mut c);
        let mut src = tree::LeafNodes {
            suite: S,
            leaves: &leaves,
        };
        tree::top(S, &mut src, leaves.len() as u64).unwrap()
    }

    /// What a drive sends for `need`: each chunk with its proof.
    fn serve(bytes: &[u8], need: &Need) -> Vec<ChunkProof> {
        let mut c = Cost::default();
        let leaves = tree::leaves(S, 0, bytes, &mut c);
        let n = leaves.len() as u64;
        need.chunks
            .iter()
            .map(|&i| {
                let mut src = tree::LeafNodes {
                    suite: S,
                    leaves: &leaves,
                };
                let a = (i * C) as usize;
                let b = ((i + 1) * C).min(bytes.len() as u64) as usize;
                ChunkProof {
                    index: i,
                    data: bytes[a..b].to_vec(),
                    proof: tree::prove(S, &mut src, n, i, i + 1).unwrap(),
                }
            })
            .collect()
    }

    #[derive(Clone, Debug)]
    enum Op {
        Write { offset: u64, len: u64, fill: u8 },
        SetSize(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let at = prop_oneof![
            0u64..40_000,
            (0u64..40).prop_map(|k| k * 1024),
            (0u64..10).prop_map(|k| k * 4096),
        ];
        let len = prop_oneof![1u64..5_000, (1u64..16).prop_map(|k| k * 1024), Just(65_536)];
        prop_oneof![
            4 => (at.clone(), len, any::<u8>()).prop_map(|(offset, len, fill)| Op::Write { offset, len, fill }),
            1 => at.prop_map(Op::SetSize),
        ]
    }

    /// Runs `ops` on a model and a track (starting empty, or pinned to `start`), answering
    /// every need from the model, and checks the tops after each step.
    fn run(start: Option<Vec<u8>>, ops: &[Op]) -> (u32, u32) {
        let mut model = start.clone().unwrap_or_default();
        let mut t = match &start {
            None => TreeTrack::empty(S),
            Some(b) => TreeTrack::pinned(S, b.len() as u64, top_of(b)),
        };
        let mut cost = Cost::default();
        let (mut fast, mut slow) = (0, 0);
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Write { offset, len, fill } => {
                    let data: Vec<u8> = (0..len)
                        .map(|j| if fill < 64 { 0 } else { fill ^ (j as u8) })
                        .collect();
                    match t.plan_write(offset, len) {
                        Ok(()) => fast += 1,
                        Err(need) => {
                            slow += 1;
                            t.install(
                                model.len() as u64,
                                &top_of(&model),
                                &serve(&model, &need),
                                &mut cost,
                            )
                            .unwrap();
                            assert_eq!(t.plan_write(offset, len), Ok(()), "after install, op {i}");
                        }
                    }
                    t.apply_write(offset, &data, &mut cost);
                    let end = (offset + len) as usize;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[offset as usize..end].copy_from_slice(&data);
                }
                Op::SetSize(s) => {
                    match t.plan_set_size(s) {
                        Ok(()) => fast += 1,
                        Err(need) => {
                            slow += 1;
                            let r = t.install(
                                model.len() as u64,
                                &top_of(&model),
                                &serve(&model, &need),
                                &mut cost,
                            );
                            assert_eq!(
                                r,
                                Ok(()),
                                "install for op {i} {op:?}, {need:?}, size {}",
                                model.len()
                            );
                            assert_eq!(t.plan_set_size(s), Ok(()), "after install, op {i}");
                        }
                    }
                    t.apply_set_size(s, &mut cost);
                    model.resize(s as usize, 0);
                }
            }
            assert_eq!(t.size(), model.len() as u64, "op {i}: {op:?}");
            assert!(t.top() == top_of(&model), "op {i}: {op:?}");
        }
        (fast, slow)
    }

    #[test]
    fn a_sequential_upload_never_reads() {
        let ops: Vec<Op> = (0..64)
            .map(|k| Op::Write {
                offset: k * 65_536,
                len: if k == 63 { 1000 } else { 65_536 },
                fill: 200 + (k % 50) as u8,
            })
            .collect();
        assert_eq!(run(None, &ops), (64, 0));
    }

    #[test]
    fn pieces_out_of_order_and_holes_never_read() {
        let ops = vec![
            Op::Write {
                offset: 3 << 20,
                len: 1 << 20,
                fill: 99,
            },
            Op::Write {
                offset: 0,
                len: 1 << 20,
                fill: 77,
            },
            Op::Write {
                offset: 2 << 20,
                len: 1 << 20,
                fill: 1,
            },
            Op::Write {
                offset: 1 << 20,
                len: 1 << 20,
                fill: 128,
            },
        ];
        assert_eq!(run(None, &ops), (4, 0));
    }

    #[test]
    fn a_pinned_copy_is_read_before_its_first_change() {
        let start: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let ops = vec![
            Op::Write {
                offset: 65_536,
                len: 65_536,
                fill: 130,
            },
            Op::Write {
                offset: 65_536 * 2,
                len: 65_536,
                fill: 131,
            },
            Op::Write {
                offset: 299_000,
                len: 5_000,
                fill: 132,
            },
        ];
        let (fast, slow) = run(Some(start), &ops);
        assert_eq!(fast + slow, 3);
        assert!(slow >= 1, "a pinned copy is read before its first change");
    }

    #[test]
    fn a_wrong_top_or_size_or_proof_is_refused_and_changes_nothing() {
        let start: Vec<u8> = (0..10_000u32).map(|i| (i * 13) as u8).collect();
        let mut t = TreeTrack::pinned(S, start.len() as u64, top_of(&start));
        let before = t.top();
        let need = t.plan_write(3000, 100).unwrap_err();
        let mut older = start.clone();
        older[5000] ^= 1;
        let mut c = Cost::default();
        // A drive serving another version of the object, with its own valid proofs.
        assert!(matches!(
            t.install(
                older.len() as u64,
                &top_of(&older),
                &serve(&older, &need),
                &mut c
            ),
            Err(TrackError::Mismatch { .. })
        ));
        // The right top, but chunks from the other version.
        assert!(t
            .install(
                start.len() as u64,
                &top_of(&start),
                &serve(&older, &need),
                &mut c
            )
            .is_err());
        // The right top, a forged chunk.
        let mut forged = serve(&start, &need);
        forged[0].data[0] ^= 0x80;
        assert!(t
            .install(start.len() as u64, &top_of(&start), &forged, &mut c)
            .is_err());
        assert!(t.top() == before);
        t.install(
            start.len() as u64,
            &top_of(&start),
            &serve(&start, &need),
            &mut c,
        )
        .unwrap();
        assert!(t.top() == before);
    }

    #[test]
    fn decompose_tiles_with_aligned_powers_of_two() {
        for lo in 0..70 {
            for hi in lo..140 {
                let d = decompose(lo, hi);
                let mut at = lo;
                for (a, b) in d {
                    assert_eq!(a, at);
                    assert!(pow2(b - a) && a % (b - a) == 0);
                    at = b;
                }
                assert_eq!(at, hi);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Any sequence of writes and cuts, on a fresh object or on a pinned copy: the track's
        /// top is always the top of the model's bytes.
        #[test]
        fn the_track_follows_any_sequence_of_changes(
            start in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..30_000)),
            ops in proptest::collection::vec(op(), 1..24),
        ) {
            run(start, &ops);
        }
    }
}
