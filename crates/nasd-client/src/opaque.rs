//! OPAQUE (RFC 9807) as nasd runs it: the asymmetric password-authenticated key exchange that
//! logs a password user in without the manager ever seeing the password, a hash of it, or
//! anything it could test a guess against without its own secret server keys.
//!
//! Cipher suite (both ends must agree, so both take it from here): the OPRF and the key
//! exchange group are ristretto255 with SHA-512, the key exchange is 3DH, and the key
//! stretching function is Argon2id with [`KSF_MEMORY_KIB`], [`KSF_ITERATIONS`] and
//! [`KSF_PARALLELISM`], run by the client alone on the OPRF's output. The manager's part is
//! one OPRF evaluation and the 3DH (well under a millisecond); the client's is dominated by the
//! Argon2id run (about 30 ms here).
//!
//! What each party holds:
//! - the manager: its [`ServerKeys`] (the OPRF seed and its 3DH key pair, in a key file beside
//!   the database, never in it) and, per user, the registration record (the user's public
//!   key, a masking key and the envelope) with a random credential id. The record alone
//!   allows no guessing: checking a guess needs the OPRF key from the seed. Record and seed
//!   together allow offline guessing at one Argon2id run per guess (the cost the KSF sets).
//! - the client: the password, for the time of a login. OPAQUE's *export key* comes out of
//!   every registration and login with the same password file; nasd turns it into the key
//!   that seals the user's end-to-end seed ([`SeedKey`]), which the manager stores and never
//!   sees the key of.
//!
//! Message sizes: KE1 96, KE2 320, KE3 64 bytes; a registration request 32, response 64,
//! upload (the record) 192.

use argon2::{Algorithm, Argon2, Params, Version};
use nasd_proto::manager::{
    OPAQUE_KE1_BYTES, OPAQUE_KE3_BYTES, OPAQUE_REGISTRATION_REQUEST_BYTES,
    OPAQUE_REGISTRATION_UPLOAD_BYTES,
};
use opaque_ke::errors::ProtocolError;
use opaque_ke::{
    ClientLogin, ClientLoginFinishParameters, ClientRegistration,
    ClientRegistrationFinishParameters, CredentialFinalization, CredentialRequest,
    CredentialResponse, Identifiers, RegistrationRequest, RegistrationResponse, RegistrationUpload,
    Ristretto255, ServerLogin, ServerLoginStartParameters, ServerRegistration, ServerSetup,
};
use rand_core::OsRng;
use zeroize::Zeroizing;

/// nasd's OPAQUE cipher suite (module docs).
pub struct Suite;

impl opaque_ke::CipherSuite for Suite {
    type OprfCs = Ristretto255;
    type KeGroup = Ristretto255;
    type KeyExchange = opaque_ke::key_exchange::tripledh::TripleDh;
    type Ksf = Argon2<'static>;
}

/// Argon2id's memory per password check, in KiB (19 MiB, OWASP's first recommended setting).
pub const KSF_MEMORY_KIB: u32 = 19 * 1024;
/// Argon2id's passes over that memory.
pub const KSF_ITERATIONS: u32 = 2;
/// Argon2id's lanes.
pub const KSF_PARALLELISM: u32 = 1;
/// What both ends bind every login to (OPAQUE's `context`), so a transcript of another
/// protocol or version never passes for a nasd login.
pub const LOGIN_CONTEXT: &[u8] = b"nasd manager opaque login v1";
/// The HKDF label that turns an export key into the key that seals the user's seed.
pub const SEED_KEY_INFO: &[u8] = b"nasd 2026 user e2e seed sealing key v1";
/// Bytes of a credential id: random per registration, so a new registration's OPRF key is
/// unrelated to the current one's (a registration never evaluates the key a login checks).
pub const CREDENTIAL_ID_BYTES: usize = 16;
/// Bytes of a sealed seed: version, nonce, the 32-byte seed and the AEAD tag.
pub const SEALED_SEED_BYTES: usize = 1 + 12 + 32 + nasd_crypto::aead::TAG_BYTES;
const SEALED_SEED_VERSION: u8 = 2;
const SEALED_SEED_AAD: &[u8] = b"nasd user e2e seed v2";

/// The key stretching function both ends agree on.
pub fn ksf() -> Argon2<'static> {
    let params = Params::new(KSF_MEMORY_KIB, KSF_ITERATIONS, KSF_PARALLELISM, None)
        .expect("the KSF parameters are valid");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Why an OPAQUE step failed.
#[derive(Debug, thiserror::Error)]
pub enum OpaqueError {
    /// The password does not open the password file (or the server is not the one the file
    /// was made with): what a wrong password looks like to both ends.
    #[error("unknown user or wrong password")]
    Refused,
    /// A message that does not decode, or a step out of order.
    #[error("OPAQUE: {0}")]
    Protocol(#[source] ProtocolError),
    /// The server keys' file does not decode.
    #[error("the OPAQUE server keys do not decode: {0}")]
    ServerKeys(#[source] ProtocolError),
}

impl From<ProtocolError> for OpaqueError {
    fn from(e: ProtocolError) -> OpaqueError {
        match e {
            ProtocolError::InvalidLoginError => OpaqueError::Refused,
            e => OpaqueError::Protocol(e),
        }
    }
}

/// The key that seals a user's end-to-end seed, from OPAQUE's export key (HKDF-SHA-512 with
/// [`SEED_KEY_INFO`]). Only the user's client, with their password, ever has it. Zeroized
/// on drop; `Debug` shows nothing of it.
pub struct SeedKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for SeedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SeedKey(..)")
    }
}

impl SeedKey {
    pub fn from_export_key(export_key: &[u8]) -> SeedKey {
        let mut k = Zeroizing::new([0u8; 32]);
        hkdf::Hkdf::<sha2::Sha512>::new(None, export_key)
            .expand(SEED_KEY_INFO, k.as_mut())
            .expect("32 bytes is a valid HKDF-SHA-512 output length");
        SeedKey(k)
    }

    /// The key's bytes (tests that look for it where it must not be).
    pub fn expose(&self) -> &[u8; 32] {
        &self.0
    }

    fn aead_key(&self) -> nasd_crypto::Key {
        nasd_crypto::Key::from_bytes(*self.0)
    }

    fn aad(uid: u32) -> Vec<u8> {
        let mut a = SEALED_SEED_AAD.to_vec();
        a.extend_from_slice(&uid.to_le_bytes());
        a
    }

    /// `uid`'s seed sealed under this key: `u8 version (2) ‖ [12] nonce ‖ AES-256-GCM(seed)`,
    /// the uid in the associated data (a sealed seed moved to another user does not open).
    pub fn seal(&self, uid: u32, seed: &[u8; 32]) -> Vec<u8> {
        let mut nonce = [0u8; 12];
        nasd_crypto::random_bytes(&mut nonce);
        let mut out = Vec::with_capacity(SEALED_SEED_BYTES);
        out.push(SEALED_SEED_VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&nasd_crypto::aead::seal(
            &self.aead_key(),
            nonce,
            &Self::aad(uid),
            seed,
        ));
        debug_assert_eq!(out.len(), SEALED_SEED_BYTES);
        out
    }

    /// Opens what [`SeedKey::seal`] made for `uid`; `None` when it is not such a seal or does
    /// not open with this key.
    pub fn open(&self, uid: u32, sealed: &[u8]) -> Option<Zeroizing<[u8; 32]>> {
        if sealed.len() != SEALED_SEED_BYTES || sealed[0] != SEALED_SEED_VERSION {
            return None;
        }
        let nonce: [u8; 12] = sealed[1..13].try_into().ok()?;
        let plain = Zeroizing::new(nasd_crypto::aead::open(
            &self.aead_key(),
            nonce,
            &Self::aad(uid),
            &sealed[13..],
        )?);
        let mut seed = Zeroizing::new([0u8; 32]);
        seed.copy_from_slice(plain.get(..32)?);
        Some(seed)
    }
}

/// Whether `sealed` is a seed sealed under an export key ([`SeedKey::seal`]), rather than a
/// seed sealed under the password itself (accounts made before manager protocol 15).
pub fn is_export_sealed(sealed: &[u8]) -> bool {
    sealed.len() == SEALED_SEED_BYTES && sealed[0] == SEALED_SEED_VERSION
}

/// A client's login in progress: KE1 sent, waiting for KE2.
pub struct ClientLoginStart {
    state: ClientLogin<Suite>,
    pub message: [u8; OPAQUE_KE1_BYTES],
}

/// Starts a login with `password` (the client's first message, KE1).
pub fn client_login_start(password: &[u8]) -> Result<ClientLoginStart, OpaqueError> {
    let s = ClientLogin::<Suite>::start(&mut OsRng, password)?;
    let message = s
        .message
        .serialize()
        .as_slice()
        .try_into()
        .expect("KE1 has its fixed size");
    Ok(ClientLoginStart {
        state: s.state,
        message,
    })
}

impl ClientLoginStart {
    /// Answers the server's KE2: the client's KE3 and the key that seals the user's seed.
    /// [`OpaqueError::Refused`] when the password does not open the password file.
    pub fn finish(
        self,
        password: &[u8],
        ke2: &[u8],
    ) -> Result<([u8; OPAQUE_KE3_BYTES], SeedKey), OpaqueError> {
        let response = CredentialResponse::<Suite>::deserialize(ke2)?;
        let ksf = ksf();
        let params = ClientLoginFinishParameters::new(
            Some(LOGIN_CONTEXT),
            Identifiers::default(),
            Some(&ksf),
        );
        let done = self.state.finish(password, response, params)?;
        let ke3 = done
            .message
            .serialize()
            .as_slice()
            .try_into()
            .expect("KE3 has its fixed size");
        Ok((ke3, SeedKey::from_export_key(&done.export_key)))
    }
}

/// A client's registration in progress: the request sent, waiting for the response.
pub struct ClientRegisterStart {
    state: ClientRegistration<Suite>,
    pub message: [u8; OPAQUE_REGISTRATION_REQUEST_BYTES],
}

/// Starts a registration of `password` (a new password file).
pub fn client_register_start(password: &[u8]) -> Result<ClientRegisterStart, OpaqueError> {
    let s = ClientRegistration::<Suite>::start(&mut OsRng, password)?;
    let message = s
        .message
        .serialize()
        .as_slice()
        .try_into()
        .expect("a registration request has its fixed size");
    Ok(ClientRegisterStart {
        state: s.state,
        message,
    })
}

impl ClientRegisterStart {
    /// Answers the server's registration response: the upload (the password file the server
    /// keeps) and the key that will seal the user's seed with this password file.
    pub fn finish(
        self,
        password: &[u8],
        response: &[u8],
    ) -> Result<([u8; OPAQUE_REGISTRATION_UPLOAD_BYTES], SeedKey), OpaqueError> {
        let response = RegistrationResponse::<Suite>::deserialize(response)?;
        let ksf = ksf();
        let params = ClientRegistrationFinishParameters::new(Identifiers::default(), Some(&ksf));
        let done = self.state.finish(&mut OsRng, password, response, params)?;
        let upload = done
            .message
            .serialize()
            .as_slice()
            .try_into()
            .expect("a registration upload has its fixed size");
        Ok((upload, SeedKey::from_export_key(&done.export_key)))
    }
}

/// The manager's OPAQUE keys: the OPRF seed and its 3DH key pair (RFC 9807's server setup).
/// Whoever holds them and the password files can guess passwords offline, so they live in a
/// key file of their own, never in the database. `Debug` shows nothing of them.
pub struct ServerKeys(ServerSetup<Suite>);

impl std::fmt::Debug for ServerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerKeys(..)")
    }
}

/// A server's login in progress: KE2 sent, waiting for KE3.
pub struct ServerLoginState(ServerLogin<Suite>);

impl ServerLoginState {
    /// Checks the client's KE3: `Ok` only when the client opened the password file, that
    /// is, knew the password.
    pub fn finish(self, ke3: &[u8; OPAQUE_KE3_BYTES]) -> Result<(), OpaqueError> {
        let m = CredentialFinalization::<Suite>::deserialize(ke3)?;
        self.0.finish(m)?;
        Ok(())
    }
}

impl ServerKeys {
    pub fn generate() -> ServerKeys {
        ServerKeys(ServerSetup::<Suite>::new(&mut OsRng))
    }

    /// The keys as their file holds them.
    pub fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(self.0.serialize().to_vec())
    }

    pub fn from_bytes(b: &[u8]) -> Result<ServerKeys, OpaqueError> {
        ServerSetup::<Suite>::deserialize(b)
            .map(ServerKeys)
            .map_err(OpaqueError::ServerKeys)
    }

    /// The registration response to `request` for a new password file under credential id
    /// `credential_id`.
    pub fn register(
        &self,
        credential_id: &[u8],
        request: &[u8; OPAQUE_REGISTRATION_REQUEST_BYTES],
    ) -> Result<Vec<u8>, OpaqueError> {
        let request = RegistrationRequest::<Suite>::deserialize(request)?;
        let r = ServerRegistration::<Suite>::start(&self.0, request, credential_id)?;
        Ok(r.message.serialize().to_vec())
    }

    /// KE2 for `request` against password file `record` (`None`: no such user, or none with
    /// a password file: a fake record answers, indistinguishable from a real one).
    pub fn login_start(
        &self,
        record: Option<&[u8]>,
        credential_id: &[u8],
        request: &[u8; OPAQUE_KE1_BYTES],
    ) -> Result<(Vec<u8>, ServerLoginState), OpaqueError> {
        let record = match record {
            Some(r) => Some(ServerRegistration::<Suite>::deserialize(r)?),
            None => None,
        };
        let request = CredentialRequest::<Suite>::deserialize(request)?;
        let params = ServerLoginStartParameters {
            context: Some(LOGIN_CONTEXT),
            identifiers: Identifiers::default(),
        };
        let s = ServerLogin::start(&mut OsRng, &self.0, record, request, credential_id, params)
            .map_err(|e| match e {
                ProtocolError::InvalidLoginError => OpaqueError::Refused,
                _ => OpaqueError::Protocol(ProtocolError::SerializationError),
            })?;
        Ok((s.message.serialize().to_vec(), ServerLoginState(s.state)))
    }
}

/// Checks that `upload` is a well-formed password file.
pub fn check_upload(upload: &[u8; OPAQUE_REGISTRATION_UPLOAD_BYTES]) -> Result<(), OpaqueError> {
    RegistrationUpload::<Suite>::deserialize(upload)?;
    Ok(())
}

/// A registration run end to end in one process, for a password given to the manager's own
/// host (`nasd manager init`'s first admin): the password file, and the key that seals the
/// admin's seed with it.
pub fn register_locally(
    keys: &ServerKeys,
    credential_id: &[u8],
    password: &[u8],
) -> Result<([u8; OPAQUE_REGISTRATION_UPLOAD_BYTES], SeedKey), OpaqueError> {
    let c = client_register_start(password)?;
    let response = keys.register(credential_id, &c.message)?;
    c.finish(password, &response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(
        keys: &ServerKeys,
        record: Option<&[u8]>,
        id: &[u8],
        pw: &[u8],
    ) -> Result<SeedKey, OpaqueError> {
        let c = client_login_start(pw)?;
        let (ke2, st) = keys.login_start(record, id, &c.message)?;
        let (ke3, key) = c.finish(pw, &ke2)?;
        st.finish(&ke3)?;
        Ok(key)
    }

    #[test]
    fn a_registered_password_logs_in_and_gives_the_registration_s_seed_key() {
        let keys = ServerKeys::generate();
        let (record, reg_key) = register_locally(&keys, b"id-1", b"hunter2").unwrap();
        let key = login(&keys, Some(&record), b"id-1", b"hunter2").unwrap();
        assert_eq!(key.expose(), reg_key.expose(), "export keys agree");
        let sealed = key.seal(1000, &[9; 32]);
        assert_eq!(*reg_key.open(1000, &sealed).unwrap(), [9; 32]);
        assert!(reg_key.open(1001, &sealed).is_none(), "bound to its uid");
        assert!(is_export_sealed(&sealed));
        // A wrong password, another credential id, another server's keys: refused.
        assert!(matches!(
            login(&keys, Some(&record), b"id-1", b"hunter3"),
            Err(OpaqueError::Refused)
        ));
        assert!(matches!(
            login(&keys, Some(&record), b"id-2", b"hunter2"),
            Err(OpaqueError::Refused)
        ));
        let other = ServerKeys::generate();
        assert!(matches!(
            login(&other, Some(&record), b"id-1", b"hunter2"),
            Err(OpaqueError::Refused)
        ));
        // No record: a fake one answers, and the login fails like a wrong password.
        assert!(matches!(
            login(&keys, None, b"id-1", b"hunter2"),
            Err(OpaqueError::Refused)
        ));
        // The keys survive their file.
        let back = ServerKeys::from_bytes(&keys.to_bytes()).unwrap();
        login(&back, Some(&record), b"id-1", b"hunter2").unwrap();
        assert_eq!(format!("{keys:?}"), "ServerKeys(..)");
    }

    #[test]
    fn a_new_registration_gives_a_new_seed_key() {
        let keys = ServerKeys::generate();
        let (_, a) = register_locally(&keys, b"id-1", b"same").unwrap();
        let (_, b) = register_locally(&keys, b"id-1", b"same").unwrap();
        assert_ne!(a.expose(), b.expose());
    }
}
