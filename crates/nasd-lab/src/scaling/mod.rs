//! `nasd lab scaling`: seed 002 §4's claim that NASD scales with client/drive pairs while a
//! server-attached disk (SAD) saturates (§4.2 Fig 2a, §4.3 Fig 3, §4.5 Figs 4-5), rerun on
//! one machine with a network that makes the links, not the CPUs, the limit.
//!
//! Every drive, every client, the manager and the SAD server get a network namespace and a
//! link of the same rate ([`net`]). For each number of pairs `n` a fresh cluster of `n`
//! drives (processes of `nasd-cluster`, each under `ip netns exec`) holds a set of five
//! files (seed 002 §4.5: "a set of 5 different 8 MB files") striped raid0 over all `n`
//! drives at 64 KiB (a single object at `n = 1`). Then, links capped, runs alternate
//! between:
//!
//! - **NASD**: `n` clients read the files straight from the drives;
//! - **SAD**: the same `n` clients read the same files through the SAD server ([`sad`]),
//!   which reads them from the same drives and forwards them, behind its one link.
//!
//! Each run reports the aggregate MB/s (10^6 bytes/s) of the reads completed in its window,
//! and the CPU the manager, the SAD server, the drives and the clients used in it
//! ([`cpu`]). Setup (cluster, files) runs with the links uncapped.
//!
//! # Layout
//! - [`net`]: namespaces, veths, rate caps, the cleanup guard, signals.
//! - [`workload`]: the client threads and their timing.
//! - [`sad`]: the SAD server, its protocol and its process.
//! - [`results`]: means over runs, the verdict, the report.
//! - [`cpu`]: CPU time from `/proc/PID/stat`.

pub mod cpu;
pub mod net;
pub mod results;
pub mod sad;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nasd_client::files::Client;
use nasd_cluster::{pseudo_random, Cluster, NodeId, Options, Placement};
use nasd_proto::manager::Credential;

use crate::error::LabError;
use crate::report::Report;
use net::{interrupted, Host, Interrupts, Net};
use workload::{Gate, Source, Workload};

/// Most client/drive pairs (seed 002 went to 4; the brief of this experiment to 8).
pub const PAIRS_MAX: usize = 8;
/// Pairs of a full run, and of `--quick`.
const PAIRS_FULL: [usize; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
const PAIRS_QUICK: [usize; 3] = [1, 2, 4];
/// Rate of every link, Mbit/s: 4 MB/s per link, 32 MB/s for 8 pairs, far below what the
/// 2-CPU machine moves, so the links are the limit (docs/lab.md shows the CPU figures).
pub const RATE_MBIT_DEFAULT: u32 = 32;
const RATE_MBIT_MAX: u32 = 10_000;
/// Measured seconds per run, and runs per configuration and mode (seed 002 ran five).
const SECONDS_FULL: f64 = 5.0;
const SECONDS_QUICK: f64 = 2.0;
const SECONDS_MAX: f64 = 600.0;
const RUNS_FULL: usize = 3;
const RUNS_QUICK: usize = 1;
const RUNS_MAX: usize = 20;
/// From the clients' start to the window, at least (TCP ramps up, queues fill); more with
/// more pairs, see [`Plan::workload`].
const WARMUP_MS: u64 = 1_000;
/// Seed 002 §4.5: "a set of 5 different 8 MB files".
const FILES: usize = 5;
const FILE_BYTES_FULL: u64 = 8 << 20;
const FILE_BYTES_QUICK: u64 = 2 << 20;
/// Seed 002 §4.2: "reads a large file sequentially in 512k chunks".
const CHUNK_BYTES: u32 = 512 << 10;
/// Reads in flight per client (the read-ahead of §4.5): two keep a client's link busy.
const STREAMS_PER_CLIENT: usize = 2;
/// Stripe unit of the raid0 files (seed 002 Fig 4: "striped at 64K stripe unit").
const STRIPE_UNIT: &str = "64K";
/// Where the files live on the cluster.
const ROOT: &str = "/scaling";
/// Ports inside the namespaces (each host has its own address, so they never collide).
const DRIVE_PORT: u16 = 7100;
const MANAGER_PORT: u16 = 7000;
const SAD_PORT: u16 = 7200;

/// How `nasd lab scaling` runs.
#[derive(Debug, Clone)]
pub struct ScalingOptions {
    /// Pairs 1, 2, 4, one run of 2 s each, 2 MiB files.
    pub quick: bool,
    /// Seed of the files' contents.
    pub seed: u64,
    /// The `nasd` executable the drives, the manager and the SAD server run.
    pub nasd_bin: PathBuf,
    /// Numbers of pairs (default: 1..=8, quick 1, 2, 4).
    pub pairs: Option<Vec<usize>>,
    /// Measured seconds per run.
    pub seconds: Option<f64>,
    /// Link rate, Mbit/s.
    pub rate_mbit: Option<u32>,
    /// Runs per configuration and mode.
    pub runs: Option<usize>,
}

/// The run, its flags checked.
#[derive(Debug, Clone)]
struct Plan {
    pairs: Vec<usize>,
    seconds: f64,
    rate_mbit: u32,
    runs: usize,
    file_bytes: u64,
    seed: u64,
    nasd_bin: PathBuf,
}

impl Plan {
    fn new(o: &ScalingOptions) -> Result<Plan, LabError> {
        let bad = |s: String| Err(LabError::Usage(s));
        let mut pairs = o.pairs.clone().unwrap_or_else(|| {
            if o.quick {
                PAIRS_QUICK.to_vec()
            } else {
                PAIRS_FULL.to_vec()
            }
        });
        pairs.sort_unstable();
        pairs.dedup();
        if pairs.is_empty() || pairs.iter().any(|&n| n == 0 || n > PAIRS_MAX) {
            return bad(format!("--pairs: between 1 and {PAIRS_MAX}"));
        }
        let seconds = o
            .seconds
            .unwrap_or(if o.quick { SECONDS_QUICK } else { SECONDS_FULL });
        if !(seconds > 0.0 && seconds <= SECONDS_MAX) {
            return bad(format!(
                "--seconds {seconds}: more than 0 and at most {SECONDS_MAX}"
            ));
        }
        let rate_mbit = o.rate_mbit.unwrap_or(RATE_MBIT_DEFAULT);
        if rate_mbit == 0 || rate_mbit > RATE_MBIT_MAX {
            return bad(format!("--rate-mbit: between 1 and {RATE_MBIT_MAX}"));
        }
        let runs = o
            .runs
            .unwrap_or(if o.quick { RUNS_QUICK } else { RUNS_FULL });
        if runs == 0 || runs > RUNS_MAX {
            return bad(format!("--runs: between 1 and {RUNS_MAX}"));
        }
        Ok(Plan {
            pairs,
            seconds,
            rate_mbit,
            runs,
            file_bytes: if o.quick {
                FILE_BYTES_QUICK
            } else {
                FILE_BYTES_FULL
            },
            seed: o.seed,
            nasd_bin: o.nasd_bin.clone(),
        })
    }

    fn pairs_max(&self) -> usize {
        *self.pairs.last().expect("at least one configuration")
    }

    /// One link's rate in MB/s (10^6 bytes/s).
    fn link_mb_per_s(&self) -> f64 {
        f64::from(self.rate_mbit) / 8.0
    }

    /// The workload of `n` pairs. The warm-up lasts [`WARMUP_MS`] plus the time one link
    /// takes to carry every read in flight: behind the SAD server's one link that is how
    /// long a read takes once the queue is full, and a window that opened earlier would
    /// count the queue filling, not the steady state. NASD runs get the same warm-up.
    fn workload(&self, n: usize) -> Workload {
        let in_flight = (n * STREAMS_PER_CLIENT) as f64 * f64::from(CHUNK_BYTES);
        let fill_s = in_flight / (self.link_mb_per_s() * 1e6);
        Workload {
            files: (0..FILES).map(|k| format!("{ROOT}/f{k}")).collect(),
            file_bytes: self.file_bytes,
            chunk_bytes: CHUNK_BYTES,
            streams: STREAMS_PER_CLIENT,
            warmup: Duration::from_millis(WARMUP_MS) + Duration::from_secs_f64(fill_s),
            window: Duration::from_secs_f64(self.seconds),
        }
    }
}

/// NASD or SAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Nasd,
    Sad,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Nasd => "nasd",
            Mode::Sad => "sad",
        }
    }
}

/// One measured run.
#[derive(Clone, Debug)]
struct Run {
    mode: Mode,
    pairs: usize,
    mb_per_s: f64,
    /// Percent of one CPU over the window.
    manager_cpu: f64,
    sad_cpu: Option<f64>,
    drives_cpu: f64,
    clients_cpu: f64,
}

/// Runs the experiment. Needs root; [`LabError::Unavailable`] says why it cannot run here.
pub fn run(o: &ScalingOptions) -> Result<Report, LabError> {
    let plan = Plan::new(o)?;
    let _signals = Interrupts::install();
    let net = Net::build(plan.pairs_max())?;
    let work = tempfile::Builder::new()
        .prefix("nasd-lab-scaling-")
        .tempdir()
        .map_err(|source| LabError::Output {
            path: std::env::temp_dir(),
            source,
        })?;
    let mut runs = vec![];
    for &n in &plan.pairs {
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        let dir = work.path().join(format!("pairs-{n}"));
        // A thread in the manager's namespace, so the cluster it starts, the files it writes
        // and the clients it spawns all reach the hosts.
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                net::enter(&net.ns(Host::Manager))?;
                configuration(&plan, &net, &dir, n)
            })
            .join()
        });
        let r = r.unwrap_or_else(|_| Err(LabError::Client("the control thread panicked".into())));
        runs.extend(r?);
    }
    drop(net);
    Ok(results::report(&plan, &runs))
}

/// One number of pairs: its cluster, files and SAD server, then the runs, links capped.
fn configuration(plan: &Plan, net: &Net, dir: &Path, n: usize) -> Result<Vec<Run>, LabError> {
    let mut placement = Placement {
        addrs: (0..n)
            .map(|i| format!("{}:{DRIVE_PORT}", net.addr(Host::Drive(i))))
            .collect(),
        ..Placement::default()
    };
    placement
        .addrs
        .push(format!("{}:{MANAGER_PORT}", net.addr(Host::Manager)));
    for i in 0..n {
        placement
            .wrappers
            .insert(NodeId::Drive(i), net.exec_prefix(Host::Drive(i)));
    }
    placement
        .wrappers
        .insert(NodeId::Manager, net.exec_prefix(Host::Manager));
    let options = Options {
        placement,
        ..Options::drives(n)
    };
    let cluster = Cluster::start(&plan.nasd_bin, dir, &options)
        .map_err(|e| LabError::Cluster(Box::new(e)))?;
    let session = cluster
        .session_config()
        .map_err(|e| LabError::Cluster(Box::new(e)))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| LabError::Client(format!("a runtime: {e}")))?;
    let w = plan.workload(n);
    let admin = rt
        .block_on(Client::connect(session.clone()))
        .map_err(client_err)?;
    rt.block_on(write_files(&admin, plan, &w, n))?;
    // The clients log in with the admin's session token: one password check, not n.
    let mut client_cfg = session;
    if let Some((t, _)) = rt.block_on(admin.token()) {
        client_cfg.credential = Credential::Token(t);
        client_cfg.signing_key = None;
    }
    let sad_addr = std::net::SocketAddr::from((net.addr(Host::Sad), SAD_PORT));
    let sad = sad::SadProcess::start(&sad::Launch {
        wrapper: &net.exec_prefix(Host::Sad),
        nasd_bin: &plan.nasd_bin,
        config: &cluster.config_path(),
        addr: sad_addr,
        root: ROOT,
        log: &cluster.dir().join("logs").join("sad-server.log"),
    })?;
    let pids = Pids {
        manager: cluster.pid(NodeId::Manager),
        sad: sad.pid(),
        drives: (0..n)
            .filter_map(|i| cluster.pid(NodeId::Drive(i)))
            .collect(),
    };
    let _capped = net.cap(plan.rate_mbit)?;
    let mut runs = vec![];
    for r in 0..plan.runs {
        // Alternate which mode goes first, so neither always runs on a fresher machine.
        let order = if r % 2 == 0 {
            [Mode::Nasd, Mode::Sad]
        } else {
            [Mode::Sad, Mode::Nasd]
        };
        for mode in order {
            let source = match mode {
                Mode::Nasd => Source::Nasd(client_cfg.clone()),
                Mode::Sad => Source::Sad(sad_addr),
            };
            runs.push(measure(net, &w, n, mode, source, &pids)?);
        }
    }
    drop(admin);
    drop(sad);
    drop(cluster);
    Ok(runs)
}

fn client_err(e: nasd_client::files::FsError) -> LabError {
    LabError::Client(e.to_string())
}

/// The file set, under a directory whose files are raid0 over all `n` drives (one object
/// at `n = 1`); each file is checked to span every drive.
async fn write_files(
    admin: &Arc<Client>,
    plan: &Plan,
    w: &Workload,
    n: usize,
) -> Result<(), LabError> {
    // Plaintext: the seed's experiment compares data paths (bytes through a server or straight
    // from drives), and its client hosts log in with the admin's token, which opens no
    // end-to-end key; encryption's cost is measured in `nasd bench cluster`.
    let layout = if n == 1 {
        "single,plain".to_string()
    } else {
        format!("raid0:{n}/{STRIPE_UNIT},plain")
    };
    admin.mkdir(ROOT, 0o755).await.map_err(client_err)?;
    admin.layout_set(ROOT, &layout).await.map_err(client_err)?;
    for (k, f) in w.files.iter().enumerate() {
        let data = pseudo_random(w.file_bytes as usize, plan.seed ^ (k as u64 + 1));
        admin.put_bytes(f, &data, 0o644).await.map_err(client_err)?;
        let o = admin.open(f, false).await.map_err(client_err)?;
        if o.layout.components.len() != n {
            return Err(LabError::Client(format!(
                "{f} has {} components, not one on each of the {n} drives",
                o.layout.components.len()
            )));
        }
    }
    Ok(())
}

/// The processes whose CPU a run reads.
struct Pids {
    manager: Option<u32>,
    sad: u32,
    drives: Vec<u32>,
}

/// CPU seconds of each party at one instant.
#[derive(Clone, Copy)]
struct CpuSample {
    at: Instant,
    manager: f64,
    sad: f64,
    drives: f64,
    lab: f64,
}

impl Pids {
    fn sample(&self) -> CpuSample {
        CpuSample {
            at: Instant::now(),
            manager: cpu::total_seconds(self.manager.as_slice()),
            sad: cpu::total_seconds(&[self.sad]),
            drives: cpu::total_seconds(&self.drives),
            lab: cpu::total_seconds(&[std::process::id()]),
        }
    }
}

/// One run: `n` client threads, each in its namespace, read for the window; the CPU of
/// every party is read at the window's edges.
fn measure(
    net: &Net,
    w: &Workload,
    n: usize,
    mode: Mode,
    source: Source,
    pids: &Pids,
) -> Result<Run, LabError> {
    let gate = Gate::default();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let mut clients = vec![];
        for i in 0..n {
            let (ns, source, tx, gate) =
                (net.ns(Host::Client(i)), source.clone(), tx.clone(), &gate);
            clients.push(s.spawn(move || workload::client(&ns, i, source, w, gate, tx)));
        }
        drop(tx);
        if let Err(e) = all_ready(&rx, n) {
            gate.abort();
            let _ = join_counts(clients);
            return Err(e);
        }
        let origin = gate.open();
        let t0 = origin + w.warmup;
        sleep_until(t0);
        let before = pids.sample();
        sleep_until(t0 + w.window);
        let after = pids.sample();
        let bytes = join_counts(clients)?;
        let wall = after.at.duration_since(before.at).as_secs_f64();
        let pct = |f: fn(&CpuSample) -> f64| cpu::percent(f(&before), f(&after), wall);
        Ok(Run {
            mode,
            pairs: n,
            mb_per_s: bytes as f64 / w.window.as_secs_f64() / 1e6,
            manager_cpu: pct(|c| c.manager),
            sad_cpu: (mode == Mode::Sad).then(|| pct(|c| c.sad)),
            drives_cpu: pct(|c| c.drives),
            clients_cpu: pct(|c| c.lab),
        })
    })
}

/// Waits for `n` clients to say they are ready: the first error any reports, or
/// [`LabError::Interrupted`].
fn all_ready(rx: &mpsc::Receiver<Result<(), LabError>>, n: usize) -> Result<(), LabError> {
    let mut failure = None;
    for _ in 0..n {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failure.get_or_insert(e);
            }
            // Every client sends once; a closed channel means one died before it did.
            Err(_) => {
                failure.get_or_insert(LabError::Client("a client thread died".into()));
                break;
            }
        }
    }
    if failure.is_none() && interrupted() {
        failure = Some(LabError::Interrupted);
    }
    failure.map_or(Ok(()), Err)
}

/// Joins every client: the bytes they read in the window, or the first error.
fn join_counts(
    clients: Vec<std::thread::ScopedJoinHandle<'_, Result<workload::ClientCount, LabError>>>,
) -> Result<u64, LabError> {
    let mut bytes = 0;
    let mut failure = None;
    for c in clients {
        match c.join() {
            Ok(Ok(count)) => bytes += count.bytes,
            Ok(Err(e)) => {
                failure.get_or_insert(e);
            }
            Err(_) => {
                failure.get_or_insert(LabError::Client("a client thread panicked".into()));
            }
        }
    }
    failure.map_or(Ok(bytes), Err)
}

/// Sleeps until `t`, waking early on an interrupt (the clients stop by themselves then).
fn sleep_until(t: Instant) {
    while !interrupted() {
        let now = Instant::now();
        if now >= t {
            return;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(100)));
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(super) fn options() -> ScalingOptions {
        ScalingOptions {
            quick: true,
            seed: 1,
            nasd_bin: "nasd".into(),
            pairs: None,
            seconds: None,
            rate_mbit: None,
            runs: None,
        }
    }

    #[test]
    fn a_plan_checks_its_flags() {
        let p = Plan::new(&options()).unwrap();
        assert_eq!(p.pairs, PAIRS_QUICK);
        assert_eq!((p.runs, p.seconds, p.rate_mbit), (1, SECONDS_QUICK, 32));
        assert_eq!(p.link_mb_per_s(), 4.0);
        let full = Plan::new(&ScalingOptions {
            quick: false,
            pairs: Some(vec![4, 1, 4]),
            ..options()
        })
        .unwrap();
        assert_eq!(full.pairs, vec![1, 4]);
        assert_eq!(full.pairs_max(), 4);
        for bad in [
            ScalingOptions {
                pairs: Some(vec![0]),
                ..options()
            },
            ScalingOptions {
                pairs: Some(vec![9]),
                ..options()
            },
            ScalingOptions {
                pairs: Some(vec![]),
                ..options()
            },
            ScalingOptions {
                seconds: Some(0.0),
                ..options()
            },
            ScalingOptions {
                rate_mbit: Some(0),
                ..options()
            },
            ScalingOptions {
                runs: Some(0),
                ..options()
            },
        ] {
            assert!(Plan::new(&bad).is_err(), "{bad:?}");
        }
    }
}
