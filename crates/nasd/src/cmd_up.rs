//! `nasd up` and `nasd down`: a whole local cluster, each drive and the manager its own process
//! (this binary run as `drive run` / `manager run`), so one can be stopped alone. The cluster
//! itself — its files, processes and restarts — is [`nasd_cluster`]; this module prints.
//!
//! The first `up` initializes everything; later ones start the same cluster again, starting
//! only the components that are not running (a drive killed alone is restarted alone) and
//! saying which. `up` makes its cluster the current one (the per-user `current` file of
//! [`nasd_client::config`]), so later commands reach it without `NASD_CONFIG`; `up` and `down`
//! without `--data` act on `$NASD_DATA`, else the current cluster, else
//! `~/.local/share/nasd`. Every process serves its metrics and health on a port of its own,
//! recorded beside its address (`cluster.json`; the gateway's in `s3-gateway.metrics`).

use anyhow::{bail, Context as _};
use nasd_client::config::{ConfigSearch, ConfigSource};
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

/// The cluster `up` and `down` act on without `--data`: `$NASD_DATA`, else the current
/// cluster's directory (the one holding the current config, if it is a cluster's), else the
/// default.
fn default_cluster_dir(search: &ConfigSearch) -> PathBuf {
    if search.data.is_none() && search.config.is_none() {
        if let Ok(found) = search.find() {
            if let (ConfigSource::Current(_), Some(dir)) = (&found.source, found.path.parent()) {
                if Cluster::is_initialized(dir) {
                    return dir.to_path_buf();
                }
            }
        }
    }
    search.default_data_dir()
}

/// Drives of a new cluster when `--drives` is not given.
pub const DRIVES_DEFAULT: usize = 2;

/// `nasd up`. `drives`: the `--drives` given, if any (it must match an existing cluster's);
/// `s3`: the gateway to start, if any.
pub fn up(
    data: Option<PathBuf>,
    drives: Option<usize>,
    s3: Option<crate::cmd_s3::Up>,
    opts: Options,
) -> anyhow::Result<()> {
    let search = ConfigSearch::from_env();
    let dir = data.unwrap_or_else(|| default_cluster_dir(&search));
    if let (Some(n), Some(info)) = (drives, nasd_cluster::ClusterFile::load(&dir)?) {
        if info.drives.len() != n {
            bail!(
                "{} holds a cluster of {} drive(s); --drives {n} applies only to a new cluster \
                 (give another --data, or leave --drives out)",
                dir.display(),
                info.drives.len()
            );
        }
    }
    let background = opts.background;
    let c = start(&dir, &opts, true)?;
    for id in c.restarted() {
        println!("restarted {id} (it was not running)");
    }
    if !c.started_any() {
        println!("every component was already running");
    }
    println!("nasd cluster up in {}", c.dir().display());
    let metrics = |m: &Option<String>| match m {
        Some(m) => format!("  (metrics http://{m}/metrics)"),
        None => String::new(),
    };
    for id in c.info().manager_ids() {
        let m = c.node(id)?;
        let role = match c.leading_manager() {
            Some(l) if l != id => "  (standing by)",
            _ => "",
        };
        println!("  {}  {}{}{role}", m.name, m.addr, metrics(&m.metrics));
    }
    for d in c.drives() {
        println!("  {}  {}{}", d.name, d.addr, metrics(&d.metrics));
    }
    println!("  config   {}", c.config_path().display());
    match search.set_current(&c.config_path()) {
        Ok(cur) => println!(
            "  the current cluster for later commands (recorded in {})",
            cur.display()
        ),
        Err(e) => {
            eprintln!("nasd: not recording the current cluster: {e:#}");
            println!("  export NASD_CONFIG={}", c.config_path().display());
        }
    }
    // An explicit choice wins over the current cluster: say so when it names another one.
    if let Ok(found) = search.find() {
        let same = std::fs::canonicalize(&found.path).ok() == Some(c.config_path());
        if !same && matches!(found.source, ConfigSource::Env | ConfigSource::Data) {
            let var = match found.source {
                ConfigSource::Env => "NASD_CONFIG",
                _ => "NASD_DATA",
            };
            println!(
                "  note: {var} is set, so commands in this shell use {} instead \
                 (export NASD_CONFIG={} to use this cluster)",
                found.path.display(),
                c.config_path().display()
            );
        }
    }
    if let Some(g) = &s3 {
        let (pid, m) = crate::cmd_s3::start(c.dir(), g)?;
        let addr = &g.listen;
        println!(
            "  s3       http://{addr} (pid {pid}; buckets under nasd:{}){}",
            crate::cmd_s3::ROOT_DEFAULT,
            metrics(&Some(m))
        );
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
    crate::runtime()?.block_on(crate::terminated());
    eprintln!("stopping the cluster");
    crate::cmd_s3::stop(c.dir());
    drop(c);
    Ok(())
}

pub fn down(data: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = data.unwrap_or_else(|| default_cluster_dir(&ConfigSearch::from_env()));
    if let Some(pid) = crate::cmd_s3::stop(&dir) {
        println!("stopped the S3 gateway (pid {pid})");
    }
    nasd_cluster::down(
        &dir,
        |name, pid| println!("stopped {name} (pid {pid})"),
        || println!("stopped the cluster's PostgreSQL"),
    )?;
    Ok(())
}
