//! Listing a bucket in S3's order: every key in byte order, those under `prefix` after the
//! start (`marker`, `start-after` or a continuation token), keys that hold the delimiter past
//! the prefix rolled up into common prefixes, at most `max-keys` of both.
//!
//! The bucket is a tree of directories, so the walk visits each directory's entries sorted
//! by their name as a key sees it (a directory's name followed by `/`): that order, depth
//! first, is the byte order of the keys. It descends only into directories whose keys can
//! fall under the prefix and after the start, and never into one the delimiter rolls up, so
//! listing the top of a bucket with `/` reads one directory however deep the tree is. An
//! empty directory is listed as the key `dir/` (as a folder marker is).
//!
//! Asked for versions ([`Query::versions`]), the walk also visits each key's versions
//! directory ([`crate::versions`]), which sorts right after the key's file, and lists every
//! version, newest first; otherwise versions directories are passed over.

use crate::meta;
use crate::versions;
use nasd_client::files::{Client, FsError};
use nasd_proto::manager::{FileKind, FileStat, MgrStatus};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Entries read per directory page.
const PAGE_ENTRIES: usize = 1000;
/// Most keys one listing returns (S3's limit).
pub const MAX_KEYS: usize = 1000;

/// What to list.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// List keys (and common prefixes) strictly after this one.
    pub after: String,
    pub max_keys: usize,
    /// List every version of each key, not only the current ones.
    pub versions: bool,
    /// With `versions`: of key `after`, list the versions after this one.
    pub after_version: Option<String>,
    /// With `versions`: current versions may have ids (the bucket has had versioning), so
    /// each is read; otherwise each is `null`.
    pub ids: bool,
}

/// One key found.
#[derive(Clone, Debug)]
pub struct Item {
    pub key: String,
    pub stat: FileStat,
    /// The stored ETag, unquoted, when the object has one.
    pub etag: Option<String>,
    /// In a listing of versions: which version this is.
    pub version: Option<VersionOf>,
}

/// A listed version: its id, whether it is the key's latest, whether a delete marker.
#[derive(Clone, Debug)]
pub struct VersionOf {
    pub id: String,
    pub latest: bool,
    pub marker: bool,
}

/// A page of a listing.
#[derive(Debug, Default)]
pub struct Listing {
    pub objects: Vec<Item>,
    pub prefixes: Vec<String>,
    /// More follow; the next page starts after `last`.
    pub truncated: bool,
    pub last: Option<String>,
}

/// The common prefix `key` rolls up into, if the delimiter occurs past the prefix.
fn rolled_up(q: &Query, key: &str) -> Option<String> {
    let d = q.delimiter.as_deref().filter(|d| !d.is_empty())?;
    let rest = key.strip_prefix(q.prefix.as_str())?;
    let at = rest.find(d)?;
    Some(key[..q.prefix.len() + at + d.len()].to_string())
}

struct Walk {
    client: Arc<Client>,
    q: Query,
    out: Listing,
    /// The last key whose current version (its file) was listed.
    current: Option<String>,
    /// Still passing the versions of key `after` up to `after_version`.
    skipping: bool,
}

impl Walk {
    fn full(&self) -> bool {
        self.out.objects.len() + self.out.prefixes.len() >= self.q.max_keys
    }

    /// Records `key` (an object, or a common prefix when the delimiter rolls it up); `false`
    /// once the page is full and `key` did not fit (the listing is truncated).
    fn emit(&mut self, key: &str, stat: &FileStat, etag: Option<Vec<u8>>) -> bool {
        self.emit_item(Item {
            key: key.to_string(),
            stat: stat.clone(),
            etag: crate::meta::listed_etag(etag),
            version: None,
        })
    }

    /// [`Walk::emit`] of a whole item; a version of key `after` at or before `after_version`
    /// is passed over.
    fn emit_item(&mut self, item: Item) -> bool {
        if self.skipping && item.key == self.q.after {
            let id = item.version.as_ref().map(|v| v.id.as_str());
            if id == self.q.after_version.as_deref() {
                self.skipping = false;
            }
            return true;
        }
        let key = item.key.as_str();
        if let Some(cp) = self.rolled_up(key) {
            if self.out.prefixes.last().map(String::as_str) == Some(cp.as_str())
                || cp.as_str() <= self.q.after.as_str()
            {
                return true;
            }
            if self.full() {
                self.out.truncated = true;
                return false;
            }
            self.out.last = Some(cp.clone());
            self.out.prefixes.push(cp);
            return true;
        }
        if self.full() {
            self.out.truncated = true;
            return false;
        }
        self.out.last = Some(key.to_string());
        self.out.objects.push(item);
        true
    }

    fn rolled_up(&self, key: &str) -> Option<String> {
        rolled_up(&self.q, key)
    }

    /// Lists directory `dir` whose keys start with `base` (`""` or ending in `/`); `false`
    /// once the page is full.
    fn dir(
        &mut self,
        dir: String,
        base: String,
    ) -> Pin<Box<dyn Future<Output = Result<bool, FsError>> + Send + '_>> {
        Box::pin(async move {
            let mut after = String::new();
            let mut any = false;
            let versions = self.q.versions;
            loop {
                let page = self
                    .client
                    .list_page_with(&dir, &after, PAGE_ENTRIES, Some(meta::ETAG))
                    .await?;
                let Some(last) = page.last() else { break };
                after = last.name.clone();
                let n = page.len();
                // A directory of versions holds keys, so its directory is no folder marker.
                any |= page.iter().any(|e| e.name.ends_with(versions::SUFFIX));
                // Sorted as keys sort: a directory's name with its `/`; a key's versions
                // right after its file.
                let mut entries: Vec<_> = page
                    .into_iter()
                    .filter_map(|e| {
                        if let Some(stem) = e.name.strip_suffix(versions::SUFFIX) {
                            let wanted = versions && e.stat.kind == FileKind::Dir;
                            let key = format!("{base}{stem}");
                            return wanted.then_some((key, true, e));
                        }
                        let key = match e.stat.kind {
                            FileKind::Dir => format!("{base}{}/", e.name),
                            FileKind::File => format!("{base}{}", e.name),
                            _ => return None,
                        };
                        Some((key, false, e))
                    })
                    .collect();
                any |= !entries.is_empty();
                entries.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
                for (key, of_versions, e) in entries {
                    let more = match of_versions {
                        true => self.versions_of(&dir, key, e).await?,
                        false => self.visit(&dir, key, e).await?,
                    };
                    if !more {
                        return Ok(false);
                    }
                }
                if n < PAGE_ENTRIES {
                    break;
                }
            }
            // An empty directory below the bucket is a folder marker.
            if !any && !base.is_empty() && self.wanted(&base) {
                let st = self.client.stat(&dir).await?;
                return Ok(self.emit(&base, &st, None));
            }
            Ok(true)
        })
    }

    /// Whether `key` itself belongs in the listing (under the prefix, after the start).
    fn wanted(&self, key: &str) -> bool {
        key.starts_with(self.q.prefix.as_str())
            && (key > self.q.after.as_str() || (self.skipping && key == self.q.after))
    }

    /// Lists the versions in directory `e` (of key `key`) newest first: the first is the
    /// latest unless the key's file was listed just before.
    async fn versions_of(
        &mut self,
        dir: &str,
        key: String,
        e: nasd_proto::manager::DirEntry,
    ) -> Result<bool, FsError> {
        if !self.wanted(&key) {
            return Ok(true);
        }
        let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
        let has_current = self.current.as_deref() == Some(key.as_str());
        for (k, v) in versions::entries(&self.client, &path)
            .await?
            .into_iter()
            .enumerate()
        {
            let item = Item {
                key: key.clone(),
                stat: v.stat,
                etag: v.etag,
                version: Some(VersionOf {
                    id: v.id,
                    latest: k == 0 && !has_current,
                    marker: v.marker,
                }),
            };
            if !self.emit_item(item) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn visit(
        &mut self,
        dir: &str,
        key: String,
        e: nasd_proto::manager::DirEntry,
    ) -> Result<bool, FsError> {
        let q = &self.q;
        if e.stat.kind == FileKind::Dir {
            // Keys under `key` all start with it: skip the directory when none can be under
            // the prefix, or all come before the start.
            let under_prefix = key.starts_with(q.prefix.as_str()) || q.prefix.starts_with(&key);
            let after_start = key.as_str() > q.after.as_str() || q.after.starts_with(&key);
            if !under_prefix || !after_start {
                return Ok(true);
            }
            if let Some(cp) = self.rolled_up(&key) {
                // Every key under it rolls up into `cp` too (the delimiter is in `key`).
                return Ok(self.emit(&cp, &e.stat, None));
            }
            let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
            return self.dir(path, key).await;
        }
        if !self.wanted(&key) {
            return Ok(true);
        }
        if !self.q.versions {
            return Ok(self.emit(&key, &e.stat, e.xattr));
        }
        // The current version: its id is an attribute of its own, read when the bucket has
        // had versioning (an object the lister may not read is listed as `null`, as its
        // listing entry shows it).
        let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
        let id = match self.q.ids {
            true => match self.client.getxattrs(&path).await {
                Ok((_, x)) => meta::ObjectMeta::from_xattrs(&x).version_id,
                Err(e) if e.status() == Some(MgrStatus::PermissionDenied) => None,
                Err(e) => return Err(e),
            },
            false => None,
        };
        self.current = Some(key.clone());
        Ok(self.emit_item(Item {
            key,
            stat: e.stat,
            etag: crate::meta::listed_etag(e.xattr),
            version: Some(VersionOf {
                id: id.unwrap_or_else(|| "null".into()),
                latest: true,
                marker: false,
            }),
        }))
    }
}

/// Lists bucket directory `bucket` as `q` asks.
pub async fn list(client: &Arc<Client>, bucket: &str, q: &Query) -> Result<Listing, FsError> {
    let mut w = Walk {
        client: client.clone(),
        q: q.clone(),
        out: Listing::default(),
        current: None,
        skipping: q.versions && q.after_version.is_some() && !q.after.is_empty(),
    };
    if q.max_keys == 0 {
        return Ok(w.out);
    }
    w.dir(bucket.to_string(), String::new()).await?;
    Ok(w.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delimiters_roll_up_past_the_prefix() {
        let q = Query {
            prefix: "a/".into(),
            delimiter: Some("/".into()),
            after: String::new(),
            max_keys: 10,
            ..Default::default()
        };
        assert_eq!(rolled_up(&q, "a/b/c"), Some("a/b/".into()));
        assert_eq!(rolled_up(&q, "a/b"), None);
        assert_eq!(rolled_up(&q, "b/c"), None);
        let q = Query {
            prefix: "x".into(),
            delimiter: Some("-".into()),
            ..q
        };
        assert_eq!(rolled_up(&q, "xa-b-c"), Some("xa-".into()));
        let q = Query {
            delimiter: Some(String::new()),
            ..q
        };
        assert_eq!(
            rolled_up(&q, "xa-b-c"),
            None,
            "an empty delimiter rolls nothing up"
        );
    }
}
