//! Digests of an object's bytes as they stream through the gateway: the MD5 that is its
//! ETag, and the checksums S3 clients send (`x-amz-checksum-*`, in a header or a trailer of
//! an aws-chunked body) and may ask for back. A claimed value that does not match what
//! arrived fails the write with `BadDigest` before anything is committed.

use base64::Engine as _;
use md5::Digest as _;
use s3s::{s3_error, S3Error};
use std::collections::BTreeMap;

/// The checksum algorithms S3 defines, by the name of their header suffix.
pub const ALGORITHMS: [&str; 5] = ["crc32", "crc32c", "crc64nvme", "sha1", "sha256"];

enum Sum {
    Crc(crc_fast::Digest, usize),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl Sum {
    fn new(algorithm: &str) -> Option<Sum> {
        use crc_fast::CrcAlgorithm::*;
        Some(match algorithm {
            "crc32" => Sum::Crc(crc_fast::Digest::new(Crc32IsoHdlc), 4),
            "crc32c" => Sum::Crc(crc_fast::Digest::new(Crc32Iscsi), 4),
            "crc64nvme" => Sum::Crc(crc_fast::Digest::new(Crc64Nvme), 8),
            "sha1" => Sum::Sha1(sha1::Sha1::new()),
            "sha256" => Sum::Sha256(sha2::Sha256::new()),
            _ => return None,
        })
    }

    fn update(&mut self, b: &[u8]) {
        match self {
            Sum::Crc(d, _) => d.update(b),
            Sum::Sha1(d) => d.update(b),
            Sum::Sha256(d) => d.update(b),
        }
    }

    fn finish(self) -> String {
        let bytes = match self {
            Sum::Crc(d, n) => d.finalize().to_be_bytes()[8 - n..].to_vec(),
            Sum::Sha1(d) => d.finalize().to_vec(),
            Sum::Sha256(d) => d.finalize().to_vec(),
        };
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}

/// The MD5 and the asked-for checksums of a stream of bytes.
pub struct Digests {
    md5: md5::Md5,
    sums: Vec<(String, Sum)>,
}

impl Digests {
    /// Digests computing the MD5 and each of `algorithms` (unknown names are ignored).
    pub fn new<'a>(algorithms: impl IntoIterator<Item = &'a str>) -> Digests {
        let mut sums: Vec<(String, Sum)> = vec![];
        for a in algorithms {
            let a = a.to_ascii_lowercase();
            if sums.iter().all(|(n, _)| *n != a) {
                if let Some(s) = Sum::new(&a) {
                    sums.push((a, s));
                }
            }
        }
        Digests {
            md5: md5::Md5::new(),
            sums,
        }
    }

    pub fn update(&mut self, b: &[u8]) {
        self.md5.update(b);
        for (_, s) in &mut self.sums {
            s.update(b);
        }
    }

    /// The MD5 (raw) and the checksums (base64, by algorithm).
    pub fn finish(self) -> ([u8; 16], BTreeMap<String, String>) {
        let md5: [u8; 16] = self.md5.finalize().into();
        let sums = self
            .sums
            .into_iter()
            .map(|(n, s)| (n, s.finish()))
            .collect();
        (md5, sums)
    }
}

/// Checks the values a writer claimed (`Content-MD5` base64, checksums by algorithm) against
/// what arrived.
/// The composite checksum of a multipart object (`COMPOSITE`, S3's form): `algorithm` over
/// the concatenated raw checksums of its parts (`parts`, base64), in base64, then `-N`.
/// `None` when a part's checksum is not base64 or the algorithm is unknown.
pub fn composite(algorithm: &str, parts: &[&str]) -> Option<String> {
    let mut sum = Sum::new(algorithm)?;
    for p in parts {
        sum.update(&base64::engine::general_purpose::STANDARD.decode(p).ok()?);
    }
    Some(format!("{}-{}", sum.finish(), parts.len()))
}

pub fn verify(
    md5: &[u8; 16],
    content_md5: Option<&str>,
    sums: &BTreeMap<String, String>,
    claimed: &BTreeMap<String, String>,
) -> Result<(), S3Error> {
    if let Some(c) = content_md5 {
        let ok = base64::engine::general_purpose::STANDARD
            .decode(c.trim())
            .is_ok_and(|v| v == md5);
        if !ok {
            return Err(s3_error!(
                BadDigest,
                "the Content-MD5 you specified did not match what we received"
            ));
        }
    }
    for (a, v) in claimed {
        if sums.get(a) != Some(v) {
            return Err(s3_error!(
                BadDigest,
                "the {a} checksum you specified did not match what we received"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers: the AWS documentation's and the algorithms' check values over
    /// "123456789" (CRC-32 cbf43926, CRC-32C e3069283, CRC-64/NVME ae8b14860a799888).
    #[test]
    fn composite_checksums_match_s3s_tests_known_answer() {
        // ceph's s3-tests: three 5 MiB parts of 'A', 'B' and 'C'.
        let parts = [
            "275VF5loJr1YYawit0XSHREhkFXYkkPKGuoK0x9VKxI=",
            "mrHwOfjTL5Zwfj74F05HOQGLdUb7E5szdCbxgUSq6NM=",
            "Vw7oB/nKQ5xWb3hNgbyfkvDiivl+U+/Dft48nfJfDow=",
        ];
        assert_eq!(
            composite("sha256", &parts).as_deref(),
            Some("uWBwpe1dxI4Vw8Gf0X9ynOdw/SS6VBzfWm9giiv1sf4=-3")
        );
        assert_eq!(composite("sha256", &["not base64!"]), None);
        assert_eq!(composite("md4", &parts), None);
    }

    #[test]
    fn checksums_match_known_answers() {
        let mut d = Digests::new(ALGORITHMS);
        d.update(b"1234");
        d.update(b"56789");
        let (md5, sums) = d.finish();
        let b64 =
            |h: &str| base64::engine::general_purpose::STANDARD.encode(hex::decode(h).unwrap());
        assert_eq!(hex::encode(md5), "25f9e794323b453885f5181f1b624d0b");
        assert_eq!(sums["crc32"], b64("cbf43926"));
        assert_eq!(sums["crc32c"], b64("e3069283"));
        assert_eq!(sums["crc64nvme"], b64("ae8b14860a799888"));
        assert_eq!(
            sums["sha1"],
            b64("f7c3bc1d808e04732adf679965ccc34ca7ae3441")
        );
        assert_eq!(
            sums["sha256"],
            b64("15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225")
        );
    }

    #[test]
    fn a_wrong_claim_is_a_bad_digest() {
        let mut d = Digests::new(["crc32c"]);
        d.update(b"hello");
        let (md5, sums) = d.finish();
        let md5_b64 = base64::engine::general_purpose::STANDARD.encode(md5);
        verify(&md5, Some(&md5_b64), &sums, &sums).unwrap();
        assert!(verify(&md5, Some("AAAAAAAAAAAAAAAAAAAAAA=="), &sums, &sums).is_err());
        let mut wrong = sums.clone();
        wrong.insert("crc32c".into(), "AAAAAA==".into());
        let e = verify(&md5, None, &sums, &wrong).unwrap_err();
        assert_eq!(e.code(), &s3s::S3ErrorCode::BadDigest);
        let mut other = BTreeMap::new();
        other.insert("sha256".into(), "x".into());
        assert!(verify(&md5, None, &sums, &other).is_err(), "not computed");
    }
}
