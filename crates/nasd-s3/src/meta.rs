//! What S3 keeps about an object beside its bytes, kept as the file's extended attributes
//! (manager protocol 8): the ETag, the standard content headers, the user metadata
//! (`x-amz-meta-*`) and the checksums the writer asked for. They are committed with the
//! content in one manager transaction, so an object's metadata always belongs to its bytes.
//! Attributes are named `user.s3.*`; a file written another way (`nasd cp`, the mount) has
//! none, and the gateway serves it with a weak ETag made of its inode, size and mtime.

use nasd_proto::manager::{FileStat, Xattr};
use std::collections::BTreeMap;

/// The attribute holding an object's ETag, quoted as S3 sends it.
pub const ETAG: &str = "user.s3.etag";
const CONTENT: &str = "user.s3.content.";
const META: &str = "user.s3.meta.";
const CHECKSUM: &str = "user.s3.checksum.";
const PARTS: &str = "user.s3.parts";
/// The attribute holding a multipart object's part sizes, in bytes, comma-separated, a run
/// of equal sizes as `SIZE*COUNT` ([`encode_sizes`]), so 10,000 parts fit its attributes.
const PART_SIZES: &str = "user.s3.part-sizes";
/// Most parts an object records (S3's most parts of an upload).
pub const PART_SIZES_MAX: usize = 10_000;
/// The attribute holding an object's tags: a JSON object, key to value.
pub const TAGS: &str = "user.s3.tags";
/// The attribute holding a multipart object's checksum type (`COMPOSITE`, `FULL_OBJECT`).
const CHECKSUM_TYPE: &str = "user.s3.checksum-type";
/// The attribute holding the checksum of each part of a multipart object, in order,
/// comma-separated (recorded for up to [`PART_CHECKSUMS_MAX`] parts).
const PART_CHECKSUMS: &str = "user.s3.part-checksums";
/// Most parts whose checksums an object records (so they fit its attributes: 64 KiB).
pub const PART_CHECKSUMS_MAX: usize = 1000;
/// The attribute naming the multipart upload that made an object (so completing it again
/// is answered as the first time).
const UPLOAD_ID: &str = "user.s3.upload-id";
/// The attribute holding an object's version id in a versioned bucket (none: `null`).
pub const VERSION_ID: &str = "user.s3.version-id";

/// The content headers an object keeps (lower-case header names).
pub const CONTENT_HEADERS: [&str; 6] = [
    "content-type",
    "content-encoding",
    "content-disposition",
    "content-language",
    "cache-control",
    "expires",
];

/// An object's metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The ETag value without quotes (hex MD5, or `hex-N` for a multipart object).
    pub etag: Option<String>,
    /// Content headers by lower-case name ([`CONTENT_HEADERS`]).
    pub content: BTreeMap<String, String>,
    /// User metadata by lower-case name (without `x-amz-meta-`).
    pub user: BTreeMap<String, String>,
    /// Checksums by algorithm name (`crc32`, `crc32c`, `crc64nvme`, `sha1`, `sha256`), base64.
    pub checksums: BTreeMap<String, String>,
    /// Parts of a multipart object.
    pub parts: Option<u32>,
    /// The size of each part of a multipart object, in order (empty when not recorded).
    pub part_sizes: Vec<u64>,
    /// The object's tags (S3 lists them sorted by key).
    pub tags: BTreeMap<String, String>,
    /// SSE-S3 asked for and checked ([`crate::sse`]): the algorithm, `AES256`.
    pub sse: Option<String>,
    /// SSE-C: how the object's bytes were enciphered with its customer's key.
    pub sse_c: Option<crate::sse::Sealed>,
    /// The multipart upload that made the object.
    pub upload_id: Option<String>,
    /// A multipart object's checksum type (`COMPOSITE` or `FULL_OBJECT`).
    pub checksum_type: Option<String>,
    /// The checksum of each part of a multipart object, in the upload's algorithm.
    pub part_checksums: Vec<String>,
    /// The version id it was written with in a versioned bucket (`None`: `null`).
    pub version_id: Option<String>,
}

impl ObjectMeta {
    /// The attributes that store this metadata.
    pub fn to_xattrs(&self) -> Vec<Xattr> {
        let x = |name: String, value: &str| Xattr {
            name,
            value: value.as_bytes().to_vec(),
        };
        let mut v = vec![];
        if let Some(e) = &self.etag {
            v.push(x(ETAG.into(), &quoted(e)));
        }
        for (k, val) in &self.content {
            v.push(x(format!("{CONTENT}{k}"), val));
        }
        for (k, val) in &self.user {
            v.push(x(format!("{META}{k}"), val));
        }
        for (k, val) in &self.checksums {
            v.push(x(format!("{CHECKSUM}{k}"), val));
        }
        if let Some(n) = self.parts {
            v.push(x(PARTS.into(), &n.to_string()));
        }
        if !self.part_sizes.is_empty() {
            v.push(x(PART_SIZES.into(), &encode_sizes(&self.part_sizes)));
        }
        if !self.tags.is_empty() {
            v.push(x(TAGS.into(), &tags_value(&self.tags)));
        }
        if let Some(a) = &self.sse {
            v.push(x(crate::sse::SSE_ATTR.into(), a));
        }
        if let Some(s) = &self.sse_c {
            v.push(x(crate::sse::SSE_C_ATTR.into(), &s.value()));
        }
        if let Some(id) = &self.upload_id {
            v.push(x(UPLOAD_ID.into(), id));
        }
        if let Some(t) = &self.checksum_type {
            v.push(x(CHECKSUM_TYPE.into(), t));
        }
        if !self.part_checksums.is_empty() {
            v.push(x(PART_CHECKSUMS.into(), &self.part_checksums.join(",")));
        }
        if let Some(id) = &self.version_id {
            v.push(x(VERSION_ID.into(), id));
        }
        v
    }

    /// The metadata stored in `xattrs` (other attributes are ignored; values that are not
    /// UTF-8 are skipped).
    pub fn from_xattrs(xattrs: &[Xattr]) -> ObjectMeta {
        let mut m = ObjectMeta::default();
        for a in xattrs {
            let Ok(v) = std::str::from_utf8(&a.value) else {
                continue;
            };
            if a.name == ETAG {
                m.etag = Some(v.trim_matches('"').to_string());
            } else if let Some(k) = a.name.strip_prefix(CONTENT) {
                m.content.insert(k.into(), v.into());
            } else if let Some(k) = a.name.strip_prefix(META) {
                m.user.insert(k.into(), v.into());
            } else if let Some(k) = a.name.strip_prefix(CHECKSUM) {
                m.checksums.insert(k.into(), v.into());
            } else if a.name == PARTS {
                m.parts = v.parse().ok();
            } else if a.name == PART_SIZES {
                // Unreadable sizes are no sizes: the object is then read whole, never cut
                // at wrong offsets.
                m.part_sizes = decode_sizes(v).unwrap_or_default();
            } else if a.name == TAGS {
                m.tags = serde_json::from_str(v).unwrap_or_default();
            } else if a.name == CHECKSUM_TYPE {
                m.checksum_type = Some(v.into());
            } else if a.name == PART_CHECKSUMS {
                m.part_checksums = v.split(',').map(str::to_string).collect();
            } else if a.name == VERSION_ID {
                m.version_id = Some(v.into());
            } else if a.name == UPLOAD_ID {
                m.upload_id = Some(v.into());
            } else if a.name == crate::sse::SSE_ATTR {
                m.sse = Some(v.into());
            } else if a.name == crate::sse::SSE_C_ATTR {
                // A record that does not parse still marks the object as SSE-C: it is
                // refused to every key rather than served as ciphertext.
                m.sse_c = Some(
                    crate::sse::Sealed::parse(v).unwrap_or_else(crate::sse::Sealed::unreadable),
                );
            }
        }
        m
    }
}

/// The value of [`TAGS`] (and of a bucket's tag attribute) for `tags`.
pub fn tags_value(tags: &BTreeMap<String, String>) -> String {
    serde_json::to_string(tags).expect("a map of strings serializes")
}

/// The ETag in a listing entry's [`ETAG`] attribute, unquoted.
pub fn listed_etag(xattr: Option<Vec<u8>>) -> Option<String> {
    xattr
        .and_then(|v| String::from_utf8(v).ok())
        .map(|v| v.trim_matches('"').to_string())
}

/// `"value"`.
pub fn quoted(etag: &str) -> String {
    format!("\"{etag}\"")
}

/// The ETag of a file the gateway did not write (no `user.s3.etag`): weak, from what
/// changes whenever its content does.
pub fn weak_etag(st: &FileStat) -> String {
    format!("{:x}-{:x}-{:x}", st.ino, st.size, st.mtime_us)
}

/// Part sizes as [`PART_SIZES`] keeps them: comma-separated, each run of equal sizes
/// `SIZE*COUNT` (every part but the last has one size when a client cuts parts evenly).
pub fn encode_sizes(sizes: &[u64]) -> String {
    let mut out: Vec<String> = vec![];
    let mut k = 0;
    while k < sizes.len() {
        let n = sizes[k..].iter().take_while(|s| **s == sizes[k]).count();
        out.push(match n {
            1 => sizes[k].to_string(),
            n => format!("{}*{n}", sizes[k]),
        });
        k += n;
    }
    out.join(",")
}

/// The sizes [`encode_sizes`] wrote (a plain list too, as objects completed before runs were
/// kept have); `None` for anything malformed or over [`PART_SIZES_MAX`] parts.
pub fn decode_sizes(v: &str) -> Option<Vec<u64>> {
    let mut out = vec![];
    for item in v.split(',') {
        let (size, n): (u64, usize) = match item.split_once('*') {
            Some((s, n)) => (s.parse().ok()?, n.parse().ok()?),
            None => (item.parse().ok()?, 1),
        };
        if n == 0 || n > PART_SIZES_MAX - out.len() {
            return None;
        }
        out.extend(std::iter::repeat_n(size, n));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ten_thousand_parts_fit_and_malformed_sizes_are_none() {
        let mut sizes = vec![5u64 << 20; super::PART_SIZES_MAX - 1];
        sizes.push(1234);
        let v = super::encode_sizes(&sizes);
        assert_eq!(v, "5242880*9999,1234");
        assert_eq!(super::decode_sizes(&v), Some(sizes));
        let varied: Vec<u64> = vec![1, 2, 2, 3];
        assert_eq!(
            super::decode_sizes(&super::encode_sizes(&varied)),
            Some(varied)
        );
        // What objects completed before runs hold: a plain list.
        assert_eq!(super::decode_sizes("5,5,1"), Some(vec![5, 5, 1]));
        for bad in [
            "",
            "5,x",
            "5*",
            "5*0",
            "1*10001",
            "1*18446744073709551615",
            "5,*3",
        ] {
            assert_eq!(super::decode_sizes(bad), None, "{bad}");
        }
    }

    use super::*;

    #[test]
    fn metadata_round_trips_through_attributes() {
        let mut m = ObjectMeta {
            etag: Some("9e107d9d372bb6826bd81d3542a419d6".into()),
            parts: Some(3),
            part_sizes: vec![5 << 20, 5 << 20, 1],
            version_id: Some("ffff".into()),
            ..Default::default()
        };
        m.content.insert("content-type".into(), "text/plain".into());
        m.user.insert("colour".into(), "blue ünïcode".into());
        m.checksums.insert("crc32c".into(), "yZRlqg==".into());
        m.tags.insert("project".into(), "a=b&c \"d\"".into());
        let x = m.to_xattrs();
        assert!(x
            .iter()
            .any(|a| a.name == ETAG && a.value.starts_with(b"\"")));
        nasd_proto::manager::check_xattrs(&x).unwrap();
        let mut with_other = x.clone();
        with_other.push(Xattr {
            name: "user.other".into(),
            value: vec![0xff],
        });
        assert_eq!(ObjectMeta::from_xattrs(&with_other), m);
        assert_eq!(ObjectMeta::from_xattrs(&[]), ObjectMeta::default());
    }
}
