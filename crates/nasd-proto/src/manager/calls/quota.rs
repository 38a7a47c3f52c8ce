//! The quota calls (manager protocol 10; seed 002 §3.2): per-user quotas set and shown.
//! ```text
//! QuotaSet  := string user, option u64 limit
//! Quotas    := u32 n, n x (string user, u32 uid, u64 limit, u64 used, u64 escrowed)
//! ```

use super::one_string;
use crate::codec::{Reader, Writer};
use crate::manager::codec::{get_count, get_opt, get_str, put_opt, put_str};
use crate::manager::{Wire, LIST_ENTRIES_MAX};
use crate::DecodeError;

/// Sets `user`'s quota to `limit` bytes of files they own, or removes it (`None`); admins
/// only. A new quota counts the user's files first. Answered with the quota as set (none
/// when removed).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct QuotaSet {
    pub user: String,
    pub limit: Option<u64>,
}

impl Wire for QuotaSet {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.user);
        put_opt(w, &self.limit, |w, l| w.u64(*l));
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(QuotaSet {
            user: get_str(r, "user")?,
            limit: get_opt(r, "has limit", |r| r.u64("limit"))?,
        })
    }
}

one_string! {
    /// The quota of `user` (their own, or an admin's for anyone), or with `""` every quota
    /// the caller may see; answered with a [`QuotaInfo`] each.
    QuotaGet { user: "user" }
}

/// One user's quota (seed 002 §3.2): the limit, the bytes of files they own (logical sizes,
/// as of the last settlement), and the bytes escrowed for writes in flight.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct QuotaInfo {
    pub user: String,
    pub uid: u32,
    pub limit: u64,
    pub used: u64,
    pub escrowed: u64,
}

impl Wire for Vec<QuotaInfo> {
    fn put(&self, w: &mut Writer) {
        debug_assert!(self.len() <= LIST_ENTRIES_MAX);
        w.u32(self.len() as u32);
        for q in self {
            put_str(w, &q.user);
            w.u32(q.uid);
            w.u64(q.limit);
            w.u64(q.used);
            w.u64(q.escrowed);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // user (4 + name), uid, limit, used, escrowed.
        let n = get_count(r, 4 + 4 + 3 * 8, "quotas")?;
        let mut qs = Vec::with_capacity(n);
        for _ in 0..n {
            qs.push(QuotaInfo {
                user: get_str(r, "user")?,
                uid: r.u32("uid")?,
                limit: r.u64("limit")?,
                used: r.u64("used")?,
                escrowed: r.u64("escrowed")?,
            });
        }
        Ok(qs)
    }
}
