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

/// Resident memory of a process, bytes.
fn rss_bytes(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// A connection from loopback address `127.0.0.{source}` that says hello and reads the welcome.
async fn hello_from(addr: &str, source: u8) -> std::io::Result<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(format!("127.0.0.{source}:0").parse().unwrap())?;
    let mut s = sock.connect(addr.parse().unwrap()).await?;
    let hello = nasd_proto::Hello {
        version: nasd_proto::PROTOCOL_VERSION,
    };
    s.write_all(&nasd_proto::frame(&hello.encode())).await?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let mut w = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut w).await?;
    Ok(s)
}

/// Reads the whole object through a fresh connection, as an honest client would.
async fn honest_read(d: &TestDrive, cap: &str, len: u64) -> Vec<u8> {
    use nasd_client::{Auth, Capability, DriveConn, Target};
    let auth = Auth::Capability(Capability::load(std::path::Path::new(cap)).unwrap());
    let t = Target {
        partition: nasd_proto::PartitionId(1),
        object: nasd_proto::ObjectId(auth_object(&auth)),
        protection: nasd_proto::Protection::INTEGRITY_DATA,
    };
    let conn = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        DriveConn::connect(&d.addr),
    )
    .await
    .expect("an honest client is let in at once")
    .unwrap();
    conn.read(&auth, t, vec![nasd_proto::Region::new(0, len)])
        .await
        .unwrap()
        .data
}

fn auth_object(a: &nasd_client::Auth) -> u64 {
    match a {
        nasd_client::Auth::Capability(c) => c.args.object.0,
        _ => unreachable!(),
    }
}

/// Peers that connect and say hello but never send a request that passes the checks cannot
/// lock honest clients out: more of them than the drive has places, from several source
/// addresses, and an honest client is still served at once; and they are closed once the time
/// to prove themselves has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_only_peers_cannot_lock_clients_out() {
    use tokio::io::AsyncReadExt;
    let d = TestDrive::start();
    let id = d.create();
    let cap = d.mint("cap.json", &id, &[]);
    let mut idle = vec![];
    for i in 0..1100usize {
        // 127.0.0.2 .. 127.0.0.10: more than one source's share, more than all places.
        let source = 2 + (i % 9) as u8;
        if let Ok(s) = hello_from(&d.addr, source).await {
            idle.push(s);
        }
    }
    assert!(idle.len() >= 1024, "only {} connections opened", idle.len());
    assert_eq!(honest_read(&d, &cap, 10).await, b"");
    // Past the deadline to prove themselves, the drive closes them: reads see end of stream.
    tokio::time::sleep(std::time::Duration::from_millis(
        nasd_drive::server::PROVE_DEADLINE_MS + 2_500,
    ))
    .await;
    let mut closed = 0;
    for s in idle.iter_mut() {
        let mut b = [0u8; 1];
        match tokio::time::timeout(std::time::Duration::from_millis(50), s.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => closed += 1,
            _ => {}
        }
    }
    assert_eq!(closed, idle.len(), "unproved connections left open");
}

/// Half-sent frames from unproved peers hold memory only as their bytes arrive, and all of
/// them together at most the drive's bound: 60 peers each sending half of a 16 MiB write cost
/// the drive well under the 480 MiB they sent, and an honest client is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_frames_are_bounded() {
    use tokio::io::AsyncWriteExt;
    let d = TestDrive::start();
    let id = d.create();
    let cap = d.mint("cap.json", &id, &[]);
    let before = rss_bytes(d.child.id());
    let half = vec![0x5au8; 8 << 20];
    let mut peers = vec![];
    for i in 0..60u8 {
        let mut s = hello_from(&d.addr, 2 + i % 8).await.unwrap();
        let _ = s.write_all(&(16u32 << 20).to_le_bytes()).await;
        let _ = s.write_all(&half).await;
        peers.push(s);
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let grew = rss_bytes(d.child.id()).saturating_sub(before);
    let bound = nasd_drive::conns::UNPROVED_BUFFER_BYTES_MAX as u64 + (64 << 20);
    assert!(grew < bound, "the drive grew {} MiB", grew >> 20);
    assert_eq!(honest_read(&d, &cap, 10).await, b"");
}

/// A capability holder that pipelines large reads and never reads the replies is no longer
/// read from once its connection holds its buffer bound: the drive's memory stays bounded (it
/// pinned about 1 GiB per connection), and other clients are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_reads_nobody_reads_hold_a_bounded_buffer() {
    use nasd_client::{Auth, Capability, DriveConn, Target};
    use nasd_proto::{ObjectId, Op, PartitionId, Protection, Region};
    use tokio::io::AsyncWriteExt;
    let d = TestDrive::start();
    let id = d.create();
    let cap = d.mint("cap.json", &id, &[]);
    let content = vec![7u8; 16 << 20];
    let input = d.path("big.bin");
    std::fs::write(&input, &content).unwrap();
    ok(&[
        "obj",
        "write",
        "--drive",
        &d.addr,
        "--cap",
        &cap,
        "--offset",
        "0",
        "--in",
        input.to_str().unwrap(),
    ]);
    let auth = Auth::Capability(Capability::load(std::path::Path::new(&cap)).unwrap());
    let t = Target {
        partition: PartitionId(1),
        object: ObjectId(id.parse().unwrap()),
        protection: Protection::INTEGRITY_DATA,
    };
    // Requests built by a real connection, sent down a raw one that never reads.
    let builder = DriveConn::connect(&d.addr).await.unwrap();
    let before = rss_bytes(d.child.id());
    let mut raw = hello_from(&d.addr, 1).await.unwrap();
    for _ in 0..64 {
        let op = Op::Read {
            regions: vec![Region::new(0, 16 << 20)],
        };
        let req = builder
            .prepare(builder.nonce(), &auth, t, &op, &[])
            .unwrap();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), raw.write_all(&req.frame))
            .await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let grew = rss_bytes(d.child.id()).saturating_sub(before);
    let bound = nasd_drive::server::CONNECTION_BUFFER_BYTES_MAX as u64 + (64 << 20);
    assert!(grew < bound, "the drive grew {} MiB", grew >> 20);
    let got = honest_read(&d, &cap, 1 << 20).await;
    assert_eq!(got.len(), 1 << 20);
    drop(raw);
}

/// Runs `nasd args` under umask 000, as a careless shell would have it.
fn nasd_umask_000(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg("umask 000 && exec \"$0\" \"$@\"")
        .arg(NASD)
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Every path under `dir` with a mode that lets the group or others in.
fn loose_paths(dir: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::metadata(&p).unwrap();
        if m.permissions().mode() & 0o077 != 0 {
            out.push(format!(
                "{} {:o}",
                p.display(),
                m.permissions().mode() & 0o777
            ));
        }
        if m.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    out
}

/// A drive's keys, data and audit trail are private to its owner whatever the umask; another
/// local user cannot read them; a loosened file stops the drive from starting, naming it.
#[test]
fn drive_files_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    // The drive lives where other users may look (a home directory is often 0755).
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = tmp.path().join("drive");
    let d = data.to_str().unwrap();
    let o = nasd_umask_000(&["drive", "init", "--data", d, "--partition", "1"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut run = std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 000 && exec \"$0\" \"$@\"")
        .arg(NASD)
        .args(["drive", "run", "--data", d, "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(run.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("listening"), "{line}");
    assert!(data.join("audit.log").exists() && data.join("nonce.floor").exists());
    assert_eq!(loose_paths(&data), Vec::<String>::new());
    // Another local user (when these tests run as root, `nobody`) can read none of it.
    if unsafe { libc::geteuid() } == 0 {
        for f in ["meta.redb", "data.blk", "audit.log", "keys/master.key"] {
            let o = std::process::Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
                .arg(data.join(f))
                .output()
                .unwrap();
            assert!(!o.status.success(), "user nobody read {f}");
        }
    }
    run.kill().unwrap();
    run.wait().unwrap();
    std::fs::set_permissions(
        data.join("meta.redb"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let (_, err) = fails(&["drive", "run", "--data", d, "--listen", "127.0.0.1:0"]);
    assert!(err.contains("meta.redb is mode 0644"), "{err}");
}

/// A drive made with sealed keys keeps none of them in clear on its disk, needs its passphrase
/// to start, refuses a wrong one, and serves once given the right one; a missing data file is
/// named as such instead of being recreated empty.
#[test]
fn sealed_keys_need_the_passphrase_and_a_missing_data_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("drive");
    let d = data.to_str().unwrap();
    let pass = [("NASD_DRIVE_PASSPHRASE", "tr0ub4dor&3")];
    let o = nasd_umask_000(
        &[
            "drive",
            "init",
            "--data",
            d,
            "--partition",
            "1",
            "--seal-keys",
        ],
        &pass,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let master = std::fs::read_to_string(data.join("keys/master.key")).unwrap();
    let hex = master
        .lines()
        .find_map(|l| l.strip_prefix("key = "))
        .unwrap()
        .trim()
        .to_string();
    let raw: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let meta = std::fs::read(data.join("meta.redb")).unwrap();
    assert!(
        !meta.windows(32).any(|w| w == raw),
        "the master key lies in clear"
    );
    let run = |env: &[(&str, &str)]| {
        let mut c = std::process::Command::new(NASD);
        c.args(["drive", "run", "--data", d, "--listen", "127.0.0.1:0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        c.spawn().unwrap()
    };
    let out = run(&[]).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no password given"),
        "{err}"
    );
    let out = run(&[("NASD_DRIVE_PASSPHRASE", "wrong")])
        .wait_with_output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("wrong passphrase"), "{err}");
    let mut good = run(&pass);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(good.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("listening"), "{line}");
    good.kill().unwrap();
    good.wait().unwrap();
    std::fs::remove_file(data.join("data.blk")).unwrap();
    let out = run(&pass).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("data.blk is missing"), "{err}");
    assert!(
        !data.join("data.blk").exists(),
        "an empty data file was made"
    );
}
