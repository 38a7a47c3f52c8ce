//! The field codecs manager messages share: strings, flags, optional fields, counted lists,
//! and the encodings of the shared types of `types.rs` (a stat, a layout, a grant, extended
//! attributes). Byte layouts, little-endian:
//! ```text
//! string    := u32 len, UTF-8 bytes                 len <= STRING_BYTES_MAX
//! bool      := u8 (0 | 1)
//! option    := u8 (0 | 1), then the value when 1
//! FileStat  := u64 ino, u8 kind, u32 mode, u32 uid, u32 gid, string owner, string group,
//!              u64 size, u64 mtime_us, u64 ctime_us, u32 nlink, u64 atime_us, u64 rdev
//! Layout    := u64 version, string geometry, u16 n (1..=COMPONENTS_MAX), n x
//!              (u64 drive, string addr, u8 suite, u16 partition, u64 object, bool stale)
//! Grant     := FileStat, Layout, n x (capability args, option writer key [32], [32] key),
//!              u64 write_end, E2ePolicy, option E2eState
//! StagedGrant := Grant, bool replaces
//! xattrs    := u32 count, count x (string name, blob value)
//! ```

use super::call::Wire;
use super::types::*;
use super::{
    E2ePolicy, E2eState, CHALLENGE_BYTES, KEY_LIST_MAX, LIST_ENTRIES_MAX, PUBLIC_KEY_BYTES,
    STRING_BYTES_MAX, XATTRS_PER_FILE_MAX, XATTR_NAME_BYTES_MAX, XATTR_VALUE_BYTES_MAX,
};
use crate::capability::CapabilityArgs;
pub(crate) use crate::codec::{get_bool, put_bool};
use crate::codec::{Reader, Writer};
use crate::types::{DriveId, ObjectId, PartitionId, Suite};
use crate::DecodeError;

pub(crate) fn put_str(w: &mut Writer, s: &str) {
    debug_assert!(s.len() <= STRING_BYTES_MAX);
    w.blob(s.as_bytes());
}

pub(crate) fn get_str(r: &mut Reader<'_>, what: &'static str) -> Result<String, DecodeError> {
    let b = r.blob(STRING_BYTES_MAX, what)?;
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::BadValue("string is not UTF-8"))
}

/// `u8 0`, or `u8 1` and the value as `put` writes it.
pub(crate) fn put_opt<T>(w: &mut Writer, v: &Option<T>, put: impl FnOnce(&mut Writer, &T)) {
    match v {
        None => w.u8(0),
        Some(v) => {
            w.u8(1);
            put(w, v);
        }
    }
}

/// The value after a `u8 1` (read by `get`), `None` after a `u8 0`; `what` names the flag.
pub(crate) fn get_opt<'a, T>(
    r: &mut Reader<'a>,
    what: &'static str,
    get: impl FnOnce(&mut Reader<'a>) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    Ok(match get_bool(r, what)? {
        false => None,
        true => Some(get(r)?),
    })
}

/// `u8 has_key (0 | 1)`, then the 32-byte key when 1.
pub(crate) fn put_public_key(w: &mut Writer, k: &Option<[u8; PUBLIC_KEY_BYTES]>) {
    put_opt(w, k, |w, k| w.bytes(k));
}

pub(crate) fn get_public_key(
    r: &mut Reader<'_>,
) -> Result<Option<[u8; PUBLIC_KEY_BYTES]>, DecodeError> {
    get_opt(r, "has public key", |r| r.array("public key"))
}

/// A count that precedes a list, checked against the bytes left (each element takes at least
/// `min_bytes`) before anything is allocated.
pub(crate) fn get_count(
    r: &mut Reader<'_>,
    min_bytes: usize,
    what: &'static str,
) -> Result<usize, DecodeError> {
    let n = r.u32(what)? as usize;
    if n > LIST_ENTRIES_MAX {
        return Err(DecodeError::TooLong(what));
    }
    if n.saturating_mul(min_bytes) > r.remaining() {
        return Err(DecodeError::Truncated(what));
    }
    Ok(n)
}

/// `u32 n` (at most [`KEY_LIST_MAX`]) then `n` names.
pub(crate) fn get_names(r: &mut Reader<'_>) -> Result<Vec<String>, DecodeError> {
    let n = get_count(r, 4, "names")?;
    if n > KEY_LIST_MAX {
        return Err(DecodeError::TooLong("names"));
    }
    (0..n).map(|_| get_str(r, "name")).collect()
}

/// `u32 n` (at most [`KEY_LIST_MAX`]) then `n` u32 ids.
pub(crate) fn get_ids(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<u32>, DecodeError> {
    let n = r.u32(what)? as usize;
    if n > KEY_LIST_MAX || n.saturating_mul(4) > r.remaining() {
        return Err(DecodeError::TooLong(what));
    }
    (0..n).map(|_| r.u32(what)).collect()
}

/// `u32 n` ids then `u32 m` names, the encoding of both key lookups.
pub(crate) fn put_ids_and_names(w: &mut Writer, ids: &[u32], names: &[String]) {
    debug_assert!(ids.len() <= KEY_LIST_MAX && names.len() <= KEY_LIST_MAX);
    w.u32(ids.len() as u32);
    for id in ids {
        w.u32(*id);
    }
    w.u32(names.len() as u32);
    for n in names {
        put_str(w, n);
    }
}

/// `u32 count`, then per attribute its name (string) and value (blob).
pub(crate) fn put_xattrs(w: &mut Writer, xattrs: &[Xattr]) {
    w.u32(xattrs.len() as u32);
    for x in xattrs {
        put_str(w, &x.name);
        w.blob(&x.value);
    }
}

pub(crate) fn get_xattr_name(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    let b = r.blob(XATTR_NAME_BYTES_MAX, "xattr name")?;
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::BadValue("xattr name is not UTF-8"))
}

/// A file's whole set of attributes, refused unless [`check_xattrs`] accepts it.
pub(crate) fn get_xattrs(r: &mut Reader<'_>) -> Result<Vec<Xattr>, DecodeError> {
    let n = get_count(r, 8, "xattrs")?;
    if n > XATTRS_PER_FILE_MAX {
        return Err(DecodeError::TooLong("xattrs"));
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let name = get_xattr_name(r)?;
        let value = r.blob(XATTR_VALUE_BYTES_MAX, "xattr value")?.to_vec();
        v.push(Xattr { name, value });
    }
    check_xattrs(&v).map_err(DecodeError::BadValue)?;
    Ok(v)
}

/// The payload of `Ok`: nothing.
impl Wire for () {
    fn put(&self, _: &mut Writer) {}
    fn get(_: &mut Reader<'_>) -> Result<(), DecodeError> {
        Ok(())
    }
}

/// The payload of `Challenge`: its bytes.
impl Wire for [u8; CHALLENGE_BYTES] {
    fn put(&self, w: &mut Writer) {
        w.bytes(self);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.array("challenge")
    }
}

impl Wire for FileStat {
    fn put(&self, w: &mut Writer) {
        w.u64(self.ino);
        w.u8(self.kind as u8);
        w.u32(self.mode);
        w.u32(self.uid);
        w.u32(self.gid);
        put_str(w, &self.owner);
        put_str(w, &self.group);
        w.u64(self.size);
        w.u64(self.mtime_us);
        w.u64(self.ctime_us);
        w.u32(self.nlink);
        w.u64(self.atime_us);
        w.u64(self.rdev);
    }

    fn get(r: &mut Reader<'_>) -> Result<FileStat, DecodeError> {
        Ok(FileStat {
            ino: r.u64("ino")?,
            kind: FileKind::from_u8(r.u8("kind")?)?,
            mode: r.u32("mode")?,
            uid: r.u32("uid")?,
            gid: r.u32("gid")?,
            owner: get_str(r, "owner")?,
            group: get_str(r, "group")?,
            size: r.u64("size")?,
            mtime_us: r.u64("mtime")?,
            ctime_us: r.u64("ctime")?,
            nlink: r.u32("nlink")?,
            atime_us: r.u64("atime")?,
            rdev: r.u64("rdev")?,
        })
    }
}

impl Wire for Layout {
    fn put(&self, w: &mut Writer) {
        w.u64(self.version);
        put_str(w, &self.geometry);
        w.u16(self.components.len() as u16);
        for c in &self.components {
            w.u64(c.drive.0);
            put_str(w, &c.addr);
            w.u8(c.suite as u8);
            w.u16(c.partition.0);
            w.u64(c.object.0);
            w.u8(c.stale as u8);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Layout, DecodeError> {
        let version = r.u64("layout version")?;
        let geometry = get_str(r, "geometry")?;
        if geometry.len() > GEOMETRY_BYTES_MAX {
            return Err(DecodeError::TooLong("geometry"));
        }
        let n = r.u16("components")? as usize;
        if n == 0 || n > COMPONENTS_MAX {
            return Err(DecodeError::BadValue("component count"));
        }
        let mut components = Vec::with_capacity(n);
        for _ in 0..n {
            components.push(Component {
                drive: DriveId(r.u64("drive")?),
                addr: get_str(r, "addr")?,
                suite: Suite::from_u8(r.u8("suite")?)?,
                partition: PartitionId(r.u16("partition")?),
                object: ObjectId(r.u64("object")?),
                stale: get_bool(r, "stale")?,
            });
        }
        Ok(Layout {
            version,
            geometry,
            components,
        })
    }
}

/// Stat, layout and one capability per component, each followed by its writer key (`u8` 0,
/// or 1 and the key) and its secret key: the part every grant starts with.
fn put_granted(w: &mut Writer, stat: &FileStat, layout: &Layout, caps: &[CapGrant]) {
    debug_assert_eq!(caps.len(), layout.components.len());
    stat.put(w);
    layout.put(w);
    for cap in caps {
        cap.args.put_base(w);
        put_opt(w, &cap.args.writer_key, |w, k| w.bytes(&k.0));
        w.bytes(&cap.key);
    }
}

/// What [`put_granted`] writes: one capability per component, in order.
fn get_granted(r: &mut Reader<'_>) -> Result<(FileStat, Layout, Vec<CapGrant>), DecodeError> {
    let stat = FileStat::get(r)?;
    let layout = Layout::get(r)?;
    let mut caps = Vec::with_capacity(layout.components.len());
    for _ in 0..layout.components.len() {
        let mut args = CapabilityArgs::get(r)?;
        if get_bool(r, "has writer key")? {
            args.writer_key = Some(crate::WriterPublicKey(r.array("writer key")?));
        }
        caps.push(CapGrant {
            args,
            key: r.array("capability key")?,
        });
    }
    Ok((stat, layout, caps))
}

/// A grant as `Opened`, `Staged` and `Prepared` carry it: stat, layout, one capability per
/// component, `u64 write_end`, then (version 12) the writer's [`E2ePolicy`] and `u8 has_e2e`
/// with the file's [`E2eState`].
impl Wire for Grant {
    fn put(&self, w: &mut Writer) {
        put_granted(w, &self.stat, &self.layout, &self.caps);
        w.u64(self.write_end);
        self.policy.put(w);
        put_opt(w, &self.e2e, |w, e| e.put(w));
    }

    fn get(r: &mut Reader<'_>) -> Result<Grant, DecodeError> {
        let (stat, layout, caps) = get_granted(r)?;
        Ok(Grant {
            stat,
            layout,
            caps,
            write_end: r.u64("write end")?,
            policy: E2ePolicy::get(r)?,
            e2e: get_opt(r, "has e2e", E2eState::get)?,
        })
    }
}

impl Wire for StagedGrant {
    fn put(&self, w: &mut Writer) {
        self.grant.put(w);
        w.u8(self.replaces as u8);
    }

    fn get(r: &mut Reader<'_>) -> Result<StagedGrant, DecodeError> {
        Ok(StagedGrant {
            grant: Grant::get(r)?,
            replaces: get_bool(r, "replaces")?,
        })
    }
}

/// A grant whose `has_e2e` is 0: a prepared file has no end-to-end state yet.
impl Wire for PreparedFile {
    fn put(&self, w: &mut Writer) {
        put_granted(w, &self.stat, &self.layout, &self.caps);
        w.u64(self.write_end);
        self.policy.put(w);
        w.u8(0);
    }

    fn get(r: &mut Reader<'_>) -> Result<PreparedFile, DecodeError> {
        let g = Grant::get(r)?;
        if g.e2e.is_some() {
            return Err(DecodeError::BadValue("a prepared file with e2e state"));
        }
        Ok(PreparedFile {
            stat: g.stat,
            layout: g.layout,
            caps: g.caps,
            write_end: g.write_end,
            policy: g.policy,
        })
    }
}
