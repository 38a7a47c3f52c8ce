//! What authorizes a request: a key of the hierarchy read from a key file, or a capability
//! (its public args, its secret key, and optionally its sealed form), and the capability file
//! format the operator CLI writes and reads.
//!
//! Capability file (JSON, written mode 0600 because it holds the capability key):
//! ```text
//! { "version": 1, "suite": "blake3", "drive": "00000000000000ab", "partition": 1,
//!   "object": 16, "offset": 0, "len": 18446744073709551615, "rights": "read,write",
//!   "expiry_ms": 1700000000000, "audit_id": 0, "min_protection": "integrity-data",
//!   "key": "<64 hex>", "sealed": "<hex>" | null, "writer_key": "<64 hex>" | null }
//! ```
//! `writer_key` (optional; absent means none) is the Ed25519 public key the capability names as
//! its object's writer (protocol version 4). A reader that ignores it sends args without it,
//! which the drive refuses (`BadDigest`): the key is inside the capability key's input.

use crate::ClientError;
use nasd_crypto::capability::{capability_key, seal};
use nasd_crypto::keyfile::KeyFile;
use nasd_crypto::wsig::WriterSigner;
use nasd_crypto::Key;
use nasd_proto::{
    CapabilityArgs, DriveId, KeyType, ObjectId, PartitionId, Protection, Region, Rights, Suite,
    WriterPublicKey,
};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// Version of the capability file format.
pub const CAPABILITY_FILE_VERSION: u32 = 1;

/// A capability as a client holds it: the args the manager decided, the key it derived from
/// them, and, when minted `--sealed`, the args encrypted under the working key
/// (PRIVACY_CAPABILITY), which the client sends instead of the clear args.
///
/// When the args name a writer key (`args.writer_key`, seed 001 §3.3.1 scheme 1), every write
/// and size change under the capability is signed with `signer`, the writer's Ed25519 signing
/// key, which the caller attaches ([`Capability::with_signer`]); without it such a request
/// fails before anything is sent ([`ClientError::NotSigned`]). The signer never leaves the
/// client and is zeroized when its last holder drops it; `Debug` shows its public key only.
#[derive(Clone, Debug)]
pub struct Capability {
    pub args: CapabilityArgs,
    pub key: Key,
    pub sealed: Option<Vec<u8>>,
    pub suite: Suite,
    pub signer: Option<Arc<WriterSigner>>,
}

impl Capability {
    /// Mints a capability from a working key, as a file manager does (seed 002 §2.4):
    /// `key = MAC(working_key, args, access_control_version)`.
    pub fn mint(
        suite: Suite,
        working_key: &Key,
        args: CapabilityArgs,
        access_control_version: u64,
        sealed: bool,
    ) -> Capability {
        assert!(
            args.region.end().is_some(),
            "a capability region must not overflow u64"
        );
        Capability {
            key: capability_key(suite, working_key, &args, access_control_version),
            sealed: sealed.then(|| seal(suite, working_key, &args)),
            args,
            suite,
            signer: None,
        }
    }

    /// The capability with the writer's signing key attached, for the writes it must sign.
    /// Whether the key is the capability's writer key is checked when a request is built.
    pub fn with_signer(mut self, signer: Arc<WriterSigner>) -> Capability {
        self.signer = Some(signer);
        self
    }

    pub fn to_file(&self) -> CapabilityFile {
        CapabilityFile {
            version: CAPABILITY_FILE_VERSION,
            suite: self.suite.name().to_string(),
            drive: format!("{:016x}", self.args.drive.0),
            partition: self.args.partition.0,
            object: self.args.object.0,
            offset: self.args.region.offset,
            len: self.args.region.len,
            rights: self.args.rights.to_string(),
            expiry_ms: self.args.expiry_ms,
            audit_id: self.args.audit_id,
            min_protection: self.args.min_protection.to_string(),
            key: self.key.to_hex(),
            sealed: self.sealed.as_ref().map(hex::encode),
            writer_key: self.args.writer_key.map(|k| k.to_string()),
        }
    }

    pub fn from_file(f: &CapabilityFile) -> Result<Capability, String> {
        if f.version != CAPABILITY_FILE_VERSION {
            return Err(format!("unsupported capability file version {}", f.version));
        }
        let region = Region::new(f.offset, f.len);
        if region.end().is_none() {
            return Err("region offset + len overflows".into());
        }
        let args = CapabilityArgs {
            drive: DriveId(u64::from_str_radix(&f.drive, 16).map_err(|_| "bad drive id")?),
            partition: PartitionId(f.partition),
            object: ObjectId(f.object),
            region,
            rights: Rights::parse(&f.rights).ok_or("bad rights")?,
            expiry_ms: f.expiry_ms,
            audit_id: f.audit_id,
            min_protection: Protection::parse(&f.min_protection).ok_or("bad min_protection")?,
            writer_key: match &f.writer_key {
                Some(h) => Some(WriterPublicKey(
                    hex::decode(h.trim())
                        .ok()
                        .and_then(|b| b.try_into().ok())
                        .ok_or("bad writer_key (64 hex digits)")?,
                )),
                None => None,
            },
        };
        Ok(Capability {
            args,
            key: Key::from_hex(&f.key).ok_or("bad key")?,
            sealed: match &f.sealed {
                Some(s) => Some(hex::decode(s).map_err(|_| "bad sealed hex")?),
                None => None,
            },
            suite: Suite::parse(&f.suite).ok_or("bad suite")?,
            signer: None,
        })
    }

    pub fn load(path: &Path) -> Result<Capability, ClientError> {
        let err = |detail: String| ClientError::CapabilityFile {
            path: path.display().to_string(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let f: CapabilityFile = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        Capability::from_file(&f).map_err(err)
    }

    /// The JSON text of the capability file.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(&self.to_file()).expect("plain struct");
        s.push('\n');
        s
    }

    /// Writes the capability file with mode 0600 (it holds a secret key).
    pub fn save(&self, path: &Path) -> Result<(), ClientError> {
        write_secret_file(path, self.to_json().as_bytes())
    }
}

/// The serialized form of a [`Capability`] (see the module doc).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CapabilityFile {
    pub version: u32,
    pub suite: String,
    pub drive: String,
    pub partition: u16,
    pub object: u64,
    pub offset: u64,
    pub len: u64,
    pub rights: String,
    pub expiry_ms: u64,
    pub audit_id: u64,
    pub min_protection: String,
    pub key: String,
    #[serde(default)]
    pub sealed: Option<String>,
    /// Hex Ed25519 public key of the object's writer; absent or null: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_key: Option<String>,
}

/// What authorizes a request.
#[derive(Clone, Debug)]
pub enum Auth {
    /// A key of the hierarchy (master, drive, partition or working), as read from a key file.
    Key {
        kind: KeyType,
        key: Key,
        suite: Suite,
        drive: DriveId,
    },
    Capability(Capability),
}

impl Auth {
    pub fn from_key_file(k: &KeyFile) -> Auth {
        Auth::Key {
            kind: k.kind,
            key: k.key.clone(),
            suite: k.suite,
            drive: k.drive,
        }
    }

    /// Reads a key file and makes it the request key.
    pub fn load_key_file(path: &Path) -> Result<Auth, ClientError> {
        Ok(Auth::from_key_file(&load_key_file(path)?))
    }

    pub fn key_type(&self) -> KeyType {
        match self {
            Auth::Key { kind, .. } => *kind,
            Auth::Capability(_) => KeyType::Capability,
        }
    }

    /// The key that MACs the request and the reply.
    pub fn key(&self) -> &Key {
        match self {
            Auth::Key { key, .. } => key,
            Auth::Capability(c) => &c.key,
        }
    }

    pub fn suite(&self) -> Suite {
        match self {
            Auth::Key { suite, .. } => *suite,
            Auth::Capability(c) => c.suite,
        }
    }

    pub fn drive(&self) -> DriveId {
        match self {
            Auth::Key { drive, .. } => *drive,
            Auth::Capability(c) => c.args.drive,
        }
    }

    /// The capability's minimum protection (NONE for keys).
    pub fn min_protection(&self) -> Protection {
        match self {
            Auth::Key { .. } => Protection::NONE,
            Auth::Capability(c) => c.args.min_protection,
        }
    }
}

/// Reads and parses a key file.
pub fn load_key_file(path: &Path) -> Result<KeyFile, ClientError> {
    let err = |detail: String| ClientError::KeyFile {
        path: path.display().to_string(),
        detail,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    KeyFile::decode(&text).map_err(|e| err(e.to_string()))
}

/// Creates (or replaces) a file readable only by its owner and writes `bytes` to it.
pub fn write_secret_file(path: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    nasd_private::write_file(path, bytes).map_err(|e| ClientError::Io {
        what: format!("writing {}", path.display()),
        source: match e {
            nasd_private::PrivacyError::Io { source, .. } => source,
            loose => std::io::Error::other(loose),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> CapabilityArgs {
        CapabilityArgs {
            drive: DriveId(0xabcdef),
            partition: PartitionId(3),
            object: ObjectId(42),
            region: Region::new(5, 1000),
            rights: Rights::READ.union(Rights::GETATTR),
            expiry_ms: 1_900_000_000_000,
            audit_id: 77,
            min_protection: Protection::PRIVACY_ARGS.union(Protection::PRIVACY_CAPABILITY),
            writer_key: None,
        }
    }

    #[test]
    fn capability_file_round_trip() {
        let wk = Key::from_bytes([9; 32]);
        for sealed in [false, true] {
            let c = Capability::mint(Suite::Sha256, &wk, args(), 4, sealed);
            let back = Capability::from_file(
                &serde_json::from_str::<CapabilityFile>(&c.to_json()).unwrap(),
            )
            .unwrap();
            assert_eq!(back.args, c.args);
            assert_eq!(back.key, c.key);
            assert_eq!(back.sealed, c.sealed);
            assert_eq!(back.suite, Suite::Sha256);
            if sealed {
                let opened = nasd_crypto::capability::unseal(
                    Suite::Sha256,
                    &wk,
                    back.sealed.as_ref().unwrap(),
                );
                assert_eq!(opened, Some(c.args));
            }
        }
    }

    #[test]
    fn a_writer_key_round_trips_through_the_file_and_is_bound_by_the_key() {
        let wk = Key::from_bytes([9; 32]);
        let signer = Arc::new(WriterSigner::from_seed(&Key::from_bytes([4; 32])));
        let keyed = CapabilityArgs {
            writer_key: Some(signer.public()),
            ..args()
        };
        for sealed in [false, true] {
            let c =
                Capability::mint(Suite::Blake3, &wk, keyed, 0, sealed).with_signer(signer.clone());
            let json = c.to_json();
            assert!(json.contains(&signer.public().to_string()));
            // the signer is the caller's: it never goes into the file, nor into `Debug`
            assert!(!json.contains(&hex::encode([4u8; 32])));
            assert!(!format!("{c:?}").contains(&hex::encode([4u8; 32])));
            let back = Capability::from_file(&serde_json::from_str(&json).unwrap()).unwrap();
            assert_eq!(back.args, keyed);
            assert!(back.signer.is_none());
            if sealed {
                let opened = nasd_crypto::capability::unseal(
                    Suite::Blake3,
                    &wk,
                    back.sealed.as_ref().unwrap(),
                );
                assert_eq!(opened, Some(keyed));
            }
        }
        // the same args without the key make another capability key
        let plain = Capability::mint(Suite::Blake3, &wk, args(), 0, false);
        let with = Capability::mint(Suite::Blake3, &wk, keyed, 0, false);
        assert_ne!(plain.key, with.key);
        // a file without the field names no writer key; a bad one is refused
        let json = plain.to_json();
        assert!(!json.contains("writer_key"));
        assert_eq!(
            Capability::from_file(&serde_json::from_str(&json).unwrap())
                .unwrap()
                .args
                .writer_key,
            None
        );
        let mut f = with.to_file();
        f.writer_key = Some("abcd".into());
        assert!(Capability::from_file(&f).is_err());
    }

    #[test]
    fn capability_key_depends_on_access_control_version() {
        let wk = Key::from_bytes([1; 32]);
        let a = Capability::mint(Suite::Blake3, &wk, args(), 0, false);
        let b = Capability::mint(Suite::Blake3, &wk, args(), 1, false);
        assert_ne!(a.key, b.key);
    }

    #[test]
    fn secret_files_are_owner_only() {
        let dir = std::env::temp_dir().join(format!("nasd-client-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("cap.json");
        let c = Capability::mint(Suite::Blake3, &Key::generate(), args(), 0, false);
        c.save(&p).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        assert_eq!(Capability::load(&p).unwrap().args, c.args);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
