//! The key log's tree and its signed heads (issue 21 §4): an append-only log of every change
//! of users' keys whose root a client can recompute from the entries it holds, so a manager
//! that shows two clients different histories signs two heads no single history explains.
//!
//! The tree is RFC 6962's Merkle Tree Hash (§2.1), as Certificate Transparency and key
//! transparency logs (CONIKS, Keybase) use it, over SHA-256:
//! ```text
//! leaf(e)        := SHA-256(0x00 || e)
//! node(l, r)     := SHA-256(0x01 || l || r)
//! MTH({})        := SHA-256()
//! MTH({d0})      := leaf(d0)
//! MTH(D[0..n])   := node(MTH(D[0..k]), MTH(D[k..n]))   k the largest power of two below n
//! head message   := "nasd key log head v1" 0x00 || u64 size (LE) || [32] root
//! ```
//! A head is signed with the manager's Ed25519 log key (strict verification). Known-answer
//! vectors: the RFC 6962 roots of Certificate Transparency's test inputs (tests below).

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};

/// A node of the tree (a leaf's hash, a subtree's root).
pub type Hash = [u8; 32];

/// Domain separation of the signed head.
const HEAD_CONTEXT: &[u8] = b"nasd key log head v1\0";

/// The hash of one entry's encoding, as the tree's leaf.
pub fn leaf_hash(entry: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(entry);
    h.finalize().into()
}

fn node_hash(l: &Hash, r: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(l);
    h.update(r);
    h.finalize().into()
}

/// The root of the tree over `leaves` (their hashes, in log order).
pub fn root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
        }
    }
}

/// The largest power of two below `n` (n >= 2).
fn split(n: usize) -> usize {
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// What the log key signs for a log of `size` entries with root `root`.
pub fn head_message(size: u64, root: &Hash) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEAD_CONTEXT.len() + 8 + 32);
    m.extend_from_slice(HEAD_CONTEXT);
    m.extend_from_slice(&size.to_le_bytes());
    m.extend_from_slice(root);
    m
}

/// Signs the head of a log of `size` entries with root `root`.
pub fn sign_head(key: &SigningKey, size: u64, root: &Hash) -> [u8; 64] {
    key.sign(&head_message(size, root)).to_bytes()
}

/// Whether `signature` is `public`'s signature of the head (`size`, `root`).
pub fn head_verifies(public: &[u8; 32], size: u64, root: &Hash, signature: &[u8; 64]) -> bool {
    VerifyingKey::from_bytes(public)
        .and_then(|k| k.verify_strict(&head_message(size, root), &Signature::from_bytes(signature)))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    /// Certificate Transparency's Merkle tree test inputs and the RFC 6962 root after each.
    #[test]
    fn roots_match_rfc6962_known_answers() {
        let data = [
            "",
            "00",
            "10",
            "2021",
            "3031",
            "40414243",
            "5051525354555657",
            "606162636465666768696a6b6c6d6e6f",
        ];
        let roots = [
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ];
        let leaves: Vec<Hash> = data.iter().map(|d| leaf_hash(&unhex(d))).collect();
        for (n, want) in roots.iter().enumerate() {
            assert_eq!(
                root(&leaves[..n]).to_vec(),
                unhex(want),
                "root of {n} leaves"
            );
        }
    }

    #[test]
    fn split_is_the_largest_power_of_two_below_n() {
        for (n, k) in [(2, 1), (3, 2), (4, 2), (5, 4), (8, 4), (9, 8), (1025, 1024)] {
            assert_eq!(split(n), k, "n = {n}");
        }
    }

    #[test]
    fn a_head_verifies_only_as_signed() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let public = key.verifying_key().to_bytes();
        let r = root(&[leaf_hash(b"a"), leaf_hash(b"b")]);
        let sig = sign_head(&key, 2, &r);
        assert!(head_verifies(&public, 2, &r, &sig));
        assert!(!head_verifies(&public, 3, &r, &sig), "another size");
        assert!(!head_verifies(&public, 2, &[0; 32], &sig), "another root");
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key().to_bytes();
        assert!(!head_verifies(&other, 2, &r, &sig), "another key");
    }
}
