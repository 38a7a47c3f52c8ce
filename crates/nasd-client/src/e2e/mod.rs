//! End-to-end protection in the client (issue 10; seeds 001 and 003; requirements Part 2 B):
//! files are encrypted and authenticated by their writer before a byte leaves the client, and
//! checked by their reader against a few trusted bytes kept at the file manager, so neither
//! drives nor the disks under them learn file contents or can change or roll back a file
//! undetected. The manager holds policy, the trusted records and wrapped keys it cannot open.
//!
//! # Layout
//! - [`identity`]: a user's X25519 and Ed25519 keys from one seed, made by the user's own
//!   client and sealed under the key their OPAQUE login gives.
//! - [`keyring`]: public keys of users and groups, group secrets, key files made and opened.
//! - [`keylog`]: the client's checked copy of the manager's log of every key change: users'
//!   chains of signed keys, the log's root, fingerprints and resets.
//! - [`policy`]: a directory policy's further readers, signed into the key log by who set
//!   them; writers wrap for no others.
//! - [`pins`]: MT-EINT over the drives' trees: readers check every reply against the writer's
//!   pins; writers keep track of their objects' tops.
//! - [`crypt`]: the encryption layer of the file stack, above the layout.
//! - [`fresh`]: the newest version of each file this client verified, so a manager restored
//!   from a backup is caught (issue 21 §7).
//! - [`share`]: `share`, `unshare`, `rekey`, and wraps that follow `chmod`.
//! - [`rotate`]: `nasd user rotate-keys`: a new identity, and every wrap to the old key
//!   replaced by one to the new.
//!
//! What a version carries at the manager ([`nasd_proto::manager::E2eState`]): the trusted
//! record (nasd-e2e's [`TrustedRecord`]), the writer's Ed25519 signature over it (seed 001
//! schemes 1 and 2: one signature per version, not per block) and the side data
//! ([`nasd_e2e::side::Side`]). A reader checks, before it trusts a byte: the side against the
//! record (counters digest, pins root), the signature with the signer's public key (when the
//! version carries one), and then every block against the record as it reads.

pub mod crypt;
pub mod fresh;
pub mod identity;
pub mod keylog;
pub mod keyring;
pub mod pins;
pub mod policy;
pub mod rotate;
pub mod share;

use crate::files::{Client, FsError};
use crypt::{CryptFile, Lineage};
use nasd_e2e::keys::KeyVersion;
use nasd_e2e::side::{Integrity, Side};
use nasd_e2e::sign::WriterPublicKey;
use nasd_e2e::{FileId, FileKey, TrustedRecord};
use nasd_proto::manager::{E2eCommit, E2ePolicy, E2eState, Eint, Layout, WriterAuth};
use pins::ComponentPin;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Who wrote a version and whether their signature verifies (what `nasd stat` shows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    /// The user the manager says committed the version.
    pub writer: u32,
    /// The user whose key signed it, if any (a gateway signs for the users it acts for).
    pub signer: Option<u32>,
    /// `Some(true)`: the signature verifies with the signer's key; `Some(false)`: it does
    /// not; `None`: the version carries no signature (scheme 3).
    pub verified: Option<bool>,
    pub scheme: Eint,
    /// A plaintext file whose record keeps only its components' pins (no keys).
    pub plain: bool,
    pub key_version: KeyVersion,
    /// The version's generation in its file's history (`None`: a record from before
    /// bindings).
    pub generation: Option<u64>,
    /// Who holds a wrap of the current key version (who can decrypt what is written next).
    pub readers: Vec<nasd_proto::manager::Principal>,
    /// Who the file stays unshared from (later writes wrap nothing for them).
    pub unshared: Vec<nasd_proto::manager::Principal>,
}

/// A key file's principal as the manager's protocol names it.
pub(crate) fn principal_of(p: nasd_e2e::Principal) -> nasd_proto::manager::Principal {
    match p {
        nasd_e2e::Principal::User(u) => nasd_proto::manager::Principal::User(u),
        nasd_e2e::Principal::Group(g) => nasd_proto::manager::Principal::Group(g),
    }
}

/// A manager principal as a key file names it.
pub(crate) fn key_principal(p: nasd_proto::manager::Principal) -> nasd_e2e::Principal {
    match p {
        nasd_proto::manager::Principal::User(u) => nasd_e2e::Principal::User(u),
        nasd_proto::manager::Principal::Group(g) => nasd_e2e::Principal::Group(g),
    }
}

fn e2e_err(path: &str, what: impl std::fmt::Display) -> FsError {
    FsError::E2e {
        path: path.into(),
        detail: what.to_string(),
    }
}

/// A version's record and side data, decoded.
pub fn decode_state(path: &str, e: &E2eState) -> Result<(TrustedRecord, Side), FsError> {
    let record = TrustedRecord::decode(&e.record).map_err(|x| e2e_err(path, x))?;
    let side = Side::decode(&e.side).map_err(|x| e2e_err(path, x))?;
    Ok((record, side))
}

impl Client {
    /// Whether a version's signature verifies (and by whom), checked with the signer's
    /// registered Ed25519 key.
    pub async fn provenance(&self, path: &str, e: &E2eState) -> Result<Provenance, FsError> {
        let (record, side) = decode_state(path, e)?;
        let verified = match (side.signer, e.signature.as_slice()) {
            (Some(uid), sig) if sig.len() == 64 => {
                let keys = self.user_keys(&[uid], false).await?;
                Some(keys.get(&uid).is_some_and(|k| {
                    let sig: [u8; 64] = sig.try_into().expect("64 bytes");
                    WriterPublicKey(k.sign_public)
                        .verify_record(side.file_id, &record, &sig)
                        .is_ok()
                }))
            }
            (Some(_), _) => Some(false),
            (None, _) => None,
        };
        Ok(Provenance {
            writer: e.writer,
            signer: side.signer,
            verified,
            scheme: crypt_eint(&record),
            plain: record.scheme == nasd_e2e::Scheme::Pins,
            key_version: record.key_version,
            generation: record.binding.map(|b| b.generation),
            readers: side
                .key_file
                .entries()
                .iter()
                .filter(|w| w.key_version == record.key_version)
                .map(|w| principal_of(w.principal))
                .collect(),
            unshared: side.unshared.iter().map(|p| principal_of(*p)).collect(),
        })
    }

    /// Refuses version `record` of inode `ino` when this client saw a newer one
    /// ([`fresh`]).
    pub(crate) fn check_fresh(
        &self,
        path: &str,
        ino: u64,
        record: &TrustedRecord,
    ) -> Result<(), FsError> {
        self.freshness()
            .check(ino, record.binding.as_ref())
            .map_err(|x| e2e_err(path, x))
    }

    /// Notes that this client verified or wrote version `record` of inode `ino`.
    pub(crate) fn note_fresh(&self, ino: u64, record: &TrustedRecord) {
        if let Some(b) = &record.binding {
            self.freshness().note(ino, b);
        }
    }

    /// Notes the version a commit this client made carries.
    pub(crate) fn note_committed(&self, ino: u64, c: &E2eCommit) {
        if let Ok(r) = TrustedRecord::decode(&c.state.record) {
            self.note_fresh(ino, &r);
        }
    }

    /// The encryption layer's view of a committed version for reading (pins checked by the
    /// components) or changing (pins tracked): the side checked against the record, the
    /// signature against the signer's key, the keys its blocks use unwrapped.
    pub(crate) async fn open_crypt(
        &self,
        o: &crate::capcache::OpenFile,
        e: &E2eState,
        write: bool,
    ) -> Result<Arc<CryptFile>, FsError> {
        let (path, layout) = (o.path.as_str(), &o.layout);
        let (record, side) = decode_state(path, e)?;
        self.check_fresh(path, o.stat.ino, &record)?;
        let p = self.provenance(path, e).await?;
        if p.verified == Some(false) {
            return Err(e2e_err(
                path,
                format!(
                    "the version's signature does not verify with user {}'s key: refusing it",
                    p.signer.unwrap_or(p.writer)
                ),
            ));
        }
        let counters = nasd_e2e::counters::CounterIntervals::decode(&side.counters)
            .map_err(|x| e2e_err(path, x))?;
        let versions = match record.scheme {
            nasd_e2e::Scheme::Pins => vec![],
            _ => crypt::versions_in_use(&counters, record.key_version),
        };
        let mut keys = BTreeMap::new();
        for v in versions {
            // A writer needs the current key; older ones only where blocks still use them.
            match self
                .open_key_file(path, &side.key_file, side.file_id, v)
                .await
            {
                Ok(k) => {
                    keys.insert(v, k);
                }
                Err(e) if v == record.key_version || !write => return Err(e),
                Err(_) => {}
            }
        }
        let pins = match &side.integrity {
            Integrity::Pins(ps) => {
                if ps.len() != layout.components.len() {
                    return Err(e2e_err(path, "the pins do not match the file's layout"));
                }
                ps.iter()
                    .zip(&layout.components)
                    .map(|(p, c)| {
                        Arc::new(if write {
                            ComponentPin::copy_of(c.suite, p)
                        } else {
                            ComponentPin::check(*p)
                        })
                    })
                    .collect()
            }
            Integrity::Nodes(_) => vec![],
        };
        let f = CryptFile::open(path, &record, &side, &keys, pins).map_err(|x| e2e_err(path, x))?;
        self.note_fresh(o.stat.ino, &record);
        Ok(Arc::new(f))
    }

    /// What a new version replacing `e` (of inode `ino`) carries over: its place in the
    /// file's history and who it stays unshared from, when `e`'s signature verifies (else a
    /// warning, and the new version starts a history of its own: a writer honours only
    /// unshares its client can check).
    async fn lineage_of(
        &self,
        path: &str,
        ino: u64,
        e: &E2eState,
    ) -> Result<(Lineage, Vec<nasd_proto::manager::Principal>), FsError> {
        let Ok((record, side)) = decode_state(path, e) else {
            return Ok(Default::default());
        };
        self.check_fresh(path, ino, &record)?;
        if self.provenance(path, e).await?.verified == Some(false) {
            tracing::warn!(
                "{}: the version replaced does not verify; the new one starts a history of its own",
                crate::escape::shown(path)
            );
            return Ok(Default::default());
        }
        let readers = side
            .key_file
            .entries()
            .iter()
            .filter(|w| w.key_version == record.key_version)
            .map(|w| principal_of(w.principal))
            .collect();
        let lineage = Lineage {
            generation: record.binding.map_or(0, |b| b.generation),
            origin: Some(record.binding.map_or(side.file_id, |b| b.origin)),
            unshared: side.unshared,
        };
        Ok((lineage, readers))
    }

    /// The encryption layer for a new version written from scratch (an upload): a fresh file
    /// key (a new key version past `replacing`'s), wrapped for everyone who may read a file
    /// of owner `uid`, group `gid` and `mode` under `policy`; fresh objects' tracks for MT.
    #[allow(clippy::too_many_arguments)] // the file's owners, mode, layout and policy
    pub(crate) async fn new_crypt(
        &self,
        path: &str,
        stat: &nasd_proto::manager::FileStat,
        layout: &Layout,
        policy: &E2ePolicy,
        replacing: Option<&E2eState>,
    ) -> Result<Arc<CryptFile>, FsError> {
        let (uid, gid, mode) = (stat.uid, stat.gid, stat.mode);
        // The writer's own keys exist (and are registered) before it wraps for itself.
        self.identity().await?;
        let key_version = match replacing {
            Some(e) => TrustedRecord::decode(&e.record)
                .map(|r| r.key_version + 1)
                .unwrap_or(1),
            None => 1,
        };
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).expect("the OS random source works");
        let file_id = FileId(id);
        let key = FileKey::generate();
        let further = self.logged_readers(path, &policy.readers).await?;
        self.note_group_keys(&policy.group_keys);
        let mut readers = self
            .readers_of(uid, gid, mode, &further, &policy.everyone)
            .await?;
        // A new version of a file keeps the readers it was shared with (nasd share), and
        // leaves out those it was unshared from, whatever the mode says.
        let (lineage, shared) = match replacing {
            Some(e) => self.lineage_of(path, stat.ino, e).await?,
            None => Default::default(),
        };
        readers.extend(shared);
        readers.retain(|p| !lineage.unshared.contains(&key_principal(*p)));
        readers.sort();
        readers.dedup();
        let key_file = self
            .make_key_file(path, file_id, key_version, &key, &readers)
            .await?;
        let pins = if policy.eint == Eint::Mt {
            layout
                .components
                .iter()
                .map(|c| Arc::new(ComponentPin::fresh(c.suite)))
                .collect()
        } else {
            vec![]
        };
        let f = CryptFile::create(
            path,
            file_id,
            policy.eint,
            policy.block_bytes(),
            key_version,
            &key,
            key_file,
            pins,
            lineage,
        )
        .map_err(|x| e2e_err(path, x))?;
        Ok(Arc::new(f))
    }

    /// The writer state of a new version of a plaintext file over several objects (issue 21
    /// §5): fresh tracks of its components, so its record pins what each drive must hold and
    /// readers read around a drive that serves anything else, as for an encrypted file.
    pub(crate) async fn new_pins(
        &self,
        path: &str,
        ino: u64,
        layout: &Layout,
        replacing: Option<&E2eState>,
    ) -> Result<Arc<CryptFile>, FsError> {
        let (lineage, _) = match replacing {
            Some(e) => self.lineage_of(path, ino, e).await?,
            None => Default::default(),
        };
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).expect("the OS random source works");
        let pins = layout
            .components
            .iter()
            .map(|c| Arc::new(ComponentPin::fresh(c.suite)))
            .collect();
        Ok(Arc::new(CryptFile::create_plain(
            path,
            FileId(id),
            pins,
            lineage,
        )))
    }

    /// Pins for the components of an MT file that missed this writer's writes (their drive
    /// was down, they were stale, or they have no object yet): the content the layout's code
    /// says they hold, rebuilt from the others (read through the writer's own tracks, so
    /// checked) into track sinks, as the manager's rebuild will write it. A component that
    /// cannot be rebuilt now gets an unknown pin (the commit marks it stale anyway, and
    /// readers read around it: no rebuild could match an old pin).
    pub(crate) async fn pin_missed(
        &self,
        o: &crate::capcache::OpenFile,
        f: &CryptFile,
        missed: u64,
    ) -> Result<(), FsError> {
        if missed == 0 || f.pins.is_empty() || o.layout.components.len() < 2 {
            return Ok(());
        }
        let geo: nasd_ec::Layout = o
            .layout
            .geometry
            .parse()
            .map_err(|e| e2e_err(&f.path, format!("layout {}: {e}", o.layout.geometry)))?;
        let parts: Vec<Arc<dyn crate::layer::FileIo>> = o
            .layout
            .components
            .iter()
            .zip(&o.caps)
            .enumerate()
            .map(|(i, (c, cap))| {
                Arc::new(
                    crate::component::ComponentIo::new(
                        self.pool().clone(),
                        i,
                        c.addr.clone(),
                        cap.clone(),
                    )
                    .with_pin(f.pins[i].clone()),
                ) as Arc<dyn crate::layer::FileIo>
            })
            .collect();
        let striped = crate::striped::Striped::new(geo, parts, f.length(), missed)
            .map_err(|e| e2e_err(&f.path, e))?;
        for c in (0..f.pins.len()).filter(|c| missed >> c & 1 == 1) {
            let sink = Arc::new(pins::TrackSink::new(o.layout.components[c].suite));
            let onto: Arc<dyn crate::layer::FileIo> = sink.clone();
            match striped.rebuild_range(c, 0, u64::MAX, Some(onto)).await {
                Ok(_) => {
                    let sink = Arc::try_unwrap(sink)
                        .map_err(|_| e2e_err(&f.path, "a sink still in use"))?;
                    f.pins[c].replace_track(sink);
                }
                Err(e) => {
                    tracing::warn!(
                        "{}: component {c} missed the writes and cannot be pinned now: {e}",
                        f.path
                    );
                    f.pins[c].forget();
                }
            }
        }
        Ok(())
    }

    /// The state to commit for what `f` holds now: signed (schemes 1 and 2) with this user's
    /// key; `expect` names the state a change built on (zeros for an upload).
    pub(crate) async fn crypt_commit(
        &self,
        f: &CryptFile,
        auth: WriterAuth,
        expect: [u8; 32],
    ) -> Result<E2eCommit, FsError> {
        let signs = auth.signs();
        let id = if signs {
            Some(self.identity().await?)
        } else {
            None
        };
        let (record, side) = f.state(id.as_ref().map(|i| i.uid));
        let signature = match &id {
            Some(i) => i.signer().sign_record(side.file_id, &record).to_vec(),
            None => vec![],
        };
        let side = side.encode();
        if side.len() > nasd_proto::e2e::E2E_SIDE_BYTES_MAX {
            return Err(e2e_err(
                &f.path,
                format!(
                    "the file's side data ({} bytes) passes the manager's {} bytes: too many random-looking blocks for {}-EINT; use MT",
                    side.len(),
                    nasd_proto::e2e::E2E_SIDE_BYTES_MAX,
                    f.scheme.name()
                ),
            ));
        }
        Ok(E2eCommit {
            expect,
            state: E2eState {
                record: record.encode().to_vec(),
                writer: 0,
                signature,
                side,
            },
        })
    }
}

/// The construction a record names.
fn crypt_eint(r: &TrustedRecord) -> Eint {
    match r.scheme {
        nasd_e2e::Scheme::Mt | nasd_e2e::Scheme::Pins => Eint::Mt,
        nasd_e2e::Scheme::Rand => Eint::Rand,
        nasd_e2e::Scheme::Comp => Eint::Comp,
    }
}

/// The state hash a change names as what it built on.
pub fn state_hash(e: Option<&E2eState>) -> [u8; 32] {
    match e {
        None => [0; 32],
        Some(e) => nasd_e2e::record::state_hash(&e.record, &e.side),
    }
}
