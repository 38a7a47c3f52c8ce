//! The untrusted store: what a drive holds for one file, behind a trait (requirements B.3).
//!
//! The integrity schemes ([`crate::eint`]) are pure state machines that read and write a file's
//! ciphertext blocks and its side metadata through [`UntrustedStore`]. [`MemStore`] is the
//! in-memory implementation the tests, the lab and the attack tests use (its fields are public so
//! a test can play the dishonest drive); the client later implements the trait over a data object
//! and a side object on drives.

use std::collections::BTreeMap;

/// One item of side metadata (the per-file side object of B.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetaKey {
    /// The encoded counter intervals ([`crate::counters`]).
    Counters,
    /// A Merkle node: level 0 holds leaves; a node at `(level, index)` covers blocks
    /// `index·2^level .. (index+1)·2^level` ([`crate::merkle`]).
    Node { level: u8, index: u64 },
}

/// A file's untrusted storage. Nothing read from it is believed until checked against the
/// trusted record.
pub trait UntrustedStore {
    type Error: std::error::Error + Send + Sync + 'static;

    /// The stored ciphertext of block `index`, if any.
    fn read_block(&self, index: u64) -> Result<Option<Vec<u8>>, Self::Error>;
    fn write_block(&mut self, index: u64, ciphertext: &[u8]) -> Result<(), Self::Error>;
    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>, Self::Error>;
    fn write_meta(&mut self, key: MetaKey, value: &[u8]) -> Result<(), Self::Error>;
    fn delete_meta(&mut self, key: MetaKey) -> Result<(), Self::Error>;
    /// Bytes of side metadata held: the "untrusted storage for integrity" metric of seed 003 §7.
    fn integrity_bytes_stored(&self) -> Result<u64, Self::Error>;
}

/// An in-memory [`UntrustedStore`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemStore {
    pub blocks: BTreeMap<u64, Vec<u8>>,
    pub meta: BTreeMap<MetaKey, Vec<u8>>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }
}

impl UntrustedStore for MemStore {
    type Error = std::convert::Infallible;

    fn read_block(&self, index: u64) -> Result<Option<Vec<u8>>, Self::Error> {
        Ok(self.blocks.get(&index).cloned())
    }
    fn write_block(&mut self, index: u64, ciphertext: &[u8]) -> Result<(), Self::Error> {
        self.blocks.insert(index, ciphertext.to_vec());
        Ok(())
    }
    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>, Self::Error> {
        Ok(self.meta.get(&key).cloned())
    }
    fn write_meta(&mut self, key: MetaKey, value: &[u8]) -> Result<(), Self::Error> {
        self.meta.insert(key, value.to_vec());
        Ok(())
    }
    fn delete_meta(&mut self, key: MetaKey) -> Result<(), Self::Error> {
        self.meta.remove(&key);
        Ok(())
    }
    fn integrity_bytes_stored(&self) -> Result<u64, Self::Error> {
        Ok(self.meta.values().map(|v| v.len() as u64).sum())
    }
}
