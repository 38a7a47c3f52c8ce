//! `IsRand`: RAND-EINT's test of whether a block looks random (requirements B.3; seed 003).
//!
//! `Ĥ(B) = −Σ_v (n_v/b)·log2(n_v/b)` is the empirical entropy of block `B`'s byte histogram, in
//! bits per byte (0 to 8). A block is *random-looking* iff `Ĥ ≥ τ`. RAND-EINT keeps a Merkle leaf
//! only for random-looking blocks and accepts any other block without one: a drive that modifies,
//! moves or replays a ciphertext block makes it decrypt, under HCTR2 with the block's tweak, to
//! bytes indistinguishable from uniform, and succeeds only if those bytes *fail* the test. So the
//! forgery probability per attempt is `P[Ĥ(U_b) < τ]` for a uniform block `U_b` (plus HCTR2's
//! distinguishing advantage). Seed 003 §7.3: RAND-EINT "is only suitable in a setting in which data
//! is encrypted with a tweakable cipher, as the integrity guarantees of this algorithm are based on
//! the security properties of such ciphers".
//!
//! # Choosing τ (the paper's own τ is [R], unverified: only the end of the paper is in `seeds/`)
//!
//! Entropy and divergence from uniform are tied exactly: `Ĥ = 8 − D(p̂ ‖ U)` with `D` in bits. So
//! `Ĥ < τ` iff `D(p̂ ‖ U) > 8 − τ = ε`. By the method of types (Sanov's theorem with its
//! finite-sample bound, Cover & Thomas, *Elements of Information Theory*, Thm 11.4.1), for `b`
//! bytes over an alphabet of 256:
//!
//! ```text
//! P[D(p̂ ‖ U) ≥ ε] ≤ (b + 1)^256 · 2^(−b·ε)
//! ```
//!
//! Requiring this to be at most `2^−λ` gives `ε = (256·log2(b + 1) + λ) / b` and
//! `τ = 8 − ε`. With λ = [`FORGERY_LOG2_MAX`] = 64:
//!
//! | block bytes | τ (bits/byte) | mean Ĥ of a uniform block |
//! |---|---|---|
//! | 1024 | 5.437 | 7.82 |
//! | 4096 | 7.234 | 7.955 |
//! | 65536 | 7.936 | 7.997 |
//!
//! The bound is loose (the true tail at 4 KiB, from the χ²₂₅₅ approximation of `2b·ln2·D`, puts
//! the 2^−64 quantile near 7.91), which only costs efficiency: blocks between τ and the true
//! quantile get leaves they might not need. Text, source and most binaries sit far below τ
//! (typically 4–6.5 bits/byte); compressed data and images sit above 7.9 and get leaves, which is
//! the behaviour seed 003's Fig 9 measures for high-entropy files. `tests::false_negative_rate`
//! checks the statistic's distribution empirically at a weaker level (2^−10).
//!
//! The test is floating point. So that a reader never demands a leaf the writer did not make
//! (rounding on two machines), the writer stores a leaf already from `τ − WRITER_MARGIN_BITS`,
//! while the reader demands one only from `τ`; the forgery bound uses the reader's `τ`.
//! A block shorter than `block_bytes` (a file's tail) is always treated as random-looking: the
//! bound above does not hold for it, and one leaf per file costs little.

/// λ: a uniformly random block fails `IsRand` with probability at most 2^−λ.
pub const FORGERY_LOG2_MAX: u32 = 64;
/// Bits/byte by which the writer's threshold undercuts the reader's (see the module docs).
pub const WRITER_MARGIN_BITS: f64 = 1e-6;
/// Alphabet size: bytes.
const SYMBOLS: f64 = 256.0;

/// Empirical entropy of `data`'s byte histogram in bits per byte; 0 for empty input.
pub fn entropy_bits_per_byte(data: &[u8]) -> f64 {
    if data.is_empty() {
        return 0.0;
    }
    // Four interleaved histograms avoid serialising on repeated bytes.
    let mut h = [[0u32; 256]; 4];
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        h[0][c[0] as usize] += 1;
        h[1][c[1] as usize] += 1;
        h[2][c[2] as usize] += 1;
        h[3][c[3] as usize] += 1;
    }
    for &b in chunks.remainder() {
        h[0][b as usize] += 1;
    }
    let n = data.len() as f64;
    let mut sum_n_log_n = 0.0;
    for (((a, b), c), d) in h[0].iter().zip(&h[1]).zip(&h[2]).zip(&h[3]) {
        let count = a + b + c + d;
        if count > 0 {
            let count = f64::from(count);
            sum_n_log_n += count * count.log2();
        }
    }
    n.log2() - sum_n_log_n / n
}

/// τ for `block_bytes`-byte blocks so that a uniform block has `Ĥ < τ` with probability at most
/// `2^−log2_prob` (method-of-types bound; module docs).
pub fn tau_bits(block_bytes: u32, log2_prob: u32) -> f64 {
    let b = f64::from(block_bytes);
    8.0 - (SYMBOLS * (b + 1.0).log2() + f64::from(log2_prob)) / b
}

/// `IsRand` for one block size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EntropyTest {
    block_bytes: u32,
    tau: f64,
}

impl EntropyTest {
    /// The test for `block_bytes`-byte blocks at λ = [`FORGERY_LOG2_MAX`].
    pub fn new(block_bytes: u32) -> EntropyTest {
        let tau = tau_bits(block_bytes, FORGERY_LOG2_MAX);
        // τ must leave room below a uniform block's mean entropy, or every block needs a leaf.
        assert!(tau > 0.0 && tau < 8.0, "block size too small for IsRand");
        EntropyTest { block_bytes, tau }
    }

    pub fn tau(&self) -> f64 {
        self.tau
    }

    /// The reader's `IsRand`: random-looking blocks must carry a verified leaf.
    pub fn is_random_looking(&self, block: &[u8]) -> bool {
        block.len() != self.block_bytes as usize || entropy_bits_per_byte(block) >= self.tau
    }

    /// The writer's `IsRand`, slightly more eager than the reader's so float rounding never
    /// leaves a block the reader deems random-looking without a leaf.
    pub fn writer_is_random_looking(&self, block: &[u8]) -> bool {
        block.len() != self.block_bytes as usize
            || entropy_bits_per_byte(block) >= self.tau - WRITER_MARGIN_BITS
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Deterministic pseudo-random bytes (BLAKE3 in XOF mode), for reproducible tests.
    pub(crate) fn prng_bytes(seed: u64, out: &mut [u8]) {
        let mut h = blake3::Hasher::new();
        h.update(b"nasd-e2e test prng");
        h.update(&seed.to_le_bytes());
        h.finalize_xof().fill(out);
    }

    /// Text-like bytes: words from a small vocabulary, as low-entropy data.
    pub(crate) fn text_bytes(seed: u64, len: usize) -> Vec<u8> {
        const WORDS: [&str; 16] = [
            "the",
            "drive",
            "object",
            "capability",
            "manager",
            "client",
            "block",
            "integrity",
            "of",
            "and",
            "to",
            "a",
            "network",
            "attached",
            "secure",
            "storage",
        ];
        let mut r = vec![0u8; len];
        prng_bytes(seed, &mut r);
        let mut out = Vec::with_capacity(len + 16);
        let mut k = 0;
        while out.len() < len {
            out.extend_from_slice(WORDS[(r[k % len] % 16) as usize].as_bytes());
            out.push(if r[(k + 7) % len].is_multiple_of(11) {
                b'\n'
            } else {
                b' '
            });
            k += 1;
        }
        out.truncate(len);
        out
    }

    #[test]
    fn entropy_of_known_inputs() {
        assert_eq!(entropy_bits_per_byte(&[]), 0.0);
        assert_eq!(entropy_bits_per_byte(&[7; 4096]), 0.0);
        let all: Vec<u8> = (0..=255u8).collect();
        assert!((entropy_bits_per_byte(&all) - 8.0).abs() < 1e-12);
        let two: Vec<u8> = (0..4096).map(|i| (i % 2) as u8).collect();
        assert!((entropy_bits_per_byte(&two) - 1.0).abs() < 1e-12);
        let text = text_bytes(1, 4096);
        let h = entropy_bits_per_byte(&text);
        assert!(h > 2.0 && h < 5.0, "text-like entropy {h}");
    }

    #[test]
    fn tau_follows_the_types_bound() {
        let t = tau_bits(4096, 64);
        assert!((t - 7.2344).abs() < 1e-3, "{t}");
        assert!((tau_bits(1024, 64) - 5.437).abs() < 1e-2);
        assert!((tau_bits(65536, 64) - 7.9365).abs() < 1e-3);
        // Check the bound itself: (b+1)^256 · 2^(−b(8−τ)) = 2^−64.
        let b = 4096.0f64;
        let log2_p = 256.0 * (b + 1.0).log2() - b * (8.0 - t);
        assert!((log2_p + 64.0).abs() < 1e-6);
        let test = EntropyTest::new(4096);
        assert!(!test.is_random_looking(&text_bytes(2, 4096)));
        assert!(
            test.is_random_looking(&text_bytes(2, 100)),
            "tails need leaves"
        );
    }

    /// `2b·ln2·(8 − Ĥ)` of a uniform block is approximately χ² with 255 degrees of freedom. At a
    /// weaker level than the design's 2^−64, compare the empirical rate of `Ĥ < τ_w` with the
    /// rate that approximation predicts (2^−10), and check that no block comes near the real τ.
    #[test]
    fn false_negative_rate() {
        const BLOCK: usize = 4096;
        const SAMPLES: usize = 20_000;
        let df = 255.0f64;
        // Wilson–Hilferty quantile of χ²_255 at upper tail 2^−10 (z = 3.0972).
        let z = 3.0972f64;
        let a = 2.0 / (9.0 * df);
        let x = df * (1.0 - a + z * a.sqrt()).powi(3);
        let scale = 2.0 * BLOCK as f64 * std::f64::consts::LN_2;
        let tau_weak = 8.0 - x / scale;
        let test = EntropyTest::new(BLOCK as u32);
        let mut buf = vec![0u8; BLOCK * 64];
        let (mut below_weak, mut min_h, mut sum, mut sum_sq) = (0usize, 8.0f64, 0.0, 0.0);
        for s in 0..SAMPLES / 64 {
            prng_bytes(1000 + s as u64, &mut buf);
            for block in buf.chunks(BLOCK) {
                let h = entropy_bits_per_byte(block);
                below_weak += usize::from(h < tau_weak);
                min_h = min_h.min(h);
                sum += h;
                sum_sq += h * h;
                assert!(test.is_random_looking(block));
            }
        }
        let n = (SAMPLES / 64 * 64) as f64;
        let mean = sum / n;
        let sd = (sum_sq / n - mean * mean).sqrt();
        // Theory (Harris 1975's expansion of the plug-in entropy's bias, to second order):
        // mean 8 − 255/(2b·ln2) − (256² − 1)/(12b²·ln2); sd sqrt(2·255)/(2b·ln2).
        let b = BLOCK as f64;
        let theory =
            8.0 - df / scale - (256.0 * 256.0 - 1.0) / (12.0 * b * b * std::f64::consts::LN_2);
        assert!((mean - theory).abs() < 1e-4, "mean {mean}, theory {theory}");
        assert!(
            (sd / ((2.0 * df).sqrt() / scale) - 1.0).abs() < 0.1,
            "sd {sd}"
        );
        let expected = n / 1024.0;
        eprintln!(
            "IsRand at 4 KiB: {below_weak} of {n} uniform blocks below τ_w = {tau_weak:.5} \
             (χ² predicts {expected:.1}); mean Ĥ {mean:.6}, sd {sd:.6}, min {min_h:.5}, τ {:.5}",
            test.tau()
        );
        assert!(
            (below_weak as f64) < 2.5 * expected && (below_weak as f64) > expected / 4.0,
            "{below_weak} of {n} below τ_w = {tau_weak:.5}, expected about {expected:.1}"
        );
        assert!(
            min_h - test.tau() > 0.6,
            "closest approach {min_h} to τ {}",
            test.tau()
        );
    }
}
