//! The EINT experiment's rows, their ratios to MT-EINT, and the tables and figures they make.
//!
//! Seed 003 reports RAND- and COMP-EINT "relative to MT-EINT" (Fig 10's y axes, "Running time
//! relative to AES-Merkle" and so on, run from −1 to 1, and the text quotes overheads such as
//! "+30.76%"): we read that as `X / MT − 1` (inferred from the axes; the paper's definition is in
//! a part not in `seeds/`, unverified). Tables print the plain ratio `X / MT` (`×MT`), the Fig 10
//! plots draw `X / MT − 1` as the seed's did, and JSON rows carry both.

use nasd_e2e::Scheme;
use serde_json::json;

use super::bench::{Config, MicroRun};
use super::replay::TraceRun;
use super::tree::TreeScan;
use crate::report::{fmt, Figure, Series, Table};
use crate::stats::Summary;

/// Seed 003 §7.3's user study: shares of high-entropy blocks and of blocks that "cannot be
/// compressed enough to fit a MAC inside", percent.
pub const SEED_HIGH_ENTROPY_PCT: f64 = 28.0;
pub const SEED_INCOMPRESSIBLE_PCT: f64 = 32.0;

/// One write-then-read run of a content class under one configuration (Fig 9).
#[derive(Debug, Clone)]
pub struct MicroRow {
    /// `low`, `high` or `tree`.
    pub content: String,
    pub bytes: u64,
    pub cfg: Config,
    pub run: MicroRun,
}

impl MicroRow {
    fn median(v: &[f64]) -> f64 {
        Summary::of(v).map_or(0.0, |s| s.median)
    }

    pub fn write_us(&self) -> f64 {
        per_op_us(Self::median(&self.run.write_s), self.run.write.ops)
    }

    pub fn read_us(&self) -> f64 {
        per_op_us(Self::median(&self.run.read_s), self.run.read.ops)
    }

    /// Median over runs of the whole write-then-read, seconds.
    pub fn total_s(&self) -> f64 {
        let totals: Vec<f64> = (self.run.write_s.iter().zip(&self.run.read_s))
            .map(|(w, r)| w + r)
            .collect();
        Self::median(&totals)
    }

    /// Integrity bytes per operation over writes and reads.
    pub fn integrity_per_op(&self) -> f64 {
        self.run.write.plus(&self.run.read).integrity_per_op()
    }
}

/// One trace replayed under one scheme (Fig 10).
#[derive(Debug, Clone)]
pub struct TraceRow {
    pub shape: &'static str,
    pub share_pct: u32,
    pub cfg: Config,
    pub run: TraceRun,
}

impl TraceRow {
    /// Median seconds of the replay's operations.
    pub fn seconds(&self) -> f64 {
        Summary::of(&self.run.seconds).map_or(0.0, |s| s.median)
    }

    /// Average integrity bandwidth: integrity bytes per block operation.
    pub fn integrity_per_op(&self) -> f64 {
        self.run.read.plus(&self.run.write).integrity_per_op()
    }

    /// Percent of the final whole blocks `IsRand` finds random-looking.
    pub fn random_looking_pct(&self) -> f64 {
        super::content::pct(self.run.random_whole_blocks, self.run.whole_blocks)
    }

    fn same_trace(&self, o: &TraceRow) -> bool {
        self.cfg.block_bytes == o.cfg.block_bytes
            && self.shape == o.shape
            && self.share_pct == o.share_pct
    }
}

fn per_op_us(seconds: f64, ops: u64) -> f64 {
    if ops == 0 {
        0.0
    } else {
        seconds * 1e6 / ops as f64
    }
}

/// `x / base`, or `None` when the base is zero.
pub fn ratio(x: f64, base: f64) -> Option<f64> {
    (base != 0.0).then(|| x / base)
}

/// `x / base − 1` (seed 003's "relative to MT-EINT"), or `None` when the base is zero.
pub fn relative(x: f64, base: f64) -> Option<f64> {
    ratio(x, base).map(|r| r - 1.0)
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| fmt(r, 3))
}

/// `4k` or `64k`.
pub fn block_label(block_bytes: u32) -> String {
    format!("{}k", block_bytes / 1024)
}

/// The MT-EINT row of the same content, block size and cache.
pub fn micro_base<'a>(rows: &'a [MicroRow], r: &MicroRow) -> Option<&'a MicroRow> {
    rows.iter().find(|m| {
        m.cfg.scheme == Scheme::Mt
            && m.content == r.content
            && m.cfg.block_bytes == r.cfg.block_bytes
            && m.cfg.cache_bytes == r.cfg.cache_bytes
    })
}

/// The MT-EINT row of the same trace.
pub fn trace_base<'a>(rows: &'a [TraceRow], r: &TraceRow) -> Option<&'a TraceRow> {
    rows.iter()
        .find(|m| m.cfg.scheme == Scheme::Mt && m.same_trace(r))
}

/// The three ratios to MT-EINT (running time, integrity bandwidth, untrusted storage).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratios {
    pub time: Option<f64>,
    pub bandwidth: Option<f64>,
    pub storage: Option<f64>,
}

pub fn micro_ratios(rows: &[MicroRow], r: &MicroRow) -> Ratios {
    let b = micro_base(rows, r);
    Ratios {
        time: b.and_then(|b| ratio(r.total_s(), b.total_s())),
        bandwidth: b.and_then(|b| ratio(r.integrity_per_op(), b.integrity_per_op())),
        storage: b.and_then(|b| {
            ratio(
                r.run.storage.untrusted_bytes as f64,
                b.run.storage.untrusted_bytes as f64,
            )
        }),
    }
}

pub fn trace_ratios(rows: &[TraceRow], r: &TraceRow) -> Ratios {
    let b = trace_base(rows, r);
    Ratios {
        time: b.and_then(|b| ratio(r.seconds(), b.seconds())),
        bandwidth: b.and_then(|b| ratio(r.integrity_per_op(), b.integrity_per_op())),
        storage: b.and_then(|b| {
            ratio(
                r.run.storage.untrusted_bytes as f64,
                b.run.storage.untrusted_bytes as f64,
            )
        }),
    }
}

/// Fig 9's table: one row per block size, content, scheme and cache size.
pub fn micro_table(rows: &[MicroRow]) -> Table {
    let mut t = Table::new(
        "eint-micro",
        "Seed 003 Fig 9: write then read whole files, per block operation (time: median of runs; \
         ×MT: write+read time, integrity bytes per op, untrusted bytes, over MT-EINT's)",
        &[
            "block",
            "content",
            "scheme",
            "cache B",
            "write us",
            "read us",
            "wr integ B/op",
            "rd integ B/op",
            "untrusted B",
            "trusted B/file",
            "time xMT",
            "bw xMT",
            "storage xMT",
        ],
    );
    for r in rows {
        let q = micro_ratios(rows, r);
        let s = &r.run.storage;
        t.push(
            vec![
                block_label(r.cfg.block_bytes),
                r.content.clone(),
                r.cfg.scheme.name().into(),
                r.cfg.cache_bytes.to_string(),
                fmt(r.write_us(), 1),
                fmt(r.read_us(), 1),
                fmt(r.run.write.integrity_per_op(), 1),
                fmt(r.run.read.integrity_per_op(), 1),
                s.untrusted_bytes.to_string(),
                s.trusted_bytes_max.to_string(),
                fmt_ratio(q.time),
                fmt_ratio(q.bandwidth),
                fmt_ratio(q.storage),
            ],
            json!({
                "table": "micro",
                "block_bytes": r.cfg.block_bytes,
                "content": r.content,
                "scheme": r.cfg.scheme.name(),
                "cache_bytes": r.cfg.cache_bytes,
                "files": s.files,
                "bytes": r.bytes,
                "blocks": s.blocks,
                "runs": r.run.write_s.len(),
                "write_ops": r.run.write.ops,
                "read_ops": r.run.read.ops,
                "write_us_per_op": r.write_us(),
                "read_us_per_op": r.read_us(),
                "total_s": r.total_s(),
                "write_integrity_bytes_per_op": r.run.write.integrity_per_op(),
                "read_integrity_bytes_per_op": r.run.read.integrity_per_op(),
                "integrity_bytes_per_op": r.integrity_per_op(),
                "counter_bytes_per_op": r.run.write.plus(&r.run.read).counter_per_op(),
                "read_nodes_fetched": r.run.read.nodes_fetched,
                "read_nodes_from_cache": r.run.read.nodes_from_cache,
                "read_by_leaf": r.run.read.by_leaf,
                "read_by_entropy": r.run.read.by_entropy,
                "read_by_tag": r.run.read.by_tag,
                "leaves": s.leaves,
                "untrusted_bytes": s.untrusted_bytes,
                "trusted_bytes_per_file": s.trusted_bytes_max,
                "trusted_bytes_per_file_min": s.trusted_bytes_min,
                "time_ratio": q.time,
                "bandwidth_ratio": q.bandwidth,
                "storage_ratio": q.storage,
            }),
        );
    }
    t
}

/// Fig 10's table in text: one row per trace, MT-EINT's figures and the others' ratios (no JSON:
/// [`trace_json`] has a row per trace and scheme).
pub fn trace_table(rows: &[TraceRow]) -> Table {
    let mut t = Table::new(
        "eint-trace",
        "Seed 003 Fig 10 on synthetic traces: MT-EINT's running time, integrity bytes per block \
         op (ctr: of which counter intervals, the same in every scheme) and untrusted integrity \
         bytes; RAND and COMP as ratios to them (x = X/MT; the seed plots X/MT - 1)",
        &[
            "block",
            "trace",
            "high %",
            "IsRand %",
            "block ops r/w",
            "MT ms",
            "MT B/op",
            "ctr B/op",
            "MT untrusted B",
            "RAND time",
            "RAND bw",
            "RAND stor",
            "COMP time",
            "COMP bw",
            "COMP stor",
        ],
    );
    for mt in rows.iter().filter(|r| r.cfg.scheme == Scheme::Mt) {
        let find = |s: Scheme| {
            rows.iter()
                .find(|r| r.cfg.scheme == s && r.same_trace(mt))
                .map(|r| trace_ratios(rows, r))
        };
        let (rand, comp) = (find(Scheme::Rand), find(Scheme::Comp));
        let cell =
            |q: Option<Ratios>, f: fn(&Ratios) -> Option<f64>| fmt_ratio(q.as_ref().and_then(f));
        let cells = vec![
            block_label(mt.cfg.block_bytes),
            mt.shape.into(),
            mt.share_pct.to_string(),
            fmt(mt.random_looking_pct(), 1),
            format!("{}/{}", mt.run.read.ops, mt.run.write.ops),
            fmt(mt.seconds() * 1e3, 1),
            fmt(mt.integrity_per_op(), 1),
            fmt(mt.run.read.plus(&mt.run.write).counter_per_op(), 1),
            mt.run.storage.untrusted_bytes.to_string(),
            cell(rand, |q| q.time),
            cell(rand, |q| q.bandwidth),
            cell(rand, |q| q.storage),
            cell(comp, |q| q.time),
            cell(comp, |q| q.bandwidth),
            cell(comp, |q| q.storage),
        ];
        debug_assert_eq!(cells.len(), t.columns.len());
        t.rows.push(cells);
    }
    t
}

/// Fig 10's rows for `--json`: one per trace and scheme.
pub fn trace_json(rows: &[TraceRow]) -> Table {
    let mut t = Table::new("eint-trace-rows", "", &[]);
    for r in rows {
        let q = trace_ratios(rows, r);
        let s = &r.run.storage;
        t.json.push(json!({
            "table": "trace",
            "block_bytes": r.cfg.block_bytes,
            "trace": r.shape,
            "share_pct": r.share_pct,
            "random_looking_pct": r.random_looking_pct(),
            "scheme": r.cfg.scheme.name(),
            "cache_bytes": r.cfg.cache_bytes,
            "runs": r.run.seconds.len(),
            "read_ops": r.run.read.ops,
            "write_ops": r.run.write.ops,
            "rmw_reads": r.run.rmw_reads,
            "seconds": r.seconds(),
            "read_us_per_op": r.run.read.us_per_op(),
            "write_us_per_op": r.run.write.us_per_op(),
            "integrity_bytes_per_op": r.integrity_per_op(),
            "counter_bytes_per_op": r.run.read.plus(&r.run.write).counter_per_op(),
            "read_integrity_bytes_per_op": r.run.read.integrity_per_op(),
            "write_integrity_bytes_per_op": r.run.write.integrity_per_op(),
            "files": s.files,
            "blocks": s.blocks,
            "leaves": s.leaves,
            "untrusted_bytes": s.untrusted_bytes,
            "trusted_bytes_per_file": s.trusted_bytes_max,
            "trusted_bytes_per_file_min": s.trusted_bytes_min,
            "time_ratio": q.time,
            "bandwidth_ratio": q.bandwidth,
            "storage_ratio": q.storage,
            "time_relative": q.time.map(|x| x - 1.0),
            "bandwidth_relative": q.bandwidth.map(|x| x - 1.0),
            "storage_relative": q.storage.map(|x| x - 1.0),
        }));
    }
    t
}

/// The `--tree` census beside the seed's user study.
pub fn tree_table(scan: &TreeScan) -> Table {
    let mut t = Table::new(
        "eint-tree",
        &format!(
            "Seed 003 §7.3's user study on {}: {} of {} regular files read ({} bytes; {} \
             cut at the per-file limit; {} special and {} unreadable entries skipped)",
            scan.root.display(),
            scan.scanned_files,
            scan.listed,
            scan.scanned_bytes,
            scan.truncated_files,
            scan.skipped_special,
            scan.skipped_unreadable
        ),
        &[
            "block",
            "whole blocks",
            "tails",
            "high-entropy %",
            "seed %",
            "incompressible %",
            "seed %",
            "RAND leaves %",
            "COMP leaves %",
        ],
    );
    for (b, c) in &scan.census {
        t.push(
            vec![
                block_label(*b),
                c.whole.to_string(),
                c.tails.to_string(),
                fmt(c.random_pct(), 1),
                fmt(SEED_HIGH_ENTROPY_PCT, 0),
                fmt(c.incompressible_pct(), 1),
                fmt(SEED_INCOMPRESSIBLE_PCT, 0),
                fmt(c.rand_leaf_pct(), 1),
                fmt(c.comp_leaf_pct(), 1),
            ],
            json!({
                "table": "tree",
                "root": scan.root.display().to_string(),
                "block_bytes": b,
                "files_listed": scan.listed,
                "listing_truncated": scan.listing_truncated,
                "files_scanned": scan.scanned_files,
                "bytes_scanned": scan.scanned_bytes,
                "files_truncated": scan.truncated_files,
                "skipped_special": scan.skipped_special,
                "skipped_unreadable": scan.skipped_unreadable,
                "whole_blocks": c.whole,
                "tail_blocks": c.tails,
                "high_entropy_blocks": c.whole_random,
                "incompressible_blocks": c.whole_incompressible,
                "incompressible_tails": c.tails_incompressible,
                "high_entropy_pct": c.random_pct(),
                "incompressible_pct": c.incompressible_pct(),
                "rand_leaf_pct": c.rand_leaf_pct(),
                "comp_leaf_pct": c.comp_leaf_pct(),
                "seed_high_entropy_pct": SEED_HIGH_ENTROPY_PCT,
                "seed_incompressible_pct": SEED_INCOMPRESSIBLE_PCT,
            }),
        );
    }
    t
}

/// Fig 9's plots for one block size and content: time, bandwidth and storage against the
/// node cache's size.
pub fn micro_figures(rows: &[MicroRow], block_bytes: u32, content: &str) -> Vec<Figure> {
    let sel: Vec<&MicroRow> = rows
        .iter()
        .filter(|r| r.cfg.block_bytes == block_bytes && r.content == content)
        .collect();
    let stem = format!("fig9-{content}-{}", block_label(block_bytes));
    let series = |name: &str, scheme: Scheme, y: &dyn Fn(&MicroRow) -> f64| Series {
        name: format!("{} {name}", scheme.name()),
        points: sel
            .iter()
            .filter(|r| r.cfg.scheme == scheme)
            .map(|r| (r.cfg.cache_bytes as f64, y(r)))
            .collect(),
    };
    let both = |w: &dyn Fn(&MicroRow) -> f64, r: &dyn Fn(&MicroRow) -> f64| {
        Scheme::ALL
            .iter()
            .flat_map(|&s| [series("write", s, w), series("read", s, r)])
            .collect::<Vec<_>>()
    };
    let title = |what: &str| {
        format!(
            "Seed 003 Fig 9 ({content} files, {} blocks): {what}",
            block_label(block_bytes)
        )
    };
    let x_label = "Merkle node cache (bytes)".to_string();
    vec![
        Figure {
            stem: format!("{stem}-time"),
            title: title("running time per block"),
            x_label: x_label.clone(),
            y_label: "microseconds per block".into(),
            log_y: false,
            y_max: None,
            series: both(&|r| r.write_us(), &|r| r.read_us()),
        },
        Figure {
            stem: format!("{stem}-bandwidth"),
            title: title("integrity bandwidth"),
            x_label: x_label.clone(),
            y_label: "integrity bytes per block operation".into(),
            log_y: false,
            y_max: None,
            series: both(&|r| r.run.write.integrity_per_op(), &|r| {
                r.run.read.integrity_per_op()
            }),
        },
        Figure {
            stem: format!("{stem}-storage"),
            title: title("untrusted storage for integrity"),
            x_label,
            y_label: "untrusted integrity bytes (KiB)".into(),
            log_y: false,
            y_max: None,
            series: Scheme::ALL
                .iter()
                .map(|&s| series("", s, &|r| r.run.storage.untrusted_bytes as f64 / 1024.0))
                .map(|mut s| {
                    s.name = s.name.trim_end().to_string();
                    s
                })
                .collect(),
        },
    ]
}

/// Fig 10's three panels for one block size: RAND and COMP relative to MT (`X/MT − 1`) against
/// the share of high-entropy content, one curve per trace shape and scheme.
pub fn trace_figures(rows: &[TraceRow], block_bytes: u32, shapes: &[&str]) -> Vec<Figure> {
    let panel = |what: &str, label: &str, pick: fn(&Ratios) -> Option<f64>| Figure {
        stem: format!("fig10-{}-{what}", block_label(block_bytes)),
        title: format!(
            "Seed 003 Fig 10 ({} blocks, synthetic traces): {label} relative to MT-EINT",
            block_label(block_bytes)
        ),
        x_label: "high-entropy content (% of bytes)".into(),
        y_label: format!("{label}: X/MT - 1"),
        log_y: false,
        y_max: None,
        series: shapes
            .iter()
            .flat_map(|shape| {
                [Scheme::Rand, Scheme::Comp].map(|scheme| Series {
                    name: format!("{shape} {}", scheme.name()),
                    points: rows
                        .iter()
                        .filter(|r| {
                            r.cfg.block_bytes == block_bytes
                                && r.shape == *shape
                                && r.cfg.scheme == scheme
                        })
                        .filter_map(|r| {
                            pick(&trace_ratios(rows, r)).map(|q| (f64::from(r.share_pct), q - 1.0))
                        })
                        .collect(),
                })
            })
            .collect(),
    };
    vec![
        panel("time", "running time", |q| q.time),
        panel("bandwidth", "average integrity bandwidth", |q| q.bandwidth),
        panel("storage", "untrusted storage for integrity", |q| q.storage),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::bench::{Meter, Storage};
    use super::*;

    fn trace_row(scheme: Scheme, secs: f64, integrity: u64, untrusted: u64) -> TraceRow {
        TraceRow {
            shape: "mixed",
            share_pct: 28,
            cfg: Config {
                scheme,
                block_bytes: 65536,
                cache_bytes: 4096,
            },
            run: TraceRun {
                read: Meter {
                    ops: 6,
                    integrity_read: integrity,
                    ..Meter::default()
                },
                write: Meter {
                    ops: 4,
                    ..Meter::default()
                },
                rmw_reads: 0,
                seconds: vec![secs * 2.0, secs, secs * 0.5],
                storage: Storage {
                    untrusted_bytes: untrusted,
                    ..Storage::default()
                },
                whole_blocks: 4,
                random_whole_blocks: 1,
            },
        }
    }

    #[test]
    fn ratios_are_taken_against_mt_of_the_same_trace() {
        let rows = vec![
            trace_row(Scheme::Mt, 2.0, 1000, 4000),
            trace_row(Scheme::Rand, 1.0, 250, 40),
            trace_row(Scheme::Comp, 3.0, 0, 40),
        ];
        // Medians of {4, 2, 1} and {2, 1, 0.5}: 2 and 1; bandwidth 100 vs 25 B/op.
        let q = trace_ratios(&rows, &rows[1]);
        assert_eq!(
            (q.time, q.bandwidth, q.storage),
            (Some(0.5), Some(0.25), Some(0.01))
        );
        let c = trace_ratios(&rows, &rows[2]);
        assert_eq!((c.time, c.bandwidth), (Some(1.5), Some(0.0)));
        assert_eq!(trace_ratios(&rows, &rows[0]).time, Some(1.0));
        assert_eq!(rows[0].random_looking_pct(), 25.0);
        // No MT row of another block size: no ratio.
        let mut other = rows[1].clone();
        other.cfg.block_bytes = 4096;
        assert_eq!(trace_ratios(&rows, &other).time, None);
        assert_eq!(
            relative(1.3076, 1.0).map(|r| (r * 1e4).round()),
            Some(3076.0)
        );
        assert_eq!(ratio(1.0, 0.0), None);
    }

    #[test]
    fn the_trace_table_has_one_row_per_trace_and_json_one_per_scheme() {
        let rows = vec![
            trace_row(Scheme::Mt, 2.0, 1000, 4000),
            trace_row(Scheme::Rand, 1.0, 250, 40),
            trace_row(Scheme::Comp, 3.0, 0, 40),
        ];
        let t = trace_table(&rows);
        assert_eq!((t.rows.len(), t.json.len()), (1, 0));
        assert_eq!(t.rows[0][9..12], ["0.500", "0.250", "0.010"]);
        let j = trace_json(&rows);
        assert_eq!(j.json.len(), 3);
        let rel = j.json[1]["storage_relative"].as_f64().unwrap();
        assert!((rel + 0.99).abs() < 1e-12, "{rel}");
        let figs = trace_figures(&rows, 65536, &["mixed"]);
        assert_eq!(figs.len(), 3);
        assert_eq!(figs[0].series[0].points, vec![(28.0, -0.5)]);
    }
}
