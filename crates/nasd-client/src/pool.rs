//! Pipelined drive connections shared by everything a [`crate::files::Client`] does: up to
//! [`CONNS_PER_DRIVE`] per drive address, handed out round robin, each carrying many requests
//! at once. A connection that failed is dropped from the pool and the next use makes another.

use crate::{ClientError, DriveConn};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Connections the pool keeps to each drive.
pub const CONNS_PER_DRIVE: usize = 4;

#[derive(Default)]
pub struct ConnPool {
    conns: Mutex<HashMap<String, Vec<Arc<DriveConn>>>>,
    next: AtomicUsize,
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

    /// Forgets a connection that failed.
    pub fn drop_conn(&self, addr: &str, c: &Arc<DriveConn>) {
        if let Some(v) = self.conns.lock().expect("pool lock").get_mut(addr) {
            v.retain(|x| !Arc::ptr_eq(x, c));
        }
    }
}
