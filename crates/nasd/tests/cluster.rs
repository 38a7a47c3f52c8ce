//! Black-box tests of a whole cluster: `nasd up` runs as a real process (manager and drives
//! each their own process), and the tests drive it through the CLI and the client library.

mod common;
use common::*;

use nasd_client::files::Client;
use nasd_cluster::Options;
use nasd_proto::manager::calls;
use nasd_proto::manager::MgrStatus;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn random_tree_round_trips_with_checksums_and_listings() {
    let up = Up::start(2);
    let seed = nasd_crypto::random_u64();
    eprintln!("seed {seed}");
    let src = up.dir.path().join("src");
    for i in 0..25u64 {
        let p = src.join(format!("d{}/e{}/f{i}", i % 3, i % 2));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let n = (seed.wrapping_add(i * 7919) % 300_000) as usize;
        std::fs::write(&p, rand_bytes(n, seed ^ i)).unwrap();
    }
    up.ok(&["cp", "-r", src.to_str().unwrap(), "nasd:/tree"]);
    let back = up.dir.path().join("back");
    up.ok(&["cp", "-r", "nasd:/tree", back.to_str().unwrap()]);
    assert_eq!(tree_sums(&src), tree_sums(&back));
    let ls = up.ok(&["ls", "--json", "nasd:/tree/d0/e0"]);
    let entries: Vec<serde_json::Value> = ls
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!entries.is_empty());
    for e in &entries {
        let local = std::fs::metadata(src.join("d0/e0").join(e["name"].as_str().unwrap())).unwrap();
        assert_eq!(e["size"].as_u64().unwrap(), local.len());
        assert_eq!(e["owner"], "admin");
    }
    let st: serde_json::Value =
        serde_json::from_str(up.ok(&["stat", "--json", "nasd:/tree"]).trim()).unwrap();
    assert_eq!(st["kind"], "dir");
    // cat, mv, rm.
    let one = &entries[0]["name"].as_str().unwrap().to_string();
    let p = format!("nasd:/tree/d0/e0/{one}");
    let cat = up.nasd(&["cat", &p], &[]);
    assert_eq!(
        cat.stdout,
        std::fs::read(src.join("d0/e0").join(one)).unwrap()
    );
    up.ok(&["mv", &p, "nasd:/moved"]);
    assert!(up.fails(&["cat", &p], &[]).contains("no such file"));
    up.ok(&["rm", "nasd:/moved"]);
    up.ok(&["rm", "-r", "nasd:/tree"]);
    assert_eq!(up.ok(&["ls", "nasd:/"]).trim(), "");
}

#[test]
fn bad_inputs_get_clear_errors_and_change_nothing() {
    let up = Up::start(1);
    up.ok(&["mkdir", "nasd:/d"]);
    let f = up.dir.path().join("f.txt");
    std::fs::write(&f, b"hello").unwrap();
    up.ok(&["cp", f.to_str().unwrap(), "nasd:/d/f"]);
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (vec!["ls", "nasd:/nope"], vec![], "no such file"),
        (vec!["mkdir", "nasd:/d"], vec![], "file exists"),
        (vec!["rm", "nasd:/d"], vec![], "directory not empty"),
        (vec!["cat", "nasd:/d/../d/f"], vec![], "path traversal"),
        (
            vec!["cp", "/definitely/not/here", "nasd:/x"],
            vec![],
            "/definitely/not/here",
        ),
        (
            vec!["ls", "nasd:/"],
            vec![("NASD_PASSWORD", "wrong-password")],
            "wrong password",
        ),
        (
            vec!["ls", "nasd:/"],
            vec![("NASD_USER", "nobody"), ("NASD_PASSWORD", "x")],
            "unknown user",
        ),
        (vec!["chmod", "999", "nasd:/d/f"], vec![], "octal"),
        (vec!["cat", "nasd:/d"], vec![], "is a directory"),
    ];
    for (args, env, want) in &cases {
        let err = up.fails(args, env);
        assert!(
            err.contains(want),
            "nasd {args:?}: expected {want:?} in {err:?}"
        );
    }
    let long = format!("nasd:/{}", "n".repeat(300));
    assert!(up.fails(&["mkdir", &long], &[]).contains("name too long"));
    // A non-UTF-8 local name is refused with a clear message, not mangled.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let d = up.dir.path().join("bad");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(std::ffi::OsStr::from_bytes(b"x\xff")), b"1").unwrap();
        let err = up.fails(&["cp", "-r", d.to_str().unwrap(), "nasd:/bad"], &[]);
        assert!(err.contains("UTF-8"), "{err}");
    }
    // Nothing changed: the file is intact.
    assert_eq!(up.nasd(&["cat", "nasd:/d/f"], &[]).stdout, b"hello");
    // An expired or forged session token is refused with a clear error.
    std::fs::write(up.data().join("session-admin.token"), "00".repeat(32)).unwrap();
    assert!(up.fails(&["ls", "nasd:/"], &[]).contains("session expired"));
    std::fs::remove_file(up.data().join("session-admin.token")).unwrap();
    up.ok(&["ls", "nasd:/"]);
}

#[test]
fn permissions_between_two_users_and_revocation_after_chmod() {
    let up = Up::start(1);
    let o = up.nasd(
        &["user", "add", "bob", "--password"],
        &[("NASD_NEW_PASSWORD", "bob-pw")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f = up.dir.path().join("secret");
    std::fs::write(&f, b"top secret").unwrap();
    up.ok(&["cp", f.to_str().unwrap(), "nasd:/secret"]);
    up.ok(&["chmod", "600", "nasd:/secret"]);
    let bob = [("NASD_USER", "bob"), ("NASD_PASSWORD", "bob-pw")];
    assert!(up
        .fails(&["cat", "nasd:/secret"], &bob)
        .contains("permission denied"));
    // bob cannot write into the admin's root directory either.
    assert!(up
        .fails(&["cp", f.to_str().unwrap(), "nasd:/mine"], &bob)
        .contains("permission denied"));
    assert!(up
        .fails(&["chmod", "777", "nasd:/secret"], &bob)
        .contains("permission denied"));
    up.ok(&["chmod", "644", "nasd:/secret"]);
    assert_eq!(
        up.nasd(&["cat", "nasd:/secret"], &bob).stdout,
        b"top secret"
    );

    // Through the library: bob's capability dies with the chmod.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let admin = Client::connect(up.session("admin", up.admin_password().trim()))
            .await
            .unwrap();
        let bob = Client::connect(up.session("bob", "bob-pw")).await.unwrap();
        let g = bob.open("/secret", false).await.unwrap();
        let (addr, t, auth) = g.component(0).unwrap();
        let conn = nasd_client::DriveConn::connect(addr).await.unwrap();
        let r = conn
            .read(&auth, t, vec![nasd_proto::Region::new(0, 64)])
            .await
            .unwrap();
        // The drive serves ciphertext (issue 10); bob's client deciphers it.
        assert_eq!(r.data.len(), b"top secret".len());
        assert_ne!(r.data, b"top secret");
        assert_eq!(bob.get_bytes("/secret").await.unwrap(), b"top secret");
        admin.chmod("/secret", 0o600).await.unwrap();
        let e = conn
            .read(&auth, t, vec![nasd_proto::Region::new(0, 64)])
            .await
            .unwrap_err();
        assert_eq!(e.status(), Some(nasd_proto::Status::BadDigest), "{e}");
        let e = bob.read_at("/secret", 0, 64).await.unwrap_err();
        assert_eq!(e.status(), Some(MgrStatus::PermissionDenied), "{e}");
        // Bob's write attempt never gets a capability.
        let e = bob.open("/secret", true).await.unwrap_err();
        assert_eq!(e.status(), Some(MgrStatus::PermissionDenied));
    });
}

#[test]
fn manager_killed_during_a_large_copy_then_restarted_with_namespace_intact() {
    let mut up = Up::start(1);
    up.ok(&["mkdir", "nasd:/keep"]);
    let small = up.dir.path().join("small");
    std::fs::write(&small, b"still here").unwrap();
    up.ok(&["cp", small.to_str().unwrap(), "nasd:/keep/small"]);
    let big = up.dir.path().join("big");
    let data = rand_bytes(160 << 20, 5);
    std::fs::write(&big, &data).unwrap();
    let cp = Command::new(NASD)
        .args(["cp", big.to_str().unwrap(), "nasd:/big"])
        .env("NASD_CONFIG", up.config())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the manager once the copy has its staged object and capability: it reads its
    // source only after that.
    let t0 = Instant::now();
    loop {
        let io = std::fs::read_to_string(format!("/proc/{}/io", cp.id())).unwrap_or_default();
        let read: u64 = io
            .lines()
            .find_map(|l| l.strip_prefix("rchar:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if read > 8 << 20 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the copy never started sending its file"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    up.kill("manager");
    // The name appears only at the commit, which needs the manager; the bytes keep flowing to
    // the drive meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !up.nasd(&["ls", "nasd:/"], &[]).status.success(),
        "the manager should be down"
    );
    // Restart the manager on the same address; the copy's commit, retried, goes through, and
    // the namespace and the data are intact.
    up.restart("manager");
    let out = cp.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "copy failed across the manager's restart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        up.nasd(&["cat", "nasd:/keep/small"], &[]).stdout,
        b"still here"
    );
    let back = up.dir.path().join("big.back");
    up.ok(&["cp", "nasd:/big", back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the large file read back differs"
    );
}

/// Reads `path` through a fresh session, as another client would.
fn read_as_admin(up: &Up, rt: &tokio::runtime::Runtime, path: &str) -> Vec<u8> {
    rt.block_on(async {
        let c = Client::connect(up.session("admin", up.admin_password().trim()))
            .await
            .unwrap();
        c.get_bytes(path).await.unwrap()
    })
}

#[test]
fn interrupted_overwrites_leave_the_old_content_and_a_finished_one_revokes_it() {
    let up = Up::start(1);
    let old = rand_bytes(3 << 20, 11);
    let new = rand_bytes(2 << 20, 12);
    let f = up.dir.path().join("old");
    std::fs::write(&f, &old).unwrap();
    up.ok(&["cp", f.to_str().unwrap(), "nasd:/f"]);
    let rt = tokio::runtime::Runtime::new().unwrap();

    // A client that stages a replacement, writes half of it and dies before committing.
    rt.block_on(async {
        let c = Client::connect(up.session("admin", up.admin_password().trim()))
            .await
            .unwrap();
        let u = c.begin_upload("/f", 0o644).await.unwrap();
        assert!(u.replaces());
        c.upload_write(&u, 0, &new[..1 << 20]).await.unwrap();
        drop(u);
    });
    assert!(read_as_admin(&up, &rt, "/f") == old, "old content lost");
    let st: serde_json::Value =
        serde_json::from_str(up.ok(&["stat", "--json", "nasd:/f"]).trim()).unwrap();
    assert_eq!(st["size"].as_u64(), Some(old.len() as u64));

    // A `nasd cp` over the file killed mid-transfer: the name shows the old content or the
    // whole new one, never a prefix, an empty file or nothing.
    let big = rand_bytes(96 << 20, 13);
    let bigf = up.dir.path().join("big");
    std::fs::write(&bigf, &big).unwrap();
    let mut cp = Command::new(NASD)
        .args(["cp", bigf.to_str().unwrap(), "nasd:/f"])
        .env("NASD_CONFIG", up.config())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let _ = cp.kill();
    let _ = cp.wait();
    let after = read_as_admin(&up, &rt, "/f");
    assert!(
        after == old || after == big,
        "half-file visible: {} bytes",
        after.len()
    );

    // A finished overwrite shows the new bytes and revokes the old object's capabilities.
    rt.block_on(async {
        let c = Client::connect(up.session("admin", up.admin_password().trim()))
            .await
            .unwrap();
        let g = c.open("/f", false).await.unwrap();
        c.put_bytes("/f", &new, 0o644).await.unwrap();
        let (addr, t, auth) = g.component(0).unwrap();
        let conn = nasd_client::DriveConn::connect(addr).await.unwrap();
        let e = conn
            .read(&auth, t, vec![nasd_proto::Region::new(0, 64)])
            .await
            .unwrap_err();
        assert!(e.status().is_some(), "old capability still reads: {e}");
    });
    assert!(
        read_as_admin(&up, &rt, "/f") == new,
        "new content not visible"
    );
}

#[test]
fn a_stopped_drive_gets_clear_errors_naming_path_and_drive() {
    let mut up = Up::start(1);
    let f = up.dir.path().join("f");
    std::fs::write(&f, b"on the drive").unwrap();
    up.ok(&["cp", f.to_str().unwrap(), "nasd:/f"]);
    let addr = up.cluster.drives()[0].addr.clone();
    up.kill("drive-0");
    for (args, path) in [
        (vec!["cp", f.to_str().unwrap(), "nasd:/g"], "nasd:/g"),
        (vec!["cp", f.to_str().unwrap(), "nasd:/f"], "nasd:/f"),
        (vec!["cat", "nasd:/f"], "nasd:/f"),
    ] {
        let err = up.fails(&args, &[]);
        assert!(err.contains(path), "{args:?}: {err}");
        assert!(err.contains("unreachable"), "{args:?}: {err}");
        assert!(err.contains(&addr), "{args:?} should name the drive: {err}");
    }
    // The namespace is as before: no new name, the old file still listed.
    let ls = up.ok(&["ls", "nasd:/"]);
    assert_eq!(
        ls.split_whitespace().filter(|w| *w == "g").count(),
        0,
        "{ls}"
    );
    assert!(ls.contains('f'), "{ls}");
}

#[test]
fn a_full_drive_fails_the_copy_with_disk_full_and_leaves_no_partial_file() {
    let up = Up::start_with(Options {
        drive_capacity_bytes: Some(8 << 20),
        ..Options::drives(1)
    });
    let small = up.dir.path().join("small");
    std::fs::write(&small, b"fits").unwrap();
    up.ok(&["cp", small.to_str().unwrap(), "nasd:/small"]);
    let big = up.dir.path().join("big");
    std::fs::write(&big, rand_bytes(32 << 20, 21)).unwrap();
    let err = up.fails(&["cp", big.to_str().unwrap(), "nasd:/big"], &[]);
    assert!(err.contains("nasd:/big"), "{err}");
    assert!(err.contains("disk full"), "{err}");
    let ls = up.ok(&["ls", "nasd:/"]);
    assert!(!ls.contains("big"), "partial file visible: {ls}");
    // Overwriting an existing file with too much data leaves its old content.
    let err = up.fails(&["cp", big.to_str().unwrap(), "nasd:/small"], &[]);
    assert!(err.contains("disk full"), "{err}");
    assert_eq!(up.nasd(&["cat", "nasd:/small"], &[]).stdout, b"fits");
    // Once the failed uploads' space is given back, the drive takes files again.
    up.ok(&["cp", small.to_str().unwrap(), "nasd:/again"]);
}

#[test]
fn truncate_and_touch_from_the_command_line() {
    let up = Up::start(1);
    let f = up.dir.path().join("f");
    std::fs::write(&f, b"0123456789").unwrap();
    up.ok(&["cp", f.to_str().unwrap(), "nasd:/f"]);
    up.ok(&["truncate", "nasd:/f", "4"]);
    assert_eq!(up.nasd(&["cat", "nasd:/f"], &[]).stdout, b"0123");
    up.ok(&["truncate", "nasd:/f", "6"]);
    assert_eq!(up.nasd(&["cat", "nasd:/f"], &[]).stdout, b"0123\0\0");
    assert!(up
        .fails(&["truncate", "nasd:/nope", "1"], &[])
        .contains("no such file"));

    let stat = |p: &str| -> serde_json::Value {
        serde_json::from_str(up.ok(&["stat", "--json", p]).trim()).unwrap()
    };
    up.ok(&["touch", "--mtime", "1000000000", "nasd:/f"]);
    let st = stat("nasd:/f");
    assert_eq!(st["size"].as_u64(), Some(6), "{st}");
    let m = st["mtime_us"].as_u64();
    assert_eq!(m, Some(1_000_000_000_000_000), "{st}");
    // touch creates a missing file (empty), -c does not, utimes is the same command.
    up.ok(&["touch", "nasd:/new"]);
    assert_eq!(stat("nasd:/new")["size"].as_u64(), Some(0));
    assert!(up
        .fails(&["touch", "-c", "nasd:/absent"], &[])
        .contains("no such file"));
    up.ok(&["utimes", "--mtime", "2000000000", "nasd:/new"]);
    let m = stat("nasd:/new");
    let m = m["mtime_us"].as_u64();
    assert_eq!(m, Some(2_000_000_000_000_000));
}

#[test]
fn the_manager_takes_over_the_drive_key_so_the_file_on_disk_is_useless() {
    let up = Up::start(1);
    let cluster: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(up.data().join("cluster.json")).unwrap())
            .unwrap();
    let addr = cluster["drives"][0]["addr"].as_str().unwrap().to_string();
    let key = up.data().join("drive-0/keys/drive.key");
    let key = key.to_str().unwrap();
    let stolen = up.dir.path().join("stolen.key");
    let attempts: [Vec<&str>; 2] = [
        vec![
            "partition",
            "setkey",
            "--drive",
            &addr,
            "--key",
            key,
            "--partition",
            "1",
            "--out",
            stolen.to_str().unwrap(),
        ],
        vec![
            "partition",
            "create",
            "--drive",
            &addr,
            "--key",
            key,
            "--partition",
            "2",
            "--quota",
            "1M",
        ],
    ];
    for args in &attempts {
        let err = up.fails(args, &[]);
        assert!(err.contains("digest does not verify"), "{args:?}: {err}");
    }
    assert!(!stolen.exists());
    // The manager, holding the new drive key, keeps working.
    let f = up.dir.path().join("f");
    std::fs::write(&f, b"still mine").unwrap();
    up.ok(&["cp", f.to_str().unwrap(), "nasd:/f"]);
    assert_eq!(up.nasd(&["cat", "nasd:/f"], &[]).stdout, b"still mine");
    let drives = up.ok(&["manager", "drives", "--json"]);
    let d: serde_json::Value = serde_json::from_str(drives.lines().next().unwrap()).unwrap();
    assert_eq!(d["healthy"], true, "{d}");
}

#[test]
fn a_user_with_an_ed25519_key_logs_in_by_signature_and_a_wrong_key_is_refused() {
    let up = Up::start(1);
    let key = up.dir.path().join("carol.key");
    let other = up.dir.path().join("other.key");
    up.ok(&["user", "keygen", "--out", key.to_str().unwrap()]);
    up.ok(&["user", "keygen", "--out", other.to_str().unwrap()]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the secret key file must be private");
    let public = format!("{}.pub", key.display());
    up.ok(&["user", "add", "carol", "--public-key", &public]);

    // By key: through the environment for one command, and `login --key` for a session.
    let carol = [("NASD_USER", "carol"), ("NASD_KEY", key.to_str().unwrap())];
    let o = up.nasd(&["ls", "nasd:/"], &carol);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = up.nasd(
        &["login", "--user", "carol", "--key", key.to_str().unwrap()],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = up.nasd(&["ls", "nasd:/"], &[("NASD_USER", "carol")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // A wrong key, and a password, are refused.
    let err = up.fails(
        &["login", "--user", "carol", "--key", other.to_str().unwrap()],
        &[],
    );
    assert!(err.contains("signature does not verify"), "{err}");
    let err = up.fails(
        &["ls", "nasd:/"],
        &[
            ("NASD_USER", "carol"),
            ("NASD_KEY", other.to_str().unwrap()),
        ],
    );
    assert!(err.contains("wrong key"), "{err}");
    let err = up.fails(
        &["ls", "nasd:/"],
        &[("NASD_USER", "carol"), ("NASD_PASSWORD", "anything")],
    );
    assert!(err.contains("wrong password"), "{err}");
}

/// `nasd up` in the foreground: serves until SIGTERM, then stops every component it started
/// and removes `pids.json`.
#[test]
fn nasd_up_in_the_foreground_serves_until_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("c");
    let mut child = Command::new(NASD)
        .args(["up", "--drives", "2", "--data"])
        .arg(&data)
        .env("XDG_CONFIG_HOME", tmp.path().join("xdg"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let t0 = Instant::now();
    let mut seen = String::new();
    let mut buf = [0u8; 256];
    use std::io::Read;
    while !seen.contains("ctrl-c stops the cluster") {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "nasd up exited early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "nasd up too slow: {seen}"
        );
    }
    for line in [
        "nasd cluster up in",
        "  manager  127.0.0.1:",
        "  drive-1  127.0.0.1:",
    ] {
        assert!(seen.contains(line), "{line:?} missing from {seen}");
    }
    let pids: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("pids.json")).unwrap()).unwrap();
    let pids: Vec<u32> = pids["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    let ls = Command::new(NASD)
        .args(["ls", "nasd:/"])
        .env("NASD_CONFIG", data.join("client.json"))
        .output()
        .unwrap();
    assert!(
        ls.status.success(),
        "{}",
        String::from_utf8_lossy(&ls.stderr)
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "nasd up exited {status}");
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} outlived nasd up"
        );
    }
    assert!(!data.join("pids.json").exists());
}

/// `nasd demo` passes every step on a cluster of its own.
#[test]
fn the_demo_passes() {
    let o = Command::new(NASD).arg("demo").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for step in [
        "[1] started a cluster",
        "[4] flipped one byte",
        "[6] a 48 MiB file of layout rs:4+2",
        "[7] flipped one byte of a data shard",
        "demo passed",
    ] {
        assert!(out.contains(step), "{step:?} missing from {out}");
    }
}

/// `nasd up --data DIR` makes DIR's cluster the one later commands use, with no
/// `NASD_CONFIG`: a second `up` elsewhere takes over, `NASD_CONFIG` still wins, and `down`
/// without `--data` stops the current cluster.
#[test]
fn nasd_up_makes_its_cluster_current_for_later_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    // A user's environment: HOME only, nothing nasd-specific.
    let nasd = |args: &[&str]| nasd_at_home(&home, args);
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    // Stops both clusters however the test ends (a no-op for one already down).
    struct Down(Vec<std::path::PathBuf>);
    impl Drop for Down {
        fn drop(&mut self) {
            for d in &self.0 {
                let _ = Command::new(NASD).arg("down").arg("--data").arg(d).output();
            }
        }
    }
    let _down = Down(vec![a.clone(), b.clone()]);
    let (ok, out, err) = nasd(&["ls", "nasd:/"]);
    assert!(!ok && err.contains("no client config at"), "{out}{err}");
    let (ok, out, err) = nasd(&[
        "up",
        "--background",
        "--drives",
        "1",
        "--data",
        a.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let current = home.join(".config/nasd/current");
    assert!(out.contains(&current.display().to_string()), "{out}");
    assert!(!out.contains("export NASD_CONFIG"), "{out}");
    let f = tmp.path().join("f");
    std::fs::write(&f, b"in cluster a").unwrap();
    let (ok, _, err) = nasd(&["cp", f.to_str().unwrap(), "nasd:/only-in-a"]);
    assert!(ok, "{err}");
    let (ok, out, err) = nasd(&["ls", "nasd:/"]);
    assert!(ok && out.contains("only-in-a"), "{out}{err}");

    // An existing cluster keeps its drives.
    let (ok, _, err) = nasd(&["up", "--drives", "3", "--data", a.to_str().unwrap()]);
    assert!(
        !ok && err.contains("a cluster of 1 drive(s); --drives 3"),
        "{err}"
    );
    // A second cluster becomes the current one.
    let (ok, _, err) = nasd(&[
        "up",
        "--background",
        "--drives",
        "1",
        "--data",
        b.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let (ok, out, err) = nasd(&["ls", "nasd:/"]);
    assert!(ok && !out.contains("only-in-a"), "{out}{err}");
    // An explicit NASD_CONFIG still wins.
    let o = Command::new(NASD)
        .args(["cat", "nasd:/only-in-a"])
        .env("HOME", &home)
        .env("NASD_CONFIG", a.join("client.json"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, b"in cluster a");

    // `down` without --data stops the current cluster (b), and only it.
    let (ok, out, err) = nasd(&["down"]);
    assert!(ok, "{err}");
    assert!(out.contains("stopped manager"), "{out}");
    assert!(!b.join("pids.json").exists());
    assert!(a.join("pids.json").exists());
    let (ok, _, err) = nasd(&["down", "--data", a.to_str().unwrap()]);
    assert!(ok, "{err}");
    // With its cluster directory gone, the current file is passed over.
    std::fs::remove_dir_all(&b).unwrap();
    let (ok, out, err) = nasd(&["ls", "nasd:/"]);
    assert!(
        !ok && err.contains(".local/share/nasd/client.json"),
        "{out}{err}"
    );
}

/// `nasd bench cluster` on a cluster of its own: JSON cells for both layouts under both
/// protections (plaintext and encrypted), healthy and with a drive stopped (mirror:2 survives
/// it, single is skipped), every figure positive.
#[test]
fn bench_cluster_reports_healthy_and_degraded_cells_as_json() {
    let (out, lines) = json_lines_of(&[
        "bench",
        "cluster",
        "--quick",
        "--json",
        "--duration",
        "0.3",
        "--workers",
        "2",
        "--layout",
        "single,mirror:2",
        "--degraded",
        "1",
    ]);
    let cells = |layout: &str, down: u64| {
        lines
            .iter()
            .filter(|c| c["layout"] == layout && c["drives_down"] == down && c["op"].is_string())
            .count()
    };
    for p in ["plain", "encrypted"] {
        let (single, mirror) = (format!("single,{p}"), format!("mirror:2,{p}"));
        // put and get of 16 MiB and 4 KiB files.
        assert_eq!(cells(&single, 0), 4, "{out}");
        assert_eq!(cells(&mirror, 0), 4, "{out}");
        // Degraded: get of both sizes for mirror:2; single is skipped, saying why.
        assert_eq!(cells(&mirror, 1), 2, "{out}");
        assert_eq!(cells(&single, 1), 0, "{out}");
        assert!(
            lines
                .iter()
                .any(|c| c["layout"] == single.as_str() && c["skipped"].is_string()),
            "{out}"
        );
    }
    for c in lines.iter().filter(|c| c["op"].is_string()) {
        assert_eq!(c["rounds"], 3, "{c}");
        assert_eq!(c["workers"], 2, "{c}");
        assert!(c["mib_per_s"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["count"].as_u64().unwrap() >= 6, "{c}");
    }
    assert!(lines.iter().all(|c| c.get("error").is_none()), "{out}");
}

/// `nasd bench meta` on a cluster of its own with SQLite: every operation measured.
#[test]
fn bench_meta_reports_every_operation_on_sqlite() {
    common::bench_meta_reports_every_operation("sqlite");
}

/// A directory larger than one listing page (manager protocol 5 reads directories a page at a
/// time; one reply used to carry them whole, and past 16,384 entries nothing listed): the
/// client library and `nasd ls` see every entry once, in name order.
/// Regression: the read grant kept after an upload into a prepared file was cached under the
/// directory's path, so a later stat of the directory (served from a cached grant) said it
/// was a file, and a recursive download made a file of it.
#[test]
fn a_directory_filled_through_prepared_files_still_stats_as_a_directory() {
    use nasd_proto::manager::FileKind;
    let up = Up::start(1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = up.admin_client(&rt);
    up.ok(&["mkdir", "nasd:/d"]);
    rt.block_on(async {
        // Past PREPARE_AFTER_CREATES small creates, the client fills prepared files.
        for i in 0..8 {
            let body = format!("file {i}");
            c.put_bytes(&format!("/d/f{i}"), body.as_bytes(), 0o644)
                .await
                .unwrap();
        }
        let d = c.stat("/d").await.unwrap();
        assert_eq!(d.kind, FileKind::Dir, "{d:?}");
        for i in 0..8 {
            let f = c.stat(&format!("/d/f{i}")).await.unwrap();
            assert_eq!((f.kind, f.size), (FileKind::File, 6), "{f:?}");
            let got = c.get_bytes(&format!("/d/f{i}")).await.unwrap();
            assert_eq!(got, format!("file {i}").into_bytes());
        }
    });
}

#[test]
fn a_directory_larger_than_a_page_lists_whole() {
    use nasd_proto::manager::READDIR_PAGE_ENTRIES_MAX;
    let up = Up::start(1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n = READDIR_PAGE_ENTRIES_MAX + 7;
    let c = up.admin_client(&rt);
    up.ok(&["mkdir", "nasd:/big"]);
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..4 {
            let c = c.clone();
            tasks.spawn(async move {
                for i in (w..n).step_by(4) {
                    c.mkdir(&format!("/big/e{i:05}"), 0o755).await.unwrap();
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    });
    let want: Vec<String> = (0..n).map(|i| format!("e{i:05}")).collect();
    let got: Vec<String> = rt
        .block_on(c.list("/big"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(got == want, "{} entries listed of {n}", got.len());
    let page = rt.block_on(c.list_page("/big", "e00009", 3)).unwrap();
    let names: Vec<&str> = page.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["e00010", "e00011", "e00012"]);
    let ls = up.ok(&["ls", "nasd:/big"]);
    assert_eq!(
        ls.lines().filter(|l| l.contains("e0")).count(),
        n,
        "nasd ls"
    );
}

/// The staged uploads the manager's database holds now (read beside the running manager).
fn staged_rows(up: &Up) -> i64 {
    let db = up.cluster.info().manager.dir.join("meta.sqlite");
    let db = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    db.query_row("SELECT count(*) FROM staged", [], |r| r.get(0))
        .unwrap()
}

/// Manager protocol 6: a client filling a directory with small files gets them prepared
/// ahead of their names and pays one manager round trip per file, while a file still shows
/// only once it is whole; a name that exists is overwritten in place (same inode), files go
/// only where the user may write, and the unused ones are given back.
#[test]
fn small_files_in_a_directory_being_filled_take_one_manager_round_trip_each() {
    let up = Up::start(1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = up.admin_client(&rt);
    up.ok(&["mkdir", "nasd:/small"]);
    let body = |i: usize| format!("file {i}\n").repeat(i % 7 + 1).into_bytes();
    let n = 60;
    // The client's keys (its identity, its group's key pair) are fetched once, by a first
    // encrypted file elsewhere: not a cost of filling a directory.
    rt.block_on(c.put_bytes("/warm", b"keys", 0o640)).unwrap();
    let trips0 = c
        .manager_round_trips
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut saw_prepared = false;
    for i in 0..n {
        rt.block_on(c.put_bytes(&format!("/small/f{i:03}"), &body(i), 0o640))
            .unwrap();
        saw_prepared |= c.prepared_count() > 0;
        // Prepared files are staged, never listed.
        if i == n / 2 {
            let names = rt.block_on(c.list("/small")).unwrap();
            assert_eq!(names.len(), i + 1, "only whole files are listed");
        }
    }
    let trips = c
        .manager_round_trips
        .load(std::sync::atomic::Ordering::Relaxed)
        - trips0;
    assert!(saw_prepared, "no files were prepared");
    // 2 per file for the first few, then 1 per file plus a prepare per batch (4, 8, 16, 32).
    assert!(
        trips < n as u64 * 13 / 10,
        "{trips} manager round trips for {n} files"
    );
    for i in 0..n {
        let p = format!("/small/f{i:03}");
        assert_eq!(rt.block_on(c.get_bytes(&p)).unwrap(), body(i), "{p}");
        let st = rt.block_on(c.stat(&p)).unwrap();
        assert_eq!(st.mode & 0o7777, 0o640, "{p}");
    }
    assert!(staged_rows(&up) > 0, "the unused prepared files are staged");

    // Overwriting names that exist keeps each file's inode, in the same directory.
    let before = rt.block_on(c.stat("/small/f007")).unwrap();
    for i in 0..10 {
        rt.block_on(c.put_bytes(&format!("/small/f{i:03}"), b"again", 0o600))
            .unwrap();
    }
    let after = rt.block_on(c.stat("/small/f007")).unwrap();
    assert_eq!((after.ino, after.mode & 0o7777), (before.ino, 0o640));
    assert_eq!(rt.block_on(c.get_bytes("/small/f007")).unwrap(), b"again");

    // Given back: nothing staged remains, and no other name appeared.
    rt.block_on(c.release_prepared());
    assert_eq!(c.prepared_count(), 0);
    assert_eq!(staged_rows(&up), 0, "unused prepared files were given back");
    assert_eq!(rt.block_on(c.list("/small")).unwrap().len(), n);

    // Another user may not fill a directory they cannot write, prepared or not.
    let o = up.nasd(
        &["user", "add", "mallory", "--password"],
        &[("NASD_NEW_PASSWORD", "m-pass-123")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = rt
        .block_on(Client::connect(up.session("mallory", "m-pass-123")))
        .unwrap();
    for i in 0..8 {
        let e = rt
            .block_on(m.put_bytes(&format!("/small/m{i}"), b"x", 0o644))
            .unwrap_err();
        assert_eq!(e.status(), Some(MgrStatus::PermissionDenied), "{e}");
    }
    assert_eq!(m.prepared_count(), 0);
    assert_eq!(rt.block_on(c.list("/small")).unwrap().len(), n);
}

/// A trusted front end acts for users without their passwords: only once an admin made its
/// user a gateway, only for users with an S3 key, never for admins, with the user's own
/// permissions, not from a session it opened, not to change credentials; turning the flag off
/// ends those sessions.
#[test]
fn a_gateway_acts_for_users_without_their_credentials() {
    let up = Up::start(1);
    for (u, pw) in [("gw", "gw-pw"), ("bob", "bob-pw"), ("alice", "alice-pw")] {
        up.add_user(u, pw);
    }
    // The files a gateway serves are wrapped for it too (issue 10): it deciphers with its key.
    up.ok(&["layout", "set", "nasd:/", "reader=gw"]);
    let f = up.dir.path().join("f");
    for who in ["bob", "alice"] {
        std::fs::write(&f, format!("{who}'s")).unwrap();
        let remote = format!("nasd:/{who}.txt");
        up.ok(&["cp", f.to_str().unwrap(), &remote]);
        up.ok(&["chown", who, &remote]);
        up.ok(&["chmod", "600", &remote]);
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let denied = |e: nasd_client::files::FsError| {
        assert_eq!(e.status(), Some(MgrStatus::PermissionDenied), "{e}");
    };
    let gw = rt
        .block_on(Client::connect(up.session("gw", "gw-pw")))
        .unwrap();
    denied(
        rt.block_on(gw.act_for("bob"))
            .err()
            .expect("not a gateway yet"),
    );
    up.ok(&["user", "gateway", "gw", "on"]);
    denied(
        rt.block_on(gw.act_for("bob"))
            .err()
            .expect("bob has no S3 key yet"),
    );
    up.ok(&["user", "s3-key", "create", "bob"]);
    let bob = rt.block_on(gw.act_for("bob")).unwrap();
    assert_eq!(rt.block_on(bob.get_bytes("/bob.txt")).unwrap(), b"bob's");
    denied(rt.block_on(bob.get_bytes("/alice.txt")).unwrap_err());
    denied(
        rt.block_on(gw.act_for("admin"))
            .err()
            .expect("never an admin"),
    );
    denied(
        rt.block_on(bob.act_for("alice"))
            .err()
            .expect("not from a delegated session"),
    );
    let passwd = calls::UserPasswd {
        name: "bob".into(),
        public_key: None,
    };
    denied(rt.block_on(bob.call("/", passwd)).unwrap_err());
    // bob's own password still works: the gateway never changed it.
    up.ok(&["ls", "nasd:/"]);
    let bob_self = rt
        .block_on(Client::connect(up.session("bob", "bob-pw")))
        .unwrap();
    let alice = rt
        .block_on(Client::connect(up.session("alice", "alice-pw")))
        .unwrap();
    denied(
        rt.block_on(alice.act_for("bob"))
            .err()
            .expect("alice is no gateway"),
    );
    up.ok(&["user", "gateway", "gw", "off"]);
    // The manager refuses the session; capabilities it already holds (and the stats a
    // drive serves under them) run out on their own, as after a logout.
    let stat = calls::Stat {
        path: "/bob.txt".into(),
    };
    assert!(
        rt.block_on(bob.call("/bob.txt", stat)).is_err(),
        "the gateway's session for bob ended with its flag"
    );
    assert_eq!(
        rt.block_on(bob_self.get_bytes("/bob.txt")).unwrap(),
        b"bob's"
    );
}

/// S3 access keys: a user makes their own (an admin anyone's), the secret is shown once and
/// read back only by a gateway, keys are listed without secrets and revoked by id.
#[test]
fn s3_keys_are_made_by_their_user_and_read_only_by_gateways() {
    use nasd_proto::manager::S3KeyFound;
    let up = Up::start(1);
    for (u, pw) in [("gw", "gw-pw"), ("bob", "bob-pw"), ("alice", "alice-pw")] {
        up.add_user(u, pw);
    }
    let made: serde_json::Value =
        serde_json::from_str(up.ok(&["user", "s3-key", "create", "bob", "--json"]).trim()).unwrap();
    let id = made["access_key_id"].as_str().unwrap().to_string();
    let secret = made["secret_access_key"].as_str().unwrap().to_string();
    assert!(id.starts_with("NASD") && id.len() == 20, "{id}");
    assert_eq!(secret.len(), 40);
    let bob = [("NASD_USER", "bob"), ("NASD_PASSWORD", "bob-pw")];
    let alice = [("NASD_USER", "alice"), ("NASD_PASSWORD", "alice-pw")];
    let own = up.nasd(&["user", "s3-key", "create", "bob"], &bob);
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    assert!(up
        .fails(&["user", "s3-key", "create", "bob"], &alice)
        .contains("permission denied"));
    let listed = up.nasd(&["user", "s3-key", "list", "bob"], &bob);
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(
        listed.contains(&id) && !listed.contains(&secret),
        "{listed}"
    );
    assert!(up
        .fails(&["user", "s3-key", "list", "bob"], &alice)
        .contains("permission denied"));

    let rt = tokio::runtime::Runtime::new().unwrap();
    let gw = rt
        .block_on(Client::connect(up.session("gw", "gw-pw")))
        .unwrap();
    let ask = |c: &Client| {
        rt.block_on(c.call(
            "/",
            calls::S3KeySecret {
                access_key_id: id.clone(),
            },
        ))
    };
    let e = ask(&gw).unwrap_err();
    assert_eq!(e.status(), Some(MgrStatus::PermissionDenied), "{e}");
    up.ok(&["user", "gateway", "gw", "on"]);
    let S3KeyFound { user, secret: s } = ask(&gw).unwrap();
    assert_eq!((user.as_str(), s.0.as_str()), ("bob", secret.as_str()));
    assert!(
        !format!("{s:?}").contains(&secret),
        "Debug hides the secret"
    );
    // Not from a session the gateway opened for a user.
    let as_bob = rt.block_on(gw.act_for("bob")).unwrap();
    assert_eq!(
        ask(&as_bob).unwrap_err().status(),
        Some(MgrStatus::PermissionDenied)
    );
    up.ok(&["user", "s3-key", "revoke", "bob", &id]);
    assert!(ask(&gw).is_err(), "a revoked key is gone");
    assert!(up
        .fails(&["user", "s3-key", "revoke", "bob", &id], &[])
        .contains(&id));
}
