//! The client's check of a read reply: recompute the data digest `D` from the bytes received,
//! in the object's scheme, and feed it to the reply MAC. For `tree`, first recompute the top
//! from the data and the drive's proofs: a proof that does not lead to the MAC-covered top means
//! the data is not what the drive stored. Nothing here trusts a length the reply claims without
//! checking it against the bytes actually present.

use super::{pieces, tree, CHUNK_BYTES};
use crate::primitives::{Digest, Mac};
use crate::Cost;
use nasd_proto::codec::{Reader, Writer};
use nasd_proto::{ReadReply, Region, Scheme, Suite};

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("reply shape: {0}")]
    Shape(&'static str),
    #[error("Merkle proof does not lead to the authenticated root")]
    Proof,
}

/// Encodes a `tree` read trailer: the top, then per region a `u16` count and its proof nodes.
pub fn encode_tree_trailer<P: AsRef<[Digest]>>(top: &Digest, proofs: &[P]) -> Vec<u8> {
    let digests: usize = proofs.iter().map(|p| p.as_ref().len()).sum();
    let mut w = Writer::with_capacity(32 + 2 * proofs.len() + 32 * digests);
    w.bytes(top);
    for p in proofs {
        let p = p.as_ref();
        w.u16(p.len() as u16);
        for d in p {
            w.bytes(d);
        }
    }
    w.into_vec()
}

/// Decodes a `tree` read trailer: the top and, per region, its proof nodes.
pub fn decode_tree_trailer(
    b: &[u8],
    regions: usize,
) -> Result<(Digest, Vec<Vec<Digest>>), VerifyError> {
    let bad = |_| VerifyError::Shape("tree trailer");
    let mut r = Reader::new(b);
    let top = r.array::<32>("top").map_err(bad)?;
    let mut proofs = Vec::with_capacity(regions);
    for _ in 0..regions {
        let n = r.u16("proof len").map_err(bad)? as usize;
        if n > 2 * tree::LEVELS_MAX {
            return Err(VerifyError::Shape("proof too long"));
        }
        let mut p = Vec::with_capacity(n);
        for _ in 0..n {
            p.push(r.array::<32>("proof node").map_err(bad)?);
        }
        proofs.push(p);
    }
    r.finish("tree trailer").map_err(bad)?;
    Ok((top, proofs))
}

/// Checks that `regions` tile `data` and returns each region's slice.
pub fn region_slices<'a>(regions: &[Region], data: &'a [u8]) -> Result<Vec<&'a [u8]>, VerifyError> {
    let total = nasd_proto::ops::regions_total(regions).ok_or(VerifyError::Shape("lengths"))?;
    if total != data.len() as u64 {
        return Err(VerifyError::Shape("region lengths differ from data length"));
    }
    let mut at = 0usize;
    Ok(regions
        .iter()
        .map(|r| {
            let s = &data[at..at + r.len as usize];
            at += r.len as usize;
            s
        })
        .collect())
}

/// Feeds the read reply's data digest into `mac`, verifying `tree` proofs on the way. `limit`
/// is the region the request's capability allows (everything for a key of the hierarchy): a
/// `tree` range may be cut short of its chunks only at `limit`'s edges, where the drive must
/// not send the rest of the chunk.
pub fn feed_read(
    mac: &mut Mac,
    suite: Suite,
    reply: &ReadReply,
    data: &[u8],
    limit: Region,
    cost: &mut Cost,
) -> Result<(), VerifyError> {
    let slices = region_slices(&reply.regions, data)?;
    if reply.logical_size > nasd_proto::OBJECT_BYTES_MAX {
        return Err(VerifyError::Shape("object size past the protocol's limit"));
    }
    for r in &reply.regions {
        if r.end().is_none_or(|e| e > reply.logical_size) {
            return Err(VerifyError::Shape("region past the object's end"));
        }
    }
    match reply.scheme {
        Scheme::Mac | Scheme::Digest | Scheme::Incremental => {
            for (r, s) in reply.regions.iter().zip(slices) {
                let p = pieces::write_form(suite, reply.scheme, r.offset, s, cost);
                pieces::feed(mac, reply.scheme, &p, s, cost);
            }
        }
        Scheme::Tree => feed_tree_read(mac, suite, reply, &slices, limit, cost)?,
    }
    Ok(())
}

/// The `tree` part of [`feed_read`]: per region, the whole chunks' top recomputed from the data
/// and the proof must be the trailer's top; the MAC then covers `size || top` and, per region,
/// `partial(piece)` of each cut edge chunk (protocol §11.4).
fn feed_tree_read(
    mac: &mut Mac,
    suite: Suite,
    reply: &ReadReply,
    slices: &[&[u8]],
    limit: Region,
    cost: &mut Cost,
) -> Result<(), VerifyError> {
    let (top, proofs) = decode_tree_trailer(&reply.trailer, reply.regions.len())?;
    let size = reply.logical_size;
    let n = tree::chunk_count(size);
    let mut pieces = vec![];
    for ((r, s), proof) in reply.regions.iter().zip(slices).zip(&proofs) {
        if r.len == 0 {
            if !proof.is_empty() {
                return Err(VerifyError::Shape("proof for an empty region"));
            }
            continue;
        }
        // A drive cuts a range short of its chunks only where the capability ends.
        let end = r.offset + r.len;
        let head_cut = r.offset % CHUNK_BYTES != 0;
        let tail_cut = end
            != end
                .div_ceil(CHUNK_BYTES)
                .saturating_mul(CHUNK_BYTES)
                .min(size);
        if (head_cut && r.offset != limit.offset) || (tail_cut && Some(end) != limit.end()) {
            return Err(VerifyError::Shape("tree region cut inside the capability"));
        }
        let parts = tree::range_parts(r.offset, r.len, size);
        let (lo, hi) = parts.whole;
        if lo < hi {
            let a = (lo * CHUNK_BYTES - r.offset) as usize;
            let b = ((hi * CHUNK_BYTES).min(size) - r.offset) as usize;
            let got = tree::verify_range(suite, n, lo, hi, &s[a..b], proof, cost)
                .map_err(|_| VerifyError::Proof)?;
            if !crate::ct_eq(&got, &top) {
                return Err(VerifyError::Proof);
            }
        } else if !proof.is_empty() {
            return Err(VerifyError::Shape("proof for a region with no whole chunk"));
        }
        for p in parts.cut.iter().flatten() {
            let a = (p.offset - r.offset) as usize;
            let bytes = &s[a..a + p.len as usize];
            pieces.push(tree::partial(suite, p.chunk, p.within(), bytes, cost));
        }
    }
    mac.update(&tree::root_material(size, &top));
    for p in &pieces {
        mac.update(p);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Key;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a hostile drive claims about regions, sizes and proofs, the verifier
        /// returns an error or accepts, and never panics.
        #[test]
        fn hostile_read_replies_never_panic(
            size in prop_oneof![Just(u64::MAX), Just(0u64), any::<u64>(), 0u64..100_000],
            regs in prop::collection::vec((any::<u64>(), 0u64..5000), 0..4),
            scheme in prop::sample::select(Scheme::ALL.to_vec()),
            trailer in prop::collection::vec(any::<u8>(), 0..200),
            fill in any::<u8>(),
        ) {
            let regions: Vec<Region> = regs.into_iter().map(|(o, l)| Region::new(o.min(u64::MAX - l), l)).collect();
            // data that tiles the regions, so the checks past the length check are reached
            let data = vec![fill; regions.iter().map(|r| r.len as usize).sum()];
            let rr = ReadReply { logical_size: size, scheme, regions, trailer };
            for suite in [Suite::Blake3, Suite::Sha256] {
                let mut mac = Mac::new(suite, &Key::from_bytes([0; 32]));
                let _ = feed_read(&mut mac, suite, &rr, &data, Region::WHOLE, &mut Cost::default());
            }
        }
    }

    #[test]
    fn verify_rejects_any_single_bit_change_in_every_scheme() {
        // naive oracle: the drive-side material for a whole-object read is recomputed from the
        // data by `feed_read`; any flipped bit in the data changes the MAC input.
        for suite in [Suite::Blake3, Suite::Sha256] {
            for scheme in Scheme::ALL {
                let data: Vec<u8> = (0..3000u32).map(|i| (i * 31 % 256) as u8).collect();
                let mut trailer = vec![];
                if scheme == Scheme::Tree {
                    let mut c = Cost::default();
                    let leaves: Vec<Digest> = data
                        .chunks(CHUNK_BYTES as usize)
                        .enumerate()
                        .map(|(i, ch)| tree::leaf(suite, i as u64, ch, &mut c))
                        .collect();
                    let mut src = tree::LeafNodes {
                        suite,
                        leaves: &leaves,
                    };
                    let top = tree::top(suite, &mut src, 3).unwrap();
                    trailer = encode_tree_trailer(&top, &[vec![]]);
                }
                let rr = ReadReply {
                    logical_size: 3000,
                    scheme,
                    regions: vec![Region::new(0, 3000)],
                    trailer,
                };
                let key = Key::from_bytes([3; 32]);
                let digest = |d: &[u8]| -> Option<Digest> {
                    let mut m = Mac::new(suite, &key);
                    feed_read(&mut m, suite, &rr, d, Region::WHOLE, &mut Cost::default()).ok()?;
                    Some(m.finalize(&mut Cost::default()))
                };
                let honest = digest(&data).expect("honest reply verifies");
                for bit in (0..data.len() * 8).step_by(37) {
                    let mut bad = data.clone();
                    bad[bit / 8] ^= 1 << (bit % 8);
                    assert_ne!(digest(&bad), Some(honest), "{suite:?} {scheme} bit {bit}");
                }
            }
        }
    }

    /// A reply cut at the capability's edge verifies, every bit of its bytes (cut pieces and
    /// whole chunks alike) is covered by the MAC, and a cut anywhere else is refused.
    #[test]
    fn cut_tree_ranges_verify_only_at_the_capability_edge() {
        let suite = Suite::Blake3;
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8 + 1).collect();
        let size = data.len() as u64;
        let mut c = Cost::default();
        let leaves: Vec<Digest> = data
            .chunks(CHUNK_BYTES as usize)
            .enumerate()
            .map(|(i, ch)| tree::leaf(suite, i as u64, ch, &mut c))
            .collect();
        let mut src = tree::LeafNodes {
            suite,
            leaves: &leaves,
        };
        let n = leaves.len() as u64;
        let top = tree::top(suite, &mut src, n).unwrap();
        let key = Key::from_bytes([9; 32]);
        for (off, len) in [
            (100u64, 50u64),
            (100, 3000),
            (0, 100),
            (1024, 3976),
            (2000, 3000),
        ] {
            let parts = tree::range_parts(off, len, size);
            let (lo, hi) = parts.whole;
            let proof = if lo < hi {
                tree::prove(suite, &mut src, n, lo, hi).unwrap()
            } else {
                vec![]
            };
            let rr = ReadReply {
                logical_size: size,
                scheme: Scheme::Tree,
                regions: vec![Region::new(off, len)],
                trailer: encode_tree_trailer(&top, &[proof]),
            };
            let digest = |d: &[u8], limit: Region| -> Result<Digest, VerifyError> {
                let mut m = Mac::new(suite, &key);
                feed_read(&mut m, suite, &rr, d, limit, &mut Cost::default())?;
                Ok(m.finalize(&mut Cost::default()))
            };
            // What the drive MACs: size || top || each cut piece's partial hash.
            let mut drive = Mac::new(suite, &key);
            drive.update(&tree::root_material(size, &top));
            for p in parts.cut.iter().flatten() {
                let b = &data[p.offset as usize..(p.offset + p.len) as usize];
                drive.update(&tree::partial(suite, p.chunk, p.within(), b, &mut c));
            }
            let want = drive.finalize(&mut c);
            let bytes = &data[off as usize..(off + len) as usize];
            let cap = Region::new(off, len);
            assert_eq!(digest(bytes, cap), Ok(want), "{off}+{len}");
            for bit in (0..bytes.len() * 8).step_by(13) {
                let mut bad = bytes.to_vec();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert_ne!(digest(&bad, cap), Ok(want), "{off}+{len} bit {bit}");
            }
            if parts.cut != [None, None] {
                assert_eq!(
                    digest(bytes, Region::WHOLE),
                    Err(VerifyError::Shape("tree region cut inside the capability"))
                );
            }
        }
    }
}
