//! The session calls: a key login's challenge, the login itself (session token, signature,
//! or the one legacy password check of an account made before protocol 15), OPAQUE logins and
//! registrations (RFC 9807: the password never reaches the manager), the logout, and a
//! gateway's session for another user.
//! ```text
//! Login              := string user, u8 kind (1 legacy password | 2 token | 3 signature),
//!                       string password | [32] token | [64] signature
//! LoginOk            := u32 uid, bool admin, [32] token, u64 expires_ms
//! OpaqueLoginStart   := string user, [96] credential_request (KE1)
//! OpaqueLoginFinish  := [64] credential_finalization (KE3)
//! OpaqueRegisterStart := string user, [32] registration_request, bool has_code, [string code]
//! OpaqueRegisterFinish := [192] registration_upload, blob sealed (<= SEALED_SECRET_BYTES_MAX)
//! OpaqueMessage      := blob message (<= OPAQUE_MESSAGE_BYTES_MAX): KE2 or the
//!                       registration response
//! ```

use super::{no_fields, one_string};
use crate::codec::{Reader, Writer};
use crate::manager::codec::{get_bool, get_str, put_str};
use crate::manager::{SecretString, SessionToken, Wire};
use crate::DecodeError;
use std::fmt;

/// Bytes of a session token.
pub const TOKEN_BYTES: usize = 32;
/// Bytes of an Ed25519 public key, and of a login challenge.
pub const PUBLIC_KEY_BYTES: usize = 32;
pub const CHALLENGE_BYTES: usize = 32;
/// Bytes of an Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// Domain separation of login signatures, so they can never pass for anything else.
pub const LOGIN_CONTEXT: &[u8] = b"nasd manager login v1\0";

/// What a user signs to log in with a key: the context, the user name (length-prefixed) and the
/// manager's challenge for this connection.
pub fn login_message(user: &str, challenge: &[u8; CHALLENGE_BYTES]) -> Vec<u8> {
    let mut m = Vec::with_capacity(LOGIN_CONTEXT.len() + 4 + user.len() + CHALLENGE_BYTES);
    m.extend_from_slice(LOGIN_CONTEXT);
    m.extend_from_slice(&(user.len() as u32).to_le_bytes());
    m.extend_from_slice(user.as_bytes());
    m.extend_from_slice(challenge);
    m
}

/// Bytes of OPAQUE's messages with nasd's cipher suite (ristretto255, SHA-512, 3DH): the
/// login's KE1 and KE3, the registration request and upload (the user's password file).
pub const OPAQUE_KE1_BYTES: usize = 96;
pub const OPAQUE_KE3_BYTES: usize = 64;
pub const OPAQUE_REGISTRATION_REQUEST_BYTES: usize = 32;
pub const OPAQUE_REGISTRATION_UPLOAD_BYTES: usize = 192;
/// Largest OPAQUE message the manager sends (KE2 is 320 bytes, a registration response 64).
pub const OPAQUE_MESSAGE_BYTES_MAX: usize = 512;
/// Longest enrollment code accepted.
pub const ENROLLMENT_CODE_BYTES_MAX: usize = 128;

/// What a user logs in with, as a client holds it. A password never goes to the manager: the
/// client runs OPAQUE with it ([`OpaqueLoginStart`], [`OpaqueLoginFinish`]); only an account
/// made before protocol 15 sends it once, as [`LoginProof::LegacyPassword`], when its user asks
/// to move it over.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Password(SecretString),
    /// The password of an account made before manager protocol 15, shown to the manager one
    /// last time so it can check it against its old hash and let the client register the
    /// account through OPAQUE (which deletes the hash).
    LegacyPassword(SecretString),
    /// A session token from an earlier login.
    Token([u8; TOKEN_BYTES]),
    /// An Ed25519 signature of [`login_message`] over the challenge this connection received.
    Signature([u8; SIGNATURE_BYTES]),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Password(_) => f.write_str("Password(..)"),
            Credential::LegacyPassword(_) => f.write_str("LegacyPassword(..)"),
            Credential::Token(_) => f.write_str("Token(..)"),
            Credential::Signature(_) => f.write_str("Signature(..)"),
        }
    }
}

/// What a [`Login`] carries.
#[derive(Clone, PartialEq, Eq)]
pub enum LoginProof {
    /// The password of an account whose manager still holds its pre-OPAQUE Argon2id hash:
    /// checked once, after which the client registers through OPAQUE and the hash goes.
    LegacyPassword(SecretString),
    /// A session token from an earlier login.
    Token([u8; TOKEN_BYTES]),
    /// An Ed25519 signature of [`login_message`] over the challenge this connection received.
    Signature([u8; SIGNATURE_BYTES]),
}

impl fmt::Debug for LoginProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoginProof::LegacyPassword(_) => f.write_str("LegacyPassword(..)"),
            LoginProof::Token(_) => f.write_str("Token(..)"),
            LoginProof::Signature(_) => f.write_str("Signature(..)"),
        }
    }
}

/// A login by token, signature or legacy password; answered with [`LoginOk`]. (A password
/// user logs in with [`OpaqueLoginStart`] and [`OpaqueLoginFinish`].)
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Login {
    pub user: String,
    pub proof: LoginProof,
}

impl Wire for Login {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.user);
        match &self.proof {
            LoginProof::LegacyPassword(p) => {
                w.u8(1);
                put_str(w, p);
            }
            LoginProof::Token(t) => {
                w.u8(2);
                w.bytes(t);
            }
            LoginProof::Signature(sig) => {
                w.u8(3);
                w.bytes(sig);
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let user = get_str(r, "user")?;
        let proof = match r.u8("credential kind")? {
            1 => LoginProof::LegacyPassword(SecretString(get_str(r, "password")?)),
            2 => LoginProof::Token(r.array("token")?),
            3 => LoginProof::Signature(r.array("signature")?),
            _ => return Err(DecodeError::BadValue("credential kind")),
        };
        Ok(Login { user, proof })
    }
}

/// The first message of an OPAQUE login (RFC 9807 §6: KE1, the blinded password and the
/// client's key share); answered with an [`OpaqueMessage`] holding KE2, which is the same for
/// an unknown user, a key user and a user without a password file (a fake record).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OpaqueLoginStart {
    pub user: String,
    pub request: [u8; OPAQUE_KE1_BYTES],
}

impl Wire for OpaqueLoginStart {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.user);
        w.bytes(&self.request);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(OpaqueLoginStart {
            user: get_str(r, "user")?,
            request: r.array("opaque ke1")?,
        })
    }
}

/// The last message of an OPAQUE login (KE3: the client's key confirmation) on the
/// connection that sent [`OpaqueLoginStart`]; answered with [`LoginOk`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OpaqueLoginFinish {
    pub finalization: [u8; OPAQUE_KE3_BYTES],
}

impl Wire for OpaqueLoginFinish {
    fn put(&self, w: &mut Writer) {
        w.bytes(&self.finalization);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(OpaqueLoginFinish {
            finalization: r.array("opaque ke3")?,
        })
    }
}

/// Starts an OPAQUE registration for `user` (RFC 9807 §5): a new password file. Before login
/// it needs the user's enrollment `code` (an account made by `user add`, or reset by an
/// admin); from a session, only for the session's own user (a password change). Answered
/// with an [`OpaqueMessage`] holding the registration response.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OpaqueRegisterStart {
    pub user: String,
    pub request: [u8; OPAQUE_REGISTRATION_REQUEST_BYTES],
    pub code: Option<SecretString>,
}

impl Wire for OpaqueRegisterStart {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.user);
        w.bytes(&self.request);
        match &self.code {
            Some(c) => {
                w.u8(1);
                put_str(w, c);
            }
            None => w.u8(0),
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let user = get_str(r, "user")?;
        let request = r.array("opaque registration request")?;
        let code = match get_bool(r, "has code")? {
            true => {
                let c = get_str(r, "enrollment code")?;
                if c.len() > ENROLLMENT_CODE_BYTES_MAX {
                    return Err(DecodeError::TooLong("enrollment code"));
                }
                Some(SecretString(c))
            }
            false => None,
        };
        Ok(OpaqueRegisterStart {
            user,
            request,
            code,
        })
    }
}

/// Completes the registration this connection started: the user's new password file and,
/// when not empty, their end-to-end seed sealed under the key the new registration's export
/// key gives (replacing the sealed copy in one transaction). Every session of the user ends.
#[derive(Clone, PartialEq, Eq)]
pub struct OpaqueRegisterFinish {
    pub upload: [u8; OPAQUE_REGISTRATION_UPLOAD_BYTES],
    pub sealed: Vec<u8>,
}

impl fmt::Debug for OpaqueRegisterFinish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpaqueRegisterFinish")
            .field("sealed_bytes", &self.sealed.len())
            .finish_non_exhaustive()
    }
}

impl Wire for OpaqueRegisterFinish {
    fn put(&self, w: &mut Writer) {
        w.bytes(&self.upload);
        w.blob(&self.sealed);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(OpaqueRegisterFinish {
            upload: r.array("opaque registration upload")?,
            sealed: r
                .blob(crate::e2e::SEALED_SECRET_BYTES_MAX, "sealed secret")?
                .to_vec(),
        })
    }
}

/// An OPAQUE message from the manager: KE2 of a login, or a registration response.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OpaqueMessage(pub Vec<u8>);

impl Wire for OpaqueMessage {
    fn put(&self, w: &mut Writer) {
        w.blob(&self.0);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(OpaqueMessage(
            r.blob(OPAQUE_MESSAGE_BYTES_MAX, "opaque message")?.to_vec(),
        ))
    }
}

/// A session: the user's uid, whether they are an admin, its token and when it expires.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LoginOk {
    pub uid: u32,
    pub admin: bool,
    pub token: SessionToken,
    pub expires_ms: u64,
}

impl Wire for LoginOk {
    fn put(&self, w: &mut Writer) {
        w.u32(self.uid);
        w.u8(self.admin as u8);
        w.bytes(&self.token.0);
        w.u64(self.expires_ms);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(LoginOk {
            uid: r.u32("uid")?,
            admin: get_bool(r, "admin")?,
            token: SessionToken(r.array("token")?),
            expires_ms: r.u64("expires")?,
        })
    }
}

one_string! {
    /// Asks for a fresh challenge to sign for a key login as `user` (before `Login`).
    Challenge { user: "user" }
}

no_fields! {
    /// Ends the session this connection logged in with: the manager forgets its token, so it
    /// logs in nowhere again, and the connection is logged out.
    Logout
}

one_string! {
    /// From a gateway's session: opens a session for `user` (not an admin), answered with
    /// [`LoginOk`] carrying that user's token; the gateway then logs in with it. The session
    /// lasts at most an hour and ends when the gateway stops being one.
    ActFor { user: "user" }
}
