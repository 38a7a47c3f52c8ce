//! The client's copy of the manager's key log (issue 21 §4): every change of users' keys,
//! checked as it arrives, so the public keys this client wraps file keys to are keys their
//! owners made, never keys the manager substituted.
//!
//! - **Chains.** Each user's keys form a chain: version 1 signs itself, every later version
//!   is signed by the previous version's sign key ([`nasd_proto::manager::key_change_message`]).
//!   A reset (an admin's, for a user who lost every key) ends a chain; the next version
//!   starts a new one, signed by itself. An entry that does not follow is refused, and with
//!   it the whole log: the manager's copy is then not one its users wrote.
//! - **The root.** The client holds every entry and recomputes the log's RFC 6962 root
//!   (`nasd_crypto::keylog`); it must equal the head the manager signed, over the entries
//!   the client held before as well as the new ones. A manager that rewrites history, or
//!   shows this client a log another client was not shown, is caught at the next read, and
//!   two clients' heads (`nasd keylog`) compare out of band.
//! - **First contact.** The first keys of a user the client meets are taken as the log
//!   shows them (trust on first use); `nasd user fingerprint NAME` and `nasd user verify NAME
//!   FINGERPRINT` compare the chain's first keys out of band, as one compares SSH host keys
//!   or Signal safety numbers. A chain that began with a reset is used to wrap file keys only
//!   once this client verified it: a reset is the one way the manager could bring in a key
//!   of its own, and it is shown to everyone.
//! - **Legacy keys.** Keys registered before key changes were signed (an all-zero signature,
//!   manager schema 12) are accepted only as first keys and only before the log's first signed
//!   entry, where a migration put them.
//!
//! - **Policy readers.** A directory policy's further readers come with a statement signed
//!   by the user who set them ([`PolicyReaders`]); the statement must verify with that
//!   user's current keys in the log, or the log is refused. Writers wrap for a policy reader
//!   only when the latest statement for the nearest directory above the file names it
//!   ([`KeyLogView::readers_over`]).
//!
//! The copy is kept beside the user's key cache (`e2e-USER.keylog`), written whole under a
//! new name and renamed, so a crash leaves the old copy or the new one.

use ed25519_dalek::{Signature, VerifyingKey};
use nasd_crypto::keylog::{head_verifies, leaf_hash, root, Hash};
use nasd_proto::codec::{Reader, Writer};
use nasd_proto::manager::{KeyLogEntry, KeyLogHead, PolicyReaders, UserKeys, Wire};
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Most entries a client keeps (past it the log is refused): a million key changes.
pub const KEY_LOG_ENTRIES_MAX: usize = 1 << 20;
/// Bytes of a user's fingerprint (128 bits).
pub const FINGERPRINT_BYTES: usize = 16;
/// Users this client has verified, at most.
pub const VERIFIED_USERS_MAX: usize = 1 << 16;
const FILE_MAGIC: &[u8; 8] = b"NSDKLOG1";
const FINGERPRINT_CONTEXT: &[u8] = b"nasd user fingerprint v1\0";

/// What went wrong with the manager's key log; nothing of the log was taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyLogError {
    #[error("the key log is signed by key {now}, not by {pinned}, the key this client has seen it signed with")]
    LogKeyChanged { pinned: String, now: String },
    #[error("the head of the key log ({size} entries) does not carry the log key's signature")]
    BadSignature { size: u64 },
    #[error("the key log has {now} entries, fewer than the {had} this client has seen: it was rolled back, or this client was shown another log")]
    Shrunk { had: u64, now: u64 },
    #[error("the key log's root at {size} entries is not the root of the entries this client holds: its history was rewritten, or this client was shown another log than others")]
    Fork { size: u64 },
    #[error("key log entry {index} (uid {uid}{}): {why}", version.map(|v| format!(", version {v}")).unwrap_or_default())]
    BadEntry {
        index: u64,
        uid: u32,
        version: Option<u32>,
        why: &'static str,
    },
    #[error("the key log is longer than the {KEY_LOG_ENTRIES_MAX} entries a client keeps")]
    TooLong,
    #[error("the manager answered a key log page from {got} when {want} was asked")]
    BadPage { got: u64, want: u64 },
    #[error("uid {uid}: the manager answered keys (version {version}) its key log does not hold")]
    NotLogged { uid: u32, version: u32 },
    #[error("the kept key log {}: {why}", .path.display())]
    File { path: PathBuf, why: String },
}

/// A user's fingerprint: of the first keys of their current chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; FINGERPRINT_BYTES]);

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str("-")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Fingerprint {
    type Err = String;
    /// 32 hex digits, in any case, with or without `-`, `:` or spaces between them.
    fn from_str(s: &str) -> Result<Fingerprint, String> {
        let digits: String = s
            .chars()
            .filter(|c| !matches!(c, '-' | ':' | ' '))
            .collect();
        let bytes = hex::decode(&digits).map_err(|e| format!("not a fingerprint: {e}"))?;
        let fp: [u8; FINGERPRINT_BYTES] = bytes
            .try_into()
            .map_err(|_| format!("a fingerprint is {} hex digits", 2 * FINGERPRINT_BYTES))?;
        Ok(Fingerprint(fp))
    }
}

/// A user's current chain of keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The current keys; `None` after a reset, until the user makes new ones.
    pub keys: Option<UserKeys>,
    pub version: u32,
    /// The place of the entry that began the chain (its first keys).
    pub first: Option<u64>,
    /// Whether the chain began after a reset.
    pub after_reset: bool,
}

/// Whether this client may wrap file keys to a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Keys of a chain this client follows from its first keys, or verified.
    Trusted(UserKeys),
    /// Keys of a chain that began after a reset this client has not verified.
    Unverified(Fingerprint),
    /// No keys.
    None,
}

/// The client's copy of the key log (module docs).
#[derive(Clone, Debug, Default)]
pub struct KeyLogView {
    log_key: Option<[u8; 32]>,
    entries: Vec<KeyLogEntry>,
    leaves: Vec<Hash>,
    users: HashMap<u32, Chain>,
    verified: HashMap<u32, Fingerprint>,
    /// Whether an entry other than legacy first keys has been seen.
    signed_seen: bool,
    /// Per directory, the place of its latest policy readers statement.
    policies: HashMap<String, usize>,
}

impl KeyLogView {
    /// Entries held.
    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The root of the entries held.
    pub fn root(&self) -> Hash {
        root(&self.leaves)
    }

    /// The root of the first `size` entries held (`None` past them).
    pub fn root_at(&self, size: u64) -> Option<Hash> {
        (size <= self.len()).then(|| root(&self.leaves[..size as usize]))
    }

    /// The log key this client has seen heads signed with.
    pub fn log_key(&self) -> Option<[u8; 32]> {
        self.log_key
    }

    /// `uid`'s current chain.
    pub fn chain(&self, uid: u32) -> Option<&Chain> {
        self.users.get(&uid)
    }

    /// `uid`'s current keys, as the log shows them.
    pub fn keys(&self, uid: u32) -> Option<&UserKeys> {
        self.users.get(&uid).and_then(|c| c.keys.as_ref())
    }

    /// The fingerprint of `uid`'s current chain (of its first keys).
    pub fn fingerprint(&self, uid: u32) -> Option<Fingerprint> {
        let first = self.users.get(&uid)?.first?;
        let entry = self.entries.get(first as usize)?.to_bytes();
        let mut h = Sha256::new();
        h.update(FINGERPRINT_CONTEXT);
        h.update(uid.to_le_bytes());
        h.update(&entry);
        let d = h.finalize();
        let mut fp = [0u8; FINGERPRINT_BYTES];
        fp.copy_from_slice(&d[..FINGERPRINT_BYTES]);
        Some(Fingerprint(fp))
    }

    /// Whether this client may wrap file keys to `uid` (module docs, "First contact").
    pub fn trust(&self, uid: u32) -> Trust {
        let Some(c) = self.users.get(&uid) else {
            return Trust::None;
        };
        let (Some(keys), Some(fp)) = (&c.keys, self.fingerprint(uid)) else {
            return Trust::None;
        };
        if c.after_reset && self.verified.get(&uid) != Some(&fp) {
            return Trust::Unverified(fp);
        }
        Trust::Trusted(keys.clone())
    }

    /// Records that `uid`'s chain with fingerprint `fp` was checked out of band; false when
    /// `fp` is not the fingerprint of their current chain.
    pub fn verify(&mut self, uid: u32, fp: Fingerprint) -> bool {
        if self.fingerprint(uid) != Some(fp) {
            return false;
        }
        if self.verified.len() >= VERIFIED_USERS_MAX && !self.verified.contains_key(&uid) {
            return false;
        }
        self.verified.insert(uid, fp);
        true
    }

    /// Whether `uid`'s chain was verified here.
    pub fn verified(&self, uid: u32) -> bool {
        self.fingerprint(uid)
            .is_some_and(|fp| self.verified.get(&uid) == Some(&fp))
    }

    /// Takes the head of a page: signed by the log key seen before (the first one is kept),
    /// and not shorter than what this client holds.
    pub fn check_head(&mut self, head: &KeyLogHead) -> Result<(), KeyLogError> {
        match self.log_key {
            Some(k) if k != head.log_key => {
                return Err(KeyLogError::LogKeyChanged {
                    pinned: hex::encode(k),
                    now: hex::encode(head.log_key),
                })
            }
            _ => {}
        }
        if !head_verifies(&head.log_key, head.size, &head.root, &head.signature) {
            return Err(KeyLogError::BadSignature { size: head.size });
        }
        if head.size < self.len() {
            return Err(KeyLogError::Shrunk {
                had: self.len(),
                now: head.size,
            });
        }
        self.log_key = Some(head.log_key);
        Ok(())
    }

    /// Whether the entries held are the whole log `head` describes; a root that differs at
    /// the same size is a fork.
    pub fn matches(&self, head: &KeyLogHead) -> Result<bool, KeyLogError> {
        if head.size != self.len() {
            return Ok(false);
        }
        if self.root() != head.root {
            return Err(KeyLogError::Fork { size: head.size });
        }
        Ok(true)
    }

    /// Appends the next entry after checking it follows its user's chain.
    pub fn apply(&mut self, entry: KeyLogEntry) -> Result<(), KeyLogError> {
        let index = self.len();
        if self.entries.len() >= KEY_LOG_ENTRIES_MAX {
            return Err(KeyLogError::TooLong);
        }
        let (uid, version) = (entry.uid(), entry.version());
        let bad = |why| KeyLogError::BadEntry {
            index,
            uid,
            version,
            why,
        };
        if let KeyLogEntry::Readers(p) = &entry {
            self.check_readers(p).map_err(bad)?;
            self.policies.insert(p.dir.clone(), self.entries.len());
            self.signed_seen = true;
        } else {
            let legacy =
                matches!(&entry, KeyLogEntry::Keys { keys, .. } if keys.signature == [0; 64]);
            let next =
                next_chain(self.users.get(&uid), &entry, index, !self.signed_seen).map_err(bad)?;
            self.signed_seen |= !legacy;
            self.users.insert(uid, next);
        }
        self.leaves.push(leaf_hash(&entry.to_bytes()));
        self.entries.push(entry);
        Ok(())
    }

    /// Whether a policy readers statement verifies with its setter's current keys.
    fn check_readers(&self, p: &PolicyReaders) -> Result<(), &'static str> {
        let keys = self
            .keys(p.by)
            .ok_or("policy readers set by a user with no keys")?;
        nasd_crypto::wsig::verify(
            &nasd_proto::WriterPublicKey(keys.sign_public),
            &p.message(),
            &nasd_proto::WriterSignature(p.signature),
        )
        .map_err(|_| "policy readers not signed by their setter's key")
    }

    /// The latest policy readers statement of the nearest directory at or above `dir` (a
    /// path from the cluster's root) that has one.
    pub fn readers_over(&self, dir: &str) -> Option<&PolicyReaders> {
        let mut at = dir.trim_end_matches('/');
        loop {
            let key = if at.is_empty() { "/" } else { at };
            if let Some(KeyLogEntry::Readers(p)) = self.policies.get(key).map(|&i| &self.entries[i])
            {
                return Some(p);
            }
            match at.rfind('/') {
                _ if at.is_empty() => return None,
                Some(i) => at = &at[..i],
                None => return None,
            }
        }
    }

    /// Checks keys the manager answered for `uid` against the log: the same public keys,
    /// version and signature as the chain's current keys.
    pub fn check_answered(&self, uid: u32, keys: &UserKeys) -> Result<(), KeyLogError> {
        let same = self.keys(uid).is_some_and(|k| {
            k.enc_public == keys.enc_public
                && k.sign_public == keys.sign_public
                && k.version == keys.version
                && k.signature == keys.signature
        });
        if same {
            Ok(())
        } else {
            Err(KeyLogError::NotLogged {
                uid,
                version: keys.version,
            })
        }
    }

    /// The copy kept in `path`; an empty one when there is none yet.
    pub fn load(path: &Path) -> Result<KeyLogView, KeyLogError> {
        let file_err = |why: String| KeyLogError::File {
            path: path.to_path_buf(),
            why,
        };
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(file_err(e.to_string())),
        };
        Self::decode(&bytes).map_err(|e| {
            file_err(format!(
                "{e}; remove it to read the log afresh (the users verified here are then forgotten)"
            ))
        })
    }

    fn decode(bytes: &[u8]) -> Result<KeyLogView, String> {
        let mut r = Reader::new(bytes);
        let d = |e: nasd_proto::DecodeError| e.to_string();
        if &r.array::<8>("magic").map_err(d)? != FILE_MAGIC {
            return Err("not a key log file".into());
        }
        let mut v = KeyLogView {
            log_key: match r.u8("log key").map_err(d)? {
                0 => None,
                _ => Some(r.array("log key").map_err(d)?),
            },
            ..Default::default()
        };
        let verified = r.u32("verified").map_err(d)? as usize;
        if verified > VERIFIED_USERS_MAX {
            return Err("too many verified users".into());
        }
        for _ in 0..verified {
            let uid = r.u32("uid").map_err(d)?;
            v.verified
                .insert(uid, Fingerprint(r.array("fingerprint").map_err(d)?));
        }
        let n = r.u64("entries").map_err(d)?;
        for _ in 0..n {
            let e = KeyLogEntry::get(&mut r).map_err(d)?;
            v.apply(e).map_err(|e| e.to_string())?;
        }
        r.finish("key log file").map_err(d)?;
        Ok(v)
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.bytes(FILE_MAGIC);
        match self.log_key {
            Some(k) => {
                w.u8(1);
                w.bytes(&k);
            }
            None => w.u8(0),
        }
        w.u32(self.verified.len() as u32);
        for (uid, fp) in &self.verified {
            w.u32(*uid);
            w.bytes(&fp.0);
        }
        w.u64(self.len());
        for e in &self.entries {
            e.put(&mut w);
        }
        w.into_vec()
    }

    /// Keeps the copy in `path` (private, written under a new name and renamed over it).
    pub fn save(&self, path: &Path) -> Result<(), KeyLogError> {
        let tmp = path.with_extension(format!("keylog.{}.tmp", std::process::id()));
        let file_err = |why: String| KeyLogError::File {
            path: path.to_path_buf(),
            why,
        };
        nasd_private::write_file(&tmp, &self.encode()).map_err(|e| file_err(e.to_string()))?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            file_err(e.to_string())
        })
    }
}

/// `uid`'s chain after `entry` (at `index`), or why the entry does not follow `prev`.
/// `legacy_open`: no signed entry seen yet, so keys with an all-zero signature may begin a
/// chain.
fn next_chain(
    prev: Option<&Chain>,
    entry: &KeyLogEntry,
    index: u64,
    legacy_open: bool,
) -> Result<Chain, &'static str> {
    let (uid, keys) = match entry {
        KeyLogEntry::Reset { version, .. } => {
            let prev = prev.ok_or("a reset of a user with no keys")?;
            if *version != prev.version.saturating_add(1) {
                return Err("a reset out of order");
            }
            return Ok(Chain {
                keys: None,
                version: *version,
                first: None,
                after_reset: true,
            });
        }
        KeyLogEntry::Keys { uid, keys } => (*uid, keys),
        KeyLogEntry::Readers(_) => return Err("a policy's readers are no key change"),
    };
    let next_version = prev.map_or(1, |p| p.version.saturating_add(1));
    if keys.version != next_version {
        return Err("a version out of order");
    }
    let legacy = keys.signature == [0; 64];
    let (signer, first, after_reset) = match prev {
        None if legacy && legacy_open => {
            return Ok(Chain {
                keys: Some(keys.clone()),
                version: 1,
                first: Some(index),
                after_reset: false,
            })
        }
        None if legacy => return Err("unsigned keys after signed ones"),
        None => (keys.sign_public, index, false),
        Some(p) => match &p.keys {
            Some(h) => (h.sign_public, p.first.unwrap_or(index), p.after_reset),
            None => (keys.sign_public, index, true),
        },
    };
    let signed = VerifyingKey::from_bytes(&signer)
        .and_then(|k| {
            k.verify_strict(
                &keys.change_message(uid),
                &Signature::from_bytes(&keys.signature),
            )
        })
        .is_ok();
    if !signed {
        return Err("the change is not signed by the user's previous key");
    }
    Ok(Chain {
        keys: Some(keys.clone()),
        version: keys.version,
        first: Some(first),
        after_reset,
    })
}

#[cfg(test)]
mod tests;
