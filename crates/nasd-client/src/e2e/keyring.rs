//! The client's keys (seed 001 §3.2-3.3): its user's [`Identity`], the public keys of users
//! and groups it wraps file keys to, the group secrets it unwrapped, and the key files it
//! makes and opens.
//!
//! A new file's key is wrapped for every principal that may read it (requirements B.1):
//! its owner, the writer, its group when the mode lets the group read, "everyone" (the groups
//! all users are in) when the mode lets others read, and the directory policy's further
//! readers. A principal without a key pair gets no wrap: it cannot decrypt until the owner
//! shares the file again (`nasd share`). Public keys and group key pairs come from the manager
//! and are kept [`KEYS_TTL_MS`]; a group's secret, once unwrapped, for the client's life.
//! Groups' key pairs are made and wrapped by their members' clients ([`groups`]).

use super::identity::Identity;
use super::keylog::{Fingerprint, KeyLogView, Trust};
use crate::files::{now_ms, Client, FsError};
use crate::opaque::SeedKey;
use nasd_e2e::keys::{KeyFile, KeyVersion};
use nasd_e2e::{FileId, FileKey, Principal as KeyPrincipal, PublicKey, SecretKey};
use nasd_proto::manager::calls;
use nasd_proto::manager::{Credential, Enrollment, GroupKeyInfo, Principal, UserKeys};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

mod groups;
pub use groups::GroupSync;

/// How long fetched public keys and group key pairs are used before asking again, in ms: a
/// user's new key or a group's new key pair is picked up within this time.
pub const KEYS_TTL_MS: u64 = 60_000;

/// Most entries each key cache holds (then it starts over).
pub const KEY_CACHE_ENTRIES_MAX: usize = 4096;

/// The mode bits an encrypted file's readers follow ([`Client::readers_of`]): group read
/// (its group's wrap) and other read (the `everyone` groups').
pub const READER_MODE_BITS: u32 = 0o044;

/// Where this client's identity comes from.
#[derive(Clone)]
pub enum IdentitySource {
    /// Its login: a password unseals the seed kept at the manager (or makes one), a login key
    /// derives it, a saved token finds it in the cache file.
    Login { cache: Option<PathBuf> },
    /// Another client's identity, of the same user (a pool of connections).
    Borrowed(Arc<Identity>),
    /// A gateway's client acting for a user decrypts with the gateway's own identity (files it
    /// serves are wrapped for it by their directory's policy), but only where the user's own
    /// client would: a key version wrapped for the user or a group of theirs (issue 21 §6; an
    /// `unshare` reaches the gateway too).
    Delegate {
        identity: Arc<Identity>,
        user: Principals,
    },
}

/// A user and the groups they belong to, as the manager counts them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principals {
    pub name: String,
    pub uid: u32,
    pub gids: Vec<u32>,
}

impl Principals {
    /// Whether key file `kf` holds key version `kv` for one of these principals.
    fn reads(&self, kf: &KeyFile, kv: KeyVersion) -> bool {
        std::iter::once(KeyPrincipal::User(self.uid))
            .chain(self.gids.iter().map(|&g| KeyPrincipal::Group(g)))
            .any(|p| kf.find(p, kv).is_some())
    }
}

/// The client's keys (module docs).
pub struct Keyring {
    source: Mutex<IdentitySource>,
    /// An identity that replaced the one loaded (after a key rotation).
    rotated: Mutex<Option<Arc<Identity>>>,
    /// The key that seals this user's seed (from the password login's OPAQUE export key).
    seed_key: Mutex<Option<Arc<SeedKey>>>,
    identity: tokio::sync::OnceCell<Arc<Identity>>,
    /// The checked copy of the manager's key log: users' public keys come from it.
    key_log: tokio::sync::Mutex<KeyLogState>,
    /// Set when a key changed: the log is read again at its next use.
    key_log_stale: std::sync::atomic::AtomicBool,
    groups: Mutex<HashMap<u32, (GroupKeyInfo, u64)>>,
    group_secrets: Mutex<HashMap<(u32, u32), Arc<SecretKey>>>,
    /// Groups whose key pair or missing wraps this client last tried to make, and when: not
    /// tried again for [`KEYS_TTL_MS`], so every read or write of a file of such a group does
    /// not pay the round trips of an attempt (`nasd group sync` always tries).
    group_attempts: Mutex<HashMap<u32, u64>>,
    /// Groups without a current key pair whose cached answer a grant confirmed, and when
    /// (`keyring/groups.rs`).
    group_confirmed: Mutex<HashMap<u32, u64>>,
    /// Set when this client made its user's first keys: their groups lacking a key pair get
    /// one next ([`Client::identity`]).
    first_made: std::sync::atomic::AtomicBool,
    /// The newest version of each file this client verified (issue 21 §7).
    fresh: Mutex<super::fresh::Freshness>,
}

impl Default for Keyring {
    fn default() -> Keyring {
        Keyring {
            source: Mutex::new(IdentitySource::Login { cache: None }),
            seed_key: Mutex::new(None),
            rotated: Mutex::new(None),
            identity: Default::default(),
            key_log: Default::default(),
            key_log_stale: Default::default(),
            groups: Default::default(),
            group_secrets: Default::default(),
            group_attempts: Default::default(),
            group_confirmed: Default::default(),
            first_made: Default::default(),
            fresh: Default::default(),
        }
    }
}

/// The client's copy of the key log, where it is kept, and when it was last read.
#[derive(Default)]
pub(crate) struct KeyLogState {
    pub(crate) view: KeyLogView,
    /// Where the copy is kept (beside the identity's cache file; none for a borrowed or a
    /// delegated identity, whose copy lives in memory).
    path: Option<PathBuf>,
    loaded: bool,
    /// When the log was last read from the manager (0: not yet, or a key changed since).
    synced_ms: u64,
}

fn put_bounded<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, V>, k: K, v: V) {
    if m.len() >= KEY_CACHE_ENTRIES_MAX {
        m.clear();
    }
    m.insert(k, v);
}

fn e2e_err(path: &str, what: impl std::fmt::Display) -> FsError {
    FsError::E2e {
        path: path.into(),
        detail: what.to_string(),
    }
}

impl Client {
    /// Where this client's identity comes from (the binary names the cache file beside the
    /// session token; a gateway lends its own to the clients acting for users).
    pub fn set_identity_source(&self, source: IdentitySource) {
        *self.keyring.source.lock().expect("keyring lock") = source;
    }

    /// This client's user's identity: loaded, unsealed or made (and registered) on first use.
    /// This user's identity if it is loaded already (no manager round trip).
    pub(crate) fn keyring_identity(&self) -> Option<Arc<Identity>> {
        let rotated = self.keyring.rotated.lock().expect("keyring lock").clone();
        rotated.or_else(|| self.keyring.identity.get().cloned())
    }

    /// Makes `id` this client's identity from now on (a key rotation), and keeps it in the
    /// cache file.
    pub(crate) fn replace_identity(&self, id: Arc<Identity>) {
        if let IdentitySource::Login { cache: Some(p) } =
            &*self.keyring.source.lock().expect("keyring lock")
        {
            if let Err(e) = id.save(p) {
                tracing::warn!("could not keep the end-to-end key in {}: {e}", p.display());
            }
        }
        *self.keyring.rotated.lock().expect("keyring lock") = Some(id);
    }

    pub async fn identity(&self) -> Result<Arc<Identity>, FsError> {
        if let Some(id) = self.keyring.rotated.lock().expect("keyring lock").clone() {
            return Ok(id);
        }
        let id = self
            .keyring
            .identity
            .get_or_try_init(|| self.load_identity())
            .await
            .cloned()?;
        if self
            .keyring
            .first_made
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            self.first_group_keys().await;
        }
        Ok(id)
    }

    async fn load_identity(&self) -> Result<Arc<Identity>, FsError> {
        let source = self.keyring.source.lock().expect("keyring lock").clone();
        let cache = match source {
            IdentitySource::Borrowed(id) | IdentitySource::Delegate { identity: id, .. } => {
                return Ok(id)
            }
            IdentitySource::Login { cache } => cache,
        };
        let uid = self.uid().await?;
        let registered = self.user_keys(&[uid], true).await?.remove(&uid);
        let cached = cache.as_deref().and_then(|p| Identity::load(uid, p));
        let id = match (registered, cached) {
            (Some(keys), Some(id)) if id.matches(&keys) => id,
            (Some(keys), _) => self.registered_identity(uid, &keys)?,
            (None, _) => self.first_identity(uid).await?,
        };
        if let Some(p) = &cache {
            if let Err(e) = id.save(p) {
                tracing::warn!("could not keep the end-to-end key in {}: {e}", p.display());
            }
        }
        Ok(Arc::new(id))
    }

    /// The key that seals this user's seed, if this client logged in with the password.
    pub(crate) fn seed_key(&self) -> Option<Arc<SeedKey>> {
        self.keyring.seed_key.lock().expect("keyring lock").clone()
    }

    pub(crate) fn set_seed_key(&self, key: Option<Arc<SeedKey>>) {
        *self.keyring.seed_key.lock().expect("keyring lock") = key;
    }

    /// The identity whose public keys are registered as `keys`: derived from the login key,
    /// or unsealed with the key this password login gave (or, at the login that moves an
    /// account made before manager protocol 15, with the password itself).
    fn registered_identity(&self, uid: u32, keys: &UserKeys) -> Result<Identity, FsError> {
        let me = self.cfg_user();
        let id = match (&self.cfg.signing_key, &self.cfg.credential, self.seed_key()) {
            (Some(k), _, _) => Identity::from_login_key(uid, k.expose()),
            (None, _, Some(sk)) if crate::opaque::is_export_sealed(&keys.sealed) => {
                Identity::unseal_with(uid, &keys.sealed, &sk)
                    .map_err(|e| e2e_err("/", format!("{me}: {e}")))?
            }
            (None, Credential::LegacyPassword(p), _) => {
                Identity::unseal_legacy(uid, &keys.sealed, p)
                    .map_err(|e| e2e_err("/", format!("{me}: {e}")))?
            }
            (None, Credential::Password(_), Some(_)) => {
                return Err(e2e_err(
                    "/",
                    format!(
                        "{me}: your end-to-end key is sealed under an earlier password file (an \
                         admin reset it) and this client does not keep it; files only your old \
                         key opened stay closed to you. An admin can reset your keys \
                         (nasd user reset-keys), and your next login makes new ones"
                    ),
                ))
            }
            _ => {
                return Err(e2e_err(
                    "/",
                    format!("{me}: this client has no end-to-end key; log in with your password or key (nasd login)"),
                ))
            }
        };
        if !id.matches(keys) {
            return Err(e2e_err(
                "/",
                format!("{me}: the end-to-end keys at the manager are not this login's"),
            ));
        }
        Ok(id)
    }

    /// A user's first identity, made here (never by an admin's client) and registered as
    /// version 1 of their keys, signed by itself: derived from the login key of a key user,
    /// or random and sealed under this password login's key.
    async fn first_identity(&self, uid: u32) -> Result<Identity, FsError> {
        let me = self.cfg_user();
        let seed_key = self.seed_key();
        let id = match (&self.cfg.signing_key, &seed_key) {
            (Some(k), _) => Identity::from_login_key(uid, k.expose()),
            (None, Some(_)) => Identity::generate(uid),
            _ => {
                return Err(e2e_err(
                    "/",
                    format!("{me}: no end-to-end key yet; log in with your password or key once (nasd login)"),
                ))
            }
        };
        // Version 1, or the one after a reset of keys the user lost.
        let version = self
            .key_log(true)
            .await?
            .view
            .chain(uid)
            .map_or(1, |c| c.version.saturating_add(1));
        let set = calls::UserKeySet {
            user: me,
            keys: id.user_keys(version, None, seed_key.as_deref()),
        };
        self.call("/", set).await?;
        self.forget_user_keys();
        self.keyring
            .first_made
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(id)
    }

    /// Adds a user (admins), with no keys: a password user gets a one-time enrollment code
    /// (in the answer) with which their own client sets their password and makes their keys
    /// at their first login; a key user makes theirs at their first login. Both get group
    /// wraps from a member's client that holds them ([`Client::sync_group_keys`]).
    pub async fn add_user(
        &self,
        name: &str,
        admin: bool,
        public_key: Option<[u8; 32]>,
    ) -> Result<Enrollment, FsError> {
        let add = calls::UserAdd {
            name: name.into(),
            admin,
            public_key,
        };
        let made = self.call("/", add).await?;
        let us = self.call("/", calls::UserList).await?;
        if let Some(u) = us.into_iter().find(|u| u.name == name) {
            self.sync_group_keys(u.groups).await?;
        }
        Ok(made)
    }

    /// Adds a password user and enrolls them at once with `password`, for a program that
    /// makes an account it will log in as itself (the S3 gateway's user, the demo's and the
    /// benchmarks' users, scripts): the registration runs in this process, so the manager
    /// still never sees the password, but whoever runs it knows it. It then logs in as the
    /// user once, which makes the user's keys (in this process too), and gives them the wraps
    /// of their groups' keys, so the account reads what its groups may at once. People get an
    /// enrollment code instead ([`Client::add_user`]), so an admin never knows their password
    /// or their seed. Returns the new uid.
    pub async fn add_user_enrolled(
        &self,
        name: &str,
        password: &str,
        admin: bool,
    ) -> Result<u32, FsError> {
        let made = self.add_user(name, admin, None).await?;
        let code = made
            .code
            .ok_or_else(|| FsError::Usage(format!("user {name} got no enrollment code")))?;
        let cfg = crate::session::SessionConfig {
            user: name.into(),
            credential: Credential::Password(password.into()),
            signing_key: None,
            ..self.cfg.clone()
        };
        crate::session::Session::enroll(&cfg, &code)
            .await
            .map_err(|error| FsError::Manager {
                path: "/".into(),
                error,
            })?;
        let user = Client::connect(cfg).await?;
        user.identity().await?;
        let us = self.call("/", calls::UserList).await?;
        if let Some(u) = us.into_iter().find(|u| u.name == name) {
            self.sync_group_keys(u.groups).await?;
        }
        Ok(made.uid)
    }

    /// Changes this user's password (OPAQUE registration from their own session, which
    /// ends every session of theirs) and seals their end-to-end seed, if they have one, under
    /// the new password file's key in the same step. Also what moves an account made before
    /// manager protocol 13 to OPAQUE (its seed then sealed anew, its old hash deleted).
    pub async fn change_password(&self, new_password: &str) -> Result<(), FsError> {
        let uid = self.uid().await?;
        let id = match self.user_keys(&[uid], true).await?.remove(&uid) {
            Some(_) => Some(self.identity().await?),
            None => None,
        };
        let me = self.cfg_user();
        let mut g = self.session_guard().await?;
        let s = g.as_mut().expect("connected");
        let registered = s
            .register(&me, new_password, None, |k| {
                id.as_ref().map(|id| id.seal_with(k)).unwrap_or_default()
            })
            .await;
        // The registration ended every session of the user, this one included.
        *g = None;
        let key = registered.map_err(|error| FsError::Manager {
            path: "/".into(),
            error,
        })?;
        self.set_seed_key(Some(Arc::new(key)));
        self.forget_user_keys();
        Ok(())
    }

    /// Reads the key log again at its next use (a user's keys changed).
    pub(crate) fn forget_user_keys(&self) {
        self.keyring
            .key_log_stale
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The registered keys of `uids` (those that have some), as the checked key log shows
    /// them, read again from the manager when `fresh` or older than [`KEYS_TTL_MS`]. This
    /// user's own keys, with their sealed seed, come from the manager when `fresh`, checked
    /// against the log.
    pub(crate) async fn user_keys(
        &self,
        uids: &[u32],
        fresh: bool,
    ) -> Result<HashMap<u32, UserKeys>, FsError> {
        let me = self.uid().await?;
        let own = fresh && uids.contains(&me);
        // This user's own entry (with the sealed seed) is asked for beside the log, in one
        // round trip's time.
        let get_own = async {
            if !own {
                return Ok(None);
            }
            let get = calls::UserKeyGet {
                uids: vec![me],
                names: vec![],
            };
            let us = self.call("/", get).await?;
            Ok::<_, FsError>(Some(us.into_iter().find(|u| u.uid == me)))
        };
        let (log, mine) = tokio::join!(self.key_log_of(uids, fresh), get_own);
        let (log, mine) = (log?, mine?);
        let mut out: HashMap<u32, UserKeys> = uids
            .iter()
            .filter_map(|&u| Some((u, log.view.keys(u)?.clone())))
            .collect();
        match mine {
            Some(Some(u)) => {
                log.view.check_answered(me, &u.keys)?;
                out.insert(me, u.keys);
            }
            Some(None) => {
                out.remove(&me);
            }
            None => {}
        }
        Ok(out)
    }

    /// The keys of `uids` this client may wrap file keys to: a user whose chain began with
    /// a reset this client has not verified gets no wrap (logged, and listed second), as one
    /// without keys.
    async fn wrappable_keys(
        &self,
        path: &str,
        uids: &[u32],
    ) -> Result<(HashMap<u32, UserKeys>, Vec<u32>), FsError> {
        let log = self.key_log_of(uids, false).await?;
        let (mut out, mut unverified) = (HashMap::new(), vec![]);
        for &u in uids {
            match log.view.trust(u) {
                Trust::Trusted(k) => {
                    out.insert(u, k);
                }
                Trust::Unverified(fp) => {
                    tracing::warn!(
                        "{path}: user {u}'s keys were reset and are not verified here \
                         (fingerprint {fp}; nasd user verify): no wrap for them"
                    );
                    unverified.push(u);
                }
                Trust::None => {}
            }
        }
        Ok((out, unverified))
    }

    /// The key log for looking up `uids`: read again at once when one of them has no keys in
    /// the copy held (a user who made keys since the last read), as a lookup that missed the
    /// cache did before the log.
    async fn key_log_of(
        &self,
        uids: &[u32],
        fresh: bool,
    ) -> Result<tokio::sync::MutexGuard<'_, KeyLogState>, FsError> {
        let log = self.key_log(fresh).await?;
        if fresh || uids.iter().all(|&u| log.view.keys(u).is_some()) {
            return Ok(log);
        }
        drop(log);
        self.key_log(true).await
    }

    /// The checked copy of the key log, read from the manager first when `fresh` or older
    /// than [`KEYS_TTL_MS`] (module docs of [`super::keylog`]).
    pub(crate) async fn key_log(
        &self,
        fresh: bool,
    ) -> Result<tokio::sync::MutexGuard<'_, KeyLogState>, FsError> {
        let mut g = self.keyring.key_log.lock().await;
        if !g.loaded {
            g.path = self.key_log_path();
            if let Some(p) = g.path.clone() {
                g.view = KeyLogView::load(&p)?;
            }
            g.loaded = true;
        }
        let now = now_ms();
        let stale = self
            .keyring
            .key_log_stale
            .swap(false, std::sync::atomic::Ordering::AcqRel);
        if fresh || stale || g.synced_ms == 0 || now >= g.synced_ms + KEYS_TTL_MS {
            if let Some(next) = self.read_key_log(&g.view).await? {
                if let Some(p) = &g.path {
                    next.save(p)?;
                }
                g.view = next;
            }
            g.synced_ms = now.max(1);
        }
        Ok(g)
    }

    /// Where this client keeps its copy of the key log: beside its identity's cache file.
    fn key_log_path(&self) -> Option<PathBuf> {
        self.beside_identity("keylog")
    }

    /// A file beside this client's identity cache file, with extension `ext` (none for a
    /// borrowed or a delegated identity, whose state lives in memory).
    fn beside_identity(&self, ext: &str) -> Option<PathBuf> {
        match &*self.keyring.source.lock().expect("keyring lock") {
            IdentitySource::Login { cache: Some(p) } => Some(p.with_extension(ext)),
            _ => None,
        }
    }

    /// The newest versions of files this client verified ([`super::fresh`]), loaded from
    /// beside the identity's cache file on first use.
    pub(crate) fn freshness(&self) -> std::sync::MutexGuard<'_, super::fresh::Freshness> {
        let path = self.beside_identity("fresh");
        let mut g = self.keyring.fresh.lock().expect("keyring lock");
        g.load_once(path);
        g
    }

    /// The manager's log past what `held` holds, checked; `None` when nothing was added.
    async fn read_key_log(&self, held: &KeyLogView) -> Result<Option<KeyLogView>, FsError> {
        let mut next: Option<KeyLogView> = None;
        loop {
            let at = next.as_ref().unwrap_or(held).len();
            let page = self.call("/", calls::KeyLog { from: at }).await?;
            let v = next.get_or_insert_with(|| held.clone());
            if page.from != at {
                return Err(super::keylog::KeyLogError::BadPage {
                    got: page.from,
                    want: at,
                }
                .into());
            }
            v.check_head(&page.head)?;
            let added = !page.entries.is_empty();
            for e in page.entries {
                v.apply(e)?;
            }
            if v.matches(&page.head)? {
                break;
            }
            if !added {
                return Err(super::keylog::KeyLogError::BadPage {
                    got: page.head.size,
                    want: at,
                }
                .into());
            }
        }
        Ok(next.filter(|v| v.len() > held.len() || v.log_key() != held.log_key()))
    }

    /// The fingerprint of user `name`'s current chain of keys, whether this client verified
    /// it, and the log's head as this client holds it (entries, root).
    pub async fn user_fingerprint(&self, name: &str) -> Result<FingerprintInfo, FsError> {
        let uid = self.uid_of_user(name).await?;
        let log = self.key_log(true).await?;
        let chain = log.view.chain(uid).cloned();
        let fingerprint = log
            .view
            .fingerprint(uid)
            .ok_or_else(|| e2e_err("/", format!("{name}: no keys in the key log")))?;
        Ok(FingerprintInfo {
            uid,
            fingerprint,
            version: chain.as_ref().map_or(0, |c| c.version),
            after_reset: chain.is_some_and(|c| c.after_reset),
            verified: log.view.verified(uid),
            log_size: log.view.len(),
            log_root: log.view.root(),
        })
    }

    /// Records that `name`'s fingerprint was checked out of band (`nasd user verify`);
    /// refused when `fp` is not the fingerprint the key log shows this client.
    pub async fn verify_user(&self, name: &str, fp: Fingerprint) -> Result<(), FsError> {
        let uid = self.uid_of_user(name).await?;
        let mut log = self.key_log(true).await?;
        let shown = log.view.fingerprint(uid);
        if !log.view.verify(uid, fp) {
            return Err(e2e_err(
                "/",
                match shown {
                    Some(s) => format!(
                        "{name}: the key log shows this client fingerprint {s}, not {fp}: \
                         the manager may be showing you keys that are not {name}'s"
                    ),
                    None => format!("{name}: no keys in the key log"),
                },
            ));
        }
        if let Some(p) = log.path.clone() {
            log.view.save(&p)?;
        }
        Ok(())
    }

    /// Clears user `name`'s keys with a reset every client sees (admins; for a user who lost
    /// every key): their next login makes new ones, which others wrap to once they verify.
    pub async fn reset_user_keys(&self, name: &str) -> Result<(), FsError> {
        let reset = calls::UserKeyReset {
            user: name.to_string(),
        };
        self.call("/", reset).await?;
        self.forget_user_keys();
        Ok(())
    }

    /// The key log's size and root as this client holds it after reading it, or its root at
    /// `at` entries (at most what it holds).
    pub async fn key_log_root(&self, at: Option<u64>) -> Result<(u64, [u8; 32]), FsError> {
        let log = self.key_log(true).await?;
        let size = at.unwrap_or(log.view.len());
        let root = log.view.root_at(size).ok_or_else(|| {
            FsError::Usage(format!(
                "the key log holds {} entries here, not {size}",
                log.view.len()
            ))
        })?;
        Ok((size, root))
    }

    /// The uid of user `name` (one with keys).
    async fn uid_of_user(&self, name: &str) -> Result<u32, FsError> {
        let get = calls::UserKeyGet {
            uids: vec![],
            names: vec![name.to_string()],
        };
        let us = self.call("/", get).await?;
        us.into_iter()
            .find(|u| u.name == name)
            .map(|u| u.uid)
            .ok_or_else(|| e2e_err("/", format!("{name}: no such user with keys")))
    }

    /// The names of users `uids` (those with keys).
    pub async fn user_names(&self, uids: &[u32]) -> Result<HashMap<u32, String>, FsError> {
        let get = calls::UserKeyGet {
            uids: uids.to_vec(),
            names: vec![],
        };
        let us = self.call("/", get).await?;
        Ok(us.into_iter().map(|u| (u.uid, u.name)).collect())
    }

    /// How `principals` are shown: a user's name, "group NAME" (ids for unknown ones).
    pub async fn principal_names(&self, principals: &[Principal]) -> Result<Vec<String>, FsError> {
        let (mut uids, mut gids) = (vec![], vec![]);
        for p in principals {
            match *p {
                Principal::User(u) => uids.push(u),
                Principal::Group(g) => gids.push(g),
            }
        }
        let users = self.user_names(&uids).await?;
        let groups = self.group_infos(&gids, false).await?;
        Ok(principals
            .iter()
            .map(|p| match *p {
                Principal::User(u) => users.get(&u).cloned().unwrap_or(format!("uid {u}")),
                Principal::Group(g) => match groups.get(&g) {
                    Some(i) => format!("group {}", i.name),
                    None => format!("gid {g}"),
                },
            })
            .collect())
    }

    /// The principals a file with owner `uid`, group `gid` and `mode`, written by this
    /// client's user under `policy`, is readable by.
    pub(crate) async fn readers_of(
        &self,
        uid: u32,
        gid: u32,
        mode: u32,
        readers: &[Principal],
        everyone: &[Principal],
    ) -> Result<Vec<Principal>, FsError> {
        let mut out = vec![Principal::User(uid), Principal::User(self.uid().await?)];
        if mode & 0o040 != 0 {
            out.push(Principal::Group(gid));
        }
        if mode & 0o004 != 0 {
            out.extend_from_slice(everyone);
        }
        out.extend_from_slice(readers);
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// A key file wrapping `key` (version `kv` of file `file_id`) for each of `readers` that
    /// has a key pair; those without one are logged and left out.
    pub(crate) async fn make_key_file(
        &self,
        path: &str,
        file_id: FileId,
        kv: KeyVersion,
        key: &FileKey,
        readers: &[Principal],
    ) -> Result<KeyFile, FsError> {
        let uids: Vec<u32> = readers
            .iter()
            .filter_map(|p| match p {
                Principal::User(u) => Some(*u),
                _ => None,
            })
            .collect();
        let gids: Vec<u32> = readers
            .iter()
            .filter_map(|p| match p {
                Principal::Group(g) => Some(*g),
                _ => None,
            })
            .collect();
        let (users, unverified) = self.wrappable_keys(path, &uids).await?;
        let groups = self.group_keys_for_writing(path, &gids).await?;
        let mut to: Vec<(KeyPrincipal, PublicKey)> = vec![];
        for u in uids {
            match users.get(&u) {
                Some(k) => to.push((KeyPrincipal::User(u), PublicKey(k.enc_public))),
                None => tracing::debug!("{path}: user {u} has no key pair yet: no wrap"),
            }
        }
        for (g, pk) in groups {
            to.push((KeyPrincipal::Group(g), pk));
        }
        if let (true, Some(u)) = (to.is_empty(), unverified.first()) {
            return Err(e2e_err(
                path,
                format!("user {u}'s keys were reset and are not verified here: check their fingerprint out of band (nasd user fingerprint / verify)"),
            ));
        }
        if to.is_empty() {
            return Err(e2e_err(path, "nobody who may read the file has a key pair"));
        }
        let mut kf = KeyFile::new();
        let mut rng = nasd_e2e::keys::os_rng();
        for (p, pk) in to {
            kf.wrap_for(p, pk, file_id, kv, key, &mut rng)
                .map_err(|e| e2e_err(path, e))?;
        }
        Ok(kf)
    }

    /// The key of version `kv` of a file, unwrapped from its key file with this user's key or
    /// a group's this user holds ("permission denied" when none opens it).
    pub(crate) async fn open_key_file(
        &self,
        path: &str,
        kf: &KeyFile,
        file_id: FileId,
        kv: KeyVersion,
    ) -> Result<FileKey, FsError> {
        let id = self.identity().await?;
        let delegated_for = match &*self.keyring.source.lock().expect("keyring lock") {
            IdentitySource::Delegate { user, .. } => Some(user.clone()),
            _ => None,
        };
        if let Some(user) = delegated_for.filter(|u| !u.reads(kf, kv)) {
            return Err(not_wrapped_for(path, &user.name));
        }
        if kf.find(KeyPrincipal::User(id.uid), kv).is_some() {
            return kf
                .unwrap(KeyPrincipal::User(id.uid), id.enc_secret(), file_id, kv)
                .map_err(|e| e2e_err(path, format!("key version {kv}: {e}")));
        }
        let gids: Vec<u32> = kf
            .entries()
            .iter()
            .filter(|e| e.key_version == kv)
            .filter_map(|e| match e.principal {
                KeyPrincipal::Group(g) => Some(g),
                _ => None,
            })
            .collect();
        if let Some(k) = self.open_through_groups(kf, &gids, file_id, kv).await? {
            return Ok(k);
        }
        Err(not_wrapped_for(path, &self.cfg_user()))
    }
}

/// "Permission denied": no key of `user` or their groups opens `path`'s key.
fn not_wrapped_for(path: &str, user: &str) -> FsError {
    FsError::Manager {
        path: path.into(),
        error: crate::session::SessionError::Refused {
            op: "decrypt",
            status: nasd_proto::manager::MgrStatus::PermissionDenied,
            detail: format!("the file's key is not wrapped for {user} or a group of theirs"),
        },
    }
}

/// What `nasd user fingerprint` shows of a user ([`Client::user_fingerprint`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FingerprintInfo {
    pub uid: u32,
    pub fingerprint: Fingerprint,
    /// The version of the user's current keys.
    pub version: u32,
    /// Whether their current chain began after a reset.
    pub after_reset: bool,
    /// Whether this client verified the fingerprint.
    pub verified: bool,
    pub log_size: u64,
    pub log_root: [u8; 32],
}
