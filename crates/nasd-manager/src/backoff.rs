//! Backoff on failed logins, per source address and per user, so that guessing passwords or
//! keys online is slow while the real user can still log in.
//!
//! # Policy
//! Failures are counted per source ([`source_of`]: an IPv4 address, or an IPv6 /64, which one
//! host usually holds whole), per user name (whether or not the user exists, so the backoff
//! says nothing about which names are real), and per (user, source) pair. Each counter gets
//! [`LOGIN_FAILURES_FREE`] failures; after that, each further failure doubles the wait before
//! the next attempt, from [`LOGIN_DELAY_FIRST_MS`] up to [`LOGIN_DELAY_MAX_MS`]. One failure is
//! forgiven every [`LOGIN_FAILURE_DECAY_MS`], so a counter left alone drains and a steady
//! guesser gets about one try per decay period per counter.
//!
//! An attempt is refused, without checking the credential, when
//! - its source is backing off (one host guessing many users: password spraying), or
//! - its user is backing off *and* this source has failed for this user
//!   [`LOGIN_PAIR_FAILURES_FREE`] times or more lately (many hosts guessing one user).
//!
//! The second rule's exemption is what keeps an attacker from locking a user out: a source
//! that has not been failing for the user (the user's own machine) always gets to try, however
//! many failures other sources pile onto the user. A distributed guesser gets
//! [`LOGIN_PAIR_FAILURES_FREE`] guesses per fresh address before the user's backoff applies to
//! it too; an address that fails that often for the user waits like the attacker until its
//! pair counter drains. A user who shares a source address with a guesser (NAT) waits out that
//! source's backoff: at most [`LOGIN_DELAY_MAX_MS`] after the guesser stops.
//!
//! Every attempt counts as a failure when it starts and is taken back when it succeeds, so
//! many attempts sent at once are counted before any of them is answered. A successful login
//! also clears its (user, source) pair; it never clears the source or user counters (an
//! attacker with an account of their own could otherwise reset their source between guesses).
//! Refused attempts do not count (they cost the manager nothing, and counting them would let a
//! guesser extend the lockout of a NAT neighbour indefinitely). Token logins are not throttled:
//! tokens are 256-bit random and cannot be guessed.
//!
//! Memory is bounded: each table keeps at most [`LOGIN_BACKOFF_ENTRIES_MAX`] entries, user
//! names are kept as their BLAKE3 hash (32 bytes, whatever the name's length), and when a
//! table is full, drained entries go first, then the ones with the oldest failure.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;

/// Failures a counter allows before any wait.
pub const LOGIN_FAILURES_FREE: u32 = 5;
/// The wait after the first failure past the free ones; each further failure doubles it.
pub const LOGIN_DELAY_FIRST_MS: u64 = 1_000;
/// The longest wait between two attempts: what a NAT neighbour of a guesser, or a user who
/// mistyped many times, waits at most once the failures stop.
pub const LOGIN_DELAY_MAX_MS: u64 = 5 * 60_000;
/// One failure of a counter is forgiven per this many milliseconds without a new one.
pub const LOGIN_FAILURE_DECAY_MS: u64 = 10 * 60_000;
/// Failures of one source for one user before the user's backoff applies to that source.
pub const LOGIN_PAIR_FAILURES_FREE: u32 = 2;
/// Entries kept per table (sources, users, pairs): about 64 B each, 4 MiB per table at most.
pub const LOGIN_BACKOFF_ENTRIES_MAX: usize = 65_536;

// A wait never outlasts the decay of the failure that caused it, so a counter's wait is
// decided by its stored count alone.
const _: () = assert!(LOGIN_DELAY_MAX_MS <= LOGIN_FAILURE_DECAY_MS);
const _: () = assert!(LOGIN_DELAY_FIRST_MS <= LOGIN_DELAY_MAX_MS);
const _: () = assert!(LOGIN_PAIR_FAILURES_FREE <= LOGIN_FAILURES_FREE);

/// The key connection and login limits count a peer under: its IPv4 address, or the /64 prefix
/// of its IPv6 address (an IPv4-mapped IPv6 address counts as the IPv4 one).
pub fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(bits.into())
            }
        },
    }
}

/// One counter: failures so far and when the last one happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Failures {
    count: u32,
    last_ms: u64,
}

impl Failures {
    /// The count after forgiving one failure per [`LOGIN_FAILURE_DECAY_MS`] since the last.
    fn decayed(&self, now_ms: u64) -> u32 {
        let forgiven = now_ms.saturating_sub(self.last_ms) / LOGIN_FAILURE_DECAY_MS;
        self.count
            .saturating_sub(u32::try_from(forgiven).unwrap_or(u32::MAX))
    }

    /// Milliseconds until the next attempt may start (0: now).
    fn wait_ms(&self, now_ms: u64) -> u64 {
        let Some(past_free) = self.count.checked_sub(LOGIN_FAILURES_FREE) else {
            return 0;
        };
        let delay = LOGIN_DELAY_FIRST_MS
            .checked_shl(past_free)
            .filter(|d| *d <= LOGIN_DELAY_MAX_MS)
            .unwrap_or(LOGIN_DELAY_MAX_MS);
        (self.last_ms + delay).saturating_sub(now_ms)
    }
}

/// Counters by key, at most [`LOGIN_BACKOFF_ENTRIES_MAX`] of them.
struct Table<K> {
    entries: HashMap<K, Failures>,
}

impl<K: Eq + Hash + Clone> Table<K> {
    fn new() -> Self {
        Table {
            entries: HashMap::new(),
        }
    }

    fn get(&self, k: &K) -> Failures {
        self.entries.get(k).copied().unwrap_or_default()
    }

    fn fail(&mut self, k: &K, now_ms: u64) {
        if !self.entries.contains_key(k) && self.entries.len() >= LOGIN_BACKOFF_ENTRIES_MAX {
            self.make_room(now_ms);
        }
        let f = self.entries.entry(k.clone()).or_default();
        *f = Failures {
            count: f.decayed(now_ms).saturating_add(1),
            last_ms: now_ms,
        };
    }

    /// Takes back one failure counted when an attempt started.
    fn take_back(&mut self, k: &K) {
        if let Some(f) = self.entries.get_mut(k) {
            f.count = f.count.saturating_sub(1);
        }
    }

    fn clear(&mut self, k: &K) {
        self.entries.remove(k);
    }

    /// Drops drained entries and, if that is not enough, the quarter with the oldest failures,
    /// so a full table is cleaned once per quarter of its size, not at every insert.
    fn make_room(&mut self, now_ms: u64) {
        self.entries.retain(|_, f| f.decayed(now_ms) > 0);
        let target = LOGIN_BACKOFF_ENTRIES_MAX / 4 * 3;
        if self.entries.len() <= target {
            return;
        }
        let mut ages: Vec<u64> = self.entries.values().map(|f| f.last_ms).collect();
        let cut = ages.len() - target;
        let (_, oldest_kept, _) = ages.select_nth_unstable(cut);
        let oldest_kept = *oldest_kept;
        self.entries.retain(|_, f| f.last_ms >= oldest_kept);
    }
}

/// A user name as the tables key it.
type UserKey = [u8; 32];

fn user_key(user: &str) -> UserKey {
    *blake3::hash(user.as_bytes()).as_bytes()
}

/// A login attempt that was let through; hand it back with [`LoginBackoff::succeeded`] if the
/// credential was right.
#[derive(Debug)]
pub struct Attempt {
    user: UserKey,
    source: IpAddr,
}

/// Why an attempt was refused and when to come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The source is backing off (`false`: the user is).
    pub source: bool,
    pub retry_after_ms: u64,
}

/// The failure counters of every source, user and pair (see the module's policy).
pub struct LoginBackoff {
    sources: Table<IpAddr>,
    users: Table<UserKey>,
    pairs: Table<(UserKey, IpAddr)>,
}

impl Default for LoginBackoff {
    fn default() -> Self {
        LoginBackoff {
            sources: Table::new(),
            users: Table::new(),
            pairs: Table::new(),
        }
    }
}

impl LoginBackoff {
    /// Decides whether a password or key login as `user` from `peer` may be checked now; if
    /// so, counts it as a failure until [`LoginBackoff::succeeded`] says otherwise.
    pub fn begin(&mut self, user: &str, peer: IpAddr, now_ms: u64) -> Result<Attempt, Refused> {
        let a = Attempt {
            user: user_key(user),
            source: source_of(peer),
        };
        let source_wait = self.sources.get(&a.source).wait_ms(now_ms);
        if source_wait > 0 {
            return Err(Refused {
                source: true,
                retry_after_ms: source_wait,
            });
        }
        let pair = (a.user, a.source);
        let pair_clean = self.pairs.get(&pair).decayed(now_ms) < LOGIN_PAIR_FAILURES_FREE;
        let user_wait = self.users.get(&a.user).wait_ms(now_ms);
        if user_wait > 0 && !pair_clean {
            return Err(Refused {
                source: false,
                retry_after_ms: user_wait,
            });
        }
        self.sources.fail(&a.source, now_ms);
        self.users.fail(&a.user, now_ms);
        self.pairs.fail(&pair, now_ms);
        Ok(a)
    }

    /// The attempt's credential was right: its failure is taken back and its pair cleared.
    pub fn succeeded(&mut self, a: Attempt) {
        self.sources.take_back(&a.source);
        self.users.take_back(&a.user);
        self.pairs.clear(&(a.user, a.source));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Fails `n` attempts as `user` from `src`, each as soon as it is allowed; returns the time.
    fn fail_n(b: &mut LoginBackoff, user: &str, src: IpAddr, n: u32, mut now: u64) -> u64 {
        for _ in 0..n {
            match b.begin(user, src, now) {
                Ok(_) => {}
                Err(r) => {
                    now += r.retry_after_ms;
                    b.begin(user, src, now).expect("allowed after the wait");
                }
            }
        }
        now
    }

    #[test]
    fn the_free_failures_pass_then_waits_double_up_to_the_cap() {
        let mut b = LoginBackoff::default();
        let src = ip("10.0.0.1");
        let mut now = 1_000_000;
        for _ in 0..LOGIN_FAILURES_FREE {
            b.begin("alice", src, now).expect("free");
        }
        let mut waits = vec![];
        for _ in 0..12 {
            let r = b.begin("alice", src, now).unwrap_err();
            assert!(r.source);
            waits.push(r.retry_after_ms);
            // Refusals do not count: trying again at once is refused with the same wait.
            assert_eq!(b.begin("alice", src, now).unwrap_err(), r);
            assert!(b.begin("alice", src, now + r.retry_after_ms - 1).is_err());
            now += r.retry_after_ms;
            b.begin("alice", src, now)
                .expect("allowed once the wait is over");
        }
        assert_eq!(&waits[..4], &[1_000, 2_000, 4_000, 8_000]);
        assert_eq!(*waits.last().unwrap(), LOGIN_DELAY_MAX_MS);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn failures_drain_one_per_decay_period() {
        let mut b = LoginBackoff::default();
        let src = ip("10.0.0.1");
        let now = fail_n(&mut b, "alice", src, LOGIN_FAILURES_FREE + 3, 0);
        assert!(b.begin("alice", src, now).is_err());
        // Four decay periods later, four failures are forgiven: the count is back under the
        // free allowance, so the next try is at once.
        let later = now + 4 * LOGIN_FAILURE_DECAY_MS;
        b.begin("alice", src, later).expect("drained");
    }

    #[test]
    fn one_source_spraying_many_users_is_slowed_down() {
        let mut b = LoginBackoff::default();
        let src = ip("10.0.0.9");
        for k in 0..LOGIN_FAILURES_FREE {
            b.begin(&format!("user{k}"), src, 0).unwrap();
        }
        let r = b.begin("someone-new", src, 0).unwrap_err();
        assert!(r.source);
    }

    #[test]
    fn the_real_user_logs_in_from_a_clean_source_while_guessers_are_held_back() {
        let mut b = LoginBackoff::default();
        // Many addresses guess alice's password, each a little.
        let mut now = 0;
        for k in 0..40u32 {
            let src = ip(&format!("10.1.{}.{}", k / 250, k % 250));
            now = fail_n(&mut b, "alice", src, LOGIN_PAIR_FAILURES_FREE, now);
        }
        // Each guessing address is now held back by alice's backoff ...
        let guesser = ip("10.1.0.3");
        let r = b.begin("alice", guesser, now).unwrap_err();
        assert!(!r.source, "the user's backoff, not the source's");
        // ... but alice, from her own machine, gets through at once, again and again.
        for _ in 0..3 {
            let a = b
                .begin("alice", ip("192.168.1.20"), now)
                .expect("clean source");
            b.succeeded(a);
        }
        // An address that fails for alice a couple of times waits like the guessers ...
        let typo = ip("192.168.1.21");
        now = fail_n(&mut b, "alice", typo, LOGIN_PAIR_FAILURES_FREE, now);
        assert!(b.begin("alice", typo, now).is_err());
        // ... until its pair counter drains, however long the guessing goes on.
        let drained = now + u64::from(LOGIN_PAIR_FAILURES_FREE) * LOGIN_FAILURE_DECAY_MS;
        let mut t = now;
        while t < drained {
            t += LOGIN_DELAY_MAX_MS;
            let _ = b.begin("alice", guesser, t); // the attack goes on
        }
        b.begin("alice", typo, drained + 1).expect("drained pair");
    }

    #[test]
    fn a_success_takes_back_its_own_failure_only() {
        let mut b = LoginBackoff::default();
        let src = ip("10.0.0.1");
        // Guesses as alice in flight, and the attacker's own valid login beside them.
        let own = b.begin("mallory", src, 0).unwrap();
        for _ in 0..LOGIN_FAILURES_FREE - 1 {
            b.begin("alice", src, 0).unwrap();
        }
        b.succeeded(own);
        // The guesses still count: one more, and the source backs off.
        b.begin("alice", src, 0).unwrap();
        assert!(b.begin("alice", src, 0).unwrap_err().source);
    }

    #[test]
    fn attempts_sent_at_once_are_counted_before_any_is_answered() {
        let mut b = LoginBackoff::default();
        let src = ip("10.0.0.1");
        let started = (0..50).filter(|_| b.begin("alice", src, 7).is_ok()).count();
        assert_eq!(started, LOGIN_FAILURES_FREE as usize);
    }

    #[test]
    fn sources_group_ipv6_by_64_and_ipv4_mapped_as_ipv4() {
        assert_eq!(source_of(ip("10.0.0.1")), ip("10.0.0.1"));
        assert_eq!(source_of(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            source_of(ip("2001:db8:1:2:ffff::9")),
            source_of(ip("2001:db8:1:2::1"))
        );
        assert_ne!(
            source_of(ip("2001:db8:1:3::1")),
            source_of(ip("2001:db8:1:2::1"))
        );
        assert_eq!(source_of(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
    }

    #[test]
    fn a_full_table_keeps_its_size_and_the_newest_failures() {
        let mut t: Table<u32> = Table::new();
        for k in 0..LOGIN_BACKOFF_ENTRIES_MAX as u32 {
            t.fail(&k, u64::from(k));
        }
        // Nothing has drained yet (all within one decay period): the oldest quarter goes.
        t.fail(&u32::MAX, LOGIN_BACKOFF_ENTRIES_MAX as u64);
        assert!(t.entries.len() <= LOGIN_BACKOFF_ENTRIES_MAX);
        assert!(t.entries.contains_key(&u32::MAX));
        assert!(t
            .entries
            .contains_key(&(LOGIN_BACKOFF_ENTRIES_MAX as u32 - 1)));
        assert!(!t.entries.contains_key(&0));
    }
}
