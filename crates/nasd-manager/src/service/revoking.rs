//! Revocations in flight, so a grant is not minted in the middle of one. A revocation stores
//! the file's next access control version first and then sets it on each component's drive
//! (`Manager::revoke_and_mirror`); a capability minted between the two carries a version
//! some drives do not have yet, which they refuse (`BadDigest`), and the client's renewal in
//! that window got another such capability. An `Open` of a file under revocation now waits
//! for it to end (at most [`REVOCATION_WAIT_MS_MAX`]), so a client refused for an old
//! capability renews onto one every drive takes.
//!
//! Kept in this manager's memory: the drives' half of a revocation runs in the manager that
//! began it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedRwLockWriteGuard, RwLock};

/// Longest an `Open` waits for a revocation of its file to end; past it the grant is minted
/// as before (a drive that has not taken the new version by then is slow or down, and the
/// revocation marks it stale or fails).
pub const REVOCATION_WAIT_MS_MAX: u64 = 5_000;

/// One file's revocations: a lock each holds for writing while it runs (so two of one file
/// run one after the other), and how many hold or wait for it.
type FileRevocations = (Arc<RwLock<()>>, usize);

/// Files being revoked, by inode.
#[derive(Default)]
pub struct Revoking {
    files: Mutex<HashMap<u64, FileRevocations>>,
}

/// A revocation of one file in flight; it ends when this drops.
pub struct InFlight<'a> {
    owner: &'a Revoking,
    ino: u64,
    _held: OwnedRwLockWriteGuard<()>,
}

impl Revoking {
    /// Marks `ino` as being revoked until the returned value drops (after any revocation of
    /// it already running).
    pub async fn begin(&self, ino: u64) -> InFlight<'_> {
        let lock = {
            let mut files = self.files.lock().expect("revoking lock");
            let e = files
                .entry(ino)
                .or_insert_with(|| (Arc::new(RwLock::new(())), 0));
            e.1 += 1;
            e.0.clone()
        };
        InFlight {
            owner: self,
            ino,
            _held: lock.write_owned().await,
        }
    }

    /// Waits until no revocation of `ino` runs, at most [`REVOCATION_WAIT_MS_MAX`]; whether
    /// one was running.
    pub async fn settled(&self, ino: u64) -> bool {
        let lock = match self.files.lock().expect("revoking lock").get(&ino) {
            Some((l, _)) => l.clone(),
            None => return false,
        };
        let wait = std::time::Duration::from_millis(REVOCATION_WAIT_MS_MAX);
        if tokio::time::timeout(wait, lock.read()).await.is_err() {
            tracing::warn!(
                ino,
                "a revocation runs past {REVOCATION_WAIT_MS_MAX} ms: minting anyway"
            );
        }
        true
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut files = self.owner.files.lock().expect("revoking lock");
        if let Some(e) = files.get_mut(&self.ino) {
            e.1 -= 1;
            if e.1 == 0 {
                files.remove(&self.ino);
            }
        }
        // The write guard goes after this body: waiters holding the lock wake then.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_waiter_waits_for_every_revocation_of_its_file_and_no_other() {
        let r = Arc::new(Revoking::default());
        assert!(!r.settled(7).await, "nothing runs");
        let first = r.begin(7).await;
        // A second revocation of 7 waits for the first; one of 8 does not.
        let second = {
            let r = r.clone();
            tokio::spawn(async move {
                let _g = r.begin(7).await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            })
        };
        drop(r.begin(8).await);
        let waiter = {
            let r = r.clone();
            tokio::spawn(async move { r.settled(7).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "the waiter waits while 7 is revoked");
        drop(first);
        assert!(waiter.await.unwrap());
        second.await.unwrap();
        assert!(!r.settled(7).await, "both ended");
        assert!(r.files.lock().unwrap().is_empty());
    }
}
