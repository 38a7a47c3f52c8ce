//! aws-chunked bodies in bounded memory (issue 22 §3). A streaming SigV4 upload
//! (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`, `STREAMING-UNSIGNED-PAYLOAD-TRAILER`)
//! sends its bytes in chunks of a size it declares, each signed in a chain from the request's
//! seed signature. s3s collects a whole declared chunk before it checks its signature, so a
//! client declaring a 1 GiB chunk makes the gateway hold 1 GiB. [`Rechunk`] sits in front:
//! it reads each declared chunk a frame at a time, hashing it as it passes and checking its
//! signature when it ends, and hands s3s the same bytes re-cut into chunks of at most
//! [`CHUNK_BYTES_MAX`], signed anew in a chain from the same seed, so s3s never holds more
//! than that.
//!
//! Bytes of a chunk reach the upload before that chunk's signature is checked, but nothing
//! is committed until the body ends, and the body ends (the final chunk is handed on) only
//! after every chunk and the trailer checked: a forged chunk fails the upload and leaves
//! nothing. Trailers are checked and signed anew in the same chain.

use bytes::{Buf, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// Largest chunk handed to s3s (which holds one chunk at a time).
pub const CHUNK_BYTES_MAX: usize = 64 << 10;
/// Longest chunk header line (`size;chunk-signature=…`), as s3s allows.
pub const CHUNK_META_BYTES_MAX: usize = 1024;
/// Largest trailer section, as s3s allows.
pub const TRAILER_BYTES_MAX: usize = 16 << 10;

const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(msg);
    m.finalize().into_bytes().into()
}

/// What signs a streaming upload's chunks: the SigV4 signing key of its credential scope,
/// its date and the seed signature (the request's own).
#[derive(Clone)]
pub struct Signing {
    key: [u8; 32],
    amz_date: String,
    scope: String,
    seed: String,
}

impl Signing {
    /// From a request's `Authorization` (`AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/
    /// SERVICE/aws4_request, SignedHeaders=…, Signature=…`) and `x-amz-date`, with the
    /// secret of its access key. `None` when they are malformed (s3s then refuses the
    /// request before it reads the body).
    pub fn new(authorization: &str, amz_date: &str, secret: &str) -> Option<Signing> {
        let rest = authorization.strip_prefix("AWS4-HMAC-SHA256")?.trim();
        let mut credential = None;
        let mut signature = None;
        for part in rest.split(',') {
            let (k, v) = part.trim().split_once('=')?;
            match k.trim() {
                "Credential" => credential = Some(v.trim()),
                "Signature" => signature = Some(v.trim()),
                _ => {}
            }
        }
        let mut c = credential?.splitn(2, '/');
        let _access_key = c.next()?;
        let scope = c.next()?.to_string();
        let mut s = scope.split('/');
        let (date, region, service) = (s.next()?, s.next()?, s.next()?);
        if s.next()? != "aws4_request" || !amz_date.starts_with(date) {
            return None;
        }
        let mut key = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
        for part in [region, service, "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
        Some(Signing {
            key,
            amz_date: amz_date.to_string(),
            scope,
            seed: signature?.to_ascii_lowercase(),
        })
    }

    /// The signature of a chunk whose bytes hash to `data_sha256`, after `prev`.
    fn chunk(&self, prev: &str, data_sha256: &[u8]) -> String {
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{prev}\n{EMPTY_SHA256}\n{}",
            self.amz_date,
            self.scope,
            hex::encode(data_sha256)
        );
        hex::encode(hmac(&self.key, sts.as_bytes()))
    }

    /// The signature of a trailer section whose canonical form is `canonical`, after `prev`.
    fn trailer(&self, prev: &str, canonical: &[u8]) -> String {
        let sts = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{prev}\n{}",
            self.amz_date,
            self.scope,
            hex::encode(Sha256::digest(canonical))
        );
        hex::encode(hmac(&self.key, sts.as_bytes()))
    }
}

fn bad(why: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("aws-chunked: {why}"),
    )
}

/// Reads an underlying stream of frames a line or a bounded slice at a time.
struct Reader<S> {
    inner: S,
    buf: Bytes,
}

impl<S, E> Reader<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    /// The next frame into `buf`; `false` at the end.
    async fn fill(&mut self) -> std::io::Result<bool> {
        while self.buf.is_empty() {
            match self.inner.next().await {
                None => return Ok(false),
                Some(Err(e)) => return Err(std::io::Error::other(e.to_string())),
                Some(Ok(b)) => self.buf = b,
            }
        }
        Ok(true)
    }

    /// A line without its CRLF, of at most `max` bytes.
    async fn line(&mut self, max: usize) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            if !self.fill().await? {
                return Err(bad("the body ended inside a chunk header"));
            }
            match self.buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    out.extend_from_slice(&self.buf[..i]);
                    self.buf.advance(i + 1);
                    if out.last() == Some(&b'\r') {
                        out.pop();
                    }
                    if out.len() > max {
                        return Err(bad("a chunk header is too long"));
                    }
                    return Ok(out);
                }
                None => {
                    out.extend_from_slice(&self.buf);
                    self.buf.clear();
                    // Its CR may have come, and its LF not yet.
                    if out.len() > max + 1 {
                        return Err(bad("a chunk header is too long"));
                    }
                }
            }
        }
    }

    /// Up to `max` bytes (at least one).
    async fn some(&mut self, max: usize) -> std::io::Result<Bytes> {
        if !self.fill().await? {
            return Err(bad("the body ended inside a chunk"));
        }
        let n = max.min(self.buf.len());
        Ok(self.buf.split_to(n))
    }

    /// Everything left, at most `max` bytes.
    async fn rest(&mut self, max: usize) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        while self.fill().await? {
            out.extend_from_slice(&self.buf);
            self.buf.clear();
            if out.len() > max {
                return Err(bad("the trailer is too long"));
            }
        }
        Ok(out)
    }
}

/// A chunk header: its size and signature.
fn parse_meta(line: &[u8]) -> std::io::Result<(usize, Option<String>)> {
    let line = std::str::from_utf8(line).map_err(|_| bad("a chunk header is not text"))?;
    let (size, ext) = match line.split_once(';') {
        Some((s, e)) => (s, Some(e)),
        None => (line, None),
    };
    let size = usize::from_str_radix(size.trim(), 16).map_err(|_| bad("bad chunk size"))?;
    let sig = match ext {
        None => None,
        Some(e) => Some(
            e.strip_prefix("chunk-signature=")
                .filter(|s| s.len() == 64)
                .ok_or_else(|| bad("bad chunk signature"))?
                .to_ascii_lowercase(),
        ),
    };
    Ok((size, sig))
}

/// A trailer section's headers (lower-case names) and signature, and its canonical form:
/// `name:value\n` sorted by name, as s3s signs it.
#[allow(clippy::type_complexity)]
fn parse_trailers(raw: &[u8]) -> std::io::Result<(Vec<(String, String)>, Option<String>, Vec<u8>)> {
    let text = std::str::from_utf8(raw).map_err(|_| bad("the trailer is not text"))?;
    let mut entries = vec![];
    let mut sig = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let (n, v) = line
            .split_once(':')
            .ok_or_else(|| bad("bad trailer line"))?;
        let (n, v) = (n.to_ascii_lowercase(), v.trim().to_string());
        if n == "x-amz-trailer-signature" {
            sig = Some(v.to_ascii_lowercase());
        } else {
            entries.push((n, v));
        }
    }
    entries.sort();
    let mut canonical = vec![];
    for (n, v) in &entries {
        canonical.extend_from_slice(format!("{n}:{v}\n").as_bytes());
    }
    Ok((entries, sig, canonical))
}

enum State {
    Meta,
    Data {
        left: usize,
        sig: Option<String>,
        hash: Sha256,
    },
    Done,
}

/// The re-cutting of one aws-chunked body: `signing` for a signed body, `None` for
/// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`.
pub struct Rechunk<S> {
    r: Reader<S>,
    signing: Option<Signing>,
    /// The last signature of the body as it came, and as it is handed on.
    prev_in: String,
    prev_out: String,
    state: State,
    out: std::collections::VecDeque<Bytes>,
}

impl<S, E> Rechunk<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
    E: std::fmt::Display,
{
    pub fn new(inner: S, signing: Option<Signing>) -> Self {
        let seed = signing.as_ref().map(|s| s.seed.clone()).unwrap_or_default();
        Rechunk {
            r: Reader {
                inner,
                buf: Bytes::new(),
            },
            signing,
            prev_in: seed.clone(),
            prev_out: seed,
            state: State::Meta,
            out: Default::default(),
        }
    }

    /// The body re-cut, as a stream.
    pub fn into_stream(self) -> impl Stream<Item = std::io::Result<Bytes>> + Send
    where
        S: 'static,
        E: 'static,
    {
        futures_util::stream::unfold(self, |mut s| async move {
            let item = s.next_bytes().await.transpose()?;
            if item.is_err() {
                s.state = State::Done;
                s.out.clear();
            }
            Some((item, s))
        })
    }

    /// Queues one chunk of `data` (signed when the body is).
    fn emit(&mut self, data: Bytes) {
        let meta = match &self.signing {
            Some(s) => {
                let sig = s.chunk(&self.prev_out, &Sha256::digest(&data));
                let m = format!("{:x};chunk-signature={sig}\r\n", data.len());
                self.prev_out = sig;
                m
            }
            None => format!("{:x}\r\n", data.len()),
        };
        self.out.push_back(Bytes::from(meta));
        if !data.is_empty() {
            self.out.push_back(data);
            self.out.push_back(Bytes::from_static(b"\r\n"));
        }
    }

    /// Checks a chunk's signature as it came.
    fn check(&mut self, sig: Option<String>, data_sha256: &[u8]) -> std::io::Result<()> {
        let Some(s) = &self.signing else {
            return Ok(());
        };
        let want = s.chunk(&self.prev_in, data_sha256);
        match sig {
            Some(got) if got == want => {
                self.prev_in = want;
                Ok(())
            }
            _ => Err(bad("a chunk's signature does not match")),
        }
    }

    /// The final chunk, and the trailer after it, checked and handed on.
    async fn finish(&mut self, sig: Option<String>) -> std::io::Result<()> {
        self.check(sig, &Sha256::digest(b""))?;
        self.emit(Bytes::new());
        let raw = self.r.rest(TRAILER_BYTES_MAX).await?;
        let Some(s) = self.signing.clone() else {
            // Unsigned chunks: the trailer's signature, if any, follows the seed alone.
            self.out.push_back(Bytes::from(raw));
            return Ok(());
        };
        let (entries, tsig, canonical) = parse_trailers(&raw)?;
        if entries.is_empty() && tsig.is_none() {
            self.out.push_back(Bytes::from_static(b"\r\n"));
            return Ok(());
        }
        if tsig.as_deref() != Some(s.trailer(&self.prev_in, &canonical).as_str()) {
            return Err(bad("the trailer's signature does not match"));
        }
        let mut t = BytesMut::new();
        for (n, v) in &entries {
            t.extend_from_slice(format!("{n}:{v}\r\n").as_bytes());
        }
        let resigned = s.trailer(&self.prev_out, &canonical);
        t.extend_from_slice(format!("x-amz-trailer-signature:{resigned}\r\n\r\n").as_bytes());
        self.out.push_back(t.freeze());
        Ok(())
    }

    async fn next_bytes(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            if let Some(b) = self.out.pop_front() {
                return Ok(Some(b));
            }
            match &mut self.state {
                State::Done => return Ok(None),
                State::Meta => {
                    let line = self.r.line(CHUNK_META_BYTES_MAX).await?;
                    let (size, sig) = parse_meta(&line)?;
                    if self.signing.is_some() && sig.is_none() {
                        return Err(bad("a chunk has no signature"));
                    }
                    if size == 0 {
                        self.state = State::Done;
                        self.finish(sig).await?;
                    } else {
                        self.state = State::Data {
                            left: size,
                            sig,
                            hash: Sha256::new(),
                        };
                    }
                }
                State::Data { left: 0, .. } => {
                    let State::Data { sig, hash, .. } =
                        std::mem::replace(&mut self.state, State::Meta)
                    else {
                        unreachable!("matched above")
                    };
                    if self.r.line(0).await? != b"" {
                        return Err(bad("a chunk is longer than it said"));
                    }
                    self.check(sig, &hash.finalize())?;
                }
                State::Data { left, hash, .. } => {
                    let data = self.r.some((*left).min(CHUNK_BYTES_MAX)).await?;
                    *left -= data.len();
                    hash.update(&data);
                    self.emit(data);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of AWS's "Signature Calculations for the Authorization Header: Transferring
    // Payload in Multiple Chunks": 65 KiB of `a` in a 64 KiB and a 1 KiB chunk.
    const AUTH: &str = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const DATE: &str = "20130524T000000Z";
    const SIGS: [&str; 3] = [
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
    ];

    fn aws_example() -> Vec<u8> {
        let mut body = Vec::new();
        for (size, sig) in [(65536usize, SIGS[0]), (1024, SIGS[1]), (0, SIGS[2])] {
            body.extend_from_slice(format!("{size:x};chunk-signature={sig}\r\n").as_bytes());
            body.extend_from_slice(&vec![b'a'; size]);
            body.extend_from_slice(b"\r\n");
        }
        body
    }

    /// Runs `body`, cut into frames of `frame` bytes, through a re-chunker.
    fn run(body: &[u8], frame: usize, signing: Option<Signing>) -> std::io::Result<Vec<u8>> {
        let frames: Vec<Result<Bytes, std::io::Error>> = body
            .chunks(frame)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let s = Rechunk::new(futures_util::stream::iter(frames), signing).into_stream();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut out = vec![];
            let mut s = std::pin::pin!(s);
            while let Some(b) = s.next().await {
                out.extend_from_slice(&b?);
            }
            Ok(out)
        })
    }

    /// Decodes a re-cut body, checking each chunk's size and signature in its chain: the
    /// data, what follows the final chunk, and the final chunk's signature.
    fn decode(out: &[u8], signing: &Signing) -> (Vec<u8>, Vec<u8>, String) {
        let mut data = vec![];
        let mut rest = out;
        let mut prev = signing.seed.clone();
        loop {
            let nl = rest.iter().position(|&b| b == b'\n').unwrap();
            let (size, sig) = parse_meta(&rest[..nl - 1]).unwrap();
            rest = &rest[nl + 1..];
            assert!(size <= CHUNK_BYTES_MAX);
            let chunk = &rest[..size];
            let want = signing.chunk(&prev, &Sha256::digest(chunk));
            assert_eq!(sig.unwrap(), want);
            prev = want;
            data.extend_from_slice(chunk);
            if size == 0 {
                return (data, rest.to_vec(), prev);
            }
            assert_eq!(&rest[size..size + 2], b"\r\n");
            rest = &rest[size + 2..];
        }
    }

    #[test]
    fn the_aws_example_checks_and_is_recut_into_bounded_signed_chunks() {
        let s = Signing::new(AUTH, DATE, SECRET).unwrap();
        for frame in [1, 7, 4096, 1 << 20] {
            let out = run(&aws_example(), frame, Some(s.clone())).unwrap();
            let (data, tail, _) = decode(&out, &s);
            assert_eq!(data, vec![b'a'; 65536 + 1024], "frames of {frame}");
            assert_eq!(tail, b"\r\n");
        }
    }

    #[test]
    fn a_changed_byte_or_signature_fails_before_the_body_ends() {
        let s = Signing::new(AUTH, DATE, SECRET).unwrap();
        let mut body = aws_example();
        let at = body.len() - 200;
        body[at] = b'b';
        assert!(run(&body, 4096, Some(s.clone())).is_err());
        let mut body = aws_example();
        let at = body.iter().position(|&b| b == b'=').unwrap() + 1;
        body[at] = if body[at] == b'0' { b'1' } else { b'0' };
        assert!(run(&body, 4096, Some(s.clone())).is_err());
        // A chunk longer than declared, a body cut short, and a huge declared chunk that
        // never arrives.
        let long = aws_example().replacen(b"400;", b"3ff;");
        assert!(run(&long, 4096, Some(s.clone())).is_err());
        let body = aws_example();
        assert!(run(&body[..body.len() - 100], 4096, Some(s.clone())).is_err());
        let huge = format!("40000000;chunk-signature={}\r\n", SIGS[0]).into_bytes();
        let mut big = huge.clone();
        big.extend(vec![b'z'; 1 << 20]);
        assert!(run(&big, 65536, Some(s)).is_err());
    }

    #[test]
    fn trailers_are_checked_and_signed_in_the_new_chain() {
        let s = Signing::new(AUTH, DATE, SECRET).unwrap();
        let data = vec![b'q'; 200_000];
        let mut body = Vec::new();
        let mut prev = s.seed.clone();
        for c in [&data[..], &[][..]] {
            let sig = s.chunk(&prev, &Sha256::digest(c));
            body.extend_from_slice(format!("{:x};chunk-signature={sig}\r\n", c.len()).as_bytes());
            body.extend_from_slice(c);
            if !c.is_empty() {
                body.extend_from_slice(b"\r\n");
            }
            prev = sig;
        }
        let canonical = b"x-amz-checksum-crc32:AAAAAA==\n";
        let tsig = s.trailer(&prev, canonical);
        let trailer =
            format!("x-amz-checksum-crc32:AAAAAA==\r\nx-amz-trailer-signature:{tsig}\r\n\r\n");
        let mut good = body.clone();
        good.extend_from_slice(trailer.as_bytes());
        let out = run(&good, 10_000, Some(s.clone())).unwrap();
        let (got, tail, p) = decode(&out, &s);
        assert_eq!(got, data);
        // The trailer follows the re-cut chain.
        let want = format!(
            "x-amz-checksum-crc32:AAAAAA==\r\nx-amz-trailer-signature:{}\r\n\r\n",
            s.trailer(&p, canonical)
        );
        assert_eq!(String::from_utf8(tail).unwrap(), want);
        let mut forged = body;
        forged.extend_from_slice(trailer.replace("AAAAAA==", "BBBBBB==").as_bytes());
        assert!(run(&forged, 10_000, Some(s)).is_err());
    }

    #[test]
    fn unsigned_chunks_are_recut_and_their_trailer_passes() {
        let data = vec![b'u'; 300_000];
        let mut body = format!("{:x}\r\n", data.len()).into_bytes();
        body.extend_from_slice(&data);
        body.extend_from_slice(b"\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n");
        let out = run(&body, 100_000, None).unwrap();
        let mut rest = &out[..];
        let mut got = vec![];
        loop {
            let nl = rest.iter().position(|&b| b == b'\n').unwrap();
            let (size, sig) = parse_meta(&rest[..nl - 1]).unwrap();
            assert!(sig.is_none() && size <= CHUNK_BYTES_MAX);
            rest = &rest[nl + 1..];
            if size == 0 {
                break;
            }
            got.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        assert_eq!(got, data);
        assert_eq!(rest, b"x-amz-checksum-crc32:AAAAAA==\r\n\r\n");
    }

    trait ReplaceN {
        fn replacen(self, from: &[u8], to: &[u8]) -> Vec<u8>;
    }
    impl ReplaceN for Vec<u8> {
        fn replacen(self, from: &[u8], to: &[u8]) -> Vec<u8> {
            let at = self.windows(from.len()).position(|w| w == from).unwrap();
            [&self[..at], to, &self[at + from.len()..]].concat()
        }
    }
}
