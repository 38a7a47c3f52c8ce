//! The AVX-512 + GFNI kernel: `vgf2p8affineqb` multiplies 64 bytes by a constant given as an
//! 8x8 bit matrix ([`super::affine_matrix`]); up to [`ROWS_PER_PASS`] accumulators stay in
//! registers while each source vector is loaded once. Two 64-byte columns per iteration give the
//! core independent work while a load is in flight. The tail (fewer than 64 bytes) uses masked
//! loads and stores, which touch no byte outside the mask.

// Accumulators, output pointers and coefficients are parallel arrays indexed by the output row.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{Coeffs, ROWS_PER_PASS};

/// Runs the dot product in passes of at most [`ROWS_PER_PASS`] output rows.
///
/// # Safety
/// The CPU must support AVX-512 F and BW and GFNI; every region in `srcs` and `dsts` must be
/// `len` bytes long and `srcs.len() == coeffs.cols()`, `dsts.len() == coeffs.rows()`.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(super) unsafe fn dot(
    coeffs: &Coeffs,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
    len: usize,
    accumulate: bool,
) {
    let n = coeffs.cols;
    let mut row = 0;
    while row < coeffs.rows {
        let rows = (coeffs.rows - row).min(ROWS_PER_PASS);
        let mats = &coeffs.affine[row * n..(row + rows) * n];
        let out = &mut dsts[row..row + rows];
        // SAFETY: forwarded from this function's contract; `mats` holds `rows * n` matrices.
        unsafe {
            match rows {
                1 => pass::<1>(mats, srcs, out, len, accumulate),
                2 => pass::<2>(mats, srcs, out, len, accumulate),
                3 => pass::<3>(mats, srcs, out, len, accumulate),
                _ => pass::<4>(mats, srcs, out, len, accumulate),
            }
        }
        row += rows;
    }
}

/// One pass computing `R` output rows.
///
/// # Safety
/// As [`dot`], with `mats.len() == R * srcs.len()` and `dsts.len() == R`.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn pass<const R: usize>(
    mats: &[u64],
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
    len: usize,
    accumulate: bool,
) {
    debug_assert!(mats.len() == R * srcs.len() && dsts.len() == R);
    let n = srcs.len();
    let mut out_ptrs = [std::ptr::null_mut::<u8>(); R];
    for (p, d) in out_ptrs.iter_mut().zip(dsts.iter_mut()) {
        *p = d.as_mut_ptr();
    }
    let mut off = 0;
    // Two vectors (128 bytes) per iteration.
    while off + 128 <= len {
        let mut a = [_mm512_setzero_si512(); R];
        let mut b = [_mm512_setzero_si512(); R];
        if accumulate {
            for r in 0..R {
                // SAFETY: off + 128 <= len, the length of every output.
                unsafe {
                    a[r] = _mm512_loadu_si512(out_ptrs[r].add(off).cast());
                    b[r] = _mm512_loadu_si512(out_ptrs[r].add(off + 64).cast());
                }
            }
        }
        for i in 0..n {
            // SAFETY: i < n = srcs.len(); off + 128 <= len, the length of every source.
            let (sa, sb) = unsafe {
                let p = srcs.get_unchecked(i).as_ptr().add(off);
                (
                    _mm512_loadu_si512(p.cast()),
                    _mm512_loadu_si512(p.add(64).cast()),
                )
            };
            for r in 0..R {
                // SAFETY: r * n + i < R * n = mats.len().
                let m = _mm512_set1_epi64(unsafe { *mats.get_unchecked(r * n + i) } as i64);
                a[r] = _mm512_xor_si512(a[r], _mm512_gf2p8affine_epi64_epi8::<0>(sa, m));
                b[r] = _mm512_xor_si512(b[r], _mm512_gf2p8affine_epi64_epi8::<0>(sb, m));
            }
        }
        for r in 0..R {
            // SAFETY: as for the loads above.
            unsafe {
                _mm512_storeu_si512(out_ptrs[r].add(off).cast(), a[r]);
                _mm512_storeu_si512(out_ptrs[r].add(off + 64).cast(), b[r]);
            }
        }
        off += 128;
    }
    while off < len {
        let take = (len - off).min(64);
        // All ones for a full vector, else the low `take` bytes.
        let mask: __mmask64 = if take == 64 { !0 } else { (1u64 << take) - 1 };
        let mut a = [_mm512_setzero_si512(); R];
        if accumulate {
            for r in 0..R {
                // SAFETY: the mask covers bytes off..off + take <= len only; masked-out bytes
                // are not accessed.
                a[r] = unsafe { _mm512_maskz_loadu_epi8(mask, out_ptrs[r].add(off).cast()) };
            }
        }
        for i in 0..n {
            // SAFETY: as above, for source i < n.
            let s = unsafe {
                _mm512_maskz_loadu_epi8(mask, srcs.get_unchecked(i).as_ptr().add(off).cast())
            };
            for r in 0..R {
                // SAFETY: r * n + i < R * n = mats.len().
                let m = _mm512_set1_epi64(unsafe { *mats.get_unchecked(r * n + i) } as i64);
                a[r] = _mm512_xor_si512(a[r], _mm512_gf2p8affine_epi64_epi8::<0>(s, m));
            }
        }
        for r in 0..R {
            // SAFETY: the mask covers bytes off..off + take <= len only.
            unsafe { _mm512_mask_storeu_epi8(out_ptrs[r].add(off).cast(), mask, a[r]) };
        }
        off += take;
    }
}
