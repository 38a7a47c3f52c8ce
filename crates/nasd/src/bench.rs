//! `nasd bench drive`: starts a drive in-process on loopback in a temporary directory and
//! measures reads and writes for every integrity scheme and protection level, at offset 0 and
//! at an odd offset, for request sizes from 1 KiB to 4 MiB (issue 2's performance section).
//!
//! Layout: a drive and its clients are separate machines, so by default the drive runs on its
//! own runtime with its threads pinned to one CPU and the client on another CPU, with `--depth`
//! requests in flight (default 4: one request at a time leaves each side idle while the other
//! works, and on this project's 2-CPU VM an idle CPU costs tens of microseconds to wake; with 8
//! or more, Linux's default `bbr` congestion control paces loopback sends of 64 KiB and up and
//! halves throughput at every protection level, which the header line names).
//! `--shared-cores --depth 1` runs both on one runtime over all CPUs,
//! one request at a time: the latency-bound view, where the client's verification of a reply
//! sits on the critical path.
//!
//! Method: one object per scheme, preallocated with non-zero data larger than the largest
//! request plus the odd offset, then for each (scheme, size, offset) the writes at every
//! protection level followed by the reads. Every write carries content of its own (a number
//! stamped every 256 bytes), as a workload's writes do. A cell is several time-boxed runs, interleaved with
//! the other protection levels' runs (in alternating order) so background load falls on all
//! alike; the reported throughput is the median run's, and a ratio to `none` is the median of
//! the ratios within each round, which cancels most of the drift between rounds on a shared
//! machine. `--ops` and `--protections` narrow a run (`none` is always measured). Per request
//! the bench also reports the bytes of object data
//! and attributes the drive hashed (`drive_hashed_bytes_per_op`, from the drive's metrics) and
//! the drive's CPU time (`drive_cpu_us_per_op`): with its own CPU, the time its threads spent
//! running (`/proc/self/task/*/schedstat`, kernel socket work included), which gives the
//! *drive-bound* ratio — what the drive itself pays for a protection level, as the seeds measure
//! it; with shared CPUs, the handler and writer time the drive meters itself. The client's CPU
//! per request (`client_cpu_us_per_op`, own-CPU layout) shows which side limits a cell. Writes
//! of `PARALLEL_HASH_BYTES_MIN` and more hash their write form on rayon's pool, over both CPUs
//! and outside the drive's threads, so their drive CPU leaves that hashing out. `--signed` adds
//! a column `signed`: integrity-data under a capability that names a writer key, so each write
//! costs one Ed25519 signature on the client and one verification on the drive (seed 001
//! §3.3.1 scheme 1, Fig 4's operation counts). `--encrypted` adds a column `encrypted`:
//! integrity-data with the data enciphered by the client before each write and deciphered after
//! each read, in 64 KiB blocks with HCTR2-AES-256 as an encrypted file's blocks are (issue 10;
//! the whole encryption layer, with its read-modify-write of partial blocks and its pins, is
//! measured by `nasd bench cluster --protection plain,encrypted`). `--no-cap-key-cache` opens
//! the drive without its capability-key cache (seed 002 §2.4, §4.4), so two runs show what the
//! cache saves. A benchmark, not a test: it asserts nothing about speed.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use nasd_client::object::Target;
use nasd_client::{Auth, Capability, DriveConn};
use nasd_cluster::pseudo_random;
use nasd_proto::{
    CapabilityArgs, ObjectId, PartitionId, Protection, Region, Rights, Scheme, Suite,
    DATA_BYTES_MAX,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Drive read/write throughput per scheme and protection level.
    Drive(BenchDriveArgs),
    /// PUT/GET of large and 4 KiB files through the client, per file layout, N clients.
    Cluster(crate::bench_cluster::BenchClusterArgs),
    /// Erasure-code encode/decode throughput per kernel, layout and shard size.
    Ec(crate::bench_ec::BenchEcArgs),
    /// PUT/GET of 64 MiB and 4 KiB objects through the S3 gateway, N clients, beside the
    /// same through the client library.
    S3(crate::bench_s3::BenchS3Args),
    /// Sequential and small-file transfers through `nasd mount` beside `nasd cp`.
    Mount(crate::bench_mount::BenchMountArgs),
    /// Password logins (OPAQUE) against the current cluster, end to end, and the Argon2id
    /// run a login (and an offline guess) costs.
    Login(crate::bench_login::BenchLoginArgs),
    /// Creates, stats, opens, renames, listings and unlinks per second through the client,
    /// C clients, with the manager's (and its database's) CPU per operation (a temporary
    /// cluster, SQLite or PostgreSQL).
    Meta(crate::bench_meta::BenchMetaArgs),
    /// Status with 20,000 files, healthy and with drives down; writes with two of four
    /// drives down, and the rebuild once they are back (a temporary cluster).
    Degraded(crate::bench_degraded::BenchDegradedArgs),
}

#[derive(Args, Debug)]
pub struct BenchDriveArgs {
    /// A reduced run (4 KiB, 64 KiB and 1 MiB; shorter cells) that finishes within 2 minutes.
    #[arg(long)]
    quick: bool,
    /// One JSON object per measured cell on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Requests in flight at once (1: one request at a time, latency-bound).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    depth: u16,
    /// Only these schemes (comma-separated; default all four).
    #[arg(long, value_delimiter = ',', value_parser = crate::parse::scheme)]
    schemes: Vec<Scheme>,
    /// Only these request sizes (comma-separated, e.g. 4K,1M; default by --quick).
    #[arg(long, value_delimiter = ',', value_parser = crate::parse::bytes)]
    sizes: Vec<u64>,
    /// Only these operations (read, write; comma-separated; default both).
    #[arg(long, value_delimiter = ',', value_parser = ["read", "write"])]
    ops: Vec<String>,
    /// Only these protection levels besides `none`, which every ratio is taken against and is
    /// always measured (comma-separated; default all five).
    #[arg(long, value_delimiter = ',', value_parser = crate::parse::protection)]
    protections: Vec<Protection>,
    /// Digest suite of the benchmark drive.
    #[arg(long, value_parser = crate::parse::suite, default_value = "blake3")]
    suite: Suite,
    /// Run the drive and the client on the same cores (one runtime over all of them) instead
    /// of giving each its own core.
    #[arg(long)]
    shared_cores: bool,
    /// Also measure `signed`: integrity-data under a capability that names a writer key, so
    /// the client signs every write and the drive verifies each signature before it stores
    /// (seed 001 §3.3.1 scheme 1; reads are not signed).
    #[arg(long)]
    signed: bool,
    /// Also measure `encrypted`: integrity-data with the client enciphering what it writes
    /// and deciphering what it reads, 64 KiB blocks of HCTR2-AES-256 (issue 10).
    #[arg(long)]
    encrypted: bool,
    /// Derive every capability key afresh instead of keeping them in the drive's
    /// capability-key cache (seed 002 §2.4, §4.4), to measure what the cache saves.
    #[arg(long)]
    no_cap_key_cache: bool,
}

impl BenchDriveArgs {
    /// Whether the run measures a protection level: `none` always (every ratio is against it),
    /// the others unless `--protections` leaves them out.
    fn measures(&self, name: &str, p: Protection) -> bool {
        name == "none" || self.protections.is_empty() || self.protections.contains(&p)
    }

    /// Whether the run measures reads or writes, by `--ops`.
    fn measures_op(&self, dir: Dir) -> bool {
        let name = if dir == Dir::Write { "write" } else { "read" };
        self.ops.is_empty() || self.ops.iter().any(|o| o == name)
    }
}

/// Offset used for unaligned requests: odd, inside a block and a chunk.
const ODD_OFFSET_BYTES: u64 = 4097;
const SIZES_FULL: [u64; 7] = [
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
];
const SIZES_QUICK: [u64; 3] = [4 << 10, 64 << 10, 1 << 20];
const PROTECTIONS: [(&str, Protection); 5] = [
    ("none", Protection::NONE),
    ("integrity-args", Protection::INTEGRITY_ARGS),
    ("integrity-data", Protection::INTEGRITY_DATA),
    ("privacy-args", Protection::PRIVACY_ARGS),
    ("privacy-data", Protection::PRIVACY_DATA),
];

/// The column of `--signed`: integrity-data under a capability naming a writer key.
const SIGNED: &str = "signed";
/// The column of `--encrypted`: integrity-data over data the client enciphers.
const ENCRYPTED: &str = "encrypted";
/// Block of the `encrypted` column's cipher: an encrypted file's default block.
const CIPHER_BLOCK_BYTES: usize = 64 << 10;

/// How long each run of a cell lasts, and how many runs make a cell.
struct Budget {
    run_time: Duration,
    run_ops_min: u32,
    runs: usize,
}

const BUDGET_FULL: Budget = Budget {
    run_time: Duration::from_millis(100),
    run_ops_min: 3,
    runs: 11,
};
const BUDGET_QUICK: Budget = Budget {
    run_time: Duration::from_millis(50),
    run_ops_min: 2,
    runs: 5,
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Write,
    Read,
}

struct Cell {
    op: Dir,
    scheme: Scheme,
    protection: &'static str,
    size: u64,
    offset: u64,
    mib_per_s: f64,
    ops_per_s: f64,
    /// Median over rounds of this level's throughput over `none`'s in the same round.
    ratio: f64,
    /// The same for `none`'s drive CPU per request over this level's.
    drive_bound_ratio: f64,
    hashed_per_op: f64,
    /// Drive CPU per request (handling plus the writer thread; socket I/O excluded), µs.
    drive_cpu_us_per_op: f64,
    /// Client CPU per request (its thread, socket work included), µs; own-core layout only.
    client_cpu_us_per_op: Option<f64>,
}

pub fn run(c: BenchCmd) -> anyhow::Result<()> {
    let a = match c {
        BenchCmd::Drive(a) => a,
        BenchCmd::Cluster(a) => return crate::bench_cluster::bench_cluster(a),
        BenchCmd::Ec(a) => return crate::bench_ec::run(a),
        BenchCmd::S3(a) => return crate::bench_s3::run(a),
        BenchCmd::Mount(a) => return crate::bench_mount::run(a),
        BenchCmd::Login(a) => return crate::bench_login::run(a),
        BenchCmd::Meta(a) => return crate::bench_meta::run(a),
        BenchCmd::Degraded(a) => return crate::bench_degraded::run(a),
    };
    let cpus = allowed_cpus();
    if a.shared_cores || cpus.len() < 2 {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let h = rt.handle().clone();
        return rt.block_on(bench_drive(a, h, false));
    }
    // Start rayon's pool (large write forms hash on it) before pinning, so it stays on all cores.
    rayon_warm();
    let (drive_cpu, client_cpu) = (cpus[0], cpus[1]);
    let drive_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-drive")
        .enable_all()
        .on_thread_start(move || pin_to(drive_cpu))
        .build()?;
    pin_to(client_cpu);
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let h = drive_rt.handle().clone();
    client_rt.block_on(bench_drive(a, h, true))
}

/// Names of the threads that belong to the drive when it has its own core: its runtime's
/// workers and blocking pool, its writer and its audit thread.
const DRIVE_THREADS: [&str; 3] = ["bench-drive", "nasd-writer", "nasd-audit"];

/// CPU time each drive thread has used so far, in ns, by thread id (the first field of
/// `/proc/self/task/TID/schedstat`: time on a CPU, kernel work for its sockets included).
fn drive_thread_cpu() -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !DRIVE_THREADS.iter().any(|n| comm.trim_end().starts_with(n)) {
            continue;
        }
        let tid = t.file_name().to_string_lossy().parse::<u32>();
        if let (Ok(tid), Some(ns)) = (tid, schedstat_ns(&t.path().join("schedstat"))) {
            out.insert(tid, ns);
        }
    }
    out
}

/// The system's TCP congestion control (it paces loopback traffic too), for the header line.
fn congestion_control() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// CPU time of the calling thread so far, ns (in the own-core layout the client's whole
/// runtime runs on this thread).
fn this_thread_cpu() -> u64 {
    schedstat_ns(std::path::Path::new("/proc/thread-self/schedstat")).unwrap_or(0)
}

/// The first field of a `schedstat` file: nanoseconds the task has spent on a CPU.
fn schedstat_ns(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU the drive's threads used between two samples; a thread that started in between counts
/// from zero, one that ended is lost (the pool's idle threads end after seconds, runs last ms).
fn cpu_between(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> u64 {
    after
        .iter()
        .map(|(tid, &ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread (and threads it spawns later) to `cpu`; best effort.
fn pin_to(cpu: usize) {
    // SAFETY: as in `allowed_cpus`; CPU_SET stays inside the set for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Starts rayon's global pool from the calling (not yet pinned) thread by hashing one large
/// write form, the work that uses it.
fn rayon_warm() {
    let mut cost = nasd_crypto::Cost::default();
    let data = vec![1u8; 1 << 20];
    let _ = nasd_crypto::integrity::pieces::write_form(
        Suite::Blake3,
        Scheme::Tree,
        0,
        &data,
        &mut cost,
    );
}

async fn bench_drive(
    a: BenchDriveArgs,
    drive_rt: tokio::runtime::Handle,
    own_core: bool,
) -> anyhow::Result<()> {
    let layout = if own_core {
        "drive and client on a core each"
    } else {
        "drive and client sharing all cores"
    };
    let sizes: &[u64] = match (a.sizes.is_empty(), a.quick) {
        (false, _) => &a.sizes,
        (true, true) => &SIZES_QUICK,
        (true, false) => &SIZES_FULL,
    };
    if sizes.iter().any(|&s| s == 0 || s > DATA_BYTES_MAX as u64) {
        anyhow::bail!("--sizes must be between 1 and {DATA_BYTES_MAX} bytes");
    }
    let schemes: &[Scheme] = if a.schemes.is_empty() {
        &Scheme::ALL
    } else {
        &a.schemes
    };
    let budget = if a.quick { &BUDGET_QUICK } else { &BUDGET_FULL };
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let partition = PartitionId(1);
    let mut opts = nasd_drive::InitOptions::new(dir.path());
    opts.partition = Some(partition);
    opts.suite = a.suite;
    opts.min_protection = Protection::NONE;
    let report = nasd_drive::init(&opts).context("initializing the benchmark drive")?;
    // Opened on a drive-runtime thread, so the drive's own threads share its core.
    let path = dir.path().to_path_buf();
    let options = nasd_drive::DriveOptions {
        cap_key_cache: !a.no_cap_key_cache,
        ..Default::default()
    };
    let drive = drive_rt
        .spawn_blocking(move || nasd_drive::Drive::open_with_options(&path, None, options))
        .await?
        .context("opening the benchmark drive")?;
    // Sharing CPUs, the drive's threads cannot be told apart from the client's by their CPU
    // time, so the drive meters its handler itself.
    drive.meter_cpu(!own_core);
    let listener = {
        let _guard = drive_rt.enter();
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(std_listener)?
    };
    let addr = listener.local_addr()?.to_string();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = drive_rt.spawn(nasd_drive::serve(drive.clone(), listener, async move {
        let _ = stop_rx.await;
    }));
    let conn = Arc::new(DriveConn::connect(&addr).await?);
    let wk_path = report
        .working_key_file
        .context("drive init wrote no working key file")?;
    let wk = nasd_client::auth::load_key_file(&wk_path)?;
    let expiry_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64 + 86_400_000;
    // The writer of the `signed` column: a fixed seed, so runs are alike.
    let writer = Arc::new(nasd_crypto::wsig::WriterSigner::from_seed(
        &nasd_crypto::Key::from_bytes([0x5e; 32]),
    ));
    // A capability for `object`; `signed`: naming the writer's key, with its signer attached.
    let cap_for = |object: ObjectId, signed: bool| {
        let cap = Capability::mint(
            wk.suite,
            &wk.key,
            CapabilityArgs {
                drive: wk.drive,
                partition,
                object,
                region: Region::new(0, u64::MAX),
                rights: Rights::ALL,
                expiry_ms,
                audit_id: 0,
                min_protection: if signed {
                    Protection::INTEGRITY_ARGS
                } else {
                    Protection::NONE
                },
                writer_key: signed.then(|| writer.public()),
            },
            0,
            false,
        );
        Auth::Capability(if signed {
            cap.with_signer(writer.clone())
        } else {
            cap
        })
    };
    let mint = |object: ObjectId| cap_for(object, false);
    let mint_signed = |object: ObjectId| cap_for(object, true);
    // The `encrypted` column's cipher: one file key, as a file's blocks have.
    let cipher = Arc::new(nasd_e2e::block::BlockCipher::new(
        nasd_e2e::FileId([0x3c; 16]),
        &nasd_e2e::FileKey::from_bytes([0x7a; 32]),
    ));
    let any = mint(ObjectId::ANY);
    let max_size = *sizes.iter().max().expect("sizes");
    let data = pseudo_random((max_size + ODD_OFFSET_BYTES) as usize, 0x9e3779b97f4a7c15);

    if !a.json {
        outln!(
            "nasd bench drive ({}; {layout}; suite {}; capability-key cache {}; depth {}; tcp {}; \
             {} runs of >= {} ms per cell; each cell: MiB/s, its ratio to none, the drive-bound \
             ratio to none, bytes the drive hashed per request)",
            if a.quick { "quick" } else { "full" },
            a.suite.name(),
            if a.no_cap_key_cache { "off" } else { "on" },
            a.depth,
            congestion_control(),
            budget.runs,
            budget.run_time.as_millis()
        );
        out!("{:<5} {:<11} {:>8} {:>6}", "op", "scheme", "size", "offset");
        for (name, p) in PROTECTIONS {
            if a.measures(name, p) {
                out!(" {name:>29}");
            }
        }
        if a.signed {
            out!(" {SIGNED:>29}");
        }
        if a.encrypted {
            out!(" {ENCRYPTED:>29}");
        }
        outln!();
    }
    let started = Instant::now();
    for &scheme in schemes {
        let t0 = Target {
            partition,
            object: ObjectId::ANY,
            protection: Protection::INTEGRITY_ARGS,
        };
        let (object, _) = conn
            .create(&any, t0, Some(scheme))
            .await
            .with_context(|| format!("creating a {scheme} object"))?;
        let cap = Arc::new(mint(object));
        let signed_cap = Arc::new(mint_signed(object));
        let t = Target {
            partition,
            object,
            protection: Protection::INTEGRITY_DATA,
        };
        conn.write(&cap, t, 0, &data)
            .await
            .with_context(|| format!("preallocating the {scheme} object"))?;
        for &size in sizes {
            for offset in [0, ODD_OFFSET_BYTES] {
                let payload = Arc::new(data[offset as usize..(offset + size) as usize].to_vec());
                for dir in [Dir::Write, Dir::Read] {
                    if !a.measures_op(dir) {
                        continue;
                    }
                    let signed = a.signed.then_some((SIGNED, Protection::INTEGRITY_DATA));
                    let encrypted = a
                        .encrypted
                        .then_some((ENCRYPTED, Protection::INTEGRITY_DATA));
                    let specs: Vec<_> = PROTECTIONS
                        .iter()
                        .copied()
                        .filter(|&(name, p)| a.measures(name, p))
                        .chain(signed)
                        .chain(encrypted)
                        .map(|(name, protection)| {
                            let auth = if name == SIGNED {
                                signed_cap.clone()
                            } else {
                                cap.clone()
                            };
                            let spec = Spec {
                                auth,
                                target: Target {
                                    partition,
                                    object,
                                    protection,
                                },
                                dir,
                                scheme,
                                size,
                                offset,
                                payload: payload.clone(),
                                cipher: (name == ENCRYPTED).then(|| cipher.clone()),
                            };
                            (name, spec)
                        })
                        .collect();
                    let row =
                        measure_row(&conn, &drive, own_core, &specs, a.depth as usize, budget)
                            .await
                            .with_context(|| {
                                format!(
                                    "{} {scheme} {size} bytes at offset {offset}",
                                    if dir == Dir::Write { "write" } else { "read" }
                                )
                            })?;
                    emit(&row, a.json);
                }
            }
        }
    }
    if !a.json {
        outln!("finished in {:.1} s", started.elapsed().as_secs_f64());
    }
    drop(conn);
    let _ = stop_tx.send(());
    let _ = server.await;
    Ok(())
}

/// What one cell measures.
#[derive(Clone)]
struct Spec {
    auth: Arc<Auth>,
    target: Target,
    dir: Dir,
    scheme: Scheme,
    size: u64,
    offset: u64,
    payload: Arc<Vec<u8>>,
    /// The `encrypted` column: what is written is enciphered first, what is read deciphered.
    cipher: Option<Arc<nasd_e2e::block::BlockCipher>>,
}

/// Enciphers (or deciphers) `buf` in place as blocks of [`CIPHER_BLOCK_BYTES`] numbered from
/// `offset`'s block, each under write counter 1.
fn cipher_blocks(c: &nasd_e2e::block::BlockCipher, offset: u64, buf: &mut [u8], encrypt: bool) {
    let first = offset / CIPHER_BLOCK_BYTES as u64;
    for (i, b) in buf.chunks_mut(CIPHER_BLOCK_BYTES).enumerate() {
        if encrypt {
            c.encrypt_in_place(first + i as u64, 1, b);
        } else {
            c.decrypt_in_place(first + i as u64, 1, b);
        }
    }
}

/// Bytes between the stamps that make each write's content new.
const STAMP_EVERY_BYTES: usize = 256;

/// Numbers the bench's writes, so that no two carry the same content.
static WRITE_STAMP: AtomicU64 = AtomicU64::new(1);

/// `payload` with a write's unique number stamped every [`STAMP_EVERY_BYTES`] (the size of an
/// `incremental` sub-block, the finest unit any scheme hashes), so every whole sub-block, chunk
/// and block a write covers differs from what the previous write left there. Rewriting the same
/// bytes would let the drive skip unchanged sub-blocks at `none` (seed 000 §3.3.1's in-place
/// update) while integrity-data must still hash them all for the request's MAC: a measurement
/// of a case no workload has.
fn stamped(payload: &[u8]) -> Vec<u8> {
    let stamp = WRITE_STAMP.fetch_add(1, Ordering::Relaxed).to_le_bytes();
    let mut v = payload.to_vec();
    for at in (0..v.len()).step_by(STAMP_EVERY_BYTES) {
        let n = (v.len() - at).min(stamp.len());
        v[at..at + n].copy_from_slice(&stamp[..n]);
    }
    v
}

async fn one(conn: &DriveConn, s: &Spec) -> Result<(), nasd_client::ClientError> {
    let region = vec![Region::new(s.offset, s.size)];
    match s.dir {
        Dir::Write => conn
            .write_regions(&s.auth, s.target, region, s.scheme, false, &{
                let mut v = stamped(&s.payload);
                if let Some(c) = &s.cipher {
                    cipher_blocks(c, s.offset, &mut v, true);
                }
                v
            })
            .await
            .map(|_| ()),
        Dir::Read => {
            let mut r = conn.read(&s.auth, s.target, region).await?;
            if let Some(c) = &s.cipher {
                cipher_blocks(c, s.offset, &mut r.data, false);
            }
            if r.data.len() as u64 != s.size {
                return Err(nasd_client::ClientError::Usage(format!(
                    "read returned {} bytes, expected {}",
                    r.data.len(),
                    s.size
                )));
            }
            Ok(())
        }
    }
}

/// One time-boxed run with `depth` requests in flight; returns operations per second.
async fn run_once(
    conn: &Arc<DriveConn>,
    s: &Spec,
    depth: usize,
    budget: &Budget,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let count = Arc::new(AtomicU32::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..depth {
        let (conn, s, count) = (conn.clone(), s.clone(), count.clone());
        let (ops_min, run_time) = (budget.run_ops_min, budget.run_time);
        set.spawn(async move {
            while count.load(Ordering::Relaxed) < ops_min || start.elapsed() < run_time {
                one(&conn, &s).await?;
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), nasd_client::ClientError>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

/// Measures one (op, scheme, size, offset) at every protection level, `none` first in
/// `specs`. A round runs every level once, in forward order on even rounds and backward on odd
/// ones, so neither drift nor going first favours a level. Throughput is the median over
/// rounds; each ratio to `none` is the median of the ratios taken within one round (a pair
/// measured moments apart shares the machine's state, so background load mostly cancels);
/// hashed bytes and CPU per request are totals over all rounds.
async fn measure_row(
    conn: &Arc<DriveConn>,
    drive: &nasd_drive::Drive,
    own_core: bool,
    specs: &[(&'static str, Spec)],
    depth: usize,
    budget: &Budget,
) -> anyhow::Result<Vec<Cell>> {
    for (_, s) in specs {
        one(conn, s).await?; // warm up
    }
    let n = specs.len();
    // Per level, per round: operations per second, requests, drive CPU ns.
    let mut rates = vec![Vec::with_capacity(budget.runs); n];
    let mut round_requests = vec![Vec::with_capacity(budget.runs); n];
    let mut round_cpu = vec![Vec::with_capacity(budget.runs); n];
    let mut hashed = vec![0u64; n];
    let mut client_cpu = vec![0u64; n];
    for round in 0..budget.runs {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        for i in order {
            let s = &specs[i].1;
            // Per-thread CPU is only meaningful (and only read) when the drive has its own core.
            let before = drive.metrics();
            let threads_before = own_core.then(drive_thread_cpu);
            let client_before = this_thread_cpu();
            rates[i].push(run_once(conn, s, depth, budget).await?);
            client_cpu[i] += this_thread_cpu().saturating_sub(client_before);
            let threads_after = own_core.then(drive_thread_cpu);
            let after = drive.metrics();
            round_requests[i].push(after.requests.saturating_sub(before.requests));
            hashed[i] += after
                .data_bytes_hashed
                .saturating_sub(before.data_bytes_hashed);
            round_cpu[i].push(match (&threads_before, &threads_after) {
                (Some(b), Some(a)) => cpu_between(b, a),
                _ => after.cpu_ns.saturating_sub(before.cpu_ns),
            });
        }
    }
    let cpu_per_op =
        |i: usize, r: usize| round_cpu[i][r] as f64 / round_requests[i][r].max(1) as f64;
    Ok(specs
        .iter()
        .enumerate()
        .map(|(i, (name, s))| {
            let requests = round_requests[i].iter().sum::<u64>().max(1) as f64;
            let ops_per_s = median((0..budget.runs).map(|r| rates[i][r]).collect());
            Cell {
                op: s.dir,
                scheme: s.scheme,
                protection: name,
                size: s.size,
                offset: s.offset,
                mib_per_s: ops_per_s * s.size as f64 / (1u64 << 20) as f64,
                ops_per_s,
                ratio: median(
                    (0..budget.runs)
                        .map(|r| rates[i][r] / rates[0][r])
                        .collect(),
                ),
                drive_bound_ratio: median(
                    (0..budget.runs)
                        .map(|r| cpu_per_op(0, r) / cpu_per_op(i, r))
                        .collect(),
                ),
                hashed_per_op: hashed[i] as f64 / requests,
                drive_cpu_us_per_op: round_cpu[i].iter().sum::<u64>() as f64 / 1000.0 / requests,
                client_cpu_us_per_op: own_core.then(|| client_cpu[i] as f64 / 1000.0 / requests),
            }
        })
        .collect())
}

/// The median of `v` (the upper one of an even count; NaN for none).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn emit(row: &[Cell], json: bool) {
    // What the drive could serve if it were the bottleneck: one core's worth of its CPU time.
    let drive_bound = |c: &Cell| c.size as f64 / c.drive_cpu_us_per_op / 1.048576;
    if json {
        for c in row {
            outln!(
                "{}",
                serde_json::json!({
                    "op": if c.op == Dir::Write { "write" } else { "read" },
                    "scheme": c.scheme.name(),
                    "protection": c.protection,
                    "size_bytes": c.size,
                    "offset_bytes": c.offset,
                    "mib_per_s": (c.mib_per_s * 100.0).round() / 100.0,
                    "ops_per_s": (c.ops_per_s * 10.0).round() / 10.0,
                    "drive_hashed_bytes_per_op": c.hashed_per_op.round(),
                    "drive_cpu_us_per_op": (c.drive_cpu_us_per_op * 100.0).round() / 100.0,
                    "client_cpu_us_per_op":
                        c.client_cpu_us_per_op.map(|u| (u * 100.0).round() / 100.0),
                    "ratio_vs_none": (c.ratio * 1000.0).round() / 1000.0,
                    "drive_bound_mib_per_s": (drive_bound(c) * 100.0).round() / 100.0,
                    "drive_bound_ratio_vs_none": (c.drive_bound_ratio * 1000.0).round() / 1000.0,
                })
            );
        }
        return;
    }
    let c0 = &row[0];
    let size = if c0.size >= 1 << 20 {
        format!("{}M", c0.size >> 20)
    } else {
        format!("{}K", c0.size >> 10)
    };
    out!(
        "{:<5} {:<11} {:>8} {:>6}",
        if c0.op == Dir::Write { "write" } else { "read" },
        c0.scheme.name(),
        size,
        c0.offset
    );
    for c in row {
        out!(
            " {:>8.1} {:>5.2}x {:>5.2}x {:>6}",
            c.mib_per_s,
            c.ratio,
            c.drive_bound_ratio,
            human_bytes(c.hashed_per_op)
        );
    }
    outln!();
}

/// Hashed bytes per op, short: `0`, `812`, `4.0K`, `1.0M`.
fn human_bytes(b: f64) -> String {
    if b < 1024.0 {
        format!("{b:.0}")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.1}K", b / 1024.0)
    } else {
        format!("{:.1}M", b / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_changes_every_sub_block() {
        for len in [1usize, 7, 8, 255, 256, 257, 4097, 65536] {
            let payload = pseudo_random(len, 7);
            let (a, b) = (stamped(&payload), stamped(&payload));
            assert_eq!((a.len(), b.len()), (len, len));
            for (i, (x, y)) in a
                .chunks(STAMP_EVERY_BYTES)
                .zip(b.chunks(STAMP_EVERY_BYTES))
                .enumerate()
            {
                assert_ne!(x, y, "window {i} of {len} bytes");
            }
        }
    }
}
