//! The namespace calls: stats, directory pages, directories, names (unlink, rename, symbolic
//! and hard links), a file's mode, owners, size and times, and the layout a directory gives
//! new files.
//! ```text
//! Readdir   := string path, string after, u32 limit, option string xattr
//! Entries   := u32 n, n x (string name, FileStat, option blob xattr)
//! ```

use super::{one_string, path_and_mode, path_and_u64, two_strings};
use crate::codec::{Reader, Writer};
use crate::manager::codec::{get_count, get_opt, get_str, get_xattr_name, put_opt, put_str};
use crate::manager::{FileStat, Wire, LIST_ENTRIES_MAX, READDIR_XATTR_BYTES_MAX};
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
        let n = get_count(r, 8 + 62, "entries")?;
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

two_strings! {
    /// Renames `from` to `to`, replacing what `to` names.
    Rename { from: "from", to: "to" }
}

two_strings! {
    /// Makes `path` a symbolic link holding `target` (stored as given, up to
    /// [`PATH_BYTES_MAX`](crate::manager::PATH_BYTES_MAX); a relative target resolves from the
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
}

impl Wire for Chown {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        put_str(w, &self.owner);
        put_str(w, &self.group);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Chown {
            path: get_str(r, "path")?,
            owner: get_str(r, "owner")?,
            group: get_str(r, "group")?,
        })
    }
}

path_and_u64! {
    /// Sets the size of `path`.
    Truncate { size: "size" }
}

path_and_u64! {
    /// Sets the modify time of `path`, in µs since the epoch.
    Utimes { mtime_us: "mtime" }
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
    /// owner or an admin. Files made afterwards under it get that layout.
    LayoutSet { path: "path", spec: "layout spec" }
}
