//! Block write counters kept as counter intervals (requirements B.3; seed 003).
//!
//! `ctr_i` counts the writes to block `i` and enters block `i`'s tweak ([`crate::block`]), so a
//! replayed old ciphertext decrypts to garbage. Seed 003's constructions "exploit ... high
//! sequentiality of file block writes" (abstract): instead of one counter per block, the list keeps
//! maximal runs `(first, last, ctr)` of consecutive blocks with equal counters, so a file written
//! sequentially, however large, needs one interval. Each interval also carries the file-key
//! version its blocks were last encrypted under (B.1: "per-block key versions are recorded in
//! B.3's counter record"), so runs are maximal in `(ctr, key_version)`.
//!
//! The list lives in untrusted storage and is authenticated by `counters_digest = H(encoding)` in
//! the trusted record; otherwise a drive could roll back a counter together with its block. That
//! placement is B.3's requirement; where the paper itself keeps the intervals' authenticator is
//! unverified ([R] in the requirements: only the end of the paper is in `seeds/`).
//!
//! Encoding (little-endian, canonical): `version u8 = 1 ‖ count u32 ‖ count × (first u64 ‖
//! last u64 ‖ ctr u64 ‖ key_version u32)`. The intervals cover `0..blocks` without gaps and
//! neighbours differ, so a list has exactly one encoding and one digest. A run with `ctr = 0`
//! (and key version 0) is a hole: blocks never written, which read as zeros and have no
//! ciphertext (a sparse file, or a write past the end); every written block has `ctr ≥ 1`.

use crate::codec::{hash_parts, DecodeError, Reader};
use crate::keys::KeyVersion;

/// Most intervals a list may hold (a file written in a random order degrades to one interval per
/// block; at 4 KiB blocks this is a 16 GiB file written as badly as possible, 28 MiB of list).
pub const COUNTER_INTERVALS_MAX: u64 = 1 << 22;
/// Bytes of one encoded interval.
pub const INTERVAL_BYTES: usize = 8 + 8 + 8 + 4;
/// Bytes of the encoding's header.
pub const INTERVALS_HEADER_BYTES: usize = 1 + 4;

/// A run of blocks `first..=last` written `ctr` times each, last under key `key_version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub first: u64,
    pub last: u64,
    pub ctr: u64,
    pub key_version: KeyVersion,
}

impl Interval {
    fn state(&self) -> (u64, KeyVersion) {
        (self.ctr, self.key_version)
    }
}

/// The counter intervals of one file: the counter and key version of each of its blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterIntervals {
    runs: Vec<Interval>,
}

impl CounterIntervals {
    const FORMAT_VERSION: u8 = 1;

    pub fn new() -> CounterIntervals {
        CounterIntervals::default()
    }

    /// Blocks covered: the file's block count.
    pub fn blocks(&self) -> u64 {
        self.runs.last().map_or(0, |r| r.last + 1)
    }

    pub fn intervals(&self) -> &[Interval] {
        &self.runs
    }

    /// Index of the run holding block `i`, by binary search.
    fn find(&self, i: u64) -> Option<usize> {
        if i >= self.blocks() {
            return None;
        }
        // The first run whose `last` is at least `i` holds `i`, since runs tile 0..blocks.
        Some(self.runs.partition_point(|r| r.last < i))
    }

    /// `(ctr_i, key_version_i)` of block `i`, or `None` past the end.
    pub fn get(&self, i: u64) -> Option<(u64, KeyVersion)> {
        self.find(i).map(|k| self.runs[k].state())
    }

    /// Whether block `i` is a hole (never written: zeros, nothing stored).
    pub fn is_hole(&self, i: u64) -> bool {
        self.get(i).is_some_and(|(ctr, _)| ctr == 0)
    }

    /// Grows the list to `blocks` blocks with a hole (a file extended with zeros).
    pub fn extend(&mut self, blocks: u64) {
        let have = self.blocks();
        if blocks <= have {
            return;
        }
        self.runs.push(Interval {
            first: have,
            last: blocks - 1,
            ctr: 0,
            key_version: 0,
        });
        self.merge_around(self.runs.len() - 1);
    }

    /// Counts one more write of block `i` under `key_version` and returns the new `ctr_i`.
    /// `i` may be at or past the block count: blocks between the end and `i` become a hole,
    /// and `i` gets counter 1. `None` if the counter would overflow.
    pub fn inc(&mut self, i: u64, key_version: KeyVersion) -> Option<u64> {
        self.extend(i);
        let blocks = self.blocks();
        if i == blocks {
            self.runs.push(Interval {
                first: i,
                last: i,
                ctr: 1,
                key_version,
            });
            self.merge_around(self.runs.len() - 1);
            return Some(1);
        }
        let k = self.find(i)?;
        let old = self.runs[k];
        let ctr = old.ctr.checked_add(1)?;
        let mut pieces = Vec::with_capacity(3);
        if old.first < i {
            pieces.push(Interval { last: i - 1, ..old });
        }
        let mid = pieces.len();
        pieces.push(Interval {
            first: i,
            last: i,
            ctr,
            key_version,
        });
        if i < old.last {
            pieces.push(Interval {
                first: i + 1,
                ..old
            });
        }
        self.runs.splice(k..=k, pieces);
        self.merge_around(k + mid);
        Some(ctr)
    }

    /// Merges run `k` with equal neighbours so every run stays maximal.
    fn merge_around(&mut self, mut k: usize) {
        if k > 0 && self.runs[k - 1].state() == self.runs[k].state() {
            self.runs[k - 1].last = self.runs[k].last;
            self.runs.remove(k);
            k -= 1;
        }
        if k + 1 < self.runs.len() && self.runs[k + 1].state() == self.runs[k].state() {
            self.runs[k].last = self.runs[k + 1].last;
            self.runs.remove(k + 1);
        }
    }

    /// Forgets blocks from `blocks` on (the file was truncated).
    pub fn truncate(&mut self, blocks: u64) {
        self.runs.retain(|r| r.first < blocks);
        if let Some(r) = self.runs.last_mut() {
            r.last = r.last.min(blocks.saturating_sub(1));
        }
    }

    /// Bytes of [`CounterIntervals::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        INTERVALS_HEADER_BYTES + self.runs.len() * INTERVAL_BYTES
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(Self::FORMAT_VERSION);
        // Writers keep the list within COUNTER_INTERVALS_MAX (`within_limits`), far below u32.
        out.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for r in &self.runs {
            out.extend_from_slice(&r.first.to_le_bytes());
            out.extend_from_slice(&r.last.to_le_bytes());
            out.extend_from_slice(&r.ctr.to_le_bytes());
            out.extend_from_slice(&r.key_version.to_le_bytes());
        }
        out
    }

    /// Whether the list can be encoded and decoded again (at most [`COUNTER_INTERVALS_MAX`]).
    pub fn within_limits(&self) -> bool {
        self.runs.len() as u64 <= COUNTER_INTERVALS_MAX
    }

    pub fn decode(b: &[u8]) -> Result<CounterIntervals, DecodeError> {
        let mut r = Reader::new(b, "counter intervals");
        r.version(Self::FORMAT_VERSION)?;
        let count = r.u32()?;
        let count = r.check_count(u64::from(count), COUNTER_INTERVALS_MAX, INTERVAL_BYTES)?;
        let mut runs: Vec<Interval> = Vec::with_capacity(count);
        for _ in 0..count {
            let iv = Interval {
                first: r.u64()?,
                last: r.u64()?,
                ctr: r.u64()?,
                key_version: r.u32()?,
            };
            let expected_first = runs.last().map_or(Some(0), |p| p.last.checked_add(1));
            if Some(iv.first) != expected_first {
                return Err(r.invalid("intervals do not tile the blocks from 0"));
            }
            if iv.last < iv.first {
                return Err(r.invalid("interval ends before it starts"));
            }
            if iv.ctr == 0 && iv.key_version != 0 {
                return Err(r.invalid("a hole has a key version"));
            }
            if runs.last().is_some_and(|p| p.state() == iv.state()) {
                return Err(r.invalid("neighbouring intervals are equal"));
            }
            runs.push(iv);
        }
        r.finish()?;
        Ok(CounterIntervals { runs })
    }

    /// `counters_digest` of the trusted record: BLAKE3 over a label and the encoding.
    pub fn digest(&self) -> [u8; 32] {
        digest_of_encoding(&self.encode())
    }
}

/// The digest of an encoded list, without decoding it.
pub fn digest_of_encoding(encoded: &[u8]) -> [u8; 32] {
    hash_parts(b"nasd-e2e counter intervals v1", &[encoded])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sequential_writes_keep_one_interval() {
        let mut c = CounterIntervals::new();
        for i in 0..1000 {
            assert_eq!(c.inc(i, 1), Some(1));
        }
        assert_eq!(c.intervals().len(), 1);
        for i in 0..1000 {
            assert_eq!(c.inc(i, 1), Some(2));
        }
        assert_eq!(c.intervals().len(), 1);
        assert_eq!(c.get(999), Some((2, 1)));
        assert_eq!(c.get(1000), None);
        assert_eq!(c.inc(1002, 1), Some(1), "a write past the end");
        assert_eq!(c.get(1000), Some((0, 0)), "leaves a hole");
        assert!(c.is_hole(1001) && !c.is_hole(1002) && !c.is_hole(999));
        assert_eq!(c.intervals().len(), 3);
        assert_eq!(c.inc(1000, 1), Some(1), "a hole written");
        assert_eq!(c.intervals().len(), 4);
        c.extend(2000);
        assert_eq!((c.blocks(), c.get(1999)), (2000, Some((0, 0))));
        assert_eq!(CounterIntervals::decode(&c.encode()).unwrap(), c);
    }

    #[test]
    fn a_middle_write_splits_and_a_catch_up_merges() {
        let mut c = CounterIntervals::new();
        for i in 0..10 {
            c.inc(i, 1);
        }
        c.inc(5, 1);
        assert_eq!(c.intervals().len(), 3);
        assert_eq!(c.get(5), Some((2, 1)));
        assert_eq!(c.get(4), Some((1, 1)));
        c.inc(4, 1);
        assert_eq!(c.intervals().len(), 3);
        c.inc(5, 2);
        assert_eq!(c.get(5), Some((3, 2)), "key version changes with the write");
        c.truncate(5);
        assert_eq!(c.blocks(), 5);
        assert_eq!(c.get(4), Some((2, 1)));
    }

    #[test]
    fn decoder_refuses_non_canonical_lists() {
        let mut c = CounterIntervals::new();
        for i in 0..4 {
            c.inc(i, 1);
        }
        c.inc(2, 1);
        let good = c.encode();
        assert_eq!(CounterIntervals::decode(&good).unwrap(), c);
        // Field offsets: header 5, then 28 bytes per interval.
        let mut gap = good.clone();
        gap[5 + 28] = 9; // second interval's first
        assert!(CounterIntervals::decode(&gap).is_err());
        let mut zero = good.clone();
        zero[5 + 16..5 + 24].fill(0); // first interval's ctr: a hole, but with a key version
        assert!(CounterIntervals::decode(&zero).is_err());
        let mut equal = good.clone();
        equal[5 + 28 + 16] = 1; // second interval's ctr equal to the first's
        assert!(CounterIntervals::decode(&equal).is_err());
        assert!(matches!(
            CounterIntervals::decode(&[1, 0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::TooMany { .. })
        ));
        assert_eq!(
            CounterIntervals::decode(&[1, 0, 0, 0, 0]).unwrap(),
            CounterIntervals::new()
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Inc(u64, u32),
        Truncate(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u64..40, 0u32..3).prop_map(|(i, v)| Op::Inc(i, v)),
            1 => (0u64..40).prop_map(Op::Truncate),
        ]
    }

    proptest! {
        /// The intervals agree with a plain vector of counters after any sequence of writes.
        #[test]
        fn matches_a_vector_oracle(ops in proptest::collection::vec(op(), 0..200)) {
            let mut c = CounterIntervals::new();
            let mut oracle: Vec<(u64, u32)> = Vec::new();
            for op in ops {
                match op {
                    Op::Inc(i, v) => {
                        let i = i.min(oracle.len() as u64 + 5);
                        let got = c.inc(i, v);
                        if i < oracle.len() as u64 {
                            let e = &mut oracle[i as usize];
                            *e = (e.0 + 1, v);
                            prop_assert_eq!(got, Some(e.0));
                        } else {
                            // Past the end: the blocks skipped are a hole.
                            oracle.resize(i as usize, (0, 0));
                            oracle.push((1, v));
                            prop_assert_eq!(got, Some(1));
                        }
                    }
                    Op::Truncate(n) => {
                        c.truncate(n);
                        oracle.truncate(n as usize);
                    }
                }
                prop_assert_eq!(c.blocks(), oracle.len() as u64);
                for (i, e) in oracle.iter().enumerate() {
                    prop_assert_eq!(c.get(i as u64), Some(*e));
                }
                for w in c.intervals().windows(2) {
                    prop_assert!(w[0].state() != w[1].state(), "runs are maximal");
                    prop_assert_eq!(w[0].last + 1, w[1].first);
                }
                let back = CounterIntervals::decode(&c.encode()).unwrap();
                prop_assert_eq!(back.digest(), c.digest());
                prop_assert_eq!(back, c.clone());
            }
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = CounterIntervals::decode(&bytes);
        }
    }
}
