//! End-to-end protection at the file manager (issue 10; seeds 001 and 003). The manager is
//! trusted for policy and for a few bytes per file, never for file keys in clear (requirements
//! B.1): it keeps
//!
//! - each directory's [`E2ePolicy`] (in its layout spec, after the geometry: `rs:4+2,mt,auth=2`)
//!   and hands it to the writers of new files below it;
//! - each encrypted file's [`E2eState`]: seed 003's constant-size trusted record, swapped by
//!   compare-and-swap on commit, the user who committed it, their signature, and side data
//!   it stores but cannot read (the key file of wraps, counter intervals, pins);
//! - users' public keys and their secrets sealed under their passwords (only the user gets
//!   theirs back); groups' key pairs are [`crate::groups`]'.
//!
//! Nothing here unwraps anything: every secret the manager stores is sealed to a password it
//! does not keep or wrapped to a private key it never sees.

use crate::service::{denied, store_err, Caller, Manager};
use crate::store::{Inode, StoreError};
use crate::{MgrError, MgrResult};
use nasd_proto::e2e::{
    BLOCK_LOG2_MAX, BLOCK_LOG2_MIN, POLICY_READERS_MAX, SEALED_SECRET_BYTES_MAX,
};
use nasd_proto::manager::*;

/// A directory's stored spec: the geometry and the policy it set (either may be absent in
/// specs stored before version 12, which then come from its ancestors).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DirSpec {
    pub geometry: Option<String>,
    pub policy: Option<E2ePolicy>,
}

/// One protection option of a layout spec.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Opt {
    Encrypted(bool),
    Eint(Eint),
    Auth(WriterAuth),
    Block(u8),
    Reader(Principal),
    NoReaders,
}

/// Splits a spec into its geometry (the first part, unless it is an option) and options.
fn split(spec: &str) -> (Option<&str>, Vec<&str>) {
    let parts: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    match parts.first() {
        Some(first) if !is_option(first) => (Some(*first), parts[1..].to_vec()),
        _ => (None, parts),
    }
}

/// Whether a part of a spec is a protection option (by its form: a geometry never is one).
fn is_option(s: &str) -> bool {
    matches!(
        s,
        "encrypted" | "plain" | "plaintext" | "mt" | "rand" | "comp" | "noreaders"
    ) || s
        .split_once('=')
        .is_some_and(|(k, _)| matches!(k, "auth" | "block" | "reader"))
}

/// Parses one option; `name` resolves a user (`false`) or group (`true`) name to its id.
fn parse_opt(s: &str, name: &dyn Fn(&str, bool) -> Option<u32>) -> Option<Opt> {
    Some(match s {
        "encrypted" => Opt::Encrypted(true),
        "plain" | "plaintext" => Opt::Encrypted(false),
        "mt" => Opt::Eint(Eint::Mt),
        "rand" => Opt::Eint(Eint::Rand),
        "comp" => Opt::Eint(Eint::Comp),
        "noreaders" => Opt::NoReaders,
        _ => {
            let (k, v) = s.split_once('=')?;
            match k {
                "auth" => Opt::Auth(WriterAuth::from_u8(v.parse().ok()?).ok()?),
                "block" => {
                    let bytes = match v.strip_suffix(['K', 'k']) {
                        Some(k) => k.parse::<u32>().ok()?.checked_mul(1024)?,
                        None => v.parse::<u32>().ok()?,
                    };
                    let log2 = bytes.trailing_zeros() as u8;
                    if !bytes.is_power_of_two()
                        || !(BLOCK_LOG2_MIN..=BLOCK_LOG2_MAX).contains(&log2)
                    {
                        return None;
                    }
                    Opt::Block(log2)
                }
                "reader" => Opt::Reader(match v.split_once(':') {
                    Some(("u", id)) => Principal::User(id.parse().ok()?),
                    Some(("g", id)) => Principal::Group(id.parse().ok()?),
                    _ => match v.strip_prefix('@') {
                        Some(g) => Principal::Group(name(g, true)?),
                        None => Principal::User(name(v, false)?),
                    },
                }),
                _ => return None,
            }
        }
    })
}

fn apply(mut p: E2ePolicy, opts: &[Opt]) -> E2ePolicy {
    for o in opts {
        match o {
            Opt::Encrypted(e) => p.encrypted = *e,
            Opt::Eint(e) => p.eint = *e,
            Opt::Auth(a) => p.auth = *a,
            Opt::Block(b) => p.block_log2 = *b,
            Opt::Reader(r) => {
                if !p.readers.contains(r) {
                    p.readers.push(*r);
                }
            }
            Opt::NoReaders => p.readers.clear(),
        }
    }
    p
}

/// The canonical options of a policy, readers by id (`reader=u:ID`, `reader=g:ID`).
fn render_policy(p: &E2ePolicy) -> String {
    let mut s = format!(
        "{},{},auth={},block={}K",
        if p.encrypted { "encrypted" } else { "plain" },
        p.eint.name(),
        p.auth as u8,
        p.block_bytes() / 1024
    );
    for r in &p.readers {
        match r {
            Principal::User(u) => s.push_str(&format!(",reader=u:{u}")),
            Principal::Group(g) => s.push_str(&format!(",reader=g:{g}")),
        }
    }
    s
}

impl DirSpec {
    /// A spec as the store holds it (ids, never names); anything unreadable counts as absent.
    pub fn parse_stored(s: &str) -> DirSpec {
        let (geometry, opts) = split(s);
        let parsed: Option<Vec<Opt>> = opts.iter().map(|o| parse_opt(o, &|_, _| None)).collect();
        DirSpec {
            geometry: geometry.map(str::to_string),
            policy: parsed
                .filter(|p| !p.is_empty())
                .map(|p| apply(E2ePolicy::plaintext(), &p)),
        }
    }

    /// A spec of a policy alone.
    pub fn of_policy(p: &E2ePolicy) -> DirSpec {
        DirSpec {
            geometry: None,
            policy: Some(p.clone()),
        }
    }

    /// How the store holds it.
    pub fn render(&self) -> String {
        match (&self.geometry, &self.policy) {
            (Some(g), Some(p)) => format!("{g},{}", render_policy(p)),
            (Some(g), None) => g.clone(),
            (None, Some(p)) => render_policy(p),
            (None, None) => String::new(),
        }
    }
}

impl Manager {
    /// The policy files created in directory `dir` follow: the nearest spec that sets one,
    /// else the cluster's default; with who "everyone" is (the groups all users are in as
    /// their primary group), for files whose mode lets others read, and their key pairs'
    /// versions (so writers ask for a group's key pair only when it moved).
    pub fn policy_for(&self, dir: &Inode) -> MgrResult<E2ePolicy> {
        let mut p = self.stored_policy_for(dir)?;
        let st = self.st();
        for name in [crate::users::USERS_GROUP, crate::users::ADMIN_GROUP] {
            if let Some(g) = st.group_by_name(name).map_err(|e| store_err(e, name))? {
                let k = st.group_key(g.gid).map_err(|e| store_err(e, name))?;
                p.everyone.push(Principal::Group(g.gid));
                p.group_keys.push(GroupKeyState {
                    gid: g.gid,
                    version: k.version,
                    current: k.is_current(),
                });
            }
        }
        Ok(p)
    }

    fn stored_policy_for(&self, dir: &Inode) -> MgrResult<E2ePolicy> {
        let st = self.st();
        let mut cur = dir.clone();
        loop {
            if let Some(p) = cur
                .dir_layout
                .as_deref()
                .and_then(|s| DirSpec::parse_stored(s).policy)
            {
                return Ok(p);
            }
            if cur.ino == crate::store::ROOT_INO {
                return Ok(self.policy.default_e2e.clone());
            }
            cur = st
                .inode(cur.parent)
                .map_err(|e| store_err(e, "directory"))?
                .ok_or_else(|| {
                    MgrError::new(MgrStatus::Internal, "a directory's parent is gone")
                })?;
        }
    }

    /// The key a scheme-1 write grant names: the caller's registered Ed25519 public key, or
    /// the gateway's that acts for them (it signs with its own).
    pub(crate) fn writer_key_of(
        &self,
        c: &Caller,
        path: &str,
    ) -> MgrResult<nasd_proto::WriterPublicKey> {
        let signer = c.via.unwrap_or(c.uid);
        match self
            .st()
            .user_keys(signer)
            .map_err(|e| store_err(e, path))?
        {
            Some(k) => Ok(nasd_proto::WriterPublicKey(k.sign_public)),
            None => Err(MgrError::new(
                MgrStatus::NoUserKeys,
                format!(
                    "{path}: writes here are signed (auth=1) and {} has no signing key yet: \
                     log in with a password or key once",
                    c.name
                ),
            )),
        }
    }

    /// The policy a writer of file `i` follows: its directory's.
    pub fn policy_of_file(&self, i: &Inode) -> MgrResult<E2ePolicy> {
        let dir = self
            .st()
            .inode(i.parent)
            .map_err(|e| store_err(e, "directory"))?;
        match dir {
            Some(d) if d.kind == FileKind::Dir => self.policy_for(&d),
            _ => Ok(self.policy.default_e2e.clone()),
        }
    }

    /// A layout spec from a client (`[GEOMETRY][,OPTION]...`) merged into what directory `d`
    /// has now: the geometry part, when given, replaces the geometry; options change the
    /// policy. Names of readers (`reader=NAME`, `reader=@GROUP`) are resolved to ids.
    pub(crate) fn merge_spec(
        &self,
        d: &Inode,
        spec: &str,
        path: &str,
    ) -> MgrResult<(Option<String>, Option<E2ePolicy>)> {
        let (geometry, opts) = split(spec);
        let st = self.st();
        let name = |n: &str, group: bool| -> Option<u32> {
            if group {
                st.group_by_name(n).ok().flatten().map(|g| g.gid)
            } else {
                st.user_by_name(n).ok().flatten().map(|u| u.uid)
            }
        };
        let mut parsed = Vec::with_capacity(opts.len());
        for o in &opts {
            parsed.push(parse_opt(o, &name).ok_or_else(|| {
                MgrError::new(
                    MgrStatus::InvalidArgument,
                    format!(
                        "{path}: unknown layout option {o:?} (options: encrypted, plain, mt, rand, \
                         comp, auth=1|2|3, block=1K..64K, reader=USER, reader=@GROUP, noreaders)"
                    ),
                )
            })?);
        }
        drop(st);
        let policy = if parsed.is_empty() {
            None
        } else {
            let p = apply(self.stored_policy_for(d)?, &parsed);
            if p.readers.len() > POLICY_READERS_MAX {
                return Err(MgrError::new(
                    MgrStatus::InvalidArgument,
                    format!("{path}: at most {POLICY_READERS_MAX} further readers"),
                ));
            }
            Some(p)
        };
        Ok((geometry.map(str::to_string), policy))
    }

    /// A policy as `LayoutGet` shows it: readers by name where they still have one.
    pub(crate) fn show_policy(&self, p: &E2ePolicy) -> String {
        let st = self.st();
        let mut s = render_policy(&E2ePolicy {
            readers: vec![],
            ..p.clone()
        });
        for r in &p.readers {
            let shown = match *r {
                Principal::User(u) => st
                    .user_by_uid(u)
                    .ok()
                    .flatten()
                    .map_or(format!("u:{u}"), |u| u.name),
                Principal::Group(g) => st
                    .group_by_gid(g)
                    .ok()
                    .flatten()
                    .map_or(format!("g:{g}"), |g| format!("@{}", g.name)),
            };
            s.push_str(&format!(",reader={shown}"));
        }
        s
    }

    /// Replaces file `path`'s end-to-end state without a content change (`nasd share`,
    /// `unshare`, `chmod`): the owner or an admin, and only if the state is still the one the
    /// update names. A state whose record is unchanged keeps its writer and signature (only
    /// wraps changed); one with a new record (a new key version) names the caller as writer.
    pub fn e2e_update(&self, c: &Caller, path: &str, update: E2eCommit) -> MgrResult<()> {
        let i = self.resolve(c, path)?;
        if i.kind != FileKind::File {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: not a file"),
            ));
        }
        if !c.admin && i.uid != c.uid {
            return Err(denied(
                path,
                "only the owner may change who can decrypt a file",
            ));
        }
        let Some(current) = &i.e2e else {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: the file is not encrypted"),
            ));
        };
        let mut state = update.state;
        if state.record == current.record {
            state.writer = current.writer;
            state.signature = current.signature.clone();
        } else {
            state.writer = c.uid;
        }
        self.st()
            .set_e2e(i.ino, &update.expect, &state)
            .map_err(|e| match e {
                StoreError::Conflict => MgrError::new(
                    MgrStatus::Conflict,
                    format!("{path}: the file's keys or content changed meanwhile; read it again"),
                ),
                e => store_err(e, path),
            })
    }

    /// Sets `user`'s keys: only their own, never from a session a gateway opened. A new
    /// version must be the next one and carry the signature of its change by the current
    /// sign key (the first, by its own); the current version again may only replace the
    /// sealed seed.
    pub fn user_key_set(&self, c: &Caller, user: &str, keys: &UserKeys) -> MgrResult<()> {
        if keys.sealed.len() > SEALED_SECRET_BYTES_MAX {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                "sealed secret too long",
            ));
        }
        let mut st = self.st();
        let u = st
            .user_by_name(user)
            .map_err(|e| store_err(e, user))?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, user.to_string()))?;
        if u.uid != c.uid || c.via.is_some() {
            return Err(MgrError::new(
                MgrStatus::PermissionDenied,
                format!("{user}: only the user's own client sets their keys"),
            ));
        }
        let has = st.user_keys(u.uid).map_err(|e| store_err(e, user))?;
        let logged = st.user_key_version(u.uid).map_err(|e| store_err(e, user))?;
        check_key_change(u.uid, has.as_ref(), logged, keys)
            .map_err(|why| MgrError::new(MgrStatus::InvalidArgument, format!("{user}: {why}")))?;
        st.set_user_keys(u.uid, keys)
            .map_err(|e| store_err(e, user))
    }

    /// Encrypted files whose key file holds a wrap for the caller, or whose version the caller
    /// signed, by inode after `after`.
    pub fn e2e_wrapped_files(
        &self,
        c: &Caller,
        after: u64,
        limit: u32,
    ) -> MgrResult<Vec<WrappedFile>> {
        let limit = limit.clamp(1, WRAPPED_FILES_PAGE_MAX) as usize;
        let me = nasd_e2e::Principal::User(c.uid);
        let mut out = vec![];
        let mut at = after;
        while out.len() < limit {
            let inos = self
                .st()
                .files_after(at, SCAN_BATCH)
                .map_err(|e| store_err(e, "files"))?;
            let Some(&last) = inos.last() else { break };
            for ino in inos {
                let Some(i) = self.st().inode(ino).map_err(|e| store_err(e, "file"))? else {
                    continue;
                };
                let wrapped = i
                    .e2e
                    .as_ref()
                    .and_then(|e| nasd_e2e::side::Side::decode(&e.side).ok())
                    .is_some_and(|s| {
                        s.signer == Some(c.uid)
                            || s.key_file.entries().iter().any(|e| e.principal == me)
                    });
                if wrapped {
                    out.push(WrappedFile {
                        ino,
                        path: self.path_of(ino),
                    });
                    if out.len() == limit {
                        break;
                    }
                }
            }
            at = last;
        }
        Ok(out)
    }

    /// Replaces the caller's own wraps in `path`'s key file, and the signature of a version
    /// the caller signed (a key rotation): anyone with a wrap there may, provided nothing else
    /// of the state changes and a new signature verifies with the caller's current key.
    pub fn e2e_rewrap(&self, c: &Caller, path: &str, update: E2eCommit) -> MgrResult<()> {
        let i = self.resolve(c, path)?;
        let Some(current) = &i.e2e else {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{path}: the file is not encrypted"),
            ));
        };
        let sign_key = self
            .st()
            .user_keys(c.uid)
            .map_err(|e| store_err(e, path))?
            .map(|k| k.sign_public);
        only_own_wraps_change(c.uid, sign_key, current, &update.state).map_err(|why| {
            denied(
                path,
                &format!("a rewrap may change only the caller's own wraps: {why}"),
            )
        })?;
        let state = E2eState {
            writer: current.writer,
            ..update.state
        };
        self.st()
            .set_e2e(i.ino, &update.expect, &state)
            .map_err(|e| match e {
                StoreError::Conflict => MgrError::new(
                    MgrStatus::Conflict,
                    format!("{path}: the file's keys or content changed meanwhile; read it again"),
                ),
                e => store_err(e, path),
            })
    }

    /// Public keys of the users `uids` and `names` that have them; the caller's own entry
    /// with its sealed secret.
    pub fn user_key_get(
        &self,
        c: &Caller,
        uids: &[u32],
        names: &[String],
    ) -> MgrResult<Vec<UserKeyInfo>> {
        let st = self.st();
        let mut all = uids.to_vec();
        for n in names {
            if let Some(u) = st.user_by_name(n).map_err(|e| store_err(e, n))? {
                all.push(u.uid);
            }
        }
        let mut out = Vec::with_capacity(all.len());
        for uid in all {
            let Some(u) = st.user_by_uid(uid).map_err(|e| store_err(e, "user"))? else {
                continue;
            };
            let Some(mut keys) = st.user_keys(uid).map_err(|e| store_err(e, "user"))? else {
                continue;
            };
            // A sealed seed goes to its own user's session only: never to another user, nor
            // to a gateway acting for its user (issue 21 §6).
            if uid != c.uid || c.via.is_some() {
                keys.sealed.clear();
            }
            out.push(UserKeyInfo {
                uid,
                name: u.name,
                keys,
            });
        }
        Ok(out)
    }
}

/// Files read per store call while looking for the caller's wraps.
const SCAN_BATCH: usize = 256;

/// Whether `new` may follow `has` as a user's keys: the next version, signed by the current
/// sign key; with no current keys, the version after the last one `logged` (1 for a new
/// user, the one after a reset) signed by its own; or the current version again with only
/// the sealed seed changed.
fn check_key_change(
    uid: u32,
    has: Option<&UserKeys>,
    logged: u32,
    new: &UserKeys,
) -> Result<(), String> {
    let same_keys = |h: &UserKeys| {
        h.version == new.version
            && h.enc_public == new.enc_public
            && h.sign_public == new.sign_public
            && h.signature == new.signature
    };
    let signer = match has {
        Some(h) if same_keys(h) => return Ok(()),
        Some(h) if new.version == h.version + 1 => h.sign_public,
        None if new.version == logged.saturating_add(1) => new.sign_public,
        Some(h) => {
            return Err(format!(
                "key version {} does not follow the current {}",
                new.version, h.version
            ))
        }
        None => {
            return Err(format!(
                "the user's next keys are version {}, not {}",
                logged.saturating_add(1),
                new.version
            ))
        }
    };
    let vk = ed25519_dalek::VerifyingKey::from_bytes(&signer)
        .map_err(|_| "the signing key is not an Ed25519 key".to_string())?;
    let sig = ed25519_dalek::Signature::from_bytes(&new.signature);
    vk.verify_strict(&new.change_message(uid), &sig)
        .map_err(|_| "the key change is not signed by the current key".to_string())
}

/// Whether `new` differs from `old` only in `uid`'s own wraps and, for a version `uid`
/// signed, in a signature that verifies with `uid`'s current key `sign_key`: same record and
/// side data but for the key file's entries for `uid`.
fn only_own_wraps_change(
    uid: u32,
    sign_key: Option<[u8; 32]>,
    old: &E2eState,
    new: &E2eState,
) -> Result<(), &'static str> {
    if new.record != old.record {
        return Err("the record differs");
    }
    let (Ok(a), Ok(b)) = (
        nasd_e2e::side::Side::decode(&old.side),
        nasd_e2e::side::Side::decode(&new.side),
    ) else {
        return Err("the side data does not decode");
    };
    if new.signature != old.signature {
        let record = nasd_e2e::TrustedRecord::decode(&new.record)
            .map_err(|_| "the record does not decode")?;
        let sig: [u8; 64] = new
            .signature
            .as_slice()
            .try_into()
            .map_err(|_| "a signature is 64 bytes")?;
        let verifies = sign_key.is_some_and(|k| {
            nasd_e2e::sign::WriterPublicKey(k)
                .verify_record(b.file_id, &record, &sig)
                .is_ok()
        });
        if a.signer != Some(uid) || !verifies {
            return Err("a new signature must be the caller's, of a version they signed");
        }
    }
    if a.file_id != b.file_id
        || a.signer != b.signer
        || a.counters != b.counters
        || a.integrity != b.integrity
        || a.commitments != b.commitments
        || a.unshared != b.unshared
    {
        return Err("more than the key file differs");
    }
    let me = nasd_e2e::Principal::User(uid);
    let others = |s: &nasd_e2e::side::Side| -> Vec<nasd_e2e::keys::KeyFileEntry> {
        s.key_file
            .entries()
            .iter()
            .filter(|e| e.principal != me)
            .cloned()
            .collect()
    };
    let (oa, ob) = (others(&a), others(&b));
    if oa.len() != ob.len() || !oa.iter().all(|e| ob.contains(e)) {
        return Err("another principal's wraps differ");
    }
    let versions = |s: &nasd_e2e::side::Side| {
        let mut v: Vec<u32> = s
            .key_file
            .entries()
            .iter()
            .filter(|e| e.principal == me)
            .map(|e| e.key_version)
            .collect();
        v.sort_unstable();
        v
    };
    if versions(&a) != versions(&b) {
        return Err("the caller's wraps must cover the key versions they covered");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_split_into_geometry_and_options_and_render_back() {
        let s = DirSpec::parse_stored("rs:4+2/1M,encrypted,rand,auth=1,block=4K,reader=u:7");
        assert_eq!(s.geometry.as_deref(), Some("rs:4+2/1M"));
        let p = s.policy.clone().unwrap();
        assert!(p.encrypted);
        assert_eq!(
            (p.eint, p.auth, p.block_log2),
            (Eint::Rand, WriterAuth::Signed, 12)
        );
        assert_eq!(p.readers, vec![Principal::User(7)]);
        assert_eq!(DirSpec::parse_stored(&s.render()), s);
        // A spec stored before version 12: geometry only, the policy inherited.
        let old = DirSpec::parse_stored("raid6x:8/256K");
        assert_eq!(
            (old.geometry.as_deref(), old.policy),
            (Some("raid6x:8/256K"), None)
        );
        // Options only.
        let o = DirSpec::parse_stored("plain,comp");
        assert_eq!(o.geometry, None);
        assert!(!o.policy.as_ref().unwrap().encrypted);
    }

    #[test]
    fn bad_options_are_not_options() {
        for bad in [
            "block=3K",
            "block=128K",
            "block=512",
            "auth=4",
            "reader=",
            "reader=x:1",
        ] {
            assert_eq!(parse_opt(bad, &|_, _| None), None, "{bad}");
        }
        assert_eq!(
            parse_opt("reader=@staff", &|n, g| (g && n == "staff").then_some(5)),
            Some(Opt::Reader(Principal::Group(5)))
        );
        assert_eq!(parse_opt("block=64K", &|_, _| None), Some(Opt::Block(16)));
    }
}
