//! Secret keys of the hierarchy of seed 002 Table 6 and capability keys.
//!
//! A [`Key`] is 32 bytes, zeroized when dropped, and never printed: its `Debug` shows only a
//! short fingerprint (a hash of the key, safe to log) so two keys can be told apart in a trace.

use zeroize::{Zeroize, ZeroizeOnDrop};

/// Bytes in every key.
pub const KEY_BYTES: usize = 32;

#[derive(Clone, Zeroize, ZeroizeOnDrop, PartialEq, Eq)]
pub struct Key([u8; KEY_BYTES]);

impl Key {
    pub fn from_bytes(b: [u8; KEY_BYTES]) -> Key {
        Key(b)
    }
    pub fn from_slice(b: &[u8]) -> Option<Key> {
        let a: [u8; KEY_BYTES] = b.try_into().ok()?;
        Some(Key(a))
    }
    /// A fresh key from the operating system's CSPRNG.
    pub fn generate() -> Key {
        let mut b = [0u8; KEY_BYTES];
        crate::random_bytes(&mut b);
        Key(b)
    }
    pub fn expose(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }
    /// Lower-case hex of the secret, for key files only.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn from_hex(s: &str) -> Option<Key> {
        let v = hex::decode(s.trim()).ok()?;
        Key::from_slice(&v)
    }
    /// First 8 hex digits of BLAKE3("nasd key fingerprint" || key): identifies, reveals nothing.
    pub fn fingerprint(&self) -> String {
        let h = blake3::keyed_hash(&blake3::derive_key("nasd key fingerprint v1", &[]), &self.0);
        hex::encode(&h.as_bytes()[..4])
    }
    /// A full-width BLAKE3 digest of the key, for memo tables that must tell keys apart
    /// without holding them (the drive's capability-key cache): equal keys give equal ids,
    /// distinct keys distinct ones (collision resistance), and an id reveals nothing of its
    /// key. Domain-separated from [`Key::fingerprint`] and from every MAC of the suites.
    pub fn id(&self) -> [u8; KEY_BYTES] {
        *blake3::keyed_hash(KEY_ID_DOMAIN, &self.0).as_bytes()
    }
}

/// The fixed BLAKE3 key of [`Key::id`]: a public constant, so it only separates domains.
const KEY_ID_DOMAIN: &[u8; KEY_BYTES] = b"nasd key id v1 (memo tables)\0\0\0\0";

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key(fp:{})", self.fingerprint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_secret() {
        let k = Key::from_bytes([0xab; 32]);
        let s = format!("{k:?}");
        assert!(!s.contains("abab"), "{s}");
        assert!(s.starts_with("Key(fp:"));
    }

    #[test]
    fn ids_tell_keys_apart_and_hide_them() {
        let (a, b) = (Key::from_bytes([1; 32]), Key::from_bytes([2; 32]));
        assert_eq!(a.id(), a.clone().id());
        assert_ne!(a.id(), b.id());
        assert_ne!(&a.id(), a.expose());
    }

    #[test]
    fn hex_round_trip() {
        let k = Key::generate();
        assert_eq!(Key::from_hex(&k.to_hex()).unwrap(), k);
        assert!(Key::from_hex("abcd").is_none());
    }
}
