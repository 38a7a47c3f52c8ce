//! Bytes in and out of the cluster without whole-object buffers. [`Writer`] takes a stream of
//! any-sized chunks (a request body, pieces of another object) into a staged upload: it cuts
//! them into pieces of the layout's transfer size (never two writes in one stripe group),
//! keeps [`PIECES_IN_FLIGHT`] of them on their way to the drives while the next arrives, and
//! digests every byte on the way. [`pieces`] reads an object back as an ordered stream of
//! pieces, the next ones fetched while the current one is sent. Memory per transfer is a few
//! pieces, whatever the object's size. An SSE-C object's bytes are enciphered as they enter
//! a [`Writer`] (after they are digested) and deciphered as [`copy_range`] reads them.

use crate::digest::Digests;
use futures_util::stream::{self, Stream, StreamExt};
use nasd_client::files::{Client, FsError, Upload};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Pieces a transfer keeps in flight at once, each way.
pub const PIECES_IN_FLIGHT: usize = 4;

/// An upload being filled from a stream of bytes.
pub struct Writer {
    client: Arc<Client>,
    upload: Upload,
    piece: usize,
    buf: Vec<u8>,
    /// Offset of `buf[0]` in the object.
    off: u64,
    inflight: tokio::task::JoinSet<Result<(), FsError>>,
    digests: Digests,
    /// SSE-C: the keystream the bytes are enciphered with once digested.
    cipher: Option<crate::sse::PartStream>,
}

/// What a finished [`Writer`] wrote.
pub struct Written {
    pub upload: Upload,
    pub size: u64,
    pub md5: [u8; 16],
    pub checksums: BTreeMap<String, String>,
}

impl Writer {
    /// Starts writing `upload`, digesting with `digests`.
    pub async fn new(
        client: Arc<Client>,
        upload: Upload,
        digests: Digests,
    ) -> Result<Writer, FsError> {
        let piece = client.upload_granule(&upload).await?.max(1) as usize;
        Ok(Writer {
            client,
            upload,
            piece,
            buf: Vec::with_capacity(piece),
            off: 0,
            inflight: tokio::task::JoinSet::new(),
            digests,
            cipher: None,
        })
    }

    /// Enciphers every byte written from here on with `stream` (SSE-C).
    pub fn encipher(mut self, stream: Option<crate::sse::PartStream>) -> Writer {
        self.cipher = stream;
        self
    }

    /// The upload being written.
    pub fn upload(&self) -> &Upload {
        &self.upload
    }

    pub async fn write(&mut self, mut data: &[u8]) -> Result<(), FsError> {
        self.digests.update(data);
        while !data.is_empty() {
            let take = (self.piece - self.buf.len()).min(data.len());
            let at = self.buf.len();
            self.buf.extend_from_slice(&data[..take]);
            if let Some(c) = self.cipher.as_mut() {
                c.apply(&mut self.buf[at..]);
            }
            data = &data[take..];
            if self.buf.len() == self.piece {
                self.send().await?;
            }
        }
        Ok(())
    }

    /// Sends the buffered piece, first waiting for room among the pieces in flight.
    async fn send(&mut self) -> Result<(), FsError> {
        while self.inflight.len() >= PIECES_IN_FLIGHT {
            join_one(&mut self.inflight).await?;
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(self.piece));
        let (c, u, off) = (self.client.clone(), self.upload.clone(), self.off);
        self.off += data.len() as u64;
        self.inflight
            .spawn(async move { c.upload_write(&u, off, &data).await });
        Ok(())
    }

    /// Sends the rest and waits until every byte is on the drives; the caller commits the
    /// upload (or aborts it when a digest does not match).
    pub async fn finish(mut self) -> Result<Written, FsError> {
        if !self.buf.is_empty() {
            self.send().await?;
        }
        while !self.inflight.is_empty() {
            join_one(&mut self.inflight).await?;
        }
        let size = self.off;
        self.client.upload_size(&self.upload, size).await?;
        let (md5, checksums) = self.digests.finish();
        Ok(Written {
            upload: self.upload,
            size,
            md5,
            checksums,
        })
    }

    /// Gives the upload up (nothing becomes visible).
    pub async fn abort(mut self) {
        self.inflight.abort_all();
        while self.inflight.join_next().await.is_some() {}
        self.client.abort_upload(&self.upload).await;
    }
}

async fn join_one(set: &mut tokio::task::JoinSet<Result<(), FsError>>) -> Result<(), FsError> {
    match set.join_next().await {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(FsError::Usage(format!("a write task failed: {e}"))),
        None => Ok(()),
    }
}

/// `[start, end)` of `path` as an ordered stream of pieces of at most `piece` bytes, with up
/// to [`PIECES_IN_FLIGHT`] being read ahead, all from one version of the file: the first
/// piece is read before the stream is made (so a missing file is an error the caller can
/// still answer), the others with its grant ([`Client::read_pinned`]), so an object replaced
/// mid-stream ends the stream with an error instead of mixing versions. A piece that comes
/// back short (the file shrank) is an error too.
pub async fn pieces(
    client: Arc<Client>,
    path: String,
    start: u64,
    end: u64,
    piece: u64,
) -> Result<impl Stream<Item = Result<Vec<u8>, FsError>> + Send, FsError> {
    let piece = piece.max(1);
    let short = |p: &str| FsError::Usage(format!("{p}: the object changed while it was read"));
    let first_len = piece.min(end.saturating_sub(start));
    let (first, grant) = client.read_first(&path, start, first_len).await?;
    if first.len() as u64 != first_len {
        return Err(short(&path));
    }
    let offsets = (start + first_len..end).step_by(piece as usize);
    // Each piece is read by a task of its own, so a read runs to its end whether or not
    // the stream is polled: a client that stops reading its answer stalls only its own
    // stream, never a drive connection that other requests share.
    let rest = stream::iter(offsets)
        .map(move |off| {
            let (c, p, g) = (client.clone(), path.clone(), grant.clone());
            let read = tokio::spawn(async move {
                let len = piece.min(end - off);
                let d = c.read_pinned(&g, off, len).await?;
                if d.len() as u64 != len {
                    return Err(short(&p));
                }
                Ok(d)
            });
            async move {
                read.await
                    .map_err(|e| FsError::Usage(format!("a read task failed: {e}")))?
            }
        })
        .buffered(PIECES_IN_FLIGHT);
    Ok(stream::once(async move { Ok(first) }).chain(rest))
}

/// Writes `[start, end)` of `path` (one version of it) into `w`, deciphered with `dec` when
/// the object is SSE-C.
pub async fn copy_range(
    client: &Arc<Client>,
    path: &str,
    start: u64,
    end: u64,
    w: &mut Writer,
    dec: Option<&crate::sse::ObjectCipher>,
) -> Result<(), FsError> {
    let piece = piece_of(client, path).await?;
    let s = pieces(client.clone(), path.to_string(), start, end, piece).await?;
    let mut s = std::pin::pin!(s);
    let mut at = start;
    while let Some(p) = s.next().await {
        let mut p = p?;
        if let Some(d) = dec {
            d.apply(at, &mut p);
        }
        at += p.len() as u64;
        w.write(&p).await?;
    }
    Ok(())
}

/// The transfer piece of `path` (its layout's natural request size).
pub async fn piece_of(client: &Client, path: &str) -> Result<u64, FsError> {
    let o = client.open(path, false).await?;
    Ok(client.stack(&o)?.transfer_bytes().max(64 << 10))
}
