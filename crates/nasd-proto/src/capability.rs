//! `capability_args` of seed 002 Fig 1: what a file manager decided, sealed later by
//! `capability_key = MAC(working_key, capability_args, access_control_version)` (nasd-crypto).
//!
//! Layout (55 bytes, little-endian), also in `docs/protocol.md`:
//! ```text
//! 0   u64 drive_id            8   u16 partition          10  u64 object (0 = any, for create)
//! 18  u64 region.offset       26  u64 region.len         34  u32 rights
//! 38  u64 expiry_ms (Unix)    46  u64 audit_id           54  u8  min_protection
//! ```

use crate::codec::{Reader, Writer};
use crate::types::{DriveId, ObjectId, PartitionId, Protection, Region, Rights};
use crate::DecodeError;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CapabilityArgs {
    pub drive: DriveId,
    pub partition: PartitionId,
    pub object: ObjectId,
    pub region: Region,
    pub rights: Rights,
    /// Milliseconds since the Unix epoch after which the capability is refused.
    pub expiry_ms: u64,
    /// Opaque to the drive; recorded in its audit trail (seed 002 §2.2).
    pub audit_id: u64,
    pub min_protection: Protection,
}

impl CapabilityArgs {
    pub const BYTES: usize = 55;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut w = Writer::with_capacity(Self::BYTES);
        self.put(&mut w);
        let mut out = [0u8; Self::BYTES];
        out.copy_from_slice(w.as_slice());
        out
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b);
        let c = Self::get(&mut r)?;
        r.finish("capability args")?;
        Ok(c)
    }
    pub(crate) fn put(&self, w: &mut Writer) {
        w.u64(self.drive.0);
        w.u16(self.partition.0);
        w.u64(self.object.0);
        self.region.put(w);
        w.u32(self.rights.0);
        w.u64(self.expiry_ms);
        w.u64(self.audit_id);
        w.u8(self.min_protection.bits());
    }
    pub(crate) fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(CapabilityArgs {
            drive: DriveId(r.u64("cap drive")?),
            partition: PartitionId(r.u16("cap partition")?),
            object: ObjectId(r.u64("cap object")?),
            region: Region::get(r)?,
            rights: Rights::from_bits(r.u32("cap rights")?)?,
            expiry_ms: r.u64("cap expiry")?,
            audit_id: r.u64("cap audit id")?,
            min_protection: Protection::from_bits(r.u8("cap min protection")?)?,
        })
    }
}
