//! The write path: every mutation of the store is a [`Job`] run by one writer thread inside a
//! redb write transaction ([`Tx`]). Jobs validate before they change anything and return
//! [`JobError::Refused`] if they cannot proceed; a failure after a change began aborts the
//! whole transaction. See `store.rs` for the durability argument.

use crate::records::{BlockEntry, ObjectRecord, PartitionRecord};
use crate::store::{
    block_len, db_err, Cached, NodeSource, Store, BLOCKS, DRIVE, FREE, NODES, OBJECTS, PARTITIONS,
    R, REFS, STORED_TREE_LEVEL_MIN,
};
use crate::{now_us, DriveError};
use nasd_crypto::integrity::pieces::PieceHash;
use nasd_crypto::integrity::{
    self, adhash, tree, BlockMeta, BLOCK_BYTES, CHUNKS_PER_BLOCK, CHUNK_BYTES, SUB_BLOCK_BYTES,
};
use nasd_crypto::{Cost, Digest, Key};
use nasd_proto::{AttrMask, Attributes, ObjectId, PartitionId, Protection, Region, Scheme};
use redb::{ReadableTable, WriteTransaction};
use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc;
use std::sync::Arc;

pub use nasd_proto::OBJECT_BYTES_MAX;

/// A mutation of the store.
pub enum Job {
    CreatePartition {
        p: PartitionId,
        quota_bytes: u64,
        scheme: Scheme,
    },
    RemovePartition {
        p: PartitionId,
        force: bool,
    },
    ResizePartition {
        p: PartitionId,
        quota_bytes: u64,
    },
    SetPartitionKey {
        p: PartitionId,
        key: Key,
    },
    SetWorkingKey {
        p: PartitionId,
        key: Key,
    },
    SetMinProtection {
        p: Option<PartitionId>,
        protection: Protection,
    },
    SetDriveKey {
        key: Key,
    },
    Create {
        p: PartitionId,
        scheme: Option<Scheme>,
        mask: AttrMask,
        attrs: Box<Attributes>,
    },
    Remove {
        p: PartitionId,
        o: ObjectId,
    },
    SetAttr {
        p: PartitionId,
        o: ObjectId,
        mask: AttrMask,
        attrs: Box<Attributes>,
    },
    Write {
        p: PartitionId,
        o: ObjectId,
        regions: Vec<Region>,
        /// The buffer holding the data, from byte `data_at` on (the request body as received,
        /// so the data is not copied on its way to the writer).
        data: Vec<u8>,
        data_at: usize,
        /// Scheme whose write form `pieces` are in; reused as metadata when it is the object's.
        form: Scheme,
        pieces: Vec<Vec<PieceHash>>,
        write_back: bool,
    },
    FastCopy {
        p: PartitionId,
        o: ObjectId,
    },
    /// Makes every earlier write durable (seed 002 Table 1 `flush`, Table 2 `flushpartition`).
    Flush,
}

impl Job {
    fn data_bytes(&self) -> usize {
        match self {
            Job::Write { data, data_at, .. } => data.len() - data_at,
            _ => 0,
        }
    }
    fn write_back(&self) -> bool {
        matches!(
            self,
            Job::Write {
                write_back: true,
                ..
            }
        )
    }
}

/// What a job returns.
#[derive(Debug)]
pub enum JobOut {
    Done,
    Object(ObjectId, ObjectRecord),
    Attrs(ObjectRecord),
    Written {
        bytes: u64,
        scheme: Scheme,
        logical_size: u64,
        cost: Cost,
    },
}

pub enum JobError {
    /// Nothing was changed; the rest of the batch can go on.
    Refused(DriveError),
    /// Something may have been changed; the transaction must be aborted.
    Abort(DriveError),
}

impl From<std::io::Error> for JobError {
    fn from(e: std::io::Error) -> Self {
        JobError::Abort(DriveError::Io(e))
    }
}

impl From<DriveError> for JobError {
    fn from(e: DriveError) -> Self {
        JobError::Abort(e)
    }
}

type JR<T> = Result<T, JobError>;

fn refuse<T>(e: DriveError) -> JR<T> {
    Err(JobError::Refused(e))
}

/// One write transaction and what it allocated and freed.
pub(crate) struct Tx<'a> {
    store: &'a Store,
    w: WriteTransaction,
    state: Cached,
    from_free: Vec<u64>,
    freed: Vec<u64>,
    wrote_data: bool,
    now: u64,
    /// Objects whose block map or tree changed: their cached tree nodes die at commit.
    changed: BTreeSet<(u16, u64)>,
}

impl<'a> Tx<'a> {
    fn begin(store: &'a Store) -> R<Tx<'a>> {
        let w = store.db.begin_write().map_err(db_err)?;
        Ok(Tx {
            store,
            w,
            state: store.state.read().clone(),
            from_free: vec![],
            freed: vec![],
            wrote_data: false,
            now: now_us(),
            changed: BTreeSet::new(),
        })
    }

    fn commit(self, durable: bool) -> R<()> {
        let Tx {
            store,
            mut w,
            state,
            freed,
            wrote_data,
            changed,
            ..
        } = self;
        {
            let mut d = w.open_table(DRIVE).map_err(db_err)?;
            d.insert("drive", state.drive.encode().as_slice())
                .map_err(db_err)?;
            let mut pt = w.open_table(PARTITIONS).map_err(db_err)?;
            let existing: Vec<u16> = pt
                .iter()
                .map_err(db_err)?
                .map(|e| e.map(|(k, _)| k.value()))
                .collect::<Result<_, _>>()
                .map_err(db_err)?;
            for k in existing {
                if !state.partitions.contains_key(&k) {
                    pt.remove(k).map_err(db_err)?;
                }
            }
            for (k, v) in &state.partitions {
                pt.insert(*k, v.encode().as_slice()).map_err(db_err)?;
            }
        }
        if durable {
            if wrote_data {
                store.data.sync()?;
            }
        } else {
            w.set_durability(redb::Durability::None).map_err(db_err)?;
        }
        let changed: Vec<(u16, u64)> = changed.into_iter().collect();
        store.tree_cache.begin_change(&changed);
        let committed = w.commit().map_err(db_err);
        store.tree_cache.end_change(&changed);
        committed?;
        let mut a = store.alloc.lock();
        a.epoch += 1;
        let e = a.epoch;
        if !freed.is_empty() {
            a.quarantine.push((e, freed));
        }
        drop(a);
        *store.state.write() = state;
        Ok(())
    }

    fn abort(self) {
        let Tx {
            store,
            w,
            from_free,
            ..
        } = self;
        drop(w);
        store.alloc.lock().free.extend(from_free);
    }

    fn capacity_blocks(&self) -> u64 {
        self.state.drive.capacity_bytes / BLOCK_BYTES
    }

    /// Whether `n` more blocks can be allocated now.
    fn can_alloc(&self, n: u64) -> bool {
        let mut a = self.store.alloc.lock();
        a.release();
        let fresh = self
            .capacity_blocks()
            .saturating_sub(self.state.drive.next_phys);
        a.free.len() as u64 + fresh >= n
    }

    fn alloc(&mut self) -> R<u64> {
        let from_free = {
            let mut a = self.store.alloc.lock();
            a.release();
            a.free.pop_first()
        };
        if let Some(b) = from_free {
            self.from_free.push(b);
            self.w
                .open_table(FREE)
                .map_err(db_err)?
                .remove(b)
                .map_err(db_err)?;
            return Ok(b);
        }
        if self.state.drive.next_phys >= self.capacity_blocks() {
            return Err(DriveError::DiskFull);
        }
        let end = (self.state.drive.next_phys + 1) * BLOCK_BYTES;
        let reserved = self.store.alloc.lock().reserved_bytes;
        if end > reserved {
            let want =
                (end + crate::store::DATA_GROW_BYTES).min(self.capacity_blocks() * BLOCK_BYTES);
            self.store.data.reserve(want)?;
            self.store.alloc.lock().reserved_bytes = want;
        }
        self.state.drive.next_phys += 1;
        Ok(self.state.drive.next_phys - 1)
    }

    fn free(&mut self, phys: u64) -> R<()> {
        self.w
            .open_table(FREE)
            .map_err(db_err)?
            .insert(phys, ())
            .map_err(db_err)?;
        self.freed.push(phys);
        Ok(())
    }

    fn partition(&mut self, p: PartitionId) -> Result<&mut PartitionRecord, DriveError> {
        self.state
            .partitions
            .get_mut(&p.0)
            .ok_or(DriveError::NoSuchPartition(p))
    }

    fn get_object(&self, p: PartitionId, o: ObjectId) -> R<Option<ObjectRecord>> {
        let t = self.w.open_table(OBJECTS).map_err(db_err)?;
        let v = t.get((p.0, o.0)).map_err(db_err)?;
        match v {
            Some(v) => {
                Ok(Some(ObjectRecord::decode(v.value()).map_err(|e| {
                    DriveError::Corrupt(format!("object record: {e}"))
                })?))
            }
            None => Ok(None),
        }
    }

    fn put_object(
        &mut self,
        p: PartitionId,
        o: ObjectId,
        rec: &mut ObjectRecord,
        cost: &mut Cost,
    ) -> R<()> {
        rec.attr_digest =
            nasd_crypto::primitives::attr_digest(self.state.drive.suite, &rec.attrs.encode(), cost);
        self.w
            .open_table(OBJECTS)
            .map_err(db_err)?
            .insert((p.0, o.0), rec.encode().as_slice())
            .map_err(db_err)?;
        Ok(())
    }

    fn get_entry(&self, p: PartitionId, o: ObjectId, b: u64) -> R<Option<BlockEntry>> {
        let t = self.w.open_table(BLOCKS).map_err(db_err)?;
        let v = t.get((p.0, o.0, b)).map_err(db_err)?;
        match v {
            Some(v) => {
                Ok(Some(BlockEntry::decode(v.value()).map_err(|e| {
                    DriveError::Corrupt(format!("block entry: {e}"))
                })?))
            }
            None => Ok(None),
        }
    }

    fn put_entry(&mut self, p: PartitionId, o: ObjectId, b: u64, e: &BlockEntry) -> R<()> {
        self.changed.insert((p.0, o.0));
        self.w
            .open_table(BLOCKS)
            .map_err(db_err)?
            .insert((p.0, o.0, b), e.encode().as_slice())
            .map_err(db_err)?;
        Ok(())
    }

    fn is_shared(&self, phys: u64) -> R<bool> {
        Ok(self
            .w
            .open_table(REFS)
            .map_err(db_err)?
            .get(phys)
            .map_err(db_err)?
            .is_some())
    }

    /// Drops `(p, o)`'s reference to `phys` and settles the accounting: `rec` (when given) is
    /// uncharged if it was charged for the block; the partition is uncharged only when the
    /// block is freed; when others still share it, the charge moves to the next referencer.
    fn release(
        &mut self,
        p: PartitionId,
        o: ObjectId,
        phys: u64,
        rec: Option<&mut ObjectRecord>,
        cost: &mut Cost,
    ) -> R<()> {
        let (charged, freed) = self.drop_ref(p, o, phys, cost)?;
        if let (true, Some(rec)) = (charged, rec) {
            rec.attrs.blocks_used -= 1;
        }
        if freed {
            let part = self.partition(p)?;
            part.used_blocks = part.used_blocks.saturating_sub(1);
        }
        Ok(())
    }

    /// Charges a newly allocated block to `rec` and its partition.
    fn charge_new(&mut self, p: PartitionId, rec: &mut ObjectRecord) -> R<()> {
        rec.attrs.blocks_used += 1;
        self.partition(p)?.used_blocks += 1;
        Ok(())
    }

    /// Returns (whether `(p, o)` was charged for `phys`, whether `phys` was freed).
    fn drop_ref(
        &mut self,
        p: PartitionId,
        o: ObjectId,
        phys: u64,
        cost: &mut Cost,
    ) -> R<(bool, bool)> {
        let list = self
            .w
            .open_table(REFS)
            .map_err(db_err)?
            .get(phys)
            .map_err(db_err)?
            .map(|v| decode_refs(v.value()));
        let Some(mut list) = list else {
            self.free(phys)?;
            return Ok((true, true));
        };
        let was_first = list.first() == Some(&(p.0, o.0));
        list.retain(|r| *r != (p.0, o.0));
        if was_first {
            if let Some(&(np, no)) = list.first() {
                let (np, no) = (PartitionId(np), ObjectId(no));
                if let Some(mut rec) = self.get_object(np, no)? {
                    rec.attrs.blocks_used += 1;
                    self.put_object(np, no, &mut rec, cost)?;
                }
            }
        }
        let mut t = self.w.open_table(REFS).map_err(db_err)?;
        if list.len() <= 1 {
            t.remove(phys).map_err(db_err)?;
        } else {
            t.insert(phys, encode_refs(&list).as_slice())
                .map_err(db_err)?;
        }
        Ok((was_first, false))
    }

    fn run(&mut self, job: &Job) -> JR<JobOut> {
        match job {
            Job::CreatePartition {
                p,
                quota_bytes,
                scheme,
            } => {
                if self.state.partitions.contains_key(&p.0) {
                    return refuse(DriveError::PartitionExists(*p));
                }
                self.state
                    .partitions
                    .insert(p.0, PartitionRecord::new(*quota_bytes, *scheme));
                // Table 4: every partition starts with an empty First Object.
                let mut rec = self.new_object_record(*scheme);
                self.put_object(*p, ObjectId::FIRST_OBJECT, &mut rec, &mut Cost::default())?;
                self.partition(*p)?.objects += 1;
                Ok(JobOut::Done)
            }
            Job::RemovePartition { p, force } => {
                let part = match self.state.partitions.get(&p.0) {
                    Some(x) => x.clone(),
                    None => return refuse(DriveError::NoSuchPartition(*p)),
                };
                let objects: Vec<u64> = {
                    let t = self.w.open_table(OBJECTS).map_err(db_err)?;
                    let r = t.range((p.0, 0)..=(p.0, u64::MAX)).map_err(db_err)?;
                    r.map(|e| e.map(|(k, _)| k.value().1))
                        .collect::<Result<_, _>>()
                        .map_err(db_err)?
                };
                if !force && objects.iter().any(|&o| o != ObjectId::FIRST_OBJECT.0) {
                    return refuse(DriveError::PartitionNotEmpty(*p, part.objects));
                }
                for o in objects {
                    self.remove_object(*p, ObjectId(o))?;
                }
                self.state.partitions.remove(&p.0);
                Ok(JobOut::Done)
            }
            Job::ResizePartition { p, quota_bytes } => {
                let part = self.partition(*p).map_err(JobError::Refused)?;
                if part.used_blocks * BLOCK_BYTES > *quota_bytes {
                    return refuse(DriveError::QuotaExceeded(*p));
                }
                part.quota_bytes = *quota_bytes;
                Ok(JobOut::Done)
            }
            Job::SetPartitionKey { p, key } => {
                self.partition(*p).map_err(JobError::Refused)?.partition_key = Some(key.clone());
                Ok(JobOut::Done)
            }
            Job::SetWorkingKey { p, key } => {
                let part = self.partition(*p).map_err(JobError::Refused)?;
                // Table 6: the current key becomes the previous one, so capabilities minted under
                // it keep working until they expire (graceful rotation).
                part.working_previous = part.working_current.take();
                part.working_current = Some(key.clone());
                Ok(JobOut::Done)
            }
            Job::SetMinProtection { p, protection } => {
                match p {
                    Some(p) => {
                        self.partition(*p)
                            .map_err(JobError::Refused)?
                            .min_protection = *protection
                    }
                    None => self.state.drive.min_protection = *protection,
                }
                Ok(JobOut::Done)
            }
            Job::SetDriveKey { key } => {
                self.state.drive.drive_key = Some(key.clone());
                Ok(JobOut::Done)
            }
            Job::Create {
                p,
                scheme,
                mask,
                attrs,
            } => {
                let part = self.partition(*p).map_err(JobError::Refused)?;
                let scheme = scheme.unwrap_or(part.default_scheme);
                let id = ObjectId(part.next_object);
                part.next_object += 1;
                part.objects += 1;
                let mut rec = self.new_object_record(scheme);
                let mut cost = Cost::default();
                let size = if mask.has(AttrMask::LOGICAL_SIZE) {
                    attrs.logical_size
                } else {
                    0
                };
                if size > OBJECT_BYTES_MAX {
                    return refuse(DriveError::Invalid("size above the object maximum".into()));
                }
                apply_mask(&mut rec.attrs, *mask, attrs);
                rec.attrs.logical_size = size;
                self.put_object(*p, id, &mut rec, &mut cost)?;
                if size > 0 && scheme == Scheme::Tree {
                    self.refresh_tree(*p, id, 0, size, &BTreeSet::new())?;
                }
                Ok(JobOut::Object(id, rec))
            }
            Job::Remove { p, o } => {
                if self.get_object(*p, *o)?.is_none() {
                    return refuse(DriveError::NoSuchObject(*p, *o));
                }
                self.remove_object(*p, *o)?;
                Ok(JobOut::Done)
            }
            Job::SetAttr { p, o, mask, attrs } => self.setattr(*p, *o, *mask, attrs),
            Job::Write {
                p,
                o,
                regions,
                data,
                data_at,
                form,
                pieces,
                ..
            } => self.write(*p, *o, regions, &data[*data_at..], *form, pieces),
            Job::FastCopy { p, o } => self.fastcopy(*p, *o),
            Job::Flush => Ok(JobOut::Done),
        }
    }

    fn new_object_record(&self, scheme: Scheme) -> ObjectRecord {
        let now = self.now;
        ObjectRecord {
            attrs: Attributes {
                block_size: BLOCK_BYTES as u32,
                create_time_us: now,
                data_modify_time_us: now,
                attribute_modify_time_us: now,
                fs_data_modify_time_us: now,
                fs_attribute_modify_time_us: now,
                scheme,
                ..Attributes::default()
            },
            attr_digest: [0; 32],
        }
    }

    fn object_blocks(&self, p: PartitionId, o: ObjectId, from: u64) -> R<Vec<(u64, BlockEntry)>> {
        let t = self.w.open_table(BLOCKS).map_err(db_err)?;
        let mut v = vec![];
        for e in t
            .range((p.0, o.0, from)..=(p.0, o.0, u64::MAX))
            .map_err(db_err)?
        {
            let (k, val) = e.map_err(db_err)?;
            v.push((
                k.value().2,
                BlockEntry::decode(val.value()).map_err(|e| DriveError::Corrupt(e.to_string()))?,
            ));
        }
        Ok(v)
    }

    fn remove_object(&mut self, p: PartitionId, o: ObjectId) -> R<()> {
        self.changed.insert((p.0, o.0));
        let mut cost = Cost::default();
        for (b, e) in self.object_blocks(p, o, 0)? {
            self.release(p, o, e.phys, None, &mut cost)?;
            self.w
                .open_table(BLOCKS)
                .map_err(db_err)?
                .remove((p.0, o.0, b))
                .map_err(db_err)?;
        }
        self.w
            .open_table(NODES)
            .map_err(db_err)?
            .retain_in((p.0, o.0, 0, 0)..=(p.0, o.0, u8::MAX, u64::MAX), |_, _| {
                false
            })
            .map_err(db_err)?;
        self.w
            .open_table(OBJECTS)
            .map_err(db_err)?
            .remove((p.0, o.0))
            .map_err(db_err)?;
        let part = self.partition(p)?;
        part.objects = part.objects.saturating_sub(1);
        Ok(())
    }

    fn setattr(
        &mut self,
        p: PartitionId,
        o: ObjectId,
        mask: AttrMask,
        attrs: &Attributes,
    ) -> JR<JobOut> {
        let Some(mut rec) = self.get_object(p, o)? else {
            return refuse(DriveError::NoSuchObject(p, o));
        };
        if mask.has(AttrMask::LOGICAL_SIZE) && attrs.logical_size > OBJECT_BYTES_MAX {
            return refuse(DriveError::Invalid("size above the object maximum".into()));
        }
        if mask.has(AttrMask::BLOCKS_ALLOCATED) {
            let part = self.partition(p).map_err(JobError::Refused)?;
            let extra = attrs.blocks_allocated.saturating_sub(rec.attrs.blocks_used);
            if (part.used_blocks + extra) * BLOCK_BYTES > part.quota_bytes {
                return refuse(DriveError::QuotaExceeded(p));
            }
        }
        let mut cost = Cost::default();
        if mask.has(AttrMask::LOGICAL_SIZE) && attrs.logical_size != rec.attrs.logical_size {
            let (old, new) = (rec.attrs.logical_size, attrs.logical_size);
            self.resize(p, o, &mut rec, old, new, &mut cost)?;
        }
        apply_mask(&mut rec.attrs, mask, attrs);
        rec.attrs.attribute_modify_time_us = self.now;
        if !mask.has(AttrMask::FS_ATTRIBUTE_MODIFY_TIME) {
            rec.attrs.fs_attribute_modify_time_us = self.now;
        }
        self.put_object(p, o, &mut rec, &mut cost)?;
        Ok(JobOut::Attrs(rec))
    }

    /// Truncates or extends; the old and new last blocks get their metadata recomputed, and a
    /// truncated last block has its tail zeroed so a later extension reads zeros.
    fn resize(
        &mut self,
        p: PartitionId,
        o: ObjectId,
        rec: &mut ObjectRecord,
        old: u64,
        new: u64,
        cost: &mut Cost,
    ) -> R<()> {
        self.changed.insert((p.0, o.0));
        let suite = self.state.drive.suite;
        let scheme = rec.attrs.scheme;
        let keep_blocks = new.div_ceil(BLOCK_BYTES);
        for (b, e) in self.object_blocks(p, o, keep_blocks)? {
            self.release(p, o, e.phys, Some(rec), cost)?;
            self.w
                .open_table(BLOCKS)
                .map_err(db_err)?
                .remove((p.0, o.0, b))
                .map_err(db_err)?;
        }
        let mut dirty = BTreeSet::new();
        for b in [
            old.div_ceil(BLOCK_BYTES).saturating_sub(1),
            keep_blocks.saturating_sub(1),
        ] {
            if b >= keep_blocks || dirty.contains(&b) {
                continue;
            }
            let Some(e) = self.get_entry(p, o, b)? else {
                continue;
            };
            let mut buf = self.store.load_checked(&e)?;
            let len = block_len(new, b) as usize;
            buf[len..].fill(0);
            let meta = integrity::block_meta(suite, scheme, b, &buf[..len], cost);
            let phys = self.alloc()?;
            self.store.data.write(phys * BLOCK_BYTES, &buf)?;
            self.wrote_data = true;
            self.release(p, o, e.phys, Some(rec), cost)?;
            self.charge_new(p, rec)?;
            self.put_entry(
                p,
                o,
                b,
                &BlockEntry {
                    phys,
                    crc: crc32c::crc32c(&buf),
                    meta,
                },
            )?;
            dirty.insert(b);
        }
        rec.attrs.logical_size = new;
        if scheme == Scheme::Tree {
            self.refresh_tree(p, o, old, new, &dirty)?;
        }
        Ok(())
    }

    fn write(
        &mut self,
        p: PartitionId,
        o: ObjectId,
        regions: &[Region],
        data: &[u8],
        form: Scheme,
        pieces: &[Vec<PieceHash>],
    ) -> JR<JobOut> {
        let Some(mut rec) = self.get_object(p, o)? else {
            return refuse(DriveError::NoSuchObject(p, o));
        };
        let suite = self.state.drive.suite;
        let scheme = rec.attrs.scheme;
        let old_size = rec.attrs.logical_size;
        let mut new_size = old_size;
        let mut touched = BTreeSet::new();
        for r in regions {
            let end = match r.end() {
                Some(e) if e <= OBJECT_BYTES_MAX => e,
                _ => {
                    return refuse(DriveError::Invalid(
                        "write beyond the object maximum".into(),
                    ))
                }
            };
            if r.len > 0 {
                new_size = new_size.max(end);
                touched.extend(r.offset / BLOCK_BYTES..=(end - 1) / BLOCK_BYTES);
            }
        }
        // Validate before changing anything: quota, capacity, and the old contents we merge.
        let mut charge = 0u64;
        let mut olds = HashMap::new();
        for &b in &touched {
            let e = self.get_entry(p, o, b)?;
            match &e {
                None => charge += 1,
                Some(e) if self.is_shared(e.phys)? => charge += 1,
                _ => {}
            }
            olds.insert(b, e);
        }
        {
            let part = self.partition(p).map_err(JobError::Refused)?;
            if (part.used_blocks + charge) * BLOCK_BYTES > part.quota_bytes {
                return refuse(DriveError::QuotaExceeded(p));
            }
        }
        if !self.can_alloc(touched.len() as u64 + 1) {
            return refuse(DriveError::DiskFull);
        }
        // Assemble each touched block's new content (old bytes where not overwritten).
        let mut bufs: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut covered: HashMap<u64, u64> = HashMap::new();
        for r in regions.iter() {
            for pc in integrity::pieces::split(r.offset, r.len, BLOCK_BYTES) {
                *covered.entry(pc.unit).or_default() += pc.len;
            }
        }
        for &b in &touched {
            let full = covered.get(&b).copied().unwrap_or(0) >= BLOCK_BYTES;
            let buf = match (&olds[&b], full) {
                (Some(e), false) => match self.store.load_checked(e) {
                    Ok(v) => v,
                    Err(e) => return refuse(e),
                },
                _ => vec![0u8; BLOCK_BYTES as usize],
            };
            bufs.insert(b, buf);
        }
        let mut at = 0usize;
        for r in regions {
            for pc in integrity::pieces::split(r.offset, r.len, BLOCK_BYTES) {
                let within = (pc.offset - pc.unit * BLOCK_BYTES) as usize;
                let buf = bufs.get_mut(&pc.unit).expect("touched");
                buf[within..within + pc.len as usize]
                    .copy_from_slice(&data[at..at + pc.len as usize]);
                at += pc.len as usize;
            }
        }
        // Hashes the client sent that are exactly the new stored metadata.
        let mut reuse: HashMap<u64, Option<PieceHash>> = HashMap::new();
        if form == scheme {
            for ph in pieces.iter().flatten() {
                reuse
                    .entry(ph.piece.unit)
                    .and_modify(|e| *e = None)
                    .or_insert(Some(*ph));
            }
        }
        let mut cost = Cost::default();
        // Blocks whose logical length changes without being written: the old last block.
        let mut refresh = BTreeSet::new();
        if new_size > old_size && old_size % BLOCK_BYTES != 0 {
            let b = old_size / BLOCK_BYTES;
            if !touched.contains(&b) {
                refresh.insert(b);
            }
        }
        // From here on, changes are made.
        for &b in &touched {
            let buf = &bufs[&b];
            let logical = &buf[..block_len(new_size, b) as usize];
            let old = olds[&b].clone();
            let old_len = block_len(old_size, b) as usize;
            let meta = self.meta_for(
                suite,
                scheme,
                b,
                logical,
                &reuse,
                old.as_ref(),
                old_len,
                regions,
                &mut cost,
            )?;
            let phys = self.alloc()?;
            self.store.data.write(phys * BLOCK_BYTES, buf)?;
            self.wrote_data = true;
            if let Some(old) = old {
                self.release(p, o, old.phys, Some(&mut rec), &mut cost)?;
            }
            self.charge_new(p, &mut rec)?;
            self.put_entry(
                p,
                o,
                b,
                &BlockEntry {
                    phys,
                    crc: crc32c::crc32c(buf),
                    meta,
                },
            )?;
        }
        for &b in &refresh {
            if let Some(mut e) = self.get_entry(p, o, b)? {
                let buf = self.store.load_checked(&e)?;
                e.meta = integrity::block_meta(
                    suite,
                    scheme,
                    b,
                    &buf[..block_len(new_size, b) as usize],
                    &mut cost,
                );
                self.put_entry(p, o, b, &e)?;
            }
        }
        rec.attrs.logical_size = new_size;
        rec.attrs.data_modify_time_us = self.now;
        rec.attrs.fs_data_modify_time_us = self.now;
        if scheme == Scheme::Tree {
            let dirty: BTreeSet<u64> = touched.union(&refresh).copied().collect();
            self.refresh_tree(p, o, old_size, new_size, &dirty)?;
        }
        self.put_object(p, o, &mut rec, &mut cost)?;
        Ok(JobOut::Written {
            bytes: data.len() as u64,
            scheme,
            logical_size: new_size,
            cost,
        })
    }

    /// New metadata for a written block, reusing the client's verified piece hashes where they
    /// are exactly what is stored and hashing only the rest (seed 000 §3.4.3, Fig 7).
    #[allow(clippy::too_many_arguments)]
    fn meta_for(
        &self,
        suite: nasd_proto::Suite,
        scheme: Scheme,
        b: u64,
        logical: &[u8],
        reuse: &HashMap<u64, Option<PieceHash>>,
        old: Option<&BlockEntry>,
        old_len: usize,
        regions: &[Region],
        cost: &mut Cost,
    ) -> R<BlockMeta> {
        let bstart = b * BLOCK_BYTES;
        let exact = |unit: u64, start: u64, len: u64| -> Option<Digest> {
            match reuse.get(&unit) {
                Some(Some(ph)) if ph.piece.offset == start && ph.piece.len == len => Some(ph.value),
                _ => None,
            }
        };
        Ok(match scheme {
            Scheme::Mac => BlockMeta::None,
            Scheme::Digest => match exact(b, bstart, logical.len() as u64) {
                Some(d) => BlockMeta::Digest(d),
                None => integrity::block_meta(suite, scheme, b, logical, cost),
            },
            Scheme::Tree => {
                // A chunk no region touched, whose length did not change, keeps its old leaf:
                // only touched chunks are rehashed (DESIGN.md: "rehash touched chunks").
                let old_leaves = match old {
                    Some(BlockEntry {
                        meta: BlockMeta::Leaves(l),
                        ..
                    }) => l.as_slice(),
                    _ => &[],
                };
                BlockMeta::Leaves(
                    logical
                        .chunks(CHUNK_BYTES as usize)
                        .enumerate()
                        .map(|(j, c)| {
                            let i = b * CHUNKS_PER_BLOCK + j as u64;
                            let (lo, hi) = (i * CHUNK_BYTES, i * CHUNK_BYTES + c.len() as u64);
                            let old_chunk_len = old_len
                                .saturating_sub(j * CHUNK_BYTES as usize)
                                .min(CHUNK_BYTES as usize);
                            let touched = regions
                                .iter()
                                .any(|r| r.len > 0 && r.offset < hi && lo < r.offset + r.len);
                            match old_leaves.get(j) {
                                Some(l) if !touched && old_chunk_len == c.len() => *l,
                                _ => exact(i, lo, c.len() as u64)
                                    .unwrap_or_else(|| tree::leaf(suite, i, c, cost)),
                            }
                        })
                        .collect(),
                )
            }
            Scheme::Incremental => {
                let sub = SUB_BLOCK_BYTES as usize;
                let first = bstart / SUB_BLOCK_BYTES;
                let pieces: Vec<(u64, &[u8], Option<Digest>)> = logical
                    .chunks(sub)
                    .enumerate()
                    .map(|(j, x)| {
                        let i = first + j as u64;
                        (i, x, exact(i, i * SUB_BLOCK_BYTES, x.len() as u64))
                    })
                    .collect();
                let recompute: usize = pieces
                    .iter()
                    .filter(|s| s.2.is_none())
                    .map(|s| s.1.len())
                    .sum();
                // Update in place (seed 000 §3.3.1: subtract the old sub-block hash, add the new)
                // when the stored sum covers the same logical length and the changed sub-blocks
                // hash fewer bytes than recomputing every sub-block the client did not hash.
                let old_sum = match old {
                    Some(
                        e @ BlockEntry {
                            meta: BlockMeta::Sum(s),
                            ..
                        },
                    ) if old_len == logical.len() && recompute > 0 => {
                        Some((self.store.load_checked(e)?, *s))
                    }
                    _ => None,
                };
                let changed = |ob: &[u8], j: usize, x: &[u8]| ob[j * sub..j * sub + x.len()] != *x;
                let in_place: Option<usize> = old_sum.as_ref().map(|(ob, _)| {
                    pieces
                        .iter()
                        .enumerate()
                        .filter(|(j, s)| changed(ob, *j, s.1))
                        .map(|(_, s)| s.1.len() * (1 + s.2.is_none() as usize))
                        .sum()
                });
                let mut sum;
                match (old_sum, in_place) {
                    (Some((ob, s)), Some(c)) if c < recompute => {
                        sum = adhash::Sum::from_bytes(&s);
                        for (j, (i, x, h)) in pieces.iter().enumerate() {
                            if changed(&ob, j, x) {
                                sum.sub(
                                    &adhash::sub_hash(
                                        suite,
                                        *i,
                                        &ob[j * sub..j * sub + x.len()],
                                        cost,
                                    ),
                                    cost,
                                );
                                let h = h.unwrap_or_else(|| adhash::sub_hash(suite, *i, x, cost));
                                sum.add(&h, cost);
                            }
                        }
                    }
                    _ => {
                        sum = adhash::Sum::ZERO;
                        for (i, x, h) in &pieces {
                            let h = h.unwrap_or_else(|| adhash::sub_hash(suite, *i, x, cost));
                            sum.add(&h, cost);
                        }
                    }
                }
                BlockMeta::Sum(sum.to_bytes())
            }
        })
    }

    fn fastcopy(&mut self, p: PartitionId, o: ObjectId) -> JR<JobOut> {
        let Some(src) = self.get_object(p, o)? else {
            return refuse(DriveError::NoSuchObject(p, o));
        };
        let part = self.partition(p).map_err(JobError::Refused)?;
        let id = ObjectId(part.next_object);
        part.next_object += 1;
        part.objects += 1;
        for (b, e) in self.object_blocks(p, o, 0)? {
            let mut list = self
                .w
                .open_table(REFS)
                .map_err(db_err)?
                .get(e.phys)
                .map_err(db_err)?
                .map(|v| decode_refs(v.value()))
                .unwrap_or_else(|| vec![(p.0, o.0)]);
            list.push((p.0, id.0));
            self.w
                .open_table(REFS)
                .map_err(db_err)?
                .insert(e.phys, encode_refs(&list).as_slice())
                .map_err(db_err)?;
            self.put_entry(p, id, b, &e)?;
        }
        let nodes: Vec<(crate::store::NodeKey, Vec<u8>)> = {
            let t = self.w.open_table(NODES).map_err(db_err)?;
            let r = t
                .range((p.0, o.0, 0, 0)..=(p.0, o.0, u8::MAX, u64::MAX))
                .map_err(db_err)?;
            r.map(|e| e.map(|(k, v)| (k.value(), v.value().to_vec())))
                .collect::<Result<_, _>>()
                .map_err(db_err)?
        };
        {
            let mut t = self.w.open_table(NODES).map_err(db_err)?;
            for ((_, _, l, i), v) in nodes {
                t.insert((p.0, id.0, l, i), v.as_slice()).map_err(db_err)?;
            }
        }
        let mut rec = src.clone();
        let now = self.now;
        rec.attrs.copied_object = o;
        rec.attrs.blocks_used = 0;
        rec.attrs.blocks_allocated = 0;
        rec.attrs.create_time_us = now;
        rec.attrs.data_modify_time_us = now;
        rec.attrs.attribute_modify_time_us = now;
        self.put_object(p, id, &mut rec, &mut Cost::default())?;
        Ok(JobOut::Object(id, rec))
    }

    /// Recomputes the stored tree nodes (levels >= 7) over the groups of 128 chunks whose
    /// leaves changed, and their ancestors; removes nodes that are no longer complete.
    fn refresh_tree(
        &mut self,
        p: PartitionId,
        o: ObjectId,
        old: u64,
        new: u64,
        dirty_blocks: &BTreeSet<u64>,
    ) -> R<()> {
        self.changed.insert((p.0, o.0));
        let suite = self.state.drive.suite;
        let (n_old, n_new) = (tree::chunk_count(old), tree::chunk_count(new));
        let base = STORED_TREE_LEVEL_MIN;
        let group_of_block = |b: u64| (b * CHUNKS_PER_BLOCK) >> base;
        let mut dirty: BTreeSet<u64> = dirty_blocks.iter().map(|&b| group_of_block(b)).collect();
        for n in [n_old, n_new] {
            if n > 0 {
                dirty.insert((n - 1) >> base);
            }
        }
        if n_new < n_old {
            let mut t = self.w.open_table(NODES).map_err(db_err)?;
            for level in base..tree::LEVELS_MAX as u32 {
                if (n_old >> level) == 0 {
                    break;
                }
                let from = n_new >> level;
                t.retain_in(
                    (p.0, o.0, level as u8, from)..=(p.0, o.0, level as u8, u64::MAX),
                    |_, _| false,
                )
                .map_err(db_err)?;
            }
        }
        let mut level = base;
        while !dirty.is_empty() && (level as usize) < tree::LEVELS_MAX {
            let limit = n_new >> level;
            let mut values = vec![];
            for &i in &dirty {
                if i >= limit {
                    values.push((i, None));
                    continue;
                }
                let v = if level == base {
                    let blocks = self.w.open_table(BLOCKS).map_err(db_err)?;
                    let mut src = NodeSource::new(suite, p, o, new, &blocks, None);
                    src.from_leaves(level, i)?
                } else {
                    let t = self.w.open_table(NODES).map_err(db_err)?;
                    let get = |j: u64| -> R<Digest> {
                        match t.get((p.0, o.0, (level - 1) as u8, j)).map_err(db_err)? {
                            Some(v) => v
                                .value()
                                .try_into()
                                .map_err(|_| DriveError::Corrupt("tree node length".into())),
                            None => Ok(tree::zero(suite, level - 1)),
                        }
                    };
                    tree::merge(suite, &get(2 * i)?, &get(2 * i + 1)?)
                };
                values.push((i, Some(v)));
            }
            {
                let mut t = self.w.open_table(NODES).map_err(db_err)?;
                for (i, v) in values {
                    match v {
                        Some(v) if v != tree::zero(suite, level) => {
                            t.insert((p.0, o.0, level as u8, i), v.as_slice())
                                .map_err(db_err)?;
                        }
                        _ => {
                            t.remove((p.0, o.0, level as u8, i)).map_err(db_err)?;
                        }
                    }
                }
            }
            if (n_new >> level) <= 1 && (n_old >> level) <= 1 {
                break;
            }
            dirty = dirty.iter().map(|i| i / 2).collect();
            level += 1;
        }
        Ok(())
    }
}

fn apply_mask(a: &mut Attributes, mask: AttrMask, src: &Attributes) {
    if mask.has(AttrMask::ACCESS_CONTROL_VERSION) {
        a.access_control_version = src.access_control_version;
    }
    if mask.has(AttrMask::NEARBY_OBJECT) {
        a.nearby_object = src.nearby_object;
    }
    if mask.has(AttrMask::BLOCKS_ALLOCATED) {
        a.blocks_allocated = src.blocks_allocated;
    }
    if mask.has(AttrMask::FS_DATA_MODIFY_TIME) {
        a.fs_data_modify_time_us = src.fs_data_modify_time_us;
    }
    if mask.has(AttrMask::FS_ATTRIBUTE_MODIFY_TIME) {
        a.fs_attribute_modify_time_us = src.fs_attribute_modify_time_us;
    }
    if mask.has(AttrMask::FS_SPECIFIC) {
        a.fs_specific = src.fs_specific;
    }
}

fn encode_refs(list: &[(u16, u64)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(list.len() * 10);
    for (p, o) in list {
        v.extend_from_slice(&p.to_le_bytes());
        v.extend_from_slice(&o.to_le_bytes());
    }
    v
}

fn decode_refs(b: &[u8]) -> Vec<(u16, u64)> {
    b.chunks_exact(10)
        .map(|c| {
            (
                u16::from_le_bytes([c[0], c[1]]),
                u64::from_le_bytes(c[2..10].try_into().unwrap()),
            )
        })
        .collect()
}

/// Where a job's outcome goes: an async waiter or a blocked thread.
type Reply = Box<dyn FnOnce(Result<JobOut, DriveError>) + Send>;

/// Handle to the writer thread; dropping it stops the thread after the queued jobs and waits
/// for it, so the store is closed when the handle is gone.
pub struct Writer {
    tx: Option<mpsc::SyncSender<(Job, Reply)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Jobs that may wait for the writer at once before senders block.
pub const WRITER_QUEUE_JOBS_MAX: usize = 1024;

impl Writer {
    pub fn start(store: Arc<Store>) -> Writer {
        let (tx, rx) = mpsc::sync_channel::<(Job, Reply)>(WRITER_QUEUE_JOBS_MAX);
        let thread = std::thread::Builder::new()
            .name("nasd-writer".into())
            .spawn(move || writer_loop(store, rx))
            .expect("spawn writer thread");
        Writer {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    fn sender(&self) -> Result<mpsc::SyncSender<(Job, Reply)>, DriveError> {
        self.tx.clone().ok_or(DriveError::ShuttingDown)
    }

    /// Runs a job on the writer thread and waits for its commit.
    pub async fn run(&self, job: Job) -> Result<JobOut, DriveError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sender = self.sender()?;
        let reply: Reply = Box::new(move |r| {
            let _ = tx.send(r);
        });
        // The queue is bounded: a full queue blocks a blocking-pool thread, not the runtime.
        tokio::task::spawn_blocking(move || sender.send((job, reply)))
            .await
            .map_err(|_| DriveError::ShuttingDown)?
            .map_err(|_| DriveError::ShuttingDown)?;
        rx.await.map_err(|_| DriveError::ShuttingDown)?
    }

    /// Runs a job and blocks this thread until it commits (for blocking callers).
    pub fn run_blocking(&self, job: Job) -> Result<JobOut, DriveError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let reply: Reply = Box::new(move |r| {
            let _ = tx.send(r);
        });
        self.sender()?
            .send((job, reply))
            .map_err(|_| DriveError::ShuttingDown)?;
        rx.recv().map_err(|_| DriveError::ShuttingDown)?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs one job in its own transaction on the calling thread (tools, `init`, tests).
pub fn run_now(store: &Store, job: Job) -> Result<JobOut, DriveError> {
    run_batch(store, &[&job]).and_then(|mut v| v.pop().expect("one job, one outcome"))
}

fn writer_loop(store: Arc<Store>, rx: mpsc::Receiver<(Job, Reply)>) {
    while let Ok(first) = rx.recv() {
        let mut bytes = first.0.data_bytes();
        let mut batch = vec![first];
        while batch.len() < crate::store::GROUP_COMMIT_JOBS_MAX
            && bytes < crate::store::GROUP_COMMIT_BYTES_MAX
        {
            match rx.try_recv() {
                Ok(j) => {
                    bytes += j.0.data_bytes();
                    batch.push(j);
                }
                Err(_) => break,
            }
        }
        let cpu0 = crate::thread_cpu_ns();
        let jobs: Vec<&Job> = batch.iter().map(|(j, _)| j).collect();
        let result = run_batch(&store, &jobs);
        let spent = |cpu0: u64| {
            let ns = crate::thread_cpu_ns().saturating_sub(cpu0);
            store
                .writer_cpu_ns
                .fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
        };
        spent(cpu0);
        match result {
            Ok(outs) => {
                for ((_, reply), out) in batch.into_iter().zip(outs) {
                    reply(out);
                }
            }
            Err(e) if batch.len() == 1 => {
                (batch.pop().unwrap().1)(Err(e));
            }
            Err(_) => {
                for (job, reply) in batch {
                    let cpu0 = crate::thread_cpu_ns();
                    let out = run_batch(&store, &[&job]).and_then(|mut v| v.pop().unwrap());
                    spent(cpu0);
                    reply(out);
                }
            }
        }
    }
}

/// Runs jobs in one transaction. `Err` means the transaction was aborted and nothing of it
/// happened; `Ok` holds each job's own outcome (refused jobs changed nothing).
fn run_batch(store: &Store, jobs: &[&Job]) -> Result<Vec<Result<JobOut, DriveError>>, DriveError> {
    let mut tx = Tx::begin(store)?;
    let mut outs = Vec::with_capacity(jobs.len());
    for job in jobs {
        match tx.run(job) {
            Ok(o) => outs.push(Ok(o)),
            Err(JobError::Refused(e)) => outs.push(Err(e)),
            Err(JobError::Abort(e)) => {
                tx.abort();
                return Err(e);
            }
        }
    }
    let durable = !jobs.iter().all(|j| j.write_back());
    match tx.commit(durable) {
        Ok(()) => Ok(outs),
        Err(e) => Err(e),
    }
}
