//! `capability_args` of seed 002 Fig 1: what a file manager decided, sealed later by
//! `capability_key = MAC(working_key, capability_args, access_control_version)` (nasd-crypto).
//!
//! Layout (little-endian), also in `docs/protocol.md` §4: 55 bytes, or 88 when the capability
//! names a writer key (protocol version 4; seed 001 §3.3.1 scheme 1, requirements B.4):
//! ```text
//! 0   u64 drive_id            8   u16 partition          10  u64 object (0 = any, for create)
//! 18  u64 region.offset       26  u64 region.len         34  u32 rights
//! 38  u64 expiry_ms (Unix)    46  u64 audit_id           54  u8  min_protection
//! 55  u8  writer_key_tag = 1  56  32B writer_key (Ed25519 public key)    only with a writer key
//! ```
//! A capability without a writer key encodes exactly as before version 4, so its capability
//! key, its sealed form and every request made with it are byte for byte what they were. The
//! encoding with a writer key is longer, so no capability without one encodes (or MACs) like
//! one with one.

use crate::codec::{Reader, Writer};
use crate::types::{
    DriveId, ObjectId, PartitionId, Protection, Region, Rights, WriterPublicKey, WRITER_KEY_BYTES,
};
use crate::DecodeError;
use std::ops::Deref;

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
    /// The object's only writer: a write (or size change) under this capability must carry
    /// this key's signature, which the drive verifies before it stores anything (seed 001
    /// §3.3.1 scheme 1). Bound by the capability key like every other argument.
    pub writer_key: Option<WriterPublicKey>,
}

/// The canonical encoding of a [`CapabilityArgs`]: [`CapabilityArgs::BYTES`] or
/// [`CapabilityArgs::BYTES_WITH_WRITER_KEY`] bytes, on the stack.
#[derive(Clone, Copy)]
pub struct EncodedArgs {
    bytes: [u8; CapabilityArgs::BYTES_WITH_WRITER_KEY],
    len: usize,
}

impl Deref for EncodedArgs {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl AsRef<[u8]> for EncodedArgs {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl CapabilityArgs {
    /// Bytes of the encoding without a writer key.
    pub const BYTES: usize = 55;
    /// Bytes of the encoding with a writer key: the 55, a tag byte, the 32-byte key.
    pub const BYTES_WITH_WRITER_KEY: usize = Self::BYTES + 1 + WRITER_KEY_BYTES;
    /// The tag byte before a writer key.
    pub const WRITER_KEY_TAG: u8 = 1;

    /// The canonical encoding: what the capability key MACs and a sealed capability encrypts.
    pub fn encode(&self) -> EncodedArgs {
        let mut w = Writer::with_capacity(Self::BYTES_WITH_WRITER_KEY);
        self.put_base(&mut w);
        if let Some(k) = &self.writer_key {
            w.u8(Self::WRITER_KEY_TAG);
            w.bytes(&k.0);
        }
        let mut out = EncodedArgs {
            bytes: [0u8; Self::BYTES_WITH_WRITER_KEY],
            len: w.len(),
        };
        out.bytes[..w.len()].copy_from_slice(w.as_slice());
        out
    }

    /// Decodes the canonical encoding (55 bytes, or 88 with a writer key). Total.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b);
        let mut c = Self::get(&mut r)?;
        if r.remaining() > 0 {
            if r.u8("writer key tag")? != Self::WRITER_KEY_TAG {
                return Err(DecodeError::BadValue("writer key tag"));
            }
            c.writer_key = Some(WriterPublicKey(r.array("writer key")?));
        }
        r.finish("capability args")?;
        Ok(c)
    }

    /// The 55 bytes without a writer key, for encodings that carry none: a request's plain
    /// capability form 1 (a capability with a writer key goes as form 3, so one here is a
    /// programmer error, not a silently dropped key). The manager protocol's grants put the
    /// writer key after the 55 bytes themselves.
    pub(crate) fn put(&self, w: &mut Writer) {
        debug_assert!(
            self.writer_key.is_none(),
            "this encoding carries no writer key"
        );
        self.put_base(w);
    }

    /// The 55 bytes before the optional writer key.
    pub(crate) fn put_base(&self, w: &mut Writer) {
        w.u64(self.drive.0);
        w.u16(self.partition.0);
        w.u64(self.object.0);
        self.region.put(w);
        w.u32(self.rights.0);
        w.u64(self.expiry_ms);
        w.u64(self.audit_id);
        w.u8(self.min_protection.bits());
    }

    /// Reads the 55 bytes; the result names no writer key.
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
            writer_key: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(writer_key: Option<WriterPublicKey>) -> CapabilityArgs {
        CapabilityArgs {
            drive: DriveId(0x0102_0304_0506_0708),
            partition: PartitionId(9),
            object: ObjectId(16),
            region: Region::new(0, 4096),
            rights: Rights::WRITE,
            expiry_ms: 5,
            audit_id: 6,
            min_protection: Protection::INTEGRITY_DATA,
            writer_key,
        }
    }

    #[test]
    fn the_writer_key_is_appended_after_a_tag_and_nothing_else_moves() {
        let plain = args(None).encode();
        assert_eq!(plain.len(), CapabilityArgs::BYTES);
        let k = WriterPublicKey([0xab; 32]);
        let with = args(Some(k)).encode();
        assert_eq!(with.len(), 88);
        assert_eq!(&with[..55], &plain[..]);
        assert_eq!(with[55], CapabilityArgs::WRITER_KEY_TAG);
        assert_eq!(&with[56..], &[0xab; 32]);
        assert_eq!(CapabilityArgs::decode(&with).unwrap(), args(Some(k)));
        assert_eq!(CapabilityArgs::decode(&plain).unwrap(), args(None));
        // another tag, a short key, or bytes after it are malformed
        let mut bad = with;
        bad.bytes[55] = 2;
        assert_eq!(
            CapabilityArgs::decode(&bad),
            Err(DecodeError::BadValue("writer key tag"))
        );
        assert!(CapabilityArgs::decode(&with[..87]).is_err());
        assert!(CapabilityArgs::decode(&with[..56]).is_err());
        let mut long = with.to_vec();
        long.push(0);
        assert!(CapabilityArgs::decode(&long).is_err());
    }
}
