//! Users, credentials and sessions. The store's credential column (`phc`) holds one of:
//! - `$opaque$v1$<credential id hex>$<record hex>`: a password user's OPAQUE password file
//!   ([`crate::login`]); the manager never holds the password or anything it can test a
//!   guess against without its OPAQUE server keys, which live outside the database;
//! - `$enroll$v1$<BLAKE3 hex of the code>$<expires_ms>`: an account waiting for its user to
//!   set a password with the one-time code `user add` (or an admin's reset) gave;
//! - `$ed25519$<hex>`: a key user's Ed25519 public key; they log in by signing
//!   [`login_message`] over a fresh challenge the manager gave this connection (so a
//!   signature is good for one login only);
//! - an Argon2id PHC string: the password hash of an account made before manager protocol 15,
//!   checked once more at its user's next login ([`LoginProof::LegacyPassword`]), after which
//!   their client registers through OPAQUE and the hash is deleted.
//!
//! A successful login returns a random session token whose BLAKE3 hash the store keeps, so later commands (`nasd login` once, then
//! `nasd ls`) authenticate without the credential until it expires, the user logs out
//! ([`logout`]), or their credential changes ([`set_credential`] ends every session).
//!
//! A failed login answers the same whatever failed — an unknown user, a user without a
//! credential of that kind, or a wrong one — and costs the same: a legacy password is always
//! checked against an Argon2id hash ([`dummy_phc`] when there is no real one), an OPAQUE
//! login always answered from a record (a fake one when there is no real one), and a
//! signature always checked against an Ed25519 key. Only the credential kind, which the client
//! chose, shapes the answer ([`PASSWORD_REFUSED`], [`SIGNATURE_REFUSED`], [`TOKEN_REFUSED`]).
//! How often one may fail is [`crate::backoff`]'s business.

use crate::service::Caller;
use crate::store::{MetaStore, S3Key, SessionRecord, StoreError, User};
use crate::{now_ms, MgrError, MgrResult};
use argon2::password_hash::{
    rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString,
};
use argon2::Argon2;
use nasd_proto::manager::{
    login_message, LoginProof, MgrStatus, CHALLENGE_BYTES, PUBLIC_KEY_BYTES, TOKEN_BYTES,
};
use std::sync::{Mutex, OnceLock};

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
/// Longest user or group name (the classic `useradd` limit).
pub const ACCOUNT_NAME_BYTES_MAX: usize = 32;

/// The detail of every refused password login. (Details start with what they concern and
/// `: `, as clients show the rest.)
pub const PASSWORD_REFUSED: &str = "login: unknown user or wrong password";
/// The detail of every refused key login.
pub const SIGNATURE_REFUSED: &str =
    "login: unknown user or wrong key (the signature does not verify)";
/// The detail of every refused token login (unknown, expired, logged out, or ended by a
/// credential change: a token is never half-valid, so which one does not matter).
pub const TOKEN_REFUSED: &str =
    "login: no live session for this token (expired, logged out, or ended by a credential change)";

/// A user or group name: `[a-z_][a-z0-9_.-]*`, at most [`ACCOUNT_NAME_BYTES_MAX`] bytes. Plain
/// ASCII leaves no look-alikes (Cyrillic `а` for `a`, upper case for lower), no spaces, no
/// control characters, nothing a shell or `ls -l` shows differently, and no leading `-` or
/// digit (an option, a uid). Checked where names are made (`user add`, `group add`, `manager
/// init`); names stored before the rule stay usable.
pub fn check_account_name(name: &str) -> MgrResult<()> {
    let b = name.as_bytes();
    let first_ok = matches!(b.first(), Some(b'a'..=b'z' | b'_'));
    let rest_ok = b
        .iter()
        .skip(1)
        .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-'));
    if first_ok && rest_ok && b.len() <= ACCOUNT_NAME_BYTES_MAX {
        return Ok(());
    }
    Err(MgrError::new(
        MgrStatus::BadName,
        format!(
            "{}: user and group names are 1 to {ACCOUNT_NAME_BYTES_MAX} characters of \
             a-z 0-9 _ . -, starting with a letter or _",
            name.escape_debug()
        ),
    ))
}

/// A password given to this host (`manager init`) is of an accepted length.
pub fn check_password(password: &str) -> MgrResult<()> {
    if password.len() < PASSWORD_BYTES_MIN || password.len() > PASSWORD_BYTES_MAX {
        return Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!("passwords are {PASSWORD_BYTES_MIN} to {PASSWORD_BYTES_MAX} bytes"),
        ));
    }
    Ok(())
}

/// An Argon2id PHC string of `password`, as accounts made before manager protocol 15 have
/// (and the dummy every legacy check of an unknown user costs).
pub fn hash_password(password: &str) -> MgrResult<String> {
    check_password(password)?;
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| MgrError::new(MgrStatus::Internal, format!("argon2: {e}")))
}

/// An Argon2id hash of a random password, made with the parameters of [`hash_password`]: what
/// a password is checked against when the user is unknown or has a key instead, so that
/// failure costs what a wrong password costs. Made once, on first use ([`warm_up`]).
pub fn dummy_phc() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        let mut pw = [0u8; 32];
        nasd_crypto::random_bytes(&mut pw);
        hash_password(&hex::encode(pw)).expect("a 64-byte password hashes")
    })
}

/// A valid Ed25519 public key nobody holds the secret of: what a signature is checked against
/// when the user is unknown or has a password instead.
fn dummy_public_key() -> &'static [u8; PUBLIC_KEY_BYTES] {
    static DUMMY: OnceLock<[u8; PUBLIC_KEY_BYTES]> = OnceLock::new();
    DUMMY.get_or_init(|| {
        let mut seed = [0u8; 32];
        nasd_crypto::random_bytes(&mut seed);
        ed25519_dalek::SigningKey::from_bytes(&seed)
            .verifying_key()
            .to_bytes()
    })
}

/// Makes the dummy verifiers before the first login, so that login does not pay for them.
pub fn warm_up() {
    dummy_phc();
    dummy_public_key();
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

/// The public key in a key user's verifier; `None` for a password user.
fn public_key_of(verifier: &str) -> Option<[u8; PUBLIC_KEY_BYTES]> {
    verifier
        .strip_prefix(ED25519_PREFIX)
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| <[u8; PUBLIC_KEY_BYTES]>::try_from(b).ok())
}

/// Whether `sig` signs the login of `user` over `challenge` with `pk`.
fn verify_signature(
    pk: &[u8; PUBLIC_KEY_BYTES],
    user: &str,
    challenge: &[u8; CHALLENGE_BYTES],
    sig: &[u8; 64],
) -> bool {
    let Ok(vk) = ed25519_dalek::VerifyingKey::from_bytes(pk) else {
        return false;
    };
    let sig = ed25519_dalek::Signature::from_bytes(sig);
    vk.verify_strict(&login_message(user, challenge), &sig)
        .is_ok()
}

pub fn token_hash(token: &[u8; TOKEN_BYTES]) -> [u8; 32] {
    *blake3::hash(token).as_bytes()
}

pub(crate) fn db(e: StoreError) -> MgrError {
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
        session: 0,
        via: None,
    })
}

/// A successful login.
#[derive(Debug)]
pub struct LoggedIn {
    pub caller: Caller,
    /// A fresh token, or the one presented.
    pub token: [u8; TOKEN_BYTES],
    pub expires_ms: u64,
    /// The gateway that opened the session for the user, if one did.
    pub via: Option<u32>,
}

/// Longest session a gateway opens for a user (`ActFor`): a gateway holds many users'
/// sessions, so each is short; the gateway asks again when one ends.
pub const DELEGATED_SESSION_TTL_MS: u64 = 60 * 60 * 1000;

/// A session for `user` opened by the gateway `gateway` (which logged in with its own
/// credential: the user's never reaches it). Refused unless `gateway` is marked a gateway,
/// for admins (a gateway cannot gain admin rights), for users without an S3 key, and from a
/// session a gateway opened itself (`via`). The session ends with the gateway's flag, its
/// credential, the user's, or the user's last S3 key; it may send only the calls a gateway
/// serves (`ops::Handle::DELEGATED`).
pub fn act_for(
    store: &Mutex<Box<dyn MetaStore>>,
    gateway: &Caller,
    via: Option<u32>,
    user: &str,
    session_ttl_ms: u64,
) -> MgrResult<LoggedIn> {
    let denied = |why: &str| MgrError::new(MgrStatus::PermissionDenied, why.to_string());
    if via.is_some() {
        return Err(denied("a session a gateway opened cannot act for others"));
    }
    let mut st = store.lock().expect("store lock");
    let g = st
        .user_by_uid(gateway.uid)
        .map_err(db)?
        .ok_or_else(|| denied("the gateway user is gone"))?;
    if !g.gateway {
        return Err(denied(&format!(
            "{} is not a gateway (an admin runs `nasd user gateway {} on`)",
            g.name, g.name
        )));
    }
    let u = st
        .user_by_name(user)
        .map_err(db)?
        .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, user.to_string()))?;
    if u.admin {
        return Err(denied("a gateway does not act for admins"));
    }
    // Only for a user who gave S3 access (issue 21 §6): a gateway's credential alone opens
    // no session for anyone else. Revoking the last key ends such sessions.
    if st.s3_keys_of(u.uid).map_err(db)?.is_empty() {
        return Err(denied(&format!(
            "{user} has no S3 key: a gateway acts only for users with one"
        )));
    }
    let mut token = [0u8; TOKEN_BYTES];
    nasd_crypto::random_bytes(&mut token);
    let now = now_ms();
    let expires_ms = now + session_ttl_ms.min(DELEGATED_SESSION_TTL_MS);
    st.expire_sessions(now).map_err(db)?;
    st.put_session(&SessionRecord {
        token_hash: token_hash(&token),
        uid: u.uid,
        expires_ms,
        via: Some(g.uid),
    })
    .map_err(db)?;
    Ok(LoggedIn {
        caller: caller_of(st.as_ref(), u.uid)?,
        token,
        expires_ms,
        via: Some(g.uid),
    })
}

/// Most S3 access keys one user holds (room to rotate: make a new one, move clients over,
/// revoke the old), so a stolen session cannot mint keys without bound.
pub const S3_KEYS_PER_USER_MAX: usize = 4;
/// Characters of an access key id after its `NASD` prefix (base32: 80 random bits), and of a
/// secret access key (base64: 240 random bits), as AWS's are 20 and 40 long.
const S3_KEY_ID_CHARS: usize = 16;
const S3_SECRET_CHARS: usize = 40;

/// `n` characters of `alphabet` (64 or 32 long) drawn uniformly from the system's RNG.
fn random_chars(alphabet: &[u8], n: usize) -> String {
    debug_assert!(alphabet.len().is_power_of_two() && alphabet.len() <= 256);
    let mut bytes = vec![0u8; n];
    nasd_crypto::random_bytes(&mut bytes);
    let mask = alphabet.len() - 1;
    bytes
        .iter()
        .map(|b| alphabet[*b as usize & mask] as char)
        .collect()
}

/// The user `name`, if `by` is that user or an admin; else `PermissionDenied` with
/// `denied` as the detail.
pub(crate) fn self_or_admin(
    st: &dyn MetaStore,
    by: &Caller,
    name: &str,
    denied: impl FnOnce() -> String,
) -> MgrResult<User> {
    let u = st
        .user_by_name(name)
        .map_err(db)?
        .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, name.to_string()))?;
    if !by.admin && by.uid != u.uid {
        return Err(MgrError::new(MgrStatus::PermissionDenied, denied()));
    }
    Ok(u)
}

/// The user `name`, if `c` may manage their S3 keys (their own, or an admin's for anyone).
fn key_owner(st: &dyn MetaStore, c: &Caller, name: &str) -> MgrResult<User> {
    self_or_admin(st, c, name, || {
        format!("only {name} or an admin manages {name}'s S3 keys")
    })
}

/// A new S3 access key for `name`: its id and secret.
pub fn s3_key_create(
    st: &mut dyn MetaStore,
    c: &Caller,
    name: &str,
) -> MgrResult<(String, nasd_proto::manager::SecretString)> {
    let u = key_owner(st, c, name)?;
    if st.s3_keys_of(u.uid).map_err(db)?.len() >= S3_KEYS_PER_USER_MAX {
        return Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!("{name} has {S3_KEYS_PER_USER_MAX} S3 keys already: revoke one first"),
        ));
    }
    let id = format!(
        "NASD{}",
        random_chars(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", S3_KEY_ID_CHARS)
    );
    let secret = nasd_proto::manager::SecretString(random_chars(
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        S3_SECRET_CHARS,
    ));
    st.put_s3_key(&S3Key {
        access_key_id: id.clone(),
        uid: u.uid,
        secret: secret.clone(),
        created_ms: now_ms(),
    })
    .map_err(db)?;
    Ok((id, secret))
}

/// The ids of `name`'s S3 keys and when each was made.
pub fn s3_key_list(st: &dyn MetaStore, c: &Caller, name: &str) -> MgrResult<Vec<(String, u64)>> {
    let u = key_owner(st, c, name)?;
    Ok(st
        .s3_keys_of(u.uid)
        .map_err(db)?
        .into_iter()
        .map(|k| (k.access_key_id.clone(), k.created_ms))
        .collect())
}

/// Revokes `name`'s key `id`.
pub fn s3_key_revoke(st: &mut dyn MetaStore, c: &Caller, name: &str, id: &str) -> MgrResult<()> {
    let u = key_owner(st, c, name)?;
    if st.delete_s3_key(u.uid, id).map_err(db)? {
        Ok(())
    } else {
        Err(MgrError::new(
            MgrStatus::NoSuchPath,
            format!("{name} has no S3 key {id}"),
        ))
    }
}

/// For a gateway checking a request signed with key `id`: its user and secret. One answer
/// for an unknown key and for a caller that is no gateway is not needed (gateways are
/// trusted), but only they get secrets.
pub fn s3_key_secret(
    st: &dyn MetaStore,
    c: &Caller,
    id: &str,
) -> MgrResult<(String, nasd_proto::manager::SecretString)> {
    let me = st.user_by_uid(c.uid).map_err(db)?;
    if !me.is_some_and(|u| u.gateway) {
        return Err(MgrError::new(
            MgrStatus::PermissionDenied,
            "only a gateway reads S3 secrets",
        ));
    }
    let k = st
        .s3_key(id)
        .map_err(db)?
        .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, format!("no S3 key {id}")))?;
    let u = st
        .user_by_uid(k.uid)
        .map_err(db)?
        .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, format!("no user for {id}")))?;
    Ok((u.name, k.secret.clone()))
}

/// Marks `name` a gateway or not (admins only); turning it off ends the sessions it opened.
pub fn set_gateway(st: &mut dyn MetaStore, name: &str, on: bool) -> MgrResult<()> {
    let u = st
        .user_by_name(name)
        .map_err(db)?
        .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, name.to_string()))?;
    st.set_gateway(u.uid, on).map_err(db)
}

/// The answer to every failed password or key login for `proof`'s kind.
pub fn refused(proof: &LoginProof) -> MgrError {
    match proof {
        LoginProof::LegacyPassword(_) => MgrError::new(MgrStatus::WrongPassword, PASSWORD_REFUSED),
        LoginProof::Signature(_) => MgrError::new(MgrStatus::WrongPassword, SIGNATURE_REFUSED),
        LoginProof::Token(_) => MgrError::new(MgrStatus::SessionExpired, TOKEN_REFUSED),
    }
}

/// Checks a credential and opens (or, for a token, resumes) a session. `challenge` is the one
/// this connection was given (a signature needs it). Every failure is [`refused`], after the
/// same work whether or not the user exists. The password check runs without the store lock
/// held (Argon2 is slow on purpose).
pub fn login(
    store: &Mutex<Box<dyn MetaStore>>,
    user: &str,
    cred: &LoginProof,
    session_ttl_ms: u64,
    challenge: Option<&[u8; CHALLENGE_BYTES]>,
) -> MgrResult<LoggedIn> {
    let known = store
        .lock()
        .expect("store lock")
        .user_by_name(user)
        .map_err(db)?;
    let verifier = known.as_ref().map(|u| u.phc.as_str()).unwrap_or("");
    let ok = match cred {
        LoginProof::LegacyPassword(p) => password_matches(verifier, p),
        LoginProof::Signature(sig) => {
            let Some(ch) = challenge else {
                return Err(MgrError::new(
                    MgrStatus::InvalidArgument,
                    "a key login needs a challenge first",
                ));
            };
            signature_matches(verifier, user, ch, sig)
        }
        LoginProof::Token(t) => return resume_session(store, known.map(|u| u.uid), t),
    };
    match known {
        Some(u) if ok => {
            new_session(store, u.uid, &u.phc, session_ttl_ms)?.ok_or_else(|| refused(cred))
        }
        _ => Err(refused(cred)),
    }
}

/// Whether `password` matches `verifier`; a verifier that is not a password hash (none, or
/// a key) is replaced by [`dummy_phc`], so every answer costs one Argon2id verification.
fn password_matches(verifier: &str, password: &str) -> bool {
    let real = PasswordHash::new(verifier)
        .is_ok_and(|h| h.algorithm == argon2::Algorithm::Argon2id.ident());
    let matched = verify_password(if real { verifier } else { dummy_phc() }, password);
    real && matched
}

/// Whether `sig` signs the login with the key in `verifier`; without a key (no user, or a
/// password user) the signature is checked against [`dummy_public_key`] all the same.
fn signature_matches(
    verifier: &str,
    user: &str,
    challenge: &[u8; CHALLENGE_BYTES],
    sig: &[u8; 64],
) -> bool {
    let pk = public_key_of(verifier);
    let matched = verify_signature(
        pk.as_ref().unwrap_or(dummy_public_key()),
        user,
        challenge,
        sig,
    );
    pk.is_some() && matched
}

/// A token login: the session must exist, belong to `uid` and not have expired.
fn resume_session(
    store: &Mutex<Box<dyn MetaStore>>,
    uid: Option<u32>,
    token: &[u8; TOKEN_BYTES],
) -> MgrResult<LoggedIn> {
    let st = store.lock().expect("store lock");
    let s = st.session(&token_hash(token)).map_err(db)?;
    match (s, uid) {
        (Some(s), Some(uid)) if s.uid == uid && s.expires_ms > now_ms() => Ok(LoggedIn {
            caller: caller_of(st.as_ref(), uid)?,
            token: *token,
            expires_ms: s.expires_ms,
            via: s.via,
        }),
        _ => Err(refused(&LoginProof::Token(*token))),
    }
}

/// Starts a session for `uid`: a fresh random token, its hash stored. `None` when the user's
/// credential is no longer `verified` (changed while it was being checked): a session must
/// never outlive the credential it was opened with, and [`set_credential`] has already ended
/// the sessions it could see.
pub(crate) fn new_session(
    store: &Mutex<Box<dyn MetaStore>>,
    uid: u32,
    verified: &str,
    session_ttl_ms: u64,
) -> MgrResult<Option<LoggedIn>> {
    let mut token = [0u8; TOKEN_BYTES];
    nasd_crypto::random_bytes(&mut token);
    let now = now_ms();
    let expires_ms = now + session_ttl_ms;
    let mut st = store.lock().expect("store lock");
    let current = st.user_by_uid(uid).map_err(db)?;
    if current.map(|u| u.phc).as_deref() != Some(verified) {
        return Ok(None);
    }
    st.expire_sessions(now).map_err(db)?;
    st.put_session(&SessionRecord {
        token_hash: token_hash(&token),
        uid,
        expires_ms,
        via: None,
    })
    .map_err(db)?;
    Ok(Some(LoggedIn {
        caller: caller_of(st.as_ref(), uid)?,
        token,
        expires_ms,
        via: None,
    }))
}

/// Ends the session of `token_hash` (a logout); whether it was live.
pub fn logout(st: &mut dyn MetaStore, token_hash: &[u8; 32]) -> MgrResult<bool> {
    st.delete_session(token_hash).map_err(db)
}

/// Whether the session of `token_hash` is still live for `uid` (checked again on a live
/// connection after any logout or credential change).
pub fn session_live(st: &dyn MetaStore, token_hash: &[u8; 32], uid: u32) -> MgrResult<bool> {
    Ok(st
        .session(token_hash)
        .map_err(db)?
        .is_some_and(|s| s.uid == uid && s.expires_ms > now_ms()))
}

/// The new credential of a `user passwd`: a public key, or a fresh enrollment code (an
/// admin's reset of a password user).
pub enum NewCredential<'a> {
    PublicKey(&'a [u8; PUBLIC_KEY_BYTES]),
    Enrollment(&'a crate::login::EnrollmentCode),
}

/// Sets `name`'s credential on behalf of `by` (the user themself, or an admin) and ends every
/// session of the user, in one store transaction. Returns the user's uid.
pub fn set_credential(
    store: &Mutex<Box<dyn MetaStore>>,
    by: &Caller,
    name: &str,
    new: NewCredential<'_>,
) -> MgrResult<u32> {
    let verifier = match new {
        NewCredential::PublicKey(pk) => key_verifier(pk)?,
        NewCredential::Enrollment(code) => code.verifier(),
    };
    let mut st = store.lock().expect("store lock");
    let u = self_or_admin(st.as_ref(), by, name, || {
        format!("changing the credential of {name}")
    })?;
    st.set_credential(u.uid, &verifier).map_err(db)?;
    Ok(u.uid)
}

/// Adds a password user with `users` (or, for admins, `admin`) as primary group and no
/// password yet: the enrollment code their client sets one with.
pub fn add_user(
    st: &mut dyn MetaStore,
    name: &str,
    admin: bool,
) -> MgrResult<(u32, crate::login::EnrollmentCode)> {
    let code = crate::login::EnrollmentCode::generate(now_ms());
    let uid = add_user_with(st, name, &code.verifier(), admin)?;
    Ok((uid, code))
}

/// Adds an account made before manager protocol 15 (an Argon2id hash of `password`): what
/// tests of the move to OPAQUE start from.
pub fn add_legacy_user(
    st: &mut dyn MetaStore,
    name: &str,
    password: &str,
    admin: bool,
) -> MgrResult<u32> {
    add_user_with(st, name, &hash_password(password)?, admin)
}

/// Adds a password user whose password was given to this host (`nasd manager init`'s first
/// admin): their OPAQUE password file is made here, both halves of the registration run in
/// this process, and the password goes nowhere else.
pub fn add_password_user_here(
    st: &mut dyn MetaStore,
    keys: &nasd_client::opaque::ServerKeys,
    name: &str,
    password: &str,
    admin: bool,
) -> MgrResult<u32> {
    check_password(password)?;
    let verifier = crate::login::register_here(keys, password)?;
    add_user_with(st, name, &verifier, admin)
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
    check_account_name(name)?;
    let gname = if admin { ADMIN_GROUP } else { USERS_GROUP };
    let gid = match st.group_by_name(gname).map_err(db)? {
        Some(g) => g.gid,
        None => st.add_group(gname).map_err(db)?,
    };
    st.add_user(name, phc, admin, gid).map_err(|e| match e {
        StoreError::Exists => MgrError::new(MgrStatus::Exists, format!("user {name}")),
        e => db(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteStore;
    use ed25519_dalek::{Signer, SigningKey};

    fn store() -> Mutex<Box<dyn MetaStore>> {
        Mutex::new(Box::new(SqliteStore::in_memory().unwrap()))
    }

    fn pw(p: &str) -> LoginProof {
        LoginProof::LegacyPassword(p.into())
    }

    fn sign(k: &SigningKey, user: &str, ch: &[u8; 32]) -> LoginProof {
        LoginProof::Signature(k.sign(&login_message(user, ch)).to_bytes())
    }

    #[test]
    fn login_by_password_then_token() {
        let m = store();
        add_legacy_user(m.lock().unwrap().as_mut(), "alice", "secret", false).unwrap();
        let wrong = login(&m, "alice", &pw("nope"), 1000, None).unwrap_err();
        assert_eq!(wrong.status, MgrStatus::WrongPassword);
        let ok = login(&m, "alice", &pw("secret"), 60_000, None).unwrap();
        assert_eq!(ok.caller.name, "alice");
        assert!(!ok.caller.admin);
        let again = login(&m, "alice", &LoginProof::Token(ok.token), 60_000, None).unwrap();
        assert_eq!(again.caller.uid, ok.caller.uid);
        assert_eq!(again.expires_ms, ok.expires_ms);
        let bad = login(&m, "alice", &LoginProof::Token([0; 32]), 60_000, None).unwrap_err();
        assert_eq!(bad.status, MgrStatus::SessionExpired);
        // A token is good only for its own user, and an expired one for nobody.
        add_legacy_user(m.lock().unwrap().as_mut(), "bob", "secret2", false).unwrap();
        let theirs = login(&m, "bob", &LoginProof::Token(ok.token), 60_000, None).unwrap_err();
        assert_eq!(theirs, bad);
        let old = login(&m, "alice", &pw("secret"), 0, None).unwrap();
        let exp = login(&m, "alice", &LoginProof::Token(old.token), 60_000, None).unwrap_err();
        assert_eq!(exp, bad);
        let nobody = login(&m, "zed", &LoginProof::Token(ok.token), 60_000, None).unwrap_err();
        assert_eq!(nobody, bad);
    }

    #[test]
    fn every_failed_login_gets_one_answer_per_credential_kind() {
        let m = store();
        let key = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]);
        {
            let mut st = m.lock().unwrap();
            add_legacy_user(st.as_mut(), "alice", "secret", false).unwrap();
            add_key_user(st.as_mut(), "carol", &key.verifying_key().to_bytes(), false).unwrap();
        }
        let refused_pw = refused(&pw("x"));
        for (user, p) in [("alice", "nope"), ("nobody", "secret"), ("carol", "secret")] {
            assert_eq!(login(&m, user, &pw(p), 1000, None).unwrap_err(), refused_pw);
        }
        let ch = [3u8; CHALLENGE_BYTES];
        let refused_sig = refused(&LoginProof::Signature([0; 64]));
        assert_ne!(refused_sig.detail, refused_pw.detail);
        for (user, k) in [("carol", &other), ("alice", &key), ("nobody", &key)] {
            let e = login(&m, user, &sign(k, user, &ch), 1000, Some(&ch)).unwrap_err();
            assert_eq!(e, refused_sig, "{user}");
        }
        // The answer names neither the user nor whether they exist.
        for e in [&refused_pw, &refused_sig] {
            assert!(!e.detail.contains("alice") && !e.detail.contains("nobody"));
        }
    }

    #[test]
    fn a_password_for_nobody_costs_an_argon2id_check_with_the_real_parameters() {
        let real = hash_password("some password").unwrap();
        let real = PasswordHash::new(&real).unwrap();
        let dummy = PasswordHash::new(dummy_phc()).unwrap();
        assert_eq!(dummy.algorithm, real.algorithm);
        assert_eq!(dummy.algorithm, argon2::Algorithm::Argon2id.ident());
        assert_eq!(dummy.version, real.version);
        assert_eq!(
            argon2::Params::try_from(&dummy).unwrap(),
            argon2::Params::try_from(&real).unwrap()
        );
        // A key user's verifier is never taken for a password hash.
        let kv = key_verifier(&SigningKey::from_bytes(&[1; 32]).verifying_key().to_bytes());
        assert!(!password_matches(&kv.unwrap(), ""));
    }

    #[test]
    fn login_by_signing_the_challenge_and_a_wrong_key_is_refused() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]);
        let m = store();
        add_key_user(
            m.lock().unwrap().as_mut(),
            "carol",
            &key.verifying_key().to_bytes(),
            false,
        )
        .unwrap();
        let ch = [3u8; CHALLENGE_BYTES];
        let ok = login(&m, "carol", &sign(&key, "carol", &ch), 60_000, Some(&ch)).unwrap();
        assert_eq!(ok.caller.name, "carol");
        let wrong = login(&m, "carol", &sign(&other, "carol", &ch), 60_000, Some(&ch));
        assert_eq!(wrong.unwrap_err().status, MgrStatus::WrongPassword);
        // A signature over another challenge (a replay) or without one is refused.
        let old = sign(&key, "carol", &[4; 32]);
        let replay = login(&m, "carol", &old, 60_000, Some(&ch));
        assert_eq!(replay.unwrap_err().status, MgrStatus::WrongPassword);
        assert!(login(&m, "carol", &sign(&key, "carol", &ch), 60_000, None).is_err());
        // No password opens a key user's account.
        let e = login(&m, "carol", &pw(""), 60_000, None).unwrap_err();
        assert_eq!(e.status, MgrStatus::WrongPassword);
    }

    fn admin() -> Caller {
        Caller {
            uid: 0,
            name: "admin".into(),
            admin: true,
            gid: 0,
            groups: vec![0],
            session: 0,
            via: None,
        }
    }

    #[test]
    fn a_new_password_or_key_ends_every_session_and_logout_ends_one() {
        let m = store();
        add_legacy_user(m.lock().unwrap().as_mut(), "alice", "secret", false).unwrap();
        let a = login(&m, "alice", &pw("secret"), 60_000, None).unwrap();
        let b = login(&m, "alice", &pw("secret"), 60_000, None).unwrap();
        let live = |t: &[u8; 32]| {
            session_live(m.lock().unwrap().as_ref(), &token_hash(t), a.caller.uid).unwrap()
        };
        assert!(live(&a.token) && live(&b.token));
        // Logout ends one session.
        assert!(logout(m.lock().unwrap().as_mut(), &token_hash(&a.token)).unwrap());
        assert!(!live(&a.token) && live(&b.token));
        let e = login(&m, "alice", &LoginProof::Token(a.token), 60_000, None).unwrap_err();
        assert_eq!(e.status, MgrStatus::SessionExpired);
        // A reset to an enrollment code ends them all; the old password logs in no more.
        let code = crate::login::EnrollmentCode::generate(now_ms());
        set_credential(&m, &a.caller, "alice", NewCredential::Enrollment(&code)).unwrap();
        assert!(!live(&b.token));
        assert!(login(&m, "alice", &pw("secret"), 60_000, None).is_err());
        add_legacy_user(m.lock().unwrap().as_mut(), "alice2", "other", false).unwrap();
        let c = login(&m, "alice2", &pw("other"), 60_000, None).unwrap();
        // So does a key change, made by an admin.
        let key = SigningKey::from_bytes(&[5; 32]);
        let pk = key.verifying_key().to_bytes();
        let live2 = |t: &[u8; 32]| {
            session_live(m.lock().unwrap().as_ref(), &token_hash(t), c.caller.uid).unwrap()
        };
        assert!(live2(&c.token));
        set_credential(&m, &admin(), "alice2", NewCredential::PublicKey(&pk)).unwrap();
        assert!(!live2(&c.token));
        let ch = [1u8; 32];
        login(&m, "alice2", &sign(&key, "alice2", &ch), 60_000, Some(&ch)).unwrap();
        // Nobody changes another user's credential but an admin.
        add_legacy_user(m.lock().unwrap().as_mut(), "bob", "secret", false).unwrap();
        let e = set_credential(&m, &c.caller, "bob", NewCredential::Enrollment(&code));
        assert_eq!(e.unwrap_err().status, MgrStatus::PermissionDenied);
    }

    #[test]
    fn a_session_is_not_opened_on_a_credential_that_changed_while_it_was_checked() {
        let m = store();
        add_legacy_user(m.lock().unwrap().as_mut(), "alice", "secret", false).unwrap();
        let verified = m.lock().unwrap().user_by_name("alice").unwrap().unwrap();
        let code = crate::login::EnrollmentCode::generate(now_ms());
        set_credential(&m, &admin(), "alice", NewCredential::Enrollment(&code)).unwrap();
        let s = new_session(&m, verified.uid, &verified.phc, 60_000).unwrap();
        assert!(s.is_none());
    }

    #[test]
    fn account_names_are_a_safe_ascii_set() {
        for ok in ["alice", "_svc", "bob.smith", "web-1", "a", &"x".repeat(32)] {
            check_account_name(ok).unwrap();
        }
        for bad in [
            "",
            "Alice",
            "bad name",
            "a\nb",
            "tab\t",
            "\u{430}dmin",
            "-rf",
            "1abc",
            "a/b",
            "caf\u{e9}",
            "x\u{1b}[31m",
            &"x".repeat(33),
        ] {
            let e = check_account_name(bad).unwrap_err();
            assert_eq!(e.status, MgrStatus::BadName, "{bad:?}");
            assert!(!e.detail.contains('\n') && !e.detail.contains('\u{1b}'));
        }
        let mut st = SqliteStore::in_memory().unwrap();
        let e = add_legacy_user(&mut st, "Bad Name", "secret", false).unwrap_err();
        assert_eq!(e.status, MgrStatus::BadName);
    }
}
