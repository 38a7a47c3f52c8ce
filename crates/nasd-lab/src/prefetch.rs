//! `nasd lab prefetch`: seed 002 §4.6's informed-prefetching experiment on nasd's drive.
//!
//! The seed rendered 25 random planar slices through a 256 × 256 × 256 cube of 32-bit values
//! (64 MiB) with a hinting XDataSlice: 120.2 s without prefetching, 68.1 s with hints and read
//! notifications (1.76×). Here:
//! - one drive, a real `nasd drive run` process, made slow and cold: every data read waits a
//!   simulated seek of `seek_ms` on one of three simulated spindles (the seed's drive striped
//!   over three disks) and is dropped from the page cache after it (`DriveOptions`);
//! - the volume is one object, x fastest (`offset = 4 (x + 256 y + 65536 z)`), written once;
//! - a slice is a plane `x = c`, `y = c` or `z = c` (orientations in turn, positions seeded).
//!   The application reads, from each 4 KiB page the plane touches, the span of the page that
//!   holds its values, one read at a time, as a program reading through a file would: a `z`
//!   plane is 64 reads of 4 KiB, a `y` plane 256 scattered 1 KiB rows, an `x` plane 16,384
//!   reads of 3,076 bytes (four values 1 KiB apart per page: every block of the volume);
//! - without hints, then on a freshly started (cold) drive with hints: before each slice the
//!   client hints all its reads in order, and reports every 16 reads consumed.
//!
//! Every read is verified as usual; the bytes of both runs are checked against the volume
//! written, and the drive's counters (blocks prefetched, reads served from its cache) are
//! reported, so a run whose hints did nothing says so.

use crate::error::LabError;
use crate::report::{fmt, Figure, Report, Series, Table};
use nasd_client::object::Target;
use nasd_client::prefetch::HintStream;
use nasd_client::{Auth, Capability, DriveConn};
use nasd_proto::ext::StreamCounters;
use nasd_proto::{CapabilityArgs, ObjectId, PartitionId, Protection, Region, Rights, Scheme};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Values along each axis of the cube (seed 002 §4.6).
pub const SIDE: u64 = 256;
/// Bytes of one value.
pub const VALUE_BYTES: u64 = 4;
/// Bytes of the volume: 64 MiB.
pub const VOLUME_BYTES: u64 = SIDE * SIDE * SIDE * VALUE_BYTES;
/// The page the application reads through.
pub const PAGE_BYTES: u64 = 4096;
/// Slices of a full run (seed 002 §4.6) and of a quick one (one per orientation).
pub const SLICES_FULL: usize = 25;
pub const SLICES_QUICK: usize = 3;
/// Default simulated seek, milliseconds: short enough that the full run takes minutes, long
/// enough that a read waits for it rather than for the CPU.
pub const SEEK_MS_DEFAULT: u64 = 2;
/// The seed's figures, seconds.
pub const SEED_WITHOUT_S: f64 = 120.2;
pub const SEED_WITH_S: f64 = 68.1;
/// Bytes written per request when the volume is stored.
const WRITE_BYTES: usize = 4 << 20;
const PARTITION: PartitionId = PartitionId(1);

/// How to run the experiment.
#[derive(Clone, Debug)]
pub struct PrefetchOptions {
    pub quick: bool,
    pub seed: u64,
    /// The `nasd` executable that serves the drive.
    pub nasd_bin: PathBuf,
    /// Slices (default 25; 3 with `quick`).
    pub slices: Option<usize>,
    /// Simulated seek, milliseconds (default [`SEEK_MS_DEFAULT`]).
    pub seek_ms: Option<u64>,
    /// Simulated spindles (default 3, the seed's drive's disks).
    pub spindles: Option<usize>,
}

/// The three plane orientations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    X,
    Y,
    Z,
}

impl Plane {
    fn name(self) -> &'static str {
        match self {
            Plane::X => "x",
            Plane::Y => "y",
            Plane::Z => "z",
        }
    }
}

/// A slice: its plane and position.
#[derive(Clone, Copy, Debug)]
pub struct Slice {
    pub plane: Plane,
    pub at: u64,
}

/// The reads of one slice, in order: per 4 KiB page the plane touches, the span of the page
/// holding its values.
pub fn slice_reads(s: Slice) -> Vec<Region> {
    let off = |x: u64, y: u64, z: u64| VALUE_BYTES * (x + SIDE * y + SIDE * SIDE * z);
    let mut wanted: Vec<u64> = Vec::with_capacity((SIDE * SIDE) as usize);
    for a in 0..SIDE {
        for b in 0..SIDE {
            wanted.push(match s.plane {
                Plane::X => off(s.at, b, a),
                Plane::Y => off(b, s.at, a),
                Plane::Z => off(b, a, s.at),
            });
        }
    }
    wanted.sort_unstable();
    let mut reads: Vec<Region> = vec![];
    for v in wanted {
        match reads.last_mut() {
            Some(r) if r.offset / PAGE_BYTES == v / PAGE_BYTES => {
                r.len = v + VALUE_BYTES - r.offset;
            }
            _ => reads.push(Region::new(v, VALUE_BYTES)),
        }
    }
    reads
}

/// Seeded slices: orientations in turn, positions drawn (splitmix64).
pub fn slices(n: usize, seed: u64) -> Vec<Slice> {
    let mut state = seed ^ 0x5eed_0002_0406;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..n)
        .map(|i| Slice {
            plane: [Plane::X, Plane::Y, Plane::Z][i % 3],
            at: next() % SIDE,
        })
        .collect()
}

/// One run over all slices.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub hinted: bool,
    pub seconds: f64,
    pub reads: u64,
    pub bytes: u64,
    /// The drive's counters for the run's hint streams (zero without hints).
    pub counters: StreamCounters,
    /// Every byte read equals the volume written.
    pub bytes_match: bool,
}

struct DriveProcess {
    started: nasd_cluster::process::Started,
    addr: String,
}

impl Drop for DriveProcess {
    fn drop(&mut self) {
        nasd_cluster::process::stop_pid(self.started.child.id());
        let _ = self.started.child.wait();
    }
}

fn cluster_err(e: nasd_cluster::ClusterError) -> LabError {
    LabError::Cluster(Box::new(e))
}

fn client_err(what: &str) -> impl Fn(nasd_client::ClientError) -> LabError + '_ {
    move |e| LabError::Client(format!("{what}: {e}"))
}

/// Starts `nasd drive run` on the drive in `dir/drive`, slow and cold.
fn start_drive(o: &PrefetchOptions, dir: &std::path::Path) -> Result<DriveProcess, LabError> {
    let addr = nasd_cluster::ports::free_addrs(1)
        .map_err(cluster_err)?
        .remove(0);
    let data = dir.join("drive");
    let seek = o.seek_ms.unwrap_or(SEEK_MS_DEFAULT).to_string();
    let spindles = spindles(o).to_string();
    let args: Vec<&std::ffi::OsStr> = [
        "drive",
        "run",
        "--data",
        data.to_str().unwrap_or_default(),
        "--listen",
        &addr,
        "--seek-ms",
        &seek,
        "--spindles",
        &spindles,
        "--cache-reads",
        "--cold",
    ]
    .iter()
    .map(|s| std::ffi::OsStr::new(*s))
    .collect();
    let node = nasd_cluster::NodeId::Drive(0);
    let mut started = nasd_cluster::process::spawn(&o.nasd_bin, &[], dir, node, &args, false)
        .map_err(cluster_err)?;
    nasd_cluster::process::wait_ready(dir, node, &addr, &mut started).map_err(cluster_err)?;
    Ok(DriveProcess { started, addr })
}

fn spindles(o: &PrefetchOptions) -> usize {
    o.spindles.unwrap_or(nasd_drive::options::SPINDLES_DEFAULT)
}

/// Runs the experiment.
pub fn run(o: &PrefetchOptions) -> Result<Report, LabError> {
    let n = o
        .slices
        .unwrap_or(if o.quick { SLICES_QUICK } else { SLICES_FULL });
    if n == 0 || n > 1000 {
        return Err(LabError::Usage("--slices must be 1 to 1000".into()));
    }
    let seek_ms = o.seek_ms.unwrap_or(SEEK_MS_DEFAULT);
    if seek_ms > nasd_drive::storage::SEEK_MS_MAX {
        return Err(LabError::Usage(format!(
            "--seek-ms is at most {}",
            nasd_drive::storage::SEEK_MS_MAX
        )));
    }
    if !(1..=nasd_drive::storage::SPINDLES_MAX).contains(&spindles(o)) {
        return Err(LabError::Usage(format!(
            "--spindles must be 1 to {}",
            nasd_drive::storage::SPINDLES_MAX
        )));
    }
    let dir = tempfile::tempdir().map_err(|source| LabError::Output {
        path: std::env::temp_dir(),
        source,
    })?;
    let mut init = nasd_drive::InitOptions::new(dir.path().join("drive"));
    init.partition = Some(PARTITION);
    init.scheme = Scheme::Tree;
    init.capacity_bytes = Some(4 * VOLUME_BYTES);
    let report =
        nasd_drive::init(&init).map_err(|e| LabError::Client(format!("drive init: {e}")))?;
    let wk_path = report
        .working_key_file
        .ok_or_else(|| LabError::Client("drive init wrote no working key file".into()))?;
    let wk = nasd_client::auth::load_key_file(&wk_path).map_err(client_err("working key"))?;
    let control = Auth::from_key_file(&wk);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| LabError::Output {
            path: dir.path().to_path_buf(),
            source,
        })?;
    let volume = nasd_cluster::pseudo_random(VOLUME_BYTES as usize, o.seed);
    let slices = slices(n, o.seed);
    let mint = |object: ObjectId| {
        let expiry_ms = now_ms() + 3_600_000;
        Auth::Capability(Capability::mint(
            wk.suite,
            &wk.key,
            CapabilityArgs {
                drive: wk.drive,
                partition: PARTITION,
                object,
                region: Region::new(0, u64::MAX),
                rights: Rights::ALL,
                expiry_ms,
                audit_id: 0,
                min_protection: Protection::INTEGRITY_ARGS,
                writer_key: None,
            },
            0,
            false,
        ))
    };

    // Store the volume, then stop the drive so both runs start cold.
    let object = {
        let d = start_drive(o, dir.path())?;
        rt.block_on(async {
            let conn = DriveConn::connect(&d.addr)
                .await
                .map_err(client_err("connect"))?;
            let t = Target {
                partition: PARTITION,
                object: ObjectId::ANY,
                protection: Protection::INTEGRITY_ARGS,
            };
            let (object, _) = conn
                .create(&mint(ObjectId::ANY), t, Some(Scheme::Tree))
                .await
                .map_err(client_err("create"))?;
            let cap = mint(object);
            let t = Target { object, ..t };
            for (i, chunk) in volume.chunks(WRITE_BYTES).enumerate() {
                conn.write(&cap, t, (i * WRITE_BYTES) as u64, chunk)
                    .await
                    .map_err(client_err("write the volume"))?;
            }
            Ok::<_, LabError>(object)
        })?
    };

    let mut results = vec![];
    for hinted in [false, true] {
        let d = start_drive(o, dir.path())?;
        let cap = mint(object);
        let r = rt.block_on(render(
            &d.addr, &cap, &control, object, &slices, &volume, hinted,
        ))?;
        results.push(r);
    }
    Ok(build_report(o, n, seek_ms, &slices, &results))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Reads every slice, one read at a time, with or without hints; checks the bytes.
async fn render(
    addr: &str,
    cap: &Auth,
    control: &Auth,
    object: ObjectId,
    slices: &[Slice],
    volume: &[u8],
    hinted: bool,
) -> Result<RunResult, LabError> {
    let conn = DriveConn::connect(addr)
        .await
        .map_err(client_err("connect"))?;
    let t = Target {
        partition: PARTITION,
        object,
        protection: Protection::INTEGRITY_DATA,
    };
    let mut stream = if hinted {
        Some(
            HintStream::open(&conn, cap, t, control)
                .await
                .map_err(client_err("open a hint stream"))?,
        )
    } else {
        None
    };
    let mut out = RunResult {
        hinted,
        bytes_match: true,
        ..Default::default()
    };
    let mut image = 0f64;
    let t0 = Instant::now();
    for s in slices {
        let reads = slice_reads(*s);
        if let Some(st) = stream.as_mut() {
            st.replace(&reads)
                .await
                .map_err(client_err("hint a slice"))?;
        }
        for r in &reads {
            let got = conn
                .read(cap, t, vec![*r])
                .await
                .map_err(client_err("read"))?;
            let want = &volume[r.offset as usize..(r.offset + r.len) as usize];
            out.bytes_match &= got.data == want;
            // "Render": sum the slice's values, so the data is used.
            image += got.data.iter().map(|&b| b as f64).sum::<f64>();
            out.reads += 1;
            out.bytes += got.data.len() as u64;
            if let Some(st) = stream.as_mut() {
                st.consumed(1).await.map_err(client_err("consume"))?;
            }
        }
        if let Some(st) = stream.as_mut() {
            let c = st.sync().await.map_err(client_err("consume"))?;
            out.counters = c;
        }
    }
    out.seconds = t0.elapsed().as_secs_f64();
    std::hint::black_box(image);
    // Give the drive's last counters a moment: nothing is left in flight after a sync.
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok(out)
}

fn build_report(
    o: &PrefetchOptions,
    n: usize,
    seek_ms: u64,
    slices: &[Slice],
    results: &[RunResult],
) -> Report {
    let without = results
        .iter()
        .find(|r| !r.hinted)
        .cloned()
        .unwrap_or_default();
    let with = results
        .iter()
        .find(|r| r.hinted)
        .cloned()
        .unwrap_or_default();
    let ratio = without.seconds / with.seconds.max(1e-9);
    let seed_ratio = SEED_WITHOUT_S / SEED_WITH_S;
    let mut t = Table::new(
        "prefetch",
        &format!(
            "Seed 002 §4.6: {n} planar slices through a 256^3 volume of 32-bit values (64 MiB), one drive \
             with a simulated {seek_ms} ms seek on {} spindles, cold{}",
            spindles(o),
            if o.quick { " (quick)" } else { "" }
        ),
        &[
            "run",
            "seconds",
            "s/slice",
            "reads",
            "MiB read",
            "prefetched blocks",
            "cache hits",
            "dropped",
            "bytes match",
            "seed seconds",
        ],
    );
    for (r, seed_s) in [(&without, SEED_WITHOUT_S), (&with, SEED_WITH_S)] {
        let name = if r.hinted {
            "with hints"
        } else {
            "without hints"
        };
        t.push(
            vec![
                name.into(),
                fmt(r.seconds, 2),
                fmt(r.seconds / n as f64, 3),
                r.reads.to_string(),
                fmt(r.bytes as f64 / (1 << 20) as f64, 1),
                r.counters.prefetched_blocks.to_string(),
                r.counters.cache_hit_blocks.to_string(),
                r.counters.dropped_blocks.to_string(),
                r.bytes_match.to_string(),
                fmt(seed_s, 1),
            ],
            serde_json::json!({
                "table": "prefetch",
                "run": if r.hinted { "hinted" } else { "unhinted" },
                "slices": n,
                "seek_ms": seek_ms,
                "spindles": spindles(o),
                "seconds": r.seconds,
                "reads": r.reads,
                "bytes": r.bytes,
                "prefetched_blocks": r.counters.prefetched_blocks,
                "cache_hit_blocks": r.counters.cache_hit_blocks,
                "dropped_blocks": r.counters.dropped_blocks,
                "bytes_match": r.bytes_match,
                "seed_seconds": seed_s,
            }),
        );
    }
    let mut v = Table::new(
        "prefetch_ratio",
        "Speed-up of hints and read notifications",
        &["measured", "seed", "measured s", "seed s"],
    );
    v.push(
        vec![
            format!("{}x", fmt(ratio, 2)),
            format!("{}x", fmt(seed_ratio, 2)),
            format!("{} -> {}", fmt(without.seconds, 1), fmt(with.seconds, 1)),
            format!("{SEED_WITHOUT_S} -> {SEED_WITH_S}"),
        ],
        serde_json::json!({
            "table": "prefetch_ratio",
            "ratio": ratio,
            "seed_ratio": seed_ratio,
            "without_s": without.seconds,
            "with_s": with.seconds,
            "seed_without_s": SEED_WITHOUT_S,
            "seed_with_s": SEED_WITH_S,
        }),
    );
    let points = |r: &RunResult| -> Vec<(f64, f64)> {
        // The run's total at x = 0, the seed's at x = 1.
        vec![
            (0.0, r.seconds),
            (
                1.0,
                if r.hinted {
                    SEED_WITH_S
                } else {
                    SEED_WITHOUT_S
                },
            ),
        ]
    };
    let planes: Vec<&str> = slices.iter().map(|s| s.plane.name()).collect();
    Report {
        experiment: "prefetch".into(),
        tables: vec![t, v],
        figures: vec![Figure {
            stem: "prefetch".into(),
            title: "Seed 002 §4.6: slice rendering without and with hints (x=0 measured, x=1 seed)"
                .into(),
            x_label: "0 = measured here, 1 = seed".into(),
            y_label: "seconds".into(),
            log_y: false,
            y_max: None,
            series: vec![
                Series {
                    name: "without hints".into(),
                    points: points(&without),
                },
                Series {
                    name: "with hints".into(),
                    points: points(&with),
                },
            ],
        }],
        notes: vec![
            format!(
                "slices (plane orientation in order): {}; each is read one request at a time through \
                 4 KiB pages; the hinted run hints each slice's reads before it and reports \
                 consumption every {} reads",
                planes.join(","),
                nasd_client::prefetch::CONSUME_EVERY_READS
            ),
            "each run starts a new drive process (an empty block cache) whose reads wait the \
             simulated seek and leave the page cache (posix_fadvise DONTNEED); absolute times \
             depend on the simulated seek, the ratio is what compares with the seed's 1.76x"
                .into(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_reads_cover_exactly_the_planes_values() {
        for plane in [Plane::X, Plane::Y, Plane::Z] {
            let reads = slice_reads(Slice { plane, at: 17 });
            let (n, bytes) = match plane {
                Plane::X => (16384, 3076),
                Plane::Y => (256, 1024),
                Plane::Z => (64, 4096),
            };
            assert_eq!(reads.len(), n, "{plane:?}");
            assert!(reads.iter().all(|r| r.len == bytes), "{plane:?}");
            // within a page, in file order
            assert!(reads
                .iter()
                .all(|r| r.offset / PAGE_BYTES == (r.offset + r.len - 1) / PAGE_BYTES));
            assert!(reads.windows(2).all(|w| w[0].offset < w[1].offset));
            assert!(reads.iter().all(|r| r.offset + r.len <= VOLUME_BYTES));
        }
        // a z plane is contiguous: 256 KiB from 17 * 256 KiB
        let z = slice_reads(Slice {
            plane: Plane::Z,
            at: 17,
        });
        assert_eq!(z[0].offset, 17 * 256 * 1024);
    }

    #[test]
    fn slices_are_seeded_and_take_turns() {
        let a = slices(6, 1);
        let b = slices(6, 1);
        assert!(a
            .iter()
            .zip(&b)
            .all(|(x, y)| x.at == y.at && x.plane == y.plane));
        assert_eq!(a[3].plane, Plane::X);
        assert!(a.iter().all(|s| s.at < SIDE));
        assert!(slices(6, 2).iter().zip(&a).any(|(x, y)| x.at != y.at));
    }
}
