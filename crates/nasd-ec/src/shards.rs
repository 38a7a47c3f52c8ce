//! Plumbing shared by the codecs: checking shard lists, splitting one list of shard buffers into
//! the sources and outputs of a kernel call, erasure-pattern bit sets, and the bounded cache of
//! decode plans.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::ShardError;

/// Decode plans a codec keeps; when full the cache is emptied (patterns are few in practice: one
/// per set of lost drives, times the stripe rotation).
pub const DECODE_CACHE_ENTRIES_MAX: usize = 1024;

/// Shards per stripe a pattern can describe.
pub const PATTERN_SHARDS_MAX: usize = 256;

/// A set of shard indices below [`PATTERN_SHARDS_MAX`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShardSet([u64; 4]);

impl ShardSet {
    /// The indices where `flags` is true.
    pub fn from_flags(flags: &[bool]) -> Self {
        assert!(
            flags.len() <= PATTERN_SHARDS_MAX,
            "too many shards for a pattern"
        );
        let mut s = ShardSet::default();
        for (i, _) in flags.iter().enumerate().filter(|(_, &f)| f) {
            s.insert(i);
        }
        s
    }

    /// Adds index `i`.
    pub fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    /// Whether `i` is in the set.
    pub fn contains(&self, i: usize) -> bool {
        i < PATTERN_SHARDS_MAX && self.0[i / 64] & (1 << (i % 64)) != 0
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Members below `n`, ascending.
    pub fn members(&self, n: usize) -> Vec<usize> {
        (0..n).filter(|&i| self.contains(i)).collect()
    }
}

/// Checks that a list has `expected` entries.
pub fn check_count(what: &'static str, expected: usize, got: usize) -> Result<(), ShardError> {
    if expected == got {
        Ok(())
    } else {
        Err(ShardError::Count {
            what,
            expected,
            got,
        })
    }
}

/// The common length of `lens` (shard 0's), or the first shard that differs.
pub fn common_len(lens: impl Iterator<Item = usize>) -> Result<usize, ShardError> {
    let mut expected = None;
    for (index, got) in lens.enumerate() {
        match expected {
            None => expected = Some(got),
            Some(e) if e != got => {
                return Err(ShardError::Length {
                    index,
                    expected: e,
                    got,
                })
            }
            Some(_) => {}
        }
    }
    Ok(expected.unwrap_or(0))
}

/// Borrows the shards at `sources` shared and those at `outputs` mutably, each list ascending
/// and the two disjoint.
pub fn split<'a, S: AsRef<[u8]> + AsMut<[u8]>>(
    shards: &'a mut [S],
    sources: &[usize],
    outputs: &[usize],
) -> (Vec<&'a [u8]>, Vec<&'a mut [u8]>) {
    let mut srcs = Vec::with_capacity(sources.len());
    let mut outs = Vec::with_capacity(outputs.len());
    let (mut s, mut o) = (0, 0);
    for (i, shard) in shards.iter_mut().enumerate() {
        if sources.get(s) == Some(&i) {
            let shared: &'a S = shard;
            srcs.push(shared.as_ref());
            s += 1;
        } else if outputs.get(o) == Some(&i) {
            outs.push(shard.as_mut());
            o += 1;
        }
    }
    assert!(
        s == sources.len() && o == outputs.len(),
        "source and output indices ascending, disjoint and in range"
    );
    (srcs, outs)
}

/// Decode plans by (present, wanted) pattern, shared by the threads using one codec.
#[derive(Debug)]
pub struct PlanCache<P> {
    plans: Mutex<HashMap<(ShardSet, ShardSet), Arc<P>>>,
}

impl<P> Default for PlanCache<P> {
    fn default() -> Self {
        PlanCache {
            plans: Mutex::new(HashMap::new()),
        }
    }
}

impl<P> PlanCache<P> {
    /// The plan for the pattern, built by `build` on a miss. Building happens outside the lock
    /// so a slow inversion does not stall other threads' hits.
    pub fn get_or_build<E>(
        &self,
        present: ShardSet,
        wanted: ShardSet,
        build: impl FnOnce() -> Result<P, E>,
    ) -> Result<Arc<P>, E> {
        if let Some(p) = self.plans.lock().get(&(present, wanted)) {
            return Ok(p.clone());
        }
        let plan = Arc::new(build()?);
        let mut plans = self.plans.lock();
        if plans.len() >= DECODE_CACHE_ENTRIES_MAX {
            plans.clear();
        }
        plans.insert((present, wanted), plan.clone());
        Ok(plan)
    }

    /// Plans held now.
    pub fn len(&self) -> usize {
        self.plans.lock().len()
    }

    /// Whether no plan is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
