//! Known-answer vectors of the codes and the layout byte form, kept in `tests/vectors/ec.json`
//! at the repository root. `NASD_WRITE_VECTORS=1 cargo test -p nasd-ec --test vectors` rewrites
//! the file (only when a format change is intended). The parity values were cross-checked once
//! against an independent Python implementation of GF(2^8)/0x11D and the formulas of docs/ec.md.

use std::collections::BTreeMap;

use nasd_ec::kernel::{affine_matrix, Path};
use nasd_ec::layout::Layout;
use nasd_ec::raid6x::Raid6x;
use nasd_ec::rs::{cauchy_matrix, ReedSolomon};
use nasd_ec::{gf, locate};

/// Data unit i of a vector stripe: byte b is `(i * 16 + b) * 7 + 1` (mod 256).
fn unit(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|b| ((i * 16 + b) * 7 + 1) as u8).collect()
}

fn rs_parity(k: usize, m: usize, len: usize, path: Path) -> Vec<String> {
    let code = ReedSolomon::new(k, m).unwrap().with_path(path).unwrap();
    let data: Vec<Vec<u8>> = (0..k).map(|i| unit(i, len)).collect();
    let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut parity = vec![vec![0u8; len]; m];
    let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
    code.encode(&d, &mut p).unwrap();
    parity.iter().map(hex::encode).collect()
}

fn raid6x_parity(k: usize, len: usize, path: Path) -> Vec<String> {
    let code = Raid6x::new(k).unwrap().with_path(path).unwrap();
    let data: Vec<Vec<u8>> = (0..2 * k).map(|i| unit(i, len)).collect();
    let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut parity = vec![vec![0u8; len]; 4];
    let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
    code.encode(&d, &mut p).unwrap();
    parity.iter().map(hex::encode).collect()
}

fn compute(path: Path) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    v.insert(
        "gf/mul(0x53,0xca),mul(2,0x80),inv(2),inv(0x53)".into(),
        hex::encode([
            gf::mul(0x53, 0xCA),
            gf::mul(2, 0x80),
            gf::inv(2),
            gf::inv(0x53),
        ]),
    );
    v.insert(
        "gf/exp(0..16)".into(),
        hex::encode((0..16).map(gf::exp).collect::<Vec<u8>>()),
    );
    v.insert(
        "gfni/affine_matrix(2),(0x1d),(0x8e)".into(),
        [2u8, 0x1D, 0x8E]
            .iter()
            .map(|&c| format!("{:016x}", affine_matrix(c)))
            .collect::<Vec<_>>()
            .join(" "),
    );
    v.insert(
        "rs/cauchy(4+2)".into(),
        hex::encode(cauchy_matrix(4, 2).cells()),
    );
    v.insert(
        "rs/cauchy(10+4)".into(),
        hex::encode(cauchy_matrix(10, 4).cells()),
    );
    for (k, m, len) in [(4, 2, 16), (8, 3, 8), (10, 4, 8), (12, 4, 5)] {
        for (i, p) in rs_parity(k, m, len, path).into_iter().enumerate() {
            v.insert(format!("rs/{k}+{m}/parity{i}({len} B)"), p);
        }
    }
    for (k, len) in [(3, 16), (12, 8), (42, 4)] {
        for (name, p) in ["P", "Q", "R", "S"].iter().zip(raid6x_parity(k, len, path)) {
            v.insert(format!("raid6x/{k}/{name}({len} B)"), p);
        }
    }
    v.insert(
        "raid6x/locate_one(k=12, Δ=3·h_17)".into(),
        format!(
            "{:?}",
            locate::locate_one(24, {
                let h = locate::column(24, 17);
                h.map(|x| gf::mul(x, 3))
            })
        ),
    );
    for text in [
        "single",
        "raid0:4",
        "raid0:4/64K",
        "mirror:3",
        "rs:4+2",
        "rs:12+4/1M",
        "raid6x:8",
        "raid6x:42/4K",
    ] {
        let layout: Layout = text.parse().unwrap();
        v.insert(format!("layout/{text}"), hex::encode(layout.encode()));
    }
    v
}

#[test]
fn known_answers_on_every_path() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/ec.json");
    let got = compute(Path::Portable);
    if std::env::var("NASD_WRITE_VECTORS").is_ok() {
        std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
    }
    let want: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("vectors file")).unwrap();
    for p in Path::supported() {
        let got = compute(p);
        assert_eq!(got.len(), want.len(), "vector set changed");
        for (k, w) in &want {
            assert_eq!(got.get(k), Some(w), "known answer {k} on {p}");
        }
    }
}
