//! Object and bucket tags. An object's tags are an extended attribute of its file
//! ([`meta::TAGS`]): set with its bytes in one commit when a write names them
//! (`x-amz-tagging` on a PUT, a copy with the `REPLACE` tagging directive, a multipart
//! upload), copied with a copy's source otherwise, and replaced or removed alone by
//! PutObjectTagging and DeleteObjectTagging, which the manager allows the file's owner and
//! whoever may write it (its rule for `user.` attributes). A bucket's tags are an attribute
//! of its directory ([`BUCKET_TAGS`]), which only its owner reads or changes.
//!
//! S3's limits hold: at most [`OBJECT_TAGS_MAX`] tags on an object and [`BUCKET_TAGS_MAX`]
//! on a bucket, keys of at most [`TAG_KEY_CHARS_MAX`] characters and values of at most
//! [`TAG_VALUE_CHARS_MAX`], no key twice (`InvalidTag`).

use crate::gateway::*;
use crate::meta;
use nasd_client::files::Client;
use nasd_proto::manager::{FileKind, MgrStatus};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most tags on one object (S3's limit).
pub const OBJECT_TAGS_MAX: usize = 10;
/// Most tags on one bucket (S3's limit).
pub const BUCKET_TAGS_MAX: usize = 50;
/// Longest tag key, in characters.
pub const TAG_KEY_CHARS_MAX: usize = 128;
/// Longest tag value, in characters.
pub const TAG_VALUE_CHARS_MAX: usize = 256;
/// The attribute of a bucket's directory holding its tags (a JSON object, as [`meta::TAGS`]).
const BUCKET_TAGS: &str = "user.s3.bucket-tags";

/// Tags in a map, checked against S3's limits (`max` tags at most).
pub fn checked(
    pairs: impl IntoIterator<Item = (String, String)>,
    max: usize,
) -> S3Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for (k, v) in pairs {
        if k.is_empty() || k.chars().count() > TAG_KEY_CHARS_MAX {
            return Err(s3_error!(
                InvalidTag,
                "a tag key has 1 to {TAG_KEY_CHARS_MAX} characters"
            ));
        }
        if v.chars().count() > TAG_VALUE_CHARS_MAX {
            return Err(s3_error!(
                InvalidTag,
                "a tag value has at most {TAG_VALUE_CHARS_MAX} characters"
            ));
        }
        if tags.insert(k, v).is_some() {
            return Err(s3_error!(InvalidTag, "a tag key appears twice"));
        }
    }
    if tags.len() > max {
        return Err(s3_error!(InvalidTag, "at most {max} tags"));
    }
    Ok(tags)
}

/// The tags of an `x-amz-tagging` header: a URL query (`k=v&k2=v2`; a key without `=` has
/// the empty value).
pub fn from_header(v: &str) -> S3Result<BTreeMap<String, String>> {
    let pairs = v.split('&').filter(|p| !p.is_empty()).map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (form_decode(k), form_decode(v))
    });
    checked(pairs, OBJECT_TAGS_MAX)
}

/// Decodes `application/x-www-form-urlencoded` text (`+` is a space); bytes that do not
/// decode to UTF-8 are replaced.
fn form_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(hi), Some(lo)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The tags of a `Tagging` body.
fn of_body(t: &Tagging, max: usize) -> S3Result<BTreeMap<String, String>> {
    let pairs = t.tag_set.iter().map(|t| {
        (
            t.key.clone().unwrap_or_default(),
            t.value.clone().unwrap_or_default(),
        )
    });
    checked(pairs, max)
}

fn tag_set(tags: &BTreeMap<String, String>) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

/// Sets attribute `name` of `path` to `tags`, or removes it when there are none.
async fn store(
    c: &Client,
    path: &str,
    name: &str,
    tags: &BTreeMap<String, String>,
) -> S3Result<()> {
    let r = if tags.is_empty() {
        match c.setxattr(path, name, None).await {
            // Removing tags an object does not have leaves it as it is.
            Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => {
                c.stat(path).await.map(|_| ()).map_err(status_err)?;
                Ok(())
            }
            r => r,
        }
    } else {
        let v = meta::tags_value(tags);
        c.setxattr(path, name, Some(v.as_bytes())).await
    };
    r.map_err(status_err)
}

impl Gateway {
    /// The file of object `key`, which must be a file (a folder marker holds no tags).
    async fn tagged_object(&self, c: &Client, bucket: &str, key: &str) -> S3Result<String> {
        let (path, st, _) = self.object(c, bucket, key).await?;
        if st.kind == FileKind::Dir {
            return Err(s3_error!(NotImplemented, "tags on a folder marker"));
        }
        Ok(path)
    }

    pub(crate) async fn get_object_tagging_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        let i = &req.input;
        let (_, _, m) = self.object(&c, &i.bucket, &i.key).await?;
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: tag_set(&m.tags),
            ..Default::default()
        }))
    }

    pub(crate) async fn put_object_tagging_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        let i = &req.input;
        let tags = of_body(&i.tagging, OBJECT_TAGS_MAX)?;
        let path = self.tagged_object(&c, &i.bucket, &i.key).await?;
        store(&c, &path, meta::TAGS, &tags).await?;
        Ok(S3Response::new(PutObjectTaggingOutput::default()))
    }

    pub(crate) async fn delete_object_tagging_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        let i = &req.input;
        let path = self.tagged_object(&c, &i.bucket, &i.key).await?;
        store(&c, &path, meta::TAGS, &BTreeMap::new()).await?;
        let mut r = S3Response::new(DeleteObjectTaggingOutput::default());
        r.status = Some(http::StatusCode::NO_CONTENT);
        Ok(r)
    }

    pub(crate) async fn get_bucket_tagging_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let (path, _) = self.owned_bucket(&c, &req.input.bucket).await?;
        let (_, x) = c.getxattrs(&path).await.map_err(status_err)?;
        let tags: BTreeMap<String, String> = x
            .iter()
            .find(|a| a.name == BUCKET_TAGS)
            .and_then(|a| serde_json::from_slice(&a.value).ok())
            .unwrap_or_default();
        if tags.is_empty() {
            return Err(s3_error!(NoSuchTagSet));
        }
        Ok(S3Response::new(GetBucketTaggingOutput {
            tag_set: tag_set(&tags),
        }))
    }

    pub(crate) async fn put_bucket_tagging_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        let i = &req.input;
        let tags = of_body(&i.tagging, BUCKET_TAGS_MAX)?;
        let (path, _) = self.owned_bucket(&c, &i.bucket).await?;
        store(&c, &path, BUCKET_TAGS, &tags).await?;
        Ok(S3Response::new(PutBucketTaggingOutput::default()))
    }

    pub(crate) async fn delete_bucket_tagging_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        let (path, _) = self.owned_bucket(&c, &req.input.bucket).await?;
        store(&c, &path, BUCKET_TAGS, &BTreeMap::new()).await?;
        let mut r = S3Response::new(DeleteBucketTaggingOutput::default());
        r.status = Some(http::StatusCode::NO_CONTENT);
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tags_decode_and_limits_hold() {
        let t = from_header("foo=bar&bar&a%20b=c+d%3D").unwrap();
        let want: Vec<(&str, &str)> = vec![("a b", "c d="), ("bar", ""), ("foo", "bar")];
        assert_eq!(
            t.iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
            want
        );
        let many = (0..11)
            .map(|n| format!("k{n}=v"))
            .collect::<Vec<_>>()
            .join("&");
        assert!(from_header(&many).is_err());
        assert!(from_header("a=1&a=2").is_err());
        let long = |k: usize, v: usize| checked([("k".repeat(k), "v".repeat(v))], 10);
        assert!(long(128, 256).is_ok());
        assert!(long(129, 1).is_err());
        assert!(long(1, 257).is_err());
        assert_eq!(form_decode("%zz%4"), "%zz%4");
    }
}
