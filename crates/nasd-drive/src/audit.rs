//! The audit trail (seed 002 §2.2: "a NASD device may be required to record an audit trail of
//! operations performed"): one line per request, appended to `audit.log`, never rewritten.
//! A line is `time_us audit_id op partition object offset len status`.
//!
//! Requests append to an in-memory batch under a short lock; a thread writes the batch out
//! every [`AUDIT_FLUSH_MS`], so auditing costs a request neither a disk write nor a thread
//! wake-up. The batch is bounded: when [`AUDIT_BATCH_RECORDS_MAX`] records are waiting, further
//! records are dropped and counted (`dropped`) rather than blocking requests. Dropping the
//! [`Audit`] writes what is left and syncs the file.

use nasd_proto::Status;
use parking_lot::{Condvar, Mutex};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Records waiting to be written before new ones are dropped (and counted).
pub const AUDIT_BATCH_RECORDS_MAX: usize = 65_536;
/// How often the audit thread writes the waiting records.
pub const AUDIT_FLUSH_MS: u64 = 20;

pub struct AuditRecord {
    pub time_us: u64,
    pub audit_id: u64,
    pub op: &'static str,
    pub partition: u16,
    pub object: u64,
    pub offset: u64,
    pub len: u64,
    pub status: Status,
}

#[derive(Default)]
struct Shared {
    batch: Mutex<(Vec<AuditRecord>, bool)>,
    stop: Condvar,
}

pub struct Audit {
    shared: Option<Arc<Shared>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub dropped: AtomicU64,
}

fn line(r: &AuditRecord, out: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "{} {} {} {} {} {} {} {:?}",
        r.time_us, r.audit_id, r.op, r.partition, r.object, r.offset, r.len, r.status
    );
}

impl Audit {
    /// Appends to `path`; `None` keeps no trail (tests of the engine alone).
    pub fn open(path: Option<&Path>) -> std::io::Result<Audit> {
        let Some(path) = path else {
            return Ok(Audit {
                shared: None,
                thread: None,
                dropped: AtomicU64::new(0),
            });
        };
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(nasd_private::PRIVATE_FILE_MODE)
            .open(path)?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("nasd-audit".into())
            .spawn(move || {
                let mut text = String::new();
                loop {
                    let (records, stopping) = {
                        let mut g = s.batch.lock();
                        if !g.1 {
                            s.stop
                                .wait_for(&mut g, Duration::from_millis(AUDIT_FLUSH_MS));
                        }
                        (std::mem::take(&mut g.0), g.1)
                    };
                    text.clear();
                    for r in &records {
                        line(r, &mut text);
                    }
                    if !text.is_empty()
                        && f.write_all(text.as_bytes())
                            .and_then(|_| f.flush())
                            .is_err()
                    {
                        tracing::error!("audit log write failed");
                    }
                    if stopping {
                        let _ = f.sync_data();
                        return;
                    }
                }
            })?;
        Ok(Audit {
            shared: Some(shared),
            thread: Some(thread),
            dropped: AtomicU64::new(0),
        })
    }

    pub fn record(&self, r: AuditRecord) {
        if let Some(s) = &self.shared {
            let mut g = s.batch.lock();
            if g.0.len() >= AUDIT_BATCH_RECORDS_MAX {
                drop(g);
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            g.0.push(r);
        }
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        if let Some(s) = &self.shared {
            s.batch.lock().1 = true;
            s.stop.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
