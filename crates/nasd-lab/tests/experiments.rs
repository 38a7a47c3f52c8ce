//! Black-box runs of the three experiments: each produces the tables and figures `nasd lab`
//! prints and writes, and its JSON rows carry the fields issue 4 names.

use nasd_lab::sim::workload::{self, format_trace};
use nasd_lab::{crypto, model_exp, sim, LabOptions};

fn quick() -> LabOptions {
    LabOptions {
        quick: true,
        seed: 3,
    }
}

fn rows(report: &nasd_lab::Report) -> Vec<serde_json::Value> {
    report
        .json_lines()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect()
}

#[test]
fn model_rows_carry_model_and_counted_and_agree_for_basic_mac() {
    let report = model_exp::run(&quick()).unwrap();
    // Fig 10's latency rows (their own shape) apart from the cost model's.
    let (fig10, rows): (Vec<_>, Vec<_>) = rows(&report)
        .into_iter()
        .partition(|r| r["table"] == "fig10");
    assert_eq!(fig10.len(), 6, "three approaches, read and write");
    assert!(fig10
        .iter()
        .all(|r| r["measured_ns"].as_f64().unwrap() > 0.0));
    assert!(!rows.is_empty());
    for r in &rows {
        for field in [
            "figure",
            "scheme",
            "side",
            "op",
            "size_bytes",
            "offset_bytes",
            "compressions",
        ] {
            assert!(r.get(field).is_some(), "{field} missing in {r}");
        }
        assert!(["client", "drive"].contains(&r["side"].as_str().unwrap()));
    }
    // HMAC over exactly one 8 KiB block at offset 0: 131 calls, counted equal (reads).
    let hmac = rows
        .iter()
        .find(|r| r["figure"] == "6a" && r["scheme"] == "mac" && r["size_bytes"] == 8192)
        .unwrap();
    assert_eq!(hmac["compressions"], 131.0);
    assert_eq!(hmac["counted"], 131.0);
    // Figures 5, 6a, 6b, 7a, 7b (5 for reads and writes), each with model and counted curves.
    let stems: Vec<&str> = report.figures.iter().map(|f| f.stem.as_str()).collect();
    assert_eq!(stems, ["fig5", "fig5w", "fig6a", "fig6b", "fig7a", "fig7b"]);
    assert!(report.figures.iter().all(|f| f.series.len() == 8));
    // Outputs: a CSV and an SVG per figure.
    let dir = std::env::temp_dir().join(format!("nasd-lab-model-{}", std::process::id()));
    let written = report.write_outputs(&dir).unwrap();
    assert_eq!(written.len(), 12);
    let svg = std::fs::read_to_string(dir.join("fig6b.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("Fig 6b"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sim_replays_a_trace_file_and_reports_every_figure() {
    let reqs = workload::generate(&workload::NFS, 3000, 9);
    let path = std::env::temp_dir().join(format!("nasd-lab-trace-{}.txt", std::process::id()));
    std::fs::write(&path, format_trace(&reqs)).unwrap();
    let report = sim::run(&quick(), Some(&path)).unwrap();
    std::fs::remove_file(&path).unwrap();
    let rows = rows(&report);
    let fig12: Vec<_> = rows.iter().filter(|r| r["figure"] == "12-14").collect();
    assert_eq!(fig12.len(), 3 * sim::SHA_MBPS.len());
    for r in &rows {
        if r.get("figure").is_none() {
            continue;
        }
        for field in [
            "workload",
            "precompute",
            "sha_mbps",
            "added_latency_pct",
            "outliers_pct",
            "max_added_latency_pct",
        ] {
            assert!(r.get(field).is_some(), "{field} missing in {r}");
        }
    }
    // More SHA throughput never hurts on average, and P1 never costs more than P0 on reads.
    let at = |p: &str, m: f64| {
        fig12
            .iter()
            .find(|r| r["precompute"] == p && r["sha_mbps"] == m)
            .unwrap()["added_latency_pct"]
            .as_f64()
            .unwrap()
    };
    assert!(at("P0", 200.0) > at("P0", 600.0) && at("P0", 600.0) > at("P0", 2000.0));
    assert!(at("P1", 600.0) < at("P0", 600.0));
    assert_eq!(report.figures.len(), 7);
}

#[test]
fn crypto_rows_name_algorithms_and_times() {
    let report = crypto::run(&quick()).unwrap();
    let rows = rows(&report);
    let t1: Vec<_> = rows.iter().filter(|r| r["table"] == "1").collect();
    for name in [
        "MD4",
        "MD5",
        "SHA-256",
        "BLAKE3",
        "HMAC-SHA-256",
        "RC5-32/12/16",
        "AES-256-GCM",
    ] {
        let r = t1.iter().find(|r| r["algorithm"] == name).unwrap();
        assert!(r["ms_per_64kib"].as_f64().unwrap() > 0.0);
    }
    for name in ["RSA-512 sign", "RSA-2048 verify", "Ed25519 sign"] {
        let r = t1.iter().find(|r| r["algorithm"] == name).unwrap();
        assert!(r["ops_per_s"].as_f64().unwrap() > 0.0);
    }
    for t in ["2", "3", "4"] {
        // The seed's five processors, three suites of today, nasd per block and per version.
        assert_eq!(rows.iter().filter(|r| r["table"] == t).count(), 5 + 3 + 2);
        let nasd = |what: &str| {
            rows.iter()
                .find(|r| r["table"] == t && r["algorithm"] == what)
                .unwrap()
                .clone()
        };
        assert!(nasd("nasd per block")["write_host_ms"].as_f64().unwrap() > 0.0);
        // Scheme 1 signs each write request; 2 and 3 do not.
        let (w1, w) = (
            rows.iter()
                .find(|r| r["table"] == "2" && r["algorithm"] == "nasd per block")
                .unwrap()["write_disk_ms"]
                .as_f64()
                .unwrap(),
            nasd("nasd per block")["write_disk_ms"].as_f64().unwrap(),
        );
        assert!(t == "2" || w1 > w, "table {t}: {w1} vs {w}");
        // Schemes 1 and 2 sign each version; 3 does not.
        let per_version = nasd("nasd per version")["write_host_ms"].as_f64().unwrap();
        assert_eq!(per_version > 0.0, t != "4", "table {t}");
    }
    let steps = rows.iter().filter(|r| r["table"] == "nasd_steps").count();
    assert_eq!(steps, 9);
    let fig11: Vec<_> = rows.iter().filter(|r| r["table"] == "fig11").collect();
    assert_eq!(fig11.len(), crypto::RSA_BITS_QUICK.len());
    // Larger moduli are slower.
    let ms: Vec<f64> = fig11
        .iter()
        .map(|r| r["private_ms"].as_f64().unwrap())
        .collect();
    assert!(ms.windows(2).all(|w| w[0] < w[1]), "{ms:?}");
}
