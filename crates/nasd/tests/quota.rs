//! Quota escrow (seed 002 §3.2, issue 11 §4) on a real cluster (`nasd up`'s processes): a
//! user with a quota writes until the manager refuses, and what `nasd quota show` says used
//! matches the files; deleting frees room; the drive itself refuses a write past a write
//! capability's escrowed region; streams longer than one escrow chunk go through, on a
//! one-object and a striped layout; the escrow of an aborted or abandoned upload, and of an
//! in-place writer that never returned its capability, comes back — also across a manager
//! killed and restarted.

mod common;
use common::*;

use nasd_client::files::{Client, ESCROW_CHUNK_BYTES};
use nasd_client::handle::{FileHandle, OpenOptions};
use nasd_cluster::NodeId;
use nasd_proto::manager::{MgrStatus, WRITE_END_UNBOUNDED};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ALICE: [(&str, &str); 2] = [("NASD_USER", "alice"), ("NASD_PASSWORD", "alice-pw")];

/// A cluster with user alice owning `/alice`.
fn cluster_with_alice(drives: usize) -> Up {
    let up = Up::start(drives);
    up.add_user("alice", "alice-pw");
    up.ok(&["mkdir", "nasd:/alice"]);
    up.ok(&["chown", "alice", "nasd:/alice"]);
    up
}

/// `nasd quota show USER --json` as the admin: (limit, used, escrowed).
fn quota(up: &Up, user: &str) -> (u64, u64, u64) {
    let v: serde_json::Value =
        serde_json::from_str(&up.ok(&["quota", "show", user, "--json"])).unwrap();
    let q = &v.as_array().unwrap()[0];
    assert_eq!(q["user"], user);
    let n = |k: &str| q[k].as_u64().unwrap();
    (n("limit"), n("used"), n("escrowed"))
}

/// Writes `n` pseudo-random bytes to a local file and copies it to `remote` as alice.
fn cp_as_alice(up: &Up, remote: &str, n: usize, seed: u64) -> std::process::Output {
    let f = up.dir.path().join(format!("local-{seed}"));
    std::fs::write(&f, rand_bytes(n, seed)).unwrap();
    up.nasd(
        &["cp", f.to_str().unwrap(), &format!("nasd:{remote}")],
        &ALICE,
    )
}

fn alice(up: &Up, rt: &tokio::runtime::Runtime) -> Arc<Client> {
    rt.block_on(Client::connect(up.session("alice", "alice-pw")))
        .unwrap()
}

/// Kills the manager (SIGKILL), lets `edit` change its directory, restarts it and waits until
/// it answers.
fn restart_manager(up: &mut Up, edit: impl FnOnce(&Path)) {
    up.kill("manager");
    let mdir = up.cluster.info().manager.dir.clone();
    edit(&mdir);
    let log = up.cluster.log_path(NodeId::Manager);
    up.restart("manager");
    let t0 = Instant::now();
    while !up.nasd(&["ls", "nasd:/"], &[]).status.success() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the manager did not come back: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to `secs`) until `f` holds.
fn wait_for(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "{what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_user_writes_until_the_quota_refuses_and_removing_a_file_makes_room() {
    let mut up = cluster_with_alice(2);
    // A file alice wrote before she had a quota counts once one is set.
    assert!(cp_as_alice(&up, "/alice/old", 100_000, 1).status.success());
    let err = up.fails(&["quota", "set", "alice", "1M"], &ALICE);
    assert!(err.contains("permission denied"), "{err}");
    let set = up.ok(&["quota", "set", "alice", "1M"]);
    assert!(
        set.contains("alice: limit 1048576 B (1.0 MiB), used 100000 B"),
        "{set}"
    );
    assert_eq!(quota(&up, "alice"), (1 << 20, 100_000, 0));
    // Alice sees her own quota, not another user's.
    let own = up.nasd(&["quota", "show"], &ALICE);
    assert!(String::from_utf8_lossy(&own.stdout).contains("used 100000 B"));
    assert!(up
        .fails(&["quota", "show", "admin"], &ALICE)
        .contains("permission denied"));

    // 100000 + 3 x 300000 fits 1 MiB; a fourth file does not.
    for (k, seed) in [(1, 11), (2, 12), (3, 13)] {
        let o = cp_as_alice(&up, &format!("/alice/f{k}"), 300_000, seed);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(quota(&up, "alice"), (1 << 20, 1_000_000, 0));
    let o = cp_as_alice(&up, "/alice/f4", 300_000, 14);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("disk quota exceeded") && err.contains("alice's quota is 1048576 B"),
        "{err}"
    );
    assert!(up
        .fails(&["stat", "nasd:/alice/f4"], &[])
        .contains("no such file"));
    assert_eq!(quota(&up, "alice"), (1 << 20, 1_000_000, 0), "nothing held");

    // Removing a file makes room for the next.
    up.ok(&["rm", "nasd:/alice/f1"]);
    assert_eq!(quota(&up, "alice").1, 700_000);
    assert!(cp_as_alice(&up, "/alice/f4", 300_000, 14).status.success());
    assert_eq!(quota(&up, "alice").1, 1_000_000);
    // An overwrite needs room for all of its new content (the staged objects sit beside
    // the old ones until the commit); cutting a file short frees room at once.
    assert!(!cp_as_alice(&up, "/alice/f2", 300_000, 15).status.success());
    up.ok(&["truncate", "nasd:/alice/f2", "1000"]);
    assert_eq!(quota(&up, "alice").1, 701_000);
    assert!(cp_as_alice(&up, "/alice/f2", 300_000, 15).status.success());
    assert_eq!(quota(&up, "alice").1, 1_000_000);
    assert_eq!(
        up.nasd(&["cat", "nasd:/alice/f2"], &[]).stdout,
        rand_bytes(300_000, 15)
    );

    // Usage is the store's: a manager killed and restarted says the same.
    restart_manager(&mut up, |_| {});
    assert_eq!(quota(&up, "alice"), (1 << 20, 1_000_000, 0));
    // The admin lists every quota; `none` removes it, and then nothing is refused.
    assert!(up.ok(&["quota", "show"]).contains("alice: limit"));
    up.ok(&["quota", "set", "alice", "none"]);
    assert!(up
        .ok(&["quota", "show", "alice"])
        .contains("alice: no quota"));
    assert!(cp_as_alice(&up, "/alice/f5", 300_000, 16).status.success());
}

#[test]
fn the_drive_refuses_a_write_past_the_escrowed_region() {
    let up = cluster_with_alice(1);
    // In-place write grants are for plaintext one-object files (an encrypted one changes
    // copy-on-write, under escrow as a change).
    up.ok(&["layout", "set", "nasd:/alice", "plain"]);
    up.ok(&["quota", "set", "alice", "10M"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = alice(&up, &rt);
    rt.block_on(async {
        c.put_bytes("/alice/f", &[7u8; 1000], 0o644).await.unwrap();
        // A write capability that may grow the file (its size seen by a read) to 5000
        // bytes: 4000 escrowed.
        assert_eq!(c.open("/alice/f", false).await.unwrap().stat.size, 1000);
        let g = c.open_to("/alice/f", true, 5000).await.unwrap();
        assert_eq!(g.write_end, 5000);
        let (addr, t, auth) = g.component(0).unwrap();
        let nasd_client::Auth::Capability(cap) = &auth else {
            panic!("a capability")
        };
        assert_eq!(cap.args.region, nasd_proto::Region::new(0, 5000));
        assert_eq!(quota(&up, "alice"), (10 << 20, 1000, 4000));
        let conn = nasd_client::DriveConn::connect(addr).await.unwrap();
        conn.write(&auth, t, 4990, &[1; 10]).await.unwrap();
        let e = conn.write(&auth, t, 4991, &[1; 10]).await.unwrap_err();
        assert_eq!(
            e.status(),
            Some(nasd_proto::Status::RegionOutsideCapability),
            "{e}"
        );
        // Returning the capability settles: the file's new size is charged, the escrow goes.
        c.return_capability("/alice/f").await.unwrap();
        assert_eq!(quota(&up, "alice"), (10 << 20, 5000, 0));
        assert_eq!(c.size("/alice/f").await.unwrap(), 5000);
        // A user without a quota gets whole objects, as before.
        let admin = Client::connect(up.session("admin", up.admin_password().trim()))
            .await
            .unwrap();
        admin.layout_set("/", "plain").await.unwrap();
        admin.put_bytes("/g", b"x", 0o644).await.unwrap();
        let g = admin.open_to("/g", true, 5000).await.unwrap();
        assert_eq!(g.write_end, WRITE_END_UNBOUNDED);
        let (_, _, auth) = g.component(0).unwrap();
        let nasd_client::Auth::Capability(cap) = &auth else {
            panic!("a capability")
        };
        assert_eq!(cap.args.region, nasd_proto::Region::WHOLE);
    });
}

/// Streams `n` bytes through a file handle (length unknown to the client beforehand) in
/// 1 MiB writes, then closes it; returns the bytes.
async fn stream(c: &Arc<Client>, path: &str, n: usize, seed: u64) -> Result<Vec<u8>, String> {
    let data = rand_bytes(n, seed);
    let o = OpenOptions {
        write: true,
        create: true,
        truncate: true,
        mode: 0o644,
    };
    let h = FileHandle::open(c, path, o)
        .await
        .map_err(|e| e.to_string())?;
    for (k, piece) in data.chunks(1 << 20).enumerate() {
        if let Err(e) = h.write_at((k << 20) as u64, piece).await {
            h.abort().await;
            return Err(e.to_string());
        }
    }
    h.close().await.map_err(|e| e.to_string())?;
    Ok(data)
}

#[test]
fn streams_longer_than_one_escrow_chunk_go_through_on_one_object_and_striped_files() {
    let up = cluster_with_alice(3);
    up.ok(&["mkdir", "--layout", "rs:2+1", "nasd:/alice/rs"]);
    up.ok(&["chown", "alice", "nasd:/alice/rs"]);
    up.ok(&["quota", "set", "alice", "200M"]);
    let n = (ESCROW_CHUNK_BYTES + (16 << 20)) as usize;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = alice(&up, &rt);
    rt.block_on(async {
        let mut used = 0;
        for (path, seed) in [("/alice/one", 1), ("/alice/rs/striped", 2)] {
            let data = stream(&c, path, n, seed).await.unwrap();
            assert!(c.get_bytes(path).await.unwrap() == data, "{path}");
            used += n as u64;
            assert_eq!(quota(&up, "alice"), (200 << 20, used, 0), "{path}");
        }
        assert_eq!(
            up.ok(&["layout", "get", "nasd:/alice/rs"])
                .trim()
                .split(",")
                .next()
                .unwrap(),
            "rs:2+1"
        );
        // A stream that would pass the quota fails (EDQUOT's status) and leaves no file and
        // no escrow behind.
        let e = stream(&c, "/alice/rs/too-big", 48 << 20, 3)
            .await
            .unwrap_err();
        assert!(e.contains("disk quota exceeded"), "{e}");
        assert!(c.stat("/alice/rs/too-big").await.is_err());
        assert_eq!(quota(&up, "alice"), (200 << 20, used, 0));
    });
}

#[test]
fn the_escrow_of_aborted_and_abandoned_writers_comes_back() {
    let mut up = cluster_with_alice(1);
    // Its in-place writer needs a plaintext one-object file.
    up.ok(&["layout", "set", "nasd:/alice", "plain"]);
    let ttl_ms = 3_000u64;
    restart_manager(&mut up, |mdir| {
        let p = mdir.join("manager.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        v["policy"]["write_cap_ttl_ms"] = ttl_ms.into();
        std::fs::write(&p, v.to_string()).unwrap();
    });
    up.ok(&["quota", "set", "alice", "100M"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = alice(&up, &rt);
    rt.block_on(async {
        // Aborted: the escrow goes with the upload, at once.
        let u = c.begin_upload("/alice/a", 0o644).await.unwrap();
        c.upload_write(&u, 0, &[1; 4096]).await.unwrap();
        assert_eq!(quota(&up, "alice").2, ESCROW_CHUNK_BYTES);
        c.abort_upload(&u).await;
        assert_eq!(quota(&up, "alice"), (100 << 20, 0, 0));

        // Abandoned (never committed nor aborted): its escrow holds until its capability
        // expires, then comes back.
        let u = c
            .begin_upload_sized("/alice/b", 0o644, Some(50 << 20))
            .await
            .unwrap();
        c.upload_write(&u, 0, &[2; 4096]).await.unwrap();
        assert_eq!(quota(&up, "alice").2, 50 << 20);
        let Err(e) = c
            .begin_upload_sized("/alice/c", 0o644, Some(60 << 20))
            .await
        else {
            panic!("60 MiB more fit a 100 MiB quota with 50 MiB escrowed");
        };
        assert_eq!(e.status(), Some(MgrStatus::QuotaExceeded), "{e}");
        drop(u);
    });
    wait_for(30, "the abandoned upload's escrow came back", || {
        quota(&up, "alice").2 == 0
    });
    rt.block_on(async {
        let u = c
            .begin_upload_sized("/alice/c", 0o644, Some(60 << 20))
            .await
            .unwrap();
        c.abort_upload(&u).await;
        // An in-place writer that never returns its capability: 2 MiB written into an
        // empty file under a 10 MiB escrow.
        c.put_bytes("/alice/f", b"", 0o644).await.unwrap();
        c.open_to("/alice/f", true, 10 << 20).await.unwrap();
        c.write_at("/alice/f", 0, &vec![3u8; 2 << 20])
            .await
            .unwrap();
        assert_eq!(quota(&up, "alice"), (100 << 20, 0, 10 << 20));
    });
    // The manager dies meanwhile; the escrow it recorded is settled after its restart, once
    // the capability has expired: the 2 MiB are charged and nothing stays held.
    restart_manager(&mut up, |_| {});
    wait_for(60, "the in-place escrow was settled", || {
        quota(&up, "alice") == (100 << 20, 2 << 20, 0)
    });
}

/// Whether this process may mount (root and /dev/fuse); the mount test is skipped otherwise.
fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !(root && Path::new("/dev/fuse").exists()) {
        eprintln!("skipped: mounting needs root and /dev/fuse");
        return false;
    }
    true
}

fn mounted(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

/// `nasd mount` of `remote` at `dir` as alice, unmounted (and its process gone) when dropped.
struct Mount(std::process::Child, std::path::PathBuf);

impl Mount {
    fn start(up: &Up, remote: &str, dir: &Path) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let mut child = std::process::Command::new(NASD)
            .args(["mount", remote, dir.to_str().unwrap()])
            .env("NASD_CONFIG", up.config())
            .envs(ALICE)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !mounted(dir) {
            assert!(child.try_wait().unwrap().is_none(), "nasd mount exited");
            assert!(t0.elapsed() < Duration::from_secs(30), "not mounted");
            std::thread::sleep(Duration::from_millis(20));
        }
        Mount(child, dir.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new(NASD)
            .args(["umount", self.1.to_str().unwrap()])
            .status();
        let t0 = Instant::now();
        while self.0.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A cluster where alice has a quota of 8 MiB, her directory mounted as her.
fn mounted_with_quota() -> (Up, Mount) {
    let up = cluster_with_alice(1);
    up.ok(&["quota", "set", "alice", "8M"]);
    let dir = up.dir.path().join("mnt");
    let m = Mount::start(&up, "nasd:/alice", &dir);
    (up, m)
}

#[test]
fn through_the_mount_a_write_past_the_quota_is_edquot() {
    if !can_mount() {
        return;
    }
    let (up, m) = mounted_with_quota();
    use std::io::Write as _;
    // Within the quota: written and charged.
    std::fs::write(m.1.join("fits"), rand_bytes(3 << 20, 1)).unwrap();
    assert_eq!(quota(&up, "alice").1, 3 << 20);
    // Past it: a write or the sync that sends it fails with EDQUOT. What the file holds
    // then is charged, and within the limit: nothing, unless a close of a descriptor sharing
    // it committed a prefix first (close-to-open; another test thread's fork and exec
    // closes its inherited copy of `f` at exec, which the kernel sends as a flush).
    let big = m.1.join("big");
    let mut f = std::fs::File::create(&big).unwrap();
    let wrote = f.write_all(&rand_bytes(16 << 20, 2));
    let e = wrote.and_then(|_| f.sync_all()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EDQUOT), "{e}");
    // While it is still open, a stat and a new open (sharing the open file) see what can be
    // stored, never the bytes that failed.
    let seen = std::fs::metadata(&big).unwrap().len();
    let read = std::fs::read(&big).map(|b| b.len() as u64);
    assert!(
        seen <= 5 << 20 && read.as_ref().ok() == Some(&seen),
        "{seen} {read:?}"
    );
    drop(f);
    let kept = std::fs::metadata(&big).unwrap().len();
    assert!(kept <= 5 << 20, "{kept} bytes kept past the quota");
    assert_eq!(quota(&up, "alice"), (8 << 20, (3 << 20) + kept, 0));
    drop(m);
}

/// A close of one descriptor commits what was written through any (close-to-open): a write
/// past the quota after it fails with EDQUOT and leaves the committed prefix, charged; from
/// the failure on, the open file shows what is stored, never the bytes that failed.
#[test]
fn through_the_mount_a_close_commits_and_a_later_write_past_the_quota_keeps_it() {
    if !can_mount() {
        return;
    }
    let (up, m) = mounted_with_quota();
    use std::io::Write as _;
    let mut f = std::fs::File::create(m.1.join("big")).unwrap();
    let head = rand_bytes(2 << 20, 3);
    f.write_all(&head).unwrap();
    // A second descriptor of the same open file, closed: the kernel sends a flush.
    drop(f.try_clone().unwrap());
    assert_eq!(quota(&up, "alice"), (8 << 20, 2 << 20, 0));
    let wrote = f.write_all(&rand_bytes(16 << 20, 4));
    let e = wrote.and_then(|_| f.sync_all()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EDQUOT), "{e}");
    // While it is still open, the file shows what is stored, not the bytes that failed: to a
    // stat, and to a new open (which shares the open file, as another descriptor would).
    let seen = std::fs::metadata(m.1.join("big")).unwrap().len();
    let read = std::fs::read(m.1.join("big")).unwrap();
    assert!(
        seen <= 8 << 20 && read.len() as u64 == seen,
        "{seen} {}",
        read.len()
    );
    drop(f);
    let kept = std::fs::read(m.1.join("big")).unwrap();
    assert!(
        kept.len() >= head.len() && kept.len() <= 8 << 20,
        "{}",
        kept.len()
    );
    assert_eq!(kept[..head.len()], head[..], "the committed prefix");
    assert_eq!(quota(&up, "alice"), (8 << 20, kept.len() as u64, 0));
    drop(m);
}
