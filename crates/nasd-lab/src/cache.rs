//! `nasd lab cache`: seed 002 §3's split-cache simulation (issue 24; requirements E.5). A
//! store-and-forward (SAD) file server keeps one data cache; in NASD the same memory is split
//! between a small file-manager cache "used only for directory data" (8 MB) and the drives,
//! files striped over them in 64 KB units. The seed's claim, from AFS traces and total caches
//! of 64 to 96 MB: "a split cache (with 4 or 8 drives) experiences a less than 10% decrease
//! in cache hit rate compared to a SAD file server with the same aggregate cache size", the
//! SAD server's hit rate "ranging from 46% to 54%".
//!
//! The simulation, per total cache `C` and drive count `D`, over one request stream:
//! - SAD: one LRU cache of `C` bytes holding data units and directory blocks;
//! - NASD: an LRU of [`MANAGER_CACHE_BYTES`] for directory blocks, and one of
//!   `(C - 8 MB) / D` bytes per drive for the data units striped to it (unit `u` of file `f`
//!   on drive `(f + u) mod D`).
//!
//! A read of a file touches each of its 64 KiB units it covers (an entry the size of the bytes
//! the unit holds); an attribute read or change touches its directory's block
//! ([`DIR_BLOCK_BYTES`], files grouped [`FILES_PER_DIR`] to a directory). Writes install
//! what they write (write-allocate) and are not counted; the hit rate is over reads of data
//! and directories, after the first [`WARMUP_FRACTION`] of the requests warm the caches.
//!
//! The stream is a trace (`--trace`, `lab sim`'s format) or, without one, a synthetic AFS-like
//! day ([`SyntheticSpec`]): whole-file fetches, files chosen by a Zipf law (file-server
//! popularity is skewed; `lab sim`'s generators pick objects uniformly, which no cache study
//! would call a trace), log-normal sizes, AFS's operation mix. Its popularity is set so that
//! the SAD hit rate lands where the seed's AFS traces put it, so that the comparison is made in
//! the same regime; what is tested is the gap between SAD and NASD.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::error::LabError;
use crate::report::{fmt, Figure, Report, Series, Table};
use crate::sim::workload::{read_trace, std_normal, FsOp, Request};
use crate::LabOptions;

/// The file manager's cache in the NASD configuration, bytes ("a small (8 MB) file manager
/// cache used only for directory data").
pub const MANAGER_CACHE_BYTES: u64 = 8 << 20;
/// The stripe unit, bytes ("striped (with a 64KB stripe unit)").
pub const STRIPE_UNIT_BYTES: u64 = 64 << 10;
/// One directory's cached block, bytes.
pub const DIR_BLOCK_BYTES: u64 = 4 << 10;
/// Files per directory (a file's directory is its number divided by this).
pub const FILES_PER_DIR: u64 = 32;
/// Total cache sizes, MB ("varying the total cache sizes over a range from 64 MB to 96 MB").
pub const TOTAL_CACHE_MB: [u64; 5] = [64, 72, 80, 88, 96];
/// Drive counts ("with 4 or 8 drives").
pub const DRIVES: [u64; 2] = [4, 8];
/// Requests that only warm the caches, as a fraction of the stream.
pub const WARMUP_FRACTION: f64 = 0.2;
/// The seed's bound on the split cache's loss: "less than 10% decrease in cache hit rate",
/// read as relative to the SAD hit rate.
pub const SEED_DECREASE_MAX_PCT: f64 = 10.0;
/// The seed's SAD hit rates, percent.
pub const SEED_SAD_HIT_PCT: (f64, f64) = (46.0, 54.0);

/// The synthetic day used without a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyntheticSpec {
    /// Files in the volume.
    pub files: u64,
    /// Zipf exponent of file popularity (rank `r` drawn with weight `r^-alpha`).
    pub zipf_alpha: f64,
    /// Median file size, bytes, and the standard deviation of its natural logarithm.
    pub median_bytes: f64,
    pub sigma_ln: f64,
    /// Largest file, bytes.
    pub max_bytes: u64,
    /// Fractions of whole-file reads, writes, attribute reads, attribute writes (AFS's mix,
    /// `lab sim`'s `AFS`).
    pub mix: [f64; 4],
    /// Requests in a full run and with `--quick`.
    pub requests: usize,
    pub requests_quick: usize,
}

/// The synthetic day: 200,000 files of 8 KiB median size (about 5 GB) in 6,250
/// directories, AFS's mix; a Zipf exponent of 0.8 puts the SAD hit rate at 51-62% for 64-96
/// MB, next to the seed's 46-54% (0.7 gives 45-56%, 0.9 61-70%).
pub const SYNTHETIC: SyntheticSpec = SyntheticSpec {
    files: 200_000,
    zipf_alpha: 0.8,
    median_bytes: 8192.0,
    sigma_ln: 1.5,
    max_bytes: 4 << 20,
    mix: [0.250, 0.052, 0.668, 0.030],
    requests: 1_000_000,
    requests_quick: 150_000,
};

/// A cached item: a 64 KiB unit of a file's data, or a directory's block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Item {
    Unit { file: u64, unit: u64 },
    Dir(u64),
}

/// An LRU cache of `capacity` bytes over items of their own sizes.
struct Lru {
    capacity: u64,
    used: u64,
    clock: u64,
    /// Item -> (size, last use).
    items: HashMap<Item, (u64, u64)>,
    /// Last use -> item, oldest first.
    order: BTreeMap<u64, Item>,
}

impl Lru {
    fn new(capacity: u64) -> Lru {
        Lru {
            capacity,
            used: 0,
            clock: 0,
            items: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    /// Touches `item` of `size` bytes: true if it was cached. It is cached afterwards (unless
    /// larger than the whole cache), the least recently used items evicted to make room.
    fn access(&mut self, item: Item, size: u64) -> bool {
        self.clock += 1;
        let hit = match self.items.remove(&item) {
            Some((old, used_at)) => {
                self.order.remove(&used_at);
                self.used -= old;
                true
            }
            None => false,
        };
        if size > self.capacity {
            return hit;
        }
        while self.used + size > self.capacity {
            let (_, victim) = self.order.pop_first().expect("used > 0 means an item");
            let (s, _) = self
                .items
                .remove(&victim)
                .expect("ordered items are cached");
            self.used -= s;
        }
        self.items.insert(item, (size, self.clock));
        self.order.insert(self.clock, item);
        self.used += size;
        hit
    }
}

/// Reads counted and those that hit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Hits {
    pub accesses: u64,
    pub hits: u64,
}

impl Hits {
    pub fn rate_pct(&self) -> f64 {
        100.0 * self.hits as f64 / self.accesses.max(1) as f64
    }

    fn count(&mut self, hit: bool) {
        self.accesses += 1;
        self.hits += u64::from(hit);
    }
}

/// One configuration's reads: of data units, of directory blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    pub data: Hits,
    pub dirs: Hits,
}

impl Counts {
    /// Every read.
    pub fn all(&self) -> Hits {
        Hits {
            accesses: self.data.accesses + self.dirs.accesses,
            hits: self.data.hits + self.dirs.hits,
        }
    }
}

/// The items a request touches: (item, bytes, counted as a read).
fn touched(r: &Request, sizes: &mut HashMap<u64, u64>) -> Vec<(Item, u64, bool)> {
    match r.op {
        FsOp::GetAttr | FsOp::SetAttr => {
            vec![(
                Item::Dir(r.object / FILES_PER_DIR),
                DIR_BLOCK_BYTES,
                r.op == FsOp::GetAttr,
            )]
        }
        FsOp::Read | FsOp::Write => {
            let end = r.offset + r.length.max(1);
            let known = sizes.entry(r.object).or_insert(0);
            *known = (*known).max(end);
            let size = *known;
            (r.offset / STRIPE_UNIT_BYTES..end.div_ceil(STRIPE_UNIT_BYTES))
                .map(|unit| {
                    let bytes = (size - unit * STRIPE_UNIT_BYTES).min(STRIPE_UNIT_BYTES);
                    (
                        Item::Unit {
                            file: r.object,
                            unit,
                        },
                        bytes,
                        r.op == FsOp::Read,
                    )
                })
                .collect()
        }
    }
}

/// Hit counts of SAD with `total` bytes and of NASD with `total` split over `drives`.
pub fn simulate(reqs: &[Request], total: u64, drives: u64) -> (Counts, Counts) {
    let mut sad = Lru::new(total);
    let mut manager = Lru::new(MANAGER_CACHE_BYTES);
    let per_drive = total.saturating_sub(MANAGER_CACHE_BYTES) / drives;
    let mut drive_caches: Vec<Lru> = (0..drives).map(|_| Lru::new(per_drive)).collect();
    let (mut s, mut n) = (Counts::default(), Counts::default());
    let counted_from = (reqs.len() as f64 * WARMUP_FRACTION) as usize;
    let mut sizes = HashMap::new();
    for (i, r) in reqs.iter().enumerate() {
        for (item, bytes, read) in touched(r, &mut sizes) {
            let sad_hit = sad.access(item, bytes);
            let nasd_hit = match item {
                Item::Dir(_) => manager.access(item, bytes),
                Item::Unit { file, unit } => {
                    drive_caches[((file + unit) % drives) as usize].access(item, bytes)
                }
            };
            if read && i >= counted_from {
                let (sc, nc) = match item {
                    Item::Dir(_) => (&mut s.dirs, &mut n.dirs),
                    Item::Unit { .. } => (&mut s.data, &mut n.data),
                };
                sc.count(sad_hit);
                nc.count(nasd_hit);
            }
        }
    }
    (s, n)
}

/// `n` requests of the synthetic day, deterministic for `seed`: a read fetches the whole
/// file, a write rewrites it whole, attribute calls name a file.
pub fn synthetic(spec: &SyntheticSpec, n: usize, seed: u64) -> Vec<Request> {
    let mut rng = StdRng::seed_from_u64(seed);
    // File sizes, and popularity: rank r (from 1) has weight r^-alpha; ranks are given to
    // files in a shuffled order so popular files are spread over directories and drives.
    let sizes: Vec<u64> = (0..spec.files)
        .map(|_| {
            let z = std_normal(&mut rng);
            ((spec.median_bytes * (spec.sigma_ln * z).exp()) as u64).clamp(1, spec.max_bytes)
        })
        .collect();
    let mut by_rank: Vec<u64> = (0..spec.files).collect();
    for i in (1..by_rank.len()).rev() {
        by_rank.swap(i, rng.random_range(0..=i));
    }
    let mut cdf = Vec::with_capacity(spec.files as usize);
    let mut acc = 0.0;
    for r in 1..=spec.files {
        acc += (r as f64).powf(-spec.zipf_alpha);
        cdf.push(acc);
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let x = rng.random::<f64>() * acc;
        let rank = cdf.partition_point(|&c| c < x).min(cdf.len() - 1);
        let object = by_rank[rank];
        let u: f64 = rng.random();
        let m = &spec.mix;
        let op = if u < m[0] {
            FsOp::Read
        } else if u < m[0] + m[1] {
            FsOp::Write
        } else if u < m[0] + m[1] + m[2] {
            FsOp::GetAttr
        } else {
            FsOp::SetAttr
        };
        let length = match op {
            FsOp::Read | FsOp::Write => sizes[object as usize],
            _ => 0,
        };
        out.push(Request {
            arrival_s: i as f64 * 1e-3,
            op,
            object,
            offset: 0,
            length,
        });
    }
    out
}

/// Runs the experiment on `trace`, or on the synthetic day.
pub fn run(opts: &LabOptions, trace: Option<&Path>) -> Result<Report, LabError> {
    let (source, reqs) = match trace {
        Some(p) => (p.display().to_string(), read_trace(p)?),
        None => {
            let n = if opts.quick {
                SYNTHETIC.requests_quick
            } else {
                SYNTHETIC.requests
            };
            (
                "synthetic AFS-like day".to_string(),
                synthetic(&SYNTHETIC, n, opts.seed),
            )
        }
    };
    let mut table = Table::new(
        "cache",
        &format!("Split cache against one server cache (seed 002 §3), {source}"),
        &[
            "total MB",
            "drives",
            "SAD hit %",
            "NASD hit %",
            "decrease % (relative)",
            "data SAD / NASD %",
            "directories SAD / NASD %",
        ],
    );
    let mut series: Vec<Series> = vec![Series {
        name: "SAD".into(),
        points: vec![],
    }];
    let mut worst = f64::MIN;
    // The largest relative losses of the data units' and the directories' hit rates.
    let (mut worst_data, mut worst_dirs) = (f64::MIN, f64::MIN);
    let loss = |a: Hits, b: Hits| 100.0 * (a.rate_pct() - b.rate_pct()) / a.rate_pct().max(1e-9);
    let mut sad_range = (f64::MAX, f64::MIN);
    let mut sad_data_range = (f64::MAX, f64::MIN);
    for &d in &DRIVES {
        let mut points = vec![];
        for &mb in &TOTAL_CACHE_MB {
            let (s, n) = simulate(&reqs, mb << 20, d);
            let (sr, nr) = (s.all().rate_pct(), n.all().rate_pct());
            let pair =
                |a: Hits, b: Hits| format!("{} / {}", fmt(a.rate_pct(), 1), fmt(b.rate_pct(), 1));
            let rel = 100.0 * (sr - nr) / sr.max(f64::MIN_POSITIVE);
            worst = worst.max(rel);
            worst_data = worst_data.max(loss(s.data, n.data));
            worst_dirs = worst_dirs.max(loss(s.dirs, n.dirs));
            sad_range = (sad_range.0.min(sr), sad_range.1.max(sr));
            let sd = s.data.rate_pct();
            sad_data_range = (sad_data_range.0.min(sd), sad_data_range.1.max(sd));
            if d == DRIVES[0] {
                series[0].points.push((mb as f64, sr));
            }
            points.push((mb as f64, nr));
            table.push(
                vec![
                    mb.to_string(),
                    d.to_string(),
                    fmt(sr, 1),
                    fmt(nr, 1),
                    fmt(rel, 1),
                    pair(s.data, n.data),
                    pair(s.dirs, n.dirs),
                ],
                json!({
                    "table": "cache", "total_mb": mb, "drives": d, "requests": reqs.len(),
                    "reads_counted": s.all().accesses, "sad_hit_pct": sr, "nasd_hit_pct": nr,
                    "decrease_rel_pct": rel, "decrease_points": sr - nr,
                    "sad_data_hit_pct": s.data.rate_pct(), "nasd_data_hit_pct": n.data.rate_pct(),
                    "sad_dir_hit_pct": s.dirs.rate_pct(), "nasd_dir_hit_pct": n.dirs.rate_pct(),
                    "source": source,
                }),
            );
        }
        series.push(Series {
            name: format!("NASD, {d} drives"),
            points,
        });
    }
    // The seed splits "the aggregate data cache": its claim is about data reads. Directory
    // reads (the manager's share) are reported beside it, and the rate over both.
    let holds = worst_data < SEED_DECREASE_MAX_PCT;
    let in_range =
        sad_range.0 >= SEED_SAD_HIT_PCT.0 - 10.0 && sad_range.1 <= SEED_SAD_HIT_PCT.1 + 10.0;
    let verdict = |h: bool| if h { "confirmed" } else { "refuted" };
    let notes = vec![
        format!(
            "Claim (seed 002 §3): a split cache with 4 or 8 drives loses less than \
             {SEED_DECREASE_MAX_PCT}% of the SAD server's data hit rate at 64-96 MB: {}, the \
             largest loss {}% relative (negative: the drives hit more, since they hold data only \
             while SAD's cache also holds directories).",
            verdict(holds),
            fmt(worst_data, 1)
        ),
        format!(
            "Counting directory reads too (one per attribute call, AFS's mix): the largest loss is \
             {}%, so over all reads the claim is {}: the manager's fixed {} MB loses up to {}% of \
             SAD's directory hit rate, since SAD gives directories whatever share of its cache they \
             earn.",
            fmt(worst, 1),
            verdict(worst < SEED_DECREASE_MAX_PCT),
            MANAGER_CACHE_BYTES >> 20,
            fmt(worst_dirs, 1)
        ),
        format!(
            "SAD hit rates over all reads {}-{}% here (over data reads alone {}-{}%) against the \
             seed's {}-{}%{}.",
            fmt(sad_range.0, 1),
            fmt(sad_range.1, 1),
            fmt(sad_data_range.0, 1),
            fmt(sad_data_range.1, 1),
            SEED_SAD_HIT_PCT.0,
            SEED_SAD_HIT_PCT.1,
            if in_range {
                ""
            } else {
                " (out of the seed's regime: the comparison is less telling)"
            }
        ),
        format!(
            "{} requests, the first {}% warming the caches; hit rates over reads of data units and \
             directory blocks; writes install what they write and are not counted.",
            reqs.len(),
            WARMUP_FRACTION * 100.0
        ),
    ];
    let mut claims = Table::new(
        "verdict",
        "Seed 002 §3's claim against the simulation",
        &["claim", "verdict", "largest loss % (relative)"],
    );
    for (claim, loss) in [("data reads", worst_data), ("all reads", worst)] {
        let v = verdict(loss < SEED_DECREASE_MAX_PCT);
        claims.push(
            vec![claim.into(), v.into(), fmt(loss, 1)],
            json!({"table": "verdict", "claim": claim, "verdict": v, "largest_loss_pct": loss,
                   "bound_pct": SEED_DECREASE_MAX_PCT}),
        );
    }
    Ok(Report {
        experiment: "cache".into(),
        tables: vec![table, claims],
        figures: vec![Figure {
            stem: "cache-hit-rates".into(),
            title: "Hit rate against total cache: SAD and NASD's split cache (seed 002 §3)".into(),
            x_label: "total cache (MB)".into(),
            y_label: "hit rate (%)".into(),
            log_y: false,
            y_max: Some(100.0),
            series,
        }],
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lru_evicts_the_least_recently_used_by_bytes() {
        let mut c = Lru::new(100);
        let (a, b, d) = (Item::Dir(1), Item::Dir(2), Item::Dir(3));
        assert!(!c.access(a, 40));
        assert!(!c.access(b, 40));
        assert!(c.access(a, 40), "a was cached");
        assert!(!c.access(d, 40), "d evicts b, the least recently used");
        assert!(c.access(a, 40));
        assert!(!c.access(b, 40));
        assert!(
            !c.access(Item::Dir(9), 101),
            "larger than the cache: never cached"
        );
        assert!(c.used <= c.capacity);
    }

    #[test]
    fn reads_touch_each_unit_at_the_bytes_it_holds_and_attributes_the_directory() {
        let mut sizes = HashMap::new();
        let r = Request {
            arrival_s: 0.0,
            op: FsOp::Read,
            object: 70,
            offset: 0,
            length: STRIPE_UNIT_BYTES + 10,
        };
        let t = touched(&r, &mut sizes);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].1, STRIPE_UNIT_BYTES);
        assert_eq!(t[1], (Item::Unit { file: 70, unit: 1 }, 10, true));
        let g = Request {
            op: FsOp::GetAttr,
            length: 0,
            ..r
        };
        assert_eq!(
            touched(&g, &mut sizes),
            vec![(Item::Dir(70 / FILES_PER_DIR), DIR_BLOCK_BYTES, true)]
        );
    }

    #[test]
    fn one_drive_with_the_managers_share_added_matches_the_server() {
        // A split with no split: one drive, and no directory traffic, is SAD less 8 MB.
        let reqs: Vec<Request> = synthetic(&SYNTHETIC, 20_000, 3)
            .into_iter()
            .filter(|r| matches!(r.op, FsOp::Read | FsOp::Write))
            .collect();
        let (_, nasd) = simulate(&reqs, (32 << 20) + MANAGER_CACHE_BYTES, 1);
        let (sad, _) = simulate(&reqs, 32 << 20, 1);
        assert_eq!(sad, nasd);
    }

    #[test]
    fn the_quick_run_reports_every_configuration_and_a_verdict() {
        let r = run(
            &LabOptions {
                quick: true,
                seed: 1,
            },
            None,
        )
        .unwrap();
        assert_eq!(r.tables[0].rows.len(), TOTAL_CACHE_MB.len() * DRIVES.len());
        assert!(r.notes[0].contains("confirmed") || r.notes[0].contains("refuted"));
        assert_eq!(
            r.tables[1].rows.len(),
            2,
            "a verdict for data reads and for all reads"
        );
    }
}
