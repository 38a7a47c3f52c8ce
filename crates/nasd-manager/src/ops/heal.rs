//! The cluster calls: drives registered and listed, damaged ranges repaired, files scrubbed,
//! drives replaced, the cluster's health.

use super::{admin_only, Handle};
use crate::service::{Caller, Manager};
use crate::MgrResult;
use nasd_proto::manager::{calls, Call, ClusterStatus, DriveStatus, ScrubReport};
use std::sync::Arc;

impl Handle for calls::DriveAdd {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        admin_only(c, "registering a drive")?;
        let master = (!self.master_key_file.is_empty()).then_some(self.master_key_file.as_str());
        m.add_drive(&self.addr, &self.drive_key_file, master).await
    }
}

impl Handle for calls::DriveList {
    async fn handle(self, m: &Arc<Manager>, _: &Caller) -> MgrResult<Vec<DriveStatus>> {
        m.drive_statuses()
    }
}

impl Handle for calls::Repair {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        let q = self;
        m.repair(c, &q.path, q.component as usize, q.offset, q.len)
            .await
            .map(drop)
    }
}

impl Handle for calls::Scrub {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<ScrubReport> {
        admin_only(c, Self::NAME)?;
        m.scrub_path(c, &self.path, self.repair).await
    }
}

impl Handle for calls::Status {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<ClusterStatus> {
        admin_only(c, Self::NAME)?;
        m.cluster_status(self.recount)
    }
}

impl Handle for calls::DriveReplace {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        admin_only(c, Self::NAME)?;
        m.drive_replace(self.old, self.new)
    }
}
