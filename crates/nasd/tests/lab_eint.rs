//! `nasd lab eint` end to end (seed 003 §7, Figs 9-10; requirements B.6): the quick run's JSON
//! rows have their documented shapes and the outcomes the constructions must produce (RAND- and
//! COMP-EINT keep far less untrusted integrity data than MT-EINT on low-entropy content, the same
//! on all-random content; trusted storage is one fixed record per file); and `--tree` on a tree
//! this test builds, with known shares of text and random blocks, reports exactly those shares.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// nasd-e2e's trusted record: one per file, every scheme.
const TRUSTED_RECORD_BYTES: f64 = 90.0;
const BLOCK: usize = 65536;

fn run(args: &[&str]) -> Vec<Value> {
    common::lab_json("eint", args)
}

fn table<'a>(rows: &'a [Value], name: &str) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["table"] == name).collect()
}

fn f(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

fn has_fields(rows: &[&Value], fields: &[&str]) {
    for r in rows {
        assert_eq!(r["experiment"], "eint");
        for field in fields {
            assert!(r.get(field).is_some(), "{field} missing in {r}");
        }
    }
}

/// The micro row of `content`, `scheme` and `cache`.
fn micro<'a>(rows: &[&'a Value], content: &str, scheme: &str, cache: f64) -> &'a Value {
    rows.iter()
        .find(|r| r["content"] == content && r["scheme"] == scheme && f(r, "cache_bytes") == cache)
        .unwrap_or_else(|| panic!("no micro row {content} {scheme} {cache}"))
}

#[test]
fn quick_rows_have_their_shapes_and_the_constructions_outcomes() {
    let rows = run(&[]);
    let micro_rows = table(&rows, "micro");
    has_fields(
        &micro_rows,
        &[
            "block_bytes",
            "content",
            "scheme",
            "cache_bytes",
            "write_us_per_op",
            "read_us_per_op",
            "write_integrity_bytes_per_op",
            "read_integrity_bytes_per_op",
            "untrusted_bytes",
            "trusted_bytes_per_file",
            "time_ratio",
            "bandwidth_ratio",
            "storage_ratio",
        ],
    );
    // Fig 9: two contents x three schemes x four cache sizes, all at 64 KiB.
    assert_eq!(micro_rows.len(), 2 * 3 * 4);
    for r in &micro_rows {
        assert_eq!(f(r, "block_bytes"), BLOCK as f64);
        assert!(f(r, "write_us_per_op") > 0.0 && f(r, "read_us_per_op") > 0.0);
    }
    let caches: BTreeSet<u64> = micro_rows
        .iter()
        .map(|r| f(r, "cache_bytes") as u64)
        .collect();
    assert_eq!(caches, BTreeSet::from([0, 1024, 2048, 4096]));
    for cache in [0.0, 4096.0] {
        let mt = f(
            micro(&micro_rows, "low", "MT-EINT", cache),
            "untrusted_bytes",
        );
        let rand = f(
            micro(&micro_rows, "low", "RAND-EINT", cache),
            "untrusted_bytes",
        );
        let comp = f(
            micro(&micro_rows, "low", "COMP-EINT", cache),
            "untrusted_bytes",
        );
        assert!(
            rand < 0.5 * mt && comp < 0.25 * mt,
            "low: {mt} {rand} {comp}"
        );
        for s in ["RAND-EINT", "COMP-EINT"] {
            let hi = micro(&micro_rows, "high", s, cache);
            assert_eq!(f(hi, "storage_ratio"), 1.0, "{hi}");
            assert_eq!(f(hi, "bandwidth_ratio"), 1.0, "{hi}");
        }
    }
    // A node cache saves MT-EINT read bandwidth, and the cache never changes what is stored.
    let cold = micro(&micro_rows, "high", "MT-EINT", 0.0);
    let warm = micro(&micro_rows, "high", "MT-EINT", 4096.0);
    assert!(f(warm, "read_integrity_bytes_per_op") < f(cold, "read_integrity_bytes_per_op"));
    assert_eq!(f(warm, "untrusted_bytes"), f(cold, "untrusted_bytes"));

    let traces = table(&rows, "trace");
    has_fields(
        &traces,
        &[
            "trace",
            "share_pct",
            "random_looking_pct",
            "scheme",
            "seconds",
            "integrity_bytes_per_op",
            "counter_bytes_per_op",
            "untrusted_bytes",
            "time_relative",
            "bandwidth_relative",
            "storage_relative",
        ],
    );
    // Fig 10: three shapes x six shares x three schemes.
    assert_eq!(traces.len(), 3 * 6 * 3);
    for t in &traces {
        assert!(f(t, "seconds") > 0.0);
        let share = f(t, "share_pct");
        let random = f(t, "random_looking_pct");
        match share as u32 {
            0 => assert_eq!(random, 0.0),
            100 => assert_eq!(random, 100.0),
            _ => assert!((random - share).abs() < 20.0, "{t}"),
        }
        if t["scheme"] == "MT-EINT" {
            continue;
        }
        if share == 100.0 {
            assert_eq!(f(t, "storage_ratio"), 1.0, "{t}");
            assert_eq!(f(t, "bandwidth_ratio"), 1.0, "{t}");
        } else {
            assert!(f(t, "storage_ratio") < 1.0, "{t}");
        }
        if share == 0.0 {
            assert!(f(t, "storage_ratio") < 0.7, "{t}");
        }
    }
    // The same operations over the same files: MT-EINT stores the same whatever the content,
    // and RAND-EINT's storage grows with the high-entropy share.
    for shape in ["read-mostly", "mixed", "write-heavy"] {
        let of = |scheme: &str| -> Vec<f64> {
            traces
                .iter()
                .filter(|t| t["trace"] == shape && t["scheme"] == scheme)
                .map(|t| f(t, "untrusted_bytes"))
                .collect()
        };
        let mt = of("MT-EINT");
        assert!(mt.windows(2).all(|w| w[0] == w[1]), "{shape}: {mt:?}");
        let rand = of("RAND-EINT");
        assert!(rand.windows(2).all(|w| w[0] <= w[1]), "{shape}: {rand:?}");
    }
    // Trusted storage: one fixed-size record per file, for every scheme and workload.
    for r in micro_rows.iter().chain(&traces) {
        assert_eq!(f(r, "trusted_bytes_per_file"), TRUSTED_RECORD_BYTES, "{r}");
        assert_eq!(
            f(r, "trusted_bytes_per_file_min"),
            TRUSTED_RECORD_BYTES,
            "{r}"
        );
    }

    let costs = table(&rows, "costs");
    assert_eq!(costs.len(), 8);
    assert!(costs.iter().all(|c| f(c, "us_per_block") > 0.0));
    let seed = table(&rows, "seed");
    let quantities: Vec<&str> = seed
        .iter()
        .map(|r| r["quantity"].as_str().unwrap())
        .collect();
    assert_eq!(
        quantities,
        [
            "low_entropy_storage_pct_of_mt",
            "max_bandwidth_overhead_pct",
            "max_storage_overhead_pct",
            "user_study_pct"
        ]
    );
    // nasd-e2e keeps RAND/COMP leaves in the same block-indexed tree as MT's: never more bytes.
    assert_eq!(f(seed[1], "here"), 0.0);
    assert_eq!(f(seed[2], "here"), 0.0);
    let verdicts = table(&rows, "verdict");
    let claims: Vec<&str> = verdicts
        .iter()
        .map(|r| r["claim"].as_str().unwrap())
        .collect();
    assert_eq!(
        claims,
        [
            "rand_improves_on_mt",
            "comp_improves_on_mt",
            "comp_read_mostly",
            "rand_most_others",
            "mt_high_entropy"
        ]
    );
    for v in &verdicts {
        let word = v["verdict"].as_str().unwrap();
        assert!(["holds", "partly", "does not hold"].contains(&word), "{v}");
        assert_eq!(v["holds"], word == "holds");
        assert!(f(v, "cases") > 0.0);
    }
}

/// Words from a small vocabulary, as low-entropy text (a linear congruential generator picks).
fn text(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "drive ",
        "object ",
        "the ",
        "of ",
        "capability ",
        "block ",
        "and ",
        "secure ",
        "network ",
        "storage ",
        "file\n",
        "manager ",
    ];
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(WORDS[(x >> 33) as usize % WORDS.len()].as_bytes());
    }
    out.truncate(len);
    out
}

/// Uniform bytes (BLAKE3 in XOF mode).
fn random(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    h.finalize_xof().fill(&mut out);
    out
}

/// Six text files and four random files of four 64 KiB blocks each (40% of the blocks random,
/// and the same 40% incompressible), in nested directories, beside a symbolic link and a fifo
/// the walk must skip.
fn build_tree(dir: &Path) {
    for i in 0..6u64 {
        let sub = dir.join(format!("docs/{i}"));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("notes.txt"), text(i, 4 * BLOCK)).unwrap();
    }
    std::fs::create_dir_all(dir.join("media")).unwrap();
    for i in 0..4u64 {
        std::fs::write(dir.join(format!("media/{i}.bin")), random(i, 4 * BLOCK)).unwrap();
    }
    std::os::unix::fs::symlink(dir.join("media/0.bin"), dir.join("link")).unwrap();
    let status = Command::new("mkfifo")
        .arg(dir.join("fifo"))
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn tree_reports_the_shares_of_a_tree_the_test_built() {
    let tree = tempfile::tempdir().unwrap();
    build_tree(tree.path());
    let out = tempfile::tempdir().unwrap();
    let rows = run(&[
        "--tree",
        tree.path().to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
    ]);
    // The census runs at the run's 64 KiB and at nasd-e2e's default 4 KiB.
    let census = table(&rows, "tree");
    assert_eq!(census.len(), 2);
    for (c, whole) in census.iter().zip([640.0, 40.0]) {
        assert_eq!(f(c, "files_listed"), 10.0);
        assert_eq!(f(c, "files_scanned"), 10.0);
        assert_eq!(f(c, "bytes_scanned"), (40 * BLOCK) as f64);
        assert_eq!(f(c, "skipped_special"), 2.0);
        assert_eq!((f(c, "whole_blocks"), f(c, "tail_blocks")), (whole, 0.0));
        assert_eq!(f(c, "high_entropy_pct"), 40.0);
        assert_eq!(f(c, "incompressible_pct"), 40.0);
        assert_eq!(
            (
                f(c, "seed_high_entropy_pct"),
                f(c, "seed_incompressible_pct")
            ),
            (28.0, 32.0)
        );
    }
    assert_eq!(f(census[0], "block_bytes"), 4096.0);
    assert_eq!(f(census[1], "block_bytes"), BLOCK as f64);
    let user_study = table(&rows, "seed")
        .into_iter()
        .find(|r| r["quantity"] == "user_study_pct")
        .unwrap();
    assert_eq!(f(user_study, "here_high_entropy_pct"), 40.0);

    // The sampled real files ran under every scheme and cache: the random ones need leaves
    // under RAND and COMP, the text ones none.
    let micro_rows = table(&rows, "micro");
    let tree_rows: Vec<&&Value> = micro_rows
        .iter()
        .filter(|r| r["content"] == "tree")
        .collect();
    assert_eq!(tree_rows.len(), 3 * 4);
    let of = |scheme: &str| {
        tree_rows
            .iter()
            .find(|r| r["scheme"] == scheme && f(r, "cache_bytes") == 0.0)
            .unwrap()
    };
    assert_eq!(f(of("MT-EINT"), "leaves"), 40.0);
    assert_eq!(f(of("RAND-EINT"), "leaves"), 16.0);
    assert_eq!(f(of("COMP-EINT"), "leaves"), 16.0);
    assert_eq!(f(of("COMP-EINT"), "read_by_tag"), 24.0);

    // Figures: Fig 9 per content (low, high, tree) x three panels, Fig 10 x three panels.
    for stem in [
        "fig9-low-64k-time",
        "fig9-high-64k-bandwidth",
        "fig9-tree-64k-storage",
        "fig10-64k-time",
        "fig10-64k-bandwidth",
        "fig10-64k-storage",
    ] {
        let csv = std::fs::read_to_string(out.path().join(format!("{stem}.csv"))).unwrap();
        assert!(csv.starts_with("series,"), "{stem}: {csv}");
        let svg = std::fs::read_to_string(out.path().join(format!("{stem}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("Seed 003 Fig"),
            "{stem}"
        );
    }
    let written = std::fs::read_dir(out.path()).unwrap().count();
    assert_eq!(written, 2 * (3 * 3 + 3));
}
