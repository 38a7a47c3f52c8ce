//! Where new data lands (seed 002 §2.3, inter-object clustering): an object's next block
//! follows its previous one when that physical block is free, and an object's first block
//! follows the last block of the object it names as `nearby_object`; other blocks take the
//! lowest free block.

use nasd_drive::records::DriveRecord;
use nasd_drive::storage::SimDisk;
use nasd_drive::store::Store;
use nasd_drive::writer::{run_now, Job, JobOut};
use nasd_proto::{
    AttrMask, Attributes, DriveId, ObjectId, PartitionId, Protection, Region, Scheme, Suite,
};
use std::sync::Arc;

const B: u64 = 8192;
const P: PartitionId = PartitionId(1);

fn new_drive() -> Store {
    let rec = DriveRecord {
        drive: DriveId(1),
        suite: Suite::Blake3,
        master_key: nasd_crypto::Key::from_bytes([2; 32]),
        drive_key: None,
        min_protection: Protection::NONE,
        capacity_bytes: 64 * B,
        next_phys: 0,
    };
    let store = Store::create(Arc::new(SimDisk::new()), Arc::new(SimDisk::new()), rec).unwrap();
    let job = Job::CreatePartition {
        p: P,
        quota_bytes: 64 * B,
        scheme: Scheme::Tree,
    };
    run_now(&store, job).unwrap();
    store
}

fn create(store: &Store, nearby: Option<ObjectId>) -> ObjectId {
    let job = Job::Create {
        p: P,
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

fn write(store: &Store, o: ObjectId, at: u64, blocks: u64) {
    let job = Job::Write {
        p: P,
        o,
        data_at: 0,
        regions: vec![Region::new(at * B, blocks * B)],
        data: vec![5u8; (blocks * B) as usize],
        form: Scheme::Tree,
        pieces: vec![],
        write_back: false,
    };
    run_now(store, job).unwrap();
}

/// The physical blocks of `o`'s first `n` blocks.
fn map(store: &Store, o: ObjectId, n: u64) -> Vec<u64> {
    (0..n)
        .map(|b| store.physical_block(P, o, b).unwrap().expect("written"))
        .collect()
}

#[test]
fn new_blocks_follow_the_object_and_its_nearby_object() {
    let store = new_drive();
    let (a, n, x) = (
        create(&store, None),
        create(&store, None),
        create(&store, None),
    );
    for o in [a, n, x] {
        write(&store, o, 0, 2);
    }
    assert_eq!(map(&store, n, 2), [2, 3]);
    for o in [a, x] {
        run_now(&store, Job::Remove { p: P, o }).unwrap();
    }
    // Blocks 0, 1, 4 and 5 are free. The object near `n` starts right after `n`'s last
    // block and goes on from there, one write at a time.
    let near = create(&store, Some(n));
    write(&store, near, 0, 1);
    write(&store, near, 1, 1);
    assert_eq!(map(&store, near, 2), [4, 5]);
    // An object naming nothing takes the lowest free block, and its next block follows it.
    let other = create(&store, None);
    write(&store, other, 0, 1);
    write(&store, other, 1, 1);
    assert_eq!(map(&store, other, 2), [0, 1]);
    // At the end of the space in use, the block after the previous one is a fresh one.
    write(&store, near, 2, 1);
    assert_eq!(map(&store, near, 3), [4, 5, 6]);
    // Where the block after the previous one is taken, the lowest free block.
    run_now(&store, Job::Remove { p: P, o: other }).unwrap();
    write(&store, n, 2, 1);
    assert_eq!(map(&store, n, 3), [2, 3, 0]);
}
