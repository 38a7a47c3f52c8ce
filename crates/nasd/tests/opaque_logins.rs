//! Issue 21 §2-3, as attacks on real processes: the manager saw every password (a relay with
//! the manager's own TLS key captured one, and its database held hashes that test guesses),
//! and users' seeds were made by the admin's client and never changed, so an old copy with the
//! first password opened files written long after. Each test attacks that, and the move of
//! accounts made before OPAQUE is checked end to end.

mod common;
use common::*;

use nasd_client::e2e::identity::Identity;
use nasd_client::files::Client;
use nasd_client::opaque::{client_login_start, ServerKeys};
use nasd_client::session::Session;
use nasd_proto::io::{read_frame, write_frame};
use nasd_proto::manager::{
    calls, key_change_message, MgrStatus, UserKeys, MANAGER_FRAME_BYTES_MAX,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What a relay holding the manager's TLS key saw: every frame body, both ways.
type Capture = Arc<Mutex<Vec<u8>>>;

/// Copies frames from `from` to `to`, keeping each body in `seen`.
async fn pump<R, W>(mut from: R, mut to: W, seen: Capture)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    while let Ok(Some(body)) = read_frame(&mut from, MANAGER_FRAME_BYTES_MAX).await {
        seen.lock().unwrap().extend_from_slice(&body);
        if write_frame(&mut to, &body).await.is_err() {
            return;
        }
    }
}

/// A man in the middle with the manager's own TLS key and certificate (what its operator, or
/// whoever reads `DIR/tls/server.key`, has): clients that trust the cluster CA talk to it as
/// to the manager, and it talks to the manager as a client. Returns its address.
fn start_relay(rt: &tokio::runtime::Runtime, up: &Up, seen: Capture) -> String {
    let manager_dir = up.data().join("manager");
    let tls = nasd_manager::tls::server_config(&manager_dir).unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(up.config()).unwrap()).unwrap();
    let manager = cfg["manager"].as_str().unwrap().to_string();
    let ca = std::fs::read(cfg["ca"].as_str().unwrap()).unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    rt.spawn(async move {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, manager, ca, seen) =
                (acceptor.clone(), manager.clone(), ca.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(client) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(server) = nasd_client::session::tls_stream(&manager, &ca, None).await else {
                    return;
                };
                let (cr, cw) = tokio::io::split(client);
                let (sr, sw) = tokio::io::split(server);
                tokio::join!(pump(cr, sw, seen.clone()), pump(sr, cw, seen));
            });
        }
    });
    addr
}

/// A copy of the cluster's client config that reaches the manager through `relay`, in a
/// directory of its own (tokens and end-to-end keys are kept beside it).
fn relay_config(up: &Up, relay: &str) -> PathBuf {
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(up.config()).unwrap()).unwrap();
    cfg["manager"] = relay.into();
    let dir = up.dir.path().join("via-relay");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("client.json");
    std::fs::write(&path, serde_json::to_string(&cfg).unwrap()).unwrap();
    path
}

/// `nasd ARGS` with the config at `config` and the environment `env`; must succeed.
fn nasd_at(config: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = std::process::Command::new(NASD);
    c.args(args)
        .env("NASD_CONFIG", config)
        .env_remove("NASD_USER")
        .env_remove("NASD_PASSWORD");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "nasd {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The enrollment code `nasd user add NAME --json` prints.
fn add_with_code(config: &Path, name: &str) -> String {
    let out = nasd_at(config, &["user", "add", name, "--json"], &[]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    v["enrollment_code"].as_str().unwrap().to_string()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Forms of a secret an eavesdropper might find: itself, its hex, and common hashes of it.
fn forms(secret: &[u8]) -> Vec<(String, Vec<u8>)> {
    use sha2::Digest;
    vec![
        ("itself".into(), secret.to_vec()),
        ("hex".into(), hex::encode(secret).into_bytes()),
        ("BLAKE3".into(), blake3::hash(secret).as_bytes().to_vec()),
        ("SHA-256".into(), sha2::Sha256::digest(secret).to_vec()),
        ("SHA-512".into(), sha2::Sha512::digest(secret).to_vec()),
    ]
}

fn assert_unseen(seen: &[u8], what: &str, secret: &[u8]) {
    for (form, bytes) in forms(secret) {
        assert!(!contains(seen, &bytes), "the relay saw {what} ({form})");
    }
}

/// The key that seals `user`'s seed now: a login's export key, learned by logging in here
/// (straight to the manager, not through the relay).
fn seed_key(rt: &tokio::runtime::Runtime, up: &Up, user: &str, password: &str) -> [u8; 32] {
    let s = rt
        .block_on(Session::connect(&up.session(user, password)))
        .unwrap();
    *s.seed_key
        .as_ref()
        .expect("a password login gives one")
        .expose()
}

fn seed_in(path: &Path) -> Vec<u8> {
    hex::decode(std::fs::read_to_string(path).unwrap().trim()).unwrap()
}

#[test]
fn a_relay_with_the_managers_tls_key_sees_no_password_hash_seed_or_sealing_key() {
    let up = Up::start(1);
    let rt = rt();
    let seen: Capture = Default::default();
    let relay = start_relay(&rt, &up, seen.clone());
    let cfg = relay_config(&up, &relay);
    let alice = [("NASD_USER", "alice")];

    // user add (the admin logs in through the relay with its password), enrollment, login,
    // an encrypted upload, a password change and a login with the new password.
    let code = add_with_code(&cfg, "alice");
    nasd_at(&cfg, &["mkdir", "nasd:/alice"], &[]);
    nasd_at(&cfg, &["chown", "alice", "nasd:/alice"], &[]);
    nasd_at(
        &cfg,
        &["user", "enroll", "alice", "--code", &code],
        &[("NASD_NEW_PASSWORD", "first-pw-1")],
    );
    nasd_at(
        &cfg,
        &["login", "--user", "alice"],
        &[("NASD_PASSWORD", "first-pw-1")],
    );
    let key1 = seed_key(&rt, &up, "alice", "first-pw-1");
    let local = up.dir.path().join("secret.txt");
    std::fs::write(&local, b"alice's words").unwrap();
    nasd_at(
        &cfg,
        &["cp", local.to_str().unwrap(), "nasd:/alice/a.txt"],
        &alice,
    );
    nasd_at(
        &cfg,
        &["user", "passwd", "alice"],
        &[alice[0], ("NASD_NEW_PASSWORD", "second-pw-2")],
    );
    nasd_at(
        &cfg,
        &["login", "--user", "alice"],
        &[("NASD_PASSWORD", "second-pw-2")],
    );
    assert_eq!(
        nasd_at(&cfg, &["cat", "nasd:/alice/a.txt"], &alice),
        "alice's words"
    );
    let key2 = seed_key(&rt, &up, "alice", "second-pw-2");

    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.len() > 4_000,
        "the relay carried the sessions ({} bytes)",
        seen.len()
    );
    assert_unseen(&seen, "the first password", b"first-pw-1");
    assert_unseen(&seen, "the second password", b"second-pw-2");
    assert_unseen(
        &seen,
        "the admin's password",
        up.admin_password().trim().as_bytes(),
    );
    assert_unseen(
        &seen,
        "the seed",
        &seed_in(&cfg.with_file_name("e2e-alice.key")),
    );
    assert_unseen(&seen, "the first seed-sealing key", &key1);
    assert_unseen(&seen, "the second seed-sealing key", &key2);
    // What it did see of the seed is sealed: alice's sealed copy went through it.
    assert!(contains(&seen, b"alice"));
}

#[test]
fn the_database_alone_checks_no_password_guess() {
    let mut up = Up::start(1);
    let code = add_with_code(&up.config(), "alice");
    up.ok_env(
        &["user", "enroll", "alice", "--code", &code],
        &[("NASD_NEW_PASSWORD", "hunter2-pw")],
    );
    up.stop("manager");
    let manager_dir = up.data().join("manager");
    let db = rusqlite::Connection::open(manager_dir.join("meta.sqlite")).unwrap();
    let phc: String = db
        .query_row("SELECT phc FROM users WHERE name = 'alice'", [], |r| {
            r.get(0)
        })
        .unwrap();
    // No password hash: an OPAQUE record under a credential id.
    assert!(
        phc.starts_with("$opaque$v1$") && !phc.contains("argon2"),
        "{phc}"
    );
    let (id, record) = phc["$opaque$v1$".len()..].split_once('$').unwrap();
    let (id, record) = (hex::decode(id).unwrap(), hex::decode(record).unwrap());
    let try_password = |keys: &ServerKeys, pw: &str| {
        let c = client_login_start(pw.as_bytes()).unwrap();
        let (ke2, state) = keys.login_start(Some(&record), &id, &c.message).unwrap();
        match c.finish(pw.as_bytes(), &ke2) {
            Ok((ke3, _)) => state.finish(&ke3).is_ok(),
            Err(_) => false,
        }
    };
    // Whoever has the database alone, without the manager's OPAQUE keys, cannot tell the
    // right password from a wrong one: every guess fails alike.
    let guesser = ServerKeys::generate();
    assert!(!try_password(&guesser, "hunter2-pw"));
    assert!(!try_password(&guesser, "wrong-guess"));
    // The keys are not in the database, but in their own 0600 file.
    let keys = nasd_manager::login::load_or_make_keys(&manager_dir, None).unwrap();
    let raw = std::fs::read(manager_dir.join("meta.sqlite")).unwrap();
    assert!(!contains(&raw, &keys.to_bytes()[..32]));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(nasd_manager::login::key_path(&manager_dir))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // With the key file too, a guess is checked offline (at one Argon2id run each): what the
    // docs say the pair allows.
    assert!(try_password(&keys, "hunter2-pw"));
    assert!(!try_password(&keys, "wrong-guess"));
}

/// `uid`'s registered keys, as another user (`c`) sees them.
fn keys_of(rt: &tokio::runtime::Runtime, c: &Client, uid: u32) -> Option<UserKeys> {
    let get = calls::UserKeyGet {
        uids: vec![uid],
        names: vec![],
    };
    rt.block_on(c.call("/", get)).unwrap().pop().map(|u| u.keys)
}

fn signed_by(signer: &[u8; 32], uid: u32, k: &UserKeys) -> bool {
    let m = key_change_message(uid, k.version, &k.enc_public, &k.sign_public);
    ed25519_dalek::VerifyingKey::from_bytes(signer)
        .unwrap()
        .verify_strict(&m, &ed25519_dalek::Signature::from_bytes(&k.signature))
        .is_ok()
}

#[test]
fn a_new_users_seed_is_made_by_their_own_client_never_the_admins() {
    let up = Up::start(1);
    let rt = rt();
    let admin = up.admin_client(&rt);
    let made = rt.block_on(admin.add_user("alice", false, None)).unwrap();
    let uid = made.uid;
    // The account has no keys, so no seed exists anywhere yet; the admin cannot give it any.
    assert_eq!(keys_of(&rt, &admin, uid), None);
    let forged = Identity::generate(uid).user_keys(1, None, None);
    let set = calls::UserKeySet {
        user: "alice".into(),
        keys: forged,
    };
    let e = rt.block_on(admin.call("/", set)).unwrap_err();
    assert_eq!(e.status(), Some(MgrStatus::PermissionDenied), "{e}");
    // alice enrolls and logs in: her client makes the seed, signs the first keys itself, and
    // keeps it beside her config.
    let code = made.code.expect("a password user gets a code");
    up.ok_env(
        &["user", "enroll", "alice", "--code", &code],
        &[("NASD_NEW_PASSWORD", "alice-pw")],
    );
    up.ok_env(
        &["login", "--user", "alice"],
        &[("NASD_PASSWORD", "alice-pw")],
    );
    let keys = keys_of(&rt, &admin, uid).expect("registered at her first login");
    assert_eq!(keys.version, 1);
    assert!(signed_by(&keys.sign_public, uid, &keys), "self-signed");
    let seed: [u8; 32] = seed_in(&up.data().join("e2e-alice.key"))
        .try_into()
        .unwrap();
    assert!(Identity::from_seed(uid, &seed).matches(&keys));
    assert!(
        keys_of(&rt, &admin, uid).unwrap().sealed.is_empty(),
        "sealed only for alice"
    );
    // The admin's client holds its own identity, not alice's.
    let admin_id = rt.block_on(admin.identity()).unwrap();
    assert!(!admin_id.matches(&keys));
}

#[test]
fn after_rotate_keys_the_old_seed_and_old_password_open_nothing_new() {
    let up = Up::start(1);
    let rt = rt();
    let alice = [("NASD_USER", "alice")];
    let code = add_with_code(&up.config(), "alice");
    up.ok(&["mkdir", "nasd:/alice"]);
    up.ok(&["chown", "alice", "nasd:/alice"]);
    up.ok_env(
        &["user", "enroll", "alice", "--code", &code],
        &[("NASD_NEW_PASSWORD", "first-pw")],
    );
    up.ok_env(
        &["login", "--user", "alice"],
        &[("NASD_PASSWORD", "first-pw")],
    );
    let key_file = up.data().join("e2e-alice.key");
    let stolen: [u8; 32] = seed_in(&key_file).try_into().unwrap();
    // Files only alice reads (mode 0600 from the source): her own wrap is their only one
    // besides nobody's group.
    let local = up.dir.path().join("f");
    std::fs::write(&local, b"before the rotation").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o600)).unwrap();
    up.ok_env(
        &["cp", local.to_str().unwrap(), "nasd:/alice/before"],
        &alice,
    );
    // The thief has the seed and the first password. alice changes her password and
    // rotates her keys, then writes again.
    up.ok_env(
        &["user", "passwd", "alice"],
        &[alice[0], ("NASD_NEW_PASSWORD", "second-pw")],
    );
    let out = up.ok_env(
        &["user", "rotate-keys"],
        &[alice[0], ("NASD_PASSWORD", "second-pw")],
    );
    assert!(
        out.contains("version 2") && out.contains("1 file(s)"),
        "{out}"
    );
    let alice = [alice[0], ("NASD_PASSWORD", "second-pw")];
    std::fs::write(&local, b"after the rotation").unwrap();
    up.ok_env(
        &["cp", local.to_str().unwrap(), "nasd:/alice/after"],
        &alice,
    );
    assert_eq!(
        up.ok_env(&["cat", "nasd:/alice/before"], &alice),
        "before the rotation"
    );
    assert_eq!(
        up.ok_env(&["cat", "nasd:/alice/after"], &alice),
        "after the rotation"
    );

    // The first password logs in no more.
    let e = rt
        .block_on(Session::connect(&up.session("alice", "first-pw")))
        .err()
        .unwrap();
    assert_eq!(e.status(), Some(MgrStatus::WrongPassword), "{e}");
    // The stolen seed opens no wrap of the file written after the rotation (nor, since its
    // wraps were replaced, of the one before); the new seed opens both.
    let admin = up.admin_client(&rt);
    let alice_uid = rt
        .block_on(admin.call("/", calls::UserList))
        .unwrap()
        .into_iter()
        .find(|u| u.name == "alice")
        .unwrap()
        .uid;
    let old = Identity::from_seed(alice_uid, &stolen);
    let new_seed: [u8; 32] = seed_in(&key_file).try_into().unwrap();
    assert_ne!(new_seed, stolen);
    let new = Identity::from_seed(alice_uid, &new_seed);
    for path in ["/alice/after", "/alice/before"] {
        let e = rt.block_on(admin.e2e_state(path)).unwrap().unwrap();
        let side = nasd_e2e::side::Side::decode(&e.side).unwrap();
        let me = nasd_e2e::Principal::User(alice_uid);
        let kv = side.key_file.latest_version().unwrap();
        assert!(
            side.key_file
                .unwrap(me, old.enc_secret(), side.file_id, kv)
                .is_err(),
            "{path}: the stolen seed opened the file key"
        );
        side.key_file
            .unwrap(me, new.enc_secret(), side.file_id, kv)
            .unwrap_or_else(|e| panic!("{path}: the new seed: {e}"));
    }
    // And a client with the stolen seed in alice's key file and the first password is
    // refused at login: it reaches no sealed copy, old or new.
    std::fs::write(&key_file, hex::encode(stolen)).unwrap();
    let o = up.nasd(
        &["cat", "nasd:/alice/after"],
        &[alice[0], ("NASD_PASSWORD", "first-pw")],
    );
    assert!(
        !o.status.success() && o.stdout.is_empty(),
        "the old password read the new file"
    );
    // The new keys are version 2, signed by version 1's key.
    let keys = keys_of(&rt, &admin, alice_uid).unwrap();
    assert_eq!(keys.version, 2);
    assert!(signed_by(&old.sign_public().0, alice_uid, &keys));
    assert!(new.matches(&keys));
}

#[test]
fn an_account_made_before_opaque_moves_over_at_its_next_login() {
    let mut up = Up::start(1);
    // An account as a manager before protocol 15 left it: an Argon2id hash, and a seed sealed
    // under the password, stored in the encoding of schemas 9 to 11.
    up.stop("manager");
    let manager_dir = up.data().join("manager");
    let seed = [42u8; 32];
    let uid = {
        let db = rusqlite::Connection::open(manager_dir.join("meta.sqlite")).unwrap();
        let phc = nasd_manager::users::hash_password("old-pass").unwrap();
        let gid: u32 = db
            .query_row("SELECT gid FROM groups WHERE name = 'users'", [], |r| {
                r.get(0)
            })
            .unwrap();
        db.execute(
            "INSERT INTO users(uid, name, phc, admin, gid) VALUES (1000, 'olga', ?1, 0, ?2)",
            rusqlite::params![phc, gid],
        )
        .unwrap();
        let id = Identity::from_seed(1000, &seed);
        let k = id.user_keys(1, None, None);
        let seal = nasd_crypto::seal::KeySeal::create(b"old-pass").unwrap();
        let mut sealed = seal.header().encode().to_vec();
        sealed
            .extend_from_slice(&seal.seal("user e2e seed v1", &nasd_crypto::Key::from_bytes(seed)));
        let mut blob = k.enc_public.to_vec();
        blob.extend_from_slice(&k.sign_public);
        blob.extend_from_slice(&(sealed.len() as u32).to_le_bytes());
        blob.extend_from_slice(&sealed);
        db.execute(
            "UPDATE users SET e2e_keys = ?1 WHERE uid = 1000",
            rusqlite::params![blob],
        )
        .unwrap();
        // Schema 11 had no key log (13) and no group key links or rekey mark (14).
        db.execute_batch(
            "DROP TABLE key_log; DROP TABLE group_key_links;
             ALTER TABLE groups DROP COLUMN key_rekey;
             UPDATE meta SET value = X'0B000000' WHERE key = 'schema';",
        )
        .unwrap();
        1000u32
    };
    up.restart("manager");
    let olga = [("NASD_USER", "olga")];
    // An OPAQUE login finds no password file and says how to move the account.
    let e = up.fails(
        &["login", "--user", "olga"],
        &[("NASD_PASSWORD", "old-pass")],
    );
    assert!(e.contains("--legacy-password"), "{e}");
    // One last check of the old hash, then the move; the seed is kept, sealed anew.
    up.ok_env(
        &["login", "--user", "olga", "--legacy-password"],
        &[("NASD_PASSWORD", "old-pass")],
    );
    assert_eq!(seed_in(&up.data().join("e2e-olga.key")), seed.to_vec());
    up.ok_env(&["ls", "nasd:/"], &olga);
    // The hash is gone; the old way in is closed; OPAQUE logs in and opens the seed.
    let db = rusqlite::Connection::open(manager_dir.join("meta.sqlite")).unwrap();
    let phc: String = db
        .query_row("SELECT phc FROM users WHERE uid = ?1", [uid], |r| r.get(0))
        .unwrap();
    assert!(phc.starts_with("$opaque$v1$"), "{phc}");
    let e = up.fails(
        &["login", "--user", "olga", "--legacy-password"],
        &[("NASD_PASSWORD", "old-pass")],
    );
    assert!(
        e.contains("credential refused") || e.contains("wrong password"),
        "{e}"
    );
    std::fs::remove_file(up.data().join("e2e-olga.key")).unwrap();
    up.ok_env(
        &["login", "--user", "olga"],
        &[("NASD_PASSWORD", "old-pass")],
    );
    assert_eq!(seed_in(&up.data().join("e2e-olga.key")), seed.to_vec());
    let rt = rt();
    let admin = up.admin_client(&rt);
    let keys = keys_of(&rt, &admin, uid).unwrap();
    assert_eq!(
        (keys.version, keys.signature),
        (1, [0; 64]),
        "made before signed key changes"
    );
}
