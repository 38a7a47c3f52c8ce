//! The block cache (with demand reads cached, `--cache-reads`) never serves stale bytes: blocks are copy-on-write and the commit that frees
//! one drops it from the cache, so a partial read cached before a write, a remove, or a reuse of
//! the physical block by another object reads the new bytes after it, in every scheme.

mod common;
use common::*;
use nasd_proto::{Protection, Region, Rights, Scheme};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_block_is_never_served_after_it_changed() {
    // Demand reads are cached only with `cache_reads` (nasd drive run --cache-reads).
    let d = TestDrive::start_with_options(
        |_| {},
        nasd_drive::DriveOptions {
            cache_reads: true,
            ..Default::default()
        },
    )
    .await;
    let c = d.conn().await;
    for scheme in Scheme::ALL {
        let o = d.create(&c, scheme).await;
        let a = d.mint(d.cap_args(o, Rights::ALL), 0);
        let t = target(o, Protection::INTEGRITY_DATA);
        let old = bytes(1, 32 * 1024);
        c.write(&a, t, 0, &old).await.unwrap();
        let part = || vec![Region::new(9000, 1000)];
        // a partial read caches block 1
        assert_eq!(c.read(&a, t, part()).await.unwrap().data, old[9000..10000]);
        let before = d.drive.cache_stats();
        assert_eq!(c.read(&a, t, part()).await.unwrap().data, old[9000..10000]);
        assert!(
            d.drive.cache_stats().hits > before.hits,
            "{scheme}: the second read was not served from the cache"
        );
        // an overwrite of part of the block: the next read sees it
        let new = bytes(2, 500);
        c.write(&a, t, 9200, &new).await.unwrap();
        let mut want = old[9000..10000].to_vec();
        want[200..700].copy_from_slice(&new);
        assert_eq!(c.read(&a, t, part()).await.unwrap().data, want, "{scheme}");
        // the object removed and a new one written: its blocks may reuse the freed ones
        c.remove(&a, t).await.unwrap();
        let o2 = d.create(&c, scheme).await;
        let a2 = d.mint(d.cap_args(o2, Rights::ALL), 0);
        let t2 = target(o2, Protection::INTEGRITY_DATA);
        let other = bytes(3, 32 * 1024);
        c.write(&a2, t2, 0, &other).await.unwrap();
        assert_eq!(
            c.read(&a2, t2, part()).await.unwrap().data,
            other[9000..10000],
            "{scheme}"
        );
        c.remove(&a2, t2).await.unwrap();
        assert!(d.drive.cache_stats().bytes <= d.drive.options().cache_bytes);
    }
}
