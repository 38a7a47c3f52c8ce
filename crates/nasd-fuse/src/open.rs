//! Open files, one per inode and user. Every descriptor of a file one user has open on this
//! mount shares one [`FileHandle`], as every descriptor of a local file shares one inode: what
//! one writes, another reads at once, and the file has one size here, so `O_APPEND` writers
//! through different descriptors (the kernel places each append at the size it knows) never
//! land on each other. Users of a shared mount (`--allow-other`) each have their own handle,
//! since a handle writes with its user's credentials, as two clients would.
//!
//! The table also keeps the mount's answers about sizes from going back in time. A file's
//! size comes from its open handle while one is open (it knows what was written), and from
//! the manager otherwise. A manager stat that began before this mount committed a change and
//! ends after it would answer the old size; the kernel would take it (no write came after
//! the stat began) and place the next append on top of the last one. So an inode's first
//! open and last release hold its gate exclusively, a stat of a file not open holds it
//! shared ([`OpenFiles::view`]), and [`OpenFiles::epoch`] moves on after every commit this
//! mount makes, so a lookup that raced one (its inode was not known when it began) is taken
//! again.

use nasd_client::handle::FileHandle;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// A file open on this mount: its handle, the path it is at, its descriptors.
pub struct Open<H = FileHandle> {
    pub h: H,
    /// The kernel's inode number.
    pub ino: u64,
    /// The local user whose handle it is.
    pub uid: u32,
    path: Mutex<String>,
    /// Unlinked while open: kept under a hidden name until its last release.
    unlinked: AtomicBool,
    /// Descriptors (kernel file handles) sharing it.
    descriptors: AtomicUsize,
}

impl<H> Open<H> {
    pub fn path(&self) -> String {
        self.path.lock().expect("open path lock").clone()
    }

    pub fn set_unlinked(&self) {
        self.unlinked.store(true, Ordering::Release);
    }

    pub fn unlinked(&self) -> bool {
        self.unlinked.load(Ordering::Acquire)
    }
}

/// A file's last release: the file, and what its final commit returned.
pub type Released<H, E> = (Arc<Open<H>>, Result<(), E>);

/// One inode's gate: its open files, by user. Exclusive for a user's first open and last
/// release, shared for a stat of the file.
struct Node<H> {
    open: RwLock<HashMap<u32, Arc<Open<H>>>>,
}

impl<H> Default for Node<H> {
    fn default() -> Self {
        Node {
            open: RwLock::new(HashMap::new()),
        }
    }
}

pub struct OpenFiles<H = FileHandle> {
    /// By kernel inode number; a node stays while it is open or someone holds its gate.
    nodes: Mutex<HashMap<u64, Arc<Node<H>>>>,
    /// By kernel file handle.
    handles: Mutex<HashMap<u64, Arc<Open<H>>>>,
    next_fh: AtomicU64,
    /// Moves on after every commit this mount makes.
    epoch: AtomicU64,
}

impl Open {
    /// The file is at `path` now (a rename, or the hidden name of an unlinked file).
    pub fn moved(&self, path: &str) {
        self.h.moved(path);
        *self.path.lock().expect("open path lock") = path.to_string();
    }
}

impl<H> OpenFiles<H> {
    pub fn new() -> OpenFiles<H> {
        OpenFiles {
            nodes: Mutex::default(),
            handles: Mutex::default(),
            next_fh: AtomicU64::new(1),
            epoch: AtomicU64::new(0),
        }
    }

    /// A fresh number for a kernel file handle (files and directories share the space).
    pub fn next_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    fn node(&self, ino: u64) -> Arc<Node<H>> {
        self.nodes
            .lock()
            .expect("nodes lock")
            .entry(ino)
            .or_default()
            .clone()
    }

    /// Forgets `ino`'s node when nothing holds it (its gate free, no file open).
    fn prune(&self, ino: u64, node: Arc<Node<H>>) {
        let mut nodes = self.nodes.lock().expect("nodes lock");
        // The map's reference and `node`: nobody else holds the gate. A gate held elsewhere
        // (`try_read` fails) is pruned by its holder.
        let idle = node.open.try_read().is_ok_and(|o| o.is_empty());
        if Arc::strong_count(&node) == 2 && idle {
            nodes.remove(&ino);
        }
    }

    /// Opens a descriptor of user `uid` on inode `ino` at `path`: the file the user has open
    /// here already, or one `make` opens (under the inode's gate, so two first opens make one
    /// handle).
    pub fn open<E>(
        &self,
        ino: u64,
        uid: u32,
        path: &str,
        make: impl FnOnce() -> Result<H, E>,
    ) -> Result<(u64, Arc<Open<H>>), E> {
        let node = self.node(ino);
        let o = {
            let mut open = node.open.write().expect("node lock");
            let o = match open.get(&uid) {
                Some(o) => o.clone(),
                None => Arc::new(Open {
                    h: make()?,
                    ino,
                    uid,
                    path: Mutex::new(path.to_string()),
                    unlinked: AtomicBool::new(false),
                    descriptors: AtomicUsize::new(0),
                }),
            };
            open.insert(uid, o.clone());
            // Counted under the gate, so a last release either came before (and this makes a
            // new handle) or sees this descriptor.
            o.descriptors.fetch_add(1, Ordering::AcqRel);
            o
        };
        let fh = self.next_fh();
        self.handles
            .lock()
            .expect("handles lock")
            .insert(fh, o.clone());
        Ok((fh, o))
    }

    /// The file behind kernel file handle `fh`.
    pub fn get(&self, fh: u64) -> Option<Arc<Open<H>>> {
        self.handles.lock().expect("handles lock").get(&fh).cloned()
    }

    /// Ends descriptor `fh`. At the file's last descriptor `last` runs (the final commit)
    /// under the inode's gate, and the file is no longer open here, whatever `last` returned;
    /// the file is returned with `last`'s result then, so the caller can finish an unlinked
    /// one.
    pub fn release<E>(
        &self,
        fh: u64,
        last: impl FnOnce(&Open<H>) -> Result<(), E>,
    ) -> Option<Released<H, E>> {
        let o = self.handles.lock().expect("handles lock").remove(&fh)?;
        let node = self.node(o.ino);
        let r = {
            let mut open = node.open.write().expect("node lock");
            // A file with descriptors is its inode's open file for its user (the count moves
            // under the gate).
            debug_assert!(open.get(&o.uid).is_some_and(|n| Arc::ptr_eq(n, &o)));
            if o.descriptors.fetch_sub(1, Ordering::AcqRel) > 1 {
                None
            } else {
                let r = last(&o);
                self.committed();
                open.remove(&o.uid);
                Some(r)
            }
        };
        self.prune(o.ino, node);
        r.map(|r| (o, r))
    }

    /// Runs `f` with inode `ino`'s open files (every user's), while no first open or last
    /// release of it can happen.
    pub fn view<T>(&self, ino: u64, f: impl FnOnce(&[Arc<Open<H>>]) -> T) -> T {
        let node = self.node(ino);
        let r = {
            let open = node.open.read().expect("node lock");
            let all: Vec<Arc<Open<H>>> = open.values().cloned().collect();
            f(&all)
        };
        self.prune(ino, node);
        r
    }

    /// Notes that this mount committed a change (see the module comment).
    pub fn committed(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Every file open here (each once).
    pub fn all(&self) -> Vec<Arc<Open<H>>> {
        let mut v: Vec<Arc<Open<H>>> = self
            .handles
            .lock()
            .expect("handles lock")
            .values()
            .cloned()
            .collect();
        v.sort_by_key(|o| (o.ino, o.uid));
        v.dedup_by_key(|o| (o.ino, o.uid));
        v
    }

    /// The files open here at `path`.
    pub fn at(&self, path: &str) -> Vec<Arc<Open<H>>> {
        let mut v = self.all();
        v.retain(|o| o.path() == path);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads open and release one inode at random: every descriptor's file is the one the
    /// gate holds, each file is made once and finished once, and nothing stays behind. (The
    /// window this guards, a descriptor counted after the gate was let go, is a few
    /// instructions wide and needs a preemption inside it; the mount's black-box test of
    /// appenders beside a stat loop is the one that met it.)
    #[test]
    fn descriptors_of_one_inode_share_one_file_through_racing_opens_and_releases() {
        const THREADS: u64 = 8;
        const ROUNDS: u64 = 3_000;
        let files = Arc::new(OpenFiles::<u64>::new());
        let made = Arc::new(AtomicU64::new(0));
        let finished = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (files, made, finished) = (files.clone(), made.clone(), finished.clone());
                std::thread::spawn(move || {
                    let mut seed = 0x9e37_79b9 ^ t;
                    let mut held = vec![];
                    for _ in 0..ROUNDS {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        if held.is_empty() || seed % 3 != 0 {
                            let (fh, o) = files
                                .open(7, 0, "/f", || {
                                    Ok::<_, ()>(made.fetch_add(1, Ordering::AcqRel))
                                })
                                .unwrap();
                            files.view(7, |g| {
                                assert!(
                                    g.len() == 1 && Arc::ptr_eq(&g[0], &o),
                                    "one file per inode"
                                )
                            });
                            held.push(fh);
                        } else {
                            let fh = held.swap_remove((seed % held.len() as u64) as usize);
                            if let Some((o, r)) = files.release(fh, |_| Ok::<_, ()>(())) {
                                r.unwrap();
                                finished.lock().unwrap().push(o.h);
                            }
                        }
                    }
                    for fh in held {
                        if let Some((o, _)) = files.release(fh, |_| Ok::<_, ()>(())) {
                            finished.lock().unwrap().push(o.h);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut finished = finished.lock().unwrap().clone();
        finished.sort();
        let made = made.load(Ordering::Acquire);
        assert_eq!(
            finished,
            (0..made).collect::<Vec<_>>(),
            "each made file finished once"
        );
        assert!(files.view(7, |g| g.is_empty()), "nothing left open");
        assert!(files.nodes.lock().unwrap().is_empty(), "nodes pruned");
    }
}
