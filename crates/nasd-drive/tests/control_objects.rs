//! The well-known control objects of seed 002 Table 4, read as a client reads them: Drive
//! Control (object 1: the drive's physical and clock parameters, its partitions and its
//! extension table) and Partition Control (object 2: bytes in use, reserved and available,
//! objects allocated and supported), both following what the drive holds.

mod common;
use common::*;
use nasd_proto::{
    AttrMask, Attributes, DriveInfo, ObjectId, PartitionControl, Protection, Region, Rights, Scheme,
};

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 8192;

async fn partition_control(d: &TestDrive, c: &nasd_client::DriveConn) -> PartitionControl {
    let t = target(ObjectId::PARTITION_CONTROL, Protection::INTEGRITY_DATA);
    let r = c
        .read(&d.partition_auth(), t, vec![Region::new(0, 4096)])
        .await
        .unwrap();
    PartitionControl::decode(&r.data).unwrap()
}

#[tokio::test]
async fn drive_and_partition_control_report_what_the_drive_holds() {
    let d = TestDrive::start_with(|o| {
        o.capacity_bytes = Some(64 * MIB);
        o.quota_bytes = Some(16 * MIB);
    })
    .await;
    let c = d.conn().await;
    let before = partition_control(&d, &c).await;
    assert_eq!(before.quota_bytes, 16 * MIB);
    assert_eq!((before.used_bytes, before.reserved_bytes), (0, 0));
    assert_eq!(before.available_bytes, 16 * MIB);
    // The well-known objects are allocated; ids from 16 on are left.
    assert_eq!(before.objects_supported, u64::MAX - 15);

    let o = d.create(&c, Scheme::Mac).await;
    let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
    c.write(
        &auth,
        target(o, Protection::NONE),
        0,
        &bytes(1, 3 * BLOCK as usize),
    )
    .await
    .unwrap();
    let reserve = Attributes {
        blocks_allocated: 10,
        ..Attributes::default()
    };
    c.setattr(
        &auth,
        target(o, Protection::NONE),
        AttrMask::BLOCKS_ALLOCATED,
        reserve,
    )
    .await
    .unwrap();
    let after = partition_control(&d, &c).await;
    assert_eq!(after.objects, before.objects + 1);
    assert_eq!(after.objects_supported, before.objects_supported - 1);
    assert_eq!(
        (after.used_bytes, after.reserved_bytes),
        (3 * BLOCK, 7 * BLOCK)
    );
    assert_eq!(after.available_bytes, 16 * MIB - 10 * BLOCK);

    let info = c.drive_control(&d.partition_auth(), P).await.unwrap();
    let want: DriveInfo = d.drive.drive_info();
    assert_eq!(info.drive, want.drive);
    assert_eq!(info.capacity_bytes, 64 * MIB);
    assert_eq!(info.used_bytes, 3 * BLOCK);
    assert_eq!(
        (info.block_bytes, info.cache_bytes),
        (want.block_bytes, want.cache_bytes)
    );
    assert!(
        info.cache_bytes > 0,
        "the drive's RAM cache is a physical parameter"
    );
    assert!(info.clock_us.abs_diff(nasd_drive::now_us()) < 60_000_000);
    assert_eq!(info.nonce_window_ms, want.nonce_window_ms);
    let part = info.partitions.iter().find(|p| p.id == P).unwrap();
    assert_eq!((part.quota_bytes, part.objects), (16 * MIB, after.objects));
    assert!(
        info.extensions.iter().any(|e| e.name == "prefetch"),
        "{:?}",
        info.extensions
    );
}
