//! `nasd lab andrew`: seed 002 §4.2's Andrew benchmark (Table 8) on three targets, to test
//! its claim that NASD runs within about 10% of the server-attached case ("times for the
//! various components of the Andrew benchmark are roughly 10% for SAD over NASD/AFS"; §4.3:
//! "NASD/NFS again running 10% slower than NFSv3").
//!
//! The five phases ([`phases`]) run on a generated C source tree ([`source`]) on:
//!
//! - **local**: a directory of the local file system (where the temporary directory is);
//! - **nasd**: a `nasd mount` of a one-drive local cluster (`nasd-cluster`): names and
//!   attributes from the manager, data straight between the mount and the drive;
//! - **baseline**: a plain store-and-forward file server ([`server`]) keeping the files in a
//!   local directory on the same file system, mounted through FUSE by a small client
//!   ([`client`]): every operation, data included, through the one server. It makes names
//!   and attributes durable before it replies and a file's data when it is closed, as an
//!   NFSv3 server does and as nasd's manager and drive do;
//! - **baseline-async**: the same server without any sync (an `async` export), to show what
//!   durability costs apart from the data path.
//!
//! Both networked targets are FUSE mounts served by a child process over loopback TCP, so
//! they pay the same kernel crossings and differ in what is behind them. Runs rotate the
//! order of the targets; each run makes the tree from nothing and removes it afterwards
//! (untimed). Each phase's figure is the median over runs, the total the median of the runs'
//! totals.
//!
//! # Layout
//! - [`source`]: the generated tree and the output its program prints.
//! - [`phases`]: the five phases on a directory, and their checks.
//! - [`results`]: medians, ratios, the verdict and the report.
//! - [`proto`]: the baseline server's protocol.
//! - [`server`]: the baseline server (`nasd lab andrew-server`).
//! - [`client`]: the baseline's FUSE client (`nasd lab andrew-mount`).
//! - [`ops`]: single operations timed on each target, to explain the phases.
//! - [`mount`]: the child processes (mounts, server) and their guards.

pub mod client;
pub mod mount;
pub mod ops;
pub mod phases;
pub mod proto;
pub mod results;
pub mod server;
pub mod source;

use std::path::{Path, PathBuf};
use std::process::Command;

use nasd_cluster::{Cluster, Options};

use crate::error::LabError;
use crate::report::Report;
use crate::scaling::net::{interrupted, Interrupts};
use mount::{Mounted, Server};
use phases::Pass;
use server::Durability;
use source::Tree;

/// Runs of a full run (seed 002: "averages of five runs"), of `--quick`, and at most.
const RUNS_FULL: usize = 5;
const RUNS_QUICK: usize = 1;
const RUNS_MAX: usize = 50;
/// How `nasd lab andrew` runs.
#[derive(Debug, Clone)]
pub struct AndrewOptions {
    /// One run per target.
    pub quick: bool,
    /// Seed of the source tree.
    pub seed: u64,
    /// The `nasd` executable the cluster, the mounts and the baseline server run.
    pub nasd_bin: PathBuf,
    /// Runs per target (default 5; with `--quick` 1).
    pub runs: Option<usize>,
}

/// The targets, in the order of a run that starts with the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Local,
    Nasd,
    Baseline,
    BaselineAsync,
}

pub const TARGETS: [Target; 4] = [
    Target::Local,
    Target::Nasd,
    Target::Baseline,
    Target::BaselineAsync,
];

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Local => "local",
            Target::Nasd => "nasd",
            Target::Baseline => "baseline",
            Target::BaselineAsync => "baseline-async",
        }
    }
}

/// One target's passes.
#[derive(Clone, Debug, Default)]
pub struct Results {
    pub passes: Vec<Pass>,
    /// Microseconds per single operation ([`ops::OPS`]), once per run.
    pub ops: Vec<[f64; 5]>,
}

/// Work directories are `TMP/nasd-lab-andrew-PID-XXXXXX`: the pid of the lab that made it.
const WORK_PREFIX: &str = "nasd-lab-andrew-";

/// A lab killed outright (SIGKILL) leaves its work directory and its cluster running (its
/// mounts and baseline servers end with it: they get SIGTERM when it dies). Stops the clusters
/// of work directories whose lab is gone, and removes those directories.
fn remove_abandoned_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(WORK_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if nasd_cluster::process::alive(pid) {
            continue;
        }
        let cluster = e.path().join("cluster");
        if nasd_cluster::Cluster::is_initialized(&cluster) {
            let _ = nasd_cluster::down(&cluster, |_, _| {}, || {});
        }
        if !mount::mounts_under(&e.path()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether the benchmark can run here: `None` if so, else what is missing.
fn unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (the nasd and baseline targets are FUSE mounts)".into());
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && Command::new("fusermount3").arg("-V").output().is_err() {
        return Some("mounting FUSE needs root or fusermount3".into());
    }
    phases::missing_tools()
}

/// Runs the experiment.
pub fn run(o: &AndrewOptions) -> Result<Report, LabError> {
    let runs = o
        .runs
        .unwrap_or(if o.quick { RUNS_QUICK } else { RUNS_FULL });
    if runs == 0 || runs > RUNS_MAX {
        return Err(LabError::Usage(format!("--runs: between 1 and {RUNS_MAX}")));
    }
    if let Some(why) = unavailable() {
        return Err(LabError::Unavailable(why));
    }
    let _signals = Interrupts::install();
    remove_abandoned_runs();
    let work = tempfile::Builder::new()
        .prefix(&format!("{WORK_PREFIX}{}-", std::process::id()))
        .tempdir()
        .map_err(|source| LabError::Output {
            path: std::env::temp_dir(),
            source,
        })?;
    let w = work.path();
    let tree = Tree::generate(o.seed);
    let source = w.join("source");
    phases::write_source(&tree, &source)?;
    let logs = w.join("logs");
    std::fs::create_dir(&logs).map_err(|e| LabError::Andrew(format!("{}: {e}", logs.display())))?;

    let cluster = Cluster::start(&o.nasd_bin, &w.join("cluster"), &Options::drives(1))
        .map_err(|e| LabError::Cluster(Box::new(e)))?;
    let nasd = mount_nasd(o, &cluster, w, &logs)?;
    let (server, baseline) = mount_baseline(o, w, &logs, Durability::Stable)?;
    let (server_async, baseline_async) = mount_baseline(o, w, &logs, Durability::Async)?;
    let dirs = [
        w.join("local"),
        nasd.dir().to_path_buf(),
        baseline.dir().to_path_buf(),
        baseline_async.dir().to_path_buf(),
    ];
    std::fs::create_dir(&dirs[0]).map_err(|e| LabError::Andrew(format!("{e}")))?;

    // One untimed pass first: gcc, make and the source tree come into memory.
    let warm = dirs[0].join("warm-up");
    check(&tree, Target::Local, &phases::run(&tree, &source, &warm)?)?;
    phases::clean(&warm)?;

    let mut results: [Results; TARGETS.len()] = Default::default();
    for r in 0..runs {
        for k in 0..TARGETS.len() {
            // Rotate which target goes first, so none always runs on a fresher machine.
            let t = (r + k) % TARGETS.len();
            if interrupted() {
                return Err(LabError::Interrupted);
            }
            let target = dirs[t].join(format!("andrew-{r}"));
            let pass = phases::run(&tree, &source, &target)?;
            check(&tree, TARGETS[t], &pass)?;
            phases::clean(&target)?;
            results[t].passes.push(pass);
            let ops = ops::measure(&dirs[t].join(format!("ops-{r}")))?;
            results[t].ops.push(ops);
        }
    }
    drop(baseline_async);
    drop(server_async);
    drop(baseline);
    drop(server);
    drop(nasd);
    drop(cluster);
    let local_fs = format!("{} ({})", w.display(), fs_kind(w));
    Ok(results::report(&tree, runs, &results, &local_fs))
}

/// `nasd mount nasd:/ MOUNTPOINT` as the cluster's admin.
fn mount_nasd(
    o: &AndrewOptions,
    cluster: &Cluster,
    w: &Path,
    logs: &Path,
) -> Result<Mounted, LabError> {
    let dir = w.join("mnt-nasd");
    let mut cmd = Command::new(&o.nasd_bin);
    cmd.arg("mount")
        .arg("nasd:/")
        .arg(&dir)
        .env("NASD_CONFIG", cluster.config_path())
        .env_remove("NASD_USER")
        .env_remove("NASD_KEY")
        .env_remove("NASD_PASSWORD");
    Mounted::start(cmd, &dir, &logs.join("mount-nasd.log"), "nasd mount")
}

/// The baseline server on a free loopback port, serving a directory of the work directory,
/// and its FUSE mount.
fn mount_baseline(
    o: &AndrewOptions,
    w: &Path,
    logs: &Path,
    d: Durability,
) -> Result<(Server, Mounted), LabError> {
    let name = match d {
        Durability::Stable => "baseline",
        Durability::Async => "baseline-async",
    };
    let root = w.join(format!("{name}-root"));
    std::fs::create_dir(&root).map_err(|e| LabError::Andrew(format!("{}: {e}", root.display())))?;
    let addr = nasd_cluster::ports::free_addrs(1)
        .map_err(|e| LabError::Cluster(Box::new(e)))?
        .pop()
        .expect("one address");
    let addr: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| LabError::Baseline(format!("{addr}: {e}")))?;
    let mut cmd = Command::new(&o.nasd_bin);
    cmd.args([
        "lab",
        "andrew-server",
        "--listen",
        &addr.to_string(),
        "--root",
    ])
    .arg(&root);
    if d == Durability::Async {
        cmd.arg("--async");
    }
    let what = format!("the {name} server");
    let server = Server::start(cmd, addr, &logs.join(format!("{name}-server.log")), &what)?;
    let dir = w.join(format!("mnt-{name}"));
    let mut cmd = Command::new(&o.nasd_bin);
    cmd.args(["lab", "andrew-mount", "--server", &addr.to_string()])
        .arg(&dir);
    let what = format!("the {name} mount");
    let m = Mounted::start(cmd, &dir, &logs.join(format!("mount-{name}.log")), &what)?;
    Ok((server, m))
}

/// A pass that saw anything but the tree, or built a program that printed anything but the
/// expected line, is an error: its times would not be of the benchmark.
fn check(tree: &Tree, t: Target, p: &Pass) -> Result<(), LabError> {
    let bad = |what: String| Err(LabError::Andrew(format!("on {}: {what}", t.name())));
    if p.entries_stat != tree.files.len() + tree.dirs.len() {
        return bad(format!(
            "the stat walk found {} entries, not {}",
            p.entries_stat,
            tree.files.len() + tree.dirs.len()
        ));
    }
    if p.read_digest != tree.digest() || p.bytes_read != tree.bytes() {
        return bad(format!(
            "the bytes read back ({} in {} files) are not the bytes written ({} in {})",
            p.bytes_read,
            p.files_read,
            tree.bytes(),
            tree.files.len()
        ));
    }
    if p.program_output != tree.expected_output() {
        return bad(format!(
            "the program printed {:?}, not {:?}",
            p.program_output,
            tree.expected_output()
        ));
    }
    Ok(())
}

/// The kind of file system `p` is on, by `statfs`'s magic number (the ones a temporary
/// directory is likely to be on; others by number).
fn fs_kind(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return "unknown file system".into();
    };
    // SAFETY: an all-zero statfs is a valid value for the call to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a valid statfs, for the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return "unknown file system".into();
    }
    match st.f_type as u64 {
        0xef53 => "ext4".into(),
        0x0102_1994 => "tmpfs".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683e => "btrfs".into(),
        0x794c_7630 => "overlayfs".into(),
        n => format!("file system type {n:#x}"),
    }
}
