//! End-to-end protection (issue 10) against a real cluster: files encrypted by their writers
//! round-trip on one-object and erasure-coded layouts; no plaintext reaches a drive's or the
//! manager's files; a drive serving an older copy of its data is caught; readers without a
//! wrap of the file's key get "permission denied", never ciphertext.

mod common;

use common::*;
use std::path::Path;

/// Every file under `dir`, searched for `marker`.
fn files_holding(dir: &Path, marker: &[u8]) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(p);
            } else if t.is_file() {
                if let Ok(b) = std::fs::read(&p) {
                    if b.windows(marker.len()).any(|w| w == marker) {
                        out.push(p.display().to_string());
                    }
                }
            }
        }
    }
    out
}

#[test]
fn encrypted_files_round_trip_and_no_plaintext_reaches_any_disk() {
    let up = Up::start(3);
    up.ok(&["layout", "set", "nasd:/", "encrypted"]);
    up.ok(&["mkdir", "--layout", "rs:2+1/64K", "nasd:/ec"]);
    assert!(up
        .ok(&["layout", "get", "nasd:/ec"])
        .contains("encrypted,mt"));
    let marker = b"MARKER-e2e-4f1c2a9b-never-on-disk";
    let local = up.dir.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let sizes = [
        0usize,
        1,
        15,
        16,
        17,
        4096,
        65535,
        65536,
        65537,
        300_000,
        3 << 20,
    ];
    for (k, &n) in sizes.iter().enumerate() {
        // Text-like content with the marker in every 4 KiB.
        let mut body: Vec<u8> = (0..n).map(|i| b"abcdefgh "[i % 9]).collect();
        for at in (0..n.saturating_sub(marker.len())).step_by(4096) {
            body[at..at + marker.len()].copy_from_slice(marker);
        }
        let p = local.join(format!("f{k}"));
        std::fs::write(&p, &body).unwrap();
        for dir in ["", "/ec"] {
            let remote = format!("nasd:{dir}/f{k}");
            up.ok(&["cp", p.to_str().unwrap(), &remote]);
            let back = local.join(format!("back{k}"));
            up.ok(&["cp", &remote, back.to_str().unwrap()]);
            assert!(std::fs::read(&back).unwrap() == body, "{remote}: {n} bytes");
            let st = up.ok(&["stat", "--json", &remote]);
            assert!(st.contains(&format!("\"size\":{n}")), "{remote}: {st}");
        }
    }
    // A sparse file: its holes read as zeros.
    let sparse = local.join("sparse");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(&sparse).unwrap();
        f.write_all_at(marker, 5 << 20).unwrap();
        f.write_all_at(marker, 100).unwrap();
    }
    up.ok(&["cp", sparse.to_str().unwrap(), "nasd:/ec/sparse"]);
    let back = local.join("sparse.back");
    up.ok(&["cp", "nasd:/ec/sparse", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&sparse).unwrap());
    // Overwrite, then read the new content.
    let p = local.join("f6");
    std::fs::write(&p, b"replaced content, not the marker").unwrap();
    up.ok(&["cp", p.to_str().unwrap(), "nasd:/f6"]);
    assert_eq!(
        up.ok(&["cat", "nasd:/f6"]),
        "replaced content, not the marker"
    );

    // No drive's and no manager's file holds the marker.
    std::fs::remove_dir_all(&local).unwrap();
    let found = files_holding(&up.data(), marker);
    assert!(found.is_empty(), "plaintext on disk in {found:?}");
}

/// Kills the manager, lets `edit` change its database, and starts it again.
fn with_manager_stopped(up: &mut Up, edit: impl FnOnce(&rusqlite::Connection)) {
    up.kill("manager");
    let mdir = up.cluster.info().manager.dir.clone();
    let db = rusqlite::Connection::open(mdir.join("meta.sqlite")).unwrap();
    edit(&db);
    drop(db);
    up.restart("manager");
    let t0 = std::time::Instant::now();
    while !up.nasd(&["ls", "nasd:/"], &[]).status.success() {
        assert!(t0.elapsed().as_secs() < 60, "the manager did not come back");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Copies directory `from` over `to` (files only, as a drive's data directory holds).
fn copy_dir(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to).unwrap();
    // A drive refuses a directory others may enter.
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// The one drive of a one-drive cluster serves an older version of a file: its data directory
/// restored from before the file was overwritten, and the object that version lived in named
/// as the file's (the bytes a drive could hand out for it with every MAC right and the same
/// inode in its `fs_specific`). Only the record the writer committed at the manager tells, and
/// the read fails naming the file, with no byte of either version printed — for MT-EINT (the
/// pins) and for RAND-EINT (the new version's key and counters).
#[test]
fn a_drive_serving_an_older_version_is_caught() {
    for eint in ["mt", "rand"] {
        let mut up = Up::start(1);
        up.ok(&["layout", "set", "nasd:/", eint]);
        let v1: Vec<u8> = (0..200_000u32)
            .map(|i| b"version one "[i as usize % 12])
            .collect();
        let v2: Vec<u8> = (0..200_000u32)
            .map(|i| b"version two "[i as usize % 12])
            .collect();
        let local = up.dir.path().join("v");
        std::fs::write(&local, &v1).unwrap();
        up.ok(&["cp", local.to_str().unwrap(), "nasd:/f"]);
        let old_object = |db: &rusqlite::Connection| -> i64 {
            db.query_row(
                "SELECT c.object FROM dirents d JOIN components c ON c.ino = d.ino AND c.idx = 0
                 WHERE d.parent = 1 AND d.name = 'f'",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        let mut o1 = 0;
        with_manager_stopped(&mut up, |db| o1 = old_object(db));
        // The drive's directory as it is with version one.
        let ddir = up.cluster.drive_dir(0).unwrap().to_path_buf();
        up.stop("drive-0");
        let snap = up.dir.path().join("snapshot");
        copy_dir(&ddir, &snap);
        up.restart("drive-0");
        std::fs::write(&local, &v2).unwrap();
        up.ok(&["cp", local.to_str().unwrap(), "nasd:/f"]);
        assert!(up.ok(&["cat", "nasd:/f"]).as_bytes() == v2.as_slice());
        // Roll the drive back and point the file at the object version one lived in.
        up.stop("drive-0");
        std::fs::remove_dir_all(&ddir).unwrap();
        copy_dir(&snap, &ddir);
        up.restart("drive-0");
        with_manager_stopped(&mut up, |db| {
            db.execute(
                "UPDATE components SET object = ?1 WHERE ino =
                 (SELECT ino FROM dirents WHERE parent = 1 AND name = 'f') AND idx = 0",
                [o1],
            )
            .unwrap();
        });
        let out = up.nasd(&["cat", "nasd:/f"], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{eint}: an old version was served as the file"
        );
        assert!(out.stdout.is_empty(), "{eint}: bytes were printed");
        assert!(err.contains("nasd:/f"), "{eint}: {err}");
        eprintln!("{eint}: {err}");
    }
}

/// Who may read an encrypted file is who holds a wrap of its key: the mode's readers (its
/// owner, its group, and "everyone" through the users' groups, so a user added after the file
/// was written reads it as POSIX says, once a member's client gave them the group's key), and
/// those it is shared with. A user without a wrap gets "permission denied" and no byte;
/// chmod, share, unshare and rekey change that.
#[test]
fn readers_of_an_encrypted_file_are_the_holders_of_its_key() {
    let up = Up::start(2);
    // The `users` group's key pair is made by a member's client (never by an admin who is
    // not one): alice's, at her first login.
    up.add_user("alice", "alice-pw");
    let alice = [("NASD_USER", "alice"), ("NASD_PASSWORD", "alice-pw")];
    let local = up.dir.path().join("pub");
    let body = b"readable by every user of the cluster".repeat(1000);
    std::fs::write(&local, &body).unwrap();
    up.ok(&["cp", local.to_str().unwrap(), "nasd:/pub"]);
    up.ok(&["chmod", "644", "nasd:/pub"]);
    up.add_user("bob", "bob-pw");
    up.add_user("eve", "eve-pw");
    // bob and eve get their wraps of `users`' key from a member's client.
    let synced = up.ok_env(&["group", "sync", "users"], &alice);
    assert!(synced.starts_with("2 wrap(s)"), "{synced}");
    let bob = [("NASD_USER", "bob"), ("NASD_PASSWORD", "bob-pw")];
    let eve = [("NASD_USER", "eve"), ("NASD_PASSWORD", "eve-pw")];
    let cat = |who: &[(&str, &str)], path: &str| up.nasd(&["cat", path], who);
    let out = cat(&bob, "nasd:/pub");
    assert!(
        out.status.success() && out.stdout == body,
        "bob reads a world-readable file written before he existed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Private: only the owner's wrap is left.
    up.ok(&["chmod", "600", "nasd:/pub"]);
    for who in [&bob, &eve] {
        let out = cat(who, "nasd:/pub");
        assert!(!out.status.success() && out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("ermission denied"), "{err}");
    }
    let denied = |who: &[(&str, &str)], why: &str| {
        let out = cat(who, "nasd:/pub");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && out.stdout.is_empty() && err.contains("ermission denied"),
            "{why}: {err}"
        );
    };
    let reads = |who: &[(&str, &str)], why: &str| {
        let out = cat(who, "nasd:/pub");
        assert!(
            out.status.success() && out.stdout == body,
            "{why}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // The mode lets everyone read again; the key is taken from the users' group: the mode
    // still admits bob and eve at the manager, and neither can decrypt.
    up.ok(&["chmod", "644", "nasd:/pub"]);
    reads(&eve, "after chmod 644");
    up.ok(&["unshare", "nasd:/pub", "--group", "users"]);
    denied(&bob, "bob after the group's wrap went");
    denied(&eve, "eve after the group's wrap went");
    reads(&[], "the owner keeps the file");
    // Shared with bob alone.
    up.ok(&["share", "nasd:/pub", "--user", "bob"]);
    reads(&bob, "bob once it is shared with him");
    denied(&eve, "eve, with whom it is not shared");
    let st = up.ok(&["stat", "nasd:/pub"]);
    assert!(st.contains("bob"), "the readers are listed: {st}");
    // Re-encrypted under a fresh key: the same readers, the same bytes.
    up.ok(&["rekey", "nasd:/pub"]);
    reads(&bob, "bob after rekey");
    reads(&[], "the owner after rekey");
    denied(&eve, "eve after rekey");
}

/// The manager's database loses an encrypted file's trusted record (its end-to-end state set
/// to nothing, as a restored or damaged database might): the objects' `fs_specific` flag says
/// they hold ciphertext, so the read is refused naming the file, and no byte is printed —
/// for a one-object file and an erasure-coded one.
#[test]
fn a_lost_trusted_record_is_detected() {
    let mut up = Up::start(3);
    up.ok(&["mkdir", "--layout", "rs:2+1/64K", "nasd:/ec"]);
    let local = up.dir.path().join("f");
    std::fs::write(&local, b"secret words ".repeat(20_000)).unwrap();
    for p in ["nasd:/f", "nasd:/ec/f"] {
        up.ok(&["cp", local.to_str().unwrap(), p]);
    }
    with_manager_stopped(&mut up, |db| {
        let n = db
            .execute(
                "UPDATE inodes SET e2e = NULL WHERE kind = 1 AND e2e IS NOT NULL",
                [],
            )
            .unwrap();
        assert_eq!(n, 2, "both files had a record");
    });
    for p in ["nasd:/f", "nasd:/ec/f"] {
        let out = up.nasd(&["cat", p], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{p}: read without its record");
        assert!(out.stdout.is_empty(), "{p}: bytes were printed");
        assert!(
            err.contains(p) && err.contains("no end-to-end record"),
            "{p}: {err}"
        );
    }
}

/// Scheme 1 (seed 001 §3.3.1): under `auth=1` a write grant names the writer's Ed25519 key,
/// the client signs every write and the drives store only signed ones — for an encrypted
/// erasure-coded file and a plaintext one written in place. Files round-trip and `stat` says
/// who signed; a holder of the very capability the manager granted who sends a write unsigned,
/// or with the grant's writer key dropped, is refused by the drive, and the file still reads
/// as written.
#[test]
fn under_scheme_1_drives_store_only_signed_writes() {
    let up = Up::start(3);
    up.ok(&["mkdir", "--layout", "rs:2+1/64K,auth=1", "nasd:/signed"]);
    up.ok(&["mkdir", "--layout", "plain,auth=1", "nasd:/one"]);
    let local = up.dir.path().join("f");
    let mut body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&local, &body).unwrap();
    for dir in ["signed", "one"] {
        let remote = format!("nasd:/{dir}/f");
        up.ok(&["cp", local.to_str().unwrap(), &remote]);
        let back = up.dir.path().join("back");
        up.ok(&["cp", &remote, back.to_str().unwrap()]);
        assert!(std::fs::read(&back).unwrap() == body, "{remote}");
    }
    let st = up.ok(&["stat", "nasd:/signed/f"]);
    assert!(st.contains("signed by admin: verifies"), "{st}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = up.admin_client(&rt);
    // In place, through a handle: every write signed.
    rt.block_on(async {
        let o = nasd_client::handle::OpenOptions {
            write: true,
            create: false,
            truncate: false,
            mode: 0o644,
        };
        let h = nasd_client::handle::FileHandle::open(&c, "/one/f", o)
            .await
            .unwrap();
        h.write_at(1000, b"signed in place").await.unwrap();
        h.close().await.unwrap();
    });
    body[1000..1015].copy_from_slice(b"signed in place");
    // The grant the manager hands a writer, used raw against a drive.
    let o = rt.block_on(c.open("/one/f", true)).unwrap();
    let (addr, _, auth) = o.component(0).unwrap();
    let nasd_client::Auth::Capability(cap) = auth else {
        panic!("a grant is capabilities")
    };
    let who = rt.block_on(c.identity()).unwrap();
    assert_eq!(
        cap.args.writer_key.map(|k| k.0),
        Some(who.sign_public().0),
        "the grant names the writer's key"
    );
    let cap_file = up.dir.path().join("cap.json");
    std::fs::write(&cap_file, serde_json::to_string(&cap.to_file()).unwrap()).unwrap();
    let junk = up.dir.path().join("junk");
    std::fs::write(&junk, vec![0x55u8; 4096]).unwrap();
    let (cap_s, junk_s) = (cap_file.to_str().unwrap(), junk.to_str().unwrap());
    let err = up.fails(
        &[
            "obj",
            "write",
            "--drive",
            addr,
            "--cap",
            cap_s,
            "--in",
            junk_s,
            "--unsigned",
        ],
        &[],
    );
    assert!(
        err.contains("not signed by the capability's writer key"),
        "an unsigned write: {err}"
    );
    // The same capability with its writer key dropped: its MAC no longer matches.
    let mut forged = cap.to_file();
    forged.writer_key = None;
    std::fs::write(&cap_file, serde_json::to_string(&forged).unwrap()).unwrap();
    let err = up.fails(
        &[
            "obj", "write", "--drive", addr, "--cap", cap_s, "--in", junk_s,
        ],
        &[],
    );
    assert!(
        err.contains("refused by the drive"),
        "a stripped key: {err}"
    );
    drop(o);
    let back = up.dir.path().join("back");
    up.ok(&["cp", "nasd:/one/f", back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == body,
        "the file is as written"
    );
}

/// A drive that changes what it stores and keeps its own tree and MACs consistent (its
/// partition key taken from where it lies, as whoever holds the disk could): a flipped
/// ciphertext byte, two blocks swapped, a block of another file put in, the object cut short
/// or extended. Each time the read fails naming the file and prints no byte — for MT-EINT (the
/// writer's pin) and RAND-EINT (the record's counters and leaves); put back, the file reads
/// right again, so it is the change that is caught.
#[test]
fn a_drive_that_changes_ciphertext_with_valid_macs_is_caught() {
    for eint in ["mt", "rand"] {
        let up = Up::start(1);
        up.ok(&["layout", "set", "nasd:/", &format!("encrypted,{eint}")]);
        let text = |tag: &str| -> Vec<u8> {
            let mut t: Vec<u8> = (0..10_000)
                .flat_map(|i| format!("{tag} line {i} of the file\n").into_bytes())
                .collect();
            t.truncate(200_000);
            t
        };
        let (f, g) = (text("f"), text("g"));
        for (name, body) in [("f", &f), ("g", &g)] {
            let p = up.dir.path().join(name);
            std::fs::write(&p, body).unwrap();
            up.ok(&["cp", p.to_str().unwrap(), &format!("nasd:/{name}")]);
        }
        // Where each file's object lies, and the drive's partition key.
        let rt = tokio::runtime::Runtime::new().unwrap();
        let c = up.admin_client(&rt);
        let object = |path: &str| {
            let o = rt.block_on(c.open(path, false)).unwrap();
            let comp = &o.layout.components[0];
            (comp.addr.clone(), comp.object.0)
        };
        let ((addr, fo), (_, go)) = (object("/f"), object("/g"));
        let db =
            rusqlite::Connection::open(up.cluster.info().manager.dir.join("meta.sqlite")).unwrap();
        let (drive, suite, key): (i64, u8, Vec<u8>) = db
            .query_row("SELECT drive, suite, part_key FROM drives", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        drop(db);
        let suite = nasd_proto::Suite::from_u8(suite).unwrap().name();
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let key_file = up.dir.path().join("partition.key");
        std::fs::write(
            &key_file,
            format!(
                "kind = partition\ndrive = {:016x}\nsuite = {suite}\npartition = 1\nkey = {hex}\n",
                drive as u64
            ),
        )
        .unwrap();
        let obj = |args: &[&str], object: u64| -> Vec<u8> {
            let o = object.to_string();
            let mut a = vec![args[0], args[1], "--drive", &addr, "--key"];
            a.push(key_file.to_str().unwrap());
            a.extend(["--partition", "1", "--object", &o]);
            a.extend(&args[2..]);
            let out = up.nasd(&a, &[]);
            assert!(
                out.status.success(),
                "{a:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        let stored = obj(&["obj", "read"], fo);
        assert_eq!(
            stored.len(),
            f.len(),
            "{eint}: the object holds the ciphertext"
        );
        let other = obj(&["obj", "read"], go);
        let put = |at: u64, bytes: &[u8]| {
            let p = up.dir.path().join("piece");
            std::fs::write(&p, bytes).unwrap();
            let at = at.to_string();
            obj(
                &["obj", "write", "--offset", &at, "--in", p.to_str().unwrap()],
                fo,
            );
        };
        let refused = |what: &str| {
            let out = up.nasd(&["cat", "nasd:/f"], &[]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{eint}, {what}: served");
            assert!(out.stdout.is_empty(), "{eint}, {what}: bytes were printed");
            assert!(err.contains("nasd:/f"), "{eint}, {what}: {err}");
        };
        let restore = |what: &str| {
            put(0, &stored);
            obj(&["obj", "setattr", "--size", &stored.len().to_string()], fo);
            let back = up.ok(&["cat", "nasd:/f"]);
            assert!(back.as_bytes() == f.as_slice(), "{eint}, after {what}");
        };
        const B: usize = 64 << 10;
        let mut flipped = stored[70_000..70_001].to_vec();
        flipped[0] ^= 0x20;
        put(70_000, &flipped);
        refused("a flipped byte");
        restore("a flipped byte");
        put(0, &stored[B..2 * B]);
        put(B as u64, &stored[..B]);
        refused("two blocks swapped");
        restore("two blocks swapped");
        put(0, &other[..B]);
        refused("another file's block");
        restore("another file's block");
        obj(&["obj", "setattr", "--size", "100000"], fo);
        refused("the object cut short");
        restore("the object cut short");
        put(stored.len() as u64, &[0u8; 5000]);
        refused("the object extended");
        restore("the object extended");
    }
}

/// A user writes world-readable files, wrapped for the groups every user is in: one of them
/// (`admin`) has no key pair, which only its members may make, so the user's client makes no
/// attempt per file; the other (`users`) gets its key pair from the user's client at the first
/// file. Neither costs round trips per file, and the files read back.
#[test]
fn a_group_without_a_key_pair_costs_no_round_trips_per_write() {
    let up = Up::start(1);
    up.add_user("bob", "bob-pw");
    up.ok(&["mkdir", "--mode", "777", "nasd:/w"]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let bob = rt
        .block_on(nasd_client::files::Client::connect(
            up.session("bob", "bob-pw"),
        ))
        .unwrap();
    let body = b"group-readable".repeat(300);
    let trips = || {
        bob.manager_round_trips
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    rt.block_on(bob.put_bytes("/w/first", &body, 0o644))
        .unwrap();
    let (files, t0) = (10u64, trips());
    for i in 0..files {
        rt.block_on(bob.put_bytes(&format!("/w/f{i}"), &body, 0o644))
            .unwrap();
    }
    let per_file = (trips() - t0) as f64 / files as f64;
    assert!(
        per_file <= 3.0,
        "{per_file} manager round trips per encrypted 4 KiB file"
    );
    for i in 0..files {
        assert_eq!(
            rt.block_on(bob.get_bytes(&format!("/w/f{i}"))).unwrap(),
            body
        );
    }
    let st = up.ok(&["stat", "nasd:/w/f0"]);
    assert!(st.contains("bob"), "bob reads what he wrote: {st}");
}
