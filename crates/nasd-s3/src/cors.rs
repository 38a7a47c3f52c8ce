//! CORS (issue 22 §2): a bucket's cross-origin rules, kept and answered. A bucket's owner
//! puts, gets and deletes its rules (`PutBucketCors` and so on; checked as S3 checks them,
//! kept as JSON in the bucket's extended attribute [`BUCKET_CORS_ATTR`]). A browser's
//! preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`, never signed) is
//! answered by the front before s3s ([`Front`](crate::front)): the gateway reads the
//! bucket's rules as its owner, and the first rule that allows the origin, the method and
//! every requested header gives the answer's `Access-Control-*` headers; none allows it: 403.
//! An `OPTIONS` without both headers is a bad request (400). A request that carries an
//! `Origin` (a browser's actual request after its preflight, signed as usual) gets the same
//! headers from the first rule allowing its origin and its own method, whatever its outcome
//! (so a page can read an error too); without such a rule it is answered as if no `Origin`
//! were sent, and the browser withholds the answer from the page.
//!
//! An origin in a rule may hold one `*`, which matches any run of characters (`*`,
//! `https://*.example.com`); so may an allowed header (matched without regard to case).

use crate::gateway::{status_err, Gateway};
use nasd_client::files::Client;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The bucket attribute holding its rules (JSON).
pub const BUCKET_CORS_ATTR: &str = "user.s3.bucket.cors";
/// Most rules in one configuration (S3's limit).
pub const CORS_RULES_MAX: usize = 100;
/// The methods a rule may allow.
pub const CORS_METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];

/// One rule as kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub methods: Vec<String>,
    pub origins: Vec<String>,
    #[serde(default)]
    pub allowed_headers: Vec<String>,
    #[serde(default)]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<i32>,
}

impl Rule {
    fn of(r: &CORSRule) -> S3Result<Rule> {
        let bad = |why: String| s3_error!(InvalidRequest, "{why}");
        if r.allowed_methods.is_empty() || r.allowed_origins.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "a CORS rule needs an AllowedMethod and an AllowedOrigin"
            ));
        }
        for m in &r.allowed_methods {
            if !CORS_METHODS.contains(&m.as_str()) {
                return Err(bad(format!(
                    "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
                )));
            }
        }
        let headers = r.allowed_headers.clone().unwrap_or_default();
        for o in r.allowed_origins.iter().chain(&headers) {
            if o.matches('*').count() > 1 {
                return Err(bad(format!(
                    "AllowedOrigin and AllowedHeader may hold one wildcard at most: {o}"
                )));
            }
        }
        Ok(Rule {
            id: r.id.clone(),
            methods: r.allowed_methods.clone(),
            origins: r.allowed_origins.clone(),
            allowed_headers: headers,
            expose_headers: r.expose_headers.clone().unwrap_or_default(),
            max_age_seconds: r.max_age_seconds,
        })
    }

    fn to_dto(&self) -> CORSRule {
        let some = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        CORSRule {
            id: self.id.clone(),
            allowed_methods: self.methods.clone(),
            allowed_origins: self.origins.clone(),
            allowed_headers: some(&self.allowed_headers),
            expose_headers: some(&self.expose_headers),
            max_age_seconds: self.max_age_seconds,
        }
    }
}

/// Whether `text` matches `pattern`, which may hold one `*` (any run of characters).
pub fn matches(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            text.len() >= head.len() + tail.len() && text.starts_with(head) && text.ends_with(tail)
        }
    }
}

/// What a preflight that a rule allows is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// `Access-Control-Allow-Origin`: `*` for a rule allowing every origin, else the origin.
    pub origin: String,
    /// `Access-Control-Allow-Methods`: the rule's methods.
    pub methods: String,
    /// `Access-Control-Allow-Headers`: the headers asked for, when any.
    pub headers: Option<String>,
    pub expose: Option<String>,
    pub max_age: Option<i32>,
}

impl Allowed {
    /// Puts the `Access-Control-*` headers into `h`: for a preflight (`preflight`) those
    /// answering its question (allowed headers, how long to keep the answer) as well.
    pub fn set_headers(&self, h: &mut http::HeaderMap, preflight: bool) {
        let mut set = |name: &'static str, v: &str| {
            if let Ok(v) = http::HeaderValue::from_str(v) {
                h.insert(name, v);
            }
        };
        set("access-control-allow-origin", &self.origin);
        set("access-control-allow-methods", &self.methods);
        if self.origin != "*" {
            set("access-control-allow-credentials", "true");
        }
        if let Some(e) = &self.expose {
            set("access-control-expose-headers", e);
        }
        if preflight {
            if let Some(hs) = &self.headers {
                set("access-control-allow-headers", hs);
            }
            if let Some(m) = self.max_age {
                set("access-control-max-age", &m.to_string());
            }
            set(
                "vary",
                "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
            );
        } else {
            set("vary", "Origin");
        }
    }
}

/// The first of `rules` that allows `origin` to send `method` with `headers` (the
/// comma-separated `Access-Control-Request-Headers`, if any).
pub fn allow(rules: &[Rule], origin: &str, method: &str, headers: Option<&str>) -> Option<Allowed> {
    let asked: Vec<String> = headers
        .unwrap_or("")
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    rules.iter().find_map(|r| {
        let origin_ok = r.origins.iter().any(|o| matches(o, origin));
        let method_ok = r.methods.iter().any(|m| m == method);
        let headers_ok = asked.iter().all(|h| {
            r.allowed_headers
                .iter()
                .any(|a| matches(&a.to_ascii_lowercase(), h))
        });
        (origin_ok && method_ok && headers_ok).then(|| Allowed {
            origin: if r.origins.iter().any(|o| o == "*") {
                "*".into()
            } else {
                origin.to_string()
            },
            methods: r.methods.join(", "),
            headers: (!asked.is_empty()).then(|| asked.join(", ")),
            expose: (!r.expose_headers.is_empty()).then(|| r.expose_headers.join(", ")),
            max_age: r.max_age_seconds,
        })
    })
}

impl Gateway {
    pub(crate) async fn put_bucket_cors_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        let i = &req.input;
        let (path, _) = self.owned_bucket(&c, &i.bucket).await?;
        let rules = &i.cors_configuration.cors_rules;
        if rules.len() > CORS_RULES_MAX {
            return Err(s3_error!(
                InvalidRequest,
                "a CORS configuration holds at most {CORS_RULES_MAX} rules"
            ));
        }
        let rules = rules.iter().map(Rule::of).collect::<S3Result<Vec<_>>>()?;
        let v = serde_json::to_vec(&rules).expect("rules serialize");
        c.setxattr(&path, BUCKET_CORS_ATTR, Some(&v))
            .await
            .map_err(status_err)?;
        Ok(S3Response::new(PutBucketCorsOutput::default()))
    }

    pub(crate) async fn get_bucket_cors_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        self.owned_bucket(&c, &req.input.bucket).await?;
        let rules = self.cors_rules(&c, &req.input.bucket).await?;
        if rules.is_empty() {
            return Err(s3_error!(NoSuchCORSConfiguration));
        }
        Ok(S3Response::new(GetBucketCorsOutput {
            cors_rules: Some(rules.iter().map(Rule::to_dto).collect()),
        }))
    }

    pub(crate) async fn delete_bucket_cors_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        self.clear_bucket_attr(&c, &req.input.bucket, BUCKET_CORS_ATTR)
            .await?;
        let mut r = S3Response::new(DeleteBucketCorsOutput::default());
        r.status = Some(http::StatusCode::NO_CONTENT);
        Ok(r)
    }

    /// `bucket`'s rules, read as `c` (none: empty).
    pub(crate) async fn cors_rules(&self, c: &Client, bucket: &str) -> S3Result<Vec<Rule>> {
        let v = self.bucket_attr(c, bucket, BUCKET_CORS_ATTR).await?;
        Ok(v.and_then(|v| serde_json::from_str(&v).ok())
            .unwrap_or_default())
    }

    /// The rules of `bucket` for a preflight, which no user signs: read as the bucket's
    /// owner (a session the gateway opens for them). `None`: no such bucket, or its owner is
    /// one the gateway may not act for (an admin).
    pub(crate) async fn preflight_rules(&self, bucket: &str) -> Option<Vec<Rule>> {
        let own = self.access.gateway().clone();
        let (_, st) = self.bucket_stat(&own, bucket).await.ok()?;
        let c = self.access.client_for(&st.owner).await.ok()?;
        self.cors_rules(&c, bucket).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(methods: &[&str], origins: &[&str], headers: &[&str]) -> Rule {
        Rule {
            methods: methods.iter().map(|s| s.to_string()).collect(),
            origins: origins.iter().map(|s| s.to_string()).collect(),
            allowed_headers: headers.iter().map(|s| s.to_string()).collect(),
            ..Rule::default()
        }
    }

    #[test]
    fn an_origin_matches_with_one_wildcard_anywhere() {
        assert!(matches("*suffix", "foo.suffix"));
        assert!(!matches("*suffix", "foo.suffix.get"));
        assert!(matches("start*end", "startend"));
        assert!(matches("start*end", "start12end"));
        assert!(!matches("start*end", "0start12end"));
        assert!(matches("prefix*", "prefix.suffix"));
        assert!(!matches("prefix*", "bla.prefix"));
        assert!(matches("*", "anything"));
        assert!(matches("exact", "exact") && !matches("exact", "exactly"));
        // The head and tail may not overlap.
        assert!(!matches("ab*ba", "aba"));
    }

    #[test]
    fn the_first_rule_allowing_origin_method_and_headers_answers() {
        let rules = [
            rule(&["GET"], &["*suffix"], &[]),
            rule(&["PUT"], &["*.put"], &[]),
            rule(&["GET"], &["*"], &["x-amz-meta-*"]),
        ];
        let a = allow(&rules, "foo.suffix", "GET", None).unwrap();
        assert_eq!(
            (a.origin.as_str(), a.methods.as_str()),
            ("foo.suffix", "GET")
        );
        assert_eq!(
            allow(&rules, "foo.put", "PUT", None).unwrap().methods,
            "PUT"
        );
        assert!(allow(&rules, "foo.put", "DELETE", None).is_none());
        // Headers asked for must all be allowed: only the third rule allows any.
        let h = allow(&rules, "o", "GET", Some("X-Amz-Meta-One, x-amz-meta-two")).unwrap();
        assert_eq!(h.origin, "*");
        assert_eq!(h.headers.as_deref(), Some("x-amz-meta-one, x-amz-meta-two"));
        assert!(allow(&rules, "o", "GET", Some("x-amz-meta-one, authorization")).is_none());
    }

    #[test]
    fn rules_are_checked_as_s3_checks_them() {
        let ok = CORSRule {
            allowed_methods: vec!["GET".into()],
            allowed_origins: vec!["https://*.example.com".into()],
            ..Default::default()
        };
        assert!(Rule::of(&ok).is_ok());
        let patch = CORSRule {
            allowed_methods: vec!["PATCH".into()],
            ..ok.clone()
        };
        assert!(Rule::of(&patch).is_err());
        let two = CORSRule {
            allowed_origins: vec!["*.*".into()],
            ..ok.clone()
        };
        assert!(Rule::of(&two).is_err());
        let none = CORSRule {
            allowed_origins: vec![],
            ..ok
        };
        assert!(Rule::of(&none).is_err());
    }
}
