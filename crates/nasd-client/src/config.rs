//! The client config file (`client.json`) and the session tokens saved beside it: where the
//! manager is, the cluster CA that authenticates it, and whose credentials a command uses.
//! `nasd up` writes the file for its admin; `nasd login` changes its user and saves a token.
//! It lives in the client library, not the command line, so every program that talks to a
//! cluster reads one format.
//!
//! ```text
//! {"version": 1,                       CLIENT_CONFIG_VERSION
//!  "manager": "127.0.0.1:7000",        HOST:PORT of the manager
//!  "ca": "/path/manager/tls/ca.der",   the cluster CA certificate (DER)
//!  "user": "admin",                    who the commands run as
//!  "password_file": "/path/admin.password",   optional, mode 0600
//!  "password_user": "admin"}           optional: whose password that file holds
//! session-USER.token                   beside the config: hex of a 32-byte token, mode 0600
//! ```
//!
//! Credentials, first found wins: a key file, a password, the saved token, the config's
//! password file (for its own user only). The caller supplies the first two (the command line
//! takes them from `$NASD_KEY` and `$NASD_PASSWORD`), so this module reads no environment.

use crate::session::SessionConfig;
use crate::ClientError;
use nasd_proto::manager::{Credential, TOKEN_BYTES};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The version of `client.json` this code reads and writes.
pub const CLIENT_CONFIG_VERSION: u32 = 1;

/// `client.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ClientFile {
    pub version: u32,
    /// HOST:PORT of the manager.
    pub manager: String,
    /// The cluster CA certificate (DER).
    pub ca: PathBuf,
    pub user: String,
    /// A file holding a password (written by `nasd up` for the admin, mode 0600).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Whose password `password_file` holds; it is used for that user only, whoever `user`
    /// becomes after a `nasd login`. Configs without it: the password belongs to `user`.
    #[serde(default)]
    pub password_user: Option<String>,
}

/// Why a config, its CA, its credentials or a token could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "no client config at {} (start a cluster with `nasd up`, or set NASD_CONFIG)",
        path.display()
    )]
    Missing {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", path.display())]
    Malformed {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: unsupported version {version}", path.display())]
    Version { path: PathBuf, version: u32 },
    #[error("reading the cluster CA {}", path.display())]
    Ca {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading the password file {}", path.display())]
    PasswordFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no credentials for user {user}: run `nasd login --user {user}` or set NASD_PASSWORD")]
    NoCredentials { user: String },
    /// The user's key file could not be read.
    #[error(transparent)]
    Key(ClientError),
    /// The config or a token file could not be written.
    #[error(transparent)]
    Write(ClientError),
}

/// What the caller knows about credentials before the config is read.
#[derive(Default)]
pub struct CredentialChoice {
    /// Run as this user instead of the config's.
    pub user: Option<String>,
    /// An Ed25519 secret key file ([`crate::userkey`]): log in by signing.
    pub key_file: Option<PathBuf>,
    /// A password.
    pub password: Option<String>,
}

impl ClientFile {
    /// Reads and checks the config at `path`.
    pub fn load(path: &Path) -> Result<ClientFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Missing {
            path: path.to_path_buf(),
            source,
        })?;
        let c: ClientFile =
            serde_json::from_str(&text).map_err(|source| ConfigError::Malformed {
                path: path.to_path_buf(),
                source,
            })?;
        if c.version != CLIENT_CONFIG_VERSION {
            return Err(ConfigError::Version {
                path: path.to_path_buf(),
                version: c.version,
            });
        }
        Ok(c)
    }

    /// Writes the config to `path`, mode 0600 whatever the umask.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let text = serde_json::to_string_pretty(self).expect("a config serializes") + "\n";
        crate::auth::write_secret_file(path, text.as_bytes()).map_err(ConfigError::Write)
    }

    /// Whose password `password_file` holds.
    pub fn password_user(&self) -> &str {
        self.password_user.as_deref().unwrap_or(&self.user)
    }

    /// Makes `user` the config's user; the password file stays with the user it was written
    /// for.
    pub fn switch_user(&mut self, user: &str) {
        if self.user != user {
            self.password_user.get_or_insert_with(|| self.user.clone());
            self.user = user.to_string();
        }
    }

    /// The cluster CA certificate (DER).
    pub fn read_ca(&self) -> Result<Vec<u8>, ConfigError> {
        std::fs::read(&self.ca).map_err(|source| ConfigError::Ca {
            path: self.ca.clone(),
            source,
        })
    }

    /// The session config for `choice.user` (else the config's user), with the first
    /// credential found (see the module doc). `config` is where this file lies: saved tokens
    /// are beside it.
    pub fn session_config(
        &self,
        config: &Path,
        choice: CredentialChoice,
    ) -> Result<SessionConfig, ConfigError> {
        let ca_der = self.read_ca()?;
        let user = choice.user.unwrap_or_else(|| self.user.clone());
        let signing_key = match &choice.key_file {
            Some(p) => Some(crate::userkey::read_secret(p).map_err(ConfigError::Key)?),
            None => None,
        };
        let credential = if signing_key.is_some() {
            Credential::Password(String::new())
        } else if let Some(p) = choice.password {
            Credential::Password(p)
        } else if let Some(t) = saved_token(config, &user) {
            Credential::Token(t)
        } else if let (Some(pf), true) = (&self.password_file, user == self.password_user()) {
            let p = std::fs::read_to_string(pf).map_err(|source| ConfigError::PasswordFile {
                path: pf.clone(),
                source,
            })?;
            Credential::Password(p.trim_end_matches('\n').to_string())
        } else {
            return Err(ConfigError::NoCredentials { user });
        };
        Ok(SessionConfig {
            manager: self.manager.clone(),
            ca_der,
            user,
            credential,
            signing_key,
        })
    }
}

/// Where `nasd login` keeps `user`'s session token: beside the config.
pub fn token_path(config: &Path, user: &str) -> PathBuf {
    config.with_file_name(format!("session-{user}.token"))
}

/// The session token saved for `user`, if there is a readable one.
pub fn saved_token(config: &Path, user: &str) -> Option<[u8; TOKEN_BYTES]> {
    std::fs::read_to_string(token_path(config, user))
        .ok()
        .and_then(|t| hex::decode(t.trim()).ok())
        .and_then(|b| <[u8; TOKEN_BYTES]>::try_from(b).ok())
}

/// Saves `user`'s session token beside the config, mode 0600.
pub fn save_token(config: &Path, user: &str, token: &[u8; TOKEN_BYTES]) -> Result<(), ConfigError> {
    crate::auth::write_secret_file(&token_path(config, user), hex::encode(token).as_bytes())
        .map_err(ConfigError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn sample(dir: &Path) -> ClientFile {
        ClientFile {
            version: CLIENT_CONFIG_VERSION,
            manager: "127.0.0.1:7000".into(),
            ca: dir.join("ca.der"),
            user: "admin".into(),
            password_file: Some(dir.join("admin.password")),
            password_user: Some("admin".into()),
        }
    }

    #[test]
    fn a_saved_config_loads_back_unchanged_and_private() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("client.json");
        let c = sample(t.path());
        c.save(&p).unwrap();
        assert_eq!(ClientFile::load(&p).unwrap(), c);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.ends_with("}\n"), "{text}");
    }

    #[test]
    fn the_format_written_by_earlier_versions_still_loads() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("client.json");
        std::fs::write(
            &p,
            r#"{"version": 1, "manager": "m:1", "ca": "/ca.der", "user": "bob"}"#,
        )
        .unwrap();
        let c = ClientFile::load(&p).unwrap();
        assert_eq!(c.password_file, None);
        assert_eq!(c.password_user(), "bob");
    }

    #[test]
    fn bad_configs_are_refused_naming_the_file() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("client.json");
        let e = ClientFile::load(&p).unwrap_err();
        assert!(matches!(e, ConfigError::Missing { .. }), "{e}");
        assert!(e.to_string().contains("no client config at"), "{e}");
        std::fs::write(&p, "{").unwrap();
        assert!(matches!(
            ClientFile::load(&p).unwrap_err(),
            ConfigError::Malformed { .. }
        ));
        let mut c = sample(t.path());
        c.version = 2;
        c.save(&p).unwrap();
        let e = ClientFile::load(&p).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: unsupported version 2", p.display())
        );
    }

    #[test]
    fn the_password_file_serves_only_its_own_user_and_a_token_wins_over_it() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("client.json");
        std::fs::write(t.path().join("ca.der"), b"der").unwrap();
        std::fs::write(t.path().join("admin.password"), "pw\n").unwrap();
        let mut c = sample(t.path());
        let s = c.session_config(&p, CredentialChoice::default()).unwrap();
        assert!(matches!(s.credential, Credential::Password(ref pw) if pw == "pw"));
        assert_eq!(s.ca_der, b"der");
        // After a login as alice the password file is still the admin's.
        c.switch_user("alice");
        assert_eq!(c.password_user(), "admin");
        let Err(e) = c.session_config(&p, CredentialChoice::default()) else {
            panic!("alice got the admin's password");
        };
        assert!(matches!(e, ConfigError::NoCredentials { ref user } if user == "alice"));
        save_token(&p, "alice", &[7; TOKEN_BYTES]).unwrap();
        let s = c.session_config(&p, CredentialChoice::default()).unwrap();
        assert!(matches!(s.credential, Credential::Token(t) if t == [7; TOKEN_BYTES]));
        // A password given by the caller wins over the token.
        let s = c
            .session_config(
                &p,
                CredentialChoice {
                    password: Some("given".into()),
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(matches!(s.credential, Credential::Password(ref pw) if pw == "given"));
        // The admin, chosen explicitly, still gets the password file.
        let s = c
            .session_config(
                &p,
                CredentialChoice {
                    user: Some("admin".into()),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(s.user, "admin");
        assert!(matches!(s.credential, Credential::Password(ref pw) if pw == "pw"));
    }
}
