//! The operations of an authenticated request, one function each: reads on this thread
//! (through the store's snapshots), changes as jobs of the writer thread, the control objects
//! of seed 002 Table 4, and the `prefetch` extension. Each returns what the reply carries:
//! its body, its data, and the data digest material the reply MAC covers.

use super::{refuse, Authed, Drive, Principal, Refusal};
use crate::prefetch::{Prefetcher, StreamKey};
use crate::store::Material;
use crate::writer::{Job, JobOut};
use nasd_crypto::request::unwrap_key;
use nasd_crypto::{Cost, Key};
use nasd_proto::{
    ObjectId, Op, PartitionControl, PartitionId, ReadReply, Region, ReplyBody, RequestHeader,
    Scheme, Status,
};

/// A reply's body, its data, and the digest material its MAC covers.
pub(super) type Done = (ReplyBody, Vec<u8>, Material);

impl Drive {
    /// Runs an authenticated operation; returns the reply body, its data and the data digest
    /// material the reply MAC covers.
    pub(super) fn execute(
        &self,
        h: &RequestHeader,
        a: &mut Authed,
        body: Vec<u8>,
        data_at: usize,
        cost: &mut Cost,
    ) -> Result<Done, Refusal> {
        let (p, o) = (h.partition, h.object);
        if o.is_control() && !matches!(a.op, Op::Read { .. }) && a.op.code().is_object_op() {
            return refuse(
                Status::ReadOnlyObject,
                format!("object {o} is a read-only control object"),
            );
        }
        match &a.op {
            Op::Read { regions } if o.is_control() => self.read_control(h, regions),
            Op::Read { regions } => self.read(h, a, regions, cost),
            Op::Write { .. } => self.write(h, a, body, data_at, cost),
            Op::GetAttr => self.getattr(p, o),
            Op::Create {
                scheme,
                mask,
                attrs,
            } => self.job(Job::Create {
                p,
                scheme: *scheme,
                mask: *mask,
                attrs: attrs.clone(),
            }),
            Op::SetAttr { mask, attrs, .. } => self.job(Job::SetAttr {
                p,
                o,
                mask: *mask,
                attrs: attrs.clone(),
            }),
            Op::FastCopy => self.job(Job::FastCopy { p, o }),
            Op::Remove => self.job(Job::Remove { p, o }),
            Op::Flush { .. } | Op::FlushPartition => self.job(Job::Flush),
            Op::BlocksRequired { regions } => self.blocks_required(p, o, regions),
            Op::CreatePartition {
                quota_bytes,
                default_scheme,
            } => self.job(Job::CreatePartition {
                p,
                quota_bytes: *quota_bytes,
                scheme: *default_scheme,
            }),
            Op::RemovePartition { force } => self.job(Job::RemovePartition { p, force: *force }),
            Op::ResizePartition { quota_bytes } => self.job(Job::ResizePartition {
                p,
                quota_bytes: *quota_bytes,
            }),
            Op::SetPartitionKey { wrapped } => {
                let key = self.unwrapped(h, a, wrapped)?;
                self.job(Job::SetPartitionKey { p, key })
            }
            Op::SetWorkingKey { wrapped } => {
                let key = self.unwrapped(h, a, wrapped)?;
                self.job(Job::SetWorkingKey { p, key })
            }
            Op::SetDriveKey { wrapped } => {
                let key = self.unwrapped(h, a, wrapped)?;
                self.job(Job::SetDriveKey { key })
            }
            Op::SetMinProtection {
                drive_wide,
                protection,
            } => self.job(Job::SetMinProtection {
                p: (!drive_wide).then_some(p),
                protection: *protection,
            }),
            Op::Initialize { .. } => refuse(
                Status::InvalidArgument,
                "initialize over the network is disabled; run `nasd drive init` on the drive",
            ),
            Op::Inquiry => Ok(done(ReplyBody::Drive(Box::new(self.drive_info())))),
            Op::Hint { replace, regions } => self.hint(h, a, *replace, regions),
            Op::Consume { consumed } => self.consume(h, a, *consumed),
        }
    }

    /// A change run by the writer thread; the reply carries the object's (or its id's) new
    /// attributes when the job returns them.
    fn job(&self, job: Job) -> Result<Done, Refusal> {
        Ok(match self.writer.run_blocking(job)? {
            JobOut::Object(id, rec) => (
                ReplyBody::Object { object: id },
                rec.attrs.encode(),
                Material::Bytes(rec.attr_digest.to_vec()),
            ),
            JobOut::Attrs(rec) => (
                ReplyBody::Attrs,
                rec.attrs.encode(),
                Material::Bytes(rec.attr_digest.to_vec()),
            ),
            _ => done(ReplyBody::Empty),
        })
    }

    /// A read of a control object (seed 002 Table 4), cut to its regions.
    fn read_control(&self, h: &RequestHeader, regions: &[Region]) -> Result<Done, Refusal> {
        let bytes = self.control_object(h.partition, h.object)?;
        let mut data = vec![];
        let mut out = vec![];
        for r in regions {
            let s = r.offset.min(bytes.len() as u64);
            let e = r.end().unwrap_or(u64::MAX).min(bytes.len() as u64);
            data.extend_from_slice(&bytes[s as usize..e as usize]);
            out.push(Region::new(s, e - s));
        }
        let rr = ReadReply {
            logical_size: bytes.len() as u64,
            scheme: Scheme::Mac,
            regions: out,
            trailer: vec![],
        };
        let material = match h.protection.integrity_data() {
            true => Material::Data,
            false => Material::None,
        };
        Ok((ReplyBody::Read(rr), data, material))
    }

    /// A read of an object: no byte outside the capability's region leaves the drive.
    fn read(
        &self,
        h: &RequestHeader,
        a: &Authed,
        regions: &[Region],
        cost: &mut Cost,
    ) -> Result<Done, Refusal> {
        let limit = a.cap.map_or(Region::WHOLE, |c| c.region);
        let integrity = h.protection.integrity_data();
        let r = self
            .store
            .read(h.partition, h.object, regions, limit, integrity, cost)?;
        let rr = ReadReply {
            logical_size: r.logical_size,
            scheme: r.scheme,
            regions: r.regions,
            trailer: r.trailer,
        };
        Ok((ReplyBody::Read(rr), r.data, r.material))
    }

    /// A write, run by the writer thread. The data stays where it arrived: in the request
    /// body, or the decrypted copy.
    fn write(
        &self,
        h: &RequestHeader,
        a: &mut Authed,
        body: Vec<u8>,
        data_at: usize,
        cost: &mut Cost,
    ) -> Result<Done, Refusal> {
        let Op::Write {
            regions,
            form,
            write_back,
            ..
        } = &a.op
        else {
            unreachable!("execute runs writes only here");
        };
        let (data, data_at) = match a.plain.take() {
            Some(p) => (p, 0),
            None => (body, data_at),
        };
        let job = Job::Write {
            p: h.partition,
            o: h.object,
            regions: regions.clone(),
            data,
            data_at,
            form: *form,
            pieces: std::mem::take(&mut a.write_pieces),
            write_back: *write_back,
        };
        match self.writer.run_blocking(job)? {
            JobOut::Written {
                bytes,
                scheme,
                logical_size,
                cost: c,
            } => {
                cost.add_all(&c);
                Ok(done(ReplyBody::Written {
                    bytes,
                    scheme,
                    logical_size,
                }))
            }
            _ => Ok(done(ReplyBody::Empty)),
        }
    }

    fn getattr(&self, p: PartitionId, o: ObjectId) -> Result<Done, Refusal> {
        let rec = self.store.object(p, o)?;
        Ok((
            ReplyBody::Attrs,
            rec.attrs.encode(),
            Material::Bytes(rec.attr_digest.to_vec()),
        ))
    }

    fn blocks_required(
        &self,
        p: PartitionId,
        o: ObjectId,
        regions: &[Region],
    ) -> Result<Done, Refusal> {
        let (estimated, maximum) = self.store.blocks_required(p, o, regions)?;
        Ok(done(ReplyBody::BlocksRequired { estimated, maximum }))
    }

    /// A key the request carries wrapped under its own key (which integrity-args at least
    /// proved it holds).
    fn unwrapped(&self, h: &RequestHeader, a: &Authed, w: &[u8; 48]) -> Result<Key, Refusal> {
        let k = a.key.as_ref().ok_or_else(|| {
            Refusal(
                Status::ProtectionTooWeak,
                "setting a key needs integrity-args at least".into(),
            )
        })?;
        unwrap_key(self.store.suite(), k, &h.nonce, h.op, h.partition, w)
            .ok_or_else(|| Refusal(Status::BadSeal, "wrapped key does not open".into()))
    }

    fn hint(
        &self,
        h: &RequestHeader,
        a: &Authed,
        replace: bool,
        regions: &[Region],
    ) -> Result<Done, Refusal> {
        let (first_index, next_index) = self.prefetcher()?.hint(
            self.stream_key(h, a),
            a.cap.map_or(u64::MAX, |c| c.expiry_ms),
            replace,
            regions,
        )?;
        Ok(done(ReplyBody::Hinted {
            first_index,
            next_index,
        }))
    }

    fn consume(&self, h: &RequestHeader, a: &Authed, consumed: u64) -> Result<Done, Refusal> {
        let c = self.prefetcher()?.consume(self.stream_key(h, a), consumed);
        Ok(done(ReplyBody::Consumed(c)))
    }

    fn prefetcher(&self) -> Result<&Prefetcher, Refusal> {
        self.prefetcher.as_ref().ok_or_else(|| {
            Refusal(
                Status::UnknownOp,
                "this drive does not serve the prefetch extension".into(),
            )
        })
    }

    /// A hint stream belongs to the object and to what the request proved it holds, so only
    /// that holder can add to it, consume it or hear its counters.
    fn stream_key(&self, h: &RequestHeader, a: &Authed) -> StreamKey {
        StreamKey {
            p: h.partition,
            o: h.object,
            principal: match &a.cap {
                Some(c) => Principal::Capability(*c),
                None => Principal::Key(h.key_type as u8, h.partition.0),
            },
        }
    }

    /// Contents of the well-known control objects of seed 002 Table 4.
    fn control_object(&self, p: PartitionId, o: ObjectId) -> Result<Vec<u8>, Refusal> {
        match o {
            ObjectId::DRIVE_CONTROL => Ok(self.drive_info().encode()),
            ObjectId::PARTITION_CONTROL => {
                let part = self.store.with_state(|c| c.partitions.get(&p.0).cloned());
                let part = part.ok_or_else(|| {
                    Refusal(Status::NoSuchPartition, format!("no such partition {p}"))
                })?;
                let bytes = |blocks: u64| blocks * nasd_crypto::integrity::BLOCK_BYTES;
                Ok(PartitionControl {
                    quota_bytes: part.quota_bytes,
                    used_bytes: bytes(part.used_blocks),
                    objects: part.objects,
                    default_scheme: part.default_scheme,
                    min_protection: part.min_protection,
                    reserved_bytes: bytes(part.reserved_blocks),
                    available_bytes: part
                        .quota_bytes
                        .saturating_sub(bytes(part.charged_blocks())),
                    objects_supported: u64::MAX - part.next_object + 1,
                }
                .encode())
            }
            _ => Ok(self
                .store
                .list_objects(p)?
                .iter()
                .flat_map(|o| o.0.to_le_bytes())
                .collect()),
        }
    }
}

/// A reply of a body alone: no data, nothing for the MAC beyond the header.
fn done(body: ReplyBody) -> Done {
    (body, vec![], Material::None)
}
