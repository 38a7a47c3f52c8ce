//! `nasd up` and `nasd down`: a whole local cluster, each drive and the manager its own process
//! (this binary run as `drive run` / `manager run`), so one can be stopped alone. The cluster
//! itself — its files, processes and restarts — is [`nasd_cluster`]; this module prints.
//!
//! The first `up` initializes everything; later ones start the same cluster again, starting
//! only the components that are not running (a drive killed alone is restarted alone) and
//! saying which.

use anyhow::Context as _;
use nasd_cluster::{Cluster, Options};
use std::path::{Path, PathBuf};

/// Starts (first time: initializes) the cluster in `dir` with this executable, saying so on
/// stderr when `verbose` and the cluster is new.
pub fn start(dir: &Path, options: &Options, verbose: bool) -> anyhow::Result<Cluster> {
    let dir = Cluster::prepare(dir)?;
    if verbose && !Cluster::is_initialized(&dir) {
        eprintln!(
            "initializing a cluster of {} drive(s) in {}",
            options.drives,
            dir.display()
        );
    }
    let exe = std::env::current_exe().context("locating the nasd binary")?;
    Ok(Cluster::start(&exe, &dir, options)?)
}

pub fn up(data: Option<PathBuf>, opts: Options) -> anyhow::Result<()> {
    let dir = data.unwrap_or_else(crate::cmd_fs::default_data_dir);
    let background = opts.background;
    let c = start(&dir, &opts, true)?;
    for id in c.restarted() {
        println!("restarted {id} (it was not running)");
    }
    if !c.started_any() {
        println!("every component was already running");
    }
    println!("nasd cluster up in {}", c.dir().display());
    println!("  manager  {}", c.manager_addr());
    for d in c.drives() {
        println!("  {}  {}", d.name, d.addr);
    }
    println!("  config   {}", c.config_path().display());
    let default = crate::cmd_fs::default_data_dir();
    if std::fs::canonicalize(&default).ok().as_deref() != Some(c.dir()) {
        println!("  export NASD_CONFIG={}", c.config_path().display());
    }
    if background {
        println!(
            "running in the background; stop with `nasd down --data {}`",
            c.dir().display()
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
    nasd_cluster::down(&dir, |name, pid| println!("stopped {name} (pid {pid})"))?;
    Ok(())
}
