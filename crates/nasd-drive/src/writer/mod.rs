//! The write path: every mutation of the store is a [`Job`] run by one writer thread inside a
//! redb write transaction ([`Tx`]). Jobs validate before they change anything and return
//! [`JobError::Refused`] if they cannot proceed; a failure after a change began aborts the
//! whole transaction. See `store.rs` for the durability argument.
//!
//! # Layout
//! - this file: jobs, the writer thread, group commit and its fallback to one job at a time;
//! - `tx`: a transaction: allocation, records, shared-block accounting, object and partition
//!   operations;
//! - `write`: writing data and the integrity metadata it leaves;
//! - `tree_nodes`: upkeep of a `tree` object's stored nodes.

use crate::records::ObjectRecord;
use crate::store::Store;
use crate::DriveError;
use nasd_crypto::integrity::pieces::PieceHash;
use nasd_crypto::{Cost, Key};
use nasd_proto::{AttrMask, Attributes, ObjectId, PartitionId, Protection, Region, Scheme};
use std::sync::mpsc;
use std::sync::Arc;

pub use nasd_proto::OBJECT_BYTES_MAX;

mod tree_nodes;
mod tx;
mod write;

use tx::Tx;

/// A mutation of the store.
pub enum Job {
    CreatePartition {
        p: PartitionId,
        quota_bytes: u64,
        scheme: Scheme,
    },
    RemovePartition {
        p: PartitionId,
        force: bool,
    },
    ResizePartition {
        p: PartitionId,
        quota_bytes: u64,
    },
    SetPartitionKey {
        p: PartitionId,
        key: Key,
    },
    SetWorkingKey {
        p: PartitionId,
        key: Key,
    },
    SetMinProtection {
        p: Option<PartitionId>,
        protection: Protection,
    },
    SetDriveKey {
        key: Key,
    },
    Create {
        p: PartitionId,
        scheme: Option<Scheme>,
        mask: AttrMask,
        attrs: Box<Attributes>,
    },
    Remove {
        p: PartitionId,
        o: ObjectId,
    },
    SetAttr {
        p: PartitionId,
        o: ObjectId,
        mask: AttrMask,
        attrs: Box<Attributes>,
    },
    Write {
        p: PartitionId,
        o: ObjectId,
        regions: Vec<Region>,
        /// The buffer holding the data, from byte `data_at` on (the request body as received,
        /// so the data is not copied on its way to the writer).
        data: Vec<u8>,
        data_at: usize,
        /// Scheme whose write form `pieces` are in; reused as metadata when it is the object's.
        form: Scheme,
        pieces: Vec<Vec<PieceHash>>,
        write_back: bool,
    },
    FastCopy {
        p: PartitionId,
        o: ObjectId,
    },
    /// Makes every earlier write durable (seed 002 Table 1 `flush`, Table 2 `flushpartition`).
    Flush,
}

impl Job {
    fn data_bytes(&self) -> usize {
        match self {
            Job::Write { data, data_at, .. } => data.len() - data_at,
            _ => 0,
        }
    }
    fn write_back(&self) -> bool {
        matches!(
            self,
            Job::Write {
                write_back: true,
                ..
            }
        )
    }
}

/// What a job returns.
#[derive(Debug)]
pub enum JobOut {
    Done,
    Object(ObjectId, ObjectRecord),
    Attrs(ObjectRecord),
    Written {
        bytes: u64,
        scheme: Scheme,
        logical_size: u64,
        cost: Cost,
    },
}

pub enum JobError {
    /// Nothing was changed; the rest of the batch can go on.
    Refused(DriveError),
    /// Something may have been changed; the transaction must be aborted.
    Abort(DriveError),
}

impl From<std::io::Error> for JobError {
    fn from(e: std::io::Error) -> Self {
        JobError::Abort(DriveError::Io(e))
    }
}

impl From<DriveError> for JobError {
    fn from(e: DriveError) -> Self {
        JobError::Abort(e)
    }
}

type JR<T> = Result<T, JobError>;

fn refuse<T>(e: DriveError) -> JR<T> {
    Err(JobError::Refused(e))
}

/// Where a job's outcome goes: an async waiter or a blocked thread.
type Reply = Box<dyn FnOnce(Result<JobOut, DriveError>) + Send>;

/// Handle to the writer thread; dropping it stops the thread after the queued jobs and waits
/// for it, so the store is closed when the handle is gone.
pub struct Writer {
    tx: Option<mpsc::SyncSender<(Job, Reply)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Jobs that may wait for the writer at once before senders block.
pub const WRITER_QUEUE_JOBS_MAX: usize = 1024;

impl Writer {
    pub fn start(store: Arc<Store>) -> Writer {
        let (tx, rx) = mpsc::sync_channel::<(Job, Reply)>(WRITER_QUEUE_JOBS_MAX);
        let thread = std::thread::Builder::new()
            .name("nasd-writer".into())
            .spawn(move || writer_loop(store, rx))
            .expect("spawn writer thread");
        Writer {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    /// Whether the writer thread still runs (it ends only at shutdown, or by a panic).
    pub fn running(&self) -> bool {
        self.tx.is_some() && self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    fn sender(&self) -> Result<mpsc::SyncSender<(Job, Reply)>, DriveError> {
        self.tx.clone().ok_or(DriveError::ShuttingDown)
    }

    /// Runs a job on the writer thread and waits for its commit.
    pub async fn run(&self, job: Job) -> Result<JobOut, DriveError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sender = self.sender()?;
        let reply: Reply = Box::new(move |r| {
            let _ = tx.send(r);
        });
        // The queue is bounded: a full queue blocks a blocking-pool thread, not the runtime.
        tokio::task::spawn_blocking(move || sender.send((job, reply)))
            .await
            .map_err(|_| DriveError::ShuttingDown)?
            .map_err(|_| DriveError::ShuttingDown)?;
        rx.await.map_err(|_| DriveError::ShuttingDown)?
    }

    /// Runs a job and blocks this thread until it commits (for blocking callers).
    pub fn run_blocking(&self, job: Job) -> Result<JobOut, DriveError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let reply: Reply = Box::new(move |r| {
            let _ = tx.send(r);
        });
        self.sender()?
            .send((job, reply))
            .map_err(|_| DriveError::ShuttingDown)?;
        rx.recv().map_err(|_| DriveError::ShuttingDown)?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs one job in its own transaction on the calling thread (tools, `init`, tests).
pub fn run_now(store: &Store, job: Job) -> Result<JobOut, DriveError> {
    run_batch(store, &[&job]).and_then(|mut v| v.pop().expect("one job, one outcome"))
}

fn writer_loop(store: Arc<Store>, rx: mpsc::Receiver<(Job, Reply)>) {
    while let Ok(first) = rx.recv() {
        let mut bytes = first.0.data_bytes();
        let mut batch = vec![first];
        while batch.len() < crate::store::GROUP_COMMIT_JOBS_MAX
            && bytes < crate::store::GROUP_COMMIT_BYTES_MAX
        {
            match rx.try_recv() {
                Ok(j) => {
                    bytes += j.0.data_bytes();
                    batch.push(j);
                }
                Err(_) => break,
            }
        }
        let cpu0 = crate::thread_cpu_ns();
        let jobs: Vec<&Job> = batch.iter().map(|(j, _)| j).collect();
        let result = run_batch(&store, &jobs);
        let spent = |cpu0: u64| {
            let ns = crate::thread_cpu_ns().saturating_sub(cpu0);
            store
                .writer_cpu_ns
                .fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
        };
        spent(cpu0);
        match result {
            Ok(outs) => {
                for ((_, reply), out) in batch.into_iter().zip(outs) {
                    reply(out);
                }
            }
            Err(e) if batch.len() == 1 => {
                (batch.pop().unwrap().1)(Err(e));
            }
            Err(_) => {
                for (job, reply) in batch {
                    let cpu0 = crate::thread_cpu_ns();
                    let out = run_batch(&store, &[&job]).and_then(|mut v| v.pop().unwrap());
                    spent(cpu0);
                    reply(out);
                }
            }
        }
    }
}

/// Runs jobs in one transaction. `Err` means the transaction was aborted and nothing of it
/// happened; `Ok` holds each job's own outcome (refused jobs changed nothing).
fn run_batch(store: &Store, jobs: &[&Job]) -> Result<Vec<Result<JobOut, DriveError>>, DriveError> {
    let mut tx = Tx::begin(store)?;
    let mut outs = Vec::with_capacity(jobs.len());
    for job in jobs {
        match tx.run(job) {
            Ok(o) => outs.push(Ok(o)),
            Err(JobError::Refused(e)) => outs.push(Err(e)),
            Err(JobError::Abort(e)) => {
                tx.abort();
                return Err(e);
            }
        }
    }
    let durable = !jobs.iter().all(|j| j.write_back());
    match tx.commit(durable) {
        Ok(()) => Ok(outs),
        Err(e) => Err(e),
    }
}
