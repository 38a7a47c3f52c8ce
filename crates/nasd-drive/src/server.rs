//! The drive's TCP server: the version handshake, then length-prefixed request frames,
//! pipelined — a connection may have up to [`INFLIGHT_PER_CONNECTION_MAX`] requests in
//! progress, answered as they complete and matched by request id. Frames over
//! `FRAME_BYTES_MAX` close the connection before anything is allocated for them. On shutdown
//! the server stops accepting, lets in-flight requests finish (up to [`SHUTDOWN_GRACE_MS`])
//! and makes every write durable.
//!
//! What a peer can hold is bounded (issue: unauthenticated and authenticated peers pinned the
//! drive's connections and memory):
//! - connections: [`crate::conns`] (limits in all and per source; unproved peers give way);
//! - time: a connection must say hello and send a request that passes the checks of seed 002
//!   §2.4 within [`PROVE_DEADLINE_MS`]; a proved one is closed after [`IDLE_TIMEOUT_MS`] with
//!   nothing in flight; a frame must arrive within [`FRAME_RECEIVE_TIMEOUT_MS`] of its first
//!   byte; a reply must leave within [`REPLY_WRITE_TIMEOUT_MS`], else the peer is not reading
//!   and the connection is closed;
//! - memory: an unproved connection's frame body grows only as its bytes arrive (a proved
//!   one's is allocated at once, the fast path); each connection reserves, before it reads a
//!   request's body and again before it runs it, the body's bytes and the most its reply can
//!   hold, out of [`CONNECTION_BUFFER_BYTES_MAX`], released once the reply is written — so a
//!   peer that pipelines large reads and never reads the replies stops being read from, and
//!   holds no more than that.

use crate::conns::{Conns, Slot};
use crate::handler::{Drive, ReplyBytes};
use crate::writer::Job;
use crate::DriveError;
use nasd_proto::io::{read_frame_len, read_into};
use nasd_proto::{frame, Hello, OpCode, RequestHeader, FRAME_BYTES_MAX, PROTOCOL_VERSION};
use std::future::Future;
use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub use crate::conns::{CONNECTIONS_MAX, CONNECTIONS_PER_SOURCE_MAX};

/// Most requests in progress on one connection; further frames wait to be read.
pub const INFLIGHT_PER_CONNECTION_MAX: usize = 64;
/// Time from accepting a connection to its first request that passes the checks.
pub const PROVE_DEADLINE_MS: u64 = 10_000;
/// A proved connection with nothing in flight and no new frame for this long is closed; a
/// client reconnects when it needs the drive again.
pub const IDLE_TIMEOUT_MS: u64 = 300_000;
/// Time for a whole frame to arrive once its first byte has (18 MiB at 0.6 MB/s).
pub const FRAME_RECEIVE_TIMEOUT_MS: u64 = 30_000;
/// Time for a reply to leave, waiting behind earlier replies included (18 MiB at 0.3 MB/s).
pub const REPLY_WRITE_TIMEOUT_MS: u64 = 60_000;
/// Most bytes of request bodies and (bounds of) replies one connection holds at once.
pub const CONNECTION_BUFFER_BYTES_MAX: usize = 64 << 20;
/// Longest wait for in-flight requests at shutdown.
pub const SHUTDOWN_GRACE_MS: u64 = 10_000;
/// The socket read buffer of a connection: small frames are read many at a time through it;
/// large bodies bypass it.
pub const READ_BUFFER_BYTES: usize = 64 << 10;
/// Longest hello (it is 7 bytes).
const HELLO_BYTES_MAX: usize = 64;
/// How often a connection waiting for a frame looks at its deadlines.
const WAIT_STEP_MS: u64 = 1_000;
/// First allocation for an unproved connection's frame body; it doubles as bytes arrive.
const UNPROVED_BODY_STEP_BYTES: usize = 64 << 10;

/// The budget is counted in KiB so a whole one fits a semaphore's `u32` acquisitions.
const BUDGET_UNIT_BYTES: usize = 1024;
const _: () = assert!(CONNECTION_BUFFER_BYTES_MAX >= 2 * FRAME_BYTES_MAX);
const _: () = assert!(CONNECTION_BUFFER_BYTES_MAX / BUDGET_UNIT_BYTES <= u32::MAX as usize);

fn units(bytes: usize) -> u32 {
    bytes.div_ceil(BUDGET_UNIT_BYTES) as u32
}

/// Serves `drive` on `listener` until `shutdown` completes.
pub async fn serve(
    drive: Arc<Drive>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DriveError> {
    let conns = Conns::default();
    // One clone per request being run: shutdown waits for the count to fall back to one.
    let running = Arc::new(());
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Some(slot) = conns.admit(peer.ip()) else {
                    tracing::warn!(%peer, "connection refused: every place is held by proved connections");
                    continue;
                };
                let slot = Arc::new(slot);
                let (d, running) = (drive.clone(), running.clone());
                let task = tokio::spawn({
                    let slot = slot.clone();
                    async move {
                        let _ = stream.set_nodelay(true);
                        if let Err(e) = connection(d, stream, slot, running).await {
                            tracing::debug!(%peer, "connection closed: {e}");
                        }
                    }
                });
                slot.set_task(task.abort_handle());
            }
        }
    }
    tracing::info!("shutting down: waiting for in-flight requests");
    conns.close_all();
    let t0 = Instant::now();
    while Arc::strong_count(&running) > 1 && t0.elapsed() < Duration::from_millis(SHUTDOWN_GRACE_MS)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drive.writer().run(Job::Flush).await?;
    Ok(())
}

/// Whether a request asks for a mutation, by its op code ([`RequestHeader::op_code_of`]);
/// anything unparseable is treated as a read and refused by the handler.
fn mutates(op: Option<OpCode>) -> bool {
    match op {
        Some(op) => !matches!(
            op,
            OpCode::Read | OpCode::GetAttr | OpCode::BlocksRequired | OpCode::Inquiry
        ),
        None => false,
    }
}

/// Writes `parts` back to back, with one vectored write (`writev`) whenever the socket takes
/// them whole. A reply's length, header and data leave in one system call wherever its data lies
/// and however large it is: on loopback each `send` also runs the receiver's TCP path and can
/// wake the client, so a reply must not cost a second one.
async fn write_all_slices<W: AsyncWrite + Unpin>(
    w: &mut W,
    parts: &[&[u8]],
) -> std::io::Result<()> {
    const SLICES_MAX: usize = 4;
    let (mut part, mut at) = (0, 0);
    while part < parts.len() {
        if at == parts[part].len() {
            (part, at) = (part + 1, 0);
            continue;
        }
        let mut slices = [IoSlice::new(&[]); SLICES_MAX];
        let rest = std::iter::once(&parts[part][at..]).chain(parts[part + 1..].iter().copied());
        let mut n = 0;
        for (slot, p) in slices.iter_mut().zip(rest) {
            *slot = IoSlice::new(p);
            n += 1;
        }
        let mut wrote = w.write_vectored(&slices[..n]).await?;
        if wrote == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        // Step past what went out: whole parts, then into the first one not finished.
        while wrote > 0 {
            let left = parts[part].len() - at;
            if wrote < left {
                at += wrote;
                break;
            }
            wrote -= left;
            (part, at) = (part + 1, 0);
        }
    }
    Ok(())
}

fn timed_out(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_string())
}

async fn connection(
    drive: Arc<Drive>,
    stream: TcpStream,
    slot: Arc<Slot>,
    running: Arc<()>,
) -> std::io::Result<()> {
    let prove_by = Instant::now() + Duration::from_millis(PROVE_DEADLINE_MS);
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::with_capacity(READ_BUFFER_BYTES, r);
    let hello = tokio::time::timeout_at(prove_by, async {
        let n = read_frame_len(&mut r, HELLO_BYTES_MAX).await?;
        let mut b = vec![];
        if let Some(n) = n {
            read_into(&mut r, &mut b, n).await?;
        }
        Ok::<_, std::io::Error>(n.map(|_| b))
    })
    .await
    .map_err(|_| timed_out("no hello"))??;
    let Some(hello) = hello else { return Ok(()) };
    match Hello::decode(&hello) {
        Ok(h) if h.version == PROTOCOL_VERSION => {}
        _ => {
            // Answer with our version so the client can say what is wrong, then close.
            w.write_all(&frame(&drive.welcome().encode())).await?;
            return Ok(());
        }
    }
    w.write_all(&frame(&drive.welcome().encode())).await?;
    // Replies are written by whichever task finishes, under a lock, as they complete; the
    // writer is taken away (closing the socket) when one cannot be written in time.
    let w = Arc::new(tokio::sync::Mutex::new(Some(w)));
    let inflight = Arc::new(Semaphore::new(INFLIGHT_PER_CONNECTION_MAX));
    let budget = Arc::new(Semaphore::new(units(CONNECTION_BUFFER_BYTES_MAX) as usize));
    // One timer for the connection's life, not one per frame: it wakes the wait for the next
    // frame now and then to look at the deadlines.
    let mut tick = tokio::time::interval(Duration::from_millis(WAIT_STEP_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let result = loop {
        let permit = inflight
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        match await_frame(&mut r, &slot, prove_by, &inflight, &mut tick).await {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
        let (body, held) = match receive(&mut r, &slot, &budget).await {
            Ok(x) => x,
            Err(e) => break Err(e),
        };
        let (body, mut reserved) = body;
        let reply_bound = units(Drive::reply_bytes_bound(&body));
        // One reservation for the request's body and its reply, released once the reply left.
        reserved.merge(
            budget
                .clone()
                .acquire_many_owned(reply_bound)
                .await
                .expect("never closed"),
        );
        let (d, w, slot, running) = (drive.clone(), w.clone(), slot.clone(), running.clone());
        tokio::spawn(async move {
            // Reads run on the runtime's worker: page-cache reads and snapshot lookups are short,
            // and a hop to the blocking pool would cost more than the work. Mutations wait for
            // the writer thread's commit, and reads of a slow disk (`DriveOptions::slow`) wait
            // for its seeks, so they wait on the blocking pool.
            let (op, bytes_in, started) =
                (RequestHeader::op_code_of(&body), body.len(), Instant::now());
            // A handler that panicked answers nothing: the connection is closed instead, so
            // its client learns at once rather than waiting for a reply that never comes.
            let reply = if mutates(op) || d.options().slow() {
                let d = d.clone();
                tokio::task::spawn_blocking(move || d.handle(body))
                    .await
                    .ok()
            } else {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.handle(body))).ok()
            };
            if reply.is_none() {
                tracing::error!("a request's handler panicked; closing its connection");
                close(&w, &slot).await;
            }
            if let Some(r) = &reply {
                d.record(op, bytes_in, r, started.elapsed());
            }
            slot.release(held);
            if let Some(r) = reply {
                if r.authenticated {
                    slot.prove();
                }
                send(&w, &slot, &r).await;
            }
            drop((reserved, permit, running));
        });
    };
    // Let in-flight requests answer before the connection closes.
    let _ = inflight
        .acquire_many(INFLIGHT_PER_CONNECTION_MAX as u32)
        .await;
    result
}

/// Waits, without consuming anything, for the first byte of the next frame: `Ok(false)` at a
/// clean end of stream, an error when a deadline passes with nothing in flight (an unproved
/// connection's [`PROVE_DEADLINE_MS`], a proved one's [`IDLE_TIMEOUT_MS`]).
async fn await_frame(
    r: &mut BufReader<OwnedReadHalf>,
    slot: &Slot,
    prove_by: Instant,
    inflight: &Semaphore,
    tick: &mut tokio::time::Interval,
) -> std::io::Result<bool> {
    if !r.buffer().is_empty() {
        return Ok(true); // pipelined frames
    }
    let mut idle_since = None;
    loop {
        // `fill_buf` is cancel-safe: losing the race to the tick loses no byte.
        tokio::select! {
            biased;
            b = r.fill_buf() => return b.map(|b| !b.is_empty()),
            _ = tick.tick() => {}
        }
        // The caller holds one permit, for the frame awaited here.
        if inflight.available_permits() + 1 < INFLIGHT_PER_CONNECTION_MAX {
            continue; // a request in flight may yet prove the connection, or answer
        }
        if !slot.proved() && Instant::now() >= prove_by {
            return Err(timed_out("no request passed the checks in time"));
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if slot.proved() && since.elapsed() >= Duration::from_millis(IDLE_TIMEOUT_MS) {
            return Err(timed_out("idle"));
        }
    }
}

/// Reads one frame within [`FRAME_RECEIVE_TIMEOUT_MS`], its body's bytes reserved from the
/// connection's `budget` first; returns the body with its reservation, and the bytes booked to
/// the unproved-connection bound (to release once the request ran).
async fn receive(
    r: &mut BufReader<OwnedReadHalf>,
    slot: &Slot,
    budget: &Arc<Semaphore>,
) -> std::io::Result<((Vec<u8>, OwnedSemaphorePermit), usize)> {
    let timeout = Duration::from_millis(FRAME_RECEIVE_TIMEOUT_MS);
    // What is already buffered needs no timer.
    let n = if r.buffer().len() >= 4 {
        read_frame_len(r, FRAME_BYTES_MAX).await?
    } else {
        tokio::time::timeout(timeout, read_frame_len(r, FRAME_BYTES_MAX))
            .await
            .map_err(|_| timed_out("frame length"))??
    }
    .ok_or(std::io::ErrorKind::UnexpectedEof)?;
    let reserved = budget
        .clone()
        .acquire_many_owned(units(n))
        .await
        .expect("never closed");
    let mut body = vec![];
    let mut held = 0;
    if slot.proved() && r.buffer().len() >= n {
        read_into(r, &mut body, n).await?;
        return Ok(((body, reserved), 0));
    }
    tokio::time::timeout(timeout, async {
        if slot.proved() {
            return read_into(r, &mut body, n).await;
        }
        // Unproved: memory follows the bytes that arrived, and counts toward the bound on
        // what all unproved connections hold.
        while body.len() < n {
            let step = (n - body.len()).min(body.len().max(UNPROVED_BODY_STEP_BYTES));
            held += step;
            if !slot.hold(step) {
                return Err(std::io::Error::other("closed to make room"));
            }
            read_into(r, &mut body, step).await?;
        }
        Ok(())
    })
    .await
    .map_err(|_| timed_out("frame body"))
    .flatten()
    .inspect_err(|_| slot.release(held))?;
    Ok(((body, reserved), held))
}

/// Writes a reply within [`REPLY_WRITE_TIMEOUT_MS`]; on failure closes the connection (its
/// writer is taken away, and its reading stops). A reply the socket takes at once, the common
/// case, costs no timer (dropping a tokio timer takes the runtime's timer lock).
async fn send(w: &tokio::sync::Mutex<Option<OwnedWriteHalf>>, slot: &Slot, r: &ReplyBytes) {
    let len = ((r.head.len() + r.data.len()) as u32).to_le_bytes();
    let write = async {
        match w.lock().await.as_mut() {
            Some(w) => write_all_slices(w, &[&len, &r.head, &r.data]).await,
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    };
    let mut write = std::pin::pin!(write);
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(write.as_mut().poll(cx))).await;
    let wrote = match first {
        std::task::Poll::Ready(r) => r,
        // Boxed: the timer is large and rarely needed, and every request's task carries this
        // future's state.
        std::task::Poll::Pending => Box::pin(tokio::time::timeout(
            Duration::from_millis(REPLY_WRITE_TIMEOUT_MS),
            write,
        ))
        .await
        .unwrap_or_else(|_| Err(timed_out("reply not read"))),
    };
    if wrote.is_err() {
        close(w, slot).await;
    }
}

/// Ends a connection: its write half is dropped (the peer reads its end) and its reader stops.
async fn close(w: &tokio::sync::Mutex<Option<OwnedWriteHalf>>, slot: &Slot) {
    w.lock().await.take();
    slot.close();
}

#[cfg(test)]
mod tests {
    use super::*;
    use nasd_proto::{CapField, KeyType, Nonce, ObjectId, PartitionId, Protection};

    #[test]
    fn mutates_reads_the_op_code_where_the_header_puts_it() {
        for &op in OpCode::ALL {
            let h = RequestHeader {
                request_id: 1,
                key_type: KeyType::Working,
                protection: Protection::NONE,
                partition: PartitionId(1),
                object: ObjectId(2),
                op,
                nonce: Nonce::default(),
                cap: CapField::None,
                args: vec![],
                digest: [0; 32],
            };
            let want = !matches!(
                op,
                OpCode::Read | OpCode::GetAttr | OpCode::BlocksRequired | OpCode::Inquiry
            );
            assert_eq!(
                mutates(RequestHeader::op_code_of(&h.encode())),
                want,
                "{op:?}"
            );
        }
        assert!(!mutates(RequestHeader::op_code_of(&[1, 2, 3])));
    }

    /// A socket that takes at most `take` bytes per call, as a full send buffer does.
    struct Trickle {
        take: usize,
        got: Vec<u8>,
        calls: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(buf)])
        }
        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.calls += 1;
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(self.take - n);
                self.got.extend_from_slice(&b[..k]);
                n += k;
            }
            std::task::Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_reply_leaves_whole_and_in_order_however_the_socket_cuts_it() {
        let len = 1234u32.to_le_bytes();
        let head: Vec<u8> = (0..97).map(|i| i as u8).collect();
        let data: Vec<u8> = (0..1000).map(|i| (i * 7 + 1) as u8).collect();
        for parts in [
            vec![&len[..], &head[..], &data[..]],
            vec![&len[..], &head[..], &[][..]],
            vec![&[][..], &head[..], &[][..], &data[..]],
        ] {
            let want = parts.concat();
            for take in [1, 3, 4, 5, 96, 101, 102, 1000, 1101, 1 << 20] {
                let mut t = Trickle {
                    take,
                    got: vec![],
                    calls: 0,
                };
                write_all_slices(&mut t, &parts).await.unwrap();
                assert!(t.got == want, "take {take}");
                assert_eq!(t.calls, want.len().div_ceil(take), "take {take}");
            }
        }
        let mut stuck = Trickle {
            take: 0,
            got: vec![],
            calls: 0,
        };
        let e = write_all_slices(&mut stuck, &[&len]).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WriteZero);
    }
}
