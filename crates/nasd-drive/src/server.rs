//! The drive's TCP server: the version handshake, then length-prefixed request frames,
//! pipelined — a connection may have up to [`INFLIGHT_PER_CONNECTION_MAX`] requests in
//! progress, answered as they complete and matched by request id. Connections are capped at
//! [`CONNECTIONS_MAX`]; frames over `FRAME_BYTES_MAX` close the connection before anything is
//! allocated for them. On shutdown the server stops accepting, lets in-flight requests finish
//! (up to [`SHUTDOWN_GRACE_MS`]) and makes every write durable.

use crate::handler::Drive;
use crate::writer::Job;
use crate::DriveError;
use nasd_proto::{frame, Hello, FRAME_BYTES_MAX, PROTOCOL_VERSION};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
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
/// Replies with at most this much data go out in one write, their data copied behind the
/// header: a copy of a few KiB costs far less than a second system call, which on loopback
/// also runs the receiver's TCP path and can wake the client twice. Larger data is written
/// where it lies, after the header.
pub const REPLY_COPY_BYTES_MAX: usize = 16 << 10;
/// Request bodies with at least this many bytes still to come are read from the socket
/// straight into the body rather than through the connection's buffer.
pub const DIRECT_READ_BYTES_MIN: usize = 32 << 10;

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

/// Reads one frame body; `Ok(None)` at a clean end of stream. Frames over `FRAME_BYTES_MAX`
/// are refused before anything is allocated for them.
async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u32::from_le_bytes(len) as usize;
    if n == 0 || n > FRAME_BYTES_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {n} bytes refused"),
        ));
    }
    // What the buffer holds comes from it; a large remainder is read from the socket straight
    // into the body's spare capacity (one copy, not two through the buffer, and no zeroing).
    // Every read is bounded by the rest of the frame, so none takes the next frame's bytes.
    let mut body = Vec::with_capacity(n);
    let held = r.buffer();
    let k = held.len().min(n);
    body.extend_from_slice(&held[..k]);
    r.consume(k);
    while body.len() < n {
        let rest = (n - body.len()) as u64;
        let got = if rest >= DIRECT_READ_BYTES_MIN as u64 {
            r.get_mut().take(rest).read_buf(&mut body).await?
        } else {
            (&mut *r).take(rest).read_buf(&mut body).await?
        };
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(Some(body))
}

async fn connection(drive: Arc<Drive>, stream: TcpStream) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::with_capacity(256 << 10, r);
    let hello = tokio::time::timeout(
        Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
        read_frame(&mut r),
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
        let body = match read_frame(&mut r).await {
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
                let copied = if r.data.len() <= REPLY_COPY_BYTES_MAX {
                    r.data.len()
                } else {
                    0
                };
                let mut head = Vec::with_capacity(4 + r.head.len() + copied);
                head.extend_from_slice(&len);
                head.extend_from_slice(&r.head);
                head.extend_from_slice(&r.data[..copied]);
                let mut w = w.lock().await;
                if w.write_all(&head).await.is_ok() && copied < r.data.len() {
                    let _ = w.write_all(&r.data).await;
                }
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
}
