//! The audit trail (seed 002 §2.2: "a NASD device may be required to record an audit trail of
//! operations performed"): one line per request, appended to `audit.log`, never rewritten.
//! A line is `time_us audit_id op partition object offset len status`. Lines go through a
//! bounded channel to a thread that appends and flushes, so auditing never blocks a request
//! on disk; if the channel is full the line is counted as dropped, which `inquiry` could report.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// Audit records buffered before new ones are dropped (and counted).
pub const AUDIT_QUEUE_RECORDS_MAX: usize = 65_536;

pub struct AuditRecord {
    pub time_us: u64,
    pub audit_id: u64,
    pub op: &'static str,
    pub partition: u16,
    pub object: u64,
    pub offset: u64,
    pub len: u64,
    pub status: nasd_proto::Status,
}

pub struct Audit {
    tx: Option<mpsc::SyncSender<AuditRecord>>,
    pub dropped: AtomicU64,
}

impl Audit {
    /// Appends to `path`; `None` keeps no trail (tests of the engine alone).
    pub fn open(path: Option<&Path>) -> std::io::Result<Audit> {
        let Some(path) = path else {
            return Ok(Audit {
                tx: None,
                dropped: AtomicU64::new(0),
            });
        };
        let mut f = OpenOptions::new().create(true).append(true).open(path)?;
        let (tx, rx) = mpsc::sync_channel::<AuditRecord>(AUDIT_QUEUE_RECORDS_MAX);
        std::thread::Builder::new()
            .name("nasd-audit".into())
            .spawn(move || {
                let mut buf = String::new();
                while let Ok(r) = rx.recv() {
                    buf.clear();
                    let mut push = |r: AuditRecord| {
                        buf.push_str(&format!(
                            "{} {} {} {} {} {} {} {:?}\n",
                            r.time_us,
                            r.audit_id,
                            r.op,
                            r.partition,
                            r.object,
                            r.offset,
                            r.len,
                            r.status
                        ))
                    };
                    push(r);
                    while let Ok(r) = rx.try_recv() {
                        push(r);
                    }
                    if f.write_all(buf.as_bytes()).and_then(|_| f.flush()).is_err() {
                        tracing::error!("audit log write failed");
                    }
                }
                let _ = f.sync_data();
            })?;
        Ok(Audit {
            tx: Some(tx),
            dropped: AtomicU64::new(0),
        })
    }

    pub fn record(&self, r: AuditRecord) {
        if let Some(tx) = &self.tx {
            if tx.try_send(r).is_err() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
