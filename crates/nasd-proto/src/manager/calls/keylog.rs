//! The key log (manager protocol 19; issue 21 §4): every change of users' end-to-end keys in
//! one append-only log, read by clients page by page with the manager's signed head, and an
//! admin's reset of a user who lost every key, which the log shows to everyone.
//! ```text
//! KeyLog       := u64 from
//! KeyLogPage   := u64 size, [32] root, [64] signature, [32] log key, u64 from,
//!                 u32 n (<= KEY_LOG_PAGE_MAX), n x entry
//! entry        := u8 0 (keys), u32 uid, [32] enc_public, [32] sign_public, u32 version,
//!                 [64] signature
//!               | u8 1 (reset), u32 uid, u32 version, u32 by, u64 at_ms
//! UserKeyReset := string user
//! ```
//! An entry's encoding is also what the log's tree hashes as a leaf
//! (`nasd_crypto::keylog`).

use super::one_string;
use crate::codec::{Reader, Writer};
use crate::manager::codec::get_count;
use crate::manager::{UserKeys, Wire};
use crate::DecodeError;

/// Most entries one [`KeyLogPage`] carries (about 560 KiB of the largest entries).
pub const KEY_LOG_PAGE_MAX: usize = 4096;
/// Encoded bytes of the largest entry (a key change).
pub const KEY_LOG_ENTRY_BYTES_MAX: usize = 1 + 4 + 32 + 32 + 4 + 64;

const KIND_KEYS: u8 = 0;
const KIND_RESET: u8 = 1;

/// One change of a user's keys.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum KeyLogEntry {
    /// `uid`'s keys became `keys` (their version and the signature of the change by the
    /// previous version's sign key; the first of a chain signs itself; nothing sealed).
    Keys { uid: u32, keys: UserKeys },
    /// Admin `by` cleared `uid`'s keys at `at_ms` (a user who lost every key): `version` has
    /// no keys, and the next version starts a new chain, signed by itself.
    Reset {
        uid: u32,
        version: u32,
        by: u32,
        at_ms: u64,
    },
}

impl KeyLogEntry {
    /// The user whose keys the entry changes.
    pub fn uid(&self) -> u32 {
        match self {
            KeyLogEntry::Keys { uid, .. } | KeyLogEntry::Reset { uid, .. } => *uid,
        }
    }

    /// The version of the user's keys the entry makes.
    pub fn version(&self) -> u32 {
        match self {
            KeyLogEntry::Keys { keys, .. } => keys.version,
            KeyLogEntry::Reset { version, .. } => *version,
        }
    }

    /// The entry's encoding (also the log tree's leaf input).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(KEY_LOG_ENTRY_BYTES_MAX);
        self.put(&mut w);
        w.into_vec()
    }

    /// Decodes one whole entry.
    pub fn from_bytes(b: &[u8]) -> Result<KeyLogEntry, DecodeError> {
        let mut r = Reader::new(b);
        let e = KeyLogEntry::get(&mut r)?;
        r.finish("key log entry")?;
        Ok(e)
    }
}

impl Wire for KeyLogEntry {
    fn put(&self, w: &mut Writer) {
        match self {
            KeyLogEntry::Keys { uid, keys } => {
                w.u8(KIND_KEYS);
                w.u32(*uid);
                w.bytes(&keys.enc_public);
                w.bytes(&keys.sign_public);
                w.u32(keys.version);
                w.bytes(&keys.signature);
            }
            KeyLogEntry::Reset {
                uid,
                version,
                by,
                at_ms,
            } => {
                w.u8(KIND_RESET);
                w.u32(*uid);
                w.u32(*version);
                w.u32(*by);
                w.u64(*at_ms);
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let kind = r.u8("key log entry kind")?;
        let uid = r.u32("uid")?;
        match kind {
            KIND_KEYS => Ok(KeyLogEntry::Keys {
                uid,
                keys: UserKeys {
                    enc_public: r.array("enc public")?,
                    sign_public: r.array("sign public")?,
                    version: r.u32("key version")?,
                    signature: r.array("key signature")?,
                    sealed: vec![],
                },
            }),
            KIND_RESET => Ok(KeyLogEntry::Reset {
                uid,
                version: r.u32("key version")?,
                by: r.u32("reset by")?,
                at_ms: r.u64("reset at")?,
            }),
            _ => Err(DecodeError::BadValue("key log entry kind")),
        }
    }
}

/// Entries of the key log from `from`, after the manager's signed head of the whole log.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KeyLog {
    pub from: u64,
}

impl Wire for KeyLog {
    fn put(&self, w: &mut Writer) {
        w.u64(self.from);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(KeyLog {
            from: r.u64("from")?,
        })
    }
}

/// The head of the key log: its size and root, signed by the manager's log key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KeyLogHead {
    pub size: u64,
    pub root: [u8; 32],
    pub signature: [u8; 64],
    /// The manager's log key (Ed25519), which clients keep from their first page.
    pub log_key: [u8; 32],
}

/// A page of the key log: the head, then up to [`KEY_LOG_PAGE_MAX`] entries from `from`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KeyLogPage {
    pub head: KeyLogHead,
    pub from: u64,
    pub entries: Vec<KeyLogEntry>,
}

impl Wire for KeyLogPage {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.entries.len() <= KEY_LOG_PAGE_MAX);
        w.u64(self.head.size);
        w.bytes(&self.head.root);
        w.bytes(&self.head.signature);
        w.bytes(&self.head.log_key);
        w.u64(self.from);
        w.u32(self.entries.len() as u32);
        for e in &self.entries {
            e.put(w);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let head = KeyLogHead {
            size: r.u64("log size")?,
            root: r.array("log root")?,
            signature: r.array("log head signature")?,
            log_key: r.array("log key")?,
        };
        let from = r.u64("from")?;
        // The smallest entry (a reset) is 21 bytes.
        let n = get_count(r, 1 + 4 + 4 + 4 + 8, "key log entries")?;
        if n > KEY_LOG_PAGE_MAX {
            return Err(DecodeError::TooLong("key log entries"));
        }
        let entries = (0..n)
            .map(|_| KeyLogEntry::get(r))
            .collect::<Result<_, _>>()?;
        Ok(KeyLogPage {
            head,
            from,
            entries,
        })
    }
}

one_string! {
    /// Clears `user`'s keys and logs it (admins): for a user who lost every key, whose next
    /// login then makes a new chain that every client sees began with a reset.
    UserKeyReset { user: "user" }
}
