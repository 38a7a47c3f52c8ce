//! The one error type of the client. Every message names what failed; a refusal by the drive
//! carries the drive's status, its human detail, and whether the reply was authenticated.

use nasd_proto::{DecodeError, OpCode, Status, WriterPublicKey};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to drive at {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("handshake with drive at {addr} failed: {detail}")]
    Handshake { addr: String, detail: String },
    #[error("connection to the drive lost: {0}")]
    ConnectionLost(String),
    #[error("{op}: no reply from the drive within {ms} ms")]
    Timeout { op: &'static str, ms: u64 },
    #[error("{op}: malformed reply from the drive: {source}")]
    MalformedReply {
        op: &'static str,
        source: DecodeError,
    },
    /// The drive refused the request. `authenticated` is false when the reply carried no MAC
    /// (protection NONE): either the drive could not authenticate the request, or the network
    /// forged the answer; the status is then only a hint.
    #[error("{} refused by the drive{}: {}{}", .op, if *.authenticated { "" } else { " (unauthenticated reply)" }, .status.text(), if .detail.is_empty() { String::new() } else { format!(" ({})", .detail) })]
    Refused {
        op: &'static str,
        status: Status,
        detail: String,
        authenticated: bool,
    },
    /// The reply did not verify. No byte of its data is returned.
    #[error("{op}: reply failed verification ({what}); its data was discarded")]
    Integrity { op: &'static str, what: String },
    /// The caller asked for something the client cannot send.
    #[error("{0}")]
    Usage(String),
    /// A change to an object's bytes under a capability that names a writer key, without that
    /// key's signing key (seed 001 §3.3.1 scheme 1): refused here, before anything was sent.
    #[error("{op} not sent: the capability names writer key {writer_key}, {detail}")]
    NotSigned {
        op: &'static str,
        writer_key: WriterPublicKey,
        detail: String,
    },
    #[error("capability file {path}: {detail}")]
    CapabilityFile { path: String, detail: String },
    #[error("key file {path}: {detail}")]
    KeyFile { path: String, detail: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl ClientError {
    /// The drive's status, when the drive refused the request.
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub(crate) fn integrity(op: OpCode, what: impl Into<String>) -> Self {
        ClientError::Integrity {
            op: op.name(),
            what: what.into(),
        }
    }

    pub(crate) fn malformed(op: OpCode, source: DecodeError) -> Self {
        ClientError::MalformedReply {
            op: op.name(),
            source,
        }
    }
}
