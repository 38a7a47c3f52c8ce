//! Ed25519 user keys: the key pair a user logs in with instead of a password. The manager keeps
//! only the public key; the client signs `nasd_proto::manager::login_message` over the
//! manager's per-connection challenge.
//!
//! Files (text, version 1): the secret key file, written 0600,
//! ```text
//! nasd ed25519 secret key v1
//! <64 hex digits: the 32-byte seed>
//! ```
//! and the public key file beside it (`FILE.pub`),
//! ```text
//! nasd ed25519 public key v1
//! <64 hex digits: the 32-byte public key>
//! ```

use crate::auth::write_secret_file;
use crate::ClientError;
use ed25519_dalek::{Signer, SigningKey};
use nasd_crypto::Key;
use nasd_proto::manager::{login_message, CHALLENGE_BYTES, PUBLIC_KEY_BYTES, SIGNATURE_BYTES};
use std::path::{Path, PathBuf};

pub const SECRET_HEADER: &str = "nasd ed25519 secret key v1";
pub const PUBLIC_HEADER: &str = "nasd ed25519 public key v1";

fn key_err(path: &Path, detail: impl Into<String>) -> ClientError {
    ClientError::KeyFile {
        path: path.display().to_string(),
        detail: detail.into(),
    }
}

/// The public key of a secret seed.
pub fn public_of(seed: &Key) -> [u8; PUBLIC_KEY_BYTES] {
    SigningKey::from_bytes(seed.expose())
        .verifying_key()
        .to_bytes()
}

/// The signature that logs `user` in over `challenge`.
pub fn sign_login(
    seed: &Key,
    user: &str,
    challenge: &[u8; CHALLENGE_BYTES],
) -> [u8; SIGNATURE_BYTES] {
    SigningKey::from_bytes(seed.expose())
        .sign(&login_message(user, challenge))
        .to_bytes()
}

/// Where the public key of the secret key file `path` goes.
pub fn public_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".pub");
    PathBuf::from(p)
}

/// Makes a fresh key pair: the secret key to `path` (0600), the public key to `path.pub`.
pub fn generate(path: &Path) -> Result<[u8; PUBLIC_KEY_BYTES], ClientError> {
    let seed = Key::generate();
    let secret = format!("{SECRET_HEADER}\n{}\n", hex::encode(seed.expose()));
    write_secret_file(path, secret.as_bytes())?;
    let pk = public_of(&seed);
    let pub_path = public_path(path);
    std::fs::write(&pub_path, format!("{PUBLIC_HEADER}\n{}\n", hex::encode(pk))).map_err(
        |source| ClientError::Io {
            what: format!("writing {}", pub_path.display()),
            source,
        },
    )?;
    Ok(pk)
}

fn read_hex32(path: &Path, header: &str) -> Result<[u8; 32], ClientError> {
    let text = std::fs::read_to_string(path).map_err(|e| key_err(path, e.to_string()))?;
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some(header) {
        return Err(key_err(path, format!("does not start with {header:?}")));
    }
    let bytes = lines
        .next()
        .and_then(|l| hex::decode(l.trim()).ok())
        .ok_or_else(|| key_err(path, "second line is not hex"))?;
    bytes
        .try_into()
        .map_err(|_| key_err(path, "the key is not 32 bytes"))
}

/// Reads a secret key file.
pub fn read_secret(path: &Path) -> Result<Key, ClientError> {
    read_hex32(path, SECRET_HEADER).map(Key::from_bytes)
}

/// Reads a public key file.
pub fn read_public(path: &Path) -> Result<[u8; PUBLIC_KEY_BYTES], ClientError> {
    read_hex32(path, PUBLIC_HEADER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_round_trip_and_the_secret_is_private() {
        let dir = std::env::temp_dir().join(format!("nasd-userkey-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("me.key");
        let pk = generate(&p).unwrap();
        let seed = read_secret(&p).unwrap();
        assert_eq!(public_of(&seed), pk);
        assert_eq!(read_public(&public_path(&p)).unwrap(), pk);
        assert!(
            read_public(&p).is_err(),
            "a secret file is not a public one"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
