//! What `nasd drive run --metrics` shows moves with the requests the drive serves: counts,
//! bytes and latency per operation, refusals by status, capacity, and health.

mod common;
use common::*;
use nasd_metrics::{Exposition, Source};
use nasd_proto::{Protection, Region, Rights, Scheme};

fn scrape(d: &TestDrive) -> String {
    let mut e = Exposition::new();
    nasd_drive::metrics::DriveSource(d.drive.clone()).render(&mut e);
    e.finish()
}

/// The value of the sample `line` starts (`name{labels}`), if there is one.
fn value(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn requests_refusals_and_capacity_are_counted() {
    let d = TestDrive::start().await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let auth = d.mint(d.cap_args(o, Rights::ALL), 0);
    let data = bytes(7, 100_000);
    c.write(&auth, target(o, Protection::NONE), 0, &data)
        .await
        .unwrap();
    let whole = vec![Region::new(0, 100_000)];
    c.read(&auth, target(o, Protection::NONE), whole)
        .await
        .unwrap();
    // A read of an object the capability does not name is refused.
    let other = d.create(&c, Scheme::Tree).await;
    assert!(c
        .read(
            &auth,
            target(other, Protection::NONE),
            vec![Region::new(0, 10)]
        )
        .await
        .is_err());

    let t = scrape(&d);
    assert_eq!(
        value(&t, "nasd_drive_requests_total{op=\"write\"}"),
        Some(1.0),
        "{t}"
    );
    assert_eq!(
        value(&t, "nasd_drive_requests_total{op=\"read\"}"),
        Some(2.0)
    );
    assert!(value(&t, "nasd_drive_request_bytes_total{op=\"write\"}").unwrap() > 100_000.0);
    assert!(value(&t, "nasd_drive_reply_bytes_total{op=\"read\"}").unwrap() > 100_000.0);
    assert_eq!(
        value(
            &t,
            "nasd_drive_errors_total{op=\"read\",status=\"ObjectMismatch\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&t, "nasd_drive_request_duration_seconds_count{op=\"read\"}"),
        Some(2.0)
    );
    assert_eq!(
        value(&t, "nasd_drive_capacity_bytes"),
        Some((1u64 << 30) as f64)
    );
    let used = value(&t, "nasd_drive_used_bytes").unwrap();
    assert!(used >= 100_000.0, "{used}");
    assert_eq!(
        value(&t, "nasd_drive_free_bytes"),
        Some((1u64 << 30) as f64 - used)
    );
    // The two made here, and any the partition starts with.
    assert!(value(&t, "nasd_drive_objects{partition=\"1\"}").unwrap() >= 2.0);
    assert_eq!(value(&t, "nasd_drive_healthy"), Some(1.0));
    assert_eq!(
        nasd_drive::metrics::DriveSource(d.drive.clone()).health(),
        Ok(())
    );
}
