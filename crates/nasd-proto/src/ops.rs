//! Operation arguments and reply bodies: seed 002 Tables 1 (objects), 2 (partitions) and 3
//! (drive). Arguments travel in a request's `args` field and reply bodies in a reply's `args`
//! field, so that privacy of arguments (Table 7) can encrypt them as one opaque string.

use crate::attr::{AttrMask, Attributes};
use crate::codec::{get_bool, Reader, Writer};
use crate::ext::{Extension, StreamCounters, HINT_REGIONS_MAX};
use crate::types::{
    DriveId, ObjectId, PartitionId, Protection, Region, Scheme, Suite, WriterSignature,
};
use crate::DecodeError;

/// Most scatter-gather regions in one read, write or blocksrequired.
pub const REGIONS_MAX: usize = 256;
/// Most objects named in one `flush`.
pub const FLUSH_OBJECTS_MAX: usize = 1024;
/// Bytes of a wrapped key: 32-byte key + 16-byte AEAD tag.
pub const WRAPPED_KEY_BYTES: usize = 48;
/// Longest human-readable detail on an error reply.
pub const ERROR_DETAIL_BYTES_MAX: usize = 1024;
/// Longest integrity trailer (tree proofs) on a read reply.
pub const INTEGRITY_TRAILER_BYTES_MAX: usize = 1 << 20;
/// Most partitions a drive reports in `inquiry`.
pub const PARTITIONS_MAX: usize = 4096;

macro_rules! opcodes {
    ($($name:ident = $code:literal,)*) => {
        /// Operation codes. Stable on the wire.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        #[repr(u8)]
        pub enum OpCode { $($name = $code,)* }
        impl OpCode {
            pub fn from_u8(v: u8) -> Result<OpCode, DecodeError> {
                match v { $($code => Ok(OpCode::$name),)* _ => Err(DecodeError::BadValue("op code")) }
            }
            pub const ALL: &'static [OpCode] = &[$(OpCode::$name,)*];
        }
    };
}

opcodes! {
    Create = 1, Remove = 2, GetAttr = 3, SetAttr = 4, Read = 5, Write = 6, FastCopy = 7,
    Flush = 8, BlocksRequired = 9,
    CreatePartition = 16, RemovePartition = 17, ResizePartition = 18, FlushPartition = 19,
    SetPartitionKey = 20, SetWorkingKey = 21, SetMinProtection = 22,
    Initialize = 32, SetDriveKey = 33, Inquiry = 34,
    Hint = 64, Consume = 65,
}

impl OpCode {
    pub fn name(self) -> &'static str {
        match self {
            OpCode::Create => "create",
            OpCode::Remove => "remove",
            OpCode::GetAttr => "getattr",
            OpCode::SetAttr => "setattr",
            OpCode::Read => "read",
            OpCode::Write => "write",
            OpCode::FastCopy => "fastcopy",
            OpCode::Flush => "flush",
            OpCode::BlocksRequired => "blocksrequired",
            OpCode::CreatePartition => "createpartition",
            OpCode::RemovePartition => "removepartition",
            OpCode::ResizePartition => "resizepartition",
            OpCode::FlushPartition => "flushpartition",
            OpCode::SetPartitionKey => "setpartitionkey",
            OpCode::SetWorkingKey => "setworkingkey",
            OpCode::SetMinProtection => "setminprotection",
            OpCode::Initialize => "initialize",
            OpCode::SetDriveKey => "setdrivekey",
            OpCode::Inquiry => "inquiry",
            OpCode::Hint => "hint",
            OpCode::Consume => "consume",
        }
    }
    /// Object operations of Table 1 and extension operations on one object: the only ones a
    /// capability can authorize.
    pub fn is_object_op(self) -> bool {
        (self as u8) < 16 || self.is_extension()
    }
    /// Extension operations (seed 002 §3.4), listed in the Drive Control object.
    pub fn is_extension(self) -> bool {
        (self as u8) >= crate::ext::EXTENSION_OPCODE_MIN
    }
}

/// A request's operation with its arguments.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Op {
    /// `scheme: None` takes the partition's default.
    Create {
        scheme: Option<Scheme>,
        mask: AttrMask,
        attrs: Box<Attributes>,
    },
    Remove,
    GetAttr,
    /// `signature`: under a capability that names a writer key, a setattr that changes the
    /// logical size carries the writer's signature of the new size (`docs/protocol.md` §14).
    SetAttr {
        mask: AttrMask,
        attrs: Box<Attributes>,
        signature: Option<WriterSignature>,
    },
    Read {
        regions: Vec<Region>,
    },
    /// `form` is the scheme whose digest form the client used for the data digest; the drive
    /// reuses those hashes as stored metadata when `form` equals the object's scheme.
    /// `write_back` asks the drive to reply before the data is durable (seed 002 Table 1 `flush`).
    /// `signature`: under a capability that names a writer key, the writer's signature of the
    /// write (seed 001 §3.3.1 scheme 1; `docs/protocol.md` §14); `None` otherwise.
    Write {
        regions: Vec<Region>,
        form: Scheme,
        write_back: bool,
        signature: Option<WriterSignature>,
    },
    FastCopy,
    Flush {
        objects: Vec<ObjectId>,
    },
    BlocksRequired {
        regions: Vec<Region>,
    },
    CreatePartition {
        quota_bytes: u64,
        default_scheme: Scheme,
    },
    RemovePartition {
        force: bool,
    },
    ResizePartition {
        quota_bytes: u64,
    },
    FlushPartition,
    SetPartitionKey {
        wrapped: [u8; WRAPPED_KEY_BYTES],
    },
    SetWorkingKey {
        wrapped: [u8; WRAPPED_KEY_BYTES],
    },
    /// Raises or lowers the minimum protection of the drive (`drive_wide`) or the request's
    /// partition; capabilities whose minimum falls below it die at once (seed 002 §2.4).
    SetMinProtection {
        drive_wide: bool,
        protection: Protection,
    },
    Initialize {
        wrapped_master: [u8; WRAPPED_KEY_BYTES],
    },
    SetDriveKey {
        wrapped: [u8; WRAPPED_KEY_BYTES],
    },
    Inquiry,
    /// Extension `prefetch` (seed 002 §4.6): the reads the client will make of the request's
    /// object, in order; `replace` drops the stream's earlier hints first.
    Hint {
        replace: bool,
        regions: Vec<Region>,
    },
    /// Extension `prefetch`: the client has consumed every hinted read whose index is below
    /// `consumed`.
    Consume {
        consumed: u64,
    },
}

fn put_regions(w: &mut Writer, regions: &[Region]) {
    debug_assert!(regions.len() <= REGIONS_MAX, "callers bound region lists");
    w.u16(regions.len() as u16);
    for r in regions {
        r.put(w);
    }
}

fn get_regions(r: &mut Reader<'_>) -> Result<Vec<Region>, DecodeError> {
    get_regions_max(r, REGIONS_MAX)
}

fn get_regions_max(r: &mut Reader<'_>, max: usize) -> Result<Vec<Region>, DecodeError> {
    let n = r.u16("region count")? as usize;
    if n > max {
        return Err(DecodeError::TooLong("regions"));
    }
    if r.remaining() < n * 16 {
        return Err(DecodeError::Truncated("regions"));
    }
    (0..n).map(|_| Region::get(r)).collect()
}

/// The tag byte before a writer signature at the end of a write's or setattr's arguments.
pub const WRITER_SIGNATURE_TAG: u8 = 1;

/// A writer signature as the last field of an operation's arguments: absent (no bytes, so
/// arguments without one are what they were before protocol version 4), or
/// `u8 WRITER_SIGNATURE_TAG, 64B signature`.
fn put_signature(w: &mut Writer, signature: &Option<WriterSignature>) {
    if let Some(s) = signature {
        w.u8(WRITER_SIGNATURE_TAG);
        w.bytes(&s.0);
    }
}

fn get_signature(r: &mut Reader<'_>) -> Result<Option<WriterSignature>, DecodeError> {
    if r.remaining() == 0 {
        return Ok(None);
    }
    if r.u8("writer signature tag")? != WRITER_SIGNATURE_TAG {
        return Err(DecodeError::BadValue("writer signature tag"));
    }
    Ok(Some(WriterSignature(r.array("writer signature")?)))
}

impl Op {
    /// Whether this operation changes the bytes a reader of the object sees, and so must be
    /// signed under a capability that names a writer key (seed 001 §3.3.1 scheme 1: the disk
    /// verifies the signature before the block is written): a write, and a setattr that sets
    /// the logical size (truncating drops bytes, extending adds zeros). Nothing else stores
    /// bytes in the object: `remove` and `create` store none, `fastcopy` copies the object
    /// into a new one, and the other attributes are not object data.
    pub fn changes_data(&self) -> bool {
        match self {
            Op::Write { .. } => true,
            Op::SetAttr { mask, .. } => mask.has(AttrMask::LOGICAL_SIZE),
            _ => false,
        }
    }

    /// The writer signature the operation carries, if any.
    pub fn writer_signature(&self) -> Option<&WriterSignature> {
        match self {
            Op::Write { signature, .. } | Op::SetAttr { signature, .. } => signature.as_ref(),
            _ => None,
        }
    }

    /// Attaches a writer signature; `false` (and nothing changed) for an operation that carries
    /// none.
    pub fn set_writer_signature(&mut self, s: WriterSignature) -> bool {
        match self {
            Op::Write { signature, .. } | Op::SetAttr { signature, .. } => {
                *signature = Some(s);
                true
            }
            _ => false,
        }
    }

    pub fn code(&self) -> OpCode {
        match self {
            Op::Create { .. } => OpCode::Create,
            Op::Remove => OpCode::Remove,
            Op::GetAttr => OpCode::GetAttr,
            Op::SetAttr { .. } => OpCode::SetAttr,
            Op::Read { .. } => OpCode::Read,
            Op::Write { .. } => OpCode::Write,
            Op::FastCopy => OpCode::FastCopy,
            Op::Flush { .. } => OpCode::Flush,
            Op::BlocksRequired { .. } => OpCode::BlocksRequired,
            Op::CreatePartition { .. } => OpCode::CreatePartition,
            Op::RemovePartition { .. } => OpCode::RemovePartition,
            Op::ResizePartition { .. } => OpCode::ResizePartition,
            Op::FlushPartition => OpCode::FlushPartition,
            Op::SetPartitionKey { .. } => OpCode::SetPartitionKey,
            Op::SetWorkingKey { .. } => OpCode::SetWorkingKey,
            Op::SetMinProtection { .. } => OpCode::SetMinProtection,
            Op::Initialize { .. } => OpCode::Initialize,
            Op::SetDriveKey { .. } => OpCode::SetDriveKey,
            Op::Inquiry => OpCode::Inquiry,
            Op::Hint { .. } => OpCode::Hint,
            Op::Consume { .. } => OpCode::Consume,
        }
    }

    /// The operation's argument bytes (the `args` field of a request).
    pub fn encode_args(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Op::Create {
                scheme,
                mask,
                attrs,
            } => {
                w.u8(scheme.map(|s| s as u8).unwrap_or(0));
                w.u32(mask.0);
                attrs.put(&mut w);
            }
            Op::SetAttr {
                mask,
                attrs,
                signature,
            } => {
                w.u32(mask.0);
                attrs.put(&mut w);
                put_signature(&mut w, signature);
            }
            Op::Read { regions } | Op::BlocksRequired { regions } => put_regions(&mut w, regions),
            Op::Write {
                regions,
                form,
                write_back,
                signature,
            } => {
                put_regions(&mut w, regions);
                w.u8(*form as u8);
                w.u8(*write_back as u8);
                put_signature(&mut w, signature);
            }
            Op::Flush { objects } => {
                w.u32(objects.len() as u32);
                for o in objects {
                    w.u64(o.0);
                }
            }
            Op::CreatePartition {
                quota_bytes,
                default_scheme,
            } => {
                w.u64(*quota_bytes);
                w.u8(*default_scheme as u8);
            }
            Op::RemovePartition { force } => w.u8(*force as u8),
            Op::ResizePartition { quota_bytes } => w.u64(*quota_bytes),
            Op::SetPartitionKey { wrapped }
            | Op::SetWorkingKey { wrapped }
            | Op::SetDriveKey { wrapped }
            | Op::Initialize {
                wrapped_master: wrapped,
            } => w.bytes(wrapped),
            Op::SetMinProtection {
                drive_wide,
                protection,
            } => {
                w.u8(*drive_wide as u8);
                w.u8(protection.bits());
            }
            Op::Hint { replace, regions } => {
                debug_assert!(regions.len() <= HINT_REGIONS_MAX, "callers bound hints");
                w.u8(*replace as u8);
                w.u16(regions.len() as u16);
                for r in regions {
                    r.put(&mut w);
                }
            }
            Op::Consume { consumed } => w.u64(*consumed),
            Op::Remove | Op::GetAttr | Op::FastCopy | Op::FlushPartition | Op::Inquiry => {}
        }
        w.into_vec()
    }

    /// Decodes the arguments of operation `code`. Total: never panics.
    pub fn decode_args(code: OpCode, b: &[u8]) -> Result<Op, DecodeError> {
        let mut r = Reader::new(b);
        let op = match code {
            OpCode::Create => {
                let s = r.u8("create scheme")?;
                let scheme = if s == 0 {
                    None
                } else {
                    Some(Scheme::from_u8(s)?)
                };
                let mask = AttrMask::from_bits(r.u32("attr mask")?)?;
                Op::Create {
                    scheme,
                    mask,
                    attrs: Box::new(Attributes::get(&mut r)?),
                }
            }
            OpCode::SetAttr => {
                let mask = AttrMask::from_bits(r.u32("attr mask")?)?;
                Op::SetAttr {
                    mask,
                    attrs: Box::new(Attributes::get(&mut r)?),
                    signature: get_signature(&mut r)?,
                }
            }
            OpCode::Read => Op::Read {
                regions: get_regions(&mut r)?,
            },
            OpCode::BlocksRequired => Op::BlocksRequired {
                regions: get_regions(&mut r)?,
            },
            OpCode::Write => Op::Write {
                regions: get_regions(&mut r)?,
                form: Scheme::from_u8(r.u8("write form")?)?,
                write_back: get_bool(&mut r, "write back")?,
                signature: get_signature(&mut r)?,
            },
            OpCode::Flush => {
                let n = r.u32("flush count")? as usize;
                if n > FLUSH_OBJECTS_MAX {
                    return Err(DecodeError::TooLong("flush objects"));
                }
                if r.remaining() < n * 8 {
                    return Err(DecodeError::Truncated("flush objects"));
                }
                let objects = (0..n)
                    .map(|_| r.u64("object").map(ObjectId))
                    .collect::<Result<_, _>>()?;
                Op::Flush { objects }
            }
            OpCode::CreatePartition => Op::CreatePartition {
                quota_bytes: r.u64("quota")?,
                default_scheme: Scheme::from_u8(r.u8("default scheme")?)?,
            },
            OpCode::RemovePartition => Op::RemovePartition {
                force: get_bool(&mut r, "force")?,
            },
            OpCode::ResizePartition => Op::ResizePartition {
                quota_bytes: r.u64("quota")?,
            },
            OpCode::SetPartitionKey => Op::SetPartitionKey {
                wrapped: r.array("wrapped key")?,
            },
            OpCode::SetWorkingKey => Op::SetWorkingKey {
                wrapped: r.array("wrapped key")?,
            },
            OpCode::SetDriveKey => Op::SetDriveKey {
                wrapped: r.array("wrapped key")?,
            },
            OpCode::Initialize => Op::Initialize {
                wrapped_master: r.array("wrapped key")?,
            },
            OpCode::SetMinProtection => Op::SetMinProtection {
                drive_wide: get_bool(&mut r, "drive wide")?,
                protection: Protection::from_bits(r.u8("protection")?)?,
            },
            OpCode::Remove => Op::Remove,
            OpCode::GetAttr => Op::GetAttr,
            OpCode::FastCopy => Op::FastCopy,
            OpCode::FlushPartition => Op::FlushPartition,
            OpCode::Inquiry => Op::Inquiry,
            OpCode::Hint => Op::Hint {
                replace: get_bool(&mut r, "hint replace")?,
                regions: get_regions_max(&mut r, HINT_REGIONS_MAX)?,
            },
            OpCode::Consume => Op::Consume {
                consumed: r.u64("consumed")?,
            },
        };
        r.finish("op args")?;
        Ok(op)
    }
}

/// One partition as `inquiry` reports it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PartitionInfo {
    pub id: PartitionId,
    pub quota_bytes: u64,
    pub used_bytes: u64,
    pub objects: u64,
    pub default_scheme: Scheme,
    pub min_protection: Protection,
}

/// The content of a partition's Partition Control object (seed 002 Table 4: "current size,
/// byte usage, number of objects supported, number of objects allocated"; §2.3: bytes in use
/// and available, object descriptors in use and available). Since protocol version 5 it ends
/// with the reserved bytes, the bytes available and the objects supported.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PartitionControl {
    pub quota_bytes: u64,
    pub used_bytes: u64,
    /// Objects allocated (the well-known ones included).
    pub objects: u64,
    pub default_scheme: Scheme,
    pub min_protection: Protection,
    /// Bytes set aside by objects' `blocks_allocated` beyond what they use.
    pub reserved_bytes: u64,
    /// What the quota leaves: quota less used and reserved bytes.
    pub available_bytes: u64,
    /// How many more objects the partition can name. Object ids are its only limit on count
    /// (an object's record lives in the metadata database and takes no data block until
    /// written), so this is the ids left.
    pub objects_supported: u64,
}

impl PartitionControl {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.quota_bytes);
        w.u64(self.used_bytes);
        w.u64(self.objects);
        w.u8(self.default_scheme as u8);
        w.u8(self.min_protection.bits());
        w.u64(self.reserved_bytes);
        w.u64(self.available_bytes);
        w.u64(self.objects_supported);
        w.into_vec()
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b);
        let c = PartitionControl {
            quota_bytes: r.u64("quota")?,
            used_bytes: r.u64("used")?,
            objects: r.u64("objects")?,
            default_scheme: Scheme::from_u8(r.u8("scheme")?)?,
            min_protection: Protection::from_bits(r.u8("min protection")?)?,
            reserved_bytes: r.u64("reserved")?,
            available_bytes: r.u64("available")?,
            objects_supported: r.u64("objects supported")?,
        };
        r.finish("partition control")?;
        Ok(c)
    }
}

/// Answer to `inquiry` (seed 002 Table 3) and the content of the Drive Control object.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DriveInfo {
    pub drive: DriveId,
    pub suite: Suite,
    pub block_bytes: u32,
    pub chunk_bytes: u32,
    pub clock_us: u64,
    pub nonce_window_ms: u64,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub min_protection: Protection,
    pub vendor: String,
    pub partitions: Vec<PartitionInfo>,
    /// Bytes of the drive's block cache (seed 002 Table 4's physical parameters); 0 = none.
    pub cache_bytes: u64,
    /// The extensions the drive serves (seed 002 §3.4), [`crate::ext`].
    pub extensions: Vec<Extension>,
}

impl DriveInfo {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.drive.0);
        w.u8(self.suite as u8);
        w.u32(self.block_bytes);
        w.u32(self.chunk_bytes);
        w.u64(self.clock_us);
        w.u64(self.nonce_window_ms);
        w.u64(self.capacity_bytes);
        w.u64(self.used_bytes);
        w.u8(self.min_protection.bits());
        w.blob(self.vendor.as_bytes());
        w.u32(self.partitions.len() as u32);
        for p in &self.partitions {
            w.u16(p.id.0);
            w.u64(p.quota_bytes);
            w.u64(p.used_bytes);
            w.u64(p.objects);
            w.u8(p.default_scheme as u8);
            w.u8(p.min_protection.bits());
        }
        w.u64(self.cache_bytes);
        crate::ext::put_table(&mut w, &self.extensions);
        w.into_vec()
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b);
        let mut d = DriveInfo {
            drive: DriveId(r.u64("drive")?),
            suite: Suite::from_u8(r.u8("suite")?)?,
            block_bytes: r.u32("block bytes")?,
            chunk_bytes: r.u32("chunk bytes")?,
            clock_us: r.u64("clock")?,
            nonce_window_ms: r.u64("window")?,
            capacity_bytes: r.u64("capacity")?,
            used_bytes: r.u64("used")?,
            min_protection: Protection::from_bits(r.u8("min protection")?)?,
            vendor: String::from_utf8(r.blob(256, "vendor")?.to_vec())
                .map_err(|_| DecodeError::BadValue("vendor utf-8"))?,
            partitions: vec![],
            cache_bytes: 0,
            extensions: vec![],
        };
        let n = r.u32("partition count")? as usize;
        if n > PARTITIONS_MAX {
            return Err(DecodeError::TooLong("partitions"));
        }
        for _ in 0..n {
            d.partitions.push(PartitionInfo {
                id: PartitionId(r.u16("partition")?),
                quota_bytes: r.u64("quota")?,
                used_bytes: r.u64("used")?,
                objects: r.u64("objects")?,
                default_scheme: Scheme::from_u8(r.u8("scheme")?)?,
                min_protection: Protection::from_bits(r.u8("min protection")?)?,
            });
        }
        d.cache_bytes = r.u64("cache bytes")?;
        d.extensions = crate::ext::get_table(&mut r)?;
        r.finish("drive info")?;
        Ok(d)
    }
}

/// What a read returned: the regions actually sent (clamped to the object's size and, for the
/// `tree` scheme, widened to chunk boundaries) and the scheme's integrity trailer (tree proofs).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ReadReply {
    pub logical_size: u64,
    pub scheme: Scheme,
    pub regions: Vec<Region>,
    pub trailer: Vec<u8>,
}

/// A successful reply's body (its `args` field), by operation. Replies that return attributes
/// (`create`, `fastcopy`, `getattr`, `setattr`) carry the 357-byte [`Attributes`] encoding as
/// their data, and their MAC covers the drive's *stored* attribute digest rather than the
/// attribute bytes (seed 000 §3.2.2): the drive hashes nothing on `getattr`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ReplyBody {
    Empty,
    /// `create`/`fastcopy`: the new object's id. Its attributes travel as the reply's data.
    Object {
        object: ObjectId,
    },
    /// `getattr`/`setattr`: the attributes travel as the reply's data.
    Attrs,
    Read(ReadReply),
    Written {
        bytes: u64,
        scheme: Scheme,
        logical_size: u64,
    },
    BlocksRequired {
        estimated: u64,
        maximum: u64,
    },
    Drive(Box<DriveInfo>),
    /// `hint`: the index the stream gave this hint's first region, and the index its next
    /// hinted region will get.
    Hinted {
        first_index: u64,
        next_index: u64,
    },
    /// `consume`: the counters of the caller's own stream.
    Consumed(StreamCounters),
}

impl ReplyBody {
    /// How many bytes at the end of this successful reply's args the reply MAC leaves out
    /// (`docs/protocol.md` §10.4): a read's integrity trailer when the args travel in the clear
    /// under `protection`; 0 otherwise. Drive and client both take the rule from here.
    pub fn unmacced_tail_bytes(&self, protection: Protection) -> usize {
        match self {
            ReplyBody::Read(rr) if !protection.privacy_args() => rr.trailer.len(),
            _ => 0,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = match self {
            ReplyBody::Read(rr) => {
                Writer::with_capacity(17 + 16 * rr.regions.len() + 4 + rr.trailer.len())
            }
            _ => Writer::new(),
        };
        match self {
            ReplyBody::Empty => {}
            ReplyBody::Object { object } => w.u64(object.0),
            ReplyBody::Attrs => {}
            ReplyBody::Read(rr) => {
                w.u64(rr.logical_size);
                w.u8(rr.scheme as u8);
                put_regions(&mut w, &rr.regions);
                w.blob(&rr.trailer);
            }
            ReplyBody::Written {
                bytes,
                scheme,
                logical_size,
            } => {
                w.u64(*bytes);
                w.u8(*scheme as u8);
                w.u64(*logical_size);
            }
            ReplyBody::BlocksRequired { estimated, maximum } => {
                w.u64(*estimated);
                w.u64(*maximum);
            }
            ReplyBody::Drive(d) => return d.encode(),
            ReplyBody::Hinted {
                first_index,
                next_index,
            } => {
                w.u64(*first_index);
                w.u64(*next_index);
            }
            ReplyBody::Consumed(c) => {
                w.u64(c.prefetched_blocks);
                w.u64(c.cache_hit_blocks);
                w.u64(c.dropped_blocks);
            }
        }
        w.into_vec()
    }

    /// Decodes the body of a successful reply to operation `code`.
    pub fn decode(code: OpCode, b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b);
        let body = match code {
            OpCode::Create | OpCode::FastCopy => ReplyBody::Object {
                object: ObjectId(r.u64("object")?),
            },
            OpCode::GetAttr | OpCode::SetAttr => ReplyBody::Attrs,
            OpCode::Read => ReplyBody::Read(ReadReply {
                logical_size: r.u64("size")?,
                scheme: Scheme::from_u8(r.u8("scheme")?)?,
                regions: get_regions(&mut r)?,
                trailer: r.blob(INTEGRITY_TRAILER_BYTES_MAX, "trailer")?.to_vec(),
            }),
            OpCode::Write => ReplyBody::Written {
                bytes: r.u64("bytes")?,
                scheme: Scheme::from_u8(r.u8("scheme")?)?,
                logical_size: r.u64("size")?,
            },
            OpCode::BlocksRequired => ReplyBody::BlocksRequired {
                estimated: r.u64("estimated")?,
                maximum: r.u64("maximum")?,
            },
            OpCode::Inquiry => return Ok(ReplyBody::Drive(Box::new(DriveInfo::decode(b)?))),
            OpCode::Hint => ReplyBody::Hinted {
                first_index: r.u64("first index")?,
                next_index: r.u64("next index")?,
            },
            OpCode::Consume => ReplyBody::Consumed(StreamCounters {
                prefetched_blocks: r.u64("prefetched blocks")?,
                cache_hit_blocks: r.u64("cache hit blocks")?,
                dropped_blocks: r.u64("dropped blocks")?,
            }),
            _ => ReplyBody::Empty,
        };
        r.finish("reply body")?;
        Ok(body)
    }
}

/// Helper for callers that need to know a region list's total length without overflow.
pub fn regions_total(regions: &[Region]) -> Option<u64> {
    regions
        .iter()
        .try_fold(0u64, |acc, r| acc.checked_add(r.len))
}

/// The region count and total length (saturating) of a read's argument bytes, read without
/// decoding into a list; `None` if they do not parse as `regions`.
pub fn read_extent(args: &[u8]) -> Option<(usize, u64)> {
    let mut r = Reader::new(args);
    let n = r.u16("regions").ok()? as usize;
    if n > REGIONS_MAX {
        return None;
    }
    let mut total = 0u64;
    for _ in 0..n {
        r.u64("offset").ok()?;
        total = total.saturating_add(r.u64("len").ok()?);
    }
    r.finish("regions").ok()?;
    Some((n, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_extent_agrees_with_the_decoder() {
        let regions = vec![
            Region::new(5, 100),
            Region::new(1 << 40, 7),
            Region::new(0, 0),
        ];
        let args = Op::Read {
            regions: regions.clone(),
        }
        .encode_args();
        assert_eq!(read_extent(&args), Some((3, 107)));
        assert_eq!(read_extent(&args[..args.len() - 1]), None);
        assert_eq!(read_extent(&[]), None);
    }

    #[test]
    fn only_a_clear_read_trailer_is_outside_the_reply_mac() {
        let read = ReplyBody::Read(ReadReply {
            logical_size: 10,
            scheme: Scheme::Tree,
            regions: vec![Region::new(0, 10)],
            trailer: vec![7; 34],
        });
        assert_eq!(read.unmacced_tail_bytes(Protection::INTEGRITY_DATA), 34);
        // the encoded args end with the trailer, so cutting that many bytes cuts only it
        assert!(read.encode().ends_with(&[7; 34]));
        assert_eq!(read.unmacced_tail_bytes(Protection::PRIVACY_ARGS), 0);
        assert_eq!(read.unmacced_tail_bytes(Protection::PRIVACY_DATA), 0);
        assert_eq!(
            ReplyBody::Attrs.unmacced_tail_bytes(Protection::INTEGRITY_DATA),
            0
        );
    }
}
