//! An S3-compatible gateway over the nasd client library (issue 11 §1): `aws s3`, boto3,
//! rclone and `warp` talk to nasd unchanged. The gateway is a nasd client like any other:
//! every byte it serves comes straight from the drives and is verified before it is sent,
//! and every byte it takes is on the drives before S3 hears it is stored.
//!
//! s3s parses the HTTP, checks SigV4 signatures (headers and presigned URLs, clock skew
//! within 15 minutes) and writes S3's XML; the gateway maps the API onto the namespace:
//! - [`access`] — access keys (the manager's `S3KeySecret`, gateways only) and a session per
//!   user opened through `ActFor`, so the manager checks every permission for that user;
//! - [`acl`] — buckets and objects private to their owners unless a canned ACL or a grant
//!   that modes express opens them, ACLs read back as enforced; [`buckets`] — the bucket and
//!   ACL operations; [`public_block`] — public access blocks, kept and enforced;
//!   [`unsupported`] — what the gateway refuses rather than ignores;
//! - [`names`] — buckets as directories under a root, keys as paths (never leaving their
//!   bucket);
//! - [`gateway`] and [`ops`] — the object and bucket operations; [`multipart`] — multipart
//!   uploads staged as files until they complete;
//! - [`meta`] — ETags, content headers, user metadata and checksums as extended attributes
//!   committed with the content; [`digest`] — MD5 and `x-amz-checksum-*` as bytes stream;
//! - [`stream`] — bounded-memory streams between HTTP bodies and the drives;
//! - [`list`] — listings in key order over the directory tree; [`tagging`] — object and
//!   bucket tags as extended attributes; [`versions`] — bucket versioning, older versions and
//!   delete markers beside each key; [`lifecycle`] — bucket lifecycle rules, kept and
//!   carried out by a sweeper; [`conds`] — conditional writes and deletes, checked in one
//!   critical section with their commit; [`cors`] — buckets' CORS rules and the answers to
//!   browsers' preflights;
//! - [`server`] — the HTTP(S) server; [`conns`] — connections, their limits and timeouts;
//!   [`front`] — what each request meets before s3s (request ids, bounded bodies, POST forms
//!   refused unless signed, the access log of [`log`]); [`chunked`] — aws-chunked bodies
//!   re-cut into bounded chunks; [`guard`] — signature rules (no SigV2 by default, presigned
//!   lifetimes, signed headers); [`metrics`] — requests, errors, bytes and latency per S3
//!   operation, and health, for `--metrics`.

/// Copies the checksums of metadata `$m` into an output that has S3's checksum fields.
macro_rules! set_checksums {
    ($out:ident, $m:expr) => {{
        $out.checksum_crc32 = $m.checksums.get("crc32").cloned();
        $out.checksum_crc32c = $m.checksums.get("crc32c").cloned();
        $out.checksum_crc64nvme = $m.checksums.get("crc64nvme").cloned();
        $out.checksum_sha1 = $m.checksums.get("sha1").cloned();
        $out.checksum_sha256 = $m.checksums.get("sha256").cloned();
    }};
}

/// [`set_checksums!`] and the checksums' type, for outputs that carry it: the multipart
/// object's recorded type, else `FULL_OBJECT` (a checksum of every byte).
macro_rules! set_checksums_typed {
    ($out:ident, $m:expr) => {{
        set_checksums!($out, $m);
        if !$m.checksums.is_empty() {
            let t = $m.checksum_type.as_deref().unwrap_or("FULL_OBJECT");
            $out.checksum_type = Some(s3s::dto::ChecksumType::from(t.to_string()));
        }
    }};
}

/// Sets the content headers of a GET or HEAD answer: the stored ones, unless the request
/// overrides them (`response-content-type` and the like); an object stored without a type
/// has S3's default, `binary/octet-stream`.
macro_rules! content_headers {
    ($out:ident, $m:expr, $i:expr) => {{
        let stored = |h: &str| $m.content.get(h).cloned();
        $out.content_type = $i
            .response_content_type
            .clone()
            .or_else(|| stored("content-type"))
            .or_else(|| Some("binary/octet-stream".to_string()));
        $out.content_encoding = $i
            .response_content_encoding
            .clone()
            .or_else(|| stored("content-encoding"));
        $out.content_disposition = $i
            .response_content_disposition
            .clone()
            .or_else(|| stored("content-disposition"));
        $out.content_language = $i
            .response_content_language
            .clone()
            .or_else(|| stored("content-language"));
        $out.cache_control = $i
            .response_cache_control
            .clone()
            .or_else(|| stored("cache-control"));
        $out.expires = $i.response_expires.clone().or_else(|| {
            stored("expires").and_then(|v| {
                s3s::dto::Timestamp::parse(s3s::dto::TimestampFormat::HttpDate, &v).ok()
            })
        });
    }};
}

pub mod access;
pub mod acl;
mod buckets;
pub mod chunked;
pub mod conds;
pub mod conns;
pub mod cors;
pub mod digest;
pub mod front;
pub mod gateway;
pub mod guard;
pub mod lifecycle;
pub mod list;
pub mod log;
pub mod meta;
pub mod metrics;
pub mod multipart;
pub mod names;
mod ops;
pub mod public_block;
pub mod server;
pub mod sse;
pub mod stale;
pub mod stream;
pub mod tagging;
pub mod unsupported;
pub mod versions;

pub use gateway::Gateway;
pub use server::{serve, Options, ServeError, Tls};
