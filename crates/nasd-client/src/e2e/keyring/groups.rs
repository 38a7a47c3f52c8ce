//! Groups' key pairs on the client (issue 21 §5; seed 001 §3.2). A group's secret is wrapped
//! to its members only, and only members' clients make and wrap it: an admin who is not a
//! member holds no wrap and cannot get one.
//!
//! - **Making.** A group without a key pair, or one due a new key pair (a member left, or no
//!   member holds the current one), gets one from the first member's client that writes for
//!   it, makes its user's first keys, or runs `nasd group sync`: a fresh secret wrapped to
//!   every member whose keys this
//!   client's checked key log shows (reset users not yet verified here get none), with a
//!   *link* (the current secret wrapped to the new public key) when this client holds the
//!   current secret. Until a key pair is due no more, writers wrap no file key to the group:
//!   a removed member's old secret opens nothing written after the removal. A writer asks
//!   for such a group's key pair again at each write, unless the grant of the write names
//!   the group's key pair as the answer it holds (the `everyone` groups: a grant carries
//!   their versions, [`nasd_proto::manager::GroupKeyState`]), so it wraps to a new key pair as
//!   soon as a member made it, and a cluster whose `users` has none yet (no user logged in)
//!   costs no round trip per write.
//! - **Completing.** A member's client that holds the secret wraps it to the members who have
//!   keys but no wrap (`GroupKeyInfo::missing`) when it uses the group, at most once per
//!   [`KEYS_TTL_MS`] per group, and at once on `nasd group sync`. It wraps to the keys its own
//!   key log shows, never to keys the manager names.
//! - **Opening.** A file key wrapped to a group opens with the group's current secret or,
//!   through the links, an older one: members read what was shared with the group before a
//!   new key pair, members who joined later too.

use super::{e2e_err, put_bounded, IdentitySource, KEYS_TTL_MS};
use crate::files::{now_ms, Client, FsError};
use nasd_e2e::keys::{GroupKeyWrap, KeyFile, KeyVersion};
use nasd_e2e::{FileId, FileKey, Principal as KeyPrincipal, PublicKey, SecretKey};
use nasd_proto::manager::{calls, GroupKeyInfo, GroupKeyState, MgrStatus, KEY_LIST_MAX};
use std::collections::HashMap;
use std::sync::Arc;

/// How long a grant's confirmation of a cached answer for a group without a current key pair
/// stands (a write's grant confirms it just before the write wraps its key).
pub const GROUP_CONFIRMED_MS: u64 = 1_000;

/// What [`Client::sync_group_keys`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupSync {
    /// Wraps made: of new key pairs, and for members who had none.
    pub wraps: usize,
    /// Groups given a new key pair.
    pub key_pairs: Vec<String>,
    /// Groups the caller is not a member of: their members' clients make and wrap their keys.
    pub not_member: Vec<String>,
    /// Groups whose secret this member does not hold yet: a member who does wraps it to them
    /// (or makes the group's next key pair).
    pub waiting: Vec<String>,
}

impl Client {
    /// Completes the key pairs and wraps of groups `names` this user is a member of (`nasd
    /// group sync`): a group without a key pair, or due a new one, gets one; members with
    /// keys but no wrap get one, from this client's checked key log.
    pub async fn sync_group_keys(&self, names: Vec<String>) -> Result<GroupSync, FsError> {
        // This user's keys first: a client's first use makes them, and with them key pairs
        // for this user's groups that have none (an admin's first `user add` makes `admin`'s).
        self.identity().await?;
        let mut out = GroupSync::default();
        for g in self.group_key_get(vec![], names).await? {
            if !g.member {
                out.not_member.push(g.name);
            } else if g.public.is_none() || g.rekey {
                match self.make_group_version(&g).await {
                    Ok(0) => {}
                    Ok(n) => {
                        out.wraps += n;
                        out.key_pairs.push(g.name);
                    }
                    Err(e) if e.status() == Some(MgrStatus::PermissionDenied) => {
                        out.waiting.push(g.name)
                    }
                    Err(e) => return Err(e),
                }
            } else if g.wrap.is_empty() {
                out.waiting.push(g.name);
            } else {
                out.wraps += self.complete_group_wraps(&g).await?;
            }
        }
        Ok(out)
    }

    /// The groups of this user without a key pair get one, right after their client made the
    /// user's first keys (so a cluster's `users` has one from its first user's first login).
    pub(super) fn first_group_keys(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.first_group_keys_now())
    }

    async fn first_group_keys_now(&self) {
        let me = self.user().to_string();
        let mine: Result<Vec<String>, FsError> = async {
            let us = self.call("/", calls::UserList).await?;
            Ok(us
                .into_iter()
                .filter(|u| u.name == me)
                .flat_map(|u| u.groups)
                .collect())
        }
        .await;
        let made = match mine {
            Ok(groups) => self.sync_group_keys(groups).await,
            Err(e) => Err(e),
        };
        match made {
            Ok(s) if !s.key_pairs.is_empty() => {
                tracing::info!("{me}: key pairs made for groups {:?}", s.key_pairs)
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("{me}: groups' key pairs not made at first login: {e}"),
        }
    }

    /// Takes in what a grant says of groups' key pairs: a cached answer that no longer
    /// matches is dropped (asked for again at the next use), and one for a group without a
    /// current key pair that still matches is confirmed for [`GROUP_CONFIRMED_MS`].
    pub(crate) fn note_group_keys(&self, states: &[GroupKeyState]) {
        let now = now_ms();
        let mut cache = self.keyring.groups.lock().expect("keyring lock");
        let mut confirmed = self.keyring.group_confirmed.lock().expect("keyring lock");
        for s in states {
            let Some((k, _)) = cache.get(&s.gid) else {
                continue;
            };
            let current = k.is_current();
            if k.version != s.version || current != s.current {
                cache.remove(&s.gid);
                confirmed.remove(&s.gid);
            } else if !current {
                put_bounded(&mut confirmed, s.gid, now);
            }
        }
    }

    /// The public keys of groups `gids` a new file's key is wrapped to: a group this user is
    /// a member of that lacks a key pair, or is due a new one, gets it first; a group still
    /// without one, or still due one, gets no wrap (logged).
    pub(super) async fn group_keys_for_writing(
        &self,
        path: &str,
        gids: &[u32],
    ) -> Result<Vec<(u32, PublicKey)>, FsError> {
        let confirmed: Vec<u32> = {
            let now = now_ms();
            let c = self.keyring.group_confirmed.lock().expect("keyring lock");
            gids.iter()
                .copied()
                .filter(|g| c.get(g).is_some_and(|&at| now < at + GROUP_CONFIRMED_MS))
                .collect()
        };
        let mut groups = self
            .group_infos_where(gids, |g| g.is_current() || confirmed.contains(&g.gid))
            .await?;
        if self.keeps_groups() {
            let now = now_ms();
            let due: Vec<GroupKeyInfo> = groups
                .values()
                .filter(|g| g.member && (g.public.is_none() || g.rekey))
                .filter(|g| self.attempt_due(g.gid, now))
                .cloned()
                .collect();
            for g in &due {
                if let Err(e) = self.make_group_version(g).await {
                    tracing::debug!("{path}: group {} keeps its key pair: {e}", g.name);
                }
            }
            if !due.is_empty() {
                groups = self.group_infos(gids, true).await?;
            }
        }
        let mut out = vec![];
        for g in gids {
            match groups.get(g) {
                Some(i) if i.rekey => tracing::warn!(
                    "{path}: group {} is due a new key pair (a member left), which a member's \
                     client makes; no wrap for the group until then (share the file with it \
                     again later)",
                    i.name
                ),
                Some(GroupKeyInfo {
                    public: Some(pk), ..
                }) => out.push((*g, PublicKey(*pk))),
                Some(i) => tracing::debug!(
                    "{path}: group {} has no key pair yet (a member's client makes it): no wrap",
                    i.name
                ),
                None => tracing::debug!("{path}: no group {g}: no wrap"),
            }
        }
        for g in groups.values() {
            self.complete_soon(g).await;
        }
        Ok(out)
    }

    /// The key of version `kv` of a file, unwrapped through one of groups `gids` this user
    /// holds a secret of (the current one or, through the links, an older one). Group key
    /// pairs held for a while are asked for again when none opens it (a new key pair made
    /// since).
    pub(super) async fn open_through_groups(
        &self,
        kf: &KeyFile,
        gids: &[u32],
        file_id: FileId,
        kv: KeyVersion,
    ) -> Result<Option<FileKey>, FsError> {
        if gids.is_empty() {
            return Ok(None);
        }
        for fresh in [false, true] {
            for g in self.group_infos(gids, fresh).await?.values() {
                if let Some(k) = self.open_with_group(kf, g, file_id, kv).await {
                    self.complete_soon(g).await;
                    return Ok(Some(k));
                }
            }
        }
        Ok(None)
    }

    async fn open_with_group(
        &self,
        kf: &KeyFile,
        g: &GroupKeyInfo,
        file_id: FileId,
        kv: KeyVersion,
    ) -> Option<FileKey> {
        let mut sk = self.group_secret(g).await.ok()?;
        let mut version = g.version;
        for _ in 0..=g.links.len() {
            if let Ok(k) = kf.unwrap(KeyPrincipal::Group(g.gid), &sk, file_id, kv) {
                return Some(k);
            }
            let older = version.checked_sub(1).filter(|&v| v > 0)?;
            sk = self.linked_secret(g, older, &sk)?;
            version = older;
        }
        None
    }

    /// Version `older` of group `g`'s secret, opened from the next version's `newer` through
    /// its link.
    fn linked_secret(
        &self,
        g: &GroupKeyInfo,
        older: u32,
        newer: &SecretKey,
    ) -> Option<Arc<SecretKey>> {
        if let Some(s) = self.cached_group_secret(g.gid, older) {
            return Some(s);
        }
        let sk = g
            .links
            .iter()
            .filter_map(|l| GroupKeyWrap::decode(l).ok())
            .find(|l| l.is_link() && l.gid == g.gid && l.group_key_version == older)?
            .unwrap(newer)
            .ok()?;
        Some(self.keep_group_secret(g.gid, older, sk))
    }

    /// Key pairs of groups `gids`, from the cache when fresh.
    pub(crate) async fn group_infos(
        &self,
        gids: &[u32],
        fresh: bool,
    ) -> Result<HashMap<u32, GroupKeyInfo>, FsError> {
        self.group_infos_where(gids, |_| !fresh).await
    }

    /// Key pairs of groups `gids`, from the cache when held less than [`KEYS_TTL_MS`] and
    /// `cached` accepts them.
    async fn group_infos_where(
        &self,
        gids: &[u32],
        cached: impl Fn(&GroupKeyInfo) -> bool,
    ) -> Result<HashMap<u32, GroupKeyInfo>, FsError> {
        let now = now_ms();
        let mut out = HashMap::new();
        let mut ask = vec![];
        {
            let c = self.keyring.groups.lock().expect("keyring lock");
            for &g in gids {
                match c.get(&g) {
                    Some((k, at)) if now < at + KEYS_TTL_MS && cached(k) => {
                        out.insert(g, k.clone());
                    }
                    _ => ask.push(g),
                }
            }
        }
        ask.sort_unstable();
        ask.dedup();
        if ask.is_empty() {
            return Ok(out);
        }
        for g in self.group_key_get(ask, vec![]).await? {
            let mut c = self.keyring.groups.lock().expect("keyring lock");
            put_bounded(&mut c, g.gid, (g.clone(), now));
            out.insert(g.gid, g);
        }
        Ok(out)
    }

    pub(crate) async fn group_key_get(
        &self,
        gids: Vec<u32>,
        names: Vec<String>,
    ) -> Result<Vec<GroupKeyInfo>, FsError> {
        self.call("/", calls::GroupKeyGet { gids, names }).await
    }

    /// The secret of group `g`'s current key pair, unwrapped with this user's key.
    async fn group_secret(&self, g: &GroupKeyInfo) -> Result<Arc<SecretKey>, FsError> {
        if let Some(s) = self.cached_group_secret(g.gid, g.version) {
            return Ok(s);
        }
        if g.wrap.is_empty() {
            return Err(e2e_err(
                "/",
                format!("no wrap of group {}'s key for this user", g.name),
            ));
        }
        let id = self.identity().await?;
        let wrap = GroupKeyWrap::decode(&g.wrap).map_err(|e| e2e_err("/", e))?;
        if wrap.gid != g.gid || wrap.group_key_version != g.version || wrap.member_uid != id.uid {
            return Err(e2e_err(
                "/",
                format!(
                    "group {}'s wrap names another group, version or member",
                    g.name
                ),
            ));
        }
        let sk = wrap
            .unwrap(id.enc_secret())
            .map_err(|e| e2e_err("/", format!("group {}'s key: {e}", g.name)))?;
        Ok(self.keep_group_secret(g.gid, g.version, sk))
    }

    fn cached_group_secret(&self, gid: u32, version: u32) -> Option<Arc<SecretKey>> {
        let c = self.keyring.group_secrets.lock().expect("keyring lock");
        c.get(&(gid, version)).cloned()
    }

    fn keep_group_secret(&self, gid: u32, version: u32, sk: SecretKey) -> Arc<SecretKey> {
        let sk = Arc::new(sk);
        let mut c = self.keyring.group_secrets.lock().expect("keyring lock");
        put_bounded(&mut c, (gid, version), sk.clone());
        sk
    }

    /// Makes group `g`'s next key pair (its first, or the one due): wrapped to every member
    /// whose keys the checked key log shows, this user first, with the link from the current
    /// secret when this client holds it. Returns the wraps made (0: another member's client
    /// made it first).
    async fn make_group_version(&self, g: &GroupKeyInfo) -> Result<usize, FsError> {
        let id = self.identity().await?;
        let held = match g.public {
            Some(_) if !g.wrap.is_empty() => Some(self.group_secret(g).await?),
            _ => None,
        };
        let version = g
            .version
            .checked_add(1)
            .ok_or_else(|| e2e_err("/", format!("group {}: no key version left", g.name)))?;
        let sk = SecretKey::generate();
        let mut rng = nasd_e2e::keys::os_rng();
        let link = match held {
            Some(h) => GroupKeyWrap::link(g.gid, g.version, &h, sk.public(), &mut rng)
                .map_err(|e| e2e_err("/", e))?
                .encode(),
            None => vec![],
        };
        let mut to = vec![(id.uid, id.enc_public())];
        for (uid, pk) in self.group_members_with_keys(&g.name).await? {
            if uid != id.uid {
                to.push((uid, pk));
            }
        }
        let mut wraps = Vec::with_capacity(to.len());
        for (uid, pk) in to {
            let w = GroupKeyWrap::wrap(g.gid, version, &sk, uid, pk, &mut rng)
                .map_err(|e| e2e_err("/", e))?;
            wraps.push((uid, w.encode()));
        }
        let mut chunks = wraps.chunks(KEY_LIST_MAX);
        let first = calls::GroupKeySet {
            group: g.name.clone(),
            version,
            public: sk.public().0,
            link,
            wraps: chunks.next().unwrap_or_default().to_vec(),
        };
        match self.call("/", first).await {
            Err(e) if e.status() == Some(MgrStatus::Conflict) => {
                self.forget_group(g.gid);
                return Ok(0);
            }
            r => r?,
        }
        for more in chunks {
            let set = calls::GroupKeySet {
                group: g.name.clone(),
                version,
                public: sk.public().0,
                link: vec![],
                wraps: more.to_vec(),
            };
            self.call("/", set).await?;
        }
        self.keep_group_secret(g.gid, version, sk);
        self.forget_group(g.gid);
        tracing::info!("group {}: key pair version {version} made", g.name);
        Ok(wraps.len())
    }

    /// Wraps group `g`'s current secret, which this user holds, to the members who have
    /// keys but no wrap, with the keys the checked key log shows for them. Returns how many.
    async fn complete_group_wraps(&self, g: &GroupKeyInfo) -> Result<usize, FsError> {
        let Some(public) = g.public else {
            return Ok(0);
        };
        if g.missing.is_empty() {
            return Ok(0);
        }
        let sk = self.group_secret(g).await?;
        let (keys, _unverified) = self.wrappable_keys(&g.name, &g.missing).await?;
        let mut rng = nasd_e2e::keys::os_rng();
        let mut wraps = vec![];
        for uid in &g.missing {
            if let Some(k) = keys.get(uid) {
                let w = GroupKeyWrap::wrap(
                    g.gid,
                    g.version,
                    &sk,
                    *uid,
                    PublicKey(k.enc_public),
                    &mut rng,
                )
                .map_err(|e| e2e_err("/", e))?;
                wraps.push((*uid, w.encode()));
            }
        }
        for chunk in wraps.chunks(KEY_LIST_MAX) {
            let set = calls::GroupKeySet {
                group: g.name.clone(),
                version: g.version,
                public,
                link: vec![],
                wraps: chunk.to_vec(),
            };
            self.call("/", set).await?;
        }
        if !wraps.is_empty() {
            self.forget_group(g.gid);
            tracing::info!("group {}: {} member(s) given a wrap", g.name, wraps.len());
        }
        Ok(wraps.len())
    }

    /// Completes group `g`'s missing wraps if this client holds its secret and has not tried
    /// within [`KEYS_TTL_MS`]; a failure is logged, never the caller's.
    async fn complete_soon(&self, g: &GroupKeyInfo) {
        let holds = g.member && !g.wrap.is_empty() && !g.rekey;
        if !holds || g.missing.is_empty() || !self.keeps_groups() {
            return;
        }
        if !self.attempt_due(g.gid, now_ms()) {
            return;
        }
        if let Err(e) = self.complete_group_wraps(g).await {
            tracing::debug!("group {}: missing wraps stay missing: {e}", g.name);
        }
    }

    /// Whether this client makes and completes group keys: not a gateway's client acting for
    /// a user (its identity is the gateway's, and its sessions may not).
    fn keeps_groups(&self) -> bool {
        !matches!(
            &*self.keyring.source.lock().expect("keyring lock"),
            IdentitySource::Delegate { .. }
        )
    }

    /// Whether an attempt on group `gid`'s keys is due now (none within [`KEYS_TTL_MS`]);
    /// when it is, it is recorded.
    fn attempt_due(&self, gid: u32, now: u64) -> bool {
        let mut tried = self.keyring.group_attempts.lock().expect("keyring lock");
        if tried.get(&gid).is_some_and(|&at| now < at + KEYS_TTL_MS) {
            return false;
        }
        put_bounded(&mut tried, gid, now);
        true
    }

    /// Drops group `gid`'s cached key pair (it changed).
    fn forget_group(&self, gid: u32) {
        self.keyring
            .groups
            .lock()
            .expect("keyring lock")
            .remove(&gid);
    }

    /// The members of group `name` whose keys the checked key log shows (for a new key pair).
    async fn group_members_with_keys(&self, name: &str) -> Result<Vec<(u32, PublicKey)>, FsError> {
        let us = self.call("/", calls::UserList).await?;
        let uids: Vec<u32> = us
            .iter()
            .filter(|u| u.groups.iter().any(|g| g == name))
            .map(|u| u.uid)
            .collect();
        drop(self.key_log(true).await?);
        let (keys, _) = self.wrappable_keys(name, &uids).await?;
        Ok(keys
            .into_iter()
            .map(|(u, k)| (u, PublicKey(k.enc_public)))
            .collect())
    }
}
