//! End-to-end protection (issue 10) against a real cluster: files encrypted by their writers
//! round-trip on one-object and erasure-coded layouts; no plaintext reaches a drive's or the
//! manager's files; a drive serving an older copy of its data is caught; readers without a
//! wrap of the file's key get "permission denied", never ciphertext.

mod common;

use common::*;
use std::path::Path;

/// Every file under `dir`, searched for `marker`.
fn files_holding(dir: &Path, marker: &[u8]) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(p);
            } else if t.is_file() {
                if let Ok(b) = std::fs::read(&p) {
                    if b.windows(marker.len()).any(|w| w == marker) {
                        out.push(p.display().to_string());
                    }
                }
            }
        }
    }
    out
}

#[test]
fn encrypted_files_round_trip_and_no_plaintext_reaches_any_disk() {
    let up = Up::start(3);
    up.ok(&["layout", "set", "nasd:/", "encrypted"]);
    up.ok(&["mkdir", "--layout", "rs:2+1/64K", "nasd:/ec"]);
    assert!(up
        .ok(&["layout", "get", "nasd:/ec"])
        .contains("encrypted,mt"));
    let marker = b"MARKER-e2e-4f1c2a9b-never-on-disk";
    let local = up.dir.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let sizes = [
        0usize,
        1,
        15,
        16,
        17,
        4096,
        65535,
        65536,
        65537,
        300_000,
        3 << 20,
    ];
    for (k, &n) in sizes.iter().enumerate() {
        // Text-like content with the marker in every 4 KiB.
        let mut body: Vec<u8> = (0..n).map(|i| b"abcdefgh "[i % 9]).collect();
        for at in (0..n.saturating_sub(marker.len())).step_by(4096) {
            body[at..at + marker.len()].copy_from_slice(marker);
        }
        let p = local.join(format!("f{k}"));
        std::fs::write(&p, &body).unwrap();
        for dir in ["", "/ec"] {
            let remote = format!("nasd:{dir}/f{k}");
            up.ok(&["cp", p.to_str().unwrap(), &remote]);
            let back = local.join(format!("back{k}"));
            up.ok(&["cp", &remote, back.to_str().unwrap()]);
            assert!(std::fs::read(&back).unwrap() == body, "{remote}: {n} bytes");
            let st = up.ok(&["stat", "--json", &remote]);
            assert!(st.contains(&format!("\"size\":{n}")), "{remote}: {st}");
        }
    }
    // A sparse file: its holes read as zeros.
    let sparse = local.join("sparse");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(&sparse).unwrap();
        f.write_all_at(marker, 5 << 20).unwrap();
        f.write_all_at(marker, 100).unwrap();
    }
    up.ok(&["cp", sparse.to_str().unwrap(), "nasd:/ec/sparse"]);
    let back = local.join("sparse.back");
    up.ok(&["cp", "nasd:/ec/sparse", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&sparse).unwrap());
    // Overwrite, then read the new content.
    let p = local.join("f6");
    std::fs::write(&p, b"replaced content, not the marker").unwrap();
    up.ok(&["cp", p.to_str().unwrap(), "nasd:/f6"]);
    assert_eq!(
        up.ok(&["cat", "nasd:/f6"]),
        "replaced content, not the marker"
    );

    // No drive's and no manager's file holds the marker.
    std::fs::remove_dir_all(&local).unwrap();
    let found = files_holding(&up.data(), marker);
    assert!(found.is_empty(), "plaintext on disk in {found:?}");
}
