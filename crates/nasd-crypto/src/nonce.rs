//! Replay defence (seed 002 §2.2 "Clocks", §2.4): a nonce is accepted only inside a window
//! around the drive's clock and only once. The seen-set is bounded: it forgets a nonce once the
//! nonce has left the window (it would be refused for its age anyway), and when it is full of
//! nonces still inside the window it refuses new ones rather than forgetting any (fail closed).

use nasd_proto::Nonce;
use std::collections::BTreeSet;

/// Half-width of the accepted clock window (seed 002 §2.2: "a small window around the current
/// time").
pub const NONCE_WINDOW_MS: u64 = 30_000;
/// Most nonces remembered at once (16 bytes each plus tree overhead: under 100 MiB).
pub const NONCE_CACHE_ENTRIES_MAX: usize = 2_000_000;

#[derive(Debug, PartialEq, Eq)]
pub enum NonceError {
    /// Older or newer than the window allows.
    OutsideWindow {
        nonce_us: u64,
        now_us: u64,
    },
    Replayed,
    Full,
}

pub struct NonceCache {
    window_us: u64,
    max: usize,
    seen: BTreeSet<(u64, u64)>,
}

impl NonceCache {
    pub fn new(window_ms: u64, max: usize) -> Self {
        Self {
            window_us: window_ms * 1000,
            max,
            seen: BTreeSet::new(),
        }
    }

    /// The window check alone: cheap, done before the digest.
    pub fn check_window(&self, now_us: u64, n: &Nonce) -> Result<(), NonceError> {
        if n.time_us.abs_diff(now_us) > self.window_us {
            return Err(NonceError::OutsideWindow {
                nonce_us: n.time_us,
                now_us,
            });
        }
        Ok(())
    }

    /// Records an authentic nonce; refuses one seen before. Call only after the digest
    /// verified, so forged requests cannot fill the set or burn a legitimate client's nonce.
    pub fn accept(&mut self, now_us: u64, n: &Nonce) -> Result<(), NonceError> {
        self.check_window(now_us, n)?;
        let cutoff = now_us.saturating_sub(self.window_us);
        while let Some(&(t, _)) = self.seen.first() {
            if t >= cutoff {
                break;
            }
            self.seen.pop_first();
        }
        let k = (n.time_us, n.random);
        if self.seen.len() >= self.max {
            return Err(if self.seen.contains(&k) {
                NonceError::Replayed
            } else {
                NonceError::Full
            });
        }
        // One descent of the tree: insert reports a nonce already present.
        if !self.seen.insert(k) {
            return Err(NonceError::Replayed);
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
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
        assert!(c.accept(now, &n(now, 1)).is_ok());
        assert_eq!(c.accept(now, &n(now, 1)), Err(NonceError::Replayed));
        assert!(c.accept(now, &n(now, 2)).is_ok());
        assert!(matches!(
            c.accept(now, &n(now - 2_000_000, 3)),
            Err(NonceError::OutsideWindow { .. })
        ));
        assert!(matches!(
            c.accept(now, &n(now + 2_000_000, 3)),
            Err(NonceError::OutsideWindow { .. })
        ));
    }

    #[test]
    fn expires_with_the_window_and_bounds_itself() {
        let mut c = NonceCache::new(1, 3);
        let t = 5_000_000;
        for r in 0..3 {
            c.accept(t, &n(t, r)).unwrap();
        }
        assert_eq!(c.accept(t, &n(t, 9)), Err(NonceError::Full));
        // a full set still names a replay as a replay
        assert_eq!(c.accept(t, &n(t, 0)), Err(NonceError::Replayed));
        // 2 ms later the old ones are out of the window and forgotten; a replay of one of them
        // is refused by the window, not by memory.
        let later = t + 2_000;
        c.accept(later, &n(later, 9)).unwrap();
        assert_eq!(c.len(), 1);
        assert!(matches!(
            c.accept(later, &n(t, 0)),
            Err(NonceError::OutsideWindow { .. })
        ));
    }
}
