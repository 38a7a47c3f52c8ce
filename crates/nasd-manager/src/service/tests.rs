use super::files::{is_prepared, is_prepared_at, prepared_marker};
use super::perms::{R, W, X};
use super::*;

fn caller(uid: u32, groups: Vec<u32>) -> Caller {
    Caller {
        uid,
        name: "u".into(),
        admin: false,
        gid: groups[0],
        groups,
        session: 0,
        via: None,
    }
}

#[test]
fn modes_pick_user_group_other() {
    let mut i = crate::conformance::file(10, 16);
    i.gid = 50;
    i.mode = 0o640;
    assert!(may(&caller(10, vec![1]), &i, R | W));
    assert!(may(&caller(11, vec![50]), &i, R));
    assert!(!may(&caller(11, vec![50]), &i, W));
    assert!(!may(&caller(12, vec![1]), &i, R));
    let admin = Caller {
        admin: true,
        ..caller(12, vec![1])
    };
    assert!(may(&admin, &i, R | W | X));
}

#[test]
fn a_prepared_file_is_named_by_its_directory_or_a_file_in_it() {
    let s = Staged {
        layout: FileLayout::single(ObjRef {
            drive: nasd_proto::DriveId(1),
            partition: nasd_proto::PartitionId(1),
            object: nasd_proto::ObjectId(9),
        }),
        acv: 0,
        uid: 10,
        path: prepared_marker(&["a", "b"]),
        mode: 0o644,
        created_ms: 0,
        ino: 5,
        new_file: true,
        base_version: None,
        escrow: None,
    };
    assert_eq!(s.path, "/a/b/");
    assert_eq!(prepared_marker(&[]), "/");
    for yes in ["/a/b/f", "/a//b/./f", "/a/b/", "/a/b"] {
        assert!(is_prepared_at(&s, yes), "{yes}");
    }
    for no in ["/a/f", "/a/b/c/f", "/a/bb/f", "a/b/f", "/a/../a/b/f"] {
        assert!(!is_prepared_at(&s, no), "{no}");
    }
    // An ordinary upload's record is never taken for a prepared one.
    let upload = Staged {
        path: "/a/b/f".into(),
        ..s.clone()
    };
    assert!(!is_prepared(&upload) && !is_prepared_at(&upload, "/a/b/f"));
    let overwrite = Staged {
        new_file: false,
        ..s
    };
    assert!(!is_prepared_at(&overwrite, "/a/b/f"));
}

#[test]
fn paths_refuse_traversal_and_long_names() {
    assert_eq!(split_path("/a//b/./c/").unwrap(), vec!["a", "b", "c"]);
    assert!(split_path("/").unwrap().is_empty());
    assert_eq!(
        split_path("/a/../b").unwrap_err().status,
        MgrStatus::BadName
    );
    assert_eq!(split_path("a/b").unwrap_err().status, MgrStatus::BadName);
    let long = format!("/{}", "x".repeat(NAME_BYTES_MAX + 1));
    assert_eq!(
        split_path(&long).unwrap_err().status,
        MgrStatus::NameTooLong
    );
    assert_eq!(split_path("/a\0b").unwrap_err().status, MgrStatus::BadName);
}

fn manager() -> Arc<Manager> {
    let st = crate::sqlite::SqliteStore::in_memory().unwrap();
    Manager::new(Box::new(st), Policy::default()).unwrap()
}

fn admin() -> Caller {
    Caller {
        admin: true,
        ..caller(0, vec![0])
    }
}

#[test]
fn new_names_may_not_hold_control_characters() {
    for bad in [
        "a\nb",
        "a\rb",
        "x\u{1b}[31m",
        "t\tb",
        "d\u{7f}",
        "c1\u{85}",
        "c\u{9f}",
    ] {
        let e = check_new_name(&format!("/{bad}"), bad).unwrap_err();
        assert_eq!(e.status, MgrStatus::BadName, "{bad:?}");
        assert!(e.detail.contains("control character"), "{}", e.detail);
        assert!(
            !e.detail.chars().any(|c| c.is_control()),
            "escaped: {:?}",
            e.detail
        );
    }
    for ok in ["plain", "caf\u{e9}", "\u{a0}nbsp", "\u{200b}zw", "日本"] {
        check_new_name(ok, ok).unwrap();
    }
}

#[tokio::test]
async fn names_stored_before_the_rule_stay_usable_but_none_is_made() {
    let m = manager();
    let a = admin();
    for bad in ["/a\nb", "/x\u{1b}[2J", "/d\u{7f}", "/c\u{85}"] {
        assert_eq!(
            m.mkdir(&a, bad, 0o755).unwrap_err().status,
            MgrStatus::BadName
        );
    }
    m.st()
        .link_new(ROOT_INO, "old\nname", &crate::conformance::dir(0))
        .unwrap();
    let names: Vec<_> = m.readdir(&a, "/", "", usize::MAX, None).await.unwrap();
    assert_eq!(names[0].name, "old\nname");
    m.stat(&a, "/old\nname").await.unwrap();
    m.mkdir(&a, "/old\nname/inside", 0o755).unwrap();
    m.rmdir(&a, "/old\nname/inside").unwrap();
    m.rename(&a, "/old\nname", "/clean", 0).await.unwrap();
    let back = m.rename(&a, "/clean", "/old\nname", 0).await.unwrap_err();
    assert_eq!(back.status, MgrStatus::BadName);
    m.st()
        .link_new(ROOT_INO, "gone\r", &crate::conformance::dir(0))
        .unwrap();
    m.rmdir(&a, "/gone\r").unwrap();
    m.rmdir(&a, "/clean").unwrap();
}

#[test]
fn the_sticky_bit_leaves_removal_to_the_owners_and_admins() {
    let mut dir = crate::conformance::dir(10);
    dir.mode = 0o1777;
    let entry = crate::conformance::dir(11);
    assert!(
        sticky_allows(&caller(11, vec![1]), &dir, &entry),
        "entry owner"
    );
    assert!(
        sticky_allows(&caller(10, vec![1]), &dir, &entry),
        "dir owner"
    );
    assert!(sticky_allows(&admin(), &dir, &entry));
    assert!(!sticky_allows(&caller(12, vec![1]), &dir, &entry));
    dir.mode = 0o777;
    assert!(sticky_allows(&caller(12, vec![1]), &dir, &entry));
}

#[tokio::test]
async fn in_a_sticky_directory_others_may_not_remove_rename_or_replace() {
    let m = manager();
    let (alice, bob) = (caller(1000, vec![100]), caller(1001, vec![100]));
    m.mkdir(&admin(), "/tmp", 0o1777).unwrap();
    m.mkdir(&alice, "/tmp/a", 0o755).unwrap();
    m.mkdir(&bob, "/tmp/b", 0o755).unwrap();
    let denied = |r: MgrResult<()>| {
        let e = r.unwrap_err();
        assert_eq!(e.status, MgrStatus::PermissionDenied);
        assert!(e.detail.contains("sticky"), "{}", e.detail);
    };
    denied(m.rmdir(&bob, "/tmp/a"));
    denied(m.rename(&bob, "/tmp/a", "/tmp/mine", 0).await);
    denied(m.rename(&bob, "/tmp/b", "/tmp/a", 0).await);
    m.rename(&bob, "/tmp/b", "/tmp/b2", 0).await.unwrap();
    m.rmdir(&bob, "/tmp/b2").unwrap();
    m.rename(&alice, "/tmp/a", "/tmp/a2", 0).await.unwrap();
    m.rmdir(&admin(), "/tmp/a2").unwrap();
}

#[test]
fn fs_attr_round_trips() {
    let mut i = crate::conformance::file(1000, 16);
    i.ino = 77;
    i.gid = 100;
    assert_eq!(
        FsAttr::decode(&FsAttr::encode(&i, false)),
        Some((0o644, 1000, 100, 77))
    );
    assert_eq!(FsAttr::decode(&[0; FS_SPECIFIC_BYTES]), None);
}

/// The client reads the inode number out of the record the manager writes (pair check
/// across the two crates: the client cannot depend on this one).
#[test]
fn the_client_reads_the_inode_the_manager_writes() {
    let mut i = crate::conformance::file(1000, 16);
    i.ino = 0x0102_0304_0506_0708;
    assert_eq!(
        nasd_client::files::fs_specific_ino(&FsAttr::encode(&i, false)),
        Some(i.ino)
    );
    assert!(nasd_client::files::fs_specific_encrypted(&FsAttr::encode(
        &i, true
    )));
    assert!(!nasd_client::files::fs_specific_encrypted(&FsAttr::encode(
        &i, false
    )));
    assert_eq!(
        nasd_client::files::fs_specific_ino(&[0; FS_SPECIFIC_BYTES]),
        None
    );
}

/// A directory its caller may read but not search lists names, inode numbers and kinds, and
/// nothing a lookup would give (Linux lists such a directory); without read, nothing.
#[tokio::test]
async fn a_directory_read_but_not_searched_lists_names_and_kinds_only() {
    let m = manager();
    let a = admin();
    m.mkdir(&a, "/d", 0o755).unwrap();
    m.mkdir(&a, "/d/sub", 0o755).unwrap();
    m.chmod(&a, "/d", 0o744).await.unwrap();
    let other = caller(7, vec![7]);
    let listed = m.readdir(&other, "/d", "", usize::MAX, None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "sub");
    assert_eq!(listed[0].stat.kind, FileKind::Dir);
    assert_ne!(listed[0].stat.ino, 0);
    assert_eq!((listed[0].stat.mode, listed[0].stat.nlink), (0, 0));
    assert_eq!(
        m.stat(&other, "/d/sub").await.unwrap_err().status,
        MgrStatus::PermissionDenied
    );
    m.chmod(&a, "/d", 0o711).await.unwrap();
    assert_eq!(
        m.readdir(&other, "/d", "", usize::MAX, None)
            .await
            .unwrap_err()
            .status,
        MgrStatus::PermissionDenied
    );
}
