//! The four integrity schemes of seed 000 §3 and DESIGN.md, as pure functions shared by the
//! drive (which stores metadata on writes and produces reply digests on reads) and the client
//! verifier (which recomputes the same digest material from the bytes it received).
//!
//! Every scheme defines a *data digest* `D` that the request or reply MAC covers under
//! INTEGRITY_DATA:
//!
//! | scheme | `D` for a region | drive work on a read |
//! |---|---|---|
//! | `mac` | the bytes themselves | MAC over every byte |
//! | `digest` | `H(piece)` for each piece of the region split at 8 KiB block boundaries | stored digest for whole blocks, hash partial pieces |
//! | `incremental` | `Σ h(i, piece) mod 2^256` over pieces split at 256 B sub-blocks | stored block sums; partial blocks by direct sum or complement, whichever hashes less |
//! | `tree` | `size || top` of the object's Merkle tree (read); piece values (write) | none: MAC over the root, proof from stored nodes |
//!
//! # Layout
//! - [`pieces`]: splitting regions at block, sub-block and chunk boundaries; write-form hashes.
//! - [`adhash`]: 256-bit sums and the sub-block hash with its index bound in.
//! - [`tree`]: leaves, merges, zero subtrees, proofs and their verification.
//! - [`track`]: a writer's own account of an object's tree top, for pinning it (MT-EINT).
//! - [`verify`]: the client-side check of a read reply, for every scheme.

pub mod adhash;
pub mod pieces;
pub mod track;
pub mod tree;
pub mod verify;

use crate::primitives::Digest;
use nasd_proto::Scheme;

/// Bytes per block: the unit of allocation, of `digest`'s stored digests and of `incremental`'s
/// stored sums (seed 000 §3.2 uses 8 KiB disk blocks).
pub const BLOCK_BYTES: u64 = 8192;
/// Bytes per `tree` leaf chunk (BLAKE3's chunk size).
pub const CHUNK_BYTES: u64 = 1024;
/// Bytes per `incremental` sub-block (seed 000 §3.4.1 chooses 256).
pub const SUB_BLOCK_BYTES: u64 = 256;
pub const CHUNKS_PER_BLOCK: u64 = BLOCK_BYTES / CHUNK_BYTES;
pub const SUBS_PER_BLOCK: u64 = BLOCK_BYTES / SUB_BLOCK_BYTES;
const _: () =
    assert!(BLOCK_BYTES.is_multiple_of(CHUNK_BYTES) && BLOCK_BYTES.is_multiple_of(SUB_BLOCK_BYTES));

/// Integrity metadata stored with one block.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum BlockMeta {
    /// `mac`: nothing beyond the at-rest checksum.
    None,
    /// `digest`: H(logical bytes of the block).
    Digest(Digest),
    /// `incremental`: Σ h(i, sub-block) over the block's sub-blocks.
    Sum(Digest),
    /// `tree`: one leaf value per chunk of the block's logical bytes.
    Leaves(Vec<Digest>),
}

impl BlockMeta {
    /// Stored layout: `u8 kind (0 none, 1 digest, 2 sum, 3 leaves), [u8 count], 32 B each`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            BlockMeta::None => out.push(0),
            BlockMeta::Digest(d) => {
                out.push(1);
                out.extend_from_slice(d);
            }
            BlockMeta::Sum(d) => {
                out.push(2);
                out.extend_from_slice(d);
            }
            BlockMeta::Leaves(l) => {
                out.push(3);
                out.push(l.len() as u8);
                for d in l {
                    out.extend_from_slice(d);
                }
            }
        }
    }
    /// Total decoder: `None` on any malformed input.
    pub fn decode(b: &[u8]) -> Option<BlockMeta> {
        let take = |s: &[u8]| -> Option<Digest> { s.try_into().ok() };
        match *b.first()? {
            0 if b.len() == 1 => Some(BlockMeta::None),
            1 if b.len() == 33 => Some(BlockMeta::Digest(take(&b[1..])?)),
            2 if b.len() == 33 => Some(BlockMeta::Sum(take(&b[1..])?)),
            3 => {
                let n = *b.get(1)? as usize;
                if n as u64 > CHUNKS_PER_BLOCK || b.len() != 2 + 32 * n {
                    return None;
                }
                Some(BlockMeta::Leaves(
                    b[2..].chunks(32).map(|c| take(c).unwrap()).collect(),
                ))
            }
            _ => None,
        }
    }
    /// Bytes of integrity metadata this entry holds (for the overhead figure).
    pub fn metadata_bytes(&self) -> usize {
        match self {
            BlockMeta::None => 0,
            BlockMeta::Digest(_) | BlockMeta::Sum(_) => 32,
            BlockMeta::Leaves(l) => 32 * l.len(),
        }
    }
}

/// Computes the metadata stored for block `block` whose logical bytes are `logical` (at most
/// [`BLOCK_BYTES`]; shorter only for the object's last block).
pub fn block_meta(
    suite: nasd_proto::Suite,
    scheme: Scheme,
    block: u64,
    logical: &[u8],
    cost: &mut crate::Cost,
) -> BlockMeta {
    debug_assert!(logical.len() as u64 <= BLOCK_BYTES);
    match scheme {
        Scheme::Mac => BlockMeta::None,
        Scheme::Digest => {
            BlockMeta::Digest(crate::primitives::hash_data(suite, b"", logical, cost))
        }
        Scheme::Incremental => {
            let first = block * SUBS_PER_BLOCK;
            let mut s = adhash::Sum::ZERO;
            for (j, sub) in logical.chunks(SUB_BLOCK_BYTES as usize).enumerate() {
                s.add(&adhash::sub_hash(suite, first + j as u64, sub, cost), cost);
            }
            BlockMeta::Sum(s.to_bytes())
        }
        Scheme::Tree => {
            let first = block * CHUNKS_PER_BLOCK;
            BlockMeta::Leaves(tree::leaves(suite, first, logical, cost))
        }
    }
}
