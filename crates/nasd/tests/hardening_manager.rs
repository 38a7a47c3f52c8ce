//! Regression tests for the file manager's part of issue 12 (hardening), against real
//! processes: logins that leak whether a user exists and can be guessed at full speed, sessions
//! that outlive a password change and cannot be ended, unauthenticated connections that lock
//! every user out, manager files readable by other local users, an unenforced sticky bit, and
//! names with control characters.

mod common;
use common::*;

use nasd_client::session::{tls_stream, Session};
use nasd_proto::io::{read_frame, write_frame};
use nasd_proto::manager::calls;
use nasd_proto::manager::{
    Credential, LoginProof, MgrReply, MgrRequest, MgrStatus, Refused, MANAGER_FRAME_BYTES_MAX,
    OPAQUE_KE3_BYTES,
};
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the manager lets a connection go from accept to login (its
/// `server::LOGIN_DEADLINE_MS`), and the slack a loaded test machine gets on top.
const LOGIN_DEADLINE: Duration = Duration::from_millis(nasd_manager::server::LOGIN_DEADLINE_MS);
const SLACK: Duration = Duration::from_secs(20);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn add_user(up: &Up, name: &str, password: &str) {
    let o = up.nasd(
        &["user", "add", name, "--password"],
        &[("NASD_NEW_PASSWORD", password)],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Sends `req` on a raw TLS connection and returns the reply body as it came.
async fn raw_call(
    s: &mut nasd_client::session::ManagerStream,
    id: u64,
    req: &MgrRequest,
) -> Vec<u8> {
    write_frame(s, &req.encode(id)).await.unwrap();
    read_frame(s, MANAGER_FRAME_BYTES_MAX)
        .await
        .unwrap()
        .expect("a reply")
}

/// The body with its request id (bytes 7..15, see `nasd_proto::manager`) blanked.
fn without_id(mut body: Vec<u8>) -> Vec<u8> {
    body[7..15].fill(0);
    body
}

/// A key login as `user` with a signature that does not verify: the challenge, then the login.
async fn signature_login(
    s: &mut nasd_client::session::ManagerStream,
    id: u64,
    user: &str,
) -> Vec<u8> {
    let ask = MgrRequest::Challenge(calls::Challenge { user: user.into() });
    let (_, c) = MgrReply::decode(&raw_call(s, id, &ask).await).unwrap();
    assert!(matches!(c, MgrReply::Challenge(_)), "{c:?}");
    let login = MgrRequest::Login(calls::Login {
        user: user.into(),
        proof: LoginProof::Signature([7; 64]),
    });
    raw_call(s, id + 1, &login).await
}

/// An OPAQUE login as `user` with a password the client cannot open the answer with: KE1,
/// then a KE3 the manager must refuse. Returns the KE2 reply and the KE3 reply.
async fn opaque_login(
    s: &mut nasd_client::session::ManagerStream,
    id: u64,
    user: &str,
) -> (Vec<u8>, Vec<u8>) {
    let start = nasd_client::opaque::client_login_start(b"not-the-password").unwrap();
    let ask = MgrRequest::OpaqueLoginStart(calls::OpaqueLoginStart {
        user: user.into(),
        request: start.message,
    });
    let ke2 = raw_call(s, id, &ask).await;
    let (_, r) = MgrReply::decode(&ke2).unwrap();
    assert!(matches!(r, MgrReply::OpaqueMessage(_)), "{r:?}");
    let finish = MgrRequest::OpaqueLoginFinish(calls::OpaqueLoginFinish {
        finalization: [9; OPAQUE_KE3_BYTES],
    });
    (ke2, raw_call(s, id + 1, &finish).await)
}

#[test]
fn an_unknown_user_and_a_wrong_credential_get_byte_identical_replies() {
    let up = Up::start(1);
    add_user(&up, "alice", "alice-pw");
    let key = up.dir.path().join("carol.key");
    up.ok(&["user", "keygen", "--out", key.to_str().unwrap()]);
    up.ok(&[
        "user",
        "add",
        "carol",
        "--public-key",
        &format!("{}.pub", key.display()),
    ]);
    let cfg = up.session("alice", "alice-pw");
    rt().block_on(async {
        let mut s = tls_stream(cfg.manager.first(), &cfg.ca_der, Some(ip("127.0.0.4")))
            .await
            .unwrap();
        // OPAQUE: a password user, an unknown user and a key user get a KE2 of one size (a
        // fake record answers for the last two) and one refusal of the KE3.
        let (ke2_a, wrong) = opaque_login(&mut s, 1, "alice").await;
        let (ke2_m, unknown) = opaque_login(&mut s, 3, "mallory").await;
        let (ke2_c, key_user) = opaque_login(&mut s, 5, "carol").await;
        assert_eq!(ke2_a.len(), ke2_m.len());
        assert_eq!(ke2_a.len(), ke2_c.len());
        let (_, r) = MgrReply::decode(&wrong).unwrap();
        assert!(
            matches!(r, MgrReply::Error(Refused { status, .. }) if status == MgrStatus::WrongPassword),
            "{r:?}"
        );
        assert_eq!(without_id(wrong.clone()), without_id(unknown));
        assert_eq!(without_id(wrong.clone()), without_id(key_user));
        // A legacy password check of anyone who has no legacy hash: the same refusal.
        let mut s = tls_stream(cfg.manager.first(), &cfg.ca_der, Some(ip("127.0.0.6")))
            .await
            .unwrap();
        let legacy = |user: &str| {
            MgrRequest::Login(calls::Login {
                user: user.into(),
                proof: LoginProof::LegacyPassword("not-the-password".into()),
            })
        };
        for (i, u) in ["alice", "mallory", "carol"].into_iter().enumerate() {
            let r = raw_call(&mut s, 40 + i as u64, &legacy(u)).await;
            assert_eq!(without_id(r), without_id(wrong.clone()), "{u}");
        }

        // Signatures: a key user with a wrong signature, a password user, an unknown user.
        // (From another address: six failures from one would start its backoff.)
        let mut s = tls_stream(cfg.manager.first(), &cfg.ca_der, Some(ip("127.0.0.5")))
            .await
            .unwrap();
        let carol = signature_login(&mut s, 10, "carol").await;
        let alice = signature_login(&mut s, 20, "alice").await;
        let nobody = signature_login(&mut s, 30, "nobody").await;
        assert_eq!(without_id(carol.clone()), without_id(alice));
        assert_eq!(without_id(carol), without_id(nobody));
    });
}

#[test]
fn failed_logins_back_off_per_source_while_the_user_still_logs_in_from_elsewhere() {
    let up = Up::start(1);
    add_user(&up, "alice", "alice-pw");
    let guess = up.session("alice", "guess");
    let right = up.session("alice", "alice-pw");
    rt().block_on(async {
        let attacker = Some(ip("127.0.0.2"));
        let mut refused_at = None;
        for n in 0..12 {
            let e = Session::connect_from(&guess, attacker)
                .await
                .err()
                .expect("a guess never logs in");
            if e.to_string().contains("too many failed logins") {
                refused_at = Some(n);
                break;
            }
            assert_eq!(e.status(), Some(MgrStatus::WrongPassword), "{e}");
        }
        let n = refused_at.expect("guessing from one source must be slowed down");
        let free = nasd_manager::backoff::LOGIN_FAILURES_FREE;
        assert!(n >= free, "the first {free} failures are free");
        // While it backs off, that source is refused even with the right password ...
        let e = Session::connect_from(&right, attacker).await.err().unwrap();
        assert!(e.to_string().contains("too many failed logins"), "{e}");
        // But the real user, from an address that did not fail, logs in at once.
        let s = Session::connect_from(&right, Some(ip("127.0.0.1"))).await;
        assert!(s.is_ok(), "{:?}", s.err());
    });
    // And through the command line (which connects from 127.0.0.1).
    let o = up.nasd(
        &["ls", "nasd:/"],
        &[("NASD_USER", "alice"), ("NASD_PASSWORD", "alice-pw")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn logout_ends_the_session_on_the_manager_and_deletes_the_token_file() {
    let up = Up::start(1);
    add_user(&up, "alice", "alice-pw");
    // Logged in under a permissive umask.
    let o = Command::new("sh")
        .args([
            "-c",
            "umask 000; exec \"$0\" \"$@\"",
            NASD,
            "login",
            "--user",
            "alice",
        ])
        .env("NASD_CONFIG", up.config())
        .env("NASD_PASSWORD", "alice-pw")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let token_file = up.data().join("session-alice.token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the saved token is private");
    let token: [u8; 32] = hex::decode(std::fs::read_to_string(&token_file).unwrap().trim())
        .unwrap()
        .try_into()
        .unwrap();
    let alice = [("NASD_USER", "alice")];
    let o = up.nasd(&["ls", "nasd:/"], &alice);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = up.nasd(&["logout"], &alice);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!token_file.exists(), "logout deletes the saved token");
    // The token itself is dead on the manager, not only forgotten by this client.
    let mut cfg = up.session("alice", "");
    cfg.credential = Credential::Token(token);
    let e = rt().block_on(Session::connect(&cfg)).err().unwrap();
    assert_eq!(e.status(), Some(MgrStatus::SessionExpired), "{e}");
    // A second logout finds nothing to end.
    assert!(up.fails(&["logout"], &alice).contains("no saved session"));
}

#[test]
fn a_password_change_ends_stored_sessions_and_live_connections() {
    let up = Up::start(1);
    add_user(&up, "alice", "alice-pw");
    let o = up.nasd(
        &["login", "--user", "alice"],
        &[("NASD_PASSWORD", "alice-pw")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let alice = [("NASD_USER", "alice")];
    let reset = rt().block_on(async {
        // A connection that logged in before the change.
        let mut live = Session::connect(&up.session("alice", "alice-pw"))
            .await
            .unwrap();
        let stat = MgrRequest::Stat(calls::Stat { path: "/".into() });
        live.request(&stat).await.unwrap();
        // The admin resets the password to a new enrollment code (a blocking CLI call, off
        // this runtime's workers).
        // (`nasd login --user alice` made alice the config's user: the admin says who they are.)
        let admin_pw = up.admin_password();
        let admin = [("NASD_USER", "admin"), ("NASD_PASSWORD", admin_pw.trim())];
        let o = tokio::task::block_in_place(|| up.nasd(&["user", "passwd", "alice"], &admin));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let e = live.request(&stat).await.unwrap_err();
        assert_eq!(e.status(), Some(MgrStatus::SessionExpired), "{e}");
        String::from_utf8(o.stdout).unwrap()
    });
    let code = reset
        .lines()
        .find_map(|l| l.strip_prefix("enrollment code"))
        .expect("the reset prints a code")
        .trim()
        .to_string();
    // The token `nasd login` saved is dead too; the new password works.
    assert!(up
        .fails(&["ls", "nasd:/"], &alice)
        .contains("session expired"));
    let o = up.nasd(
        &["user", "enroll", "alice", "--code", &code],
        &[("NASD_NEW_PASSWORD", "new-pw")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = up.nasd(
        &["ls", "nasd:/"],
        &[("NASD_USER", "alice"), ("NASD_PASSWORD", "new-pw")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Whether the peer closed `s` (EOF or reset) before `deadline`.
async fn closed_by(s: &mut (impl tokio::io::AsyncRead + Unpin), deadline: Instant) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 64];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[test]
fn connections_that_never_log_in_cannot_lock_honest_users_out() {
    let up = Up::start(1);
    let admin = up.session("admin", up.admin_password().trim());
    let max = nasd_manager::server::CONNECTIONS_MAX;
    rt().block_on(async {
        // An honest session that logged in before the attack.
        let mut early = Session::connect(&admin).await.unwrap();
        let stat = MgrRequest::Stat(calls::Stat { path: "/".into() });
        let addr: std::net::SocketAddr = admin.manager.first().parse().unwrap();
        // More raw TCP connections than the manager has slots, from twelve attacking
        // addresses, then TLS connections that finish the handshake and never log in.
        let sources: Vec<IpAddr> = (2..14).map(|i| ip(&format!("127.0.0.{i}"))).collect();
        let mut raw = vec![];
        for k in 0..max + 64 {
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind(std::net::SocketAddr::new(sources[k % sources.len()], 0))
                .unwrap();
            raw.push(sock.connect(addr).await.unwrap());
        }
        let mut tls = vec![];
        for k in 0..32 {
            let src = ip(&format!("127.0.0.{}", 20 + k % 2));
            match tls_stream(admin.manager.first(), &admin.ca_der, Some(src)).await {
                Ok(s) => tls.push(s),
                Err(e) => panic!("a handshake within the limits is served: {e}"),
            }
        }
        // The honest user is served while all of that is open: a fresh login through the
        // command line and the session that logged in before.
        let o = tokio::task::block_in_place(|| up.nasd(&["ls", "nasd:/"], &[]));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        early.request(&stat).await.unwrap();
        // Every connection that never logged in is closed by the login deadline.
        let deadline = Instant::now() + LOGIN_DEADLINE + SLACK;
        for (k, s) in raw.iter_mut().enumerate() {
            assert!(
                closed_by(s, deadline).await,
                "raw connection {k} still open"
            );
        }
        for (k, s) in tls.iter_mut().enumerate() {
            assert!(
                closed_by(s, deadline).await,
                "TLS connection {k} still open"
            );
        }
        // The logged-in session outlives the deadline.
        early.request(&stat).await.unwrap();
    });
}

/// Every directory and file under `dir` with its mode, and whether it is private.
fn modes(dir: &Path) -> Vec<(String, u32)> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let m = std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
        out.push((d.display().to_string(), m));
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let m = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
                out.push((p.display().to_string(), m));
            }
        }
    }
    out
}

/// `nasd ARGS` under `umask 000`.
fn nasd_umask_000(args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("umask 000; exec \"$0\" \"$@\"")
        .arg(NASD)
        .args(args)
        .env("NASD_NEW_PASSWORD", "admin-pw");
    c
}

/// Runs `nasd manager run` on DIR (under `umask 000`), logs in as the admin so that the
/// store writes, calls `f` while it runs, then stops it.
fn with_manager_running(dir: &Path, f: impl FnOnce()) {
    let mut child = nasd_umask_000(&[
        "manager",
        "run",
        "--data",
        dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 256];
    use std::io::Read;
    while !seen.contains('\n') {
        let n = out.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let Some(addr) = seen
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("nasd manager listening on "))
    else {
        let _ = child.kill();
        let o = child.wait_with_output().unwrap();
        panic!(
            "the manager did not start: {seen} {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let cfg = nasd_client::session::SessionConfig {
        manager: addr.trim().into(),
        ca_der: std::fs::read(dir.join("tls/ca.der")).unwrap(),
        user: "admin".into(),
        credential: Credential::Password("admin-pw".into()),
        signing_key: None,
    };
    rt().block_on(Session::connect(&cfg)).unwrap();
    f();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
}

#[test]
fn the_manager_keeps_its_files_private_whatever_the_umask_and_refuses_loose_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let o = nasd_umask_000(&[
        "manager",
        "init",
        "--data",
        dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ])
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    with_manager_running(&dir, || {
        let all = modes(&dir);
        for name in [
            "meta.sqlite",
            "meta.sqlite-wal",
            "tls/ca.key",
            "tls/server.key",
        ] {
            assert!(
                all.iter().any(|(p, _)| p.ends_with(name)),
                "{name} missing: {all:?}"
            );
        }
        for (p, m) in &all {
            assert_eq!(m & 0o077, 0, "{p} is mode {m:o} under umask 000");
        }
    });

    // A loosened file or directory stops the manager at start-up, naming it and its mode.
    for (what, mode) in [
        ("meta.sqlite", 0o644),
        ("tls/server.key", 0o640),
        ("", 0o755),
    ] {
        let p = dir.join(what);
        let before = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        let o = Command::new(NASD)
            .args(["manager", "run", "--data", dir.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success(),
            "started with {} at {mode:o}",
            p.display()
        );
        let shown = p.display().to_string();
        assert!(
            err.contains(shown.trim_end_matches('/')),
            "names the path: {err}"
        );
        assert!(err.contains(&format!("{mode:o}")), "names the mode: {err}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(before)).unwrap();
    }
    with_manager_running(&dir, || {});
}

#[test]
fn the_sticky_bit_keeps_other_users_from_removing_or_renaming_entries() {
    let up = Up::start(1);
    add_user(&up, "alice", "alice-pw");
    add_user(&up, "bob", "bob-pw");
    let alice = [("NASD_USER", "alice"), ("NASD_PASSWORD", "alice-pw")];
    let bob = [("NASD_USER", "bob"), ("NASD_PASSWORD", "bob-pw")];
    let run = |args: &[&str], who: &[(&str, &str)]| {
        let o = up.nasd(args, who);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run(&["mkdir", "--mode", "1777", "nasd:/tmp"], &[]);
    run(&["mkdir", "--mode", "777", "nasd:/open"], &[]);
    let f = up.dir.path().join("f");
    std::fs::write(&f, b"alice's").unwrap();
    let f = f.to_str().unwrap();
    for d in ["tmp", "open"] {
        run(&["cp", f, &format!("nasd:/{d}/a")], &alice);
        run(&["cp", f, &format!("nasd:/{d}/b")], &bob);
        run(&["mkdir", &format!("nasd:/{d}/ad")], &alice);
    }
    // In the sticky directory bob may not remove, rename or replace alice's entries ...
    let denied = |args: &[&str]| {
        let e = up.fails(args, &bob);
        assert!(e.contains("permission denied"), "{args:?}: {e}");
        assert!(e.contains("sticky"), "{args:?}: {e}");
    };
    denied(&["rm", "nasd:/tmp/a"]);
    denied(&["rm", "-r", "nasd:/tmp/ad"]);
    denied(&["mv", "nasd:/tmp/a", "nasd:/tmp/mine"]);
    denied(&["mv", "nasd:/tmp/b", "nasd:/tmp/a"]);
    assert_eq!(up.nasd(&["cat", "nasd:/tmp/a"], &alice).stdout, b"alice's");
    // ... but his own, yes; and alice and the directory's owner (the admin) may.
    run(&["mv", "nasd:/tmp/b", "nasd:/tmp/b2"], &bob);
    run(&["rm", "nasd:/tmp/b2"], &bob);
    run(&["mv", "nasd:/tmp/a", "nasd:/tmp/a2"], &alice);
    run(&["rm", "nasd:/tmp/a2"], &[]);
    run(&["rm", "-r", "nasd:/tmp/ad"], &alice);
    // Without the sticky bit, write permission on the directory is enough (POSIX).
    run(&["mv", "nasd:/open/a", "nasd:/open/taken"], &bob);
    run(&["rm", "nasd:/open/taken"], &bob);
    run(&["rm", "-r", "nasd:/open/ad"], &bob);
}

#[test]
fn control_characters_in_names_and_unsafe_user_names_are_refused() {
    let up = Up::start(1);
    let f = up.dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let f = f.to_str().unwrap();
    up.ok(&["cp", f, "nasd:/ok"]);
    for bad in [
        "a\nb",
        "a\rb",
        "x\u{1b}[31m",
        "del\u{7f}",
        "c1\u{9b}2J",
        "tab\t",
    ] {
        let p = format!("nasd:/{bad}");
        for args in [
            vec!["mkdir", p.as_str()],
            vec!["cp", f, p.as_str()],
            vec!["mv", "nasd:/ok", p.as_str()],
        ] {
            let e = up.fails(&args, &[]);
            assert!(e.contains("control character"), "{args:?}: {e}");
        }
    }
    assert_eq!(up.ok(&["ls", "nasd:/"]).trim(), "ok");
    for bad in [
        "Alice",
        "bad name",
        "a\nb",
        "\u{430}dmin",
        "1abc",
        "a/b",
        "x".repeat(33).as_str(),
    ] {
        let o = up.nasd(&["user", "add", bad], &[("NASD_NEW_PASSWORD", "pw-pw")]);
        assert!(!o.status.success(), "user {bad:?} was added");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("invalid name"), "{bad:?}: {e}");
        let o = up.nasd(&["group", "add", bad], &[]);
        assert!(!o.status.success(), "group {bad:?} was added");
    }
    for good in [
        "alice",
        "_svc",
        "bob.smith",
        "web-1",
        "x".repeat(32).as_str(),
    ] {
        add_user(&up, good, "pw-pw");
    }
    for good in ["staff", "g_1", "dev.ops"] {
        up.ok(&["group", "add", good]);
    }
}
