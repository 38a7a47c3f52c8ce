//! The orphan scrub against a real drive process: objects no name points to (a crash between
//! a drive create and the name commit, an abandoned overwrite) are reclaimed once older than
//! the grace period; referenced objects, young objects and well-known objects stay.

use nasd_client::object::Target;
use nasd_manager::drives::MANAGER_PROTECTION;
use nasd_manager::scrub::{partition_contents, reclaim_orphans, ORPHAN_GRACE_MS};
use nasd_manager::service::{Caller, Manager, Policy};
use nasd_proto::manager::{calls, Created, Grant, MgrStatus, StagedGrant};
use nasd_proto::ObjectId;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const NASD: &str = env!("CARGO_BIN_EXE_nasd");

struct Drive {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Drop for Drive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_drive() -> Drive {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("drive");
    let o = Command::new(NASD)
        .args(["drive", "init", "--data", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut child = Command::new(NASD)
        .args(["drive", "run", "--data", data.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{line}");
    Drive { child, addr, dir }
}

fn admin() -> Caller {
    Caller {
        uid: 0,
        name: "admin".into(),
        admin: true,
        gid: 0,
        groups: vec![0],
        session: 0,
        via: None,
    }
}

#[test]
fn orphans_older_than_the_grace_period_are_reclaimed_and_nothing_else() {
    let drive = start_drive();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = nasd_manager::sqlite::SqliteStore::in_memory().unwrap();
        let m = Manager::new(Box::new(store), Policy::default()).unwrap();
        let key = std::fs::read_to_string(drive.dir.path().join("drive/keys/drive.key")).unwrap();
        m.add_drive(&drive.addr, &key, None).await.unwrap();
        let d = m.drives.ids()[0];
        let a = admin();

        // A referenced file, a staged overwrite of it that is never committed, and an object
        // created as if the manager crashed before committing its name.
        let kept = match m.create(&a, "/kept", 0o644, true, 0).await.unwrap() {
            Created::Opened(Grant { layout, .. }) => layout.components[0].object,
            r => panic!("{r:?}"),
        };
        let staged = match m.create(&a, "/kept", 0o644, false, 0).await.unwrap() {
            Created::Staged(StagedGrant {
                grant: Grant { layout, .. },
                ..
            }) => layout.components[0].object,
            r => panic!("{r:?}"),
        };
        let rec = m.drives.record(d).unwrap();
        let conn = nasd_client::DriveConn::connect(&drive.addr).await.unwrap();
        let auth = nasd_client::Auth::Key {
            kind: nasd_proto::KeyType::Working,
            key: rec.working_key.clone(),
            suite: rec.suite,
            drive: rec.drive,
        };
        let t = Target {
            partition: rec.partition,
            object: ObjectId::ANY,
            protection: MANAGER_PROTECTION,
        };
        let (crashed, _) = conn.create(&auth, t, None).await.unwrap();
        let before = partition_contents(&m, d).await.unwrap();
        for o in [kept, staged, crashed] {
            assert!(before.contains(&o), "{o} not listed in {before:?}");
        }

        // Everything is younger than the real grace period: nothing goes.
        let r = reclaim_orphans(&m, ORPHAN_GRACE_MS).await.unwrap();
        assert_eq!((r.removed, r.young), (0, 2), "{r:?}");
        assert_eq!(partition_contents(&m, d).await.unwrap(), before);

        // Once past a (short) grace period, both orphans go; the file and the well-known
        // objects stay, and the abandoned overwrite can no longer be committed.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let r = reclaim_orphans(&m, 5).await.unwrap();
        assert_eq!((r.removed, r.expired_staged), (2, 1), "{r:?}");
        let after = partition_contents(&m, d).await.unwrap();
        assert!(after.contains(&kept), "{after:?}");
        assert!(
            !after.contains(&staged) && !after.contains(&crashed),
            "{after:?}"
        );
        let well_known: Vec<_> = before
            .iter()
            .filter(|o| **o < ObjectId::FIRST_ORDINARY)
            .collect();
        assert!(well_known.iter().all(|o| after.contains(o)), "{after:?}");
        if before.contains(&ObjectId::FIRST_OBJECT) {
            assert!(after.contains(&ObjectId::FIRST_OBJECT));
        }
        let e = m
            .commit(
                &a,
                calls::Commit {
                    path: "/kept".into(),
                    drive: d,
                    object: staged,
                    size: 0,
                    stale: 0,
                    xattrs: None,
                    e2e: None,
                    exclusive: false,
                },
            )
            .await
            .unwrap_err();
        assert_eq!(e.status, MgrStatus::NoSuchPath, "{e}");
        m.open(&a, "/kept", false, 0).await.unwrap();
    });
}
