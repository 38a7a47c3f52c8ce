//! The text format of key files written by `nasd drive init` and `nasd key rotate` and read by
//! `nasd cap mint` and the operator commands. Parsing is pure; callers do the file I/O and must
//! create key files with mode 0600.
//!
//! ```text
//! # nasd key file v1: secret, keep mode 0600
//! kind = working            (master | drive | partition | working)
//! drive = 0123456789abcdef  (hex drive id)
//! suite = blake3            (blake3 | sha256)
//! partition = 1             (partition and working keys only)
//! key = <64 hex digits>
//! ```

use crate::key::Key;
use nasd_proto::{DriveId, KeyType, PartitionId, Suite};

pub struct KeyFile {
    pub kind: KeyType,
    pub drive: DriveId,
    pub suite: Suite,
    pub partition: Option<PartitionId>,
    pub key: Key,
}

impl std::fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyFile")
            .field("kind", &self.kind)
            .field("drive", &self.drive)
            .field("partition", &self.partition)
            .field("key", &self.key)
            .finish()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyFileError {
    #[error("line {0}: expected `name = value`")]
    Syntax(usize),
    #[error("missing field `{0}`")]
    Missing(&'static str),
    #[error("bad value for `{0}`")]
    Value(&'static str),
}

impl KeyFile {
    pub fn encode(&self) -> String {
        let mut s = format!(
            "# nasd key file v1: secret, keep mode 0600\nkind = {}\ndrive = {:016x}\nsuite = {}\n",
            self.kind.name(),
            self.drive.0,
            self.suite.name()
        );
        if let Some(p) = self.partition {
            s.push_str(&format!("partition = {}\n", p.0));
        }
        s.push_str(&format!("key = {}\n", self.key.to_hex()));
        s
    }

    pub fn decode(text: &str) -> Result<KeyFile, KeyFileError> {
        let (mut kind, mut drive, mut suite, mut partition, mut key) =
            (None, None, None, None, None);
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, value) = line.split_once('=').ok_or(KeyFileError::Syntax(i + 1))?;
            let value = value.trim();
            match name.trim() {
                "kind" => {
                    kind = Some(match value {
                        "master" => KeyType::Master,
                        "drive" => KeyType::Drive,
                        "partition" => KeyType::Partition,
                        "working" => KeyType::Working,
                        _ => return Err(KeyFileError::Value("kind")),
                    })
                }
                "drive" => {
                    drive = Some(DriveId(
                        u64::from_str_radix(value, 16).map_err(|_| KeyFileError::Value("drive"))?,
                    ))
                }
                "suite" => suite = Some(Suite::parse(value).ok_or(KeyFileError::Value("suite"))?),
                "partition" => {
                    partition = Some(PartitionId(
                        value
                            .parse()
                            .map_err(|_| KeyFileError::Value("partition"))?,
                    ))
                }
                "key" => key = Some(Key::from_hex(value).ok_or(KeyFileError::Value("key"))?),
                _ => {}
            }
        }
        let kind = kind.ok_or(KeyFileError::Missing("kind"))?;
        if matches!(kind, KeyType::Partition | KeyType::Working) && partition.is_none() {
            return Err(KeyFileError::Missing("partition"));
        }
        Ok(KeyFile {
            kind,
            drive: drive.ok_or(KeyFileError::Missing("drive"))?,
            suite: suite.ok_or(KeyFileError::Missing("suite"))?,
            partition,
            key: key.ok_or(KeyFileError::Missing("key"))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let k = KeyFile {
            kind: KeyType::Working,
            drive: DriveId(0xfeed),
            suite: Suite::Sha256,
            partition: Some(PartitionId(3)),
            key: Key::generate(),
        };
        let d = KeyFile::decode(&k.encode()).unwrap();
        assert_eq!(
            (d.kind, d.drive, d.suite, d.partition),
            (k.kind, k.drive, k.suite, k.partition)
        );
        assert_eq!(d.key, k.key);
        assert_eq!(
            KeyFile::decode(&format!(
                "kind = working\ndrive = 1\nkey = {}",
                "00".repeat(32)
            ))
            .unwrap_err(),
            KeyFileError::Missing("partition")
        );
        assert!(KeyFile::decode("garbage").is_err());
    }
}
