//! Who may lock a file. A lock or a test names the file by path and by the inode the client
//! opened: the path is resolved as the caller (search permission on every directory), it must
//! still name that inode, and the caller must be allowed to read it (as `fcntl` needs a
//! descriptor open for reading or writing; the client's kernel checks the descriptor's own
//! mode). A symbolic link is followed, as `open` follows it. Unlocks name the inode only: they
//! release the caller's own locks and nothing else.

use super::perms::{may, R};
use super::{denied, Caller, Manager};
use crate::{MgrError, MgrResult};
use nasd_proto::manager::MgrStatus;

impl Manager {
    /// Refuses `c` a lock on `path` unless it names inode `ino` and `c` may read it.
    pub fn lockable(&self, c: &Caller, path: &str, ino: u64) -> MgrResult<()> {
        let i = self.resolve(c, path)?;
        if i.ino != ino {
            return Err(MgrError::new(
                MgrStatus::NoSuchPath,
                format!("{path}: names another file than the one locked (inode {ino})"),
            ));
        }
        if !may(c, &i, R) {
            return Err(denied(path, "read permission on the file, to lock it"));
        }
        Ok(())
    }
}
