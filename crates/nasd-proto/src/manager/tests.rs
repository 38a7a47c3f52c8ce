use super::*;

#[test]
fn debug_never_prints_a_session_token() {
    let r = MgrReply::LoginOk(LoginOk {
        uid: 1,
        admin: false,
        token: SessionToken([0xab; TOKEN_BYTES]),
        expires_ms: 2,
    });
    let shown = format!("{r:?}");
    assert!(!shown.contains("171") && !shown.contains("ab"), "{shown}");
}
use crate::capability::CapabilityArgs;
use crate::types::{DriveId, ObjectId, PartitionId, Protection, Region, Rights, Suite};

fn stat() -> FileStat {
    FileStat {
        ino: 7,
        kind: FileKind::File,
        mode: 0o640,
        uid: 1000,
        gid: 100,
        owner: "alice".into(),
        group: "staff".into(),
        size: 12345,
        mtime_us: 1_700_000_000_000_000,
        ctime_us: 1_600_000_000_000_000,
        nlink: 2,
        atime_us: 1_650_000_000_000_000,
        rdev: 0,
    }
}

fn sample_e2e_commit() -> E2eCommit {
    E2eCommit {
        expect: [4; 32],
        state: E2eState {
            record: vec![1; 90],
            writer: 1000,
            signature: vec![2; 64],
            side: vec![3; 500],
        },
    }
}

fn requests() -> Vec<MgrRequest> {
    [
        requests_1(),
        requests_2(),
        requests_3(),
        requests_4(),
        requests_5(),
        requests_6(),
        lock_requests(),
    ]
    .concat()
}

/// Sample lock requests (protocol 17).
fn lock_requests() -> Vec<MgrRequest> {
    vec![
        MgrRequest::Lock(calls::Lock {
            path: "/a/b".into(),
            ino: 7,
            owner: 0xdead_beef_0000_0001,
            pid: 4242,
            exclusive: true,
            start: 0,
            end: u64::MAX,
            reclaim: false,
        }),
        MgrRequest::Lock(calls::Lock {
            path: "/a/b".into(),
            ino: 7,
            owner: 1,
            pid: 0,
            exclusive: false,
            start: 100,
            end: 199,
            reclaim: true,
        }),
        MgrRequest::LockTest(calls::LockTest {
            path: "/a/b".into(),
            ino: 7,
            owner: 2,
            exclusive: true,
            start: 5,
            end: i64::MAX as u64,
        }),
        MgrRequest::Unlock(calls::Unlock {
            ino: 7,
            owner: 2,
            start: 10,
            end: 19,
        }),
        MgrRequest::LockRenew(calls::LockRenew),
        MgrRequest::LockDrop(calls::LockDrop),
    ]
}

/// Sample lock replies (protocol 17).
fn lock_replies() -> Vec<MgrReply> {
    let lease = LockLease {
        boot: 0x1234_5678_9abc_def0,
        lease_id: 3,
        lease_ms: 15_000,
        grace: false,
    };
    vec![
        MgrReply::LockAnswer(LockAnswer {
            outcome: LockOutcome::Granted,
            holder: None,
            held: vec![
                LockSpan {
                    start: 0,
                    end: 99,
                    exclusive: false,
                },
                LockSpan {
                    start: 100,
                    end: u64::MAX,
                    exclusive: true,
                },
            ],
            lease,
        }),
        MgrReply::LockAnswer(LockAnswer {
            outcome: LockOutcome::Conflict,
            holder: Some(LockHolder {
                start: 10,
                end: 20,
                exclusive: true,
                pid: 77,
                mine: false,
            }),
            held: vec![],
            lease,
        }),
        MgrReply::LockAnswer(LockAnswer {
            outcome: LockOutcome::Grace,
            holder: None,
            held: vec![],
            lease: LockLease {
                grace: true,
                lease_id: 0,
                ..lease
            },
        }),
        MgrReply::LockLease(lease),
        MgrReply::error(MgrStatus::NoLocks, "/a/b: 1024 lock ranges"),
    ]
}

#[test]
fn lock_answers_are_bounded_and_outcomes_checked() {
    let mut one = lock_replies()[0].clone();
    let MgrReply::LockAnswer(a) = &mut one else {
        panic!("a lock answer");
    };
    let span = a.held[0];
    a.held = vec![span; LOCK_RANGES_PER_FILE_MAX];
    let ok = one.encode(1);
    assert!(MgrReply::decode(&ok).is_ok());
    // outcome (1), holder option (1), then the count.
    let mut over = ok.clone();
    over[18..22].copy_from_slice(&(LOCK_RANGES_PER_FILE_MAX as u32 + 1).to_le_bytes());
    assert_eq!(
        MgrReply::decode(&over).unwrap_err(),
        DecodeError::TooLong("lock spans")
    );
    let mut bad = ok;
    bad[16] = 4;
    assert_eq!(
        MgrReply::decode(&bad).unwrap_err(),
        DecodeError::BadValue("lock outcome")
    );
}

#[test]
fn lock_fields_are_where_the_docs_say() {
    let b = lock_requests()[3].encode(9);
    assert_eq!(b[15], 66);
    let words: Vec<u64> = b[16..]
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, [7, 2, 10, 19]);
    let r = MgrReply::LockLease(LockLease {
        boot: 1,
        lease_id: 2,
        lease_ms: 3,
        grace: true,
    })
    .encode(1);
    assert_eq!(r[15], 32);
    assert_eq!(
        r[16..],
        [1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1]
    );
}

/// Sample requests (part 1 of 6).
fn requests_1() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
        MgrRequest::Login(calls::Login {
            user: "alice".into(),
            proof: LoginProof::LegacyPassword("pw".into()),
        }),
        MgrRequest::Login(calls::Login {
            user: "alice".into(),
            proof: LoginProof::Token([3; 32]),
        }),
        MgrRequest::OpaqueLoginStart(calls::OpaqueLoginStart {
            user: "alice".into(),
            request: [4; OPAQUE_KE1_BYTES],
        }),
        MgrRequest::OpaqueLoginFinish(calls::OpaqueLoginFinish {
            finalization: [5; OPAQUE_KE3_BYTES],
        }),
        MgrRequest::OpaqueRegisterStart(calls::OpaqueRegisterStart {
            user: "alice".into(),
            request: [6; OPAQUE_REGISTRATION_REQUEST_BYTES],
            code: Some("ABCD-EFGH".into()),
        }),
        MgrRequest::OpaqueRegisterStart(calls::OpaqueRegisterStart {
            user: "alice".into(),
            request: [6; OPAQUE_REGISTRATION_REQUEST_BYTES],
            code: None,
        }),
        MgrRequest::OpaqueRegisterFinish(calls::OpaqueRegisterFinish {
            upload: [7; OPAQUE_REGISTRATION_UPLOAD_BYTES],
            sealed: vec![8; 61],
        }),
        MgrRequest::Stat(calls::Stat { path: p() }),
        MgrRequest::Readdir(calls::Readdir {
            path: p(),
            after: "b".into(),
            limit: 100,
            xattr: None,
        }),
        MgrRequest::Readdir(calls::Readdir {
            path: p(),
            after: String::new(),
            limit: 1,
            xattr: Some("user.s3.etag".into()),
        }),
        MgrRequest::Mkdir(calls::Mkdir {
            path: p(),
            mode: 0o755,
        }),
        MgrRequest::Rmdir(calls::Rmdir { path: p() }),
        MgrRequest::Create(calls::Create {
            path: p(),
            mode: 0o644,
            exclusive: true,
            extend_by: 0,
        }),
        MgrRequest::Create(calls::Create {
            path: p(),
            mode: 0o600,
            exclusive: false,
            extend_by: 64 << 20,
        }),
        MgrRequest::Open(calls::Open {
            path: p(),
            write: true,
            extend_by: u64::MAX,
        }),
        MgrRequest::Open(calls::Open {
            path: p(),
            write: false,
            extend_by: 0,
        }),
        MgrRequest::ReturnCapability(calls::ReturnCapability {
            path: p(),
            audit_id: 9,
        }),
    ]
}

/// Sample requests (part 2 of 6).
fn requests_2() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
        MgrRequest::Unlink(calls::Unlink { path: p() }),
        MgrRequest::Rename(calls::Rename {
            from: p(),
            to: "/c".into(),
            flags: 0,
        }),
        MgrRequest::Rename(calls::Rename {
            from: p(),
            to: "/c".into(),
            flags: RENAME_EXCHANGE,
        }),
        MgrRequest::Mknod(calls::Mknod {
            path: p(),
            kind: FileKind::CharDevice,
            mode: 0o620,
            rdev: (4 << 8) | 1,
        }),
        MgrRequest::Statfs(calls::Statfs { path: p() }),
        MgrRequest::Chmod(calls::Chmod {
            path: p(),
            mode: 0o600,
        }),
        MgrRequest::Chown(calls::Chown {
            path: p(),
            owner: "bob".into(),
            group: String::new(),
            nofollow: true,
        }),
        MgrRequest::Truncate(calls::Truncate { path: p(), size: 5 }),
        MgrRequest::Utimes(calls::Utimes {
            path: p(),
            atime_us: None,
            mtime_us: Some(77),
            flags: 0,
        }),
        MgrRequest::Utimes(calls::Utimes {
            path: p(),
            atime_us: Some(66),
            mtime_us: None,
            flags: UTIMES_NOFOLLOW | UTIMES_ACCESSED,
        }),
        MgrRequest::UserAdd(calls::UserAdd {
            name: "bob".into(),
            admin: false,
            public_key: None,
        }),
        MgrRequest::UserAdd(calls::UserAdd {
            name: "carol".into(),
            admin: true,
            public_key: Some([7; 32]),
        }),
        MgrRequest::Login(calls::Login {
            user: "carol".into(),
            proof: LoginProof::Signature([8; 64]),
        }),
        MgrRequest::Challenge(calls::Challenge {
            user: "carol".into(),
        }),
        MgrRequest::UserPasswd(calls::UserPasswd {
            name: "bob".into(),
            public_key: None,
        }),
        MgrRequest::UserPasswd(calls::UserPasswd {
            name: "carol".into(),
            public_key: Some([9; 32]),
        }),
    ]
}

/// Sample requests (part 3 of 6).
fn requests_3() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
        MgrRequest::Logout(calls::Logout),
        MgrRequest::WaitBreaks(calls::WaitBreaks {
            acked: 7,
            wait_ms: 20_000,
        }),
        MgrRequest::UserList(calls::UserList),
        MgrRequest::GroupAdd(calls::GroupAdd {
            name: "staff".into(),
        }),
        MgrRequest::GroupMember(calls::GroupMember {
            group: "staff".into(),
            user: "bob".into(),
        }),
        MgrRequest::GroupMemberRemove(calls::GroupMemberRemove {
            group: "staff".into(),
            user: "bob".into(),
        }),
        MgrRequest::DriveAdd(calls::DriveAdd {
            addr: "127.0.0.1:1".into(),
            drive_key_file: "kind = drive".into(),
            master_key_file: "kind = master".into(),
        }),
        MgrRequest::DriveList(calls::DriveList),
        MgrRequest::Commit(calls::Commit {
            path: p(),
            drive: DriveId(3),
            object: ObjectId(17),
            size: 12345,
            stale: 0b100010,
            xattrs: None,
            e2e: None,
            exclusive: false,
        }),
        MgrRequest::Commit(calls::Commit {
            path: p(),
            drive: DriveId(3),
            object: ObjectId(17),
            size: 12345,
            stale: 0,
            xattrs: None,
            e2e: Some(sample_e2e_commit()),
            exclusive: true,
        }),
        MgrRequest::E2eUpdate(calls::E2eUpdate {
            path: p(),
            update: sample_e2e_commit(),
        }),
        MgrRequest::UserKeySet(calls::UserKeySet {
            user: "alice".into(),
            keys: UserKeys {
                enc_public: [1; 32],
                sign_public: [2; 32],
                version: 2,
                signature: [4; 64],
                sealed: vec![3; 90],
            },
        }),
        MgrRequest::UserKeyGet(calls::UserKeyGet {
            uids: vec![],
            names: vec![],
        }),
        MgrRequest::E2eWrappedFiles(calls::E2eWrappedFiles {
            after: 7,
            limit: 100,
        }),
        MgrRequest::E2eRewrap(calls::E2eRewrap {
            path: p(),
            update: sample_e2e_commit(),
        }),
        MgrRequest::GroupWrapSet(calls::GroupWrapSet {
            wraps: vec![(100, 2, vec![9; 93])],
        }),
    ]
}

/// Sample requests (part 4 of 6).
fn requests_4() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
        MgrRequest::UserKeyGet(calls::UserKeyGet {
            uids: vec![0, 1000, u32::MAX],
            names: vec!["bob".into()],
        }),
        MgrRequest::GroupKeySet(calls::GroupKeySet {
            group: "staff".into(),
            version: 3,
            public: [9; 32],
            link: vec![6; 93],
            wraps: vec![(1000, vec![7; 93]), (1001, vec![])],
        }),
        MgrRequest::GroupKeyGet(calls::GroupKeyGet {
            gids: vec![100],
            names: vec!["users".into(), "admin".into()],
        }),
        MgrRequest::Commit(calls::Commit {
            path: p(),
            drive: DriveId(3),
            object: ObjectId(17),
            size: 0,
            stale: 0,
            xattrs: Some(vec![
                Xattr {
                    name: "user.s3.etag".into(),
                    value: b"\"9e107d9d372bb6826bd81d3542a419d6\"".to_vec(),
                },
                Xattr {
                    name: "user.empty".into(),
                    value: vec![],
                },
            ]),
            e2e: None,
            exclusive: false,
        }),
        MgrRequest::Getxattrs(calls::Getxattrs { path: p() }),
        MgrRequest::Setxattr(calls::Setxattr {
            path: p(),
            name: "user.a".into(),
            value: Some(vec![0, 1, 255]),
        }),
        MgrRequest::Setxattr(calls::Setxattr {
            path: p(),
            name: "user.a".into(),
            value: None,
        }),
        MgrRequest::Abort(calls::Abort {
            path: p(),
            drive: DriveId(3),
            object: ObjectId(18),
        }),
        MgrRequest::Renew(calls::Renew {
            path: p(),
            drive: DriveId(3),
            object: ObjectId(19),
            extend_by: 1 << 20,
        }),
        MgrRequest::Prepare(calls::Prepare {
            dir: p(),
            mode: 0o640,
            count: 16,
            extend_by: 1 << 20,
        }),
        MgrRequest::QuotaSet(calls::QuotaSet {
            user: "bob".into(),
            limit: Some(10 << 30),
        }),
        MgrRequest::QuotaSet(calls::QuotaSet {
            user: "bob".into(),
            limit: None,
        }),
    ]
}

/// Sample requests (part 5 of 6).
fn requests_5() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
        MgrRequest::QuotaGet(calls::QuotaGet { user: "bob".into() }),
        MgrRequest::QuotaGet(calls::QuotaGet {
            user: String::new(),
        }),
        MgrRequest::Symlink(calls::Symlink {
            path: p(),
            target: "../x y/z".into(),
        }),
        MgrRequest::Readlink(calls::Readlink { path: p() }),
        MgrRequest::Lstat(calls::Lstat { path: p() }),
        MgrRequest::ActFor(calls::ActFor { user: "bob".into() }),
        MgrRequest::S3KeyCreate(calls::S3KeyCreate { user: "bob".into() }),
        MgrRequest::S3KeyList(calls::S3KeyList { user: "bob".into() }),
        MgrRequest::S3KeyRevoke(calls::S3KeyRevoke {
            user: "bob".into(),
            access_key_id: "NASDAAAABBBBCCCCDDDD".into(),
        }),
        MgrRequest::S3KeySecret(calls::S3KeySecret {
            access_key_id: "NASDAAAABBBBCCCCDDDD".into(),
        }),
        MgrRequest::UserGateway(calls::UserGateway {
            name: "s3gw".into(),
            on: true,
        }),
        MgrRequest::Link(calls::Link {
            existing: p(),
            new: "/b".into(),
        }),
    ]
}

/// Sample requests (part 6 of 6).
fn requests_6() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
        MgrRequest::LayoutGet(calls::LayoutGet { path: p() }),
        MgrRequest::LayoutSet(calls::LayoutSet {
            path: p(),
            spec: "rs:4+2".into(),
        }),
        MgrRequest::StageWrite(calls::StageWrite {
            path: p(),
            extend_by: 7,
        }),
        MgrRequest::Repair(calls::Repair {
            path: p(),
            component: 5,
            offset: 1 << 20,
            len: 65536,
        }),
        MgrRequest::Scrub(calls::Scrub {
            path: p(),
            repair: true,
        }),
        MgrRequest::Status(calls::Status { recount: false }),
        MgrRequest::Status(calls::Status { recount: true }),
        MgrRequest::DriveReplace(calls::DriveReplace {
            old: DriveId(3),
            new: DriveId(9),
        }),
    ]
}

#[test]
fn a_prepared_reply_past_its_limit_is_refused() {
    let MgrReply::Opened(Grant {
        stat, layout, caps, ..
    }) = base_replies()[5].clone()
    else {
        panic!("reply 5 is Opened");
    };
    let one = PreparedFile {
        stat,
        layout,
        caps,
        write_end: WRITE_END_UNBOUNDED,
        policy: E2ePolicy::default(),
    };
    let ok = MgrReply::Prepared(vec![one; PREPARED_FILES_MAX as usize]).encode(1);
    assert!(MgrReply::decode(&ok).is_ok());
    // The count sits right after the header (4 magic, 2 version, 1 kind, 8 id, 1 tag).
    let mut over = ok.clone();
    over[16..20].copy_from_slice(&(PREPARED_FILES_MAX + 1).to_le_bytes());
    assert_eq!(
        MgrReply::decode(&over).unwrap_err(),
        DecodeError::TooLong("prepared files")
    );
}

fn replies() -> Vec<MgrReply> {
    let mut v = base_replies();
    if let MgrReply::Opened(Grant {
        stat, layout, caps, ..
    }) = v[5].clone()
    {
        for (replaces, write_end) in [(false, 1 << 20), (true, WRITE_END_UNBOUNDED)] {
            v.push(MgrReply::Staged(StagedGrant {
                grant: Grant {
                    stat: stat.clone(),
                    layout: layout.clone(),
                    caps: caps.clone(),
                    write_end,
                    policy: E2ePolicy {
                        readers: vec![Principal::User(3), Principal::Group(4)],
                        ..E2ePolicy::default()
                    },
                    e2e: replaces.then(|| sample_e2e_commit().state),
                },
                replaces,
            }));
        }
        let one = PreparedFile {
            stat,
            layout,
            caps,
            write_end: 4096,
            policy: E2ePolicy::plaintext(),
        };
        v.push(MgrReply::Prepared(vec![]));
        v.push(MgrReply::Prepared(vec![one; 3]));
    }
    v.extend(key_replies());
    v.extend(more_replies());
    v.extend(lock_replies());
    v
}

/// Replies carrying keys.
fn key_replies() -> Vec<MgrReply> {
    vec![
        MgrReply::Challenge([6; 32]),
        MgrReply::UserKeys(vec![]),
        MgrReply::UserKeys(vec![UserKeyInfo {
            uid: 1000,
            name: "alice".into(),
            keys: UserKeys {
                enc_public: [1; 32],
                sign_public: [2; 32],
                version: 1,
                signature: [3; 64],
                sealed: vec![],
            },
        }]),
        MgrReply::FsSpace(FsSpace {
            total_bytes: 1 << 40,
            free_bytes: 1 << 39,
            quota: Some((10 << 30, 3 << 30)),
            files: 12_345,
        }),
        MgrReply::OpaqueMessage(OpaqueMessage(vec![5; 320])),
        MgrReply::Enrollment(Enrollment {
            uid: 1001,
            code: Some("ABCD-EFGH".into()),
            expires_ms: 9,
        }),
        MgrReply::Enrollment(Enrollment {
            uid: 1002,
            code: None,
            expires_ms: 0,
        }),
        MgrReply::WrappedFiles(vec![WrappedFile {
            ino: 12,
            path: "/a/b".into(),
        }]),
        MgrReply::GroupKeys(vec![
            GroupKeyInfo {
                gid: 100,
                name: "staff".into(),
                version: 0,
                public: None,
                wrap: vec![],
                member: false,
                rekey: false,
                missing: vec![],
                links: vec![],
            },
            GroupKeyInfo {
                gid: 101,
                name: "ops".into(),
                version: 2,
                public: Some([8; 32]),
                wrap: vec![1; 93],
                member: true,
                rekey: true,
                missing: vec![1002],
                links: vec![vec![5; 93]],
            },
        ]),
    ]
}

/// Quotas, errors, links, breaks, attributes and S3 keys.
fn more_replies() -> Vec<MgrReply> {
    vec![
        MgrReply::Quotas(vec![]),
        MgrReply::Quotas(vec![
            QuotaInfo {
                user: "alice".into(),
                uid: 1000,
                limit: 1 << 30,
                used: 12345,
                escrowed: 64 << 20,
            },
            QuotaInfo {
                user: "bob".into(),
                uid: 1001,
                limit: 0,
                used: 1,
                escrowed: 0,
            },
        ]),
        MgrReply::error(
            MgrStatus::QuotaExceeded,
            "/a: alice: limit 1 used 1 escrowed 0",
        ),
        MgrReply::LinkTarget(LinkTarget("/abs/target".into())),
        MgrReply::Breaks(vec![
            CallbackBreak {
                seq: 1,
                ino: 42,
                parent: 0,
                name: String::new(),
            },
            CallbackBreak {
                seq: 2,
                ino: 43,
                parent: 1,
                name: "naïve name".into(),
            },
        ]),
        MgrReply::Xattrs(Xattrs {
            stat: stat(),
            xattrs: vec![Xattr {
                name: "user.s3.content-type".into(),
                value: b"text/plain".to_vec(),
            }],
        }),
        MgrReply::S3KeyMade(S3KeyMade {
            access_key_id: "NASDAAAABBBBCCCCDDDD".into(),
            secret: SecretString("s".repeat(40)),
        }),
        MgrReply::S3Keys(vec![]),
        MgrReply::S3Keys(vec![("NASDA".into(), 1), ("NASDB".into(), 2)]),
        MgrReply::S3KeyFound(S3KeyFound {
            user: "bob".into(),
            secret: SecretString("t".repeat(40)),
        }),
    ]
}

fn base_replies() -> Vec<MgrReply> {
    [base_replies_1(), base_replies_2()].concat()
}

/// Sample replies (part 1 of 2).
fn base_replies_1() -> Vec<MgrReply> {
    vec![
        MgrReply::error(MgrStatus::NoSuchPath, "/x"),
        MgrReply::Ok(()),
        MgrReply::LoginOk(LoginOk {
            uid: 1,
            admin: true,
            token: SessionToken([9; 32]),
            expires_ms: 5,
        }),
        MgrReply::Stat(stat()),
        MgrReply::Entries(vec![
            DirEntry {
                name: "f".into(),
                stat: stat(),
                xattr: Some(b"\"etag\"".to_vec()),
            },
            DirEntry {
                name: "g".into(),
                stat: FileStat {
                    kind: FileKind::Dir,
                    ..stat()
                },
                xattr: None,
            },
            DirEntry {
                name: "l".into(),
                stat: FileStat {
                    kind: FileKind::Symlink,
                    nlink: 1,
                    ..stat()
                },
                xattr: None,
            },
        ]),
        MgrReply::Opened(Grant {
            stat: stat(),
            layout: Layout {
                version: 7,
                geometry: "rs:1+1/64K".into(),
                components: (0..2u64)
                    .map(|i| Component {
                        drive: DriveId(0xabc + i),
                        addr: "127.0.0.1:9".into(),
                        suite: Suite::Blake3,
                        partition: PartitionId(1),
                        object: ObjectId(16 + i),
                        stale: i == 1,
                    })
                    .collect(),
            },
            caps: (0..2u64)
                .map(|i| CapGrant {
                    args: CapabilityArgs {
                        drive: DriveId(0xabc + i),
                        partition: PartitionId(1),
                        object: ObjectId(16 + i),
                        region: Region::new(0, u64::MAX),
                        rights: Rights::READ.union(Rights::GETATTR),
                        expiry_ms: 99,
                        audit_id: 4,
                        min_protection: Protection::INTEGRITY_DATA,
                        // One grant names a writer key, one does not: both round-trip.
                        writer_key: (i == 0).then_some(crate::WriterPublicKey([7; 32])),
                    },
                    key: [5 + i as u8; 32],
                })
                .collect(),
            write_end: 3 << 20,
            policy: E2ePolicy::default(),
            e2e: None,
        }),
    ]
}

/// Sample replies (part 2 of 2).
fn base_replies_2() -> Vec<MgrReply> {
    vec![
        MgrReply::LayoutSpec(LayoutSpec("raid6x:8/256K".into())),
        MgrReply::Scrubbed(ScrubReport {
            path: "/a/b".into(),
            geometry: "rs:4+2".into(),
            bytes_checked: 1 << 30,
            groups: 4096,
            damaged: 2,
            repaired: 1,
            rebuilt: 1,
            unrecoverable: 0,
            unchecked: 1,
            detail: "component 3: stale".into(),
        }),
        MgrReply::Status(ClusterStatus::default()),
        MgrReply::Status(ClusterStatus {
            drives: vec![DriveStatus {
                drive: DriveId(4),
                addr: "127.0.0.1:9".into(),
                partition: PartitionId(1),
                healthy: false,
                files: 3,
                key_rotated_ms: 5,
                detail: "connection refused".into(),
                stale: 1,
                capacity_bytes: 1 << 40,
                used_bytes: 1 << 30,
            }],
            files: 10,
            degraded_files: 2,
            degraded: vec!["/x".into(), "/y".into()],
            rebuild: Some(RebuildStatus {
                old: DriveId(4),
                new: DriveId(5),
                files_done: 1,
                files_total: 2,
                bytes_done: 3,
                bytes_total: 4,
                failed: 0,
                finished: false,
                detail: String::new(),
            }),
            scrub: ScrubStatus {
                passes: 1,
                files: 2,
                bytes: 3,
                damaged: 4,
                repaired: 5,
                last_pass_ms: 6,
                rate_bytes_per_s: 7,
            },
            stale_files: 1,
            stale_components: 2,
            bytes: 3 << 20,
            stale_bytes: 1 << 20,
            recounted: Some(FileCounts {
                files: 10,
                stale_files: 1,
                stale_components: 2,
                bytes: 3 << 20,
                stale_bytes: 1 << 20,
                drives: vec![DriveCount {
                    drive: DriveId(4),
                    files: 3,
                    stale: 1,
                }],
            }),
        }),
        MgrReply::Users(vec![UserInfo {
            name: "a".into(),
            uid: 1,
            admin: false,
            groups: vec!["g1".into(), "g2".into()],
        }]),
        MgrReply::Drives(vec![DriveStatus {
            drive: DriveId(1),
            addr: "x".into(),
            partition: PartitionId(1),
            healthy: true,
            files: 3,
            key_rotated_ms: 4,
            detail: String::new(),
            stale: 1,
            capacity_bytes: 1 << 40,
            used_bytes: 1 << 30,
        }]),
    ]
}

/// The version 10 fields byte by byte, as docs/manager.md describes them: `extend_by`
/// ends an `Open`, `write_end` follows the capabilities, `QuotaExceeded` is status 25.
#[test]
fn version_10_fields_are_where_the_docs_say() {
    let open = MgrRequest::Open(calls::Open {
        path: "/f".into(),
        write: true,
        extend_by: 0x0102_0304_0506_0708,
    })
    .encode(5);
    let mut want = b"NSDM".to_vec();
    want.extend_from_slice(&MANAGER_PROTOCOL_VERSION.to_le_bytes());
    want.push(KIND_REQUEST);
    want.extend_from_slice(&5u64.to_le_bytes());
    want.push(7);
    want.extend_from_slice(&2u32.to_le_bytes());
    want.extend_from_slice(b"/f");
    want.push(1);
    want.extend_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
    assert_eq!(open, want);
    let MgrReply::Opened(Grant { write_end, .. }) = &base_replies()[5] else {
        panic!("reply 5 is Opened");
    };
    let b = base_replies()[5].encode(1);
    // write_end, then (version 12) the default policy (7 bytes since version 23) and
    // `has_e2e` 0.
    assert_eq!(b[b.len() - 16..b.len() - 8], write_end.to_le_bytes());
    assert_eq!(b[b.len() - 8..], [1, 0, 2, 16, 0, 0, 0, 0]);
    let e = MgrReply::error(MgrStatus::QuotaExceeded, "").encode(1);
    assert_eq!(e[16..18], 25u16.to_le_bytes());
    let q = MgrRequest::QuotaSet(calls::QuotaSet {
        user: "u".into(),
        limit: Some(9),
    })
    .encode(1);
    assert_eq!(q[15], 48);
    assert_eq!(q[16..], [1, 0, 0, 0, b'u', 1, 9, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn every_request_round_trips() {
    for (i, q) in requests().into_iter().enumerate() {
        let b = q.encode(i as u64);
        assert_eq!(request_id_of(&b), Some(i as u64));
        assert_eq!(MgrRequest::decode(&b).unwrap(), (i as u64, q));
    }
}

#[test]
fn every_reply_round_trips() {
    for (i, q) in replies().into_iter().enumerate() {
        let b = q.encode(i as u64);
        assert_eq!(MgrReply::decode(&b).unwrap(), (i as u64, q));
    }
}

#[test]
fn every_status_round_trips() {
    for s in MgrStatus::ALL {
        assert_eq!(MgrStatus::from_u16(s as u16), Some(s));
        assert!(!s.text().is_empty());
    }
    assert_eq!(MgrStatus::from_u16(999), None);
}

#[test]
fn truncations_and_garbage_are_errors_not_panics() {
    for q in requests() {
        let b = q.encode(1);
        for n in 0..b.len() {
            assert!(MgrRequest::decode(&b[..n]).is_err());
        }
        let mut long = b.clone();
        long.push(0);
        assert!(MgrRequest::decode(&long).is_err());
    }
    for q in replies() {
        let b = q.encode(1);
        for n in 0..b.len() {
            assert!(MgrReply::decode(&b[..n]).is_err());
        }
    }
    // A count that claims more entries than bytes present is refused before allocating.
    let mut b = MgrReply::Entries(vec![]).encode(1);
    let at = b.len() - 4;
    b[at..].copy_from_slice(&(LIST_ENTRIES_MAX as u32).to_le_bytes());
    assert!(MgrReply::decode(&b).is_err());
}

#[test]
fn other_versions_and_bad_utf8_are_refused() {
    let mut b = MgrRequest::UserList(calls::UserList).encode(1);
    b[4] = 99;
    assert_eq!(MgrRequest::decode(&b), Err(DecodeError::Version(99)));
    let mut b = MgrRequest::Stat(calls::Stat { path: "ab".into() }).encode(1);
    let n = b.len();
    b[n - 1] = 0xff;
    assert!(MgrRequest::decode(&b).is_err());
}

#[test]
fn secrets_are_not_debug_printed() {
    let c = Credential::Password("hunter2".into());
    assert!(!format!("{c:?}").contains("hunter2"));
    let legacy = MgrRequest::Login(calls::Login {
        user: "u".into(),
        proof: LoginProof::LegacyPassword("hunter2".into()),
    });
    let enroll = MgrRequest::OpaqueRegisterStart(calls::OpaqueRegisterStart {
        user: "u".into(),
        request: [1; OPAQUE_REGISTRATION_REQUEST_BYTES],
        code: Some("hunter2".into()),
    });
    let code = MgrReply::Enrollment(Enrollment {
        uid: 1,
        code: Some("hunter2".into()),
        expires_ms: 0,
    });
    let login = MgrRequest::Login(calls::Login {
        user: "u".into(),
        proof: LoginProof::Token([0x5a; TOKEN_BYTES]),
    });
    assert!(!format!("{code:?}").contains("hunter2"));
    for r in [&legacy, &enroll, &login] {
        let d = format!("{r:?}");
        assert!(!d.contains("hunter2") && !d.contains("90, 90"), "{d}");
    }
    let ok = MgrReply::LoginOk(LoginOk {
        token: SessionToken([0x5a; TOKEN_BYTES]),
        expires_ms: 0,
        uid: 1,
        admin: false,
    });
    assert!(!format!("{ok:?}").contains("90, 90"));
}

proptest::proptest! {
    #[test]
    fn decoders_are_total(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
        let _ = MgrRequest::decode(&bytes);
        let _ = MgrReply::decode(&bytes);
    }
}
