//! Per-operation statistics of a server: requests, bytes in and out, a latency histogram per
//! operation, and errors per operation and status. The operations and statuses are fixed
//! when the table is made (a protocol's calls, an error enum's names), so recording is a few
//! relaxed atomic additions at indices, with no lock and no allocation; a name the table
//! does not know counts as [`OTHER`], so what a peer sends never grows it.

use crate::histogram::Histogram;
use crate::text::{Exposition, Kind};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The operation or status label of names a table does not know.
pub const OTHER: &str = "other";
/// Most operations, and most statuses, one table may have (a bound on a scrape's size and
/// on the table's memory: operations x statuses error counters).
pub const NAMES_MAX: usize = 256;

/// One operation's counters.
#[derive(Default)]
struct OpCell {
    requests: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    latency: Histogram,
}

/// One counter of an [`OpCell`], for rendering.
type Field = fn(&OpCell) -> &AtomicU64;

/// How one request went, as [`OpStats::record`] takes it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    /// The status index of a failure ([`OpStats::status`]); `None`: it succeeded.
    pub error: Option<usize>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub elapsed: Duration,
}

/// The statistics of every operation of one server.
pub struct OpStats {
    ops: Vec<String>,
    op_index: HashMap<String, usize>,
    statuses: Vec<String>,
    status_index: HashMap<String, usize>,
    cells: Box<[OpCell]>,
    /// `errors[op * statuses.len() + status]`.
    errors: Box<[AtomicU64]>,
}

/// The names as given, then [`OTHER`], and their indices.
fn table<S: Into<String>>(
    names: impl IntoIterator<Item = S>,
) -> (Vec<String>, HashMap<String, usize>) {
    let mut v: Vec<String> = names.into_iter().map(Into::into).collect();
    v.push(OTHER.into());
    assert!(
        v.len() <= NAMES_MAX,
        "{} names, at most {NAMES_MAX}",
        v.len()
    );
    let index: HashMap<String, usize> = v.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
    assert_eq!(
        index.len(),
        v.len(),
        "names are distinct, and none is {OTHER:?}"
    );
    (v, index)
}

impl OpStats {
    /// A table of operations `ops` whose failures are named by `statuses`. The `i`-th name
    /// given has index `i`; [`OTHER`] follows the last. Names are distinct.
    pub fn new<A: Into<String>, B: Into<String>>(
        ops: impl IntoIterator<Item = A>,
        statuses: impl IntoIterator<Item = B>,
    ) -> OpStats {
        let (ops, op_index) = table(ops);
        let (statuses, status_index) = table(statuses);
        let cells = (0..ops.len()).map(|_| OpCell::default()).collect();
        let errors = (0..ops.len() * statuses.len())
            .map(|_| AtomicU64::new(0))
            .collect();
        OpStats {
            ops,
            op_index,
            statuses,
            status_index,
            cells,
            errors,
        }
    }

    /// The index of operation `name` ([`OTHER`]'s if unknown).
    pub fn op(&self, name: &str) -> usize {
        self.op_index
            .get(name)
            .copied()
            .unwrap_or(self.ops.len() - 1)
    }

    /// The index of status `name` ([`OTHER`]'s if unknown).
    pub fn status(&self, name: &str) -> usize {
        self.status_index
            .get(name)
            .copied()
            .unwrap_or(self.statuses.len() - 1)
    }

    /// Records one request of operation `op` (an index from [`OpStats::op`]).
    pub fn record(&self, op: usize, o: Outcome) {
        let c = &self.cells[op];
        c.requests.fetch_add(1, Ordering::Relaxed);
        if o.bytes_in > 0 {
            c.bytes_in.fetch_add(o.bytes_in, Ordering::Relaxed);
        }
        if o.bytes_out > 0 {
            c.bytes_out.fetch_add(o.bytes_out, Ordering::Relaxed);
        }
        c.latency.observe(o.elapsed);
        if let Some(s) = o.error {
            self.errors[op * self.statuses.len() + s].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests of `op` so far (tests, summaries).
    pub fn requests(&self, op: &str) -> u64 {
        self.cells[self.op(op)].requests.load(Ordering::Relaxed)
    }

    /// Writes the families `{prefix}_requests_total`, `{prefix}_request_bytes_total`,
    /// `{prefix}_reply_bytes_total`, `{prefix}_request_duration_seconds` (labelled `op`) and
    /// `{prefix}_errors_total` (labelled `op` and `status`). Only operations seen so far
    /// have samples, and only the (operation, status) pairs that happened, so a scrape's size
    /// follows what the server did rather than every call it could serve. `what` names the
    /// requests in the help text ("Manager calls").
    pub fn render(&self, e: &mut Exposition, prefix: &str, what: &str) {
        let seen: Vec<(usize, u64)> = (0..self.ops.len())
            .map(|i| (i, self.cells[i].requests.load(Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect();
        let name = format!("{prefix}_requests_total");
        e.family(
            &name,
            Kind::Counter,
            &format!("{what} served, by operation."),
        );
        for &(i, n) in &seen {
            e.sample(&name, &[("op", &self.ops[i])], n);
        }
        let counters: [(&str, &str, Field); 2] = [
            (
                "request_bytes_total",
                "Bytes received in requests, by operation.",
                |c| &c.bytes_in,
            ),
            (
                "reply_bytes_total",
                "Bytes sent in replies, by operation.",
                |c| &c.bytes_out,
            ),
        ];
        for (suffix, help, field) in counters {
            let name = format!("{prefix}_{suffix}");
            e.family(&name, Kind::Counter, help);
            for &(i, _) in &seen {
                let v = field(&self.cells[i]).load(Ordering::Relaxed);
                e.sample(&name, &[("op", &self.ops[i])], v);
            }
        }
        self.render_errors(e, prefix, what);
        let name = format!("{prefix}_request_duration_seconds");
        let help = "Time to serve a request, by operation.";
        e.family(&name, Kind::Histogram, help);
        for &(i, _) in &seen {
            let h = self.cells[i].latency.snapshot();
            e.histogram(&name, &[("op", &self.ops[i])], &h);
        }
    }

    fn render_errors(&self, e: &mut Exposition, prefix: &str, what: &str) {
        let name = format!("{prefix}_errors_total");
        let help = format!("{what} that failed, by operation and status.");
        e.family(&name, Kind::Counter, &help);
        let n = self.statuses.len();
        for (at, v) in self.errors.iter().enumerate() {
            let v = v.load(Ordering::Relaxed);
            if v > 0 {
                let labels = [
                    ("op", &*self.ops[at / n]),
                    ("status", &self.statuses[at % n]),
                ];
                e.sample(&name, &labels, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_count_as_other_and_only_what_happened_is_rendered() {
        let s = OpStats::new(["read", "write"], ["NoSuchObject"]);
        assert_eq!((s.op("read"), s.op("write"), s.op("nope")), (0, 1, 2));
        let read = s.op("read");
        s.record(
            read,
            Outcome {
                bytes_in: 10,
                bytes_out: 4096,
                elapsed: Duration::from_micros(30),
                ..Default::default()
            },
        );
        s.record(
            s.op("frobnicate"),
            Outcome {
                error: Some(s.status("Weird")),
                ..Default::default()
            },
        );
        s.record(
            read,
            Outcome {
                error: Some(s.status("NoSuchObject")),
                ..Default::default()
            },
        );
        assert_eq!(s.requests("read"), 2);
        assert_eq!(s.requests("other"), 1);
        assert_eq!(s.requests("write"), 0);
        let mut e = Exposition::new();
        s.render(&mut e, "nasd_drive", "Drive requests");
        let t = e.finish();
        assert!(
            t.contains("nasd_drive_requests_total{op=\"read\"} 2\n"),
            "{t}"
        );
        assert!(t.contains("nasd_drive_requests_total{op=\"other\"} 1\n"));
        assert!(
            !t.contains("op=\"write\""),
            "unseen operations have no samples"
        );
        assert!(t.contains("nasd_drive_request_bytes_total{op=\"read\"} 10\n"));
        assert!(t.contains("nasd_drive_reply_bytes_total{op=\"read\"} 4096\n"));
        assert!(t.contains("nasd_drive_errors_total{op=\"read\",status=\"NoSuchObject\"} 1\n"));
        assert!(t.contains("nasd_drive_errors_total{op=\"other\",status=\"other\"} 1\n"));
        assert!(t.contains(
            "nasd_drive_request_duration_seconds_bucket{op=\"read\",le=\"0.00005\"} 2\n"
        ));
        assert!(t.contains("nasd_drive_request_duration_seconds_count{op=\"read\"} 2\n"));
        assert!(t.contains("# TYPE nasd_drive_request_duration_seconds histogram\n"));
    }

    #[test]
    #[should_panic(expected = "distinct")]
    fn duplicate_names_are_a_programmer_error() {
        OpStats::new(["read", "read"], Vec::<String>::new());
    }
}
