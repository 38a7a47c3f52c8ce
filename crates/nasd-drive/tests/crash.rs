//! Crash safety on the simulated disk: the power fails at an exact storage operation (every
//! later operation fails), unsynced writes are then lost or kept at random, the drive restarts,
//! and every acknowledged write is intact and verifies; the write in flight is either wholly
//! there or wholly absent, never a mix, and data and integrity metadata agree.

use nasd_crypto::integrity::verify::feed_read;
use nasd_crypto::{Cost, Key, Mac};
use nasd_drive::records::DriveRecord;
use nasd_drive::storage::{Faulty, SimDisk, Storage};
use nasd_drive::store::{Material, Store};
use nasd_drive::writer::{run_now, Job, JobOut};
use nasd_proto::{
    AttrMask, Attributes, DriveId, ObjectId, PartitionId, Protection, ReadReply, Region, Scheme,
    Suite,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const P: PartitionId = PartitionId(1);

struct Disks {
    meta: SimDisk,
    data: SimDisk,
}

impl Disks {
    fn faulty(&self) -> (Arc<Faulty>, Arc<Faulty>) {
        (
            Arc::new(Faulty::new(Arc::new(self.meta.clone()))),
            Arc::new(Faulty::new(Arc::new(self.data.clone()))),
        )
    }
}

fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// Reads the whole object with integrity and checks the drive's digest material against what a
/// client recomputes from the bytes (as the reply MAC would).
fn read_verified(store: &Store, o: ObjectId) -> Vec<u8> {
    let size = store.object(P, o).unwrap().attrs.logical_size;
    let mut cost = Cost::default();
    let r = store
        .read(
            P,
            o,
            &[Region::new(0, size)],
            Region::WHOLE,
            true,
            &mut cost,
        )
        .unwrap();
    let key = Key::from_bytes([1; 32]);
    let mut drive = Mac::new(store.suite(), &key);
    match &r.material {
        Material::Bytes(b) => drive.update(b),
        Material::Data => drive.update(&r.data),
        Material::None => unreachable!(),
    }
    let mut client = Mac::new(store.suite(), &key);
    let rr = ReadReply {
        logical_size: r.logical_size,
        scheme: r.scheme,
        regions: r.regions.clone(),
        trailer: r.trailer.clone(),
    };
    feed_read(
        &mut client,
        store.suite(),
        &rr,
        &r.data,
        Region::WHOLE,
        &mut cost,
    )
    .expect("proof verifies");
    assert_eq!(
        drive.finalize(&mut cost),
        client.finalize(&mut cost),
        "data and integrity metadata disagree"
    );
    r.data
}

/// A fresh drive on two simulated disks behind fault injectors, with partition `P`.
fn new_drive(scheme: Scheme) -> (Disks, Store, Arc<Faulty>, Arc<Faulty>) {
    let disks = Disks {
        meta: SimDisk::new(),
        data: SimDisk::new(),
    };
    let (m, d) = disks.faulty();
    let rec = DriveRecord {
        drive: DriveId(1),
        suite: Suite::Blake3,
        master_key: Key::from_bytes([2; 32]),
        drive_key: None,
        min_protection: Protection::NONE,
        capacity_bytes: 1 << 30,
        next_phys: 0,
    };
    let store = Store::create(m.clone(), d.clone(), rec).unwrap();
    run_now(
        &store,
        Job::CreatePartition {
            p: P,
            quota_bytes: 1 << 30,
            scheme,
        },
    )
    .unwrap();
    (disks, store, m, d)
}

fn trial(seed: u64, scheme: Scheme, keep_per_mille: u64) {
    let (disks, store, m, d) = new_drive(scheme);
    let JobOut::Object(o, _) = run_now(
        &store,
        Job::Create {
            p: P,
            scheme: Some(scheme),
            mask: AttrMask::default(),
            attrs: Box::default(),
        },
    )
    .unwrap() else {
        panic!()
    };
    let mut next = rng(seed);
    let mut model: Vec<u8> = vec![];
    let crash_at = 3 + next() % 12;
    let mut in_flight: Option<Vec<u8>> = None;
    for step in 0..crash_at + 1 {
        let mut after = model.clone();
        let job = if next().is_multiple_of(5) {
            let size = next() % 200_000;
            after.resize(size as usize, 0);
            let a = Attributes {
                logical_size: size,
                ..Default::default()
            };
            Job::SetAttr {
                p: P,
                o,
                mask: AttrMask::LOGICAL_SIZE,
                attrs: Box::new(a),
            }
        } else {
            let off = next() % 150_000;
            let len = 1 + (next() % 40_000) as usize;
            let byte = next() as u8;
            let data = vec![byte; len];
            if after.len() < off as usize + len {
                after.resize(off as usize + len, 0);
            }
            after[off as usize..off as usize + len].copy_from_slice(&data);
            Job::Write {
                p: P,
                data_at: 0,
                o,
                regions: vec![Region::new(off, len as u64)],
                data,
                form: Scheme::Tree,
                pieces: vec![],
                write_back: false,
            }
        };
        if step == crash_at {
            // the power fails somewhere inside this operation
            let n = 1 + next() % 40;
            m.ops_until_death.store(n, Ordering::SeqCst);
            d.ops_until_death.store(n + next() % 5, Ordering::SeqCst);
        }
        match run_now(&store, job) {
            Ok(_) if step < crash_at => model = after,
            Ok(_) => {
                // acknowledged before the failure point: it must survive
                model = after;
                m.dead.store(1, Ordering::SeqCst);
                d.dead.store(1, Ordering::SeqCst);
            }
            Err(_) => in_flight = Some(after),
        }
    }
    drop(store);
    disks.meta.crash(seed, keep_per_mille);
    disks.data.crash(seed ^ 0xabc, keep_per_mille);
    let (m, d) = disks.faulty();
    let store = Store::open(m as Arc<dyn Storage>, d as Arc<dyn Storage>)
        .expect("drive reopens after a crash");
    let got = read_verified(&store, o);
    let ok = got == model || in_flight.as_ref().is_some_and(|f| got == *f);
    assert!(ok, "seed {seed} {scheme} keep {keep_per_mille}: content is neither the acknowledged state nor the in-flight write (len {} vs {})", got.len(), model.len());
    // the drive keeps working after recovery
    run_now(
        &store,
        Job::Write {
            p: P,
            data_at: 0,
            o,
            regions: vec![Region::new(0, 3)],
            data: vec![7, 7, 7],
            form: Scheme::Tree,
            pieces: vec![],
            write_back: false,
        },
    )
    .unwrap();
    let got = read_verified(&store, o);
    assert_eq!(&got[..3], &[7, 7, 7]);
}

#[test]
fn acknowledged_writes_survive_power_loss_at_any_instant() {
    let seeds: u64 = std::env::var("NASD_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    for seed in 1..=seeds {
        for scheme in Scheme::ALL {
            for keep in [0, 500, 1000] {
                let r = std::panic::catch_unwind(|| trial(seed, scheme, keep));
                if let Err(e) = r {
                    eprintln!("failing trial: seed {seed} scheme {scheme} keep {keep}");
                    std::panic::resume_unwind(e);
                }
            }
        }
    }
}

/// A new object in the partition's default scheme.
fn new_object(store: &Store) -> ObjectId {
    let JobOut::Object(o, _) = run_now(
        store,
        Job::Create {
            p: P,
            scheme: None,
            mask: AttrMask::default(),
            attrs: Box::default(),
        },
    )
    .unwrap() else {
        panic!("create made no object")
    };
    o
}

/// A durable write of `data` at `off` of `o`, sent in `tree` form.
fn tree_write(o: ObjectId, off: u64, data: Vec<u8>) -> Job {
    Job::Write {
        p: P,
        data_at: 0,
        o,
        regions: vec![Region::new(off, data.len() as u64)],
        data,
        form: Scheme::Tree,
        pieces: vec![],
        write_back: false,
    }
}

/// The metadata disk fills up under a commit: the write is refused as `DiskFull`, and once
/// there is room the drive goes on (redb fails a database after an I/O error; the drive opens
/// it again) with what it held before, reads and writes, and nothing leaked.
#[test]
fn a_full_metadata_disk_refuses_a_write_and_the_drive_goes_on_when_room_comes_back() {
    let (_disks, store, m, _d) = new_drive(Scheme::Tree);
    let o = new_object(&store);
    let w = |off: u64, data: Vec<u8>| tree_write(o, off, data);
    run_now(&store, w(0, vec![1; 50_000])).unwrap();
    let free_before = store.free_blocks();
    m.write_budget.store(0, Ordering::SeqCst);
    for _ in 0..2 {
        let e = run_now(&store, w(10_000, vec![2; 100_000])).unwrap_err();
        assert_eq!(e.status(), nasd_proto::Status::DiskFull, "{e}");
    }
    m.write_budget.store(u64::MAX, Ordering::SeqCst);
    assert_eq!(
        read_verified(&store, o),
        vec![1; 50_000],
        "the failed writes changed nothing"
    );
    assert_eq!(store.free_blocks(), free_before, "no block leaked");
    run_now(&store, w(10_000, vec![2; 100_000])).unwrap();
    let mut want = vec![1u8; 50_000];
    want.resize(110_000, 0);
    want[10_000..110_000].fill(2);
    assert_eq!(read_verified(&store, o), want);
}

#[test]
fn disk_full_is_a_clean_error() {
    let (_disks, store, _m, d) = new_drive(Scheme::Tree);
    let o = new_object(&store);
    let w = |off: u64, data: Vec<u8>| tree_write(o, off, data);
    run_now(&store, w(0, vec![1; 50_000])).unwrap();
    // the data disk fills up in the middle of the next write
    d.write_budget.store(20_000, Ordering::SeqCst);
    let e = run_now(&store, w(10_000, vec![2; 100_000])).unwrap_err();
    assert_eq!(e.status(), nasd_proto::Status::DiskFull, "{e}");
    assert_eq!(
        read_verified(&store, o),
        vec![1; 50_000],
        "a failed write changed nothing"
    );
    // space comes back: the drive goes on, and nothing leaked
    d.write_budget.store(u64::MAX, Ordering::SeqCst);
    run_now(&store, w(10_000, vec![2; 100_000])).unwrap();
    let mut want = vec![1u8; 50_000];
    want.resize(110_000, 0);
    want[10_000..110_000].fill(2);
    assert_eq!(read_verified(&store, o), want);
    // a partition quota is a clean error too
    run_now(
        &store,
        Job::ResizePartition {
            p: P,
            quota_bytes: 100_000,
        },
    )
    .unwrap_err();
    run_now(
        &store,
        Job::ResizePartition {
            p: P,
            quota_bytes: 16 * 8192,
        },
    )
    .unwrap();
    let e = run_now(&store, w(1 << 20, vec![3; 3 * 8192])).unwrap_err();
    assert_eq!(e.status(), nasd_proto::Status::QuotaExceeded);
    assert_eq!(read_verified(&store, o), want);
}
