//! Summaries of repeated measurements: the median and the spread (minimum and maximum), as seed
//! 001's Table 1 gives one number per algorithm and we want to show how stable ours is.

/// Median, minimum and maximum of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// The median sample.
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// How many samples.
    pub runs: usize,
}

impl Summary {
    /// Summarises `samples`; `None` if there are none or one is NaN.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|s| s.is_nan()) {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            runs: n,
        })
    }

    /// (max - min) / median, in percent.
    pub fn spread_pct(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            100.0 * (self.max - self.min) / self.median
        }
    }

    /// The summary with every value multiplied by `k` (unit changes).
    pub fn scaled(&self, k: f64) -> Summary {
        Summary {
            median: self.median * k,
            min: self.min * k,
            max: self.max * k,
            runs: self.runs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.spread_pct(), 120.0);
        assert!(Summary::of(&[]).is_none());
    }
}
