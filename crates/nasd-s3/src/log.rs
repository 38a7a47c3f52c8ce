//! The access log (issue 22 §3): one JSON line per request once its answer is sent — the
//! time, request id, peer, user (`-` when none signed), operation, bucket, key, status,
//! bytes in and out, and duration. The file is opened by the caller, private (`nasd up`
//! makes it 0600 through `nasd-private`); lines are written by a thread of their own
//! through a queue of [`QUEUE_LINES_MAX`], so a slow disk never stalls a request: when the
//! queue is full, lines are dropped and counted, and the count is written once there is
//! room again.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

/// Lines waiting to be written, at most.
pub const QUEUE_LINES_MAX: usize = 65_536;

/// One request, as logged.
#[derive(Clone, Default, serde::Serialize)]
pub struct Entry {
    pub time: String,
    pub request_id: String,
    pub remote: String,
    pub user: String,
    pub method: String,
    pub op: String,
    pub bucket: String,
    pub key: String,
    pub status: u16,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration_ms: u64,
}

/// The access log's writer.
pub struct AccessLog {
    tx: SyncSender<String>,
    dropped: Arc<AtomicU64>,
}

impl AccessLog {
    /// Logs to `file` (opened for appending, private).
    pub fn new(mut file: std::fs::File) -> AccessLog {
        let (tx, rx) = sync_channel::<String>(QUEUE_LINES_MAX);
        let dropped = Arc::new(AtomicU64::new(0));
        let lost = dropped.clone();
        std::thread::Builder::new()
            .name("s3-access-log".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut out = first;
                    out.push('\n');
                    while let Ok(mut more) = rx.try_recv() {
                        more.push('\n');
                        out.push_str(&more);
                    }
                    let n = lost.swap(0, Ordering::Relaxed);
                    if n > 0 {
                        out.push_str(&format!("{{\"dropped_lines\":{n}}}\n"));
                    }
                    if let Err(e) = file.write_all(out.as_bytes()) {
                        tracing::warn!("writing the access log: {e}");
                    }
                }
            })
            .expect("spawning the access log's thread");
        AccessLog { tx, dropped }
    }

    /// Queues `e` (stamped with the time now).
    pub fn record(&self, e: &Entry) {
        let mut e = e.clone();
        e.time = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let line = serde_json::to_string(&e);
        let Ok(line) = line else {
            return;
        };
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}
