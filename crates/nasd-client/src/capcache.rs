//! The capability cache: the layout and capabilities (one per component object) the manager
//! gave for each open path, kept until they expire. A capability is renewed from the manager once three quarters of its life
//! have passed; while the manager cannot be reached, the cached one is used until its expiry,
//! so the data path outlives a manager outage (DESIGN.md). A refused capability (revoked by an
//! access_control_version bump, or expired) is dropped and fetched again once.

use crate::auth::Capability;
use nasd_proto::manager::{FileStat, Layout};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Most paths whose capabilities are kept; the cache is cleared when it is full.
pub const CAPCACHE_ENTRIES_MAX: usize = 4096;

/// What the manager said about a path when it granted capabilities.
#[derive(Clone, Debug)]
pub struct OpenFile {
    pub path: String,
    pub stat: FileStat,
    pub layout: Layout,
    /// `caps[i]` authorizes `layout.components[i]`; the manager mints them together, with one
    /// expiry and the same rights.
    pub caps: Vec<Capability>,
    /// When the capabilities were received, in Unix milliseconds.
    pub issued_ms: u64,
    /// Whether the components' `fs_specific` records were checked to name this file's inode.
    pub owner_checked: Arc<std::sync::atomic::AtomicBool>,
    /// How far writes under these capabilities may go (logical offset, exclusive): the end of
    /// the quota escrow the manager took for them (seed 002 §3.2), or
    /// [`nasd_proto::manager::WRITE_END_UNBOUNDED`].
    pub write_end: u64,
    /// The end-to-end policy a writer of the file follows (its directory's).
    pub policy: nasd_proto::manager::E2ePolicy,
    /// The file's end-to-end state, if it is encrypted (issue 10).
    pub e2e: Option<nasd_proto::manager::E2eState>,
    /// The encryption layer for this grant, once made (shared by the grant's clones: a
    /// reader's keys are unwrapped once, an upload's writer state lives here).
    pub crypt: Arc<tokio::sync::OnceCell<Arc<crate::e2e::crypt::CryptFile>>>,
    /// The parity groups' locks, shared by every stack built for this grant and its clones.
    pub group_locks: crate::striped::GroupLocks,
}

impl OpenFile {
    fn rights(&self) -> nasd_proto::Rights {
        self.caps[0].args.rights
    }
    fn expiry_ms(&self) -> u64 {
        self.caps
            .iter()
            .map(|c| c.args.expiry_ms)
            .min()
            .unwrap_or(0)
    }
    pub fn writable(&self) -> bool {
        self.rights().contains(nasd_proto::Rights::WRITE)
    }
    pub fn readable(&self) -> bool {
        self.rights().contains(nasd_proto::Rights::READ)
    }
    /// Whether the capabilities cover whole objects (no quota bounds their regions).
    pub fn whole(&self) -> bool {
        self.write_end == nasd_proto::manager::WRITE_END_UNBOUNDED
    }
    /// Where component `i` lives and what authorizes a request on it: the drive's address,
    /// the object, and its capability. For tools and tests that talk to one drive directly.
    pub fn component(&self, i: usize) -> Option<(&str, crate::object::Target, crate::Auth)> {
        let c = self.layout.components.get(i)?;
        let cap = self.caps.get(i)?;
        let t = crate::object::Target {
            partition: c.partition,
            object: c.object,
            protection: cap.args.min_protection,
        };
        Some((&c.addr, t, crate::Auth::Capability(cap.clone())))
    }
    /// Past three quarters of its lifetime.
    pub fn needs_renewal(&self, now_ms: u64) -> bool {
        let life = self.expiry_ms().saturating_sub(self.issued_ms);
        now_ms >= self.issued_ms + life / 4 * 3
    }
    /// Still accepted by the drives (a second of margin for clock skew and flight time).
    pub fn usable(&self, now_ms: u64) -> bool {
        now_ms + 1000 < self.expiry_ms()
    }
}

#[derive(Default)]
pub struct CapCache {
    map: Mutex<HashMap<(String, bool), Arc<OpenFile>>>,
}

impl CapCache {
    pub fn new() -> CapCache {
        CapCache::default()
    }

    /// A cached grant for `path` that allows writing (`write`) or reading, and is fresh
    /// (`fresh`: not due for renewal) or merely still usable.
    pub fn get(&self, path: &str, write: bool, fresh: bool, now_ms: u64) -> Option<Arc<OpenFile>> {
        let m = self.map.lock().expect("capcache lock");
        let ok = |o: &Arc<OpenFile>| {
            (if fresh {
                !o.needs_renewal(now_ms)
            } else {
                o.usable(now_ms)
            }) && if write { o.writable() } else { o.readable() }
        };
        let own = m.get(&(path.to_string(), write)).filter(|o| ok(o));
        // A write grant that includes READ serves reads too, unless a quota bounds its
        // regions (a read past them would be refused); only a write grant (which came with
        // the file's write lease) serves writes.
        let other = || {
            (!write)
                .then(|| {
                    m.get(&(path.to_string(), true))
                        .filter(|o| ok(o) && o.whole())
                })
                .flatten()
        };
        own.or_else(other).cloned()
    }

    pub fn put(&self, write: bool, o: OpenFile) -> Arc<OpenFile> {
        let mut m = self.map.lock().expect("capcache lock");
        if m.len() >= CAPCACHE_ENTRIES_MAX {
            m.clear();
        }
        let o = Arc::new(o);
        m.insert((o.path.clone(), write), o.clone());
        o
    }

    /// Forgets every grant for `path` (after a refusal, unlink or rename).
    pub fn invalidate(&self, path: &str) {
        let mut m = self.map.lock().expect("capcache lock");
        m.remove(&(path.to_string(), true));
        m.remove(&(path.to_string(), false));
    }

    pub fn clear(&self) {
        self.map.lock().expect("capcache lock").clear();
    }

    /// Forgets every grant for file `ino`, and for paths through the name `name` (a callback
    /// break: [`crate::callbacks`]).
    pub fn invalidate_broken(&self, ino: u64, name: &str) {
        self.map
            .lock()
            .expect("capcache lock")
            .retain(|(path, _), o| o.stat.ino != ino && !crate::callbacks::names(path, name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nasd_crypto::Key;
    use nasd_proto::manager::FileKind;
    use nasd_proto::*;

    fn of(path: &str, rights: Rights, issued: u64, expiry: u64) -> OpenFile {
        let args = CapabilityArgs {
            drive: DriveId(1),
            partition: PartitionId(1),
            object: ObjectId(16),
            region: Region::new(0, u64::MAX),
            rights,
            expiry_ms: expiry,
            audit_id: 0,
            min_protection: Protection::NONE,
            writer_key: None,
        };
        OpenFile {
            path: path.into(),
            stat: FileStat {
                ino: 1,
                kind: FileKind::File,
                mode: 0o644,
                uid: 0,
                gid: 0,
                owner: "a".into(),
                group: "b".into(),
                size: 0,
                mtime_us: 0,
                ctime_us: 0,
                nlink: 1,
                atime_us: 0,
                rdev: 0,
            },
            layout: manager::Layout::single(manager::Component {
                drive: DriveId(1),
                addr: "x".into(),
                suite: Suite::Blake3,
                partition: PartitionId(1),
                object: ObjectId(16),
                stale: false,
            }),
            caps: vec![crate::Capability::mint(
                Suite::Blake3,
                &Key::from_bytes([1; 32]),
                args,
                0,
                false,
            )],
            issued_ms: issued,
            owner_checked: Default::default(),
            write_end: manager::WRITE_END_UNBOUNDED,
            policy: manager::E2ePolicy::plaintext(),
            e2e: None,
            crypt: Default::default(),
            group_locks: crate::striped::group_locks(),
        }
    }

    /// A write grant whose regions a quota bounds is never used for reads (a read past its
    /// regions would be refused by the drive); a whole one is.
    #[test]
    fn only_whole_write_grants_serve_reads() {
        let c = CapCache::new();
        let rw = Rights::READ.union(Rights::WRITE);
        c.put(true, of("/w", rw, 1000, 5000));
        assert!(c.get("/w", false, true, 1000).is_some());
        c.put(
            true,
            OpenFile {
                write_end: 4096,
                ..of("/q", rw, 1000, 5000)
            },
        );
        assert!(c.get("/q", true, true, 1000).is_some());
        assert!(c.get("/q", false, true, 1000).is_none());
    }

    #[test]
    fn renews_at_three_quarters_and_serves_until_expiry() {
        let c = CapCache::new();
        c.put(false, of("/a", Rights::READ, 1000, 5000));
        assert!(c.get("/a", false, true, 3000).is_some());
        assert!(c.get("/a", false, true, 4000).is_none());
        assert!(c.get("/a", false, false, 3999).is_some());
        assert!(c.get("/a", false, false, 4001).is_none());
        assert!(
            c.get("/a", true, false, 1000).is_none(),
            "a read grant never serves a write"
        );
        c.invalidate("/a");
        assert!(c.get("/a", false, false, 1000).is_none());
    }

    #[test]
    fn a_write_grant_with_read_serves_reads() {
        let c = CapCache::new();
        c.put(
            true,
            of("/w", Rights::WRITE.union(Rights::READ), 0, 100_000),
        );
        assert!(c.get("/w", false, true, 10).is_some());
        c.put(true, of("/v", Rights::WRITE, 0, 100_000));
        assert!(c.get("/v", false, true, 10).is_none());
    }
}
