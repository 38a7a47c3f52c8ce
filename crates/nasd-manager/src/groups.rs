//! Groups' key pairs at the manager (issue 21 §5; seed 001 §3.2: "each member of the group
//! needs a copy of the group's private key"). A group's secret is wrapped to its members and
//! to nobody else, admins included: only a member's client makes a key pair or wraps one,
//! only to members, and only a member who holds the current secret wraps it to another. The
//! manager checks who a wrap is for (its header names the group, version and member, bound
//! into the wrap); it cannot check what a wrap holds, which it never opens.
//!
//! A removed member's wrap goes with their membership and the group is due a new key pair
//! (`rekey`): writers wrap no new file key to the old public key, and the next member's client
//! that writes for the group makes the next version, with a *link* (the old secret wrapped to
//! the new public key) so members, and members who join later, still open what was wrapped
//! to the group before. A group none of whose members holds the current secret (an admin made
//! it before schema 14, whose wraps the migration deleted) is due a new key pair too, made by
//! any member, without a link.

use crate::service::{denied, store_err, Caller, Manager};
use crate::store::{MetaStore, StoreError};
use crate::{MgrError, MgrResult};
use nasd_e2e::keys::GroupKeyWrap;
use nasd_proto::manager::{
    calls, GroupKeyInfo, MgrStatus, GROUP_KEY_LINKS_MAX, GROUP_WRAP_BYTES_MAX, KEY_LIST_MAX,
};

impl Manager {
    /// Gives a group its next key pair, or wraps of its current one to members who have none
    /// (module docs): members only, wraps to members only.
    pub fn group_key_set(&self, c: &Caller, set: &calls::GroupKeySet) -> MgrResult<()> {
        let group = set.group.as_str();
        let mut st = self.st();
        let g = st
            .group_by_name(group)
            .map_err(|e| store_err(e, group))?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownGroup, group.to_string()))?;
        let members = st.members_of(g.gid).map_err(|e| store_err(e, group))?;
        if !members.contains(&c.uid) {
            return Err(denied(
                group,
                "only a member makes or wraps a group's key (an admin who is not one holds none)",
            ));
        }
        for (uid, wrap) in &set.wraps {
            check_wrap(g.gid, set.version, *uid, wrap, &members)
                .map_err(|why| invalid(group, why))?;
        }
        let has = st.group_key(g.gid).map_err(|e| store_err(e, group))?;
        let holds = st
            .group_wrap(g.gid, c.uid)
            .map_err(|e| store_err(e, group))?
            .is_some();
        let (link, wraps) = if set.version == has.version.saturating_add(1) {
            if !set.wraps.iter().any(|(u, _)| *u == c.uid) {
                return Err(invalid(
                    group,
                    "a new key pair carries its maker's own wrap",
                ));
            }
            let link = match (has.public, holds) {
                (None, _) => None,
                (Some(_), true) => {
                    check_link(g.gid, has.version, &set.link).map_err(|why| invalid(group, why))?;
                    Some(set.link.as_slice())
                }
                (Some(_), false) if anyone_holds(st.as_ref(), g.gid, &members, group)? => {
                    return Err(denied(
                        group,
                        "a new key pair is made by a member who holds the current one (its link \
                         keeps what was wrapped to the group readable)",
                    ));
                }
                (Some(_), false) => None,
            };
            if link.is_none() && !set.link.is_empty() {
                return Err(invalid(
                    group,
                    "a link to a version the caller does not hold",
                ));
            }
            (link, set.wraps.clone())
        } else if set.version == has.version && has.public == Some(set.public) {
            if !holds {
                return Err(denied(
                    group,
                    "only a member who holds the group's key wraps it to others",
                ));
            }
            if !set.link.is_empty() {
                return Err(invalid(group, "a link comes only with a new key pair"));
            }
            // A member's wrap is replaced only by that member (`GroupWrapSet`).
            let mut fresh = Vec::with_capacity(set.wraps.len());
            for (uid, wrap) in &set.wraps {
                if st
                    .group_wrap(g.gid, *uid)
                    .map_err(|e| store_err(e, group))?
                    .is_none()
                {
                    fresh.push((*uid, wrap.clone()));
                }
            }
            (None, fresh)
        } else {
            return Err(MgrError::new(
                MgrStatus::Conflict,
                format!(
                    "{group}: key version {} is neither the group's current {} nor the next",
                    set.version, has.version
                ),
            ));
        };
        st.set_group_key(g.gid, set.version, &set.public, link, &wraps)
            .map_err(|e| match e {
                StoreError::Conflict => MgrError::new(
                    MgrStatus::Conflict,
                    format!("{group}: the group's key pair changed meanwhile"),
                ),
                e => store_err(e, group),
            })?;
        if set.version > has.version {
            tracing::info!(group, version = set.version, by = %c.name, "group key pair made");
        }
        Ok(())
    }

    /// Replaces the caller's own wraps of group secrets (gid, version, wrap; a key rotation):
    /// only of a group's current version, only where the caller is a member holding a wrap.
    pub fn group_wrap_set(&self, c: &Caller, wraps: &[(u32, u32, Vec<u8>)]) -> MgrResult<()> {
        let mut st = self.st();
        for (gid, version, wrap) in wraps {
            let what = format!("gid {gid}");
            let has = st.group_key(*gid).map_err(|e| store_err(e, &what))?;
            let members = st.members_of(*gid).map_err(|e| store_err(e, &what))?;
            let holds = st
                .group_wrap(*gid, c.uid)
                .map_err(|e| store_err(e, &what))?;
            let (Some(public), Some(_), true) = (has.public, holds, members.contains(&c.uid))
            else {
                return Err(denied(&what, "no wrap of this group's key to replace"));
            };
            if *version != has.version {
                return Err(MgrError::new(
                    MgrStatus::Conflict,
                    format!("{what}: key version {version} is not the group's current one"),
                ));
            }
            check_wrap(*gid, *version, c.uid, wrap, &members).map_err(|why| invalid(&what, why))?;
            st.set_group_key(*gid, has.version, &public, None, &[(c.uid, wrap.clone())])
                .map_err(|e| store_err(e, &what))?;
        }
        Ok(())
    }

    /// Key pairs of the groups `gids` and `names` (module docs): version, public half, the
    /// caller's wrap (a member's, never to a gateway's session), whether the caller is a
    /// member and whether a new key pair is due, the members lacking a wrap (for a member),
    /// and the links.
    pub fn group_key_get(
        &self,
        c: &Caller,
        gids: &[u32],
        names: &[String],
    ) -> MgrResult<Vec<GroupKeyInfo>> {
        let st = self.st();
        let mut all = gids.to_vec();
        for n in names {
            if let Some(g) = st.group_by_name(n).map_err(|e| store_err(e, n))? {
                all.push(g.gid);
            }
        }
        let mut out = Vec::with_capacity(all.len());
        for gid in all {
            let Some(g) = st.group_by_gid(gid).map_err(|e| store_err(e, "group"))? else {
                continue;
            };
            let e = |e| store_err(e, &g.name);
            let key = st.group_key(gid).map_err(e)?;
            let members = st.members_of(gid).map_err(e)?;
            let member = members.contains(&c.uid);
            let wrap = match (member, c.via) {
                (true, None) => st.group_wrap(gid, c.uid).map_err(e)?,
                _ => None,
            };
            let mut missing = vec![];
            let held = if member {
                let mut held = false;
                for &uid in &members {
                    if st.group_wrap(gid, uid).map_err(e)?.is_some() {
                        held = true;
                    } else if missing.len() < KEY_LIST_MAX
                        && st.user_keys(uid).map_err(e)?.is_some()
                    {
                        missing.push(uid);
                    }
                }
                held
            } else {
                key.public.is_some() && anyone_holds(st.as_ref(), gid, &members, &g.name)?
            };
            let links = st.group_key_links(gid, GROUP_KEY_LINKS_MAX).map_err(e)?;
            out.push(GroupKeyInfo {
                gid,
                name: g.name,
                version: key.version,
                public: key.public,
                wrap: wrap.unwrap_or_default(),
                member,
                rekey: key.public.is_some() && (key.rekey || !held),
                missing,
                links,
            });
        }
        Ok(out)
    }

    /// Ends `user`'s membership of `group` (admins): their wrap goes, and the group is due a
    /// new key pair. A primary group is not ended this way.
    pub fn group_member_remove(&self, c: &Caller, group: &str, user: &str) -> MgrResult<()> {
        let mut st = self.st();
        let g = st
            .group_by_name(group)
            .map_err(|e| store_err(e, group))?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownGroup, group.to_string()))?;
        let u = st
            .user_by_name(user)
            .map_err(|e| store_err(e, user))?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, user.to_string()))?;
        if u.gid == g.gid {
            return Err(invalid(
                group,
                &format!("it is {user}'s primary group, which stays theirs"),
            ));
        }
        st.remove_member(g.gid, u.uid).map_err(|e| match e {
            StoreError::NotFound => invalid(group, &format!("{user} is not a member")),
            e => store_err(e, group),
        })?;
        tracing::info!(admin = %c.name, group, user, "group member removed; the group is due a new key pair");
        Ok(())
    }
}

fn invalid(what: &str, why: &str) -> MgrError {
    MgrError::new(MgrStatus::InvalidArgument, format!("{what}: {why}"))
}

/// Whether any member of `gid` holds a wrap of its current secret.
fn anyone_holds(st: &dyn MetaStore, gid: u32, members: &[u32], group: &str) -> MgrResult<bool> {
    for &uid in members {
        if st
            .group_wrap(gid, uid)
            .map_err(|e| store_err(e, group))?
            .is_some()
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `wrap` is a wrap of version `version` of group `gid`'s secret for member `uid`,
/// by its header (which its encryption binds): never for a non-member, never a link.
fn check_wrap(
    gid: u32,
    version: u32,
    uid: u32,
    wrap: &[u8],
    members: &[u32],
) -> Result<(), &'static str> {
    if !members.contains(&uid) {
        return Err("a wrap for a user who is not a member");
    }
    if wrap.len() > GROUP_WRAP_BYTES_MAX {
        return Err("a wrap too long");
    }
    let w = GroupKeyWrap::decode(wrap).map_err(|_| "a wrap that does not decode")?;
    if w.gid != gid || w.group_key_version != version || w.member_uid != uid {
        return Err("a wrap whose header names another group, version or member");
    }
    Ok(())
}

/// Whether `link` opens version `older`'s secret of group `gid` from the next version's.
fn check_link(gid: u32, older: u32, link: &[u8]) -> Result<(), &'static str> {
    let w = GroupKeyWrap::decode(link)
        .map_err(|_| "a new key pair of a group whose current one the caller holds needs a link")?;
    if w.gid != gid || w.group_key_version != older || !w.is_link() {
        return Err("a link whose header names another group or version");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Policy;
    use nasd_e2e::SecretKey;
    use nasd_proto::manager::UserKeys;
    use std::sync::Arc;

    /// A manager with admin `root` (no member of `staff`) and users `ann`, `ben` (members)
    /// and `cal` (not yet), each with an X25519 key registered; returns their callers and
    /// secret keys.
    struct World {
        m: Arc<Manager>,
        gid: u32,
        root: (Caller, SecretKey),
        ann: (Caller, SecretKey),
        ben: (Caller, SecretKey),
        cal: (Caller, SecretKey),
    }

    fn world() -> World {
        let st = crate::sqlite::SqliteStore::in_memory().unwrap();
        let m = Manager::new(Box::new(st), Policy::default()).unwrap();
        let (gid, people) = {
            let mut st = m.st();
            let admins = st.add_group("admin").unwrap();
            let users = st.add_group("users").unwrap();
            let gid = st.add_group("staff").unwrap();
            let mut people = vec![];
            for (name, admin) in [
                ("root", true),
                ("ann", false),
                ("ben", false),
                ("cal", false),
            ] {
                let primary = if admin { admins } else { users };
                let uid = st.add_user(name, "phc", admin, primary).unwrap();
                let sk = SecretKey::generate();
                let keys = UserKeys {
                    enc_public: sk.public().0,
                    sign_public: [0; 32],
                    version: 1,
                    signature: [0; 64],
                    sealed: vec![],
                };
                st.set_user_keys(uid, &keys).unwrap();
                let c = Caller {
                    uid,
                    name: name.into(),
                    admin,
                    gid: primary,
                    groups: vec![primary],
                    session: 0,
                    via: None,
                };
                people.push((c, sk));
            }
            st.add_member(gid, people[1].0.uid).unwrap();
            st.add_member(gid, people[2].0.uid).unwrap();
            (gid, people)
        };
        let mut p = people.into_iter();
        World {
            m,
            gid,
            root: p.next().unwrap(),
            ann: p.next().unwrap(),
            ben: p.next().unwrap(),
            cal: p.next().unwrap(),
        }
    }

    fn wrap(gid: u32, version: u32, group: &SecretKey, to: &(Caller, SecretKey)) -> (u32, Vec<u8>) {
        let mut rng = nasd_e2e::keys::os_rng();
        let w = GroupKeyWrap::wrap(gid, version, group, to.0.uid, to.1.public(), &mut rng);
        (to.0.uid, w.unwrap().encode())
    }

    fn set(
        version: u32,
        group: &SecretKey,
        link: Vec<u8>,
        wraps: Vec<(u32, Vec<u8>)>,
    ) -> calls::GroupKeySet {
        calls::GroupKeySet {
            group: "staff".into(),
            version,
            public: group.public().0,
            link,
            wraps,
        }
    }

    fn info(w: &World, who: &Caller) -> GroupKeyInfo {
        w.m.group_key_get(who, &[w.gid], &[]).unwrap().remove(0)
    }

    fn status<T: std::fmt::Debug>(r: MgrResult<T>) -> MgrStatus {
        r.unwrap_err().status
    }

    /// Only members make and wrap a group's key, only to members; a removed member's wrap
    /// goes and the group is due a new key pair, which a holder makes with a link.
    #[test]
    fn a_groups_key_is_made_and_wrapped_by_members_only() {
        let w = world();
        let (gid, m) = (w.gid, &w.m);
        let v1 = SecretKey::generate();
        // An admin who is not a member makes no key pair, for themselves or the members.
        let by_root = set(
            1,
            &v1,
            vec![],
            vec![wrap(gid, 1, &v1, &w.root), wrap(gid, 1, &v1, &w.ann)],
        );
        assert_eq!(
            status(m.group_key_set(&w.root.0, &by_root)),
            MgrStatus::PermissionDenied
        );
        let members_only = set(1, &v1, vec![], vec![wrap(gid, 1, &v1, &w.ann)]);
        assert_eq!(
            status(m.group_key_set(&w.root.0, &members_only)),
            MgrStatus::PermissionDenied
        );
        // A member does, with their own wrap, and none for a non-member.
        let to_root = set(
            1,
            &v1,
            vec![],
            vec![wrap(gid, 1, &v1, &w.ann), wrap(gid, 1, &v1, &w.root)],
        );
        assert_eq!(
            status(m.group_key_set(&w.ann.0, &to_root)),
            MgrStatus::InvalidArgument
        );
        let without_own = set(1, &v1, vec![], vec![wrap(gid, 1, &v1, &w.ben)]);
        assert_eq!(
            status(m.group_key_set(&w.ann.0, &without_own)),
            MgrStatus::InvalidArgument
        );
        m.group_key_set(
            &w.ann.0,
            &set(1, &v1, vec![], vec![wrap(gid, 1, &v1, &w.ann)]),
        )
        .unwrap();
        let seen = info(&w, &w.ann.0);
        assert!(seen.member && !seen.rekey && !seen.wrap.is_empty());
        assert_eq!(seen.missing, vec![w.ben.0.uid]);
        let outsider = info(&w, &w.root.0);
        assert!(!outsider.member && outsider.wrap.is_empty() && outsider.missing.is_empty());
        // A member without a wrap gives none; a holder does, to members only.
        let for_ben = set(1, &v1, vec![], vec![wrap(gid, 1, &v1, &w.ben)]);
        assert_eq!(
            status(m.group_key_set(&w.ben.0, &for_ben)),
            MgrStatus::PermissionDenied
        );
        let for_cal = set(1, &v1, vec![], vec![wrap(gid, 1, &v1, &w.cal)]);
        assert_eq!(
            status(m.group_key_set(&w.ann.0, &for_cal)),
            MgrStatus::InvalidArgument
        );
        m.group_key_set(&w.ann.0, &for_ben).unwrap();
        assert!(info(&w, &w.ann.0).missing.is_empty());
        // Nobody replaces another member's wrap, and a wrap names its member.
        let over_ben = set(
            1,
            &v1,
            vec![],
            vec![(w.ben.0.uid, wrap(gid, 1, &v1, &w.ann).1)],
        );
        assert_eq!(
            status(m.group_key_set(&w.ann.0, &over_ben)),
            MgrStatus::InvalidArgument
        );
        let kept = m.st().group_wrap(gid, w.ben.0.uid).unwrap();
        m.group_key_set(&w.ann.0, &for_ben).unwrap();
        assert_eq!(m.st().group_wrap(gid, w.ben.0.uid).unwrap(), kept);
        // Nor does an admin through a rotation's rewrap.
        let own = vec![(gid, 1, wrap(gid, 1, &v1, &w.root).1)];
        assert_eq!(
            status(m.group_wrap_set(&w.root.0, &own)),
            MgrStatus::PermissionDenied
        );

        // Ben leaves: his wrap goes, and the group is due a new key pair.
        m.group_member_remove(&w.root.0, "staff", "ben").unwrap();
        assert_eq!(m.st().group_wrap(gid, w.ben.0.uid).unwrap(), None);
        assert!(info(&w, &w.ann.0).rekey && info(&w, &w.root.0).rekey);
        assert_eq!(
            status(m.group_member_remove(&w.root.0, "staff", "ben")),
            MgrStatus::InvalidArgument
        );
        assert_eq!(
            status(m.group_member_remove(&w.root.0, "users", "ann")),
            MgrStatus::InvalidArgument,
            "a primary group"
        );
        // Cal joins, holds nothing, and may not make the next version while Ann holds one.
        m.st().add_member(gid, w.cal.0.uid).unwrap();
        let v2 = SecretKey::generate();
        let by_cal = set(2, &v2, vec![], vec![wrap(gid, 2, &v2, &w.cal)]);
        assert_eq!(
            status(m.group_key_set(&w.cal.0, &by_cal)),
            MgrStatus::PermissionDenied
        );
        // Ann makes it, with the link from version 1.
        let no_link = set(
            2,
            &v2,
            vec![],
            vec![wrap(gid, 2, &v2, &w.ann), wrap(gid, 2, &v2, &w.cal)],
        );
        assert_eq!(
            status(m.group_key_set(&w.ann.0, &no_link)),
            MgrStatus::InvalidArgument
        );
        let mut rng = nasd_e2e::keys::os_rng();
        let link = GroupKeyWrap::link(gid, 1, &v1, v2.public(), &mut rng)
            .unwrap()
            .encode();
        let v2_set = set(
            2,
            &v2,
            link.clone(),
            vec![wrap(gid, 2, &v2, &w.ann), wrap(gid, 2, &v2, &w.cal)],
        );
        m.group_key_set(&w.ann.0, &v2_set).unwrap();
        let cal = info(&w, &w.cal.0);
        assert!(cal.member && !cal.rekey && cal.version == 2);
        assert_eq!(cal.links, vec![link]);
        // Cal opens version 2, and version 1 through the link: what was shared before.
        let got = GroupKeyWrap::decode(&cal.wrap)
            .unwrap()
            .unwrap(&w.cal.1)
            .unwrap();
        assert_eq!(got.public(), v2.public());
        let older = GroupKeyWrap::decode(&cal.links[0])
            .unwrap()
            .unwrap(&got)
            .unwrap();
        assert_eq!(older.public(), v1.public());
        // Ben's old secret opens nothing of version 2.
        assert!(GroupKeyWrap::decode(&cal.links[0])
            .unwrap()
            .unwrap(&v1)
            .is_err());
    }

    /// A group none of whose members holds its secret (an admin made it before schema 14) is
    /// due a new key pair, which any member makes without a link.
    #[test]
    fn a_group_no_member_holds_is_due_a_new_key_pair() {
        let w = world();
        let (gid, m) = (w.gid, &w.m);
        let v1 = SecretKey::generate();
        m.st()
            .set_group_key(gid, 1, &v1.public().0, None, &[wrap(gid, 1, &v1, &w.root)])
            .unwrap();
        m.st().remove_member(gid, w.ben.0.uid).ok();
        m.st().add_member(gid, w.ben.0.uid).unwrap();
        let v1_again = crate::store::GroupKeyPair {
            version: 1,
            public: Some(v1.public().0),
            rekey: true,
        };
        assert_eq!(m.st().group_key(gid).unwrap(), v1_again);
        // The marked group is due one; so is one whose only holder is no member.
        m.st()
            .set_group_key(gid, 2, &v1.public().0, None, &[wrap(gid, 2, &v1, &w.root)])
            .unwrap();
        assert!(info(&w, &w.ann.0).rekey, "only a non-member holds it");
        let v3 = SecretKey::generate();
        let made = set(
            3,
            &v3,
            vec![],
            vec![wrap(gid, 3, &v3, &w.ben), wrap(gid, 3, &v3, &w.ann)],
        );
        m.group_key_set(&w.ben.0, &made).unwrap();
        assert!(!info(&w, &w.ann.0).rekey);
    }

    #[test]
    fn wraps_and_links_are_checked_by_their_headers() {
        let sk = SecretKey::generate();
        let member = SecretKey::generate();
        let mut rng = nasd_e2e::keys::os_rng();
        let w = GroupKeyWrap::wrap(100, 2, &sk, 1000, member.public(), &mut rng)
            .unwrap()
            .encode();
        assert_eq!(check_wrap(100, 2, 1000, &w, &[1000, 1001]), Ok(()));
        assert!(
            check_wrap(100, 2, 1000, &w, &[1001]).is_err(),
            "not a member"
        );
        assert!(
            check_wrap(100, 2, 1001, &w, &[1000, 1001]).is_err(),
            "another member's"
        );
        assert!(
            check_wrap(101, 2, 1000, &w, &[1000]).is_err(),
            "another group's"
        );
        assert!(
            check_wrap(100, 3, 1000, &w, &[1000]).is_err(),
            "another version's"
        );
        assert!(
            check_wrap(100, 2, 1000, &[1; 93], &[1000]).is_err(),
            "garbage"
        );
        let link = GroupKeyWrap::link(100, 1, &sk, member.public(), &mut rng)
            .unwrap()
            .encode();
        assert_eq!(check_link(100, 1, &link), Ok(()));
        assert!(check_link(100, 2, &link).is_err());
        assert!(
            check_link(100, 2, &w).is_err(),
            "a member's wrap is no link"
        );
        assert!(check_link(100, 1, &[]).is_err());
        assert!(
            check_wrap(100, 1, GroupKeyWrap::LINK_UID, &link, &[1000]).is_err(),
            "a link is no member's wrap"
        );
    }
}
