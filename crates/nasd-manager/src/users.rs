//! Users, passwords and sessions. Passwords are stored as Argon2id PHC strings; a successful
//! login returns a random session token whose BLAKE3 hash the store keeps, so later commands
//! (`nasd login` once, then `nasd ls`) authenticate without the password until it expires.

use crate::service::{check_name, Caller};
use crate::store::{MetaStore, SessionRecord};
use crate::{now_ms, MgrError, MgrResult};
use argon2::password_hash::{
    rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString,
};
use argon2::Argon2;
use nasd_proto::manager::{Credential, MgrStatus, TOKEN_BYTES};

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
/// The password check runs without the store lock held (Argon2 is slow on purpose).
pub fn login(
    store: &std::sync::Mutex<Box<dyn MetaStore>>,
    user: &str,
    cred: &Credential,
    session_ttl_ms: u64,
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
            let mut token = [0u8; TOKEN_BYTES];
            nasd_crypto::random_bytes(&mut token);
            let expires_ms = now_ms() + session_ttl_ms;
            let mut st = store.lock().expect("store lock");
            st.expire_sessions(now_ms()).map_err(db)?;
            st.put_session(&SessionRecord {
                token_hash: token_hash(&token),
                uid: u.uid,
                expires_ms,
            })
            .map_err(db)?;
            Ok((caller_of(st.as_ref(), u.uid)?, token, expires_ms))
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

/// Adds a user with `users` (or, for admins, `admin`) as primary group.
pub fn add_user(st: &mut dyn MetaStore, name: &str, password: &str, admin: bool) -> MgrResult<u32> {
    check_name(name)?;
    let phc = hash_password(password)?;
    let gname = if admin { ADMIN_GROUP } else { USERS_GROUP };
    let gid = match st.group_by_name(gname).map_err(db)? {
        Some(g) => g.gid,
        None => st.add_group(gname).map_err(db)?,
    };
    st.add_user(name, &phc, admin, gid).map_err(|e| match e {
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
        let wrong = login(&m, "alice", &Credential::Password("nope".into()), 1000).unwrap_err();
        assert_eq!(wrong.status, MgrStatus::WrongPassword);
        let unknown = login(&m, "bob", &Credential::Password("secret".into()), 1000).unwrap_err();
        assert_eq!(unknown.status, MgrStatus::UnknownUser);
        let (c, tok, _) =
            login(&m, "alice", &Credential::Password("secret".into()), 60_000).unwrap();
        assert_eq!(c.name, "alice");
        assert!(!c.admin);
        let (c2, _, _) = login(&m, "alice", &Credential::Token(tok), 60_000).unwrap();
        assert_eq!(c2.uid, c.uid);
        let bad = login(&m, "alice", &Credential::Token([0; 32]), 60_000).unwrap_err();
        assert_eq!(bad.status, MgrStatus::SessionExpired);
        // An expired session is refused.
        let (_, old, _) = login(&m, "alice", &Credential::Password("secret".into()), 0).unwrap();
        let exp = login(&m, "alice", &Credential::Token(old), 60_000).unwrap_err();
        assert_eq!(exp.status, MgrStatus::SessionExpired);
    }
}
