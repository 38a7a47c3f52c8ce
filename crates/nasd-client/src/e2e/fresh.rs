//! Freshness a restored manager cannot undo (issue 21 §7): the newest version of each file
//! this client verified, so a manager restored from a backup together with its drives (each
//! old version intact, its signature good) is refused for every file the client saw newer.
//!
//! A version's bound record (nasd-e2e's `Binding`, signed by its writer) carries its
//! *generation* (1 for a file's first version, one more at each later one) and its *origin*
//! (the id of the file's first version, which every later version keeps). The client keeps,
//! per inode number, the origin and the highest generation it verified or wrote, and refuses a
//! version of the same origin with a lower generation, or one without a binding where it saw
//! one. A version of another origin at that inode is another file (the manager reuses the
//! numbers of deleted inodes) and starts over.
//!
//! The table lives in memory and, for a client whose identity has a cache file, in an
//! append-only file beside it (`e2e-USER.fresh`, 0600): one 32-byte entry `ino u64 ‖ origin [16]
//! ‖ generation u64` per change, the last for an inode winning, rewritten compactly when it
//! holds more than twice the live entries or ends in a torn one. Appends are not synced: a
//! host crash may forget the newest few entries (the file then says an older generation, never
//! a newer one).
//!
//! Limits: what the client never saw is not protected (a new client trusts what it is shown
//! first, as with the key log); at most [`FRESH_FILES_MAX`] files are remembered (the oldest
//! quarter is forgotten past it).

use nasd_e2e::record::Binding;
use nasd_e2e::FileId;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Most files whose newest version a client remembers.
pub const FRESH_FILES_MAX: usize = 1 << 20;
/// Bytes of one entry in the file.
const ENTRY_BYTES: usize = 8 + 16 + 8;
/// The file is rewritten compactly once it holds this many times the live entries (and more
/// than [`COMPACT_ENTRIES_MIN`]).
const COMPACT_FACTOR: usize = 2;
const COMPACT_ENTRIES_MIN: usize = 4096;

/// Why a version was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Stale {
    #[error(
        "the manager shows generation {shown} of inode {ino}, but this client has seen \
         generation {seen}: the manager (and its drives) were rolled back, e.g. restored from \
         a backup"
    )]
    RolledBack { ino: u64, shown: u64, seen: u64 },
    #[error(
        "the manager shows inode {ino} with a record from before bindings, but this client has \
         seen generation {seen} of it: the manager was rolled back"
    )]
    Unbound { ino: u64, seen: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Seen {
    origin: FileId,
    generation: u64,
    /// When it was noted (a counter): the oldest are forgotten first.
    at: u64,
}

/// The newest version seen of each file (module docs).
#[derive(Default)]
pub struct Freshness {
    path: Option<PathBuf>,
    loaded: bool,
    seen: HashMap<u64, Seen>,
    clock: u64,
    /// Entries in the file now (live or superseded).
    in_file: usize,
}

impl Freshness {
    /// Loads the table kept at `path` (none: memory only) on first use.
    pub fn load_once(&mut self, path: Option<PathBuf>) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        self.path = path;
        let Some(p) = self.path.clone() else { return };
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("{}: {e}; starting without it", p.display());
                }
                return;
            }
        };
        // A torn last entry (a crash mid-append) is ignored.
        for e in bytes.chunks_exact(ENTRY_BYTES) {
            let ino = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
            let origin = FileId(e[8..24].try_into().expect("16 bytes"));
            let generation = u64::from_le_bytes(e[24..].try_into().expect("8 bytes"));
            self.put(ino, origin, generation);
            self.in_file += 1;
        }
        if bytes.len() % ENTRY_BYTES != 0 {
            // Appends would land out of step with the entries: rewrite without the torn one.
            if let Err(e) = self.rewrite(&p) {
                tracing::warn!(
                    "{}: {e}; the newest versions seen stay in memory",
                    p.display()
                );
                self.path = None;
            }
        }
    }

    /// Whether `binding` (of the version shown for inode `ino`) is as new as what was seen.
    pub fn check(&self, ino: u64, binding: Option<&Binding>) -> Result<(), Stale> {
        let Some(seen) = self.seen.get(&ino) else {
            return Ok(());
        };
        match binding {
            None => Err(Stale::Unbound {
                ino,
                seen: seen.generation,
            }),
            Some(b) if b.origin == seen.origin && b.generation < seen.generation => {
                Err(Stale::RolledBack {
                    ino,
                    shown: b.generation,
                    seen: seen.generation,
                })
            }
            Some(_) => Ok(()),
        }
    }

    /// Records that the version `binding` of inode `ino` was verified or written; kept if it
    /// is newer than what was seen (or of another origin).
    pub fn note(&mut self, ino: u64, binding: &Binding) {
        if let Some(s) = self.seen.get(&ino) {
            if s.origin == binding.origin && s.generation >= binding.generation {
                return;
            }
        }
        self.put(ino, binding.origin, binding.generation);
        if let Err(e) = self.append(ino, binding) {
            if let Some(p) = &self.path {
                tracing::warn!(
                    "{}: {e}; the newest versions seen stay in memory",
                    p.display()
                );
            }
        }
    }

    fn put(&mut self, ino: u64, origin: FileId, generation: u64) {
        if self.seen.len() >= FRESH_FILES_MAX && !self.seen.contains_key(&ino) {
            self.forget_oldest();
        }
        self.clock += 1;
        let at = self.clock;
        self.seen.insert(
            ino,
            Seen {
                origin,
                generation,
                at,
            },
        );
    }

    /// Forgets the quarter of the table noted longest ago.
    fn forget_oldest(&mut self) {
        let mut ats: Vec<u64> = self.seen.values().map(|s| s.at).collect();
        let cut = ats.len() / 4;
        let (_, nth, _) = ats.select_nth_unstable(cut);
        let nth = *nth;
        self.seen.retain(|_, s| s.at > nth);
    }

    fn append(&mut self, ino: u64, b: &Binding) -> std::io::Result<()> {
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        if self.in_file >= COMPACT_ENTRIES_MIN && self.in_file > COMPACT_FACTOR * self.seen.len() {
            return self.rewrite(&path);
        }
        let mut f = open_private(&path, false)?;
        f.write_all(&entry(ino, b.origin, b.generation))?;
        self.in_file += 1;
        Ok(())
    }

    /// Writes the live entries under a new name and renames it over the file.
    fn rewrite(&mut self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension(format!("fresh.{}.tmp", std::process::id()));
        let mut out = Vec::with_capacity(self.seen.len() * ENTRY_BYTES);
        for (ino, s) in &self.seen {
            out.extend_from_slice(&entry(*ino, s.origin, s.generation));
        }
        let mut f = open_private(&tmp, true)?;
        f.write_all(&out)?;
        drop(f);
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        self.in_file = self.seen.len();
        Ok(())
    }
}

fn entry(ino: u64, origin: FileId, generation: u64) -> [u8; ENTRY_BYTES] {
    let mut e = [0u8; ENTRY_BYTES];
    e[..8].copy_from_slice(&ino.to_le_bytes());
    e[8..24].copy_from_slice(&origin.0);
    e[24..].copy_from_slice(&generation.to_le_bytes());
    e
}

/// The file opened for appending (or truncated, for a rewrite), private to its owner.
fn open_private(path: &Path, truncate: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(!truncate)
        .write(true)
        .truncate(truncate)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(origin: u8, generation: u64) -> Binding {
        Binding {
            generation,
            origin: FileId([origin; 16]),
            keys_digest: [0; 32],
        }
    }

    #[test]
    fn an_older_generation_of_a_file_seen_is_refused_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e2e-alice.fresh");
        let mut f = Freshness::default();
        f.load_once(Some(path.clone()));
        assert_eq!(f.check(7, Some(&b(1, 1))), Ok(()), "never seen");
        f.note(7, &b(1, 3));
        f.note(7, &b(1, 2)); // older: kept as 3
        assert_eq!(f.check(7, Some(&b(1, 3))), Ok(()));
        assert_eq!(f.check(7, Some(&b(1, 4))), Ok(()));
        assert_eq!(
            f.check(7, Some(&b(1, 2))),
            Err(Stale::RolledBack {
                ino: 7,
                shown: 2,
                seen: 3
            })
        );
        assert_eq!(f.check(7, None), Err(Stale::Unbound { ino: 7, seen: 3 }));
        assert_eq!(
            f.check(7, Some(&b(2, 1))),
            Ok(()),
            "another file at the inode"
        );
        let mut again = Freshness::default();
        again.load_once(Some(path.clone()));
        assert!(again.check(7, Some(&b(1, 2))).is_err());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A torn last entry is ignored.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&path, &bytes).unwrap();
        let mut torn = Freshness::default();
        torn.load_once(Some(path.clone()));
        assert!(torn.check(7, Some(&b(1, 2))).is_err());
        // ...and cut off, so what is appended after it reads back whole.
        torn.note(9, &b(3, 5));
        let mut after = Freshness::default();
        after.load_once(Some(path));
        assert!(after.check(7, Some(&b(1, 2))).is_err());
        assert!(
            after.check(9, Some(&b(3, 4))).is_err(),
            "the entry after the torn one"
        );
    }

    #[test]
    fn the_file_is_compacted_and_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.fresh");
        let mut f = Freshness::default();
        f.load_once(Some(path.clone()));
        for g in 1..=(3 * COMPACT_ENTRIES_MIN as u64) {
            f.note(g % 10, &b(1, g));
        }
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        assert!(
            len <= (COMPACT_ENTRIES_MIN + 1) * ENTRY_BYTES,
            "{len} bytes"
        );
        let mut again = Freshness::default();
        again.load_once(Some(path));
        let newest = 3 * COMPACT_ENTRIES_MIN as u64;
        assert!(again.check(newest % 10, Some(&b(1, newest - 1))).is_err());
    }

    #[test]
    fn past_the_bound_the_oldest_are_forgotten() {
        let mut f = Freshness::default();
        f.load_once(None);
        for ino in 0..FRESH_FILES_MAX as u64 + 1 {
            f.put(ino, FileId([1; 16]), 5);
        }
        assert!(f.seen.len() <= FRESH_FILES_MAX);
        assert!(!f.seen.contains_key(&0), "the first noted went first");
        assert!(f.seen.contains_key(&(FRESH_FILES_MAX as u64)));
    }
}
