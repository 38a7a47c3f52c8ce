//! `nasd up --meta postgres`: the manager's metadata in a private PostgreSQL server under
//! `DATA/postgres`, started from the system's binaries. Files copied in come back out after
//! the manager is killed and started again, and after the whole cluster (PostgreSQL with it)
//! is stopped and started; `nasd down` stops PostgreSQL. Without PostgreSQL's binaries this
//! test fails, saying so: it never skips.

mod common;

use common::NASD;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `nasd ARGS` as a user would (HOME only, nothing nasd-specific in the environment).
fn nasd(home: &Path, args: &[&str]) -> (bool, String, String) {
    common::nasd_at_home(home, args)
}

/// Stops the cluster however the test ends (a no-op once it is down).
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new(NASD)
            .arg("down")
            .arg("--data")
            .arg(&self.0)
            .output();
    }
}

/// The pid of the PostgreSQL server running in `pgdata` (its `postmaster.pid`), if any.
fn postmaster(pgdata: &Path) -> Option<u32> {
    let t = std::fs::read_to_string(pgdata.join("postmaster.pid")).ok()?;
    let pid: u32 = t.lines().next()?.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// The manager's pid, from the cluster's `pids.json`.
fn manager_pid(data: &Path) -> u32 {
    let pids: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("pids.json")).unwrap()).unwrap();
    pids["pids"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p[0] == "manager")
        .and_then(|p| p[1].as_u64())
        .expect("the manager in pids.json") as u32
}

/// Copies every `nasd:/NAME` back out and checks it against what went in.
fn files_read_back(home: &Path, out_dir: &Path, files: &[(&str, Vec<u8>)]) {
    for (name, bytes) in files {
        let out = out_dir.join(name);
        let _ = std::fs::remove_file(&out);
        let (ok, _, err) = nasd(
            home,
            &["cp", &format!("nasd:/{name}"), out.to_str().unwrap()],
        );
        assert!(ok, "copying {name} out: {err}");
        assert_eq!(&std::fs::read(&out).unwrap(), bytes, "{name} read back");
    }
    let (ok, ls, err) = nasd(home, &["ls", "nasd:/"]);
    assert!(ok, "{err}");
    for (name, _) in files {
        assert!(ls.contains(name), "{name} missing from: {ls}");
    }
}

#[test]
fn postgres_metadata_survives_manager_and_cluster_restarts_and_down_stops_postgres() {
    let tmp = tempfile::tempdir().unwrap();
    // Run as root, PostgreSQL runs as its own account, which must pass through the
    // directories above DATA (docs/postgres.md); the temporary directory is 0700.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let data = tmp.path().join("c");
    let _down = Down(data.clone());
    let d = data.to_str().unwrap();
    let up = [
        "up",
        "--background",
        "--drives",
        "2",
        "--meta",
        "postgres",
        "--data",
        d,
    ];
    let (ok, out, err) = nasd(&home, &up);
    assert!(ok, "nasd up --meta postgres: {out}{err}");
    let data = std::fs::canonicalize(&data).unwrap();
    let pgdata = data.join("postgres");
    assert!(
        pgdata.join("PG_VERSION").exists(),
        "no server in {pgdata:?}"
    );
    let first_server = postmaster(&pgdata).expect("PostgreSQL runs after up");
    // The manager's store is the server's database, not a file of its own.
    let cfg = std::fs::read_to_string(data.join("manager/manager.json")).unwrap();
    assert!(
        cfg.contains("\"meta\"") && cfg.contains("dbname=nasd"),
        "{cfg}"
    );
    assert!(!data.join("manager/meta.sqlite").exists());

    let files: Vec<(&str, Vec<u8>)> = vec![
        ("small", b"metadata in postgres".to_vec()),
        ("empty", vec![]),
        ("large", common::rand_bytes(3 << 20, 7)),
    ];
    for (name, bytes) in &files {
        let src = tmp.path().join(name);
        std::fs::write(&src, bytes).unwrap();
        let (ok, _, err) = nasd(
            &home,
            &["cp", src.to_str().unwrap(), &format!("nasd:/{name}")],
        );
        assert!(ok, "copying {name} in: {err}");
    }
    let (ok, _, err) = nasd(&home, &["mkdir", "nasd:/dir"]);
    assert!(ok, "{err}");
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    files_read_back(&home, &out_dir, &files);

    // A manager crash: everything it acknowledged is in the database.
    let killed = Command::new("kill")
        .args(["-KILL", &manager_pid(&data).to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (ok, out, err) = nasd(&home, &up);
    assert!(ok && out.contains("restarted manager"), "{out}{err}");
    assert_eq!(
        postmaster(&pgdata),
        Some(first_server),
        "the server kept running"
    );
    files_read_back(&home, &out_dir, &files);

    // `down` stops PostgreSQL too; `up` starts it again with everything in it.
    let (ok, out, err) = nasd(&home, &["down", "--data", d]);
    assert!(ok, "{err}");
    assert!(out.contains("stopped the cluster's PostgreSQL"), "{out}");
    assert_eq!(
        postmaster(&pgdata),
        None,
        "PostgreSQL still runs after down"
    );
    let (ok, out, err) = nasd(&home, &up);
    assert!(ok, "{out}{err}");
    assert!(postmaster(&pgdata).is_some());
    files_read_back(&home, &out_dir, &files);
    let (ok, ls, err) = nasd(&home, &["ls", "nasd:/"]);
    assert!(ok && ls.contains("dir"), "{ls}{err}");
    let (ok, _, err) = nasd(&home, &["down", "--data", d]);
    assert!(ok, "{err}");
    assert_eq!(postmaster(&pgdata), None);
}

/// `nasd bench meta --meta postgres`: every operation measured, the private server's CPU
/// per operation with the manager's.
#[test]
fn bench_meta_reports_every_operation_on_postgres() {
    common::bench_meta_reports_every_operation("postgres");
}
