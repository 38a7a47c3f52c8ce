//! A local nasd cluster: a file manager and N drives on loopback, each its own process (the
//! `nasd` executable run as `manager run` / `drive run`), in one private directory. It is
//! what `nasd up`, `nasd demo`, `nasd bench cluster` and the black-box tests run, and it is a
//! library because all of them need the same thing: start a cluster, then stop, kill or
//! restart any single component mid-run (degraded benchmarks, fault tests) and find a drive's
//! data on disk (tamper tests). The caller names the `nasd` executable to run, so a test can
//! pass the binary cargo built and the command line itself.
//!
//! ```text
//! DATA/cluster.json     components: directories and fixed loopback addresses
//! DATA/client.json      the admin's client config (nasd_client::config)
//! DATA/admin.password   the admin's generated password (mode 0600)
//! DATA/pids.json        the running processes (removed when the cluster stops)
//! DATA/drive-N/, DATA/manager/, DATA/manager-N/ (--managers), DATA/logs/NAME.log
//! DATA/postgres/        the private PostgreSQL of `--meta postgres` ([`postgres`])
//! ```
//!
//! The first start in a directory initializes everything; later ones start the same cluster
//! again, starting only the components that are not running. DATA and `logs/` are mode 0700
//! and every file written is 0600, whatever the umask.
//!
//! By default every component listens on a free loopback port of the caller's network
//! namespace. A [`Placement`] puts them elsewhere: given addresses, and a command each
//! component's `nasd` runs under (`ip netns exec NS`), which is how `nasd lab scaling` gives
//! every drive and the manager a network namespace and a rate-capped link of its own.
//!
//! # Layout
//! - [`cluster`] — [`Cluster`]: start, stop/kill/restart one component, drop stops all;
//!   [`down`] for a cluster left running.
//! - [`node`] — [`NodeId`] and the files `cluster.json` and `pids.json`.
//! - [`init`] — the first start: drives, manager, admin password, client config.
//! - [`process`] — spawning, readiness, signals, pid checks.
//! - [`postgres`] — the private PostgreSQL server of a cluster whose metadata lives there.
//! - [`error`] — [`ClusterError`].

pub mod cluster;
pub mod data;
pub mod error;
pub mod init;
pub mod node;
pub mod ports;
pub mod postgres;
pub mod process;

pub use cluster::{down, Cluster};
pub use data::pseudo_random;
pub use error::ClusterError;
pub use node::{ClusterFile, Node, NodeId, Pids};
use std::collections::BTreeMap;
use std::ffi::OsString;

/// The most drives one cluster may have.
pub const DRIVES_MAX: usize = 64;
/// The most managers one cluster may have.
pub const MANAGERS_MAX: usize = 8;

/// How a cluster starts.
#[derive(Clone, Debug)]
pub struct Options {
    /// Drives of a new cluster (ignored when the directory holds one).
    pub drives: usize,
    /// Capacity of each drive of a new cluster (default: the file system's free space).
    pub drive_capacity_bytes: Option<u64>,
    /// Start the processes in a process group of their own, so a ctrl-c in the terminal does
    /// not reach them (`nasd up --background`, with [`Cluster::detach`]).
    pub background: bool,
    /// Where the components listen and what they run under (default: loopback, nothing).
    pub placement: Placement,
    /// Where a new cluster's manager keeps its metadata (default: SQLite).
    pub meta: postgres::Meta,
    /// Managers of a new cluster (default 1): more than one take turns leading one
    /// PostgreSQL database (`meta`), the others standing by.
    pub managers: usize,
}

/// Where the components of a cluster run, when not on loopback in the caller's network
/// namespace.
///
/// The addresses are recorded in `cluster.json` at the first start and never change; the
/// wrappers are not recorded: every start (and [`Cluster::restart`]) uses the ones of the
/// [`Options`] it was given, so a cluster placed in network namespaces must be started again
/// with the same placement. The caller's thread must be able to reach every address (the
/// cluster checks that each component accepts connections, and registers the drives with
/// the manager from a thread of its own, which inherits the caller's network namespace).
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// The listen addresses of a new cluster: one per drive in order, then the manager's.
    /// Empty: free loopback ports. A manager address that is not loopback is added to the
    /// names of its TLS certificate, so clients can check it.
    pub addrs: Vec<String>,
    /// A command line that runs a component's `nasd` command line, by component: the
    /// component runs `WRAPPER... NASD ARGS...`, e.g. `ip netns exec NS nasd drive run ...`.
    /// The wrapper must exec `nasd` in place (not fork it), so the process started is the
    /// component and the cluster can check and signal it; `ip netns exec` does.
    pub wrappers: BTreeMap<NodeId, Vec<OsString>>,
}

impl Options {
    /// A new cluster of `drives` drives, stopped when its [`Cluster`] is dropped.
    pub fn drives(drives: usize) -> Options {
        Options {
            drives,
            drive_capacity_bytes: None,
            background: false,
            placement: Placement::default(),
            meta: postgres::Meta::Sqlite,
            managers: 1,
        }
    }
}
