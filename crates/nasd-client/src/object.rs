//! Typed helpers over [`DriveConn::call`]: one method per operation of seed 002 Tables 1-3.
//! Each checks that the reply is the body its operation answers with.

use crate::auth::Auth;
use crate::conn::DriveConn;
use crate::ClientError;
use nasd_crypto::request::wrap_key;
use nasd_crypto::Key;
use nasd_proto::{
    AttrMask, Attributes, DriveInfo, ObjectId, Op, OpCode, PartitionId, Protection, Region,
    ReplyBody, Scheme,
};

/// Where a request goes and how it is protected.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub partition: PartitionId,
    pub object: ObjectId,
    pub protection: Protection,
}

/// A verified read.
#[derive(Clone, Debug)]
pub struct ReadResult {
    /// The requested bytes, clamped at the object's end.
    pub data: Vec<u8>,
    pub logical_size: u64,
    pub scheme: Scheme,
    /// A `tree` object's top as the reply MAC covered it and the data was checked against,
    /// with each region's proof nodes (`None` for other schemes, and when the reply carried no
    /// data digest). What a writer pins and a reader compares with its pin (MT-EINT).
    pub tree: Option<TreeView>,
}

/// A verified `tree` read's top and proofs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeView {
    pub top: nasd_crypto::Digest,
    pub proofs: Vec<Vec<nasd_crypto::Digest>>,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteResult {
    pub bytes: u64,
    pub scheme: Scheme,
    pub logical_size: u64,
}

fn unexpected(op: OpCode) -> ClientError {
    ClientError::Integrity {
        op: op.name(),
        what: "reply body does not match the operation".into(),
    }
}

impl DriveConn {
    /// Creates an object; returns its id and attributes. `scheme: None` takes the partition's
    /// default.
    pub async fn create(
        &self,
        auth: &Auth,
        t: Target,
        scheme: Option<Scheme>,
    ) -> Result<(ObjectId, Attributes), ClientError> {
        let op = Op::Create {
            scheme,
            mask: AttrMask::default(),
            attrs: Box::default(),
        };
        let r = self.call(auth, t, &op, &[]).await?;
        match (&r.body, r.attributes()) {
            (ReplyBody::Object { object }, Some(a)) => Ok((*object, a)),
            _ => Err(unexpected(OpCode::Create)),
        }
    }

    pub async fn remove(&self, auth: &Auth, t: Target) -> Result<(), ClientError> {
        self.call(auth, t, &Op::Remove, &[]).await?;
        Ok(())
    }

    pub async fn getattr(&self, auth: &Auth, t: Target) -> Result<Attributes, ClientError> {
        let r = self.call(auth, t, &Op::GetAttr, &[]).await?;
        r.attributes().ok_or_else(|| unexpected(OpCode::GetAttr))
    }

    /// Changes the attributes named in `mask`; returns the attributes after the change.
    pub async fn setattr(
        &self,
        auth: &Auth,
        t: Target,
        mask: AttrMask,
        attrs: Attributes,
    ) -> Result<Attributes, ClientError> {
        let op = Op::SetAttr {
            mask,
            attrs: Box::new(attrs),
            signature: None,
        };
        let r = self.call(auth, t, &op, &[]).await?;
        r.attributes().ok_or_else(|| unexpected(OpCode::SetAttr))
    }

    /// Reads `regions` (scatter-gather); the data comes back verified and concatenated.
    pub async fn read(
        &self,
        auth: &Auth,
        t: Target,
        regions: Vec<Region>,
    ) -> Result<ReadResult, ClientError> {
        let r = self.call(auth, t, &Op::Read { regions }, &[]).await?;
        match r.body {
            ReplyBody::Read(rr) => {
                // The reply was checked before `call` returned; under integrity-data the
                // trailer's top and proofs are what the data verified against.
                let tree = (rr.scheme == Scheme::Tree && r.protection.integrity_data())
                    .then(|| {
                        nasd_crypto::integrity::verify::decode_tree_trailer(
                            &rr.trailer,
                            rr.regions.len(),
                        )
                        .ok()
                        .map(|(top, proofs)| TreeView { top, proofs })
                    })
                    .flatten();
                Ok(ReadResult {
                    data: r.data,
                    logical_size: rr.logical_size,
                    scheme: rr.scheme,
                    tree,
                })
            }
            _ => Err(unexpected(OpCode::Read)),
        }
    }

    /// Writes `data` at `offset`. The data digest is computed in the object's scheme when this
    /// connection knows it, so the drive keeps the client's hashes as its metadata; otherwise
    /// in `tree` form (the drive then rehashes).
    pub async fn write(
        &self,
        auth: &Auth,
        t: Target,
        offset: u64,
        data: &[u8],
    ) -> Result<WriteResult, ClientError> {
        let form = self
            .known_scheme(t.partition, t.object)
            .unwrap_or(Scheme::Tree);
        self.write_regions(
            auth,
            t,
            vec![Region::new(offset, data.len() as u64)],
            form,
            false,
            data,
        )
        .await
    }

    /// Writes scatter-gather regions; `data` is their bytes concatenated in order.
    pub async fn write_regions(
        &self,
        auth: &Auth,
        t: Target,
        regions: Vec<Region>,
        form: Scheme,
        write_back: bool,
        data: &[u8],
    ) -> Result<WriteResult, ClientError> {
        let op = Op::Write {
            regions,
            form,
            write_back,
            signature: None,
        };
        let r = self.call(auth, t, &op, data).await?;
        match r.body {
            ReplyBody::Written {
                bytes,
                scheme,
                logical_size,
            } => Ok(WriteResult {
                bytes,
                scheme,
                logical_size,
            }),
            _ => Err(unexpected(OpCode::Write)),
        }
    }

    /// Copy-on-write copy of the target object; returns the new object's id and attributes.
    pub async fn fastcopy(
        &self,
        auth: &Auth,
        t: Target,
    ) -> Result<(ObjectId, Attributes), ClientError> {
        let r = self.call(auth, t, &Op::FastCopy, &[]).await?;
        match (&r.body, r.attributes()) {
            (ReplyBody::Object { object }, Some(a)) => Ok((*object, a)),
            _ => Err(unexpected(OpCode::FastCopy)),
        }
    }

    /// Makes write-back writes to `objects` durable.
    pub async fn flush(
        &self,
        auth: &Auth,
        t: Target,
        objects: Vec<ObjectId>,
    ) -> Result<(), ClientError> {
        self.call(auth, t, &Op::Flush { objects }, &[]).await?;
        Ok(())
    }

    /// Blocks a write of `regions` would need: (estimated, maximum).
    pub async fn blocks_required(
        &self,
        auth: &Auth,
        t: Target,
        regions: Vec<Region>,
    ) -> Result<(u64, u64), ClientError> {
        let r = self
            .call(auth, t, &Op::BlocksRequired { regions }, &[])
            .await?;
        match r.body {
            ReplyBody::BlocksRequired { estimated, maximum } => Ok((estimated, maximum)),
            _ => Err(unexpected(OpCode::BlocksRequired)),
        }
    }

    /// Any operation whose successful reply is empty (partition management).
    pub async fn call_empty(&self, auth: &Auth, t: Target, op: Op) -> Result<(), ClientError> {
        let code = op.code();
        let r = self.call(auth, t, &op, &[]).await?;
        match r.body {
            ReplyBody::Empty => Ok(()),
            _ => Err(unexpected(code)),
        }
    }

    pub async fn create_partition(
        &self,
        drive_key: &Auth,
        t: Target,
        quota_bytes: u64,
        default_scheme: Scheme,
    ) -> Result<(), ClientError> {
        self.call_empty(
            drive_key,
            t,
            Op::CreatePartition {
                quota_bytes,
                default_scheme,
            },
        )
        .await
    }

    pub async fn remove_partition(
        &self,
        drive_key: &Auth,
        t: Target,
        force: bool,
    ) -> Result<(), ClientError> {
        self.call_empty(drive_key, t, Op::RemovePartition { force })
            .await
    }

    pub async fn resize_partition(
        &self,
        drive_key: &Auth,
        t: Target,
        quota_bytes: u64,
    ) -> Result<(), ClientError> {
        self.call_empty(drive_key, t, Op::ResizePartition { quota_bytes })
            .await
    }

    /// Sets a key of the hierarchy, wrapped under the authorizing key and bound to this
    /// request's nonce, operation and partition (keys never cross the network in clear).
    /// `op_code` is one of SetPartitionKey, SetWorkingKey, SetDriveKey.
    pub async fn set_key(
        &self,
        authorizing: &Auth,
        t: Target,
        op_code: OpCode,
        new_key: &Key,
    ) -> Result<(), ClientError> {
        let nonce = self.nonce();
        let wrapped = wrap_key(
            self.welcome().suite,
            authorizing.key(),
            &nonce,
            op_code,
            t.partition,
            new_key,
        );
        let op = match op_code {
            OpCode::SetPartitionKey => Op::SetPartitionKey { wrapped },
            OpCode::SetWorkingKey => Op::SetWorkingKey { wrapped },
            OpCode::SetDriveKey => Op::SetDriveKey { wrapped },
            other => {
                return Err(ClientError::Usage(format!(
                    "{} does not set a key",
                    other.name()
                )))
            }
        };
        let req = self.prepare(nonce, authorizing, t, &op, &[])?;
        let r = self.submit(req).await?;
        match r.body {
            ReplyBody::Empty => Ok(()),
            _ => Err(unexpected(op_code)),
        }
    }

    /// Sets the minimum protection of the drive (`drive_wide`) or of the target partition.
    pub async fn set_min_protection(
        &self,
        auth: &Auth,
        t: Target,
        drive_wide: bool,
        protection: Protection,
    ) -> Result<(), ClientError> {
        self.call_empty(
            auth,
            t,
            Op::SetMinProtection {
                drive_wide,
                protection,
            },
        )
        .await
    }

    pub async fn inquiry(&self, auth: &Auth, t: Target) -> Result<DriveInfo, ClientError> {
        let r = self.call(auth, t, &Op::Inquiry, &[]).await?;
        match r.body {
            ReplyBody::Drive(d) => Ok(*d),
            _ => Err(unexpected(OpCode::Inquiry)),
        }
    }
}
