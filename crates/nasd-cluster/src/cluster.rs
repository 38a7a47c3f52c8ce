//! [`Cluster`]: a running local cluster and the handle that stops, kills and restarts its
//! components one at a time; [`down`] stops one left running in the background.
//!
//! Invariants: a component is started only once nothing runs it (the process recorded in
//! `pids.json` is checked to still be the nasd serving that component's directory before it
//! is adopted or signalled); `pids.json` lists exactly the components running after every
//! change this handle makes; a component's address and directory never change, so a
//! restarted drive is the same drive to the manager and to clients.

use crate::error::ClusterError;
use crate::node::{ClusterFile, Node, NodeId, Pids};
use crate::process::{self, runs_node};
use crate::Options;
use nasd_client::config::ClientFile;
use nasd_client::session::SessionConfig;
use nasd_proto::manager::calls;
use nasd_proto::manager::Credential;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Child;

/// What runs a component, as far as this handle knows.
enum Proc {
    /// A process this handle started.
    Child(Child),
    /// A process an earlier start left running (`pid`).
    Adopted(u32),
    /// Nothing: stopped or killed through this handle.
    Down,
}

/// A running cluster. Dropping it stops every component it runs — those it started and those
/// it found running — unless [`Cluster::detach`]ed.
pub struct Cluster {
    nasd_bin: PathBuf,
    dir: PathBuf,
    info: ClusterFile,
    procs: BTreeMap<NodeId, Proc>,
    /// Components found running from an earlier start: (component, pid).
    adopted: Vec<(NodeId, u32)>,
    /// Components this start started although the cluster had run before (they were down).
    restarted: Vec<NodeId>,
    background: bool,
    /// What each component's `nasd` runs under ([`crate::Placement::wrappers`]).
    wrappers: BTreeMap<NodeId, Vec<OsString>>,
    detached: bool,
}

impl Cluster {
    /// Makes `dir` (and missing parents), mode 0700, and returns its canonical path: the one
    /// a started cluster reports as [`Cluster::dir`].
    pub fn prepare(dir: &Path) -> Result<PathBuf, ClusterError> {
        nasd_private::create_dir(dir)?;
        std::fs::canonicalize(dir).map_err(|source| ClusterError::Io {
            what: "resolving",
            path: dir.to_path_buf(),
            source,
        })
    }

    /// Whether a cluster was initialized in `dir` (a start there starts it again rather than
    /// making a new one).
    pub fn is_initialized(dir: &Path) -> bool {
        ClusterFile::path(dir).exists()
    }

    /// Starts the cluster in `dir` with the `nasd` executable at `nasd_bin`: initializes it
    /// first if `dir` holds none (with `options`; later starts ignore them), starts each
    /// component that is not running (adopting those that are), and registers the drives with
    /// the manager. Returns once every component serves. Blocking; may be called from inside
    /// an async runtime (the registration runs on a thread of its own).
    pub fn start(nasd_bin: &Path, dir: &Path, options: &Options) -> Result<Cluster, ClusterError> {
        let dir = Self::prepare(dir)?;
        let running = running(&dir);
        let info = match ClusterFile::load(&dir)? {
            Some(info) => crate::init::add_metrics(&dir, info, options)?,
            None => crate::init::init(&dir, options)?,
        };
        // The metadata's server before the manager that needs it.
        if crate::postgres::has_private(&dir) {
            crate::postgres::start(&dir)?;
        }
        let ran_before = Pids::path(&dir).exists();
        let mut c = Cluster {
            nasd_bin: nasd_bin.to_path_buf(),
            dir,
            info,
            procs: BTreeMap::new(),
            adopted: vec![],
            restarted: vec![],
            background: options.background,
            wrappers: options.placement.wrappers.clone(),
            detached: false,
        };
        // Adopt first, so `pids.json` written after each start lists every running component.
        for &(id, pid) in &running {
            c.adopted.push((id, pid));
            c.procs.insert(id, Proc::Adopted(pid));
        }
        for id in c.info.ids() {
            if c.procs.contains_key(&id) {
                continue;
            }
            let r = c.spawn(id);
            c.write_pids()?;
            r?;
            if ran_before {
                c.restarted.push(id);
            }
        }
        c.register_drives()?;
        Ok(c)
    }

    /// The cluster's directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What `cluster.json` says: every component's directory and address.
    pub fn info(&self) -> &ClusterFile {
        &self.info
    }

    /// The drives, in order (`drive-0` first).
    pub fn drives(&self) -> &[Node] {
        &self.info.drives
    }

    /// Where component `id` serves its metrics, if it does.
    pub fn metrics_addr(&self, id: NodeId) -> Option<&str> {
        self.info.node(id)?.metrics.as_deref()
    }

    /// The first manager's address.
    pub fn manager_addr(&self) -> &str {
        &self.info.manager.addr
    }

    /// The manager that serves now: the one whose address accepts connections (the others
    /// stand by and bind theirs only when they take the lead).
    pub fn leading_manager(&self) -> Option<NodeId> {
        self.info.manager_ids().find(|&id| {
            self.info.node(id).is_some_and(|n| {
                self.is_running(id) && std::net::TcpStream::connect(&n.addr).is_ok()
            })
        })
    }

    /// The component `id`.
    pub fn node(&self, id: NodeId) -> Result<&Node, ClusterError> {
        self.info.node(id).ok_or(ClusterError::NoSuchNode(id))
    }

    /// Drive `i`'s data directory: `data.blk` (object data), `meta.redb` and `keys/`.
    pub fn drive_dir(&self, i: usize) -> Result<&Path, ClusterError> {
        Ok(&self.node(NodeId::Drive(i))?.dir)
    }

    /// The drive serving on `addr` (as a file's layout names it).
    pub fn drive_at(&self, addr: &str) -> Option<NodeId> {
        self.info.drive_at(addr)
    }

    /// The admin's client config (`client.json`), for `NASD_CONFIG`.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("client.json")
    }

    /// Where component `id` writes its output.
    pub fn log_path(&self, id: NodeId) -> PathBuf {
        process::log_path(&self.dir, id)
    }

    /// Components found running from an earlier start, with their pids.
    pub fn adopted(&self) -> &[(NodeId, u32)] {
        &self.adopted
    }

    /// Components this start started although the cluster had run before.
    pub fn restarted(&self) -> &[NodeId] {
        &self.restarted
    }

    /// Whether this handle started any process (false: every component was running).
    pub fn started_any(&self) -> bool {
        self.procs.values().any(|p| matches!(p, Proc::Child(_)))
    }

    /// The pid of the process running `id`, if one does: it may have exited by itself, or
    /// been killed by someone else, since this handle started it.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        let dir = &self.info.node(id)?.dir;
        match self.procs.get(&id)? {
            // Until this handle reaps its child, the pid cannot be reused: alive and not a
            // zombie means it still runs.
            Proc::Child(ch) => process::child_runs(ch.id()).then(|| ch.id()),
            Proc::Adopted(pid) => runs_node(*pid, dir).then_some(*pid),
            Proc::Down => None,
        }
    }

    /// Whether a process runs `id`.
    pub fn is_running(&self, id: NodeId) -> bool {
        self.pid(id).is_some()
    }

    /// Stops `id` as an operator would: SIGTERM (a drive drains and flushes, the manager
    /// closes its store), SIGKILL after [`crate::process::STOP_GRACE_MS`].
    pub fn stop(&mut self, id: NodeId) -> Result<(), ClusterError> {
        self.node(id)?;
        let pid = self.pid(id).ok_or(ClusterError::NodeDown(id))?;
        process::stop_pid(pid);
        self.gone(id)
    }

    /// Kills `id` with SIGKILL, as a crash or power loss would end it, and waits until it is
    /// gone.
    pub fn kill(&mut self, id: NodeId) -> Result<(), ClusterError> {
        self.node(id)?;
        let pid = self.pid(id).ok_or(ClusterError::NodeDown(id))?;
        process::kill_pid(pid);
        self.gone(id)
    }

    /// Starts `id` again on its address and data, stopping it first if it runs, and returns
    /// once it serves.
    pub fn restart(&mut self, id: NodeId) -> Result<(), ClusterError> {
        self.node(id)?;
        if let Some(pid) = self.pid(id) {
            process::stop_pid(pid);
        }
        let r = self.spawn(id);
        self.write_pids()?;
        r
    }

    /// The admin's session config (the password `nasd up` generated).
    pub fn session_config(&self) -> Result<SessionConfig, ClusterError> {
        let c = ClientFile::load(&self.config_path())?;
        let pw_file = self.dir.join("admin.password");
        let password = std::fs::read_to_string(&pw_file).map_err(|source| ClusterError::Io {
            what: "reading",
            path: pw_file,
            source,
        })?;
        Ok(SessionConfig {
            manager: c.manager.clone(),
            ca_der: c.read_ca()?,
            user: c.password_user().to_string(),
            credential: Credential::Password(password.trim().into()),
            signing_key: None,
        })
    }

    /// Leaves the processes running when this value is dropped (`nasd up --background`; stop
    /// them with [`down`]).
    pub fn detach(mut self) {
        self.detached = true;
    }

    /// Records that `id` no longer runs.
    fn gone(&mut self, id: NodeId) -> Result<(), ClusterError> {
        self.replace(id, Proc::Down);
        self.write_pids()
    }

    /// Records what runs `id` now, reaping the process this handle started before if it has
    /// exited (so no zombie is left behind).
    fn replace(&mut self, id: NodeId, p: Proc) {
        if let Some(Proc::Child(mut old)) = self.procs.insert(id, p) {
            let _ = old.try_wait();
        }
    }

    /// Starts `id` (`nasd drive run` / `nasd manager run` on its directory and address, with
    /// its metrics server where `cluster.json` puts it) and
    /// waits until it serves. The process is recorded even when it fails to come up, so a
    /// drop stops it.
    fn spawn(&mut self, id: NodeId) -> Result<(), ClusterError> {
        let node = self.node(id)?.clone();
        let role = match id {
            NodeId::Manager | NodeId::ManagerN(_) => "manager",
            NodeId::Drive(_) => "drive",
        };
        let mut args: Vec<&OsStr> = vec![
            role.as_ref(),
            "run".as_ref(),
            "--data".as_ref(),
            node.dir.as_os_str(),
            "--listen".as_ref(),
            node.addr.as_ref(),
        ];
        if let Some(m) = &node.metrics {
            args.extend([OsStr::new("--metrics"), m.as_ref()]);
        }
        let wrapper = self.wrappers.get(&id).map_or(&[][..], Vec::as_slice);
        let mut s = process::spawn(
            &self.nasd_bin,
            wrapper,
            &self.dir,
            id,
            &args,
            self.background,
        )?;
        let r = process::wait_ready(&self.dir, id, &node.addr, &mut s);
        self.replace(id, Proc::Child(s.child));
        r
    }

    /// Writes `pids.json`: every component running now.
    fn write_pids(&self) -> Result<(), ClusterError> {
        let mut pids = vec![];
        for id in self.info.ids() {
            if let Some(pid) = self.pid(id) {
                pids.push((id.to_string(), pid));
            }
        }
        let text = serde_json::to_string_pretty(&Pids { pids }).expect("pids serialize") + "\n";
        Ok(nasd_private::write_file(
            &Pids::path(&self.dir),
            text.as_bytes(),
        )?)
    }

    /// Registers every drive (a no-op for drives the manager knows at the same address). The
    /// manager is given each drive's master key too, so it replaces the drive key: the
    /// `keys/drive.key` file left in the drive's directory no longer authorizes anything.
    fn register_drives(&self) -> Result<(), ClusterError> {
        let mut adds = vec![];
        for d in &self.info.drives {
            let read = |file: &str| {
                let path = d.dir.join("keys").join(file);
                std::fs::read_to_string(&path).map_err(|source| ClusterError::Io {
                    what: "reading the key file",
                    path,
                    source,
                })
            };
            adds.push((
                d.name.clone(),
                calls::DriveAdd {
                    addr: d.addr.clone(),
                    drive_key_file: read("drive.key")?,
                    master_key_file: read("master.key")?,
                },
            ));
        }
        let cfg = self.session_config()?;
        // A thread with a runtime of its own, so a caller inside an async runtime may start
        // a cluster too.
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|source| ClusterError::Io {
                        what: "starting a runtime to register drives in",
                        path: self.dir.clone(),
                        source,
                    })?;
                rt.block_on(register(cfg, adds))
            })
            .join()
            .expect("the registration thread does not panic")
        })
    }
}

async fn register(
    cfg: SessionConfig,
    adds: Vec<(String, calls::DriveAdd)>,
) -> Result<(), ClusterError> {
    let manager = cfg.manager.clone();
    let c = nasd_client::files::Client::connect(cfg)
        .await
        .map_err(|source| ClusterError::Manager {
            what: format!("logging in to the manager at {manager}"),
            source: Box::new(source),
        })?;
    for (name, add) in adds {
        c.call("/", add)
            .await
            .map_err(|source| ClusterError::Manager {
                what: format!("registering {name}"),
                source: Box::new(source),
            })?;
    }
    Ok(())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        // Manager first, then drives (drives flush on SIGTERM).
        let mut ids = self.info.ids();
        ids.rotate_right(1);
        ids[1..].reverse();
        for id in ids {
            if let Some(pid) = self.pid(id) {
                process::stop_pid(pid);
            }
            self.replace(id, Proc::Down);
        }
        let _ = std::fs::remove_file(Pids::path(&self.dir));
        // After the manager, which closes its connection on the way out.
        if let Err(e) = crate::postgres::stop(&self.dir) {
            eprintln!("nasd: stopping the cluster's PostgreSQL: {e}");
        }
    }
}

/// The components an earlier start left running: (component, pid) from `pids.json`, each
/// checked to be the nasd process serving that component's directory.
fn running(dir: &Path) -> Vec<(NodeId, u32)> {
    let Ok(t) = std::fs::read_to_string(Pids::path(dir)) else {
        return vec![];
    };
    let Ok(Some(info)) = ClusterFile::load(dir) else {
        return vec![];
    };
    let p: Pids = serde_json::from_str(&t).unwrap_or_default();
    p.pids
        .into_iter()
        .filter_map(|(name, pid)| {
            let id: NodeId = name.parse().ok()?;
            let node = info.node(id)?;
            runs_node(pid, &node.dir).then_some((id, pid))
        })
        .collect()
}

/// Stops a cluster left running in `dir` (`nasd up --background`): every process `pids.json`
/// lists that is still a nasd process, last started first (managers standing by before the
/// one that serves), each SIGTERM then SIGKILL after
/// [`crate::process::STOP_GRACE_MS`]; calls `stopped` with each one's name and pid once it is
/// gone; then stops the cluster's private PostgreSQL, if it has one running
/// (`stopped_postgres`); removes `pids.json`.
pub fn down(
    dir: &Path,
    mut stopped: impl FnMut(&str, u32),
    stopped_postgres: impl FnOnce(),
) -> Result<(), ClusterError> {
    let p = Pids::path(dir);
    let text = std::fs::read_to_string(&p).map_err(|source| ClusterError::NotRunning {
        dir: dir.to_path_buf(),
        source,
    })?;
    let pids: Pids = serde_json::from_str(&text).map_err(|source| ClusterError::Malformed {
        path: p.clone(),
        source,
    })?;
    // Last started first; of several managers, the ones standing by before the one that
    // serves, so that none takes over (and starts serving) only to be stopped.
    let info = ClusterFile::load(dir).ok().flatten();
    let serves = |name: &str| {
        let node = name
            .parse()
            .ok()
            .and_then(|id| info.as_ref()?.node(id).cloned());
        node.is_some_and(|n| std::net::TcpStream::connect(&n.addr).is_ok())
    };
    let mut order: Vec<&(String, u32)> = pids.pids.iter().rev().collect();
    // Keys are computed once each: whether a manager serves costs a connection attempt.
    order.sort_by_cached_key(|(name, _)| match name.starts_with("manager") {
        true if !serves(name) => 0,
        true => 1,
        false => 2,
    });
    for (name, pid) in order {
        if process::alive(*pid) && process::is_nasd(*pid) {
            process::stop_pid(*pid);
            stopped(name, *pid);
        }
    }
    if crate::postgres::stop(dir)? {
        stopped_postgres();
    }
    std::fs::remove_file(&p).map_err(|source| ClusterError::Io {
        what: "removing",
        path: p,
        source,
    })
}
