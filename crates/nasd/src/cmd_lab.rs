//! `nasd lab`: reruns the seeds' measurements and models on nasd's code (issue 4). Thin: parses
//! flags, calls `nasd-lab`, prints its tables (or JSON lines) and writes its figures.

use std::path::PathBuf;

use anyhow::Context as _;

/// `nasd lab crypto|model|sweep|sim|cache|raid|scaling|andrew|prefetch|eint [--quick] [--json] [--out DIR]`.
#[derive(clap::Args, Debug)]
pub struct LabArgs {
    #[command(subcommand)]
    pub experiment: Experiment,
}

/// The experiments.
#[derive(clap::Subcommand, Debug)]
pub enum Experiment {
    /// Seed 001 Tables 1-4 and Fig 11: cryptographic costs per 64 KiB block, measured here.
    Crypto(CommonArgs),
    /// Seed 000 §3.4 Figs 5-7: compression-call cost model, beside counts of the real schemes.
    Model(CommonArgs),
    /// Seed 000 §2.1 Fig 2, §3.2 Fig 4: read throughput of the four schemes against request size
    /// and offset, timed on nasd's code (HierMAC's saw-tooth in MB/s), beside the counted calls.
    Sweep(CommonArgs),
    /// Seed 000 §5 Figs 12-17: queueing simulation of a drive with a slow digest unit.
    Sim(SimArgs),
    /// Seed 002 §3: hit rates of a file manager's and drives' split cache against one server
    /// cache of the same size (64-96 MB, 4 or 8 drives), simulated on a trace (--trace, as
    /// `lab sim`) or a synthetic AFS-like day.
    Cache(SimArgs),
    /// Seed 004 Figs 5-11: raid6x encoding, recovery, detection, correction and encryption.
    Raid(CommonArgs),
    /// Seed 002 §4 Figs 2a, 3, 4: striped NASD against a server-attached disk as client/drive
    /// pairs grow, each host in a network namespace behind a rate-capped link (needs root).
    Scaling(ScalingArgs),
    /// Seed 002 §4.6: 25 planar slices through a 64 MiB volume from a slow, cold drive, without
    /// and with informed prefetching (hints and read notifications).
    Prefetch(PrefetchArgs),
    /// Seed 003 §7 Figs 9-10: MT-, RAND- and COMP-EINT of nasd-e2e on generated files,
    /// synthetic traces and (with --tree) a real directory tree; §7.3's guidance checked.
    Eint(EintArgs),
    /// The store-and-forward server of `lab scaling` (started by it, in its namespace).
    #[command(hide = true)]
    SadServer(SadServerArgs),
    /// Seed 002 §4.2 Table 8: the Andrew benchmark's phases (mkdir, copy, stat, read,
    /// compile) on a local directory, through `nasd mount`, and through a store-and-forward
    /// file server's FUSE mount (needs /dev/fuse, gcc and make).
    Andrew(AndrewArgs),
    /// The store-and-forward file server of `lab andrew` (started by it).
    #[command(hide = true)]
    AndrewServer(AndrewServerArgs),
    /// The FUSE client of `lab andrew`'s file server (started by it).
    #[command(hide = true)]
    AndrewMount(AndrewMountArgs),
}

/// Flags every experiment takes.
#[derive(clap::Args, Debug)]
pub struct CommonArgs {
    /// Reduced run that finishes within two minutes on a 2-core machine.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object per table row instead of text tables.
    #[arg(long)]
    pub json: bool,
    /// Write a CSV and an SVG plot per figure into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seed of workloads and keys (runs are deterministic per seed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Flags of `nasd lab sim`.
#[derive(clap::Args, Debug)]
pub struct SimArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Replay this trace (lines `timestamp_s op object offset length`, see docs/lab.md) instead of
    /// the built-in NFS- and AFS-shaped workloads.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
}

/// Flags of `nasd lab eint`.
#[derive(clap::Args, Debug)]
pub struct EintArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Also census this directory tree's blocks (high entropy, compressible: seed 003 §7.3's
    /// user study) and run the schemes over a sample of its files. Bounded: see docs/lab.md.
    #[arg(long, value_name = "DIR")]
    pub tree: Option<PathBuf>,
    /// Run only this block size (a power of two from 1024 to 65536; default 65536, and a full
    /// run also 4096).
    #[arg(long, value_name = "B")]
    pub block_bytes: Option<u32>,
}

/// Flags of `nasd lab scaling`.
#[derive(clap::Args, Debug)]
pub struct ScalingArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Numbers of client/drive pairs, comma-separated (default 1-8; with --quick 1,2,4).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub pairs: Option<Vec<usize>>,
    /// Measured seconds per run (default 5; with --quick 2).
    #[arg(long, value_name = "SECS")]
    pub seconds: Option<f64>,
    /// Rate of every link, Mbit/s each way.
    #[arg(long, value_name = "MBIT", default_value_t = nasd_lab::scaling::RATE_MBIT_DEFAULT)]
    pub rate_mbit: u32,
    /// Runs per configuration and mode (default 3; with --quick 1).
    #[arg(long)]
    pub runs: Option<usize>,
}

/// Flags of `nasd lab andrew`.
#[derive(clap::Args, Debug)]
pub struct AndrewArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Runs per target (default 5; with --quick 1).
    #[arg(long)]
    pub runs: Option<usize>,
}

/// Flags of `nasd lab andrew-server`.
#[derive(clap::Args, Debug)]
pub struct AndrewServerArgs {
    /// Address to serve on.
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// The directory whose files it serves.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
    /// Never sync (default: names and attributes before each reply, data at close).
    #[arg(long = "async")]
    pub no_sync: bool,
}

/// Flags of `nasd lab andrew-mount`.
#[derive(clap::Args, Debug)]
pub struct AndrewMountArgs {
    /// The server's address.
    #[arg(long, value_name = "ADDR")]
    pub server: std::net::SocketAddr,
    /// Where to mount it.
    pub mountpoint: PathBuf,
}

/// Flags of `nasd lab prefetch`.
#[derive(clap::Args, Debug)]
pub struct PrefetchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Slices to render (default 25; with --quick 3, one per orientation).
    #[arg(long)]
    pub slices: Option<usize>,
    /// The drive's simulated seek before every data read, milliseconds.
    #[arg(long, default_value_t = nasd_lab::prefetch::SEEK_MS_DEFAULT)]
    pub seek_ms: u64,
    /// The drive's simulated spindles (reads that may wait for a seek at once).
    #[arg(long, default_value_t = nasd_drive::options::SPINDLES_DEFAULT)]
    pub spindles: usize,
}

/// Flags of `nasd lab sad-server`.
#[derive(clap::Args, Debug)]
pub struct SadServerArgs {
    /// The client config of the user the server reads as.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Address to serve on.
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// Serve only files under this directory.
    #[arg(long, value_name = "PATH")]
    pub root: String,
}

/// Runs one experiment.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    let (common, report) = match &args.experiment {
        Experiment::SadServer(a) => return sad_server(a),
        Experiment::AndrewServer(a) => return andrew_server(a),
        Experiment::AndrewMount(a) => return andrew_mount(a),
        Experiment::Andrew(a) => (&a.common, andrew(a)?),
        Experiment::Scaling(a) => (&a.common, scaling(a)?),
        Experiment::Prefetch(a) => (&a.common, prefetch(a)?),
        Experiment::Eint(a) => (&a.common, eint(a)?),
        Experiment::Crypto(c) => (c, nasd_lab::crypto::run(&options(c)).context("lab crypto")?),
        Experiment::Model(c) => (
            c,
            nasd_lab::model_exp::run(&options(c)).context("lab model")?,
        ),
        Experiment::Sweep(c) => (c, nasd_lab::sweep::run(&options(c)).context("lab sweep")?),
        Experiment::Raid(c) => (c, nasd_lab::raid::run(&options(c)).context("lab raid")?),
        Experiment::Sim(s) => (
            &s.common,
            nasd_lab::sim::run(&options(&s.common), s.trace.as_deref()).context("lab sim")?,
        ),
        Experiment::Cache(s) => (
            &s.common,
            nasd_lab::cache::run(&options(&s.common), s.trace.as_deref()).context("lab cache")?,
        ),
    };
    if common.json {
        print!("{}", report.json_lines());
    } else if matches!(args.experiment, Experiment::Sweep(_) | Experiment::Cache(_)) {
        print!("{}", text_with_plots(&report));
    } else {
        print!("{}", report.render_text());
    }
    if let Some(dir) = &common.out {
        let written = report
            .write_outputs(dir)
            .with_context(|| format!("writing figures to {}", dir.display()))?;
        for path in written {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// The report's tables, then each figure drawn as text, then the notes (which end with the
/// verdicts).
fn text_with_plots(report: &nasd_lab::Report) -> String {
    let tables = nasd_lab::Report {
        notes: Vec::new(),
        ..report.clone()
    };
    let mut out = tables.render_text();
    for fig in &report.figures {
        out.push_str(&nasd_lab::plot::draw_ascii(fig));
        out.push('\n');
    }
    let notes = nasd_lab::Report {
        experiment: report.experiment.clone(),
        notes: report.notes.clone(),
        ..nasd_lab::Report::default()
    };
    out.push_str(&notes.render_text());
    out
}

fn options(c: &CommonArgs) -> nasd_lab::LabOptions {
    nasd_lab::LabOptions {
        quick: c.quick,
        seed: c.seed,
    }
}

fn eint(a: &EintArgs) -> anyhow::Result<nasd_lab::Report> {
    let o = nasd_lab::eint::EintOptions {
        quick: a.common.quick,
        seed: a.common.seed,
        tree: a.tree.clone(),
        block_bytes: a.block_bytes,
    };
    nasd_lab::eint::run(&o).context("lab eint")
}

fn scaling(a: &ScalingArgs) -> anyhow::Result<nasd_lab::Report> {
    let o = nasd_lab::scaling::ScalingOptions {
        quick: a.common.quick,
        seed: a.common.seed,
        nasd_bin: std::env::current_exe().context("finding the nasd executable")?,
        pairs: a.pairs.clone(),
        seconds: a.seconds,
        rate_mbit: Some(a.rate_mbit),
        runs: a.runs,
    };
    nasd_lab::scaling::run(&o).context("lab scaling")
}

fn andrew(a: &AndrewArgs) -> anyhow::Result<nasd_lab::Report> {
    let o = nasd_lab::andrew::AndrewOptions {
        quick: a.common.quick,
        seed: a.common.seed,
        nasd_bin: std::env::current_exe().context("finding the nasd executable")?,
        runs: a.runs,
    };
    nasd_lab::andrew::run(&o).context("lab andrew")
}

fn andrew_server(a: &AndrewServerArgs) -> anyhow::Result<()> {
    use nasd_lab::andrew::server::Durability;
    let d = if a.no_sync {
        Durability::Async
    } else {
        Durability::Stable
    };
    nasd_lab::andrew::server::serve(&a.listen, &a.root, d, |addr| {
        outln!("nasd andrew baseline server listening on {addr}")
    })?;
    Ok(())
}

/// Serves the baseline mount until it is unmounted; SIGINT or SIGTERM unmounts first, as
/// `nasd mount` does, so the mount point is never left dead.
fn andrew_mount(a: &AndrewMountArgs) -> anyhow::Result<()> {
    let rt = crate::runtime()?;
    crate::unmount_on_signal(&rt, a.mountpoint.clone());
    nasd_lab::andrew::client::serve(a.server, &a.mountpoint)?;
    drop(rt);
    Ok(())
}

fn prefetch(a: &PrefetchArgs) -> anyhow::Result<nasd_lab::Report> {
    let o = nasd_lab::prefetch::PrefetchOptions {
        quick: a.common.quick,
        seed: a.common.seed,
        nasd_bin: std::env::current_exe().context("finding the nasd executable")?,
        slices: a.slices,
        seek_ms: Some(a.seek_ms),
        spindles: Some(a.spindles),
    };
    nasd_lab::prefetch::run(&o).context("lab prefetch")
}

fn sad_server(a: &SadServerArgs) -> anyhow::Result<()> {
    let cfg = crate::cmd_fs::session_config(&a.config)?;
    crate::runtime()?.block_on(nasd_lab::scaling::sad::serve(
        &a.listen,
        cfg,
        &a.root,
        |addr| outln!("nasd sad server listening on {addr}"),
    ))?;
    Ok(())
}
