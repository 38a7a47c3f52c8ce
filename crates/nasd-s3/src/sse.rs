//! Server-side encryption as S3 clients ask for it (issue 22 §2), mapped onto what nasd does.
//!
//! - **SSE-S3** (`x-amz-server-side-encryption: AES256`, asked by a request or by the bucket's
//!   default, `PutBucketEncryption`): nasd already enciphers every file of an encrypted
//!   directory end to end with HCTR2-AES-256 (docs/e2e.md), so the request is honoured by
//!   checking that the object's file is such a file, and recorded on the object
//!   (`user.s3.sse`) so reads report it. A bucket whose files are plaintext refuses it
//!   (`NotImplemented`) rather than claim what is not so.
//! - **SSE-C** (a 256-bit key the client sends with every request): the gateway enciphers the
//!   object's bytes with AES-256 in counter mode before nasd's own encryption, under a key
//!   derived from the customer's key and a random salt per object; it keeps only the salt and
//!   a check value (HMAC-SHA256 of the key, like the salted HMAC S3 keeps), never the key.
//!   Reading, copying or extending the object needs the key again; a wrong one is refused.
//!   Integrity is nasd's: the bytes on the drives are signed by their writer and verified by
//!   every reader, so counter mode needs no tag of its own here.
//! - **SSE-KMS**: nasd has no key management service. An operator may declare key ids
//!   (`nasd s3 serve --kms-key-id ID`) as names of nasd's own encryption: a write naming one
//!   is served as SSE-S3 is, and the id is recorded and reported; no key service is asked,
//!   so the id grants and revokes nothing. Any other id, or none, is refused.
//!
//! Each part of a multipart upload is enciphered alone (its number in the counter block), so
//! completing an upload joins the stored parts as they are (the completion still sends the
//! key, checked, as every request on an SSE-C upload does); the object records the part
//! numbers when they are not 1 to N. An SSE-C object's ETag is keyed (HMAC of its MD5), so it does
//! not reveal a digest of the plaintext to whoever may list the bucket.

use aes::Aes256;
use base64::Engine as _;
use ctr::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
use hmac::{KeyInit, Mac};
use http::HeaderMap;
use md5::Digest as _;
use s3s::{s3_error, S3Error, S3Result};
use zeroize::Zeroizing;

/// The one algorithm SSE-S3 and SSE-C name.
pub const AES256: &str = "AES256";
/// An object's SSE-S3 record: the algorithm.
pub const SSE_ATTR: &str = "user.s3.sse";
/// An object's (or an upload's) SSE-C record: [`Sealed`].
pub const SSE_C_ATTR: &str = "user.s3.sse-c";
/// A bucket's default encryption: the algorithm new objects get when a request names none.
pub const BUCKET_DEFAULT_ATTR: &str = "user.s3.bucket.encryption";
const SSE_HEADER: &str = "x-amz-server-side-encryption";
const KMS_HEADERS: [&str; 3] = [
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-context",
    "x-amz-server-side-encryption-bucket-key-enabled",
];
const CUSTOMER: &str = "x-amz-server-side-encryption-customer-";
const COPY_SOURCE_CUSTOMER: &str = "x-amz-copy-source-server-side-encryption-customer-";
/// Version of the [`Sealed`] record and of the key derivation.
const RECORD_VERSION: &str = "1";
const SALT_BYTES: usize = 16;
const CHECK_BYTES: usize = 32;
const KDF_DATA: &[u8] = b"nasd s3 sse-c v1 data";
const KDF_CHECK: &[u8] = b"nasd s3 sse-c v1 check";
const KDF_ETAG: &[u8] = b"nasd s3 sse-c v1 etag";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;
type Aes256Ctr = ctr::Ctr128BE<Aes256>;

/// A customer's key, as a request sent it (checked against the MD5 it came with).
pub struct CustomerKey {
    key: Zeroizing<[u8; 32]>,
    /// The key's MD5, base64, as S3 reports it back.
    pub md5: String,
}

impl std::fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CustomerKey(md5 {})", self.md5)
    }
}

fn invalid(msg: &str) -> S3Error {
    s3_error!(InvalidArgument, "{msg}")
}

impl CustomerKey {
    /// The SSE-C key a request sends for its object (`copy_source`: for a copy's source);
    /// `None` when it sends none. Each of the three headers must be there and agree.
    pub fn from_headers(h: &HeaderMap, copy_source: bool) -> S3Result<Option<CustomerKey>> {
        let prefix = if copy_source {
            COPY_SOURCE_CUSTOMER
        } else {
            CUSTOMER
        };
        let get = |n: &str| {
            h.get(format!("{prefix}{n}"))
                .map(|v| v.to_str().unwrap_or("\u{fffd}"))
        };
        let (alg, key, md5) = (get("algorithm"), get("key"), get("key-md5"));
        if alg.is_none() && key.is_none() && md5.is_none() {
            return Ok(None);
        }
        match alg {
            None => return Err(invalid("an SSE-C request names its algorithm (AES256)")),
            Some(AES256) => {}
            Some(_) => {
                return Err(s3_error!(
                    InvalidEncryptionAlgorithmError,
                    "the only SSE-C algorithm is AES256"
                ))
            }
        }
        let key = key.ok_or_else(|| invalid("an SSE-C request sends its key"))?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let raw = Zeroizing::new(b64.decode(key).unwrap_or_default());
        let key: [u8; 32] = raw
            .as_slice()
            .try_into()
            .map_err(|_| invalid("the SSE-C key is not 256 bits in base64"))?;
        let key = Zeroizing::new(key);
        let md5 = md5.ok_or_else(|| invalid("an SSE-C request sends its key's MD5"))?;
        let want = b64.encode(md5::Md5::digest(key.as_slice()));
        if md5 != want {
            return Err(invalid(
                "the MD5 of the SSE-C key does not match the one sent",
            ));
        }
        Ok(Some(CustomerKey { key, md5: want }))
    }

    fn prf(&self, label: &[u8], salt: &[u8]) -> Zeroizing<[u8; 32]> {
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(self.key.as_slice())
            .expect("HMAC takes any key");
        m.update(label);
        m.update(salt);
        Zeroizing::new(m.finalize().into_bytes().into())
    }
}

/// What a write asks for.
#[derive(Debug)]
pub enum Asked {
    None,
    /// SSE-S3: nasd's own encryption, checked and recorded.
    S3,
    /// SSE-KMS naming a key id the operator declared ([`Asked::of_write`]'s `kms_ids`):
    /// nasd's own encryption as for SSE-S3, the id recorded and reported.
    Kms(String),
    Customer(CustomerKey),
}

/// The algorithm name of SSE-KMS.
pub const KMS: &str = "aws:kms";

impl Asked {
    /// What a write's headers ask for (`None` when nothing: the bucket's default applies,
    /// [`Asked::of_default`]). `kms_ids` are the KMS key ids the operator declared as names
    /// of nasd's own encryption (none: SSE-KMS is refused).
    pub fn of_write(h: &HeaderMap, kms_ids: &[String]) -> S3Result<Asked> {
        let customer = CustomerKey::from_headers(h, false)?;
        let text = |n: &str| h.get(n).map(|v| v.to_str().unwrap_or("\u{fffd}"));
        let sse = text(SSE_HEADER);
        let kms_id = text(KMS_HEADERS[0]);
        if h.contains_key(KMS_HEADERS[1]) {
            return Err(s3_error!(
                NotImplemented,
                "an SSE-KMS encryption context binds a key service's ciphertext; nasd has none"
            ));
        }
        let kms_only = kms_id.is_some() || h.contains_key(KMS_HEADERS[2]);
        match (sse, customer) {
            (Some(_), Some(_)) => Err(invalid(
                "a request asks for SSE-C or x-amz-server-side-encryption, not both",
            )),
            (None, Some(_)) | (Some(AES256), None) | (None, None) if kms_only => Err(invalid(
                "KMS parameters need x-amz-server-side-encryption: aws:kms",
            )),
            (None, Some(k)) => Ok(Asked::Customer(k)),
            (Some(AES256), None) => Ok(Asked::S3),
            (Some(KMS), None) => kms(kms_id, kms_ids),
            (Some("aws:kms:dsse"), None) => Err(no_kms()),
            (None, None) => Ok(Asked::None),
            (Some(a), None) => Err(invalid(&format!(
                "x-amz-server-side-encryption names no algorithm the gateway knows: {a:?}"
            ))),
        }
    }

    /// What a bucket's default (`record`, as [`Asked::at_rest`] makes it) asks of a write
    /// that asks nothing itself.
    pub fn of_default(record: &str, kms_ids: &[String]) -> S3Result<Asked> {
        match record.split_once(' ').unwrap_or((record, "")) {
            (AES256, _) => Ok(Asked::S3),
            (KMS, id) => kms(Some(id), kms_ids),
            _ => Ok(Asked::None),
        }
    }

    /// The record of encryption at rest this write asks for (`AES256`, or `aws:kms ID`),
    /// which the object keeps ([`SSE_ATTR`]) once its file is checked to be encrypted.
    pub fn at_rest(&self) -> Option<String> {
        match self {
            Asked::S3 => Some(AES256.into()),
            Asked::Kms(id) => Some(format!("{KMS} {id}")),
            _ => None,
        }
    }

    /// For an SSE-C write, a new record (a fresh salt) and the cipher it opens.
    pub fn seal(&self) -> S3Result<Option<(Sealed, Cipher)>> {
        let Asked::Customer(k) = self else {
            return Ok(None);
        };
        let sealed = Sealed::new(k);
        let cipher = sealed.open(k)?;
        Ok(Some((sealed, cipher)))
    }

    /// The key's MD5 of an SSE-C write, to report back.
    pub fn customer_md5(&self) -> Option<&str> {
        match self {
            Asked::Customer(k) => Some(&k.md5),
            _ => None,
        }
    }
}

/// SSE-KMS with key `id`: served when the operator declared the id, else refused.
fn kms(id: Option<&str>, declared: &[String]) -> S3Result<Asked> {
    if declared.is_empty() {
        return Err(no_kms());
    }
    match id {
        Some(id) if declared.iter().any(|d| d == id) => Ok(Asked::Kms(id.into())),
        Some(id) => Err(invalid(&format!(
            "KMS key {id:?} is not one this gateway was started with (--kms-key-id)"
        ))),
        None => Err(invalid(
            "SSE-KMS names its key id here (the gateway has no default key)",
        )),
    }
}

/// The headers of a PutObject with the encryption a POST form asks for in its fields (which
/// s3s moves into the input, not the headers), so a form is checked as a PUT is. Borrowed
/// as they are when the input asks for nothing the headers do not (every PUT but a form's).
pub fn with_form_fields<'h>(
    h: &'h HeaderMap,
    i: &s3s::dto::PutObjectInput,
) -> std::borrow::Cow<'h, HeaderMap> {
    let fields = [
        (
            SSE_HEADER,
            i.server_side_encryption.as_ref().map(|s| s.as_str()),
        ),
        (KMS_HEADERS[0], i.ssekms_key_id.as_deref()),
        (
            "x-amz-server-side-encryption-customer-algorithm",
            i.sse_customer_algorithm.as_deref(),
        ),
        (
            "x-amz-server-side-encryption-customer-key",
            i.sse_customer_key.as_deref(),
        ),
        (
            "x-amz-server-side-encryption-customer-key-md5",
            i.sse_customer_key_md5.as_deref(),
        ),
    ];
    let mut h = std::borrow::Cow::Borrowed(h);
    for (name, value) in fields {
        if let (false, Some(v)) = (h.contains_key(name), value) {
            if let Ok(v) = http::HeaderValue::from_str(v) {
                h.to_mut().insert(name, v);
            }
        }
    }
    h
}

/// The refusal of SSE-KMS when the operator declared no key ids.
pub fn no_kms() -> S3Error {
    s3_error!(
        NotImplemented,
        "nasd has no key management service, and this gateway declares no KMS key ids; SSE-S3 (AES256, nasd's end-to-end encryption) and SSE-C are served"
    )
}

/// Refuses `x-amz-server-side-encryption` and KMS headers on a request that reads (S3 takes
/// them only on writes).
pub fn refuse_on_read(h: &HeaderMap) -> S3Result<()> {
    if h.contains_key(SSE_HEADER) || KMS_HEADERS.iter().any(|n| h.contains_key(*n)) {
        return Err(invalid(
            "x-amz-server-side-encryption belongs on writes, not reads",
        ));
    }
    Ok(())
}

/// An SSE-C object's record: the salt its keys were derived with, the check value of the
/// customer's key, and the numbers its parts were enciphered under (none: a single part 0,
/// or parts 1 to N when the object has N recorded parts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    salt: [u8; SALT_BYTES],
    check: [u8; CHECK_BYTES],
    pub numbers: Vec<u32>,
}

impl Sealed {
    /// A new record for `key`, with a fresh salt.
    pub fn new(key: &CustomerKey) -> Sealed {
        let mut salt = [0u8; SALT_BYTES];
        nasd_crypto::random_bytes(&mut salt);
        let check = *key.prf(KDF_CHECK, &salt);
        Sealed {
            salt,
            check,
            numbers: vec![],
        }
    }

    /// A record that opens for no key (what an attribute that does not parse stands for).
    pub fn unreadable() -> Sealed {
        Sealed {
            salt: [0; SALT_BYTES],
            check: [0; CHECK_BYTES],
            numbers: vec![],
        }
    }

    /// The cipher for the object, when `key` is the one it was sealed with.
    pub fn open(&self, key: &CustomerKey) -> S3Result<Cipher> {
        use subtle::ConstantTimeEq;
        let check = key.prf(KDF_CHECK, &self.salt);
        if !bool::from(check.as_slice().ct_eq(&self.check)) {
            return Err(s3_error!(
                InvalidRequest,
                "the SSE-C key is not the one the object was stored with"
            ));
        }
        Ok(Cipher {
            data: key.prf(KDF_DATA, &self.salt),
            etag: key.prf(KDF_ETAG, &self.salt),
        })
    }

    /// The attribute's value: `1 SALT CHECK [N,N,...]` (hex; the numbers only when given).
    pub fn value(&self) -> String {
        let mut v = format!(
            "{RECORD_VERSION} {} {}",
            hex::encode(self.salt),
            hex::encode(self.check)
        );
        if !self.numbers.is_empty() {
            let n: Vec<String> = self.numbers.iter().map(u32::to_string).collect();
            v.push(' ');
            v.push_str(&n.join(","));
        }
        v
    }

    /// The record in an attribute's value; `None` when it is not one.
    pub fn parse(v: &str) -> Option<Sealed> {
        let mut it = v.split(' ');
        if it.next()? != RECORD_VERSION {
            return None;
        }
        let salt = hex::decode(it.next()?).ok()?.try_into().ok()?;
        let check = hex::decode(it.next()?).ok()?.try_into().ok()?;
        let numbers = match it.next() {
            None => vec![],
            Some(n) => n
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?,
        };
        it.next().is_none().then_some(Sealed {
            salt,
            check,
            numbers,
        })
    }
}

/// An SSE-C object's keys, derived from the customer's key and the object's salt.
pub struct Cipher {
    data: Zeroizing<[u8; 32]>,
    etag: Zeroizing<[u8; 32]>,
}

impl Cipher {
    /// The keystream of part `part` from byte `off` of it.
    pub fn stream(&self, part: u32, off: u64) -> PartStream {
        let mut iv = [0u8; 16];
        iv[..4].copy_from_slice(&part.to_be_bytes());
        let mut c = Aes256Ctr::new(&(*self.data).into(), &iv.into());
        c.seek(off);
        PartStream(c)
    }

    /// The ETag of an SSE-C object or part whose plaintext has MD5 `md5`.
    pub fn etag(&self, md5: &[u8; 16]) -> [u8; 16] {
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(self.etag.as_slice())
            .expect("HMAC takes any key");
        m.update(md5);
        m.finalize().into_bytes()[..16]
            .try_into()
            .expect("16 of 32 bytes")
    }
}

/// A part's keystream, applied in order (enciphering and deciphering are the same).
pub struct PartStream(Aes256Ctr);

impl PartStream {
    pub fn apply(&mut self, buf: &mut [u8]) {
        self.0.apply_keystream(buf);
    }
}

/// An SSE-C object's bytes by offset: which part each lies in, and where in it.
pub struct ObjectCipher {
    cipher: Cipher,
    /// (start in the object, part number), in order; the first starts at 0.
    parts: Vec<(u64, u32)>,
}

impl ObjectCipher {
    /// The object of parts `part_sizes` (empty: one part, number 0) sealed as `sealed`.
    pub fn new(cipher: Cipher, sealed: &Sealed, part_sizes: &[u64]) -> S3Result<ObjectCipher> {
        if part_sizes.is_empty() {
            return Ok(ObjectCipher {
                cipher,
                parts: vec![(0, 0)],
            });
        }
        let numbers: Vec<u32> = match sealed.numbers.is_empty() {
            true => (1..=part_sizes.len() as u32).collect(),
            false => sealed.numbers.clone(),
        };
        if numbers.len() != part_sizes.len() {
            return Err(s3_error!(
                InternalError,
                "the object's SSE-C record does not match its parts"
            ));
        }
        let mut start = 0;
        let mut parts = Vec::with_capacity(numbers.len());
        for (n, size) in numbers.into_iter().zip(part_sizes) {
            parts.push((start, n));
            start += size;
        }
        Ok(ObjectCipher { cipher, parts })
    }

    /// Deciphers `buf`, which lies at `off` in the object.
    pub fn apply(&self, off: u64, buf: &mut [u8]) {
        let mut i = self.parts.partition_point(|(s, _)| *s <= off) - 1;
        let mut at = off;
        let mut rest = buf;
        while !rest.is_empty() {
            let (start, n) = self.parts[i];
            let end = self.parts.get(i + 1).map_or(u64::MAX, |p| p.0);
            let take = (end - at).min(rest.len() as u64) as usize;
            let (now, later) = rest.split_at_mut(take);
            self.cipher.stream(n, at - start).apply(now);
            at += take as u64;
            rest = later;
            i += 1;
        }
    }

    pub fn cipher(&self) -> &Cipher {
        &self.cipher
    }
}

/// The cipher of an object (or upload) recorded as `sealed` (or not), given the request's
/// headers (`copy_source`: a copy's source key): an SSE-C object needs its key, and a key
/// for any other object is refused.
pub fn open(h: &HeaderMap, copy_source: bool, sealed: Option<&Sealed>) -> S3Result<Option<Cipher>> {
    let key = CustomerKey::from_headers(h, copy_source)?;
    match (sealed, key) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(s3_error!(
            InvalidRequest,
            "The encryption parameters are not applicable to this object"
        )),
        (Some(_), None) => Err(s3_error!(
            InvalidRequest,
            "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object."
        )),
        (Some(s), Some(k)) => Ok(Some(s.open(&k)?)),
    }
}

/// [`open`] for reading an object of parts `part_sizes`.
pub fn for_read(
    h: &HeaderMap,
    copy_source: bool,
    sealed: Option<&Sealed>,
    part_sizes: &[u64],
) -> S3Result<Option<ObjectCipher>> {
    match (open(h, copy_source, sealed)?, sealed) {
        (Some(c), Some(s)) => Ok(Some(ObjectCipher::new(c, s, part_sizes)?)),
        _ => Ok(None),
    }
}

/// The reply headers of an object stored with `sse` (its record of encryption at rest,
/// [`Asked::at_rest`]) or SSE-C key `md5`.
pub fn reply(headers: &mut HeaderMap, sse: Option<&str>, customer_md5: Option<&str>) {
    let put = |h: &mut HeaderMap, n: &'static str, v: &str| {
        if let Ok(v) = http::HeaderValue::from_str(v) {
            h.insert(n, v);
        }
    };
    if let Some(a) = sse {
        let (alg, id) = a.split_once(' ').unwrap_or((a, ""));
        put(headers, SSE_HEADER, alg);
        if alg == KMS {
            put(headers, KMS_HEADERS[0], id);
        }
    }
    if let Some(md5) = customer_md5 {
        put(
            headers,
            "x-amz-server-side-encryption-customer-algorithm",
            AES256,
        );
        put(
            headers,
            "x-amz-server-side-encryption-customer-key-md5",
            md5,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_B64: &str = "pO3upElrwuEXSoFwCfnZPdSsmt/xWeFa0N9KgDijwVs=";
    const KEY_MD5: &str = "DWygnHRtgiJ77HCm+1rvHw==";

    fn headers(kv: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in kv {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn key() -> CustomerKey {
        CustomerKey::from_headers(
            &headers(&[
                ("x-amz-server-side-encryption-customer-algorithm", "AES256"),
                ("x-amz-server-side-encryption-customer-key", KEY_B64),
                ("x-amz-server-side-encryption-customer-key-md5", KEY_MD5),
            ]),
            false,
        )
        .unwrap()
        .unwrap()
    }

    #[test]
    fn customer_keys_are_checked_header_by_header() {
        let code = |kv: &[(&str, &str)]| {
            CustomerKey::from_headers(&headers(kv), false)
                .err()
                .map(|e| e.code().as_str().to_string())
        };
        let alg = ("x-amz-server-side-encryption-customer-algorithm", "AES256");
        let k = ("x-amz-server-side-encryption-customer-key", KEY_B64);
        let md5 = ("x-amz-server-side-encryption-customer-key-md5", KEY_MD5);
        assert_eq!(code(&[alg, k, md5]), None);
        assert_eq!(code(&[k, md5]).as_deref(), Some("InvalidArgument"));
        assert_eq!(code(&[alg, md5]).as_deref(), Some("InvalidArgument"));
        assert_eq!(code(&[alg, k]).as_deref(), Some("InvalidArgument"));
        let bad_md5 = (md5.0, "AAAAAAAAAAAAAAAAAAAAAA==");
        assert_eq!(code(&[alg, k, bad_md5]).as_deref(), Some("InvalidArgument"));
        let short = (k.0, "c2hvcnQ=");
        assert_eq!(code(&[alg, short, md5]).as_deref(), Some("InvalidArgument"));
        let des = (alg.0, "DES");
        assert_eq!(
            code(&[des, k, md5]).as_deref(),
            Some("InvalidEncryptionAlgorithmError")
        );
        assert!(CustomerKey::from_headers(&headers(&[]), false)
            .unwrap()
            .is_none());
        // A copy's source key lives in headers of its own.
        assert!(CustomerKey::from_headers(&headers(&[alg, k, md5]), true)
            .unwrap()
            .is_none());
    }

    #[test]
    fn writes_ask_for_one_kind_of_encryption() {
        let sse = ("x-amz-server-side-encryption", "AES256");
        let alg = ("x-amz-server-side-encryption-customer-algorithm", "AES256");
        let k = ("x-amz-server-side-encryption-customer-key", KEY_B64);
        let md5 = ("x-amz-server-side-encryption-customer-key-md5", KEY_MD5);
        let ids = ["k1".to_string()];
        // As the gateway asks: the headers, then the bucket's default `d`.
        let asked =
            |kv: &[(&str, &str)], d: Option<&str>| match Asked::of_write(&headers(kv), &ids)? {
                Asked::None => d.map_or(Ok(Asked::None), |d| Asked::of_default(d, &ids)),
                a => Ok(a),
            };
        assert!(matches!(asked(&[sse], None), Ok(Asked::S3)));
        assert!(matches!(asked(&[], Some(AES256)), Ok(Asked::S3)));
        assert!(matches!(asked(&[], None), Ok(Asked::None)));
        assert!(matches!(
            asked(&[alg, k, md5], Some(AES256)),
            Ok(Asked::Customer(_))
        ));
        let code = |r: S3Result<Asked>| r.err().map(|e| e.code().as_str().to_string());
        assert_eq!(
            code(asked(&[sse, alg, k, md5], None)).as_deref(),
            Some("InvalidArgument")
        );
        assert_eq!(
            code(asked(&[("x-amz-server-side-encryption", "aes:kms")], None)).as_deref(),
            Some("InvalidArgument")
        );
        // SSE-KMS: a declared key id, named by the request or the bucket's default.
        let kms = ("x-amz-server-side-encryption", "aws:kms");
        let id = |v| ("x-amz-server-side-encryption-aws-kms-key-id", v);
        assert!(matches!(asked(&[kms, id("k1")], None), Ok(Asked::Kms(k)) if k == "k1"));
        assert!(matches!(asked(&[], Some("aws:kms k1")), Ok(Asked::Kms(k)) if k == "k1"));
        assert_eq!(
            asked(&[kms, id("k1")], None).unwrap().at_rest().as_deref(),
            Some("aws:kms k1")
        );
        for bad in [
            vec![kms],
            vec![kms, id("k2")],
            vec![id("k1")],
            vec![sse, id("k1")],
        ] {
            assert_eq!(
                code(asked(&bad, None)).as_deref(),
                Some("InvalidArgument"),
                "{bad:?}"
            );
        }
        let none = Asked::of_write(&headers(&[kms, id("k1")]), &[]);
        assert_eq!(code(none).as_deref(), Some("NotImplemented"));
    }

    /// Known answers, computed apart from this code: the keys with Python's `hmac`
    /// (`hmac.new(key, label + salt, sha256)`) and the keystream with
    /// `openssl enc -aes-256-ctr -K DATA_KEY -iv 00000002000000000000000000000000`.
    #[test]
    fn derivation_and_keystream_match_known_answers() {
        let k = key();
        let sealed = Sealed {
            salt: [7u8; SALT_BYTES],
            check: *k.prf(KDF_CHECK, &[7u8; SALT_BYTES]),
            numbers: vec![],
        };
        assert_eq!(hex::encode(sealed.check), KAT_CHECK);
        let c = sealed.open(&k).unwrap();
        assert_eq!(hex::encode(*c.data), KAT_DATA_KEY);
        let mut buf = [0u8; 40];
        c.stream(2, 0).apply(&mut buf);
        assert_eq!(hex::encode(buf), KAT_PART2_STREAM);
        // From the middle of a block, the same bytes.
        let mut tail = [0u8; 19];
        c.stream(2, 21).apply(&mut tail);
        assert_eq!(tail[..], buf[21..]);
        assert_eq!(hex::encode(c.etag(&[0u8; 16])), KAT_ETAG);
    }

    const KAT_CHECK: &str = "f54c990789aa352d74b17a14bb9d39dca15768cf03d65313e01a759e7483d006";
    const KAT_DATA_KEY: &str = "aa1feee115e4c5001cb08c9a307570baf6b89498c58b3c141ddbbda510bb9996";
    const KAT_PART2_STREAM: &str =
        "293b6a2bc9e570ae5f0c6db76a1df6897fb408fe60ee854df9d198f6f6f2ce6286946214bf13bfa4";
    const KAT_ETAG: &str = "f2cf9a5f6b1455b264f63608ab4f1dad";

    #[test]
    fn a_wrong_key_does_not_open_the_record() {
        let k = key();
        let s = Sealed::new(&k);
        assert!(s.open(&k).is_ok());
        let other = CustomerKey {
            key: Zeroizing::new([1u8; 32]),
            md5: String::new(),
        };
        assert_eq!(
            s.open(&other).err().unwrap().code().as_str(),
            "InvalidRequest"
        );
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_none() {
        let mut s = Sealed::new(&key());
        assert_eq!(Sealed::parse(&s.value()), Some(s.clone()));
        s.numbers = vec![1, 3, 7];
        assert_eq!(Sealed::parse(&s.value()), Some(s.clone()));
        for bad in [
            "",
            "2 00 00",
            "1 zz 00",
            "1 00",
            &format!("{} x", s.value()),
        ] {
            assert_eq!(Sealed::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_object_deciphers_across_its_parts_from_any_offset() {
        let k = key();
        let mut s = Sealed::new(&k);
        s.numbers = vec![1, 4, 9];
        let sizes = [1000u64, 37, 500];
        let plain: Vec<u8> = (0..1537u32).map(|i| (i * 7) as u8).collect();
        // Each part enciphered alone under its number, as uploads do.
        let c = s.open(&k).unwrap();
        let mut stored = plain.clone();
        let mut at = 0;
        for (n, size) in s.numbers.iter().zip(sizes) {
            c.stream(*n, 0).apply(&mut stored[at..at + size as usize]);
            at += size as usize;
        }
        let o = ObjectCipher::new(s.open(&k).unwrap(), &s, &sizes).unwrap();
        for (start, end) in [(0, 1537), (990, 1040), (1000, 1037), (1036, 1038), (5, 6)] {
            let mut b = stored[start..end].to_vec();
            o.apply(start as u64, &mut b);
            assert_eq!(b, plain[start..end], "{start}..{end}");
        }
        s.numbers.pop();
        assert!(ObjectCipher::new(s.open(&k).unwrap(), &s, &sizes).is_err());
    }
}
