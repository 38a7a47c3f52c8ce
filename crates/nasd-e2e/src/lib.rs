//! WIP
pub mod block;
pub mod codec;
pub mod hctr2;
pub mod keys;
pub use hpke::rand_core;
