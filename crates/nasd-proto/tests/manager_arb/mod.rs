//! Arbitrary values of every manager request and reply type, from a seeded generator: within
//! the protocol's limits (what a sender may encode), with edge values (0, `MAX`, empty,
//! non-ASCII) likely. Used by the property tests in `manager_calls.rs`.

use nasd_proto::capability::CapabilityArgs;
use nasd_proto::manager::calls::*;
use nasd_proto::manager::*;
use nasd_proto::{
    DriveId, ObjectId, PartitionId, Protection, Region, Rights, Suite, WriterPublicKey,
};

/// SplitMix64: small, seeded, good enough to spread values.
pub struct Gen(u64);

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (> 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Up to `n` elements, each made by `f`.
    pub fn list<T>(&mut self, n: u64, mut f: impl FnMut(&mut Gen) -> T) -> Vec<T> {
        let len = self.below(n + 1);
        (0..len).map(|_| f(self)).collect()
    }

    /// Up to `max` bytes of text, some of it multi-byte.
    pub fn text(&mut self, max: usize) -> String {
        const PIECES: [&str; 8] = ["a", "/", "Z9", " ", "é", "日本", "\u{1f600}", ".."];
        let mut s = String::new();
        for _ in 0..self.below(6) {
            let p = PIECES[self.below(PIECES.len() as u64) as usize];
            if s.len() + p.len() <= max {
                s.push_str(p);
            }
        }
        s
    }

    /// A name an extended attribute may have: non-empty, no control characters.
    pub fn xattr_name(&mut self) -> String {
        format!("user.{}", self.text(40))
    }
}

/// An arbitrary value of `Self`.
pub trait Arb: Sized {
    fn arb(g: &mut Gen) -> Self;
}

impl Arb for u64 {
    fn arb(g: &mut Gen) -> u64 {
        match g.below(4) {
            0 => 0,
            1 => u64::MAX,
            _ => g.next() >> g.below(64),
        }
    }
}

macro_rules! arb_narrow {
    ($($t:ty),*) => {$(
        impl Arb for $t {
            fn arb(g: &mut Gen) -> $t {
                u64::arb(g) as $t
            }
        }
    )*};
}
arb_narrow!(u8, u16, u32);

impl Arb for bool {
    fn arb(g: &mut Gen) -> bool {
        g.below(2) == 1
    }
}

impl Arb for String {
    fn arb(g: &mut Gen) -> String {
        g.text(64)
    }
}

impl Arb for Vec<u8> {
    fn arb(g: &mut Gen) -> Vec<u8> {
        g.list(40, |g| g.next() as u8)
    }
}

impl<const N: usize> Arb for [u8; N] {
    fn arb(g: &mut Gen) -> [u8; N] {
        std::array::from_fn(|_| g.next() as u8)
    }
}

impl<T: Arb> Arb for Option<T> {
    fn arb(g: &mut Gen) -> Option<T> {
        bool::arb(g).then(|| T::arb(g))
    }
}

impl<A: Arb, B: Arb> Arb for (A, B) {
    fn arb(g: &mut Gen) -> (A, B) {
        (A::arb(g), B::arb(g))
    }
}

impl Arb for () {
    fn arb(_: &mut Gen) {}
}

/// `Arb` for a struct (or a newtype) whose every field is `Arb`.
macro_rules! arb_fields {
    ($($T:ident { $($f:ident),* $(,)? })*) => {$(
        impl Arb for $T {
            fn arb(g: &mut Gen) -> $T {
                $T { $($f: Arb::arb(g)),* }
            }
        }
    )*};
}

macro_rules! arb_newtype {
    ($($T:ident),*) => {$(
        impl Arb for $T {
            fn arb(g: &mut Gen) -> $T {
                $T(Arb::arb(g))
            }
        }
    )*};
}

macro_rules! arb_unit {
    ($($T:ident),*) => {$(
        impl Arb for $T {
            fn arb(_: &mut Gen) -> $T {
                $T
            }
        }
    )*};
}

/// `Vec<T>` replies: up to a few elements.
macro_rules! arb_vec {
    ($($T:ty),*) => {$(
        impl Arb for Vec<$T> {
            fn arb(g: &mut Gen) -> Vec<$T> {
                g.list(3, <$T>::arb)
            }
        }
    )*};
}

arb_newtype!(
    DriveId,
    ObjectId,
    PartitionId,
    SecretString,
    SessionToken,
    LinkTarget,
    LayoutSpec,
    OpaqueMessage
);
arb_unit!(Logout, UserList, DriveList, LockRenew, LockDrop);
arb_vec!(
    DirEntry,
    UserInfo,
    DriveStatus,
    DriveCount,
    (String, u64),
    CallbackBreak,
    QuotaInfo,
    UserKeyInfo,
    GroupKeyInfo,
    PreparedFile,
    WrappedFile,
    KeyLogEntry
);

arb_fields! {
    Login { user, proof }
    OpaqueLoginStart { user, request }
    OpaqueLoginFinish { finalization }
    OpaqueRegisterStart { user, request, code }
    OpaqueRegisterFinish { upload, sealed }
    Enrollment { uid, code, expires_ms }
    E2eWrappedFiles { after, limit }
    WrappedFile { ino, path }
    E2eRewrap { path, update }
    LoginOk { uid, admin, token, expires_ms }
    Challenge { user }
    ActFor { user }
    Stat { path }
    Lstat { path }
    Mkdir { path, mode }
    Rmdir { path }
    Unlink { path }
    Symlink { path, target }
    Readlink { path }
    Link { existing, new }
    Chmod { path, mode }
    Chown { path, owner, group, nofollow }
    Truncate { path, size }
    Statfs { path }
    FsSpace { total_bytes, free_bytes, quota, files }
    LayoutGet { path }
    LayoutSet { path, spec }
    FileStat { ino, kind, mode, uid, gid, owner, group, size, mtime_us, ctime_us, nlink, atime_us, rdev }
    Create { path, mode, exclusive, extend_by }
    Open { path, write, extend_by }
    ReturnCapability { path, audit_id }
    Abort { path, drive, object }
    Renew { path, drive, object, extend_by }
    Prepare { dir, mode, count, extend_by }
    StageWrite { path, extend_by }
    StagedGrant { grant, replaces }
    Getxattrs { path }
    UserAdd { name, admin, public_key }
    UserPasswd { name, public_key }
    UserInfo { name, uid, admin, groups }
    GroupAdd { name }
    GroupMember { group, user }
    GroupMemberRemove { group, user }
    UserGateway { name, on }
    S3KeyCreate { user }
    S3KeyMade { access_key_id, secret }
    S3KeyList { user }
    S3KeyRevoke { user, access_key_id }
    S3KeySecret { access_key_id }
    S3KeyFound { user, secret }
    E2eUpdate { path, update }
    E2eCommit { expect, state }
    UserKeySet { user, keys }
    UserKeyGet { uids, names }
    UserKeyInfo { uid, name, keys }
    GroupKeyGet { gids, names }
    QuotaSet { user, limit }
    QuotaGet { user }
    QuotaInfo { user, uid, limit, used, escrowed }
    DriveAdd { addr, drive_key_file, master_key_file }
    DriveStatus {
        drive, addr, partition, healthy, files, key_rotated_ms, detail, stale, capacity_bytes,
        used_bytes,
    }
    Status { recount }
    DriveCount { drive, files, stale }
    FileCounts { files, stale_files, stale_components, bytes, stale_bytes, drives }
    Repair { path, component, offset, len }
    Scrub { path, repair }
    ScrubReport {
        path, geometry, bytes_checked, groups, damaged, repaired, rebuilt, unrecoverable,
        unchecked, detail,
    }
    DriveReplace { old, new }
    RebuildStatus {
        old, new, files_done, files_total, bytes_done, bytes_total, failed, finished, detail,
    }
    ScrubStatus { passes, files, bytes, damaged, repaired, last_pass_ms, rate_bytes_per_s }
    WaitBreaks { acked, wait_ms }
    CallbackBreak { seq, ino, parent, name }
    Lock { path, ino, owner, pid, exclusive, start, end, reclaim }
    LockTest { path, ino, owner, exclusive, start, end }
    Unlock { ino, owner, start, end }
    LockHolder { start, end, exclusive, pid, mine }
    LockSpan { start, end, exclusive }
    LockLease { boot, lease_id, lease_ms, grace }
    KeyLog { from }
    UserKeyReset { user }
    KeyLogHead { size, root, signature, log_key }
    KeyLogPage { head, from, entries }
}

impl Arb for KeyLogEntry {
    fn arb(g: &mut Gen) -> KeyLogEntry {
        if g.below(2) == 0 {
            KeyLogEntry::Keys {
                uid: Arb::arb(g),
                keys: UserKeys {
                    sealed: vec![],
                    ..Arb::arb(g)
                },
            }
        } else if g.below(2) == 0 {
            KeyLogEntry::Reset {
                uid: Arb::arb(g),
                version: Arb::arb(g),
                by: Arb::arb(g),
                at_ms: Arb::arb(g),
            }
        } else {
            KeyLogEntry::Readers(Arb::arb(g))
        }
    }
}

/// Readers as statements and answers carry them: sorted, distinct, at most eight.
fn sorted_readers(g: &mut Gen) -> Vec<Principal> {
    let mut v = g.list(8, Principal::arb);
    v.sort();
    v.dedup();
    v
}

impl Arb for PolicyReaders {
    fn arb(g: &mut Gen) -> PolicyReaders {
        let parts = g.list(4, |g| {
            let t = g.text(20).replace('/', "x");
            match t.as_str() {
                "" | "." | ".." => "d".to_string(),
                _ => t,
            }
        });
        PolicyReaders {
            by: Arb::arb(g),
            at_ms: Arb::arb(g),
            dir: format!("/{}", parts.join("/")),
            readers: sorted_readers(g),
            signature: Arb::arb(g),
        }
    }
}

impl Arb for PolicyLog {
    fn arb(g: &mut Gen) -> PolicyLog {
        PolicyLog {
            readers: Arb::arb(g),
        }
    }
}

impl Arb for DirReaders {
    fn arb(g: &mut Gen) -> DirReaders {
        DirReaders(sorted_readers(g))
    }
}

impl Arb for LockOutcome {
    fn arb(g: &mut Gen) -> LockOutcome {
        [
            LockOutcome::Granted,
            LockOutcome::Conflict,
            LockOutcome::Grace,
            LockOutcome::NoGrace,
        ][g.below(4) as usize]
    }
}

impl Arb for LockAnswer {
    fn arb(g: &mut Gen) -> LockAnswer {
        LockAnswer {
            outcome: Arb::arb(g),
            holder: Arb::arb(g),
            held: g.list(3, LockSpan::arb),
            lease: Arb::arb(g),
        }
    }
}

impl<T: Arb> Arb for Vec<T>
where
    T: Listed,
{
    fn arb(g: &mut Gen) -> Vec<T> {
        g.list(3, T::arb)
    }
}

/// Element types of request lists (ids, names), kept apart from the reply lists above.
pub trait Listed {}
impl Listed for u32 {}
impl Listed for String {}

impl Arb for LoginProof {
    fn arb(g: &mut Gen) -> LoginProof {
        match g.below(3) {
            0 => LoginProof::LegacyPassword(Arb::arb(g)),
            1 => LoginProof::Token(Arb::arb(g)),
            _ => LoginProof::Signature(Arb::arb(g)),
        }
    }
}

impl Arb for GroupWrapSet {
    fn arb(g: &mut Gen) -> GroupWrapSet {
        GroupWrapSet {
            wraps: g.list(3, |g| (Arb::arb(g), Arb::arb(g), Arb::arb(g))),
        }
    }
}

/// Every kind of entry.
const KINDS: [FileKind; 7] = [
    FileKind::File,
    FileKind::Dir,
    FileKind::Symlink,
    FileKind::Fifo,
    FileKind::Socket,
    FileKind::CharDevice,
    FileKind::BlockDevice,
];

impl Arb for FileKind {
    fn arb(g: &mut Gen) -> FileKind {
        KINDS[g.below(KINDS.len() as u64) as usize]
    }
}

/// Renames carry only the flags the protocol has.
impl Arb for Rename {
    fn arb(g: &mut Gen) -> Rename {
        Rename {
            from: Arb::arb(g),
            to: Arb::arb(g),
            flags: [0, RENAME_NOREPLACE, RENAME_EXCHANGE][g.below(3) as usize],
        }
    }
}

/// Utimes carry only the flags the protocol has.
impl Arb for Utimes {
    fn arb(g: &mut Gen) -> Utimes {
        Utimes {
            path: Arb::arb(g),
            atime_us: Arb::arb(g),
            mtime_us: Arb::arb(g),
            flags: g.below(4) as u8,
        }
    }
}

/// Only special files are made with `Mknod`.
impl Arb for Mknod {
    fn arb(g: &mut Gen) -> Mknod {
        let special: Vec<FileKind> = KINDS.into_iter().filter(|k| k.special()).collect();
        Mknod {
            path: Arb::arb(g),
            kind: special[g.below(special.len() as u64) as usize],
            mode: Arb::arb(g),
            rdev: Arb::arb(g),
        }
    }
}

impl Arb for Suite {
    fn arb(g: &mut Gen) -> Suite {
        [Suite::Blake3, Suite::Sha256][g.below(2) as usize]
    }
}

impl Arb for Component {
    fn arb(g: &mut Gen) -> Component {
        Component {
            drive: Arb::arb(g),
            addr: Arb::arb(g),
            suite: Arb::arb(g),
            partition: Arb::arb(g),
            object: Arb::arb(g),
            stale: Arb::arb(g),
        }
    }
}

impl Arb for Layout {
    fn arb(g: &mut Gen) -> Layout {
        let n = 1 + g.below(4);
        Layout {
            version: Arb::arb(g),
            geometry: g.text(GEOMETRY_BYTES_MAX),
            components: (0..n).map(|_| Component::arb(g)).collect(),
        }
    }
}

fn cap_grant(g: &mut Gen, c: &Component) -> CapGrant {
    let offset = u64::arb(g);
    CapGrant {
        args: CapabilityArgs {
            drive: c.drive,
            partition: c.partition,
            object: c.object,
            region: Region::new(offset, u64::arb(g).min(u64::MAX - offset)),
            rights: Rights(u32::arb(g) & Rights::ALL.0),
            expiry_ms: Arb::arb(g),
            audit_id: Arb::arb(g),
            min_protection: Protection::from_bits(u8::arb(g) & 31).unwrap(),
            writer_key: Option::<[u8; 32]>::arb(g).map(WriterPublicKey),
        },
        key: Arb::arb(g),
    }
}

/// A stat, a layout and one capability per component.
fn granted(g: &mut Gen) -> (FileStat, Layout, Vec<CapGrant>) {
    let layout = Layout::arb(g);
    let caps = layout.components.iter().map(|c| cap_grant(g, c)).collect();
    (FileStat::arb(g), layout, caps)
}

impl Arb for Grant {
    fn arb(g: &mut Gen) -> Grant {
        let (stat, layout, caps) = granted(g);
        Grant {
            stat,
            layout,
            caps,
            write_end: Arb::arb(g),
            policy: Arb::arb(g),
            e2e: Arb::arb(g),
        }
    }
}

impl Arb for PreparedFile {
    fn arb(g: &mut Gen) -> PreparedFile {
        let (stat, layout, caps) = granted(g);
        PreparedFile {
            stat,
            layout,
            caps,
            write_end: Arb::arb(g),
            policy: Arb::arb(g),
        }
    }
}

impl Arb for Created {
    fn arb(g: &mut Gen) -> Created {
        match bool::arb(g) {
            false => Created::Opened(Arb::arb(g)),
            true => Created::Staged(Arb::arb(g)),
        }
    }
}

impl Arb for Principal {
    fn arb(g: &mut Gen) -> Principal {
        match bool::arb(g) {
            false => Principal::User(Arb::arb(g)),
            true => Principal::Group(Arb::arb(g)),
        }
    }
}

impl Arb for E2ePolicy {
    fn arb(g: &mut Gen) -> E2ePolicy {
        E2ePolicy {
            encrypted: Arb::arb(g),
            eint: [Eint::Mt, Eint::Rand, Eint::Comp][g.below(3) as usize],
            auth: [
                WriterAuth::Signed,
                WriterAuth::SignedForReaders,
                WriterAuth::KeyedHash,
            ][g.below(3) as usize],
            block_log2: 10 + g.below(7) as u8,
            readers: g.list(8, Principal::arb),
            everyone: g.list(8, Principal::arb),
            group_keys: g.list(8, |g| GroupKeyState {
                gid: Arb::arb(g),
                version: Arb::arb(g),
                current: Arb::arb(g),
            }),
        }
    }
}

impl Arb for E2eState {
    fn arb(g: &mut Gen) -> E2eState {
        E2eState {
            record: Arb::arb(g),
            writer: Arb::arb(g),
            signature: match bool::arb(g) {
                false => vec![],
                true => <[u8; 64]>::arb(g).to_vec(),
            },
            side: Arb::arb(g),
        }
    }
}

impl Arb for UserKeys {
    fn arb(g: &mut Gen) -> UserKeys {
        UserKeys {
            enc_public: Arb::arb(g),
            sign_public: Arb::arb(g),
            version: Arb::arb(g),
            signature: Arb::arb(g),
            sealed: Arb::arb(g),
        }
    }
}

impl Arb for GroupKeyInfo {
    fn arb(g: &mut Gen) -> GroupKeyInfo {
        GroupKeyInfo {
            gid: Arb::arb(g),
            name: Arb::arb(g),
            version: Arb::arb(g),
            public: Arb::arb(g),
            wrap: Arb::arb(g),
            member: Arb::arb(g),
            rekey: Arb::arb(g),
            missing: g.list(3, Arb::arb),
            links: g.list(3, Arb::arb),
        }
    }
}

impl Arb for GroupKeySet {
    fn arb(g: &mut Gen) -> GroupKeySet {
        GroupKeySet {
            group: Arb::arb(g),
            version: Arb::arb(g),
            public: Arb::arb(g),
            link: Arb::arb(g),
            wraps: g.list(3, Arb::arb),
        }
    }
}

/// A set of extended attributes a file may carry (names unique).
fn xattrs(g: &mut Gen) -> Vec<Xattr> {
    let mut v: Vec<Xattr> = vec![];
    for _ in 0..g.below(4) {
        let name = g.xattr_name();
        if v.iter().all(|x| x.name != name) {
            v.push(Xattr {
                name,
                value: Arb::arb(g),
            });
        }
    }
    v
}

impl Arb for Xattrs {
    fn arb(g: &mut Gen) -> Xattrs {
        Xattrs {
            stat: Arb::arb(g),
            xattrs: xattrs(g),
        }
    }
}

impl Arb for Setxattr {
    fn arb(g: &mut Gen) -> Setxattr {
        Setxattr {
            path: Arb::arb(g),
            name: g.xattr_name(),
            value: Arb::arb(g),
        }
    }
}

impl Arb for Readdir {
    fn arb(g: &mut Gen) -> Readdir {
        Readdir {
            path: Arb::arb(g),
            after: Arb::arb(g),
            limit: Arb::arb(g),
            xattr: bool::arb(g).then(|| g.xattr_name()),
        }
    }
}

impl Arb for DirEntry {
    fn arb(g: &mut Gen) -> DirEntry {
        // `Entries` refuses a count of more entries than 70 bytes each would fill, but an
        // entry takes 62 bytes plus its name, owner and group: a lone entry whose three names
        // are shorter than 8 bytes together is refused. That is the decoder's limit, not
        // this test's subject: names of 8 bytes and more stay clear of it.
        let mut name = g.text(56);
        while name.len() < 8 {
            name.push('n');
        }
        DirEntry {
            name,
            stat: Arb::arb(g),
            xattr: Arb::arb(g),
        }
    }
}

impl Arb for Commit {
    fn arb(g: &mut Gen) -> Commit {
        Commit {
            path: Arb::arb(g),
            drive: Arb::arb(g),
            object: Arb::arb(g),
            size: Arb::arb(g),
            stale: Arb::arb(g),
            xattrs: bool::arb(g).then(|| xattrs(g)),
            e2e: Arb::arb(g),
            exclusive: Arb::arb(g),
        }
    }
}

impl Arb for ClusterStatus {
    fn arb(g: &mut Gen) -> ClusterStatus {
        ClusterStatus {
            drives: Arb::arb(g),
            files: Arb::arb(g),
            degraded_files: Arb::arb(g),
            degraded: g.list(3, String::arb),
            rebuild: Arb::arb(g),
            scrub: Arb::arb(g),
            stale_files: Arb::arb(g),
            stale_components: Arb::arb(g),
            bytes: Arb::arb(g),
            stale_bytes: Arb::arb(g),
            recounted: Arb::arb(g),
        }
    }
}

impl Arb for Refused {
    fn arb(g: &mut Gen) -> Refused {
        let status = MgrStatus::ALL[g.below(MgrStatus::ALL.len() as u64) as usize];
        Refused::new(status, String::arb(g))
    }
}
