//! Little-endian, length-checked reading and writing shared by every encoding of this crate.
//!
//! Every decoder here is total: it returns a [`DecodeError`] for any input, never panics, checks a
//! count against both its named maximum and the bytes that remain before it allocates, and refuses
//! trailing bytes, so each value has exactly one encoding.

use thiserror::Error;

/// Why bytes could not be decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("{what}: input ends {needed} bytes early")]
    Truncated { what: &'static str, needed: usize },
    #[error("{what}: {extra} bytes follow the end")]
    Trailing { what: &'static str, extra: usize },
    #[error("{what}: unknown format version {found}")]
    Version { what: &'static str, found: u8 },
    #[error("{what}: count {count} is over the limit {max}")]
    TooMany {
        what: &'static str,
        count: u64,
        max: u64,
    },
    #[error("{what}: {why}")]
    Invalid {
        what: &'static str,
        why: &'static str,
    },
}

/// A cursor over bytes being decoded; `what` names the structure in errors.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { buf, what }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated {
                what: self.what,
                needed: n - self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let b = self.bytes(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Reads a format version byte and checks it.
    pub(crate) fn version(&mut self, expected: u8) -> Result<(), DecodeError> {
        let found = self.u8()?;
        if found != expected {
            return Err(DecodeError::Version {
                what: self.what,
                found,
            });
        }
        Ok(())
    }

    /// Checks that `count` items of `item_bytes` each are allowed and present, before any
    /// allocation sized by `count`.
    pub(crate) fn check_count(
        &self,
        count: u64,
        max: u64,
        item_bytes: usize,
    ) -> Result<usize, DecodeError> {
        if count > max {
            return Err(DecodeError::TooMany {
                what: self.what,
                count,
                max,
            });
        }
        let count = usize::try_from(count).map_err(|_| self.invalid("count does not fit"))?;
        let need = count.saturating_mul(item_bytes);
        if need > self.buf.len() {
            return Err(DecodeError::Truncated {
                what: self.what,
                needed: need - self.buf.len(),
            });
        }
        Ok(count)
    }

    pub(crate) fn invalid(&self, why: &'static str) -> DecodeError {
        DecodeError::Invalid {
            what: self.what,
            why,
        }
    }

    /// Succeeds only if every byte was consumed.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing {
                what: self.what,
                extra: self.buf.len(),
            })
        }
    }
}

/// Hashes `parts` after a domain-separating `label` with BLAKE3. Labels are distinct constants of
/// this crate, so inputs for different purposes never collide.
pub(crate) fn hash_parts(label: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(label);
    for p in parts {
        h.update(p);
    }
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_reports_truncation_trailing_and_limits() {
        let mut r = Reader::new(&[1, 2, 3], "t");
        assert_eq!(r.u16().unwrap(), 0x0201);
        assert_eq!(
            r.u32(),
            Err(DecodeError::Truncated {
                what: "t",
                needed: 3
            })
        );
        let r = Reader::new(&[0; 10], "t");
        assert!(matches!(
            r.check_count(3, 2, 1),
            Err(DecodeError::TooMany { .. })
        ));
        assert!(matches!(
            r.check_count(2, 2, 8),
            Err(DecodeError::Truncated { .. })
        ));
        assert!(r.check_count(u64::MAX, u64::MAX, 1).is_err());
        assert_eq!(
            r.finish(),
            Err(DecodeError::Trailing {
                what: "t",
                extra: 10
            })
        );
    }
}
