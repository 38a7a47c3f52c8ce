//! nasd as a mounted directory (`nasd mount`): a FUSE file system on `fuser` whose every
//! operation goes through the nasd client library, so data moves straight between this host
//! and the drives and is verified here before the kernel sees a byte (the mount is a nasd
//! client, the manager stays off the data path: seed 002 §3).
//!
//! The kernel names files by inode number; the manager's inode numbers are used as they are
//! (the mount's root answers to FUSE's root number 1), and [`Inodes`] remembers the path each
//! number was last seen under, since the manager is addressed by path. An open file is one
//! [`nasd_client::handle::FileHandle`] per inode, shared by all its descriptors (`open`, which
//! also keeps a size this mount answers from going back behind its own commits): reads read
//! ahead (a large file opened read-only with direct I/O, so the kernel copies each reply
//! once), writes are held and sent behind, and what a file is given is staged and lands when
//! it is closed (or synced): close-to-open consistency, as NFS gives. A new file has its name
//! from `create` on (an empty version at the manager). Symbolic links never lead out of the
//! mount ([`links`]).
//! The client holds AFS callbacks (seed 002 §3.2), and while its channel polls the kernel
//! keeps pages across opens and names and attributes for a second: another client's change
//! breaks the callback, and [`invalidate`] drops what the kernel kept before the change
//! returns. Without the channel nothing is kept (a zero time to live, pages dropped at
//! open), so a file closed on one mount is still seen whole on every other at its next open.
//! Record locks and `flock` are held at the manager ([`locks`]), so they hold across mounts.
//! Every kernel request passes [`metered::Metered`], which counts it for `--metrics`.

mod errno;
mod fs;
mod inodes;
mod invalidate;
mod kernel;
pub mod links;
mod locks;
pub mod metered;
mod open;
pub mod users;

pub use errno::errno_of;
pub use fs::NasdFs;
pub use inodes::Inodes;
pub use users::{IdMap, Options, Users};

use nasd_client::files::Client;
use std::path::Path;
use std::sync::Arc;

/// Event-loop threads serving the kernel's requests (each waits on the cluster in turn).
pub const FUSE_THREADS: usize = 4;

/// The mount options nasd uses: named `nasd`, no device files, no set-user-id. A mount for
/// every local user (`allow_other`) lets the kernel check modes too (`default_permissions`),
/// so a name it cached for one user never lets another past a directory they may not search.
fn config(allow_other: bool) -> fuser::Config {
    let mut c = fuser::Config::default();
    c.mount_options = vec![
        fuser::MountOption::FSName("nasd".into()),
        fuser::MountOption::Subtype("nasd".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if allow_other {
        c.mount_options.push(fuser::MountOption::DefaultPermissions);
        c.acl = fuser::SessionACL::All;
    }
    c.n_threads = Some(FUSE_THREADS);
    c
}

/// Mounts the cluster's directory `remote` at `mountpoint` and serves it until it is
/// unmounted (`nasd umount`, `umount`, `fusermount3 -u`). Blocking; `rt` runs the clients.
/// `client` is the mounter's login; `options` says whether other local users are served;
/// `metrics` counts every request ([`metered`]).
pub fn serve(
    client: Arc<Client>,
    rt: tokio::runtime::Handle,
    remote: &str,
    mountpoint: &Path,
    options: Options,
    metrics: Option<Arc<metered::MountMetrics>>,
) -> std::io::Result<()> {
    let allow_other = options.allow_other;
    let users = Arc::new(Users::new(client, rt.clone(), options));
    let fs = NasdFs::new(
        users.clone(),
        rt.clone(),
        remote,
        &mountpoint.canonicalize()?,
    )?;
    let inodes = fs.inodes();
    let fs = metered::Metered::new(fs, metrics);
    let session = fuser::Session::new(fs, mountpoint, &config(allow_other))?;
    if let Err(e) = raise_readahead(mountpoint) {
        tracing::debug!("kernel read-ahead of the mount left at its default: {e}");
    }
    let hook = invalidate::hook(session.notifier(), inodes);
    users.on_login(Box::new(move |c| invalidate::watch(c, &rt, hook.clone())));
    session.run()
}

/// The kernel reads ahead at most its backing device's `read_ahead_kb` (128 KiB by default)
/// and FUSE's init may only lower it; raising it for this mount (root may) lets sequential
/// reads arrive as requests of up to 1 MiB, several in flight, up to
/// [`fs::MAX_READAHEAD_BYTES`] ahead (seed 002 §4.5's largest window). The mount is found in
/// `/proc/self/mountinfo`, since a `stat` of it would wait for this very file system.
fn raise_readahead(mountpoint: &Path) -> std::io::Result<()> {
    let want = mountpoint.canonicalize()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let dev = info
        .lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let point = unescape_mountinfo(f.get(4)?);
            (Path::new(&point) == want).then(|| f.get(2).map(|d| d.to_string()))?
        })
        .ok_or_else(|| std::io::Error::other("the mount is not in /proc/self/mountinfo"))?;
    std::fs::write(
        format!("/sys/class/bdi/{dev}/read_ahead_kb"),
        (fs::MAX_READAHEAD_BYTES / 1024).to_string(),
    )
}

/// A mount point as `/proc/self/mountinfo` spells it: space, tab, newline and backslash as
/// `\ooo` octal escapes.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
        let value = octal.and_then(|o| {
            let v = o.iter().fold(0u32, |v, &c| v * 8 + u32::from(c - b'0'));
            u8::try_from(v).ok()
        });
        match (b[i], value) {
            (b'\\', Some(v)) => {
                out.push(v);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts `mountpoint` (the kernel ends the serving process's session).
pub fn unmount(mountpoint: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EPERM) {
        return Err(e);
    }
    // Not root: the setuid helper unmounts what this user mounted.
    let s = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(mountpoint)
        .status()?;
    if s.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("fusermount3 -u exited {s}")))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(super::unescape_mountinfo("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(super::unescape_mountinfo("/mnt/x\\134y"), "/mnt/x\\y");
        assert_eq!(super::unescape_mountinfo("/plain\\9"), "/plain\\9");
    }
}
