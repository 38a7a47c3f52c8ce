//! Seed 003's three integrity constructions as one per-file state machine (requirements B.3).
//!
//! An [`EintFile`] is a trusted client's view of one file: its [`TrustedRecord`] (from the
//! manager), the file keys it holds, a cache of verified counter intervals and Merkle nodes. It
//! reads and writes blocks through an [`UntrustedStore`] and updates the record on every write; the
//! caller commits [`EintFile::record`] to the manager by compare-and-swap on the old record's hash
//! (B.3 step 3) and, if that fails, reopens the file with the record that won.
//!
//! Per block `i` with plaintext `B`, counter `ctr_i` (incremented on every write) and ciphertext
//! `C = HCTR2_K^{file_id‖i‖ctr_i}(B)`:
//!
//! - **MT-EINT** (seed 003, the Merkle-tree baseline of Figs 9–10): leaf `ℓ_i = H(i‖ctr_i‖C)` for
//!   every block; a read recomputes the leaf, climbs to the root with the stored siblings and
//!   compares it with the record's root (stopping early at a cached node).
//! - **RAND-EINT**: a leaf only when `IsRand(B)` ([`crate::entropy`]); a low-entropy block is
//!   accepted on its looks, since a modified, moved or replayed ciphertext decrypts to
//!   random-looking bytes that then need a leaf no one can forge.
//! - **COMP-EINT**: if `z = deflate(B)` fits with a tag, `2 + |z| + t ≤ b`, the block enciphers
//!   `|z| (2 B LE) ‖ z ‖ zeros ‖ tag` with `tag = MAC_{K_m}(file_id ‖ i ‖ ctr_i ‖ B)` (t = 16 bytes,
//!   keyed BLAKE3 under `K_m` derived from `K_f`) and needs no leaf; otherwise it falls back to a
//!   RAND-EINT leaf. A read tries the tag first, then RAND-EINT.
//!
//! **The compressed/raw flag.** B.3 asks for a per-block flag in the authenticated structure. Here
//! it is implicit and still authenticated: a block is "compressed" iff its deciphered content
//! carries a valid tag under `K_m` bound to `(file_id, i, ctr_i, B)`, which only the writer can
//! make, and "raw" otherwise, when RAND-EINT's rule (leaf under the trusted root, or low entropy)
//! decides. A drive cannot flip one into the other: any change to `C` deciphers to random bytes
//! (no tag, random-looking, no leaf). Storing the bit instead (in the intervals or as a tree leaf)
//! would cost integrity bandwidth on every read of a compressed block, which is what COMP-EINT
//! exists to avoid (seed 003 §7.3: "COMP-EINT is the best option for primarily read-only
//! workloads when minimizing read latency is a priority").
//!
//! Counters are the counter intervals of [`crate::counters`], stored as side metadata and pinned by
//! `counters_digest`; the tree is [`crate::merkle`]'s, its root pinned by `root`.
//!
//! **Metrics** (seed 003 §7): every operation returns [`OpMetrics`] with the integrity bytes it
//! moved to and from untrusted storage (integrity bandwidth) besides the data bytes;
//! [`EintFile::storage`] reports untrusted integrity storage and trusted storage
//! ([`TrustedRecord::ENCODED_BYTES`] per file). Running time is measured by the caller.
//!
//! **Writes**: block `i < blocks − 1` must be written whole; the last block may be short; a
//! block at or past `blocks` appends (after a whole last block), and blocks skipped between the
//! end and it become holes: counter 0, no ciphertext, read as zeros ([`EintFile::extend`]
//! makes them too). A node fetched for a write is verified against the
//! current root before the new root is computed from it, as B.3's MT-EINT shortcut demands; a
//! RAND/COMP write of a low-entropy block over a block the store says had no leaf touches no tree
//! node at all (a leaf left behind by a lying store binds an older counter and never matches again).
//! Truncating a file by whole blocks is not supported yet.

use crate::block::{stored_len, valid_block_bytes, BlockCipher};
use crate::codec::DecodeError;
use crate::counters::CounterIntervals;
use crate::entropy::EntropyTest;
use crate::keys::{FileId, FileKey, KeyVersion};
use crate::merkle::{
    self, empty, height_for, leaf_hash, node_hash, Hash, NodeCache, NodePos, NODE_BYTES,
};
use crate::record::{Scheme, TrustedRecord};
use crate::store::{MetaKey, UntrustedStore};
use std::collections::BTreeMap;
use subtle::ConstantTimeEq;
use thiserror::Error;
use zeroize::Zeroizing;

/// Bytes of COMP-EINT's MAC tag (B.3 allows 16–32): 128 bits resist forgery as well as the
/// 2^−64 of RAND-EINT's entropy test does and better, and leave 16 more bytes for compressed data.
pub const COMP_TAG_BYTES: usize = 16;
/// Bytes of COMP-EINT's compressed-length field.
pub const COMP_LEN_BYTES: usize = 2;
/// Deflate level used by COMP-EINT: 1, the fastest; the block only has to shrink by
/// `COMP_LEN_BYTES + COMP_TAG_BYTES` = 18 bytes, which any compressible block does at level 1.
pub const COMP_DEFLATE_LEVEL: u8 = 1;

const _: () = assert!(
    crate::block::MAX_BLOCK_BYTES as usize - COMP_LEN_BYTES - COMP_TAG_BYTES <= u16::MAX as usize
);

/// Whether COMP-EINT stores `block` as a tagged compressed frame (`2 + |deflate(B)| + t` fits in
/// the block's stored length) rather than falling back to a RAND-EINT leaf: the decision
/// [`EintFile::write_block`] takes under [`Scheme::Comp`], for callers that count blocks without
/// writing them (the lab's share of blocks that "cannot be compressed enough", seed 003 §7.3).
pub fn comp_fits(block: &[u8]) -> bool {
    let capacity = stored_len(block.len());
    if capacity < COMP_LEN_BYTES + COMP_TAG_BYTES {
        return false;
    }
    let z = miniz_oxide::deflate::compress_to_vec(block, COMP_DEFLATE_LEVEL);
    COMP_LEN_BYTES + z.len() + COMP_TAG_BYTES <= capacity
}

/// KDF context of COMP-EINT's tag key `K_m`.
const TAG_KEY_CONTEXT: &str = "nasd-e2e 2026 comp tag key v1";

/// How a block was protected (write) or checked (read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BlockCheck {
    /// A Merkle leaf under the trusted root.
    #[default]
    MerkleLeaf,
    /// RAND-EINT's entropy test: low entropy, no leaf.
    LowEntropy,
    /// COMP-EINT's tag inside the block.
    CompressedTag,
}

/// What one operation cost (seed 003 §7's integrity bandwidth, plus data bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpMetrics {
    /// Integrity metadata bytes read from untrusted storage (nodes, counter intervals).
    pub integrity_bytes_read: u64,
    /// Integrity metadata bytes written to (or deleted from) untrusted storage.
    pub integrity_bytes_written: u64,
    /// Ciphertext bytes read.
    pub data_bytes_read: u64,
    /// Ciphertext bytes written.
    pub data_bytes_written: u64,
    /// Merkle nodes fetched, and served by the node cache instead.
    pub nodes_fetched: u64,
    pub nodes_from_cache: u64,
    /// How the block was protected or checked.
    pub check: BlockCheck,
}

impl OpMetrics {
    /// Integrity bandwidth: integrity bytes moved either way.
    pub fn integrity_bytes(&self) -> u64 {
        self.integrity_bytes_read + self.integrity_bytes_written
    }
}

/// Seed 003 §7's storage metrics for one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageMetrics {
    /// Side-metadata bytes on untrusted storage (nodes and counter intervals).
    pub untrusted_integrity_bytes: u64,
    /// Trusted bytes at the manager: the fixed-size record.
    pub trusted_bytes: u64,
}

/// Why an operation failed. [`EintError::is_integrity_violation`] tells a dishonest or damaged
/// store apart from a caller's mistake.
#[derive(Debug, Error)]
pub enum EintError {
    #[error("block {index} is past the end of the file ({blocks} blocks)")]
    OutOfRange { index: u64, blocks: u64 },
    #[error("block {index} cannot be written with {len} bytes: blocks hold {block_bytes}, only the last may be short, none empty, and appends follow a whole block ({blocks} blocks now)")]
    BadWrite {
        index: u64,
        len: usize,
        block_bytes: u32,
        blocks: u64,
    },
    #[error("no key for key version {key_version}")]
    MissingKey { key_version: KeyVersion },
    #[error("the record is of a plaintext file (pins only)")]
    NotEncrypted,
    #[error("block size {0} is not allowed")]
    BlockSize(u32),
    #[error("the record's block count {blocks} disagrees with its length {length}")]
    InconsistentRecord { blocks: u64, length: u64 },
    #[error("a block counter or the counter interval list reached its limit")]
    CounterLimit,
    #[error("block {index} is missing from the store")]
    MissingBlock { index: u64 },
    #[error("block {index} has {got} stored bytes, the record says {expected}")]
    CiphertextLength {
        index: u64,
        expected: usize,
        got: usize,
    },
    #[error("the counter intervals are missing from the store")]
    CountersMissing,
    #[error("the counter intervals do not match the record's digest")]
    CountersDigest,
    #[error("the counter intervals do not decode")]
    CountersDecode(#[source] DecodeError),
    #[error("the counter intervals cover {covered} blocks, the record says {blocks}")]
    CountersCoverage { covered: u64, blocks: u64 },
    #[error("block {index} does not verify against the trusted root")]
    MerklePath { index: u64 },
    #[error("block {index} looks random but has no valid leaf under the trusted root")]
    UnverifiedRandomBlock { index: u64 },
    #[error("untrusted store")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl EintError {
    /// True if the store returned something the trusted record refutes.
    pub fn is_integrity_violation(&self) -> bool {
        matches!(
            self,
            EintError::MissingBlock { .. }
                | EintError::CiphertextLength { .. }
                | EintError::CountersMissing
                | EintError::CountersDigest
                | EintError::CountersDecode(_)
                | EintError::CountersCoverage { .. }
                | EintError::MerklePath { .. }
                | EintError::UnverifiedRandomBlock { .. }
        )
    }
}

fn store_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> EintError {
    EintError::Store(Box::new(e))
}

/// The keys of one key version: the block cipher and COMP-EINT's tag key.
struct VersionKeys {
    cipher: BlockCipher,
    tag_key: Zeroizing<[u8; 32]>,
    /// κ of [`crate::merkle::leaf_hash`]: binds leaves to this key.
    commitment: [u8; 32],
}

impl VersionKeys {
    fn new(file_id: FileId, key: &FileKey) -> VersionKeys {
        VersionKeys {
            cipher: BlockCipher::new(file_id, key),
            tag_key: Zeroizing::new(blake3::derive_key(TAG_KEY_CONTEXT, key.expose())),
            commitment: key.commitment(),
        }
    }

    /// COMP-EINT's `tag = MAC_{K_m}(file_id ‖ i ‖ ctr_i ‖ B)`, keyed BLAKE3 truncated to 16 bytes.
    fn tag(&self, file_id: FileId, index: u64, ctr: u64, block: &[u8]) -> [u8; COMP_TAG_BYTES] {
        let mut h = blake3::Hasher::new_keyed(&self.tag_key);
        h.update(b"nasd-e2e comp tag v1");
        h.update(&file_id.0);
        h.update(&index.to_le_bytes());
        h.update(&ctr.to_le_bytes());
        h.update(&(block.len() as u64).to_le_bytes());
        h.update(block);
        let mut t = [0u8; COMP_TAG_BYTES];
        t.copy_from_slice(&h.finalize().as_bytes()[..COMP_TAG_BYTES]);
        t
    }

    /// COMP-EINT's frame `|z| ‖ z ‖ zeros ‖ tag` of `capacity` bytes, if `B` compresses enough.
    fn comp_frame(
        &self,
        file_id: FileId,
        index: u64,
        ctr: u64,
        block: &[u8],
        capacity: usize,
    ) -> Option<Vec<u8>> {
        if capacity < COMP_LEN_BYTES + COMP_TAG_BYTES {
            return None;
        }
        let z = miniz_oxide::deflate::compress_to_vec(block, COMP_DEFLATE_LEVEL);
        if COMP_LEN_BYTES + z.len() + COMP_TAG_BYTES > capacity {
            return None;
        }
        let mut frame = Vec::with_capacity(capacity);
        frame.extend_from_slice(&(z.len() as u16).to_le_bytes());
        frame.extend_from_slice(&z);
        frame.resize(capacity - COMP_TAG_BYTES, 0);
        frame.extend_from_slice(&self.tag(file_id, index, ctr, block));
        Some(frame)
    }

    /// The block in a deciphered COMP-EINT frame, if the frame is well formed, inflates to exactly
    /// `len` bytes and its tag verifies.
    fn open_comp_frame(
        &self,
        file_id: FileId,
        index: u64,
        ctr: u64,
        frame: &[u8],
        len: usize,
    ) -> Option<Vec<u8>> {
        if frame.len() < COMP_LEN_BYTES + COMP_TAG_BYTES {
            return None;
        }
        let zlen = usize::from(u16::from_le_bytes([frame[0], frame[1]]));
        let body = &frame[COMP_LEN_BYTES..frame.len() - COMP_TAG_BYTES];
        if zlen > body.len() || body[zlen..].iter().any(|&b| b != 0) {
            return None;
        }
        let block = miniz_oxide::inflate::decompress_to_vec_with_limit(&body[..zlen], len).ok()?;
        if block.len() != len {
            return None;
        }
        let tag = &frame[frame.len() - COMP_TAG_BYTES..];
        let want = self.tag(file_id, index, ctr, &block);
        bool::from(want.ct_eq(tag)).then_some(block)
    }
}

/// A trusted client's state for one file protected by MT-, RAND- or COMP-EINT.
pub struct EintFile {
    file_id: FileId,
    record: TrustedRecord,
    keys: BTreeMap<KeyVersion, VersionKeys>,
    /// Counter intervals verified against `record.counters_digest`.
    counters: Option<CounterIntervals>,
    cache: NodeCache,
    entropy: EntropyTest,
}

impl std::fmt::Debug for EintFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EintFile")
            .field("file_id", &self.file_id)
            .field("record", &self.record)
            .field("key_versions", &self.keys.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Metered access to the store.
struct Io<'a, S> {
    store: &'a S,
    m: &'a mut OpMetrics,
}

impl<S: UntrustedStore> Io<'_, S> {
    fn node(&mut self, cache: &mut NodeCache, level: u32, index: u64) -> Result<Hash, EintError> {
        if let Some(h) = cache.get((level as u8, index)) {
            self.m.nodes_from_cache += 1;
            return Ok(h);
        }
        self.m.nodes_fetched += 1;
        // Nodes sit at fixed places in a side object: a fetch moves NODE_BYTES, present or not.
        self.m.integrity_bytes_read += NODE_BYTES as u64;
        let v = self
            .store
            .read_meta(MetaKey::Node {
                level: level as u8,
                index,
            })
            .map_err(store_err)?;
        // A value of the wrong size is as good as a forged one: it will not verify.
        Ok(match v {
            Some(v) => v.as_slice().try_into().unwrap_or([0xff; 32]),
            None => empty(level),
        })
    }
}

impl EintFile {
    /// A new, empty file: its first trusted record, to be stored at the manager.
    pub fn create(
        file_id: FileId,
        scheme: Scheme,
        block_bytes: u32,
        key_version: KeyVersion,
        key: &FileKey,
        cache_bytes: usize,
    ) -> Result<EintFile, EintError> {
        if !valid_block_bytes(block_bytes) {
            return Err(EintError::BlockSize(block_bytes));
        }
        let counters = CounterIntervals::new();
        let record = TrustedRecord {
            scheme,
            block_bytes,
            blocks: 0,
            length: 0,
            key_version,
            root: empty(0),
            counters_digest: counters.digest(),
            binding: None,
        };
        let mut f = EintFile::open(file_id, record, cache_bytes)?;
        f.add_key(key_version, key);
        f.counters = Some(counters);
        Ok(f)
    }

    /// A file whose trusted record came from the manager. Add keys with [`EintFile::add_key`].
    pub fn open(
        file_id: FileId,
        record: TrustedRecord,
        cache_bytes: usize,
    ) -> Result<EintFile, EintError> {
        check_record(&record)?;
        Ok(EintFile {
            file_id,
            record,
            keys: BTreeMap::new(),
            counters: None,
            cache: NodeCache::new(cache_bytes),
            entropy: EntropyTest::new(record.block_bytes),
        })
    }

    /// Makes version `key_version` of the file key usable (for blocks written under it).
    pub fn add_key(&mut self, key_version: KeyVersion, key: &FileKey) {
        self.keys
            .insert(key_version, VersionKeys::new(self.file_id, key));
    }

    /// Switches new writes to `key_version` (after revoking a reader, B.1); old blocks keep
    /// their version until rewritten.
    pub fn rotate_key(&mut self, key_version: KeyVersion, key: &FileKey) {
        self.add_key(key_version, key);
        self.record.key_version = key_version;
    }

    pub fn file_id(&self) -> FileId {
        self.file_id
    }

    /// The current trusted record: commit it after writes.
    pub fn record(&self) -> &TrustedRecord {
        &self.record
    }

    /// Adopts a record read anew from the manager (another writer committed, or a commit of
    /// ours lost); drops everything verified under the old one.
    pub fn set_record(&mut self, record: TrustedRecord) -> Result<(), EintError> {
        check_record(&record)?;
        if record.block_bytes != self.record.block_bytes {
            self.entropy = EntropyTest::new(record.block_bytes);
        }
        self.record = record;
        self.counters = None;
        self.cache.clear();
        Ok(())
    }

    pub fn entropy_test(&self) -> &EntropyTest {
        &self.entropy
    }

    /// Seed 003 §7's storage metrics.
    pub fn storage<S: UntrustedStore>(&self, store: &S) -> Result<StorageMetrics, EintError> {
        Ok(StorageMetrics {
            untrusted_integrity_bytes: store.integrity_bytes_stored().map_err(store_err)?,
            trusted_bytes: TrustedRecord::ENCODED_BYTES as u64,
        })
    }

    /// The counter intervals, fetched and checked against the record if not already held.
    fn load_counters<S: UntrustedStore>(
        &mut self,
        io: &mut Io<'_, S>,
    ) -> Result<CounterIntervals, EintError> {
        if let Some(c) = &self.counters {
            return Ok(c.clone());
        }
        let enc = io.store.read_meta(MetaKey::Counters).map_err(store_err)?;
        let enc = match enc {
            Some(e) => e,
            // A file never written has no list; its record holds the empty list's digest.
            None if self.record.blocks == 0 => CounterIntervals::new().encode(),
            None => return Err(EintError::CountersMissing),
        };
        io.m.integrity_bytes_read += enc.len() as u64;
        if crate::counters::digest_of_encoding(&enc) != self.record.counters_digest {
            return Err(EintError::CountersDigest);
        }
        let c = CounterIntervals::decode(&enc).map_err(EintError::CountersDecode)?;
        if c.blocks() != self.record.blocks {
            return Err(EintError::CountersCoverage {
                covered: c.blocks(),
                blocks: self.record.blocks,
            });
        }
        self.counters = Some(c.clone());
        Ok(c)
    }

    fn keys_for(&self, key_version: KeyVersion) -> Result<&VersionKeys, EintError> {
        self.keys
            .get(&key_version)
            .ok_or(EintError::MissingKey { key_version })
    }

    /// Checks a write's shape; returns the new block count and length.
    fn check_write(&self, index: u64, len: usize) -> Result<(u64, u64), EintError> {
        let r = &self.record;
        let b = r.block_bytes as usize;
        let bad = || EintError::BadWrite {
            index,
            len,
            block_bytes: r.block_bytes,
            blocks: r.blocks,
        };
        if len == 0 || len > b {
            return Err(bad());
        }
        let whole_before = r.length.is_multiple_of(u64::from(r.block_bytes));
        if index + 1 < r.blocks && len != b {
            return Err(bad());
        }
        if index >= r.blocks && !whole_before {
            return Err(bad());
        }
        let blocks = r.blocks.max(index + 1);
        let length = if index + 1 == blocks {
            index
                .checked_mul(u64::from(r.block_bytes))
                .and_then(|s| s.checked_add(len as u64))
                .ok_or_else(bad)?
        } else {
            r.length
        };
        Ok((blocks, length))
    }

    /// Encrypts and stores block `index`, updates the side metadata and the trusted record.
    pub fn write_block<S: UntrustedStore>(
        &mut self,
        store: &mut S,
        index: u64,
        plaintext: &[u8],
    ) -> Result<OpMetrics, EintError> {
        let (blocks, length) = self.check_write(index, plaintext.len())?;
        let key_version = self.record.key_version;
        self.keys_for(key_version)?;
        let mut m = OpMetrics::default();
        self.cache.sync(&self.record.root);
        let mut counters = self.load_counters(&mut Io {
            store: &*store,
            m: &mut m,
        })?;
        let ctr = counters
            .inc(index, key_version)
            .ok_or(EintError::CounterLimit)?;
        if !counters.within_limits() {
            return Err(EintError::CounterLimit);
        }
        let (ciphertext, leaf, check) = self.protect(index, ctr, key_version, plaintext)?;
        let root = self.update_tree(store, &mut m, index, blocks, leaf)?;
        store.write_block(index, &ciphertext).map_err(store_err)?;
        m.data_bytes_written += ciphertext.len() as u64;
        let enc = counters.encode();
        store
            .write_meta(MetaKey::Counters, &enc)
            .map_err(store_err)?;
        m.integrity_bytes_written += enc.len() as u64;
        m.check = check;
        self.record.blocks = blocks;
        self.record.length = length;
        self.record.root = root;
        self.record.counters_digest = crate::counters::digest_of_encoding(&enc);
        self.counters = Some(counters);
        self.cache.set_root(root);
        Ok(m)
    }

    /// The stored ciphertext and tree leaf of a block under the file's scheme.
    fn protect(
        &self,
        index: u64,
        ctr: u64,
        key_version: KeyVersion,
        plaintext: &[u8],
    ) -> Result<(Vec<u8>, Hash, BlockCheck), EintError> {
        let keys = self.keys_for(key_version)?;
        if self.record.scheme == Scheme::Comp {
            let capacity = stored_len(plaintext.len());
            if let Some(mut frame) = keys.comp_frame(self.file_id, index, ctr, plaintext, capacity)
            {
                keys.cipher.encrypt_in_place(index, ctr, &mut frame);
                return Ok((frame, empty(0), BlockCheck::CompressedTag));
            }
        }
        let mut c = plaintext.to_vec();
        keys.cipher.encrypt_in_place(index, ctr, &mut c);
        let needs_leaf =
            self.record.scheme == Scheme::Mt || self.entropy.writer_is_random_looking(plaintext);
        if needs_leaf {
            let leaf = leaf_hash(index, ctr, &keys.commitment, &c);
            Ok((c, leaf, BlockCheck::MerkleLeaf))
        } else {
            Ok((c, empty(0), BlockCheck::LowEntropy))
        }
    }

    /// Sets leaf `index` to `leaf` in a tree over `blocks` blocks after verifying the path it
    /// replaces; returns the new root. Writes nothing unless verification passed.
    fn update_tree<S: UntrustedStore>(
        &mut self,
        store: &mut S,
        m: &mut OpMetrics,
        index: u64,
        blocks: u64,
        leaf: Hash,
    ) -> Result<Hash, EintError> {
        let h_old = height_for(self.record.blocks);
        let height = height_for(blocks);
        let root = merkle::lift_root(self.record.root, h_old, height);
        // The old root, lifted to the new height: stored so a later, taller tree finds it.
        let mut lifted = Vec::new();
        let mut r = self.record.root;
        for l in h_old..height {
            r = node_hash(&r, &empty(l));
            lifted.push((((l + 1) as u8, 0u64), r));
        }
        let mut io = Io { store: &*store, m };
        let old_leaf = io.node(&mut self.cache, 0, index)?;
        if old_leaf == empty(0) && leaf == empty(0) {
            // Low entropy over no leaf: nothing in the tree changes (module docs).
            write_nodes(store, m, &mut self.cache, &lifted)?;
            return Ok(root);
        }
        let mut siblings = Vec::with_capacity(height as usize);
        for l in 0..height {
            siblings.push(io.node(&mut self.cache, l, (index >> l) ^ 1)?);
        }
        let (old_root, _) = fold_path(index, old_leaf, &siblings);
        if old_root != root {
            return Err(EintError::MerklePath { index });
        }
        let (new_root, path) = fold_path(index, leaf, &siblings);
        for (l, s) in siblings.iter().enumerate() {
            self.cache.put((l as u8, (index >> l) ^ 1), *s);
        }
        write_nodes(store, m, &mut self.cache, &lifted)?;
        write_nodes(store, m, &mut self.cache, &path)?;
        Ok(new_root)
    }

    /// Grows the file to `length` bytes with a hole (zeros, nothing stored). The last block
    /// must be whole first (rewrite it padded); `BadWrite` otherwise.
    pub fn extend<S: UntrustedStore>(
        &mut self,
        store: &mut S,
        length: u64,
    ) -> Result<OpMetrics, EintError> {
        let r = self.record;
        if length <= r.length {
            return Ok(OpMetrics::default());
        }
        if !r.length.is_multiple_of(u64::from(r.block_bytes)) {
            return Err(EintError::BadWrite {
                index: r.blocks,
                len: 0,
                block_bytes: r.block_bytes,
                blocks: r.blocks,
            });
        }
        let mut m = OpMetrics::default();
        self.cache.sync(&r.root);
        let mut counters = self.load_counters(&mut Io {
            store: &*store,
            m: &mut m,
        })?;
        let blocks = TrustedRecord::blocks_for(length, r.block_bytes);
        counters.extend(blocks);
        if !counters.within_limits() {
            return Err(EintError::CounterLimit);
        }
        // The tree grows taller with the file: the old root, lifted, is its left spine.
        let (h_old, h) = (height_for(r.blocks), height_for(blocks));
        let mut lifted = Vec::new();
        let mut root = r.root;
        for l in h_old..h {
            root = node_hash(&root, &empty(l));
            lifted.push((((l + 1) as u8, 0u64), root));
        }
        write_nodes(store, &mut m, &mut self.cache, &lifted)?;
        let enc = counters.encode();
        store
            .write_meta(MetaKey::Counters, &enc)
            .map_err(store_err)?;
        m.integrity_bytes_written += enc.len() as u64;
        self.record.blocks = blocks;
        self.record.length = length;
        self.record.root = root;
        self.record.counters_digest = crate::counters::digest_of_encoding(&enc);
        self.counters = Some(counters);
        self.cache.set_root(root);
        Ok(m)
    }

    /// Reads block `index`, checks it against the trusted record and returns its plaintext.
    pub fn read_block<S: UntrustedStore>(
        &mut self,
        store: &S,
        index: u64,
    ) -> Result<(Vec<u8>, OpMetrics), EintError> {
        let len = self.record.block_len(index).ok_or(EintError::OutOfRange {
            index,
            blocks: self.record.blocks,
        })?;
        let mut m = OpMetrics::default();
        self.cache.sync(&self.record.root);
        let counters = self.load_counters(&mut Io { store, m: &mut m })?;
        let (ctr, key_version) = counters.get(index).ok_or(EintError::OutOfRange {
            index,
            blocks: self.record.blocks,
        })?;
        if ctr == 0 {
            // A hole: the authenticated counters say nothing was ever written here.
            m.check = BlockCheck::LowEntropy;
            return Ok((vec![0; len], m));
        }
        let c = store
            .read_block(index)
            .map_err(store_err)?
            .ok_or(EintError::MissingBlock { index })?;
        m.data_bytes_read += c.len() as u64;
        if c.len() != stored_len(len) {
            return Err(EintError::CiphertextLength {
                index,
                expected: stored_len(len),
                got: c.len(),
            });
        }
        let keys = self.keys_for(key_version)?;
        let mut p = c.clone();
        keys.cipher.decrypt_in_place(index, ctr, &mut p);
        if self.record.scheme == Scheme::Comp {
            if let Some(b) = keys.open_comp_frame(self.file_id, index, ctr, &p, len) {
                m.check = BlockCheck::CompressedTag;
                return Ok((b, m));
            }
        }
        let needs_leaf = self.record.scheme == Scheme::Mt || self.entropy.is_random_looking(&p);
        if !needs_leaf {
            m.check = BlockCheck::LowEntropy;
            return Ok((p, m));
        }
        let leaf = leaf_hash(index, ctr, &keys.commitment, &c);
        if !self.verify_leaf(store, &mut m, index, leaf)? {
            return Err(match self.record.scheme {
                Scheme::Mt | Scheme::Pins => EintError::MerklePath { index },
                Scheme::Rand | Scheme::Comp => EintError::UnverifiedRandomBlock { index },
            });
        }
        m.check = BlockCheck::MerkleLeaf;
        Ok((p, m))
    }

    /// Whether `leaf` is leaf `index` under the trusted root, climbing only until a cached
    /// (already verified) node is met.
    fn verify_leaf<S: UntrustedStore>(
        &mut self,
        store: &S,
        m: &mut OpMetrics,
        index: u64,
        leaf: Hash,
    ) -> Result<bool, EintError> {
        let height = height_for(self.record.blocks);
        let mut io = Io { store, m };
        let mut cur = leaf;
        let mut seen = Vec::with_capacity(2 * height as usize + 1);
        seen.push(((0u8, index), leaf));
        let mut verified = self.cache.get((0, index)).map(|c| c == leaf);
        let mut l = 0;
        while verified.is_none() && l < height {
            let idx = index >> l;
            let sib = io.node(&mut self.cache, l, idx ^ 1)?;
            seen.push(((l as u8, idx ^ 1), sib));
            cur = if idx & 1 == 0 {
                node_hash(&cur, &sib)
            } else {
                node_hash(&sib, &cur)
            };
            l += 1;
            seen.push(((l as u8, index >> l), cur));
            if l < height {
                verified = self.cache.get((l as u8, index >> l)).map(|c| c == cur);
            }
        }
        let ok = verified.unwrap_or(cur == self.record.root);
        if ok {
            for (pos, h) in seen {
                self.cache.put(pos, h);
            }
        }
        Ok(ok)
    }
}

/// A record [`EintFile`] can work with: an allowed block size and a block count that matches
/// the length (what [`TrustedRecord::decode`] checks, for records built in code).
fn check_record(record: &TrustedRecord) -> Result<(), EintError> {
    if record.scheme == Scheme::Pins {
        return Err(EintError::NotEncrypted);
    }
    if !valid_block_bytes(record.block_bytes) {
        return Err(EintError::BlockSize(record.block_bytes));
    }
    if record.blocks != TrustedRecord::blocks_for(record.length, record.block_bytes) {
        return Err(EintError::InconsistentRecord {
            blocks: record.blocks,
            length: record.length,
        });
    }
    Ok(())
}

/// Folds a leaf up its path: the root, and every node on the path from the leaf up to and
/// including the root, with its position.
fn fold_path(index: u64, leaf: Hash, siblings: &[Hash]) -> (Hash, Vec<(NodePos, Hash)>) {
    let mut cur = leaf;
    let mut path = Vec::with_capacity(siblings.len() + 1);
    path.push(((0u8, index), cur));
    for (l, sib) in siblings.iter().enumerate() {
        cur = if (index >> l) & 1 == 0 {
            node_hash(&cur, sib)
        } else {
            node_hash(sib, &cur)
        };
        path.push((((l + 1) as u8, index >> (l + 1)), cur));
    }
    (cur, path)
}

/// Stores `nodes` (deleting empty ones) and caches them, metering the bytes written.
fn write_nodes<S: UntrustedStore>(
    store: &mut S,
    m: &mut OpMetrics,
    cache: &mut NodeCache,
    nodes: &[(NodePos, Hash)],
) -> Result<(), EintError> {
    for &((level, index), h) in nodes {
        let key = MetaKey::Node { level, index };
        if h == empty(u32::from(level)) {
            store.delete_meta(key).map_err(store_err)?;
        } else {
            store.write_meta(key, &h).map_err(store_err)?;
        }
        m.integrity_bytes_written += NODE_BYTES as u64;
        cache.put((level, index), h);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys() -> VersionKeys {
        VersionKeys::new(FileId([1; 16]), &FileKey::from_bytes([2; 32]))
    }

    #[test]
    fn inconsistent_records_are_refused() {
        let f = EintFile::create(
            FileId([1; 16]),
            Scheme::Mt,
            4096,
            1,
            &FileKey::from_bytes([2; 32]),
            0,
        )
        .unwrap();
        let bad = TrustedRecord {
            blocks: 2,
            ..*f.record()
        };
        assert!(matches!(
            EintFile::open(FileId([1; 16]), bad, 0),
            Err(EintError::InconsistentRecord { .. })
        ));
        let odd = TrustedRecord {
            block_bytes: 4000,
            ..*f.record()
        };
        assert!(matches!(
            EintFile::open(FileId([1; 16]), odd, 0),
            Err(EintError::BlockSize(4000))
        ));
    }

    #[test]
    fn comp_frames_round_trip_and_fit_only_when_compressible() {
        let k = keys();
        let text = b"integrity ".repeat(410)[..4096].to_vec();
        let frame = k.comp_frame(FileId([1; 16]), 3, 1, &text, 4096).unwrap();
        assert_eq!(frame.len(), 4096);
        assert_eq!(
            k.open_comp_frame(FileId([1; 16]), 3, 1, &frame, 4096),
            Some(text.clone())
        );
        assert_eq!(
            k.open_comp_frame(FileId([1; 16]), 3, 2, &frame, 4096),
            None,
            "counter bound"
        );
        assert_eq!(
            k.open_comp_frame(FileId([1; 16]), 4, 1, &frame, 4096),
            None,
            "index bound"
        );
        assert_eq!(
            k.open_comp_frame(FileId([1; 16]), 3, 1, &frame, 4095),
            None,
            "length bound"
        );
        let mut random = vec![0u8; 4096];
        crate::entropy::tests::prng_bytes(5, &mut random);
        assert!(k.comp_frame(FileId([1; 16]), 3, 1, &random, 4096).is_none());
        assert!(k.comp_frame(FileId([1; 16]), 3, 1, b"tiny", 16).is_none());
    }

    #[test]
    fn writes_past_the_end_leave_holes_that_read_as_zeros() {
        for scheme in Scheme::ALL {
            let key = FileKey::from_bytes([2; 32]);
            let mut f = EintFile::create(FileId([1; 16]), scheme, 4096, 1, &key, 0).unwrap();
            let mut st = crate::store::MemStore::new();
            let data: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
            f.write_block(&mut st, 3, &data).unwrap();
            assert_eq!(f.record().blocks, 4);
            for i in 0..3 {
                assert_eq!(f.read_block(&st, i).unwrap().0, vec![0; 4096], "{scheme:?}");
            }
            assert_eq!(st.blocks.len(), 1, "nothing stored for holes");
            assert_eq!(f.read_block(&st, 3).unwrap().0, data);
            f.extend(&mut st, 6 * 4096 + 100).unwrap();
            assert_eq!(f.record().blocks, 7);
            assert_eq!(f.read_block(&st, 6).unwrap().0, vec![0; 100]);
            assert_eq!(
                f.read_block(&st, 3).unwrap().0,
                data,
                "{scheme:?} after the lift"
            );
            // A reader opening the record afresh agrees.
            let mut g = EintFile::open(FileId([1; 16]), *f.record(), 0).unwrap();
            g.add_key(1, &key);
            assert_eq!(g.read_block(&st, 3).unwrap().0, data);
            assert_eq!(g.read_block(&st, 1).unwrap().0, vec![0; 4096]);
            // Extending past a short last block is refused: it must be rewritten whole first.
            assert!(f.extend(&mut st, 8 * 4096).is_err());
        }
    }

    #[test]
    fn comp_fits_agrees_with_the_frame_the_writer_builds() {
        let k = keys();
        let mut random = vec![0u8; 4096];
        crate::entropy::tests::prng_bytes(6, &mut random);
        let text = crate::entropy::tests::text_bytes(7, 4096);
        let blocks: Vec<&[u8]> = vec![
            &text,
            &text[..2000],
            &text[..40],
            &text[..16],
            b"tiny",
            &random,
            &random[..100],
            &[0u8; 4096],
        ];
        for b in blocks {
            let framed = k
                .comp_frame(FileId([1; 16]), 0, 1, b, stored_len(b.len()))
                .is_some();
            assert_eq!(comp_fits(b), framed, "{} bytes", b.len());
        }
        assert!(comp_fits(&text) && !comp_fits(&random));
    }

    proptest! {
        /// Deciphered garbage never panics the frame parser and never passes it.
        #[test]
        fn comp_frame_parser_is_total(
            frame in proptest::collection::vec(any::<u8>(), 0..600),
            len in 0usize..1200,
        ) {
            prop_assert_eq!(keys().open_comp_frame(FileId([1; 16]), 0, 1, &frame, len), None);
        }

        #[test]
        fn comp_frame_parser_with_a_plausible_header_is_total(
            zlen in 0u16..600,
            rest in proptest::collection::vec(any::<u8>(), 18..600),
        ) {
            let mut frame = zlen.to_le_bytes().to_vec();
            frame.extend_from_slice(&rest);
            prop_assert_eq!(keys().open_comp_frame(FileId([1; 16]), 0, 1, &frame, 512), None);
        }
    }
}
