//! The client's side of AFS callbacks (seed 002 §3.2): a channel that long polls the manager
//! for breaks, and the attribute cache it keeps true.
//!
//! [`crate::files::Client::enable_callbacks`] starts the channel: a second manager connection
//! of the client's session that asks `WaitBreaks` again as soon as an answer comes. While the
//! channel polls, the manager registers a callback for every file this session stats or opens,
//! and tells the channel before any other client's change to it completes; the break drops
//! the file's cached attributes and capabilities here and is handed to the hooks (a mount
//! drops the kernel's cached pages and names) before it is acknowledged. So a stat answered
//! from the cache is as fresh as one from the manager.
//!
//! The cache is trusted only while the channel is live: a poll is waiting at the manager, or
//! one was answered less than [`TRUST_AFTER_ANSWER_MS`] ago (the manager stops waiting for a
//! channel that went quiet for its grace period). A channel that fails, or a reset break (`ino`
//! 0: the manager restarted, or breaks were lost), drops every cached stat; cached
//! capabilities stay, since drives judge them, so reads go on while the manager restarts.

use nasd_proto::manager::{CallbackBreak, FileStat, Xattr, CALLBACK_LEASE_MS};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How long after a poll's answer the cache is still trusted with no poll waiting, in ms;
/// well inside the manager's grace for a quiet channel (2 s).
pub const TRUST_AFTER_ANSWER_MS: u64 = 1_000;
/// A cached stat is used for at most this long after the request that fetched it was sent:
/// the callback lease, less a margin for clock skew and flight time.
pub const ATTR_CACHE_MS: u64 = CALLBACK_LEASE_MS - 2_000;
/// Most cached stats; the cache is cleared when full.
pub const ATTR_CACHE_ENTRIES_MAX: usize = 16_384;
/// Pause before a failed channel connects again, in ms.
pub const CHANNEL_RETRY_MS: u64 = 1_000;

/// What a cached stat answers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum AttrKind {
    /// `Stat`: the last name followed.
    Stat,
    /// `Lstat`: the last name itself.
    Lstat,
    /// `Getxattrs`: the stat (followed) with the extended attributes.
    Xattrs,
}

/// A break as a hook sees it.
pub type BreakHook = Arc<dyn Fn(&CallbackBreak) + Send + Sync>;

#[derive(Clone)]
pub(crate) struct Cached {
    pub stat: FileStat,
    pub xattrs: Option<Arc<Vec<Xattr>>>,
    pub fetched_ms: u64,
}

/// The callback state of one client.
#[derive(Default)]
pub struct CallbackState {
    attrs: Mutex<HashMap<(String, AttrKind), Cached>>,
    hooks: Mutex<Vec<BreakHook>>,
    enabled: AtomicBool,
    polling: AtomicBool,
    answered_ms: AtomicU64,
    /// Bumped by every break and reset: a fetch that began before a break it raced with is
    /// not cached.
    epoch: AtomicU64,
    /// Bumped by every break and reset only (not by this client's own changes): the stat a
    /// change of this client's answered with is cached only if none came meanwhile.
    heard: AtomicU64,
    /// Breaks applied, for tests and statistics.
    pub breaks: AtomicU64,
}

impl CallbackState {
    /// Whether cached attributes may be trusted now.
    pub fn live(&self, now_ms: u64) -> bool {
        self.enabled.load(Ordering::Acquire)
            && (self.polling.load(Ordering::Acquire)
                || now_ms < self.answered_ms.load(Ordering::Acquire) + TRUST_AFTER_ANSWER_MS)
    }

    pub(crate) fn set_enabled(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    pub(crate) fn polling(&self, on: bool, now_ms: u64) {
        if !on {
            self.answered_ms.store(now_ms, Ordering::Release);
        }
        self.polling.store(on, Ordering::Release);
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn add_hook(&self, h: BreakHook) {
        self.hooks.lock().expect("hooks lock").push(h);
    }

    pub(crate) fn get(&self, path: &str, kind: AttrKind, now_ms: u64) -> Option<Cached> {
        if !self.live(now_ms) {
            return None;
        }
        let m = self.attrs.lock().expect("attrs lock");
        m.get(&(path.to_string(), kind))
            .filter(|c| now_ms < c.fetched_ms + ATTR_CACHE_MS)
            .cloned()
    }

    /// Caches what a request sent at `sent_ms`, in callback epoch `epoch`, fetched.
    pub(crate) fn put(&self, path: &str, kind: AttrKind, c: Cached, epoch: u64) {
        self.put_if(path, kind, c, || self.epoch() == epoch);
    }

    /// Caches `c` if the channel is live and `unchanged` holds under the lock a break takes
    /// too (no break came since the fetch began).
    fn put_if(&self, path: &str, kind: AttrKind, c: Cached, unchanged: impl Fn() -> bool) {
        if !self.live(c.fetched_ms) {
            return;
        }
        let mut m = self.attrs.lock().expect("attrs lock");
        if !unchanged() {
            return;
        }
        if m.len() >= ATTR_CACHE_ENTRIES_MAX {
            m.clear();
        }
        m.insert((path.to_string(), kind), c);
    }

    /// Breaks and resets heard so far ([`CallbackState::put_own`]).
    pub(crate) fn heard(&self) -> u64 {
        self.heard.load(Ordering::Acquire)
    }

    /// Caches the stat `path` had after this client's own change, if no break or reset came
    /// since `heard` was read before the change was sent (the manager registered the
    /// callback with its answer, so only another client's later change can make it stale,
    /// and that one's break counts).
    pub(crate) fn put_own(&self, path: &str, c: Cached, heard: u64) {
        self.put_if(path, AttrKind::Lstat, c, || self.heard() == heard);
    }

    /// Forgets what is cached about `path` (this client changed it).
    pub(crate) fn forget(&self, path: &str) {
        let mut m = self.attrs.lock().expect("attrs lock");
        self.epoch.fetch_add(1, Ordering::AcqRel);
        for k in [AttrKind::Stat, AttrKind::Lstat, AttrKind::Xattrs] {
            m.remove(&(path.to_string(), k));
        }
    }

    /// Forgets everything cached (a name this client removed or renamed may have had
    /// descendants, and a failed channel may have missed breaks).
    pub(crate) fn clear(&self) {
        let mut m = self.attrs.lock().expect("attrs lock");
        self.epoch.fetch_add(1, Ordering::AcqRel);
        m.clear();
    }

    /// Applies a break to the attribute cache (what it drops in the capability cache is the
    /// caller's), then runs the hooks.
    pub(crate) fn apply(&self, b: &CallbackBreak) {
        {
            let mut m = self.attrs.lock().expect("attrs lock");
            self.epoch.fetch_add(1, Ordering::AcqRel);
            self.heard.fetch_add(1, Ordering::AcqRel);
            if b.ino == 0 {
                m.clear();
            } else {
                m.retain(|(path, _), c| c.stat.ino != b.ino && !names(path, &b.name));
            }
        }
        self.breaks.fetch_add(1, Ordering::Relaxed);
        let hooks = self.hooks.lock().expect("hooks lock").clone();
        for h in hooks {
            h(b);
        }
    }
}

/// Whether `path` goes through a name `name` (a renamed or removed name: whatever was cached
/// under it or below it). An empty `name` matches nothing.
pub(crate) fn names(path: &str, name: &str) -> bool {
    !name.is_empty() && path.split('/').any(|p| p == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nasd_proto::manager::FileKind;

    fn stat(ino: u64) -> FileStat {
        FileStat {
            ino,
            kind: FileKind::File,
            mode: 0o644,
            uid: 1,
            gid: 1,
            owner: "a".into(),
            group: "a".into(),
            size: 3,
            mtime_us: 0,
            ctime_us: 0,
            nlink: 1,
            atime_us: 0,
            rdev: 0,
        }
    }

    fn cached(ino: u64, at: u64) -> Cached {
        Cached {
            stat: stat(ino),
            xattrs: None,
            fetched_ms: at,
        }
    }

    #[test]
    fn trusted_only_while_the_channel_polls_and_within_the_lease() {
        let s = CallbackState::default();
        s.put("/a", AttrKind::Stat, cached(5, 1_000), s.epoch());
        assert!(s.get("/a", AttrKind::Stat, 1_000).is_none(), "not enabled");
        s.set_enabled();
        s.polling(true, 1_000);
        s.put("/a", AttrKind::Stat, cached(5, 1_000), s.epoch());
        assert!(s.get("/a", AttrKind::Stat, 1_500).is_some());
        assert!(s.get("/a", AttrKind::Lstat, 1_500).is_none());
        assert!(s.get("/a", AttrKind::Stat, 1_000 + ATTR_CACHE_MS).is_none());
        s.polling(false, 2_000);
        assert!(s.get("/a", AttrKind::Stat, 2_500).is_some());
        assert!(s
            .get("/a", AttrKind::Stat, 2_000 + TRUST_AFTER_ANSWER_MS)
            .is_none());
    }

    #[test]
    fn breaks_drop_the_file_and_the_names_through_it() {
        let s = CallbackState::default();
        s.set_enabled();
        s.polling(true, 0);
        for (p, ino) in [("/d/x", 5), ("/d/y", 6), ("/e/z", 7), ("/dd/w", 8)] {
            s.put(p, AttrKind::Lstat, cached(ino, 0), s.epoch());
        }
        let b = |ino, name: &str| CallbackBreak {
            seq: 1,
            ino,
            parent: 1,
            name: name.into(),
        };
        s.apply(&b(5, ""));
        assert!(s.get("/d/x", AttrKind::Lstat, 1).is_none());
        assert!(s.get("/d/y", AttrKind::Lstat, 1).is_some());
        // Directory `d` renamed: everything below it goes, `dd` stays.
        s.apply(&b(99, "d"));
        assert!(s.get("/d/y", AttrKind::Lstat, 1).is_none());
        assert!(s.get("/dd/w", AttrKind::Lstat, 1).is_some());
        s.apply(&b(0, ""));
        assert!(s.get("/e/z", AttrKind::Lstat, 1).is_none());
    }

    #[test]
    fn a_fetch_that_raced_a_break_is_not_cached() {
        let s = CallbackState::default();
        s.set_enabled();
        s.polling(true, 0);
        let e = s.epoch();
        s.apply(&CallbackBreak {
            seq: 1,
            ino: 5,
            parent: 0,
            name: String::new(),
        });
        s.put("/a", AttrKind::Stat, cached(5, 0), e);
        assert!(s.get("/a", AttrKind::Stat, 1).is_none());
    }

    /// A change's answer is kept through this client's own forgetting (which races no one),
    /// and refused when any break came between sending the change and its answer.
    #[test]
    fn an_own_changes_answer_is_cached_unless_a_break_came_meanwhile() {
        let s = CallbackState::default();
        s.set_enabled();
        s.polling(true, 0);
        let heard = s.heard();
        s.forget("/a");
        s.clear();
        s.put_own("/a", cached(5, 0), heard);
        assert_eq!(s.get("/a", AttrKind::Lstat, 1).unwrap().stat.ino, 5);
        assert!(
            s.get("/a", AttrKind::Stat, 1).is_none(),
            "a link's target may differ"
        );
        let heard = s.heard();
        s.apply(&CallbackBreak {
            seq: 1,
            ino: 9,
            parent: 0,
            name: String::new(),
        });
        s.put_own("/b", cached(6, 0), heard);
        assert!(s.get("/b", AttrKind::Lstat, 1).is_none());
    }
}
