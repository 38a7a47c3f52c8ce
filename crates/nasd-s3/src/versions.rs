//! Bucket versioning. A bucket's state (`Enabled`, `Suspended`, or never set) is an
//! attribute of its directory, which only its owner changes. The current version of a key
//! stays where an unversioned bucket keeps it, so reads, listings and the mount see it as
//! before; it records its version id in `user.s3.version-id` (none: `null`). Older versions
//! and delete markers live beside it in a directory named after the key's last segment
//! with [`SUFFIX`] (`photo.jpg\u{fdd0}v`): no key can name it, since keys hold no Unicode
//! noncharacters. Each entry there is named by its version id, which begins with the
//! inverted time it was made in hexadecimal, so a directory listing is newest first; a
//! delete marker is an empty file whose name ends in [`MARKER`].
//!
//! The invariant: when the key's file exists, it is the latest version; when it does not,
//! the newest entry of the versions directory is (then a delete marker, or nothing). Every
//! change keeps it:
//! - a write in an `Enabled` bucket commits the new version in the versions directory, then
//!   renames it over the key with `RENAME_EXCHANGE` (atomic: a reader sees the old or the new
//!   version), and names the old one by its id;
//! - a delete without a version id moves the current version aside and adds a marker;
//! - deleting the current version brings the newest older one back, unless that is a marker;
//! - in a `Suspended` bucket a write or delete replaces the `null` version: a write over a
//!   current version with an id goes through the versions directory as above, and other
//!   `null` versions go once it is current (a failed write replaces nothing).
//!
//! Between the exchange and the renaming that follows it, the old version is listed under
//! the new id for a moment; its content is never lost.

use crate::conds::Cond;
use crate::gateway::{status_err, Gateway};
use crate::meta::ObjectMeta;
use nasd_client::files::{Client, FsError};
use nasd_proto::manager::{
    DirEntry, FileKind, FileStat, MgrStatus, NAME_BYTES_MAX, RENAME_EXCHANGE, RENAME_NOREPLACE,
};
use s3s::dto::{
    BucketVersioningStatus, GetBucketVersioningInput, GetBucketVersioningOutput, MFADelete,
    PutBucketVersioningInput, PutBucketVersioningOutput,
};
use s3s::{s3_error, S3Request, S3Response, S3Result};
use std::sync::Arc;

/// Appended to a key's last segment to name its versions directory: a Unicode
/// noncharacter (reserved for a program's internal use, refused in keys by
/// [`crate::names::key_segments`]) and `v`.
pub const SUFFIX: &str = "\u{fdd0}v";
/// Ends the name of a delete marker's entry.
pub const MARKER: &str = ".dm";
/// The bucket attribute holding its versioning state.
pub const BUCKET_ATTR: &str = "user.s3.bucket.versioning";
/// Entries read per page of a versions directory.
const PAGE_ENTRIES: usize = 1000;
/// Lookups of a version that moved meanwhile before a delete gives up on it.
const MOVED_ATTEMPTS: usize = 8;

/// A bucket's versioning state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Never enabled: one version per key, `null`.
    Off,
    Enabled,
    Suspended,
}

impl State {
    pub fn parse(v: Option<&str>) -> State {
        match v {
            Some("Enabled") => State::Enabled,
            Some("Suspended") => State::Suspended,
            _ => State::Off,
        }
    }
}

/// A new version id: the inverted time in microseconds (16 hex digits, so ids made later
/// sort first) and 32 random bits.
pub fn new_id() -> String {
    let mut r = [0u8; 4];
    nasd_crypto::random_bytes(&mut r);
    format!("{:016x}{}", u64::MAX - now_us(), hex::encode(r))
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The entry name of version `id` (`None`: `null`, named by the time `mtime_us` it was
/// written), a delete marker's with [`MARKER`].
pub fn entry_name(id: Option<&str>, mtime_us: u64, marker: bool) -> String {
    let base = match id {
        Some(id) if id != "null" => id.to_string(),
        _ => format!("{:016x}null", u64::MAX - mtime_us),
    };
    if marker {
        format!("{base}{MARKER}")
    } else {
        base
    }
}

/// One entry of a versions directory: its version id and whether it is a delete marker.
/// `None` for names the gateway did not make.
pub fn parse_entry(name: &str) -> Option<(String, bool)> {
    let (base, marker) = match name.strip_suffix(MARKER) {
        Some(b) => (b, true),
        None => (name, false),
    };
    let time = base.get(..16)?;
    if !time.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let id = if base.len() == 20 && base.ends_with("null") {
        "null".to_string()
    } else if base.len() > 16 && base.bytes().all(|b| b.is_ascii_hexdigit()) {
        base.to_string()
    } else {
        return None;
    };
    Some((id, marker))
}

/// The versions directory of the file at `path`.
pub fn dir_of(path: &str) -> S3Result<String> {
    let name = path.rsplit('/').next().unwrap_or(path);
    if name.len() + SUFFIX.len() > NAME_BYTES_MAX {
        return Err(s3_error!(
            KeyTooLongError,
            "in a versioned bucket a key's segments are at most {} bytes",
            NAME_BYTES_MAX - SUFFIX.len()
        ));
    }
    Ok(format!("{path}{SUFFIX}"))
}

/// One version of a key, as a listing shows it.
#[derive(Clone, Debug)]
pub struct Version {
    /// Its entry's name in the versions directory.
    pub name: String,
    pub id: String,
    pub marker: bool,
    pub stat: FileStat,
    /// The stored ETag, unquoted.
    pub etag: Option<String>,
}

/// Where a write of a key goes: the key's path, or (in an `Enabled` bucket) a new entry of
/// its versions directory that [`Gateway::publish`] then makes current.
#[derive(Clone, Debug)]
pub struct Dest {
    pub path: String,
    /// The version id the write gets (`None`: `null`).
    pub id: Option<String>,
    /// The versions directory, when the write is published from it.
    pub from: Option<String>,
    /// The bucket is `Suspended`: once the write is current, no other `null` version stays.
    pub suspended: bool,
}

/// What a version lookup found.
pub enum Found {
    /// An object version: its path, stat and metadata.
    Object(String, FileStat, Box<ObjectMeta>),
    /// A delete marker.
    Marker(String),
}

fn gone(e: &FsError) -> bool {
    e.status() == Some(MgrStatus::NoSuchPath)
}

/// The entries of versions directory `dir`, newest first (empty when it does not exist).
pub async fn entries(c: &Client, dir: &str) -> Result<Vec<Version>, FsError> {
    let mut out = vec![];
    let mut after = String::new();
    loop {
        let page = match c
            .list_page_with(dir, &after, PAGE_ENTRIES, Some(crate::meta::ETAG))
            .await
        {
            Ok(p) => p,
            Err(e) if gone(&e) => return Ok(out),
            Err(e) => return Err(e),
        };
        let n = page.len();
        if let Some(l) = page.last() {
            after = l.name.clone();
        }
        out.extend(page.into_iter().filter_map(version_of));
        if n < PAGE_ENTRIES {
            return Ok(out);
        }
    }
}

fn version_of(e: DirEntry) -> Option<Version> {
    let (id, marker) = parse_entry(&e.name)?;
    Some(Version {
        name: e.name,
        id,
        marker,
        stat: e.stat,
        etag: crate::meta::listed_etag(e.xattr),
    })
}

impl Gateway {
    /// Bucket `bucket`'s versioning state.
    pub(crate) async fn versioning(&self, c: &Client, bucket: &str) -> S3Result<State> {
        let v = self.bucket_attr(c, bucket, BUCKET_ATTR).await?;
        Ok(State::parse(v.as_deref()))
    }

    /// Where a write of `key` goes in `bucket` now. In a `Suspended` bucket the key's `null`
    /// version goes and a current version with an id moves aside first.
    pub(crate) async fn dest(&self, c: &Client, bucket: &str, key: &str) -> S3Result<Dest> {
        let (path, _) = self.names.key(bucket, key)?;
        match self.versioning(c, bucket).await? {
            State::Off => Ok(Dest {
                path,
                id: None,
                from: None,
                suspended: false,
            }),
            State::Enabled => {
                let dir = dir_of(&path)?;
                let id = new_id();
                Ok(Dest {
                    path: format!("{dir}/{id}"),
                    id: Some(id),
                    from: Some(dir),
                    suspended: false,
                })
            }
            // The new `null` version replaces a `null` current one in place; a current one
            // with an id is kept, so the write goes through the versions directory. Either
            // way, what it replaces stays until it is current (a failed write loses nothing).
            State::Suspended => match current_id(c, &path).await? {
                Some(Some(_)) => {
                    let dir = dir_of(&path)?;
                    Ok(Dest {
                        path: format!("{dir}/{}", entry_name(None, now_us(), false)),
                        id: None,
                        from: Some(dir),
                        suspended: true,
                    })
                }
                _ => Ok(Dest {
                    path,
                    id: None,
                    from: None,
                    suspended: true,
                }),
            },
        }
    }

    /// Makes versions directory `dir` (with the bucket's mode), if one is named.
    pub(crate) async fn make_versions_dir(
        &self,
        c: &Client,
        bucket: &str,
        dir: Option<&str>,
    ) -> S3Result<()> {
        let Some(dir) = dir else { return Ok(()) };
        let (_, b) = self.bucket_stat(c, bucket).await?;
        match c.mkdir(dir, b.mode & 0o777).await {
            Ok(()) => Ok(()),
            Err(e) if e.status() == Some(MgrStatus::Exists) => Ok(()),
            Err(e) => Err(self.fs_err(c, bucket, e).await),
        }
    }

    /// Makes the version a write committed at `d` the key's current one (see the module's
    /// description); nothing to do for a write to the key itself.
    pub(crate) async fn publish(
        &self,
        c: &Client,
        bucket: &str,
        key: &str,
        d: &Dest,
    ) -> S3Result<()> {
        let (path, _) = self.names.key(bucket, key)?;
        if let Some(dir) = &d.from {
            make_current(c, &d.path, &path, dir).await?;
        }
        if d.suspended {
            self.drop_null(c, &path).await?;
        }
        Ok(())
    }
}

/// Makes the version at `from` (in versions directory `dir`) the file at `path`, and names
/// the version it replaces, if any, by its id there.
async fn make_current(c: &Client, from: &str, path: &str, dir: &str) -> S3Result<()> {
    match c.rename_with(from, path, RENAME_NOREPLACE).await {
        Ok(()) => return Ok(()),
        Err(e) if e.status() == Some(MgrStatus::Exists) => {}
        Err(e) => return Err(status_err(e)),
    }
    c.rename_with(from, path, RENAME_EXCHANGE)
        .await
        .map_err(status_err)?;
    // `from` holds the version that was current: named by its own id from now on.
    let (st, x) = c.getxattrs(from).await.map_err(status_err)?;
    let old = ObjectMeta::from_xattrs(&x).version_id;
    let name = entry_name(old.as_deref(), st.mtime_us, false);
    c.rename_with(from, &format!("{dir}/{name}"), RENAME_NOREPLACE)
        .await
        .map_err(status_err)
}

/// The version id of the file at `path`: `None` when there is none, `Some(None)` for a
/// `null` version.
async fn current_id(c: &Client, path: &str) -> S3Result<Option<Option<String>>> {
    match c.getxattrs(path).await {
        Ok((st, x)) if st.kind == FileKind::File => {
            Ok(Some(ObjectMeta::from_xattrs(&x).version_id))
        }
        Ok(_) => Ok(None),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(status_err(e)),
    }
}

impl Gateway {
    /// Moves the current version of the file at `path` into its versions directory, if it
    /// has one with an id (`keep_null`: a `null` one too); returns whether a file remains.
    async fn retire(
        &self,
        c: &Client,
        bucket: &str,
        path: &str,
        keep_null: bool,
    ) -> S3Result<bool> {
        let (st, x) = match c.getxattrs(path).await {
            Ok((st, x)) if st.kind == FileKind::File => (st, x),
            Ok(_) => return Ok(false),
            Err(e) if gone(&e) => return Ok(false),
            Err(e) => return Err(status_err(e)),
        };
        let id = ObjectMeta::from_xattrs(&x).version_id;
        if id.is_none() && !keep_null {
            return Ok(true);
        }
        let dir = dir_of(path)?;
        self.make_versions_dir(c, bucket, Some(&dir)).await?;
        let to = format!("{dir}/{}", entry_name(id.as_deref(), st.mtime_us, false));
        c.rename_with(path, &to, RENAME_NOREPLACE)
            .await
            .map_err(status_err)?;
        Ok(false)
    }

    /// Removes the `null` versions of the file at `path` that are not current (a
    /// `Suspended` bucket keeps one `null` version).
    async fn drop_null(&self, c: &Client, path: &str) -> S3Result<()> {
        let dir = dir_of(path)?;
        for v in entries(c, &dir).await.map_err(status_err)? {
            if v.id == "null" {
                remove(c, &format!("{dir}/{}", v.name)).await?;
            }
        }
        Ok(())
    }

    /// Version `id` of `key` (`null` included): the current file, or an entry of its versions
    /// directory. `NoSuchVersion` when there is none.
    pub(crate) async fn version(
        &self,
        c: &Client,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> S3Result<Found> {
        match self.object(c, bucket, key).await {
            Ok((path, st, m)) if m.version_id.as_deref().unwrap_or("null") == id => {
                return Ok(Found::Object(path, st, Box::new(m)))
            }
            Ok(_) => {}
            Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchKey => {}
            Err(e) => return Err(e),
        }
        let (path, _) = self.names.key(bucket, key)?;
        let dir = dir_of(&path)?;
        let found = if id == "null" {
            entries(c, &dir)
                .await
                .map_err(status_err)?
                .into_iter()
                .find(|v| v.id == "null")
        } else {
            entries_named(c, &dir, id).await?
        };
        let Some(v) = found else {
            return Err(s3_error!(NoSuchVersion));
        };
        let p = format!("{dir}/{}", v.name);
        if v.marker {
            return Ok(Found::Marker(p));
        }
        let (st, x) = c.getxattrs(&p).await.map_err(status_err)?;
        Ok(Found::Object(p, st, Box::new(ObjectMeta::from_xattrs(&x))))
    }

    /// Object `key`, or its version `id` when one is named (`MethodNotAllowed` for a delete
    /// marker, as S3 answers).
    pub(crate) async fn object_at(
        &self,
        c: &Client,
        bucket: &str,
        key: &str,
        id: Option<&str>,
    ) -> S3Result<(String, FileStat, ObjectMeta)> {
        let Some(id) = id else {
            return match self.object(c, bucket, key).await {
                Err(mut e) if *e.code() == s3s::S3ErrorCode::NoSuchKey => {
                    let latest = self.latest_marker(c, bucket, key).await;
                    e.set_headers(marker_headers(latest.is_some(), latest.as_deref()));
                    Err(e)
                }
                r => r,
            };
        };
        match self.version(c, bucket, key, id).await? {
            Found::Object(p, st, m) => Ok((p, st, *m)),
            Found::Marker(_) => {
                let mut e = s3_error!(
                    MethodNotAllowed,
                    "version {id} of the key is a delete marker"
                );
                e.set_headers(marker_headers(true, Some(id)));
                Err(e)
            }
        }
    }

    /// The id of the delete marker that is the latest version of `key`, if one is.
    pub(crate) async fn latest_marker(
        &self,
        c: &Client,
        bucket: &str,
        key: &str,
    ) -> Option<String> {
        let (path, _) = self.names.key(bucket, key).ok()?;
        let newest = entries(c, &dir_of(&path).ok()?)
            .await
            .ok()?
            .into_iter()
            .next()?;
        newest.marker.then_some(newest.id)
    }

    /// DeleteObject: in a bucket that never had versioning, the object goes (`null` is its
    /// only version); otherwise [`Gateway::delete_versioned`]. Under the key's commit lock,
    /// and only when what the key (or version `id`) holds meets `cond` ([`crate::conds`]): a
    /// conditional delete of nothing does nothing.
    pub(crate) async fn delete_version_of(
        &self,
        c: &Arc<Client>,
        bucket: &str,
        key: &str,
        id: Option<&str>,
        cond: &Cond,
    ) -> S3Result<(Option<String>, bool)> {
        let (path, _) = self.names.key(bucket, key)?;
        let _held = self.commits.lock(&path).await;
        if !cond.is_empty() && !cond.check_delete(&self.current(c, bucket, key, id).await?)? {
            return Ok((id.map(str::to_string), false));
        }
        match (self.versioning(c, bucket).await?, id) {
            (State::Off, None | Some("null")) => {
                self.delete(c, bucket, key).await?;
                Ok((None, false))
            }
            (State::Off, Some(_)) => Err(s3_error!(NoSuchVersion)),
            (state, id) => self.delete_versioned(c, bucket, key, state, id).await,
        }
    }

    /// PutBucketVersioning (the bucket's owner): `Enabled` or `Suspended`; MFA delete is
    /// refused.
    pub(crate) async fn put_versioning(
        &self,
        c: &Client,
        bucket: &str,
        status: Option<&str>,
        mfa_delete: Option<&str>,
    ) -> S3Result<()> {
        if mfa_delete == Some("Enabled") {
            return Err(s3_error!(
                NotImplemented,
                "the gateway does not implement MFA delete"
            ));
        }
        let (path, _) = self.owned_bucket(c, bucket).await?;
        let state = match status {
            Some("Enabled") => "Enabled",
            Some("Suspended") => "Suspended",
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "the status is Enabled or Suspended"
                ))
            }
        };
        c.setxattr(&path, BUCKET_ATTR, Some(state.as_bytes()))
            .await
            .map_err(status_err)
    }

    pub(crate) async fn put_bucket_versioning_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let i = &req.input;
        let v = &i.versioning_configuration;
        self.put_versioning(
            &c,
            &i.bucket,
            v.status.as_ref().map(BucketVersioningStatus::as_str),
            v.mfa_delete.as_ref().map(MFADelete::as_str),
        )
        .await?;
        Ok(S3Response::new(PutBucketVersioningOutput::default()))
    }

    /// GetBucketVersioning (the bucket's owner): the state set last, none if never.
    pub(crate) async fn get_bucket_versioning_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let (_, _) = self.owned_bucket(&c, &req.input.bucket).await?;
        let status = match self.versioning(&c, &req.input.bucket).await? {
            State::Off => None,
            State::Enabled => Some(BucketVersioningStatus::ENABLED),
            State::Suspended => Some(BucketVersioningStatus::SUSPENDED),
        };
        Ok(S3Response::new(GetBucketVersioningOutput {
            status: status.map(BucketVersioningStatus::from_static),
            mfa_delete: None,
        }))
    }

    /// DeleteObject in a bucket that has versioning: without `id`, a delete marker (its id
    /// returned); with one, that version goes for good. Returns the version id the answer
    /// names and whether it is a delete marker.
    pub(crate) async fn delete_versioned(
        &self,
        c: &Arc<Client>,
        bucket: &str,
        key: &str,
        state: State,
        id: Option<&str>,
    ) -> S3Result<(Option<String>, bool)> {
        let (path, _) = self.names.key(bucket, key)?;
        let dir = dir_of(&path)?;
        let Some(id) = id else {
            let marker_id = match state {
                State::Suspended => {
                    self.drop_null(c, &path).await?;
                    if self.retire(c, bucket, &path, false).await? {
                        remove(c, &path).await?;
                    }
                    None
                }
                _ => {
                    self.retire(c, bucket, &path, true).await?;
                    Some(new_id())
                }
            };
            self.make_versions_dir(c, bucket, Some(&dir)).await?;
            let name = entry_name(marker_id.as_deref(), now_us(), true);
            c.put_bytes_with(&format!("{dir}/{name}"), &[], 0o600, None)
                .await
                .map_err(status_err)?;
            return Ok((Some(marker_id.unwrap_or_else(|| "null".into())), true));
        };
        // A version moves while it is looked up when another request makes an older one
        // current or a newer one retires it: then it is looked up again.
        let mut marker = false;
        for _ in 0..MOVED_ATTEMPTS {
            let p = match self.version(c, bucket, key, id).await {
                Ok(Found::Object(p, _, _)) => p,
                Ok(Found::Marker(p)) => {
                    marker = true;
                    p
                }
                // Deleting a version that is not there is done already.
                Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchVersion => break,
                Err(e) => return Err(e),
            };
            match c.unlink(&p).await {
                Ok(()) => break,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(status_err(e)),
            }
        }
        self.settle_versions(c, bucket, key, &path, &dir).await?;
        Ok((Some(id.to_string()), marker))
    }

    /// After a version went: the newest older version becomes current when the key has
    /// no file (unless it is a delete marker), and an empty versions directory goes.
    async fn settle_versions(
        &self,
        c: &Client,
        bucket: &str,
        key: &str,
        path: &str,
        dir: &str,
    ) -> S3Result<()> {
        let current = match c.stat(path).await {
            Ok(_) => true,
            Err(e) if gone(&e) => false,
            Err(e) => return Err(status_err(e)),
        };
        let left = entries(c, dir).await.map_err(status_err)?;
        match left.first() {
            None => {
                let _ = c.rmdir(dir).await;
                if !current {
                    self.prune(c, bucket, key).await;
                }
            }
            Some(v) if !current && !v.marker => {
                let from = format!("{dir}/{}", v.name);
                match c.rename_with(&from, path, RENAME_NOREPLACE).await {
                    Ok(()) => {}
                    // A write made the key current meanwhile.
                    Err(e) if e.status() == Some(MgrStatus::Exists) => {}
                    Err(e) => return Err(status_err(e)),
                }
                if left.len() == 1 {
                    let _ = c.rmdir(dir).await;
                }
            }
            Some(_) => {}
        }
        Ok(())
    }
}

/// The entry of `dir` for version `id` (an object or a marker), if any.
async fn entries_named(c: &Client, dir: &str, id: &str) -> S3Result<Option<Version>> {
    if parse_entry(id).is_none_or(|(_, marker)| marker) {
        return Ok(None);
    }
    for (name, marker) in [(id.to_string(), false), (format!("{id}{MARKER}"), true)] {
        match c.stat(&format!("{dir}/{name}")).await {
            Ok(stat) => {
                return Ok(Some(Version {
                    name,
                    id: id.to_string(),
                    marker,
                    stat,
                    etag: None,
                }))
            }
            Err(e) if gone(&e) => {}
            Err(e) => return Err(status_err(e)),
        }
    }
    Ok(None)
}

/// The headers of an answer about a key whose latest version is (`marker`) or is not a
/// delete marker: `x-amz-delete-marker`, and the marker's version id.
fn marker_headers(marker: bool, id: Option<&str>) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    let v = if marker { "true" } else { "false" };
    h.insert("x-amz-delete-marker", http::HeaderValue::from_static(v));
    if let Some(v) = id.and_then(|v| http::HeaderValue::from_str(v).ok()) {
        h.insert("x-amz-version-id", v);
    }
    h
}

async fn remove(c: &Client, path: &str) -> S3Result<()> {
    match c.unlink(path).await {
        Ok(()) => Ok(()),
        Err(e) if gone(&e) => Ok(()),
        Err(e) => Err(status_err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_parse_back_and_sort_newest_first() {
        let a = new_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_id();
        assert!(b < a, "a later id sorts first");
        assert_eq!(parse_entry(&a), Some((a.clone(), false)));
        assert_eq!(
            parse_entry(&entry_name(Some(&a), 0, true)),
            Some((a.clone(), true))
        );
        let null = entry_name(None, 5, false);
        assert_eq!(null.len(), 20);
        assert_eq!(parse_entry(&null), Some(("null".into(), false)));
        assert_eq!(
            parse_entry(&entry_name(Some("null"), 5, true)),
            Some(("null".into(), true))
        );
        assert!(
            entry_name(None, 6, false) < null,
            "null versions sort by time too"
        );
        assert_eq!(parse_entry("photo.jpg"), None);
        assert_eq!(parse_entry("0123456789abcdef"), None);
    }

    #[test]
    fn versions_directories_are_beside_their_key() {
        assert_eq!(dir_of("/b/a/k").unwrap(), "/b/a/k\u{fdd0}v");
        assert!(dir_of(&format!("/b/{}", "x".repeat(252))).is_err());
        assert!(dir_of(&format!("/b/{}", "x".repeat(251))).is_ok());
    }
}
