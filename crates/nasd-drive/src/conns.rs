//! The table of open connections and what it admits: what keeps peers that have proved nothing
//! from holding the drive (issue: 1,030 connections that only said hello locked every client
//! out; a few dozen half-sent frames cost gigabytes).
//!
//! A connection is *unproved* until one of its requests passes the checks of seed 002 §2.4
//! (its digest verified under a key the drive holds), then *proved*. The rules:
//! - at most [`CONNECTIONS_MAX`] connections, and [`CONNECTIONS_PER_SOURCE_MAX`] per source
//!   address; when a limit is reached a newcomer takes the place of the oldest unproved
//!   connection (of that source, for the per-source limit) rather than being refused, so an
//!   honest client, which proves itself within a round trip, is always let in;
//! - bodies of unproved connections' frames are held in memory only as their bytes arrive, and
//!   all of them together in at most [`UNPROVED_BUFFER_BYTES_MAX`]; past it the oldest unproved
//!   connections holding bytes are closed;
//! - the time limits (to prove, idle, per frame, per reply) are the server's (`server.rs`).

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::task::AbortHandle;

/// Most client connections served at once.
pub const CONNECTIONS_MAX: usize = 1024;
/// Most connections from one source address. A client process keeps 4 per drive; this leaves
/// room for many processes on one host while a single host cannot take every slot.
pub const CONNECTIONS_PER_SOURCE_MAX: usize = 128;
/// Most bytes all unproved connections together may hold in frame bodies being received.
pub const UNPROVED_BUFFER_BYTES_MAX: usize = 256 << 20;

const _: () = assert!(CONNECTIONS_PER_SOURCE_MAX <= CONNECTIONS_MAX);
const _: () = assert!(UNPROVED_BUFFER_BYTES_MAX >= 4 * nasd_proto::FRAME_BYTES_MAX);

struct Entry {
    peer: IpAddr,
    proved: Arc<AtomicBool>,
    /// Body bytes this unproved connection holds.
    held: usize,
    abort: Option<AbortHandle>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// By id, which is by age: the oldest first.
    entries: BTreeMap<u64, Entry>,
    per_source: HashMap<IpAddr, usize>,
    /// Body bytes all unproved connections hold.
    held: usize,
}

/// The connection table; cheap to share.
#[derive(Clone, Default)]
pub struct Conns(Arc<Mutex<Inner>>);

/// A connection's place in the table; leaving it (dropping) frees the place.
pub struct Slot {
    conns: Conns,
    id: u64,
    proved: Arc<AtomicBool>,
}

impl Conns {
    /// Admits a connection from `peer`, closing the oldest unproved one to make room when a
    /// limit is reached; `None` when every place is held by proved connections.
    pub fn admit(&self, peer: IpAddr) -> Option<Slot> {
        let mut g = self.0.lock();
        if g.per_source.get(&peer).copied().unwrap_or(0) >= CONNECTIONS_PER_SOURCE_MAX
            && !g.evict_oldest_unproved(Some(peer))
        {
            return None;
        }
        if g.entries.len() >= CONNECTIONS_MAX && !g.evict_oldest_unproved(None) {
            return None;
        }
        let id = g.next_id;
        g.next_id += 1;
        let proved = Arc::new(AtomicBool::new(false));
        g.entries.insert(
            id,
            Entry {
                peer,
                proved: proved.clone(),
                held: 0,
                abort: None,
            },
        );
        *g.per_source.entry(peer).or_default() += 1;
        Some(Slot {
            conns: self.clone(),
            id,
            proved,
        })
    }

    /// Closes every connection (shutdown): their tasks stop reading; requests already handed
    /// on run to their end.
    pub fn close_all(&self) {
        let mut g = self.0.lock();
        let ids: Vec<u64> = g.entries.keys().copied().collect();
        for id in ids {
            g.remove(id);
        }
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.0.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// Closes the oldest unproved connection (of `peer`, if given); false if there is none.
    fn evict_oldest_unproved(&mut self, peer: Option<IpAddr>) -> bool {
        let victim = self
            .entries
            .iter()
            .find(|(_, e)| !e.proved.load(Ordering::Acquire) && peer.is_none_or(|p| p == e.peer))
            .map(|(&id, _)| id);
        match victim {
            Some(id) => {
                self.remove(id);
                true
            }
            None => false,
        }
    }

    /// Takes a connection out of the table and stops its task.
    fn remove(&mut self, id: u64) {
        let Some(e) = self.entries.remove(&id) else {
            return;
        };
        self.held -= e.held;
        if let Some(n) = self.per_source.get_mut(&e.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&e.peer);
            }
        }
        if let Some(a) = e.abort {
            a.abort();
        }
    }
}

impl Slot {
    /// Registers the task serving this connection, so eviction can stop it.
    pub fn set_task(&self, abort: AbortHandle) {
        let mut g = self.conns.0.lock();
        match g.entries.get_mut(&self.id) {
            Some(e) => e.abort = Some(abort),
            None => abort.abort(), // evicted before it started
        }
    }

    /// Closes the connection now: it leaves the table and its task stops.
    pub fn close(&self) {
        self.conns.0.lock().remove(self.id);
    }

    pub fn proved(&self) -> bool {
        self.proved.load(Ordering::Acquire)
    }

    /// The connection proved itself: from now on it is never evicted for a newcomer, and its
    /// bodies are no longer counted as unproved.
    pub fn prove(&self) {
        // Every request of a proved connection comes here: read before writing.
        if self.proved.load(Ordering::Acquire) || self.proved.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut g = self.conns.0.lock();
        if let Some(e) = g.entries.get_mut(&self.id) {
            let held = std::mem::take(&mut e.held);
            g.held -= held;
        }
    }

    /// Books `n` more body bytes held by this unproved connection; past
    /// [`UNPROVED_BUFFER_BYTES_MAX`] the oldest unproved connections holding bytes are closed
    /// (this one too, if it is the oldest). False if this connection was closed.
    pub fn hold(&self, n: usize) -> bool {
        let mut g = self.conns.0.lock();
        let Some(e) = g.entries.get_mut(&self.id) else {
            return false;
        };
        e.held += n;
        g.held += n;
        while g.held > UNPROVED_BUFFER_BYTES_MAX {
            let victim = g
                .entries
                .iter()
                .find(|(_, e)| e.held > 0)
                .map(|(&id, _)| id)
                .expect("held bytes belong to some entry");
            g.remove(victim);
        }
        g.entries.contains_key(&self.id)
    }

    /// Body bytes this connection no longer holds (its frame was handed on or dropped).
    pub fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut g = self.conns.0.lock();
        if let Some(e) = g.entries.get_mut(&self.id) {
            let n = n.min(e.held);
            e.held -= n;
            g.held -= n;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut g = self.conns.0.lock();
        if let Some(e) = g.entries.get_mut(&self.id) {
            e.abort = None; // the task is ending on its own
        }
        g.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn newcomers_replace_the_oldest_unproved_never_a_proved_one() {
        let c = Conns::default();
        let honest: Vec<Slot> = (0..10).map(|_| c.admit(ip(1)).unwrap()).collect();
        honest.iter().for_each(Slot::prove);
        let mut attackers: Vec<Slot> = vec![];
        for source in 2u8.. {
            for _ in 0..CONNECTIONS_PER_SOURCE_MAX {
                if c.len() < CONNECTIONS_MAX {
                    attackers.push(c.admit(ip(source)).unwrap());
                }
            }
            if c.len() == CONNECTIONS_MAX {
                break;
            }
        }
        // Full: one more attacker takes an attacker's place; an honest newcomer too.
        let oldest = attackers[0].id;
        let more = c.admit(ip(250)).unwrap();
        assert!(!c.0.lock().entries.contains_key(&oldest));
        let newcomer = c.admit(ip(1)).unwrap();
        newcomer.prove();
        assert_eq!(c.len(), CONNECTIONS_MAX);
        for h in &honest {
            assert!(
                c.0.lock().entries.contains_key(&h.id),
                "a proved connection was closed"
            );
        }
        drop((more, attackers));
        assert_eq!(c.len(), honest.len() + 1);
    }

    #[test]
    fn one_source_is_held_to_its_share() {
        let c = Conns::default();
        let proved: Vec<Slot> = (0..CONNECTIONS_PER_SOURCE_MAX)
            .map(|_| c.admit(ip(9)).unwrap())
            .collect();
        proved.iter().for_each(Slot::prove);
        assert!(c.admit(ip(9)).is_none(), "a source past its share");
        assert!(c.admit(ip(8)).is_some(), "another source is still served");
    }

    #[test]
    fn unproved_bytes_are_bounded_and_the_oldest_holders_go_first() {
        let c = Conns::default();
        let old = c.admit(ip(2)).unwrap();
        let young = c.admit(ip(3)).unwrap();
        assert!(old.hold(UNPROVED_BUFFER_BYTES_MAX / 2));
        assert!(young.hold(UNPROVED_BUFFER_BYTES_MAX / 2));
        assert!(young.hold(1), "the oldest holder goes, not the one asking");
        assert!(!c.0.lock().entries.contains_key(&old.id));
        assert!(!old.hold(1), "a closed connection holds nothing more");
        young.prove();
        assert_eq!(
            c.0.lock().held,
            0,
            "a proved connection's bytes are not counted"
        );
    }
}
