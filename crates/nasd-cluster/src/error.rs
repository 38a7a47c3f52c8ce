//! [`ClusterError`]: what can go wrong setting up, starting, stopping or reaching a local
//! cluster. Each variant names the component or file concerned and keeps its cause as the
//! `source`, so an operator sees both.

use crate::node::NodeId;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("--meta: {0}")]
    Meta(String),
    #[error("the cluster's PostgreSQL")]
    Postgres(#[source] nasd_manager::postgres::server::ServerError),
    #[error("--drives must be between 1 and {max}", max = crate::DRIVES_MAX)]
    DriveCount { drives: usize },
    /// More managers than one need a PostgreSQL database they all reach (and loopback).
    #[error(
        "--managers {managers}: a cluster has 1 to {max} managers, and more than one need \
         --meta postgres (one database they take turns leading) on loopback",
        max = crate::MANAGERS_MAX
    )]
    ManagerCount { managers: usize },
    /// A [`crate::Placement`] names a different number of addresses than the cluster has
    /// components.
    #[error("a placement of {drives} drives and a manager needs {} addresses, not {addrs}", drives + 1)]
    PlacementAddrs { drives: usize, addrs: usize },
    /// A file or directory of the cluster could not be made, read or written.
    #[error("{what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A private directory or file could not be made (or is open to others).
    #[error(transparent)]
    Private(#[from] nasd_private::PrivacyError),
    #[error("{}", path.display())]
    Malformed {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("initializing the drive in {}", dir.display())]
    DriveInit {
        dir: PathBuf,
        #[source]
        source: nasd_drive::DriveError,
    },
    #[error("initializing the manager in {}", dir.display())]
    ManagerInit {
        dir: PathBuf,
        #[source]
        source: nasd_manager::MgrError,
    },
    #[error("finding a free loopback port")]
    Port(#[source] std::io::Error),
    #[error("starting {node}")]
    Spawn {
        node: NodeId,
        #[source]
        source: std::io::Error,
    },
    #[error("{node} exited ({status}) before it served on {addr}:\n{log_tail}")]
    Exited {
        node: NodeId,
        status: std::process::ExitStatus,
        addr: String,
        log_tail: String,
    },
    #[error("{node} did not listen on {addr} within {ms} ms:\n{log_tail}", ms = crate::process::READY_TIMEOUT_MS)]
    NotReady {
        node: NodeId,
        addr: String,
        log_tail: String,
    },
    #[error("waiting for {node}")]
    Wait {
        node: NodeId,
        #[source]
        source: std::io::Error,
    },
    #[error("this cluster has no {0}")]
    NoSuchNode(NodeId),
    #[error("{0} is not running")]
    NodeDown(NodeId),
    #[error("no running cluster in {} (no pids.json)", dir.display())]
    NotRunning {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] nasd_client::config::ConfigError),
    /// Logging in to the manager or registering a drive failed. (Boxed: a file system
    /// error is large, and every other variant is small.)
    #[error("{what}")]
    Manager {
        what: String,
        #[source]
        source: Box<nasd_client::files::FsError>,
    },
}
