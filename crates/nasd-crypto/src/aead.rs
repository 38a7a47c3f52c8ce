//! AES-256-GCM from `ring` (AES-NI and CLMUL where the CPU has them), used for privacy of
//! arguments and data (seed 002 Table 7), sealed capabilities and wrapped keys.
//!
//! Nonce discipline: request privacy never reuses a (key, nonce) pair because the key itself
//! is derived per request from the capability key and the request's unique nonce
//! ([`crate::request::privacy_key`]), and each field under it uses a distinct fixed nonce.

use crate::key::Key;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

/// Bytes of the authentication tag appended to every ciphertext.
pub const TAG_BYTES: usize = 16;

fn key(k: &Key) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, k.expose()).expect("32-byte AES-256 key"))
}

/// Encrypts `plain`, returning ciphertext || tag.
pub fn seal(k: &Key, nonce: [u8; 12], aad: &[u8], plain: &[u8]) -> Vec<u8> {
    let mut buf = plain.to_vec();
    seal_in_place(k, nonce, aad, &mut buf);
    buf
}

/// Encrypts `buf` in place and appends the tag.
pub fn seal_in_place(k: &Key, nonce: [u8; 12], aad: &[u8], buf: &mut Vec<u8>) {
    let tag = key(k)
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), buf)
        .expect("AES-GCM seal cannot fail below its length limit");
    buf.extend_from_slice(tag.as_ref());
}

/// Decrypts ciphertext || tag; `None` if anything was altered.
pub fn open(k: &Key, nonce: [u8; 12], aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
    let mut buf = sealed.to_vec();
    let n = open_in_place(k, nonce, aad, &mut buf)?;
    buf.truncate(n);
    Some(buf)
}

/// Decrypts in place; returns the plaintext length (the tag is left past it).
pub fn open_in_place(k: &Key, nonce: [u8; 12], aad: &[u8], buf: &mut [u8]) -> Option<usize> {
    let plain = key(k)
        .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), buf)
        .ok()?;
    Some(plain.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper() {
        let k = Key::from_bytes([7; 32]);
        let ct = seal(&k, [1; 12], b"aad", b"hello world");
        assert_eq!(ct.len(), 11 + TAG_BYTES);
        assert_eq!(open(&k, [1; 12], b"aad", &ct).unwrap(), b"hello world");
        for i in 0..ct.len() * 8 {
            let mut bad = ct.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(open(&k, [1; 12], b"aad", &bad).is_none(), "bit {i}");
        }
        assert!(open(&k, [1; 12], b"aaD", &ct).is_none());
        assert!(open(&k, [2; 12], b"aad", &ct).is_none());
        assert!(open(&Key::from_bytes([8; 32]), [1; 12], b"aad", &ct).is_none());
    }

    /// Known-answer vector: AES-256-GCM test case 14 of the GCM specification (McGrew-Viega),
    /// zero key, zero IV, one zero block.
    #[test]
    fn gcm_known_answer() {
        let k = Key::from_bytes([0; 32]);
        let ct = seal(&k, [0; 12], b"", &[0u8; 16]);
        assert_eq!(
            hex::encode(&ct),
            "cea7403d4d606b6e074ec5d3baf39d18d0d1c8a799996bf0265b98b5d48ab919"
        );
    }
}
