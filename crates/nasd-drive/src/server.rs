//! The drive's TCP server: the version handshake, then length-prefixed request frames,
//! pipelined — a connection may have up to [`INFLIGHT_PER_CONNECTION_MAX`] requests in
//! progress, answered as they complete and matched by request id. Connections are capped at
//! [`CONNECTIONS_MAX`]; frames over `FRAME_BYTES_MAX` close the connection before anything is
//! allocated for them. On shutdown the server stops accepting, lets in-flight requests finish
//! (up to [`SHUTDOWN_GRACE_MS`]) and makes every write durable.

use crate::handler::Drive;
use crate::writer::Job;
use crate::DriveError;
use nasd_proto::io::read_frame_buffered;
use nasd_proto::{frame, Hello, FRAME_BYTES_MAX, PROTOCOL_VERSION};
use std::future::Future;
use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Most client connections served at once.
pub const CONNECTIONS_MAX: usize = 1024;
/// Most requests in progress on one connection; further frames wait to be read.
pub const INFLIGHT_PER_CONNECTION_MAX: usize = 64;
/// Time a client has to send its hello.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Longest wait for in-flight requests at shutdown.
pub const SHUTDOWN_GRACE_MS: u64 = 10_000;

/// Serves `drive` on `listener` until `shutdown` completes.
pub async fn serve(
    drive: Arc<Drive>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DriveError> {
    let conns = Arc::new(Semaphore::new(CONNECTIONS_MAX));
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
                let Ok(permit) = conns.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "connection refused: {CONNECTIONS_MAX} connections open");
                    continue;
                };
                let d = drive.clone();
                tokio::spawn(async move {
                    let _ = stream.set_nodelay(true);
                    if let Err(e) = connection(d, stream).await {
                        tracing::debug!(%peer, "connection closed: {e}");
                    }
                    drop(permit);
                });
            }
        }
    }
    tracing::info!("shutting down: waiting for in-flight requests");
    let _ = tokio::time::timeout(
        Duration::from_millis(SHUTDOWN_GRACE_MS),
        conns.acquire_many(CONNECTIONS_MAX as u32),
    )
    .await;
    drive.writer().run(Job::Flush).await?;
    Ok(())
}

/// Whether a request body asks for a mutation (its op code is header byte 12, body byte 25);
/// anything unparseable is treated as a read and refused by the handler.
fn mutates(body: &[u8]) -> bool {
    use nasd_proto::OpCode;
    match body.get(25).map(|&c| OpCode::from_u8(c)) {
        Some(Ok(op)) => !matches!(
            op,
            OpCode::Read | OpCode::GetAttr | OpCode::BlocksRequired | OpCode::Inquiry
        ),
        _ => false,
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

async fn connection(drive: Arc<Drive>, stream: TcpStream) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::with_capacity(256 << 10, r);
    let hello = tokio::time::timeout(
        Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
        read_frame_buffered(&mut r, FRAME_BYTES_MAX),
    )
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no hello"))??;
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
    // Replies are written by whichever task finishes, under a lock, as they complete.
    let w = Arc::new(tokio::sync::Mutex::new(w));
    let inflight = Arc::new(Semaphore::new(INFLIGHT_PER_CONNECTION_MAX));
    let result = loop {
        let permit = inflight
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        let body = match read_frame_buffered(&mut r, FRAME_BYTES_MAX).await {
            Ok(Some(b)) => b,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let d = drive.clone();
        let w = w.clone();
        tokio::spawn(async move {
            // Reads run on the runtime's worker: page-cache reads and snapshot lookups are short,
            // and a hop to the blocking pool would cost more than the work. Mutations wait for
            // the writer thread's commit, so they wait on the blocking pool.
            let reply = if mutates(&body) {
                tokio::task::spawn_blocking(move || d.handle(body))
                    .await
                    .ok()
            } else {
                Some(d.handle(body))
            };
            if let Some(r) = reply {
                let len = ((r.head.len() + r.data.len()) as u32).to_le_bytes();
                let mut w = w.lock().await;
                let _ = write_all_slices(&mut *w, &[&len, &r.head, &r.data]).await;
            }
            drop(permit);
        });
    };
    // Let in-flight requests answer before the connection closes.
    let _ = inflight
        .acquire_many(INFLIGHT_PER_CONNECTION_MAX as u32)
        .await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use nasd_proto::{
        CapField, KeyType, Nonce, ObjectId, OpCode, PartitionId, Protection, RequestHeader,
    };

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
            assert_eq!(mutates(&h.encode()), want, "{op:?}");
        }
        assert!(!mutates(&[1, 2, 3]));
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
