//! Pipelined drive connections shared by everything a [`crate::files::Client`] does: up to
//! [`CONNS_PER_DRIVE`] per drive address, handed out round robin, each carrying many requests
//! at once. A connection that failed is dropped from the pool and the next use makes another.
//! A drive that could not be reached, or did not answer in time, is remembered as down for
//! [`DOWN_FOR_MS`], so a layout with redundancy reads around it at once instead of waiting on
//! it again.

use crate::{ClientError, DriveConn};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Connections the pool keeps to each drive.
pub const CONNS_PER_DRIVE: usize = 4;
/// How long a drive that failed to answer is read around.
pub const DOWN_FOR_MS: u64 = 5_000;

#[derive(Default)]
pub struct ConnPool {
    conns: Mutex<HashMap<String, Vec<Arc<DriveConn>>>>,
    next: AtomicUsize,
    /// Drives found down, and until when (Unix ms) they are read around.
    down: Mutex<HashMap<String, u64>>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl ConnPool {
    pub fn new() -> ConnPool {
        ConnPool::default()
    }

    /// A pooled connection to the drive at `addr`.
    pub async fn get(&self, addr: &str) -> Result<Arc<DriveConn>, ClientError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        {
            let pool = self.conns.lock().expect("pool lock");
            if let Some(v) = pool.get(addr) {
                if v.len() >= CONNS_PER_DRIVE {
                    return Ok(v[i % v.len()].clone());
                }
            }
        }
        let c = Arc::new(DriveConn::connect(addr).await?);
        let mut pool = self.conns.lock().expect("pool lock");
        let v = pool.entry(addr.to_string()).or_default();
        if v.len() < CONNS_PER_DRIVE {
            v.push(c.clone());
        }
        Ok(c)
    }

    /// Remembers that the drive at `addr` did not answer.
    pub fn mark_down(&self, addr: &str) {
        let mut d = self.down.lock().expect("pool lock");
        if d.len() > 4096 {
            let now = now_ms();
            d.retain(|_, until| *until > now);
        }
        d.insert(addr.to_string(), now_ms() + DOWN_FOR_MS);
    }

    /// Whether the drive at `addr` failed to answer within the last [`DOWN_FOR_MS`].
    pub fn is_down(&self, addr: &str) -> bool {
        let d = self.down.lock().expect("pool lock");
        d.get(addr).is_some_and(|until| *until > now_ms())
    }

    /// Forgets every connection to the drive at `addr` and that it was down: it restarted,
    /// so the connections kept are dead, and the next use connects afresh.
    pub fn forget(&self, addr: &str) {
        self.conns.lock().expect("pool lock").remove(addr);
        self.down.lock().expect("pool lock").remove(addr);
    }

    /// Forgets a connection that failed.
    pub fn drop_conn(&self, addr: &str, c: &Arc<DriveConn>) {
        if let Some(v) = self.conns.lock().expect("pool lock").get_mut(addr) {
            v.retain(|x| !Arc::ptr_eq(x, c));
        }
    }
}
