//! One struct per manager request, grouped by family, each with the codec of its fields
//! ([`Wire`](super::Wire)) and the types only its family carries; its tag, name and reply
//! are in the table of [`super`]. Field layouts of each message are in `docs/manager.md`.
//!
//! - [`session`]: logging in and out, challenges, gateways acting for users;
//! - [`namespace`]: stats, directories, names, links, modes, owners, sizes, times, layouts;
//! - [`files`]: grants and uploads: create, open, commit, abort, renew, prepare, copy-on-write;
//! - [`xattr`]: extended attributes; [`users`]: users, groups, gateways;
//! - [`s3keys`]: S3 access keys; [`e2e`]: end-to-end state and keys; [`quota`]: quotas;
//! - [`heal`]: drives, repair, scrub, cluster status; [`callbacks`]: the callback channel;
//! - [`locks`]: record locks and `flock` across clients, under leases;
//! - [`keylog`]: the log of every change of users' keys, and resets.

pub mod callbacks;
pub mod e2e;
pub mod files;
pub mod heal;
pub mod keylog;
pub mod locks;
pub mod namespace;
pub mod quota;
pub mod s3keys;
pub mod session;
pub mod users;
pub mod xattr;

pub use callbacks::WaitBreaks;
pub use e2e::{
    E2eRewrap, E2eUpdate, E2eWrappedFiles, GroupKeyGet, GroupKeySet, GroupWrapSet, UserKeyGet,
    UserKeySet,
};
pub use files::{Abort, Commit, Create, Open, Prepare, Renew, ReturnCapability, StageWrite};
pub use heal::{DriveAdd, DriveList, DriveReplace, Repair, Scrub, Status};
pub use keylog::{KeyLog, PolicyLog, UserKeyReset};
pub use locks::{Lock, LockDrop, LockRenew, LockTest, Unlock};
pub use namespace::{
    Chmod, Chown, LayoutGet, LayoutSet, Link, Lstat, Mkdir, Mknod, Readdir, Readlink, Rename,
    Rmdir, Stat, Statfs, Symlink, Truncate, Unlink, Utimes,
};
pub use quota::{QuotaGet, QuotaSet};
pub use s3keys::{S3KeyCreate, S3KeyList, S3KeyRevoke, S3KeySecret};
pub use session::{
    ActFor, Challenge, Login, Logout, OpaqueLoginFinish, OpaqueLoginStart, OpaqueRegisterFinish,
    OpaqueRegisterStart,
};
pub use users::{
    GroupAdd, GroupMember, GroupMemberRemove, UserAdd, UserGateway, UserList, UserPasswd,
};
pub use xattr::{Getxattrs, Setxattr};

/// A request of one string field: the struct, and its codec (`string field`, decoded under
/// the label given).
macro_rules! one_string {
    ($(#[$m:meta])* $C:ident { $f:ident: $what:literal }) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, Debug)]
        pub struct $C {
            pub $f: String,
        }

        impl $crate::manager::Wire for $C {
            fn put(&self, w: &mut $crate::codec::Writer) {
                $crate::manager::codec::put_str(w, &self.$f);
            }
            fn get(
                r: &mut $crate::codec::Reader<'_>,
            ) -> Result<Self, $crate::DecodeError> {
                Ok($C {
                    $f: $crate::manager::codec::get_str(r, $what)?,
                })
            }
        }
    };
}

/// A request without fields: the struct, and its (empty) codec.
macro_rules! no_fields {
    ($(#[$m:meta])* $C:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub struct $C;

        impl $crate::manager::Wire for $C {
            fn put(&self, _: &mut $crate::codec::Writer) {}
            fn get(_: &mut $crate::codec::Reader<'_>) -> Result<Self, $crate::DecodeError> {
                Ok($C)
            }
        }
    };
}

/// A path and a mode: `Mkdir` and `Chmod`.
macro_rules! path_and_mode {
    ($(#[$m:meta])* $C:ident) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, Debug)]
        pub struct $C {
            pub path: String,
            pub mode: u32,
        }

        impl $crate::manager::Wire for $C {
            fn put(&self, w: &mut $crate::codec::Writer) {
                $crate::manager::codec::put_str(w, &self.path);
                w.u32(self.mode);
            }
            fn get(
                r: &mut $crate::codec::Reader<'_>,
            ) -> Result<Self, $crate::DecodeError> {
                Ok($C {
                    path: $crate::manager::codec::get_str(r, "path")?,
                    mode: r.u32("mode")?,
                })
            }
        }
    };
}

/// Two strings, decoded under the labels given: the names of a rename, a link, ...
macro_rules! two_strings {
    ($(#[$m:meta])* $C:ident { $a:ident: $wa:literal, $b:ident: $wb:literal }) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, Debug)]
        pub struct $C {
            pub $a: String,
            pub $b: String,
        }

        impl $crate::manager::Wire for $C {
            fn put(&self, w: &mut $crate::codec::Writer) {
                $crate::manager::codec::put_str(w, &self.$a);
                $crate::manager::codec::put_str(w, &self.$b);
            }
            fn get(
                r: &mut $crate::codec::Reader<'_>,
            ) -> Result<Self, $crate::DecodeError> {
                Ok($C {
                    $a: $crate::manager::codec::get_str(r, $wa)?,
                    $b: $crate::manager::codec::get_str(r, $wb)?,
                })
            }
        }
    };
}

/// A path and a `u64`, decoded under the label given: `Truncate` and `Utimes`.
macro_rules! path_and_u64 {
    ($(#[$m:meta])* $C:ident { $f:ident: $what:literal }) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, Debug)]
        pub struct $C {
            pub path: String,
            pub $f: u64,
        }

        impl $crate::manager::Wire for $C {
            fn put(&self, w: &mut $crate::codec::Writer) {
                $crate::manager::codec::put_str(w, &self.path);
                w.u64(self.$f);
            }
            fn get(
                r: &mut $crate::codec::Reader<'_>,
            ) -> Result<Self, $crate::DecodeError> {
                Ok($C {
                    path: $crate::manager::codec::get_str(r, "path")?,
                    $f: r.u64($what)?,
                })
            }
        }
    };
}

use {no_fields, one_string, path_and_mode, path_and_u64, two_strings};
