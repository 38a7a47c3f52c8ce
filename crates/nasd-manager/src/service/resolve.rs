//! Paths: names checked (no traversal, no control characters in new names), and resolved to
//! inodes through symbolic links with search permission checked on the way.

use super::perms::{may, W, X};
use super::{denied, store_err, Caller, Manager};
use crate::store::*;
use crate::{MgrError, MgrResult};
use nasd_proto::manager::*;

/// Splits an absolute path into checked names: no `..` (path traversal), no empty or
/// over-long names, no NUL. `.` and repeated slashes are ignored.
pub fn split_path(path: &str) -> MgrResult<Vec<&str>> {
    if path.len() > PATH_BYTES_MAX {
        return Err(MgrError::new(
            MgrStatus::NameTooLong,
            format!("path of {} bytes", path.len()),
        ));
    }
    if !path.starts_with('/') {
        return Err(MgrError::new(
            MgrStatus::BadName,
            format!("{path}: paths must be absolute"),
        ));
    }
    let mut v = vec![];
    for name in path.split('/') {
        match name {
            "" | "." => continue,
            ".." => {
                return Err(MgrError::new(
                    MgrStatus::BadName,
                    format!("{path}: `..` is not allowed (path traversal)"),
                ))
            }
            n => {
                check_name(n).map_err(|e| e.at(path))?;
                v.push(n);
            }
        }
    }
    Ok(v)
}

/// A name that is about to be created: [`check_name`], and no control character — C0
/// (U+0000..U+001F: newline, CR, ESC, ...), DEL (U+007F) or C1 (U+0080..U+009F), which is
/// exactly Unicode's `Cc` category, `char::is_control`. The detail shows the name escaped.
pub fn check_new_name(path: &str, n: &str) -> MgrResult<()> {
    check_name(n)?;
    match n.chars().find(|ch| ch.is_control()) {
        None => Ok(()),
        Some(ch) => Err(MgrError::new(
            MgrStatus::BadName,
            format!(
                "\"{}\": a name may not contain a control character (U+{:04X})",
                path.escape_debug(),
                ch as u32
            ),
        )),
    }
}

/// A name of an existing file or directory, as lookups accept it (also names stored before
/// [`check_new_name`]'s rule).
pub fn check_name(n: &str) -> MgrResult<()> {
    if n.len() > NAME_BYTES_MAX {
        return Err(MgrError::new(
            MgrStatus::NameTooLong,
            format!("name of {} bytes (at most {NAME_BYTES_MAX})", n.len()),
        ));
    }
    if n.is_empty() || n == "." || n == ".." || n.contains('/') || n.contains('\0') {
        return Err(MgrError::new(
            MgrStatus::BadName,
            format!("invalid name {n:?}"),
        ));
    }
    Ok(())
}

impl Manager {
    /// Resolves `path`, checking search (x) permission on every directory on the way and
    /// following symbolic links, the last name's too (POSIX path resolution): a relative
    /// target continues from the link's directory, an absolute one from the root, `..` in a
    /// target goes up (the root's parent is the root). At most [`SYMLINK_HOPS_MAX`] links.
    pub(crate) fn resolve(&self, c: &Caller, path: &str) -> MgrResult<Inode> {
        let names = split_path(path)?;
        let st = self.st();
        let root = st
            .inode(ROOT_INO)
            .map_err(|e| store_err(e, "/"))?
            .ok_or_else(|| MgrError::new(MgrStatus::Internal, "no root directory"))?;
        let mut cur = root.clone();
        // Names still to walk, the next one last.
        let mut pending: Vec<std::borrow::Cow<'_, str>> =
            names.into_iter().rev().map(Into::into).collect();
        let mut hops = 0;
        while let Some(n) = pending.pop() {
            if cur.kind != FileKind::Dir {
                return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
            }
            if !may(c, &cur, X) {
                return Err(denied(path, "search permission on a directory on the path"));
            }
            let next = if n == ".." {
                // Only a link target holds `..` (split_path refuses it in a request).
                cur.parent
            } else {
                st.lookup(cur.ino, &n)
                    .map_err(|e| store_err(e, path))?
                    .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?
            };
            let next = st
                .inode(next)
                .map_err(|e| store_err(e, path))?
                .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))?;
            if next.kind != FileKind::Symlink {
                cur = next;
                continue;
            }
            let target = next.target.unwrap_or_default();
            hops += 1;
            if hops > SYMLINK_HOPS_MAX {
                return Err(MgrError::new(MgrStatus::TooManyLinks, path.to_string()));
            }
            if target.starts_with('/') {
                cur = root.clone();
            }
            pending.extend(
                target
                    .split('/')
                    .rev()
                    .filter(|p| !p.is_empty() && *p != ".")
                    .map(|p| std::borrow::Cow::Owned(p.to_string())),
            );
        }
        Ok(cur)
    }

    /// The parent directory of `path` (with write and search permission checked when
    /// `modify`) and the last name.
    /// The inode `path` names; with `nofollow` its last name is not followed (a symbolic link
    /// itself, as `lstat` sees it: `lchown`, `utimensat(AT_SYMLINK_NOFOLLOW)`).
    pub(crate) fn resolve_at(&self, c: &Caller, path: &str, nofollow: bool) -> MgrResult<Inode> {
        if !nofollow || split_path(path)?.is_empty() {
            return self.resolve(c, path);
        }
        let (dir, name) = self.parent(c, path, false)?;
        self.entry(&dir, name, path)?
            .ok_or_else(|| MgrError::new(MgrStatus::NoSuchPath, path.to_string()))
    }

    pub(crate) fn parent<'p>(
        &self,
        c: &Caller,
        path: &'p str,
        modify: bool,
    ) -> MgrResult<(Inode, &'p str)> {
        let names = split_path(path)?;
        let Some((last, _)) = names.split_last() else {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: the root has no parent"),
            ));
        };
        let last = *last;
        let cut = path.trim_end_matches('/').len() - last.len();
        let dir = self.resolve(c, &path[..cut.max(1)])?;
        if dir.kind != FileKind::Dir {
            return Err(MgrError::new(MgrStatus::NotADirectory, path.to_string()));
        }
        if modify && !may(c, &dir, W | X) {
            return Err(denied(path, "write permission on the parent directory"));
        }
        // A name about to be made must be clean; an existing one (from before the rule) may
        // still be changed or removed. The lookup runs only for names that fail the rule.
        if modify && check_new_name(path, last).is_err() {
            let exists = self
                .st()
                .lookup(dir.ino, last)
                .map_err(|e| store_err(e, path))?
                .is_some();
            if !exists {
                check_new_name(path, last)?;
            }
        }
        Ok((dir, last))
    }

    /// The inode `dir`/`name` names now, if any.
    pub(super) fn entry(&self, dir: &Inode, name: &str, path: &str) -> MgrResult<Option<Inode>> {
        let st = self.st();
        match st.lookup(dir.ino, name).map_err(|e| store_err(e, path))? {
            Some(ino) => st.inode(ino).map_err(|e| store_err(e, path)),
            None => Ok(None),
        }
    }
}
