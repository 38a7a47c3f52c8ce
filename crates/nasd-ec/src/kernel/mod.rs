//! The region kernels every code runs on: "multiply a region by a constant and XOR it into
//! another" ([`mul_xor`]) and the fused dot product of N source regions with a coefficient
//! matrix ([`dot`]), which encode, decode and parity checks all reduce to.
//!
//! Three paths compute the same bytes:
//!
//! - [`Path::Avx512Gfni`]: 64 bytes at a time with `vgf2p8affineqb`, whose 8x8 bit matrix per
//!   constant encodes "multiply by c" for any polynomial (the instruction's own multiply,
//!   `vgf2p8mulb`, is fixed to AES's 0x11B and cannot serve 0x11D);
//! - [`Path::Avx2`]: 32 bytes at a time, split-nibble `vpshufb` lookups (ISA-L's and Linux
//!   RAID 6's method), two 16-entry tables per constant;
//! - [`Path::Portable`]: one lookup in the 64 KiB product table per byte.
//!
//! The path is chosen at run time ([`Path::best`]); `NASD_EC_PATH=portable|avx2|avx512-gfni`
//! or [`force_path`] overrides it for the whole process, and each codec can be pinned to one
//! path (`with_path`) so tests and benchmarks exercise every path on one machine.
//!
//! A fused dot keeps up to [`ROWS_PER_PASS`] output rows in registers and reads each source
//! once per pass, so encoding K+M with M <= 4 reads the data exactly once and writes each parity
//! exactly once. Regions may have any length: the SIMD paths finish with masked (AVX-512) or
//! portable (AVX2) tails.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::gf;

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_gfni;

/// Output rows a SIMD pass keeps in registers; more rows take more passes over the sources.
pub const ROWS_PER_PASS: usize = 4;

/// Environment variable that forces a kernel path for the process.
pub const PATH_ENV: &str = "NASD_EC_PATH";

/// Smallest region length, bytes, worth splitting across threads in the `_par` functions.
pub const PARALLEL_MIN_BYTES: usize = 64 * 1024;
/// Length of the pieces, bytes, that threads take in the `_par` functions: small enough that a
/// piece of every source and output fits in a core's L2 (12+4 shards x 32 KiB = 512 KiB), large
/// enough that scheduling is noise.
pub const PARALLEL_PIECE_BYTES: usize = 32 * 1024;
const _: () =
    assert!(PARALLEL_PIECE_BYTES.is_multiple_of(64) && PARALLEL_MIN_BYTES >= PARALLEL_PIECE_BYTES);

/// One implementation of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// Table lookups, any CPU.
    Portable,
    /// Split-nibble `vpshufb`, x86-64 with AVX2.
    Avx2,
    /// `vgf2p8affineqb` on 512-bit vectors, x86-64 with AVX-512 F/BW and GFNI.
    Avx512Gfni,
}

impl Path {
    /// Every path, slowest first.
    pub const ALL: [Path; 3] = [Path::Portable, Path::Avx2, Path::Avx512Gfni];

    /// The name used by `NASD_EC_PATH`, the bench's `path` field and [`std::str::FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            Path::Portable => "portable",
            Path::Avx2 => "avx2",
            Path::Avx512Gfni => "avx512-gfni",
        }
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            Path::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Path::Avx512Gfni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest path this CPU supports.
    pub fn best() -> Path {
        *Path::ALL
            .iter()
            .rev()
            .find(|p| p.is_supported())
            .unwrap_or(&Path::Portable)
    }

    /// The paths this CPU supports, slowest first.
    pub fn supported() -> Vec<Path> {
        Path::ALL.into_iter().filter(|p| p.is_supported()).collect()
    }

    /// The path codecs use unless pinned: [`force_path`]'s, else `NASD_EC_PATH`'s (if this CPU
    /// supports it), else [`Path::best`].
    pub fn active() -> Path {
        match FORCED.load(Ordering::Relaxed) {
            0 => *ENV_OR_BEST.get_or_init(|| env_path().ok().flatten().unwrap_or_else(Path::best)),
            code => Path::from_code(code),
        }
    }

    fn code(self) -> u8 {
        match self {
            Path::Portable => 1,
            Path::Avx2 => 2,
            Path::Avx512Gfni => 3,
        }
    }

    fn from_code(code: u8) -> Path {
        match code {
            2 => Path::Avx2,
            3 => Path::Avx512Gfni,
            _ => Path::Portable,
        }
    }
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A path name that is not one of [`Path::ALL`], or a path this CPU cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not a path name.
    #[error("unknown kernel path {0:?} (expected portable, avx2 or avx512-gfni)")]
    Unknown(String),
    /// The CPU lacks the instructions.
    #[error("this CPU cannot run the {0} kernel path")]
    Unsupported(Path),
}

impl std::str::FromStr for Path {
    type Err = PathError;
    fn from_str(s: &str) -> Result<Path, PathError> {
        Path::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| PathError::Unknown(s.to_string()))
    }
}

/// 0: not forced; otherwise [`Path::code`].
static FORCED: AtomicU8 = AtomicU8::new(0);
static ENV_OR_BEST: OnceLock<Path> = OnceLock::new();

/// Forces `path` for every codec not pinned to a path (`None` returns to automatic choice).
pub fn force_path(path: Option<Path>) -> Result<(), PathError> {
    match path {
        Some(p) if !p.is_supported() => Err(PathError::Unsupported(p)),
        Some(p) => {
            FORCED.store(p.code(), Ordering::Relaxed);
            Ok(())
        }
        None => {
            FORCED.store(0, Ordering::Relaxed);
            Ok(())
        }
    }
}

/// The path named by `NASD_EC_PATH`, if set: an error if it is unknown or unsupported here.
pub fn env_path() -> Result<Option<Path>, PathError> {
    let Ok(name) = std::env::var(PATH_ENV) else {
        return Ok(None);
    };
    let p: Path = name.trim().parse()?;
    if p.is_supported() {
        Ok(Some(p))
    } else {
        Err(PathError::Unsupported(p))
    }
}

/// A coefficient matrix prepared for every path: the bytes (portable), one GFNI bit matrix per
/// coefficient, and the two split-nibble tables per coefficient. Built once per code or decode
/// pattern, then shared.
#[derive(Clone, Debug)]
pub struct Coeffs {
    rows: usize,
    cols: usize,
    bytes: Vec<u8>,
    affine: Vec<u64>,
    nibbles: Vec<NibbleTables>,
}

/// `lo[x] = c·x` and `hi[x] = c·(x << 4)` for x < 16, each repeated in both 128-bit lanes so an
/// AVX2 `vpshufb` uses it as is.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub struct NibbleTables {
    lo: [u8; 32],
    hi: [u8; 32],
}

impl NibbleTables {
    fn new(c: u8) -> Self {
        let mut t = NibbleTables {
            lo: [0; 32],
            hi: [0; 32],
        };
        for x in 0..16u8 {
            for lane in [0, 16] {
                t.lo[lane + x as usize] = gf::mul(c, x);
                t.hi[lane + x as usize] = gf::mul(c, x << 4);
            }
        }
        t
    }
}

/// The 8x8 bit matrix that makes `vgf2p8affineqb` multiply each byte by `c`.
///
/// The instruction computes output bit i of a byte x as the parity of (x AND matrix byte 7-i).
/// Multiplication by c is linear over GF(2): x·c = XOR over set bits j of x of c·2^j, so output
/// bit i has x's bit j in its row exactly when bit i of c·2^j is set.
pub fn affine_matrix(c: u8) -> u64 {
    let mut m = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for j in 0..8 {
            if gf::mul(c, 1 << j) & (1 << i) != 0 {
                row |= 1 << j;
            }
        }
        m |= (row as u64) << (8 * (7 - i));
    }
    m
}

impl Coeffs {
    /// Prepares a `rows x cols` matrix given row-major.
    pub fn new(rows: usize, cols: usize, bytes: Vec<u8>) -> Self {
        assert_eq!(bytes.len(), rows * cols, "coefficient matrix shape");
        Coeffs {
            rows,
            cols,
            affine: bytes.iter().map(|&c| affine_matrix(c)).collect(),
            nibbles: bytes.iter().map(|&c| NibbleTables::new(c)).collect(),
            bytes,
        }
    }

    /// Prepares a [`gf::Matrix`].
    pub fn from_matrix(m: &gf::Matrix) -> Self {
        Coeffs::new(m.rows(), m.cols(), m.cells().to_vec())
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Source columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Coefficient (r, c).
    pub fn get(&self, r: usize, c: usize) -> u8 {
        self.bytes[r * self.cols + c]
    }

    /// The coefficients, row-major.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// `dsts[r] = XOR over i of coeffs(r, i) · srcs[i]` (or `^=` with `accumulate`), on `path`.
///
/// # Panics
/// If the shapes disagree (`srcs.len() != coeffs.cols()`, `dsts.len() != coeffs.rows()`, regions
/// of different lengths) or `path` is not supported on this CPU: programmer errors, which the
/// codecs check before calling.
pub fn dot(path: Path, coeffs: &Coeffs, srcs: &[&[u8]], dsts: &mut [&mut [u8]], accumulate: bool) {
    assert_eq!(srcs.len(), coeffs.cols, "one source per coefficient column");
    assert_eq!(dsts.len(), coeffs.rows, "one output per coefficient row");
    let len = dsts.first().map_or(0, |d| d.len());
    assert!(
        srcs.iter().all(|s| s.len() == len) && dsts.iter().all(|d| d.len() == len),
        "regions of one dot product have one length"
    );
    assert!(path.is_supported(), "kernel path {path} unsupported here");
    if len == 0 || coeffs.rows == 0 {
        return;
    }
    if coeffs.cols == 0 {
        if !accumulate {
            dsts.iter_mut().for_each(|d| d.fill(0));
        }
        return;
    }
    match path {
        Path::Portable => portable::dot(coeffs, srcs, dsts, accumulate),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the path is supported (asserted above), so the CPU has AVX2; every region
        // has length `len` (asserted above).
        Path::Avx2 => unsafe { x86_avx2::dot(coeffs, srcs, dsts, len, accumulate) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the path is supported (asserted above), so the CPU has AVX-512 F/BW and
        // GFNI; every region has length `len` (asserted above).
        Path::Avx512Gfni => unsafe { x86_gfni::dot(coeffs, srcs, dsts, len, accumulate) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("only the portable path is supported off x86-64"),
    }
}

/// [`dot`] with the regions split into [`PARALLEL_PIECE_BYTES`] pieces that rayon's current
/// pool computes in parallel (block-level parallelism); regions shorter than
/// [`PARALLEL_MIN_BYTES`] run on the calling thread.
pub fn dot_par(
    path: Path,
    coeffs: &Coeffs,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
    accumulate: bool,
) {
    let len = dsts.first().map_or(0, |d| d.len());
    if len < PARALLEL_MIN_BYTES || rayon::current_num_threads() < 2 {
        return dot(path, coeffs, srcs, dsts, accumulate);
    }
    for_each_piece(srcs, dsts, PARALLEL_PIECE_BYTES, |s, d| {
        dot(path, coeffs, s, d, accumulate)
    });
}

/// Splits every source and output into pieces of `piece` bytes at the same offsets and runs
/// `f` on each piece's sources and outputs on rayon's current pool.
pub fn for_each_piece<F>(srcs: &[&[u8]], dsts: &mut [&mut [u8]], piece: usize, f: F)
where
    F: Fn(&[&[u8]], &mut [&mut [u8]]) + Sync,
{
    use rayon::prelude::*;
    let len = dsts.first().map_or(0, |d| d.len());
    let pieces = len.div_ceil(piece);
    let mut outs: Vec<Vec<&mut [u8]>> = (0..pieces).map(|_| Vec::new()).collect();
    for d in dsts.iter_mut() {
        for (i, chunk) in d.chunks_mut(piece).enumerate() {
            outs[i].push(chunk);
        }
    }
    outs.into_par_iter().enumerate().for_each(|(i, mut out)| {
        let start = i * piece;
        let end = (start + piece).min(len);
        let ins: Vec<&[u8]> = srcs.iter().map(|s| &s[start..end]).collect();
        f(&ins, &mut out);
    });
}

/// `dst ^= c · src` on `path`.
pub fn mul_xor(path: Path, c: u8, src: &[u8], dst: &mut [u8]) {
    let coeffs = Coeffs::new(1, 1, vec![c]);
    dot(path, &coeffs, &[src], &mut [dst], true);
}

/// `dst = c · src` on `path`.
pub fn mul(path: Path, c: u8, src: &[u8], dst: &mut [u8]) {
    let coeffs = Coeffs::new(1, 1, vec![c]);
    dot(path, &coeffs, &[src], &mut [dst], false);
}

/// The naive definition of [`dot`], byte by byte with [`gf::mul_slow`]: the tests' oracle.
pub fn dot_oracle(coeffs: &Coeffs, srcs: &[&[u8]], dsts: &mut [&mut [u8]], accumulate: bool) {
    for (r, dst) in dsts.iter_mut().enumerate() {
        for (b, out) in dst.iter_mut().enumerate() {
            let mut acc = if accumulate { *out } else { 0 };
            for (i, src) in srcs.iter().enumerate() {
                acc ^= gf::mul_slow(coeffs.get(r, i), src[b]);
            }
            *out = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn affine_matrix_multiplies() {
        // Model vgf2p8affineqb bit by bit and check it against the field for every c and x.
        for c in 0..=255u8 {
            let m = affine_matrix(c);
            for x in 0..=255u8 {
                let mut y = 0u8;
                for i in 0..8 {
                    let row = (m >> (8 * (7 - i))) as u8;
                    y |= (((row & x).count_ones() & 1) as u8) << i;
                }
                assert_eq!(y, gf::mul(c, x), "c={c} x={x}");
            }
        }
    }

    fn check_all_paths(rows: usize, cols: usize, coeffs: Vec<u8>, len: usize, seed: u64) {
        let coeffs = Coeffs::new(rows, cols, coeffs);
        let srcs: Vec<Vec<u8>> = (0..cols)
            .map(|i| {
                (0..len)
                    .map(|b| (seed as usize ^ (i * 131 + b * 7 + b / 3)) as u8)
                    .collect()
            })
            .collect();
        let src_refs: Vec<&[u8]> = srcs.iter().map(|s| s.as_slice()).collect();
        let init: Vec<Vec<u8>> = (0..rows)
            .map(|r| (0..len).map(|b| (r * 17 + b * 5) as u8).collect())
            .collect();
        for accumulate in [false, true] {
            let mut want = init.clone();
            {
                let mut w: Vec<&mut [u8]> = want.iter_mut().map(|v| v.as_mut_slice()).collect();
                dot_oracle(&coeffs, &src_refs, &mut w, accumulate);
            }
            for path in Path::supported() {
                let mut got = init.clone();
                let mut g: Vec<&mut [u8]> = got.iter_mut().map(|v| v.as_mut_slice()).collect();
                dot(path, &coeffs, &src_refs, &mut g, accumulate);
                assert_eq!(
                    got, want,
                    "{path} rows={rows} cols={cols} len={len} acc={accumulate}"
                );
                let mut par = init.clone();
                let mut p: Vec<&mut [u8]> = par.iter_mut().map(|v| v.as_mut_slice()).collect();
                dot_par(path, &coeffs, &src_refs, &mut p, accumulate);
                assert_eq!(par, want, "{path} parallel");
            }
        }
    }

    #[test]
    fn every_path_equals_the_oracle_on_edge_lengths() {
        for len in [
            0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000,
        ] {
            check_all_paths(3, 5, (0..15).map(|i| (i * 37 + 1) as u8).collect(), len, 9);
            check_all_paths(6, 2, vec![0, 1, 2, 3, 255, 0x8e, 7, 9, 0, 0, 1, 1], len, 3);
        }
    }

    #[test]
    fn every_path_equals_the_oracle_across_pieces() {
        let len = PARALLEL_MIN_BYTES * 2 + 77;
        check_all_paths(4, 4, (0..16).map(|i| (i * 11 + 3) as u8).collect(), len, 5);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn every_path_equals_the_oracle(
            rows in 1usize..7,
            cols in 1usize..9,
            len in 0usize..700,
            seed in any::<u64>(),
            coeffs in proptest::collection::vec(any::<u8>(), 64),
        ) {
            check_all_paths(rows, cols, coeffs[..rows * cols].to_vec(), len, seed);
        }

        #[test]
        fn mul_xor_matches_the_field(c in any::<u8>(), src in proptest::collection::vec(any::<u8>(), 0..300)) {
            for path in Path::supported() {
                let mut dst: Vec<u8> = src.iter().map(|b| b.wrapping_mul(3)).collect();
                let want: Vec<u8> = src.iter().zip(&dst).map(|(&s, &d)| d ^ gf::mul_slow(c, s)).collect();
                mul_xor(path, c, &src, &mut dst);
                prop_assert_eq!(&dst, &want);
                mul(path, c, &src, &mut dst);
                let want: Vec<u8> = src.iter().map(|&s| gf::mul_slow(c, s)).collect();
                prop_assert_eq!(&dst, &want);
            }
        }
    }

    #[test]
    fn path_names_round_trip() {
        for p in Path::ALL {
            assert_eq!(p.name().parse::<Path>(), Ok(p));
        }
        assert!("sse9".parse::<Path>().is_err());
        assert!(Path::best().is_supported());
    }
}
