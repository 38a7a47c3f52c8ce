//! The manager protocol's encoding, byte for byte: a representative value of every request and
//! reply (each tag at least once, optional fields both ways, end-to-end state, empty and
//! non-ASCII strings) encodes to the frame recorded in `golden/manager_frames.txt`, and that
//! frame decodes back to the value. The file was recorded from protocol 13 as it stood; a change
//! of encoding fails here. `NASD_BLESS_GOLDEN=1` rewrites the file (only for a deliberate
//! protocol change, with a new `MANAGER_PROTOCOL_VERSION`).

use nasd_proto::capability::CapabilityArgs;
use nasd_proto::manager::calls;
use nasd_proto::manager::*;
use nasd_proto::{DriveId, ObjectId, PartitionId, Protection, Region, Rights, Suite};
use std::collections::BTreeSet;
use std::fmt::Write as _;

const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/manager_frames.txt"
);

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

fn e2e_commit() -> E2eCommit {
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

fn policy() -> E2ePolicy {
    E2ePolicy {
        encrypted: true,
        eint: Eint::Comp,
        auth: WriterAuth::Signed,
        block_log2: 12,
        readers: vec![Principal::User(3), Principal::Group(4)],
        everyone: vec![Principal::Group(100), Principal::Group(101)],
        group_keys: vec![
            GroupKeyState {
                gid: 100,
                version: 2,
                current: true,
            },
            GroupKeyState {
                gid: 101,
                version: 0,
                current: false,
            },
        ],
    }
}

fn layout() -> Layout {
    Layout {
        version: 7,
        geometry: "rs:1+1/64K".into(),
        components: (0..2u64)
            .map(|i| Component {
                drive: DriveId(0xabc + i),
                addr: "127.0.0.1:9".into(),
                suite: if i == 0 { Suite::Blake3 } else { Suite::Sha256 },
                partition: PartitionId(1),
                object: ObjectId(16 + i),
                stale: i == 1,
            })
            .collect(),
    }
}

fn caps() -> Vec<CapGrant> {
    (0..2u64)
        .map(|i| CapGrant {
            args: CapabilityArgs {
                drive: DriveId(0xabc + i),
                partition: PartitionId(1),
                object: ObjectId(16 + i),
                region: Region::new(i, u64::MAX - i),
                rights: Rights::READ.union(Rights::GETATTR),
                expiry_ms: 99,
                audit_id: 4,
                min_protection: Protection::INTEGRITY_DATA,
                writer_key: (i == 0).then_some(nasd_proto::WriterPublicKey([7; 32])),
            },
            key: [5 + i as u8; 32],
        })
        .collect()
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
        key_log_requests(),
    ]
    .concat()
}

/// Key log requests (protocol 19), recorded after the lock calls.
fn key_log_requests() -> Vec<MgrRequest> {
    vec![
        MgrRequest::KeyLog(calls::KeyLog { from: 0 }),
        MgrRequest::KeyLog(calls::KeyLog { from: 4097 }),
        MgrRequest::UserKeyReset(calls::UserKeyReset { user: "bob".into() }),
        MgrRequest::PolicyLog(calls::PolicyLog {
            readers: policy_readers(),
        }),
    ]
}

/// A policy readers statement (protocol 22).
fn policy_readers() -> PolicyReaders {
    PolicyReaders {
        by: 1000,
        at_ms: 1_790_000_000_000,
        dir: "/s3".into(),
        readers: vec![Principal::User(1002), Principal::Group(7)],
        signature: [0x77; 64],
    }
}

/// Key log replies (protocol 19), recorded after the lock replies.
fn key_log_replies() -> Vec<MgrReply> {
    let keys = UserKeys {
        enc_public: [0x11; 32],
        sign_public: [0x22; 32],
        version: 2,
        signature: [0x33; 64],
        sealed: vec![],
    };
    vec![
        MgrReply::KeyLogPage(KeyLogPage {
            head: KeyLogHead {
                size: 4,
                root: [0x44; 32],
                signature: [0x55; 64],
                log_key: [0x66; 32],
            },
            from: 1,
            entries: vec![
                KeyLogEntry::Keys { uid: 1001, keys },
                KeyLogEntry::Reset {
                    uid: 1001,
                    version: 3,
                    by: 1000,
                    at_ms: 1_790_000_000_000,
                },
                KeyLogEntry::Readers(policy_readers()),
            ],
        }),
        MgrReply::error(MgrStatus::PermissionDenied, "user key reset: admins only"),
        MgrReply::DirReaders(DirReaders(vec![Principal::User(1002)])),
    ]
}

/// Lock requests (protocol 17), recorded after the others.
fn lock_requests() -> Vec<MgrRequest> {
    vec![
        MgrRequest::Lock(calls::Lock {
            path: "/a/b".into(),
            ino: 7,
            owner: 0xdead_beef_0000_0001,
            pid: 4242,
            exclusive: true,
            start: 0,
            end: i64::MAX as u64,
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
            exclusive: false,
            start: 5,
            end: 5,
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

/// Lock replies (protocol 17), recorded after the others.
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
                    end: i64::MAX as u64,
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
                mine: true,
            }),
            held: vec![],
            lease,
        }),
        MgrReply::LockAnswer(LockAnswer {
            outcome: LockOutcome::NoGrace,
            holder: None,
            held: vec![],
            lease: LockLease {
                grace: true,
                ..lease
            },
        }),
        MgrReply::LockLease(LockLease {
            lease_id: 0,
            ..lease
        }),
        MgrReply::error(MgrStatus::NoLocks, "/a/b: the lock table is full"),
    ]
}

/// Requests, in the order of the recording (part 1 of 6).
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
        MgrRequest::Login(calls::Login {
            user: "carol".into(),
            proof: LoginProof::Signature([8; 64]),
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
            code: Some("ABCD".into()),
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
    ]
}

/// Requests, in the order of the recording (part 2 of 6).
fn requests_2() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
        MgrRequest::ReturnCapability(calls::ReturnCapability {
            path: p(),
            audit_id: 9,
        }),
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
            mode: 0o4755,
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
        MgrRequest::UserPasswd(calls::UserPasswd {
            name: "bob".into(),
            public_key: None,
        }),
        MgrRequest::UserPasswd(calls::UserPasswd {
            name: "carol".into(),
            public_key: Some([9; 32]),
        }),
        MgrRequest::UserList(calls::UserList),
    ]
}

/// Requests, in the order of the recording (part 3 of 6).
fn requests_3() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
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
            e2e: Some(e2e_commit()),
            exclusive: true,
        }),
        MgrRequest::Commit(calls::Commit {
            path: p(),
            drive: DriveId(u64::MAX),
            object: ObjectId(1),
            size: 1,
            stale: 0,
            xattrs: Some(vec![]),
            e2e: None,
            exclusive: false,
        }),
        MgrRequest::Challenge(calls::Challenge {
            user: "carol".into(),
        }),
        MgrRequest::Logout(calls::Logout),
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
        MgrRequest::LayoutGet(calls::LayoutGet { path: p() }),
    ]
}

/// Requests, in the order of the recording (part 4 of 6).
fn requests_4() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
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
        MgrRequest::Scrub(calls::Scrub {
            path: p(),
            repair: false,
        }),
        MgrRequest::Status(calls::Status { recount: false }),
        MgrRequest::Status(calls::Status { recount: true }),
        MgrRequest::DriveReplace(calls::DriveReplace {
            old: DriveId(3),
            new: DriveId(9),
        }),
        MgrRequest::Prepare(calls::Prepare {
            dir: p(),
            mode: 0o640,
            count: 16,
            extend_by: 1 << 20,
        }),
        MgrRequest::Symlink(calls::Symlink {
            path: p(),
            target: "../x y/naïve".into(),
        }),
        MgrRequest::Readlink(calls::Readlink { path: p() }),
        MgrRequest::Link(calls::Link {
            existing: p(),
            new: "/b".into(),
        }),
        MgrRequest::Lstat(calls::Lstat { path: p() }),
    ]
}

/// Requests, in the order of the recording (part 5 of 6).
fn requests_5() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
        MgrRequest::ActFor(calls::ActFor { user: "bob".into() }),
        MgrRequest::UserGateway(calls::UserGateway {
            name: "s3gw".into(),
            on: true,
        }),
        MgrRequest::UserGateway(calls::UserGateway {
            name: "s3gw".into(),
            on: false,
        }),
        MgrRequest::S3KeyCreate(calls::S3KeyCreate { user: "bob".into() }),
        MgrRequest::S3KeyList(calls::S3KeyList { user: "bob".into() }),
        MgrRequest::S3KeyRevoke(calls::S3KeyRevoke {
            user: "bob".into(),
            access_key_id: "NASDAAAABBBBCCCCDDDD".into(),
        }),
        MgrRequest::S3KeySecret(calls::S3KeySecret {
            access_key_id: "NASDAAAABBBBCCCCDDDD".into(),
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
        MgrRequest::WaitBreaks(calls::WaitBreaks {
            acked: 7,
            wait_ms: 20_000,
        }),
        MgrRequest::QuotaSet(calls::QuotaSet {
            user: "bob".into(),
            limit: Some(10 << 30),
        }),
    ]
}

/// Requests, in the order of the recording (part 6 of 6).
fn requests_6() -> Vec<MgrRequest> {
    let p = || "/a/b".to_string();
    vec![
        MgrRequest::QuotaSet(calls::QuotaSet {
            user: "bob".into(),
            limit: None,
        }),
        MgrRequest::QuotaGet(calls::QuotaGet { user: "bob".into() }),
        MgrRequest::QuotaGet(calls::QuotaGet {
            user: String::new(),
        }),
        MgrRequest::E2eUpdate(calls::E2eUpdate {
            path: p(),
            update: e2e_commit(),
        }),
        MgrRequest::UserKeySet(calls::UserKeySet {
            user: "alice".into(),
            keys: UserKeys {
                enc_public: [1; 32],
                sign_public: [2; 32],
                version: 2,
                signature: [6; 64],
                sealed: vec![3; 90],
            },
        }),
        MgrRequest::E2eWrappedFiles(calls::E2eWrappedFiles {
            after: 7,
            limit: 100,
        }),
        MgrRequest::E2eRewrap(calls::E2eRewrap {
            path: p(),
            update: e2e_commit(),
        }),
        MgrRequest::GroupWrapSet(calls::GroupWrapSet {
            wraps: vec![(100, 2, vec![9; 93])],
        }),
        MgrRequest::UserKeyGet(calls::UserKeyGet {
            uids: vec![],
            names: vec![],
        }),
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
    ]
}

/// A prepared file with the sample stat, layout and grants.
fn prepared(write_end: u64, policy: E2ePolicy) -> PreparedFile {
    PreparedFile {
        stat: stat(),
        layout: layout(),
        caps: caps(),
        write_end,
        policy,
    }
}

fn replies() -> Vec<MgrReply> {
    [
        replies_1(),
        replies_2(),
        replies_3(),
        replies_4(),
        lock_replies(),
        key_log_replies(),
    ]
    .concat()
}

/// Replies, in the order of the recording (part 1 of 4).
fn replies_1() -> Vec<MgrReply> {
    vec![
        MgrReply::error(MgrStatus::NoSuchPath, "/x"),
        MgrReply::error(
            MgrStatus::QuotaExceeded,
            "/a: alice: limit 1 used 1 escrowed 0",
        ),
        MgrReply::error(MgrStatus::NoUserKeys, ""),
        MgrReply::Ok(()),
        MgrReply::LoginOk(LoginOk {
            uid: 1,
            admin: true,
            token: SessionToken([9; 32]),
            expires_ms: 5,
        }),
        MgrReply::Stat(stat()),
        MgrReply::Stat(FileStat {
            kind: FileKind::Symlink,
            owner: String::new(),
            ..stat()
        }),
        MgrReply::Entries(vec![]),
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
        ]),
        MgrReply::Opened(Grant {
            stat: stat(),
            layout: layout(),
            caps: caps(),
            write_end: 3 << 20,
            policy: E2ePolicy::default(),
            e2e: None,
        }),
    ]
}

/// Replies, in the order of the recording (part 2 of 4).
fn replies_2() -> Vec<MgrReply> {
    vec![
        MgrReply::Opened(Grant {
            stat: stat(),
            layout: Layout::single(layout().components[0].clone()),
            caps: caps()[..1].to_vec(),
            write_end: WRITE_END_UNBOUNDED,
            policy: policy(),
            e2e: Some(e2e_commit().state),
        }),
        MgrReply::Users(vec![]),
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
        MgrReply::Staged(StagedGrant {
            grant: Grant {
                stat: stat(),
                layout: layout(),
                caps: caps(),
                write_end: 1 << 20,
                policy: E2ePolicy::plaintext(),
                e2e: None,
            },
            replaces: false,
        }),
        MgrReply::Staged(StagedGrant {
            grant: Grant {
                stat: stat(),
                layout: layout(),
                caps: caps(),
                write_end: WRITE_END_UNBOUNDED,
                policy: policy(),
                e2e: Some(e2e_commit().state),
            },
            replaces: true,
        }),
        MgrReply::Challenge([6; 32]),
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
    ]
}

/// Replies, in the order of the recording (part 3 of 4).
fn replies_3() -> Vec<MgrReply> {
    vec![
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
                finished: true,
                detail: "done".into(),
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
        MgrReply::Prepared(vec![]),
        MgrReply::Prepared(vec![
            prepared(4096, E2ePolicy::plaintext()),
            prepared(WRITE_END_UNBOUNDED, policy()),
        ]),
        MgrReply::LinkTarget(LinkTarget("/abs/target".into())),
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
        MgrReply::Xattrs(Xattrs {
            stat: stat(),
            xattrs: vec![],
        }),
        MgrReply::Xattrs(Xattrs {
            stat: stat(),
            xattrs: vec![Xattr {
                name: "user.s3.content-type".into(),
                value: b"text/plain".to_vec(),
            }],
        }),
    ]
}

/// Replies, in the order of the recording (part 4 of 4).
fn replies_4() -> Vec<MgrReply> {
    vec![
        MgrReply::Breaks(vec![]),
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
        MgrReply::UserKeys(vec![]),
        MgrReply::UserKeys(vec![UserKeyInfo {
            uid: 1000,
            name: "alice".into(),
            keys: UserKeys {
                enc_public: [1; 32],
                sign_public: [2; 32],
                version: 1,
                signature: [7; 64],
                sealed: vec![5; 12],
            },
        }]),
        MgrReply::OpaqueMessage(OpaqueMessage(vec![5; 320])),
        MgrReply::Enrollment(Enrollment {
            uid: 1001,
            code: Some("ABCD".into()),
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
        MgrReply::GroupKeys(vec![]),
        MgrReply::FsSpace(FsSpace {
            total_bytes: 1 << 40,
            free_bytes: 1 << 39,
            quota: Some((10 << 30, 3 << 30)),
            files: 12_345,
        }),
        MgrReply::FsSpace(FsSpace {
            total_bytes: 0,
            free_bytes: 0,
            quota: None,
            files: 0,
        }),
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

/// Every frame, one a line: `request|reply`, index, tag, then the body in hex (the request id
/// is the index).
fn frames() -> String {
    let mut out = String::new();
    let mut tags = (BTreeSet::new(), BTreeSet::new());
    for (i, q) in requests().into_iter().enumerate() {
        let b = q.encode(i as u64);
        assert_eq!(MgrRequest::decode(&b).unwrap(), (i as u64, q));
        tags.0.insert(b[15]);
        writeln!(out, "request {i} {} {}", b[15], hex(&b)).unwrap();
    }
    for (i, r) in replies().into_iter().enumerate() {
        let b = r.encode(i as u64);
        assert_eq!(MgrReply::decode(&b).unwrap(), (i as u64, r));
        tags.1.insert(b[15]);
        writeln!(out, "reply {i} {} {}", b[15], hex(&b)).unwrap();
    }
    macro_rules! call_tags {
        ($($tag:literal $C:ident $name:literal => $R:ty;)*) => {
            BTreeSet::from([$($tag),*])
        };
    }
    let calls: BTreeSet<u8> = nasd_proto::for_each_manager_call!(call_tags);
    assert_eq!(tags.0, calls, "every request tag is sampled");
    let replies: BTreeSet<u8> = (1..=26).chain([30, 31, 32, 33, 34]).collect();
    assert_eq!(tags.1, replies, "every reply tag is sampled");
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn every_message_encodes_as_recorded() {
    let now = frames();
    if std::env::var_os("NASD_BLESS_GOLDEN").is_some() {
        std::fs::write(GOLDEN, &now).unwrap();
    }
    let recorded = std::fs::read_to_string(GOLDEN).expect("the recorded frames");
    for (n, (a, b)) in recorded.lines().zip(now.lines()).enumerate() {
        assert_eq!(a, b, "frame {n} differs from the recording");
    }
    assert_eq!(recorded.lines().count(), now.lines().count());
}
