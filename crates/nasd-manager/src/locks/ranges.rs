//! One file's record locks: byte ranges, each shared or exclusive and owned by one lock owner
//! of one session. Ranges of one owner never overlap: a new lock replaces whatever of the
//! owner's it covers (an upgrade, a downgrade, a split around it), an unlock removes what it
//! covers (splitting a range it falls inside of), and neighbouring ranges of one kind merge, as
//! POSIX `fcntl` says. Ranges of different owners conflict when they overlap and either is
//! exclusive. Pure data: the table in [`super`] adds leases, bounds and time.

use nasd_proto::manager::LockSpan;

/// Who holds a lock: a lock owner (the client's id for a process's descriptor table, or for
/// an open file description under `flock`) of a login session.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Owner {
    pub session: u64,
    pub id: u64,
}

/// One locked range, `start..=end`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Range {
    pub owner: Owner,
    pub start: u64,
    pub end: u64,
    pub exclusive: bool,
    /// The process that took it, as its client said.
    pub pid: u32,
}

impl Range {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }

    pub fn span(&self) -> LockSpan {
        LockSpan {
            start: self.start,
            end: self.end,
            exclusive: self.exclusive,
        }
    }
}

/// What an owner wants of a range: a lock of a kind (by a process), or none (an unlock).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Change {
    Lock { exclusive: bool, pid: u32 },
    Unlock,
}

/// Every lock range of one file.
#[derive(Default, Debug)]
pub struct FileLocks {
    ranges: Vec<Range>,
}

impl FileLocks {
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The first range of another owner that keeps `owner` from locking `start..=end`
    /// (`exclusive` or shared).
    pub fn conflict(&self, owner: Owner, start: u64, end: u64, exclusive: bool) -> Option<Range> {
        self.ranges
            .iter()
            .find(|r| r.owner != owner && (exclusive || r.exclusive) && r.overlaps(start, end))
            .copied()
    }

    /// How many ranges `owner` holds.
    pub fn count_of(&self, owner: Owner) -> usize {
        self.ranges.iter().filter(|r| r.owner == owner).count()
    }

    /// Whether any owner of `session` holds a range.
    pub fn has_session(&self, session: u64) -> bool {
        self.ranges.iter().any(|r| r.owner.session == session)
    }

    /// The sessions holding ranges here, each once.
    pub fn sessions(&self) -> Vec<u64> {
        let mut s: Vec<u64> = self.ranges.iter().map(|r| r.owner.session).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// `owner`'s ranges, in order.
    pub fn spans(&self, owner: Owner) -> Vec<LockSpan> {
        self.ranges
            .iter()
            .filter(|r| r.owner == owner)
            .map(Range::span)
            .collect()
    }

    /// `owner`'s ranges as they would be after `change` of `start..=end` (`start <= end`),
    /// in order; nothing changes yet ([`FileLocks::replace`] applies them), so a caller can
    /// check its bounds first.
    pub fn after(&self, owner: Owner, start: u64, end: u64, change: Change) -> Vec<Range> {
        debug_assert!(start <= end);
        let mut mine = Vec::new();
        for r in self.ranges.iter().filter(|r| r.owner == owner) {
            if !r.overlaps(start, end) {
                mine.push(*r);
                continue;
            }
            // What sticks out on either side stays; `start > 0` and `end < MAX` there.
            if r.start < start {
                mine.push(Range {
                    end: start - 1,
                    ..*r
                });
            }
            if r.end > end {
                mine.push(Range {
                    start: end + 1,
                    ..*r
                });
            }
        }
        if let Change::Lock { exclusive, pid } = change {
            mine.push(Range {
                owner,
                start,
                end,
                exclusive,
                pid,
            });
        }
        merged(mine)
    }

    /// Makes `mine` (from [`FileLocks::after`]) all that `owner` holds here.
    pub fn replace(&mut self, owner: Owner, mine: Vec<Range>) {
        debug_assert!(mine.iter().all(|r| r.owner == owner));
        self.ranges.retain(|r| r.owner != owner);
        self.ranges.extend(mine);
    }

    /// Drops every range of `session`; how many went.
    pub fn remove_session(&mut self, session: u64) -> usize {
        let before = self.ranges.len();
        self.ranges.retain(|r| r.owner.session != session);
        before - self.ranges.len()
    }
}

/// One owner's ranges, none overlapping, sorted and with touching ranges of one kind joined.
fn merged(mut mine: Vec<Range>) -> Vec<Range> {
    mine.sort_by_key(|r| r.start);
    let mut out: Vec<Range> = Vec::with_capacity(mine.len());
    for r in mine {
        match out.last_mut() {
            Some(l) if l.exclusive == r.exclusive && l.end.checked_add(1) == Some(r.start) => {
                l.end = r.end;
            }
            _ => out.push(r),
        }
    }
    debug_assert!(out.windows(2).all(|w| w[0].end < w[1].start));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Owner = Owner { session: 1, id: 10 };
    const A2: Owner = Owner { session: 1, id: 11 };
    const B: Owner = Owner { session: 2, id: 10 };
    const MAX: u64 = u64::MAX;

    fn lock(f: &mut FileLocks, o: Owner, start: u64, end: u64, exclusive: bool) -> bool {
        if f.conflict(o, start, end, exclusive).is_some() {
            return false;
        }
        let mine = f.after(o, start, end, Change::Lock { exclusive, pid: 1 });
        f.replace(o, mine);
        true
    }

    fn unlock(f: &mut FileLocks, o: Owner, start: u64, end: u64) {
        let mine = f.after(o, start, end, Change::Unlock);
        f.replace(o, mine);
    }

    fn spans(f: &FileLocks, o: Owner) -> Vec<(u64, u64, bool)> {
        f.spans(o)
            .into_iter()
            .map(|s| (s.start, s.end, s.exclusive))
            .collect()
    }

    #[test]
    fn an_unlock_in_the_middle_splits_and_a_lock_over_the_gap_merges() {
        let mut f = FileLocks::default();
        assert!(lock(&mut f, A, 0, 99, true));
        unlock(&mut f, A, 40, 59);
        assert_eq!(spans(&f, A), [(0, 39, true), (60, 99, true)]);
        assert!(lock(&mut f, A, 40, 59, true));
        assert_eq!(spans(&f, A), [(0, 99, true)]);
        // Touching ranges of one kind join; of another kind they stay apart.
        assert!(lock(&mut f, A, 100, 199, true));
        assert!(lock(&mut f, A, 200, 299, false));
        assert_eq!(spans(&f, A), [(0, 199, true), (200, 299, false)]);
        // An unlock of what is not held changes nothing; one of everything ends all.
        unlock(&mut f, A, 1000, 2000);
        assert_eq!(f.len(), 2);
        unlock(&mut f, A, 0, MAX);
        assert!(f.is_empty());
    }

    #[test]
    fn an_upgrade_or_downgrade_of_part_of_a_range_splits_it() {
        let mut f = FileLocks::default();
        assert!(lock(&mut f, A, 0, 99, false));
        assert!(lock(&mut f, A, 20, 29, true));
        assert_eq!(
            spans(&f, A),
            [(0, 19, false), (20, 29, true), (30, 99, false)]
        );
        // Downgrading it again leaves one shared range.
        assert!(lock(&mut f, A, 20, 29, false));
        assert_eq!(spans(&f, A), [(0, 99, false)]);
        // An upgrade while another owner shares part of it is refused, and changes nothing.
        assert!(lock(&mut f, B, 50, 59, false));
        assert!(!lock(&mut f, A, 0, 99, true));
        assert_eq!(spans(&f, A), [(0, 99, false)]);
        assert!(lock(&mut f, A, 0, 49, true));
        assert_eq!(spans(&f, A), [(0, 49, true), (50, 99, false)]);
    }

    #[test]
    fn owners_conflict_only_when_they_overlap_and_one_is_exclusive() {
        let mut f = FileLocks::default();
        assert!(lock(&mut f, A, 0, 9, true));
        // Non-overlapping ranges both succeed.
        assert!(lock(&mut f, B, 10, 19, true));
        assert_eq!(f.conflict(B, 9, 9, false).map(|r| r.owner), Some(A));
        assert!(!lock(&mut f, B, 5, 15, false));
        // Another owner of the same session is another owner (two processes of one mount).
        assert!(!lock(&mut f, A2, 0, 0, false));
        // Shared locks share.
        unlock(&mut f, A, 0, MAX);
        assert!(lock(&mut f, A, 0, 9, false));
        assert!(lock(&mut f, A2, 0, 9, false));
        assert!(!lock(&mut f, B, 0, 0, true));
        assert_eq!(f.sessions(), [1, 2]);
        assert_eq!(f.remove_session(1), 2);
        assert!(lock(&mut f, B, 0, 9, true));
        assert_eq!(spans(&f, B), [(0, 19, true)]);
    }

    #[test]
    fn ranges_reach_the_largest_offset_without_overflow() {
        let mut f = FileLocks::default();
        assert!(lock(&mut f, A, 0, MAX, true));
        unlock(&mut f, A, 0, 0);
        assert_eq!(spans(&f, A), [(1, MAX, true)]);
        unlock(&mut f, A, MAX, MAX);
        assert_eq!(spans(&f, A), [(1, MAX - 1, true)]);
        assert!(lock(&mut f, A, MAX, MAX, true));
        assert!(lock(&mut f, A, 0, 0, true));
        assert_eq!(spans(&f, A), [(0, MAX, true)]);
    }
}
