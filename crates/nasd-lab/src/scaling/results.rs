//! The figures of `nasd lab scaling`: runs summed up per configuration and mode (mean and
//! standard deviation over runs, as seed 002 §4 reports them), the verdict on the seed's
//! claim, and the report: the table, the verdict table, the two plots and the notes.

use super::{cpu, Mode, Plan, Run, CHUNK_BYTES, FILES, STREAMS_PER_CLIENT, STRIPE_UNIT, WARMUP_MS};
use crate::report::{fmt, Figure, Report, Series, Table};

/// The verdict's thresholds: NASD at `n` pairs reaches this share of `n` times its
/// smallest configuration's figure per pair ("scales linearly") ...
const LINEAR_SHARE: f64 = 0.8;
/// ... SAD stays below this multiple of one link's rate (its one link saturates) ...
const SAD_LINKS_MAX: f64 = 1.25;
/// ... and NASD at the most pairs moves at least this multiple of SAD.
const NASD_OVER_SAD_MIN: f64 = 1.5;

/// Mean and sample standard deviation.
fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// One configuration and mode over its runs.
#[derive(Clone, Debug)]
struct Cell {
    pairs: usize,
    mode: Mode,
    mb_per_s: Vec<f64>,
    mean: f64,
    sd: f64,
    manager_cpu: f64,
    sad_cpu: Option<f64>,
    drives_cpu: f64,
    clients_cpu: f64,
}

fn cells(plan: &Plan, runs: &[Run]) -> Vec<Cell> {
    let mut out = vec![];
    for &n in &plan.pairs {
        for mode in [Mode::Nasd, Mode::Sad] {
            let rs: Vec<&Run> = runs
                .iter()
                .filter(|r| r.pairs == n && r.mode == mode)
                .collect();
            if rs.is_empty() {
                continue;
            }
            let mb: Vec<f64> = rs.iter().map(|r| r.mb_per_s).collect();
            let (mean, sd) = mean_sd(&mb);
            let avg = |f: fn(&Run) -> f64| mean_sd(&rs.iter().map(|r| f(r)).collect::<Vec<_>>()).0;
            out.push(Cell {
                pairs: n,
                mode,
                mb_per_s: mb,
                mean,
                sd,
                manager_cpu: avg(|r| r.manager_cpu),
                sad_cpu: (mode == Mode::Sad).then(|| avg(|r| r.sad_cpu.unwrap_or(0.0))),
                drives_cpu: avg(|r| r.drives_cpu),
                clients_cpu: avg(|r| r.clients_cpu),
            });
        }
    }
    out
}

/// Whether the figures bear out seed 002's claim, and the numbers that say so.
#[derive(Clone, Debug, PartialEq)]
struct Verdict {
    /// NASD at every `n` reached [`LINEAR_SHARE`] of linear scaling from the smallest `n`.
    nasd_linear: bool,
    /// NASD at the most pairs over `n` times its per-pair figure at the fewest, percent.
    nasd_efficiency_pct: f64,
    /// SAD at the most pairs stayed within [`SAD_LINKS_MAX`] links.
    sad_saturates: bool,
    sad_links: f64,
    nasd_over_sad: f64,
    confirmed: bool,
}

fn verdict(cells: &[Cell], link_mb_per_s: f64) -> Option<Verdict> {
    let get = |mode| -> Vec<&Cell> { cells.iter().filter(|c| c.mode == mode).collect() };
    let (nasd, sad) = (get(Mode::Nasd), get(Mode::Sad));
    let (first, last) = (nasd.first()?, nasd.last()?);
    let sad_last = sad.last()?;
    if last.pairs == first.pairs {
        return None;
    }
    let per_pair = first.mean / first.pairs as f64;
    let nasd_linear = nasd
        .iter()
        .all(|c| c.mean >= LINEAR_SHARE * per_pair * c.pairs as f64);
    let nasd_efficiency_pct = 100.0 * last.mean / (per_pair * last.pairs as f64);
    let sad_links = sad_last.mean / link_mb_per_s;
    let sad_saturates = sad_links <= SAD_LINKS_MAX;
    let nasd_over_sad = last.mean / sad_last.mean.max(1e-9);
    Some(Verdict {
        nasd_linear,
        nasd_efficiency_pct,
        sad_saturates,
        sad_links,
        nasd_over_sad,
        confirmed: nasd_linear && sad_saturates && nasd_over_sad >= NASD_OVER_SAD_MIN,
    })
}

/// The report of a run: the table, the verdict, the plots and the notes.
pub(super) fn report(plan: &Plan, runs: &[Run]) -> Report {
    let cells = cells(plan, runs);
    Report {
        experiment: "scaling".into(),
        tables: vec![bandwidth_table(plan, &cells), verdict_table(plan, &cells)],
        figures: figures(plan, &cells),
        notes: notes(plan),
    }
}

/// One row per configuration and mode.
fn bandwidth_table(plan: &Plan, cells: &[Cell]) -> Table {
    let link = plan.link_mb_per_s();
    let mut t = Table::new(
        "scaling",
        &format!(
            "Seed 002 §4 Figs 2a/3/4: aggregate read bandwidth, NASD (clients read raid0 files \
             straight from the drives) against SAD (one store-and-forward server), every link \
             {} Mbit/s ({} MB/s), mean over {} run(s) of {} s; CPU in % of one CPU",
            plan.rate_mbit,
            fmt(link, 1),
            plan.runs,
            plan.seconds
        ),
        &[
            "pairs",
            "mode",
            "MB/s",
            "± sd",
            "per pair",
            "n x link",
            "manager CPU %",
            "SAD server CPU %",
            "drives CPU %",
            "clients CPU %",
        ],
    );
    for c in cells {
        let ideal = link * c.pairs as f64;
        t.push(
            vec![
                c.pairs.to_string(),
                c.mode.name().to_uppercase(),
                fmt(c.mean, 2),
                fmt(c.sd, 2),
                fmt(c.mean / c.pairs as f64, 2),
                fmt(ideal, 1),
                fmt(c.manager_cpu, 1),
                c.sad_cpu.map_or("-".into(), |x| fmt(x, 1)),
                fmt(c.drives_cpu, 1),
                fmt(c.clients_cpu, 1),
            ],
            serde_json::json!({
                "table": "scaling",
                "pairs": c.pairs,
                "mode": c.mode.name(),
                "runs": c.mb_per_s.len(),
                "seconds": plan.seconds,
                "rate_mbit": plan.rate_mbit,
                "link_mb_per_s": link,
                "mb_per_s": round(c.mean, 3),
                "mb_per_s_sd": round(c.sd, 3),
                "mb_per_s_runs": c.mb_per_s.iter().map(|x| round(*x, 3)).collect::<Vec<_>>(),
                "per_pair_mb_per_s": round(c.mean / c.pairs as f64, 3),
                "manager_cpu_pct": round(c.manager_cpu, 2),
                "sad_server_cpu_pct": c.sad_cpu.map(|x| round(x, 2)),
                "drives_cpu_pct": round(c.drives_cpu, 2),
                "clients_cpu_pct": round(c.clients_cpu, 2),
            }),
        );
    }
    t
}

/// Whether the claim holds, and the figures that say so.
fn verdict_table(plan: &Plan, cells: &[Cell]) -> Table {
    let link = plan.link_mb_per_s();
    let mut v = Table::new(
        "verdict",
        "Seed 002 §4.5: \"striped NASD/NFS scales linearly while SAD's throughput saturates quickly\"",
        &["claim", "measured", "holds"],
    );
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    match verdict(cells, link) {
        Some(d) => {
            let (lo, hi) = (plan.pairs[0], plan.pairs_max());
            v.push(
                vec![
                    format!("NASD scales linearly ({lo} to {hi} pairs)"),
                    format!("{}% of linear at {hi}", fmt(d.nasd_efficiency_pct, 0)),
                    yes(d.nasd_linear),
                ],
                serde_json::json!({"table": "verdict", "claim": "nasd_linear", "holds": d.nasd_linear,
                    "nasd_efficiency_pct": round(d.nasd_efficiency_pct, 1)}),
            );
            v.push(
                vec![
                    "SAD saturates at its server's link".into(),
                    format!("{} links' worth at {hi} pairs", fmt(d.sad_links, 2)),
                    yes(d.sad_saturates),
                ],
                serde_json::json!({"table": "verdict", "claim": "sad_saturates", "holds": d.sad_saturates,
                    "sad_links": round(d.sad_links, 3)}),
            );
            v.push(
                vec![
                    "the claim is confirmed".into(),
                    format!("NASD moves {}x SAD at {hi} pairs", fmt(d.nasd_over_sad, 1)),
                    yes(d.confirmed),
                ],
                serde_json::json!({"table": "verdict", "claim": "confirmed", "holds": d.confirmed,
                    "confirmed": d.confirmed, "nasd_over_sad": round(d.nasd_over_sad, 2)}),
            );
        }
        None => v.push(
            vec![
                "the claim".into(),
                "needs two or more pair counts".into(),
                "-".into(),
            ],
            serde_json::json!({"table": "verdict", "claim": "confirmed", "holds": null, "confirmed": null}),
        ),
    }
    v
}

/// Bandwidth against pairs (seed 002 Figs 2a, 4) and CPU against pairs (Fig 3).
fn figures(plan: &Plan, cells: &[Cell]) -> Vec<Figure> {
    let link = plan.link_mb_per_s();
    let series = |name: &str, mode: Mode, f: fn(&Cell) -> f64| Series {
        name: name.into(),
        points: cells
            .iter()
            .filter(|c| c.mode == mode)
            .map(|c| (c.pairs as f64, f(c)))
            .collect(),
    };
    let bandwidth = Figure {
        stem: "scaling".into(),
        title: "Seed 002 Figs 2a/4 today: aggregate read bandwidth vs client/drive pairs".into(),
        x_label: "client/drive pairs".into(),
        y_label: "aggregate MB/s".into(),
        log_y: false,
        y_max: None,
        series: vec![
            series(
                "NASD (raid0, clients read drives directly)",
                Mode::Nasd,
                |c| c.mean,
            ),
            series("SAD (store-and-forward server)", Mode::Sad, |c| c.mean),
            Series {
                name: "n x link rate".into(),
                points: plan
                    .pairs
                    .iter()
                    .map(|&n| (n as f64, link * n as f64))
                    .collect(),
            },
        ],
    };
    let cpu_fig = Figure {
        stem: "scaling-cpu".into(),
        title: "Seed 002 Fig 3 today: manager and SAD server CPU vs pairs".into(),
        x_label: "client/drive pairs".into(),
        y_label: "% of one CPU".into(),
        log_y: false,
        y_max: None,
        series: vec![
            series("manager, NASD runs", Mode::Nasd, |c| c.manager_cpu),
            series("SAD server, SAD runs", Mode::Sad, |c| {
                c.sad_cpu.unwrap_or(0.0)
            }),
            series("manager, SAD runs", Mode::Sad, |c| c.manager_cpu),
        ],
    };
    vec![bandwidth, cpu_fig]
}

/// How the run was set up, and what the seed measured.
fn notes(plan: &Plan) -> Vec<String> {
    vec![
        format!("machine: {}", cpu::machine()),
        format!(
            "each drive, client, the manager and the SAD server in a network namespace of its own, \
             joined by a router namespace; every link capped at {} Mbit/s each way (tc tbf) while \
             measuring; files: {FILES} x {} MiB, raid0 over all n drives at {STRIPE_UNIT} (one \
             object at n = 1); reads of {} KiB, {STREAMS_PER_CLIENT} in flight per client; a \
             warm-up of {WARMUP_MS} ms plus the time one link takes to carry every read in \
             flight; MB = 10^6 bytes",
            plan.rate_mbit,
            plan.file_bytes >> 20,
            CHUNK_BYTES >> 10
        ),
        "seed 002 §4.3 (Fig 3): NASD 12.5 MB/s at 4 clients with 1.5% file manager CPU; the SAD \
         server saturates at 10.5 MB/s; §4.5 (Fig 5): SAD flattens at 8.5 MB/s while NASD adds \
         ~3.1 MB/s per pair. Here the SAD server is limited by its one link, not its CPU (its \
         CPU column shows how far from saturation it is)"
            .into(),
    ]
}

fn round(x: f64, digits: i32) -> f64 {
    let k = 10f64.powi(digits);
    (x * k).round() / k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::tests::options;

    fn cell(pairs: usize, mode: Mode, mean: f64) -> Cell {
        Cell {
            pairs,
            mode,
            mb_per_s: vec![mean],
            mean,
            sd: 0.0,
            manager_cpu: 0.5,
            sad_cpu: (mode == Mode::Sad).then_some(3.0),
            drives_cpu: 1.0,
            clients_cpu: 2.0,
        }
    }

    #[test]
    fn the_verdict_wants_linear_nasd_and_a_saturated_sad() {
        let scaled = [
            cell(1, Mode::Nasd, 3.8),
            cell(1, Mode::Sad, 3.7),
            cell(2, Mode::Nasd, 7.5),
            cell(2, Mode::Sad, 3.8),
            cell(4, Mode::Nasd, 14.9),
            cell(4, Mode::Sad, 3.8),
        ];
        let v = verdict(&scaled, 4.0).unwrap();
        assert!(v.nasd_linear && v.sad_saturates && v.confirmed, "{v:?}");
        assert!((v.nasd_efficiency_pct - 98.0).abs() < 0.1);
        let mut flat = scaled.clone();
        flat[4].mean = 6.0;
        let v = verdict(&flat, 4.0).unwrap();
        assert!(!v.nasd_linear && !v.confirmed);
        let mut sad_scales = scaled.clone();
        sad_scales[5].mean = 14.0;
        assert!(!verdict(&sad_scales, 4.0).unwrap().confirmed);
        assert!(
            verdict(&scaled[..2], 4.0).is_none(),
            "one pair count says nothing"
        );
    }

    #[test]
    fn the_report_has_a_row_per_configuration_and_mode_and_two_figures() {
        let plan = Plan::new(&options()).unwrap();
        let mut runs = vec![];
        for n in [1, 2, 4] {
            for (mode, mb) in [(Mode::Nasd, 3.9 * n as f64), (Mode::Sad, 3.8)] {
                runs.push(Run {
                    mode,
                    pairs: n,
                    mb_per_s: mb,
                    manager_cpu: 0.1,
                    sad_cpu: (mode == Mode::Sad).then_some(5.0),
                    drives_cpu: 2.0,
                    clients_cpu: 4.0,
                });
            }
        }
        let r = report(&plan, &runs);
        assert_eq!(r.tables[0].json.len(), 6);
        let row = &r.tables[0].json[5];
        assert_eq!(row["pairs"], 4);
        assert_eq!(row["mode"], "sad");
        assert_eq!(row["sad_server_cpu_pct"], 5.0);
        assert!(r.tables[0].json[4]["sad_server_cpu_pct"].is_null());
        let confirmed = r.tables[1]
            .json
            .iter()
            .find(|j| j["claim"] == "confirmed")
            .unwrap();
        assert_eq!(confirmed["confirmed"], true);
        let stems: Vec<&str> = r.figures.iter().map(|f| f.stem.as_str()).collect();
        assert_eq!(stems, ["scaling", "scaling-cpu"]);
        assert!(r.render_text().contains("NASD"));
    }

    #[test]
    fn mean_and_sample_deviation() {
        assert_eq!(mean_sd(&[2.0, 4.0]), (3.0, 2f64.sqrt()));
        assert_eq!(mean_sd(&[5.0]), (5.0, 0.0));
    }
}
