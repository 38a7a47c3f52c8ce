//! The conformance suite every [`MetaStore`] implementation runs (garage's `db/test.rs`):
//! call [`run`] with a constructor of empty stores.

use crate::store::*;
use nasd_proto::manager::{
    DriveCount, E2eCommit, E2eState, FileCounts, FileKind, KeyLogEntry, PolicyReaders, UserKeys,
    Xattr,
};
use nasd_proto::{DriveId, ObjectId, PartitionId, Suite};

/// A fresh directory inode owned by `uid`.
pub fn dir(uid: u32) -> Inode {
    Inode {
        ino: 0,
        kind: FileKind::Dir,
        mode: 0o755,
        uid,
        gid: 0,
        parent: 0,
        ctime_us: 1,
        mtime_us: 1,
        atime_us: 1,
        rdev: 0,
        layout: None,
        size: None,
        dir_layout: None,
        acv: 0,
        e2e: None,
        target: None,
        charged: None,
    }
}

/// Object `object` of drive 7.
pub fn obj(object: u64) -> ObjRef {
    ObjRef {
        drive: DriveId(7),
        partition: PartitionId(1),
        object: ObjectId(object),
    }
}

/// A fresh one-object file inode on object `object` of drive 7.
pub fn file(uid: u32, object: u64) -> Inode {
    Inode {
        kind: FileKind::File,
        mode: 0o644,
        layout: Some(FileLayout::single(obj(object))),
        ..dir(uid)
    }
}

/// A new file's inode made at `created_ms`, on no object yet (a reservation).
fn bare(created_ms: u64) -> Inode {
    Inode {
        layout: None,
        ..fresh(created_ms)
    }
}

/// A new file's inode made at `created_ms`.
fn fresh(created_ms: u64) -> Inode {
    Inode {
        ctime_us: created_ms * 1000,
        ..file(5, 0)
    }
}

/// The staged upload of new file `ino` as `/n` on object `object`.
fn new_upload(object: u64, created_ms: u64, ino: u64) -> Staged {
    Staged {
        path: "/n".into(),
        new_file: true,
        ..staged(object, created_ms, ino)
    }
}

/// Commits staged object `o` as `name` in the root, replacing `replacing`, with no size,
/// stale components, attributes, charge or end-to-end state.
fn commit_plain<S: MetaStore>(
    s: &mut S,
    name: &str,
    o: ObjRef,
    replacing: Option<u64>,
) -> StoreResult<Option<Inode>> {
    s.commit_staged(ROOT_INO, name, o, replacing, None, 0, None, None, None, 0)
}

/// The first object of an inode's layout.
fn first(i: &Inode) -> Option<ObjRef> {
    i.layout.as_ref().map(|l| l.first())
}

/// Runs every check against stores made by `make` (each call must give an empty store).
/// After each, the file counts the store kept equal a walk of its files.
pub fn run<S: MetaStore>(make: impl Fn() -> S) {
    let checks: [fn(&mut S); 14] = [
        users_and_groups,
        namespace,
        rename,
        posix_times_and_special_files,
        drives_sessions_meta,
        staged_commits,
        staged_new_files,
        revocation_intents,
        directory_pages,
        posix_names,
        extended_attributes,
        quotas,
        end_to_end,
        file_counts,
    ];
    for check in checks {
        let mut s = make();
        check(&mut s);
        agreed(&mut s);
    }
}

/// The counts the store kept, checked against a walk of every file.
fn agreed<S: MetaStore>(s: &mut S) -> FileCounts {
    let kept = s.counts().unwrap();
    assert_eq!(
        kept,
        s.recount(false).unwrap(),
        "kept counts against a walk"
    );
    kept
}

/// A layout over drives 1 to `n` (objects 100 + i), with `stale` components.
fn striped(geometry: &str, n: u64, stale: u64) -> FileLayout {
    FileLayout {
        version: 1,
        geometry: geometry.into(),
        components: (1..=n)
            .map(|d| ObjRef {
                drive: DriveId(d),
                partition: PartitionId(1),
                object: ObjectId(100 + d),
            })
            .collect(),
        stale,
    }
}

fn drive_count(drive: u64, files: u64, stale: u64) -> DriveCount {
    DriveCount {
        drive: DriveId(drive),
        files,
        stale,
    }
}

/// The kept file counts (schema 11) follow every kind of change — uploads in flight not
/// counted until committed, commits with missed components, rebuilds swapped in, sizes,
/// one-object files, overwrites, hard links, renames over a file, removals — and equal a
/// walk after each; degraded files are counted with no, one and two drives down; stale files
/// are listed from their index; a file's name is found from its inode.
fn file_counts<S: MetaStore>(s: &mut S) {
    assert_eq!(agreed(s), FileCounts::default());
    // A new rs:2+2 file laid out with its fourth drive down: that component is absent.
    let mut l = striped("rs:2+2", 4, 0b1000);
    l.components[3].object = ObjectId::ABSENT;
    let r = s.reserve_inode(ROOT_INO, &bare(10)).unwrap();
    let up = Staged {
        layout: l.clone(),
        ..new_upload(0, 10, r)
    };
    s.put_staged(&up).unwrap();
    assert_eq!(agreed(s), FileCounts::default(), "an upload in flight");
    let key = up.layout.key();
    assert_eq!(key.drive, DriveId(1));
    // Its writer missed component 1 too.
    s.commit_staged(
        ROOT_INO,
        "f",
        key,
        None,
        Some(1000),
        0b0010,
        None,
        None,
        None,
        0,
    )
    .unwrap();
    let want = FileCounts {
        files: 1,
        stale_files: 1,
        stale_components: 2,
        bytes: 1000,
        stale_bytes: 1000,
        drives: vec![
            drive_count(1, 1, 0),
            drive_count(2, 1, 1),
            drive_count(3, 1, 0),
            drive_count(4, 1, 1),
        ],
    };
    assert_eq!(agreed(s), want);
    assert_eq!(s.stale_files_after(0, 10).unwrap(), vec![r]);
    assert_eq!(s.degraded(&[], 10).unwrap(), (1, vec![r]));
    assert_eq!(s.name_of(r).unwrap(), Some((ROOT_INO, "f".into())));

    // A one-object file on drive 7, not degraded.
    let g = s.link_new(ROOT_INO, "g", &file(5, 16)).unwrap();
    assert_eq!(agreed(s).files, 2);
    assert_eq!(s.degraded(&[DriveId(7)], 10).unwrap(), (2, vec![r, g]));
    assert_eq!(s.degraded(&[DriveId(1)], 10).unwrap(), (1, vec![r]));
    assert_eq!(
        s.degraded(&[DriveId(1), DriveId(7)], 1).unwrap(),
        (2, vec![r])
    );

    file_counts_after_rebuilds(s, r, g);
}

/// [`file_counts`] continued with the striped file `r` (stale components 1 and 3) and the
/// one-object file `g`: rebuilds swapped in, an overwrite, links, a size, renames, removals.
fn file_counts_after_rebuilds<S: MetaStore>(s: &mut S, r: u64, g: u64) {
    // The absent component rebuilt onto drive 5, then component 1 on its own drive, with
    // the file grown meanwhile.
    let mut next = s.inode(r).unwrap().unwrap().layout.unwrap();
    let v = next.version;
    next.components[3] = ObjRef {
        drive: DriveId(5),
        partition: PartitionId(1),
        object: ObjectId(300),
    };
    next.stale = 0b0010;
    let v = s.swap_layout(r, v, &next, None).unwrap();
    next.components[1].object = ObjectId(301);
    next.stale = 0;
    s.swap_layout(r, v, &next, Some(5000)).unwrap();
    let c = agreed(s);
    assert_eq!(
        (
            c.files,
            c.stale_files,
            c.stale_components,
            c.bytes,
            c.stale_bytes
        ),
        (2, 0, 0, 5000, 0)
    );
    assert_eq!(
        c.drives,
        vec![
            drive_count(1, 1, 0),
            drive_count(2, 1, 0),
            drive_count(3, 1, 0),
            drive_count(5, 1, 0),
            drive_count(7, 1, 0),
        ]
    );
    assert!(s.stale_files_after(0, 10).unwrap().is_empty());
    assert_eq!(s.degraded(&[], 10).unwrap(), (0, vec![]));

    // An overwrite of g moves it to another object; a second name and its removal keep it
    // counted once; a size kept by an update counts.
    let o = staged(17, 10, g);
    s.put_staged(&o).unwrap();
    commit_plain(s, "g", o.layout.first(), Some(g)).unwrap();
    s.link(g, ROOT_INO, "g2").unwrap();
    assert_eq!(agreed(s).files, 2);
    s.unlink(ROOT_INO, "g").unwrap();
    assert_eq!(agreed(s).files, 2);
    let mut gi = s.inode(g).unwrap().unwrap();
    gi.size = Some(77);
    s.update_inode(&gi).unwrap();
    assert_eq!(agreed(s).bytes, 5077);

    // A rename over the striped file removes it; the last name of g goes too.
    s.rename(ROOT_INO, "g2", ROOT_INO, "f").unwrap();
    let c = agreed(s);
    assert_eq!((c.files, c.bytes, c.drives.len()), (1, 77, 1));
    s.unlink(ROOT_INO, "f").unwrap();
    assert_eq!(agreed(s), FileCounts::default());
    assert_eq!(s.name_of(g).unwrap(), None);
    // A reservation that never commits is never counted.
    let r2 = s.reserve_inode(ROOT_INO, &bare(20)).unwrap();
    let up2 = Staged {
        layout: striped("mirror:2", 2, 0b01),
        ..new_upload(0, 20, r2)
    };
    s.put_staged(&up2).unwrap();
    s.abort_staged(up2.layout.key()).unwrap();
    assert_eq!(agreed(s), FileCounts::default());
    assert_eq!(s.recount(true).unwrap(), FileCounts::default());
}

/// A state whose record (a real `TrustedRecord` encoding) has key version `key_version`.
fn e2e_state(key_version: u32, side: &[u8]) -> E2eState {
    let record = nasd_e2e::TrustedRecord {
        scheme: nasd_e2e::Scheme::Mt,
        block_bytes: 65536,
        blocks: 1,
        length: 5,
        key_version,
        root: [key_version as u8; 32],
        counters_digest: [2; 32],
        binding: None,
    };
    E2eState {
        record: record.encode().to_vec(),
        writer: 5,
        signature: vec![9; 64],
        side: side.to_vec(),
    }
}

fn hash(e: &E2eState) -> [u8; 32] {
    nasd_e2e::record::state_hash(&e.record, &e.side)
}

/// End-to-end state (issue 10): commits carry it, compare-and-swap on the state it built on,
/// never go back a key version; `set_e2e` swaps it alone; users' keys and groups' key pairs
/// with their wraps.
fn end_to_end<S: MetaStore>(s: &mut S) {
    let f = s.reserve_inode(ROOT_INO, &file(5, 0)).unwrap();
    s.link_reserved(ROOT_INO, "f", f, &FileLayout::single(obj(16)), 0)
        .unwrap();
    let commit = |s: &mut S, object: u64, e2e: Option<E2eCommit>| {
        s.put_staged(&Staged {
            base_version: None,
            ..staged(object, 10, f)
        })
        .unwrap();
        let r = s.commit_staged(
            ROOT_INO,
            "f",
            obj(object),
            Some(f),
            Some(5),
            0,
            None,
            None,
            e2e.as_ref(),
            0,
        );
        if r.is_err() {
            s.abort_staged(obj(object)).unwrap();
        }
        r.map(|_| ())
    };
    let v1 = e2e_state(1, b"wraps v1");
    commit(
        s,
        17,
        Some(E2eCommit {
            expect: [0; 32],
            state: v1.clone(),
        }),
    )
    .unwrap();
    assert_eq!(s.inode(f).unwrap().unwrap().e2e, Some(v1.clone()));
    // A change built on another state is refused, and nothing changes.
    let v2 = e2e_state(1, b"wraps v2");
    let stale = E2eCommit {
        expect: [3; 32],
        state: v2.clone(),
    };
    assert_eq!(commit(s, 18, Some(stale)), Err(StoreError::Conflict));
    assert_eq!(s.inode(f).unwrap().unwrap().e2e, Some(v1.clone()));
    commit(
        s,
        19,
        Some(E2eCommit {
            expect: hash(&v1),
            state: v2.clone(),
        }),
    )
    .unwrap();
    // set_e2e: a share or unshare swaps the state alone, on the state it read.
    let v3 = e2e_state(2, b"wraps v3");
    assert_eq!(s.set_e2e(f, &hash(&v1), &v3), Err(StoreError::Conflict));
    s.set_e2e(f, &hash(&v2), &v3).unwrap();
    assert_eq!(s.inode(f).unwrap().unwrap().e2e, Some(v3.clone()));
    assert_eq!(
        s.set_e2e(999_999, &hash(&v3), &v3),
        Err(StoreError::NotFound)
    );
    // An upload (no expectation) may not go back a key version, but may keep or raise it.
    let old_key = e2e_state(1, b"old key");
    assert_eq!(
        commit(
            s,
            20,
            Some(E2eCommit {
                expect: [0; 32],
                state: old_key
            })
        ),
        Err(StoreError::Conflict)
    );
    let v4 = e2e_state(2, b"same key");
    commit(
        s,
        21,
        Some(E2eCommit {
            expect: [0; 32],
            state: v4,
        }),
    )
    .unwrap();
    // A plaintext commit leaves the file plaintext.
    commit(s, 22, None).unwrap();
    assert_eq!(s.inode(f).unwrap().unwrap().e2e, None);

    user_and_group_keys(s);
}

/// The key log: every change of keys in order, the same version once, resets at the version
/// after the last, pages from any place.
fn key_log<S: MetaStore>(s: &mut S, a: u32, b: u32, k2: &UserKeys) {
    assert_eq!(s.key_log_len().unwrap(), 2);
    assert_eq!(s.user_key_version(a).unwrap(), 2);
    assert_eq!(s.user_key_version(b).unwrap(), 0);
    // The same version again (a new sealed seed) logs nothing.
    s.set_user_keys(
        a,
        &UserKeys {
            sealed: vec![1; 61],
            ..k2.clone()
        },
    )
    .unwrap();
    assert_eq!(s.key_log_len().unwrap(), 2);
    let kb = UserKeys {
        enc_public: [10; 32],
        sign_public: [11; 32],
        version: 1,
        signature: [12; 64],
        sealed: vec![],
    };
    s.set_user_keys(b, &kb).unwrap();
    assert_eq!(s.reset_user_keys(a, b, 77), Ok(3));
    assert_eq!(s.user_keys(a).unwrap(), None, "a reset clears the keys");
    assert_eq!(s.user_key_version(a).unwrap(), 3);
    assert_eq!(s.reset_user_keys(424_242, b, 77), Err(StoreError::NotFound));
    let all = s.key_log(0, 100).unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(s.key_log_len().unwrap(), 4);
    assert_eq!(
        all[2],
        KeyLogEntry::Keys {
            uid: b,
            keys: kb.clone()
        }
    );
    assert_eq!(
        all[3],
        KeyLogEntry::Reset {
            uid: a,
            version: 3,
            by: b,
            at_ms: 77
        }
    );
    assert_eq!(s.key_log(1, 2).unwrap(), all[1..3].to_vec());
    assert_eq!(s.key_log(3, 100).unwrap(), all[3..].to_vec());
    assert_eq!(s.key_log(4, 100).unwrap(), vec![]);
    assert_eq!(s.key_log(u64::MAX, 100).unwrap(), vec![]);
    // The user's next keys follow the reset.
    let k4 = UserKeys {
        version: 4,
        ..kb.clone()
    };
    s.set_user_keys(a, &k4).unwrap();
    assert_eq!(s.user_key_version(a).unwrap(), 4);
    assert_eq!(s.key_log_len().unwrap(), 5);
    assert_eq!(s.user_key_log(a).unwrap().len(), 4);
    // Policies' readers: logged in order, as many as their setter makes, none a key change.
    let readers = |dir: &str, n: u32| PolicyReaders {
        by: a,
        at_ms: 9,
        dir: dir.into(),
        readers: vec![nasd_proto::manager::Principal::User(n)],
        signature: [5; 64],
    };
    for (dir, n) in [("/s3", 1), ("/s3", 2), ("/", 3)] {
        s.log_policy_readers(&readers(dir, n)).unwrap();
    }
    assert_eq!(s.key_log_len().unwrap(), 8);
    assert_eq!(
        s.key_log(5, 100).unwrap(),
        vec![
            KeyLogEntry::Readers(readers("/s3", 1)),
            KeyLogEntry::Readers(readers("/s3", 2)),
            KeyLogEntry::Readers(readers("/", 3)),
        ]
    );
    assert_eq!(s.user_key_log(a).unwrap().len(), 4, "no key change");
    assert_eq!(s.user_key_version(a).unwrap(), 4);
    let k5 = UserKeys {
        version: 5,
        ..kb.clone()
    };
    s.set_user_keys(a, &k5).unwrap();
    assert_eq!(s.key_log_len().unwrap(), 9);
}

/// Users' keys; groups' members, key versions, and wraps of the current version only.
fn user_and_group_keys<S: MetaStore>(s: &mut S) {
    let g = s.add_group("crew").unwrap();
    let a = s.add_user("ann", "phc", false, g).unwrap();
    let b = s.add_user("ben", "phc", false, g).unwrap();
    assert_eq!(s.user_keys(a).unwrap(), None);
    let k = UserKeys {
        enc_public: [1; 32],
        sign_public: [2; 32],
        version: 1,
        signature: [4; 64],
        sealed: vec![3; 80],
    };
    s.set_user_keys(a, &k).unwrap();
    assert_eq!(s.user_keys(a).unwrap(), Some(k.clone()));
    assert_eq!(s.set_user_keys(424_242, &k), Err(StoreError::NotFound));
    // A new password file replaces the sealed seed alone, and ends the user's sessions.
    s.put_session(&SessionRecord {
        token_hash: [9; 32],
        uid: a,
        expires_ms: u64::MAX,
        via: None,
    })
    .unwrap();
    s.set_password_file(a, "$opaque$v1$00$00", Some(&[5; 61]))
        .unwrap();
    let resealed = UserKeys {
        sealed: vec![5; 61],
        ..k.clone()
    };
    assert_eq!(s.user_keys(a).unwrap(), Some(resealed.clone()));
    assert_eq!(s.user_by_uid(a).unwrap().unwrap().phc, "$opaque$v1$00$00");
    assert_eq!(s.session(&[9; 32]).unwrap(), None);
    s.set_password_file(b, "$opaque$v1$01$01", Some(&[5; 61]))
        .unwrap();
    assert_eq!(s.user_keys(b).unwrap(), None, "no keys to reseal");
    assert_eq!(
        s.set_password_file(424_242, "x", None),
        Err(StoreError::NotFound)
    );
    // Every version of a user's keys is logged, without the sealed seed.
    let k2 = UserKeys {
        enc_public: [6; 32],
        sign_public: [7; 32],
        version: 2,
        signature: [8; 64],
        sealed: vec![9; 61],
    };
    s.set_user_keys(a, &k2).unwrap();
    let logged = |k: &UserKeys| KeyLogEntry::Keys {
        uid: a,
        keys: UserKeys {
            sealed: vec![],
            ..k.clone()
        },
    };
    assert_eq!(s.user_key_log(a).unwrap(), vec![logged(&k), logged(&k2)]);
    assert_eq!(s.user_key_log(b).unwrap(), vec![]);
    key_log(s, a, b, &k2);
    // Groups: members, key versions, wraps of the current version only.
    assert_eq!(s.members_of(g).unwrap(), vec![a, b]);
    assert_eq!(s.group_key(g).unwrap(), GroupKeyPair::default());
    s.set_group_key(g, 1, &[7; 32], None, &[(a, vec![1; 93])])
        .unwrap();
    let v1 = GroupKeyPair {
        version: 1,
        public: Some([7; 32]),
        rekey: false,
    };
    assert_eq!(s.group_key(g).unwrap(), v1);
    assert_eq!(s.group_wrap(g, a).unwrap(), Some(vec![1; 93]));
    assert_eq!(s.group_wrap(g, b).unwrap(), None);
    s.set_group_key(g, 1, &[7; 32], Some(&[9; 93]), &[(b, vec![2; 93])])
        .unwrap();
    assert_eq!(s.group_wrap(g, b).unwrap(), Some(vec![2; 93]));
    assert_eq!(
        s.group_key_links(g, 10).unwrap(),
        Vec::<Vec<u8>>::new(),
        "the same version again keeps no link"
    );
    assert_eq!(
        s.set_group_key(g, 1, &[8; 32], None, &[]),
        Err(StoreError::Conflict),
        "same version, another key"
    );
    assert_eq!(
        s.set_group_key(g, 0, &[7; 32], None, &[]),
        Err(StoreError::Conflict)
    );
    s.set_group_key(g, 2, &[8; 32], Some(&[5; 93]), &[(b, vec![4; 93])])
        .unwrap();
    assert_eq!(
        s.group_wrap(g, a).unwrap(),
        None,
        "a new key pair drops old wraps"
    );
    assert_eq!(s.group_wrap(g, b).unwrap(), Some(vec![4; 93]));
    assert_eq!(
        s.set_group_key(9_999, 1, &[7; 32], None, &[]),
        Err(StoreError::NotFound)
    );
    group_members_and_links(s, g, a, b);
}

/// Removing a member drops their wrap and leaves the group due a new key pair, which clears
/// the mark; links come newest first; a reset drops the user's wraps.
fn group_members_and_links<S: MetaStore>(s: &mut S, g: u32, a: u32, b: u32) {
    let home = s.add_group("cal").unwrap();
    let c = s.add_user("cal", "phc", false, home).unwrap();
    assert_eq!(s.remove_member(g, c), Err(StoreError::NotFound));
    s.add_member(g, c).unwrap();
    assert_eq!(s.members_of(g).unwrap(), vec![a, b, c]);
    let mut both = vec![home, g];
    both.sort_unstable();
    assert_eq!(s.groups_of(c).unwrap(), both);
    s.set_group_key(g, 2, &[8; 32], None, &[(c, vec![6; 93])])
        .unwrap();
    assert_eq!(s.group_wrap(g, c).unwrap(), Some(vec![6; 93]));
    s.remove_member(g, c).unwrap();
    assert_eq!(s.members_of(g).unwrap(), vec![a, b]);
    assert_eq!(s.group_wrap(g, c).unwrap(), None, "the member's wrap goes");
    assert_eq!(s.group_wrap(g, b).unwrap(), Some(vec![4; 93]));
    let due = s.group_key(g).unwrap();
    assert_eq!((due.version, due.rekey), (2, true));
    assert_eq!(s.remove_member(g, c), Err(StoreError::NotFound));
    // A member by primary group is no added member.
    assert_eq!(s.remove_member(g, a), Err(StoreError::NotFound));
    s.set_group_key(g, 3, &[3; 32], Some(&[6; 93]), &[(b, vec![7; 93])])
        .unwrap();
    assert_eq!(
        s.group_key(g).unwrap(),
        GroupKeyPair {
            version: 3,
            public: Some([3; 32]),
            rekey: false
        },
        "a new key pair is no longer due"
    );
    assert_eq!(
        s.group_key_links(g, 10).unwrap(),
        vec![vec![6; 93], vec![5; 93]]
    );
    assert_eq!(s.group_key_links(g, 1).unwrap(), vec![vec![6; 93]]);
    assert_eq!(s.group_key_links(9_999, 10).unwrap(), Vec::<Vec<u8>>::new());
    // A group without a key pair is not due one when a member leaves.
    let h = s.add_group("crew2").unwrap();
    s.add_member(h, c).unwrap();
    s.remove_member(h, c).unwrap();
    assert_eq!(s.group_key(h).unwrap(), GroupKeyPair::default());
    // A reset of a user's keys drops their wraps of group secrets.
    s.reset_user_keys(b, a, 1).unwrap();
    assert_eq!(s.group_wrap(g, b).unwrap(), None);
}

/// A user's usage, and the sum of their files' charges: always equal.
fn usage<S: MetaStore>(s: &S, uid: u32) -> u64 {
    let used = s.quota(uid).unwrap().map_or(0, |q| q.used_bytes);
    let charged: u64 = s
        .files_owned(uid, 0, usize::MAX)
        .unwrap()
        .iter()
        .map(|i| i.charged.unwrap_or(0))
        .sum();
    assert_eq!(used, charged, "usage of {uid} is the sum of its charges");
    used
}

/// A file of `uid` on object `object`, linked as `name`.
fn linked_file<S: MetaStore>(s: &mut S, uid: u32, name: &str, object: u64) -> u64 {
    let ino = s.reserve_inode(ROOT_INO, &file(uid, 0)).unwrap();
    s.link_reserved(ROOT_INO, name, ino, &FileLayout::single(obj(object)), 0)
        .unwrap();
    ino
}

/// Quotas (seed 002 §3.2): usage is the sum of a user's files' charges and moves in the
/// transaction that creates, replaces, removes, re-owns or re-sizes a file; escrows are
/// checked against the limit where they are taken, and only growth is refused.
fn quotas<S: MetaStore>(s: &mut S) {
    let f = quota_counts_old_files(s);
    let g = quota_escrows_uploads(s);
    quota_checks_late_commits(s, f);
    quota_escrows_files(s, f);
    let n = quota_follows_sizes_and_names(s, f, g);
    quota_follows_owners(s, n);
    quota_removed(s);
}

/// Refusals of growth past user 5's quota.
fn over(r: StoreResult<()>) {
    match r {
        Err(StoreError::QuotaExceeded { uid: 5, .. }) => {}
        r => panic!("expected QuotaExceeded, got {r:?}"),
    }
}

/// An escrow of user 5's from `base` to `end` until `expires_ms`.
fn escrow(base: u64, end: u64, expires_ms: u64) -> Option<StagedEscrow> {
    Some(StagedEscrow {
        uid: 5,
        base,
        end,
        expires_ms,
    })
}

/// A new quota on user 5 (limit 2000) counts a file made before it; returns the file.
fn quota_counts_old_files<S: MetaStore>(s: &mut S) -> u64 {
    // A file made before the quota: uncharged; a new quota charges it 0 until measured.
    let f = linked_file(s, 5, "f", 16);
    assert_eq!(s.inode(f).unwrap().unwrap().charged, None);
    assert_eq!(s.quota(5).unwrap(), None);
    assert!(s.set_quota(5, 2000).unwrap());
    assert_eq!(s.inode(f).unwrap().unwrap().charged, Some(0));
    assert!(s.settle_charge(f, 0, 100).unwrap());
    assert!(!s.settle_charge(f, 0, 50).unwrap(), "settled meanwhile");
    assert_eq!(usage(s, 5), 100);
    // Setting it again keeps the usage.
    assert!(!s.set_quota(5, 2000).unwrap());
    assert_eq!(s.quotas().unwrap()[0].used_bytes, 100);
    f
}

/// A new file's upload escrows its bytes until its capabilities expire (at 100), checked
/// where taken and renewed; its commit charges what was written. Returns the file.
fn quota_escrows_uploads<S: MetaStore>(s: &mut S) -> u64 {
    let g = s.reserve_inode(ROOT_INO, &file(5, 0)).unwrap();
    assert_eq!(s.inode(g).unwrap().unwrap().charged, Some(0));
    let up = Staged {
        path: "/g".into(),
        new_file: true,
        uid: 5,
        escrow: escrow(0, 1500, 100),
        ..staged(17, 10, g)
    };
    s.put_staged(&up).unwrap();
    assert_eq!(s.escrowed(5, 10).unwrap(), 1500);
    assert_eq!(s.escrowed(5, 100).unwrap(), 0, "expired");
    // 100 used + 1500 escrowed + 500 > 2000: refused, nothing recorded.
    let h = s.reserve_inode(ROOT_INO, &file(5, 0)).unwrap();
    let refused = Staged {
        path: "/h".into(),
        new_file: true,
        escrow: escrow(0, 500, 100),
        ..staged(18, 10, h)
    };
    over(s.put_staged(&refused));
    assert_eq!(s.staged(obj(18)).unwrap(), None);
    s.forget_reserved(h).unwrap();
    // A renewal may grow it within the limit only.
    let mut more = escrow(0, 1900, 100).unwrap();
    s.escrow_staged(obj(17), &more, 20).unwrap();
    more.end = 1901;
    over(s.escrow_staged(obj(17), &more, 20));
    assert_eq!(s.escrowed(5, 20).unwrap(), 1900);
    // The commit charges what was written, and the escrow goes with the record.
    let commit = |s: &mut S, charge, now| {
        s.commit_staged(
            ROOT_INO,
            "g",
            obj(17),
            None,
            None,
            0,
            None,
            charge,
            None,
            now,
        )
    };
    assert_eq!(commit(s, None, 30), Err(StoreError::ChargeNeeded));
    commit(s, Some(1200), 30).unwrap();
    assert_eq!(s.inode(g).unwrap().unwrap().charged, Some(1200));
    assert_eq!((usage(s, 5), s.escrowed(5, 30).unwrap()), (1300, 0));
    g
}

/// An overwrite of `f` whose escrow expired before its commit: its growth must fit now.
fn quota_checks_late_commits<S: MetaStore>(s: &mut S, f: u64) {
    s.put_staged(&Staged {
        escrow: escrow(0, 600, 40),
        ..staged(19, 30, f)
    })
    .unwrap();
    let over_commit = s.commit_staged(
        ROOT_INO,
        "f",
        obj(19),
        Some(f),
        None,
        0,
        None,
        Some(801),
        None,
        50,
    );
    assert!(
        matches!(
            over_commit,
            Err(StoreError::QuotaExceeded { asked: 701, .. })
        ),
        "{over_commit:?}"
    );
    s.commit_staged(
        ROOT_INO,
        "f",
        obj(19),
        Some(f),
        None,
        0,
        None,
        Some(800),
        None,
        50,
    )
    .unwrap();
    assert_eq!(usage(s, 5), 2000);
}

/// File escrows of `f`: growth past the limit is refused, rewriting within the file is not.
fn quota_escrows_files<S: MetaStore>(s: &mut S, f: u64) {
    let fe = |end, expires_ms| FileEscrow {
        ino: f,
        uid: 5,
        end,
        expires_ms,
    };
    over(s.escrow_file(&fe(801, 60), 50, true));
    s.escrow_file(&fe(800, 60), 50, true).unwrap();
    assert_eq!(s.file_escrow(f).unwrap(), Some(fe(800, 60)));
    // Extending never moves the end or the expiry back.
    s.escrow_file(&fe(10, 55), 50, false).unwrap();
    assert_eq!(s.file_escrow(f).unwrap(), Some(fe(800, 60)));
    assert_eq!(s.file_escrows_expired(59).unwrap(), vec![]);
    assert_eq!(s.file_escrows_expired(60).unwrap(), vec![fe(800, 60)]);
    s.settle_file(f, 700, true).unwrap();
    assert_eq!((usage(s, 5), s.file_escrow(f).unwrap()), (1900, None));
    // A file escrow holds end - charged until settled, expired or not.
    s.escrow_file(&fe(750, 70), 60, true).unwrap();
    assert_eq!(s.escrowed(5, 1000).unwrap(), 50);
    s.settle_file(f, 700, true).unwrap();
}

/// Charges follow a new size of `f`, the names of `g`, and a file committed over `f`, which
/// is returned.
fn quota_follows_sizes_and_names<S: MetaStore>(s: &mut S, f: u64, g: u64) -> u64 {
    // Truncation (a new size through the layout) charges the new size.
    s.swap_layout(f, 2, &FileLayout::single(obj(19)), Some(300))
        .unwrap();
    assert_eq!(usage(s, 5), 1500);
    // The last name going takes the charge along; a hard link keeps it.
    s.link(g, ROOT_INO, "g2").unwrap();
    s.unlink(ROOT_INO, "g").unwrap();
    assert_eq!(usage(s, 5), 1500);
    s.unlink(ROOT_INO, "g2").unwrap();
    assert_eq!(usage(s, 5), 300);
    // A new file committed over another takes its place and its charge.
    let n = s.reserve_inode(ROOT_INO, &file(5, 0)).unwrap();
    s.put_staged(&Staged {
        path: "/f".into(),
        new_file: true,
        ..staged(20, 60, n)
    })
    .unwrap();
    s.commit_staged(
        ROOT_INO,
        "f",
        obj(20),
        Some(f),
        None,
        0,
        None,
        Some(40),
        None,
        60,
    )
    .unwrap();
    assert_eq!(usage(s, 5), 40);
    n
}

/// A chown of `n` moves the charge; a new owner with a quota needs the file's size.
fn quota_follows_owners<S: MetaStore>(s: &mut S, n: u64) {
    s.set_quota(6, 10).unwrap();
    let mut i = s.inode(n).unwrap().unwrap();
    i.uid = 6;
    i.charged = None;
    assert_eq!(s.update_inode(&i), Err(StoreError::ChargeNeeded));
    i.charged = Some(40);
    s.update_inode(&i).unwrap();
    assert_eq!((usage(s, 5), usage(s, 6)), (0, 40));
    // An owner without a quota: no charge.
    i.uid = 7;
    s.update_inode(&i).unwrap();
    assert_eq!(
        (usage(s, 6), s.inode(n).unwrap().unwrap().charged),
        (0, None)
    );
}

/// Removing a quota forgets charges and escrows.
fn quota_removed<S: MetaStore>(s: &mut S) {
    let k = linked_file(s, 5, "k", 21);
    s.settle_charge(k, 0, 9).unwrap();
    s.escrow_file(
        &FileEscrow {
            ino: k,
            uid: 5,
            end: 20,
            expires_ms: 99,
        },
        60,
        true,
    )
    .unwrap();
    assert!(s.remove_quota(5).unwrap());
    assert!(!s.remove_quota(5).unwrap());
    assert_eq!(s.quota(5).unwrap(), None);
    assert_eq!(s.inode(k).unwrap().unwrap().charged, None);
    assert_eq!(s.file_escrow(k).unwrap(), None);
    assert_eq!(s.escrowed(5, 0).unwrap(), 0);
}

/// A directory read a page at a time: every entry once, in byte order of the names, whatever
/// the page size; `after` need not name an entry; a page never holds more than asked.
fn directory_pages<S: MetaStore>(s: &mut S) {
    let d = s.link_new(ROOT_INO, "d", &dir(0)).unwrap();
    let mut names: Vec<String> = (0..23).map(|i| format!("n{i:02}")).collect();
    names.extend([
        "Z".to_string(),
        "a b".into(),
        "\u{e9}t\u{e9}".into(),
        "~".into(),
    ]);
    for n in &names {
        s.link_new(d, n, &dir(0)).unwrap();
    }
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    for limit in [1, 2, 5, 26, 27, 100] {
        let mut got: Vec<String> = vec![];
        loop {
            let after = got.last().cloned().unwrap_or_default();
            let page = s.readdir(d, &after, limit).unwrap();
            assert!(page.len() <= limit);
            let short = page.len() < limit;
            got.extend(page.into_iter().map(|(n, _)| n));
            if short {
                break;
            }
        }
        assert_eq!(got, names, "pages of {limit}");
    }
    let from_m: Vec<String> = s
        .readdir(d, "m", 3)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(from_m, ["n00", "n01", "n02"]);
    assert!(s.readdir(d, names.last().unwrap(), 10).unwrap().is_empty());
    assert!(s.readdir(d, "", 0).unwrap().is_empty());
    // A page's files come with their own components, in order, wherever the page cuts (a file
    // with two names in the directory has them under both; a directory has none).
    let e = s.link_new(ROOT_INO, "e", &dir(0)).unwrap();
    let mut files = vec![];
    for k in 0..5u64 {
        let layout = FileLayout {
            version: 1,
            geometry: "raid0:3".into(),
            components: (0..3)
                .map(|c| ObjRef {
                    drive: DriveId(3 - c),
                    partition: PartitionId(1),
                    object: ObjectId(1000 + 10 * k + c),
                })
                .collect(),
            stale: 0,
        };
        let f = Inode {
            layout: Some(layout),
            ..file(0, 0)
        };
        files.push(s.link_new(e, &format!("f{k}"), &f).unwrap());
    }
    s.link(files[0], e, "g").unwrap();
    let sub = s.link_new(e, "sub", &dir(0)).unwrap();
    s.link_new(sub, "inner", &dir(0)).unwrap();
    for limit in [1, 2, 3, 100] {
        let mut after = String::new();
        let mut seen = 0;
        loop {
            let page = s.readdir(e, &after, limit).unwrap();
            // And their link counts, as `links` gives them one by one.
            let links = s.readdir_links(e, &after, limit).unwrap();
            let inos: std::collections::BTreeSet<u64> = page.iter().map(|(_, i)| i.ino).collect();
            assert_eq!(links.len(), inos.len(), "pages of {limit}");
            for (n, i) in &page {
                let stored = s.inode(i.ino).unwrap().unwrap();
                assert_eq!(i.layout, stored.layout, "{n} in pages of {limit}");
                let want = s.links(i).unwrap();
                assert_eq!(links.get(&i.ino), Some(&want), "{n} in pages of {limit}");
            }
            seen += page.len();
            if page.len() < limit {
                break;
            }
            after = page.last().unwrap().0.clone();
        }
        assert_eq!(seen, 7, "pages of {limit}");
    }
    let all = s.readdir_links(e, "", 100).unwrap();
    assert_eq!(all[&files[0]], 2, "f0 and g");
    assert_eq!(all[&files[1]], 1);
    assert_eq!(all[&sub], 3, "sub: its entry, its `.`, inner's `..`");
}

/// A revocation's new version and its intent are stored together; the intent lists until it
/// is ended; an unknown inode stores neither.
fn revocation_intents<S: MetaStore>(s: &mut S) {
    assert_eq!(s.revocations().unwrap(), Vec::<u64>::new());
    let ino = s.reserve_inode(ROOT_INO, &file(5, 0)).unwrap();
    s.link_reserved(ROOT_INO, "f", ino, &FileLayout::single(obj(16)), 0)
        .unwrap();
    let mut i = s.inode(ino).unwrap().unwrap();
    i.acv += 1;
    i.mode = 0o600;
    s.begin_revocation(&i).unwrap();
    let back = s.inode(ino).unwrap().unwrap();
    assert_eq!((back.acv, back.mode), (1, 0o600));
    assert_eq!(s.revocations().unwrap(), vec![ino]);
    // Beginning it again (a retry) keeps one intent.
    s.begin_revocation(&i).unwrap();
    assert_eq!(s.revocations().unwrap(), vec![ino]);
    s.end_revocation(ino).unwrap();
    assert_eq!(s.revocations().unwrap(), Vec::<u64>::new());
    let mut ghost = i.clone();
    ghost.ino = 999_999;
    assert_eq!(s.begin_revocation(&ghost), Err(StoreError::NotFound));
    assert_eq!(s.revocations().unwrap(), Vec::<u64>::new());
    s.end_revocation(999_999).unwrap();
}

fn staged(object: u64, created_ms: u64, ino: u64) -> Staged {
    Staged {
        layout: FileLayout::single(obj(object)),
        acv: 3,
        uid: 5,
        path: "/f".into(),
        mode: 0o600,
        created_ms,
        ino,
        new_file: false,
        base_version: None,
        escrow: None,
    }
}

/// An overwrite: the staged object replaces the file's in one step, keeping the inode; an
/// overwrite whose file vanished or was replaced commits nothing; nothing commits twice.
fn staged_commits<S: MetaStore>(s: &mut S) {
    let f = s.reserve_inode(ROOT_INO, &file(5, 0)).unwrap();
    s.link_reserved(ROOT_INO, "f", f, &FileLayout::single(obj(16)), 0)
        .unwrap();
    let a = staged(17, 10, f);
    s.put_staged(&a).unwrap();
    assert_eq!(s.staged(a.layout.first()).unwrap(), Some(a.clone()));
    assert_eq!(
        s.objects_on_drive(a.layout.first().drive).unwrap(),
        vec![ObjectId(16)]
    );
    assert_eq!(
        commit_plain(s, "f", a.layout.first(), None),
        Err(StoreError::Exists),
        "the caller checked an empty name: nothing commits"
    );
    let old = commit_plain(s, "f", a.layout.first(), Some(f)).unwrap();
    assert_eq!(
        old.as_ref().and_then(first).map(|o| o.object),
        Some(ObjectId(16))
    );
    let now = s.inode(f).unwrap().unwrap();
    assert_eq!(
        (first(&now), now.acv, now.mode),
        (Some(a.layout.first()), 3, 0o644)
    );
    assert_eq!(s.staged(a.layout.first()).unwrap(), None);
    assert_eq!(
        commit_plain(s, "f", a.layout.first(), Some(f)),
        Err(StoreError::NotFound)
    );
    assert_eq!(
        s.objects_on_drive(a.layout.first().drive).unwrap(),
        vec![ObjectId(17)]
    );

    // The file was replaced by another one of the same name: the overwrite does not land in
    // it (files get numbers never used before, so the new one's differs).
    let b = staged(18, 20, f);
    s.put_staged(&b).unwrap();
    s.unlink(ROOT_INO, "f").unwrap();
    let f2 = s.reserve_inode(ROOT_INO, &file(5, 0)).unwrap();
    s.link_reserved(ROOT_INO, "f", f2, &FileLayout::single(obj(40)), 0)
        .unwrap();
    assert!(f2 > f);
    assert_eq!(
        commit_plain(s, "f", b.layout.first(), Some(f2)),
        Err(StoreError::NotFound)
    );
    assert_eq!(
        first(&s.inode(f2).unwrap().unwrap()).map(|o| o.object),
        Some(ObjectId(40))
    );

    s.link_new(ROOT_INO, "d", &dir(5)).unwrap();
    let d = s.lookup(ROOT_INO, "d").unwrap().unwrap();
    let c = staged(19, 30, d);
    s.put_staged(&c).unwrap();
    assert_eq!(
        commit_plain(s, "d", c.layout.first(), Some(d)),
        Err(StoreError::IsADirectory)
    );
    assert_eq!(s.expire_staged(20).unwrap(), vec![]);
    assert_eq!(s.expire_staged(31).unwrap(), vec![b.clone(), c.clone()]);
    assert_eq!(s.staged(c.layout.first()).unwrap(), None);
    assert_eq!(s.abort_staged(c.layout.first()), Ok(None));
}

/// A new file: its inode is reserved (invisible), takes the staged object, and is linked only
/// by its commit, replacing whatever file took the name meanwhile; aborts and expiry drop the
/// reservation; a reservation that never got an object is swept once old.
fn staged_new_files<S: MetaStore>(s: &mut S) {
    let r1 = s.reserve_inode(ROOT_INO, &bare(10)).unwrap();
    assert_eq!(s.lookup(ROOT_INO, "n").unwrap(), None);
    assert!(s.readdir(ROOT_INO, "", usize::MAX).unwrap().is_empty());
    let a = new_upload(20, 10, r1);
    s.put_staged(&a).unwrap();
    assert_eq!(
        first(&s.inode(r1).unwrap().unwrap()),
        Some(a.layout.first())
    );
    assert_eq!(
        s.objects_on_drive(a.layout.first().drive).unwrap(),
        vec![ObjectId(20)]
    );
    assert!(
        s.readdir(ROOT_INO, "", usize::MAX).unwrap().is_empty(),
        "visible before commit"
    );

    // A second upload of the same name commits first; the first one then replaces it.
    let r2 = s.reserve_inode(ROOT_INO, &bare(11)).unwrap();
    assert_ne!(r1, r2);
    let b = new_upload(21, 11, r2);
    s.put_staged(&b).unwrap();
    assert_eq!(commit_plain(s, "n", b.layout.first(), None), Ok(None));
    assert_eq!(s.lookup(ROOT_INO, "n").unwrap(), Some(r2));
    assert_eq!(
        commit_plain(s, "n", a.layout.first(), None),
        Err(StoreError::Exists),
        "the caller checked an empty name"
    );
    let old = commit_plain(s, "n", a.layout.first(), Some(r2)).unwrap();
    assert_eq!(old.map(|i| i.ino), Some(r2));
    assert_eq!(s.lookup(ROOT_INO, "n").unwrap(), Some(r1));
    assert_eq!(s.inode(r2).unwrap(), None);
    assert_eq!(s.readdir(ROOT_INO, "", usize::MAX).unwrap().len(), 1);

    // Abort: the record and the reservation go; a linked file is never touched.
    let r3 = s.reserve_inode(ROOT_INO, &bare(12)).unwrap();
    let c = new_upload(22, 12, r3);
    s.put_staged(&c).unwrap();
    assert_eq!(s.abort_staged(c.layout.first()), Ok(Some(c.clone())));
    assert_eq!(s.inode(r3).unwrap(), None);
    s.forget_reserved(r1).unwrap();
    assert!(s.inode(r1).unwrap().is_some(), "forgot a linked file");

    // Exclusive create: link the reservation, refused when the name is taken.
    let r4 = s.reserve_inode(ROOT_INO, &bare(13)).unwrap();
    let o4 = obj(23);
    assert_eq!(
        s.link_reserved(ROOT_INO, "n", r4, &FileLayout::single(o4), 1),
        Err(StoreError::Exists)
    );
    s.link_reserved(ROOT_INO, "x", r4, &FileLayout::single(o4), 1)
        .unwrap();
    assert_eq!(s.lookup(ROOT_INO, "x").unwrap(), Some(r4));
    assert_eq!(first(&s.inode(r4).unwrap().unwrap()), Some(o4));

    new_files_expire(s, r4);
}

/// Expiry: an old staged new file and an old reservation without a record both go; a young
/// one stays, and so does an old one whose upload was renewed; the linked file `r4` stays.
fn new_files_expire<S: MetaStore>(s: &mut S, r4: u64) {
    let r5 = s.reserve_inode(ROOT_INO, &bare(14)).unwrap();
    let e = new_upload(24, 14, r5);
    s.put_staged(&e).unwrap();
    let r9 = s.reserve_inode(ROOT_INO, &fresh(14)).unwrap();
    let renewed = new_upload(25, 14, r9);
    s.put_staged(&renewed).unwrap();
    s.touch_staged(renewed.layout.first(), 40).unwrap();
    assert_eq!(s.touch_staged(obj(99), 40), Err(StoreError::NotFound));
    let r6 = s.reserve_inode(ROOT_INO, &bare(15)).unwrap();
    let r7 = s.reserve_inode(ROOT_INO, &bare(50)).unwrap();
    assert_eq!(s.expire_staged(16).unwrap(), vec![e]);
    assert_eq!(s.inode(r5).unwrap(), None);
    assert_eq!(
        s.staged(renewed.layout.first())
            .unwrap()
            .map(|r| r.created_ms),
        Some(40)
    );
    assert!(s.inode(r9).unwrap().is_some());
    assert_eq!(s.inode(r6).unwrap(), None);
    assert!(s.inode(r7).unwrap().is_some());
    assert_eq!(s.lookup(ROOT_INO, "x").unwrap(), Some(r4));

    // The largest file number, once freed, is not handed out again.
    s.forget_reserved(r7).unwrap();
    let r8 = s.reserve_inode(ROOT_INO, &fresh(60)).unwrap();
    assert!(r8 > r7, "{r8} reuses a number");
}

fn users_and_groups<S: MetaStore>(s: &mut S) {
    let g0 = s.add_group("admin").unwrap();
    let g1 = s.add_group("staff").unwrap();
    assert_ne!(g0, g1);
    assert_eq!(s.add_group("staff"), Err(StoreError::Exists));
    let admin = s.add_user("admin", "phc-a", true, g0).unwrap();
    let alice = s.add_user("alice", "phc-b", false, g1).unwrap();
    assert_ne!(admin, alice);
    assert_eq!(s.add_user("alice", "x", false, g1), Err(StoreError::Exists));
    let a = s.user_by_name("alice").unwrap().unwrap();
    assert_eq!(
        (a.uid, a.admin, a.gid, a.phc.as_str()),
        (alice, false, g1, "phc-b")
    );
    assert_eq!(s.user_by_uid(admin).unwrap().unwrap().name, "admin");
    assert!(s.user_by_name("nobody").unwrap().is_none());
    // A new credential ends every session of its user, and only theirs.
    let session = |token: u8, uid: u32| SessionRecord {
        token_hash: [token; 32],
        uid,
        expires_ms: u64::MAX / 2,
        via: None,
    };
    for (token, uid) in [(1, alice), (2, alice), (3, admin)] {
        s.put_session(&session(token, uid)).unwrap();
    }
    s.set_credential(alice, "phc-c").unwrap();
    assert_eq!(s.user_by_uid(alice).unwrap().unwrap().phc, "phc-c");
    assert_eq!(s.session(&[1; 32]).unwrap(), None);
    assert_eq!(s.session(&[2; 32]).unwrap(), None);
    assert_eq!(s.session(&[3; 32]).unwrap(), Some(session(3, admin)));
    assert_eq!(s.set_credential(99_999, "x"), Err(StoreError::NotFound));
    // A gateway's sessions for others end when it stops being one, or changes credential.
    assert!(!s.user_by_uid(alice).unwrap().unwrap().gateway);
    s.set_gateway(alice, true).unwrap();
    assert!(s.user_by_uid(alice).unwrap().unwrap().gateway);
    let acted = |token: u8| SessionRecord {
        via: Some(alice),
        ..session(token, admin)
    };
    s.put_session(&acted(4)).unwrap();
    assert_eq!(s.session(&[4; 32]).unwrap(), Some(acted(4)));
    s.set_credential(alice, "phc-d").unwrap();
    assert_eq!(s.session(&[4; 32]).unwrap(), None);
    s.put_session(&acted(5)).unwrap();
    s.set_gateway(alice, false).unwrap();
    assert_eq!(s.session(&[5; 32]).unwrap(), None);
    assert_eq!(s.session(&[3; 32]).unwrap(), Some(session(3, admin)));
    assert_eq!(s.set_gateway(99_999, true), Err(StoreError::NotFound));
    // S3 keys: one id once; listed per user; revoked only by their user's id.
    let key = |id: &str, uid: u32, t: u64| S3Key {
        access_key_id: id.into(),
        uid,
        secret: nasd_proto::manager::SecretString(format!("secret-{id}")),
        created_ms: t,
    };
    s.put_s3_key(&key("K2", alice, 2)).unwrap();
    s.put_s3_key(&key("K1", alice, 1)).unwrap();
    s.put_s3_key(&key("K3", admin, 3)).unwrap();
    assert_eq!(s.put_s3_key(&key("K1", admin, 4)), Err(StoreError::Exists));
    assert_eq!(s.s3_key("K1").unwrap(), Some(key("K1", alice, 1)));
    assert_eq!(s.s3_key("nope").unwrap(), None);
    assert_eq!(
        s.s3_keys_of(alice).unwrap(),
        vec![key("K1", alice, 1), key("K2", alice, 2)]
    );
    // A session a gateway opened for alice lasts while alice has an S3 key; her own does not
    // depend on them.
    let delegated = SessionRecord {
        via: Some(admin),
        ..session(7, alice)
    };
    s.put_session(&delegated).unwrap();
    s.put_session(&session(8, alice)).unwrap();
    assert!(!s.delete_s3_key(admin, "K1").unwrap(), "another user's key");
    assert!(s.delete_s3_key(alice, "K1").unwrap());
    assert_eq!(s.s3_key("K1").unwrap(), None);
    assert_eq!(
        s.session(&[7; 32]).unwrap(),
        Some(delegated),
        "a key is left"
    );
    assert!(s.delete_s3_key(alice, "K2").unwrap());
    assert_eq!(
        s.session(&[7; 32]).unwrap(),
        None,
        "the last key took it along"
    );
    assert_eq!(s.session(&[8; 32]).unwrap(), Some(session(8, alice)));
    assert!(
        !format!("{:?}", key("K9", 1, 1)).contains("secret-K9"),
        "Debug hides it"
    );
    assert_eq!(s.session(&[3; 32]).unwrap(), Some(session(3, admin)));
    assert_eq!(s.groups_of(alice).unwrap(), vec![g1]);
    s.add_member(g0, alice).unwrap();
    s.add_member(g0, alice).unwrap();
    let mut gs = s.groups_of(alice).unwrap();
    gs.sort();
    let mut want = vec![g0, g1];
    want.sort();
    assert_eq!(gs, want);
    assert_eq!(s.group_by_name("staff").unwrap().unwrap().gid, g1);
    assert_eq!(s.group_by_gid(g0).unwrap().unwrap().name, "admin");
    assert_eq!(s.users().unwrap().len(), 2);
}

fn namespace<S: MetaStore>(s: &mut S) {
    let root = s.inode(ROOT_INO).unwrap().unwrap();
    assert_eq!(root.kind, FileKind::Dir);
    assert!(s.readdir(ROOT_INO, "", usize::MAX).unwrap().is_empty());
    let d = s.link_new(ROOT_INO, "d", &dir(5)).unwrap();
    assert_eq!(s.link_new(ROOT_INO, "d", &dir(5)), Err(StoreError::Exists));
    let f = s.link_new(d, "f", &file(5, 16)).unwrap();
    assert_eq!(s.lookup(d, "f").unwrap(), Some(f));
    assert_eq!(s.lookup(d, "g").unwrap(), None);
    let fi = s.inode(f).unwrap().unwrap();
    assert_eq!(fi.parent, d);
    assert_eq!(first(&fi).unwrap().object, ObjectId(16));
    // A file is not a directory.
    assert_eq!(s.link_new(f, "x", &dir(5)), Err(StoreError::NotADirectory));
    assert_eq!(s.link_new(999, "x", &dir(5)), Err(StoreError::NotFound));
    let names: Vec<String> = s
        .readdir(d, "", usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, vec!["f"]);
    assert_eq!(s.unlink(ROOT_INO, "d"), Err(StoreError::NotEmpty));
    let mut upd = fi.clone();
    upd.mode = 0o600;
    upd.acv = 3;
    upd.e2e = Some(e2e_state(1, b"side"));
    s.update_inode(&upd).unwrap();
    let back = s.inode(f).unwrap().unwrap();
    assert_eq!((back.mode, back.acv), (0o600, 3));
    assert_eq!(back.e2e, Some(e2e_state(1, b"side")));
    assert_eq!(agreed(s).drives, vec![drive_count(7, 1, 0)]);
    let gone = s.unlink(d, "f").unwrap().expect("its last name");
    assert_eq!(gone.ino, f);
    assert!(s.inode(f).unwrap().is_none());
    assert_eq!(s.unlink(d, "f"), Err(StoreError::NotFound));
    s.unlink(ROOT_INO, "d").unwrap();
    assert!(s.readdir(ROOT_INO, "", usize::MAX).unwrap().is_empty());
    assert!(agreed(s).drives.is_empty());
}

fn rename<S: MetaStore>(s: &mut S) {
    let a = s.link_new(ROOT_INO, "a", &dir(0)).unwrap();
    let b = s.link_new(ROOT_INO, "b", &dir(0)).unwrap();
    let f = s.link_new(a, "f", &file(0, 16)).unwrap();
    let g = s.link_new(b, "g", &file(0, 17)).unwrap();
    // Move across directories.
    assert_eq!(s.rename(a, "f", b, "f2").unwrap(), None);
    assert_eq!(s.lookup(b, "f2").unwrap(), Some(f));
    assert_eq!(s.lookup(a, "f").unwrap(), None);
    assert_eq!(s.inode(f).unwrap().unwrap().parent, b);
    // Over an existing file: it is replaced and handed back.
    let replaced = s.rename(b, "f2", b, "g").unwrap().unwrap();
    assert_eq!(replaced.ino, g);
    assert!(s.inode(g).unwrap().is_none());
    assert_eq!(s.lookup(b, "g").unwrap(), Some(f));
    // File over directory, directory over file, over a non-empty directory.
    assert_eq!(
        s.rename(b, "g", ROOT_INO, "a"),
        Err(StoreError::IsADirectory)
    );
    assert_eq!(
        s.rename(ROOT_INO, "a", b, "g"),
        Err(StoreError::NotADirectory)
    );
    assert_eq!(
        s.rename(ROOT_INO, "a", ROOT_INO, "b"),
        Err(StoreError::NotEmpty)
    );
    assert_eq!(
        s.rename(ROOT_INO, "zz", ROOT_INO, "y"),
        Err(StoreError::NotFound)
    );
    // A failed rename changed nothing.
    assert_eq!(s.lookup(b, "g").unwrap(), Some(f));
    // Renaming onto itself is a no-op.
    assert_eq!(s.rename(b, "g", b, "g").unwrap(), None);
    assert_eq!(s.lookup(b, "g").unwrap(), Some(f));
}

/// Issue 20: special files keep their kind and device number, times are set one at a time,
/// names swap, and moves change the moved inode's change time.
fn posix_times_and_special_files<S: MetaStore>(s: &mut S) {
    let count = s.inode_count().unwrap();
    let dev = Inode {
        kind: FileKind::CharDevice,
        rdev: (1 << 8) | 3,
        atime_us: 5,
        ..dir(0)
    };
    let d = s.link_new(ROOT_INO, "null", &dev).unwrap();
    let got = s.inode(d).unwrap().unwrap();
    assert_eq!(
        (got.kind, got.rdev, got.atime_us),
        (FileKind::CharDevice, 259, 5)
    );
    assert_eq!(s.inode_count().unwrap(), count + 1);
    // Each time alone, the change time always.
    s.set_times(d, Some(40), None, 50).unwrap();
    let got = s.inode(d).unwrap().unwrap();
    assert_eq!((got.atime_us, got.mtime_us, got.ctime_us), (40, 1, 50));
    s.set_times(d, None, Some(60), 70).unwrap();
    let got = s.inode(d).unwrap().unwrap();
    assert_eq!((got.atime_us, got.mtime_us, got.ctime_us), (40, 60, 70));
    assert_eq!(
        s.set_times(99_999, None, None, 1),
        Err(StoreError::NotFound)
    );
    // Two names swap, across directories; a directory's parent follows it.
    let a = s.link_new(ROOT_INO, "a", &dir(0)).unwrap();
    let f = s.link_new(a, "f", &file(0, 30)).unwrap();
    let sub = s.link_new(ROOT_INO, "sub", &dir(0)).unwrap();
    s.exchange(a, "f", ROOT_INO, "sub").unwrap();
    assert_eq!(s.lookup(a, "f").unwrap(), Some(sub));
    assert_eq!(s.lookup(ROOT_INO, "sub").unwrap(), Some(f));
    assert_eq!(s.inode(sub).unwrap().unwrap().parent, a);
    assert!(
        s.inode(f).unwrap().unwrap().ctime_us > 1,
        "a move is a change"
    );
    assert_eq!(
        s.exchange(a, "f", ROOT_INO, "nope"),
        Err(StoreError::NotFound)
    );
    assert_eq!(
        s.lookup(a, "f").unwrap(),
        Some(sub),
        "a failed swap changed nothing"
    );
    // A rename moves the moved inode's change time.
    s.set_times(f, None, None, 2).unwrap();
    s.rename(ROOT_INO, "sub", a, "g").unwrap();
    assert!(s.inode(f).unwrap().unwrap().ctime_us > 2);
}

/// Drive keys under a seal (issue 21 §8): keys in clear still read, keys put are sealed and
/// read only with the seal.
fn sealed_drive_keys<S: MetaStore>(s: &mut S, d: &DriveRecord) {
    let seal =
        std::sync::Arc::new(nasd_crypto::seal::KeySeal::create_with_cost(b"pw", 8, 1).unwrap());
    s.set_key_seal(Some(seal.clone()));
    assert_eq!(
        s.drives().unwrap()[0].working_key,
        d.working_key,
        "clear keys still read"
    );
    s.put_drive(d).unwrap();
    assert_eq!(s.drives().unwrap()[0].drive_key, d.drive_key);
    s.set_key_seal(None);
    assert!(matches!(s.drives(), Err(StoreError::Sealed(_))));
    let other = nasd_crypto::seal::KeySeal::create_with_cost(b"other", 8, 1).unwrap();
    s.set_key_seal(Some(std::sync::Arc::new(other)));
    assert!(matches!(s.drives(), Err(StoreError::Sealed(_))));
    s.set_key_seal(Some(seal.clone()));
    let back = &s.drives().unwrap()[0];
    assert_eq!(
        (&back.drive_key, &back.partition_key, &back.working_key),
        (&d.drive_key, &d.partition_key, &d.working_key)
    );
    resealed_drive_keys(s, d, seal);
    s.set_key_seal(None);
}

/// A new passphrase's seal replaces the old in one step (issue 21 §8): the header and every
/// key, read only under the new seal afterwards; a reseal whose keys do not open under the
/// store's current seal changes nothing.
fn resealed_drive_keys<S: MetaStore>(
    s: &mut S,
    d: &DriveRecord,
    old: std::sync::Arc<nasd_crypto::seal::KeySeal>,
) {
    let new =
        std::sync::Arc::new(nasd_crypto::seal::KeySeal::create_with_cost(b"new", 8, 1).unwrap());
    s.put_meta(KEY_SEAL_META, &old.header().encode()).unwrap();
    // Opened under a wrong seal: refused, nothing changes.
    let wrong =
        std::sync::Arc::new(nasd_crypto::seal::KeySeal::create_with_cost(b"wrong", 8, 1).unwrap());
    s.set_key_seal(Some(wrong));
    assert!(matches!(
        s.reseal_drive_keys(&new.header().encode(), new.clone()),
        Err(StoreError::Sealed(_))
    ));
    assert_eq!(
        s.get_meta(KEY_SEAL_META).unwrap(),
        Some(old.header().encode().to_vec())
    );
    s.set_key_seal(Some(old.clone()));
    assert_eq!(s.drives().unwrap()[0].drive_key, d.drive_key);
    // Under the right one: the header and every key are the new seal's.
    s.reseal_drive_keys(&new.header().encode(), new.clone())
        .unwrap();
    assert_eq!(
        s.get_meta(KEY_SEAL_META).unwrap(),
        Some(new.header().encode().to_vec())
    );
    let back = &s.drives().unwrap()[0];
    assert_eq!(
        (&back.drive_key, &back.partition_key, &back.working_key),
        (&d.drive_key, &d.partition_key, &d.working_key)
    );
    s.set_key_seal(Some(old));
    assert!(matches!(s.drives(), Err(StoreError::Sealed(_))));
    s.set_key_seal(Some(new));
    assert_eq!(s.drives().unwrap()[0].working_key, d.working_key);
}

fn drives_sessions_meta<S: MetaStore>(s: &mut S) {
    use nasd_crypto::Key;
    assert!(s.drives().unwrap().is_empty());
    let mut d = DriveRecord {
        drive: DriveId(u64::MAX - 3),
        addr: "127.0.0.1:1".into(),
        suite: Suite::Blake3,
        drive_key: Key::from_bytes([1; 32]),
        partition: PartitionId(1),
        partition_key: Key::from_bytes([2; 32]),
        working_key: Key::from_bytes([3; 32]),
        rotated_ms: 5,
    };
    s.put_drive(&d).unwrap();
    d.working_key = Key::from_bytes([4; 32]);
    d.addr = "127.0.0.1:2".into();
    s.put_drive(&d).unwrap();
    let ds = s.drives().unwrap();
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].drive, d.drive);
    assert_eq!(ds[0].addr, "127.0.0.1:2");
    assert_eq!(ds[0].working_key, Key::from_bytes([4; 32]));
    assert_eq!(ds[0].partition_key, Key::from_bytes([2; 32]));
    sealed_drive_keys(s, &d);

    let sess = SessionRecord {
        token_hash: [9; 32],
        uid: 4,
        expires_ms: 100,
        via: Some(3),
    };
    s.put_session(&sess).unwrap();
    assert_eq!(s.session(&[9; 32]).unwrap(), Some(sess.clone()));
    assert_eq!(s.session(&[8; 32]).unwrap(), None);
    // A logout forgets one session.
    let other = SessionRecord {
        token_hash: [7; 32],
        ..sess.clone()
    };
    s.put_session(&other).unwrap();
    assert!(s.delete_session(&[7; 32]).unwrap());
    assert!(!s.delete_session(&[7; 32]).unwrap());
    assert_eq!(s.session(&[7; 32]).unwrap(), None);
    assert_eq!(s.session(&[9; 32]).unwrap(), Some(sess.clone()));
    assert_eq!(s.expire_sessions(50).unwrap(), 0);
    assert_eq!(s.expire_sessions(150).unwrap(), 1);
    assert_eq!(s.session(&[9; 32]).unwrap(), None);

    assert_eq!(s.get_meta("x").unwrap(), None);
    s.put_meta("x", b"1").unwrap();
    s.put_meta("x", b"2").unwrap();
    assert_eq!(s.get_meta("x").unwrap(), Some(b"2".to_vec()));
}

/// The name count of inode `ino`.
/// Extended attributes: a commit that carries a set replaces the file's whole set in the
/// same transaction, one without keeps it; a removed file's attributes go with it.
fn extended_attributes<S: MetaStore>(s: &mut S) {
    let x = |name: &str, value: &[u8]| Xattr {
        name: name.into(),
        value: value.to_vec(),
    };
    let f = s.reserve_inode(ROOT_INO, &file(5, 0)).unwrap();
    s.link_reserved(ROOT_INO, "f", f, &FileLayout::single(obj(16)), 0)
        .unwrap();
    assert_eq!(s.xattrs(f).unwrap(), vec![]);
    s.set_xattrs(f, &[x("user.b", b"2"), x("user.a", b"1")])
        .unwrap();
    assert_eq!(
        s.xattrs(f).unwrap(),
        vec![x("user.a", b"1"), x("user.b", b"2")],
        "by name"
    );
    let a = staged(17, 10, f);
    s.put_staged(&a).unwrap();
    commit_plain(s, "f", a.layout.first(), Some(f)).unwrap();
    assert_eq!(
        s.xattrs(f).unwrap().len(),
        2,
        "a commit without a set keeps it"
    );
    let b = staged(18, 10, f);
    s.put_staged(&b).unwrap();
    s.commit_staged(
        ROOT_INO,
        "f",
        b.layout.first(),
        Some(f),
        None,
        0,
        Some(&[x("user.s3.etag", b"e")]),
        None,
        None,
        0,
    )
    .unwrap();
    assert_eq!(s.xattrs(f).unwrap(), vec![x("user.s3.etag", b"e")]);
    assert_eq!(
        s.set_xattrs(f + 1000, &[x("user.a", b"")]),
        Err(StoreError::NotFound)
    );
    s.unlink(ROOT_INO, "f").unwrap();
    assert_eq!(s.xattrs(f).unwrap(), vec![], "gone with the file");
}

fn links<S: MetaStore>(s: &S, ino: u64) -> u32 {
    s.links(&s.inode(ino).unwrap().unwrap()).unwrap()
}

/// Hard links (several names, one inode, gone with its last name; the count the store
/// reports) and symbolic links (a target kept as given).
fn posix_names<S: MetaStore>(s: &mut S) {
    let d = s.link_new(ROOT_INO, "d", &dir(0)).unwrap();
    let e = s.link_new(d, "e", &dir(0)).unwrap();
    assert_eq!(links(s, d), 3, "., its name, e's ..");
    assert_eq!(links(s, e), 2);
    let f = s.link_new(d, "f", &file(0, 40)).unwrap();
    assert_eq!(links(s, f), 1);
    s.link(f, ROOT_INO, "f2").unwrap();
    s.link(f, e, "f3").unwrap();
    assert_eq!(s.link(f, e, "f3"), Err(StoreError::Exists));
    assert_eq!(s.link(e, ROOT_INO, "e2"), Err(StoreError::IsADirectory));
    assert_eq!(s.link(999, ROOT_INO, "x"), Err(StoreError::NotFound));
    assert_eq!(links(s, f), 3);
    let listed = s.readdir(e, "", 10).unwrap();
    assert_eq!(
        (listed[0].0.as_str(), s.links(&listed[0].1).unwrap()),
        ("f3", 3)
    );
    // Removing names keeps the inode until the last one.
    assert_eq!(s.unlink(d, "f").unwrap(), None);
    assert_eq!(links(s, f), 2);
    // A rename over another name of the same file changes nothing.
    assert_eq!(s.rename(ROOT_INO, "f2", e, "f3").unwrap(), None);
    assert_eq!(s.lookup(ROOT_INO, "f2").unwrap(), Some(f));
    // A rename over a file with other names keeps it; over its last name returns it.
    let g = s.link_new(d, "g", &file(0, 41)).unwrap();
    assert_eq!(s.rename(d, "g", ROOT_INO, "f2").unwrap(), None);
    assert_eq!(links(s, f), 1);
    let gone = s
        .rename(ROOT_INO, "f2", e, "f3")
        .unwrap()
        .expect("last name");
    assert_eq!(gone.ino, f);
    assert!(s.inode(f).unwrap().is_none());
    assert_eq!(s.lookup(e, "f3").unwrap(), Some(g));
    // Symbolic links keep their target; a new file may replace one.
    let l = s
        .link_new(
            d,
            "l",
            &Inode {
                kind: FileKind::Symlink,
                mode: 0o777,
                target: Some("../e/f3".into()),
                ..dir(0)
            },
        )
        .unwrap();
    let back = s.inode(l).unwrap().unwrap();
    assert_eq!(
        (back.kind, back.target.as_deref(), s.links(&back).unwrap()),
        (FileKind::Symlink, Some("../e/f3"), 1)
    );
    assert_eq!(s.unlink(d, "l").unwrap().map(|i| i.ino), Some(l));
    // A reserved inode has no name to add to.
    let r = s.reserve_inode(d, &file(0, 42)).unwrap();
    assert_eq!(s.link(r, d, "r"), Err(StoreError::NotFound));
}
