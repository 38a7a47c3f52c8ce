//! The manager protocol's end-to-end protection types (manager protocol 12; issue 10, seeds
//! 001 and 003): what a directory asks of new files ([`E2ePolicy`]), what the manager keeps per
//! file for its readers ([`E2eState`]: seed 003's trusted record, the writer and its signature,
//! and side data the manager cannot read), and the public keys of users and groups with the
//! wraps that give members a group's secret (seed 001 §3.2). The manager stores and returns
//! these; it never holds a key that unwraps a file key.
//!
//! Byte layouts (little-endian; `blob` = `u32` length then bytes):
//! ```text
//! E2ePolicy   := u8 flags (bit 0: encrypted), u8 eint (0 MT, 1 RAND, 2 COMP),
//!                u8 auth (1 signature checked by the drive, 2 signature for readers,
//!                3 keyed hash only), u8 block_log2 (10..=16),
//!                u8 n (<= POLICY_READERS_MAX), n x Principal (readers),
//!                u8 m (<= POLICY_READERS_MAX), m x Principal (everyone),
//!                u8 k (<= POLICY_READERS_MAX), k x GroupKeyState
//! GroupKeyState := u32 gid, u32 version, u8 current (0 | 1)
//! Principal   := u8 kind (1 user, 2 group), u32 id
//! E2eState    := blob record (<= E2E_RECORD_BYTES_MAX), u32 writer,
//!                blob signature (0 or 64 bytes), blob side (<= E2E_SIDE_BYTES_MAX)
//! E2eCommit   := [32] expect, E2eState
//! UserKeys    := [32] enc_public, [32] sign_public, u32 version, [64] signature,
//!                blob sealed (<= SEALED_SECRET_BYTES_MAX)
//! ```

use crate::codec::{get_bool, put_bool, Reader, Writer};
use crate::DecodeError;

/// Most further principals a directory's policy wraps new files' keys for.
pub const POLICY_READERS_MAX: usize = 8;
/// Largest trusted record (nasd-e2e's `TrustedRecord`: 90 bytes in format 1, 146 in format 2;
/// 128 before manager protocol 20).
pub const E2E_RECORD_BYTES_MAX: usize = 256;
/// Largest side data a file's end-to-end state carries (key file, counter intervals, pins or
/// RAND/COMP tree nodes): every `Opened` of the file carries it, so it is kept small.
pub const E2E_SIDE_BYTES_MAX: usize = 256 << 10;
/// An Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// Largest sealed user secret (a 32-byte seed under an AEAD, with its header).
pub const SEALED_SECRET_BYTES_MAX: usize = 512;
/// Domain separation of the signature over a user's key change ([`key_change_message`]).
pub const KEY_CHANGE_CONTEXT: &[u8] = b"nasd user key change v1\0";

/// What the Ed25519 key of `uid`'s previous keys (the new sign key itself for version 1)
/// signs when the user's keys become version `version`: the context, the uid, the version
/// and both new public keys. Kept with the keys, so a key chain can be checked later.
pub fn key_change_message(
    uid: u32,
    version: u32,
    enc_public: &[u8; 32],
    sign_public: &[u8; 32],
) -> Vec<u8> {
    let mut m = Vec::with_capacity(KEY_CHANGE_CONTEXT.len() + 8 + 64);
    m.extend_from_slice(KEY_CHANGE_CONTEXT);
    m.extend_from_slice(&uid.to_le_bytes());
    m.extend_from_slice(&version.to_le_bytes());
    m.extend_from_slice(enc_public);
    m.extend_from_slice(sign_public);
    m
}
/// Most wraps one `GroupKeySet` carries, and most ids one key lookup names.
pub const KEY_LIST_MAX: usize = 4096;
/// Smallest and largest block sizes a policy may name, as powers of two (1 KiB .. 64 KiB).
pub const BLOCK_LOG2_MIN: u8 = 10;
pub const BLOCK_LOG2_MAX: u8 = 16;

/// Seed 003's integrity constructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Eint {
    /// A Merkle tree over the ciphertext: in nasd, the drives' own trees, their tops pinned at
    /// the manager by the writer.
    Mt = 0,
    /// A wide-block cipher and an entropy test; hashes only for random-looking blocks.
    Rand = 1,
    /// Blocks that compress carry their MAC inside; the others as RAND-EINT.
    Comp = 2,
}

impl Eint {
    pub fn from_u8(v: u8) -> Result<Eint, DecodeError> {
        Ok(match v {
            0 => Eint::Mt,
            1 => Eint::Rand,
            2 => Eint::Comp,
            _ => return Err(DecodeError::BadValue("eint")),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Eint::Mt => "mt",
            Eint::Rand => "rand",
            Eint::Comp => "comp",
        }
    }
}

/// Seed 001 §3.3's writer authentication schemes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriterAuth {
    /// Scheme 1: the writer signs every write and the drive checks the signature before it
    /// stores (the capability names the key); readers check the version's signature.
    Signed = 1,
    /// Scheme 2: the drive checks the keyed hash (the capability MAC); readers check the
    /// writer's signature over each version.
    SignedForReaders = 2,
    /// Scheme 3: keyed hash only.
    KeyedHash = 3,
}

impl WriterAuth {
    pub fn from_u8(v: u8) -> Result<WriterAuth, DecodeError> {
        Ok(match v {
            1 => WriterAuth::Signed,
            2 => WriterAuth::SignedForReaders,
            3 => WriterAuth::KeyedHash,
            _ => return Err(DecodeError::BadValue("writer auth scheme")),
        })
    }

    /// Whether versions carry the writer's signature.
    pub fn signs(self) -> bool {
        self != WriterAuth::KeyedHash
    }
}

/// A user or a group, as key files and policies name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Principal {
    User(u32),
    Group(u32),
}

impl Principal {
    pub(crate) fn put(&self, w: &mut Writer) {
        match *self {
            Principal::User(id) => {
                w.u8(1);
                w.u32(id);
            }
            Principal::Group(id) => {
                w.u8(2);
                w.u32(id);
            }
        }
    }

    pub(crate) fn get(r: &mut Reader<'_>) -> Result<Principal, DecodeError> {
        let kind = r.u8("principal kind")?;
        let id = r.u32("principal id")?;
        match kind {
            1 => Ok(Principal::User(id)),
            2 => Ok(Principal::Group(id)),
            _ => Err(DecodeError::BadValue("principal kind")),
        }
    }
}

/// `u8 n` (at most [`POLICY_READERS_MAX`]) then `n` principals: a policy's readers, its
/// `everyone`, a logged statement's readers.
pub(crate) fn put_principals(w: &mut Writer, list: &[Principal]) {
    debug_assert!(list.len() <= POLICY_READERS_MAX);
    w.u8(list.len() as u8);
    for p in list {
        p.put(w);
    }
}

pub(crate) fn get_principals(
    r: &mut Reader<'_>,
    what: &'static str,
) -> Result<Vec<Principal>, DecodeError> {
    let n = r.u8(what)? as usize;
    if n > POLICY_READERS_MAX {
        return Err(DecodeError::TooLong(what));
    }
    (0..n).map(|_| Principal::get(r)).collect()
}

/// What a directory asks of the files made in it (and of its new subdirectories), issue 10.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct E2ePolicy {
    /// Writers encrypt the file's bytes before they leave the client (seed 001 §2.1).
    pub encrypted: bool,
    pub eint: Eint,
    pub auth: WriterAuth,
    /// Encryption block size, as a power of two (seed 001 §3.3.1 uses 64 KB blocks).
    pub block_log2: u8,
    /// Principals every new file's key is also wrapped for, beyond those its mode lets read
    /// (a gateway's user, say).
    pub readers: Vec<Principal>,
    /// Who "others" are (the groups every user belongs to): a file whose mode lets others
    /// read has its key wrapped for them. Filled in by the manager in grants; not stored.
    pub everyone: Vec<Principal>,
    /// The key pairs of the `everyone` groups as the manager has them when it answers
    /// (manager protocol 23), so a writer asks for a group's key pair only when it moved.
    /// Filled in by the manager in grants; not stored.
    pub group_keys: Vec<GroupKeyState>,
}

/// A group's key pair as a grant names it ([`E2ePolicy::group_keys`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupKeyState {
    pub gid: u32,
    /// The current version (0: none yet).
    pub version: u32,
    /// The group has a key pair and is not due a new one.
    pub current: bool,
}

impl Default for E2ePolicy {
    /// What a cluster's files get unless a directory says otherwise: encrypted, MT-EINT
    /// (free in nasd: the drives keep the tree), versions signed for readers, 64 KiB blocks.
    fn default() -> E2ePolicy {
        E2ePolicy {
            encrypted: true,
            eint: Eint::Mt,
            auth: WriterAuth::SignedForReaders,
            block_log2: BLOCK_LOG2_MAX,
            readers: vec![],
            everyone: vec![],
            group_keys: vec![],
        }
    }
}

impl E2ePolicy {
    /// Files that are not encrypted.
    pub fn plaintext() -> E2ePolicy {
        E2ePolicy {
            encrypted: false,
            ..E2ePolicy::default()
        }
    }

    pub fn block_bytes(&self) -> u32 {
        1 << self.block_log2
    }

    pub fn put(&self, w: &mut Writer) {
        debug_assert!(self.readers.len() <= POLICY_READERS_MAX);
        w.u8(self.encrypted as u8);
        w.u8(self.eint as u8);
        w.u8(self.auth as u8);
        w.u8(self.block_log2);
        put_principals(w, &self.readers);
        put_principals(w, &self.everyone);
        debug_assert!(self.group_keys.len() <= POLICY_READERS_MAX);
        w.u8(self.group_keys.len() as u8);
        for g in &self.group_keys {
            w.u32(g.gid);
            w.u32(g.version);
            put_bool(w, g.current);
        }
    }

    pub fn get(r: &mut Reader<'_>) -> Result<E2ePolicy, DecodeError> {
        let flags = r.u8("policy flags")?;
        if flags > 1 {
            return Err(DecodeError::BadValue("policy flags"));
        }
        let eint = Eint::from_u8(r.u8("eint")?)?;
        let auth = WriterAuth::from_u8(r.u8("writer auth")?)?;
        let block_log2 = r.u8("block size")?;
        if !(BLOCK_LOG2_MIN..=BLOCK_LOG2_MAX).contains(&block_log2) {
            return Err(DecodeError::BadValue("block size"));
        }
        let readers = get_principals(r, "policy readers")?;
        let everyone = get_principals(r, "policy everyone")?;
        let n = r.u8("group keys")? as usize;
        if n > POLICY_READERS_MAX {
            return Err(DecodeError::TooLong("group keys"));
        }
        let mut group_keys = Vec::with_capacity(n);
        for _ in 0..n {
            group_keys.push(GroupKeyState {
                gid: r.u32("group")?,
                version: r.u32("group key version")?,
                current: get_bool(r, "group key current")?,
            });
        }
        Ok(E2ePolicy {
            encrypted: flags == 1,
            eint,
            auth,
            block_log2,
            readers,
            everyone,
            group_keys,
        })
    }

    /// The policy as bytes (how the manager stores it).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(8 + 5 * self.readers.len());
        self.put(&mut w);
        w.into_vec()
    }

    pub fn decode(b: &[u8]) -> Result<E2ePolicy, DecodeError> {
        let mut r = Reader::new(b);
        let p = E2ePolicy::get(&mut r)?;
        r.finish("policy")?;
        Ok(p)
    }
}

/// A file's end-to-end state at the manager: seed 003's constant-size trusted record, who
/// committed the version it describes (the manager sets this, from the session), the writer's
/// signature over it (seed 001 schemes 1 and 2; empty for scheme 3), and the side data readers
/// check against the record (the key file with its wraps, counter intervals, pins or tree
/// nodes), which the manager only stores.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct E2eState {
    pub record: Vec<u8>,
    pub writer: u32,
    pub signature: Vec<u8>,
    pub side: Vec<u8>,
}

impl E2eState {
    pub fn put(&self, w: &mut Writer) {
        debug_assert!(self.record.len() <= E2E_RECORD_BYTES_MAX);
        debug_assert!(self.side.len() <= E2E_SIDE_BYTES_MAX);
        w.blob(&self.record);
        w.u32(self.writer);
        w.blob(&self.signature);
        w.blob(&self.side);
    }

    pub fn get(r: &mut Reader<'_>) -> Result<E2eState, DecodeError> {
        let record = r.blob(E2E_RECORD_BYTES_MAX, "e2e record")?.to_vec();
        let writer = r.u32("e2e writer")?;
        let signature = r.blob(SIGNATURE_BYTES, "e2e signature")?.to_vec();
        if !(signature.is_empty() || signature.len() == SIGNATURE_BYTES) {
            return Err(DecodeError::BadValue("e2e signature length"));
        }
        let side = r.blob(E2E_SIDE_BYTES_MAX, "e2e side")?.to_vec();
        Ok(E2eState {
            record,
            writer,
            signature,
            side,
        })
    }
}

/// A new end-to-end state and the record it replaces (compare-and-swap, seed 003 / B.3 step 3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct E2eCommit {
    /// The state the writer built on (nasd-e2e's `state_hash` of its record and side data),
    /// checked by copy-on-write changes and `E2eUpdate`; all zeros for an upload, which
    /// replaces whatever state there was (but never with an older key version).
    pub expect: [u8; 32],
    pub state: E2eState,
}

impl E2eCommit {
    pub fn put(&self, w: &mut Writer) {
        w.bytes(&self.expect);
        self.state.put(w);
    }

    pub fn get(r: &mut Reader<'_>) -> Result<E2eCommit, DecodeError> {
        Ok(E2eCommit {
            expect: r.array("e2e expect")?,
            state: E2eState::get(r)?,
        })
    }
}

/// A user's end-to-end public keys (X25519 for key wraps, Ed25519 for signatures), their
/// version (1 for the first, one more at each change) and the signature of
/// [`key_change_message`] by the previous version's sign key (version 1: by its own; all
/// zeros: keys made before key changes were signed), and, only ever returned to the user,
/// their seed sealed under a key from their OPAQUE export key.
#[derive(Clone, PartialEq, Eq)]
pub struct UserKeys {
    pub enc_public: [u8; 32],
    pub sign_public: [u8; 32],
    pub version: u32,
    pub signature: [u8; SIGNATURE_BYTES],
    pub sealed: Vec<u8>,
}

impl std::fmt::Debug for UserKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserKeys")
            .field("enc_public", &hex8(&self.enc_public))
            .field("sign_public", &hex8(&self.sign_public))
            .field("version", &self.version)
            .field("sealed_bytes", &self.sealed.len())
            .finish()
    }
}

fn hex8(b: &[u8]) -> String {
    b.iter().take(8).map(|x| format!("{x:02x}")).collect()
}

impl UserKeys {
    pub fn put(&self, w: &mut Writer) {
        w.bytes(&self.enc_public);
        w.bytes(&self.sign_public);
        w.u32(self.version);
        w.bytes(&self.signature);
        w.blob(&self.sealed);
    }

    pub fn get(r: &mut Reader<'_>) -> Result<UserKeys, DecodeError> {
        Ok(UserKeys {
            enc_public: r.array("enc public")?,
            sign_public: r.array("sign public")?,
            version: r.u32("key version")?,
            signature: r.array("key signature")?,
            sealed: r.blob(SEALED_SECRET_BYTES_MAX, "sealed secret")?.to_vec(),
        })
    }

    /// The message this version's signature signs.
    pub fn change_message(&self, uid: u32) -> Vec<u8> {
        key_change_message(uid, self.version, &self.enc_public, &self.sign_public)
    }
}

/// A user's public keys as a key lookup answers (`sealed` only for the caller's own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserKeyInfo {
    pub uid: u32,
    pub name: String,
    pub keys: UserKeys,
}

/// A group's current key pair's public half and version, the caller's wrap of its secret (if
/// the caller is a member holding one), whether a new key pair is due, the members who have
/// keys but no wrap of this version yet (for a member's client to wrap to), and the links
/// that open older versions' secrets from this one's (manager protocol 21).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupKeyInfo {
    pub gid: u32,
    pub name: String,
    pub version: u32,
    /// `None` until the group has a key pair.
    pub public: Option<[u8; 32]>,
    pub wrap: Vec<u8>,
    /// Whether the caller is a member: only members make a group's key pairs and wraps.
    pub member: bool,
    /// A new key pair is due (a member left since this version was made, or no member holds
    /// it): no file key is wrapped to `public` any more, and a member's client makes the next
    /// version.
    pub rekey: bool,
    /// Members with keys but no wrap of this version (in a member's answer only), by uid: a
    /// member's client wraps to the keys its own checked key log shows for them.
    pub missing: Vec<u32>,
    /// Links, newest first: version `v - 1`'s secret wrapped to version `v`'s public key
    /// (nasd-e2e's `GroupKeyWrap::link`), at most [`GROUP_KEY_LINKS_MAX`].
    pub links: Vec<Vec<u8>>,
}

impl GroupKeyInfo {
    /// The group has a key pair that file keys are wrapped to (one, and none due).
    pub fn is_current(&self) -> bool {
        self.public.is_some() && !self.rekey
    }
}

/// Largest group key wrap (nasd-e2e's `GroupKeyWrap` is 93 bytes).
pub const GROUP_WRAP_BYTES_MAX: usize = 256;
/// Most links a [`GroupKeyInfo`] carries: a file wrapped to a group's key more than this many
/// new key pairs ago opens through its other wraps only (its owner's, its writer's).
pub const GROUP_KEY_LINKS_MAX: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_default_policy_encodes_as_documented() {
        let b = E2ePolicy::default().encode();
        assert_eq!(b, [1, 0, 2, 16, 0, 0, 0]);
        let p = E2ePolicy {
            readers: vec![Principal::User(7), Principal::Group(0x0102_0304)],
            ..E2ePolicy::plaintext()
        };
        assert_eq!(
            p.encode(),
            [0, 0, 2, 16, 2, 1, 7, 0, 0, 0, 2, 4, 3, 2, 1, 0, 0],
            "flags, eint, auth, block, n, principals, m, k"
        );
        assert_eq!(E2ePolicy::decode(&p.encode()).unwrap(), p);
    }

    proptest! {
        #[test]
        fn policy_decoding_is_total(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = E2ePolicy::decode(&b) {
                prop_assert_eq!(p.encode(), b);
            }
        }

        #[test]
        fn state_decoding_is_total(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut r = Reader::new(&b);
            let _ = E2eCommit::get(&mut r);
            let mut r = Reader::new(&b);
            let _ = UserKeys::get(&mut r);
        }
    }
}
