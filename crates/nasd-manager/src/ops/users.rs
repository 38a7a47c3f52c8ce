//! The user calls: users, groups and memberships (admins), credentials, gateways. A change
//! of credential or of a gateway flag ends sessions, so it moves the manager's session epoch
//! and every live connection checks its own before its next request.

use super::{admin_only, Handle};
use crate::service::{db, Caller, Manager};
use crate::store::StoreError;
use crate::{users, MgrError, MgrResult};
use nasd_proto::manager::{calls, Enrollment, MgrStatus, UserInfo};
use std::sync::Arc;

/// `user add` (admins): an account with no keys; a password user's answer carries the
/// one-time enrollment code their own client sets their password with.
impl Handle for calls::UserAdd {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Enrollment> {
        admin_only(c, "adding a user")?;
        let mut st = m.store.lock().expect("store lock");
        let made = match self.public_key {
            Some(pk) => Enrollment {
                uid: users::add_key_user(st.as_mut(), &self.name, &pk, self.admin)?,
                code: None,
                expires_ms: 0,
            },
            None => {
                let (uid, code) = users::add_user(st.as_mut(), &self.name, self.admin)?;
                Enrollment {
                    uid,
                    code: Some(code.code),
                    expires_ms: code.expires_ms,
                }
            }
        };
        tracing::info!(admin = %c.name, user = %self.name, "user added");
        Ok(made)
    }
}

/// `user passwd`: a new key, or (without one) an enrollment code that replaces the user's
/// password file (an admin's reset, or a user's own); every session of the user ends, live
/// connections included (their next request finds the session gone).
impl Handle for calls::UserPasswd {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<Enrollment> {
        if c.via.is_some() {
            return Err(MgrError::new(
                MgrStatus::PermissionDenied,
                "a session a gateway opened cannot change credentials",
            ));
        }
        let code = crate::login::EnrollmentCode::generate(crate::now_ms());
        let new = match &self.public_key {
            Some(pk) => users::NewCredential::PublicKey(pk),
            None => users::NewCredential::Enrollment(&code),
        };
        let uid = users::set_credential(&m.store, c, &self.name, new)?;
        m.sessions_changed();
        tracing::info!(by = %c.name, user = %self.name, "credential changed");
        Ok(match self.public_key {
            Some(_) => Enrollment {
                uid,
                code: None,
                expires_ms: 0,
            },
            None => Enrollment {
                uid,
                code: Some(code.code),
                expires_ms: code.expires_ms,
            },
        })
    }
}

impl Handle for calls::UserList {
    async fn handle(self, m: &Arc<Manager>, _: &Caller) -> MgrResult<Vec<UserInfo>> {
        let st = m.store.lock().expect("store lock");
        let mut out = vec![];
        for u in st.users().map_err(db)? {
            let mut groups = vec![];
            for g in st.groups_of(u.uid).map_err(db)? {
                groups.push(
                    st.group_by_gid(g)
                        .map_err(db)?
                        .map(|g| g.name)
                        .unwrap_or_else(|| g.to_string()),
                );
            }
            out.push(UserInfo {
                name: u.name,
                uid: u.uid,
                admin: u.admin,
                groups,
            });
        }
        Ok(out)
    }
}

impl Handle for calls::GroupAdd {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        admin_only(c, "adding a group")?;
        users::check_account_name(&self.name)?;
        let added = m.store.lock().expect("store lock").add_group(&self.name);
        added.map(drop).map_err(|e| match e {
            StoreError::Exists => MgrError::new(MgrStatus::Exists, format!("group {}", self.name)),
            e => db(e),
        })
    }
}

impl Handle for calls::GroupMember {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        admin_only(c, "changing group membership")?;
        let mut st = m.store.lock().expect("store lock");
        let g = st
            .group_by_name(&self.group)
            .map_err(db)?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownGroup, self.group.clone()))?;
        let u = st
            .user_by_name(&self.user)
            .map_err(db)?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, self.user.clone()))?;
        st.add_member(g.gid, u.uid).map_err(db)?;
        drop(st);
        m.sessions_changed();
        tracing::info!(admin = %c.name, group = %self.group, user = %self.user, "group member added");
        Ok(())
    }
}

/// `group member --remove` (admins): the member's wrap of the group's secret goes, and the
/// group's next writer (a member's client) makes it a new key pair.
impl Handle for calls::GroupMemberRemove {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        admin_only(c, "changing group membership")?;
        m.group_member_remove(c, &self.group, &self.user)?;
        m.sessions_changed();
        Ok(())
    }
}

/// `user gateway NAME on|off` (admins): turning it off ends the sessions it opened, live
/// connections included.
impl Handle for calls::UserGateway {
    async fn handle(self, m: &Arc<Manager>, c: &Caller) -> MgrResult<()> {
        admin_only(c, "making a user a gateway")?;
        {
            let mut st = m.store.lock().expect("store lock");
            users::set_gateway(st.as_mut(), &self.name, self.on)?;
        }
        m.sessions_changed();
        let on = self.on;
        tracing::info!(admin = %c.name, user = %self.name, on, "gateway flag set");
        Ok(())
    }
}
