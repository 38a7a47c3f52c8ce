//! On-disk corruption: bytes flipped in the data file or in the stored integrity metadata make
//! reads fail with an integrity error (detected by the client's verifier, or by the drive's
//! at-rest check where the drive itself hashes stored bytes) and never return wrong bytes.
//! These drives run without a block cache: one would serve the copy it checked before the flip.

mod common;
use common::*;
use nasd_client::ClientError;
use nasd_proto::{ObjectId, Protection, Region, Rights, Scheme, Status};
use std::os::unix::fs::FileExt;

fn flip(d: &TestDrive, o: ObjectId, block: u64, at: u64) {
    let phys = d
        .drive
        .store
        .physical_block(P, o, block)
        .unwrap()
        .expect("block is mapped");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(d.dir.path().join("drive/data.blk"))
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, phys * 8192 + at).unwrap();
    b[0] ^= 0x20;
    f.write_all_at(&b, phys * 8192 + at).unwrap();
}

fn is_integrity_failure(e: &ClientError) -> bool {
    matches!(e, ClientError::Integrity { .. }) || e.status() == Some(Status::Corrupt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_data_bytes_are_detected_in_every_scheme() {
    let d = TestDrive::start_uncached().await;
    let c = d.conn().await;
    for scheme in Scheme::ALL {
        let o = d.create(&c, scheme).await;
        let a = d.mint(d.cap_args(o, Rights::ALL), 0);
        let data = bytes(scheme as u64, 64 * 1024);
        c.write(&a, target(o, Protection::INTEGRITY_DATA), 0, &data)
            .await
            .unwrap();
        flip(&d, o, 2, 1000); // byte 2*8192+1000 of the object
                              // whole-block, partial-block, and odd-offset reads covering the flipped byte all fail
        for (off, len) in [
            (0u64, 65_536u64),
            (16_384, 8192),
            (17_000, 100),
            (16_385, 3),
        ] {
            let r = c
                .read(
                    &a,
                    target(o, Protection::INTEGRITY_DATA),
                    vec![Region::new(off, len)],
                )
                .await;
            match r {
                Err(e) => assert!(is_integrity_failure(&e), "{scheme} {off}+{len}: {e}"),
                Ok(r) => panic!(
                    "{scheme} {off}+{len}: corrupted read returned {} bytes",
                    r.data.len()
                ),
            }
        }
        // reads that do not touch the damaged block still work
        let r = c
            .read(
                &a,
                target(o, Protection::INTEGRITY_DATA),
                vec![Region::new(0, 8192)],
            )
            .await
            .unwrap();
        assert_eq!(r.data, data[..8192]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_metadata_is_detected() {
    let d = TestDrive::start_uncached().await;
    let c = d.conn().await;
    for scheme in Scheme::ALL {
        let o = d.create(&c, scheme).await;
        let a = d.mint(d.cap_args(o, Rights::ALL), 0);
        c.write(
            &a,
            target(o, Protection::INTEGRITY_DATA),
            0,
            &bytes(9, 40_000),
        )
        .await
        .unwrap();
        d.drive.store.corrupt_metadata(P, o, 1).unwrap();
        let r = c
            .read(
                &a,
                target(o, Protection::INTEGRITY_DATA),
                vec![Region::new(8192, 8192)],
            )
            .await;
        match r {
            Err(e) => assert!(is_integrity_failure(&e), "{scheme}: {e}"),
            Ok(_) => panic!("{scheme}: read over corrupted metadata returned data"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_over_a_corrupt_block_does_not_launder_it() {
    // A partial write must merge with the old block; if that block is corrupt the write is
    // refused rather than hashing the bad bytes into fresh, valid-looking metadata.
    let d = TestDrive::start_uncached().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let a = d.mint(d.cap_args(o, Rights::ALL), 0);
    c.write(
        &a,
        target(o, Protection::INTEGRITY_DATA),
        0,
        &bytes(4, 16_384),
    )
    .await
    .unwrap();
    flip(&d, o, 0, 5000);
    let e = c
        .write(&a, target(o, Protection::INTEGRITY_DATA), 10, &[1, 2, 3])
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::Corrupt), "{e}");
    // overwriting the whole block replaces the damage
    let fresh = bytes(5, 8192);
    c.write(&a, target(o, Protection::INTEGRITY_DATA), 0, &fresh)
        .await
        .unwrap();
    let r = c
        .read(
            &a,
            target(o, Protection::INTEGRITY_DATA),
            vec![Region::new(0, 8192)],
        )
        .await
        .unwrap();
    assert_eq!(r.data, fresh);
}

/// A capability that cuts a `tree` chunk gets the chunk's piece proved by the drive's own hash
/// (it must not send the rest of the chunk), so the drive checks the whole stored chunk against
/// its leaf first: a flipped byte in the part of the chunk the capability does not cover still
/// fails the read, and the drive never vouches for corrupt bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_chunk_is_checked_whole_before_the_drive_vouches_for_its_piece() {
    let d = TestDrive::start_uncached().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let all = d.mint(d.cap_args(o, Rights::ALL), 0);
    let data = bytes(7, 16 * 1024);
    c.write(&all, target(o, Protection::INTEGRITY_DATA), 0, &data)
        .await
        .unwrap();
    let mut narrow = d.cap_args(o, Rights::READ);
    narrow.region = Region::new(2048 + 100, 50); // inside chunk 2
    let narrow = d.mint(narrow, 0);
    let t = target(o, Protection::INTEGRITY_DATA);
    let piece = || vec![Region::new(2148, 50)];
    assert_eq!(
        c.read(&narrow, t, piece()).await.unwrap().data,
        data[2148..2198]
    );
    flip(&d, o, 0, 2048 + 900); // chunk 2, outside the capability's bytes
    let e = c
        .read(&narrow, t, piece())
        .await
        .expect_err("corrupt chunk vouched for");
    assert_eq!(e.status(), Some(Status::Corrupt), "{e}");
    // The whole-chunk capability sees the corruption through the tree, as before.
    let e = c
        .read(&all, t, piece())
        .await
        .expect_err("corrupt chunk returned");
    assert!(is_integrity_failure(&e), "{e}");
}
