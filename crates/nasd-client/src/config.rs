//! The client config file (`client.json`) and the session tokens saved beside it: where the
//! manager is, the cluster CA that authenticates it, and whose credentials a command uses.
//! `nasd up` writes the file for its admin; `nasd login` changes its user and saves a token.
//! It lives in the client library, not the command line, so every program that talks to a
//! cluster reads one format.
//!
//! ```text
//! {"version": 1,                       CLIENT_CONFIG_VERSION
//!  "manager": "127.0.0.1:7000",        HOST:PORT of the manager, or a list of several
//!                                      (["h1:7000", "h2:7000"], crate::managers)
//!  "ca": "/path/manager/tls/ca.der",   the cluster CA certificate (DER)
//!  "user": "admin",                    who the commands run as
//!  "password_file": "/path/admin.password",   optional, mode 0600
//!  "password_user": "admin"}           optional: whose password that file holds
//! session-USER.token                   beside the config: hex of a 32-byte token, mode 0600
//! e2e-USER.key                         beside the config: hex of the user's 32-byte end-to-end
//!                                      seed (identity), mode 0600
//! ```
//!
//! Which config a command uses, first found wins ([`ConfigSearch::find`]): `$NASD_CONFIG`;
//! `$NASD_DATA/client.json`; the config named by the per-user file `current`
//! (`$XDG_CONFIG_HOME/nasd/current`, else `~/.config/nasd/current`), which `nasd up` writes so
//! that the cluster it started is the one later commands reach; `~/.local/share/nasd/client.json`.
//! A `current` naming a config that no longer exists (its cluster directory was removed) is
//! passed over.
//!
//! ```text
//! current   {"version": 1, "config": "/abs/DATA/client.json"}   CURRENT_FILE_VERSION, mode 0600
//! ```
//!
//! Credentials, first found wins: a key file, a password, the saved token, the config's
//! password file (for its own user only). The caller supplies the first two (the command line
//! takes them from `$NASD_KEY` and `$NASD_PASSWORD`), and the variables that choose the config
//! ([`ConfigSearch::from_env`] is the one place they are read), so the rest of this module
//! reads no environment and tests give it what they like.

use crate::managers::ManagerAddrs;
use crate::session::SessionConfig;
use crate::ClientError;
use nasd_proto::manager::{Credential, TOKEN_BYTES};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The version of `client.json` this code reads and writes.
pub const CLIENT_CONFIG_VERSION: u32 = 1;
/// The version of the `current` file this code reads and writes.
pub const CURRENT_FILE_VERSION: u32 = 1;
/// The config's name in a cluster directory.
pub const CONFIG_FILE_NAME: &str = "client.json";

/// `client.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ClientFile {
    pub version: u32,
    /// HOST:PORT of the manager, or of each of several ([`crate::managers`]).
    pub manager: ManagerAddrs,
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
    /// The `current` file could not be read or replaced.
    #[error("{what} {}", path.display())]
    Current {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Neither `$XDG_CONFIG_HOME` nor `$HOME` is set, so there is no `current` file.
    #[error("no place for the current cluster's name: set HOME or XDG_CONFIG_HOME")]
    NoCurrentFile,
}

/// Where a command looks for its config: the environment variables that choose it, read
/// once ([`ConfigSearch::from_env`]); every other method is a pure function of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigSearch {
    /// `$NASD_CONFIG`: this file, whatever else is set.
    pub config: Option<PathBuf>,
    /// `$NASD_DATA`: the cluster directory of `nasd up`, and its `client.json`.
    pub data: Option<PathBuf>,
    /// `$XDG_CONFIG_HOME` (only an absolute one counts, as the XDG spec says).
    pub xdg_config_home: Option<PathBuf>,
    /// `$HOME`.
    pub home: Option<PathBuf>,
}

/// Why [`ConfigSearch::find`] chose its config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    /// `$NASD_CONFIG`.
    Env,
    /// `$NASD_DATA/client.json`.
    Data,
    /// The `current` file at this path (written by `nasd up`).
    Current(PathBuf),
    /// The default cluster directory's config.
    Default,
}

/// The config a command uses, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundConfig {
    pub path: PathBuf,
    pub source: ConfigSource,
}

/// The `current` file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
struct CurrentFile {
    version: u32,
    config: PathBuf,
}

impl ConfigSearch {
    /// The variables as this process sees them; an empty one counts as unset.
    pub fn from_env() -> ConfigSearch {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        ConfigSearch {
            config: var("NASD_CONFIG"),
            data: var("NASD_DATA"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            home: var("HOME"),
        }
    }

    /// The cluster directory `nasd up` makes when not told one: `$NASD_DATA`, else
    /// `~/.local/share/nasd`, else `./nasd-data`.
    pub fn default_data_dir(&self) -> PathBuf {
        if let Some(d) = &self.data {
            return d.clone();
        }
        match &self.home {
            Some(h) => h.join(".local/share/nasd"),
            None => PathBuf::from("nasd-data"),
        }
    }

    /// The per-user file that names the current cluster's config:
    /// `$XDG_CONFIG_HOME/nasd/current`, else `~/.config/nasd/current`.
    pub fn current_file(&self) -> Option<PathBuf> {
        let base = match &self.xdg_config_home {
            Some(x) if x.is_absolute() => x.clone(),
            _ => self.home.as_ref()?.join(".config"),
        };
        Some(base.join("nasd").join("current"))
    }

    /// The config a command uses (see the module doc for the order). The file found need
    /// not exist, except one named by `current`.
    pub fn find(&self) -> Result<FoundConfig, ConfigError> {
        let found = |path, source| Ok(FoundConfig { path, source });
        if let Some(c) = &self.config {
            return found(c.clone(), ConfigSource::Env);
        }
        if let Some(d) = &self.data {
            return found(d.join(CONFIG_FILE_NAME), ConfigSource::Data);
        }
        if let Some(cur) = self.current_file() {
            if let Some(c) = read_current(&cur)? {
                if c.exists() {
                    return found(c, ConfigSource::Current(cur));
                }
            }
        }
        found(
            self.default_data_dir().join(CONFIG_FILE_NAME),
            ConfigSource::Default,
        )
    }

    /// Makes `config` the current cluster's config: what later commands use unless
    /// `$NASD_CONFIG` or `$NASD_DATA` says otherwise. `config` should be absolute. The
    /// `current` file is replaced whole (written beside it, then renamed), so a reader never
    /// sees half of it.
    pub fn set_current(&self, config: &Path) -> Result<PathBuf, ConfigError> {
        let cur = self.current_file().ok_or(ConfigError::NoCurrentFile)?;
        let dir = cur.parent().expect("the current file is in a directory");
        nasd_private::create_dir(dir).map_err(|e| ConfigError::Current {
            what: "making the directory of",
            path: cur.clone(),
            source: private_io(e),
        })?;
        let text = serde_json::to_string(&CurrentFile {
            version: CURRENT_FILE_VERSION,
            config: config.to_path_buf(),
        })
        .expect("the current file serializes")
            + "\n";
        let tmp = dir.join(format!(".current.{}", std::process::id()));
        let wrote = nasd_private::write_file(&tmp, text.as_bytes())
            .map_err(private_io)
            .and_then(|()| std::fs::rename(&tmp, &cur));
        if let Err(source) = wrote {
            let _ = std::fs::remove_file(&tmp);
            return Err(ConfigError::Current {
                what: "writing",
                path: cur,
                source,
            });
        }
        Ok(cur)
    }
}

/// The config named by the `current` file at `path`; `None` when there is no such file.
fn read_current(path: &Path) -> Result<Option<PathBuf>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConfigError::Current {
                what: "reading",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let c: CurrentFile = serde_json::from_str(&text).map_err(|source| ConfigError::Malformed {
        path: path.to_path_buf(),
        source,
    })?;
    if c.version != CURRENT_FILE_VERSION {
        return Err(ConfigError::Version {
            path: path.to_path_buf(),
            version: c.version,
        });
    }
    Ok(Some(c.config))
}

fn private_io(e: nasd_private::PrivacyError) -> std::io::Error {
    match e {
        nasd_private::PrivacyError::Io { source, .. } => source,
        loose => std::io::Error::other(loose),
    }
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
            Credential::Password("".into())
        } else if let Some(p) = choice.password {
            Credential::Password(p.into())
        } else if let Some(t) = saved_token(config, &user) {
            Credential::Token(t)
        } else if let (Some(pf), true) = (&self.password_file, user == self.password_user()) {
            let p = zeroize::Zeroizing::new(std::fs::read_to_string(pf).map_err(|source| {
                ConfigError::PasswordFile {
                    path: pf.clone(),
                    source,
                }
            })?);
            Credential::Password(p.trim_end_matches('\n').into())
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

/// Where the client keeps `user`'s end-to-end key (issue 10): beside the config, mode 0600,
/// so commands that log in with the saved token can decrypt.
pub fn e2e_key_path(config: &Path, user: &str) -> PathBuf {
    config.with_file_name(format!("e2e-{user}.key"))
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
        assert!(matches!(s.credential, Credential::Password(ref pw) if &**pw == "pw"));
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
        assert!(matches!(s.credential, Credential::Password(ref pw) if &**pw == "given"));
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
        assert!(matches!(s.credential, Credential::Password(ref pw) if &**pw == "pw"));
    }

    fn search(t: &Path) -> ConfigSearch {
        ConfigSearch {
            home: Some(t.join("home")),
            ..Default::default()
        }
    }

    #[test]
    fn a_cluster_made_current_is_found_until_an_explicit_choice_overrides_it() {
        let t = tempfile::tempdir().unwrap();
        let mut s = search(t.path());
        let default = t.path().join("home/.local/share/nasd/client.json");
        assert_eq!(
            s.find().unwrap(),
            FoundConfig {
                path: default.clone(),
                source: ConfigSource::Default
            }
        );
        let cfg = t.path().join("c/client.json");
        std::fs::create_dir(t.path().join("c")).unwrap();
        sample(t.path()).save(&cfg).unwrap();
        let cur = s.set_current(&cfg).unwrap();
        assert_eq!(cur, t.path().join("home/.config/nasd/current"));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&cur), 0o600);
        assert_eq!(mode(cur.parent().unwrap()), 0o700);
        let text = std::fs::read_to_string(&cur).unwrap();
        assert_eq!(
            text,
            format!("{{\"version\":1,\"config\":\"{}\"}}\n", cfg.display())
        );
        assert_eq!(
            s.find().unwrap(),
            FoundConfig {
                path: cfg.clone(),
                source: ConfigSource::Current(cur.clone())
            }
        );
        // $NASD_DATA, then $NASD_CONFIG, win over the current cluster.
        s.data = Some(t.path().join("d"));
        assert_eq!(s.find().unwrap().path, t.path().join("d/client.json"));
        assert_eq!(s.find().unwrap().source, ConfigSource::Data);
        s.config = Some(t.path().join("x.json"));
        assert_eq!(s.find().unwrap().path, t.path().join("x.json"));
        assert_eq!(s.find().unwrap().source, ConfigSource::Env);
        // A current cluster whose directory is gone is passed over.
        let mut s = search(t.path());
        std::fs::remove_file(&cfg).unwrap();
        assert_eq!(s.find().unwrap().path, default);
        // $XDG_CONFIG_HOME moves the current file; a relative one does not count.
        s.xdg_config_home = Some(t.path().join("xdg"));
        assert_eq!(s.current_file(), Some(t.path().join("xdg/nasd/current")));
        s.xdg_config_home = Some("relative".into());
        assert_eq!(s.current_file(), Some(cur));
        assert_eq!(ConfigSearch::default().current_file(), None);
        assert!(matches!(
            ConfigSearch::default().set_current(&cfg),
            Err(ConfigError::NoCurrentFile)
        ));
    }

    #[test]
    fn a_broken_current_file_is_an_error_naming_it() {
        let t = tempfile::tempdir().unwrap();
        let s = search(t.path());
        let cur = s.current_file().unwrap();
        std::fs::create_dir_all(cur.parent().unwrap()).unwrap();
        std::fs::write(&cur, "/not/json").unwrap();
        let e = s.find().unwrap_err();
        assert!(
            matches!(e, ConfigError::Malformed { ref path, .. } if *path == cur),
            "{e}"
        );
        std::fs::write(&cur, r#"{"version": 9, "config": "/c.json"}"#).unwrap();
        let e = s.find().unwrap_err();
        assert!(e.to_string().contains("unsupported version 9"), "{e}");
    }
}
