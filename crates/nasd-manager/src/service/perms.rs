//! Permission checks: POSIX-like modes for user, group and other (admins pass every check),
//! and the sticky bit of a directory.

use super::denied;
use super::Caller;
use crate::store::Inode;
use crate::MgrResult;

/// Permission bits: read, write, search/execute.
pub(super) const R: u32 = 4;
pub(super) const W: u32 = 2;
pub(super) const X: u32 = 1;
/// The sticky bit of a directory's mode (S_ISVTX).
pub const STICKY: u32 = 0o1000;

/// Whether `c` may remove or rename `entry` out of `dir`, as far as the sticky bit goes (write
/// permission on `dir` is checked apart).
pub fn sticky_allows(c: &Caller, dir: &Inode, entry: &Inode) -> bool {
    dir.mode & STICKY == 0 || c.admin || c.uid == entry.uid || c.uid == dir.uid
}

pub(super) fn check_sticky(c: &Caller, dir: &Inode, entry: &Inode, path: &str) -> MgrResult<()> {
    if sticky_allows(c, dir, entry) {
        return Ok(());
    }
    Err(denied(
        path,
        "the directory is sticky: only the entry's owner, the directory's owner or an admin \
         may remove, rename or replace it",
    ))
}

/// Whether `c` has all of `want` (r=4, w=2, x=1) on `i`. Admins pass every check.
pub fn may(c: &Caller, i: &Inode, want: u32) -> bool {
    if c.admin {
        return true;
    }
    let bits = if i.uid == c.uid {
        (i.mode >> 6) & 7
    } else if c.groups.contains(&i.gid) {
        (i.mode >> 3) & 7
    } else {
        i.mode & 7
    };
    bits & want == want
}
