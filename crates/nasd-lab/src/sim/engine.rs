//! The discrete-event simulation of one drive as the queueing network of seed 000 Fig 11: an input
//! link, a message-digest (SHA) unit of configurable throughput, the drive electronics with a fixed
//! service time, and an output link.
//!
//! A request's life, as Fig 11 draws it:
//!
//! 1. It is queued on the input link at its arrival time (FIFO, [`LINK_BPS`]).
//! 2. After [`SHA_START_BYTES`] (512 bits) have arrived it joins the SHA queue; the SHA unit
//!    verifies the request MAC. The unit is charged `calls × 64 B / throughput`; a request cannot
//!    be verified before its last byte has arrived plus one compression (the unit works on data as
//!    it streams in, and is charged only for its work, not for waiting on the link).
//! 3. Once verified it is queued on the drive electronics: fixed [`ELECTRONICS_SERVICE_S`] (0.12 ms,
//!    §5.1: media time is ignored, every request is a cache hit).
//! 4. The reply is queued at once on the output link and, as a reply-MAC job, on the SHA unit. If
//!    the MAC is ready when the reply's last byte leaves, the MAC follows it on the link directly;
//!    otherwise it is queued on the output link separately when the SHA unit finishes it. The
//!    request completes when its MAC has been sent.
//!
//! Without security the SHA stage is skipped, no MAC is sent, and the request completes when its
//! reply has left: the baseline each request's added latency is measured against.
//!
//! The SHA unit serves jobs in FIFO order to completion (the seed's first simulation), or, with a
//! time slice of N bytes (Figs 15-16), preemptively in slices of N bytes from two FIFO queues: jobs
//! of at most N bytes of work are high priority, the rest low; a preempted job goes back to the
//! front of its queue.
//!
//! Time is in seconds (f64); events at equal times are taken in the order they were scheduled, so
//! a run is a deterministic function of its requests and configuration.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use crate::model::{self, Scheme, Side, COMPRESSION_BLOCK_BYTES};
use crate::sim::workload::{FsOp, Request};

/// Throughput of each direction of the drive's network link: gigabit (seed 000 §5.1).
pub const LINK_BPS: f64 = 1e9;
/// Fixed service time of the drive electronics: a prefetch hit on a Seagate ST34371W minus SCSI
/// bus time (seed 000 §5.1).
pub const ELECTRONICS_SERVICE_S: f64 = 0.12e-3;
/// UDP/RPC header on every message (seed 000 §5.1: "32 byte header").
pub const RPC_HEADER_BYTES: u64 = 32;
/// NASD request header: operation, object, region, nonce, capability arguments and MAC. nasd-proto's
/// exact size is not fixed yet; 128 bytes is the order of seed 002's capability plus arguments.
pub const NASD_REQUEST_HEADER_BYTES: u64 = 128;
/// NASD reply header: status, length, nonce.
pub const NASD_REPLY_HEADER_BYTES: u64 = 64;
/// The reply MAC sent after the reply (a SHA-1 HMAC, seed 000 §5.1).
pub const MAC_BYTES: u64 = 20;
/// Attributes carried by GetAttr replies and SetAttr requests: standard plus 256 bytes of
/// filesystem-specific fields (seed 000 §3.2.2: "from 336 bytes to its 20 byte digest").
pub const ATTR_BYTES: u64 = 336;
/// Stored attribute digest MACed instead of the attributes under P2 (seed 000 §3.2.2).
pub const ATTR_DIGEST_BYTES: u64 = 20;
/// Data that must arrive before the SHA unit can start on a request (Fig 11: "After 512 bits").
pub const SHA_START_BYTES: u64 = 64;

/// Which digests the drive has precomputed (seed 000 Fig 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precompute {
    /// Nothing: every byte is MACed with HMAC.
    P0,
    /// Stored digests per 8 KiB disk block (HierMAC) for data reads.
    P1,
    /// P1 plus a stored digest of the attributes for GetAttr.
    P2,
}

impl Precompute {
    /// All levels.
    pub const ALL: [Precompute; 3] = [Precompute::P0, Precompute::P1, Precompute::P2];

    /// `P0`, `P1` or `P2`.
    pub fn name(self) -> &'static str {
        match self {
            Precompute::P0 => "P0",
            Precompute::P1 => "P1",
            Precompute::P2 => "P2",
        }
    }
}

/// One simulated drive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// Each link direction, bits per second.
    pub link_bps: f64,
    /// SHA unit throughput in bits per second; `None` simulates the drive without security.
    pub sha_bps: Option<f64>,
    /// Drive electronics service time, seconds.
    pub electronics_s: f64,
    /// Precomputed digests.
    pub precompute: Precompute,
    /// Time slice and priority cutoff of the SHA unit in bytes of work; `None`: FIFO to completion.
    pub slice_bytes: Option<u64>,
    /// Pull-mode writes (Fig 17): writes carry no data in the timed exchange.
    pub pull_writes: bool,
}

impl SimConfig {
    /// The seed's drive: gigabit links, 0.12 ms electronics, FIFO SHA unit at `sha_mbps`.
    pub fn seed(sha_mbps: Option<f64>, precompute: Precompute) -> Self {
        SimConfig {
            link_bps: LINK_BPS,
            sha_bps: sha_mbps.map(|m| m * 1e6),
            electronics_s: ELECTRONICS_SERVICE_S,
            precompute,
            slice_bytes: None,
            pull_writes: false,
        }
    }

    /// The same drive without security.
    pub fn without_security(&self) -> Self {
        SimConfig {
            sha_bps: None,
            ..*self
        }
    }
}

/// Data length of a request as the timed exchange sees it.
fn data_len(cfg: &SimConfig, r: &Request) -> u64 {
    if cfg.pull_writes && r.op == FsOp::Write {
        0
    } else {
        r.length
    }
}

/// Bytes on the input link.
pub fn request_wire_bytes(cfg: &SimConfig, r: &Request) -> u64 {
    RPC_HEADER_BYTES
        + NASD_REQUEST_HEADER_BYTES
        + match r.op {
            FsOp::Write => data_len(cfg, r),
            FsOp::SetAttr => ATTR_BYTES,
            FsOp::Read | FsOp::GetAttr => 0,
        }
}

/// Bytes on the output link before the MAC.
pub fn reply_wire_bytes(cfg: &SimConfig, r: &Request) -> u64 {
    RPC_HEADER_BYTES
        + NASD_REPLY_HEADER_BYTES
        + match r.op {
            FsOp::Read => data_len(cfg, r),
            FsOp::GetAttr => ATTR_BYTES,
            FsOp::Write | FsOp::SetAttr => 0,
        }
}

/// Compression calls to verify the request MAC (and, for writes under P1/P2, to bring the stored
/// block digests up to date, seed 000 §3.4.3).
pub fn verify_calls(cfg: &SimConfig, r: &Request) -> u64 {
    let hdr = NASD_REQUEST_HEADER_BYTES;
    match r.op {
        FsOp::Read | FsOp::GetAttr => model::hmac_calls(hdr),
        FsOp::Write => {
            let len = data_len(cfg, r);
            let scheme = match cfg.precompute {
                Precompute::P0 => Scheme::Mac,
                Precompute::P1 | Precompute::P2 => Scheme::Digest,
            };
            model::cost(scheme, Side::Drive, model::Op::Write, r.offset, len).calls_with_header(hdr)
        }
        FsOp::SetAttr => {
            let mac = model::hmac_calls(hdr + ATTR_BYTES);
            match cfg.precompute {
                Precompute::P2 => mac + model::hash_calls(ATTR_BYTES),
                Precompute::P0 | Precompute::P1 => mac,
            }
        }
    }
}

/// Compression calls to MAC the reply.
pub fn reply_calls(cfg: &SimConfig, r: &Request) -> u64 {
    let hdr = NASD_REPLY_HEADER_BYTES;
    match r.op {
        FsOp::Read => {
            let len = data_len(cfg, r);
            let scheme = match cfg.precompute {
                Precompute::P0 => Scheme::Mac,
                Precompute::P1 | Precompute::P2 => Scheme::Digest,
            };
            model::cost(scheme, Side::Drive, model::Op::Read, r.offset, len).calls_with_header(hdr)
        }
        FsOp::GetAttr => match cfg.precompute {
            Precompute::P2 => model::hmac_calls(hdr + ATTR_DIGEST_BYTES),
            Precompute::P0 | Precompute::P1 => model::hmac_calls(hdr + ATTR_BYTES),
        },
        FsOp::Write | FsOp::SetAttr => model::hmac_calls(hdr),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobKind {
    Verify,
    Reply,
}

#[derive(Debug, Clone, Copy)]
struct Job {
    req: usize,
    kind: JobKind,
    remaining_calls: u64,
    high: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transfer {
    Reply,
    Mac,
}

#[derive(Debug, Clone, Copy)]
enum EventKind {
    Arrive(usize),
    InDone(usize),
    ShaEligible(usize),
    SliceDone { job: usize, calls: u64 },
    VerifyDone(usize),
    ElectronicsDone(usize),
    OutDone(usize, Transfer),
}

#[derive(Debug, Clone, Copy)]
struct Event {
    t: f64,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    // Reversed: BinaryHeap is a max-heap and we want the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .t
            .total_cmp(&self.t)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct ReqState {
    in_done: f64,
    reply_sent: bool,
    mac_ready: bool,
    completion: f64,
}

struct Sim<'a> {
    cfg: SimConfig,
    reqs: &'a [Request],
    st: Vec<ReqState>,
    heap: BinaryHeap<Event>,
    seq: u64,
    in_q: VecDeque<usize>,
    in_busy: bool,
    jobs: Vec<Job>,
    sha_high: VecDeque<usize>,
    sha_low: VecDeque<usize>,
    sha_busy: bool,
    elec_q: VecDeque<usize>,
    elec_busy: bool,
    out_q: VecDeque<(usize, Transfer)>,
    out_busy: bool,
}

/// Simulates `reqs` (sorted by arrival time) and returns each request's latency in seconds, in the
/// order of `reqs`.
pub fn simulate(cfg: &SimConfig, reqs: &[Request]) -> Vec<f64> {
    debug_assert!(reqs.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    let mut sim = Sim {
        cfg: *cfg,
        reqs,
        st: vec![ReqState::default(); reqs.len()],
        heap: BinaryHeap::with_capacity(1024),
        seq: 0,
        in_q: VecDeque::new(),
        in_busy: false,
        jobs: Vec::with_capacity(if cfg.sha_bps.is_some() {
            2 * reqs.len()
        } else {
            0
        }),
        sha_high: VecDeque::new(),
        sha_low: VecDeque::new(),
        sha_busy: false,
        elec_q: VecDeque::new(),
        elec_busy: false,
        out_q: VecDeque::new(),
        out_busy: false,
    };
    // Arrivals are fed one at a time, so the heap stays small.
    let mut next_arrival = 0;
    loop {
        let next_event_t = sim.heap.peek().map(|e| e.t);
        match (reqs.get(next_arrival), next_event_t) {
            (Some(r), Some(t)) if r.arrival_s <= t => {
                sim.handle(r.arrival_s, EventKind::Arrive(next_arrival));
                next_arrival += 1;
            }
            (Some(r), None) => {
                sim.handle(r.arrival_s, EventKind::Arrive(next_arrival));
                next_arrival += 1;
            }
            (_, Some(_)) => {
                let e = sim.heap.pop().expect("peeked");
                sim.handle(e.t, e.kind);
            }
            (None, None) => break,
        }
    }
    reqs.iter()
        .zip(&sim.st)
        .map(|(r, s)| s.completion - r.arrival_s)
        .collect()
}

impl Sim<'_> {
    fn schedule(&mut self, t: f64, kind: EventKind) {
        self.seq += 1;
        self.heap.push(Event {
            t,
            seq: self.seq,
            kind,
        });
    }

    fn link_s(&self, bytes: u64) -> f64 {
        bytes as f64 * 8.0 / self.cfg.link_bps
    }

    fn sha_s(&self, calls: u64) -> f64 {
        let bps = self.cfg.sha_bps.expect("SHA work only with security");
        (calls * COMPRESSION_BLOCK_BYTES) as f64 * 8.0 / bps
    }

    fn secure(&self) -> bool {
        self.cfg.sha_bps.is_some()
    }

    fn handle(&mut self, now: f64, kind: EventKind) {
        match kind {
            EventKind::Arrive(r) => {
                self.in_q.push_back(r);
                self.try_input(now);
            }
            EventKind::InDone(r) => {
                self.in_busy = false;
                if !self.secure() {
                    self.verified(now, r);
                }
                self.try_input(now);
            }
            EventKind::ShaEligible(r) => {
                let calls = verify_calls(&self.cfg, &self.reqs[r]);
                self.add_job(now, r, JobKind::Verify, calls);
            }
            EventKind::SliceDone { job, calls } => {
                self.sha_busy = false;
                let j = &mut self.jobs[job];
                j.remaining_calls -= calls;
                if j.remaining_calls == 0 {
                    self.job_done(now, job);
                } else if j.high {
                    self.sha_high.push_front(job);
                } else {
                    self.sha_low.push_front(job);
                }
                self.try_sha(now);
            }
            EventKind::VerifyDone(r) => self.verified(now, r),
            EventKind::ElectronicsDone(r) => {
                self.elec_busy = false;
                self.out_q.push_back((r, Transfer::Reply));
                self.try_output(now);
                if self.secure() {
                    let calls = reply_calls(&self.cfg, &self.reqs[r]);
                    self.add_job(now, r, JobKind::Reply, calls);
                }
                self.try_electronics(now);
            }
            EventKind::OutDone(r, Transfer::Reply) => {
                self.out_busy = false;
                self.st[r].reply_sent = true;
                if !self.secure() {
                    self.st[r].completion = now;
                } else if self.st[r].mac_ready {
                    // The MAC is ready: it follows the reply without giving up the link.
                    self.out_busy = true;
                    let t = now + self.link_s(MAC_BYTES);
                    self.schedule(t, EventKind::OutDone(r, Transfer::Mac));
                    return;
                }
                self.try_output(now);
            }
            EventKind::OutDone(r, Transfer::Mac) => {
                self.out_busy = false;
                self.st[r].completion = now;
                self.try_output(now);
            }
        }
    }

    fn try_input(&mut self, now: f64) {
        if self.in_busy {
            return;
        }
        let Some(r) = self.in_q.pop_front() else {
            return;
        };
        self.in_busy = true;
        let wire = request_wire_bytes(&self.cfg, &self.reqs[r]);
        let done = now + self.link_s(wire);
        self.st[r].in_done = done;
        self.schedule(done, EventKind::InDone(r));
        if self.secure() {
            let t = now + self.link_s(SHA_START_BYTES.min(wire));
            self.schedule(t, EventKind::ShaEligible(r));
        }
    }

    fn add_job(&mut self, now: f64, req: usize, kind: JobKind, calls: u64) {
        let high = match self.cfg.slice_bytes {
            Some(slice) => calls * COMPRESSION_BLOCK_BYTES <= slice,
            None => true,
        };
        let id = self.jobs.len();
        self.jobs.push(Job {
            req,
            kind,
            remaining_calls: calls,
            high,
        });
        if high {
            self.sha_high.push_back(id);
        } else {
            self.sha_low.push_back(id);
        }
        self.try_sha(now);
    }

    fn try_sha(&mut self, now: f64) {
        if self.sha_busy {
            return;
        }
        let Some(job) = self
            .sha_high
            .pop_front()
            .or_else(|| self.sha_low.pop_front())
        else {
            return;
        };
        let remaining = self.jobs[job].remaining_calls;
        let calls = match self.cfg.slice_bytes {
            Some(slice) => remaining.min((slice / COMPRESSION_BLOCK_BYTES).max(1)),
            None => remaining,
        };
        self.sha_busy = true;
        let t = now + self.sha_s(calls);
        self.schedule(t, EventKind::SliceDone { job, calls });
    }

    fn job_done(&mut self, now: f64, job: usize) {
        let Job { req, kind, .. } = self.jobs[job];
        match kind {
            JobKind::Verify => {
                // The last compression needs the last byte.
                let earliest = self.st[req].in_done + self.sha_s(1);
                if earliest > now {
                    self.schedule(earliest, EventKind::VerifyDone(req));
                } else {
                    self.verified(now, req);
                }
            }
            JobKind::Reply => {
                self.st[req].mac_ready = true;
                if self.st[req].reply_sent {
                    self.out_q.push_back((req, Transfer::Mac));
                    self.try_output(now);
                }
            }
        }
    }

    fn verified(&mut self, now: f64, r: usize) {
        self.elec_q.push_back(r);
        self.try_electronics(now);
    }

    fn try_electronics(&mut self, now: f64) {
        if self.elec_busy {
            return;
        }
        let Some(r) = self.elec_q.pop_front() else {
            return;
        };
        self.elec_busy = true;
        let t = now + self.cfg.electronics_s;
        self.schedule(t, EventKind::ElectronicsDone(r));
    }

    fn try_output(&mut self, now: f64) {
        if self.out_busy {
            return;
        }
        let Some((r, what)) = self.out_q.pop_front() else {
            return;
        };
        self.out_busy = true;
        let bytes = match what {
            Transfer::Reply => reply_wire_bytes(&self.cfg, &self.reqs[r]),
            Transfer::Mac => MAC_BYTES,
        };
        let t = now + self.link_s(bytes);
        self.schedule(t, EventKind::OutDone(r, what));
    }
}

/// How a secure run compares with the run without security, request by request (Figs 12-17).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Added {
    /// Mean over requests of the added latency, percent of each request's latency without security.
    pub mean_pct: f64,
    /// Added latency of the mean: mean secure latency over mean baseline latency, minus one, percent.
    pub of_mean_pct: f64,
    /// Requests whose latency at least doubled ("outlyers", Fig 13), percent.
    pub outliers_pct: f64,
    /// Largest added latency, percent (Fig 14).
    pub max_pct: f64,
}

/// Compares per-request latencies of a secure run with the baseline.
pub fn compare(secure: &[f64], baseline: &[f64]) -> Added {
    assert_eq!(secure.len(), baseline.len());
    let n = secure.len().max(1) as f64;
    let (mut sum_pct, mut outliers, mut max_pct, mut sum_s, mut sum_b) =
        (0.0, 0usize, 0.0f64, 0.0, 0.0);
    for (&s, &b) in secure.iter().zip(baseline) {
        let pct = 100.0 * (s - b) / b;
        sum_pct += pct;
        if s >= 2.0 * b {
            outliers += 1;
        }
        max_pct = max_pct.max(pct);
        sum_s += s;
        sum_b += b;
    }
    Added {
        mean_pct: sum_pct / n,
        of_mean_pct: if sum_b > 0.0 {
            100.0 * (sum_s / sum_b - 1.0)
        } else {
            0.0
        },
        outliers_pct: 100.0 * outliers as f64 / n,
        max_pct,
    }
}
