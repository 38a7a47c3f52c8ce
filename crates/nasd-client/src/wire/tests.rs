//! The client's request and reply code against an independent, in-memory mirror of the drive
//! side built directly from the proto and crypto functions (`fake`).

use super::*;
use crate::auth::Capability;
use crate::fake::FakeDrive;
use nasd_proto::{AttrMask, CapabilityArgs, DriveId, KeyType, Rights};

fn cap(fake: &FakeDrive, object: ObjectId, region: Region, sealed: bool) -> Auth {
    Auth::Capability(Capability::mint(
        fake.suite,
        &fake.working_key,
        CapabilityArgs {
            drive: fake.drive,
            partition: PartitionId(1),
            object,
            region,
            rights: Rights::ALL,
            expiry_ms: u64::MAX,
            audit_id: 9,
            min_protection: Protection::NONE,
            writer_key: None,
        },
        0,
        sealed,
    ))
}

fn nonce(i: u64) -> Nonce {
    Nonce {
        time_us: 1_000_000 + i,
        random: 0x5eed ^ i,
    }
}

fn levels() -> Vec<Protection> {
    [
        "none",
        "integrity-args",
        "integrity-data",
        "privacy-args",
        "privacy-data",
        "privacy-data,privacy-capability",
    ]
    .iter()
    .map(|s| Protection::parse(s).unwrap())
    .collect()
}

/// Sends `op` through build → fake drive → open and returns the result.
fn round_trip(
    fake: &mut FakeDrive,
    auth: &Auth,
    protection: Protection,
    object: ObjectId,
    op: Op,
    data: &[u8],
    id: u64,
) -> Result<Reply, ClientError> {
    let spec = RequestSpec {
        auth,
        protection,
        partition: PartitionId(1),
        object,
        op: &op,
        data,
    };
    let built = build_request(fake.suite, id, nonce(id), &spec)?;
    open_reply(
        &built.pending,
        ReplyFrame::from_body(fake.handle(&built.frame[4..])),
    )
}

#[test]
fn request_decodes_and_its_mac_verifies() {
    for suite in [Suite::Blake3, Suite::Sha256] {
        let fake = FakeDrive::new(suite);
        let auth = cap(&fake, ObjectId(16), Region::new(0, 1 << 20), false);
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 253) as u8).collect();
        for form in Scheme::ALL {
            let op = Op::Write {
                regions: vec![Region::new(3, 1000), Region::new(4096, 4000)],
                form,
                write_back: false,
                signature: None,
            };
            let spec = RequestSpec {
                auth: &auth,
                protection: Protection::INTEGRITY_DATA,
                partition: PartitionId(1),
                object: ObjectId(16),
                op: &op,
                data: &data,
            };
            let built = build_request(suite, 7, nonce(1), &spec).unwrap();
            let body = &built.frame[4..];
            assert_eq!(
                u32::from_le_bytes(built.frame[..4].try_into().unwrap()) as usize,
                body.len()
            );
            let (h, data_at) = RequestHeader::decode(body).unwrap();
            assert_eq!(h.request_id, 7);
            assert_eq!(h.key_type, KeyType::Capability);
            assert_eq!(Op::decode_args(h.op, &h.args).unwrap(), op);
            assert_eq!(&body[data_at..], &data[..]);
            // Recompute the digest independently: header MAC then each region's D.
            let mut c = Cost::default();
            let mut mac = request_mac(
                suite,
                auth.key(),
                auth.drive(),
                RequestHeader::mac_input_of(body),
            );
            let (a, b) = data.split_at(1000);
            for (off, bytes) in [(3u64, a), (4096, b)] {
                let p = write_form(suite, form, off, bytes, &mut c);
                feed(&mut mac, form, &p, bytes, &mut c);
            }
            assert!(ct_eq(&mac.finalize(&mut c), &h.digest), "{form}");
        }
    }
}

#[test]
fn privacy_hides_args_and_data() {
    let fake = FakeDrive::new(Suite::Blake3);
    let auth = cap(&fake, ObjectId(16), Region::new(0, 1 << 20), true);
    let data = vec![0x41u8; 300];
    let op = Op::Write {
        regions: vec![Region::new(0, 300)],
        form: Scheme::Tree,
        write_back: false,
        signature: None,
    };
    let p = Protection::parse("privacy-data,privacy-capability").unwrap();
    let spec = RequestSpec {
        auth: &auth,
        protection: p,
        partition: PartitionId(1),
        object: ObjectId(16),
        op: &op,
        data: &data,
    };
    let built = build_request(Suite::Blake3, 1, nonce(1), &spec).unwrap();
    let (h, at) = RequestHeader::decode(&built.frame[4..]).unwrap();
    assert!(matches!(h.cap, CapField::Sealed(_)));
    assert_ne!(h.args, op.encode_args());
    assert_eq!(built.frame.len() - 4 - at, 300 + aead::TAG_BYTES);
    assert!(!built.frame[4 + at..].windows(8).any(|w| w == [0x41; 8]));
}

#[test]
fn every_protection_and_scheme_round_trips() {
    for suite in [Suite::Blake3, Suite::Sha256] {
        let mut fake = FakeDrive::new(suite);
        let mut id = 0;
        for scheme in Scheme::ALL {
            for p in levels() {
                let obj = fake.create(scheme);
                let auth = cap(&fake, obj, Region::new(0, 1 << 20), true);
                let data: Vec<u8> = (0..9000u32).map(|i| (i * 7 % 251) as u8 + 1).collect();
                id += 1;
                let w = round_trip(
                    &mut fake,
                    &auth,
                    p,
                    obj,
                    Op::Write {
                        regions: vec![Region::new(0, 9000)],
                        form: scheme,
                        write_back: false,
                        signature: None,
                    },
                    &data,
                    id,
                )
                .unwrap();
                assert!(matches!(w.body, ReplyBody::Written { bytes: 9000, .. }));
                // Single regions (odd offsets, past the end), then scatter-gather: each region
                // is cut out of its widened answer, in order, and moved to the front of the
                // reply's buffer without overlapping the next.
                let cases: [&[(u64, u64)]; 6] = [
                    &[(0, 9000)],
                    &[(1, 4096)],
                    &[(1023, 2)],
                    &[(8000, 5000)],
                    &[(9500, 10)],
                    &[(1, 4096), (8000, 5000), (3, 2), (9500, 1), (0, 1024)],
                ];
                for asked in cases {
                    id += 1;
                    let r = round_trip(
                        &mut fake,
                        &auth,
                        p,
                        obj,
                        Op::Read {
                            regions: asked.iter().map(|&(o, l)| Region::new(o, l)).collect(),
                        },
                        &[],
                        id,
                    )
                    .unwrap_or_else(|e| panic!("{suite:?} {scheme} {p} {asked:?}: {e}"));
                    let want: Vec<u8> = asked
                        .iter()
                        .flat_map(|&(o, l)| {
                            let end = (o + l).min(9000) as usize;
                            data[(o as usize).min(end)..end].to_vec()
                        })
                        .collect();
                    assert_eq!(r.data, want, "{scheme} {p} {asked:?}");
                    assert_eq!(r.authenticated, p.integrity_args());
                }
                id += 1;
                let g = round_trip(&mut fake, &auth, p, obj, Op::GetAttr, &[], id).unwrap();
                assert_eq!(g.attributes().unwrap().logical_size, 9000);
            }
        }
    }
}

#[test]
fn any_flipped_reply_bit_is_refused_and_no_data_escapes() {
    let mut fake = FakeDrive::new(Suite::Blake3);
    for scheme in Scheme::ALL {
        for p in [Protection::INTEGRITY_DATA, Protection::PRIVACY_DATA] {
            let obj = fake.create(scheme);
            let auth = cap(&fake, obj, Region::new(0, 1 << 20), false);
            // 20 chunks, so a `tree` read of chunks 4..7 carries proof nodes outside the MAC input.
            let data: Vec<u8> = (0..20_000u32).map(|i| (i % 200) as u8 + 3).collect();
            round_trip(
                &mut fake,
                &auth,
                p,
                obj,
                Op::Write {
                    regions: vec![Region::new(0, 20_000)],
                    form: scheme,
                    write_back: false,
                    signature: None,
                },
                &data,
                1,
            )
            .unwrap();
            let op = Op::Read {
                regions: vec![Region::new(5000, 2000)],
            };
            let spec = RequestSpec {
                auth: &auth,
                protection: p,
                partition: PartitionId(1),
                object: obj,
                op: &op,
                data: &[],
            };
            let built = build_request(fake.suite, 2, nonce(2), &spec).unwrap();
            let reply = fake.handle(&built.frame[4..]);
            assert_eq!(
                open_reply(&built.pending, ReplyFrame::from_body(reply.clone()))
                    .unwrap()
                    .data,
                &data[5000..7000]
            );
            // Every bit after the request id (flipping the id is caught as a mismatch too).
            let step = if reply.len() > 600 { 7 } else { 1 };
            for bit in (8..reply.len() * 8).step_by(step) {
                let mut bad = reply.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                match open_reply(&built.pending, ReplyFrame::from_body(bad.clone())) {
                    Ok(r) => panic!("{scheme} {p}: bit {bit} accepted, {} bytes", r.data.len()),
                    Err(ClientError::Refused { authenticated, .. }) => {
                        assert!(!authenticated, "bit {bit}")
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

#[test]
fn refusals_carry_status_and_detail() {
    let mut fake = FakeDrive::new(Suite::Blake3);
    let obj = fake.create(Scheme::Tree);
    let auth = cap(&fake, obj, Region::new(0, 100), false);
    let e = round_trip(
        &mut fake,
        &auth,
        Protection::INTEGRITY_DATA,
        obj,
        Op::Read {
            regions: vec![Region::new(50, 100)],
        },
        &[],
        1,
    )
    .unwrap_err();
    assert_eq!(e.status(), Some(Status::RegionOutsideCapability));
    let msg = e.to_string();
    assert!(msg.contains("region outside capability"), "{msg}");
    assert!(msg.starts_with("read refused by the drive:"), "{msg}");

    // A forged capability key: the fake cannot authenticate, so its refusal is unauthenticated.
    let mut forged = cap(&fake, obj, Region::new(0, 100), false);
    if let Auth::Capability(c) = &mut forged {
        c.key = Key::from_bytes([1; 32]);
    }
    let e = round_trip(
        &mut fake,
        &forged,
        Protection::INTEGRITY_ARGS,
        obj,
        Op::GetAttr,
        &[],
        2,
    )
    .unwrap_err();
    assert!(matches!(
        e,
        ClientError::Refused {
            status: Status::BadDigest,
            authenticated: false,
            ..
        }
    ));
    assert!(e.to_string().contains("unauthenticated"), "{e}");
}

#[test]
fn stripped_reply_protection_is_an_integrity_error() {
    let mut fake = FakeDrive::new(Suite::Blake3);
    let obj = fake.create(Scheme::Mac);
    let auth = cap(&fake, obj, Region::new(0, 1 << 20), false);
    let op = Op::GetAttr;
    let spec = RequestSpec {
        auth: &auth,
        protection: Protection::INTEGRITY_ARGS,
        partition: PartitionId(1),
        object: obj,
        op: &op,
        data: &[],
    };
    let built = build_request(fake.suite, 3, nonce(3), &spec).unwrap();
    fake.downgrade_replies = true;
    let reply = fake.handle(&built.frame[4..]);
    let e = open_reply(&built.pending, ReplyFrame::from_body(reply.clone())).unwrap_err();
    assert!(matches!(e, ClientError::Integrity { .. }), "{e}");
}

#[test]
fn setattr_and_create_args_survive() {
    let mut fake = FakeDrive::new(Suite::Sha256);
    let obj = fake.create(Scheme::Digest);
    let auth = cap(&fake, obj, Region::new(0, 1 << 20), false);
    let attrs = Attributes {
        fs_specific: [7; 256],
        ..Default::default()
    };
    let r = round_trip(
        &mut fake,
        &auth,
        Protection::PRIVACY_ARGS,
        obj,
        Op::SetAttr {
            mask: AttrMask::FS_SPECIFIC,
            attrs: Box::new(attrs),
            signature: None,
        },
        &[],
        4,
    )
    .unwrap();
    assert_eq!(r.attributes().unwrap().fs_specific, [7; 256]);
    let _ = DriveId(0);
}

/// Seed 001 §3.3.1 scheme 1 on the client: under a capability that names a writer key, every
/// write and size change is signed with the capability's signer over the `wsig` message, and
/// without the right signer nothing is built.
#[test]
fn writes_under_a_writer_key_are_signed_or_not_sent() {
    use nasd_crypto::wsig::{self, WriterSigner};
    use std::sync::Arc;
    let fake = FakeDrive::new(Suite::Blake3);
    let signer = Arc::new(WriterSigner::from_seed(&nasd_crypto::Key::from_bytes(
        [6; 32],
    )));
    let stranger = Arc::new(WriterSigner::from_seed(&nasd_crypto::Key::from_bytes(
        [7; 32],
    )));
    let args = CapabilityArgs {
        drive: fake.drive,
        partition: PartitionId(1),
        object: ObjectId(16),
        region: Region::WHOLE,
        rights: Rights::ALL,
        expiry_ms: u64::MAX,
        audit_id: 0,
        min_protection: Protection::NONE,
        writer_key: Some(signer.public()),
    };
    let minted = Capability::mint(fake.suite, &fake.working_key, args, 0, false);
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 241) as u8).collect();
    let write = Op::Write {
        regions: vec![Region::new(5, 1000), Region::new(9000, 2000)],
        form: Scheme::Tree,
        write_back: false,
        signature: None,
    };
    let resize = Op::SetAttr {
        mask: AttrMask::LOGICAL_SIZE,
        attrs: Box::new(Attributes {
            logical_size: 77,
            ..Attributes::default()
        }),
        signature: None,
    };
    let build = |auth: &Auth, op: &Op, data: &[u8], p: Protection| {
        build_request(
            fake.suite,
            3,
            nonce(3),
            &RequestSpec {
                auth,
                protection: p,
                partition: PartitionId(1),
                object: ObjectId(16),
                op,
                data,
            },
        )
    };

    // No signer, or another key's: refused before a byte is built.
    let unsigned = Auth::Capability(minted.clone());
    let wrong = Auth::Capability(minted.clone().with_signer(stranger));
    for auth in [&unsigned, &wrong] {
        for (op, d) in [(&write, &data[..]), (&resize, &[][..])] {
            match build(auth, op, d, Protection::INTEGRITY_DATA) {
                Err(ClientError::NotSigned { writer_key, .. }) => {
                    assert_eq!(writer_key, signer.public())
                }
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("an unsigned {} was built", op.code().name()),
            }
        }
    }

    // With the writer's key: the signature verifies over the documented message, whatever the
    // protection (the data digest does not depend on INTEGRITY_DATA).
    let auth = Auth::Capability(minted.clone().with_signer(signer.clone()));
    for p in [
        Protection::NONE,
        Protection::INTEGRITY_DATA,
        Protection::PRIVACY_DATA,
    ] {
        let built = build(&auth, &write, &data, p).unwrap();
        let body = &built.frame[4..];
        let (h, _) = RequestHeader::decode(body).unwrap();
        let args = if p.privacy_args() {
            let pk = privacy_key(fake.suite, auth.key(), &nonce(3));
            aead::open(&pk, Field::RequestArgs.nonce(), b"", &h.args).unwrap()
        } else {
            h.args.clone()
        };
        let got = Op::decode_args(OpCode::Write, &args).unwrap();
        let sig = *got.writer_signature().expect("signed");
        let mut c = Cost::default();
        let mut d = wsig::DataDigest::new(fake.suite, Scheme::Tree);
        let (a, b) = data.split_at(1000);
        for (off, bytes) in [(5u64, a), (9000, b)] {
            d.region(
                &write_form(fake.suite, Scheme::Tree, off, bytes, &mut c),
                bytes,
                &mut c,
            );
        }
        let place = wsig::Place {
            drive: fake.drive,
            partition: PartitionId(1),
            object: ObjectId(16),
            nonce: nonce(3),
        };
        let msg = wsig::message(
            &place,
            &wsig::Change::Write {
                form: Scheme::Tree,
                regions: &[Region::new(5, 1000), Region::new(9000, 2000)],
                data_digest: d.finish(&mut c),
            },
        );
        assert_eq!(wsig::verify(&signer.public(), &msg, &sig), Ok(()), "{p}");
    }
    let built = build(&auth, &resize, &[], Protection::INTEGRITY_ARGS).unwrap();
    let (h, _) = RequestHeader::decode(&built.frame[4..]).unwrap();
    let got = Op::decode_args(OpCode::SetAttr, &h.args).unwrap();
    let place = wsig::Place {
        drive: fake.drive,
        partition: PartitionId(1),
        object: ObjectId(16),
        nonce: nonce(3),
    };
    let msg = wsig::message(&place, &wsig::Change::Resize { logical_size: 77 });
    assert_eq!(
        wsig::verify(&signer.public(), &msg, got.writer_signature().unwrap()),
        Ok(())
    );

    // What changes no bytes is not signed: a read, a setattr of other attributes.
    let fs = Op::SetAttr {
        mask: AttrMask::FS_SPECIFIC,
        attrs: Box::default(),
        signature: None,
    };
    let read = Op::Read {
        regions: vec![Region::new(0, 10)],
    };
    for op in [&fs, &read] {
        let built = build(&unsigned, op, &[], Protection::INTEGRITY_ARGS).unwrap();
        let (h, _) = RequestHeader::decode(&built.frame[4..]).unwrap();
        assert_eq!(h.args, op.encode_args(), "{}", op.code().name());
    }

    // A capability without a writer key sends what it always sent, a signer or not.
    let plain = Capability::mint(
        fake.suite,
        &fake.working_key,
        CapabilityArgs {
            writer_key: None,
            ..args
        },
        0,
        false,
    );
    let with = build(
        &Auth::Capability(plain.clone().with_signer(signer.clone())),
        &write,
        &data,
        Protection::INTEGRITY_DATA,
    )
    .unwrap();
    let without = build(
        &Auth::Capability(plain),
        &write,
        &data,
        Protection::INTEGRITY_DATA,
    )
    .unwrap();
    assert_eq!(with.frame, without.frame);
    let (h, _) = RequestHeader::decode(&without.frame[4..]).unwrap();
    assert_eq!(h.args, write.encode_args());
}
