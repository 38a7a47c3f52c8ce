//! Where new files go (issue 23 §4), on real clusters: on two drives, one-object files spread
//! over both, and a copy larger than one drive fills both instead of stopping when the first
//! is full.
//!
//! Before: `create_layout` advanced the manager's round robin twice per file, so on two
//! drives every file went to drive 0, and a copy failed with "disk full" while drive 1 held
//! nothing.

mod common;

use common::{rand_bytes, Up};
use nasd_cluster::Options;

fn status(up: &Up) -> serde_json::Value {
    serde_json::from_str(&up.ok(&["status", "--json"])).unwrap()
}

/// Files on each drive, in drive order.
fn files_per_drive(up: &Up) -> Vec<u64> {
    status(up)["drives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["files"].as_u64().unwrap())
        .collect()
}

#[test]
fn one_object_files_spread_over_both_drives_of_two() {
    let up = Up::start(2);
    assert!(up.ok(&["layout", "get", "nasd:/"]).starts_with("single,"));
    // Files of one `nasd cp` each (a create per file), then a tree (small files the client
    // prepares ahead in batches).
    let src = up.dir.path().join("one");
    for i in 0..10u64 {
        std::fs::write(&src, rand_bytes(3000 + i as usize, i)).unwrap();
        up.ok(&["cp", src.to_str().unwrap(), &format!("nasd:/f{i}")]);
    }
    // Placement by room is a smooth weighted round robin: between equal drives the
    // difference stays within a file or two.
    let per = files_per_drive(&up);
    assert!(per.iter().all(|&n| (4..=6).contains(&n)), "{per:?}");
    let tree = up.dir.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    for i in 0..40u64 {
        std::fs::write(tree.join(format!("t{i}")), rand_bytes(1000, 100 + i)).unwrap();
    }
    up.ok(&["cp", "-r", tree.to_str().unwrap(), "nasd:/tree"]);
    let per = files_per_drive(&up);
    assert_eq!(per.iter().sum::<u64>(), 50);
    // Prepared batches are made in parallel and some of a batch may go unused: an even
    // spread within a batch's slack.
    assert!(per.iter().all(|&n| n >= 20), "{per:?}");
}

#[test]
fn a_copy_that_fills_one_drive_continues_on_the_other() {
    const CAPACITY: u64 = 48 << 20;
    let mut o = Options::drives(2);
    o.drive_capacity_bytes = Some(CAPACITY);
    let up = Up::start_with(o);
    // 80 MiB of 2 MiB files: more than one drive holds, less than two.
    let src = up.dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let files: Vec<Vec<u8>> = (0..40u64).map(|i| rand_bytes(2 << 20, i)).collect();
    for (i, d) in files.iter().enumerate() {
        std::fs::write(src.join(format!("f{i:02}")), d).unwrap();
    }
    up.ok(&["cp", "-r", src.to_str().unwrap(), "nasd:/src"]);
    for (i, d) in files.iter().enumerate() {
        let got = up.nasd(&["cat", &format!("nasd:/src/f{i:02}")], &[]);
        assert!(got.status.success() && got.stdout == *d, "f{i:02}");
    }
    // Both drives hold about half; neither took more than it has room for.
    let per = files_per_drive(&up);
    assert!(per.iter().all(|&n| (15..=25).contains(&n)), "{per:?}");
    // The drives' own reports (a health check every 2 s) show the space used on both.
    let t0 = std::time::Instant::now();
    loop {
        let s = status(&up);
        let used: Vec<u64> = s["drives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["used_bytes"].as_u64().unwrap())
            .collect();
        if used.iter().all(|&u| u >= 30 << 20) {
            assert!(
                s["drives"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|d| d["capacity_bytes"] == CAPACITY),
                "{s}"
            );
            break;
        }
        assert!(t0.elapsed().as_secs() < 30, "{s}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
