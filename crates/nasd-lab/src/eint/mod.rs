//! `nasd lab eint`: seed 003's evaluation (§7, Figs 9-10, §7.3) rerun on nasd-e2e's real
//! MT-, RAND- and COMP-EINT (requirements Part 2 B.3, B.6).
//!
//! 1. **Micro-benchmarks (Fig 9)**: write then read whole files of low-entropy content (text,
//!    source, binaries) and of high-entropy content (random and compressed bytes), and of a
//!    sample of real files with `--tree`, under each scheme and Merkle node cache of
//!    [`CACHE_BYTES`]: running time (median of runs), integrity bandwidth per operation,
//!    untrusted storage for integrity and trusted storage, and each as a ratio to MT-EINT.
//! 2. **Trace-driven (Fig 10)**: synthetic traces ([`trace`]; the seed's Harvard NFS traces are
//!    not available here) of three shapes at [`trace::SHARES_PCT`] high-entropy content, each
//!    with Fig 10's three panels as ratios to MT-EINT.
//! 3. **`--tree DIR`**: the share of high-entropy and of incompressible blocks of a real tree
//!    beside §7.3's user study (28% and 32%), then the schemes over a sample of its files.
//!
//! Blocks are 64 KiB by default, the size nasd's cluster encrypts in (seed 001 §3.3.1); a full
//! run also does nasd-e2e's default 4 KiB, and `--block-bytes` picks one size. The verdict table
//! checks §7.3's guidance ([`verdict`]) and the seed table puts §7's numbers beside ours.
//!
//! # Layout
//!
//! - [`content`]: generated contents and the census of blocks by `IsRand` and COMP's fit.
//! - [`trace`]: the synthetic traces.
//! - [`bench`]: the schemes run over whole files, metered and timed; the meters.
//! - [`costs`]: the per-block cost of each primitive the schemes are made of.
//! - [`replay`]: the schemes over a trace, from a written population.
//! - [`tree`]: the bounded walk of `--tree`.
//! - [`results`]: rows, ratios to MT-EINT, tables and figures.
//! - [`verdict`]: §7.3's guidance and §7's numbers.

pub mod bench;
pub mod content;
pub mod costs;
pub mod replay;
pub mod results;
pub mod trace;
pub mod tree;
pub mod verdict;

use std::path::PathBuf;

use nasd_e2e::Scheme;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use self::bench::Config;
use self::content::{mix, Kind, Pool};
use self::results::{block_label, MicroRow, TraceRow};
use self::trace::{Sizing, SHAPES, SHARES_PCT};
use self::tree::TreeScan;
use crate::error::LabError;
use crate::report::Report;

/// Merkle node cache sizes, bytes: Fig 9's x axis.
pub const CACHE_BYTES: [usize; 4] = [0, 1024, 2048, 4096];
/// Node cache of the trace replays, bytes: the largest of Fig 9's (the seed's Fig 10 setting is
/// in a part of the paper not in `seeds/`).
pub const TRACE_CACHE_BYTES: usize = 4096;
/// Default block size: nasd's cluster encrypts 64 KiB blocks (seed 001 §3.3.1).
pub const BLOCK_BYTES_DEFAULT: u32 = 64 << 10;
/// Block sizes of a full run without `--block-bytes`: nasd-e2e's default and the cluster's.
pub const BLOCK_SIZES_FULL: [u32; 2] = [nasd_e2e::block::DEFAULT_BLOCK_BYTES, BLOCK_BYTES_DEFAULT];
/// Smallest file of Fig 9's generated sets.
pub const MICRO_FILE_BYTES_MIN: u64 = 16 << 10;

/// How much a run does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sizes {
    /// Timed runs of each Fig 9 configuration, and of each trace replay.
    pub micro_runs: usize,
    pub trace_runs: usize,
    /// Bytes of each generated Fig 9 content class, and its largest file.
    pub micro_bytes: u64,
    pub micro_file_bytes_max: u64,
    pub trace: Sizing,
    pub tree: tree::TreeLimits,
}

/// A full run.
pub const FULL: Sizes = Sizes {
    micro_runs: 5,
    trace_runs: 3,
    micro_bytes: 32 << 20,
    micro_file_bytes_max: 8 << 20,
    trace: Sizing {
        files: 64,
        file_bytes_max: 2 << 20,
        ops: 600,
    },
    tree: tree::LIMITS_FULL,
};

/// A `--quick` run (one block size).
pub const QUICK: Sizes = Sizes {
    micro_runs: 5,
    trace_runs: 3,
    micro_bytes: 8 << 20,
    micro_file_bytes_max: 2 << 20,
    trace: Sizing {
        files: 24,
        file_bytes_max: 1 << 20,
        ops: 200,
    },
    tree: tree::LIMITS_QUICK,
};

/// Options of `nasd lab eint`.
#[derive(Debug, Clone, Default)]
pub struct EintOptions {
    pub quick: bool,
    pub seed: u64,
    /// A directory tree to census and sample.
    pub tree: Option<PathBuf>,
    /// One block size instead of the default ones.
    pub block_bytes: Option<u32>,
}

impl EintOptions {
    /// The block sizes to run: `--block-bytes`, else 64 KiB (quick) or 4 and 64 KiB (full).
    pub fn block_sizes(&self) -> Result<Vec<u32>, LabError> {
        match self.block_bytes {
            Some(b) if nasd_e2e::block::valid_block_bytes(b) => Ok(vec![b]),
            Some(b) => Err(LabError::Usage(format!(
                "--block-bytes {b}: nasd-e2e takes a power of two from {} to {}",
                nasd_e2e::block::MIN_BLOCK_BYTES,
                nasd_e2e::block::MAX_BLOCK_BYTES
            ))),
            None if self.quick => Ok(vec![BLOCK_BYTES_DEFAULT]),
            None => Ok(BLOCK_SIZES_FULL.to_vec()),
        }
    }

    pub fn sizes(&self) -> Sizes {
        if self.quick {
            QUICK
        } else {
            FULL
        }
    }
}

/// Runs the experiment.
pub fn run(opts: &EintOptions) -> Result<Report, LabError> {
    let blocks = opts.block_sizes()?;
    let sizes = opts.sizes();
    let tree = match &opts.tree {
        Some(dir) => Some(tree::scan(
            dir,
            &sizes.tree,
            &census_sizes(&blocks),
            opts.seed,
        )?),
        None => None,
    };
    let pool = Pool::new(opts.seed);
    let key = bench::file_key(opts.seed);
    let mut contents = vec![
        ("low", micro_files(&pool, &Kind::LOW, &sizes, opts.seed)),
        (
            "high",
            micro_files(&pool, &Kind::HIGH, &sizes, opts.seed ^ 1),
        ),
    ];
    if let Some(t) = tree.as_ref().filter(|t| !t.sample.is_empty()) {
        contents.push(("tree", t.sample.clone()));
    }
    let (mut micro, mut traces, mut costs) = (Vec::new(), Vec::new(), Vec::new());
    for &b in &blocks {
        costs.extend(costs::measure_costs(b, &pool, opts.quick));
        for (name, files) in &contents {
            micro.extend(micro_rows(name, files, b, &key, sizes.micro_runs)?);
        }
        traces.extend(trace_rows(&pool, b, &key, &sizes, opts.seed)?);
    }
    let tables = tables(&costs, &micro, &traces, tree.as_ref());
    Ok(Report {
        experiment: "eint".into(),
        tables,
        figures: figures(&blocks, &contents, &micro, &traces),
        notes: [
            notes(opts, &blocks, &sizes, &contents),
            verdict::read_latency_notes(&micro),
        ]
        .concat(),
    })
}

/// Block sizes of the `--tree` census: the run's, and always nasd-e2e's 4 KiB default, at which
/// a tree of small files is more than its files' tails (the seed's block size is not in the
/// fragment of the paper in `seeds/`).
fn census_sizes(blocks: &[u32]) -> Vec<u32> {
    let mut sizes = blocks.to_vec();
    if !sizes.contains(&nasd_e2e::block::DEFAULT_BLOCK_BYTES) {
        sizes.insert(0, nasd_e2e::block::DEFAULT_BLOCK_BYTES);
    }
    sizes
}

/// Files of `kinds` in turn, log-uniform sizes, `sizes.micro_bytes` in all.
fn micro_files(pool: &Pool, kinds: &[Kind], sizes: &Sizes, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(mix(seed ^ 0xf19));
    let (lo, hi) = (
        (MICRO_FILE_BYTES_MIN as f64).ln(),
        (sizes.micro_file_bytes_max as f64).ln(),
    );
    let mut files = Vec::new();
    let mut total = 0u64;
    while total < sizes.micro_bytes {
        let len = (rng.random_range(lo..=hi).exp() as u64).min(sizes.micro_bytes - total);
        let kind = kinds[files.len() % kinds.len()];
        files.push(pool.file(kind, rng.random(), len.max(1) as usize));
        total += len.max(1);
    }
    files
}

/// Fig 9's rows of one content class and block size: every scheme and cache, in `runs`
/// interleaved rounds (so a burst of load elsewhere hits every configuration alike).
fn micro_rows(
    content: &str,
    files: &[Vec<u8>],
    block_bytes: u32,
    key: &nasd_e2e::FileKey,
    runs: usize,
) -> Result<Vec<MicroRow>, LabError> {
    let bytes = files.iter().map(|f| f.len() as u64).sum();
    let cfgs: Vec<Config> = Scheme::ALL
        .iter()
        .flat_map(|&scheme| {
            CACHE_BYTES.map(|cache_bytes| Config {
                scheme,
                block_bytes,
                cache_bytes,
            })
        })
        .collect();
    let mut passes = vec![Vec::with_capacity(runs); cfgs.len()];
    for _ in 0..runs {
        for (cfg, p) in cfgs.iter().zip(&mut passes) {
            p.push(bench::write_then_read(*cfg, key, files)?);
        }
    }
    Ok(cfgs
        .into_iter()
        .zip(passes)
        .map(|(cfg, p)| MicroRow {
            content: content.to_string(),
            bytes,
            cfg,
            run: bench::MicroRun::from_passes(&p),
        })
        .collect())
}

/// Fig 10's rows of one block size: every shape, share and scheme; each trace's population is
/// written once per scheme and its operations replayed in interleaved rounds.
fn trace_rows(
    pool: &Pool,
    block_bytes: u32,
    key: &nasd_e2e::FileKey,
    sizes: &Sizes,
    seed: u64,
) -> Result<Vec<TraceRow>, LabError> {
    let mut rows = Vec::new();
    for shape in &SHAPES {
        for share in SHARES_PCT {
            let t = trace::generate(shape, share, &sizes.trace, seed);
            let cfg = |scheme| Config {
                scheme,
                block_bytes,
                cache_bytes: TRACE_CACHE_BYTES,
            };
            let prepared = Scheme::ALL
                .iter()
                .map(|&s| replay::prepare(cfg(s), key, &t, pool))
                .collect::<Result<Vec<_>, _>>()?;
            let mut passes = vec![Vec::with_capacity(sizes.trace_runs); prepared.len()];
            for _ in 0..sizes.trace_runs {
                for (p, out) in prepared.iter().zip(&mut passes) {
                    out.push(p.replay()?);
                }
            }
            for (scheme, p) in Scheme::ALL.into_iter().zip(passes) {
                rows.push(TraceRow {
                    shape: shape.name,
                    share_pct: share,
                    cfg: cfg(scheme),
                    run: replay::TraceRun::from_passes(&p),
                });
            }
        }
    }
    Ok(rows)
}

fn tables(
    costs: &[costs::Cost],
    micro: &[MicroRow],
    traces: &[TraceRow],
    tree: Option<&TreeScan>,
) -> Vec<crate::report::Table> {
    let mut tables = vec![
        costs::cost_table(costs),
        results::micro_table(micro),
        results::trace_table(traces),
        results::trace_json(traces),
    ];
    if let Some(t) = tree {
        tables.push(results::tree_table(t));
    }
    tables.push(verdict::seed_table(traces, tree));
    tables.push(verdict::verdict_table(micro, traces));
    tables
}

fn figures(
    blocks: &[u32],
    contents: &[(&str, Vec<Vec<u8>>)],
    micro: &[MicroRow],
    traces: &[TraceRow],
) -> Vec<crate::report::Figure> {
    let shapes: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
    let mut figures = Vec::new();
    for &b in blocks {
        for (name, _) in contents {
            figures.extend(results::micro_figures(micro, b, name));
        }
        figures.extend(results::trace_figures(traces, b, &shapes));
    }
    figures
}

fn notes(
    opts: &EintOptions,
    blocks: &[u32],
    sizes: &Sizes,
    contents: &[(&str, Vec<Vec<u8>>)],
) -> Vec<String> {
    let feats: Vec<String> = crate::crypto::cpu_features()
        .iter()
        .map(|(f, on)| format!("{f}{}", if *on { "+" } else { "-" }))
        .collect();
    let sets: Vec<String> = contents
        .iter()
        .map(|(n, f)| {
            let bytes: u64 = f.iter().map(|x| x.len() as u64).sum();
            format!("{n}: {} files, {bytes} bytes", f.len())
        })
        .collect();
    let block_list: Vec<String> = blocks.iter().map(|b| block_label(*b)).collect();
    vec![
        format!(
            "machine: {}; CPU features: {}; one thread; seed {}{}",
            crate::scaling::cpu::machine(),
            feats.join(" "),
            opts.seed,
            if opts.quick { "; --quick" } else { "" }
        ),
        format!(
            "blocks {} bytes ({}); node caches {:?} bytes (traces: {TRACE_CACHE_BYTES}); \
             {} timed run(s) per Fig 9 configuration, {} per trace replay, medians reported",
            blocks
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            block_list.join(", "),
            CACHE_BYTES,
            sizes.micro_runs,
            sizes.trace_runs
        ),
        format!(
            "Fig 9 file sets ({}): generated text, source and executable-like bytes (low) and \
             uniform and deflated bytes (high), log-uniform sizes {} B to {} B; each file written \
             block by block into a new EintFile, then reopened from its trusted record (cold \
             cache) and read back",
            sets.join("; "),
            MICRO_FILE_BYTES_MIN,
            sizes.micro_file_bytes_max
        ),
        format!(
            "Fig 10 traces are synthetic (the seed's Harvard NFS traces LAIR, DEASNA and HOME02 \
             are not available here): {} files of {} B to {} B written untimed, then {} \
             operations over byte ranges (reads, overwrites with read-modify-write of partial \
             blocks, appends), Zipf file popularity; shapes read-mostly (83% reads), mixed (60%), \
             write-heavy (30%); 'high %' is the share of high-entropy bytes, 'IsRand %' the share \
             of whole blocks IsRand finds random-looking at the end",
            sizes.trace.files,
            trace::FILE_BYTES_MIN,
            sizes.trace.file_bytes_max,
            sizes.trace.ops
        ),
        "times are CPU time in one process over an in-memory untrusted store (HCTR2, entropy \
         test, deflate, tags, hashing, copies), no I/O: the seed's EncFS prototype also paid \
         disk or network time for every Merkle node it fetched, which here shows only as \
         integrity bandwidth; trusted storage is nasd-e2e's 90-byte record per file for every \
         scheme"
            .into(),
        "nasd-e2e gives every short last block a leaf under RAND-EINT (its entropy bound does \
         not hold for short blocks), while COMP-EINT frames a compressible tail in its own \
         length: with 64 KiB blocks most small files are one tail"
            .into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_follow_the_flags() {
        let o = |quick, block_bytes| EintOptions {
            quick,
            block_bytes,
            ..EintOptions::default()
        };
        assert_eq!(o(true, None).block_sizes().unwrap(), [65536]);
        assert_eq!(o(false, None).block_sizes().unwrap(), [4096, 65536]);
        assert_eq!(o(false, Some(8192)).block_sizes().unwrap(), [8192]);
        assert!(matches!(
            o(true, Some(5000)).block_sizes(),
            Err(LabError::Usage(_))
        ));
        assert!(o(true, Some(512)).block_sizes().is_err());
        assert_eq!(census_sizes(&[65536]), [4096, 65536]);
        assert_eq!(census_sizes(&[4096, 65536]), [4096, 65536]);
        assert_eq!(census_sizes(&[1024]), [4096, 1024]);
    }

    #[test]
    fn fig9_file_sets_fill_their_budget_deterministically() {
        let pool = Pool::new(4);
        let files = micro_files(&pool, &Kind::LOW, &QUICK, 4);
        assert_eq!(files, micro_files(&pool, &Kind::LOW, &QUICK, 4));
        let total: u64 = files.iter().map(|f| f.len() as u64).sum();
        assert_eq!(total, QUICK.micro_bytes);
        assert!(files
            .iter()
            .all(|f| f.len() as u64 <= QUICK.micro_file_bytes_max));
        assert!(files.len() >= 3, "every low kind is used");
    }
}
