//! What the manager shows through `nasd manager run --metrics ADDR` (docs/metrics.md).
//!
//! - Per call, counted by the server as each reply leaves ([`ManagerMetrics::record`]):
//!   requests, bytes in and out, latency, errors by status, and the time the call held the
//!   store.
//! - The store: how long [`Manager::st`](crate::service::Manager) waited for its lock and
//!   held it, for every holder (calls, background tasks). A call's share is summed in a
//!   task-local while the call runs ([`with_store_time`]); store work a call moves to the
//!   blocking pool, and logins' own reads of the store, are in the totals only.
//! - Read when scraped ([`ManagerSource`]): leases, lock sessions, callbacks and their
//!   breaks, drives' health and room, the file counts `nasd status` shows (files, stale and
//!   degraded files, stale components), and the rebuild's and the background scrub's
//!   progress.
//!
//! Health: the store answers a trivial read (`get_meta`) within the metrics server's check
//! timeout.

use crate::service::Manager;
use crate::store::MetaStore;
use nasd_metrics::ops::{OpStats, Outcome};
use nasd_metrics::{Exposition, Histogram, Kind};
use nasd_proto::manager::{MgrReply, MgrStatus};
use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

macro_rules! call_table {
    ($($tag:literal $C:ident $name:literal => $R:ty;)*) => {
        /// Every call of the protocol: (tag, name), in the table's order.
        const CALLS: &[(u8, &str)] = &[$(($tag, $name),)*];
    };
}
nasd_proto::for_each_manager_call!(call_table);

tokio::task_local! {
    /// Nanoseconds the running call held the store so far.
    static CALL_STORE_NS: Cell<u64>;
}

/// Runs `f` (one call) and returns what it gave and how long it held the store.
pub async fn with_store_time<F: Future>(f: F) -> (F::Output, Duration) {
    CALL_STORE_NS
        .scope(Cell::new(0), async {
            let out = f.await;
            let ns = CALL_STORE_NS.with(Cell::get);
            (out, Duration::from_nanos(ns))
        })
        .await
}

/// The manager's counters; a [`Manager`] holds one.
pub struct ManagerMetrics {
    calls: OpStats,
    /// Call index by tag ([`OTHER`](nasd_metrics::ops::OTHER)'s for unknown tags).
    by_tag: [u16; 256],
    /// Per call index: the time it held the store.
    call_store: Box<[Histogram]>,
    store_wait: Histogram,
    store_hold: Histogram,
}

impl Default for ManagerMetrics {
    fn default() -> ManagerMetrics {
        let calls = OpStats::new(
            CALLS.iter().map(|c| c.1),
            MgrStatus::ALL.iter().map(|s| format!("{s:?}")),
        );
        let other = CALLS.len() as u16;
        let mut by_tag = [other; 256];
        for (i, (tag, _)) in CALLS.iter().enumerate() {
            by_tag[*tag as usize] = i as u16;
        }
        ManagerMetrics {
            calls,
            by_tag,
            call_store: (0..=CALLS.len()).map(|_| Histogram::default()).collect(),
            store_wait: Histogram::default(),
            store_hold: Histogram::default(),
        }
    }
}

/// What one answered request was, for [`ManagerMetrics::record`].
pub struct Answered<'a> {
    /// The call's tag; `None`: the request did not decode.
    pub tag: Option<u8>,
    pub reply: &'a MgrReply,
    pub bytes_in: usize,
    pub bytes_out: usize,
    pub elapsed: Duration,
    /// The time the call held the store ([`with_store_time`]).
    pub store: Duration,
}

impl ManagerMetrics {
    /// Counts one answered request.
    pub fn record(&self, a: Answered<'_>) {
        let call = a
            .tag
            .map_or(CALLS.len(), |t| self.by_tag[t as usize] as usize);
        let error = match a.reply {
            MgrReply::Error(r) => Some(
                MgrStatus::ALL
                    .iter()
                    .position(|s| *s == r.status)
                    .unwrap_or(MgrStatus::ALL.len()),
            ),
            _ => None,
        };
        self.calls.record(
            call,
            Outcome {
                error,
                bytes_in: a.bytes_in as u64,
                bytes_out: a.bytes_out as u64,
                elapsed: a.elapsed,
            },
        );
        if !a.store.is_zero() {
            self.call_store[call].observe(a.store);
        }
    }

    /// Locks the store, timing the wait and, when the guard drops, the hold.
    pub(crate) fn lock<'a>(&'a self, store: &'a Mutex<Box<dyn MetaStore>>) -> StoreGuard<'a> {
        let asked = Instant::now();
        let guard = store.lock().expect("store lock");
        let since = Instant::now();
        self.store_wait.observe(since - asked);
        StoreGuard {
            guard,
            since,
            metrics: self,
        }
    }

    /// Requests served of call `name` (tests).
    pub fn requests(&self, name: &str) -> u64 {
        self.calls.requests(name)
    }

    fn render(&self, e: &mut Exposition) {
        self.calls.render(e, "nasd_manager", "Manager calls");
        let name = "nasd_manager_call_store_seconds";
        let help = "Time a call held the metadata store, by call.";
        e.family(name, Kind::Histogram, help);
        let names = CALLS.iter().map(|c| c.1).chain([nasd_metrics::ops::OTHER]);
        for (h, call) in self.call_store.iter().zip(names) {
            let s = h.snapshot();
            if s.count() > 0 {
                e.histogram(name, &[("op", call)], &s);
            }
        }
        let name = "nasd_manager_store_wait_seconds";
        let help = "Time spent waiting for the metadata store's lock, every holder.";
        e.family(name, Kind::Histogram, help);
        e.histogram(name, &[], &self.store_wait.snapshot());
        let name = "nasd_manager_store_hold_seconds";
        let help = "Time the metadata store's lock was held (database work), every holder.";
        e.family(name, Kind::Histogram, help);
        e.histogram(name, &[], &self.store_hold.snapshot());
    }
}

/// The store, locked; dropping it records how long it was held.
pub struct StoreGuard<'a> {
    guard: MutexGuard<'a, Box<dyn MetaStore>>,
    since: Instant,
    metrics: &'a ManagerMetrics,
}

impl std::ops::Deref for StoreGuard<'_> {
    type Target = Box<dyn MetaStore>;
    fn deref(&self) -> &Box<dyn MetaStore> {
        &self.guard
    }
}

impl std::ops::DerefMut for StoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Box<dyn MetaStore> {
        &mut self.guard
    }
}

impl Drop for StoreGuard<'_> {
    fn drop(&mut self) {
        let held = self.since.elapsed();
        self.metrics.store_hold.observe(held);
        let ns = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
        let _ = CALL_STORE_NS.try_with(|c| c.set(c.get().saturating_add(ns)));
    }
}

/// The manager as a metrics source. A manager that stands by (another one leads its
/// database, [`crate::setup::run`]) has no [`Manager`] yet: it shows only
/// `nasd_manager_leading 0`, and its health check answers 503 "standing by", so that a
/// load balancer or an operator's check finds the one that serves.
#[derive(Default)]
pub struct ManagerSource(std::sync::OnceLock<Arc<Manager>>);

impl ManagerSource {
    /// The source of a manager that serves.
    pub fn of(m: Arc<Manager>) -> ManagerSource {
        let s = ManagerSource::default();
        s.leads(m);
        s
    }

    /// The manager took the lead and serves as `m`.
    pub fn leads(&self, m: Arc<Manager>) {
        let _ = self.0.set(m);
    }
}

impl nasd_metrics::Source for ManagerSource {
    fn render(&self, e: &mut Exposition) {
        e.single(
            "nasd_manager_leading",
            Kind::Gauge,
            "1 if this manager leads its database and serves, 0 while it stands by.",
            self.0.get().is_some(),
        );
        let Some(m) = self.0.get() else {
            return;
        };
        m.metrics.render(e);
        sessions(m, e);
        drives(m, e);
        if let Err(why) = files(m, e) {
            tracing::warn!("metrics: reading the file counts: {why}");
        }
        heal(m, e);
        e.single(
            "nasd_manager_healthy",
            Kind::Gauge,
            "1 if the metadata store answers (as /health), else 0.",
            m.health().is_ok(),
        );
    }

    fn health(&self) -> Result<(), String> {
        match self.0.get() {
            Some(m) => m.health(),
            None => Err("standing by: another manager leads the database".into()),
        }
    }
}

impl Manager {
    /// `Ok`, or why the manager cannot serve: its store fails a trivial read.
    pub fn health(&self) -> Result<(), String> {
        match self.st().get_meta("schema") {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("the metadata store fails a read: {e}")),
        }
    }
}

/// Leases, lock sessions and callbacks.
fn sessions(m: &Manager, e: &mut Exposition) {
    let now = crate::now_ms();
    let c = m.callbacks.counts();
    let gauges: [(&str, &str, usize); 5] = [
        (
            "nasd_manager_write_leases",
            "Write leases held now (one writer per file).",
            m.leases.live(now),
        ),
        (
            "nasd_manager_lock_sessions",
            "Sessions holding record locks or flocks under a lease.",
            m.locks.sessions(),
        ),
        (
            "nasd_manager_lock_ranges",
            "Record lock ranges held now, all files together.",
            m.locks.held(),
        ),
        (
            "nasd_manager_callbacks",
            "AFS callbacks held now (a session's promise of a break).",
            c.held,
        ),
        (
            "nasd_manager_callback_channels",
            "Sessions polling for callback breaks.",
            c.channels,
        ),
    ];
    e.gauges(gauges);
    e.single(
        "nasd_manager_callback_registrations_total",
        Kind::Counter,
        "Callbacks registered (a stat or open by a session with a channel).",
        c.registered,
    );
    e.single(
        "nasd_manager_callback_breaks_total",
        Kind::Counter,
        "Callback breaks queued for holders of a changed file.",
        c.breaks,
    );
}

/// Each registered drive: health, room.
fn drives(m: &Manager, e: &mut Exposition) {
    let drives = m.drives.snapshot();
    let ids: Vec<String> = drives
        .iter()
        .map(|d| format!("{:016x}", d.rec.drive.0))
        .collect();
    type Of = fn(&crate::drives::DriveView) -> u64;
    let per: [(&str, &str, Of); 3] = [
        (
            "nasd_manager_drive_up",
            "1 if the drive answered its last health check.",
            |d| u64::from(d.healthy),
        ),
        (
            "nasd_manager_drive_capacity_bytes",
            "Capacity the drive last reported.",
            |d| d.capacity_bytes,
        ),
        (
            "nasd_manager_drive_used_bytes",
            "Bytes in use the drive last reported.",
            |d| d.used_bytes,
        ),
    ];
    for (name, help, value) in per {
        e.family(name, Kind::Gauge, help);
        for (d, id) in drives.iter().zip(&ids) {
            e.sample(name, &[("drive", id), ("addr", &d.rec.addr)], value(d));
        }
    }
}

/// The file counts the store keeps (as `nasd status` shows them).
fn files(m: &Manager, e: &mut Exposition) -> Result<(), String> {
    let down: Vec<_> = m
        .drives
        .snapshot()
        .into_iter()
        .filter(|d| !d.healthy)
        .map(|d| d.rec.drive)
        .collect();
    let (c, degraded) = {
        let st = m.st();
        let c = st.counts().map_err(|e| e.to_string())?;
        let (degraded, _) = st.degraded(&down, 0).map_err(|e| e.to_string())?;
        (c, degraded)
    };
    let gauges: [(&str, &str, u64); 6] = [
        ("nasd_manager_files", "Files in the namespace.", c.files),
        (
            "nasd_manager_degraded_files",
            "Files with a stale component or one on a drive that is down.",
            degraded,
        ),
        (
            "nasd_manager_stale_files",
            "Files with at least one stale component (to be rebuilt).",
            c.stale_files,
        ),
        (
            "nasd_manager_stale_components",
            "Stale components of all files.",
            c.stale_components,
        ),
        (
            "nasd_manager_file_bytes",
            "Logical bytes of the files whose size the manager keeps.",
            c.bytes,
        ),
        (
            "nasd_manager_stale_bytes",
            "Logical bytes of the files with a stale component.",
            c.stale_bytes,
        ),
    ];
    e.gauges(gauges);
    let name = "nasd_manager_drive_stale_components";
    e.family(name, Kind::Gauge, "Stale components on each drive.");
    for d in &c.drives {
        e.sample(name, &[("drive", &format!("{:016x}", d.drive.0))], d.stale);
    }
    Ok(())
}

/// The rebuild's and the background scrub's progress.
fn heal(m: &Manager, e: &mut Exposition) {
    let (rebuild, scrub, healing) = m.heal.progress();
    e.single(
        "nasd_manager_stale_rebuild_running",
        Kind::Gauge,
        "1 while a pass rebuilding stale components runs.",
        healing,
    );
    let r = rebuild.unwrap_or_default();
    let gauges: [(&str, &str, u64); 6] = [
        (
            "nasd_manager_replace_files_done",
            "Files the last drive replacement rebuilt so far.",
            r.files_done,
        ),
        (
            "nasd_manager_replace_files_total",
            "Files the last drive replacement has to rebuild.",
            r.files_total,
        ),
        (
            "nasd_manager_replace_bytes_done",
            "Bytes the last drive replacement rebuilt so far.",
            r.bytes_done,
        ),
        (
            "nasd_manager_replace_bytes_total",
            "Bytes the last drive replacement has to rebuild.",
            r.bytes_total,
        ),
        (
            "nasd_manager_replace_failed_files",
            "Files the last drive replacement could not rebuild.",
            r.failed,
        ),
        (
            "nasd_manager_replace_finished",
            "1 once the last drive replacement finished (0 also when none ran).",
            u64::from(r.finished),
        ),
    ];
    e.gauges(gauges);
    let scrub_counts: [(&str, Kind, &str, u64); 6] = [
        (
            "nasd_manager_scrub_passes_total",
            Kind::Counter,
            "Completed background scrub passes over every file.",
            scrub.passes,
        ),
        (
            "nasd_manager_scrub_pass_files",
            Kind::Gauge,
            "Files checked in the current scrub pass.",
            scrub.files,
        ),
        (
            "nasd_manager_scrub_pass_bytes",
            Kind::Gauge,
            "Bytes checked in the current scrub pass.",
            scrub.bytes,
        ),
        (
            "nasd_manager_scrub_damaged_total",
            Kind::Counter,
            "Damaged shards the background scrub found since the manager started.",
            scrub.damaged,
        ),
        (
            "nasd_manager_scrub_repaired_total",
            Kind::Counter,
            "Shards the background scrub repaired or rebuilt since the manager started.",
            scrub.repaired,
        ),
        (
            "nasd_manager_scrub_last_pass_end_seconds",
            Kind::Gauge,
            "When the last scrub pass ended, seconds since the Unix epoch (0: none yet).",
            scrub.last_pass_ms / 1000,
        ),
    ];
    for (name, kind, help, v) in scrub_counts {
        e.single(name, kind, help, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Policy;
    use nasd_metrics::Source;

    fn manager() -> Arc<Manager> {
        let st = crate::sqlite::SqliteStore::in_memory().unwrap();
        Manager::new(Box::new(st), Policy::default()).unwrap()
    }

    fn scrape(m: &Arc<Manager>) -> String {
        let mut e = Exposition::new();
        ManagerSource::of(m.clone()).render(&mut e);
        e.finish()
    }

    #[tokio::test]
    async fn calls_are_counted_by_tag_with_their_store_time_and_errors_by_status() {
        let m = manager();
        let stat_tag = CALLS.iter().find(|c| c.1 == "stat").unwrap().0;
        // A call that holds the store: its time is the call's.
        let (reply, held) = with_store_time(async {
            let st = m.st();
            std::thread::sleep(Duration::from_millis(2));
            drop(st);
            MgrReply::error(MgrStatus::NoSuchPath, "/nope")
        })
        .await;
        assert!(held >= Duration::from_millis(2), "{held:?}");
        m.metrics.record(Answered {
            tag: Some(stat_tag),
            reply: &reply,
            bytes_in: 40,
            bytes_out: 60,
            elapsed: Duration::from_millis(3),
            store: held,
        });
        // A request that did not decode.
        m.metrics.record(Answered {
            tag: None,
            reply: &MgrReply::error(MgrStatus::Malformed, "x"),
            bytes_in: 5,
            bytes_out: 30,
            elapsed: Duration::from_micros(10),
            store: Duration::ZERO,
        });
        assert_eq!(m.metrics.requests("stat"), 1);
        let t = scrape(&m);
        assert!(
            t.contains("nasd_manager_requests_total{op=\"stat\"} 1\n"),
            "{t}"
        );
        assert!(t.contains("nasd_manager_errors_total{op=\"stat\",status=\"NoSuchPath\"} 1\n"));
        assert!(t.contains("nasd_manager_errors_total{op=\"other\",status=\"Malformed\"} 1\n"));
        assert!(t.contains("nasd_manager_request_bytes_total{op=\"stat\"} 40\n"));
        assert!(t.contains("nasd_manager_call_store_seconds_count{op=\"stat\"} 1\n"));
        assert!(!t.contains("nasd_manager_call_store_seconds_count{op=\"other\"}"));
        // Every hold of the store is in the totals, the scrape's own included.
        assert!(t.contains("# TYPE nasd_manager_store_hold_seconds histogram\n"));
        for g in [
            "nasd_manager_write_leases 0\n",
            "nasd_manager_callbacks 0\n",
            "nasd_manager_files ",
            "nasd_manager_degraded_files 0\n",
            "nasd_manager_stale_components 0\n",
            "nasd_manager_scrub_passes_total 0\n",
            "nasd_manager_healthy 1\n",
        ] {
            assert!(t.contains(g), "{g}");
        }
        assert_eq!(ManagerSource::of(m.clone()).health(), Ok(()));
        let standby = ManagerSource::default();
        assert!(standby.health().is_err());
        let mut e = Exposition::new();
        standby.render(&mut e);
        assert_eq!(e.finish(), "# HELP nasd_manager_leading 1 if this manager leads its database and serves, 0 while it stands by.\n# TYPE nasd_manager_leading gauge\nnasd_manager_leading 0\n");
    }

    #[test]
    fn every_tag_maps_to_its_call() {
        let m = ManagerMetrics::default();
        for (i, (tag, _)) in CALLS.iter().enumerate() {
            assert_eq!(m.by_tag[*tag as usize] as usize, i);
        }
        assert_eq!(m.by_tag[0] as usize, CALLS.len(), "tag 0 is no call");
    }
}
