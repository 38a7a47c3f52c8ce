//! The PostgreSQL engine on a real server: a throwaway one per test ([`TestServer`]), and the
//! whole conformance suite on it, one fresh database per run of the suite's constructor.

use super::server::PrivateServer;
use super::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

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

#[test]
fn reconnecting_keeps_everything_and_does_not_migrate_again() {
    let pg = TestServer::start();
    pg.create_database("reopen");
    {
        let mut s = PgStore::connect(&pg.conninfo("reopen")).unwrap();
        s.add_group("g").unwrap();
        s.add_user("u", "phc", false, 0).unwrap();
        s.link_new(ROOT_INO, "d", &crate::conformance::dir(0))
            .unwrap();
    }
    let s = PgStore::connect(&pg.conninfo("reopen")).unwrap();
    assert!(s.user_by_name("u").unwrap().is_some());
    assert!(s.lookup(ROOT_INO, "d").unwrap().is_some());
    assert_eq!(
        s.get_meta("schema").unwrap(),
        Some(SCHEMA_VERSION.to_le_bytes().to_vec())
    );
}

/// Rows the engine never writes read as errors, not panics: an inode of an unknown kind, a
/// uid out of range, a drive key of the wrong length.
#[test]
fn a_malformed_row_is_a_store_error() {
    let pg = TestServer::start();
    let mut s = pg.fresh_store();
    let ino = s
        .link_new(ROOT_INO, "f", &crate::conformance::file(0, 9))
        .unwrap();
    s.db.execute(
        "UPDATE inodes SET kind = 99 WHERE ino = $1",
        conn::params![ino as i64],
    )
    .unwrap();
    assert!(matches!(s.inode(ino), Err(StoreError::Db(e)) if e.contains("unknown kind")));
    s.db.execute(
        "UPDATE inodes SET kind = 1, uid = $2 WHERE ino = $1",
        conn::params![ino as i64, 1i64 << 40],
    )
    .unwrap();
    assert!(matches!(s.inode(ino), Err(StoreError::Db(e)) if e.contains("out of range")));
    s.db.execute_batch("INSERT INTO drives VALUES (1, 'a', 1, '\\x00', 1, '\\x00', '\\x00', 0)")
        .unwrap();
    assert!(matches!(s.drives(), Err(StoreError::Db(_))));
}

/// The manager calls its store from tokio tasks, on current-thread runtimes too (its tests):
/// the engine never enters a runtime of its own there.
#[tokio::test(flavor = "current_thread")]
async fn the_store_works_inside_a_current_thread_runtime() {
    let pg = TestServer::start();
    let mut s = pg.fresh_store();
    let uid = s.add_user("u", "phc", false, 0).unwrap();
    let task = tokio::spawn(async move { s.user_by_uid(uid).unwrap().map(|u| u.name) });
    assert_eq!(task.await.unwrap().as_deref(), Some("u"));
}

/// A schema-1 database where an admin held a wrap of a group they are not in (as every admin
/// did) opens as schema 2 without it; members keep theirs (issue 21 §5).
#[test]
fn a_schema_1_database_loses_the_wraps_of_admins_who_are_not_members() {
    let pg = TestServer::start();
    pg.create_database("v1");
    let (g, root, member) = {
        let mut s = PgStore::connect(&pg.conninfo("v1")).unwrap();
        let admins = s.add_group("admin").unwrap();
        let users = s.add_group("users").unwrap();
        let g = s.add_group("staff").unwrap();
        let root = s.add_user("root", "phc", true, admins).unwrap();
        let member = s.add_user("ann", "phc", false, users).unwrap();
        s.add_member(g, member).unwrap();
        let wraps = [(root, vec![1; 93]), (member, vec![2; 93])];
        s.set_group_key(g, 1, &[7; 32], None, &wraps).unwrap();
        s.db.execute_batch("DROP TABLE group_key_links; ALTER TABLE groups DROP COLUMN key_rekey;")
            .unwrap();
        s.put_meta("schema", &1u32.to_le_bytes()).unwrap();
        (g, root, member)
    };
    let s = PgStore::connect(&pg.conninfo("v1")).unwrap();
    assert_eq!(
        s.get_meta("schema").unwrap(),
        Some(SCHEMA_VERSION.to_le_bytes().to_vec())
    );
    assert_eq!(
        s.group_wrap(g, root).unwrap(),
        None,
        "a non-member admin's wrap"
    );
    assert_eq!(s.group_wrap(g, member).unwrap(), Some(vec![2; 93]));
    assert!(!s.group_key(g).unwrap().rekey);
}

#[test]
fn one_manager_leads_a_database_and_the_next_leads_when_its_connection_ends() {
    let pg = TestServer::start();
    pg.create_database("lead");
    let conninfo = pg.conninfo("lead");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut first = PgStore::connect(&conninfo).unwrap();
    let lead = first.lead().unwrap();
    // A second manager waits for the lead while the first holds it.
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut second = PgStore::connect(&conninfo).unwrap();
        let lead = second.lead().unwrap();
        tx.send(()).unwrap();
        (second, lead)
    });
    assert!(rx.recv_timeout(Duration::from_millis(1500)).is_err());
    // The server ends the first one's session (as when its manager dies): the first learns
    // it lost the lead, and the second takes it.
    let admin = PgStore::connect(&pg.conninfo("lead")).unwrap();
    let ended = admin
        .db
        .query_row(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted AND classid = $1 AND objid = $2) t",
            &[&((LEADER_LOCK >> 32) as u32), &(LEADER_LOCK as u32)],
            |r| r.get::<i64>(0),
        )
        .unwrap();
    assert_eq!(ended, 1);
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), lead.lost())
            .await
            .expect("the first manager learns its lead ended")
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the second manager leads once the first's connection ended");
    let (second, _lead) = waiter.join().unwrap();
    assert!(second.get_meta("schema").unwrap().is_some());
    assert!(
        first.get_meta("schema").is_err(),
        "the first can no longer write"
    );
}
