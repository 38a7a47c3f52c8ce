//! The types several manager calls carry: a file's stat, its layout (seed 002 §3.3's stripe
//! map) and the grant of capabilities over it, extended attributes, and secrets that never
//! show in `Debug`. Their encodings are in `codec.rs`.

use super::{
    E2ePolicy, E2eState, TOKEN_BYTES, XATTRS_BYTES_MAX, XATTRS_PER_FILE_MAX, XATTR_NAME_BYTES_MAX,
};
use crate::capability::CapabilityArgs;
use crate::types::{DriveId, ObjectId, PartitionId, Suite};
use crate::DecodeError;
use std::fmt;

/// What a name is: a file, a directory, a symbolic link, or a special file that only names
/// itself (its behaviour is the kernel's where it is opened: a FIFO, a socket, a device).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum FileKind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    Fifo = 4,
    Socket = 5,
    CharDevice = 6,
    BlockDevice = 7,
}

impl FileKind {
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        match v {
            1 => Ok(Self::File),
            2 => Ok(Self::Dir),
            3 => Ok(Self::Symlink),
            4 => Ok(Self::Fifo),
            5 => Ok(Self::Socket),
            6 => Ok(Self::CharDevice),
            7 => Ok(Self::BlockDevice),
            _ => Err(DecodeError::BadValue("file kind")),
        }
    }

    /// FIFOs, sockets and devices: entries with no content of their own.
    pub fn special(self) -> bool {
        matches!(
            self,
            Self::Fifo | Self::Socket | Self::CharDevice | Self::BlockDevice
        )
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
    /// When the inode last changed: its content, mode, owners, names or attributes.
    pub ctime_us: u64,
    /// Names of the file (hard links); a directory's is 2 plus its subdirectories.
    pub nlink: u32,
    /// Last access, as `utimes` set it (reads through a mount move it, `relatime`).
    pub atime_us: u64,
    /// A device's number (`makedev` of major and minor); 0 for everything else.
    pub rdev: u64,
}

impl FileStat {
    /// Bytes of an encoded stat with empty owner and group: ino, kind, mode, uid, gid, the two
    /// string lengths, size, mtime, ctime, nlink, atime, rdev.
    pub const ENCODED_BYTES_MIN: usize = 8 + 1 + 3 * 4 + 2 * 4 + 3 * 8 + 4 + 2 * 8;
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

/// A file opened (the `Opened` reply to `Open` and to an exclusive `Create`): its stat, its
/// layout and one capability per component (`caps[i]` for `layout.components[i]`), how far
/// writes under them may go (`write_end`: [`super::WRITE_END_UNBOUNDED`] for read
/// capabilities and when no quota bounds them), what a writer of the file follows (its
/// directory's policy) and the file's end-to-end state, if it has one.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Grant {
    pub stat: FileStat,
    pub layout: Layout,
    pub caps: Vec<CapGrant>,
    pub write_end: u64,
    pub policy: E2ePolicy,
    pub e2e: Option<E2eState>,
}

/// A staged object not yet visible under `grant.stat`'s path (the `Staged` reply to `Create`,
/// `Renew` and `StageWrite`): the layout and capabilities are the new object's; the stat is
/// the existing file's when the upload `replaces` one, else the new file's as it will be
/// linked; the end-to-end state is that of the file the upload replaces or changes, if any.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StagedGrant {
    pub grant: Grant,
    pub replaces: bool,
}

/// One new file staged by `Prepare`, as `Staged` describes an upload.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PreparedFile {
    pub stat: FileStat,
    pub layout: Layout,
    /// `caps[i]` is the write capability for `layout.components[i]`.
    pub caps: Vec<CapGrant>,
    /// Writes may go up to this logical offset (exclusive); [`super::WRITE_END_UNBOUNDED`]
    /// when no quota bounds them.
    pub write_end: u64,
    /// What the file's writer follows (the directory's policy).
    pub policy: E2ePolicy,
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

/// A session token as a `LoginOk` carries it: whoever holds it is the user until it expires,
/// so `Debug` (an "unexpected reply" message, a log line) never prints it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SessionToken(pub [u8; TOKEN_BYTES]);

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(..)")
    }
}
