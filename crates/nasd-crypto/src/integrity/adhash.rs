//! AdHash (Bellare-Micciancio, seed 000 §3.3): the digest of a block is the sum modulo 2^256 of
//! the hashes of its 256-byte sub-blocks, each hash bound to its sub-block's index, so a
//! sub-block can be replaced by subtracting its old hash and adding its new one, and a partial
//! block's digest can be had from the stored sum minus the hashes of the part not read (the
//! "complementary property").
//!
//! The index is bound the way seed 000 §3.3.2 proposes, in the hash's IV rather than as extra
//! input: with BLAKE3 the sub-block is hashed as a chunk whose chunk counter is its index (the
//! counter is part of the compression function's state). SHA-256 exposes no IV, so there the
//! index is hashed as an 8-byte prefix; with SHA-256's padding this costs the same five
//! compressions per 256-byte sub-block.
//!
//! **Security note.** Wagner's generalized-birthday attack (CRYPTO 2002) finds AdHash
//! collisions for a 256-bit modulus in roughly 2^(256/(1+lg k)) work, far below 2^128; seed 000
//! predates it. nasd keeps `incremental` so the seed's cost comparison can be measured on real
//! code, and does not offer it as a default.

use crate::primitives::Digest;
use crate::Cost;
use blake3::hazmat::HasherExt;
use nasd_proto::Suite;

/// A 256-bit integer modulo 2^256, little-endian limbs.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Sum([u64; 4]);

impl Sum {
    pub const ZERO: Sum = Sum([0; 4]);

    pub fn from_bytes(b: &Digest) -> Sum {
        let mut l = [0u64; 4];
        for (i, limb) in l.iter_mut().enumerate() {
            *limb = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        }
        Sum(l)
    }
    pub fn to_bytes(&self) -> Digest {
        let mut b = [0u8; 32];
        for i in 0..4 {
            b[i * 8..i * 8 + 8].copy_from_slice(&self.0[i].to_le_bytes());
        }
        b
    }
    /// Adds modulo 2^256 (the combine operator of seed 000 §3.3.1).
    pub fn add(&mut self, h: &Digest, cost: &mut Cost) {
        cost.adds += 1;
        let o = Sum::from_bytes(h).0;
        let mut carry = false;
        for (a, b) in self.0.iter_mut().zip(o) {
            let (s1, c1) = a.overflowing_add(b);
            let (s2, c2) = s1.overflowing_add(carry as u64);
            *a = s2;
            carry = c1 || c2;
        }
    }
    /// Subtracts modulo 2^256 (the inverse).
    pub fn sub(&mut self, h: &Digest, cost: &mut Cost) {
        cost.subs += 1;
        let o = Sum::from_bytes(h).0;
        let mut borrow = false;
        for (a, b) in self.0.iter_mut().zip(o) {
            let (s1, c1) = a.overflowing_sub(b);
            let (s2, c2) = s1.overflowing_sub(borrow as u64);
            *a = s2;
            borrow = c1 || c2;
        }
    }
}

/// `h(i, x)`: the hash of sub-block (or sub-block piece) `x` whose global sub-block index is `i`.
///
/// Callers keep `index` below `OBJECT_BYTES_MAX / 256` (regions are checked against the
/// protocol's object limit first), so the BLAKE3 counter offset `index * 1024` cannot overflow.
pub fn sub_hash(suite: Suite, index: u64, x: &[u8], cost: &mut Cost) -> Digest {
    debug_assert!(x.len() as u64 <= super::SUB_BLOCK_BYTES);
    debug_assert!(index <= nasd_proto::OBJECT_BYTES_MAX / super::SUB_BLOCK_BYTES);
    match suite {
        Suite::Blake3 => {
            cost.data(x.len(), x.len());
            let mut h = blake3::Hasher::new();
            h.set_input_offset(index * 1024);
            h.update(x);
            h.finalize_non_root()
        }
        Suite::Sha256 => crate::primitives::hash_data(suite, &index.to_le_bytes(), x, cost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_sub_inverse_with_carries() {
        let mut c = Cost::default();
        let mut s = Sum([u64::MAX, u64::MAX, 0, 7]);
        let start = s;
        let h = [0xffu8; 32];
        s.add(&h, &mut c);
        assert_ne!(s, start);
        s.sub(&h, &mut c);
        assert_eq!(s, start);
        assert_eq!((c.adds, c.subs), (1, 1));
    }

    #[test]
    fn wraps_modulo_2_256() {
        let mut c = Cost::default();
        let mut s = Sum::from_bytes(&[0xff; 32]);
        let mut one = [0u8; 32];
        one[0] = 1;
        s.add(&one, &mut c);
        assert_eq!(s, Sum::ZERO);
    }

    #[test]
    fn index_is_bound() {
        let mut c = Cost::default();
        for suite in [Suite::Blake3, Suite::Sha256] {
            let x = [5u8; 256];
            assert_ne!(
                sub_hash(suite, 0, &x, &mut c),
                sub_hash(suite, 1, &x, &mut c)
            );
        }
    }
}
