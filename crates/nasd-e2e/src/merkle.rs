//! The Merkle tree shared by the three constructions (requirements B.3; seed 003 MT-EINT).
//!
//! The tree is laid over block indices: a node at `(level, index)` covers blocks
//! `index·2^level .. (index+1)·2^level`, and the root sits at level `height_for(blocks)`, the
//! smallest `h` with `2^h ≥ blocks`. Positions without data hold the *empty* hash of their level
//! (`E_0 = 0^32`, `E_{l+1} = node(E_l, E_l)`), and empty nodes are not stored, so the same code
//! serves MT-EINT's dense tree (a leaf for every block) and RAND-EINT's sparse one (leaves only for
//! random-looking blocks, B.3 "a *sparse* Merkle tree keyed by block index").
//!
//! - leaf `ℓ_i = BLAKE3("nasd-e2e leaf v1" ‖ i ‖ ctr_i ‖ κ ‖ C_i)`: B.3's
//!   `H("leaf" ‖ i ‖ ctr_i ‖ C_i)` plus `κ = BLAKE3-KDF("… key commitment", K_f)`, a one-way
//!   commitment to the file key the block was written under. Without it a leaf vouches for the
//!   ciphertext only, and a reader handed a wrong key (HPKE base mode lets anyone who knows a
//!   user's public key wrap *some* key to it) would accept garbage; with it the wrong key fails
//!   the leaf like tampering does,
//! - node `BLAKE3("nasd-e2e node v1" ‖ left ‖ right)` (B.3's `H("node" ‖ l ‖ r)`).
//!
//! Every non-empty node, the root included, is stored in the untrusted store, so a tree grows by
//! one level when a block is appended past a power of two without moving anything.
//!
//! [`NodeCache`] is the client-side cache of verified nodes whose size seed 003's Fig 9 varies
//! (0, 1024, 2048 and 4096 bytes): a read stops climbing at the first cached node it meets, and a
//! cached sibling is not fetched. The cache is only valid for the root it was filled under.

use crate::codec::hash_parts;
use std::collections::HashMap;
use std::sync::OnceLock;

/// A node or leaf hash.
pub type Hash = [u8; 32];
/// Bytes of a stored node.
pub const NODE_BYTES: usize = 32;
/// Bytes one cached node is charged: its hash and its position (level packed into the index).
pub const NODE_CACHE_ENTRY_BYTES: usize = NODE_BYTES + 8;
/// Tree levels above the leaves that a `u64` block index can need.
pub const HEIGHT_MAX: u32 = 64;

/// The leaf of block `index` at write count `ctr` with stored ciphertext `ciphertext`, written
/// under the file key whose commitment is `key_commitment` (see the module docs).
pub fn leaf_hash(index: u64, ctr: u64, key_commitment: &[u8; 32], ciphertext: &[u8]) -> Hash {
    hash_parts(
        b"nasd-e2e leaf v1",
        &[
            &index.to_le_bytes(),
            &ctr.to_le_bytes(),
            key_commitment,
            ciphertext,
        ],
    )
}

/// An inner node over its two children.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    hash_parts(b"nasd-e2e node v1", &[left, right])
}

/// The hash of an empty subtree whose root is at `level`.
pub fn empty(level: u32) -> Hash {
    static TABLE: OnceLock<Vec<Hash>> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = vec![[0u8; 32]];
        for l in 0..HEIGHT_MAX as usize {
            let e = node_hash(&t[l], &t[l]);
            t.push(e);
        }
        t
    });
    t[level as usize]
}

/// Height of the tree over `blocks` blocks: the smallest `h` with `2^h ≥ blocks` (0 for 0 or 1).
pub fn height_for(blocks: u64) -> u32 {
    if blocks <= 1 {
        0
    } else {
        64 - (blocks - 1).leading_zeros()
    }
}

/// The root over `height` levels after lifting `root` from `from_height`: the old tree becomes
/// the leftmost subtree and everything to its right is empty.
pub fn lift_root(mut root: Hash, from_height: u32, to_height: u32) -> Hash {
    for l in from_height..to_height {
        root = node_hash(&root, &empty(l));
    }
    root
}

/// A position in the tree.
pub type NodePos = (u8, u64);

/// Client-side LRU cache of verified nodes (seed 003 Fig 9's "cache for Merkle trees").
#[derive(Clone, Debug)]
pub struct NodeCache {
    capacity: usize,
    entries: HashMap<NodePos, (Hash, u64)>,
    clock: u64,
    /// The trusted root every entry is consistent with.
    root: Option<Hash>,
}

impl NodeCache {
    /// A cache of `bytes` bytes ([`NODE_CACHE_ENTRY_BYTES`] per node); 0 disables it.
    pub fn new(bytes: usize) -> NodeCache {
        NodeCache {
            capacity: bytes / NODE_CACHE_ENTRY_BYTES,
            entries: HashMap::new(),
            clock: 0,
            root: None,
        }
    }

    pub fn capacity_nodes(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keeps the entries if they were verified under `root`, else drops them.
    pub fn sync(&mut self, root: &Hash) {
        if self.root.as_ref() != Some(root) {
            self.entries.clear();
            self.root = Some(*root);
        }
    }

    /// Records that the tree's root is now `root` (after this client's own write, with the
    /// changed path already put).
    pub fn set_root(&mut self, root: Hash) {
        self.root = Some(root);
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.root = None;
    }

    pub fn get(&mut self, pos: NodePos) -> Option<Hash> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(&pos).map(|e| {
            e.1 = clock;
            e.0
        })
    }

    pub fn put(&mut self, pos: NodePos, h: Hash) {
        if self.capacity == 0 {
            return;
        }
        self.clock += 1;
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&pos) {
            // The cache holds at most ~100 nodes for Fig 9's sizes: a scan is cheap.
            if let Some(oldest) = self.entries.iter().min_by_key(|e| e.1 .1).map(|e| *e.0) {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(pos, (h, self.clock));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heights_and_empty_hashes() {
        assert_eq!(height_for(0), 0);
        assert_eq!(height_for(1), 0);
        assert_eq!(height_for(2), 1);
        assert_eq!(height_for(3), 2);
        assert_eq!(height_for(4), 2);
        assert_eq!(height_for(5), 3);
        assert_eq!(height_for(u64::MAX), 64);
        assert_eq!(empty(0), [0; 32]);
        assert_eq!(empty(1), node_hash(&[0; 32], &[0; 32]));
        assert_eq!(lift_root(empty(1), 1, 3), empty(3));
    }

    #[test]
    fn cache_evicts_the_least_recently_used() {
        let mut c = NodeCache::new(2 * NODE_CACHE_ENTRY_BYTES);
        c.sync(&[9; 32]);
        c.put((0, 1), [1; 32]);
        c.put((0, 2), [2; 32]);
        assert_eq!(c.get((0, 1)), Some([1; 32]));
        c.put((0, 3), [3; 32]);
        assert_eq!(c.get((0, 2)), None);
        assert_eq!(c.get((0, 1)), Some([1; 32]));
        c.sync(&[8; 32]);
        assert!(c.is_empty(), "another root drops everything");
        let mut off = NodeCache::new(0);
        off.put((0, 1), [1; 32]);
        assert!(off.is_empty());
    }
}
