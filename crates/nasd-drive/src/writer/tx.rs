//! One write transaction of the writer thread: allocation and freeing of physical blocks,
//! records, block entries, shared-block accounting, and the object and partition operations
//! other than writing data (which is in `write.rs`) and tree upkeep (in `tree.rs`).

use super::{refuse, Job, JobError, JobOut, JR, OBJECT_BYTES_MAX};
use crate::records::{BlockEntry, ObjectRecord, PartitionRecord};
use crate::store::{
    block_len, db_err, Cached, Store, BLOCKS, DRIVE, FREE, NODES, OBJECTS, PARTITIONS, R, REFS,
};
use crate::{now_us, DriveError};
use nasd_crypto::integrity::{self, BLOCK_BYTES};
use nasd_crypto::Cost;
use nasd_proto::{AttrMask, Attributes, ObjectId, PartitionId, Scheme};
use redb::{ReadableTable, WriteTransaction};
use std::collections::BTreeSet;

/// One write transaction and what it allocated and freed.
pub(crate) struct Tx<'a> {
    pub(super) store: &'a Store,
    pub(super) w: WriteTransaction,
    pub(super) state: Cached,
    pub(super) from_free: Vec<u64>,
    pub(super) freed: Vec<u64>,
    pub(super) wrote_data: bool,
    pub(super) now: u64,
    /// Objects whose block map or tree changed: their cached tree nodes die at commit.
    pub(super) changed: BTreeSet<(u16, u64)>,
}

impl<'a> Tx<'a> {
    pub(super) fn begin(store: &'a Store) -> R<Tx<'a>> {
        // After an I/O error failed the database: open it again, or say why not.
        store.reopen()?;
        let w = match store.db().begin_write() {
            // An I/O error failed the database: the next use opens it again.
            Err(e @ redb::TransactionError::Storage(redb::StorageError::PreviousIo)) => {
                store.db_failed();
                Err(e)
            }
            w => w,
        }
        .map_err(db_err)?;
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

    pub(super) fn commit(self, durable: bool) -> R<()> {
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
            d.insert("drive", state.drive.encode(store.seal.as_ref()).as_slice())
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
                pt.insert(*k, v.encode(*k, store.seal.as_ref()).as_slice())
                    .map_err(db_err)?;
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
        let committed = w.commit();
        store.tree_cache.end_change(&changed);
        if let Err(redb::CommitError::Storage(
            redb::StorageError::Io(_) | redb::StorageError::PreviousIo,
        )) = &committed
        {
            // On I/O (a full disk): redb now refuses every transaction, reads too.
            store.db_failed();
        }
        committed.map_err(|e| match e {
            // A full disk is `DiskFull` to the client, as for the data disk.
            redb::CommitError::Storage(redb::StorageError::Io(io)) => DriveError::Io(io),
            e => db_err(e),
        })?;
        if !freed.is_empty() {
            // Cached copies of freed blocks go now: their numbers may be reused (`cache`).
            store.forget_freed(&freed);
        }
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

    pub(super) fn abort(self) {
        let Tx {
            store,
            w,
            from_free,
            ..
        } = self;
        drop(w);
        store.alloc.lock().free.extend(from_free);
    }

    pub(super) fn capacity_blocks(&self) -> u64 {
        self.state.drive.capacity_bytes / BLOCK_BYTES
    }

    /// Blocks every partition's objects reserved beyond those they use (Table 5
    /// `blocks_allocated`): held back from writes that do not draw on them.
    pub(super) fn reserved_total(&self) -> u64 {
        self.state
            .partitions
            .values()
            .map(|p| p.reserved_blocks)
            .sum()
    }

    /// Whether object `rec` of partition `p` may reserve `blocks_allocated` blocks: its
    /// partition's quota and the drive's free blocks hold them beside every other
    /// reservation.
    pub(super) fn may_reserve(
        &mut self,
        p: PartitionId,
        rec: &ObjectRecord,
        blocks_allocated: u64,
    ) -> Result<(), DriveError> {
        let after = blocks_allocated.saturating_sub(rec.attrs.blocks_used);
        let others = self
            .reserved_total()
            .saturating_sub(rec.counted_reservation);
        let part = self.partition(p)?;
        let charged = part
            .charged_blocks()
            .saturating_sub(rec.counted_reservation)
            + after;
        if charged * BLOCK_BYTES > part.quota_bytes {
            return Err(DriveError::QuotaExceeded(p));
        }
        if after > rec.counted_reservation && !self.can_alloc(others + after) {
            return Err(DriveError::DiskFull);
        }
        Ok(())
    }

    /// Whether `n` more blocks can be allocated now.
    pub(super) fn can_alloc(&self, n: u64) -> bool {
        let mut a = self.store.alloc.lock();
        a.release();
        let fresh = self
            .capacity_blocks()
            .saturating_sub(self.state.drive.next_phys);
        a.free.len() as u64 + fresh >= n
    }

    pub(super) fn alloc(&mut self) -> R<u64> {
        self.alloc_after(None)
    }

    /// A block for new data: the one right after `after` when it is free (or the next fresh
    /// one), so an object's blocks follow each other or the blocks of the object it names
    /// as `nearby_object` (seed 002 §2.3, inter-object clustering); else the lowest free one,
    /// else a fresh one.
    pub(super) fn alloc_after(&mut self, after: Option<u64>) -> R<u64> {
        let want = after.map(|h| h + 1);
        let next_phys = self.state.drive.next_phys;
        let from_free = {
            let mut a = self.store.alloc.lock();
            a.release();
            match want {
                Some(w) if a.free.remove(&w) => Some(w),
                Some(w) if w == next_phys => None,
                _ => a.free.pop_first(),
            }
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

    pub(super) fn free(&mut self, phys: u64) -> R<()> {
        self.w
            .open_table(FREE)
            .map_err(db_err)?
            .insert(phys, ())
            .map_err(db_err)?;
        self.freed.push(phys);
        Ok(())
    }

    pub(super) fn partition(&mut self, p: PartitionId) -> Result<&mut PartitionRecord, DriveError> {
        self.state
            .partitions
            .get_mut(&p.0)
            .ok_or(DriveError::NoSuchPartition(p))
    }

    pub(super) fn get_object(&self, p: PartitionId, o: ObjectId) -> R<Option<ObjectRecord>> {
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

    pub(super) fn put_object(
        &mut self,
        p: PartitionId,
        o: ObjectId,
        rec: &mut ObjectRecord,
        cost: &mut Cost,
    ) -> R<()> {
        let (now, before) = (rec.reservation(), rec.counted_reservation);
        if now != before {
            let part = self.partition(p)?;
            part.reserved_blocks = (part.reserved_blocks + now).saturating_sub(before);
            rec.counted_reservation = now;
        }
        rec.attr_digest =
            nasd_crypto::primitives::attr_digest(self.state.drive.suite, &rec.attrs.encode(), cost);
        self.w
            .open_table(OBJECTS)
            .map_err(db_err)?
            .insert((p.0, o.0), rec.encode().as_slice())
            .map_err(db_err)?;
        Ok(())
    }

    pub(super) fn get_entry(&self, p: PartitionId, o: ObjectId, b: u64) -> R<Option<BlockEntry>> {
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

    pub(super) fn put_entry(
        &mut self,
        p: PartitionId,
        o: ObjectId,
        b: u64,
        e: &BlockEntry,
    ) -> R<()> {
        self.changed.insert((p.0, o.0));
        self.w
            .open_table(BLOCKS)
            .map_err(db_err)?
            .insert((p.0, o.0, b), e.encode().as_slice())
            .map_err(db_err)?;
        Ok(())
    }

    pub(super) fn is_shared(&self, phys: u64) -> R<bool> {
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
    pub(super) fn release(
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
    pub(super) fn charge_new(&mut self, p: PartitionId, rec: &mut ObjectRecord) -> R<()> {
        rec.attrs.blocks_used += 1;
        self.partition(p)?.used_blocks += 1;
        Ok(())
    }

    /// Returns (whether `(p, o)` was charged for `phys`, whether `phys` was freed).
    pub(super) fn drop_ref(
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

    pub(super) fn run(&mut self, job: &Job) -> JR<JobOut> {
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
                if part.charged_blocks() * BLOCK_BYTES > *quota_bytes {
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
                if mask.has(AttrMask::BLOCKS_ALLOCATED) {
                    self.may_reserve(*p, &rec, attrs.blocks_allocated)
                        .map_err(JobError::Refused)?;
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

    pub(super) fn new_object_record(&self, scheme: Scheme) -> ObjectRecord {
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
            counted_reservation: 0,
        }
    }

    /// The physical block of `(p, o)`'s highest block, if it has any.
    pub(super) fn last_block(&self, p: PartitionId, o: ObjectId) -> R<Option<u64>> {
        let t = self.w.open_table(BLOCKS).map_err(db_err)?;
        let last = t
            .range((p.0, o.0, 0)..=(p.0, o.0, u64::MAX))
            .map_err(db_err)?
            .next_back();
        match last {
            Some(e) => {
                let (_, v) = e.map_err(db_err)?;
                let e = BlockEntry::decode(v.value())
                    .map_err(|e| DriveError::Corrupt(format!("block entry: {e}")))?;
                Ok(Some(e.phys))
            }
            None => Ok(None),
        }
    }

    pub(super) fn object_blocks(
        &self,
        p: PartitionId,
        o: ObjectId,
        from: u64,
    ) -> R<Vec<(u64, BlockEntry)>> {
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

    pub(super) fn remove_object(&mut self, p: PartitionId, o: ObjectId) -> R<()> {
        self.changed.insert((p.0, o.0));
        let reserved = self.get_object(p, o)?.map_or(0, |r| r.counted_reservation);
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
        part.reserved_blocks = part.reserved_blocks.saturating_sub(reserved);
        Ok(())
    }

    pub(super) fn setattr(
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
            self.may_reserve(p, &rec, attrs.blocks_allocated)
                .map_err(JobError::Refused)?;
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
    pub(super) fn resize(
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

    pub(super) fn fastcopy(&mut self, p: PartitionId, o: ObjectId) -> JR<JobOut> {
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
        rec.counted_reservation = 0;
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
