//! Striped and erasure-coded files on a real cluster (issue 13): every layout round-trips,
//! reads survive the drives their code covers (killed before and during the read), bytes
//! flipped in a drive's `data.blk` or in a shard's stored Merkle leaf in its `meta.redb` are
//! read around, located by `nasd scrub` and repaired on data and parity shards alike, a
//! component that missed a change is never served and is rebuilt, a lost drive is replaced
//! (also when two more drives die during the rebuild, and when the spare fills up), a hung
//! drive is read around, the background scrub repairs, and layouts that cannot be met are
//! refused clearly.

mod common;

use common::{rand_bytes, Up, NASD};
use std::process::Command;
use std::time::{Duration, Instant};

fn drive_dir(up: &Up, d: usize) -> std::path::PathBuf {
    up.cluster.drive_dir(d).unwrap().to_path_buf()
}

/// Flips bits of one byte of a file in place (a drive's disk going bad under it).
fn flip(path: &std::path::Path, offset: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ mask], offset).unwrap();
    f.sync_all().unwrap();
}

/// Kills drive `d` with SIGKILL and waits until it is gone.
fn kill_drive(up: &mut Up, d: usize) {
    up.kill(&format!("drive-{d}"));
}

fn put(up: &Up, path: &str, data: &[u8]) {
    let f = up.dir.path().join("upload");
    std::fs::write(&f, data).unwrap();
    up.ok(&["cp", f.to_str().unwrap(), &format!("nasd:{path}")]);
}

fn get(up: &Up, path: &str) -> Vec<u8> {
    let o = up.nasd(&["cat", &format!("nasd:{path}")], &[]);
    assert!(
        o.status.success(),
        "cat {path}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// `nasd scrub --json [--repair] PATH`: the per-file reports and the total.
fn scrub(up: &Up, path: &str, repair: bool) -> (Vec<serde_json::Value>, serde_json::Value) {
    let mut args = vec!["scrub", "--json", path];
    if repair {
        args.insert(1, "--repair");
    }
    let o = up.nasd(&args, &[]);
    let text = String::from_utf8(o.stdout).unwrap();
    let mut files = vec![];
    let mut total = serde_json::Value::Null;
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        match v.get("total") {
            Some(t) => total = t.clone(),
            None => files.push(v),
        }
    }
    assert_eq!(
        o.status.success(),
        total["files_not_whole"] == 0,
        "the exit status says whether every file is whole: {text}"
    );
    (files, total)
}

fn status(up: &Up) -> serde_json::Value {
    serde_json::from_str(&up.ok(&["status", "--json"])).unwrap()
}

/// Waits until the manager sees `n` drives healthy.
fn wait_healthy(up: &Up, n: usize) {
    let t0 = Instant::now();
    loop {
        let s = status(up);
        let healthy = s["drives"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["healthy"] == true)
            .count();
        if healthy == n {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn every_layout_round_trips_and_reads_survive_the_drives_it_covers() {
    let mut up = Up::start(6);
    // Six drives: new files survive two lost drives unless a directory says otherwise.
    assert_eq!(
        up.ok(&["layout", "get", "nasd:/"])
            .trim()
            .split(",")
            .next()
            .unwrap(),
        "rs:4+2"
    );
    let layouts = ["raid0:4", "mirror:3", "rs:4+2", "raid6x:2", "rs:3+3/4K"];
    let sizes = [0usize, 1, 70_001, (3 << 20) + 17];
    let mut files = vec![];
    for (k, l) in layouts.iter().enumerate() {
        let dir = format!("/d{k}");
        up.ok(&["mkdir", "--layout", l, &format!("nasd:{dir}")]);
        assert_eq!(
            up.ok(&["layout", "get", &format!("nasd:{dir}")])
                .trim()
                .split(",")
                .next()
                .unwrap(),
            *l
        );
        for (j, n) in sizes.iter().enumerate() {
            let data = rand_bytes(*n, (k * 10 + j) as u64);
            let path = format!("{dir}/f{j}");
            put(&up, &path, &data);
            assert!(get(&up, &path) == data, "{path} ({l}, {n} bytes)");
            files.push((*l, path, data));
        }
    }
    // Every group's parity agrees with its data (uploads never write one group twice at once).
    let (_, total) = scrub(&up, "/", false);
    assert_eq!(
        (
            total["damaged"].as_u64(),
            total["unrecoverable"].as_u64(),
            total["files_not_whole"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{total}"
    );

    // A large file read while two drives die under it, then read again with them gone.
    let big = rand_bytes(24 << 20, 99);
    put(&up, "/d2/big", &big);
    let out = up.dir.path().join("big.out");
    let mut cat = Command::new(NASD)
        .args(["cat", "nasd:/d2/big"])
        .env("NASD_CONFIG", up.config())
        .stdout(std::fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(40));
    kill_drive(&mut up, 0);
    kill_drive(&mut up, 1);
    assert!(cat.wait().unwrap().success());
    assert!(std::fs::read(&out).unwrap() == big, "read during the kill");
    assert!(get(&up, "/d2/big") == big, "read with two drives gone");
    for (l, path, data) in &files {
        if *l == "raid0:4" {
            continue; // no redundancy: it may or may not have lived on the dead drives
        }
        assert!(get(&up, path) == *data, "{path} ({l}) with two drives gone");
    }
}

#[test]
fn flipped_bytes_on_data_and_parity_shards_are_read_around_and_repaired() {
    let up = Up::start(6);
    up.ok(&["mkdir", "--layout", "rs:4+2", "nasd:/ec"]);
    // One parity group (4 x 64 KiB): each drive holds one unit of it, written in one piece at
    // the start of its data file, so offset 1000 of every drive's data.blk lies in stripe
    // 0's four data units and two parity units, one per drive.
    let data = rand_bytes(200_000, 7);
    put(&up, "/ec/f", &data);
    // Damage beyond the code (three shards of a two-parity group) is reported, not guessed,
    // and the read fails rather than return wrong bytes.
    for d in 0..3 {
        flip(&drive_dir(&up, d).join("data.blk"), 1000, 0x10);
    }
    let (files, t) = scrub(&up, "/ec/f", true);
    assert!(t["unrecoverable"].as_u64().unwrap() >= 1, "{t}");
    assert_eq!(files[0]["path"], "/ec/f");
    let err = up.fails(&["cat", "nasd:/ec/f"], &[]);
    assert!(err.contains("/ec/f"), "{err}");
    for d in 0..3 {
        flip(&drive_dir(&up, d).join("data.blk"), 1000, 0x10);
    }
    let (_, t) = scrub(&up, "/ec/f", false);
    assert_eq!(t["files_not_whole"], 0, "{t}");
    let mut read_repaired = 0;
    for d in 0..6 {
        flip(&drive_dir(&up, d).join("data.blk"), 1000, 0x41);
        assert!(get(&up, "/ec/f") == data, "read with drive {d} damaged");
        // A data unit is rewritten by the read itself (read repair, asynchronous); a parity
        // unit is not read, so only the scrub finds it.
        let t0 = Instant::now();
        let mut found = 1;
        while t0.elapsed() < Duration::from_secs(3) {
            let (_, t) = scrub(&up, "/ec/f", false);
            found = t["damaged"].as_u64().unwrap();
            if found == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if found == 0 {
            read_repaired += 1;
            continue;
        }
        assert_eq!(found, 1, "drive {d}");
        let (f, t) = scrub(&up, "/ec/f", true);
        assert_eq!(
            (t["damaged"].as_u64(), t["repaired"].as_u64()),
            (Some(1), Some(1)),
            "drive {d}: {f:?}"
        );
        let (_, t) = scrub(&up, "/ec/f", false);
        assert_eq!(t["damaged"], 0, "after the repair: {t}");
        assert!(get(&up, "/ec/f") == data);
    }
    assert_eq!(
        read_repaired, 4,
        "the four data units are repaired by reads"
    );
}

#[test]
fn a_component_that_missed_a_change_is_never_served_and_is_rebuilt() {
    let mut up = Up::start(7);
    up.ok(&["mkdir", "--layout", "rs:4+2,plain", "nasd:/ec"]);
    let data = rand_bytes(3 << 20, 11);
    put(&up, "/ec/f", &data);
    // The file lies on six of the seven drives: lose one of them. (Drive `d` of the cluster
    // is the status entry with its address.)
    let addrs: Vec<String> = (0..7)
        .map(|d| up.cluster.drives()[d].addr.clone())
        .collect();
    let entry = |s: &serde_json::Value, d: usize| {
        let addr = &addrs[d];
        s["drives"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["addr"] == addr.as_str())
            .unwrap()
            .clone()
    };
    let s = status(&up);
    let on: Vec<bool> = (0..7).map(|d| entry(&s, d)["files"] == 1).collect();
    let victim = on.iter().position(|&x| x).unwrap();
    kill_drive(&mut up, victim);
    wait_healthy(&up, 6);
    // Growing the file is a copy-on-write change: it stages copies of its components; the
    // dead drive's cannot be copied, so the committed layout marks it stale. (Cutting it short
    // would write the prefix as a new version, on live drives only: a striped file's writer
    // pins its components, so only the writer changes it.)
    const GROWN: usize = 4_000_000;
    let mut want = data.clone();
    want.resize(GROWN, 0);
    up.ok(&["truncate", "nasd:/ec/f", &GROWN.to_string()]);
    let s = status(&up);
    assert_eq!(
        (s["degraded_files"].as_u64(), s["stale_components"].as_u64()),
        (Some(1), Some(1)),
        "{s}"
    );
    assert_eq!(entry(&s, victim)["stale"], 1, "{s}");
    let (_, t) = scrub(&up, "/ec/f", false);
    assert_eq!(t["unchecked"], 1, "{t}");
    // The stale component is rebuilt onto the drive the file did not use.
    let (_, t) = scrub(&up, "/ec/f", true);
    assert_eq!(
        (t["rebuilt"].as_u64(), t["unchecked"].as_u64()),
        (Some(1), Some(0)),
        "{t}"
    );
    let s = status(&up);
    assert_eq!(s["degraded_files"], 0, "{s}");
    assert_eq!(entry(&s, victim)["files"], 0, "{s}");
    // The dead drive returns with the old bytes of its component: never read again.
    up.restart(&format!("drive-{victim}"));
    wait_healthy(&up, 7);
    let got = get(&up, "/ec/f");
    let first_bad = got.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        got == want,
        "{} bytes, first wrong at {first_bad:?}",
        got.len()
    );
    // The rebuilt component carries its share: lose two others and read.
    let others: Vec<usize> = (0..7).filter(|&d| d != victim && on[d]).take(2).collect();
    for d in others {
        kill_drive(&mut up, d);
    }
    assert!(get(&up, "/ec/f") == want);
}

#[test]
fn a_lost_drive_is_replaced_and_its_shards_rebuilt() {
    let mut up = Up::start(7);
    up.ok(&["mkdir", "--layout", "rs:4+2", "nasd:/ec"]);
    let data = rand_bytes((5 << 20) + 5, 13);
    put(&up, "/ec/f", &data);
    let s = status(&up);
    let drives = s["drives"].as_array().unwrap();
    let spare = drives.iter().find(|d| d["files"] == 0).unwrap()["addr"]
        .as_str()
        .unwrap()
        .to_string();
    let (victim, victim_addr) = (0..7)
        .map(|d| (d, up.cluster.drives()[d].addr.clone()))
        .find(|(_, a)| *a != spare)
        .unwrap();
    kill_drive(&mut up, victim);
    wait_healthy(&up, 6);
    assert_eq!(status(&up)["degraded_files"], 1);
    let out = up.ok(&["drive", "replace", &victim_addr, &spare]);
    assert!(out.contains("replaced"), "{out}");
    let s = status(&up);
    assert_eq!(s["degraded_files"], 0, "{s}");
    assert_eq!(s["rebuild"]["finished"], true);
    assert_eq!(s["rebuild"]["failed"], 0);
    let on = |addr: &str| {
        s["drives"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["addr"] == addr)
            .unwrap()["files"]
            .clone()
    };
    assert_eq!((on(&victim_addr), on(&spare)), (0.into(), 1.into()));
    assert!(get(&up, "/ec/f") == data);
    let (_, t) = scrub(&up, "/ec/f", false);
    assert_eq!(
        (t["damaged"].as_u64(), t["unchecked"].as_u64()),
        (Some(0), Some(0)),
        "{t}"
    );
    // Replacing onto a drive the file already uses is refused per file, and reported.
    let busy = s["drives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["files"] == 1)
        .unwrap()["addr"]
        .as_str()
        .unwrap()
        .to_string();
    let err = up.fails(&["drive", "replace", &spare, &busy], &[]);
    assert!(err.contains("already holds"), "{err}");
}

/// The manager's background scrub finds and repairs a damaged shard by itself, at its rate,
/// and `nasd status` counts the pass.
#[test]
fn the_background_scrub_repairs_what_it_finds() {
    let mut up = Up::start(6);
    // One parity group at the start of every drive's data file (see the test above).
    let data = rand_bytes(200_000, 31);
    put(&up, "/f", &data);
    let cfg = up.data().join("manager/manager.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    v["policy"]["scrub_interval_ms"] = 500.into();
    v["policy"]["scrub_bytes_per_s"] = (64u64 << 20).into();
    up.kill("manager");
    std::fs::write(&cfg, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    up.restart("manager");
    // Two damaged units of the group: as many as its two parities repair.
    for d in 0..2 {
        flip(&drive_dir(&up, d).join("data.blk"), 1000 + d as u64, 0x22);
    }
    let t0 = Instant::now();
    loop {
        let s = status(&up);
        if s["scrub"]["repaired"].as_u64().unwrap() >= 2 {
            assert!(
                s["scrub"]["passes"].as_u64().unwrap() >= 1 || s["scrub"]["files"] == 1,
                "{s}"
            );
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "not repaired: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, t) = scrub(&up, "/f", false);
    assert_eq!(
        (t["damaged"].as_u64(), t["files_not_whole"].as_u64()),
        (Some(0), Some(0)),
        "{t}"
    );
    assert!(get(&up, "/f") == data);
}

/// A drive that stops answering (SIGSTOP: its connections stay open, nothing comes back) is
/// read around once the read deadline passes, and the read returns every byte.
#[test]
fn a_drive_that_hangs_is_read_around_after_the_deadline() {
    let up = Up::start(6);
    let data = rand_bytes((4 << 20) + 3, 21);
    put(&up, "/f", &data); // the cluster's default at six drives: rs:4+2
    let pid = up.pid("drive-1") as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let t0 = Instant::now();
    let got = up.nasd(&["cat", "nasd:/f"], &[]);
    let took = t0.elapsed();
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(got.stdout == data, "read around a hung drive");
    // It waited for the deadline at most a few times, not for the drive.
    assert!(took < Duration::from_secs(30), "{took:?}");

    // Without redundancy there is nothing to read around: a raid0 read waits out drives that
    // hang for longer than the deadline rather than fail.
    up.ok(&["mkdir", "--layout", "raid0:4", "nasd:/r"]);
    put(&up, "/r/f", &data);
    let pids: Vec<i32> = (0..6)
        .map(|d| up.pid(&format!("drive-{d}")) as i32)
        .collect();
    for &p in &pids {
        unsafe { libc::kill(p, libc::SIGSTOP) };
    }
    let out = up.dir.path().join("r.out");
    let mut cat = std::process::Command::new(NASD)
        .args(["cat", "nasd:/r/f"])
        .env("NASD_CONFIG", up.config())
        .stdout(std::fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(3_000));
    for &p in &pids {
        unsafe { libc::kill(p, libc::SIGCONT) };
    }
    assert!(
        cat.wait().unwrap().success(),
        "a raid0 read gave up on hung drives"
    );
    assert!(std::fs::read(&out).unwrap() == data);
}

#[test]
fn layouts_that_cannot_be_met_are_refused_clearly() {
    let up = Up::start(3);
    up.ok(&["mkdir", "nasd:/x"]);
    for (spec, says) in [
        ("rs:4+2", "drives"),
        ("rs:2+5", "5"),
        ("raid6x:43", "43"),
        ("rs:0+1", "0"),
        ("mirror:1", "1"),
        ("raid0:2/3K", "unit"),
        ("bogus", "bogus"),
    ] {
        let err = up.fails(&["layout", "set", "nasd:/x", spec], &[]);
        assert!(err.contains(says), "{spec}: {err}");
    }
    assert_eq!(
        up.ok(&["layout", "get", "nasd:/x"])
            .trim()
            .split(",")
            .next()
            .unwrap(),
        "single"
    );
    up.ok(&["layout", "set", "nasd:/x", "rs:2+1"]);
    let data = rand_bytes(100_000, 3);
    put(&up, "/x/f", &data);
    assert!(get(&up, "/x/f") == data);
}

/// A 7-drive cluster whose files (`rs:4+2`) all sit on drives 1-6: drive 0 was down while
/// they were written and is back, empty, as the spare.
fn cluster_with_an_empty_spare(files: usize) -> (Up, Vec<(String, Vec<u8>)>) {
    let mut up = Up::start(7);
    up.ok(&["mkdir", "--layout", "rs:4+2", "nasd:/ec"]);
    kill_drive(&mut up, 0);
    wait_healthy(&up, 6);
    let files: Vec<(String, Vec<u8>)> = (0..files)
        .map(|i| {
            let data = rand_bytes((1 << 20) + i * 4099, 40 + i as u64);
            (format!("/ec/f{i}"), data)
        })
        .collect();
    for (p, d) in &files {
        put(&up, p, d);
    }
    up.restart("drive-0");
    wait_healthy(&up, 7);
    (up, files)
}

fn addr(up: &Up, d: usize) -> String {
    up.cluster.drives()[d].addr.clone()
}

/// Replaces `old` by `new`, retrying while the manager still avoids a drive that came back
/// moments ago (its pool skips a drive for `DOWN_FOR_MS` after a failure).
fn replace_until_done(up: &Up, old: &str, new: &str) -> String {
    let t0 = Instant::now();
    loop {
        let o = up.nasd(&["drive", "replace", old, new], &[]);
        if o.status.success() {
            return String::from_utf8(o.stdout).unwrap();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "replace never finished: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Two more drives die while a lost drive's shards are rebuilt. Files whose groups then lack
/// more than the code covers fail, each named with the reason, and stay where they were;
/// files rebuilt before stay rebuilt. Once the two drives are back, a second replacement
/// finishes and every file reads back whole.
#[test]
fn two_drives_dying_mid_rebuild_fail_it_clearly_and_a_rerun_heals() {
    let (mut up, files) = cluster_with_an_empty_spare(24);
    let (spare, victim) = (addr(&up, 0), addr(&up, 1));
    kill_drive(&mut up, 1);
    wait_healthy(&up, 6);
    let child = Command::new(NASD)
        .args(["drive", "replace", &victim, &spare])
        .env("NASD_CONFIG", up.config())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kill two more drives once the rebuild is under way (or over, on a fast machine).
    let t0 = Instant::now();
    loop {
        let r = &status(&up)["rebuild"];
        if r["files_done"].as_u64().unwrap_or(0) >= 1 || r["finished"] == true {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "rebuild never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_drive(&mut up, 2);
    kill_drive(&mut up, 3);
    let out = child.wait_with_output().unwrap();
    let s = status(&up);
    let r = &s["rebuild"];
    assert_eq!(r["finished"], true, "{s}");
    assert_eq!(r["files_done"], r["files_total"], "{s}");
    let failed = r["failed"].as_u64().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        assert_eq!(failed, 0, "{s}");
    } else {
        assert!(failed >= 1, "{s}");
        assert!(
            err.contains("still have a component on") && err.contains("/ec/f"),
            "{err}"
        );
    }
    up.restart("drive-2");
    up.restart("drive-3");
    wait_healthy(&up, 6);
    let out = replace_until_done(&up, &victim, &spare);
    assert!(out.contains("replaced"), "{out}");
    let s = status(&up);
    assert_eq!(s["rebuild"]["failed"], 0, "{s}");
    assert_eq!(s["degraded_files"], 0, "{s}");
    for (p, d) in &files {
        assert!(get(&up, p) == *d, "{p} differs after the rebuild");
    }
}

/// Runs `cmd` with `args`; whether it succeeded.
fn sh(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The spare a lost drive is rebuilt onto fills up: the files that no longer fit fail, each
/// named with the drive's answer, and stay readable where they were; once the spare has room
/// again a second replacement finishes. The spare's directory is a small tmpfs, so the disk
/// under the drive really is full (`ENOSPC`); needs root to mount it, and is skipped without.
#[test]
fn a_full_drive_during_rebuild_fails_it_clearly_and_a_rerun_heals() {
    let (mut up, files) = cluster_with_an_empty_spare(8);
    let dir = drive_dir(&up, 0);
    let keep = up.dir.path().join("spare-contents");
    kill_drive(&mut up, 0);
    assert!(sh(
        "cp",
        &["-a", dir.to_str().unwrap(), keep.to_str().unwrap()]
    ));
    // Room for the drive's files as they are and about two of the eight files' shards.
    let du = Command::new("du")
        .args(["-s", "--block-size=1", keep.to_str().unwrap()])
        .output()
        .unwrap();
    let used: u64 = String::from_utf8_lossy(&du.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap();
    let size = format!("size={},mode=0700", used + (600 << 10));
    if !sh(
        "mount",
        &["-t", "tmpfs", "-o", &size, "tmpfs", dir.to_str().unwrap()],
    ) {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            sh("umount", &["-l", self.0.to_str().unwrap()]);
        }
    }
    let mounted = Unmount(dir.clone());
    let contents = format!("{}/.", keep.display());
    assert!(sh("cp", &["-a", &contents, dir.to_str().unwrap()]));
    up.restart("drive-0");
    wait_healthy(&up, 7);

    let (spare, victim) = (addr(&up, 0), addr(&up, 1));
    kill_drive(&mut up, 1);
    wait_healthy(&up, 6);
    let err = up.fails(&["drive", "replace", &victim, &spare], &[]);
    assert!(
        err.contains("still have a component on") && err.contains("drive full"),
        "{err}"
    );
    let s = status(&up);
    assert!(s["rebuild"]["failed"].as_u64().unwrap() >= 1, "{s}");
    for (p, d) in &files {
        assert!(
            get(&up, p) == *d,
            "{p} differs after a rebuild that ran out of room"
        );
    }

    // The spare gets a real disk again, with what it holds now.
    kill_drive(&mut up, 0);
    std::fs::remove_dir_all(&keep).unwrap();
    assert!(sh(
        "cp",
        &["-a", dir.to_str().unwrap(), keep.to_str().unwrap()]
    ));
    drop(mounted);
    assert!(sh("cp", &["-a", &contents, dir.to_str().unwrap()]));
    up.restart("drive-0");
    wait_healthy(&up, 6);
    let out = replace_until_done(&up, &victim, &spare);
    assert!(out.contains("replaced"), "{out}");
    let s = status(&up);
    assert_eq!(s["degraded_files"], 0, "{s}");
    for (p, d) in &files {
        assert!(get(&up, p) == *d, "{p} differs after the second rebuild");
    }
}

/// Bytes flipped in a drive's metadata rather than its data: the stored Merkle leaf of a data
/// shard's first chunk in the drive's `meta.redb`. The drive then proves the shard against a
/// wrong tree; the client refuses the proof, reads the shard around, and the read repair
/// rewrites it, after which the scrub finds every shard whole.
#[test]
fn a_flipped_leaf_in_a_drives_metadata_is_read_around_and_repaired() {
    use nasd_crypto::integrity::tree;
    let mut up = Up::start(6);
    up.ok(&["mkdir", "--layout", "rs:4+2", "nasd:/ec"]);
    let data = rand_bytes(200_000, 43);
    put(&up, "/ec/f", &data);
    // The one object on each drive starts its data file: its chunk 0 is the file's first KiB
    // of data.blk, and its leaf (chunk index 0) is stored in meta.redb.
    let mut damaged = 0;
    for d in 0..6 {
        let dir = drive_dir(&up, d);
        let blk = std::fs::read(dir.join("data.blk")).unwrap();
        let leaf = tree::leaf(
            nasd_proto::Suite::Blake3,
            0,
            &blk[..1024],
            &mut nasd_crypto::Cost::default(),
        );
        up.stop(&format!("drive-{d}"));
        let meta = dir.join("meta.redb");
        let bytes = std::fs::read(&meta).unwrap();
        let at = bytes
            .windows(32)
            .position(|w| w == leaf)
            .unwrap_or_else(|| panic!("drive {d}: chunk 0's leaf not found in meta.redb"));
        flip(&meta, at as u64 + 7, 0x80);
        up.restart(&format!("drive-{d}"));
        wait_healthy(&up, 6);
        let (_, t) = scrub(&up, "/ec/f", false);
        assert_eq!(
            t["damaged"], 1,
            "drive {d}: the scrub sees the flipped leaf: {t}"
        );
        assert!(
            get(&up, "/ec/f") == data,
            "read with drive {d}'s leaf flipped"
        );
        // A data unit is rewritten by the read (read repair); a parity unit is not read, so
        // the scrub repairs it.
        let t0 = Instant::now();
        loop {
            let (_, t) = scrub(&up, "/ec/f", false);
            if t["damaged"] == 0 {
                break;
            }
            if t0.elapsed() > Duration::from_secs(3) {
                let (f, t) = scrub(&up, "/ec/f", true);
                assert_eq!(t["repaired"], 1, "drive {d}: {f:?}");
                damaged += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let (_, t) = scrub(&up, "/ec/f", false);
        assert_eq!(t["damaged"], 0, "drive {d}, after the repair: {t}");
        assert!(get(&up, "/ec/f") == data);
    }
    assert_eq!(damaged, 2, "the two parity units are repaired by the scrub");
}
