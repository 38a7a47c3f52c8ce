//! `nasd mount` children for black-box tests: a mount of a test cluster served by its own
//! process, unmounted when dropped, or killed outright.

use super::{Up, NASD};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether this host lets the tests mount (root and `/dev/fuse`); says so when not.
pub fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !(root && Path::new("/dev/fuse").exists()) {
        eprintln!("skipped: mounting needs root and /dev/fuse");
        return false;
    }
    true
}

/// Whether `dir` is a mount point now.
pub fn mounted(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

/// A `nasd mount` child serving the cluster's `remote` at `dir`, unmounted when dropped.
pub struct Mounted {
    pub child: Child,
    pub dir: PathBuf,
}

impl Mounted {
    /// `nasd mount REMOTE DIR` as the cluster's admin; waits until it is mounted.
    pub fn start(up: &Up, remote: &str, dir: &Path) -> Mounted {
        std::fs::create_dir_all(dir).unwrap();
        let mut child = Command::new(NASD)
            .arg("mount")
            .arg(remote)
            .arg(dir)
            .env("NASD_CONFIG", up.config())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !mounted(dir) {
            if let Some(s) = child.try_wait().unwrap() {
                let mut err = String::new();
                let mut e = child.stderr.take().unwrap();
                e.read_to_string(&mut err).unwrap();
                panic!("nasd mount exited {s}: {err}");
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "not mounted");
            std::thread::sleep(Duration::from_millis(20));
        }
        Mounted {
            child,
            dir: dir.to_path_buf(),
        }
    }

    /// Kills the mount's process outright (SIGKILL: nothing flushed, nothing released), then
    /// takes the dead mount away lazily (descriptors may still be open on it).
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let c = std::ffi::CString::new(self.dir.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        assert_eq!(unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) }, 0);
        assert!(!mounted(&self.dir), "the dead mount is gone");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if mounted(&self.dir) {
            let _ = Command::new(NASD)
                .args(["umount", self.dir.to_str().unwrap()])
                .status();
        }
        let t0 = Instant::now();
        while self.child.try_wait().ok().flatten().is_none()
            && t0.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
