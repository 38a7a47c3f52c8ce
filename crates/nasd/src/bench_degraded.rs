//! `nasd bench degraded`: what drives going down costs, in a temporary cluster of four drives
//! the bench starts and stops itself. It makes `--files` one-byte files (eight writers), then
//! times `nasd status` (the counts the manager keeps as files change) and `status --recount`
//! (a walk of every file) healthy, then `status` with one and with two drives stopped; with
//! two down it writes `--new` new 100 kB files (laid out on the drives that take them, their
//! absent components stale), restarts the drives and times how long the manager takes to
//! rebuild every stale component by itself (no scrub asked).
//!
//! Each `status` figure is the median of [`STATUS_RUNS`] calls through the client library (a
//! logged-in client: the command's own process start and login are not in it). A benchmark,
//! not a test: it asserts nothing about speed, only that the rebuild ends within
//! [`REBUILD_WAIT_MS`].

use anyhow::{bail, Context as _};
use clap::Args;
use nasd_client::files::Client;
use nasd_cluster::{NodeId, Options};
use nasd_proto::manager::{calls, ClusterStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Drives in the bench's cluster.
const DRIVES: usize = 4;
/// Concurrent writers of the small files.
const WRITERS: u64 = 8;
/// Bytes of each file written while drives are down.
const NEW_FILE_BYTES: usize = 100_000;
/// `status` calls per figure (the median is reported).
const STATUS_RUNS: usize = 3;
/// How long the manager may take to see a drive stop or come back.
const HEALTH_WAIT_MS: u64 = 30_000;
/// How long the manager may take to rebuild every stale component once the drives are back.
const REBUILD_WAIT_MS: u64 = 120_000;
const POLL_MS: u64 = 100;

#[derive(Args, Debug)]
pub struct BenchDegradedArgs {
    /// One-byte files made before the status figures.
    #[arg(long, default_value_t = 20_000)]
    files: u64,
    /// 100 kB files written with two of the four drives down.
    #[arg(long, default_value_t = 200)]
    new: u64,
    /// One JSON object instead of lines of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: BenchDegradedArgs) -> anyhow::Result<()> {
    let rt = crate::runtime()?;
    let dir = tempfile::tempdir()?;
    let mut cluster = crate::cmd_up::start(dir.path(), &Options::drives(DRIVES), !a.json)?;
    let c = rt.block_on(Client::connect(cluster.session_config()?))?;
    let mut out = serde_json::Map::new();
    let mut note = |key: &str, what: String, d: Duration| {
        if !a.json {
            println!("{what:<52} {:>10.1} ms", d.as_secs_f64() * 1e3);
        }
        out.insert(key.into(), serde_json::json!(d.as_secs_f64() * 1e3));
    };
    rt.block_on(c.mkdir("/d", 0o755)).context("making /d")?;
    let t = rt.block_on(make_files(&c, a.files))?;
    note(
        "make_ms",
        format!("{} one-byte files, {WRITERS} writers", a.files),
        t,
    );
    note(
        "status_ms",
        "status, 4 of 4 up".into(),
        rt.block_on(status_median(&c, false))?,
    );
    note(
        "recount_ms",
        "status --recount, 4 of 4 up".into(),
        rt.block_on(status_median(&c, true))?,
    );
    for (victim, up) in [(3, 3), (2, 2)] {
        cluster.stop(NodeId::Drive(victim))?;
        rt.block_on(wait_healthy(&c, up))?;
        let t = rt.block_on(status_median(&c, false))?;
        note(
            &format!("status_{up}_up_ms"),
            format!("status, {up} of 4 up"),
            t,
        );
    }
    let t = rt.block_on(write_new(&c, a.new))?;
    note(
        "degraded_writes_ms",
        format!("{} new 100 kB files, 2 of 4 up", a.new),
        t,
    );
    for victim in [2, 3] {
        cluster.restart(NodeId::Drive(victim))?;
    }
    let t = rt.block_on(wait_rebuilt(&c))?;
    note(
        "rebuild_ms",
        "drives restarted to every component rebuilt".into(),
        t,
    );
    if a.json {
        println!("{}", serde_json::Value::Object(out));
    }
    // The cluster stops when dropped, before its directory goes.
    drop(c);
    drop(cluster);
    Ok(())
}

/// Makes `n` one-byte files under `/d` with [`WRITERS`] writers; how long it took.
async fn make_files(c: &Arc<Client>, n: u64) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let mut tasks = vec![];
    for w in 0..WRITERS {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(WRITERS as usize) {
                c.put_bytes(&format!("/d/f{i}"), b"x", 0o644).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(t0.elapsed())
}

/// Writes `n` new files of [`NEW_FILE_BYTES`] one after another; how long it took.
async fn write_new(c: &Arc<Client>, n: u64) -> anyhow::Result<Duration> {
    let body = vec![7u8; NEW_FILE_BYTES];
    let t0 = Instant::now();
    for i in 0..n {
        c.put_bytes(&format!("/d/g{i}"), &body, 0o644).await?;
    }
    Ok(t0.elapsed())
}

async fn status(c: &Arc<Client>, recount: bool) -> anyhow::Result<ClusterStatus> {
    Ok(c.call("/", calls::Status { recount }).await?)
}

/// The median time of [`STATUS_RUNS`] status calls.
async fn status_median(c: &Arc<Client>, recount: bool) -> anyhow::Result<Duration> {
    let mut v = vec![];
    for _ in 0..STATUS_RUNS {
        let t0 = Instant::now();
        status(c, recount).await?;
        v.push(t0.elapsed());
    }
    v.sort();
    Ok(v[v.len() / 2])
}

/// Waits until the manager sees exactly `n` drives healthy.
async fn wait_healthy(c: &Arc<Client>, n: usize) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        let s = status(c, false).await?;
        let healthy = s.drives.iter().filter(|d| d.healthy).count();
        if healthy == n {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_millis(HEALTH_WAIT_MS) {
            bail!("the manager sees {healthy} drives up, not {n}, after {HEALTH_WAIT_MS} ms");
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Waits until no component is stale and no file degraded; how long it took.
async fn wait_rebuilt(c: &Arc<Client>) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    loop {
        let s = status(c, false).await?;
        if s.stale_components == 0 && s.degraded_files == 0 {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > Duration::from_millis(REBUILD_WAIT_MS) {
            bail!(
                "{} components still stale {REBUILD_WAIT_MS} ms after the drives came back",
                s.stale_components
            );
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}
