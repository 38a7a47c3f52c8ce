//! The processes the benchmark starts and must stop: FUSE mounts (`nasd mount`, `nasd lab
//! andrew-mount`), each a child serving one mount point, unmounted when its guard drops (also
//! when the run fails); and the baseline server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::LabError;
use crate::scaling::net::interrupted;

/// How long a mount or a server has to come up.
const READY_MS: u64 = 30_000;
/// How long an unmounted mount's process has to exit before it is killed.
const EXIT_MS: u64 = 10_000;
/// Tries of a plain unmount (a mount can be busy for a moment after the last process left).
const UNMOUNT_TRIES: u32 = 20;
const POLL_MS: u64 = 20;

/// Whether `dir` is a mount point now (`/proc/self/mountinfo`'s fifth field).
pub fn is_mounted(dir: &Path) -> bool {
    let Some(d) = dir.to_str() else {
        return false;
    };
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(d))
}

/// Whether anything is mounted at or under `dir`.
pub fn mounts_under(dir: &Path) -> bool {
    let Some(d) = dir.to_str() else {
        return true;
    };
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| m == d || m.starts_with(&format!("{d}/")))
}

fn log_tail(log: &Path) -> String {
    let s = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Spawns `cmd` with its output to `log`. The child gets SIGTERM if the lab dies without
/// running its guards (SIGKILL): a mount then unmounts itself and a server ends, instead of
/// outliving the run.
fn spawn(mut cmd: Command, log: &Path, what: &str) -> Result<Child, LabError> {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let f = std::fs::File::create(log)
        .map_err(|e| LabError::Andrew(format!("{}: {e}", log.display())))?;
    let f2 = f
        .try_clone()
        .map_err(|e| LabError::Andrew(format!("{}: {e}", log.display())))?;
    cmd.stdin(Stdio::null())
        .stdout(f)
        .stderr(f2)
        .spawn()
        .map_err(|e| LabError::Andrew(format!("starting {what}: {e}")))
}

/// Waits until `ready()` or fails: the child exited (its log says why), the time ran out, or
/// an interrupt arrived.
fn wait_ready(
    child: &mut Child,
    log: &Path,
    what: &str,
    ready: impl Fn() -> bool,
) -> Result<(), LabError> {
    let t0 = Instant::now();
    loop {
        if ready() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(LabError::Andrew(format!(
                "{what} exited ({status}):\n{}",
                log_tail(log)
            )));
        }
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        if t0.elapsed() > Duration::from_millis(READY_MS) {
            return Err(LabError::Andrew(format!(
                "{what} was not ready within {READY_MS} ms:\n{}",
                log_tail(log)
            )));
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// A FUSE mount served by a child process; dropping it unmounts it and ends the child.
pub struct Mounted {
    child: Child,
    dir: PathBuf,
}

impl Mounted {
    /// Runs `cmd` (which mounts at `dir`, an empty directory made here) and waits until the
    /// kernel shows the mount.
    pub fn start(cmd: Command, dir: &Path, log: &Path, what: &str) -> Result<Mounted, LabError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| LabError::Andrew(format!("{}: {e}", dir.display())))?;
        let dir = std::fs::canonicalize(dir)
            .map_err(|e| LabError::Andrew(format!("{}: {e}", dir.display())))?;
        let child = spawn(cmd, log, what)?;
        let mut m = Mounted { child, dir };
        let d = m.dir.clone();
        wait_ready(&mut m.child, log, what, || is_mounted(&d))?;
        Ok(m)
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `umount2(dir, flags)`.
fn umount2(dir: &Path, flags: libc::c_int) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Unmounts `dir`: plainly (a few tries: busy for a moment after a process left), then
/// lazily, and as a last resort through `fusermount3 -u` (a mount made without root).
fn unmount(dir: &Path) {
    for _ in 0..UNMOUNT_TRIES {
        if !is_mounted(dir) || umount2(dir, 0).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if umount2(dir, libc::MNT_DETACH).is_err() {
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        unmount(&self.dir);
        let t0 = Instant::now();
        while self.child.try_wait().ok().flatten().is_none()
            && t0.elapsed() < Duration::from_millis(EXIT_MS)
        {
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
        if let Ok(None) = self.child.try_wait() {
            nasd_cluster::process::stop_pid(self.child.id());
        }
        let _ = self.child.wait();
        if is_mounted(&self.dir) {
            unmount(&self.dir);
        }
    }
}

/// The baseline server process; dropping it stops it.
pub struct Server {
    child: Child,
}

impl Server {
    /// Runs `cmd` (which serves on `addr`) and waits until it accepts connections.
    pub fn start(
        cmd: Command,
        addr: std::net::SocketAddr,
        log: &Path,
        what: &str,
    ) -> Result<Server, LabError> {
        let child = spawn(cmd, log, what)?;
        let mut s = Server { child };
        wait_ready(&mut s.child, log, what, || {
            std::net::TcpStream::connect(addr).is_ok()
        })?;
        Ok(s)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            nasd_cluster::process::stop_pid(self.child.id());
        }
        let _ = self.child.wait();
    }
}
