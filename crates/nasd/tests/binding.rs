//! Issue 21 §5 and §7, as attacks on real processes: what the writer's signed record binds.
//!
//! - A wrap swapped at the manager (a wrap of a key of the operator's choosing, to the
//!   reader's real public key) made `nasd cat` print garbage with exit 0 while `nasd stat`
//!   said the signature verified: nothing tied the file key to the signed record.
//! - `nasd unshare` lasted one version: the owner's next upload wrapped for the group again.
//! - The manager and its drives restored together from a backup rolled a file back, and no
//!   reader noticed.
//! - An admin, or the manager's operator, could add a directory policy reader unseen, and
//!   every later file's key was wrapped for them.

mod common;
use common::*;

use nasd_e2e::keys::{wrap_file_key, KeyFileEntry};
use nasd_e2e::side::Side;
use nasd_e2e::{FileKey, Principal, PublicKey, TrustedRecord};
use nasd_proto::codec::{Reader, Writer};
use nasd_proto::manager::{E2eState, UserKeys};
use std::path::Path;

/// The environment of a command run as `u` (password `U-pw`).
fn as_user(u: &'static str) -> [(&'static str, &'static str); 2] {
    let pw = match u {
        "alice" => "alice-pw",
        "bob" => "bob-pw",
        _ => panic!("no user {u}"),
    };
    [("NASD_USER", u), ("NASD_PASSWORD", pw)]
}

/// alice and bob with keys; `/a` a directory of alice's that others may enter.
fn cluster() -> Up {
    let up = Up::start(1);
    for u in ["alice", "bob"] {
        up.add_user(u, &format!("{u}-pw"));
    }
    up.ok(&["mkdir", "nasd:/a"]);
    up.ok(&["chown", "alice", "nasd:/a"]);
    up.ok(&["chmod", "755", "nasd:/a"]);
    for u in ["alice", "bob"] {
        up.ok_env(&["ls", "nasd:/"], &as_user(u));
    }
    up
}

/// alice writes `body` to `nasd:/a/NAME`.
fn alice_writes(up: &Up, name: &str, body: &[u8]) {
    let local = up.dir.path().join(format!("{name}.local"));
    std::fs::write(&local, body).unwrap();
    up.ok_env(
        &["cp", local.to_str().unwrap(), &format!("nasd:/a/{name}")],
        &as_user("alice"),
    );
}

/// With the manager stopped, runs `change` on its database, then starts it again.
fn with_db(up: &mut Up, change: impl FnOnce(&rusqlite::Connection)) {
    up.stop("manager");
    {
        let db = rusqlite::Connection::open(up.data().join("manager").join("meta.sqlite")).unwrap();
        change(&db);
    }
    up.restart("manager");
}

/// The file's end-to-end state column, decoded.
fn state_of(db: &rusqlite::Connection, name: &str) -> (i64, E2eState) {
    let (ino, blob): (i64, Vec<u8>) = db
        .query_row(
            "SELECT i.ino, i.e2e FROM dirents d JOIN inodes i ON i.ino = d.ino WHERE d.name = ?1",
            [name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let mut r = Reader::new(&blob);
    (ino, E2eState::get(&mut r).unwrap())
}

fn cat(up: &Up, who: &'static str, name: &str) -> std::process::Output {
    up.nasd(&["cat", &format!("nasd:/a/{name}")], &as_user(who))
}

/// The manager's operator replaces bob's wrap of a shared file's key by a wrap of a key of
/// their own to bob's real public key (everything a wrap needs is public). bob's client
/// opens it, and before the key was bound into the signed record it deciphered the file
/// into garbage and printed it with exit 0; now the key is refused, no byte is printed, and
/// the file itself is untouched (its owner still reads it).
#[test]
fn a_wrap_swapped_at_the_manager_is_refused_not_deciphered_into_garbage() {
    let mut up = cluster();
    let body = b"shared with bob, checked by bob ".repeat(4000);
    alice_writes(&up, "f", &body);
    up.ok_env(&["share", "nasd:/a/f", "--user", "bob"], &as_user("alice"));
    assert_eq!(cat(&up, "bob", "f").stdout, body);
    with_db(&mut up, |db| {
        let bob: u32 = db
            .query_row("SELECT uid FROM users WHERE name = 'bob'", [], |r| r.get(0))
            .unwrap();
        let keys: Vec<u8> = db
            .query_row("SELECT e2e_keys FROM users WHERE uid = ?1", [bob], |r| {
                r.get(0)
            })
            .unwrap();
        let keys = UserKeys::get(&mut Reader::new(&keys)).unwrap();
        let (ino, mut e) = state_of(db, "f");
        let record = TrustedRecord::decode(&e.record).unwrap();
        let mut side = Side::decode(&e.side).unwrap();
        let theirs = FileKey::generate();
        let wrapped = wrap_file_key(
            PublicKey(keys.enc_public),
            side.file_id,
            record.key_version,
            &theirs,
            &mut nasd_e2e::keys::os_rng(),
        )
        .unwrap();
        side.key_file.remove_principal(Principal::User(bob));
        side.key_file
            .insert(KeyFileEntry {
                principal: Principal::User(bob),
                key_version: record.key_version,
                wrapped,
            })
            .unwrap();
        e.side = side.encode();
        let mut w = Writer::new();
        e.put(&mut w);
        db.execute(
            "UPDATE inodes SET e2e = ?1 WHERE ino = ?2",
            rusqlite::params![w.into_vec(), ino],
        )
        .unwrap();
    });
    let out = cat(&up, "bob", "f");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "bob's client deciphered with a swapped key"
    );
    assert!(out.stdout.is_empty(), "bytes were printed");
    assert!(err.contains("a wrap was swapped"), "{err}");
    assert_eq!(
        cat(&up, "alice", "f").stdout,
        body,
        "the owner's wrap is intact"
    );
}

/// `nasd unshare` is lasting policy: the owner's next upload, and a chmod that would admit
/// the group again, wrap nothing for it, until `nasd share` names it again; `nasd stat` shows
/// it. Before, the next upload wrapped for everyone the mode admitted.
#[test]
fn an_unshare_lasts_through_the_owners_next_writes_until_shared_again() {
    let up = cluster();
    alice_writes(&up, "f", b"version one, for everyone");
    up.ok_env(&["chmod", "644", "nasd:/a/f"], &as_user("alice"));
    assert_eq!(cat(&up, "bob", "f").stdout, b"version one, for everyone");
    up.ok_env(
        &["unshare", "nasd:/a/f", "--group", "users"],
        &as_user("alice"),
    );
    let denied = |why: &str| {
        let out = cat(&up, "bob", "f");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && out.stdout.is_empty() && err.contains("ermission denied"),
            "{why}: {err}"
        );
    };
    denied("after the unshare");
    alice_writes(&up, "f", b"version two, not for the group");
    denied("after alice's next upload");
    up.ok_env(&["chmod", "600", "nasd:/a/f"], &as_user("alice"));
    up.ok_env(&["chmod", "644", "nasd:/a/f"], &as_user("alice"));
    denied("after a chmod that admits others again");
    let st = up.ok_env(&["stat", "nasd:/a/f"], &as_user("alice"));
    assert!(st.contains("unshared from group users"), "{st}");
    up.ok_env(
        &["share", "nasd:/a/f", "--group", "users"],
        &as_user("alice"),
    );
    assert_eq!(
        cat(&up, "bob", "f").stdout,
        b"version two, not for the group"
    );
    alice_writes(&up, "f", b"version three, for everyone again");
    assert_eq!(
        cat(&up, "bob", "f").stdout,
        b"version three, for everyone again"
    );
}

/// Copies directory `from` to `to` with `cp -a` (modes and times kept).
fn snapshot(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Puts the snapshot `from` back in place of `to`.
fn restore(from: &Path, to: &Path) {
    std::fs::remove_dir_all(to).unwrap();
    snapshot(from, to);
}

/// The manager and its drive restored together from a backup taken before a file's second
/// version: every object and record of version one intact, its signature good. alice's
/// client, which read version two, refuses version one with a clear error and prints no
/// byte; a client that never saw version two cannot know and reads version one (the limit,
/// as with the key log: trust on first use).
#[test]
fn a_manager_and_drives_restored_together_are_refused_for_files_a_client_saw_newer() {
    let mut up = cluster();
    alice_writes(&up, "f", b"version one");
    assert_eq!(cat(&up, "alice", "f").stdout, b"version one");
    let mdir = up.cluster.info().manager.dir.clone();
    let ddir = up.cluster.drive_dir(0).unwrap().to_path_buf();
    let backup = up.dir.path().join("backup");
    std::fs::create_dir_all(&backup).unwrap();
    up.stop("manager");
    up.stop("drive-0");
    snapshot(&mdir, &backup.join("manager"));
    snapshot(&ddir, &backup.join("drive"));
    up.restart("drive-0");
    up.restart("manager");
    alice_writes(&up, "f", b"version two");
    assert_eq!(cat(&up, "alice", "f").stdout, b"version two");
    up.stop("manager");
    up.stop("drive-0");
    restore(&backup.join("manager"), &mdir);
    restore(&backup.join("drive"), &ddir);
    up.restart("drive-0");
    up.restart("manager");
    let out = cat(&up, "alice", "f");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "alice read a rolled-back file");
    assert!(out.stdout.is_empty(), "bytes were printed");
    assert!(err.contains("rolled back"), "{err}");
    let st = up.nasd(&["stat", "nasd:/a/f"], &as_user("alice"));
    assert!(!st.status.success(), "stat showed the old version as good");
    assert_eq!(
        cat(&up, "bob", "f").stdout,
        b"version one",
        "a client that never saw version two"
    );
}

/// A plaintext striped file (`rs:2+1`), and a drive that changes what it stores while keeping
/// its own tree and MACs consistent (its partition key taken from where it lies, as whoever
/// holds its disk could). Plain files trusted each drive's own tree, so the changed bytes
/// were served with exit 0; now the writer's signed record pins every component, the reader
/// refuses the changed one and reads around it from the code: the file's true bytes, and
/// `nasd stat` names the file pinned. A one-object plain file still trusts its drive.
#[test]
fn a_plain_striped_file_is_read_around_a_drive_that_changes_it_with_valid_macs() {
    let up = Up::start(3);
    up.ok(&["layout", "set", "nasd:/", "rs:2+1/64K,plain"]);
    let body: Vec<u8> = (0..20_000)
        .flat_map(|i| format!("plain line {i} of the file\n").into_bytes())
        .take(300_000)
        .collect();
    let local = up.dir.path().join("f");
    std::fs::write(&local, &body).unwrap();
    up.ok(&["cp", local.to_str().unwrap(), "nasd:/f"]);
    let st = up.ok(&["stat", "nasd:/f"]);
    assert!(st.contains("plaintext, pinned"), "{st}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = up.admin_client(&rt);
    let o = rt.block_on(c.open("/f", false)).unwrap();
    assert_eq!(o.layout.components.len(), 3);
    let comp = o.layout.components[0].clone();
    let db = rusqlite::Connection::open(up.cluster.info().manager.dir.join("meta.sqlite")).unwrap();
    let (suite, key): (u8, Vec<u8>) = db
        .query_row(
            "SELECT suite, part_key FROM drives WHERE drive = ?1",
            [comp.drive.0 as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    drop(db);
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let key_file = up.dir.path().join("partition.key");
    std::fs::write(
        &key_file,
        format!(
            "kind = partition\ndrive = {:016x}\nsuite = {}\npartition = 1\nkey = {hex}\n",
            comp.drive.0,
            nasd_proto::Suite::from_u8(suite).unwrap().name()
        ),
    )
    .unwrap();
    let object = comp.object.0.to_string();
    let piece = up.dir.path().join("piece");
    std::fs::write(&piece, b"FORGED BY THE DRIVE").unwrap();
    let out = up.nasd(
        &[
            "obj",
            "write",
            "--drive",
            &comp.addr,
            "--key",
            key_file.to_str().unwrap(),
            "--partition",
            "1",
            "--object",
            &object,
            "--offset",
            "100",
            "--in",
            piece.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = up.nasd(&["cat", "nasd:/f"], &[]);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert!(read.stdout == body, "the drive's bytes were served");
    assert!(
        !read.stdout.windows(6).any(|w| w == b"FORGED"),
        "forged bytes reached the reader"
    );
}

/// alice writes `body` to `nasd:/a/NAME` with mode 0600 (no group or everyone wraps).
fn alice_writes_private(up: &Up, name: &str, body: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let local = up.dir.path().join(format!("{name}.local"));
    std::fs::write(&local, body).unwrap();
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o600)).unwrap();
    up.ok_env(
        &["cp", local.to_str().unwrap(), &format!("nasd:/a/{name}")],
        &as_user("alice"),
    );
}

/// `nasd stat --json nasd:/a/NAME` as alice.
fn stat_json(up: &Up, name: &str) -> serde_json::Value {
    let out = up.ok_env(
        &["stat", "--json", &format!("nasd:/a/{name}")],
        &as_user("alice"),
    );
    serde_json::from_str(out.trim()).unwrap()
}

/// The operator writes `reader=u:UID` into `/a`'s stored layout spec.
fn operator_adds_reader(up: &mut Up, user: &str) {
    let user = user.to_string();
    with_db(up, move |db| {
        let uid: i64 = db
            .query_row("SELECT uid FROM users WHERE name = ?1", [&user], |r| {
                r.get(0)
            })
            .unwrap();
        let n = db
            .execute(
                "UPDATE inodes SET dir_layout = dir_layout || ',reader=u:' || ?1
                 WHERE ino = (SELECT ino FROM dirents WHERE name = 'a')",
                [uid],
            )
            .unwrap();
        assert_eq!(n, 1);
    });
}

/// Admins could add themselves (or anyone) as a directory's policy reader, and the manager's
/// operator could write one into the database, unseen: every later file's key was wrapped
/// for them (issue 21, medium). Now writers wrap for a policy reader only as the latest
/// statement in the key log, signed by who set it, names it for the nearest directory: the
/// operator's reader gets no wrap, before or after a signed one was withdrawn, and an admin's
/// reader is signed, logged and shown by `nasd stat`.
#[test]
fn a_policy_reader_gets_wraps_only_as_its_setter_signed_it_into_the_key_log() {
    let mut up = cluster();
    // A spec of /a's own (no readers: nothing to log), then the operator's reader in it.
    up.ok_env(
        &["layout", "set", "nasd:/a", "block=64K"],
        &as_user("alice"),
    );
    operator_adds_reader(&mut up, "bob");
    let shown = up.ok(&["layout", "get", "nasd:/a"]);
    assert!(
        shown.contains("reader=bob"),
        "the manager names bob: {shown}"
    );
    alice_writes_private(&up, "forged", b"the operator's reader");
    let s = stat_json(&up, "forged");
    assert_eq!(s["e2e"]["readers"], serde_json::json!(["alice"]), "{s}");
    assert!(s.get("policy_readers").is_none(), "{s}");

    // An admin sets bob as a reader: signed with the admin's key, in the key log, shown.
    up.ok(&["layout", "set", "nasd:/a", "reader=bob"]);
    alice_writes_private(&up, "signed", b"the admin's reader");
    let s = stat_json(&up, "signed");
    assert_eq!(
        s["e2e"]["readers"],
        serde_json::json!(["alice", "bob"]),
        "{s}"
    );
    let p = &s["policy_readers"];
    assert_eq!(
        (&p["readers"], &p["dir"], &p["set_by"]),
        (&serde_json::json!(["bob"]), &"/a".into(), &"admin".into()),
        "{s}"
    );
    let text = up.ok_env(&["stat", "nasd:/a/signed"], &as_user("alice"));
    assert!(
        text.contains("policy readers bob: set on /a by admin at "),
        "{text}"
    );

    // Withdrawn (signed too); the operator writes it back: the signed withdrawal counts, not
    // the older statement that named bob.
    up.ok(&["layout", "set", "nasd:/a", "noreaders"]);
    operator_adds_reader(&mut up, "bob");
    alice_writes_private(&up, "replayed", b"after the withdrawal");
    let s = stat_json(&up, "replayed");
    assert_eq!(s["e2e"]["readers"], serde_json::json!(["alice"]), "{s}");
    assert!(s.get("policy_readers").is_none(), "{s}");
}
