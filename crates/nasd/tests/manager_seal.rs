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

/// The seal's header and every stored drive key (what a passphrase change rewrites).
fn sealed_state(dir: &std::path::Path) -> (Vec<u8>, Vec<Vec<u8>>) {
    let c = rusqlite::Connection::open(dir.join("meta.sqlite")).unwrap();
    let header: Vec<u8> = c
        .query_row("SELECT value FROM meta WHERE key = 'key_seal'", [], |r| {
            r.get(0)
        })
        .unwrap();
    drop(c);
    (header, drive_keys(&dir.join("meta.sqlite")))
}

/// `nasd manager seal --change` with the current passphrase `old` and the new `new`.
fn change(up: &Up, dir: &std::path::Path, old: &str, new: &str) -> std::process::Output {
    up.nasd(
        &[
            "manager",
            "seal",
            "--change",
            "--data",
            dir.to_str().unwrap(),
        ],
        &[
            ("NASD_MANAGER_PASSPHRASE", old),
            ("NASD_MANAGER_NEW_PASSPHRASE", new),
        ],
    )
}

/// Issue 21 §8: the passphrase of a sealed manager changes in one step. A wrong current
/// passphrase changes nothing; after the change the old one opens nothing and the new one
/// starts the manager, whose clients work as before; a change cut short after the store took
/// the new seal (its key file not yet renamed into place) is finished by the next start.
#[test]
fn a_sealed_managers_passphrase_changes_in_one_step_and_the_old_one_opens_nothing() {
    const NEW: &str = "tr0ub4dor and three";
    let mut options = Options::drives(2);
    // The manager's passphrase comes from a file the test changes (it starts under `env`
    // with what the file holds at each start).
    let tmp = tempfile::tempdir().unwrap();
    let pass_file = tmp.path().join("passphrase");
    std::fs::write(&pass_file, PASSPHRASE).unwrap();
    let script = format!(
        "NASD_MANAGER_PASSPHRASE=\"$(cat '{}')\" exec \"$@\"",
        pass_file.display()
    );
    options.placement.wrappers.insert(
        NodeId::Manager,
        vec!["sh".into(), "-c".into(), script.into(), "sh".into()],
    );
    let mut up = Up::start_with(options);
    let local = up.dir.path().join("f");
    std::fs::write(&local, b"written before the change").unwrap();
    up.ok(&["cp", local.to_str().unwrap(), "nasd:/before"]);
    up.stop("manager");
    let dir = up.data().join("manager");
    let clear_keys = drive_keys(&dir.join("meta.sqlite"));
    let o = up.nasd(
        &["manager", "seal", "--data", dir.to_str().unwrap()],
        &[("NASD_MANAGER_PASSPHRASE", PASSPHRASE)],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sealed = sealed_state(&dir);
    let key_file = dir.join("keys/opaque.key");
    let sealed_key_file = std::fs::read(&key_file).unwrap();

    // A wrong current passphrase: refused, and nothing changed.
    let o = change(&up, &dir, "wrong", NEW);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("wrong passphrase"),
        "{err}"
    );
    assert_eq!(sealed_state(&dir), sealed);
    assert_eq!(std::fs::read(&key_file).unwrap(), sealed_key_file);
    assert!(!dir.join("keys/opaque.key.next").exists());
    // --change of a manager that is not sealed, and a second seal, say what to do.
    let err = up.fails(
        &["manager", "seal", "--data", dir.to_str().unwrap()],
        &[("NASD_MANAGER_PASSPHRASE", PASSPHRASE)],
    );
    assert!(err.contains("--change"), "{err}");

    // The change: every key sealed anew, the old passphrase opens nothing.
    let o = change(&up, &dir, PASSPHRASE, NEW);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (header, keys) = sealed_state(&dir);
    assert_ne!(header, sealed.0, "a new seal header");
    for (k, old) in keys.iter().zip(&sealed.1) {
        assert_ne!(
            k, old,
            "a drive key is still sealed under the old passphrase"
        );
    }
    let changed_key_file = std::fs::read(&key_file).unwrap();
    assert_ne!(changed_key_file, sealed_key_file);
    assert!(!dir.join("keys/opaque.key.next").exists());
    let all = directory_bytes(&dir);
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    for k in &clear_keys {
        assert!(
            !contains(&all, k),
            "a drive key lies in clear after the change"
        );
    }
    let (ok, err) = run_manager(&dir, &[("NASD_MANAGER_PASSPHRASE", PASSPHRASE)]);
    assert!(
        !ok && err.contains("wrong passphrase"),
        "the old passphrase: {err}"
    );

    // The new one starts it, and clients work: logins, the old file, a new one.
    std::fs::write(&pass_file, NEW).unwrap();
    up.restart("manager");
    assert_eq!(up.ok(&["cat", "nasd:/before"]), "written before the change");
    std::fs::write(&local, b"written after the change").unwrap();
    up.ok(&["cp", local.to_str().unwrap(), "nasd:/after"]);
    assert_eq!(up.ok(&["cat", "nasd:/after"]), "written after the change");

    // Cut short after the store's commit: the key file sealed under the old passphrase is
    // still in place, the new one beside it. The next start, with the new passphrase, puts
    // the new one in place; logins (which need the OPAQUE keys) work.
    up.stop("manager");
    let staged = dir.join("keys/opaque.key.next");
    std::fs::write(&staged, &changed_key_file).unwrap();
    let private = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&staged, private).unwrap();
    std::fs::write(&key_file, &sealed_key_file).unwrap();
    up.restart("manager");
    assert_eq!(std::fs::read(&key_file).unwrap(), changed_key_file);
    assert!(!staged.exists());
    assert_eq!(up.ok(&["cat", "nasd:/after"]), "written after the change");
}
