//! `nasd lab model`: seed 000 §3.4's cost comparison redrawn — compression-function calls of Basic
//! MAC, Stored Digest (HierMAC) and Incremental Stored Digest (AdHash, 256-byte incremental
//! blocks), plus nasd's `tree`, against request size and starting offset with 8 KiB disk blocks:
//!
//! - Fig 5: client overhead (reads and writes cost the client the same in the seed's model);
//! - Fig 6a / 6b: drive cost of reads at offset 0 / at a misaligned offset;
//! - Fig 7a / 7b: drive cost of writes at offset 0 / at a misaligned offset.
//!
//! Where nasd-crypto's schemes are available, [`counted`] runs them on the same requests with
//! their cost meter and the tables show the count beside the model.

use serde_json::json;

use crate::counted;
use crate::error::LabError;
use crate::model::{self, Op, Scheme, Side};
use crate::report::{fmt, Figure, Report, Series, Table};
use crate::LabOptions;

/// Misaligned start of Figs 6b and 7b, bytes: inside the first disk block and aligned to neither
/// 64-byte compression blocks nor 256-byte incremental blocks. (The seed does not give its own.)
pub const MISALIGNED_OFFSET_BYTES: u64 = 1000;
/// Largest request of the sweeps, bytes (eight disk blocks).
pub const SWEEP_MAX_BYTES: u64 = 64 * 1024;
/// Step of the sweeps in a full run, bytes.
pub const SWEEP_STEP_BYTES_FULL: u64 = 64;
/// Step of the sweeps with `--quick`, bytes.
pub const SWEEP_STEP_BYTES_QUICK: u64 = 256;
/// Request sizes printed in the tables (all sizes go to the CSV and SVG).
pub const TABLE_SIZES_BYTES: [u64; 12] = [
    64, 512, 1024, 4096, 8191, 8192, 8193, 12288, 16383, 16384, 32768, 65536,
];

/// One of the seed's figures.
#[derive(Debug, Clone, Copy)]
struct Fig {
    id: &'static str,
    title: &'static str,
    side: Side,
    op: Op,
    offset: u64,
}

const FIGS: [Fig; 6] = [
    Fig {
        id: "5",
        title: "Fig 5: client overhead, read (compression calls)",
        side: Side::Client,
        op: Op::Read,
        offset: 0,
    },
    Fig {
        id: "5w",
        title: "Fig 5: client overhead, write (compression calls)",
        side: Side::Client,
        op: Op::Write,
        offset: 0,
    },
    Fig {
        id: "6a",
        title: "Fig 6a: drive cost of reads at offset 0 (compression calls)",
        side: Side::Drive,
        op: Op::Read,
        offset: 0,
    },
    Fig {
        id: "6b",
        title: "Fig 6b: drive cost of reads at offset 1000 (compression calls)",
        side: Side::Drive,
        op: Op::Read,
        offset: MISALIGNED_OFFSET_BYTES,
    },
    Fig {
        id: "7a",
        title: "Fig 7a: drive cost of writes at offset 0 (compression calls)",
        side: Side::Drive,
        op: Op::Write,
        offset: 0,
    },
    Fig {
        id: "7b",
        title: "Fig 7b: drive cost of writes at offset 1000 (compression calls)",
        side: Side::Drive,
        op: Op::Write,
        offset: MISALIGNED_OFFSET_BYTES,
    },
];

/// Runs the model experiment.
pub fn run(opts: &LabOptions) -> Result<Report, LabError> {
    let step = if opts.quick {
        SWEEP_STEP_BYTES_QUICK
    } else {
        SWEEP_STEP_BYTES_FULL
    };
    let mut sizes: Vec<u64> = (1..=SWEEP_MAX_BYTES / step).map(|i| i * step).collect();
    // Include the points either side of each block boundary, where the saw-tooth turns.
    for b in 1..=SWEEP_MAX_BYTES / model::DISK_BLOCK_BYTES {
        let edge = b * model::DISK_BLOCK_BYTES;
        sizes.extend([edge - 1, edge + 1]);
    }
    sizes.retain(|&s| s <= SWEEP_MAX_BYTES);
    sizes.sort_unstable();
    sizes.dedup();

    let mut meter = Some(counted::Meter::new()?);
    let mut report = Report {
        experiment: "model".into(),
        ..Report::default()
    };
    let mut disagreements = Vec::new();
    let mut compared: Vec<(Scheme, u64)> = Vec::new();
    for fig in FIGS {
        let mut cols = vec!["size B".to_string()];
        for s in Scheme::ALL {
            cols.push(s.name().to_string());
            if meter.is_some() {
                cols.push(format!("{} counted", s.name()));
            }
        }
        let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
        let mut table = Table::new(&format!("fig{}", fig.id), fig.title, &refs);
        let mut series: Vec<Series> = Scheme::ALL
            .iter()
            .map(|s| Series {
                name: s.seed_name().to_string(),
                points: Vec::new(),
            })
            .collect();
        let mut counted_series: Vec<Series> = Vec::new();
        for &size in &sizes {
            let in_table = TABLE_SIZES_BYTES.contains(&size);
            let mut cells = vec![size.to_string()];
            for (i, &scheme) in Scheme::ALL.iter().enumerate() {
                let c = model::cost(scheme, fig.side, fig.op, fig.offset, size);
                let comp = c.compressions();
                series[i].points.push((size as f64, comp));
                let count = match &mut meter {
                    Some(m) => m.count(scheme, fig.side, fig.op, fig.offset, size)?,
                    None => None,
                };
                if let Some(k) = &count {
                    compared.push((scheme, size));
                    // The drive's attribute-digest upkeep on writes is outside the data model.
                    let attrs = if (fig.side, fig.op) == (Side::Drive, Op::Write) {
                        counted::ATTR_REHASH_CALLS
                    } else {
                        0
                    };
                    if k.calls - attrs != c.calls() || k.adds != c.adds || k.subs != c.subs {
                        disagreements.push((fig.id, scheme, size, c, *k));
                    }
                    let name = format!("{} counted", scheme.seed_name());
                    match counted_series.iter_mut().find(|s| s.name == name) {
                        Some(s) => s.points.push((size as f64, k.compressions())),
                        None => counted_series.push(Series {
                            name,
                            points: vec![(size as f64, k.compressions())],
                        }),
                    }
                }
                if in_table {
                    cells.push(fmt(comp, if comp.fract() == 0.0 { 0 } else { 2 }));
                    if meter.is_some() {
                        cells.push(
                            count
                                .map(|k| fmt(k.compressions(), 2))
                                .unwrap_or_else(|| "-".into()),
                        );
                    }
                    table.json.push(json!({
                        "figure": fig.id.trim_end_matches('w'),
                        "scheme": scheme.name(),
                        "side": fig.side.name(),
                        "op": fig.op.name(),
                        "size_bytes": size,
                        "offset_bytes": fig.offset,
                        "compressions": comp,
                        "calls": c.calls(),
                        "adds": c.adds,
                        "subs": c.subs,
                        "counted": count.map(|k| k.compressions()),
                        "counted_calls": count.map(|k| k.calls),
                    }));
                }
            }
            if in_table {
                table.rows.push(cells);
            }
        }
        report.tables.push(table);
        series.extend(counted_series);
        report.figures.push(Figure {
            stem: format!("fig{}", fig.id),
            title: format!("Seed 000 {}", fig.title),
            x_label: "request size (bytes)".into(),
            y_label: "compression-function calls".into(),
            log_y: false,
            y_max: None,
            series,
        });
    }
    report.notes.push(format!(
        "model: 64-byte compression blocks, padding free, HMAC = message + 3 calls, 8 KiB disk blocks, 20 B stored digests, AdHash over 256 B incremental blocks (4 calls each) with add {} and subtract {} of a call, tree over 1 KiB chunks of a {} KiB object; misaligned offset {} B; sweep step {} B",
        model::ADD_COST_CALLS,
        model::SUB_COST_CALLS,
        model::MODEL_OBJECT_BYTES / 1024,
        MISALIGNED_OFFSET_BYTES,
        step
    ));
    match &meter {
        None => report.notes.push(
            "counted: nasd-crypto's instrumented schemes are not linked into this build; only the model is shown".into(),
        ),
        Some(m) => {
            report.notes.push(format!("counted: {}", m.describe()));
            if disagreements.is_empty() {
                report
                    .notes
                    .push("counted: every instrumented count equals the model".into());
            } else {
                for scheme in Scheme::ALL {
                    let mine: Vec<_> = disagreements.iter().filter(|d| d.1 == scheme).collect();
                    let total = compared.iter().filter(|(s, _)| *s == scheme).count();
                    let Some(worst) = mine.iter().max_by(|a, b| {
                        let ra = (a.4.compressions() - a.3.compressions()).abs();
                        let rb = (b.4.compressions() - b.3.compressions()).abs();
                        ra.total_cmp(&rb)
                    }) else {
                        if total > 0 {
                            report.notes.push(format!(
                                "counted: {scheme}: all {total} counted points equal the model"
                            ));
                        }
                        continue;
                    };
                    report.notes.push(format!(
                        "counted: {scheme}: {} of {total} counted points differ from the model; largest at fig{} {} B: model {:.2}, counted {:.2}",
                        mine.len(),
                        worst.0,
                        worst.2,
                        worst.3.compressions(),
                        worst.4.compressions()
                    ));
                }
                report.notes.extend(m.explain().into_iter().map(|e| format!("why: {e}")));
            }
        }
    }
    // Fig 10: the critical-path latency model, beside this CPU's measured work.
    let (fig10, notes) = crate::latency::table(opts.quick);
    report.tables.push(fig10);
    report.notes.extend(notes);
    Ok(report)
}
