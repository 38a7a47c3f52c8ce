//! The S3 operations over the namespace: buckets are directories under the gateway's root,
//! objects are files (their metadata in extended attributes, [`crate::meta`]), each request
//! made by a client acting for the user whose key signed it, so the manager checks every
//! permission as for that user. Writes are staged uploads committed with their metadata in
//! one manager transaction: a failed or interrupted PUT leaves nothing visible, and a reader
//! sees the old object or the new one, never a mix of bytes and metadata. Buckets and
//! objects are private unless an ACL says otherwise ([`crate::acl`]); a key's directories
//! take their bucket's mode.

use crate::access::{internal, session_ended, Access, SESSION_ENDED};
use crate::acl::{self, Caller};
use crate::conds::{CommitLocks, Cond};
use crate::digest::{self, Digests};
use crate::list::{self, Query};
use crate::meta::{self, ObjectMeta};
use crate::names::Names;
use crate::sse;
use crate::stream::{self, Writer};
use crate::versions;
use bytes::Bytes;
use futures_util::StreamExt;
use nasd_client::files::{Client, FsError};
use nasd_proto::manager::{FileKind, FileStat, MgrStatus};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Result};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// Objects up to this size arrive whole before they are written (one manager round trip to
/// create them, through the client's prepared files); larger ones stream.
pub const SMALL_OBJECT_BYTES: u64 = 1 << 20;
/// Times a write makes the directories of its key again when a concurrent delete removed
/// them in between.
const MKDIR_ATTEMPTS: usize = 3;

/// The gateway: who may do what ([`Access`]) and where buckets live ([`Names`]).
pub struct Gateway {
    pub(crate) access: Arc<Access>,
    pub(crate) names: Names,
    /// KMS key ids the operator declared as names of nasd's own encryption ([`sse`]).
    pub(crate) kms_ids: Vec<String>,
    /// The one region the gateway serves (`--region`): buckets are made only there.
    pub(crate) region: String,
    /// Held by each commit of a key, with the check of its conditions
    /// ([`crate::conds`]); shared by every [`Gateway::alike`].
    pub(crate) commits: Arc<CommitLocks>,
}

impl Gateway {
    pub fn new(access: Arc<Access>, root: &str, kms_ids: Vec<String>, region: &str) -> Gateway {
        Gateway {
            access,
            names: Names::new(root),
            kms_ids,
            region: region.to_string(),
            commits: Arc::default(),
        }
    }

    /// Another gateway with the same settings and the same commit locks (for the lifecycle
    /// sweeper, whose deletes must be ordered with requests' commits).
    pub fn alike(&self) -> Gateway {
        Gateway {
            access: self.access.clone(),
            names: self.names.clone(),
            kms_ids: self.kms_ids.clone(),
            region: self.region.clone(),
            commits: self.commits.clone(),
        }
    }

    /// Runs `op` with a client acting for the request's signer (anonymous requests are
    /// refused), after checking `x-amz-expected-bucket-owner` against `bucket`'s owner. When
    /// the manager ended the signer's session meanwhile (a password change ends them all),
    /// the session is opened anew and `op` runs once more: an operation that consumed its
    /// body by then fails on its second run ([`BodySlot`]) and answers `ServiceUnavailable`.
    pub(crate) async fn as_user<T, R, F, Fut>(
        &self,
        req: &S3Request<T>,
        bucket: Option<&str>,
        op: F,
    ) -> S3Result<R>
    where
        F: Fn(Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = S3Result<R>>,
    {
        let Some(cred) = &req.credentials else {
            return Err(s3_error!(AccessDenied, "anonymous requests are not served"));
        };
        let expected = req
            .headers
            .get("x-amz-expected-bucket-owner")
            .and_then(|v| v.to_str().ok());
        let mut retried = false;
        loop {
            let c = self.access.client_for_key(&cred.access_key).await?;
            let r = async {
                if let (Some(want), Some(b)) = (expected, bucket) {
                    let (_, st) = self.bucket_stat(&c, b).await?;
                    if st.owner != want {
                        return Err(s3_error!(
                            AccessDenied,
                            "the bucket's owner is not the expected one"
                        ));
                    }
                }
                op(c.clone()).await
            }
            .await;
            match r {
                Err(e) if session_ended(&e) && !retried => {
                    self.access.forget(c.user(), &c).await;
                    retried = true;
                }
                r => return r,
            }
        }
    }

    /// Whether `c`'s user passes `check` on `st` (their groups are read only when `st`'s
    /// permissions depend on them).
    pub(crate) async fn may(
        &self,
        c: &Client,
        st: &FileStat,
        check: fn(&FileStat, &Caller<'_>) -> bool,
    ) -> S3Result<bool> {
        let none = Vec::new();
        if st.owner == c.user() || acl::group_is_other(st) {
            return Ok(check(
                st,
                &Caller {
                    user: c.user(),
                    groups: &none,
                },
            ));
        }
        let groups = self.access.groups(c.user()).await?;
        Ok(check(
            st,
            &Caller {
                user: c.user(),
                groups: &groups,
            },
        ))
    }

    /// Fails with `AccessDenied` unless `c`'s user may add objects to the bucket of stat `st`.
    pub(crate) async fn need_write(&self, c: &Client, st: &FileStat) -> S3Result<()> {
        if self.may(c, st, acl::may_write).await? {
            Ok(())
        } else {
            Err(s3_error!(AccessDenied))
        }
    }

    /// Fails with `AccessDenied` unless `c`'s user may list the bucket of stat `st`.
    pub(crate) async fn need_list(&self, c: &Client, st: &FileStat) -> S3Result<()> {
        if self.may(c, st, acl::may_list).await? {
            Ok(())
        } else {
            Err(s3_error!(AccessDenied))
        }
    }

    /// An error about `path` in bucket `bucket` as S3 names it: a missing path is a missing
    /// bucket when the bucket is what is missing.
    pub(crate) async fn fs_err(&self, c: &Client, bucket: &str, e: FsError) -> S3Error {
        match e.status() {
            Some(MgrStatus::NoSuchPath) | Some(MgrStatus::IsADirectory) => {
                match self.bucket_exists(c, bucket).await {
                    Ok(false) => s3_error!(NoSuchBucket),
                    _ => s3_error!(NoSuchKey),
                }
            }
            Some(MgrStatus::NotADirectory) => s3_error!(
                InvalidRequest,
                "a prefix of the key is an object (a key cannot be both an object and a prefix of others)"
            ),
            _ => status_err(e),
        }
    }

    async fn bucket_exists(&self, c: &Client, bucket: &str) -> S3Result<bool> {
        let path = self.names.bucket(bucket)?;
        match c.stat(&path).await {
            Ok(st) => Ok(st.kind == FileKind::Dir),
            Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => Ok(false),
            Err(e) => Err(status_err(e)),
        }
    }

    /// The directory of a bucket that exists, and its stat (`NoSuchBucket` otherwise).
    pub(crate) async fn bucket_stat(
        &self,
        c: &Client,
        bucket: &str,
    ) -> S3Result<(String, FileStat)> {
        let path = self.names.bucket(bucket)?;
        match c.stat(&path).await {
            Ok(st) if st.kind == FileKind::Dir => Ok((path, st)),
            Ok(_) => Err(s3_error!(NoSuchBucket)),
            Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => Err(s3_error!(NoSuchBucket)),
            Err(e) => Err(status_err(e)),
        }
    }

    /// What a write to `bucket` asks for in `h`, the bucket's default encryption
    /// ([`sse::BUCKET_DEFAULT_ATTR`]) when it asks nothing.
    pub(crate) async fn sse_asked(
        &self,
        c: &Client,
        bucket: &str,
        h: &http::HeaderMap,
    ) -> S3Result<sse::Asked> {
        match sse::Asked::of_write(h, &self.kms_ids)? {
            sse::Asked::None => match self
                .bucket_attr(c, bucket, sse::BUCKET_DEFAULT_ATTR)
                .await?
            {
                Some(d) => sse::Asked::of_default(&d, &self.kms_ids),
                None => Ok(sse::Asked::None),
            },
            asked => Ok(asked),
        }
    }

    /// Attribute `name` of bucket `bucket` (`NoSuchBucket` when there is no such bucket).
    pub(crate) async fn bucket_attr(
        &self,
        c: &Client,
        bucket: &str,
        name: &str,
    ) -> S3Result<Option<String>> {
        let path = self.names.bucket(bucket)?;
        match c.getxattrs(&path).await {
            Ok((st, x)) if st.kind == FileKind::Dir => Ok(x
                .into_iter()
                .find(|a| a.name == name)
                .and_then(|a| String::from_utf8(a.value).ok())),
            Ok(_) => Err(s3_error!(NoSuchBucket)),
            Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => Err(s3_error!(NoSuchBucket)),
            Err(e) => Err(status_err(e)),
        }
    }

    /// Removes the configuration attribute `name` of `bucket`, which the caller owns (a
    /// bucket without it is left as it is); the configuration's DELETE then answers 204.
    pub(crate) async fn clear_bucket_attr(
        &self,
        c: &Client,
        bucket: &str,
        name: &str,
    ) -> S3Result<()> {
        let (path, _) = self.owned_bucket(c, bucket).await?;
        match c.setxattr(&path, name, None).await {
            Ok(()) => Ok(()),
            Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => Ok(()),
            Err(e) => Err(status_err(e)),
        }
    }

    /// [`Gateway::bucket_stat`] of a bucket the caller owns (`AccessDenied` otherwise): only
    /// a bucket's owner reads or changes its ACL, tags and configuration.
    pub(crate) async fn owned_bucket(
        &self,
        c: &Client,
        bucket: &str,
    ) -> S3Result<(String, FileStat)> {
        let (path, st) = self.bucket_stat(c, bucket).await?;
        crate::acl::need_owner(c, &st)?;
        Ok((path, st))
    }

    /// Fails with `NoSuchBucket` unless the bucket exists.
    pub(crate) async fn need_bucket(&self, c: &Client, bucket: &str) -> S3Result<String> {
        Ok(self.bucket_stat(c, bucket).await?.0)
    }

    /// Makes the directories between the bucket and `key` (the bucket must exist), each with
    /// the bucket's mode, so a key's prefixes are as open as its bucket.
    pub(crate) async fn make_parents(&self, c: &Client, bucket: &str, key: &str) -> S3Result<()> {
        let (_, st) = self.bucket_stat(c, bucket).await?;
        for d in self.names.parents(bucket, key)? {
            match c.mkdir(&d, st.mode & 0o777).await {
                Ok(()) => {}
                Err(e) if e.status() == Some(MgrStatus::Exists) => {}
                Err(e) => return Err(self.fs_err(c, bucket, e).await),
            }
        }
        Ok(())
    }

    /// Starts an upload to `key` of mode `mode`, making its directories when they are
    /// missing; what to do about the mode of the object it replaces once it is committed.
    pub(crate) async fn begin(
        &self,
        c: &Arc<Client>,
        bucket: &str,
        key: &str,
        d: &versions::Dest,
        digests: Digests,
        mode: u32,
    ) -> S3Result<(Writer, ModeFix)> {
        let path = d.path.clone();
        let mut attempt = 0;
        let upload = loop {
            attempt += 1;
            match c.begin_upload(&path, mode).await {
                Ok(u) => break u,
                Err(e)
                    if matches!(e.status(), Some(MgrStatus::NoSuchPath))
                        && attempt < MKDIR_ATTEMPTS =>
                {
                    self.make_parents(c, bucket, key).await?;
                    self.make_versions_dir(c, bucket, d.from.as_deref()).await?;
                }
                Err(e) => return Err(self.fs_err(c, bucket, e).await),
            }
        };
        let old = upload.replaces().then(|| upload.stat().clone());
        let fix = match ModeFix::before(c, old.as_ref(), &path, mode).await {
            Ok(f) => f,
            Err(e) => {
                c.abort_upload(&upload).await;
                return Err(e);
            }
        };
        let w = Writer::new(c.clone(), upload, digests)
            .await
            .map_err(status_err)?;
        Ok((w, fix))
    }

    /// Writes a whole small object with its metadata (one round trip to create it).
    #[allow(clippy::too_many_arguments)]
    async fn put_small(
        &self,
        c: &Arc<Client>,
        bucket: &str,
        key: &str,
        d: &versions::Dest,
        data: &[u8],
        m: &ObjectMeta,
        mode: u32,
    ) -> S3Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match c
                .put_bytes_with(&d.path, data, mode, Some(m.to_xattrs()))
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) if e.status() == Some(MgrStatus::NoSuchPath) && attempt < MKDIR_ATTEMPTS => {
                    self.make_parents(c, bucket, key).await?;
                    self.make_versions_dir(c, bucket, d.from.as_deref()).await?;
                }
                Err(e) => return Err(self.fs_err(c, bucket, e).await),
            }
        }
    }

    /// Fails with `AccessDenied` unless `c`'s user may pass through the bucket and the
    /// directories of `key`. The manager checks this on every lookup it makes, but a client
    /// serves a path it looked up before from its cache (its callback is broken when the file
    /// changes, not when a directory above it does), so a bucket made private would stay
    /// readable for those who read it before; the directories' own stats are fresh (their
    /// callbacks are broken by the change).
    async fn need_reach(&self, c: &Client, bucket: &str, key: &str) -> S3Result<()> {
        let (_, b) = self.bucket_stat(c, bucket).await?;
        if b.owner == c.user() && b.mode & 0o100 != 0 {
            // A bucket's owner is shut out only by another user's prefix in a
            // public-read-write bucket, and the manager checks a lookup it makes.
            return Ok(());
        }
        if !self.may(c, &b, acl::may_pass).await? {
            return Err(s3_error!(AccessDenied));
        }
        for d in self.names.parents(bucket, key)? {
            match c.stat(&d).await {
                Ok(st) if !self.may(c, &st, acl::may_pass).await? => {
                    return Err(s3_error!(AccessDenied))
                }
                Ok(_) => {}
                Err(e) => return Err(self.fs_err(c, bucket, e).await),
            }
        }
        Ok(())
    }

    /// The stat and metadata of object `key` (directories are not objects).
    pub(crate) async fn object(
        &self,
        c: &Client,
        bucket: &str,
        key: &str,
    ) -> S3Result<(String, FileStat, ObjectMeta)> {
        self.need_reach(c, bucket, key).await?;
        let (path, dir) = self.names.key(bucket, key)?;
        let (st, x) = match c.getxattrs(&path).await {
            Ok(v) => v,
            Err(e) => return Err(self.fs_err(c, bucket, e).await),
        };
        let is_object = match st.kind {
            FileKind::File => !dir,
            FileKind::Dir => dir,
            _ => false,
        };
        if !is_object {
            return Err(s3_error!(NoSuchKey));
        }
        Ok((path, st, ObjectMeta::from_xattrs(&x)))
    }

    /// Removes the directories between the bucket and `key` that are now empty, innermost
    /// first (a key's directories exist only for its keys).
    pub(crate) async fn prune(&self, c: &Client, bucket: &str, key: &str) {
        let Ok(parents) = self.names.parents(bucket, key) else {
            return;
        };
        for d in parents.iter().rev() {
            if c.rmdir(d).await.is_err() {
                break;
            }
        }
    }

    /// Deletes object `key`; a missing key is not an error (S3 deletes are idempotent).
    pub(crate) async fn delete(&self, c: &Client, bucket: &str, key: &str) -> S3Result<()> {
        let (path, dir) = self.names.key(bucket, key)?;
        let r = if dir {
            c.rmdir(&path).await
        } else {
            c.unlink(&path).await
        };
        match r {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.status(),
                    Some(MgrStatus::NoSuchPath)
                        | Some(MgrStatus::IsADirectory)
                        | Some(MgrStatus::NotEmpty)
                        | Some(MgrStatus::NotADirectory)
                ) =>
            {
                if !self.bucket_exists(c, bucket).await? {
                    return Err(s3_error!(NoSuchBucket));
                }
                return Ok(());
            }
            Err(e) => return Err(status_err(e)),
        }
        self.prune(c, bucket, key).await;
        Ok(())
    }

    /// Streams the body in `body` into a new version of `key` of mode `mode` with metadata
    /// `m` (its ETag and checksums filled in here), checking the claimed digests before
    /// anything is committed. Returns the metadata committed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn put_stream(
        &self,
        c: &Arc<Client>,
        bucket: &str,
        key: &str,
        body: &BodySlot,
        length: Option<u64>,
        mut m: ObjectMeta,
        claims: &Claims,
        trailers: Option<&s3s::TrailingHeaders>,
        mode: u32,
        asked: &sse::Asked,
        cond: &Cond,
    ) -> S3Result<ObjectMeta> {
        let mut digests = Digests::new(claims.algorithms.iter().map(String::as_str));
        let d = self.dest(c, bucket, key).await?;
        m.version_id = d.id.clone();
        let cipher = asked.seal()?.map(|(sealed, cipher)| {
            m.sse_c = Some(sealed);
            cipher
        });
        // SSE-S3 and SSE-KMS take the streamed way, where the upload's encryption is checked.
        let small = length.is_some_and(|n| n <= SMALL_OBJECT_BYTES);
        if small && asked.at_rest().is_none() {
            // The object there now, if any, read while the body arrives.
            let path = d.path.clone();
            let (data, old) = tokio::join!(body.collect(SMALL_OBJECT_BYTES), c.stat(&path));
            let data = data?;
            let old = match old {
                Ok(st) if st.kind == FileKind::File => Some(st),
                Ok(_) => None,
                Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => None,
                Err(e) => return Err(self.fs_err(c, bucket, e).await),
            };
            digests.update(&data);
            let (md5, sums) = digests.finish();
            let claimed = claims.with_trailers(trailers);
            digest::verify(&md5, claims.content_md5.as_deref(), &sums, &claimed)?;
            m.etag = Some(etag_hex(&md5, cipher.as_ref()));
            m.checksums = sums;
            // SSE-C enciphers a copy; other objects are written from the body as it came.
            let data = match &cipher {
                Some(c) => {
                    let mut d = data.to_vec();
                    c.stream(0, 0).apply(&mut d);
                    Bytes::from(d)
                }
                None => data,
            };
            let (key_path, _) = self.names.key(bucket, key)?;
            let _held = self.commits.lock(&key_path).await;
            self.check_write(c, bucket, key, cond).await?;
            let fix = ModeFix::before(c, old.as_ref(), &path, mode).await?;
            self.put_small(c, bucket, key, &d, &data, &m, mode).await?;
            fix.after(c).await?;
            self.publish(c, bucket, key, &d).await?;
            return Ok(m);
        }
        let (w, fix) = self.begin(c, bucket, key, &d, digests, mode).await?;
        if asked.at_rest().is_some() {
            if let Err(e) = check_encrypted(c, &w).await {
                w.abort().await;
                return Err(e);
            }
            m.sse = asked.at_rest();
        }
        let w = w.encipher(cipher.as_ref().map(|c| c.stream(0, 0)));
        let done = receive(c, w, body.take_stream().await?, length, claims, trailers).await?;
        m.etag = Some(etag_hex(&done.md5, cipher.as_ref()));
        m.checksums = done.checksums;
        self.land(c, bucket, key, &d, done.upload, &m, fix, cond)
            .await?;
        Ok(m)
    }

    /// Makes finished upload `upload` `key`'s object `d` with metadata `m`: under the key's
    /// commit lock, checks `cond` against what the key holds (giving the upload up when it
    /// fails), commits, settles the mode and makes the version current.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn land(
        &self,
        c: &Arc<Client>,
        bucket: &str,
        key: &str,
        d: &versions::Dest,
        upload: nasd_client::files::Upload,
        m: &ObjectMeta,
        fix: ModeFix,
        cond: &Cond,
    ) -> S3Result<()> {
        let (path, _) = self.names.key(bucket, key)?;
        let _held = self.commits.lock(&path).await;
        if let Err(e) = self.check_write(c, bucket, key, cond).await {
            c.abort_upload(&upload).await;
            return Err(e);
        }
        if let Err(e) = c.finish_upload_with(upload, Some(m.to_xattrs())).await {
            return Err(self.fs_err(c, bucket, e).await);
        }
        fix.after(c).await?;
        self.publish(c, bucket, key, d).await
    }

    /// A body of `[start, end)` of `path`: whole when small, else streamed a piece at a
    /// time from the drives; deciphered with `dec` when the object is SSE-C.
    pub(crate) async fn body(
        &self,
        c: &Arc<Client>,
        path: &str,
        start: u64,
        end: u64,
        dec: Option<sse::ObjectCipher>,
    ) -> S3Result<StreamingBlob> {
        if end - start <= SMALL_OBJECT_BYTES {
            let mut d = c
                .read_at(path, start, end - start)
                .await
                .map_err(status_err)?;
            if d.len() as u64 != end - start {
                return Err(s3_error!(
                    InternalError,
                    "the object changed while it was read"
                ));
            }
            if let Some(dec) = &dec {
                dec.apply(start, &mut d);
            }
            return Ok(StreamingBlob::from(s3s::Body::from(Bytes::from(d))));
        }
        let piece = stream::piece_of(c, path).await.map_err(status_err)?;
        let s = stream::pieces(c.clone(), path.to_string(), start, end, piece)
            .await
            .map_err(status_err)?;
        let mut at = start;
        let s = s.map(move |r| {
            let mut p = r.map_err(|e| {
                tracing::warn!("{e}");
                std::io::Error::other(e.to_string())
            })?;
            if let Some(dec) = &dec {
                dec.apply(at, &mut p);
            }
            at += p.len() as u64;
            Ok::<_, std::io::Error>(Bytes::from(p))
        });
        Ok(StreamingBlob::wrap(SyncStream::new(s)))
    }
}

/// Streams `body` through `w` and checks it: the length announced, the digests claimed.
/// Returns the upload, written and checked, for the caller to commit; on any failure it is
/// aborted, so nothing of it ever becomes visible.
pub(crate) async fn receive(
    c: &Client,
    mut w: Writer,
    mut body: Option<StreamingBlob>,
    length: Option<u64>,
    claims: &Claims,
    trailers: Option<&s3s::TrailingHeaders>,
) -> S3Result<stream::Written> {
    let r: S3Result<()> = async {
        if let Some(b) = body.as_mut() {
            while let Some(chunk) = b.next().await {
                let chunk = chunk
                    .map_err(|e| s3_error!(IncompleteBody, "the request body ended early: {e}"))?;
                w.write(&chunk).await.map_err(status_err)?;
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = r {
        w.abort().await;
        return Err(e);
    }
    let done = w.finish().await.map_err(status_err)?;
    let checked = match length {
        Some(n) if n != done.size => Err(s3_error!(IncompleteBody)),
        _ => digest::verify(
            &done.md5,
            claims.content_md5.as_deref(),
            &done.checksums,
            &claims.with_trailers(trailers),
        ),
    };
    if let Err(e) = checked {
        c.abort_upload(&done.upload).await;
        return Err(e);
    }
    Ok(done)
}

/// Copies `range` of `src` (one version of it, deciphered with `dec` when it is SSE-C)
/// through `w` and finishes the upload (not committed yet); on any failure the upload is
/// aborted.
pub(crate) async fn copy_into(
    c: &Arc<Client>,
    mut w: Writer,
    src: &str,
    range: std::ops::Range<u64>,
    dec: Option<&sse::ObjectCipher>,
) -> S3Result<stream::Written> {
    if let Err(e) = stream::copy_range(c, src, range.start, range.end, &mut w, dec).await {
        w.abort().await;
        return Err(status_err(e));
    }
    w.finish().await.map_err(status_err)
}

/// The ETag of bytes whose MD5 is `md5`: that MD5, or for an SSE-C object its keyed form
/// ([`sse::Cipher::etag`]).
pub(crate) fn etag_hex(md5: &[u8; 16], keyed: Option<&sse::Cipher>) -> String {
    match keyed {
        Some(c) => hex::encode(c.etag(md5)),
        None => hex::encode(md5),
    }
}

/// SSE-S3's (and SSE-KMS's) check: the upload's bytes are enciphered by nasd, or the
/// request is refused, since the files of this bucket are stored in plaintext.
pub(crate) async fn check_encrypted(c: &Client, w: &Writer) -> S3Result<()> {
    if c.upload_encrypted(w.upload()).await {
        return Ok(());
    }
    Err(s3_error!(
        NotImplemented,
        "this bucket's files are stored in plaintext (their directory's policy is `plain`), so encryption at rest, which is nasd's end-to-end encryption, cannot be honoured"
    ))
}

/// Metadata `m` with the ETag (keyed with `keyed` for SSE-C) and checksums of upload `done`.
pub(crate) fn digested(
    m: ObjectMeta,
    done: &stream::Written,
    keyed: Option<&sse::Cipher>,
) -> ObjectMeta {
    ObjectMeta {
        etag: Some(etag_hex(&done.md5, keyed)),
        checksums: done.checksums.clone(),
        ..m
    }
}

/// Commits a written upload with metadata `m`, given the upload's ETag (keyed with `keyed`
/// for SSE-C) and checksums.
pub(crate) async fn commit(
    c: &Client,
    done: stream::Written,
    m: ObjectMeta,
    keyed: Option<&sse::Cipher>,
) -> S3Result<ObjectMeta> {
    let m = digested(m, &done, keyed);
    c.finish_upload_with(done.upload, Some(m.to_xattrs()))
        .await
        .map_err(status_err)?;
    Ok(m)
}

/// A stream s3s can hold (it asks for `Sync`): the inner stream is only ever polled through
/// `&mut`, so sharing `&` across threads is safe.
pub(crate) struct SyncStream<S>(std::sync::Mutex<std::pin::Pin<Box<S>>>);

impl<S> SyncStream<S> {
    pub fn new(s: S) -> Self {
        SyncStream(std::sync::Mutex::new(Box::pin(s)))
    }
}

impl<S: futures_util::Stream> futures_util::Stream for SyncStream<S> {
    type Item = S::Item;
    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        let this = self.get_mut();
        this.0
            .get_mut()
            .expect("stream lock")
            .as_mut()
            .poll_next(cx)
    }
}

/// Bytes of a refused request's body read before the error is sent: a client still sending
/// a small body then reads the error instead of a reset connection.
pub const REFUSED_BODY_BYTES_MAX: u64 = 1 << 20;

/// `e`, once up to [`REFUSED_BODY_BYTES_MAX`] of the request's body has been read.
pub(crate) async fn refuse(mut body: Option<StreamingBlob>, e: S3Error) -> S3Error {
    let mut n = 0u64;
    if let Some(b) = body.as_mut() {
        while let Some(Ok(chunk)) = b.next().await {
            n += chunk.len() as u64;
            if n > REFUSED_BODY_BYTES_MAX {
                break;
            }
        }
    }
    e
}

/// A request's body, held so that an operation run again with a fresh session
/// ([`Gateway::as_user`]) finds it: whole when it was collected, or not at all once it was
/// streamed.
pub(crate) struct BodySlot(tokio::sync::Mutex<Slot>);

enum Slot {
    Stream(Option<StreamingBlob>),
    Collected(Bytes),
    Taken,
}

impl BodySlot {
    pub fn new(body: Option<StreamingBlob>) -> BodySlot {
        BodySlot(tokio::sync::Mutex::new(Slot::Stream(body)))
    }

    /// The body as a stream, for the one run that consumes it.
    pub async fn take_stream(&self) -> S3Result<Option<StreamingBlob>> {
        let mut s = self.0.lock().await;
        match std::mem::replace(&mut *s, Slot::Taken) {
            Slot::Stream(b) => Ok(b),
            Slot::Collected(b) => Ok(Some(StreamingBlob::from(s3s::Body::from(b)))),
            Slot::Taken => Err(s3_error!(ServiceUnavailable, "{SESSION_ENDED}")),
        }
    }

    /// The whole body, of at most `max` bytes (kept for a second run).
    pub async fn collect(&self, max: u64) -> S3Result<Bytes> {
        let mut s = self.0.lock().await;
        let bytes = match &mut *s {
            Slot::Collected(b) => return Ok(b.clone()),
            Slot::Taken => return Err(s3_error!(ServiceUnavailable, "{SESSION_ENDED}")),
            Slot::Stream(b) => Bytes::from(collect(b, max).await?),
        };
        *s = Slot::Collected(bytes.clone());
        Ok(bytes)
    }

    /// `e`, once up to [`REFUSED_BODY_BYTES_MAX`] of the body has been read.
    pub async fn refuse(&self, e: S3Error) -> S3Error {
        match self.take_stream().await {
            Ok(b) => refuse(b, e).await,
            Err(_) => e,
        }
    }
}

/// The mode of a file an upload replaces stays the old file's (the manager applies a mode
/// only when it creates a file), so a write's ACL would be ignored on an overwrite: `ModeFix`
/// narrows the old file's mode before the commit to what both modes allow — neither the old
/// bytes nor the new are ever more open than asked — and sets the new one after it.
#[must_use = "the new mode is set by `after`, once the upload is committed"]
pub(crate) struct ModeFix {
    path: String,
    then: Option<u32>,
}

impl ModeFix {
    /// Narrows `old` (the file at `path` an upload replaces, if any) for mode `mode`.
    pub(crate) async fn before(
        c: &Client,
        old: Option<&FileStat>,
        path: &str,
        mode: u32,
    ) -> S3Result<ModeFix> {
        let none = ModeFix {
            path: path.to_string(),
            then: None,
        };
        let Some(old) = old.map(|st| st.mode & 0o777) else {
            return Ok(none);
        };
        if old == mode {
            return Ok(none);
        }
        let both = old & mode;
        if both != old {
            c.chmod(path, both).await.map_err(|e| match e.status() {
                Some(MgrStatus::PermissionDenied) => s3_error!(
                    AccessDenied,
                    "the object there belongs to another user, whose permissions it keeps"
                ),
                _ => status_err(e),
            })?;
        }
        Ok(ModeFix {
            path: path.to_string(),
            then: (both != mode).then_some(mode),
        })
    }

    /// Gives the committed object its mode.
    pub(crate) async fn after(self, c: &Client) -> S3Result<()> {
        match self.then {
            Some(m) => c.chmod(&self.path, m).await.map_err(status_err),
            None => Ok(()),
        }
    }
}

/// Reads a whole body of at most `max` bytes.
pub(crate) async fn collect(body: &mut Option<StreamingBlob>, max: u64) -> S3Result<Vec<u8>> {
    let mut out = vec![];
    if let Some(b) = body.as_mut() {
        while let Some(chunk) = b.next().await {
            let chunk = chunk
                .map_err(|e| s3_error!(IncompleteBody, "the request body ended early: {e}"))?;
            if (out.len() + chunk.len()) as u64 > max {
                return Err(s3_error!(EntityTooLarge));
            }
            out.extend_from_slice(&chunk);
        }
    }
    Ok(out)
}

/// An error the manager or a drive gave, as S3 names it.
pub(crate) fn status_err(e: FsError) -> S3Error {
    match e.status() {
        Some(MgrStatus::PermissionDenied) => s3_error!(AccessDenied),
        Some(MgrStatus::NoSuchPath) => s3_error!(NoSuchKey),
        Some(MgrStatus::NotEmpty) => s3_error!(BucketNotEmpty),
        Some(MgrStatus::NameTooLong) => s3_error!(KeyTooLongError),
        Some(MgrStatus::BadName) | Some(MgrStatus::InvalidArgument) => {
            tracing::debug!("{e}");
            s3_error!(
                InvalidArgument,
                "the namespace refused the name or an argument"
            )
        }
        Some(MgrStatus::Busy) | Some(MgrStatus::Conflict) => {
            s3_error!(SlowDown, "another writer holds the object; try again")
        }
        Some(MgrStatus::DiskFull) => s3_error!(InternalError, "no space left on the drives"),
        // S3 has no quota error of its own; AccessDenied with the reason is what AWS
        // services answer for an account limit.
        Some(MgrStatus::QuotaExceeded) => {
            s3_error!(AccessDenied, "the write would exceed the owner's quota")
        }
        _ => internal(&e),
    }
}

/// The digests a writer claimed, and the algorithms to compute.
#[derive(Default)]
pub(crate) struct Claims {
    pub content_md5: Option<String>,
    /// Claimed values by algorithm (from headers).
    pub values: BTreeMap<String, String>,
    /// Algorithms to compute: claimed, asked for (`x-amz-checksum-algorithm`) or announced
    /// in a trailer.
    pub algorithms: Vec<String>,
}

impl Claims {
    /// The claims of a request: `x-amz-checksum-*` headers, the algorithm asked for, and
    /// the trailer it announces (`x-amz-trailer`).
    pub fn of(headers: &http::HeaderMap, content_md5: Option<String>) -> Claims {
        let mut c = Claims {
            content_md5,
            ..Default::default()
        };
        for a in digest::ALGORITHMS {
            if let Some(v) = headers
                .get(format!("x-amz-checksum-{a}"))
                .and_then(|v| v.to_str().ok())
            {
                c.values.insert(a.to_string(), v.trim().to_string());
                c.algorithms.push(a.to_string());
            }
        }
        for h in ["x-amz-checksum-algorithm", "x-amz-sdk-checksum-algorithm"] {
            if let Some(v) = headers.get(h).and_then(|v| v.to_str().ok()) {
                c.algorithms.push(v.trim().to_ascii_lowercase());
            }
        }
        if let Some(t) = headers.get("x-amz-trailer").and_then(|v| v.to_str().ok()) {
            for name in t.split(',') {
                if let Some(a) = name
                    .trim()
                    .to_ascii_lowercase()
                    .strip_prefix("x-amz-checksum-")
                {
                    c.algorithms.push(a.to_string());
                }
            }
        }
        c
    }

    /// The claimed values, with those the body's trailer carried.
    pub(crate) fn with_trailers(
        &self,
        trailers: Option<&s3s::TrailingHeaders>,
    ) -> BTreeMap<String, String> {
        let mut v = self.values.clone();
        if let Some(h) = trailers.and_then(|t| t.take()) {
            for a in digest::ALGORITHMS {
                if let Some(x) = h
                    .get(format!("x-amz-checksum-{a}"))
                    .and_then(|x| x.to_str().ok())
                {
                    v.insert(a.to_string(), x.trim().to_string());
                }
            }
        }
        v
    }
}

/// An object's mtime as S3 shows it.
pub(crate) fn last_modified(st: &FileStat) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_micros(st.mtime_us))
}

/// The ETag of an object with metadata `m`.
pub(crate) fn etag_of(st: &FileStat, m: &ObjectMeta) -> ETag {
    match &m.etag {
        Some(e) => ETag::Strong(e.clone()),
        None => ETag::Weak(meta::weak_etag(st)),
    }
}

/// The metadata a write gives an object: its content headers and user metadata.
pub(crate) fn meta_of(
    content_type: Option<&str>,
    headers: &http::HeaderMap,
    user: Option<&Metadata>,
) -> S3Result<ObjectMeta> {
    let mut m = ObjectMeta::default();
    for h in meta::CONTENT_HEADERS {
        let v = if h == "content-type" {
            content_type.map(str::to_string)
        } else {
            headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        // `aws-chunked` names how this request's body is framed, not how the object is
        // encoded: it is not kept.
        let v = match v {
            Some(v) if h == "content-encoding" => Some(
                v.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked"))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
            .filter(|v| !v.is_empty()),
            v => v,
        };
        if let Some(v) = v {
            m.content.insert(h.to_string(), v);
        }
    }
    if let Some(u) = user {
        for (k, v) in u {
            m.user.insert(k.to_ascii_lowercase(), v.clone());
        }
    }
    nasd_proto::manager::check_xattrs(&m.to_xattrs())
        .map_err(|e| s3_error!(MetadataTooLarge, "{e}"))?;
    Ok(m)
}

/// Whether the request's conditions let it go on, as RFC 9110 §13.2.2 orders them:
/// `If-Match`, `If-Unmodified-Since`, `If-None-Match`, `If-Modified-Since`.
pub(crate) fn preconditions(
    etag: &ETag,
    st: &FileStat,
    if_match: Option<&ETagCondition>,
    if_unmodified_since: Option<&Timestamp>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
) -> S3Result<()> {
    let matches = |c: &ETagCondition| match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag.value(),
    };
    let mtime_s = (st.mtime_us / 1_000_000) as i64;
    let secs = |t: &Timestamp| time::OffsetDateTime::from(t.clone()).unix_timestamp();
    if let Some(c) = if_match {
        if !matches(c) {
            return Err(s3_error!(PreconditionFailed));
        }
    } else if let Some(t) = if_unmodified_since {
        if mtime_s > secs(t) {
            return Err(s3_error!(PreconditionFailed));
        }
    }
    if let Some(c) = if_none_match {
        if matches(c) {
            return Err(not_modified(etag));
        }
    } else if let Some(t) = if_modified_since {
        if mtime_s <= secs(t) {
            return Err(not_modified(etag));
        }
    }
    Ok(())
}

/// A 304, which carries the ETag a 200 would have (RFC 9110 §15.4.5).
fn not_modified(etag: &ETag) -> S3Error {
    let mut e = S3Error::new(S3ErrorCode::NotModified);
    e.set_status_code(http::StatusCode::NOT_MODIFIED);
    let value = match etag {
        ETag::Strong(v) => format!("\"{v}\""),
        ETag::Weak(v) => format!("W/\"{v}\""),
    };
    if let Ok(v) = http::HeaderValue::from_str(&value) {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::ETAG, v);
        e.set_headers(h);
    }
    e
}

/// A listing query from a request's parameters.
pub(crate) fn query(
    prefix: Option<String>,
    delimiter: Option<String>,
    after: Option<String>,
    max_keys: Option<i32>,
) -> S3Result<Query> {
    let max = match max_keys {
        None => list::MAX_KEYS,
        Some(n) if n < 0 => return Err(s3_error!(InvalidArgument, "max-keys is negative")),
        Some(n) => (n as usize).min(list::MAX_KEYS),
    };
    Ok(Query {
        prefix: prefix.unwrap_or_default(),
        delimiter,
        after: after.unwrap_or_default(),
        max_keys: max,
        ..Default::default()
    })
}
