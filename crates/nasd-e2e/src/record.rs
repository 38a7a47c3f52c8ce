//! The trusted record: seed 003's constant trusted storage per file (requirements B.3).
//!
//! The file manager keeps one fixed-size record per file; it is the only integrity state the
//! client trusts. Everything else (ciphertext blocks, Merkle nodes, counter intervals) lives on
//! untrusted drives and is checked against it. Writers replace it by compare-and-swap on
//! [`TrustedRecord::hash`] (`CommitIntegrity { old_record_hash, new_record }`).
//!
//! Encoding, little-endian: [`TrustedRecord::ENCODED_BYTES`] = 90 bytes in format 1 (seed 003's
//! record), [`TrustedRecord::BOUND_BYTES`] = 146 in format 2, which adds a [`Binding`]:
//!
//! ```text
//! offset  size  field
//!      0     1  format version = 1, or 2 with a binding
//!      1     1  scheme: 1 MT-EINT, 2 RAND-EINT, 3 COMP-EINT, 4 pins over plaintext
//!      2     4  block_bytes
//!      6     8  blocks          (= ceil(length / block_bytes))
//!     14     8  length          (file length in bytes)
//!     22     4  key_version     (key used by new writes)
//!     26    32  root            (Merkle root; see crate::merkle)
//!     58    32  counters_digest (crate::counters)
//!  format 2 only:
//!     90     8  generation      (1 for a file's first version, +1 at every later one)
//!     98    16  origin          (the file id of the file's first version)
//!    114    32  keys_digest     (crate::side::keys_digest: the key commitments and unshares)
//! ```
//!
//! A signed record (seed 001 schemes 1 and 2) makes the binding the writer's word: which file
//! keys its blocks use (so a wrap swapped at the manager opens a key the reader refuses rather
//! than garbage), who was unshared (so every later writer leaves them out), and the version's
//! place in the file's history (so a reader that saw a newer version refuses an older one that
//! a restored manager shows: issue 21 §5 and §7).

use crate::block::valid_block_bytes;
use crate::codec::{hash_parts, DecodeError, Reader};
use crate::keys::{FileId, KeyVersion};

/// Which of seed 003's integrity constructions protects a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// MT-EINT: a Merkle tree over every encrypted block.
    Mt = 1,
    /// RAND-EINT: an entropy test, and Merkle leaves only for random-looking blocks.
    Rand = 2,
    /// COMP-EINT: a MAC tag compressed into the block, RAND-EINT for blocks that do not fit.
    Comp = 3,
    /// No encryption: a plaintext file whose record holds only its components' pins (as
    /// MT-EINT's root does), so its readers check every drive's reply against what the writer
    /// signed. Not one of seed 003's constructions (not in [`Scheme::ALL`]).
    Pins = 4,
}

impl Scheme {
    /// Seed 003's constructions.
    pub const ALL: [Scheme; 3] = [Scheme::Mt, Scheme::Rand, Scheme::Comp];

    pub fn from_u8(v: u8) -> Option<Scheme> {
        match v {
            1 => Some(Scheme::Mt),
            2 => Some(Scheme::Rand),
            3 => Some(Scheme::Comp),
            4 => Some(Scheme::Pins),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scheme::Mt => "MT-EINT",
            Scheme::Rand => "RAND-EINT",
            Scheme::Comp => "COMP-EINT",
            Scheme::Pins => "PINS",
        }
    }
}

/// The trusted record of one file (TrustedRecord v1 of B.3, with a [`Binding`] in format 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrustedRecord {
    pub scheme: Scheme,
    pub block_bytes: u32,
    pub blocks: u64,
    pub length: u64,
    pub key_version: KeyVersion,
    pub root: [u8; 32],
    pub counters_digest: [u8; 32],
    /// Format 2's binding; `None` for a format-1 record (written before bindings, or by a
    /// construction used on its own, as the lab does).
    pub binding: Option<Binding>,
}

/// What a format-2 record binds a version to besides its blocks (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The version's place in its file's history: 1 for the first, one more at each commit.
    pub generation: u64,
    /// The file id of the file's first version, kept by every later one: which history.
    pub origin: FileId,
    /// [`crate::side::keys_digest`] of the side data's key commitments and unshares.
    pub keys_digest: [u8; 32],
}

impl TrustedRecord {
    const FORMAT_VERSION: u8 = 1;
    const FORMAT_BOUND: u8 = 2;
    /// Bytes of a format-1 encoding: seed 003's trusted storage per file.
    pub const ENCODED_BYTES: usize = 1 + 1 + 4 + 8 + 8 + 4 + 32 + 32;
    /// Bytes of a format-2 encoding, with its binding: the trusted storage per file in a
    /// cluster.
    pub const BOUND_BYTES: usize = Self::ENCODED_BYTES + 8 + 16 + 32;

    /// Blocks of a file of `length` bytes.
    pub fn blocks_for(length: u64, block_bytes: u32) -> u64 {
        length.div_ceil(u64::from(block_bytes))
    }

    /// True length of block `i` (the last block may be short), or `None` past the end.
    pub fn block_len(&self, i: u64) -> Option<usize> {
        if i >= self.blocks {
            return None;
        }
        let start = i * u64::from(self.block_bytes);
        Some((self.length - start).min(u64::from(self.block_bytes)) as usize)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::BOUND_BYTES);
        out.push(match self.binding {
            None => Self::FORMAT_VERSION,
            Some(_) => Self::FORMAT_BOUND,
        });
        out.push(self.scheme as u8);
        out.extend_from_slice(&self.block_bytes.to_le_bytes());
        out.extend_from_slice(&self.blocks.to_le_bytes());
        out.extend_from_slice(&self.length.to_le_bytes());
        out.extend_from_slice(&self.key_version.to_le_bytes());
        out.extend_from_slice(&self.root);
        out.extend_from_slice(&self.counters_digest);
        if let Some(b) = &self.binding {
            out.extend_from_slice(&b.generation.to_le_bytes());
            out.extend_from_slice(&b.origin.0);
            out.extend_from_slice(&b.keys_digest);
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<TrustedRecord, DecodeError> {
        let mut r = Reader::new(b, "trusted record");
        let format = r.u8()?;
        if format != Self::FORMAT_VERSION && format != Self::FORMAT_BOUND {
            return Err(DecodeError::Version {
                what: "trusted record",
                found: format,
            });
        }
        let scheme = Scheme::from_u8(r.u8()?).ok_or(r.invalid("unknown scheme"))?;
        let block_bytes = r.u32()?;
        let blocks = r.u64()?;
        let length = r.u64()?;
        let mut rec = TrustedRecord {
            scheme,
            block_bytes,
            blocks,
            length,
            key_version: r.u32()?,
            root: r.array()?,
            counters_digest: r.array()?,
            binding: None,
        };
        if format == Self::FORMAT_BOUND {
            let generation = r.u64()?;
            if generation == 0 {
                return Err(r.invalid("generation 0 in a bound record"));
            }
            rec.binding = Some(Binding {
                generation,
                origin: FileId(r.array()?),
                keys_digest: r.array()?,
            });
        }
        r.finish()?;
        if !valid_block_bytes(block_bytes) {
            return Err(DecodeError::Invalid {
                what: "trusted record",
                why: "block size not allowed",
            });
        }
        if blocks != Self::blocks_for(length, block_bytes) {
            return Err(DecodeError::Invalid {
                what: "trusted record",
                why: "block count disagrees with length",
            });
        }
        Ok(rec)
    }

    /// The hash a commit compares and swaps on: BLAKE3 over a label and the encoding.
    pub fn hash(&self) -> [u8; 32] {
        hash_encoded(&self.encode())
    }
}

/// [`TrustedRecord::hash`] of a record as stored (its encoding), for a party that keeps
/// records without reading them.
pub fn hash_encoded(encoded: &[u8]) -> [u8; 32] {
    hash_parts(b"nasd-e2e trusted record v1", &[encoded])
}

/// What a compare-and-swap at the manager names a file's end-to-end state by: its record and
/// the side data readers check against it (key wraps, counters, pins), so a commit built on an
/// older state — before a share or an unshare changed the wraps — is refused. No state (a file
/// never written encrypted) is all zeros.
pub fn state_hash(record: &[u8], side: &[u8]) -> [u8; 32] {
    if record.is_empty() && side.is_empty() {
        return [0; 32];
    }
    let len = (record.len() as u64).to_le_bytes();
    hash_parts(b"nasd-e2e state v1", &[&len, record, side])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> TrustedRecord {
        TrustedRecord {
            scheme: Scheme::Rand,
            block_bytes: 4096,
            blocks: 3,
            length: 9000,
            key_version: 7,
            root: [1; 32],
            counters_digest: [2; 32],
            binding: None,
        }
    }

    fn bound() -> TrustedRecord {
        TrustedRecord {
            binding: Some(Binding {
                generation: 4,
                origin: FileId([9; 16]),
                keys_digest: [5; 32],
            }),
            ..sample()
        }
    }

    #[test]
    fn round_trips_and_hash_changes_with_every_field() {
        let r = sample();
        assert_eq!(TrustedRecord::decode(&r.encode()).unwrap(), r);
        assert_eq!(r.block_len(0), Some(4096));
        assert_eq!(r.block_len(2), Some(808));
        assert_eq!(r.block_len(3), None);
        let mut others = vec![];
        for s in Scheme::ALL {
            others.push(TrustedRecord { scheme: s, ..r });
        }
        others.push(TrustedRecord { length: 9001, ..r });
        others.push(TrustedRecord {
            key_version: 8,
            ..r
        });
        others.push(TrustedRecord { root: [3; 32], ..r });
        others.push(TrustedRecord {
            counters_digest: [3; 32],
            ..r
        });
        let b = bound().binding.unwrap();
        others.push(bound());
        for binding in [
            Binding { generation: 5, ..b },
            Binding {
                origin: FileId([8; 16]),
                ..b
            },
            Binding {
                keys_digest: [6; 32],
                ..b
            },
        ] {
            others.push(TrustedRecord {
                binding: Some(binding),
                ..r
            });
        }
        for (i, o) in others.iter().enumerate().filter(|(_, o)| **o != r) {
            assert_ne!(o.hash(), r.hash());
            for p in &others[i + 1..] {
                assert_ne!(o.hash(), p.hash(), "{o:?} {p:?}");
            }
        }
    }

    #[test]
    fn both_formats_round_trip_at_their_sizes() {
        assert_eq!(sample().encode().len(), TrustedRecord::ENCODED_BYTES);
        let b = bound();
        let enc = b.encode();
        assert_eq!(enc.len(), TrustedRecord::BOUND_BYTES);
        assert_eq!(
            enc[..90][1..],
            sample().encode()[1..],
            "format 2 extends format 1"
        );
        assert_eq!(TrustedRecord::decode(&enc).unwrap(), b);
        assert!(TrustedRecord::decode(&enc[..TrustedRecord::BOUND_BYTES - 1]).is_err());
        let mut zero = enc.clone();
        zero[90..98].fill(0);
        assert!(TrustedRecord::decode(&zero).is_err(), "generation 0");
        let mut v3 = enc;
        v3[0] = 3;
        assert!(TrustedRecord::decode(&v3).is_err());
    }

    #[test]
    fn decoder_checks_consistency() {
        let mut b = sample().encode();
        b[6] = 4; // blocks = 4 with length 9000
        assert!(TrustedRecord::decode(&b).is_err());
        let mut b = sample().encode();
        b[2..6].copy_from_slice(&3000u32.to_le_bytes());
        assert!(TrustedRecord::decode(&b).is_err());
        let mut b = sample().encode();
        b[1] = 9;
        assert!(TrustedRecord::decode(&b).is_err());
        assert!(TrustedRecord::decode(&sample().encode()[..89]).is_err());
    }

    proptest! {
        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..160)) {
            if let Ok(r) = TrustedRecord::decode(&bytes) {
                let enc = r.encode();
                prop_assert_eq!(enc.as_slice(), bytes.as_slice());
            }
        }
    }
}
