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

/// Asserts that `r` failed because no key of the reader's opens the file's key (the manager
/// let them open it).
fn undecryptable<T>(r: Result<T, FsError>, what: &str) {
    match r {
        Err(e) => {
            assert_eq!(e.status(), Some(MgrStatus::PermissionDenied), "{what}: {e}");
            assert!(e.to_string().contains("not wrapped for"), "{what}: {e}");
        }
        Ok(_) => panic!("{what}: decrypted"),
    }
}

/// The principals a file's current key is wrapped for, and whether `secret` opens its wrap
/// for group `gid` (read through the admin's session, as an operator colluding with a drive
/// would read a file's key file and ciphertext).
fn group_wrap_opens(
    rt: &tokio::runtime::Runtime,
    up: &Up,
    path: &str,
    gid: u32,
    secret: &nasd_e2e::SecretKey,
) -> (Vec<nasd_e2e::Principal>, bool) {
    let admin = up.admin_client(rt);
    let e = rt.block_on(admin.e2e_state(path)).unwrap().unwrap();
    let side = nasd_e2e::side::Side::decode(&e.side).unwrap();
    let kv = side.key_file.latest_version().unwrap();
    let mut who: Vec<_> = side
        .key_file
        .entries()
        .iter()
        .filter(|e| e.key_version == kv)
        .map(|e| e.principal)
        .collect();
    who.sort_by_key(|p| format!("{p:?}"));
    let group = nasd_e2e::Principal::Group(gid);
    let opens = side
        .key_file
        .unwrap(group, secret, side.file_id, kv)
        .is_ok();
    (who, opens)
}

/// Group `staff`'s key as `c` sees it.
fn staff_key(rt: &tokio::runtime::Runtime, c: &Client) -> nasd_proto::manager::GroupKeyInfo {
    let get = calls::GroupKeyGet {
        gids: vec![],
        names: vec!["staff".into()],
    };
    rt.block_on(c.call("/", get)).unwrap().remove(0)
}

/// Admins held a wrap of every group's secret, also of groups they are not in, so an admin
/// read whatever was shared with a group (issue 21, medium). Now an admin who is not a member
/// holds no wrap and can make none (of the current key pair, or of a new one of their own
/// making); a member added later gets their wrap from a member's client; a removed member's
/// wrap goes, and what is written after the removal is wrapped to a new key pair their old
/// secret does not open.
#[test]
fn an_admin_outside_a_group_reads_nothing_shared_with_it_and_a_removed_member_nothing_new() {
    let up = Up::start(1);
    for user in ["alice", "bob", "carol"] {
        up.add_user(user, &format!("{user}-pw"));
    }
    up.ok(&["group", "add", "staff"]);
    up.ok(&["group", "member", "staff", "alice"]);
    up.ok(&["group", "member", "staff", "bob"]);
    up.ok(&["mkdir", "nasd:/team"]);
    up.ok(&["chown", "alice", "nasd:/team"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = |user: &str| {
        rt.block_on(Client::connect(up.session(user, &format!("{user}-pw"))))
            .unwrap()
    };
    let (alice, bob, carol) = (client("alice"), client("bob"), client("carol"));
    for c in [&alice, &bob, &carol] {
        rt.block_on(c.identity()).unwrap();
    }
    let admin = up.admin_client(&rt);
    assert!(
        staff_key(&rt, &admin).public.is_none(),
        "the admin's group add made no key pair"
    );

    // alice shares a file with staff only: mode 0640, group staff, written after both.
    let secret = b"staff only: the plan".to_vec();
    let plan = "/team/plan";
    rt.block_on(alice.put_bytes(plan, b"draft", 0o600)).unwrap();
    rt.block_on(alice.chown(plan, "", "staff")).unwrap();
    rt.block_on(alice.chmod(plan, 0o640)).unwrap();
    rt.block_on(alice.put_bytes(plan, &secret, 0o640)).unwrap();
    let st = rt.block_on(alice.stat(plan)).unwrap();
    assert_eq!((st.mode & 0o777, st.group.as_str()), (0o640, "staff"));
    let v1 = staff_key(&rt, &alice);
    assert_eq!(
        v1.version, 1,
        "alice's client, a member's, made staff's key pair"
    );
    let gid = v1.gid;
    let alice_uid = st.uid;
    let staff_only = vec![
        nasd_e2e::Principal::Group(gid),
        nasd_e2e::Principal::User(alice_uid),
    ];
    let nobody = nasd_e2e::SecretKey::generate();
    assert_eq!(group_wrap_opens(&rt, &up, plan, gid, &nobody).0, staff_only);
    assert_eq!(rt.block_on(bob.get_bytes(plan)).unwrap(), secret);

    // The admin: the manager lets them open the file, and their client cannot decrypt it.
    undecryptable(rt.block_on(admin.get_bytes(plan)), "the admin's own client");
    let seen = staff_key(&rt, &admin);
    assert!(!seen.member && seen.wrap.is_empty() && seen.missing.is_empty());
    // Nor can they give themselves a wrap: of the current key pair (they cannot open it, so
    // any wrap they make holds a key of theirs), or of a new key pair of their own making,
    // to which later files would be wrapped.
    let admin_uid = rt.block_on(admin.identity()).unwrap().uid;
    let admin_pk = rt.block_on(admin.identity()).unwrap().enc_public();
    let theirs = nasd_e2e::SecretKey::generate();
    let mut rng = nasd_e2e::keys::os_rng();
    let wrap_to = |version: u32, uid: u32, pk: nasd_e2e::PublicKey, rng: &mut _| {
        nasd_e2e::keys::GroupKeyWrap::wrap(gid, version, &theirs, uid, pk, rng)
            .unwrap()
            .encode()
    };
    let add_own = calls::GroupKeySet {
        group: "staff".into(),
        version: 1,
        public: v1.public.unwrap(),
        link: vec![],
        wraps: vec![(admin_uid, wrap_to(1, admin_uid, admin_pk, &mut rng))],
    };
    denied(
        rt.block_on(admin.call("/", add_own)),
        "a wrap of staff's key for the admin",
    );
    let own_pair = calls::GroupKeySet {
        group: "staff".into(),
        version: 2,
        public: theirs.public().0,
        link: vec![],
        wraps: vec![(admin_uid, wrap_to(2, admin_uid, admin_pk, &mut rng))],
    };
    denied(
        rt.block_on(admin.call("/", own_pair)),
        "a key pair of the admin's making",
    );
    let rewrap = calls::GroupWrapSet {
        wraps: vec![(gid, 1, wrap_to(1, admin_uid, admin_pk, &mut rng))],
    };
    denied(
        rt.block_on(admin.call("/", rewrap)),
        "a rotation's rewrap for the admin",
    );
    assert_eq!(staff_key(&rt, &alice), v1, "nothing changed");
    let plan2 = "/team/plan2";
    rt.block_on(alice.put_bytes(plan2, &secret, 0o600)).unwrap();
    rt.block_on(alice.chown(plan2, "", "staff")).unwrap();
    rt.block_on(alice.chmod(plan2, 0o640)).unwrap();
    rt.block_on(alice.put_bytes(plan2, &secret, 0o640)).unwrap();
    denied(
        rt.block_on(admin.get_bytes(plan2)),
        "the admin, a later file",
    );
    let o = up.nasd(&["cat", &format!("nasd:{plan}")], &[]);
    assert!(
        !o.status.success(),
        "nasd cat as the admin printed the file"
    );

    // carol joins: the admin's command gives her nothing; alice's `group sync` does, and
    // carol reads what was shared with staff before she joined.
    let joined = up.ok(&["group", "member", "staff", "carol"]);
    assert!(joined.contains("from a member's client"), "{joined}");
    undecryptable(
        rt.block_on(carol.get_bytes(plan)),
        "carol before a member wraps to her",
    );
    let alice_env = [("NASD_USER", "alice"), ("NASD_PASSWORD", "alice-pw")];
    let synced = up.ok_env(&["group", "sync", "staff"], &alice_env);
    assert!(synced.starts_with("1 wrap(s)"), "{synced}");
    assert_eq!(rt.block_on(carol.get_bytes(plan)).unwrap(), secret);

    // bob kept staff's secret while a member; then he is removed.
    let bob_id = rt.block_on(bob.identity()).unwrap();
    let bobs_wrap = staff_key(&rt, &bob).wrap;
    let kept = nasd_e2e::keys::GroupKeyWrap::decode(&bobs_wrap)
        .unwrap()
        .unwrap(bob_id.enc_secret())
        .unwrap();
    assert!(group_wrap_opens(&rt, &up, plan, gid, &kept).1);
    up.ok(&["group", "member", "staff", "bob", "--remove"]);
    assert!(staff_key(&rt, &bob).wrap.is_empty(), "bob's wrap is gone");
    assert!(staff_key(&rt, &alice).rekey, "staff is due a new key pair");
    // alice writes after the removal (a command of her own): her client makes version 2.
    let local = up.dir.path().join("after");
    std::fs::write(&local, b"written after bob left").unwrap();
    std::fs::set_permissions(&local, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let after = "/team/after";
    let remote = format!("nasd:{after}");
    up.ok_env(&["cp", local.to_str().unwrap(), &remote], &alice_env);
    up.ok_env(&["chown", "alice:staff", &remote], &alice_env);
    up.ok_env(&["chmod", "640", &remote], &alice_env);
    up.ok_env(&["cp", local.to_str().unwrap(), &remote], &alice_env);
    let v2 = staff_key(&rt, &alice);
    assert_eq!((v2.version, v2.rekey), (2, false));
    let (who, opens) = group_wrap_opens(&rt, &up, after, gid, &kept);
    assert_eq!(who, staff_only);
    assert!(
        !opens,
        "bob's kept secret opens what was written after he left"
    );
    denied(rt.block_on(bob.get_bytes(after)), "bob after his removal");
    // Members read both: the new file with version 2, the old one through the link.
    for c in [&alice, &carol] {
        assert_eq!(
            rt.block_on(c.get_bytes(after)).unwrap(),
            b"written after bob left"
        );
        assert_eq!(rt.block_on(c.get_bytes(plan)).unwrap(), secret);
    }
    denied(
        rt.block_on(admin.get_bytes(after)),
        "the admin after the new key pair",
    );
}
