//! Conditional writes and deletes (issue 22 §2): a PUT, a CompleteMultipartUpload or a
//! DELETE that names what the key must hold (`If-Match`, `If-None-Match`,
//! `x-amz-if-match-last-modified-time`, `x-amz-if-match-size`, or a DeleteObjects entry's
//! `ETag`, `LastModifiedTime` and `Size`) is checked against the key's current object in the
//! same critical section as its commit, so two writers cannot both see the key free, and no
//! write lands between another's check and its commit.
//!
//! That critical section is a [`CommitLocks`] stripe of the key: every commit of a key through
//! this gateway (PUT, copy, completion, delete, the lifecycle sweeper) takes it for the commit
//! only, never while a body streams. It orders the gateway's own requests; writes through a
//! mount or another gateway are not ordered against them (the manager's commit itself is
//! atomic, but it has no compare-and-swap on an object's ETag).

use crate::gateway::{etag_of, Gateway};
use crate::versions::Found;
use s3s::dto::{ETag, ETagCondition, Timestamp};
use s3s::{s3_error, S3Result};
use std::hash::{Hash, Hasher};
use tokio::sync::{Mutex, MutexGuard};

/// Stripes of [`CommitLocks`]: keys share a stripe by hash, so the table's memory is fixed;
/// a commit holds its stripe for a few manager round trips.
pub const COMMIT_STRIPES: usize = 256;

/// The locks commits of a key take ([`COMMIT_STRIPES`] of them, chosen by the key's path).
pub struct CommitLocks {
    stripes: Box<[Mutex<()>]>,
}

impl Default for CommitLocks {
    fn default() -> Self {
        CommitLocks {
            stripes: (0..COMMIT_STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl CommitLocks {
    /// Waits for the stripe of the key at `path`. A holder takes no other stripe.
    pub async fn lock(&self, path: &str) -> MutexGuard<'_, ()> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        path.hash(&mut h);
        self.stripes[(h.finish() % COMMIT_STRIPES as u64) as usize]
            .lock()
            .await
    }
}

/// What a key (or one of its versions) holds when a condition is checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Current {
    /// Nothing: no object and no delete marker.
    Absent,
    /// A delete marker (the key's latest version, or the version asked for).
    Marker,
    /// An object: its ETag, size in bytes and modify time in seconds.
    Object { etag: ETag, size: u64, mtime_s: i64 },
}

/// A request's conditions on what it replaces or deletes; the default asks for nothing.
#[derive(Debug, Clone, Default)]
pub struct Cond {
    pub if_match: Option<ETagCondition>,
    pub if_none_match: Option<ETagCondition>,
    /// `x-amz-if-match-last-modified-time` (compared in whole seconds, as HTTP dates are).
    pub mtime: Option<Timestamp>,
    /// `x-amz-if-match-size`.
    pub size: Option<i64>,
}

fn matches(c: &ETagCondition, etag: &ETag) -> bool {
    match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag.value(),
    }
}

impl Cond {
    /// Whether the request states any condition.
    pub fn is_empty(&self) -> bool {
        self.if_match.is_none()
            && self.if_none_match.is_none()
            && self.mtime.is_none()
            && self.size.is_none()
    }

    /// A write over `cur`: `If-Match` needs an object there (`NoSuchKey` else) whose ETag
    /// it names (`*`: any); `If-None-Match` fails on an object whose ETag it names (`*`:
    /// any object). A delete marker is no object.
    pub fn check_write(&self, cur: &Current) -> S3Result<()> {
        let Current::Object { etag, .. } = cur else {
            if self.if_match.is_some() {
                return Err(s3_error!(NoSuchKey));
            }
            return Ok(());
        };
        let failed = self.if_match.as_ref().is_some_and(|c| !matches(c, etag))
            || self
                .if_none_match
                .as_ref()
                .is_some_and(|c| matches(c, etag));
        match failed {
            true => Err(s3_error!(PreconditionFailed)),
            false => Ok(()),
        }
    }

    /// A delete of `cur`: `Ok(false)` when there is nothing to delete (a conditional delete
    /// of nothing succeeds and does nothing); a delete marker matches only `If-Match: *`;
    /// an object must match every condition given (`PreconditionFailed` else).
    pub fn check_delete(&self, cur: &Current) -> S3Result<bool> {
        let ok = match cur {
            Current::Absent => return Ok(false),
            Current::Marker => {
                self.mtime.is_none()
                    && self.size.is_none()
                    && self
                        .if_match
                        .as_ref()
                        .is_none_or(|c| matches!(c, ETagCondition::Any))
            }
            Current::Object {
                etag,
                size,
                mtime_s,
            } => {
                self.if_match.as_ref().is_none_or(|c| matches(c, etag))
                    && self.size.is_none_or(|s| u64::try_from(s) == Ok(*size))
                    && self.mtime.as_ref().is_none_or(|t| {
                        time::OffsetDateTime::from(t.clone()).unix_timestamp() == *mtime_s
                    })
            }
        };
        match ok {
            true => Ok(true),
            false => Err(s3_error!(PreconditionFailed)),
        }
    }
}

impl Gateway {
    /// What `key` holds now: its current object (or latest delete marker) without `id`,
    /// else its version `id`.
    pub(crate) async fn current(
        &self,
        c: &nasd_client::files::Client,
        bucket: &str,
        key: &str,
        id: Option<&str>,
    ) -> S3Result<Current> {
        let object = |st: &nasd_proto::manager::FileStat, m| Current::Object {
            etag: etag_of(st, m),
            size: st.size,
            mtime_s: (st.mtime_us / 1_000_000) as i64,
        };
        let Some(id) = id else {
            return match self.object(c, bucket, key).await {
                Ok((_, st, m)) => Ok(object(&st, &m)),
                Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchKey => {
                    match self.latest_marker(c, bucket, key).await {
                        Some(_) => Ok(Current::Marker),
                        None => Ok(Current::Absent),
                    }
                }
                Err(e) => Err(e),
            };
        };
        match self.version(c, bucket, key, id).await {
            Ok(Found::Object(_, st, m)) => Ok(object(&st, &m)),
            Ok(Found::Marker(_)) => Ok(Current::Marker),
            Err(e)
                if matches!(
                    e.code(),
                    s3s::S3ErrorCode::NoSuchVersion | s3s::S3ErrorCode::NoSuchKey
                ) =>
            {
                Ok(Current::Absent)
            }
            Err(e) => Err(e),
        }
    }

    /// Checks write conditions `cond` against `key`'s current object (nothing when there
    /// are none).
    pub(crate) async fn check_write(
        &self,
        c: &nasd_client::files::Client,
        bucket: &str,
        key: &str,
        cond: &Cond,
    ) -> S3Result<()> {
        if cond.is_empty() {
            return Ok(());
        }
        cond.check_write(&self.current(c, bucket, key, None).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(etag: &str) -> Current {
        Current::Object {
            etag: ETag::Strong(etag.into()),
            size: 3,
            mtime_s: 1_700_000_000,
        }
    }

    fn tag(e: &str) -> Option<ETagCondition> {
        Some(ETagCondition::ETag(ETag::Strong(e.into())))
    }

    #[test]
    fn writes_need_what_they_name() {
        let none_star = Cond {
            if_none_match: Some(ETagCondition::Any),
            ..Cond::default()
        };
        assert!(none_star.check_write(&Current::Absent).is_ok());
        assert!(none_star.check_write(&Current::Marker).is_ok());
        assert!(none_star.check_write(&object("a")).is_err());
        let none_a = Cond {
            if_none_match: tag("a"),
            ..Cond::default()
        };
        assert!(none_a.check_write(&object("a")).is_err());
        assert!(none_a.check_write(&object("b")).is_ok());
        let match_a = Cond {
            if_match: tag("a"),
            ..Cond::default()
        };
        assert!(match_a.check_write(&object("a")).is_ok());
        let e = match_a.check_write(&object("b")).unwrap_err();
        assert_eq!(*e.code(), s3s::S3ErrorCode::PreconditionFailed);
        let e = match_a.check_write(&Current::Marker).unwrap_err();
        assert_eq!(*e.code(), s3s::S3ErrorCode::NoSuchKey);
        assert!(Cond::default().check_write(&object("a")).is_ok());
    }

    #[test]
    fn deletes_of_nothing_do_nothing_and_markers_match_only_any() {
        let match_b = Cond {
            if_match: tag("b"),
            ..Cond::default()
        };
        assert_eq!(match_b.check_delete(&Current::Absent).ok(), Some(false));
        assert!(match_b.check_delete(&Current::Marker).is_err());
        assert!(match_b.check_delete(&object("a")).is_err());
        assert_eq!(match_b.check_delete(&object("b")).ok(), Some(true));
        let any = Cond {
            if_match: Some(ETagCondition::Any),
            ..Cond::default()
        };
        assert_eq!(any.check_delete(&Current::Marker).ok(), Some(true));
        let size = |s| Cond {
            size: Some(s),
            ..Cond::default()
        };
        assert!(size(3).check_delete(&object("a")).is_ok());
        assert!(size(4).check_delete(&object("a")).is_err());
        assert!(size(-1).check_delete(&object("a")).is_err());
        assert!(size(0).check_delete(&Current::Marker).is_err());
        let at = |s: i64| Cond {
            mtime: Some(Timestamp::from(
                time::OffsetDateTime::from_unix_timestamp(s).unwrap(),
            )),
            ..Cond::default()
        };
        assert!(at(1_700_000_000).check_delete(&object("a")).is_ok());
        assert!(at(1_420_070_400).check_delete(&object("a")).is_err());
    }
}
