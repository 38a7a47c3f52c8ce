//! Regression tests for holes an attack on the drive found (issue 12), each against a real
//! `nasd drive run` process: replays after a restart, bytes outside a byte-range capability,
//! key-authorized requests replayed onto another drive, unauthenticated and authenticated peers
//! holding the drive's resources, and key and data files readable by other local users.

mod common;
use common::drive::*;

fn write(d: &TestDrive, cap: &str, bytes: &[u8], save: Option<&str>) {
    let input = d.path("in.bin");
    std::fs::write(&input, bytes).unwrap();
    let mut args = vec![
        "obj",
        "write",
        "--drive",
        &d.addr,
        "--cap",
        cap,
        "--offset",
        "0",
        "--in",
        input.to_str().unwrap(),
    ];
    if let Some(s) = save {
        args.extend(["--save-request", s]);
    }
    ok(&args);
}

fn read_all(d: &TestDrive, cap: &str) -> Vec<u8> {
    let o = nasd(&[
        "obj", "read", "--drive", &d.addr, "--cap", cap, "--offset", "0", "--len", "1000",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

/// A write recorded before the drive restarts, replayed after it, must not roll the object
/// back: the drive keeps its replay floor on disk. Both a crash (`kill -9`) and a clean stop.
#[test]
fn a_write_recorded_before_a_restart_is_refused_after_it() {
    for signal in [libc::SIGKILL, libc::SIGTERM] {
        let mut d = TestDrive::start();
        let id = d.create();
        let cap = d.mint("cap.json", &id, &[]);
        let saved = d.path("old-write.bin");
        write(&d, &cap, b"old content", Some(saved.to_str().unwrap()));
        write(&d, &cap, b"new content", None);
        d.restart(signal);
        let (out, err) = fails(&["obj", "replay", saved.to_str().unwrap(), "--drive", &d.addr]);
        assert!(out.is_empty());
        assert!(err.contains("refused"), "signal {signal}: {err}");
        assert!(err.contains("replay floor"), "signal {signal}: {err}");
        assert_eq!(read_all(&d, &cap), b"new content", "signal {signal}");
    }
}

/// A manager's setattr that raised the access_control_version, recorded, then superseded by a
/// later revocation, replayed after a restart, must not bring the revoked capabilities back.
#[test]
fn a_recorded_setattr_cannot_undo_a_revocation_after_a_restart() {
    let mut d = TestDrive::start();
    let id = d.create();
    let pk = d.partition_key();
    let setattr = |acv: &str, save: Option<&str>| {
        let mut a = vec![
            "obj",
            "setattr",
            "--drive",
            &d.addr,
            "--key",
            &pk,
            "--partition",
            "1",
            "--object",
            &id,
            "--access-control-version",
            acv,
        ];
        if let Some(s) = save {
            a.extend(["--save-request", s]);
        }
        ok(&a);
    };
    let saved = d.path("setattr-1.bin");
    setattr("1", Some(saved.to_str().unwrap()));
    let cap1 = d.mint("cap1.json", &id, &["--access-control-version", "1"]);
    write(&d, &cap1, b"written at version 1", None);
    setattr("2", None); // revokes cap1
    let (_, err) = fails(&[
        "obj", "read", "--drive", &d.addr, "--cap", &cap1, "--offset", "0", "--len", "10",
    ]);
    assert!(err.contains("digest does not verify"), "{err}");
    d.restart(libc::SIGKILL);
    let (_, err) = fails(&["obj", "replay", saved.to_str().unwrap(), "--drive", &d.addr]);
    assert!(err.contains("refused"), "{err}");
    let (_, err) = fails(&[
        "obj", "read", "--drive", &d.addr, "--cap", &cap1, "--offset", "0", "--len", "10",
    ]);
    assert!(
        err.contains("digest does not verify"),
        "still revoked: {err}"
    );
}

/// A request authorized by a key of the hierarchy names the drive it is for: recorded on one
/// drive, it is refused by another drive that shares the master key.
#[test]
fn a_key_authorized_request_cannot_be_replayed_onto_another_drive() {
    let a = TestDrive::start();
    let master = a.key(&["master"], &[]);
    let dir_b = tempfile::tempdir().unwrap();
    let data_b = dir_b.path().join("drive");
    ok(&[
        "drive",
        "init",
        "--data",
        data_b.to_str().unwrap(),
        "--partition",
        "1",
        "--master-key",
        &master,
    ]);
    let b = TestDrive::start_on(dir_b);
    let (ida, idb) = (a.create(), b.create());
    assert_eq!(ida, idb, "both drives number their first object alike");
    let input = a.path("in.bin");
    std::fs::write(&input, b"written for drive A").unwrap();
    let saved = a.path("write.bin");
    ok(&[
        "obj",
        "write",
        "--drive",
        &a.addr,
        "--key",
        &master,
        "--partition",
        "1",
        "--object",
        &ida,
        "--offset",
        "0",
        "--in",
        input.to_str().unwrap(),
        "--save-request",
        saved.to_str().unwrap(),
    ]);
    let (_, err) = fails(&["obj", "replay", saved.to_str().unwrap(), "--drive", &b.addr]);
    assert!(err.contains("digest does not verify"), "{err}");
    let master_b = b.key(&["master"], &[]);
    let o = nasd(&[
        "obj",
        "read",
        "--drive",
        &b.addr,
        "--key",
        &master_b,
        "--partition",
        "1",
        "--object",
        &idb,
        "--offset",
        "0",
        "--len",
        "100",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stdout.is_empty(),
        "drive B's object was written: {:?}",
        o.stdout
    );
}

/// A capability for bytes 0..100 of a `tree` object gets bytes 0..100 and nothing else on the
/// wire, and the client verifies them; so does one for any range that cuts chunks. The reply is
/// taken raw off the connection, so what the drive sent is what is checked.
#[tokio::test]
async fn a_byte_range_capability_receives_only_its_bytes() {
    use nasd_client::wire::{open_reply, ReplyFrame};
    use nasd_client::{Auth, Capability, DriveConn, Target};
    use nasd_proto::{
        ObjectId, Op, OpCode, PartitionId, Protection, ReadReply, Region, ReplyBody, ReplyHeader,
    };
    let d = TestDrive::start();
    let id = d.create();
    let full = d.mint("full.json", &id, &[]);
    let content: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8 + 1).collect();
    let input = d.path("in.bin");
    std::fs::write(&input, &content).unwrap();
    ok(&[
        "obj",
        "write",
        "--drive",
        &d.addr,
        "--cap",
        &full,
        "--offset",
        "0",
        "--in",
        input.to_str().unwrap(),
    ]);
    let conn = DriveConn::connect(&d.addr).await.unwrap();
    let t = Target {
        partition: PartitionId(1),
        object: ObjectId(id.parse().unwrap()),
        protection: Protection::INTEGRITY_DATA,
    };
    for (off, len) in [
        (0u64, 100u64),
        (100, 50),
        (1000, 100),
        (1500, 3000),
        (4990, 10),
        (2048, 1024),
    ] {
        let cap = d.mint(
            &format!("cap-{off}.json"),
            &id,
            &[
                "--offset",
                &off.to_string(),
                "--len",
                &len.to_string(),
                "--rights",
                "read",
            ],
        );
        let auth = Auth::Capability(Capability::load(std::path::Path::new(&cap)).unwrap());
        let op = Op::Read {
            regions: vec![Region::new(off, len)],
        };
        let req = conn.prepare(conn.nonce(), &auth, t, &op, &[]).unwrap();
        let body = conn
            .exchange(req.pending.request_id, req.frame, "read")
            .await
            .unwrap();
        let (h, data_at) = ReplyHeader::decode(&body).unwrap();
        let ReplyBody::Read(ReadReply { regions, .. }) =
            ReplyBody::decode(OpCode::Read, &h.args).unwrap()
        else {
            panic!("not a read reply")
        };
        let sent = &body[data_at..];
        assert_eq!(
            regions,
            vec![Region::new(off, len)],
            "the drive widened past the capability"
        );
        assert_eq!(sent, &content[off as usize..(off + len) as usize]);
        let r = open_reply(&req.pending, ReplyFrame::from_body(body)).expect("verifies");
        assert_eq!(r.data, &content[off as usize..(off + len) as usize]);
    }
}
