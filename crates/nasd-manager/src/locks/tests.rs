use super::*;

const LEASE: u64 = 1_000;
/// A time past the grace period of a table made at 0.
const T: u64 = 10_000;

fn want(session: u64, owner: u64, ino: u64, start: u64, end: u64, exclusive: bool) -> Want {
    Want {
        ino,
        owner: Owner { session, id: owner },
        start,
        end,
        exclusive,
        pid: 100 + owner as u32,
    }
}

fn granted(a: &LockAnswer) -> bool {
    a.outcome == LockOutcome::Granted
}

#[test]
fn a_conflict_names_its_holder_and_the_pid_only_matters_within_a_session() {
    let l = Locks::new(7, 0, LEASE);
    assert!(granted(
        &l.lock(&want(1, 1, 9, 0, 99, true), false, T).unwrap()
    ));
    let other = l.lock(&want(2, 1, 9, 50, 50, false), false, T).unwrap();
    assert_eq!(other.outcome, LockOutcome::Conflict);
    let h = other.holder.unwrap();
    assert_eq!(
        (h.start, h.end, h.exclusive, h.pid, h.mine),
        (0, 99, true, 101, false)
    );
    // A test by another owner of the holder's session sees it as its own session's.
    let t = l.test(&want(1, 2, 9, 0, 0, false), T).unwrap();
    assert_eq!(t.outcome, LockOutcome::Conflict);
    assert!(t.holder.unwrap().mine);
    // Nothing was taken by either refusal or the test.
    assert_eq!(l.held(), 1);
    assert!(other.held.is_empty());
    assert_eq!(other.lease.boot, 7);
}

#[test]
fn answers_carry_the_owners_ranges_after_the_change() {
    let l = Locks::new(7, 0, LEASE);
    let a = l.lock(&want(1, 1, 9, 0, 99, false), false, T).unwrap();
    assert_eq!(a.held.len(), 1);
    let a = l.unlock(&want(1, 1, 9, 10, 19, false), T).unwrap();
    let spans: Vec<(u64, u64)> = a.held.iter().map(|s| (s.start, s.end)).collect();
    assert_eq!(spans, [(0, 9), (20, 99)]);
    assert_eq!(l.held(), 2);
    // An unlock of everything leaves the file with no entry at all.
    let a = l.unlock(&want(1, 1, 9, 0, u64::MAX, false), T).unwrap();
    assert!(a.held.is_empty());
    assert_eq!(l.held(), 0);
    assert!(l.table().files.is_empty());
    assert!(matches!(
        l.lock(&want(1, 1, 9, 5, 4, false), false, T),
        Err(LockError::BadRange { start: 5, end: 4 })
    ));
}

#[test]
fn a_session_that_stops_renewing_loses_its_locks_after_the_lease() {
    let l = Locks::new(7, 0, LEASE);
    let a = l.lock(&want(1, 1, 9, 0, 0, true), false, T).unwrap();
    let id = a.lease.lease_id;
    assert_ne!(id, 0);
    // Renewed in time: held on, same lease.
    assert_eq!(l.renew(1, T + LEASE - 1).lease_id, id);
    let late = T + LEASE - 1 + LEASE;
    assert_eq!(
        l.lock(&want(2, 1, 9, 0, 0, true), false, late - 1)
            .unwrap()
            .outcome,
        LockOutcome::Conflict
    );
    // Run out: another session takes the range, and the late renewal learns it lost its
    // locks (no lease), rather than reviving them.
    assert!(granted(
        &l.lock(&want(2, 1, 9, 0, 0, true), false, late).unwrap()
    ));
    assert_eq!(l.renew(1, late + 1).lease_id, 0);
    assert_eq!(l.held(), 1);
    // A new lock of the old session starts a new lease, with another id.
    let again = l
        .lock(&want(1, 1, 10, 0, 0, true), false, late + 2)
        .unwrap();
    assert!(granted(&again));
    assert_ne!(again.lease.lease_id, id);
}

#[test]
fn after_a_restart_only_reclaims_are_granted_until_the_grace_ends() {
    let l = Locks::new(8, 1_000, LEASE);
    let w = want(1, 1, 9, 0, 9, true);
    let in_grace = 1_000 + LEASE - 1;
    assert_eq!(
        l.lock(&w, false, 1_000).unwrap().outcome,
        LockOutcome::Grace
    );
    assert_eq!(l.test(&w, 1_000).unwrap().outcome, LockOutcome::Grace);
    let r = l.lock(&w, true, 1_001).unwrap();
    assert!(granted(&r) && r.lease.grace);
    // Unlocks work in the grace period too.
    assert!(granted(
        &l.unlock(&want(1, 1, 9, 5, 9, false), in_grace).unwrap()
    ));
    // After it: a reclaim is refused (the lock was lost), a lock is served as usual.
    let end = 1_000 + LEASE;
    let late = l.lock(&want(2, 1, 9, 0, 0, true), true, end).unwrap();
    assert_eq!(late.outcome, LockOutcome::NoGrace);
    assert!(!late.lease.grace);
    // The reclaimed range was renewed in the grace period by its lock call.
    assert_eq!(
        l.lock(&want(2, 1, 9, 0, 0, true), false, end)
            .unwrap()
            .outcome,
        LockOutcome::Conflict
    );
}

#[test]
fn dropping_a_session_releases_all_its_owners_locks() {
    let l = Locks::new(7, 0, LEASE);
    for (owner, ino) in [(1, 9), (2, 9), (1, 10)] {
        assert!(granted(
            &l.lock(&want(1, owner, ino, 0, 0, false), false, T).unwrap()
        ));
    }
    assert!(granted(
        &l.lock(&want(2, 1, 9, 0, 0, false), false, T).unwrap()
    ));
    l.drop_session(1);
    assert_eq!(l.held(), 1);
    assert_eq!(l.renew(1, T).lease_id, 0);
    assert!(granted(
        &l.lock(&want(3, 1, 10, 0, 0, true), false, T).unwrap()
    ));
}

/// Fills the table: `files` files of [`LOCK_RANGES_PER_FILE_MAX`] one-byte shared ranges,
/// one session per file, one owner per range.
fn fill(l: &Locks, files: u64, now: u64) {
    for f in 0..files {
        for i in 0..LOCK_RANGES_PER_FILE_MAX as u64 {
            let w = want(f + 1, i, f, 2 * i, 2 * i, false);
            assert!(
                granted(&l.lock(&w, false, now).unwrap()),
                "file {f} range {i}"
            );
        }
    }
}

#[test]
fn the_bounds_refuse_rather_than_evict() {
    let l = Locks::new(7, 0, LEASE);
    let files = (LOCK_RANGES_MAX / LOCK_RANGES_PER_FILE_MAX) as u64;
    fill(&l, files, T);
    assert_eq!(l.held(), LOCK_RANGES_MAX);
    // A full file refuses one more range, also of an owner already there (a split).
    assert_eq!(
        l.lock(&want(99, 1, 0, 1, 1, false), false, T),
        Err(LockError::FileFull)
    );
    assert_eq!(
        l.lock(&want(1, 0, 0, 4, 4, false), false, T),
        Err(LockError::FileFull)
    );
    // A full table refuses a lock on any other file while every lease is live.
    let w = want(99, 1, 1_000, 0, 0, true);
    assert_eq!(l.lock(&w, false, T + 1), Err(LockError::TableFull));
    assert_eq!(l.held(), LOCK_RANGES_MAX);
    // Renewed sessions keep theirs; the one that stopped renewing makes room.
    for s in 2..=files {
        assert_ne!(l.renew(s, T + LEASE - 1).lease_id, 0);
    }
    assert!(granted(&l.lock(&w, false, T + LEASE).unwrap()));
    assert_eq!(l.held(), LOCK_RANGES_MAX - LOCK_RANGES_PER_FILE_MAX + 1);
}

#[test]
fn the_session_bound_refuses_rather_than_evicts() {
    let l = Locks::new(7, 0, LEASE);
    for s in 0..LOCK_SESSIONS_MAX as u64 {
        let w = want(s, 1, s, 0, 0, false);
        assert!(granted(&l.lock(&w, false, T).unwrap()));
    }
    // On a file none of them holds, so only the sweep of run-out leases makes room.
    let w = want(u64::MAX, 1, u64::MAX, 0, 0, false);
    assert_eq!(l.lock(&w, false, T), Err(LockError::TooManySessions));
    assert!(granted(&l.lock(&w, false, T + LEASE).unwrap()));
    assert_eq!(l.held(), 1);
}

#[test]
fn the_grace_period_starts_over_when_the_manager_begins_to_serve() {
    let l = Locks::new(7, 0, LEASE);
    let w = want(1, 1, 9, 0, 0, true);
    l.begin_grace(5_000);
    assert_eq!(
        l.lock(&w, false, 5_000 + LEASE - 1).unwrap().outcome,
        LockOutcome::Grace
    );
    assert!(granted(&l.lock(&w, false, 5_000 + LEASE).unwrap()));
    // It never moves back.
    l.begin_grace(0);
    assert!(!l.renew(1, 5_000 + LEASE).grace);
}
