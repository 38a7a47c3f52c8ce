//! The `prefetch` drive extension (seed 002 §2.2, §3.4, §4.6) against a real `nasd drive run`
//! process: hints change no byte a read returns, a hint is refused wherever the capability
//! would refuse a read, the block cache stays within its bound, a drive without the extension
//! (and a client that does not use it) still works, and `nasd lab prefetch --quick` runs end to
//! end with prefetched blocks served from the drive's cache.

mod common;
use common::drive::*;
use nasd_client::object::Target;
use nasd_client::prefetch::HintStream;
use nasd_client::{Auth, Capability, ClientError, DriveConn};
use nasd_proto::{
    CapabilityArgs, ObjectId, PartitionId, Protection, Region, Rights, Scheme, Status,
};

const P: PartitionId = PartitionId(1);
const BLOCK: u64 = 8192;

struct Setup {
    drive: TestDrive,
    key: Auth,
    wk: nasd_crypto::keyfile::KeyFile,
}

impl Setup {
    fn new(run_args: &[&str]) -> Setup {
        let drive = TestDrive::start_with(run_args);
        let path = std::path::PathBuf::from(drive.working_key());
        let wk = nasd_client::auth::load_key_file(&path).unwrap();
        Setup {
            key: Auth::from_key_file(&wk),
            drive,
            wk,
        }
    }

    fn cap(&self, object: ObjectId, region: Region, rights: Rights) -> Auth {
        let expiry_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + 600_000;
        Auth::Capability(Capability::mint(
            self.wk.suite,
            &self.wk.key,
            CapabilityArgs {
                drive: self.wk.drive,
                partition: P,
                object,
                region,
                rights,
                expiry_ms,
                audit_id: 7,
                min_protection: Protection::INTEGRITY_ARGS,
                writer_key: None,
            },
            0,
            false,
        ))
    }

    fn all(&self, object: ObjectId) -> Auth {
        self.cap(object, Region::new(0, u64::MAX), Rights::ALL)
    }

    /// A new `tree` object holding `bytes`.
    async fn object(&self, conn: &DriveConn, bytes: &[u8]) -> ObjectId {
        let t = target(ObjectId::ANY);
        let (o, _) = conn
            .create(&self.all(ObjectId::ANY), t, Some(Scheme::Tree))
            .await
            .unwrap();
        for (i, c) in bytes.chunks(4 << 20).enumerate() {
            conn.write(&self.all(o), target(o), (i << 22) as u64, c)
                .await
                .unwrap();
        }
        o
    }
}

fn target(object: ObjectId) -> Target {
    Target {
        partition: P,
        object,
        protection: Protection::INTEGRITY_DATA,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Scattered small reads, some sharing a block, some crossing one, one past the end.
fn scattered(size: u64, n: u64) -> Vec<Region> {
    let mut rng = common::Rng(0x5eed);
    (0..n)
        .map(|i| match i % 4 {
            0 => Region::new(rng.below(size / 1024) * 1024, 1024),
            1 => Region::new(rng.below(size - 9000), 4096 + rng.below(4096)),
            2 => Region::new(rng.below(size / BLOCK) * BLOCK + 4096, 3000),
            _ => Region::new(size - 100, 4000),
        })
        .collect()
}

fn expected(bytes: &[u8], r: Region) -> &[u8] {
    let end = (r.offset + r.len).min(bytes.len() as u64);
    &bytes[r.offset as usize..end as usize]
}

fn refused(e: ClientError) -> Status {
    e.status().unwrap_or_else(|| panic!("not a refusal: {e}"))
}

#[test]
fn hints_change_no_byte_and_hinted_blocks_are_served_from_the_cache() {
    let s = Setup::new(&["--seek-ms", "1", "--cold"]);
    rt().block_on(async {
        let conn = DriveConn::connect(&s.drive.addr).await.unwrap();
        let size = 3 << 20;
        let bytes = common::rand_bytes(size as usize, 11);
        let o = s.object(&conn, &bytes).await;
        let cap = s.all(o);
        let reads = scattered(size, 300);

        let mut plain = vec![];
        for r in &reads {
            plain.push(conn.read(&cap, target(o), vec![*r]).await.unwrap().data);
        }
        let mut st = HintStream::open(&conn, &cap, target(o), &s.key)
            .await
            .unwrap();
        st.replace(&reads).await.unwrap();
        // Give the fetchers a head start, as an application computing between reads would.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let mut hinted = vec![];
        for r in &reads {
            hinted.push(conn.read(&cap, target(o), vec![*r]).await.unwrap().data);
            st.consumed(1).await.unwrap();
        }
        let c = st.sync().await.unwrap();
        for (i, r) in reads.iter().enumerate() {
            assert_eq!(plain[i], expected(&bytes, *r), "unhinted read {i} {r:?}");
            assert_eq!(hinted[i], plain[i], "hinted read {i} {r:?}");
        }
        assert!(c.prefetched_blocks > 0, "{c:?}");
        assert!(
            c.cache_hit_blocks >= c.prefetched_blocks / 2,
            "hinted blocks were not read from the cache: {c:?}"
        );
    });
}

#[test]
fn a_hint_is_refused_wherever_a_read_would_be() {
    let s = Setup::new(&[]);
    rt().block_on(async {
        let conn = DriveConn::connect(&s.drive.addr).await.unwrap();
        let bytes = common::rand_bytes(1 << 20, 3);
        let mine = s.object(&conn, &bytes).await;
        let other = s.object(&conn, &bytes).await;
        let hint = |auth: Auth, object: ObjectId, r: Region| {
            let conn = &conn;
            async move { conn.hint(&auth, target(object), false, vec![r]).await }
        };
        let first_half = s.cap(mine, Region::new(0, 512 << 10), Rights::ALL);
        // a region outside the capability's
        let e = hint(first_half.clone(), mine, Region::new(600 << 10, 4096))
            .await
            .unwrap_err();
        assert_eq!(refused(e), Status::RegionOutsideCapability);
        // another object than the capability's
        let e = hint(s.all(mine), other, Region::new(0, 4096))
            .await
            .unwrap_err();
        assert_eq!(refused(e), Status::ObjectMismatch);
        // a capability without the read right
        let write_only = s.cap(mine, Region::new(0, u64::MAX), Rights::WRITE);
        let e = hint(write_only, mine, Region::new(0, 4096))
            .await
            .unwrap_err();
        assert_eq!(refused(e), Status::RightsDenied);
        // the control objects are no one's to prefetch
        let e = hint(s.key.clone(), ObjectId::DRIVE_CONTROL, Region::new(0, 10))
            .await
            .unwrap_err();
        assert_eq!(refused(e), Status::ReadOnlyObject);
        // inside the capability it is accepted, and another capability's consume sees
        // nothing of its stream
        let (first, next) = hint(first_half.clone(), mine, Region::new(0, 4096))
            .await
            .unwrap();
        assert_eq!((first, next), (0, 1));
        let c = conn.consume(&s.all(mine), target(mine), 1).await.unwrap();
        assert_eq!(c, Default::default());
    });
}

#[test]
fn the_block_cache_stays_within_its_bound() {
    // 32 blocks of cache, a budget far above it, and hints for 512 blocks.
    let s = Setup::new(&[
        "--cache-bytes",
        "256K",
        "--prefetch-ahead-bytes",
        "64M",
        "--seek-ms",
        "1",
    ]);
    rt().block_on(async {
        let conn = DriveConn::connect(&s.drive.addr).await.unwrap();
        let info = conn.drive_control(&s.key, P).await.unwrap();
        assert_eq!(info.cache_bytes, 256 << 10);
        let size = 4 << 20;
        let bytes = common::rand_bytes(size as usize, 5);
        let o = s.object(&conn, &bytes).await;
        let cap = s.all(o);
        let reads: Vec<Region> = (0..size / BLOCK)
            .map(|b| Region::new(b * BLOCK, BLOCK))
            .collect();
        let mut st = HintStream::open(&conn, &cap, target(o), &s.key)
            .await
            .unwrap();
        st.replace(&reads).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let c = st.sync().await.unwrap();
        assert_eq!(
            c.prefetched_blocks, 32,
            "a full cache stops the fetchers: {c:?}"
        );
        // Consuming makes room: the fetchers go on, and still never hold more than 32.
        for (i, r) in reads.iter().enumerate().take(256) {
            let got = conn.read(&cap, target(o), vec![*r]).await.unwrap();
            assert_eq!(got.data, expected(&bytes, *r), "read {i}");
            st.consumed(1).await.unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let c = st.sync().await.unwrap();
        assert!(c.prefetched_blocks > 256, "{c:?}");
        assert!(
            c.prefetched_blocks <= 256 + 32,
            "more blocks held than the cache holds: {c:?}"
        );
    });
}

#[test]
fn a_drive_without_the_extension_and_a_client_without_hints_still_work() {
    for args in [&["--no-prefetch"][..], &["--cache-bytes", "0"][..]] {
        let s = Setup::new(args);
        rt().block_on(async {
            let conn = DriveConn::connect(&s.drive.addr).await.unwrap();
            let info = conn.drive_control(&s.key, P).await.unwrap();
            assert!(info.extensions.is_empty(), "{args:?}: {info:?}");
            let bytes = common::rand_bytes(1 << 20, 9);
            let o = s.object(&conn, &bytes).await;
            let cap = s.all(o);
            // the client checks the listing before it hints
            let e = HintStream::open(&conn, &cap, target(o), &s.key)
                .await
                .err()
                .expect("a drive without the extension");
            assert!(e.to_string().contains("does not serve"), "{e}");
            // and a hint sent anyway is an unknown operation, answered authenticated
            match conn
                .hint(&cap, target(o), false, vec![Region::new(0, 10)])
                .await
            {
                Err(ClientError::Refused {
                    status: Status::UnknownOp,
                    authenticated: true,
                    ..
                }) => {}
                other => panic!("{args:?}: {other:?}"),
            }
            for r in scattered(1 << 20, 40) {
                let got = conn.read(&cap, target(o), vec![r]).await.unwrap();
                assert_eq!(got.data, expected(&bytes, r));
            }
        });
    }
    // A default drive lists the extension.
    let s = Setup::new(&[]);
    rt().block_on(async {
        let conn = DriveConn::connect(&s.drive.addr).await.unwrap();
        let info = conn.drive_control(&s.key, P).await.unwrap();
        let names: Vec<_> = info
            .extensions
            .iter()
            .map(|e| (e.opcode, e.version, e.name.as_str()))
            .collect();
        assert_eq!(names, [(64, 1, "prefetch"), (65, 1, "prefetch")]);
    });
}

#[test]
fn lab_prefetch_quick_runs_end_to_end() {
    let out = ok(&["lab", "prefetch", "--quick", "--json", "--seek-ms", "1"]);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let run = |name: &str| {
        rows.iter()
            .find(|r| r["table"] == "prefetch" && r["run"] == name)
            .unwrap_or_else(|| panic!("no {name} row in {out}"))
            .clone()
    };
    let (plain, hinted) = (run("unhinted"), run("hinted"));
    for r in [&plain, &hinted] {
        assert_eq!(r["bytes_match"], true, "{r}");
        assert_eq!(r["slices"], 3);
    }
    assert_eq!(plain["reads"], hinted["reads"]);
    assert_eq!(plain["prefetched_blocks"], 0);
    let prefetched = hinted["prefetched_blocks"].as_u64().unwrap();
    let hits = hinted["cache_hit_blocks"].as_u64().unwrap();
    // The x slice alone touches every one of the volume's 8192 blocks.
    assert!(prefetched > 8000, "{hinted}");
    assert!(hits >= prefetched, "{hinted}");
    let ratio = rows
        .iter()
        .find(|r| r["table"] == "prefetch_ratio")
        .unwrap();
    assert_eq!(ratio["seed_without_s"], 120.2);
    assert_eq!(ratio["seed_with_s"], 68.1);
    // Not a benchmark: only "not slower beyond noise".
    assert!(ratio["ratio"].as_f64().unwrap() > 0.8, "{ratio}");
}

/// The file layer passes hints through (seed 002 §3.4) with the file's own read capability:
/// after a hint, reads of a one-object file are served from blocks the drive fetched ahead, and
/// the bytes are the file's.
#[test]
fn a_file_client_hints_through_the_file_layer() {
    let up = common::Up::start(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let c = up.admin_client(&rt);
    rt.block_on(async {
        let bytes = common::rand_bytes(2 << 20, 21);
        c.put_bytes("/vol", &bytes, 0o644).await.unwrap();
        let reads: Vec<Region> = (0..64u64)
            .map(|i| Region::new((i * 37 % 256) * BLOCK, 1024))
            .collect();
        let (first, next) = c.hint_file("/vol", true, reads.clone()).await.unwrap();
        assert_eq!(next - first, 64);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        for r in &reads {
            let got = c.read_at("/vol", r.offset, r.len).await.unwrap();
            assert_eq!(got, expected(&bytes, *r));
        }
        let counters = c.consume_file("/vol", next).await.unwrap();
        assert!(counters.prefetched_blocks >= 60, "{counters:?}");
        assert!(counters.cache_hit_blocks > 0, "{counters:?}");
    });
}
