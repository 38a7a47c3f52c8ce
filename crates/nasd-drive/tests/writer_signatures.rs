//! Seed 001's scheme 1 on the drive (§3.3.1, requirements B.4), over TCP against a real drive:
//! a capability that names a writer's Ed25519 key lets its holder change the object's bytes
//! only with requests that key signed. Unsigned, wrongly signed, moved, altered and replayed
//! writes are each refused, and none of them changes a byte or an attribute.

mod common;
use common::*;
use nasd_client::wire::{build_request_signing, RequestSpec, Signing};
use nasd_client::{Auth, Capability, ClientError, DriveConn};
use nasd_crypto::integrity::pieces::write_form;
use nasd_crypto::wsig::{self, WriterSigner};
use nasd_crypto::{Cost, Key};
use nasd_proto::{
    AttrMask, Attributes, CapabilityArgs, DriveId, Nonce, ObjectId, Op, Protection, Region, Rights,
    Scheme, Status, Suite, WriterSignature,
};
use std::sync::Arc;

fn signer(seed: u8) -> Arc<WriterSigner> {
    Arc::new(WriterSigner::from_seed(&Key::from_bytes([seed; 32])))
}

/// Sends `op` as given (its signature field untouched) and returns the drive's status.
async fn send(
    c: &DriveConn,
    auth: &Auth,
    p: Protection,
    object: ObjectId,
    op: &Op,
    data: &[u8],
    nonce: Nonce,
) -> Status {
    let req = build(c, auth, p, object, op, data, nonce);
    status_of(c, req.0, req.1).await
}

/// The frame of `op` as given, and its request id.
fn build(
    c: &DriveConn,
    auth: &Auth,
    p: Protection,
    object: ObjectId,
    op: &Op,
    data: &[u8],
    nonce: Nonce,
) -> (u64, Vec<u8>) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 61);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let spec = RequestSpec {
        auth,
        protection: p,
        partition: P,
        object,
        op,
        data,
    };
    let req = build_request_signing(c.welcome().suite, id, nonce, &spec, Signing::AsGiven).unwrap();
    (id, req.frame)
}

async fn status_of(c: &DriveConn, id: u64, frame: Vec<u8>) -> Status {
    let body = c.exchange(id, frame, "raw").await.unwrap();
    nasd_proto::ReplyHeader::decode(&body).unwrap().0.status
}

/// A write's signature over `regions` and `data` at `place`, in tree form.
fn sign_write(
    s: &WriterSigner,
    suite: Suite,
    place: wsig::Place,
    regions: &[Region],
    data: &[u8],
) -> WriterSignature {
    let mut c = Cost::default();
    let mut d = wsig::DataDigest::new(suite, Scheme::Tree);
    let mut at = 0usize;
    for r in regions {
        let bytes = &data[at..at + r.len as usize];
        at += r.len as usize;
        d.region(
            &write_form(suite, Scheme::Tree, r.offset, bytes, &mut c),
            bytes,
            &mut c,
        );
    }
    let change = wsig::Change::Write {
        form: Scheme::Tree,
        regions,
        data_digest: d.finish(&mut c),
    };
    s.sign(&wsig::message(&place, &change))
}

fn write_op(regions: Vec<Region>, signature: Option<WriterSignature>) -> Op {
    Op::Write {
        regions,
        form: Scheme::Tree,
        write_back: false,
        signature,
    }
}

struct Fixture {
    d: TestDrive,
    c: DriveConn,
    o: ObjectId,
    alice: Arc<WriterSigner>,
    /// The capability naming alice as the writer, with her signing key attached.
    cap: Capability,
    content: Vec<u8>,
}

async fn fixture() -> Fixture {
    let d = TestDrive::start().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let alice = signer(0xa1);
    let mut args = d.cap_args(o, Rights::ALL);
    args.min_protection = Protection::INTEGRITY_ARGS;
    args.writer_key = Some(alice.public());
    let cap = Capability::mint(d.working_key.suite, &d.working_key.key, args, 0, false)
        .with_signer(alice.clone());
    let content = bytes(7, 40_000);
    c.write(
        &Auth::Capability(cap.clone()),
        target(o, Protection::INTEGRITY_DATA),
        0,
        &content,
    )
    .await
    .unwrap();
    Fixture {
        d,
        c,
        o,
        alice,
        cap,
        content,
    }
}

impl Fixture {
    fn auth(&self) -> Auth {
        Auth::Capability(self.cap.clone())
    }
    fn place(&self, nonce: Nonce) -> wsig::Place {
        wsig::Place {
            drive: self.c.welcome().drive,
            partition: P,
            object: self.o,
            nonce,
        }
    }
    async fn attrs(&self) -> Attributes {
        self.c
            .getattr(&self.auth(), target(self.o, Protection::INTEGRITY_DATA))
            .await
            .unwrap()
    }
    /// The object holds `content` and its attributes are `before`: nothing was stored.
    async fn holds(&self, content: &[u8], before: &Attributes, what: &str) {
        let r = self
            .c
            .read(
                &self.auth(),
                target(self.o, Protection::INTEGRITY_DATA),
                vec![Region::new(0, 1 << 20)],
            )
            .await
            .unwrap();
        assert!(r.data == content, "{what}: the object's bytes changed");
        assert_eq!(&self.attrs().await, before, "{what}: attributes changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_writes_the_writer_signed_are_stored() {
    let f = fixture().await;
    let (c, o) = (&f.c, f.o);
    let suite = c.welcome().suite;
    let auth = f.auth();
    let p = Protection::INTEGRITY_DATA;
    let before = f.attrs().await;
    let regions = vec![Region::new(10, 5)];
    let data = vec![0xee; 5];
    let mallory = signer(0x66);

    // Each request is authentic (its MAC verifies under the capability key) and refused only
    // for its signature; a fresh nonce each, so no refusal is a replay.
    let mut cases: Vec<(&str, Op, Vec<u8>, Nonce)> = vec![];
    let n = c.nonce();
    cases.push(("unsigned", write_op(regions.clone(), None), data.clone(), n));
    let n = c.nonce();
    let s = sign_write(&mallory, suite, f.place(n), &regions, &data);
    cases.push((
        "signed by another key",
        write_op(regions.clone(), Some(s)),
        data.clone(),
        n,
    ));
    let n = c.nonce();
    let s = sign_write(&f.alice, suite, f.place(n), &[Region::new(11, 5)], &data);
    cases.push((
        "signed for another offset",
        write_op(regions.clone(), Some(s)),
        data.clone(),
        n,
    ));
    let n = c.nonce();
    let place = wsig::Place {
        object: ObjectId(o.0 + 1),
        ..f.place(n)
    };
    let s = sign_write(&f.alice, suite, place, &regions, &data);
    cases.push((
        "signed for another object",
        write_op(regions.clone(), Some(s)),
        data.clone(),
        n,
    ));
    let n = c.nonce();
    let place = wsig::Place {
        drive: DriveId(c.welcome().drive.0 ^ 1),
        ..f.place(n)
    };
    let s = sign_write(&f.alice, suite, place, &regions, &data);
    cases.push((
        "signed for another drive",
        write_op(regions.clone(), Some(s)),
        data.clone(),
        n,
    ));
    let n = c.nonce();
    let s = sign_write(&f.alice, suite, f.place(n), &regions, &[0xef; 5]);
    cases.push((
        "signed over other data",
        write_op(regions.clone(), Some(s)),
        data.clone(),
        n,
    ));
    let (n, earlier) = (c.nonce(), c.nonce());
    let s = sign_write(&f.alice, suite, f.place(earlier), &regions, &data);
    cases.push((
        "signed for another request's nonce",
        write_op(regions.clone(), Some(s)),
        data.clone(),
        n,
    ));
    let n = c.nonce();
    let mut s = sign_write(&f.alice, suite, f.place(n), &regions, &data);
    s.0[40] ^= 4;
    cases.push((
        "a bent signature",
        write_op(regions.clone(), Some(s)),
        data.clone(),
        n,
    ));
    let n = c.nonce();
    cases.push((
        "64 zero bytes",
        write_op(regions.clone(), Some(WriterSignature([0; 64]))),
        data.clone(),
        n,
    ));
    for (what, op, d, nonce) in &cases {
        assert_eq!(
            send(c, &auth, p, o, op, d, *nonce).await,
            Status::BadSignature,
            "{what}"
        );
        f.holds(&f.content, &before, what).await;
    }

    // A size change is signed too: unsigned, or signed for another size, it is refused.
    let resize = |size: u64, signature| Op::SetAttr {
        mask: AttrMask::LOGICAL_SIZE,
        attrs: Box::new(Attributes {
            logical_size: size,
            ..Attributes::default()
        }),
        signature,
    };
    assert_eq!(
        send(c, &auth, p, o, &resize(0, None), &[], c.nonce()).await,
        Status::BadSignature
    );
    let n = c.nonce();
    let s = f.alice.sign(&wsig::message(
        &f.place(n),
        &wsig::Change::Resize { logical_size: 1 },
    ));
    assert_eq!(
        send(c, &auth, p, o, &resize(0, Some(s)), &[], n).await,
        Status::BadSignature
    );
    f.holds(&f.content, &before, "resize").await;

    // What changes no bytes needs no signature: reads, getattr, other attributes.
    let fs = Op::SetAttr {
        mask: AttrMask::FS_SPECIFIC,
        attrs: Box::default(),
        signature: None,
    };
    assert_eq!(send(c, &auth, p, o, &fs, &[], c.nonce()).await, Status::Ok);

    // The client library signs for its caller, and the drive stores what alice signed.
    let t = target(o, p);
    c.write(&auth, t, 10, &data).await.unwrap();
    let mut want = f.content.clone();
    want[10..15].copy_from_slice(&data);
    let size = c
        .setattr(
            &auth,
            t,
            AttrMask::LOGICAL_SIZE,
            Attributes {
                logical_size: 30_000,
                ..Attributes::default()
            },
        )
        .await
        .unwrap()
        .logical_size;
    assert_eq!(size, 30_000);
    want.truncate(30_000);
    let r = c
        .read(&auth, t, vec![Region::new(0, 1 << 20)])
        .await
        .unwrap();
    assert!(r.data == want, "the signed write and truncation read back");

    // Without her key the library sends nothing.
    let unsigned = Auth::Capability(Capability {
        signer: None,
        ..f.cap.clone()
    });
    let e = c.write(&unsigned, t, 0, &data).await.unwrap_err();
    assert!(matches!(e, ClientError::NotSigned { .. }), "{e}");
    assert!(e.to_string().contains("not sent"), "{e}");
    let before = f.attrs().await;
    f.holds(&want, &before, "refused locally").await;
}

/// Seed 001 §2.3's replay attack: an old write retransmitted after the data was updated must
/// not overwrite the new data. Its signature still verifies, so the drive's nonce window and
/// replay cache are what refuse it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_signed_write_is_refused() {
    let f = fixture().await;
    let (c, o) = (&f.c, f.o);
    let auth = f.auth();
    let t = target(o, Protection::INTEGRITY_DATA);
    let old = vec![0x01; 4096];
    let req = c
        .prepare(
            c.nonce(),
            &auth,
            t,
            &write_op(vec![Region::new(0, 4096)], None),
            &old,
        )
        .unwrap();
    let (id, frame) = (req.pending.request_id, req.frame.clone());
    c.submit(req).await.unwrap();
    let new = vec![0x02; 4096];
    c.write(&auth, t, 0, &new).await.unwrap();
    let before = f.attrs().await;
    let mut want = f.content.clone();
    want[..4096].copy_from_slice(&new);

    assert_eq!(status_of(c, id, frame.clone()).await, Status::NonceReplayed);
    f.holds(&want, &before, "replay on the same connection")
        .await;
    // and on another connection: the replay cache is the drive's, not the connection's
    let c2 = f.d.conn().await;
    assert_eq!(status_of(&c2, id, frame).await, Status::NonceReplayed);
    f.holds(&want, &before, "replay on another connection")
        .await;
}

/// The writer key is a capability argument: the capability key binds it, so a holder cannot
/// drop it, swap it for a key of their own, or add one; and a changed byte of a signed write
/// that the MAC does not cover is caught by the signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_key_is_bound_and_the_signature_covers_the_data() {
    let f = fixture().await;
    let (c, o) = (&f.c, f.o);
    let before = f.attrs().await;
    let mallory = signer(0x66);
    let data = vec![0x99; 3000];
    let forged = |writer_key| {
        Auth::Capability(Capability {
            args: CapabilityArgs {
                writer_key,
                ..f.cap.args
            },
            signer: Some(mallory.clone()),
            ..f.cap.clone()
        })
    };
    for (what, auth) in [
        ("writer key swapped", forged(Some(mallory.public()))),
        ("writer key dropped", forged(None)),
    ] {
        let e = c
            .write(&auth, target(o, Protection::INTEGRITY_DATA), 0, &data)
            .await
            .unwrap_err();
        assert_eq!(e.status(), Some(Status::BadDigest), "{what}: {e}");
        f.holds(&f.content, &before, what).await;
    }
    // A capability minted without a writer key cannot have one added either.
    let mut plain_args = f.cap.args;
    plain_args.writer_key = None;
    let plain = Capability::mint(
        f.d.working_key.suite,
        &f.d.working_key.key,
        plain_args,
        0,
        false,
    );
    let added = Auth::Capability(Capability {
        args: CapabilityArgs {
            writer_key: Some(mallory.public()),
            ..plain_args
        },
        signer: Some(mallory.clone()),
        ..plain
    });
    let e = c
        .write(&added, target(o, Protection::INTEGRITY_DATA), 0, &data)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::BadDigest), "writer key added: {e}");
    f.holds(&f.content, &before, "writer key added").await;

    // Under integrity-args the MAC covers no data, the signature does: data changed on the
    // way (after the header) is refused, and nothing is stored.
    let req = c
        .prepare(
            c.nonce(),
            &f.auth(),
            target(o, Protection::INTEGRITY_ARGS),
            &write_op(vec![Region::new(100, 3000)], None),
            &data,
        )
        .unwrap();
    let id = req.pending.request_id;
    let mut frame = req.frame;
    let last = frame.len() - 1;
    frame[last] ^= 1;
    assert_eq!(status_of(c, id, frame).await, Status::BadSignature);
    f.holds(&f.content, &before, "data changed in flight").await;

    // Signed writes verify under every protection that carries a digest, sealed capability
    // and privacy of data included (the signature covers the plaintext).
    let mut want = f.content.clone();
    let sealed = Capability::mint(
        f.d.working_key.suite,
        &f.d.working_key.key,
        f.cap.args,
        0,
        true,
    )
    .with_signer(f.alice.clone());
    for (i, p) in [
        "integrity-args",
        "integrity-data",
        "privacy-args",
        "privacy-data",
        "privacy-data,privacy-capability",
    ]
    .iter()
    .enumerate()
    {
        let p = Protection::parse(p).unwrap();
        let auth = Auth::Capability(sealed.clone());
        let chunk = vec![i as u8 + 0x40; 2500];
        let at = 5000 * i as u64 + 3;
        c.write(&auth, target(o, p), at, &chunk).await.unwrap();
        want[at as usize..at as usize + 2500].copy_from_slice(&chunk);
    }
    let r = c
        .read(
            &f.auth(),
            target(o, Protection::INTEGRITY_DATA),
            vec![Region::new(0, 1 << 20)],
        )
        .await
        .unwrap();
    assert!(r.data == want, "the signed writes read back");
}

/// Writes in every form (the signature's data digest is the write form's) and with several
/// regions are accepted when signed, and a key-authorized write needs no signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_form_and_scatter_gather_write_verifies() {
    let f = fixture().await;
    let (c, o) = (&f.c, f.o);
    let auth = f.auth();
    let mut want = f.content.clone();
    for (i, form) in Scheme::ALL.into_iter().enumerate() {
        let regions = vec![
            Region::new(1000 * i as u64 + 1, 700),
            Region::new(20_000 + 3000 * i as u64, 2100),
        ];
        let data = bytes(100 + i as u64, 2800);
        c.write_regions(
            &auth,
            target(o, Protection::INTEGRITY_DATA),
            regions.clone(),
            form,
            false,
            &data,
        )
        .await
        .unwrap_or_else(|e| panic!("{form}: {e}"));
        let mut at = 0;
        for r in &regions {
            want[r.offset as usize..(r.offset + r.len) as usize]
                .copy_from_slice(&data[at..at + r.len as usize]);
            at += r.len as usize;
        }
    }
    // The partition key authorizes without a capability, so without a writer key.
    c.write(
        &f.d.partition_auth(),
        target(o, Protection::INTEGRITY_DATA),
        39_000,
        &[0x11; 1000],
    )
    .await
    .unwrap();
    want[39_000..].fill(0x11);
    let r = c
        .read(
            &auth,
            target(o, Protection::INTEGRITY_DATA),
            vec![Region::new(0, 1 << 20)],
        )
        .await
        .unwrap();
    assert!(r.data == want);
}
