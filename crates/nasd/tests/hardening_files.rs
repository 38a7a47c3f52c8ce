//! Regression tests for the client and CLI side of issue 12 ("Hardening"): modes and names
//! (item 8), transfers that fail (item 9), and the low items users meet — space of a failed
//! upload, holes, remote-to-remote streaming, the object/inode check, `nasd up` restarts and
//! private files, `obj read` to the end, `--out -`, trailing slashes, whole error details and
//! POSIX overwrite permission. Each runs real processes (`nasd up`, `nasd drive run`).

mod common;
use common::*;

use nasd_client::files::Client;
use nasd_cluster::{NodeId, Options};
use nasd_proto::manager::{calls, MgrStatus};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `nasd` against the cluster with the given umask.
fn nasd_umask(up: &Up, umask: u32, args: &[&str]) -> Output {
    let mut c = Command::new(NASD);
    c.args(args)
        .env("NASD_CONFIG", up.config())
        .env_remove("NASD_USER")
        .env_remove("NASD_PASSWORD");
    // SAFETY: umask is async-signal-safe and touches only the child's own state.
    unsafe {
        c.pre_exec(move || {
            libc::umask(umask as libc::mode_t);
            Ok(())
        });
    }
    c.output().unwrap()
}

fn ok_umask(up: &Up, umask: u32, args: &[&str]) -> String {
    let o = nasd_umask(up, umask, args);
    assert!(
        o.status.success(),
        "nasd {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn stat_json(up: &Up, path: &str) -> serde_json::Value {
    serde_json::from_str(up.ok(&["stat", "--json", path]).trim()).unwrap()
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn set_mtime(p: &Path, secs: u64, nanos: u32) {
    let t = std::time::UNIX_EPOCH + Duration::new(secs, nanos);
    let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
}

fn mtime_us_of(p: &Path) -> u64 {
    let m = std::fs::metadata(p).unwrap();
    m.mtime() as u64 * 1_000_000 + m.mtime_nsec() as u64 / 1000
}

fn admin_client(up: &Up, rt: &tokio::runtime::Runtime) -> std::sync::Arc<Client> {
    rt.block_on(Client::connect(
        up.session("admin", up.admin_password().trim()),
    ))
    .unwrap()
}

/// Adds a user `name` (password `name-pw`) as the admin.
fn add_user(up: &Up, name: &str) {
    let pw = format!("{name}-pw");
    let o = up.nasd(
        &["user", "add", name, "--password"],
        &[("NASD_NEW_PASSWORD", &pw)],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn as_user(name: &str) -> [(&'static str, String); 2] {
    [
        ("NASD_USER", name.into()),
        ("NASD_PASSWORD", format!("{name}-pw")),
    ]
}

fn env_refs<'a>(e: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    e.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie (state Z) holds nothing any more.
        Ok(t) => t
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}

/// Stops the cluster's manager, lets `edit` change its SQLite database, and starts a manager
/// on the same address and data again.
fn with_manager_stopped(up: &mut Up, edit: impl FnOnce(&rusqlite::Connection)) {
    with_manager_dir_stopped(up, |mdir| {
        let db = rusqlite::Connection::open(mdir.join("meta.sqlite")).unwrap();
        edit(&db);
    })
}

/// Stops the cluster's manager, lets `edit` change its directory, and starts a manager on the
/// same address and data again.
fn with_manager_dir_stopped(up: &mut Up, edit: impl FnOnce(&Path)) {
    let pid = up.pid("manager");
    up.kill("manager");
    assert!(process_gone(pid), "manager still up");
    let mdir = up.cluster.info().manager.dir.clone();
    edit(&mdir);
    let log = up.cluster.log_path(NodeId::Manager);
    up.restart("manager");
    let t0 = Instant::now();
    while !up.nasd(&["ls", "nasd:/"], &[]).status.success() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the manager did not come back: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ino_of(db: &rusqlite::Connection, name: &str) -> i64 {
    db.query_row(
        "SELECT ino FROM dirents WHERE parent = 1 AND name = ?1",
        [name],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn uploads_keep_the_source_mode_under_the_umask_and_p_keeps_mode_and_mtime() {
    let up = Up::start(1);
    let d = up.dir.path();
    let private = d.join("private");
    std::fs::write(&private, b"mine alone").unwrap();
    chmod(&private, 0o600);
    let open = d.join("open");
    std::fs::write(&open, b"for everyone").unwrap();
    chmod(&open, 0o666);

    // A new destination gets the source's bits under the umask, never more (GNU cp).
    ok_umask(&up, 0o022, &["cp", s(&private), "nasd:/private"]);
    assert_eq!(stat_json(&up, "nasd:/private")["mode"], "600");
    ok_umask(&up, 0o022, &["cp", s(&open), "nasd:/open"]);
    assert_eq!(stat_json(&up, "nasd:/open")["mode"], "644");
    ok_umask(&up, 0o077, &["cp", s(&open), "nasd:/open77"]);
    assert_eq!(stat_json(&up, "nasd:/open77")["mode"], "600");

    // -p keeps mode (whatever the umask) and mtime on upload ...
    let kept = d.join("kept");
    std::fs::write(&kept, b"keep my times").unwrap();
    chmod(&kept, 0o640);
    set_mtime(&kept, 1_500_000_000, 250_000_000);
    ok_umask(&up, 0o077, &["cp", "-p", s(&kept), "nasd:/kept"]);
    let st = stat_json(&up, "nasd:/kept");
    assert_eq!(st["mode"], "640");
    assert_eq!(st["mtime_us"], 1_500_000_000_250_000u64);

    // ... and on download.
    let back = d.join("kept.back");
    ok_umask(&up, 0o077, &["cp", "-p", "nasd:/kept", s(&back)]);
    assert_eq!(std::fs::read(&back).unwrap(), b"keep my times");
    assert_eq!(mode_of(&back), 0o640);
    assert_eq!(mtime_us_of(&back), 1_500_000_000_250_000);

    // A download to a new file without -p: the remote bits under the umask.
    let plain = d.join("kept.plain");
    ok_umask(&up, 0o027, &["cp", "nasd:/open", s(&plain)]);
    assert_eq!(mode_of(&plain), 0o640);

    // -a: recursive with modes and times, directories included.
    let tree = d.join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(tree.join("f"), b"inside").unwrap();
    chmod(&tree.join("f"), 0o604);
    set_mtime(&tree.join("f"), 1_400_000_000, 0);
    chmod(&tree, 0o750);
    ok_umask(&up, 0o077, &["cp", "-a", s(&tree), "nasd:/tree"]);
    assert_eq!(stat_json(&up, "nasd:/tree")["mode"], "750");
    let f = stat_json(&up, "nasd:/tree/f");
    assert_eq!(f["mode"], "604");
    assert_eq!(f["mtime_us"], 1_400_000_000_000_000u64);
    let tree_back = d.join("tree.back");
    ok_umask(&up, 0o077, &["cp", "-a", "nasd:/tree", s(&tree_back)]);
    assert_eq!(mode_of(&tree_back), 0o750);
    assert_eq!(mode_of(&tree_back.join("f")), 0o604);
    assert_eq!(mtime_us_of(&tree_back.join("f")), 1_400_000_000_000_000);
}

#[test]
fn names_from_the_manager_are_printed_escaped_and_json_stays_exact() {
    let mut up = Up::start(1);
    let f = up.dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    up.ok(&["cp", s(&f), "nasd:/plain"]);
    up.ok(&["mkdir", "nasd:/dir"]);
    // A name from before names were checked: a newline that forges a second listing line, a
    // carriage return and a terminal escape sequence.
    let evil = "a\n-rw-r--r-- root     root            1 2020-01-01 00:00 forged\r\x1b[31mred";
    with_manager_stopped(&mut up, |db| {
        db.execute(
            "UPDATE dirents SET name = ?1 WHERE parent = 1 AND name = 'plain'",
            [evil],
        )
        .unwrap();
    });
    for args in [vec!["ls", "nasd:/"], vec!["ls", "-l", "nasd:/"]] {
        let out = up.ok(&args);
        assert_eq!(out.lines().count(), 2, "{args:?} forged a line: {out:?}");
        assert!(
            !out.contains('\r') && !out.contains('\x1b'),
            "{args:?}: {out:?}"
        );
        assert!(out.contains("\\n") && out.contains("\\r"), "{out:?}");
    }
    // JSON carries the exact name.
    let json = up.ok(&["ls", "--json", "nasd:/"]);
    let names: Vec<String> = json
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["name"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(names.contains(&evil.to_string()), "{names:?}");
    // A recursive download names the file in its error escaped too.
    let remote = format!("nasd:/{evil}/nothing");
    let err = up.fails(&["stat", &remote], &[]);
    assert!(
        !err.trim_end().contains('\n') && !err.contains('\x1b'),
        "{err:?}"
    );
}

#[test]
fn a_failed_download_leaves_an_existing_local_file_untouched_and_no_partial_file() {
    let up = Up::start(1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let victim = rand_bytes(3 << 20, 4243);
    let c = admin_client(&up, &rt);
    // Plaintext, so the test can find the file's bytes on the drive's disk.
    rt.block_on(c.layout_set("/", "plain")).unwrap();
    rt.block_on(c.put_bytes("/victim", &victim, 0o644)).unwrap();
    // Flip a byte of the file's last MiB on the drive's disk (chunks are written in
    // parallel, so each is found on its own), so the download fails late.
    let marker = &victim[2 << 20..(2 << 20) + 64];
    let blk = up.data().join("drive-0/data.blk");
    let disk = std::fs::read(&blk).unwrap();
    let at = disk
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("the file's bytes on the drive's disk")
        + 1000;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&blk).unwrap();
        f.write_all_at(&[disk[at] ^ 0x5a], at as u64).unwrap();
        f.sync_all().unwrap();
    }
    let local = up.dir.path().join("dl");
    std::fs::create_dir(&local).unwrap();
    let precious = local.join("precious");
    std::fs::write(&precious, b"the only copy").unwrap();
    up.fails(&["cp", "nasd:/victim", s(&precious)], &[]);
    let now = std::fs::read(&precious).unwrap();
    assert!(
        now == b"the only copy",
        "the local file now holds {} bytes",
        now.len()
    );
    // A new local name: nothing is left behind, not even a temporary file.
    up.fails(&["cp", "nasd:/victim", s(&local.join("new"))], &[]);
    let names: Vec<_> = std::fs::read_dir(&local)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("precious")]);
}

#[test]
fn a_new_file_is_invisible_until_all_of_it_is_on_the_drive_and_the_last_commit_wins() {
    let up = Up::start(1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = admin_client(&up, &rt);
    rt.block_on(async {
        // A client that writes part of a new file and dies: nothing is ever visible.
        let u = c.begin_upload("/partial", 0o644).await.unwrap();
        assert!(!u.replaces());
        c.upload_write(&u, 0, &rand_bytes(1 << 20, 1))
            .await
            .unwrap();
        let e = c.stat("/partial").await.unwrap_err();
        assert_eq!(e.status(), Some(MgrStatus::NoSuchPath), "{e}");
        assert!(c.list("/").await.unwrap().is_empty());
        drop(u);

        // Two uploads of one new name: each is invisible until it commits; the last wins.
        let u1 = c.begin_upload("/n", 0o644).await.unwrap();
        c.upload_write(&u1, 0, b"first").await.unwrap();
        let u2 = c.begin_upload("/n", 0o644).await.unwrap();
        assert!(!u2.replaces());
        c.upload_write(&u2, 0, b"second!").await.unwrap();
        assert!(c.stat("/n").await.is_err());
        c.finish_upload(u2.clone()).await.unwrap();
        // The upload's capability serves the read back: no manager round trip.
        let rt = || {
            c.manager_round_trips
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let before = rt();
        assert_eq!(c.get_bytes("/n").await.unwrap(), b"second!");
        assert_eq!(rt(), before);
        // A commit repeated (its reply lost) succeeds and changes nothing.
        c.finish_upload(u2).await.unwrap();
        assert_eq!(c.get_bytes("/n").await.unwrap(), b"second!");
        c.finish_upload(u1).await.unwrap();
        assert_eq!(c.get_bytes("/n").await.unwrap(), b"first");
    });
    assert!(up
        .fails(&["stat", "nasd:/partial"], &[])
        .contains("no such file"));

    // `nasd cp` of a new file killed mid-transfer: no name, or the whole file.
    let big = rand_bytes(96 << 20, 13);
    let bigf = up.dir.path().join("big");
    std::fs::write(&bigf, &big).unwrap();
    let mut cp = Command::new(NASD)
        .args(["cp", s(&bigf), "nasd:/big"])
        .env("NASD_CONFIG", up.config())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let _ = cp.kill();
    let _ = cp.wait();
    let o = up.nasd(&["stat", "nasd:/big"], &[]);
    if o.status.success() {
        let back = rt.block_on(c.get_bytes("/big")).unwrap();
        assert!(back == big, "a partial new file is visible");
    } else {
        assert!(String::from_utf8_lossy(&o.stderr).contains("no such file"));
    }
}

#[test]
fn an_upload_that_outlives_its_write_capability_renews_it() {
    let mut up = Up::start(1);
    let ttl_ms = 3_000u64;
    with_manager_dir_stopped(&mut up, |mdir| {
        let p = mdir.join("manager.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        v["policy"]["write_cap_ttl_ms"] = ttl_ms.into();
        std::fs::write(&p, v.to_string()).unwrap();
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = admin_client(&up, &rt);
    rt.block_on(async {
        rt_put(&c, "/old", b"old").await;
        for path in ["/new", "/old"] {
            let u = c.begin_upload(path, 0o644).await.unwrap();
            c.upload_write(&u, 0, b"first half, ").await.unwrap();
            // The first capability expires meanwhile.
            tokio::time::sleep(Duration::from_millis(ttl_ms + 500)).await;
            c.upload_write(&u, 12, b"second half").await.unwrap();
            c.finish_upload(u).await.unwrap();
            assert_eq!(c.get_bytes(path).await.unwrap(), b"first half, second half");
        }
    });
}

async fn rt_put(c: &std::sync::Arc<Client>, path: &str, data: &[u8]) {
    c.put_bytes(path, data, 0o644).await.unwrap();
}

#[test]
fn the_space_of_a_failed_upload_comes_back_at_once() {
    let up = Up::start_with(Options {
        drive_capacity_bytes: Some(8 << 20),
        ..Options::drives(1)
    });
    let small = up.dir.path().join("small");
    std::fs::write(&small, b"fits").unwrap();
    up.ok(&["cp", s(&small), "nasd:/small"]);
    let big = up.dir.path().join("big");
    std::fs::write(&big, rand_bytes(32 << 20, 21)).unwrap();
    // A failed overwrite and a failed new upload: both fill the drive, then fail.
    let err = up.fails(&["cp", s(&big), "nasd:/small"], &[]);
    assert!(err.contains("disk full"), "{err}");
    let err = up.fails(&["cp", s(&big), "nasd:/big"], &[]);
    assert!(err.contains("disk full"), "{err}");
    // Right away (no orphan scrub has run), most of the drive is free again.
    let six = up.dir.path().join("six");
    std::fs::write(&six, rand_bytes(6 << 20, 22)).unwrap();
    up.ok(&["cp", s(&six), "nasd:/six"]);
    assert_eq!(up.nasd(&["cat", "nasd:/small"], &[]).stdout, b"fits");
}

/// Allocated bytes of a local file.
fn allocated(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().blocks() * 512
}

#[test]
fn holes_survive_upload_and_download() {
    let up = Up::start(1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let size = 64u64 << 20;
    let sparse = up.dir.path().join("sparse");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(&sparse).unwrap();
        f.set_len(size).unwrap();
        f.write_all_at(&rand_bytes(8192, 1), 0).unwrap();
        f.write_all_at(&rand_bytes(8192, 2), 40 << 20).unwrap();
        // The file ends in a hole: the size must survive too.
    }
    if allocated(&sparse) > 1 << 20 {
        eprintln!("skipped: this file system does not keep holes");
        return;
    }
    up.ok(&["cp", s(&sparse), "nasd:/sparse"]);
    assert_eq!(stat_json(&up, "nasd:/sparse")["size"], size);
    // The drive holds the data, not 64 MiB of zeros.
    let c = admin_client(&up, &rt);
    let used = rt.block_on(async {
        let g = c.open("/sparse", false).await.unwrap();
        let (addr, t, auth) = g.component(0).unwrap();
        let conn = nasd_client::DriveConn::connect(addr).await.unwrap();
        let a = conn.getattr(&auth, t).await.unwrap();
        a.blocks_used * a.block_size as u64
    });
    assert!(
        used < 4 << 20,
        "the drive stored {used} bytes for 16 KiB of data"
    );
    let back = up.dir.path().join("sparse.back");
    up.ok(&["cp", "nasd:/sparse", s(&back)]);
    assert_eq!(std::fs::metadata(&back).unwrap().len(), size);
    assert!(
        std::fs::read(&back).unwrap() == std::fs::read(&sparse).unwrap(),
        "content differs"
    );
    assert!(
        allocated(&back) < 1 << 20,
        "the download allocated {} bytes",
        allocated(&back)
    );
}

/// Peak resident memory of a child, polled until it exits (VmHWM only grows).
fn peak_rss_bytes(child: &mut Child) -> (u64, std::process::ExitStatus) {
    let mut peak = 0;
    loop {
        if let Ok(t) = std::fs::read_to_string(format!("/proc/{}/status", child.id())) {
            if let Some(kb) = t
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak = peak.max(kb * 1024);
            }
        }
        if let Some(st) = child.try_wait().unwrap() {
            return (peak, st);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_remote_to_remote_copy_streams_in_bounded_memory() {
    let up = Up::start(2);
    let size = 160usize << 20;
    let data = rand_bytes(size, 77);
    let f = up.dir.path().join("big");
    std::fs::write(&f, &data).unwrap();
    up.ok(&["cp", s(&f), "nasd:/a"]);
    std::fs::remove_file(&f).unwrap();
    let mut cp = Command::new(NASD)
        .args(["cp", "nasd:/a", "nasd:/b"])
        .env("NASD_CONFIG", up.config())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (peak, st) = peak_rss_bytes(&mut cp);
    assert!(st.success());
    eprintln!("remote copy of {size} bytes: peak resident {peak} bytes");
    assert!(
        peak < 96 << 20,
        "copying {size} bytes peaked at {peak} bytes resident"
    );
    let back = up.dir.path().join("b.back");
    up.ok(&["cp", "nasd:/b", s(&back)]);
    assert!(std::fs::read(&back).unwrap() == data, "content differs");
}

#[test]
fn a_swapped_object_pointer_in_the_managers_database_is_refused_on_read() {
    let mut up = Up::start(1);
    let a = up.dir.path().join("a");
    std::fs::write(&a, b"alice's private notes").unwrap();
    let b = up.dir.path().join("b");
    std::fs::write(&b, b"bob's public page").unwrap();
    up.ok(&["cp", s(&a), "nasd:/a"]);
    up.ok(&["cp", s(&b), "nasd:/b"]);
    with_manager_stopped(&mut up, |db| {
        let (ia, ib) = (ino_of(db, "a"), ino_of(db, "b"));
        let row = |ino: i64| -> (i64, i64, i64, i64) {
            db.query_row(
                "SELECT c.drive, c.part, c.object, i.acv FROM inodes i
                 JOIN components c ON c.ino = i.ino AND c.idx = 0 WHERE i.ino = ?1",
                [ino],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap()
        };
        let (ra, rb) = (row(ia), row(ib));
        for (ino, r) in [(ia, rb), (ib, ra)] {
            db.execute(
                "UPDATE components SET drive = ?2, part = ?3, object = ?4 WHERE ino = ?1",
                [ino, r.0, r.1, r.2],
            )
            .unwrap();
            db.execute("UPDATE inodes SET acv = ?2 WHERE ino = ?1", [ino, r.3])
                .unwrap();
        }
    });
    let o = up.nasd(&["cat", "nasd:/b"], &[]);
    assert!(!o.status.success(), "served a's bytes as b's");
    assert!(o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("{err}");
    assert!(err.contains("nasd:/b") && err.contains("inode"), "{err}");
    let dl = up.dir.path().join("b.back");
    up.fails(&["cp", "nasd:/b", s(&dl)], &[]);
    assert!(!dl.exists());
}

/// Stops a background cluster when dropped.
struct Background(PathBuf);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = Command::new(NASD)
            .args(["down", "--data", s(&self.0)])
            .output();
    }
}

fn up_background(dir: &Path) -> Output {
    let mut c = Command::new(NASD);
    c.args(["up", "--background", "--drives", "2", "--data", s(dir)]);
    // `up` records the current cluster per user: in the test's directory, not the user's.
    c.env("XDG_CONFIG_HOME", dir.with_file_name("xdg"));
    // SAFETY: umask only changes the child's own state.
    unsafe {
        c.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        });
    }
    c.output().unwrap()
}

fn pids(dir: &Path) -> Vec<(String, u32)> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("pids.json")).unwrap()).unwrap();
    v["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_string(),
                p[1].as_u64().unwrap() as u32,
            )
        })
        .collect()
}

#[test]
fn nasd_up_restarts_only_what_is_down_and_keeps_its_files_private() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let _guard = Background(dir.clone());
    let o = up_background(&dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for p in [dir.clone(), dir.join("logs")] {
        assert_eq!(mode_of(&p), 0o700, "{}", p.display());
    }
    let mut files = vec![
        dir.join("client.json"),
        dir.join("cluster.json"),
        dir.join("pids.json"),
        dir.join("admin.password"),
    ];
    for e in std::fs::read_dir(dir.join("logs")).unwrap() {
        files.push(e.unwrap().path());
    }
    for p in &files {
        assert_eq!(mode_of(p), 0o600, "{}", p.display());
    }
    let before = pids(&dir);
    let (_, victim) = before.iter().find(|(n, _)| n == "drive-1").unwrap().clone();
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    let t0 = Instant::now();
    while !process_gone(victim) {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = up_background(&dir);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("restarted drive-1"), "{out}");
    assert!(!out.contains("restarted drive-0"), "{out}");
    let after = pids(&dir);
    for (name, pid) in &before {
        let now = after.iter().find(|(n, _)| n == name).unwrap().1;
        if name == "drive-1" {
            assert_ne!(now, *pid);
            assert!(!process_gone(now));
        } else {
            assert_eq!(now, *pid, "{name} was restarted");
        }
    }
    // The restarted cluster serves files on both drives.
    let f = tmp.path().join("f");
    std::fs::write(&f, b"after the restart").unwrap();
    for i in 0..4 {
        let o = Command::new(NASD)
            .args(["cp", s(&f), &format!("nasd:/f{i}")])
            .env("NASD_CONFIG", dir.join("client.json"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// A drive with partition 1, served by `nasd drive run` (for `nasd obj`).
struct TestDrive {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Drop for TestDrive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_ok(args: &[&str]) -> Vec<u8> {
    run_ok_in(&std::env::temp_dir(), args)
}

/// Runs `nasd` in `cwd` (where a file named `-` would land).
fn run_ok_in(cwd: &Path, args: &[&str]) -> Vec<u8> {
    let o = Command::new(NASD)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "nasd {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

impl TestDrive {
    /// With partition 1 and its keys (for `nasd obj`).
    fn start() -> TestDrive {
        TestDrive::start_with(&["--partition", "1"])
    }

    /// As `nasd up` makes them: no partition until a manager registers the drive.
    fn start_bare() -> TestDrive {
        TestDrive::start_with(&[])
    }

    fn start_with(init_args: &[&str]) -> TestDrive {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("drive");
        let mut args = vec!["drive", "init", "--data", s(&data)];
        args.extend(init_args);
        run_ok(&args);
        let mut child = Command::new(NASD)
            .args([
                "drive",
                "run",
                "--data",
                s(&data),
                "--listen",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line.trim().rsplit(' ').next().unwrap().to_string();
        TestDrive { child, addr, dir }
    }

    fn key(&self, has: &str, lacks: &str) -> String {
        let keys = self.dir.path().join("drive/keys");
        for e in std::fs::read_dir(&keys).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.contains(has) && (lacks.is_empty() || !name.contains(lacks)) {
                return s(&keys.join(name)).to_string();
            }
        }
        panic!("no {has} key");
    }
}

#[test]
fn obj_read_without_len_reads_to_the_end_and_out_dash_is_stdout() {
    let d = TestDrive::start();
    let pk = d.key("partition", "working");
    let wk = d.key("working", "");
    let id = String::from_utf8(run_ok(&[
        "obj",
        "create",
        "--drive",
        &d.addr,
        "--key",
        &pk,
        "--partition",
        "1",
    ]))
    .unwrap()
    .trim()
    .to_string();
    // The capability on stdout with `--out -`.
    let cwd = d.dir.path();
    let cap_json = run_ok_in(
        cwd,
        &[
            "cap",
            "mint",
            "--key",
            &wk,
            "--object",
            &id,
            "--rights",
            "read,write,getattr",
            "--out",
            "-",
        ],
    );
    let dash = cwd.join("-");
    assert!(!dash.exists(), "a file named - was written");
    let cap = d.dir.path().join("cap.json");
    std::fs::write(&cap, &cap_json).unwrap();
    let cap = s(&cap).to_string();
    // An object larger than one request can carry, written in two pieces.
    let piece = 12usize << 20;
    let data = rand_bytes(2 * piece, 5);
    for (i, half) in data.chunks(piece).enumerate() {
        let p = d.dir.path().join(format!("in{i}"));
        std::fs::write(&p, half).unwrap();
        let off = (i * piece).to_string();
        run_ok(&[
            "obj",
            "write",
            "--drive",
            &d.addr,
            "--cap",
            &cap,
            "--offset",
            &off,
            "--in",
            s(&p),
        ]);
    }
    let out = run_ok(&["obj", "read", "--drive", &d.addr, "--cap", &cap]);
    assert!(out == data, "read {} of {} bytes", out.len(), data.len());
    let out = run_ok_in(
        cwd,
        &[
            "obj", "read", "--drive", &d.addr, "--cap", &cap, "--offset", "1000", "--out", "-",
        ],
    );
    assert!(out == data[1000..], "read {} bytes", out.len());
    assert!(!dash.exists(), "a file named - was written");
    // To a file: the whole object, and nothing beside it.
    let file = cwd.join("object.out");
    run_ok(&[
        "obj",
        "read",
        "--drive",
        &d.addr,
        "--cap",
        &cap,
        "--out",
        s(&file),
    ]);
    assert!(std::fs::read(&file).unwrap() == data);
    let strays = std::fs::read_dir(cwd)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".nasd-")
        })
        .count();
    assert_eq!(strays, 0);
}

#[test]
fn a_trailing_slash_names_a_directory_and_never_creates_a_file() {
    let up = Up::start(1);
    let f = up.dir.path().join("f");
    std::fs::write(&f, b"payload").unwrap();
    let err = up.fails(&["cp", s(&f), "nasd:/nodir/"], &[]);
    assert!(err.contains("nasd:/nodir/"), "{err}");
    assert_eq!(up.ok(&["ls", "nasd:/"]).trim(), "", "a file was created");
    up.ok(&["mkdir", "nasd:/dir"]);
    up.ok(&["cp", s(&f), "nasd:/dir/"]);
    assert_eq!(up.nasd(&["cat", "nasd:/dir/f"], &[]).stdout, b"payload");
    // Remote to remote, and out to a local path with a slash.
    let err = up.fails(&["cp", "nasd:/dir/f", "nasd:/other/"], &[]);
    assert!(err.contains("nasd:/other/"), "{err}");
    assert!(!up.ok(&["ls", "nasd:/"]).contains("other"));
    let local = up.dir.path().join("nolocal");
    up.fails(&["cp", "nasd:/dir/f", &format!("{}/", s(&local))], &[]);
    assert!(!local.exists(), "a local file was created");
}

#[test]
fn manager_error_details_reach_the_user_whole() {
    let up = Up::start(1);
    add_user(&up, "bob");
    let bob = as_user("bob");
    let err = up.fails(
        &["user", "add", "carol"],
        &[
            env_refs(&bob)[0],
            env_refs(&bob)[1],
            ("NASD_NEW_PASSWORD", "x"),
        ],
    );
    assert!(err.contains("needs an admin"), "{err}");
    up.ok(&["mkdir", "nasd:/d"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = admin_client(&up, &rt);
    let e = rt.block_on(c.unlink("/d")).unwrap_err().to_string();
    assert!(e.contains("use rmdir"), "{e}");
}

#[test]
fn overwriting_a_file_needs_write_permission_on_the_file_not_on_its_directory() {
    let up = Up::start(1);
    add_user(&up, "bob");
    let bob = as_user("bob");
    let bob = env_refs(&bob);
    let f = up.dir.path().join("f");
    std::fs::write(&f, b"admin's").unwrap();
    up.ok(&["mkdir", "--mode", "755", "nasd:/shared"]);
    up.ok(&["cp", s(&f), "nasd:/shared/open"]);
    up.ok(&["chmod", "666", "nasd:/shared/open"]);
    up.ok(&["cp", s(&f), "nasd:/shared/closed"]);
    up.ok(&["chmod", "644", "nasd:/shared/closed"]);
    let g = up.dir.path().join("g");
    std::fs::write(&g, b"bob's").unwrap();
    // Bob may write the file, not the directory: the overwrite goes through.
    let o = up.nasd(&["cp", s(&g), "nasd:/shared/open"], &bob);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(up.nasd(&["cat", "nasd:/shared/open"], &[]).stdout, b"bob's");
    // Without write permission on the file, no overwrite; without it on the directory, no
    // new name.
    let err = up.fails(&["cp", s(&g), "nasd:/shared/closed"], &bob);
    assert!(err.contains("permission denied"), "{err}");
    let err = up.fails(&["cp", s(&g), "nasd:/shared/new"], &bob);
    assert!(err.contains("permission denied"), "{err}");
    assert_eq!(
        up.nasd(&["cat", "nasd:/shared/closed"], &[]).stdout,
        b"admin's"
    );
}

#[test]
fn a_new_file_abandoned_by_a_crashed_client_stays_invisible_and_is_reclaimed() {
    use nasd_manager::scrub::{partition_contents, reclaim_orphans};
    use nasd_manager::service::{Caller, Manager, Policy};
    use nasd_proto::manager::{Created, Grant, StagedGrant};
    let drive = TestDrive::start_bare();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = nasd_manager::sqlite::SqliteStore::in_memory().unwrap();
        let m = Manager::new(Box::new(store), Policy::default()).unwrap();
        let key = std::fs::read_to_string(drive.dir.path().join("drive/keys/drive.key")).unwrap();
        m.add_drive(&drive.addr, &key, None).await.unwrap();
        let d = m.drives.ids()[0];
        let a = Caller {
            uid: 0,
            name: "admin".into(),
            admin: true,
            gid: 0,
            groups: vec![0],
            session: 0,
            via: None,
        };
        let staged = |r: Created| match r {
            Created::Staged(StagedGrant {
                grant: Grant { layout, .. },
                replaces,
                ..
            }) => {
                assert!(!replaces);
                layout.components[0].object
            }
            r => panic!("a new file was not staged: {r:?}"),
        };
        let obj = staged(m.create(&a, "/new", 0o644, false, 0).await.unwrap());
        let e = m.stat(&a, "/new").await.unwrap_err();
        assert_eq!(e.status, MgrStatus::NoSuchPath, "{e}");
        assert!(m
            .readdir(&a, "/", "", usize::MAX, None)
            .await
            .unwrap()
            .is_empty());
        assert!(partition_contents(&m, d).await.unwrap().contains(&obj));

        // A clean failure aborts: the object goes at once.
        let obj2 = staged(m.create(&a, "/new2", 0o644, false, 0).await.unwrap());
        m.abort(&a, "/new2", d, obj2).await.unwrap();
        assert!(!partition_contents(&m, d).await.unwrap().contains(&obj2));

        // The crashed client never commits or aborts: once past the (here short) grace
        // period, the scrub forgets the upload and removes its object; it can no longer commit.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let r = reclaim_orphans(&m, 5).await.unwrap();
        assert_eq!((r.expired_staged, r.removed), (1, 1), "{r:?}");
        assert!(!partition_contents(&m, d).await.unwrap().contains(&obj));
        let e = m
            .commit(
                &a,
                calls::Commit {
                    path: "/new".into(),
                    drive: d,
                    object: obj,
                    size: 0,
                    stale: 0,
                    xattrs: None,
                    e2e: None,
                    exclusive: false,
                },
            )
            .await
            .unwrap_err();
        assert_eq!(e.status, MgrStatus::NoSuchPath, "{e}");
        assert!(m
            .readdir(&a, "/", "", usize::MAX, None)
            .await
            .unwrap()
            .is_empty());
    });
}
