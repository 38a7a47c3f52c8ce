//! Who can decrypt a file (seed 001 §3.3.1, requirements B.1): `nasd share` wraps its keys for
//! one more user or group; `nasd unshare` drops a principal's wraps and switches later writes
//! to a fresh key the principal never gets (lazy re-encryption: blocks already written keep
//! their key until rewritten); `nasd rekey` re-encrypts every block under a fresh key now;
//! `chmod` makes the wraps follow the file's new readers. Every change swaps the file's state
//! at the manager by compare-and-swap on the state it read, so a concurrent writer's version
//! is never overwritten with stale wraps.

use super::crypt::CryptFile;
use super::{decode_state, Provenance};
use crate::files::{Client, FsError};
use nasd_e2e::keys::{KeyFile, KeyVersion};
use nasd_e2e::side::Side;
use nasd_e2e::{FileKey, Principal as KeyPrincipal, TrustedRecord};
use nasd_proto::manager::calls;
use nasd_proto::manager::{E2eCommit, E2eState, Principal};
use std::sync::Arc;

fn key_principal(p: Principal) -> KeyPrincipal {
    match p {
        Principal::User(u) => KeyPrincipal::User(u),
        Principal::Group(g) => KeyPrincipal::Group(g),
    }
}

fn e2e_err(path: &str, what: impl std::fmt::Display) -> FsError {
    FsError::E2e {
        path: path.into(),
        detail: what.to_string(),
    }
}

/// The key versions a version's blocks use, and its record's.
fn versions_in_use(record: &TrustedRecord, side: &Side) -> Result<Vec<KeyVersion>, String> {
    let c =
        nasd_e2e::counters::CounterIntervals::decode(&side.counters).map_err(|e| e.to_string())?;
    let mut v: Vec<KeyVersion> = c
        .intervals()
        .iter()
        .filter(|i| i.ctr > 0)
        .map(|i| i.key_version)
        .collect();
    v.push(record.key_version);
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

impl Client {
    /// The file's end-to-end state now (`None`: plaintext), from a fresh grant.
    pub async fn e2e_state(&self, path: &str) -> Result<Option<E2eState>, FsError> {
        self.caps_invalidate(path);
        let o = self.open(path, false).await?;
        Ok(o.e2e.clone())
    }

    /// Who wrote the file's current version and whether its signature verifies (`None`:
    /// the file is not encrypted).
    pub async fn e2e_provenance(&self, path: &str) -> Result<Option<Provenance>, FsError> {
        match self.e2e_state(path).await? {
            None => Ok(None),
            Some(e) => Ok(Some(self.provenance(path, &e).await?)),
        }
    }

    /// Swaps in `side` (and `record`, re-signed when it changed) on the state `was`.
    async fn swap_state(
        &self,
        path: &str,
        was: &E2eState,
        record: &TrustedRecord,
        side: &Side,
    ) -> Result<(), FsError> {
        let record_bytes = record.encode().to_vec();
        let (signature, side) = if record_bytes == was.record {
            (was.signature.clone(), side.clone())
        } else if was.signature.is_empty() {
            (vec![], side.clone())
        } else {
            let id = self.identity().await?;
            let sig = id.signer().sign_record(side.file_id, record).to_vec();
            (
                sig,
                Side {
                    signer: Some(id.uid),
                    ..side.clone()
                },
            )
        };
        let update = E2eCommit {
            expect: super::state_hash(Some(was)),
            state: E2eState {
                record: record_bytes,
                writer: 0,
                signature,
                side: side.encode(),
            },
        };
        self.caps_invalidate(path);
        let p = path.into();
        self.call(path, calls::E2eUpdate { path: p, update })
            .await?;
        self.caps_invalidate(path);
        Ok(())
    }

    /// Wraps every key version the file uses for `principals` too.
    pub async fn share(&self, path: &str, principals: &[Principal]) -> Result<(), FsError> {
        let e = self
            .e2e_state(path)
            .await?
            .ok_or_else(|| e2e_err(path, "the file is not encrypted"))?;
        let (record, mut side) = decode_state(path, &e)?;
        for v in versions_in_use(&record, &side).map_err(|x| e2e_err(path, x))? {
            let key = self
                .open_key_file(path, &side.key_file, side.file_id, v)
                .await?;
            let add: Vec<Principal> = principals
                .iter()
                .copied()
                .filter(|p| side.key_file.find(key_principal(*p), v).is_none())
                .collect();
            if add.is_empty() {
                continue;
            }
            let more = self
                .make_key_file(path, side.file_id, v, &key, &add)
                .await?;
            for entry in more.entries() {
                side.key_file
                    .insert(entry.clone())
                    .map_err(|x| e2e_err(path, x))?;
            }
        }
        self.swap_state(path, &e, &record, &side).await
    }

    /// Drops `principals`' wraps and switches later writes to a fresh key wrapped for the
    /// readers that remain; blocks already written keep their key until rewritten.
    pub async fn unshare(&self, path: &str, principals: &[Principal]) -> Result<(), FsError> {
        let e = self
            .e2e_state(path)
            .await?
            .ok_or_else(|| e2e_err(path, "the file is not encrypted"))?;
        let (mut record, mut side) = decode_state(path, &e)?;
        for p in principals {
            side.key_file.remove_principal(key_principal(*p));
        }
        let remaining: Vec<Principal> = readers_in(&side.key_file, record.key_version);
        let next = record.key_version + 1;
        let key = FileKey::generate();
        let fresh = self
            .make_key_file(path, side.file_id, next, &key, &remaining)
            .await?;
        for entry in fresh.entries() {
            side.key_file
                .insert(entry.clone())
                .map_err(|x| e2e_err(path, x))?;
        }
        record.key_version = next;
        self.swap_state(path, &e, &record, &side).await
    }

    /// Re-encrypts every block of the file under a fresh key now, wrapped for the readers
    /// the current version has (a copy-on-write change: the old version stays until it
    /// commits).
    pub async fn rekey(&self, path: &str) -> Result<(), FsError> {
        let e = self
            .e2e_state(path)
            .await?
            .ok_or_else(|| e2e_err(path, "the file is not encrypted"))?;
        let (record, side) = decode_state(path, &e)?;
        let readers = readers_in(&side.key_file, record.key_version);
        let size = record.length;
        self.change(path, size, |io| {
            let readers = readers.clone();
            async move {
                let f = crypt_of(&io).ok_or_else(|| {
                    crate::layer::IoError::Usage("rekey: the file is not encrypted".into())
                })?;
                let (kf, kv) = f.key_file();
                let next = kv + 1;
                let key = FileKey::generate();
                let new_kf = self
                    .make_key_file(path, f.file_id, next, &key, &readers)
                    .await
                    .map_err(|x| crate::layer::IoError::Usage(x.to_string()))?;
                drop(kf);
                // Read everything under the old keys, then write it under the new one.
                let step = 8 << 20;
                let mut data = Vec::with_capacity(size as usize);
                let mut at = 0;
                while at < size {
                    let r = io.read(at, step.min(size - at)).await?;
                    at += r.data.len() as u64;
                    data.extend_from_slice(&r.data);
                    if r.data.is_empty() {
                        break;
                    }
                }
                f.rotate(next, &key, new_kf);
                let mut at = 0;
                for piece in data.chunks(step as usize) {
                    io.write(at, piece).await?;
                    at += piece.len() as u64;
                }
                Ok(())
            }
        })
        .await
    }

    /// Makes the wraps follow the readers the file's mode and owners name now (after
    /// `chmod` or `chown`): new readers get wraps of every key in use; readers that lost
    /// their right lose theirs and later writes use a fresh key (as [`Client::unshare`]).
    pub async fn rewrap(&self, path: &str) -> Result<(), FsError> {
        let o = {
            self.caps_invalidate(path);
            self.open(path, false).await?
        };
        let Some(e) = o.e2e.clone() else {
            return Ok(());
        };
        let (record, side) = decode_state(path, &e)?;
        let want = self
            .readers_of(
                o.stat.uid,
                o.stat.gid,
                o.stat.mode,
                &o.policy.readers,
                &o.policy.everyone,
            )
            .await?;
        let have = readers_in(&side.key_file, record.key_version);
        let gone: Vec<Principal> = have.iter().copied().filter(|p| !want.contains(p)).collect();
        let added: Vec<Principal> = want.iter().copied().filter(|p| !have.contains(p)).collect();
        if !added.is_empty() {
            self.share(path, &added).await?;
        }
        if !gone.is_empty() {
            self.unshare(path, &gone).await?;
        }
        Ok(())
    }
}

/// The principals holding a wrap of key version `kv`.
fn readers_in(kf: &KeyFile, kv: KeyVersion) -> Vec<Principal> {
    kf.entries()
        .iter()
        .filter(|e| e.key_version == kv)
        .map(|e| match e.principal {
            KeyPrincipal::User(u) => Principal::User(u),
            KeyPrincipal::Group(g) => Principal::Group(g),
        })
        .collect()
}

/// The encryption layer at the top of a stack, if it is one.
fn crypt_of(io: &Arc<dyn crate::layer::FileIo>) -> Option<Arc<CryptFile>> {
    io.crypt_file()
}
