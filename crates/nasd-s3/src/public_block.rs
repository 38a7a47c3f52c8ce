//! Public access blocks (issue 22 §1): a bucket's owner puts, reads and deletes its
//! `PublicAccessBlock` configuration, kept as JSON in the bucket's attribute [`BUCKET_ATTR`],
//! and the gateway enforces it. "Public" is what nasd's ACLs can grant beyond the owner: the
//! group's and others' permission bits ([`crate::acl`]), so an ACL is public when its mode
//! opens anything to them.
//!
//! - `BlockPublicAcls`: a request that would set a public ACL (PutBucketAcl, PutObjectAcl, a
//!   PUT, copy or multipart upload naming one) is refused with `AccessDenied`; ACLs already
//!   set stay.
//! - `IgnorePublicAcls`: the bucket's directory is made private (its owner's bits alone), so
//!   the manager itself refuses every other user whatever the ACLs below say; the mode the
//!   bucket's ACL asks for is kept in the configuration (`held_mode`) and given back when the
//!   setting is turned off or the configuration deleted. A PutBucketAcl meanwhile updates
//!   the kept mode. Any failure on the way leaves the bucket private, never open.
//! - `BlockPublicPolicy`: a bucket policy that allows everyone (`Principal: "*"`) is refused
//!   with `AccessDenied`; other policies are refused as not implemented.
//! - `RestrictPublicBuckets` is kept and reported; it restricts public policies and anonymous
//!   access, and the gateway serves neither.

use crate::gateway::{status_err, Gateway};
use nasd_client::files::Client;
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The bucket attribute holding the configuration (JSON).
pub const BUCKET_ATTR: &str = "user.s3.bucket.public-access-block";
/// The mode of a bucket `IgnorePublicAcls` holds private: its owner's bits alone.
pub const PRIVATE_MODE: u32 = crate::acl::BUCKET_MODE;

/// A bucket's configuration, as kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub block_public_acls: bool,
    pub ignore_public_acls: bool,
    pub block_public_policy: bool,
    pub restrict_public_buckets: bool,
    /// The mode the bucket's ACL asks for while `ignore_public_acls` holds it private.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_mode: Option<u32>,
}

impl Block {
    fn of(c: &PublicAccessBlockConfiguration) -> Block {
        Block {
            block_public_acls: c.block_public_acls.unwrap_or(false),
            ignore_public_acls: c.ignore_public_acls.unwrap_or(false),
            block_public_policy: c.block_public_policy.unwrap_or(false),
            restrict_public_buckets: c.restrict_public_buckets.unwrap_or(false),
            held_mode: None,
        }
    }

    fn to_dto(&self) -> PublicAccessBlockConfiguration {
        PublicAccessBlockConfiguration {
            block_public_acls: Some(self.block_public_acls),
            ignore_public_acls: Some(self.ignore_public_acls),
            block_public_policy: Some(self.block_public_policy),
            restrict_public_buckets: Some(self.restrict_public_buckets),
        }
    }
}

/// Whether mode `mode` opens anything to the group or others: what S3 calls a public ACL.
pub fn is_public(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// Whether policy document `doc` allows everyone something: a statement with `Effect: Allow`
/// whose principal is `*` (alone, or as an `AWS` principal).
pub fn policy_is_public(doc: &serde_json::Value) -> bool {
    let everyone = |p: &serde_json::Value| match p {
        serde_json::Value::String(s) => s == "*",
        serde_json::Value::Array(a) => a.iter().any(|x| x == "*"),
        _ => false,
    };
    let statements = match doc.get("Statement") {
        Some(serde_json::Value::Array(a)) => a.iter().collect(),
        Some(s @ serde_json::Value::Object(_)) => vec![s],
        _ => vec![],
    };
    statements.into_iter().any(|s| {
        s.get("Effect").and_then(|e| e.as_str()) == Some("Allow")
            && match s.get("Principal") {
                Some(serde_json::Value::Object(m)) => m.get("AWS").is_some_and(everyone),
                Some(p) => everyone(p),
                None => false,
            }
    })
}

fn blocked_acl() -> S3Error {
    s3_error!(
        AccessDenied,
        "the bucket's public access block refuses public ACLs (BlockPublicAcls)"
    )
}

fn no_configuration() -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
        "the bucket has no public access block configuration",
    );
    e.set_status_code(http::StatusCode::NOT_FOUND);
    e
}

impl Gateway {
    /// Bucket `bucket`'s configuration read as `c` (none: all off).
    async fn block_as(&self, c: &Client, bucket: &str) -> S3Result<Option<Block>> {
        let v = self.bucket_attr(c, bucket, BUCKET_ATTR).await?;
        v.map(|v| {
            serde_json::from_str(&v)
                .map_err(|_| s3_error!(InternalError, "a public access block that does not parse"))
        })
        .transpose()
    }

    /// Bucket `bucket`'s configuration, read as its owner whoever asks (a session the
    /// gateway opens for them). Refused when it cannot be read: a check never fails open.
    pub(crate) async fn public_block(&self, c: &Client, bucket: &str) -> S3Result<Block> {
        let (_, st) = self.bucket_stat(c, bucket).await?;
        if st.owner == c.user() {
            return Ok(self.block_as(c, bucket).await?.unwrap_or_default());
        }
        let owner = self.access.client_for(&st.owner).await.map_err(|_| {
            s3_error!(
                AccessDenied,
                "the bucket's public access block cannot be read"
            )
        })?;
        Ok(self.block_as(&owner, bucket).await?.unwrap_or_default())
    }

    /// Refuses mode `mode` for bucket `bucket` or an object in it when it is public and the
    /// bucket blocks public ACLs.
    pub(crate) async fn refuse_public_acl(
        &self,
        c: &Client,
        bucket: &str,
        mode: u32,
    ) -> S3Result<()> {
        if is_public(mode) && self.public_block(c, bucket).await?.block_public_acls {
            return Err(blocked_acl());
        }
        Ok(())
    }

    /// Sets bucket `bucket` (at `path`, owned by `c`) to the mode its ACL asks for, `mode`,
    /// unless `IgnorePublicAcls` holds it private: then the mode is kept for later. A public
    /// mode is refused under `BlockPublicAcls`.
    pub(crate) async fn set_bucket_mode(
        &self,
        c: &Client,
        bucket: &str,
        path: &str,
        mode: u32,
    ) -> S3Result<()> {
        // `c` owns the bucket: its configuration is read once, for both settings.
        let block = self.block_as(c, bucket).await?;
        if is_public(mode) && block.as_ref().is_some_and(|b| b.block_public_acls) {
            return Err(blocked_acl());
        }
        match block {
            Some(mut b) if b.ignore_public_acls => {
                b.held_mode = Some(mode);
                self.put_block(c, path, Some(&b)).await
            }
            _ => c.chmod(path, mode).await.map_err(status_err),
        }
    }

    async fn put_block(&self, c: &Client, path: &str, b: Option<&Block>) -> S3Result<()> {
        let v = b.map(|b| serde_json::to_vec(b).expect("a block serializes"));
        c.setxattr(path, BUCKET_ATTR, v.as_deref())
            .await
            .map_err(status_err)
    }

    /// Moves bucket `path` from configuration `old` to `new` (none: deleted). Turning
    /// `IgnorePublicAcls` on makes the bucket private before the configuration says so;
    /// turning it off records that first and gives the kept mode back after, so a failure
    /// between leaves the bucket private.
    async fn change_block(
        &self,
        c: &Client,
        path: &str,
        mode: u32,
        old: Option<Block>,
        new: Option<Block>,
    ) -> S3Result<()> {
        let was = old.as_ref().is_some_and(|b| b.ignore_public_acls);
        let held = old.and_then(|b| b.held_mode).unwrap_or(mode & 0o777);
        match new {
            Some(mut b) if b.ignore_public_acls => {
                b.held_mode = Some(held);
                if !was {
                    c.chmod(path, PRIVATE_MODE).await.map_err(status_err)?;
                }
                self.put_block(c, path, Some(&b)).await
            }
            new => {
                self.put_block(c, path, new.as_ref()).await?;
                if was {
                    c.chmod(path, held).await.map_err(status_err)?;
                }
                Ok(())
            }
        }
    }

    pub(crate) async fn put_public_access_block_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        let i = &req.input;
        let (path, st) = self.owned_bucket(&c, &i.bucket).await?;
        let old = self.block_as(&c, &i.bucket).await?;
        let new = Block::of(&i.public_access_block_configuration);
        self.change_block(&c, &path, st.mode, old, Some(new))
            .await?;
        Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
    }

    pub(crate) async fn get_public_access_block_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        self.owned_bucket(&c, &req.input.bucket).await?;
        let b = self
            .block_as(&c, &req.input.bucket)
            .await?
            .ok_or_else(no_configuration)?;
        Ok(S3Response::new(GetPublicAccessBlockOutput {
            public_access_block_configuration: Some(b.to_dto()),
        }))
    }

    pub(crate) async fn delete_public_access_block_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        let (path, st) = self.owned_bucket(&c, &req.input.bucket).await?;
        let old = self.block_as(&c, &req.input.bucket).await?;
        if old.is_some() {
            self.change_block(&c, &path, st.mode, old, None).await?;
        }
        let mut r = S3Response::new(DeletePublicAccessBlockOutput::default());
        r.status = Some(http::StatusCode::NO_CONTENT);
        Ok(r)
    }

    /// PutBucketPolicy: the owner's policy is checked (`MalformedPolicy`) and refused, as
    /// `AccessDenied` when it is public and the bucket blocks public policies, else as not
    /// implemented: the gateway enforces no policies, so it keeps none.
    pub(crate) async fn put_bucket_policy_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        let i = &req.input;
        self.owned_bucket(&c, &i.bucket).await?;
        let doc: serde_json::Value = serde_json::from_str(&i.policy)
            .map_err(|e| s3_error!(MalformedPolicy, "the policy is not JSON: {e}"))?;
        let block = self.block_as(&c, &i.bucket).await?.unwrap_or_default();
        if block.block_public_policy && policy_is_public(&doc) {
            return Err(s3_error!(
                AccessDenied,
                "the bucket's public access block refuses public policies (BlockPublicPolicy)"
            ));
        }
        Err(s3_error!(
            NotImplemented,
            "bucket policies are not implemented: what others may do is the bucket's and its objects' ACLs"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_is_public_when_it_opens_anything_to_others() {
        assert!(!is_public(0o700));
        assert!(!is_public(0o600));
        assert!(is_public(0o755));
        assert!(is_public(0o644));
        assert!(is_public(0o710));
    }

    #[test]
    fn a_policy_is_public_when_it_allows_everyone() {
        let p = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        let stmt = |effect: &str, principal: &str| {
            p(&format!(
                r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"{effect}","Principal":{principal},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}}]}}"#
            ))
        };
        assert!(policy_is_public(&stmt("Allow", r#""*""#)));
        assert!(policy_is_public(&stmt("Allow", r#"{"AWS":"*"}"#)));
        assert!(policy_is_public(&stmt(
            "Allow",
            r#"{"AWS":["arn:aws:iam::t:root","*"]}"#
        )));
        assert!(!policy_is_public(&stmt("Deny", r#""*""#)));
        assert!(!policy_is_public(&stmt(
            "Allow",
            r#"{"AWS":"arn:aws:iam::t:root"}"#
        )));
        assert!(!policy_is_public(&p(r#"{"Statement":[]}"#)));
        let single = p(r#"{"Statement":{"Effect":"Allow","Principal":"*"}}"#);
        assert!(policy_is_public(&single));
    }
}
