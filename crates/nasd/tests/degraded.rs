//! Writes never stop while reads work (issue 23 §4), against real drive processes killed with
//! SIGKILL. On `rs:2+2` over four drives, with one and then two drives dead, plaintext and
//! encrypted files are created (`nasd cp`, small files through prepared uploads, handles),
//! overwritten, changed in place (copy-on-write) and through handles, and read back while
//! degraded; a third dead drive refuses every write clearly and changes nothing; once the
//! drives return, the manager rebuilds every stale and absent component by itself, `nasd
//! scrub` finds every file whole, and every byte reads back from the rebuilt shards alone
//! (with the two drives that never died killed). A degraded change cut off anywhere, and a
//! manager killed under one, leave the old or the new version. The counts `nasd status`
//! keeps equal a walk of every file after each of these steps.
//!
//! Before this work a new file needed all K+M drives of its layout: with one of four drives
//! down every create and every overwrite failed (`the layout needs 4 healthy drives`).

mod common;

use common::{rand_bytes, Up};
use nasd_client::files::Client;
use nasd_client::handle::{FileHandle, OpenOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The layouts under test: a plaintext and an encrypted directory of `rs:2+2`.
const DIRS: [(&str, &str); 2] = [("/p", "rs:2+2,plain"), ("/e", "rs:2+2")];

fn status(up: &Up) -> serde_json::Value {
    serde_json::from_str(&up.ok(&["status", "--json"])).unwrap()
}

/// Waits until the manager sees exactly `n` drives healthy.
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
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `nasd status --recount --json`: the kept counts must equal a walk of every file.
fn counts_agree(up: &Up, when: &str) -> serde_json::Value {
    let s: serde_json::Value =
        serde_json::from_str(&up.ok(&["status", "--json", "--recount"])).unwrap();
    assert_eq!(s["recount"]["agreed"], true, "{when}: {s}");
    assert_eq!(s["recount"]["files"], s["files"], "{when}: {s}");
    s
}

/// `nasd scrub --json PATH`: the total line.
fn scrub_total(up: &Up, path: &str) -> serde_json::Value {
    let o = up.nasd(&["scrub", "--json", path], &[]);
    let text = String::from_utf8(o.stdout).unwrap();
    let last = text.lines().last().unwrap_or_default().to_string();
    serde_json::from_str::<serde_json::Value>(&last).unwrap()["total"].clone()
}

/// The names in directory `dir`, sorted.
fn names(up: &Up, dir: &str) -> Vec<String> {
    let mut v: Vec<String> = up
        .ok(&["ls", "--json", &format!("nasd:{dir}")])
        .lines()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            e["name"].as_str().unwrap().to_string()
        })
        .collect();
    v.sort();
    v
}

fn opts(create: bool, truncate: bool) -> OpenOptions {
    OpenOptions {
        write: true,
        create,
        truncate,
        mode: 0o644,
    }
}

/// What every file should hold.
type Model = BTreeMap<String, Vec<u8>>;

/// Every kind of write a client makes, in directory `dir`, round `r` (files named by it):
/// a new file by `nasd cp`, three small new files (the client prepares files ahead after
/// two creates), a new file and an existing one through handles, an overwrite by `nasd cp`,
/// and a copy-on-write change in place.
async fn write_everything(up: &Up, c: &Arc<Client>, dir: &str, r: u64, m: &mut Model) {
    let seed = r * 100 + dir.len() as u64 + dir.as_bytes()[1] as u64;
    let cp = format!("{dir}/cp{r}");
    let data = rand_bytes(300_001, seed);
    let local = up.dir.path().join(format!("cp{r}"));
    std::fs::write(&local, &data).unwrap();
    up.ok(&["cp", local.to_str().unwrap(), &format!("nasd:{cp}")]);
    m.insert(cp, data);
    for k in 0..3 {
        let p = format!("{dir}/small{r}-{k}");
        let data = rand_bytes(5_000 + k * 777, seed + 1 + k as u64);
        c.put_bytes(&p, &data, 0o644).await.unwrap();
        m.insert(p, data);
    }
    let p = format!("{dir}/handle{r}");
    let data = rand_bytes(200_000, seed + 5);
    let h = FileHandle::open(c, &p, opts(true, true)).await.unwrap();
    h.write_at(0, &data[..150_000]).await.unwrap();
    h.write_at(150_000, &data[150_000..]).await.unwrap();
    h.close().await.unwrap();
    m.insert(p, data);
    // The file every round changes: overwritten whole, then changed in place twice.
    let a = format!("{dir}/a");
    let data = rand_bytes(400_000 + r as usize * 10_000, seed + 6);
    let local = up.dir.path().join("a");
    std::fs::write(&local, &data).unwrap();
    up.ok(&["cp", local.to_str().unwrap(), &format!("nasd:{a}")]);
    m.insert(a.clone(), data);
    let piece = rand_bytes(70_000, seed + 7);
    let at = 123_457 + r * 1000;
    c.write_at(&a, at, &piece).await.unwrap();
    m.get_mut(&a).unwrap()[at as usize..at as usize + piece.len()].copy_from_slice(&piece);
    let piece = rand_bytes(9_999, seed + 8);
    let h = FileHandle::open(c, &a, opts(false, false)).await.unwrap();
    h.write_at(50_000, &piece).await.unwrap();
    h.close().await.unwrap();
    m.get_mut(&a).unwrap()[50_000..50_000 + piece.len()].copy_from_slice(&piece);
}

/// Reads every file of `m` back (a fresh client: nothing cached) and compares.
async fn read_back(up: &Up, m: &Model, when: &str) {
    let c = admin(up).await;
    for (p, want) in m {
        let got = c
            .read_at(p, 0, want.len() as u64 + 1)
            .await
            .unwrap_or_else(|e| panic!("{when}: {p}: {e}"));
        assert!(
            got == *want,
            "{when}: {p}: {} bytes, first difference at {:?}",
            got.len(),
            got.iter().zip(want).position(|(a, b)| a != b)
        );
    }
}

async fn admin(up: &Up) -> Arc<Client> {
    Client::connect(up.session("admin", up.admin_password().trim()))
        .await
        .unwrap()
}

/// Waits until the manager has rebuilt every stale component by itself (no scrub asked).
fn wait_rebuilt(up: &Up) {
    let t0 = Instant::now();
    loop {
        let s = status(up);
        if s["stale_components"] == 0 && s["degraded_files"] == 0 {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "not rebuilt by the manager: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_with_up_to_m_drives_down_and_the_returning_drives_are_rebuilt() {
    let mut up = Up::start(4);
    for (dir, layout) in DIRS {
        up.ok(&["mkdir", "--layout", layout, &format!("nasd:{dir}")]);
    }
    let c = admin(&up).await;
    let mut m = Model::new();
    for (dir, _) in DIRS {
        write_everything(&up, &c, dir, 0, &mut m).await;
    }
    let healthy = counts_agree(&up, "healthy");
    assert_eq!(healthy["files"], m.len());
    assert_eq!(healthy["stale_files"], 0);

    // One drive dead, then two: every write goes on, and reads see it.
    for (round, victim) in [(1u64, 3usize), (2, 2)] {
        up.kill(&format!("drive-{victim}"));
        wait_healthy(&up, 4 - round as usize);
        for (dir, _) in DIRS {
            write_everything(&up, &c, dir, round, &mut m).await;
        }
        read_back(&up, &m, &format!("{round} drive(s) down")).await;
        let s = counts_agree(&up, &format!("{round} drive(s) down"));
        assert_eq!(s["files"], m.len(), "{s}");
        // Every file lies on all four drives: all are degraded, and what was written now
        // missed the dead drives.
        assert_eq!(s["degraded_files"], m.len(), "{s}");
        assert!(s["stale_files"].as_u64().unwrap() > 0, "{s}");
    }

    // A third drive dead: more than rs:2+2 covers. Every write is refused, saying why.
    let before = status(&up);
    up.kill("drive-1");
    wait_healthy(&up, 1);
    for (dir, _) in DIRS {
        let local = up.dir.path().join("a");
        let err = up.fails(
            &["cp", local.to_str().unwrap(), &format!("nasd:{dir}/x")],
            &[],
        );
        assert!(
            err.contains("needs 2 of its 4 drives") && err.contains("is down"),
            "{err}"
        );
        let err = up.fails(
            &["cp", local.to_str().unwrap(), &format!("nasd:{dir}/a")],
            &[],
        );
        assert!(err.contains("needs 2 of its 4 drives"), "{err}");
        let err = c
            .write_at(&format!("{dir}/a"), 0, b"never")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot be copied now; it covers 2"), "{err}");
        let h = FileHandle::open(&c, &format!("{dir}/h3"), opts(true, true)).await;
        let refused = match h {
            Err(e) => e.to_string(),
            Ok(h) => {
                h.write_at(0, b"never").await.unwrap();
                h.close().await.unwrap_err().to_string()
            }
        };
        assert!(refused.contains("needs 2 of its 4 drives"), "{refused}");
    }
    // Nothing changed: with one drive back every file reads as before and no name appeared.
    up.restart("drive-1");
    wait_healthy(&up, 2);
    read_back(&up, &m, "after the refused writes").await;
    let s = counts_agree(&up, "after the refused writes");
    for k in ["files", "stale_files", "stale_components", "bytes"] {
        assert_eq!(s[k], before[k], "{k}: {s}");
    }
    for (dir, _) in DIRS {
        let want: Vec<String> = m
            .keys()
            .filter_map(|p| p.strip_prefix(&format!("{dir}/")).map(String::from))
            .collect();
        assert_eq!(names(&up, dir), want);
    }

    // The dead drives return: the manager rebuilds every stale and absent component.
    up.restart("drive-2");
    up.restart("drive-3");
    wait_healthy(&up, 4);
    wait_rebuilt(&up);
    let s = counts_agree(&up, "rebuilt");
    assert_eq!(
        (s["stale_files"].as_u64(), s["stale_bytes"].as_u64()),
        (Some(0), Some(0))
    );
    let t = scrub_total(&up, "/");
    assert_eq!(
        (
            t["files"].as_u64(),
            t["damaged"].as_u64(),
            t["unchecked"].as_u64(),
            t["files_not_whole"].as_u64()
        ),
        (Some(m.len() as u64), Some(0), Some(0), Some(0)),
        "{t}"
    );
    read_back(&up, &m, "rebuilt").await;
    // The rebuilt shards carry their share: lose the two drives that never died.
    up.kill("drive-0");
    up.kill("drive-1");
    read_back(&up, &m, "from the rebuilt drives alone").await;
}

/// The file is `old` or `new`; returns which it is now.
async fn old_or_new(c: &Client, path: &str, old: &[u8], new: &[u8], what: &str) -> Vec<u8> {
    let got = c
        .read_at(path, 0, old.len().max(new.len()) as u64 + 1)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        got == old || got == new,
        "{what}: neither the old nor the new version (first difference from old at {:?})",
        got.iter().zip(old).position(|(a, b)| a != b)
    );
    got
}

fn with_write(old: &[u8], at: usize, piece: &[u8]) -> Vec<u8> {
    let mut v = old.to_vec();
    v[at..at + piece.len()].copy_from_slice(piece);
    v
}

/// No write hole while degraded: with a drive dead, changes and overwrites of a plaintext
/// and an encrypted file are cut off at random points (the client stops, as a killed one
/// would) and the manager is killed under others; each time the file is exactly the old or
/// the new version. Once the drive returns and its components are rebuilt, every group
/// agrees with its data and the last version reads from any two drives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_write_cut_off_anywhere_leaves_the_old_or_the_new_version() {
    let mut up = Up::start(4);
    let size = 1 << 20;
    let mut files = vec![];
    for (dir, layout) in DIRS {
        let layout = layout.replacen("rs:2+2", "rs:2+2/16K", 1);
        up.ok(&["mkdir", "--layout", &layout, &format!("nasd:{dir}")]);
        files.push(format!("{dir}/f"));
    }
    let c = admin(&up).await;
    let mut models = vec![];
    for (k, f) in files.iter().enumerate() {
        let data = rand_bytes(size, 50 + k as u64);
        c.put_bytes(f, &data, 0o644).await.unwrap();
        models.push(data);
    }
    up.kill("drive-1");
    wait_healthy(&up, 3);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut committed = 0;
    for i in 0..10u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = (i % 2) as usize;
        let (f, old) = (&files[k], models[k].clone());
        // Even rounds change in place, odd ones overwrite the whole file.
        let (new, task) = if i % 4 < 2 {
            let at = (x % (size as u64 - 200_000)) as usize;
            let piece = rand_bytes(150_001, 100 + i);
            let (c, f, p) = (c.clone(), f.clone(), piece.clone());
            let t = tokio::spawn(async move { c.write_at(&f, at as u64, &p).await });
            (with_write(&old, at, &piece), t)
        } else {
            let new = rand_bytes(size, 200 + i);
            let (c, f, n) = (c.clone(), f.clone(), new.clone());
            let t = tokio::spawn(async move { c.put_bytes(&f, &n, 0o644).await.map(drop) });
            (new, t)
        };
        tokio::time::sleep(Duration::from_millis(x % 80)).await;
        task.abort();
        let _ = task.await;
        let now = old_or_new(&c, f, &old, &new, &format!("cut {i} of {f}")).await;
        committed += (now == new) as u32;
        models[k] = now;
    }
    // The manager killed under a degraded change: a change whose bytes are on the drives
    // waits out the restart and commits then.
    for (k, f) in files.iter().enumerate() {
        let old = models[k].clone();
        let piece = rand_bytes(300_000, 300 + k as u64);
        let new = with_write(&old, 400_000, &piece);
        let task = {
            let (c, f, p) = (c.clone(), f.clone(), piece.clone());
            tokio::spawn(async move { c.write_at(&f, 400_000, &p).await })
        };
        tokio::time::sleep(Duration::from_millis(20 + 20 * k as u64)).await;
        up.kill("manager");
        up.restart("manager");
        let acknowledged = task.await.unwrap().is_ok();
        let c2 = admin(&up).await;
        let now = old_or_new(&c2, f, &old, &new, &format!("manager kill under {f}")).await;
        if acknowledged {
            assert!(now == new, "{f}: an acknowledged change was lost");
        }
        models[k] = now;
    }
    // One change that runs to the end: acknowledged, and stays.
    let piece = rand_bytes(77_777, 999);
    c.write_at(&files[1], 1_003, &piece).await.unwrap();
    models[1] = with_write(&models[1], 1_003, &piece);
    let s = counts_agree(&up, "after the cuts");
    assert!(
        s["stale_files"].as_u64().unwrap() >= 1,
        "{committed} cut changes committed: {s}"
    );
    up.restart("drive-1");
    wait_healthy(&up, 4);
    wait_rebuilt(&up);
    let t = scrub_total(&up, "/");
    assert_eq!(
        (
            t["damaged"].as_u64(),
            t["unchecked"].as_u64(),
            t["files_not_whole"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{t}"
    );
    counts_agree(&up, "rebuilt");
    up.kill("drive-0");
    up.kill("drive-3");
    let c = admin(&up).await;
    for (k, f) in files.iter().enumerate() {
        let got = c.read_at(f, 0, size as u64 + 1).await.unwrap();
        assert!(
            got == models[k],
            "{f} after the rebuild, from drives 1 and 2"
        );
    }
}

/// The counts `nasd status` keeps follow every kind of change across layouts — creates,
/// overwrites, changes in place, truncations, renames over files, removals, writes with a
/// drive dead and the rebuilds after — and equal a walk of every file after each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_equal_a_walk_after_every_kind_of_change() {
    let mut up = Up::start(5);
    let layouts = [
        "single,plain",
        "single",
        "mirror:2,plain",
        "rs:2+1",
        "rs:3+2,plain",
    ];
    for (k, l) in layouts.iter().enumerate() {
        up.ok(&["mkdir", "--layout", l, &format!("nasd:/d{k}")]);
    }
    let c = admin(&up).await;
    let mut n = 0;
    for k in 0..layouts.len() {
        for i in 0..4 {
            let data = rand_bytes(10_000 * (i + 1) + k, (k * 10 + i) as u64);
            c.put_bytes(&format!("/d{k}/f{i}"), &data, 0o644)
                .await
                .unwrap();
            n += 1;
        }
    }
    let s = counts_agree(&up, "created");
    assert_eq!(s["files"], n);
    for k in 0..layouts.len() {
        let d = format!("/d{k}");
        c.put_bytes(&format!("{d}/f0"), &rand_bytes(77_777, 1), 0o644)
            .await
            .unwrap();
        c.write_at(&format!("{d}/f1"), 5_000, &rand_bytes(50_000, 2))
            .await
            .unwrap();
        c.truncate(&format!("{d}/f2"), 3_000).await.unwrap();
        up.ok(&["mv", &format!("nasd:{d}/f3"), &format!("nasd:{d}/f0")]);
        n -= 1;
    }
    let s = counts_agree(&up, "overwritten, changed, cut, renamed over");
    assert_eq!(s["files"], n);
    up.ok(&["rm", "nasd:/d0/f1", "nasd:/d4/f1"]);
    n -= 2;
    assert_eq!(counts_agree(&up, "removed")["files"], n);

    up.kill("drive-4");
    wait_healthy(&up, 4);
    for k in 2..layouts.len() {
        let d = format!("/d{k}");
        c.write_at(&format!("{d}/f0"), 100, &rand_bytes(20_000, 3))
            .await
            .unwrap();
        c.put_bytes(&format!("{d}/new"), &rand_bytes(30_000, 4), 0o644)
            .await
            .unwrap();
        n += 1;
    }
    let s = counts_agree(&up, "degraded writes");
    assert_eq!(s["files"], n);
    up.restart("drive-4");
    wait_healthy(&up, 5);
    wait_rebuilt(&up);
    let s = counts_agree(&up, "rebuilt");
    assert_eq!(
        (s["files"].as_u64(), s["stale_components"].as_u64()),
        (Some(n as u64), Some(0))
    );
    let drives: u64 = s["drives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["files"].as_u64().unwrap())
        .sum();
    // One-object files on one drive each, mirror:2 on two, rs:2+1 on three, rs:3+2 on five.
    let per_layout = [1u64, 1, 2, 3, 5];
    let files_in = |k: usize| names(&up, &format!("/d{k}")).len() as u64;
    let want: u64 = (0..layouts.len())
        .map(|k| per_layout[k] * files_in(k))
        .sum();
    assert_eq!(drives, want, "{s}");
}
