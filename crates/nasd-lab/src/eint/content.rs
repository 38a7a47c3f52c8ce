//! Block contents for the EINT experiment and how they classify.
//!
//! Seed 003 §7 measured "low-entropy files (text, source and binaries from a Linux distribution)"
//! and "high-entropy files (image and compressed files)" (Fig 9's caption; the low-entropy panel
//! is not in the seed fragment). We synthesize both, deterministically per seed:
//!
//! - [`Kind::Text`]: English-like prose (Zipf-weighted words, sentences, wrapped lines);
//! - [`Kind::Source`]: code-like lines (indentation, keywords, identifiers, numbers, comments);
//! - [`Kind::Binary`]: executable-like bytes (skewed opcode bytes, zero padding, little-endian
//!   tables of small integers, NUL-terminated symbol names);
//! - [`Kind::Random`]: uniform bytes, standing for encrypted data and the entropy-coded bodies of
//!   images and media;
//! - [`Kind::Compressed`]: real deflate streams (level 6, as `gzip` defaults to) of generated text.
//!
//! Each kind is generated once per run as a [`POOL_BYTES`] stream ([`Pool`]); a file or a block
//! is a sequence of windows of that stream at pseudo-random offsets, so contents are cheap to
//! make outside the timed sections and still differ from block to block.
//!
//! [`Census`] classifies blocks with nasd-e2e's own decisions: `IsRand`
//! ([`nasd_e2e::entropy::EntropyTest`]) and whether COMP-EINT's frame fits
//! ([`nasd_e2e::eint::comp_fits`]). Whole blocks and tails (a file's short last block) are
//! counted apart: nasd-e2e gives every tail a leaf under RAND-EINT (the entropy bound does not
//! hold for short blocks), and COMP-EINT frames a tail in its own, shorter, length.

use nasd_e2e::entropy::EntropyTest;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// Bytes of each kind's generated stream.
pub const POOL_BYTES: usize = 2 << 20;
/// Largest window taken from a stream at once (nasd-e2e's largest block).
pub const WINDOW_BYTES_MAX: usize = nasd_e2e::block::MAX_BLOCK_BYTES as usize;
/// Deflate level of [`Kind::Compressed`] streams (gzip's default).
const COMPRESSED_LEVEL: u8 = 6;
/// Generated text deflated at once into a [`Kind::Compressed`] stream.
const COMPRESSED_INPUT_BYTES: usize = 256 << 10;

const _: () = assert!(POOL_BYTES >= 4 * WINDOW_BYTES_MAX);

/// What a file or block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Text,
    Source,
    Binary,
    Random,
    Compressed,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Text,
        Kind::Source,
        Kind::Binary,
        Kind::Random,
        Kind::Compressed,
    ];
    /// The low-entropy kinds (seed 003: text, source, binaries).
    pub const LOW: [Kind; 3] = [Kind::Text, Kind::Source, Kind::Binary];
    /// The high-entropy kinds (seed 003 Fig 9: images and compressed files).
    pub const HIGH: [Kind; 2] = [Kind::Random, Kind::Compressed];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Source => "source",
            Kind::Binary => "binary",
            Kind::Random => "random",
            Kind::Compressed => "compressed",
        }
    }

    fn index(self) -> usize {
        Kind::ALL.iter().position(|k| *k == self).expect("in ALL")
    }
}

/// A 64-bit mixer (SplitMix64's finaliser): turns structured keys into window offsets.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// One generated stream per [`Kind`].
#[derive(Debug, Clone)]
pub struct Pool {
    streams: Vec<Vec<u8>>,
}

impl Pool {
    /// The streams for `seed`.
    pub fn new(seed: u64) -> Pool {
        let streams = Kind::ALL
            .iter()
            .map(|k| generate(*k, mix(seed ^ (k.index() as u64 + 1)), POOL_BYTES))
            .collect();
        Pool { streams }
    }

    /// `len` bytes (at most [`WINDOW_BYTES_MAX`]) of `kind`'s stream at an offset chosen by `key`.
    pub fn window(&self, kind: Kind, key: u64, len: usize) -> &[u8] {
        assert!(len <= WINDOW_BYTES_MAX, "window of {len} bytes");
        let s = &self.streams[kind.index()];
        let start = (mix(key) % (s.len() - len) as u64) as usize;
        &s[start..start + len]
    }

    /// `len` bytes of `kind`: windows of [`WINDOW_BYTES_MAX`] bytes keyed from `key`.
    pub fn file(&self, kind: Kind, key: u64, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        let mut piece = 0u64;
        while out.len() < len {
            let n = (len - out.len()).min(WINDOW_BYTES_MAX);
            out.extend_from_slice(self.window(kind, mix(key).wrapping_add(piece), n));
            piece += 1;
        }
        out
    }
}

/// `len` bytes of `kind` from `seed`.
pub fn generate(kind: Kind, seed: u64, len: usize) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(len + 256);
    match kind {
        Kind::Text => {
            while out.len() < len {
                text_sentence(&mut rng, &mut out);
            }
        }
        Kind::Source => {
            let mut depth = 0usize;
            while out.len() < len {
                source_line(&mut rng, &mut out, &mut depth);
            }
        }
        Kind::Binary => {
            while out.len() < len {
                binary_section(&mut rng, &mut out);
            }
        }
        Kind::Random => {
            out.resize(len, 0);
            rng.fill_bytes(&mut out);
        }
        Kind::Compressed => {
            while out.len() < len {
                let text = generate(Kind::Text, rng.next_u64(), COMPRESSED_INPUT_BYTES);
                out.extend(miniz_oxide::deflate::compress_to_vec(
                    &text,
                    COMPRESSED_LEVEL,
                ));
            }
        }
    }
    out.truncate(len);
    out
}

const WORDS: [&str; 64] = [
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "storage",
    "drive",
    "network",
    "file",
    "system",
    "integrity",
    "block",
    "server",
    "client",
    "secure",
    "data",
    "manager",
    "object",
    "attached",
    "disk",
];

/// A Zipf-weighted index below `n` (weights 1/(r+1)), by inversion of its running sum.
fn zipf(rng: &mut SmallRng, n: usize) -> usize {
    let h: f64 = (1..=n).map(|r| 1.0 / r as f64).sum();
    let mut u = rng.random::<f64>() * h;
    for r in 0..n {
        u -= 1.0 / (r + 1) as f64;
        if u <= 0.0 {
            return r;
        }
    }
    n - 1
}

fn text_sentence(rng: &mut SmallRng, out: &mut Vec<u8>) {
    let words = rng.random_range(5..20);
    let mut line = out.iter().rev().take_while(|&&b| b != b'\n').count();
    for w in 0..words {
        let word = WORDS[zipf(rng, WORDS.len())];
        if line + word.len() > 72 {
            out.push(b'\n');
            line = 0;
        } else if w > 0 || line > 0 {
            out.push(b' ');
            line += 1;
        }
        let start = out.len();
        out.extend_from_slice(word.as_bytes());
        if w == 0 {
            out[start] = out[start].to_ascii_uppercase();
        }
        line += word.len();
        if w + 1 < words && rng.random_bool(0.08) {
            out.push(b',');
        }
    }
    out.push(b'.');
    if rng.random_bool(0.15) {
        out.extend_from_slice(b"\n\n");
    }
}

const IDENTS: [&str; 24] = [
    "block", "index", "len", "buf", "offset", "count", "key", "node", "root", "tree", "cache",
    "store", "file", "meta", "hash", "ctr", "tag", "frame", "cipher", "leaf", "level", "size",
    "read", "write",
];
const CALLS: [&str; 8] = [
    "get", "insert", "push", "len", "encode", "decode", "update", "finish",
];

fn ident(rng: &mut SmallRng) -> &'static str {
    IDENTS[zipf(rng, IDENTS.len())]
}

fn source_line(rng: &mut SmallRng, out: &mut Vec<u8>, depth: &mut usize) {
    out.extend(std::iter::repeat_n(b' ', 4 * *depth));
    let line = match rng.random_range(0..10) {
        0 if *depth < 4 => {
            *depth += 1;
            format!(
                "fn {}_{}({}: u64) -> u64 {{",
                ident(rng),
                ident(rng),
                ident(rng)
            )
        }
        1 if *depth < 4 => {
            *depth += 1;
            format!("if {} > {} {{", ident(rng), rng.random_range(0..4096))
        }
        2 if *depth < 4 => {
            *depth += 1;
            format!("for {} in 0..{} {{", ident(rng), ident(rng))
        }
        3 | 4 if *depth > 0 => {
            *depth -= 1;
            out.truncate(out.len() - 4);
            "}".to_string()
        }
        5 => format!(
            "// {} {} the {} of {}",
            WORDS[zipf(rng, WORDS.len())],
            WORDS[zipf(rng, WORDS.len())],
            ident(rng),
            ident(rng)
        ),
        6 => format!("return {};", ident(rng)),
        7 => format!("{}.{}({});", ident(rng), CALLS[zipf(rng, 8)], ident(rng)),
        _ => format!(
            "let {} = {}({}, {});",
            ident(rng),
            ident(rng),
            ident(rng),
            rng.random_range(0..256)
        ),
    };
    out.extend_from_slice(line.as_bytes());
    out.push(b'\n');
}

/// Bytes common in x86-64 code (REX prefixes, MOV, LEA, CALL, JMP, PUSH/POP, ...).
const OPCODES: [u8; 24] = [
    0x48, 0x89, 0x8b, 0xe8, 0xff, 0x0f, 0x85, 0x84, 0x74, 0x75, 0xc3, 0x8d, 0x83, 0x31, 0xc0, 0x45,
    0x4c, 0x41, 0x55, 0x53, 0x5d, 0x5b, 0xe9, 0x90,
];

fn binary_section(rng: &mut SmallRng, out: &mut Vec<u8>) {
    match rng.random_range(0..10) {
        0..=4 => {
            for _ in 0..rng.random_range(64..1024) {
                out.push(if rng.random_bool(0.6) {
                    OPCODES[zipf(rng, OPCODES.len())]
                } else {
                    rng.random()
                });
            }
        }
        5 | 6 => out.extend(std::iter::repeat_n(0u8, rng.random_range(16..512))),
        7 | 8 => {
            for _ in 0..rng.random_range(8..128) {
                let v: u32 = rng.random_range(0..4096);
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        _ => {
            for _ in 0..rng.random_range(4..32) {
                out.extend_from_slice(ident(rng).as_bytes());
                out.push(b'_');
                out.extend_from_slice(CALLS[zipf(rng, 8)].as_bytes());
                out.push(0);
            }
        }
    }
}

/// Counts of blocks by nasd-e2e's two content decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    /// Blocks of exactly `block_bytes`.
    pub whole: u64,
    /// Whole blocks `IsRand` calls random-looking (`Ĥ ≥ τ`).
    pub whole_random: u64,
    /// Whole blocks whose deflate output leaves no room for COMP-EINT's length and tag.
    pub whole_incompressible: u64,
    /// Short last blocks of files (every one needs a leaf under RAND-EINT).
    pub tails: u64,
    /// Tails COMP-EINT cannot frame in their own length.
    pub tails_incompressible: u64,
}

impl Census {
    /// Classifies the blocks of one file's `data`.
    pub fn of_file(data: &[u8], block_bytes: u32) -> Census {
        let test = EntropyTest::new(block_bytes);
        let mut c = Census::default();
        for block in data.chunks(block_bytes as usize) {
            let fits = nasd_e2e::eint::comp_fits(block);
            if block.len() == block_bytes as usize {
                c.whole += 1;
                c.whole_random += u64::from(test.is_random_looking(block));
                c.whole_incompressible += u64::from(!fits);
            } else {
                c.tails += 1;
                c.tails_incompressible += u64::from(!fits);
            }
        }
        c
    }

    /// Adds another census's counts.
    pub fn add(&mut self, o: &Census) {
        self.whole += o.whole;
        self.whole_random += o.whole_random;
        self.whole_incompressible += o.whole_incompressible;
        self.tails += o.tails;
        self.tails_incompressible += o.tails_incompressible;
    }

    /// Percent of whole blocks that are random-looking.
    pub fn random_pct(&self) -> f64 {
        pct(self.whole_random, self.whole)
    }

    /// Percent of whole blocks that cannot carry COMP-EINT's tag.
    pub fn incompressible_pct(&self) -> f64 {
        pct(self.whole_incompressible, self.whole)
    }

    /// Percent of all blocks that get a leaf under RAND-EINT (random-looking whole blocks and
    /// every tail).
    pub fn rand_leaf_pct(&self) -> f64 {
        pct(self.whole_random + self.tails, self.whole + self.tails)
    }

    /// Percent of all blocks that fall back to a leaf under COMP-EINT.
    pub fn comp_leaf_pct(&self) -> f64 {
        pct(
            self.whole_incompressible + self.tails_incompressible,
            self.whole + self.tails,
        )
    }
}

/// `part` as a percentage of `whole`; 0 when `whole` is 0.
pub fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nasd_e2e::entropy::entropy_bits_per_byte;

    const B: u32 = 4096;

    #[test]
    fn generated_kinds_sit_on_their_side_of_both_tests() {
        for b in [4096u32, 65536] {
            let test = EntropyTest::new(b);
            for kind in Kind::ALL {
                let data = generate(kind, 7, 8 * b as usize);
                let c = Census::of_file(&data, b);
                assert_eq!((c.whole, c.tails), (8, 0));
                let high = Kind::HIGH.contains(&kind);
                let h = entropy_bits_per_byte(&data[..b as usize]);
                assert_eq!(
                    c.whole_random,
                    if high { 8 } else { 0 },
                    "{} at {b}: Ĥ {h:.3}, τ {:.3}",
                    kind.name(),
                    test.tau()
                );
                assert_eq!(c.whole_incompressible, if high { 8 } else { 0 });
            }
        }
    }

    #[test]
    fn generation_is_deterministic_per_seed() {
        for kind in Kind::ALL {
            assert_eq!(generate(kind, 3, 5000), generate(kind, 3, 5000));
            assert_ne!(generate(kind, 3, 5000), generate(kind, 4, 5000));
        }
        let (a, b) = (Pool::new(9), Pool::new(9));
        assert_eq!(
            a.file(Kind::Source, 1, 200_000),
            b.file(Kind::Source, 1, 200_000)
        );
        assert_ne!(a.window(Kind::Text, 1, 4096), a.window(Kind::Text, 2, 4096));
    }

    /// Hand-made blocks whose answers are known without running the tests' code:
    /// zeros (Ĥ = 0, deflates to a few bytes), a byte counter (every value equally often, so
    /// Ĥ = 8 exactly, yet deflate's back-references shrink it to almost nothing), uniform bytes
    /// (random-looking, and deflate cannot gain 18 bytes), and tails of text and of random bytes.
    #[test]
    fn census_of_known_blocks() {
        let counter: Vec<u8> = (0..B as usize).map(|i| i as u8).collect();
        assert_eq!(entropy_bits_per_byte(&counter), 8.0);
        let mut random = vec![0u8; B as usize];
        SmallRng::seed_from_u64(1).fill_bytes(&mut random);
        let text = generate(Kind::Text, 2, B as usize);
        let mut file = Vec::new();
        for block in [&vec![0u8; B as usize], &counter, &random, &text] {
            file.extend_from_slice(block);
        }
        let c = Census::of_file(&file, B);
        assert_eq!(
            c,
            Census {
                whole: 4,
                whole_random: 2,
                whole_incompressible: 1,
                tails: 0,
                tails_incompressible: 0,
            }
        );
        assert_eq!((c.random_pct(), c.incompressible_pct()), (50.0, 25.0));
        // Tails: a text tail compresses into its own length, a random one does not; both need
        // a RAND-EINT leaf.
        let mut t = Census::of_file(&[&text[..], &text[..1500]].concat(), B);
        t.add(&Census::of_file(&random[..700], B));
        assert_eq!((t.whole, t.tails, t.tails_incompressible), (1, 2, 1));
        assert_eq!(t.rand_leaf_pct(), 100.0 * 2.0 / 3.0);
        assert_eq!(t.comp_leaf_pct(), 100.0 / 3.0);
        assert_eq!(pct(1, 0), 0.0);
    }
}
