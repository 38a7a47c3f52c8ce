//! The S3 API as s3s dispatches it. Each operation runs for the signer through
//! [`Gateway::as_user`] (which opens the signer's session anew if the manager ended it) and
//! is one function of the gateway: objects and listings here, buckets and ACLs in
//! [`crate::buckets`], multipart uploads in [`crate::multipart`]. Each maps bucket and key to
//! paths ([`crate::names`]) and calls the namespace or the streams of [`crate::gateway`].

use crate::acl;
use crate::conds::Cond;
use crate::gateway::*;
use crate::list;
use crate::meta::ObjectMeta;
use crate::sse;
use nasd_client::files::Client;
use nasd_proto::manager::{FileKind, FileStat};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};
use std::ops::Range;
use std::sync::Arc;

fn no_content<T>(output: T) -> S3Response<T> {
    S3Response::new(output)
}

/// Runs `$f` (a gateway method taking the client and the request) for the signer of `$req`,
/// whose bucket is `$req.input.bucket`.
macro_rules! as_user {
    ($self:ident, $req:ident, $f:ident) => {
        $self
            .as_user(&$req, Some($req.input.bucket.as_str()), |c| {
                $self.$f(c, &$req)
            })
            .await
    };
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        self.as_user(&req, None, |c| self.list_buckets_as(c, &req))
            .await
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.as_user(&req, None, |c| self.create_bucket_as(c, &req))
            .await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        as_user!(self, req, delete_bucket_as)
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        as_user!(self, req, head_bucket_as)
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        as_user!(self, req, get_bucket_location_as)
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        as_user!(self, req, get_bucket_acl_as)
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        as_user!(self, req, put_bucket_acl_as)
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        as_user!(self, req, get_object_acl_as)
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        as_user!(self, req, put_object_acl_as)
    }

    async fn put_object(
        &self,
        mut req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let body = BodySlot::new(req.input.body.take());
        let r = self
            .as_user(&req, Some(req.input.bucket.as_str()), |c| {
                self.put_object_as(c, &req, &body)
            })
            .await;
        match r {
            Err(e) => Err(body.refuse(e).await),
            ok => ok,
        }
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        as_user!(self, req, get_object_as)
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        as_user!(self, req, head_object_as)
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        as_user!(self, req, delete_object_as)
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        as_user!(self, req, delete_objects_as)
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        as_user!(self, req, copy_object_as)
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        as_user!(self, req, list_objects_as)
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        as_user!(self, req, list_objects_v2_as)
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        as_user!(self, req, list_object_versions_as)
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        as_user!(self, req, get_object_attributes_as)
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        as_user!(self, req, get_object_tagging_as)
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        as_user!(self, req, put_object_tagging_as)
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        as_user!(self, req, delete_object_tagging_as)
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        as_user!(self, req, get_bucket_tagging_as)
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        as_user!(self, req, put_bucket_tagging_as)
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        as_user!(self, req, delete_bucket_tagging_as)
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        as_user!(self, req, put_public_access_block_as)
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        as_user!(self, req, get_public_access_block_as)
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        as_user!(self, req, delete_public_access_block_as)
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        as_user!(self, req, put_bucket_policy_as)
    }

    async fn put_bucket_cors(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        as_user!(self, req, put_bucket_cors_as)
    }

    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        as_user!(self, req, get_bucket_cors_as)
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        as_user!(self, req, delete_bucket_cors_as)
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        as_user!(self, req, put_bucket_lifecycle_configuration_as)
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        as_user!(self, req, get_bucket_lifecycle_configuration_as)
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        as_user!(self, req, delete_bucket_lifecycle_as)
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        as_user!(self, req, put_bucket_versioning_as)
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        as_user!(self, req, get_bucket_versioning_as)
    }

    async fn put_bucket_encryption(
        &self,
        req: S3Request<PutBucketEncryptionInput>,
    ) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
        as_user!(self, req, put_bucket_encryption_as)
    }

    async fn get_bucket_encryption(
        &self,
        req: S3Request<GetBucketEncryptionInput>,
    ) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
        as_user!(self, req, get_bucket_encryption_as)
    }

    async fn delete_bucket_encryption(
        &self,
        req: S3Request<DeleteBucketEncryptionInput>,
    ) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
        as_user!(self, req, delete_bucket_encryption_as)
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        as_user!(self, req, mp_create)
    }

    async fn upload_part(
        &self,
        mut req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let body = BodySlot::new(req.input.body.take());
        let r = self
            .as_user(&req, Some(req.input.bucket.as_str()), |c| {
                self.mp_upload_part(c, &req, &body)
            })
            .await;
        match r {
            Err(e) => Err(body.refuse(e).await),
            ok => ok,
        }
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        as_user!(self, req, mp_upload_part_copy)
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        as_user!(self, req, mp_complete)
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        as_user!(self, req, mp_abort)
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        as_user!(self, req, mp_list_uploads)
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        as_user!(self, req, mp_list_parts)
    }
}

/// The etag S3 gives an empty object (a folder marker).
const EMPTY_ETAG: &str = "d41d8cd98f00b204e9800998ecf8427e";

impl Gateway {
    /// The mode a write of an object into bucket `name` (of stat `bucket`) asks for, by
    /// canned ACL or grant headers ([`acl`]); refused when nasd cannot enforce it, or when
    /// it is public and the bucket blocks public ACLs ([`crate::public_block`]).
    pub(crate) async fn object_mode_of(
        &self,
        c: &Client,
        name: &str,
        bucket: &FileStat,
        canned: Option<&ObjectCannedACL>,
        headers: &http::HeaderMap,
    ) -> S3Result<u32> {
        let grants = grant_headers(headers);
        let mode = match (canned, grants.is_empty()) {
            (Some(_), false) => return Err(both_acls()),
            (_, true) => acl::object_mode(canned, c.user(), &bucket.owner)?,
            (None, false) => acl::granted_mode(&grants, c.user(), false)?,
        };
        self.refuse_public_acl(c, name, mode).await?;
        acl::check_reachable(mode, bucket)?;
        Ok(mode)
    }

    async fn put_object_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutObjectInput>,
        body: &BodySlot,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let i = &req.input;
        crate::unsupported::put_object(i)?;
        let (_, dir) = self.names.key(&i.bucket, &i.key)?;
        if dir {
            // A folder marker: a directory.
            if !body.collect(0).await?.is_empty() {
                return Err(s3_error!(
                    InvalidRequest,
                    "a key ending in `/` names a folder and holds no bytes"
                ));
            }
            self.make_parents(&c, &i.bucket, &i.key).await?;
            return Ok(S3Response::new(PutObjectOutput {
                e_tag: Some(ETag::Strong(EMPTY_ETAG.into())),
                ..Default::default()
            }));
        }
        let (_, bucket) = self.bucket_stat(&c, &i.bucket).await?;
        let mode = self
            .object_mode_of(&c, &i.bucket, &bucket, i.acl.as_ref(), &req.headers)
            .await?;
        let asked = self
            .sse_asked(&c, &i.bucket, &sse::with_form_fields(&req.headers, i))
            .await?;
        let cond = Cond {
            if_match: i.if_match.clone(),
            if_none_match: i.if_none_match.clone(),
            ..Cond::default()
        };
        // Checked before the body is taken, and again as the object lands.
        self.check_write(&c, &i.bucket, &i.key, &cond).await?;
        let mut m = meta_of(i.content_type.as_deref(), &req.headers, i.metadata.as_ref())?;
        if let Some(t) = &i.tagging {
            m.tags = crate::tagging::from_header(t)?;
        }
        let claims = Claims::of(&req.headers, i.content_md5.clone());
        let length = i.content_length.and_then(|n| u64::try_from(n).ok());
        let m = self
            .put_stream(
                &c,
                &i.bucket,
                &i.key,
                body,
                length,
                m,
                &claims,
                req.trailing_headers.as_ref(),
                mode,
                &asked,
                &cond,
            )
            .await?;
        let mut out = PutObjectOutput {
            e_tag: m.etag.clone().map(ETag::Strong),
            version_id: m.version_id.clone(),
            ..Default::default()
        };
        set_checksums_typed!(out, m);
        let mut resp = S3Response::new(out);
        self.expiration_header(&c, &i.bucket, &i.key, None, &mut resp.headers)
            .await;
        sse::reply(&mut resp.headers, m.sse.as_deref(), asked.customer_md5());
        Ok(resp)
    }

    /// The bytes `partNumber` asks for: none asked, the whole object; part 1 of an object
    /// written in one piece, all of it; part N of a multipart object, where its completion
    /// recorded that part to lie. A part the object lacks is `InvalidPart`; a multipart
    /// object completed before part sizes were recorded is refused rather than answered
    /// with the wrong bytes.
    fn part_range(n: Option<i32>, m: &ObjectMeta, size: u64) -> S3Result<Option<Range<u64>>> {
        let Some(n) = n else { return Ok(None) };
        let invalid = || s3_error!(InvalidPart, "the object has no part {n}");
        if n < 1 {
            return Err(s3_error!(InvalidArgument, "part numbers start at 1"));
        }
        match m.parts {
            None if n == 1 => Ok(Some(0..size)),
            None => Err(invalid()),
            Some(count) if m.part_sizes.len() != count as usize => Err(s3_error!(
                NotImplemented,
                "the object was completed before the gateway recorded where its parts begin"
            )),
            Some(_) => {
                let i = (n - 1) as usize;
                let len = *m.part_sizes.get(i).ok_or_else(invalid)?;
                let start: u64 = m.part_sizes[..i].iter().sum();
                Ok(Some(start..start + len))
            }
        }
    }

    async fn get_object_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let i = &req.input;
        let (path, st, m) = self
            .object_at(&c, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        let size = if st.kind == FileKind::Dir { 0 } else { st.size };
        let part = Self::part_range(i.part_number, &m, size)?;
        let dec = sse::for_read(&req.headers, false, m.sse_c.as_ref(), &m.part_sizes)?;
        if part.is_some() && i.range.is_some() {
            return Err(s3_error!(
                InvalidRequest,
                "a read asks for a part or a range, not both"
            ));
        }
        let etag = etag_of(&st, &m);
        preconditions(
            &etag,
            &st,
            i.if_match.as_ref(),
            i.if_unmodified_since.as_ref(),
            i.if_none_match.as_ref(),
            i.if_modified_since.as_ref(),
        )?;
        let (range, content_range) = match (&i.range, part) {
            (None, None) => (0..size, None),
            (None, Some(p)) if m.parts.is_none() => (p, None),
            (None, Some(p)) => {
                let cr = format!("bytes {}-{}/{size}", p.start, p.end.saturating_sub(1));
                (p, Some(cr))
            }
            (Some(r), _) => {
                let got = r.check(size).map_err(|_| s3_error!(InvalidRange))?;
                let cr = format!("bytes {}-{}/{size}", got.start, got.end.saturating_sub(1));
                (got, Some(cr))
            }
        };
        let body = if range.is_empty() {
            StreamingBlob::from(s3s::Body::empty())
        } else {
            self.body(&c, &path, range.start, range.end, dec).await?
        };
        let mut out = GetObjectOutput {
            body: Some(body),
            content_length: Some((range.end - range.start) as i64),
            content_range,
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag),
            last_modified: Some(last_modified(&st)),
            metadata: user_meta(&m),
            parts_count: m.parts.map(|n| n as i32),
            tag_count: (!m.tags.is_empty()).then_some(m.tags.len() as i32),
            version_id: m.version_id.clone().or(i.version_id.clone()),
            ..Default::default()
        };
        content_headers!(out, m, i);
        if i.checksum_mode.is_some() {
            // A part of a multipart object has its own checksum; a range has none.
            match (i.part_number, m.parts) {
                (Some(n), Some(_)) => {
                    let p = part_view(&m, n as usize - 1);
                    set_checksums_typed!(out, p);
                }
                _ if i.range.is_none() => set_checksums_typed!(out, m),
                _ => {}
            }
        }
        let partial = out.content_range.is_some();
        let mut resp = S3Response::new(out);
        if partial {
            resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
        }
        if i.version_id.is_none() {
            self.expiration_header(&c, &i.bucket, &i.key, Some((&st, &m)), &mut resp.headers)
                .await;
        }
        sse::reply(
            &mut resp.headers,
            m.sse.as_deref(),
            customer_md5(&req.headers, &m),
        );
        Ok(resp)
    }

    async fn head_object_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let i = &req.input;
        let (_, st, m) = self
            .object_at(&c, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        let size = if st.kind == FileKind::Dir { 0 } else { st.size };
        let part = Self::part_range(i.part_number, &m, size)?;
        sse::for_read(&req.headers, false, m.sse_c.as_ref(), &m.part_sizes)?;
        let etag = etag_of(&st, &m);
        preconditions(
            &etag,
            &st,
            i.if_match.as_ref(),
            i.if_unmodified_since.as_ref(),
            i.if_none_match.as_ref(),
            i.if_modified_since.as_ref(),
        )?;
        let mut out = HeadObjectOutput {
            content_length: Some(part.map_or(size, |p| p.end - p.start) as i64),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag),
            last_modified: Some(last_modified(&st)),
            metadata: user_meta(&m),
            parts_count: m.parts.map(|n| n as i32),
            version_id: m.version_id.clone().or(i.version_id.clone()),
            ..Default::default()
        };
        content_headers!(out, m, i);
        if i.checksum_mode.is_some() {
            match (i.part_number, m.parts) {
                (Some(n), Some(_)) => {
                    let p = part_view(&m, n as usize - 1);
                    set_checksums_typed!(out, p);
                }
                _ => set_checksums_typed!(out, m),
            }
        }
        let mut resp = S3Response::new(out);
        if i.version_id.is_none() {
            self.expiration_header(&c, &i.bucket, &i.key, Some((&st, &m)), &mut resp.headers)
                .await;
        }
        if !m.tags.is_empty() {
            // S3 sends the count on a HEAD too, though its model has no field for it.
            resp.headers
                .insert("x-amz-tagging-count", m.tags.len().into());
        }
        sse::reply(
            &mut resp.headers,
            m.sse.as_deref(),
            customer_md5(&req.headers, &m),
        );
        Ok(resp)
    }

    async fn delete_object_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let i = &req.input;
        let cond = Cond {
            if_match: i.if_match.clone(),
            mtime: i.if_match_last_modified_time.clone(),
            size: i.if_match_size,
            ..Cond::default()
        };
        let (id, marker) = self
            .delete_version_of(&c, &i.bucket, &i.key, i.version_id.as_deref(), &cond)
            .await?;
        Ok(no_content(DeleteObjectOutput {
            version_id: id,
            delete_marker: marker.then_some(true),
            ..Default::default()
        }))
    }

    async fn delete_objects_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let i = &req.input;
        self.need_bucket(&c, &i.bucket).await?;
        if i.delete.objects.len() > list::MAX_KEYS {
            return Err(s3_error!(
                MalformedXML,
                "at most {} keys per request",
                list::MAX_KEYS
            ));
        }
        let quiet = i.delete.quiet == Some(true);
        let (mut deleted, mut errors) = (vec![], vec![]);
        for o in &i.delete.objects {
            let cond = Cond {
                if_match: o.e_tag.clone().map(ETagCondition::ETag),
                mtime: o.last_modified_time.clone(),
                size: o.size,
                ..Cond::default()
            };
            let r = self
                .delete_version_of(&c, &i.bucket, &o.key, o.version_id.as_deref(), &cond)
                .await;
            match r {
                Ok((id, marker)) if !quiet => deleted.push(DeletedObject {
                    key: Some(o.key.clone()),
                    version_id: o.version_id.clone(),
                    delete_marker: marker.then_some(true),
                    delete_marker_version_id: if marker && o.version_id.is_none() {
                        id
                    } else {
                        None
                    },
                }),
                Ok(_) => {}
                Err(e) => errors.push(Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(o.key.clone()),
                    message: e.message().map(str::to_string),
                    version_id: o.version_id.clone(),
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let i = &req.input;
        let (sb, sk, sv) = copy_source(&i.copy_source)?;
        let (src, st, sm) = self.object_at(&c, sb, sk, sv).await?;
        if st.kind == FileKind::Dir {
            return Err(s3_error!(InvalidRequest, "the source is a folder"));
        }
        let dec = sse::for_read(&req.headers, true, sm.sse_c.as_ref(), &sm.part_sizes)?;
        self.expected_source_owner(&c, &req.headers, sb).await?;
        let etag = etag_of(&st, &sm);
        preconditions(
            &etag,
            &st,
            i.copy_source_if_match.as_ref(),
            i.copy_source_if_unmodified_since.as_ref(),
            i.copy_source_if_none_match.as_ref(),
            i.copy_source_if_modified_since.as_ref(),
        )
        .map_err(|e| {
            if *e.code() == s3s::S3ErrorCode::NotModified {
                s3_error!(PreconditionFailed)
            } else {
                e
            }
        })?;
        let replace = i
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        if !replace && sv.is_none() && sb == i.bucket.as_str() && sk == i.key.as_str() {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object to itself needs the REPLACE metadata directive"
            ));
        }
        let mut m = if replace {
            meta_of(i.content_type.as_deref(), &req.headers, i.metadata.as_ref())?
        } else {
            ObjectMeta {
                content: sm.content.clone(),
                user: sm.user.clone(),
                ..Default::default()
            }
        };
        let replace_tags = i
            .tagging_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
        m.tags = match (&i.tagging, replace_tags) {
            (Some(t), true) => crate::tagging::from_header(t)?,
            (None, true) => Default::default(),
            (_, false) => sm.tags.clone(),
        };
        let (_, bucket) = self.bucket_stat(&c, &i.bucket).await?;
        let mode = self
            .object_mode_of(&c, &i.bucket, &bucket, i.acl.as_ref(), &req.headers)
            .await?;
        let asked = self.sse_asked(&c, &i.bucket, &req.headers).await?;
        let cipher = asked.seal()?.map(|(sealed, cipher)| {
            m.sse_c = Some(sealed);
            cipher
        });
        let algorithms: Vec<&str> = sm.checksums.keys().map(String::as_str).collect();
        let d = self.dest(&c, &i.bucket, &i.key).await?;
        m.version_id = d.id.clone();
        let (w, fix) = self
            .begin(
                &c,
                &i.bucket,
                &i.key,
                &d,
                crate::digest::Digests::new(algorithms),
                mode,
            )
            .await?;
        if asked.at_rest().is_some() {
            if let Err(e) = check_encrypted(&c, &w).await {
                w.abort().await;
                return Err(e);
            }
            m.sse = asked.at_rest();
        }
        let w = w.encipher(cipher.as_ref().map(|k| k.stream(0, 0)));
        let done = copy_into(&c, w, &src, 0..st.size, dec.as_ref()).await?;
        let m = digested(m, &done, cipher.as_ref());
        let none = Cond::default();
        self.land(&c, &i.bucket, &i.key, &d, done.upload, &m, fix, &none)
            .await?;
        let (_, nst, _) = self.object(&c, &i.bucket, &i.key).await?;
        let mut resp = S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: m.etag.map(ETag::Strong),
                last_modified: Some(last_modified(&nst)),
                ..Default::default()
            }),
            version_id: d.id,
            copy_source_version_id: sm.version_id.clone().or(sv.map(str::to_string)),
            ..Default::default()
        });
        sse::reply(&mut resp.headers, m.sse.as_deref(), asked.customer_md5());
        Ok(resp)
    }

    /// Checks `x-amz-source-expected-bucket-owner` against the owner of bucket `bucket`.
    pub(crate) async fn expected_source_owner(
        &self,
        c: &Client,
        headers: &http::HeaderMap,
        bucket: &str,
    ) -> S3Result<()> {
        let Some(want) = headers
            .get("x-amz-source-expected-bucket-owner")
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(());
        };
        let (_, st) = self.bucket_stat(c, bucket).await?;
        if st.owner == want {
            Ok(())
        } else {
            Err(s3_error!(
                AccessDenied,
                "the source bucket's owner is not the expected one"
            ))
        }
    }

    async fn list_objects_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let i = &req.input;
        let bucket = self.need_bucket(&c, &i.bucket).await?;
        let q = query(
            i.prefix.clone(),
            i.delimiter.clone(),
            i.marker.clone(),
            i.max_keys,
        )?;
        let l = list::list(&c, &bucket, &q).await.map_err(status_err)?;
        let next_marker = (l.truncated && q.delimiter.is_some())
            .then(|| l.last.clone())
            .flatten();
        let enc = Encoding::of(i.encoding_type.as_ref());
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(i.bucket.clone()),
            // Clients decode a v1 answer's markers, delimiter, keys and common prefixes
            // when they asked for URL encoding, but not its prefix (S3 sends it as asked).
            prefix: i.prefix.clone(),
            marker: Some(enc.apply(i.marker.as_deref().unwrap_or_default())),
            max_keys: Some(q.max_keys as i32),
            is_truncated: Some(l.truncated),
            contents: Some(with_owners(objects(&l, enc), &l)),
            common_prefixes: Some(prefixes(&l, enc)),
            delimiter: enc.opt(&non_empty(&i.delimiter)),
            next_marker: enc.opt(&next_marker),
            encoding_type: i.encoding_type.clone(),
            ..Default::default()
        }))
    }

    async fn list_objects_v2_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let i = &req.input;
        let bucket = self.need_bucket(&c, &i.bucket).await?;
        let token = match &i.continuation_token {
            Some(t) => Some(
                hex::decode(t)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| s3_error!(InvalidArgument, "bad continuation token"))?,
            ),
            None => None,
        };
        let after = match (token, &i.start_after) {
            (Some(t), Some(s)) => Some(t.max(s.clone())),
            (t, s) => t.or(s.clone()),
        };
        let q = query(i.prefix.clone(), i.delimiter.clone(), after, i.max_keys)?;
        let l = list::list(&c, &bucket, &q).await.map_err(status_err)?;
        let next = l
            .truncated
            .then(|| l.last.as_ref().map(hex::encode))
            .flatten();
        let enc = Encoding::of(i.encoding_type.as_ref());
        let mut contents = objects(&l, enc);
        if i.fetch_owner == Some(true) {
            contents = with_owners(contents, &l);
        }
        let common = prefixes(&l, enc);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(i.bucket.clone()),
            prefix: enc.opt(&i.prefix),
            max_keys: Some(q.max_keys as i32),
            key_count: Some((contents.len() + common.len()) as i32),
            continuation_token: i.continuation_token.clone(),
            is_truncated: Some(l.truncated),
            next_continuation_token: next,
            contents: Some(contents),
            common_prefixes: Some(common),
            delimiter: enc.opt(&non_empty(&i.delimiter)),
            encoding_type: i.encoding_type.clone(),
            start_after: enc.opt(&i.start_after),
            ..Default::default()
        }))
    }
}

impl Gateway {
    /// The versions of a bucket's objects ([`crate::versions`]): each key's current version
    /// (`null` when written before versioning), then its older versions and delete markers,
    /// newest first. `KeyMarker` and `VersionIdMarker` start after that version.
    async fn list_object_versions_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let i = &req.input;
        let bucket = self.need_bucket(&c, &i.bucket).await?;
        let mut q = query(
            i.prefix.clone(),
            i.delimiter.clone(),
            i.key_marker.clone(),
            i.max_keys,
        )?;
        q.versions = true;
        q.ids = self.versioning(&c, &i.bucket).await? != crate::versions::State::Off;
        q.after_version = i.version_id_marker.clone().filter(|v| !v.is_empty());
        let l = list::list(&c, &bucket, &q).await.map_err(status_err)?;
        let enc = Encoding::of(i.encoding_type.as_ref());
        let (mut versions, mut markers) = (vec![], vec![]);
        for (item, o) in l.objects.iter().zip(objects(&l, enc)) {
            let v = item.version.clone().unwrap_or(list::VersionOf {
                id: NULL_VERSION.into(),
                latest: true,
                marker: false,
            });
            if v.marker {
                markers.push(DeleteMarkerEntry {
                    key: o.key,
                    last_modified: o.last_modified,
                    is_latest: Some(v.latest),
                    version_id: Some(v.id),
                    owner: Some(acl::owner_of(&item.stat)),
                });
                continue;
            }
            versions.push(ObjectVersion {
                key: o.key,
                size: o.size,
                last_modified: o.last_modified,
                e_tag: o.e_tag,
                is_latest: Some(v.latest),
                version_id: Some(v.id),
                owner: Some(acl::owner_of(&item.stat)),
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                ..Default::default()
            });
        }
        let next_key = l.truncated.then(|| l.last.clone()).flatten();
        let next_version = next_key
            .as_ref()
            .and_then(|k| l.objects.last().filter(|o| &o.key == k))
            .and_then(|o| o.version.as_ref().map(|v| v.id.clone()));
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(i.bucket.clone()),
            prefix: enc.opt(&i.prefix),
            key_marker: enc.opt(&i.key_marker),
            version_id_marker: i.version_id_marker.clone(),
            max_keys: Some(q.max_keys as i32),
            is_truncated: Some(l.truncated),
            versions: Some(versions),
            delete_markers: (!markers.is_empty()).then_some(markers),
            common_prefixes: Some(prefixes(&l, enc)),
            delimiter: enc.opt(&non_empty(&i.delimiter)),
            next_key_marker: enc.opt(&next_key),
            next_version_id_marker: next_version,
            encoding_type: i.encoding_type.clone(),
            ..Default::default()
        }))
    }
}

/// Parts one GetObjectAttributes answer lists at most (S3's limit).
const ATTRIBUTE_PARTS_MAX: usize = 1000;

impl Gateway {
    /// What `ObjectAttributes` asks for of an object: its ETag, size, storage class,
    /// checksums (those of the whole object that its writer asked for), and for a multipart
    /// object its parts' sizes, `MaxParts` at a time after `PartNumberMarker`.
    async fn get_object_attributes_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let i = &req.input;
        let (_, st, m) = self
            .object_at(&c, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        sse::for_read(&req.headers, false, m.sse_c.as_ref(), &m.part_sizes)?;
        // Clients send the list in one header, comma-separated (with or without spaces),
        // which s3s may hand over as one item.
        let asked = |a: &str| {
            i.object_attributes
                .iter()
                .flat_map(|x| x.as_str().split(','))
                .any(|x| x.trim() == a)
        };
        let mut out = GetObjectAttributesOutput {
            last_modified: Some(last_modified(&st)),
            version_id: m.version_id.clone(),
            ..Default::default()
        };
        if asked(ObjectAttributes::ETAG) {
            out.e_tag = Some(etag_of(&st, &m));
        }
        if asked(ObjectAttributes::OBJECT_SIZE) {
            let size = if st.kind == FileKind::Dir { 0 } else { st.size };
            out.object_size = Some(size as i64);
        }
        if asked(ObjectAttributes::STORAGE_CLASS) {
            out.storage_class = Some(StorageClass::from_static(StorageClass::STANDARD));
        }
        if asked(ObjectAttributes::CHECKSUM) && !m.checksums.is_empty() {
            let mut sum = Checksum::default();
            set_checksums_typed!(sum, m);
            out.checksum = Some(sum);
        }
        if asked(ObjectAttributes::OBJECT_PARTS) && !m.part_sizes.is_empty() {
            let after = i.part_number_marker.unwrap_or(0).max(0) as usize;
            let max = match i.max_parts {
                Some(n) if n >= 0 => (n as usize).min(ATTRIBUTE_PARTS_MAX),
                _ => ATTRIBUTE_PARTS_MAX,
            };
            let parts: Vec<ObjectPart> = m
                .part_sizes
                .iter()
                .enumerate()
                .skip(after)
                .take(max)
                .map(|(k, size)| {
                    let mut part = ObjectPart {
                        part_number: Some(k as i32 + 1),
                        size: Some(*size as i64),
                        ..Default::default()
                    };
                    let p = part_view(&m, k);
                    set_checksums!(part, p);
                    part
                })
                .collect();
            let last = after + parts.len();
            let truncated = last < m.part_sizes.len();
            out.object_parts = Some(GetObjectAttributesParts {
                total_parts_count: Some(m.part_sizes.len() as i32),
                part_number_marker: i.part_number_marker,
                next_part_number_marker: truncated.then_some(last as i32),
                max_parts: Some(max as i32),
                is_truncated: Some(truncated),
                parts: Some(parts),
            });
        }
        Ok(S3Response::new(out))
    }
}

/// Part `k` (from 0) of multipart object `m` as its checksums see it: the checksum its PUT
/// recorded, in the upload's algorithm and type (none when not recorded).
fn part_view(m: &ObjectMeta, k: usize) -> ObjectMeta {
    let mut p = ObjectMeta {
        checksum_type: m.checksum_type.clone(),
        ..Default::default()
    };
    if let (Some(alg), Some(sum)) = (m.checksums.keys().next(), m.part_checksums.get(k)) {
        p.checksums.insert(alg.clone(), sum.clone());
    }
    p
}

/// The SSE-C key MD5 to report for object metadata `m` read with `headers` (checked by
/// [`sse::for_read`] already).
fn customer_md5<'h>(headers: &'h http::HeaderMap, m: &ObjectMeta) -> Option<&'h str> {
    m.sse_c.as_ref()?;
    headers
        .get("x-amz-server-side-encryption-customer-key-md5")?
        .to_str()
        .ok()
}

/// The one version of an object in an unversioned bucket.
const NULL_VERSION: &str = "null";

/// The bucket and key of a copy's source (an object of a bucket, in its one version).
/// The bucket, key and version (if one is named) a copy reads.
pub(crate) fn copy_source(s: &CopySource) -> S3Result<(&str, &str, Option<&str>)> {
    match s {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((bucket, key, version_id.as_deref())),
        _ => Err(s3_error!(NotImplemented, "copies from access points")),
    }
}

/// The grants of a request's `x-amz-grant-*` headers.
pub(crate) fn grant_headers(headers: &http::HeaderMap) -> Vec<acl::Granted> {
    let mut out = vec![];
    for (h, p) in [
        ("x-amz-grant-read", Permission::READ),
        ("x-amz-grant-write", Permission::WRITE),
        ("x-amz-grant-read-acp", Permission::READ_ACP),
        ("x-amz-grant-write-acp", Permission::WRITE_ACP),
        ("x-amz-grant-full-control", Permission::FULL_CONTROL),
    ] {
        for v in headers.get_all(h) {
            if let Ok(v) = v.to_str() {
                out.extend(acl::header_grants(p, v));
            }
        }
    }
    out
}

/// S3's answer to a canned ACL and grant headers in one request.
pub(crate) fn both_acls() -> s3s::S3Error {
    s3_error!(
        InvalidRequest,
        "a canned ACL and grant headers cannot be given together"
    )
}

/// How a listing shows keys: as they are, or URL-encoded (`EncodingType=url`, which boto3
/// asks for and decodes).
#[derive(Clone, Copy)]
pub(crate) struct Encoding(bool);

impl Encoding {
    fn of(t: Option<&EncodingType>) -> Encoding {
        Encoding(t.is_some_and(|t| t.as_str() == EncodingType::URL))
    }

    fn apply(self, s: &str) -> String {
        if !self.0 {
            return s.to_string();
        }
        let mut out = String::with_capacity(s.len());
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }

    fn opt(self, s: &Option<String>) -> Option<String> {
        s.as_deref().map(|s| self.apply(s))
    }
}

fn objects(l: &list::Listing, enc: Encoding) -> Vec<Object> {
    l.objects
        .iter()
        .map(|o| Object {
            key: Some(enc.apply(&o.key)),
            size: Some(if o.stat.kind == FileKind::Dir {
                0
            } else {
                o.stat.size as i64
            }),
            last_modified: Some(last_modified(&o.stat)),
            e_tag: Some(match &o.etag {
                Some(e) => ETag::Strong(e.clone()),
                None => ETag::Weak(crate::meta::weak_etag(&o.stat)),
            }),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            ..Default::default()
        })
        .collect()
}

/// `objects` (of listing `l`, in its order) with their owners.
fn with_owners(objects: Vec<Object>, l: &list::Listing) -> Vec<Object> {
    objects
        .into_iter()
        .zip(&l.objects)
        .map(|(o, item)| Object {
            owner: Some(acl::owner_of(&item.stat)),
            ..o
        })
        .collect()
}

/// A delimiter as an answer repeats it: an empty one is no delimiter.
fn non_empty(d: &Option<String>) -> Option<String> {
    d.clone().filter(|d| !d.is_empty())
}

fn prefixes(l: &list::Listing, enc: Encoding) -> Vec<CommonPrefix> {
    l.prefixes
        .iter()
        .map(|p| CommonPrefix {
            prefix: Some(enc.apply(p)),
        })
        .collect()
}

fn user_meta(m: &ObjectMeta) -> Option<Metadata> {
    (!m.user.is_empty()).then(|| m.user.clone().into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_encoding_keeps_unreserved_bytes_and_slashes() {
        let e = Encoding(true);
        assert_eq!(e.apply("a+b/c%20d e/ü"), "a%2Bb/c%2520d%20e/%C3%BC");
        assert_eq!(Encoding(false).apply("a+b"), "a+b");
    }
}
