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
pub mod server;
pub mod source;

use std::path::{Path, PathBuf};
use std::process::Command;

use nasd_cluster::{Cluster, Options};
use serde_json::json;

use crate::error::LabError;
use crate::report::{fmt, Figure, Report, Series, Table};
use crate::scaling::net::{interrupted, Interrupts};
use crate::stats::Summary;
use mount::{Mounted, Server};
use phases::{Pass, PHASES};
use server::Durability;
use source::Tree;

/// Runs of a full run (seed 002: "averages of five runs"), of `--quick`, and at most.
const RUNS_FULL: usize = 5;
const RUNS_QUICK: usize = 1;
const RUNS_MAX: usize = 50;
/// The claim: NASD's total within this fraction of the baseline's.
const CLAIM_FRACTION: f64 = 0.10;

/// Seed 002 Table 8, seconds per phase (mkdir, copy, stat, read, compile): NFSv3,
/// NASD/NFS, AFS 3.4a, NASD/AFS.
pub const SEED_TABLE8: [(&str, [f64; 5]); 4] = [
    ("NFSv3", [2.0, 9.0, 6.0, 9.0, 33.0]),
    ("NASD/NFS", [2.0, 9.0, 9.0, 10.0, 35.0]),
    ("AFS 3.4a", [1.0, 6.0, 3.0, 5.0, 27.0]),
    ("NASD/AFS", [1.0, 8.0, 3.0, 5.0, 29.0]),
];

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
struct Results {
    passes: Vec<Pass>,
    /// Microseconds per single operation ([`ops::OPS`]), once per run.
    ops: Vec<[f64; 5]>,
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
    let work = tempfile::Builder::new()
        .prefix("nasd-lab-andrew-")
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
    Ok(report(&tree, runs, &results, &local_fs))
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
    let addr = nasd_cluster::process::free_addrs(1)
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

/// Median seconds of phase `i` (5: the total) over a target's passes.
fn summary(r: &Results, i: usize) -> Summary {
    let v: Vec<f64> = r
        .passes
        .iter()
        .map(|p| {
            if i < 5 {
                p.seconds[i]
            } else {
                p.seconds.iter().sum()
            }
        })
        .collect();
    Summary::of(&v).expect("at least one pass, no NaN")
}

/// The verdict on the seed's claim from the ratio of NASD's total to the baseline's.
pub fn verdict(ratio: f64) -> (bool, String) {
    let pct = (ratio - 1.0) * 100.0;
    if (ratio - 1.0).abs() <= CLAIM_FRACTION + 1e-9 {
        (
            true,
            format!(
                "confirmed: NASD's total is within {:.0}% of the baseline's ({pct:+.1}%)",
                CLAIM_FRACTION * 100.0
            ),
        )
    } else if ratio > 1.0 {
        (
            false,
            format!("refuted: NASD is {pct:.1}% slower than the baseline in total"),
        )
    } else {
        (
            false,
            format!(
                "refuted in NASD's favour: NASD is {:.1}% faster than the baseline in total",
                -pct
            ),
        )
    }
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

fn report(tree: &Tree, runs: usize, results: &[Results; TARGETS.len()], local_fs: &str) -> Report {
    let names: Vec<&str> = PHASES.iter().copied().chain(["total"]).collect();
    let mut table = Table::new(
        "andrew",
        &format!(
            "Andrew-style benchmark (seed 002 §4.2, Table 8): seconds per phase, median of {runs} run(s); \
             {} files, {} bytes",
            tree.files.len(),
            tree.bytes()
        ),
        &[
            "phase",
            "local s",
            "nasd s",
            "baseline s",
            "baseline-async s",
            "nasd/baseline",
            "seed NASD/NFS : NFSv3",
            "seed NASD/AFS : AFS",
        ],
    );
    let mut rows = Table::new("andrew-runs", "", &[]);
    for (t, r) in TARGETS.iter().zip(results) {
        for (i, phase) in names.iter().enumerate() {
            let s = summary(r, i);
            let each: Vec<f64> = r
                .passes
                .iter()
                .map(|p| {
                    if i < 5 {
                        p.seconds[i]
                    } else {
                        p.seconds.iter().sum()
                    }
                })
                .collect();
            rows.json.push(json!({
                "table": "andrew",
                "phase": phase,
                "target": t.name(),
                "seconds": s.median,
                "seconds_min": s.min,
                "seconds_max": s.max,
                "seconds_runs": each,
                "runs": s.runs,
            }));
        }
    }
    let mut figure = Figure {
        stem: "andrew".into(),
        title:
            "Andrew-style benchmark: seconds per phase (1 mkdir, 2 copy, 3 stat, 4 read, 5 compile)"
                .into(),
        x_label: "phase".into(),
        y_label: "seconds".into(),
        log_y: false,
        y_max: None,
        series: TARGETS
            .iter()
            .map(|t| Series {
                name: t.name().into(),
                points: vec![],
            })
            .collect(),
    };
    let seed_ratio = |a: usize, b: usize, i: usize| -> f64 {
        let sum = |k: usize| -> f64 {
            if i < 5 {
                SEED_TABLE8[k].1[i]
            } else {
                SEED_TABLE8[k].1.iter().sum()
            }
        };
        sum(a) / sum(b)
    };
    let mut total_ratio = 1.0;
    for (i, phase) in names.iter().enumerate() {
        let m: Vec<f64> = results.iter().map(|r| summary(r, i).median).collect();
        let ratio = m[1] / m[2];
        if i == 5 {
            total_ratio = ratio;
        } else {
            for (s, v) in figure.series.iter_mut().zip(&m) {
                s.points.push(((i + 1) as f64, *v));
            }
        }
        let (nfs, afs) = (seed_ratio(1, 0, i), seed_ratio(3, 2, i));
        table.push(
            vec![
                (*phase).to_string(),
                fmt(m[0], 3),
                fmt(m[1], 3),
                fmt(m[2], 3),
                fmt(m[3], 3),
                fmt(ratio, 2),
                fmt(nfs, 2),
                fmt(afs, 2),
            ],
            json!({
                "table": "ratio",
                "phase": phase,
                "local_s": m[0],
                "nasd_s": m[1],
                "baseline_s": m[2],
                "baseline_async_s": m[3],
                "nasd_over_baseline": ratio,
                "seed_nasd_nfs_over_nfsv3": nfs,
                "seed_nasd_afs_over_afs": afs,
            }),
        );
    }
    let mut checks = Table::new("andrew-checks", "", &[]);
    for (t, r) in TARGETS.iter().zip(results) {
        for (run, p) in r.passes.iter().enumerate() {
            checks.json.push(json!({
                "table": "check",
                "target": t.name(),
                "run": run,
                "entries_stat": p.entries_stat,
                "files_read": p.files_read,
                "bytes_read": p.bytes_read,
                "read_digest": p.read_digest,
                "program_output": p.program_output,
            }));
        }
    }
    let mut op_table = Table::new(
        "andrew-ops",
        "Single operations, microseconds (median over runs)",
        &[
            "operation",
            "local us",
            "nasd us",
            "baseline us",
            "baseline-async us",
            "nasd/baseline",
        ],
    );
    for (k, op) in ops::OPS.iter().enumerate() {
        let m: Vec<f64> = results
            .iter()
            .map(|r| {
                let v: Vec<f64> = r.ops.iter().map(|o| o[k]).collect();
                Summary::of(&v).expect("one run at least").median
            })
            .collect();
        op_table.push(
            vec![
                (*op).to_string(),
                fmt(m[0], 1),
                fmt(m[1], 1),
                fmt(m[2], 1),
                fmt(m[3], 1),
                fmt(m[1] / m[2], 2),
            ],
            json!({
                "table": "ops",
                "op": op,
                "local_us": m[0],
                "nasd_us": m[1],
                "baseline_us": m[2],
                "baseline_async_us": m[3],
            }),
        );
    }
    let (holds, text) = verdict(total_ratio);
    let mut v = Table::new(
        "andrew-verdict",
        "The seed's claim: NASD within about 10% of the server-attached case",
        &["claim", "nasd/baseline total", "verdict"],
    );
    v.push(
        vec![
            "NASD within 10% of the baseline".into(),
            fmt(total_ratio, 3),
            text.clone(),
        ],
        json!({
            "table": "verdict",
            "claim": "within_10pct",
            "nasd_over_baseline": total_ratio,
            "holds": holds,
            "verdict": text,
        }),
    );
    let notes = vec![
        format!(
            "targets: local = a directory in {local_fs}; nasd = `nasd mount` of a \
             one-drive cluster whose drive and manager keep their data there too; baseline = the \
             store-and-forward server (`nasd lab andrew-server`) keeping its files there, through \
             its FUSE client (`nasd lab andrew-mount`), names and attributes synced before each \
             reply and data at close (NFSv3); baseline-async = the same server never syncing. \
             All mounts: FUSE, zero attribute TTL, 4 event-loop threads, loopback TCP."
        ),
        "every pass is checked: the stat walk found every entry, the bytes read back are the bytes \
         written (one BLAKE3 digest), and the program built prints the generator's checksum; one \
         untimed warm-up pass on the local target precedes the runs."
            .into(),
        "the seed's ratios are its Table 8's NASD/NFS over NFSv3 and NASD/AFS over AFS 3.4a."
            .into(),
    ];
    Report {
        experiment: "andrew".into(),
        tables: vec![table, op_table, rows, checks, v],
        figures: vec![figure],
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_reads_the_total_ratio() {
        assert!(verdict(1.05).0);
        assert!(verdict(0.95).0);
        assert!(verdict(1.10).0);
        let (holds, text) = verdict(1.3);
        assert!(!holds && text.contains("30.0% slower"), "{text}");
        let (holds, text) = verdict(0.5);
        assert!(!holds && text.contains("50.0% faster"), "{text}");
    }

    #[test]
    fn the_seed_table_totals_are_its_own() {
        let totals: Vec<f64> = SEED_TABLE8.iter().map(|(_, v)| v.iter().sum()).collect();
        assert_eq!(totals, vec![59.0, 65.0, 42.0, 46.0]);
    }
}
