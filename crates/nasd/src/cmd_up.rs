//! `nasd up` and `nasd down`: a whole local cluster, each drive and the manager its own process
//! (this binary run as `drive run` / `manager run`), so one can be stopped alone.
//!
//! ```text
//! DATA/cluster.json     drives and manager: directories and fixed loopback addresses
//! DATA/client.json      the client config the other commands read (see cmd_fs)
//! DATA/admin.password   the admin's generated password (mode 0600)
//! DATA/pids.json        the running processes (removed by `nasd down`)
//! DATA/drive-N/, DATA/manager/, DATA/logs/*.log
//! ```
//! The first `up` initializes everything; later ones start the same cluster again, starting
//! only the components that are not running (a drive killed alone is restarted alone) and
//! saying which. DATA and `logs/` are mode 0700 and every file `up` writes is 0600, whatever
//! the umask: they hold the admin's password, keys and the data itself.

use crate::cmd_fs::{ClientFile, CLIENT_CONFIG_VERSION};
use anyhow::{bail, Context as _};
use nasd_client::session::SessionConfig;
use nasd_proto::manager::{Credential, MgrRequest};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started process has to accept connections.
const READY_TIMEOUT_MS: u64 = 20_000;
/// How long `down` waits after SIGTERM before SIGKILL.
const STOP_GRACE_MS: u64 = 10_000;
/// Mode of every directory `up` makes, and of every file it writes.
pub const DRIVES_MAX: usize = 64;

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Node {
    pub name: String,
    pub dir: PathBuf,
    pub addr: String,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct ClusterFile {
    pub version: u32,
    pub manager: Node,
    pub drives: Vec<Node>,
}

#[derive(Serialize, Deserialize, Debug, Default)]
pub struct Pids {
    pub pids: Vec<(String, u32)>,
}

/// A running cluster. Dropping it stops every process it runs — those it started and those it
/// found running — unless detached.
pub struct Cluster {
    pub dir: PathBuf,
    pub info: ClusterFile,
    pub children: Vec<(String, Child)>,
    /// Components found running from an earlier `up`: (name, pid).
    pub adopted: Vec<(String, u32)>,
    /// Components this `up` started although the cluster had run before (it was down).
    pub restarted: Vec<String>,
    detached: bool,
}

fn free_port() -> anyhow::Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.to_string())
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// Whether `pid` is a nasd process (so a reused pid is never signalled).
fn is_nasd(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains("nasd"))
        .unwrap_or(false)
}

/// Whether `pid` is alive and is the nasd process serving `dir` (its `--data` argument), so a
/// reused pid is never taken for a running component.
fn runs_node(pid: u32, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let dir = dir.as_os_str().as_encoded_bytes();
    alive(pid) && is_nasd(pid) && args.contains(&dir) && !is_zombie(pid)
}

/// A process that exited but was not reaped yet.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Makes `dir` (and missing parents) and leaves it mode 0700 whatever the umask.
fn private_dir(dir: &Path) -> anyhow::Result<()> {
    Ok(nasd_private::create_dir(dir)?)
}

/// Writes a file of the cluster, mode 0600 whatever the umask.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    Ok(nasd_private::write_file(path, text.as_bytes())?)
}

/// What `nasd up` sets up the first time it runs in a directory.
#[derive(Clone, Debug)]
pub struct UpOptions {
    pub drives: usize,
    /// Capacity of each drive (default: the file system's free space).
    pub drive_capacity_bytes: Option<u64>,
}

impl UpOptions {
    pub fn drives(drives: usize) -> UpOptions {
        UpOptions {
            drives,
            drive_capacity_bytes: None,
        }
    }
}

fn init(dir: &Path, o: &UpOptions) -> anyhow::Result<ClusterFile> {
    let drives = o.drives;
    if drives == 0 || drives > DRIVES_MAX {
        bail!("--drives must be between 1 and {DRIVES_MAX}");
    }
    private_dir(dir)?;
    let mut nodes = vec![];
    for i in 0..drives {
        let d = dir.join(format!("drive-{i}"));
        let mut init = nasd_drive::InitOptions::new(&d);
        init.capacity_bytes = o.drive_capacity_bytes;
        nasd_drive::init(&init)
            .with_context(|| format!("initializing the drive in {}", d.display()))?;
        nodes.push(Node {
            name: format!("drive-{i}"),
            dir: d,
            addr: free_port()?,
        });
    }
    let mut pw = [0u8; 16];
    nasd_crypto::random_bytes(&mut pw);
    let password = hex::encode(pw);
    let pw_file = dir.join("admin.password");
    nasd_client::auth::write_secret_file(&pw_file, password.as_bytes())?;
    let mdir = dir.join("manager");
    let maddr = free_port()?;
    nasd_manager::setup::init(&nasd_manager::setup::InitOptions {
        dir: mdir.clone(),
        listen: maddr.clone(),
        admin_user: "admin".into(),
        admin_password: password,
        names: vec![],
        policy: Default::default(),
    })?;
    let info = ClusterFile {
        version: 1,
        manager: Node {
            name: "manager".into(),
            dir: mdir.clone(),
            addr: maddr.clone(),
        },
        drives: nodes,
    };
    write_private(
        &dir.join("cluster.json"),
        &(serde_json::to_string_pretty(&info)? + "\n"),
    )?;
    let client = ClientFile {
        version: CLIENT_CONFIG_VERSION,
        manager: maddr,
        ca: mdir.join("tls/ca.der"),
        user: "admin".into(),
        password_file: Some(pw_file),
        password_user: Some("admin".into()),
    };
    write_private(
        &dir.join("client.json"),
        &(serde_json::to_string_pretty(&client)? + "\n"),
    )?;
    Ok(info)
}

fn spawn(dir: &Path, name: &str, args: &[&str], detach: bool) -> anyhow::Result<Child> {
    let logs = dir.join("logs");
    private_dir(&logs)?;
    let log = nasd_private::open_append(&logs.join(format!("{name}.log")))?;
    let mut cmd = Command::new(std::env::current_exe().context("locating the nasd binary")?);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if detach {
        use std::os::unix::process::CommandExt;
        // Its own process group: a ctrl-c in the terminal that ran `up --background` does not
        // reach it.
        cmd.process_group(0);
    }
    cmd.spawn().with_context(|| format!("starting {name}"))
}

fn log_tail(dir: &Path, name: &str) -> String {
    let t =
        std::fs::read_to_string(dir.join("logs").join(format!("{name}.log"))).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

fn wait_ready(dir: &Path, name: &str, addr: &str, child: &mut Child) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            bail!(
                "{name} exited ({st}) before it served on {addr}:\n{}",
                log_tail(dir, name)
            );
        }
        if t0.elapsed() > Duration::from_millis(READY_TIMEOUT_MS) {
            bail!(
                "{name} did not listen on {addr} within {READY_TIMEOUT_MS} ms:\n{}",
                log_tail(dir, name)
            );
        }
        std::thread::sleep(Duration::from_millis(30));
    }
}

impl Cluster {
    /// Initializes (first time) and starts the cluster in `dir`, registers its drives.
    pub fn start(dir: &Path, drives: usize, verbose: bool) -> anyhow::Result<Cluster> {
        Self::start_opts(dir, drives, verbose, false)
    }

    pub fn start_opts(
        dir: &Path,
        drives: usize,
        verbose: bool,
        detach: bool,
    ) -> anyhow::Result<Cluster> {
        Self::start_with(dir, &UpOptions::drives(drives), verbose, detach)
    }

    /// Like [`Cluster::start_opts`], with every option of a first `nasd up`.
    pub fn start_with(
        dir: &Path,
        opts: &UpOptions,
        verbose: bool,
        detach: bool,
    ) -> anyhow::Result<Cluster> {
        let drives = opts.drives;
        private_dir(dir)?;
        let dir = std::fs::canonicalize(dir)?;
        let running = Self::running(&dir);
        let info = match std::fs::read_to_string(dir.join("cluster.json")) {
            Ok(t) => serde_json::from_str(&t)
                .with_context(|| format!("{}/cluster.json", dir.display()))?,
            Err(_) => {
                if verbose {
                    eprintln!(
                        "initializing a cluster of {drives} drive(s) in {}",
                        dir.display()
                    );
                }
                init(&dir, opts)?
            }
        };
        let mut c = Cluster {
            dir: dir.clone(),
            info: info.clone(),
            children: vec![],
            adopted: vec![],
            restarted: vec![],
            detached: false,
        };
        let ran_before = dir.join("pids.json").exists();
        for d in &info.drives {
            let dd = d.dir.to_string_lossy().to_string();
            let args = ["drive", "run", "--data", &dd, "--listen", &d.addr];
            c.start_node(&d.name, &d.addr, &args, &running, ran_before, detach)?;
        }
        let m = &info.manager;
        let md = m.dir.to_string_lossy().to_string();
        let args = ["manager", "run", "--data", &md, "--listen", &m.addr];
        c.start_node(&m.name, &m.addr, &args, &running, ran_before, detach)?;
        c.write_pids()?;
        crate::runtime()?.block_on(c.register_drives())?;
        Ok(c)
    }

    /// The components an earlier `up` started that still run: (name, pid) from `pids.json`,
    /// each checked to be the nasd process serving that component's directory.
    fn running(dir: &Path) -> Vec<(String, u32)> {
        let Ok(t) = std::fs::read_to_string(dir.join("pids.json")) else {
            return vec![];
        };
        let Ok(info) = std::fs::read_to_string(dir.join("cluster.json"))
            .map_err(anyhow::Error::from)
            .and_then(|t| Ok(serde_json::from_str::<ClusterFile>(&t)?))
        else {
            return vec![];
        };
        let p: Pids = serde_json::from_str(&t).unwrap_or_default();
        let node_dir = |name: &str| {
            std::iter::once(&info.manager)
                .chain(&info.drives)
                .find(|n| n.name == name)
                .map(|n| n.dir.clone())
        };
        p.pids
            .into_iter()
            .filter(|(name, pid)| node_dir(name).is_some_and(|d| runs_node(*pid, &d)))
            .collect()
    }

    /// Adopts component `name` if it runs, else starts it (`nasd ARGS`) and waits until it
    /// serves on `addr`.
    fn start_node(
        &mut self,
        name: &str,
        addr: &str,
        args: &[&str],
        running: &[(String, u32)],
        ran_before: bool,
        detach: bool,
    ) -> anyhow::Result<()> {
        if let Some((_, pid)) = running.iter().find(|(n, _)| n == name) {
            self.adopted.push((name.to_string(), *pid));
            return Ok(());
        }
        let mut ch = spawn(&self.dir, name, args, detach)?;
        let r = wait_ready(&self.dir, name, addr, &mut ch);
        self.children.push((name.to_string(), ch));
        if ran_before {
            self.restarted.push(name.to_string());
        }
        r
    }

    fn write_pids(&self) -> anyhow::Result<()> {
        let mut pids: Vec<(String, u32)> = self.adopted.clone();
        pids.extend(self.children.iter().map(|(n, ch)| (n.clone(), ch.id())));
        let p = Pids { pids };
        write_private(
            &self.dir.join("pids.json"),
            &(serde_json::to_string_pretty(&p)? + "\n"),
        )
    }

    /// Registers every drive (a no-op for drives the manager knows at the same address). The
    /// manager is given each drive's master key too, so it replaces the drive key: the
    /// `keys/drive.key` file left in the drive's directory no longer authorizes anything.
    async fn register_drives(&self) -> anyhow::Result<()> {
        let c = nasd_client::files::Client::connect(self.session_config()?).await?;
        for d in &self.info.drives {
            let key = std::fs::read_to_string(d.dir.join("keys/drive.key"))
                .with_context(|| format!("{}: the drive key file", d.name))?;
            let master = std::fs::read_to_string(d.dir.join("keys/master.key"))
                .with_context(|| format!("{}: the master key file", d.name))?;
            c.request(
                "/",
                MgrRequest::DriveAdd {
                    addr: d.addr.clone(),
                    drive_key_file: key,
                    master_key_file: master,
                },
            )
            .await
            .with_context(|| format!("registering {}", d.name))?;
        }
        Ok(())
    }

    /// The admin's session config.
    pub fn session_config(&self) -> anyhow::Result<SessionConfig> {
        let c = crate::cmd_fs::load_config(&self.dir.join("client.json"))?;
        let password = std::fs::read_to_string(self.dir.join("admin.password"))?;
        Ok(SessionConfig {
            manager: c.manager,
            ca_der: std::fs::read(&c.ca)?,
            user: c.user,
            credential: Credential::Password(password.trim().to_string()),
            signing_key: None,
        })
    }

    /// Leaves the processes running when this value is dropped (`up --background`).
    pub fn detach(mut self) {
        self.detached = true;
    }
}

fn stop_pid(pid: u32) {
    // SAFETY: sending a signal to a process we started (or checked with `is_nasd`).
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    while alive(pid) && t0.elapsed() < Duration::from_millis(STOP_GRACE_MS) {
        // Reap it if it is our child, so `alive` sees it gone.
        // SAFETY: waitpid with WNOHANG on a pid; harmless if it is not our child.
        unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
        std::thread::sleep(Duration::from_millis(20));
    }
    if alive(pid) {
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.detached {
            self.children.clear();
            return;
        }
        // Manager first, then drives (drives flush on SIGTERM).
        let nodes: Vec<Node> = std::iter::once(self.info.manager.clone())
            .chain(self.info.drives.iter().rev().cloned())
            .collect();
        for n in nodes {
            if let Some((_, ch)) = self.children.iter_mut().find(|(c, _)| *c == n.name) {
                stop_pid(ch.id());
                let _ = ch.wait();
            } else if let Some((_, pid)) = self.adopted.iter().find(|(a, _)| *a == n.name) {
                if runs_node(*pid, &n.dir) {
                    stop_pid(*pid);
                }
            }
        }
        let _ = std::fs::remove_file(self.dir.join("pids.json"));
    }
}

pub fn up(data: Option<PathBuf>, opts: UpOptions, background: bool) -> anyhow::Result<()> {
    let dir = data.unwrap_or_else(crate::cmd_fs::default_data_dir);
    let c = Cluster::start_with(&dir, &opts, true, background)?;
    for name in &c.restarted {
        println!("restarted {name} (it was not running)");
    }
    if c.children.is_empty() {
        println!("every component was already running");
    }
    println!("nasd cluster up in {}", c.dir.display());
    println!("  manager  {}", c.info.manager.addr);
    for d in &c.info.drives {
        println!("  {}  {}", d.name, d.addr);
    }
    println!("  config   {}", c.dir.join("client.json").display());
    let default = crate::cmd_fs::default_data_dir();
    if std::fs::canonicalize(&default).ok().as_deref() != Some(c.dir.as_path()) {
        println!(
            "  export NASD_CONFIG={}",
            c.dir.join("client.json").display()
        );
    }
    if background {
        println!(
            "running in the background; stop with `nasd down --data {}`",
            c.dir.display()
        );
        c.detach();
        return Ok(());
    }
    println!("ctrl-c stops the cluster");
    crate::runtime()?.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    });
    eprintln!("stopping the cluster");
    drop(c);
    Ok(())
}

pub fn down(data: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = data.unwrap_or_else(crate::cmd_fs::default_data_dir);
    let p = dir.join("pids.json");
    let text = std::fs::read_to_string(&p)
        .with_context(|| format!("no running cluster in {} (no pids.json)", dir.display()))?;
    let pids: Pids = serde_json::from_str(&text).with_context(|| format!("{}", p.display()))?;
    for (name, pid) in pids.pids.iter().rev() {
        if alive(*pid) && is_nasd(*pid) {
            stop_pid(*pid);
            println!("stopped {name} (pid {pid})");
        }
    }
    std::fs::remove_file(&p)?;
    Ok(())
}
