//! Protected storage of a drive's key hierarchy (seed 002 §2.4: keys kept where the drive's
//! owner, not whoever reads its disk, controls them). A drive may keep its master, drive,
//! partition and working keys *sealed* in its metadata database under a key-encryption key
//! derived from a passphrase with Argon2id (RFC 9106); it then needs the passphrase to start,
//! and a copy of its database is useless without it.
//!
//! Each key is sealed with AES-256-GCM-SIV (RFC 8452) under the KEK, with a zero nonce and the
//! key's slot (say `partition 1/working-current`) as associated data: deterministic, so the
//! records a drive rewrites on every commit come out the same and no nonce can ever be reused
//! dangerously (GCM-SIV's nonce-misuse resistance, RFC 8452 §1), and bound to its slot, so a
//! sealed key cannot be moved into another slot. A check value `MAC(KEK, "nasd-seal-check-v1")`
//! stored with the Argon2 parameters tells a wrong passphrase from a damaged record.
//!
//! ```text
//! seal header v1 (61 bytes): u8 version, 16B salt, u32 m_cost_kib, u32 t_cost, u32 p_cost,
//!                            32B check
//! sealed key (48 bytes):     AES-256-GCM-SIV(KEK, nonce = 12 zero bytes, aad = "nasd-seal-v1" || slot, key)
//! ```

use crate::key::Key;
use crate::primitives::ct_eq;
use aes_gcm_siv::aead::{Aead, KeyInit, Payload};
use aes_gcm_siv::Aes256GcmSiv;

/// Bytes of a sealed key: the 32-byte key and a 16-byte tag.
pub const SEALED_KEY_BYTES: usize = 48;
/// Bytes of an encoded [`SealHeader`].
pub const SEAL_HEADER_BYTES: usize = 61;
/// Argon2id memory, KiB (64 MiB: costly to guess, affordable once at start-up).
pub const ARGON2_M_COST_KIB: u32 = 64 * 1024;
/// Argon2id passes.
pub const ARGON2_T_COST: u32 = 3;
/// Argon2id lanes.
pub const ARGON2_P_COST: u32 = 1;
/// Most memory a stored header may ask of Argon2, KiB (a damaged header must not make the drive
/// allocate without bound).
pub const ARGON2_M_COST_KIB_MAX: u32 = 4 * 1024 * 1024;
/// Most passes a stored header may ask.
pub const ARGON2_T_COST_MAX: u32 = 64;
const VERSION: u8 = 1;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("wrong passphrase for the drive's sealed keys")]
    WrongPassphrase,
    #[error("the seal header is damaged: {0}")]
    BadHeader(&'static str),
    #[error("argon2: {0}")]
    Argon2(String),
}

/// The stored half of a seal: how to derive the KEK again, and how to know it is right.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealHeader {
    pub salt: [u8; 16],
    pub m_cost_kib: u32,
    pub t_cost: u32,
    pub p_cost: u32,
    pub check: [u8; 32],
}

impl SealHeader {
    pub fn encode(&self) -> [u8; SEAL_HEADER_BYTES] {
        let mut b = [0u8; SEAL_HEADER_BYTES];
        b[0] = VERSION;
        b[1..17].copy_from_slice(&self.salt);
        b[17..21].copy_from_slice(&self.m_cost_kib.to_le_bytes());
        b[21..25].copy_from_slice(&self.t_cost.to_le_bytes());
        b[25..29].copy_from_slice(&self.p_cost.to_le_bytes());
        b[29..61].copy_from_slice(&self.check);
        b
    }

    pub fn decode(b: &[u8]) -> Result<SealHeader, SealError> {
        if b.len() != SEAL_HEADER_BYTES || b[0] != VERSION {
            return Err(SealError::BadHeader("length or version"));
        }
        let u = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let h = SealHeader {
            salt: b[1..17].try_into().expect("16 bytes"),
            m_cost_kib: u(17),
            t_cost: u(21),
            p_cost: u(25),
            check: b[29..61].try_into().expect("32 bytes"),
        };
        if h.m_cost_kib > ARGON2_M_COST_KIB_MAX || h.t_cost > ARGON2_T_COST_MAX || h.p_cost == 0 {
            return Err(SealError::BadHeader("Argon2 parameters out of range"));
        }
        Ok(h)
    }
}

/// An unlocked seal: the KEK (zeroized on drop, never printed) and its header.
pub struct KeySeal {
    kek: Key,
    header: SealHeader,
}

impl std::fmt::Debug for KeySeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeySeal({:?})", self.kek)
    }
}

fn derive_kek(passphrase: &[u8], h: &SealHeader) -> Result<Key, SealError> {
    let params = argon2::Params::new(h.m_cost_kib, h.t_cost, h.p_cost, Some(32))
        .map_err(|e| SealError::Argon2(e.to_string()))?;
    let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut out = [0u8; 32];
    a.hash_password_into(passphrase, &h.salt, &mut out)
        .map_err(|e| SealError::Argon2(e.to_string()))?;
    let k = Key::from_bytes(out);
    zeroize::Zeroize::zeroize(&mut out);
    Ok(k)
}

fn check_value(kek: &Key) -> [u8; 32] {
    *blake3::keyed_hash(kek.expose(), b"nasd-seal-check-v1").as_bytes()
}

impl KeySeal {
    /// A new seal for `passphrase` with a fresh salt and the default Argon2id cost.
    pub fn create(passphrase: &[u8]) -> Result<KeySeal, SealError> {
        Self::create_with_cost(passphrase, ARGON2_M_COST_KIB, ARGON2_T_COST)
    }

    /// A new seal with a chosen Argon2id cost (tests use a cheap one).
    pub fn create_with_cost(
        passphrase: &[u8],
        m_cost_kib: u32,
        t_cost: u32,
    ) -> Result<KeySeal, SealError> {
        let mut salt = [0u8; 16];
        crate::random_bytes(&mut salt);
        Self::create_with_salt(passphrase, salt, m_cost_kib, t_cost)
    }

    /// A new seal with a given salt (known-answer vectors).
    pub fn create_with_salt(
        passphrase: &[u8],
        salt: [u8; 16],
        m_cost_kib: u32,
        t_cost: u32,
    ) -> Result<KeySeal, SealError> {
        let mut header = SealHeader {
            salt,
            m_cost_kib,
            t_cost,
            p_cost: ARGON2_P_COST,
            check: [0; 32],
        };
        let kek = derive_kek(passphrase, &header)?;
        header.check = check_value(&kek);
        Ok(KeySeal { kek, header })
    }

    /// Unlocks a stored seal; a wrong passphrase is told apart from a damaged header.
    pub fn unlock(passphrase: &[u8], header: &SealHeader) -> Result<KeySeal, SealError> {
        let kek = derive_kek(passphrase, header)?;
        if !ct_eq(&check_value(&kek), &header.check) {
            return Err(SealError::WrongPassphrase);
        }
        Ok(KeySeal {
            kek,
            header: header.clone(),
        })
    }

    pub fn header(&self) -> &SealHeader {
        &self.header
    }

    fn cipher(&self) -> Aes256GcmSiv {
        Aes256GcmSiv::new_from_slice(self.kek.expose()).expect("32-byte key")
    }

    fn aad(slot: &str) -> Vec<u8> {
        [b"nasd-seal-v1".as_slice(), slot.as_bytes()].concat()
    }

    /// Seals `key` for `slot`.
    pub fn seal(&self, slot: &str, key: &Key) -> [u8; SEALED_KEY_BYTES] {
        let aad = Self::aad(slot);
        let v = self
            .cipher()
            .encrypt(
                &[0u8; 12].into(),
                Payload {
                    msg: key.expose(),
                    aad: &aad,
                },
            )
            .expect("sealing 32 bytes cannot fail");
        v.try_into().expect("32-byte key + 16-byte tag")
    }

    /// Seals `secret` of any length for `slot` (the same construction as [`KeySeal::seal`]; a
    /// file of secrets, such as the manager's OPAQUE server keys). Deterministic: one secret in
    /// one slot seals to the same bytes.
    pub fn seal_bytes(&self, slot: &str, secret: &[u8]) -> Vec<u8> {
        let aad = Self::aad(slot);
        self.cipher()
            .encrypt(
                &[0u8; 12].into(),
                Payload {
                    msg: secret,
                    aad: &aad,
                },
            )
            .expect("sealing cannot fail")
    }

    /// Opens what [`KeySeal::seal_bytes`] sealed for `slot` (zeroized when dropped).
    pub fn open_bytes(&self, slot: &str, sealed: &[u8]) -> Option<zeroize::Zeroizing<Vec<u8>>> {
        let aad = Self::aad(slot);
        self.cipher()
            .decrypt(
                &[0u8; 12].into(),
                Payload {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .ok()
            .map(zeroize::Zeroizing::new)
    }

    /// Opens a key sealed for `slot`; `None` if it was sealed for another slot, under another
    /// passphrase, or damaged.
    pub fn open(&self, slot: &str, sealed: &[u8; SEALED_KEY_BYTES]) -> Option<Key> {
        let aad = Self::aad(slot);
        let mut v = self
            .cipher()
            .decrypt(
                &[0u8; 12].into(),
                Payload {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .ok()?;
        let k = Key::from_slice(&v);
        zeroize::Zeroize::zeroize(&mut v);
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Argon2 at its cheapest, so tests stay fast; the cost is a stored parameter.
    fn cheap(p: &[u8]) -> KeySeal {
        KeySeal::create_with_cost(p, 8, 1).unwrap()
    }

    #[test]
    fn seals_open_only_with_the_passphrase_and_in_their_slot() {
        let s = cheap(b"correct horse");
        let k = Key::generate();
        let sealed = s.seal("partition 1/working-current", &k);
        assert_eq!(
            s.seal("partition 1/working-current", &k),
            sealed,
            "deterministic"
        );
        assert_eq!(
            s.open("partition 1/working-current", &sealed),
            Some(k.clone())
        );
        assert_eq!(s.open("partition 1/working-previous", &sealed), None);
        let h = SealHeader::decode(&s.header().encode()).unwrap();
        assert_eq!(
            KeySeal::unlock(b"wrong", &h).unwrap_err(),
            SealError::WrongPassphrase
        );
        let again = KeySeal::unlock(b"correct horse", &h).unwrap();
        assert_eq!(again.open("partition 1/working-current", &sealed), Some(k));
        let mut bad = sealed;
        bad[5] ^= 1;
        assert_eq!(again.open("partition 1/working-current", &bad), None);
    }

    #[test]
    fn sealed_bytes_open_only_in_their_slot_and_unchanged() {
        let s = cheap(b"correct horse");
        let secret = vec![7u8; 150];
        let sealed = s.seal_bytes("opaque server keys", &secret);
        assert_eq!(sealed.len(), 150 + 16);
        assert_eq!(s.seal_bytes("opaque server keys", &secret), sealed);
        assert_eq!(
            s.open_bytes("opaque server keys", &sealed).as_deref(),
            Some(&secret)
        );
        assert!(s.open_bytes("drive 1/drive", &sealed).is_none());
        let mut bad = sealed.clone();
        bad[100] ^= 1;
        assert!(s.open_bytes("opaque server keys", &bad).is_none());
        assert!(cheap(b"other")
            .open_bytes("opaque server keys", &sealed)
            .is_none());
    }

    #[test]
    fn damaged_headers_are_refused_before_any_work() {
        let s = cheap(b"p");
        let mut b = s.header().encode();
        b[17..21].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            SealHeader::decode(&b),
            Err(SealError::BadHeader(_))
        ));
        assert!(SealHeader::decode(&b[..10]).is_err());
    }

    #[test]
    fn debug_prints_no_secret() {
        let s = cheap(b"p");
        let text = format!("{s:?}");
        assert!(!text.contains(&s.kek.to_hex()[..16]), "{text}");
    }
}
