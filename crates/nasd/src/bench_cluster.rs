//! `nasd bench cluster`: PUT and GET throughput of whole files through the client library,
//! per file layout, with N concurrent clients (each its own `Client`: session, capability
//! cache and drive connections, like warp's `--concurrent`), for large files (64 MiB; 16 MiB
//! with `--quick`) and 4 KiB ones.
//!
//! Method: for each layout the bench makes a directory whose new files get that layout
//! (`layout_set`). A round visits every layout in turn — forward in even rounds, backward in
//! odd ones, so no layout always runs first — and runs, for that layout, PUT of large files,
//! PUT of small files, then GET of the files just written (each compared with what was
//! written). Every cell is time-boxed to duration/rounds; each worker finishes the operation
//! it is in, so every worker does at least one. A cell's throughput is the median over
//! rounds of bytes moved over the round's wall time: on a shared, noisy machine, the ratios
//! between the layouts of one run are what count, not the absolute figures. The files are
//! removed after each round, outside the timed windows.
//!
//! `--degraded K` adds, in each round, GETs of the same files with K drives stopped
//! (SIGTERM): the drives of the first K components of the round's first large file (under
//! `rs:K+M`, data components, so reads must reconstruct), stopped after the healthy GETs and
//! restarted before the next layout runs. Only a cluster the bench started itself can be
//! stopped, so `--degraded` needs one (no client config, or `--drives N`). A layout that
//! cannot survive K lost drives (single, raid0:N, mirror:N with N <= K, ...) is not read
//! degraded; it says so instead.
//!
//! `--protection LIST` runs every layout under each end-to-end protection in LIST (default
//! `plain,encrypted`): the options a directory's layout spec takes after its geometry, several
//! joined with `+` (`encrypted+auth=1`, `rand`, `comp+block=4K`; `default` for the cluster's
//! default). A cell is then named by its layout and protection (`rs:4+2,encrypted`), and the
//! ratio of an encrypted cell to the plaintext one of the same layout is what issue 10 asks.
//!
//! `--quota BYTES` gives the bench's user a quota for the run (the one it had, if any, comes
//! back after): every write is then escrowed against it and its capabilities' regions bound
//! (seed 002 §3.2), which is how the cost of quota escrow is measured against a run without.
//!
//! Layouts are parsed before anything runs (`nasd_ec::Layout`'s text form: `single`,
//! `raid0:N[/UNIT]`, `mirror:N`, `rs:K+M[/UNIT]`, `raid6x:K[/UNIT]`). A layout the cluster
//! cannot serve (more drives than it has, an I/O error) is reported with its error and left out of later rounds; the other layouts go on,
//! and the command exits non-zero at the end. A benchmark, not a test: it asserts nothing
//! about speed.

use crate::cmd_fs::{config_path, session_config};
use anyhow::{bail, Context as _};
use clap::Args;
use nasd_client::files::{Client, FsError};
use nasd_client::pool::DOWN_FOR_MS;
use nasd_client::session::SessionConfig;
use nasd_cluster::{pseudo_random, Cluster, NodeId, Options};
use nasd_proto::manager::calls;
use nasd_proto::manager::Credential;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A large file.
const LARGE_BYTES: usize = 64 << 20;
/// A large file with `--quick`.
const LARGE_BYTES_QUICK: usize = 16 << 20;
/// A small file.
const SMALL_BYTES: usize = 4 << 10;
const ROUNDS: usize = 5;
const ROUNDS_QUICK: usize = 3;
/// Seconds of measurement per cell, over all its rounds (also `nasd bench meta`'s).
pub(crate) const DURATION_S: f64 = 10.0;
pub(crate) const DURATION_S_QUICK: f64 = 1.0;
pub(crate) const DURATION_S_MAX: f64 = 3600.0;
/// Concurrent clients a bench runs at most (also `nasd bench meta`'s).
pub(crate) const WORKERS_MAX: u16 = 64;
/// How long, after restarting stopped drives, the bench waits for the manager to see every
/// drive healthy again (it checks every 2 s by default).
const HEALTHY_WAIT_MS: u64 = 15_000;
/// Between two drive lists while waiting for the drives to be healthy.
const HEALTHY_POLL_MS: u64 = 100;
/// Waited past the clients' [`DOWN_FOR_MS`] after stopped drives come back.
const DOWN_MARGIN_MS: u64 = 200;

#[derive(Args, Debug)]
pub struct BenchClusterArgs {
    /// Large files of 16 MiB instead of 64 MiB, 1 s per cell instead of 10, 3 rounds instead
    /// of 5: finishes in seconds.
    #[arg(long)]
    pub quick: bool,
    /// One JSON object per cell on stdout: layout, op, size_bytes, workers, drives_down,
    /// rounds, count, mib_per_s, ops_per_s, manager_round_trips_per_op (a failed layout:
    /// layout, error; a layout not read degraded: layout, drives_down, skipped).
    #[arg(long)]
    pub json: bool,
    /// File layouts to compare, comma-separated: single, raid0:N, mirror:N, rs:K+M,
    /// raid6x:K (raid0, rs and raid6x take a stripe unit: rs:4+2/1M).
    #[arg(long, value_delimiter = ',', default_value = "single", value_parser = parse_layout)]
    pub layout: Vec<LayoutArg>,
    /// End-to-end protections to run each layout under, comma-separated; each is layout-spec
    /// options joined with `+` (plain, encrypted, mt, rand, comp, auth=1|2|3, block=4K..64K),
    /// or `default` (the cluster's).
    #[arg(long, value_delimiter = ',', default_value = "plain,encrypted", value_parser = parse_protection)]
    pub protection: Vec<String>,
    /// Concurrent clients, each with its own session and drive connections.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=WORKERS_MAX as i64))]
    pub workers: u16,
    /// Seconds of measurement per cell (layout x operation x size), split over the rounds
    /// (default 10; 1 with --quick).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Also GET with K drives stopped, in every round (needs a cluster the bench starts).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub degraded: usize,
    /// Start a temporary cluster of N drives for the run, even when a cluster is configured
    /// (default: the configured cluster, else a temporary one with as many drives as the
    /// layouts need).
    #[arg(long, value_name = "N")]
    pub drives: Option<usize>,
    /// Give the bench's user (an admin) a quota of BYTES for the run, so every write is
    /// escrowed against it (suffixes K, M, G, T); its own quota, if any, is put back after.
    #[arg(long, value_name = "BYTES", value_parser = crate::parse::bytes)]
    pub quota: Option<u64>,
}

/// One `--layout` entry: what `layout_set` is given, checked here so a typo fails before a
/// cluster starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutArg {
    spec: String,
    geometry: nasd_ec::Layout,
}

impl std::fmt::Display for LayoutArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.spec)
    }
}

/// One `--protection` entry as layout-spec options (`+` becomes `,`; `default`: none).
fn parse_protection(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s == "default" {
        return Ok(String::new());
    }
    let ok = |o: &str| {
        !o.is_empty()
            && o.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '=' | '@' | '_' | '-'))
    };
    if !s.split('+').all(ok) {
        return Err(format!(
            "{s:?}: options joined with '+' (plain, encrypted, mt, rand, comp, auth=N, block=NK)"
        ));
    }
    Ok(s.replace('+', ","))
}

fn parse_layout(s: &str) -> Result<LayoutArg, String> {
    let geometry: nasd_ec::Layout = s.parse().map_err(|e| format!("{e}"))?;
    Ok(LayoutArg {
        spec: s.trim().to_string(),
        geometry,
    })
}

impl LayoutArg {
    /// Drives a temporary cluster needs for this layout: one per component.
    fn drives_needed(&self) -> usize {
        self.geometry
            .components()
            .clamp(1, nasd_cluster::DRIVES_MAX)
    }

    /// Whether a file of this layout can be read with `down` of its drives stopped.
    fn survives(&self, down: usize) -> bool {
        down <= self.geometry.tolerated_failures()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Put,
    Get,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
        }
    }
}

/// A cell: what is measured, in one layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CellKey {
    op: Op,
    size_bytes: u64,
    /// Drives stopped while it runs.
    drives_down: usize,
}

/// One round of one cell.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub ops: u64,
    pub bytes: u64,
    pub secs: f64,
    pub manager_round_trips: u64,
}

/// What the run is.
struct Plan {
    layouts: Vec<LayoutArg>,
    workers: usize,
    rounds: usize,
    /// Time box of one cell in one round.
    cell_round: Duration,
    large_bytes: usize,
    /// Drives stopped for the degraded GETs (0: none).
    degraded: usize,
}

impl Plan {
    fn new(a: &BenchClusterArgs) -> anyhow::Result<Plan> {
        let duration = a.duration.unwrap_or(if a.quick {
            DURATION_S_QUICK
        } else {
            DURATION_S
        });
        if !(duration > 0.0 && duration <= DURATION_S_MAX) {
            bail!(
                "--duration {duration}: seconds per cell, more than 0 and at most {DURATION_S_MAX}"
            );
        }
        if let Some(n) = a.drives {
            if n == 0 || n > nasd_cluster::DRIVES_MAX {
                bail!("--drives {n}: between 1 and {}", nasd_cluster::DRIVES_MAX);
            }
            if a.degraded >= n {
                bail!("--degraded {}: fewer than the {n} drives", a.degraded);
            }
        }
        let rounds = if a.quick { ROUNDS_QUICK } else { ROUNDS };
        // Every layout under every protection, layouts outermost.
        let layouts = a
            .layout
            .iter()
            .flat_map(|l| {
                a.protection.iter().map(move |p| LayoutArg {
                    spec: match p.as_str() {
                        "" => l.spec.clone(),
                        p => format!("{},{p}", l.spec),
                    },
                    geometry: l.geometry,
                })
            })
            .collect();
        Ok(Plan {
            layouts,
            workers: a.workers as usize,
            rounds,
            cell_round: Duration::from_secs_f64(duration / rounds as f64),
            large_bytes: if a.quick {
                LARGE_BYTES_QUICK
            } else {
                LARGE_BYTES
            },
            degraded: a.degraded,
        })
    }

    /// Drives of a temporary cluster: the widest layout's, and more than `--degraded`.
    fn drives_needed(&self) -> usize {
        let widest = self
            .layouts
            .iter()
            .map(LayoutArg::drives_needed)
            .max()
            .unwrap_or(1);
        widest.max(self.degraded + 1).min(nasd_cluster::DRIVES_MAX)
    }
}

/// A layout under measurement.
struct LayoutRun {
    arg: LayoutArg,
    dir: String,
    /// Why the layout could not be measured; it is skipped from then on.
    error: Option<String>,
    /// Each cell's rounds, cells in the order they first ran.
    cells: Vec<(CellKey, Vec<Sample>)>,
}

/// A cluster the bench started and stops at the end (dropped before its directory).
struct OwnCluster {
    cluster: Cluster,
    _dir: tempfile::TempDir,
}

/// `nasd bench cluster`: against the configured cluster, or a temporary one when there is no
/// client config or `--drives` asks for one.
pub fn bench_cluster(a: BenchClusterArgs) -> anyhow::Result<()> {
    let plan = Plan::new(&a)?;
    let rt = crate::runtime()?;
    let cfg = config_path()?;
    let mut own = None;
    let session = if cfg.exists() && a.drives.is_none() {
        if plan.degraded > 0 {
            bail!(
                "--degraded stops drives, which the bench does only in a cluster it starts \
                 itself; {} configures another one (add --drives N for a temporary cluster)",
                cfg.display()
            );
        }
        session_config(&cfg)?
    } else {
        let dir = tempfile::tempdir()?;
        let drives = a.drives.unwrap_or_else(|| plan.drives_needed());
        let cluster = crate::cmd_up::start(dir.path(), &Options::drives(drives), !a.json)?;
        let s = cluster.session_config()?;
        own = Some(OwnCluster { cluster, _dir: dir });
        s
    };
    let clients = rt.block_on(connect_workers(session, plan.workers))?;
    let before = match a.quota {
        Some(q) => Some(rt.block_on(set_quota(&clients[0], Some(q)))?),
        None => None,
    };
    let base = format!("/bench-{:x}", nasd_crypto::random_u64() & 0xffff_ffff);
    let mut runs = rt.block_on(make_dirs(&clients[0], &base, &plan.layouts))?;
    for r in 0..plan.rounds {
        let order: Vec<usize> = if r % 2 == 0 {
            (0..runs.len()).collect()
        } else {
            (0..runs.len()).rev().collect()
        };
        for i in order {
            let run = &mut runs[i];
            if run.error.is_some() {
                continue;
            }
            let cluster = own.as_mut().map(|o| &mut o.cluster);
            let cells = layout_round(&rt, &plan, &clients, cluster, run, r);
            if let Err(e) = &cells.1 {
                run.error = Some(format!("round {}: {e:#}", r + 1));
            }
            for (k, s) in cells.0 {
                match run.cells.iter_mut().find(|(c, _)| *c == k) {
                    Some((_, v)) => v.push(s),
                    None => run.cells.push((k, vec![s])),
                }
            }
        }
    }
    rt.block_on(remove_dirs(&clients[0], &base, &runs));
    if let Some(before) = before {
        rt.block_on(set_quota(&clients[0], before))?;
    }
    print(&plan, &runs, a.json);
    drop(clients);
    drop(own);
    let failed: Vec<String> = runs
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| r.arg.to_string())
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} of {} layouts could not be measured: {}",
            failed.len(),
            runs.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// Sets the quota of `c`'s user to `limit` (`None`: none); returns the limit it had.
async fn set_quota(c: &Arc<Client>, limit: Option<u64>) -> anyhow::Result<Option<u64>> {
    let user = c.user().to_string();
    let had = c.quota_get(&user).await?.first().map(|q| q.limit);
    c.quota_set(&user, limit)
        .await
        .with_context(|| format!("--quota: setting {user}'s quota (an admin's to set)"))?;
    Ok(had)
}

/// `n` clients: the first logs in with `cfg`, the others with its session token (so the
/// manager checks one password, not `n`), each with its own session and connections.
pub(crate) async fn connect_workers(
    cfg: SessionConfig,
    n: usize,
) -> anyhow::Result<Vec<Arc<Client>>> {
    let first = Client::connect(cfg.clone()).await?;
    let token = first.token().await;
    // The workers decrypt and sign with the first one's end-to-end key (a token opens none).
    let id = first.identity().await?;
    let mut clients = vec![first];
    while clients.len() < n {
        let mut c = cfg.clone();
        if let Some((t, _)) = token {
            c.credential = Credential::Token(t);
            c.signing_key = None;
        }
        let w = Client::connect(c).await?;
        w.set_identity_source(nasd_client::e2e::keyring::IdentitySource::Borrowed(
            id.clone(),
        ));
        clients.push(w);
    }
    Ok(clients)
}

/// The base directory and one directory per layout, each set to give new files its layout.
/// A layout the manager refuses is recorded as failed.
async fn make_dirs(
    c: &Arc<Client>,
    base: &str,
    layouts: &[LayoutArg],
) -> anyhow::Result<Vec<LayoutRun>> {
    c.mkdir(base, 0o755).await?;
    let mut runs = vec![];
    for (i, arg) in layouts.iter().enumerate() {
        let dir = format!("{base}/l{i}");
        let mut error = None;
        if let Err(e) = c.mkdir(&dir, 0o755).await {
            error = Some(format!("{e:#}"));
        } else if let Err(e) = c.layout_set(&dir, &arg.spec).await {
            error = Some(format!("layout_set: {e:#}"));
        }
        runs.push(LayoutRun {
            arg: arg.clone(),
            dir,
            error,
            cells: vec![],
        });
    }
    Ok(runs)
}

/// Removes what the bench made; what cannot be removed is reported, not fatal.
async fn remove_dirs(c: &Arc<Client>, base: &str, runs: &[LayoutRun]) {
    for r in runs {
        if let Err(e) = c.rmdir(&r.dir).await {
            eprintln!("bench: leaving {}: {e:#}", r.dir);
        }
    }
    if let Err(e) = c.rmdir(base).await {
        eprintln!("bench: leaving {base}: {e:#}");
    }
}

/// One round of one layout: PUT large and small files, GET them back, (degraded: stop K
/// drives, GET them again, restart the drives), remove them. Returns the cells measured,
/// even when a later step failed, and whether every step held.
fn layout_round(
    rt: &tokio::runtime::Runtime,
    plan: &Plan,
    clients: &[Arc<Client>],
    mut cluster: Option<&mut Cluster>,
    run: &LayoutRun,
    round: usize,
) -> (Vec<(CellKey, Sample)>, anyhow::Result<()>) {
    let sizes = [plan.large_bytes, SMALL_BYTES];
    let data: Vec<Arc<Vec<u8>>> = sizes
        .iter()
        .enumerate()
        .map(|(s, &size)| Arc::new(pseudo_random(size, 7 + s as u64)))
        .collect();
    let mut cells = vec![];
    let mut written: Vec<Arc<Vec<String>>> = vec![];
    let mut stopped = vec![];
    let measured = (|| -> anyhow::Result<()> {
        for (s, &size) in sizes.iter().enumerate() {
            let prefix = format!("{}/r{round}-{size}", run.dir);
            let (sample, names) =
                rt.block_on(put_cell(clients, plan.cell_round, &prefix, data[s].clone()))?;
            written.push(Arc::new(names));
            cells.push((key(Op::Put, size, 0), sample));
        }
        let get_all = |cells: &mut Vec<(CellKey, Sample)>, down: usize| {
            for (s, &size) in sizes.iter().enumerate() {
                let names = written[s].clone();
                let sample =
                    rt.block_on(get_cell(clients, plan.cell_round, names, data[s].clone()))?;
                cells.push((key(Op::Get, size, down), sample));
            }
            anyhow::Ok(())
        };
        get_all(&mut cells, 0)?;
        if plan.degraded == 0 || !run.arg.survives(plan.degraded) {
            return Ok(());
        }
        let cluster = cluster
            .as_deref_mut()
            .context("degraded reads need the bench's own cluster")?;
        let victims = rt.block_on(drives_to_stop(
            &clients[0],
            cluster,
            &written[0][0],
            plan.degraded,
        ))?;
        for id in victims {
            cluster.stop(id)?;
            stopped.push(id);
        }
        get_all(&mut cells, plan.degraded)
    })();
    let restarted = restart(rt, cluster, &clients[0], &stopped);
    let all: Vec<String> = written.iter().flat_map(|w| w.iter().cloned()).collect();
    let removed = rt.block_on(remove_files(clients, all));
    let r = measured.and(restarted).and(removed);
    (cells, r)
}

fn key(op: Op, size: usize, drives_down: usize) -> CellKey {
    CellKey {
        op,
        size_bytes: size as u64,
        drives_down,
    }
}

/// The `k` drives to stop for a degraded read of `path`: those of its first `k` components,
/// topped up with other drives of the cluster if it has fewer.
async fn drives_to_stop(
    c: &Arc<Client>,
    cluster: &Cluster,
    path: &str,
    k: usize,
) -> anyhow::Result<Vec<NodeId>> {
    let f = c.open(path, false).await?;
    let mut ids: Vec<NodeId> = vec![];
    let candidates = f
        .layout
        .components
        .iter()
        .filter_map(|k| cluster.drive_at(&k.addr))
        .chain((0..cluster.drives().len()).map(NodeId::Drive));
    for id in candidates {
        if ids.len() == k {
            break;
        }
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    if ids.len() < k {
        bail!(
            "--degraded {k} stops {k} drives; the cluster has {}",
            cluster.drives().len()
        );
    }
    Ok(ids)
}

/// Restarts the stopped drives and waits until they are back for everyone: the manager calls
/// every drive healthy (so new files are placed on them), and [`DOWN_FOR_MS`] has passed since
/// the degraded reads ended (until then the clients read and write around a drive they found
/// down, and a write around one leaves a stale component in the next layout's files).
fn restart(
    rt: &tokio::runtime::Runtime,
    cluster: Option<&mut Cluster>,
    c: &Arc<Client>,
    stopped: &[NodeId],
) -> anyhow::Result<()> {
    let Some(cluster) = cluster else {
        return Ok(());
    };
    if stopped.is_empty() {
        return Ok(());
    }
    let reads_ended = Instant::now();
    for &id in stopped {
        cluster.restart(id)?;
    }
    rt.block_on(wait_healthy(c))?;
    let back = reads_ended + Duration::from_millis(DOWN_FOR_MS + DOWN_MARGIN_MS);
    std::thread::sleep(back.saturating_duration_since(Instant::now()));
    Ok(())
}

/// Waits up to [`HEALTHY_WAIT_MS`] for the manager to call every drive healthy, so the next
/// layout's PUTs get the drives they need.
async fn wait_healthy(c: &Arc<Client>) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        let ds = c.call("/", calls::DriveList).await?;
        let sick: Vec<String> = ds
            .iter()
            .filter(|d| !d.healthy)
            .map(|d| d.addr.clone())
            .collect();
        if sick.is_empty() {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_millis(HEALTHY_WAIT_MS) {
            bail!(
                "the manager still calls {} unhealthy {HEALTHY_WAIT_MS} ms after the restart",
                sick.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(HEALTHY_POLL_MS)).await;
    }
}

/// Runs `op(worker, client, k)` on every worker until `budget` has passed (each does at least
/// one), `k` counting that worker's operations; returns the round's figures and what the
/// operations returned.
pub(crate) async fn timed<T, F, Fut>(
    clients: &[Arc<Client>],
    budget: Duration,
    size: usize,
    op: F,
) -> anyhow::Result<(Sample, Vec<T>)>
where
    T: Send + 'static,
    F: Fn(usize, Arc<Client>, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = anyhow::Result<T>> + Send,
{
    let trips = |cs: &[Arc<Client>]| -> u64 {
        cs.iter()
            .map(|c| c.manager_round_trips.load(Ordering::Relaxed))
            .sum()
    };
    let trips0 = trips(clients);
    let t0 = Instant::now();
    let deadline = t0 + budget;
    let mut tasks = vec![];
    for (w, c) in clients.iter().enumerate() {
        let (c, op) = (c.clone(), op.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = vec![];
            for k in 0.. {
                out.push(op(w, c.clone(), k).await?);
                if Instant::now() >= deadline {
                    break;
                }
            }
            anyhow::Ok(out)
        }));
    }
    let mut out = vec![];
    let mut failure = None;
    for t in tasks {
        match t.await.context("a bench worker panicked")? {
            Ok(v) => out.extend(v),
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let ops = out.len() as u64;
    let sample = Sample {
        ops,
        bytes: ops * size as u64,
        secs: t0.elapsed().as_secs_f64(),
        manager_round_trips: trips(clients) - trips0,
    };
    Ok((sample, out))
}

/// PUT of new files `PREFIX-wW-K`; returns their names.
async fn put_cell(
    clients: &[Arc<Client>],
    budget: Duration,
    prefix: &str,
    data: Arc<Vec<u8>>,
) -> anyhow::Result<(Sample, Vec<String>)> {
    let prefix = prefix.to_string();
    let size = data.len();
    let r = timed(clients, budget, size, move |w, c, k| {
        let (name, data) = (format!("{prefix}-w{w}-{k}"), data.clone());
        async move {
            c.put_bytes(&name, &data, 0o644)
                .await
                .with_context(|| format!("put of {} bytes", data.len()))?;
            Ok(name)
        }
    })
    .await;
    // Files prepared for names the cell did not reach go back (outside the timing).
    for c in clients {
        c.release_prepared().await;
    }
    r
}

/// GET of `names` (worker `w` starts at the `w`th and steps by the number of workers), each
/// compared with `data`.
async fn get_cell(
    clients: &[Arc<Client>],
    budget: Duration,
    names: Arc<Vec<String>>,
    data: Arc<Vec<u8>>,
) -> anyhow::Result<Sample> {
    let workers = clients.len();
    let size = data.len();
    let (sample, _) = timed(clients, budget, size, move |w, c, k| {
        let name = names[(w + k as usize * workers) % names.len()].clone();
        let data = data.clone();
        async move {
            // Streamed as a client that serves or stores the bytes would read them: each
            // verified piece is compared with what was written while it is in cache, and
            // dropped; the file is never held whole.
            let want = data.clone();
            let got = c
                .get_each(
                    &name,
                    None,
                    |_| Ok(()),
                    move |off, d| {
                        let want = want.clone();
                        async move {
                            let off = off as usize;
                            if want.get(off..off + d.len()) != Some(&d[..]) {
                                return Err(FsError::Usage(format!(
                                    "bytes {off}..{} differ from what was written",
                                    off + d.len()
                                )));
                            }
                            Ok(())
                        }
                    },
                )
                .await
                .with_context(|| format!("nasd:{name}: get of {} bytes", data.len()))?;
            if got != data.len() as u64 {
                bail!("nasd:{name}: {got} bytes read back, {} written", data.len());
            }
            Ok(())
        }
    })
    .await?;
    Ok(sample)
}

/// Removes `names`, the work spread over the clients.
async fn remove_files(clients: &[Arc<Client>], names: Vec<String>) -> anyhow::Result<()> {
    let per = names.len().div_ceil(clients.len()).max(1);
    let mut tasks = vec![];
    for (c, chunk) in clients.iter().zip(names.chunks(per)) {
        let (c, chunk) = (c.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for n in chunk {
                c.unlink(&n).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await.context("a bench worker panicked")??;
    }
    Ok(())
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A measured cell, summarized over its rounds.
struct Figure<'a> {
    layout: &'a LayoutArg,
    key: CellKey,
    workers: usize,
    samples: &'a [Sample],
}

impl Figure<'_> {
    fn count(&self) -> u64 {
        self.samples.iter().map(|s| s.ops).sum()
    }
    /// Median over rounds.
    fn mib_per_s(&self) -> f64 {
        median(
            self.samples
                .iter()
                .map(|s| s.bytes as f64 / (1 << 20) as f64 / s.secs)
                .collect(),
        )
    }
    /// Median over rounds.
    fn ops_per_s(&self) -> f64 {
        median(self.samples.iter().map(|s| s.ops as f64 / s.secs).collect())
    }
    fn manager_round_trips_per_op(&self) -> f64 {
        let trips: u64 = self.samples.iter().map(|s| s.manager_round_trips).sum();
        trips as f64 / self.count().max(1) as f64
    }
    fn json(&self) -> serde_json::Value {
        let round1 = |x: f64| (x * 10.0).round() / 10.0;
        serde_json::json!({
            "layout": self.layout.to_string(),
            "op": self.key.op.name(),
            "size_bytes": self.key.size_bytes,
            "workers": self.workers,
            "drives_down": self.key.drives_down,
            "count": self.count(),
            "rounds": self.samples.len(),
            "mib_per_s": round1(self.mib_per_s()),
            "ops_per_s": round1(self.ops_per_s()),
            "manager_round_trips_per_op": (self.manager_round_trips_per_op() * 100.0).round() / 100.0,
        })
    }
    fn line(&self) -> String {
        format!(
            "{:<24} {:<4} {:>7} {:>7} {:>4} {:>6} {:>6} {:>9.1} {:>9.1} {:>12.2}",
            self.layout.to_string(),
            self.key.op.name(),
            size_str(self.key.size_bytes),
            self.workers,
            self.key.drives_down,
            self.samples.len(),
            self.count(),
            self.mib_per_s(),
            self.ops_per_s(),
            self.manager_round_trips_per_op()
        )
    }
}

fn size_str(b: u64) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn print(plan: &Plan, runs: &[LayoutRun], json: bool) {
    if !json {
        outln!(
            "{:<24} {:<4} {:>7} {:>7} {:>4} {:>6} {:>6} {:>9} {:>9} {:>12}",
            "layout",
            "op",
            "size",
            "workers",
            "down",
            "rounds",
            "count",
            "MiB/s",
            "ops/s",
            "mgr trips/op"
        );
    }
    for r in runs {
        for (key, samples) in &r.cells {
            let f = Figure {
                layout: &r.arg,
                key: *key,
                workers: plan.workers,
                samples,
            };
            if json {
                outln!("{}", f.json());
            } else {
                outln!("{}", f.line());
            }
        }
        if plan.degraded > 0 && !r.arg.survives(plan.degraded) {
            let why = format!(
                "not read with {} drives down: the layout cannot lose that many",
                plan.degraded
            );
            if json {
                outln!(
                    "{}",
                    serde_json::json!({"layout": r.arg.to_string(), "drives_down": plan.degraded, "skipped": why})
                );
            } else {
                outln!("{:<24} {why}", r.arg.to_string());
            }
        }
        if let Some(e) = &r.error {
            if json {
                outln!(
                    "{}",
                    serde_json::json!({"layout": r.arg.to_string(), "error": e})
                );
            } else {
                outln!("{:<24} failed: {e}", r.arg.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_know_their_width_and_what_they_survive() {
        let l = |s: &str| parse_layout(s).unwrap();
        assert_eq!(l("single").drives_needed(), 1);
        assert!(!l("single").survives(1));
        assert!(l("single").survives(0));
        assert_eq!(l("raid0:4").drives_needed(), 4);
        assert!(!l("raid0:4").survives(1));
        assert_eq!(l("mirror:3").drives_needed(), 3);
        assert!(l("mirror:3").survives(2) && !l("mirror:3").survives(3));
        assert_eq!(l("rs:4+2").drives_needed(), 6);
        assert!(l("rs:4+2").survives(2) && !l("rs:4+2").survives(3));
        assert_eq!(l("raid6x:4").drives_needed(), 6);
        assert!(l("raid6x:4").survives(2) && !l("raid6x:4").survives(3));
        assert_eq!(l("rs:4+2/1M").to_string(), "rs:4+2/1M");
        for bad in ["", "zebra:9", "raid0:x", "rs 4", "single:2", "a\nb"] {
            assert!(parse_layout(bad).is_err(), "{bad:?}");
        }
    }

    fn args(extra: &[&str]) -> BenchClusterArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: BenchClusterArgs,
        }
        let mut argv = vec!["bench"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).unwrap().a
    }

    #[test]
    fn a_plan_sizes_its_temporary_cluster_and_checks_its_flags() {
        let p = Plan::new(&args(&["--layout", "single,rs:4+2", "--quick"])).unwrap();
        assert_eq!(p.drives_needed(), 6);
        let names: Vec<String> = p.layouts.iter().map(|l| l.to_string()).collect();
        assert_eq!(
            names,
            [
                "single,plain",
                "single,encrypted",
                "rs:4+2,plain",
                "rs:4+2,encrypted"
            ]
        );
        let q = Plan::new(&args(&["--protection", "default,rand+auth=1"])).unwrap();
        let names: Vec<String> = q.layouts.iter().map(|l| l.to_string()).collect();
        assert_eq!(names, ["single", "single,rand,auth=1"]);
        for bad in ["a b", "x++y", "", "plain,"] {
            assert!(parse_protection(bad).is_err(), "{bad:?}");
        }
        assert_eq!(p.rounds, ROUNDS_QUICK);
        assert_eq!(p.large_bytes, LARGE_BYTES_QUICK);
        assert_eq!(
            p.cell_round,
            Duration::from_secs_f64(DURATION_S_QUICK / 3.0)
        );
        let p = Plan::new(&args(&[
            "--degraded",
            "2",
            "--duration",
            "5",
            "--workers",
            "4",
        ]))
        .unwrap();
        assert_eq!(p.drives_needed(), 3, "more drives than are stopped");
        assert_eq!((p.workers, p.rounds), (4, ROUNDS));
        assert_eq!(p.cell_round, Duration::from_secs(1));
        for bad in [
            &["--duration", "0"][..],
            &["--duration=-1"],
            &["--drives", "0"],
            &["--drives", "2", "--degraded", "2"],
        ] {
            assert!(Plan::new(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_median_is_the_middle_round() {
        assert_eq!(median(vec![5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }

    #[test]
    fn a_cell_reports_medians_and_totals() {
        let l = parse_layout("single").unwrap();
        let s = |ops, secs| Sample {
            ops,
            bytes: ops << 20,
            secs,
            manager_round_trips: ops * 2,
        };
        let samples = [s(10, 1.0), s(30, 1.0), s(20, 1.0)];
        let f = Figure {
            layout: &l,
            key: key(Op::Get, 1 << 20, 2),
            workers: 2,
            samples: &samples,
        };
        let j = f.json();
        assert_eq!(j["op"], "get");
        assert_eq!(j["count"], 60);
        assert_eq!(j["rounds"], 3);
        assert_eq!(j["mib_per_s"], 20.0);
        assert_eq!(j["ops_per_s"], 20.0);
        assert_eq!(j["manager_round_trips_per_op"], 2.0);
        assert_eq!(j["layout"], "single");
        assert_eq!(j["workers"], 2);
        assert_eq!(j["drives_down"], 2);
        assert!(f
            .line()
            .starts_with("single                   get    1 MiB       2    2      3     60"));
    }
}
