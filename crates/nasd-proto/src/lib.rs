//! The nasd wire protocol: every message between clients, file managers and drives.
//!
//! Message types, their byte layouts (documented in `docs/protocol.md` and repeated next to
//! the code), length-prefixed framing with a named maximum, and total decoders that return
//! [`DecodeError`] on any malformed input and never panic. No I/O, except reading and writing
//! frames on a tokio stream in `io`, with the `tokio` feature. Each message round-trips in a property test; `fuzz/` holds a `cargo fuzz` target.
//!
//! # Layout
//! - [`codec`]: little-endian reader/writer primitives, checked before they allocate.
//! - [`types`]: ids, protection options (seed 002 Table 7), rights, key types, schemes, suites.
//! - [`capability`]: `capability_args` (seed 002 Fig 1), optionally naming a writer key.
//! - [`attr`]: object attributes (seed 002 Table 5).
//! - [`ops`]: operation arguments (Tables 1-3) and reply bodies.
//! - [`e2e`]: the manager protocol's end-to-end protection types (policies, per-file state,
//!   user and group keys; issue 10).
//! - [`ext`]: drive extensions and their table in Drive Control (seed 002 §2.2, §3.4), the
//!   first being informed prefetching (§4.6).
//! - [`message`]: frames, handshake, request and reply envelopes.
//! - [`manager`]: the file manager protocol: the table of calls, one struct per request in
//!   [`manager::calls`], the replies and their shared types, status codes.
//! - [`status`]: stable status codes.
//! - `io` (feature `tokio`): frames on an async stream.

pub mod attr;
pub mod capability;
pub mod codec;
pub mod e2e;
pub mod ext;
#[cfg(feature = "tokio")]
pub mod io;
pub mod manager;
pub mod message;
pub mod ops;
pub mod status;
pub mod types;

pub use attr::{AttrMask, Attributes, FS_SPECIFIC_BYTES};
pub use capability::CapabilityArgs;
pub use message::{
    check_frame, frame, CapField, FrameCheck, Hello, ReplyHeader, RequestHeader, Welcome,
    DATA_BYTES_MAX, DIGEST_BYTES, FRAME_BYTES_MAX, REPLY_PREFIX_BYTES,
};
pub use ops::{
    DriveInfo, Op, OpCode, PartitionControl, PartitionInfo, ReadReply, ReplyBody, REGIONS_MAX,
};
pub use status::Status;
pub use types::{
    DriveId, KeyType, Nonce, ObjectId, PartitionId, Protection, Region, Rights, Scheme, Suite,
    WriterPublicKey, WriterSignature, OBJECT_BYTES_MAX, WRITER_KEY_BYTES, WRITER_SIGNATURE_BYTES,
};

/// Protocol version, sent in the handshake. Its changelog:
/// - 1: first version: handshake, request/reply envelopes, seed 002 Tables 1-3 operations,
///   four integrity schemes, two digest suites.
/// - 2: hardening. The welcome carries `nonce_floor_us` (the drive refuses older nonces, so a
///   request recorded before a drive restart cannot be replayed after it); the request MAC
///   covers the drive's id (`nasd-req-v2`), so a key-authorized request cannot be replayed onto
///   another drive that shares the key; a `tree` read whose capability does not cover the
///   chunk-widened range returns only bytes inside the capability, its cut edge chunks proved by
///   drive-hashed pieces in the reply MAC (protocol §10.4, §11.4).
/// - 3: drive extensions (seed 002 §2.2, §3.4). Opcodes from 64 are extensions, authorized by
///   a capability like object operations, their arguments in the MAC-covered `args`; `DriveInfo`
///   (inquiry and the Drive Control object) ends with the block cache's size and the extension
///   table. The first extension, `prefetch` v1 (§4.6): `hint` (64) and `consume` (65).
/// - 4: writer signatures (seed 001 §3.3.1 scheme 1, requirements B.4). Capability args may
///   name an Ed25519 writer key (88 bytes: the 55, tag 1, the key; request `cap_form` 3), bound
///   by the capability key like every argument; under such a capability a write, or a setattr
///   that sets the logical size, ends its args with `u8 1, 64B signature` over
///   `"nasd-wsig-v1"`, the drive, partition, object, request nonce and what it changes, which
///   the drive verifies before it stores anything; new status `BadSignature` (24). Capabilities
///   without a writer key, and every request made with them, are byte for byte as in 3.
/// - 5: the Partition Control object (seed 002 Table 4) ends with `u64 reserved_bytes` (Table
///   5's `blocks_allocated` now reserves space), `u64 available_bytes` and `u64
///   objects_supported` ([`PartitionControl`]).
pub const PROTOCOL_VERSION: u16 = 5;

/// Why bytes could not be decoded. Never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated: {0}")]
    Truncated(&'static str),
    #[error("field too long: {0}")]
    TooLong(&'static str),
    #[error("bad value: {0}")]
    BadValue(&'static str),
    #[error("trailing bytes after {0}")]
    Trailing(&'static str),
    #[error("frame of {0} bytes exceeds the maximum")]
    FrameTooLarge(usize),
    #[error("protocol version {0} not supported (this build speaks {PROTOCOL_VERSION})")]
    Version(u16),
}
