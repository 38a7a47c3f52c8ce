//! `--tree DIR`: the share of high-entropy and of incompressible blocks in a real directory tree,
//! beside seed 003 §7.3's user study ("on average, 28% percent of file blocks have high entropy
//! and 32% percent of file blocks cannot be compressed enough to fit a MAC inside"), and a sample
//! of its files for the schemes to run over.
//!
//! Bounded everywhere ([`TreeLimits`]): the walk lists at most `files_listed_max` regular files no
//! deeper than `depth_max`, never follows symbolic links and skips everything that is not a
//! regular file (links, fifos, sockets, devices) before opening it, so a fifo can never block the
//! run. Directories and files that cannot be read are skipped and counted. The listed files are
//! visited in a seeded order (so a budget smaller than the tree does not take only its
//! alphabetically first directories) until `scan_bytes_max` bytes were read; of a longer file only
//! its first `file_bytes_max` bytes count (a multiple of the largest block, so the cut makes no
//! false tail).

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::content::{mix, Census};
use crate::error::LabError;

/// How much of a tree is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    /// Regular files listed at most.
    pub files_listed_max: usize,
    /// Directory levels below the root descended at most.
    pub depth_max: usize,
    /// Bytes read at most (the last file read may pass it by up to `file_bytes_max`).
    pub scan_bytes_max: u64,
    /// Bytes read of one file at most (its beginning).
    pub file_bytes_max: u64,
    /// Bytes of the files kept for the schemes to run over.
    pub sample_bytes_max: u64,
}

/// Limits of a full run.
pub const LIMITS_FULL: TreeLimits = TreeLimits {
    files_listed_max: 200_000,
    depth_max: 32,
    scan_bytes_max: 512 << 20,
    file_bytes_max: 32 << 20,
    sample_bytes_max: 32 << 20,
};
/// Limits of a `--quick` run.
pub const LIMITS_QUICK: TreeLimits = TreeLimits {
    files_listed_max: 50_000,
    depth_max: 32,
    scan_bytes_max: 48 << 20,
    file_bytes_max: 8 << 20,
    sample_bytes_max: 4 << 20,
};

const _: () = assert!(LIMITS_FULL.file_bytes_max % nasd_e2e::block::MAX_BLOCK_BYTES as u64 == 0);
const _: () = assert!(LIMITS_QUICK.file_bytes_max % nasd_e2e::block::MAX_BLOCK_BYTES as u64 == 0);

/// What a scan of a tree found.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeScan {
    pub root: PathBuf,
    /// Regular files listed, and whether the listing stopped at its limit.
    pub listed: usize,
    pub listing_truncated: bool,
    /// Entries skipped: not regular files (links, fifos, ...), or unreadable (files and dirs).
    pub skipped_special: usize,
    pub skipped_unreadable: usize,
    /// Files read, bytes read, and files of which only the beginning was read.
    pub scanned_files: usize,
    pub scanned_bytes: u64,
    pub truncated_files: usize,
    /// Per block size, the blocks of the files read.
    pub census: Vec<(u32, Census)>,
    /// Files kept for the schemes, in visiting order (empty files left out).
    pub sample: Vec<Vec<u8>>,
}

/// Walks `root` within `limits`, classifies the blocks of the files it reads at each of
/// `block_sizes`, and keeps a sample.
pub fn scan(
    root: &Path,
    limits: &TreeLimits,
    block_sizes: &[u32],
    seed: u64,
) -> Result<TreeScan, LabError> {
    let mut s = TreeScan {
        root: root.to_path_buf(),
        listed: 0,
        listing_truncated: false,
        skipped_special: 0,
        skipped_unreadable: 0,
        scanned_files: 0,
        scanned_bytes: 0,
        truncated_files: 0,
        census: block_sizes
            .iter()
            .map(|&b| (b, Census::default()))
            .collect(),
        sample: Vec::new(),
    };
    let mut files = list(root, limits, &mut s)?;
    s.listed = files.len();
    files.shuffle(&mut SmallRng::seed_from_u64(mix(seed ^ 0x7_4ee)));
    let mut sample_bytes = 0u64;
    for path in files {
        if s.scanned_bytes >= limits.scan_bytes_max {
            break;
        }
        let Some((data, truncated)) = read_prefix(&path, limits.file_bytes_max) else {
            s.skipped_unreadable += 1;
            continue;
        };
        s.scanned_files += 1;
        s.scanned_bytes += data.len() as u64;
        s.truncated_files += usize::from(truncated);
        for (b, c) in &mut s.census {
            c.add(&Census::of_file(&data, *b));
        }
        if !data.is_empty() && sample_bytes + data.len() as u64 <= limits.sample_bytes_max {
            sample_bytes += data.len() as u64;
            s.sample.push(data);
        }
    }
    Ok(s)
}

/// The regular files under `root`: depth first, each directory's entries in name order.
fn list(root: &Path, limits: &TreeLimits, s: &mut TreeScan) -> Result<Vec<PathBuf>, LabError> {
    let tree_err = |source| LabError::Tree {
        path: root.to_path_buf(),
        source,
    };
    if !fs::metadata(root).map_err(tree_err)?.is_dir() {
        return Err(tree_err(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "not a directory",
        )));
    }
    let mut files = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            s.skipped_unreadable += 1;
            continue;
        };
        let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        let mut subdirs = Vec::new();
        for path in entries {
            let Ok(meta) = fs::symlink_metadata(&path) else {
                s.skipped_unreadable += 1;
                continue;
            };
            let kind = meta.file_type();
            if kind.is_dir() {
                if depth < limits.depth_max {
                    subdirs.push((path, depth + 1));
                }
            } else if kind.is_file() {
                if files.len() == limits.files_listed_max {
                    s.listing_truncated = true;
                    return Ok(files);
                }
                files.push(path);
            } else {
                s.skipped_special += 1;
            }
        }
        // Reversed onto the stack, so subdirectories are visited in name order.
        dirs.extend(subdirs.into_iter().rev());
    }
    Ok(files)
}

/// The first `max` bytes of a regular file, and whether it was longer; `None` if it cannot be
/// opened or read (or stopped being a regular file).
fn read_prefix(path: &Path, max: u64) -> Option<(Vec<u8>, bool)> {
    let f = fs::File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut data = Vec::new();
    f.take(max + 1).read_to_end(&mut data).ok()?;
    let truncated = data.len() as u64 > max;
    data.truncate(max as usize);
    Some((data, truncated))
}

#[cfg(test)]
mod tests {
    use super::super::content::{generate, Kind};
    use super::*;

    const LIMITS: TreeLimits = TreeLimits {
        files_listed_max: 100,
        depth_max: 4,
        scan_bytes_max: 64 << 20,
        file_bytes_max: 1 << 20,
        sample_bytes_max: 2 << 20,
    };

    /// Three text files and one random file of 4 blocks of 64 KiB each, a text file of 2.5 blocks,
    /// an empty file, a symbolic link and a fifo.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let b = 65536;
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        for (i, name) in ["t1", "a/t2", "a/b/t3"].iter().enumerate() {
            std::fs::write(dir.path().join(name), generate(Kind::Text, i as u64, 4 * b)).unwrap();
        }
        std::fs::write(dir.path().join("a/r"), generate(Kind::Random, 9, 4 * b)).unwrap();
        std::fs::write(dir.path().join("t4"), generate(Kind::Source, 4, 5 * b / 2)).unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        std::os::unix::fs::symlink(dir.path().join("a/r"), dir.path().join("link")).unwrap();
        let fifo = std::ffi::CString::new(dir.path().join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        dir
    }

    #[test]
    fn shares_of_a_known_tree() {
        let dir = tree();
        let s = scan(dir.path(), &LIMITS, &[4096, 65536], 1).unwrap();
        assert_eq!((s.listed, s.scanned_files), (6, 6));
        assert_eq!((s.skipped_special, s.skipped_unreadable), (2, 0));
        assert_eq!(s.scanned_bytes, (16 * 65536 + 5 * 65536 / 2) as u64);
        let (_, c64) = s.census[1];
        assert_eq!((c64.whole, c64.whole_random, c64.tails), (18, 4, 1));
        assert_eq!(c64.whole_incompressible, 4);
        let (_, c4) = s.census[0];
        assert_eq!(
            (c4.whole, c4.whole_random, c4.tails),
            (3 * 64 + 64 + 40, 64, 0)
        );
        assert_eq!(c4.whole_incompressible, 64);
        assert_eq!(s.sample.len(), 5, "the empty file is not sampled");
    }

    #[test]
    fn limits_bound_the_walk_and_the_reads() {
        let dir = tree();
        let small = TreeLimits {
            files_listed_max: 3,
            file_bytes_max: 65536,
            sample_bytes_max: 65536,
            ..LIMITS
        };
        let s = scan(dir.path(), &small, &[65536], 2).unwrap();
        assert!(s.listing_truncated);
        assert_eq!(s.listed, 3);
        assert!(s.scanned_bytes <= 3 * 65536);
        assert_eq!(s.sample.len(), 1);
        let shallow = TreeLimits {
            depth_max: 0,
            ..LIMITS
        };
        assert_eq!(scan(dir.path(), &shallow, &[65536], 2).unwrap().listed, 3);
        assert!(matches!(
            scan(&dir.path().join("missing"), &LIMITS, &[65536], 2),
            Err(LabError::Tree { .. })
        ));
    }
}
