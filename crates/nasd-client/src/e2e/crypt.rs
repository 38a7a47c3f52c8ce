//! The encryption layer of the file stack (issue 10; requirements B.2, B.3): above the layout
//! ("encrypt, then stripe"), below the namespace, behind the same [`FileIo`] seam as every
//! other layer, so drives store, MAC and erasure-code ciphertext only.
//!
//! A file is cut into blocks of the policy's size (64 KiB, seed 001 §3.3.1). Block `i` is
//! enciphered with HCTR2-AES-256 ([`nasd_e2e::block`]), a length-preserving wide-block cipher,
//! under the tweak `file_id ‖ i ‖ ctr_i`, where `ctr_i` counts the writes of block `i` (the
//! counter intervals, [`nasd_e2e::counters`]), so object offsets are file offsets and a
//! rewritten block never repeats a tweak; a tail shorter than HCTR2's 16 bytes is XORed with a
//! keystream keyed by its tweak, so every length is preserved and the layout below holds
//! exactly the file's length. Blocks never written are holes: counter 0, zeros when read (a
//! trailing hole still extends the objects, so a component rebuilt from the code has the tree
//! its writer pinned).
//!
//! Integrity against an untrusted drive (seed 003), per the file's construction:
//! - **MT-EINT**: the drives' own Merkle trees, pinned ([`super::pins`]): components check
//!   every reply against the pins, this layer only deciphers;
//! - **RAND-EINT** and **COMP-EINT**: nasd-e2e's [`EintFile`] over the ciphertext read from the
//!   layout and the side data kept at the manager (counters, the sparse tree's nodes).
//!
//! Writes read back the blocks they cover only in part (read-modify-write), bump the counters
//! of the blocks they write, and update the record, which the namespace commits with the
//! content (a staged upload or a copy-on-write change: never in place).

use super::pins::ComponentPin;
use crate::layer::{FileIo, IoError, IoFuture, ReadOut, Span};
use nasd_e2e::block::BlockCipher;
use nasd_e2e::counters::CounterIntervals;
use nasd_e2e::keys::{FileKey, KeyFile, KeyVersion};
use nasd_e2e::record::Binding;
use nasd_e2e::side::{keys_digest, pins_root, Integrity, Pin, Side};
use nasd_e2e::store::{MemStore, MetaKey};
use nasd_e2e::Principal as KeyPrincipal;
use nasd_e2e::{EintFile, FileId, Scheme, TrustedRecord};
use nasd_proto::manager::Eint;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The block size a plain file's record names (its blocks are the layout's; the record needs
/// one that is valid).
const PLAIN_BLOCK_BYTES: u32 = 64 << 10;
/// Blocks a read or write enciphers on all cores at once from this many on (a lone 64 KiB
/// block is not worth a thread hand-off).
const PARALLEL_BLOCKS_MIN: usize = 4;
/// Locks by block (hashed): writes take them exclusively, so two writes into one block — a
/// read-modify-write of its other bytes — never run at once and lose each other's bytes;
/// reads take them shared, so a read never sees a block's new counter before its new bytes.
const BLOCK_LOCKS: usize = 64;

/// One encrypted file as a stack sees it: its keys and counters, and (for a writer) what it
/// changed. Shared by every stack built for the file's grant or upload.
pub struct CryptFile {
    pub path: String,
    /// A plaintext file that keeps only its components' pins (nasd-e2e's `Scheme::Pins`: a
    /// striped plain file, issue 21 §5): no keys, no counters, no layer of its own in the
    /// stack, only the pins on its components and the record at commit.
    pub plain: bool,
    pub file_id: FileId,
    pub block: u64,
    pub scheme: Eint,
    /// One per component for MT-EINT (a reader's checks, a writer's tracks); empty otherwise.
    pub pins: Vec<Arc<ComponentPin>>,
    inner: Mutex<Inner>,
    locks: Vec<tokio::sync::RwLock<()>>,
    /// Held by whatever changes the length (a write past the end, growing the size) from
    /// reading it to recording the new one: the length decides which block is last and how
    /// long it is, so two such changes must not decide from the same old length.
    shape: tokio::sync::Mutex<()>,
    /// The layout's size under this file (the stored bytes, as long as the plaintext), kept
    /// for every stack built for the file at once: one stack's read must see what another's
    /// write stored.
    pub stored: Arc<std::sync::atomic::AtomicU64>,
    /// Where the version this writes stands in the file's history (its record's binding).
    history: History,
}

/// What a new version carries over from the version it replaces (nasd-e2e's record binding):
/// the default for a file's first version.
#[derive(Clone, Debug, Default)]
pub struct Lineage {
    /// The generation of the version replaced (0: none).
    pub generation: u64,
    /// The file's first version's id (`None`: this version starts the history).
    pub origin: Option<FileId>,
    /// Principals the file stays unshared from.
    pub unshared: Vec<KeyPrincipal>,
}

/// A version's place in its file's history.
#[derive(Clone, Copy, Debug)]
struct History {
    /// The generation of the version this one builds on (0: none).
    base: u64,
    origin: FileId,
}

impl std::fmt::Debug for CryptFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CryptFile")
            .field("path", &self.path)
            .field("scheme", &self.scheme)
            .field("block", &self.block)
            .finish_non_exhaustive()
    }
}

struct Inner {
    length: u64,
    counters: CounterIntervals,
    /// The key version new writes use.
    key_version: KeyVersion,
    ciphers: BTreeMap<KeyVersion, Arc<BlockCipher>>,
    key_file: KeyFile,
    /// `κ_v` of the key versions the blocks may use: of the keys held, and those the version
    /// built on committed to (a writer need not hold every old key).
    commitments: BTreeMap<KeyVersion, [u8; 32]>,
    /// Principals the file stays unshared from (later writers wrap nothing for them).
    unshared: Vec<KeyPrincipal>,
    /// RAND/COMP: the construction and its untrusted store: the side data (counters and
    /// tree nodes) in `meta`, and in `blocks` the ciphertext of the call at hand (emptied
    /// after each).
    eint: Option<(EintFile, MemStore)>,
}

fn scheme_of(e: Eint) -> Scheme {
    match e {
        Eint::Mt => Scheme::Mt,
        Eint::Rand => Scheme::Rand,
        Eint::Comp => Scheme::Comp,
    }
}

fn eint_of(s: Scheme) -> Eint {
    match s {
        Scheme::Mt | Scheme::Pins => Eint::Mt,
        Scheme::Rand => Eint::Rand,
        Scheme::Comp => Eint::Comp,
    }
}

/// Why the encryption layer refused.
fn refused(path: &str, what: impl std::fmt::Display) -> IoError {
    IoError::Uncorrectable(format!("{path}: end-to-end check failed: {what}"))
}

impl CryptFile {
    /// A new, empty file (or a new version replacing one, carrying on its `lineage`): `key` at
    /// `key_version`, wrapped in `key_file`; `pins` for MT.
    #[allow(clippy::too_many_arguments)] // what a new version is made of
    pub fn create(
        path: &str,
        file_id: FileId,
        scheme: Eint,
        block: u32,
        key_version: KeyVersion,
        key: &FileKey,
        key_file: KeyFile,
        pins: Vec<Arc<ComponentPin>>,
        lineage: Lineage,
    ) -> Result<CryptFile, String> {
        let eint = match scheme {
            Eint::Mt => None,
            _ => Some((
                EintFile::create(file_id, scheme_of(scheme), block, key_version, key, 0)
                    .map_err(|e| e.to_string())?,
                MemStore::new(),
            )),
        };
        let mut ciphers = BTreeMap::new();
        ciphers.insert(key_version, Arc::new(BlockCipher::new(file_id, key)));
        let inner = Inner {
            length: 0,
            counters: CounterIntervals::new(),
            key_version,
            ciphers,
            key_file,
            commitments: BTreeMap::from([(key_version, key.commitment())]),
            unshared: vec![],
            eint,
        };
        let mut f = CryptFile::new_version(path, file_id, u64::from(block), pins, inner, lineage);
        f.scheme = scheme;
        Ok(f)
    }

    /// A new version of a plaintext striped file, pinned: `pins` tracks of fresh objects.
    pub fn create_plain(
        path: &str,
        file_id: FileId,
        pins: Vec<Arc<ComponentPin>>,
        lineage: Lineage,
    ) -> CryptFile {
        let inner = Inner {
            length: 0,
            counters: CounterIntervals::new(),
            key_version: 0,
            ciphers: BTreeMap::new(),
            key_file: KeyFile::new(),
            commitments: BTreeMap::new(),
            unshared: vec![],
            eint: None,
        };
        let block = u64::from(PLAIN_BLOCK_BYTES);
        let mut f = CryptFile::new_version(path, file_id, block, pins, inner, lineage);
        f.plain = true;
        f
    }

    /// A new version's writer state (MT unless the caller says otherwise): `inner` with the
    /// lineage's unshares, built on the lineage's generation.
    fn new_version(
        path: &str,
        file_id: FileId,
        block: u64,
        pins: Vec<Arc<ComponentPin>>,
        mut inner: Inner,
        lineage: Lineage,
    ) -> CryptFile {
        inner.unshared = lineage.unshared;
        CryptFile {
            path: path.into(),
            plain: false,
            file_id,
            block,
            scheme: Eint::Mt,
            pins,
            inner: Mutex::new(inner),
            locks: block_locks(),
            shape: tokio::sync::Mutex::new(()),
            stored: Default::default(),
            history: History {
                base: lineage.generation,
                origin: lineage.origin.unwrap_or(file_id),
            },
        }
    }

    /// A committed version: its record and side data, checked against each other, and the
    /// keys of the versions its blocks use (`keys`), each checked against the commitment its
    /// writer bound into the record. For MT, `pins` (one per component) were made from the
    /// side's pins by the caller.
    pub fn open(
        path: &str,
        record: &TrustedRecord,
        side: &Side,
        keys: &BTreeMap<KeyVersion, FileKey>,
        pins: Vec<Arc<ComponentPin>>,
    ) -> Result<CryptFile, String> {
        if nasd_e2e::counters::digest_of_encoding(&side.counters) != record.counters_digest {
            return Err("the counter intervals are not the record's".into());
        }
        let commitments = checked_commitments(record, side, keys)?;
        let counters = CounterIntervals::decode(&side.counters).map_err(|e| e.to_string())?;
        let plain = record.scheme == Scheme::Pins;
        if !plain && counters.blocks() != record.blocks {
            return Err("the counter intervals do not cover the record's blocks".into());
        }
        let eint = match (record.scheme, &side.integrity) {
            (Scheme::Mt | Scheme::Pins, Integrity::Pins(p)) => {
                if pins_root(side.file_id, p) != record.root {
                    return Err("the pins are not the record's".into());
                }
                None
            }
            (Scheme::Rand | Scheme::Comp, Integrity::Nodes(nodes)) => {
                let mut f = EintFile::open(side.file_id, *record, 0).map_err(|e| e.to_string())?;
                for (v, k) in keys {
                    f.add_key(*v, k);
                }
                f.rotate_key(
                    record.key_version,
                    keys.get(&record.key_version)
                        .ok_or("no key for the record's version")?,
                );
                let mut meta: BTreeMap<MetaKey, Vec<u8>> = nodes
                    .iter()
                    .map(|&(level, index, h)| (MetaKey::Node { level, index }, h.to_vec()))
                    .collect();
                meta.insert(MetaKey::Counters, side.counters.clone());
                Some((
                    f,
                    MemStore {
                        blocks: BTreeMap::new(),
                        meta,
                    },
                ))
            }
            _ => return Err("the side data is not of the record's construction".into()),
        };
        let ciphers = keys
            .iter()
            .map(|(v, k)| (*v, Arc::new(BlockCipher::new(side.file_id, k))))
            .collect();
        Ok(CryptFile {
            path: path.into(),
            plain,
            file_id: side.file_id,
            block: u64::from(record.block_bytes),
            scheme: eint_of(record.scheme),
            pins,
            inner: Mutex::new(Inner {
                length: record.length,
                counters,
                key_version: record.key_version,
                ciphers,
                key_file: side.key_file.clone(),
                commitments,
                unshared: side.unshared.clone(),
                eint,
            }),
            locks: block_locks(),
            shape: tokio::sync::Mutex::new(()),
            stored: Arc::new(record.length.into()),
            history: match record.binding {
                Some(b) => History {
                    base: b.generation,
                    origin: b.origin,
                },
                None => History {
                    base: 0,
                    origin: side.file_id,
                },
            },
        })
    }

    /// The file's length: the plaintext's, or for a plain file what its layout stored.
    pub fn length(&self) -> u64 {
        if self.plain {
            return self.stored.load(std::sync::atomic::Ordering::Acquire);
        }
        self.inner.lock().expect("crypt lock").length
    }

    /// Switches new writes to a new key (after an unshare, B.1): old blocks keep theirs.
    pub fn rotate(&self, key_version: KeyVersion, key: &FileKey, key_file: KeyFile) {
        let mut i = self.inner.lock().expect("crypt lock");
        i.ciphers
            .insert(key_version, Arc::new(BlockCipher::new(self.file_id, key)));
        i.key_version = key_version;
        i.key_file = key_file;
        i.commitments.insert(key_version, key.commitment());
        if let Some((f, _)) = &mut i.eint {
            f.rotate_key(key_version, key);
        }
    }

    /// The key file and its current version.
    pub fn key_file(&self) -> (KeyFile, KeyVersion) {
        let i = self.inner.lock().expect("crypt lock");
        (i.key_file.clone(), i.key_version)
    }

    /// The trusted record and side data of the file as written so far (pins from the
    /// components' tracks), for the commit; `signer` is the uid whose key signs it.
    pub fn state(&self, signer: Option<u32>) -> (TrustedRecord, Side) {
        let length = self.length();
        let i = self.inner.lock().expect("crypt lock");
        let counters = i.counters.encode();
        let (root, integrity) = match &i.eint {
            None => {
                let pins: Vec<Pin> = self.pins.iter().map(|p| p.pin()).collect();
                (pins_root(self.file_id, &pins), Integrity::Pins(pins))
            }
            Some((f, store)) => {
                let nodes = store
                    .meta
                    .iter()
                    .filter_map(|(k, v)| match k {
                        MetaKey::Node { level, index } => {
                            Some((*level, *index, v.as_slice().try_into().ok()?))
                        }
                        MetaKey::Counters => None,
                    })
                    .collect();
                (f.record().root, Integrity::Nodes(nodes))
            }
        };
        let in_use = versions_in_use(&i.counters, i.key_version);
        let side = Side {
            file_id: self.file_id,
            signer,
            key_file: i.key_file.clone(),
            counters,
            integrity,
            commitments: in_use
                .into_iter()
                .filter_map(|v| Some((v, *i.commitments.get(&v)?)))
                .collect(),
            unshared: i.unshared.clone(),
        };
        let record = TrustedRecord {
            scheme: match self.plain {
                true => Scheme::Pins,
                false => scheme_of(self.scheme),
            },
            block_bytes: self.block as u32,
            blocks: match self.plain {
                true => TrustedRecord::blocks_for(length, self.block as u32),
                false => i.counters.blocks(),
            },
            length,
            key_version: i.key_version,
            root,
            counters_digest: nasd_e2e::counters::digest_of_encoding(&side.counters),
            binding: Some(Binding {
                generation: self.history.base + 1,
                origin: self.history.origin,
                keys_digest: keys_digest(&side),
            }),
        };
        (record, side)
    }

    /// Bytes block `i` holds in a file of `length` bytes.
    fn block_len(&self, i: u64, length: u64) -> usize {
        length.saturating_sub(i * self.block).min(self.block) as usize
    }
}

/// The key versions blocks written so far use, and the one new writes use, ascending.
pub fn versions_in_use(counters: &CounterIntervals, current: KeyVersion) -> Vec<KeyVersion> {
    let mut v: Vec<KeyVersion> = counters
        .intervals()
        .iter()
        .filter(|i| i.ctr > 0)
        .map(|i| i.key_version)
        .chain([current])
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The commitments a version's reader or writer goes on with: for a bound record, the side's
/// (checked against the record's digest), each key held checked against its commitment, so a
/// wrap swapped at the manager (one that opens a key the writer never used) is refused before
/// a block is deciphered; for a record from before bindings, the keys' own.
pub(crate) fn checked_commitments(
    record: &TrustedRecord,
    side: &Side,
    keys: &BTreeMap<KeyVersion, FileKey>,
) -> Result<BTreeMap<KeyVersion, [u8; 32]>, String> {
    let mut out: BTreeMap<KeyVersion, [u8; 32]> = BTreeMap::new();
    if let Some(b) = &record.binding {
        if keys_digest(side) != b.keys_digest {
            return Err("the key commitments and unshares are not the record's".into());
        }
        out.extend(side.commitments.iter().copied());
    }
    for (v, k) in keys {
        let c = k.commitment();
        match out.get(v) {
            Some(want) if *want != c => {
                return Err(format!(
                    "the key a wrap opened for key version {v} is not the one the writer used \
                     (a wrap was swapped at the manager)"
                ))
            }
            Some(_) => {}
            None => {
                out.insert(*v, c);
            }
        }
    }
    Ok(out)
}

fn block_locks() -> Vec<tokio::sync::RwLock<()>> {
    (0..BLOCK_LOCKS)
        .map(|_| tokio::sync::RwLock::new(()))
        .collect()
}

/// Block locks held: exclusive for a write, shared for a read.
enum Held<'a> {
    Write(#[allow(dead_code)] Vec<tokio::sync::RwLockWriteGuard<'a, ()>>),
    Read(#[allow(dead_code)] Vec<tokio::sync::RwLockReadGuard<'a, ()>>),
}

impl CryptFile {
    /// Locks blocks `[b0, b1)` and `extra` (in one order, so two writers never wait on each
    /// other crosswise), exclusively for a write, shared for a read.
    async fn lock_blocks(&self, b0: u64, b1: u64, extra: Option<u64>, write: bool) -> Held<'_> {
        let mut slots: Vec<usize> = (b0..b1.min(b0 + BLOCK_LOCKS as u64))
            .chain(extra)
            .map(|b| (b % BLOCK_LOCKS as u64) as usize)
            .collect();
        slots.sort_unstable();
        slots.dedup();
        if write {
            let mut out = Vec::with_capacity(slots.len());
            for k in slots {
                out.push(self.locks[k].write().await);
            }
            Held::Write(out)
        } else {
            let mut out = Vec::with_capacity(slots.len());
            for k in slots {
                out.push(self.locks[k].read().await);
            }
            Held::Read(out)
        }
    }
}

/// The encryption layer over `lower` (module docs).
pub struct CryptIo {
    pub file: Arc<CryptFile>,
    pub lower: Arc<dyn FileIo>,
}

/// One block to encipher or decipher: index, counter, bytes.
struct Work {
    index: u64,
    ctr: u64,
    bytes: Vec<u8>,
}

impl CryptIo {
    fn f(&self) -> &CryptFile {
        &self.file
    }

    /// Plaintext of blocks `[b0, b1)` as they are now (holes as zeros), at most `length`.
    async fn read_blocks(&self, b0: u64, b1: u64) -> Result<Vec<u8>, IoError> {
        let f = self.f();
        let (length, plan, ciphers) = {
            let i = f.inner.lock().expect("crypt lock");
            let plan: Vec<(u64, u64, KeyVersion)> = (b0..b1.min(i.counters.blocks()))
                .map(|b| {
                    let (ctr, kv) = i.counters.get(b).expect("inside the counters");
                    (b, ctr, kv)
                })
                .collect();
            (i.length, plan, i.ciphers.clone())
        };
        let end = (b1 * f.block).min(length);
        let start = b0 * f.block;
        if start >= end {
            return Ok(vec![]);
        }
        // One lower span for every run of written blocks (holes are not read): adjacent
        // blocks travel as one region, so the drive proves one range, not one per block.
        let mut spans: Vec<Span> = Vec::new();
        for &(b, _, _) in plan.iter().filter(|p| p.1 != 0) {
            let (at, len) = (b * f.block, f.block_len(b, length) as u64);
            match spans.last_mut() {
                Some(last) if last.0 + last.1 == at => last.1 += len,
                _ => spans.push((at, len)),
            }
        }
        let got = if spans.is_empty() {
            ReadOut::default()
        } else {
            self.lower.read_vectored(&spans).await?
        };
        let want: u64 = spans.iter().map(|s| s.1).sum();
        // The stored content is exactly as long as the file (length-preserving blocks): an
        // object cut short or extended by its drive is refused, even where the blocks read
        // are intact (a layout over several objects answers with the size it keeps itself).
        if !spans.is_empty() && got.size != length {
            return Err(refused(
                &f.path,
                format!(
                    "the stored content is {} bytes, the trusted record says {length}",
                    got.size
                ),
            ));
        }
        if got.data.len() as u64 != want {
            return Err(refused(
                &f.path,
                format!(
                    "the layout returned {} bytes of {want} stored (spans {:?}, length {length})",
                    got.data.len(),
                    spans
                ),
            ));
        }
        let mut data = got.data;
        if f.scheme == Eint::Mt {
            // MT: the components checked the pins; decipher in place, block by block.
            self.decipher_in_place(&plan, &ciphers, length, &mut data)?;
        } else {
            let mut at = 0usize;
            let mut work = Vec::with_capacity(spans.len());
            for &(b, ctr, _) in plan.iter().filter(|p| p.1 != 0) {
                let n = f.block_len(b, length);
                work.push(Work {
                    index: b,
                    ctr,
                    bytes: data[at..at + n].to_vec(),
                });
                at += n;
            }
            data = self.decipher(work)?.concat();
        }
        if plan.iter().all(|p| p.1 != 0) {
            return Ok(data);
        }
        // Holes read as zeros.
        let mut out = Vec::with_capacity((end - start) as usize);
        let mut at = 0usize;
        for &(b, ctr, _) in &plan {
            let len = f.block_len(b, length);
            if ctr == 0 {
                out.resize(out.len() + len, 0);
            } else {
                out.extend_from_slice(&data[at..at + len]);
                at += len;
            }
        }
        Ok(out)
    }

    /// Deciphers the written blocks of `plan`, stored back to back in `data`, in place, by
    /// the block cipher alone (MT-EINT: the components checked the pinned tree).
    fn decipher_in_place(
        &self,
        plan: &[(u64, u64, KeyVersion)],
        ciphers: &BTreeMap<KeyVersion, Arc<BlockCipher>>,
        length: u64,
        data: &mut [u8],
    ) -> Result<(), IoError> {
        let f = self.f();
        let mut work: Vec<(u64, u64, &BlockCipher, &mut [u8])> = Vec::with_capacity(plan.len());
        let mut rest = data;
        for &(b, ctr, kv) in plan.iter().filter(|p| p.1 != 0) {
            let c = ciphers
                .get(&kv)
                .ok_or_else(|| refused(&f.path, format!("no key for key version {kv}")))?;
            let (block, tail) = rest.split_at_mut(f.block_len(b, length));
            rest = tail;
            work.push((b, ctr, c, block));
        }
        let one = |(b, ctr, c, block): (u64, u64, &BlockCipher, &mut [u8])| {
            c.decrypt_in_place(b, ctr, block)
        };
        if work.len() >= PARALLEL_BLOCKS_MIN {
            work.into_par_iter().for_each(one);
        } else {
            work.into_iter().for_each(one);
        }
        Ok(())
    }

    /// Deciphers `work` through the RAND/COMP construction, which checks each block.
    fn decipher(&self, work: Vec<Work>) -> Result<Vec<Vec<u8>>, IoError> {
        let f = self.f();
        let mut i = f.inner.lock().expect("crypt lock");
        let (eint, store) = i
            .eint
            .as_mut()
            .expect("RAND/COMP files have a construction");
        let order: Vec<u64> = work.iter().map(|w| w.index).collect();
        store.blocks = work.into_iter().map(|w| (w.index, w.bytes)).collect();
        let plain = order
            .into_iter()
            .map(|b| {
                eint.read_block(&*store, b)
                    .map(|(p, _)| p)
                    .map_err(|e| refused(&f.path, e))
            })
            .collect();
        store.blocks.clear();
        plain
    }

    /// Enciphers new plaintext blocks (whole ones, and the file's last possibly short),
    /// counting their writes; returns the stored bytes in order.
    fn encipher(&self, blocks: Vec<(u64, Vec<u8>)>) -> Result<Vec<u8>, IoError> {
        let f = self.f();
        let mut i = f.inner.lock().expect("crypt lock");
        let kv = i.key_version;
        if let Some((eint, store)) = i.eint.as_mut() {
            let mut out = vec![];
            for (b, p) in &blocks {
                let w = eint.write_block(store, *b, p);
                if let Some(c) = store.blocks.remove(b) {
                    out.extend_from_slice(&c);
                }
                w.map_err(|e| refused(&f.path, e))?;
            }
            // The construction keeps its own counters; the layer reads holes from them.
            let enc = store
                .meta
                .get(&MetaKey::Counters)
                .cloned()
                .unwrap_or_default();
            let length = eint.record().length;
            i.counters = CounterIntervals::decode(&enc).map_err(|e| refused(&f.path, e))?;
            i.length = length;
            return Ok(out);
        }
        let cipher = i.ciphers.get(&kv).cloned().expect("the write key is held");
        let mut work = Vec::with_capacity(blocks.len());
        for (b, p) in blocks {
            let ctr = i
                .counters
                .inc(b, kv)
                .ok_or_else(|| refused(&f.path, "a block counter overflowed"))?;
            work.push(Work {
                index: b,
                ctr,
                bytes: p,
            });
        }
        drop(i);
        let one = |mut w: Work| {
            cipher.encrypt_in_place(w.index, w.ctr, &mut w.bytes);
            w.bytes
        };
        let parts: Vec<Vec<u8>> = if work.len() >= PARALLEL_BLOCKS_MIN {
            work.into_par_iter().map(one).collect()
        } else {
            work.into_iter().map(one).collect()
        };
        Ok(parts.concat())
    }

    /// Rewrites the partial last block `b` (now `old_len` bytes) as `new_len` bytes: cut
    /// short, or padded with zeros.
    async fn rewrite_tail(&self, b: u64, new_len: usize) -> Result<(), IoError> {
        let f = self.f();
        let mut p = self.read_blocks(b, b + 1).await?;
        p.resize(new_len, 0);
        let stored = self.encipher(vec![(b, p)])?;
        {
            let mut i = f.inner.lock().expect("crypt lock");
            i.length = i.length.max(b * f.block + new_len as u64);
        }
        self.lower.write(b * f.block, &stored).await
    }

    async fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), IoError> {
        let f = self.f();
        let bs = f.block;
        let end = offset + data.len() as u64;
        // A write past the end changes the length: one such change at a time (the length
        // only grows while the file is open, so a write inside it stays inside).
        let shape = if end > f.length() {
            Some(f.shape.lock().await)
        } else {
            None
        };
        let old = f.length();
        let (b0, b1) = (offset / bs, end.div_ceil(bs));
        let old_last = old.div_ceil(bs).checked_sub(1);
        let _held = f.lock_blocks(b0, b1, old_last, true).await;
        // What the file holds once the locks are ours: the same length for a write past the
        // end; for one inside it, a longer length changes no block this write covers (the
        // partial last block, if covered, is locked against whoever would grow it).
        let old = f.length();
        let new_len = old.max(end);
        let old_last = old.div_ceil(bs).checked_sub(1);
        // The old last block, if partial and before the write, becomes whole (zeros after).
        if let Some(t) = old_last.filter(|&t| t < b0 && !old.is_multiple_of(bs)) {
            self.rewrite_tail(t, bs as usize).await?;
        }
        // Blocks the write covers only in part keep their other bytes.
        let head =
            (!offset.is_multiple_of(bs) || (end < (b0 + 1) * bs && end < old)) && b0 * bs < old;
        let tail = b1 - 1 > b0 && !end.is_multiple_of(bs) && end < old;
        let first_old = if head {
            self.read_blocks(b0, b0 + 1).await?
        } else {
            vec![]
        };
        let last_old = if tail {
            self.read_blocks(b1 - 1, b1).await?
        } else {
            vec![]
        };
        let mut blocks = Vec::with_capacity((b1 - b0) as usize);
        for b in b0..b1 {
            let len = f.block_len(b, new_len);
            let mut p = if b == b0 && head {
                first_old.clone()
            } else if b == b1 - 1 && tail {
                last_old.clone()
            } else {
                vec![]
            };
            p.resize(len, 0);
            let (lo, hi) = ((b * bs).max(offset), ((b + 1) * bs).min(end));
            let at = (lo - b * bs) as usize;
            p[at..at + (hi - lo) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            blocks.push((b, p));
        }
        let stored = self.encipher(blocks)?;
        {
            let mut i = f.inner.lock().expect("crypt lock");
            i.length = i.length.max(new_len);
        }
        // The next change of length may decide now; it waits for this write's blocks.
        drop(shape);
        self.lower.write(b0 * bs, &stored).await
    }

    async fn set_len(&self, size: u64) -> Result<(), IoError> {
        let f = self.f();
        let bs = f.block;
        let old = f.length();
        if size == old {
            return Ok(());
        }
        let tail_partial = |len: u64| !len.is_multiple_of(bs);
        if size < old {
            // Cut short by a rewrite of the prefix (Client::truncate): cutting objects in place
            // would leave them longer than a rebuild from the code makes them.
            return Err(IoError::Usage(format!(
                "{}: an encrypted file is cut short by writing its prefix as a new version",
                f.path
            )));
        }
        // Growing: a partial last block is padded, then a hole.
        let _shape = f.shape.lock().await;
        let old = f.length();
        if size <= old {
            return Ok(());
        }
        let _held = f.lock_blocks(old / bs, old / bs + 1, None, true).await;
        if tail_partial(old) {
            let b = old / bs;
            let len = ((b + 1) * bs).min(size) - b * bs;
            self.rewrite_tail(b, len as usize).await?;
        }
        {
            let mut i = f.inner.lock().expect("crypt lock");
            let blocks = size.div_ceil(bs);
            match i.eint.as_mut() {
                None => i.counters.extend(blocks),
                Some((eint, store)) => {
                    eint.extend(store, size).map_err(|e| refused(&f.path, e))?;
                    let enc = store
                        .meta
                        .get(&MetaKey::Counters)
                        .cloned()
                        .unwrap_or_default();
                    i.counters = CounterIntervals::decode(&enc).map_err(|e| refused(&f.path, e))?;
                }
            }
            i.length = size;
        }
        // The objects hold the hole too, as a component rebuilt from the code would.
        self.lower.set_size(size).await
    }
}

impl FileIo for CryptIo {
    fn read(&self, offset: u64, len: u64) -> IoFuture<'_, ReadOut> {
        Box::pin(async move {
            let f = self.f();
            let length = f.length();
            let end = offset.saturating_add(len).min(length);
            if offset >= end {
                return Ok(ReadOut {
                    data: vec![],
                    size: length,
                });
            }
            let (b0, b1) = (offset / f.block, end.div_ceil(f.block));
            let _held = f.lock_blocks(b0, b1, None, false).await;
            let plain = self.read_blocks(b0, b1).await?;
            let at = (offset - b0 * f.block) as usize;
            let n = (end - offset) as usize;
            if plain.len() < at + n {
                return Err(refused(&f.path, "blocks shorter than the record says"));
            }
            let data = if at == 0 && plain.len() == n {
                plain
            } else {
                plain[at..at + n].to_vec()
            };
            Ok(ReadOut { data, size: length })
        })
    }

    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> IoFuture<'a, ()> {
        Box::pin(async move {
            if data.is_empty() {
                return Ok(());
            }
            self.write_at(offset, data).await
        })
    }

    fn size(&self) -> IoFuture<'_, u64> {
        Box::pin(async move { Ok(self.f().length()) })
    }

    fn set_size(&self, size: u64) -> IoFuture<'_, ()> {
        Box::pin(async move { self.set_len(size).await })
    }

    /// Whole blocks, and the layout's own granule.
    fn write_granule(&self) -> u64 {
        lcm(self.f().block, self.lower.write_granule().max(1))
    }

    fn transfer_bytes(&self) -> u64 {
        let g = self.write_granule();
        self.lower.transfer_bytes().div_ceil(g) * g
    }

    fn missed(&self) -> u64 {
        self.lower.missed()
    }

    fn available(&self) -> bool {
        self.lower.available()
    }

    fn crypt_file(&self) -> Option<Arc<CryptFile>> {
        Some(self.file.clone())
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

#[cfg(test)]
mod tests;
