//! The nasd client: connections to drives and verified object I/O, manager sessions, and files
//! as a stack of layers over objects (DESIGN.md's crate table).
//!
//! A client sends each request straight to the drive with a fresh nonce and a MAC under the
//! capability key (or a key of the hierarchy), optionally a data digest and AEAD privacy
//! (seed 002 §2.4, Table 7), and verifies every reply before it returns a byte: the reply MAC
//! is bound to the request's nonce, covers the data digest in the object's integrity scheme
//! (seed 000 §3) and, for attributes, their stored digest. Data that fails verification is
//! dropped, never returned.
//!
//! # Layout
//! - [`auth`] — what authorizes a request: key files, capabilities, the capability file.
//! - [`wire`] — building request frames and verifying replies (pure, tested byte for byte).
//! - [`conn`] — [`DriveConn`], one pipelined TCP connection to a drive.
//! - [`object`] — typed helpers, one per operation of seed 002 Tables 1-3.
//! - [`prefetch`] — drive extensions: the Drive Control listing, and the `prefetch`
//!   extension's hints and consume notifications (seed 002 §2.2, §3.4, §4.6).
//! - [`error`] — [`ClientError`].
//! - [`userkey`] — Ed25519 user key files and login signatures.
//! - [`opaque`] — OPAQUE (RFC 9807) password logins and registrations, both ends' halves
//!   (the manager takes its own from here), and the key an export key gives for the seed.
//! - [`files`] — files through the manager: [`files::Client::call`], the one way to send a
//!   manager call, then uploads, reads and changes; [`namespace`] — the namespace calls
//!   (stats, listings, names, links, attributes, modes, quotas), one short method each;
//!   [`capcache`] keeps capabilities; [`session`] is the manager connection, to whichever of
//!   the cluster's [`managers`] serves.
//! - The file stack under [`files`], one interface between its layers ([`layer`]):
//!   [`e2e`] (encryption, keys and end-to-end integrity, issue 10) over [`striped`] (the layout: stripes, mirrors, erasure codes) over [`component`] (one object
//!   on one drive, through the connection [`pool`]); [`memio`] is the in-memory layer tests
//!   put underneath instead.
//! - [`transfer`] — streaming copies to, from and within the cluster (holes kept, downloads
//!   replaced only when complete).
//! - [`handle`] — open files as handles (`read_at`/`write_at`/`truncate`/`fsync` at any
//!   offset, write-behind and read-ahead) for the FUSE mount and the S3 gateway.
//! - [`prepared`] — new files staged ahead of their names, for directories being filled with
//!   small files (one manager round trip per file).
//! - [`locks`] — record locks and `flock` through the manager, the lease on them renewed
//!   while any is held, reclaimed after a manager restart.
//! - [`escape`] — printing untrusted names safely.

pub mod auth;
pub mod callbacks;
pub mod capcache;
pub mod component;
pub mod config;
pub mod conn;
pub mod e2e;
pub mod error;
pub mod escape;
pub mod files;
pub mod handle;
pub mod layer;
pub mod locks;
pub mod managers;
pub mod memio;
pub mod namespace;
pub mod object;
pub mod opaque;
pub mod pool;
pub mod prefetch;
pub mod prepared;
pub mod session;
pub mod striped;
pub mod transfer;
pub mod userkey;
pub mod wire;

#[cfg(test)]
mod fake;

pub use auth::{Auth, Capability, CapabilityFile};
pub use conn::{DriveConn, DriveInfoBrief, IN_FLIGHT_REQUESTS_MAX, REQUEST_TIMEOUT_MS};
pub use error::ClientError;
pub use object::{ReadResult, Target, WriteResult};
pub use wire::Reply;

/// Sends the exact bytes of a saved request frame on a fresh connection and returns the drive's
/// answer, unverified: whoever replays a request need not hold its key (operators use this to
/// test the drive's replay defence). The reply is decoded but its MAC is not checked.
pub async fn replay(
    addr: &str,
    frame_bytes: Vec<u8>,
) -> Result<nasd_proto::ReplyHeader, ClientError> {
    let body = frame_bytes.get(4..).unwrap_or(&[]);
    let (h, _) = nasd_proto::RequestHeader::decode(body)
        .map_err(|e| ClientError::Usage(format!("the saved bytes are not a request frame: {e}")))?;
    if u32::from_le_bytes(frame_bytes[..4].try_into().expect("4 bytes")) as usize != body.len() {
        return Err(ClientError::Usage(
            "the saved frame's length prefix does not match its size".into(),
        ));
    }
    let conn = DriveConn::connect(addr).await?;
    let reply = conn.exchange(h.request_id, frame_bytes, "replay").await?;
    let (rh, _) =
        nasd_proto::ReplyHeader::decode(&reply).map_err(|source| ClientError::MalformedReply {
            op: "replay",
            source,
        })?;
    Ok(rh)
}
