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
//! DATA/drive-N/, DATA/manager/, DATA/logs/NAME.log
//! ```
//!
//! The first start in a directory initializes everything; later ones start the same cluster
//! again, starting only the components that are not running. DATA and `logs/` are mode 0700
//! and every file written is 0600, whatever the umask.
//!
//! # Layout
//! - [`cluster`] — [`Cluster`]: start, stop/kill/restart one component, drop stops all;
//!   [`down`] for a cluster left running.
//! - [`node`] — [`NodeId`] and the files `cluster.json` and `pids.json`.
//! - [`init`] — the first start: drives, manager, admin password, client config.
//! - [`process`] — spawning, readiness, signals, pid checks.
//! - [`error`] — [`ClusterError`].

pub mod cluster;
pub mod error;
pub mod init;
pub mod node;
pub mod process;

pub use cluster::{down, Cluster};
pub use error::ClusterError;
pub use node::{ClusterFile, Node, NodeId, Pids};

/// The most drives one cluster may have.
pub const DRIVES_MAX: usize = 64;

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
}

impl Options {
    /// A new cluster of `drives` drives, stopped when its [`Cluster`] is dropped.
    pub fn drives(drives: usize) -> Options {
        Options {
            drives,
            drive_capacity_bytes: None,
            background: false,
        }
    }
}
