//! Typed errors, one enum per operation family: building a code ([`CodeError`]), running it on
//! shard buffers ([`ShardError`]), correcting errors of unknown position ([`CorrectError`]), and
//! layouts ([`crate::layout::LayoutError`], in its module). Kernel path choice has
//! [`crate::kernel::PathError`].

pub use crate::kernel::PathError;

/// A code's parameters are out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    /// `rs:K+M` needs K >= 1, M >= 1 and K + M <= [`crate::rs::RS_SHARDS_MAX`].
    #[error("rs:{data}+{parity}: need at least 1 data and 1 parity shard and at most {max} shards in all")]
    RsShape {
        /// K.
        data: usize,
        /// M.
        parity: usize,
        /// The largest K + M.
        max: usize,
    },
    /// `raid6x:K` needs 1 <= K <= [`crate::raid6x::RAID6X_K_MAX`].
    #[error("raid6x:{k}: K must be 1..={max} (from K = 43 two data and two parity erasures can be undecodable, docs/ec.md)")]
    Raid6xK {
        /// K.
        k: usize,
        /// The largest K.
        max: usize,
    },
    /// The codec was pinned to a kernel path this CPU cannot run.
    #[error(transparent)]
    Path(#[from] PathError),
}

/// Shard buffers handed to encode, decode or check do not fit the code, or too few survive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// A list (data, parity, shards, `present`, `wanted`) has the wrong number of entries.
    #[error("{what}: expected {expected} entries, got {got}")]
    Count {
        /// Which list.
        what: &'static str,
        /// Entries the code needs.
        expected: usize,
        /// Entries given.
        got: usize,
    },
    /// Shards of one stripe must all have one length.
    #[error("shard {index} is {got} bytes, shard 0 is {expected}")]
    Length {
        /// The shard (in code order: data, then parity).
        index: usize,
        /// The length of shard 0.
        expected: usize,
        /// Its length.
        got: usize,
    },
    /// More shards are missing than the code tolerates.
    #[error("{missing} shards missing; the code rebuilds at most {tolerated}")]
    TooFew {
        /// Shards not present.
        missing: usize,
        /// Erasures the code corrects.
        tolerated: usize,
    },
    /// The erasure pattern is within the count but its columns of the check matrix are
    /// dependent (raid6x for K >= 11, docs/ec.md), so the lost bytes are not determined.
    #[error("erasure pattern {missing:?} is not decodable by this code")]
    Undecodable {
        /// The missing units.
        missing: Vec<usize>,
    },
    /// AES-aware correction needs units whose length is a multiple of the AES block.
    #[error("units of {len} bytes are not a whole number of {block}-byte AES blocks")]
    NotBlockAligned {
        /// Unit length.
        len: usize,
        /// The block.
        block: usize,
    },
}

/// Error correction at unknown positions refused to write, and why. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorrectError {
    /// The buffers do not fit the code.
    #[error(transparent)]
    Shards(#[from] ShardError),
    /// More than one set of `errors` units explains the syndromes of a window equally well.
    #[error("bytes {offset}..{end}: {candidates}+ sets of {errors} corrupt units fit the parity equally; not guessing")]
    Ambiguous {
        /// First byte of the window (column) within the units.
        offset: usize,
        /// End of the window.
        end: usize,
        /// Size of the candidate sets.
        errors: usize,
        /// Candidate sets found (the search stops at 2).
        candidates: usize,
    },
    /// No set of at most three corrupt units explains the syndromes of a window.
    #[error(
        "bytes {offset}..{end}: more than three corrupt units, or errors that do not fit the code"
    )]
    Uncorrectable {
        /// First byte of the window.
        offset: usize,
        /// End of the window.
        end: usize,
    },
}
