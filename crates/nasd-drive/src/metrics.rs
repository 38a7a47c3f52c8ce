//! What a drive shows through `nasd drive run --metrics ADDR` (docs/metrics.md): requests,
//! errors by status, bytes and latency per operation, counted by the server as each reply
//! leaves the handler; capacity, objects, the block cache and the handler's counters, read
//! when scraped; and health: the metadata database answers a read, the data file its size,
//! and the writer thread runs.

use crate::handler::{Drive, ReplyBytes};
use nasd_metrics::ops::{OpStats, Outcome};
use nasd_metrics::{Exposition, Kind};
use nasd_proto::{OpCode, ReplyHeader, Status};
use std::sync::Arc;
use std::time::Duration;

/// The drive's per-operation table: every op code, in [`OpCode::ALL`]'s order, and every
/// status (by its name in the protocol, `NoSuchObject`), in [`Status::ALL`]'s.
pub fn op_stats() -> OpStats {
    OpStats::new(
        OpCode::ALL.iter().map(|o| o.name()),
        Status::ALL.iter().map(|s| format!("{s:?}")),
    )
}

/// The index of `x` in `all`, else the one after the last (where [`OpStats`] keeps
/// [`nasd_metrics::ops::OTHER`]).
fn index_in<T: PartialEq>(all: &[T], x: Option<T>) -> usize {
    x.and_then(|x| all.iter().position(|a| *a == x))
        .unwrap_or(all.len())
}

impl Drive {
    /// Counts one request of operation `op` (`None`: unparseable) whose body was
    /// `bytes_in` long and whose reply `r` took `elapsed`.
    pub fn record(&self, op: Option<OpCode>, bytes_in: usize, r: &ReplyBytes, elapsed: Duration) {
        let error = match ReplyHeader::status_of(&r.head) {
            Some(Status::Ok) => None,
            st => Some(index_in(Status::ALL, st)),
        };
        self.op_stats().record(
            index_in(OpCode::ALL, op),
            Outcome {
                error,
                bytes_in: bytes_in as u64,
                bytes_out: (r.head.len() + r.data.len()) as u64,
                elapsed,
            },
        );
    }
}

/// The drive as a metrics source.
pub struct DriveSource(pub Arc<Drive>);

impl nasd_metrics::Source for DriveSource {
    fn render(&self, e: &mut Exposition) {
        let d = &self.0;
        d.op_stats().render(e, "nasd_drive", "Drive requests");
        capacity(d, e);
        let m = d.metrics();
        e.single(
            "nasd_drive_refused_total",
            Kind::Counter,
            "Requests refused by the checks of seed 002 2.4 or by their operation.",
            m.refused,
        );
        e.single(
            "nasd_drive_hashed_bytes_total",
            Kind::Counter,
            "Object data and attribute bytes the drive fed to a hash or MAC.",
            m.data_bytes_hashed,
        );
        let c = d.cache_stats();
        let cache: [(&str, Kind, &str, u64); 4] = [
            (
                "nasd_drive_cache_hits_total",
                Kind::Counter,
                "Block reads served from the block cache.",
                c.hits,
            ),
            (
                "nasd_drive_cache_misses_total",
                Kind::Counter,
                "Block reads that went to storage with the cache on.",
                c.misses,
            ),
            (
                "nasd_drive_cache_evicted_total",
                Kind::Counter,
                "Blocks evicted from the cache to make room.",
                c.evicted,
            ),
            (
                "nasd_drive_cache_bytes",
                Kind::Gauge,
                "Bytes the block cache holds.",
                c.bytes,
            ),
        ];
        for (name, kind, help, v) in cache {
            e.single(name, kind, help, v);
        }
        e.single(
            "nasd_drive_healthy",
            Kind::Gauge,
            "1 if the drive's store and writer answer (as /health), else 0.",
            d.health().is_ok(),
        );
    }

    fn health(&self) -> Result<(), String> {
        self.0.health()
    }
}

fn capacity(d: &Drive, e: &mut Exposition) {
    let info = d.drive_info();
    let free = info.capacity_bytes.saturating_sub(info.used_bytes);
    let whole: [(&str, &str, u64); 3] = [
        (
            "nasd_drive_capacity_bytes",
            "Bytes the drive may hold.",
            info.capacity_bytes,
        ),
        (
            "nasd_drive_used_bytes",
            "Bytes of blocks in use.",
            info.used_bytes,
        ),
        (
            "nasd_drive_free_bytes",
            "Bytes the drive can still take.",
            free,
        ),
    ];
    for (name, help, v) in whole {
        e.single(name, Kind::Gauge, help, v);
    }
    let parts: Vec<String> = info.partitions.iter().map(|p| p.id.0.to_string()).collect();
    e.family("nasd_drive_objects", Kind::Gauge, "Objects, by partition.");
    for (p, id) in info.partitions.iter().zip(&parts) {
        e.sample("nasd_drive_objects", &[("partition", id)], p.objects);
    }
    let help = "Bytes of blocks in use, by partition.";
    e.family("nasd_drive_partition_used_bytes", Kind::Gauge, help);
    for (p, id) in info.partitions.iter().zip(&parts) {
        e.sample(
            "nasd_drive_partition_used_bytes",
            &[("partition", id)],
            p.used_bytes,
        );
    }
}
