//! `nasd manager init` and `run`: the manager's directory and its config file.
//!
//! ```text
//! DIR/manager.json   {"version": 1, "listen": "127.0.0.1:7700", "policy": {...},
//!                     "meta": "postgres://..."}   (meta: only when not SQLite)
//! DIR/meta.sqlite    the metadata store (plus its -wal and -shm files), unless `meta` names
//!                    a PostgreSQL database ([`Meta`])
//! DIR/tls/           the cluster CA and the server certificate (see [`crate::tls`])
//! DIR/keys/opaque.key  the OPAQUE server keys (OPRF seed, key pair; [`crate::login`])
//! ```
//!
//! All of it is private to the manager's user (directories 0700, files 0600, whatever the
//! umask), and `run` refuses to start while any of it is not ([`crate::private`]). `nasd
//! manager seal` ([`seal`]) seals the secrets a copy of the directory would give away, the
//! drives' keys in the store and the OPAQUE key file, under a passphrase the manager then
//! needs to start (issue 21 §8); the seal's header is the store's `key_seal` meta row.

use crate::postgres::PgStore;
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
    /// Where the metadata lives when not in `meta.sqlite`: a PostgreSQL connection string
    /// ([`Meta::parse`]). Absent in configs written before PostgreSQL, which stay SQLite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<String>,
}

/// Where a manager keeps its metadata (`--meta`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Meta {
    /// `meta.sqlite` in the manager's directory (the default).
    Sqlite,
    /// A PostgreSQL database: a `postgres://` or `postgresql://` URL, or libpq's
    /// `key=value` pairs (`host=/path/to/socket dbname=nasd`).
    Postgres(String),
}

impl Meta {
    /// `sqlite`, or a PostgreSQL connection string.
    pub fn parse(text: &str) -> MgrResult<Meta> {
        let t = text.trim();
        if t == "sqlite" {
            return Ok(Meta::Sqlite);
        }
        if t.starts_with("postgres://") || t.starts_with("postgresql://") || t.contains('=') {
            return Ok(Meta::Postgres(t.to_string()));
        }
        Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!(
                "--meta {t}: expected `sqlite`, a postgres://USER@HOST/DB URL or \
                 `host=... dbname=...`"
            ),
        ))
    }

    /// What the config records: nothing for SQLite.
    fn recorded(&self) -> Option<String> {
        match self {
            Meta::Sqlite => None,
            Meta::Postgres(c) => Some(c.clone()),
        }
    }
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
    /// Where the metadata lives (recorded in the config, so `run` finds it again).
    pub meta: Meta,
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
    let mut st = open_store(&o.dir, &o.meta)?;
    users::add_password_user_here(st.as_mut(), &keys, &o.admin_user, &o.admin_password, true)?;
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
        meta: o.meta.recorded(),
    };
    let text = serde_json::to_string_pretty(&cfg).expect("plain struct");
    nasd_private::write_file(&config_path(&o.dir), (text + "\n").as_bytes())
        .map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// Makes the directory `dir` of another manager of the cluster whose manager's directory is
/// `from`: the same database, policy, OPAQUE server keys (sealed as they are there) and
/// cluster CA, a certificate of its own from that CA for loopback and `names`, and its own
/// `listen` address. Its database must be one several managers can reach (PostgreSQL):
/// they take turns leading it ([`run`]). The directory holds the same secrets as `from`'s.
pub fn join(from: &Path, dir: &Path, listen: &str, names: &[String]) -> MgrResult<()> {
    let cfg = load_config(from)?;
    if recorded_meta(&cfg)? == Meta::Sqlite {
        return Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!(
                "the manager in {} keeps its metadata in SQLite, which only its own process \
                 opens: several managers need a PostgreSQL database (--meta)",
                from.display()
            ),
        ));
    }
    if config_path(dir).exists() {
        return Err(MgrError::new(
            MgrStatus::Exists,
            format!("{} already holds a manager", dir.display()),
        ));
    }
    nasd_private::create_dir(dir).map_err(|e| err(e.to_string()))?;
    tls::issue(from, dir, names)?;
    let (key_from, key_to) = (crate::login::key_path(from), crate::login::key_path(dir));
    let key = Zeroizing::new(
        std::fs::read(&key_from).map_err(|e| err(format!("{}: {e}", key_from.display())))?,
    );
    nasd_private::create_dir(key_to.parent().expect("the key file is in keys/"))
        .map_err(|e| err(e.to_string()))?;
    nasd_private::write_file(&key_to, &key).map_err(|e| err(e.to_string()))?;
    let text = serde_json::to_string_pretty(&ManagerConfig {
        listen: listen.to_string(),
        ..cfg
    })
    .expect("plain struct");
    nasd_private::write_file(&config_path(dir), (text + "\n").as_bytes())
        .map_err(|e| err(e.to_string()))
}

/// Opens the store `meta` names: SQLite in `dir`, its file created private first (SQLite
/// gives the `-wal` and `-shm` files the database file's mode), or a PostgreSQL database.
fn open_store(dir: &Path, meta: &Meta) -> MgrResult<Box<dyn MetaStore>> {
    match meta {
        Meta::Sqlite => {
            let path = dir.join("meta.sqlite");
            nasd_private::create_file(&path).map_err(|e| err(e.to_string()))?;
            let st =
                SqliteStore::open(&path).map_err(|e| err(format!("{}: {e}", path.display())))?;
            Ok(Box::new(st))
        }
        Meta::Postgres(conninfo) => {
            let st = PgStore::connect(conninfo)
                .map_err(|e| err(format!("the PostgreSQL metadata store: {e}")))?;
            Ok(Box::new(st))
        }
    }
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
    let cfg = load_config(dir)?;
    let mut st = open_store(dir, &recorded_meta(&cfg)?)?;
    if st
        .get_meta(KEY_SEAL_META)
        .map_err(|e| err(e.to_string()))?
        .is_some()
    {
        return Err(MgrError::new(
            MgrStatus::Exists,
            format!(
                "the keys of the manager in {} are sealed already (nasd manager seal --change \
                 changes the passphrase)",
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

/// Changes the passphrase of the sealed, stopped manager in `dir` from `old` to `new` (issue
/// 21 §8): every drive key in its store and its OPAQUE key file are sealed anew, in steps a
/// crash at any point leaves opening whole under one of the two passphrases:
///
/// 1. everything is opened under `old` (a wrong one changes nothing);
/// 2. the key file is written sealed under `new` beside the current one (`keys/opaque.key.next`,
///    durable), which nothing reads yet;
/// 3. the commit point: in one store transaction, the seal's header and every drive key
///    become the new seal's;
/// 4. the staged key file is renamed over the current one, and the store compacted.
///
/// A start after a crash between 3 and 4 finds the store under the new seal and finishes 4
/// (`login::load_or_make_keys`); one before 3 finds the old seal and drops the staged file.
pub fn change_passphrase(dir: &Path, old: &[u8], new: &[u8]) -> MgrResult<()> {
    let cfg = load_config(dir)?;
    let mut st = open_store(dir, &recorded_meta(&cfg)?)?;
    let given = Zeroizing::new(old.to_vec());
    let Some(old_seal) = unlock(st.as_ref(), Box::new(move || Ok(given)))? else {
        return Err(MgrError::new(
            MgrStatus::InvalidArgument,
            format!(
                "the keys of the manager in {} are not sealed: seal them first (nasd manager \
                 seal without --change)",
                dir.display()
            ),
        ));
    };
    st.set_key_seal(Some(old_seal.clone()));
    let keys = crate::login::load_or_make_keys(dir, Some(&old_seal))?;
    let drives = st.drives().map_err(|e| err(e.to_string()))?;
    let new_seal = Arc::new(KeySeal::create(new).map_err(|e| err(e.to_string()))?);
    crate::login::stage_keys(dir, &keys, &new_seal)?;
    st.reseal_drive_keys(&new_seal.header().encode(), new_seal.clone())
        .map_err(|e| err(format!("sealing the drives' keys anew: {e}")))?;
    crate::login::commit_staged_keys(dir)?;
    // Pair check: what the store and the key file give back under the new seal is what the
    // old one opened.
    let again = st.drives().map_err(|e| err(e.to_string()))?;
    let same = |a: &crate::store::DriveRecord, b: &crate::store::DriveRecord| {
        (a.drive, &a.drive_key, &a.partition_key, &a.working_key)
            == (b.drive, &b.drive_key, &b.partition_key, &b.working_key)
    };
    assert!(
        again.len() == drives.len() && again.iter().zip(&drives).all(|(a, b)| same(a, b)),
        "the drives' keys read back under the new seal differ"
    );
    let reloaded = crate::login::load_or_make_keys(dir, Some(&new_seal))?;
    assert!(
        *reloaded.to_bytes() == *keys.to_bytes(),
        "the OPAQUE keys read back under the new seal differ"
    );
    st.compact().map_err(|e| err(e.to_string()))
}

/// The metadata store the manager's config names (SQLite when it names none).
fn recorded_meta(cfg: &ManagerConfig) -> MgrResult<Meta> {
    match &cfg.meta {
        Some(c) => Meta::parse(c),
        None => Ok(Meta::Sqlite),
    }
}

/// Where a started manager serves.
#[derive(Clone, Copy, Debug)]
pub struct Listening {
    pub addr: std::net::SocketAddr,
    /// The metrics server's address, when asked for.
    pub metrics: Option<std::net::SocketAddr>,
}

/// How long a manager waits for its database's lead before it says it stands by.
pub const STANDBY_NOTICE_MS: u64 = 300;

/// What a starting manager reports ([`run`]'s `on_event`).
#[derive(Clone, Debug)]
pub enum Event {
    /// Another manager leads the database; this one waits to take over, serving nothing.
    Standby { listen: String },
    /// It leads and serves.
    Listening(Listening),
}

/// Opens the manager in `dir` and serves on `listen` (default: the config's) until `shutdown`,
/// its metadata where `meta` says (default: where the config says), and its metrics and
/// health on `metrics` if given ([`crate::metrics`]). A manager serves only while it leads
/// its database ([`MetaStore::lead`]): on a database another manager leads, it stands by
/// until that one's connection ends, and it stops, with an error, when its own ends.
/// `on_event` is told when it stands by and the addresses it binds; `passphrase` is asked
/// only when its keys are sealed.
pub async fn run(
    dir: &Path,
    listen: Option<&str>,
    meta: Option<&Meta>,
    passphrase: Passphrase<'_>,
    metrics: Option<&str>,
    mut on_event: impl FnMut(Event),
    shutdown: impl Future<Output = ()>,
) -> MgrResult<()> {
    let cfg = load_config(dir)?;
    nasd_private::check_tree(dir).map_err(|e| err(e.to_string()))?;
    let recorded = recorded_meta(&cfg)?;
    let mut st = open_store(dir, meta.unwrap_or(&recorded))?;
    let seal = unlock(st.as_ref(), passphrase)?;
    st.set_key_seal(seal.clone());
    let keys = crate::login::load_or_make_keys(dir, seal.as_deref())?;
    let addr = listen.unwrap_or(&cfg.listen);
    tokio::pin!(shutdown);
    let standby = || {
        on_event(Event::Standby {
            listen: addr.to_string(),
        })
    };
    // Metrics and health from the start: a standby answers that it stands by.
    let source = Arc::new(crate::metrics::ManagerSource::default());
    let metrics = match metrics {
        Some(a) => {
            let bound = nasd_metrics::server::start(a, source.clone())
                .await
                .map_err(|e| err(format!("serving metrics on {a}: {e}")))?;
            Some(bound)
        }
        None => None,
    };
    let Some((st, lead)) = wait_to_lead(st, standby, &mut shutdown).await? else {
        return Ok(());
    };
    let m = Manager::with_keys(st, cfg.policy.clone(), keys)?;
    source.leads(m.clone());
    let tls = tls::server_config(dir)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| err(format!("listening on {addr}: {e}")))?;
    on_event(Event::Listening(Listening {
        addr: listener.local_addr().map_err(|e| err(e.to_string()))?,
        metrics,
    }));
    let pending = server::rotate_at_start(&m).await;
    // Revocations a crash interrupted: the drives take the stored version before anything is
    // minted from it.
    m.complete_revocations().await;
    let bg = server::start_background(m.clone(), pending);
    let lost = std::sync::atomic::AtomicBool::new(false);
    let stop = async {
        tokio::select! {
            _ = &mut shutdown => {}
            _ = lead.lost() => lost.store(true, std::sync::atomic::Ordering::Relaxed),
        }
    };
    server::serve(m, listener, tls, stop).await;
    bg.abort();
    if lost.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(err(
            "lost the metadata database's lead (its connection ended): stopped serving, since \
             another manager may lead it now"
                .to_string(),
        ));
    }
    Ok(())
}

/// Takes the lead of `st`'s database, on a thread of its own (the wait may last as long as
/// another manager leads, and a runtime does not end while a blocking task of its runs), and
/// calls `standby` once it has waited [`STANDBY_NOTICE_MS`]. `None`: `shutdown` came first.
async fn wait_to_lead(
    mut st: Box<dyn MetaStore>,
    standby: impl FnOnce(),
    shutdown: &mut (impl Future<Output = ()> + Unpin),
) -> MgrResult<Option<(Box<dyn MetaStore>, crate::store::Leadership)>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("nasd-lead".into())
        .spawn(move || {
            let r = st.lead().map(|lead| (st, lead));
            let _ = tx.send(r);
        })
        .map_err(|e| err(format!("starting the thread that waits for the lead: {e}")))?;
    tokio::pin!(rx);
    let notice = tokio::time::sleep(std::time::Duration::from_millis(STANDBY_NOTICE_MS));
    tokio::select! {
        r = &mut rx => return led(r),
        _ = &mut *shutdown => return Ok(None),
        _ = notice => standby(),
    }
    tokio::select! {
        r = rx => led(r),
        _ = shutdown => Ok(None),
    }
}

/// What the thread waiting for the lead sent.
fn led<T>(
    r: Result<crate::store::StoreResult<T>, tokio::sync::oneshot::error::RecvError>,
) -> MgrResult<Option<T>> {
    match r {
        Ok(Ok(x)) => Ok(Some(x)),
        Ok(Err(e)) => Err(err(format!("taking the metadata database's lead: {e}"))),
        Err(_) => Err(err("the thread waiting for the lead ended".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::Meta;

    #[test]
    fn meta_is_sqlite_or_a_postgresql_connection_string() {
        assert_eq!(Meta::parse("sqlite").unwrap(), Meta::Sqlite);
        for c in [
            "postgres://nasd@db.example/nasd",
            "postgresql://u:p@127.0.0.1:5432/m",
            "host=/run/postgresql dbname=nasd",
        ] {
            assert_eq!(Meta::parse(c).unwrap(), Meta::Postgres(c.into()));
        }
        assert!(Meta::parse("mysql://x").is_err());
        assert_eq!(Meta::Sqlite.recorded(), None);
    }
}
