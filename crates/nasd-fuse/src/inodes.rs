//! The kernel's inode numbers and the paths they stand for. The manager's numbers are used
//! unchanged, except that the mount's root is FUSE's root (1) and, when a subdirectory is
//! mounted, the manager's own root moves out of the way. A file with several names (hard
//! links) answers to the last one seen that it still has: the mount keeps up to
//! [`NAMES_PER_INODE_MAX`] of them, so an unlink of one leaves the others; renames move every
//! path under the old name.
//!
//! It also keeps the names the kernel was told do not exist (negative entries), by
//! directory, so that a callback break of the directory drops every one of them: the
//! manager breaks a directory's callback once, for the first name made there.

use std::collections::HashMap;
use std::sync::Mutex;

/// FUSE's number for the mount's root.
pub const ROOT: u64 = 1;
/// Where the manager's root (inode 1) shows when a subdirectory is mounted.
const MANAGER_ROOT_ELSEWHERE: u64 = u64::MAX - 1;
/// Names kept per inode (hard links); past it the oldest seen is forgotten.
pub const NAMES_PER_INODE_MAX: usize = 8;
/// Negative entries kept in all; past it those older than the kernel keeps them go, and if
/// none has, a lookup that finds nothing is not kept as absent.
pub const ABSENT_NAMES_MAX: usize = 16_384;

pub struct Inodes {
    /// The manager's inode number of the mount's root.
    root_ino: u64,
    /// Each inode's names, the last seen last.
    paths: Mutex<HashMap<u64, Vec<String>>>,
    /// Names told absent, by the kernel's number of their directory, with when (ms).
    absent: Mutex<HashMap<u64, Vec<(String, u64)>>>,
}

impl Inodes {
    pub fn new(root: &str, root_ino: u64) -> Inodes {
        let paths = Mutex::new(HashMap::from([(ROOT, vec![root.to_string()])]));
        Inodes {
            root_ino,
            paths,
            absent: Mutex::default(),
        }
    }

    /// Notes that the kernel is told `name` does not exist in directory `dir` (kernel
    /// numbers) at `now_ms`, for `keep_ms`; false when the table is full of live entries
    /// (the lookup then answers an error, which the kernel does not keep).
    pub fn note_absent(&self, dir: u64, name: &str, now_ms: u64, keep_ms: u64) -> bool {
        let mut a = self.absent.lock().expect("absent lock");
        if a.values().map(Vec::len).sum::<usize>() >= ABSENT_NAMES_MAX {
            a.retain(|_, names| {
                names.retain(|&(_, at)| at + keep_ms > now_ms);
                !names.is_empty()
            });
            if a.values().map(Vec::len).sum::<usize>() >= ABSENT_NAMES_MAX {
                return false;
            }
        }
        a.entry(dir).or_default().push((name.to_string(), now_ms));
        true
    }

    /// The names told absent in directory `dir` (kernel number), forgotten here: the
    /// caller drops them from the kernel. Every directory's, for `None`.
    pub fn take_absent(&self, dir: Option<u64>) -> Vec<(u64, String)> {
        let mut a = self.absent.lock().expect("absent lock");
        let taken: Vec<(u64, Vec<(String, u64)>)> = match dir {
            Some(d) => a.remove(&d).map(|n| vec![(d, n)]).unwrap_or_default(),
            None => a.drain().collect(),
        };
        taken
            .into_iter()
            .flat_map(|(d, names)| names.into_iter().map(move |(n, _)| (d, n)))
            .collect()
    }

    /// The kernel's number for the manager's inode `ino`.
    pub fn fuse_ino(&self, ino: u64) -> u64 {
        match ino {
            i if i == self.root_ino => ROOT,
            ROOT => MANAGER_ROOT_ELSEWHERE,
            i => i,
        }
    }

    /// The manager's inode number of the kernel's inode `ino` ([`Inodes::fuse_ino`] undone).
    pub fn manager_ino(&self, ino: u64) -> u64 {
        match ino {
            ROOT => self.root_ino,
            MANAGER_ROOT_ELSEWHERE => ROOT,
            i => i,
        }
    }

    /// The path the kernel's inode `ino` was last seen under (of those it still has).
    pub fn path(&self, ino: u64) -> Option<String> {
        let p = self.paths.lock().expect("inodes lock");
        p.get(&ino).and_then(|v| v.last().cloned())
    }

    /// Every kernel inode number the mount has shown.
    pub fn known(&self) -> Vec<u64> {
        self.paths
            .lock()
            .expect("inodes lock")
            .keys()
            .copied()
            .collect()
    }

    /// Records that the kernel's inode `ino` is at `path`. A directory seen under a new name
    /// was renamed elsewhere (another client): what the kernel still caches under it moves
    /// with it, as in [`Inodes::renamed`]. A file keeps its other names (hard links).
    pub fn saw(&self, ino: u64, path: &str) {
        let mut p = self.paths.lock().expect("inodes lock");
        let names = p.entry(ino).or_default();
        if names.last().map(String::as_str) == Some(path) {
            return;
        }
        let last = names.last().cloned();
        names.retain(|n| n != path);
        names.push(path.to_string());
        if names.len() > NAMES_PER_INODE_MAX {
            names.remove(0);
        }
        if let Some(old) = last {
            move_under(&mut p, &old, path);
        }
    }

    /// `path` was unlinked: an inode that has other names answers to them from now on (its
    /// only name stays: an open file may still be reached through it).
    pub fn unlinked(&self, path: &str) {
        let mut p = self.paths.lock().expect("inodes lock");
        for names in p.values_mut() {
            if names.len() > 1 {
                names.retain(|n| n != path);
            }
        }
    }

    /// `from` was renamed to `to`: it and everything under it move; a file `to` named
    /// before loses that name.
    pub fn renamed(&self, from: &str, to: &str) {
        let mut p = self.paths.lock().expect("inodes lock");
        for names in p.values_mut() {
            if names.len() > 1 && !names.iter().any(|n| n == from) {
                names.retain(|n| n != to);
            }
            for n in names.iter_mut() {
                if n == from {
                    *n = to.to_string();
                }
            }
        }
        move_under(&mut p, from, to);
    }
}

impl Inodes {
    /// The names `a` and `b` swapped what they name (`RENAME_EXCHANGE`): everything seen at or
    /// under one is now at or under the other.
    pub fn exchanged(&self, a: &str, b: &str) {
        let mut p = self.paths.lock().expect("inodes lock");
        let (under_a, under_b) = (format!("{a}/"), format!("{b}/"));
        for v in p.values_mut().flatten() {
            if v == a {
                *v = b.to_string();
            } else if v == b {
                *v = a.to_string();
            } else if let Some(rest) = v.strip_prefix(&under_a) {
                *v = format!("{b}/{rest}");
            } else if let Some(rest) = v.strip_prefix(&under_b) {
                *v = format!("{a}/{rest}");
            }
        }
    }
}

/// Every path under `from/` moves under `to/`.
fn move_under(p: &mut HashMap<u64, Vec<String>>, from: &str, to: &str) {
    let under = format!("{from}/");
    for v in p.values_mut().flatten() {
        if let Some(rest) = v.strip_prefix(&under) {
            *v = format!("{to}/{rest}");
        }
    }
}

/// `dir`/`name` as a remote path.
pub fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_moves_everything_under_it_and_nothing_beside_it() {
        let i = Inodes::new("/m", 40);
        assert_eq!(
            (i.fuse_ino(40), i.fuse_ino(1), i.fuse_ino(7)),
            (ROOT, MANAGER_ROOT_ELSEWHERE, 7)
        );
        i.saw(7, "/m/a");
        i.saw(8, "/m/a/b");
        i.saw(9, "/m/ab");
        i.renamed("/m/a", "/m/z");
        assert_eq!(i.path(7).as_deref(), Some("/m/z"));
        assert_eq!(i.path(8).as_deref(), Some("/m/z/b"));
        assert_eq!(i.path(9).as_deref(), Some("/m/ab"));
        assert_eq!(i.path(ROOT).as_deref(), Some("/m"));
        // A directory seen under a new name (renamed by another client) takes its
        // children along.
        i.saw(7, "/m/y");
        assert_eq!(i.path(8).as_deref(), Some("/m/y/b"));
        assert_eq!(i.path(9).as_deref(), Some("/m/ab"));
        assert_eq!(join("/", "x"), "/x");
        assert_eq!(join("/m", "x"), "/m/x");
    }

    /// pjdfstest link/00.t: three names of one file, two unlinked; the third still answers.
    #[test]
    fn a_file_answers_to_any_name_it_still_has() {
        let i = Inodes::new("/", 1);
        for n in ["/d/n0", "/d/n1", "/d/n2"] {
            i.saw(7, n);
        }
        i.unlinked("/d/n0");
        assert_eq!(i.path(7).as_deref(), Some("/d/n2"));
        i.unlinked("/d/n2");
        assert_eq!(i.path(7).as_deref(), Some("/d/n1"));
        // Its only name stays (an open file is reached through it).
        i.unlinked("/d/n1");
        assert_eq!(i.path(7).as_deref(), Some("/d/n1"));
        // A rename over one of two names takes that name away.
        i.saw(7, "/d/n3");
        i.saw(8, "/d/other");
        i.renamed("/d/other", "/d/n3");
        assert_eq!(i.path(7).as_deref(), Some("/d/n1"));
        assert_eq!(i.path(8).as_deref(), Some("/d/n3"));
        for k in 0..2 * NAMES_PER_INODE_MAX {
            i.saw(9, &format!("/d/l{k}"));
        }
        assert_eq!(i.paths.lock().unwrap()[&9].len(), NAMES_PER_INODE_MAX);
    }

    /// A directory's break takes every absence noted in it and none of another's; a reset
    /// takes all; a full table makes room from entries the kernel no longer keeps, else
    /// refuses.
    #[test]
    fn absences_go_by_directory_and_the_table_is_bounded() {
        let i = Inodes::new("/", 1);
        assert!(i.note_absent(5, "a", 0, 1_000));
        assert!(i.note_absent(5, "b", 0, 1_000));
        assert!(i.note_absent(6, "c", 0, 1_000));
        let mut got = i.take_absent(Some(5));
        got.sort();
        assert_eq!(got, [(5, "a".to_string()), (5, "b".to_string())]);
        assert!(i.take_absent(Some(5)).is_empty());
        assert_eq!(i.take_absent(None), [(6, "c".to_string())]);
        for k in 0..ABSENT_NAMES_MAX {
            assert!(i.note_absent(7, &format!("n{k}"), 0, 1_000));
        }
        assert!(!i.note_absent(7, "late", 500, 1_000), "all still kept");
        assert!(
            i.note_absent(7, "later", 1_000, 1_000),
            "the old ones expired"
        );
        assert_eq!(i.take_absent(None).len(), 1);
    }
}
