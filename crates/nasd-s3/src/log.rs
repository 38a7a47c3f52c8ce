//! The access log (issue 22 §3): one JSON line per request once its answer is sent — the
//! time, request id, peer, user (`-` when none signed), method, operation, bucket, key,
//! status, bytes in and out, and duration. The file is opened by the caller, private (`nasd
//! up` makes it 0600 through `nasd-private`). A request only queues its entry (at most
//! [`QUEUE_ENTRIES_MAX`]); a thread of its own formats and writes what queued every
//! [`FLUSH_MS`], so logging costs a request neither a system call nor a wake-up, and a slow
//! disk never stalls one: when the queue is full, entries are dropped and counted, and a
//! `{"dropped_entries": N}` line says how many.

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Entries waiting to be written, at most.
pub const QUEUE_ENTRIES_MAX: usize = 65_536;
/// How often queued entries are written.
pub const FLUSH_MS: u64 = 100;

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

#[derive(Default)]
struct Queue {
    entries: Vec<(time::OffsetDateTime, Entry)>,
    dropped: u64,
}

struct Inner {
    queue: Mutex<Queue>,
    file: Mutex<std::fs::File>,
}

impl Inner {
    /// Writes what queued.
    fn flush(&self) {
        let Queue { entries, dropped } = std::mem::take(&mut *self.queue.lock().expect("log lock"));
        let mut out = String::new();
        for (at, mut e) in entries {
            e.time = at
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default();
            if let Ok(line) = serde_json::to_string(&e) {
                out.push_str(&line);
                out.push('\n');
            }
        }
        if dropped > 0 {
            out.push_str(&format!("{{\"dropped_entries\":{dropped}}}\n"));
        }
        if !out.is_empty() {
            let mut f = self.file.lock().expect("log file lock");
            if let Err(e) = f.write_all(out.as_bytes()) {
                tracing::warn!("writing the access log: {e}");
            }
        }
    }
}

/// The access log's writer; dropping it writes what is queued.
pub struct AccessLog {
    inner: Arc<Inner>,
}

impl AccessLog {
    /// Logs to `file` (opened for appending, private).
    pub fn new(file: std::fs::File) -> AccessLog {
        let inner = Arc::new(Inner {
            queue: Mutex::new(Queue::default()),
            file: Mutex::new(file),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("s3-access-log".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(FLUSH_MS));
                match weak.upgrade() {
                    Some(i) => i.flush(),
                    None => return,
                }
            })
            .expect("spawning the access log's thread");
        AccessLog { inner }
    }

    /// Queues `e`, stamped with the time now.
    pub fn record(&self, e: Entry) {
        let now = time::OffsetDateTime::now_utc();
        let mut q = self.inner.queue.lock().expect("log lock");
        if q.entries.len() >= QUEUE_ENTRIES_MAX {
            q.dropped += 1;
        } else {
            q.entries.push((now, e));
        }
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_written_as_json_lines_when_the_log_drops() {
        let dir = std::env::temp_dir().join(format!("nasd-s3-log-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("access.log");
        let file = std::fs::File::create(&path).unwrap();
        let log = AccessLog::new(file);
        log.record(Entry {
            user: "alice".into(),
            op: "GetObject".into(),
            key: "a \"b\"\n".into(),
            status: 200,
            bytes_out: 7,
            ..Default::default()
        });
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(v["user"], "alice");
        assert_eq!(v["key"], "a \"b\"\n");
        assert_eq!(v["bytes_out"], 7);
        assert!(v["time"].as_str().unwrap().ends_with('Z'));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
