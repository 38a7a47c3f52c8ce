//! Crash injection on changes to an erasure-coded file (issue 13 §6, docs/storage.md "no write
//! hole"): a change cut off at a random point in the client, a manager killed mid-change, a
//! drive killed mid-change. After each, the file reads as exactly the old or the new version,
//! every parity group agrees with its data (`nasd scrub` finds every file whole, once stale
//! components are rebuilt), and nothing acknowledged is lost.

mod common;

use common::{rand_bytes, Up};
use nasd_client::files::Client;
use std::sync::Arc;
use std::time::Duration;

const SIZE: usize = 3 << 20;

async fn admin(up: &Up) -> Arc<Client> {
    Client::connect(up.session("admin", up.admin_password().trim()))
        .await
        .unwrap()
}

/// `nasd scrub --json [--repair] PATH`: the total line.
fn scrub(up: &Up, path: &str, repair: bool) -> serde_json::Value {
    let mut args = vec!["scrub", "--json", path];
    if repair {
        args.insert(1, "--repair");
    }
    let o = up.nasd(&args, &[]);
    let text = String::from_utf8(o.stdout).unwrap();
    let last = text.lines().last().unwrap_or_default().to_string();
    serde_json::from_str::<serde_json::Value>(&last).unwrap()["total"].clone()
}

fn whole(t: &serde_json::Value) -> bool {
    t["files_not_whole"] == 0 && t["damaged"] == 0 && t["unrecoverable"] == 0
}

/// The file is `old` or `new`; returns which one it is now.
async fn old_or_new(c: &Client, path: &str, old: &[u8], new: &[u8], what: &str) -> Vec<u8> {
    let got = c.read_at(path, 0, SIZE as u64 + 1).await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_cut_off_anywhere_leaves_the_old_or_the_new_version_whole() {
    let up = Up::start(6);
    up.ok(&["mkdir", "--layout", "rs:4+2/16K", "nasd:/ec"]);
    let c = admin(&up).await;
    let mut model = rand_bytes(SIZE, 1);
    c.put_bytes("/ec/f", &model, 0o644).await.unwrap();
    // Partial-group writes at odd offsets, each cut off after a random delay: the client
    // stops mid-change (no commit, no abort), as a killed client would.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut committed = 0;
    for i in 0..12u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = (x % (SIZE as u64 - 200_000)) as usize;
        let piece = rand_bytes(150_001, 100 + i);
        let new = with_write(&model, at, &piece);
        let task = {
            let (c, piece) = (c.clone(), piece.clone());
            tokio::spawn(async move { c.write_at("/ec/f", at as u64, &piece).await })
        };
        tokio::time::sleep(Duration::from_millis(x % 60)).await;
        task.abort();
        let _ = task.await;
        let now = old_or_new(&c, "/ec/f", &model, &new, &format!("cut {i}")).await;
        if now == new {
            committed += 1;
        }
        model = now;
    }
    // A change that runs to the end is acknowledged and stays.
    let piece = rand_bytes(77_777, 999);
    c.write_at("/ec/f", 1_000_003, &piece).await.unwrap();
    model = with_write(&model, 1_000_003, &piece);
    assert!(c.read_at("/ec/f", 0, SIZE as u64).await.unwrap() == model);
    let t = scrub(&up, "/ec/f", false);
    assert!(
        whole(&t),
        "after {committed} of 12 cut changes committed: {t}"
    );
}

/// The first write lease after a manager restart revokes first, so these kills land inside
/// revocations too: the new version is stored with an intent before the drives take it, and
/// a restarted manager completes the intent before it mints anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_killed_mid_change_leaves_the_old_or_the_new_version() {
    let mut up = Up::start(6);
    up.ok(&["mkdir", "--layout", "rs:4+2/16K", "nasd:/ec"]);
    let c = admin(&up).await;
    let mut model = rand_bytes(SIZE, 2);
    c.put_bytes("/ec/f", &model, 0o644).await.unwrap();

    for (i, delay) in [5u64, 25, 60].into_iter().enumerate() {
        let piece = rand_bytes(400_000, 200 + i as u64);
        let at = 100_000 * (i + 1);
        let new = with_write(&model, at, &piece);
        let task = {
            let (c, piece) = (c.clone(), piece.clone());
            tokio::spawn(async move { c.write_at("/ec/f", at as u64, &piece).await })
        };
        tokio::time::sleep(Duration::from_millis(delay)).await;
        up.kill("manager");
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A change whose bytes are on the drives waits out the restart and commits then.
        up.restart("manager");
        let acknowledged = task.await.unwrap().is_ok();
        let c2 = admin(&up).await;
        let now = old_or_new(&c2, "/ec/f", &model, &new, &format!("manager kill {i}")).await;
        if acknowledged {
            assert!(now == new, "an acknowledged change was lost");
        }
        model = now;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_killed_mid_change_leaves_the_old_or_the_new_version_and_heals() {
    let mut up = Up::start(6);
    up.ok(&["mkdir", "--layout", "rs:4+2/16K", "nasd:/ec"]);
    let c = admin(&up).await;
    let mut model = rand_bytes(SIZE, 3);
    c.put_bytes("/ec/f", &model, 0o644).await.unwrap();
    // A drive dies while a change is under way: the change commits with that component stale
    // (the code covers one lost drive) or fails; either way the file is whole.
    let piece = rand_bytes(600_000, 300);
    let new = with_write(&model, 500_000, &piece);
    let task = {
        let (c, piece) = (c.clone(), piece.clone());
        tokio::spawn(async move { c.write_at("/ec/f", 500_000, &piece).await })
    };
    tokio::time::sleep(Duration::from_millis(15)).await;
    up.kill("drive-2");
    let acknowledged = task.await.unwrap().is_ok();
    let now = old_or_new(&c, "/ec/f", &model, &new, "drive kill").await;
    if acknowledged {
        assert!(now == new, "an acknowledged change was lost");
    }
    model = now;
    up.restart("drive-2");
    // Rebuild whatever went stale, then lose two other drives: every byte still there.
    let t0 = std::time::Instant::now();
    loop {
        let t = scrub(&up, "/ec/f", true);
        if whole(&t) && t["unchecked"] == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "not healed: {t}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    up.kill("drive-0");
    up.kill("drive-5");
    let c = admin(&up).await;
    assert!(c.read_at("/ec/f", 0, SIZE as u64).await.unwrap() == model);
}
