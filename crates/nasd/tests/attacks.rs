//! Issue 21's attacks on end-to-end protection, made as an operator or an insider would make
//! them against a real cluster, each asserting that it fails. The manager runs as its own
//! process; the attacker holds only what the finding says it holds.

mod common;
use common::*;
use nasd_client::files::{Client, FsError};
use nasd_proto::manager::{calls, MgrStatus, UserKeys};
use std::process::Command;

/// Asserts that the manager refused `r` for lack of permission.
fn denied<T>(r: Result<T, FsError>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.status(), Some(MgrStatus::PermissionDenied), "{what}: {e}"),
        Ok(_) => panic!("{what}: allowed"),
    }
}

/// The S3 gateway `nasd up --s3` starts beside `up`'s cluster, stopped when dropped (it runs
/// in a process group of its own, so the cluster's end does not stop it).
struct Gateway(std::path::PathBuf);

impl Gateway {
    fn start(up: &Up) -> Gateway {
        let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listen.local_addr().unwrap().to_string();
        drop(listen);
        let o = Command::new(NASD)
            .args(["up", "--background", "--s3", &addr, "--data"])
            .arg(up.data())
            .env("XDG_CONFIG_HOME", up.dir.path().join("xdg"))
            .env_remove("NASD_CONFIG")
            .env_remove("NASD_DATA")
            .output()
            .unwrap();
        let g = Gateway(up.data().join("s3-gateway.pid"));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        g
    }

    /// [`Gateway::start`], then users alice and bob (password `NAME-pw`), alice with an S3
    /// key and bob without.
    fn with_alice_and_bob(up: &Up) -> Gateway {
        let g = Gateway::start(up);
        for user in ["alice", "bob"] {
            up.add_user(user, &format!("{user}-pw"));
        }
        up.ok(&["user", "s3-key", "create", "alice"]);
        g
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Ok(s) = std::fs::read_to_string(&self.0) {
            if let Ok(pid) = s.trim().parse::<i32>() {
                // SAFETY: kill(2) on the gateway this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Whoever holds the gateway's credential (`DIR/s3-gateway.password`, written by `nasd up
/// --s3`) could act for any non-admin user, even one who never made an S3 key, and from that
/// session replace the user's public keys, mint S3 keys that outlive a rotation of the
/// gateway's password, and read the user's sealed seed (issue 21, critical). Now a gateway's
/// session exists only for users with a live S3 key, may send only the object calls a gateway
/// serves, never sees a sealed seed, and ends with the user's last S3 key.
#[test]
fn the_gateways_credential_acts_only_for_users_with_s3_keys_and_only_on_objects() {
    let up = Up::start(1);
    let _gateway = Gateway::with_alice_and_bob(&up);
    // Both log in once, so both have keys and sealed seeds at the manager.
    let rt = tokio::runtime::Runtime::new().unwrap();
    for user in ["alice", "bob"] {
        let c = rt
            .block_on(Client::connect(up.session(user, &format!("{user}-pw"))))
            .unwrap();
        rt.block_on(c.identity())
            .unwrap_or_else(|e| panic!("{user}'s keys: {e}"));
    }

    // The attacker: the gateway's password file, nothing else.
    let stolen = std::fs::read_to_string(up.data().join("s3-gateway.password")).unwrap();
    let gw = rt
        .block_on(Client::connect(up.session("s3-gateway", stolen.trim())))
        .unwrap();
    denied(
        rt.block_on(gw.act_for("bob")).map(drop),
        "a session for a user with no S3 key",
    );
    let alice = rt.block_on(gw.act_for("alice")).unwrap();

    // What a gateway serves still works: alice's own objects.
    rt.block_on(alice.mkdir("/s3/alice-dir", 0o700)).unwrap();
    rt.block_on(alice.put_bytes("/s3/alice-dir/o", b"object", 0o600))
        .unwrap();
    assert_eq!(
        rt.block_on(alice.get_bytes("/s3/alice-dir/o")).unwrap(),
        b"object"
    );

    // Nothing that changes who alice is, or what she shares.
    let mine = rt
        .block_on(alice.call(
            "/",
            calls::UserKeyGet {
                uids: vec![],
                names: vec!["alice".into()],
            },
        ))
        .unwrap();
    assert_eq!(mine.len(), 1);
    assert!(
        mine[0].keys.sealed.is_empty(),
        "a gateway's session read alice's sealed seed"
    );
    let forged = UserKeys {
        sealed: vec![],
        ..mine[0].keys.clone()
    };
    denied(
        rt.block_on(alice.call(
            "/",
            calls::UserKeySet {
                user: "alice".into(),
                keys: forged,
            },
        )),
        "replacing alice's public keys",
    );
    denied(
        rt.block_on(alice.call(
            "/",
            calls::S3KeyCreate {
                user: "alice".into(),
            },
        )),
        "minting an S3 key for alice",
    );
    denied(
        rt.block_on(alice.call(
            "/",
            calls::UserPasswd {
                name: "alice".into(),
                public_key: None,
            },
        )),
        "resetting alice's password to an enrollment code",
    );
    denied(
        rt.block_on(alice.chown("/s3/alice-dir/o", "bob", "")),
        "giving alice's file away",
    );
    denied(
        rt.block_on(alice.layout_set("/s3/alice-dir", "plain,reader=s3-gateway")),
        "changing the policy of alice's directory",
    );

    // Revoking alice's last S3 key ends the sessions gateways opened for her.
    let listed = up.ok(&["user", "s3-key", "list", "alice", "--json"]);
    let first = listed.lines().next().expect("alice's key is listed");
    let id = serde_json::from_str::<serde_json::Value>(first).unwrap()["access_key_id"]
        .as_str()
        .unwrap()
        .to_string();
    up.ok(&["user", "s3-key", "revoke", "alice", &id]);
    let after = rt.block_on(alice.call(
        "/",
        calls::Stat {
            path: "/s3/alice-dir/o".into(),
        },
    ));
    assert!(
        after.is_err(),
        "the gateway's session for alice outlived her last S3 key"
    );
    denied(
        rt.block_on(gw.act_for("alice")).map(drop),
        "a new session once the key is gone",
    );
}

/// The gateway deciphered whatever the mode let a user read, with the wrap every file under
/// `/s3` carries for it, so a user removed with `nasd unshare` still read through S3 (issue 21,
/// medium). Now a gateway's session for a user opens a file's key only where the file holds a
/// wrap for that user or a group of theirs, as the user's own client needs.
#[test]
fn a_user_unshared_from_a_file_reads_it_neither_directly_nor_through_the_gateway() {
    let up = Up::start(1);
    let _gateway = Gateway::with_alice_and_bob(&up);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = |user: &str| {
        rt.block_on(Client::connect(up.session(user, &format!("{user}-pw"))))
            .unwrap()
    };
    let (alice_own, bob) = (client("alice"), client("bob"));
    rt.block_on(alice_own.identity()).unwrap();
    rt.block_on(bob.mkdir("/s3/bobs", 0o755)).unwrap();
    rt.block_on(bob.put_bytes("/s3/bobs/f", b"for everyone, at first", 0o644))
        .unwrap();
    let stolen = std::fs::read_to_string(up.data().join("s3-gateway.password")).unwrap();
    let gw = rt
        .block_on(Client::connect(up.session("s3-gateway", stolen.trim())))
        .unwrap();
    let alice = rt.block_on(gw.act_for("alice")).unwrap();
    assert_eq!(
        rt.block_on(alice.get_bytes("/s3/bobs/f")).unwrap(),
        b"for everyone, at first"
    );

    // bob takes everyone's wraps away; the mode still lets alice open the file.
    let bob_cli = |args: &[&str]| {
        let o = up.nasd(args, &[("NASD_USER", "bob"), ("NASD_PASSWORD", "bob-pw")]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    bob_cli(&["unshare", "nasd:/s3/bobs/f", "--group", "users"]);
    let own = rt.block_on(alice_own.get_bytes("/s3/bobs/f"));
    denied(own, "alice's own client after the unshare");
    // A gateway session opened after the unshare (the session that read before keeps the
    // grant it holds, as any client does, until it expires: it held those bytes already).
    drop(alice);
    let alice = rt.block_on(gw.act_for("alice")).unwrap();
    let through = rt.block_on(alice.get_bytes("/s3/bobs/f"));
    denied(through, "alice through the gateway after the unshare");
    assert_eq!(
        rt.block_on(bob.get_bytes("/s3/bobs/f")).unwrap(),
        b"for everyone, at first",
        "the owner still reads"
    );
}
