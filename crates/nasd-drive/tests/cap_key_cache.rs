//! The capability-key cache (seed 002 §2.4, §4.4) changes no outcome: a revocation by access
//! control version and two working-key rotations refuse exactly the requests they refuse
//! without it. Ignored by default, a measurement of what it saves per request in the handler.

mod common;
use common::*;
use nasd_client::wire::{build_request, RequestSpec};
use nasd_client::{Auth, ClientError};
use nasd_crypto::Key;
use nasd_proto::{
    AttrMask, Attributes, ObjectId, Op, OpCode, Protection, Region, ReplyHeader, Rights, Scheme,
    Status,
};
use std::time::Instant;

/// `Ok`, or the drive's refusal.
fn status<T>(r: Result<T, ClientError>) -> Status {
    match r {
        Ok(_) => Status::Ok,
        Err(e) => e
            .status()
            .unwrap_or_else(|| panic!("not a drive refusal: {e}")),
    }
}

async fn started(cache: bool) -> TestDrive {
    let options = nasd_drive::DriveOptions {
        cap_key_cache: cache,
        ..Default::default()
    };
    TestDrive::start_with_options(|_| {}, options).await
}

/// What each step of a capability's life comes to on a drive with or without the cache.
async fn capability_lifecycle(cache: bool) -> Vec<Status> {
    let d = started(cache).await;
    let c = d.conn().await;
    let o = d.create(&c, Scheme::Tree).await;
    let t = target(o, Protection::INTEGRITY_DATA);
    c.write(
        &d.mint(d.cap_args(o, Rights::ALL), 0),
        t,
        0,
        &bytes(1, 4096),
    )
    .await
    .unwrap();
    let read = |auth: Auth| {
        let c = &c;
        async move { status(c.read(&auth, t, vec![Region::new(0, 100)]).await) }
    };
    let rotate = || async {
        let t0 = target(ObjectId(0), Protection::INTEGRITY_ARGS);
        let k = Key::generate();
        let p = d.partition_auth();
        c.set_key(&p, t0, OpCode::SetWorkingKey, &k).await.unwrap();
        k
    };
    let mut out = vec![];
    let v0 = d.mint(d.cap_args(o, Rights::READ), 0);
    out.push(read(v0.clone()).await);
    out.push(read(v0.clone()).await);
    let admin = d.mint(d.cap_args(o, Rights::SETATTR), 0);
    let a = Attributes {
        access_control_version: 1,
        ..Default::default()
    };
    let mask = AttrMask::ACCESS_CONTROL_VERSION;
    c.setattr(&admin, t, mask, a).await.unwrap();
    out.push(read(v0).await);
    let v1 = d.mint(d.cap_args(o, Rights::READ), 1);
    out.push(read(v1.clone()).await);
    let k1 = rotate().await;
    out.push(read(v1.clone()).await);
    let suite = d.working_key.suite;
    let under_k1 = nasd_client::Capability::mint(suite, &k1, d.cap_args(o, Rights::READ), 1, false);
    out.push(read(Auth::Capability(under_k1.clone())).await);
    rotate().await;
    out.push(read(v1).await);
    out.push(read(Auth::Capability(under_k1)).await);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_changes_no_outcome() {
    let with = capability_lifecycle(true).await;
    let without = capability_lifecycle(false).await;
    use Status::{BadDigest, Ok};
    let expected = [Ok, Ok, BadDigest, Ok, Ok, Ok, BadDigest, Ok];
    assert_eq!(with, expected, "with the cache");
    assert_eq!(without, expected, "without the cache");
}

/// Requests per timed batch, each with a fresh nonce, built before the clock starts.
const BATCH_REQUESTS: usize = 4000;
/// Timed batches per drive and cell, alternating between the drives.
const ROUNDS: usize = 31;

/// `BATCH_REQUESTS` reads of `size` bytes under `auth`, as frame bodies.
fn reads(d: &TestDrive, auth: &Auth, o: ObjectId, size: u64, p: Protection) -> Vec<Vec<u8>> {
    let op = Op::Read {
        regions: vec![Region::new(0, size)],
    };
    let spec = RequestSpec {
        auth,
        protection: p,
        partition: P,
        object: o,
        op: &op,
        data: &[],
    };
    (0..BATCH_REQUESTS as u64)
        .map(|i| {
            let nonce = nasd_proto::Nonce {
                time_us: nasd_drive::now_us(),
                random: nasd_crypto::random_u64(),
            };
            let suite = d.working_key.suite;
            let r = build_request(suite, i + 1, nonce, &spec).unwrap();
            r.frame[4..].to_vec()
        })
        .collect()
}

/// Handler time per request over one batch, ns; every request must succeed.
fn time_batch(d: &TestDrive, bodies: Vec<Vec<u8>>) -> f64 {
    let n = bodies.len();
    let t = Instant::now();
    let replies: Vec<_> = bodies.into_iter().map(|b| d.drive.handle(b)).collect();
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    for r in replies {
        let (h, _) = ReplyHeader::decode(&r.into_body()).unwrap();
        assert_eq!(h.status, Status::Ok);
    }
    ns
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test --release -p nasd-drive --test cap_key_cache -- --ignored --nocapture"]
async fn handler_time_with_and_without_the_cache() {
    let drives = [started(true).await, started(false).await];
    let mut setup = vec![];
    for d in &drives {
        let c = d.conn().await;
        let o = d.create(&c, Scheme::Tree).await;
        let all = d.mint(d.cap_args(o, Rights::ALL), 0);
        let t = target(o, Protection::INTEGRITY_DATA);
        c.write(&all, t, 0, &bytes(2, 8192)).await.unwrap();
        setup.push((o, d.mint(d.cap_args(o, Rights::READ), 0)));
    }
    println!("read, handler ns/request (median of {ROUNDS} batches of {BATCH_REQUESTS}): cache on, off, saved, requests/s ratio on/off");
    for p in [
        Protection::NONE,
        Protection::INTEGRITY_ARGS,
        Protection::INTEGRITY_DATA,
    ] {
        for size in [1024u64, 4096] {
            let (mut on, mut off, mut ratio) = (vec![], vec![], vec![]);
            for round in 0..ROUNDS {
                let mut ns = [0.0; 2];
                for k in [round % 2, 1 - round % 2] {
                    let (o, auth) = &setup[k];
                    let bodies = reads(&drives[k], auth, *o, size, p);
                    ns[k] = time_batch(&drives[k], bodies);
                }
                on.push(ns[0]);
                off.push(ns[1]);
                ratio.push(ns[1] / ns[0]);
            }
            let (on, off) = (median(on), median(off));
            println!(
                "{:>16} {size:>5} B  {on:>8.0} {off:>8.0} {:>6.0}  {:.3}",
                p.to_string(),
                off - on,
                median(ratio)
            );
        }
    }
}
