//! Seed 004 §4's table-driven encoder: for up to four outputs (P, Q, R, S), a table per source
//! m holds `table[m][D]` = the 32-bit word `(c0m·D, c1m·D, c2m·D, c3m·D)` (output r in byte r), so
//! one byte column costs one lookup per source and one 32-bit XOR per source after the first.
//! With raid6x's coefficients `g^(e·m)` this is the paper's `(D, D·g^m, D·g^2m, D·g^3m)`; any
//! coefficient matrix of at most four rows works, so decoding uses the same code.
//!
//! Two access orders (Fig 3):
//!
//! - [`TableOrder::Simple`]: byte column by byte column, each column touching all 2k tables
//!   (2^11·k bytes in all); once they outgrow L1 the rate falls with k.
//! - [`TableOrder::CacheAware`]: one source (one table) at a time over a block of
//!   [`TABLE_BLOCK_BYTES`] columns, buffering the partial 32-bit sums; only one 1 KiB table and
//!   the 16 KiB buffer are hot at a time.
//!
//! Block-level parallelism: the `_par` entry splits the columns across rayon's pool.

use crate::gf;
use crate::kernel::{self, Coeffs};

/// Outputs a 32-bit table word holds.
pub const TABLE_OUTPUTS_MAX: usize = 4;
/// Columns per block of the cache-aware order: the 32-bit partial sums take 4x this (16 KiB),
/// which with a 1 KiB table and a 4 KiB source block fits a 32 KiB L1 data cache.
pub const TABLE_BLOCK_BYTES: usize = 4096;

/// One 256-entry table per source.
pub type Tables = Vec<[u32; 256]>;

/// The order in which the table encoder walks the columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TableOrder {
    /// Column by column, all sources per column (the paper's plain 32-bit table).
    Simple,
    /// Source by source over a block of columns (the paper's cache-optimized table, Fig 3).
    CacheAware,
}

impl TableOrder {
    /// `simple` or `cache-aware`.
    pub fn name(self) -> &'static str {
        match self {
            TableOrder::Simple => "simple",
            TableOrder::CacheAware => "cache-aware",
        }
    }
}

/// The tables of a coefficient matrix with at most [`TABLE_OUTPUTS_MAX`] rows.
pub fn tables(coeffs: &Coeffs) -> Tables {
    assert!(
        coeffs.rows() <= TABLE_OUTPUTS_MAX,
        "a 32-bit word holds four outputs"
    );
    (0..coeffs.cols())
        .map(|m| {
            let mut t = [0u32; 256];
            for (d, word) in t.iter_mut().enumerate() {
                for r in 0..coeffs.rows() {
                    *word |= (gf::mul(coeffs.get(r, m), d as u8) as u32) << (8 * r);
                }
            }
            t
        })
        .collect()
}

/// `dsts[r] = XOR over m of c(r, m) · srcs[m]` through `tables` (built by [`tables`] from c).
pub fn dot(tables: &Tables, srcs: &[&[u8]], dsts: &mut [&mut [u8]], order: TableOrder) {
    assert_eq!(tables.len(), srcs.len(), "one table per source");
    assert!(
        dsts.len() <= TABLE_OUTPUTS_MAX,
        "a 32-bit word holds four outputs"
    );
    let len = dsts.first().map_or(0, |d| d.len());
    assert!(
        srcs.iter().all(|s| s.len() == len) && dsts.iter().all(|d| d.len() == len),
        "regions of one dot product have one length"
    );
    match order {
        TableOrder::Simple => simple(tables, srcs, dsts, len),
        TableOrder::CacheAware => cache_aware(tables, srcs, dsts, len),
    }
}

/// [`dot`] with the columns split into pieces that rayon's current pool computes in parallel.
pub fn dot_par(tables: &Tables, srcs: &[&[u8]], dsts: &mut [&mut [u8]], order: TableOrder) {
    let len = dsts.first().map_or(0, |d| d.len());
    if len < kernel::PARALLEL_MIN_BYTES || rayon::current_num_threads() < 2 {
        return dot(tables, srcs, dsts, order);
    }
    kernel::for_each_piece(srcs, dsts, kernel::PARALLEL_PIECE_BYTES, |s, d| {
        dot(tables, s, d, order)
    });
}

fn simple(tables: &Tables, srcs: &[&[u8]], dsts: &mut [&mut [u8]], len: usize) {
    for b in 0..len {
        let mut word = 0u32;
        for (t, s) in tables.iter().zip(srcs) {
            word ^= t[s[b] as usize];
        }
        scatter_word(word, dsts, b);
    }
}

fn cache_aware(tables: &Tables, srcs: &[&[u8]], dsts: &mut [&mut [u8]], len: usize) {
    let mut sums = [0u32; TABLE_BLOCK_BYTES];
    let mut start = 0;
    while start < len {
        let end = (start + TABLE_BLOCK_BYTES).min(len);
        let sums = &mut sums[..end - start];
        sums.fill(0);
        for (t, s) in tables.iter().zip(srcs) {
            for (w, &d) in sums.iter_mut().zip(&s[start..end]) {
                *w ^= t[d as usize];
            }
        }
        for (r, dst) in dsts.iter_mut().enumerate() {
            for (o, w) in dst[start..end].iter_mut().zip(sums.iter()) {
                *o = (w >> (8 * r)) as u8;
            }
        }
        start = end;
    }
}

#[inline]
fn scatter_word(word: u32, dsts: &mut [&mut [u8]], b: usize) {
    for (r, dst) in dsts.iter_mut().enumerate() {
        dst[b] = (word >> (8 * r)) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_orders_equal_the_kernel_oracle() {
        for (rows, cols, len) in [(4, 24, 10_000), (2, 3, 1), (1, 5, 4097), (4, 1, 0)] {
            let coeffs = Coeffs::new(
                rows,
                cols,
                (0..rows * cols).map(|i| (i * 29 + 3) as u8).collect(),
            );
            let t = tables(&coeffs);
            let srcs: Vec<Vec<u8>> = (0..cols)
                .map(|i| (0..len).map(|b| (b * 13 + i * 101) as u8).collect())
                .collect();
            let s: Vec<&[u8]> = srcs.iter().map(|v| v.as_slice()).collect();
            let mut want = vec![vec![0u8; len]; rows];
            let mut w: Vec<&mut [u8]> = want.iter_mut().map(|v| v.as_mut_slice()).collect();
            kernel::dot_oracle(&coeffs, &s, &mut w, false);
            for order in [TableOrder::Simple, TableOrder::CacheAware] {
                let mut got = vec![vec![0x55u8; len]; rows];
                let mut g: Vec<&mut [u8]> = got.iter_mut().map(|v| v.as_mut_slice()).collect();
                dot(&t, &s, &mut g, order);
                assert_eq!(got, want, "{order:?} {rows}x{cols} len {len}");
            }
        }
    }
}
