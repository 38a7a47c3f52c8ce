//! Throughput of HCTR2 and of each EINT scheme on 4 KiB blocks of low-entropy (text-like) and
//! high-entropy (random) content, with the per-operation integrity bandwidth and the storage each
//! scheme needs. A timing example, not a test: run it on a quiet machine with
//!
//! ```text
//! cargo run --release -p nasd-e2e --example throughput [-- MiB]
//! ```

use nasd_e2e::hctr2::Hctr2;
use nasd_e2e::{EintFile, FileId, FileKey, MemStore, OpMetrics, Scheme};
use std::time::Instant;

const BLOCK: usize = 4096;

fn prng(seed: u64, out: &mut [u8]) {
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    h.finalize_xof().fill(out);
}

fn text(seed: u64) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "the ",
        "drive ",
        "object ",
        "capability ",
        "manager ",
        "client ",
        "block ",
        "integrity ",
        "of ",
        "and ",
        "to ",
        "a ",
        "network ",
        "attached ",
        "secure ",
        "storage\n",
    ];
    let mut r = vec![0u8; BLOCK];
    prng(seed, &mut r);
    let mut out = Vec::with_capacity(BLOCK + 16);
    let mut k = 0;
    while out.len() < BLOCK {
        out.extend_from_slice(WORDS[(r[k] % 16) as usize].as_bytes());
        k += 1;
    }
    out.truncate(BLOCK);
    out
}

fn mb_per_s(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e6
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(32);
    let blocks = mib * 1024 * 1024 / BLOCK;
    println!("nasd-e2e throughput, {blocks} blocks of {BLOCK} bytes ({mib} MiB) per run");

    let c = Hctr2::new(&[7; 32]);
    let mut buf = vec![0u8; BLOCK];
    prng(1, &mut buf);
    for _ in 0..blocks.min(1024) {
        c.encrypt(&[1; 32], &mut buf); // warm up caches and clocks
    }
    let t = Instant::now();
    for _ in 0..blocks {
        c.encrypt(&[1; 32], &mut buf);
    }
    let enc = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..blocks {
        c.decrypt(&[1; 32], &mut buf);
    }
    let dec = t.elapsed().as_secs_f64();
    println!(
        "HCTR2-AES-256 4 KiB: encrypt {:.0} MB/s, decrypt {:.0} MB/s",
        mb_per_s(blocks * BLOCK, enc),
        mb_per_s(blocks * BLOCK, dec)
    );

    println!(
        "\n{:<10} {:<7} {:>9} {:>9} {:>12} {:>12} {:>14}",
        "scheme",
        "content",
        "write MB/s",
        "read MB/s",
        "wr integ B/op",
        "rd integ B/op",
        "untrusted B"
    );
    let contents: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("text", (0..blocks as u64).map(text).collect()),
        (
            "random",
            (0..blocks as u64)
                .map(|s| {
                    let mut b = vec![0u8; BLOCK];
                    prng(s + 1_000_000, &mut b);
                    b
                })
                .collect(),
        ),
    ];
    let key = FileKey::from_bytes([9; 32]);
    let file = FileId::from_u128(42);
    for scheme in Scheme::ALL {
        for (name, data) in &contents {
            let mut f = EintFile::create(file, scheme, BLOCK as u32, 1, &key, 4096).unwrap();
            let mut s = MemStore::new();
            let mut wm = OpMetrics::default();
            let t = Instant::now();
            for (i, b) in data.iter().enumerate() {
                let m = f.write_block(&mut s, i as u64, b).unwrap();
                wm.integrity_bytes_read += m.integrity_bytes_read;
                wm.integrity_bytes_written += m.integrity_bytes_written;
            }
            let w = t.elapsed().as_secs_f64();
            let mut r = EintFile::open(file, *f.record(), 4096).unwrap();
            r.add_key(1, &key);
            let mut rm = 0u64;
            let t = Instant::now();
            for i in 0..blocks as u64 {
                let (b, m) = r.read_block(&s, i).unwrap();
                debug_assert_eq!(b, data[i as usize]);
                rm += m.integrity_bytes();
            }
            let rd = t.elapsed().as_secs_f64();
            println!(
                "{:<10} {:<7} {:>9.0} {:>9.0} {:>12.1} {:>12.1} {:>14}",
                scheme.name(),
                name,
                mb_per_s(blocks * BLOCK, w),
                mb_per_s(blocks * BLOCK, rd),
                wm.integrity_bytes() as f64 / blocks as f64,
                rm as f64 / blocks as f64,
                f.storage(&s).unwrap().untrusted_integrity_bytes
            );
        }
    }
}
