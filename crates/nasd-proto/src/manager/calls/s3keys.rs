//! The S3 access key calls (manager protocol 7): a user's keys made, listed and revoked, and a
//! gateway's lookup of a key's owner and secret to check a request's SigV4 signature.
//! ```text
//! S3KeyMade := string access_key_id, string secret
//! S3Keys    := u32 n, n x (string access_key_id, u64 made_ms)
//! ```

use super::{one_string, two_strings};
use crate::codec::{Reader, Writer};
use crate::manager::codec::{get_count, get_str, put_str};
use crate::manager::{SecretString, Wire};
use crate::DecodeError;

one_string! {
    /// Makes an S3 access key for `user` (their own, or an admin's for anyone), answered
    /// with [`S3KeyMade`]: the only time the secret is shown to its user.
    S3KeyCreate { user: "user" }
}

/// A new S3 access key and its secret ([`S3KeyCreate`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct S3KeyMade {
    pub access_key_id: String,
    pub secret: SecretString,
}

impl Wire for S3KeyMade {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.access_key_id);
        put_str(w, &self.secret.0);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(S3KeyMade {
            access_key_id: get_str(r, "access key id")?,
            secret: SecretString(get_str(r, "secret")?),
        })
    }
}

one_string! {
    /// The access keys of `user` (their own, or an admin's for anyone) and when each was
    /// made (ms since the epoch); no secrets.
    S3KeyList { user: "user" }
}

impl Wire for Vec<(String, u64)> {
    fn put(&self, w: &mut Writer) {
        w.u32(self.len() as u32);
        for (id, made) in self {
            put_str(w, id);
            w.u64(*made);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = get_count(r, 12, "s3 keys")?;
        let mut keys = Vec::with_capacity(n);
        for _ in 0..n {
            keys.push((get_str(r, "access key id")?, r.u64("made")?));
        }
        Ok(keys)
    }
}

two_strings! {
    /// Forgets access key `access_key_id` of `user`.
    S3KeyRevoke { user: "user", access_key_id: "access key id" }
}

one_string! {
    /// For a gateway: whose key `access_key_id` is and its secret (to check a request's
    /// SigV4 signature), answered with [`S3KeyFound`].
    S3KeySecret { access_key_id: "access key id" }
}

/// Whose key it is and its secret ([`S3KeySecret`], gateways only).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct S3KeyFound {
    pub user: String,
    pub secret: SecretString,
}

impl Wire for S3KeyFound {
    fn put(&self, w: &mut Writer) {
        put_str(w, &self.user);
        put_str(w, &self.secret.0);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(S3KeyFound {
            user: get_str(r, "user")?,
            secret: SecretString(get_str(r, "secret")?),
        })
    }
}
