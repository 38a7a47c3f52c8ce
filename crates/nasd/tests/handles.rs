//! File handles (`nasd_client::handle`) against a real cluster: an fsx-style run of random
//! writes, reads, truncates, flushes, syncs and reopens checked against a model file, on a
//! one-object and on an erasure-coded layout; and a file larger than the write-behind bound
//! streamed in and read back through read-ahead. `FSX_SEED=N` runs another sequence,
//! `FSX_TRACE=1` prints each operation.

mod common;
use common::*;
use nasd_client::files::Client;
use nasd_client::handle::{FileHandle, OpenOptions, DIRTY_BYTES_MAX};
use std::sync::Arc;

const FILE_BYTES_MAX: u64 = 1 << 21;

fn rw(truncate: bool) -> OpenOptions {
    OpenOptions {
        write: true,
        create: true,
        truncate,
        mode: 0o644,
    }
}

/// `ops` random operations on `path` through handles, each checked against `model`.
async fn fsx(c: &Arc<Client>, path: &str, ops: usize, seed: u64) {
    let mut rng = Rng(seed);
    let mut model: Vec<u8> = vec![];
    let mut h = FileHandle::open(c, path, rw(true)).await.unwrap();
    for op in 0..ops {
        let what = rng.below(100);
        let ctx = format!("op {op} (seed {seed}) on {path}");
        if std::env::var("FSX_TRACE").is_ok() {
            eprintln!("{op}: kind {what} model {}", model.len());
        }
        match what {
            0..=39 => {
                let off = rng.below(FILE_BYTES_MAX);
                let len = 1 + rng.below(200 << 10) as usize;
                let data: Vec<u8> = (0..len)
                    .map(|i| (i as u64 * 31 + op as u64) as u8)
                    .collect();
                if std::env::var("FSX_TRACE").is_ok() {
                    eprintln!("   write {off}+{len}");
                }
                h.write_at(off, &data).await.unwrap();
                if model.len() < off as usize + len {
                    model.resize(off as usize + len, 0);
                }
                model[off as usize..off as usize + len].copy_from_slice(&data);
            }
            40..=69 => {
                let off = rng.below(model.len() as u64 + 4096);
                let len = rng.below(300 << 10);
                let got = h.read_at(off, len).await.unwrap();
                let end = (off + len).min(model.len() as u64);
                let want = if off < end {
                    &model[off as usize..end as usize]
                } else {
                    &[][..]
                };
                if got != want {
                    let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                    let same = got[i..].iter().zip(&want[i..]).position(|(a, b)| a == b);
                    panic!(
                        "{ctx}: read {off}+{len}: {} bytes, want {}; first difference at {} \
                         (got {}, want {}), equal again after {:?} bytes",
                        got.len(),
                        want.len(),
                        off + i as u64,
                        got.get(i).copied().unwrap_or(0),
                        want.get(i).copied().unwrap_or(0),
                        same
                    );
                }
            }
            70..=79 => {
                let n = rng.below(FILE_BYTES_MAX);
                if std::env::var("FSX_TRACE").is_ok() {
                    eprintln!("   truncate {n}");
                }
                h.truncate(n).await.unwrap();
                model.resize(n as usize, 0);
            }
            80..=87 => h.flush().await.unwrap(),
            88..=93 => {
                h.fsync().await.unwrap();
                let seen = c.get_bytes(path).await.unwrap();
                assert!(
                    seen == model,
                    "{ctx}: after fsync the file has {} bytes, want {}",
                    seen.len(),
                    model.len()
                );
            }
            _ => {
                h.close().await.unwrap();
                let seen = c.get_bytes(path).await.unwrap();
                assert!(
                    seen == model,
                    "{ctx}: after close the file has {} bytes, want {}",
                    seen.len(),
                    model.len()
                );
                let truncate = rng.below(3) == 0;
                h = FileHandle::open(c, path, rw(truncate)).await.unwrap();
                if truncate {
                    model.clear();
                }
            }
        }
        assert_eq!(h.size().await, model.len() as u64, "{ctx}: size");
    }
    h.close().await.unwrap();
    assert!(
        c.get_bytes(path).await.unwrap() == model,
        "{path}: at the end"
    );
}

#[test]
fn random_operations_through_handles_match_a_model_file() {
    let up = Up::start(3);
    up.ok(&["mkdir", "--layout", "single", "nasd:/one"]);
    up.ok(&["mkdir", "--layout", "rs:2+1/64K", "nasd:/ec"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = up.admin_client(&rt);
    // FSX_SEED=N runs another sequence (the failing op and seed are in every message).
    let extra: u64 = std::env::var("FSX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    rt.block_on(async {
        fsx(&c, "/one/f", 1500, 0x1234_5678_9abc_def1 ^ extra).await;
        fsx(&c, "/ec/f", 500, 0x0fed_cba9_8765_4321 ^ extra).await;
    });
    // A handle that is aborted leaves no file; one opened for reading cannot write.
    rt.block_on(async {
        let h = FileHandle::open(&c, "/one/never", rw(false)).await.unwrap();
        h.write_at(0, b"lost").await.unwrap();
        h.abort().await;
        assert!(c.stat("/one/never").await.is_err());
        let r = FileHandle::open(&c, "/one/f", OpenOptions::default())
            .await
            .unwrap();
        assert!(r.write_at(0, b"x").await.is_err());
    });
}

#[test]
fn a_file_past_the_write_behind_bound_streams_through_a_handle() {
    let up = Up::start(1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = up.admin_client(&rt);
    let total = DIRTY_BYTES_MAX as usize + (5 << 20) + 12345;
    let data = nasd_cluster::pseudo_random(total, 7);
    rt.block_on(async {
        let h = FileHandle::open(&c, "/big", rw(true)).await.unwrap();
        for (i, chunk) in data.chunks(128 << 10).enumerate() {
            h.write_at(i as u64 * (128 << 10), chunk).await.unwrap();
        }
        // Past the bound the bytes were sent; nothing is visible before close.
        assert!(c.stat("/big").await.is_err(), "visible before close");
        h.close().await.unwrap();
        let r = FileHandle::open(&c, "/big", OpenOptions::default())
            .await
            .unwrap();
        let mut back = Vec::with_capacity(total);
        while (back.len() as u64) < r.size().await {
            back.extend(r.read_at(back.len() as u64, 128 << 10).await.unwrap());
        }
        assert!(back == data, "{} bytes back of {total}", back.len());
    });
}
