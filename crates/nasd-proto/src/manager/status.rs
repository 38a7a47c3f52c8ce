//! Stable status codes of manager replies ([`MgrStatus`]), and the `Error` reply that carries
//! one with a detail in words ([`Refused`]).

use super::call::Wire;
use super::codec::{get_str, put_str};
use super::STRING_BYTES_MAX;
use crate::codec::{Reader, Writer};
use crate::DecodeError;
use std::fmt;

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
    /// A path went through more than [`SYMLINK_HOPS_MAX`](super::SYMLINK_HOPS_MAX) symbolic links (ELOOP).
    TooManyLinks = 24,
    /// A write would take the file's owner past their quota (seed 002 §3.2; EDQUOT).
    QuotaExceeded = 25,
    /// The user has no end-to-end keys registered yet, and the request needs them (a write
    /// grant under scheme 1 names the writer's signing key); a client registers its keys and
    /// asks again.
    NoUserKeys = 26,
    /// The manager's lock table is full, or a file's ranges are at their bound (ENOLCK):
    /// nothing was taken.
    NoLocks = 27,
}

impl MgrStatus {
    pub const ALL: [MgrStatus; 27] = [
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
        Self::NoLocks,
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
            Self::NoDrives => "too few drives are up",
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
            Self::NoLocks => "no locks available",
        }
    }
}

impl fmt::Display for MgrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// A refusal, as the `Error` reply carries it: a stable status and a detail naming what it
/// concerns (at most [`STRING_BYTES_MAX`] bytes).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Refused {
    pub status: MgrStatus,
    pub detail: String,
}

impl Refused {
    /// A refusal; a detail past [`STRING_BYTES_MAX`] is cut at a character boundary.
    pub fn new(status: MgrStatus, detail: impl Into<String>) -> Refused {
        let mut detail: String = detail.into();
        if detail.len() > STRING_BYTES_MAX {
            let mut cut = STRING_BYTES_MAX;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
        }
        Refused { status, detail }
    }
}

/// `u16 status, string detail`.
impl Wire for Refused {
    fn put(&self, w: &mut Writer) {
        w.u16(self.status as u16);
        put_str(w, &self.detail);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let code = r.u16("status")?;
        Ok(Refused {
            status: MgrStatus::from_u16(code).ok_or(DecodeError::BadValue("status"))?,
            detail: get_str(r, "detail")?,
        })
    }
}
