//! Frames, the version handshake and the request/reply envelopes.
//!
//! ```text
//! frame   := u32 body_len, body[body_len]                  body_len <= FRAME_BYTES_MAX
//! body    := u8 kind, ...
//! hello   (kind 1) := "NASD", u16 version                   client -> drive, first frame
//! welcome (kind 2) := "NASD", u16 version, u64 drive_id, u8 suite, u32 block_bytes,
//!                     u32 chunk_bytes, u64 clock_us, u64 nonce_window_ms, u64 nonce_floor_us
//! request (kind 3) := u64 request_id, u32 header_len, header[header_len], data
//! reply   (kind 4) := u64 request_id, u32 header_len, header[header_len], data
//! ```
//! A request header is
//! ```text
//! u8 key_type, u8 protection, u16 partition, u64 object, u8 op, 16B nonce,
//! u8 cap_form (0 none | 1 plain | 2 sealed | 3 plain with a writer key),
//! [55B capability_args | u16 len + sealed bytes | 55B capability_args + 32B writer_key],
//! u32 args_len, args, 32B digest
//! ```
//! and a reply header is `u16 status, u8 protection, 16B nonce, u32 args_len, args, 32B digest`.
//! The digest is the header's last 32 bytes; every byte before it is covered by the MAC as it
//! travels ([`RequestHeader::mac_input`]), so the drive never re-encodes what it verifies.
//! Bulk data follows the header untouched: a decoder returns its offset in the body, and the
//! body buffer is handed to storage without another copy.

use crate::capability::CapabilityArgs;
use crate::codec::{Reader, Writer};
use crate::types::{KeyType, Nonce, ObjectId, PartitionId, Protection, Suite, WriterPublicKey};
use crate::{DecodeError, Status, PROTOCOL_VERSION};

/// Largest frame body either side accepts: data plus headroom for headers and tree proofs.
pub const FRAME_BYTES_MAX: usize = DATA_BYTES_MAX + (2 << 20);
/// Most data bytes one request or reply carries.
pub const DATA_BYTES_MAX: usize = 16 << 20;
/// Longest request or reply header.
pub const HEADER_BYTES_MAX: usize = 1 << 16;
/// Longest sealed (encrypted) capability.
pub const SEALED_CAPABILITY_BYTES_MAX: usize = 256;
/// Bytes of every digest and MAC on the wire.
pub const DIGEST_BYTES: usize = 32;
const MAGIC: &[u8; 4] = b"NASD";

const _: () = assert!(HEADER_BYTES_MAX + DATA_BYTES_MAX < FRAME_BYTES_MAX);

/// Body kinds.
pub const KIND_HELLO: u8 = 1;
pub const KIND_WELCOME: u8 = 2;
pub const KIND_REQUEST: u8 = 3;
pub const KIND_REPLY: u8 = 4;

/// Frame-level outcome of looking at a byte buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameCheck {
    /// Need at least this many bytes in total before a frame is complete.
    Incomplete(usize),
    /// A complete frame: the body is `buf[4..4 + len]`.
    Complete(usize),
}

/// Tells an incomplete frame from a complete one, and refuses an oversized one before anything
/// is allocated for it.
pub fn check_frame(buf: &[u8]) -> Result<FrameCheck, DecodeError> {
    if buf.len() < 4 {
        return Ok(FrameCheck::Incomplete(4));
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(DecodeError::FrameTooLarge(len));
    }
    if len == 0 {
        return Err(DecodeError::Truncated("empty frame"));
    }
    if buf.len() < 4 + len {
        return Ok(FrameCheck::Incomplete(4 + len));
    }
    Ok(FrameCheck::Complete(len))
}

/// Prefixes `body` with its length.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + body.len());
    v.extend_from_slice(&(body.len() as u32).to_le_bytes());
    v.extend_from_slice(body);
    v
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Hello {
    pub version: u16,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u8(KIND_HELLO);
        w.bytes(MAGIC);
        w.u16(self.version);
        w.into_vec()
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b);
        if r.u8("kind")? != KIND_HELLO || &r.array::<4>("magic")? != MAGIC {
            return Err(DecodeError::BadValue("hello magic"));
        }
        let h = Hello {
            version: r.u16("version")?,
        };
        r.finish("hello")?;
        Ok(h)
    }
}

/// The drive's answer to [`Hello`]: what a client needs before its first request.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Welcome {
    pub version: u16,
    pub drive: crate::DriveId,
    pub suite: Suite,
    pub block_bytes: u32,
    pub chunk_bytes: u32,
    /// The drive's clock, so a client can correct its nonces for skew.
    pub clock_us: u64,
    pub nonce_window_ms: u64,
    /// The drive refuses every nonce whose time is below this (it may have accepted such
    /// nonces before it last started), so a client stamps its nonces at or above it.
    pub nonce_floor_us: u64,
}

impl Welcome {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u8(KIND_WELCOME);
        w.bytes(MAGIC);
        w.u16(self.version);
        w.u64(self.drive.0);
        w.u8(self.suite as u8);
        w.u32(self.block_bytes);
        w.u32(self.chunk_bytes);
        w.u64(self.clock_us);
        w.u64(self.nonce_window_ms);
        w.u64(self.nonce_floor_us);
        w.into_vec()
    }
    /// Decodes a welcome; one of another version is `DecodeError::Version` whatever follows
    /// the version, so a client can say which version the drive speaks.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b);
        if r.u8("kind")? != KIND_WELCOME || &r.array::<4>("magic")? != MAGIC {
            return Err(DecodeError::BadValue("welcome magic"));
        }
        let version = r.u16("version")?;
        if version != PROTOCOL_VERSION {
            return Err(DecodeError::Version(version));
        }
        let w = Welcome {
            version,
            drive: crate::DriveId(r.u64("drive")?),
            suite: Suite::from_u8(r.u8("suite")?)?,
            block_bytes: r.u32("block bytes")?,
            chunk_bytes: r.u32("chunk bytes")?,
            clock_us: r.u64("clock")?,
            nonce_window_ms: r.u64("window")?,
            nonce_floor_us: r.u64("nonce floor")?,
        };
        r.finish("welcome")?;
        Ok(w)
    }
}

/// How a request presents its capability.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum CapField {
    None,
    /// The args in clear: form 1, or form 3 when they name a writer key.
    Plain(CapabilityArgs),
    /// PRIVACY_CAPABILITY: the args encrypted under the partition's working key.
    Sealed(Vec<u8>),
}

/// `cap_form` values of a request header.
const CAP_FORM_NONE: u8 = 0;
const CAP_FORM_PLAIN: u8 = 1;
const CAP_FORM_SEALED: u8 = 2;
/// Plain capability args that name a writer key (protocol version 4): the 55 bytes of form 1,
/// then the 32-byte key. Form 1 stays as it was, so requests under capabilities without a
/// writer key are byte for byte what they were.
const CAP_FORM_PLAIN_WRITER_KEY: u8 = 3;

/// Reads a request header's `cap_form` and the capability after it.
fn get_cap(h: &mut Reader<'_>) -> Result<CapField, DecodeError> {
    Ok(match h.u8("cap form")? {
        CAP_FORM_NONE => CapField::None,
        CAP_FORM_PLAIN => CapField::Plain(CapabilityArgs::get(h)?),
        CAP_FORM_SEALED => {
            let n = h.u16("sealed len")? as usize;
            if n > SEALED_CAPABILITY_BYTES_MAX {
                return Err(DecodeError::TooLong("sealed capability"));
            }
            CapField::Sealed(h.take(n, "sealed capability")?.to_vec())
        }
        CAP_FORM_PLAIN_WRITER_KEY => {
            let mut c = CapabilityArgs::get(h)?;
            c.writer_key = Some(WriterPublicKey(h.array("writer key")?));
            CapField::Plain(c)
        }
        _ => return Err(DecodeError::BadValue("cap form")),
    })
}

/// A request header, decoded. `args` are the operation's argument bytes as sent (ciphertext
/// when the request asks for privacy of arguments).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RequestHeader {
    pub request_id: u64,
    pub key_type: KeyType,
    pub protection: Protection,
    pub partition: PartitionId,
    pub object: ObjectId,
    pub op: crate::OpCode,
    pub nonce: Nonce,
    pub cap: CapField,
    pub args: Vec<u8>,
    pub digest: [u8; DIGEST_BYTES],
}

impl RequestHeader {
    /// Encodes a request body (`kind`, id, header); data, if any, is appended by the caller.
    /// The digest is the header's last 32 bytes, filled by the caller after computing it over
    /// [`RequestHeader::mac_input_of`].
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(128 + self.args.len());
        w.u8(KIND_REQUEST);
        w.u64(self.request_id);
        let len_at = w.len();
        w.u32(0);
        let start = w.len();
        w.u8(self.key_type as u8);
        w.u8(self.protection.bits());
        w.u16(self.partition.0);
        w.u64(self.object.0);
        w.u8(self.op as u8);
        w.bytes(&self.nonce.to_bytes());
        match &self.cap {
            CapField::None => w.u8(CAP_FORM_NONE),
            CapField::Plain(c) => match &c.writer_key {
                None => {
                    w.u8(CAP_FORM_PLAIN);
                    c.put(&mut w);
                }
                Some(k) => {
                    w.u8(CAP_FORM_PLAIN_WRITER_KEY);
                    c.put_base(&mut w);
                    w.bytes(&k.0);
                }
            },
            CapField::Sealed(s) => {
                debug_assert!(s.len() <= SEALED_CAPABILITY_BYTES_MAX);
                w.u8(CAP_FORM_SEALED);
                w.u16(s.len() as u16);
                w.bytes(s);
            }
        }
        w.blob(&self.args);
        w.bytes(&self.digest);
        let hlen = (w.len() - start) as u32;
        w.buf[len_at..len_at + 4].copy_from_slice(&hlen.to_le_bytes());
        w.into_vec()
    }

    /// The bytes the request digest covers, given an encoded body: request id and every header
    /// byte before the digest. Total: a body too short to hold a header gives an empty slice,
    /// over which no digest verifies.
    pub fn mac_input_of(body: &[u8]) -> &[u8] {
        let Some(len) = body.get(9..13) else {
            return &[];
        };
        let hlen = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        match (13 + hlen).checked_sub(DIGEST_BYTES) {
            Some(end) if end >= 1 && 13 + hlen <= body.len() => &body[1..end],
            _ => &[],
        }
    }

    /// Where a request body holds its operation code: kind (1), request id (8), header
    /// length (4), key type (1), protection (1), partition (2), object (8).
    pub const OP_CODE_AT: usize = 25;

    /// A request body's operation, read at [`Self::OP_CODE_AT`] without decoding the rest;
    /// `None` if the body is shorter or the byte names no operation. Not checked against
    /// anything: [`Self::decode`] does that.
    pub fn op_code_of(body: &[u8]) -> Option<crate::OpCode> {
        crate::OpCode::from_u8(*body.get(Self::OP_CODE_AT)?).ok()
    }

    /// A request's protection, operation and argument bytes, read from an encoded body without
    /// decoding (or copying) the rest; `None` if the body does not parse that far. For a
    /// server that must size a request before it runs it.
    pub fn peek_args(body: &[u8]) -> Option<(Protection, crate::OpCode, &[u8])> {
        let mut r = Reader::new(body);
        if r.u8("kind").ok()? != KIND_REQUEST {
            return None;
        }
        r.u64("request id").ok()?;
        let hlen = r.u32("header len").ok()? as usize;
        let mut h = Reader::new(r.take(hlen.min(HEADER_BYTES_MAX), "header").ok()?);
        h.u8("key type").ok()?;
        let protection = Protection::from_bits(h.u8("protection").ok()?).ok()?;
        h.take(2 + 8, "partition, object").ok()?;
        let op = crate::OpCode::from_u8(h.u8("op").ok()?).ok()?;
        h.take(16, "nonce").ok()?;
        get_cap(&mut h).ok()?;
        let args = h.blob(HEADER_BYTES_MAX, "args").ok()?;
        Some((protection, op, args))
    }

    /// Decodes a request body; returns the header and the offset where data begins.
    pub fn decode(body: &[u8]) -> Result<(RequestHeader, usize), DecodeError> {
        let mut r = Reader::new(body);
        if r.u8("kind")? != KIND_REQUEST {
            return Err(DecodeError::BadValue("not a request"));
        }
        let request_id = r.u64("request id")?;
        let hlen = r.u32("header len")? as usize;
        if hlen > HEADER_BYTES_MAX {
            return Err(DecodeError::TooLong("request header"));
        }
        let header = r.take(hlen, "request header")?;
        let data_at = r.position();
        let mut h = Reader::new(header);
        let key_type = KeyType::from_u8(h.u8("key type")?)?;
        let protection = Protection::from_bits(h.u8("protection")?)?;
        let partition = PartitionId(h.u16("partition")?);
        let object = ObjectId(h.u64("object")?);
        let op = crate::OpCode::from_u8(h.u8("op")?)?;
        let nonce = Nonce::get(&mut h)?;
        let cap = get_cap(&mut h)?;
        let args = h.blob(HEADER_BYTES_MAX, "args")?.to_vec();
        let digest = h.array("digest")?;
        h.finish("request header")?;
        if (key_type == KeyType::Capability) != !matches!(cap, CapField::None) {
            return Err(DecodeError::BadValue(
                "capability presence does not match key type",
            ));
        }
        if matches!(cap, CapField::Sealed(_)) != protection.privacy_capability() {
            return Err(DecodeError::BadValue(
                "sealed capability without privacy-capability",
            ));
        }
        Ok((
            RequestHeader {
                request_id,
                key_type,
                protection,
                partition,
                object,
                op,
                nonce,
                cap,
                args,
                digest,
            },
            data_at,
        ))
    }
}

/// A reply header, decoded.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ReplyHeader {
    pub request_id: u64,
    pub status: Status,
    pub protection: Protection,
    pub nonce: Nonce,
    /// Reply body bytes on success, a UTF-8 detail on failure (ciphertext under privacy).
    pub args: Vec<u8>,
    pub digest: [u8; DIGEST_BYTES],
}

/// Bytes of a reply body before its header: kind, request id, header length.
pub const REPLY_PREFIX_BYTES: usize = 13;

impl ReplyHeader {
    /// Where a reply body's data starts (`REPLY_PREFIX_BYTES` + header length), read from its
    /// first [`REPLY_PREFIX_BYTES`]; `None` if `prefix` is shorter. Not checked against
    /// anything: [`Self::decode`] does that.
    pub fn data_at(prefix: &[u8]) -> Option<usize> {
        let len = prefix.get(9..REPLY_PREFIX_BYTES)?;
        Some(REPLY_PREFIX_BYTES + u32::from_le_bytes(len.try_into().ok()?) as usize)
    }

    /// A reply body's status, read where the header starts (after the
    /// [`REPLY_PREFIX_BYTES`]) without decoding the rest; `None` if the body is shorter or
    /// the value names no status.
    pub fn status_of(body: &[u8]) -> Option<Status> {
        let b = body.get(REPLY_PREFIX_BYTES..REPLY_PREFIX_BYTES + 2)?;
        Status::from_u16(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(80 + self.args.len());
        w.u8(KIND_REPLY);
        w.u64(self.request_id);
        let len_at = w.len();
        w.u32(0);
        let start = w.len();
        w.u16(self.status as u16);
        w.u8(self.protection.bits());
        w.bytes(&self.nonce.to_bytes());
        w.blob(&self.args);
        w.bytes(&self.digest);
        let hlen = (w.len() - start) as u32;
        w.buf[len_at..len_at + 4].copy_from_slice(&hlen.to_le_bytes());
        w.into_vec()
    }

    /// Request id and every reply-header byte before the digest.
    pub fn mac_input_of(body: &[u8]) -> &[u8] {
        RequestHeader::mac_input_of(body)
    }

    /// What the reply MAC covers: [`Self::mac_input_of`] without its last `trailer_bytes`
    /// bytes, as [`crate::ReplyBody::unmacced_tail_bytes`] counts them (a read's trailer in clear
    /// args; the client checks it by recomputing the MAC-covered `tree` top, `docs/protocol.md`
    /// §10.4). `None` if the trailer would be longer than the input.
    pub fn mac_input_without_trailer(body: &[u8], trailer_bytes: usize) -> Option<&[u8]> {
        let m = Self::mac_input_of(body);
        Some(&m[..m.len().checked_sub(trailer_bytes)?])
    }

    pub fn decode(body: &[u8]) -> Result<(ReplyHeader, usize), DecodeError> {
        let mut r = Reader::new(body);
        if r.u8("kind")? != KIND_REPLY {
            return Err(DecodeError::BadValue("not a reply"));
        }
        let request_id = r.u64("request id")?;
        let hlen = r.u32("header len")? as usize;
        if hlen > HEADER_BYTES_MAX + crate::ops::INTEGRITY_TRAILER_BYTES_MAX {
            return Err(DecodeError::TooLong("reply header"));
        }
        let header = r.take(hlen, "reply header")?;
        let data_at = r.position();
        let mut h = Reader::new(header);
        let code = h.u16("status")?;
        let status = Status::from_u16(code).ok_or(DecodeError::BadValue("status"))?;
        let protection = Protection::from_bits(h.u8("protection")?)?;
        let nonce = Nonce::get(&mut h)?;
        let args = h
            .blob(
                HEADER_BYTES_MAX + crate::ops::INTEGRITY_TRAILER_BYTES_MAX,
                "args",
            )?
            .to_vec();
        let digest = h.array("digest")?;
        h.finish("reply header")?;
        Ok((
            ReplyHeader {
                request_id,
                status,
                protection,
                nonce,
                args,
                digest,
            },
            data_at,
        ))
    }
}
