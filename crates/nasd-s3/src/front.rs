//! What every request meets before s3s (issue 22 §3): a request id (in every reply, in the
//! XML of errors, and on every log line the request causes); a slot among
//! [`REQUESTS_IN_FLIGHT_MAX`] (more answer `SlowDown` at once, so memory held by requests
//! is bounded in total); a body that fails when its client sends nothing for
//! [`BODY_STALL_TIMEOUT_MS`]; a POST form read only up to its file part, and refused
//! unless it is signed, before anything more of it is held ([`FORM_FIELDS_BYTES_MAX`], at
//! most [`POST_FORMS_IN_FLIGHT_MAX`] at once, each file at most [`POST_OBJECT_BYTES_MAX`]);
//! an aws-chunked body re-cut into small chunks ([`crate::chunked`]); and, when it is done,
//! a line in the access log.

use crate::access::Access;
use crate::chunked::{Rechunk, Signing};
use crate::conns::{Busy, ConnHandle};
use crate::log::{AccessLog, Entry};
use crate::metrics::GatewayMetrics;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::{BodyDataStream, StreamBody};
use s3s::service::S3Service;
use s3s::{S3Error, S3ErrorCode};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument as _;

/// Requests served at once; more are answered `SlowDown` (503, which clients retry). Each
/// holds at most a few MiB (an XML body, a small object, a few pieces of a stream), so this
/// bounds the memory requests hold in total.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 256;
/// How long a request body may send nothing while the gateway waits for it.
pub const BODY_STALL_TIMEOUT_MS: u64 = 30_000;
/// POST object forms served at once (each holds its file whole: s3s checks the form's
/// policy against the whole file).
pub const POST_FORMS_IN_FLIGHT_MAX: usize = 8;
/// Largest file of a POST object form.
pub const POST_OBJECT_BYTES_MAX: u64 = 16 << 20;
/// Largest form field, and all the fields before the file together: what is read of a form
/// before its signature is checked.
pub const FORM_FIELD_BYTES_MAX: usize = 20 << 10;
pub const FORM_FIELDS_BYTES_MAX: usize = 64 << 10;
/// Most parts of a POST form.
pub const FORM_PARTS_MAX: usize = 64;
/// How long a client has to send a form's fields.
pub const FORM_READ_TIMEOUT_MS: u64 = 30_000;

const _: () = assert!(FORM_FIELD_BYTES_MAX <= FORM_FIELDS_BYTES_MAX);
const _: () = assert!(POST_FORMS_IN_FLIGHT_MAX <= REQUESTS_IN_FLIGHT_MAX);

type StdError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What is learned of a request as it goes: its operation and its user (for the access log),
/// and whether its POST form is signed with SigV2 (for [`crate::guard`]).
#[derive(Clone, Default)]
pub struct RequestInfo(Arc<Mutex<Info>>);

#[derive(Default, Clone)]
struct Info {
    op: Option<String>,
    user: Option<String>,
    form_v2: bool,
}

impl RequestInfo {
    pub fn set_op(&self, op: &str) {
        self.0.lock().expect("info lock").op = Some(op.to_string());
    }

    pub fn set_user(&self, user: String) {
        self.0.lock().expect("info lock").user = Some(user);
    }

    pub fn form_v2(&self) -> bool {
        self.0.lock().expect("info lock").form_v2
    }

    fn snapshot(&self) -> Info {
        self.0.lock().expect("info lock").clone()
    }
}

/// The front of the gateway: s3s and everything around it.
pub struct Front {
    s3: S3Service,
    /// Answers browsers' CORS preflights, which s3s does not route ([`crate::cors`]).
    preflights: crate::gateway::Gateway,
    access: Arc<Access>,
    inflight: Arc<Semaphore>,
    forms: Arc<Semaphore>,
    log: Option<Arc<AccessLog>>,
    metrics: Option<Arc<GatewayMetrics>>,
    /// Request ids: a random prefix per process, then a counter.
    id_prefix: u32,
    id_next: AtomicU64,
}

impl Front {
    pub fn new(
        s3: S3Service,
        preflights: crate::gateway::Gateway,
        access: Arc<Access>,
        log: Option<AccessLog>,
        metrics: Option<Arc<GatewayMetrics>>,
    ) -> Front {
        let mut p = [0u8; 4];
        nasd_crypto::random_bytes(&mut p);
        Front {
            s3,
            preflights,
            access,
            inflight: Arc::new(Semaphore::new(REQUESTS_IN_FLIGHT_MAX)),
            forms: Arc::new(Semaphore::new(POST_FORMS_IN_FLIGHT_MAX)),
            log: log.map(Arc::new),
            metrics,
            id_prefix: u32::from_le_bytes(p),
            id_next: AtomicU64::new(1),
        }
    }

    /// Serves one request of connection `conn` from `peer`.
    pub async fn call(
        self: Arc<Self>,
        req: Request<hyper::body::Incoming>,
        conn: ConnHandle,
        peer: SocketAddr,
    ) -> Result<Response<Tracked>, std::convert::Infallible> {
        let id = format!(
            "{:08X}{:08X}",
            self.id_prefix,
            self.id_next.fetch_add(1, Ordering::Relaxed)
        );
        let info = RequestInfo::default();
        let (bucket, key) = bucket_and_key(req.uri().path());
        let mut done = Done {
            log: self.log.clone(),
            metrics: self.metrics.clone(),
            entry: Entry {
                request_id: id.clone(),
                remote: peer.to_string(),
                method: req.method().to_string(),
                bucket,
                key,
                ..Default::default()
            },
            info: info.clone(),
            start: Instant::now(),
            bytes_in: Arc::new(AtomicU64::new(0)),
            guards: Guards {
                busy: Some(conn.busy()),
                permits: vec![],
            },
            logged: false,
        };
        // At the level of the gateway's log (warnings), so each line a request causes
        // names it.
        let span = tracing::warn_span!("request", id = %id);
        let Ok(permit) = self.inflight.clone().try_acquire_owned() else {
            let e = S3Error::with_message(
                S3ErrorCode::SlowDown,
                "the gateway is serving as many requests as it may; try again",
            );
            return Ok(done.respond(error_response(&e, &id)));
        };
        done.guards.permits.push(permit);
        if req.method() == http::Method::OPTIONS {
            done.info.set_op("PreflightCors");
            let resp = self.preflight(req.headers(), &done.entry.bucket).await;
            let resp = match resp {
                Ok(r) => r,
                Err(e) => error_response(&e, &id),
            };
            return Ok(done.respond(with_request_id(resp, &id)));
        }
        let origin = req
            .headers()
            .get("origin")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let method = req.method().to_string();
        let (mut parts, body) = req.into_parts();
        let body = Stalled::new(body, done.bytes_in.clone());
        let prepared = self
            .prepare(&parts, body, &info, &mut done.guards)
            .instrument(span.clone())
            .await;
        let body = match prepared {
            Ok(b) => b,
            Err(e) => return Ok(done.respond(error_response(&e, &id))),
        };
        parts.extensions.insert(info);
        parts.extensions.insert(conn);
        let resp = self
            .s3
            .call(Request::from_parts(parts, body))
            .instrument(span)
            .await;
        let attributes = done.info.snapshot().op.as_deref() == Some("GetObjectAttributes");
        let mut resp = match resp {
            Ok(r) if attributes => with_request_id(bare_attribute_etag(r), &id),
            Ok(r) if method == "POST" => with_request_id(condition_failed_is_denied(r, &id), &id),
            Ok(r) => with_request_id(r, &id),
            Err(e) => {
                tracing::warn!(request = %id, "{e:?}");
                let e = S3Error::with_message(S3ErrorCode::InternalError, crate::access::INTERNAL);
                error_response(&e, &id)
            }
        };
        if let (Some(origin), false) = (origin, done.entry.bucket.is_empty()) {
            if let Some(a) = self
                .cors_of_request(&done.entry.bucket, &origin, &method)
                .await
            {
                a.set_headers(resp.headers_mut(), false);
            }
        }
        Ok(done.respond(resp))
    }

    /// A browser's CORS preflight for `bucket` ([`crate::cors`]): 200 with the
    /// `Access-Control-*` headers of the first rule that allows it, 403 when none does, 400
    /// without an origin and a method.
    async fn preflight(
        &self,
        h: &http::HeaderMap,
        bucket: &str,
    ) -> Result<Response<s3s::Body>, S3Error> {
        let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok());
        let (Some(origin), Some(method)) =
            (header("origin"), header("access-control-request-method"))
        else {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                "a CORS preflight needs Origin and Access-Control-Request-Method",
            ));
        };
        let denied = || {
            S3Error::with_message(
                S3ErrorCode::AccessDenied,
                "CORSResponse: this CORS request is not allowed",
            )
        };
        if bucket.is_empty() {
            return Err(denied());
        }
        let rules = self
            .preflights
            .preflight_rules(bucket)
            .await
            .ok_or_else(denied)?;
        let a = crate::cors::allow(
            &rules,
            origin,
            method,
            header("access-control-request-headers"),
        )
        .ok_or_else(denied)?;
        let mut r = Response::new(s3s::Body::empty());
        a.set_headers(r.headers_mut(), true);
        Ok(r)
    }

    /// The `Access-Control-*` headers for a request from a browser page at `origin`, sending
    /// `method` to `bucket` (none: no rule allows it, or no such bucket).
    async fn cors_of_request(
        &self,
        bucket: &str,
        origin: &str,
        method: &str,
    ) -> Option<crate::cors::Allowed> {
        let rules = self.preflights.preflight_rules(bucket).await?;
        crate::cors::allow(&rules, origin, method, None)
    }

    /// The body s3s gets: a form checked up to its file, an aws-chunked body re-cut, any
    /// other as it comes (each failing if its client stalls).
    async fn prepare(
        &self,
        parts: &http::request::Parts,
        body: Stalled<hyper::body::Incoming>,
        info: &RequestInfo,
        guards: &mut Guards,
    ) -> Result<s3s::Body, S3Error> {
        let header = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok());
        if parts.method == http::Method::POST {
            if let Some(boundary) = header("content-type").and_then(form_boundary) {
                let Ok(p) = self.forms.clone().try_acquire_owned() else {
                    return Err(S3Error::with_message(
                        S3ErrorCode::SlowDown,
                        "the gateway is taking as many POST forms as it may; try again",
                    ));
                };
                guards.permits.push(p);
                return self.form(body, &boundary, info).await;
            }
        }
        let streaming = header("x-amz-content-sha256").filter(|v| v.starts_with("STREAMING-"));
        if let Some(payload) = streaming {
            let signing = match (header("authorization"), header("x-amz-date")) {
                (Some(a), Some(d)) if payload.starts_with("STREAMING-AWS4-HMAC-SHA256-PAYLOAD") => {
                    self.signing(a, d).await
                }
                _ => None,
            };
            let unsigned = payload == "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
            if signing.is_some() || unsigned {
                let s = Rechunk::new(BodyDataStream::new(body), signing).into_stream();
                let s = s.map(|r| r.map(Frame::data));
                return Ok(s3s::Body::http_body_unsync(StreamBody::new(s)));
            }
        }
        Ok(s3s::Body::http_body_unsync(body))
    }

    /// What signs an aws-chunked body's chunks, when its access key is known (otherwise
    /// s3s refuses the request before it reads the body).
    async fn signing(&self, authorization: &str, amz_date: &str) -> Option<Signing> {
        let id = authorization
            .split("Credential=")
            .nth(1)?
            .split('/')
            .next()?;
        let (_, secret) = self.access.key(id).await.ok()?;
        Signing::new(authorization, amz_date, secret.expose())
    }

    /// Reads a POST form up to its file and refuses it unless it is signed; the body s3s
    /// gets is the same bytes.
    async fn form(
        &self,
        body: Stalled<hyper::body::Incoming>,
        boundary: &str,
        info: &RequestInfo,
    ) -> Result<s3s::Body, S3Error> {
        let mut stream = BodyDataStream::new(body);
        let mut head = BytesMut::new();
        let read = async {
            loop {
                match form_fields(&head, boundary) {
                    Fields::Complete(names) => return Ok(Some(names)),
                    Fields::Malformed => return Ok(None),
                    Fields::Incomplete if head.len() > FORM_FIELDS_BYTES_MAX => {
                        return Err(S3Error::with_message(
                            S3ErrorCode::MaxPostPreDataLengthExceededError,
                            "the form's fields before its file are too long",
                        ))
                    }
                    Fields::Incomplete => {}
                }
                match stream.next().await {
                    Some(Ok(b)) => head.extend_from_slice(&b),
                    Some(Err(e)) => {
                        return Err(S3Error::with_message(
                            S3ErrorCode::IncompleteBody,
                            format!("the form ended early: {e}"),
                        ))
                    }
                    // s3s answers a form without a file.
                    None => return Ok(None),
                }
            }
        };
        let names = tokio::time::timeout(Duration::from_millis(FORM_READ_TIMEOUT_MS), read)
            .await
            .map_err(|_| {
                S3Error::with_message(
                    S3ErrorCode::RequestTimeout,
                    "the form's fields did not arrive in time",
                )
            })??;
        if let Some(form) = &names {
            let fields = &form.fields;
            let has = |n: &str| fields.iter().any(|(f, _)| f.eq_ignore_ascii_case(n));
            if !has("x-amz-signature") && !has("signature") {
                return Err(S3Error::with_message(
                    S3ErrorCode::AccessDenied,
                    "anonymous requests are not served: the form is not signed",
                ));
            }
            if !has("x-amz-signature") {
                info.0.lock().expect("info lock").form_v2 = true;
            }
            let policy = fields
                .iter()
                .find(|(f, _)| f.eq_ignore_ascii_case("policy"));
            if let Some((_, p)) = policy {
                check_policy_expiration(p)?;
            }
            form.name_key(&mut head);
        }
        let first = futures_util::stream::once(async move { Ok::<_, StdError>(head.freeze()) });
        let all = first.chain(stream).map(|r| r.map(Frame::data));
        Ok(s3s::Body::http_body_unsync(StreamBody::new(all)))
    }
}

/// The boundary of a `multipart/form-data` body.
fn form_boundary(content_type: &str) -> Option<String> {
    let (mime, params) = content_type.split_once(';')?;
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

enum Fields {
    /// The fields before the file part (whose headers are complete).
    Complete(Form),
    Incomplete,
    Malformed,
}

/// A form's fields before its file: names and values, where each value lies in the form's
/// bytes, and the file part's `filename`.
struct Form {
    fields: Vec<(String, Vec<u8>)>,
    spans: Vec<std::ops::Range<usize>>,
    file_name: Option<String>,
}

/// What S3 replaces in a form's `key` with the name of the file sent.
const FILENAME_VARIABLE: &[u8] = b"${filename}";

impl Form {
    /// Puts the file's name in place of `${filename}` in the `key` field of `head` (the form's
    /// bytes this was read from), as S3 does before it checks the policy.
    fn name_key(&self, head: &mut BytesMut) {
        let Some(file) = &self.file_name else { return };
        let Some(i) = self.fields.iter().position(|(n, _)| n == "key") else {
            return;
        };
        let value = &self.fields[i].1;
        let Some(at) = value
            .windows(FILENAME_VARIABLE.len())
            .position(|w| w == FILENAME_VARIABLE)
        else {
            return;
        };
        let mut key = value[..at].to_vec();
        key.extend_from_slice(file.as_bytes());
        key.extend_from_slice(&value[at + FILENAME_VARIABLE.len()..]);
        let span = self.spans[i].clone();
        let mut out = BytesMut::with_capacity(head.len() + key.len());
        out.extend_from_slice(&head[..span.start]);
        out.extend_from_slice(&key);
        out.extend_from_slice(&head[span.end..]);
        *head = out;
    }
}

/// The fields of a form's start `buf`, up to its file part.
fn form_fields(buf: &[u8], boundary: &str) -> Fields {
    let delim = format!("--{boundary}");
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay.get(from..)?
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|p| p + from)
    };
    let Some(mut at) = find(buf, delim.as_bytes(), 0) else {
        return if buf.len() > delim.len() + 2 {
            Fields::Malformed
        } else {
            Fields::Incomplete
        };
    };
    let (mut names, mut spans) = (vec![], vec![]);
    loop {
        let headers_start = at + delim.len();
        if buf.get(headers_start..headers_start + 2) == Some(b"--") {
            return Fields::Malformed;
        }
        let Some(headers_end) = find(buf, b"\r\n\r\n", headers_start) else {
            return Fields::Incomplete;
        };
        let headers = String::from_utf8_lossy(&buf[headers_start..headers_end]);
        let disposition = headers
            .split("\r\n")
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))
            .unwrap_or("");
        let param = |want: &str| {
            disposition.split(';').find_map(|p| {
                let (k, v) = p.trim().split_once('=')?;
                (k.trim() == want).then(|| v.trim().trim_matches('"').to_string())
            })
        };
        let Some(name) = param("name") else {
            return Fields::Malformed;
        };
        if name.eq_ignore_ascii_case("file") {
            return Fields::Complete(Form {
                fields: names,
                spans,
                file_name: param("filename"),
            });
        }
        if names.len() >= FORM_PARTS_MAX {
            return Fields::Malformed;
        }
        let value_start = headers_end + 4;
        let Some(next) = find(buf, format!("\r\n{delim}").as_bytes(), value_start) else {
            return Fields::Incomplete;
        };
        names.push((name, buf[value_start..next].to_vec()));
        spans.push(value_start..next);
        at = next + 2;
    }
}

/// Refuses a POST policy (base64 JSON) whose `expiration` is not an ISO 8601 UTC time
/// (`2030-01-01T00:00:00.000Z`), as S3 does; s3s reads some other forms as times.
fn check_policy_expiration(policy: &[u8]) -> Result<(), S3Error> {
    use base64::Engine as _;
    let bad = |why: &str| {
        S3Error::with_message(
            S3ErrorCode::InvalidPolicyDocument,
            format!("the POST policy {why}"),
        )
    };
    let json = base64::engine::general_purpose::STANDARD
        .decode(policy.trim_ascii())
        .map_err(|_| bad("is not base64"))?;
    let doc: serde_json::Value = serde_json::from_slice(&json).map_err(|_| bad("is not JSON"))?;
    let exp = doc
        .get("expiration")
        .and_then(|e| e.as_str())
        .ok_or_else(|| bad("has no expiration"))?;
    let b = exp.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b.last() == Some(&b'Z')
        && (b.len() == 20 || (b[19] == b'.' && digits(20..b.len() - 1) && b.len() > 21));
    if !shape {
        return Err(bad(&format!(
            "expiration {exp:?} is not an ISO 8601 UTC time"
        )));
    }
    Ok(())
}

/// The bucket and key a request path names (`/bucket/key`), decoded.
fn bucket_and_key(path: &str) -> (String, String) {
    let decoded = urlencoding_decode(path);
    let rest = decoded.trim_start_matches('/');
    match rest.split_once('/') {
        Some((b, k)) => (b.to_string(), k.to_string()),
        None => (rest.to_string(), String::new()),
    }
}

fn urlencoding_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let hex = |c: u8| (c as char).to_digit(16);
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(hi), Some(lo)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An S3 error reply made here, with its request id.
fn error_response(e: &S3Error, id: &str) -> Response<s3s::Body> {
    let status = e.status_code().unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{}</Code><Message>{}</Message><RequestId>{id}</RequestId></Error>",
        e.code().as_str(),
        xml_escape(e.message().unwrap_or(""))
    );
    let mut r = Response::new(s3s::Body::from(xml));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/xml"));
    if let Ok(v) = HeaderValue::from_str(id) {
        r.headers_mut().insert("x-amz-request-id", v);
    }
    r
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `r` with its request id: in a header, and in the XML of an error.
/// The start of s3s's message for a POST form that a condition of its policy refuses.
const CONDITION_FAILED: &str = "Policy condition";

/// A POST form that a condition of its policy refuses is answered as S3 answers it, 403
/// `AccessDenied` ("Invalid according to Policy"), where s3s answers 400
/// `InvalidPolicyDocument` (which stays the answer to a policy that does not parse).
fn condition_failed_is_denied(r: Response<s3s::Body>, id: &str) -> Response<s3s::Body> {
    if r.status() != StatusCode::BAD_REQUEST {
        return r;
    }
    let Some(body) = r.body().bytes() else {
        return r;
    };
    let text = String::from_utf8_lossy(&body);
    let message = text
        .split_once("<Message>")
        .and_then(|(_, m)| m.split_once("</Message>"))
        .map(|(m, _)| m.to_string());
    match message {
        Some(m)
            if text.contains("<Code>InvalidPolicyDocument</Code>")
                && m.starts_with(CONDITION_FAILED) =>
        {
            let e = S3Error::with_message(
                S3ErrorCode::AccessDenied,
                format!("Invalid according to Policy: {m}"),
            );
            error_response(&e, id)
        }
        _ => r,
    }
}

fn with_request_id(mut r: Response<s3s::Body>, id: &str) -> Response<s3s::Body> {
    if let Ok(v) = HeaderValue::from_str(id) {
        r.headers_mut().insert("x-amz-request-id", v);
    }
    if r.status().as_u16() >= 400 {
        if let Some(b) = r.body().bytes() {
            let has_id = b.windows(11).any(|w| w == b"<RequestId>");
            if let Some(at) = b.windows(8).rposition(|w| w == b"</Error>") {
                if !has_id {
                    let mut v = Vec::with_capacity(b.len() + 64);
                    v.extend_from_slice(&b[..at]);
                    v.extend_from_slice(format!("<RequestId>{id}</RequestId>").as_bytes());
                    v.extend_from_slice(&b[at..]);
                    r.headers_mut().remove("content-length");
                    *r.body_mut() = s3s::Body::from(v);
                }
            }
        }
    }
    r
}

/// `r` with the ETag of a GetObjectAttributes answer bare (`<ETag>hex</ETag>`), as S3 sends
/// it in that answer alone; s3s quotes every ETag it writes.
fn bare_attribute_etag(mut r: Response<s3s::Body>) -> Response<s3s::Body> {
    if !r.status().is_success() {
        return r;
    }
    let Some(b) = r.body().bytes() else {
        return r;
    };
    let Ok(text) = std::str::from_utf8(&b) else {
        return r;
    };
    let bare = text
        .replacen("<ETag>\"", "<ETag>", 1)
        .replacen("\"</ETag>", "</ETag>", 1);
    if bare.len() != text.len() {
        r.headers_mut().remove("content-length");
        *r.body_mut() = s3s::Body::from(bare.into_bytes());
    }
    r
}

/// What a request holds until its answer is sent: its connection marked busy, its slots.
struct Guards {
    busy: Option<Busy>,
    permits: Vec<OwnedSemaphorePermit>,
}

/// Status logged for a request whose client went away before its answer was sent (as
/// nginx logs it).
pub const CLIENT_CLOSED_STATUS: u16 = 499;

/// What is logged (and counted, [`crate::metrics`]) when a request's answer is sent, or
/// when it is dropped unanswered.
struct Done {
    log: Option<Arc<AccessLog>>,
    metrics: Option<Arc<GatewayMetrics>>,
    entry: Entry,
    info: RequestInfo,
    start: Instant,
    bytes_in: Arc<AtomicU64>,
    guards: Guards,
    logged: bool,
}

impl Drop for Done {
    fn drop(&mut self) {
        if !self.logged {
            self.log_as(CLIENT_CLOSED_STATUS, 0);
        }
    }
}

impl Done {
    fn respond(self, r: Response<s3s::Body>) -> Response<Tracked> {
        let (parts, body) = r.into_parts();
        let status = parts.status.as_u16();
        Response::from_parts(
            parts,
            Tracked {
                inner: body,
                bytes_out: 0,
                status,
                done: Some(self),
            },
        )
    }

    /// Logs the request (once), and releases its connection.
    fn log_as(&mut self, status: u16, bytes_out: u64) {
        self.logged = true;
        let info = self.info.snapshot();
        self.entry.op = info.op.unwrap_or_else(|| "-".into());
        self.entry.user = info.user.unwrap_or_else(|| "-".into());
        self.entry.status = status;
        self.entry.bytes_in = self.bytes_in.load(Ordering::Relaxed);
        self.entry.bytes_out = bytes_out;
        let elapsed = self.start.elapsed();
        self.entry.duration_ms = elapsed.as_millis() as u64;
        if let Some(m) = &self.metrics {
            let e = &self.entry;
            m.record(&e.op, status, e.bytes_in, bytes_out, elapsed);
        }
        if let Some(log) = &self.log {
            log.record(std::mem::take(&mut self.entry));
        }
        self.guards.busy.take();
    }
}

/// A reply's body, counted; when it is sent or dropped the request is logged and its
/// connection and slots are released.
pub struct Tracked {
    inner: s3s::Body,
    bytes_out: u64,
    status: u16,
    done: Option<Done>,
}

impl Tracked {
    fn finish(&mut self) {
        if let Some(mut d) = self.done.take() {
            d.log_as(self.status, self.bytes_out);
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.finish();
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    self.bytes_out += d.len() as u64;
                }
            }
            Poll::Ready(None) => self.finish(),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that fails once its client sent nothing for [`BODY_STALL_TIMEOUT_MS`]
/// while the gateway waited for it, counting the bytes it passes.
pub struct Stalled<B> {
    inner: B,
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    bytes: Arc<AtomicU64>,
}

impl<B> Stalled<B> {
    fn new(inner: B, bytes: Arc<AtomicU64>) -> Self {
        Stalled {
            inner,
            stall: None,
            bytes,
        }
    }
}

impl<B> http_body::Body for Stalled<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<StdError>,
{
    type Data = Bytes;
    type Error = StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                self.stall = None;
                if let Some(Ok(f)) = &r {
                    if let Some(d) = f.data_ref() {
                        self.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
                    }
                }
                Poll::Ready(r.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                let sleep = self.stall.get_or_insert_with(|| {
                    Box::pin(tokio::time::sleep(Duration::from_millis(
                        BODY_STALL_TIMEOUT_MS,
                    )))
                });
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the client sent nothing of the body for too long",
                    ))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

use std::future::Future as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_the_file_where_it_says_filename() {
        let b = "xyz";
        let form = "--xyz\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nup/${filename}.v1\r\n\
                    --xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a b.txt\"\r\n\r\nDATA";
        let Fields::Complete(f) = form_fields(form.as_bytes(), b) else {
            panic!("not complete")
        };
        let mut head = BytesMut::from(form.as_bytes());
        f.name_key(&mut head);
        let Fields::Complete(g) = form_fields(&head, b) else {
            panic!("not complete")
        };
        assert_eq!(g.fields[0].1, b"up/a b.txt.v1");
        assert!(head.ends_with(b"filename=\"a b.txt\"\r\n\r\nDATA"));
        // Without the variable, or without a file name, the bytes stay.
        let plain = form.replace("${filename}", "x");
        let Fields::Complete(f) = form_fields(plain.as_bytes(), b) else {
            panic!("not complete")
        };
        let mut head = BytesMut::from(plain.as_bytes());
        f.name_key(&mut head);
        assert_eq!(&head[..], plain.as_bytes());
    }

    #[test]
    fn form_fields_are_read_up_to_the_file() {
        let b = "xyz";
        let form = "--xyz\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\na/b\r\n\
                    --xyz\r\nContent-Disposition: form-data; name=\"X-Amz-Signature\"\r\n\r\n00\r\n\
                    --xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nDATA";
        match form_fields(form.as_bytes(), b) {
            Fields::Complete(f) => {
                let names: Vec<&str> = f.fields.iter().map(|(f, _)| f.as_str()).collect();
                assert_eq!(names, ["key", "X-Amz-Signature"]);
                assert_eq!(f.fields[0].1, b"a/b");
                assert_eq!(&form.as_bytes()[f.spans[0].clone()], b"a/b");
                assert_eq!(f.file_name.as_deref(), Some("f"));
            }
            _ => panic!("not complete"),
        }
        for cut in [3, 20, 60, form.find("DATA").unwrap() - 2] {
            assert!(
                matches!(form_fields(&form.as_bytes()[..cut], b), Fields::Incomplete),
                "{cut}"
            );
        }
        assert!(matches!(
            form_fields(b"garbage garbage garbage", b),
            Fields::Malformed
        ));
        assert_eq!(
            form_boundary("multipart/form-data; boundary=\"abc\"").as_deref(),
            Some("abc")
        );
        assert_eq!(form_boundary("application/xml"), None);
    }

    #[test]
    fn post_policies_expire_at_iso_8601_times_only() {
        use base64::Engine as _;
        let policy = |exp: &str| {
            let doc = format!("{{\"expiration\": \"{exp}\", \"conditions\": []}}");
            base64::engine::general_purpose::STANDARD.encode(doc)
        };
        for ok in ["2030-01-01T00:00:00.000Z", "2030-01-01T00:00:00Z"] {
            assert!(
                check_policy_expiration(policy(ok).as_bytes()).is_ok(),
                "{ok}"
            );
        }
        for bad in [
            "2030-01-01 00:00:00.123456+00:00",
            "2030-01-01T00:00:00",
            "2030-01-01T00:00:00.Z",
            "tomorrow",
        ] {
            assert!(
                check_policy_expiration(policy(bad).as_bytes()).is_err(),
                "{bad}"
            );
        }
        assert!(check_policy_expiration(b"!!").is_err());
    }

    /// A body whose client never sends anything.
    struct Silent;

    impl http_body::Body for Silent {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::convert::Infallible>>> {
            Poll::Pending
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_whose_client_stalls_fails_after_the_stall_timeout() {
        use http_body_util::BodyExt;
        let mut b = Stalled::new(Silent, Arc::new(AtomicU64::new(0)));
        let t0 = tokio::time::Instant::now();
        let r = b.frame().await.unwrap();
        assert!(r.is_err());
        assert_eq!(t0.elapsed(), Duration::from_millis(BODY_STALL_TIMEOUT_MS));
    }

    #[test]
    fn attribute_answers_carry_a_bare_etag() {
        let xml = "<GetObjectAttributesResponse><ETag>\"abc-2\"</ETag><ObjectSize>3</ObjectSize></GetObjectAttributesResponse>";
        let r = bare_attribute_etag(Response::new(s3s::Body::from(xml.to_string())));
        let b = r.body().bytes().unwrap();
        assert_eq!(
            std::str::from_utf8(&b).unwrap(),
            "<GetObjectAttributesResponse><ETag>abc-2</ETag><ObjectSize>3</ObjectSize></GetObjectAttributesResponse>"
        );
    }

    #[test]
    fn error_replies_carry_the_request_id() {
        let e = S3Error::with_message(S3ErrorCode::NoSuchKey, "gone");
        let mut r = Response::new(s3s::Body::from(
            "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code></Error>".to_string(),
        ));
        *r.status_mut() = StatusCode::NOT_FOUND;
        let r = with_request_id(r, "ABC");
        let body = r.body().bytes().unwrap();
        assert!(String::from_utf8_lossy(&body).contains("<RequestId>ABC</RequestId></Error>"));
        assert_eq!(r.headers()["x-amz-request-id"], "ABC");
        let mine = error_response(&e, "DEF");
        assert!(String::from_utf8_lossy(&mine.body().bytes().unwrap()).contains("<RequestId>DEF<"));
        assert_eq!(
            bucket_and_key("/b%20x/a/b%2Bc"),
            ("b x".to_string(), "a/b+c".to_string())
        );
    }
}
