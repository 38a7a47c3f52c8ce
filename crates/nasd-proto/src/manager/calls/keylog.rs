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
//!               | u8 2 (readers), PolicyReaders
//! PolicyReaders := u32 by, u64 at_ms, string dir (<= POLICY_DIR_BYTES_MAX),
//!                 u8 n (<= POLICY_READERS_MAX), n x Principal, [64] signature
//! UserKeyReset := string user
//! PolicyLog    := PolicyReaders
//! ```
//! An entry's encoding is also what the log's tree hashes as a leaf
//! (`nasd_crypto::keylog`).
//!
//! A directory policy's further readers (`reader=USER`) are a change of who receives file
//! keys, so they are logged with the keys (manager protocol 22; issue 21 §5): the user who
//! set them signs them with their identity key ([`PolicyReaders::message`]), and writers
//! wrap new files' keys for a policy reader only when the latest entry for the nearest
//! directory above the file names it. The manager's operator cannot add a reader, and an
//! admin who adds one does so in a log every client reads.

use super::one_string;
use crate::codec::{Reader, Writer};
use crate::e2e::{get_principals, put_principals, Principal, POLICY_READERS_MAX};
use crate::manager::codec::{get_count, get_str, put_str};
use crate::manager::{UserKeys, Wire, MANAGER_FRAME_BYTES_MAX};
use crate::DecodeError;

/// Most entries one [`KeyLogPage`] carries (about 2.6 MiB of the largest entries).
pub const KEY_LOG_PAGE_MAX: usize = 4096;
/// Longest path of a directory whose policy readers are logged.
pub const POLICY_DIR_BYTES_MAX: usize = 512;
/// Encoded bytes of the largest entry (a policy's readers).
pub const KEY_LOG_ENTRY_BYTES_MAX: usize =
    1 + 4 + 8 + 4 + POLICY_DIR_BYTES_MAX + 1 + 5 * POLICY_READERS_MAX + 64;
const _: () = assert!(KEY_LOG_PAGE_MAX * KEY_LOG_ENTRY_BYTES_MAX + 256 < MANAGER_FRAME_BYTES_MAX);
/// Domain separation of a setter's signature over a directory's readers.
pub const POLICY_READERS_CONTEXT: &[u8] = b"nasd policy readers v1\0";

const KIND_KEYS: u8 = 0;
const KIND_RESET: u8 = 1;
const KIND_READERS: u8 = 2;

/// The further readers of directory `dir`'s policy, as user `by` set them at `at_ms`, signed
/// with `by`'s identity key (module docs). Readers are sorted and distinct.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PolicyReaders {
    pub by: u32,
    pub at_ms: u64,
    pub dir: String,
    pub readers: Vec<Principal>,
    pub signature: [u8; 64],
}

impl PolicyReaders {
    /// What `by` signs: the context, then the statement's fields as encoded, without the
    /// signature.
    pub fn message(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(KEY_LOG_ENTRY_BYTES_MAX);
        w.bytes(POLICY_READERS_CONTEXT);
        self.put_unsigned(&mut w);
        w.into_vec()
    }

    fn put_unsigned(&self, w: &mut Writer) {
        debug_assert!(self.dir.len() <= POLICY_DIR_BYTES_MAX);
        debug_assert!(self.readers.len() <= POLICY_READERS_MAX);
        w.u32(self.by);
        w.u64(self.at_ms);
        put_str(w, &self.dir);
        put_principals(w, &self.readers);
    }

    /// Whether `dir` is a path as statements name directories: absolute, without empty, `.`
    /// or `..` components or a trailing `/` (the root is `/`), and short enough.
    pub fn dir_ok(dir: &str) -> bool {
        dir.len() <= POLICY_DIR_BYTES_MAX
            && (dir == "/"
                || dir.strip_prefix('/').is_some_and(|rest| {
                    rest.split('/')
                        .all(|c| !c.is_empty() && c != "." && c != "..")
                }))
    }
}

impl Wire for PolicyReaders {
    fn put(&self, w: &mut Writer) {
        self.put_unsigned(w);
        w.bytes(&self.signature);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let by = r.u32("policy set by")?;
        let at_ms = r.u64("policy set at")?;
        let dir = get_str(r, "policy directory")?;
        if !PolicyReaders::dir_ok(&dir) {
            return Err(DecodeError::BadValue("policy directory"));
        }
        let readers = get_principals(r, "policy readers")?;
        if readers.windows(2).any(|w| w[0] >= w[1]) {
            return Err(DecodeError::BadValue("policy readers not sorted"));
        }
        Ok(PolicyReaders {
            by,
            at_ms,
            dir,
            readers,
            signature: r.array("policy signature")?,
        })
    }
}

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
    /// A directory policy's further readers, as their setter signed them.
    Readers(PolicyReaders),
}

impl KeyLogEntry {
    /// The user whose keys the entry changes, or who set a policy's readers.
    pub fn uid(&self) -> u32 {
        match self {
            KeyLogEntry::Keys { uid, .. } | KeyLogEntry::Reset { uid, .. } => *uid,
            KeyLogEntry::Readers(p) => p.by,
        }
    }

    /// The version of the user's keys the entry makes (`None` for a policy's readers).
    pub fn version(&self) -> Option<u32> {
        match self {
            KeyLogEntry::Keys { keys, .. } => Some(keys.version),
            KeyLogEntry::Reset { version, .. } => Some(*version),
            KeyLogEntry::Readers(_) => None,
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
            KeyLogEntry::Readers(p) => {
                w.u8(KIND_READERS);
                p.put(w);
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let kind = r.u8("key log entry kind")?;
        if kind == KIND_READERS {
            return Ok(KeyLogEntry::Readers(PolicyReaders::get(r)?));
        }
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

/// Logs the caller's signed statement of the further readers directory `readers.dir`'s policy
/// names now (its owner or an admin, after a [`super::LayoutSet`] answered them; `by` is the
/// caller). Answered with `()`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PolicyLog {
    pub readers: PolicyReaders,
}

impl Wire for PolicyLog {
    fn put(&self, w: &mut Writer) {
        self.readers.put(w);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(PolicyLog {
            readers: PolicyReaders::get(r)?,
        })
    }
}
