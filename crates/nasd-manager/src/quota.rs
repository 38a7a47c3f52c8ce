//! Quota escrow (seed 002 §3.2): per-user limits on the bytes of files a user owns, kept
//! although writers go straight to the drives. When a client asks for a write capability that
//! may extend a file by X bytes (`extend_by`), the manager escrows X against the file owner's
//! quota Q for the capability's lifetime — refusing with `QuotaExceeded` when used U plus
//! escrowed E plus X would pass Q — and mints capabilities whose regions end where the escrow
//! does, so the drive itself refuses a write past it (seed 002 §2.4 check 7,
//! `RegionOutsideCapability`). When the capability is returned, committed or expires, the
//! manager looks at the file's new size, charges it (U += new − old) and lets the escrow go.
//!
//! Choices, and why:
//! - **What counts**: logical file sizes (what `stat` shows), of files (not directories,
//!   symbolic links or extended attributes), charged to the file's owner whoever writes. Not
//!   bytes on drives: a layout's parity and a sparse file's holes are the cluster's policy,
//!   not the user's doing, and logical sizes are what the manager can know without asking
//!   every drive. A staged upload's objects exist beside the content they replace until the
//!   commit, so an upload escrows all of its bytes (seed 002's "current size" of its fresh
//!   objects is 0); a copy-on-write change of a striped file starts from the file's size.
//! - **Where state lives**: a file's charge is a column of its inode and the user's usage the
//!   sum of those, changed in the same store transaction as whatever changes the file
//!   (commit, unlink, rename over it, chown, truncate), so usage is right after any crash.
//!   Escrows live in the store too: an upload's in its staged record (gone with the record,
//!   and holding nothing once its capabilities expired), a committed file's — in-place writes
//!   under a write lease, exclusive creates, truncations in flight — in `escrows`, settled by
//!   measuring the file once its capabilities are dead: at `ReturnCapability` (which revokes
//!   them), or [`ESCROW_SETTLE_GRACE_MS`] after they expire, by the background task, also
//!   after a manager restart.
//! - **Regions**: for a layout over several objects the escrowed logical end is converted per
//!   component ([`nasd_ec::Layout::component_bound`]); parity layouts escrow whole groups,
//!   since their writers read and rewrite partial groups whole.
//! - **Refusals**: only growth is refused: a writer over quota (an admin lowered the limit)
//!   may still rewrite bytes within the file. The manager refuses rather than blocks (seed
//!   002 lets it do either); a client retries when escrow comes back.
//! - **Users without a quota** pay nothing on the data path: their capabilities cover whole
//!   objects and no file is measured; the store looks up one row per changing transaction.

use crate::service::{store_err, Caller, Manager};
use crate::store::{FileEscrow, Inode, StagedEscrow, StoreError};
use crate::{now_ms, MgrError, MgrResult};
use nasd_proto::manager::{MgrStatus, QuotaInfo, WRITE_END_UNBOUNDED};
use nasd_proto::Region;

/// How long after a committed file's write capabilities expired its escrow is settled: the
/// drives' clocks may lag the manager's, and a write sent just before the expiry may still be
/// on its way.
pub const ESCROW_SETTLE_GRACE_MS: u64 = 5_000;
/// Files measured per page when a quota is set (each a drive getattr for one-object files).
pub const RECOUNT_PAGE_FILES: usize = 256;

/// Whether `asked` more bytes fit a limit of `limit` with `used` charged and `escrowed` held
/// (the seed's test: refuse when U + E + X > Q).
pub fn fits(limit: u64, used: u64, escrowed: u64, asked: u64) -> bool {
    used.checked_add(escrowed)
        .and_then(|v| v.checked_add(asked))
        .is_some_and(|total| total <= limit)
}

/// The logical end writes under a grant may reach: `base` plus `extend_by`, widened to what
/// the layout's writes touch (whole groups of a parity layout).
pub fn escrow_end(geometry: &nasd_ec::Layout, base: u64, extend_by: u64) -> u64 {
    geometry.write_bound(base.saturating_add(extend_by))
}

/// One capability region per component for writes below `write_end` (seed 002 §3.2: "a
/// capability which enables writing to the object with maximum offset equal to the escrowed
/// size"), or whole objects when no quota bounds them.
pub fn regions(geometry: &nasd_ec::Layout, write_end: u64) -> Vec<Region> {
    (0..geometry.components())
        .map(|c| match write_end {
            WRITE_END_UNBOUNDED => Region::WHOLE,
            end => Region::new(0, geometry.component_bound(c, end)),
        })
        .collect()
}

/// `n` bytes for people: exact, with a binary-prefixed approximation from 1 KiB on.
pub fn human(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{n} B ({v:.1} {unit})")
}

/// What a write grant under a quota may do: how far writes reach, and until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteBound {
    /// Logical end of the writes ([`WRITE_END_UNBOUNDED`] without a quota).
    pub end: u64,
    /// The capabilities' expiry, Unix ms.
    pub expiry_ms: u64,
}

impl Manager {
    /// The write grant's expiry if minted now.
    pub(crate) fn write_expiry(&self) -> u64 {
        now_ms() + self.policy.write_cap_ttl_ms
    }

    /// A grant no quota bounds, expiring a write capability's lifetime from now.
    pub(crate) fn unbounded(&self) -> WriteBound {
        WriteBound {
            end: WRITE_END_UNBOUNDED,
            expiry_ms: self.write_expiry(),
        }
    }

    /// Whether user `uid` has a quota (one store lookup).
    pub(crate) fn has_quota(&self, uid: u32) -> MgrResult<bool> {
        Ok(self
            .st()
            .quota(uid)
            .map_err(|e| store_err(e, "quota"))?
            .is_some())
    }

    /// A store error for `path`, naming the user and the figures when it is a quota refusal.
    pub(crate) fn quota_err(&self, e: StoreError, path: &str) -> MgrError {
        match e {
            StoreError::QuotaExceeded {
                uid,
                limit,
                used,
                escrowed,
                asked,
            } => {
                let user = self
                    .st()
                    .user_by_uid(uid)
                    .ok()
                    .flatten()
                    .map_or_else(|| uid.to_string(), |u| u.name);
                MgrError::new(
                    MgrStatus::QuotaExceeded,
                    format!(
                        "{path}: {user}'s quota is {}: {} used, {} escrowed by writes in \
                         flight, {} more asked",
                        human(limit),
                        human(used),
                        human(escrowed),
                        human(asked)
                    ),
                )
            }
            e => store_err(e, path),
        }
    }

    /// Refuses early, before drive work, when `owner`'s quota has no room for `asked` bytes
    /// now (the store checks again, atomically, when the escrow is recorded).
    pub(crate) fn precheck(&self, owner: u32, asked: u64, path: &str) -> MgrResult<()> {
        if asked == 0 {
            return Ok(());
        }
        let st = self.st();
        let Some(q) = st.quota(owner).map_err(|e| store_err(e, path))? else {
            return Ok(());
        };
        let escrowed = st
            .escrowed(owner, now_ms())
            .map_err(|e| store_err(e, path))?;
        drop(st);
        if fits(q.limit_bytes, q.used_bytes, escrowed, asked) {
            return Ok(());
        }
        Err(self.quota_err(
            StoreError::QuotaExceeded {
                uid: owner,
                limit: q.limit_bytes,
                used: q.used_bytes,
                escrowed,
                asked,
            },
            path,
        ))
    }

    /// The escrow for a staged upload of `owner`'s file in layout `geometry` whose writes start
    /// from `base` bytes and may add `extend_by` (`None` when the owner has no quota), and the
    /// bound its capabilities get.
    pub(crate) fn staged_escrow(
        &self,
        owner: u32,
        geometry: &str,
        base: u64,
        extend_by: u64,
    ) -> MgrResult<(Option<StagedEscrow>, WriteBound)> {
        if !self.has_quota(owner)? {
            return Ok((None, self.unbounded()));
        }
        let geo = crate::striping::geometry_of(geometry)?;
        let bound = WriteBound {
            end: escrow_end(&geo, base, extend_by),
            expiry_ms: self.write_expiry(),
        };
        let e = StagedEscrow {
            uid: owner,
            base,
            end: bound.end,
            expires_ms: bound.expiry_ms,
        };
        Ok((Some(e), bound))
    }

    /// Escrow for writes to the committed file `i` (its owner's quota) that may grow it from
    /// `size` by `extend_by` bytes, until `expiry_ms`: recorded before any capability is
    /// minted, so a crash leaves it to be settled. Unbounded when the owner has no quota.
    pub(crate) fn escrow_in_place(
        &self,
        path: &str,
        i: &Inode,
        size: u64,
        extend_by: u64,
        expiry_ms: u64,
    ) -> MgrResult<WriteBound> {
        if !self.has_quota(i.uid)? {
            return Ok(WriteBound {
                end: WRITE_END_UNBOUNDED,
                expiry_ms,
            });
        }
        let l = i
            .layout
            .as_ref()
            .ok_or_else(|| MgrError::new(MgrStatus::IsADirectory, path.to_string()))?;
        let geo = crate::striping::geometry_of(&l.geometry)?;
        let end = escrow_end(&geo, size, extend_by);
        if end <= size {
            // Nothing can grow: writes stay within the file's bytes, and nothing needs
            // settling (an escrow already held keeps its own end and expiry).
            return Ok(WriteBound { end, expiry_ms });
        }
        let e = FileEscrow {
            ino: i.ino,
            uid: i.uid,
            end,
            expires_ms: expiry_ms,
        };
        // The store's guard goes before the error is worded (which reads the store).
        let taken = self.st().escrow_file(&e, now_ms(), extend_by > 0);
        taken.map_err(|e| self.quota_err(e, path))?;
        Ok(WriteBound { end, expiry_ms })
    }

    /// Settles file `ino`: measures it (its capabilities must be dead: revoked, or expired
    /// past [`ESCROW_SETTLE_GRACE_MS`]), charges its size and ends its file escrow when
    /// `end_escrow`. Nothing to do without a quota.
    pub(crate) async fn settle(&self, ino: u64, end_escrow: bool) -> MgrResult<()> {
        let i = self.st().inode(ino).map_err(|e| store_err(e, "inode"))?;
        let Some(i) = i else {
            // Gone: its charge went with it; only an escrow row can be left.
            return self
                .st()
                .settle_file(ino, 0, true)
                .map_err(|e| store_err(e, "inode"));
        };
        if i.charged.is_none() {
            return self
                .st()
                .settle_file(ino, 0, end_escrow)
                .map_err(|e| store_err(e, "inode"));
        }
        let (size, _) = self.file_times(&i).await?;
        self.st()
            .settle_file(ino, size, end_escrow)
            .map_err(|e| store_err(e, "inode"))
    }

    /// Settles every file escrow whose capabilities expired more than
    /// [`ESCROW_SETTLE_GRACE_MS`] ago (the background task runs it; it also finishes what a
    /// manager restart interrupted). Returns how many are left for later (a drive down).
    pub async fn settle_expired_escrows(&self) -> usize {
        let due = match self
            .st()
            .file_escrows_expired(now_ms().saturating_sub(ESCROW_SETTLE_GRACE_MS))
        {
            Ok(d) => d,
            Err(e) => {
                tracing::error!("reading file escrows: {e}");
                return 0;
            }
        };
        let mut left = 0;
        for e in due {
            match self.settle(e.ino, true).await {
                Ok(()) => tracing::debug!(ino = e.ino, "escrow settled"),
                Err(err) => {
                    // Retried at every health check while a drive is down: quietly.
                    tracing::debug!(ino = e.ino, "escrow not settled yet: {}", err.detail);
                    left += 1;
                }
            }
        }
        left
    }

    /// `QuotaSet` (admins): gives `user` a limit of `limit` bytes, or removes their quota.
    /// Setting one (new or not) counts the user's files again: each linked file is measured
    /// and its charge set unless something settled it meanwhile, so a count can never undo a
    /// concurrent commit. Files that cannot be measured (a drive down) keep their charge,
    /// and the reply says so: set it again later.
    pub async fn quota_set(
        &self,
        c: &Caller,
        user: &str,
        limit: Option<u64>,
    ) -> MgrResult<Vec<QuotaInfo>> {
        if !c.admin {
            return Err(MgrError::new(
                MgrStatus::PermissionDenied,
                "setting a quota needs an admin",
            ));
        }
        let uid = self.uid_of(user)?;
        let Some(limit) = limit else {
            self.st()
                .remove_quota(uid)
                .map_err(|e| store_err(e, user))?;
            tracing::info!(admin = %c.name, user, "quota removed");
            return Ok(vec![]);
        };
        let new = self
            .st()
            .set_quota(uid, limit)
            .map_err(|e| store_err(e, user))?;
        tracing::info!(admin = %c.name, user, limit, new, "quota set");
        let missed = self.recount(uid).await?;
        if missed > 0 {
            return Err(MgrError::new(
                MgrStatus::DriveUnreachable,
                format!(
                    "{user}: quota set, but {missed} files could not be measured (a drive \
                     did not answer) and keep their old charge; set it again when the drives \
                     are back"
                ),
            ));
        }
        self.quota_get(c, user)
    }

    /// Measures every linked file `uid` owns and charges its size (see
    /// [`Manager::quota_set`]); returns how many could not be measured.
    async fn recount(&self, uid: u32) -> MgrResult<u64> {
        let mut after = 0;
        let mut missed = 0;
        loop {
            let page = self
                .st()
                .files_owned(uid, after, RECOUNT_PAGE_FILES)
                .map_err(|e| store_err(e, "quota"))?;
            let Some(last) = page.last() else {
                return Ok(missed);
            };
            after = last.ino;
            for i in page {
                // An upload's reserved inode is charged at its commit.
                let named = self.st().links(&i).map_err(|e| store_err(e, "quota"))? > 0;
                let Some(seen) = i.charged.filter(|_| named) else {
                    continue;
                };
                match self.file_times(&i).await {
                    Ok((size, _)) => {
                        self.st()
                            .settle_charge(i.ino, seen, size)
                            .map_err(|e| store_err(e, "quota"))?;
                    }
                    Err(e) => {
                        tracing::warn!(ino = i.ino, "quota count: {}", e.detail);
                        missed += 1;
                    }
                }
            }
        }
    }

    /// `QuotaGet`: `user`'s quota (theirs or an admin's to see), or with `""` every quota the
    /// caller may see (all for an admin, else their own).
    pub fn quota_get(&self, c: &Caller, user: &str) -> MgrResult<Vec<QuotaInfo>> {
        let uids: Vec<u32> = if user.is_empty() {
            if c.admin {
                self.st()
                    .quotas()
                    .map_err(|e| store_err(e, "quota"))?
                    .into_iter()
                    .map(|q| q.uid)
                    .collect()
            } else {
                vec![c.uid]
            }
        } else {
            let uid = self.uid_of(user)?;
            if !c.admin && uid != c.uid {
                return Err(MgrError::new(
                    MgrStatus::PermissionDenied,
                    format!("{user}: only an admin sees another user's quota"),
                ));
            }
            vec![uid]
        };
        let now = now_ms();
        let st = self.st();
        let mut out = vec![];
        for uid in uids {
            let Some(q) = st.quota(uid).map_err(|e| store_err(e, "quota"))? else {
                continue;
            };
            let name = st
                .user_by_uid(uid)
                .map_err(|e| store_err(e, "quota"))?
                .map_or_else(|| uid.to_string(), |u| u.name);
            out.push(QuotaInfo {
                user: name,
                uid,
                limit: q.limit_bytes,
                used: q.used_bytes,
                escrowed: st.escrowed(uid, now).map_err(|e| store_err(e, "quota"))?,
            });
        }
        Ok(out)
    }

    fn uid_of(&self, user: &str) -> MgrResult<u32> {
        self.st()
            .user_by_name(user)
            .map_err(|e| store_err(e, user))?
            .map(|u| u.uid)
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, user.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_test_refuses_past_the_limit() {
        // U + E + X <= Q passes, one byte more does not.
        assert!(fits(100, 60, 30, 10));
        assert!(!fits(100, 60, 30, 11));
        assert!(fits(0, 0, 0, 0));
        assert!(!fits(0, 0, 0, 1));
        // Over quota already (a lowered limit): nothing more, however little.
        assert!(!fits(10, 20, 0, 1));
        // No overflow lets a request through.
        assert!(!fits(u64::MAX, u64::MAX, 1, 1));
        assert!(!fits(u64::MAX, 1, 1, u64::MAX));
    }

    #[test]
    fn escrow_ends_cover_what_the_layout_writes() {
        let single: nasd_ec::Layout = "single".parse().unwrap();
        assert_eq!(escrow_end(&single, 10, 5), 15);
        assert_eq!(escrow_end(&single, u64::MAX, 5), u64::MAX);
        let rs: nasd_ec::Layout = "rs:2+1/4K".parse().unwrap();
        // A parity layout escrows whole groups (8 KiB here).
        assert_eq!(escrow_end(&rs, 0, 1), 8192);
        assert_eq!(escrow_end(&rs, 8192, 0), 8192);
        assert_eq!(escrow_end(&rs, 8192, 1), 16384);
        let raid0: nasd_ec::Layout = "raid0:2/4K".parse().unwrap();
        assert_eq!(escrow_end(&raid0, 0, 5000), 5000);
    }

    #[test]
    fn regions_are_whole_without_a_quota_and_per_component_with_one() {
        let rs: nasd_ec::Layout = "rs:2+1/4K".parse().unwrap();
        assert_eq!(regions(&rs, WRITE_END_UNBOUNDED), vec![Region::WHOLE; 3]);
        // 8 KiB (one group): each component holds one unit, data or parity.
        assert_eq!(regions(&rs, 8192), vec![Region::new(0, 4096); 3]);
        assert_eq!(regions(&rs, 0), vec![Region::new(0, 0); 3]);
        let single = nasd_ec::Layout::single();
        assert_eq!(regions(&single, 77), vec![Region::new(0, 77)]);
    }

    #[test]
    fn staged_escrows_hold_nothing_once_expired() {
        let e = StagedEscrow {
            uid: 1,
            base: 100,
            end: 150,
            expires_ms: 1000,
        };
        assert_eq!(e.held(999), 50);
        assert_eq!(e.held(1000), 0);
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human(5), "5 B");
        assert_eq!(human(10 << 20), "10485760 B (10.0 MiB)");
        assert_eq!(human(1536), "1536 B (1.5 KiB)");
    }
}
