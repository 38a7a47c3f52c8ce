//! S3 access control as nasd enforces it (issue 22 §1): a bucket belongs to its creator and
//! an object to its writer, and what others may do is the namespace's permission bits, which
//! the manager checks on every request. A canned ACL, or explicit grants that modes can
//! express, set those bits; everything else is refused (`NotImplemented`) rather than
//! accepted and ignored. An ACL read back is computed from the bits, so it reports what is
//! enforced, never what was asked.
//!
//! nasd has no anonymous user: "public" means every user of the cluster (the group and
//! others), which S3 calls `AuthenticatedUsers`; that is the grantee ACLs report. Anonymous
//! requests stay refused whatever the ACL. A bucket is a directory: others may list it when
//! they have `r-x` on it and add, replace or delete its objects with `-wx`; an object is a
//! file they may read with `r--`, as long as they may also pass through its bucket (`--x`).

use nasd_client::files::Client;
use nasd_proto::manager::FileStat;
use s3s::dto::{
    AccessControlPolicy, BucketCannedACL, Grant, Grantee, ObjectCannedACL, Owner, Permission, Type,
};
use s3s::{s3_error, S3Result};

/// Mode of a bucket made without an ACL (`private`).
pub const BUCKET_MODE: u32 = 0o700;
/// Mode of an object written without an ACL (`private`).
pub const OBJECT_MODE: u32 = 0o600;
/// The grantee "every authenticated user": every user of the cluster.
pub const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
/// The grantee "everyone, anonymous included": nasd serves no anonymous request, so a grant
/// to it is a grant to every user of the cluster, and is reported as [`AUTHENTICATED_USERS`].
pub const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// How a group of the namespace is named as a grantee, when its bits differ from others'
/// (only a `nasd chmod` makes such modes).
pub const GROUP_URI_PREFIX: &str = "nasd:group:";

const R: u32 = 4;
const W: u32 = 2;
const X: u32 = 1;

/// Who asks: a user and the groups they belong to.
pub struct Caller<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
}

/// The permission bits (r=4, w=2, x=1) `who` has on a file of stat `st`, as the manager's
/// own check computes them.
pub fn bits_for(st: &FileStat, who: &Caller<'_>) -> u32 {
    if st.owner == who.user {
        (st.mode >> 6) & 7
    } else if who.groups.contains(&st.group) {
        (st.mode >> 3) & 7
    } else {
        st.mode & 7
    }
}

/// Whether the group's bits on `st` are those of others (then group membership does not
/// matter to anyone but the owner).
pub fn group_is_other(st: &FileStat) -> bool {
    (st.mode >> 3) & 7 == st.mode & 7
}

/// Whether `who` may list bucket `st` (read its directory).
pub fn may_list(st: &FileStat, who: &Caller<'_>) -> bool {
    bits_for(st, who) & (R | X) == R | X
}

/// Whether `who` may pass through directory `st` (to what is below it).
pub fn may_pass(st: &FileStat, who: &Caller<'_>) -> bool {
    bits_for(st, who) & X == X
}

/// Whether `who` may add objects to bucket `st`.
pub fn may_write(st: &FileStat, who: &Caller<'_>) -> bool {
    bits_for(st, who) & (W | X) == W | X
}

/// The mode a canned bucket ACL gives a bucket.
pub fn bucket_mode(acl: Option<&BucketCannedACL>) -> S3Result<u32> {
    let Some(acl) = acl else {
        return Ok(BUCKET_MODE);
    };
    match acl.as_str() {
        BucketCannedACL::PRIVATE => Ok(0o700),
        // Every user of the cluster lists the bucket and reaches its objects (each object's
        // own mode still decides who reads it).
        BucketCannedACL::PUBLIC_READ | BucketCannedACL::AUTHENTICATED_READ => Ok(0o755),
        BucketCannedACL::PUBLIC_READ_WRITE => Ok(0o777),
        other => Err(s3_error!(
            NotImplemented,
            "the canned ACL {other:?} has no equivalent in nasd's permissions"
        )),
    }
}

/// The mode a canned object ACL gives an object written by `writer` into a bucket owned by
/// `bucket_owner`.
pub fn object_mode(
    acl: Option<&ObjectCannedACL>,
    writer: &str,
    bucket_owner: &str,
) -> S3Result<u32> {
    let Some(acl) = acl else {
        return Ok(OBJECT_MODE);
    };
    match acl.as_str() {
        ObjectCannedACL::PRIVATE => Ok(0o600),
        // S3 gives no one WRITE on an object ("not applicable"): public-read-write reads as
        // public-read for an object.
        ObjectCannedACL::PUBLIC_READ
        | ObjectCannedACL::AUTHENTICATED_READ
        | ObjectCannedACL::PUBLIC_READ_WRITE => Ok(0o644),
        // The bucket owner's rights on the object are the owner's own when they wrote it; a
        // file cannot name a second user.
        ObjectCannedACL::BUCKET_OWNER_READ | ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL
            if writer == bucket_owner =>
        {
            Ok(0o600)
        }
        ObjectCannedACL::BUCKET_OWNER_READ | ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL => Err(
            s3_error!(
                NotImplemented,
                "an object cannot grant its bucket's owner ({bucket_owner}) access: a nasd file has one owner"
            ),
        ),
        other => Err(s3_error!(
            NotImplemented,
            "the canned ACL {other:?} has no equivalent in nasd's permissions"
        )),
    }
}

/// One grant as the request states it: who, and what.
#[derive(Debug, PartialEq, Eq)]
pub struct Granted {
    pub grantee: Who,
    pub permission: String,
}

/// A grantee, as far as nasd can tell them apart.
#[derive(Debug, PartialEq, Eq)]
pub enum Who {
    /// A user, by canonical id (a nasd user name).
    User(String),
    /// Every user of the cluster (`AllUsers` or `AuthenticatedUsers`).
    Everyone,
    /// Anyone else (an e-mail address, another group).
    Other(String),
}

/// The grants of `x-amz-grant-*` headers (`id="alice", uri="http://…/AllUsers"`).
pub fn header_grants(permission: &str, value: &str) -> Vec<Granted> {
    value
        .split(',')
        .filter_map(|item| {
            let (kind, v) = item.trim().split_once('=')?;
            let v = v.trim().trim_matches('"').to_string();
            let grantee = match kind.trim().to_ascii_lowercase().as_str() {
                "id" => Who::User(v),
                "uri" if v == ALL_USERS || v == AUTHENTICATED_USERS => Who::Everyone,
                _ => Who::Other(format!("{}={v}", kind.trim())),
            };
            Some(Granted {
                grantee,
                permission: permission.to_string(),
            })
        })
        .collect()
}

/// The grants of an `AccessControlPolicy` body.
pub fn policy_grants(p: &AccessControlPolicy) -> Vec<Granted> {
    p.grants
        .iter()
        .flatten()
        .map(|g| {
            let grantee = match &g.grantee {
                Some(Grantee { type_, id, uri, .. }) => match type_.as_str() {
                    Type::CANONICAL_USER => Who::User(id.clone().unwrap_or_default()),
                    Type::GROUP
                        if uri.as_deref() == Some(ALL_USERS)
                            || uri.as_deref() == Some(AUTHENTICATED_USERS) =>
                    {
                        Who::Everyone
                    }
                    t => Who::Other(format!("{t} {}", uri.clone().unwrap_or_default())),
                },
                None => Who::Other("no grantee".into()),
            };
            Granted {
                grantee,
                permission: g
                    .permission
                    .as_ref()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// The mode explicit grants give a bucket (`dir`) or an object owned by `owner`, when modes
/// can express them: the owner keeps every right, and every user of the cluster may be
/// granted `READ` (and, on a bucket, `WRITE`). Anything else cannot be enforced.
pub fn granted_mode(grants: &[Granted], owner: &str, dir: bool) -> S3Result<u32> {
    let mut mode = if dir { BUCKET_MODE } else { OBJECT_MODE };
    for g in grants {
        let p = g.permission.as_str();
        match &g.grantee {
            Who::User(u) if u == owner => {}
            Who::Everyone if p == Permission::READ => mode |= if dir { 0o055 } else { 0o044 },
            Who::Everyone if p == Permission::WRITE && dir => mode |= 0o033,
            // S3 gives no one WRITE on an object ("not applicable").
            Who::Everyone if p == Permission::WRITE => {}
            Who::Everyone => {
                return Err(s3_error!(
                    NotImplemented,
                    "only READ{} can be granted to every user: nasd users cannot read or change another's permissions",
                    if dir { " and WRITE" } else { "" }
                ))
            }
            Who::User(u) => {
                return Err(s3_error!(
                    NotImplemented,
                    "a grant to user {u}: nasd's permissions name one owner, not a list of users"
                ))
            }
            Who::Other(o) => {
                return Err(s3_error!(
                    NotImplemented,
                    "a grant to {o}: nasd can grant only to every user of the cluster"
                ))
            }
        }
    }
    Ok(mode)
}

/// The owner of a file as S3 shows it (the canonical id is the nasd user name).
pub fn owner_of(st: &FileStat) -> Owner {
    Owner {
        id: Some(st.owner.clone()),
        display_name: Some(st.owner.clone()),
    }
}

fn grant(grantee: Grantee, permission: &'static str) -> Grant {
    Grant {
        grantee: Some(grantee),
        permission: Some(Permission::from_static(permission)),
    }
}

fn group(uri: String) -> Grantee {
    Grantee {
        type_: Type::from_static(Type::GROUP),
        uri: Some(uri),
        display_name: None,
        email_address: None,
        id: None,
    }
}

/// The grants that `bits` (r=4, w=2, x=1) give a grantee on a bucket (`dir`) or an object.
fn permissions(bits: u32, dir: bool) -> Vec<&'static str> {
    let mut v = vec![];
    if dir {
        if bits & (R | X) == R | X {
            v.push(Permission::READ);
        }
        if bits & (W | X) == W | X {
            v.push(Permission::WRITE);
        }
    } else if bits & R == R {
        v.push(Permission::READ);
    }
    v
}

/// The ACL enforced on a bucket (`dir`) or an object of stat `st`. `reach` is what the
/// group and others may pass through on the way to it, as permission bits (`--x` of each
/// directory above, and-ed): a file they cannot reach is not theirs to read, whatever its
/// own bits.
pub fn enforced(st: &FileStat, dir: bool, reach: (u32, u32)) -> AccessControlPolicy {
    let owner = Grantee {
        type_: Type::from_static(Type::CANONICAL_USER),
        id: Some(st.owner.clone()),
        display_name: Some(st.owner.clone()),
        email_address: None,
        uri: None,
    };
    let mut grants = vec![grant(owner, Permission::FULL_CONTROL)];
    let (group_reach, other_reach) = reach;
    let other = if other_reach & X == X { st.mode & 7 } else { 0 };
    let grp = if group_reach & X == X {
        (st.mode >> 3) & 7
    } else {
        0
    };
    let others = permissions(other, dir);
    for p in &others {
        grants.push(grant(group(AUTHENTICATED_USERS.into()), p));
    }
    for p in permissions(grp, dir) {
        if !others.contains(&p) {
            grants.push(grant(group(format!("{GROUP_URI_PREFIX}{}", st.group)), p));
        }
    }
    AccessControlPolicy {
        grants: Some(grants),
        owner: Some(owner_of(st)),
    }
}

/// Refuses an object mode that grants the group or others a read they could not make: they
/// cannot pass through the bucket `bucket` (a private bucket hides its objects whatever
/// their ACLs).
pub fn check_reachable(mode: u32, bucket: &FileStat) -> S3Result<()> {
    let blocked = |shift: u32| (mode >> shift) & R == R && (bucket.mode >> shift) & X == 0;
    if blocked(0) || blocked(3) {
        return Err(s3_error!(
            NotImplemented,
            "the bucket is private, so no one else can reach its objects whatever their ACL: make the bucket public-read first"
        ));
    }
    Ok(())
}

/// Only a bucket's owner reads or changes its ACL, tags and configuration (S3's default
/// for READ_ACP and WRITE_ACP; nasd lets only the owner change a mode).
pub(crate) fn need_owner(c: &Client, st: &FileStat) -> S3Result<()> {
    if st.owner == c.user() {
        Ok(())
    } else {
        Err(s3_error!(AccessDenied))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nasd_proto::manager::FileKind;

    fn stat(mode: u32, owner: &str) -> FileStat {
        FileStat {
            ino: 1,
            kind: FileKind::Dir,
            mode,
            uid: 1,
            gid: 2,
            owner: owner.into(),
            group: "users".into(),
            size: 0,
            mtime_us: 0,
            ctime_us: 0,
            nlink: 2,
            atime_us: 0,
            rdev: 0,
        }
    }

    #[test]
    fn canned_acls_map_onto_modes_or_are_refused() {
        let b = |a: &'static str| bucket_mode(Some(&BucketCannedACL::from_static(a)));
        assert_eq!(bucket_mode(None).unwrap(), 0o700);
        assert_eq!(b("private").unwrap(), 0o700);
        assert_eq!(b("public-read").unwrap(), 0o755);
        assert_eq!(b("authenticated-read").unwrap(), 0o755);
        assert_eq!(b("public-read-write").unwrap(), 0o777);
        assert!(b("log-delivery-write").is_err());
        let o = |a: &'static str, w: &str| {
            object_mode(Some(&ObjectCannedACL::from_static(a)), w, "alice")
        };
        assert_eq!(object_mode(None, "bob", "alice").unwrap(), 0o600);
        assert_eq!(o("public-read", "bob").unwrap(), 0o644);
        assert_eq!(o("public-read-write", "bob").unwrap(), 0o644);
        assert_eq!(o("bucket-owner-full-control", "alice").unwrap(), 0o600);
        assert!(o("bucket-owner-full-control", "bob").is_err());
        assert!(o("bucket-owner-read", "bob").is_err());
        assert!(o("aws-exec-read", "alice").is_err());
    }

    #[test]
    fn grants_map_onto_modes_only_when_modes_express_them() {
        let read_all = header_grants("READ", &format!("uri=\"{ALL_USERS}\""));
        assert_eq!(granted_mode(&read_all, "alice", true).unwrap(), 0o755);
        assert_eq!(granted_mode(&read_all, "alice", false).unwrap(), 0o644);
        let mine = header_grants("FULL_CONTROL", "id=\"alice\"");
        assert_eq!(granted_mode(&mine, "alice", true).unwrap(), 0o700);
        let write = header_grants("WRITE", &format!("uri=\"{AUTHENTICATED_USERS}\""));
        assert_eq!(granted_mode(&write, "alice", true).unwrap(), 0o733);
        for (p, v) in [
            ("READ", "id=\"bob\""),
            ("READ", "emailAddress=\"b@example.com\""),
            ("FULL_CONTROL", &format!("uri=\"{ALL_USERS}\"")),
            ("READ_ACP", &format!("uri=\"{ALL_USERS}\"")),
            (
                "READ",
                "uri=\"http://acs.amazonaws.com/groups/s3/LogDelivery\"",
            ),
        ] {
            assert!(
                granted_mode(&header_grants(p, v), "alice", true).is_err(),
                "{p} {v}"
            );
        }
    }

    #[test]
    fn the_acl_read_back_is_what_the_bits_enforce() {
        let perms = |p: &AccessControlPolicy| -> Vec<(String, String)> {
            p.grants
                .iter()
                .flatten()
                .map(|g| {
                    let who = g.grantee.as_ref().unwrap();
                    (
                        who.id.clone().or(who.uri.clone()).unwrap(),
                        g.permission.as_ref().unwrap().as_str().to_string(),
                    )
                })
                .collect()
        };
        let owner_only = vec![("alice".to_string(), "FULL_CONTROL".to_string())];
        assert_eq!(
            perms(&enforced(&stat(0o700, "alice"), true, (1, 1))),
            owner_only
        );
        let public = enforced(&stat(0o755, "alice"), true, (1, 1));
        assert_eq!(
            perms(&public)[1],
            (AUTHENTICATED_USERS.into(), "READ".into())
        );
        assert_eq!(perms(&public).len(), 2);
        assert_eq!(
            perms(&enforced(&stat(0o777, "alice"), true, (1, 1))).len(),
            3
        );
        // An object others cannot reach is private, whatever its bits.
        assert_eq!(
            perms(&enforced(&stat(0o644, "alice"), false, (0, 0))),
            owner_only
        );
        // A group with more than others is named.
        let g = perms(&enforced(&stat(0o750, "alice"), true, (1, 1)));
        assert_eq!(g[1], ("nasd:group:users".into(), "READ".into()));
    }

    #[test]
    fn permissions_follow_owner_group_other() {
        let b = stat(0o750, "alice");
        let users = vec!["users".to_string()];
        let none = vec![];
        let alice = Caller {
            user: "alice",
            groups: &none,
        };
        let bob = Caller {
            user: "bob",
            groups: &users,
        };
        let carol = Caller {
            user: "carol",
            groups: &none,
        };
        assert!(may_write(&b, &alice) && may_list(&b, &alice));
        assert!(may_list(&b, &bob) && !may_write(&b, &bob));
        assert!(!may_list(&b, &carol));
        assert!(check_reachable(0o644, &stat(0o700, "alice")).is_err());
        assert!(check_reachable(0o600, &stat(0o700, "alice")).is_ok());
        assert!(check_reachable(0o644, &stat(0o711, "alice")).is_ok());
    }
}
