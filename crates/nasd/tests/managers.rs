//! Several managers over one PostgreSQL database (`nasd up --managers 2 --meta postgres`):
//! one leads and serves, the other stands by; `kill -9` of the leader in the middle of a
//! `nasd cp -r` costs that command nothing (its client moves to the manager that takes
//! over) and loses nothing it copied, and the killed manager, started again, stands by.
//! Without PostgreSQL's binaries this test fails, saying so: it never skips.

mod common;

use common::{tree_sums, Up, NASD};
use nasd_cluster::postgres::Meta;
use nasd_cluster::{NodeId, Options};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A tree of `files` files of 1 to 64 KiB in `dir`, a few directories deep.
fn make_tree(dir: &Path, files: u64, seed: u64) {
    for i in 0..files {
        let p = dir.join(format!("d{}/e{}/f{i}", i % 4, i % 3));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let n = 1024 + (seed.wrapping_add(i * 7919) % (63 * 1024)) as usize;
        std::fs::write(&p, common::rand_bytes(n, seed ^ i)).unwrap();
    }
}

/// How many files of [`make_tree`]'s are under `path` (none while it does not exist).
fn entries_under(up: &Up, path: &str) -> usize {
    let mut n = 0;
    for d in 0..4 {
        for e in 0..3 {
            let o = up.nasd(&["ls", &format!("{path}/d{d}/e{e}")], &[]);
            n += String::from_utf8_lossy(&o.stdout).lines().count();
        }
    }
    n
}

#[test]
fn killing_the_leading_manager_mid_copy_fails_no_command_and_loses_nothing() {
    let mut up = Up::start_with(Options {
        meta: Meta::PrivatePostgres,
        managers: 2,
        ..Options::drives(2)
    });
    let seed = nasd_crypto::random_u64();
    eprintln!("seed {seed}");
    for round in 0..2 {
        let leader = up.cluster.leading_manager().expect("a manager leads");
        let src = up.dir.path().join(format!("src{round}"));
        make_tree(&src, 240, seed ^ round);
        let dest = format!("nasd:/t{round}");
        let mut cp = Command::new(NASD)
            .args(["cp", "-r", src.to_str().unwrap(), &dest])
            .env("NASD_CONFIG", up.config())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Kill the leader once the copy is under way.
        let t0 = Instant::now();
        while entries_under(&up, &dest) < 20 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the copy never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let copied = entries_under(&up, &dest);
        assert!(
            cp.try_wait().unwrap().is_none(),
            "the copy ended before the kill: make the tree larger"
        );
        up.cluster.kill(leader).unwrap();
        eprintln!("round {round}: killed {leader} after {copied} of 240 files");
        let out = cp.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "round {round}: the copy failed when {leader} was killed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let now = up
            .cluster
            .leading_manager()
            .expect("the other manager took over");
        assert_ne!(now, leader);
        // Everything copied is there, byte for byte.
        let back = up.dir.path().join(format!("back{round}"));
        up.ok(&["cp", "-r", &dest, back.to_str().unwrap()]);
        assert_eq!(tree_sums(&src), tree_sums(&back), "round {round}");
        // The killed manager, started again, stands by: the leader keeps serving.
        up.cluster.restart(leader).unwrap();
        assert_eq!(up.cluster.leading_manager(), Some(now));
    }
    // Both rounds' trees are there whichever manager serves.
    for round in 0..2 {
        assert!(entries_under(&up, &format!("nasd:/t{round}")) >= 240);
    }
    assert!(up
        .cluster
        .info()
        .manager_ids()
        .any(|id| id == NodeId::ManagerN(1)));
}
