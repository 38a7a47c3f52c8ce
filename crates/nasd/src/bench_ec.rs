//! `nasd bench ec`: erasure-code throughput of `nasd-ec` on this CPU (issue 13): encode, and
//! decode with 1 and 2 lost shards (`raid6x`: 1 to 4 lost units), for `rs:4+2`, `rs:8+3`,
//! `rs:10+4`, `rs:12+4` and `raid6x:4|8|12`, shard (unit) sizes 4 KiB to 1 MiB, on one thread and
//! on all CPUs.
//!
//! - `gb_per_s` counts **data bytes**: K x shard bytes per stripe for `rs`, 2k x unit bytes per
//!   group for `raid6x`, for encode and decode alike (decode rebuilds the lost data shards from
//!   the survivors with a cached decode plan). ISA-L's `erasure_code_perf` counts all shards
//!   touched ((K + M) for encode, (K + lost) for decode); multiply by those over K to compare.
//! - `threads = N`: N threads each coding their own stripes at once, the aggregate rate (a client
//!   with many stripes in flight). `lab raid` measures block-level splitting of one group.
//! - `path`: the kernel (`avx512-gfni`, `avx2`, `portable`) or, for `raid6x`, seed 004's table
//!   encoder (`table-simple`, `table-cache-aware`). Every layout runs on the best kernel at every
//!   size; the other kernels at 64 KiB; the table encoders for encode and 2 and 4 lost units.
//! - A cell is a warm-up, then `runs` time-boxed runs; the median run's rate is reported.
//!
//! A benchmark, not a test: it asserts nothing about speed; the last line compares the
//! issue's targets (`rs:4+2` at 64 KiB on one thread: encode >= 10 GB/s, decode 2 lost >= 8).

use std::time::{Duration, Instant};

use clap::Args;
use nasd_ec::kernel::Path;
use nasd_ec::{Engine, Raid6x, ReedSolomon, TableOrder};

#[derive(Args, Debug)]
pub struct BenchEcArgs {
    /// A reduced run (4 KiB, 64 KiB, 1 MiB; fewer layouts; shorter cells), about a minute.
    #[arg(long)]
    quick: bool,
    /// One JSON object per cell (`layout, op, lost, shard_bytes, threads, gb_per_s, path`).
    #[arg(long)]
    json: bool,
}

/// Time-boxed runs per cell.
struct Budget {
    run: Duration,
    runs: usize,
}

const BUDGET_FULL: Budget = Budget {
    run: Duration::from_millis(100),
    runs: 5,
};
const BUDGET_QUICK: Budget = Budget {
    run: Duration::from_millis(30),
    runs: 3,
};

const SIZES_FULL: [usize; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
const SIZES_QUICK: [usize; 3] = [4 << 10, 64 << 10, 1 << 20];
/// Shard size at which every kernel path is measured.
const PATH_SIZE: usize = 64 << 10;
const RS_FULL: [(usize, usize); 4] = [(4, 2), (8, 3), (10, 4), (12, 4)];
const RAID6X_FULL: [usize; 3] = [4, 8, 12];
const RAID6X_QUICK: [usize; 2] = [4, 12];

/// The single-core targets for `rs:4+2` at 64 KiB, GB/s of data.
const TARGET_ENCODE_GB_S: f64 = 10.0;
const TARGET_DECODE2_GB_S: f64 = 8.0;

/// One measured cell.
struct Row {
    layout: String,
    op: &'static str,
    lost: usize,
    shard_bytes: usize,
    threads: usize,
    gb_per_s: f64,
    path: String,
}

/// One operation on a thread's own buffers.
type Op = Box<dyn FnMut() + Send>;

pub fn run(a: BenchEcArgs) -> anyhow::Result<()> {
    let budget = if a.quick { &BUDGET_QUICK } else { &BUDGET_FULL };
    let sizes: &[usize] = if a.quick { &SIZES_QUICK } else { &SIZES_FULL };
    let raid6x: &[usize] = if a.quick { &RAID6X_QUICK } else { &RAID6X_FULL };
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<usize> = if all > 1 { vec![1, all] } else { vec![1] };
    let best = Path::best();
    let paths = Path::supported();
    if !a.json {
        outln!(
            "nasd bench ec: kernels {} (best {best}), {all} CPUs; GB/s of data bytes, median of {} runs of {} ms",
            paths.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
            budget.runs,
            budget.run.as_millis()
        );
        outln!(
            "{:<12} {:<7} {:>4} {:>8} {:>7} {:<18} {:>8}",
            "layout",
            "op",
            "lost",
            "shard",
            "threads",
            "path",
            "GB/s"
        );
    }
    let mut rows = Vec::new();
    let mut emit = |row: Row| {
        print_row(&row, a.json);
        rows.push(row);
    };
    for &(k, m) in &RS_FULL {
        for &size in sizes {
            let cell_paths: Vec<Path> = if size == PATH_SIZE {
                paths.clone()
            } else {
                vec![best]
            };
            for &path in cell_paths.iter().rev() {
                for lost in [0, 1, 2] {
                    for &t in &threads {
                        let ops = || rs_op(k, m, size, lost, path);
                        let rate = measure(t, budget, &ops);
                        emit(Row {
                            layout: format!("rs:{k}+{m}"),
                            op: if lost == 0 { "encode" } else { "decode" },
                            lost,
                            shard_bytes: size,
                            threads: t,
                            gb_per_s: rate * (k * size) as f64 / 1e9,
                            path: path.name().to_string(),
                        });
                    }
                }
            }
        }
    }
    for &k in raid6x {
        for &size in sizes {
            for (engine, path) in raid6x_engines(size, best, &paths) {
                for lost in 0..=4 {
                    if matches!(engine, Engine::Table(_)) && lost % 2 == 1 {
                        continue;
                    }
                    for &t in &threads {
                        let ops = || raid6x_op(k, size, lost, engine, path);
                        let rate = measure(t, budget, &ops);
                        emit(Row {
                            layout: format!("raid6x:{k}"),
                            op: if lost == 0 { "encode" } else { "decode" },
                            lost,
                            shard_bytes: size,
                            threads: t,
                            gb_per_s: rate * (2 * k * size) as f64 / 1e9,
                            path: match engine {
                                Engine::Simd => path.name().to_string(),
                                e => e.name().to_string(),
                            },
                        });
                    }
                }
            }
        }
    }
    if !a.json {
        print_targets(&rows, best);
    }
    Ok(())
}

/// The engines (and kernel paths) measured for `raid6x` at one unit size.
fn raid6x_engines(size: usize, best: Path, paths: &[Path]) -> Vec<(Engine, Path)> {
    let mut v: Vec<(Engine, Path)> = if size == PATH_SIZE {
        paths.iter().rev().map(|&p| (Engine::Simd, p)).collect()
    } else {
        vec![(Engine::Simd, best)]
    };
    v.push((Engine::Table(TableOrder::Simple), best));
    v.push((Engine::Table(TableOrder::CacheAware), best));
    v
}

fn print_row(r: &Row, json: bool) {
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "layout": r.layout,
                "op": r.op,
                "lost": r.lost,
                "shard_bytes": r.shard_bytes,
                "threads": r.threads,
                "gb_per_s": (r.gb_per_s * 1000.0).round() / 1000.0,
                "path": r.path,
            })
        );
    } else {
        outln!(
            "{:<12} {:<7} {:>4} {:>8} {:>7} {:<18} {:>8.2}",
            r.layout,
            r.op,
            r.lost,
            size_label(r.shard_bytes),
            r.threads,
            r.path,
            r.gb_per_s
        );
    }
}

fn size_label(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{}M", b >> 20)
    } else {
        format!("{}K", b >> 10)
    }
}

fn print_targets(rows: &[Row], best: Path) {
    let find = |op: &str, lost: usize| {
        rows.iter()
            .find(|r| {
                r.layout == "rs:4+2"
                    && r.op == op
                    && r.lost == lost
                    && r.shard_bytes == PATH_SIZE
                    && r.threads == 1
                    && r.path == best.name()
            })
            .map_or(f64::NAN, |r| r.gb_per_s)
    };
    let (enc, dec) = (find("encode", 0), find("decode", 2));
    let verdict = |v: f64, t: f64| if v >= t { "met" } else { "MISSED" };
    outln!(
        "targets (rs:4+2, 64 KiB, 1 thread, {best}): encode {enc:.1} GB/s (>= {TARGET_ENCODE_GB_S}: {}), decode 2 lost {dec:.1} GB/s (>= {TARGET_DECODE2_GB_S}: {})",
        verdict(enc, TARGET_ENCODE_GB_S),
        verdict(dec, TARGET_DECODE2_GB_S)
    );
}

/// Data shard i of a benchmark stripe: non-constant bytes, so no kernel shortcut applies.
fn shard(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|b| (b.wrapping_mul(131) ^ i.wrapping_mul(71) ^ (b >> 9)) as u8)
        .collect()
}

/// An encode (lost = 0) or a decode of the first `lost` data shards of `rs:k+m`.
fn rs_op(k: usize, m: usize, len: usize, lost: usize, path: Path) -> Op {
    let code = ReedSolomon::new(k, m)
        .and_then(|c| c.with_path(path))
        .expect("benchmark codes are valid on supported paths");
    let data: Vec<Vec<u8>> = (0..k).map(|i| shard(i, len)).collect();
    let mut parity = vec![vec![0u8; len]; m];
    {
        let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&d, &mut p).expect("shapes match");
    }
    if lost == 0 {
        return Box::new(move || {
            let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
            let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
            code.encode(&d, &mut p).expect("shapes match");
        });
    }
    let mut shards: Vec<Vec<u8>> = data.into_iter().chain(parity).collect();
    let present: Vec<bool> = (0..k + m).map(|i| i >= lost).collect();
    Box::new(move || {
        code.reconstruct(&mut shards, &present)
            .expect("at most M lost");
    })
}

/// The units a raid6x decode loses: 1 unit, one data disk (2), a disk and a unit (3), two data
/// disks (4).
fn raid6x_lost(k: usize, lost: usize) -> Vec<usize> {
    [0, k, 1, k + 1][..lost].to_vec()
}

fn raid6x_op(k: usize, len: usize, lost: usize, engine: Engine, path: Path) -> Op {
    let code = Raid6x::new(k)
        .and_then(|c| c.with_path(path))
        .expect("benchmark codes are valid on supported paths")
        .with_engine(engine);
    let data: Vec<Vec<u8>> = (0..2 * k).map(|i| shard(i, len)).collect();
    let mut parity = vec![vec![0u8; len]; 4];
    {
        let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&d, &mut p).expect("shapes match");
    }
    if lost == 0 {
        return Box::new(move || {
            let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
            let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
            code.encode(&d, &mut p).expect("shapes match");
        });
    }
    let mut units: Vec<Vec<u8>> = data.into_iter().chain(parity).collect();
    let gone = raid6x_lost(k, lost);
    let present: Vec<bool> = (0..2 * k + 4).map(|u| !gone.contains(&u)).collect();
    Box::new(move || {
        code.reconstruct(&mut units, &present)
            .expect("data-disk failures are decodable");
    })
}

/// Operations per second of `threads` threads, each running its own op from `make`: warm-up,
/// then the median of the budget's time-boxed runs.
fn measure(threads: usize, budget: &Budget, make: &dyn Fn() -> Op) -> f64 {
    let mut ops: Vec<Op> = (0..threads).map(|_| make()).collect();
    let timed = |ops: &mut Vec<Op>, run: Duration| -> f64 {
        let t0 = Instant::now();
        let deadline = t0 + run;
        let counts: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = ops
                .iter_mut()
                .map(|op| {
                    s.spawn(move || {
                        let mut n = 0u64;
                        while n == 0 || Instant::now() < deadline {
                            op();
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("benchmark thread"))
                .collect()
        });
        counts.iter().sum::<u64>() as f64 / t0.elapsed().as_secs_f64()
    };
    timed(&mut ops, budget.run / 2);
    let mut rates: Vec<f64> = (0..budget.runs)
        .map(|_| timed(&mut ops, budget.run))
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}
