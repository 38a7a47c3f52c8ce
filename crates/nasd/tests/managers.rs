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

/// The answer of `GET /health` at `addr`, head and body.
fn health(addr: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
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
        // The killed manager, started again, stands by: the leader keeps serving, and each
        // one's health check says which serves.
        up.cluster.restart(leader).unwrap();
        assert_eq!(up.cluster.leading_manager(), Some(now));
        let health = |id| health(up.cluster.metrics_addr(id).expect("metrics"));
        assert!(health(now).starts_with("HTTP/1.1 200"), "{}", health(now));
        let standby = health(leader);
        assert!(
            standby.starts_with("HTTP/1.1 503") && standby.contains("standing by"),
            "{standby}"
        );
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

#[test]
fn a_mount_writing_through_a_kill_of_the_leading_manager_fails_no_write_and_loses_none() {
    if !common::mount::can_mount() {
        return;
    }
    let mut up = Up::start_with(Options {
        meta: Meta::PrivatePostgres,
        managers: 2,
        ..Options::drives(2)
    });
    let mnt = up.dir.path().join("mnt");
    let _m = common::mount::Mounted::start(&up, "nasd:/", &mnt, &[]);
    let dir = mnt.join("w");
    std::fs::create_dir(&dir).unwrap();
    // A writer makes small files one after another, each written, synced and closed; every
    // call must succeed across the take-over.
    let (stop, done) = (
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    );
    let writer = {
        let (dir, stop, done) = (dir.clone(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            use std::io::Write as _;
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let p = dir.join(format!("f{i}"));
                let mut f =
                    std::fs::File::create(&p).unwrap_or_else(|e| panic!("create f{i}: {e}"));
                f.write_all(&common::rand_bytes(8192 + i, i as u64))
                    .unwrap_or_else(|e| panic!("write f{i}: {e}"));
                f.sync_all().unwrap_or_else(|e| panic!("fsync f{i}: {e}"));
                drop(f);
                i += 1;
                done.store(i, std::sync::atomic::Ordering::Relaxed);
            }
            i
        })
    };
    let wait_for = |n: usize| {
        let t0 = Instant::now();
        while done.load(std::sync::atomic::Ordering::Relaxed) < n {
            assert!(!writer.is_finished(), "the writer failed");
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "the writer stalled"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(20);
    let leader = up.cluster.leading_manager().expect("a manager leads");
    up.cluster.kill(leader).unwrap();
    let at_kill = done.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("killed {leader} after {at_kill} files");
    wait_for(at_kill + 20);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().expect("no write failed");
    assert_ne!(up.cluster.leading_manager(), Some(leader));
    // Every file written is whole, through the mount and through a fresh client.
    for i in 0..written {
        let want = common::rand_bytes(8192 + i, i as u64);
        assert_eq!(
            std::fs::read(dir.join(format!("f{i}"))).unwrap(),
            want,
            "f{i}"
        );
    }
    let back = up.dir.path().join("back");
    up.ok(&["cp", "-r", "nasd:/w", back.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_dir(&back).unwrap().count(),
        written,
        "every file written has its name"
    );
}
