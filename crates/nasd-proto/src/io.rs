//! Frames on an async byte stream (tokio), shared by the drive's server, the client's drive
//! connections and the manager's session: the 4-byte length prefix checked against a limit
//! before anything is allocated, bodies read without zeroing and, when large, straight from the
//! socket rather than through a buffer, and no read ever taking bytes of the frame behind.
//! Only with the `tokio` feature; the rest of this crate does no I/O.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// Reads one length-prefixed frame body; `Ok(None)` at a clean end of stream. Frames over
/// `max` bytes are refused before anything is allocated for them.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let Some(n) = read_frame_len(r, max).await? else {
        return Ok(None);
    };
    // Read into spare capacity: no zeroing of a buffer about to be overwritten.
    let mut body = Vec::with_capacity(n);
    r.take(n as u64).read_to_end(&mut body).await?;
    if body.len() != n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(body))
}

/// Bodies with at least this many bytes still to come are read from the socket straight into
/// the body, not through the reader's buffer: one copy instead of two. Shorter ones go through
/// the buffer, where one system call also picks up the frames behind them.
pub const DIRECT_READ_BYTES_MIN: usize = 32 << 10;

/// [`read_frame`] from a buffered reader, through [`read_into`].
pub async fn read_frame_buffered<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let Some(n) = read_frame_len(r, max).await? else {
        return Ok(None);
    };
    let mut body = vec![];
    read_into(r, &mut body, n).await?;
    Ok(Some(body))
}

/// Appends exactly `n` bytes from `r` to `out`: what the buffer holds is taken from it, and a
/// remainder of at least [`DIRECT_READ_BYTES_MIN`] is read from the socket into `out`'s spare
/// capacity (no zeroing, one copy). Every read is bounded by what is left of the `n`, so none
/// takes bytes that follow them.
pub async fn read_into<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    out: &mut Vec<u8>,
    n: usize,
) -> std::io::Result<()> {
    out.reserve_exact(n);
    let end = out.len() + n;
    let held = r.buffer();
    let k = held.len().min(n);
    out.extend_from_slice(&held[..k]);
    r.consume(k);
    while out.len() < end {
        let rest = end - out.len();
        let got = if rest >= DIRECT_READ_BYTES_MIN {
            r.get_mut().take(rest as u64).read_buf(out).await?
        } else {
            (&mut *r).take(rest as u64).read_buf(out).await?
        };
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// A frame's length prefix; `Ok(None)` at a clean end of stream, an error over `max` or at 0.
pub async fn read_frame_len<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Option<usize>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u32::from_le_bytes(len) as usize;
    if n == 0 || n > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {n} bytes refused"),
        ));
    }
    Ok(Some(n))
}

/// Writes one length-prefixed frame and flushes it.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: &[u8]) -> std::io::Result<()> {
    let mut f = Vec::with_capacity(4 + body.len());
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(body);
    w.write_all(&f).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of every size class back to back, written in odd-sized pieces: each comes back
    /// whole, none takes bytes of the next, whether read through the buffer or around it.
    #[tokio::test]
    async fn buffered_frames_come_back_whole_and_in_order() {
        let sizes = [
            1usize,
            100,
            DIRECT_READ_BYTES_MIN - 1,
            DIRECT_READ_BYTES_MIN,
            5,
            3 * DIRECT_READ_BYTES_MIN + 7,
            17,
            300 << 10,
        ];
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect())
            .collect();
        let mut wire = vec![];
        for f in &frames {
            wire.extend_from_slice(&(f.len() as u32).to_le_bytes());
            wire.extend_from_slice(f);
        }
        let (mut tx, rx) = tokio::io::duplex(8 << 10);
        let writer = tokio::spawn(async move {
            for piece in wire.chunks(4093) {
                tx.write_all(piece).await.unwrap();
            }
        });
        let mut r = BufReader::with_capacity(256 << 10, rx);
        for f in &frames {
            let got = read_frame_buffered(&mut r, 1 << 20).await.unwrap().unwrap();
            assert!(got == *f, "frame of {} bytes", f.len());
        }
        writer.await.unwrap();
        assert!(read_frame_buffered(&mut r, 1 << 20)
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn buffered_frames_over_the_limit_or_cut_short_are_errors() {
        let (mut tx, rx) = tokio::io::duplex(1 << 10);
        tx.write_all(&100u32.to_le_bytes()).await.unwrap();
        tx.write_all(&[0; 10]).await.unwrap();
        drop(tx);
        let mut r = BufReader::new(rx);
        assert!(read_frame_buffered(&mut r, 50).await.is_err());
        let (mut tx, rx) = tokio::io::duplex(1 << 10);
        tx.write_all(&100u32.to_le_bytes()).await.unwrap();
        tx.write_all(&[0; 10]).await.unwrap();
        drop(tx);
        let mut r = BufReader::new(rx);
        let e = read_frame_buffered(&mut r, 1000).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
