//! Known-answer vectors for nasd's own constructions (capability keys, request and reply MACs,
//! key wrapping, the integrity schemes' digests, writer-signed messages and their Ed25519
//! signatures, which are deterministic), kept in `tests/vectors/crypto.json` at the
//! repository root so any reimplementation can check itself against them. Run with
//! `NASD_WRITE_VECTORS=1` to regenerate after an intentional, versioned format change.

use nasd_crypto::integrity::{adhash, block_meta, pieces, tree, BlockMeta};
use nasd_crypto::request::{reply_mac, request_mac, wrap_key};
use nasd_crypto::{capability, primitives, wsig, Cost, Key};
use nasd_proto::*;
use std::collections::BTreeMap;

fn compute() -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    let mut c = Cost::default();
    let data: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for suite in [Suite::Blake3, Suite::Sha256] {
        let s = suite.name();
        let wk = Key::from_bytes([0x11; 32]);
        let args = CapabilityArgs {
            drive: DriveId(0x0123_4567_89ab_cdef),
            partition: PartitionId(1),
            object: ObjectId(16),
            region: Region::new(0, 1 << 20),
            rights: Rights::READ.union(Rights::WRITE),
            expiry_ms: 1_800_000_000_000,
            audit_id: 42,
            min_protection: Protection::INTEGRITY_DATA,
            writer_key: None,
        };
        v.insert(format!("{s}/capability_args"), hex::encode(args.encode()));
        let ck = capability::capability_key(suite, &wk, &args, 7);
        v.insert(format!("{s}/capability_key(acv=7)"), ck.to_hex());
        // Protocol 4: the same args naming a writer key (the public key of seed 0x33..).
        let signer = wsig::WriterSigner::from_seed(&Key::from_bytes([0x33; 32]));
        let keyed = CapabilityArgs {
            writer_key: Some(signer.public()),
            ..args
        };
        v.insert(
            format!("{s}/capability_args(writer key)"),
            hex::encode(keyed.encode()),
        );
        v.insert(
            format!("{s}/capability_key(writer key, acv=7)"),
            capability::capability_key(suite, &wk, &keyed, 7).to_hex(),
        );
        // A signed write of data[1000..12000] at offset 1000 in each form, and a signed resize.
        // Checked independently when they were made: the signatures and the writer key with
        // Python's `cryptography` (Ed25519 signing is deterministic, RFC 8032), the sha256
        // suite's writer-key capability key and its `mac` and `digest` data digests with
        // Python's `hmac` and `hashlib`.
        let place = wsig::Place {
            drive: args.drive,
            partition: args.partition,
            object: args.object,
            nonce: Nonce {
                time_us: 1_700_000_000_000_000,
                random: 99,
            },
        };
        for form in Scheme::ALL {
            let bytes = &data[1000..12_000];
            let pieces = pieces::write_form(suite, form, 1000, bytes, &mut c);
            let mut dd = wsig::DataDigest::new(suite, form);
            dd.region(&pieces, bytes, &mut c);
            let data_digest = dd.finish(&mut c);
            let regions = [Region::new(1000, 11_000)];
            let msg = wsig::message(
                &place,
                &wsig::Change::Write {
                    form,
                    regions: &regions,
                    data_digest,
                },
            );
            let f = form.name();
            v.insert(
                format!("{s}/wsig/message(write {f} 1000+11000)"),
                hex::encode(&msg),
            );
            v.insert(
                format!("{s}/wsig/signature(write {f} 1000+11000, seed 33..)"),
                hex::encode(signer.sign(&msg).0),
            );
        }
        let msg = wsig::message(&place, &wsig::Change::Resize { logical_size: 4096 });
        v.insert(format!("{s}/wsig/message(resize 4096)"), hex::encode(&msg));
        v.insert(
            format!("{s}/wsig/signature(resize 4096, seed 33..)"),
            hex::encode(signer.sign(&msg).0),
        );
        let mut m = request_mac(suite, &ck, args.drive, b"header bytes");
        m.update(b"D");
        v.insert(format!("{s}/request_mac"), hex::encode(m.finalize(&mut c)));
        let n = Nonce {
            time_us: 1_700_000_000_000_000,
            random: 99,
        };
        let m = reply_mac(suite, &ck, &n, b"reply header");
        v.insert(format!("{s}/reply_mac"), hex::encode(m.finalize(&mut c)));
        let w = wrap_key(
            suite,
            &wk,
            &n,
            OpCode::SetWorkingKey,
            PartitionId(1),
            &Key::from_bytes([0x22; 32]),
        );
        v.insert(format!("{s}/wrapped_key"), hex::encode(w));
        v.insert(
            format!("{s}/attr_digest"),
            hex::encode(primitives::attr_digest(
                suite,
                &Attributes::default().encode(),
                &mut c,
            )),
        );
        for scheme in [Scheme::Digest, Scheme::Incremental, Scheme::Tree] {
            let m = block_meta(suite, scheme, 1, &data[8192..16384], &mut c);
            let h = match m {
                BlockMeta::Digest(d) | BlockMeta::Sum(d) => hex::encode(d),
                BlockMeta::Leaves(l) => hex::encode(l.concat()),
                BlockMeta::None => String::new(),
            };
            v.insert(format!("{s}/{}/block_meta(block 1)", scheme.name()), h);
            let wf = pieces::write_form(suite, scheme, 1000, &data[1000..12_000], &mut c);
            let all: Vec<u8> = wf.iter().flat_map(|p| p.value).collect();
            v.insert(
                format!("{s}/{}/write_form(1000+11000)", scheme.name()),
                hex::encode(blake3::hash(&all).as_bytes()),
            );
        }
        v.insert(
            format!("{s}/adhash/sub_hash(5)"),
            hex::encode(adhash::sub_hash(suite, 5, &data[..256], &mut c)),
        );
        let leaves: Vec<_> = data
            .chunks(1024)
            .enumerate()
            .map(|(i, ch)| tree::leaf(suite, i as u64, ch, &mut c))
            .collect();
        let mut src = tree::LeafNodes {
            suite,
            leaves: &leaves,
        };
        let top = tree::top(suite, &mut src, leaves.len() as u64).unwrap();
        v.insert(format!("{s}/tree/top(20000 bytes)"), hex::encode(top));
        v.insert(
            format!("{s}/tree/zero(0)"),
            hex::encode(tree::zero(suite, 0)),
        );
        let proof = tree::prove(suite, &mut src, leaves.len() as u64, 3, 7).unwrap();
        v.insert(format!("{s}/tree/proof(3..7)"), hex::encode(proof.concat()));
        v.insert(
            format!("{s}/tree/partial(2, 100, 50 bytes)"),
            hex::encode(tree::partial(suite, 2, 100, &data[2148..2198], &mut c)),
        );
    }
    let seal = nasd_crypto::seal::KeySeal::create_with_salt(b"passphrase", [7; 16], 8, 1).unwrap();
    v.insert(
        "seal/header(salt 07.., m 8 KiB, t 1)".into(),
        hex::encode(seal.header().encode()),
    );
    v.insert(
        "seal/sealed_key(slot master, key 11..)".into(),
        hex::encode(seal.seal("master", &Key::from_bytes([0x11; 32]))),
    );
    v
}

#[test]
fn known_answers() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/crypto.json");
    let got = compute();
    if std::env::var("NASD_WRITE_VECTORS").is_ok() {
        std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
    }
    let want: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("vectors file")).unwrap();
    assert_eq!(got.len(), want.len(), "vector set changed");
    for (k, w) in &want {
        assert_eq!(got.get(k), Some(w), "known answer {k}");
    }
}
