//! Identifiers, protection options (seed 002 Table 7), rights, key types (Table 6), integrity
//! schemes and digest suites: the small closed vocabularies every message uses.

use crate::codec::{Reader, Writer};
use crate::DecodeError;
use std::fmt;

macro_rules! id_newtype {
    ($(#[$m:meta])* $name:ident($t:ty)) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
        pub struct $name(pub $t);
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_newtype!(
    /// A drive's worldwide-unique name (seed 002 §2.4: "drive name").
    DriveId(u64)
);
id_newtype!(
    /// A partition number on one drive (seed 002 Table 2).
    PartitionId(u16)
);
id_newtype!(
    /// An object identifier, unique within its partition (seed 002 Table 1).
    ObjectId(u64)
);

impl fmt::LowerHex for DriveId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

/// The well-known objects of seed 002 Table 4, present in every partition. Ordinary objects are
/// numbered from [`ObjectId::FIRST_ORDINARY`] up.
impl ObjectId {
    /// Wildcard in a capability: "any object of the partition", used for `create`.
    pub const ANY: ObjectId = ObjectId(0);
    /// Drive Control: clock, capacity, extensions, bytes allocated (read-only, generated).
    pub const DRIVE_CONTROL: ObjectId = ObjectId(1);
    /// Partition Control: size, bytes used, object counts (read-only, generated).
    pub const PARTITION_CONTROL: ObjectId = ObjectId(2);
    /// Partition Contents: the identifiers of the partition's objects (read-only, generated).
    pub const PARTITION_CONTENTS: ObjectId = ObjectId(3);
    /// First Object: an ordinary object created empty with every partition.
    pub const FIRST_OBJECT: ObjectId = ObjectId(4);
    /// Identifiers below this are reserved for well-known objects.
    pub const FIRST_ORDINARY: ObjectId = ObjectId(16);
    /// Never an object on any drive (a reserved identifier no drive creates): a file
    /// manager's name for a layout component that has no object yet, because its drive was
    /// down or full when the file was laid out. Such a component is stale until rebuilt.
    pub const ABSENT: ObjectId = ObjectId(15);

    /// Whether this is one of the generated, read-only control objects.
    pub fn is_control(self) -> bool {
        (1..=3).contains(&self.0)
    }
}

/// Which key authorizes a request (seed 002 Table 6 and Fig 1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum KeyType {
    Master = 0,
    Drive = 1,
    Partition = 2,
    /// The partition's current working key, or its previous one: the drive tries both.
    Working = 3,
    Capability = 4,
}

impl KeyType {
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            0 => Self::Master,
            1 => Self::Drive,
            2 => Self::Partition,
            3 => Self::Working,
            4 => Self::Capability,
            _ => return Err(DecodeError::BadValue("key type")),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Master => "master",
            Self::Drive => "drive",
            Self::Partition => "partition",
            Self::Working => "working",
            Self::Capability => "capability",
        }
    }
}

/// Protection options of seed 002 Table 7 as a set of bits.
///
/// The set is kept *closed* under implication ([`Protection::normalized`]): asking for data
/// integrity implies argument integrity, and privacy of data implies privacy of arguments and
/// integrity of data. "Protection `a` meets minimum `b`" is then plain set inclusion.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Protection(u8);

impl Protection {
    pub const NONE: Protection = Protection(0);
    pub const INTEGRITY_ARGS: Protection = Protection(1);
    pub const INTEGRITY_DATA: Protection = Protection(2 | 1);
    pub const PRIVACY_ARGS: Protection = Protection(4 | 1);
    pub const PRIVACY_DATA: Protection = Protection(8 | 4 | 2 | 1);
    pub const PRIVACY_CAPABILITY: Protection = Protection(16 | 1);
    const ALL_BITS: u8 = 31;

    pub fn bits(self) -> u8 {
        self.0
    }
    /// Decodes and closes under implication; unknown bits are malformed.
    pub fn from_bits(bits: u8) -> Result<Self, DecodeError> {
        if bits & !Self::ALL_BITS != 0 {
            return Err(DecodeError::BadValue("protection bits"));
        }
        Ok(Protection(bits).normalized())
    }
    pub fn normalized(self) -> Self {
        let mut b = self.0;
        if b & 8 != 0 {
            b |= 4 | 2;
        }
        if b & (2 | 4 | 16) != 0 {
            b |= 1;
        }
        Protection(b)
    }
    pub fn union(self, o: Protection) -> Protection {
        Protection(self.0 | o.0).normalized()
    }
    /// True when every option in `min` is also in `self`.
    pub fn meets(self, min: Protection) -> bool {
        self.0 & min.0 == min.0
    }
    pub fn integrity_args(self) -> bool {
        self.0 & 1 != 0
    }
    pub fn integrity_data(self) -> bool {
        self.0 & 2 != 0
    }
    pub fn privacy_args(self) -> bool {
        self.0 & 4 != 0
    }
    pub fn privacy_data(self) -> bool {
        self.0 & 8 != 0
    }
    pub fn privacy_capability(self) -> bool {
        self.0 & 16 != 0
    }
    /// The level names the benchmark and CLI use.
    pub fn parse(s: &str) -> Option<Protection> {
        let mut p = Protection::NONE;
        for part in s.split(',') {
            p = p.union(match part.trim() {
                "none" => Protection::NONE,
                "integrity-args" => Protection::INTEGRITY_ARGS,
                "integrity-data" => Protection::INTEGRITY_DATA,
                "privacy-args" => Protection::PRIVACY_ARGS,
                "privacy-data" => Protection::PRIVACY_DATA,
                "privacy-capability" => Protection::PRIVACY_CAPABILITY,
                _ => return None,
            });
        }
        Some(p)
    }
    /// The strongest single level name contained in the set (for display).
    pub fn level_name(self) -> &'static str {
        if self.privacy_data() {
            "privacy-data"
        } else if self.privacy_args() {
            "privacy-args"
        } else if self.integrity_data() {
            "integrity-data"
        } else if self.integrity_args() {
            "integrity-args"
        } else {
            "none"
        }
    }
}

impl fmt::Debug for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names = vec![];
        if self.privacy_data() {
            names.push("privacy-data");
        } else if self.integrity_data() {
            names.push("integrity-data");
        }
        if self.privacy_args() && !self.privacy_data() {
            names.push("privacy-args");
        }
        if self.privacy_capability() {
            names.push("privacy-capability");
        }
        if names.is_empty() {
            names.push(if self.integrity_args() {
                "integrity-args"
            } else {
                "none"
            });
        }
        write!(f, "{}", names.join(","))
    }
}

/// Rights a capability grants (seed 002 §2.4: "capability's rights authorize requested
/// operation"). One bit per object operation of Table 1.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rights(pub u32);

impl Rights {
    pub const READ: Rights = Rights(1);
    pub const WRITE: Rights = Rights(2);
    pub const GETATTR: Rights = Rights(4);
    pub const SETATTR: Rights = Rights(8);
    pub const CREATE: Rights = Rights(16);
    pub const REMOVE: Rights = Rights(32);
    pub const FASTCOPY: Rights = Rights(64);
    pub const FLUSH: Rights = Rights(128);
    pub const BLOCKSREQUIRED: Rights = Rights(256);
    pub const ALL: Rights = Rights(511);
    const NAMES: [(&'static str, Rights); 9] = [
        ("read", Self::READ),
        ("write", Self::WRITE),
        ("getattr", Self::GETATTR),
        ("setattr", Self::SETATTR),
        ("create", Self::CREATE),
        ("remove", Self::REMOVE),
        ("fastcopy", Self::FASTCOPY),
        ("flush", Self::FLUSH),
        ("blocksrequired", Self::BLOCKSREQUIRED),
    ];

    pub fn contains(self, r: Rights) -> bool {
        self.0 & r.0 == r.0
    }
    pub fn union(self, r: Rights) -> Rights {
        Rights(self.0 | r.0)
    }
    pub fn from_bits(bits: u32) -> Result<Rights, DecodeError> {
        if bits & !Self::ALL.0 != 0 {
            return Err(DecodeError::BadValue("rights bits"));
        }
        Ok(Rights(bits))
    }
    /// Parses `read,write,getattr` (or `all`).
    pub fn parse(s: &str) -> Option<Rights> {
        let mut r = Rights::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "all" {
                r = Rights::ALL;
                continue;
            }
            r = r.union(Self::NAMES.iter().find(|(n, _)| *n == part)?.1);
        }
        Some(r)
    }
}

impl fmt::Display for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(_, r)| self.contains(*r))
            .map(|(n, _)| *n)
            .collect();
        write!(
            f,
            "{}",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(",")
            }
        )
    }
}

impl fmt::Debug for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rights({self})")
    }
}

/// Per-object integrity scheme (seed 000 §3, DESIGN.md's table).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum Scheme {
    /// Basic MAC: nothing stored; every read MACs every byte.
    Mac = 1,
    /// HierMAC (seed 000 §3.2): one stored digest per block.
    Digest = 2,
    /// AdHash over 256-byte sub-blocks (seed 000 §3.3): one 256-bit sum per block.
    Incremental = 3,
    /// Merkle tree over 1 KiB chunks; the drive hashes no data on reads.
    Tree = 4,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [
        Scheme::Mac,
        Scheme::Digest,
        Scheme::Incremental,
        Scheme::Tree,
    ];
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            1 => Self::Mac,
            2 => Self::Digest,
            3 => Self::Incremental,
            4 => Self::Tree,
            _ => return Err(DecodeError::BadValue("integrity scheme")),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Mac => "mac",
            Self::Digest => "digest",
            Self::Incremental => "incremental",
            Self::Tree => "tree",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.name() == s)
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Digest and MAC primitives of a drive, fixed when the drive is initialized.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum Suite {
    /// BLAKE3, keyed BLAKE3 as the MAC (default).
    Blake3 = 1,
    /// SHA-256, HMAC-SHA-256 as the MAC: the seeds' SHA-based comparison.
    Sha256 = 2,
}

impl Suite {
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            1 => Self::Blake3,
            2 => Self::Sha256,
            _ => return Err(DecodeError::BadValue("digest suite")),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Blake3 => "blake3",
            Self::Sha256 => "sha256",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "blake3" => Some(Self::Blake3),
            "sha256" => Some(Self::Sha256),
            _ => None,
        }
    }
}

/// Largest object, and so the end of any region, the protocol allows (2^50 bytes = 1 PiB):
/// every block, chunk and sub-block index and every offset computed from a region then stays
/// far from `u64` overflow. Drives refuse larger regions; verifiers reject replies claiming them.
pub const OBJECT_BYTES_MAX: u64 = 1 << 50;

/// A byte range `[offset, offset + len)` of an object.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Region {
    pub offset: u64,
    pub len: u64,
}

impl Region {
    /// Every byte an object can have: what a key of the hierarchy, or a whole-object
    /// capability, allows.
    pub const WHOLE: Region = Region {
        offset: 0,
        len: u64::MAX,
    };

    pub const fn new(offset: u64, len: u64) -> Self {
        Self { offset, len }
    }
    /// Exclusive end, or `None` when it would overflow `u64`.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.len)
    }
    /// Whether the region ends within [`OBJECT_BYTES_MAX`].
    pub fn within_object_max(&self) -> bool {
        self.end().is_some_and(|e| e <= OBJECT_BYTES_MAX)
    }
    /// Whether `inner` lies wholly inside `self` (seed 002 §2.4: "proper subregion").
    pub fn contains(&self, inner: &Region) -> bool {
        match (self.end(), inner.end()) {
            (Some(e), Some(ie)) => inner.offset >= self.offset && ie <= e,
            _ => false,
        }
    }
    pub(crate) fn put(&self, w: &mut Writer) {
        w.u64(self.offset);
        w.u64(self.len);
    }
    pub(crate) fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let reg = Region {
            offset: r.u64("region offset")?,
            len: r.u64("region len")?,
        };
        if reg.end().is_none() {
            return Err(DecodeError::BadValue("region overflows u64"));
        }
        Ok(reg)
    }
}

/// Bytes of an Ed25519 public key.
pub const WRITER_KEY_BYTES: usize = 32;
/// Bytes of an Ed25519 signature.
pub const WRITER_SIGNATURE_BYTES: usize = 64;

/// An Ed25519 public key that a capability names as the only writer of its object (seed 001
/// §3.3.1, scheme 1; requirements B.4): the drive stores a write under that capability only
/// when this key signed it, and holds nothing that could forge such a signature.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriterPublicKey(pub [u8; WRITER_KEY_BYTES]);

impl fmt::Debug for WriterPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriterPublicKey({self})")
    }
}

impl fmt::Display for WriterPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A writer's Ed25519 signature over a data-changing request (`nasd_crypto::wsig` builds the
/// message it covers). Public: it proves who wrote, and reveals nothing secret.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriterSignature(pub [u8; WRITER_SIGNATURE_BYTES]);

impl fmt::Debug for WriterSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriterSignature(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

/// A request nonce (seed 002 §2.2 "Clocks"): microseconds since the Unix epoch on the sender's
/// loosely synchronized clock, and 64 random bits so two requests in one microsecond differ.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Nonce {
    pub time_us: u64,
    pub random: u64,
}

impl Nonce {
    pub const BYTES: usize = 16;
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.time_us.to_le_bytes());
        b[8..].copy_from_slice(&self.random.to_le_bytes());
        b
    }
    pub(crate) fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Nonce {
            time_us: r.u64("nonce time")?,
            random: r.u64("nonce random")?,
        })
    }
}
