//! Issue 21 §8, as an attack by a thief of the manager's data directory: the manager's copies
//! of the drives' keys lay in clear in its database (enough to mint capabilities for every
//! object), and its OPAQUE key file beside it. `nasd manager seal` seals both under a
//! passphrase, as drives seal theirs; this test reads the directory as the thief would.

mod common;
use common::*;

use nasd_cluster::{NodeId, Options};
use std::process::{Command, Stdio};

const PASSPHRASE: &str = "correct horse battery staple";

/// The drives' keys the manager's database holds (every key column of every drive).
fn drive_keys(db: &std::path::Path) -> Vec<Vec<u8>> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut st = c
        .prepare("SELECT drive_key, part_key, working_key FROM drives")
        .unwrap();
    let rows = st
        .query_map([], |r| {
            Ok([
                r.get::<_, Vec<u8>>(0)?,
                r.get::<_, Vec<u8>>(1)?,
                r.get::<_, Vec<u8>>(2)?,
            ])
        })
        .unwrap();
    rows.flat_map(|r| r.unwrap()).collect()
}

/// Every byte of the manager's directory's files (the database, its log, the key files).
fn directory_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = vec![];
    for e in walk(dir) {
        out.extend(std::fs::read(e).unwrap());
    }
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

/// `nasd manager run` on a free port with `env`, stdin closed: its exit and stderr.
fn run_manager(dir: &std::path::Path, env: &[(&str, &str)]) -> (bool, String) {
    let mut c = Command::new(NASD);
    c.args(["manager", "run", "--data", dir.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("NASD_MANAGER_PASSPHRASE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_sealed_managers_directory_gives_away_no_drive_key_and_it_starts_only_with_the_passphrase() {
    let mut options = Options::drives(2);
    let env = format!("NASD_MANAGER_PASSPHRASE={PASSPHRASE}");
    options
        .placement
        .wrappers
        .insert(NodeId::Manager, vec!["env".into(), env.into()]);
    let mut up = Up::start_with(options);
    let local = up.dir.path().join("f");
    std::fs::write(&local, b"written before the seal").unwrap();
    up.ok(&["cp", local.to_str().unwrap(), "nasd:/before"]);
    up.stop("manager");
    let dir = up.data().join("manager");
    let keys = drive_keys(&dir.join("meta.sqlite"));
    assert_eq!(keys.len(), 6);
    let opaque = std::fs::read_to_string(dir.join("keys/opaque.key")).unwrap();
    let opaque_hex = opaque.lines().nth(1).unwrap().to_string();
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    assert!(
        contains(&directory_bytes(&dir), &keys[0]),
        "in clear before"
    );

    let o = up.nasd(
        &["manager", "seal", "--data", dir.to_str().unwrap()],
        &[("NASD_MANAGER_PASSPHRASE", PASSPHRASE)],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let all = directory_bytes(&dir);
    for k in &keys {
        assert!(
            !contains(&all, k),
            "a drive key lies in clear after the seal"
        );
    }
    assert!(
        !contains(&all, opaque_hex.as_bytes()),
        "the OPAQUE keys lie in clear"
    );

    // Without the passphrase, or with a wrong one, the manager does not start.
    let (ok, err) = run_manager(&dir, &[]);
    assert!(!ok && err.contains("no password given"), "{err}");
    let (ok, err) = run_manager(&dir, &[("NASD_MANAGER_PASSPHRASE", "wrong")]);
    assert!(!ok && err.contains("wrong passphrase"), "{err}");
    // A second seal is refused.
    let err = up.fails(
        &["manager", "seal", "--data", dir.to_str().unwrap()],
        &[("NASD_MANAGER_PASSPHRASE", PASSPHRASE)],
    );
    assert!(err.contains("sealed already"), "{err}");

    // With it, the cluster works as before: logins, the old file, a new one on both drives.
    up.restart("manager");
    assert_eq!(up.ok(&["cat", "nasd:/before"]), "written before the seal");
    std::fs::write(&local, b"written after the seal").unwrap();
    up.ok(&["cp", local.to_str().unwrap(), "nasd:/after"]);
    assert_eq!(up.ok(&["cat", "nasd:/after"]), "written after the seal");
    let all = directory_bytes(&dir);
    for k in &keys {
        assert!(
            !contains(&all, k),
            "a drive key in clear after running sealed"
        );
    }
}
