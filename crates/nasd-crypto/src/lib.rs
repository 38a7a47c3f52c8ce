//! nasd's security layer: pure functions, no I/O.
//!
//! The key hierarchy of seed 002 Table 6, capability keys (§2.4, Fig 1), request and reply MACs
//! bound to nonces, the drive's replay cache, AES-256-GCM for the privacy options of Table 7,
//! the four integrity schemes of seed 000 §3 (Basic MAC, HierMAC, AdHash, and a Merkle tree)
//! in two digest suites (BLAKE3 and SHA-256), and Ed25519 writer signatures (seed 001 §3.3.1). Secrets live in [`Key`], which is zeroized on drop
//! and never printed; MACs are compared in constant time ([`ct_eq`]). Known-answer vectors are
//! kept in `tests/vectors/` at the repository root and checked by `tests/vectors.rs`.
//!
//! # Layout
//! - [`key`]: 32-byte secret keys; [`keyfile`]: their text file format.
//! - [`primitives`]: hashes, MACs and the KDF of both suites; [`Cost`] meters them.
//! - [`capability`]: capability keys and sealed capabilities.
//! - [`request`]: request/reply digests, per-request privacy keys, key wrapping.
//! - [`nonce`]: the bounded replay cache.
//! - [`aead`]: authenticated encryption (AES-256-GCM).
//! - [`seal`]: a drive's keys at rest under a passphrase (Argon2id, AES-256-GCM-SIV).
//! - [`integrity`]: the schemes and the client-side verifier.
//! - [`keylog`]: the key log's Merkle tree (RFC 6962) and its signed heads.
//! - [`wsig`]: writer signatures (seed 001 §3.3.1 scheme 1): the signed message of a write,
//!   Ed25519 signing and strict verification.

pub mod aead;
pub mod capability;
pub mod integrity;
pub mod key;
pub mod keyfile;
pub mod keylog;
pub mod nonce;
pub mod primitives;
pub mod request;
pub mod seal;
pub mod wsig;

pub use key::{Key, KEY_BYTES};
pub use primitives::{ct_eq, Digest, Mac};

/// Cryptographic work done, for the drive's "bytes hashed per request" metric and the lab's
/// compression-call counts (seed 000 §3.4).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Cost {
    /// Object data and attribute bytes fed to a hash or MAC.
    pub data_bytes: u64,
    /// Hash and MAC invocations finished.
    pub calls: u64,
    /// 64-byte compression-function input blocks, `ceil(len / 64)` per invocation, padding
    /// ignored as in seed 000 §3.4 (HMAC's two extra key blocks are counted).
    pub blocks64: u64,
    /// 256-bit modular additions (combine) and subtractions (uncombine) of AdHash.
    pub adds: u64,
    pub subs: u64,
}

impl Cost {
    /// One finished hash over `total` bytes of which `data` were object data.
    pub fn data(&mut self, total: usize, data: usize) {
        self.data_bytes += data as u64;
        self.finish_call(total as u64);
    }
    pub fn finish_call(&mut self, total: u64) {
        self.calls += 1;
        self.blocks64 += total.div_ceil(64);
    }
    pub fn add_all(&mut self, o: &Cost) {
        self.data_bytes += o.data_bytes;
        self.calls += o.calls;
        self.blocks64 += o.blocks64;
        self.adds += o.adds;
        self.subs += o.subs;
    }
}

/// Fills `buf` from the operating system's CSPRNG.
pub fn random_bytes(buf: &mut [u8]) {
    use ring::rand::SecureRandom;
    ring::rand::SystemRandom::new()
        .fill(buf)
        .expect("the OS random source is available");
}

/// A random `u64` from the operating system's CSPRNG.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    random_bytes(&mut b);
    u64::from_le_bytes(b)
}
