//! The PostgreSQL engine on a real server: a throwaway one per test ([`TestServer`]), and the
//! whole conformance suite on it, one fresh database per run of the suite's constructor.

use super::server::PrivateServer;
use super::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// A PostgreSQL server in a temporary directory, stopped and removed on drop. Without
/// PostgreSQL's binaries it panics saying how to install them: a test that needs a server
/// fails rather than skips.
pub struct TestServer {
    server: PrivateServer,
    databases: AtomicU32,
    _tmp: tempfile::TempDir,
}

impl TestServer {
    pub fn start() -> TestServer {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let server = PrivateServer::new(&tmp.path().join("pg"))
            .unwrap_or_else(|e| panic!("a PostgreSQL server for the tests: {e}"));
        server
            .start()
            .unwrap_or_else(|e| panic!("starting PostgreSQL for the tests: {e}"));
        TestServer {
            server,
            databases: AtomicU32::new(0),
            _tmp: tmp,
        }
    }

    /// A store on a new, empty database.
    pub fn fresh_store(&self) -> PgStore {
        let name = format!("t{}", self.databases.fetch_add(1, Ordering::Relaxed));
        self.server.create_database(&name).unwrap();
        PgStore::connect(&self.server.conninfo(&name)).unwrap()
    }

    pub fn conninfo(&self, dbname: &str) -> String {
        self.server.conninfo(dbname)
    }

    pub fn create_database(&self, name: &str) {
        self.server.create_database(name).unwrap();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Err(e) = self.server.stop() {
            eprintln!("stopping the test's PostgreSQL: {e}");
        }
    }
}

#[test]
fn conformance_on_postgresql() {
    let pg = TestServer::start();
    crate::conformance::run(|| pg.fresh_store());
}
