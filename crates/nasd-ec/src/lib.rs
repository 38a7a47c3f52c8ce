//! nasd's erasure codes and stripe geometry: pure functions, no I/O, no async.
//!
//! A striped file's bytes live in component objects, one per drive, placed by a
//! [`Layout`] (`single`, `raid0:N`, `mirror:N`, `rs:K+M`, `raid6x:K`). The client clerk maps a
//! logical range to per-component object ranges ([`Layout::map`]), and per parity group
//! computes parity ([`ReedSolomon::encode`], [`Raid6x::encode`]), rebuilds lost units
//! ([`ReedSolomon::reconstruct_some`], [`Raid6x::reconstruct_some`]), checks parity
//! ([`Raid6x::check`]) and locates corrupt units of unknown position ([`Raid6x::correct`], seed
//! 004 §4). Everything runs on the region kernels of [`kernel`] (AVX-512 + GFNI, AVX2 or
//! portable, chosen at run time), over GF(2^8) with polynomial 0x11D and generator 2.
//! `docs/ec.md` describes the codes, the geometry byte by byte, and the exhaustive results.
//!
//! # Layout
//!
//! - [`gf`]: the field: log/exp and product tables, inverse, small matrices and their inverses.
//! - [`kernel`]: region kernels (`dot`, `mul_xor`) on three paths, path choice, block-parallel
//!   variants.
//! - [`table`]: seed 004's 32-bit table encoder, simple and cache-aware order.
//! - [`rs`]: `rs:K+M`, systematic Cauchy Reed-Solomon (ISA-L's matrix), MDS.
//! - [`raid6x`]: seed 004's P, Q, R, S code over two stripes: encode, rebuild, check, correct.
//! - [`locate`]: syndrome decoding of up to three corrupt units, per byte or per AES window.
//! - [`analysis`]: exhaustive facts about raid6x's check matrix (dependent column sets, disk
//!   failures), behind the tests and docs/ec.md.
//! - [`layout`]: stripe geometry: codes, parity rotation, addressing, text and byte forms.
//! - [`shards`]: shard-list checks, the (present, wanted) decode-plan cache.
//! - [`error`]: typed errors per operation family.

pub mod analysis;
pub mod error;
pub mod gf;
pub mod kernel;
pub mod layout;
pub mod locate;
pub mod raid6x;
pub mod rs;
pub mod shards;
pub mod table;

pub use error::{CodeError, CorrectError, PathError, ShardError};
pub use kernel::Path;
pub use layout::{Code, Extent, GroupUnit, Layout, LayoutError, Role};
pub use raid6x::{Check, Correction, Engine, Raid6x, Window};
pub use rs::ReedSolomon;
pub use table::TableOrder;
