//! Upkeep of a `tree` object's stored nodes (levels >= 7) after its leaves or size changed.

use super::tx::Tx;
use crate::store::{db_err, NodeSource, BLOCKS, NODES, R, STORED_TREE_LEVEL_MIN};
use crate::DriveError;
use nasd_crypto::integrity::{tree, CHUNKS_PER_BLOCK};
use nasd_crypto::Digest;
use nasd_proto::{ObjectId, PartitionId};
use redb::ReadableTable;
use std::collections::BTreeSet;

impl Tx<'_> {
    /// Recomputes the stored tree nodes (levels >= 7) over the groups of 128 chunks whose
    /// leaves changed, and their ancestors; removes nodes that are no longer complete.
    pub(super) fn refresh_tree(
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
