//! The S3 access key calls: a user's own keys (or an admin's for anyone), and a gateway's
//! lookup of a key's secret.

use super::Handle;
use crate::service::{Caller, Manager};
use crate::{users, MgrError, MgrResult};
use nasd_proto::manager::{calls, MgrStatus, S3KeyFound, S3KeyMade};
use std::sync::Arc;

impl Handle for calls::S3KeyCreate {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<S3KeyMade> {
        let mut st = m.store.lock().expect("store lock");
        let (access_key_id, secret) = users::s3_key_create(st.as_mut(), c, &self.user)?;
        tracing::info!(by = %c.name, user = %self.user, "S3 key made");
        Ok(S3KeyMade {
            access_key_id,
            secret,
        })
    }
}

impl Handle for calls::S3KeyList {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Vec<(String, u64)>> {
        let st = m.store.lock().expect("store lock");
        users::s3_key_list(st.as_ref(), c, &self.user)
    }
}

impl Handle for calls::S3KeyRevoke {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        let mut st = m.store.lock().expect("store lock");
        users::s3_key_revoke(st.as_mut(), c, &self.user, &self.access_key_id)
    }
}

impl Handle for calls::S3KeySecret {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<S3KeyFound> {
        if c.via.is_some() {
            return Err(MgrError::new(
                MgrStatus::PermissionDenied,
                "a session a gateway opened reads no S3 secrets",
            ));
        }
        let st = m.store.lock().expect("store lock");
        let (user, secret) = users::s3_key_secret(st.as_ref(), c, &self.access_key_id)?;
        Ok(S3KeyFound { user, secret })
    }
}
