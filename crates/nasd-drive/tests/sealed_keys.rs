//! Keys sealed at rest (seed 002 §2.4's protected key storage): a drive made with a passphrase
//! keeps no key of its hierarchy in clear in its metadata, cannot be opened without the
//! passphrase or with a wrong one, and opens with every key intact, a rotated working key
//! included. An unsealed drive can be sealed offline, and its passphrase changed.

use nasd_crypto::seal::KeySeal;
use nasd_crypto::Key;
use nasd_drive::records::DriveRecord;
use nasd_drive::storage::{SimDisk, Storage};
use nasd_drive::store::Store;
use nasd_drive::writer::{run_now, Job};
use nasd_drive::DriveError;
use nasd_proto::{DriveId, PartitionId, Protection, Scheme, Suite};
use std::sync::Arc;

const P: PartitionId = PartitionId(1);

fn record() -> DriveRecord {
    DriveRecord {
        drive: DriveId(1),
        suite: Suite::Blake3,
        master_key: Key::from_bytes([0xa1; 32]),
        drive_key: Some(Key::from_bytes([0xa2; 32])),
        min_protection: Protection::NONE,
        capacity_bytes: 1 << 30,
        next_phys: 0,
    }
}

fn cheap_seal(p: &[u8]) -> KeySeal {
    KeySeal::create_with_cost(p, 8, 1).unwrap()
}

/// Every key of the drive, in a fixed order.
fn keys(s: &Store) -> Vec<Option<Key>> {
    let c = s.cached();
    let p = &c.partitions[&P.0];
    vec![
        Some(c.drive.master_key.clone()),
        c.drive.drive_key.clone(),
        p.partition_key.clone(),
        p.working_current.clone(),
        p.working_previous.clone(),
    ]
}

fn image(disk: &SimDisk) -> Vec<u8> {
    let mut b = vec![0u8; disk.size().unwrap() as usize];
    disk.read(0, &mut b).unwrap();
    b
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn setup(store: &Store) {
    run_now(
        store,
        Job::CreatePartition {
            p: P,
            quota_bytes: 1 << 30,
            scheme: Scheme::Tree,
        },
    )
    .unwrap();
    for (i, key) in [[0xb1; 32], [0xc1; 32], [0xc2; 32]].into_iter().enumerate() {
        let key = Key::from_bytes(key);
        let job = if i == 0 {
            Job::SetPartitionKey { p: P, key }
        } else {
            Job::SetWorkingKey { p: P, key }
        };
        run_now(store, job).unwrap();
    }
}

#[test]
fn sealed_keys_are_nowhere_in_clear_and_need_the_passphrase() {
    let (meta, data) = (Arc::new(SimDisk::new()), Arc::new(SimDisk::new()));
    let store = Store::create_with(
        meta.clone(),
        data.clone(),
        record(),
        Some(cheap_seal(b"pw")),
    )
    .unwrap();
    setup(&store);
    let want = keys(&store);
    drop(store);
    let img = image(&meta);
    for k in [[0xa1u8; 32], [0xa2; 32], [0xb1; 32], [0xc1; 32], [0xc2; 32]] {
        assert!(!contains(&img, &k), "a key lies in clear in the metadata");
    }
    assert!(matches!(
        Store::open(meta.clone(), data.clone()),
        Err(DriveError::Sealed)
    ));
    let e = Store::open_with(meta.clone(), data.clone(), Some(b"nope"))
        .err()
        .unwrap();
    assert!(e.to_string().contains("wrong passphrase"), "{e}");
    let store = Store::open_with(meta, data, Some(b"pw")).unwrap();
    assert_eq!(keys(&store), want);
}

#[test]
fn an_unsealed_drive_is_sealed_offline_and_its_passphrase_changed() {
    let (meta, data) = (Arc::new(SimDisk::new()), Arc::new(SimDisk::new()));
    let store = Store::create(meta.clone(), data.clone(), record()).unwrap();
    setup(&store);
    let want = keys(&store);
    drop(store);
    assert!(
        contains(&image(&meta), &[0xc2; 32]),
        "unsealed: keys in clear"
    );
    Store::seal_keys(meta.clone(), data.clone(), None, cheap_seal(b"first")).unwrap();
    Store::seal_keys(
        meta.clone(),
        data.clone(),
        Some(b"first"),
        cheap_seal(b"second"),
    )
    .unwrap();
    assert!(Store::open_with(meta.clone(), data.clone(), Some(b"first")).is_err());
    let store = Store::open_with(meta.clone(), data.clone(), Some(b"second")).unwrap();
    assert_eq!(keys(&store), want);
    // A working-key rotation after sealing is sealed too.
    run_now(
        &store,
        Job::SetWorkingKey {
            p: P,
            key: Key::from_bytes([0xd1; 32]),
        },
    )
    .unwrap();
    drop(store);
    // Pages the database freed may still hold keys from before the seal (docs/storage.md says
    // to rotate them); a key set after sealing is never written in clear.
    assert!(
        !contains(&image(&meta), &[0xd1; 32]),
        "a new key lies in clear"
    );
}
