//! Buckets and ACLs (issue 22 §1): a bucket is a directory under the root, owned by the user
//! who made it, mode 0700 unless its ACL says otherwise; ListBuckets shows a user their own
//! buckets, a page at a time; an ACL set is a mode set ([`crate::acl`]) and an ACL read is
//! computed from the modes the manager enforces. A bucket's default encryption (SSE-S3 only)
//! is an attribute of its directory ([`crate::sse`]).

use crate::acl;
use crate::acl::need_owner;
use crate::gateway::*;
use crate::ops::{both_acls, grant_headers};
use crate::server::REGION_DEFAULT;
use crate::sse;
use nasd_client::files::Client;
use nasd_proto::manager::{FileKind, MgrStatus};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// Most buckets one ListBuckets page shows (S3's limit, and its page when none is asked).
pub const LIST_BUCKETS_MAX: usize = 10_000;

impl Gateway {
    pub(crate) async fn list_buckets_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let i = &req.input;
        let max = match i.max_buckets {
            None => LIST_BUCKETS_MAX,
            Some(n) if n < 1 || n as usize > LIST_BUCKETS_MAX => {
                return Err(s3_error!(
                    InvalidArgument,
                    "max-buckets runs from 1 to {LIST_BUCKETS_MAX}"
                ))
            }
            Some(n) => n as usize,
        };
        let after = match &i.continuation_token {
            Some(t) => hex::decode(t)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| s3_error!(InvalidArgument, "bad continuation token"))?,
            None => String::new(),
        };
        let prefix = i.prefix.clone().unwrap_or_default();
        let mut mine: Vec<_> = c
            .list(&self.names.root())
            .await
            .map_err(status_err)?
            .into_iter()
            .filter(|e| {
                e.stat.kind == FileKind::Dir
                    && e.stat.owner == c.user()
                    && crate::names::check_bucket(&e.name).is_ok()
                    && e.name.starts_with(&prefix)
                    && e.name > after
            })
            .collect();
        mine.sort_by(|a, b| a.name.cmp(&b.name));
        let more = mine.len() > max;
        mine.truncate(max);
        let token = more
            .then(|| mine.last().map(|e| hex::encode(&e.name)))
            .flatten();
        let buckets = mine
            .into_iter()
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
            owner: Some(Owner {
                id: Some(c.user().to_string()),
                display_name: Some(c.user().to_string()),
            }),
            continuation_token: token,
            prefix: i.prefix.clone(),
        }))
    }

    pub(crate) async fn create_bucket_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let i = &req.input;
        crate::names::check_new_bucket(&i.bucket)?;
        self.check_location(i.create_bucket_configuration.as_ref())?;
        let path = self.names.bucket(&i.bucket)?;
        let mode = bucket_mode_of(c.user(), i.acl.as_ref(), &req.headers, None)?;
        match c.mkdir(&path, mode).await {
            Ok(()) => {}
            Err(e) if e.status() == Some(MgrStatus::Exists) => {
                let st = c.stat(&path).await.ok();
                let mine = st
                    .as_ref()
                    .filter(|st| st.kind == FileKind::Dir && st.owner == c.user());
                match mine {
                    None => return Err(s3_error!(BucketAlreadyExists)),
                    // us-east-1's legacy answer: making one's own bucket again succeeds and
                    // changes nothing; asking for other permissions is refused, never applied
                    // or ignored.
                    Some(st) if self.region == REGION_DEFAULT => {
                        if st.mode & 0o777 != mode {
                            return Err(s3_error!(
                                BucketAlreadyExists,
                                "the bucket exists with other permissions; PutBucketAcl changes them"
                            ));
                        }
                    }
                    Some(_) => return Err(s3_error!(BucketAlreadyOwnedByYou)),
                }
            }
            Err(e) => return Err(status_err(e)),
        }
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{}", i.bucket)),
        }))
    }

    pub(crate) async fn delete_bucket_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let path = self.names.bucket(&req.input.bucket)?;
        c.rmdir(&path).await.map_err(|e| match e.status() {
            Some(MgrStatus::NoSuchPath) | Some(MgrStatus::NotADirectory) => {
                s3_error!(NoSuchBucket)
            }
            _ => status_err(e),
        })?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    pub(crate) async fn head_bucket_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let (_, st) = self.bucket_stat(&c, &req.input.bucket).await?;
        self.need_list(&c, &st).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    pub(crate) async fn get_bucket_location_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let (_, st) = self.bucket_stat(&c, &req.input.bucket).await?;
        self.need_list(&c, &st).await?;
        // us-east-1 is answered as no constraint, as S3 does.
        let location_constraint = (self.region != REGION_DEFAULT)
            .then(|| BucketLocationConstraint::from(self.region.clone()));
        Ok(S3Response::new(GetBucketLocationOutput {
            location_constraint,
        }))
    }

    /// A bucket is made only in the gateway's region: a `LocationConstraint` naming another
    /// is refused (S3's `InvalidLocationConstraint`), never accepted and ignored.
    fn check_location(&self, conf: Option<&CreateBucketConfiguration>) -> S3Result<()> {
        let asked = conf.and_then(|c| c.location_constraint.as_ref());
        match asked.map(|l| l.as_str()) {
            None | Some("") => Ok(()),
            Some(l) if l == self.region => Ok(()),
            Some(l) => Err(s3_error!(
                InvalidLocationConstraint,
                "this gateway serves region {}, not {l}",
                self.region
            )),
        }
    }

    pub(crate) async fn get_bucket_acl_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        let (_, st) = self.owned_bucket(&c, &req.input.bucket).await?;
        // The root lets everyone through (1777): what the bucket's bits grant is enforced.
        let p = acl::enforced(&st, true, (1, 1));
        Ok(S3Response::new(GetBucketAclOutput {
            grants: p.grants,
            owner: p.owner,
        }))
    }

    pub(crate) async fn put_bucket_acl_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        let i = &req.input;
        let (path, _) = self.owned_bucket(&c, &i.bucket).await?;
        let mode = bucket_mode_of(
            c.user(),
            i.acl.as_ref(),
            &req.headers,
            i.access_control_policy.as_ref(),
        )?;
        self.set_bucket_mode(&c, &i.bucket, &path, mode).await?;
        self.chmod_prefixes(&c, &path, mode).await?;
        Ok(S3Response::new(PutBucketAclOutput::default()))
    }

    /// Gives every directory below bucket `path` (its keys' prefixes) mode `mode`, as new
    /// ones get: a prefix is as open as its bucket.
    async fn chmod_prefixes(&self, c: &Client, path: &str, mode: u32) -> S3Result<()> {
        let mut todo = vec![path.to_string()];
        let mut refused = 0usize;
        while let Some(dir) = todo.pop() {
            for e in c.list(&dir).await.map_err(status_err)? {
                if e.stat.kind != FileKind::Dir {
                    continue;
                }
                let sub = format!("{dir}/{}", e.name);
                match c.chmod(&sub, mode).await {
                    Ok(()) => {}
                    // Another user's prefix (made in a public-read-write bucket) keeps its
                    // mode; the answer says so.
                    Err(e) if e.status() == Some(MgrStatus::PermissionDenied) => refused += 1,
                    Err(e) => return Err(status_err(e)),
                }
                todo.push(sub);
            }
        }
        if refused > 0 {
            return Err(s3_error!(
                AccessDenied,
                "the bucket's ACL is set, but {refused} of its key prefixes belong to other users and keep their permissions"
            ));
        }
        Ok(())
    }

    pub(crate) async fn get_object_acl_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let i = &req.input;
        let (_, st, _) = self.object(&c, &i.bucket, &i.key).await?;
        need_owner(&c, &st)?;
        let reach = self.reach(&c, &i.bucket, &i.key).await?;
        let p = acl::enforced(&st, false, reach);
        Ok(S3Response::new(GetObjectAclOutput {
            grants: p.grants,
            owner: p.owner,
            ..Default::default()
        }))
    }

    pub(crate) async fn put_object_acl_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        let i = &req.input;
        let (path, st, _) = self.object(&c, &i.bucket, &i.key).await?;
        need_owner(&c, &st)?;
        let (_, bucket) = self.bucket_stat(&c, &i.bucket).await?;
        let mode = match &i.access_control_policy {
            Some(p) if i.acl.is_none() && grant_headers(&req.headers).is_empty() => {
                let m = acl::granted_mode(&acl::policy_grants(p), c.user(), false)?;
                acl::check_reachable(m, &bucket)?;
                self.refuse_public_acl(&c, &i.bucket, m).await?;
                m
            }
            Some(_) => return Err(both_acls()),
            None => {
                self.object_mode_of(&c, &i.bucket, &bucket, i.acl.as_ref(), &req.headers)
                    .await?
            }
        };
        c.chmod(&path, mode).await.map_err(status_err)?;
        Ok(S3Response::new(PutObjectAclOutput::default()))
    }

    /// What the group and others may pass through on the way to `key`: the `--x` bits of
    /// the bucket and each directory of the key, and-ed.
    async fn reach(&self, c: &Client, bucket: &str, key: &str) -> S3Result<(u32, u32)> {
        let (_, b) = self.bucket_stat(c, bucket).await?;
        let mut dirs = vec![b];
        for d in self.names.parents(bucket, key)? {
            dirs.push(c.stat(&d).await.map_err(status_err)?);
        }
        Ok(dirs.iter().fold((1, 1), |(g, o), st| {
            (g & (st.mode >> 3) & 1, o & st.mode & 1)
        }))
    }

    /// Sets the bucket's default encryption: SSE-S3, or SSE-KMS with a declared key id
    /// ([`sse`]); kept as an attribute of its directory, which only its owner changes.
    pub(crate) async fn put_bucket_encryption_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutBucketEncryptionInput>,
    ) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
        let i = &req.input;
        let (path, _) = self.owned_bucket(&c, &i.bucket).await?;
        let rules = &i.server_side_encryption_configuration.rules;
        let [rule] = rules.as_slice() else {
            return Err(s3_error!(MalformedXML, "one encryption rule, please"));
        };
        let d = rule
            .apply_server_side_encryption_by_default
            .as_ref()
            .ok_or_else(|| s3_error!(MalformedXML, "the rule names no default encryption"))?;
        // The rule as a write's headers would ask it, checked as those are.
        let mut h = http::HeaderMap::new();
        let mut put = |n: &'static str, v: &str| -> S3Result<()> {
            let v = http::HeaderValue::from_str(v).map_err(|_| s3_error!(InvalidArgument))?;
            h.insert(n, v);
            Ok(())
        };
        put("x-amz-server-side-encryption", d.sse_algorithm.as_str())?;
        if let Some(id) = &d.kms_master_key_id {
            put("x-amz-server-side-encryption-aws-kms-key-id", id)?;
        }
        let record = sse::Asked::of_write(&h, &self.kms_ids)?
            .at_rest()
            .ok_or_else(|| s3_error!(MalformedXML, "the rule names no default encryption"))?;
        c.setxattr(&path, sse::BUCKET_DEFAULT_ATTR, Some(record.as_bytes()))
            .await
            .map_err(status_err)?;
        Ok(S3Response::new(PutBucketEncryptionOutput::default()))
    }

    pub(crate) async fn get_bucket_encryption_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetBucketEncryptionInput>,
    ) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
        let i = &req.input;
        let (_, _) = self.owned_bucket(&c, &i.bucket).await?;
        let Some(a) = self
            .bucket_attr(&c, &i.bucket, sse::BUCKET_DEFAULT_ATTR)
            .await?
        else {
            return Err(s3_error!(ServerSideEncryptionConfigurationNotFoundError));
        };
        let (alg, id) = a.split_once(' ').unwrap_or((&a, ""));
        let rule = ServerSideEncryptionRule {
            apply_server_side_encryption_by_default: Some(ServerSideEncryptionByDefault {
                kms_master_key_id: (!id.is_empty()).then(|| id.to_string()),
                sse_algorithm: ServerSideEncryption::from(alg.to_string()),
            }),
            bucket_key_enabled: None,
        };
        Ok(S3Response::new(GetBucketEncryptionOutput {
            server_side_encryption_configuration: Some(ServerSideEncryptionConfiguration {
                rules: vec![rule],
            }),
        }))
    }

    pub(crate) async fn delete_bucket_encryption_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<DeleteBucketEncryptionInput>,
    ) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
        let (path, _) = self.owned_bucket(&c, &req.input.bucket).await?;
        match c.setxattr(&path, sse::BUCKET_DEFAULT_ATTR, None).await {
            // A bucket without a default stays as it is.
            Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => {}
            r => r.map_err(status_err)?,
        }
        let mut r = S3Response::new(DeleteBucketEncryptionOutput::default());
        r.status = Some(http::StatusCode::NO_CONTENT);
        Ok(r)
    }
}

/// The mode a bucket's ACL asks for: canned, grant headers or a policy body (one of them),
/// or private when none is given.
fn bucket_mode_of(
    user: &str,
    canned: Option<&BucketCannedACL>,
    headers: &http::HeaderMap,
    policy: Option<&AccessControlPolicy>,
) -> S3Result<u32> {
    let grants = grant_headers(headers);
    let given = usize::from(canned.is_some())
        + usize::from(!grants.is_empty())
        + usize::from(policy.is_some());
    if given > 1 {
        return Err(both_acls());
    }
    if let Some(p) = policy {
        return acl::granted_mode(&acl::policy_grants(p), user, true);
    }
    if grants.is_empty() {
        acl::bucket_mode(canned)
    } else {
        acl::granted_mode(&grants, user, true)
    }
}
