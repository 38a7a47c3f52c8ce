//! `nasd lab sweep`: seed 000's read-size sweep, measured (issue 24; requirements E.3). Seed 000
//! §2.1 Fig 2 plots read throughput against request size with no security and with every data
//! byte MACed (IntegrityAll: "reduced by 46% for 1-KB reads and over 65% for 8-KB reads"); §3.2
//! Fig 4 plots HierMAC, which lets "performance ... closely follow the no-security performance
//! curve", with a saw-tooth whose lowest points sit "1 byte before hitting a disk block
//! boundary". `lab model` reproduces these shapes in counted compression calls; this experiment
//! times the same code, so the saw-tooth is seen in MB/s, and shows the count beside each time.
//!
//! What is timed, per request, one request at a time on one thread (the seed's single client
//! reading "from an in-memory object"), on [`counted::Meter`]'s simulated drive (an in-memory
//! `SimDisk`), in the SHA-256 suite:
//!
//! - drive: nasd-drive's `Store::read` with integrity and the reply MAC over the material it
//!   returns ([`counted::Meter::drive_read`]), what `lab model` counts for "drive read";
//! - client: the verifier `integrity::verify::feed_read` on that reply and the MAC's tag
//!   ([`counted::Meter::client_verify`]), what it counts for "client read". The tag is then
//!   compared with the drive's, outside the timed spans: every timed read really verifies;
//! - no security: `Store::read` without integrity and nothing else (drive only).
//!
//! Not timed: the network, headers and their MACs, capability checks, copies into sockets.
//! Throughput is requested bytes over time, in MB/s (10^6 bytes per second): drive MB/s (the
//! seed's drive was the bottleneck: "the CPU saturates due to cryptography"), client MB/s, and
//! end-to-end MB/s over the sum of both spans. Each point is the median of repeated batches; the
//! repetitions are interleaved over all points, so drift on a shared machine spreads evenly.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nasd_crypto::Cost;
use serde_json::json;

use crate::counted::{self, Counted, Meter};
use crate::error::LabError;
use crate::model::{self, Op, Scheme, Side, DISK_BLOCK_BYTES};
use crate::model_exp::MISALIGNED_OFFSET_BYTES;
use crate::report::{fmt, Figure, Report, Series, Table};
use crate::stats::Summary;
use crate::LabOptions;

/// Largest request of the sweep, bytes (the seed's Fig 4 axis; eight disk blocks).
pub const SWEEP_MAX_BYTES: u64 = 64 * 1024;
/// Step between request sizes in a full run, bytes.
pub const SWEEP_STEP_BYTES_FULL: u64 = 512;
/// Step between request sizes with `--quick`, bytes.
pub const SWEEP_STEP_BYTES_QUICK: u64 = 4096;
/// Fig 2's sizes the claims read (1 KB and 8 KB), always in the sweep.
pub const FIG2_SIZES_BYTES: [u64; 2] = [1024, 8192];
/// Starting offsets: aligned, and `lab model`'s misaligned offset (Figs 6a and 6b).
pub const OFFSETS_BYTES: [u64; 2] = [0, MISALIGNED_OFFSET_BYTES];
/// Timed batches per point in a full run; the median is reported.
pub const REPETITIONS_FULL: usize = 7;
/// Timed batches per point with `--quick`.
pub const REPETITIONS_QUICK: usize = 3;
/// Shortest batch in a full run, microseconds (the seed: "3+ seconds ... a minimum of 100
/// requests" per point, on a 1998 drive).
pub const BATCH_MIN_US_FULL: u64 = 5_000;
/// Shortest batch with `--quick`, microseconds.
pub const BATCH_MIN_US_QUICK: u64 = 1_000;
/// Fewest requests in a batch.
pub const BATCH_REQUESTS_MIN: u64 = 8;
/// Most requests in a batch, whatever its time.
pub const BATCH_REQUESTS_MAX: u64 = 100_000;
/// Bytes in a MB (the seed's MB/s are decimal).
pub const MB_BYTES: f64 = 1e6;
/// Saw-tooth: HierMAC's drive MB/s on a block boundary over 1 byte before it, at least, at every
/// boundary (a tooth smaller than 10% would not be told apart from a curve's noise).
pub const SAWTOOTH_JUMP_MIN: f64 = 1.10;
/// "Closely follow": HierMAC's aligned drive MB/s over no security's, at least, at every block
/// multiple.
pub const FOLLOWS_NONE_RATIO_MIN: f64 = 0.80;
/// Misaligned reads cost more: HierMAC's aligned over misaligned drive MB/s, at least, at every
/// block multiple.
pub const MISALIGNED_PENALTY_MIN: f64 = 1.10;
/// Seed 000 §2.1: IntegrityAll's throughput reduction at 1 KB, percent.
pub const SEED_FIG2_ALL_1K_PCT: f64 = 46.0;
/// Seed 000 §2.1: IntegrityAll's throughput reduction at 8 KB ("over 65%"), percent.
pub const SEED_FIG2_ALL_8K_PCT: f64 = 65.0;
/// Sizes printed in the text tables when measured (every size goes to the JSON, CSV and SVG).
pub const TABLE_SIZES_BYTES: [u64; 16] = [
    1024, 4096, 8191, 8192, 8193, 12288, 16383, 16384, 24575, 24576, 32767, 32768, 49152, 57343,
    65535, 65536,
];

const _: () = assert!(SWEEP_MAX_BYTES % DISK_BLOCK_BYTES == 0);
const _: () = assert!(DISK_BLOCK_BYTES % SWEEP_STEP_BYTES_FULL == 0);
const _: () = assert!(DISK_BLOCK_BYTES % SWEEP_STEP_BYTES_QUICK == 0);
const _: () = assert!(MISALIGNED_OFFSET_BYTES + SWEEP_MAX_BYTES < model::MODEL_OBJECT_BYTES);
const _: () = assert!(BATCH_REQUESTS_MIN <= BATCH_REQUESTS_MAX);

/// One curve of the figures: no security, or one of the four integrity schemes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Curve {
    /// `Store::read` without integrity (the seed's NoSecurity).
    NoSecurity,
    /// A scheme, drive and client as `lab model` counts them.
    Scheme(Scheme),
}

impl Curve {
    /// No security, then the schemes in the seed's order.
    pub const ALL: [Curve; 5] = [
        Curve::NoSecurity,
        Curve::Scheme(Scheme::Mac),
        Curve::Scheme(Scheme::Digest),
        Curve::Scheme(Scheme::Incremental),
        Curve::Scheme(Scheme::Tree),
    ];

    /// `none` or the scheme's DESIGN.md name.
    pub fn name(self) -> &'static str {
        match self {
            Curve::NoSecurity => "none",
            Curve::Scheme(s) => s.name(),
        }
    }

    /// The seed's name, for legends.
    pub fn label(self) -> &'static str {
        match self {
            Curve::NoSecurity => "NoSecurity",
            Curve::Scheme(s) => s.seed_name(),
        }
    }
}

/// What a run measures and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Request sizes, ascending, bytes.
    pub sizes: Vec<u64>,
    /// Timed batches per point.
    pub repetitions: usize,
    /// Shortest batch.
    pub batch_min: Duration,
}

impl Plan {
    /// The full run's plan, or the quick one's.
    pub fn new(quick: bool) -> Plan {
        let (step, repetitions, batch_us) = if quick {
            (
                SWEEP_STEP_BYTES_QUICK,
                REPETITIONS_QUICK,
                BATCH_MIN_US_QUICK,
            )
        } else {
            (SWEEP_STEP_BYTES_FULL, REPETITIONS_FULL, BATCH_MIN_US_FULL)
        };
        Plan {
            sizes: sweep_sizes(step, SWEEP_MAX_BYTES),
            repetitions,
            batch_min: Duration::from_micros(batch_us),
        }
    }
}

/// Every multiple of `step` up to `max`, both sides of every disk-block boundary (the seed's
/// saw-tooth turns there: its low points are "1 byte before" a boundary), and Fig 2's sizes.
pub fn sweep_sizes(step: u64, max: u64) -> Vec<u64> {
    assert!(step > 0, "a sweep step is at least one byte");
    let mut sizes: Vec<u64> = (1..=max / step).map(|i| i * step).collect();
    for b in 1..=max / DISK_BLOCK_BYTES {
        let edge = b * DISK_BLOCK_BYTES;
        sizes.extend([edge - 1, edge, edge + 1]);
    }
    sizes.extend(FIG2_SIZES_BYTES);
    sizes.retain(|&s| s > 0 && s <= max);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// The block boundaries whose both sides `sizes` holds.
pub fn boundaries(sizes: &[u64]) -> Vec<u64> {
    sizes
        .iter()
        .copied()
        .filter(|&s| s % DISK_BLOCK_BYTES == 0 && sizes.contains(&(s - 1)))
        .collect()
}

/// One request of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Point {
    /// The curve.
    pub curve: Curve,
    /// Starting offset, bytes.
    pub offset: u64,
    /// Request size, bytes.
    pub size: u64,
}

/// Every point of `plan`: curves x offsets x sizes.
pub fn points(plan: &Plan) -> Vec<Point> {
    let mut out = Vec::with_capacity(Curve::ALL.len() * OFFSETS_BYTES.len() * plan.sizes.len());
    for curve in Curve::ALL {
        for offset in OFFSETS_BYTES {
            for &size in &plan.sizes {
                out.push(Point {
                    curve,
                    offset,
                    size,
                });
            }
        }
    }
    out
}

/// Throughputs of one timed batch, MB/s.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    drive: f64,
    /// `None` for no security: nothing to verify.
    client: Option<f64>,
    end_to_end: f64,
}

impl Sample {
    fn of(size: u64, requests: u64, drive: Duration, client: Duration) -> Sample {
        let mb = (size * requests) as f64 / MB_BYTES;
        let per_s = |d: Duration| mb / d.as_secs_f64().max(f64::MIN_POSITIVE);
        Sample {
            drive: per_s(drive),
            client: (!client.is_zero()).then(|| per_s(client)),
            end_to_end: per_s(drive + client),
        }
    }
}

/// Times one request of `p`: the drive's span and the client's.
fn time_request(meter: &Meter, p: Point) -> Result<(Duration, Duration), LabError> {
    let mut cost = Cost::default();
    let Curve::Scheme(scheme) = p.curve else {
        let t0 = Instant::now();
        let got = meter.drive_read_plain(p.offset, p.size, &mut cost)?;
        let drive = t0.elapsed();
        if got as u64 != p.size {
            return Err(timed_err(p, format!("read {got} bytes")));
        }
        return Ok((drive, Duration::ZERO));
    };
    let t0 = Instant::now();
    let (out, drive_tag) = meter.drive_read(scheme, p.offset, p.size, &mut cost)?;
    let t1 = Instant::now();
    let client_tag = meter.client_verify(scheme, p.offset, &out, &mut cost)?;
    let t2 = Instant::now();
    if client_tag != drive_tag {
        return Err(timed_err(
            p,
            "the client's MAC differs from the drive's".into(),
        ));
    }
    Ok((t1 - t0, t2 - t1))
}

fn timed_err(p: Point, reason: String) -> LabError {
    LabError::Counted {
        scheme: p.curve.name().into(),
        op: "timed read".into(),
        size_bytes: p.size,
        offset_bytes: p.offset,
        reason,
    }
}

/// Times requests of `p` until the batch is long enough.
fn time_batch(meter: &Meter, p: Point, plan: &Plan) -> Result<Sample, LabError> {
    let start = Instant::now();
    let (mut drive, mut client, mut requests) = (Duration::ZERO, Duration::ZERO, 0u64);
    while requests < BATCH_REQUESTS_MIN
        || (start.elapsed() < plan.batch_min && requests < BATCH_REQUESTS_MAX)
    {
        let (d, c) = time_request(meter, p)?;
        drive += d;
        client += c;
        requests += 1;
    }
    Ok(Sample::of(p.size, requests, drive, client))
}

/// What the run found at one point.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The request.
    pub point: Point,
    /// Drive MB/s over the repetitions.
    pub drive: Summary,
    /// Client MB/s (`None` for no security).
    pub client: Option<Summary>,
    /// End-to-end MB/s (drive and client spans added).
    pub end_to_end: Summary,
    /// The meter's count of the drive's side (zero for no security).
    pub drive_counted: Counted,
    /// The meter's count of the client's side.
    pub client_counted: Option<Counted>,
}

/// The meter's counts for `p`, drive and client, on the same requests `lab model` counts.
fn count(meter: &mut Meter, p: Point) -> Result<(Counted, Option<Counted>), LabError> {
    let Curve::Scheme(s) = p.curve else {
        let mut cost = Cost::default();
        meter.drive_read_plain(p.offset, p.size, &mut cost)?;
        return Ok((Counted::of(&cost), None));
    };
    let mut of = |side| {
        meter
            .count(s, side, Op::Read, p.offset, p.size)?
            .ok_or_else(|| timed_err(p, "outside the model object".into()))
    };
    Ok((of(Side::Drive)?, Some(of(Side::Client)?)))
}

/// Warms every point up once, then times `plan.repetitions` interleaved rounds over all points.
fn measure(meter: &mut Meter, plan: &Plan) -> Result<Vec<Measured>, LabError> {
    let pts = points(plan);
    for &p in &pts {
        time_request(meter, p)?;
    }
    let mut samples: Vec<Vec<Sample>> = vec![Vec::with_capacity(plan.repetitions); pts.len()];
    for _ in 0..plan.repetitions {
        for (&p, s) in pts.iter().zip(&mut samples) {
            s.push(time_batch(meter, p, plan)?);
        }
    }
    let summary = |v: Vec<f64>| Summary::of(&v).expect("repetitions > 0, rates are numbers");
    let mut out = Vec::with_capacity(pts.len());
    for (p, s) in pts.into_iter().zip(samples) {
        let (drive_counted, client_counted) = count(meter, p)?;
        let client: Option<Vec<f64>> = s.iter().map(|x| x.client).collect();
        out.push(Measured {
            point: p,
            drive: summary(s.iter().map(|x| x.drive).collect()),
            client: client.map(summary),
            end_to_end: summary(s.iter().map(|x| x.end_to_end).collect()),
            drive_counted,
            client_counted,
        });
    }
    Ok(out)
}

/// Median drive MB/s per (curve, offset, size): what the claims are decided on.
pub type DriveMbps = HashMap<(Curve, u64, u64), f64>;

/// One of the seed's claims, decided on the measured numbers.
#[derive(Debug, Clone)]
pub struct Claim {
    /// Short id, the JSON `claim`.
    pub id: &'static str,
    /// The seed's figure.
    pub figure: &'static str,
    /// The seed's words.
    pub quote: &'static str,
    /// How the numbers decide it.
    pub test: String,
    /// `Some(true)`: confirmed; `Some(false)`: refuted; `None`: a needed point was not measured.
    pub holds: Option<bool>,
    /// The deciding number, in a few words.
    pub headline: String,
    /// The deciding numbers, in words.
    pub evidence: String,
    /// The deciding numbers, for JSON.
    pub numbers: serde_json::Value,
}

impl Claim {
    /// `confirmed`, `refuted` or `undecided`.
    pub fn verdict(&self) -> &'static str {
        match self.holds {
            Some(true) => "confirmed",
            Some(false) => "refuted",
            None => "undecided",
        }
    }
}

/// `num / den` of two measured points, per boundary `b`: `(b, num, den, ratio)`; `None` when a
/// point is missing.
fn ratios(
    m: &DriveMbps,
    bounds: &[u64],
    num: impl Fn(u64) -> (Curve, u64, u64),
    den: impl Fn(u64) -> (Curve, u64, u64),
) -> Option<Vec<(u64, f64, f64, f64)>> {
    bounds
        .iter()
        .map(|&b| {
            let (n, d) = (*m.get(&num(b))?, *m.get(&den(b))?);
            Some((b, n, d, n / d))
        })
        .collect()
}

/// How a claim came out on the numbers.
#[derive(Debug, Clone)]
struct Decision {
    holds: Option<bool>,
    headline: String,
    evidence: String,
    numbers: serde_json::Value,
}

/// Decides "every ratio at least `min`" and words the evidence.
fn all_at_least(rs: Option<Vec<(u64, f64, f64, f64)>>, min: f64, what: &str) -> Decision {
    let Some(rs) = rs.filter(|r| !r.is_empty()) else {
        return Decision {
            holds: None,
            headline: "not measured".into(),
            evidence: format!("{what}: not measured"),
            numbers: json!([]),
        };
    };
    let worst = rs
        .iter()
        .min_by(|a, b| a.3.total_cmp(&b.3))
        .expect("not empty");
    let list: Vec<String> = rs
        .iter()
        .map(|(b, n, d, r)| format!("{} KiB {n:.0}/{d:.0} = {r:.2}x", b / 1024))
        .collect();
    let headline = format!(
        "smallest {:.2}x at {} B (needs >= {min:.2}x)",
        worst.3, worst.0
    );
    Decision {
        holds: Some(worst.3 >= min),
        evidence: format!("{what}: {}; {headline}", list.join(", ")),
        headline,
        numbers: json!(rs
            .iter()
            .map(|(b, n, d, r)| json!({"size_bytes": b, "num_mb_per_s": n, "den_mb_per_s": d, "ratio": r}))
            .collect::<Vec<_>>()),
    }
}

const DIGEST: Curve = Curve::Scheme(Scheme::Digest);
const MAC: Curve = Curve::Scheme(Scheme::Mac);

/// Fig 4: HierMAC's drive throughput jumps on every 8 KiB boundary from its low 1 byte before.
pub fn sawtooth_claim(m: &DriveMbps, bounds: &[u64]) -> Claim {
    let rs = ratios(m, bounds, |b| (DIGEST, 0, b), |b| (DIGEST, 0, b - 1));
    let d = all_at_least(
        rs,
        SAWTOOTH_JUMP_MIN,
        "digest MB/s at 8 KiB*j over 8 KiB*j - 1, offset 0",
    );
    Claim {
        id: "hiermac_sawtooth",
        figure: "4",
        quote: "Between 8Kbyte block boundaries, performance declines ... This behavior results in the saw-tooth curve ... the lowest points of the saw-tooth, 1 byte before hitting a disk block boundary",
        test: format!("HierMAC's drive MB/s at every boundary 8 KiB*j over 1 byte before it >= {SAWTOOTH_JUMP_MIN}"),
        holds: d.holds,
        headline: d.headline,
        evidence: d.evidence,
        numbers: d.numbers,
    }
}

/// Fig 4: aligned HierMAC reads closely follow no security.
pub fn follows_claim(m: &DriveMbps, bounds: &[u64]) -> Claim {
    let rs = ratios(m, bounds, |b| (DIGEST, 0, b), |b| (Curve::NoSecurity, 0, b));
    let d = all_at_least(
        rs,
        FOLLOWS_NONE_RATIO_MIN,
        "digest over none MB/s, offset 0",
    );
    Claim {
        id: "hiermac_follows_nosecurity",
        figure: "4",
        quote: "reducing on-the-fly cryptography significantly increases read throughput, allowing performance to closely follow the no-security performance curve",
        test: format!("HierMAC's aligned drive MB/s over no security's at every 8 KiB multiple >= {FOLLOWS_NONE_RATIO_MIN}"),
        holds: d.holds,
        headline: d.headline,
        evidence: d.evidence,
        numbers: d.numbers,
    }
}

/// §3.2.1 and Fig 6b: requests misaligned with disk blocks cost HierMAC more.
pub fn misaligned_claim(m: &DriveMbps, bounds: &[u64]) -> Claim {
    let rs = ratios(
        m,
        bounds,
        |b| (DIGEST, 0, b),
        |b| (DIGEST, MISALIGNED_OFFSET_BYTES, b),
    );
    let d = all_at_least(
        rs,
        MISALIGNED_PENALTY_MIN,
        &format!("digest MB/s at offset 0 over offset {MISALIGNED_OFFSET_BYTES}"),
    );
    Claim {
        id: "misaligned_costs_more",
        figure: "4, 6b",
        quote: "Many filesystems attempt to make requests that are aligned on disk block or VM page boundaries which will result in significantly better performance",
        test: format!("HierMAC's drive MB/s at offset 0 over offset {MISALIGNED_OFFSET_BYTES} at every 8 KiB multiple >= {MISALIGNED_PENALTY_MIN}"),
        holds: d.holds,
        headline: d.headline,
        evidence: d.evidence,
        numbers: d.numbers,
    }
}

/// Fig 2: MACing every byte (Basic MAC, the seed's IntegrityAll) costs over 65% of the
/// no-security throughput at 8 KB, more than at 1 KB.
pub fn integrity_all_claim(m: &DriveMbps) -> Claim {
    let cut = |size: u64| -> Option<f64> {
        let (mac, none) = (
            m.get(&(MAC, 0, size))?,
            m.get(&(Curve::NoSecurity, 0, size))?,
        );
        Some(100.0 * (1.0 - mac / none))
    };
    let [small, large] = FIG2_SIZES_BYTES;
    let d = match (cut(small), cut(large)) {
        (Some(r1), Some(r8)) => {
            let headline = format!("{r1:.0}% at 1 KiB (seed {SEED_FIG2_ALL_1K_PCT:.0}%), {r8:.0}% at 8 KiB (seed over {SEED_FIG2_ALL_8K_PCT:.0}%)");
            Decision {
                holds: Some(r8 >= SEED_FIG2_ALL_8K_PCT && r8 > r1),
                evidence: format!("mac below none at offset 0: {headline}"),
                headline,
                numbers: json!({"reduction_1k_pct": r1, "reduction_8k_pct": r8, "seed_1k_pct": SEED_FIG2_ALL_1K_PCT, "seed_8k_pct": SEED_FIG2_ALL_8K_PCT}),
            }
        }
        _ => Decision {
            holds: None,
            headline: "not measured".into(),
            evidence: "not measured".into(),
            numbers: json!({}),
        },
    };
    Claim {
        id: "integrity_all_cost",
        figure: "2",
        quote: "the maximum throughput is reduced by 46% for 1-KB reads and over 65% for 8-KB reads, where the CPU saturates due to cryptography",
        test: format!("Basic MAC's drive MB/s below no security's by >= {SEED_FIG2_ALL_8K_PCT}% at 8 KiB, and by more than at 1 KiB"),
        holds: d.holds,
        headline: d.headline,
        evidence: d.evidence,
        numbers: d.numbers,
    }
}

/// Every claim, decided on `measured`.
pub fn claims(measured: &[Measured], sizes: &[u64]) -> Vec<Claim> {
    let m: DriveMbps = measured
        .iter()
        .map(|x| {
            (
                (x.point.curve, x.point.offset, x.point.size),
                x.drive.median,
            )
        })
        .collect();
    let bounds = boundaries(sizes);
    vec![
        sawtooth_claim(&m, &bounds),
        follows_claim(&m, &bounds),
        misaligned_claim(&m, &bounds),
        integrity_all_claim(&m),
    ]
}

/// The JSON-only table of every point.
fn points_table(measured: &[Measured]) -> Table {
    let mut t = Table::new("sweep", "every point", &[]);
    for x in measured {
        let c = x.client_counted;
        t.json.push(json!({
            "table": "sweep",
            "scheme": x.point.curve.name(),
            "offset_bytes": x.point.offset,
            "size_bytes": x.point.size,
            "drive_mb_per_s": x.drive.median,
            "drive_mb_per_s_min": x.drive.min,
            "drive_mb_per_s_max": x.drive.max,
            "client_mb_per_s": x.client.map(|s| s.median),
            "mb_per_s": x.end_to_end.median,
            "runs": x.drive.runs,
            "drive_counted": x.drive_counted.compressions(),
            "drive_counted_calls": x.drive_counted.calls,
            "client_counted": c.map(|k| k.compressions()),
            "client_counted_calls": c.map(|k| k.calls),
        }));
    }
    t
}

/// A text table at `offset`: per printed size, each curve's MB/s (drive, or end to end) beside
/// the meter's count (drive's, or drive's plus client's).
fn text_table(measured: &[Measured], offset: u64, end_to_end: bool) -> Table {
    let (what, name) = if end_to_end {
        (
            "end-to-end MB/s (drive + client verification) and counted calls of both",
            "e2e",
        )
    } else {
        ("drive MB/s and the drive's counted calls", "drive")
    };
    let mut cols = vec!["size B".to_string()];
    for c in Curve::ALL {
        cols.push(c.name().to_string());
        if c != Curve::NoSecurity {
            cols.push(format!("{} calls", c.name()));
        }
    }
    let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    let title = format!("Seed 000 Figs 2 and 4 measured, offset {offset} B: {what}");
    let mut t = Table::new(&format!("{name}-{offset}"), &title, &refs);
    for size in TABLE_SIZES_BYTES {
        let at = |c: Curve| {
            measured.iter().find(|x| {
                x.point
                    == Point {
                        curve: c,
                        offset,
                        size,
                    }
            })
        };
        let Some(none) = at(Curve::NoSecurity) else {
            continue;
        };
        let mut cells = vec![size.to_string(), fmt(rate(none, end_to_end), 0)];
        for c in &Curve::ALL[1..] {
            let x = at(*c).expect("every curve has every point");
            let calls = x.drive_counted.compressions()
                + if end_to_end {
                    x.client_counted.map_or(0.0, |k| k.compressions())
                } else {
                    0.0
                };
            cells.push(fmt(rate(x, end_to_end), 0));
            cells.push(fmt(calls, if calls.fract() == 0.0 { 0 } else { 1 }));
        }
        t.rows.push(cells);
    }
    t
}

fn rate(x: &Measured, end_to_end: bool) -> f64 {
    if end_to_end {
        x.end_to_end.median
    } else {
        x.drive.median
    }
}

/// The verdict table: one row per claim.
fn verdict_table(claims: &[Claim]) -> Table {
    let mut t = Table::new(
        "verdict",
        "Seed 000's claims against the measured drive MB/s",
        &[
            "claim",
            "figure",
            "verdict",
            "deciding numbers (all in the notes)",
        ],
    );
    for c in claims {
        t.push(
            vec![
                c.id.into(),
                c.figure.into(),
                c.verdict().into(),
                c.headline.clone(),
            ],
            json!({
                "table": "verdict",
                "claim": c.id,
                "figure": c.figure,
                "seed": c.quote,
                "test": c.test,
                "verdict": c.verdict(),
                "holds": c.holds,
                "evidence": c.evidence,
                "numbers": c.numbers,
            }),
        );
    }
    t
}

/// A figure: MB/s against request size at `offset`, one series per curve, HierMAC's first (its
/// saw-tooth is the figure's point, and an earlier series keeps a shared cell of a text plot).
fn figure(measured: &[Measured], offset: u64, end_to_end: bool) -> Figure {
    let (stem, what) = if end_to_end {
        ("e2e", "end-to-end (drive + client) read MB/s")
    } else {
        ("drive", "drive read MB/s")
    };
    let order = [
        DIGEST,
        Curve::NoSecurity,
        MAC,
        Curve::Scheme(Scheme::Incremental),
        Curve::Scheme(Scheme::Tree),
    ];
    let series = order
        .iter()
        .map(|&c| Series {
            name: c.label().into(),
            points: measured
                .iter()
                .filter(|x| x.point.curve == c && x.point.offset == offset)
                .map(|x| (x.point.size as f64, rate(x, end_to_end)))
                .collect(),
        })
        .collect();
    Figure {
        stem: format!("sweep-{stem}-{offset}"),
        title: format!("Seed 000 Fig 4 (and Fig 2) measured: {what} at offset {offset} B"),
        x_label: "request size (bytes)".into(),
        y_label: "MB/s".into(),
        log_y: false,
        y_max: None,
        series,
    }
}

/// The processor's name as /proc/cpuinfo gives it.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|n| n.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn notes(plan: &Plan, claims: &[Claim], meter: &Meter, quick: bool) -> Vec<String> {
    let feats: Vec<String> = crate::crypto::cpu_features()
        .iter()
        .map(|(f, on)| format!("{f}{}", if *on { "+" } else { "-" }))
        .collect();
    let mut out = vec![
        format!("timed: drive = Store::read with integrity + reply MAC; client = verify::feed_read + MAC tag (compared with the drive's, untimed); none = Store::read without integrity; one thread, one request at a time, on {}", meter.describe()),
        format!("MB/s = requested bytes / time (10^6 B/s), median of {} interleaved batches of >= {} requests and >= {} us per point{}; sizes {} B .. {} KiB ({} sizes), offsets {:?} B; `calls` = the meter's compressions (lab model's counted)", plan.repetitions, BATCH_REQUESTS_MIN, plan.batch_min.as_micros(), if quick { " (--quick)" } else { "" }, plan.sizes[0], SWEEP_MAX_BYTES / 1024, plan.sizes.len(), OFFSETS_BYTES),
        format!("CPU: {} ({} cores; features {}); build: {}", cpu_name(), std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1), feats.join(" "), if cfg!(debug_assertions) { "dev profile, debug assertions on (figures for docs come from a release build)" } else { "release" }),
    ];
    for c in claims {
        out.push(format!(
            "verdict: Fig {} {}: {} — {}",
            c.figure,
            c.id,
            c.verdict(),
            c.evidence
        ));
    }
    out
}

/// Runs the sweep.
pub fn run(opts: &LabOptions) -> Result<Report, LabError> {
    let plan = Plan::new(opts.quick);
    let mut meter = counted::Meter::new()?;
    let measured = measure(&mut meter, &plan)?;
    let claims = claims(&measured, &plan.sizes);
    let mut report = Report {
        experiment: "sweep".into(),
        ..Report::default()
    };
    report.tables.push(points_table(&measured));
    for offset in OFFSETS_BYTES {
        report.tables.push(text_table(&measured, offset, false));
    }
    report.tables.push(text_table(&measured, 0, true));
    report.tables.push(verdict_table(&claims));
    for offset in OFFSETS_BYTES {
        report.figures.push(figure(&measured, offset, false));
    }
    report.figures.push(figure(&measured, 0, true));
    report.notes = notes(&plan, &claims, &meter, opts.quick);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_cover_both_sides_of_every_boundary_and_fig2() {
        let s = sweep_sizes(SWEEP_STEP_BYTES_QUICK, SWEEP_MAX_BYTES);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(*s.last().unwrap(), SWEEP_MAX_BYTES);
        for j in 1..=8 {
            let b = j * DISK_BLOCK_BYTES;
            assert!(s.contains(&(b - 1)) && s.contains(&b), "{b}");
            assert_eq!(s.contains(&(b + 1)), b < SWEEP_MAX_BYTES);
        }
        assert!(FIG2_SIZES_BYTES.iter().all(|x| s.contains(x)));
        // 16 multiples of 4 KiB, 1 KiB, 8 below and 7 above the boundaries.
        assert_eq!(s.len(), 16 + 1 + 8 + 7);
        assert_eq!(
            boundaries(&s),
            (1..=8).map(|j| j * 8192).collect::<Vec<_>>()
        );
    }

    #[test]
    fn full_plan_steps_512_bytes_and_measures_every_curve_and_offset() {
        let p = Plan::new(false);
        assert_eq!(p.sizes[0], SWEEP_STEP_BYTES_FULL);
        assert_eq!(p.sizes.len(), 128 + 8 + 7);
        assert_eq!(p.repetitions, REPETITIONS_FULL);
        let pts = points(&p);
        assert_eq!(pts.len(), 5 * 2 * p.sizes.len());
        assert!(pts
            .iter()
            .any(|x| x.curve == Curve::Scheme(Scheme::Tree) && x.offset == 1000));
    }

    /// Synthetic medians: none flat at 1000 MB/s, Basic MAC at 40% of it, HierMAC at `aligned`
    /// on block multiples, `low` 1 byte before, `misaligned` at offset 1000.
    fn synthetic(aligned: f64, low: f64, misaligned: f64) -> DriveMbps {
        let mut m = DriveMbps::new();
        for size in sweep_sizes(SWEEP_STEP_BYTES_QUICK, SWEEP_MAX_BYTES) {
            let digest = if size % DISK_BLOCK_BYTES == 0 {
                aligned
            } else {
                low
            };
            for offset in OFFSETS_BYTES {
                m.insert((Curve::NoSecurity, offset, size), 1000.0);
                m.insert(
                    (MAC, offset, size),
                    if size <= 1024 { 700.0 } else { 300.0 },
                );
                let d = if offset == 0 { digest } else { misaligned };
                m.insert((DIGEST, offset, size), d);
            }
        }
        m
    }

    fn bounds() -> Vec<u64> {
        boundaries(&sweep_sizes(SWEEP_STEP_BYTES_QUICK, SWEEP_MAX_BYTES))
    }

    #[test]
    fn a_clear_sawtooth_confirms_and_a_flat_curve_refutes() {
        let c = sawtooth_claim(&synthetic(900.0, 600.0, 500.0), &bounds());
        assert_eq!((c.holds, c.verdict()), (Some(true), "confirmed"));
        assert!(c.evidence.contains("1.50x"), "{}", c.evidence);
        let c = sawtooth_claim(&synthetic(900.0, 880.0, 500.0), &bounds());
        assert_eq!(c.verdict(), "refuted");
        // One boundary without a tooth is enough to refute.
        let mut m = synthetic(900.0, 600.0, 500.0);
        m.insert((DIGEST, 0, 40959), 899.0);
        assert_eq!(sawtooth_claim(&m, &bounds()).holds, Some(false));
        assert_eq!(
            sawtooth_claim(&DriveMbps::new(), &bounds()).verdict(),
            "undecided"
        );
    }

    #[test]
    fn follows_and_misaligned_decide_on_their_thresholds() {
        let m = synthetic(850.0, 600.0, 700.0);
        assert_eq!(follows_claim(&m, &bounds()).holds, Some(true));
        assert_eq!(misaligned_claim(&m, &bounds()).holds, Some(true));
        let m = synthetic(750.0, 600.0, 700.0);
        assert_eq!(follows_claim(&m, &bounds()).holds, Some(false));
        assert_eq!(misaligned_claim(&m, &bounds()).holds, Some(false));
    }

    #[test]
    fn integrity_all_needs_over_65_pct_at_8k_and_more_than_at_1k() {
        let m = synthetic(900.0, 600.0, 500.0);
        let c = integrity_all_claim(&m);
        assert_eq!(c.holds, Some(true), "{}", c.evidence);
        assert!((c.numbers["reduction_1k_pct"].as_f64().unwrap() - 30.0).abs() < 1e-9);
        assert!((c.numbers["reduction_8k_pct"].as_f64().unwrap() - 70.0).abs() < 1e-9);
        let mut m = m;
        m.insert((MAC, 0, 8192), 400.0);
        assert_eq!(integrity_all_claim(&m).holds, Some(false));
    }

    #[test]
    fn samples_divide_requested_bytes_by_time() {
        let s = Sample::of(1_000_000, 2, Duration::from_secs(1), Duration::from_secs(3));
        assert_eq!(
            (s.drive, s.client, s.end_to_end),
            (2.0, Some(2.0 / 3.0), 0.5)
        );
        assert_eq!(
            Sample::of(10, 1, Duration::from_secs(1), Duration::ZERO).client,
            None
        );
    }

    #[test]
    fn a_quick_measurement_verifies_every_read_and_counts_like_the_model() {
        let mut meter = Meter::new().unwrap();
        let plan = Plan {
            sizes: vec![8191, 8192],
            repetitions: 1,
            batch_min: Duration::ZERO,
        };
        let m = measure(&mut meter, &plan).unwrap();
        assert_eq!(m.len(), 5 * 2 * 2);
        assert!(m
            .iter()
            .all(|x| x.drive.median > 0.0 && x.end_to_end.median > 0.0));
        let at = |c, o, s| {
            m.iter()
                .find(|x| {
                    x.point
                        == Point {
                            curve: c,
                            offset: o,
                            size: s,
                        }
                })
                .unwrap()
        };
        // Aligned HierMAC: the drive hashes no data, only the MAC over one 32-byte digest.
        assert_eq!(
            at(DIGEST, 0, 8192).drive_counted.calls,
            model::hmac_calls(32)
        );
        assert!(at(DIGEST, 0, 8191).drive_counted.calls > 128);
        assert_eq!(at(Curve::NoSecurity, 0, 8192).drive_counted.calls, 0);
        assert!(at(Curve::NoSecurity, 0, 8192).client.is_none());
    }
}
