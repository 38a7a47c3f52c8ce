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
pub fn encode_tree_trailer(top: &Digest, proofs: &[Vec<Digest>]) -> Vec<u8> {
    let mut w = Writer::new();
    w.bytes(top);
    for p in proofs {
        w.u16(p.len() as u16);
        for d in p {
            w.bytes(d);
        }
    }
    w.into_vec()
}

fn decode_tree_trailer(
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

/// Feeds the read reply's data digest into `mac`, verifying `tree` proofs on the way.
pub fn feed_read(
    mac: &mut Mac,
    suite: Suite,
    reply: &ReadReply,
    data: &[u8],
    cost: &mut Cost,
) -> Result<(), VerifyError> {
    let slices = region_slices(&reply.regions, data)?;
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
        Scheme::Tree => {
            let (top, proofs) = decode_tree_trailer(&reply.trailer, reply.regions.len())?;
            let n = tree::chunk_count(reply.logical_size);
            for ((r, s), proof) in reply.regions.iter().zip(slices).zip(&proofs) {
                if r.len == 0 {
                    if !proof.is_empty() {
                        return Err(VerifyError::Shape("proof for an empty region"));
                    }
                    continue;
                }
                if r.offset % CHUNK_BYTES != 0 {
                    return Err(VerifyError::Shape("tree region not chunk-aligned"));
                }
                let c0 = r.offset / CHUNK_BYTES;
                let c1 = (r.offset + r.len).div_ceil(CHUNK_BYTES);
                if r.offset + r.len != (c1 * CHUNK_BYTES).min(reply.logical_size) {
                    return Err(VerifyError::Shape("tree region does not end on a chunk"));
                }
                let got = tree::verify_range(suite, n, c0, c1, s, proof, cost)
                    .map_err(|_| VerifyError::Proof)?;
                if !crate::ct_eq(&got, &top) {
                    return Err(VerifyError::Proof);
                }
            }
            mac.update(&tree::root_material(reply.logical_size, &top));
        }
    }
    Ok(())
}
