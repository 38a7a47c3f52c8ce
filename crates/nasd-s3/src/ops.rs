//! The S3 API as s3s dispatches it: buckets, objects and listings here, multipart uploads
//! in [`crate::multipart`]. Each operation resolves the signer's client, maps bucket and key
//! to paths ([`crate::names`]) and calls the namespace or the streams of
//! [`crate::gateway`].

use crate::gateway::*;
use crate::list;
use crate::meta::ObjectMeta;
use nasd_proto::manager::{FileKind, MgrStatus};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};
use std::time::{Duration, UNIX_EPOCH};

fn no_content<T>(output: T) -> S3Response<T> {
    S3Response::new(output)
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let c = self.user(&req).await?;
        let root = self.names.root();
        let buckets = c
            .list(&root)
            .await
            .map_err(status_err)?
            .into_iter()
            .filter(|e| e.stat.kind == FileKind::Dir && crate::names::check_bucket(&e.name).is_ok())
            .map(|e| Bucket {
                name: Some(e.name),
                creation_date: Some(Timestamp::from(
                    UNIX_EPOCH + Duration::from_micros(e.stat.ctime_us),
                )),
                bucket_region: None,
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let c = self.user(&req).await?;
        let path = self.names.bucket(&req.input.bucket)?;
        match c.mkdir(&path, DIR_MODE).await {
            Ok(()) => {}
            Err(e) if e.status() == Some(MgrStatus::Exists) => {
                let mine = c
                    .stat(&path)
                    .await
                    .is_ok_and(|st| st.kind == FileKind::Dir && st.owner == c.user());
                return Err(if mine {
                    s3_error!(BucketAlreadyOwnedByYou)
                } else {
                    s3_error!(BucketAlreadyExists)
                });
            }
            Err(e) => return Err(status_err(e)),
        }
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{}", req.input.bucket)),
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let c = self.user(&req).await?;
        let path = self.names.bucket(&req.input.bucket)?;
        c.rmdir(&path).await.map_err(|e| match e.status() {
            Some(MgrStatus::NoSuchPath) | Some(MgrStatus::NotADirectory) => {
                s3_error!(NoSuchBucket)
            }
            _ => status_err(e),
        })?;
        Ok(no_content(DeleteBucketOutput {}))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let c = self.user(&req).await?;
        let path = self.names.bucket(&req.input.bucket)?;
        match c.stat(&path).await {
            Ok(st) if st.kind == FileKind::Dir => Ok(S3Response::new(HeadBucketOutput::default())),
            Ok(_) => Err(s3_error!(NoSuchBucket)),
            Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => Err(s3_error!(NoSuchBucket)),
            Err(e) => Err(status_err(e)),
        }
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let c = self.user(&req).await?;
        self.need_bucket(&c, &req.input.bucket).await?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let c = self.user(&req).await?;
        let S3Request {
            mut input,
            headers,
            trailing_headers,
            ..
        } = req;
        let body = input.body.take();
        let (path, dir) = match self.names.key(&input.bucket, &input.key) {
            Ok(x) => x,
            Err(e) => return Err(refuse(body, e).await),
        };
        input.body = body;
        if dir {
            // A folder marker: a directory.
            let mut body = input.body;
            if !collect(&mut body, 0).await?.is_empty() {
                return Err(s3_error!(
                    InvalidRequest,
                    "a key ending in `/` names a folder and holds no bytes"
                ));
            }
            self.make_parents(&c, &input.bucket, &input.key).await?;
            return Ok(S3Response::new(PutObjectOutput {
                e_tag: Some(ETag::Strong("d41d8cd98f00b204e9800998ecf8427e".into())),
                ..Default::default()
            }));
        }
        if input.if_none_match.is_some() || input.if_match.is_some() {
            let current = match c.getxattrs(&path).await {
                Ok((st, x)) if st.kind == FileKind::File => {
                    Some(etag_of(&st, &ObjectMeta::from_xattrs(&x)))
                }
                Ok(_) => None,
                Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => None,
                Err(e) => return Err(status_err(e)),
            };
            let ok = match (&input.if_none_match, &input.if_match, &current) {
                (Some(_), _, Some(_)) => false,
                (_, Some(ETagCondition::Any), None) => false,
                (_, Some(ETagCondition::ETag(want)), cur) => {
                    cur.as_ref().is_some_and(|e| e.value() == want.value())
                }
                _ => true,
            };
            if !ok {
                return Err(refuse(input.body, s3_error!(PreconditionFailed)).await);
            }
        }
        let m = match meta_of(
            input.content_type.as_deref(),
            &headers,
            input.metadata.as_ref(),
        ) {
            Ok(m) => m,
            Err(e) => return Err(refuse(input.body, e).await),
        };
        let claims = Claims::of(&headers, input.content_md5.clone());
        let length = input.content_length.and_then(|n| u64::try_from(n).ok());
        let m = self
            .put_stream(
                &c,
                &input.bucket,
                &input.key,
                input.body,
                length,
                m,
                &claims,
                trailing_headers.as_ref(),
            )
            .await?;
        let mut out = PutObjectOutput {
            e_tag: m.etag.clone().map(ETag::Strong),
            ..Default::default()
        };
        set_checksums!(out, m);
        Ok(S3Response::new(out))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let c = self.user(&req).await?;
        let i = &req.input;
        let (path, st, m) = self.object(&c, &i.bucket, &i.key).await?;
        let etag = etag_of(&st, &m);
        preconditions(
            &etag,
            &st,
            i.if_match.as_ref(),
            i.if_unmodified_since.as_ref(),
            i.if_none_match.as_ref(),
            i.if_modified_since.as_ref(),
        )?;
        let size = if st.kind == FileKind::Dir { 0 } else { st.size };
        let (range, content_range) = match &i.range {
            None => (0..size, None),
            Some(r) => {
                let got = r.check(size).map_err(|_| s3_error!(InvalidRange))?;
                let cr = format!("bytes {}-{}/{size}", got.start, got.end.saturating_sub(1));
                (got, Some(cr))
            }
        };
        let body = if range.is_empty() {
            StreamingBlob::from(s3s::Body::empty())
        } else {
            self.body(&c, &path, range.start, range.end).await?
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
            ..Default::default()
        };
        content_headers!(out, m, i);
        if i.checksum_mode.is_some() && i.range.is_none() {
            set_checksums!(out, m);
        }
        let mut resp = S3Response::new(out);
        if i.range.is_some() {
            resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
        }
        Ok(resp)
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let c = self.user(&req).await?;
        let i = &req.input;
        let (_, st, m) = self.object(&c, &i.bucket, &i.key).await?;
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
            content_length: Some(if st.kind == FileKind::Dir {
                0
            } else {
                st.size as i64
            }),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag),
            last_modified: Some(last_modified(&st)),
            metadata: user_meta(&m),
            parts_count: m.parts.map(|n| n as i32),
            ..Default::default()
        };
        content_headers!(out, m, i);
        if i.checksum_mode.is_some() {
            set_checksums!(out, m);
        }
        Ok(S3Response::new(out))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let c = self.user(&req).await?;
        self.delete(&c, &req.input.bucket, &req.input.key).await?;
        Ok(no_content(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let c = self.user(&req).await?;
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
            match self.delete(&c, &i.bucket, &o.key).await {
                Ok(()) if !quiet => deleted.push(DeletedObject {
                    key: Some(o.key.clone()),
                    ..Default::default()
                }),
                Ok(()) => {}
                Err(e) => errors.push(Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(o.key.clone()),
                    message: e.message().map(str::to_string),
                    version_id: None,
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let c = self.user(&req).await?;
        let i = &req.input;
        let CopySource::Bucket {
            bucket: sb,
            key: sk,
            ..
        } = &i.copy_source
        else {
            return Err(s3_error!(NotImplemented, "copies from access points"));
        };
        let (src, st, sm) = self.object(&c, sb, sk).await?;
        if st.kind == FileKind::Dir {
            return Err(s3_error!(InvalidRequest, "the source is a folder"));
        }
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
        if !replace && sb.as_ref() == i.bucket.as_str() && sk.as_ref() == i.key.as_str() {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object to itself needs the REPLACE metadata directive"
            ));
        }
        let m = if replace {
            meta_of(i.content_type.as_deref(), &req.headers, i.metadata.as_ref())?
        } else {
            ObjectMeta {
                content: sm.content.clone(),
                user: sm.user.clone(),
                ..Default::default()
            }
        };
        let algorithms: Vec<&str> = sm.checksums.keys().map(String::as_str).collect();
        let w = self
            .begin(
                &c,
                &i.bucket,
                &i.key,
                crate::digest::Digests::new(algorithms),
            )
            .await?;
        let m = copy_commit(&c, w, &src, 0..st.size, m).await?;
        let (_, nst, _) = self.object(&c, &i.bucket, &i.key).await?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: m.etag.map(ETag::Strong),
                last_modified: Some(last_modified(&nst)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let c = self.user(&req).await?;
        let i = req.input;
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
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(i.bucket),
            prefix: i.prefix,
            marker: i.marker,
            max_keys: Some(q.max_keys as i32),
            is_truncated: Some(l.truncated),
            contents: Some(objects(&l)),
            common_prefixes: Some(prefixes(&l)),
            delimiter: i.delimiter,
            next_marker,
            encoding_type: i.encoding_type,
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let c = self.user(&req).await?;
        let i = req.input;
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
        let contents = objects(&l);
        let common = prefixes(&l);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(i.bucket),
            prefix: i.prefix,
            max_keys: Some(q.max_keys as i32),
            key_count: Some((contents.len() + common.len()) as i32),
            continuation_token: i.continuation_token,
            is_truncated: Some(l.truncated),
            next_continuation_token: next,
            contents: Some(contents),
            common_prefixes: Some(common),
            delimiter: i.delimiter,
            encoding_type: i.encoding_type,
            start_after: i.start_after,
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.mp_create(req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.mp_upload_part(req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        self.mp_upload_part_copy(req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.mp_complete(req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.mp_abort(req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        self.mp_list_uploads(req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        self.mp_list_parts(req).await
    }
}

fn objects(l: &list::Listing) -> Vec<Object> {
    l.objects
        .iter()
        .map(|o| Object {
            key: Some(o.key.clone()),
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

fn prefixes(l: &list::Listing) -> Vec<CommonPrefix> {
    l.prefixes
        .iter()
        .map(|p| CommonPrefix {
            prefix: Some(p.clone()),
        })
        .collect()
}

fn user_meta(m: &ObjectMeta) -> Option<Metadata> {
    (!m.user.is_empty()).then(|| m.user.clone().into_iter().collect())
}
