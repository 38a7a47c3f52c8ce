//! The namespace calls: stats, directory pages, directories, names (unlink, rename, symbolic
//! and hard links), a file's mode, owners, size and times, and the layout a directory gives
//! new files.
//! ```text
//! Readdir   := string path, string after, u32 limit, option string xattr
//! Entries   := u32 n, n x (string name, FileStat, option blob xattr)
//! Rename    := string from, string to, u8 flags (0 | NOREPLACE 1 | EXCHANGE 2)
//! Chown     := string path, string owner, string group, bool nofollow
//! Utimes    := string path, option u64 atime_us, option u64 mtime_us, u8 flags
//!              (NOFOLLOW 1 | ACCESSED 2)
//! Mknod     := string path, u8 kind (4 fifo, 5 socket, 6 char, 7 block), u32 mode, u64 rdev
//! Statfs    := string path;  FsSpace := u64 total, u64 free, option (u64 limit, u64 used),
//!              u64 files
//! ```

use super::{one_string, path_and_mode, path_and_u64, two_strings};
use crate::codec::{Reader, Writer};
use crate::e2e::{get_principals, put_principals, Principal};
use crate::manager::codec::{
    get_bool, get_count, get_opt, get_str, get_xattr_name, put_bool, put_opt, put_str,
};
use crate::manager::{FileKind, FileStat, Wire, LIST_ENTRIES_MAX, READDIR_XATTR_BYTES_MAX};
use crate::DecodeError;

one_string! {
    /// A file's stat, symbolic links followed (answered with [`FileStat`]).
    Stat { path: "path" }
}

one_string! {
    /// Like `Stat`, of the last name itself: a symbolic link is not followed (POSIX lstat).
    Lstat { path: "path" }
}

/// A page of a directory: the entries named after `after` in byte order (from the first
/// when `after` is empty), at most `limit` and at most
/// [`READDIR_PAGE_ENTRIES_MAX`](crate::manager::READDIR_PAGE_ENTRIES_MAX). A page shorter
/// than asked for is the last.
///
/// With `xattr`, each entry carries the value of that extended attribute of its file,
/// when the caller may read the file and the value is at most [`READDIR_XATTR_BYTES_MAX`]
/// (a listing of S3 objects carries their ETags in one round trip).
///
/// A caller who may read the directory but not search it gets each entry's name, inode
/// number and kind only, every other field zero (protocol 18; as Linux lists such a
/// directory).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Readdir {
    pub path: String,
    pub after: String,
    pub limit: u32,
    pub xattr: Option<String>,
}

impl Wire for Readdir {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        put_str(w, &self.after);
        w.u32(self.limit);
        put_opt(w, &self.xattr, |w, x| put_str(w, x));
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Readdir {
            path: get_str(r, "path")?,
            after: get_str(r, "after")?,
            limit: r.u32("limit")?,
            xattr: get_opt(r, "has xattr", get_xattr_name)?,
        })
    }
}

/// One entry of a directory page.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DirEntry {
    pub name: String,
    pub stat: FileStat,
    /// The extended attribute a `Readdir` asked for, if the file has it.
    pub xattr: Option<Vec<u8>>,
}

impl Wire for Vec<DirEntry> {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.len() <= LIST_ENTRIES_MAX);
        w.u32(self.len() as u32);
        for e in self {
            put_str(w, &e.name);
            e.stat.put(w);
            put_opt(w, &e.xattr, |w, v| {
                debug_assert!(v.len() <= READDIR_XATTR_BYTES_MAX);
                w.blob(v);
            });
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // Each entry: its name's length, a stat, the xattr option (names may be short).
        let n = get_count(r, 4 + FileStat::ENCODED_BYTES_MIN + 1, "entries")?;
        let mut es = Vec::with_capacity(n);
        for _ in 0..n {
            es.push(DirEntry {
                name: get_str(r, "name")?,
                stat: FileStat::get(r)?,
                xattr: get_opt(r, "has xattr", |r| {
                    Ok(r.blob(READDIR_XATTR_BYTES_MAX, "entry xattr")?.to_vec())
                })?,
            });
        }
        Ok(es)
    }
}

path_and_mode! {
    /// Makes directory `path` with mode `mode`.
    Mkdir
}

one_string! {
    /// Removes the empty directory `path`.
    Rmdir { path: "path" }
}

one_string! {
    /// Removes the name `path` (the file goes with its last name).
    Unlink { path: "path" }
}

/// [`Rename::flags`]: fail with `Exists` rather than replace what `to` names
/// (`RENAME_NOREPLACE`).
pub const RENAME_NOREPLACE: u8 = 1;
/// [`Rename::flags`]: swap `from` and `to`, both of which must exist (`RENAME_EXCHANGE`).
pub const RENAME_EXCHANGE: u8 = 2;

/// Renames `from` to `to`, replacing what `to` names unless `flags` say otherwise.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Rename {
    pub from: String,
    pub to: String,
    /// 0, [`RENAME_NOREPLACE`] or [`RENAME_EXCHANGE`].
    pub flags: u8,
}

impl Wire for Rename {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.from);
        put_str(w, &self.to);
        w.u8(self.flags);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let (from, to) = (get_str(r, "from")?, get_str(r, "to")?);
        let flags = r.u8("rename flags")?;
        if !matches!(flags, 0 | RENAME_NOREPLACE | RENAME_EXCHANGE) {
            return Err(DecodeError::BadValue("rename flags"));
        }
        Ok(Rename { from, to, flags })
    }
}

/// Makes `path` a special file of `kind` (a FIFO, socket or device: no content of its own)
/// with permission bits `mode`; `rdev` is a device's number, else 0. Devices are an admin's to
/// make (as `CAP_MKNOD`'s).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Mknod {
    pub path: String,
    pub kind: FileKind,
    pub mode: u32,
    pub rdev: u64,
}

impl Wire for Mknod {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u8(self.kind as u8);
        w.u32(self.mode);
        w.u64(self.rdev);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let path = get_str(r, "path")?;
        let kind = FileKind::from_u8(r.u8("kind")?)?;
        if !kind.special() {
            return Err(DecodeError::BadValue("special file kind"));
        }
        Ok(Mknod {
            path,
            kind,
            mode: r.u32("mode")?,
            rdev: r.u64("rdev")?,
        })
    }
}

one_string! {
    /// The capacity of the cluster as `path`'s caller sees it, answered with [`FsSpace`].
    Statfs { path: "path" }
}

/// What `statfs` shows ([`Statfs`]): the drives' bytes, and the caller's quota where one
/// bounds them (the smaller room wins, as a quota'd NFS export shows it).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FsSpace {
    /// Bytes the drives hold in all, and have free now (logical bytes after the layout's
    /// redundancy is paid for are the client's to estimate).
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// The caller's quota and what it uses, when one is set.
    pub quota: Option<(u64, u64)>,
    /// Files (inodes) in the namespace.
    pub files: u64,
}

impl Wire for FsSpace {
    fn put(&self, w: &mut Writer) {
        w.u64(self.total_bytes);
        w.u64(self.free_bytes);
        put_opt(w, &self.quota, |w, (limit, used)| {
            w.u64(*limit);
            w.u64(*used);
        });
        w.u64(self.files);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(FsSpace {
            total_bytes: r.u64("total bytes")?,
            free_bytes: r.u64("free bytes")?,
            quota: get_opt(r, "has quota", |r| Ok((r.u64("limit")?, r.u64("used")?)))?,
            files: r.u64("files")?,
        })
    }
}

two_strings! {
    /// Makes `path` a symbolic link holding `target` (stored as given, up to
    /// [`LINK_TARGET_BYTES_MAX`](crate::manager::LINK_TARGET_BYTES_MAX); a relative target resolves from the
    /// link's directory).
    Symlink { path: "path", target: "target" }
}

one_string! {
    /// The target of the symbolic link `path` (the last name is not followed), answered with
    /// [`LinkTarget`].
    Readlink { path: "path" }
}

/// The target of a symbolic link ([`Readlink`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LinkTarget(pub String);

impl Wire for LinkTarget {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.0);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(LinkTarget(get_str(r, "link target")?))
    }
}

two_strings! {
    /// Gives the file `existing` (not a directory; a symbolic link itself, not followed) the
    /// further name `new`.
    Link { existing: "existing", new: "new" }
}

path_and_mode! {
    /// Sets the permission bits of `path`.
    Chmod
}

/// Empty strings leave owner or group unchanged; a decimal number names a uid or gid
/// (names never start with a digit), as GNU chown reads one.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Chown {
    pub path: String,
    pub owner: String,
    pub group: String,
    /// Change a symbolic link itself, not what it names (`lchown`, `chown -h`).
    pub nofollow: bool,
}

impl Wire for Chown {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        put_str(w, &self.owner);
        put_str(w, &self.group);
        put_bool(w, self.nofollow);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Chown {
            path: get_str(r, "path")?,
            owner: get_str(r, "owner")?,
            group: get_str(r, "group")?,
            nofollow: get_bool(r, "nofollow")?,
        })
    }
}

path_and_u64! {
    /// Sets the size of `path`.
    Truncate { size: "size" }
}

/// [`Utimes::flags`]: set a symbolic link's own times (`AT_SYMLINK_NOFOLLOW`, `touch -h`).
pub const UTIMES_NOFOLLOW: u8 = 1;
/// [`Utimes::flags`]: a read moved the access time (a mount's `relatime`): the change time
/// stays, as a kernel's atime update leaves it.
pub const UTIMES_ACCESSED: u8 = 2;

/// Sets the access and modify times of `path`, in µs since the epoch (`None` leaves one as
/// it is, as `UTIME_OMIT`); the inode's change time becomes now unless [`UTIMES_ACCESSED`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Utimes {
    pub path: String,
    pub atime_us: Option<u64>,
    pub mtime_us: Option<u64>,
    /// [`UTIMES_NOFOLLOW`] | [`UTIMES_ACCESSED`].
    pub flags: u8,
}

impl Wire for Utimes {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        put_opt(w, &self.atime_us, |w, t| w.u64(*t));
        put_opt(w, &self.mtime_us, |w, t| w.u64(*t));
        w.u8(self.flags);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let u = Utimes {
            path: get_str(r, "path")?,
            atime_us: get_opt(r, "has atime", |r| r.u64("atime"))?,
            mtime_us: get_opt(r, "has mtime", |r| r.u64("mtime"))?,
            flags: r.u8("utimes flags")?,
        };
        if u.flags & !(UTIMES_NOFOLLOW | UTIMES_ACCESSED) != 0 {
            return Err(DecodeError::BadValue("utimes flags"));
        }
        Ok(u)
    }
}

one_string! {
    /// The layout spec a directory gives new files (inherited from its parent when it has
    /// none of its own), answered with [`LayoutSpec`].
    LayoutGet { path: "path" }
}

/// The layout spec new files in a directory get ([`LayoutGet`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LayoutSpec(pub String);

impl Wire for LayoutSpec {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.0);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(LayoutSpec(get_str(r, "layout spec")?))
    }
}

two_strings! {
    /// Sets the layout spec of a directory (`""` forgets it: the parent's applies again); its
    /// owner or an admin. Files made afterwards under it get that layout. Answered with the
    /// further readers the directory's policy names now ([`DirReaders`]).
    LayoutSet { path: "path", spec: "layout spec" }
}

/// The further readers a directory's policy names ([`LayoutSet`]'s answer), sorted and
/// distinct, which the setter's client signs into the key log
/// ([`super::keylog::PolicyLog`]) unless the log names them for it already.
/// ```text
/// DirReaders := u8 n (<= POLICY_READERS_MAX), n x Principal
/// ```
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct DirReaders(pub Vec<Principal>);

impl Wire for DirReaders {
    fn put(&self, w: &mut Writer) {
        put_principals(w, &self.0);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(DirReaders(get_principals(r, "policy readers")?))
    }
}
