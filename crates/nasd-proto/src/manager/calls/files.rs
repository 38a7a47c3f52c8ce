//! The file calls: grants of capabilities (create, open, return), uploads staged and
//! committed, aborted or renewed, new files prepared ahead of their names, and copy-on-write
//! changes of striped files.
//! ```text
//! Commit    := string path, u64 drive, u64 object, u64 size, u64 stale,
//!              option xattrs, option E2eCommit
//! Prepared  := u32 n (<= PREPARED_FILES_MAX), n x Grant (has_e2e 0)
//! ```
//! Every request for a write capability carries `extend_by`, the bytes past the file's current
//! size the writer asks to write (seed 002 §3.2's escrow; see
//! [`MANAGER_PROTOCOL_VERSION`](crate::manager::MANAGER_PROTOCOL_VERSION) 10).

use super::path_and_u64;
use crate::codec::{Reader, Writer};
use crate::manager::codec::{get_bool, get_opt, get_str, get_xattrs, put_opt, put_str, put_xattrs};
use crate::manager::{
    E2eCommit, Grant, MgrReply, PreparedFile, Reply, StagedGrant, Wire, Xattr, PREPARED_FILES_MAX,
};
use crate::types::{DriveId, ObjectId};
use crate::DecodeError;

/// With `exclusive: true`, creates an empty file and returns its layout with a write
/// capability (NASD/AFS GetWCapability folded into create); `Exists` if the name is taken.
/// With `exclusive: false`, the reply is [`StagedGrant`]: a fresh object, invisible under any
/// name, that the client fills and then [`Commit`]s as the file's content (replacing an
/// existing file's, or linking a new name).
///
/// `extend_by`: bytes of content the writer asks to write (seed 002 §3.2's escrow).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Create {
    pub path: String,
    pub mode: u32,
    pub exclusive: bool,
    pub extend_by: u64,
}

impl Wire for Create {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u32(self.mode);
        w.u8(self.exclusive as u8);
        w.u64(self.extend_by);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Create {
            path: get_str(r, "path")?,
            mode: r.u32("mode")?,
            exclusive: get_bool(r, "exclusive")?,
            extend_by: r.u64("extend by")?,
        })
    }
}

/// What answers a [`Create`]: the new file opened (`exclusive`), or a staged upload.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Created {
    Opened(Grant),
    Staged(StagedGrant),
}

impl Created {
    /// The file opened, or the name of the reply that came instead (an exclusive create's).
    pub fn opened(self) -> Result<Grant, &'static str> {
        match self {
            Created::Opened(g) => Ok(g),
            Created::Staged(_) => Err("Staged"),
        }
    }

    /// The staged upload, or the name of the reply that came instead (a non-exclusive
    /// create's).
    pub fn staged(self) -> Result<StagedGrant, &'static str> {
        match self {
            Created::Staged(s) => Ok(s),
            Created::Opened(_) => Err("Opened"),
        }
    }
}

impl Reply for Created {
    fn into_reply(self) -> MgrReply {
        match self {
            Created::Opened(g) => MgrReply::Opened(g),
            Created::Staged(s) => MgrReply::Staged(s),
        }
    }

    fn from_reply(r: MgrReply) -> Result<Self, &'static str> {
        match r {
            MgrReply::Opened(g) => Ok(Created::Opened(g)),
            MgrReply::Staged(s) => Ok(Created::Staged(s)),
            r => Err(r.name()),
        }
    }
}

/// GetCapability (`write: false`) or GetWCapability (`write: true`), answered with a
/// [`Grant`]. A writer asks to grow the file by `extend_by` bytes past its current size (0
/// for a reader).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Open {
    pub path: String,
    pub write: bool,
    pub extend_by: u64,
}

impl Wire for Open {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u8(self.write as u8);
        w.u64(self.extend_by);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Open {
            path: get_str(r, "path")?,
            write: get_bool(r, "write")?,
            extend_by: r.u64("extend by")?,
        })
    }
}

path_and_u64! {
    /// ReturnCapability: the client is done writing under `audit_id`. When it holds the file's
    /// write lease, the lease ends and every capability for the file's objects is revoked at
    /// once (seed 002 §3.2).
    ReturnCapability { audit_id: "audit id" }
}

/// Swaps a staged upload (from [`StagedGrant`], named by its first component) into `path` in one
/// transaction; the old objects are removed afterwards, which revokes their capabilities.
/// `size` is the file's size after the upload, which the manager keeps for layouts spread
/// over several objects (a one-object file's object holds it). `stale` has bit `i` set when
/// the writer could not write component `i` (its drive failed): the component is kept out of
/// reads until a rebuild makes it current.
///
/// With `xattrs`, the file's extended attributes become exactly those, in the same
/// transaction; without, a new file has none and an existing one keeps its own.
///
/// With `exclusive`, a new file is linked only if its name is still free (`Exists` else, and
/// nothing changes): `open(O_CREAT | O_EXCL)` across clients. Without, the last commit wins.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Commit {
    pub path: String,
    pub drive: DriveId,
    pub object: ObjectId,
    pub size: u64,
    pub stale: u64,
    pub xattrs: Option<Vec<Xattr>>,
    /// The file's new end-to-end state, swapped in with the content if the file's record
    /// is still the one `expect` names (else `Conflict`, and nothing changes).
    pub e2e: Option<E2eCommit>,
    pub exclusive: bool,
}

impl Wire for Commit {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u64(self.drive.0);
        w.u64(self.object.0);
        w.u64(self.size);
        w.u64(self.stale);
        put_opt(w, &self.xattrs, |w, x| put_xattrs(w, x));
        put_opt(w, &self.e2e, |w, c| c.put(w));
        w.u8(self.exclusive as u8);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Commit {
            path: get_str(r, "path")?,
            drive: DriveId(r.u64("drive")?),
            object: ObjectId(r.u64("object")?),
            size: r.u64("size")?,
            stale: r.u64("stale components")?,
            xattrs: get_opt(r, "has xattrs", get_xattrs)?,
            e2e: get_opt(r, "has e2e", E2eCommit::get)?,
            exclusive: get_bool(r, "exclusive")?,
        })
    }
}

/// Gives up a staged upload: the manager forgets it and removes its object now, so its
/// space comes back without waiting for the orphan scrub.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Abort {
    pub path: String,
    pub drive: DriveId,
    pub object: ObjectId,
}

impl Wire for Abort {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u64(self.drive.0);
        w.u64(self.object.0);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Abort {
            path: get_str(r, "path")?,
            drive: DriveId(r.u64("drive")?),
            object: ObjectId(r.u64("object")?),
        })
    }
}

/// Asks for a fresh write capability for a staged upload that is still running (answered
/// with [`StagedGrant`]); the upload's record is kept from expiring meanwhile. `extend_by` moves
/// the grant's `write_end` that many bytes further (0: only a fresh lifetime).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Renew {
    pub path: String,
    pub drive: DriveId,
    pub object: ObjectId,
    pub extend_by: u64,
}

impl Wire for Renew {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        w.u64(self.drive.0);
        w.u64(self.object.0);
        w.u64(self.extend_by);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Renew {
            path: get_str(r, "path")?,
            drive: DriveId(r.u64("drive")?),
            object: ObjectId(r.u64("object")?),
            extend_by: r.u64("extend by")?,
        })
    }
}

/// Stages `count` (at most [`PREPARED_FILES_MAX`]) new files of mode `mode` in directory
/// `dir` before their names are known, answered with one [`PreparedFile`] each. Each is a
/// reserved inode with fresh objects in the layout the directory gives new files and a
/// write capability, recorded as staged at `dir` followed by `/`: the writer fills one and
/// [`Commit`]s it as `dir/NAME`, which links it only if NAME is free (else `Exists`: an
/// existing file is overwritten through `Create`, which keeps its inode). `Abort` and
/// `Renew` name a prepared file by `dir/`. Unused ones expire as any staged upload does.
/// Each file may hold `extend_by` bytes; under a quota fewer files than `count` may come
/// back, as many as the quota has room for.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Prepare {
    pub dir: String,
    pub mode: u32,
    pub count: u32,
    pub extend_by: u64,
}

impl Wire for Prepare {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.dir);
        w.u32(self.mode);
        w.u32(self.count);
        w.u64(self.extend_by);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Prepare {
            dir: get_str(r, "directory")?,
            mode: r.u32("mode")?,
            count: r.u32("count")?,
            extend_by: r.u64("extend by")?,
        })
    }
}

impl Wire for Vec<PreparedFile> {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.len() <= PREPARED_FILES_MAX as usize);
        w.u32(self.len() as u32);
        for f in self {
            f.put(w);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.u32("prepared files")?;
        if n > PREPARED_FILES_MAX {
            return Err(DecodeError::TooLong("prepared files"));
        }
        (0..n).map(|_| PreparedFile::get(r)).collect()
    }
}

path_and_u64! {
    /// Stages a copy-on-write change of an existing file spread over several objects: the
    /// manager fast-copies every component (the drive shares unchanged blocks) and answers
    /// [`StagedGrant`] with the copies; the writer changes them and [`Commit`]s, which swaps them
    /// in atomically, so no crash leaves data and parity disagreeing. Takes the file's write
    /// lease. `extend_by`: bytes past the file's current size the change may grow it by.
    StageWrite { extend_by: "extend by" }
}
