//! `nasd lab sweep --quick --json` end to end (seed 000 §2.1 Fig 2, §3.2 Fig 4; issue 24): every
//! point of the sweep is there for no security and the four schemes, at both offsets, with a
//! positive measured throughput beside the meter's count; the counts show HierMAC's saw-tooth
//! (the drive hashes no data on a block boundary, a whole block 1 byte before); and every claim
//! has a verdict. No timing threshold: the numbers are measured, the lab reports them.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

const CURVES: [&str; 5] = ["none", "mac", "digest", "incremental", "tree"];
const OFFSETS: [u64; 2] = [0, 1000];
const BLOCK: u64 = 8192;
const SIZE_MAX: u64 = 65536;

fn run(args: &[&str]) -> Vec<Value> {
    common::lab_json("sweep", args)
}

fn f(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

fn point<'a>(rows: &[&'a Value], scheme: &str, offset: u64, size: u64) -> &'a Value {
    rows.iter()
        .find(|r| {
            r["scheme"] == scheme
                && f(r, "offset_bytes") == offset as f64
                && f(r, "size_bytes") == size as f64
        })
        .unwrap_or_else(|| panic!("no point {scheme} {offset} {size}"))
}

#[test]
fn quick_sweep_has_every_point_and_a_verdict_per_claim() {
    let out = tempfile::tempdir().unwrap();
    let rows = run(&["--out", out.path().to_str().unwrap()]);
    assert!(rows.iter().all(|r| r["experiment"] == "sweep"));
    let points: Vec<&Value> = rows.iter().filter(|r| r["table"] == "sweep").collect();
    let sizes: BTreeSet<u64> = points.iter().map(|r| f(r, "size_bytes") as u64).collect();
    // Fig 2's 1 KB and 8 KB, both sides of every 8 KiB boundary, up to 64 KiB.
    for j in 1..=SIZE_MAX / BLOCK {
        assert!(
            sizes.contains(&(j * BLOCK)) && sizes.contains(&(j * BLOCK - 1)),
            "{j}"
        );
    }
    assert!(sizes.contains(&1024));
    assert_eq!(sizes.last(), Some(&SIZE_MAX));
    assert_eq!(points.len(), CURVES.len() * OFFSETS.len() * sizes.len());
    for &scheme in &CURVES {
        for offset in OFFSETS {
            for &size in &sizes {
                let p = point(&points, scheme, offset, size);
                assert!(
                    f(p, "drive_mb_per_s") > 0.0 && f(p, "mb_per_s") > 0.0,
                    "{p}"
                );
                assert!(
                    f(p, "drive_mb_per_s_min") <= f(p, "drive_mb_per_s_max"),
                    "{p}"
                );
                assert!(f(p, "runs") >= 1.0, "{p}");
                if scheme == "none" {
                    assert_eq!(f(p, "drive_counted_calls"), 0.0, "{p}");
                    assert!(p["client_mb_per_s"].is_null(), "{p}");
                } else {
                    assert!(f(p, "client_mb_per_s") > 0.0, "{p}");
                    assert!(f(p, "drive_counted_calls") > 0.0, "{p}");
                    assert!(f(p, "client_counted_calls") > 0.0, "{p}");
                }
            }
        }
    }
    // The counted saw-tooth under the measured one: on a boundary the drive MACs only stored
    // digests; 1 byte before, it also hashes the partial block (at least 127 of 128 calls).
    for j in 1..=SIZE_MAX / BLOCK {
        let on = f(
            point(&points, "digest", 0, j * BLOCK),
            "drive_counted_calls",
        );
        let before = f(
            point(&points, "digest", 0, j * BLOCK - 1),
            "drive_counted_calls",
        );
        assert!(before >= on + 127.0, "{j}: {before} vs {on}");
    }
    // Basic MAC hashes every byte wherever the request starts.
    let mac = |o| f(point(&points, "mac", o, SIZE_MAX), "drive_counted_calls");
    assert_eq!(mac(0), mac(1000));

    let verdicts: Vec<&Value> = rows.iter().filter(|r| r["table"] == "verdict").collect();
    let claims: Vec<&str> = verdicts
        .iter()
        .map(|v| v["claim"].as_str().unwrap())
        .collect();
    assert_eq!(
        claims,
        [
            "hiermac_sawtooth",
            "hiermac_follows_nosecurity",
            "misaligned_costs_more",
            "integrity_all_cost"
        ]
    );
    for v in &verdicts {
        let word = v["verdict"].as_str().unwrap();
        assert!(["confirmed", "refuted"].contains(&word), "{v}");
        assert_eq!(v["holds"], word == "confirmed", "{v}");
        assert!(!v["seed"].as_str().unwrap().is_empty(), "{v}");
        assert!(!v["evidence"].as_str().unwrap().is_empty(), "{v}");
    }

    // The figures: drive MB/s at both offsets and end to end at offset 0, as CSV and SVG.
    for stem in ["sweep-drive-0", "sweep-drive-1000", "sweep-e2e-0"] {
        let csv = std::fs::read_to_string(out.path().join(format!("{stem}.csv"))).unwrap();
        assert!(csv.starts_with("series,"), "{stem}");
        assert_eq!(
            csv.lines().count(),
            1 + CURVES.len() * sizes.len(),
            "{stem}"
        );
        let svg = std::fs::read_to_string(out.path().join(format!("{stem}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("Seed 000 Fig 4"),
            "{stem}"
        );
    }
}

#[test]
fn text_output_names_the_figures_plots_them_and_gives_the_verdicts() {
    let out = Command::new(env!("CARGO_BIN_EXE_nasd"))
        .args(["lab", "sweep", "--quick"])
        .output()
        .expect("nasd runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Seed 000 Figs 2 and 4 measured, offset 0 B"),
        "{text}"
    );
    assert!(
        text.contains("Seed 000 Fig 4 (and Fig 2) measured: drive read MB/s"),
        "{text}"
    );
    // The text plot's axis and legend.
    assert!(text.contains(" +----------"), "{text}");
    assert!(text.contains("Stored Digest (HierMAC)"), "{text}");
    let verdicts = text
        .lines()
        .filter(|l| l.starts_with("note: verdict: Fig "))
        .count();
    assert_eq!(verdicts, 4, "{text}");
}
