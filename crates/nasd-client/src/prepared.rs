//! New files staged ahead of their names (manager protocol 6, `Prepare`), so a client that
//! writes many small files into a directory pays one manager round trip per file — the
//! `Commit` that links it — instead of two (`Create`, then `Commit`), while a file still
//! appears only once all of it is on the drives.
//!
//! Preparing costs the manager a reserved inode and fresh objects per file, and a batch that
//! is never used lingers until it expires, so a client prepares only where it has seen small
//! files being made: after [`PREPARE_AFTER_CREATES`] ordinary creates of files of at most
//! [`PREPARED_FILE_BYTES_MAX`] in one directory with one mode. Batches start at
//! [`PREPARED_BATCH_FIRST`] files and double to the protocol's `PREPARED_FILES_MAX` while the
//! directory keeps using them, like read-ahead (seed 002 §4.5). A prepared file never replaces
//! an existing name (the manager answers `Exists`, and the file is overwritten in place
//! through `Create`, keeping its inode); a directory where that happens is not prepared for
//! again until it sees new names. [`Client::release_prepared`] gives the unused ones back.

use crate::files::{Client, FsError, Upload};
use nasd_proto::manager::calls;
use nasd_proto::manager::{MgrStatus, PREPARED_FILES_MAX};
use std::collections::HashMap;

/// Largest file written into a prepared slot: above this a second manager round trip is a
/// small share of the transfer, and a fallback after `Exists` would rewrite too much.
pub const PREPARED_FILE_BYTES_MAX: u64 = 1 << 20;
/// Ordinary small-file creates in a directory before the client prepares files there.
pub const PREPARE_AFTER_CREATES: u32 = 2;
/// Files in the first batch a directory gets.
pub const PREPARED_BATCH_FIRST: u32 = 4;
/// Directories (with a mode) a client keeps preparing state for: a long-running client (a
/// gateway) touching many directories keeps a bounded map; past it, directories holding no
/// prepared files are forgotten, and while every one holds some, new ones are not prepared.
pub const PREPARED_DIRS_MAX: usize = 64;

/// Prepared files of one directory and mode, and what decides when to ask for more.
#[derive(Default)]
struct Pool {
    ready: Vec<Upload>,
    /// Ordinary small creates seen since the last batch was asked for (or refused).
    creates: u32,
    /// The size of the next batch.
    batch: u32,
}

/// The prepared files of one client, by (directory as the caller spelled it, mode).
#[derive(Default)]
pub struct Pools(std::sync::Mutex<HashMap<(String, u32), Pool>>);

/// The pool of `key` in `pools`, made if there is room ([`PREPARED_DIRS_MAX`]).
fn pool_of(pools: &mut HashMap<(String, u32), Pool>, key: (String, u32)) -> Option<&mut Pool> {
    if !pools.contains_key(&key) && pools.len() >= PREPARED_DIRS_MAX {
        pools.retain(|_, p| !p.ready.is_empty());
        if pools.len() >= PREPARED_DIRS_MAX {
            return None;
        }
    }
    Some(pools.entry(key).or_default())
}

/// `path`'s directory as it is sent to the manager (`/` for a top-level name), or `None` for
/// a path with no file name.
fn dir_of(path: &str) -> Option<&str> {
    let (dir, name) = path.rsplit_once('/')?;
    (!name.is_empty()).then_some(if dir.is_empty() { "/" } else { dir })
}

impl Client {
    /// Writes a new file `path` of `size` bytes (at most [`PREPARED_FILE_BYTES_MAX`]) through
    /// a prepared file, if this client has one or it is time to ask for some; `fill` writes
    /// the content into the upload it is given. `None`: not done (no prepared file, or the
    /// name exists, or the prepared file was refused); the caller uploads as usual. Other
    /// errors are returned.
    pub(crate) async fn put_prepared<F, Fut>(
        &self,
        path: &str,
        size: u64,
        mode: u32,
        xattrs: Option<Vec<nasd_proto::manager::Xattr>>,
        fill: F,
    ) -> Option<Result<(), FsError>>
    where
        F: FnOnce(Upload) -> Fut,
        Fut: std::future::Future<Output = Result<(), FsError>>,
    {
        if size > PREPARED_FILE_BYTES_MAX {
            return None;
        }
        let dir = dir_of(path)?;
        let u = self.take_prepared(dir, path, mode).await?;
        let r = match fill(u.clone()).await {
            Ok(()) => self.finish_upload_with(u, xattrs).await,
            Err(e) => {
                self.abort_upload(&u).await;
                Err(e)
            }
        };
        match r {
            Ok(()) => Some(Ok(())),
            Err(e) => {
                // The name exists (overwrite it in place), or the prepared file was refused
                // (its directory moved, its time ran out): both go the ordinary way, which
                // reports whatever is wrong for that path.
                if e.status() == Some(MgrStatus::Exists) {
                    self.prepared_miss(dir, mode);
                }
                tracing::debug!("prepared file not used for {path}: {e}");
                e.status().is_none().then_some(Err(e))
            }
        }
    }

    /// Links an empty prepared file as `path` (one round trip), if this client has one or
    /// it is time to ask for some: its inode number, or `None` inside when the name is taken
    /// (a prepared file lands only under a free name, so this create is exclusive). `None`:
    /// not done (no prepared file, or it was refused); the caller creates as usual.
    pub(crate) async fn create_prepared(
        &self,
        path: &str,
        mode: u32,
    ) -> Option<Result<Option<u64>, FsError>> {
        let dir = dir_of(path)?;
        let u = self.take_prepared(dir, path, mode).await?;
        let ino = u.stat().ino;
        match self.finish_upload(u).await {
            Ok(()) => Some(Ok(Some(ino))),
            Err(e) if e.status() == Some(MgrStatus::Exists) => {
                self.prepared_miss(dir, mode);
                Some(Ok(None))
            }
            Err(e) => {
                tracing::debug!("prepared file not used for {path}: {e}");
                e.status().is_none().then_some(Err(e))
            }
        }
    }

    /// A prepared file of `dir` and `mode`, bound to `path`: one from the pool, else a fresh
    /// batch if the directory has seen enough small creates.
    async fn take_prepared(&self, dir: &str, path: &str, mode: u32) -> Option<Upload> {
        let now = crate::files::now_ms();
        let (stale, got, ask) = {
            let mut pools = self.prepared.0.lock().expect("prepared lock");
            let pool = pool_of(&mut pools, (dir.to_string(), mode))?;
            // Files whose capabilities are due for renewal are given back, not renewed.
            let (keep, stale): (Vec<_>, Vec<_>) =
                pool.ready.drain(..).partition(|u| u.usable_until(now));
            pool.ready = keep;
            let got = pool.ready.pop();
            let mut ask = 0;
            if got.is_none() {
                pool.creates += 1;
                if pool.creates > PREPARE_AFTER_CREATES {
                    pool.creates = 0;
                    ask = pool.batch.clamp(PREPARED_BATCH_FIRST, PREPARED_FILES_MAX);
                    pool.batch = (ask * 2).min(PREPARED_FILES_MAX);
                }
            }
            (stale, got, ask)
        };
        self.abort_prepared(dir, stale).await;
        if let Some(u) = got {
            return Some(u.bound_to(path));
        }
        if ask == 0 {
            return None;
        }
        // Each file may hold a small file's bytes: under a quota they are escrowed, and the
        // manager prepares only as many files as the quota has room for.
        let prepare = calls::Prepare {
            dir: dir.to_string(),
            mode,
            count: ask,
            extend_by: PREPARED_FILE_BYTES_MAX,
        };
        let files = match self.call(dir, prepare).await {
            Ok(files) => files,
            Err(e) => {
                tracing::debug!("prepare in {dir}: {e}");
                return None;
            }
        };
        let mut ups: Vec<Upload> = files
            .into_iter()
            .filter_map(|f| Upload::prepared(dir, f).ok())
            .collect();
        let first = ups.pop()?;
        let unkept = {
            let mut pools = self.prepared.0.lock().expect("prepared lock");
            match pool_of(&mut pools, (dir.to_string(), mode)) {
                Some(pool) => {
                    pool.ready.append(&mut ups);
                    vec![]
                }
                None => ups,
            }
        };
        self.abort_prepared(dir, unkept).await;
        Some(first.bound_to(path))
    }

    /// A prepared commit found its name taken: this directory is being overwritten, not
    /// filled, so its unused files go back and it is not prepared for until it sees enough
    /// small creates again.
    fn prepared_miss(&self, dir: &str, mode: u32) {
        let mut pools = self.prepared.0.lock().expect("prepared lock");
        if let Some(p) = pools.get_mut(&(dir.to_string(), mode)) {
            p.creates = 0;
            p.batch = PREPARED_BATCH_FIRST;
        }
    }

    /// Gives every unused prepared file back to the manager, which removes its objects now
    /// (best effort: one that is not given back expires, and the orphan scrub reclaims it).
    pub async fn release_prepared(&self) {
        let pools = std::mem::take(&mut *self.prepared.0.lock().expect("prepared lock"));
        for ((dir, _), pool) in pools {
            self.abort_prepared(&dir, pool.ready).await;
        }
    }

    /// How many prepared files this client holds (for tests and benchmarks).
    pub fn prepared_count(&self) -> usize {
        let pools = self.prepared.0.lock().expect("prepared lock");
        pools.values().map(|p| p.ready.len()).sum()
    }

    async fn abort_prepared(&self, dir: &str, ups: Vec<Upload>) {
        let aborts = ups.into_iter().map(|u| async move {
            // An unused prepared file is named by its directory's marker path.
            let marker = if dir.ends_with('/') {
                dir.to_string()
            } else {
                format!("{dir}/")
            };
            self.abort_upload(&u.bound_to(&marker)).await
        });
        futures_util::future::join_all(aborts).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pools_stay_bounded_and_keep_the_ones_holding_files() {
        let mut pools = HashMap::new();
        for d in 0..PREPARED_DIRS_MAX {
            pool_of(&mut pools, (format!("/d{d}"), 0o644))
                .unwrap()
                .creates = 1;
        }
        // Full of pools holding nothing: they make room for a new directory.
        assert!(pool_of(&mut pools, ("/new".into(), 0o644)).is_some());
        assert_eq!(pools.len(), 1);
        assert!(
            pool_of(&mut pools, ("/new".into(), 0o644)).is_some(),
            "known key"
        );
    }

    #[test]
    fn a_file_name_has_a_directory() {
        assert_eq!(dir_of("/a/b/c"), Some("/a/b"));
        assert_eq!(dir_of("/top"), Some("/"));
        assert_eq!(dir_of("/a/"), None);
        assert_eq!(dir_of("relative"), None);
    }
}
