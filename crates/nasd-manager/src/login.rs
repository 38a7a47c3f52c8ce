//! Password logins without passwords (issue 21 §2): OPAQUE (RFC 9807) at the manager, the
//! enrollment codes new accounts set their password with, and the manager's OPAQUE server
//! keys. The client's half and the cipher suite are `nasd_client::opaque`.
//!
//! What the manager keeps for a password user is their OPAQUE record and a random credential
//! id (the store's credential column: `$opaque$v1$<id hex>$<record hex>`). The record alone
//! tests no password guess: that takes the OPRF key, derived from the seed in the server
//! keys' file (`DIR/keys/opaque.key`, 0600, outside the database). Whoever holds both can
//! guess offline at one Argon2id run of the suite's parameters per guess.
//!
//! A registration gets a fresh credential id, so the OPRF key a registration evaluates is
//! never the one the current record was made under: a `RegisterStart` is no oracle against
//! the current password. Before login a registration needs the account's enrollment code
//! (`$enroll$v1$<BLAKE3 hex of the code>$<expires_ms>`), checked in constant time, which the
//! registration then replaces; from a session, only the session's own user may register.
//!
//! Logins: `OpaqueLoginStart` answers KE2 from the user's record, or from a fake record for
//! an unknown user, a key user, an account still enrolling or one with a legacy hash, so the
//! answer is the same shape and costs the same; `OpaqueLoginFinish` checks KE3 and opens a
//! session only if the record is still the one the login started from.

use crate::service::Caller;
use crate::store::MetaStore;
use crate::users::{db, new_session, LoggedIn, PASSWORD_REFUSED};
use crate::{MgrError, MgrResult};
use nasd_client::opaque::{OpaqueError, ServerKeys, ServerLoginState, CREDENTIAL_ID_BYTES};
use nasd_crypto::seal::KeySeal;
use nasd_proto::manager::{
    MgrStatus, SecretString, OPAQUE_KE1_BYTES, OPAQUE_KE3_BYTES, OPAQUE_REGISTRATION_REQUEST_BYTES,
    OPAQUE_REGISTRATION_UPLOAD_BYTES,
};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use zeroize::Zeroizing;

/// How an OPAQUE password file starts in the store's credential column.
pub const OPAQUE_PREFIX: &str = "$opaque$v1$";
/// How an account waiting for its enrollment starts in the store's credential column.
pub const ENROLL_PREFIX: &str = "$enroll$v1$";
/// How long an enrollment code may be used: a week, for the code to reach its user.
pub const ENROLLMENT_TTL_MS: u64 = 7 * 24 * 3600 * 1000;
/// Random bytes in an enrollment code (160 bits: no guessing, whatever the rate).
const ENROLLMENT_CODE_RANDOM_BYTES: usize = 20;
/// The detail of every refused enrollment: unknown user, wrong code, code expired or used.
pub const ENROLLMENT_REFUSED: &str = "enroll: unknown user or wrong, used or expired code";
/// The server keys' file in the manager's directory.
pub const KEY_FILE: &str = "keys/opaque.key";
const KEY_FILE_HEADER: &str = "nasd opaque server keys v1";
/// The first line of a key file sealed under the manager's passphrase (issue 21 §8).
const KEY_FILE_HEADER_SEALED: &str = "nasd opaque server keys v1 sealed";
/// The seal slot of the OPAQUE server keys.
const KEY_FILE_SLOT: &str = "manager opaque server keys";

/// A one-time enrollment code: what `user add` shows once, and the store keeps the hash of.
pub struct EnrollmentCode {
    pub code: SecretString,
    pub expires_ms: u64,
}

impl EnrollmentCode {
    /// A fresh code: 160 random bits as 32 base32 characters in groups of four.
    pub fn generate(now_ms: u64) -> EnrollmentCode {
        let mut raw = Zeroizing::new([0u8; ENROLLMENT_CODE_RANDOM_BYTES]);
        nasd_crypto::random_bytes(raw.as_mut());
        const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
        let mut bits = 0u32;
        let mut n = 0;
        let mut chars = String::with_capacity(40);
        for b in raw.iter() {
            bits = bits << 8 | *b as u32;
            n += 8;
            while n >= 5 {
                n -= 5;
                if !chars.is_empty() && chars.len() % 5 == 4 {
                    chars.push('-');
                }
                chars.push(ALPHABET[(bits >> n & 31) as usize] as char);
            }
        }
        EnrollmentCode {
            code: SecretString(chars),
            expires_ms: now_ms + ENROLLMENT_TTL_MS,
        }
    }

    /// What the store keeps: the code's BLAKE3 hash and when it expires.
    pub fn verifier(&self) -> String {
        format!(
            "{ENROLL_PREFIX}{}${}",
            hex::encode(code_hash(&self.code)),
            self.expires_ms
        )
    }
}

/// A code as the store hashes it: what the user typed, without separators or case.
fn code_hash(code: &str) -> [u8; 32] {
    let norm: Zeroizing<String> = Zeroizing::new(
        code.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_uppercase())
            .collect(),
    );
    *blake3::hash(norm.as_bytes()).as_bytes()
}

/// Whether `code` is the live code of `verifier` at `now_ms` (constant time in the hash).
fn enrollment_matches(verifier: &str, code: &str, now_ms: u64) -> bool {
    let Some(rest) = verifier.strip_prefix(ENROLL_PREFIX) else {
        return false;
    };
    let Some((hash, expires)) = rest.split_once('$') else {
        return false;
    };
    let (Ok(hash), Ok(expires)) = (hex::decode(hash), expires.parse::<u64>()) else {
        return false;
    };
    let given = code_hash(code);
    use subtle::ConstantTimeEq;
    hash.len() == 32 && bool::from(given.ct_eq(&hash[..])) && now_ms < expires
}

/// The credential id and record of an OPAQUE verifier.
fn record_of(verifier: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let rest = verifier.strip_prefix(OPAQUE_PREFIX)?;
    let (id, record) = rest.split_once('$')?;
    Some((hex::decode(id).ok()?, hex::decode(record).ok()?))
}

fn verifier_of(credential_id: &[u8], upload: &[u8]) -> String {
    format!(
        "{OPAQUE_PREFIX}{}${}",
        hex::encode(credential_id),
        hex::encode(upload)
    )
}

fn fresh_credential_id() -> [u8; CREDENTIAL_ID_BYTES] {
    let mut id = [0u8; CREDENTIAL_ID_BYTES];
    nasd_crypto::random_bytes(&mut id);
    id
}

/// A password file for `password` made on this host (`manager init`): the verifier to store.
pub fn register_here(keys: &ServerKeys, password: &str) -> MgrResult<String> {
    let id = fresh_credential_id();
    let (upload, _) = nasd_client::opaque::register_locally(keys, &id, password.as_bytes())
        .map_err(|e| MgrError::new(MgrStatus::Internal, format!("OPAQUE registration: {e}")))?;
    Ok(verifier_of(&id, &upload))
}

fn refused() -> MgrError {
    MgrError::new(MgrStatus::WrongPassword, PASSWORD_REFUSED)
}

/// A login between KE2 and KE3.
pub struct PendingLogin {
    user: String,
    /// The user and the verifier the login started from (`None`: no password file).
    known: Option<(u32, String)>,
    state: ServerLoginState,
}

/// KE2 for `user`'s KE1, from their record or a fake one (module docs).
pub fn login_start(
    store: &Mutex<Box<dyn MetaStore>>,
    keys: &ServerKeys,
    user: &str,
    ke1: &[u8; OPAQUE_KE1_BYTES],
) -> MgrResult<(Vec<u8>, PendingLogin)> {
    let u = store
        .lock()
        .expect("store lock")
        .user_by_name(user)
        .map_err(db)?;
    let real = u
        .as_ref()
        .and_then(|u| record_of(&u.phc).map(|r| (u.uid, u.phc.clone(), r)));
    let (record, id, known) = match &real {
        Some((uid, phc, (id, record))) => (Some(&record[..]), &id[..], Some((*uid, phc.clone()))),
        None => (None, user.as_bytes(), None),
    };
    let (ke2, state) = keys.login_start(record, id, ke1).map_err(|e| match e {
        OpaqueError::Refused => refused(),
        e => MgrError::new(MgrStatus::Malformed, format!("login: {e}")),
    })?;
    Ok((
        ke2,
        PendingLogin {
            user: user.to_string(),
            known,
            state,
        },
    ))
}

impl PendingLogin {
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Checks KE3 and opens a session; every failure is the one answer of a refused
    /// password login.
    pub fn finish(
        self,
        store: &Mutex<Box<dyn MetaStore>>,
        ke3: &[u8; OPAQUE_KE3_BYTES],
        session_ttl_ms: u64,
    ) -> MgrResult<LoggedIn> {
        let ok = self.state.finish(ke3).is_ok();
        match self.known {
            Some((uid, verifier)) if ok => {
                new_session(store, uid, &verifier, session_ttl_ms)?.ok_or_else(refused)
            }
            _ => Err(refused()),
        }
    }
}

/// A registration between its response and its upload.
pub struct PendingRegistration {
    pub uid: u32,
    pub user: String,
    credential_id: [u8; CREDENTIAL_ID_BYTES],
    /// The credential the registration replaces; it must still be there at the finish.
    previous: String,
    /// Whether it was authorized by an enrollment code (before login).
    pub enrolling: bool,
}

/// Starts a registration for `user`: before login (`by` is `None`) with their enrollment
/// `code`, or from `by`'s own session (a password change). Returns the registration response.
pub fn register_start(
    store: &Mutex<Box<dyn MetaStore>>,
    keys: &ServerKeys,
    by: Option<&Caller>,
    user: &str,
    request: &[u8; OPAQUE_REGISTRATION_REQUEST_BYTES],
    code: Option<&str>,
    now_ms: u64,
) -> MgrResult<(Vec<u8>, PendingRegistration)> {
    let u = store
        .lock()
        .expect("store lock")
        .user_by_name(user)
        .map_err(db)?;
    let enroll_refused = || MgrError::new(MgrStatus::WrongPassword, ENROLLMENT_REFUSED);
    let u = match (by, code) {
        (None, Some(code)) => {
            // The same work whether or not the user exists.
            let verifier = u.as_ref().map_or("", |u| u.phc.as_str());
            let ok = enrollment_matches(verifier, code, now_ms);
            match u {
                Some(u) if ok => u,
                _ => return Err(enroll_refused()),
            }
        }
        (None, None) => {
            return Err(MgrError::new(
                MgrStatus::NotLoggedIn,
                "register: log in first, or give the enrollment code",
            ))
        }
        (Some(c), _) => {
            if c.via.is_some() {
                return Err(MgrError::new(
                    MgrStatus::PermissionDenied,
                    "a session a gateway opened cannot change credentials",
                ));
            }
            match u {
                Some(u) if u.uid == c.uid => u,
                _ => {
                    return Err(MgrError::new(
                        MgrStatus::PermissionDenied,
                        format!("{user}: a user registers only their own password (an admin resets it with `nasd user passwd`)"),
                    ))
                }
            }
        }
    };
    let credential_id = fresh_credential_id();
    let response = keys
        .register(&credential_id, request)
        .map_err(|e| MgrError::new(MgrStatus::Malformed, format!("register: {e}")))?;
    Ok((
        response,
        PendingRegistration {
            uid: u.uid,
            user: u.name,
            credential_id,
            previous: u.phc,
            enrolling: by.is_none(),
        },
    ))
}

impl PendingRegistration {
    /// Stores the password file (and, when given, the seed sealed under its export key's
    /// key) in place of the credential the registration started from, ending every session
    /// of the user in the same transaction.
    pub fn finish(
        self,
        store: &Mutex<Box<dyn MetaStore>>,
        upload: &[u8; OPAQUE_REGISTRATION_UPLOAD_BYTES],
        sealed: &[u8],
    ) -> MgrResult<()> {
        nasd_client::opaque::check_upload(upload)
            .map_err(|e| MgrError::new(MgrStatus::Malformed, format!("register: {e}")))?;
        if sealed.len() > nasd_proto::e2e::SEALED_SECRET_BYTES_MAX {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                "sealed secret too long",
            ));
        }
        let verifier = verifier_of(&self.credential_id, upload);
        let mut st = store.lock().expect("store lock");
        let now = st.user_by_uid(self.uid).map_err(db)?;
        if now.map(|u| u.phc).as_deref() != Some(self.previous.as_str()) {
            return Err(MgrError::new(
                MgrStatus::Conflict,
                format!(
                    "{}: the credential changed meanwhile; start again",
                    self.user
                ),
            ));
        }
        let sealed = (!sealed.is_empty()).then_some(sealed);
        st.set_password_file(self.uid, &verifier, sealed)
            .map_err(db)
    }
}

/// The server keys of the manager in `dir`, made (and written 0600 under a 0700 `keys/`) the
/// first time. With `seal` (a manager whose keys are sealed, issue 21 §8) the file is kept
/// sealed under it; one found in clear is sealed now (a seal interrupted).
pub fn load_or_make_keys(dir: &Path, seal: Option<&KeySeal>) -> MgrResult<ServerKeys> {
    if let Some(s) = seal {
        settle_staged_keys(dir, s)?;
    }
    let path = key_path(dir);
    let io = |what: &str, e: String| {
        MgrError::new(
            MgrStatus::Internal,
            format!("{what} {}: {e}", path.display()),
        )
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => Zeroizing::new(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let keys = ServerKeys::generate();
            let dir_path = path.parent().expect("the key file is in keys/");
            nasd_private::create_dir(dir_path)
                .map_err(|e| io("making the directory of", e.to_string()))?;
            write_keys(&path, &keys, seal)?;
            return Ok(keys);
        }
        Err(e) => return Err(io("reading", e.to_string())),
    };
    let (first, rest) = text.split_once('\n').unwrap_or((text.as_str(), ""));
    let bytes = Zeroizing::new(hex::decode(rest.trim()).map_err(|e| io("reading", e.to_string()))?);
    let clear = match (first.trim(), seal) {
        (KEY_FILE_HEADER, _) => bytes,
        (KEY_FILE_HEADER_SEALED, Some(s)) => {
            s.open_bytes(KEY_FILE_SLOT, &bytes).ok_or_else(|| {
                io(
                    "opening",
                    "it does not open under the manager's seal".into(),
                )
            })?
        }
        (KEY_FILE_HEADER_SEALED, None) => {
            return Err(io(
                "reading",
                "it is sealed, and the manager's store has no seal header".into(),
            ))
        }
        _ => return Err(io("reading", "not an OPAQUE server keys file".into())),
    };
    let keys = ServerKeys::from_bytes(&clear).map_err(|e| io("reading", e.to_string()))?;
    if let (KEY_FILE_HEADER, Some(_)) = (first.trim(), seal) {
        write_keys(&path, &keys, seal)?;
    }
    Ok(keys)
}

/// Where a passphrase change keeps the key file sealed under the new passphrase until the
/// store has taken the new seal (`setup::change_passphrase`).
pub fn staged_key_path(dir: &Path) -> PathBuf {
    key_path(dir).with_extension("key.next")
}

/// Writes `keys` sealed under `seal` as the staged key file ([`staged_key_path`]): whole and
/// durable before it returns, the current key file untouched.
pub fn stage_keys(dir: &Path, keys: &ServerKeys, seal: &KeySeal) -> MgrResult<()> {
    write_keys(&staged_key_path(dir), keys, Some(seal))
}

/// Makes the staged key file the key file: a rename, durable before it returns.
pub fn commit_staged_keys(dir: &Path) -> MgrResult<()> {
    let (from, to) = (staged_key_path(dir), key_path(dir));
    std::fs::rename(&from, &to)
        .and_then(|()| sync_parent(&to))
        .map_err(|e| {
            MgrError::new(
                MgrStatus::Internal,
                format!("renaming {} to {}: {e}", from.display(), to.display()),
            )
        })
}

/// A staged key file a passphrase change left behind (it stopped between its steps): made the
/// key file when it opens under `seal`, the store's seal (the store took the new seal, so the
/// change had committed), removed otherwise (the change had not committed).
fn settle_staged_keys(dir: &Path, seal: &KeySeal) -> MgrResult<()> {
    let staged = staged_key_path(dir);
    let text = match std::fs::read_to_string(&staged) {
        Ok(t) => Zeroizing::new(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(MgrError::new(
                MgrStatus::Internal,
                format!("reading {}: {e}", staged.display()),
            ))
        }
    };
    let opens = match text.split_once('\n') {
        Some((KEY_FILE_HEADER_SEALED, rest)) => hex::decode(rest.trim())
            .ok()
            .and_then(|b| seal.open_bytes(KEY_FILE_SLOT, &b))
            .is_some(),
        _ => false,
    };
    if opens {
        tracing::info!("finishing a passphrase change: the key file sealed under the new passphrase goes in place");
        return commit_staged_keys(dir);
    }
    tracing::info!(
        "dropping {}: a passphrase change that did not commit",
        staged.display()
    );
    std::fs::remove_file(&staged).map_err(|e| {
        MgrError::new(
            MgrStatus::Internal,
            format!("removing {}: {e}", staged.display()),
        )
    })
}

/// Syncs the directory holding `path`, so a rename into it survives a power failure.
fn sync_parent(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

/// Writes the key file, sealed under `seal` when given: under a new name, synced, renamed
/// over the old one (the directory synced), so a crash leaves one whole file.
fn write_keys(path: &Path, keys: &ServerKeys, seal: Option<&KeySeal>) -> MgrResult<()> {
    let text = Zeroizing::new(match seal {
        Some(s) => format!(
            "{KEY_FILE_HEADER_SEALED}\n{}\n",
            hex::encode(s.seal_bytes(KEY_FILE_SLOT, &keys.to_bytes()))
        ),
        None => format!("{KEY_FILE_HEADER}\n{}\n", hex::encode(&*keys.to_bytes())),
    });
    let tmp = path.with_extension("key.new");
    let io = |e: String| {
        MgrError::new(
            MgrStatus::Internal,
            format!("writing {}: {e}", path.display()),
        )
    };
    nasd_private::write_file(&tmp, text.as_bytes()).map_err(|e| io(e.to_string()))?;
    std::fs::rename(&tmp, path)
        .and_then(|()| sync_parent(path))
        .map_err(|e| io(e.to_string()))
}

/// Where the server keys of the manager in `dir` are.
pub fn key_path(dir: &Path) -> PathBuf {
    dir.join(KEY_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enrollment_codes_match_once_typed_in_any_case_and_only_while_live() {
        let c = EnrollmentCode::generate(1000);
        assert_eq!(c.code.len(), 39, "{:?}", &*c.code);
        let v = c.verifier();
        assert!(!v.contains(&*c.code));
        assert!(enrollment_matches(&v, &c.code, 1001));
        assert!(enrollment_matches(
            &v,
            &c.code.to_lowercase().replace('-', " "),
            1001
        ));
        assert!(!enrollment_matches(&v, &c.code, c.expires_ms));
        let other = EnrollmentCode::generate(1000);
        assert!(!enrollment_matches(&v, &other.code, 1001));
        assert!(!enrollment_matches("$argon2id$x", &c.code, 1001));
        assert!(!enrollment_matches("", "", 0));
    }

    #[test]
    fn the_key_file_is_made_once_private_and_read_back() {
        let t = tempfile::tempdir().unwrap();
        let a = load_or_make_keys(t.path(), None).unwrap();
        let b = load_or_make_keys(t.path(), None).unwrap();
        assert_eq!(*a.to_bytes(), *b.to_bytes());
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&key_path(t.path())), 0o600);
        assert_eq!(mode(&t.path().join("keys")), 0o700);
    }

    #[test]
    fn a_sealed_key_file_holds_no_key_in_clear_and_opens_only_under_its_seal() {
        let t = tempfile::tempdir().unwrap();
        let a = load_or_make_keys(t.path(), None).unwrap();
        let clear = hex::encode(&*a.to_bytes());
        let seal = KeySeal::create_with_cost(b"pw", 8, 1).unwrap();
        // A key file in clear is sealed at the first load under a seal.
        let b = load_or_make_keys(t.path(), Some(&seal)).unwrap();
        assert_eq!(*a.to_bytes(), *b.to_bytes());
        let text = std::fs::read_to_string(key_path(t.path())).unwrap();
        assert!(text.starts_with(KEY_FILE_HEADER_SEALED) && !text.contains(&clear));
        let e = load_or_make_keys(t.path(), None).unwrap_err();
        assert!(e.to_string().contains("sealed"), "{e}");
        let other = KeySeal::create_with_cost(b"other", 8, 1).unwrap();
        let e = load_or_make_keys(t.path(), Some(&other)).unwrap_err();
        assert!(e.to_string().contains("does not open"), "{e}");
        let c = load_or_make_keys(t.path(), Some(&seal)).unwrap();
        assert_eq!(*a.to_bytes(), *c.to_bytes());
    }

    /// A passphrase change that stopped between its steps (`setup::change_passphrase`) leaves
    /// the key file opening under whichever seal the store holds: before the store took the
    /// new seal, the staged file is dropped; after, it goes in place.
    #[test]
    fn a_passphrase_change_cut_short_leaves_the_key_file_under_the_stores_seal() {
        let t = tempfile::tempdir().unwrap();
        let old = KeySeal::create_with_cost(b"old", 8, 1).unwrap();
        let new = KeySeal::create_with_cost(b"new", 8, 1).unwrap();
        let keys = load_or_make_keys(t.path(), Some(&old)).unwrap();
        let staged = staged_key_path(t.path());
        // Cut short before the store's commit: the store still holds the old seal.
        stage_keys(t.path(), &keys, &new).unwrap();
        assert!(staged.exists());
        let back = load_or_make_keys(t.path(), Some(&old)).unwrap();
        assert_eq!(*back.to_bytes(), *keys.to_bytes());
        assert!(!staged.exists(), "the uncommitted change's file is dropped");
        assert!(load_or_make_keys(t.path(), Some(&new)).is_err());
        // Cut short after it: the store holds the new seal, the key file is still the old's.
        stage_keys(t.path(), &keys, &new).unwrap();
        let back = load_or_make_keys(t.path(), Some(&new)).unwrap();
        assert_eq!(*back.to_bytes(), *keys.to_bytes());
        assert!(!staged.exists(), "the committed change's file is in place");
        assert!(load_or_make_keys(t.path(), Some(&old)).is_err());
        // Finished: nothing staged, the new seal opens it.
        commit_staged_keys(t.path()).unwrap_err();
        let again = load_or_make_keys(t.path(), Some(&new)).unwrap();
        assert_eq!(*again.to_bytes(), *keys.to_bytes());
    }
}

#[cfg(test)]
mod flow_tests {
    use super::*;
    use crate::sqlite::SqliteStore;
    use nasd_client::opaque::{client_login_start, client_register_start};

    fn store() -> Mutex<Box<dyn MetaStore>> {
        Mutex::new(Box::new(SqliteStore::in_memory().unwrap()))
    }

    fn login(
        m: &Mutex<Box<dyn MetaStore>>,
        keys: &ServerKeys,
        user: &str,
        pw: &str,
    ) -> MgrResult<LoggedIn> {
        let c = client_login_start(pw.as_bytes()).unwrap();
        let (ke2, pending) = login_start(m, keys, user, &c.message)?;
        match c.finish(pw.as_bytes(), &ke2) {
            Ok((ke3, _)) => pending.finish(m, &ke3, 60_000),
            // The client stops; a KE3 of garbage gets the server's answer to compare.
            Err(_) => pending.finish(m, &[0; OPAQUE_KE3_BYTES], 60_000),
        }
    }

    fn enroll(
        m: &Mutex<Box<dyn MetaStore>>,
        keys: &ServerKeys,
        user: &str,
        code: &str,
        pw: &str,
    ) -> MgrResult<()> {
        let c = client_register_start(pw.as_bytes()).unwrap();
        let (resp, pending) =
            register_start(m, keys, None, user, &c.message, Some(code), crate::now_ms())?;
        let (upload, _) = c.finish(pw.as_bytes(), &resp).unwrap();
        pending.finish(m, &upload, &[])
    }

    #[test]
    fn an_enrolled_user_logs_in_and_every_failure_answers_alike() {
        let (m, keys) = (store(), ServerKeys::generate());
        let (_, code) = crate::users::add_user(m.lock().unwrap().as_mut(), "alice", false).unwrap();
        // No password before enrollment; a wrong code enrolls nothing.
        let refused_login = login(&m, &keys, "alice", "pw").unwrap_err();
        assert_eq!(refused_login, refused());
        let e = enroll(&m, &keys, "alice", "WRONG-CODE", "pw").unwrap_err();
        assert_eq!(e.detail, ENROLLMENT_REFUSED);
        assert_eq!(
            enroll(&m, &keys, "nobody", &code.code, "pw").unwrap_err(),
            e
        );
        enroll(&m, &keys, "alice", &code.code, "correct horse").unwrap();
        assert_eq!(
            enroll(&m, &keys, "alice", &code.code, "again").unwrap_err(),
            e,
            "used once"
        );
        let ok = login(&m, &keys, "alice", "correct horse").unwrap();
        assert_eq!(ok.caller.name, "alice");
        // The store holds the record, never the password.
        let phc = m
            .lock()
            .unwrap()
            .user_by_name("alice")
            .unwrap()
            .unwrap()
            .phc;
        assert!(phc.starts_with(OPAQUE_PREFIX) && !phc.contains("correct"));
        // Wrong password, unknown user, legacy and key users: one answer.
        crate::users::add_legacy_user(m.lock().unwrap().as_mut(), "old", "secret", false).unwrap();
        for (u, p) in [("alice", "wrong"), ("nobody", "x"), ("old", "secret")] {
            assert_eq!(login(&m, &keys, u, p).unwrap_err(), refused(), "{u}");
        }
        // Another server's keys (the database alone) confirm not even the right password.
        let other = ServerKeys::generate();
        assert_eq!(
            login(&m, &other, "alice", "correct horse").unwrap_err(),
            refused()
        );
    }

    #[test]
    fn a_password_change_is_the_user_s_own_and_a_registration_evaluates_a_fresh_key() {
        let (m, keys) = (store(), ServerKeys::generate());
        let (_, code) = crate::users::add_user(m.lock().unwrap().as_mut(), "alice", false).unwrap();
        enroll(&m, &keys, "alice", &code.code, "one").unwrap();
        let me = login(&m, &keys, "alice", "one").unwrap().caller;
        let (_, bcode) = crate::users::add_user(m.lock().unwrap().as_mut(), "bob", false).unwrap();
        enroll(&m, &keys, "bob", &bcode.code, "bobs").unwrap();
        let c = client_register_start(b"two").unwrap();
        let e = register_start(&m, &keys, Some(&me), "bob", &c.message, None, 0)
            .err()
            .unwrap();
        assert_eq!(e.status, MgrStatus::PermissionDenied);
        // The same request evaluated twice gets two answers: each registration its own key.
        let (r1, _) = register_start(&m, &keys, Some(&me), "alice", &c.message, None, 0).unwrap();
        let (r2, p2) = register_start(&m, &keys, Some(&me), "alice", &c.message, None, 0).unwrap();
        assert_ne!(r1[..32], r2[..32]);
        let (upload, _) = c.finish(b"two", &r2).unwrap();
        p2.finish(&m, &upload, &[]).unwrap();
        assert_eq!(login(&m, &keys, "alice", "one").unwrap_err(), refused());
        login(&m, &keys, "alice", "two").unwrap();
    }
}
