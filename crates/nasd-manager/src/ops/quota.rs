//! The quota calls.

use super::Handle;
use crate::service::{Caller, Manager};
use crate::MgrResult;
use nasd_proto::manager::{calls, QuotaInfo};
use std::sync::Arc;

impl Handle for calls::QuotaSet {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Vec<QuotaInfo>> {
        m.quota_set(c, &self.user, self.limit).await
    }
}

impl Handle for calls::QuotaGet {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Vec<QuotaInfo>> {
        m.quota_get(c, &self.user)
    }
}
