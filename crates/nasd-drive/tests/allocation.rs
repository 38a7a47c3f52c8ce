//! Where a drive's blocks go (seed 002 §2.3, Table 5). `blocks_allocated` reserves space: the
//! blocks an object set aside count toward its partition's quota and are held back from every
//! other write on the drive, its own writes draw on them, and removing the object or lowering
//! the figure gives them back; the count survives a restart. New data lands next to what it
//! follows: an object's next block after its previous one when that physical block is free,
//! an object's first block after the last block of the object it names as `nearby_object`
//! (inter-object clustering); other blocks take the lowest free block.

use nasd_drive::records::DriveRecord;
use nasd_drive::storage::{SimDisk, Storage};
use nasd_drive::store::Store;
use nasd_drive::writer::{run_now, Job, JobOut};
use nasd_drive::DriveError;
use nasd_proto::{
    AttrMask, Attributes, DriveId, ObjectId, PartitionId, Protection, Region, Scheme, Status, Suite,
};
use std::sync::Arc;

const B: u64 = 8192;
const P1: PartitionId = PartitionId(1);
const P2: PartitionId = PartitionId(2);
const CAPACITY_BLOCKS: u64 = 64;

fn open(meta: &SimDisk, data: &SimDisk) -> Store {
    Store::open(
        Arc::new(meta.clone()) as Arc<dyn Storage>,
        Arc::new(data.clone()) as Arc<dyn Storage>,
    )
    .unwrap()
}

fn new_drive() -> (SimDisk, SimDisk, Store) {
    let (meta, data) = (SimDisk::new(), SimDisk::new());
    let rec = DriveRecord {
        drive: DriveId(1),
        suite: Suite::Blake3,
        master_key: nasd_crypto::Key::from_bytes([2; 32]),
        drive_key: None,
        min_protection: Protection::NONE,
        capacity_bytes: CAPACITY_BLOCKS * B,
        next_phys: 0,
    };
    let store = Store::create(Arc::new(meta.clone()), Arc::new(data.clone()), rec).unwrap();
    for (p, blocks) in [(P1, 40), (P2, CAPACITY_BLOCKS)] {
        let job = Job::CreatePartition {
            p,
            quota_bytes: blocks * B,
            scheme: Scheme::Tree,
        };
        run_now(&store, job).unwrap();
    }
    (meta, data, store)
}

fn create(store: &Store, p: PartitionId) -> ObjectId {
    create_near(store, p, None)
}

/// An object of `p` naming `nearby` as its `nearby_object`.
fn create_near(store: &Store, p: PartitionId, nearby: Option<ObjectId>) -> ObjectId {
    let job = Job::Create {
        p,
        scheme: None,
        mask: nearby.map_or(AttrMask::default(), |_| AttrMask::NEARBY_OBJECT),
        attrs: Box::new(Attributes {
            nearby_object: nearby.unwrap_or(ObjectId(0)),
            ..Attributes::default()
        }),
    };
    match run_now(store, job).unwrap() {
        JobOut::Object(o, _) => o,
        _ => unreachable!("a create answers its object"),
    }
}

/// Writes `blocks` whole blocks of `o` from block `at`.
fn write(store: &Store, p: PartitionId, o: ObjectId, at: u64, blocks: u64) -> Result<(), Status> {
    let data = vec![7u8; (blocks * B) as usize];
    let job = Job::Write {
        p,
        o,
        data_at: 0,
        regions: vec![Region::new(at * B, blocks * B)],
        data,
        form: Scheme::Tree,
        pieces: vec![],
        write_back: false,
    };
    run_now(store, job).map(|_| ()).map_err(|e| e.status())
}

fn reserve(store: &Store, p: PartitionId, o: ObjectId, blocks: u64) -> Result<(), Status> {
    let attrs = Attributes {
        blocks_allocated: blocks,
        ..Attributes::default()
    };
    let job = Job::SetAttr {
        p,
        o,
        mask: AttrMask::BLOCKS_ALLOCATED,
        attrs: Box::new(attrs),
    };
    run_now(store, job).map(|_| ()).map_err(|e| e.status())
}

/// (used, reserved) blocks of partition `p`.
fn counts(store: &Store, p: PartitionId) -> (u64, u64) {
    store.with_state(|c| {
        let r = &c.partitions[&p.0];
        (r.used_blocks, r.reserved_blocks)
    })
}

#[test]
fn reserved_blocks_count_toward_the_quota_and_are_held_back_from_other_writes() {
    let (meta, data, store) = new_drive();
    let a = create(&store, P1);
    let b = create(&store, P1);
    let c = create(&store, P2);
    reserve(&store, P1, a, 30).unwrap();
    assert_eq!(counts(&store, P1), (0, 30));
    // Another object of the partition has only what the reservation leaves of the quota.
    assert_eq!(write(&store, P1, b, 0, 11), Err(Status::QuotaExceeded));
    write(&store, P1, b, 0, 10).unwrap();
    assert_eq!(reserve(&store, P1, a, 31), Err(Status::QuotaExceeded));
    // Another partition's writes leave the reserved blocks free: 54 are free, 30 of them
    // reserved, and a write needs one block beyond its own.
    assert_eq!(write(&store, P2, c, 0, 25), Err(Status::DiskFull));
    write(&store, P2, c, 0, 20).unwrap();
    // The reserving object's own writes draw on its reservation, to the last block.
    write(&store, P1, a, 0, 30).unwrap();
    assert_eq!(counts(&store, P1), (40, 0));
    let attrs = store.object(P1, a).unwrap().attrs;
    assert_eq!((attrs.blocks_allocated, attrs.blocks_used), (30, 30));

    // After a restart the count is the same, and so are the checks.
    drop(store);
    let store = open(&meta, &data);
    assert_eq!(counts(&store, P1), (40, 0));
    assert_eq!(reserve(&store, P1, a, 35), Err(Status::QuotaExceeded));
    let job = Job::ResizePartition {
        p: P1,
        quota_bytes: 50 * B,
    };
    run_now(&store, job).unwrap();
    // Four blocks are free on the drive: a reservation of five more cannot be held.
    assert_eq!(reserve(&store, P1, a, 35), Err(Status::DiskFull));
    reserve(&store, P1, a, 34).unwrap();
    assert_eq!(counts(&store, P1), (40, 4));
    assert_eq!(write(&store, P2, c, 20, 1), Err(Status::DiskFull));
    let shrink = Job::ResizePartition {
        p: P1,
        quota_bytes: 43 * B,
    };
    assert!(matches!(
        run_now(&store, shrink),
        Err(DriveError::QuotaExceeded(_))
    ));
    // Lowering the figure, or removing the object, gives the blocks back.
    reserve(&store, P1, a, 32).unwrap();
    assert_eq!(counts(&store, P1), (40, 2));
    run_now(&store, Job::Remove { p: P1, o: a }).unwrap();
    assert_eq!(counts(&store, P1), (10, 0));
    write(&store, P2, c, 20, 20).unwrap();
}

#[test]
fn a_copy_reserves_nothing_and_a_new_object_may_reserve_at_create() {
    let (_meta, _data, store) = new_drive();
    let a = create(&store, P1);
    reserve(&store, P1, a, 8).unwrap();
    write(&store, P1, a, 0, 2).unwrap();
    assert_eq!(counts(&store, P1), (2, 6));
    let JobOut::Object(copy, rec) = run_now(&store, Job::FastCopy { p: P1, o: a }).unwrap() else {
        unreachable!("a copy answers its object")
    };
    assert_eq!(rec.attrs.blocks_allocated, 0);
    assert_eq!(
        counts(&store, P1),
        (2, 6),
        "the copy shares blocks and reserves none"
    );
    run_now(&store, Job::Remove { p: P1, o: copy }).unwrap();
    assert_eq!(counts(&store, P1), (2, 6));
    let attrs = Attributes {
        blocks_allocated: 33,
        ..Attributes::default()
    };
    let job = |n: u64| Job::Create {
        p: P1,
        scheme: None,
        mask: AttrMask::BLOCKS_ALLOCATED,
        attrs: Box::new(Attributes {
            blocks_allocated: n,
            ..attrs.clone()
        }),
    };
    assert!(matches!(
        run_now(&store, job(33)),
        Err(DriveError::QuotaExceeded(_))
    ));
    run_now(&store, job(32)).unwrap();
    assert_eq!(counts(&store, P1), (2, 38));
}

/// The physical blocks of `o`'s first `n` blocks.
fn map(store: &Store, o: ObjectId, n: u64) -> Vec<u64> {
    (0..n)
        .map(|b| store.physical_block(P1, o, b).unwrap().expect("written"))
        .collect()
}

#[test]
fn new_blocks_follow_the_object_and_its_nearby_object() {
    let (_meta, _data, store) = new_drive();
    let (a, n, x) = (create(&store, P1), create(&store, P1), create(&store, P1));
    for o in [a, n, x] {
        write(&store, P1, o, 0, 2).unwrap();
    }
    assert_eq!(map(&store, n, 2), [2, 3]);
    for o in [a, x] {
        run_now(&store, Job::Remove { p: P1, o }).unwrap();
    }
    // Blocks 0, 1, 4 and 5 are free. The object near `n` starts right after `n`'s last
    // block and goes on from there, one write at a time.
    let near = create_near(&store, P1, Some(n));
    write(&store, P1, near, 0, 1).unwrap();
    write(&store, P1, near, 1, 1).unwrap();
    assert_eq!(map(&store, near, 2), [4, 5]);
    // An object naming nothing takes the lowest free block, and its next block follows it.
    let other = create(&store, P1);
    write(&store, P1, other, 0, 1).unwrap();
    write(&store, P1, other, 1, 1).unwrap();
    assert_eq!(map(&store, other, 2), [0, 1]);
    // At the end of the space in use, the block after the previous one is a fresh one.
    write(&store, P1, near, 2, 1).unwrap();
    assert_eq!(map(&store, near, 3), [4, 5, 6]);
    // Where the block after the previous one is taken, the lowest free block.
    run_now(&store, Job::Remove { p: P1, o: other }).unwrap();
    write(&store, P1, n, 2, 1).unwrap();
    assert_eq!(map(&store, n, 3), [2, 3, 0]);
}
