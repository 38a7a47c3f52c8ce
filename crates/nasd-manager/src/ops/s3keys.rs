//! The S3 access key calls: a user's own keys (or an admin's for anyone), and a gateway's
//! lookup of a key's secret.

use super::Handle;
use crate::service::{Caller, Manager};
use crate::{users, MgrResult};
use nasd_proto::manager::{calls, S3KeyFound, S3KeyMade};
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

/// Revoking a user's last key also ends the sessions gateways opened for them (the store does
/// both in one transaction), so live connections check theirs.
impl Handle for calls::S3KeyRevoke {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        {
            let mut st = m.store.lock().expect("store lock");
            users::s3_key_revoke(st.as_mut(), c, &self.user, &self.access_key_id)?;
        }
        m.sessions_changed();
        Ok(())
    }
}

impl Handle for calls::S3KeySecret {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<S3KeyFound> {
        let st = m.store.lock().expect("store lock");
        let (user, secret) = users::s3_key_secret(st.as_ref(), c, &self.access_key_id)?;
        Ok(S3KeyFound { user, secret })
    }
}
