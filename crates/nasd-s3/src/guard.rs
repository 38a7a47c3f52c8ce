//! The checks every authenticated request passes before its operation runs (s3s's access
//! hook, after the signature checked and before any body is read): anonymous requests are
//! refused (nasd has no anonymous user); SigV2 is refused unless the gateway was started
//! with `--sigv2`, and then its date or expiry is checked; a presigned URL lives at most
//! [`PRESIGNED_LIFETIME_MAX_S`]; every `x-amz-*` header that can change what a request
//! does must be signed (issue 22 §3: an unsigned `x-amz-copy-source` turned a presigned PUT
//! into a copy); features the gateway lacks are refused ([`crate::unsupported`]). It also
//! tells the access log who asked for what, and the connection table that the connection
//! carries an authenticated user.

use crate::access::Access;
use crate::conns::ConnHandle;
use crate::front::RequestInfo;
use http::{HeaderMap, Uri};
use s3s::access::{S3Access, S3AccessContext};
use s3s::{s3_error, S3Result};
use std::sync::Arc;

/// Longest lifetime of a presigned URL (S3's limit: 7 days).
pub const PRESIGNED_LIFETIME_MAX_S: u64 = 7 * 24 * 3600;
/// How far a SigV2 request's date may be from the gateway's clock (SigV4's skew).
pub const SIGV2_SKEW_MAX_S: i64 = 15 * 60;

/// Unsigned `x-amz-*` headers that cannot change what a request does: the payload hash
/// (checked against the body), the date of a presigned request (its query carries the
/// signed one), the SDK's user agent, checksum claims (checked against the bytes) and the
/// expected bucket owner (which only restricts).
const UNSIGNED_ALLOWED: [&str; 5] = [
    "x-amz-content-sha256",
    "x-amz-date",
    "x-amz-user-agent",
    "x-amz-sdk-checksum-algorithm",
    "x-amz-expected-bucket-owner",
];

/// The access hook.
pub struct Guard {
    pub access: Arc<Access>,
    /// Whether SigV2 requests are served (`nasd s3 serve --sigv2`).
    pub sigv2: bool,
}

#[async_trait::async_trait]
impl S3Access for Guard {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let op = cx.s3_op().name().to_string();
        let info = cx.extensions_mut().get::<RequestInfo>().cloned();
        if let Some(i) = &info {
            i.set_op(&op);
        }
        let Some(cred) = cx.credentials() else {
            return Err(s3_error!(
                AccessDenied,
                "anonymous requests are not served: nasd has no anonymous user"
            ));
        };
        let key = cred.access_key.clone();
        if let Some(i) = &info {
            i.set_user(self.access.cached_user(&key).unwrap_or(key));
        }
        if let Some(c) = cx.extensions_mut().get::<ConnHandle>() {
            c.authenticated();
        }
        let form_v2 = info.as_ref().is_some_and(RequestInfo::form_v2);
        check_signature(cx.uri(), cx.headers(), form_v2, self.sigv2)?;
        crate::unsupported::check(&op, cx.uri(), cx.headers())
    }
}

fn query_param<'a>(uri: &'a Uri, name: &str) -> Option<&'a str> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

fn percent_decode(s: &str) -> String {
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
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The rules on how a request is signed (after s3s checked that it is).
pub fn check_signature(uri: &Uri, h: &HeaderMap, form_v2: bool, sigv2: bool) -> S3Result<()> {
    let auth = h.get("authorization").and_then(|v| v.to_str().ok());
    let v2_header = auth.is_some_and(|a| a.starts_with("AWS "));
    let v2_query = query_param(uri, "AWSAccessKeyId").is_some();
    if v2_header || v2_query || form_v2 {
        if !sigv2 {
            return Err(s3_error!(
                InvalidRequest,
                "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
            ));
        }
        return check_v2(uri, h, v2_header, v2_query);
    }
    let signed: Vec<String> = if let Some(s) = query_param(uri, "X-Amz-SignedHeaders") {
        if let Some(e) = query_param(uri, "X-Amz-Expires") {
            match e.parse::<u64>() {
                Ok(s) if s <= PRESIGNED_LIFETIME_MAX_S => {}
                _ => {
                    return Err(s3_error!(
                        AuthorizationQueryParametersError,
                        "X-Amz-Expires must be less than a week (in seconds) that is; {PRESIGNED_LIFETIME_MAX_S}"
                    ))
                }
            }
        }
        percent_decode(s).split(';').map(str::to_string).collect()
    } else if let Some(a) = auth {
        a.split(',')
            .find_map(|p| p.trim().strip_prefix("SignedHeaders="))
            .unwrap_or("")
            .split(';')
            .map(str::to_string)
            .collect()
    } else {
        // A POST form: its fields, not its headers, are signed and used.
        return Ok(());
    };
    let unsigned: Vec<&str> = h
        .keys()
        .map(|k| k.as_str())
        .filter(|k| {
            k.starts_with("x-amz-")
                && !signed.iter().any(|s| s == k)
                && !UNSIGNED_ALLOWED.contains(k)
                && !k.starts_with("x-amz-checksum-")
        })
        .collect();
    if !unsigned.is_empty() {
        return Err(s3_error!(
            AccessDenied,
            "There were headers present in the request which were not signed: {}",
            unsigned.join(", ")
        ));
    }
    Ok(())
}

/// SigV2 when enabled: a header-signed request's date within [`SIGV2_SKEW_MAX_S`] of now
/// (s3s does not check it, so a captured request could be replayed for ever), a presigned
/// one's expiry at most [`PRESIGNED_LIFETIME_MAX_S`] away.
fn check_v2(uri: &Uri, h: &HeaderMap, header: bool, query: bool) -> S3Result<()> {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    if header {
        let date = h
            .get("x-amz-date")
            .or_else(|| h.get("date"))
            .and_then(|v| v.to_str().ok())
            .and_then(parse_http_date)
            .ok_or_else(|| s3_error!(AccessDenied, "a SigV2 request needs a valid Date"))?;
        if (now - date).abs() > SIGV2_SKEW_MAX_S {
            return Err(s3_error!(
                RequestTimeTooSkewed,
                "the request's date is too far from the gateway's clock"
            ));
        }
    }
    if query {
        let expires: i64 = query_param(uri, "Expires")
            .and_then(|e| e.parse().ok())
            .ok_or_else(|| s3_error!(AccessDenied, "a presigned SigV2 URL needs Expires"))?;
        if expires - now > PRESIGNED_LIFETIME_MAX_S as i64 {
            return Err(s3_error!(
                AuthorizationQueryParametersError,
                "a presigned URL may live a week at most"
            ));
        }
    }
    Ok(())
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`, or `+0000` for the zone) as Unix seconds.
pub fn parse_http_date(s: &str) -> Option<i64> {
    let mut it = s.split_whitespace();
    let _weekday = it.next()?;
    let day: u8 = it.next()?.parse().ok()?;
    let month = match it.next()? {
        "Jan" => time::Month::January,
        "Feb" => time::Month::February,
        "Mar" => time::Month::March,
        "Apr" => time::Month::April,
        "May" => time::Month::May,
        "Jun" => time::Month::June,
        "Jul" => time::Month::July,
        "Aug" => time::Month::August,
        "Sep" => time::Month::September,
        "Oct" => time::Month::October,
        "Nov" => time::Month::November,
        "Dec" => time::Month::December,
        _ => return None,
    };
    let year: i32 = it.next()?.parse().ok()?;
    let mut hms = it.next()?.split(':').map(|x| x.parse::<u8>().ok());
    let (hh, mm, ss) = (hms.next()??, hms.next()??, hms.next()??);
    if !matches!(it.next()?, "GMT" | "UTC" | "UT" | "+0000" | "Z") {
        return None;
    }
    let t = time::Date::from_calendar_date(year, month, day)
        .ok()?
        .with_hms(hh, mm, ss)
        .ok()?
        .assume_utc();
    Some(t.unix_timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(kv: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in kv {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    const V4: &str = "AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=00";

    #[test]
    fn unsigned_headers_that_change_a_request_are_refused() {
        let uri: Uri = "/b/k".parse().unwrap();
        let ok = h(&[
            ("authorization", V4),
            ("x-amz-date", "x"),
            ("x-amz-content-sha256", "x"),
        ]);
        assert!(check_signature(&uri, &ok, false, false).is_ok());
        let copy = h(&[("authorization", V4), ("x-amz-copy-source", "/a/b")]);
        let e = check_signature(&uri, &copy, false, false).unwrap_err();
        assert_eq!(e.code().as_str(), "AccessDenied");
        let pre: Uri = "/b/k?X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature=0"
            .parse()
            .unwrap();
        let copy = h(&[("x-amz-copy-source", "/a/b")]);
        assert!(check_signature(&pre, &copy, false, false).is_err());
        let sum = h(&[
            ("x-amz-checksum-crc32", "AAAAAA=="),
            ("x-amz-content-sha256", "x"),
        ]);
        assert!(check_signature(&pre, &sum, false, false).is_ok());
        let signed: Uri =
            "/b/k?X-Amz-Expires=60&X-Amz-SignedHeaders=host%3Bx-amz-copy-source&X-Amz-Signature=0"
                .parse()
                .unwrap();
        assert!(check_signature(&signed, &copy, false, false).is_ok());
    }

    #[test]
    fn presigned_urls_live_a_week_at_most_and_sigv2_is_off_by_default() {
        let week: Uri = "/b/k?X-Amz-Expires=604800&X-Amz-SignedHeaders=host"
            .parse()
            .unwrap();
        assert!(check_signature(&week, &HeaderMap::new(), false, false).is_ok());
        let more: Uri = "/b/k?X-Amz-Expires=604801&X-Amz-SignedHeaders=host"
            .parse()
            .unwrap();
        let e = check_signature(&more, &HeaderMap::new(), false, false).unwrap_err();
        assert_eq!(e.code().as_str(), "AuthorizationQueryParametersError");
        let uri: Uri = "/b/k".parse().unwrap();
        let now = time::OffsetDateTime::now_utc();
        let fmt = |t: time::OffsetDateTime| {
            const MONTHS: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            format!(
                "Mon, {:02} {} {} {:02}:{:02}:{:02} GMT",
                t.day(),
                MONTHS[t.month() as usize - 1],
                t.year(),
                t.hour(),
                t.minute(),
                t.second()
            )
        };
        let v2 = h(&[("authorization", "AWS AK:sig"), ("date", &fmt(now))]);
        assert!(check_signature(&uri, &v2, false, false).is_err());
        assert!(check_signature(&uri, &v2, false, true).is_ok());
        let old = h(&[
            ("authorization", "AWS AK:sig"),
            ("date", &fmt(now - time::Duration::minutes(20))),
        ]);
        let e = check_signature(&uri, &old, false, true).unwrap_err();
        assert_eq!(e.code().as_str(), "RequestTimeTooSkewed");
        assert!(check_signature(&uri, &HeaderMap::new(), true, false).is_err());
    }

    #[test]
    fn http_dates_parse() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784111777)
        );
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 +0000"),
            Some(784111777)
        );
        assert_eq!(parse_http_date("yesterday"), None);
    }
}
