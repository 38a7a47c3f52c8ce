//! The Prometheus text exposition format (version 0.0.4): for each family a `# HELP` and a
//! `# TYPE` line, then its samples, one per line, `name{label="value",...} value`.
//!
//! Names are the program's own (static strings), so a bad one is a programmer error, checked
//! by a debug assertion; label values may come from anywhere and are escaped (`\\`, `\"`,
//! `\n`), as is help text (`\\`, `\n`).

use crate::histogram::HistogramSnapshot;
use std::fmt::Write as _;

/// The `Content-Type` of a scrape's body.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a family's samples mean to Prometheus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Whether `name` is a valid metric or label name: `[a-zA-Z_:][a-zA-Z0-9_:]*` (label names
/// may not hold `:`, which nasd's never do).
pub fn valid_name(name: &str) -> bool {
    let mut b = name.bytes();
    let first_ok = matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':');
    first_ok && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// A scrape's body being written.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts family `name`: its help and type lines. Its samples follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        debug_assert!(valid_name(name), "metric name {name:?}");
        self.out.push_str("# HELP ");
        self.out.push_str(name);
        self.out.push(' ');
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        let _ = writeln!(self.out, "\n# TYPE {name} {}", kind.as_str());
    }

    /// One sample of the family last started (`name` is the family's, or for a histogram
    /// the family's with `_bucket`, `_sum` or `_count`).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Into<Value>) {
        self.out.push_str(name);
        self.labels(labels, None);
        self.out.push(' ');
        value.into().write(&mut self.out);
        self.out.push('\n');
    }

    /// A family of one sample without labels.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Into<Value>) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// One unlabelled gauge per row: (name, help, value).
    pub fn gauges<V: Into<Value>>(
        &mut self,
        rows: impl IntoIterator<Item = (&'static str, &'static str, V)>,
    ) {
        for (name, help, v) in rows {
            self.single(name, Kind::Gauge, help, v);
        }
    }

    /// The samples of one histogram of family `name` (started with [`Kind::Histogram`]):
    /// cumulative buckets, sum and count.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        for (le, count) in h.buckets() {
            self.out.push_str(name);
            self.out.push_str("_bucket");
            self.labels(labels, Some(le));
            let _ = writeln!(self.out, " {count}");
        }
        let sum = format!("{name}_sum");
        self.sample(&sum, labels, h.sum_seconds());
        let count = format!("{name}_count");
        self.sample(&count, labels, h.count());
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let all = labels.iter().copied().chain(le.map(|l| ("le", l)));
        for (i, (k, v)) in all.enumerate() {
            debug_assert!(valid_name(k), "label name {k:?}");
            if i > 0 {
                self.out.push(',');
            }
            self.out.push_str(k);
            self.out.push_str("=\"");
            for c in v.chars() {
                match c {
                    '\\' => self.out.push_str("\\\\"),
                    '"' => self.out.push_str("\\\""),
                    '\n' => self.out.push_str("\\n"),
                    c => self.out.push(c),
                }
            }
            self.out.push('"');
        }
        self.out.push('}');
    }

    /// The body.
    pub fn finish(self) -> String {
        self.out
    }
}

/// A sample's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Uint(u64),
    Float(f64),
}

impl Value {
    fn write(self, out: &mut String) {
        let _ = match self {
            Value::Int(v) => write!(out, "{v}"),
            Value::Uint(v) => write!(out, "{v}"),
            Value::Float(v) if v.is_nan() => write!(out, "NaN"),
            Value::Float(v) if v == f64::INFINITY => write!(out, "+Inf"),
            Value::Float(v) if v == f64::NEG_INFINITY => write!(out, "-Inf"),
            Value::Float(v) => write!(out, "{v}"),
        };
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Uint(v)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::Uint(v as u64)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Uint(u64::from(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Histogram;
    use std::time::Duration;

    #[test]
    fn a_family_has_help_type_and_escaped_label_values() {
        let mut e = Exposition::new();
        e.family(
            "nasd_x_total",
            Kind::Counter,
            "Things.\nWith a \\ and a newline.",
        );
        e.sample("nasd_x_total", &[("op", "a\"b\\c\nd")], 3u64);
        e.sample("nasd_x_total", &[("op", "plain"), ("status", "ok")], 0u64);
        e.single("nasd_y", Kind::Gauge, "A gauge.", -2i64);
        e.single("nasd_z", Kind::Gauge, "Floats.", f64::INFINITY);
        assert_eq!(
            e.finish(),
            "# HELP nasd_x_total Things.\\nWith a \\\\ and a newline.\n\
             # TYPE nasd_x_total counter\n\
             nasd_x_total{op=\"a\\\"b\\\\c\\nd\"} 3\n\
             nasd_x_total{op=\"plain\",status=\"ok\"} 0\n\
             # HELP nasd_y A gauge.\n\
             # TYPE nasd_y gauge\n\
             nasd_y -2\n\
             # HELP nasd_z Floats.\n\
             # TYPE nasd_z gauge\n\
             nasd_z +Inf\n"
        );
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_ending_at_inf_then_sum_and_count() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(40)); // first bucket
        h.observe(Duration::from_micros(100)); // on a bound: that bucket (le)
        h.observe(Duration::from_secs(60)); // past the last bound: +Inf only
        let mut e = Exposition::new();
        e.family("nasd_t_seconds", Kind::Histogram, "Latency.");
        e.histogram("nasd_t_seconds", &[("op", "read")], &h.snapshot());
        let text = e.finish();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2],
            "nasd_t_seconds_bucket{op=\"read\",le=\"0.00005\"} 1"
        );
        assert_eq!(
            lines[3],
            "nasd_t_seconds_bucket{op=\"read\",le=\"0.0001\"} 2"
        );
        let inf = lines
            .iter()
            .position(|l| l.contains("le=\"+Inf\""))
            .unwrap();
        assert_eq!(
            lines[inf],
            "nasd_t_seconds_bucket{op=\"read\",le=\"+Inf\"} 3"
        );
        assert_eq!(
            lines[inf - 1],
            "nasd_t_seconds_bucket{op=\"read\",le=\"10\"} 2"
        );
        assert_eq!(lines[inf + 1], "nasd_t_seconds_sum{op=\"read\"} 60.00014");
        assert_eq!(lines[inf + 2], "nasd_t_seconds_count{op=\"read\"} 3");
        assert_eq!(lines.len(), inf + 3);
        // Buckets never decrease.
        let counts: Vec<u64> = lines[2..=inf]
            .iter()
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn names_are_checked() {
        for ok in ["nasd_a", "_x", "a:b", "A9"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "9a", "a-b", "a b", "é"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
