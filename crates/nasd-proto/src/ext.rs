//! Drive extensions (seed 002 §2.2, §3.4): extended operations beyond Tables 1-3, named by
//! operation codes from [`EXTENSION_OPCODE_MIN`] up, that a drive lists in its Drive Control
//! object (and its `inquiry` reply) so clients can discover them before they use them.
//!
//! An extension request is an ordinary request: it carries a capability and its arguments
//! travel in the request's `args`, so the request MAC covers them and the drive runs every
//! check of seed 002 §2.4 on it, as for a read ("an extension that delivers data to a client
//! must require that the client hold a valid capability for reading the given object", §2.2).
//!
//! The first extension is informed prefetching (seed 002 §4.6, after TIP, Patterson 95):
//! [`EXT_PREFETCH`], opcodes `hint` (64) and `consume` (65). A client hints the reads it will
//! make of one object, in order; the drive fetches the hinted blocks ahead into its block
//! cache; the client tells the drive how many hinted reads it has consumed, so the drive can
//! drop them and fetch further ("the client periodically notifies the drive of the reads it
//! has issued").
//!
//! ```text
//! extension table (end of DriveInfo) := u16 n (<= EXTENSIONS_MAX), n × entry
//! entry   := u8 opcode (>= 64), u16 version, blob name (<= EXTENSION_NAME_BYTES_MAX, UTF-8)
//! hint    args := u8 replace (0/1), u16 n (<= HINT_REGIONS_MAX), n × Region
//!         reply := u64 first_index, u64 next_index
//! consume args := u64 consumed (hinted reads with index below it are done)
//!         reply := u64 prefetched_blocks, u64 cache_hit_blocks, u64 dropped_blocks
//! ```

use crate::codec::{Reader, Writer};
use crate::DecodeError;

/// Operation codes at and above this are extensions (seed 002 §3.4: "extensions ... are
/// described by their numeric RPC operation code").
pub const EXTENSION_OPCODE_MIN: u8 = 64;
/// Most entries in a drive's extension table.
pub const EXTENSIONS_MAX: usize = 32;
/// Longest extension name, bytes.
pub const EXTENSION_NAME_BYTES_MAX: usize = 64;
/// Most regions in one `hint`: 2048 × 16 bytes fits a request header (`HEADER_BYTES_MAX`).
pub const HINT_REGIONS_MAX: usize = 2048;
/// Header bytes besides the args: the fixed fields, a sealed capability, the digest, an AEAD tag.
const HEADER_OTHER_BYTES_MAX: usize = 512;
const _: () =
    assert!(3 + HINT_REGIONS_MAX * 16 + HEADER_OTHER_BYTES_MAX <= crate::message::HEADER_BYTES_MAX);

/// The informed-prefetching extension's name in the table, and its version.
pub const EXT_PREFETCH: &str = "prefetch";
/// Version of [`EXT_PREFETCH`] this build speaks.
pub const EXT_PREFETCH_VERSION: u16 = 1;

/// One entry of a drive's extension table: an operation code the drive serves, the version of
/// the extension it belongs to, and the extension's name.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Extension {
    pub opcode: u8,
    pub version: u16,
    pub name: String,
}

impl Extension {
    pub(crate) fn put(&self, w: &mut Writer) {
        debug_assert!(self.opcode >= EXTENSION_OPCODE_MIN);
        debug_assert!(self.name.len() <= EXTENSION_NAME_BYTES_MAX);
        w.u8(self.opcode);
        w.u16(self.version);
        w.blob(self.name.as_bytes());
    }

    pub(crate) fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let opcode = r.u8("extension opcode")?;
        if opcode < EXTENSION_OPCODE_MIN {
            return Err(DecodeError::BadValue("extension opcode below 64"));
        }
        let version = r.u16("extension version")?;
        let name = String::from_utf8(r.blob(EXTENSION_NAME_BYTES_MAX, "extension name")?.to_vec())
            .map_err(|_| DecodeError::BadValue("extension name utf-8"))?;
        Ok(Extension {
            opcode,
            version,
            name,
        })
    }
}

pub(crate) fn put_table(w: &mut Writer, table: &[Extension]) {
    debug_assert!(table.len() <= EXTENSIONS_MAX);
    w.u16(table.len() as u16);
    for e in table {
        e.put(w);
    }
}

pub(crate) fn get_table(r: &mut Reader<'_>) -> Result<Vec<Extension>, DecodeError> {
    let n = r.u16("extension count")? as usize;
    if n > EXTENSIONS_MAX {
        return Err(DecodeError::TooLong("extensions"));
    }
    (0..n).map(|_| Extension::get(r)).collect()
}

/// Whether `table` lists every operation of extension `name` at `version`, given its opcodes.
pub fn supports(table: &[Extension], name: &str, version: u16, opcodes: &[u8]) -> bool {
    opcodes.iter().all(|op| {
        table
            .iter()
            .any(|e| e.opcode == *op && e.name == name && e.version == version)
    })
}

/// What one `consume` reply reports about the caller's own hint stream (never another's).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct StreamCounters {
    /// Blocks the drive fetched ahead for this stream.
    pub prefetched_blocks: u64,
    /// Block reads of this stream's object served from the cache.
    pub cache_hit_blocks: u64,
    /// Prefetched blocks dropped before any read used them (hints replaced, cache pressure).
    pub dropped_blocks: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_round_trips_and_refuses_what_is_out_of_bounds() {
        let t = vec![
            Extension {
                opcode: 64,
                version: 1,
                name: "prefetch".into(),
            },
            Extension {
                opcode: 65,
                version: 1,
                name: "prefetch".into(),
            },
        ];
        let mut w = Writer::new();
        put_table(&mut w, &t);
        let b = w.into_vec();
        let mut r = Reader::new(&b);
        assert_eq!(get_table(&mut r).unwrap(), t);
        r.finish("table").unwrap();
        assert!(supports(&t, EXT_PREFETCH, 1, &[64, 65]));
        assert!(!supports(&t, EXT_PREFETCH, 2, &[64, 65]));
        assert!(!supports(&t[..1], EXT_PREFETCH, 1, &[64, 65]));

        // an opcode below the extension range is malformed
        let mut bad = b.clone();
        bad[2] = 5;
        assert_eq!(
            get_table(&mut Reader::new(&bad)),
            Err(DecodeError::BadValue("extension opcode below 64"))
        );
        // more entries than the limit, before anything is read for them
        let mut w = Writer::new();
        w.u16(EXTENSIONS_MAX as u16 + 1);
        assert_eq!(
            get_table(&mut Reader::new(&w.into_vec())),
            Err(DecodeError::TooLong("extensions"))
        );
        // a name over the limit
        let mut w = Writer::new();
        w.u16(1);
        w.u8(64);
        w.u16(1);
        w.blob(&[b'a'; EXTENSION_NAME_BYTES_MAX + 1]);
        assert!(get_table(&mut Reader::new(&w.into_vec())).is_err());
        // truncated anywhere
        for cut in 0..b.len() {
            assert!(get_table(&mut Reader::new(&b[..cut])).is_err(), "cut {cut}");
        }
    }
}
