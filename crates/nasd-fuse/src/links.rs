//! Symbolic links that never lead out of the mount. The kernel follows what `readlink`
//! answers on the host: an absolute target from the host's root, and `..` at the mount's root
//! up into the host's directories. A link is a cluster user's word, so a target `/etc/passwd`
//! stored by another user (with the CLI, on another host) would lead a write through the
//! mount to the host's own file. So the mount answers `readlink` in the cluster's terms, as
//! the CLI and the gateway read a link (`nasd ln -s /a/b` names the cluster's `/a/b`):
//!
//! - an absolute target names a cluster path: shown under the mount point (`/a/b` as
//!   `MOUNT/a/b` in a mount of the cluster's root, `/sub/x` as `MOUNT/x` in a mount of
//!   `/sub`), `..` stopping at the cluster's root; one outside the mounted directory reads
//!   as a name under `MOUNT/.nasd-outside/`, which names nothing, so the link dangles;
//! - a relative target that first climbs with `..` no higher than the mount's root and then
//!   only descends is shown as stored (nearly every relative link: `libc.so.6`,
//!   `../lib/x`); the kernel then walks only directories inside the mount, and each link it
//!   meets is answered the same way. Any other relative target (a `..` after a name, whose
//!   meaning would depend on where a link in the middle leads, or one that climbs past the
//!   mount's root) is shown as its lexical form under the mount point, or dangling.
//!
//! A link made through the mount to a path under the mount point is stored as the cluster
//! path, so it reads back as made and means the same file on every host, whatever its mount
//! point. A link made to a host path outside the mount (`ln -s /usr/bin/python3`) is stored as
//! given and, like every absolute target, names the cluster's path of that name: links do not
//! leave the mount (Linux's `nosymfollow` for them, without its cost to links inside).

/// The directory a target outside the mounted one is shown under: it names nothing.
pub const OUTSIDE_DIR: &str = ".nasd-outside";

/// How this mount turns stored link targets into what `readlink` answers, and back.
pub struct Links {
    /// The mounted cluster directory (`/` or `/sub`).
    remote: String,
    /// Where it is mounted on the host, absolute and canonical.
    mountpoint: String,
}

impl Links {
    pub fn new(remote: &str, mountpoint: &str) -> Links {
        Links {
            remote: normalize(&parts(remote)).join("/"),
            mountpoint: mountpoint.trim_end_matches('/').to_string(),
        }
    }

    /// What `readlink` answers for the link at cluster path `link` whose stored target is
    /// `target`.
    pub fn shown(&self, link: &str, target: &str) -> String {
        let remote = parts(&self.remote);
        if !target.starts_with('/') {
            let depth = parts(link).len().saturating_sub(remote.len() + 1);
            if climbs_then_descends(target, depth) {
                return target.to_string();
            }
            // Resolved lexically from the link's directory, `..` allowed up to the mount's
            // root only.
            let mut dir = parts(link);
            dir.pop();
            let here = dir.split_off(remote.len().min(dir.len()));
            return match inside(&here, &parts(target)) {
                Some(rest) => self.under_mount(&rest),
                None => self.outside(target),
            };
        }
        let full = normalize(&parts(target));
        match full.strip_prefix(remote.as_slice()) {
            Some(rest) => self.under_mount(rest),
            None => self.outside(target),
        }
    }

    /// What to store for a link made through the mount with `target`: a path under the mount
    /// point becomes the cluster path it names; anything else is kept as given.
    pub fn stored(&self, target: &str) -> String {
        let under = target
            .strip_prefix(&self.mountpoint)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'));
        match under {
            Some(rest) if target.starts_with('/') => {
                let mut p = parts(&self.remote);
                p.extend(parts(rest));
                format!("/{}", p.join("/"))
            }
            _ => target.to_string(),
        }
    }

    fn under_mount(&self, rest: &[&str]) -> String {
        if rest.is_empty() {
            return self.mountpoint.clone();
        }
        format!("{}/{}", self.mountpoint, rest.join("/"))
    }

    fn outside(&self, target: &str) -> String {
        let flat: Vec<&str> = parts(target).into_iter().filter(|c| *c != "..").collect();
        format!("{}/{OUTSIDE_DIR}/{}", self.mountpoint, flat.join("/"))
    }
}

/// A path's components, without empty ones and `.`.
fn parts(p: &str) -> Vec<&str> {
    p.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect()
}

/// `p` with each `..` taking off the name before it, stopping at the root.
fn normalize<'a>(p: &[&'a str]) -> Vec<&'a str> {
    let mut out = vec![];
    for c in p {
        match *c {
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether relative `target` is some `..` (at most `depth`, the link's directory's depth
/// below the mount's root) followed by names only.
fn climbs_then_descends(target: &str, depth: usize) -> bool {
    let p = parts(target);
    let ups = p.iter().take_while(|c| **c == "..").count();
    ups <= depth && p[ups..].iter().all(|c| *c != "..")
}

/// `rel` walked lexically from directory `here` (components below the mount's root), or
/// `None` if it climbs past the mount's root.
fn inside<'a>(here: &[&'a str], rel: &[&'a str]) -> Option<Vec<&'a str>> {
    let mut at = here.to_vec();
    for c in rel {
        match *c {
            ".." => {
                at.pop()?;
            }
            c => at.push(c),
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_targets_are_cluster_paths_under_the_mount_point() {
        let root = Links::new("/", "/mnt/n");
        assert_eq!(root.shown("/d/l", "/etc/passwd"), "/mnt/n/etc/passwd");
        assert_eq!(root.shown("/l", "/"), "/mnt/n");
        assert_eq!(root.shown("/l", "/../../etc/x"), "/mnt/n/etc/x");
        let sub = Links::new("/sub", "/mnt/n");
        assert_eq!(sub.shown("/sub/l", "/sub/a/b"), "/mnt/n/a/b");
        assert_eq!(
            sub.shown("/sub/l", "/etc/passwd"),
            "/mnt/n/.nasd-outside/etc/passwd"
        );
        assert_eq!(
            sub.shown("/sub/l", "/subway"),
            "/mnt/n/.nasd-outside/subway"
        );
    }

    #[test]
    fn relative_targets_stay_as_stored_unless_they_could_leave() {
        let root = Links::new("/", "/mnt/n");
        for (link, t) in [
            ("/a/b/l", "libc.so.6"),
            ("/a/b/l", "../x"),
            ("/a/b/l", "../../x/y"),
            ("/a/b/l", "./x"),
        ] {
            assert_eq!(root.shown(link, t), t, "{link} -> {t}");
        }
        // Past the mount's root: dangling, never the host's parent directory.
        assert_eq!(
            root.shown("/a/l", "../../etc/passwd"),
            "/mnt/n/.nasd-outside/etc/passwd"
        );
        // A `..` after a name is resolved here, lexically, inside the mount.
        assert_eq!(root.shown("/a/l", "x/.."), "/mnt/n/a");
        assert_eq!(root.shown("/l", "x/../.."), "/mnt/n/.nasd-outside/x");
        let sub = Links::new("/sub", "/mnt/n");
        assert_eq!(sub.shown("/sub/a/l", "../x"), "../x");
        assert_eq!(sub.shown("/sub/a/l", "../../x"), "/mnt/n/.nasd-outside/x");
    }

    #[test]
    fn links_made_to_the_mount_are_stored_as_cluster_paths() {
        let sub = Links::new("/sub", "/mnt/n");
        assert_eq!(sub.stored("/mnt/n/a/b"), "/sub/a/b");
        assert_eq!(sub.stored("/mnt/n"), "/sub");
        assert_eq!(sub.stored("/mnt/nx/a"), "/mnt/nx/a");
        assert_eq!(sub.stored("/usr/bin/python3"), "/usr/bin/python3");
        assert_eq!(sub.stored("rel/a"), "rel/a");
        let root = Links::new("/", "/mnt/n");
        assert_eq!(root.stored("/mnt/n/a"), "/a");
        assert_eq!(root.shown("/l", &root.stored("/mnt/n/a")), "/mnt/n/a");
    }
}
