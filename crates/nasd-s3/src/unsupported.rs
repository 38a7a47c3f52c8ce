//! Features the gateway does not implement are refused, never accepted and ignored (issue 22
//! §1): a request that asks for object lock, a storage class, a website redirect, MFA
//! delete, or a change to a version other than the current one answers `NotImplemented` before anything is read or written. Whole
//! operations the gateway lacks (bucket policies, logging,
//! object-lock configuration, public-access blocks, ownership controls) are s3s's
//! `NotImplemented` already. Server-side encryption is [`crate::sse`]'s.

use http::{HeaderMap, Uri};
use s3s::dto::{ObjectOwnership, PutObjectInput, StorageClass};
use s3s::{s3_error, S3Error, S3Result};

const OBJECT_LOCK: [&str; 3] = [
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-object-lock-legal-hold",
];

fn not_implemented(what: &str) -> S3Error {
    s3_error!(NotImplemented, "the gateway does not implement {what}")
}

fn refuse_any(h: &HeaderMap, names: &[&str], err: impl Fn() -> S3Error) -> S3Result<()> {
    if names.iter().any(|n| h.contains_key(*n)) {
        return Err(err());
    }
    Ok(())
}

/// Refuses what operation `op` (s3s's name) asks for in its headers or query and the gateway
/// cannot do. PutObject (and POST object, which becomes one) is checked on its input by
/// [`put_object`], which sees form fields too.
pub fn check(op: &str, uri: &Uri, h: &HeaderMap) -> S3Result<()> {
    check_version(op, uri)?;
    match op {
        "CopyObject" | "CreateMultipartUpload" => {
            refuse_any(h, &OBJECT_LOCK, || not_implemented("object lock"))?;
            refuse_any(h, &["x-amz-website-redirect-location"], || {
                not_implemented("website redirects")
            })?;
            check_storage_class(h.get("x-amz-storage-class").and_then(|v| v.to_str().ok()))?;
        }
        "GetObject" | "HeadObject" | "GetObjectAttributes" => crate::sse::refuse_on_read(h)?,
        "CreateBucket" => {
            let locked = h
                .get("x-amz-bucket-object-lock-enabled")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
            if locked {
                return Err(not_implemented("object lock"));
            }
            if let Some(o) = h.get("x-amz-object-ownership") {
                if o.as_bytes() != ObjectOwnership::OBJECT_WRITER.as_bytes() {
                    return Err(s3_error!(
                        NotImplemented,
                        "objects belong to their writers (ObjectWriter): nasd files have the owner who made them"
                    ));
                }
            }
        }
        "DeleteObject" | "DeleteObjects" => {
            refuse_any(h, &["x-amz-mfa"], || not_implemented("MFA delete"))?;
        }
        _ => {}
    }
    Ok(())
}

/// Operations that take a version id ([`crate::versions`]); the others refuse one.
const VERSIONED_OPS: [&str; 5] = [
    "GetObject",
    "HeadObject",
    "GetObjectAttributes",
    "DeleteObject",
    "CopyObject",
];

/// An operation on one version other than `null` is refused unless it is one of
/// [`VERSIONED_OPS`].
fn check_version(op: &str, uri: &Uri) -> S3Result<()> {
    if !op.contains("Object") || op.starts_with("ListObject") || VERSIONED_OPS.contains(&op) {
        return Ok(());
    }
    let asked = uri
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == "versionId").then_some(v)
        });
    match asked {
        Some(v) if v != "null" => Err(s3_error!(
            NotImplemented,
            "{op} of a version other than null: the gateway reads and deletes versions, and changes only current objects"
        )),
        _ => Ok(()),
    }
}

fn check_storage_class(class: Option<&str>) -> S3Result<()> {
    match class {
        None => Ok(()),
        Some(c) if c == StorageClass::STANDARD => Ok(()),
        Some(c) => Err(s3_error!(
            NotImplemented,
            "the gateway has one storage class, STANDARD, not {c}"
        )),
    }
}

/// Refuses what a PutObject or a POST object asks for and the gateway cannot do
/// (encryption is [`crate::sse`]'s).
pub fn put_object(i: &PutObjectInput) -> S3Result<()> {
    if i.object_lock_mode.is_some()
        || i.object_lock_retain_until_date.is_some()
        || i.object_lock_legal_hold_status.is_some()
    {
        return Err(not_implemented("object lock"));
    }
    if i.website_redirect_location.is_some() {
        return Err(not_implemented("website redirects"));
    }
    if i.write_offset_bytes.is_some() {
        return Err(not_implemented("appends (x-amz-write-offset-bytes)"));
    }
    check_storage_class(i.storage_class.as_ref().map(StorageClass::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(kv: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in kv {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn unimplemented_features_are_refused_with_s3s_errors() {
        let uri: Uri = "/b/k".parse().unwrap();
        let code = |op: &str, kv: &[(&'static str, &'static str)]| {
            check(op, &uri, &headers(kv))
                .err()
                .map(|e| e.code().as_str().to_string())
        };
        assert_eq!(
            code("HeadObject", &[("x-amz-server-side-encryption", "AES256")]).as_deref(),
            Some("InvalidArgument")
        );
        assert_eq!(
            code(
                "CreateBucket",
                &[("x-amz-bucket-object-lock-enabled", "true")]
            )
            .as_deref(),
            Some("NotImplemented")
        );
        assert_eq!(
            code(
                "CreateBucket",
                &[("x-amz-bucket-object-lock-enabled", "false")]
            ),
            None
        );
        assert_eq!(
            code(
                "CreateBucket",
                &[("x-amz-object-ownership", "ObjectWriter")]
            ),
            None
        );
        assert_eq!(
            code("CopyObject", &[("x-amz-storage-class", "STANDARD")]),
            None
        );
        assert_eq!(
            code("CopyObject", &[("x-amz-storage-class", "GLACIER")]).as_deref(),
            Some("NotImplemented")
        );
        assert_eq!(code("GetObject", &[]), None);
        let v: Uri = "/b/k?versionId=abc".parse().unwrap();
        assert!(check("GetObject", &v, &HeaderMap::new()).is_ok());
        assert!(check("PutObjectTagging", &v, &HeaderMap::new()).is_err());
        let null: Uri = "/b/k?versionId=null".parse().unwrap();
        assert!(check("GetObject", &null, &HeaderMap::new()).is_ok());
        assert!(check("ListObjectVersions", &v, &HeaderMap::new()).is_ok());
    }
}
