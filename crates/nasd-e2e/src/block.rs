//! Block encryption of file contents (requirements B.2; seed 001 §3.3.1, seed 003).
//!
//! Each file block `i` is enciphered with HCTR2-AES-256 under the tweak
//! `T_i = file_id (16 B) ‖ i (8 B, LE) ‖ ctr_i (8 B, LE)`, where `ctr_i` counts the writes to
//! block `i` ([`crate::counters`]). The cipher is length-preserving, so object offsets equal file
//! offsets and the drive's integrity schemes work on ciphertext unchanged. Write counters replace
//! seed 001's per-block timestamps (§2.3): an old ciphertext replayed at the same place decrypts
//! under the current tweak to pseudo-random bytes, and a block moved to another place or file does
//! the same.
//!
//! Block size: [`DEFAULT_BLOCK_BYTES`] = 4 KiB, configurable as a power of two from
//! [`MIN_BLOCK_BYTES`] to [`MAX_BLOCK_BYTES`]. Seed 001 used 64 KB blocks (§3.3.1, sized for 1990s
//! RSA signatures per block); 4 KiB matches page-cache and file-system pages, keeps the
//! read-modify-write of a small write small, and keeps RAND-EINT's entropy test and COMP-EINT's
//! tag-in-block fitting per block meaningful. 64 KiB is allowed for the lab's seed-001 rows.
//!
//! A file's last block may be short. One shorter than HCTR2's 16-byte minimum is XORed with an
//! XCTR keystream under the cipher's key and a nonce that is a keyed hash of the block's tweak,
//! so encryption stays length-preserving for every length (a file of 5 bytes stores 5 bytes, and
//! the layout below never holds more than the file). Such a tail is not a wide-block cipher's
//! output (a bit flip flips one bit), which is why the integrity constructions check every tail
//! against the tree, whatever its entropy ([`crate::eint`], MT's pins).

use crate::hctr2::{Hctr2, HCTR2_BLOCK_BYTES, HCTR2_KEY_BYTES};
use crate::keys::{FileId, FileKey};
use zeroize::Zeroizing;

/// Default file block size: 4 KiB.
pub const DEFAULT_BLOCK_BYTES: u32 = 4096;
/// Smallest allowed block size: 1 KiB (EncFS's default).
pub const MIN_BLOCK_BYTES: u32 = 1024;
/// Largest allowed block size: 64 KiB (seed 001's 64 KB blocks).
pub const MAX_BLOCK_BYTES: u32 = 65536;
/// Bytes of a block tweak.
pub const TWEAK_BYTES: usize = 32;

const _: () = assert!(MIN_BLOCK_BYTES as usize >= HCTR2_BLOCK_BYTES);
const _: () =
    assert!(DEFAULT_BLOCK_BYTES >= MIN_BLOCK_BYTES && DEFAULT_BLOCK_BYTES <= MAX_BLOCK_BYTES);

/// Whether `b` is an allowed block size.
pub fn valid_block_bytes(b: u32) -> bool {
    b.is_power_of_two() && (MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&b)
}

/// Bytes stored for a block of `len` plaintext bytes: `len` (the cipher is length-preserving).
pub fn stored_len(len: usize) -> usize {
    len
}

/// The tweak `file_id ‖ i ‖ ctr_i` of B.2.
pub fn tweak(file_id: FileId, index: u64, ctr: u64) -> [u8; TWEAK_BYTES] {
    let mut t = [0u8; TWEAK_BYTES];
    t[..16].copy_from_slice(&file_id.0);
    t[16..24].copy_from_slice(&index.to_le_bytes());
    t[24..].copy_from_slice(&ctr.to_le_bytes());
    t
}

/// HCTR2 keyed for one file key version: enciphers and deciphers that file's blocks.
#[derive(Debug)]
pub struct BlockCipher {
    file_id: FileId,
    hctr2: Hctr2,
    /// Keys the nonce of a tail shorter than 16 bytes.
    short_key: Zeroizing<[u8; 32]>,
}

/// KDF context of the HCTR2 key (BLAKE3 `derive_key` mode: a KDF keyed by the file key).
const BLOCK_KEY_CONTEXT: &str = "nasd-e2e 2026 block cipher key v1";
/// KDF context of the short-tail nonce key.
const SHORT_KEY_CONTEXT: &str = "nasd-e2e 2026 short tail nonce key v1";

impl BlockCipher {
    pub fn new(file_id: FileId, key: &FileKey) -> BlockCipher {
        let k = Zeroizing::new(blake3::derive_key(BLOCK_KEY_CONTEXT, key.expose()));
        let k: &[u8; HCTR2_KEY_BYTES] = &k;
        BlockCipher {
            file_id,
            hctr2: Hctr2::new(k),
            short_key: Zeroizing::new(blake3::derive_key(SHORT_KEY_CONTEXT, key.expose())),
        }
    }

    /// A tail shorter than 16 bytes, enciphered or deciphered: XCTR keystream at a nonce
    /// keyed from the tweak.
    fn short(&self, index: u64, ctr: u64, buf: &mut [u8]) {
        let h = blake3::keyed_hash(&self.short_key, &tweak(self.file_id, index, ctr));
        let mut nonce = [0u8; HCTR2_BLOCK_BYTES];
        nonce.copy_from_slice(&h.as_bytes()[..HCTR2_BLOCK_BYTES]);
        self.hctr2.xctr(&nonce, buf);
    }

    pub fn file_id(&self) -> FileId {
        self.file_id
    }

    /// Enciphers `buf` in place as block `index` at write count `ctr`.
    pub fn encrypt_in_place(&self, index: u64, ctr: u64, buf: &mut [u8]) {
        if buf.len() < HCTR2_BLOCK_BYTES {
            return self.short(index, ctr, buf);
        }
        self.hctr2.encrypt(&tweak(self.file_id, index, ctr), buf);
    }

    /// Deciphers `buf` in place as block `index` at write count `ctr`.
    pub fn decrypt_in_place(&self, index: u64, ctr: u64, buf: &mut [u8]) {
        if buf.len() < HCTR2_BLOCK_BYTES {
            return self.short(index, ctr, buf);
        }
        self.hctr2.decrypt(&tweak(self.file_id, index, ctr), buf);
    }

    /// The ciphertext of plaintext block `plain` (as long).
    pub fn encrypt(&self, index: u64, ctr: u64, plain: &[u8]) -> Vec<u8> {
        let mut buf = plain.to_vec();
        self.encrypt_in_place(index, ctr, &mut buf);
        buf
    }

    /// The plaintext of a stored block whose true length is `len`, or `None` if the ciphertext
    /// has another length.
    pub fn decrypt(&self, index: u64, ctr: u64, stored: &[u8], len: usize) -> Option<Vec<u8>> {
        if stored.len() != stored_len(len) {
            return None;
        }
        let mut buf = stored.to_vec();
        self.decrypt_in_place(index, ctr, &mut buf);
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entropy::tests::{prng_bytes, text_bytes};
    use crate::entropy::EntropyTest;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// RAND-EINT's premise (B.2): any single-bit change to a ciphertext block turns the whole
        /// deciphered block into bytes that pass `IsRand`, whatever the plaintext was.
        #[test]
        fn a_flipped_bit_deciphers_to_random_looking_bytes(
            seed in any::<u64>(),
            kind in 0u8..3,
            bit in 0usize..4096 * 8,
            ctr in 1u64..1000,
        ) {
            let c = cipher();
            let plain = match kind {
                0 => text_bytes(seed, 4096),
                1 => vec![0u8; 4096],
                _ => {
                    let mut v = vec![0u8; 4096];
                    prng_bytes(seed, &mut v[..64]);
                    v
                }
            };
            let mut s = c.encrypt(7, ctr, &plain);
            s[bit / 8] ^= 1 << (bit % 8);
            let garbled = c.decrypt(7, ctr, &s, 4096).unwrap();
            prop_assert!(EntropyTest::new(4096).is_random_looking(&garbled));
            let same = garbled.iter().zip(&plain).filter(|(a, b)| a == b).count();
            // Uniform bytes agree with a fixed block in 16 places on average.
            prop_assert!(same < 64, "{same} bytes survived");
        }
    }

    fn cipher() -> BlockCipher {
        BlockCipher::new(FileId::from_u128(9), &FileKey::from_bytes([3; 32]))
    }

    #[test]
    fn block_sizes() {
        assert!(valid_block_bytes(4096));
        assert!(valid_block_bytes(1024));
        assert!(valid_block_bytes(65536));
        assert!(!valid_block_bytes(512));
        assert!(!valid_block_bytes(3000));
        assert!(!valid_block_bytes(131072));
    }

    #[test]
    fn every_length_is_preserved_and_short_tails_are_keyed_by_their_tweak() {
        let c = cipher();
        for len in [1usize, 5, 15, 16, 17, 4096] {
            let p: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let s = c.encrypt(4, 2, &p);
            assert_eq!(s.len(), len);
            assert_ne!(s, p);
            assert_eq!(c.decrypt(4, 2, &s, len).unwrap(), p);
            assert!(c.decrypt(4, 2, &s[..s.len() - 1], len).is_none());
            assert_ne!(c.decrypt(4, 3, &s, len).unwrap(), p, "another counter");
            assert_ne!(c.decrypt(5, 2, &s, len).unwrap(), p, "another place");
        }
        // Two tails of the same length under different tweaks share no keystream.
        let z = [0u8; 9];
        assert_ne!(c.encrypt(0, 1, &z), c.encrypt(0, 2, &z));
    }

    #[test]
    fn the_tweak_binds_file_index_and_counter() {
        let c = cipher();
        let p = vec![0x41u8; 4096];
        let base = c.encrypt(1, 1, &p);
        assert_ne!(base, c.encrypt(2, 1, &p));
        assert_ne!(base, c.encrypt(1, 2, &p));
        let other = BlockCipher::new(FileId::from_u128(10), &FileKey::from_bytes([3; 32]));
        assert_ne!(base, other.encrypt(1, 1, &p));
        // Identical plaintext blocks do not give identical ciphertext blocks.
        assert_ne!(base[..16], base[16..32]);
    }
}
