//! The portable kernel: one lookup in [`gf::MUL_TABLE`] per byte and coefficient.
//!
//! Outputs are computed one at a time over blocks of [`BLOCK_BYTES`] columns, so the block of
//! every source stays in L1/L2 while each output row re-reads it.

use super::Coeffs;
use crate::gf;

/// Columns per block: 4 KiB of each source and of the output row.
const BLOCK_BYTES: usize = 4096;

pub(super) fn dot(coeffs: &Coeffs, srcs: &[&[u8]], dsts: &mut [&mut [u8]], accumulate: bool) {
    let len = dsts[0].len();
    let mut start = 0;
    while start < len {
        let end = (start + BLOCK_BYTES).min(len);
        for (r, dst) in dsts.iter_mut().enumerate() {
            let out = &mut dst[start..end];
            if !accumulate {
                out.fill(0);
            }
            for (i, src) in srcs.iter().enumerate() {
                mul_xor(coeffs.get(r, i), &src[start..end], out);
            }
        }
        start = end;
    }
}

/// `dst ^= c · src`.
fn mul_xor(c: u8, src: &[u8], dst: &mut [u8]) {
    match c {
        0 => {}
        1 => dst.iter_mut().zip(src).for_each(|(d, s)| *d ^= s),
        _ => {
            let row = &gf::MUL_TABLE[c as usize];
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, &s)| *d ^= row[s as usize]);
        }
    }
}
