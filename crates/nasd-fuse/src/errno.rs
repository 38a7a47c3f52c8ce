//! What a failed client call means to a program: the errno for each manager status and drive
//! failure, and the small helpers that answer the kernel with one.

use fuser::{Errno, ReplyEmpty, ReplyXattr};
use nasd_client::files::FsError;
use nasd_proto::manager::MgrStatus;
use std::ffi::OsStr;

/// The errno a failed client call means to a program (noted as the failure of the request
/// being served, for `--metrics`: [`crate::metered`]).
pub fn errno_of(e: &FsError) -> Errno {
    let n = errno_for(e);
    crate::metered::note_failure(n);
    n
}

fn errno_for(e: &FsError) -> Errno {
    let Some(s) = e.status() else {
        return match e.drive_status() {
            Some(nasd_proto::Status::DiskFull) => Errno::ENOSPC,
            _ => Errno::EIO,
        };
    };
    match s {
        MgrStatus::NoSuchPath => Errno::ENOENT,
        MgrStatus::Exists => Errno::EEXIST,
        MgrStatus::NotEmpty => Errno::ENOTEMPTY,
        MgrStatus::NotADirectory => Errno::ENOTDIR,
        MgrStatus::IsADirectory => Errno::EISDIR,
        MgrStatus::PermissionDenied => Errno::EACCES,
        MgrStatus::NameTooLong => Errno::ENAMETOOLONG,
        MgrStatus::BadName | MgrStatus::InvalidArgument => Errno::EINVAL,
        MgrStatus::TooManyLinks => Errno::ELOOP,
        MgrStatus::DiskFull => Errno::ENOSPC,
        MgrStatus::QuotaExceeded => Errno::EDQUOT,
        MgrStatus::Busy => Errno::EBUSY,
        MgrStatus::NoLocks => Errno::ENOLCK,
        MgrStatus::NotLoggedIn | MgrStatus::SessionExpired | MgrStatus::WrongPassword => {
            Errno::EACCES
        }
        _ => Errno::EIO,
    }
}

/// [`errno_of`] as a closure argument.
pub fn errno(e: FsError) -> Errno {
    errno_of(&e)
}

/// chown(2)'s errnos: `EPERM` when the caller may not give the file away, `EINVAL` for an id
/// no user or group of the cluster has.
pub fn chown_errno(e: FsError) -> Errno {
    match e.status() {
        Some(MgrStatus::PermissionDenied) => Errno::EPERM,
        Some(MgrStatus::UnknownUser | MgrStatus::UnknownGroup) => Errno::EINVAL,
        _ => errno_of(&e),
    }
}

/// An extended attribute refused for its size or name is `E2BIG` to the caller.
pub fn xattr_errno(e: &FsError) -> Errno {
    match e.status() {
        Some(MgrStatus::InvalidArgument) => Errno::E2BIG,
        _ => errno_of(e),
    }
}

/// Answers a request whose reply carries nothing but success or an errno.
pub fn answer(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

/// `name` when it is a `user.` extended attribute (the only namespace the manager keeps).
pub fn user_xattr(name: &OsStr) -> Option<&str> {
    name.to_str().filter(|n| n.starts_with("user."))
}

/// Answers a get or list of extended attributes: the size when asked for it (`size` 0), the
/// bytes when they fit, `ERANGE` otherwise.
pub fn xattr_reply(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() <= size as usize {
        reply.data(value);
    } else {
        reply.error(Errno::ERANGE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_become_the_errnos_programs_expect() {
        let mgr = |s| FsError::Manager {
            path: "/x".into(),
            error: nasd_client::session::SessionError::Refused {
                op: "test",
                status: s,
                detail: String::new(),
            },
        };
        for (s, want) in [
            (MgrStatus::NoSuchPath, Errno::ENOENT),
            (MgrStatus::Exists, Errno::EEXIST),
            (MgrStatus::NotEmpty, Errno::ENOTEMPTY),
            (MgrStatus::PermissionDenied, Errno::EACCES),
            (MgrStatus::NameTooLong, Errno::ENAMETOOLONG),
            (MgrStatus::TooManyLinks, Errno::ELOOP),
            (MgrStatus::QuotaExceeded, Errno::EDQUOT),
            (MgrStatus::IsADirectory, Errno::EISDIR),
        ] {
            assert_eq!(errno_of(&mgr(s)), want, "{s:?}");
        }
        assert_eq!(chown_errno(mgr(MgrStatus::PermissionDenied)), Errno::EPERM);
        assert_eq!(chown_errno(mgr(MgrStatus::UnknownUser)), Errno::EINVAL);
    }
}
