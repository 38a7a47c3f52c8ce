//! Typed errors of the lab. Every experiment returns `LabError`; only the `nasd` binary turns them
//! into `anyhow` errors for the user.

use std::path::PathBuf;

/// What can go wrong while running an experiment or writing its outputs.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A trace file could not be read.
    #[error("cannot read trace {path}: {source}")]
    TraceIo {
        /// The trace file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A trace line is not in the format of `docs/lab.md`.
    #[error("trace {path} line {line}: {reason}")]
    TraceFormat {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A trace holds no request.
    #[error("trace {0} holds no request")]
    TraceEmpty(PathBuf),
    /// Writing an output file (CSV, SVG) failed.
    #[error("cannot write {path}: {source}")]
    Output {
        /// The output file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Drawing a plot failed.
    #[error("cannot draw {path}: {reason}")]
    Plot {
        /// The SVG file.
        path: PathBuf,
        /// The plotting library's message.
        reason: String,
    },
    /// A cryptographic primitive refused its input (key generation, signing, AEAD).
    #[error("{algorithm}: {reason}")]
    Crypto {
        /// The algorithm that failed.
        algorithm: String,
        /// Its message.
        reason: String,
    },
    /// An instrumented scheme from nasd-crypto failed on a model request.
    #[error("instrumented {scheme} {op} of {size_bytes} bytes at {offset_bytes}: {reason}")]
    Counted {
        /// The integrity scheme.
        scheme: String,
        /// read or write.
        op: String,
        /// Request size.
        size_bytes: u64,
        /// Request offset.
        offset_bytes: u64,
        /// What failed.
        reason: String,
    },
    /// A flag of an experiment is out of range.
    #[error("{0}")]
    Usage(String),
    /// The experiment cannot run on this machine (not root, no network namespaces, no
    /// rate cap): it says what is missing.
    #[error("unavailable here: {0}")]
    Unavailable(String),
    /// Setting up the experiment's network failed.
    #[error("{command}: {detail}")]
    Network {
        /// The command (or system call) that failed.
        command: String,
        /// What it said.
        detail: String,
    },
    /// The local cluster of the scaling experiment could not start.
    #[error("the cluster: {0}")]
    Cluster(#[source] Box<nasd_cluster::ClusterError>),
    /// A client of the scaling experiment failed.
    #[error("a client: {0}")]
    Client(String),
    /// The SAD server failed or could not be reached.
    #[error("the SAD server: {0}")]
    Sad(String),
    /// A phase of the Andrew-style benchmark failed, or saw something else than the tree.
    #[error("{0}")]
    Andrew(String),
    /// The Andrew benchmark's baseline file server or its mount failed.
    #[error("the baseline server: {0}")]
    Baseline(String),
    /// One of nasd-e2e's integrity schemes refused an operation of the `eint` experiment.
    #[error("{scheme} {op} of file {file} block {block}")]
    Eint {
        /// MT-EINT, RAND-EINT or COMP-EINT.
        scheme: String,
        /// create, write, open, read or storage.
        op: &'static str,
        /// The file (its index in the experiment's set).
        file: u64,
        /// The block.
        block: u64,
        /// What the scheme said.
        #[source]
        source: nasd_e2e::EintError,
    },
    /// A scheme of the `eint` experiment read back other bytes than were written.
    #[error("{scheme} read of file {file} block {block} returned other bytes than were written")]
    EintMismatch {
        /// MT-EINT, RAND-EINT or COMP-EINT.
        scheme: String,
        /// The file.
        file: u64,
        /// The block.
        block: u64,
    },
    /// The directory tree given to `eint --tree` cannot be walked.
    #[error("cannot walk {path}")]
    Tree {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// SIGINT or SIGTERM arrived; the run stopped and cleaned up.
    #[error("interrupted")]
    Interrupted,
}
