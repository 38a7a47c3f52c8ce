//! Bucket lifecycle rules, kept and carried out. A bucket's rules are an attribute of its
//! directory (`user.s3.bucket.lifecycle`, JSON), which only its owner sets, reads or removes.
//! The gateway's sweeper ([`sweep_forever`]) visits every bucket with rules when it starts and
//! then once a day, just after midnight UTC, as S3 runs lifecycle rules once a day: every
//! expiry falls on a midnight (S3 rounds `Days` up to one, and a `Date` is one), so nothing
//! comes late. It acts for the bucket's owner through the same calls a DELETE makes:
//! - expires current versions `Days` after they were written or from a `Date` on (in a
//!   versioned bucket, as a DELETE without a version id does: a delete marker);
//! - removes a delete marker that is a key's only version (`ExpiredObjectDeleteMarker`);
//! - removes older versions `NoncurrentDays` after a newer one replaced them, keeping the
//!   `NewerNoncurrentVersions` newest.
//!
//! Rules select keys by prefix, tags and size, as S3's filters do. A day is 86,400 s; `nasd
//! s3 serve --lifecycle-day-secs` shortens it for tests, as RGW's `rgw_lc_debug_interval`
//! does (midnights are then multiples of that day since the epoch). Transitions to other
//! storage classes are refused (there is one). `AbortIncompleteMultipartUpload` removes the
//! uploads under a rule's prefix its days after they began, besides the gateway's own
//! expiry of every upload after `--stale-upload-secs` ([`crate::stale`]).

use crate::access::Access;
use crate::conds::Cond;
use crate::gateway::{status_err, Gateway};
use crate::list::{self, Item, Query};
use crate::meta::ObjectMeta;
use crate::versions::State;
use nasd_client::files::Client;
use nasd_proto::manager::{FileKind, FileStat};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// The bucket attribute holding its rules.
pub const BUCKET_ATTR: &str = "user.s3.bucket.lifecycle";
/// S3's limits: rules per bucket, bytes of a rule's id.
const RULES_MAX: usize = 1000;
const ID_BYTES_MAX: usize = 255;
/// A day, unless `--lifecycle-day-secs` says otherwise.
pub const DAY_SECS_DEFAULT: u64 = 86_400;
/// How long after a midnight the sweep runs (so the clock surely reads that day).
const SWEEP_AFTER_MIDNIGHT_MS: u64 = 250;

/// One rule, as kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub id: String,
    pub enabled: bool,
    pub prefix: String,
    pub tags: BTreeMap<String, String>,
    pub size_gt: Option<u64>,
    pub size_lt: Option<u64>,
    pub days: Option<u32>,
    /// Unix seconds, a midnight UTC.
    pub date: Option<i64>,
    pub expired_marker: bool,
    pub noncurrent_days: Option<u32>,
    pub newer_noncurrent: Option<u32>,
    /// `AbortIncompleteMultipartUpload`: uploads started this many days ago are aborted.
    #[serde(default)]
    pub abort_days: Option<u32>,
    /// The rule named its prefix in the older form, outside a `Filter`: it is answered so.
    #[serde(default)]
    pub bare_prefix: bool,
}

fn invalid(why: &str) -> s3s::S3Error {
    s3_error!(InvalidArgument, "{why}")
}

fn positive(n: Option<i32>, what: &str) -> S3Result<Option<u32>> {
    match n {
        None => Ok(None),
        Some(n) if n > 0 => Ok(Some(n as u32)),
        Some(_) => Err(invalid(&format!(
            "{what} must be a positive number of days"
        ))),
    }
}

impl Rule {
    /// A rule as S3 sends it, checked as S3 checks it (`n` numbers rules without an id).
    pub fn of(r: &LifecycleRule, n: usize) -> S3Result<Rule> {
        // A malformed configuration is refused as such, whatever the gateway supports.
        for t in r.transitions.iter().flatten() {
            t.date.as_ref().map(midnight).transpose()?;
        }
        if r.transitions.as_ref().is_some_and(|t| !t.is_empty())
            || r.noncurrent_version_transitions
                .as_ref()
                .is_some_and(|t| !t.is_empty())
        {
            return Err(s3_error!(
                NotImplemented,
                "transitions: the gateway has one storage class, STANDARD"
            ));
        }
        let id = r.id.clone().unwrap_or_else(|| format!("rule-{n}"));
        if id.len() > ID_BYTES_MAX {
            return Err(invalid("a rule's ID is at most 255 characters"));
        }
        let enabled = match r.status.as_str() {
            ExpirationStatus::ENABLED => true,
            ExpirationStatus::DISABLED => false,
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "a rule's Status is Enabled or Disabled"
                ))
            }
        };
        let mut rule = Rule {
            id,
            enabled,
            prefix: r.prefix.clone().unwrap_or_default(),
            bare_prefix: r.prefix.is_some() && r.filter.is_none(),
            ..Default::default()
        };
        if let Some(f) = &r.filter {
            rule.filter(f)?;
        }
        if let Some(e) = &r.expiration {
            rule.days = positive(e.days, "Expiration's Days")?;
            rule.date = e.date.as_ref().map(midnight).transpose()?;
            rule.expired_marker = e.expired_object_delete_marker == Some(true);
        }
        if let Some(a) = &r.abort_incomplete_multipart_upload {
            rule.abort_days = positive(a.days_after_initiation, "DaysAfterInitiation")?;
            if !rule.tags.is_empty() {
                // As S3: an upload has no tags to select it by.
                return Err(invalid(
                    "AbortIncompleteMultipartUpload takes no tag filter",
                ));
            }
        }
        if let Some(n) = &r.noncurrent_version_expiration {
            rule.noncurrent_days = positive(n.noncurrent_days, "NoncurrentDays")?;
            rule.newer_noncurrent =
                positive(n.newer_noncurrent_versions, "NewerNoncurrentVersions")?;
        }
        Ok(rule)
    }

    fn filter(&mut self, f: &LifecycleRuleFilter) -> S3Result<()> {
        let size = |n: Option<i64>| n.map(|n| n.max(0) as u64);
        if let Some(p) = &f.prefix {
            self.prefix = p.clone();
        }
        if let Some(t) = &f.tag {
            self.tags.insert(
                t.key.clone().unwrap_or_default(),
                t.value.clone().unwrap_or_default(),
            );
        }
        self.size_gt = size(f.object_size_greater_than);
        self.size_lt = size(f.object_size_less_than);
        if let Some(a) = &f.and {
            if let Some(p) = &a.prefix {
                self.prefix = p.clone();
            }
            for t in a.tags.iter().flatten() {
                self.tags.insert(
                    t.key.clone().unwrap_or_default(),
                    t.value.clone().unwrap_or_default(),
                );
            }
            self.size_gt = size(a.object_size_greater_than).or(self.size_gt);
            self.size_lt = size(a.object_size_less_than).or(self.size_lt);
        }
        Ok(())
    }

    /// The rule as S3 answers it.
    fn to_dto(&self) -> LifecycleRule {
        let tag = |(k, v): (&String, &String)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        };
        let filter = if self.tags.len() > 1 || (self.tags.len() == 1 && !self.prefix.is_empty()) {
            LifecycleRuleFilter {
                and: Some(LifecycleRuleAndOperator {
                    prefix: Some(self.prefix.clone()),
                    tags: Some(self.tags.iter().map(tag).collect()),
                    object_size_greater_than: self.size_gt.map(|n| n as i64),
                    object_size_less_than: self.size_lt.map(|n| n as i64),
                }),
                ..Default::default()
            }
        } else {
            LifecycleRuleFilter {
                prefix: Some(self.prefix.clone()),
                tag: self.tags.iter().next().map(tag),
                object_size_greater_than: self.size_gt.map(|n| n as i64),
                object_size_less_than: self.size_lt.map(|n| n as i64),
                ..Default::default()
            }
        };
        let expires = self.days.is_some() || self.date.is_some() || self.expired_marker;
        LifecycleRule {
            id: Some(self.id.clone()),
            status: ExpirationStatus::from_static(match self.enabled {
                true => ExpirationStatus::ENABLED,
                false => ExpirationStatus::DISABLED,
            }),
            filter: (!self.bare_prefix).then_some(filter),
            expiration: expires.then(|| LifecycleExpiration {
                days: self.days.map(|d| d as i32),
                date: self
                    .date
                    .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
                    .map(Timestamp::from),
                expired_object_delete_marker: self.expired_marker.then_some(true),
            }),
            noncurrent_version_expiration: (self.noncurrent_days.is_some()
                || self.newer_noncurrent.is_some())
            .then(|| NoncurrentVersionExpiration {
                noncurrent_days: self.noncurrent_days.map(|d| d as i32),
                newer_noncurrent_versions: self.newer_noncurrent.map(|d| d as i32),
            }),
            abort_incomplete_multipart_upload: self.abort_days.map(|d| {
                AbortIncompleteMultipartUpload {
                    days_after_initiation: Some(d as i32),
                }
            }),
            noncurrent_version_transitions: None,
            prefix: self.bare_prefix.then(|| self.prefix.clone()),
            transitions: None,
        }
    }

    /// Whether the rule selects object `key` of `size` bytes with tags `tags`.
    fn selects(&self, key: &str, size: u64, tags: &BTreeMap<String, String>) -> bool {
        self.enabled
            && key.starts_with(&self.prefix)
            && self.size_gt.is_none_or(|n| size > n)
            && self.size_lt.is_none_or(|n| size < n)
            && self.tags.iter().all(|(k, v)| tags.get(k) == Some(v))
    }
}

/// When something `days` days old from `since_us` expires, in Unix seconds: as S3 counts,
/// the first midnight UTC (a multiple of `day` seconds since the epoch) at least that many
/// days later.
pub fn expires_at(since_us: u64, days: u32, day: i64) -> i64 {
    let since = (since_us / 1_000_000) as i64;
    let end = since + i64::from(days) * day;
    (end + day - 1) / day * day
}

/// `x-amz-expiration` of the current object `key` (`size` bytes, tags `tags`, written at
/// `mtime_us`) under `rules`: the earliest expiry of the enabled rules that select it, in
/// calendar days (whatever `--lifecycle-day-secs` makes the sweeper's day), with its rule.
pub fn expiration(
    rules: &[Rule],
    key: &str,
    size: u64,
    tags: &BTreeMap<String, String>,
    mtime_us: u64,
) -> Option<http::HeaderValue> {
    let (at, id) = rules
        .iter()
        .filter(|r| r.selects(key, size, tags))
        .filter_map(|r| {
            let by_days = r
                .days
                .map(|d| expires_at(mtime_us, d, DAY_SECS_DEFAULT as i64));
            let at = match (by_days, r.date) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b)?,
            };
            Some((at, &r.id))
        })
        .min()?;
    let t = time::OffsetDateTime::from_unix_timestamp(at).ok()?;
    let mut date = Vec::new();
    Timestamp::from(t)
        .format(TimestampFormat::HttpDate, &mut date)
        .ok()?;
    let date = String::from_utf8(date).ok()?;
    http::HeaderValue::from_str(&format!("expiry-date=\"{date}\", rule-id=\"{id}\"")).ok()
}

/// A date as Unix seconds; S3 takes only midnights UTC.
fn midnight(d: &Timestamp) -> S3Result<i64> {
    let t: time::OffsetDateTime = d.clone().into();
    let s = t.unix_timestamp();
    if s % 86_400 != 0 {
        return Err(invalid("a lifecycle Date is a midnight, UTC"));
    }
    Ok(s)
}

/// The rules of a configuration, checked: at most 1,000, ids unique.
pub fn rules_of(c: &BucketLifecycleConfiguration) -> S3Result<Vec<Rule>> {
    if c.rules.len() > RULES_MAX {
        return Err(invalid("at most 1,000 rules"));
    }
    let rules = c
        .rules
        .iter()
        .enumerate()
        .map(|(n, r)| Rule::of(r, n))
        .collect::<S3Result<Vec<_>>>()?;
    let mut ids: Vec<&str> = rules.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Err(invalid("two rules have one ID"));
    }
    Ok(rules)
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Gateway {
    pub(crate) async fn put_bucket_lifecycle_configuration_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        let i = &req.input;
        let (path, _) = self.owned_bucket(&c, &i.bucket).await?;
        let Some(conf) = &i.lifecycle_configuration else {
            return Err(s3_error!(MalformedXML, "no lifecycle configuration"));
        };
        let rules = rules_of(conf)?;
        let v = serde_json::to_vec(&rules).expect("rules serialize");
        c.setxattr(&path, BUCKET_ATTR, Some(&v))
            .await
            .map_err(status_err)?;
        Ok(S3Response::new(
            PutBucketLifecycleConfigurationOutput::default(),
        ))
    }

    pub(crate) async fn get_bucket_lifecycle_configuration_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        let (_, _) = self.owned_bucket(&c, &req.input.bucket).await?;
        let rules = self.lifecycle(&c, &req.input.bucket).await?;
        if rules.is_empty() {
            return Err(s3_error!(NoSuchLifecycleConfiguration));
        }
        Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
            rules: Some(rules.iter().map(Rule::to_dto).collect()),
            ..Default::default()
        }))
    }

    pub(crate) async fn delete_bucket_lifecycle_as(
        &self,
        c: Arc<Client>,
        req: &S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        self.clear_bucket_attr(&c, &req.input.bucket, BUCKET_ATTR)
            .await?;
        let mut r = S3Response::new(DeleteBucketLifecycleOutput::default());
        r.status = Some(http::StatusCode::NO_CONTENT);
        Ok(r)
    }

    /// Adds `x-amz-expiration` to `h` when a rule of `bucket` will expire current object
    /// `key` (stat `st`, metadata `m`); a bucket without rules costs no more than its
    /// attributes, which the client caches.
    pub(crate) async fn expiration_header(
        &self,
        c: &Client,
        bucket: &str,
        key: &str,
        st: Option<(&FileStat, &ObjectMeta)>,
        h: &mut http::HeaderMap,
    ) {
        let Ok(rules) = self.lifecycle(c, bucket).await else {
            return;
        };
        if rules.is_empty() {
            return;
        }
        let got;
        let (st, m) = match st {
            Some(v) => v,
            None => match self.object(c, bucket, key).await {
                Ok((_, st, m)) => {
                    got = (st, m);
                    (&got.0, &got.1)
                }
                Err(_) => return,
            },
        };
        if let Some(v) = expiration(&rules, key, st.size, &m.tags, st.mtime_us) {
            h.insert("x-amz-expiration", v);
        }
    }

    /// Bucket `bucket`'s rules (none when it has none, or they do not parse).
    async fn lifecycle(&self, c: &Client, bucket: &str) -> S3Result<Vec<Rule>> {
        let v = self.bucket_attr(c, bucket, BUCKET_ATTR).await?;
        Ok(v.and_then(|v| serde_json::from_str(&v).ok())
            .unwrap_or_default())
    }

    /// Carries out `rules` in bucket `bucket` as `c` (its owner) now, a day being `day`
    /// long; returns how many versions it removed or hid.
    pub(crate) async fn apply_lifecycle(
        &self,
        c: &Arc<Client>,
        bucket: &str,
        rules: &[Rule],
        day: Duration,
    ) -> S3Result<usize> {
        let state = self.versioning(c, bucket).await?;
        let path = self.names.bucket(bucket)?;
        let mut q = Query {
            max_keys: list::MAX_KEYS,
            versions: true,
            ids: state != State::Off,
            ..Default::default()
        };
        let mut done = 0;
        let mut group: Vec<Item> = vec![];
        loop {
            let l = list::list(c, &path, &q).await.map_err(status_err)?;
            for item in l.objects {
                if group.last().is_some_and(|g| g.key != item.key) {
                    done += self
                        .expire_key(c, bucket, rules, &std::mem::take(&mut group), day)
                        .await?;
                }
                group.push(item);
            }
            match (l.truncated, group.last()) {
                (true, Some(last)) => {
                    q.after = last.key.clone();
                    q.after_version = last.version.as_ref().map(|v| v.id.clone());
                }
                _ => break,
            }
        }
        if !group.is_empty() {
            done += self.expire_key(c, bucket, rules, &group, day).await?;
        }
        Ok(done)
    }

    /// Applies `rules` to one key's versions, newest first.
    async fn expire_key(
        &self,
        c: &Arc<Client>,
        bucket: &str,
        rules: &[Rule],
        versions: &[Item],
        day: Duration,
    ) -> S3Result<usize> {
        let Some(first) = versions.first() else {
            return Ok(0);
        };
        let key = first.key.as_str();
        if key.ends_with('/') {
            return Ok(0);
        }
        let tags = match rules.iter().any(|r| !r.tags.is_empty()) {
            true => self.tags_of(c, bucket, key).await,
            false => BTreeMap::new(),
        };
        let now = now_s();
        let day = day.as_secs().max(1) as i64;
        let past = |since_us: u64, days: u32| now >= expires_at(since_us, days, day);
        let mut done = 0;
        for r in rules
            .iter()
            .filter(|r| r.selects(key, first.stat.size, &tags))
        {
            let latest = first.version.as_ref().is_none_or(|v| v.latest);
            let marker = first.version.as_ref().is_some_and(|v| v.marker);
            let due = r.days.is_some_and(|d| past(first.stat.mtime_us, d))
                || r.date.is_some_and(|d| now >= d);
            if latest && !marker && due {
                // Only the object examined: one written since is not expired.
                let cond = Cond {
                    if_match: first
                        .etag
                        .clone()
                        .map(|e| ETagCondition::ETag(ETag::Strong(e))),
                    mtime: Some(Timestamp::from(
                        UNIX_EPOCH + Duration::from_micros(first.stat.mtime_us),
                    )),
                    size: i64::try_from(first.stat.size).ok(),
                    ..Cond::default()
                };
                match self.delete_version_of(c, bucket, key, None, &cond).await {
                    Ok(_) => done += 1,
                    Err(e) if *e.code() == s3s::S3ErrorCode::PreconditionFailed => {}
                    Err(e) => return Err(e),
                }
            }
            if latest && marker && versions.len() == 1 && (r.expired_marker || due) {
                let id = first.version.as_ref().map(|v| v.id.as_str());
                self.delete_version_of(c, bucket, key, id, &Cond::default())
                    .await?;
                done += 1;
            }
            done += self
                .expire_noncurrent(c, bucket, key, r, versions, &past)
                .await?;
        }
        Ok(done)
    }

    /// A rule's `NoncurrentVersionExpiration` on one key's versions: a version is noncurrent
    /// from when the next newer one was written.
    async fn expire_noncurrent(
        &self,
        c: &Arc<Client>,
        bucket: &str,
        key: &str,
        r: &Rule,
        versions: &[Item],
        past: &impl Fn(u64, u32) -> bool,
    ) -> S3Result<usize> {
        let Some(days) = r.noncurrent_days else {
            return Ok(0);
        };
        let keep = r.newer_noncurrent.unwrap_or(0) as usize;
        let mut done = 0;
        for (k, pair) in versions.windows(2).enumerate() {
            let (newer, v) = (&pair[0], &pair[1]);
            if k < keep || !past(newer.stat.mtime_us, days) {
                continue;
            }
            let id = v.version.as_ref().map(|v| v.id.as_str());
            self.delete_version_of(c, bucket, key, id.or(Some("null")), &Cond::default())
                .await?;
            done += 1;
        }
        Ok(done)
    }

    /// The tags of object `key` (none if it cannot be read).
    async fn tags_of(&self, c: &Client, bucket: &str, key: &str) -> BTreeMap<String, String> {
        let Ok((path, _)) = self.names.key(bucket, key) else {
            return BTreeMap::new();
        };
        match c.getxattrs(&path).await {
            Ok((_, x)) => ObjectMeta::from_xattrs(&x).tags,
            Err(_) => BTreeMap::new(),
        }
    }
}

/// When the sweep after `now_ms` (Unix milliseconds) runs, for a day of `day_ms`: just after
/// the next midnight.
pub fn next_sweep_ms(now_ms: u64, day_ms: u64) -> u64 {
    (now_ms / day_ms + 1) * day_ms + SWEEP_AFTER_MIDNIGHT_MS
}

/// Carries out every bucket's rules under `root` now, and then after each midnight, for ever.
pub async fn sweep_forever(gw: Gateway, root: String, day: Duration) {
    let access = gw.access.clone();
    let day_ms = (day.as_millis() as u64).max(1000);
    loop {
        let n = sweep(&gw, &access, &root, day).await;
        if n > 0 {
            tracing::info!("lifecycle rules expired {n} version(s)");
        }
        let now = now_ms();
        tokio::time::sleep(Duration::from_millis(next_sweep_ms(now, day_ms) - now)).await;
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One sweep over the buckets under `root`: each bucket with rules, as its owner.
pub async fn sweep(gw: &Gateway, access: &Arc<Access>, root: &str, day: Duration) -> usize {
    let entries = match access.gateway().list(root).await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("listing {root} for lifecycle rules: {e}");
            return 0;
        }
    };
    let mut done = 0;
    let mut aborting = BTreeMap::new();
    for e in entries {
        if e.stat.kind != FileKind::Dir || crate::names::check_bucket(&e.name).is_err() {
            continue;
        }
        let Ok(c) = access.client_for(&e.stat.owner).await else {
            continue;
        };
        let rules = match gw.lifecycle(&c, &e.name).await {
            Ok(r) if !r.is_empty() => r,
            _ => continue,
        };
        match gw.apply_lifecycle(&c, &e.name, &rules, day).await {
            Ok(n) => done += n,
            Err(err) => tracing::warn!(bucket = %e.name, "lifecycle rules: {err}"),
        }
        let aborts: Vec<Rule> = rules
            .into_iter()
            .filter(|r| r.enabled && r.abort_days.is_some())
            .collect();
        if !aborts.is_empty() {
            aborting.insert(e.name, aborts);
        }
    }
    if !aborting.is_empty() {
        done += abort_incomplete(access, root, &aborting, day).await;
    }
    done
}

/// `AbortIncompleteMultipartUpload`: removes the uploads in the staging directory under
/// `root` that a rule of their bucket in `rules` selects (by key prefix) and that were started
/// its days ago, each through a session of the upload's owner, as their own abort would;
/// returns how many.
async fn abort_incomplete(
    access: &Arc<Access>,
    root: &str,
    rules: &BTreeMap<String, Vec<Rule>>,
    day: Duration,
) -> usize {
    let staging = format!(
        "{}/{}",
        root.trim_end_matches('/'),
        crate::multipart::STAGING_DIR
    );
    let Ok(entries) = access.gateway().list(&staging).await else {
        return 0;
    };
    let (now, day) = (now_s(), day.as_secs().max(1) as i64);
    let mut done = 0;
    for e in entries
        .iter()
        .filter(|e| crate::multipart::is_upload_dir(e))
    {
        let Ok(c) = access.client_for(&e.stat.owner).await else {
            continue;
        };
        let dir = format!("{staging}/{}", e.name);
        let Some((bucket, key, started_us)) = crate::multipart::upload_origin(&c, &dir).await
        else {
            continue;
        };
        let due = rules.get(&bucket).into_iter().flatten().any(|r| {
            key.starts_with(&r.prefix)
                && r.abort_days
                    .is_some_and(|d| now >= expires_at(started_us, d, day))
        });
        if due && crate::multipart::remove_upload(&c, &dir).await {
            done += 1;
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;
    /// 2012-12-21 10:00 UTC, in microseconds.
    const WRITTEN_US: u64 = 1_356_084_000_000_000;

    #[test]
    fn sweeps_come_just_after_each_midnight() {
        let day = 86_400_000;
        let after = SWEEP_AFTER_MIDNIGHT_MS;
        assert_eq!(next_sweep_ms(0, day), day + after);
        assert_eq!(next_sweep_ms(day - 1, day), day + after);
        // A sweep that ran just after a midnight waits for the next one.
        assert_eq!(next_sweep_ms(day + after + 5, day), 2 * day + after);
        // Every expiry is a midnight, so the sweep just after it finds it due.
        let due = expires_at(5 * 1_000_000, 1, 86_400) as u64;
        assert_eq!(due % 86_400, 0);
        assert_eq!(next_sweep_ms(due * 1000 - 1, day) / 1000, due);
        assert_eq!(next_sweep_ms(9_100, 4_000), 12_000 + after);
    }

    #[test]
    fn an_expiry_is_the_first_midnight_after_its_days() {
        // S3's own example: written 2012-12-21 10:00, one day: 2012-12-23 00:00.
        assert_eq!(expires_at(WRITTEN_US, 1, DAY), 1_356_220_800);
        // Written at midnight: exactly the days later.
        assert_eq!(
            expires_at(1_356_048_000_000_000, 2, DAY),
            1_356_048_000 + 2 * DAY
        );
    }

    #[test]
    fn the_header_names_the_earliest_rule_that_selects_the_object() {
        let rule = |id: &str, prefix: &str, days| Rule {
            id: id.into(),
            enabled: true,
            prefix: prefix.into(),
            days: Some(days),
            ..Rule::default()
        };
        let rules = [
            rule("late", "", 30),
            rule("soon", "logs/", 1),
            rule("other", "tmp/", 1),
        ];
        let none = BTreeMap::new();
        let h = expiration(&rules, "logs/a", 3, &none, WRITTEN_US).unwrap();
        assert_eq!(
            h.to_str().unwrap(),
            r#"expiry-date="Sun, 23 Dec 2012 00:00:00 GMT", rule-id="soon""#
        );
        let h = expiration(&rules, "data/a", 3, &none, WRITTEN_US).unwrap();
        assert!(h.to_str().unwrap().ends_with(r#"rule-id="late""#));
        let off = Rule {
            enabled: false,
            ..rule("off", "", 1)
        };
        assert!(expiration(&[off], "a", 3, &none, WRITTEN_US).is_none());
    }
}
