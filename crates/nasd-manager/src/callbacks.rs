//! AFS callbacks (seed 002 §3.2): "a client's store operation does not complete until all
//! other clients holding a callback on the object being changed are notified of the change."
//!
//! A client session that wants callbacks keeps a channel: a connection of its own that long
//! polls with `WaitBreaks`. While it has one, the session's `Stat`, `Lstat`, `Getxattrs` and
//! `Open` of a file register a callback on its inode, for [`CALLBACK_LEASE_MS`] (an `Open`: as
//! long as its capabilities), as do changes that answer with the file's stat; an `Lstat` of a
//! name that does not exist registers one on its directory, whose break for a name made
//! there carries the name. A change to a file — a commit or returned write capability, an
//! attribute, a name removed, replaced or renamed, a directory's entries — queues a
//! [`CallbackBreak`] for every other session holding a callback on it and waits until each has
//! acknowledged it (its next poll carries the break's sequence number), its callback ran out,
//! or its channel went quiet (no poll waiting and none answered for [`CHANNEL_GRACE_MS`]: a
//! client trusts its caches only while it polls); only then does the change's reply go out.
//! A broken callback is gone: the holder registers anew when it next asks.
//!
//! Everything here is in memory. A manager that restarts has forgotten every callback, and a
//! channel it does not know answers its next poll with a reset break (`ino` 0: drop
//! everything), as does a queue that overflowed ([`QUEUED_BREAKS_MAX`]); a client whose
//! channel fails drops its caches itself.

use crate::service::{Caller, Manager};
use nasd_proto::manager::{
    CallbackBreak, FileKind, Grant, MgrReply, Xattrs, BREAKS_PER_REPLY_MAX, BREAK_WAIT_MS_MAX,
};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{watch, Notify};

pub use nasd_proto::manager::CALLBACK_LEASE_MS;

/// A channel whose last poll was answered this long ago, with no poll waiting, is quiet: no
/// change waits for it and it registers no callbacks (a client polls again at once).
pub const CHANNEL_GRACE_MS: u64 = 2_000;
/// Longest a change waits for one holder's acknowledgement, whatever its callback's lease.
pub const BREAK_ACK_WAIT_MS_MAX: u64 = 10_000;
/// Unacknowledged breaks kept per channel; past this the queue is replaced by one reset.
pub const QUEUED_BREAKS_MAX: usize = 4096;
/// A channel not heard from for this long is forgotten with its queue.
pub const CHANNEL_FORGET_MS: u64 = 120_000;
/// Most callbacks held in all; registering past it forgets every expired one first, then
/// refuses new ones (the holder just sees fewer cache hits).
pub const CALLBACKS_MAX: usize = 1 << 20;

/// One change to tell holders about: file `ino` changed, or with `name`, its name `name` in
/// directory `parent` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    pub ino: u64,
    pub parent: u64,
    pub name: String,
    /// Every session with a channel is told, holder or not: the name of a directory or a
    /// symbolic link was removed or replaced, and any path a client cached may run through it.
    pub everyone: bool,
}

impl Changed {
    pub fn file(ino: u64) -> Changed {
        Changed {
            ino,
            parent: 0,
            name: String::new(),
            everyone: false,
        }
    }
    pub fn name(ino: u64, parent: u64, name: &str) -> Changed {
        Changed {
            ino,
            parent,
            name: name.to_string(),
            everyone: false,
        }
    }
}

struct Channel {
    queue: VecDeque<CallbackBreak>,
    /// Wakes the waiting poll when a break is queued.
    wake: std::sync::Arc<Notify>,
    /// The highest sequence number acknowledged; changes wait on it.
    acked: watch::Sender<u64>,
    polls_waiting: u32,
    last_seen_ms: u64,
    /// Breaks were lost (the queue overflowed): the next poll answers a reset.
    overflowed: bool,
}

impl Channel {
    fn live(&self, now: u64) -> bool {
        self.polls_waiting > 0 || now < self.last_seen_ms + CHANNEL_GRACE_MS
    }
}

#[derive(Default)]
struct Inner {
    /// ino → session → callback expiry (ms).
    holders: HashMap<u64, HashMap<u64, u64>>,
    held: usize,
    channels: HashMap<u64, Channel>,
    /// Breaks queued since start: each one's sequence number is the count so far.
    next_seq: u64,
    /// Callbacks registered since start (metrics).
    registered: u64,
}

/// What [`Callbacks::counts`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallbackCounts {
    pub held: usize,
    pub channels: usize,
    pub registered: u64,
    pub breaks: u64,
}

/// The manager's callbacks and the channels that carry their breaks.
#[derive(Default)]
pub struct Callbacks {
    inner: Mutex<Inner>,
}

impl Callbacks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("callbacks lock")
    }

    /// Callbacks held and channels now, callbacks registered and breaks queued since start.
    pub fn counts(&self) -> CallbackCounts {
        let g = self.lock();
        CallbackCounts {
            held: g.held,
            channels: g.channels.len(),
            registered: g.registered,
            breaks: g.next_seq,
        }
    }

    /// Whether no session polls at all (changes then skip finding out what they touch).
    pub fn idle(&self) -> bool {
        self.lock().channels.is_empty()
    }

    /// Registers a callback of `session` on `ino` until `until_ms`, if the session has a
    /// channel. (A quiet channel still gets its breaks queued; its client trusts its caches
    /// only while it polls.)
    pub fn register(&self, session: u64, ino: u64, until_ms: u64, now: u64) {
        let mut g = self.lock();
        if !g.channels.contains_key(&session) {
            return;
        }
        if g.held >= CALLBACKS_MAX {
            g.holders.retain(|_, hs| {
                hs.retain(|_, &mut until| until > now);
                !hs.is_empty()
            });
            g.held = g.holders.values().map(HashMap::len).sum();
            if g.held >= CALLBACKS_MAX {
                return;
            }
        }
        g.registered += 1;
        let hs = g.holders.entry(ino).or_default();
        if hs.insert(session, until_ms).is_none() {
            g.held += 1;
        }
    }

    /// Queues a break of every callback on what `changes` names held by a session other than
    /// `by`, and waits until each holder has acknowledged, its callback ran out or its channel
    /// went quiet (at most [`BREAK_ACK_WAIT_MS_MAX`]). Returns how many holders were told.
    pub async fn break_and_wait(&self, changes: &[Changed], by: u64, now: u64) -> usize {
        // (the holder, its acknowledgements, the sequence number to wait for, how long)
        let mut waits: Vec<(u64, watch::Receiver<u64>, u64, u64)> = vec![];
        {
            let mut g = self.lock();
            let mut told: HashMap<u64, (u64, u64)> = HashMap::new();
            for ch in changes {
                let mut hs = g.holders.remove(&ch.ino).unwrap_or_default();
                g.held -= hs.len();
                if ch.everyone {
                    let until = now + CALLBACK_LEASE_MS;
                    for &session in g.channels.keys() {
                        hs.entry(session).or_insert(until);
                    }
                }
                if let Some(until) = hs.remove(&by) {
                    // The changer's own callback stays: its client saw the change itself.
                    g.held += 1;
                    g.holders.insert(ch.ino, HashMap::from([(by, until)]));
                }
                for (session, until) in hs {
                    if until <= now {
                        continue;
                    }
                    g.next_seq += 1;
                    let seq = g.next_seq;
                    let Some(c) = g.channels.get_mut(&session) else {
                        continue;
                    };
                    if c.queue.len() >= QUEUED_BREAKS_MAX {
                        c.queue.clear();
                        c.overflowed = true;
                    } else {
                        c.queue.push_back(CallbackBreak {
                            seq,
                            ino: ch.ino,
                            parent: ch.parent,
                            name: ch.name.clone(),
                        });
                    }
                    c.wake.notify_one();
                    let e = told.entry(session).or_insert((seq, until));
                    *e = (seq, e.1.max(until));
                }
            }
            for (session, (seq, until)) in told {
                let c = &g.channels[&session];
                if c.live(now) {
                    let ms = until.saturating_sub(now).min(BREAK_ACK_WAIT_MS_MAX);
                    waits.push((session, c.acked.subscribe(), seq, ms));
                }
            }
        }
        let n = waits.len();
        // Waits in slices of the grace period, to stop early for a holder whose channel went
        // quiet (it took the break and did not poll again: hung or gone).
        let each = waits
            .into_iter()
            .map(|(session, mut rx, seq, ms)| async move {
                let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
                loop {
                    let slice = Duration::from_millis(CHANNEL_GRACE_MS)
                        .min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                    match tokio::time::timeout(slice, rx.wait_for(|&a| a >= seq)).await {
                        Ok(_) => return,
                        Err(_) if tokio::time::Instant::now() >= deadline => return,
                        Err(_) if !self.channel_live(session) => return,
                        Err(_) => {}
                    }
                }
            });
        futures_util::future::join_all(each).await;
        n
    }

    /// One poll of `session`'s channel: acknowledges breaks up to `acked`, then waits up to
    /// `wait_ms` for newer ones. A session polling with `acked` > 0 that this manager has no
    /// channel for (it restarted, or forgot a quiet channel) gets a reset.
    pub async fn poll(
        &self,
        session: u64,
        acked: u64,
        wait_ms: u32,
        now: u64,
    ) -> Vec<CallbackBreak> {
        let wake = {
            let mut g = self.lock();
            g.channels
                .retain(|_, c| c.live(now) || now < c.last_seen_ms + CHANNEL_FORGET_MS);
            let known = g.channels.contains_key(&session);
            let c = g.channels.entry(session).or_insert_with(|| Channel {
                queue: VecDeque::new(),
                wake: Default::default(),
                acked: watch::channel(0).0,
                polls_waiting: 0,
                last_seen_ms: now,
                overflowed: false,
            });
            if !known && acked > 0 {
                c.overflowed = true;
            }
            c.last_seen_ms = now;
            while c.queue.front().is_some_and(|b| b.seq <= acked) {
                c.queue.pop_front();
            }
            c.acked.send_if_modified(|a| {
                let moved = acked > *a;
                *a = (*a).max(acked);
                moved
            });
            c.polls_waiting += 1;
            c.wake.clone()
        };
        let wait = Duration::from_millis(u64::from(wait_ms.min(BREAK_WAIT_MS_MAX)));
        let _ = tokio::time::timeout(wait, async {
            loop {
                let woken = wake.notified();
                if self.pending(session) {
                    return;
                }
                woken.await;
            }
        })
        .await;
        let mut g = self.lock();
        let seq = g.next_seq;
        let Some(c) = g.channels.get_mut(&session) else {
            return vec![];
        };
        c.polls_waiting -= 1;
        c.last_seen_ms = crate::now_ms();
        if c.overflowed {
            c.overflowed = false;
            c.queue.clear();
            // Acknowledging the reset acknowledges every break queued before it.
            return vec![CallbackBreak {
                seq,
                ino: 0,
                parent: 0,
                name: String::new(),
            }];
        }
        c.queue.iter().take(BREAKS_PER_REPLY_MAX).cloned().collect()
    }

    fn channel_live(&self, session: u64) -> bool {
        let now = crate::now_ms();
        self.lock()
            .channels
            .get(&session)
            .is_some_and(|c| c.live(now))
    }

    fn pending(&self, session: u64) -> bool {
        self.lock()
            .channels
            .get(&session)
            .is_some_and(|c| c.overflowed || !c.queue.is_empty())
    }
}

/// What a call changes, found before it runs (a name it removes or renames must be looked
/// up while it still exists), for [`crate::ops::Handle::touched`]. Lookups that fail find
/// nothing: the call fails too, or changes what nobody can have cached.
///
/// The file `path` names (symbolic links followed, as the call does).
pub(crate) fn file(m: &Manager, c: &Caller, path: &str) -> Vec<Changed> {
    m.resolve(c, path)
        .ok()
        .map(|i| Changed::file(i.ino))
        .into_iter()
        .collect()
}

/// The directory holding `path`'s last name, the name, and what it holds now.
pub(crate) fn entry(m: &Manager, c: &Caller, path: &str) -> Option<(u64, String, Option<u64>)> {
    let (dir, last) = m.parent(c, path, false).ok()?;
    let ino = m.st().lookup(dir.ino, last).ok().flatten();
    Some((dir.ino, last.to_string(), ino))
}

/// A name removed or replaced: the file under it and its directory; everyone, for the name of
/// a directory or a symbolic link (paths run through it).
pub(crate) fn gone(m: &Manager, c: &Caller, path: &str) -> Vec<Changed> {
    let mut out = vec![];
    if let Some((dir, name, ino)) = entry(m, c, path) {
        if let Some(ino) = ino {
            let kind = m.st().inode(ino).ok().flatten().map(|i| i.kind);
            out.push(Changed {
                everyone: kind != Some(FileKind::File),
                ..Changed::name(ino, dir, &name)
            });
        }
        out.push(Changed::file(dir));
    }
    out
}

/// A name made: its directory's entries change, and the break names it, so a client that
/// kept the name's absence (a mount's negative entry) drops it.
pub(crate) fn made(m: &Manager, c: &Caller, path: &str) -> Vec<Changed> {
    entry(m, c, path)
        .map(|(dir, name, _)| Changed::name(dir, dir, &name))
        .into_iter()
        .collect()
}

/// Registers a callback for `c` on the directory that lacks the last name of `path`: a
/// session told that a name does not exist is told when it comes to exist ([`made`]).
pub(crate) fn register_missing(m: &Manager, c: &Caller, path: &str) {
    if let Some((dir, _, None)) = entry(m, c, path) {
        let now = crate::now_ms();
        m.callbacks
            .register(c.session, dir, now + CALLBACK_LEASE_MS, now);
    }
}

/// Registers the callbacks a successful reply to `session` carries: a file's stat (for
/// [`CALLBACK_LEASE_MS`]) or its capabilities (for as long as they last).
pub(crate) fn register_reply(cb: &Callbacks, session: u64, r: &MgrReply, now: u64) {
    match r {
        MgrReply::Stat(st) | MgrReply::Xattrs(Xattrs { stat: st, .. }) => {
            cb.register(session, st.ino, now + CALLBACK_LEASE_MS, now)
        }
        MgrReply::Opened(Grant { stat, caps, .. }) => {
            let until = caps.iter().map(|g| g.args.expiry_ms).min().unwrap_or(0);
            cb.register(session, stat.ino, until.max(now + CALLBACK_LEASE_MS), now)
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const A: u64 = 1;
    const B: u64 = 2;

    #[tokio::test]
    async fn a_change_waits_for_the_holders_acknowledgement() {
        let cb = Arc::new(Callbacks::default());
        assert!(cb.poll(B, 0, 0, 1_000).await.is_empty());
        cb.register(B, 7, 60_000, 1_000);
        let breaker = {
            let cb = cb.clone();
            tokio::spawn(async move { cb.break_and_wait(&[Changed::file(7)], A, 1_000).await })
        };
        let got = cb.poll(B, 0, 5_000, 1_000).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].ino, 7);
        // Not acknowledged yet: the change still waits.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!breaker.is_finished());
        let cb2 = cb.clone();
        let seq = got[0].seq;
        tokio::spawn(async move { cb2.poll(B, seq, 1_000, 1_000).await });
        assert_eq!(breaker.await.unwrap(), 1);
        // The callback is broken: a second change tells nobody.
        assert_eq!(cb.break_and_wait(&[Changed::file(7)], A, 1_000).await, 0);
    }

    #[tokio::test]
    async fn the_changer_and_quiet_channels_are_not_waited_for() {
        let cb = Callbacks::default();
        cb.poll(A, 0, 0, 1_000).await;
        cb.register(A, 7, 60_000, 1_000);
        assert_eq!(cb.break_and_wait(&[Changed::file(7)], A, 1_000).await, 0);
        // B's channel went quiet: its break is queued but nobody waits.
        cb.poll(B, 0, 0, crate::now_ms()).await;
        cb.register(B, 8, u64::MAX, crate::now_ms());
        let later = crate::now_ms() + CHANNEL_GRACE_MS + 1;
        assert_eq!(cb.break_and_wait(&[Changed::file(8)], A, later).await, 0);
        let got = cb.poll(B, 0, 0, later).await;
        assert_eq!(got.len(), 1, "the queued break is still delivered");
    }

    #[tokio::test]
    async fn no_channel_no_callback_and_unknown_channels_reset() {
        let cb = Callbacks::default();
        cb.register(B, 7, 60_000, 1_000);
        assert_eq!(cb.break_and_wait(&[Changed::file(7)], A, 1_000).await, 0);
        let got = cb.poll(B, 99, 0, 1_000).await;
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].ino, 0,
            "a channel the manager does not know is reset"
        );
    }

    #[tokio::test]
    async fn a_directory_name_change_tells_every_channel() {
        let cb = Callbacks::default();
        cb.poll(A, 0, 0, crate::now_ms()).await;
        cb.poll(B, 0, 0, crate::now_ms()).await;
        let ch = Changed {
            everyone: true,
            ..Changed::name(9, 1, "d")
        };
        let cb = Arc::new(cb);
        let cb2 = cb.clone();
        let poller = tokio::spawn(async move {
            let got = cb2.poll(B, 0, 5_000, crate::now_ms()).await;
            cb2.poll(B, got[0].seq, 0, crate::now_ms()).await;
            got
        });
        assert_eq!(cb.break_and_wait(&[ch], A, crate::now_ms()).await, 1);
        let got = poller.await.unwrap();
        assert_eq!((got[0].ino, got[0].name.as_str()), (9, "d"));
    }

    #[tokio::test]
    async fn an_expired_callback_is_not_broken() {
        let cb = Callbacks::default();
        cb.poll(B, 0, 0, 1_000).await;
        cb.register(B, 7, 1_500, 1_000);
        assert_eq!(cb.break_and_wait(&[Changed::file(7)], A, 1_600).await, 0);
    }
}
