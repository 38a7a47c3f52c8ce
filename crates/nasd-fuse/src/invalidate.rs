//! Callback breaks (seed 002 §3.2) turned into the kernel's cache invalidations. While the
//! client's callback channel polls, the mount lets the kernel keep a file's pages across opens
//! and its names and attributes for [`crate::fs::CACHED_TTL`]; a break for a file drops its
//! pages and attributes before the break is acknowledged (so another client's store returns
//! only once this kernel forgot the old bytes), and a break for a name drops that directory
//! entry; a break of a directory also drops every name the kernel keeps as absent in it. A
//! reset (`ino` 0: the channel failed or the manager restarted) drops every inode the mount
//! has shown and every absence.
//!
//! Entries are dropped on a thread of their own: the kernel takes the directory's lock for
//! that, which a request of this mount may hold while it waits on the manager, and the
//! manager may be waiting for this very acknowledgement.

use crate::inodes::Inodes;
use fuser::{INodeNo, Notifier};
use nasd_client::files::Client;
use nasd_proto::manager::CallbackBreak;
use std::ffi::OsString;
use std::sync::Arc;

/// Makes the hook that hands a client's callback breaks to the kernel through `n`; each
/// client of the mount (every user's) gets it with [`watch`].
pub fn hook(n: Notifier, inodes: Arc<Inodes>) -> nasd_client::callbacks::BreakHook {
    let (tx, rx) = std::sync::mpsc::channel::<(u64, OsString)>();
    let entries = n.clone();
    std::thread::spawn(move || {
        for (parent, name) in rx {
            // The kernel may not know the entry: nothing to drop.
            let _ = entries.inval_entry(INodeNo(parent), &name);
        }
    });
    let tx = std::sync::Mutex::new(tx);
    Arc::new(move |b: &CallbackBreak| {
        let tx = tx.lock().expect("entries channel lock");
        if b.ino == 0 {
            for ino in inodes.known() {
                let _ = n.inval_inode(INodeNo(ino), 0, 0);
            }
            for (dir, name) in inodes.take_absent(None) {
                let _ = tx.send((dir, OsString::from(name)));
            }
            return;
        }
        let ino = inodes.fuse_ino(b.ino);
        let _ = n.inval_inode(INodeNo(ino), 0, 0);
        // A directory's break (a name made there) drops every absence the kernel keeps in it.
        for (dir, name) in inodes.take_absent(Some(ino)) {
            let _ = tx.send((dir, OsString::from(name)));
        }
        if b.parent != 0 && !b.name.is_empty() {
            let _ = tx.send((inodes.fuse_ino(b.parent), OsString::from(&b.name)));
        }
    })
}

/// Starts `client`'s callback channel with `hook` on its breaks.
pub fn watch(
    client: &Arc<Client>,
    rt: &tokio::runtime::Handle,
    hook: nasd_client::callbacks::BreakHook,
) {
    client.callbacks.add_hook(hook);
    let _entered = rt.enter();
    client.enable_callbacks();
}
