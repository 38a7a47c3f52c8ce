//! `nasd bench meta`: metadata operations per second through the client library, with C
//! concurrent clients against a temporary cluster the bench starts (one drive; the manager's
//! store SQLite, or PostgreSQL with `--meta postgres`), and what each operation costs the
//! manager's process (and a private PostgreSQL server's) in CPU.
//!
//! Method: a round runs six cells in turn, each worker in a directory of its own:
//! - `create`: new empty files, each created and closed as the mount does (its name exists
//!   from the create: `FileHandle::create_now`, which takes prepared files in batches);
//! - `stat`, `open`: a `Stat` or read `Open` call to the manager for each of the round's files
//!   in turn (straight calls: the client's attribute and grant caches are not asked);
//! - `rename`: a file moved to another name in its directory and back (two renames);
//! - `list`: a page of at most [`LIST_PAGE_ENTRIES`] entries of the worker's directory;
//! - `unlink`: every file of the round removed (not time-boxed: each worker removes its own).
//!
//! Every other cell is time-boxed to duration/rounds; each worker finishes the operation it is
//! in. A cell's `ops_per_s` is the median over rounds of operations over the round's wall time;
//! its CPU per operation is the manager's (and the database server's) user plus system time
//! over all rounds, from `/proc`, over all operations, so it counts work the manager does
//! for the cell in the background too. The machine's other load is not subtracted; run it
//! under `quietrun.py`. A benchmark, not a test: it asserts nothing about speed.
//!
//! Several managers over one database (issue 23 §3) are not built yet; the bench measures one.

use crate::bench_cluster::{
    connect_workers, median, timed, Sample, DURATION_S, DURATION_S_MAX, DURATION_S_QUICK,
    WORKERS_MAX as CLIENTS_MAX,
};
use anyhow::{bail, Context as _};
use clap::Args;
use nasd_client::files::Client;
use nasd_client::handle::FileHandle;
use nasd_cluster::{postgres::Meta, Cluster, NodeId, Options};
use nasd_proto::manager::calls;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 3;
/// Entries a `list` operation asks for (one page).
const LIST_PAGE_ENTRIES: usize = 100;

#[derive(Args, Debug)]
pub struct BenchMetaArgs {
    /// 1 s per cell instead of 10: finishes in seconds.
    #[arg(long)]
    pub quick: bool,
    /// One JSON object per operation on stdout: op, meta, clients, rounds, count, ops_per_s,
    /// manager_round_trips_per_op, manager_cpu_us_per_op, db_cpu_us_per_op (null unless a
    /// private PostgreSQL server).
    #[arg(long)]
    pub json: bool,
    /// Concurrent clients, each with its own session.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=CLIENTS_MAX as i64))]
    pub clients: u16,
    /// Seconds of measurement per cell, split over the rounds (default 10; 1 with --quick).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// The manager's store: `sqlite` (default), `postgres` (a private server the bench
    /// starts), or a PostgreSQL connection string.
    #[arg(long, default_value = "sqlite")]
    pub meta: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Stat,
    Open,
    Rename,
    List,
    Unlink,
}

const OPS: [Op; 6] = [
    Op::Create,
    Op::Stat,
    Op::Open,
    Op::Rename,
    Op::List,
    Op::Unlink,
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Stat => "stat",
            Op::Open => "open",
            Op::Rename => "rename",
            Op::List => "list",
            Op::Unlink => "unlink",
        }
    }
}

/// One cell's rounds, and the CPU its rounds cost.
#[derive(Default)]
struct Cell {
    samples: Vec<Sample>,
    manager_ticks: u64,
    db_ticks: Option<u64>,
}

/// Where the CPU time of the cluster's metadata processes is read.
struct Meters {
    manager: u32,
    /// A private PostgreSQL server's `postmaster.pid`.
    postmaster_pid_file: Option<PathBuf>,
}

impl Meters {
    fn manager_ticks(&self) -> anyhow::Result<u64> {
        Ok(cpu_ticks(self.manager)?.0)
    }

    /// The server's processes: the postmaster with its live and its exited children.
    fn db_ticks(&self) -> anyhow::Result<Option<u64>> {
        let Some(f) = &self.postmaster_pid_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(f).with_context(|| format!("{}", f.display()))?;
        let pid: u32 = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("{}: no process id", f.display()))?;
        let (own, exited) = cpu_ticks(pid)?;
        let mut total = own + exited;
        for child in children(pid) {
            if let Ok((t, _)) = cpu_ticks(child) {
                total += t;
            }
        }
        Ok(Some(total))
    }
}

/// A process's user and system time, and that of its waited-for children, in clock ticks
/// (`/proc/PID/stat` fields 14-17).
fn cpu_ticks(pid: u32) -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("/proc stat without a command name")?;
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11) // state .. cmajflt: fields 3-13
        .take(4)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    if f.len() < 4 {
        bail!("/proc/{pid}/stat is short");
    }
    Ok((f[0] + f[1], f[2] + f[3]))
}

/// The live children of process `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s.rsplit_once(')')?.1.to_string();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

fn us_per_tick() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1e6 / (if hz > 0 { hz as f64 } else { 100.0 })
}

pub fn run(a: BenchMetaArgs) -> anyhow::Result<()> {
    let duration = a.duration.unwrap_or(if a.quick {
        DURATION_S_QUICK
    } else {
        DURATION_S
    });
    if !(duration > 0.0 && duration <= DURATION_S_MAX) {
        bail!("--duration must be more than 0 and at most {DURATION_S_MAX} seconds");
    }
    let meta = Meta::parse(&a.meta).map_err(|e| anyhow::anyhow!("--meta: {e}"))?;
    let budget = Duration::from_secs_f64(duration / ROUNDS as f64);
    let rt = crate::runtime()?;
    let dir = tempfile::tempdir()?;
    let mut options = Options::drives(1);
    options.meta = meta.clone();
    let cluster = crate::cmd_up::start(dir.path(), &options, !a.json)?;
    let meters = meters(&cluster, dir.path(), &meta)?;
    let clients = rt.block_on(connect_workers(
        cluster.session_config()?,
        a.clients as usize,
    ))?;
    let base = format!("/bench-meta-{:x}", nasd_crypto::random_u64() & 0xffff_ffff);
    rt.block_on(async {
        clients[0].mkdir(&base, 0o755).await?;
        for w in 0..clients.len() {
            clients[0].mkdir(&format!("{base}/w{w}"), 0o755).await?;
        }
        anyhow::Ok(())
    })?;
    let mut cells: Vec<Cell> = OPS.iter().map(|_| Cell::default()).collect();
    for r in 0..ROUNDS {
        let mut names: Vec<Vec<String>> = vec![];
        for (i, &op) in OPS.iter().enumerate() {
            let m0 = meters.manager_ticks()?;
            let d0 = meters.db_ticks()?;
            let sample = rt
                .block_on(cell(op, &clients, budget, &base, r, &mut names))
                .with_context(|| format!("round {}, {}", r + 1, op.name()))?;
            let c = &mut cells[i];
            c.manager_ticks += meters.manager_ticks()? - m0;
            if let (Some(d0), Some(d1)) = (d0, meters.db_ticks()?) {
                *c.db_ticks.get_or_insert(0) += d1.saturating_sub(d0);
            }
            c.samples.push(sample);
        }
    }
    rt.block_on(async {
        for w in 0..clients.len() {
            clients[0].rmdir(&format!("{base}/w{w}")).await?;
        }
        clients[0].rmdir(&base).await
    })?;
    print(&a, &cells);
    drop(clients);
    drop(cluster);
    Ok(())
}

fn meters(cluster: &Cluster, dir: &Path, meta: &Meta) -> anyhow::Result<Meters> {
    let manager = cluster
        .pid(NodeId::Manager)
        .context("the bench's cluster has no manager process")?;
    let postmaster_pid_file = match meta {
        Meta::PrivatePostgres => {
            Some(nasd_cluster::postgres::dir(&Cluster::prepare(dir)?).join("postmaster.pid"))
        }
        _ => None,
    };
    Ok(Meters {
        manager,
        postmaster_pid_file,
    })
}

/// One round of one operation; `names` holds each worker's files of the round (made by the
/// `create` cell, emptied by `unlink`).
async fn cell(
    op: Op,
    clients: &[Arc<Client>],
    budget: Duration,
    base: &str,
    round: usize,
    names: &mut Vec<Vec<String>>,
) -> anyhow::Result<Sample> {
    let files = Arc::new(names.clone());
    let base = base.to_string();
    match op {
        Op::Create => {
            let (s, made) = timed(clients, budget, 0, move |w, c, k| {
                let path = format!("{base}/w{w}/r{round}-{k}");
                async move {
                    let h = FileHandle::create_now(&c, &path, 0o644, true)
                        .await?
                        .with_context(|| format!("{path} exists"))?;
                    h.close().await?;
                    Ok((w, path))
                }
            })
            .await?;
            for c in clients {
                c.release_prepared().await;
            }
            *names = vec![vec![]; clients.len()];
            for (w, p) in made {
                names[w].push(p);
            }
            Ok(s)
        }
        Op::Stat => Ok(timed(clients, budget, 0, move |w, c, k| {
            let path = nth(&files[w], k);
            async move {
                c.call(&path, calls::Stat { path: path.clone() }).await?;
                Ok(())
            }
        })
        .await?
        .0),
        Op::Open => Ok(timed(clients, budget, 0, move |w, c, k| {
            let path = nth(&files[w], k);
            async move {
                let open = calls::Open {
                    path: path.clone(),
                    write: false,
                    extend_by: 0,
                };
                c.call(&path, open).await?;
                Ok(())
            }
        })
        .await?
        .0),
        Op::Rename => {
            let (mut s, _) = timed(clients, budget, 0, move |w, c, k| {
                let path = nth(&files[w], k);
                async move {
                    let moved = format!("{path}.moved");
                    c.rename(&path, &moved).await?;
                    c.rename(&moved, &path).await?;
                    Ok(())
                }
            })
            .await?;
            s.ops *= 2;
            Ok(s)
        }
        Op::List => Ok(timed(clients, budget, 0, move |w, c, _| {
            let dir = format!("{base}/w{w}");
            async move {
                c.list_page(&dir, "", LIST_PAGE_ENTRIES).await?;
                Ok(())
            }
        })
        .await?
        .0),
        Op::Unlink => unlink_all(clients, std::mem::take(names)).await,
    }
}

/// Worker `w`'s `k`th file, round and round.
fn nth(files: &[String], k: u64) -> String {
    files[(k as usize) % files.len()].clone()
}

/// Every worker removes its files; the time is the slowest worker's.
async fn unlink_all(clients: &[Arc<Client>], names: Vec<Vec<String>>) -> anyhow::Result<Sample> {
    let trips = |cs: &[Arc<Client>]| -> u64 {
        cs.iter()
            .map(|c| c.manager_round_trips.load(Ordering::Relaxed))
            .sum()
    };
    let trips0 = trips(clients);
    let t0 = Instant::now();
    let mut tasks = vec![];
    let mut ops = 0;
    for (c, files) in clients.iter().zip(names) {
        ops += files.len() as u64;
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for f in files {
                c.unlink(&f).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await.context("a bench worker panicked")??;
    }
    Ok(Sample {
        ops,
        bytes: 0,
        secs: t0.elapsed().as_secs_f64(),
        manager_round_trips: trips(clients) - trips0,
    })
}

fn print(a: &BenchMetaArgs, cells: &[Cell]) {
    let tick = us_per_tick();
    if !a.json {
        println!(
            "{:<8} {:>10} {:>12} {:>16} {:>14}",
            "op", "ops/s", "trips/op", "manager µs/op", "database µs/op"
        );
    }
    for (op, c) in OPS.iter().zip(cells) {
        let count: u64 = c.samples.iter().map(|s| s.ops).sum();
        let per_op = |ticks: u64| ticks as f64 * tick / count.max(1) as f64;
        let ops_per_s = median(
            c.samples
                .iter()
                .map(|s| s.ops as f64 / s.secs.max(1e-9))
                .collect(),
        );
        let trips = c.samples.iter().map(|s| s.manager_round_trips).sum::<u64>() as f64
            / count.max(1) as f64;
        let manager = per_op(c.manager_ticks);
        let db = c.db_ticks.map(per_op);
        if a.json {
            let j = serde_json::json!({
                "op": op.name(),
                "meta": a.meta,
                "clients": a.clients,
                "rounds": c.samples.len(),
                "count": count,
                "ops_per_s": (ops_per_s * 10.0).round() / 10.0,
                "manager_round_trips_per_op": (trips * 100.0).round() / 100.0,
                "manager_cpu_us_per_op": manager.round(),
                "db_cpu_us_per_op": db.map(f64::round),
            });
            println!("{j}");
        } else {
            let db = db.map_or("-".to_string(), |d| format!("{d:.0}"));
            println!(
                "{:<8} {:>10.1} {:>12.2} {:>16.0} {:>14}",
                op.name(),
                ops_per_s,
                trips,
                manager,
                db
            );
        }
    }
}
