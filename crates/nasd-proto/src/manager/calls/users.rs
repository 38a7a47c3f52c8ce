//! The user calls: users (password or key logins), groups and their members, gateways that
//! act for users.
//! ```text
//! UserAdd    := string name, bool admin, option [32] public_key
//! UserPasswd := string name, option [32] public_key
//! Enrollment := u32 uid, bool has_code, [string code], u64 expires_ms
//! Users      := u32 n, n x (string name, u32 uid, bool admin, u32 m, m x string group)
//! ```
//! No call carries a password: a password user's password file is made by their own client
//! through OPAQUE ([`super::session::OpaqueRegisterStart`]), first with the enrollment code
//! `UserAdd` answers.

use super::{no_fields, one_string, two_strings};
use crate::codec::{Reader, Writer};
use crate::manager::codec::{
    get_bool, get_count, get_public_key, get_str, put_public_key, put_str,
};
use crate::manager::{SecretString, Wire, PUBLIC_KEY_BYTES};
use crate::DecodeError;

/// Adds a user (admins), with no keys: with `public_key` the user logs in by that key;
/// without, the reply carries a one-time enrollment code with which the user's own client
/// makes their password file (OPAQUE) at their first login.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UserAdd {
    pub name: String,
    pub admin: bool,
    pub public_key: Option<[u8; PUBLIC_KEY_BYTES]>,
}

impl Wire for UserAdd {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.name);
        w.u8(self.admin as u8);
        put_public_key(w, &self.public_key);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(UserAdd {
            name: get_str(r, "name")?,
            admin: get_bool(r, "admin")?,
            public_key: get_public_key(r)?,
        })
    }
}

/// With `public_key`, makes `name` a key user with that key (the user or an admin); without,
/// replaces the user's password file with a fresh enrollment code (an admin's reset: the
/// user sets a new password with it). Ends every session of the user, live connections
/// included. (A user changes their own password through OPAQUE registration.)
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UserPasswd {
    pub name: String,
    pub public_key: Option<[u8; PUBLIC_KEY_BYTES]>,
}

impl Wire for UserPasswd {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.name);
        put_public_key(w, &self.public_key);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(UserPasswd {
            name: get_str(r, "name")?,
            public_key: get_public_key(r)?,
        })
    }
}

/// What `UserAdd` and `UserPasswd` answer: the user's uid and, for a password user, the
/// one-time code their client enrolls with before `expires_ms` (shown once; the manager
/// keeps only its hash).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Enrollment {
    pub uid: u32,
    pub code: Option<SecretString>,
    pub expires_ms: u64,
}

impl Wire for Enrollment {
    fn put(&self, w: &mut Writer) {
        w.u32(self.uid);
        match &self.code {
            Some(c) => {
                w.u8(1);
                put_str(w, c);
            }
            None => w.u8(0),
        }
        w.u64(self.expires_ms);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let uid = r.u32("uid")?;
        let code = match get_bool(r, "has code")? {
            true => Some(SecretString(get_str(r, "enrollment code")?)),
            false => None,
        };
        Ok(Enrollment {
            uid,
            code,
            expires_ms: r.u64("expires")?,
        })
    }
}

no_fields! {
    /// Every user, answered with a [`UserInfo`] each.
    UserList
}

/// A user as `UserList` shows them.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UserInfo {
    pub name: String,
    pub uid: u32,
    pub admin: bool,
    pub groups: Vec<String>,
}

impl Wire for Vec<UserInfo> {
    fn put(&self, w: &mut Writer) {
        w.u32(self.len() as u32);
        for u in self {
            put_str(w, &u.name);
            w.u32(u.uid);
            w.u8(u.admin as u8);
            w.u32(u.groups.len() as u32);
            for g in &u.groups {
                put_str(w, g);
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = get_count(r, 13, "users")?;
        let mut us = Vec::with_capacity(n);
        for _ in 0..n {
            let name = get_str(r, "name")?;
            let uid = r.u32("uid")?;
            let admin = get_bool(r, "admin")?;
            let g = get_count(r, 4, "groups")?;
            let mut groups = Vec::with_capacity(g);
            for _ in 0..g {
                groups.push(get_str(r, "group")?);
            }
            us.push(UserInfo {
                name,
                uid,
                admin,
                groups,
            });
        }
        Ok(us)
    }
}

one_string! {
    /// Adds group `name`; admins only.
    GroupAdd { name: "name" }
}

two_strings! {
    /// Makes `user` a member of `group`; admins only.
    GroupMember { group: "group", user: "user" }
}

two_strings! {
    /// Ends `user`'s membership of `group` (one added with [`GroupMember`], not a primary
    /// group); admins only. The member's wrap of the group's secret goes, and the group's
    /// next writer makes it a new key pair (manager protocol 21).
    GroupMemberRemove { group: "group", user: "user" }
}

/// Marks user `name` a gateway (`on`) or not; admins only.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UserGateway {
    pub name: String,
    pub on: bool,
}

impl Wire for UserGateway {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.name);
        w.u8(self.on as u8);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(UserGateway {
            name: get_str(r, "name")?,
            on: get_bool(r, "on")?,
        })
    }
}
