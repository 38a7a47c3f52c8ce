//! The end-to-end calls (manager protocol 12; issue 10): a file's end-to-end state replaced
//! without its content, users' public keys and password-sealed secrets, groups' key pairs
//! and their wraps to members. The types themselves are in [`crate::e2e`].
//! ```text
//! key lookup  := u32 n (<= KEY_LIST_MAX), n x u32 id, u32 m (<= KEY_LIST_MAX), m x string name
//! GroupKeySet := string group, u32 version, [32] public, blob link,
//!                u32 n, n x (u32 uid, blob wrap)
//! GroupKeys   := u32 n, n x (u32 gid, string name, u32 version, option [32] public,
//!                blob wrap, u8 flags (bit 0 member, bit 1 rekey), u32 m, m x u32 uid,
//!                u32 l (<= GROUP_KEY_LINKS_MAX), l x blob link)
//! E2eWrappedFiles := u64 after, u32 limit (<= WRAPPED_FILES_PAGE_MAX)
//! WrappedFiles := u32 n, n x (u64 ino, string path)
//! E2eRewrap   := string path, E2eCommit
//! GroupWrapSet := u32 n (<= KEY_LIST_MAX), n x (u32 gid, u32 version, blob wrap)
//! ```

use crate::codec::{Reader, Writer};
use crate::e2e::GROUP_KEY_LINKS_MAX;
use crate::manager::codec::{
    get_count, get_ids, get_names, get_public_key, get_str, put_ids_and_names, put_public_key,
    put_str,
};
use crate::manager::{
    E2eCommit, GroupKeyInfo, UserKeyInfo, UserKeys, Wire, GROUP_WRAP_BYTES_MAX, KEY_LIST_MAX,
};
use crate::DecodeError;

/// Replaces a file's end-to-end state without changing its content (new key wraps after
/// `nasd share`, `unshare` or `chmod`), if its record is still the one `expect` names;
/// the file's owner or an admin.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct E2eUpdate {
    pub path: String,
    pub update: E2eCommit,
}

impl Wire for E2eUpdate {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        self.update.put(w);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(E2eUpdate {
            path: get_str(r, "path")?,
            update: E2eCommit::get(r)?,
        })
    }
}

/// Sets `user`'s end-to-end keys: the user's own only. A change (a version past the current
/// one) must carry the signature of the current sign key; the same version again only
/// replaces the sealed seed.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UserKeySet {
    pub user: String,
    pub keys: UserKeys,
}

impl Wire for UserKeySet {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.user);
        self.keys.put(w);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(UserKeySet {
            user: get_str(r, "user")?,
            keys: UserKeys::get(r)?,
        })
    }
}

/// The end-to-end public keys of the users `uids` and of those named `names` (at most
/// [`KEY_LIST_MAX`] each; unknown users and users without keys are left out), answered
/// with a [`UserKeyInfo`] each; the caller's own entry also carries their sealed secret.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UserKeyGet {
    pub uids: Vec<u32>,
    pub names: Vec<String>,
}

impl Wire for UserKeyGet {
    fn put(&self, w: &mut Writer) {
        put_ids_and_names(w, &self.uids, &self.names);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let uids = get_ids(r, "uids")?;
        let names = get_names(r)?;
        Ok(UserKeyGet { uids, names })
    }
}

impl Wire for Vec<UserKeyInfo> {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.len() <= KEY_LIST_MAX);
        w.u32(self.len() as u32);
        for u in self {
            w.u32(u.uid);
            put_str(w, &u.name);
            u.keys.put(w);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // uid, name (4 + name), two keys, version, signature, sealed (4 + bytes).
        let n = get_count(r, 4 + 4 + 64 + 4 + 64 + 4, "user keys")?;
        let mut us = Vec::with_capacity(n);
        for _ in 0..n {
            us.push(UserKeyInfo {
                uid: r.u32("uid")?,
                name: get_str(r, "user")?,
                keys: UserKeys::get(r)?,
            });
        }
        Ok(us)
    }
}

/// Gives group `group` key pair `version` (the one after its current one), its public half,
/// the link that opens the current version's secret from the new one (empty when the caller
/// holds none) and the wraps of its secret to members (uid, wrap); or, with the current
/// version and public key, wraps for members who have none yet. Members only, and wraps to
/// members only (manager protocol 21).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GroupKeySet {
    pub group: String,
    pub version: u32,
    pub public: [u8; 32],
    pub link: Vec<u8>,
    pub wraps: Vec<(u32, Vec<u8>)>,
}

impl Wire for GroupKeySet {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.group);
        w.u32(self.version);
        w.bytes(&self.public);
        w.blob(&self.link);
        debug_assert!(self.wraps.len() <= KEY_LIST_MAX);
        w.u32(self.wraps.len() as u32);
        for (uid, wrap) in &self.wraps {
            w.u32(*uid);
            w.blob(wrap);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let group = get_str(r, "group")?;
        let version = r.u32("group key version")?;
        let public = r.array("group public key")?;
        let link = r.blob(GROUP_WRAP_BYTES_MAX, "group key link")?.to_vec();
        let n = r.u32("group wraps")? as usize;
        if n > KEY_LIST_MAX || n.saturating_mul(8) > r.remaining() {
            return Err(DecodeError::TooLong("group wraps"));
        }
        let mut wraps = Vec::with_capacity(n);
        for _ in 0..n {
            let uid = r.u32("wrap uid")?;
            wraps.push((uid, r.blob(GROUP_WRAP_BYTES_MAX, "group wrap")?.to_vec()));
        }
        Ok(GroupKeySet {
            group,
            version,
            public,
            link,
            wraps,
        })
    }
}

/// The key pairs of groups `gids` and of the groups named `names`, answered with a
/// [`GroupKeyInfo`] each (unknown ones left out).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GroupKeyGet {
    pub gids: Vec<u32>,
    pub names: Vec<String>,
}

impl Wire for GroupKeyGet {
    fn put(&self, w: &mut Writer) {
        put_ids_and_names(w, &self.gids, &self.names);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let gids = get_ids(r, "gids")?;
        let names = get_names(r)?;
        Ok(GroupKeyGet { gids, names })
    }
}

impl Wire for Vec<GroupKeyInfo> {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.len() <= KEY_LIST_MAX);
        w.u32(self.len() as u32);
        for g in self {
            w.u32(g.gid);
            put_str(w, &g.name);
            w.u32(g.version);
            put_public_key(w, &g.public);
            w.blob(&g.wrap);
            w.u8(g.member as u8 | (g.rekey as u8) << 1);
            debug_assert!(g.missing.len() <= KEY_LIST_MAX);
            w.u32(g.missing.len() as u32);
            for uid in &g.missing {
                w.u32(*uid);
            }
            debug_assert!(g.links.len() <= GROUP_KEY_LINKS_MAX);
            w.u32(g.links.len() as u32);
            for l in &g.links {
                w.blob(l);
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = get_count(r, 4 + 4 + 4 + 1 + 4 + 1 + 4 + 4, "group keys")?;
        let mut gs = Vec::with_capacity(n);
        for _ in 0..n {
            let gid = r.u32("gid")?;
            let name = get_str(r, "group")?;
            let version = r.u32("group key version")?;
            let public = get_public_key(r)?;
            let wrap = r.blob(GROUP_WRAP_BYTES_MAX, "group wrap")?.to_vec();
            let flags = r.u8("group key flags")?;
            if flags & !GROUP_FLAGS_KNOWN != 0 {
                return Err(DecodeError::BadValue("group key flags"));
            }
            let m = r.u32("missing wraps")? as usize;
            if m > KEY_LIST_MAX || m.saturating_mul(4) > r.remaining() {
                return Err(DecodeError::TooLong("missing wraps"));
            }
            let mut missing = Vec::with_capacity(m);
            for _ in 0..m {
                missing.push(r.u32("uid")?);
            }
            let l = r.u32("group key links")? as usize;
            if l > GROUP_KEY_LINKS_MAX || l.saturating_mul(4) > r.remaining() {
                return Err(DecodeError::TooLong("group key links"));
            }
            let mut links = Vec::with_capacity(l);
            for _ in 0..l {
                links.push(r.blob(GROUP_WRAP_BYTES_MAX, "group key link")?.to_vec());
            }
            gs.push(GroupKeyInfo {
                gid,
                name,
                version,
                public,
                wrap,
                member: flags & GROUP_FLAG_MEMBER != 0,
                rekey: flags & GROUP_FLAG_REKEY != 0,
                missing,
                links,
            });
        }
        Ok(gs)
    }
}

/// [`GroupKeyInfo`]'s flags: the caller is a member; a new key pair is due.
const GROUP_FLAG_MEMBER: u8 = 1;
const GROUP_FLAG_REKEY: u8 = 2;
const GROUP_FLAGS_KNOWN: u8 = GROUP_FLAG_MEMBER | GROUP_FLAG_REKEY;

/// Most files one [`E2eWrappedFiles`] page lists.
pub const WRAPPED_FILES_PAGE_MAX: u32 = 1024;

/// The encrypted files whose key file holds a wrap for the caller, by inode number after
/// `after`, at most `limit` of them (a page shorter than asked is the last): what a key
/// rotation rewraps. Answered with a [`WrappedFile`] each.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct E2eWrappedFiles {
    pub after: u64,
    pub limit: u32,
}

impl Wire for E2eWrappedFiles {
    fn put(&self, w: &mut Writer) {
        w.u64(self.after);
        w.u32(self.limit);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(E2eWrappedFiles {
            after: r.u64("after")?,
            limit: r.u32("limit")?,
        })
    }
}

/// A file whose key file holds a wrap for the caller: its inode and a path to it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct WrappedFile {
    pub ino: u64,
    pub path: String,
}

impl Wire for Vec<WrappedFile> {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.len() <= WRAPPED_FILES_PAGE_MAX as usize);
        w.u32(self.len() as u32);
        for f in self {
            w.u64(f.ino);
            put_str(w, &f.path);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = get_count(r, 8 + 4, "wrapped files")?;
        if n > WRAPPED_FILES_PAGE_MAX as usize {
            return Err(DecodeError::TooLong("wrapped files"));
        }
        let mut fs = Vec::with_capacity(n);
        for _ in 0..n {
            fs.push(WrappedFile {
                ino: r.u64("ino")?,
                path: get_str(r, "path")?,
            });
        }
        Ok(fs)
    }
}

/// Replaces the caller's own wraps in file `path`'s key file (a key rotation: the wraps of
/// the old key become wraps to the new one) if its state is still the one `update.expect`
/// names. Any reader of the file may; the manager checks that nothing but the caller's own
/// user wraps changed (same record, signature and side data otherwise).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct E2eRewrap {
    pub path: String,
    pub update: E2eCommit,
}

impl Wire for E2eRewrap {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        self.update.put(w);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(E2eRewrap {
            path: get_str(r, "path")?,
            update: E2eCommit::get(r)?,
        })
    }
}

/// Replaces the caller's own wraps of group secrets (gid, version, wrap): only of groups
/// whose current version the caller holds a wrap of (a key rotation rewraps them to the new
/// key).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GroupWrapSet {
    pub wraps: Vec<(u32, u32, Vec<u8>)>,
}

impl Wire for GroupWrapSet {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.wraps.len() <= KEY_LIST_MAX);
        w.u32(self.wraps.len() as u32);
        for (gid, version, wrap) in &self.wraps {
            w.u32(*gid);
            w.u32(*version);
            w.blob(wrap);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.u32("group wraps")? as usize;
        if n > KEY_LIST_MAX || n.saturating_mul(12) > r.remaining() {
            return Err(DecodeError::TooLong("group wraps"));
        }
        let mut wraps = Vec::with_capacity(n);
        for _ in 0..n {
            let gid = r.u32("gid")?;
            let version = r.u32("group key version")?;
            wraps.push((
                gid,
                version,
                r.blob(GROUP_WRAP_BYTES_MAX, "group wrap")?.to_vec(),
            ));
        }
        Ok(GroupWrapSet { wraps })
    }
}
