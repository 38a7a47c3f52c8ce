//! The side data of an encrypted file in a nasd cluster: what readers check against the
//! trusted record besides the ciphertext, kept beside the record at the file manager, which
//! stores it without being able to read its secrets (requirements B.1, B.3).
//!
//! - the file id that enters every tweak and leaf;
//! - who signed the version (seed 001 schemes 1 and 2: the reader checks the writer's
//!   signature over the record with this user's public key);
//! - the key file (HPKE wraps of the file key for each user and group that may read it);
//! - the counter intervals, pinned by the record's `counters_digest`;
//! - for MT-EINT, the *pins*: the size and tree top each component object's drive must
//!   report, bound into the record's `root` ([`pins_root`]), so a drive that serves anything
//!   but the version the writer left — an older copy, another object, a tree of its own — is
//!   caught although its MACs are good; for RAND- and COMP-EINT, the nodes of the sparse tree
//!   over random-looking blocks ([`crate::eint`]), under the record's `root`.
//!
//! Encoding (little-endian): `version u8 = 1 ‖ file_id [16] ‖ signer u32 (u32::MAX: none) ‖
//! key_file_len u32 ‖ key_file ‖ counters_len u32 ‖ counters ‖ kind u8` then for kind 0 (pins)
//! `n u16 ‖ n × (known u8 ‖ size u64 ‖ top [32])` and for kind 1 (tree nodes) `n u32 ‖ n ×
//! (level u8 ‖ index u64 ‖ hash [32])`, nodes sorted and unique.

use crate::codec::{hash_parts, DecodeError, Reader};
use crate::keys::{FileId, KeyFile};

/// Most components a file's pins cover (the manager's layouts have at most 64).
pub const PINS_MAX: usize = 64;
/// Most tree nodes side data carries (RAND/COMP-EINT): bounded by what the manager keeps.
pub const NODES_MAX: u64 = 1 << 16;
/// Bytes of one encoded pin and one encoded node.
pub const PIN_BYTES: usize = 1 + 8 + 32;
pub const NODE_ENTRY_BYTES: usize = 1 + 8 + 32;

/// What one component object's drive must report for this version: its size and tree top
/// (`known` false: the writer could not learn it — the drive was down — and the component is
/// stale until rebuilt).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pin {
    pub known: bool,
    pub size: u64,
    pub top: [u8; 32],
}

/// How readers check blocks beyond decrypting them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Integrity {
    /// MT-EINT: one pin per component object.
    Pins(Vec<Pin>),
    /// RAND/COMP-EINT: the sparse tree's stored nodes `(level, index, hash)`.
    Nodes(Vec<(u8, u64, [u8; 32])>),
}

/// The side data of one version of a file (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Side {
    pub file_id: FileId,
    pub signer: Option<u32>,
    pub key_file: KeyFile,
    /// The encoded counter intervals (pinned by `counters_digest`; kept encoded so the
    /// digest is over exactly these bytes).
    pub counters: Vec<u8>,
    pub integrity: Integrity,
}

impl Side {
    const FORMAT_VERSION: u8 = 1;

    pub fn encode(&self) -> Vec<u8> {
        let kf = self.key_file.encode();
        let mut out = Vec::with_capacity(32 + kf.len() + self.counters.len() + 64);
        out.push(Self::FORMAT_VERSION);
        out.extend_from_slice(&self.file_id.0);
        out.extend_from_slice(&self.signer.unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&(kf.len() as u32).to_le_bytes());
        out.extend_from_slice(&kf);
        out.extend_from_slice(&(self.counters.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.counters);
        match &self.integrity {
            Integrity::Pins(pins) => {
                out.push(0);
                out.extend_from_slice(&(pins.len() as u16).to_le_bytes());
                for p in pins {
                    out.push(p.known as u8);
                    out.extend_from_slice(&p.size.to_le_bytes());
                    out.extend_from_slice(&p.top);
                }
            }
            Integrity::Nodes(nodes) => {
                out.push(1);
                out.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
                for (level, index, h) in nodes {
                    out.push(*level);
                    out.extend_from_slice(&index.to_le_bytes());
                    out.extend_from_slice(h);
                }
            }
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Side, DecodeError> {
        let mut r = Reader::new(b, "side data");
        r.version(Self::FORMAT_VERSION)?;
        let file_id = FileId(r.array()?);
        let signer = match r.u32()? {
            u32::MAX => None,
            uid => Some(uid),
        };
        let kf_len = r.u32()? as usize;
        let key_file = KeyFile::decode(r.bytes(kf_len)?)?;
        let c_len = r.u32()? as usize;
        let counters = r.bytes(c_len)?.to_vec();
        let integrity = match r.u8()? {
            0 => {
                let n = r.u16()? as u64;
                let n = r.check_count(n, PINS_MAX as u64, PIN_BYTES)?;
                let mut pins = Vec::with_capacity(n);
                for _ in 0..n {
                    let known = match r.u8()? {
                        0 => false,
                        1 => true,
                        _ => return Err(r.invalid("pin flag")),
                    };
                    pins.push(Pin {
                        known,
                        size: r.u64()?,
                        top: r.array()?,
                    });
                }
                Integrity::Pins(pins)
            }
            1 => {
                let n = r.u32()? as u64;
                let n = r.check_count(n, NODES_MAX, NODE_ENTRY_BYTES)?;
                let mut nodes: Vec<(u8, u64, [u8; 32])> = Vec::with_capacity(n);
                for _ in 0..n {
                    let e = (r.u8()?, r.u64()?, r.array()?);
                    if nodes.last().is_some_and(|p| (p.0, p.1) >= (e.0, e.1)) {
                        return Err(r.invalid("tree nodes out of order"));
                    }
                    nodes.push(e);
                }
                Integrity::Nodes(nodes)
            }
            _ => return Err(r.invalid("integrity kind")),
        };
        r.finish()?;
        Ok(Side {
            file_id,
            signer,
            key_file,
            counters,
            integrity,
        })
    }
}

/// The record's `root` for MT-EINT in a cluster: a hash binding the file id and every pin,
/// in component order.
pub fn pins_root(file_id: FileId, pins: &[Pin]) -> [u8; 32] {
    let mut enc = Vec::with_capacity(2 + pins.len() * PIN_BYTES);
    enc.extend_from_slice(&(pins.len() as u16).to_le_bytes());
    for p in pins {
        enc.push(p.known as u8);
        enc.extend_from_slice(&p.size.to_le_bytes());
        enc.extend_from_slice(&p.top);
    }
    hash_parts(b"nasd-e2e pins v1", &[&file_id.0, &enc])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(integrity: Integrity) -> Side {
        Side {
            file_id: FileId([7; 16]),
            signer: Some(1000),
            key_file: KeyFile::new(),
            counters: crate::counters::CounterIntervals::new().encode(),
            integrity,
        }
    }

    #[test]
    fn both_kinds_round_trip() {
        let pins = sample(Integrity::Pins(vec![
            Pin {
                known: true,
                size: 65536,
                top: [1; 32],
            },
            Pin {
                known: false,
                size: 0,
                top: [0; 32],
            },
        ]));
        assert_eq!(Side::decode(&pins.encode()).unwrap(), pins);
        let nodes = sample(Integrity::Nodes(vec![(0, 3, [2; 32]), (1, 1, [3; 32])]));
        assert_eq!(Side::decode(&nodes.encode()).unwrap(), nodes);
        let none = Side {
            signer: None,
            ..nodes.clone()
        };
        assert_eq!(Side::decode(&none.encode()).unwrap().signer, None);
        let mut bad = nodes.encode();
        let n = bad.len();
        bad.truncate(n - 1);
        assert!(Side::decode(&bad).is_err());
    }

    #[test]
    fn the_pins_root_binds_every_pin_and_the_file() {
        let p = |size| Pin {
            known: true,
            size,
            top: [4; 32],
        };
        let a = pins_root(FileId([1; 16]), &[p(1), p(2)]);
        assert_ne!(a, pins_root(FileId([1; 16]), &[p(2), p(1)]));
        assert_ne!(a, pins_root(FileId([2; 16]), &[p(1), p(2)]));
        assert_ne!(a, pins_root(FileId([1; 16]), &[p(1)]));
    }

    proptest! {
        #[test]
        fn decoding_is_total(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Side::decode(&b);
        }
    }
}
