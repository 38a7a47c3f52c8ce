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

use crate::capability::CapabilityArgs;
use crate::codec::{Reader, Writer};
pub use crate::e2e::{
    E2eCommit, E2ePolicy, E2eState, Eint, GroupKeyInfo, Principal, UserKeyInfo, UserKeys,
    WriterAuth, GROUP_WRAP_BYTES_MAX, KEY_LIST_MAX,
};
use crate::types::{DriveId, ObjectId, PartitionId, Suite};
use crate::DecodeError;
use std::fmt;

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
pub const MANAGER_PROTOCOL_VERSION: u16 = 12;
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
pub const STRING_BYTES_MAX: usize = 8192;
/// Longest name of one directory entry, user or group (POSIX NAME_MAX).
pub const NAME_BYTES_MAX: usize = 255;
/// Longest path.
pub const PATH_BYTES_MAX: usize = 4096;
/// Most entries in one listing reply.
pub const LIST_ENTRIES_MAX: usize = 16384;
/// Most entries in one page of a directory ([`MgrRequest::Readdir`]): the largest page, of
/// entries with the longest name, owner and group, fits one frame.
pub const READDIR_PAGE_ENTRIES_MAX: usize = 4096;
/// Largest extended attribute value a directory entry carries ([`MgrRequest::Readdir`]).
pub const READDIR_XATTR_BYTES_MAX: usize = 128;
/// Encoded bytes of the largest directory entry: its name, then the stat (ino, kind, mode,
/// uid, gid, owner, group, size, mtime, ctime, nlink), then the attribute asked for, strings
/// with their 4-byte length.
const DIR_ENTRY_BYTES_MAX: usize =
    3 * (4 + NAME_BYTES_MAX) + 8 + 1 + 3 * 4 + 3 * 8 + 4 + 1 + 4 + READDIR_XATTR_BYTES_MAX;
/// Most new files one [`MgrRequest::Prepare`] stages: a batch pays one round trip and one
/// group commit on each drive; 32 files of the widest layout (44 components) fit one frame
/// with room to spare, and an abandoned batch leaves at most this many records to expire.
pub const PREPARED_FILES_MAX: u32 = 32;
/// Bytes of a session token.
pub const TOKEN_BYTES: usize = 32;
const MAGIC: &[u8; 4] = b"NSDM";
const KIND_REQUEST: u8 = 1;
const KIND_REPLY: u8 = 2;

const _: () = assert!(PATH_BYTES_MAX <= STRING_BYTES_MAX && NAME_BYTES_MAX < PATH_BYTES_MAX);
const _: () = assert!(LIST_ENTRIES_MAX * 64 < MANAGER_FRAME_BYTES_MAX);
const _: () = assert!(
    READDIR_PAGE_ENTRIES_MAX <= LIST_ENTRIES_MAX
        && READDIR_PAGE_ENTRIES_MAX * DIR_ENTRY_BYTES_MAX + 1024 < MANAGER_FRAME_BYTES_MAX
);

/// How a user proves who they are.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Password(SecretString),
    /// A session token from an earlier login.
    Token([u8; TOKEN_BYTES]),
    /// An Ed25519 signature of [`login_message`] over the challenge this connection received.
    Signature([u8; SIGNATURE_BYTES]),
}

/// Bytes of an Ed25519 public key, and of a login challenge.
pub const PUBLIC_KEY_BYTES: usize = 32;
pub const CHALLENGE_BYTES: usize = 32;
/// Bytes of an Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// Domain separation of login signatures, so they can never pass for anything else.
pub const LOGIN_CONTEXT: &[u8] = b"nasd manager login v1\0";

/// What a user signs to log in with a key: the context, the user name (length-prefixed) and the
/// manager's challenge for this connection.
pub fn login_message(user: &str, challenge: &[u8; CHALLENGE_BYTES]) -> Vec<u8> {
    let mut m = Vec::with_capacity(LOGIN_CONTEXT.len() + 4 + user.len() + CHALLENGE_BYTES);
    m.extend_from_slice(LOGIN_CONTEXT);
    m.extend_from_slice(&(user.len() as u32).to_le_bytes());
    m.extend_from_slice(user.as_bytes());
    m.extend_from_slice(challenge);
    m
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Password(_) => f.write_str("Password(..)"),
            Credential::Token(_) => f.write_str("Token(..)"),
            Credential::Signature(_) => f.write_str("Signature(..)"),
        }
    }
}

/// A request to the manager.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum MgrRequest {
    /// Must be the first request of a connection.
    Login {
        user: String,
        credential: Credential,
    },
    Stat {
        path: String,
    },
    /// A page of a directory: the entries named after `after` in byte order (from the first
    /// when `after` is empty), at most `limit` and at most [`READDIR_PAGE_ENTRIES_MAX`]. A
    /// page shorter than asked for is the last.
    ///
    /// With `xattr`, each entry carries the value of that extended attribute of its file,
    /// when the caller may read the file and the value is at most [`READDIR_XATTR_BYTES_MAX`]
    /// (a listing of S3 objects carries their ETags in one round trip).
    Readdir {
        path: String,
        after: String,
        limit: u32,
        xattr: Option<String>,
    },
    Mkdir {
        path: String,
        mode: u32,
    },
    Rmdir {
        path: String,
    },
    /// With `exclusive: true`, creates an empty file and returns its layout with a write
    /// capability (NASD/AFS GetWCapability folded into create); `Exists` if the name is taken.
    /// With `exclusive: false`, the reply is [`MgrReply::Staged`]: a fresh object, invisible
    /// under any name, that the client fills and then [`MgrRequest::Commit`]s as the file's
    /// content (replacing an existing file's, or linking a new name).
    ///
    /// `extend_by`: bytes of content the writer asks to write (seed 002 §3.2's escrow); see
    /// [`MANAGER_PROTOCOL_VERSION`] 9.
    Create {
        path: String,
        mode: u32,
        exclusive: bool,
        extend_by: u64,
    },
    /// GetCapability (`write: false`) or GetWCapability (`write: true`). A writer asks to
    /// grow the file by `extend_by` bytes past its current size (0 for a reader).
    Open {
        path: String,
        write: bool,
        extend_by: u64,
    },
    /// ReturnCapability: the client is done writing under `audit_id`. When it holds the file's
    /// write lease, the lease ends and every capability for the file's objects is revoked at
    /// once (seed 002 §3.2).
    ReturnCapability {
        path: String,
        audit_id: u64,
    },
    Unlink {
        path: String,
    },
    Rename {
        from: String,
        to: String,
    },
    /// Makes `path` a symbolic link holding `target` (stored as given, up to
    /// [`PATH_BYTES_MAX`]; a relative target resolves from the link's directory).
    Symlink {
        path: String,
        target: String,
    },
    /// The target of the symbolic link `path` (the last name is not followed), answered with
    /// [`MgrReply::LinkTarget`].
    Readlink {
        path: String,
    },
    /// From a gateway's session: opens a session for `user` (not an admin), answered with
    /// `LoginOk` carrying that user's token; the gateway then logs in with it. The session
    /// lasts at most an hour and ends when the gateway stops being one.
    ActFor {
        user: String,
    },
    /// Makes an S3 access key for `user` (their own, or an admin's for anyone), answered
    /// with [`MgrReply::S3KeyMade`]: the only time the secret is shown to its user.
    S3KeyCreate {
        user: String,
    },
    /// The access keys of `user` (their own, or an admin's for anyone), answered with
    /// [`MgrReply::S3Keys`]; no secrets.
    S3KeyList {
        user: String,
    },
    /// Forgets access key `access_key_id` of `user`.
    S3KeyRevoke {
        user: String,
        access_key_id: String,
    },
    /// For a gateway: whose key `access_key_id` is and its secret (to check a request's
    /// SigV4 signature), answered with [`MgrReply::S3KeyFound`].
    S3KeySecret {
        access_key_id: String,
    },
    /// Marks user `name` a gateway (`on`) or not; admins only.
    UserGateway {
        name: String,
        on: bool,
    },
    /// The stat and every extended attribute of `path` (read permission on it), answered with
    /// [`MgrReply::Xattrs`].
    Getxattrs {
        path: String,
    },
    /// Sets extended attribute `name` of `path` to `value`, or removes it (`None`); the
    /// owner's or an admin's.
    Setxattr {
        path: String,
        name: String,
        value: Option<Vec<u8>>,
    },
    /// Like `Stat`, of the last name itself: a symbolic link is not followed (POSIX lstat).
    Lstat {
        path: String,
    },
    /// Gives the file `existing` (not a directory; a symbolic link itself, not followed) the
    /// further name `new`.
    Link {
        existing: String,
        new: String,
    },
    Chmod {
        path: String,
        mode: u32,
    },
    /// Empty strings leave owner or group unchanged; a decimal number names a uid or gid
    /// (names never start with a digit), as GNU chown reads one.
    Chown {
        path: String,
        owner: String,
        group: String,
    },
    Truncate {
        path: String,
        size: u64,
    },
    Utimes {
        path: String,
        mtime_us: u64,
    },
    /// With `public_key`, the user logs in by key only (the password is ignored).
    UserAdd {
        name: String,
        password: SecretString,
        admin: bool,
        public_key: Option<[u8; PUBLIC_KEY_BYTES]>,
    },
    /// Sets a user's password or, with `public_key`, makes them a key user with that key (the
    /// password is then ignored). Ends every session of the user, live connections included.
    UserPasswd {
        name: String,
        password: SecretString,
        public_key: Option<[u8; PUBLIC_KEY_BYTES]>,
    },
    UserList,
    GroupAdd {
        name: String,
    },
    GroupMember {
        group: String,
        user: String,
    },
    /// Registers a drive: the manager takes its drive key, creates a partition, and sets the
    /// partition and working keys. With the drive's master key file (`master_key_file`
    /// non-empty) it first replaces the drive key with one only it knows (SetDriveKey), so the
    /// drive key file on the drive's disk stops working. Re-registering a known drive updates
    /// its address.
    DriveAdd {
        addr: String,
        drive_key_file: String,
        master_key_file: String,
    },
    DriveList,
    /// Swaps a staged upload (from [`MgrReply::Staged`], named by its first component) into
    /// `path` in one transaction; the old objects are removed afterwards, which revokes their
    /// capabilities. `size` is the file's size after the upload, which the manager keeps for
    /// layouts spread over several objects (a one-object file's object holds it).
    /// `stale` has bit `i` set when the writer could not write component `i` (its drive
    /// failed): the component is kept out of reads until a rebuild makes it current.
    ///
    /// With `xattrs`, the file's extended attributes become exactly those, in the same
    /// transaction; without, a new file has none and an existing one keeps its own.
    Commit {
        path: String,
        drive: DriveId,
        object: ObjectId,
        size: u64,
        stale: u64,
        xattrs: Option<Vec<Xattr>>,
        /// The file's new end-to-end state, swapped in with the content if the file's record
        /// is still the one `expect` names (else `Conflict`, and nothing changes).
        e2e: Option<E2eCommit>,
    },
    /// Gives up a staged upload: the manager forgets it and removes its object now, so its
    /// space comes back without waiting for the orphan scrub.
    Abort {
        path: String,
        drive: DriveId,
        object: ObjectId,
    },
    /// Asks for a fresh write capability for a staged upload that is still running (answered
    /// with [`MgrReply::Staged`]); the upload's record is kept from expiring meanwhile.
    /// `extend_by` moves the grant's `write_end` that many bytes further (0: only a fresh
    /// lifetime).
    Renew {
        path: String,
        drive: DriveId,
        object: ObjectId,
        extend_by: u64,
    },
    /// Stages `count` (at most [`PREPARED_FILES_MAX`]) new files of mode `mode` in directory
    /// `dir` before their names are known, answered with [`MgrReply::Prepared`]. Each is a
    /// reserved inode with fresh objects in the layout the directory gives new files and a
    /// write capability, recorded as staged at `dir` followed by `/`: the writer fills one and
    /// [`MgrRequest::Commit`]s it as `dir/NAME`, which links it only if NAME is free (else
    /// [`MgrStatus::Exists`]: an existing file is overwritten through `Create`, which keeps
    /// its inode). `Abort` and `Renew` name a prepared file by `dir/`. Unused ones expire as
    /// any staged upload does.
    /// Each file may hold `extend_by` bytes; under a quota fewer files than `count` may
    /// come back, as many as the quota has room for.
    Prepare {
        dir: String,
        mode: u32,
        count: u32,
        extend_by: u64,
    },
    /// The layout spec a directory gives new files (inherited from its parent when it has
    /// none of its own), answered with [`MgrReply::LayoutSpec`].
    LayoutGet {
        path: String,
    },
    /// Sets the layout spec of a directory (`""` forgets it: the parent's applies again); its
    /// owner or an admin. Files made afterwards under it get that layout.
    LayoutSet {
        path: String,
        spec: String,
    },
    /// Stages a copy-on-write change of an existing file spread over several objects: the
    /// manager fast-copies every component (the drive shares unchanged blocks) and answers
    /// [`MgrReply::Staged`] with the copies; the writer changes them and [`MgrRequest::Commit`]s,
    /// which swaps them in atomically, so no crash leaves data and parity disagreeing. Takes
    /// the file's write lease.
    /// `extend_by`: bytes past the file's current size the change may grow it by.
    StageWrite {
        path: String,
        extend_by: u64,
    },
    /// A reader found `len` bytes at `offset` of component `component` of the file damaged
    /// (refused by the drive's integrity check, or unreadable) and served it from the others;
    /// the manager rebuilds that range and rewrites it in place (read repair).
    Repair {
        path: String,
        component: u16,
        offset: u64,
        len: u64,
    },
    /// Checks every shard of a file against its drive's integrity data and against parity,
    /// answered with [`MgrReply::Scrubbed`]; with `repair`, damaged shards are rewritten and
    /// stale components rebuilt. Admins only.
    Scrub {
        path: String,
        repair: bool,
    },
    /// The cluster's health, answered with [`MgrReply::Status`]. Admins only.
    Status,
    /// Rebuilds every component on drive `old` onto drive `new`, in the background (progress
    /// in `Status`); reads and writes go on meanwhile. Admins only.
    DriveReplace {
        old: DriveId,
        new: DriveId,
    },
    /// Asks for a fresh challenge to sign for a key login as `user` (before `Login`).
    Challenge {
        user: String,
    },
    /// Ends the session this connection logged in with: the manager forgets its token, so it
    /// logs in nowhere again, and the connection is logged out.
    Logout,
    /// The callback channel's long poll (seed 002 §3.2): acknowledges every break up to
    /// sequence number `acked`, then waits up to `wait_ms` (at most [`BREAK_WAIT_MS_MAX`]) for
    /// breaks newer than it, answered with [`MgrReply::Breaks`] (empty when none came). A
    /// session holds callbacks only while it polls.
    WaitBreaks {
        acked: u64,
        wait_ms: u32,
    },
    /// Sets `user`'s quota to `limit` bytes of files they own, or removes it (`None`); admins
    /// only. A new quota counts the user's files first.
    QuotaSet {
        user: String,
        limit: Option<u64>,
    },
    /// The quota of `user` (their own, or an admin's for anyone), or with `""` every quota
    /// the caller may see; answered with [`MgrReply::Quotas`].
    QuotaGet {
        user: String,
    },
    /// Replaces a file's end-to-end state without changing its content (new key wraps after
    /// `nasd share`, `unshare` or `chmod`), if its record is still the one `expect` names;
    /// the file's owner or an admin.
    E2eUpdate {
        path: String,
        update: E2eCommit,
    },
    /// Sets `user`'s end-to-end keys: the user's own, or an admin's for a user that has none
    /// yet (`user add`).
    UserKeySet {
        user: String,
        keys: UserKeys,
    },
    /// The end-to-end public keys of the users `uids` and of those named `names` (at most
    /// [`KEY_LIST_MAX`] each; unknown users and users without keys are left out), answered
    /// with [`MgrReply::UserKeys`]; the caller's own entry also carries their sealed secret.
    UserKeyGet {
        uids: Vec<u32>,
        names: Vec<String>,
    },
    /// Gives group `group` key pair `version` (greater than its current one), its public half
    /// and the wraps of its secret to members (uid, wrap); admins only. Wraps of the current
    /// version may be added later with the same version and public key.
    GroupKeySet {
        group: String,
        version: u32,
        public: [u8; 32],
        wraps: Vec<(u32, Vec<u8>)>,
    },
    /// The key pairs of groups `gids` and of the groups named `names`, answered with
    /// [`MgrReply::GroupKeys`] (unknown ones left out).
    GroupKeyGet {
        gids: Vec<u32>,
        names: Vec<String>,
    },
}

/// Longest wait of one [`MgrRequest::WaitBreaks`], in ms; a client polls again at once, so a
/// connection is never idle longer than this.
pub const BREAK_WAIT_MS_MAX: u32 = 20_000;
/// How long a callback that `Stat`, `Lstat` or `Getxattrs` registers lasts, in ms (an `Open`'s
/// lasts as long as its capabilities); a client trusts what it cached under one no longer.
pub const CALLBACK_LEASE_MS: u64 = 30_000;
/// Most breaks in one [`MgrReply::Breaks`].
pub const BREAKS_PER_REPLY_MAX: usize = 1024;

/// A callback break: file `ino` changed (its bytes or attributes), or, with `name`, the name
/// `name` of it in directory `parent` was removed, replaced or renamed. The receiver drops
/// what it cached about the file (and that name) before acknowledging `seq`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CallbackBreak {
    pub seq: u64,
    pub ino: u64,
    /// The directory holding `name` (0 when no name is involved).
    pub parent: u64,
    pub name: String,
}

/// Stable status codes of manager replies.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u16)]
pub enum MgrStatus {
    Malformed = 1,
    Version = 2,
    NotLoggedIn = 3,
    UnknownUser = 4,
    WrongPassword = 5,
    SessionExpired = 6,
    PermissionDenied = 7,
    NoSuchPath = 8,
    Exists = 9,
    NotEmpty = 10,
    NotADirectory = 11,
    IsADirectory = 12,
    NameTooLong = 13,
    BadName = 14,
    InvalidArgument = 15,
    NoDrives = 16,
    DriveUnreachable = 17,
    DiskFull = 18,
    Internal = 19,
    UnknownGroup = 20,
    TooManyAttempts = 21,
    /// Another client holds the file's write lease.
    Busy = 22,
    /// The file's layout changed since the change was staged; nothing was committed.
    Conflict = 23,
    /// A path went through more than [`SYMLINK_HOPS_MAX`] symbolic links (ELOOP).
    TooManyLinks = 24,
    /// A write would take the file's owner past their quota (seed 002 §3.2; EDQUOT).
    QuotaExceeded = 25,
    /// The user has no end-to-end keys registered yet, and the request needs them (a write
    /// grant under scheme 1 names the writer's signing key); a client registers its keys and
    /// asks again.
    NoUserKeys = 26,
}

impl MgrStatus {
    pub const ALL: [MgrStatus; 26] = [
        Self::Malformed,
        Self::Version,
        Self::NotLoggedIn,
        Self::UnknownUser,
        Self::WrongPassword,
        Self::SessionExpired,
        Self::PermissionDenied,
        Self::NoSuchPath,
        Self::Exists,
        Self::NotEmpty,
        Self::NotADirectory,
        Self::IsADirectory,
        Self::NameTooLong,
        Self::BadName,
        Self::InvalidArgument,
        Self::NoDrives,
        Self::DriveUnreachable,
        Self::DiskFull,
        Self::Internal,
        Self::UnknownGroup,
        Self::TooManyAttempts,
        Self::Busy,
        Self::Conflict,
        Self::TooManyLinks,
        Self::QuotaExceeded,
        Self::NoUserKeys,
    ];
    pub fn from_u16(v: u16) -> Option<MgrStatus> {
        Self::ALL.into_iter().find(|s| *s as u16 == v)
    }
    pub fn text(self) -> &'static str {
        match self {
            Self::Malformed => "malformed request",
            Self::Version => "manager protocol version not supported",
            Self::NotLoggedIn => "not logged in",
            Self::UnknownUser => "unknown user",
            Self::WrongPassword => "credential refused",
            Self::SessionExpired => "session expired; log in again",
            Self::PermissionDenied => "permission denied",
            Self::NoSuchPath => "no such file or directory",
            Self::Exists => "file exists",
            Self::NotEmpty => "directory not empty",
            Self::NotADirectory => "not a directory",
            Self::IsADirectory => "is a directory",
            Self::NameTooLong => "name too long",
            Self::BadName => "invalid name",
            Self::InvalidArgument => "invalid argument",
            Self::NoDrives => "no drive is registered and healthy",
            Self::DriveUnreachable => "drive unreachable",
            Self::DiskFull => "drive full",
            Self::Internal => "internal manager error",
            Self::UnknownGroup => "unknown group",
            Self::TooManyAttempts => "too many failed logins",
            Self::Busy => "another client is writing the file",
            Self::Conflict => "the file changed while the write was staged",
            Self::TooManyLinks => "too many levels of symbolic links",
            Self::QuotaExceeded => "disk quota exceeded",
            Self::NoUserKeys => "no end-to-end keys registered yet",
        }
    }
}

impl fmt::Display for MgrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// File or directory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum FileKind {
    File = 1,
    Dir = 2,
    Symlink = 3,
}

impl FileKind {
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        match v {
            1 => Ok(Self::File),
            2 => Ok(Self::Dir),
            3 => Ok(Self::Symlink),
            _ => Err(DecodeError::BadValue("file kind")),
        }
    }
}

/// What `stat` shows. Size and modify time of a file come from its drive object's attributes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FileStat {
    pub ino: u64,
    pub kind: FileKind,
    /// Permission bits (0o7777 at most).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub owner: String,
    pub group: String,
    pub size: u64,
    pub mtime_us: u64,
    pub ctime_us: u64,
    /// Names of the file (hard links); a directory's is 2 plus its subdirectories.
    pub nlink: u32,
}

/// Most component objects in one layout (`raid6x:42` has 44).
pub const COMPONENTS_MAX: usize = 64;
/// Longest geometry spec (`"raid6x:42/1M"` and the like).
pub const GEOMETRY_BYTES_MAX: usize = 64;

/// One object of a file's layout: a component of seed 002 §3.3's stripe map, on one drive.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Component {
    pub drive: DriveId,
    pub addr: String,
    pub suite: Suite,
    pub partition: PartitionId,
    pub object: ObjectId,
    /// The component missed a write (its drive was down) or its drive is lost: it must not be
    /// read until a rebuild makes it current again.
    pub stale: bool,
}

/// Where a file's bytes live (seed 002 §3.3's stripe map): a geometry, in the spec syntax of
/// `nasd_ec` (`"single"`, `"rs:4+2/256K"`, ...), over component objects on distinct drives.
/// `version` changes whenever a component is replaced or marked stale, so a client's cached
/// map can be told apart from the current one.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Layout {
    pub version: u64,
    pub geometry: String,
    pub components: Vec<Component>,
}

impl Layout {
    /// A one-object layout (`single`).
    pub fn single(c: Component) -> Layout {
        Layout {
            version: 1,
            geometry: "single".into(),
            components: vec![c],
        }
    }
}

/// One new file staged by [`MgrRequest::Prepare`], as `Staged` describes an upload.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PreparedFile {
    pub stat: FileStat,
    pub layout: Layout,
    /// `caps[i]` is the write capability for `layout.components[i]`.
    pub caps: Vec<CapGrant>,
    /// Writes may go up to this logical offset (exclusive); [`WRITE_END_UNBOUNDED`] when no
    /// quota bounds them.
    pub write_end: u64,
    /// What the file's writer follows (the directory's policy).
    pub policy: E2ePolicy,
}

/// A capability as the manager hands it out: public args and the secret key.
#[derive(Clone, PartialEq, Eq)]
pub struct CapGrant {
    pub args: CapabilityArgs,
    pub key: [u8; 32],
}

/// The capability key is wiped when the grant goes.
impl Drop for CapGrant {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.key);
    }
}

impl fmt::Debug for CapGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapGrant")
            .field("args", &self.args)
            .field("key", &"..")
            .finish()
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DirEntry {
    pub name: String,
    pub stat: FileStat,
    /// The extended attribute a `Readdir` asked for, if the file has it.
    pub xattr: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UserInfo {
    pub name: String,
    pub uid: u32,
    pub admin: bool,
    pub groups: Vec<String>,
}

/// One user's quota (seed 002 §3.2): the limit, the bytes of files they own (logical sizes,
/// as of the last settlement), and the bytes escrowed for writes in flight.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct QuotaInfo {
    pub user: String,
    pub uid: u32,
    pub limit: u64,
    pub used: u64,
    pub escrowed: u64,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DriveStatus {
    pub drive: DriveId,
    pub addr: String,
    pub partition: PartitionId,
    pub healthy: bool,
    pub files: u64,
    /// Milliseconds since the Unix epoch of the last working-key rotation.
    pub key_rotated_ms: u64,
    pub detail: String,
}

/// Most paths a [`ClusterStatus`] lists by name.
pub const STATUS_PATHS_MAX: usize = 100;

/// What a scrub of one file found and did.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ScrubReport {
    pub path: String,
    pub geometry: String,
    /// Bytes read back from the drives and checked.
    pub bytes_checked: u64,
    /// Parity groups (stripes for raid0, the whole file for single and mirror) checked.
    pub groups: u64,
    /// Shard ranges found damaged: refused by their drive's integrity check, unreadable, or
    /// located by parity.
    pub damaged: u64,
    /// Damaged ranges rewritten with the right bytes.
    pub repaired: u64,
    /// Stale or lost components rebuilt onto fresh objects.
    pub rebuilt: u64,
    /// Groups with more damage than the code corrects.
    pub unrecoverable: u64,
    /// Groups not wholly checked because a drive did not answer, plus stale components
    /// left as they are (a scrub without repair does not rebuild them).
    pub unchecked: u64,
    /// The first problems, in words.
    pub detail: String,
}

/// Progress of a `DriveReplace`.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RebuildStatus {
    pub old: DriveId,
    pub new: DriveId,
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Files whose components could not be rebuilt (named in `detail`); retried by the scrub.
    pub failed: u64,
    pub finished: bool,
    pub detail: String,
}

/// Progress of the manager's background scrub.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ScrubStatus {
    /// Completed passes over every file since the manager started.
    pub passes: u64,
    /// Files checked in the current pass.
    pub files: u64,
    pub bytes: u64,
    pub damaged: u64,
    pub repaired: u64,
    /// When the last pass ended (Unix ms; 0: none yet).
    pub last_pass_ms: u64,
    /// The rate limit, bytes per second (0: the background scrub is off).
    pub rate_bytes_per_s: u64,
}

/// The cluster's health (`Status`).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ClusterStatus {
    pub drives: Vec<DriveStatus>,
    pub files: u64,
    /// Files with a stale component or a component on an unhealthy drive.
    pub degraded_files: u64,
    /// The first [`STATUS_PATHS_MAX`] of them.
    pub degraded: Vec<String>,
    pub rebuild: Option<RebuildStatus>,
    pub scrub: ScrubStatus,
}

/// A secret carried as text (a password, an S3 secret access key): never printed by `Debug`,
/// wiped when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(pub String);

impl From<String> for SecretString {
    fn from(s: String) -> Self {
        SecretString(s)
    }
}

impl From<&str> for SecretString {
    fn from(s: &str) -> Self {
        SecretString(s.to_string())
    }
}

impl std::ops::Deref for SecretString {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// A session token as a `LoginOk` carries it: whoever holds it is the user until it expires,
/// so `Debug` (an "unexpected reply" message, a log line) never prints it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SessionToken(pub [u8; TOKEN_BYTES]);

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(..)")
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<secret, {} bytes>", self.0.len())
    }
}

impl Drop for SecretString {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

/// A reply from the manager.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum MgrReply {
    Error {
        status: MgrStatus,
        detail: String,
    },
    Ok,
    LoginOk {
        uid: u32,
        admin: bool,
        token: SessionToken,
        expires_ms: u64,
    },
    Stat(FileStat),
    Entries(Vec<DirEntry>),
    /// `caps[i]` is the capability for `layout.components[i]`; `write_end` is how far
    /// writes under them may go ([`WRITE_END_UNBOUNDED`] for read capabilities and when no
    /// quota bounds them).
    Opened {
        stat: FileStat,
        layout: Layout,
        caps: Vec<CapGrant>,
        write_end: u64,
        /// What a writer of the file follows (its directory's policy).
        policy: E2ePolicy,
        /// The file's end-to-end state, if it has one.
        e2e: Option<E2eState>,
    },
    Users(Vec<UserInfo>),
    Drives(Vec<DriveStatus>),
    /// Like `Opened`, for a staged object not yet visible under `stat`'s path: the layout and
    /// capability are the new object's; the stat is the existing file's when the upload
    /// `replaces` one, else the new file's as it will be linked.
    Staged {
        stat: FileStat,
        layout: Layout,
        caps: Vec<CapGrant>,
        write_end: u64,
        replaces: bool,
        policy: E2ePolicy,
        /// The end-to-end state of the file the upload replaces or changes, if any.
        e2e: Option<E2eState>,
    },
    Challenge([u8; CHALLENGE_BYTES]),
    /// The target of a symbolic link ([`MgrRequest::Readlink`]).
    LinkTarget(String),
    /// A new S3 access key and its secret ([`MgrRequest::S3KeyCreate`]).
    S3KeyMade {
        access_key_id: String,
        secret: SecretString,
    },
    /// A user's S3 access keys and when each was made (ms since the epoch).
    S3Keys(Vec<(String, u64)>),
    /// Whose key it is and its secret ([`MgrRequest::S3KeySecret`], gateways only).
    S3KeyFound {
        user: String,
        secret: SecretString,
    },
    /// A file's stat and extended attributes, sorted by name ([`MgrRequest::Getxattrs`]).
    Xattrs {
        stat: FileStat,
        xattrs: Vec<Xattr>,
    },
    /// New files staged by [`MgrRequest::Prepare`]: for each, the file as it will be linked
    /// (its inode number among it), its layout and one write capability per component.
    Prepared(Vec<PreparedFile>),
    /// The layout spec new files in a directory get (`LayoutGet`).
    LayoutSpec(String),
    Scrubbed(ScrubReport),
    Status(ClusterStatus),
    /// Callback breaks for the polling session, oldest first ([`MgrRequest::WaitBreaks`]).
    Breaks(Vec<CallbackBreak>),
    /// Quotas ([`MgrRequest::QuotaGet`], and the one [`MgrRequest::QuotaSet`] set).
    Quotas(Vec<QuotaInfo>),
    /// Users' end-to-end public keys ([`MgrRequest::UserKeyGet`]).
    UserKeys(Vec<UserKeyInfo>),
    /// Groups' key pairs ([`MgrRequest::GroupKeyGet`]).
    GroupKeys(Vec<GroupKeyInfo>),
}

fn put_str(w: &mut Writer, s: &str) {
    debug_assert!(s.len() <= STRING_BYTES_MAX);
    w.blob(s.as_bytes());
}

fn get_str(r: &mut Reader<'_>, what: &'static str) -> Result<String, DecodeError> {
    let b = r.blob(STRING_BYTES_MAX, what)?;
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::BadValue("string is not UTF-8"))
}

fn get_bool(r: &mut Reader<'_>, what: &'static str) -> Result<bool, DecodeError> {
    match r.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::BadValue(what)),
    }
}

/// `u8 has_key (0 | 1)`, then the 32-byte key when 1.
fn put_public_key(w: &mut Writer, k: &Option<[u8; PUBLIC_KEY_BYTES]>) {
    match k {
        None => w.u8(0),
        Some(k) => {
            w.u8(1);
            w.bytes(k);
        }
    }
}

fn get_public_key(r: &mut Reader<'_>) -> Result<Option<[u8; PUBLIC_KEY_BYTES]>, DecodeError> {
    Ok(match get_bool(r, "has public key")? {
        false => None,
        true => Some(r.array("public key")?),
    })
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

impl MgrRequest {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Login { .. } => "login",
            Self::Stat { .. } => "stat",
            Self::Readdir { .. } => "readdir",
            Self::Mkdir { .. } => "mkdir",
            Self::Rmdir { .. } => "rmdir",
            Self::Create { .. } => "create",
            Self::Open { .. } => "open",
            Self::ReturnCapability { .. } => "return-capability",
            Self::Unlink { .. } => "unlink",
            Self::Rename { .. } => "rename",
            Self::Symlink { .. } => "symlink",
            Self::Readlink { .. } => "readlink",
            Self::Link { .. } => "link",
            Self::Lstat { .. } => "lstat",
            Self::ActFor { .. } => "act for",
            Self::UserGateway { .. } => "user gateway",
            Self::S3KeyCreate { .. } => "s3 key create",
            Self::S3KeyList { .. } => "s3 key list",
            Self::S3KeyRevoke { .. } => "s3 key revoke",
            Self::S3KeySecret { .. } => "s3 key secret",
            Self::Getxattrs { .. } => "getxattrs",
            Self::Setxattr { .. } => "setxattr",
            Self::Chmod { .. } => "chmod",
            Self::Chown { .. } => "chown",
            Self::Truncate { .. } => "truncate",
            Self::Utimes { .. } => "utimes",
            Self::UserAdd { .. } => "user add",
            Self::UserPasswd { .. } => "user passwd",
            Self::UserList => "user list",
            Self::GroupAdd { .. } => "group add",
            Self::GroupMember { .. } => "group member",
            Self::DriveAdd { .. } => "drive add",
            Self::DriveList => "drive list",
            Self::Commit { .. } => "commit",
            Self::Challenge { .. } => "challenge",
            Self::Logout => "logout",
            Self::Abort { .. } => "abort",
            Self::Renew { .. } => "renew",
            Self::LayoutGet { .. } => "layout get",
            Self::LayoutSet { .. } => "layout set",
            Self::StageWrite { .. } => "stage write",
            Self::Repair { .. } => "repair",
            Self::Scrub { .. } => "scrub",
            Self::Status => "status",
            Self::DriveReplace { .. } => "drive replace",
            Self::Prepare { .. } => "prepare",
            Self::WaitBreaks { .. } => "wait breaks",
            Self::QuotaSet { .. } => "quota set",
            Self::QuotaGet { .. } => "quota get",
            Self::E2eUpdate { .. } => "e2e update",
            Self::UserKeySet { .. } => "user key set",
            Self::UserKeyGet { .. } => "user key get",
            Self::GroupKeySet { .. } => "group key set",
            Self::GroupKeyGet { .. } => "group key get",
        }
    }

    pub fn encode(&self, request_id: u64) -> Vec<u8> {
        let mut w = Writer::with_capacity(64);
        let tag = match self {
            Self::Login { .. } => 1,
            Self::Stat { .. } => 2,
            Self::Readdir { .. } => 3,
            Self::Mkdir { .. } => 4,
            Self::Rmdir { .. } => 5,
            Self::Create { .. } => 6,
            Self::Open { .. } => 7,
            Self::ReturnCapability { .. } => 8,
            Self::Unlink { .. } => 9,
            Self::Rename { .. } => 10,
            Self::Chmod { .. } => 11,
            Self::Chown { .. } => 12,
            Self::Truncate { .. } => 13,
            Self::Utimes { .. } => 14,
            Self::UserAdd { .. } => 15,
            Self::UserPasswd { .. } => 16,
            Self::UserList => 17,
            Self::GroupAdd { .. } => 18,
            Self::GroupMember { .. } => 19,
            Self::DriveAdd { .. } => 20,
            Self::DriveList => 21,
            Self::Commit { .. } => 22,
            Self::Challenge { .. } => 23,
            Self::Logout => 24,
            Self::Abort { .. } => 25,
            Self::Renew { .. } => 26,
            Self::LayoutGet { .. } => 27,
            Self::LayoutSet { .. } => 28,
            Self::StageWrite { .. } => 29,
            Self::Repair { .. } => 30,
            Self::Scrub { .. } => 31,
            Self::Status => 32,
            Self::DriveReplace { .. } => 33,
            Self::Prepare { .. } => 34,
            Self::Symlink { .. } => 35,
            Self::Readlink { .. } => 36,
            Self::Link { .. } => 37,
            Self::Lstat { .. } => 38,
            Self::ActFor { .. } => 39,
            Self::UserGateway { .. } => 40,
            Self::S3KeyCreate { .. } => 41,
            Self::S3KeyList { .. } => 42,
            Self::S3KeyRevoke { .. } => 43,
            Self::S3KeySecret { .. } => 44,
            Self::Getxattrs { .. } => 45,
            Self::Setxattr { .. } => 46,
            Self::WaitBreaks { .. } => 47,
            Self::QuotaSet { .. } => 48,
            Self::QuotaGet { .. } => 49,
            Self::E2eUpdate { .. } => 50,
            Self::UserKeySet { .. } => 51,
            Self::UserKeyGet { .. } => 52,
            Self::GroupKeySet { .. } => 53,
            Self::GroupKeyGet { .. } => 54,
        };
        put_header(&mut w, KIND_REQUEST, request_id, tag);
        match self {
            Self::Login { user, credential } => {
                put_str(&mut w, user);
                match credential {
                    Credential::Password(p) => {
                        w.u8(1);
                        put_str(&mut w, p);
                    }
                    Credential::Token(t) => {
                        w.u8(2);
                        w.bytes(t);
                    }
                    Credential::Signature(sig) => {
                        w.u8(3);
                        w.bytes(sig);
                    }
                }
            }
            Self::Readdir {
                path,
                after,
                limit,
                xattr,
            } => {
                put_str(&mut w, path);
                put_str(&mut w, after);
                w.u32(*limit);
                match xattr {
                    None => w.u8(0),
                    Some(x) => {
                        w.u8(1);
                        put_str(&mut w, x);
                    }
                }
            }
            Self::Prepare {
                dir,
                mode,
                count,
                extend_by,
            } => {
                put_str(&mut w, dir);
                w.u32(*mode);
                w.u32(*count);
                w.u64(*extend_by);
            }
            Self::QuotaSet { user, limit } => {
                put_str(&mut w, user);
                match limit {
                    None => w.u8(0),
                    Some(l) => {
                        w.u8(1);
                        w.u64(*l);
                    }
                }
            }
            Self::QuotaGet { user } => put_str(&mut w, user),
            Self::E2eUpdate { path, update } => {
                put_str(&mut w, path);
                update.put(&mut w);
            }
            Self::UserKeySet { user, keys } => {
                put_str(&mut w, user);
                keys.put(&mut w);
            }
            Self::UserKeyGet { uids: gids, names } | Self::GroupKeyGet { gids, names } => {
                debug_assert!(gids.len() <= KEY_LIST_MAX && names.len() <= KEY_LIST_MAX);
                w.u32(gids.len() as u32);
                for id in gids {
                    w.u32(*id);
                }
                w.u32(names.len() as u32);
                for n in names {
                    put_str(&mut w, n);
                }
            }
            Self::GroupKeySet {
                group,
                version,
                public,
                wraps,
            } => {
                put_str(&mut w, group);
                w.u32(*version);
                w.bytes(public);
                debug_assert!(wraps.len() <= KEY_LIST_MAX);
                w.u32(wraps.len() as u32);
                for (uid, wrap) in wraps {
                    w.u32(*uid);
                    w.blob(wrap);
                }
            }
            Self::Stat { path } | Self::Rmdir { path } | Self::Unlink { path } => {
                put_str(&mut w, path)
            }
            Self::Mkdir { path, mode } | Self::Chmod { path, mode } => {
                put_str(&mut w, path);
                w.u32(*mode);
            }
            Self::Create {
                path,
                mode,
                exclusive,
                extend_by,
            } => {
                put_str(&mut w, path);
                w.u32(*mode);
                w.u8(*exclusive as u8);
                w.u64(*extend_by);
            }
            Self::Open {
                path,
                write,
                extend_by,
            } => {
                put_str(&mut w, path);
                w.u8(*write as u8);
                w.u64(*extend_by);
            }
            Self::ReturnCapability { path, audit_id } => {
                put_str(&mut w, path);
                w.u64(*audit_id);
            }
            Self::Rename { from, to } => {
                put_str(&mut w, from);
                put_str(&mut w, to);
            }
            Self::Symlink { path, target } => {
                put_str(&mut w, path);
                put_str(&mut w, target);
            }
            Self::Readlink { path } | Self::Lstat { path } => put_str(&mut w, path),
            Self::ActFor { user }
            | Self::S3KeyCreate { user }
            | Self::S3KeyList { user }
            | Self::S3KeySecret {
                access_key_id: user,
            } => put_str(&mut w, user),
            Self::S3KeyRevoke {
                user,
                access_key_id,
            } => {
                put_str(&mut w, user);
                put_str(&mut w, access_key_id);
            }
            Self::UserGateway { name, on } => {
                put_str(&mut w, name);
                w.u8(*on as u8);
            }
            Self::Link { existing, new } => {
                put_str(&mut w, existing);
                put_str(&mut w, new);
            }
            Self::Chown { path, owner, group } => {
                put_str(&mut w, path);
                put_str(&mut w, owner);
                put_str(&mut w, group);
            }
            Self::Truncate { path, size } => {
                put_str(&mut w, path);
                w.u64(*size);
            }
            Self::Utimes { path, mtime_us } => {
                put_str(&mut w, path);
                w.u64(*mtime_us);
            }
            Self::UserAdd {
                name,
                password,
                admin,
                public_key,
            } => {
                put_str(&mut w, name);
                put_str(&mut w, password);
                w.u8(*admin as u8);
                put_public_key(&mut w, public_key);
            }
            Self::Challenge { user } => put_str(&mut w, user),
            Self::UserPasswd {
                name,
                password,
                public_key,
            } => {
                put_str(&mut w, name);
                put_str(&mut w, password);
                put_public_key(&mut w, public_key);
            }
            Self::UserList | Self::DriveList | Self::Logout | Self::Status => {}
            Self::WaitBreaks { acked, wait_ms } => {
                w.u64(*acked);
                w.u32(*wait_ms);
            }
            Self::LayoutGet { path } => put_str(&mut w, path),
            Self::StageWrite { path, extend_by } => {
                put_str(&mut w, path);
                w.u64(*extend_by);
            }
            Self::Repair {
                path,
                component,
                offset,
                len,
            } => {
                put_str(&mut w, path);
                w.u16(*component);
                w.u64(*offset);
                w.u64(*len);
            }
            Self::Scrub { path, repair } => {
                put_str(&mut w, path);
                w.u8(*repair as u8);
            }
            Self::DriveReplace { old, new } => {
                w.u64(old.0);
                w.u64(new.0);
            }
            Self::LayoutSet { path, spec } => {
                put_str(&mut w, path);
                put_str(&mut w, spec);
            }
            Self::GroupAdd { name } => put_str(&mut w, name),
            Self::GroupMember { group, user } => {
                put_str(&mut w, group);
                put_str(&mut w, user);
            }
            Self::DriveAdd {
                addr,
                drive_key_file,
                master_key_file,
            } => {
                put_str(&mut w, addr);
                put_str(&mut w, drive_key_file);
                put_str(&mut w, master_key_file);
            }
            Self::Commit {
                path,
                drive,
                object,
                size,
                stale,
                xattrs,
                e2e,
            } => {
                put_str(&mut w, path);
                w.u64(drive.0);
                w.u64(object.0);
                w.u64(*size);
                w.u64(*stale);
                match xattrs {
                    None => w.u8(0),
                    Some(x) => {
                        w.u8(1);
                        put_xattrs(&mut w, x);
                    }
                }
                match e2e {
                    None => w.u8(0),
                    Some(c) => {
                        w.u8(1);
                        c.put(&mut w);
                    }
                }
            }
            Self::Getxattrs { path } => put_str(&mut w, path),
            Self::Setxattr { path, name, value } => {
                put_str(&mut w, path);
                put_str(&mut w, name);
                match value {
                    None => w.u8(0),
                    Some(v) => {
                        w.u8(1);
                        w.blob(v);
                    }
                }
            }
            Self::Abort {
                path,
                drive,
                object,
            } => {
                put_str(&mut w, path);
                w.u64(drive.0);
                w.u64(object.0);
            }
            Self::Renew {
                path,
                drive,
                object,
                extend_by,
            } => {
                put_str(&mut w, path);
                w.u64(drive.0);
                w.u64(object.0);
                w.u64(*extend_by);
            }
        }
        w.into_vec()
    }

    /// Decodes a request body; returns its request id and the request.
    pub fn decode(body: &[u8]) -> Result<(u64, MgrRequest), DecodeError> {
        let mut r = Reader::new(body);
        let (id, tag) = get_header(&mut r, KIND_REQUEST)?;
        let r = &mut r;
        let req = match tag {
            1 => {
                let user = get_str(r, "user")?;
                let credential = match r.u8("credential kind")? {
                    1 => Credential::Password(SecretString(get_str(r, "password")?)),
                    2 => Credential::Token(r.array("token")?),
                    3 => Credential::Signature(r.array("signature")?),
                    _ => return Err(DecodeError::BadValue("credential kind")),
                };
                Self::Login { user, credential }
            }
            2 => Self::Stat {
                path: get_str(r, "path")?,
            },
            3 => Self::Readdir {
                path: get_str(r, "path")?,
                after: get_str(r, "after")?,
                limit: r.u32("limit")?,
                xattr: match get_bool(r, "has xattr")? {
                    false => None,
                    true => Some(get_xattr_name(r)?),
                },
            },
            4 => Self::Mkdir {
                path: get_str(r, "path")?,
                mode: r.u32("mode")?,
            },
            5 => Self::Rmdir {
                path: get_str(r, "path")?,
            },
            6 => Self::Create {
                path: get_str(r, "path")?,
                mode: r.u32("mode")?,
                exclusive: get_bool(r, "exclusive")?,
                extend_by: r.u64("extend by")?,
            },
            7 => Self::Open {
                path: get_str(r, "path")?,
                write: get_bool(r, "write")?,
                extend_by: r.u64("extend by")?,
            },
            8 => Self::ReturnCapability {
                path: get_str(r, "path")?,
                audit_id: r.u64("audit id")?,
            },
            9 => Self::Unlink {
                path: get_str(r, "path")?,
            },
            10 => Self::Rename {
                from: get_str(r, "from")?,
                to: get_str(r, "to")?,
            },
            11 => Self::Chmod {
                path: get_str(r, "path")?,
                mode: r.u32("mode")?,
            },
            12 => Self::Chown {
                path: get_str(r, "path")?,
                owner: get_str(r, "owner")?,
                group: get_str(r, "group")?,
            },
            13 => Self::Truncate {
                path: get_str(r, "path")?,
                size: r.u64("size")?,
            },
            14 => Self::Utimes {
                path: get_str(r, "path")?,
                mtime_us: r.u64("mtime")?,
            },
            15 => Self::UserAdd {
                name: get_str(r, "name")?,
                password: SecretString(get_str(r, "password")?),
                admin: get_bool(r, "admin")?,
                public_key: get_public_key(r)?,
            },
            16 => Self::UserPasswd {
                name: get_str(r, "name")?,
                password: SecretString(get_str(r, "password")?),
                public_key: get_public_key(r)?,
            },
            17 => Self::UserList,
            18 => Self::GroupAdd {
                name: get_str(r, "name")?,
            },
            19 => Self::GroupMember {
                group: get_str(r, "group")?,
                user: get_str(r, "user")?,
            },
            20 => Self::DriveAdd {
                addr: get_str(r, "addr")?,
                drive_key_file: get_str(r, "drive key file")?,
                master_key_file: get_str(r, "master key file")?,
            },
            21 => Self::DriveList,
            22 => Self::Commit {
                path: get_str(r, "path")?,
                drive: DriveId(r.u64("drive")?),
                object: ObjectId(r.u64("object")?),
                size: r.u64("size")?,
                stale: r.u64("stale components")?,
                xattrs: match get_bool(r, "has xattrs")? {
                    false => None,
                    true => Some(get_xattrs(r)?),
                },
                e2e: match get_bool(r, "has e2e")? {
                    false => None,
                    true => Some(E2eCommit::get(r)?),
                },
            },
            23 => Self::Challenge {
                user: get_str(r, "user")?,
            },
            24 => Self::Logout,
            47 => Self::WaitBreaks {
                acked: r.u64("acked")?,
                wait_ms: r.u32("wait ms")?,
            },
            25 => Self::Abort {
                path: get_str(r, "path")?,
                drive: DriveId(r.u64("drive")?),
                object: ObjectId(r.u64("object")?),
            },
            26 => Self::Renew {
                path: get_str(r, "path")?,
                drive: DriveId(r.u64("drive")?),
                object: ObjectId(r.u64("object")?),
                extend_by: r.u64("extend by")?,
            },
            27 => Self::LayoutGet {
                path: get_str(r, "path")?,
            },
            28 => Self::LayoutSet {
                path: get_str(r, "path")?,
                spec: get_str(r, "layout spec")?,
            },
            29 => Self::StageWrite {
                path: get_str(r, "path")?,
                extend_by: r.u64("extend by")?,
            },
            30 => Self::Repair {
                path: get_str(r, "path")?,
                component: r.u16("component")?,
                offset: r.u64("offset")?,
                len: r.u64("length")?,
            },
            31 => Self::Scrub {
                path: get_str(r, "path")?,
                repair: get_bool(r, "repair")?,
            },
            32 => Self::Status,
            33 => Self::DriveReplace {
                old: DriveId(r.u64("old drive")?),
                new: DriveId(r.u64("new drive")?),
            },
            35 => Self::Symlink {
                path: get_str(r, "path")?,
                target: get_str(r, "target")?,
            },
            36 => Self::Readlink {
                path: get_str(r, "path")?,
            },
            39 => Self::ActFor {
                user: get_str(r, "user")?,
            },
            40 => Self::UserGateway {
                name: get_str(r, "name")?,
                on: get_bool(r, "on")?,
            },
            41 => Self::S3KeyCreate {
                user: get_str(r, "user")?,
            },
            42 => Self::S3KeyList {
                user: get_str(r, "user")?,
            },
            43 => Self::S3KeyRevoke {
                user: get_str(r, "user")?,
                access_key_id: get_str(r, "access key id")?,
            },
            44 => Self::S3KeySecret {
                access_key_id: get_str(r, "access key id")?,
            },
            45 => Self::Getxattrs {
                path: get_str(r, "path")?,
            },
            46 => Self::Setxattr {
                path: get_str(r, "path")?,
                name: get_xattr_name(r)?,
                value: match get_bool(r, "has value")? {
                    false => None,
                    true => Some(r.blob(XATTR_VALUE_BYTES_MAX, "xattr value")?.to_vec()),
                },
            },
            38 => Self::Lstat {
                path: get_str(r, "path")?,
            },
            37 => Self::Link {
                existing: get_str(r, "existing")?,
                new: get_str(r, "new")?,
            },
            34 => Self::Prepare {
                dir: get_str(r, "directory")?,
                mode: r.u32("mode")?,
                count: r.u32("count")?,
                extend_by: r.u64("extend by")?,
            },
            48 => Self::QuotaSet {
                user: get_str(r, "user")?,
                limit: match get_bool(r, "has limit")? {
                    false => None,
                    true => Some(r.u64("limit")?),
                },
            },
            49 => Self::QuotaGet {
                user: get_str(r, "user")?,
            },
            50 => Self::E2eUpdate {
                path: get_str(r, "path")?,
                update: E2eCommit::get(r)?,
            },
            51 => Self::UserKeySet {
                user: get_str(r, "user")?,
                keys: UserKeys::get(r)?,
            },
            52 => {
                let uids = get_ids(r, "uids")?;
                let names = get_names(r)?;
                Self::UserKeyGet { uids, names }
            }
            53 => {
                let group = get_str(r, "group")?;
                let version = r.u32("group key version")?;
                let public = r.array("group public key")?;
                let n = r.u32("group wraps")? as usize;
                if n > KEY_LIST_MAX || n.saturating_mul(8) > r.remaining() {
                    return Err(DecodeError::TooLong("group wraps"));
                }
                let mut wraps = Vec::with_capacity(n);
                for _ in 0..n {
                    let uid = r.u32("wrap uid")?;
                    wraps.push((uid, r.blob(GROUP_WRAP_BYTES_MAX, "group wrap")?.to_vec()));
                }
                Self::GroupKeySet {
                    group,
                    version,
                    public,
                    wraps,
                }
            }
            54 => {
                let gids = get_ids(r, "gids")?;
                let names = get_names(r)?;
                Self::GroupKeyGet { gids, names }
            }
            _ => return Err(DecodeError::BadValue("request tag")),
        };
        r.finish("manager request")?;
        Ok((id, req))
    }
}

fn get_layout(r: &mut Reader<'_>) -> Result<Layout, DecodeError> {
    let version = r.u64("layout version")?;
    let geometry = get_str(r, "geometry")?;
    if geometry.len() > GEOMETRY_BYTES_MAX {
        return Err(DecodeError::TooLong("geometry"));
    }
    let n = r.u16("components")? as usize;
    if n == 0 || n > COMPONENTS_MAX {
        return Err(DecodeError::BadValue("component count"));
    }
    let mut components = Vec::with_capacity(n);
    for _ in 0..n {
        components.push(Component {
            drive: DriveId(r.u64("drive")?),
            addr: get_str(r, "addr")?,
            suite: Suite::from_u8(r.u8("suite")?)?,
            partition: PartitionId(r.u16("partition")?),
            object: ObjectId(r.u64("object")?),
            stale: get_bool(r, "stale")?,
        });
    }
    Ok(Layout {
        version,
        geometry,
        components,
    })
}

fn put_layout(w: &mut Writer, l: &Layout) {
    w.u64(l.version);
    put_str(w, &l.geometry);
    w.u16(l.components.len() as u16);
    for c in &l.components {
        w.u64(c.drive.0);
        put_str(w, &c.addr);
        w.u8(c.suite as u8);
        w.u16(c.partition.0);
        w.u64(c.object.0);
        w.u8(c.stale as u8);
    }
}

/// A grant as `Opened`, `Staged` and `Prepared` carry it: stat, layout, one capability per
/// component, `u64 write_end`, then (version 12) the writer's [`E2ePolicy`] and `u8 has_e2e`
/// with the file's [`E2eState`].
struct Grant {
    stat: FileStat,
    layout: Layout,
    caps: Vec<CapGrant>,
    write_end: u64,
    policy: E2ePolicy,
    e2e: Option<E2eState>,
}

fn get_opened(r: &mut Reader<'_>) -> Result<Grant, DecodeError> {
    let stat = get_stat(r)?;
    let layout = get_layout(r)?;
    // One grant per component, in order.
    let mut caps = Vec::with_capacity(layout.components.len());
    for _ in 0..layout.components.len() {
        let mut args = CapabilityArgs::get(r)?;
        if get_bool(r, "has writer key")? {
            args.writer_key = Some(crate::WriterPublicKey(r.array("writer key")?));
        }
        caps.push(CapGrant {
            args,
            key: r.array("capability key")?,
        });
    }
    let write_end = r.u64("write end")?;
    let policy = E2ePolicy::get(r)?;
    let e2e = match get_bool(r, "has e2e")? {
        false => None,
        true => Some(E2eState::get(r)?),
    };
    Ok(Grant {
        stat,
        layout,
        caps,
        write_end,
        policy,
        e2e,
    })
}

#[allow(clippy::too_many_arguments)] // a grant's fields, as they go on the wire
fn put_opened(
    w: &mut Writer,
    stat: &FileStat,
    layout: &Layout,
    caps: &[CapGrant],
    write_end: u64,
    policy: &E2ePolicy,
    e2e: Option<&E2eState>,
) {
    debug_assert_eq!(caps.len(), layout.components.len());
    put_stat(w, stat);
    put_layout(w, layout);
    for cap in caps {
        cap.args.put_base(w);
        match &cap.args.writer_key {
            None => w.u8(0),
            Some(k) => {
                w.u8(1);
                w.bytes(&k.0);
            }
        }
        w.bytes(&cap.key);
    }
    w.u64(write_end);
    policy.put(w);
    match e2e {
        None => w.u8(0),
        Some(e) => {
            w.u8(1);
            e.put(w);
        }
    }
}

fn put_stat(w: &mut Writer, s: &FileStat) {
    w.u64(s.ino);
    w.u8(s.kind as u8);
    w.u32(s.mode);
    w.u32(s.uid);
    w.u32(s.gid);
    put_str(w, &s.owner);
    put_str(w, &s.group);
    w.u64(s.size);
    w.u64(s.mtime_us);
    w.u64(s.ctime_us);
    w.u32(s.nlink);
}

fn get_stat(r: &mut Reader<'_>) -> Result<FileStat, DecodeError> {
    Ok(FileStat {
        ino: r.u64("ino")?,
        kind: FileKind::from_u8(r.u8("kind")?)?,
        mode: r.u32("mode")?,
        uid: r.u32("uid")?,
        gid: r.u32("gid")?,
        owner: get_str(r, "owner")?,
        group: get_str(r, "group")?,
        size: r.u64("size")?,
        mtime_us: r.u64("mtime")?,
        ctime_us: r.u64("ctime")?,
        nlink: r.u32("nlink")?,
    })
}

/// One extended attribute of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xattr {
    pub name: String,
    pub value: Vec<u8>,
}

/// Whether `xattrs` is a set a file may carry: names non-empty, at most
/// [`XATTR_NAME_BYTES_MAX`], without NUL or control characters, each once; at most
/// [`XATTRS_PER_FILE_MAX`] of them, of at most [`XATTRS_BYTES_MAX`] names and values.
pub fn check_xattrs(xattrs: &[Xattr]) -> Result<(), &'static str> {
    if xattrs.len() > XATTRS_PER_FILE_MAX {
        return Err("too many extended attributes");
    }
    let mut total = 0usize;
    let mut names = std::collections::BTreeSet::new();
    for x in xattrs {
        check_xattr_name(&x.name)?;
        if !names.insert(x.name.as_str()) {
            return Err("an extended attribute is named twice");
        }
        total += x.name.len() + x.value.len();
    }
    if total > XATTRS_BYTES_MAX {
        return Err("extended attributes too large");
    }
    Ok(())
}

/// Whether `name` can name an extended attribute (see [`check_xattrs`]).
pub fn check_xattr_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > XATTR_NAME_BYTES_MAX {
        return Err("extended attribute name empty or too long");
    }
    if name.chars().any(char::is_control) {
        return Err("control character in an extended attribute name");
    }
    Ok(())
}

/// `u32 count`, then per attribute its name (string) and value (blob).
fn put_xattrs(w: &mut Writer, xattrs: &[Xattr]) {
    w.u32(xattrs.len() as u32);
    for x in xattrs {
        put_str(w, &x.name);
        w.blob(&x.value);
    }
}

fn get_xattr_name(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    let b = r.blob(XATTR_NAME_BYTES_MAX, "xattr name")?;
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::BadValue("xattr name is not UTF-8"))
}

fn get_xattrs(r: &mut Reader<'_>) -> Result<Vec<Xattr>, DecodeError> {
    let n = get_count(r, 8, "xattrs")?;
    if n > XATTRS_PER_FILE_MAX {
        return Err(DecodeError::TooLong("xattrs"));
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let name = get_xattr_name(r)?;
        let value = r.blob(XATTR_VALUE_BYTES_MAX, "xattr value")?.to_vec();
        v.push(Xattr { name, value });
    }
    check_xattrs(&v).map_err(DecodeError::BadValue)?;
    Ok(v)
}

/// A count that precedes a list, checked against the bytes left (each element takes at least
/// `min_bytes`) before anything is allocated.
/// `u32 n` (at most [`KEY_LIST_MAX`]) then `n` names.
fn get_names(r: &mut Reader<'_>) -> Result<Vec<String>, DecodeError> {
    let n = get_count(r, 4, "names")?;
    if n > KEY_LIST_MAX {
        return Err(DecodeError::TooLong("names"));
    }
    (0..n).map(|_| get_str(r, "name")).collect()
}

/// `u32 n` (at most [`KEY_LIST_MAX`]) then `n` u32 ids.
fn get_ids(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<u32>, DecodeError> {
    let n = r.u32(what)? as usize;
    if n > KEY_LIST_MAX || n.saturating_mul(4) > r.remaining() {
        return Err(DecodeError::TooLong(what));
    }
    (0..n).map(|_| r.u32(what)).collect()
}

fn get_count(
    r: &mut Reader<'_>,
    min_bytes: usize,
    what: &'static str,
) -> Result<usize, DecodeError> {
    let n = r.u32(what)? as usize;
    if n > LIST_ENTRIES_MAX {
        return Err(DecodeError::TooLong(what));
    }
    if n.saturating_mul(min_bytes) > r.remaining() {
        return Err(DecodeError::Truncated(what));
    }
    Ok(n)
}

fn put_drives(w: &mut Writer, ds: &[DriveStatus]) {
    w.u32(ds.len() as u32);
    for d in ds {
        w.u64(d.drive.0);
        put_str(w, &d.addr);
        w.u16(d.partition.0);
        w.u8(d.healthy as u8);
        w.u64(d.files);
        w.u64(d.key_rotated_ms);
        put_str(w, &d.detail);
    }
}

fn get_drives(r: &mut Reader<'_>) -> Result<Vec<DriveStatus>, DecodeError> {
    let n = get_count(r, 35, "drives")?;
    let mut ds = Vec::with_capacity(n);
    for _ in 0..n {
        ds.push(DriveStatus {
            drive: DriveId(r.u64("drive")?),
            addr: get_str(r, "addr")?,
            partition: PartitionId(r.u16("partition")?),
            healthy: get_bool(r, "healthy")?,
            files: r.u64("files")?,
            key_rotated_ms: r.u64("rotated")?,
            detail: get_str(r, "detail")?,
        });
    }
    Ok(ds)
}

fn put_scrub_report(w: &mut Writer, s: &ScrubReport) {
    put_str(w, &s.path);
    put_str(w, &s.geometry);
    for v in [
        s.bytes_checked,
        s.groups,
        s.damaged,
        s.repaired,
        s.rebuilt,
        s.unrecoverable,
        s.unchecked,
    ] {
        w.u64(v);
    }
    put_str(w, &s.detail);
}

fn get_scrub_report(r: &mut Reader<'_>) -> Result<ScrubReport, DecodeError> {
    Ok(ScrubReport {
        path: get_str(r, "path")?,
        geometry: get_str(r, "geometry")?,
        bytes_checked: r.u64("bytes checked")?,
        groups: r.u64("groups")?,
        damaged: r.u64("damaged")?,
        repaired: r.u64("repaired")?,
        rebuilt: r.u64("rebuilt")?,
        unrecoverable: r.u64("unrecoverable")?,
        unchecked: r.u64("unchecked")?,
        detail: get_str(r, "detail")?,
    })
}

fn put_status(w: &mut Writer, s: &ClusterStatus) {
    put_drives(w, &s.drives);
    w.u64(s.files);
    w.u64(s.degraded_files);
    debug_assert!(s.degraded.len() <= STATUS_PATHS_MAX);
    w.u32(s.degraded.len() as u32);
    for p in &s.degraded {
        put_str(w, p);
    }
    match &s.rebuild {
        None => w.u8(0),
        Some(b) => {
            w.u8(1);
            w.u64(b.old.0);
            w.u64(b.new.0);
            for v in [
                b.files_done,
                b.files_total,
                b.bytes_done,
                b.bytes_total,
                b.failed,
            ] {
                w.u64(v);
            }
            w.u8(b.finished as u8);
            put_str(w, &b.detail);
        }
    }
    let c = &s.scrub;
    for v in [
        c.passes,
        c.files,
        c.bytes,
        c.damaged,
        c.repaired,
        c.last_pass_ms,
        c.rate_bytes_per_s,
    ] {
        w.u64(v);
    }
}

fn get_status(r: &mut Reader<'_>) -> Result<ClusterStatus, DecodeError> {
    let drives = get_drives(r)?;
    let files = r.u64("files")?;
    let degraded_files = r.u64("degraded files")?;
    let n = get_count(r, 4, "degraded paths")?;
    if n > STATUS_PATHS_MAX {
        return Err(DecodeError::TooLong("degraded paths"));
    }
    let mut degraded = Vec::with_capacity(n);
    for _ in 0..n {
        degraded.push(get_str(r, "path")?);
    }
    let rebuild = match get_bool(r, "rebuild")? {
        false => None,
        true => Some(RebuildStatus {
            old: DriveId(r.u64("old drive")?),
            new: DriveId(r.u64("new drive")?),
            files_done: r.u64("files done")?,
            files_total: r.u64("files total")?,
            bytes_done: r.u64("bytes done")?,
            bytes_total: r.u64("bytes total")?,
            failed: r.u64("failed")?,
            finished: get_bool(r, "finished")?,
            detail: get_str(r, "detail")?,
        }),
    };
    let scrub = ScrubStatus {
        passes: r.u64("passes")?,
        files: r.u64("files")?,
        bytes: r.u64("bytes")?,
        damaged: r.u64("damaged")?,
        repaired: r.u64("repaired")?,
        last_pass_ms: r.u64("last pass")?,
        rate_bytes_per_s: r.u64("rate")?,
    };
    Ok(ClusterStatus {
        drives,
        files,
        degraded_files,
        degraded,
        rebuild,
        scrub,
    })
}

impl MgrReply {
    pub fn error(status: MgrStatus, detail: impl Into<String>) -> MgrReply {
        let mut detail: String = detail.into();
        if detail.len() > STRING_BYTES_MAX {
            let mut cut = STRING_BYTES_MAX;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
        }
        MgrReply::Error { status, detail }
    }

    pub fn encode(&self, request_id: u64) -> Vec<u8> {
        let mut w = Writer::with_capacity(128);
        let tag = match self {
            Self::Error { .. } => 1,
            Self::Ok => 2,
            Self::LoginOk { .. } => 3,
            Self::Stat(_) => 4,
            Self::Entries(_) => 5,
            Self::Opened { .. } => 6,
            Self::Users(_) => 7,
            Self::Drives(_) => 8,
            Self::Staged { .. } => 9,
            Self::Challenge(_) => 10,
            Self::LayoutSpec(_) => 11,
            Self::Scrubbed(_) => 12,
            Self::Status(_) => 13,
            Self::Prepared(_) => 14,
            Self::LinkTarget(_) => 15,
            Self::S3KeyMade { .. } => 16,
            Self::S3Keys(_) => 17,
            Self::S3KeyFound { .. } => 18,
            Self::Xattrs { .. } => 19,
            Self::Breaks(_) => 20,
            Self::Quotas(_) => 21,
            Self::UserKeys(_) => 22,
            Self::GroupKeys(_) => 23,
        };
        put_header(&mut w, KIND_REPLY, request_id, tag);
        match self {
            Self::Error { status, detail } => {
                w.u16(*status as u16);
                put_str(&mut w, detail);
            }
            Self::Ok => {}
            Self::LoginOk {
                uid,
                admin,
                token,
                expires_ms,
            } => {
                w.u32(*uid);
                w.u8(*admin as u8);
                w.bytes(&token.0);
                w.u64(*expires_ms);
            }
            Self::Stat(s) => put_stat(&mut w, s),
            Self::Entries(es) => {
                debug_assert!(es.len() <= LIST_ENTRIES_MAX);
                w.u32(es.len() as u32);
                for e in es {
                    put_str(&mut w, &e.name);
                    put_stat(&mut w, &e.stat);
                    match &e.xattr {
                        None => w.u8(0),
                        Some(v) => {
                            debug_assert!(v.len() <= READDIR_XATTR_BYTES_MAX);
                            w.u8(1);
                            w.blob(v);
                        }
                    }
                }
            }
            Self::Opened {
                stat,
                layout,
                caps,
                write_end,
                policy,
                e2e,
            } => put_opened(&mut w, stat, layout, caps, *write_end, policy, e2e.as_ref()),
            Self::Staged {
                stat,
                layout,
                caps,
                write_end,
                replaces,
                policy,
                e2e,
            } => {
                put_opened(&mut w, stat, layout, caps, *write_end, policy, e2e.as_ref());
                w.u8(*replaces as u8);
            }
            Self::UserKeys(us) => {
                debug_assert!(us.len() <= KEY_LIST_MAX);
                w.u32(us.len() as u32);
                for u in us {
                    w.u32(u.uid);
                    put_str(&mut w, &u.name);
                    u.keys.put(&mut w);
                }
            }
            Self::GroupKeys(gs) => {
                debug_assert!(gs.len() <= KEY_LIST_MAX);
                w.u32(gs.len() as u32);
                for g in gs {
                    w.u32(g.gid);
                    put_str(&mut w, &g.name);
                    w.u32(g.version);
                    put_public_key(&mut w, &g.public);
                    w.blob(&g.wrap);
                    debug_assert!(g.missing.len() <= KEY_LIST_MAX);
                    w.u32(g.missing.len() as u32);
                    for (uid, pk) in &g.missing {
                        w.u32(*uid);
                        w.bytes(pk);
                    }
                }
            }
            Self::Quotas(qs) => {
                debug_assert!(qs.len() <= LIST_ENTRIES_MAX);
                w.u32(qs.len() as u32);
                for q in qs {
                    put_str(&mut w, &q.user);
                    w.u32(q.uid);
                    w.u64(q.limit);
                    w.u64(q.used);
                    w.u64(q.escrowed);
                }
            }
            Self::Prepared(files) => {
                debug_assert!(files.len() <= PREPARED_FILES_MAX as usize);
                w.u32(files.len() as u32);
                for f in files {
                    put_opened(
                        &mut w,
                        &f.stat,
                        &f.layout,
                        &f.caps,
                        f.write_end,
                        &f.policy,
                        None,
                    );
                }
            }
            Self::LayoutSpec(spec) | Self::LinkTarget(spec) => put_str(&mut w, spec),
            Self::S3KeyMade {
                access_key_id: a,
                secret,
            }
            | Self::S3KeyFound { user: a, secret } => {
                put_str(&mut w, a);
                put_str(&mut w, &secret.0);
            }
            Self::Xattrs { stat, xattrs } => {
                put_stat(&mut w, stat);
                put_xattrs(&mut w, xattrs);
            }
            Self::Breaks(bs) => {
                debug_assert!(bs.len() <= BREAKS_PER_REPLY_MAX);
                w.u32(bs.len() as u32);
                for b in bs {
                    w.u64(b.seq);
                    w.u64(b.ino);
                    w.u64(b.parent);
                    put_str(&mut w, &b.name);
                }
            }
            Self::S3Keys(keys) => {
                w.u32(keys.len() as u32);
                for (id, made) in keys {
                    put_str(&mut w, id);
                    w.u64(*made);
                }
            }
            Self::Scrubbed(rep) => put_scrub_report(&mut w, rep),
            Self::Status(st) => put_status(&mut w, st),
            Self::Challenge(c) => w.bytes(c),
            Self::Users(us) => {
                w.u32(us.len() as u32);
                for u in us {
                    put_str(&mut w, &u.name);
                    w.u32(u.uid);
                    w.u8(u.admin as u8);
                    w.u32(u.groups.len() as u32);
                    for g in &u.groups {
                        put_str(&mut w, g);
                    }
                }
            }
            Self::Drives(ds) => put_drives(&mut w, ds),
        }
        w.into_vec()
    }

    pub fn decode(body: &[u8]) -> Result<(u64, MgrReply), DecodeError> {
        let mut r = Reader::new(body);
        let (id, tag) = get_header(&mut r, KIND_REPLY)?;
        let r = &mut r;
        let reply = match tag {
            1 => {
                let code = r.u16("status")?;
                Self::Error {
                    status: MgrStatus::from_u16(code).ok_or(DecodeError::BadValue("status"))?,
                    detail: get_str(r, "detail")?,
                }
            }
            2 => Self::Ok,
            3 => Self::LoginOk {
                uid: r.u32("uid")?,
                admin: get_bool(r, "admin")?,
                token: SessionToken(r.array("token")?),
                expires_ms: r.u64("expires")?,
            },
            4 => Self::Stat(get_stat(r)?),
            5 => {
                let n = get_count(r, 8 + 62, "entries")?;
                let mut es = Vec::with_capacity(n);
                for _ in 0..n {
                    es.push(DirEntry {
                        name: get_str(r, "name")?,
                        stat: get_stat(r)?,
                        xattr: match get_bool(r, "has xattr")? {
                            false => None,
                            true => Some(r.blob(READDIR_XATTR_BYTES_MAX, "entry xattr")?.to_vec()),
                        },
                    });
                }
                Self::Entries(es)
            }
            6 => {
                let g = get_opened(r)?;
                Self::Opened {
                    stat: g.stat,
                    layout: g.layout,
                    caps: g.caps,
                    write_end: g.write_end,
                    policy: g.policy,
                    e2e: g.e2e,
                }
            }
            9 => {
                let g = get_opened(r)?;
                Self::Staged {
                    stat: g.stat,
                    layout: g.layout,
                    caps: g.caps,
                    write_end: g.write_end,
                    replaces: get_bool(r, "replaces")?,
                    policy: g.policy,
                    e2e: g.e2e,
                }
            }
            22 => {
                // uid, name (4 + name), two keys, sealed (4 + bytes).
                let n = get_count(r, 4 + 4 + 64 + 4, "user keys")?;
                let mut us = Vec::with_capacity(n);
                for _ in 0..n {
                    us.push(UserKeyInfo {
                        uid: r.u32("uid")?,
                        name: get_str(r, "user")?,
                        keys: UserKeys::get(r)?,
                    });
                }
                Self::UserKeys(us)
            }
            23 => {
                let n = get_count(r, 4 + 4 + 4 + 1 + 4 + 4, "group keys")?;
                let mut gs = Vec::with_capacity(n);
                for _ in 0..n {
                    let gid = r.u32("gid")?;
                    let name = get_str(r, "group")?;
                    let version = r.u32("group key version")?;
                    let public = get_public_key(r)?;
                    let wrap = r.blob(GROUP_WRAP_BYTES_MAX, "group wrap")?.to_vec();
                    let m = r.u32("missing wraps")? as usize;
                    if m > KEY_LIST_MAX || m.saturating_mul(36) > r.remaining() {
                        return Err(DecodeError::TooLong("missing wraps"));
                    }
                    let mut missing = Vec::with_capacity(m);
                    for _ in 0..m {
                        missing.push((r.u32("uid")?, r.array("public key")?));
                    }
                    gs.push(GroupKeyInfo {
                        gid,
                        name,
                        version,
                        public,
                        wrap,
                        missing,
                    });
                }
                Self::GroupKeys(gs)
            }
            21 => {
                // user (4 + name), uid, limit, used, escrowed.
                let n = get_count(r, 4 + 4 + 3 * 8, "quotas")?;
                let mut qs = Vec::with_capacity(n);
                for _ in 0..n {
                    qs.push(QuotaInfo {
                        user: get_str(r, "user")?,
                        uid: r.u32("uid")?,
                        limit: r.u64("limit")?,
                        used: r.u64("used")?,
                        escrowed: r.u64("escrowed")?,
                    });
                }
                Self::Quotas(qs)
            }
            11 => Self::LayoutSpec(get_str(r, "layout spec")?),
            15 => Self::LinkTarget(get_str(r, "link target")?),
            16 => Self::S3KeyMade {
                access_key_id: get_str(r, "access key id")?,
                secret: SecretString(get_str(r, "secret")?),
            },
            17 => {
                let n = get_count(r, 12, "s3 keys")?;
                let mut keys = Vec::with_capacity(n);
                for _ in 0..n {
                    keys.push((get_str(r, "access key id")?, r.u64("made")?));
                }
                Self::S3Keys(keys)
            }
            18 => Self::S3KeyFound {
                user: get_str(r, "user")?,
                secret: SecretString(get_str(r, "secret")?),
            },
            19 => Self::Xattrs {
                stat: get_stat(r)?,
                xattrs: get_xattrs(r)?,
            },
            20 => {
                let n = get_count(r, 28, "breaks")?;
                if n > BREAKS_PER_REPLY_MAX {
                    return Err(DecodeError::BadValue("breaks"));
                }
                let mut bs = Vec::with_capacity(n);
                for _ in 0..n {
                    bs.push(CallbackBreak {
                        seq: r.u64("seq")?,
                        ino: r.u64("ino")?,
                        parent: r.u64("parent")?,
                        name: get_str(r, "name")?,
                    });
                }
                Self::Breaks(bs)
            }
            10 => Self::Challenge(r.array("challenge")?),
            7 => {
                let n = get_count(r, 13, "users")?;
                let mut us = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = get_str(r, "name")?;
                    let uid = r.u32("uid")?;
                    let admin = get_bool(r, "admin")?;
                    let g = get_count(r, 4, "groups")?;
                    let mut groups = Vec::with_capacity(g);
                    for _ in 0..g {
                        groups.push(get_str(r, "group")?);
                    }
                    us.push(UserInfo {
                        name,
                        uid,
                        admin,
                        groups,
                    });
                }
                Self::Users(us)
            }
            8 => Self::Drives(get_drives(r)?),
            12 => Self::Scrubbed(get_scrub_report(r)?),
            13 => Self::Status(get_status(r)?),
            14 => {
                let n = r.u32("prepared files")?;
                if n > PREPARED_FILES_MAX {
                    return Err(DecodeError::TooLong("prepared files"));
                }
                let mut files = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let g = get_opened(r)?;
                    if g.e2e.is_some() {
                        return Err(DecodeError::BadValue("a prepared file with e2e state"));
                    }
                    files.push(PreparedFile {
                        stat: g.stat,
                        layout: g.layout,
                        caps: g.caps,
                        write_end: g.write_end,
                        policy: g.policy,
                    });
                }
                Self::Prepared(files)
            }
            _ => return Err(DecodeError::BadValue("reply tag")),
        };
        r.finish("manager reply")?;
        Ok((id, reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_a_session_token() {
        let r = MgrReply::LoginOk {
            uid: 1,
            admin: false,
            token: SessionToken([0xab; TOKEN_BYTES]),
            expires_ms: 2,
        };
        let shown = format!("{r:?}");
        assert!(!shown.contains("171") && !shown.contains("ab"), "{shown}");
    }
    use crate::types::{Protection, Region, Rights};

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
        let p = || "/a/b".to_string();
        vec![
            MgrRequest::Login {
                user: "alice".into(),
                credential: Credential::Password("pw".into()),
            },
            MgrRequest::Login {
                user: "alice".into(),
                credential: Credential::Token([3; 32]),
            },
            MgrRequest::Stat { path: p() },
            MgrRequest::Readdir {
                path: p(),
                after: "b".into(),
                limit: 100,
                xattr: None,
            },
            MgrRequest::Readdir {
                path: p(),
                after: String::new(),
                limit: 1,
                xattr: Some("user.s3.etag".into()),
            },
            MgrRequest::Mkdir {
                path: p(),
                mode: 0o755,
            },
            MgrRequest::Rmdir { path: p() },
            MgrRequest::Create {
                path: p(),
                mode: 0o644,
                exclusive: true,
                extend_by: 0,
            },
            MgrRequest::Create {
                path: p(),
                mode: 0o600,
                exclusive: false,
                extend_by: 64 << 20,
            },
            MgrRequest::Open {
                path: p(),
                write: true,
                extend_by: u64::MAX,
            },
            MgrRequest::Open {
                path: p(),
                write: false,
                extend_by: 0,
            },
            MgrRequest::ReturnCapability {
                path: p(),
                audit_id: 9,
            },
            MgrRequest::Unlink { path: p() },
            MgrRequest::Rename {
                from: p(),
                to: "/c".into(),
            },
            MgrRequest::Chmod {
                path: p(),
                mode: 0o600,
            },
            MgrRequest::Chown {
                path: p(),
                owner: "bob".into(),
                group: String::new(),
            },
            MgrRequest::Truncate { path: p(), size: 5 },
            MgrRequest::Utimes {
                path: p(),
                mtime_us: 77,
            },
            MgrRequest::UserAdd {
                name: "bob".into(),
                password: "x".into(),
                admin: false,
                public_key: None,
            },
            MgrRequest::UserAdd {
                name: "carol".into(),
                password: "".into(),
                admin: true,
                public_key: Some([7; 32]),
            },
            MgrRequest::Login {
                user: "carol".into(),
                credential: Credential::Signature([8; 64]),
            },
            MgrRequest::Challenge {
                user: "carol".into(),
            },
            MgrRequest::UserPasswd {
                name: "bob".into(),
                password: "y".into(),
                public_key: None,
            },
            MgrRequest::UserPasswd {
                name: "carol".into(),
                password: "".into(),
                public_key: Some([9; 32]),
            },
            MgrRequest::Logout,
            MgrRequest::WaitBreaks {
                acked: 7,
                wait_ms: 20_000,
            },
            MgrRequest::UserList,
            MgrRequest::GroupAdd {
                name: "staff".into(),
            },
            MgrRequest::GroupMember {
                group: "staff".into(),
                user: "bob".into(),
            },
            MgrRequest::DriveAdd {
                addr: "127.0.0.1:1".into(),
                drive_key_file: "kind = drive".into(),
                master_key_file: "kind = master".into(),
            },
            MgrRequest::DriveList,
            MgrRequest::Commit {
                path: p(),
                drive: DriveId(3),
                object: ObjectId(17),
                size: 12345,
                stale: 0b100010,
                xattrs: None,
                e2e: None,
            },
            MgrRequest::Commit {
                path: p(),
                drive: DriveId(3),
                object: ObjectId(17),
                size: 12345,
                stale: 0,
                xattrs: None,
                e2e: Some(sample_e2e_commit()),
            },
            MgrRequest::E2eUpdate {
                path: p(),
                update: sample_e2e_commit(),
            },
            MgrRequest::UserKeySet {
                user: "alice".into(),
                keys: UserKeys {
                    enc_public: [1; 32],
                    sign_public: [2; 32],
                    sealed: vec![3; 90],
                },
            },
            MgrRequest::UserKeyGet {
                uids: vec![],
                names: vec![],
            },
            MgrRequest::UserKeyGet {
                uids: vec![0, 1000, u32::MAX],
                names: vec!["bob".into()],
            },
            MgrRequest::GroupKeySet {
                group: "staff".into(),
                version: 3,
                public: [9; 32],
                wraps: vec![(1000, vec![7; 93]), (1001, vec![])],
            },
            MgrRequest::GroupKeyGet {
                gids: vec![100],
                names: vec!["users".into(), "admin".into()],
            },
            MgrRequest::Commit {
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
            },
            MgrRequest::Getxattrs { path: p() },
            MgrRequest::Setxattr {
                path: p(),
                name: "user.a".into(),
                value: Some(vec![0, 1, 255]),
            },
            MgrRequest::Setxattr {
                path: p(),
                name: "user.a".into(),
                value: None,
            },
            MgrRequest::Abort {
                path: p(),
                drive: DriveId(3),
                object: ObjectId(18),
            },
            MgrRequest::Renew {
                path: p(),
                drive: DriveId(3),
                object: ObjectId(19),
                extend_by: 1 << 20,
            },
            MgrRequest::Prepare {
                dir: p(),
                mode: 0o640,
                count: 16,
                extend_by: 1 << 20,
            },
            MgrRequest::QuotaSet {
                user: "bob".into(),
                limit: Some(10 << 30),
            },
            MgrRequest::QuotaSet {
                user: "bob".into(),
                limit: None,
            },
            MgrRequest::QuotaGet { user: "bob".into() },
            MgrRequest::QuotaGet {
                user: String::new(),
            },
            MgrRequest::Symlink {
                path: p(),
                target: "../x y/z".into(),
            },
            MgrRequest::Readlink { path: p() },
            MgrRequest::Lstat { path: p() },
            MgrRequest::ActFor { user: "bob".into() },
            MgrRequest::S3KeyCreate { user: "bob".into() },
            MgrRequest::S3KeyList { user: "bob".into() },
            MgrRequest::S3KeyRevoke {
                user: "bob".into(),
                access_key_id: "NASDAAAABBBBCCCCDDDD".into(),
            },
            MgrRequest::S3KeySecret {
                access_key_id: "NASDAAAABBBBCCCCDDDD".into(),
            },
            MgrRequest::UserGateway {
                name: "s3gw".into(),
                on: true,
            },
            MgrRequest::Link {
                existing: p(),
                new: "/b".into(),
            },
            MgrRequest::LayoutGet { path: p() },
            MgrRequest::LayoutSet {
                path: p(),
                spec: "rs:4+2".into(),
            },
            MgrRequest::StageWrite {
                path: p(),
                extend_by: 7,
            },
            MgrRequest::Repair {
                path: p(),
                component: 5,
                offset: 1 << 20,
                len: 65536,
            },
            MgrRequest::Scrub {
                path: p(),
                repair: true,
            },
            MgrRequest::Status,
            MgrRequest::DriveReplace {
                old: DriveId(3),
                new: DriveId(9),
            },
        ]
    }

    #[test]
    fn a_prepared_reply_past_its_limit_is_refused() {
        let MgrReply::Opened {
            stat, layout, caps, ..
        } = base_replies()[5].clone()
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
        if let MgrReply::Opened {
            stat, layout, caps, ..
        } = v[5].clone()
        {
            for (replaces, write_end) in [(false, 1 << 20), (true, WRITE_END_UNBOUNDED)] {
                v.push(MgrReply::Staged {
                    stat: stat.clone(),
                    layout: layout.clone(),
                    caps: caps.clone(),
                    write_end,
                    replaces,
                    policy: E2ePolicy {
                        readers: vec![Principal::User(3), Principal::Group(4)],
                        ..E2ePolicy::default()
                    },
                    e2e: replaces.then(|| sample_e2e_commit().state),
                });
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
        v.push(MgrReply::Challenge([6; 32]));
        v.push(MgrReply::UserKeys(vec![]));
        v.push(MgrReply::UserKeys(vec![UserKeyInfo {
            uid: 1000,
            name: "alice".into(),
            keys: UserKeys {
                enc_public: [1; 32],
                sign_public: [2; 32],
                sealed: vec![],
            },
        }]));
        v.push(MgrReply::GroupKeys(vec![
            GroupKeyInfo {
                gid: 100,
                name: "staff".into(),
                version: 0,
                public: None,
                wrap: vec![],
                missing: vec![],
            },
            GroupKeyInfo {
                gid: 101,
                name: "ops".into(),
                version: 2,
                public: Some([8; 32]),
                wrap: vec![1; 93],
                missing: vec![(1002, [3; 32])],
            },
        ]));
        v.push(MgrReply::Quotas(vec![]));
        v.push(MgrReply::Quotas(vec![
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
        ]));
        v.push(MgrReply::error(
            MgrStatus::QuotaExceeded,
            "/a: alice: limit 1 used 1 escrowed 0",
        ));
        v.push(MgrReply::LinkTarget("/abs/target".into()));
        v.push(MgrReply::Breaks(vec![
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
        ]));
        v.push(MgrReply::Xattrs {
            stat: stat(),
            xattrs: vec![Xattr {
                name: "user.s3.content-type".into(),
                value: b"text/plain".to_vec(),
            }],
        });
        v.push(MgrReply::S3KeyMade {
            access_key_id: "NASDAAAABBBBCCCCDDDD".into(),
            secret: SecretString("s".repeat(40)),
        });
        v.push(MgrReply::S3Keys(vec![]));
        v.push(MgrReply::S3Keys(vec![
            ("NASDA".into(), 1),
            ("NASDB".into(), 2),
        ]));
        v.push(MgrReply::S3KeyFound {
            user: "bob".into(),
            secret: SecretString("t".repeat(40)),
        });
        v
    }

    fn base_replies() -> Vec<MgrReply> {
        vec![
            MgrReply::error(MgrStatus::NoSuchPath, "/x"),
            MgrReply::Ok,
            MgrReply::LoginOk {
                uid: 1,
                admin: true,
                token: SessionToken([9; 32]),
                expires_ms: 5,
            },
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
            MgrReply::Opened {
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
            },
            MgrReply::LayoutSpec("raid6x:8/256K".into()),
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
            }]),
        ]
    }

    /// The version 10 fields byte by byte, as docs/manager.md describes them: `extend_by`
    /// ends an `Open`, `write_end` follows the capabilities, `QuotaExceeded` is status 25.
    #[test]
    fn version_10_fields_are_where_the_docs_say() {
        let open = MgrRequest::Open {
            path: "/f".into(),
            write: true,
            extend_by: 0x0102_0304_0506_0708,
        }
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
        let MgrReply::Opened { write_end, .. } = &base_replies()[5] else {
            panic!("reply 5 is Opened");
        };
        let b = base_replies()[5].encode(1);
        // write_end, then (version 12) the 6-byte default policy and `has_e2e` 0.
        assert_eq!(b[b.len() - 15..b.len() - 7], write_end.to_le_bytes());
        assert_eq!(b[b.len() - 7..], [1, 0, 2, 16, 0, 0, 0]);
        let e = MgrReply::error(MgrStatus::QuotaExceeded, "").encode(1);
        assert_eq!(e[16..18], 25u16.to_le_bytes());
        let q = MgrRequest::QuotaSet {
            user: "u".into(),
            limit: Some(9),
        }
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
        let mut b = MgrRequest::UserList.encode(1);
        b[4] = 99;
        assert_eq!(MgrRequest::decode(&b), Err(DecodeError::Version(99)));
        let mut b = MgrRequest::Stat { path: "ab".into() }.encode(1);
        let n = b.len();
        b[n - 1] = 0xff;
        assert!(MgrRequest::decode(&b).is_err());
    }

    #[test]
    fn secrets_are_not_debug_printed() {
        let c = Credential::Password("hunter2".into());
        assert!(!format!("{c:?}").contains("hunter2"));
        let add = MgrRequest::UserAdd {
            name: "u".into(),
            password: "hunter2".into(),
            admin: false,
            public_key: None,
        };
        let passwd = MgrRequest::UserPasswd {
            name: "u".into(),
            password: "hunter2".into(),
            public_key: None,
        };
        let login = MgrRequest::Login {
            user: "u".into(),
            credential: Credential::Token([0x5a; TOKEN_BYTES]),
        };
        for r in [&add, &passwd, &login] {
            let d = format!("{r:?}");
            assert!(!d.contains("hunter2") && !d.contains("90, 90"), "{d}");
        }
        let ok = MgrReply::LoginOk {
            token: SessionToken([0x5a; TOKEN_BYTES]),
            expires_ms: 0,
            uid: 1,
            admin: false,
        };
        assert!(!format!("{ok:?}").contains("90, 90"));
    }

    proptest::proptest! {
        #[test]
        fn decoders_are_total(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = MgrRequest::decode(&bytes);
            let _ = MgrReply::decode(&bytes);
        }
    }
}
