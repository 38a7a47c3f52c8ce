//! Connections and their limits (issue 22 §3). Every connection is in a table from the
//! moment it is accepted: busy while a request is in flight, idle otherwise. An idle
//! connection is closed [`HEADER_READ_TIMEOUT_MS`] after it was accepted or last answered,
//! so a silent or trickling peer holds nothing for long, however it behaves. When the table
//! is full ([`CONNECTIONS_MAX`]), or a source has [`CONNECTIONS_PER_SOURCE_MAX`], a new
//! connection evicts the oldest idle one (of that source, when the source is what is full),
//! preferring connections that never made an authenticated request: an honest user is
//! always admitted, since busy connections are bounded by the requests in flight
//! ([`crate::front::REQUESTS_IN_FLIGHT_MAX`]). A peer that stops reading its answer for
//! [`WRITE_STALL_TIMEOUT_MS`] is cut off ([`Stalls`]).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Connections held at once.
pub const CONNECTIONS_MAX: usize = 16_384;
/// Connections one source address holds at once.
pub const CONNECTIONS_PER_SOURCE_MAX: usize = 4_096;
/// How long a connection may stay idle — from its accept, or from the end of its last
/// answer — before a request's headers are in: silent and slow peers are cut off.
pub const HEADER_READ_TIMEOUT_MS: u64 = 30_000;
/// How long a peer may leave the answer it asked for unread before it is cut off.
pub const WRITE_STALL_TIMEOUT_MS: u64 = 30_000;

const _: () = assert!(CONNECTIONS_PER_SOURCE_MAX <= CONNECTIONS_MAX);
const _: () = assert!(crate::front::REQUESTS_IN_FLIGHT_MAX < CONNECTIONS_PER_SOURCE_MAX);

/// The order in which idle connections are evicted: never-authenticated first, then the
/// least recently active (`seq` grows with every change of state).
type IdleKey = (bool, u64, u64);

struct Entry {
    source: IpAddr,
    authenticated: bool,
    busy: u32,
    /// Sequence number of the last change to idle (the eviction order among idle ones).
    seq: u64,
    /// When the connection last became idle.
    idle_since: Instant,
    kill: Arc<Notify>,
}

impl Entry {
    fn idle_key(&self, id: u64) -> IdleKey {
        (self.authenticated, self.seq, id)
    }
}

#[derive(Default)]
struct Table {
    entries: HashMap<u64, Entry>,
    idle: BTreeSet<IdleKey>,
    idle_by_source: HashMap<IpAddr, BTreeSet<IdleKey>>,
    per_source: HashMap<IpAddr, usize>,
    next_id: u64,
    seq: u64,
}

impl Table {
    fn unidle(&mut self, id: u64) {
        let Some(e) = self.entries.get(&id) else {
            return;
        };
        if e.busy > 0 {
            return;
        }
        let k = e.idle_key(id);
        self.idle.remove(&k);
        if let Some(s) = self.idle_by_source.get_mut(&e.source) {
            s.remove(&k);
            if s.is_empty() {
                self.idle_by_source.remove(&e.source);
            }
        }
    }

    fn enidle(&mut self, id: u64) {
        self.seq += 1;
        let seq = self.seq;
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        if e.busy > 0 {
            return;
        }
        e.seq = seq;
        e.idle_since = Instant::now();
        let k = e.idle_key(id);
        let source = e.source;
        self.idle.insert(k);
        self.idle_by_source.entry(source).or_default().insert(k);
    }

    fn remove(&mut self, id: u64) {
        self.unidle(id);
        if let Some(e) = self.entries.remove(&id) {
            if let Some(n) = self.per_source.get_mut(&e.source) {
                *n -= 1;
                if *n == 0 {
                    self.per_source.remove(&e.source);
                }
            }
        }
    }

    /// Evicts the first idle connection of `set` (its task closes it); whether there was one.
    fn evict_first(&mut self, of_source: Option<IpAddr>) -> bool {
        let first = match of_source {
            Some(s) => self
                .idle_by_source
                .get(&s)
                .and_then(|set| set.first().copied()),
            None => self.idle.first().copied(),
        };
        let Some((_, _, id)) = first else {
            return false;
        };
        if let Some(e) = self.entries.get(&id) {
            e.kill.notify_one();
        }
        self.remove(id);
        true
    }
}

/// The table of connections.
#[derive(Default)]
pub struct Conns {
    table: Mutex<Table>,
}

/// One connection's place in the table; dropping it removes the connection.
pub struct Conn {
    conns: Arc<Conns>,
    id: u64,
    kill: Arc<Notify>,
}

impl Conns {
    pub fn new() -> Arc<Conns> {
        Arc::new(Conns::default())
    }

    /// Admits a connection from `source`, evicting idle ones to make room; `None` when every
    /// connection (of the source, if that is what is full) is busy.
    pub fn admit(self: &Arc<Self>, source: IpAddr) -> Option<Conn> {
        let mut t = self.table.lock().expect("conns lock");
        if t.per_source.get(&source).copied().unwrap_or(0) >= CONNECTIONS_PER_SOURCE_MAX
            && !t.evict_first(Some(source))
        {
            return None;
        }
        if t.entries.len() >= CONNECTIONS_MAX && !t.evict_first(None) {
            return None;
        }
        t.next_id += 1;
        let id = t.next_id;
        let kill = Arc::new(Notify::new());
        t.entries.insert(
            id,
            Entry {
                source,
                authenticated: false,
                busy: 0,
                seq: 0,
                idle_since: Instant::now(),
                kill: kill.clone(),
            },
        );
        *t.per_source.entry(source).or_default() += 1;
        t.enidle(id);
        Some(Conn {
            conns: self.clone(),
            id,
            kill,
        })
    }

    /// Connections held now.
    pub fn len(&self) -> usize {
        self.table.lock().expect("conns lock").entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Conn {
    /// A handle for the requests of this connection.
    pub fn handle(&self) -> ConnHandle {
        ConnHandle {
            conns: self.conns.clone(),
            id: self.id,
        }
    }

    /// Completes when the connection must close: evicted, or idle for
    /// [`HEADER_READ_TIMEOUT_MS`].
    pub async fn closed(&self) {
        let timeout = Duration::from_millis(HEADER_READ_TIMEOUT_MS);
        loop {
            let deadline = {
                let t = self.conns.table.lock().expect("conns lock");
                match t.entries.get(&self.id) {
                    None => return,
                    Some(e) if e.busy > 0 => Instant::now() + timeout,
                    Some(e) => e.idle_since + timeout,
                }
            };
            if deadline <= Instant::now() {
                return;
            }
            tokio::select! {
                _ = self.kill.notified() => return,
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.conns.table.lock().expect("conns lock").remove(self.id);
    }
}

/// What a request knows of its connection: it marks it busy while it runs, and
/// authenticated once a signature checked.
#[derive(Clone)]
pub struct ConnHandle {
    conns: Arc<Conns>,
    id: u64,
}

impl ConnHandle {
    /// Marks a request in flight until the returned guard drops.
    pub fn busy(&self) -> Busy {
        let mut t = self.conns.table.lock().expect("conns lock");
        t.unidle(self.id);
        if let Some(e) = t.entries.get_mut(&self.id) {
            e.busy += 1;
        }
        Busy(self.clone())
    }

    /// Marks the connection as one an authenticated user made a request on.
    pub fn authenticated(&self) {
        let mut t = self.conns.table.lock().expect("conns lock");
        let Some(e) = t.entries.get(&self.id) else {
            return;
        };
        if e.authenticated {
            return;
        }
        // The flag is part of an idle connection's place in the eviction order.
        let idle = e.busy == 0;
        t.unidle(self.id);
        if let Some(e) = t.entries.get_mut(&self.id) {
            e.authenticated = true;
        }
        if idle {
            t.enidle(self.id);
        }
    }
}

/// A request in flight on a connection.
pub struct Busy(ConnHandle);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut t = self.0.conns.table.lock().expect("conns lock");
        let id = self.0.id;
        if let Some(e) = t.entries.get_mut(&id) {
            e.busy = e.busy.saturating_sub(1);
        }
        t.enidle(id);
    }
}

/// A stream whose writes fail once the peer has read nothing for
/// [`WRITE_STALL_TIMEOUT_MS`] while an answer waits.
pub struct Stalls<T> {
    inner: T,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> Stalls<T> {
    pub fn new(inner: T) -> Self {
        Stalls {
            inner,
            stalled: None,
        }
    }

    /// After a write made no progress: fails once the stall lasted too long.
    fn check_stall(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        let sleep = self.stalled.get_or_insert_with(|| {
            Box::pin(tokio::time::sleep(Duration::from_millis(
                WRITE_STALL_TIMEOUT_MS,
            )))
        });
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the peer read nothing of its answer for too long",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

use std::future::Future as _;

impl<T: AsyncRead + Unpin> AsyncRead for Stalls<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stalls<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.check_stall(cx).map(Err),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.check_stall(cx).map(Err),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.check_stall(cx).map(Err),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn a_full_source_evicts_its_oldest_idle_never_authenticated_connection() {
        let conns = Conns::new();
        let mut held: Vec<Conn> = (0..CONNECTIONS_PER_SOURCE_MAX)
            .map(|_| conns.admit(ip(1)).unwrap())
            .collect();
        // The first is an honest user's, authenticated; the second is busy.
        held[0].handle().authenticated();
        let busy = held[1].handle().busy();
        let newest = conns.admit(ip(1)).unwrap();
        assert_eq!(conns.len(), CONNECTIONS_PER_SOURCE_MAX);
        // The third (the oldest idle unauthenticated) went; the honest one stays.
        let t = conns.table.lock().unwrap();
        assert!(t.entries.contains_key(&held[0].id));
        assert!(t.entries.contains_key(&held[1].id));
        assert!(!t.entries.contains_key(&held[2].id));
        drop(t);
        // Another source is not affected by this one's limit.
        let other = conns.admit(ip(2)).unwrap();
        drop((busy, newest, other));
        held.clear();
        assert!(conns.is_empty());
    }

    #[test]
    fn a_source_whose_connections_are_all_busy_is_refused() {
        let conns = Conns::new();
        let held: Vec<Conn> = (0..CONNECTIONS_PER_SOURCE_MAX)
            .map(|_| conns.admit(ip(3)).unwrap())
            .collect();
        let busy: Vec<Busy> = held.iter().map(|c| c.handle().busy()).collect();
        assert!(conns.admit(ip(3)).is_none());
        drop(busy);
        assert!(conns.admit(ip(3)).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_reads_nothing_of_its_answer_is_cut_off() {
        use tokio::io::AsyncWriteExt;
        let (near, _far) = tokio::io::duplex(1024);
        let mut s = Stalls::new(near);
        let t0 = Instant::now();
        let block = vec![0u8; 4096];
        let e = loop {
            if let Err(e) = s.write_all(&block).await {
                break e;
            }
        };
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(t0.elapsed(), Duration::from_millis(WRITE_STALL_TIMEOUT_MS));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_closes_after_the_header_timeout_and_a_busy_one_does_not() {
        let conns = Conns::new();
        let idle = conns.admit(ip(4)).unwrap();
        let busy_conn = conns.admit(ip(4)).unwrap();
        let busy = busy_conn.handle().busy();
        let t0 = Instant::now();
        idle.closed().await;
        assert_eq!(t0.elapsed(), Duration::from_millis(HEADER_READ_TIMEOUT_MS));
        let still = tokio::time::timeout(
            Duration::from_millis(3 * HEADER_READ_TIMEOUT_MS),
            busy_conn.closed(),
        )
        .await;
        assert!(still.is_err(), "a busy connection was closed");
        drop(busy);
        let t1 = Instant::now();
        busy_conn.closed().await;
        assert_eq!(t1.elapsed(), Duration::from_millis(HEADER_READ_TIMEOUT_MS));
    }
}
