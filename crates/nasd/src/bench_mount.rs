//! `nasd bench mount`: sequential and small-file transfers through `nasd mount` beside the
//! same transfers by `nasd cp`, on one temporary cluster, as ratios (issue 11 §2's target:
//! sequential throughput through the mount ≥ 0.8x of `nasd cp` on the same file).
//!
//! Method: a cluster of `--drives` drives with two directories, `/encrypted` (the cluster's
//! default protection) and `/plain` (`nasd layout set … plain`), mounted once with
//! `nasd mount nasd:/`. The sources are a random file of `--size-mib` MiB and a tree of
//! `--files` random 4 KiB files on tmpfs (`/dev/shm`, else the temporary directory). Per
//! round and directory: the large file written by `nasd cp` and by `cp` into the mount, each
//! then read back by the other path to a scratch file (so neither reads what it just wrote
//! from its own cache), and the tree copied by `nasd cp -r` and `cp -r`; which path goes first
//! alternates by round. As root the bench drops the kernel's page cache before each read, so
//! both readers start with the drives reading from disk (`--warm` keeps it). A cell's figure
//! is the median over rounds; its ratio the median of the per-round ratios (`nasd cp`'s time
//! over the mount's: 1 means the mount is as fast), which cancels most of the drift on a
//! shared machine. The first round's reads are compared with the source. Then the workloads
//! of [`crate::bench_mount_work`] run through the same mount beside a local directory
//! (`--only transfers` or `--only workloads` runs one half). A benchmark: it asserts nothing
//! about speed.

use crate::bench::median;
use crate::bench_mount_work as work;
use anyhow::{bail, Context as _};
use clap::Args;
use nasd_cluster::{pseudo_random, Cluster, Options};
use nasd_lab::andrew::mount::Mounted;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const SIZE_MIB: u64 = 256;
const SIZE_MIB_QUICK: u64 = 16;
const FILES: usize = 500;
const FILES_QUICK: usize = 50;
const SMALL_BYTES: usize = 4 << 10;
const ROUNDS: usize = 5;
const ROUNDS_QUICK: usize = 1;
/// The directories measured and the layout option each is given (`None`: the default).
const DIRS: [(&str, Option<&str>); 2] = [("encrypted", None), ("plain", Some("plain"))];

#[derive(Args, Debug)]
pub struct BenchMountArgs {
    /// 16 MiB and 50 small files, one round: finishes in seconds.
    #[arg(long)]
    pub quick: bool,
    /// One JSON object per cell: protection, transfer, bytes, rounds, nasd_cp_s, mount_s,
    /// ratio, ratios.
    #[arg(long)]
    pub json: bool,
    /// Drives of the temporary cluster.
    #[arg(long, default_value_t = 2)]
    pub drives: usize,
    /// Rounds (default 5; 1 with --quick).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Size of the large file in MiB (default 256; 16 with --quick).
    #[arg(long, value_name = "MIB")]
    pub size_mib: Option<u64>,
    /// Files of 4 KiB in the small-file tree (default 500; 50 with --quick).
    #[arg(long)]
    pub files: Option<usize>,
    /// Keep the kernel's page cache between transfers (the drives then serve reads from
    /// memory); by default, as root, it is dropped before each read.
    #[arg(long)]
    pub warm: bool,
    /// Run only the transfers against `nasd cp`, or only the workloads against a local
    /// directory (default: both).
    #[arg(long, value_enum)]
    pub only: Option<Half>,
    /// Files in the workloads' generated tree (default 400; 60 with --quick).
    #[arg(long)]
    pub tree_files: Option<usize>,
}

/// One half of the bench.
#[derive(Clone, Copy, PartialEq, Debug, clap::ValueEnum)]
pub enum Half {
    Transfers,
    Workloads,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Transfer {
    Write,
    Read,
    Small,
}

impl Transfer {
    fn name(self) -> &'static str {
        match self {
            Transfer::Write => "write",
            Transfer::Read => "read",
            Transfer::Small => "small-files",
        }
    }
}

/// One (directory, transfer): seconds per round by `nasd cp` and through the mount.
struct Cell {
    dir: &'static str,
    transfer: Transfer,
    bytes: u64,
    cp_s: Vec<f64>,
    mount_s: Vec<f64>,
}

impl Cell {
    fn push(&mut self, (cp, mount): (f64, f64)) {
        self.cp_s.push(cp);
        self.mount_s.push(mount);
    }
}

/// What the bench runs: the binary, the cluster's config, the mount and the scratch space.
struct Bench {
    exe: PathBuf,
    config: PathBuf,
    mnt: PathBuf,
    scratch: PathBuf,
    drop_caches: bool,
}

impl Bench {
    /// A `nasd` command as the cluster's admin.
    fn nasd(&self) -> Command {
        let mut c = Command::new(&self.exe);
        c.env("NASD_CONFIG", &self.config)
            .env_remove("NASD_USER")
            .env_remove("NASD_KEY")
            .env_remove("NASD_PASSWORD");
        c
    }

    /// Runs `c` to success and returns how long it took, in seconds.
    fn timed(&self, mut c: Command) -> anyhow::Result<f64> {
        let what = format!("{c:?}");
        let t0 = Instant::now();
        let o = c.output().with_context(|| what.clone())?;
        let s = t0.elapsed().as_secs_f64();
        if !o.status.success() {
            bail!(
                "{what} failed: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Ok(s)
    }

    fn nasd_cp(&self, args: &[&Path]) -> anyhow::Result<f64> {
        let mut c = self.nasd();
        c.arg("cp").args(args);
        self.timed(c)
    }

    fn cp(&self, args: &[&Path]) -> anyhow::Result<f64> {
        let mut c = Command::new("cp");
        c.args(args);
        self.timed(c)
    }

    /// Empties the kernel's page cache (root only), so the next read starts cold.
    fn cold(&self) {
        if self.drop_caches {
            // SAFETY: sync has no preconditions.
            unsafe { libc::sync() };
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
        }
    }
}

/// `nasd:/…` as one argument.
fn remote(p: &str) -> PathBuf {
    PathBuf::from(format!("nasd:{p}"))
}

pub fn run(a: BenchMountArgs) -> anyhow::Result<()> {
    let quick = a.quick;
    let size = a
        .size_mib
        .unwrap_or(if quick { SIZE_MIB_QUICK } else { SIZE_MIB })
        << 20;
    let rounds = a
        .rounds
        .unwrap_or(if quick { ROUNDS_QUICK } else { ROUNDS });
    if rounds == 0 || size == 0 {
        bail!("--rounds and --size-mib must be at least 1");
    }
    let dir = tempfile::tempdir()?;
    let shm = Path::new("/dev/shm");
    let scratch = if shm.is_dir() {
        tempfile::tempdir_in(shm)?
    } else {
        tempfile::tempdir()?
    };
    let exe = std::env::current_exe()?;
    let cluster = Cluster::start(&exe, &dir.path().join("c"), &Options::drives(a.drives))?;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let b = Bench {
        exe,
        config: cluster.config_path(),
        mnt: dir.path().join("mnt"),
        scratch: scratch.path().to_path_buf(),
        drop_caches: root && !a.warm,
    };
    for (d, layout) in DIRS {
        let mut c = b.nasd();
        c.arg("mkdir").arg(remote(&format!("/{d}")));
        b.timed(c)?;
        if let Some(l) = layout {
            let mut c = b.nasd();
            c.args(["layout", "set"])
                .arg(remote(&format!("/{d}")))
                .arg(l);
            b.timed(c)?;
        }
    }
    let mut cmd = b.nasd();
    cmd.arg("mount").arg("nasd:/").arg(&b.mnt);
    let mount = Mounted::start(cmd, &b.mnt, &dir.path().join("mount.log"), "nasd mount")
        .context("mounting (needs root or access to /dev/fuse)")?;
    if a.only != Some(Half::Workloads) {
        let files = a.files.unwrap_or(if quick { FILES_QUICK } else { FILES });
        let cells = transfers(&b, mount.dir(), size, files, rounds)?;
        report(&cells, rounds, b.drop_caches, a.json);
    }
    if a.only != Some(Half::Transfers) {
        let files = a.tree_files.unwrap_or(if quick {
            work::TREE_FILES_QUICK
        } else {
            work::TREE_FILES
        });
        let (src, local) = (dir.path().join("src"), dir.path().join("local"));
        let mounted = mount.dir().join(DIRS[0].0).join("work");
        for d in [&src, &local, &mounted] {
            std::fs::create_dir_all(d)?;
        }
        work::prepare(&src, files, quick)?;
        let works = work::run(&src, &local, &mounted, rounds)?;
        work::report(&works, rounds, a.json);
    }
    drop(mount);
    drop(cluster);
    Ok(())
}

/// The transfers' cells: `rounds` rounds in each of [`DIRS`] under the mount at `mnt_root`.
fn transfers(
    b: &Bench,
    mnt_root: &Path,
    size: u64,
    files: usize,
    rounds: usize,
) -> anyhow::Result<Vec<Cell>> {
    let src = b.scratch.join("large");
    let large = pseudo_random(size as usize, 5);
    std::fs::write(&src, &large)?;
    let tree = b.scratch.join("tree");
    std::fs::create_dir(&tree)?;
    for i in 0..files {
        std::fs::write(
            tree.join(format!("f{i}")),
            pseudo_random(SMALL_BYTES, i as u64),
        )?;
    }
    let mut cells = vec![];
    for (d, _) in DIRS {
        for (transfer, bytes) in [
            (Transfer::Write, size),
            (Transfer::Read, size),
            (Transfer::Small, (files * SMALL_BYTES) as u64),
        ] {
            cells.push(Cell {
                dir: d,
                transfer,
                bytes,
                cp_s: vec![],
                mount_s: vec![],
            });
        }
    }
    for r in 0..rounds {
        for (d, _) in DIRS {
            round(
                b,
                &mut cells,
                &mnt_root.join(d),
                d,
                r,
                (&src, &large, &tree),
            )?;
        }
    }
    Ok(cells)
}

/// Round `r` of the transfers in directory `d` (mounted at `mnt`).
fn round(
    b: &Bench,
    cells: &mut [Cell],
    mnt: &Path,
    d: &str,
    r: usize,
    (src, large, tree): (&Path, &[u8], &Path),
) -> anyhow::Result<()> {
    let out = b.scratch.join("out");
    let (by_cp, by_mount) = (format!("/{d}/cp{r}"), format!("/{d}/m{r}"));
    let first = r.is_multiple_of(2);
    let w = pair(first, |cp| {
        if cp {
            b.nasd_cp(&[src, &remote(&by_cp)])
        } else {
            b.cp(&[src, &mnt.join(format!("m{r}"))])
        }
    })?;
    cell(cells, d, Transfer::Write).push(w);
    let rd = pair(first, |cp| {
        let _ = std::fs::remove_file(&out);
        b.cold();
        let s = if cp {
            b.nasd_cp(&[&remote(&by_mount), &out])?
        } else {
            b.cp(&[&mnt.join(format!("cp{r}")), &out])?
        };
        if r == 0 && std::fs::read(&out)? != large {
            bail!("{d}: the bytes read are not the bytes written");
        }
        Ok(s)
    })?;
    cell(cells, d, Transfer::Read).push(rd);
    let sm = pair(first, |cp| {
        if cp {
            b.nasd_cp(&[Path::new("-r"), tree, &remote(&format!("/{d}/tc{r}"))])
        } else {
            b.cp(&[Path::new("-r"), tree, &mnt.join(format!("tm{r}"))])
        }
    })?;
    cell(cells, d, Transfer::Small).push(sm);
    let _ = std::fs::remove_file(&out);
    let mut c = b.nasd();
    c.args(["rm", "-r"])
        .args([&by_cp, &by_mount].map(|p| remote(p)))
        .args([format!("/{d}/tc{r}"), format!("/{d}/tm{r}")].map(|p| remote(&p)));
    b.timed(c)?;
    Ok(())
}

/// Times `f(true)` (`nasd cp`) and `f(false)` (through the mount), in the order `cp_first`
/// says; returns (`nasd cp` s, mount s).
fn pair(cp_first: bool, f: impl Fn(bool) -> anyhow::Result<f64>) -> anyhow::Result<(f64, f64)> {
    if cp_first {
        let x = f(true)?;
        Ok((x, f(false)?))
    } else {
        let y = f(false)?;
        Ok((f(true)?, y))
    }
}

fn cell<'a>(cells: &'a mut [Cell], dir: &str, transfer: Transfer) -> &'a mut Cell {
    cells
        .iter_mut()
        .find(|c| c.dir == dir && c.transfer == transfer)
        .expect("every cell is listed")
}

fn report(cells: &[Cell], rounds: usize, cold: bool, json: bool) {
    if !json {
        println!(
            "rounds {rounds}; reads start {}",
            if cold {
                "cold (page cache dropped)"
            } else {
                "warm"
            }
        );
        println!(
            "{:<10} {:<12} {:>11} {:>12} {:>10} {:>10}  per round",
            "directory", "transfer", "bytes", "nasd cp s", "mount s", "ratio"
        );
    }
    for c in cells {
        let ratios: Vec<f64> = c.cp_s.iter().zip(&c.mount_s).map(|(x, y)| x / y).collect();
        let (cp, m, ratio) = (
            median(c.cp_s.clone()),
            median(c.mount_s.clone()),
            median(ratios.clone()),
        );
        if json {
            println!(
                "{}",
                serde_json::json!({"protection": c.dir, "transfer": c.transfer.name(),
                    "bytes": c.bytes, "rounds": rounds, "cold": cold, "nasd_cp_s": cp,
                    "mount_s": m, "ratio": ratio, "ratios": ratios})
            );
        } else {
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "{:<10} {:<12} {:>11} {cp:>12.3} {m:>10.3} {ratio:>10.2}  {}",
                c.dir,
                c.transfer.name(),
                c.bytes,
                each.join(" ")
            );
        }
    }
}
