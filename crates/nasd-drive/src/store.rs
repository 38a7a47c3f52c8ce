//! The object store engine: partitions, objects, attributes and integrity metadata in a redb
//! database, object data in 8 KiB blocks of a data file, both behind the [`Storage`] seam.
//!
//! **Durability and atomicity.** Data is never overwritten in place: a write puts new block
//! contents into freshly allocated physical blocks, syncs the data file, then commits one redb
//! transaction that swaps the block map entries (each carrying that block's CRC32C and its
//! integrity metadata), the attributes and the allocator state together. A crash before the
//! commit leaves the old object intact and the new blocks free; after it, data and metadata
//! agree by construction. Nothing is acknowledged before that commit (except writes the client
//! asked to be write-back, made durable by `flush`).
//!
//! **Group commit.** All mutations run on one writer thread that owns the write path; it drains
//! its queue into one transaction, one data sync and one commit, and falls back to one
//! transaction per job if any job in a batch fails, so one bad request never fails another.
//!
//! **Readers and freed blocks.** Readers use redb snapshots and read data blocks without locks.
//! A block freed by a commit is quarantined until every reader that started before that commit
//! has finished, so a reader never sees a block reused under it.
//!
//! **Copy-on-write clones.** `fastcopy` shares block map entries; a shared physical block lists
//! its referencers in `REFS` and is charged to the first, so the `blocks_used` of a source and
//! its clones add up to the space they take (seed 002 §2.3).

use crate::records::{BlockEntry, DriveRecord, ObjectRecord, PartitionRecord};
use crate::storage::{RedbBackend, Storage};
use crate::DriveError;
use nasd_crypto::integrity::{
    self, adhash, pieces, tree, BlockMeta, BLOCK_BYTES, CHUNKS_PER_BLOCK, CHUNK_BYTES,
    SUB_BLOCK_BYTES,
};
use nasd_crypto::seal::{KeySeal, SealHeader};
use nasd_crypto::{ct_eq, Cost, Digest};
use nasd_proto::{DriveId, ObjectId, PartitionId, Region, Scheme, Suite};
use parking_lot::{Mutex, RwLock};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

pub(crate) const DRIVE: TableDefinition<&str, &[u8]> = TableDefinition::new("drive");
pub(crate) const PARTITIONS: TableDefinition<u16, &[u8]> = TableDefinition::new("partitions");
pub(crate) const OBJECTS: TableDefinition<(u16, u64), &[u8]> = TableDefinition::new("objects");
pub(crate) const BLOCKS: TableDefinition<(u16, u64, u64), &[u8]> = TableDefinition::new("blocks");
/// Key of a stored tree node: partition, object, level, index.
pub type NodeKey = (u16, u64, u8, u64);
/// The stored tree nodes, read-only.
pub type NodesTable = redb::ReadOnlyTable<NodeKey, &'static [u8]>;

pub(crate) const NODES: TableDefinition<NodeKey, &[u8]> = TableDefinition::new("tree_nodes");
pub(crate) const FREE: TableDefinition<u64, ()> = TableDefinition::new("free_blocks");
pub(crate) const REFS: TableDefinition<u64, &[u8]> = TableDefinition::new("shared_blocks");

/// Tree levels at and above this are stored (subtrees of 128 chunks = 128 KiB and up); lower
/// ones are merged from the stored leaves on demand. Keeps `tree` metadata at 32 B per KiB
/// plus 1/64 of that: 3.17% of data, under the 3.2% budget.
pub const STORED_TREE_LEVEL_MIN: u32 = 7;
/// Jobs the writer folds into one transaction at most.
pub const GROUP_COMMIT_JOBS_MAX: usize = 64;
/// Data bytes the writer folds into one transaction at most.
pub const GROUP_COMMIT_BYTES_MAX: usize = 64 << 20;
/// The data file grows by this much at a time, allocated up front (`fallocate`), so syncing a
/// write rarely has to journal a file-size change.
pub const DATA_GROW_BYTES: u64 = 64 << 20;

pub(crate) type R<T> = Result<T, DriveError>;

pub(crate) fn db_err<E: std::fmt::Display>(e: E) -> DriveError {
    DriveError::Db(e.to_string())
}

/// What the drive and partition records say, cached for the request path.
#[derive(Clone)]
pub struct Cached {
    pub drive: DriveRecord,
    pub partitions: BTreeMap<u16, PartitionRecord>,
}

#[derive(Default)]
pub(crate) struct Alloc {
    /// Bytes of the data file already reserved (allocated on disk).
    pub(crate) reserved_bytes: u64,
    pub(crate) free: BTreeSet<u64>,
    pub(crate) quarantine: Vec<(u64, Vec<u64>)>,
    readers: BTreeMap<u64, usize>,
    pub(crate) epoch: u64,
}

impl Alloc {
    pub(crate) fn release(&mut self) {
        let oldest = self.readers.keys().next().copied().unwrap_or(u64::MAX);
        let mut keep = vec![];
        for (e, blocks) in self.quarantine.drain(..) {
            if oldest >= e {
                self.free.extend(blocks);
            } else {
                keep.push((e, blocks));
            }
        }
        self.quarantine = keep;
    }
}

pub struct Store {
    /// The metadata database; replaced in place after an I/O error ([`Store::reopen`]).
    db: RwLock<Database>,
    /// The storage under `db`, to open it again.
    meta: Arc<dyn Storage>,
    /// An I/O error failed `db` ([`Store::db_failed`]).
    db_failed: std::sync::atomic::AtomicBool,
    pub(crate) data: Arc<dyn Storage>,
    pub(crate) state: RwLock<Cached>,
    pub(crate) alloc: Mutex<Alloc>,
    pub(crate) tree_cache: crate::tree_cache::TreeCache,
    /// CPU time the writer thread spent on jobs, in nanoseconds.
    pub(crate) writer_cpu_ns: std::sync::atomic::AtomicU64,
    /// With sealed keys (`nasd drive init --seal-keys`), what seals and opens them.
    pub(crate) seal: Option<KeySeal>,
    /// The block cache, once the drive gives the store one (`crate::cache`).
    pub(crate) block_cache: std::sync::OnceLock<Arc<crate::cache::BlockCache>>,
}

/// The key in the `drive` table under which a sealed drive keeps its [`SealHeader`].
const SEAL_ENTRY: &str = "seal";

/// Keeps freed blocks from being reused while a read that may still map them is running.
pub struct ReaderGuard<'a> {
    store: &'a Store,
    epoch: u64,
}

impl Drop for ReaderGuard<'_> {
    fn drop(&mut self) {
        let mut a = self.store.alloc.lock();
        if let Some(n) = a.readers.get_mut(&self.epoch) {
            *n -= 1;
            if *n == 0 {
                a.readers.remove(&self.epoch);
            }
        }
    }
}

/// The data digest material of a read, for the reply MAC.
pub enum Material {
    /// No data integrity requested.
    None,
    /// `mac`: the reply MAC runs over the data itself.
    Data,
    /// Digest bytes (`digest`, `incremental`, `tree`).
    Bytes(Vec<u8>),
}

pub struct ReadOut {
    pub logical_size: u64,
    pub scheme: Scheme,
    pub regions: Vec<Region>,
    pub data: Vec<u8>,
    pub material: Material,
    pub trailer: Vec<u8>,
}

/// Logical bytes of block `b` in an object of `size` bytes.
pub(crate) fn block_len(size: u64, b: u64) -> u64 {
    size.saturating_sub(b * BLOCK_BYTES).min(BLOCK_BYTES)
}

fn zero_digest(suite: Suite, len: u64, cost: &mut Cost) -> Digest {
    nasd_crypto::primitives::hash_data(suite, b"", &vec![0u8; len as usize], cost)
}

impl Store {
    /// Creates a new, empty drive on `meta` and `data` (seed 002 Table 3 `initialize`).
    pub fn create(meta: Arc<dyn Storage>, data: Arc<dyn Storage>, drive: DriveRecord) -> R<Store> {
        Self::create_with(meta, data, drive, None)
    }

    /// [`Store::create`], the key hierarchy sealed under `seal` when given.
    pub fn create_with(
        meta: Arc<dyn Storage>,
        data: Arc<dyn Storage>,
        drive: DriveRecord,
        seal: Option<KeySeal>,
    ) -> R<Store> {
        meta.set_len(0)?;
        data.set_len(0)?;
        let db = Database::builder()
            .create_with_backend(RedbBackend(meta.clone()))
            .map_err(db_err)?;
        let w = db.begin_write().map_err(db_err)?;
        {
            let mut t = w.open_table(DRIVE).map_err(db_err)?;
            t.insert("drive", drive.encode(seal.as_ref()).as_slice())
                .map_err(db_err)?;
            if let Some(s) = &seal {
                t.insert(SEAL_ENTRY, s.header().encode().as_slice())
                    .map_err(db_err)?;
            }
            w.open_table(PARTITIONS).map_err(db_err)?;
            w.open_table(OBJECTS).map_err(db_err)?;
            w.open_table(BLOCKS).map_err(db_err)?;
            w.open_table(NODES).map_err(db_err)?;
            w.open_table(FREE).map_err(db_err)?;
            w.open_table(REFS).map_err(db_err)?;
        }
        w.commit().map_err(db_err)?;
        data.sync()?;
        Self::from_db(db, meta, data, seal)
    }

    /// Opens an existing drive (after a clean stop or a crash: redb recovers its last commit).
    pub fn open(meta: Arc<dyn Storage>, data: Arc<dyn Storage>) -> R<Store> {
        Self::open_with(meta, data, None)
    }

    /// [`Store::open`] with the passphrase a drive with sealed keys needs.
    pub fn open_with(
        meta: Arc<dyn Storage>,
        data: Arc<dyn Storage>,
        passphrase: Option<&[u8]>,
    ) -> R<Store> {
        let db = Database::builder()
            .create_with_backend(RedbBackend(meta.clone()))
            .map_err(db_err)?;
        let seal = Self::unlock(&db, passphrase)?;
        Self::from_db(db, meta, data, seal)
    }

    /// Whether the drive on `meta` keeps its keys sealed (it then needs its passphrase).
    pub fn is_sealed(meta: Arc<dyn Storage>) -> R<bool> {
        let db = Database::builder()
            .create_with_backend(RedbBackend(meta))
            .map_err(db_err)?;
        let r = db.begin_read().map_err(db_err)?;
        let t = r
            .open_table(DRIVE)
            .map_err(|_| DriveError::NotInitialized)?;
        Ok(t.get(SEAL_ENTRY).map_err(db_err)?.is_some())
    }

    /// The drive's seal, unlocked with `passphrase`, if its keys are sealed.
    fn unlock(db: &Database, passphrase: Option<&[u8]>) -> R<Option<KeySeal>> {
        let r = db.begin_read().map_err(db_err)?;
        let t = r
            .open_table(DRIVE)
            .map_err(|_| DriveError::NotInitialized)?;
        let Some(v) = t.get(SEAL_ENTRY).map_err(db_err)? else {
            return Ok(None);
        };
        let header =
            SealHeader::decode(v.value()).map_err(|e| DriveError::Corrupt(e.to_string()))?;
        let p = passphrase.ok_or(DriveError::Sealed)?;
        KeySeal::unlock(p, &header)
            .map(Some)
            .map_err(|e| DriveError::Config(e.to_string()))
    }

    /// Seals the drive's keys under `seal`, or changes the passphrase they are sealed under:
    /// one transaction writes the new header and every key record resealed. Offline (the drive
    /// must not be running); `passphrase` opens the current seal, if any.
    pub fn seal_keys(
        meta: Arc<dyn Storage>,
        data: Arc<dyn Storage>,
        passphrase: Option<&[u8]>,
        seal: KeySeal,
    ) -> R<()> {
        let store = Self::open_with(meta, data, passphrase)?;
        let state = store.state.read().clone();
        let w = store.db().begin_write().map_err(db_err)?;
        {
            let mut t = w.open_table(DRIVE).map_err(db_err)?;
            t.insert("drive", state.drive.encode(Some(&seal)).as_slice())
                .map_err(db_err)?;
            t.insert(SEAL_ENTRY, seal.header().encode().as_slice())
                .map_err(db_err)?;
            let mut pt = w.open_table(PARTITIONS).map_err(db_err)?;
            for (k, v) in &state.partitions {
                pt.insert(*k, v.encode(*k, Some(&seal)).as_slice())
                    .map_err(db_err)?;
            }
        }
        w.commit().map_err(db_err)
    }

    fn from_db(
        db: Database,
        meta: Arc<dyn Storage>,
        data: Arc<dyn Storage>,
        seal: Option<KeySeal>,
    ) -> R<Store> {
        let (cached, free) = Self::load(&db, seal.as_ref())?;
        Ok(Store {
            db: RwLock::new(db),
            meta,
            db_failed: Default::default(),
            state: RwLock::new(cached),
            alloc: Mutex::new(Alloc {
                free,
                reserved_bytes: data.size()?,
                ..Default::default()
            }),
            data,
            tree_cache: Default::default(),
            writer_cpu_ns: Default::default(),
            seal,
            block_cache: Default::default(),
        })
    }

    /// The drive and partition records and the free list, as `db` holds them.
    fn load(db: &Database, seal: Option<&KeySeal>) -> R<(Cached, BTreeSet<u64>)> {
        let r = db.begin_read().map_err(db_err)?;
        let drive = {
            let t = r
                .open_table(DRIVE)
                .map_err(|_| DriveError::NotInitialized)?;
            let v = t
                .get("drive")
                .map_err(db_err)?
                .ok_or(DriveError::NotInitialized)?;
            DriveRecord::decode(v.value(), seal)
                .map_err(|e| DriveError::Corrupt(format!("drive record: {e}")))?
        };
        let mut partitions = BTreeMap::new();
        for e in r
            .open_table(PARTITIONS)
            .map_err(db_err)?
            .iter()
            .map_err(db_err)?
        {
            let (k, v) = e.map_err(db_err)?;
            let (mut p, counted) = PartitionRecord::decode(v.value(), k.value(), seal)
                .map_err(|e| DriveError::Corrupt(format!("partition record: {e}")))?;
            if !counted {
                p.reserved_blocks = Self::count_reserved(&r, k.value())?;
            }
            partitions.insert(k.value(), p);
        }
        let mut free = BTreeSet::new();
        for e in r.open_table(FREE).map_err(db_err)?.iter().map_err(db_err)? {
            free.insert(e.map_err(db_err)?.0.value());
        }
        Ok((Cached { drive, partitions }, free))
    }

    /// The blocks partition `p`'s objects reserve beyond those they use, counted from the
    /// objects (for a partition record written before it kept the count).
    fn count_reserved(r: &redb::ReadTransaction, p: u16) -> R<u64> {
        let t = r.open_table(OBJECTS).map_err(db_err)?;
        let mut n = 0;
        for e in t.range((p, 0)..=(p, u64::MAX)).map_err(db_err)? {
            let rec = ObjectRecord::decode(e.map_err(db_err)?.1.value())
                .map_err(|e| DriveError::Corrupt(format!("object record: {e}")))?;
            n += rec.reservation();
        }
        Ok(n)
    }

    /// The metadata database (transactions hold what they need of it, so the guard is
    /// dropped at once); opened again first if an I/O error failed it.
    pub(crate) fn db(&self) -> parking_lot::RwLockReadGuard<'_, Database> {
        if let Err(e) = self.reopen() {
            tracing::debug!("metadata database not reopened yet: {e}");
        }
        self.db.read()
    }

    /// Marks the metadata database failed by an I/O error: redb refuses every later
    /// transaction of it, reads too, with `PreviousIo` (a commit that met a full disk does
    /// this), so the next use opens it again ([`Store::reopen`]).
    pub(crate) fn db_failed(&self) {
        self.db_failed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Opens the metadata database again after an I/O error failed it: redb's recovery brings
    /// back its last commit, as at a restart, and the drive reloads its records and free list
    /// from it, so it serves again once the disk has room (until then this fails and the
    /// next use tries again). Free blocks still quarantined for running reads stay out of the
    /// free list. Only a failed database is replaced: it can write nothing more to the
    /// storage, so the two never both write.
    pub(crate) fn reopen(&self) -> R<()> {
        use std::sync::atomic::Ordering;
        if !self.db_failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut db = self.db.write();
        if !self.db_failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let fresh = Database::builder()
            .create_with_backend(RedbBackend(self.meta.clone()))
            .map_err(|e| match e {
                // Still no room: `DiskFull` to the client.
                redb::DatabaseError::Storage(redb::StorageError::Io(io)) => DriveError::Io(io),
                e => db_err(e),
            })?;
        let (cached, mut free) = Self::load(&fresh, self.seal.as_ref())?;
        *db = fresh;
        *self.state.write() = cached;
        let mut a = self.alloc.lock();
        for (_, blocks) in &a.quarantine {
            for b in blocks {
                free.remove(b);
            }
        }
        a.free = free;
        a.reserved_bytes = self.data.size()?;
        self.db_failed.store(false, Ordering::Release);
        tracing::warn!("metadata database reopened after an I/O error");
        Ok(())
    }

    pub fn cached(&self) -> Cached {
        self.state.read().clone()
    }
    pub fn suite(&self) -> Suite {
        self.state.read().drive.suite
    }
    pub fn drive_id(&self) -> DriveId {
        self.state.read().drive.drive
    }
    pub fn with_state<T>(&self, f: impl FnOnce(&Cached) -> T) -> T {
        f(&self.state.read())
    }

    /// The store's block cache, made by `make` if it has none yet (a second drive opened over
    /// the same store shares the first one's); reads use it from now on.
    pub fn block_cache_or_init(
        &self,
        make: impl FnOnce() -> crate::cache::BlockCache,
    ) -> Arc<crate::cache::BlockCache> {
        self.block_cache.get_or_init(|| Arc::new(make())).clone()
    }

    /// Drops freed physical blocks from the block cache (the commit that frees them landed).
    pub(crate) fn forget_freed(&self, freed: &[u64]) {
        if let Some(c) = self.block_cache.get() {
            c.forget(freed);
        }
    }

    /// The block-map entry of block `b` of an object, or `None` for a hole.
    pub(crate) fn block_entry(&self, p: PartitionId, o: ObjectId, b: u64) -> R<Option<BlockEntry>> {
        let r = self.db().begin_read().map_err(db_err)?;
        let blocks = r.open_table(BLOCKS).map_err(db_err)?;
        let e = blocks.get((p.0, o.0, b)).map_err(db_err)?;
        e.map(|v| {
            BlockEntry::decode(v.value())
                .map_err(|e| DriveError::Corrupt(format!("block entry: {e}")))
        })
        .transpose()
    }

    pub(crate) fn reader(&self) -> ReaderGuard<'_> {
        let mut a = self.alloc.lock();
        let epoch = a.epoch;
        *a.readers.entry(epoch).or_insert(0) += 1;
        ReaderGuard { store: self, epoch }
    }

    /// An object's record, or `NoSuchObject`.
    pub fn object(&self, p: PartitionId, o: ObjectId) -> R<ObjectRecord> {
        let r = self.db().begin_read().map_err(db_err)?;
        let t = r.open_table(OBJECTS).map_err(db_err)?;
        let v = t
            .get((p.0, o.0))
            .map_err(db_err)?
            .ok_or(DriveError::NoSuchObject(p, o))?;
        ObjectRecord::decode(v.value())
            .map_err(|e| DriveError::Corrupt(format!("object record: {e}")))
    }

    /// Identifiers of the partition's objects (the Partition Contents object, Table 4).
    pub fn list_objects(&self, p: PartitionId) -> R<Vec<ObjectId>> {
        let r = self.db().begin_read().map_err(db_err)?;
        let t = r.open_table(OBJECTS).map_err(db_err)?;
        let mut v = vec![];
        for e in t.range((p.0, 0)..=(p.0, u64::MAX)).map_err(db_err)? {
            v.push(ObjectId(e.map_err(db_err)?.0.value().1));
        }
        Ok(v)
    }

    /// Whether the store answers: the metadata database opens a read of its objects table,
    /// and the data file tells its size (a health check; reads nothing else).
    pub fn probe(&self) -> R<()> {
        let r = self.db().begin_read().map_err(db_err)?;
        r.open_table(OBJECTS).map_err(db_err)?;
        self.data.size()?;
        Ok(())
    }

    /// Physical blocks in use (for capacity reporting).
    pub fn used_blocks(&self) -> u64 {
        let next = self.state.read().drive.next_phys;
        let a = self.alloc.lock();
        let q: usize = a.quarantine.iter().map(|(_, b)| b.len()).sum();
        next - a.free.len() as u64 - q as u64
    }

    fn read_block(&self, e: &BlockEntry, out: &mut [u8], within: u64) -> R<()> {
        self.data.read(e.phys * BLOCK_BYTES + within, out)?;
        Ok(())
    }

    /// Reads `out.len()` bytes at `within` of a block through the block cache: from a cached
    /// copy (checked against its CRC when it was read), else from storage. With `--cache-reads`,
    /// a read of part of a block loads the whole block, checks it and caches it (the rest is
    /// likely read next);
    /// a whole-block read goes straight to storage and leaves the cache alone, so streaming
    /// reads do not flush it. `generation` was taken before the read's snapshot (`cache`).
    fn read_piece(&self, e: &BlockEntry, out: &mut [u8], within: u64, generation: u64) -> R<()> {
        let Some(c) = self.block_cache.get() else {
            return self.read_block(e, out, within);
        };
        let w = within as usize;
        if let Some(b) = c.get(e.phys, e.crc) {
            out.copy_from_slice(&b[w..w + out.len()]);
            return Ok(());
        }
        if out.len() as u64 >= BLOCK_BYTES || !c.caches_reads() || c.bytes_max() == 0 {
            return self.read_block(e, out, within);
        }
        let b = self.load_checked(e)?;
        out.copy_from_slice(&b[w..w + out.len()]);
        c.insert(generation, e.phys, e.crc, b.into(), None);
        Ok(())
    }

    /// Reads a whole physical block and checks its at-rest CRC: used wherever the drive itself
    /// hashes stored bytes, so it never MACs bytes the disk corrupted.
    pub(crate) fn load_checked(&self, e: &BlockEntry) -> R<Vec<u8>> {
        let mut b = vec![0u8; BLOCK_BYTES as usize];
        self.data.read(e.phys * BLOCK_BYTES, &mut b)?;
        if crc32c::crc32c(&b) != e.crc {
            return Err(DriveError::Corrupt(format!(
                "physical block {} fails its CRC",
                e.phys
            )));
        }
        Ok(b)
    }

    /// Reads regions of an object; with `integrity`, also the scheme's data digest material and
    /// (for `tree`) the proof trailer. `limit` is the region the request's capability allows:
    /// no byte outside it is returned, so a `tree` range is widened to its chunks only as far as
    /// `limit` reaches, and a chunk it cuts is proved by hashing the piece returned (after
    /// checking the whole stored chunk against its leaf). `cost` counts what the drive hashed.
    pub fn read(
        &self,
        p: PartitionId,
        o: ObjectId,
        regions: &[Region],
        limit: Region,
        integrity: bool,
        cost: &mut Cost,
    ) -> R<ReadOut> {
        let generation = self.block_cache.get().map_or(0, |c| c.generation());
        let _g = self.reader();
        let suite = self.suite();
        let version = self.tree_cache.version((p.0, o.0));
        let r = self.db().begin_read().map_err(db_err)?;
        let objects = r.open_table(OBJECTS).map_err(db_err)?;
        let rec = objects
            .get((p.0, o.0))
            .map_err(db_err)?
            .ok_or(DriveError::NoSuchObject(p, o))?;
        let rec = ObjectRecord::decode(rec.value())
            .map_err(|e| DriveError::Corrupt(format!("object record: {e}")))?;
        let blocks = r.open_table(BLOCKS).map_err(db_err)?;
        let size = rec.attrs.logical_size;
        let scheme = rec.attrs.scheme;
        let total = nasd_proto::ops::regions_total(regions)
            .ok_or(DriveError::Invalid("region lengths overflow".into()))?;
        if total > nasd_proto::DATA_BYTES_MAX as u64 + (regions.len() as u64) * 2 * CHUNK_BYTES {
            return Err(DriveError::TooLarge);
        }
        let mut out_regions = Vec::with_capacity(regions.len());
        for reg in regions {
            let mut a = reg.offset.min(size);
            let mut b = reg.end().unwrap_or(u64::MAX).min(size);
            if integrity && scheme == Scheme::Tree && a < b {
                a = (a / CHUNK_BYTES * CHUNK_BYTES).max(limit.offset.min(a));
                b = (b.div_ceil(CHUNK_BYTES) * CHUNK_BYTES)
                    .min(size)
                    .min(limit.end().unwrap_or(u64::MAX).max(b));
            }
            out_regions.push(Region::new(a, b - a));
        }
        let total: u64 = out_regions.iter().map(|r| r.len).sum();
        if total > (nasd_proto::DATA_BYTES_MAX as u64) + 2 * CHUNK_BYTES * regions.len() as u64 {
            return Err(DriveError::TooLarge);
        }
        let mut data = vec![0u8; total as usize];
        let mut entries: HashMap<u64, Option<BlockEntry>> = HashMap::new();
        let mut entry = |b: u64| -> R<Option<BlockEntry>> {
            if let Some(e) = entries.get(&b) {
                return Ok(e.clone());
            }
            let e = match blocks.get((p.0, o.0, b)).map_err(db_err)? {
                Some(v) => Some(
                    BlockEntry::decode(v.value())
                        .map_err(|e| DriveError::Corrupt(format!("block entry: {e}")))?,
                ),
                None => None,
            };
            entries.insert(b, e.clone());
            Ok(e)
        };
        let mut at = 0usize;
        for reg in &out_regions {
            for pc in pieces::split(reg.offset, reg.len, BLOCK_BYTES) {
                let dst = &mut data[at..at + pc.len as usize];
                if let Some(e) = entry(pc.unit)? {
                    self.read_piece(&e, dst, pc.offset - pc.unit * BLOCK_BYTES, generation)?;
                }
                at += pc.len as usize;
            }
        }
        let mut trailer = vec![];
        let material = if !integrity {
            Material::None
        } else {
            match scheme {
                Scheme::Mac => {
                    for reg in &out_regions {
                        for pc in pieces::split(reg.offset, reg.len, BLOCK_BYTES) {
                            if let Some(e) = entry(pc.unit)? {
                                self.load_checked(&e)?;
                            }
                        }
                    }
                    Material::Data
                }
                Scheme::Digest => {
                    let mut m = Vec::new();
                    let mut at = 0usize;
                    for reg in &out_regions {
                        for pc in pieces::split(reg.offset, reg.len, BLOCK_BYTES) {
                            let bytes = &data[at..at + pc.len as usize];
                            at += pc.len as usize;
                            let whole =
                                pc.starts_unit(BLOCK_BYTES) && pc.len == block_len(size, pc.unit);
                            let e = entry(pc.unit)?;
                            let d = match (&e, whole) {
                                (
                                    Some(BlockEntry {
                                        meta: BlockMeta::Digest(d),
                                        ..
                                    }),
                                    true,
                                ) => *d,
                                (None, true) => zero_digest(suite, pc.len, &mut Cost::default()),
                                (Some(e), false) => {
                                    self.load_checked(e)?;
                                    nasd_crypto::primitives::hash_data(suite, b"", bytes, cost)
                                }
                                (None, false) => {
                                    nasd_crypto::primitives::hash_data(suite, b"", bytes, cost)
                                }
                                (Some(_), true) => {
                                    return Err(DriveError::Corrupt(
                                        "block metadata of the wrong scheme".into(),
                                    ))
                                }
                            };
                            m.extend_from_slice(&d);
                        }
                    }
                    Material::Bytes(m)
                }
                Scheme::Incremental => {
                    let mut m = Vec::new();
                    let mut at = 0usize;
                    for reg in &out_regions {
                        let mut sum = adhash::Sum::ZERO;
                        for pc in pieces::split(reg.offset, reg.len, BLOCK_BYTES) {
                            let bytes = &data[at..at + pc.len as usize];
                            at += pc.len as usize;
                            let e = entry(pc.unit)?;
                            let s =
                                self.incremental_piece(suite, size, &pc, bytes, e.as_ref(), cost)?;
                            sum.add(&s.to_bytes(), cost);
                        }
                        m.extend_from_slice(&sum.to_bytes());
                    }
                    Material::Bytes(m)
                }
                Scheme::Tree => {
                    let n = tree::chunk_count(size);
                    let key = (p.0, o.0);
                    let mut src = NodeSource::new(suite, p, o, size, &blocks, Some(&r))
                        .with_cache(&self.tree_cache, version);
                    // A range read before at this version is one cache lookup; otherwise the
                    // proof is built from cached or stored nodes, and the answer is cached.
                    let mut top = None;
                    let mut fresh = vec![];
                    let mut proofs: Vec<Arc<[Digest]>> = Vec::with_capacity(out_regions.len());
                    let mut cut_pieces = vec![];
                    let mut at = 0usize;
                    for reg in &out_regions {
                        if reg.len == 0 {
                            proofs.push(Arc::new([]));
                            continue;
                        }
                        let parts = tree::range_parts(reg.offset, reg.len, size);
                        for pc in parts.cut.iter().flatten() {
                            let a = at + (pc.offset - reg.offset) as usize;
                            let piece = &data[a..a + pc.len as usize];
                            let stored = tree::CompleteNodes::complete(&mut src, 0, pc.chunk)?;
                            cut_pieces.push(
                                self.cut_piece(suite, size, pc, piece, stored, &mut entry, cost)?,
                            );
                        }
                        at += reg.len as usize;
                        let (c0, c1) = parts.whole;
                        if c0 == c1 {
                            proofs.push(Arc::new([]));
                            continue;
                        }
                        let (t, cached) = self.tree_cache.answer(key, version, n, c0, c1);
                        top = top.or(t);
                        proofs.push(match cached {
                            Some(pf) => pf,
                            None => {
                                let pf: Arc<[Digest]> =
                                    tree::prove(suite, &mut src, n, c0, c1)?.into();
                                fresh.push(((c0, c1), pf.clone()));
                                pf
                            }
                        });
                    }
                    let cached_top = top.is_some();
                    let top = match top {
                        Some(t) => t,
                        None => tree::top(suite, &mut src, n)?,
                    };
                    if !cached_top || !fresh.is_empty() {
                        self.tree_cache.put_answer(key, version, n, top, fresh);
                    }
                    src.flush_cache();
                    trailer = integrity::verify::encode_tree_trailer(&top, &proofs);
                    let mut m = tree::root_material(size, &top).to_vec();
                    m.extend(cut_pieces.iter().flatten());
                    Material::Bytes(m)
                }
            }
        };
        Ok(ReadOut {
            logical_size: size,
            scheme,
            regions: out_regions,
            data,
            material,
            trailer,
        })
    }

    /// The proof of a piece of a chunk that a read must cut at its capability's edge: the whole
    /// stored chunk is read and checked against its `stored` leaf (so the drive never vouches
    /// for bytes the disk corrupted), then the piece returned is hashed in its write form.
    #[allow(clippy::too_many_arguments)]
    fn cut_piece(
        &self,
        suite: Suite,
        size: u64,
        pc: &tree::ChunkPiece,
        piece: &[u8],
        stored: Digest,
        entry: &mut impl FnMut(u64) -> R<Option<BlockEntry>>,
        cost: &mut Cost,
    ) -> R<Digest> {
        let start = pc.chunk * CHUNK_BYTES;
        let len = (start + CHUNK_BYTES).min(size) - start;
        let mut chunk = vec![0u8; len as usize];
        let block = start / BLOCK_BYTES;
        if let Some(e) = entry(block)? {
            let b = self.load_checked(&e)?;
            let within = (start - block * BLOCK_BYTES) as usize;
            chunk.copy_from_slice(&b[within..within + len as usize]);
        }
        if !ct_eq(&tree::leaf(suite, pc.chunk, &chunk, cost), &stored) {
            return Err(DriveError::Corrupt(format!(
                "chunk {} does not match its stored leaf",
                pc.chunk
            )));
        }
        let within = pc.within() as usize;
        if chunk[within..within + piece.len()] != *piece {
            return Err(DriveError::Corrupt(format!(
                "chunk {} changed between two reads of it",
                pc.chunk
            )));
        }
        Ok(tree::partial(suite, pc.chunk, pc.within(), piece, cost))
    }

    /// The AdHash value of the part `pc` of a block that a read returns: the stored sum when the
    /// piece is the whole block, else the sum of its sub-block hashes computed directly or via
    /// the complementary property (stored sum minus the rest), whichever hashes fewer bytes
    /// (seed 000 §3.3.1). Partial sub-blocks at the piece's edges are always hashed directly.
    fn incremental_piece(
        &self,
        suite: Suite,
        size: u64,
        pc: &pieces::Piece,
        bytes: &[u8],
        e: Option<&BlockEntry>,
        cost: &mut Cost,
    ) -> R<adhash::Sum> {
        let blen = block_len(size, pc.unit);
        let bstart = pc.unit * BLOCK_BYTES;
        let whole = pc.offset == bstart && pc.len == blen;
        let stored = match e {
            Some(BlockEntry {
                meta: BlockMeta::Sum(s),
                ..
            }) => Some(adhash::Sum::from_bytes(s)),
            Some(_) => {
                return Err(DriveError::Corrupt(
                    "block metadata of the wrong scheme".into(),
                ))
            }
            None => None,
        };
        if whole {
            if let Some(s) = stored {
                return Ok(s);
            }
        }
        let block = match e {
            Some(e) => self.load_checked(e)?,
            None => vec![0u8; BLOCK_BYTES as usize],
        };
        let logical = &block[..blen as usize];
        // Sub-block pieces of the read inside this block; `full` marks those that are whole
        // logical sub-blocks (eligible for the complement), the rest are hashed directly.
        let subs: Vec<(pieces::Piece, bool)> = pieces::split(pc.offset, pc.len, SUB_BLOCK_BYTES)
            .map(|q| {
                let sub_end = ((q.unit + 1) * SUB_BLOCK_BYTES).min(size);
                (
                    q,
                    q.starts_unit(SUB_BLOCK_BYTES) && q.offset + q.len == sub_end,
                )
            })
            .collect();
        let mut sum = adhash::Sum::ZERO;
        let inside_full: u64 = subs.iter().filter(|s| s.1).map(|s| s.0.len).sum();
        let outside = blen - inside_full;
        for (q, full) in &subs {
            if !full {
                let a = (q.offset - pc.offset) as usize;
                sum.add(
                    &adhash::sub_hash(suite, q.unit, &bytes[a..a + q.len as usize], cost),
                    cost,
                );
            }
        }
        match stored {
            Some(s) if outside < inside_full => {
                // complement: S_b - sum of h(i, x_i) over whole sub-blocks not in the read
                let mut c = s;
                let first = bstart / SUB_BLOCK_BYTES;
                let inside: BTreeSet<u64> = subs.iter().filter(|s| s.1).map(|s| s.0.unit).collect();
                for (j, x) in logical.chunks(SUB_BLOCK_BYTES as usize).enumerate() {
                    let i = first + j as u64;
                    if !inside.contains(&i) {
                        c.sub(&adhash::sub_hash(suite, i, x, cost), cost);
                    }
                }
                sum.add(&c.to_bytes(), cost);
            }
            _ => {
                for (q, full) in &subs {
                    if *full {
                        let a = (q.offset - pc.offset) as usize;
                        sum.add(
                            &adhash::sub_hash(suite, q.unit, &bytes[a..a + q.len as usize], cost),
                            cost,
                        );
                    }
                }
            }
        }
        Ok(sum)
    }

    /// Estimated and maximum additional blocks needed to overwrite `regions` completely
    /// (seed 002 Table 1 `blocksrequired`): holes and blocks past the end need new blocks, and
    /// so do blocks shared with a clone (copy-on-write); overwriting an unshared block frees
    /// its old copy, so it costs nothing net. No compression here, so both answers agree.
    pub fn blocks_required(
        &self,
        p: PartitionId,
        o: ObjectId,
        regions: &[Region],
    ) -> R<(u64, u64)> {
        let r = self.db().begin_read().map_err(db_err)?;
        let objects = r.open_table(OBJECTS).map_err(db_err)?;
        if objects.get((p.0, o.0)).map_err(db_err)?.is_none() {
            return Err(DriveError::NoSuchObject(p, o));
        }
        let blocks = r.open_table(BLOCKS).map_err(db_err)?;
        let refs = r.open_table(REFS).map_err(db_err)?;
        let mut touched = BTreeSet::new();
        for reg in regions {
            let end = reg
                .end()
                .ok_or(DriveError::Invalid("region overflows".into()))?;
            if reg.len == 0 {
                continue;
            }
            let (b0, b1) = (reg.offset / BLOCK_BYTES, (end - 1) / BLOCK_BYTES);
            if b1 - b0 > (1 << 24) {
                return Err(DriveError::TooLarge);
            }
            touched.extend(b0..=b1);
        }
        let mut n = 0;
        for b in touched {
            match blocks.get((p.0, o.0, b)).map_err(db_err)? {
                None => n += 1,
                Some(v) => {
                    let e = BlockEntry::decode(v.value())
                        .map_err(|e| DriveError::Corrupt(e.to_string()))?;
                    if refs.get(e.phys).map_err(db_err)?.is_some() {
                        n += 1;
                    }
                }
            }
        }
        Ok((n, n))
    }

    /// Bytes of integrity metadata stored for an object (block entries' digests and stored tree
    /// nodes), for the overhead figure.
    pub fn metadata_bytes(&self, p: PartitionId, o: ObjectId) -> R<u64> {
        let r = self.db().begin_read().map_err(db_err)?;
        let blocks = r.open_table(BLOCKS).map_err(db_err)?;
        let nodes = r.open_table(NODES).map_err(db_err)?;
        let mut n = 0u64;
        for e in blocks
            .range((p.0, o.0, 0)..=(p.0, o.0, u64::MAX))
            .map_err(db_err)?
        {
            let (_, v) = e.map_err(db_err)?;
            n += BlockEntry::decode(v.value())
                .map_err(|e| DriveError::Corrupt(e.to_string()))?
                .meta
                .metadata_bytes() as u64;
        }
        for e in nodes
            .range((p.0, o.0, 0, 0)..=(p.0, o.0, u8::MAX, u64::MAX))
            .map_err(db_err)?
        {
            n += e.map_err(db_err)?.1.value().len() as u64;
        }
        Ok(n)
    }

    /// Test hook: blocks never used yet (from `next_phys`) and blocks free for reuse.
    pub fn free_blocks(&self) -> (u64, usize) {
        let next = self.state.read().drive.next_phys;
        let mut a = self.alloc.lock();
        a.release();
        (next, a.free.len())
    }

    /// Test and fault-injection hook: the physical block holding `(p, o, block)`.
    pub fn physical_block(&self, p: PartitionId, o: ObjectId, block: u64) -> R<Option<u64>> {
        let r = self.db().begin_read().map_err(db_err)?;
        let t = r.open_table(BLOCKS).map_err(db_err)?;
        Ok(match t.get((p.0, o.0, block)).map_err(db_err)? {
            Some(v) => Some(
                BlockEntry::decode(v.value())
                    .map_err(|e| DriveError::Corrupt(e.to_string()))?
                    .phys,
            ),
            None => None,
        })
    }

    /// Test and fault-injection hook: flips a bit in the stored integrity metadata of a block.
    pub fn corrupt_metadata(&self, p: PartitionId, o: ObjectId, block: u64) -> R<()> {
        let w = self.db().begin_write().map_err(db_err)?;
        {
            let mut t = w.open_table(BLOCKS).map_err(db_err)?;
            let mut e = match t.get((p.0, o.0, block)).map_err(db_err)? {
                Some(v) => {
                    BlockEntry::decode(v.value()).map_err(|e| DriveError::Corrupt(e.to_string()))?
                }
                None => return Err(DriveError::NoSuchObject(p, o)),
            };
            match &mut e.meta {
                BlockMeta::Digest(d) | BlockMeta::Sum(d) => d[0] ^= 1,
                BlockMeta::Leaves(l) => l[0][0] ^= 1,
                BlockMeta::None => e.crc ^= 1,
            }
            t.insert((p.0, o.0, block), e.encode().as_slice())
                .map_err(db_err)?;
        }
        self.tree_cache.begin_change(&[(p.0, o.0)]);
        let r = w.commit().map_err(db_err);
        self.tree_cache.end_change(&[(p.0, o.0)]);
        r?;
        Ok(())
    }
}

/// Complete tree nodes for one object: stored nodes at [`STORED_TREE_LEVEL_MIN`] and above
/// (absent means an all-zero subtree), merged from block entries' leaves below it.
pub struct NodeSource<'a, B: ReadableTable<(u16, u64, u64), &'static [u8]>> {
    suite: Suite,
    p: u16,
    o: u64,
    size: u64,
    blocks: &'a B,
    /// Where stored nodes come from: opened on the first miss, so reads the cache answers
    /// never open the table.
    txn: Option<&'a redb::ReadTransaction>,
    nodes: Option<NodesTable>,
    leaves: HashMap<u64, Vec<Digest>>,
    cache: Option<(&'a crate::tree_cache::TreeCache, u64)>,
    fresh: Vec<((u32, u64), Digest)>,
}

impl<'a, B> NodeSource<'a, B>
where
    B: ReadableTable<(u16, u64, u64), &'static [u8]>,
{
    pub fn new(
        suite: Suite,
        p: PartitionId,
        o: ObjectId,
        size: u64,
        blocks: &'a B,
        txn: Option<&'a redb::ReadTransaction>,
    ) -> Self {
        Self {
            suite,
            p: p.0,
            o: o.0,
            size,
            blocks,
            txn,
            nodes: None,
            leaves: HashMap::new(),
            cache: None,
            fresh: vec![],
        }
    }

    /// Uses and fills `cache` for nodes of a snapshot taken when the object was at `version`.
    pub fn with_cache(mut self, cache: &'a crate::tree_cache::TreeCache, version: u64) -> Self {
        self.cache = Some((cache, version));
        self
    }

    /// Hands the nodes computed so far to the cache.
    pub fn flush_cache(&mut self) {
        if let Some((c, v)) = self.cache {
            c.put((self.p, self.o), v, std::mem::take(&mut self.fresh));
        }
    }

    /// The leaves of block `b` (holes: `Z0`, or the leaf of a partial zero chunk at the end).
    fn block_leaves(&mut self, b: u64) -> R<&Vec<Digest>> {
        if !self.leaves.contains_key(&b) {
            let blen = block_len(self.size, b);
            let nchunks = blen.div_ceil(CHUNK_BYTES);
            let v = match self.blocks.get((self.p, self.o, b)).map_err(db_err)? {
                Some(v) => match BlockEntry::decode(v.value())
                    .map_err(|e| DriveError::Corrupt(e.to_string()))?
                    .meta
                {
                    BlockMeta::Leaves(l) if l.len() as u64 == nchunks => l,
                    _ => {
                        return Err(DriveError::Corrupt(format!(
                            "tree leaves of block {b} do not match the object size"
                        )))
                    }
                },
                None => (0..nchunks)
                    .map(|j| {
                        let len = (blen - j * CHUNK_BYTES).min(CHUNK_BYTES);
                        tree::leaf(
                            self.suite,
                            b * CHUNKS_PER_BLOCK + j,
                            &vec![0u8; len as usize],
                            &mut Cost::default(),
                        )
                    })
                    .collect(),
            };
            self.leaves.insert(b, v);
        }
        Ok(&self.leaves[&b])
    }

    /// A complete node from the stored nodes (levels >= 7) or merged from leaves.
    fn complete_uncached(&mut self, level: u32, index: u64) -> R<Digest> {
        if level >= STORED_TREE_LEVEL_MIN {
            if let (None, Some(txn)) = (&self.nodes, self.txn) {
                self.nodes = Some(txn.open_table(NODES).map_err(db_err)?);
            }
            if let Some(nodes) = &self.nodes {
                return match nodes
                    .get((self.p, self.o, level as u8, index))
                    .map_err(db_err)?
                {
                    Some(v) => v
                        .value()
                        .try_into()
                        .map_err(|_| DriveError::Corrupt("tree node length".into())),
                    None => Ok(tree::zero(self.suite, level)),
                };
            }
        }
        self.from_leaves(level, index)
    }

    /// A complete node computed from leaves, whatever its level.
    pub fn from_leaves(&mut self, level: u32, index: u64) -> R<Digest> {
        let lo = index << level;
        let hi = lo + (1u64 << level);
        let mut leaves = Vec::with_capacity((hi - lo) as usize);
        let mut c = lo;
        while c < hi {
            let b = c / CHUNKS_PER_BLOCK;
            let l = self.block_leaves(b)?;
            let j = (c - b * CHUNKS_PER_BLOCK) as usize;
            let take = ((hi - c) as usize).min(l.len() - j);
            leaves.extend_from_slice(&l[j..j + take]);
            c += take as u64;
            if take == 0 {
                return Err(DriveError::Corrupt(
                    "tree node beyond the object's end".into(),
                ));
            }
        }
        Ok(tree::subtree(self.suite, &leaves))
    }
}

impl<B> tree::CompleteNodes for NodeSource<'_, B>
where
    B: ReadableTable<(u16, u64, u64), &'static [u8]>,
{
    type Error = DriveError;
    fn complete(&mut self, level: u32, index: u64) -> R<Digest> {
        if let Some((c, v)) = self.cache {
            if let Some(d) = c.get((self.p, self.o), v, level, index) {
                return Ok(d);
            }
        }
        let d = self.complete_uncached(level, index)?;
        if self.cache.is_some() {
            self.fresh.push(((level, index), d));
        }
        Ok(d)
    }
}
