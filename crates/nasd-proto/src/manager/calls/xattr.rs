//! The extended attribute calls (manager protocol 8): named values a file carries beside its
//! bytes (the S3 gateway keeps an object's ETag, content type and user metadata in them).
//! ```text
//! Setxattr  := string path, string name (<= XATTR_NAME_BYTES_MAX), option blob value
//! Xattrs    := FileStat, xattrs
//! ```

use super::one_string;
use crate::codec::{Reader, Writer};
use crate::manager::codec::{
    get_opt, get_str, get_xattr_name, get_xattrs, put_opt, put_str, put_xattrs,
};
use crate::manager::{FileStat, Wire, Xattr, XATTR_VALUE_BYTES_MAX};
use crate::DecodeError;

one_string! {
    /// The stat and every extended attribute of `path` (read permission on it), answered with
    /// [`Xattrs`].
    Getxattrs { path: "path" }
}

/// A file's stat and extended attributes, sorted by name ([`Getxattrs`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Xattrs {
    pub stat: FileStat,
    pub xattrs: Vec<Xattr>,
}

impl Wire for Xattrs {
    fn put(&self, w: &mut Writer) {
        self.stat.put(w);
        put_xattrs(w, &self.xattrs);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Xattrs {
            stat: FileStat::get(r)?,
            xattrs: get_xattrs(r)?,
        })
    }
}

/// Sets extended attribute `name` of `path` to `value`, or removes it (`None`); the
/// owner's or an admin's.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Setxattr {
    pub path: String,
    pub name: String,
    pub value: Option<Vec<u8>>,
}

impl Wire for Setxattr {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.path);
        put_str(w, &self.name);
        put_opt(w, &self.value, |w, v| w.blob(v));
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Setxattr {
            path: get_str(r, "path")?,
            name: get_xattr_name(r)?,
            value: get_opt(r, "has value", |r| {
                Ok(r.blob(XATTR_VALUE_BYTES_MAX, "xattr value")?.to_vec())
            })?,
        })
    }
}
