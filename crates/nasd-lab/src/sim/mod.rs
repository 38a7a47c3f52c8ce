//! `nasd lab sim`: seed 000 §5's simulation of a drive whose message-digest unit is slower than
//! its network, rerun on synthetic NFS- and AFS-shaped workloads or on a trace file. For every
//! SHA throughput from 100 Mb/s to 2 Gb/s it reports the average added latency against the same
//! drive without security (Fig 12, for P0, P1, P2), the percentage of requests whose latency at
//! least doubled (Fig 13), the worst added latency (Fig 14), the same under time slicing of the SHA
//! unit at 16K, 8K and 2K with two priority queues (Figs 15-16), and with pull-mode writes (Fig 17).
//!
//! # Layout
//!
//! - [`engine`]: the queueing network of Fig 11 and the comparison with the baseline.
//! - [`workload`]: requests, the trace format, the synthetic generators.

pub mod engine;
pub mod workload;

use std::path::Path;

use serde_json::json;

use crate::error::LabError;
use crate::report::{fmt, Figure, Report, Series, Table};
use crate::LabOptions;
use engine::{compare, simulate, Added, Precompute, SimConfig};
use workload::Request;

/// SHA throughputs simulated, Mb/s (the x axis of Figs 12-17).
pub const SHA_MBPS: [f64; 13] = [
    100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1500.0, 2000.0,
];
/// Requests simulated per workload in a full run.
pub const REQUESTS_FULL: usize = 1_000_000;
/// Requests simulated per workload with `--quick`.
pub const REQUESTS_QUICK: usize = 100_000;
/// Top of Fig 12's y axis, percent (100 Mb/s adds thousands of percent; the seed's claims are
/// about 10-20%).
pub const FIG12_Y_MAX_PCT: f64 = 100.0;
/// Top of the worst-case figures' y axes (Figs 14, 15, 17 right), percent.
pub const MAX_Y_MAX_PCT: f64 = 3000.0;
/// Time slices of Figs 15-16, bytes of SHA work.
pub const SLICES_BYTES: [u64; 3] = [16 * 1024, 8 * 1024, 2 * 1024];

/// One workload to simulate.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Name in tables.
    pub name: String,
    /// Its requests, sorted by arrival.
    pub requests: Vec<Request>,
}

/// The built-in workloads with `n` requests each, or the trace at `trace`.
pub fn workloads(opts: &LabOptions, trace: Option<&Path>) -> Result<Vec<Workload>, LabError> {
    if let Some(path) = trace {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trace".to_string());
        return Ok(vec![Workload {
            name,
            requests: workload::read_trace(path)?,
        }]);
    }
    let n = if opts.quick {
        REQUESTS_QUICK
    } else {
        REQUESTS_FULL
    };
    Ok(workload::BUILT_IN
        .iter()
        .enumerate()
        .map(|(i, spec)| Workload {
            name: spec.name.to_string(),
            requests: workload::generate(spec, n, opts.seed.wrapping_add(i as u64)),
        })
        .collect())
}

/// The variants simulated at every SHA throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Fig 12-14: FIFO SHA unit, push writes.
    Plain(Precompute),
    /// Figs 15-16: P2 with time slicing.
    Sliced(u64),
    /// Fig 17: P2 with pull-mode writes.
    Pull,
}

impl Variant {
    fn all() -> Vec<Variant> {
        let mut v: Vec<Variant> = Precompute::ALL.iter().map(|&p| Variant::Plain(p)).collect();
        v.extend(SLICES_BYTES.iter().map(|&s| Variant::Sliced(s)));
        v.push(Variant::Pull);
        v
    }

    fn config(self, sha_mbps: f64) -> SimConfig {
        match self {
            Variant::Plain(p) => SimConfig::seed(Some(sha_mbps), p),
            Variant::Sliced(s) => SimConfig {
                slice_bytes: Some(s),
                ..SimConfig::seed(Some(sha_mbps), Precompute::P2)
            },
            Variant::Pull => SimConfig {
                pull_writes: true,
                ..SimConfig::seed(Some(sha_mbps), Precompute::P2)
            },
        }
    }
}

/// One simulated point.
#[derive(Debug, Clone, Copy)]
struct Point {
    workload: usize,
    variant: Variant,
    sha_mbps: f64,
    added: Added,
}

/// Runs the simulation experiment.
pub fn run(opts: &LabOptions, trace: Option<&Path>) -> Result<Report, LabError> {
    let loads = workloads(opts, trace)?;
    let grid: &[f64] = &SHA_MBPS;
    let variants = Variant::all();
    // Baselines without security, push and pull, per workload.
    let mut jobs: Vec<(usize, Variant, f64)> = Vec::new();
    for w in 0..loads.len() {
        for &v in &variants {
            for &m in grid {
                jobs.push((w, v, m));
            }
        }
    }
    let baselines: Vec<(Vec<f64>, Vec<f64>)> = loads
        .iter()
        .map(|w| {
            let push = simulate(&SimConfig::seed(None, Precompute::P0), &w.requests);
            let pull_cfg = SimConfig {
                pull_writes: true,
                ..SimConfig::seed(None, Precompute::P0)
            };
            let pull = simulate(&pull_cfg, &w.requests);
            (push, pull)
        })
        .collect();
    let points = run_parallel(&jobs, |&(w, v, m)| {
        let lat = simulate(&v.config(m), &loads[w].requests);
        let base = match v {
            Variant::Pull => &baselines[w].1,
            _ => &baselines[w].0,
        };
        Point {
            workload: w,
            variant: v,
            sha_mbps: m,
            added: compare(&lat, base),
        }
    });
    Ok(build_report(opts, &loads, grid, &points))
}

/// Maps `f` over `items` on all cores, keeping the order of `items`.
fn run_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(items.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<(usize, R)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= items.len() {
                            break;
                        }
                        mine.push((i, f(&items[i])));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("simulation thread panicked"))
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

fn slice_name(s: u64) -> String {
    format!("{}K", s / 1024)
}

fn find(points: &[Point], w: usize, v: Variant, m: f64) -> Option<Added> {
    points
        .iter()
        .find(|p| p.workload == w && p.variant == v && p.sha_mbps == m)
        .map(|p| p.added)
}

fn build_report(opts: &LabOptions, loads: &[Workload], grid: &[f64], points: &[Point]) -> Report {
    let mut report = Report {
        experiment: "sim".to_string(),
        ..Report::default()
    };
    // Workload summary.
    let mut t = Table::new(
        "workloads",
        "Workloads (seed 000 §5.1 shapes; synthetic unless a trace was given)",
        &[
            "workload",
            "requests",
            "duration_s",
            "req/s",
            "read%",
            "write%",
            "getattr%",
            "setattr%",
            "mean data B",
        ],
    );
    for w in loads {
        let n = w.requests.len() as f64;
        let dur = w.requests.last().map(|r| r.arrival_s).unwrap_or(0.0);
        let frac = |op| 100.0 * w.requests.iter().filter(|r| r.op == op).count() as f64 / n;
        let data: Vec<_> = w
            .requests
            .iter()
            .filter(|r| matches!(r.op, workload::FsOp::Read | workload::FsOp::Write))
            .collect();
        let mean_data =
            data.iter().map(|r| r.length as f64).sum::<f64>() / data.len().max(1) as f64;
        t.push(
            vec![
                w.name.clone(),
                w.requests.len().to_string(),
                fmt(dur, 1),
                fmt(n / dur.max(1e-9), 0),
                fmt(frac(workload::FsOp::Read), 1),
                fmt(frac(workload::FsOp::Write), 1),
                fmt(frac(workload::FsOp::GetAttr), 1),
                fmt(frac(workload::FsOp::SetAttr), 1),
                fmt(mean_data, 0),
            ],
            json!({"table": "workloads", "workload": w.name, "requests": w.requests.len(),
                   "duration_s": dur, "mean_data_bytes": mean_data}),
        );
    }
    report.tables.push(t);

    // Fig 12 (and 13, 14 from the P2 rows).
    let mut cols = vec!["SHA Mb/s".to_string()];
    for w in loads {
        for p in Precompute::ALL {
            cols.push(format!("{} {}", w.name, p.name()));
        }
    }
    let col_refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    let mut t12 = Table::new(
        "fig12",
        "Fig 12: average added latency vs no security, % (P0 no precompute, P1 block digests, P2 + attribute digests)",
        &col_refs,
    );
    let mut t1314 = {
        let mut cols = vec!["SHA Mb/s".to_string()];
        for w in loads {
            cols.push(format!("{} outliers%", w.name));
            cols.push(format!("{} max%", w.name));
        }
        let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
        Table::new(
            "fig13-14",
            "Figs 13-14 (P2): requests with >= 2x latency (%), and worst added latency (%)",
            &refs,
        )
    };
    for &m in grid {
        let mut cells = vec![fmt(m, 0)];
        let mut cells1314 = vec![fmt(m, 0)];
        for (wi, w) in loads.iter().enumerate() {
            for p in Precompute::ALL {
                let Some(a) = find(points, wi, Variant::Plain(p), m) else {
                    continue;
                };
                cells.push(fmt(a.mean_pct, 1));
                t12.json
                    .push(sim_row("12-14", &w.name, p, m, None, false, &a));
                if p == Precompute::P2 {
                    cells1314.push(fmt(a.outliers_pct, 3));
                    cells1314.push(fmt(a.max_pct, 0));
                }
            }
        }
        t12.rows.push(cells);
        t1314.rows.push(cells1314);
    }
    report.tables.push(t12);
    report.tables.push(t1314);

    // Figs 15-16: one table per workload.
    let mut t1516 = {
        let mut cols = vec!["workload".to_string(), "SHA Mb/s".to_string()];
        for name in
            std::iter::once("none".to_string()).chain(SLICES_BYTES.iter().map(|&s| slice_name(s)))
        {
            cols.push(format!("max% {name}"));
        }
        for name in
            std::iter::once("none".to_string()).chain(SLICES_BYTES.iter().map(|&s| slice_name(s)))
        {
            cols.push(format!("outl% {name}"));
        }
        let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
        Table::new(
            "fig15-16",
            "Figs 15-16 (P2): time slicing of the SHA unit with two priority queues: worst added latency and outliers",
            &refs,
        )
    };
    let mut t17 = {
        let mut cols = vec!["SHA Mb/s".to_string()];
        for w in loads {
            cols.push(format!("{} outl% push", w.name));
            cols.push(format!("{} outl% pull", w.name));
            cols.push(format!("{} max% push", w.name));
            cols.push(format!("{} max% pull", w.name));
        }
        let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
        Table::new("fig17", "Fig 17 (P2): pull-mode writes", &refs)
    };
    for (wi, w) in loads.iter().enumerate() {
        for &m in grid {
            let none = find(points, wi, Variant::Plain(Precompute::P2), m);
            let sliced: Vec<Option<Added>> = SLICES_BYTES
                .iter()
                .map(|&s| find(points, wi, Variant::Sliced(s), m))
                .collect();
            let all: Vec<Option<Added>> = std::iter::once(none)
                .chain(sliced.iter().copied())
                .collect();
            let mut cells = vec![w.name.clone(), fmt(m, 0)];
            cells.extend(
                all.iter()
                    .map(|a| a.map(|a| fmt(a.max_pct, 0)).unwrap_or_default()),
            );
            cells.extend(
                all.iter()
                    .map(|a| a.map(|a| fmt(a.outliers_pct, 3)).unwrap_or_default()),
            );
            t1516.rows.push(cells);
            for (&s, a) in SLICES_BYTES.iter().zip(&sliced) {
                if let Some(a) = a {
                    t1516.json.push(sim_row(
                        "15-16",
                        &w.name,
                        Precompute::P2,
                        m,
                        Some(s),
                        false,
                        a,
                    ));
                }
            }
        }
    }
    for &m in grid {
        let mut cells = vec![fmt(m, 0)];
        for (wi, w) in loads.iter().enumerate() {
            let push = find(points, wi, Variant::Plain(Precompute::P2), m);
            let pull = find(points, wi, Variant::Pull, m);
            if let (Some(push), Some(pull)) = (push, pull) {
                cells.push(fmt(push.outliers_pct, 3));
                cells.push(fmt(pull.outliers_pct, 3));
                cells.push(fmt(push.max_pct, 0));
                cells.push(fmt(pull.max_pct, 0));
                t17.json
                    .push(sim_row("17", &w.name, Precompute::P2, m, None, true, &pull));
            }
        }
        t17.rows.push(cells);
    }
    report.tables.push(t1516);
    report.tables.push(t17);

    // Figures.
    let series = |v: Variant, label: &str, metric: fn(&Added) -> f64| -> Vec<Series> {
        loads
            .iter()
            .enumerate()
            .map(|(wi, w)| Series {
                name: format!("{} {label}", w.name),
                points: grid
                    .iter()
                    .filter_map(|&m| find(points, wi, v, m).map(|a| (m, metric(&a))))
                    .collect(),
            })
            .collect()
    };
    let x = "SHA unit throughput (Mb/s)".to_string();
    let mut f12 = Vec::new();
    for p in Precompute::ALL {
        f12.extend(series(Variant::Plain(p), p.name(), |a| a.mean_pct));
    }
    report.figures.push(Figure {
        stem: "fig12".into(),
        title: "Seed 000 Fig 12: average added latency (y cut at 100%)".into(),
        x_label: x.clone(),
        y_label: "added latency (%)".into(),
        log_y: false,
        y_max: Some(FIG12_Y_MAX_PCT),
        series: f12,
    });
    report.figures.push(Figure {
        stem: "fig13".into(),
        title: "Seed 000 Fig 13: requests with >= 2x latency (P2)".into(),
        x_label: x.clone(),
        y_label: "outliers (%)".into(),
        log_y: false,
        y_max: None,
        series: series(Variant::Plain(Precompute::P2), "P2", |a| a.outliers_pct),
    });
    report.figures.push(Figure {
        stem: "fig14".into(),
        title: "Seed 000 Fig 14: worst added latency (P2), y cut at 3000%".into(),
        x_label: x.clone(),
        y_label: "max added latency (%)".into(),
        log_y: false,
        y_max: Some(MAX_Y_MAX_PCT),
        series: series(Variant::Plain(Precompute::P2), "P2", |a| a.max_pct),
    });
    let mut f15 = series(Variant::Plain(Precompute::P2), "no slicing", |a| a.max_pct);
    let mut f16 = series(Variant::Plain(Precompute::P2), "no slicing", |a| {
        a.outliers_pct
    });
    for &s in &SLICES_BYTES {
        f15.extend(series(Variant::Sliced(s), &slice_name(s), |a| a.max_pct));
        f16.extend(series(Variant::Sliced(s), &slice_name(s), |a| {
            a.outliers_pct
        }));
    }
    report.figures.push(Figure {
        stem: "fig15".into(),
        title: "Seed 000 Fig 15: time slicing, worst added latency (P2), y cut at 3000%".into(),
        x_label: x.clone(),
        y_label: "max added latency (%)".into(),
        log_y: false,
        y_max: Some(MAX_Y_MAX_PCT),
        series: f15,
    });
    report.figures.push(Figure {
        stem: "fig16".into(),
        title: "Seed 000 Fig 16: time slicing, outliers (P2, log scale)".into(),
        x_label: x.clone(),
        y_label: "outliers (%)".into(),
        log_y: true,
        y_max: None,
        series: f16,
    });
    let mut f17a = series(Variant::Plain(Precompute::P2), "push", |a| a.outliers_pct);
    f17a.extend(series(Variant::Pull, "pull", |a| a.outliers_pct));
    let mut f17b = series(Variant::Plain(Precompute::P2), "push", |a| a.max_pct);
    f17b.extend(series(Variant::Pull, "pull", |a| a.max_pct));
    report.figures.push(Figure {
        stem: "fig17-outliers".into(),
        title: "Seed 000 Fig 17 (left): pull-mode writes, outliers (P2)".into(),
        x_label: x.clone(),
        y_label: "outliers (%)".into(),
        log_y: false,
        y_max: None,
        series: f17a,
    });
    report.figures.push(Figure {
        stem: "fig17-max".into(),
        title:
            "Seed 000 Fig 17 (right): pull-mode writes, worst added latency (P2), y cut at 3000%"
                .into(),
        x_label: x,
        y_label: "max added latency (%)".into(),
        log_y: false,
        y_max: Some(MAX_Y_MAX_PCT),
        series: f17b,
    });

    report.notes.extend(claims(loads, points));
    report.notes.push(format!(
        "model: gigabit links each way, {:.2} ms electronics, {} B RPC + {} B NASD request header, {} B reply header, {} B MAC; SHA cost = compression calls x 64 B / throughput (seed 000 §3.4 model); seed {}{}",
        engine::ELECTRONICS_SERVICE_S * 1e3,
        engine::RPC_HEADER_BYTES,
        engine::NASD_REQUEST_HEADER_BYTES,
        engine::NASD_REPLY_HEADER_BYTES,
        engine::MAC_BYTES,
        opts.seed,
        if opts.quick { "; --quick: fewer requests" } else { "" }
    ));
    report
}

fn sim_row(
    figure: &str,
    workload: &str,
    p: Precompute,
    m: f64,
    slice: Option<u64>,
    pull: bool,
    a: &Added,
) -> serde_json::Value {
    json!({
        "figure": figure,
        "workload": workload,
        "precompute": p.name(),
        "sha_mbps": m,
        "slice_bytes": slice,
        "pull_writes": pull,
        "added_latency_pct": a.mean_pct,
        "added_mean_latency_pct": a.of_mean_pct,
        "outliers_pct": a.outliers_pct,
        "max_added_latency_pct": a.max_pct,
    })
}

/// The seed's claims (§5.2) beside ours, as sentences.
fn claims(loads: &[Workload], points: &[Point]) -> Vec<String> {
    let mut out = Vec::new();
    for (wi, w) in loads.iter().enumerate() {
        let get = |v, m| find(points, wi, v, m);
        let mut parts = Vec::new();
        if let (Some(p0), Some(p1), Some(p2)) = (
            get(Variant::Plain(Precompute::P0), 600.0),
            get(Variant::Plain(Precompute::P1), 600.0),
            get(Variant::Plain(Precompute::P2), 600.0),
        ) {
            parts.push(format!(
                "600 Mb/s adds {:.1}% (P0), {:.1}% (P1), {:.1}% (P2) [seed: ~20%, ~15%, ~14%]",
                p0.mean_pct, p1.mean_pct, p2.mean_pct
            ));
            parts.push(format!(
                "outliers at 600 Mb/s (P2) {:.3}% [seed: < 0.03%]",
                p2.outliers_pct
            ));
        }
        if let Some(a) = get(Variant::Plain(Precompute::P2), 700.0) {
            parts.push(format!(
                "700 Mb/s (P2) adds {:.1}% [seed: < 10%]",
                a.mean_pct
            ));
        }
        if let (Some(push), Some(pull)) = (
            get(Variant::Plain(Precompute::P2), 400.0),
            get(Variant::Pull, 400.0),
        ) {
            parts.push(format!(
                "pull writes at 400 Mb/s: outliers {:.3}% -> {:.3}% [seed: at least 4x fewer]",
                push.outliers_pct, pull.outliers_pct
            ));
        }
        if let Some(pull) = get(Variant::Pull, 600.0) {
            parts.push(format!(
                "pull at 600 Mb/s: outliers {:.3}% [seed: zero]",
                pull.outliers_pct
            ));
        }
        if !parts.is_empty() {
            out.push(format!("{}: {}", w.name, parts.join("; ")));
        }
    }
    out
}

#[cfg(test)]
mod tests;
