//! Who a request is: the nasd user each local uid acts as, with its own credentials, and the
//! ids the kernel sees for nasd's owners and groups (issue 20 §2; as NFS with per-user
//! Kerberos credentials and idmapping behaves).
//!
//! A mount serves its mounter alone unless it was made with `--allow-other` (root): then
//! every local uid acts as its own nasd user. The mounter's uid uses the mount's own login. A
//! uid named in the map file (`--users FILE`) acts as the nasd user it names, logging in with
//! the Ed25519 key file the line gives, else with the user's own saved login. Any other uid
//! acts as the nasd user of its local name, with the login that user saved under their home
//! directory (`nasd login`, their `~/.config/nasd/current` or `~/.local/share/nasd`). A uid
//! with neither is refused (`EACCES`): the mount never acts for anyone with the mounter's
//! rights. Permissions are always the manager's for that user; the kernel checks modes too
//! (`default_permissions`), so a cached name never lets a user past a directory they may not
//! search.
//!
//! Ids both ways: a nasd owner or group shows as the local id the map gives it, else the local
//! user or group of the same name, else [`OVERFLOW_ID`] (NFS's `nobody`); a `chown` to a local
//! id names the nasd user or group the same way. The mounter's nasd user shows as the
//! mounter. A mount without `--allow-other` shows the manager's own numbers, as before.
//!
//! Map file, one entry per line (`#` starts a comment):
//!
//! ```text
//! user  LOCAL_UID  NASD_USER  [KEY_FILE]
//! group LOCAL_GID  NASD_GROUP
//! ```

use nasd_client::config::{ClientFile, ConfigSearch, CredentialChoice};
use nasd_client::e2e::keyring::IdentitySource;
use nasd_client::files::Client;
use nasd_proto::manager::{Credential, FileStat};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The id shown for a nasd owner or group no local id stands for (NFS's `nobody`).
pub const OVERFLOW_ID: u32 = 65534;
/// How long a uid whose login failed is refused before it is tried again, in ms.
pub const LOGIN_RETRY_MS: u64 = 5_000;
/// Most entries of a map file (and of the name caches).
pub const MAP_ENTRIES_MAX: usize = 65_536;

/// Why a map file was refused.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}: {why}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        why: String,
    },
}

/// One `user` line of the map file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserEntry {
    pub uid: u32,
    pub name: String,
    pub key_file: Option<PathBuf>,
}

/// The map file: local ids and the nasd names they stand for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdMap {
    pub users: Vec<UserEntry>,
    /// (local gid, nasd group)
    pub groups: Vec<(u32, String)>,
}

impl IdMap {
    pub fn read(path: &Path) -> Result<IdMap, MapError> {
        let text = std::fs::read_to_string(path).map_err(|source| MapError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        IdMap::parse(&text).map_err(|(line, why)| MapError::Line {
            path: path.to_path_buf(),
            line,
            why,
        })
    }

    /// The map in `text`; an error names the line (from 1) and what is wrong with it.
    pub fn parse(text: &str) -> Result<IdMap, (usize, String)> {
        let mut m = IdMap::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("");
            let f: Vec<&str> = line.split_whitespace().collect();
            let bad = |why: &str| Err((i + 1, why.to_string()));
            let id = |s: &str| {
                s.parse::<u32>()
                    .map_err(|_| (i + 1, format!("{s}: not an id")))
            };
            match f.as_slice() {
                [] => continue,
                ["user", uid, name] | ["user", uid, name, _] => m.users.push(UserEntry {
                    uid: id(uid)?,
                    name: name.to_string(),
                    key_file: f.get(3).map(PathBuf::from),
                }),
                ["group", gid, name] => m.groups.push((id(gid)?, name.to_string())),
                _ => return bad("expected `user UID NAME [KEY_FILE]` or `group GID NAME`"),
            }
            if m.users.len() + m.groups.len() > MAP_ENTRIES_MAX {
                return bad("too many entries");
            }
        }
        Ok(m)
    }
}

/// What the mount is told about its users.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Serve every local uid as its own nasd user (root only).
    pub allow_other: bool,
    pub map: IdMap,
}

/// What runs on each client the mount makes.
pub type OnLogin = Box<dyn Fn(&Arc<Client>) + Send + Sync>;

/// A uid's login: its client, or when it failed (refused until [`LOGIN_RETRY_MS`] later).
enum Login {
    Ok(Arc<Client>),
    Failed { at_ms: u64 },
}

/// The users of a mount and their clients.
pub struct Users {
    /// The mounter's local uid, and its client (the mount's own login).
    mounter: u32,
    own: Arc<Client>,
    allow_other: bool,
    map: IdMap,
    logins: Mutex<HashMap<u32, Login>>,
    /// Run on each client made for a uid (the mount starts its callback channel).
    on_login: OnceLock<OnLogin>,
    rt: tokio::runtime::Handle,
}

impl Users {
    pub fn new(own: Arc<Client>, rt: tokio::runtime::Handle, o: Options) -> Users {
        // SAFETY: getuid has no preconditions.
        let mounter = unsafe { libc::getuid() };
        Users {
            mounter,
            own,
            allow_other: o.allow_other,
            map: o.map,
            logins: Mutex::default(),
            on_login: OnceLock::new(),
            rt,
        }
    }

    /// Sets what runs on every client made from now on (and on the mount's own, at once).
    pub fn on_login(&self, f: OnLogin) {
        f(&self.own);
        let _ = self.on_login.set(f);
    }

    /// The mount's own client (its mounter's login).
    pub fn own(&self) -> &Arc<Client> {
        &self.own
    }

    /// Every client logged in now (for the cache policy: callbacks must reach them all).
    pub fn clients(&self) -> Vec<Arc<Client>> {
        let logins = self.logins.lock().expect("logins lock");
        std::iter::once(self.own.clone())
            .chain(logins.values().filter_map(|l| match l {
                Login::Ok(c) => Some(c.clone()),
                Login::Failed { .. } => None,
            }))
            .collect()
    }

    /// The client that acts for local uid `uid`, or `None` when it has no login (the request
    /// is refused with `EACCES`).
    pub fn client(&self, uid: u32) -> Option<Arc<Client>> {
        if uid == self.mounter || !self.allow_other {
            // Without --allow-other the kernel lets only the mounter in.
            return Some(self.own.clone());
        }
        let now = now_ms();
        if let Some(l) = self.logins.lock().expect("logins lock").get(&uid) {
            match l {
                Login::Ok(c) => return Some(c.clone()),
                Login::Failed { at_ms } if now < at_ms + LOGIN_RETRY_MS => return None,
                Login::Failed { .. } => {}
            }
        }
        let made = self.rt.block_on(self.log_in(uid));
        let mut logins = self.logins.lock().expect("logins lock");
        if let Some(Login::Ok(c)) = logins.get(&uid) {
            // Another request logged this uid in meanwhile.
            return Some(c.clone());
        }
        match made {
            Ok(c) => {
                if let Some(f) = self.on_login.get() {
                    f(&c);
                }
                logins.insert(uid, Login::Ok(c.clone()));
                Some(c)
            }
            Err(why) => {
                tracing::warn!(uid, "local user refused: {why}");
                logins.insert(uid, Login::Failed { at_ms: now });
                None
            }
        }
    }

    /// Logs local uid `uid` in as its nasd user (see the module comment).
    async fn log_in(&self, uid: u32) -> Result<Arc<Client>, String> {
        let entry = self.map.users.iter().find(|e| e.uid == uid);
        let local = passwd_by_uid(uid);
        let name = match (entry, &local) {
            (Some(e), _) => e.name.clone(),
            (None, Some((n, _))) => n.clone(),
            (None, None) => return Err("no map entry and no local user name".into()),
        };
        if let Some(key) = entry.and_then(|e| e.key_file.as_deref()) {
            return self.key_login(&name, key).await;
        }
        let home = local
            .map(|(_, h)| h)
            .ok_or_else(|| format!("{name}: no home directory to find a saved login in"))?;
        self.saved_login(uid, &name, &home).await
    }

    /// A login as `name` with the Ed25519 key file `key`, at the mount's own cluster.
    async fn key_login(&self, name: &str, key: &Path) -> Result<Arc<Client>, String> {
        private_to(key, None)?;
        let signing_key = nasd_client::userkey::read_secret(key)
            .map_err(|e| format!("{}: {e}", key.display()))?;
        let mut cfg = self.own.cluster_config();
        cfg.user = name.to_string();
        cfg.credential = Credential::Password(String::new().into());
        cfg.signing_key = Some(signing_key);
        let c = Client::connect(cfg).await.map_err(|e| e.to_string())?;
        c.set_identity_source(IdentitySource::Login { cache: None });
        Ok(c)
    }

    /// The login `name` saved under their home directory, if it is for this cluster.
    async fn saved_login(&self, uid: u32, name: &str, home: &Path) -> Result<Arc<Client>, String> {
        let search = ConfigSearch {
            config: None,
            data: None,
            xdg_config_home: None,
            home: Some(home.to_path_buf()),
        };
        let found = search.find().map_err(|e| e.to_string())?;
        private_to(&found.path, Some(uid))?;
        let file = ClientFile::load(&found.path).map_err(|e| e.to_string())?;
        if file.user != name {
            return Err(format!(
                "{}: the saved login is {}'s, not {name}'s",
                found.path.display(),
                file.user
            ));
        }
        let cfg = file
            .session_config(&found.path, CredentialChoice::default())
            .map_err(|e| e.to_string())?;
        if !matches!(cfg.credential, Credential::Token(_)) {
            return Err(format!("{name} has no saved session (`nasd login`)"));
        }
        if cfg.manager != self.own.cluster_config().manager {
            return Err(format!("{name}'s saved login is for another cluster"));
        }
        let cache = nasd_client::config::e2e_key_path(&found.path, name);
        let c = Client::connect(cfg).await.map_err(|e| e.to_string())?;
        c.set_identity_source(IdentitySource::Login { cache: Some(cache) });
        Ok(c)
    }

    /// The local uid a file's owner shows as.
    pub fn local_uid(&self, st: &FileStat) -> u32 {
        if !self.allow_other {
            return st.uid;
        }
        if st.owner == self.own.user() {
            return self.mounter;
        }
        match self.map.users.iter().find(|e| e.name == st.owner) {
            Some(e) => e.uid,
            None => passwd_by_name(&st.owner).unwrap_or(OVERFLOW_ID),
        }
    }

    /// The local gid a file's group shows as.
    pub fn local_gid(&self, st: &FileStat) -> u32 {
        if !self.allow_other {
            return st.gid;
        }
        match self.map.groups.iter().find(|(_, n)| *n == st.group) {
            Some((g, _)) => *g,
            None => group_by_name(&st.group).unwrap_or(OVERFLOW_ID),
        }
    }

    /// The nasd user a `chown` to local uid `uid` names (a decimal id without
    /// `--allow-other`: the kernel's numbers are the manager's then).
    pub fn nasd_user(&self, uid: u32) -> Option<String> {
        if !self.allow_other {
            return Some(uid.to_string());
        }
        if uid == self.mounter {
            return Some(self.own.user().to_string());
        }
        match self.map.users.iter().find(|e| e.uid == uid) {
            Some(e) => Some(e.name.clone()),
            None => passwd_by_uid(uid).map(|(n, _)| n),
        }
    }

    /// The nasd group a `chgrp` to local gid `gid` names.
    /// Whether every local user acts as their own nasd user here (`--allow-other`), local
    /// ids standing for nasd names.
    pub fn shared(&self) -> bool {
        self.allow_other
    }

    pub fn nasd_group(&self, gid: u32) -> Option<String> {
        if !self.allow_other {
            return Some(gid.to_string());
        }
        match self.map.groups.iter().find(|(g, _)| *g == gid) {
            Some((_, n)) => Some(n.clone()),
            None => group_by_gid(gid),
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Refuses a credential file others may read or change, or one owned by someone other than
/// `owner` (or root).
fn private_to(path: &Path, owner: Option<u32>) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if md.mode() & 0o022 != 0 {
        return Err(format!("{}: writable by others", path.display()));
    }
    if let Some(o) = owner.filter(|&o| md.uid() != o && md.uid() != 0) {
        return Err(format!("{}: not owned by uid {o}", path.display()));
    }
    Ok(())
}

/// Scratch space for the reentrant `getpw*`/`getgr*` calls.
const NSS_BUFFER_BYTES: usize = 16 << 10;

/// The name and home directory of local uid `uid`.
fn passwd_by_uid(uid: u32) -> Option<(String, PathBuf)> {
    let mut buf = vec![0u8; NSS_BUFFER_BYTES];
    // SAFETY: an all-zero passwd is a valid out parameter.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives the reads of `pw` below.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    if r != 0 || out.is_null() {
        return None;
    }
    // SAFETY: on success both fields point at NUL-terminated strings in `buf`.
    let (name, dir) = unsafe { (CStr::from_ptr(pw.pw_name), CStr::from_ptr(pw.pw_dir)) };
    Some((
        name.to_string_lossy().into_owned(),
        PathBuf::from(dir.to_string_lossy().into_owned()),
    ))
}

/// The local uid of user `name`.
fn passwd_by_name(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    let mut buf = vec![0u8; NSS_BUFFER_BYTES];
    // SAFETY: an all-zero passwd is a valid out parameter.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call.
    let r = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        )
    };
    (r == 0 && !out.is_null()).then_some(pw.pw_uid)
}

/// The local gid of group `name`.
fn group_by_name(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    let mut buf = vec![0u8; NSS_BUFFER_BYTES];
    // SAFETY: an all-zero group is a valid out parameter.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call.
    let r = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut gr,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        )
    };
    (r == 0 && !out.is_null()).then_some(gr.gr_gid)
}

/// The name of local group `gid`.
fn group_by_gid(gid: u32) -> Option<String> {
    let mut buf = vec![0u8; NSS_BUFFER_BYTES];
    // SAFETY: an all-zero group is a valid out parameter.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call.
    let r = unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    if r != 0 || out.is_null() {
        return None;
    }
    // SAFETY: on success `gr_name` points at a NUL-terminated string in `buf`.
    Some(
        unsafe { CStr::from_ptr(gr.gr_name) }
            .to_string_lossy()
            .into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_files_parse_and_name_the_bad_line() {
        let m = IdMap::parse(
            "# local ids\nuser 1000 alice\nuser 65534 pjd /k/pjd.key  # a key user\n\ngroup 65534 nog\n",
        )
        .unwrap();
        assert_eq!(
            m.users,
            vec![
                UserEntry {
                    uid: 1000,
                    name: "alice".into(),
                    key_file: None
                },
                UserEntry {
                    uid: 65534,
                    name: "pjd".into(),
                    key_file: Some("/k/pjd.key".into())
                },
            ]
        );
        assert_eq!(m.groups, vec![(65534, "nog".to_string())]);
        assert_eq!(IdMap::parse("user x alice").unwrap_err().0, 1);
        assert_eq!(IdMap::parse("\nhost 1 a").unwrap_err().0, 2);
    }

    #[test]
    fn local_names_resolve_both_ways() {
        assert_eq!(passwd_by_uid(0).map(|(n, _)| n).as_deref(), Some("root"));
        assert_eq!(passwd_by_name("root"), Some(0));
        assert_eq!(group_by_gid(0).as_deref(), Some("root"));
        assert_eq!(group_by_name("root"), Some(0));
        assert_eq!(passwd_by_name("no-such-user-here"), None);
    }
}
