//! A test-only, in-memory mirror of the drive's request handling, written directly from the
//! proto and crypto functions (not from the client's code), so the client's requests and its
//! verifier are checked against an independent implementation of the other side. It knows
//! only what the client tests need: capabilities (plain or sealed), the digest check, the
//! region check, read, write, getattr and setattr, for every scheme and protection.

use nasd_crypto::capability::{capability_key, unseal};
use nasd_crypto::integrity::pieces::{feed, write_form};
use nasd_crypto::integrity::tree;
use nasd_crypto::integrity::verify::encode_tree_trailer;
use nasd_crypto::integrity::CHUNK_BYTES;
use nasd_crypto::primitives::attr_digest;
use nasd_crypto::request::{privacy_key, reply_mac, request_mac, Field};
use nasd_crypto::{aead, ct_eq, Cost, Key};
use nasd_proto::{
    Attributes, CapField, DriveId, Nonce, ObjectId, Op, OpCode, Protection, ReadReply, Region,
    ReplyBody, ReplyHeader, RequestHeader, Scheme, Status, Suite,
};
use std::collections::HashMap;

pub struct FakeDrive {
    pub suite: Suite,
    pub drive: DriveId,
    pub working_key: Key,
    pub objects: HashMap<u64, (Vec<u8>, Attributes)>,
    next: u64,
    /// Answer successful requests with an unprotected reply (a network downgrade).
    pub downgrade_replies: bool,
}

struct Out {
    status: Status,
    body: Vec<u8>,
    data: Vec<u8>,
    /// What the reply MAC covers after the header: the data digest `D` or the attribute digest.
    tail: Vec<u8>,
}

impl FakeDrive {
    pub fn new(suite: Suite) -> Self {
        FakeDrive {
            suite,
            drive: DriveId(0xd00d),
            working_key: Key::from_bytes([0x77; 32]),
            objects: HashMap::new(),
            next: 16,
            downgrade_replies: false,
        }
    }

    pub fn create(&mut self, scheme: Scheme) -> ObjectId {
        let id = self.next;
        self.next += 1;
        self.objects.insert(
            id,
            (
                vec![],
                Attributes {
                    scheme,
                    ..Default::default()
                },
            ),
        );
        ObjectId(id)
    }

    fn unauthenticated(request_id: u64, status: Status) -> Vec<u8> {
        ReplyHeader {
            request_id,
            status,
            protection: Protection::NONE,
            nonce: Nonce::default(),
            args: status.text().as_bytes().to_vec(),
            digest: [0; 32],
        }
        .encode()
    }

    /// Handles one request body and returns the reply body.
    pub fn handle(&mut self, body: &[u8]) -> Vec<u8> {
        let suite = self.suite;
        let (h, at) = RequestHeader::decode(body).expect("client sends well-formed requests");
        let cap = match &h.cap {
            CapField::Plain(a) => *a,
            CapField::Sealed(s) => match unseal(suite, &self.working_key, s) {
                Some(a) => a,
                None => return Self::unauthenticated(h.request_id, Status::BadSeal),
            },
            CapField::None => return Self::unauthenticated(h.request_id, Status::WrongKeyType),
        };
        let key = capability_key(suite, &self.working_key, &cap, 0);
        let pk = privacy_key(suite, &key, &h.nonce);
        let mut data = body[at..].to_vec();
        if h.protection.privacy_data() && !data.is_empty() {
            match aead::open_in_place(&pk, Field::RequestData.nonce(), b"", &mut data) {
                Some(n) => data.truncate(n),
                None => return Self::unauthenticated(h.request_id, Status::BadDigest),
            }
        }
        let args = if h.protection.privacy_args() {
            match aead::open(&pk, Field::RequestArgs.nonce(), b"", &h.args) {
                Some(a) => a,
                None => return Self::unauthenticated(h.request_id, Status::BadDigest),
            }
        } else {
            h.args.clone()
        };
        let Ok(op) = Op::decode_args(h.op, &args) else {
            return Self::unauthenticated(h.request_id, Status::Malformed);
        };
        let mut cost = Cost::default();
        if h.protection.integrity_args() {
            let mut mac = request_mac(suite, &key, self.drive, RequestHeader::mac_input_of(body));
            if let (true, Op::Write { regions, form, .. }) = (h.protection.integrity_data(), &op) {
                let mut at = 0;
                for r in regions {
                    let b = &data[at..at + r.len as usize];
                    at += r.len as usize;
                    feed(
                        &mut mac,
                        *form,
                        &write_form(suite, *form, r.offset, b, &mut cost),
                        b,
                        &mut cost,
                    );
                }
            }
            if !ct_eq(&mac.finalize(&mut cost), &h.digest) {
                return Self::unauthenticated(h.request_id, Status::BadDigest);
            }
        }
        let mut out = self.execute(&cap, h.object, &op, &data);
        let protection = if self.downgrade_replies && out.status == Status::Ok {
            Protection::NONE
        } else {
            h.protection
        };
        let mut trailer_bytes = 0;
        if out.status == Status::Ok {
            if let Ok(mut body) = ReplyBody::decode(h.op, &out.body) {
                // As the drive: a read's integrity trailer only under integrity-data.
                if let ReplyBody::Read(rr) = &mut body {
                    if !h.protection.integrity_data() {
                        rr.trailer.clear();
                        out.body = body.encode();
                    }
                }
                trailer_bytes = body.unmacced_tail_bytes(protection);
            }
        }
        let mut args = out.body;
        if protection.privacy_args() {
            args = aead::seal(&pk, Field::ReplyArgs.nonce(), b"", &args);
        }
        let mut reply = ReplyHeader {
            request_id: h.request_id,
            status: out.status,
            protection,
            nonce: Nonce {
                time_us: 5,
                random: 6,
            },
            args,
            digest: [0; 32],
        }
        .encode();
        if protection.integrity_args() {
            let input = ReplyHeader::mac_input_without_trailer(&reply, trailer_bytes).unwrap();
            let mut mac = reply_mac(suite, &key, &h.nonce, input);
            // D of a read only under INTEGRITY_DATA; attribute digests always.
            if out.status == Status::Ok && (protection.integrity_data() || h.op != OpCode::Read) {
                mac.update(&out.tail);
            }
            let digest = mac.finalize(&mut cost);
            let n = reply.len();
            reply[n - 32..].copy_from_slice(&digest);
        }
        let mut data = out.data;
        if protection.privacy_data() && !data.is_empty() {
            aead::seal_in_place(&pk, Field::ReplyData.nonce(), b"", &mut data);
        }
        reply.extend_from_slice(&data);
        reply
    }

    fn execute(
        &mut self,
        cap: &nasd_proto::CapabilityArgs,
        object: ObjectId,
        op: &Op,
        data: &[u8],
    ) -> Out {
        let suite = self.suite;
        let refuse = |status: Status| Out {
            status,
            body: status.text().as_bytes().to_vec(),
            data: vec![],
            tail: vec![],
        };
        let regions: &[Region] = match op {
            Op::Read { regions } | Op::Write { regions, .. } => regions,
            _ => &[],
        };
        if regions.iter().any(|r| !cap.region.contains(r)) {
            return refuse(Status::RegionOutsideCapability);
        }
        let Some((bytes, attrs)) = self.objects.get_mut(&object.0) else {
            return refuse(Status::NoSuchObject);
        };
        let mut cost = Cost::default();
        let attr_out = |attrs: &Attributes, body: Vec<u8>| {
            let enc = attrs.encode();
            Out {
                status: Status::Ok,
                body,
                tail: attr_digest(suite, &enc, &mut Cost::default()).to_vec(),
                data: enc,
            }
        };
        match op {
            Op::Write { regions, .. } => {
                let mut at = 0;
                for r in regions {
                    let end = (r.offset + r.len) as usize;
                    if bytes.len() < end {
                        bytes.resize(end, 0);
                    }
                    bytes[r.offset as usize..end].copy_from_slice(&data[at..at + r.len as usize]);
                    at += r.len as usize;
                }
                attrs.logical_size = bytes.len() as u64;
                Out {
                    status: Status::Ok,
                    body: ReplyBody::Written {
                        bytes: at as u64,
                        scheme: attrs.scheme,
                        logical_size: attrs.logical_size,
                    }
                    .encode(),
                    data: vec![],
                    tail: vec![],
                }
            }
            Op::Read { regions } => {
                let size = bytes.len() as u64;
                let scheme = attrs.scheme;
                let mut out_regions = vec![];
                let mut out = vec![];
                let mut tail = vec![];
                let mut proofs = vec![];
                let leaves: Vec<[u8; 32]> = bytes
                    .chunks(CHUNK_BYTES as usize)
                    .enumerate()
                    .map(|(i, c)| tree::leaf(suite, i as u64, c, &mut cost))
                    .collect();
                let mut src = tree::LeafNodes {
                    suite,
                    leaves: &leaves,
                };
                for r in regions {
                    let mut a = r.offset.min(size);
                    let mut b = (r.offset + r.len).min(size);
                    if scheme == Scheme::Tree && a < b {
                        a = a / CHUNK_BYTES * CHUNK_BYTES;
                        b = (b.div_ceil(CHUNK_BYTES) * CHUNK_BYTES).min(size);
                    }
                    let piece = &bytes[a as usize..b as usize];
                    out_regions.push(Region::new(a, b - a));
                    out.extend_from_slice(piece);
                    match scheme {
                        Scheme::Tree => {
                            let n = tree::chunk_count(size);
                            proofs.push(if a < b {
                                tree::prove(
                                    suite,
                                    &mut src,
                                    n,
                                    a / CHUNK_BYTES,
                                    b.div_ceil(CHUNK_BYTES),
                                )
                                .unwrap()
                            } else {
                                vec![]
                            });
                        }
                        Scheme::Mac => tail.extend_from_slice(piece),
                        Scheme::Digest => {
                            for p in write_form(suite, scheme, a, piece, &mut cost) {
                                tail.extend_from_slice(&p.value);
                            }
                        }
                        Scheme::Incremental => {
                            let mut s = nasd_crypto::integrity::adhash::Sum::ZERO;
                            for p in write_form(suite, scheme, a, piece, &mut cost) {
                                s.add(&p.value, &mut cost);
                            }
                            tail.extend_from_slice(&s.to_bytes());
                        }
                    }
                }
                let mut trailer = vec![];
                if scheme == Scheme::Tree {
                    let top = tree::top(suite, &mut src, tree::chunk_count(size)).unwrap();
                    trailer = encode_tree_trailer(&top, &proofs);
                    tail = tree::root_material(size, &top).to_vec();
                }
                Out {
                    status: Status::Ok,
                    body: ReplyBody::Read(ReadReply {
                        logical_size: size,
                        scheme,
                        regions: out_regions,
                        trailer,
                    })
                    .encode(),
                    data: out,
                    tail,
                }
            }
            Op::GetAttr => attr_out(attrs, vec![]),
            Op::SetAttr {
                mask, attrs: new, ..
            } => {
                if mask.has(nasd_proto::AttrMask::FS_SPECIFIC) {
                    attrs.fs_specific = new.fs_specific;
                }
                attr_out(attrs, vec![])
            }
            _ => refuse(Status::UnknownOp),
        }
    }
}
