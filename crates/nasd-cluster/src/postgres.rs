//! The private PostgreSQL of a cluster made with `nasd up --meta postgres`: a server from the
//! system's binaries in `DATA/postgres`, on a unix socket in that directory and no TCP port,
//! holding the manager's metadata in its database [`DATABASE`]. It is started before the
//! manager at every start and stopped after it (when the [`crate::Cluster`] is dropped, or by
//! [`crate::down`]). Run as root, it runs as the `postgres` account
//! ([`nasd_manager::postgres::server`] says how, and why `DATA` is then mode 0701).

use crate::error::ClusterError;
use nasd_manager::postgres::server::PrivateServer;
use std::path::{Path, PathBuf};

/// The directory of a cluster's private server.
pub const DIR_NAME: &str = "postgres";
/// The database the manager's metadata lives in.
pub const DATABASE: &str = "nasd";

/// Where a new cluster's manager keeps its metadata (`nasd up --meta`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Meta {
    /// `meta.sqlite` in the manager's directory.
    #[default]
    Sqlite,
    /// A private PostgreSQL server in `DATA/postgres` (`--meta postgres`).
    PrivatePostgres,
    /// A PostgreSQL database the user runs (a connection string).
    Postgres(String),
}

impl Meta {
    /// `sqlite`, `postgres` (a private server) or a PostgreSQL connection string.
    pub fn parse(text: &str) -> Result<Meta, ClusterError> {
        match text.trim() {
            "postgres" | "postgresql" => Ok(Meta::PrivatePostgres),
            t => match nasd_manager::setup::Meta::parse(t) {
                Ok(nasd_manager::setup::Meta::Sqlite) => Ok(Meta::Sqlite),
                Ok(nasd_manager::setup::Meta::Postgres(c)) => Ok(Meta::Postgres(c)),
                Err(e) => Err(ClusterError::Meta(e.detail)),
            },
        }
    }
}

/// The private server's directory in the cluster directory `dir`.
pub fn dir(dir: &Path) -> PathBuf {
    dir.join(DIR_NAME)
}

/// The cluster in `dir` has a private server.
pub fn has_private(dir: &Path) -> bool {
    self::dir(dir).exists()
}

fn server(dir: &Path) -> Result<PrivateServer, ClusterError> {
    PrivateServer::new(&self::dir(dir)).map_err(ClusterError::Postgres)
}

/// Starts the private server of the cluster in `dir` (making it first, with its database, if
/// it is new); returns the manager's connection string.
pub fn start(dir: &Path) -> Result<String, ClusterError> {
    let s = server(dir)?;
    s.start().map_err(ClusterError::Postgres)?;
    s.create_database(DATABASE)
        .map_err(ClusterError::Postgres)?;
    Ok(s.conninfo(DATABASE))
}

/// Stops the private server of the cluster in `dir`, if it has one; whether one was running.
pub fn stop(dir: &Path) -> Result<bool, ClusterError> {
    if !has_private(dir) {
        return Ok(false);
    }
    let s = server(dir)?;
    let was = s.is_running();
    s.stop().map_err(ClusterError::Postgres)?;
    Ok(was)
}
