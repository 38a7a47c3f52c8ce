//! Building a request frame and verifying its reply: pure functions, no I/O, so both can be
//! tested byte for byte against the crypto crate. [`crate::DriveConn`] moves the bytes.
//!
//! Request (see `docs/protocol.md`): the header with `args = op.encode_args()` (sealed under
//! the per-request privacy key when the protection asks for privacy of arguments), then the
//! write data (sealed likewise under privacy of data), and a digest
//! `MAC(key, header-before-digest [|| D])` where `D` is the data digest in the write's form.
//! Under a capability that names a writer key, a write or size change is signed first with the
//! capability's signer (seed 001 §3.3.1 scheme 1) and the signature ends its `args`.
//!
//! Reply: decode, recompute the reply MAC bound to the request's nonce, decrypt, feed the data
//! digest (reads) or the attribute digest (replies carrying attributes), compare in constant
//! time; only then hand out data. For reads, cut the requested bytes out of the regions the
//! drive returned (clamped at the end of the object, widened to chunks for `tree` as far as the
//! capability's region reaches).

use crate::auth::{Auth, Capability};
use crate::ClientError;
use nasd_crypto::integrity::pieces::{feed, write_form, PieceHash};
use nasd_crypto::integrity::verify::{feed_read, region_slices};
use nasd_crypto::primitives::attr_digest;
use nasd_crypto::request::{privacy_key, reply_mac, request_mac, Field};
use nasd_crypto::{aead, wsig};
use nasd_crypto::{ct_eq, Cost, Key};
use nasd_proto::message::DIGEST_BYTES;
use nasd_proto::ops::{regions_total, FLUSH_OBJECTS_MAX};
use nasd_proto::{
    Attributes, CapField, Nonce, ObjectId, Op, OpCode, PartitionId, Protection, ReadReply, Region,
    ReplyBody, ReplyHeader, RequestHeader, Scheme, Status, Suite, WriterPublicKey, WriterSignature,
    DATA_BYTES_MAX, REGIONS_MAX,
};

/// Longest error detail kept from a refusal (the drive bounds it too).
const DETAIL_CHARS_MAX: usize = 1024;

/// One request as the caller describes it.
pub struct RequestSpec<'a> {
    pub auth: &'a Auth,
    pub protection: Protection,
    pub partition: PartitionId,
    pub object: ObjectId,
    pub op: &'a Op,
    /// Write data: the concatenation of each region's bytes, in region order. Empty otherwise.
    pub data: &'a [u8],
}

/// What the client must remember about a sent request to verify its reply.
#[derive(Clone, Debug)]
pub struct PendingRequest {
    pub request_id: u64,
    pub nonce: Nonce,
    pub op: OpCode,
    pub protection: Protection,
    pub suite: Suite,
    pub key: Key,
    /// The regions a read asked for, to cut its answer.
    pub read_regions: Vec<Region>,
    /// The region the request's capability allows (everything for a key): a `tree` read may
    /// come back cut short of its chunks only at its edges.
    pub read_limit: Region,
}

/// A request ready to send: its frame (length prefix included) and what verifies its reply.
pub struct BuiltRequest {
    pub frame: Vec<u8>,
    pub pending: PendingRequest,
    /// Hashing the client did for the request's data digest.
    pub cost: Cost,
}

/// A verified successful reply.
#[derive(Clone, Debug)]
pub struct Reply {
    pub protection: Protection,
    /// False only when the request itself asked for no integrity (protection NONE).
    pub authenticated: bool,
    pub body: ReplyBody,
    /// Reads: the requested bytes (clamped at the object's end), concatenated in region order.
    /// Replies carrying attributes: their 357-byte encoding. Otherwise empty.
    pub data: Vec<u8>,
    /// Hashing the client did to verify the reply.
    pub cost: Cost,
}

impl Reply {
    /// The attributes of a `create`, `fastcopy`, `getattr` or `setattr` reply.
    pub fn attributes(&self) -> Option<Attributes> {
        match self.body {
            ReplyBody::Object { .. } | ReplyBody::Attrs => Attributes::decode(&self.data).ok(),
            _ => None,
        }
    }
}

fn usage(s: impl Into<String>) -> ClientError {
    ClientError::Usage(s.into())
}

/// Whether a request that changes an object's bytes under a capability naming a writer key
/// gets signed (seed 001 §3.3.1 scheme 1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Signing {
    /// Sign it with the capability's signer, or refuse it here without the right one: what
    /// every caller wants ([`build_request`]).
    Required,
    /// Send the operation's `signature` field as the caller set it (none, or one made over
    /// something else), signing and checking nothing: for operators and tests that check the
    /// drive's refusal (`nasd obj write --unsigned`).
    AsGiven,
}

/// Builds the frame of one request. `suite` is the drive's (from its welcome).
pub fn build_request(
    suite: Suite,
    request_id: u64,
    nonce: Nonce,
    spec: &RequestSpec<'_>,
) -> Result<BuiltRequest, ClientError> {
    build_request_signing(suite, request_id, nonce, spec, Signing::Required)
}

/// [`build_request`], saying how writes under a writer key are signed.
pub fn build_request_signing(
    suite: Suite,
    request_id: u64,
    nonce: Nonce,
    spec: &RequestSpec<'_>,
    signing: Signing,
) -> Result<BuiltRequest, ClientError> {
    if let Op::Read { regions } | Op::Write { regions, .. } | Op::BlocksRequired { regions } =
        spec.op
    {
        if let Some(r) = regions.iter().find(|r| !r.within_object_max()) {
            return Err(usage(format!(
                "region {}+{} ends past the protocol's {} byte object limit",
                r.offset,
                r.len,
                nasd_proto::OBJECT_BYTES_MAX
            )));
        }
    }
    let op_code = spec.op.code();
    let protection = spec.protection.normalized();
    if spec.auth.suite() != suite {
        return Err(usage(format!(
            "the key is for digest suite {} but the drive uses {}",
            spec.auth.suite().name(),
            suite.name()
        )));
    }
    let key = spec.auth.key().clone();
    let cap = match spec.auth {
        Auth::Key { .. } => {
            if protection.privacy_capability() {
                return Err(usage(
                    "privacy-capability applies to capabilities, not to key files",
                ));
            }
            CapField::None
        }
        Auth::Capability(c) if protection.privacy_capability() => match &c.sealed {
            Some(s) => CapField::Sealed(s.clone()),
            None => {
                return Err(usage(
                    "privacy-capability needs a capability minted with --sealed",
                ))
            }
        },
        Auth::Capability(c) => CapField::Plain(c.args),
    };

    // The encoder writes counts in fixed-width fields; refuse what the drive would refuse
    // rather than send a count that wrapped.
    match spec.op {
        Op::Read { regions } | Op::Write { regions, .. } | Op::BlocksRequired { regions }
            if regions.len() > REGIONS_MAX =>
        {
            return Err(usage(format!(
                "{} regions exceed the {REGIONS_MAX}-region limit of one request",
                regions.len()
            )));
        }
        Op::Flush { objects } if objects.len() > FLUSH_OBJECTS_MAX => {
            return Err(usage(format!(
                "{} objects exceed the {FLUSH_OBJECTS_MAX}-object limit of one flush",
                objects.len()
            )));
        }
        _ => {}
    }
    let (write_regions, form) = match spec.op {
        Op::Write { regions, form, .. } => (regions.as_slice(), *form),
        _ => (&[][..], Scheme::Tree),
    };
    let data_len = regions_total(write_regions).ok_or_else(|| usage("region lengths overflow"))?;
    if data_len != spec.data.len() as u64 {
        return Err(usage(format!(
            "write regions cover {data_len} bytes but {} bytes of data were given",
            spec.data.len()
        )));
    }
    if spec.data.len() > DATA_BYTES_MAX {
        return Err(usage(format!(
            "{} bytes of data exceed the {DATA_BYTES_MAX}-byte limit of one request",
            spec.data.len()
        )));
    }
    for r in write_regions {
        if r.end().is_none() {
            return Err(usage("region offset + len overflows"));
        }
    }

    // The write form's piece hashes, per region: the data digest of the MAC and of the
    // writer's signature share them.
    let mut cost = Cost::default();
    let writer_key = match spec.auth {
        Auth::Capability(c) if spec.op.changes_data() && signing == Signing::Required => {
            c.args.writer_key
        }
        _ => None,
    };
    let mut region_pieces = vec![];
    if op_code == OpCode::Write && (protection.integrity_data() || writer_key.is_some()) {
        let mut at = 0usize;
        for r in write_regions {
            let bytes = &spec.data[at..at + r.len as usize];
            at += r.len as usize;
            region_pieces.push(write_form(suite, form, r.offset, bytes, &mut cost));
        }
    }
    let signed_op;
    let op = match writer_key {
        None => spec.op,
        Some(k) => {
            let sig = writer_signature(suite, nonce, spec, k, &region_pieces, &mut cost)?;
            let mut o = spec.op.clone();
            o.set_writer_signature(sig);
            signed_op = o;
            &signed_op
        }
    };

    let privacy = (protection.privacy_args() || protection.privacy_data())
        .then(|| privacy_key(suite, &key, &nonce));
    let mut args = op.encode_args();
    if protection.privacy_args() {
        let pk = privacy.as_ref().expect("derived above");
        args = aead::seal(pk, Field::RequestArgs.nonce(), b"", &args);
    }
    let header = RequestHeader {
        request_id,
        key_type: spec.auth.key_type(),
        protection,
        partition: spec.partition,
        object: spec.object,
        op: op_code,
        nonce,
        cap,
        args,
        digest: [0; DIGEST_BYTES],
    };
    let encoded = header.encode();
    let sealed_extra = if protection.privacy_data() && !spec.data.is_empty() {
        aead::TAG_BYTES
    } else {
        0
    };
    let mut frame = Vec::with_capacity(4 + encoded.len() + spec.data.len() + sealed_extra);
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(&encoded);
    drop(encoded);

    if protection.integrity_args() {
        let body = &frame[4..];
        let mut mac = request_mac(
            suite,
            &key,
            spec.auth.drive(),
            RequestHeader::mac_input_of(body),
        );
        if protection.integrity_data() && op_code == OpCode::Write {
            let mut at = 0usize;
            for (r, pieces) in write_regions.iter().zip(&region_pieces) {
                let bytes = &spec.data[at..at + r.len as usize];
                at += r.len as usize;
                feed(&mut mac, form, pieces, bytes, &mut cost);
            }
        }
        let digest = mac.finalize(&mut cost);
        let hlen = u32::from_le_bytes(frame[4 + 9..4 + 13].try_into().expect("4 bytes")) as usize;
        let end = 4 + 13 + hlen;
        frame[end - DIGEST_BYTES..end].copy_from_slice(&digest);
    }

    if sealed_extra > 0 {
        let pk = privacy.as_ref().expect("derived above");
        let mut sealed = spec.data.to_vec();
        aead::seal_in_place(pk, Field::RequestData.nonce(), b"", &mut sealed);
        frame.extend_from_slice(&sealed);
    } else {
        frame.extend_from_slice(spec.data);
    }
    let body_len = (frame.len() - 4) as u32;
    frame[..4].copy_from_slice(&body_len.to_le_bytes());

    let read_regions = match spec.op {
        Op::Read { regions } => regions.clone(),
        _ => vec![],
    };
    Ok(BuiltRequest {
        frame,
        pending: PendingRequest {
            request_id,
            nonce,
            op: op_code,
            protection,
            suite,
            key,
            read_regions,
            read_limit: match spec.auth {
                Auth::Capability(c) => c.args.region,
                Auth::Key { .. } => Region::WHOLE,
            },
        },
        cost,
    })
}

/// The writer's signature of a request that changes an object's bytes under a capability
/// naming `writer_key` (seed 001 §3.3.1 scheme 1; the message is `nasd_crypto::wsig`'s), made
/// with the capability's signer; [`ClientError::NotSigned`] when it has none, or one whose
/// public key is not the writer key, so nothing unsigned is ever sent. `region_pieces` are the
/// write's piece hashes per region (computed by the caller).
fn writer_signature(
    suite: Suite,
    nonce: Nonce,
    spec: &RequestSpec<'_>,
    writer_key: WriterPublicKey,
    region_pieces: &[Vec<PieceHash>],
    cost: &mut Cost,
) -> Result<WriterSignature, ClientError> {
    let not_signed = |detail: String| ClientError::NotSigned {
        op: spec.op.code().name(),
        writer_key,
        detail,
    };
    let signer = match spec.auth {
        Auth::Capability(Capability {
            signer: Some(s), ..
        }) => s,
        _ => {
            return Err(not_signed(
                "so it must be signed, and no signing key was given (nasd obj --sign-key, \
                 Capability::with_signer)"
                    .into(),
            ))
        }
    };
    if signer.public() != writer_key {
        return Err(not_signed(format!(
            "and the signing key given is another (public key {})",
            signer.public()
        )));
    }
    let digest;
    let change = match spec.op {
        Op::Write { regions, form, .. } => {
            let mut d = wsig::DataDigest::new(suite, *form);
            let mut at = 0usize;
            for (i, r) in regions.iter().enumerate() {
                let bytes = &spec.data[at..at + r.len as usize];
                at += r.len as usize;
                d.region(
                    region_pieces.get(i).map_or(&[][..], Vec::as_slice),
                    bytes,
                    cost,
                );
            }
            digest = d.finish(cost);
            wsig::Change::Write {
                form: *form,
                regions,
                data_digest: digest,
            }
        }
        Op::SetAttr { attrs, .. } => wsig::Change::Resize {
            logical_size: attrs.logical_size,
        },
        other => {
            return Err(ClientError::Usage(format!(
                "{} changes no object bytes and is never signed",
                other.code().name()
            )))
        }
    };
    let place = wsig::Place {
        drive: spec.auth.drive(),
        partition: spec.partition,
        object: spec.object,
        nonce,
    };
    Ok(signer.sign(&wsig::message(&place, &change)))
}

/// The request id of a reply body, if it is long enough to have one.
pub fn reply_request_id(body: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(1..9)?.try_into().ok()?))
}

/// A reply body as two buffers: `head`, everything before the data (prefix and header), and
/// `data`, the bytes behind it. The connection reads each into its own buffer, so a verified
/// read hands out its data without moving it.
pub struct ReplyFrame {
    pub head: Vec<u8>,
    pub data: Vec<u8>,
}

impl ReplyFrame {
    /// Splits a whole reply body where its header says the data starts.
    pub fn from_body(mut body: Vec<u8>) -> ReplyFrame {
        let data = body.split_off(Self::data_at(&body, body.len()));
        ReplyFrame { head: body, data }
    }

    /// Where the data of a reply body of `n` bytes starts, from the body's first bytes; `n`
    /// when they are too few or name a header longer than the body, so such a body stays
    /// whole in `head` for [`open_reply`] to refuse.
    pub fn data_at(prefix: &[u8], n: usize) -> usize {
        ReplyHeader::data_at(prefix)
            .filter(|&at| at <= n)
            .unwrap_or(n)
    }

    /// The whole reply body in one buffer.
    pub fn into_body(self) -> Vec<u8> {
        let mut v = self.head;
        v.extend_from_slice(&self.data);
        v
    }
}

/// Verifies a reply against the request it answers. Returns the verified reply, or the
/// drive's refusal, or an integrity error; data that did not verify is dropped here.
///
/// Takes the frame by value: the data is decrypted, verified and cut where it lies, so a read
/// costs no copy when it returns what was asked, and one move of the asked bytes when the
/// drive widened it.
pub fn open_reply(req: &PendingRequest, frame: ReplyFrame) -> Result<Reply, ClientError> {
    let op = req.op;
    let ReplyFrame {
        head: body,
        data: mut buf,
    } = frame;
    let (h, data_at) = ReplyHeader::decode(&body).map_err(|e| ClientError::malformed(op, e))?;
    if data_at != body.len() {
        return Err(ClientError::malformed(
            op,
            nasd_proto::DecodeError::BadValue("reply header length"),
        ));
    }
    if h.request_id != req.request_id {
        return Err(ClientError::integrity(
            op,
            format!(
                "reply is for request {} not {}",
                h.request_id, req.request_id
            ),
        ));
    }
    let authenticated = h.protection.integrity_args();
    let mut cost = Cost::default();
    let privacy = (h.protection.privacy_args() || h.protection.privacy_data())
        .then(|| privacy_key(req.suite, &req.key, &req.nonce));

    let args = if h.protection.privacy_args() {
        let pk = privacy.as_ref().expect("derived above");
        aead::open(pk, Field::ReplyArgs.nonce(), b"", &h.args)
            .ok_or_else(|| ClientError::integrity(op, "reply arguments do not decrypt"))?
    } else {
        h.args
    };
    let body_decoded = match h.status {
        Status::Ok => {
            Some(ReplyBody::decode(op, &args).map_err(|e| ClientError::malformed(op, e))?)
        }
        _ => None,
    };
    // A read's trailer is outside the MAC when its args are in the clear (protocol §10.4), so
    // it is only accepted where the client checks it against the MAC-covered top: `tree` under
    // integrity-data.
    if let Some(ReplyBody::Read(rr)) = &body_decoded {
        let checked = rr.scheme == Scheme::Tree && h.protection.integrity_data();
        if !rr.trailer.is_empty() && !checked {
            return Err(ClientError::integrity(
                op,
                format!("{} unexpected trailer bytes", rr.trailer.len()),
            ));
        }
    }
    let trailer_bytes = body_decoded
        .as_ref()
        .map_or(0, |b| b.unmacced_tail_bytes(h.protection));
    let mut mac = match authenticated {
        false => None,
        true => {
            let input = ReplyHeader::mac_input_without_trailer(&body, trailer_bytes)
                .ok_or_else(|| ClientError::integrity(op, "trailer longer than the header"))?;
            Some(reply_mac(req.suite, &req.key, &req.nonce, input))
        }
    };
    // The reply's data stays in its own buffer.
    if h.protection.privacy_data() && !buf.is_empty() {
        let pk = privacy.as_ref().expect("derived above");
        let n = aead::open_in_place(pk, Field::ReplyData.nonce(), b"", &mut buf)
            .ok_or_else(|| ClientError::integrity(op, "reply data does not decrypt"))?;
        buf.truncate(n);
    }
    let data = &buf[..];

    let check_mac = |mac: Option<nasd_crypto::Mac>, cost: &mut Cost| -> Result<(), ClientError> {
        if let Some(mac) = mac {
            if !ct_eq(&mac.finalize(cost), &h.digest) {
                return Err(ClientError::integrity(op, "reply MAC does not verify"));
            }
        }
        Ok(())
    };

    if h.status != Status::Ok {
        check_mac(mac, &mut cost)?;
        let detail: String = String::from_utf8_lossy(&args)
            .chars()
            .filter(|c| !c.is_control())
            .take(DETAIL_CHARS_MAX)
            .collect();
        return Err(ClientError::Refused {
            op: op.name(),
            status: h.status,
            detail,
            authenticated,
        });
    }
    if !h.protection.meets(req.protection) {
        return Err(ClientError::integrity(
            op,
            format!(
                "reply protection {} is weaker than the request's {}",
                h.protection, req.protection
            ),
        ));
    }
    let body_decoded = body_decoded.expect("decoded above for a successful reply");
    match &body_decoded {
        ReplyBody::Read(rr) => {
            if h.protection.integrity_data() {
                let m = mac.as_mut().expect("integrity-data implies integrity-args");
                feed_read(m, req.suite, rr, data, req.read_limit, &mut cost)
                    .map_err(|e| ClientError::integrity(op, e.to_string()))?;
            } else {
                region_slices(&rr.regions, data)
                    .map_err(|e| ClientError::integrity(op, e.to_string()))?;
            }
        }
        ReplyBody::Object { .. } | ReplyBody::Attrs => {
            if data.len() != Attributes::BYTES {
                return Err(ClientError::integrity(
                    op,
                    format!(
                        "attributes are {} bytes, expected {}",
                        data.len(),
                        Attributes::BYTES
                    ),
                ));
            }
            if let Some(m) = mac.as_mut() {
                m.update(&attr_digest(req.suite, data, &mut cost));
            }
        }
        _ => {
            if !data.is_empty() {
                return Err(ClientError::integrity(
                    op,
                    format!("{} unexpected data bytes", data.len()),
                ));
            }
        }
    }
    check_mac(mac, &mut cost)?;

    // Verified. Attribute bytes must also decode; reads are cut to what was asked for.
    if matches!(body_decoded, ReplyBody::Object { .. } | ReplyBody::Attrs) {
        Attributes::decode(data).map_err(|e| ClientError::malformed(op, e))?;
    }
    let data = match &body_decoded {
        ReplyBody::Read(rr) => cut_read(op, &req.read_regions, rr, buf)?,
        _ => buf,
    };
    Ok(Reply {
        protection: h.protection,
        authenticated,
        body: body_decoded,
        data,
        cost,
    })
}

/// Cuts the requested regions out of the (verified) returned ones, which are `buf[at..]`,
/// moving the asked bytes to the front of `buf`. Region `i` of the reply answers region `i` of
/// the request and must cover it, clamped at the object's end.
fn cut_read(
    op: OpCode,
    asked: &[Region],
    rr: &ReadReply,
    mut buf: Vec<u8>,
) -> Result<Vec<u8>, ClientError> {
    if rr.regions.len() != asked.len() {
        return Err(ClientError::integrity(
            op,
            format!(
                "{} regions returned for {} asked",
                rr.regions.len(),
                asked.len()
            ),
        ));
    }
    // Where each returned region starts in `buf` (region_slices has checked that they tile).
    region_slices(&rr.regions, &buf).map_err(|e| ClientError::integrity(op, e.to_string()))?;
    let mut src = 0usize;
    let mut out = 0usize;
    for (want, got) in asked.iter().zip(&rr.regions) {
        let here = src;
        src += got.len as usize;
        let want_end = want.end().unwrap_or(u64::MAX).min(rr.logical_size);
        if want.offset >= want_end {
            continue;
        }
        let got_end = got.end().unwrap_or(0);
        if got.offset > want.offset || got_end < want_end {
            return Err(ClientError::integrity(
                op,
                format!(
                    "returned region {}+{} does not cover asked {}+{}",
                    got.offset,
                    got.len,
                    want.offset,
                    want_end - want.offset
                ),
            ));
        }
        let a = here + (want.offset - got.offset) as usize;
        let b = here + (want_end - got.offset) as usize;
        // `out <= a` always: the output is never longer than what it was cut from.
        if a != out {
            buf.copy_within(a..b, out);
        }
        out += b - a;
    }
    buf.truncate(out);
    Ok(buf)
}

#[cfg(test)]
mod tests;
