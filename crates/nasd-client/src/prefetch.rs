//! The client side of drive extensions (seed 002 §2.2, §3.4) and of the first one, informed
//! prefetching (§4.6).
//!
//! Extensions are discovered before they are used: [`DriveConn::drive_control`] reads the
//! Drive Control object (seed 002 Table 4), whose `DriveInfo` ends with the drive's extension
//! table, and [`HintStream::open`] refuses a drive that does not list `prefetch` at the version
//! this client speaks. Extension requests carry the caller's capability like any other
//! ("following the model of SCSI pass-through, ... capabilities ... delivered to a NASD drive
//! along with additional arguments", §2.2); their arguments are MAC-covered request args.
//!
//! A [`HintStream`] hints an object's future reads in order, in batches of at most
//! `HINT_REGIONS_MAX`, and reports consumption every [`CONSUME_EVERY_READS`] reads (the
//! seed's client "periodically notifies the drive of the reads it has issued"). Reads stay
//! ordinary `read` requests, verified the same way whether the drive served them from its
//! cache or not.

use crate::auth::Auth;
use crate::conn::DriveConn;
use crate::object::Target;
use crate::ClientError;
use nasd_proto::ext::{
    supports, StreamCounters, EXT_PREFETCH, EXT_PREFETCH_VERSION, HINT_REGIONS_MAX,
};
use nasd_proto::{DriveInfo, ObjectId, Op, OpCode, Region, ReplyBody};

/// A consume notification goes out after this many consumed reads (and on [`HintStream::sync`]).
pub const CONSUME_EVERY_READS: u64 = 16;
/// Bytes read of the Drive Control object: its `DriveInfo` with every partition and extension
/// the limits allow fits.
const DRIVE_CONTROL_BYTES_MAX: u64 = 256 << 10;

fn unexpected(op: OpCode) -> ClientError {
    ClientError::integrity(op, "reply body does not match the operation")
}

impl DriveConn {
    /// Reads and decodes the Drive Control object (seed 002 Table 4) in `partition` under
    /// `auth` (a capability for object 1 with read rights, or a key of the hierarchy).
    pub async fn drive_control(
        &self,
        auth: &Auth,
        partition: nasd_proto::PartitionId,
    ) -> Result<DriveInfo, ClientError> {
        let t = Target {
            partition,
            object: ObjectId::DRIVE_CONTROL,
            protection: nasd_proto::Protection::INTEGRITY_DATA,
        };
        let r = self
            .read(auth, t, vec![Region::new(0, DRIVE_CONTROL_BYTES_MAX)])
            .await?;
        DriveInfo::decode(&r.data).map_err(|e| ClientError::malformed(OpCode::Read, e))
    }

    /// Extension `prefetch`: hints the reads the client will make of the target object, in
    /// order (at most `HINT_REGIONS_MAX`); `replace` drops the stream's earlier hints. Returns
    /// the index of the first region and the next index.
    pub async fn hint(
        &self,
        auth: &Auth,
        t: Target,
        replace: bool,
        regions: Vec<Region>,
    ) -> Result<(u64, u64), ClientError> {
        if regions.len() > HINT_REGIONS_MAX {
            return Err(ClientError::Usage(format!(
                "a hint holds at most {HINT_REGIONS_MAX} regions"
            )));
        }
        let r = self
            .call(auth, t, &Op::Hint { replace, regions }, &[])
            .await?;
        match r.body {
            ReplyBody::Hinted {
                first_index,
                next_index,
            } if next_index >= first_index => Ok((first_index, next_index)),
            _ => Err(unexpected(OpCode::Hint)),
        }
    }

    /// Extension `prefetch`: every hinted read below index `consumed` is done. Returns the
    /// counters of the caller's stream.
    pub async fn consume(
        &self,
        auth: &Auth,
        t: Target,
        consumed: u64,
    ) -> Result<StreamCounters, ClientError> {
        let r = self.call(auth, t, &Op::Consume { consumed }, &[]).await?;
        match r.body {
            ReplyBody::Consumed(c) => Ok(c),
            _ => Err(unexpected(OpCode::Consume)),
        }
    }
}

/// One object's hinted reads, as the client progresses through them.
pub struct HintStream<'a> {
    conn: &'a DriveConn,
    auth: &'a Auth,
    target: Target,
    /// Index of the next hinted read the client will consume.
    consumed: u64,
    /// Last index reported to the drive.
    reported: u64,
    /// Index the drive will give the next hinted region.
    next: u64,
    counters: StreamCounters,
}

impl<'a> HintStream<'a> {
    /// A stream over the target object, after checking in the Drive Control object (read
    /// under `control`) that the drive serves `prefetch` at this client's version.
    pub async fn open(
        conn: &'a DriveConn,
        auth: &'a Auth,
        target: Target,
        control: &Auth,
    ) -> Result<HintStream<'a>, ClientError> {
        let info = conn.drive_control(control, target.partition).await?;
        let ops = [OpCode::Hint as u8, OpCode::Consume as u8];
        if !supports(&info.extensions, EXT_PREFETCH, EXT_PREFETCH_VERSION, &ops) {
            return Err(ClientError::Usage(format!(
                "the drive at {} does not serve the {EXT_PREFETCH} extension v{EXT_PREFETCH_VERSION} \
                 (its Drive Control object lists {:?})",
                conn.addr(),
                info.extensions
                    .iter()
                    .map(|e| format!("{} v{} op {}", e.name, e.version, e.opcode))
                    .collect::<Vec<_>>()
            )));
        }
        Ok(HintStream {
            conn,
            auth,
            target,
            consumed: 0,
            reported: 0,
            next: 0,
            counters: StreamCounters::default(),
        })
    }

    /// Replaces the stream's hints with `regions`, the reads to come in order.
    pub async fn replace(&mut self, regions: &[Region]) -> Result<(), ClientError> {
        self.send(true, regions).await
    }

    /// Adds `regions` after the reads already hinted.
    pub async fn extend(&mut self, regions: &[Region]) -> Result<(), ClientError> {
        self.send(false, regions).await
    }

    async fn send(&mut self, mut replace: bool, regions: &[Region]) -> Result<(), ClientError> {
        if regions.is_empty() && replace {
            let (first, next) = self.conn.hint(self.auth, self.target, true, vec![]).await?;
            self.restart(first, next);
        }
        for batch in regions.chunks(HINT_REGIONS_MAX) {
            let (first, next) = self
                .conn
                .hint(self.auth, self.target, replace, batch.to_vec())
                .await?;
            if replace {
                self.restart(first, next);
            } else {
                self.next = next;
            }
            replace = false;
        }
        Ok(())
    }

    fn restart(&mut self, first: u64, next: u64) {
        self.consumed = first;
        self.reported = first;
        self.next = next;
    }

    /// The client has made `reads` more of the hinted reads; tells the drive every
    /// [`CONSUME_EVERY_READS`].
    pub async fn consumed(&mut self, reads: u64) -> Result<(), ClientError> {
        self.consumed = (self.consumed + reads).min(self.next);
        if self.consumed - self.reported >= CONSUME_EVERY_READS {
            self.sync().await?;
        }
        Ok(())
    }

    /// Tells the drive how far the client has got now.
    pub async fn sync(&mut self) -> Result<StreamCounters, ClientError> {
        self.counters = self
            .conn
            .consume(self.auth, self.target, self.consumed)
            .await?;
        self.reported = self.consumed;
        Ok(self.counters)
    }

    /// The stream's counters as of the last report.
    pub fn counters(&self) -> StreamCounters {
        self.counters
    }
}

/// The file layer's pass-through (seed 002 §3.4: "the filesystem code on the client resolves the
/// names and offsets to NASD drives, partitions, objects, and offsets, and then forwards the
/// specified RPC to the drives"), for files of one object, where a file offset is the object
/// offset. A file client holds capabilities only for its files, not for the Drive Control
/// object, so here a drive without the extension is recognized by its authenticated
/// `UnknownOp` answer rather than by its listing.
impl crate::files::Client {
    /// Hints reads of `path` (file offsets, in the order they will be made) to the drive that
    /// holds it, with the file's read capability; returns the stream's first and next index.
    pub async fn hint_file(
        &self,
        path: &str,
        replace: bool,
        regions: Vec<Region>,
    ) -> Result<(u64, u64), crate::files::FsError> {
        let (conn, auth, t) = self.single_object(path).await?;
        conn.hint(&auth, t, replace, regions)
            .await
            .map_err(|e| drive_error(path, conn.addr(), e))
    }

    /// Tells the drive that holds `path` that every hinted read below `consumed` is done.
    pub async fn consume_file(
        &self,
        path: &str,
        consumed: u64,
    ) -> Result<StreamCounters, crate::files::FsError> {
        let (conn, auth, t) = self.single_object(path).await?;
        conn.consume(&auth, t, consumed)
            .await
            .map_err(|e| drive_error(path, conn.addr(), e))
    }

    async fn single_object(
        &self,
        path: &str,
    ) -> Result<(std::sync::Arc<DriveConn>, Auth, Target), crate::files::FsError> {
        let o = self.open(path, false).await?;
        if o.layout.components.len() != 1 {
            return Err(crate::files::FsError::Layout {
                path: path.into(),
                detail: format!(
                    "hints are passed through for one-object files only; this file is laid out \
                     as {}",
                    o.layout.geometry
                ),
            });
        }
        let (addr, t, auth) = o.component(0).expect("one component");
        let conn = self
            .pool()
            .get(addr)
            .await
            .map_err(|e| drive_error(path, addr, e))?;
        Ok((conn, auth, t))
    }
}

fn drive_error(path: &str, drive: &str, error: ClientError) -> crate::files::FsError {
    crate::files::FsError::Drive {
        path: path.into(),
        drive: drive.into(),
        error,
    }
}
