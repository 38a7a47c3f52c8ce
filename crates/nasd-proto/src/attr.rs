//! Object attributes of seed 002 Table 5, plus the integrity scheme the object was created with.
//!
//! Layout (`Attributes::BYTES` = 357 bytes, little-endian):
//! ```text
//! 0   u64 access_control_version   8   u64 nearby_object        16  u64 copied_object
//! 24  u64 logical_size             32  u64 blocks_allocated     40  u64 blocks_used
//! 48  u32 block_size               52  u64 create_time_us       60  u64 data_modify_time_us
//! 68  u64 attribute_modify_time_us 76  u64 fs_data_modify_time_us
//! 84  u64 fs_attribute_modify_time_us                           92  [u8; 256] fs_specific
//! 348 u8  integrity scheme         349 u64 reserved (zero)
//! ```
//! The drive stores a digest of this encoding (seed 000 §3.2.2) and MACs only that digest on
//! `getattr`.

use crate::codec::{Reader, Writer};
use crate::types::{ObjectId, Scheme};
use crate::DecodeError;

/// Bytes of the uninterpreted file-system attribute (seed 002 Table 5).
pub const FS_SPECIFIC_BYTES: usize = 256;

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Attributes {
    pub access_control_version: u64,
    pub nearby_object: ObjectId,
    pub copied_object: ObjectId,
    pub logical_size: u64,
    pub blocks_allocated: u64,
    pub blocks_used: u64,
    pub block_size: u32,
    pub create_time_us: u64,
    pub data_modify_time_us: u64,
    pub attribute_modify_time_us: u64,
    pub fs_data_modify_time_us: u64,
    pub fs_attribute_modify_time_us: u64,
    pub fs_specific: [u8; FS_SPECIFIC_BYTES],
    pub scheme: Scheme,
}

impl Default for Attributes {
    fn default() -> Self {
        Attributes {
            access_control_version: 0,
            nearby_object: ObjectId(0),
            copied_object: ObjectId(0),
            logical_size: 0,
            blocks_allocated: 0,
            blocks_used: 0,
            block_size: 0,
            create_time_us: 0,
            data_modify_time_us: 0,
            attribute_modify_time_us: 0,
            fs_data_modify_time_us: 0,
            fs_attribute_modify_time_us: 0,
            fs_specific: [0; FS_SPECIFIC_BYTES],
            scheme: Scheme::Tree,
        }
    }
}

/// Which attributes a `setattr` (or `create`) changes. NASD-maintained fields
/// (`copied_object`, `blocks_used`, `block_size`, the NASD timestamps) cannot be set.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    pub const ACCESS_CONTROL_VERSION: AttrMask = AttrMask(1);
    pub const NEARBY_OBJECT: AttrMask = AttrMask(2);
    pub const LOGICAL_SIZE: AttrMask = AttrMask(4);
    pub const BLOCKS_ALLOCATED: AttrMask = AttrMask(8);
    pub const FS_DATA_MODIFY_TIME: AttrMask = AttrMask(16);
    pub const FS_ATTRIBUTE_MODIFY_TIME: AttrMask = AttrMask(32);
    pub const FS_SPECIFIC: AttrMask = AttrMask(64);
    pub const ALL: AttrMask = AttrMask(127);

    pub fn has(self, m: AttrMask) -> bool {
        self.0 & m.0 != 0
    }
    pub fn with(self, m: AttrMask) -> AttrMask {
        AttrMask(self.0 | m.0)
    }
    pub fn from_bits(b: u32) -> Result<Self, DecodeError> {
        if b & !Self::ALL.0 != 0 {
            return Err(DecodeError::BadValue("attribute mask"));
        }
        Ok(AttrMask(b))
    }
}

impl Attributes {
    /// The file's modify time as a file system shows it: the time a `utimes` set
    /// (`fs_data_modify_time_us`), unless data was written after that.
    pub fn file_mtime_us(&self) -> u64 {
        if self.fs_attribute_modify_time_us != 0
            && self.data_modify_time_us <= self.fs_attribute_modify_time_us
        {
            self.fs_data_modify_time_us
        } else {
            self.data_modify_time_us
        }
    }

    pub const BYTES: usize = 357;

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(Self::BYTES);
        self.put(&mut w);
        w.into_vec()
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b);
        let a = Self::get(&mut r)?;
        r.finish("attributes")?;
        Ok(a)
    }
    pub(crate) fn put(&self, w: &mut Writer) {
        w.u64(self.access_control_version);
        w.u64(self.nearby_object.0);
        w.u64(self.copied_object.0);
        w.u64(self.logical_size);
        w.u64(self.blocks_allocated);
        w.u64(self.blocks_used);
        w.u32(self.block_size);
        w.u64(self.create_time_us);
        w.u64(self.data_modify_time_us);
        w.u64(self.attribute_modify_time_us);
        w.u64(self.fs_data_modify_time_us);
        w.u64(self.fs_attribute_modify_time_us);
        w.bytes(&self.fs_specific);
        w.u8(self.scheme as u8);
        w.u64(0);
    }
    pub(crate) fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let a = Attributes {
            access_control_version: r.u64("acv")?,
            nearby_object: ObjectId(r.u64("nearby")?),
            copied_object: ObjectId(r.u64("copied")?),
            logical_size: r.u64("logical size")?,
            blocks_allocated: r.u64("blocks allocated")?,
            blocks_used: r.u64("blocks used")?,
            block_size: r.u32("block size")?,
            create_time_us: r.u64("create time")?,
            data_modify_time_us: r.u64("data mtime")?,
            attribute_modify_time_us: r.u64("attr mtime")?,
            fs_data_modify_time_us: r.u64("fs data mtime")?,
            fs_attribute_modify_time_us: r.u64("fs attr mtime")?,
            fs_specific: r.array("fs specific")?,
            scheme: Scheme::from_u8(r.u8("scheme")?)?,
        };
        if r.u64("reserved")? != 0 {
            return Err(DecodeError::BadValue("reserved attribute bytes"));
        }
        Ok(a)
    }
}
