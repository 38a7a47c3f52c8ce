//! Users, passwords, keys and sessions. A user has either a password, stored as an Argon2id
//! PHC string, or an Ed25519 public key, stored in the same column as `$ed25519$<hex>`; a key
//! user logs in by signing [`login_message`] over a fresh challenge the manager gave this
//! connection (so a signature is good for one login only). A successful login returns a random
//! session token whose BLAKE3 hash the store keeps, so later commands (`nasd login` once, then
//! `nasd ls`) authenticate without the credential until it expires.

use crate::service::{check_name, Caller};
use crate::store::{MetaStore, SessionRecord};
use crate::{now_ms, MgrError, MgrResult};
use argon2::password_hash::{
    rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString,
};
use argon2::Argon2;
use nasd_proto::manager::{
    login_message, Credential, MgrStatus, CHALLENGE_BYTES, PUBLIC_KEY_BYTES, TOKEN_BYTES,
};

/// How a public-key user's verifier starts in the store's credential column.
pub const ED25519_PREFIX: &str = "$ed25519$";

/// Shortest password accepted.
pub const PASSWORD_BYTES_MIN: usize = 4;
/// Longest password accepted (Argon2 hashes any length; this bounds the work per login).
pub const PASSWORD_BYTES_MAX: usize = 1024;
/// The group every new user belongs to.
pub const USERS_GROUP: &str = "users";
/// The admin's primary group.
pub const ADMIN_GROUP: &str = "admin";

pub fn hash_password(password: &str) -> MgrResult<String> {
    if password.len() < PASSWORD_BYTES_MIN || password.len() > PASSWORD_BYTES_MAX {
        return Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!("passwords are {PASSWORD_BYTES_MIN} to {PASSWORD_BYTES_MAX} bytes"),
        ));
    }
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| MgrError::new(MgrStatus::Internal, format!("argon2: {e}")))
}

fn verify_password(phc: &str, password: &str) -> bool {
    PasswordHash::new(phc)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// The store's credential string for a public key.
pub fn key_verifier(pk: &[u8; PUBLIC_KEY_BYTES]) -> MgrResult<String> {
    ed25519_dalek::VerifyingKey::from_bytes(pk)
        .map_err(|_| MgrError::new(MgrStatus::InvalidArgument, "not an Ed25519 public key"))?;
    Ok(format!("{ED25519_PREFIX}{}", hex::encode(pk)))
}

/// Whether `sig` signs the login of `user` over `challenge` with the key in `verifier`.
fn verify_signature(
    verifier: &str,
    user: &str,
    challenge: &[u8; CHALLENGE_BYTES],
    sig: &[u8; 64],
) -> bool {
    let Some(pk) = verifier
        .strip_prefix(ED25519_PREFIX)
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| <[u8; PUBLIC_KEY_BYTES]>::try_from(b).ok())
    else {
        return false;
    };
    let Ok(vk) = ed25519_dalek::VerifyingKey::from_bytes(&pk) else {
        return false;
    };
    let sig = ed25519_dalek::Signature::from_bytes(sig);
    vk.verify_strict(&login_message(user, challenge), &sig)
        .is_ok()
}

pub fn token_hash(token: &[u8; TOKEN_BYTES]) -> [u8; 32] {
    *blake3::hash(token).as_bytes()
}

fn db(e: crate::store::StoreError) -> MgrError {
    MgrError::new(MgrStatus::Internal, e.to_string())
}

/// The caller record of a user.
pub fn caller_of(st: &dyn MetaStore, uid: u32) -> MgrResult<Caller> {
    let u = st
        .user_by_uid(uid)
        .map_err(db)?
        .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, format!("uid {uid}")))?;
    Ok(Caller {
        uid: u.uid,
        name: u.name,
        admin: u.admin,
        gid: u.gid,
        groups: st.groups_of(uid).map_err(db)?,
    })
}

/// Checks a credential; returns the caller, a (new or the presented) token and its expiry.
/// `challenge` is the one this connection was given (a signature needs it). The password check
/// runs without the store lock held (Argon2 is slow on purpose).
pub fn login(
    store: &std::sync::Mutex<Box<dyn MetaStore>>,
    user: &str,
    cred: &Credential,
    session_ttl_ms: u64,
    challenge: Option<&[u8; CHALLENGE_BYTES]>,
) -> MgrResult<(Caller, [u8; TOKEN_BYTES], u64)> {
    let u = store
        .lock()
        .expect("store lock")
        .user_by_name(user)
        .map_err(db)?
        .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, user.to_string()))?;
    match cred {
        Credential::Password(p) => {
            if !verify_password(&u.phc, p) {
                return Err(MgrError::new(
                    MgrStatus::WrongPassword,
                    format!("for user {user}"),
                ));
            }
            new_session(store, u.uid, session_ttl_ms)
        }
        Credential::Signature(sig) => {
            let Some(ch) = challenge else {
                return Err(MgrError::new(
                    MgrStatus::InvalidArgument,
                    "a key login needs a challenge first",
                ));
            };
            if !verify_signature(&u.phc, user, ch, sig) {
                return Err(MgrError::new(
                    MgrStatus::WrongPassword,
                    format!("for user {user}: the signature does not verify (wrong key)"),
                ));
            }
            new_session(store, u.uid, session_ttl_ms)
        }
        Credential::Token(t) => {
            let st = store.lock().expect("store lock");
            let s = st
                .session(&token_hash(t))
                .map_err(db)?
                .filter(|s| s.uid == u.uid)
                .ok_or_else(|| {
                    MgrError::new(
                        MgrStatus::SessionExpired,
                        format!("no live session for {user}"),
                    )
                })?;
            if s.expires_ms <= now_ms() {
                return Err(MgrError::new(
                    MgrStatus::SessionExpired,
                    format!("the session of {user} expired"),
                ));
            }
            Ok((caller_of(st.as_ref(), u.uid)?, *t, s.expires_ms))
        }
    }
}

/// Starts a session for `uid`: a fresh random token, its hash stored.
fn new_session(
    store: &std::sync::Mutex<Box<dyn MetaStore>>,
    uid: u32,
    session_ttl_ms: u64,
) -> MgrResult<(Caller, [u8; TOKEN_BYTES], u64)> {
    let mut token = [0u8; TOKEN_BYTES];
    nasd_crypto::random_bytes(&mut token);
    let expires_ms = now_ms() + session_ttl_ms;
    let mut st = store.lock().expect("store lock");
    st.expire_sessions(now_ms()).map_err(db)?;
    st.put_session(&SessionRecord {
        token_hash: token_hash(&token),
        uid,
        expires_ms,
    })
    .map_err(db)?;
    Ok((caller_of(st.as_ref(), uid)?, token, expires_ms))
}

/// Adds a user with `users` (or, for admins, `admin`) as primary group.
pub fn add_user(st: &mut dyn MetaStore, name: &str, password: &str, admin: bool) -> MgrResult<u32> {
    add_user_with(st, name, &hash_password(password)?, admin)
}

/// Adds a user who logs in with the Ed25519 key `pk` (and has no password).
pub fn add_key_user(
    st: &mut dyn MetaStore,
    name: &str,
    pk: &[u8; PUBLIC_KEY_BYTES],
    admin: bool,
) -> MgrResult<u32> {
    add_user_with(st, name, &key_verifier(pk)?, admin)
}

fn add_user_with(st: &mut dyn MetaStore, name: &str, phc: &str, admin: bool) -> MgrResult<u32> {
    check_name(name)?;
    let gname = if admin { ADMIN_GROUP } else { USERS_GROUP };
    let gid = match st.group_by_name(gname).map_err(db)? {
        Some(g) => g.gid,
        None => st.add_group(gname).map_err(db)?,
    };
    st.add_user(name, phc, admin, gid).map_err(|e| match e {
        crate::store::StoreError::Exists => {
            MgrError::new(MgrStatus::Exists, format!("user {name}"))
        }
        e => db(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteStore;
    use std::sync::Mutex;

    #[test]
    fn login_by_password_then_token() {
        let mut s: Box<dyn MetaStore> = Box::new(SqliteStore::in_memory().unwrap());
        add_user(s.as_mut(), "alice", "secret", false).unwrap();
        let m = Mutex::new(s);
        let wrong = login(
            &m,
            "alice",
            &Credential::Password("nope".into()),
            1000,
            None,
        )
        .unwrap_err();
        assert_eq!(wrong.status, MgrStatus::WrongPassword);
        let unknown = login(
            &m,
            "bob",
            &Credential::Password("secret".into()),
            1000,
            None,
        )
        .unwrap_err();
        assert_eq!(unknown.status, MgrStatus::UnknownUser);
        let (c, tok, _) = login(
            &m,
            "alice",
            &Credential::Password("secret".into()),
            60_000,
            None,
        )
        .unwrap();
        assert_eq!(c.name, "alice");
        assert!(!c.admin);
        let (c2, _, _) = login(&m, "alice", &Credential::Token(tok), 60_000, None).unwrap();
        assert_eq!(c2.uid, c.uid);
        let bad = login(&m, "alice", &Credential::Token([0; 32]), 60_000, None).unwrap_err();
        assert_eq!(bad.status, MgrStatus::SessionExpired);
        // An expired session is refused.
        let (_, old, _) =
            login(&m, "alice", &Credential::Password("secret".into()), 0, None).unwrap();
        let exp = login(&m, "alice", &Credential::Token(old), 60_000, None).unwrap_err();
        assert_eq!(exp.status, MgrStatus::SessionExpired);
    }

    #[test]
    fn login_by_signing_the_challenge_and_a_wrong_key_is_refused() {
        use ed25519_dalek::{Signer, SigningKey};
        let key = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]);
        let mut s: Box<dyn MetaStore> = Box::new(SqliteStore::in_memory().unwrap());
        add_key_user(s.as_mut(), "carol", &key.verifying_key().to_bytes(), false).unwrap();
        let m = Mutex::new(s);
        let ch = [3u8; CHALLENGE_BYTES];
        let sign = |k: &SigningKey, user: &str, ch: &[u8; 32]| {
            Credential::Signature(k.sign(&login_message(user, ch)).to_bytes())
        };
        let (c, _, _) = login(&m, "carol", &sign(&key, "carol", &ch), 60_000, Some(&ch)).unwrap();
        assert_eq!(c.name, "carol");
        let wrong = login(&m, "carol", &sign(&other, "carol", &ch), 60_000, Some(&ch));
        assert_eq!(wrong.unwrap_err().status, MgrStatus::WrongPassword);
        // A signature over another challenge (a replay) or without one is refused.
        let old = sign(&key, "carol", &[4; 32]);
        let replay = login(&m, "carol", &old, 60_000, Some(&ch));
        assert_eq!(replay.unwrap_err().status, MgrStatus::WrongPassword);
        assert!(login(&m, "carol", &sign(&key, "carol", &ch), 60_000, None).is_err());
        // No password opens a key user's account; a password user has no key.
        let pw = login(
            &m,
            "carol",
            &Credential::Password(String::new()),
            60_000,
            None,
        );
        assert_eq!(pw.unwrap_err().status, MgrStatus::WrongPassword);
    }
}
