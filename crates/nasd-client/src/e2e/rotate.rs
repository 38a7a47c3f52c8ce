//! `nasd user rotate-keys` (issue 21 §3): a user's client makes a new seed and identity,
//! registers it as the next version of the user's keys (signed by the current sign key, the
//! new seed sealed under this password login's key, replacing the sealed copy of the old),
//! and rewraps what the user can read: every wrap of a file key and every wrap of a group's
//! secret addressed to the old key gets a wrap to the new one in its place, and every version
//! the user signed is signed again with the new sign key (readers check a version's signature
//! with its signer's current key). New writes wrap only to the new key (the manager now answers it for the user). An old copy of the seed
//! then opens nothing written after the rotation; with the password changed before, neither
//! does the first password.
//!
//! The wraps are made here: unwrapped with the old key, wrapped with the new. The manager
//! lists the files whose key file holds a wrap for the caller (`E2eWrappedFiles`) and accepts
//! a rewrap of a file (`E2eRewrap`) or of group secrets (`GroupWrapSet`) that changes nothing
//! but the caller's own wraps.

use super::identity::Identity;
use super::{decode_state, state_hash};
use crate::files::{Client, FsError};
use nasd_e2e::keys::{GroupKeyWrap, KeyFile};
use nasd_e2e::side::Side;
use nasd_e2e::{Principal as KeyPrincipal, PublicKey};
use nasd_proto::manager::calls;
use nasd_proto::manager::{E2eCommit, E2eState, WRAPPED_FILES_PAGE_MAX};
use std::sync::Arc;

/// What a rotation did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rotated {
    /// The new version of the user's keys.
    pub version: u32,
    /// Files whose wraps for the user were replaced.
    pub files: usize,
    /// Group secrets rewrapped.
    pub groups: usize,
}

fn e2e_err(path: &str, what: impl std::fmt::Display) -> FsError {
    FsError::E2e {
        path: path.into(),
        detail: what.to_string(),
    }
}

impl Client {
    /// Rotates this user's end-to-end keys (module docs). Needs a password login (the new
    /// seed is sealed under its key).
    pub async fn rotate_keys(&self) -> Result<Rotated, FsError> {
        let me = self.cfg_user();
        let seed_key = self.seed_key().ok_or_else(|| {
            e2e_err(
                "/",
                format!("{me}: rotating keys needs a password login (nasd login), whose key seals the new seed"),
            )
        })?;
        let old = self.identity().await?;
        let uid = old.uid;
        let current = self
            .user_keys(&[uid], true)
            .await?
            .remove(&uid)
            .ok_or_else(|| e2e_err("/", format!("{me}: no keys registered yet")))?;
        let new = Arc::new(Identity::generate(uid));
        let version = current.version + 1;
        let set = calls::UserKeySet {
            user: me,
            keys: new.user_keys(version, Some(&old), Some(&seed_key)),
        };
        self.call("/", set).await?;
        self.forget_user_keys();
        self.replace_identity(new.clone());
        let files = self.rewrap_files(&old, &new).await?;
        let groups = self.rewrap_groups(&old, &new).await?;
        Ok(Rotated {
            version,
            files,
            groups,
        })
    }

    /// Replaces, in every file whose key file wraps a key for this user, the wraps to `old`
    /// with wraps to `new`. Returns the files changed.
    async fn rewrap_files(&self, old: &Identity, new: &Identity) -> Result<usize, FsError> {
        let mut after = 0;
        let mut done = 0;
        loop {
            let page = self
                .call(
                    "/",
                    calls::E2eWrappedFiles {
                        after,
                        limit: WRAPPED_FILES_PAGE_MAX,
                    },
                )
                .await?;
            let last = page.len() < WRAPPED_FILES_PAGE_MAX as usize;
            for f in page {
                after = f.ino;
                if self.rewrap_file(&f.path, old, new).await? {
                    done += 1;
                }
            }
            if last {
                return Ok(done);
            }
        }
    }

    /// Rewraps one file's wraps for this user, and signs its version again if this user
    /// signed it; whether anything changed. A file whose state changed meanwhile is read again
    /// (compare-and-swap at the manager).
    async fn rewrap_file(
        &self,
        path: &str,
        old: &Identity,
        new: &Identity,
    ) -> Result<bool, FsError> {
        for _ in 0..3 {
            let Some(e) = self.e2e_state(path).await? else {
                return Ok(false);
            };
            let (record, side) = decode_state(path, &e)?;
            let key_file = rewrapped(path, &side.key_file, side.file_id, old, new)?;
            let resigned = side.signer == Some(new.uid) && e.signature.len() == 64;
            if key_file.is_none() && !resigned {
                return Ok(false);
            }
            let signature = match resigned {
                true => new.signer().sign_record(side.file_id, &record).to_vec(),
                false => e.signature.clone(),
            };
            let side = Side {
                key_file: key_file.unwrap_or_else(|| side.key_file.clone()),
                ..side
            };
            let update = E2eCommit {
                expect: state_hash(Some(&e)),
                state: E2eState {
                    record: e.record.clone(),
                    writer: 0,
                    signature,
                    side: side.encode(),
                },
            };
            let sent = self
                .call(
                    path,
                    calls::E2eRewrap {
                        path: path.into(),
                        update,
                    },
                )
                .await;
            self.caps_invalidate(path);
            match sent {
                Ok(()) => return Ok(true),
                Err(e) if e.status() == Some(nasd_proto::manager::MgrStatus::Conflict) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(e2e_err(
            path,
            "the file kept changing during the key rotation; run it again",
        ))
    }

    /// Rewraps every group secret this user holds a wrap of to `new`. Returns how many.
    async fn rewrap_groups(&self, old: &Identity, new: &Identity) -> Result<usize, FsError> {
        let us = self.call("/", calls::UserList).await?;
        let mut names: Vec<String> = us.into_iter().flat_map(|u| u.groups).collect();
        names.sort();
        names.dedup();
        let mut wraps = vec![];
        let mut rng = nasd_e2e::keys::os_rng();
        for g in self.group_key_get(vec![], names).await? {
            if g.wrap.is_empty() {
                continue;
            }
            let w = GroupKeyWrap::decode(&g.wrap).map_err(|e| e2e_err("/", e))?;
            let Ok(sk) = w.unwrap(old.enc_secret()) else {
                continue;
            };
            let to = GroupKeyWrap::wrap(g.gid, g.version, &sk, new.uid, new.enc_public(), &mut rng)
                .map_err(|e| e2e_err("/", e))?;
            wraps.push((g.gid, g.version, to.encode()));
        }
        let n = wraps.len();
        if n > 0 {
            self.call("/", calls::GroupWrapSet { wraps }).await?;
        }
        Ok(n)
    }
}

/// `key_file` with every wrap for `old`'s user that `old` opens rewrapped to `new`; `None`
/// when there is none to rewrap.
fn rewrapped(
    path: &str,
    key_file: &KeyFile,
    file_id: nasd_e2e::FileId,
    old: &Identity,
    new: &Identity,
) -> Result<Option<KeyFile>, FsError> {
    let me = KeyPrincipal::User(old.uid);
    let mut keys = vec![];
    for entry in key_file.entries().iter().filter(|e| e.principal == me) {
        match key_file.unwrap(me, old.enc_secret(), file_id, entry.key_version) {
            Ok(k) => keys.push((entry.key_version, k)),
            // Already the new key's, or another key's: left as it is.
            Err(_) => return Ok(None),
        }
    }
    if keys.is_empty() {
        return Ok(None);
    }
    let mut out = key_file.clone();
    out.remove_principal(me);
    let mut rng = nasd_e2e::keys::os_rng();
    let to: PublicKey = new.enc_public();
    for (kv, k) in keys {
        out.wrap_for(me, to, file_id, kv, &k, &mut rng)
            .map_err(|e| e2e_err(path, e))?;
    }
    Ok(Some(out))
}
