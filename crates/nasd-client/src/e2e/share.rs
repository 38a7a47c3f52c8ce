//! Who can decrypt a file (seed 001 §3.3.1, requirements B.1): `nasd share` wraps its keys for
//! one more user or group; `nasd unshare` drops a principal's wraps and switches later writes
//! to a fresh key the principal never gets (lazy re-encryption: blocks already written keep
//! their key until rewritten); `nasd rekey` re-encrypts every block under a fresh key now;
//! `chmod` makes the wraps follow the file's new readers. Every change swaps the file's state
//! at the manager by compare-and-swap on the state it read, so a concurrent writer's version
//! is never overwritten with stale wraps.
//!
//! An unshare lasts (issue 21 §5): the principals go into the side's unshared list, which the
//! record binds and every later writer's client honours (a new version wraps nothing for them,
//! whatever the mode says), until `nasd share` names them again. Every key opened here is
//! checked against the commitment its writer bound into the record, so a swapped wrap is
//! never passed on to a new reader.

use super::crypt::{versions_in_use, CryptFile};
use super::{decode_state, key_principal, principal_of, Provenance};
use crate::files::{Client, FsError};
use nasd_e2e::counters::CounterIntervals;
use nasd_e2e::keys::{KeyFile, KeyVersion};
use nasd_e2e::record::Binding;
use nasd_e2e::side::{keys_digest, Side, UNSHARED_MAX};
use nasd_e2e::{FileKey, TrustedRecord};
use nasd_proto::manager::calls;
use nasd_proto::manager::{E2eCommit, E2eState, Principal};
use std::sync::Arc;

fn e2e_err(path: &str, what: impl std::fmt::Display) -> FsError {
    FsError::E2e {
        path: path.into(),
        detail: what.to_string(),
    }
}

/// The key versions a version's blocks use, and its record's.
fn in_use(path: &str, record: &TrustedRecord, side: &Side) -> Result<Vec<KeyVersion>, FsError> {
    let c = CounterIntervals::decode(&side.counters).map_err(|e| e2e_err(path, e))?;
    Ok(versions_in_use(&c, record.key_version))
}

impl Client {
    /// The file's end-to-end state now (`None`: plaintext), from a fresh grant.
    pub async fn e2e_state(&self, path: &str) -> Result<Option<E2eState>, FsError> {
        Ok(self.e2e_current(path).await?.map(|(_, e)| e))
    }

    /// The file's inode number and end-to-end state now, from a fresh grant, refused when this
    /// client saw a newer version ([`super::fresh`]).
    async fn e2e_current(&self, path: &str) -> Result<Option<(u64, E2eState)>, FsError> {
        let (o, e) = self.e2e_open(path).await?;
        Ok(e.map(|e| (o.stat.ino, e)))
    }

    /// A fresh grant of the file and its end-to-end state, checked as
    /// [`Client::e2e_current`] checks it.
    async fn e2e_open(
        &self,
        path: &str,
    ) -> Result<(Arc<crate::capcache::OpenFile>, Option<E2eState>), FsError> {
        self.caps_invalidate(path);
        let o = self.open(path, false).await?;
        let Some(e) = o.e2e.clone() else {
            return Ok((o, None));
        };
        let (record, _) = decode_state(path, &e)?;
        self.check_fresh(path, o.stat.ino, &record)?;
        Ok((o, Some(e)))
    }

    /// [`Client::e2e_current`] of a file that must be encrypted.
    async fn encrypted_state(&self, path: &str) -> Result<(u64, E2eState), FsError> {
        let not = || e2e_err(path, "the file is not encrypted");
        let (ino, e) = self.e2e_current(path).await?.ok_or_else(not)?;
        match decode_state(path, &e)?.0.scheme {
            nasd_e2e::Scheme::Pins => Err(not()),
            _ => Ok((ino, e)),
        }
    }

    /// Key version `v` of the version `record`/`side`, unwrapped for this user and checked
    /// against its writer's commitment.
    async fn open_checked(
        &self,
        path: &str,
        record: &TrustedRecord,
        side: &Side,
        v: KeyVersion,
    ) -> Result<FileKey, FsError> {
        let key = self
            .open_key_file(path, &side.key_file, side.file_id, v)
            .await?;
        let one = std::collections::BTreeMap::from([(v, key)]);
        super::crypt::checked_commitments(record, side, &one).map_err(|e| e2e_err(path, e))?;
        Ok(one.into_values().next().expect("one key"))
    }

    /// Who wrote the file's current version and whether its signature verifies (`None`:
    /// the file is not encrypted).
    pub async fn e2e_provenance(&self, path: &str) -> Result<Option<Provenance>, FsError> {
        match self.e2e_state(path).await? {
            None => Ok(None),
            Some(e) => Ok(Some(self.provenance(path, &e).await?)),
        }
    }

    /// Swaps in `side` (and `record`, bound as the next generation and re-signed when it or
    /// the side's commitments or unshares changed) on the state `was` of inode `ino`.
    async fn swap_state(
        &self,
        path: &str,
        ino: u64,
        was: &E2eState,
        mut record: TrustedRecord,
        side: &Side,
    ) -> Result<(), FsError> {
        let (old, old_side) = decode_state(path, was)?;
        if record != old
            || side.commitments != old_side.commitments
            || side.unshared != old_side.unshared
        {
            record.binding = Some(Binding {
                generation: old.binding.map_or(0, |b| b.generation) + 1,
                origin: old.binding.map_or(side.file_id, |b| b.origin),
                keys_digest: keys_digest(side),
            });
        }
        let record_bytes = record.encode();
        let (signature, side) = if record_bytes == was.record {
            (was.signature.clone(), side.clone())
        } else if was.signature.is_empty() {
            (vec![], side.clone())
        } else {
            let id = self.identity().await?;
            let sig = id.signer().sign_record(side.file_id, &record).to_vec();
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
        self.note_fresh(ino, &record);
        Ok(())
    }

    /// Wraps every key version the file uses for `principals` too, and takes them off the
    /// file's unshared list.
    pub async fn share(&self, path: &str, principals: &[Principal]) -> Result<(), FsError> {
        let (ino, e) = self.encrypted_state(path).await?;
        self.share_state(path, ino, e, principals).await
    }

    /// [`Client::share`] from the state `e` of file `ino` just read.
    async fn share_state(
        &self,
        path: &str,
        ino: u64,
        e: E2eState,
        principals: &[Principal],
    ) -> Result<(), FsError> {
        let (record, mut side) = decode_state(path, &e)?;
        let checked = side.clone();
        side.unshared
            .retain(|p| !principals.iter().any(|q| key_principal(*q) == *p));
        for v in in_use(path, &record, &side)? {
            let key = self.open_checked(path, &record, &checked, v).await?;
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
        self.swap_state(path, ino, &e, record, &side).await
    }

    /// Drops `principals`' wraps, puts them on the file's unshared list (honoured by every
    /// later writer) and switches later writes to a fresh key wrapped for the readers that
    /// remain; blocks already written keep their key until rewritten.
    pub async fn unshare(&self, path: &str, principals: &[Principal]) -> Result<(), FsError> {
        self.drop_readers(path, principals, true).await
    }

    /// Drops `principals`' wraps and switches later writes to a fresh key; `lasting`: an
    /// unshare, which later writers honour (a chmod's narrower mode lasts by itself).
    async fn drop_readers(
        &self,
        path: &str,
        principals: &[Principal],
        lasting: bool,
    ) -> Result<(), FsError> {
        let (ino, e) = self.encrypted_state(path).await?;
        let (mut record, mut side) = decode_state(path, &e)?;
        self.commit_to_keys(path, &record, &mut side).await?;
        for p in principals {
            side.key_file.remove_principal(key_principal(*p));
            if lasting {
                side.unshared.push(key_principal(*p));
            }
        }
        side.unshared.sort_unstable();
        side.unshared.dedup();
        if side.unshared.len() > UNSHARED_MAX {
            return Err(e2e_err(
                path,
                format!("a file stays unshared from at most {UNSHARED_MAX} users and groups"),
            ));
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
        let mut commitments: std::collections::BTreeMap<_, _> =
            side.commitments.iter().copied().collect();
        commitments.insert(next, key.commitment());
        let keep = in_use(path, &record, &side)?;
        side.commitments = commitments
            .into_iter()
            .filter(|(v, _)| keep.contains(v))
            .collect();
        self.swap_state(path, ino, &e, record, &side).await
    }

    /// Checks a bound record's commitments and unshares against it; completes them for a
    /// record from before bindings (each key this user can open; what it cannot stays
    /// unbound).
    async fn commit_to_keys(
        &self,
        path: &str,
        record: &TrustedRecord,
        side: &mut Side,
    ) -> Result<(), FsError> {
        if let Some(b) = &record.binding {
            if b.keys_digest != keys_digest(side) {
                return Err(e2e_err(
                    path,
                    "the key commitments and unshares are not the record's",
                ));
            }
            return Ok(());
        }
        let mut out = vec![];
        for v in in_use(path, record, side)? {
            if let Ok(k) = self
                .open_key_file(path, &side.key_file, side.file_id, v)
                .await
            {
                out.push((v, k.commitment()));
            }
        }
        side.commitments = out;
        Ok(())
    }

    /// Re-encrypts every block of the file under a fresh key now, wrapped for the readers
    /// the current version has (a copy-on-write change: the old version stays until it
    /// commits).
    pub async fn rekey(&self, path: &str) -> Result<(), FsError> {
        let (_, e) = self.encrypted_state(path).await?;
        let (record, side) = decode_state(path, &e)?;
        let readers: Vec<Principal> = readers_in(&side.key_file, record.key_version)
            .into_iter()
            .filter(|p| !side.unshared.contains(&key_principal(*p)))
            .collect();
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
        let (o, Some(e)) = self.e2e_open(path).await? else {
            return Ok(());
        };
        let (record, side) = decode_state(path, &e)?;
        if record.scheme == nasd_e2e::Scheme::Pins {
            // A plaintext file has no wraps to follow its mode.
            return Ok(());
        }
        let further = self.logged_readers(path, &o.policy.readers).await?;
        self.note_group_keys(&o.policy.group_keys);
        let mut want = self
            .readers_of(
                o.stat.uid,
                o.stat.gid,
                o.stat.mode,
                &further,
                &o.policy.everyone,
            )
            .await?;
        want.retain(|p| !side.unshared.contains(&key_principal(*p)));
        let have = readers_in(&side.key_file, record.key_version);
        let gone: Vec<Principal> = have.iter().copied().filter(|p| !want.contains(p)).collect();
        let added: Vec<Principal> = want.iter().copied().filter(|p| !have.contains(p)).collect();
        if !added.is_empty() {
            self.share_state(path, o.stat.ino, e, &added).await?;
        }
        if !gone.is_empty() {
            self.drop_readers(path, &gone, false).await?;
        }
        Ok(())
    }
}

/// The principals holding a wrap of key version `kv`.
fn readers_in(kf: &KeyFile, kv: KeyVersion) -> Vec<Principal> {
    kf.entries()
        .iter()
        .filter(|e| e.key_version == kv)
        .map(|e| principal_of(e.principal))
        .collect()
}

/// The encryption layer at the top of a stack, if it is one.
fn crypt_of(io: &Arc<dyn crate::layer::FileIo>) -> Option<Arc<CryptFile>> {
    io.crypt_file()
}
