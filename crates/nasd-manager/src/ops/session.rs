//! The session call a logged-in session sends: a gateway's session for another user. Login,
//! challenge and logout concern the connection itself and are the server's.

use super::{joined, Handle};
use crate::service::{Caller, Manager};
use crate::{users, MgrResult};
use nasd_proto::manager::{calls, LoginOk, SessionToken};
use std::sync::Arc;

/// `ActFor`: a gateway's session for `user` (see [`users::act_for`]); logged, since it is
/// the one way in without the user's credential.
impl Handle for calls::ActFor {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<LoginOk> {
        let (mgr, gw, ttl) = (m.clone(), c.clone(), m.policy.session_ttl_ms);
        let name = self.user.clone();
        let via = c.via;
        let ok =
            tokio::task::spawn_blocking(move || users::act_for(&mgr.store, &gw, via, &name, ttl))
                .await
                .map_err(joined)??;
        tracing::info!(gateway = %c.name, user = %self.user, "gateway acts for user");
        Ok(LoginOk {
            uid: ok.caller.uid,
            admin: ok.caller.admin,
            token: SessionToken(ok.token),
            expires_ms: ok.expires_ms,
        })
    }
}
