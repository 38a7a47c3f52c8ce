//! Runs nasd-e2e's MT-, RAND- and COMP-EINT ([`nasd_e2e::EintFile`] over a
//! [`nasd_e2e::MemStore`] per file) on whole files (Fig 9; traces are in [`super::replay`]), metering
//! every operation with the [`OpMetrics`] the schemes return and timing it on the monotonic
//! clock.
//!
//! What the times include: block encryption (HCTR2-AES-256), the entropy test, deflate and the
//! tag, leaf and node hashing, and the in-memory store's copies. What they do not: any I/O. The
//! seed's prototype kept its integrity metadata on a disk behind EncFS, so its running times also
//! paid for fetching Merkle nodes; here that cost shows only as integrity bandwidth (bytes and
//! nodes fetched per operation), which is why the experiment reports both.
//!
//! Every byte read back is compared with what was written (outside the timed sections): a scheme
//! that returned other bytes fails the run.

use std::time::Instant;

use nasd_e2e::{
    BlockCheck, EintError, EintFile, FileId, FileKey, MemStore, MetaKey, OpMetrics, Scheme,
};

use nasd_e2e::merkle::NODE_BYTES;

use crate::error::LabError;

/// Key version every file is written under.
pub(super) const KEY_VERSION: u32 = 1;

/// The per-run file key: deterministic per seed, so runs are reproducible.
pub fn file_key(seed: u64) -> FileKey {
    FileKey::from_bytes(blake3::derive_key(
        "nasd-lab 2026 eint experiment file key",
        &seed.to_le_bytes(),
    ))
}

/// Sums of [`OpMetrics`] over a set of operations, and their time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Meter {
    pub ops: u64,
    pub integrity_read: u64,
    pub integrity_written: u64,
    pub nodes_fetched: u64,
    pub nodes_from_cache: u64,
    /// Blocks protected or checked by a Merkle leaf, by the entropy test, by COMP's tag.
    pub by_leaf: u64,
    pub by_entropy: u64,
    pub by_tag: u64,
    /// Integrity bytes that were the counter-interval list (read on a file's first operation,
    /// written whole on every write: nasd-e2e's README, "Not done yet"), the same in every
    /// scheme; the rest were Merkle nodes.
    pub counter_bytes: u64,
    pub seconds: f64,
}

impl Meter {
    /// Adds a read's metrics: its integrity bytes are nodes fetched and, on a file's first
    /// operation, the counter intervals.
    pub(super) fn add_read(&mut self, m: &OpMetrics) {
        self.add(m);
        self.counter_bytes += counters_read(m);
    }

    /// Adds a write's metrics; `counters_bytes` is the length of the list it stored.
    pub(super) fn add_write(&mut self, m: &OpMetrics, store: &MemStore) {
        self.add(m);
        let stored = store.meta.get(&MetaKey::Counters).map_or(0, Vec::len);
        self.counter_bytes += counters_read(m) + stored as u64;
    }

    fn add(&mut self, m: &OpMetrics) {
        self.ops += 1;
        self.integrity_read += m.integrity_bytes_read;
        self.integrity_written += m.integrity_bytes_written;
        self.nodes_fetched += m.nodes_fetched;
        self.nodes_from_cache += m.nodes_from_cache;
        match m.check {
            BlockCheck::MerkleLeaf => self.by_leaf += 1,
            BlockCheck::LowEntropy => self.by_entropy += 1,
            BlockCheck::CompressedTag => self.by_tag += 1,
        }
    }

    /// Integrity bytes moved either way.
    pub fn integrity_bytes(&self) -> u64 {
        self.integrity_read + self.integrity_written
    }

    /// Integrity bytes per operation (seed 003 §7's integrity bandwidth).
    pub fn integrity_per_op(&self) -> f64 {
        per(self.integrity_bytes() as f64, self.ops)
    }

    /// Counter-interval bytes per operation.
    pub fn counter_per_op(&self) -> f64 {
        per(self.counter_bytes as f64, self.ops)
    }

    /// Microseconds per operation.
    pub fn us_per_op(&self) -> f64 {
        per(self.seconds * 1e6, self.ops)
    }

    /// The two meters' sums.
    pub fn plus(&self, o: &Meter) -> Meter {
        Meter {
            ops: self.ops + o.ops,
            integrity_read: self.integrity_read + o.integrity_read,
            integrity_written: self.integrity_written + o.integrity_written,
            nodes_fetched: self.nodes_fetched + o.nodes_fetched,
            nodes_from_cache: self.nodes_from_cache + o.nodes_from_cache,
            by_leaf: self.by_leaf + o.by_leaf,
            by_entropy: self.by_entropy + o.by_entropy,
            by_tag: self.by_tag + o.by_tag,
            counter_bytes: self.counter_bytes + o.counter_bytes,
            seconds: self.seconds + o.seconds,
        }
    }
}

/// Integrity bytes an operation read that were not Merkle nodes (each fetch moves
/// [`NODE_BYTES`]): the counter intervals.
fn counters_read(m: &OpMetrics) -> u64 {
    m.integrity_bytes_read
        .saturating_sub(m.nodes_fetched * NODE_BYTES as u64)
}

fn per(x: f64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        x / n as f64
    }
}

/// Seed 003 §7's storage metrics summed over a set of files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Storage {
    pub files: u64,
    pub blocks: u64,
    /// Untrusted integrity bytes (nodes and counter intervals) of all files.
    pub untrusted_bytes: u64,
    /// Trusted bytes per file, smallest and largest over the files (the record's fixed size).
    pub trusted_bytes_min: u64,
    pub trusted_bytes_max: u64,
    /// Blocks holding a Merkle leaf at the end.
    pub leaves: u64,
}

impl Storage {
    pub(super) fn add(&mut self, f: &EintFile, s: &MemStore) -> Result<(), EintError> {
        let m = f.storage(s)?;
        self.trusted_bytes_min = if self.files == 0 {
            m.trusted_bytes
        } else {
            self.trusted_bytes_min.min(m.trusted_bytes)
        };
        self.trusted_bytes_max = self.trusted_bytes_max.max(m.trusted_bytes);
        self.files += 1;
        self.blocks += f.record().blocks;
        self.untrusted_bytes += m.untrusted_integrity_bytes;
        self.leaves += s
            .meta
            .keys()
            .filter(|k| matches!(k, MetaKey::Node { level: 0, .. }))
            .count() as u64;
        Ok(())
    }
}

/// One configuration: a scheme, a block size, a node cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub scheme: Scheme,
    pub block_bytes: u32,
    pub cache_bytes: usize,
}

impl Config {
    pub(super) fn eint_err(
        &self,
        op: &'static str,
        file: usize,
        block: u64,
    ) -> impl Fn(EintError) -> LabError {
        let scheme = self.scheme;
        move |source| LabError::Eint {
            scheme: scheme.name().to_string(),
            op,
            file: file as u64,
            block,
            source,
        }
    }

    pub(super) fn mismatch(&self, file: usize, block: u64) -> LabError {
        LabError::EintMismatch {
            scheme: self.scheme.name().to_string(),
            file: file as u64,
            block,
        }
    }
}

/// One write-then-read pass over a set of files (Fig 9).
#[derive(Debug, Clone, PartialEq)]
pub struct MicroPass {
    pub write: Meter,
    pub read: Meter,
    pub storage: Storage,
}

/// Passes of one configuration: meters and storage of the first (they are the same in every
/// pass), seconds of each.
#[derive(Debug, Clone, PartialEq)]
pub struct MicroRun {
    pub write: Meter,
    pub read: Meter,
    pub write_s: Vec<f64>,
    pub read_s: Vec<f64>,
    pub storage: Storage,
}

impl MicroRun {
    pub fn from_passes(passes: &[MicroPass]) -> MicroRun {
        let first = passes.first().expect("at least one pass");
        MicroRun {
            write: first.write,
            read: first.read,
            write_s: passes.iter().map(|p| p.write.seconds).collect(),
            read_s: passes.iter().map(|p| p.read.seconds).collect(),
            storage: first.storage,
        }
    }
}

/// Writes every file of `files` block by block into a new [`EintFile`], then opens each anew
/// from its trusted record (a cold node cache, as another client or a later open would) and
/// reads it back.
pub fn write_then_read(
    cfg: Config,
    key: &FileKey,
    files: &[Vec<u8>],
) -> Result<MicroPass, LabError> {
    let (write, written) = write_files(cfg, key, files)?;
    let (read, plain) = read_files(cfg, key, &written)?;
    check_files(cfg, files, &plain)?;
    let mut storage = Storage::default();
    for (i, (f, s)) in written.iter().enumerate() {
        storage.add(f, s).map_err(cfg.eint_err("storage", i, 0))?;
    }
    Ok(MicroPass {
        write,
        read,
        storage,
    })
}

/// The plaintext blocks of one file, as read back.
type FileBlocks = Vec<Vec<u8>>;

fn write_files(
    cfg: Config,
    key: &FileKey,
    files: &[Vec<u8>],
) -> Result<(Meter, Vec<(EintFile, MemStore)>), LabError> {
    let mut meter = Meter::default();
    let mut out = Vec::with_capacity(files.len());
    let t = Instant::now();
    for (i, data) in files.iter().enumerate() {
        let mut f = EintFile::create(
            FileId::from_u128(i as u128),
            cfg.scheme,
            cfg.block_bytes,
            KEY_VERSION,
            key,
            cfg.cache_bytes,
        )
        .map_err(cfg.eint_err("create", i, 0))?;
        let mut s = MemStore::new();
        for (b, block) in data.chunks(cfg.block_bytes as usize).enumerate() {
            let m = f
                .write_block(&mut s, b as u64, block)
                .map_err(cfg.eint_err("write", i, b as u64))?;
            meter.add_write(&m, &s);
        }
        out.push((f, s));
    }
    meter.seconds = t.elapsed().as_secs_f64();
    Ok((meter, out))
}

fn read_files(
    cfg: Config,
    key: &FileKey,
    written: &[(EintFile, MemStore)],
) -> Result<(Meter, Vec<FileBlocks>), LabError> {
    let mut meter = Meter::default();
    let mut out = Vec::with_capacity(written.len());
    let t = Instant::now();
    for (i, (w, s)) in written.iter().enumerate() {
        let mut f = EintFile::open(w.file_id(), *w.record(), cfg.cache_bytes)
            .map_err(cfg.eint_err("open", i, 0))?;
        f.add_key(KEY_VERSION, key);
        let mut blocks = Vec::with_capacity(w.record().blocks as usize);
        for b in 0..w.record().blocks {
            let (p, m) = f.read_block(s, b).map_err(cfg.eint_err("read", i, b))?;
            meter.add_read(&m);
            blocks.push(p);
        }
        out.push(blocks);
    }
    meter.seconds = t.elapsed().as_secs_f64();
    Ok((meter, out))
}

fn check_files(cfg: Config, files: &[Vec<u8>], plain: &[FileBlocks]) -> Result<(), LabError> {
    for (i, (data, blocks)) in files.iter().zip(plain).enumerate() {
        let want = data.chunks(cfg.block_bytes as usize);
        if want.len() != blocks.len() {
            return Err(cfg.mismatch(i, blocks.len() as u64));
        }
        for (b, (w, got)) in want.zip(blocks).enumerate() {
            if w != got.as_slice() {
                return Err(cfg.mismatch(i, b as u64));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::content::{Kind, Pool};
    use super::*;

    const B: u32 = 4096;

    fn cfg(scheme: Scheme, cache_bytes: usize) -> Config {
        Config {
            scheme,
            block_bytes: B,
            cache_bytes,
        }
    }

    fn untimed(m: Meter) -> Meter {
        Meter { seconds: 0.0, ..m }
    }

    #[test]
    fn whole_files_round_trip_and_meter_what_each_scheme_does() {
        let pool = Pool::new(1);
        let text = pool.file(Kind::Text, 1, 10 * B as usize + 1000);
        let random = pool.file(Kind::Random, 2, 10 * B as usize);
        let files = vec![text, random];
        let key = file_key(1);
        let run = |s| {
            let passes: Vec<MicroPass> = (0..2)
                .map(|_| write_then_read(cfg(s, 0), &key, &files).unwrap())
                .collect();
            assert_eq!(untimed(passes[0].read), untimed(passes[1].read));
            MicroRun::from_passes(&passes)
        };
        let (mt, rand, comp) = (run(Scheme::Mt), run(Scheme::Rand), run(Scheme::Comp));
        for r in [&mt, &rand, &comp] {
            assert_eq!((r.write.ops, r.read.ops), (21, 21));
            assert_eq!(r.write_s.len(), 2);
            assert_eq!(r.storage.files, 2);
            assert_eq!(r.storage.trusted_bytes_min, r.storage.trusted_bytes_max);
            assert_eq!(
                r.storage.trusted_bytes_max,
                nasd_e2e::TrustedRecord::ENCODED_BYTES as u64
            );
        }
        assert_eq!(mt.read.by_leaf, 21);
        // RAND: ten text blocks pass on their looks; the text tail and the random blocks need
        // leaves. COMP: text blocks and the text tail carry tags.
        assert_eq!((rand.read.by_entropy, rand.read.by_leaf), (10, 11));
        assert_eq!((comp.read.by_tag, comp.read.by_leaf), (11, 10));
        assert_eq!(mt.storage.leaves, 21);
        assert_eq!((rand.storage.leaves, comp.storage.leaves), (11, 10));
        assert!(rand.storage.untrusted_bytes < mt.storage.untrusted_bytes);
        assert!(rand.read.integrity_bytes() < mt.read.integrity_bytes());
    }

    #[test]
    fn a_node_cache_saves_read_bandwidth_under_mt() {
        let pool = Pool::new(2);
        let files = vec![pool.file(Kind::Random, 1, 64 * B as usize)];
        let key = file_key(2);
        let none = write_then_read(cfg(Scheme::Mt, 0), &key, &files).unwrap();
        let some = write_then_read(cfg(Scheme::Mt, 4096), &key, &files).unwrap();
        assert!(some.read.integrity_bytes() < none.read.integrity_bytes() / 2);
        assert_eq!(none.storage, some.storage);
    }
}
