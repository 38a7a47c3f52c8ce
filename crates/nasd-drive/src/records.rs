//! Records the drive keeps in its metadata database, each starting with a format version byte.
//! Layouts (little-endian) are repeated in `docs/storage.md`.
//!
//! ```text
//! DriveRecord     v1: u8 ver, u64 drive_id, u8 suite, 32B master key, u8 has_drive_key,
//!                     32B drive key, u8 min_protection, u64 capacity_bytes, u64 next_phys
//! PartitionRecord v1: u8 ver, u64 quota_bytes, u64 used_blocks, u64 objects, u8 default_scheme,
//!                     u8 min_protection, u64 next_object, 3 x (u8 present, 32B key)
//!                     [partition, current working, previous working], u64 reserved_blocks
//!                     (the last field absent in records written before it: recounted on open)
//! v2 of both:         the same, each key field 48 bytes: the key sealed under the drive's
//!                     passphrase for its slot (`nasd_crypto::seal`); an absent key is 48 zeros
//! ObjectRecord    v1: u8 ver, 357B attributes, 32B attribute digest
//! BlockEntry      v1: u8 ver, u64 phys, u32 crc32c of the 8 KiB physical block, BlockMeta
//! ```
//! Decoders are total: a record that does not parse is reported as corruption, never a panic.

use nasd_crypto::integrity::BlockMeta;
use nasd_crypto::seal::{KeySeal, SEALED_KEY_BYTES};
use nasd_crypto::{Digest, Key};
use nasd_proto::codec::{Reader, Writer};
use nasd_proto::{Attributes, DecodeError, DriveId, Protection, Scheme, Suite};

const V1: u8 = 1;
/// Records whose keys are sealed under the drive's passphrase.
const V2_SEALED: u8 = 2;

/// Where a record's keys go: in the clear (v1), or sealed for their slot (v2).
fn put_key(w: &mut Writer, k: &Option<Key>, seal: Option<&KeySeal>, slot: &str) {
    match (k, seal) {
        (Some(k), None) => {
            w.u8(1);
            w.bytes(k.expose());
        }
        (Some(k), Some(s)) => {
            w.u8(1);
            w.bytes(&s.seal(slot, k));
        }
        (None, None) => {
            w.u8(0);
            w.bytes(&[0; 32]);
        }
        (None, Some(_)) => {
            w.u8(0);
            w.bytes(&[0; SEALED_KEY_BYTES]);
        }
    }
}

fn get_key(
    r: &mut Reader<'_>,
    seal: Option<&KeySeal>,
    slot: &str,
) -> Result<Option<Key>, DecodeError> {
    let present = r.u8("key present")?;
    let key = match seal {
        None => Key::from_bytes(r.array::<32>("key")?),
        Some(s) => {
            let b = r.array::<SEALED_KEY_BYTES>("sealed key")?;
            if present != 1 {
                Key::from_bytes([0; 32])
            } else {
                s.open(slot, &b)
                    .ok_or(DecodeError::BadValue("sealed key does not open"))?
            }
        }
    };
    match present {
        0 => Ok(None),
        1 => Ok(Some(key)),
        _ => Err(DecodeError::BadValue("key present")),
    }
}

fn version_for(seal: Option<&KeySeal>) -> u8 {
    if seal.is_some() {
        V2_SEALED
    } else {
        V1
    }
}

/// Reads the version byte: v1 (clear keys) only without a seal, v2 (sealed) only with one.
fn check_version(r: &mut Reader<'_>, seal: Option<&KeySeal>) -> Result<(), DecodeError> {
    let v = r.u8("record version")?;
    if v != version_for(seal) {
        return Err(DecodeError::BadValue(if v == V2_SEALED {
            "the record's keys are sealed: the drive needs its passphrase"
        } else {
            "record version"
        }));
    }
    Ok(())
}

#[derive(Clone)]
pub struct DriveRecord {
    pub drive: DriveId,
    pub suite: Suite,
    pub master_key: Key,
    pub drive_key: Option<Key>,
    pub min_protection: Protection,
    pub capacity_bytes: u64,
    /// Physical blocks below this have been handed out at least once.
    pub next_phys: u64,
}

impl DriveRecord {
    /// Encodes the record, its keys sealed when `seal` is given.
    pub fn encode(&self, seal: Option<&KeySeal>) -> Vec<u8> {
        let mut w = Writer::new();
        w.u8(version_for(seal));
        w.u64(self.drive.0);
        w.u8(self.suite as u8);
        match seal {
            None => w.bytes(self.master_key.expose()),
            Some(s) => w.bytes(&s.seal("master", &self.master_key)),
        }
        put_key(&mut w, &self.drive_key, seal, "drive");
        w.u8(self.min_protection.bits());
        w.u64(self.capacity_bytes);
        w.u64(self.next_phys);
        w.into_vec()
    }
    pub fn decode(b: &[u8], seal: Option<&KeySeal>) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b);
        check_version(&mut r, seal)?;
        let d = DriveRecord {
            drive: DriveId(r.u64("drive")?),
            suite: Suite::from_u8(r.u8("suite")?)?,
            master_key: match seal {
                None => Key::from_bytes(r.array("master")?),
                Some(s) => s
                    .open("master", &r.array("sealed master")?)
                    .ok_or(DecodeError::BadValue("sealed key does not open"))?,
            },
            drive_key: get_key(&mut r, seal, "drive")?,
            min_protection: Protection::from_bits(r.u8("min protection")?)?,
            capacity_bytes: r.u64("capacity")?,
            next_phys: r.u64("next phys")?,
        };
        r.finish("drive record")?;
        Ok(d)
    }
}

#[derive(Clone)]
pub struct PartitionRecord {
    pub quota_bytes: u64,
    pub used_blocks: u64,
    /// Blocks its objects reserved and have not used yet: the sum over its objects of
    /// [`ObjectRecord::reservation`] (Table 5 `blocks_allocated`). They count toward the quota
    /// and are held back from other writes as if used.
    pub reserved_blocks: u64,
    pub objects: u64,
    pub default_scheme: Scheme,
    pub min_protection: Protection,
    pub next_object: u64,
    pub partition_key: Option<Key>,
    pub working_current: Option<Key>,
    pub working_previous: Option<Key>,
}

impl PartitionRecord {
    pub fn new(quota_bytes: u64, default_scheme: Scheme) -> Self {
        PartitionRecord {
            quota_bytes,
            used_blocks: 0,
            reserved_blocks: 0,
            objects: 0,
            default_scheme,
            min_protection: Protection::NONE,
            next_object: nasd_proto::ObjectId::FIRST_ORDINARY.0,
            partition_key: None,
            working_current: None,
            working_previous: None,
        }
    }
    /// Encodes the record of partition `id`, its keys sealed when `seal` is given.
    pub fn encode(&self, id: u16, seal: Option<&KeySeal>) -> Vec<u8> {
        let mut w = Writer::new();
        w.u8(version_for(seal));
        w.u64(self.quota_bytes);
        w.u64(self.used_blocks);
        w.u64(self.objects);
        w.u8(self.default_scheme as u8);
        w.u8(self.min_protection.bits());
        w.u64(self.next_object);
        let [ps, wc, wp] = Self::slots(id);
        put_key(&mut w, &self.partition_key, seal, &ps);
        put_key(&mut w, &self.working_current, seal, &wc);
        put_key(&mut w, &self.working_previous, seal, &wp);
        w.u64(self.reserved_blocks);
        w.into_vec()
    }

    /// Blocks counted toward the quota: used and reserved.
    pub fn charged_blocks(&self) -> u64 {
        self.used_blocks + self.reserved_blocks
    }
    /// The seal slots of partition `id`'s keys.
    fn slots(id: u16) -> [String; 3] {
        ["partition", "working-current", "working-previous"].map(|k| format!("partition {id}/{k}"))
    }
    /// The record of partition `id`, and whether it holds its reserved blocks (records
    /// written before that field have none: the caller counts them from the objects).
    pub fn decode(b: &[u8], id: u16, seal: Option<&KeySeal>) -> Result<(Self, bool), DecodeError> {
        let mut r = Reader::new(b);
        check_version(&mut r, seal)?;
        let [ps, wc, wp] = Self::slots(id);
        let mut p = PartitionRecord {
            quota_bytes: r.u64("quota")?,
            used_blocks: r.u64("used")?,
            reserved_blocks: 0,
            objects: r.u64("objects")?,
            default_scheme: Scheme::from_u8(r.u8("scheme")?)?,
            min_protection: Protection::from_bits(r.u8("min protection")?)?,
            next_object: r.u64("next object")?,
            partition_key: get_key(&mut r, seal, &ps)?,
            working_current: get_key(&mut r, seal, &wc)?,
            working_previous: get_key(&mut r, seal, &wp)?,
        };
        let counted = r.remaining() > 0;
        if counted {
            p.reserved_blocks = r.u64("reserved")?;
        }
        r.finish("partition record")?;
        Ok((p, counted))
    }
}

#[derive(Clone, Debug)]
pub struct ObjectRecord {
    pub attrs: Attributes,
    pub attr_digest: Digest,
    /// [`Self::reservation`] as the partition's count last took it (when the record was read
    /// or last put; 0 for a new object), so a put moves the count by the difference.
    pub counted_reservation: u64,
}

impl ObjectRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(1 + Attributes::BYTES + 32);
        v.push(V1);
        v.extend_from_slice(&self.attrs.encode());
        v.extend_from_slice(&self.attr_digest);
        v
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() != 1 + Attributes::BYTES + 32 || b[0] != V1 {
            return Err(DecodeError::BadValue("object record"));
        }
        let attrs = Attributes::decode(&b[1..1 + Attributes::BYTES])?;
        Ok(ObjectRecord {
            counted_reservation: reservation(&attrs),
            attrs,
            attr_digest: b[1 + Attributes::BYTES..].try_into().unwrap(),
        })
    }

    /// Blocks the object reserved beyond those it uses (Table 5: `blocks_allocated` is space
    /// set aside for it; used blocks count once).
    pub fn reservation(&self) -> u64 {
        reservation(&self.attrs)
    }
}

fn reservation(a: &Attributes) -> u64 {
    a.blocks_allocated.saturating_sub(a.blocks_used)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockEntry {
    pub phys: u64,
    pub crc: u32,
    pub meta: BlockMeta,
}

impl BlockEntry {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16 + 2 + 32 * 8);
        v.push(V1);
        v.extend_from_slice(&self.phys.to_le_bytes());
        v.extend_from_slice(&self.crc.to_le_bytes());
        self.meta.encode(&mut v);
        v
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < 13 || b[0] != V1 {
            return Err(DecodeError::BadValue("block entry"));
        }
        Ok(BlockEntry {
            phys: u64::from_le_bytes(b[1..9].try_into().unwrap()),
            crc: u32::from_le_bytes(b[9..13].try_into().unwrap()),
            meta: BlockMeta::decode(&b[13..]).ok_or(DecodeError::BadValue("block meta"))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_record_keeps_its_reserved_blocks_and_older_ones_ask_for_a_count() {
        let mut p = PartitionRecord::new(1 << 20, Scheme::Tree);
        p.used_blocks = 9;
        p.reserved_blocks = 5;
        p.working_current = Some(Key::from_bytes([3; 32]));
        let b = p.encode(1, None);
        let (q, counted) = PartitionRecord::decode(&b, 1, None).unwrap();
        assert!(counted);
        assert_eq!((q.used_blocks, q.reserved_blocks), (9, 5));
        // A record written before the field: decoded, with its count left to the caller.
        let (q, counted) = PartitionRecord::decode(&b[..b.len() - 8], 1, None).unwrap();
        assert!(!counted);
        assert_eq!((q.used_blocks, q.reserved_blocks), (9, 0));
        // Anything else is corruption, never a guess.
        for cut in [1, 4, 7] {
            assert!(PartitionRecord::decode(&b[..b.len() - cut], 1, None).is_err());
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(PartitionRecord::decode(&longer, 1, None).is_err());
    }
}
