//! The key log's server side (issue 21 §4): pages of the store's log of key changes under a
//! head the manager signs, and an admin's logged reset of a user who lost every key.
//!
//! The log itself is the store's (`MetaStore::key_log`), appended in the transaction that
//! changes a user's keys, so it holds every key the manager ever served. Here the manager
//! keeps the hashes of the entries it has read (appended as the log grows; read again from
//! the start if the store's log is ever shorter than what it read, as after a restore) to
//! compute the RFC 6962 root (`nasd_crypto::keylog`), and signs each head with its log key:
//! an Ed25519 key derived from the OPAQUE server keys' file, so it lives and is kept (or
//! stolen) with the manager's other login secret and needs no file of its own.
//!
//! Clients hold every entry, check each user's chain of signatures and recompute the root
//! themselves (`nasd_client::e2e::keylog`): the signature only makes a head the manager
//! showed one client and not another a proof it cannot deny.

use crate::service::{store_err, Caller, Manager};
use crate::{now_ms, MgrError, MgrResult};
use ed25519_dalek::SigningKey;
use nasd_crypto::keylog::{leaf_hash, root, sign_head, Hash};
use nasd_proto::manager::{KeyLogHead, KeyLogPage, MgrStatus, KEY_LOG_PAGE_MAX};
use std::sync::Mutex;
use zeroize::Zeroizing;

/// Domain separation of the log key's derivation from the OPAQUE server keys.
const LOG_KEY_CONTEXT: &str = "nasd manager key log signing key v1";

/// The manager's log key and the leaves of the log it has read.
pub struct KeyLogSigner {
    key: SigningKey,
    leaves: Mutex<Vec<Hash>>,
}

impl std::fmt::Debug for KeyLogSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyLogSigner")
            .field("log_key", &hex::encode(self.public()))
            .finish()
    }
}

impl KeyLogSigner {
    /// The log key derived from `secret` (the OPAQUE server keys' bytes).
    pub fn from_secret(secret: &[u8]) -> KeyLogSigner {
        let seed = Zeroizing::new(blake3::derive_key(LOG_KEY_CONTEXT, secret));
        KeyLogSigner {
            key: SigningKey::from_bytes(&seed),
            leaves: Mutex::new(Vec::new()),
        }
    }

    /// The public half clients keep.
    pub fn public(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }
}

impl Manager {
    /// Up to [`KEY_LOG_PAGE_MAX`] entries of the key log from `from`, after the signed head of
    /// the whole log, read under one hold of the store so the two agree.
    pub fn key_log_page(&self, from: u64) -> MgrResult<KeyLogPage> {
        let st = self.st();
        let size = st.key_log_len().map_err(|e| store_err(e, "key log"))?;
        if from > size {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("key log: entry {from} is past its end ({size} entries)"),
            ));
        }
        let mut leaves = self.key_log.leaves.lock().expect("key log leaves");
        if leaves.len() as u64 > size {
            leaves.clear();
        }
        while (leaves.len() as u64) < size {
            let more = st
                .key_log(leaves.len() as u64, KEY_LOG_PAGE_MAX)
                .map_err(|e| store_err(e, "key log"))?;
            if more.is_empty() {
                return Err(MgrError::new(
                    MgrStatus::Internal,
                    format!("key log: {size} entries counted, {} read", leaves.len()),
                ));
            }
            leaves.extend(more.iter().map(|e| leaf_hash(&e.to_bytes())));
        }
        let r = root(&leaves[..size as usize]);
        drop(leaves);
        let entries = st
            .key_log(from, KEY_LOG_PAGE_MAX)
            .map_err(|e| store_err(e, "key log"))?;
        Ok(KeyLogPage {
            head: KeyLogHead {
                size,
                root: r,
                signature: sign_head(&self.key_log.key, size, &r),
                log_key: self.key_log.public(),
            },
            from,
            entries,
        })
    }

    /// Clears `user`'s keys with a logged reset (admins; never from a gateway's session): for
    /// a user who lost every key. Their files stay wrapped to the old keys; their next login
    /// makes a new chain, which every client sees began with this reset.
    pub fn user_key_reset(&self, c: &Caller, user: &str) -> MgrResult<()> {
        if !c.admin || c.via.is_some() {
            return Err(MgrError::new(
                MgrStatus::PermissionDenied,
                format!("{user}: only an admin resets a user's keys"),
            ));
        }
        let mut st = self.st();
        let u = st
            .user_by_name(user)
            .map_err(|e| store_err(e, user))?
            .ok_or_else(|| MgrError::new(MgrStatus::UnknownUser, user.to_string()))?;
        if st
            .user_keys(u.uid)
            .map_err(|e| store_err(e, user))?
            .is_none()
        {
            return Err(MgrError::new(
                MgrStatus::InvalidArgument,
                format!("{user}: has no keys to reset"),
            ));
        }
        let v = st
            .reset_user_keys(u.uid, c.uid, now_ms())
            .map_err(|e| store_err(e, user))?;
        tracing::warn!(user, uid = u.uid, by = %c.name, version = v, "keys reset");
        Ok(())
    }
}
