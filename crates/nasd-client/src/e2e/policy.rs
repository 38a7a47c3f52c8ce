//! A directory policy's further readers, signed by who set them and kept in the key log
//! (issue 21 §5). `nasd layout set DIR reader=USER` adds a principal every new file's key is
//! wrapped for; that is a change of who receives keys, so it is made like one:
//!
//! - **Setting.** [`Client::layout_set`] sends the spec; the manager answers the readers the
//!   directory's policy names now, and when the key log does not already name exactly those
//!   for it, the client signs a statement of them with its user's identity key and logs it
//!   (`PolicyLog`). An admin who adds themselves as a reader does so in a log every client
//!   reads and `nasd stat` shows.
//! - **Writing.** A writer wraps a new file's key for a policy reader only when the latest
//!   statement for the nearest directory at or above the file (by path) names it
//!   ([`super::keylog::KeyLogView::readers_over`]); other readers the manager names are left
//!   out, with a warning. So the manager's operator cannot add a reader, and cannot bring
//!   back one a later statement removed.
//! - **Renames.** Statements name directories by path: after a directory whose policy names
//!   readers is renamed, its files get none until its owner or an admin sets them again.

use super::e2e_err;
use crate::files::{now_ms, Client, FsError};
use nasd_proto::manager::{calls, PolicyReaders, Principal, POLICY_DIR_BYTES_MAX};

/// A policy reader statement's view of a file: who set the readers, where and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedReaders {
    pub dir: String,
    pub readers: Vec<Principal>,
    pub by: u32,
    pub at_ms: u64,
}

impl Client {
    /// Sets the layout spec new files under the directory `path` get (`""`: the parent's),
    /// and signs the policy's readers into the key log when they changed (module docs).
    pub async fn layout_set(&self, path: &str, spec: &str) -> Result<(), FsError> {
        let call = calls::LayoutSet {
            path: path.into(),
            spec: spec.into(),
        };
        let readers = self.call(path, call).await?.0;
        let dir = canonical_dir(path);
        let logged = self.key_log(false).await?.view.readers_over(&dir).cloned();
        let same = logged
            .as_ref()
            .map_or(readers.is_empty(), |p| p.readers == readers);
        if same {
            return Ok(());
        }
        if dir.len() > POLICY_DIR_BYTES_MAX {
            return Err(e2e_err(
                path,
                format!(
                    "further readers are logged for directories of paths up to \
                     {POLICY_DIR_BYTES_MAX} bytes; set them on a directory above"
                ),
            ));
        }
        let id = self.identity().await?;
        let mut statement = PolicyReaders {
            by: id.uid,
            at_ms: now_ms(),
            dir,
            readers,
            signature: [0; 64],
        };
        statement.signature = id.sign_statement(&statement.message());
        self.call(path, calls::PolicyLog { readers: statement })
            .await?;
        // The next writer here reads the log with the new statement.
        self.forget_user_keys();
        Ok(())
    }

    /// Of the further readers `readers` a grant's policy names for the new file `path`, those
    /// the key log's statement for its nearest directory names (module docs); the log is
    /// read again once when it names fewer (a statement made since it was last read).
    pub(crate) async fn logged_readers(
        &self,
        path: &str,
        readers: &[Principal],
    ) -> Result<Vec<Principal>, FsError> {
        if readers.is_empty() {
            return Ok(vec![]);
        }
        let dir = canonical_dir(parent(path));
        let mut signed = vec![];
        for fresh in [false, true] {
            let log = self.key_log(fresh).await?;
            signed = log
                .view
                .readers_over(&dir)
                .map(|p| p.readers.clone())
                .unwrap_or_default();
            if readers.iter().all(|r| signed.contains(r)) {
                return Ok(readers.to_vec());
            }
        }
        let (kept, left): (Vec<Principal>, Vec<Principal>) =
            readers.iter().partition(|r| signed.contains(r));
        tracing::warn!(
            "{path}: the directory policy's readers {left:?} are not in the key log as their \
             setter signed them: their wraps are left out (set them again with nasd layout set)"
        );
        Ok(kept)
    }

    /// The key log's statement of the policy readers over the file or directory `path`.
    pub async fn readers_logged_over(&self, path: &str) -> Result<Option<LoggedReaders>, FsError> {
        let log = self.key_log(false).await?;
        Ok(log
            .view
            .readers_over(&canonical_dir(path))
            .map(|p| LoggedReaders {
                dir: p.dir.clone(),
                readers: p.readers.clone(),
                by: p.by,
                at_ms: p.at_ms,
            }))
    }
}

/// `path` as statements name directories: absolute, no empty or `.` components, no
/// trailing `/` (`..` is left as it is: the manager refuses it).
fn canonical_dir(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

/// The directory `path` is in (`/` for the root's entries).
fn parent(path: &str) -> &str {
    let p = path.trim_end_matches('/');
    match p.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &p[..i],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_named_one_way() {
        assert_eq!(canonical_dir("/s3/"), "/s3");
        assert_eq!(canonical_dir("s3//b/./c"), "/s3/b/c");
        assert_eq!(canonical_dir("/"), "/");
        assert_eq!(canonical_dir(""), "/");
        assert_eq!(parent("/s3/b/key"), "/s3/b");
        assert_eq!(parent("/f"), "/");
        assert_eq!(parent("f"), "/");
        assert!(PolicyReaders::dir_ok(&canonical_dir("/a//b/")));
    }
}
