//! `nasd lab`: reruns the seeds' measurements and models on nasd's code (issue 4). Thin: parses
//! flags, calls `nasd-lab`, prints its tables (or JSON lines) and writes its figures.

use std::path::PathBuf;

use anyhow::Context as _;

/// `nasd lab crypto|model|sim|raid [--quick] [--json] [--out DIR]`.
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
    /// Seed 000 §5 Figs 12-17: queueing simulation of a drive with a slow digest unit.
    Sim(SimArgs),
    /// Seed 004 Figs 5-11: raid6x encoding, recovery, detection, correction and encryption.
    Raid(CommonArgs),
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

/// Runs one experiment.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    let (common, report) = match &args.experiment {
        Experiment::Crypto(c) => (c, nasd_lab::crypto::run(&options(c)).context("lab crypto")?),
        Experiment::Model(c) => (
            c,
            nasd_lab::model_exp::run(&options(c)).context("lab model")?,
        ),
        Experiment::Raid(c) => (c, nasd_lab::raid::run(&options(c)).context("lab raid")?),
        Experiment::Sim(s) => (
            &s.common,
            nasd_lab::sim::run(&options(&s.common), s.trace.as_deref()).context("lab sim")?,
        ),
    };
    if common.json {
        print!("{}", report.json_lines());
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

fn options(c: &CommonArgs) -> nasd_lab::LabOptions {
    nasd_lab::LabOptions {
        quick: c.quick,
        seed: c.seed,
    }
}
