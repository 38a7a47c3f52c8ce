//! nasd-lab reruns the quantitative claims of the seeds on today's hardware and on nasd's own
//! code: the cryptographic cost tables of seed 001 (Tables 1-4, Fig 11), the compression-call cost
//! model of seed 000 §3.4 (Figs 5-7), the queueing simulation of an under-provisioned digest
//! unit of seed 000 §5 (Figs 11-17), seed 004's RAID experiments on nasd-ec (Figs 5-11), and seed 002 §4's scaling of NASD
//! against a server-attached disk on a local cluster, and its Andrew benchmark (Table 8)
//! through nasd's FUSE mount against a store-and-forward file server, and seed 002 §4.6's
//! informed prefetching, and seed 003 §7's integrity constructions with constant trusted storage
//! (Figs 9-10) on nasd-e2e, and seed 000's read-size sweep (§2.1 Fig 2, §3.2 Fig 4) timed on
//! nasd's schemes. Each experiment returns a [`report::Report`]: tables to print
//! (or emit as JSON lines) and figures to write as CSV and SVG. `docs/lab.md` documents every
//! experiment and the command that reproduces it.
//!
//! # Layout
//!
//! - [`error`]: the typed error of the crate.
//! - [`report`]: tables, figures, text/JSON rendering, output files.
//! - [`plot`]: SVG line charts of figures (plotters).
//! - [`stats`]: medians and spreads of repeated measurements.
//! - [`counted`]: nasd-crypto's schemes run with their cost meter on the model's requests.
//! - [`model`]: seed 000 §3.4's cost model in compression-function calls, for the four schemes.
//! - [`model_exp`]: the `model` experiment (Figs 5, 6a, 6b, 7a, 7b, model beside counted;
//!   and [`latency`], Fig 10's critical paths beside this CPU's measured work).
//! - [`sweep`]: the `sweep` experiment (seed 000 §2.1 Fig 2, §3.2 Fig 4: the read-size sweep
//!   of the four schemes timed in MB/s, beside the meter's counts).
//! - [`crypto`]: the `crypto` experiment (seed 001 Tables 1-4, Fig 11 measured today).
//! - [`eint`]: the `eint` experiment (seed 003 §7, Figs 9-10: nasd-e2e's MT-, RAND- and
//!   COMP-EINT on generated files, synthetic traces and an optional real tree, and §7.3's
//!   guidance).
//! - [`sim`]: the discrete-event simulation of seed 000 §5 and its experiment.
//! - [`cache`]: the `cache` experiment (seed 002 §3: a file manager's and drives' split
//!   cache against one server cache, simulated on a trace or a synthetic AFS-like day).
//! - [`raid`]: the `raid` experiment (seed 004 Figs 5-11 on nasd-ec's codes).
//! - [`andrew`]: the `andrew` experiment (seed 002 §4.2 Table 8: the Andrew benchmark's
//!   phases on a local directory, nasd's mount and a store-and-forward server's mount).
//! - [`prefetch`]: the `prefetch` experiment (seed 002 §4.6: planar slices through a 64 MiB
//!   volume from a slow, cold drive, without and with informed prefetching).
//! - [`scaling`]: the `scaling` experiment (seed 002 §4: NASD against a server-attached disk
//!   as client/drive pairs grow, in network namespaces with rate-capped links).

pub mod andrew;
pub mod cache;
pub mod counted;
pub mod crypto;
pub mod crypto_nasd;
pub mod eint;
pub mod error;
pub mod latency;
pub mod model;
pub mod model_exp;
pub mod plot;
pub mod prefetch;
pub mod raid;
pub mod report;
pub mod scaling;
pub mod sim;
pub mod stats;
pub mod sweep;

pub use error::LabError;
pub use report::Report;

/// Options common to every experiment.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// Run a reduced version that finishes within two minutes on a 2-core machine.
    pub quick: bool,
    /// Seed of every random choice (workloads, keys), so runs are reproducible.
    pub seed: u64,
}
