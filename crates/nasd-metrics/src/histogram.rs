//! Latency histograms with fixed buckets, recorded with two relaxed atomic additions and no
//! lock: a bucket's count and the sum. Buckets are kept apart (not cumulative) so an
//! observation touches one of them; a snapshot adds them up. The count is the buckets' sum,
//! so a scrape's buckets and count always agree, whatever records meanwhile (the sum may be
//! a few observations ahead or behind: Prometheus reads it only in ratios over time).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in microseconds, from 50 µs (a cached manager call
/// on loopback) to 10 s (a rebuild's read, a drive's slow disk); everything above lands in
/// `+Inf`.
pub const LATENCY_BOUNDS_US: [u64; BOUNDS] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];
/// The same bounds as the `le` labels Prometheus sees (seconds).
pub const LATENCY_BOUND_LABELS: [&str; BOUNDS] = [
    "0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
];
/// Buckets with a finite bound.
pub const BOUNDS: usize = 17;

const _: () = {
    let mut i = 1;
    while i < BOUNDS {
        assert!(LATENCY_BOUNDS_US[i - 1] < LATENCY_BOUNDS_US[i]);
        i += 1;
    }
};

/// One latency histogram.
#[derive(Default)]
pub struct Histogram {
    /// Observations per bucket; the last is `+Inf`.
    counts: [AtomicU64; BOUNDS + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let us = ns / 1000 + u64::from(ns % 1000 != 0);
        let i = LATENCY_BOUNDS_US.partition_point(|&b| b < us);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// A histogram as read at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: [u64; BOUNDS + 1],
    sum_ns: u64,
}

impl HistogramSnapshot {
    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns as f64 / 1e9
    }

    /// `(le, observations at or below it)`, cumulative, ending with `+Inf`.
    pub fn buckets(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        let les = LATENCY_BOUND_LABELS.iter().copied().chain(["+Inf"]);
        les.zip(self.counts.iter().scan(0u64, |acc, c| {
            *acc += c;
            Some(*acc)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_match_bounds() {
        for (us, label) in LATENCY_BOUNDS_US.iter().zip(LATENCY_BOUND_LABELS) {
            let s: f64 = label.parse().unwrap();
            assert_eq!((s * 1e6).round() as u64, *us, "{label}");
        }
    }

    #[test]
    fn an_observation_lands_in_the_first_bucket_whose_bound_holds_it() {
        let h = Histogram::default();
        // 100 µs exactly is `le 0.0001`; 1 ns past it is the next bucket.
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_nanos(100_001));
        h.observe(Duration::ZERO);
        h.observe(Duration::MAX);
        let s = h.snapshot();
        let b: Vec<(&str, u64)> = s.buckets().collect();
        assert_eq!(b[0], ("0.00005", 1));
        assert_eq!(b[1], ("0.0001", 2));
        assert_eq!(b[2], ("0.00025", 3));
        assert_eq!(b[BOUNDS - 1], ("10", 3));
        assert_eq!(b[BOUNDS], ("+Inf", 4));
        assert_eq!(s.count(), 4);
    }
}
