//! Workloads for the simulation: the request type, a trace file reader, and synthetic generators
//! shaped like the NFS and AFS traces of seed 000 §5.1 (the Berkeley Auspex NFS traces [Dahlin94]
//! and CMU's AFS traces [Gobioff99] are not available).
//!
//! # Trace format
//!
//! A text file, one request per line, five fields separated by white space:
//!
//! ```text
//! # timestamp_s  op       object  offset  length
//! 0.000125       read     17      8192    8192
//! 0.000300       getattr  17      0       0
//! ```
//!
//! `timestamp_s` is the arrival time in seconds (decimal, non-decreasing after sorting: the reader
//! sorts by it), `op` is one of `read`, `write`, `getattr`, `setattr`, `object` an unsigned
//! integer, `offset` and `length` bytes (ignored for the attribute operations). `#` starts a
//! comment; blank lines are skipped.
//!
//! # Synthetic workloads
//!
//! Each generator draws arrivals from a two-state Markov-modulated Poisson process (calm periods
//! and bursts, exponentially distributed lengths), because file-server traces are bursty and the
//! seed's worst cases (Fig 14) come from "brief periods when the entire system is near
//! saturation". Operation mixes follow the ratios the seed quotes: reads to writes 4.8:1 (Berkeley
//! NFS, §3.1), attribute reads to attribute writes 6:1 for NFS and 22:1 for AFS (§3.2.2). Sizes:
//! NFS v2 moves at most 8 KiB per request, so NFS reads and writes are one aligned 8 KiB block or a
//! file's partial last block; AFS moves whole files in 64 KiB chunks, so AFS sizes are log-normal
//! file sizes cut at the chunk size. Every parameter is in [`WorkloadSpec`] and `docs/lab.md`.

use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::LabError;

/// The drive operations a filesystem request maps to (one NASD request per filesystem request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsOp {
    /// Read object data.
    Read,
    /// Write object data.
    Write,
    /// Read attributes.
    GetAttr,
    /// Write attributes.
    SetAttr,
}

impl FsOp {
    /// The trace file's name of the operation.
    pub fn name(self) -> &'static str {
        match self {
            FsOp::Read => "read",
            FsOp::Write => "write",
            FsOp::GetAttr => "getattr",
            FsOp::SetAttr => "setattr",
        }
    }

    fn parse(s: &str) -> Option<FsOp> {
        match s {
            "read" => Some(FsOp::Read),
            "write" => Some(FsOp::Write),
            "getattr" => Some(FsOp::GetAttr),
            "setattr" => Some(FsOp::SetAttr),
            _ => None,
        }
    }
}

/// One request offered to the drive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Arrival time, seconds from the start of the trace.
    pub arrival_s: f64,
    /// The operation.
    pub op: FsOp,
    /// Object id.
    pub object: u64,
    /// Byte offset of the data operation.
    pub offset: u64,
    /// Bytes moved by the data operation (0 for attribute operations).
    pub length: u64,
}

/// Reads a trace file in the format above; requests come back sorted by arrival time.
pub fn read_trace(path: &Path) -> Result<Vec<Request>, LabError> {
    let text = std::fs::read_to_string(path).map_err(|source| LabError::TraceIo {
        path: path.to_path_buf(),
        source,
    })?;
    let reqs = parse_trace(&text).map_err(|(line, reason)| LabError::TraceFormat {
        path: path.to_path_buf(),
        line,
        reason,
    })?;
    if reqs.is_empty() {
        return Err(LabError::TraceEmpty(path.to_path_buf()));
    }
    Ok(reqs)
}

/// Parses trace text; an error names the 1-based line and what is wrong.
pub fn parse_trace(text: &str) -> Result<Vec<Request>, (usize, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 5 {
            return Err((i + 1, format!("expected 5 fields, found {}", f.len())));
        }
        let arrival_s: f64 = f[0]
            .parse()
            .map_err(|_| (i + 1, format!("bad timestamp {:?}", f[0])))?;
        if !arrival_s.is_finite() || arrival_s < 0.0 {
            return Err((i + 1, format!("timestamp {arrival_s} is not a time")));
        }
        let op = FsOp::parse(f[1]).ok_or_else(|| (i + 1, format!("unknown op {:?}", f[1])))?;
        let num = |s: &str, what: &str| -> Result<u64, (usize, String)> {
            s.parse().map_err(|_| (i + 1, format!("bad {what} {s:?}")))
        };
        let object = num(f[2], "object")?;
        let (offset, length) = match op {
            FsOp::Read | FsOp::Write => (num(f[3], "offset")?, num(f[4], "length")?),
            FsOp::GetAttr | FsOp::SetAttr => (0, 0),
        };
        if offset.checked_add(length).is_none() {
            return Err((i + 1, "offset + length overflows".to_string()));
        }
        out.push(Request {
            arrival_s,
            op,
            object,
            offset,
            length,
        });
    }
    out.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    Ok(out)
}

/// Writes requests in the trace format (so a synthetic workload can be saved and replayed).
pub fn format_trace(reqs: &[Request]) -> String {
    let mut s = String::from("# timestamp_s op object offset length\n");
    for r in reqs {
        s.push_str(&format!(
            "{:.9} {} {} {} {}\n",
            r.arrival_s,
            r.op.name(),
            r.object,
            r.offset,
            r.length
        ));
    }
    s
}

/// How data operation sizes are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SizeSpec {
    /// NFS v2: a full aligned block with probability `full_p`, else a partial last block of
    /// uniform length in 1..block, starting on a block boundary.
    Blocks {
        /// Transfer size, bytes.
        block_bytes: u64,
        /// Probability of a full block.
        full_p: f64,
        /// Blocks per object (offsets are a uniform block index below this).
        blocks_per_object: u64,
    },
    /// AFS: log-normal file size cut at `chunk_bytes`; offset 0 with probability `first_chunk_p`,
    /// else a uniform later chunk boundary.
    Files {
        /// Median size, bytes.
        median_bytes: f64,
        /// Standard deviation of the size's natural logarithm.
        sigma_ln: f64,
        /// Largest transfer (AFS chunk), bytes.
        chunk_bytes: u64,
        /// Probability that the transfer starts at offset 0.
        first_chunk_p: f64,
        /// Later chunks per object.
        later_chunks: u64,
    },
}

/// A synthetic workload generator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadSpec {
    /// Name used in tables and plots.
    pub name: &'static str,
    /// Arrival rate in calm periods, requests per second.
    pub calm_rate_per_s: f64,
    /// Arrival rate in bursts, requests per second.
    pub burst_rate_per_s: f64,
    /// Mean length of a calm period, seconds.
    pub calm_mean_s: f64,
    /// Mean length of a burst, seconds.
    pub burst_mean_s: f64,
    /// Fractions of read, write, getattr, setattr (sum 1).
    pub mix: [f64; 4],
    /// Data sizes and offsets.
    pub sizes: SizeSpec,
    /// Objects requests are spread over.
    pub objects: u64,
}

/// NFS-shaped: NFS v2 over a Berkeley-like file server mix.
pub const NFS: WorkloadSpec = WorkloadSpec {
    name: "nfs",
    calm_rate_per_s: 800.0,
    burst_rate_per_s: 4000.0,
    calm_mean_s: 0.5,
    burst_mean_s: 0.05,
    // 48.3% data operations at 4.8:1 reads to writes; 51.7% attribute operations at 6:1.
    mix: [0.400, 0.083, 0.443, 0.074],
    sizes: SizeSpec::Blocks {
        block_bytes: 8192,
        full_p: 0.7,
        blocks_per_object: 64,
    },
    objects: 4096,
};

/// AFS-shaped: whole-file fetches and stores in 64 KiB chunks, status fetches dominate.
pub const AFS: WorkloadSpec = WorkloadSpec {
    name: "afs",
    calm_rate_per_s: 250.0,
    burst_rate_per_s: 1500.0,
    calm_mean_s: 0.5,
    burst_mean_s: 0.05,
    // 30.2% data operations at 4.8:1; 69.8% attribute operations at 22:1.
    mix: [0.250, 0.052, 0.668, 0.030],
    sizes: SizeSpec::Files {
        median_bytes: 8192.0,
        sigma_ln: 1.5,
        chunk_bytes: 65536,
        first_chunk_p: 0.8,
        later_chunks: 15,
    },
    objects: 4096,
};

/// A heavier AFS day: longer files (the seed notes AFS worst cases vary from trace to trace).
pub const AFS_HEAVY: WorkloadSpec = WorkloadSpec {
    name: "afs-heavy",
    calm_rate_per_s: 300.0,
    burst_rate_per_s: 2000.0,
    sizes: SizeSpec::Files {
        median_bytes: 16384.0,
        sigma_ln: 2.0,
        chunk_bytes: 65536,
        first_chunk_p: 0.7,
        later_chunks: 31,
    },
    ..AFS
};

/// The built-in workloads, in the order tables show them.
pub const BUILT_IN: [WorkloadSpec; 3] = [NFS, AFS, AFS_HEAVY];

fn exp(rng: &mut StdRng, mean: f64) -> f64 {
    // 1 - u is in (0, 1], so the logarithm is finite.
    -mean * (1.0 - rng.random::<f64>()).ln()
}

/// A standard normal draw (Box-Muller), shared with [`crate::cache`]'s file sizes.
pub(crate) fn std_normal(rng: &mut StdRng) -> f64 {
    // Box-Muller.
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Generates `n` requests of `spec`, deterministically for a given `seed`.
pub fn generate(spec: &WorkloadSpec, n: usize, seed: u64) -> Vec<Request> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    let mut t = 0.0;
    let mut burst = false;
    let mut state_end = exp(&mut rng, spec.calm_mean_s);
    while out.len() < n {
        let rate = if burst {
            spec.burst_rate_per_s
        } else {
            spec.calm_rate_per_s
        };
        let dt = exp(&mut rng, 1.0 / rate);
        if t + dt > state_end {
            // Memoryless: restart the draw in the next state.
            t = state_end;
            burst = !burst;
            let mean = if burst {
                spec.burst_mean_s
            } else {
                spec.calm_mean_s
            };
            state_end = t + exp(&mut rng, mean);
            continue;
        }
        t += dt;
        let u: f64 = rng.random();
        let op = if u < spec.mix[0] {
            FsOp::Read
        } else if u < spec.mix[0] + spec.mix[1] {
            FsOp::Write
        } else if u < spec.mix[0] + spec.mix[1] + spec.mix[2] {
            FsOp::GetAttr
        } else {
            FsOp::SetAttr
        };
        let object = rng.random_range(0..spec.objects);
        let (offset, length) = match op {
            FsOp::GetAttr | FsOp::SetAttr => (0, 0),
            FsOp::Read | FsOp::Write => match spec.sizes {
                SizeSpec::Blocks {
                    block_bytes,
                    full_p,
                    blocks_per_object,
                } => {
                    let off = rng.random_range(0..blocks_per_object) * block_bytes;
                    let len = if rng.random::<f64>() < full_p {
                        block_bytes
                    } else {
                        rng.random_range(1..block_bytes)
                    };
                    (off, len)
                }
                SizeSpec::Files {
                    median_bytes,
                    sigma_ln,
                    chunk_bytes,
                    first_chunk_p,
                    later_chunks,
                } => {
                    let size = (median_bytes * (sigma_ln * std_normal(&mut rng)).exp()).round();
                    let len = (size as u64).clamp(1, chunk_bytes);
                    let off = if rng.random::<f64>() < first_chunk_p {
                        0
                    } else {
                        rng.random_range(1..=later_chunks) * chunk_bytes
                    };
                    (off, len)
                }
            },
        };
        out.push(Request {
            arrival_s: t,
            op,
            object,
            offset,
            length,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_round_trips_and_reports_bad_lines() {
        let reqs = generate(&NFS, 200, 7);
        let back = parse_trace(&format_trace(&reqs)).unwrap();
        assert_eq!(back.len(), reqs.len());
        for (a, b) in reqs.iter().zip(&back) {
            assert!((a.arrival_s - b.arrival_s).abs() < 1e-8);
            assert_eq!(
                (a.op, a.object, a.offset, a.length),
                (b.op, b.object, b.offset, b.length)
            );
        }
        assert_eq!(parse_trace("0.1 read 1 0\n").unwrap_err().0, 1);
        assert_eq!(parse_trace("# c\n\n0.1 copy 1 0 5\n").unwrap_err().0, 3);
        assert!(parse_trace("-1 read 1 0 5").is_err());
    }

    #[test]
    fn generators_are_deterministic_and_follow_their_mix() {
        let a = generate(&AFS, 50_000, 42);
        let b = generate(&AFS, 50_000, 42);
        assert_eq!(a, b);
        assert_ne!(a, generate(&AFS, 50_000, 43));
        let reads = a.iter().filter(|r| r.op == FsOp::Read).count() as f64;
        let writes = a.iter().filter(|r| r.op == FsOp::Write).count() as f64;
        assert!((reads / writes - 4.8).abs() < 0.4, "{}", reads / writes);
        assert!(a.iter().all(|r| r.length <= 65536));
        assert!(a.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    }
}
