//! Splitting a byte range at unit boundaries (blocks, sub-blocks, chunks) and the *write form*
//! of the data digest: the per-piece hashes a writer sends under INTEGRITY_DATA, chosen so the
//! drive can keep the very hashes it verified as its stored metadata (seed 000 §3.4.3: "computing
//! of the new stored digest can simply continue from the calculation necessary to verify").

use super::{adhash, tree, CHUNK_BYTES, SUB_BLOCK_BYTES};
use crate::primitives::{hash_data, Digest, Mac};
use crate::Cost;
use nasd_proto::{Scheme, Suite};
use rayon::prelude::*;

/// Writes at least this large hash their pieces on all cores: each piece's hash is independent,
/// and a lone request otherwise leaves the other core idle while one hashes chunk by chunk.
pub const PARALLEL_HASH_BYTES_MIN: usize = 256 << 10;
/// Bytes of chunks one core hashes at a time in a parallel `tree` write form (a whole number
/// of chunks).
const PARALLEL_RUN_BYTES: usize = 64 << 10;
const _: () = assert!(PARALLEL_RUN_BYTES.is_multiple_of(CHUNK_BYTES as usize));

/// The part of a byte range that falls inside one unit.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Piece {
    /// Index of the unit (block, sub-block or chunk) in the object.
    pub unit: u64,
    /// Absolute object offset of the piece's first byte.
    pub offset: u64,
    pub len: u64,
}

impl Piece {
    /// Whether the piece begins at its unit's first byte.
    pub fn starts_unit(&self, unit_bytes: u64) -> bool {
        self.offset == self.unit * unit_bytes
    }
}

/// Splits `[offset, offset + len)` at multiples of `unit_bytes`.
pub fn split(offset: u64, len: u64, unit_bytes: u64) -> impl Iterator<Item = Piece> {
    let end = offset + len;
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let unit = at / unit_bytes;
        let stop = ((unit + 1) * unit_bytes).min(end);
        let p = Piece {
            unit,
            offset: at,
            len: stop - at,
        };
        at = stop;
        Some(p)
    })
}

/// One piece with its write-form hash.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PieceHash {
    pub piece: Piece,
    pub value: Digest,
}

/// Unit size of a scheme's pieces (`mac` has none).
pub fn unit_bytes(scheme: Scheme) -> u64 {
    match scheme {
        Scheme::Mac => u64::MAX,
        Scheme::Digest => super::BLOCK_BYTES,
        Scheme::Incremental => SUB_BLOCK_BYTES,
        Scheme::Tree => CHUNK_BYTES,
    }
}

/// Hashes `data`, written at `offset`, in `scheme`'s write form:
/// - `digest`: `H(piece)` per block piece;
/// - `incremental`: `h(i, piece)` per sub-block piece;
/// - `tree`: a piece that starts a chunk hashes as that chunk's leaf (so it is the stored leaf
///   when it covers the chunk's final content), any other piece as `partial(i, offset, bytes)`;
/// - `mac`: no pieces; the data itself goes into the MAC.
pub fn write_form(
    suite: Suite,
    scheme: Scheme,
    offset: u64,
    data: &[u8],
    cost: &mut Cost,
) -> Vec<PieceHash> {
    write_form_on(
        suite,
        scheme,
        offset,
        data,
        cost,
        data.len() >= PARALLEL_HASH_BYTES_MIN,
    )
}

fn write_form_on(
    suite: Suite,
    scheme: Scheme,
    offset: u64,
    data: &[u8],
    cost: &mut Cost,
    parallel: bool,
) -> Vec<PieceHash> {
    if scheme == Scheme::Mac {
        return vec![];
    }
    if scheme == Scheme::Tree {
        return tree_form(suite, offset, data, cost, parallel);
    }
    let unit = unit_bytes(scheme);
    let one = |p: Piece, cost: &mut Cost| {
        let at = (p.offset - offset) as usize;
        let bytes = &data[at..at + p.len as usize];
        let value = match scheme {
            Scheme::Digest => hash_data(suite, b"", bytes, cost),
            Scheme::Incremental => adhash::sub_hash(suite, p.unit, bytes, cost),
            Scheme::Tree if p.starts_unit(unit) => tree::leaf(suite, p.unit, bytes, cost),
            Scheme::Tree => tree::partial(suite, p.unit, p.offset - p.unit * unit, bytes, cost),
            Scheme::Mac => unreachable!(),
        };
        PieceHash { piece: p, value }
    };
    if !parallel {
        return split(offset, data.len() as u64, unit)
            .map(|p| one(p, cost))
            .collect();
    }
    let all: Vec<Piece> = split(offset, data.len() as u64, unit).collect();
    let parts: Vec<(Vec<PieceHash>, Cost)> = all
        .par_chunks(64)
        .map(|ps| {
            let mut c = Cost::default();
            let v: Vec<PieceHash> = ps.iter().map(|&p| one(p, &mut c)).collect();
            (v, c)
        })
        .collect();
    let mut out = Vec::with_capacity(all.len());
    for (v, c) in parts {
        cost.add_all(&c);
        out.extend(v);
    }
    out
}

/// The `tree` write form: a head piece that does not start its chunk is `partial`, every
/// other piece starts its chunk and is that chunk's leaf, computed many chunks at a time
/// ([`tree::leaves`]); on all cores in runs of [`PARALLEL_RUN_BYTES`] when `parallel`.
fn tree_form(
    suite: Suite,
    offset: u64,
    data: &[u8],
    cost: &mut Cost,
    parallel: bool,
) -> Vec<PieceHash> {
    let c = CHUNK_BYTES;
    let mut out = Vec::with_capacity(data.len().div_ceil(c as usize) + 1);
    let head = ((c - offset % c) % c).min(data.len() as u64);
    if head > 0 {
        let piece = Piece {
            unit: offset / c,
            offset,
            len: head,
        };
        let value = tree::partial(suite, piece.unit, offset % c, &data[..head as usize], cost);
        out.push(PieceHash { piece, value });
    }
    let rest = &data[head as usize..];
    let first = (offset + head) / c;
    let values = if parallel {
        let runs: Vec<(Vec<Digest>, Cost)> = rest
            .par_chunks(PARALLEL_RUN_BYTES)
            .enumerate()
            .map(|(i, run)| {
                let mut c = Cost::default();
                let at = first + (i * PARALLEL_RUN_BYTES) as u64 / CHUNK_BYTES;
                (tree::leaves(suite, at, run, &mut c), c)
            })
            .collect();
        let mut v = Vec::with_capacity(rest.len().div_ceil(c as usize));
        for (l, rc) in runs {
            cost.add_all(&rc);
            v.extend(l);
        }
        v
    } else {
        tree::leaves(suite, first, rest, cost)
    };
    let end = offset + data.len() as u64;
    out.extend(values.into_iter().enumerate().map(|(j, value)| {
        let at = (first + j as u64) * c;
        PieceHash {
            piece: Piece {
                unit: first + j as u64,
                offset: at,
                len: c.min(end - at),
            },
            value,
        }
    }));
    out
}

/// Feeds a region's data digest `D` into a MAC, given its piece hashes (or, for `mac`, the data).
/// `incremental` contributes one 256-bit sum per region; the others one value per piece.
pub fn feed(mac: &mut Mac, scheme: Scheme, pieces: &[PieceHash], data: &[u8], cost: &mut Cost) {
    match scheme {
        Scheme::Mac => mac.update_data(data, cost),
        Scheme::Incremental => {
            let mut s = adhash::Sum::ZERO;
            for p in pieces {
                s.add(&p.value, cost);
            }
            mac.update(&s.to_bytes());
        }
        Scheme::Digest | Scheme::Tree => {
            for p in pieces {
                mac.update(&p.value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `tree` write form, piece by piece as its definition reads: the oracle for
    /// [`tree_form`].
    fn tree_form_naive(suite: Suite, offset: u64, data: &[u8], cost: &mut Cost) -> Vec<PieceHash> {
        split(offset, data.len() as u64, CHUNK_BYTES)
            .map(|p| {
                let at = (p.offset - offset) as usize;
                let bytes = &data[at..at + p.len as usize];
                let value = if p.starts_unit(CHUNK_BYTES) {
                    tree::leaf(suite, p.unit, bytes, cost)
                } else {
                    tree::partial(suite, p.unit, p.offset - p.unit * CHUNK_BYTES, bytes, cost)
                };
                PieceHash { piece: p, value }
            })
            .collect()
    }

    #[test]
    fn tree_write_form_equals_its_piece_by_piece_definition() {
        let mut data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 ^ 0x5a).collect();
        data[4096..8192].fill(0);
        for offset in [0u64, 1, 100, 1023, 1024, 5000, (1 << 33) + 17] {
            for len in [0usize, 1, 500, 1024, 3000, 70_000, 300_000] {
                for parallel in [false, true] {
                    let d = &data[..len];
                    let mut cost = Cost::default();
                    let got =
                        write_form_on(Suite::Blake3, Scheme::Tree, offset, d, &mut cost, parallel);
                    let mut want_cost = Cost::default();
                    let want = tree_form_naive(Suite::Blake3, offset, d, &mut want_cost);
                    assert!(got == want, "offset {offset} len {len} parallel {parallel}");
                    assert_eq!(cost.data_bytes, want_cost.data_bytes);
                }
            }
        }
    }

    #[test]
    fn parallel_write_form_equals_the_sequential_one() {
        let data: Vec<u8> = (0..(PARALLEL_HASH_BYTES_MIN as u32 * 3 + 777))
            .map(|i| (i % 253) as u8)
            .collect();
        for suite in [Suite::Blake3, Suite::Sha256] {
            for scheme in [Scheme::Digest, Scheme::Incremental, Scheme::Tree] {
                let (mut c1, mut c2) = (Cost::default(), Cost::default());
                let par = write_form_on(suite, scheme, 100, &data, &mut c1, true);
                let seq = write_form_on(suite, scheme, 100, &data, &mut c2, false);
                assert!(
                    par == seq,
                    "{suite:?} {scheme}: parallel and sequential pieces differ"
                );
                assert_eq!(c1, c2, "{suite:?} {scheme}: costs differ");
                assert_eq!(c1.data_bytes, data.len() as u64);
            }
        }
    }

    #[test]
    fn split_covers_exactly_once() {
        for (off, len, unit) in [(0, 0, 8), (0, 8, 8), (3, 20, 8), (8, 1, 8), (7, 2, 8)] {
            let ps: Vec<_> = split(off, len, unit).collect();
            assert_eq!(ps.iter().map(|p| p.len).sum::<u64>(), len);
            let mut at = off;
            for p in &ps {
                assert_eq!(p.offset, at);
                assert_eq!(p.unit, p.offset / unit);
                assert!(p.offset + p.len <= (p.unit + 1) * unit);
                at += p.len;
            }
        }
    }
}
