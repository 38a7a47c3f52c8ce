//! The session calls: a key login's challenge, the login itself (password, session token or
//! signature), the logout, and a gateway's session for another user.
//! ```text
//! Login     := string user, u8 kind (1 password | 2 token | 3 signature),
//!              string password | [32] token | [64] signature
//! LoginOk   := u32 uid, bool admin, [32] token, u64 expires_ms
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

/// How a user proves who they are.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Password(SecretString),
    /// A session token from an earlier login.
    Token([u8; TOKEN_BYTES]),
    /// An Ed25519 signature of [`login_message`] over the challenge this connection received.
    Signature([u8; SIGNATURE_BYTES]),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Password(_) => f.write_str("Password(..)"),
            Credential::Token(_) => f.write_str("Token(..)"),
            Credential::Signature(_) => f.write_str("Signature(..)"),
        }
    }
}

/// Must be the first request of a connection; answered with [`LoginOk`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Login {
    pub user: String,
    pub credential: Credential,
}

impl Wire for Login {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.user);
        match &self.credential {
            Credential::Password(p) => {
                w.u8(1);
                put_str(w, p);
            }
            Credential::Token(t) => {
                w.u8(2);
                w.bytes(t);
            }
            Credential::Signature(sig) => {
                w.u8(3);
                w.bytes(sig);
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let user = get_str(r, "user")?;
        let credential = match r.u8("credential kind")? {
            1 => Credential::Password(SecretString(get_str(r, "password")?)),
            2 => Credential::Token(r.array("token")?),
            3 => Credential::Signature(r.array("signature")?),
            _ => return Err(DecodeError::BadValue("credential kind")),
        };
        Ok(Login { user, credential })
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
