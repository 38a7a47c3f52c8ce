//! Writing data: merge with old block contents, copy-on-write to fresh blocks, and new
//! integrity metadata that reuses the client's verified piece hashes (seed 000 §3.4.3, Fig 7).

use super::tx::Tx;
use super::{refuse, JobError, JobOut, JR, OBJECT_BYTES_MAX};
use crate::records::BlockEntry;
use crate::store::{block_len, R};
use crate::DriveError;
use nasd_crypto::integrity::pieces::PieceHash;
use nasd_crypto::integrity::{
    self, adhash, tree, BlockMeta, BLOCK_BYTES, CHUNKS_PER_BLOCK, CHUNK_BYTES, SUB_BLOCK_BYTES,
};
use nasd_crypto::{Cost, Digest};
use nasd_proto::{ObjectId, PartitionId, Region, Scheme};
use std::collections::{BTreeSet, HashMap};

impl Tx<'_> {
    pub(super) fn write(
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
        // Blocks this write draws from the object's own reservation are already charged, and
        // other objects' reservations stay free for them.
        let own = charge.min(rec.reservation());
        let others = self
            .reserved_total()
            .saturating_sub(rec.counted_reservation);
        {
            let part = self.partition(p).map_err(JobError::Refused)?;
            if (part.charged_blocks() + charge - own) * BLOCK_BYTES > part.quota_bytes {
                return refuse(DriveError::QuotaExceeded(p));
            }
        }
        if !self.can_alloc(touched.len() as u64 + 1 + others + rec.reservation() - own) {
            return refuse(DriveError::DiskFull);
        }
        // Assemble each touched block's new content (old bytes where not overwritten).
        let mut bufs: HashMap<u64, Vec<u8>> = HashMap::new();
        for &b in &touched {
            let full = covers_old(regions, b, old_size);
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
        // Where each written block went, so the next one can follow it.
        let mut placed: HashMap<u64, u64> = HashMap::new();
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
            let after = self.placed_after(p, o, b, &rec, &placed)?;
            let phys = self.alloc_after(after)?;
            placed.insert(b, phys);
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

    /// The physical block block `b` of `(p, o)` should follow: block `b - 1`'s (written just
    /// now or before), else, for a block with nothing before it, the last block of the
    /// object `rec` names as `nearby_object` (seed 002 §2.3); none when neither exists.
    fn placed_after(
        &self,
        p: PartitionId,
        o: ObjectId,
        b: u64,
        rec: &crate::records::ObjectRecord,
        placed: &HashMap<u64, u64>,
    ) -> R<Option<u64>> {
        if let Some(prev) = b.checked_sub(1) {
            if let Some(&phys) = placed.get(&prev) {
                return Ok(Some(phys));
            }
            if let Some(e) = self.get_entry(p, o, prev)? {
                return Ok(Some(e.phys));
            }
        }
        let near = rec.attrs.nearby_object;
        if near.0 == 0 || near == o {
            return Ok(None);
        }
        self.last_block(p, near)
    }

    /// New metadata for a written block, reusing the client's verified piece hashes where they
    /// are exactly what is stored and hashing only the rest (seed 000 §3.4.3, Fig 7).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn meta_for(
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
}

/// Whether `regions` overwrite every byte of block `b` that the object held before (those
/// below `old_size`): then the old block is not read. Past the old size a block holds
/// nothing (zeros), so a write to an object's end replaces its last block whole — which is
/// also what lets a repair rewrite a last block whose stored copy fails its at-rest check.
fn covers_old(regions: &[Region], b: u64, old_size: u64) -> bool {
    let start = b * BLOCK_BYTES;
    let end = (start + BLOCK_BYTES).min(old_size);
    if end <= start {
        return true;
    }
    let mut spans: Vec<(u64, u64)> = regions
        .iter()
        .map(|r| (r.offset.max(start), r.offset.saturating_add(r.len).min(end)))
        .filter(|(a, e)| a < e)
        .collect();
    spans.sort_unstable();
    let mut at = start;
    for (a, e) in spans {
        if a > at {
            return false;
        }
        at = at.max(e);
    }
    at >= end
}

#[cfg(test)]
mod covers_old_tests {
    use super::*;

    fn r(offset: u64, len: u64) -> Region {
        Region::new(offset, len)
    }

    #[test]
    fn only_bytes_below_the_old_size_need_covering() {
        let b = BLOCK_BYTES;
        // A whole block, in one region or in overlapping and out-of-order pieces.
        assert!(covers_old(&[r(0, b)], 0, 10 * b));
        assert!(covers_old(&[r(100, b), r(0, 200)], 0, 10 * b));
        // A gap anywhere needs the old bytes.
        assert!(!covers_old(&[r(0, 100), r(101, b)], 0, 10 * b));
        assert!(!covers_old(&[r(1, b)], 0, 10 * b));
        // The object's last block: up to the old end is enough; a block past it needs nothing.
        assert!(covers_old(&[r(b, 3392)], 1, b + 3392));
        assert!(!covers_old(&[r(b, 3391)], 1, b + 3392));
        assert!(covers_old(&[r(5 * b + 7, 1)], 5, 2 * b));
        // Regions in other blocks do not count.
        assert!(!covers_old(&[r(0, b), r(2 * b, b)], 1, 10 * b));
    }
}
