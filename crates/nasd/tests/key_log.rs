//! Issue 21 §4, as attacks by the manager's operator on real processes: clients took other
//! users' public keys from the manager unchecked, so whoever controls the manager's database
//! could put a key of their own in a user's place and read what was shared with that user
//! afterwards. Each test makes one such change to the database of a stopped manager and
//! checks that clients refuse it, or show it, before any file key is wrapped to it.

mod common;
use common::*;

use nasd_client::e2e::identity::Identity;
use nasd_proto::codec::Writer;
use nasd_proto::manager::{calls, KeyLogEntry, UserKeys};
use std::path::PathBuf;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn db_path(up: &Up) -> PathBuf {
    up.data().join("manager").join("meta.sqlite")
}

fn uid_of(rt: &tokio::runtime::Runtime, up: &Up, name: &str) -> u32 {
    let admin = up.admin_client(rt);
    rt.block_on(admin.call("/", calls::UserList))
        .unwrap()
        .into_iter()
        .find(|u| u.name == name)
        .unwrap()
        .uid
}

fn blob(keys: &UserKeys) -> Vec<u8> {
    let mut w = Writer::new();
    keys.put(&mut w);
    w.into_vec()
}

/// With the manager stopped, runs `change` on its database, then starts it again.
fn with_db(up: &mut Up, change: impl FnOnce(&rusqlite::Connection)) {
    up.stop("manager");
    {
        let db = rusqlite::Connection::open(db_path(up)).unwrap();
        change(&db);
    }
    up.restart("manager");
}

/// Three users with keys; `/a` a directory of alice's; each user's client has read the log.
fn cluster() -> Up {
    let up = Up::start(1);
    for u in ["alice", "bob", "carol"] {
        up.add_user(u, &format!("{u}-pw"));
    }
    up.ok(&["mkdir", "nasd:/a"]);
    up.ok(&["chown", "alice", "nasd:/a"]);
    for u in ["alice", "bob"] {
        up.ok_env(&["user", "fingerprint", "bob"], &as_user(u));
    }
    up
}

/// The environment of a command run as `u` (each user's password is `U-pw`).
fn as_user(u: &'static str) -> [(&'static str, &'static str); 2] {
    let pw = match u {
        "alice" => "alice-pw",
        "bob" => "bob-pw",
        "carol" => "carol-pw",
        _ => panic!("no user {u}"),
    };
    [("NASD_USER", u), ("NASD_PASSWORD", pw)]
}

/// alice writes `name` (readable by others at the manager) and shares it with bob: the
/// output of the first command that failed, or of the share.
fn share_with_bob(up: &Up, name: &str) -> std::process::Output {
    let local = up.dir.path().join(name);
    std::fs::write(&local, format!("for bob only: {name}")).unwrap();
    let alice = as_user("alice");
    let remote = format!("nasd:/a/{name}");
    let o = up.nasd(&["cp", local.to_str().unwrap(), &remote], &alice);
    if !o.status.success() {
        return o;
    }
    up.nasd(&["share", &remote, "--user", "bob"], &alice)
}

/// Whether `path` exists (a refused write leaves none).
fn exists(rt: &tokio::runtime::Runtime, up: &Up, path: &str) -> bool {
    let admin = up.admin_client(rt);
    rt.block_on(admin.e2e_state(path))
        .is_ok_and(|s| s.is_some())
}

/// Whether `id`'s secret opens a wrap of `path`'s current key.
fn opens(rt: &tokio::runtime::Runtime, up: &Up, path: &str, id: &Identity) -> bool {
    let admin = up.admin_client(rt);
    let e = rt.block_on(admin.e2e_state(path)).unwrap().unwrap();
    let side = nasd_e2e::side::Side::decode(&e.side).unwrap();
    let kv = side.key_file.latest_version().unwrap();
    side.key_file
        .unwrap(
            nasd_e2e::Principal::User(id.uid),
            id.enc_secret(),
            side.file_id,
            kv,
        )
        .is_ok()
}

#[test]
fn keys_swapped_in_the_database_reach_no_wrap_and_their_user_sees_the_swap() {
    let mut up = cluster();
    let rt = rt();
    let bob = uid_of(&rt, &up, "bob");
    let thief = Identity::generate(bob);
    let mut forged = thief.user_keys(1, None, None);
    forged.version = 1;
    with_db(&mut up, |db| {
        db.execute(
            "UPDATE users SET e2e_keys = ?1 WHERE uid = ?2",
            rusqlite::params![blob(&forged), bob],
        )
        .unwrap();
    });
    let o = share_with_bob(&up, "f");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !opens(&rt, &up, "/a/f", &thief),
        "the operator's key opened a file shared with bob"
    );
    // bob's own client is answered keys its log does not hold, and says so.
    let err = up.fails(&["cat", "nasd:/a/f"], &as_user("bob"));
    assert!(err.contains("its key log does not hold"), "{err}");
}

#[test]
fn a_key_change_bob_did_not_sign_is_refused_with_the_whole_log() {
    let mut up = cluster();
    let rt = rt();
    let bob = uid_of(&rt, &up, "bob");
    let thief = Identity::generate(bob);
    // Version 2 signed by the thief's own key, appended as the manager would.
    let forged = thief.user_keys(2, Some(&thief), None);
    with_db(&mut up, |db| {
        let n: i64 = db
            .query_row("SELECT COUNT(*) FROM key_log", [], |r| r.get(0))
            .unwrap();
        let entry = KeyLogEntry::Keys {
            uid: bob,
            keys: forged.clone(),
        };
        db.execute(
            "INSERT INTO key_log(idx, uid, version, entry) VALUES (?1, ?2, 2, ?3)",
            rusqlite::params![n + 1, bob, entry.to_bytes()],
        )
        .unwrap();
        db.execute(
            "UPDATE users SET e2e_keys = ?1 WHERE uid = ?2",
            rusqlite::params![blob(&forged), bob],
        )
        .unwrap();
    });
    let o = share_with_bob(&up, "g");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "alice shared under a forged key");
    assert!(
        err.contains("not signed by the user's previous key"),
        "{err}"
    );
    assert!(!exists(&rt, &up, "/a/g") || !opens(&rt, &up, "/a/g", &thief));
}

#[test]
fn a_rewritten_history_is_a_fork_to_clients_that_held_it_and_a_wrong_fingerprint_to_new_ones() {
    let mut up = cluster();
    let rt = rt();
    let bob = uid_of(&rt, &up, "bob");
    // bob's fingerprint as his own client shows it, before the attack.
    let genuine = fingerprint_of(&up.ok_env(&["user", "fingerprint", "bob"], &as_user("bob")));
    // The operator replaces bob's first keys with its own, self-signed: a history that is
    // whole and valid, only not bob's.
    let thief = Identity::generate(bob);
    let forged = thief.user_keys(1, None, None);
    with_db(&mut up, |db| {
        let entry = KeyLogEntry::Keys {
            uid: bob,
            keys: forged.clone(),
        };
        db.execute(
            "UPDATE key_log SET entry = ?1 WHERE uid = ?2 AND version = 1",
            rusqlite::params![entry.to_bytes(), bob],
        )
        .unwrap();
        db.execute(
            "UPDATE users SET e2e_keys = ?1 WHERE uid = ?2",
            rusqlite::params![blob(&forged), bob],
        )
        .unwrap();
    });
    // alice held the log before: the root no longer covers what she holds.
    let o = share_with_bob(&up, "h");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("history was rewritten"),
        "{err}"
    );
    assert!(!exists(&rt, &up, "/a/h") || !opens(&rt, &up, "/a/h", &thief));
    // carol reads the log for the first time and sees the forged history; the fingerprint
    // bob gives her out of band does not match it, and she is told.
    let carol = as_user("carol");
    let shown = fingerprint_of(&up.ok_env(&["user", "fingerprint", "bob"], &carol));
    assert_ne!(shown, genuine);
    let err = up.fails(&["user", "verify", "bob", &genuine], &carol);
    assert!(
        err.contains("may be showing you keys that are not bob's"),
        "{err}"
    );
}

#[test]
fn a_reset_is_shown_to_every_client_and_new_keys_get_wraps_once_verified() {
    let up = cluster();
    let rt = rt();
    let bob_env = as_user("bob");
    let first = share_with_bob(&up, "before");
    assert!(first.status.success());
    // bob lost his keys; an admin resets them and bob's next login makes new ones.
    up.ok(&["user", "reset-keys", "bob"]);
    up.ok_env(&["login", "--user", "bob"], &bob_env);
    let bob_says = up.ok_env(&["user", "fingerprint", "bob"], &bob_env);
    let new_fp = fingerprint_of(&bob_says);
    assert!(bob_says.contains("keys version 3"), "{bob_says}");
    // alice sees the reset: no wrap for bob until she verifies.
    let alice = as_user("alice");
    let shown = up.ok_env(&["user", "fingerprint", "bob"], &alice);
    assert!(
        shown.contains("NOT verified") && shown.contains("reset"),
        "{shown}"
    );
    assert_eq!(fingerprint_of(&shown), new_fp);
    let o = share_with_bob(&up, "after");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("not verified here"),
        "{err}"
    );
    let bob_id = rt
        .block_on(async {
            let c = nasd_client::files::Client::connect(up.session("bob", "bob-pw"))
                .await
                .unwrap();
            c.identity().await
        })
        .unwrap();
    assert!(!opens(&rt, &up, "/a/after", &bob_id));
    // Out of band, bob reads his fingerprint to alice; she verifies it and shares again.
    up.ok_env(&["user", "verify", "bob", &new_fp], &alice);
    up.ok_env(&["share", "nasd:/a/after", "--user", "bob"], &alice);
    assert!(opens(&rt, &up, "/a/after", &bob_id));
    assert_eq!(
        up.ok_env(&["cat", "nasd:/a/after"], &bob_env),
        "for bob only: after"
    );
}

/// The fingerprint in `nasd user fingerprint`'s output.
fn fingerprint_of(out: &str) -> String {
    out.lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no fingerprint in {out:?}"))
        .to_string()
}
