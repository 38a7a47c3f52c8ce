//! Multipart uploads. An upload is a directory of its own under the gateway's staging
//! directory (`ROOT/.s3-multipart/ID`, made by the user, mode 0700, so only they and admins
//! see it): a file `upload` whose attributes name the bucket and key and carry the object's
//! metadata, and one file per part, each committed with its ETag when its PUT ends — so a
//! part, once acknowledged, survives a crash of the gateway, and nothing under the bucket
//! changes until the upload completes. Completing streams the parts, in order, into one
//! staged upload of the key, committed with the multipart ETag (the MD5 of the parts' MD5s,
//! `-N`) and the metadata in one manager transaction; aborting removes the directory. An
//! upload nobody completes or aborts stays listed (`ListMultipartUploads`) until someone
//! does or it goes stale ([`crate::stale`]); its bytes are never visible as an object. Since parts are staged outside the
//! bucket, starting an upload and storing each part need write permission on the bucket,
//! which the gateway checks itself ([`crate::acl`]); the upload's record keeps the mode its
//! ACL asked for, given to the object when it completes.

use crate::conds::Cond;
use crate::digest::Digests;
use crate::gateway::*;
use crate::meta::{self, ObjectMeta};
use crate::ops::copy_source;
use crate::sse;
use crate::stream;
use md5::Digest as _;
use nasd_client::files::Client;
use nasd_proto::manager::{FileKind, MgrStatus, Xattr};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// The staging directory's name under the root.
pub const STAGING_DIR: &str = ".s3-multipart";
/// Smallest part but the last (S3's limit).
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// Largest part (S3's limit).
pub const PART_BYTES_MAX: u64 = 5 << 30;
/// Most uploads or parts one listing returns (S3's limit).
pub const LISTED_MAX: usize = 1000;
/// Highest part number (S3's limit).
pub const PARTS_MAX: i32 = meta::PART_SIZES_MAX as i32;
const INFO: &str = "upload";
const X_BUCKET: &str = "user.s3.upload.bucket";
const X_KEY: &str = "user.s3.upload.key";
const X_ALGORITHM: &str = "user.s3.upload.algorithm";
/// The checksum type the object gets (`COMPOSITE` or `FULL_OBJECT`).
const X_CHECKSUM_TYPE: &str = "user.s3.upload.checksum-type";
const COMPOSITE: &str = "COMPOSITE";
const FULL_OBJECT: &str = "FULL_OBJECT";
/// The mode the object gets (its ACL), octal.
const X_MODE: &str = "user.s3.upload.mode";

/// An upload's record.
struct Info {
    bucket: String,
    key: String,
    meta: ObjectMeta,
    algorithm: Option<String>,
    checksum_type: Option<String>,
    mode: u32,
    initiated_us: u64,
}

fn part_name(n: i32) -> String {
    format!("{n:05}")
}

fn check_id(id: &str) -> S3Result<()> {
    if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(s3_error!(NoSuchUpload))
    }
}

fn check_part(n: i32) -> S3Result<()> {
    if (1..=PARTS_MAX).contains(&n) {
        Ok(())
    } else {
        Err(s3_error!(
            InvalidArgument,
            "part numbers run from 1 to {PARTS_MAX}"
        ))
    }
}

impl Gateway {
    /// The staging directory.
    pub fn staging(&self) -> String {
        format!("{}/{STAGING_DIR}", self.names.root().trim_end_matches('/'))
    }

    fn upload_dir(&self, id: &str) -> S3Result<String> {
        check_id(id)?;
        Ok(format!("{}/{id}", self.staging()))
    }

    /// The record of upload `id`, which must be for `bucket`/`key`.
    async fn info(&self, c: &Client, id: &str, bucket: &str, key: &str) -> S3Result<Info> {
        let dir = self.upload_dir(id)?;
        let info = read_info(c, &dir)
            .await
            .ok_or_else(|| s3_error!(NoSuchUpload))?;
        if info.bucket != bucket || info.key != key {
            return Err(s3_error!(NoSuchUpload));
        }
        Ok(info)
    }

    pub(crate) async fn mp_create(
        &self,
        c: Arc<Client>,
        req: &S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let i = &req.input;
        self.names.key(&i.bucket, &i.key)?;
        let (_, bucket) = self.bucket_stat(&c, &i.bucket).await?;
        self.need_write(&c, &bucket).await?;
        let mode = self
            .object_mode_of(&c, &i.bucket, &bucket, i.acl.as_ref(), &req.headers)
            .await?;
        let mut m = meta_of(i.content_type.as_deref(), &req.headers, i.metadata.as_ref())?;
        if let Some(t) = &i.tagging {
            m.tags = crate::tagging::from_header(t)?;
        }
        // SSE-S3 is checked on the object's upload at completion; an SSE-C upload's parts
        // are enciphered under the salt chosen now.
        let asked = self.sse_asked(&c, &i.bucket, &req.headers).await?;
        m.sse = asked.at_rest();
        if let sse::Asked::Customer(k) = &asked {
            m.sse_c = Some(sse::Sealed::new(k));
        }
        let mut id = [0u8; 16];
        nasd_crypto::random_bytes(&mut id);
        let id = hex::encode(id);
        let dir = self.upload_dir(&id)?;
        c.mkdir(&dir, 0o700).await.map_err(|e| {
            tracing::warn!("making {dir}: {e} (is the staging directory there, mode 1777?)");
            status_err(e)
        })?;
        let mut x = m.to_xattrs();
        x.push(xattr(X_BUCKET, &i.bucket));
        x.push(xattr(X_KEY, &i.key));
        x.push(xattr(X_MODE, &format!("{mode:o}")));
        let algorithm = i
            .checksum_algorithm
            .as_ref()
            .map(|a| a.as_str().to_ascii_lowercase());
        let checksum_type = checksum_type_of(algorithm.as_deref(), i.checksum_type.as_ref())?;
        if checksum_type == Some(FULL_OBJECT) && m.sse_c.is_some() {
            return Err(s3_error!(
                NotImplemented,
                "FULL_OBJECT checksums of SSE-C uploads (their parts are joined enciphered)"
            ));
        }
        if let (Some(a), Some(t)) = (&algorithm, checksum_type) {
            x.push(xattr(X_ALGORITHM, a));
            x.push(xattr(X_CHECKSUM_TYPE, t));
        }
        nasd_proto::manager::check_xattrs(&x).map_err(|e| s3_error!(MetadataTooLarge, "{e}"))?;
        c.put_bytes_with(&format!("{dir}/{INFO}"), b"", 0o600, Some(x))
            .await
            .map_err(status_err)?;
        let mut resp = S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(i.bucket.clone()),
            key: Some(i.key.clone()),
            upload_id: Some(id),
            checksum_algorithm: i.checksum_algorithm.clone(),
            checksum_type: checksum_type.map(|t| ChecksumType::from(t.to_string())),
            ..Default::default()
        });
        sse::reply(&mut resp.headers, m.sse.as_deref(), asked.customer_md5());
        Ok(resp)
    }

    pub(crate) async fn mp_upload_part(
        &self,
        c: Arc<Client>,
        req: &S3Request<UploadPartInput>,
        body: &BodySlot,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let i = &req.input;
        check_part(i.part_number)?;
        let info = self.info(&c, &i.upload_id, &i.bucket, &i.key).await?;
        // The upload's user may still write to the bucket (its ACL may have changed).
        let (_, bucket) = self.bucket_stat(&c, &i.bucket).await?;
        self.need_write(&c, &bucket).await?;
        let dir = self.upload_dir(&i.upload_id)?;
        let mut claims = Claims::of(&req.headers, i.content_md5.clone());
        claims.algorithms.extend(info.algorithm.clone());
        let cipher = part_cipher(&info, &req.headers)?;
        let m = self
            .put_part(
                &c,
                &format!("{dir}/{}", part_name(i.part_number)),
                body,
                req,
                &claims,
                cipher.as_ref().map(|k| (k, i.part_number as u32)),
            )
            .await?;
        let mut out = UploadPartOutput {
            e_tag: m.etag.clone().map(ETag::Strong),
            ..Default::default()
        };
        set_checksums!(out, m);
        let mut resp = S3Response::new(out);
        sse::reply(
            &mut resp.headers,
            info.meta.sse.as_deref(),
            customer_md5(&info, &req.headers),
        );
        Ok(resp)
    }

    /// Streams the body of `req` (in `body`) into the file `path` (a part), committed with
    /// its ETag and checksums; enciphered as part `cipher.1` when the upload is SSE-C.
    async fn put_part(
        &self,
        c: &Arc<Client>,
        path: &str,
        body: &BodySlot,
        req: &S3Request<UploadPartInput>,
        claims: &Claims,
        cipher: Option<(&sse::Cipher, u32)>,
    ) -> S3Result<ObjectMeta> {
        let length = req.input.content_length.and_then(|n| u64::try_from(n).ok());
        if length.is_some_and(|n| n > PART_BYTES_MAX) {
            return Err(s3_error!(EntityTooLarge));
        }
        let u = c
            .begin_upload(path, 0o600)
            .await
            .map_err(|e| match e.status() {
                Some(MgrStatus::NoSuchPath) => s3_error!(NoSuchUpload),
                _ => status_err(e),
            })?;
        let digests = Digests::new(claims.algorithms.iter().map(String::as_str));
        let w = stream::Writer::new(c.clone(), u, digests)
            .await
            .map_err(status_err)?
            .encipher(cipher.map(|(k, n)| k.stream(n, 0)));
        let trailers = req.trailing_headers.as_ref();
        let done = receive(c, w, body.take_stream().await?, length, claims, trailers).await?;
        commit(c, done, ObjectMeta::default(), cipher.map(|(k, _)| k)).await
    }

    pub(crate) async fn mp_upload_part_copy(
        &self,
        c: Arc<Client>,
        req: &S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let i = &req.input;
        check_part(i.part_number)?;
        let info = self.info(&c, &i.upload_id, &i.bucket, &i.key).await?;
        let (_, bucket) = self.bucket_stat(&c, &i.bucket).await?;
        self.need_write(&c, &bucket).await?;
        let (sb, sk, sv) = copy_source(&i.copy_source)?;
        self.expected_source_owner(&c, &req.headers, sb).await?;
        let (src, st, sm) = self.object_at(&c, sb, sk, sv).await?;
        let dec = sse::for_read(&req.headers, true, sm.sse_c.as_ref(), &sm.part_sizes)?;
        let cipher = part_cipher(&info, &req.headers)?;
        let range = match &i.copy_source_range {
            None => 0..st.size,
            Some(r) => parse_copy_range(r, st.size)?,
        };
        let dir = self.upload_dir(&i.upload_id)?;
        let path = format!("{dir}/{}", part_name(i.part_number));
        let u = c.begin_upload(&path, 0o600).await.map_err(status_err)?;
        let w = stream::Writer::new(c.clone(), u, Digests::new(info.algorithm.as_deref()))
            .await
            .map_err(status_err)?
            .encipher(cipher.as_ref().map(|k| k.stream(i.part_number as u32, 0)));
        let done = copy_into(&c, w, &src, range, dec.as_ref()).await?;
        let m = commit(&c, done, ObjectMeta::default(), cipher.as_ref()).await?;
        let mut resp = S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: m.etag.map(ETag::Strong),
                last_modified: Some(Timestamp::from(std::time::SystemTime::now())),
                ..Default::default()
            }),
            ..Default::default()
        });
        sse::reply(
            &mut resp.headers,
            info.meta.sse.as_deref(),
            customer_md5(&info, &req.headers),
        );
        Ok(resp)
    }

    /// The parts of upload directory `dir` by number: (size, ETag, mtime).
    async fn parts(&self, c: &Client, dir: &str) -> S3Result<BTreeMap<i32, (u64, String, u64)>> {
        let entries = c
            .list_with(dir, Some(meta::ETAG))
            .await
            .map_err(|e| match e.status() {
                Some(MgrStatus::NoSuchPath) => s3_error!(NoSuchUpload),
                _ => status_err(e),
            })?;
        let mut parts = BTreeMap::new();
        for e in entries {
            let (Ok(num), Some(etag)) = (e.name.parse::<i32>(), e.xattr) else {
                continue;
            };
            let etag = String::from_utf8_lossy(&etag).trim_matches('"').to_string();
            parts.insert(num, (e.stat.size, etag, e.stat.mtime_us));
        }
        Ok(parts)
    }

    pub(crate) async fn mp_complete(
        &self,
        c: Arc<Client>,
        req: &S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let i = &req.input;
        let info = match self.info(&c, &i.upload_id, &i.bucket, &i.key).await {
            Ok(info) => info,
            Err(e) => return self.completed_before(&c, req).await?.ok_or(e),
        };
        // An SSE-C upload completes with the key it was started with (as its parts were
        // stored), any other without one.
        part_cipher(&info, &req.headers)?;
        let dir = self.upload_dir(&i.upload_id)?;
        let asked: Vec<(i32, String)> = i
            .multipart_upload
            .as_ref()
            .and_then(|m| m.parts.as_ref())
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        (
                            p.part_number.unwrap_or(0),
                            p.e_tag
                                .as_ref()
                                .map(|e| e.value().to_string())
                                .unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        if asked.is_empty() {
            return Err(s3_error!(MalformedXML, "the upload names no parts"));
        }
        if asked.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(s3_error!(InvalidPartOrder));
        }
        let have = self.parts(&c, &dir).await?;
        let mut md5s = md5::Md5::new();
        for (k, (n, etag)) in asked.iter().enumerate() {
            let Some((size, e, _)) = have.get(n) else {
                return Err(s3_error!(InvalidPart, "part {n} was not uploaded"));
            };
            if e != etag.trim_matches('"') {
                return Err(s3_error!(InvalidPart, "part {n} has another ETag"));
            }
            if k + 1 < asked.len() && *size < PART_BYTES_MIN {
                return Err(s3_error!(EntityTooSmall, "part {n} is smaller than 5 MiB"));
            }
            md5s.update(hex::decode(e).unwrap_or_default());
        }
        let cond = Cond {
            if_match: i.if_match.clone(),
            if_none_match: i.if_none_match.clone(),
            ..Cond::default()
        };
        // Checked now, before the parts are joined, and again as the object lands.
        self.check_write(&c, &i.bucket, &i.key, &cond).await?;
        let part_sums = part_checksums(&c, &dir, &info, i).await?;
        let composite = checked_composite(&info, i, &part_sums)?;
        // A FULL_OBJECT checksum is the digest of every byte, taken as the parts are joined.
        let full = (info.checksum_type.as_deref() == Some(FULL_OBJECT))
            .then_some(info.algorithm.as_deref())
            .flatten();
        let d = self.dest(&c, &i.bucket, &i.key).await?;
        let (mut w, fix) = self
            .begin(&c, &i.bucket, &i.key, &d, Digests::new(full), info.mode)
            .await?;
        if info.meta.sse.is_some() {
            if let Err(e) = check_encrypted(&c, &w).await {
                w.abort().await;
                return Err(e);
            }
        }
        // Parts are joined as stored: an SSE-C upload's stay enciphered under their numbers,
        // which the object records unless they run 1 to N.
        for (n, _) in &asked {
            let path = format!("{dir}/{}", part_name(*n));
            let size = have[n].0;
            if let Err(e) = stream::copy_range(&c, &path, 0, size, &mut w, None).await {
                w.abort().await;
                return Err(status_err(e));
            }
        }
        let done = w.finish().await.map_err(status_err)?;
        let checksums = match composite {
            Some(sums) => sums,
            None => {
                let claimed = claimed_whole(i);
                let (md5, sums) = (done.md5, &done.checksums);
                if let Err(e) = crate::digest::verify(&md5, None, sums, &claimed) {
                    c.abort_upload(&done.upload).await;
                    return Err(e);
                }
                done.checksums.clone()
            }
        };
        let etag = format!("{}-{}", hex::encode(md5s.finalize()), asked.len());
        let mut info = info;
        if let Some(s) = info.meta.sse_c.as_mut() {
            let in_order = asked
                .iter()
                .enumerate()
                .all(|(k, (n, _))| *n == k as i32 + 1);
            if !in_order {
                s.numbers = asked.iter().map(|(n, _)| *n as u32).collect();
            }
        }
        let customer = customer_md5(&info, &req.headers).map(str::to_string);
        let m = ObjectMeta {
            upload_id: Some(i.upload_id.clone()),
            etag: Some(etag.clone()),
            checksums,
            checksum_type: info.checksum_type.clone(),
            part_checksums: match part_sums.len() <= meta::PART_CHECKSUMS_MAX {
                true => part_sums,
                false => vec![],
            },
            parts: Some(asked.len() as u32),
            part_sizes: asked.iter().map(|(n, _)| have[n].0).collect(),
            version_id: d.id.clone(),
            ..info.meta
        };
        self.land(&c, &i.bucket, &i.key, &d, done.upload, &m, fix, &cond)
            .await?;
        remove_upload(&c, &dir).await;
        let mut out = CompleteMultipartUploadOutput {
            version_id: d.id.clone(),
            bucket: Some(i.bucket.clone()),
            key: Some(i.key.clone()),
            e_tag: Some(ETag::Strong(etag)),
            location: Some(format!("/{}/{}", i.bucket, i.key)),
            ..Default::default()
        };
        set_checksums_typed!(out, m);
        let mut resp = S3Response::new(out);
        sse::reply(&mut resp.headers, m.sse.as_deref(), customer.as_deref());
        Ok(resp)
    }

    /// The answer to completing an upload again: its record is gone, but when the key holds
    /// the object it made (`user.s3.upload-id`), the completion stands and is answered as
    /// before (S3 answers a repeated completion so; a client whose first answer was lost
    /// retries). `None` when the key holds no object of that upload.
    async fn completed_before(
        &self,
        c: &Client,
        req: &S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<Option<S3Response<CompleteMultipartUploadOutput>>> {
        let i = &req.input;
        check_id(&i.upload_id)?;
        let m = match self.object(c, &i.bucket, &i.key).await {
            Ok((_, _, m)) => m,
            Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchKey => return Ok(None),
            Err(e) => return Err(e),
        };
        if m.upload_id.as_deref() != Some(i.upload_id.as_str()) {
            return Ok(None);
        }
        let mut out = CompleteMultipartUploadOutput {
            bucket: Some(i.bucket.clone()),
            key: Some(i.key.clone()),
            e_tag: m.etag.clone().map(ETag::Strong),
            location: Some(format!("/{}/{}", i.bucket, i.key)),
            ..Default::default()
        };
        set_checksums_typed!(out, m);
        Ok(Some(S3Response::new(out)))
    }

    pub(crate) async fn mp_abort(
        &self,
        c: Arc<Client>,
        req: &S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let i = &req.input;
        self.info(&c, &i.upload_id, &i.bucket, &i.key).await?;
        remove_upload(&c, &self.upload_dir(&i.upload_id)?).await;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    pub(crate) async fn mp_list_uploads(
        &self,
        c: Arc<Client>,
        req: &S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let i = &req.input;
        let (_, bucket) = self.bucket_stat(&c, &i.bucket).await?;
        self.need_list(&c, &bucket).await?;
        let staging = self.staging();
        let prefix = i.prefix.clone().unwrap_or_default();
        let max = i
            .max_uploads
            .map_or(LISTED_MAX, |n| n.clamp(0, LISTED_MAX as i32) as usize);
        let mut found = vec![];
        for e in c.list(&staging).await.map_err(status_err)? {
            if !is_upload_dir(&e) {
                continue;
            }
            // Other users' uploads are not readable: skipped.
            let Some(info) = read_info(&c, &format!("{staging}/{}", e.name)).await else {
                continue;
            };
            if info.bucket == i.bucket && info.key.starts_with(&prefix) {
                found.push((info.key, info.initiated_us, e.name));
            }
        }
        found.sort();
        if let Some(m) = &i.key_marker {
            found.retain(|(k, _, _)| k > m);
        }
        let truncated = found.len() > max;
        found.truncate(max);
        let uploads = found
            .into_iter()
            .map(|(key, initiated, id)| MultipartUpload {
                key: Some(key),
                upload_id: Some(id),
                initiated: Some(Timestamp::from(
                    UNIX_EPOCH + Duration::from_micros(initiated),
                )),
                ..Default::default()
            })
            .collect::<Vec<_>>();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(i.bucket.clone()),
            prefix: i.prefix.clone(),
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: uploads.last().and_then(|u| u.key.clone()),
            uploads: Some(uploads),
            ..Default::default()
        }))
    }

    pub(crate) async fn mp_list_parts(
        &self,
        c: Arc<Client>,
        req: &S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let i = &req.input;
        self.info(&c, &i.upload_id, &i.bucket, &i.key).await?;
        let dir = self.upload_dir(&i.upload_id)?;
        let have = self.parts(&c, &dir).await?;
        let marker = i.part_number_marker.unwrap_or(0);
        let max = i
            .max_parts
            .map_or(LISTED_MAX, |n| n.clamp(0, LISTED_MAX as i32) as usize);
        let mut parts: Vec<Part> = have
            .range(marker + 1..)
            .map(|(n, (size, etag, mtime))| Part {
                part_number: Some(*n),
                size: Some(*size as i64),
                e_tag: Some(ETag::Strong(etag.clone())),
                last_modified: Some(Timestamp::from(UNIX_EPOCH + Duration::from_micros(*mtime))),
                ..Default::default()
            })
            .take(max + 1)
            .collect();
        let truncated = parts.len() > max;
        parts.truncate(max);
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(i.bucket.clone()),
            key: Some(i.key.clone()),
            upload_id: Some(i.upload_id.clone()),
            max_parts: Some(max as i32),
            is_truncated: Some(truncated),
            next_part_number_marker: parts.last().and_then(|p| p.part_number),
            parts: Some(parts),
            ..Default::default()
        }))
    }
}

/// The checksum type of an upload with checksum `algorithm` (lower case): the one asked, or
/// the algorithm's default; S3's rules hold (SHA-1 and SHA-256 compose, CRC-64/NVME covers
/// the whole object, CRC-32 and CRC-32C do either).
fn checksum_type_of(
    algorithm: Option<&str>,
    asked: Option<&ChecksumType>,
) -> S3Result<Option<&'static str>> {
    let asked = asked.map(|t| t.as_str());
    let t = match (algorithm, asked) {
        (None, None) => return Ok(None),
        (None, Some(_)) => {
            return Err(s3_error!(
                InvalidRequest,
                "a checksum type needs a checksum algorithm"
            ))
        }
        (Some("crc64nvme"), None | Some(FULL_OBJECT)) => FULL_OBJECT,
        (Some("sha1" | "sha256" | "crc32" | "crc32c"), None | Some(COMPOSITE)) => COMPOSITE,
        (Some("crc32" | "crc32c"), Some(FULL_OBJECT)) => FULL_OBJECT,
        (Some(a), Some(t)) => {
            return Err(s3_error!(
                InvalidRequest,
                "the {a} checksum has no {t} type"
            ))
        }
        (Some(a), None) => return Err(s3_error!(InvalidRequest, "no checksum {a}")),
    };
    Ok(Some(t))
}

/// The checksum the completion names for each part, in the upload's algorithm.
fn part_claim(p: &CompletedPart, algorithm: &str) -> Option<String> {
    match algorithm {
        "crc32" => p.checksum_crc32.clone(),
        "crc32c" => p.checksum_crc32c.clone(),
        "crc64nvme" => p.checksum_crc64nvme.clone(),
        "sha1" => p.checksum_sha1.clone(),
        "sha256" => p.checksum_sha256.clone(),
        _ => None,
    }
}

/// The whole-object checksums a completion claims, by algorithm.
fn claimed_whole(i: &CompleteMultipartUploadInput) -> BTreeMap<String, String> {
    [
        ("crc32", &i.checksum_crc32),
        ("crc32c", &i.checksum_crc32c),
        ("crc64nvme", &i.checksum_crc64nvme),
        ("sha1", &i.checksum_sha1),
        ("sha256", &i.checksum_sha256),
    ]
    .into_iter()
    .filter_map(|(a, v)| Some((a.to_string(), v.clone()?)))
    .collect()
}

/// The checksums of the parts a completion names, in its order, as each part's PUT recorded
/// them (none when the upload has no algorithm); a part the completion names with another
/// checksum is `InvalidPart`.
async fn part_checksums(
    c: &Client,
    dir: &str,
    info: &Info,
    i: &CompleteMultipartUploadInput,
) -> S3Result<Vec<String>> {
    let Some(alg) = &info.algorithm else {
        return Ok(vec![]);
    };
    let name = format!("user.s3.checksum.{alg}");
    let stored: BTreeMap<i32, String> = c
        .list_with(dir, Some(&name))
        .await
        .map_err(status_err)?
        .into_iter()
        .filter_map(|e| Some((e.name.parse().ok()?, String::from_utf8(e.xattr?).ok()?)))
        .collect();
    let parts = i.multipart_upload.as_ref().and_then(|m| m.parts.as_ref());
    let mut sums = vec![];
    for p in parts.into_iter().flatten() {
        let n = p.part_number.unwrap_or(0);
        let sum = stored
            .get(&n)
            .ok_or_else(|| s3_error!(InvalidPart, "part {n} has no {alg} checksum"))?;
        if part_claim(p, alg).is_some_and(|claim| claim != *sum) {
            return Err(s3_error!(
                InvalidPart,
                "part {n} has another {alg} checksum"
            ));
        }
        sums.push(sum.clone());
    }
    Ok(sums)
}

/// A `COMPOSITE` upload's object checksum, from its parts' (`None` for other uploads),
/// checked against what the completion claims (with or without its `-N`). A claim for an
/// algorithm the upload does not have cannot be checked: refused.
fn checked_composite(
    info: &Info,
    i: &CompleteMultipartUploadInput,
    part_sums: &[String],
) -> S3Result<Option<BTreeMap<String, String>>> {
    let claimed = claimed_whole(i);
    if let Some(a) = claimed.keys().find(|a| Some(*a) != info.algorithm.as_ref()) {
        return Err(s3_error!(
            BadDigest,
            "the upload was not started with the {a} checksum"
        ));
    }
    let (Some(alg), Some(COMPOSITE)) = (&info.algorithm, info.checksum_type.as_deref()) else {
        return Ok(None);
    };
    let parts: Vec<&str> = part_sums.iter().map(String::as_str).collect();
    let sum = crate::digest::composite(alg, &parts)
        .ok_or_else(|| s3_error!(InternalError, "a part's {alg} checksum is not base64"))?;
    if let Some(claim) = claimed.get(alg) {
        let bare = sum.rsplit_once('-').map_or(sum.as_str(), |(b, _)| b);
        if claim != &sum && claim != bare {
            return Err(s3_error!(
                BadDigest,
                "the {alg} checksum you specified did not match the parts'"
            ));
        }
    }
    Ok(Some(BTreeMap::from([(alg.clone(), sum)])))
}

/// The cipher of a part of `info`'s upload, from the SSE-C key `h` must send when the
/// upload is SSE-C (the one it was started with) and must not send otherwise.
fn part_cipher(info: &Info, h: &http::HeaderMap) -> S3Result<Option<sse::Cipher>> {
    sse::open(h, false, info.meta.sse_c.as_ref())
}

/// The SSE-C key MD5 `h` sent for `info`'s SSE-C upload, to report back.
fn customer_md5<'h>(info: &Info, h: &'h http::HeaderMap) -> Option<&'h str> {
    info.meta.sse_c.as_ref()?;
    h.get("x-amz-server-side-encryption-customer-key-md5")?
        .to_str()
        .ok()
}

fn xattr(name: &str, value: &str) -> Xattr {
    Xattr {
        name: name.into(),
        value: value.as_bytes().to_vec(),
    }
}

/// The record of the upload in `dir`, if this client may read it.
async fn read_info(c: &Client, dir: &str) -> Option<Info> {
    let (st, x) = c.getxattrs(&format!("{dir}/{INFO}")).await.ok()?;
    let get = |n: &str| {
        x.iter()
            .find(|a| a.name == n)
            .and_then(|a| String::from_utf8(a.value.clone()).ok())
    };
    Some(Info {
        bucket: get(X_BUCKET)?,
        key: get(X_KEY)?,
        algorithm: get(X_ALGORITHM),
        checksum_type: get(X_CHECKSUM_TYPE),
        mode: get(X_MODE)
            .and_then(|m| u32::from_str_radix(&m, 8).ok())
            .map_or(crate::acl::OBJECT_MODE, |m| m & 0o777),
        meta: ObjectMeta::from_xattrs(&x),
        initiated_us: st.ctime_us,
    })
}

/// The bucket and key of the upload in `dir`, and when it was started (its record's modify
/// time, in microseconds; the record is written once).
pub(crate) async fn upload_origin(c: &Client, dir: &str) -> Option<(String, String, u64)> {
    let (st, x) = c.getxattrs(&format!("{dir}/{INFO}")).await.ok()?;
    let get = |n: &str| {
        x.iter()
            .find(|a| a.name == n)
            .and_then(|a| String::from_utf8(a.value.clone()).ok())
    };
    Some((get(X_BUCKET)?, get(X_KEY)?, st.mtime_us))
}

/// Whether the staging directory's entry `e` is an upload's directory.
pub(crate) fn is_upload_dir(e: &nasd_proto::manager::DirEntry) -> bool {
    e.stat.kind == FileKind::Dir && check_id(&e.name).is_ok()
}

/// Removes an upload's directory and everything in it; whether it is gone (best effort:
/// what is left is only ever seen by its user, listed as an upload to abort, and removed by
/// a later sweep of stale uploads, [`crate::stale`]).
pub(crate) async fn remove_upload(c: &Client, dir: &str) -> bool {
    if let Ok(entries) = c.list(dir).await {
        for e in &entries {
            if let Err(e) = c.unlink(&format!("{dir}/{}", e.name)).await {
                tracing::warn!("removing a part of {dir}: {e}");
                return false;
            }
        }
    }
    match c.rmdir(dir).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("removing {dir}: {e}");
            false
        }
    }
}

/// `bytes=first-last` of an object of `size` bytes.
fn parse_copy_range(r: &str, size: u64) -> S3Result<std::ops::Range<u64>> {
    let bad = || s3_error!(InvalidArgument, "bad x-amz-copy-source-range {r:?}");
    let (a, b) = r
        .strip_prefix("bytes=")
        .and_then(|s| s.split_once('-'))
        .ok_or_else(bad)?;
    let (first, last): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if first > last || last >= size {
        return Err(s3_error!(InvalidRange));
    }
    Ok(first..last + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_ids_cannot_name_other_paths() {
        assert!(check_id(&"a".repeat(32)).is_ok());
        for id in [
            "../x",
            "",
            &"a".repeat(31),
            &"g".repeat(32),
            "0123456789abcdef0123456789abcd/.",
        ] {
            assert!(check_id(id).is_err(), "{id}");
        }
    }

    #[test]
    fn copy_ranges_are_checked() {
        assert_eq!(parse_copy_range("bytes=0-9", 10).unwrap(), 0..10);
        assert_eq!(parse_copy_range("bytes=5-5", 10).unwrap(), 5..6);
        for r in ["bytes=0-10", "bytes=5-4", "0-1", "bytes=a-b", "bytes=-5"] {
            assert!(parse_copy_range(r, 10).is_err(), "{r}");
        }
    }
}
