//! The seam between the layers of the file stack. A file's content is served by a stack —
//! encryption ([`crate::e2e::crypt`]) over a layout (stripe, mirror, erasure code) over one object per drive
//! — and every layer offers the one above it the same byte-addressed interface, [`FileIo`],
//! the way crucible composes a `Volume` of `SubVolume`s behind `BlockIO`. Each layer can be
//! tested alone against the in-memory one ([`crate::memio::MemIo`]).

use crate::ClientError;
use std::future::Future;
use std::pin::Pin;

/// What a whole-file transfer asks of each drive per request (the piece one object layer
/// moves; a striped layer moves this much per component).
pub const TRANSFER_PIECE_BYTES: u64 = crate::files::CHUNK_BYTES as u64;

/// A layer's future: boxed, so the trait stays object safe.
pub type IoFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, IoError>> + Send + 'a>>;

/// What a read returns: the bytes and the size of the content as that read saw it, so a
/// caller learns the size from the read itself (no separate getattr).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOut {
    pub data: Vec<u8>,
    pub size: u64,
}

/// Why a layer failed, naming the component object (by its drive's address) where a drive
/// was the cause.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("{error}")]
    Drive {
        /// Index of the component in the layout.
        component: usize,
        addr: String,
        error: ClientError,
    },
    /// Too few components answered to serve the request (their errors in the log).
    #[error("{0}")]
    Unavailable(String),
    /// The components disagree in a way no decoding can resolve (more corruption than the
    /// code corrects); nothing was returned or written.
    #[error("{0}")]
    Uncorrectable(String),
    #[error("{0}")]
    Usage(String),
}

impl IoError {
    /// The drive status behind the error, when a drive refused.
    pub fn status(&self) -> Option<nasd_proto::Status> {
        match self {
            IoError::Drive { error, .. } => error.status(),
            _ => None,
        }
    }
}

/// A byte range: (offset, length).
pub type Span = (u64, u64);

/// How many bytes of `span` lie before `size` (a read is cut at the end of the content).
pub fn held(span: Span, size: u64) -> u64 {
    size.saturating_sub(span.0).min(span.1)
}

/// One file's content as a layer offers it.
pub trait FileIo: Send + Sync {
    /// Reads up to `len` bytes at `offset` (fewer at the end of the content).
    fn read(&self, offset: u64, len: u64) -> IoFuture<'_, ReadOut>;
    /// Reads several ranges at once (scatter-gather, one drive request where the layer can):
    /// the bytes of each, cut at the end of the content ([`held`]), concatenated in order.
    fn read_vectored<'a>(&'a self, spans: &'a [Span]) -> IoFuture<'a, ReadOut> {
        Box::pin(async move {
            let mut out = ReadOut::default();
            for &(offset, len) in spans {
                let r = self.read(offset, len).await?;
                out.data.extend_from_slice(&r.data);
                out.size = r.size;
            }
            Ok(out)
        })
    }
    /// Writes `data` at `offset`; durable when the future completes.
    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> IoFuture<'a, ()>;
    /// Writes several ranges at once; `data` is their bytes concatenated in order.
    fn write_vectored<'a>(&'a self, spans: &'a [Span], data: &'a [u8]) -> IoFuture<'a, ()> {
        Box::pin(async move {
            let mut at = 0usize;
            for &(offset, len) in spans {
                self.write(offset, &data[at..at + len as usize]).await?;
                at += len as usize;
            }
            Ok(())
        })
    }
    /// The content's size now.
    fn size(&self) -> IoFuture<'_, u64>;
    /// Cuts the content short or extends it with zeros.
    fn set_size(&self, size: u64) -> IoFuture<'_, ()>;
    /// The span a write should cover, aligned, so the layer need not read back around it (a
    /// stripe group of an erasure-coded layout); 1 when any write is as cheap.
    fn write_granule(&self) -> u64 {
        1
    }
    /// The span a whole-file transfer should move per piece: as much as gives each drive
    /// behind this layer one request of about [`TRANSFER_PIECE_BYTES`].
    fn transfer_bytes(&self) -> u64 {
        TRANSFER_PIECE_BYTES
    }
    /// Components that writes through this stack could not reach (bit i: component i), for
    /// the commit to mark stale.
    fn missed(&self) -> u64 {
        0
    }
    /// Whether the layer is worth asking now (false: its drive failed to answer lately, so a
    /// layout with redundancy reads around it without waiting).
    fn available(&self) -> bool {
        true
    }
    /// The encrypted file this layer is the encryption layer of, if it is one (for
    /// re-encryption: `nasd rekey`).
    fn crypt_file(&self) -> Option<std::sync::Arc<crate::e2e::crypt::CryptFile>> {
        None
    }
}
