//! An in-memory [`FileIo`]: the stand-in a layer above is tested against, alone, with faults
//! injected behind the seam — a component that is unreachable, or whose bytes fail
//! verification, exactly as a drive's would — and a capability region, outside which reads
//! and writes are refused as a drive refuses them (seed 002 §2.4 check 7).

use crate::layer::{FileIo, IoError, IoFuture, ReadOut};
use crate::ClientError;
use std::sync::Mutex;

/// What an injected fault looks like to the layer above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Every request fails as if the drive were down.
    Unreachable,
    /// Reads fail verification (as a reply whose Merkle proof does not lead to the root);
    /// writes succeed.
    Corrupt,
    /// Reads that touch `[offset, offset + len)` fail verification; the rest read well.
    CorruptAt(u64, u64),
    /// Reads answer correctly, after this many milliseconds (a loaded or distant drive).
    SlowMs(u64),
}

/// One component's content in memory, with a fault switch.
pub struct MemIo {
    pub index: usize,
    bytes: Mutex<Vec<u8>>,
    fault: Mutex<Fault>,
    /// Requests must end at or before this object offset (the capability's region).
    region_end: Mutex<u64>,
    /// Requests refused for ending past it.
    refused: std::sync::atomic::AtomicU64,
}

impl MemIo {
    pub fn new(index: usize) -> MemIo {
        MemIo {
            index,
            bytes: Mutex::new(vec![]),
            fault: Mutex::new(Fault::None),
            region_end: Mutex::new(u64::MAX),
            refused: Default::default(),
        }
    }

    /// How many requests ended past the region (a layer that reads around refusals would
    /// otherwise hide them).
    pub fn refusals(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Refuses every later read or write that does not end by `end`, as a drive refuses a
    /// request outside its capability's region `[0, end)`.
    pub fn set_region_end(&self, end: u64) {
        *self.region_end.lock().expect("memio lock") = end;
    }

    fn check_region(&self, op: &'static str, offset: u64, len: u64) -> Result<(), IoError> {
        let end = *self.region_end.lock().expect("memio lock");
        if offset.checked_add(len).is_some_and(|e| e <= end) {
            return Ok(());
        }
        self.refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(IoError::Drive {
            component: self.index,
            addr: format!("mem:{}", self.index),
            error: ClientError::Refused {
                op,
                status: nasd_proto::Status::RegionOutsideCapability,
                detail: format!("region {offset}+{len} outside capability region 0+{end}"),
                authenticated: true,
            },
        })
    }

    pub fn set_fault(&self, f: Fault) {
        *self.fault.lock().expect("memio lock") = f;
    }

    /// The content as it is stored.
    pub fn contents(&self) -> Vec<u8> {
        self.bytes.lock().expect("memio lock").clone()
    }

    fn check(&self, reading: Option<(u64, u64)>) -> Result<(), IoError> {
        let error = match *self.fault.lock().expect("memio lock") {
            Fault::None | Fault::SlowMs(_) => return Ok(()),
            Fault::Corrupt | Fault::CorruptAt(..) if reading.is_none() => return Ok(()),
            Fault::CorruptAt(o, l) => {
                let (ro, rl) = reading.expect("reads only");
                if ro >= o + l || o >= ro + rl {
                    return Ok(());
                }
                ClientError::Integrity {
                    op: "read",
                    what: "injected: a damaged range".into(),
                }
            }
            Fault::Unreachable => ClientError::ConnectionLost("injected: drive down".into()),
            Fault::Corrupt => ClientError::Integrity {
                op: "read",
                what: "injected: Merkle proof does not lead to the authenticated root".into(),
            },
        };
        Err(IoError::Drive {
            component: self.index,
            addr: format!("mem:{}", self.index),
            error,
        })
    }
}

impl FileIo for MemIo {
    fn read(&self, offset: u64, len: u64) -> IoFuture<'_, ReadOut> {
        Box::pin(async move {
            self.check(Some((offset, len)))?;
            self.check_region("read", offset, len)?;
            let slow = match *self.fault.lock().expect("memio lock") {
                Fault::SlowMs(ms) => ms,
                _ => 0,
            };
            // The bytes are read at once and the reply is slow (in flight): a write meanwhile
            // does not show in it.
            let out = {
                let b = self.bytes.lock().expect("memio lock");
                let size = b.len() as u64;
                let s = offset.min(size) as usize;
                let e = offset.saturating_add(len).min(size) as usize;
                ReadOut {
                    data: b[s..e].to_vec(),
                    size,
                }
            };
            if slow > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(slow)).await;
            }
            Ok(out)
        })
    }

    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> IoFuture<'a, ()> {
        Box::pin(async move {
            self.check(None)?;
            self.check_region("write", offset, data.len() as u64)?;
            let mut b = self.bytes.lock().expect("memio lock");
            let end = offset as usize + data.len();
            if b.len() < end {
                b.resize(end, 0);
            }
            b[offset as usize..end].copy_from_slice(data);
            Ok(())
        })
    }

    fn size(&self) -> IoFuture<'_, u64> {
        Box::pin(async move {
            self.check(Some((0, 0)))?;
            Ok(self.bytes.lock().expect("memio lock").len() as u64)
        })
    }

    fn set_size(&self, size: u64) -> IoFuture<'_, ()> {
        Box::pin(async move {
            self.check(None)?;
            self.bytes
                .lock()
                .expect("memio lock")
                .resize(size as usize, 0);
            Ok(())
        })
    }
}
