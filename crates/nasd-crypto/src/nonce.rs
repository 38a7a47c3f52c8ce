//! Replay defence (seed 002 §2.2 "Clocks", §2.4): a nonce is accepted only inside a window
//! around the drive's clock, only at or above a floor, and only once.
//!
//! - **The floor** survives the drive process: the drive persists a bound above every nonce
//!   time it could accept before it accepts it, and on start-up makes the last persisted bound
//!   its floor ([`NonceCache::set_floor`]), so a request recorded before a restart is refused
//!   after it even though the seen-set below was lost with the process.
//! - **The seen-set** is kept per *principal* (the capability, or the key of the hierarchy, the
//!   request proved it holds) and forgets a nonce once it has left the window (the window
//!   refuses it anyway). It is bounded by [`NONCE_CACHE_ENTRIES_MAX`] in all. When full it does
//!   not refuse everyone (one key holder could otherwise lock every client out for a window):
//!   it forgets the oldest nonce of the principal holding the most and raises that principal's
//!   own floor past it. A principal that floods the cache only ever evicts itself first, and
//!   what eviction refuses is a request stamped before one its own principal already sent.
//!   "The most" is judged by size class (powers of two), so the index of sizes changes only
//!   when a principal's class does, not on every request: a principal is evicted from only
//!   while none holds twice as many as it.

use foldhash::fast::RandomState;
use nasd_proto::Nonce;
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, Hash};

/// Half-width of the accepted clock window (seed 002 §2.2: "a small window around the current
/// time").
pub const NONCE_WINDOW_MS: u64 = 30_000;
/// Most nonces remembered at once, all principals together (16 bytes each plus tree overhead:
/// under 100 MiB).
pub const NONCE_CACHE_ENTRIES_MAX: usize = 2_000_000;
/// How often idle principals' expired nonces are swept out, microseconds.
pub const NONCE_SWEEP_INTERVAL_US: u64 = 1_000_000;

#[derive(Debug, PartialEq, Eq)]
pub enum NonceError {
    /// Older or newer than the window allows.
    OutsideWindow {
        nonce_us: u64,
        now_us: u64,
    },
    /// Below the floor: the drive may have accepted this nonce before it restarted, or it is
    /// older than nonces its principal's share of the cache had to forget.
    BelowFloor {
        nonce_us: u64,
        floor_us: u64,
    },
    Replayed,
}

/// What one principal has sent inside the window.
#[derive(Default)]
struct Seen {
    /// Nonces of this principal below this time are refused: they were forgotten to make room.
    floor_us: u64,
    set: BTreeSet<(u64, u64)>,
}

pub struct NonceCache {
    window_us: u64,
    max: usize,
    /// Every nonce below this time is refused, whoever sends it.
    floor_us: u64,
    /// Keyed at random per cache, so no sender can aim principals at one another.
    hasher: RandomState,
    principals: HashMap<u64, Seen, RandomState>,
    /// (size class, principal) for every principal holding entries: one of the largest class
    /// is evicted from.
    by_class: BTreeSet<(u32, u64)>,
    total: usize,
    last_sweep_us: u64,
}

impl NonceCache {
    pub fn new(window_ms: u64, max: usize) -> Self {
        Self {
            window_us: window_ms * 1000,
            max,
            floor_us: 0,
            hasher: RandomState::default(),
            principals: HashMap::default(),
            by_class: BTreeSet::new(),
            total: 0,
            last_sweep_us: 0,
        }
    }

    /// Refuses, from now on, every nonce whose time is below `floor_us`. Never lowers it.
    pub fn set_floor(&mut self, floor_us: u64) {
        self.floor_us = self.floor_us.max(floor_us);
    }

    pub fn floor_us(&self) -> u64 {
        self.floor_us
    }

    /// The window and floor checks alone: cheap, done before the digest. The window is the
    /// window around the clock, except that it reaches a window past the floor when the floor
    /// is ahead of the clock (clients stamp nonces at the floor; a clock stepped back must not
    /// make every one of them too new).
    pub fn check_window(&self, now_us: u64, n: &Nonce) -> Result<(), NonceError> {
        let newest = now_us.max(self.floor_us).saturating_add(self.window_us);
        if n.time_us < now_us.saturating_sub(self.window_us) || n.time_us > newest {
            return Err(NonceError::OutsideWindow {
                nonce_us: n.time_us,
                now_us,
            });
        }
        if n.time_us < self.floor_us {
            return Err(NonceError::BelowFloor {
                nonce_us: n.time_us,
                floor_us: self.floor_us,
            });
        }
        Ok(())
    }

    /// Records an authentic nonce of `principal`; refuses one seen before. Call only after the
    /// digest verified, so forged requests cannot fill the set or burn a legitimate client's
    /// nonce; `principal` is whatever the digest proved the sender holds.
    pub fn accept<P: Hash>(
        &mut self,
        now_us: u64,
        principal: &P,
        n: &Nonce,
    ) -> Result<(), NonceError> {
        self.check_window(now_us, n)?;
        let cutoff = now_us.saturating_sub(self.window_us);
        if now_us >= self.last_sweep_us + NONCE_SWEEP_INTERVAL_US {
            self.sweep(cutoff);
            self.last_sweep_us = now_us;
        }
        let id = self.hasher.hash_one(principal);
        let seen = self.principals.entry(id).or_default();
        let before = seen.set.len();
        while seen.set.first().is_some_and(|&(t, _)| t < cutoff) {
            seen.set.pop_first();
        }
        if n.time_us < seen.floor_us {
            let floor_us = seen.floor_us;
            self.resized(id, before);
            return Err(NonceError::BelowFloor {
                nonce_us: n.time_us,
                floor_us,
            });
        }
        // One descent of the tree: insert reports a nonce already present.
        let fresh = seen.set.insert((n.time_us, n.random));
        self.resized(id, before);
        if !fresh {
            return Err(NonceError::Replayed);
        }
        while self.total > self.max {
            self.evict_one();
        }
        Ok(())
    }

    /// Books a change of `id`'s entry count from `before`.
    fn resized(&mut self, id: u64, before: usize) {
        let after = self.principals.get(&id).map_or(0, |s| s.set.len());
        if after == before {
            return;
        }
        self.total = self.total + after - before;
        let (was, is) = (size_class(before), size_class(after));
        if was != is {
            if was > 0 {
                self.by_class.remove(&(was, id));
            }
            if is > 0 {
                self.by_class.insert((is, id));
            }
        }
    }

    /// Forgets the oldest nonce of a principal of the largest size class, and raises its floor
    /// past it.
    fn evict_one(&mut self) {
        let Some(&(_, id)) = self.by_class.last() else {
            return;
        };
        let seen = self
            .principals
            .get_mut(&id)
            .expect("indexed principals exist");
        let size = seen.set.len();
        let (t, _) = seen
            .set
            .pop_first()
            .expect("indexed principals hold entries");
        seen.floor_us = seen.floor_us.max(t + 1);
        self.resized(id, size);
    }

    /// Drops every principal's nonces older than `cutoff`, and principals left with nothing
    /// that still matters (no entries and a floor the window already enforces).
    fn sweep(&mut self, cutoff: u64) {
        let ids: Vec<u64> = self.principals.keys().copied().collect();
        for id in ids {
            let seen = self.principals.get_mut(&id).expect("listed above");
            let before = seen.set.len();
            while seen.set.first().is_some_and(|&(t, _)| t < cutoff) {
                seen.set.pop_first();
            }
            let forget = seen.set.is_empty() && seen.floor_us <= cutoff;
            self.resized(id, before);
            if forget {
                self.principals.remove(&id);
            }
        }
    }

    /// Nonces remembered, all principals together.
    pub fn len(&self) -> usize {
        self.total
    }
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

/// A size's class: 0 for nothing, else one more than the power of two at or below it.
fn size_class(n: usize) -> u32 {
    usize::BITS - n.leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(t: u64, r: u64) -> Nonce {
        Nonce {
            time_us: t,
            random: r,
        }
    }

    #[test]
    fn window_and_replay() {
        let mut c = NonceCache::new(1_000, 10);
        let now = 10_000_000;
        assert!(c.accept(now, &1, &n(now, 1)).is_ok());
        assert_eq!(c.accept(now, &1, &n(now, 1)), Err(NonceError::Replayed));
        assert!(c.accept(now, &1, &n(now, 2)).is_ok());
        assert!(matches!(
            c.accept(now, &1, &n(now - 2_000_000, 3)),
            Err(NonceError::OutsideWindow { .. })
        ));
        assert!(matches!(
            c.accept(now, &1, &n(now + 2_000_000, 3)),
            Err(NonceError::OutsideWindow { .. })
        ));
    }

    #[test]
    fn a_replay_under_another_principal_is_still_refused_by_its_own() {
        // Principals partition the set, but a request is replayed under the same key it was
        // made with, which names the same principal.
        let mut c = NonceCache::new(1_000, 10);
        let now = 10_000_000;
        c.accept(now, &"cap A", &n(now, 1)).unwrap();
        c.accept(now, &"cap B", &n(now, 1)).unwrap();
        assert_eq!(
            c.accept(now, &"cap A", &n(now, 1)),
            Err(NonceError::Replayed)
        );
    }

    #[test]
    fn the_floor_refuses_what_came_before_a_restart() {
        let mut c = NonceCache::new(1_000, 10);
        let now = 10_000_000;
        c.set_floor(now - 10);
        c.set_floor(5); // never lowered
        assert_eq!(c.floor_us(), now - 10);
        assert!(matches!(
            c.check_window(now, &n(now - 11, 1)),
            Err(NonceError::BelowFloor { .. })
        ));
        assert!(matches!(
            c.accept(now, &1, &n(now - 11, 1)),
            Err(NonceError::BelowFloor { .. })
        ));
        c.accept(now, &1, &n(now - 10, 1)).unwrap();
        // A floor ahead of the clock (set at a restart) is reachable: nonces stamped at it pass.
        let floor = now + 800_000;
        c.set_floor(floor);
        c.accept(now, &1, &n(floor, 1)).unwrap();
        c.accept(now, &1, &n(floor + 1_000_000, 1)).unwrap();
        assert!(matches!(
            c.accept(now, &1, &n(floor + 1_000_001, 1)),
            Err(NonceError::OutsideWindow { .. })
        ));
    }

    #[test]
    fn expires_with_the_window_and_bounds_itself() {
        let mut c = NonceCache::new(1, 3);
        let t = 5_000_000;
        for r in 0..3 {
            c.accept(t, &1, &n(t, r)).unwrap();
        }
        // Full: the principal's oldest entry goes and its floor rises past it, so nothing it
        // forgot can come back; its newest requests still pass.
        c.accept(t + 1, &1, &n(t + 1, 9)).unwrap();
        assert_eq!(c.len(), 3);
        assert!(matches!(
            c.accept(t + 1, &1, &n(t, 0)),
            Err(NonceError::BelowFloor { .. })
        ));
        assert_eq!(c.accept(t + 1, &1, &n(t + 1, 9)), Err(NonceError::Replayed));
        // 2 ms later the old ones are out of the window and forgotten; a replay of one of them
        // is refused by the window, not by memory.
        let later = t + 2_000 + NONCE_SWEEP_INTERVAL_US;
        c.accept(later, &1, &n(later, 9)).unwrap();
        assert_eq!(c.len(), 1);
        assert!(matches!(
            c.accept(later, &1, &n(t, 0)),
            Err(NonceError::OutsideWindow { .. })
        ));
    }

    /// The fairness property: one principal flooding a full cache never gets another
    /// principal's fresh request refused, and never makes the cache forget a nonce that could
    /// then be replayed (everything forgotten is below its principal's floor).
    #[test]
    fn a_flooding_principal_evicts_only_itself() {
        let max = 1000;
        let mut c = NonceCache::new(30_000, max);
        let t0 = 100_000_000u64;
        let mut honest = vec![];
        for i in 0..20_000u64 {
            let now = t0 + i;
            c.accept(now, &"flood", &n(now, i)).unwrap();
            if i % 100 == 0 {
                let h = n(now, 1_000_000 + i);
                c.accept(now, &"honest", &h)
                    .expect("honest requests always pass");
                honest.push(h);
            }
            assert!(c.len() <= max);
        }
        let now = t0 + 20_000;
        for h in &honest {
            assert!(
                c.accept(now, &"honest", h).is_err(),
                "honest nonce replayed"
            );
        }
        for i in 0..20_000u64 {
            assert!(
                c.accept(now, &"flood", &n(t0 + i, i)).is_err(),
                "flood nonce {i} replayed"
            );
        }
    }
}
