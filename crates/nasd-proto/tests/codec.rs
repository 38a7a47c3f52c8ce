//! Every message round-trips through its encoding, and every decoder is total: arbitrary and
//! mutated bytes give an error or a value, never a panic.

use nasd_proto::ops::{ReadReply, ReplyBody};
use nasd_proto::*;
use proptest::prelude::*;

fn regions() -> impl Strategy<Value = Vec<Region>> + Clone {
    prop::collection::vec(region(), 0..8)
}

fn region() -> impl Strategy<Value = Region> + Clone {
    (any::<u64>(), any::<u64>()).prop_map(|(o, l)| Region::new(o / 2, l / 2))
}

fn protection() -> impl Strategy<Value = Protection> {
    (0u8..32).prop_map(|b| Protection::from_bits(b).unwrap())
}

fn scheme() -> impl Strategy<Value = Scheme> {
    prop::sample::select(Scheme::ALL.to_vec())
}

fn cap() -> impl Strategy<Value = CapabilityArgs> {
    (
        any::<u64>(),
        any::<u16>(),
        any::<u64>(),
        region(),
        0u32..512,
        any::<u64>(),
        any::<u64>(),
        protection(),
        prop::option::of(any::<[u8; 32]>()),
    )
        .prop_map(|(d, p, o, region, r, e, a, m, wk)| CapabilityArgs {
            drive: DriveId(d),
            partition: PartitionId(p),
            object: ObjectId(o),
            region,
            rights: Rights(r),
            expiry_ms: e,
            audit_id: a,
            min_protection: m,
            writer_key: wk.map(WriterPublicKey),
        })
}

fn signature() -> impl Strategy<Value = Option<WriterSignature>> {
    prop::option::of((any::<[u8; 32]>(), any::<[u8; 32]>()).prop_map(|(a, b)| {
        let mut s = [0u8; 64];
        s[..32].copy_from_slice(&a);
        s[32..].copy_from_slice(&b);
        WriterSignature(s)
    }))
}

fn attrs() -> impl Strategy<Value = Attributes> {
    (
        any::<[u64; 11]>(),
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 256),
        scheme(),
    )
        .prop_map(|(v, bs, fs, scheme)| {
            let mut a = Attributes {
                access_control_version: v[0],
                nearby_object: ObjectId(v[1]),
                copied_object: ObjectId(v[2]),
                logical_size: v[3],
                blocks_allocated: v[4],
                blocks_used: v[5],
                block_size: bs,
                create_time_us: v[6],
                data_modify_time_us: v[7],
                attribute_modify_time_us: v[8],
                fs_data_modify_time_us: v[9],
                fs_attribute_modify_time_us: v[10],
                scheme,
                ..Attributes::default()
            };
            a.fs_specific.copy_from_slice(&fs);
            a
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (prop::option::of(scheme()), 0u32..128, attrs()).prop_map(|(s, m, a)| Op::Create {
            scheme: s,
            mask: AttrMask(m),
            attrs: Box::new(a)
        }),
        Just(Op::Remove),
        Just(Op::GetAttr),
        (0u32..128, attrs(), signature()).prop_map(|(m, a, signature)| Op::SetAttr {
            mask: AttrMask(m),
            attrs: Box::new(a),
            signature
        }),
        regions().prop_map(|regions| Op::Read { regions }),
        (regions(), scheme(), any::<bool>(), signature()).prop_map(
            |(regions, form, write_back, signature)| Op::Write {
                regions,
                form,
                write_back,
                signature
            }
        ),
        Just(Op::FastCopy),
        prop::collection::vec(any::<u64>(), 0..10).prop_map(|v| Op::Flush {
            objects: v.into_iter().map(ObjectId).collect()
        }),
        regions().prop_map(|regions| Op::BlocksRequired { regions }),
        (any::<u64>(), scheme()).prop_map(|(q, s)| Op::CreatePartition {
            quota_bytes: q,
            default_scheme: s
        }),
        any::<bool>().prop_map(|force| Op::RemovePartition { force }),
        any::<u64>().prop_map(|q| Op::ResizePartition { quota_bytes: q }),
        Just(Op::FlushPartition),
        any::<[u8; 48]>().prop_map(|w| Op::SetPartitionKey { wrapped: w }),
        any::<[u8; 48]>().prop_map(|w| Op::SetWorkingKey { wrapped: w }),
        (any::<bool>(), protection()).prop_map(|(d, p)| Op::SetMinProtection {
            drive_wide: d,
            protection: p
        }),
        any::<[u8; 48]>().prop_map(|w| Op::Initialize { wrapped_master: w }),
        any::<[u8; 48]>().prop_map(|w| Op::SetDriveKey { wrapped: w }),
        Just(Op::Inquiry),
        (any::<bool>(), prop::collection::vec(region(), 0..40))
            .prop_map(|(replace, regions)| Op::Hint { replace, regions }),
        any::<u64>().prop_map(|consumed| Op::Consume { consumed }),
    ]
}

fn drive_info() -> impl Strategy<Value = DriveInfo> {
    let ext = (64u8..=255, any::<u16>(), "[a-z.]{0,64}").prop_map(|(opcode, version, name)| {
        nasd_proto::ext::Extension {
            opcode,
            version,
            name,
        }
    });
    (
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(ext, 0..5),
        scheme(),
        protection(),
        "[ -~]{0,40}",
    )
        .prop_map(|(a, cache_bytes, extensions, s, p, vendor)| DriveInfo {
            drive: DriveId(a),
            suite: Suite::Blake3,
            block_bytes: 8192,
            chunk_bytes: 1024,
            clock_us: a / 3,
            nonce_window_ms: 30_000,
            capacity_bytes: a / 5,
            used_bytes: a / 7,
            min_protection: p,
            vendor,
            partitions: vec![PartitionInfo {
                id: PartitionId(1),
                quota_bytes: a,
                used_bytes: a / 2,
                objects: 3,
                default_scheme: s,
                min_protection: p,
            }],
            cache_bytes,
            extensions,
        })
}

proptest! {
    #[test]
    fn capability_args_round_trip(c in cap()) {
        let b = c.encode();
        prop_assert_eq!(b.len(), if c.writer_key.is_some() { 88 } else { CapabilityArgs::BYTES });
        prop_assert_eq!(CapabilityArgs::decode(&b).unwrap(), c);
        // a cut inside the base or inside the writer key is malformed
        for cut in [0, 54, 56, 87] {
            if cut < b.len() && cut != CapabilityArgs::BYTES {
                prop_assert!(CapabilityArgs::decode(&b[..cut]).is_err());
            }
        }
    }

    #[test]
    fn a_signature_is_the_last_field_and_its_absence_costs_no_byte(op in op()) {
        let b = op.encode_args();
        let mut unsigned = op.clone();
        if let Op::Write { signature, .. } | Op::SetAttr { signature, .. } = &mut unsigned {
            *signature = None;
        }
        let u = unsigned.encode_args();
        match op.writer_signature() {
            Some(s) => {
                prop_assert_eq!(b.len(), u.len() + 65);
                prop_assert_eq!(&b[..u.len()], &u[..]);
                prop_assert_eq!(b[u.len()], nasd_proto::ops::WRITER_SIGNATURE_TAG);
                prop_assert_eq!(&b[u.len() + 1..], &s.0[..]);
                // cut anywhere inside the signature: malformed, never unsigned
                for cut in [u.len() + 1, u.len() + 64] {
                    prop_assert!(Op::decode_args(op.code(), &b[..cut]).is_err());
                }
            }
            None => prop_assert_eq!(b, u),
        }
    }

    #[test]
    fn attributes_round_trip(a in attrs()) {
        let b = a.encode();
        prop_assert_eq!(b.len(), Attributes::BYTES);
        prop_assert_eq!(Attributes::decode(&b).unwrap(), a);
    }

    #[test]
    fn op_args_round_trip(op in op()) {
        prop_assert_eq!(Op::decode_args(op.code(), &op.encode_args()).unwrap(), op);
    }

    #[test]
    fn request_header_round_trip(op in op(), c in prop::option::of(cap()), p in protection(), id in any::<u64>(),
                                 t in any::<u64>(), r in any::<u64>(), digest in any::<[u8; 32]>(), sealed in any::<bool>(),
                                 data in prop::collection::vec(any::<u8>(), 0..100)) {
        let (key_type, cap, protection) = match c {
            Some(c) if sealed => (KeyType::Capability, CapField::Sealed(c.encode().to_vec()), p.union(Protection::PRIVACY_CAPABILITY)),
            Some(c) => (KeyType::Capability, CapField::Plain(c), Protection::from_bits(p.bits() & !16).unwrap()),
            None => (KeyType::Working, CapField::None, Protection::from_bits(p.bits() & !16).unwrap()),
        };
        let h = RequestHeader {
            request_id: id, key_type, protection, partition: PartitionId(3), object: ObjectId(9),
            op: op.code(), nonce: Nonce { time_us: t, random: r }, cap, args: op.encode_args(), digest,
        };
        let mut body = h.encode();
        body.extend_from_slice(&data);
        let (back, at) = RequestHeader::decode(&body).unwrap();
        prop_assert_eq!(&back, &h);
        prop_assert_eq!(&body[at..], &data[..]);
        // the MAC input is everything between the kind byte and the digest
        let mi = RequestHeader::mac_input_of(&body);
        prop_assert_eq!(mi.len(), at - 1 - 32);
        // a server's peek at the arguments sees what the decoder sees
        let (pp, pop, pargs) = RequestHeader::peek_args(&body).unwrap();
        prop_assert_eq!((pp, pop, pargs), (h.protection, h.op, &h.args[..]));
        prop_assert_eq!(RequestHeader::op_code_of(&body), Some(h.op));
        if let Op::Read { regions } = &op {
            let total = regions.iter().fold(0u64, |a, r| a.saturating_add(r.len));
            prop_assert_eq!(nasd_proto::ops::read_extent(pargs), Some((regions.len(), total)));
        }
    }

    #[test]
    fn reply_round_trip(status in prop::sample::select(Status::ALL.to_vec()), p in protection(), id in any::<u64>(),
                        args in prop::collection::vec(any::<u8>(), 0..300), digest in any::<[u8; 32]>()) {
        let h = ReplyHeader { request_id: id, status, protection: p, nonce: Nonce { time_us: 1, random: 2 }, args, digest };
        let body = h.encode();
        prop_assert_eq!(ReplyHeader::status_of(&body), Some(status));
        let (back, at) = ReplyHeader::decode(&body).unwrap();
        prop_assert_eq!(back, h);
        prop_assert_eq!(at, body.len());
    }

    #[test]
    fn reply_bodies_round_trip(regions in prop::collection::vec(region(), 0..5), trailer in prop::collection::vec(any::<u8>(), 0..100),
                               s in scheme(), a in any::<u64>(), b in any::<u64>()) {
        let cases = vec![
            (OpCode::Read, ReplyBody::Read(ReadReply { logical_size: a, scheme: s, regions: regions.clone(), trailer: trailer.clone() })),
            (OpCode::Write, ReplyBody::Written { bytes: a, scheme: s, logical_size: b }),
            (OpCode::BlocksRequired, ReplyBody::BlocksRequired { estimated: a, maximum: b }),
            (OpCode::Create, ReplyBody::Object { object: ObjectId(a) }),
            (OpCode::GetAttr, ReplyBody::Attrs),
            (OpCode::Remove, ReplyBody::Empty),
            (OpCode::Hint, ReplyBody::Hinted { first_index: a, next_index: b }),
            (OpCode::Consume, ReplyBody::Consumed(nasd_proto::ext::StreamCounters {
                prefetched_blocks: a, cache_hit_blocks: b, dropped_blocks: a ^ b })),
        ];
        for (code, body) in cases {
            prop_assert_eq!(ReplyBody::decode(code, &body.encode()).unwrap(), body);
        }
    }

    #[test]
    fn drive_info_round_trips_with_its_extension_table(d in drive_info()) {
        let b = d.encode();
        prop_assert_eq!(DriveInfo::decode(&b).unwrap(), d.clone());
        prop_assert_eq!(ReplyBody::decode(OpCode::Inquiry, &b).unwrap(), ReplyBody::Drive(Box::new(d)));
        // every strict prefix is malformed, never a shorter value
        for cut in [0, b.len() / 2, b.len() - 1] {
            prop_assert!(DriveInfo::decode(&b[..cut]).is_err());
        }
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(b in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = RequestHeader::decode(&b);
        let _ = RequestHeader::peek_args(&b);
        let _ = RequestHeader::op_code_of(&b);
        let _ = ReplyHeader::status_of(&b);
        let _ = nasd_proto::ops::read_extent(&b);
        let _ = ReplyHeader::decode(&b);
        let _ = Hello::decode(&b);
        let _ = Welcome::decode(&b);
        let _ = CapabilityArgs::decode(&b);
        let _ = Attributes::decode(&b);
        let _ = DriveInfo::decode(&b);
        let _ = check_frame(&b);
        for code in OpCode::ALL {
            let _ = Op::decode_args(*code, &b);
            let _ = ReplyBody::decode(*code, &b);
        }
    }

    #[test]
    fn mutated_requests_never_panic(op in op(), c in cap(), flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let h = RequestHeader {
            request_id: 1, key_type: KeyType::Capability, protection: Protection::INTEGRITY_DATA, partition: PartitionId(1),
            object: ObjectId(2), op: op.code(), nonce: Nonce::default(), cap: CapField::Plain(c), args: op.encode_args(), digest: [0; 32],
        };
        let mut body = h.encode();
        for (i, x) in flips {
            let n = body.len();
            body[i % n] ^= x;
        }
        let n = body.len();
        body.truncate(cut % (n + 1));
        let _ = RequestHeader::peek_args(&body);
        if let Ok((h, _)) = RequestHeader::decode(&body) {
            // a write's args (signature last) are canonical, as `fuzz/decode_request` asserts
            if let Ok(w @ Op::Write { .. }) = Op::decode_args(h.op, &h.args) {
                prop_assert_eq!(w.encode_args(), h.args);
            }
        }
    }
}

#[test]
fn hints_are_bounded_and_extension_opcodes_are_object_ops() {
    let too_many = Op::Hint {
        replace: false,
        regions: vec![Region::new(0, 1); nasd_proto::ext::HINT_REGIONS_MAX],
    };
    let mut args = too_many.encode_args();
    assert!(Op::decode_args(OpCode::Hint, &args).is_ok());
    // one more region than the limit is refused on the count, before the regions are read
    let n = (nasd_proto::ext::HINT_REGIONS_MAX + 1) as u16;
    args[1..3].copy_from_slice(&n.to_le_bytes());
    assert_eq!(
        Op::decode_args(OpCode::Hint, &args),
        Err(DecodeError::TooLong("regions"))
    );
    // replace must be 0 or 1
    assert_eq!(
        Op::decode_args(OpCode::Hint, &[2, 0, 0]),
        Err(DecodeError::BadValue("hint replace"))
    );
    // a hint fits a request header whatever its count
    assert!(too_many.encode_args().len() < nasd_proto::message::HEADER_BYTES_MAX);
    for code in [OpCode::Hint, OpCode::Consume] {
        assert!(code.is_extension() && code.is_object_op());
        assert_eq!(OpCode::from_u8(code as u8).unwrap(), code);
    }
    assert!(!OpCode::Inquiry.is_object_op() && !OpCode::Read.is_extension());
}

/// Pins the wire bytes of the version-3 additions: a hint's arguments and the end of
/// `DriveInfo` (cache size, then the extension table), byte by byte as `docs/protocol.md` §7
/// and §13 lay them out.
#[test]
fn version_3_layouts_are_pinned() {
    const { assert!(PROTOCOL_VERSION >= 3) };
    let hint = Op::Hint {
        replace: true,
        regions: vec![Region::new(0x0102, 0x0304)],
    };
    assert_eq!(
        hint.encode_args(),
        [
            &[1u8, 1, 0][..],
            &0x0102u64.to_le_bytes(),
            &0x0304u64.to_le_bytes()
        ]
        .concat()
    );
    assert_eq!(
        Op::Consume { consumed: 7 }.encode_args(),
        7u64.to_le_bytes()
    );
    let d = DriveInfo {
        drive: DriveId(1),
        suite: Suite::Blake3,
        block_bytes: 8192,
        chunk_bytes: 1024,
        clock_us: 2,
        nonce_window_ms: 3,
        capacity_bytes: 4,
        used_bytes: 5,
        min_protection: Protection::NONE,
        vendor: String::new(),
        partitions: vec![],
        cache_bytes: 0x10_0000,
        extensions: vec![nasd_proto::ext::Extension {
            opcode: 64,
            version: 1,
            name: "prefetch".into(),
        }],
    };
    let b = d.encode();
    // 50 fixed bytes, an empty vendor blob (4), no partitions (4), then the new fields
    let tail = &b[58..];
    let want = [
        &0x10_0000u64.to_le_bytes()[..],
        &1u16.to_le_bytes(),
        &[64],
        &1u16.to_le_bytes(),
        &8u32.to_le_bytes(),
        b"prefetch",
    ]
    .concat();
    assert_eq!(tail, &want[..]);
}

/// Pins the Partition Control object of version 5 (`docs/protocol.md` §7): version 4's 26
/// bytes (quota, used, objects, scheme, minimum protection), then reserved bytes, available
/// bytes and objects supported; anything shorter or longer does not decode.
#[test]
fn version_5_partition_control_is_pinned() {
    assert_eq!(PROTOCOL_VERSION, 5);
    let c = nasd_proto::PartitionControl {
        quota_bytes: 1,
        used_bytes: 2,
        objects: 3,
        default_scheme: Scheme::Tree,
        min_protection: Protection::INTEGRITY_ARGS,
        reserved_bytes: 4,
        available_bytes: 5,
        objects_supported: 6,
    };
    let b = c.encode();
    let want = [
        &1u64.to_le_bytes()[..],
        &2u64.to_le_bytes(),
        &3u64.to_le_bytes(),
        &[Scheme::Tree as u8, Protection::INTEGRITY_ARGS.bits()],
        &4u64.to_le_bytes(),
        &5u64.to_le_bytes(),
        &6u64.to_le_bytes(),
    ]
    .concat();
    assert_eq!(b, want);
    assert_eq!(nasd_proto::PartitionControl::decode(&b).unwrap(), c);
    for n in [0, 26, b.len() - 1] {
        assert!(nasd_proto::PartitionControl::decode(&b[..n]).is_err());
    }
    let mut longer = b.clone();
    longer.push(0);
    assert!(nasd_proto::PartitionControl::decode(&longer).is_err());
}

#[test]
fn frame_check_tells_incomplete_from_oversized() {
    assert_eq!(check_frame(&[1, 0]).unwrap(), FrameCheck::Incomplete(4));
    let f = frame(&[9; 10]);
    assert_eq!(check_frame(&f[..8]).unwrap(), FrameCheck::Incomplete(14));
    assert_eq!(check_frame(&f).unwrap(), FrameCheck::Complete(10));
    let big = ((FRAME_BYTES_MAX + 1) as u32).to_le_bytes();
    assert!(matches!(
        check_frame(&big),
        Err(DecodeError::FrameTooLarge(_))
    ));
}

/// Pins the wire bytes of the version-4 additions (`docs/protocol.md` §4, §5, §7, §14): a
/// capability naming a writer key travels as `cap_form` 3 with the key after the 55 bytes; a
/// signed write and a signed setattr end their args with tag 1 and the signature; everything
/// without a writer key or signature is byte for byte what version 3 sent.
#[test]
fn version_4_layouts_are_pinned() {
    const { assert!(PROTOCOL_VERSION >= 4) };
    let base = CapabilityArgs {
        drive: DriveId(1),
        partition: PartitionId(2),
        object: ObjectId(16),
        region: Region::new(0, 10),
        rights: Rights::WRITE,
        expiry_ms: 3,
        audit_id: 4,
        min_protection: Protection::NONE,
        writer_key: None,
    };
    let keyed = CapabilityArgs {
        writer_key: Some(WriterPublicKey([0x77; 32])),
        ..base
    };
    let header = |c: CapabilityArgs| {
        RequestHeader {
            request_id: 9,
            key_type: KeyType::Capability,
            protection: Protection::NONE,
            partition: PartitionId(2),
            object: ObjectId(16),
            op: OpCode::GetAttr,
            nonce: Nonce::default(),
            cap: CapField::Plain(c),
            args: vec![],
            digest: [0; 32],
        }
        .encode()
    };
    let plain = header(base);
    let with = header(keyed);
    // kind, request id, header length, then 29 header bytes before cap_form
    let cap_form_at = 1 + 8 + 4 + 29;
    assert_eq!(plain[cap_form_at], 1);
    assert_eq!(with[cap_form_at], 3);
    assert_eq!(
        &with[cap_form_at + 1..cap_form_at + 56],
        &plain[cap_form_at + 1..cap_form_at + 56]
    );
    assert_eq!(&with[cap_form_at + 56..cap_form_at + 88], &[0x77; 32]);
    assert_eq!(with.len(), plain.len() + 32);
    assert_eq!(
        RequestHeader::decode(&with).unwrap().0.cap,
        CapField::Plain(keyed)
    );
    // the canonical encoding (what the capability key MACs) tags the key instead
    let enc = keyed.encode();
    assert_eq!(enc.len(), 88);
    assert_eq!((enc[55], &enc[56..]), (1u8, &[0x77u8; 32][..]));

    let sig = WriterSignature([0x5a; 64]);
    let write = |signature| Op::Write {
        regions: vec![Region::new(0x10, 0x20)],
        form: Scheme::Tree,
        write_back: false,
        signature,
    };
    let unsigned = [
        &[1u8, 0][..],
        &0x10u64.to_le_bytes(),
        &0x20u64.to_le_bytes(),
        &[4, 0],
    ]
    .concat();
    assert_eq!(write(None).encode_args(), unsigned);
    assert_eq!(
        write(Some(sig)).encode_args(),
        [&unsigned[..], &[1], &[0x5a; 64]].concat()
    );
    let setattr = Op::SetAttr {
        mask: AttrMask::LOGICAL_SIZE,
        attrs: Box::default(),
        signature: Some(sig),
    };
    let b = setattr.encode_args();
    assert_eq!(b.len(), 4 + Attributes::BYTES + 65);
    assert_eq!(b[4 + Attributes::BYTES], 1);
    // a tag other than 1 is malformed
    let mut bad = write(Some(sig)).encode_args();
    bad[unsigned.len()] = 2;
    assert_eq!(
        Op::decode_args(OpCode::Write, &bad),
        Err(DecodeError::BadValue("writer signature tag"))
    );
    assert_eq!(Status::from_u16(24), Some(Status::BadSignature));
    assert!(Status::BadSignature.is_security_refusal());
}
