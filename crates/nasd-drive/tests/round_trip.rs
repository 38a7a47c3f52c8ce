//! Reads and writes through the real client over TCP agree with a naive in-memory model, for
//! every integrity scheme, every protection level, both digest suites, aligned and odd offsets,
//! scatter-gather regions, holes, truncation and extension.

mod common;
use common::*;
use nasd_proto::{AttrMask, Attributes, Protection, Region, Rights, Scheme, Suite};

const LEVELS: [Protection; 5] = [
    Protection::NONE,
    Protection::INTEGRITY_ARGS,
    Protection::INTEGRITY_DATA,
    Protection::PRIVACY_ARGS,
    Protection::PRIVACY_DATA,
];

async fn exercise(suite: Suite) {
    let d = TestDrive::start_with(|o| o.suite = suite).await;
    let c = d.conn().await;
    for scheme in Scheme::ALL {
        let o = d.create(&c, scheme).await;
        let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
        let mut model: Vec<u8> = vec![];
        let mut seed = scheme as u64 * 1000 + suite as u64;
        let writes: &[(u64, usize)] = &[
            (0, 5000),
            (8191, 3),
            (100_000, 20_000),
            (70_000, 40_000),
            (4096, 8192),
            (1, 1),
            (131_072 * 3 + 17, 9000),
        ];
        for (i, &(off, len)) in writes.iter().enumerate() {
            let p = LEVELS[i % LEVELS.len()];
            seed += 1;
            let data = bytes(seed, len);
            let w = c.write(&auth, target(o, p), off, &data).await.unwrap();
            let end = off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
            assert_eq!(w.logical_size, model.len() as u64, "{scheme} write {i}");
            for p in LEVELS {
                for (ro, rl) in [
                    (0u64, model.len() as u64),
                    (off, len as u64),
                    (off.saturating_sub(333), 1000),
                    (7, 8193),
                    (model.len() as u64 - 1, 10),
                ] {
                    let r = c
                        .read(&auth, target(o, p), vec![Region::new(ro, rl)])
                        .await
                        .unwrap();
                    let a = (ro as usize).min(model.len());
                    let b = ((ro + rl) as usize).min(model.len());
                    assert_eq!(
                        r.data,
                        model[a..b],
                        "{scheme} {p} read {ro}+{rl} after write {i}"
                    );
                    assert_eq!(r.scheme, scheme);
                }
            }
        }
        // scatter-gather read
        let regs = vec![
            Region::new(3, 10),
            Region::new(9000, 2000),
            Region::new(0, 1),
        ];
        let r = c
            .read(&auth, target(o, Protection::INTEGRITY_DATA), regs.clone())
            .await
            .unwrap();
        let want: Vec<u8> = regs
            .iter()
            .flat_map(|g| model[g.offset as usize..(g.offset + g.len) as usize].to_vec())
            .collect();
        assert_eq!(r.data, want);
        // truncate to an odd size, then extend: the tail reads as zeros
        let mut a = Attributes {
            logical_size: 12_345,
            ..Default::default()
        };
        c.setattr(
            &auth,
            target(o, Protection::INTEGRITY_DATA),
            AttrMask::LOGICAL_SIZE,
            a.clone(),
        )
        .await
        .unwrap();
        model.truncate(12_345);
        a.logical_size = 300_000;
        c.setattr(
            &auth,
            target(o, Protection::INTEGRITY_DATA),
            AttrMask::LOGICAL_SIZE,
            a,
        )
        .await
        .unwrap();
        model.resize(300_000, 0);
        for p in LEVELS {
            let r = c
                .read(&auth, target(o, p), vec![Region::new(0, 300_000)])
                .await
                .unwrap();
            assert!(r.data == model, "{scheme} {p} after truncate+extend");
            let r = c
                .read(&auth, target(o, p), vec![Region::new(12_000, 1_000)])
                .await
                .unwrap();
            assert_eq!(r.data, model[12_000..13_000]);
        }
        // overwrite inside, misaligned, after the extension
        let data = bytes(99, 3000);
        c.write(&auth, target(o, Protection::INTEGRITY_DATA), 12_340, &data)
            .await
            .unwrap();
        model[12_340..15_340].copy_from_slice(&data);
        let r = c
            .read(
                &auth,
                target(o, Protection::INTEGRITY_DATA),
                vec![Region::new(0, 300_000)],
            )
            .await
            .unwrap();
        assert!(r.data == model, "{scheme} after overwrite");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scheme_and_protection_blake3() {
    exercise(Suite::Blake3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scheme_and_protection_sha256() {
    exercise(Suite::Sha256).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_reads_hash_no_data_on_the_drive() {
    let d = TestDrive::start().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
    c.write(
        &auth,
        target(o, Protection::INTEGRITY_DATA),
        0,
        &bytes(1, 1 << 20),
    )
    .await
    .unwrap();
    for (off, len) in [
        (0u64, 4096u64),
        (1, 4096),
        (12_345, 65_536),
        (0, 1 << 20),
        (777, 1000),
    ] {
        let before = d.drive.metrics().data_bytes_hashed;
        c.read(
            &auth,
            target(o, Protection::INTEGRITY_DATA),
            vec![Region::new(off, len)],
        )
        .await
        .unwrap();
        assert_eq!(
            d.drive.metrics().data_bytes_hashed,
            before,
            "tree read {off}+{len} hashed data on the drive"
        );
    }
    // the other schemes do hash on partial reads (the saw-tooth of seed 000 Fig 4) or always (mac)
    for (scheme, off, expect_hash) in [
        (Scheme::Mac, 0u64, true),
        (Scheme::Digest, 0, false),
        (Scheme::Digest, 5, true),
    ] {
        let o = d.create(&c, scheme).await;
        let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
        c.write(
            &auth,
            target(o, Protection::INTEGRITY_DATA),
            0,
            &bytes(2, 65_536),
        )
        .await
        .unwrap();
        let before = d.drive.metrics().data_bytes_hashed;
        c.read(
            &auth,
            target(o, Protection::INTEGRITY_DATA),
            vec![Region::new(off, 16_384)],
        )
        .await
        .unwrap();
        let hashed = d.drive.metrics().data_bytes_hashed - before;
        assert_eq!(
            hashed > 0,
            expect_hash,
            "{scheme} at {off}: hashed {hashed}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastcopy_is_copy_on_write_and_accounting_is_honest() {
    let d = TestDrive::start().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
    let data = bytes(5, 80_000);
    c.write(&auth, target(o, Protection::INTEGRITY_DATA), 0, &data)
        .await
        .unwrap();
    let used_before = d.drive.drive_info().used_bytes;
    let (copy, attrs) = c
        .fastcopy(&auth, target(o, Protection::INTEGRITY_DATA))
        .await
        .unwrap();
    assert_eq!(attrs.copied_object, o);
    assert_eq!(attrs.blocks_used, 0, "a fresh clone is charged nothing");
    assert_eq!(
        d.drive.drive_info().used_bytes,
        used_before,
        "fastcopy copies no data"
    );
    let cauth = d.mint(d.cap_args(copy, Rights::ALL), attrs.access_control_version);
    // overwrite the source: the copy keeps the old bytes
    c.write(
        &auth,
        target(o, Protection::INTEGRITY_DATA),
        100,
        &[9u8; 20_000],
    )
    .await
    .unwrap();
    let r = c
        .read(
            &cauth,
            target(copy, Protection::INTEGRITY_DATA),
            vec![Region::new(0, 80_000)],
        )
        .await
        .unwrap();
    assert!(r.data == data);
    let sa = c
        .getattr(&auth, target(o, Protection::INTEGRITY_DATA))
        .await
        .unwrap();
    let ca = c
        .getattr(&cauth, target(copy, Protection::INTEGRITY_DATA))
        .await
        .unwrap();
    let used = d.drive.drive_info().partitions[0].used_bytes / 8192;
    assert_eq!(
        sa.blocks_used + ca.blocks_used,
        used,
        "blocks_used of source and copy add up to the space used"
    );
    // blocksrequired: overwriting shared blocks of the copy needs new blocks, holes too
    let (est, max) = c
        .blocks_required(
            &cauth,
            target(copy, Protection::INTEGRITY_DATA),
            vec![Region::new(0, 8192 * 20)],
        )
        .await
        .unwrap();
    assert_eq!(est, max);
    assert!(
        est >= 10,
        "holes past the end and shared blocks need blocks: {est}"
    );
    c.remove(&auth, target(o, Protection::INTEGRITY_DATA))
        .await
        .unwrap();
    let ca = c
        .getattr(&cauth, target(copy, Protection::INTEGRITY_DATA))
        .await
        .unwrap();
    assert_eq!(
        ca.blocks_used * 8192,
        d.drive.drive_info().partitions[0].used_bytes,
        "charge moved to the copy"
    );
    let r = c
        .read(
            &cauth,
            target(copy, Protection::INTEGRITY_DATA),
            vec![Region::new(0, 80_000)],
        )
        .await
        .unwrap();
    assert!(r.data == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reads_during_writes_always_verify() {
    // Readers race a writer that rewrites the whole object with one of two patterns: every read
    // verifies (no stale cached tree node, no reused block) and returns one whole pattern.
    let d = TestDrive::start().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
    let size = 300_000usize;
    let pats = [bytes(1, size), bytes(2, size)];
    c.write(&auth, target(o, Protection::INTEGRITY_DATA), 0, &pats[0])
        .await
        .unwrap();
    let mut readers = vec![];
    for r in 0..2u64 {
        let addr = d.addr.clone();
        let auth = auth.clone();
        let pats = pats.clone();
        readers.push(tokio::spawn(async move {
            let c = nasd_client::DriveConn::connect(&addr).await.unwrap();
            for i in 0..60u64 {
                let off = (i * 7919 + r * 104_729) % (size as u64 - 5000);
                let got = c
                    .read(
                        &auth,
                        target(o, Protection::INTEGRITY_DATA),
                        vec![Region::new(off, 5000)],
                    )
                    .await
                    .unwrap();
                let s = off as usize;
                assert!(
                    pats.iter().any(|p| got.data == p[s..s + 5000]),
                    "read at {off} mixes versions"
                );
            }
        }));
    }
    for i in 0..20 {
        c.write(
            &auth,
            target(o, Protection::INTEGRITY_DATA),
            0,
            &pats[i % 2],
        )
        .await
        .unwrap();
    }
    for r in readers {
        r.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_metadata_stays_under_3_2_percent_of_data() {
    let d = TestDrive::start().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
    let size = (8 << 20) + 12_345;
    for (i, part) in bytes(7, size).chunks(1 << 20).enumerate() {
        c.write(
            &auth,
            target(o, Protection::INTEGRITY_DATA),
            (i << 20) as u64,
            part,
        )
        .await
        .unwrap();
    }
    let meta = d.drive.store.metadata_bytes(P, o).unwrap();
    let share = meta as f64 / size as f64;
    eprintln!(
        "tree metadata: {meta} bytes for {size} bytes of data = {:.3}%",
        share * 100.0
    );
    assert!(
        share <= 0.032,
        "tree metadata is {:.3}% of data",
        share * 100.0
    );
    assert!(
        share >= 0.031,
        "leaves are 32 B per KiB: {:.3}%",
        share * 100.0
    );
}

/// The client reads a reply whose data has at least `DIRECT_READ_BYTES_MIN` still to come
/// straight from the socket, smaller ones through its buffer; the drive writes length, header
/// and data with one vectored write. Reads on both sides of that limit, at every protection
/// level, arrive whole and verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_on_both_sides_of_the_direct_read_limit_arrive_whole() {
    let d = TestDrive::start().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
    let limit = nasd_proto::io::DIRECT_READ_BYTES_MIN as u64;
    let data = bytes(9, 3 * limit as usize);
    c.write(&auth, target(o, Protection::INTEGRITY_DATA), 0, &data)
        .await
        .unwrap();
    for p in LEVELS {
        for (off, len) in [
            (0, limit - 700),
            (0, limit),
            (1, limit),
            (0, limit + 1),
            (3, 2 * limit),
        ] {
            let r = c
                .read(&auth, target(o, p), vec![Region::new(off, len)])
                .await
                .unwrap();
            assert!(
                r.data == data[off as usize..(off + len) as usize],
                "{p} {off}+{len}"
            );
        }
    }
}

/// Every reply carries a nonce of its own (seed 002 §2.4: replies get a fresh nonce), even
/// when the drive's clock stands still and across restarts of the drive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_nonces_never_repeat() {
    use nasd_client::wire::{build_request, RequestSpec};
    use nasd_proto::{Op, ReplyHeader};
    let d = TestDrive::start().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
    let suite = d.working_key.suite;
    drop(c);
    let (dir, drive) = d.stop().await;
    drop(drive);
    let frozen = nasd_drive::now_us();
    let mut seen = vec![];
    for _restart in 0..2 {
        let mut drive = nasd_drive::Drive::open(&dir.path().join("drive")).unwrap();
        drive.set_clock(move || frozen);
        // A restarted drive refuses nonces below its replay floor: stamp at or above it.
        let stamp = frozen.max(drive.welcome().nonce_floor_us);
        for i in 0..100u64 {
            let spec = RequestSpec {
                auth: &auth,
                protection: Protection::INTEGRITY_ARGS,
                partition: P,
                object: o,
                op: &Op::GetAttr,
                data: &[],
            };
            let nonce = nasd_proto::Nonce {
                time_us: stamp,
                random: nasd_crypto::random_u64(),
            };
            let req = build_request(suite, i + 1, nonce, &spec).unwrap();
            let reply = drive.handle(req.frame[4..].to_vec()).into_body();
            let (h, _) = ReplyHeader::decode(&reply).unwrap();
            assert_eq!(h.status, nasd_proto::Status::Ok);
            seen.push(h.nonce.to_bytes());
        }
    }
    let n = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n, "a reply nonce repeated");
}
