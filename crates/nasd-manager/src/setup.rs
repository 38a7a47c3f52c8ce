//! `nasd manager init` and `run`: the manager's directory and its config file.
//!
//! ```text
//! DIR/manager.json   {"version": 1, "listen": "127.0.0.1:7700", "policy": {...}}
//! DIR/meta.sqlite    the metadata store (plus its -wal and -shm files)
//! DIR/tls/           the cluster CA and the server certificate (see [`crate::tls`])
//! DIR/keys/opaque.key  the OPAQUE server keys (OPRF seed, key pair; [`crate::login`])
//! ```
//!
//! All of it is private to the manager's user (directories 0700, files 0600, whatever the
//! umask), and `run` refuses to start while any of it is not ([`crate::private`]). `nasd
//! manager seal` ([`seal`]) seals the secrets a copy of the directory would give away, the
//! drives' keys in the store and the OPAQUE key file, under a passphrase the manager then
//! needs to start (issue 21 §8); the seal's header is the store's `key_seal` meta row.

use crate::service::{Manager, Policy};
use crate::sqlite::SqliteStore;
use crate::store::{MetaStore, KEY_SEAL_META};
use crate::{server, tls, users, MgrError, MgrResult};
use nasd_crypto::seal::{KeySeal, SealHeader};
use nasd_proto::manager::MgrStatus;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zeroize::Zeroizing;

pub const CONFIG_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ManagerConfig {
    pub version: u32,
    pub listen: String,
    #[serde(default)]
    pub policy: Policy,
}

fn err(what: String) -> MgrError {
    MgrError::new(MgrStatus::Internal, what)
}

pub struct InitOptions {
    pub dir: PathBuf,
    pub listen: String,
    pub admin_user: String,
    pub admin_password: String,
    /// Extra DNS names or addresses for the server certificate.
    pub names: Vec<String>,
    pub policy: Policy,
}

pub fn config_path(dir: &Path) -> PathBuf {
    dir.join("manager.json")
}

pub fn load_config(dir: &Path) -> MgrResult<ManagerConfig> {
    let p = config_path(dir);
    let text = std::fs::read_to_string(&p)
        .map_err(|e| err(format!("{}: {e} (run `nasd manager init`)", p.display())))?;
    let c: ManagerConfig =
        serde_json::from_str(&text).map_err(|e| err(format!("{}: {e}", p.display())))?;
    if c.version != CONFIG_VERSION {
        return Err(err(format!(
            "{}: unsupported version {}",
            p.display(),
            c.version
        )));
    }
    Ok(c)
}

/// Creates the manager's directory: store, admin user, CA and certificate, config.
pub fn init(o: &InitOptions) -> MgrResult<()> {
    if config_path(&o.dir).exists() {
        return Err(MgrError::new(
            MgrStatus::Exists,
            format!("{} already holds a manager", o.dir.display()),
        ));
    }
    nasd_private::create_dir(&o.dir).map_err(|e| err(e.to_string()))?;
    let keys = crate::login::load_or_make_keys(&o.dir, None)?;
    let mut st = open_store(&o.dir)?;
    users::add_password_user_here(&mut st, &keys, &o.admin_user, &o.admin_password, true)?;
    if st
        .group_by_name(users::USERS_GROUP)
        .map_err(|e| err(e.to_string()))?
        .is_none()
    {
        st.add_group(users::USERS_GROUP)
            .map_err(|e| err(e.to_string()))?;
    }
    tls::generate(&o.dir, &o.names)?;
    let cfg = ManagerConfig {
        version: CONFIG_VERSION,
        listen: o.listen.clone(),
        policy: o.policy.clone(),
    };
    let text = serde_json::to_string_pretty(&cfg).expect("plain struct");
    nasd_private::write_file(&config_path(&o.dir), (text + "\n").as_bytes())
        .map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// Opens the store in `dir`, its file created private first (SQLite gives the `-wal` and
/// `-shm` files the database file's mode).
fn open_store(dir: &Path) -> MgrResult<SqliteStore> {
    let path = dir.join("meta.sqlite");
    nasd_private::create_file(&path).map_err(|e| err(e.to_string()))?;
    SqliteStore::open(&path).map_err(|e| err(format!("{}: {e}", path.display())))
}

/// The passphrase of a manager whose keys are sealed, asked for only when they are.
pub type Passphrase<'a> = Box<dyn FnOnce() -> MgrResult<Zeroizing<Vec<u8>>> + 'a>;

/// The seal of the drives' keys and the OPAQUE key file of the manager whose store is `st`,
/// unlocked with the passphrase `passphrase` gives, when they are sealed (issue 21 §8).
fn unlock(st: &dyn MetaStore, passphrase: Passphrase<'_>) -> MgrResult<Option<Arc<KeySeal>>> {
    let Some(h) = st.get_meta(KEY_SEAL_META).map_err(|e| err(e.to_string()))? else {
        return Ok(None);
    };
    let header = SealHeader::decode(&h).map_err(|e| err(format!("the key seal: {e}")))?;
    let p = passphrase()?;
    KeySeal::unlock(&p, &header)
        .map(|s| Some(Arc::new(s)))
        .map_err(|e| err(format!("the manager's sealed keys: {e}")))
}

/// Seals the keys of the stopped manager in `dir` under `passphrase` (issue 21 §8): the
/// drives' keys in its store and its OPAQUE key file, as drives seal theirs (Argon2id,
/// AES-256-GCM-SIV; `nasd_crypto::seal`). The seal's header goes first, so a seal cut short
/// is finished by the next start with the passphrase (a key still in clear reads, and is
/// sealed when written); then the store is compacted so no page keeps a key in clear.
pub fn seal(dir: &Path, passphrase: &[u8]) -> MgrResult<()> {
    load_config(dir)?;
    let mut st = open_store(dir)?;
    if st
        .get_meta(KEY_SEAL_META)
        .map_err(|e| err(e.to_string()))?
        .is_some()
    {
        return Err(MgrError::new(
            MgrStatus::Exists,
            format!(
                "the keys of the manager in {} are sealed already",
                dir.display()
            ),
        ));
    }
    let seal = Arc::new(KeySeal::create(passphrase).map_err(|e| err(e.to_string()))?);
    let drives = st.drives().map_err(|e| err(e.to_string()))?;
    st.put_meta(KEY_SEAL_META, &seal.header().encode())
        .map_err(|e| err(e.to_string()))?;
    st.set_key_seal(Some(seal.clone()));
    for d in &drives {
        st.put_drive(d).map_err(|e| err(e.to_string()))?;
    }
    crate::login::load_or_make_keys(dir, Some(&seal))?;
    st.compact().map_err(|e| err(e.to_string()))
}

/// Opens the manager in `dir` and serves on `listen` (default: the config's) until `shutdown`.
/// `on_listen` is told the bound address; `passphrase` is asked only when its keys are sealed.
pub async fn run(
    dir: &Path,
    listen: Option<&str>,
    passphrase: Passphrase<'_>,
    on_listen: impl FnOnce(std::net::SocketAddr),
    shutdown: impl Future<Output = ()>,
) -> MgrResult<()> {
    let cfg = load_config(dir)?;
    nasd_private::check_tree(dir).map_err(|e| err(e.to_string()))?;
    let mut st = open_store(dir)?;
    let seal = unlock(&st, passphrase)?;
    st.set_key_seal(seal.clone());
    let keys = crate::login::load_or_make_keys(dir, seal.as_deref())?;
    let m = Manager::with_keys(Box::new(st), cfg.policy.clone(), keys)?;
    let tls = tls::server_config(dir)?;
    let addr = listen.unwrap_or(&cfg.listen);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| err(format!("listening on {addr}: {e}")))?;
    on_listen(listener.local_addr().map_err(|e| err(e.to_string()))?);
    let pending = server::rotate_at_start(&m).await;
    // Revocations a crash interrupted: the drives take the stored version before anything is
    // minted from it.
    m.complete_revocations().await;
    let bg = server::start_background(m.clone(), pending);
    server::serve(m, listener, tls, shutdown).await;
    bg.abort();
    Ok(())
}
