//! Processes: spawning a component (`nasd drive run` / `nasd manager run`) with its output in
//! `logs/NAME.log`, waiting until it serves, signalling it, and telling whether a pid still
//! runs the component it was recorded for (a pid may be reused by an unrelated process after
//! the component exited, and that one must never be signalled or taken for the component).

use crate::error::ClusterError;
use crate::node::NodeId;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started process has to accept connections.
pub const READY_TIMEOUT_MS: u64 = 20_000;
/// How long a stop waits after SIGTERM before SIGKILL (a drive flushes on SIGTERM).
pub const STOP_GRACE_MS: u64 = 10_000;
/// How long a kill waits for the process to be gone after SIGKILL.
pub const KILL_WAIT_MS: u64 = 10_000;
/// Between two checks of a starting or stopping process.
const POLL_MS: u64 = 20;
/// Lines of a component's log quoted when it fails to start.
const LOG_TAIL_LINES: usize = 5;

/// The log file of component `node` in the cluster directory `dir`.
pub fn log_path(dir: &Path, node: NodeId) -> PathBuf {
    dir.join("logs").join(format!("{node}.log"))
}

/// A component's process just started, and where its output begins in its log (the log is
/// appended to across restarts).
pub struct Started {
    pub child: Child,
    log_from: u64,
}

/// Starts `nasd ARGS` as component `node`, its stdout and stderr appended to its log; under
/// `wrapper` when that is not empty (`WRAPPER... nasd ARGS...`, a command that execs `nasd` in
/// place, such as `ip netns exec NS`). `detach`: in a process group of its own, so a ctrl-c
/// in the terminal that started it does not reach it.
pub fn spawn(
    nasd_bin: &Path,
    wrapper: &[std::ffi::OsString],
    dir: &Path,
    node: NodeId,
    args: &[&std::ffi::OsStr],
    detach: bool,
) -> Result<Started, ClusterError> {
    nasd_private::create_dir(&dir.join("logs"))?;
    let log = nasd_private::open_append(&log_path(dir, node))?;
    let io = |source| ClusterError::Spawn { node, source };
    let log_from = log.metadata().map_err(io)?.len();
    let mut cmd = match wrapper.split_first() {
        None => Command::new(nasd_bin),
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(nasd_bin);
            c
        }
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io)?)
        .stderr(log);
    if detach {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    Ok(Started {
        child: cmd.spawn().map_err(io)?,
        log_from,
    })
}

/// The last lines of `node`'s log.
pub fn log_tail(dir: &Path, node: NodeId) -> String {
    let t = std::fs::read_to_string(log_path(dir, node)).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// What a component's log says about where it serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Said {
    Nothing,
    /// `nasd drive listening on ADDR`, `nasd manager listening on ADDR`: bound to ADDR.
    Listening,
    /// `nasd manager standing by for ADDR: ...`: another manager leads the database; this one
    /// binds ADDR when it takes over.
    StandingBy,
}

/// What `node`'s log, from byte `from` on, says about `addr`.
fn says(dir: &Path, node: NodeId, from: u64, addr: &str) -> Said {
    use std::io::{Read as _, Seek as _};
    let Ok(mut f) = std::fs::File::open(log_path(dir, node)) else {
        return Said::Nothing;
    };
    let mut text = String::new();
    if f.seek(std::io::SeekFrom::Start(from)).is_err() || f.read_to_string(&mut text).is_err() {
        return Said::Nothing;
    }
    let listening = format!("listening on {addr}");
    let standing_by = format!("standing by for {addr}:");
    for l in text.lines() {
        if l.ends_with(&listening) {
            return Said::Listening;
        }
        if l.contains(&standing_by) {
            return Said::StandingBy;
        }
    }
    Said::Nothing
}

/// Waits until the process `s` (component `node`) serves on `addr`: it said it is bound to
/// `addr`, it still runs, and the address accepts connections; or, a manager, it said it
/// stands by for `addr` (another manager leads their database) and still runs. Its own word
/// is needed because a connection alone may reach another process that took the port while
/// the component was down (the restarted one then fails to bind).
pub fn wait_ready(
    dir: &Path,
    node: NodeId,
    addr: &str,
    s: &mut Started,
) -> Result<(), ClusterError> {
    let t0 = Instant::now();
    loop {
        let said = says(dir, node, s.log_from, addr);
        if let Some(status) = s
            .child
            .try_wait()
            .map_err(|source| ClusterError::Wait { node, source })?
        {
            return Err(ClusterError::Exited {
                node,
                status,
                addr: addr.to_string(),
                log_tail: log_tail(dir, node),
            });
        }
        match said {
            Said::StandingBy => return Ok(()),
            Said::Listening if std::net::TcpStream::connect(addr).is_ok() => return Ok(()),
            _ => {}
        }
        if t0.elapsed() > Duration::from_millis(READY_TIMEOUT_MS) {
            return Err(ClusterError::NotReady {
                node,
                addr: addr.to_string(),
                log_tail: log_tail(dir, node),
            });
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// Whether `pid` exists and may be signalled.
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// Whether `pid` is a nasd process (so a reused pid is never signalled).
pub fn is_nasd(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains("nasd"))
        .unwrap_or(false)
}

/// A process that exited but was not reaped yet (or is gone).
///
/// A killed process's main thread can be a zombie while its other threads still exit (one
/// may sit in an `fsync`); those threads share its open files, so its listening socket stays
/// bound until the last of them is gone. Only a zombie leader with no thread left counts.
fn is_zombie(pid: u32) -> bool {
    let leader_zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true);
    leader_zombie
        && std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| tasks.count() <= 1)
            .unwrap_or(true)
}

/// Whether our unreaped child `pid` still runs (has not exited).
pub fn child_runs(pid: u32) -> bool {
    alive(pid) && !is_zombie(pid)
}

/// Whether `pid` is alive and is the nasd process serving `dir` (its `--data` argument).
pub fn runs_node(pid: u32, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let dir = dir.as_os_str().as_encoded_bytes();
    alive(pid) && is_nasd(pid) && args.contains(&dir) && !is_zombie(pid)
}

/// Sends `signal` to `pid`.
fn signal(pid: u32, signal: i32) {
    // SAFETY: signalling a process we started, or one checked with `is_nasd`/`runs_node`.
    unsafe { libc::kill(pid as i32, signal) };
}

/// Waits up to `ms` for `pid` to be gone, reaping it if it is our child.
fn wait_gone(pid: u32, ms: u64) -> bool {
    let t0 = Instant::now();
    loop {
        // SAFETY: waitpid with WNOHANG on a pid; harmless if it is not our child.
        unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
        if !alive(pid) || is_zombie(pid) {
            // It may have exited after the waitpid above (a zombie now): reap it, if it is
            // ours, so it is gone when this returns.
            // SAFETY: as above.
            unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
            return true;
        }
        if t0.elapsed() >= Duration::from_millis(ms) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// SIGTERM, then SIGKILL if `pid` has not exited within [`STOP_GRACE_MS`].
pub fn stop_pid(pid: u32) {
    signal(pid, libc::SIGTERM);
    if !wait_gone(pid, STOP_GRACE_MS) {
        kill_pid(pid);
    }
}

/// SIGKILL, and wait up to [`KILL_WAIT_MS`] for `pid` to be gone.
pub fn kill_pid(pid: u32) {
    signal(pid, libc::SIGKILL);
    wait_gone(pid, KILL_WAIT_MS);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_child_is_gone_and_reaped() {
        let mut ch = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = ch.id();
        assert!(alive(pid));
        stop_pid(pid);
        assert!(!alive(pid), "still there after a stop");
        // Reaped by the stop: waiting now finds no child.
        assert!(ch.try_wait().is_err() || ch.try_wait().unwrap().is_some());
        assert!(!runs_node(pid, Path::new("/")));
    }

    #[test]
    fn only_the_new_part_of_a_log_says_a_component_is_listening_or_standing_by() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("logs")).unwrap();
        let log = log_path(t.path(), NodeId::Manager);
        let says = |from, addr| says(t.path(), NodeId::Manager, from, addr);
        let old = "nasd manager listening on 127.0.0.1:7\n";
        std::fs::write(&log, old).unwrap();
        let from = old.len() as u64;
        assert_eq!(says(0, "127.0.0.1:7"), Said::Listening);
        assert_eq!(says(from, "127.0.0.1:7"), Said::Nothing);
        let new = "nasd: listening on 127.0.0.1:7: Address already in use\n";
        std::fs::write(&log, format!("{old}{new}")).unwrap();
        assert_eq!(says(from, "127.0.0.1:7"), Said::Nothing);
        std::fs::write(
            &log,
            format!("{old}nasd manager listening on 127.0.0.1:7\n"),
        )
        .unwrap();
        assert_eq!(says(from, "127.0.0.1:7"), Said::Listening);
        assert_eq!(says(from, "127.0.0.1:70"), Said::Nothing);
        let standby = "nasd manager standing by for 127.0.0.1:7: another manager leads\n";
        std::fs::write(&log, format!("{old}{standby}")).unwrap();
        assert_eq!(says(from, "127.0.0.1:7"), Said::StandingBy);
        assert_eq!(says(from, "127.0.0.1:70"), Said::Nothing);
    }

    #[test]
    fn a_wrapped_component_runs_under_its_wrapper() {
        let t = tempfile::tempdir().unwrap();
        // `env X=wrapped sh -c ...`: env execs the command in place, as `ip netns exec` does.
        let wrapper: Vec<std::ffi::OsString> = vec!["env".into(), "X=wrapped".into()];
        let args: [&std::ffi::OsStr; 2] = ["-c".as_ref(), "echo $X $0".as_ref()];
        let mut s = spawn(
            Path::new("sh"),
            &wrapper,
            t.path(),
            NodeId::Drive(0),
            &args,
            false,
        )
        .unwrap();
        assert!(s.child.wait().unwrap().success());
        let log = std::fs::read_to_string(log_path(t.path(), NodeId::Drive(0))).unwrap();
        assert_eq!(log.trim(), "wrapped sh");
    }

    #[test]
    fn a_log_tail_is_its_last_lines() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("logs")).unwrap();
        let text: String = (0..9).map(|i| format!("line {i}\n")).collect();
        std::fs::write(log_path(t.path(), NodeId::Drive(3)), text).unwrap();
        assert_eq!(
            log_tail(t.path(), NodeId::Drive(3)),
            "line 4\nline 5\nline 6\nline 7\nline 8"
        );
        assert_eq!(log_tail(t.path(), NodeId::Manager), "");
    }
}
