//! Tests of the simulator on cases with known answers: one request's latency worked out by hand,
//! an M/D/1 queue against the Pollaczek-Khinchine formula, and the qualitative effects the seed
//! reports for time slicing and pull-mode writes.

use super::engine::*;
use super::workload::{self, FsOp, Request};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn req(t: f64, op: FsOp, offset: u64, length: u64) -> Request {
    Request {
        arrival_s: t,
        op,
        object: 1,
        offset,
        length,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn one_read_by_hand_slow_sha() {
    // An 8 KiB aligned read at 600 Mb/s SHA, P0, on an idle drive.
    let r = [req(0.0, FsOp::Read, 0, 8192)];
    let cfg = SimConfig::seed(Some(600.0), Precompute::P0);
    let bit: f64 = 1e-9; // seconds per bit on a gigabit link
    let call: f64 = 512.0 / 600e6; // seconds per compression call at 600 Mb/s
                                   // Request: 32 + 128 = 160 B; SHA starts after 64 B; HMAC over the 128 B header = 2 + 3 calls.
    let verified = (64.0 * 8.0 * bit + 5.0 * call).max(160.0 * 8.0 * bit + call);
    let served = verified + 120e-6;
    // Reply: 32 + 64 + 8192 = 8288 B; HMAC over 64 + 8192 B = 129 + 3 = 132 calls, which ends after
    // the reply has left, so the 20 B MAC is sent on its own.
    let mac_ready = served + 132.0 * call;
    assert!(mac_ready > served + 8288.0 * 8.0 * bit);
    let done = mac_ready + 20.0 * 8.0 * bit;
    let lat = simulate(&cfg, &r);
    assert!(close(lat[0], done), "{} vs {}", lat[0], done);
    // The same number written out: 4.7787 + 120 + 112.64 + 0.16 us.
    assert!((lat[0] - 237.5787e-6).abs() < 1e-10, "{}", lat[0]);

    // Without security: 1.28 us in, 120 us served, 66.304 us out.
    let base = simulate(&cfg.without_security(), &r);
    assert!(close(base[0], 1.28e-6 + 120e-6 + 66.304e-6), "{}", base[0]);
}

#[test]
fn one_read_by_hand_fast_sha() {
    // At 2 Gb/s the reply MAC (132 calls, 33.8 us) is ready before the reply (66.3 us) has left:
    // the MAC follows it directly.
    let r = [req(0.0, FsOp::Read, 0, 8192)];
    let cfg = SimConfig::seed(Some(2000.0), Precompute::P0);
    let call: f64 = 512.0 / 2e9;
    let verified = (0.512e-6 + 5.0 * call).max(1.28e-6 + call);
    let done = verified + 120e-6 + 66.304e-6 + 0.16e-6;
    let lat = simulate(&cfg, &r);
    assert!(close(lat[0], done), "{} vs {}", lat[0], done);
}

#[test]
fn p1_read_of_full_blocks_only_macs_digests() {
    let r = [req(0.0, FsOp::Read, 0, 16384)];
    let p0 = SimConfig::seed(Some(600.0), Precompute::P0);
    let p1 = SimConfig::seed(Some(600.0), Precompute::P1);
    // Reply header 64 B + two 20 B digests = 104 B: 2 + 3 calls.
    assert_eq!(reply_calls(&p1, &r[0]), 5);
    assert_eq!(reply_calls(&p0, &r[0]), 1 + 256 + 3);
    let l0 = simulate(&p0, &r)[0];
    let l1 = simulate(&p1, &r)[0];
    let base = simulate(&p0.without_security(), &r)[0];
    assert!(l1 < l0);
    // With P1 the MAC is ready long before the reply leaves: only the MAC's own 0.16 us and the
    // request verification are added.
    assert!(l1 - base < 10e-6, "{}", l1 - base);
}

#[test]
fn electronics_alone_is_an_md1_queue() {
    // Poisson arrivals, deterministic 0.12 ms service, instantaneous links and no security:
    // mean time in system = S + rho S / (2 (1 - rho)) (Pollaczek-Khinchine for M/D/1).
    let s = ELECTRONICS_SERVICE_S;
    for rho in [0.5, 0.8] {
        let lambda = rho / s;
        let mut rng = StdRng::seed_from_u64(11);
        let mut t = 0.0;
        let reqs: Vec<Request> = (0..300_000)
            .map(|_| {
                t += -(1.0 - rng.random::<f64>()).ln() / lambda;
                req(t, FsOp::GetAttr, 0, 0)
            })
            .collect();
        let cfg = SimConfig {
            link_bps: 1e20,
            ..SimConfig::seed(None, Precompute::P0)
        };
        let lat = simulate(&cfg, &reqs);
        let mean = lat.iter().sum::<f64>() / lat.len() as f64;
        let expect = s + rho * s / (2.0 * (1.0 - rho));
        let err = (mean - expect).abs() / expect;
        assert!(
            err < 0.03,
            "rho {rho}: mean {mean} expected {expect} ({:.2}%)",
            err * 100.0
        );
    }
}

#[test]
fn time_slicing_lets_a_small_request_pass_a_large_one() {
    // A 64 KiB write then, just after it has arrived, a getattr. At 200 Mb/s the write's
    // verification takes 2.6 ms of SHA time; with 2K slices the getattr's jobs overtake it.
    let w = req(0.0, FsOp::Write, 0, 65536);
    let g = req(0.6e-3, FsOp::GetAttr, 0, 0);
    let fifo = SimConfig::seed(Some(200.0), Precompute::P2);
    let sliced = SimConfig {
        slice_bytes: Some(2048),
        ..fifo
    };
    let a = simulate(&fifo, &[w, g]);
    let b = simulate(&sliced, &[w, g]);
    assert!(b[1] < a[1] / 3.0, "getattr fifo {} sliced {}", a[1], b[1]);
    assert!(
        b[0] >= a[0],
        "the large write cannot gain: fifo {} sliced {}",
        a[0],
        b[0]
    );
}

#[test]
fn pull_writes_time_only_the_control_exchange() {
    let w = [req(0.0, FsOp::Write, 0, 65536)];
    let zero = [req(0.0, FsOp::Write, 0, 0)];
    let push = SimConfig::seed(Some(400.0), Precompute::P2);
    let pull = SimConfig {
        pull_writes: true,
        ..push
    };
    assert_eq!(simulate(&pull, &w), simulate(&push, &zero));
    assert!(simulate(&push, &w)[0] > simulate(&pull, &w)[0]);
}

#[test]
fn added_latency_shrinks_as_sha_speeds_up_and_runs_are_deterministic() {
    let reqs = workload::generate(&workload::NFS, 20_000, 5);
    let base = simulate(&SimConfig::seed(None, Precompute::P0), &reqs);
    let mut last = f64::MAX;
    for m in [100.0, 300.0, 600.0, 1000.0, 2000.0] {
        let cfg = SimConfig::seed(Some(m), Precompute::P0);
        let lat = simulate(&cfg, &reqs);
        assert_eq!(lat, simulate(&cfg, &reqs));
        let a = compare(&lat, &base);
        assert!(a.mean_pct < last, "{m} Mb/s: {} after {}", a.mean_pct, last);
        assert!(a.mean_pct > 0.0 && a.max_pct >= a.mean_pct);
        last = a.mean_pct;
    }
}
