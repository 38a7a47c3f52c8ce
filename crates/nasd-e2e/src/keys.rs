//! Keys and who holds them (requirements B.1; seed 001 §3.2 and §3.3.1).
//!
//! Every file has a 256-bit content key [`FileKey`] made by the creating client from the OS CSPRNG.
//! Seed 001 §3.3.1 encrypts it "with the public key of each user (UID) or group of users (GID)" and
//! keeps the results "in a key file associated with the data file"; here each wrap is HPKE
//! (RFC 9180) in base mode with the suite DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
//! ChaCha20-Poly1305 (KEM 0x0020, KDF 0x0001, AEAD 0x0003), with
//! `aad = file_id ‖ key_version` so a wrap cannot be moved to another file or version. 001 used
//! RSA-512, which is never acceptable today.
//!
//! Why ChaCha20-Poly1305 rather than AES-256-GCM: RFC 9180 Appendix A.2 publishes known-answer
//! vectors for exactly this suite (there are none in the RFC for X25519 with AES-256-GCM), so the
//! suite we ship is pinned by the standard's own vectors (`tests/hpke_vectors.rs`). Both AEADs give
//! 256-bit keys; the AEAD only protects a 32-byte key here, so its speed does not matter.
//!
//! Every group has a key pair too; seed 001 §3.2: "Each member of the group needs a copy of the
//! group's private key". [`GroupKeyWrap`] carries that private key to one member, wrapped the same
//! way with `aad = gid ‖ group_key_version ‖ member uid`.
//!
//! The manager stores public keys, [`KeyFile`]s and [`GroupKeyWrap`]s, all of which are safe to
//! show it; it never sees a [`FileKey`] or a [`SecretKey`].

use crate::codec::{DecodeError, Reader};
use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::rand_core::{CryptoRng, UnwrapErr};
use hpke::{Deserializable, Kem as _, OpModeR, OpModeS, Serializable};
use thiserror::Error;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

type Kem = X25519HkdfSha256;
type Aead = ChaCha20Poly1305;
type Kdf = HkdfSha256;

/// Bytes in a [`FileKey`] (256 bits, B.1).
pub const FILE_KEY_BYTES: usize = 32;
/// Bytes in an X25519 public key, secret key and HPKE encapsulated key.
pub const X25519_KEY_BYTES: usize = 32;
/// Bytes of ChaCha20-Poly1305's tag.
pub const AEAD_TAG_BYTES: usize = 16;
/// Bytes of a wrapped 32-byte secret: the secret plus the AEAD tag.
pub const WRAPPED_SECRET_BYTES: usize = FILE_KEY_BYTES + AEAD_TAG_BYTES;
/// Most entries a [`KeyFile`] may hold: a file shared with more principals than this should be
/// shared through a group.
pub const KEY_FILE_ENTRIES_MAX: usize = 4096;

/// HPKE `info` of file-key wraps; changes with the format.
const FILE_KEY_INFO: &[u8] = b"nasd-e2e file key v1";
/// HPKE `info` of group-key wraps.
const GROUP_KEY_INFO: &[u8] = b"nasd-e2e group key v1";

/// Which file a key, a block or a record belongs to: 16 bytes, the first part of every block's
/// tweak (B.2). The manager assigns it; it must never be reused for another file under the same
/// key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub [u8; 16]);

impl FileId {
    /// A file id from a 128-bit number, little-endian.
    pub fn from_u128(v: u128) -> FileId {
        FileId(v.to_le_bytes())
    }
}

/// Version of a file's content key; bumped when a reader is revoked (B.1).
pub type KeyVersion = u32;

/// KDF context of [`FileKey::commitment`].
const KEY_COMMITMENT_CONTEXT: &str = "nasd-e2e 2026 key commitment v1";

/// A file's 256-bit content key `K_f`. Zeroized on drop; `Debug` shows a fingerprint only.
#[derive(Clone, Zeroize, ZeroizeOnDrop, PartialEq, Eq)]
pub struct FileKey([u8; FILE_KEY_BYTES]);

impl FileKey {
    /// A fresh key from the operating system's CSPRNG.
    pub fn generate() -> FileKey {
        FileKey::generate_with(&mut os_rng())
    }

    /// A fresh key from `rng` (the seam tests use for determinism).
    pub fn generate_with(rng: &mut impl CryptoRng) -> FileKey {
        let mut k = [0u8; FILE_KEY_BYTES];
        rng.fill_bytes(&mut k);
        FileKey(k)
    }

    pub fn from_bytes(b: [u8; FILE_KEY_BYTES]) -> FileKey {
        FileKey(b)
    }

    pub fn expose(&self) -> &[u8; FILE_KEY_BYTES] {
        &self.0
    }

    /// κ = BLAKE3-KDF("… key commitment", K): a one-way commitment to this key, bound into
    /// Merkle leaves ([`crate::merkle::leaf_hash`]) and a bound record's keys digest
    /// ([`crate::side::keys_digest`]), so a reader can tell the key a writer used from any
    /// other key a wrap might open.
    pub fn commitment(&self) -> [u8; 32] {
        blake3::derive_key(KEY_COMMITMENT_CONTEXT, &self.0)
    }

    /// First 8 hex digits of a hash of the key: tells keys apart in logs, reveals nothing.
    pub fn fingerprint(&self) -> String {
        let h = crate::codec::hash_parts(b"nasd-e2e key fingerprint", &[&self.0]);
        h[..4].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileKey({})", self.fingerprint())
    }
}

/// The OS CSPRNG as a `rand_core` 0.10 generator.
pub fn os_rng() -> UnwrapErr<getrandom::SysRng> {
    UnwrapErr(getrandom::SysRng)
}

/// Who a [`KeyFile`] entry is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Principal {
    User(u32),
    Group(u32),
}

impl Principal {
    const USER_TAG: u8 = 1;
    const GROUP_TAG: u8 = 2;

    pub(crate) fn encode(self, out: &mut Vec<u8>) {
        let (tag, id) = match self {
            Principal::User(u) => (Self::USER_TAG, u),
            Principal::Group(g) => (Self::GROUP_TAG, g),
        };
        out.push(tag);
        out.extend_from_slice(&id.to_le_bytes());
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Principal, DecodeError> {
        let tag = r.u8()?;
        let id = r.u32()?;
        match tag {
            Self::USER_TAG => Ok(Principal::User(id)),
            Self::GROUP_TAG => Ok(Principal::Group(id)),
            _ => Err(r.invalid("unknown principal kind")),
        }
    }
}

/// An X25519 public key of a user or group, as the manager stores and hands it out.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; X25519_KEY_BYTES]);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

impl PublicKey {
    fn to_hpke(self) -> Result<<Kem as hpke::Kem>::PublicKey, WrapError> {
        <Kem as hpke::Kem>::PublicKey::from_bytes(&self.0).map_err(WrapError::Hpke)
    }
}

/// An X25519 secret key of a user or group. Zeroized on drop (the HPKE key type zeroizes itself);
/// `Debug` shows only the public half.
pub struct SecretKey {
    inner: <Kem as hpke::Kem>::PrivateKey,
    public: PublicKey,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey(for {:?})", self.public)
    }
}

impl SecretKey {
    /// A fresh key pair from the OS CSPRNG.
    pub fn generate() -> SecretKey {
        SecretKey::generate_with(&mut os_rng())
    }

    /// A fresh key pair from `rng`: RFC 9180 `DeriveKeyPair(random(32))`.
    pub fn generate_with(rng: &mut impl CryptoRng) -> SecretKey {
        let (sk, pk) = Kem::gen_keypair_with_rng(rng);
        SecretKey::from_parts(sk, pk)
    }

    /// RFC 9180 §7.1.3 `DeriveKeyPair(ikm)`: the same `ikm` always gives the same pair.
    pub fn derive(ikm: &[u8]) -> SecretKey {
        let (sk, pk) = Kem::derive_keypair(ikm);
        SecretKey::from_parts(sk, pk)
    }

    /// A secret key from its 32 stored bytes (the client's own key file).
    pub fn from_bytes(b: &[u8; X25519_KEY_BYTES]) -> Result<SecretKey, WrapError> {
        let sk = <Kem as hpke::Kem>::PrivateKey::from_bytes(b).map_err(WrapError::Hpke)?;
        let pk = Kem::sk_to_pk(&sk);
        Ok(SecretKey::from_parts(sk, pk))
    }

    fn from_parts(
        sk: <Kem as hpke::Kem>::PrivateKey,
        pk: <Kem as hpke::Kem>::PublicKey,
    ) -> SecretKey {
        let mut public = [0u8; X25519_KEY_BYTES];
        public.copy_from_slice(&pk.to_bytes());
        SecretKey {
            inner: sk,
            public: PublicKey(public),
        }
    }

    /// The 32 secret bytes, for the owner's own storage only.
    pub fn to_bytes(&self) -> Zeroizing<[u8; X25519_KEY_BYTES]> {
        let mut out = Zeroizing::new([0u8; X25519_KEY_BYTES]);
        out.copy_from_slice(&self.inner.to_bytes());
        out
    }

    pub fn public(&self) -> PublicKey {
        self.public
    }
}

/// Why a wrap could not be made or opened.
#[derive(Debug, Error)]
pub enum WrapError {
    /// HPKE refused: a malformed or low-order public key, or a ciphertext that does not open
    /// (wrong recipient, wrong file, wrong key version, or tampering).
    #[error("HPKE: {0}")]
    Hpke(hpke::HpkeError),
    /// The key file has no wrap for this principal at this key version.
    #[error("no wrap for {principal:?} at key version {key_version}")]
    NoEntry {
        principal: Principal,
        key_version: KeyVersion,
    },
    #[error("an entry for {principal:?} at key version {key_version} is already present")]
    Duplicate {
        principal: Principal,
        key_version: KeyVersion,
    },
    #[error("a key file holds at most {KEY_FILE_ENTRIES_MAX} entries")]
    Full,
}

/// One HPKE wrap of a 32-byte secret: the encapsulated key and the sealed secret.
#[derive(Clone, PartialEq, Eq)]
pub struct WrappedSecret {
    pub enc: [u8; X25519_KEY_BYTES],
    pub ciphertext: [u8; WRAPPED_SECRET_BYTES],
}

impl std::fmt::Debug for WrappedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrappedSecret").finish_non_exhaustive()
    }
}

impl WrappedSecret {
    /// Bytes of the encoding: `enc[32] ‖ ciphertext[48]`.
    pub const ENCODED_BYTES: usize = X25519_KEY_BYTES + WRAPPED_SECRET_BYTES;

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.enc);
        out.extend_from_slice(&self.ciphertext);
    }

    fn decode(r: &mut Reader<'_>) -> Result<WrappedSecret, DecodeError> {
        Ok(WrappedSecret {
            enc: r.array()?,
            ciphertext: r.array()?,
        })
    }
}

/// RFC 9180 base-mode single-shot `Seal` in this crate's suite (X25519, HKDF-SHA256,
/// ChaCha20-Poly1305): returns `(enc, ciphertext)`. Exposed for the known-answer tests and the
/// lab; wrap keys with [`wrap_file_key`] and [`GroupKeyWrap::wrap`].
pub fn hpke_seal_base(
    to: PublicKey,
    info: &[u8],
    aad: &[u8],
    plaintext: &[u8],
    rng: &mut impl CryptoRng,
) -> Result<([u8; X25519_KEY_BYTES], Vec<u8>), WrapError> {
    let pk = to.to_hpke()?;
    let (enc, ct) = hpke::single_shot_seal_with_rng::<Aead, Kdf, Kem>(
        &OpModeS::Base,
        &pk,
        info,
        plaintext,
        aad,
        rng,
    )
    .map_err(WrapError::Hpke)?;
    let mut e = [0u8; X25519_KEY_BYTES];
    e.copy_from_slice(&enc.to_bytes());
    Ok((e, ct))
}

/// RFC 9180 base-mode single-shot `Open` in this crate's suite.
pub fn hpke_open_base(
    sk: &SecretKey,
    enc: &[u8; X25519_KEY_BYTES],
    info: &[u8],
    aad: &[u8],
    ciphertext: &[u8],
) -> Result<Zeroizing<Vec<u8>>, WrapError> {
    let enc = <Kem as hpke::Kem>::EncappedKey::from_bytes(enc).map_err(WrapError::Hpke)?;
    let pt = hpke::single_shot_open::<Aead, Kdf, Kem>(
        &OpModeR::Base,
        &sk.inner,
        &enc,
        info,
        ciphertext,
        aad,
    )
    .map_err(WrapError::Hpke)?;
    Ok(Zeroizing::new(pt))
}

/// HPKE base-mode single-shot seal of a 32-byte secret to `to`.
fn seal_secret(
    to: PublicKey,
    info: &[u8],
    aad: &[u8],
    secret: &[u8; 32],
    rng: &mut impl CryptoRng,
) -> Result<WrappedSecret, WrapError> {
    let (enc, ct) = hpke_seal_base(to, info, aad, secret, rng)?;
    // The ciphertext of a 32-byte plaintext is always 48 bytes; anything else is a library bug.
    assert_eq!(
        ct.len(),
        WRAPPED_SECRET_BYTES,
        "ChaCha20-Poly1305 expands by 16"
    );
    let mut ciphertext = [0u8; WRAPPED_SECRET_BYTES];
    ciphertext.copy_from_slice(&ct);
    Ok(WrappedSecret { enc, ciphertext })
}

/// HPKE base-mode single-shot open of a wrapped 32-byte secret.
fn open_secret(
    sk: &SecretKey,
    info: &[u8],
    aad: &[u8],
    w: &WrappedSecret,
) -> Result<Zeroizing<[u8; 32]>, WrapError> {
    let pt = hpke_open_base(sk, &w.enc, info, aad, &w.ciphertext)?;
    let pt: &[u8; 32] = pt.as_slice().try_into().map_err(|_| {
        // The AEAD authenticated a plaintext of another length: whoever made it used the right
        // public key, but it is still not a key.
        WrapError::Hpke(hpke::HpkeError::ValidationError)
    })?;
    Ok(Zeroizing::new(*pt))
}

/// `aad` of a file-key wrap: `file_id[16] ‖ key_version[4, LE]` (B.1).
fn file_key_aad(file_id: FileId, key_version: KeyVersion) -> [u8; 20] {
    let mut aad = [0u8; 20];
    aad[..16].copy_from_slice(&file_id.0);
    aad[16..].copy_from_slice(&key_version.to_le_bytes());
    aad
}

/// Wraps `key` (version `key_version` of `file_id`'s key) to the principal whose public key is `to`.
pub fn wrap_file_key(
    to: PublicKey,
    file_id: FileId,
    key_version: KeyVersion,
    key: &FileKey,
    rng: &mut impl CryptoRng,
) -> Result<WrappedSecret, WrapError> {
    seal_secret(
        to,
        FILE_KEY_INFO,
        &file_key_aad(file_id, key_version),
        &key.0,
        rng,
    )
}

/// Opens a file-key wrap with the recipient's secret key; fails unless `file_id` and
/// `key_version` are the ones it was wrapped for.
pub fn unwrap_file_key(
    sk: &SecretKey,
    file_id: FileId,
    key_version: KeyVersion,
    w: &WrappedSecret,
) -> Result<FileKey, WrapError> {
    let k = open_secret(sk, FILE_KEY_INFO, &file_key_aad(file_id, key_version), w)?;
    Ok(FileKey(*k))
}

/// One entry of a [`KeyFile`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyFileEntry {
    pub principal: Principal,
    pub key_version: KeyVersion,
    pub wrapped: WrappedSecret,
}

impl KeyFileEntry {
    /// Bytes of one encoded entry: principal kind (1) and id (4), key version (4), wrap (80).
    pub const ENCODED_BYTES: usize = 1 + 4 + 4 + WrappedSecret::ENCODED_BYTES;
}

/// A file's key file (seed 001 §3.3.1; B.1): the file key wrapped for each user and group that
/// may read it, for every key version still needed by some block.
///
/// Encoding (little-endian): `version u8 = 1 ‖ count u16 ‖ count × entry`, each entry
/// `kind u8 (1 user, 2 group) ‖ id u32 ‖ key_version u32 ‖ enc[32] ‖ ciphertext[48]`
/// (89 bytes). Entries are unique by (principal, key version).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyFile {
    entries: Vec<KeyFileEntry>,
}

impl KeyFile {
    const FORMAT_VERSION: u8 = 1;

    pub fn new() -> KeyFile {
        KeyFile::default()
    }

    /// A key file holding `key` at `key_version` wrapped for every `(principal, public key)`.
    pub fn for_principals(
        file_id: FileId,
        key_version: KeyVersion,
        key: &FileKey,
        recipients: &[(Principal, PublicKey)],
        rng: &mut impl CryptoRng,
    ) -> Result<KeyFile, WrapError> {
        let mut kf = KeyFile::new();
        for &(principal, pk) in recipients {
            kf.wrap_for(principal, pk, file_id, key_version, key, rng)?;
        }
        Ok(kf)
    }

    /// Adds a wrap of `key` for `principal`.
    pub fn wrap_for(
        &mut self,
        principal: Principal,
        to: PublicKey,
        file_id: FileId,
        key_version: KeyVersion,
        key: &FileKey,
        rng: &mut impl CryptoRng,
    ) -> Result<(), WrapError> {
        let wrapped = wrap_file_key(to, file_id, key_version, key, rng)?;
        self.insert(KeyFileEntry {
            principal,
            key_version,
            wrapped,
        })
    }

    /// Adds an entry made elsewhere.
    pub fn insert(&mut self, e: KeyFileEntry) -> Result<(), WrapError> {
        if self.find(e.principal, e.key_version).is_some() {
            return Err(WrapError::Duplicate {
                principal: e.principal,
                key_version: e.key_version,
            });
        }
        if self.entries.len() >= KEY_FILE_ENTRIES_MAX {
            return Err(WrapError::Full);
        }
        self.entries.push(e);
        Ok(())
    }

    /// Drops every entry of `principal` (a reader removed; pair with a new key version, B.1).
    pub fn remove_principal(&mut self, principal: Principal) {
        self.entries.retain(|e| e.principal != principal);
    }

    /// Drops every entry older than `key_version` (once no block uses them).
    pub fn remove_versions_before(&mut self, key_version: KeyVersion) {
        self.entries.retain(|e| e.key_version >= key_version);
    }

    pub fn entries(&self) -> &[KeyFileEntry] {
        &self.entries
    }

    pub fn find(&self, principal: Principal, key_version: KeyVersion) -> Option<&KeyFileEntry> {
        self.entries
            .iter()
            .find(|e| e.principal == principal && e.key_version == key_version)
    }

    /// The newest key version present.
    pub fn latest_version(&self) -> Option<KeyVersion> {
        self.entries.iter().map(|e| e.key_version).max()
    }

    /// Opens the wrap for `principal` at `key_version` with that principal's secret key.
    pub fn unwrap(
        &self,
        principal: Principal,
        sk: &SecretKey,
        file_id: FileId,
        key_version: KeyVersion,
    ) -> Result<FileKey, WrapError> {
        let e = self
            .find(principal, key_version)
            .ok_or(WrapError::NoEntry {
                principal,
                key_version,
            })?;
        unwrap_file_key(sk, file_id, key_version, &e.wrapped)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(3 + self.entries.len() * KeyFileEntry::ENCODED_BYTES);
        out.push(Self::FORMAT_VERSION);
        // insert() keeps the count at most KEY_FILE_ENTRIES_MAX, which fits a u16.
        out.extend_from_slice(&(self.entries.len() as u16).to_le_bytes());
        for e in &self.entries {
            e.principal.encode(&mut out);
            out.extend_from_slice(&e.key_version.to_le_bytes());
            e.wrapped.encode(&mut out);
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<KeyFile, DecodeError> {
        let mut r = Reader::new(b, "key file");
        r.version(Self::FORMAT_VERSION)?;
        let count = r.u16()?;
        let count = r.check_count(
            u64::from(count),
            KEY_FILE_ENTRIES_MAX as u64,
            KeyFileEntry::ENCODED_BYTES,
        )?;
        let mut kf = KeyFile {
            entries: Vec::with_capacity(count),
        };
        for _ in 0..count {
            let principal = Principal::decode(&mut r)?;
            let key_version = r.u32()?;
            let wrapped = WrappedSecret::decode(&mut r)?;
            if kf.find(principal, key_version).is_some() {
                return Err(r.invalid("duplicate entry"));
            }
            kf.entries.push(KeyFileEntry {
                principal,
                key_version,
                wrapped,
            });
        }
        r.finish()?;
        Ok(kf)
    }
}

const _: () = assert!(KEY_FILE_ENTRIES_MAX <= u16::MAX as usize);

/// A group's private key wrapped to one member (seed 001 §3.2; B.1). The manager stores one per
/// (group, key version, member); removing a member means a new group key pair.
///
/// A *link* is the same wrap of version `v`'s secret to version `v + 1`'s public key, with
/// [`GroupKeyWrap::LINK_UID`] in the member's place ([`GroupKeyWrap::link`]): whoever holds a
/// version's secret opens every older one through the links, so members (also those who join
/// later) read what was wrapped to the group before a new key pair, and a member removed
/// before that version opens nothing newer.
///
/// Encoding: `version u8 = 1 ‖ gid u32 ‖ group_key_version u32 ‖ member_uid u32 ‖ enc[32] ‖
/// ciphertext[48]` (93 bytes). The wrap's `aad` is `gid ‖ group_key_version ‖ member_uid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupKeyWrap {
    pub gid: u32,
    pub group_key_version: KeyVersion,
    pub member_uid: u32,
    pub wrapped: WrappedSecret,
}

impl GroupKeyWrap {
    const FORMAT_VERSION: u8 = 1;
    pub const ENCODED_BYTES: usize = 1 + 4 + 4 + 4 + WrappedSecret::ENCODED_BYTES;

    fn aad(gid: u32, group_key_version: KeyVersion, member_uid: u32) -> [u8; 12] {
        let mut aad = [0u8; 12];
        aad[..4].copy_from_slice(&gid.to_le_bytes());
        aad[4..8].copy_from_slice(&group_key_version.to_le_bytes());
        aad[8..].copy_from_slice(&member_uid.to_le_bytes());
        aad
    }

    /// Wraps the group's secret key to a member's public key.
    pub fn wrap(
        gid: u32,
        group_key_version: KeyVersion,
        group_secret: &SecretKey,
        member_uid: u32,
        member_pk: PublicKey,
        rng: &mut impl CryptoRng,
    ) -> Result<GroupKeyWrap, WrapError> {
        let secret = group_secret.to_bytes();
        let wrapped = seal_secret(
            member_pk,
            GROUP_KEY_INFO,
            &Self::aad(gid, group_key_version, member_uid),
            &secret,
            rng,
        )?;
        Ok(GroupKeyWrap {
            gid,
            group_key_version,
            member_uid,
            wrapped,
        })
    }

    /// The member uid of a link: no user has it (uids are below `u32::MAX`), and the `aad`
    /// binds it, so a link is never taken for a member's wrap or the reverse.
    pub const LINK_UID: u32 = u32::MAX;

    /// Wraps version `older_version`'s secret of group `gid` to the public key of the
    /// group's next version (a link).
    pub fn link(
        gid: u32,
        older_version: KeyVersion,
        older_secret: &SecretKey,
        newer_pk: PublicKey,
        rng: &mut impl CryptoRng,
    ) -> Result<GroupKeyWrap, WrapError> {
        Self::wrap(
            gid,
            older_version,
            older_secret,
            Self::LINK_UID,
            newer_pk,
            rng,
        )
    }

    /// Whether this is a link to the next version rather than a member's wrap.
    pub fn is_link(&self) -> bool {
        self.member_uid == Self::LINK_UID
    }

    /// Opens the wrap with the member's secret key, giving the group's secret key.
    pub fn unwrap(&self, member_sk: &SecretKey) -> Result<SecretKey, WrapError> {
        let secret = open_secret(
            member_sk,
            GROUP_KEY_INFO,
            &Self::aad(self.gid, self.group_key_version, self.member_uid),
            &self.wrapped,
        )?;
        SecretKey::from_bytes(&secret)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::ENCODED_BYTES);
        out.push(Self::FORMAT_VERSION);
        out.extend_from_slice(&self.gid.to_le_bytes());
        out.extend_from_slice(&self.group_key_version.to_le_bytes());
        out.extend_from_slice(&self.member_uid.to_le_bytes());
        self.wrapped.encode(&mut out);
        out
    }

    pub fn decode(b: &[u8]) -> Result<GroupKeyWrap, DecodeError> {
        let mut r = Reader::new(b, "group key wrap");
        r.version(Self::FORMAT_VERSION)?;
        let w = GroupKeyWrap {
            gid: r.u32()?,
            group_key_version: r.u32()?,
            member_uid: r.u32()?,
            wrapped: WrappedSecret::decode(&mut r)?,
        };
        r.finish()?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fid(n: u128) -> FileId {
        FileId::from_u128(n)
    }

    #[test]
    fn wrap_round_trips_and_binds_file_and_version() {
        let alice = SecretKey::generate();
        let k = FileKey::generate();
        let w = wrap_file_key(alice.public(), fid(7), 3, &k, &mut os_rng()).unwrap();
        assert_eq!(unwrap_file_key(&alice, fid(7), 3, &w).unwrap(), k);
        assert!(matches!(
            unwrap_file_key(&alice, fid(7), 4, &w),
            Err(WrapError::Hpke(_))
        ));
        assert!(matches!(
            unwrap_file_key(&alice, fid(8), 3, &w),
            Err(WrapError::Hpke(_))
        ));
        let bob = SecretKey::generate();
        assert!(matches!(
            unwrap_file_key(&bob, fid(7), 3, &w),
            Err(WrapError::Hpke(_))
        ));
        let mut bad = w.clone();
        bad.ciphertext[0] ^= 1;
        assert!(unwrap_file_key(&alice, fid(7), 3, &bad).is_err());
    }

    #[test]
    fn key_file_finds_entries_and_reports_missing_ones() {
        let alice = SecretKey::generate();
        let staff = SecretKey::generate();
        let k1 = FileKey::generate();
        let f = fid(1);
        let mut kf = KeyFile::for_principals(
            f,
            1,
            &k1,
            &[
                (Principal::User(10), alice.public()),
                (Principal::Group(20), staff.public()),
            ],
            &mut os_rng(),
        )
        .unwrap();
        assert_eq!(kf.unwrap(Principal::User(10), &alice, f, 1).unwrap(), k1);
        assert_eq!(kf.unwrap(Principal::Group(20), &staff, f, 1).unwrap(), k1);
        assert!(matches!(
            kf.unwrap(Principal::User(10), &alice, f, 2),
            Err(WrapError::NoEntry {
                principal: Principal::User(10),
                key_version: 2
            })
        ));
        assert!(matches!(
            kf.unwrap(Principal::User(11), &alice, f, 1),
            Err(WrapError::NoEntry { .. })
        ));
        // Revocation: version 2 for the group only; alice cannot open it.
        let k2 = FileKey::generate();
        kf.remove_principal(Principal::User(10));
        kf.wrap_for(
            Principal::Group(20),
            staff.public(),
            f,
            2,
            &k2,
            &mut os_rng(),
        )
        .unwrap();
        assert_eq!(kf.latest_version(), Some(2));
        assert!(kf.unwrap(Principal::User(10), &alice, f, 2).is_err());
        assert!(matches!(
            kf.wrap_for(
                Principal::Group(20),
                staff.public(),
                f,
                2,
                &k2,
                &mut os_rng()
            ),
            Err(WrapError::Duplicate { .. })
        ));
        let back = KeyFile::decode(&kf.encode()).unwrap();
        assert_eq!(back, kf);
        assert_eq!(back.unwrap(Principal::Group(20), &staff, f, 2).unwrap(), k2);
    }

    #[test]
    fn group_key_reaches_members_only() {
        let group = SecretKey::generate();
        let alice = SecretKey::generate();
        let eve = SecretKey::generate();
        let w = GroupKeyWrap::wrap(20, 1, &group, 10, alice.public(), &mut os_rng()).unwrap();
        let back = GroupKeyWrap::decode(&w.encode()).unwrap();
        assert_eq!(back, w);
        let g = back.unwrap(&alice).unwrap();
        assert_eq!(g.public(), group.public());
        assert!(w.unwrap(&eve).is_err());
        let mut moved = w.clone();
        moved.member_uid = 11;
        assert!(moved.unwrap(&alice).is_err(), "aad binds the member");
        // A group member opens a file key wrapped to the group.
        let k = FileKey::generate();
        let fw = wrap_file_key(group.public(), fid(3), 1, &k, &mut os_rng()).unwrap();
        assert_eq!(unwrap_file_key(&g, fid(3), 1, &fw).unwrap(), k);
    }

    #[test]
    fn links_open_older_versions_only() {
        let (v1, v2, v3) = (
            SecretKey::generate(),
            SecretKey::generate(),
            SecretKey::generate(),
        );
        let l2 = GroupKeyWrap::link(20, 1, &v1, v2.public(), &mut os_rng()).unwrap();
        let l3 = GroupKeyWrap::link(20, 2, &v2, v3.public(), &mut os_rng()).unwrap();
        assert!(l2.is_link() && l3.is_link());
        let l3 = GroupKeyWrap::decode(&l3.encode()).unwrap();
        // The newest secret opens every older one, one link at a time.
        let got2 = l3.unwrap(&v3).unwrap();
        assert_eq!(got2.public(), v2.public());
        assert_eq!(l2.unwrap(&got2).unwrap().public(), v1.public());
        // An older secret opens no newer one.
        assert!(l3.unwrap(&v1).is_err());
        // A link is no member's wrap: the aad binds the link uid.
        let mut as_member = l3.clone();
        as_member.member_uid = 10;
        assert!(as_member.unwrap(&v3).is_err());
    }

    #[test]
    fn secrets_never_print() {
        let k = FileKey::from_bytes([0xab; 32]);
        let s = format!("{k:?}");
        assert!(!s.contains("abab"), "{s}");
        let sk = SecretKey::derive(b"some input keying material here!");
        let hex_secret: String = sk.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let s = format!("{sk:?}");
        assert!(!s.contains(&hex_secret[..16]), "{s}");
        let back = SecretKey::from_bytes(&sk.to_bytes()).unwrap();
        assert_eq!(back.public(), sk.public());
    }

    #[test]
    fn key_file_decoder_rejects_bad_counts_versions_and_duplicates() {
        assert!(matches!(
            KeyFile::decode(&[2, 0, 0]),
            Err(DecodeError::Version { .. })
        ));
        assert!(matches!(
            KeyFile::decode(&[1, 0xff, 0xff]),
            Err(DecodeError::TooMany { .. })
        ));
        assert!(matches!(
            KeyFile::decode(&[1, 2, 0]),
            Err(DecodeError::Truncated { .. })
        ));
        assert_eq!(KeyFile::decode(&[1, 0, 0]).unwrap(), KeyFile::new());
        let alice = SecretKey::generate();
        let mut kf = KeyFile::new();
        kf.wrap_for(
            Principal::User(1),
            alice.public(),
            fid(1),
            1,
            &FileKey::generate(),
            &mut os_rng(),
        )
        .unwrap();
        let one = kf.encode();
        let mut two = one.clone();
        two[1] = 2;
        two.extend_from_slice(&one[3..]);
        assert!(matches!(
            KeyFile::decode(&two),
            Err(DecodeError::Invalid { .. })
        ));
        let mut trailing = one.clone();
        trailing.push(0);
        assert!(matches!(
            KeyFile::decode(&trailing),
            Err(DecodeError::Trailing { .. })
        ));
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = KeyFile::decode(&bytes);
            let _ = GroupKeyWrap::decode(&bytes);
        }

        #[test]
        fn key_file_encoding_round_trips(
            entries in proptest::collection::vec((any::<bool>(), any::<u32>(), any::<u32>(), any::<[u8; 32]>(), any::<[u8; 32]>()), 0..20)
        ) {
            let mut kf = KeyFile::new();
            for (user, id, v, enc, ct) in entries {
                let principal = if user { Principal::User(id) } else { Principal::Group(id) };
                let mut ciphertext = [0u8; WRAPPED_SECRET_BYTES];
                ciphertext[..32].copy_from_slice(&ct);
                let _ = kf.insert(KeyFileEntry { principal, key_version: v, wrapped: WrappedSecret { enc, ciphertext } });
            }
            let enc = kf.encode();
            prop_assert_eq!(enc.len(), 3 + kf.entries().len() * KeyFileEntry::ENCODED_BYTES);
            prop_assert_eq!(KeyFile::decode(&enc).unwrap(), kf);
        }
    }
}
