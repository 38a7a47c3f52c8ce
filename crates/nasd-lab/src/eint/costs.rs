//! What one block costs in each primitive the three schemes are made of, measured here: the key
//! to reading their running times.
//!
//! Per block, a write costs: MT-EINT HCTR2 + leaf hash (+ a path of node hashes); RAND-EINT
//! HCTR2 + `IsRand` (+ the leaf hash and path for a random-looking block); COMP-EINT deflate +
//! tag + HCTR2 for a block that compresses, and deflate (failed) + HCTR2 + `IsRand` + leaf hash
//! for one that does not. Reads mirror them with HCTR2 decryption and inflate. The seed's 2007
//! prototype hashed with SHA-1 and a Merkle tree from disk (unverified: the paper's setup is not
//! in `seeds/`), where skipping a leaf hash saved more than an entropy test cost; with BLAKE3 on
//! AVX-512 the balance can turn, which this table shows.

use std::hint::black_box;
use std::time::Instant;

use nasd_e2e::block::BlockCipher;
use nasd_e2e::entropy::entropy_bits_per_byte;
use nasd_e2e::{FileId, FileKey};
use serde_json::json;

use super::content::{Kind, Pool};
use super::results::block_label;
use crate::report::{fmt, Table};
use crate::stats::Summary;

/// Timed runs per primitive.
pub const COST_RUNS: usize = 5;
/// Target length of one timed run, seconds: full and `--quick`.
pub const COST_RUN_S_FULL: f64 = 0.04;
pub const COST_RUN_S_QUICK: f64 = 0.01;

/// One primitive's time per block.
#[derive(Debug, Clone)]
pub struct Cost {
    pub block_bytes: u32,
    pub primitive: &'static str,
    /// Microseconds per block.
    pub us: Summary,
}

/// Seconds per call of `f`: calibrated to `run_s` per run, one warm-up run, `COST_RUNS` runs.
fn measure(run_s: f64, mut f: impl FnMut()) -> Summary {
    let t = Instant::now();
    f();
    let once = t.elapsed().as_secs_f64().max(1e-9);
    let iters = ((run_s / once).ceil() as u64).clamp(1, 1_000_000);
    for _ in 0..iters {
        f();
    }
    let samples: Vec<f64> = (0..COST_RUNS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_secs_f64() / iters as f64
        })
        .collect();
    Summary::of(&samples).expect("runs > 0, times are numbers")
}

/// The primitives' costs on `block_bytes`-byte blocks of generated text and random bytes.
pub fn measure_costs(block_bytes: u32, pool: &Pool, quick: bool) -> Vec<Cost> {
    let run_s = if quick {
        COST_RUN_S_QUICK
    } else {
        COST_RUN_S_FULL
    };
    let b = block_bytes as usize;
    let text = pool.window(Kind::Text, 1, b).to_vec();
    let random = pool.window(Kind::Random, 2, b).to_vec();
    let deflated = miniz_oxide::deflate::compress_to_vec(&text, nasd_e2e::eint::COMP_DEFLATE_LEVEL);
    let cipher = BlockCipher::new(FileId::from_u128(1), &FileKey::from_bytes([7; 32]));
    let mut buf = text.clone();
    let key = [9u8; 32];
    let mut out = Vec::new();
    let mut push = |primitive, s: Summary| {
        out.push(Cost {
            block_bytes,
            primitive,
            us: s.scaled(1e6),
        })
    };
    push(
        "HCTR2-AES-256 encrypt",
        measure(run_s, || cipher.encrypt_in_place(0, 1, black_box(&mut buf))),
    );
    push(
        "HCTR2-AES-256 decrypt",
        measure(run_s, || cipher.decrypt_in_place(0, 1, black_box(&mut buf))),
    );
    push(
        "leaf hash (BLAKE3)",
        measure(run_s, || {
            black_box(nasd_e2e::merkle::leaf_hash(0, 1, &key, black_box(&random)));
        }),
    );
    push(
        "IsRand (byte histogram entropy)",
        measure(run_s, || {
            black_box(entropy_bits_per_byte(black_box(&text)));
        }),
    );
    push(
        "COMP tag (keyed BLAKE3)",
        measure(run_s, || {
            black_box(blake3::keyed_hash(&key, black_box(&text)));
        }),
    );
    push(
        "deflate level 1, text",
        measure(run_s, || {
            black_box(miniz_oxide::deflate::compress_to_vec(
                black_box(&text),
                nasd_e2e::eint::COMP_DEFLATE_LEVEL,
            ));
        }),
    );
    push(
        "deflate level 1, random (COMP's failed try)",
        measure(run_s, || {
            black_box(miniz_oxide::deflate::compress_to_vec(
                black_box(&random),
                nasd_e2e::eint::COMP_DEFLATE_LEVEL,
            ));
        }),
    );
    push(
        "inflate, text",
        measure(run_s, || {
            black_box(miniz_oxide::inflate::decompress_to_vec(black_box(&deflated)).ok());
        }),
    );
    out
}

/// The costs as a table.
pub fn cost_table(costs: &[Cost]) -> Table {
    let mut t = Table::new(
        "eint-costs",
        "Per-block cost of the primitives the schemes are built from (median of 5 runs, one thread)",
        &["block", "primitive", "us per block", "MB/s"],
    );
    for c in costs {
        let mb_s = c.block_bytes as f64 / c.us.median;
        t.push(
            vec![
                block_label(c.block_bytes),
                c.primitive.into(),
                fmt(c.us.median, 2),
                fmt(mb_s, 0),
            ],
            json!({
                "table": "costs",
                "block_bytes": c.block_bytes,
                "primitive": c.primitive,
                "us_per_block": c.us.median,
                "us_min": c.us.min,
                "us_max": c.us.max,
                "mb_per_s": mb_s,
            }),
        );
    }
    t
}
