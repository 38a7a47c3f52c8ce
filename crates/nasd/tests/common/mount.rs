//! A `nasd mount` of a test cluster through the kernel ([`Mounted`]), for the tests that
//! run programs on one.

use super::{Up, NASD};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether this process may mount (root and /dev/fuse); says why not when it may not.
pub fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !(root && Path::new("/dev/fuse").exists()) {
        eprintln!("skipped: mounting needs root and /dev/fuse");
        return false;
    }
    true
}

/// A `nasd mount` child serving `remote` at `dir`, unmounted when dropped.
pub struct Mounted {
    pub child: Child,
    pub dir: PathBuf,
}

pub fn mounted(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

impl Mounted {
    pub fn start(up: &Up, remote: &str, dir: &Path, env: &[(&str, &str)]) -> Mounted {
        Mounted::start_with(up, &[remote], dir, env)
    }

    /// `nasd mount ARGS DIR`.
    pub fn start_with(up: &Up, args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Mounted {
        std::fs::create_dir_all(dir).unwrap();
        let mut cmd = Command::new(NASD);
        cmd.arg("mount")
            .args(args)
            .arg(dir)
            .env("NASD_CONFIG", up.config())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let t0 = Instant::now();
        while !mounted(dir) {
            if let Some(s) = child.try_wait().unwrap() {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
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
}

impl Mounted {
    /// Kills the mount's process outright (SIGKILL: nothing flushed, nothing closed), then
    /// takes the dead mount away.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        // Lazily: descriptors may still be open on it.
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
