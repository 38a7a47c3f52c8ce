//! The callback channel's long poll (seed 002 §3.2, [`crate::callbacks`]).

use super::Handle;
use crate::service::{Caller, Manager};
use crate::{now_ms, MgrResult};
use nasd_proto::manager::{calls, CallbackBreak};
use std::sync::Arc;

impl Handle for calls::WaitBreaks {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Vec<CallbackBreak>> {
        let breaks = m
            .callbacks
            .poll(c.session, self.acked, self.wait_ms, now_ms());
        Ok(breaks.await)
    }
}
