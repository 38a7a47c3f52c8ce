//! Writer signatures (requirements B.4; seed 001 §2.2, §2.4 and scheme 1 of §3.3.1).
//!
//! Seed 001's scheme 1 has each block "encrypted, hashed and signed before it is written" so the
//! disk holds nothing that helps forgery and readers get non-repudiation (Figs 2–4). Here the
//! writer signs with Ed25519:
//!
//! - per block: `σ = Sign(sk_uid, "nasd-blk-v1" ‖ file_id ‖ i ‖ ctr_i ‖ H(C_i))`, with `H` =
//!   BLAKE3 and `i`, `ctr_i` 8-byte little-endian; σ is stored beside the block in the side object;
//! - per file version (the cheaper option of B.4): `Sign(sk_uid, "nasd-rec-v1" ‖ file_id ‖
//!   TrustedRecord encoding)` at each commit.
//!
//! Readers verify with the writer's public key obtained from the manager over TLS. The writer's
//! counter in the message means a replayed old block with its old signature fails against the
//! current counter (seed 001 §2.3's timestamp rule, with the counter in the timestamp's place).

use crate::keys::FileId;
use crate::record::TrustedRecord;
use ed25519_dalek::{Signer, Verifier};
use thiserror::Error;

/// Bytes of an Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// Domain label of block signatures.
pub const BLOCK_LABEL: &[u8; 11] = b"nasd-blk-v1";
/// Domain label of record signatures.
pub const RECORD_LABEL: &[u8; 11] = b"nasd-rec-v1";
/// Bytes of a block's signed message: label, file id, index, counter, ciphertext hash.
pub const BLOCK_MESSAGE_BYTES: usize = 11 + 16 + 8 + 8 + 32;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SignatureError {
    #[error("the signature does not verify under the writer's key")]
    Invalid,
    #[error("the writer's public key is not a valid Ed25519 point")]
    BadPublicKey,
}

/// The message a block signature covers.
pub fn block_message(
    file_id: FileId,
    index: u64,
    ctr: u64,
    ciphertext: &[u8],
) -> [u8; BLOCK_MESSAGE_BYTES] {
    let mut m = [0u8; BLOCK_MESSAGE_BYTES];
    m[..11].copy_from_slice(BLOCK_LABEL);
    m[11..27].copy_from_slice(&file_id.0);
    m[27..35].copy_from_slice(&index.to_le_bytes());
    m[35..43].copy_from_slice(&ctr.to_le_bytes());
    m[43..].copy_from_slice(blake3::hash(ciphertext).as_bytes());
    m
}

/// The message a record signature covers.
pub fn record_message(file_id: FileId, record: &TrustedRecord) -> Vec<u8> {
    let mut m = Vec::with_capacity(11 + 16 + TrustedRecord::BOUND_BYTES);
    m.extend_from_slice(RECORD_LABEL);
    m.extend_from_slice(&file_id.0);
    m.extend_from_slice(&record.encode());
    m
}

/// A writer's Ed25519 signing key. Zeroized on drop; `Debug` shows the public key only.
pub struct WriterKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for WriterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WriterKey(public {:02x?}..)", &self.public().0[..8])
    }
}

/// A writer's Ed25519 public key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WriterPublicKey(pub [u8; 32]);

impl WriterKey {
    /// A key from its 32-byte seed (the user's existing Ed25519 key, or a fresh random one).
    pub fn from_seed(seed: &[u8; 32]) -> WriterKey {
        WriterKey(ed25519_dalek::SigningKey::from_bytes(seed))
    }

    /// A fresh key from the OS CSPRNG.
    pub fn generate() -> WriterKey {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        hpke::rand_core::Rng::fill_bytes(&mut crate::keys::os_rng(), seed.as_mut());
        WriterKey::from_seed(&seed)
    }

    pub fn public(&self) -> WriterPublicKey {
        WriterPublicKey(self.0.verifying_key().to_bytes())
    }

    pub fn sign_block(
        &self,
        file_id: FileId,
        index: u64,
        ctr: u64,
        ciphertext: &[u8],
    ) -> [u8; SIGNATURE_BYTES] {
        self.0
            .sign(&block_message(file_id, index, ctr, ciphertext))
            .to_bytes()
    }

    pub fn sign_record(&self, file_id: FileId, record: &TrustedRecord) -> [u8; SIGNATURE_BYTES] {
        self.0.sign(&record_message(file_id, record)).to_bytes()
    }
}

fn verify(
    pk: &WriterPublicKey,
    msg: &[u8],
    sig: &[u8; SIGNATURE_BYTES],
) -> Result<(), SignatureError> {
    let vk =
        ed25519_dalek::VerifyingKey::from_bytes(&pk.0).map_err(|_| SignatureError::BadPublicKey)?;
    // Strict verification refuses non-canonical and small-order encodings (no malleability).
    vk.verify_strict(msg, &ed25519_dalek::Signature::from_bytes(sig))
        .map_err(|_| SignatureError::Invalid)
}

impl WriterPublicKey {
    pub fn verify_block(
        &self,
        file_id: FileId,
        index: u64,
        ctr: u64,
        ciphertext: &[u8],
        sig: &[u8; SIGNATURE_BYTES],
    ) -> Result<(), SignatureError> {
        verify(self, &block_message(file_id, index, ctr, ciphertext), sig)
    }

    pub fn verify_record(
        &self,
        file_id: FileId,
        record: &TrustedRecord,
        sig: &[u8; SIGNATURE_BYTES],
    ) -> Result<(), SignatureError> {
        verify(self, &record_message(file_id, record), sig)
    }
}

// `Verifier` is used through `verify_strict`'s trait bounds in some versions of the crate.
#[allow(unused_imports)]
use Verifier as _;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Scheme;

    #[test]
    fn block_signatures_bind_every_field() {
        let w = WriterKey::from_seed(&[5; 32]);
        let pk = w.public();
        let f = FileId::from_u128(1);
        let c = b"ciphertext block".to_vec();
        let sig = w.sign_block(f, 3, 2, &c);
        assert_eq!(pk.verify_block(f, 3, 2, &c, &sig), Ok(()));
        assert_eq!(
            pk.verify_block(FileId::from_u128(2), 3, 2, &c, &sig),
            Err(SignatureError::Invalid)
        );
        assert!(pk.verify_block(f, 4, 2, &c, &sig).is_err());
        assert!(
            pk.verify_block(f, 3, 1, &c, &sig).is_err(),
            "an old counter"
        );
        assert!(pk.verify_block(f, 3, 2, b"other", &sig).is_err());
        let mut bad = sig;
        bad[0] ^= 1;
        assert!(pk.verify_block(f, 3, 2, &c, &bad).is_err());
        let other = WriterKey::from_seed(&[6; 32]).public();
        assert!(other.verify_block(f, 3, 2, &c, &sig).is_err());
        assert!(!format!("{w:?}").contains("0505"));
    }

    #[test]
    fn record_signatures() {
        let w = WriterKey::generate();
        let f = FileId::from_u128(1);
        let r = TrustedRecord {
            scheme: Scheme::Mt,
            block_bytes: 4096,
            blocks: 1,
            length: 10,
            key_version: 1,
            root: [1; 32],
            counters_digest: [2; 32],
            binding: None,
        };
        let sig = w.sign_record(f, &r);
        assert_eq!(w.public().verify_record(f, &r, &sig), Ok(()));
        let newer = TrustedRecord { length: 11, ..r };
        assert!(w.public().verify_record(f, &newer, &sig).is_err());
        assert_eq!(block_message(f, 0, 0, b"").len(), BLOCK_MESSAGE_BYTES);
    }
}
