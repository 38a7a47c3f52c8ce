//! The Andrew benchmark's figures: medians per phase and target, NASD over the baseline per
//! phase and in total beside the seed's ratios, single operations, what every pass saw, and
//! the verdict on the seed's claim.

use serde_json::json;

use super::phases::PHASES;
use super::source::Tree;
use super::{ops, Results, TARGETS};
use crate::report::{fmt, Figure, Report, Series, Table};
use crate::stats::Summary;

/// The claim: NASD's total within this fraction of the baseline's.
const CLAIM_FRACTION: f64 = 0.10;

/// Seed 002 Table 8, seconds per phase (mkdir, copy, stat, read, compile): NFSv3,
/// NASD/NFS, AFS 3.4a, NASD/AFS.
pub const SEED_TABLE8: [(&str, [f64; 5]); 4] = [
    ("NFSv3", [2.0, 9.0, 6.0, 9.0, 33.0]),
    ("NASD/NFS", [2.0, 9.0, 9.0, 10.0, 35.0]),
    ("AFS 3.4a", [1.0, 6.0, 3.0, 5.0, 27.0]),
    ("NASD/AFS", [1.0, 8.0, 3.0, 5.0, 29.0]),
];

/// Rows of the phase table: the five phases, then the total.
const ROWS: usize = PHASES.len() + 1;
/// Positions of nasd and the baseline in [`TARGETS`].
const NASD: usize = 1;
const BASELINE: usize = 2;

fn row_name(i: usize) -> &'static str {
    PHASES.get(i).copied().unwrap_or("total")
}

/// Each pass's seconds for row `i` (a phase, or the total).
fn seconds(r: &Results, i: usize) -> Vec<f64> {
    r.passes
        .iter()
        .map(|p| match p.seconds.get(i) {
            Some(s) => *s,
            None => p.seconds.iter().sum(),
        })
        .collect()
}

fn summary(r: &Results, i: usize) -> Summary {
    Summary::of(&seconds(r, i)).expect("at least one pass, no NaN")
}

/// Seed Table 8's ratio of column `a` to column `b` for row `i`.
fn seed_ratio(a: usize, b: usize, i: usize) -> f64 {
    let sum = |k: usize| -> f64 {
        match SEED_TABLE8[k].1.get(i) {
            Some(s) => *s,
            None => SEED_TABLE8[k].1.iter().sum(),
        }
    };
    sum(a) / sum(b)
}

/// The verdict on the seed's claim from the ratio of NASD's total to the baseline's.
pub fn verdict(ratio: f64) -> (bool, String) {
    let pct = (ratio - 1.0) * 100.0;
    if (ratio - 1.0).abs() <= CLAIM_FRACTION + 1e-9 {
        let within = CLAIM_FRACTION * 100.0;
        let text = format!(
            "confirmed: NASD's total is within {within:.0}% of the baseline's ({pct:+.1}%)"
        );
        (true, text)
    } else if ratio > 1.0 {
        let text = format!("refuted: NASD is {pct:.1}% slower than the baseline in total");
        (false, text)
    } else {
        let text = format!(
            "refuted in NASD's favour: NASD is {:.1}% faster than the baseline in total",
            -pct
        );
        (false, text)
    }
}

/// Everything the run produced, as tables, a figure and notes.
pub fn report(
    tree: &Tree,
    runs: usize,
    results: &[Results; TARGETS.len()],
    local_fs: &str,
) -> Report {
    let (phases, total_ratio) = phase_table(tree, runs, results);
    Report {
        experiment: "andrew".into(),
        tables: vec![
            phases,
            ops_table(results),
            time_rows(results),
            check_rows(results),
            verdict_table(total_ratio),
        ],
        figures: vec![figure(results)],
        notes: notes(local_fs),
    }
}

/// Medians per phase and target, NASD over the baseline, the seed's ratios (`ratio` rows);
/// and NASD over the baseline in total.
fn phase_table(tree: &Tree, runs: usize, results: &[Results; TARGETS.len()]) -> (Table, f64) {
    let title = format!(
        "Andrew-style benchmark (seed 002 §4.2, Table 8): seconds per phase, median of {runs} \
         run(s); {} files, {} bytes",
        tree.files.len(),
        tree.bytes()
    );
    let mut table = Table::new(
        "andrew",
        &title,
        &[
            "phase",
            "local s",
            "nasd s",
            "baseline s",
            "baseline-async s",
            "nasd/baseline",
            "seed NASD/NFS : NFSv3",
            "seed NASD/AFS : AFS",
        ],
    );
    let mut total_ratio = f64::NAN;
    for i in 0..ROWS {
        let m: Vec<f64> = results.iter().map(|r| summary(r, i).median).collect();
        let ratio = m[NASD] / m[BASELINE];
        total_ratio = ratio; // the last row is the total
        let (nfs, afs) = (seed_ratio(1, 0, i), seed_ratio(3, 2, i));
        let mut cells = vec![row_name(i).to_string()];
        cells.extend(m.iter().map(|x| fmt(*x, 3)));
        cells.extend([fmt(ratio, 2), fmt(nfs, 2), fmt(afs, 2)]);
        table.push(
            cells,
            json!({
                "table": "ratio",
                "phase": row_name(i),
                "local_s": m[0],
                "nasd_s": m[1],
                "baseline_s": m[2],
                "baseline_async_s": m[3],
                "nasd_over_baseline": ratio,
                "seed_nasd_nfs_over_nfsv3": nfs,
                "seed_nasd_afs_over_afs": afs,
            }),
        );
    }
    (table, total_ratio)
}

/// One `andrew` row per target and phase (JSON only): median, spread and every run.
fn time_rows(results: &[Results; TARGETS.len()]) -> Table {
    let mut rows = Table::new("andrew-runs", "", &[]);
    for (t, r) in TARGETS.iter().zip(results) {
        for i in 0..ROWS {
            let s = summary(r, i);
            rows.json.push(json!({
                "table": "andrew",
                "phase": row_name(i),
                "target": t.name(),
                "seconds": s.median,
                "seconds_min": s.min,
                "seconds_max": s.max,
                "seconds_runs": seconds(r, i),
                "runs": s.runs,
            }));
        }
    }
    rows
}

/// What every pass saw (JSON only), so a caller can check it against its own tree.
fn check_rows(results: &[Results; TARGETS.len()]) -> Table {
    let mut checks = Table::new("andrew-checks", "", &[]);
    for (t, r) in TARGETS.iter().zip(results) {
        for (run, p) in r.passes.iter().enumerate() {
            checks.json.push(json!({
                "table": "check",
                "target": t.name(),
                "run": run,
                "entries_stat": p.entries_stat,
                "files_read": p.files_read,
                "bytes_read": p.bytes_read,
                "read_digest": p.read_digest,
                "program_output": p.program_output,
            }));
        }
    }
    checks
}

/// Single operations: microseconds per target (medians over runs).
fn ops_table(results: &[Results; TARGETS.len()]) -> Table {
    let mut table = Table::new(
        "andrew-ops",
        "Single operations, microseconds (median over runs)",
        &[
            "operation",
            "local us",
            "nasd us",
            "baseline us",
            "baseline-async us",
            "nasd/baseline",
        ],
    );
    for (k, op) in ops::OPS.iter().enumerate() {
        let m: Vec<f64> = results
            .iter()
            .map(|r| {
                let v: Vec<f64> = r.ops.iter().map(|o| o[k]).collect();
                Summary::of(&v).expect("one run at least").median
            })
            .collect();
        let mut cells = vec![(*op).to_string()];
        cells.extend(m.iter().map(|x| fmt(*x, 1)));
        cells.push(fmt(m[NASD] / m[BASELINE], 2));
        table.push(
            cells,
            json!({
                "table": "ops",
                "op": op,
                "local_us": m[0],
                "nasd_us": m[1],
                "baseline_us": m[2],
                "baseline_async_us": m[3],
            }),
        );
    }
    table
}

fn verdict_table(total_ratio: f64) -> Table {
    let (holds, text) = verdict(total_ratio);
    let mut v = Table::new(
        "andrew-verdict",
        "The seed's claim: NASD within about 10% of the server-attached case",
        &["claim", "nasd/baseline total", "verdict"],
    );
    v.push(
        vec![
            "NASD within 10% of the baseline".into(),
            fmt(total_ratio, 3),
            text.clone(),
        ],
        json!({
            "table": "verdict",
            "claim": "within_10pct",
            "nasd_over_baseline": total_ratio,
            "holds": holds,
            "verdict": text,
        }),
    );
    v
}

/// Seconds per phase (1-5), one curve per target.
fn figure(results: &[Results; TARGETS.len()]) -> Figure {
    Figure {
        stem: "andrew".into(),
        title:
            "Andrew-style benchmark: seconds per phase (1 mkdir, 2 copy, 3 stat, 4 read, 5 compile)"
                .into(),
        x_label: "phase".into(),
        y_label: "seconds".into(),
        log_y: false,
        y_max: None,
        series: TARGETS
            .iter()
            .zip(results)
            .map(|(t, r)| Series {
                name: t.name().into(),
                points: (0..PHASES.len())
                    .map(|i| ((i + 1) as f64, summary(r, i).median))
                    .collect(),
            })
            .collect(),
    }
}

fn notes(local_fs: &str) -> Vec<String> {
    vec![
        format!(
            "targets: local = a directory in {local_fs}; nasd = `nasd mount` of a \
             one-drive cluster whose drive and manager keep their data there too; baseline = the \
             store-and-forward server (`nasd lab andrew-server`) keeping its files there, through \
             its FUSE client (`nasd lab andrew-mount`), names and attributes synced before each \
             reply and data at close (NFSv3); baseline-async = the same server never syncing. \
             All mounts: FUSE, 4 event-loop threads, loopback TCP; the baseline's kernel keeps \
             no names, attributes or pages (zero TTL, as NFS with noac), nasd's keeps them under \
             AFS callbacks (names and attributes 1 s, pages across opens, dropped by a break)."
        ),
        "every pass is checked: the stat walk found every entry, the bytes read back are the bytes \
         written (one BLAKE3 digest), and the program built prints the generator's checksum; one \
         untimed warm-up pass on the local target precedes the runs."
            .into(),
        "the seed's ratios are its Table 8's NASD/NFS over NFSv3 and NASD/AFS over AFS 3.4a."
            .into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::andrew::phases::Pass;

    #[test]
    fn the_verdict_reads_the_total_ratio() {
        assert!(verdict(1.05).0);
        assert!(verdict(0.95).0);
        assert!(verdict(1.10).0);
        let (holds, text) = verdict(1.3);
        assert!(!holds && text.contains("30.0% slower"), "{text}");
        let (holds, text) = verdict(0.5);
        assert!(!holds && text.contains("50.0% faster"), "{text}");
    }

    #[test]
    fn the_seed_table_totals_and_ratios_are_its_own() {
        let totals: Vec<f64> = SEED_TABLE8.iter().map(|(_, v)| v.iter().sum()).collect();
        assert_eq!(totals, vec![59.0, 65.0, 42.0, 46.0]);
        assert!((seed_ratio(1, 0, 5) - 65.0 / 59.0).abs() < 1e-12);
        assert_eq!(seed_ratio(1, 0, 2), 1.5);
    }

    fn pass(seconds: [f64; 5]) -> Pass {
        Pass {
            seconds,
            entries_stat: 1,
            files_read: 1,
            bytes_read: 1,
            read_digest: "d".into(),
            program_output: "o".into(),
        }
    }

    /// Medians per phase, the total as the median of the runs' totals, NASD over the
    /// baseline, and one JSON row per target and row.
    #[test]
    fn the_report_divides_medians_and_totals_runs() {
        let r = |k: f64| Results {
            passes: vec![
                pass([k, k, k, k, k]),
                pass([k, 2.0 * k, k, k, 10.0 * k]),
                pass([3.0 * k, k, k, k, k]),
            ],
            ops: vec![[k; 5]],
        };
        let results = [r(1.0), r(2.0), r(1.0), r(0.5)];
        let tree = Tree::generate(1);
        let rep = report(&tree, 3, &results, "/tmp (ext4)");
        let ratio = &rep.tables[0].json;
        assert_eq!(ratio.len(), ROWS);
        for row in ratio {
            assert_eq!(row["nasd_over_baseline"], 2.0, "{row}");
        }
        assert_eq!(ratio[5]["phase"], "total");
        // Runs' totals 5, 15, 7: the median is 7.
        assert_eq!(ratio[5]["local_s"], 7.0);
        assert_eq!(ratio[0]["local_s"], 1.0);
        let times = &rep.tables[2].json;
        assert_eq!(times.len(), TARGETS.len() * ROWS);
        assert_eq!(times[5]["seconds_runs"], json!([5.0, 15.0, 7.0]));
        assert_eq!(rep.tables[3].json.len(), TARGETS.len() * 3);
        assert_eq!(rep.tables[4].json[0]["holds"], false);
        assert_eq!(rep.figures[0].series.len(), TARGETS.len());
        assert_eq!(rep.figures[0].series[1].points[4], (5.0, 2.0));
    }
}
