//! The file manager protocol: what a client says to `nasd manager` over TLS 1.3, and what the
//! manager answers. Seed 002 §3 (NASD/NFS, NASD/AFS) is the model: the manager checks policy
//! and returns a file's layout with a capability; data then goes straight to drives.
//!
//! ```text
//! frame   := u32 body_len, body[body_len]                 body_len <= MANAGER_FRAME_BYTES_MAX
//! body    := "NSDM", u16 version, u8 kind (1 request | 2 reply), u64 request_id, u8 tag, fields
//! string  := u32 len, UTF-8 bytes                         len <= STRING_BYTES_MAX
//! ```
//! Every body carries the protocol version; a peer answers a body of another version with
//! [`MgrStatus::Version`]. Requests are answered in order, one at a time per connection.
//! Capability keys travel only inside the TLS session (DESIGN.md: they never cross a network in
//! clear). Field layouts of each message are in `docs/manager.md`.
//!
//! Decoders are total: any malformed input is a [`DecodeError`], never a panic, and every
//! length is checked against the bytes present before anything is allocated.
//!
//! # Layout
//! - this module: the version and its changelog, the header every body starts with, the
//!   limits, and the table of calls ([`for_each_manager_call!`](crate::for_each_manager_call)),
//!   from which [`MgrRequest`], [`MgrReply`], their names and their tag dispatch are generated;
//! - [`Call`], [`Reply`] and [`Wire`] (`call.rs`): what a call is, how its reply travels as a
//!   [`MgrReply`], how a value is encoded; `codec.rs`: the field codecs messages share;
//! - `types.rs`: the types several calls carry (stats, layouts, grants, extended attributes,
//!   secrets); `status.rs`: [`MgrStatus`] and [`Refused`];
//! - [`calls`]: one struct per request, grouped by family (session, namespace, files, xattr,
//!   users, s3keys, e2e, quota, heal, callbacks, locks), each with its fields' codec and the types
//!   only its family uses.

mod call;
pub mod calls;
mod codec;
mod status;
#[cfg(test)]
mod tests;
mod types;

pub use crate::e2e::{
    key_change_message, E2eCommit, E2ePolicy, E2eState, Eint, GroupKeyInfo, GroupKeyState,
    Principal, UserKeyInfo, UserKeys, WriterAuth, GROUP_KEY_LINKS_MAX, GROUP_WRAP_BYTES_MAX,
    KEY_LIST_MAX,
};
pub use call::{Call, Reply, Wire};
pub use calls::callbacks::{
    CallbackBreak, BREAKS_PER_REPLY_MAX, BREAK_WAIT_MS_MAX, CALLBACK_LEASE_MS,
};
pub use calls::e2e::{WrappedFile, WRAPPED_FILES_PAGE_MAX};
pub use calls::files::Created;
pub use calls::heal::{
    ClusterStatus, DriveCount, DriveStatus, FileCounts, RebuildStatus, ScrubReport, ScrubStatus,
    STATUS_PATHS_MAX,
};
pub use calls::keylog::{
    KeyLogEntry, KeyLogHead, KeyLogPage, PolicyReaders, KEY_LOG_ENTRY_BYTES_MAX, KEY_LOG_PAGE_MAX,
    POLICY_DIR_BYTES_MAX, POLICY_READERS_CONTEXT,
};
pub use calls::locks::{
    LockAnswer, LockHolder, LockLease, LockOutcome, LockSpan, LOCK_RANGES_PER_FILE_MAX,
};
pub use calls::namespace::{
    DirEntry, DirReaders, FsSpace, LayoutSpec, LinkTarget, RENAME_EXCHANGE, RENAME_NOREPLACE,
    UTIMES_ACCESSED, UTIMES_NOFOLLOW,
};
pub use calls::quota::QuotaInfo;
pub use calls::s3keys::{S3KeyFound, S3KeyMade};
pub use calls::session::{
    login_message, Credential, LoginOk, LoginProof, OpaqueMessage, CHALLENGE_BYTES,
    ENROLLMENT_CODE_BYTES_MAX, LOGIN_CONTEXT, OPAQUE_KE1_BYTES, OPAQUE_KE3_BYTES,
    OPAQUE_MESSAGE_BYTES_MAX, OPAQUE_REGISTRATION_REQUEST_BYTES, OPAQUE_REGISTRATION_UPLOAD_BYTES,
    PUBLIC_KEY_BYTES, SIGNATURE_BYTES, TOKEN_BYTES,
};
pub use calls::users::{Enrollment, UserInfo};
pub use calls::xattr::Xattrs;
pub use status::{MgrStatus, Refused};
pub use types::{
    check_xattr_name, check_xattrs, CapGrant, Component, FileKind, FileStat, Grant, Layout,
    PreparedFile, SecretString, SessionToken, StagedGrant, Xattr, COMPONENTS_MAX,
    GEOMETRY_BYTES_MAX,
};

use crate::codec::{Reader, Writer};
use crate::DecodeError;
use call::{define_calls, define_replies};

/// Version of the manager protocol. Its changelog:
/// - 1: login with password or session token, namespace operations, capability issuance
///   (open/create return layout + capability), users, groups, drive registry.
/// - 2: `Create` with `exclusive: false` on an existing file stages a fresh object
///   ([`MgrReply::Staged`]) that [`MgrRequest::Commit`] swaps in, so an overwrite never
///   truncates the old content first. `DriveAdd` carries an optional master key file, with
///   which the manager replaces the drive key so only it knows the new one.
/// - 3: [`MgrRequest::Logout`] ends the connection's session on the manager.
///   [`MgrRequest::UserPasswd`] carries an optional Ed25519 public key (a key change); either
///   change ends every session of the user. A failed login answers
///   [`MgrStatus::WrongPassword`] with one detail per credential kind, whether or not the user
///   exists; [`MgrStatus::TooManyAttempts`] refuses a login while its source or user backs off.
///   `Create` with `exclusive: false` stages a new file too, so a file's name appears only
///   once all of its bytes are on the drives; [`MgrReply::Staged`] says whether the upload
///   `replaces` an existing file. [`MgrRequest::Abort`] drops a staged upload and its object at
///   once; [`MgrRequest::Renew`] gives a long upload a fresh write capability.
/// - 4: a file's [`Layout`] is a stripe map (seed 002 §3.3): a geometry (`single`,
///   `raid0:N`, `mirror:N`, `rs:K+M`, `raid6x:K`, with a stripe unit) over component objects on
///   distinct drives, with a version and a stale flag per component; `Opened` and `Staged`
///   carry one capability per component. [`MgrRequest::LayoutGet`] and
///   [`MgrRequest::LayoutSet`] read and set the layout a directory gives new files.
///   [`MgrRequest::StageWrite`] stages copies of a file's components for a copy-on-write
///   change; [`MgrRequest::Commit`] carries the file's size and the components the writer
///   could not write (`stale`). A write capability is a lease: one writer per file
///   ([`MgrStatus::Busy`]), ended at once by `ReturnCapability`. A commit staged against a
///   layout that changed since is refused with [`MgrStatus::Conflict`]. New: `Repair` (a
///   reader reports a damaged shard), `Scrub`, `Status`, `DriveReplace`.
/// - 5: [`MgrRequest::Readdir`] reads a directory a page at a time (`after`, `limit`, at
///   most [`READDIR_PAGE_ENTRIES_MAX`] entries), so a directory of any size can be listed
///   (one reply used to carry every entry, and a directory past 16,384 entries, or fewer
///   with long names, could not be listed at all).
/// - 6: [`MgrRequest::Prepare`] stages up to [`PREPARED_FILES_MAX`] new files in a directory
///   ahead of their names ([`MgrReply::Prepared`]); a client that writes many small files
///   fills one and `Commit`s it under its name, one manager round trip per file instead of
///   two, and a prepared file is still invisible until all of it is on the drives.
/// - 7: POSIX names. [`FileKind::Symlink`]; [`MgrRequest::Symlink`], [`MgrRequest::Readlink`]
///   (answered with [`MgrReply::LinkTarget`]), [`MgrRequest::Link`] (a hard link) and
///   [`MgrRequest::Lstat`] (a stat that does not follow the last name); a
///   [`FileStat`] carries `nlink`, the number of names of a file (a directory's is 2 plus its
///   subdirectories); paths resolve through symbolic links, at most [`SYMLINK_HOPS_MAX`] of
///   them ([`MgrStatus::TooManyLinks`]). A trusted front end acts for users without their
///   credentials: an admin marks its user a gateway ([`MgrRequest::UserGateway`]), and its
///   session asks [`MgrRequest::ActFor`] a user, answered with `LoginOk` and a short session
///   token for that user (never an admin). S3 access keys: [`MgrRequest::S3KeyCreate`],
///   [`MgrRequest::S3KeyList`], [`MgrRequest::S3KeyRevoke`] (a user's own, or an admin's for
///   anyone), and [`MgrRequest::S3KeySecret`] for gateways, which check SigV4 signatures.
/// - 8: extended attributes: named values a file carries beside its bytes (the S3 gateway
///   keeps an object's ETag, content type and user metadata in them). [`MgrRequest::Getxattrs`]
///   (answered with [`MgrReply::Xattrs`], the file's stat and every attribute) and
///   [`MgrRequest::Setxattr`]; [`MgrRequest::Commit`] may carry a file's whole new set, which
///   replaces the old one in the same transaction as the content (an object's metadata never
///   belongs to another version of its bytes).
/// - 9: AFS callbacks (seed 002 §3.2). [`MgrRequest::WaitBreaks`] is a long poll a client
///   sends on a connection of its own (its callback channel, logged in with the session's
///   token); while a session polls, its `Stat`, `Lstat`, `Getxattrs` and `Open` register
///   callbacks on the files they name, and a change to a file (a store, its attributes, its
///   names) does not complete until every other polling session holding a callback on it has
///   acknowledged the [`CallbackBreak`] ([`MgrReply::Breaks`]) or its callback ran out.
/// - 10: quota escrow (seed 002 §3.2). Every request for a write capability — `Open` with
///   `write`, `Create`, `StageWrite`, `Renew`, `Prepare` — carries `extend_by`, the bytes past
///   the file's current size (for a fresh upload's objects, past 0; for `Renew`, past the
///   grant's current limit) the writer asks to write. For a file whose owner has a quota the
///   manager escrows them against it and bounds every capability's region to match;
///   `Opened`, `Staged` and each [`PreparedFile`] say how far writes may go (`write_end`,
///   [`WRITE_END_UNBOUNDED`] when no quota applies). [`MgrStatus::QuotaExceeded`] refuses an
///   extension past the quota. [`MgrRequest::QuotaSet`] (admins) and [`MgrRequest::QuotaGet`]
///   (answered with [`MgrReply::Quotas`]) set and show per-user quotas.
/// - 11: [`MgrRequest::Chown`] takes a decimal uid or gid as well as a name (the mount's
///   `chown` passes the kernel's numbers); the encoding is unchanged.
/// - 12: end-to-end protection (issue 10; seeds 001, 003). Every grant (`Opened`, `Staged`,
///   each [`PreparedFile`]) ends with the [`E2ePolicy`] a writer of the file follows (its
///   directory's: encrypted or not, the integrity construction, the writer authentication
///   scheme, the block size, further readers) and the file's [`E2eState`] if it has one
///   (seed 003's trusted record, the writer who committed it and their signature, and the side
///   data readers check against it: key file, counter intervals, pins or tree nodes).
///   [`MgrRequest::Commit`] may carry a new state with the hash of the record it replaces
///   ([`E2eCommit`], compare-and-swap: [`MgrStatus::Conflict`] when another version came
///   first); [`MgrRequest::E2eUpdate`] replaces the state alone (new key wraps). Users'
///   public keys and password-sealed secrets: [`MgrRequest::UserKeySet`],
///   [`MgrRequest::UserKeyGet`] ([`MgrReply::UserKeys`]); groups' key pairs and their wraps
///   to members: [`MgrRequest::GroupKeySet`], [`MgrRequest::GroupKeyGet`]
///   ([`MgrReply::GroupKeys`]). Layout specs take protection options after the geometry.
///   Every capability in a grant is followed by its writer key (`u8` 0, or 1 and the 32-byte
///   Ed25519 public key): a write grant on a file under `auth=1` names the writer's key and
///   its drives store only writes that key signed (seed 001 §3.3.1 scheme 1; drive
///   protocol 4); [`MgrStatus::NoUserKeys`] refuses one to a user with no keys registered yet.
/// - 13: the mount's POSIX (issue 20). [`FileKind`] gains FIFOs, sockets and character and
///   block devices, made with [`MgrRequest::Mknod`]; a [`FileStat`] ends with `atime_us` and
///   `rdev`, and its `ctime_us` moves with every change of the inode; [`MgrRequest::Rename`]
///   carries flags (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`); [`MgrRequest::Chown`] and
///   [`MgrRequest::Utimes`] may act on a symbolic link itself (`nofollow`), and `Utimes` sets
///   the access and modify times apart (either may be left as it is), a read's access time
///   without moving the change time (`UTIMES_ACCESSED`, a mount's `relatime`); [`MgrRequest::Statfs`]
///   answers the drives' capacity and the caller's quota ([`MgrReply::FsSpace`]).
/// - 14: writes never stop while reads work (issue 23 §4). A layout component may be
///   [`ObjectId::ABSENT`](crate::ObjectId::ABSENT): a new file laid out while the drive it
///   belongs on was down or full has no object there yet; such a component is always stale,
///   and its capability authorizes nothing. [`MgrRequest::Status`] carries `recount`, and
///   [`ClusterStatus`] the counts the manager keeps as files change (stale files and
///   components, bytes, stale bytes) and, after a recount, what a walk of every file found
///   ([`FileCounts`]); each [`DriveStatus`] its stale components and the capacity and use the
///   drive reported at its last health check.
/// - 15: passwords never reach the manager (issue 21 §2-3). A password user logs in with
///   OPAQUE (RFC 9807; ristretto255, SHA-512, 3DH, Argon2id on the client):
///   [`MgrRequest::OpaqueLoginStart`] (KE1, answered with KE2 in an [`OpaqueMessage`], a fake
///   one for unknown users) then [`MgrRequest::OpaqueLoginFinish`] (KE3, answered with
///   `LoginOk`); a password file is made by the user's own client with
///   [`MgrRequest::OpaqueRegisterStart`] (before login with an enrollment code, or from the
///   user's own session) and [`MgrRequest::OpaqueRegisterFinish`], which also carries the
///   user's seed sealed under a key from OPAQUE's export key. `Login` carries a
///   [`LoginProof`]: a token, a signature, or the legacy password of an account made before
///   this version (checked once, then moved over). `UserAdd` and `UserPasswd` carry no
///   password and answer [`Enrollment`] (a one-time code for a password user). [`UserKeys`]
///   carry their version and the signature of the key change by the previous sign key (the
///   first self-signed); only the user sets their own. A key rotation rewraps the caller's own
///   wraps: [`MgrRequest::E2eWrappedFiles`] lists the files wrapped for the caller
///   ([`WrappedFile`]), [`MgrRequest::E2eRewrap`] replaces the caller's wraps in one file,
///   [`MgrRequest::GroupWrapSet`] the caller's wraps of group secrets. Store schema 12.
/// - 16: a path may be 32 KiB long ([`PATH_BYTES_MAX`], and a string [`STRING_BYTES_MAX`]),
///   so `PATH_MAX` bounds what a program names relative to its working directory, not a
///   path from the cluster's root; a link target stays within [`LINK_TARGET_BYTES_MAX`].
/// - 17: record locks and `flock` across clients (issue 20): [`MgrRequest::Lock`],
///   [`MgrRequest::LockTest`] and [`MgrRequest::Unlock`] (answered with [`LockAnswer`]) take,
///   test and release byte-range locks of a session's lock owners, held in the manager's
///   memory under a lease the session renews with [`MgrRequest::LockRenew`] ([`LockLease`]);
///   [`MgrRequest::LockDrop`] releases all of a session's locks. After a restart the manager
///   grants only reclaims for one lease time. [`MgrStatus::NoLocks`] refuses a lock past the
///   manager's bounds (ENOLCK).
/// - 18: `Commit` carries `exclusive`: a new file is linked only if its name is free, so a
///   mount's `open(O_CREAT | O_EXCL)`, whose name exists from the create on, is exclusive
///   across clients. `Readdir` of a directory the caller may read but not search answers
///   names, inode numbers and kinds (other fields zero) instead of `PermissionDenied`.
/// - 19: the key log (issue 21 §4). [`MgrRequest::KeyLog`] answers a [`KeyLogPage`]: the
///   manager's signed head of the log of every change of users' keys (its size, RFC 6962
///   root and log key) and up to [`KEY_LOG_PAGE_MAX`] entries ([`KeyLogEntry`]) from an
///   index; clients check each user's chain of signed changes and the root themselves.
///   [`MgrRequest::UserKeyReset`] (admins) clears a user's keys with a logged reset; the
///   user's next keys start a new self-signed chain at the following version. Store schema 13.
/// - 20: an `E2eState`'s record may be up to 256 bytes (was 128): clients write nasd-e2e's
///   bound records (format 2, 146 bytes: the version's generation and origin, and a digest of
///   its key commitments and unshared principals; issue 21 §5 and §7). The manager stores
///   records as it did and reads only their length.
/// - 21: admins hold no key of a group they are not in (issue 21 §5). [`MgrRequest::GroupKeySet`]
///   comes from members only (admins or not), wraps to members only, and carries a `link`: the
///   current version's secret wrapped to the new version's public key, so a group's newest
///   secret opens its older ones. A [`GroupKeyInfo`] says whether the caller is a member and
///   whether a new key pair is due (`rekey`), lists the members who lack a wrap by uid alone
///   (a member's client wraps to the keys its checked key log shows), and carries the links
///   (at most [`GROUP_KEY_LINKS_MAX`]). [`MgrRequest::GroupMemberRemove`] ends a membership:
///   the member's wrap goes and the group is due a new key pair. Store schema 14.
/// - 22: a directory policy's further readers are signed by who set them and kept in the key
///   log (issue 21 §5): [`MgrRequest::LayoutSet`] answers the readers the policy names now
///   ([`DirReaders`]), [`MgrRequest::PolicyLog`] logs the setter's signed statement of them
///   ([`PolicyReaders`], a [`KeyLogEntry`] of kind 2), and writers wrap for policy readers
///   only as the log names them. Store schema 15 (PostgreSQL 3): a key log entry may have no
///   key version.
/// - 23: a grant's policy names the key pairs of its `everyone` groups ([`GroupKeyState`]:
///   version, and whether it is current), so a writer asks for a group's key pair only when
///   it moved, not at each write while the group has none.
/// - 24: `Mkdir`, `Chmod`, `Chown`, `Truncate` and `Utimes` answer with the path's own stat
///   after the change (as `Lstat` gives it; NFSv3's post-operation attributes), so a client
///   that shows the new attributes (a mount's setattr, mkdir) needs no stat after each change.
pub const MANAGER_PROTOCOL_VERSION: u16 = 24;
/// The `write_end` of a grant that no quota bounds: its capabilities cover whole objects.
pub const WRITE_END_UNBOUNDED: u64 = u64::MAX;
/// Longest name of an extended attribute (Linux `XATTR_NAME_MAX`).
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Largest value of one extended attribute, and of all of a file's names and values together
/// (Linux `XATTR_SIZE_MAX`).
pub const XATTR_VALUE_BYTES_MAX: usize = 64 << 10;
pub const XATTRS_BYTES_MAX: usize = 64 << 10;
/// Most extended attributes one file carries.
pub const XATTRS_PER_FILE_MAX: usize = 256;
/// Most symbolic links one path resolution follows (Linux's `MAXSYMLINKS`): past it the
/// path is refused with [`MgrStatus::TooManyLinks`] (a loop, or a chain too long).
pub const SYMLINK_HOPS_MAX: usize = 40;
/// Largest manager frame body either side accepts.
pub const MANAGER_FRAME_BYTES_MAX: usize = 4 << 20;
/// Longest string field (paths, names, key files, details).
pub const STRING_BYTES_MAX: usize = PATH_BYTES_MAX + 1024;
/// Longest name of one directory entry, user or group (POSIX NAME_MAX).
pub const NAME_BYTES_MAX: usize = 255;
/// Longest absolute path the manager resolves: eight times Linux's `PATH_MAX`. A program
/// meets `PATH_MAX` relative to its working directory (the kernel checks what it passes), and
/// a mount turns that into a path from the cluster's root, so a working directory up to
/// 28 KiB deep still takes every path the kernel lets through (issue 20).
pub const PATH_BYTES_MAX: usize = 32 << 10;
/// Longest symbolic link target (Linux's `PATH_MAX`).
pub const LINK_TARGET_BYTES_MAX: usize = 4096;
/// Most entries in one listing reply.
pub const LIST_ENTRIES_MAX: usize = 16384;
/// Most entries in one page of a directory ([`MgrRequest::Readdir`]): the largest page, of
/// entries with the longest name, owner and group, fits one frame.
pub const READDIR_PAGE_ENTRIES_MAX: usize = 4096;
/// Largest extended attribute value a directory entry carries ([`MgrRequest::Readdir`]).
pub const READDIR_XATTR_BYTES_MAX: usize = 128;
/// Encoded bytes of the largest directory entry: its name, then the stat (its fixed fields and
/// the longest owner and group), then the attribute asked for, strings with their 4-byte
/// length.
const DIR_ENTRY_BYTES_MAX: usize = (4 + NAME_BYTES_MAX)
    + FileStat::ENCODED_BYTES_MIN
    + 2 * NAME_BYTES_MAX
    + 1
    + 4
    + READDIR_XATTR_BYTES_MAX;
/// Most new files one [`MgrRequest::Prepare`] stages: a batch pays one round trip and one
/// group commit on each drive; 32 files of the widest layout (44 components) fit one frame
/// with room to spare, and an abandoned batch leaves at most this many records to expire.
pub const PREPARED_FILES_MAX: u32 = 32;
const MAGIC: &[u8; 4] = b"NSDM";
const KIND_REQUEST: u8 = 1;
const KIND_REPLY: u8 = 2;

const _: () = assert!(
    PATH_BYTES_MAX <= STRING_BYTES_MAX
        && NAME_BYTES_MAX < LINK_TARGET_BYTES_MAX
        && LINK_TARGET_BYTES_MAX <= PATH_BYTES_MAX
);
const _: () = assert!(LIST_ENTRIES_MAX * 64 < MANAGER_FRAME_BYTES_MAX);
const _: () = assert!(
    READDIR_PAGE_ENTRIES_MAX <= LIST_ENTRIES_MAX
        && READDIR_PAGE_ENTRIES_MAX * DIR_ENTRY_BYTES_MAX + 1024 < MANAGER_FRAME_BYTES_MAX
);

/// Every manager call, once: its tag on the wire, its request type (in [`calls`], and the
/// [`MgrRequest`] variant of the same name), its name in messages, and the type of its reply
/// (a payload of [`MgrReply`], or [`Created`]). The macro named by `$then` receives the rows
/// `tag Type "name" => Reply;`: this module generates the messages from them, the manager its
/// dispatch, the tests a property test of every row. Reply types are named as
/// `nasd_proto::manager` exports them.
#[macro_export]
macro_rules! for_each_manager_call {
    ($then:ident) => {
        $then! {
            1 Login "login" => LoginOk;
            2 Stat "stat" => FileStat;
            3 Readdir "readdir" => Vec<DirEntry>;
            4 Mkdir "mkdir" => FileStat;
            5 Rmdir "rmdir" => ();
            6 Create "create" => Created;
            7 Open "open" => Grant;
            8 ReturnCapability "return-capability" => ();
            9 Unlink "unlink" => ();
            10 Rename "rename" => ();
            11 Chmod "chmod" => FileStat;
            12 Chown "chown" => FileStat;
            13 Truncate "truncate" => FileStat;
            14 Utimes "utimes" => FileStat;
            15 UserAdd "user add" => Enrollment;
            16 UserPasswd "user passwd" => Enrollment;
            17 UserList "user list" => Vec<UserInfo>;
            18 GroupAdd "group add" => ();
            19 GroupMember "group member" => ();
            20 DriveAdd "drive add" => ();
            21 DriveList "drive list" => Vec<DriveStatus>;
            22 Commit "commit" => ();
            23 Challenge "challenge" => [u8; CHALLENGE_BYTES];
            24 Logout "logout" => ();
            25 Abort "abort" => ();
            26 Renew "renew" => StagedGrant;
            27 LayoutGet "layout get" => LayoutSpec;
            28 LayoutSet "layout set" => DirReaders;
            29 StageWrite "stage write" => StagedGrant;
            30 Repair "repair" => ();
            31 Scrub "scrub" => ScrubReport;
            32 Status "status" => ClusterStatus;
            33 DriveReplace "drive replace" => ();
            34 Prepare "prepare" => Vec<PreparedFile>;
            35 Symlink "symlink" => ();
            36 Readlink "readlink" => LinkTarget;
            37 Link "link" => ();
            38 Lstat "lstat" => FileStat;
            39 ActFor "act for" => LoginOk;
            40 UserGateway "user gateway" => ();
            41 S3KeyCreate "s3 key create" => S3KeyMade;
            42 S3KeyList "s3 key list" => Vec<(String, u64)>;
            43 S3KeyRevoke "s3 key revoke" => ();
            44 S3KeySecret "s3 key secret" => S3KeyFound;
            45 Getxattrs "getxattrs" => Xattrs;
            46 Setxattr "setxattr" => ();
            47 WaitBreaks "wait breaks" => Vec<CallbackBreak>;
            48 QuotaSet "quota set" => Vec<QuotaInfo>;
            49 QuotaGet "quota get" => Vec<QuotaInfo>;
            50 E2eUpdate "e2e update" => ();
            51 UserKeySet "user key set" => ();
            52 UserKeyGet "user key get" => Vec<UserKeyInfo>;
            53 GroupKeySet "group key set" => ();
            54 GroupKeyGet "group key get" => Vec<GroupKeyInfo>;
            55 OpaqueLoginStart "opaque login start" => OpaqueMessage;
            56 OpaqueLoginFinish "opaque login finish" => LoginOk;
            57 OpaqueRegisterStart "opaque register start" => OpaqueMessage;
            58 OpaqueRegisterFinish "opaque register finish" => ();
            59 E2eWrappedFiles "e2e wrapped files" => Vec<WrappedFile>;
            60 Mknod "mknod" => ();
            61 Statfs "statfs" => FsSpace;
            62 E2eRewrap "e2e rewrap" => ();
            63 GroupWrapSet "group wrap set" => ();
            64 Lock "lock" => LockAnswer;
            65 LockTest "lock test" => LockAnswer;
            66 Unlock "unlock" => LockAnswer;
            67 LockRenew "lock renew" => LockLease;
            68 LockDrop "lock drop" => ();
            69 KeyLog "key log" => KeyLogPage;
            70 UserKeyReset "user key reset" => ();
            71 GroupMemberRemove "group member remove" => ();
            72 PolicyLog "policy log" => ();
        }
    };
}

crate::for_each_manager_call!(define_calls);

// Every reply, once: its tag on the wire, its variant and its payload (each payload type
// belongs to one variant, so it converts to and from the reply on its own).
define_replies! {
    1 Error(Refused);
    2 Ok(());
    3 LoginOk(LoginOk);
    4 Stat(FileStat);
    5 Entries(Vec<DirEntry>);
    6 Opened(Grant);
    7 Users(Vec<UserInfo>);
    8 Drives(Vec<DriveStatus>);
    9 Staged(StagedGrant);
    10 Challenge([u8; CHALLENGE_BYTES]);
    11 LayoutSpec(LayoutSpec);
    12 Scrubbed(ScrubReport);
    13 Status(ClusterStatus);
    14 Prepared(Vec<PreparedFile>);
    15 LinkTarget(LinkTarget);
    16 S3KeyMade(S3KeyMade);
    17 S3Keys(Vec<(String, u64)>);
    18 S3KeyFound(S3KeyFound);
    19 Xattrs(Xattrs);
    20 Breaks(Vec<CallbackBreak>);
    21 Quotas(Vec<QuotaInfo>);
    22 UserKeys(Vec<UserKeyInfo>);
    23 GroupKeys(Vec<GroupKeyInfo>);
    24 OpaqueMessage(OpaqueMessage);
    25 Enrollment(Enrollment);
    26 WrappedFiles(Vec<WrappedFile>);
    30 FsSpace(FsSpace);
    31 LockAnswer(LockAnswer);
    32 LockLease(LockLease);
    33 KeyLogPage(KeyLogPage);
    34 DirReaders(DirReaders);
}

impl MgrReply {
    /// An `Error` reply; a detail past [`STRING_BYTES_MAX`] is cut at a character boundary.
    pub fn error(status: MgrStatus, detail: impl Into<String>) -> MgrReply {
        MgrReply::Error(Refused::new(status, detail))
    }
}

fn put_header(w: &mut Writer, kind: u8, request_id: u64, tag: u8) {
    w.bytes(MAGIC);
    w.u16(MANAGER_PROTOCOL_VERSION);
    w.u8(kind);
    w.u64(request_id);
    w.u8(tag);
}

/// Reads the common header; returns (request_id, tag). A body of another version is
/// `DecodeError::Version` so the receiver can answer [`MgrStatus::Version`].
fn get_header(r: &mut Reader<'_>, kind: u8) -> Result<(u64, u8), DecodeError> {
    if &r.array::<4>("magic")? != MAGIC {
        return Err(DecodeError::BadValue("manager magic"));
    }
    let v = r.u16("version")?;
    if v != MANAGER_PROTOCOL_VERSION {
        return Err(DecodeError::Version(v));
    }
    if r.u8("kind")? != kind {
        return Err(DecodeError::BadValue("message kind"));
    }
    Ok((r.u64("request id")?, r.u8("tag")?))
}

/// The request id of a body, if it has one (to answer even a malformed request).
pub fn request_id_of(body: &[u8]) -> Option<u64> {
    body.get(7..15)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}
