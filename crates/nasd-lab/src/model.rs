//! The cost model of seed 000 §3.4: the work of an integrity scheme on one request, in calls of
//! the hash's compression function (64-byte input blocks), as Figs 5, 6a, 6b, 7a and 7b draw it.
//!
//! The rules, all from seed 000 §3.4 unless said otherwise:
//!
//! - Hashing `n` bytes costs `ceil(n / 64)` calls; padding is free ("the cost of padding ... is
//!   assumed to be zero"), so a partial 64-byte block costs one call and padding never adds one.
//! - HMAC over `n` bytes costs `ceil(n / 64) + 3`: the inner key block, the message, and the outer
//!   hash over the key block and the inner digest (64 + 20 or 32 bytes: two blocks).
//! - Disk blocks are 8 KiB; a stored digest (HierMAC, §3.2) is one 20-byte SHA-1 digest per disk
//!   block; the MAC covers the digests of the blocks a request touches, and a partial block's digest
//!   is computed on the fly over the bytes requested (§3.2.1).
//! - The incremental stored digest (AdHash, §3.3) sums, modulo 2^256, one hash per 256-byte
//!   incremental block with the block number in the IV (no extra call, §3.3.2); a sub-block hash
//!   costs 4 calls, a modular add 0.10 and a subtract 0.07 of a call. A partial disk block is read
//!   either directly (hash the covered sub-blocks) or by the complementary property (subtract the
//!   uncovered ones from the stored sum), whichever is cheaper: "at most half" a block is hashed.
//! - Writes at the drive (§3.4.3): verify the client's MAC, then bring the stored digest up to
//!   date. A stored digest whose write starts at the block's first byte continues the verifying
//!   hash over the rest of the block; a write that starts inside a block rehashes the whole block.
//! - nasd's `tree` scheme (DESIGN.md, beyond the seeds) is modelled on 1 KiB chunks in a
//!   BLAKE3-shaped binary tree over a [`MODEL_OBJECT_BYTES`] object: a chunk costs 16 calls, a
//!   parent one (two 32-byte children), and reads cost the drive only the MAC over the root. A
//!   write carries one hash per chunk piece under the MAC (nasd's write form), and the drive
//!   rehashes partially written chunks and the parents above them.
//!
//! The model counts data work only: request arguments and headers are left out, as the seed's
//! figures plot cost against the amount of data transferred.

use std::fmt;

/// Input block of the compression function (SHA-1, SHA-256 and BLAKE3 alike), bytes.
pub const COMPRESSION_BLOCK_BYTES: u64 = 64;
/// Disk block that a stored digest covers (seed 000 §3.2.1: "a disk block is 8KBytes").
pub const DISK_BLOCK_BYTES: u64 = 8192;
/// Incremental block of AdHash (seed 000 §3.4.1: "We use 256 byte incremental blocks").
pub const INCREMENTAL_BLOCK_BYTES: u64 = 256;
/// Incremental blocks per disk block.
pub const INCREMENTAL_BLOCKS_PER_DISK_BLOCK: u64 = DISK_BLOCK_BYTES / INCREMENTAL_BLOCK_BYTES;
/// Calls to hash one full incremental block.
pub const INCREMENTAL_BLOCK_CALLS: u64 = INCREMENTAL_BLOCK_BYTES / COMPRESSION_BLOCK_BYTES;
/// Stored digest per disk block in HierMAC: one SHA-1 digest (seed 000 §3.2.1: 20 bytes).
pub const STORED_DIGEST_BYTES: u64 = 20;
/// Stored AdHash sum per disk block: 256 bits (seed 000 §3.3.2).
pub const ADHASH_SUM_BYTES: u64 = 32;
/// Calls HMAC adds to the hash of its message: inner key block, outer key block, outer digest.
pub const HMAC_EXTRA_CALLS: u64 = 3;
/// Cost of a 256-bit modular addition, in compression calls (seed 000 §3.4).
pub const ADD_COST_CALLS: f64 = 0.10;
/// Cost of a 256-bit modular subtraction, in compression calls (seed 000 §3.4).
pub const SUB_COST_CALLS: f64 = 0.07;
/// Leaf chunk of nasd's `tree` scheme (DESIGN.md: "a Merkle tree over 1 KiB chunks").
pub const TREE_CHUNK_BYTES: u64 = 1024;
/// Calls to hash one full chunk.
pub const TREE_CHUNK_CALLS: u64 = TREE_CHUNK_BYTES / COMPRESSION_BLOCK_BYTES;
/// A tree node's value (chaining value or root), bytes; a parent hashes two of them: one call.
pub const TREE_NODE_BYTES: u64 = 32;
/// Size of the object the tree model's requests fall into (its depth sets the proof length).
pub const MODEL_OBJECT_BYTES: u64 = 1 << 20;

const _: () = assert!(DISK_BLOCK_BYTES % INCREMENTAL_BLOCK_BYTES == 0);
const _: () = assert!(INCREMENTAL_BLOCK_BYTES % COMPRESSION_BLOCK_BYTES == 0);
const _: () = assert!(2 * TREE_NODE_BYTES == COMPRESSION_BLOCK_BYTES);

/// The integrity schemes compared (DESIGN.md's names; seed 000 §3.4's in [`Scheme::seed_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Basic MAC: HMAC over all bytes.
    Mac,
    /// Stored Digest: HierMAC over per-block digests.
    Digest,
    /// Incremental Stored Digest: AdHash sums per block, HMAC over them.
    Incremental,
    /// nasd's Merkle tree over 1 KiB chunks, MAC over the root.
    Tree,
}

impl Scheme {
    /// All schemes, in the seed's order then nasd's.
    pub const ALL: [Scheme; 4] = [
        Scheme::Mac,
        Scheme::Digest,
        Scheme::Incremental,
        Scheme::Tree,
    ];

    /// DESIGN.md's short name.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Mac => "mac",
            Scheme::Digest => "digest",
            Scheme::Incremental => "incremental",
            Scheme::Tree => "tree",
        }
    }

    /// The name seed 000 §3.4 gives it.
    pub fn seed_name(self) -> &'static str {
        match self {
            Scheme::Mac => "Basic MAC (HMAC)",
            Scheme::Digest => "Stored Digest (HierMAC)",
            Scheme::Incremental => "Incremental Stored Digest (AdHash 256 B)",
            Scheme::Tree => "nasd tree (Merkle 1 KiB)",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who does the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The client: computes the request MAC on writes, verifies the reply MAC on reads.
    Client,
    /// The drive: the reverse.
    Drive,
}

impl Side {
    /// `client` or `drive`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Drive => "drive",
        }
    }
}

/// The data operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Read `len` bytes at `offset`.
    Read,
    /// Write `len` bytes at `offset` into an existing object.
    Write,
}

impl Op {
    /// `read` or `write`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

/// The work of one request, split the way the seed prices it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Unkeyed compression calls over data (digests, sub-block hashes, tree nodes).
    pub hash_calls: u64,
    /// Bytes the keyed MAC covers (data for `mac`; digests, sums or a root otherwise).
    pub mac_bytes: u64,
    /// 256-bit modular additions (AdHash combine).
    pub adds: u64,
    /// 256-bit modular subtractions (AdHash uncombine).
    pub subs: u64,
}

impl Cost {
    /// Compression calls, MAC included.
    pub fn calls(&self) -> u64 {
        self.hash_calls + hmac_calls(self.mac_bytes)
    }

    /// Compression calls with the MAC also covering `extra_mac_bytes` (request header, arguments):
    /// what the simulation charges the digest unit.
    pub fn calls_with_header(&self, extra_mac_bytes: u64) -> u64 {
        self.hash_calls + hmac_calls(self.mac_bytes + extra_mac_bytes)
    }

    /// The seed's "common currency": calls plus combine and uncombine work.
    pub fn compressions(&self) -> f64 {
        self.calls() as f64 + ADD_COST_CALLS * self.adds as f64 + SUB_COST_CALLS * self.subs as f64
    }

    fn add(&mut self, other: Cost) {
        self.hash_calls += other.hash_calls;
        self.mac_bytes += other.mac_bytes;
        self.adds += other.adds;
        self.subs += other.subs;
    }
}

/// Calls to hash `bytes` bytes, padding free.
pub fn hash_calls(bytes: u64) -> u64 {
    bytes.div_ceil(COMPRESSION_BLOCK_BYTES)
}

/// Calls of HMAC over `bytes` bytes.
pub fn hmac_calls(bytes: u64) -> u64 {
    hash_calls(bytes) + HMAC_EXTRA_CALLS
}

/// The part of a request inside one disk block: `start` and `len` relative to the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    start: u64,
    len: u64,
}

impl Piece {
    fn is_full(&self, block: u64) -> bool {
        self.len == block
    }
}

/// Splits `[offset, offset + len)` at multiples of `block`.
fn pieces(offset: u64, len: u64, block: u64) -> Vec<Piece> {
    let mut out = Vec::new();
    let end = offset + len;
    let mut pos = offset;
    while pos < end {
        let start = pos % block;
        let take = (block - start).min(end - pos);
        out.push(Piece { start, len: take });
        pos += take;
    }
    out
}

/// The cost of `scheme` for `side` doing `op` on `len` bytes at `offset`.
pub fn cost(scheme: Scheme, side: Side, op: Op, offset: u64, len: u64) -> Cost {
    match scheme {
        Scheme::Mac => Cost {
            mac_bytes: len,
            ..Cost::default()
        },
        Scheme::Digest => digest_cost(side, op, offset, len),
        Scheme::Incremental => incremental_cost(side, op, offset, len),
        Scheme::Tree => tree_cost(side, op, offset, len),
    }
}

/// HierMAC (seed 000 §3.2, §3.4.2, §3.4.3).
fn digest_cost(side: Side, op: Op, offset: u64, len: u64) -> Cost {
    let ps = pieces(offset, len, DISK_BLOCK_BYTES);
    let mut c = Cost {
        mac_bytes: STORED_DIGEST_BYTES * ps.len() as u64,
        ..Cost::default()
    };
    for p in &ps {
        let full = p.is_full(DISK_BLOCK_BYTES);
        c.hash_calls += match (side, op) {
            // The client hashes every byte it sends or receives, block by block.
            (Side::Client, _) => hash_calls(p.len),
            // The drive reuses stored digests of full blocks and hashes partial ones on the fly.
            (Side::Drive, Op::Read) if full => 0,
            (Side::Drive, Op::Read) => hash_calls(p.len),
            // Verifying a full block yields its new stored digest.
            (Side::Drive, Op::Write) if full => hash_calls(p.len),
            // Written prefix of a block: the verifying hash continues over the rest of the block
            // (from its last full 64-byte block), giving the new stored digest.
            (Side::Drive, Op::Write) if p.start == 0 => {
                hash_calls(p.len) + DISK_BLOCK_BYTES / COMPRESSION_BLOCK_BYTES
                    - p.len / COMPRESSION_BLOCK_BYTES
            }
            // Write inside a block: verify, then rehash the merged block from scratch.
            (Side::Drive, Op::Write) => {
                hash_calls(p.len) + DISK_BLOCK_BYTES / COMPRESSION_BLOCK_BYTES
            }
        };
    }
    c
}

/// The fragments of a piece inside its incremental blocks: (full sub-blocks, partial fragment
/// lengths).
fn sub_fragments(p: Piece) -> (u64, Vec<u64>) {
    let mut full = 0;
    let mut partial = Vec::new();
    for f in pieces(p.start, p.len, INCREMENTAL_BLOCK_BYTES) {
        if f.is_full(INCREMENTAL_BLOCK_BYTES) {
            full += 1;
        } else {
            partial.push(f.len);
        }
    }
    (full, partial)
}

/// Hashing a piece directly: every sub-block fragment hashed and added into the sum.
fn adhash_direct(p: Piece) -> Cost {
    let (full, partial) = sub_fragments(p);
    Cost {
        hash_calls: full * INCREMENTAL_BLOCK_CALLS
            + partial.iter().map(|&l| hash_calls(l)).sum::<u64>(),
        adds: full + partial.len() as u64,
        ..Cost::default()
    }
}

/// AdHash (seed 000 §3.3, §3.4).
fn incremental_cost(side: Side, op: Op, offset: u64, len: u64) -> Cost {
    let ps = pieces(offset, len, DISK_BLOCK_BYTES);
    let mut c = Cost {
        mac_bytes: ADHASH_SUM_BYTES * ps.len() as u64,
        ..Cost::default()
    };
    for p in &ps {
        let full = p.is_full(DISK_BLOCK_BYTES);
        match (side, op) {
            (Side::Client, _) => c.add(adhash_direct(*p)),
            (Side::Drive, Op::Read) if full => {}
            (Side::Drive, Op::Read) => {
                // Complementary property: stored sum minus the sub-blocks not fully covered,
                // plus the partial fragments hashed directly.
                let (covered, partial) = sub_fragments(*p);
                let uncovered = INCREMENTAL_BLOCKS_PER_DISK_BLOCK - covered;
                let complement = Cost {
                    hash_calls: uncovered * INCREMENTAL_BLOCK_CALLS
                        + partial.iter().map(|&l| hash_calls(l)).sum::<u64>(),
                    subs: uncovered,
                    adds: partial.len() as u64,
                    ..Cost::default()
                };
                let direct = adhash_direct(*p);
                c.add(if complement.compressions() < direct.compressions() {
                    complement
                } else {
                    direct
                });
            }
            (Side::Drive, Op::Write) => {
                // Verify: the same sums the client computed.
                c.add(adhash_direct(*p));
                if !full {
                    // Update the stored sum, by the cheaper of: (a) subtract the old hash of every
                    // touched sub-block and add the new one (an edge sub-block is merged old and
                    // new bytes: hash it whole); (b) rebuild the sum from the untouched and edge
                    // sub-blocks plus the new hashes already computed.
                    let (covered, partial) = sub_fragments(*p);
                    let edges = partial.len() as u64;
                    let swap = Cost {
                        hash_calls: covered * INCREMENTAL_BLOCK_CALLS
                            + edges * 2 * INCREMENTAL_BLOCK_CALLS,
                        subs: covered + edges,
                        adds: covered + edges,
                        ..Cost::default()
                    };
                    let rebuild = Cost {
                        hash_calls: (INCREMENTAL_BLOCKS_PER_DISK_BLOCK - covered)
                            * INCREMENTAL_BLOCK_CALLS,
                        adds: INCREMENTAL_BLOCKS_PER_DISK_BLOCK,
                        ..Cost::default()
                    };
                    c.add(if swap.compressions() < rebuild.compressions() {
                        swap
                    } else {
                        rebuild
                    });
                }
            }
        }
    }
    c
}

/// Internal nodes of a BLAKE3-shaped tree over `leaves` leaves (left subtree: the largest power of
/// two below `leaves`) whose span meets `[lo, hi)`: the parents a verifier or updater recomputes.
pub fn tree_parents_touched(leaves: u64, lo: u64, hi: u64) -> u64 {
    fn walk(base: u64, n: u64, lo: u64, hi: u64) -> u64 {
        if n <= 1 || hi <= base || lo >= base + n {
            return 0;
        }
        // The largest power of two that leaves at least one leaf on the right.
        let left = 1u64 << (63 - (n - 1).leading_zeros());
        1 + walk(base, left, lo, hi) + walk(base + left, n - left, lo, hi)
    }
    walk(0, leaves, lo, hi)
}

/// nasd's Merkle tree (DESIGN.md "tree").
fn tree_cost(side: Side, op: Op, offset: u64, len: u64) -> Cost {
    let leaves = MODEL_OBJECT_BYTES.div_ceil(TREE_CHUNK_BYTES);
    let (lo, hi) = if len == 0 {
        (0, 0)
    } else {
        (
            offset / TREE_CHUNK_BYTES,
            (offset + len).div_ceil(TREE_CHUNK_BYTES),
        )
    };
    let chunks = hi - lo;
    debug_assert!(lo <= hi && hi <= leaves);
    let parents = tree_parents_touched(leaves, lo, hi);
    let root_mac = Cost {
        mac_bytes: TREE_NODE_BYTES,
        ..Cost::default()
    };
    match (side, op) {
        // The drive MACs the stored root and sends the stored proof: no data hashed.
        (Side::Drive, Op::Read) => root_mac,
        // The client hashes the widened chunks and the parents up to the root.
        (Side::Client, Op::Read) => Cost {
            hash_calls: chunks * TREE_CHUNK_CALLS + parents,
            ..root_mac
        },
        // Writes (nasd's write form): every chunk piece is hashed (a leaf when it starts its
        // chunk) and the MAC covers the piece values; the drive verifies the same way, then
        // rehashes each partially written chunk with its old bytes, reusing whole-chunk pieces as
        // leaves, and recomputes every parent on their paths to the root.
        (_, Op::Write) => {
            let ps = pieces(offset, len, TREE_CHUNK_BYTES);
            let verify = Cost {
                hash_calls: ps.iter().map(|p| hash_calls(p.len)).sum(),
                mac_bytes: TREE_NODE_BYTES * ps.len() as u64,
                ..Cost::default()
            };
            if side == Side::Client {
                return verify;
            }
            let partial = ps.iter().filter(|p| !p.is_full(TREE_CHUNK_BYTES)).count() as u64;
            Cost {
                hash_calls: verify.hash_calls + partial * TREE_CHUNK_CALLS + parents,
                ..verify
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_over_one_disk_block_is_131_calls() {
        // 8192 / 64 = 128 message blocks + inner key block + outer key block + outer digest.
        let c = cost(Scheme::Mac, Side::Drive, Op::Read, 0, DISK_BLOCK_BYTES);
        assert_eq!(c.calls(), 131);
        assert_eq!(c.compressions(), 131.0);
    }

    #[test]
    fn hiermac_aligned_block_read_costs_the_drive_one_mac_over_a_digest() {
        let c = cost(Scheme::Digest, Side::Drive, Op::Read, 0, DISK_BLOCK_BYTES);
        assert_eq!(c.hash_calls, 0);
        assert_eq!(c.calls(), 4); // HMAC over 20 bytes: 1 + 3
        let c = cost(
            Scheme::Digest,
            Side::Client,
            Op::Read,
            0,
            4 * DISK_BLOCK_BYTES,
        );
        assert_eq!(c.calls(), 4 * 128 + hmac_calls(80));
    }

    #[test]
    fn hiermac_misaligned_read_hashes_the_partial_head() {
        // 1000 bytes into block 0, through the end of block 1: 7192 bytes hashed, block 1 stored.
        let c = cost(Scheme::Digest, Side::Drive, Op::Read, 1000, 7192 + 8192);
        assert_eq!(c.hash_calls, 7192u64.div_ceil(64));
        assert_eq!(c.mac_bytes, 40);
    }

    #[test]
    fn hiermac_small_write_inside_a_block_rehashes_the_block() {
        let c = cost(Scheme::Digest, Side::Drive, Op::Write, 100, 10);
        assert_eq!(c.hash_calls, 1 + 128);
        let c = cost(Scheme::Digest, Side::Drive, Op::Write, 0, 100);
        assert_eq!(c.hash_calls, 2 + 128 - 1);
    }

    #[test]
    fn adhash_client_pays_one_add_per_sub_block() {
        let c = cost(
            Scheme::Incremental,
            Side::Client,
            Op::Read,
            0,
            DISK_BLOCK_BYTES,
        );
        assert_eq!(c.hash_calls, 128);
        assert_eq!(c.adds, 32);
        // 128 sub-block calls, 32 adds, HMAC over one 32-byte sum (1 + 3 calls).
        assert!((c.compressions() - (128.0 + 3.2 + 4.0)).abs() < 1e-9);
    }

    #[test]
    fn adhash_partial_read_hashes_at_most_half_a_block() {
        for len in (1..DISK_BLOCK_BYTES).step_by(97) {
            let c = cost(Scheme::Incremental, Side::Drive, Op::Read, 0, len);
            // Half a block (64 calls) plus one partial sub-block (4 calls) at most.
            assert!(c.hash_calls <= 64 + 4, "len {len}: {c:?}");
        }
        // Reading all but the last sub-block: subtract it (4 calls, one sub).
        let c = cost(
            Scheme::Incremental,
            Side::Drive,
            Op::Read,
            0,
            DISK_BLOCK_BYTES - 256,
        );
        assert_eq!((c.hash_calls, c.subs, c.adds), (4, 1, 0));
    }

    #[test]
    fn adhash_small_write_is_cheap_where_hiermac_is_not() {
        let inc = cost(Scheme::Incremental, Side::Drive, Op::Write, 1000, 256);
        let dig = cost(Scheme::Digest, Side::Drive, Op::Write, 1000, 256);
        assert!(
            inc.compressions() < dig.compressions() / 4.0,
            "{inc:?} {dig:?}"
        );
    }

    #[test]
    fn tree_parents_of_a_balanced_tree() {
        // 8 leaves: 7 internal nodes; one leaf touches its 3 ancestors.
        assert_eq!(tree_parents_touched(8, 0, 8), 7);
        assert_eq!(tree_parents_touched(8, 5, 6), 3);
        assert_eq!(tree_parents_touched(8, 0, 0), 0);
        // 5 leaves split 4 + 1: the root and the left subtree's path.
        assert_eq!(tree_parents_touched(5, 4, 5), 1);
        assert_eq!(tree_parents_touched(5, 0, 1), 3);
        assert_eq!(tree_parents_touched(1, 0, 1), 0);
    }

    #[test]
    fn tree_read_costs_the_drive_a_mac_over_the_root_only() {
        for (off, len) in [(0, 1), (1000, 70_000), (8192, 8192)] {
            let c = cost(Scheme::Tree, Side::Drive, Op::Read, off, len);
            assert_eq!(c.calls(), 4);
        }
    }
}
