//! The operator's view of a nasd process (issue 23 §6). Every server — a drive, the manager,
//! the S3 gateway, a mount — counts what it serves in an [`OpStats`] table: requests, bytes
//! in and out, errors by status, and a latency [`Histogram`] per operation, each recorded
//! with a few relaxed atomic additions at fixed indices (no lock, no allocation, nothing a
//! peer's input can grow). `--metrics ADDR` then serves them, beside gauges the process
//! reads when it is scraped (a drive's capacity, the manager's leases and degraded files),
//! in the Prometheus text format at `GET /metrics`, and the process's health at
//! `GET /health`, from a small HTTP/1.1 [`server`] on a port of its own. docs/metrics.md
//! lists every metric.
//!
//! The registry is ours rather than the `prometheus-client` crate's: its histograms take a
//! lock per observation and its labelled families a map lookup under a lock, while nasd's
//! label sets are fixed when a server starts (a protocol's calls, a status enum), so arrays
//! of atomics serve them; and the text format is a few lines to write and test. The server
//! is hand-written over tokio for the same reason: it answers two paths, and its bounds
//! ([`server::REQUEST_HEAD_BYTES_MAX`], [`server::CONNECTIONS_MAX`], timeouts) are easier
//! to state and test than a general server's.
//!
//! # Layout
//! - [`histogram`]: latency histograms with fixed buckets, 50 µs to 10 s.
//! - [`ops`]: [`OpStats`], per-operation counters and histograms and errors per status.
//! - [`text`]: [`Exposition`], the text exposition format.
//! - [`server`]: the `/metrics` and `/health` server and the [`Source`] a process gives it.

pub mod histogram;
pub mod ops;
pub mod server;
pub mod text;

pub use histogram::Histogram;
pub use ops::{OpStats, Outcome};
pub use server::Source;
pub use text::{Exposition, Kind};
