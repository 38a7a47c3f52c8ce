//! `nasd mount` against a real cluster, through the kernel: an fsx-style run of random
//! writes, reads, truncates and reopens with ordinary file calls checked against a model
//! file; POSIX edge cases (rename over a file, hard-link counts, ENOTEMPTY, ENAMETOOLONG,
//! ELOOP, permission denied for another user); close-to-open consistency between two mounts;
//! and a file copied in and out whole. Needs root and /dev/fuse (skipped otherwise).

mod common;
use common::mount::*;
use common::*;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `ops` random operations on `path` through the kernel, checked against a model.
fn fsx(path: &Path, ops: usize, seed: u64) {
    const FILE_BYTES_MAX: u64 = 1 << 20;
    let mut rng = Rng(seed);
    let mut model: Vec<u8> = vec![];
    let open = |truncate: bool| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(truncate)
            .open(path)
            .unwrap()
    };
    let mut f = open(true);
    for op in 0..ops {
        let ctx = format!("op {op} (seed {seed})");
        match rng.below(100) {
            0..=39 => {
                let off = rng.below(FILE_BYTES_MAX);
                let len = 1 + rng.below(100 << 10) as usize;
                let data: Vec<u8> = (0..len).map(|i| (i as u64 * 7 + op as u64) as u8).collect();
                f.write_all_at(&data, off).unwrap();
                if model.len() < off as usize + len {
                    model.resize(off as usize + len, 0);
                }
                model[off as usize..off as usize + len].copy_from_slice(&data);
            }
            40..=69 => {
                let off = rng.below(model.len() as u64 + 100);
                let len = rng.below(150 << 10) as usize;
                let mut buf = vec![0u8; len];
                let mut got = 0;
                while got < len {
                    let n = f.read_at(&mut buf[got..], off + got as u64).unwrap();
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                let end = (off as usize + len).min(model.len());
                let want = if (off as usize) < end {
                    &model[off as usize..end]
                } else {
                    &[][..]
                };
                assert!(&buf[..got] == want, "{ctx}: read {off}+{len}: {got} bytes");
            }
            70..=79 => {
                let n = rng.below(FILE_BYTES_MAX);
                f.set_len(n).unwrap();
                model.resize(n as usize, 0);
            }
            80..=89 => f.sync_all().unwrap(),
            _ => {
                drop(f);
                assert!(std::fs::read(path).unwrap() == model, "{ctx}: after close");
                let truncate = rng.below(3) == 0;
                f = open(truncate);
                if truncate {
                    model.clear();
                }
            }
        }
        assert_eq!(
            f.metadata().unwrap().len(),
            model.len() as u64,
            "{ctx}: size"
        );
    }
    drop(f);
    assert!(std::fs::read(path).unwrap() == model, "at the end");
}

#[test]
fn the_mount_behaves_as_posix_and_as_the_cluster() {
    if !can_mount() {
        return;
    }
    let up = Up::start(3);
    up.ok(&["mkdir", "--layout", "rs:2+1/64K", "nasd:/ec"]);
    let m = Mounted::start(&up, "nasd:/", &up.dir.path().join("m"), &[]);
    let root = m.dir.clone();

    // Random operations against a model, on a one-object and an erasure-coded file.
    fsx(&root.join("one"), 1500, 0x5eed_0001);
    fsx(&root.join("ec/f"), 600, 0x5eed_0002);

    // A descriptor that wrote and synced, still open (as one closed but not yet released
    // by the kernel is), does not stand for the size another descriptor cut the file to.
    let cut = root.join("cut");
    let a = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&cut)
        .unwrap();
    a.write_all_at(&[1u8; 1000], 0).unwrap();
    a.sync_all().unwrap();
    let b = OpenOptions::new().write(true).open(&cut).unwrap();
    b.set_len(10).unwrap();
    assert_eq!(b.metadata().unwrap().len(), 10);
    assert_eq!(std::fs::metadata(&cut).unwrap().len(), 10);
    drop((a, b));
    assert_eq!(std::fs::read(&cut).unwrap(), vec![1u8; 10]);
    assert!(up
        .ok(&["stat", "--json", "nasd:/one"])
        .contains("\"kind\":\"file\""));

    // What the mount wrote, the cluster has; and back.
    let big = nasd_cluster::pseudo_random(9 << 20, 3);
    std::fs::write(root.join("big"), &big).unwrap();
    let out = up.dir.path().join("big.out");
    up.ok(&["cp", "nasd:/big", out.to_str().unwrap()]);
    assert!(std::fs::read(&out).unwrap() == big);
    up.ok(&["cp", out.to_str().unwrap(), "nasd:/big2"]);
    assert!(std::fs::read(root.join("big2")).unwrap() == big);
    // A file this large opened for reading goes past the page cache (direct I/O): reads at
    // odd offsets and sizes, and a shared read-only map, still see its bytes.
    let f = std::fs::File::open(root.join("big2")).unwrap();
    for (off, len) in [
        (0usize, 1usize),
        (4095, 3),
        (1 << 20, 200_000),
        ((9 << 20) - 7, 7),
    ] {
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, off as u64).unwrap();
        assert!(buf == big[off..off + len], "pread at {off}+{len}");
    }
    let mut past = [0u8; 16];
    assert_eq!(f.read_at(&mut past, (9 << 20) - 4).unwrap(), 4);
    // SAFETY: a fresh shared read-only map of `f`'s whole length, unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            big.len(),
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // SAFETY: `map` is a readable mapping of `big.len()` bytes until the munmap below.
    let mapped = unsafe { std::slice::from_raw_parts(map as *const u8, big.len()) };
    assert!(mapped == &big[..], "the shared map shows the file");
    // SAFETY: unmaps exactly what was mapped above; `mapped` is not used after.
    unsafe { libc::munmap(map, big.len()) };
    drop(f);

    // POSIX names through the kernel.
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/a"), b"A").unwrap();
    std::fs::write(root.join("d/b"), b"B").unwrap();
    std::fs::rename(root.join("d/a"), root.join("d/b")).unwrap();
    assert_eq!(
        std::fs::read(root.join("d/b")).unwrap(),
        b"A",
        "rename over a file"
    );
    assert!(!root.join("d/a").exists());
    std::fs::hard_link(root.join("d/b"), root.join("d/c")).unwrap();
    assert_eq!(std::fs::metadata(root.join("d/b")).unwrap().nlink(), 2);
    std::fs::remove_file(root.join("d/b")).unwrap();
    assert_eq!(std::fs::metadata(root.join("d/c")).unwrap().nlink(), 1);
    std::os::unix::fs::symlink("c", root.join("d/l")).unwrap();
    assert_eq!(std::fs::read(root.join("d/l")).unwrap(), b"A");
    assert_eq!(
        std::fs::read_link(root.join("d/l")).unwrap(),
        Path::new("c")
    );
    assert_eq!(up.ok(&["cat", "nasd:/d/l"]), "A");
    let err = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
    assert_eq!(
        err(std::fs::remove_dir(root.join("d"))),
        Some(libc::ENOTEMPTY)
    );
    let long = root.join("x".repeat(300));
    assert_eq!(err(std::fs::write(&long, b"")), Some(libc::ENAMETOOLONG));
    std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
    assert_eq!(
        err(std::fs::read(root.join("loop")).map(|_| ())),
        Some(libc::ELOOP)
    );
    // An unlinked file stays usable through a descriptor that has it open, and goes at
    // its last close; a renamed open file keeps its writes.
    {
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(root.join("d/open"))
            .unwrap();
        f.write_all(b"still here").unwrap();
        std::fs::remove_file(root.join("d/open")).unwrap();
        assert!(!root.join("d/open").exists());
        let mut buf = vec![0u8; 10];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, b"still here");
        f.write_all_at(b"STILL", 0).unwrap();
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, b"STILL here");
        let mut g = File::create(root.join("d/moving")).unwrap();
        g.write_all(b"one").unwrap();
        std::fs::rename(root.join("d/moving"), root.join("d/moved")).unwrap();
        g.write_all(b" two").unwrap();
    }
    assert_eq!(std::fs::read(root.join("d/moved")).unwrap(), b"one two");
    std::fs::remove_file(root.join("d/moved")).unwrap();
    // The kernel sends the release that removes the hidden name after close(2) returned
    // (FUSE releases are asynchronous, as NFS's silly-rename cleanup is).
    let names = || -> Vec<String> {
        std::fs::read_dir(root.join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    let t0 = Instant::now();
    while names().len() != 2 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        names().len(),
        2,
        "the hidden name went at the last close: {:?}",
        names()
    );

    // Another user's mount: close-to-open between mounts, and permissions enforced.
    up.add_user("bob", "bob-pw");
    let bob = Mounted::start(
        &up,
        "nasd:/",
        &up.dir.path().join("bob"),
        &[("NASD_USER", "bob"), ("NASD_PASSWORD", "bob-pw")],
    );
    std::fs::write(root.join("shared"), b"first").unwrap();
    assert_eq!(std::fs::read(bob.dir.join("shared")).unwrap(), b"first");
    {
        let mut f = File::create(root.join("shared")).unwrap();
        f.write_all(b"second, longer").unwrap();
    }
    assert_eq!(
        std::fs::read(bob.dir.join("shared")).unwrap(),
        b"second, longer"
    );
    let denied = std::fs::write(bob.dir.join("mine"), b"x").unwrap_err();
    assert_eq!(denied.raw_os_error(), Some(libc::EACCES), "{denied}");
    std::fs::set_permissions(
        root.join("shared"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let denied = std::fs::read(bob.dir.join("shared")).unwrap_err();
    assert_eq!(denied.raw_os_error(), Some(libc::EACCES), "{denied}");

    // chown(2) through the mount: the kernel's numbers are the cluster's uids and gids; an
    // admin gives a file away, its new owner may not, and an id no user has is EINVAL.
    std::fs::create_dir(root.join("bobs")).unwrap();
    up.ok(&["chown", "bob", "nasd:/bobs"]);
    let bob_uid = std::fs::metadata(root.join("bobs")).unwrap().uid();
    let admin_uid = std::fs::metadata(root.join("shared")).unwrap().uid();
    assert_ne!(bob_uid, admin_uid);
    std::os::unix::fs::chown(root.join("shared"), Some(bob_uid), None).unwrap();
    assert_eq!(
        std::fs::metadata(root.join("shared")).unwrap().uid(),
        bob_uid
    );
    assert!(up.ok(&["ls", "-l", "nasd:/shared"]).contains("bob"));
    assert_eq!(
        std::fs::read(bob.dir.join("shared")).unwrap(),
        b"second, longer"
    );
    let refused = std::os::unix::fs::chown(bob.dir.join("shared"), Some(admin_uid), None);
    assert_eq!(refused.unwrap_err().raw_os_error(), Some(libc::EPERM));
    let unknown = std::os::unix::fs::chown(root.join("shared"), Some(4_242_424), None);
    assert_eq!(unknown.unwrap_err().raw_os_error(), Some(libc::EINVAL));
}

/// `setxattr(2)` and friends on a path, as `Result`s of errno.
mod xattr {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn c(p: &Path) -> CString {
        CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    fn errno<T: PartialOrd + Default>(r: T) -> Result<T, i32> {
        if r < T::default() {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap())
        } else {
            Ok(r)
        }
    }

    pub fn set(p: &Path, name: &str, value: &[u8], flags: i32) -> Result<(), i32> {
        let n = CString::new(name).unwrap();
        // SAFETY: valid C strings and a buffer of the given length.
        errno(unsafe {
            libc::setxattr(
                c(p).as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        })
        .map(|_| ())
    }

    pub fn get(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
        let n = CString::new(name).unwrap();
        let mut buf = vec![0u8; 65536];
        // SAFETY: valid C strings and a buffer of the given length.
        let len = errno(unsafe {
            libc::getxattr(
                c(p).as_ptr(),
                n.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        })?;
        buf.truncate(len as usize);
        Ok(buf)
    }

    pub fn list(p: &Path) -> Result<Vec<String>, i32> {
        let mut buf = vec![0u8; 65536];
        // SAFETY: a valid C string and a buffer of the given length.
        let len =
            errno(unsafe { libc::listxattr(c(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
        Ok(buf[..len as usize]
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8(s.to_vec()).unwrap())
            .collect())
    }

    pub fn remove(p: &Path, name: &str) -> Result<(), i32> {
        let n = CString::new(name).unwrap();
        // SAFETY: valid C strings.
        errno(unsafe { libc::removexattr(c(p).as_ptr(), n.as_ptr()) }).map(|_| ())
    }
}

/// Stats `path` in a loop on a thread of its own until the returned guard is dropped.
struct StatLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl StatLoop {
    fn start(path: &Path) -> StatLoop {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, p) = (stop.clone(), path.to_path_buf());
        let thread = std::thread::spawn(move || {
            let mut n = 0;
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::metadata(&p);
                n += 1;
            }
            n
        });
        StatLoop {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the loop; how many stats it made.
    fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Two shell loops appending `LINES` lines each to `dir/log` with `>>` (open, `O_APPEND`
/// write, close per line) while this process stats the file: the lines the file holds.
fn appenders_beside_stats(dir: &Path, lines: usize) -> Vec<String> {
    let log = dir.join("log");
    std::fs::write(&log, b"").unwrap();
    let stats = StatLoop::start(&log);
    let writers: Vec<Child> = ["a", "b"]
        .iter()
        .map(|w| {
            Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "i=1; while [ $i -le {lines} ]; do echo \"{w} $i\" >> \"$0\"; i=$((i+1)); done"
                ))
                .arg(&log)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut w in writers {
        assert!(w.wait().unwrap().success());
    }
    assert!(stats.stop() > 0, "the stat loop ran");
    let text = std::fs::read_to_string(&log).unwrap();
    text.lines().map(str::to_string).collect()
}

/// Rounds of: write a file, close it, read it back at once, while another thread stats it;
/// how many rounds read back something else.
fn rewrites_beside_stats(dir: &Path, rounds: usize) -> usize {
    (0..rounds)
        .filter(|&r| {
            let path = dir.join(format!("round-{r}"));
            let stats = StatLoop::start(&path);
            let data = nasd_cluster::pseudo_random(5000 + r, r as u64);
            std::fs::write(&path, &data).unwrap();
            let back = std::fs::read(&path).unwrap();
            stats.stop();
            back != data
        })
        .count()
}

/// Regression (issue 20): two processes appending with `O_APPEND` while a third stats the
/// file lost lines, and a file written, closed and read back at once read as empty while
/// another process stat'ed it: a stat answered with the size from before a commit here, and
/// the kernel placed the next append on top of the last line. Every descriptor of a file now
/// shares one handle, and a stat that raced a commit is taken again (nasd-fuse `open.rs`).
#[test]
fn appenders_and_rewriters_beside_a_stat_loop_lose_nothing() {
    if !can_mount() {
        return;
    }
    const LINES: usize = 300;
    let up = Up::start(2);
    let m = Mounted::start(&up, "nasd:/", &up.dir.path().join("m"), &[]);
    let local = up.dir.path().join("local");
    std::fs::create_dir(&local).unwrap();
    for dir in [&local, &m.dir] {
        let got = appenders_beside_stats(dir, LINES);
        assert_eq!(got.len(), 2 * LINES, "{}: lines kept", dir.display());
        for w in ["a", "b"] {
            let mine: Vec<&String> = got.iter().filter(|l| l.starts_with(w)).collect();
            let want: Vec<String> = (1..=LINES).map(|i| format!("{w} {i}")).collect();
            assert!(
                mine.iter()
                    .map(|l| l.as_str())
                    .eq(want.iter().map(|l| l.as_str())),
                "{}: writer {w}'s lines, in order",
                dir.display()
            );
        }
        assert_eq!(rewrites_beside_stats(dir, 30), 0, "{}", dir.display());
    }

    // An unlinked file still open answers through its descriptor every time, with no name
    // left (nlink 0), and can still be cut.
    let path = m.dir.join("gone");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.write_all_at(b"0123456789", 0).unwrap();
    std::fs::remove_file(&path).unwrap();
    let stats = StatLoop::start(&path);
    for n in (1..=10u64).rev() {
        let md = f.metadata().unwrap();
        assert_eq!((md.len(), md.nlink()), (n, 0), "fstat of the unlinked file");
        let mut buf = vec![0u8; n as usize];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, &b"0123456789"[..n as usize]);
        f.set_len(n - 1).unwrap();
    }
    stats.stop();
}

/// `sh -c SCRIPT` as local uid `uid` (group `gid`) in `dir`: its exit code and output; -1 and
/// the error when it could not start there (a `chdir` refused).
fn as_uid(uid: u32, gid: u32, dir: &Path, script: &str) -> (i32, String) {
    use std::os::unix::process::CommandExt;
    let o = match Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .uid(uid)
        .gid(gid)
        .output()
    {
        Ok(o) => o,
        Err(e) => return (-1, e.to_string()),
    };
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    (o.status.code().unwrap_or(-1), out)
}

/// Issue 20 §2: one mount serves every local user as their own nasd user. Root mounts with
/// `--allow-other` and a map of local ids to nasd names; each mapped uid writes with its own
/// key (the manager records it as the owner), reads only what the manager lets that user
/// read, and sees owners as its local ids; root's `chown` to a local uid gives the file to
/// the nasd user it maps to; a uid with no login is refused everything.
#[test]
fn one_mount_serves_each_local_user_as_their_own_nasd_user() {
    if !can_mount() {
        return;
    }
    const ALICE: u32 = 60_001;
    const BOB: u32 = 60_002;
    const NOBODY: u32 = 60_003;
    const USERS_GID: u32 = 60_010;
    let up = Up::start(1);
    let keys = up.dir.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    for u in ["alice", "bob"] {
        let k = keys.join(format!("{u}.key"));
        up.ok(&["user", "keygen", "--out", k.to_str().unwrap()]);
        let pubk = format!("{}.pub", k.display());
        up.ok(&["user", "add", u, "--public-key", &pubk]);
    }
    up.ok(&["mkdir", "nasd:/home"]);
    up.ok(&["chmod", "777", "nasd:/home"]);
    let map = up.dir.path().join("users.map");
    std::fs::write(
        &map,
        format!(
            "user {ALICE} alice {}\nuser {BOB} bob {}\ngroup {USERS_GID} users\n",
            keys.join("alice.key").display(),
            keys.join("bob.key").display()
        ),
    )
    .unwrap();
    let dir = up.dir.path().join("m");
    let m = Mounted::start_with(
        &up,
        &["--allow-other", "--users", map.to_str().unwrap(), "nasd:/"],
        &dir,
        &[],
    );
    // The test directory's parents must let the local users reach the mount.
    let mut p = m.dir.clone();
    while let Some(parent) = p.parent() {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(parent).unwrap().permissions().mode();
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(mode | 0o011)).unwrap();
        p = parent.to_path_buf();
    }
    let home = m.dir.join("home");

    let (rc, out) = as_uid(
        ALICE,
        USERS_GID,
        &home,
        "umask 077; echo secret > a && cat a",
    );
    assert_eq!(
        (rc, out.as_str()),
        (0, "secret\n"),
        "alice writes and reads"
    );
    let md = std::fs::metadata(home.join("a")).unwrap();
    assert_eq!(
        (md.uid(), md.gid(), md.mode() & 0o777),
        (ALICE, USERS_GID, 0o600)
    );
    assert!(
        up.ok(&["stat", "--json", "nasd:/home/a"])
            .contains("\"owner\":\"alice\""),
        "the manager records alice as the writer"
    );
    let (rc, out) = as_uid(BOB, USERS_GID, &home, "cat a");
    assert_ne!(rc, 0, "bob read alice's 0600 file: {out}");
    assert!(out.contains("Permission denied"), "{out}");
    let (rc, out) = as_uid(BOB, USERS_GID, &home, "echo mine > b && ls -n b");
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains(&format!(" {BOB} {USERS_GID} ")), "{out}");

    // A uid with no nasd login is refused, not served as the mounter.
    let (rc, out) = as_uid(NOBODY, NOBODY, &home, "ls");
    assert_ne!(rc, 0, "a uid with no login listed the mount: {out}");
    let (rc, _) = as_uid(NOBODY, NOBODY, &m.dir, "cat home/b");
    assert_ne!(rc, 0, "a uid with no login read a file");

    // root gives alice's file to bob by local uid: the manager's owner is bob. Its key is
    // wrapped for alice alone, and root's client holds no wrap to add one for bob (files are
    // encrypted end to end), so alice shares it first.
    let alice_key = keys.join("alice.key");
    let o = up.nasd(
        &["share", "nasd:/home/a", "--user", "bob"],
        &[
            ("NASD_USER", "alice"),
            ("NASD_KEY", alice_key.to_str().unwrap()),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (rc, _) = as_uid(BOB, USERS_GID, &home, "cat a");
    assert_ne!(rc, 0, "the mode still keeps bob out");
    std::os::unix::fs::chown(home.join("a"), Some(BOB), None).unwrap();
    assert!(up
        .ok(&["stat", "--json", "nasd:/home/a"])
        .contains("\"owner\":\"bob\""));
    assert_eq!(std::fs::metadata(home.join("a")).unwrap().uid(), BOB);
    let (rc, out) = as_uid(BOB, USERS_GID, &home, "cat a");
    assert_eq!(
        (rc, out.as_str()),
        (0, "secret\n"),
        "bob owns and reads it now"
    );
}

/// `renameat2(from, to, flags)` in the current directory's terms; the errno on failure.
fn renameat2(from: &Path, to: &Path, flags: u32) -> Result<(), i32> {
    let c = |p: &Path| std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let (f, t) = (c(from), c(to));
    // SAFETY: both are NUL-terminated paths valid for the call; AT_FDCWD is a valid dirfd.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap()),
    }
}

/// `utimensat` of `path` with atime and mtime as (seconds, nanoseconds), `UTIME_OMIT` for
/// `None`; `nofollow` for the link itself.
fn utimensat(path: &Path, atime: Option<(i64, i64)>, mtime: Option<(i64, i64)>, nofollow: bool) {
    let ts = |t: Option<(i64, i64)>| match t {
        Some((s, ns)) => libc::timespec {
            tv_sec: s,
            tv_nsec: ns,
        },
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    };
    let times = [ts(atime), ts(mtime)];
    let p = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let flags = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    // SAFETY: `p` is NUL-terminated and `times` two valid timespecs, for the call.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), flags) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// Issue 20 §1: FIFOs, sockets and device nodes are namespace entries (a FIFO passes data
/// through the kernel; `nodev` keeps devices shut); `chown -h` and `touch -h` change a link,
/// never its target; access, modify and change times are POSIX's (`relatime` for reads);
/// `RENAME_NOREPLACE` and `RENAME_EXCHANGE`; `statfs` shows the drives' bytes and the user's
/// quota.
#[test]
fn special_files_times_link_owners_rename_flags_and_statfs_are_posix() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    if !can_mount() {
        return;
    }
    let up = Up::start(2);
    let m = Mounted::start(&up, "nasd:/", &up.dir.path().join("m"), &[]);
    let d = m.dir.clone();

    // Special files.
    let fifo = d.join("fifo");
    let p = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `p` is a NUL-terminated path for the call.
    assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o640) }, 0);
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(std::fs::metadata(&fifo).unwrap().mode() & 0o777, 0o640);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, b"through the pipe").unwrap())
    };
    assert_eq!(std::fs::read(&fifo).unwrap(), b"through the pipe");
    writer.join().unwrap();
    let dev = d.join("null2");
    let p = std::ffi::CString::new(dev.to_str().unwrap()).unwrap();
    let rdev = libc::makedev(1, 3);
    // SAFETY: `p` is a NUL-terminated path for the call.
    assert_eq!(
        unsafe { libc::mknod(p.as_ptr(), libc::S_IFCHR | 0o666, rdev) },
        0
    );
    let md = std::fs::metadata(&dev).unwrap();
    assert!(md.file_type().is_char_device());
    assert_eq!(md.rdev(), rdev);
    assert!(
        std::fs::read(&dev).is_err(),
        "nodev: a device node opens nothing"
    );
    let sock = d.join("sock");
    let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    assert!(std::fs::metadata(&sock).unwrap().file_type().is_socket());
    drop(l);
    assert!(up.ok(&["ls", "-l", "nasd:/"]).contains("prw-r-----"));
    for f in [&fifo, &dev, &sock] {
        std::fs::remove_file(f).unwrap();
    }

    // A link's own owners and times; its target keeps its own.
    up.add_user("bob", "bob-pw");
    std::fs::write(d.join("target"), b"t").unwrap();
    std::os::unix::fs::symlink("target", d.join("link")).unwrap();
    let bob_uid = up
        .ok(&["user", "list", "--json"])
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|u| u["name"] == "bob")
        .unwrap()["uid"]
        .as_u64()
        .unwrap() as u32;
    std::os::unix::fs::lchown(d.join("link"), Some(bob_uid), None).unwrap();
    assert_eq!(
        std::fs::symlink_metadata(d.join("link")).unwrap().uid(),
        bob_uid
    );
    assert_ne!(std::fs::metadata(d.join("target")).unwrap().uid(), bob_uid);
    utimensat(
        &d.join("link"),
        Some((1_000_000_000, 0)),
        Some((1_100_000_000, 0)),
        true,
    );
    let link = std::fs::symlink_metadata(d.join("link")).unwrap();
    assert_eq!((link.atime(), link.mtime()), (1_000_000_000, 1_100_000_000));
    assert_ne!(
        std::fs::metadata(d.join("target")).unwrap().mtime(),
        1_100_000_000
    );

    // Times: atime apart from mtime; ctime moves with a chmod; a read moves an atime that is
    // not after the mtime (relatime), and not again within the day.
    let f = d.join("times");
    std::fs::write(&f, b"x").unwrap();
    utimensat(&f, Some((2_000_000_000, 500_000_000)), None, false);
    let md = std::fs::metadata(&f).unwrap();
    assert_eq!((md.atime(), md.atime_nsec()), (2_000_000_000, 500_000_000));
    assert_ne!(md.mtime(), 2_000_000_000, "mtime left as it was");
    utimensat(&f, Some((1_000, 0)), Some((2_000, 0)), false);
    let before = std::fs::metadata(&f).unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let after = std::fs::metadata(&f).unwrap();
    assert!(
        (after.ctime(), after.ctime_nsec()) > (before.ctime(), before.ctime_nsec()),
        "chmod moved ctime"
    );
    assert_eq!(after.atime(), 1_000);
    std::fs::read(&f).unwrap();
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64; // The access time moves in the background; the kernel may keep the old one a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&f).unwrap().atime() < t0 - 5 {
        assert!(
            Instant::now() < deadline,
            "a read moved the old atime (relatime)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // rename flags.
    std::fs::write(d.join("a"), b"A").unwrap();
    std::fs::write(d.join("b"), b"B").unwrap();
    assert_eq!(
        renameat2(&d.join("a"), &d.join("b"), libc::RENAME_NOREPLACE),
        Err(libc::EEXIST)
    );
    assert_eq!(std::fs::read(d.join("b")).unwrap(), b"B");
    renameat2(&d.join("a"), &d.join("c"), libc::RENAME_NOREPLACE).unwrap();
    renameat2(&d.join("c"), &d.join("b"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(std::fs::read(d.join("b")).unwrap(), b"A");
    assert_eq!(std::fs::read(d.join("c")).unwrap(), b"B");
    assert_eq!(
        renameat2(&d.join("c"), &d.join("nope"), libc::RENAME_EXCHANGE),
        Err(libc::ENOENT)
    );

    // statfs: the drives' bytes, then the mounter's quota once one is set.
    let vfs = |p: &Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: an all-zero statvfs is a valid out parameter.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is NUL-terminated and `s` valid for the call.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
        (s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize)
    };
    let (total, free) = vfs(&d);
    assert!(
        total > 0 && free <= total && total != 1 << 40,
        "{total} {free}"
    );
    up.ok(&["quota", "set", "admin", "64M"]);
    let (total, free) = vfs(&d);
    assert_eq!(total, 64 << 20);
    assert!(free <= total);
}

#[test]
fn extended_attributes_through_the_mount_are_the_namespaces() {
    if !can_mount() {
        return;
    }
    let up = Up::start(2);
    let m = Mounted::start(&up, "nasd:/", &up.dir.path().join("m"), &[]);
    let f = m.dir.join("f");
    std::fs::write(&f, b"data").unwrap();
    assert_eq!(xattr::get(&f, "user.colour"), Err(libc::ENODATA));
    xattr::set(&f, "user.colour", b"blue", 0).unwrap();
    xattr::set(&f, "user.empty", b"", 0).unwrap();
    assert_eq!(xattr::get(&f, "user.colour").unwrap(), b"blue");
    assert_eq!(xattr::get(&f, "user.empty").unwrap(), b"");
    assert_eq!(
        xattr::list(&f).unwrap(),
        vec!["user.colour".to_string(), "user.empty".to_string()]
    );
    assert_eq!(
        xattr::set(&f, "user.colour", b"red", libc::XATTR_CREATE),
        Err(libc::EEXIST)
    );
    assert_eq!(
        xattr::set(&f, "user.none", b"x", libc::XATTR_REPLACE),
        Err(libc::ENODATA)
    );
    assert_eq!(
        xattr::set(&f, "trusted.x", b"x", 0),
        Err(libc::ENOTSUP),
        "only user. attributes"
    );
    assert_eq!(
        xattr::set(&f, "user.big", &vec![7u8; 70 << 10], 0),
        Err(libc::E2BIG)
    );
    // Writing the file keeps its attributes; removing one removes it.
    std::fs::write(&f, b"new data").unwrap();
    assert_eq!(xattr::get(&f, "user.colour").unwrap(), b"blue");
    xattr::remove(&f, "user.colour").unwrap();
    assert_eq!(xattr::remove(&f, "user.colour"), Err(libc::ENODATA));
    assert_eq!(xattr::list(&f).unwrap(), vec!["user.empty".to_string()]);
}

/// Two mounts with AFS callbacks (seed 002 §3.2): the kernel of each keeps pages, attributes
/// and names, and a change made through the other drops them before the change returns, so
/// the next read, stat or lookup sees it at once, not after a time to live.
#[test]
fn a_change_on_one_mount_drops_what_the_other_mount_cached() {
    if !can_mount() {
        return;
    }
    let up = Up::start(1);
    let a = Mounted::start(&up, "nasd:/", &up.dir.path().join("a"), &[]);
    let b = Mounted::start(&up, "nasd:/", &up.dir.path().join("b"), &[]);
    std::fs::write(a.dir.join("f"), b"one").unwrap();
    for _ in 0..3 {
        assert_eq!(std::fs::read(b.dir.join("f")).unwrap(), b"one");
    }
    // Same length, so no size change could give the new bytes away.
    std::fs::write(a.dir.join("f"), b"two").unwrap();
    assert_eq!(std::fs::read(b.dir.join("f")).unwrap(), b"two");
    // Attributes.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&b.dir.join("f")), 0o644);
    std::fs::set_permissions(
        a.dir.join("f"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    assert_eq!(mode(&b.dir.join("f")), 0o600);
    // Names.
    assert!(b.dir.join("f").exists());
    std::fs::rename(a.dir.join("f"), a.dir.join("g")).unwrap();
    assert!(!b.dir.join("f").exists(), "a renamed name still resolves");
    assert_eq!(std::fs::read(b.dir.join("g")).unwrap(), b"two");
    // Absent names: b's kernel keeps each absence it looked up, and every way a makes a
    // name (create, mkdir, symlink, link, rename onto it) drops it before returning.
    let names = ["n1", "n2", "n3", "n4", "n5"];
    for n in names {
        for _ in 0..2 {
            assert!(b.dir.join(n).symlink_metadata().is_err(), "{n} before");
        }
    }
    std::fs::write(a.dir.join("n1"), b"1").unwrap();
    std::fs::create_dir(a.dir.join("n2")).unwrap();
    std::os::unix::fs::symlink("n1", a.dir.join("n3")).unwrap();
    std::fs::hard_link(a.dir.join("n1"), a.dir.join("n4")).unwrap();
    std::fs::rename(a.dir.join("g"), a.dir.join("n5")).unwrap();
    for n in names {
        assert!(b.dir.join(n).symlink_metadata().is_ok(), "{n} made on a");
    }
    std::fs::rename(a.dir.join("n5"), a.dir.join("g")).unwrap();
    std::fs::create_dir(a.dir.join("d")).unwrap();
    std::fs::write(a.dir.join("d/x"), b"x").unwrap();
    assert_eq!(std::fs::read(b.dir.join("d/x")).unwrap(), b"x");
    std::fs::rename(a.dir.join("d"), a.dir.join("e")).unwrap();
    assert!(
        !b.dir.join("d/x").exists(),
        "a path through a renamed directory"
    );
    assert_eq!(std::fs::read(b.dir.join("e/x")).unwrap(), b"x");
    // And the other way round.
    std::fs::write(b.dir.join("e/x"), b"y").unwrap();
    assert_eq!(std::fs::read(a.dir.join("e/x")).unwrap(), b"y");
}

/// `nasd bench mount` on a cluster of its own: a JSON cell per directory and transfer, each
/// with a time per round for both paths and every figure positive.
#[test]
fn bench_mount_reports_every_cell_as_json() {
    if !can_mount() {
        return;
    }
    let (_, cells) = json_lines_of(&[
        "bench",
        "mount",
        "--quick",
        "--json",
        "--rounds",
        "2",
        "--size-mib",
        "2",
        "--files",
        "5",
        "--drives",
        "1",
        "--only",
        "transfers",
    ]);
    let mut seen: Vec<String> = cells
        .iter()
        .map(|c| format!("{} {}", c["protection"], c["transfer"]).replace('"', ""))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            "encrypted read",
            "encrypted small-files",
            "encrypted write",
            "plain read",
            "plain small-files",
            "plain write"
        ]
    );
    for c in &cells {
        assert_eq!(c["ratios"].as_array().unwrap().len(), 2, "{c}");
        for k in ["nasd_cp_s", "mount_s", "ratio"] {
            assert!(c[k].as_f64().unwrap() > 0.0, "{k} in {c}");
        }
    }
}

/// `nasd bench mount`'s workloads: one JSON line per workload, each timed locally and
/// through the mount with a positive `ratio_vs_local`.
#[test]
fn bench_mount_times_each_workload_beside_a_local_directory() {
    if !can_mount() {
        return;
    }
    let (_, works) = json_lines_of(&[
        "bench",
        "mount",
        "--quick",
        "--json",
        "--drives",
        "1",
        "--only",
        "workloads",
        "--tree-files",
        "12",
    ]);
    let names: Vec<&str> = works
        .iter()
        .map(|w| w["workload"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "untar",
            "cp-a",
            "git-commit",
            "git-clone-status",
            "sqlite-journal",
            "sqlite-wal",
            "cargo-build"
        ]
    );
    // CI installs every program the workloads run (.ci/run), so none may be skipped here.
    for w in &works {
        assert!(w["skipped"].is_null(), "{w}");
        for k in ["local_s", "mount_s", "ratio_vs_local"] {
            assert!(w[k].as_f64().unwrap() > 0.0, "{k} in {w}");
        }
    }
}

/// The mount rides through restarts: a descriptor open on a file reads all of it while the
/// manager is down (the capabilities it holds are the drives' business), the mount serves
/// new files once the manager and then a drive have been restarted; and what the mount
/// acknowledged (a closed file, a synced one) survives its process being killed.
#[test]
fn the_mount_rides_through_restarts_and_a_killed_mount_loses_nothing_acknowledged() {
    if !can_mount() {
        return;
    }
    let mut up = Up::start(2);
    let mut m = Mounted::start(&up, "nasd:/", &up.dir.path().join("m"), &[]);
    let root = m.dir.clone();
    let big = nasd_cluster::pseudo_random(9 << 20, 11);
    std::fs::write(root.join("big"), &big).unwrap();
    let f = File::open(root.join("big")).unwrap();
    let mut got = vec![0u8; big.len()];
    f.read_exact_at(&mut got[..1 << 20], 0).unwrap();
    up.kill("manager");
    f.read_exact_at(&mut got[1 << 20..], 1 << 20).unwrap();
    assert!(got == big, "read on while the manager was down");
    drop(f);
    up.restart("manager");
    let write_eventually = |name: &str, body: &[u8]| {
        // The mount's session to a restarted component comes back at its next request.
        let t0 = Instant::now();
        loop {
            match std::fs::write(root.join(name), body) {
                Ok(()) => break,
                Err(e) if t0.elapsed() < Duration::from_secs(20) => {
                    eprintln!("{name}: {e}; again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("{name}: {e}"),
            }
        }
        assert!(std::fs::read(root.join(name)).unwrap() == body, "{name}");
    };
    write_eventually("after-manager", b"written once the manager was back");
    for d in ["drive-0", "drive-1"] {
        up.kill(d);
        up.restart(d);
    }
    write_eventually("after-drives", &big[..3 << 20]);
    assert!(std::fs::read(root.join("big")).unwrap() == big);

    // Acknowledged, then the mount is killed: a closed file and a synced one are there.
    std::fs::write(root.join("closed"), &big[..1 << 20]).unwrap();
    let mut synced = File::create(root.join("synced")).unwrap();
    synced.write_all(&big[..2 << 20]).unwrap();
    synced.sync_all().unwrap();
    m.kill();
    drop(synced);
    for (name, len) in [("closed", 1usize << 20), ("synced", 2 << 20)] {
        let out = up.dir.path().join(format!("{name}.out"));
        up.ok(&["cp", &format!("nasd:/{name}"), out.to_str().unwrap()]);
        assert!(std::fs::read(&out).unwrap() == big[..len], "{name}");
    }
}
