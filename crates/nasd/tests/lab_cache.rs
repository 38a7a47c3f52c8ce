//! `nasd lab cache --quick --json` end to end (seed 002 §3; issue 24): every total cache
//! size and drive count has its SAD and NASD hit rates, the claim has a verdict for data reads
//! and for all reads, and a trace given with `--trace` is what is simulated. No threshold on
//! the rates: the simulation reports them.

mod common;

use std::process::Command;

use serde_json::Value;

fn run(args: &[&str]) -> Vec<Value> {
    common::lab_json("cache", args)
}

fn rate(v: &Value, field: &str) -> f64 {
    let x = v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} in {v}"));
    assert!((0.0..=100.0).contains(&x), "{field} {x} in {v}");
    x
}

#[test]
fn every_configuration_has_hit_rates_and_the_claim_a_verdict() {
    let rows = run(&[]);
    let cells: Vec<&Value> = rows.iter().filter(|r| r["table"] == "cache").collect();
    assert_eq!(cells.len(), 10, "5 cache sizes x 2 drive counts");
    for mb in [64, 72, 80, 88, 96] {
        for d in [4, 8] {
            let c = cells
                .iter()
                .find(|r| r["total_mb"] == mb && r["drives"] == d)
                .unwrap_or_else(|| panic!("no row for {mb} MB, {d} drives"));
            for f in [
                "sad_hit_pct",
                "nasd_hit_pct",
                "sad_data_hit_pct",
                "nasd_dir_hit_pct",
            ] {
                rate(c, f);
            }
        }
    }
    // More cache never lowers SAD's hit rate (LRU is a stack algorithm).
    let sad: Vec<f64> = cells
        .iter()
        .filter(|r| r["drives"] == 4)
        .map(|r| rate(r, "sad_hit_pct"))
        .collect();
    assert!(sad.windows(2).all(|w| w[0] <= w[1]), "{sad:?}");
    let verdicts: Vec<&Value> = rows.iter().filter(|r| r["table"] == "verdict").collect();
    assert_eq!(verdicts.len(), 2);
    for v in verdicts {
        assert!(
            v["verdict"] == "confirmed" || v["verdict"] == "refuted",
            "{v}"
        );
    }
}

#[test]
fn a_trace_given_is_the_one_simulated() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace");
    // Two files read over and over: after the warm-up every read hits, in both caches.
    let mut text = String::from("# timestamp_s op object offset length\n");
    for i in 0..1000 {
        text += &format!("{}.0 read {} 0 100000\n", i, i % 2);
    }
    std::fs::write(&trace, text).unwrap();
    let rows = run(&["--trace", trace.to_str().unwrap()]);
    for r in rows.iter().filter(|r| r["table"] == "cache") {
        assert_eq!(rate(r, "sad_hit_pct"), 100.0, "{r}");
        assert_eq!(rate(r, "nasd_hit_pct"), 100.0, "{r}");
        assert!(r["source"].as_str().unwrap().ends_with("t.trace"));
    }
    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, "0.0 read x 0 1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nasd"))
        .args(["lab", "cache", "--quick", "--trace", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
