//! The manager's table of open connections, which bounds what peers that have not logged in
//! can hold, so that they never lock honest users out.
//!
//! - At most [`CONNECTIONS_MAX`] connections are open.
//! - At most [`PRELOGIN_PER_SOURCE_MAX`] of them may come from one source (an IPv4 address or
//!   an IPv6 /64, [`crate::backoff::source_of`]) without having logged in; one more from that
//!   source is refused. Logged-in connections do not count against their source: they are
//!   authenticated, and a host with many users must not be refused for being busy.
//! - When the table is full, a new connection evicts the oldest one that has not logged in;
//!   only when every open connection has logged in is the new one refused. An honest client
//!   is therefore always admitted while any slot is held by an unauthenticated peer, and it
//!   keeps its slot once it logs in. (The server also closes every connection that has not
//!   logged in by its deadline, `server::LOGIN_DEADLINE_MS`.)
//!
//! The table is generic over how a connection is closed (`H`: the server keeps a tokio
//! `AbortHandle` of the connection's task), so its policy is tested without sockets.

use crate::backoff::source_of;
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

/// Connections open at once. Each costs a task, a TLS session (about 40 KiB of buffers) and a
/// file descriptor; 256 serves a cluster's clients with a wide margin.
pub const CONNECTIONS_MAX: usize = 256;
/// Connections from one source that have not logged in yet. An honest host opens a handful at
/// once (each `nasd` command opens one); 32 lets a busy one through while one attacking host
/// holds at most an eighth of the table.
pub const PRELOGIN_PER_SOURCE_MAX: usize = 32;

const _: () = assert!(PRELOGIN_PER_SOURCE_MAX < CONNECTIONS_MAX);

/// A connection's place in the table; ids grow with the time of admission.
pub type ConnId = u64;

struct Entry<H> {
    source: IpAddr,
    logged_in: bool,
    closer: Option<H>,
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{PRELOGIN_PER_SOURCE_MAX} connections from this source are not logged in yet")]
    SourceLimit,
    #[error("{CONNECTIONS_MAX} connections are open and all have logged in")]
    Full,
}

/// What admission displaced: the oldest connection that had not logged in, to be closed.
pub struct Evicted<H> {
    pub id: ConnId,
    pub source: IpAddr,
    /// `None` if its closer had not been set yet.
    pub closer: Option<H>,
}

pub struct ConnTable<H> {
    next_id: ConnId,
    entries: HashMap<ConnId, Entry<H>>,
    /// The ids of connections not logged in, oldest first.
    prelogin: BTreeSet<ConnId>,
    prelogin_by_source: HashMap<IpAddr, usize>,
}

impl<H> Default for ConnTable<H> {
    fn default() -> Self {
        ConnTable {
            next_id: 0,
            entries: HashMap::new(),
            prelogin: BTreeSet::new(),
            prelogin_by_source: HashMap::new(),
        }
    }
}

impl<H> ConnTable<H> {
    /// Admits a connection from `peer`, evicting the oldest one not logged in if the table is
    /// full. The caller closes what was evicted.
    pub fn admit(&mut self, peer: IpAddr) -> Result<(ConnId, Option<Evicted<H>>), Refusal> {
        let source = source_of(peer);
        if self.prelogin_by_source.get(&source).copied().unwrap_or(0) >= PRELOGIN_PER_SOURCE_MAX {
            return Err(Refusal::SourceLimit);
        }
        let evicted = if self.entries.len() >= CONNECTIONS_MAX {
            let oldest = *self.prelogin.first().ok_or(Refusal::Full)?;
            let e = self.remove(oldest).expect("a pre-login id has an entry");
            Some(Evicted {
                id: oldest,
                source: e.source,
                closer: e.closer,
            })
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        self.entries.insert(
            id,
            Entry {
                source,
                logged_in: false,
                closer: None,
            },
        );
        self.prelogin.insert(id);
        *self.prelogin_by_source.entry(source).or_default() += 1;
        debug_assert!(self.entries.len() <= CONNECTIONS_MAX);
        Ok((id, evicted))
    }

    /// Records how to close connection `id` (ignored if it is already gone).
    pub fn set_closer(&mut self, id: ConnId, closer: H) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.closer = Some(closer);
        }
    }

    /// Connection `id` logged in: it no longer counts against its source and is never evicted.
    /// False if it was evicted in the meantime (the caller must close it).
    pub fn logged_in(&mut self, id: ConnId) -> bool {
        let Some(e) = self.entries.get_mut(&id) else {
            return false;
        };
        if !e.logged_in {
            e.logged_in = true;
            let source = e.source;
            self.prelogin.remove(&id);
            self.uncount(source);
        }
        true
    }

    /// Forgets connection `id` (closed, or evicted); returns its entry's closer if it was here.
    pub fn forget(&mut self, id: ConnId) -> Option<Option<H>> {
        self.remove(id).map(|e| e.closer)
    }

    fn remove(&mut self, id: ConnId) -> Option<Entry<H>> {
        let e = self.entries.remove(&id)?;
        if !e.logged_in {
            self.prelogin.remove(&id);
            self.uncount(e.source);
        }
        Some(e)
    }

    fn uncount(&mut self, source: IpAddr) {
        if let Some(n) = self.prelogin_by_source.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                self.prelogin_by_source.remove(&source);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Connections that have not logged in.
    pub fn prelogin_len(&self) -> usize {
        self.prelogin.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_source_holds_at_most_its_share_before_login() {
        let mut t: ConnTable<u32> = ConnTable::default();
        let a = ip("10.0.0.2");
        let ids: Vec<_> = (0..PRELOGIN_PER_SOURCE_MAX)
            .map(|_| t.admit(a).unwrap().0)
            .collect();
        assert_eq!(t.admit(a).err(), Some(Refusal::SourceLimit));
        // Another source is admitted; so is the first again once one of its own logs in.
        t.admit(ip("10.0.0.3")).unwrap();
        assert!(t.logged_in(ids[0]));
        t.admit(a).unwrap();
        assert_eq!(t.admit(a).err(), Some(Refusal::SourceLimit));
        // Or once one closes.
        t.forget(ids[1]);
        t.admit(a).unwrap();
    }

    #[test]
    fn a_full_table_evicts_the_oldest_connection_not_logged_in() {
        let mut t: ConnTable<u32> = ConnTable::default();
        let honest = ip("192.168.0.1");
        let (early, _) = t.admit(honest).unwrap();
        assert!(t.logged_in(early));
        let mut attackers = vec![];
        let mut k = 0u32;
        while t.len() < CONNECTIONS_MAX {
            let src = ip(&format!("10.0.{}.1", k / PRELOGIN_PER_SOURCE_MAX as u32));
            let (id, ev) = t.admit(src).unwrap();
            assert!(ev.is_none());
            t.set_closer(id, k);
            attackers.push(id);
            k += 1;
        }
        // The honest client gets in, displacing the oldest unauthenticated connection ...
        let (me, ev) = t.admit(honest).unwrap();
        let ev = ev.expect("someone was evicted");
        assert_eq!((ev.id, ev.closer), (attackers[0], Some(0)));
        assert_eq!(t.len(), CONNECTIONS_MAX);
        // ... and keeps its place once logged in, while the attack goes on.
        assert!(t.logged_in(me));
        for n in 1..4 * CONNECTIONS_MAX {
            let src = ip(&format!("10.9.{}.{}", n / 250, n % 250));
            let (_, ev) = t.admit(src).unwrap_or_else(|e| panic!("{n}: {e}"));
            let ev = ev.expect("full");
            assert!(ev.id != me && ev.id != early);
        }
        assert!(t.entries.contains_key(&me) && t.entries.contains_key(&early));
    }

    #[test]
    fn a_table_of_logged_in_connections_refuses_more() {
        let mut t: ConnTable<u32> = ConnTable::default();
        for k in 0..CONNECTIONS_MAX {
            let (id, _) = t.admit(ip(&format!("10.{}.0.1", k % 200))).unwrap();
            assert!(t.logged_in(id));
        }
        assert_eq!(t.admit(ip("10.0.0.9")).err(), Some(Refusal::Full));
        assert_eq!(t.prelogin_len(), 0);
    }

    #[test]
    fn an_evicted_connection_cannot_log_in_afterwards() {
        let mut t: ConnTable<u32> = ConnTable::default();
        let (id, _) = t.admit(ip("10.0.0.1")).unwrap();
        assert!(t.forget(id).is_some());
        assert!(!t.logged_in(id));
        assert!(t.forget(id).is_none());
        assert!(t.is_empty());
        assert!(t.prelogin_by_source.is_empty());
    }
}
