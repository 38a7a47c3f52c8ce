//! The AVX2 kernel: split-nibble lookups. A byte x is `hi << 4 | lo`, so
//! `c·x = c·(hi << 4) ^ c·lo`, and `vpshufb` looks up 32 of each half at once in the two
//! 16-entry tables of [`super::NibbleTables`]. Up to [`ROWS_PER_PASS`] accumulators stay in
//! registers while each source vector is loaded once; the tail (fewer than 32 bytes) runs the
//! portable kernel.

// Accumulators, output pointers and coefficients are parallel arrays indexed by the output row.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{Coeffs, NibbleTables, ROWS_PER_PASS};
use crate::gf;

/// Runs the dot product in passes of at most [`ROWS_PER_PASS`] output rows.
///
/// # Safety
/// The CPU must support AVX2; every region in `srcs` and `dsts` must be `len` bytes long and
/// `srcs.len() == coeffs.cols()`, `dsts.len() == coeffs.rows()`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot(
    coeffs: &Coeffs,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
    len: usize,
    accumulate: bool,
) {
    let n = coeffs.cols;
    let body = len - len % 32;
    let mut row = 0;
    while row < coeffs.rows {
        let rows = (coeffs.rows - row).min(ROWS_PER_PASS);
        let tables = &coeffs.nibbles[row * n..(row + rows) * n];
        let out = &mut dsts[row..row + rows];
        // SAFETY: forwarded from this function's contract; `tables` holds `rows * n` entries
        // and `body <= len`.
        unsafe {
            match rows {
                1 => pass::<1>(tables, srcs, out, body, accumulate),
                2 => pass::<2>(tables, srcs, out, body, accumulate),
                3 => pass::<3>(tables, srcs, out, body, accumulate),
                _ => pass::<4>(tables, srcs, out, body, accumulate),
            }
        }
        row += rows;
    }
    if body < len {
        tail(coeffs, srcs, dsts, body, accumulate);
    }
}

/// One pass computing `R` output rows over the first `body` bytes (a multiple of 32).
///
/// # Safety
/// As [`dot`], with `tables.len() == R * srcs.len()`, `dsts.len() == R`, `body.is_multiple_of(32)` and
/// every region at least `body` bytes long.
#[target_feature(enable = "avx2")]
unsafe fn pass<const R: usize>(
    tables: &[NibbleTables],
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
    body: usize,
    accumulate: bool,
) {
    debug_assert!(tables.len() == R * srcs.len() && dsts.len() == R && body.is_multiple_of(32));
    let n = srcs.len();
    let nibble = _mm256_set1_epi8(0x0f);
    let mut out_ptrs = [std::ptr::null_mut::<u8>(); R];
    for (p, d) in out_ptrs.iter_mut().zip(dsts.iter_mut()) {
        *p = d.as_mut_ptr();
    }
    let mut off = 0;
    while off < body {
        let mut acc = [_mm256_setzero_si256(); R];
        if accumulate {
            for r in 0..R {
                // SAFETY: off + 32 <= body <= the length of every output.
                acc[r] = unsafe { _mm256_loadu_si256(out_ptrs[r].add(off).cast()) };
            }
        }
        for i in 0..n {
            // SAFETY: i < n; off + 32 <= body <= the length of every source.
            let s = unsafe { _mm256_loadu_si256(srcs.get_unchecked(i).as_ptr().add(off).cast()) };
            let lo = _mm256_and_si256(s, nibble);
            let hi = _mm256_and_si256(_mm256_srli_epi64::<4>(s), nibble);
            for r in 0..R {
                // SAFETY: r * n + i < R * n = tables.len(); the tables are 32-byte aligned.
                let t = unsafe { tables.get_unchecked(r * n + i) };
                let (tlo, thi) = unsafe {
                    (
                        _mm256_load_si256(t.lo.as_ptr().cast()),
                        _mm256_load_si256(t.hi.as_ptr().cast()),
                    )
                };
                let p =
                    _mm256_xor_si256(_mm256_shuffle_epi8(tlo, lo), _mm256_shuffle_epi8(thi, hi));
                acc[r] = _mm256_xor_si256(acc[r], p);
            }
        }
        for r in 0..R {
            // SAFETY: as for the loads above.
            unsafe { _mm256_storeu_si256(out_ptrs[r].add(off).cast(), acc[r]) };
        }
        off += 32;
    }
}

/// Bytes `from..` of every region, portable.
fn tail(coeffs: &Coeffs, srcs: &[&[u8]], dsts: &mut [&mut [u8]], from: usize, accumulate: bool) {
    for (r, dst) in dsts.iter_mut().enumerate() {
        for b in from..dst.len() {
            let mut acc = if accumulate { dst[b] } else { 0 };
            for (i, src) in srcs.iter().enumerate() {
                acc ^= gf::mul(coeffs.get(r, i), src[b]);
            }
            dst[b] = acc;
        }
    }
}
