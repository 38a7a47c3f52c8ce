//! Every check of seed 002 §2.4, over TCP against a real drive: each forged, expired, revoked,
//! replayed, out-of-region or under-protected request is refused with its own status, and
//! changes nothing.

mod common;
use common::*;
use nasd_client::wire::{build_request, RequestSpec};
use nasd_client::{Auth, ClientError, DriveConn};
use nasd_crypto::Key;
use nasd_proto::{
    AttrMask, Attributes, DriveId, Nonce, ObjectId, Op, Protection, Region, Rights, Scheme, Status,
};

fn status(r: Result<impl Sized, ClientError>) -> Status {
    match r {
        Err(e) => e
            .status()
            .unwrap_or_else(|| panic!("not a drive refusal: {e}")),
        Ok(_) => panic!("request was accepted"),
    }
}

/// Sends a request the client library would refuse to build (wrong drive, stale nonce, ...).
async fn raw(
    c: &DriveConn,
    auth: &Auth,
    p: Protection,
    object: ObjectId,
    op: &Op,
    data: &[u8],
    nonce: Nonce,
) -> Status {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 60);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let spec = RequestSpec {
        auth,
        protection: p,
        partition: P,
        object,
        op,
        data,
    };
    let req = build_request(c.welcome().suite, id, nonce, &spec).unwrap();
    let body = c.exchange(id, req.frame, "raw").await.unwrap();
    nasd_proto::ReplyHeader::decode(&body).unwrap().0.status
}

struct Fixture {
    d: TestDrive,
    c: DriveConn,
    o: ObjectId,
    content: Vec<u8>,
}

async fn fixture() -> Fixture {
    let d = TestDrive::start().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let content = bytes(3, 50_000);
    let w = d.mint(d.cap_args(o, Rights::ALL), 0);
    c.write(&w, target(o, Protection::INTEGRITY_DATA), 0, &content)
        .await
        .unwrap();
    Fixture { d, c, o, content }
}

impl Fixture {
    /// The object is unchanged: same bytes, same attributes apart from nothing.
    async fn unchanged(&self, before: &Attributes) {
        let a = self.d.mint(
            self.d.cap_args(self.o, Rights::ALL),
            before.access_control_version,
        );
        let r = self
            .c
            .read(
                &a,
                target(self.o, Protection::INTEGRITY_DATA),
                vec![Region::new(0, 1 << 20)],
            )
            .await
            .unwrap();
        assert!(r.data == self.content, "data changed by a refused request");
        let now = self
            .c
            .getattr(&a, target(self.o, Protection::INTEGRITY_DATA))
            .await
            .unwrap();
        assert_eq!(&now, before, "attributes changed by a refused request");
    }
    async fn attrs(&self) -> Attributes {
        let a = self.d.mint(self.d.cap_args(self.o, Rights::ALL), 0);
        self.c
            .getattr(&a, target(self.o, Protection::INTEGRITY_DATA))
            .await
            .unwrap()
    }
    fn write_op(&self) -> (Op, Vec<u8>) {
        (
            Op::Write {
                regions: vec![Region::new(10, 5)],
                form: Scheme::Tree,
                write_back: false,
                signature: None,
            },
            vec![0xee; 5],
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_has_its_status_and_changes_nothing() {
    let f = fixture().await;
    let (c, d, o) = (&f.c, &f.d, f.o);
    let before = f.attrs().await;
    let wdata = vec![0xee; 5];
    let write = |a: Auth, p: Protection| {
        let wdata = wdata.clone();
        async move { c.write(&a, target(o, p), 10, &wdata).await }
    };

    // 1. request protection below the capability's minimum
    let mut args = d.cap_args(o, Rights::ALL);
    args.min_protection = Protection::INTEGRITY_DATA;
    assert_eq!(
        status(write(d.mint(args, 0), Protection::INTEGRITY_ARGS).await),
        Status::ProtectionTooWeak
    );

    // 2. capability minimum below the partition's minimum
    c.set_min_protection(
        &d.partition_auth(),
        target(ObjectId(0), Protection::INTEGRITY_ARGS),
        false,
        Protection::INTEGRITY_DATA,
    )
    .await
    .unwrap();
    let weak = d.mint(d.cap_args(o, Rights::ALL), 0); // minimum NONE
    assert_eq!(
        status(write(weak.clone(), Protection::INTEGRITY_DATA).await),
        Status::CapabilityBelowMinimum
    );
    // a capability that meets it still works for reads
    let mut strong_args = d.cap_args(o, Rights::READ);
    strong_args.min_protection = Protection::INTEGRITY_DATA;
    c.read(
        &d.mint(strong_args, 0),
        target(o, Protection::INTEGRITY_DATA),
        vec![Region::new(0, 10)],
    )
    .await
    .unwrap();
    c.set_min_protection(
        &d.partition_auth(),
        target(ObjectId(0), Protection::INTEGRITY_DATA),
        false,
        Protection::NONE,
    )
    .await
    .unwrap();

    // 3. nonce outside the window (past and future)
    let (op, data) = f.write_op();
    let all = d.mint(d.cap_args(o, Rights::ALL), 0);
    let now = nasd_drive::now_us();
    for t in [now - 120_000_000, now + 120_000_000] {
        let n = Nonce {
            time_us: t,
            random: 5,
        };
        assert_eq!(
            raw(c, &all, Protection::INTEGRITY_DATA, o, &op, &data, n).await,
            Status::NonceOutsideWindow
        );
    }

    // 4. expired capability
    let mut args = d.cap_args(o, Rights::ALL);
    args.expiry_ms = now / 1000 - 1;
    let e = write(d.mint(args, 0), Protection::INTEGRITY_DATA)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::CapabilityExpired));
    assert!(e.to_string().contains("capability expired at"), "{e}");

    // 5. another drive's capability; another object's capability
    let mut args = d.cap_args(o, Rights::ALL);
    args.drive = DriveId(args.drive.0 ^ 1);
    let other_drive = d.mint(args, 0);
    assert_eq!(
        raw(
            c,
            &other_drive,
            Protection::INTEGRITY_DATA,
            o,
            &op,
            &data,
            c.nonce()
        )
        .await,
        Status::WrongDrive
    );
    let other = d.create(c, Scheme::Tree).await;
    let for_other = d.mint(d.cap_args(other, Rights::ALL), 0);
    assert_eq!(
        raw(
            c,
            &for_other,
            Protection::INTEGRITY_DATA,
            o,
            &op,
            &data,
            c.nonce()
        )
        .await,
        Status::ObjectMismatch
    );

    // 6. rights
    let ro = d.mint(d.cap_args(o, Rights::READ.union(Rights::GETATTR)), 0);
    assert_eq!(
        status(write(ro.clone(), Protection::INTEGRITY_DATA).await),
        Status::RightsDenied
    );
    let mut a = Attributes::default();
    a.fs_specific[0] = 1;
    assert_eq!(
        status(
            c.setattr(
                &ro,
                target(o, Protection::INTEGRITY_DATA),
                AttrMask::FS_SPECIFIC,
                a
            )
            .await
        ),
        Status::RightsDenied
    );
    assert_eq!(
        status(c.remove(&ro, target(o, Protection::INTEGRITY_DATA)).await),
        Status::RightsDenied
    );

    // 7. region outside the capability's
    let mut args = d.cap_args(o, Rights::ALL);
    args.region = Region::new(0, 4096);
    let small = d.mint(args, 0);
    assert_eq!(
        status(
            c.read(
                &small,
                target(o, Protection::INTEGRITY_DATA),
                vec![Region::new(4000, 200)]
            )
            .await
        ),
        Status::RegionOutsideCapability
    );
    assert_eq!(
        status(
            c.write(&small, target(o, Protection::INTEGRITY_DATA), 4095, &[1, 2])
                .await
        ),
        Status::RegionOutsideCapability
    );
    c.read(
        &small,
        target(o, Protection::INTEGRITY_DATA),
        vec![Region::new(0, 4096)],
    )
    .await
    .unwrap();

    // a refusal found after the digest verified is answered under the request's key
    let e = c
        .read(
            &small,
            target(o, Protection::INTEGRITY_DATA),
            vec![Region::new(4000, 200)],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Refused {
                authenticated: true,
                ..
            }
        ),
        "{e}"
    );

    // 8. digest: a forged capability key, a changed argument, a changed data byte
    let nasd_client::Auth::Capability(mut forged) = d.mint(d.cap_args(o, Rights::ALL), 0) else {
        unreachable!()
    };
    forged.key = Key::from_bytes([0x42; 32]);
    assert_eq!(
        status(write(Auth::Capability(forged), Protection::INTEGRITY_ARGS).await),
        Status::BadDigest
    );
    let spec = RequestSpec {
        auth: &all,
        protection: Protection::INTEGRITY_DATA,
        partition: P,
        object: o,
        op: &op,
        data: &data,
    };
    let req = build_request(c.welcome().suite, 1 << 59, c.nonce(), &spec).unwrap();
    let mut frame = req.frame.clone();
    let last = frame.len() - 1;
    frame[last] ^= 1; // one data bit
    let body = c.exchange(1 << 59, frame, "tampered").await.unwrap();
    assert_eq!(
        nasd_proto::ReplyHeader::decode(&body).unwrap().0.status,
        Status::BadDigest
    );
    let req = build_request(c.welcome().suite, 1 << 58, c.nonce(), &spec).unwrap();
    let mut frame = req.frame.clone();
    frame[4 + 1 + 8 + 4 + 8] ^= 1; // a bit of the object id (header byte 4 onward is the object)
    let body = c.exchange(1 << 58, frame, "tampered").await.unwrap();
    let st = nasd_proto::ReplyHeader::decode(&body).unwrap().0.status;
    assert_eq!(st, Status::ObjectMismatch, "a changed target is refused");
    let mut frame = req.frame.clone();
    frame[4 + 1 + 8 + 4 + 1] ^= 4; // a protection bit: INTEGRITY_DATA -> + PRIVACY_ARGS
    let body = c.exchange(1 << 58, frame, "tampered").await.unwrap();
    let st = nasd_proto::ReplyHeader::decode(&body).unwrap().0.status;
    assert_eq!(
        st,
        Status::BadDigest,
        "a changed protection option is refused"
    );

    // nothing the refused requests asked for happened
    f.unchanged(&before).await;

    // 9. replay: the very same bytes twice
    let req = build_request(c.welcome().suite, 1 << 57, c.nonce(), &spec).unwrap();
    let first = c
        .exchange(1 << 57, req.frame.clone(), "first")
        .await
        .unwrap();
    assert_eq!(
        nasd_proto::ReplyHeader::decode(&first).unwrap().0.status,
        Status::Ok
    );
    f_restore(&f).await;
    let before = f.attrs().await;
    let again = c
        .exchange(1 << 57, req.frame.clone(), "replay")
        .await
        .unwrap();
    assert_eq!(
        nasd_proto::ReplyHeader::decode(&again).unwrap().0.status,
        Status::NonceReplayed
    );
    f.unchanged(&before).await;
}

/// Puts the fixture's original content back after an accepted write.
async fn f_restore(f: &Fixture) {
    let w = f.d.mint(
        f.d.cap_args(f.o, Rights::ALL),
        f.attrs().await.access_control_version,
    );
    f.c.write(&w, target(f.o, Protection::INTEGRITY_DATA), 0, &f.content)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_change_nothing() {
    let f = fixture().await;
    let (c, d, o) = (&f.c, &f.d, f.o);
    let before = f.attrs().await;
    let ro = d.mint(d.cap_args(o, Rights::READ), 0);
    let mut expired_args = d.cap_args(o, Rights::ALL);
    expired_args.expiry_ms = 1;
    let expired = d.mint(expired_args, 0);
    let revoked = d.mint(d.cap_args(o, Rights::ALL), 99);
    for auth in [&ro, &expired, &revoked] {
        assert!(c
            .write(auth, target(o, Protection::INTEGRITY_DATA), 0, &[1u8; 9000])
            .await
            .is_err());
        let a = Attributes {
            logical_size: 1,
            ..Default::default()
        };
        assert!(c
            .setattr(
                auth,
                target(o, Protection::INTEGRITY_DATA),
                AttrMask::LOGICAL_SIZE,
                a
            )
            .await
            .is_err());
        assert!(c
            .remove(auth, target(o, Protection::INTEGRITY_DATA))
            .await
            .is_err());
        assert!(c
            .fastcopy(auth, target(o, Protection::INTEGRITY_DATA))
            .await
            .is_err());
    }
    f.unchanged(&before).await;
    assert_eq!(
        d.drive.drive_info().partitions[0].objects,
        2,
        "no object created or removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_by_access_control_version() {
    let f = fixture().await;
    let (c, d, o) = (&f.c, &f.d, f.o);
    let reader = d.mint(d.cap_args(o, Rights::READ), 0);
    c.read(
        &reader,
        target(o, Protection::INTEGRITY_DATA),
        vec![Region::new(0, 100)],
    )
    .await
    .unwrap();
    let admin = d.mint(d.cap_args(o, Rights::SETATTR.union(Rights::GETATTR)), 0);
    let a = Attributes {
        access_control_version: 1,
        ..Default::default()
    };
    c.setattr(
        &admin,
        target(o, Protection::INTEGRITY_DATA),
        AttrMask::ACCESS_CONTROL_VERSION,
        a,
    )
    .await
    .unwrap();
    // every outstanding capability for the object died at once, including the admin's own
    assert_eq!(
        status(
            c.read(
                &reader,
                target(o, Protection::INTEGRITY_DATA),
                vec![Region::new(0, 100)]
            )
            .await
        ),
        Status::BadDigest
    );
    assert_eq!(
        status(
            c.getattr(&admin, target(o, Protection::INTEGRITY_DATA))
                .await
        ),
        Status::BadDigest
    );
    // a capability minted for the new version works
    let fresh = d.mint(d.cap_args(o, Rights::READ), 1);
    let r = c
        .read(
            &fresh,
            target(o, Protection::INTEGRITY_DATA),
            vec![Region::new(0, 100)],
        )
        .await
        .unwrap();
    assert_eq!(r.data, f.content[..100]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_the_drive_minimum_kills_weaker_capabilities() {
    let f = fixture().await;
    let (c, d, o) = (&f.c, &f.d, f.o);
    let weak = d.mint(d.cap_args(o, Rights::READ), 0);
    c.read(
        &weak,
        target(o, Protection::INTEGRITY_ARGS),
        vec![Region::new(0, 10)],
    )
    .await
    .unwrap();
    c.set_min_protection(
        &d.drive_auth(),
        target(ObjectId(0), Protection::INTEGRITY_ARGS),
        true,
        Protection::INTEGRITY_ARGS,
    )
    .await
    .unwrap();
    assert_eq!(
        status(
            c.read(
                &weak,
                target(o, Protection::INTEGRITY_DATA),
                vec![Region::new(0, 10)]
            )
            .await
        ),
        Status::CapabilityBelowMinimum
    );
    // key-authorized requests below the minimum are refused too
    let t = target(ObjectId(0), Protection::NONE);
    assert_eq!(
        status(c.create(&d.partition_auth(), t, Some(Scheme::Tree)).await),
        Status::ProtectionTooWeak
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn working_key_rotation_is_graceful() {
    let f = fixture().await;
    let (c, d, o) = (&f.c, &f.d, f.o);
    let old = d.mint(d.cap_args(o, Rights::READ), 0);
    let k1 = Key::generate();
    c.set_key(
        &d.partition_auth(),
        target(ObjectId(0), Protection::INTEGRITY_ARGS),
        nasd_proto::OpCode::SetWorkingKey,
        &k1,
    )
    .await
    .unwrap();
    // the previous working key still validates outstanding capabilities
    c.read(
        &old,
        target(o, Protection::INTEGRITY_DATA),
        vec![Region::new(0, 10)],
    )
    .await
    .unwrap();
    let new = Auth::Capability(nasd_client::Capability::mint(
        d.working_key.suite,
        &k1,
        d.cap_args(o, Rights::READ),
        0,
        false,
    ));
    c.read(
        &new,
        target(o, Protection::INTEGRITY_DATA),
        vec![Region::new(0, 10)],
    )
    .await
    .unwrap();
    // a second rotation retires the first key
    c.set_key(
        &d.partition_auth(),
        target(ObjectId(0), Protection::INTEGRITY_ARGS),
        nasd_proto::OpCode::SetWorkingKey,
        &Key::generate(),
    )
    .await
    .unwrap();
    assert_eq!(
        status(
            c.read(
                &old,
                target(o, Protection::INTEGRITY_DATA),
                vec![Region::new(0, 10)]
            )
            .await
        ),
        Status::BadDigest
    );
    c.read(
        &new,
        target(o, Protection::INTEGRITY_DATA),
        vec![Region::new(0, 10)],
    )
    .await
    .unwrap();
    // a working key cannot set working keys; only the partition key can
    let wk = Auth::from_key_file(&d.working_key);
    assert_eq!(
        status(
            c.set_key(
                &wk,
                target(ObjectId(0), Protection::INTEGRITY_ARGS),
                nasd_proto::OpCode::SetWorkingKey,
                &Key::generate()
            )
            .await
        ),
        Status::WrongKeyType
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_capabilities_and_privacy() {
    let f = fixture().await;
    let (c, d, o) = (&f.c, &f.d, f.o);
    let sealed = Auth::Capability(nasd_client::Capability::mint(
        d.working_key.suite,
        &d.working_key.key,
        d.cap_args(o, Rights::READ),
        0,
        true,
    ));
    let p = Protection::PRIVACY_DATA.union(Protection::PRIVACY_CAPABILITY);
    let r = c
        .read(&sealed, target(o, p), vec![Region::new(5, 1000)])
        .await
        .unwrap();
    assert_eq!(r.data, f.content[5..1005]);
    // the data on the wire is not the plaintext
    let spec = RequestSpec {
        auth: &sealed,
        protection: p,
        partition: P,
        object: o,
        op: &Op::Read {
            regions: vec![Region::new(0, 4096)],
        },
        data: &[],
    };
    let req = build_request(c.welcome().suite, 1 << 56, c.nonce(), &spec).unwrap();
    let body = c.exchange(1 << 56, req.frame, "privacy").await.unwrap();
    assert!(
        !body.windows(64).any(|w| w == &f.content[..64]),
        "plaintext visible on the wire"
    );
    // a sealed capability from another working key does not open
    let wrong = Auth::Capability(nasd_client::Capability::mint(
        d.working_key.suite,
        &Key::generate(),
        d.cap_args(o, Rights::READ),
        0,
        true,
    ));
    assert_eq!(
        status(c.read(&wrong, target(o, p), vec![Region::new(0, 10)]).await),
        Status::BadSeal
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_do_not_hurt_the_server() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = fixture().await;
    // garbage, an oversized length, a truncated frame, a wrong version: the server survives
    for junk in [
        vec![0xffu8; 64],
        (u32::MAX).to_le_bytes().to_vec(),
        nasd_proto::frame(&[3, 1, 2, 3]),
        nasd_proto::frame(&nasd_proto::Hello { version: 999 }.encode()),
    ] {
        let mut s = tokio::net::TcpStream::connect(&f.d.addr).await.unwrap();
        let _ = s.write_all(&junk).await;
        let mut buf = vec![0u8; 256];
        let _ = tokio::time::timeout(std::time::Duration::from_millis(300), s.read(&mut buf)).await;
    }
    // malformed requests after a good handshake get a Malformed reply, not a crash
    let c = f.d.conn().await;
    let mut req = vec![3u8];
    req.extend_from_slice(&7u64.to_le_bytes());
    req.extend_from_slice(&3u32.to_le_bytes());
    req.extend_from_slice(&[1, 2, 3]);
    let body = c
        .exchange(7, nasd_proto::frame(&req), "junk")
        .await
        .unwrap();
    assert_eq!(
        nasd_proto::ReplyHeader::decode(&body).unwrap().0.status,
        Status::Malformed
    );
    // a write whose region ends past the protocol's object limit is refused, not a panic
    let all = f.d.mint(f.d.cap_args(f.o, Rights::ALL), 0);
    let small = Op::Write {
        regions: vec![Region::new(0, 4)],
        form: Scheme::Tree,
        write_back: false,
        signature: None,
    };
    let spec = RequestSpec {
        auth: &all,
        protection: Protection::NONE,
        partition: P,
        object: f.o,
        op: &small,
        data: &[1, 2, 3, 4],
    };
    let req = build_request(c.welcome().suite, 9, c.nonce(), &spec).unwrap();
    let (mut h, at) = nasd_proto::RequestHeader::decode(&req.frame[4..]).unwrap();
    let huge = Op::Write {
        regions: vec![Region::new(u64::MAX - 10, 4)],
        form: Scheme::Incremental,
        write_back: false,
        signature: None,
    };
    h.args = huge.encode_args();
    let mut body = h.encode();
    body.extend_from_slice(&req.frame[4 + at..]);
    let reply = c
        .exchange(9, nasd_proto::frame(&body), "huge")
        .await
        .unwrap();
    assert_eq!(
        nasd_proto::ReplyHeader::decode(&reply).unwrap().0.status,
        Status::InvalidArgument
    );
    // and the drive still serves
    let a = f.d.mint(f.d.cap_args(f.o, Rights::READ), 0);
    c.read(
        &a,
        target(f.o, Protection::INTEGRITY_DATA),
        vec![Region::new(0, 10)],
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_trail_records_requests() {
    let f = fixture().await;
    let a = f.d.mint(f.d.cap_args(f.o, Rights::READ), 0);
    f.c.read(
        &a,
        target(f.o, Protection::INTEGRITY_DATA),
        vec![Region::new(3, 10)],
    )
    .await
    .unwrap();
    let _ =
        f.c.write(&a, target(f.o, Protection::INTEGRITY_DATA), 0, &[1])
            .await;
    let path = f.d.dir.path().join("drive/audit.log");
    let mut log = String::new();
    for _ in 0..50 {
        log = std::fs::read_to_string(&path).unwrap_or_default();
        if log.contains("RightsDenied") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        log.lines()
            .any(|l| l.contains(" 77 read 1 ") && l.ends_with(" 3 10 Ok")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains(" write ") && l.ends_with("RightsDenied")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_authorized_requests_must_prove_the_key() {
    // The test drive's minimum protection is none, yet a request "authorized by the drive key"
    // without a digest proves nothing and is refused: nobody may remove a partition that way.
    let f = fixture().await;
    let c = &f.c;
    let t = target(ObjectId(0), Protection::NONE);
    let e = c
        .remove_partition(&f.d.drive_auth(), t, true)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::ProtectionTooWeak), "{e}");
    assert_eq!(
        f.d.drive.drive_info().partitions.len(),
        1,
        "the partition is still there"
    );
    // with the digest it is the drive key's right
    let other = nasd_proto::PartitionId(2);
    let t2 = nasd_client::Target {
        partition: other,
        object: ObjectId(0),
        protection: Protection::INTEGRITY_ARGS,
    };
    c.create_partition(&f.d.drive_auth(), t2, 1 << 20, Scheme::Tree)
        .await
        .unwrap();
    assert_eq!(f.d.drive.drive_info().partitions.len(), 2);
}
