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
//! - the *key commitments* (`κ_v` of every key version the blocks use, [`FileKey::commitment`])
//!   and the principals *unshared* from the file, bound into a format-2 record by
//!   [`keys_digest`]: a reader refuses a key a wrap opens when it is not the one committed
//!   (a wrap swapped at the manager), and every later writer leaves the unshared out.
//!
//! Encoding (little-endian): `version u8 = 2 ‖ file_id [16] ‖ signer u32 (u32::MAX: none) ‖
//! key_file_len u32 ‖ key_file ‖ counters_len u32 ‖ counters ‖ kind u8` then for kind 0 (pins)
//! `n u16 ‖ n × (known u8 ‖ size u64 ‖ top [32])` and for kind 1 (tree nodes) `n u32 ‖ n ×
//! (level u8 ‖ index u64 ‖ hash [32])`, nodes sorted and unique; then `n u16 ‖ n × (key_version
//! u32 ‖ κ [32])` sorted by version and unique, `m u16 ‖ m × principal (kind u8 ‖ id u32)`
//! sorted and unique. Format 1 (before bindings) ends after the integrity part: both lists
//! empty.

use crate::codec::{hash_parts, DecodeError, Reader};
use crate::keys::{FileId, FileKey, KeyFile, KeyVersion, Principal};

/// Most components a file's pins cover (the manager's layouts have at most 64).
pub const PINS_MAX: usize = 64;
/// Most tree nodes side data carries (RAND/COMP-EINT): bounded by what the manager keeps.
pub const NODES_MAX: u64 = 1 << 16;
/// Bytes of one encoded pin and one encoded node.
pub const PIN_BYTES: usize = 1 + 8 + 32;
pub const NODE_ENTRY_BYTES: usize = 1 + 8 + 32;
/// Most key versions one version's blocks may use (each rekey or unshare adds one until the
/// blocks under older ones are rewritten).
pub const KEY_VERSIONS_MAX: usize = 1024;
/// Most principals a file may stay unshared from.
pub const UNSHARED_MAX: usize = 1024;
/// Bytes of one encoded key commitment and one encoded principal.
pub const COMMITMENT_BYTES: usize = 4 + 32;
pub const PRINCIPAL_BYTES: usize = 1 + 4;

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
    /// `κ_v` of each key version the blocks use, sorted by version.
    pub commitments: Vec<(KeyVersion, [u8; 32])>,
    /// Principals `nasd unshare` took off the file: later writers wrap nothing for them
    /// until it is shared with them again. Sorted.
    pub unshared: Vec<Principal>,
}

impl Side {
    const FORMAT_UNBOUND: u8 = 1;
    const FORMAT_VERSION: u8 = 2;

    /// The commitment this version's writer made for key version `v`, if any.
    pub fn commitment(&self, v: KeyVersion) -> Option<&[u8; 32]> {
        self.commitments
            .binary_search_by_key(&v, |c| c.0)
            .ok()
            .map(|i| &self.commitments[i].1)
    }

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
        out.extend_from_slice(&encode_bindings(&self.commitments, &self.unshared));
        out
    }

    pub fn decode(b: &[u8]) -> Result<Side, DecodeError> {
        let mut r = Reader::new(b, "side data");
        let format = r.u8()?;
        if format != Self::FORMAT_UNBOUND && format != Self::FORMAT_VERSION {
            return Err(DecodeError::Version {
                what: "side data",
                found: format,
            });
        }
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
        let (mut commitments, mut unshared) = (vec![], vec![]);
        if format == Self::FORMAT_VERSION {
            let n = r.u16()? as u64;
            let n = r.check_count(n, KEY_VERSIONS_MAX as u64, COMMITMENT_BYTES)?;
            commitments.reserve(n);
            for _ in 0..n {
                let c = (r.u32()?, r.array()?);
                if commitments.last().is_some_and(|p: &(u32, _)| p.0 >= c.0) {
                    return Err(r.invalid("key commitments out of order"));
                }
                commitments.push(c);
            }
            let m = r.u16()? as u64;
            let m = r.check_count(m, UNSHARED_MAX as u64, PRINCIPAL_BYTES)?;
            unshared.reserve(m);
            for _ in 0..m {
                let p = Principal::decode(&mut r)?;
                if unshared.last().is_some_and(|q| *q >= p) {
                    return Err(r.invalid("unshared principals out of order"));
                }
                unshared.push(p);
            }
        }
        r.finish()?;
        Ok(Side {
            file_id,
            signer,
            key_file,
            counters,
            integrity,
            commitments,
            unshared,
        })
    }
}

/// The lists' encoding (module docs), as the side carries them and [`keys_digest`] hashes them.
fn encode_bindings(commitments: &[(KeyVersion, [u8; 32])], unshared: &[Principal]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        4 + commitments.len() * COMMITMENT_BYTES + unshared.len() * PRINCIPAL_BYTES,
    );
    out.extend_from_slice(&(commitments.len() as u16).to_le_bytes());
    for (v, k) in commitments {
        out.extend_from_slice(&v.to_le_bytes());
        out.extend_from_slice(k);
    }
    out.extend_from_slice(&(unshared.len() as u16).to_le_bytes());
    for p in unshared {
        p.encode(&mut out);
    }
    out
}

/// A bound record's `keys_digest`: the file id, the key commitments and the unshared
/// principals of a side, so the writer's signature over the record covers them.
pub fn keys_digest(side: &Side) -> [u8; 32] {
    hash_parts(
        b"nasd-e2e keys v1",
        &[
            &side.file_id.0,
            &encode_bindings(&side.commitments, &side.unshared),
        ],
    )
}

/// The commitments of `keys` as a side carries them.
pub fn commitments_of<'a>(
    keys: impl IntoIterator<Item = (KeyVersion, &'a FileKey)>,
) -> Vec<(KeyVersion, [u8; 32])> {
    let mut c: Vec<_> = keys.into_iter().map(|(v, k)| (v, k.commitment())).collect();
    c.sort_unstable_by_key(|e| e.0);
    c.dedup_by_key(|e| e.0);
    c
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
            commitments: vec![(1, [8; 32]), (3, [9; 32])],
            unshared: vec![Principal::User(7), Principal::Group(100)],
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
    fn format_one_reads_with_empty_lists_and_the_digest_binds_both_lists() {
        let s = sample(Integrity::Pins(vec![]));
        let enc = s.encode();
        // Format 1: the same bytes without the lists (2 + 2 + 36 × 2 + 5 × 2 bytes).
        let mut v1 = enc[..enc.len() - (4 + 2 * COMMITMENT_BYTES + 2 * PRINCIPAL_BYTES)].to_vec();
        v1[0] = 1;
        let old = Side::decode(&v1).unwrap();
        assert!(old.commitments.is_empty() && old.unshared.is_empty());
        assert_eq!(s.commitment(3), Some(&[9; 32]));
        assert_eq!(s.commitment(2), None);
        let d = keys_digest(&s);
        let mut other = s.clone();
        other.unshared.pop();
        assert_ne!(keys_digest(&other), d);
        let mut other = s.clone();
        other.commitments[0].1[0] ^= 1;
        assert_ne!(keys_digest(&other), d);
        let other = Side {
            file_id: FileId([8; 16]),
            ..s.clone()
        };
        assert_ne!(keys_digest(&other), d);
        let mut unsorted = s.clone();
        unsorted.unshared.reverse();
        assert!(Side::decode(&unsorted.encode()).is_err());
        let k = FileKey::from_bytes([3; 32]);
        assert_eq!(
            commitments_of([(2, &k), (1, &k), (2, &k)]),
            vec![(1, k.commitment()), (2, k.commitment())]
        );
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
