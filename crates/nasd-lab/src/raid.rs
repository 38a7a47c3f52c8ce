//! `nasd lab raid`: seed 004's experiments (Klein & Keller, Figs 5-11) rerun on `nasd-ec` and
//! this CPU.
//!
//! - Fig 5: one core, k = 12, four parities: encoding rate of per-byte GF arithmetic (log/exp
//!   multiply, one 256x256 product table, the 2-D table `D·g^y`), the seed's 32-bit table (simple
//!   and cache-aware order) and today's SIMD kernels. Jerasure is not rerun (not linked here).
//! - Fig 6: all cores, encode and then check (parity computed twice, as the seed's write + read),
//!   rate against the number of data disks k, per technique.
//! - Fig 7: speed-up from one core to all cores per technique (k = 12).
//! - Fig 8: recovery rate after one and two lost data disks against k (SIMD and cache-aware table).
//! - Fig 9: detection: random data and random parity, how often all remaining parity equations
//!   hold by chance, with no disk and with one disk failed (measured, and the analytic 2^-32 and
//!   2^-16).
//! - Fig 10: correction of 1, 2 and 3 corrupt units at unknown positions, plain per byte,
//!   encrypted per byte, and encrypted with AES-block awareness.
//! - Fig 11: integrity + redundancy + encryption (P,Q,R,S and AES-128 of every unit), user-data
//!   rate against k on one and all cores.
//!
//! Units are [`UNIT_BYTES`] (64 KiB) except in Fig 10 (one 16-byte AES block per unit, the window
//! the locator works on). Rates count user data: the 2k data units of a group. Multi-core runs
//! split each group's columns into pieces across a rayon pool of that many threads (block-level
//! parallelism, as the seed's driver did).

use std::hint::black_box;
use std::time::Instant;

use aes::cipher::{Array, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use nasd_ec::kernel::{self, Coeffs, Path};
use nasd_ec::raid6x::{Raid6x, Window};
use nasd_ec::table::{self, TableOrder, Tables};
use nasd_ec::{gf, CorrectError, Engine};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::json;

use crate::error::LabError;
use crate::report::{fmt, Figure, Report, Series, Table};
use crate::stats::Summary;
use crate::LabOptions;

/// Unit (disk block) size of the rate experiments, bytes.
pub const UNIT_BYTES: usize = 64 << 10;
/// Data disks of Fig 5 (the seed's configuration).
pub const FIG5_K: usize = 12;
/// Data disks swept in Figs 6, 8, full run.
pub const K_SWEEP_FULL: [usize; 10] = [2, 4, 6, 8, 10, 12, 16, 24, 32, 42];
/// Data disks swept in Figs 6, 8 with `--quick`.
pub const K_SWEEP_QUICK: [usize; 4] = [4, 8, 12, 16];
/// Data disks of Fig 11, full run (the seed shows 4 to 16).
pub const FIG11_K_FULL: [usize; 6] = [2, 4, 6, 8, 12, 16];
/// Data disks of Fig 11 with `--quick`.
pub const FIG11_K_QUICK: [usize; 3] = [4, 8, 16];
/// Data disks of the detection Monte-Carlo (Fig 9: "random data simulating four disks").
pub const FIG9_K: usize = 4;
/// Byte columns (trials) of Fig 9 per round and thread.
pub const FIG9_ROUND_COLUMNS: usize = 1 << 20;
/// Trials of Fig 9 with no disk failed, full run: 2^33, twice the seed's mean gap of 2^32.
pub const FIG9_TRIALS_NONE_FULL: u64 = 1 << 33;
/// Trials of Fig 9 with no disk failed, `--quick` (the analytic rate stands in).
pub const FIG9_TRIALS_NONE_QUICK: u64 = 1 << 26;
/// Trials of Fig 9 with one disk failed, full run.
pub const FIG9_TRIALS_ONE_FULL: u64 = 1 << 30;
/// Trials of Fig 9 with one disk failed, `--quick`.
pub const FIG9_TRIALS_ONE_QUICK: u64 = 1 << 26;
/// Injected errors per (k, mode, count) in Fig 10, full run (the seed's 8192).
pub const FIG10_TRIALS_FULL: usize = 8192;
/// Injected errors per cell of Fig 10 with `--quick`.
pub const FIG10_TRIALS_QUICK: usize = 512;
/// Data disks of Fig 10, full run.
pub const FIG10_K_FULL: [usize; 4] = [4, 8, 12, 16];
/// Data disks of Fig 10 with `--quick`.
pub const FIG10_K_QUICK: [usize; 2] = [4, 12];

/// The seed's reported numbers.
const SEED_FIG9_NONE: f64 = 4.3e9;
const SEED_FIG9_ONE: f64 = 6.5e4;

/// How long and how often to time a cell.
#[derive(Clone, Copy, Debug)]
struct Budget {
    runs: usize,
    run_s: f64,
}

const BUDGET_FULL: Budget = Budget {
    runs: 7,
    run_s: 0.08,
};
const BUDGET_QUICK: Budget = Budget {
    runs: 3,
    run_s: 0.02,
};

/// Runs the experiment.
pub fn run(opts: &LabOptions) -> Result<Report, LabError> {
    let budget = if opts.quick {
        BUDGET_QUICK
    } else {
        BUDGET_FULL
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut report = Report {
        experiment: "raid".into(),
        ..Report::default()
    };
    report.notes.push(format!(
        "CPU: {cores} threads; kernels {} (best {}); units {} KiB; rates are user data (2k units per group), median of {} runs of {} ms",
        Path::supported().iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
        Path::best(),
        UNIT_BYTES >> 10,
        budget.runs,
        (budget.run_s * 1e3) as u64
    ));
    let pools = Pools::new(cores)?;
    fig5(&mut report, budget, opts.seed);
    fig6_7(&mut report, budget, &pools, opts);
    fig8(&mut report, budget, opts);
    fig9(&mut report, &pools, opts)?;
    fig10(&mut report, opts)?;
    fig11(&mut report, budget, &pools, opts);
    Ok(report)
}

/// A one-thread and an all-threads rayon pool.
struct Pools {
    one: rayon::ThreadPool,
    all: rayon::ThreadPool,
    cores: usize,
}

impl Pools {
    fn new(cores: usize) -> Result<Pools, LabError> {
        let build = |n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map_err(|e| LabError::Crypto {
                    algorithm: "rayon pool".into(),
                    reason: e.to_string(),
                })
        };
        Ok(Pools {
            one: build(1)?,
            all: build(cores)?,
            cores,
        })
    }

    fn get(&self, all: bool) -> &rayon::ThreadPool {
        if all {
            &self.all
        } else {
            &self.one
        }
    }
}

/// Calls `f` (which processes `bytes` of user data) in timed runs; bytes per second, median.
fn rate(budget: Budget, bytes: usize, mut f: impl FnMut()) -> Summary {
    let t0 = Instant::now();
    f();
    let once = t0.elapsed().as_secs_f64().max(1e-9);
    let iters = ((budget.run_s / once).ceil() as u64).clamp(1, 1_000_000);
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < budget.run_s / 2.0 {
        f();
    }
    let samples: Vec<f64> = (0..budget.runs)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            bytes as f64 * iters as f64 / t.elapsed().as_secs_f64()
        })
        .collect();
    Summary::of(&samples).expect("runs > 0")
}

fn gb(s: &Summary) -> f64 {
    s.median / 1e9
}

fn random_units(rng: &mut SmallRng, count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let mut v = vec![0u8; len];
            rng.fill_bytes(&mut v);
            v
        })
        .collect()
}

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|x| x.as_slice()).collect()
}

fn muts(v: &mut [Vec<u8>]) -> Vec<&mut [u8]> {
    v.iter_mut().map(|x| x.as_mut_slice()).collect()
}

// ---------------------------------------------------------------------------------------------
// Encoding techniques (Figs 5-7)

/// A way of computing P, Q, R, S of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Technique {
    /// Per byte and coefficient: `exp[log D + e·m]` (the textbook multiply).
    LogExp,
    /// Per byte and coefficient: one lookup in the 256x256 product table (the seed's "simple
    /// lookup table").
    MulTable,
    /// Per byte and coefficient: `table8[(e·m) mod 255][D] = D·g^(e·m)` (the seed's 2-D 8-bit
    /// table).
    Table8,
    /// The seed's 32-bit table, column by column.
    Table32(TableOrder),
    /// nasd-ec's region kernels.
    Simd(Path),
}

impl Technique {
    fn name(self) -> String {
        match self {
            Technique::LogExp => "log/exp multiply".into(),
            Technique::MulTable => "256x256 product table".into(),
            Technique::Table8 => "2-D 8-bit table D·g^y".into(),
            Technique::Table32(TableOrder::Simple) => "32-bit table".into(),
            Technique::Table32(TableOrder::CacheAware) => "32-bit table, cache-optimized".into(),
            Technique::Simd(p) => format!("SIMD {p}"),
        }
    }

    fn key(self) -> String {
        match self {
            Technique::LogExp => "log-exp".into(),
            Technique::MulTable => "mul-table".into(),
            Technique::Table8 => "table8".into(),
            Technique::Table32(o) => format!("table32-{}", o.name()),
            Technique::Simd(p) => format!("simd-{p}"),
        }
    }
}

/// The byte-column techniques' coefficient exponents `(e·m) mod 255`, and the 32-bit tables.
struct Encoder {
    technique: Technique,
    exponents: Vec<[usize; 4]>,
    tables: Option<Tables>,
    coeffs: Coeffs,
}

/// `table8[y][D] = D·g^y`.
static TABLE8: std::sync::OnceLock<Vec<[u8; 256]>> = std::sync::OnceLock::new();

fn table8() -> &'static [[u8; 256]] {
    TABLE8.get_or_init(|| {
        (0..gf::GROUP_ORDER)
            .map(|y| {
                let mut row = [0u8; 256];
                for (d, v) in row.iter_mut().enumerate() {
                    *v = gf::mul(d as u8, gf::exp(y));
                }
                row
            })
            .collect()
    })
}

impl Encoder {
    fn new(technique: Technique, k: usize) -> Encoder {
        let v = nasd_ec::raid6x::coefficient_matrix(k);
        let coeffs = Coeffs::from_matrix(&v);
        let exponents = (0..2 * k)
            .map(|m| [0, m % 255, (2 * m) % 255, (3 * m) % 255])
            .collect();
        let tables = matches!(technique, Technique::Table32(_)).then(|| table::tables(&coeffs));
        table8();
        Encoder {
            technique,
            exponents,
            tables,
            coeffs,
        }
    }

    /// Parity of `data` into `parity` on the calling thread.
    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) {
        match self.technique {
            Technique::LogExp => self.per_byte(data, parity, |m, e, d| {
                if d == 0 {
                    0
                } else {
                    gf::EXP[gf::LOG[d as usize] as usize + self.exponents[m][e]]
                }
            }),
            Technique::MulTable => self.per_byte(data, parity, |m, e, d| {
                gf::MUL_TABLE[gf::EXP[self.exponents[m][e]] as usize][d as usize]
            }),
            Technique::Table8 => {
                let t8 = table8();
                self.per_byte(data, parity, |m, e, d| t8[self.exponents[m][e]][d as usize])
            }
            Technique::Table32(order) => table::dot(
                self.tables.as_ref().expect("built for table techniques"),
                data,
                parity,
                order,
            ),
            Technique::Simd(path) => kernel::dot(path, &self.coeffs, data, parity, false),
        }
    }

    /// Column by column: P gets D, Q, R, S get `product(m, e, D)`.
    fn per_byte(
        &self,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
        product: impl Fn(usize, usize, u8) -> u8,
    ) {
        let len = parity[0].len();
        for b in 0..len {
            let mut p = [0u8; 4];
            for (m, unit) in data.iter().enumerate() {
                let d = unit[b];
                p[0] ^= d;
                for (e, v) in p.iter_mut().enumerate().skip(1) {
                    *v ^= product(m, e, d);
                }
            }
            for (out, v) in parity.iter_mut().zip(p) {
                out[b] = v;
            }
        }
    }

    /// [`Encoder::encode`] split into pieces across the current rayon pool.
    fn encode_par(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) {
        kernel::for_each_piece(data, parity, kernel::PARALLEL_PIECE_BYTES, |d, p| {
            self.encode(d, p)
        });
    }
}

fn fig5_techniques() -> Vec<Technique> {
    let mut v = vec![
        Technique::LogExp,
        Technique::MulTable,
        Technique::Table8,
        Technique::Table32(TableOrder::Simple),
        Technique::Table32(TableOrder::CacheAware),
    ];
    v.extend(Path::supported().into_iter().map(Technique::Simd));
    v
}

fn fig6_techniques() -> Vec<Technique> {
    vec![
        Technique::MulTable,
        Technique::Table8,
        Technique::Table32(TableOrder::Simple),
        Technique::Table32(TableOrder::CacheAware),
        Technique::Simd(Path::best()),
    ]
}

/// Fig 5: one core, k = 12.
fn fig5(report: &mut Report, budget: Budget, seed: u64) {
    let k = FIG5_K;
    let mut rng = SmallRng::seed_from_u64(seed);
    let data = random_units(&mut rng, 2 * k, UNIT_BYTES);
    let mut parity = vec![vec![0u8; UNIT_BYTES]; 4];
    let mut t = Table::new(
        "fig5",
        "Fig 5: encoding P,Q,R,S on one core, k = 12 data disks (GB/s of user data)",
        &["technique", "GB/s", "min", "max", "x vs best 8-bit"],
    );
    let mut results = Vec::new();
    for tech in fig5_techniques() {
        let enc = Encoder::new(tech, k);
        let d = refs(&data);
        let s = rate(budget, 2 * k * UNIT_BYTES, || {
            let mut p = muts(&mut parity);
            enc.encode(black_box(&d), &mut p);
        });
        results.push((tech, s));
    }
    let best8 = results
        .iter()
        .filter(|(t, _)| {
            matches!(
                t,
                Technique::LogExp | Technique::MulTable | Technique::Table8
            )
        })
        .map(|(_, s)| s.median)
        .fold(0.0, f64::max);
    let mut bars = Vec::new();
    for (i, (tech, s)) in results.iter().enumerate() {
        t.push(
            vec![
                tech.name(),
                fmt(gb(s), 3),
                fmt(s.min / 1e9, 3),
                fmt(s.max / 1e9, 3),
                format!("{:.1}x", s.median / best8),
            ],
            json!({"figure": "5", "technique": tech.key(), "k": k, "threads": 1,
                   "gb_per_s": gb(s), "vs_best_8bit": s.median / best8}),
        );
        bars.push((i as f64, gb(s)));
    }
    let speed = |t: Technique| results.iter().find(|r| r.0 == t).map(|r| r.1.median);
    let t32 = speed(Technique::Table32(TableOrder::Simple)).unwrap_or(f64::NAN);
    let simd = speed(Technique::Simd(Path::best())).unwrap_or(f64::NAN);
    report.notes.push(format!(
        "fig5: the 32-bit table encodes {:.1}x as fast as the best per-byte 8-bit method here (seed: more than 5x the next best, Jerasure's \"good\" Cauchy RS, which is not rerun); today's SIMD kernel ({}) is {:.0}x the 32-bit table",
        t32 / best8,
        Path::best(),
        simd / t32
    ));
    report.tables.push(t);
    report.figures.push(Figure {
        stem: "fig5".into(),
        title: "Seed 004 Fig 5: encoding on one core, k = 12 (x = technique, table order)".into(),
        x_label: "technique (order of table fig5)".into(),
        y_label: "GB/s of user data".into(),
        log_y: true,
        y_max: None,
        series: vec![Series {
            name: "one core".into(),
            points: bars,
        }],
    });
}

/// Figs 6 and 7: encode + check on all cores against k; speed-up one core to all at k = 12.
fn fig6_7(report: &mut Report, budget: Budget, pools: &Pools, opts: &LabOptions) {
    let ks: &[usize] = if opts.quick {
        &K_SWEEP_QUICK
    } else {
        &K_SWEEP_FULL
    };
    let mut rng = SmallRng::seed_from_u64(opts.seed ^ 6);
    let mut t6 = Table::new(
        "fig6",
        &format!(
            "Fig 6: encode then check (parity computed twice) on {} threads, GB/s of user data",
            pools.cores
        ),
        &["technique", "k", "GB/s", "min", "max"],
    );
    let mut series: Vec<Series> = Vec::new();
    let mut fig7 = Vec::new();
    for tech in fig6_techniques() {
        let mut points = Vec::new();
        for &k in ks {
            let s = encode_check_rate(tech, k, budget, pools.get(true), &mut rng);
            t6.push(
                vec![
                    tech.name(),
                    k.to_string(),
                    fmt(gb(&s), 3),
                    fmt(s.min / 1e9, 3),
                    fmt(s.max / 1e9, 3),
                ],
                json!({"figure": "6", "technique": tech.key(), "k": k,
                       "threads": pools.cores, "gb_per_s": gb(&s)}),
            );
            points.push((k as f64, gb(&s)));
            if k == FIG5_K {
                let one = encode_check_rate(tech, k, budget, pools.get(false), &mut rng);
                fig7.push((tech, one, s));
            }
        }
        series.push(Series {
            name: tech.name(),
            points,
        });
    }
    report.tables.push(t6);
    report.figures.push(Figure {
        stem: "fig6".into(),
        title: format!(
            "Seed 004 Fig 6: encode + check on {} threads vs data disks",
            pools.cores
        ),
        x_label: "data disks k".into(),
        y_label: "GB/s of user data".into(),
        log_y: true,
        y_max: None,
        series,
    });
    fig7_table(report, pools.cores, &fig7);
}

fn fig7_table(report: &mut Report, cores: usize, rows: &[(Technique, Summary, Summary)]) {
    let mut t = Table::new(
        "fig7",
        &format!("Fig 7: encode + check, k = {FIG5_K}: one thread against {cores} threads"),
        &["technique", "1 thread GB/s", "all GB/s", "speed-up"],
    );
    let mut one = Vec::new();
    let mut all = Vec::new();
    for (i, (tech, a, b)) in rows.iter().enumerate() {
        let speedup = b.median / a.median;
        t.push(
            vec![
                tech.name(),
                fmt(gb(a), 3),
                fmt(gb(b), 3),
                format!("{speedup:.2}x"),
            ],
            json!({"figure": "7", "technique": tech.key(), "k": FIG5_K, "threads": cores,
                   "gb_per_s_one": gb(a), "gb_per_s_all": gb(b), "speedup": speedup}),
        );
        one.push((i as f64, gb(a)));
        all.push((i as f64, gb(b)));
    }
    report.tables.push(t);
    report.notes.push(format!(
        "fig7: the seed's cache-optimized table almost quadrupled on 4 cores; here {cores} threads share {cores} cores (and their caches) with everything else on the machine"
    ));
    report.figures.push(Figure {
        stem: "fig7".into(),
        title: format!("Seed 004 Fig 7: one thread vs {cores}, k = {FIG5_K} (x = technique, order of table fig7)"),
        x_label: "technique".into(),
        y_label: "GB/s of user data".into(),
        log_y: true,
        y_max: None,
        series: vec![
            Series {
                name: "1 thread".into(),
                points: one,
            },
            Series {
                name: format!("{cores} threads"),
                points: all,
            },
        ],
    });
}

/// Encode into the parity, then recompute into scratch and compare: one write plus one read.
fn encode_check_rate(
    tech: Technique,
    k: usize,
    budget: Budget,
    pool: &rayon::ThreadPool,
    rng: &mut SmallRng,
) -> Summary {
    let enc = Encoder::new(tech, k);
    let data = random_units(rng, 2 * k, UNIT_BYTES);
    let mut parity = vec![vec![0u8; UNIT_BYTES]; 4];
    let mut check = vec![vec![0u8; UNIT_BYTES]; 4];
    let d = refs(&data);
    pool.install(|| {
        rate(budget, 2 * k * UNIT_BYTES, || {
            enc.encode_par(&d, &mut muts(&mut parity));
            enc.encode_par(&d, &mut muts(&mut check));
            assert!(check == parity, "parity recomputed equals parity written");
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Fig 8: recovery

fn fig8(report: &mut Report, budget: Budget, opts: &LabOptions) {
    let ks: &[usize] = if opts.quick {
        &K_SWEEP_QUICK
    } else {
        &K_SWEEP_FULL
    };
    let mut rng = SmallRng::seed_from_u64(opts.seed ^ 8);
    let mut t = Table::new(
        "fig8",
        "Fig 8: rebuilding after one and two lost data disks, one thread (GB/s of user data)",
        &["engine", "k", "1 disk GB/s", "2 disks GB/s"],
    );
    let mut series = Vec::new();
    for engine in [Engine::Simd, Engine::Table(TableOrder::CacheAware)] {
        let (mut one_pts, mut two_pts) = (Vec::new(), Vec::new());
        for &k in ks {
            let code = Raid6x::new(k)
                .expect("swept k are allowed")
                .with_engine(engine);
            let full = encoded_group(&code, &mut rng, UNIT_BYTES);
            let one = recovery_rate(&code, &full, &[0, k], budget);
            let two = recovery_rate(&code, &full, &[0, 1, k, k + 1], budget);
            t.push(
                vec![
                    engine_label(engine),
                    k.to_string(),
                    fmt(gb(&one), 3),
                    fmt(gb(&two), 3),
                ],
                json!({"figure": "8", "engine": engine.name(), "k": k, "threads": 1,
                       "gb_per_s_one_disk": gb(&one), "gb_per_s_two_disks": gb(&two)}),
            );
            one_pts.push((k as f64, gb(&one)));
            two_pts.push((k as f64, gb(&two)));
        }
        series.push(Series {
            name: format!("{}, 1 disk lost", engine_label(engine)),
            points: one_pts,
        });
        series.push(Series {
            name: format!("{}, 2 disks lost", engine_label(engine)),
            points: two_pts,
        });
    }
    report.tables.push(t);
    report.notes.push(
        "fig8: a lost data disk erases units j and k+j of every group; rebuilding solves for them from the four parities with a cached decode plan; the table engine uses 32-bit tables of the decode matrix in cache-aware order".into(),
    );
    report.figures.push(Figure {
        stem: "fig8".into(),
        title: "Seed 004 Fig 8: recovery after lost data disks vs data disks".into(),
        x_label: "data disks k".into(),
        y_label: "GB/s of user data".into(),
        log_y: true,
        y_max: None,
        series,
    });
}

fn engine_label(e: Engine) -> String {
    match e {
        Engine::Simd => format!("SIMD {}", Path::best()),
        Engine::Table(_) => "32-bit table, cache-optimized".into(),
    }
}

fn encoded_group(code: &Raid6x, rng: &mut SmallRng, len: usize) -> Vec<Vec<u8>> {
    let data = random_units(rng, code.data_units(), len);
    let mut parity = vec![vec![0u8; len]; 4];
    code.encode(&refs(&data), &mut muts(&mut parity))
        .expect("shapes match");
    data.into_iter().chain(parity).collect()
}

fn recovery_rate(code: &Raid6x, full: &[Vec<u8>], lost: &[usize], budget: Budget) -> Summary {
    let present: Vec<bool> = (0..code.units()).map(|u| !lost.contains(&u)).collect();
    let mut units = full.to_vec();
    let s = rate(budget, code.data_units() * UNIT_BYTES, || {
        code.reconstruct(&mut units, &present)
            .expect("data-disk failures decode");
    });
    assert!(units == full, "rebuilt units equal the originals");
    s
}

// ---------------------------------------------------------------------------------------------
// Fig 9: detection

/// Matches and trials of the detection Monte-Carlo.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    trials: u64,
    matches: u64,
}

fn fig9(report: &mut Report, pools: &Pools, opts: &LabOptions) -> Result<(), LabError> {
    let k = FIG9_K;
    let code = Raid6x::new(k).expect("k = 4 is allowed");
    let n = code.units();
    let all = vec![true; n];
    let mut one_disk = all.clone();
    one_disk[0] = false;
    one_disk[k] = false;
    let (none_trials, one_trials) = if opts.quick {
        (FIG9_TRIALS_NONE_QUICK, FIG9_TRIALS_ONE_QUICK)
    } else {
        (FIG9_TRIALS_NONE_FULL, FIG9_TRIALS_ONE_FULL)
    };
    let mut t = Table::new(
        "fig9",
        &format!("Fig 9: random data and random parity (k = {k}): how often every remaining parity equation holds by chance"),
        &["failed disks", "equations", "trials", "matches", "1 match per", "95% interval", "analytic", "seed"],
    );
    let mut series = Vec::new();
    for (failed, present, trials, seed_gap) in [
        (0, &all, none_trials, SEED_FIG9_NONE),
        (1, &one_disk, one_trials, SEED_FIG9_ONE),
    ] {
        let started = Instant::now();
        let tally = detection_trials(&code, present, trials, pools, opts.seed ^ failed)?;
        let equations = 4 - 2 * failed as usize;
        let analytic = 2f64.powi(8 * equations as i32);
        let gap = tally.trials as f64 / tally.matches as f64;
        let (lo, hi) = poisson_interval(tally.matches);
        let interval = if tally.matches == 0 {
            format!("> {:.2e}", tally.trials as f64 / hi)
        } else {
            format!(
                "{:.2e} .. {:.2e}",
                tally.trials as f64 / hi,
                tally.trials as f64 / lo
            )
        };
        t.push(
            vec![
                failed.to_string(),
                equations.to_string(),
                format!("{:.2e}", tally.trials as f64),
                tally.matches.to_string(),
                if tally.matches == 0 {
                    "-".into()
                } else {
                    format!("{gap:.3e}")
                },
                interval,
                format!("{analytic:.3e}"),
                format!("{seed_gap:.1e}"),
            ],
            json!({"figure": "9", "k": k, "failed_disks": failed, "equations": equations,
                   "trials": tally.trials, "matches": tally.matches,
                   "trials_per_match": (tally.matches > 0).then_some(gap),
                   "analytic_trials_per_match": analytic, "seed_trials_per_match": seed_gap,
                   "seconds": started.elapsed().as_secs_f64()}),
        );
        series.push(Series {
            name: format!("{failed} failed: measured"),
            points: if tally.matches == 0 {
                vec![]
            } else {
                vec![(failed as f64, gap.log2())]
            },
        });
        series.push(Series {
            name: format!("{failed} failed: analytic"),
            points: vec![(failed as f64, analytic.log2())],
        });
    }
    report.tables.push(t);
    report.notes.push(
        "fig9: each trial is one byte column of 2k random data bytes and 4 random parity bytes; with f units missing (one disk = 2 units) they are rebuilt from f equations and the other 4 - f must hold, which random parity does with probability 2^(-8(4-f)): 2^-32 with no disk failed, 2^-16 with one (plain RAID 6: 2^-16 and 2^-8). Counts are measured; where the trials are too few to expect a match (--quick, no failed disk) the analytic value stands".into(),
    );
    report.figures.push(Figure {
        stem: "fig9".into(),
        title: "Seed 004 Fig 9: trials per random parity match (log2)".into(),
        x_label: "failed disks".into(),
        y_label: "log2(trials per match)".into(),
        log_y: false,
        y_max: None,
        series,
    });
    Ok(())
}

/// Counts columns of random units where `check` finds every equation holding, over `trials`
/// columns spread across the pool's threads.
fn detection_trials(
    code: &Raid6x,
    present: &[bool],
    trials: u64,
    pools: &Pools,
    seed: u64,
) -> Result<Tally, LabError> {
    use rayon::prelude::*;
    let rounds = trials.div_ceil(FIG9_ROUND_COLUMNS as u64);
    let threads = pools.cores as u64;
    let per_thread = rounds.div_ceil(threads);
    let tallies: Vec<Result<Tally, String>> = pools.all.install(|| {
        (0..threads)
            .into_par_iter()
            .map(|t| {
                let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9) ^ t);
                let mut units = vec![vec![0u8; FIG9_ROUND_COLUMNS]; code.units()];
                let mut tally = Tally::default();
                for _ in 0..per_thread.min(rounds.saturating_sub(t * per_thread)) {
                    for (u, unit) in units.iter_mut().enumerate() {
                        if present[u] {
                            rng.fill_bytes(unit);
                        }
                    }
                    let r: Vec<&[u8]> = units
                        .iter()
                        .zip(present)
                        .map(|(u, &p)| if p { u.as_slice() } else { &[][..] })
                        .collect();
                    let c = code.check(&r, present).map_err(|e| e.to_string())?;
                    tally.trials += FIG9_ROUND_COLUMNS as u64;
                    tally.matches += (FIG9_ROUND_COLUMNS - c.bad_columns) as u64;
                }
                Ok(tally)
            })
            .collect()
    });
    let mut total = Tally::default();
    for t in tallies {
        let t = t.map_err(|reason| LabError::Crypto {
            algorithm: "raid6x check".into(),
            reason,
        })?;
        total.trials += t.trials;
        total.matches += t.matches;
    }
    Ok(total)
}

/// An approximate 95% interval of a Poisson count n (exact enough for the table: n = 0 gives
/// the one-sided 3.0).
fn poisson_interval(n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 3.0);
    }
    let n = n as f64;
    // Wilson-Hilferty approximation of the chi-square quantiles.
    let lo = n * (1.0 - 1.0 / (9.0 * n) - 1.96 / (3.0 * n.sqrt())).powi(3);
    let n1 = n + 1.0;
    let hi = n1 * (1.0 - 1.0 / (9.0 * n1) + 1.96 / (3.0 * n1.sqrt())).powi(3);
    (lo.max(1e-9), hi)
}

// ---------------------------------------------------------------------------------------------
// Fig 10: correction at unknown positions

/// How the units are stored and how the locator looks at them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Plaintext on disk; one corrupt byte per unit, all in one column; located per byte.
    Plain,
    /// AES-128 per 16-byte block on disk; one corrupt ciphertext byte per unit garbles its
    /// block; located per byte (no awareness).
    EncryptedPerByte,
    /// As above, located per 16-byte window (seed 004 §4's awareness).
    EncryptedAware,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Plain, Mode::EncryptedPerByte, Mode::EncryptedAware];

    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain, per byte",
            Mode::EncryptedPerByte => "AES, per byte",
            Mode::EncryptedAware => "AES, per AES block",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::EncryptedPerByte => "aes-per-byte",
            Mode::EncryptedAware => "aes-aware",
        }
    }
}

/// Outcomes of injected errors.
#[derive(Clone, Copy, Debug, Default)]
struct Outcomes {
    corrected: usize,
    miscorrected: usize,
    ambiguous: usize,
    uncorrectable: usize,
}

impl Outcomes {
    fn total(&self) -> usize {
        self.corrected + self.miscorrected + self.ambiguous + self.uncorrectable
    }
}

fn fig10(report: &mut Report, opts: &LabOptions) -> Result<(), LabError> {
    let (ks, trials): (&[usize], usize) = if opts.quick {
        (&FIG10_K_QUICK, FIG10_TRIALS_QUICK)
    } else {
        (&FIG10_K_FULL, FIG10_TRIALS_FULL)
    };
    let cipher = aes::Aes128::new_from_slice(&opts.seed.to_le_bytes().repeat(2)).map_err(|e| {
        LabError::Crypto {
            algorithm: "AES-128".into(),
            reason: e.to_string(),
        }
    })?;
    let mut t = Table::new(
        "fig10",
        &format!("Fig 10: {trials} injected errors per cell at unknown positions (corrupt units of one 16-byte window of a group)"),
        &["k", "mode", "errors", "corrected %", "miscorrected", "ambiguous", "uncorrectable"],
    );
    let mut series: Vec<Series> = Mode::ALL
        .iter()
        .map(|m| Series {
            name: format!("3 errors, {}", m.name()),
            points: Vec::new(),
        })
        .collect();
    for &k in ks {
        let code = Raid6x::new(k).expect("k allowed");
        for (mi, mode) in Mode::ALL.into_iter().enumerate() {
            for errors in 1..=3 {
                let mut rng = SmallRng::seed_from_u64(opts.seed ^ (k * 100 + errors) as u64);
                let mut o = Outcomes::default();
                for _ in 0..trials {
                    inject_and_correct(&code, &cipher, mode, errors, &mut rng, &mut o);
                }
                let pct = 100.0 * o.corrected as f64 / o.total() as f64;
                t.push(
                    vec![
                        k.to_string(),
                        mode.name().into(),
                        errors.to_string(),
                        fmt(pct, 2),
                        o.miscorrected.to_string(),
                        o.ambiguous.to_string(),
                        o.uncorrectable.to_string(),
                    ],
                    json!({"figure": "10", "k": k, "mode": mode.key(), "errors": errors,
                           "trials": o.total(), "corrected": o.corrected,
                           "miscorrected": o.miscorrected, "ambiguous": o.ambiguous,
                           "uncorrectable": o.uncorrectable, "corrected_pct": pct}),
                );
                if errors == 3 {
                    series[mi].points.push((k as f64, pct));
                }
            }
        }
    }
    report.tables.push(t);
    report.notes.push(
        "fig10: per trial a random group with one 16-byte AES block per unit; `errors` distinct units (data or parity) get a random non-zero byte XORed at one random column (plain) or at one random ciphertext byte (AES-128, decrypted before location); `correct` then searches 1, 2, 3 corrupt units and accepts only a unique smallest explanation. Miscorrected = a unique explanation that was wrong (per byte, three errors leave one check equation, so one wrong triple often fits alone); ambiguous and uncorrectable change nothing".into(),
    );
    report.figures.push(Figure {
        stem: "fig10".into(),
        title: "Seed 004 Fig 10: triple errors corrected vs data disks".into(),
        x_label: "data disks k".into(),
        y_label: "corrected (%)".into(),
        log_y: false,
        y_max: Some(100.0),
        series,
    });
    Ok(())
}

/// One trial of Fig 10.
fn inject_and_correct(
    code: &Raid6x,
    cipher: &aes::Aes128,
    mode: Mode,
    errors: usize,
    rng: &mut SmallRng,
    o: &mut Outcomes,
) {
    const BLOCK: usize = nasd_ec::raid6x::AES_BLOCK_BYTES;
    let original = encoded_group(code, rng, BLOCK);
    let n = code.units();
    let mut hit = Vec::with_capacity(errors);
    while hit.len() < errors {
        let u = rng.random_range(0..n);
        if !hit.contains(&u) {
            hit.push(u);
        }
    }
    let mut units = original.clone();
    match mode {
        Mode::Plain => {
            let col = rng.random_range(0..BLOCK);
            for &u in &hit {
                units[u][col] ^= rng.random_range(1..=255u8);
            }
        }
        Mode::EncryptedPerByte | Mode::EncryptedAware => {
            for (u, unit) in units.iter_mut().enumerate() {
                let block: &mut aes::Block = (&mut unit[..]).try_into().expect("one AES block");
                cipher.encrypt_block(block);
                if hit.contains(&u) {
                    unit[rng.random_range(0..BLOCK)] ^= rng.random_range(1..=255u8);
                }
                let block: &mut aes::Block = (&mut unit[..]).try_into().expect("one AES block");
                cipher.decrypt_block(block);
            }
        }
    }
    let window = if mode == Mode::EncryptedAware {
        Window::AesBlock
    } else {
        Window::Byte
    };
    match code.correct(&mut units, window, 3) {
        Ok(_) if units == original => o.corrected += 1,
        Ok(_) => o.miscorrected += 1,
        Err(CorrectError::Ambiguous { .. }) => o.ambiguous += 1,
        Err(_) => o.uncorrectable += 1,
    }
}

// ---------------------------------------------------------------------------------------------
// Fig 11: integrity + redundancy + encryption

fn fig11(report: &mut Report, budget: Budget, pools: &Pools, opts: &LabOptions) {
    let ks: &[usize] = if opts.quick {
        &FIG11_K_QUICK
    } else {
        &FIG11_K_FULL
    };
    let cipher = aes::Aes128::new(&Array::from([7u8; 16]));
    let mut rng = SmallRng::seed_from_u64(opts.seed ^ 11);
    let mut t = Table::new(
        "fig11",
        "Fig 11: P,Q,R,S plus AES-128 of every data and parity unit, GB/s of user data",
        &[
            "engine",
            "k",
            "1 thread GB/s",
            "all GB/s",
            "speed-up",
            "parity share",
        ],
    );
    let mut series = Vec::new();
    for tech in [
        Technique::Simd(Path::best()),
        Technique::Table32(TableOrder::CacheAware),
    ] {
        let (mut one_pts, mut all_pts) = (Vec::new(), Vec::new());
        for &k in ks {
            let enc = Encoder::new(tech, k);
            let data = random_units(&mut rng, 2 * k, UNIT_BYTES);
            let one = combined_rate(&enc, &cipher, &data, budget, pools.get(false));
            let all = combined_rate(&enc, &cipher, &data, budget, pools.get(true));
            let share = 2.0 / (k as f64 + 2.0);
            t.push(
                vec![
                    tech.name(),
                    k.to_string(),
                    fmt(gb(&one), 3),
                    fmt(gb(&all), 3),
                    format!("{:.2}x", all.median / one.median),
                    format!("{:.0}%", 100.0 * share),
                ],
                json!({"figure": "11", "technique": tech.key(), "k": k, "threads": pools.cores,
                       "gb_per_s_one": gb(&one), "gb_per_s_all": gb(&all),
                       "speedup": all.median / one.median, "parity_share": share}),
            );
            one_pts.push((k as f64, gb(&one)));
            all_pts.push((k as f64, gb(&all)));
        }
        series.push(Series {
            name: format!("{}, 1 thread", tech.name()),
            points: one_pts,
        });
        series.push(Series {
            name: format!("{}, {} threads", tech.name(), pools.cores),
            points: all_pts,
        });
    }
    report.tables.push(t);
    report.notes.push(
        "fig11: per group, parity of the 2k data units and then AES-128 (aes crate, AES-NI; one block cipher call per 16-byte block, ECB as the seed's block-level driver) of all 2k + 4 units into separate ciphertext buffers; each thread takes pieces of the columns of every unit".into(),
    );
    report.figures.push(Figure {
        stem: "fig11".into(),
        title: "Seed 004 Fig 11: integrity + redundancy + encryption vs data disks".into(),
        x_label: "data disks k".into(),
        y_label: "GB/s of user data".into(),
        log_y: false,
        y_max: None,
        series,
    });
}

/// Parity then AES-128 of all units of a group, split into pieces across `pool`.
fn combined_rate(
    enc: &Encoder,
    cipher: &aes::Aes128,
    data: &[Vec<u8>],
    budget: Budget,
    pool: &rayon::ThreadPool,
) -> Summary {
    let len = data[0].len();
    let mut parity = vec![vec![0u8; len]; 4];
    let mut out = vec![vec![0u8; len]; data.len() + 4];
    let d = refs(data);
    pool.install(|| {
        rate(budget, data.len() * len, || {
            enc.encode_par(&d, &mut muts(&mut parity));
            let srcs: Vec<&[u8]> = d.iter().copied().chain(refs(&parity)).collect();
            kernel::for_each_piece(
                &srcs,
                &mut muts(&mut out),
                kernel::PARALLEL_PIECE_BYTES,
                |s, o| encrypt_pieces(cipher, s, o),
            );
        })
    })
}

fn encrypt_pieces(cipher: &aes::Aes128, srcs: &[&[u8]], outs: &mut [&mut [u8]]) {
    for (s, o) in srcs.iter().zip(outs.iter_mut()) {
        let (ins, _) = Array::slice_as_chunks(s);
        let (outs, _) = Array::slice_as_chunks_mut(o);
        cipher
            .encrypt_blocks_b2b(ins, outs)
            .expect("pieces are whole blocks of equal length");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_technique_computes_the_same_parity() {
        let k = 5;
        let mut rng = SmallRng::seed_from_u64(3);
        let data = random_units(&mut rng, 2 * k, 5000);
        let mut want = vec![vec![0u8; 5000]; 4];
        Raid6x::new(k)
            .unwrap()
            .encode(&refs(&data), &mut muts(&mut want))
            .unwrap();
        for tech in fig5_techniques() {
            let mut got = vec![vec![0u8; 5000]; 4];
            Encoder::new(tech, k).encode(&refs(&data), &mut muts(&mut got));
            assert_eq!(got, want, "{}", tech.name());
        }
    }

    #[test]
    fn detection_counts_chance_matches() {
        // With one disk failed, 2 equations remain: about 1 in 65536 columns match by chance.
        let code = Raid6x::new(4).unwrap();
        let pools = Pools::new(2).unwrap();
        let mut present = vec![true; code.units()];
        present[0] = false;
        present[4] = false;
        let t = detection_trials(&code, &present, 1 << 22, &pools, 1).unwrap();
        assert_eq!(t.trials, 1 << 22);
        assert!((20..=120).contains(&t.matches), "{} matches", t.matches);
    }

    #[test]
    fn single_errors_are_always_corrected_in_every_mode() {
        let code = Raid6x::new(4).unwrap();
        let cipher = aes::Aes128::new(&Array::from([1u8; 16]));
        let mut rng = SmallRng::seed_from_u64(5);
        for mode in Mode::ALL {
            let mut o = Outcomes::default();
            for _ in 0..50 {
                inject_and_correct(&code, &cipher, mode, 1, &mut rng, &mut o);
            }
            assert_eq!(o.corrected, 50, "{mode:?}: {o:?}");
        }
    }

    #[test]
    fn combined_encryption_is_aes_of_each_block() {
        let cipher = aes::Aes128::new(&Array::from([9u8; 16]));
        let src = vec![(0..64u8).collect::<Vec<u8>>()];
        let mut out = vec![vec![0u8; 64]];
        encrypt_pieces(&cipher, &refs(&src), &mut muts(&mut out));
        let mut block = Array::from([0u8; 16]);
        block.copy_from_slice(&src[0][16..32]);
        cipher.encrypt_block(&mut block);
        assert_eq!(&out[0][16..32], block.as_slice());
    }

    #[test]
    fn poisson_interval_brackets_the_count() {
        let (lo, hi) = poisson_interval(100);
        assert!(
            lo > 78.0 && lo < 82.0 && hi > 120.0 && hi < 124.0,
            "{lo} {hi}"
        );
        assert_eq!(poisson_interval(0), (0.0, 3.0));
    }
}
