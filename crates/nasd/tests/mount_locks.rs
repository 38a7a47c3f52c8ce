//! Record locks and `flock` across two mounts of one cluster (issue 20: "locks hold within one
//! mount only"), through the kernel with `fcntl` and `flock` themselves: a lock taken on one
//! mount is seen and respected on the other; a blocked `F_SETLKW` proceeds when the holder
//! unlocks, and does not stall the mount meanwhile; closes release locks as POSIX says; locks
//! survive a manager restart (reclaimed in its grace period); a mount killed with SIGKILL
//! loses its locks after the lock lease. Needs root and /dev/fuse (skipped otherwise).

mod common;
use common::mount::{can_mount, Mounted};
use common::*;
use nasd_cluster::NodeId;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The clusters' lock lease: short, so a dead mount's locks go soon, and long enough that a
/// client reclaims well within the grace period after a manager restart.
const LOCK_LEASE_MS: u64 = 4_000;
/// How long anything the tests wait for may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// A cluster whose manager runs with [`LOCK_LEASE_MS`].
fn cluster() -> Up {
    let mut up = Up::start(1);
    up.kill("manager");
    let p = up.cluster.info().manager.dir.join("manager.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["policy"]["lock_lease_ms"] = LOCK_LEASE_MS.into();
    std::fs::write(&p, v.to_string()).unwrap();
    restart_manager(&mut up);
    up
}

/// Starts the (stopped or running) manager again and waits until it serves.
fn restart_manager(up: &mut Up) {
    up.restart("manager");
    let log = up.cluster.log_path(NodeId::Manager);
    let t0 = Instant::now();
    while !up.nasd(&["ls", "nasd:/"], &[]).status.success() {
        assert!(
            t0.elapsed() < DEADLINE,
            "the manager did not come back: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn open_rw(p: &Path) -> File {
    OpenOptions::new().read(true).write(true).open(p).unwrap()
}

fn flock_of(typ: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = typ as i16;
    l.l_whence = libc::SEEK_SET as i16;
    l.l_start = start;
    l.l_len = len;
    l
}

/// `fcntl(F_SETLK or F_SETLKW)` of `typ` over `start`, `len` bytes (0: to the end).
fn setlk(f: &File, typ: i32, start: i64, len: i64, wait: bool) -> std::io::Result<()> {
    let l = flock_of(typ, start, len);
    let cmd = if wait { libc::F_SETLKW } else { libc::F_SETLK };
    // SAFETY: a valid descriptor and a valid `flock` for the call's duration.
    match unsafe { libc::fcntl(f.as_raw_fd(), cmd, &l) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `fcntl(F_GETLK)`: (type, start, len, pid) of the lock that would block `typ` there.
fn getlk(f: &File, typ: i32, start: i64, len: i64) -> (i32, i64, i64, i32) {
    let mut l = flock_of(typ, start, len);
    // SAFETY: a valid descriptor and a valid `flock` for the call's duration.
    assert_eq!(
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut l) },
        0
    );
    (i32::from(l.l_type), l.l_start, l.l_len, l.l_pid)
}

fn flock(f: &File, op: i32) -> std::io::Result<()> {
    // SAFETY: a valid descriptor.
    match unsafe { libc::flock(f.as_raw_fd(), op) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn would_block(r: std::io::Result<()>) -> bool {
    matches!(r, Err(e) if e.kind() == ErrorKind::WouldBlock)
}

/// Waits until `f` holds, failing after [`DEADLINE`]; how long it took.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < DEADLINE, "{what}: not within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    t0.elapsed()
}

/// A child process holding a write lock on byte `at` of `path` until dropped (another
/// process, so another lock owner of the same mount).
struct ChildLock {
    pid: libc::pid_t,
    go: libc::c_int,
}

impl ChildLock {
    fn take(path: &Path, at: i64) -> ChildLock {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let l = flock_of(libc::F_WRLCK, at, 1);
        let (mut ready, mut go) = ([0; 2], [0; 2]);
        // SAFETY: plain pipe and fork; the child calls only async-signal-safe functions
        // (open, fcntl, write, read, _exit) on values made before the fork.
        unsafe {
            assert_eq!(libc::pipe(ready.as_mut_ptr()), 0);
            assert_eq!(libc::pipe(go.as_mut_ptr()), 0);
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                let fd = libc::open(c.as_ptr(), libc::O_RDWR);
                let ok = fd >= 0 && libc::fcntl(fd, libc::F_SETLK, &l) == 0;
                libc::write(ready[1], [u8::from(ok)].as_ptr().cast(), 1);
                let mut b = [0u8; 1];
                libc::read(go[0], b.as_mut_ptr().cast(), 1);
                libc::_exit(0);
            }
            let mut b = [0u8; 1];
            assert_eq!(libc::read(ready[0], b.as_mut_ptr().cast(), 1), 1);
            assert_eq!(b[0], 1, "the child took its lock");
            libc::close(ready[0]);
            libc::close(ready[1]);
            libc::close(go[0]);
            ChildLock { pid, go: go[1] }
        }
    }
}

impl Drop for ChildLock {
    fn drop(&mut self) {
        // SAFETY: our own pipe end and child.
        unsafe {
            libc::write(self.go, [1u8].as_ptr().cast(), 1);
            libc::close(self.go);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

#[test]
fn locks_taken_on_one_mount_hold_on_another() {
    if !can_mount() {
        return;
    }
    let up = cluster();
    let a = Mounted::start(&up, "nasd:/", &up.dir.path().join("a"), &[]);
    let b = Mounted::start(&up, "nasd:/", &up.dir.path().join("b"), &[]);
    std::fs::write(a.dir.join("f"), vec![7u8; 4096]).unwrap();
    let (fa, fb) = (open_rw(&a.dir.join("f")), open_rw(&b.dir.join("f")));

    // An exclusive lock on A: B can neither lock nor share an overlapping range, and F_GETLK
    // on B shows A's range and type, with no pid (A's process is another host's to B).
    setlk(&fa, libc::F_WRLCK, 0, 100, false).unwrap();
    assert!(would_block(setlk(&fb, libc::F_WRLCK, 50, 10, false)));
    assert!(would_block(setlk(&fb, libc::F_RDLCK, 99, 1, false)));
    assert_eq!(getlk(&fb, libc::F_RDLCK, 0, 0), (libc::F_WRLCK, 0, 100, 0));
    // Non-overlapping ranges both succeed, and each side sees the other's.
    setlk(&fb, libc::F_WRLCK, 100, 100, false).unwrap();
    assert!(would_block(setlk(&fa, libc::F_RDLCK, 150, 0, false)));
    assert_eq!(
        getlk(&fa, libc::F_WRLCK, 120, 1),
        (libc::F_WRLCK, 100, 100, 0)
    );
    // A process of the same mount is shown with its pid.
    let child = ChildLock::take(&a.dir.join("f"), 1000);
    assert_eq!(
        getlk(&fa, libc::F_WRLCK, 900, 0),
        (libc::F_WRLCK, 1000, 1, child.pid)
    );
    drop(child);
    assert_eq!(getlk(&fa, libc::F_WRLCK, 900, 0).0, libc::F_UNLCK);

    // An unlock in the middle of A's range splits it: B takes the hole, not its edges.
    setlk(&fa, libc::F_UNLCK, 40, 20, false).unwrap();
    setlk(&fb, libc::F_WRLCK, 40, 20, false).unwrap();
    assert!(would_block(setlk(&fb, libc::F_WRLCK, 39, 1, false)));
    assert!(would_block(setlk(&fb, libc::F_WRLCK, 60, 1, false)));
    // A downgrade on A lets B share what A kept.
    setlk(&fa, libc::F_RDLCK, 0, 40, false).unwrap();
    setlk(&fb, libc::F_RDLCK, 0, 10, false).unwrap();
    setlk(&fb, libc::F_UNLCK, 0, 0, false).unwrap();

    blocked_waiters_proceed_when_the_holder_unlocks(&a, &b, &fa);
    drop((fa, fb));
    closes_release_locks(&a, &b);
}

/// Waiters in `F_SETLKW` on B, more than the mount has event-loop threads, wait while A
/// holds the range (and B serves other requests meanwhile), and all proceed once A unlocks.
fn blocked_waiters_proceed_when_the_holder_unlocks(a: &Mounted, b: &Mounted, fa: &File) {
    setlk(fa, libc::F_WRLCK, 0, 0, false).unwrap();
    let (done, finished) = mpsc::channel();
    let (started, tids) = mpsc::channel();
    let n = nasd_fuse::FUSE_THREADS + 2;
    let waiters: Vec<_> = (0..n)
        .map(|i| {
            let (path, done, started) = (b.dir.join("f"), done.clone(), started.clone());
            std::thread::spawn(move || {
                let f = open_rw(&path);
                // SAFETY: gettid has no preconditions.
                started.send(unsafe { libc::gettid() }).unwrap();
                let r = setlk(&f, libc::F_WRLCK, 10 * i as i64, 5, true);
                done.send((i, r.map_err(|e| e.to_string()))).unwrap();
                // Held until the test joins: a close releases this process's locks on B.
                f
            })
        })
        .collect();
    // Every waiter is in fcntl, blocked in the kernel on the mount.
    let in_fcntl = format!("{} ", libc::SYS_fcntl);
    for _ in 0..n {
        let tid = tids.recv_timeout(DEADLINE).unwrap();
        let syscall = format!("/proc/self/task/{tid}/syscall");
        wait_for("a waiter blocks in fcntl", || {
            std::fs::read_to_string(&syscall).is_ok_and(|s| s.starts_with(&in_fcntl))
        });
    }
    // The mount goes on serving while they wait.
    std::fs::write(b.dir.join("other"), b"served").unwrap();
    assert_eq!(std::fs::read(a.dir.join("other")).unwrap(), b"served");
    assert!(std::fs::metadata(b.dir.join("f")).is_ok());
    assert!(finished.try_recv().is_err(), "no waiter got past A's lock");
    setlk(fa, libc::F_UNLCK, 0, 0, false).unwrap();
    for _ in 0..n {
        let (i, r) = finished
            .recv_timeout(DEADLINE)
            .expect("every waiter proceeds");
        assert_eq!(r, Ok(()), "waiter {i}");
    }
    // B's process holds them now: A cannot take any.
    assert!(would_block(setlk(fa, libc::F_WRLCK, 0, 1, false)));
    let files: Vec<File> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    // One close of the file by B's process releases all its locks there (POSIX).
    drop(files);
    setlk(fa, libc::F_WRLCK, 0, 0, false).unwrap();
    setlk(fa, libc::F_UNLCK, 0, 0, false).unwrap();
}

/// `flock` conflicts across mounts and ends with the open file description; `fcntl` locks end
/// with any close of the file by the process.
fn closes_release_locks(a: &Mounted, b: &Mounted) {
    std::fs::write(a.dir.join("g"), b"g").unwrap();
    let ga = File::open(a.dir.join("g")).unwrap();
    let gb = File::open(b.dir.join("g")).unwrap();
    flock(&ga, libc::LOCK_EX | libc::LOCK_NB).unwrap();
    assert!(would_block(flock(&gb, libc::LOCK_EX | libc::LOCK_NB)));
    assert!(would_block(flock(&gb, libc::LOCK_SH | libc::LOCK_NB)));
    // A descriptor duplicated shares the open file description: its close keeps the lock.
    drop(ga.try_clone().unwrap());
    assert!(would_block(flock(&gb, libc::LOCK_SH | libc::LOCK_NB)));
    // The kernel sends a file's release in the background once close returned.
    drop(ga);
    wait_for("the last close releases the flock", || {
        flock(&gb, libc::LOCK_SH | libc::LOCK_NB).is_ok()
    });
    let ga = File::open(a.dir.join("g")).unwrap();
    flock(&ga, libc::LOCK_SH | libc::LOCK_NB).unwrap();
    assert!(would_block(flock(&ga, libc::LOCK_EX | libc::LOCK_NB)));
    flock(&gb, libc::LOCK_UN).unwrap();
    flock(&ga, libc::LOCK_EX | libc::LOCK_NB).unwrap();
    flock(&ga, libc::LOCK_UN).unwrap();

    // fcntl: closing another descriptor of the file on A releases A's lock.
    let fa = open_rw(&a.dir.join("g"));
    setlk(&fa, libc::F_WRLCK, 0, 0, false).unwrap();
    assert!(would_block(setlk(
        &open_rw(&b.dir.join("g")),
        libc::F_WRLCK,
        0,
        1,
        false
    )));
    drop(File::open(a.dir.join("g")).unwrap());
    let gb = open_rw(&b.dir.join("g"));
    setlk(&gb, libc::F_WRLCK, 0, 0, false).unwrap();
    assert!(would_block(setlk(&fa, libc::F_RDLCK, 0, 1, false)));
}

#[test]
fn locks_outlive_a_manager_restart_and_die_with_their_mount() {
    if !can_mount() {
        return;
    }
    let mut up = cluster();
    let mut a = Mounted::start(&up, "nasd:/", &up.dir.path().join("a"), &[]);
    let b = Mounted::start(&up, "nasd:/", &up.dir.path().join("b"), &[]);
    std::fs::write(a.dir.join("f"), b"f").unwrap();
    let (fa, fb) = (open_rw(&a.dir.join("f")), open_rw(&b.dir.join("f")));
    setlk(&fa, libc::F_WRLCK, 0, 0, false).unwrap();
    assert!(would_block(setlk(&fb, libc::F_WRLCK, 0, 1, false)));

    // The manager restarts and forgets every lock; A reclaims its lock in the grace period,
    // and B, whose attempt waits the grace period out, still finds it held.
    up.kill("manager");
    restart_manager(&mut up);
    assert!(would_block(setlk(&fb, libc::F_WRLCK, 0, 1, false)));
    assert_eq!(getlk(&fb, libc::F_WRLCK, 5, 1), (libc::F_WRLCK, 0, 0, 0));
    setlk(&fa, libc::F_UNLCK, 0, 0, false).unwrap();
    setlk(&fb, libc::F_WRLCK, 0, 1, false).unwrap();
    setlk(&fb, libc::F_UNLCK, 0, 0, false).unwrap();

    // A dies holding a lock (nothing released): B gets it once A's lease ran out, and not
    // before most of a lease went by (A renewed at most a quarter lease before it died).
    setlk(&fa, libc::F_WRLCK, 0, 0, false).unwrap();
    assert!(would_block(setlk(&fb, libc::F_WRLCK, 0, 1, false)));
    a.kill();
    let took = wait_for("the dead mount's lock is freed", || {
        setlk(&fb, libc::F_WRLCK, 0, 0, false).is_ok()
    });
    assert!(
        took >= Duration::from_millis(LOCK_LEASE_MS / 2),
        "freed after {took:?}, within a lease of {LOCK_LEASE_MS} ms"
    );
    drop(fa);
}
