//! Write leases (seed 002 §3.2): at most one writer per file. A write capability for a file's
//! objects is granted only to the session holding the file's lease; the lease lasts as long
//! as the capability it came with (renewals extend both), and `ReturnCapability` ends it,
//! the manager then revoking the file's capabilities at once so the returned one is dead.
//!
//! Leases live in memory. A manager that restarts has forgotten who held what, while write
//! capabilities it minted before may still be valid for up to `write_cap_ttl_ms`; so during
//! that window after start, the first lease granted on each file asks for a revocation first
//! ([`Taken::revoke_first`]), which kills any capability of an earlier writer.
//!
//! An upload (`Create` that stages fresh objects) takes no lease: it never touches the
//! objects a reader or another writer uses, and its commit swaps its objects in atomically.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Most leases kept at once; past it, expired ones are dropped, and then new leases are
/// refused as busy rather than evict a live one.
pub const LEASES_MAX: usize = 65_536;

/// Who holds a lease: a user's login session (one token, however many connections).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Holder {
    pub uid: u32,
    pub session: u64,
}

impl Holder {
    /// The manager itself (truncation, rebuilds).
    pub const MANAGER: Holder = Holder { uid: 0, session: 0 };
}

#[derive(Clone, Copy, Debug)]
struct Lease {
    holder: Holder,
    expires_ms: u64,
}

/// A granted lease.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Taken {
    /// Capabilities minted before a manager restart may still be live: revoke them before
    /// handing out the new one.
    pub revoke_first: bool,
}

/// Refused: another session holds the file's lease.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Busy {
    pub holder: Holder,
    pub until_ms: u64,
}

pub struct Leases {
    inner: Mutex<Inner>,
}

struct Inner {
    map: HashMap<u64, Lease>,
    /// Files leased since start, while pre-restart capabilities may live (until `window_end_ms`).
    seen: HashSet<u64>,
    window_end_ms: u64,
}

impl Leases {
    /// Leases of a manager that started at `started_ms` and mints write capabilities valid
    /// for `write_ttl_ms`.
    pub fn new(started_ms: u64, write_ttl_ms: u64) -> Leases {
        Leases {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                seen: HashSet::new(),
                window_end_ms: started_ms.saturating_add(write_ttl_ms),
            }),
        }
    }

    /// Grants or extends `holder`'s lease on file `ino` until `until_ms`.
    pub fn take(
        &self,
        ino: u64,
        holder: Holder,
        now_ms: u64,
        until_ms: u64,
    ) -> Result<Taken, Busy> {
        let mut g = self.inner.lock().expect("leases lock");
        if let Some(l) = g.map.get(&ino) {
            if l.holder != holder && l.expires_ms > now_ms {
                return Err(Busy {
                    holder: l.holder,
                    until_ms: l.expires_ms,
                });
            }
        }
        if g.map.len() >= LEASES_MAX && !g.map.contains_key(&ino) {
            g.map.retain(|_, l| l.expires_ms > now_ms);
            if g.map.len() >= LEASES_MAX {
                return Err(Busy {
                    holder: Holder::MANAGER,
                    until_ms: now_ms,
                });
            }
        }
        let revoke_first = if now_ms < g.window_end_ms {
            // Conservative when the set is full: revoke again.
            g.seen.len() >= LEASES_MAX || g.seen.insert(ino)
        } else {
            if !g.seen.is_empty() {
                g.seen = HashSet::new();
            }
            false
        };
        g.map.insert(
            ino,
            Lease {
                holder,
                expires_ms: until_ms,
            },
        );
        Ok(Taken { revoke_first })
    }

    /// Ends `holder`'s lease on `ino`; whether it held one that was live.
    pub fn release(&self, ino: u64, holder: Holder, now_ms: u64) -> bool {
        let mut g = self.inner.lock().expect("leases lock");
        match g.map.get(&ino) {
            Some(l) if l.holder == holder => {
                let live = l.expires_ms > now_ms;
                g.map.remove(&ino);
                live
            }
            _ => false,
        }
    }

    /// Leases live at `now_ms` (metrics).
    pub fn live(&self, now_ms: u64) -> usize {
        let g = self.inner.lock().expect("leases lock");
        g.map.values().filter(|l| l.expires_ms > now_ms).count()
    }

    /// The live lease on `ino`, if any: its holder and expiry.
    pub fn holder(&self, ino: u64, now_ms: u64) -> Option<(Holder, u64)> {
        let g = self.inner.lock().expect("leases lock");
        g.map
            .get(&ino)
            .filter(|l| l.expires_ms > now_ms)
            .map(|l| (l.holder, l.expires_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Holder = Holder {
        uid: 1,
        session: 11,
    };
    const B: Holder = Holder {
        uid: 2,
        session: 22,
    };

    #[test]
    fn one_holder_at_a_time_until_release_or_expiry() {
        let l = Leases::new(0, 0);
        assert!(l.take(7, A, 100, 200).is_ok());
        // The holder renews; another is refused until the lease ends.
        assert!(l.take(7, A, 150, 300).is_ok());
        assert_eq!(
            l.take(7, B, 160, 400),
            Err(Busy {
                holder: A,
                until_ms: 300
            })
        );
        // Another file is free.
        assert!(l.take(8, B, 160, 400).is_ok());
        // Only the holder releases.
        assert!(!l.release(7, B, 170));
        assert!(l.release(7, A, 170));
        assert!(l.take(7, B, 171, 400).is_ok());
        // Expired: anyone may take it; releasing an expired lease reports it dead.
        assert!(l.take(7, A, 401, 500).is_ok());
        assert!(!l.release(7, A, 600));
        assert_eq!(l.holder(7, 600), None);
    }

    #[test]
    fn after_a_restart_the_first_lease_on_each_file_revokes_first() {
        let l = Leases::new(1000, 500);
        assert!(l.take(7, A, 1100, 1200).unwrap().revoke_first);
        assert!(l.release(7, A, 1150));
        assert!(!l.take(7, B, 1160, 1300).unwrap().revoke_first);
        assert!(l.take(8, A, 1400, 1500).unwrap().revoke_first);
        // Past the window no capability from before the restart lives.
        assert!(!l.take(9, A, 1500, 1600).unwrap().revoke_first);
    }
}
