//! The extended attribute calls.

use super::Handle;
use crate::callbacks::{self, Changed};
use crate::service::{Caller, Manager};
use crate::MgrResult;
use nasd_proto::manager::{calls, Xattrs};
use std::sync::Arc;

impl Handle for calls::Getxattrs {
    const DELEGATED: bool = true;
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Xattrs> {
        let (stat, xattrs) = m.getxattrs(c, &self.path).await?;
        Ok(Xattrs { stat, xattrs })
    }
}

impl Handle for calls::Setxattr {
    const DELEGATED: bool = true;
    fn touched(&self, m: &Manager, c: &Caller) -> Vec<Changed> {
        callbacks::file(m, c, &self.path)
    }
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        m.setxattr(c, &self.path, &self.name, self.value.as_deref())
    }
}
