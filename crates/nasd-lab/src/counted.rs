//! Counted, not only computed: runs nasd-crypto's integrity schemes on the model's requests with
//! their cost meter, so `nasd lab model` can print the count beside the model (issue 4 §2).
//!
//! nasd-crypto's schemes are not in the workspace yet; until they are, [`Meter::new`] returns
//! `None` and the model experiment says so.

use crate::error::LabError;
use crate::model::{Op, Scheme, Side, ADD_COST_CALLS, SUB_COST_CALLS};

/// What the meter counted for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Compression calls (64-byte blocks), MAC included.
    pub calls: u64,
    /// Modular additions.
    pub adds: u64,
    /// Modular subtractions.
    pub subs: u64,
}

impl Counted {
    /// Calls plus combine work at the seed's prices.
    pub fn compressions(&self) -> f64 {
        self.calls as f64 + ADD_COST_CALLS * self.adds as f64 + SUB_COST_CALLS * self.subs as f64
    }
}

/// Runs instrumented schemes.
#[derive(Debug)]
pub struct Meter {
    _private: (),
}

impl Meter {
    /// The meter, if the instrumented schemes are available.
    pub fn new() -> Option<Meter> {
        None
    }

    /// Runs `scheme` for `side` doing `op` on `len` bytes at `offset` and returns its count, or
    /// `None` if the scheme has no instrumented implementation.
    pub fn count(
        &self,
        _scheme: Scheme,
        _side: Side,
        _op: Op,
        _offset: u64,
        _len: u64,
    ) -> Result<Option<Counted>, LabError> {
        Ok(None)
    }

    /// Which implementation is counted.
    pub fn describe(&self) -> String {
        String::new()
    }

    /// Why counts and model differ where they do.
    pub fn explain(&self) -> Vec<String> {
        Vec::new()
    }
}
