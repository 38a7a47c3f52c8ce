//! WIP
pub mod block;
pub mod codec;
pub mod counters;
pub mod eint;
pub mod entropy;
pub mod hctr2;
pub mod keys;
pub mod merkle;
pub mod record;
pub mod sign;
pub mod store;
pub use hpke::rand_core;
