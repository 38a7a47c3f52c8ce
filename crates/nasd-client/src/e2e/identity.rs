//! A user's end-to-end identity (seed 001 §3.2: "a key pair per UID"): an X25519 key pair
//! that file keys are wrapped to (HPKE) and an Ed25519 key pair that signs the versions the
//! user writes (schemes 1 and 2), both derived from one 32-byte secret seed.
//!
//! Where the seed lives:
//! - a user who logs in with a **password** has a random seed made by their own client at
//!   their first login (never by an admin's), sealed under the key OPAQUE's export key gives
//!   ([`crate::opaque::SeedKey`]: only the user's client, with the password, has it) and kept
//!   at the manager, which returns it only to its user; `nasd user rotate-keys` replaces it.
//!   Seeds of accounts made before manager protocol 15 were sealed under the password itself
//!   (Argon2id and AES-256-GCM-SIV, nasd-crypto's [`KeySeal`]); such a seal is opened once,
//!   at the login that moves the account to OPAQUE, and sealed anew;
//! - a user who logs in with an **Ed25519 key file** has a seed derived from that key, so the
//!   key file is all they need;
//! - the client keeps the seed it used in a 0600 file beside its session token
//!   ([`crate::config`]), so commands that log in with the saved token can decrypt too.
//!
//! Every key change is signed: version 1 of a user's keys by its own sign key, each later
//! version by the sign key of the one before ([`Identity::user_keys`]), so a chain of them can
//! be checked from the first.

use crate::auth::write_secret_file;
use crate::opaque::SeedKey;
use nasd_crypto::seal::{KeySeal, SealHeader, SEALED_KEY_BYTES, SEAL_HEADER_BYTES};
use nasd_e2e::sign::{WriterKey, WriterPublicKey};
use nasd_e2e::{PublicKey, SecretKey};
use nasd_proto::manager::UserKeys;
use std::path::Path;
use zeroize::Zeroizing;

const X25519_CONTEXT: &str = "nasd 2026 user x25519 key v1";
const ED25519_CONTEXT: &str = "nasd 2026 user ed25519 key v1";
const FROM_LOGIN_KEY_CONTEXT: &str = "nasd 2026 user e2e seed from login key v1";
/// The slot the sealed seed is bound to (AES-GCM-SIV associated data).
const SEAL_SLOT: &str = "user e2e seed v1";

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("the password does not open this user's end-to-end key (changed elsewhere?)")]
    WrongPassword,
    #[error("the stored end-to-end key does not decode")]
    Malformed,
    #[error("the end-to-end keys at the manager are not this user's seed's")]
    Mismatch,
}

/// A user's end-to-end keys (module docs). Secrets are zeroized; `Debug` shows public keys.
pub struct Identity {
    pub uid: u32,
    seed: Zeroizing<[u8; 32]>,
    enc: SecretKey,
    sign: WriterKey,
    /// The same Ed25519 key as the drives' wire signatures take it (scheme 1 writes).
    drive: std::sync::Arc<nasd_crypto::wsig::WriterSigner>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("uid", &self.uid)
            .field("sign_public", &self.sign.public())
            .finish_non_exhaustive()
    }
}

impl Identity {
    pub fn from_seed(uid: u32, seed: &[u8; 32]) -> Identity {
        let x = Zeroizing::new(blake3::derive_key(X25519_CONTEXT, seed));
        let e = Zeroizing::new(blake3::derive_key(ED25519_CONTEXT, seed));
        Identity {
            uid,
            seed: Zeroizing::new(*seed),
            enc: SecretKey::derive(x.as_ref()),
            sign: WriterKey::from_seed(&e),
            drive: std::sync::Arc::new(nasd_crypto::wsig::WriterSigner::from_seed(
                &nasd_crypto::Key::from_bytes(*e),
            )),
        }
    }

    /// A fresh identity from the OS CSPRNG.
    pub fn generate(uid: u32) -> Identity {
        let mut seed = Zeroizing::new([0u8; 32]);
        getrandom::fill(seed.as_mut()).expect("the OS random source works");
        Identity::from_seed(uid, &seed)
    }

    /// The identity of a user who logs in with an Ed25519 key file (its 32-byte seed).
    pub fn from_login_key(uid: u32, login_seed: &[u8; 32]) -> Identity {
        let seed = Zeroizing::new(blake3::derive_key(FROM_LOGIN_KEY_CONTEXT, login_seed));
        Identity::from_seed(uid, &seed)
    }

    pub fn enc_public(&self) -> PublicKey {
        self.enc.public()
    }

    pub fn sign_public(&self) -> WriterPublicKey {
        self.sign.public()
    }

    pub fn enc_secret(&self) -> &SecretKey {
        &self.enc
    }

    pub fn signer(&self) -> &WriterKey {
        &self.sign
    }

    /// The signing key for writes a capability names this user's key for (seed 001 §3.3.1
    /// scheme 1: the drive checks the signature before it stores).
    pub fn drive_signer(&self) -> std::sync::Arc<nasd_crypto::wsig::WriterSigner> {
        self.drive.clone()
    }

    /// The public keys to register at the manager as version `version` of this user's
    /// keys, signed by `previous` (the identity of version `version - 1`; `None` for the
    /// first, which signs itself), with the seed sealed under `seed_key` (a password user's;
    /// `None`: nothing sealed, a key user's).
    pub fn user_keys(
        &self,
        version: u32,
        previous: Option<&Identity>,
        seed_key: Option<&SeedKey>,
    ) -> UserKeys {
        let mut k = UserKeys {
            enc_public: self.enc_public().0,
            sign_public: self.sign_public().0,
            version,
            signature: [0; 64],
            sealed: seed_key
                .map(|s| s.seal(self.uid, &self.seed))
                .unwrap_or_default(),
        };
        let signer = previous.unwrap_or(self);
        k.signature = signer.sign_statement(&k.change_message(self.uid));
        k
    }

    /// The Ed25519 signature with this identity's sign key of a statement the key log
    /// carries (a key change's message, a policy's readers), each under its own context.
    pub(crate) fn sign_statement(&self, message: &[u8]) -> [u8; 64] {
        use ed25519_dalek::Signer;
        let e = Zeroizing::new(blake3::derive_key(ED25519_CONTEXT, self.seed.as_ref()));
        ed25519_dalek::SigningKey::from_bytes(&e)
            .sign(message)
            .to_bytes()
    }

    /// The seed sealed under `seed_key` (the user's keys stay as they are).
    pub fn seal_with(&self, seed_key: &SeedKey) -> Vec<u8> {
        seed_key.seal(self.uid, &self.seed)
    }

    /// Opens a seed sealed under `seed_key` ([`Identity::user_keys`]).
    pub fn unseal_with(
        uid: u32,
        sealed: &[u8],
        seed_key: &SeedKey,
    ) -> Result<Identity, IdentityError> {
        if !crate::opaque::is_export_sealed(sealed) {
            return Err(IdentityError::Malformed);
        }
        let seed = seed_key
            .open(uid, sealed)
            .ok_or(IdentityError::WrongPassword)?;
        Ok(Identity::from_seed(uid, &seed))
    }

    /// Whether `keys` are this identity's public keys.
    pub fn matches(&self, keys: &UserKeys) -> bool {
        keys.enc_public == self.enc_public().0 && keys.sign_public == self.sign_public().0
    }

    /// The seed sealed under `password` as accounts made before manager protocol 15 had it:
    /// the seal header, then the sealed seed.
    #[cfg(test)]
    fn seal_legacy(&self, password: &str) -> Vec<u8> {
        let seal = KeySeal::create(password.as_bytes()).expect("Argon2id parameters are valid");
        let key = nasd_crypto::Key::from_bytes(*self.seed);
        let mut out = seal.header().encode().to_vec();
        out.extend_from_slice(&seal.seal(SEAL_SLOT, &key));
        out
    }

    /// Opens a seed sealed under `password` itself (an account made before manager
    /// protocol 13, at the login that moves it to OPAQUE).
    pub fn unseal_legacy(
        uid: u32,
        sealed: &[u8],
        password: &str,
    ) -> Result<Identity, IdentityError> {
        if sealed.len() != SEAL_HEADER_BYTES + SEALED_KEY_BYTES {
            return Err(IdentityError::Malformed);
        }
        let header = SealHeader::decode(&sealed[..SEAL_HEADER_BYTES])
            .map_err(|_| IdentityError::Malformed)?;
        let seal = KeySeal::unlock(password.as_bytes(), &header)
            .map_err(|_| IdentityError::WrongPassword)?;
        let boxed: [u8; SEALED_KEY_BYTES] = sealed[SEAL_HEADER_BYTES..]
            .try_into()
            .map_err(|_| IdentityError::Malformed)?;
        let key = seal
            .open(SEAL_SLOT, &boxed)
            .ok_or(IdentityError::WrongPassword)?;
        Ok(Identity::from_seed(uid, key.expose()))
    }

    /// Keeps the seed in `path` (0600), for later commands that log in with a saved token.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        write_secret_file(path, hex::encode(*self.seed).as_bytes())
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// The identity kept in `path`, if there is one that decodes.
    pub fn load(uid: u32, path: &Path) -> Option<Identity> {
        let text = Zeroizing::new(std::fs::read_to_string(path).ok()?);
        let bytes = Zeroizing::new(hex::decode(text.trim()).ok()?);
        let seed: [u8; 32] = bytes.as_slice().try_into().ok()?;
        let seed = Zeroizing::new(seed);
        Some(Identity::from_seed(uid, &seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legacy_sealed_seed_opens_with_its_password_only() {
        let id = Identity::from_seed(7, &[3; 32]);
        let sealed = id.seal_legacy("correct horse");
        let back = Identity::unseal_legacy(7, &sealed, "correct horse").unwrap();
        assert!(back.matches(&id.user_keys(1, None, None)));
        assert!(matches!(
            Identity::unseal_legacy(7, &sealed, "wrong"),
            Err(IdentityError::WrongPassword)
        ));
        assert!(matches!(
            Identity::unseal_legacy(7, &sealed[1..], "correct horse"),
            Err(IdentityError::Malformed)
        ));
        assert!(
            !format!("{id:?}").contains("03030303"),
            "Debug hides the seed"
        );
    }

    #[test]
    fn key_changes_are_signed_by_the_previous_key_and_the_first_by_itself() {
        use ed25519_dalek::{Signature, VerifyingKey};
        let verify = |pk: &[u8; 32], k: &UserKeys| {
            VerifyingKey::from_bytes(pk)
                .unwrap()
                .verify_strict(&k.change_message(7), &Signature::from_bytes(&k.signature))
                .is_ok()
        };
        let seed_key = SeedKey::from_export_key(&[1; 64]);
        let a = Identity::from_seed(7, &[3; 32]);
        let first = a.user_keys(1, None, Some(&seed_key));
        assert!(verify(&first.sign_public, &first));
        let b = Identity::from_seed(7, &[4; 32]);
        let second = b.user_keys(2, Some(&a), Some(&seed_key));
        assert!(verify(&first.sign_public, &second), "signed by the old key");
        assert!(!verify(&second.sign_public, &second), "not by the new one");
        let back = Identity::unseal_with(7, &second.sealed, &seed_key).unwrap();
        assert!(back.matches(&second));
        let other = SeedKey::from_export_key(&[2; 64]);
        assert!(matches!(
            Identity::unseal_with(7, &second.sealed, &other),
            Err(IdentityError::WrongPassword)
        ));
    }

    #[test]
    fn login_keys_and_seeds_give_distinct_stable_identities() {
        let a = Identity::from_login_key(1, &[9; 32]);
        let b = Identity::from_login_key(1, &[9; 32]);
        assert!(a.matches(&b.user_keys(1, None, None)));
        let c = Identity::from_seed(1, &[9; 32]);
        assert!(
            !a.matches(&c.user_keys(1, None, None)),
            "a login key is not used as a seed"
        );
    }

    #[test]
    fn a_saved_identity_loads_back_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e2e-alice.key");
        let id = Identity::generate(1000);
        id.save(&p).unwrap();
        let back = Identity::load(1000, &p).unwrap();
        assert!(back.matches(&id.user_keys(1, None, None)));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
