//! nasd's local files are private to the user who runs it. A drive's directory holds its key
//! hierarchy (in `meta.redb` and `keys/`), every object's data and its audit trail; a manager's
//! holds users' password hashes, session hashes, every drive's keys, the cluster CA's and the
//! server's private keys; a cluster's holds the admin's password: anyone who reads them can
//! mint capabilities, read or forge data, or impersonate a party. So every directory nasd
//! creates is made mode [`PRIVATE_DIR_MODE`] and every file [`PRIVATE_FILE_MODE`], whatever the
//! umask (the mode is given at creation, and set again in case the file already existed), and
//! the drive and the manager refuse to start while anything under their directory is accessible
//! to the group or to others ([`check_tree`]), naming the path and its mode.
//!
//! SQLite creates the database's `-wal` and `-shm` files with the database file's own mode,
//! so creating `meta.sqlite` private ([`create_file`]) before SQLite opens it makes them
//! private too.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of every directory nasd creates.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// Mode of every file nasd creates.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// The permission bits that must be clear: anything for the group or for others.
const SHARED_BITS: u32 = 0o077;
/// Deepest directory level [`check_tree`] descends to (nasd's trees are at most three deep).
const CHECK_DEPTH_MAX: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum PrivacyError {
    #[error(
        "{} is mode {mode:04o}: the group or others may access it, and it holds keys, data or \
         metadata; refusing to start (run `chmod {} {}` if it is yours)",
        path.display(),
        if *dir { "700" } else { "600" },
        path.display()
    )]
    Loose { path: PathBuf, mode: u32, dir: bool },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PrivacyError + '_ {
    move |source| PrivacyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `dir` (and missing parents) and makes `dir` itself mode [`PRIVATE_DIR_MODE`].
pub fn create_dir(dir: &Path) -> Result<(), PrivacyError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
        .map_err(io(dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))
        .map_err(io(dir))
}

/// Opens (creating if missing) `path` mode [`PRIVATE_FILE_MODE`], truncated when `truncate`.
fn open_private(path: &Path, truncate: bool) -> Result<std::fs::File, PrivacyError> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
        .map_err(io(path))?;
    // An existing file keeps its mode on open.
    f.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))
        .map_err(io(path))?;
    Ok(f)
}

/// Writes `bytes` to `path` (replacing its content), mode [`PRIVATE_FILE_MODE`], synced.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), PrivacyError> {
    let mut f = open_private(path, true)?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// Opens `path` for appending (a log), creating it mode [`PRIVATE_FILE_MODE`] and making an
/// existing one private again.
pub fn open_append(path: &Path) -> Result<std::fs::File, PrivacyError> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
        .map_err(io(path))?;
    f.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))
        .map_err(io(path))?;
    Ok(f)
}

/// Makes sure `path` exists with mode [`PRIVATE_FILE_MODE`], leaving any content alone (the
/// database file, before SQLite opens it).
pub fn create_file(path: &Path) -> Result<(), PrivacyError> {
    open_private(path, false).map(drop)
}

/// Checks `dir` and everything under it: no directory or file may grant the group or others
/// any access. Symbolic links are judged by what they point to, and not followed into
/// directories.
pub fn check_tree(dir: &Path) -> Result<(), PrivacyError> {
    check_path(dir, 0)
}

fn check_path(path: &Path, depth: usize) -> Result<(), PrivacyError> {
    let meta = std::fs::metadata(path).map_err(io(path))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & SHARED_BITS != 0 {
        return Err(PrivacyError::Loose {
            path: path.to_path_buf(),
            mode,
            dir: meta.is_dir(),
        });
    }
    let is_real_dir = std::fs::symlink_metadata(path).map_err(io(path))?.is_dir();
    if is_real_dir && depth < CHECK_DEPTH_MAX {
        for entry in std::fs::read_dir(path).map_err(io(path))? {
            check_path(&entry.map_err(io(path))?.path(), depth + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn what_is_created_is_private_and_loose_modes_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("m");
        create_dir(&d.join("tls")).unwrap();
        create_dir(&d).unwrap();
        write_file(&d.join("tls/k"), b"secret").unwrap();
        create_file(&d.join("db")).unwrap();
        // An existing file written again is made private again.
        std::fs::set_permissions(d.join("tls/k"), std::fs::Permissions::from_mode(0o644)).unwrap();
        write_file(&d.join("tls/k"), b"secret2").unwrap();
        assert_eq!(mode(&d), PRIVATE_DIR_MODE);
        assert_eq!(mode(&d.join("tls")), PRIVATE_DIR_MODE);
        assert_eq!(mode(&d.join("tls/k")), PRIVATE_FILE_MODE);
        assert_eq!(mode(&d.join("db")), PRIVATE_FILE_MODE);
        check_tree(&d).unwrap();

        std::fs::set_permissions(d.join("tls/k"), std::fs::Permissions::from_mode(0o604)).unwrap();
        let e = check_tree(&d).unwrap_err();
        assert!(matches!(&e, PrivacyError::Loose { mode: 0o604, .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&d.join("tls/k").display().to_string()),
            "{text}"
        );
        assert!(
            text.contains("0604") && text.contains("chmod 600"),
            "{text}"
        );
        std::fs::set_permissions(d.join("tls/k"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(d.join("tls"), std::fs::Permissions::from_mode(0o750)).unwrap();
        let e = check_tree(&d).unwrap_err().to_string();
        assert!(e.contains("0750") && e.contains("chmod 700"), "{e}");
    }
}
