//! Writer signatures on the drive wire: seed 001's scheme 1 (§3.3.1) on a NASD drive.
//!
//! In scheme 1 the writer signs every block and "the network disk verifies the signature and
//! hash of the block before it is written" (Fig 2), so "no sensitive data is stored on the
//! network disk": a drive that verifies holds nothing that could forge a write. Here a
//! capability may name the writer's Ed25519 public key (`CapabilityArgs::writer_key`, bound by
//! the capability key, requirements B.4); every request under it that changes the object's
//! bytes ([`nasd_proto::Op::changes_data`]) carries an Ed25519 signature over a fixed-layout
//! message (`docs/protocol.md` §14), and the drive refuses the request (`BadSignature`) unless
//! the signature verifies, strictly, under that key.
//!
//! ```text
//! message := 0  12B "nasd-wsig-v1"
//!            12 u8  op               6 write | 4 setattr
//!            13 u64 drive_id         the drive the request is for
//!            21 u16 partition
//!            23 u64 object
//!            31 16B request nonce    u64 time_us, u64 random
//!            47 body
//! write   body := u8 form, u16 n, n × (u64 offset, u64 len), 32B data_digest   (82 + 16n bytes)
//! setattr body := u64 logical_size                                             (55 bytes)
//! data_digest  := H("nasd-wsig-data-v1" || u8 form || per region, in order: for form `mac`
//!                 the region's bytes, otherwise each piece's write-form hash)
//! ```
//! `H` is the drive's suite hash. The write-form piece hashes are the ones the request MAC
//! covers under INTEGRITY_DATA (`crate::integrity::pieces`), so a drive that verified the MAC
//! hashes only 32 bytes per piece more for the signature; `incremental`'s per-piece hashes go
//! in one by one rather than summed, because an AdHash sum is not collision resistant (Wagner
//! 2002) and a signature must not be weaker than its hash (seed 001 §3.3.1: "no stronger than
//! the weaker of the signature algorithm and the hash algorithm").
//!
//! The message binds the drive, partition, object and the request's nonce, so a signature is
//! good for one request on one object of one drive only: replayed, the request is refused by
//! the drive's nonce window and replay cache (seed 001 §2.3 uses a timestamp for this), and
//! moved to another drive, object, place or data, its signature no longer verifies.

use crate::integrity::pieces::PieceHash;
use crate::primitives::{Digest, Hasher};
use crate::Cost;
use ed25519_dalek::Signer as _;
use nasd_proto::{
    DriveId, Nonce, ObjectId, OpCode, PartitionId, Region, Scheme, Suite, WriterPublicKey,
    WriterSignature, REGIONS_MAX,
};
use std::fmt;

/// Domain label at the start of every signed message.
pub const LABEL: &[u8; 12] = b"nasd-wsig-v1";
/// Domain label of the data digest.
pub const DATA_LABEL: &[u8; 17] = b"nasd-wsig-data-v1";
/// Bytes of a message before its body: label, op, drive, partition, object, nonce.
pub const HEAD_BYTES: usize = 12 + 1 + 8 + 2 + 8 + 16;
/// Longest message: a write of [`REGIONS_MAX`] regions.
pub const MESSAGE_BYTES_MAX: usize = HEAD_BYTES + 1 + 2 + 16 * REGIONS_MAX + 32;

/// Where a signed request acts: the drive it is for, the object, and the request's nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub drive: DriveId,
    pub partition: PartitionId,
    pub object: ObjectId,
    pub nonce: Nonce,
}

/// What a signed request changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change<'a> {
    /// A write of `regions`, whose data digests to `data_digest` ([`DataDigest`]).
    Write {
        form: Scheme,
        regions: &'a [Region],
        data_digest: Digest,
    },
    /// A setattr that sets the logical size.
    Resize { logical_size: u64 },
}

/// The message a writer signs and a drive verifies (module doc).
pub fn message(place: &Place, change: &Change<'_>) -> Vec<u8> {
    let mut m = Vec::with_capacity(match change {
        Change::Write { regions, .. } => HEAD_BYTES + 3 + 16 * regions.len() + 32,
        Change::Resize { .. } => HEAD_BYTES + 8,
    });
    m.extend_from_slice(LABEL);
    m.push(match change {
        Change::Write { .. } => OpCode::Write as u8,
        Change::Resize { .. } => OpCode::SetAttr as u8,
    });
    m.extend_from_slice(&place.drive.0.to_le_bytes());
    m.extend_from_slice(&place.partition.0.to_le_bytes());
    m.extend_from_slice(&place.object.0.to_le_bytes());
    m.extend_from_slice(&place.nonce.to_bytes());
    debug_assert_eq!(m.len(), HEAD_BYTES);
    match change {
        Change::Write {
            form,
            regions,
            data_digest,
        } => {
            // The encoder of `Op::Write` bounds the count the same way.
            debug_assert!(regions.len() <= REGIONS_MAX, "callers bound region lists");
            m.push(*form as u8);
            m.extend_from_slice(&(regions.len() as u16).to_le_bytes());
            for r in *regions {
                m.extend_from_slice(&r.offset.to_le_bytes());
                m.extend_from_slice(&r.len.to_le_bytes());
            }
            m.extend_from_slice(data_digest);
        }
        Change::Resize { logical_size } => m.extend_from_slice(&logical_size.to_le_bytes()),
    }
    m
}

/// Bytes of piece hashes a [`DataDigest`] gathers before it hashes them: BLAKE3 hashes 16
/// chunks at once only when given that much (32 bytes at a time it ran at a seventh of that).
const PIECE_BUFFER_BYTES: usize = 16 << 10;

/// The digest of a write's data that its signature covers, fed region by region.
pub struct DataDigest {
    h: Hasher,
    form: Scheme,
    /// Piece hashes not yet hashed, at most [`PIECE_BUFFER_BYTES`].
    pending: Vec<u8>,
}

impl DataDigest {
    pub fn new(suite: Suite, form: Scheme) -> DataDigest {
        let mut h = Hasher::new(suite);
        h.update(DATA_LABEL);
        h.update(&[form as u8]);
        DataDigest {
            h,
            form,
            pending: vec![],
        }
    }

    /// Adds one region: its bytes and their write-form piece hashes (none for `mac`).
    pub fn region(&mut self, pieces: &[PieceHash], bytes: &[u8], cost: &mut Cost) {
        if self.form == Scheme::Mac {
            cost.data_bytes += bytes.len() as u64;
            self.h.update(bytes);
            return;
        }
        for p in pieces {
            if self.pending.len() + p.value.len() > PIECE_BUFFER_BYTES {
                self.h.update(&self.pending);
                self.pending.clear();
            }
            self.pending.extend_from_slice(&p.value);
        }
    }

    pub fn finish(mut self, cost: &mut Cost) -> Digest {
        self.h.update(&self.pending);
        cost.calls += 1;
        self.h.finalize()
    }
}

/// Why a signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the capability's writer key is not a valid Ed25519 public key")]
    BadPublicKey,
    #[error("the signature does not verify under the capability's writer key")]
    Invalid,
}

/// Verifies `sig` over `msg` under `key`, strictly: non-canonical encodings and small-order
/// keys are refused, so a signature has exactly one valid form (no malleability).
pub fn verify(
    key: &WriterPublicKey,
    msg: &[u8],
    sig: &WriterSignature,
) -> Result<(), SignatureError> {
    let vk = ed25519_dalek::VerifyingKey::from_bytes(&key.0)
        .map_err(|_| SignatureError::BadPublicKey)?;
    vk.verify_strict(msg, &ed25519_dalek::Signature::from_bytes(&sig.0))
        .map_err(|_| SignatureError::Invalid)
}

/// A writer's Ed25519 signing key. Zeroized on drop (ed25519-dalek's `zeroize` feature);
/// `Debug` shows the public key only.
pub struct WriterSigner(ed25519_dalek::SigningKey);

impl WriterSigner {
    /// The key of a 32-byte Ed25519 seed (a `nasd user keygen` secret key file holds one).
    pub fn from_seed(seed: &crate::Key) -> WriterSigner {
        WriterSigner(ed25519_dalek::SigningKey::from_bytes(seed.expose()))
    }

    pub fn public(&self) -> WriterPublicKey {
        WriterPublicKey(self.0.verifying_key().to_bytes())
    }

    pub fn sign(&self, msg: &[u8]) -> WriterSignature {
        WriterSignature(self.0.sign(msg).to_bytes())
    }
}

impl fmt::Debug for WriterSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriterSigner(public {})", self.public())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::integrity::pieces::write_form;
    use crate::Key;

    fn place() -> Place {
        Place {
            drive: DriveId(0x0102_0304_0506_0708),
            partition: PartitionId(1),
            object: ObjectId(16),
            nonce: Nonce {
                time_us: 1_700_000_000_000_000,
                random: 5,
            },
        }
    }

    fn digest(suite: Suite, form: Scheme, offset: u64, data: &[u8]) -> Digest {
        let mut c = Cost::default();
        let pieces = write_form(suite, form, offset, data, &mut c);
        let mut d = DataDigest::new(suite, form);
        d.region(&pieces, data, &mut c);
        d.finish(&mut c)
    }

    #[test]
    fn the_message_has_its_documented_layout() {
        let regions = [Region::new(0x11, 0x22), Region::new(0x33, 0x44)];
        let m = message(
            &place(),
            &Change::Write {
                form: Scheme::Tree,
                regions: &regions,
                data_digest: [0xdd; 32],
            },
        );
        assert_eq!(m.len(), 82 + 16 * 2);
        assert_eq!(&m[..12], b"nasd-wsig-v1");
        assert_eq!(m[12], 6);
        assert_eq!(&m[13..21], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&m[21..23], &1u16.to_le_bytes());
        assert_eq!(&m[23..31], &16u64.to_le_bytes());
        assert_eq!(&m[31..47], &place().nonce.to_bytes());
        assert_eq!(m[47], Scheme::Tree as u8);
        assert_eq!(&m[48..50], &2u16.to_le_bytes());
        assert_eq!(&m[50..58], &0x11u64.to_le_bytes());
        assert_eq!(&m[74..82], &0x44u64.to_le_bytes());
        assert_eq!(&m[82..], &[0xdd; 32]);
        let r = message(&place(), &Change::Resize { logical_size: 9 });
        assert_eq!(r.len(), 55);
        assert_eq!(r[12], 4);
        assert_eq!(&r[47..], &9u64.to_le_bytes());
    }

    #[test]
    fn a_signature_binds_every_field_and_only_its_key_verifies() {
        let s = WriterSigner::from_seed(&Key::from_bytes([7; 32]));
        let pk = s.public();
        let data = vec![0x42u8; 5000];
        let regions = [Region::new(100, 5000)];
        let write = |p: &Place, d: Digest, r: &[Region]| {
            message(
                p,
                &Change::Write {
                    form: Scheme::Tree,
                    regions: r,
                    data_digest: d,
                },
            )
        };
        let d = digest(Suite::Blake3, Scheme::Tree, 100, &data);
        let sig = s.sign(&write(&place(), d, &regions));
        assert_eq!(verify(&pk, &write(&place(), d, &regions), &sig), Ok(()));
        let moved = [
            Place {
                drive: DriveId(9),
                ..place()
            },
            Place {
                partition: PartitionId(2),
                ..place()
            },
            Place {
                object: ObjectId(17),
                ..place()
            },
            Place {
                nonce: Nonce {
                    time_us: place().nonce.time_us + 1,
                    random: 5,
                },
                ..place()
            },
        ];
        for p in &moved {
            assert_eq!(
                verify(&pk, &write(p, d, &regions), &sig),
                Err(SignatureError::Invalid),
                "{p:?}"
            );
        }
        let mut other = data.clone();
        other[4999] ^= 1;
        let d2 = digest(Suite::Blake3, Scheme::Tree, 100, &other);
        assert!(verify(&pk, &write(&place(), d2, &regions), &sig).is_err());
        assert!(verify(&pk, &write(&place(), d, &[Region::new(101, 5000)]), &sig).is_err());
        let mut bent = sig;
        bent.0[63] ^= 0x10;
        assert!(verify(&pk, &write(&place(), d, &regions), &bent).is_err());
        let stranger = WriterSigner::from_seed(&Key::from_bytes([8; 32])).public();
        assert!(verify(&stranger, &write(&place(), d, &regions), &sig).is_err());
        // a resize is a message of its own: a write's signature is no resize's
        assert!(verify(
            &pk,
            &message(&place(), &Change::Resize { logical_size: 0 }),
            &sig
        )
        .is_err());
    }

    #[test]
    fn the_data_digest_depends_on_form_offset_and_every_byte() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        for suite in [Suite::Blake3, Suite::Sha256] {
            let all: Vec<Digest> = Scheme::ALL
                .iter()
                .map(|&f| digest(suite, f, 0, &data))
                .collect();
            for i in 0..all.len() {
                for j in i + 1..all.len() {
                    assert_ne!(all[i], all[j], "{suite:?}: forms {i} and {j} agree");
                }
            }
            for form in Scheme::ALL {
                let mut flipped = data.clone();
                flipped[12_345] ^= 0x80;
                assert_ne!(
                    digest(suite, form, 0, &data),
                    digest(suite, form, 0, &flipped)
                );
            }
            // chunk and sub-block indices are inside the piece hashes of tree and incremental
            for form in [Scheme::Incremental, Scheme::Tree] {
                assert_ne!(
                    digest(suite, form, 0, &data),
                    digest(suite, form, 8192, &data)
                );
            }
        }
    }

    /// The gathering of piece hashes is invisible: across buffer flushes and region edges, the
    /// digest is the hash of the label, the form and every piece value in order.
    #[test]
    fn the_data_digest_is_the_hash_of_every_piece_in_order() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let (a, b) = data.split_at(1_234_567);
        for suite in [Suite::Blake3, Suite::Sha256] {
            for form in [Scheme::Digest, Scheme::Incremental, Scheme::Tree] {
                let mut c = Cost::default();
                let pa = write_form(suite, form, 7, a, &mut c);
                let pb = write_form(suite, form, 5_000_000, b, &mut c);
                let mut d = DataDigest::new(suite, form);
                d.region(&pa, a, &mut c);
                d.region(&pb, b, &mut c);
                let mut want = Hasher::new(suite);
                want.update(DATA_LABEL);
                want.update(&[form as u8]);
                for p in pa.iter().chain(&pb) {
                    want.update(&p.value);
                }
                assert_eq!(d.finish(&mut c), want.finalize(), "{suite:?} {form}");
            }
        }
    }

    #[test]
    fn verification_is_strict_and_refuses_bad_keys() {
        let s = WriterSigner::from_seed(&Key::from_bytes([3; 32]));
        let msg = message(&place(), &Change::Resize { logical_size: 1 });
        let sig = s.sign(&msg);
        // S + L (the group order) is the same scalar mod L: the lax check would accept it
        let l: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let mut malleated = sig;
        let mut carry = 0u16;
        for (s, l) in malleated.0[32..].iter_mut().zip(l) {
            let v = *s as u16 + l as u16 + carry;
            *s = v as u8;
            carry = v >> 8;
        }
        assert!(verify(&s.public(), &msg, &malleated).is_err());
        // the identity point (small order) as a key
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert!(verify(&WriterPublicKey(identity), &msg, &sig).is_err());
        // y = 2 is no point on the curve
        let mut not_a_point = [0u8; 32];
        not_a_point[0] = 2;
        assert_eq!(
            verify(&WriterPublicKey(not_a_point), &msg, &sig),
            Err(SignatureError::BadPublicKey)
        );
        assert!(!format!("{s:?}").contains("0303"));
    }
}
