//! Request and reply digests (seed 002 Fig 1), privacy keys and key wrapping.
//!
//! ```text
//! request digest = MAC(key, "nasd-req-v2" || drive_id || request_id || header-before-digest [|| D])
//! reply digest   = MAC(key, "nasd-rep-v1" || request nonce || request_id || header-before-digest [|| D])
//! ```
//! `key` is the capability key or the named key of the hierarchy; `D` is the data digest in the
//! object's integrity scheme (see [`crate::integrity`]), present only under INTEGRITY_DATA. The
//! reply is bound to the request's nonce, so a recorded reply cannot answer a later request;
//! the request is bound to the drive it is sent to, so it cannot be replayed onto another drive
//! that holds the same key (a master key shared by several drives, say).

use crate::aead;
use crate::key::Key;
use crate::primitives::{derive, Mac};
use nasd_proto::{DriveId, Nonce, OpCode, PartitionId, Suite};

/// Starts the MAC of a request to `drive` over its header bytes; the caller adds `D` and
/// finalizes.
pub fn request_mac(suite: Suite, key: &Key, drive: DriveId, mac_input: &[u8]) -> Mac {
    let mut m = Mac::new(suite, key);
    m.update(b"nasd-req-v2");
    m.update(&drive.0.to_le_bytes());
    m.update(mac_input);
    m
}

/// Starts the MAC of a reply, bound to the nonce of the request it answers.
pub fn reply_mac(suite: Suite, key: &Key, request_nonce: &Nonce, mac_input: &[u8]) -> Mac {
    let mut m = Mac::new(suite, key);
    m.update(b"nasd-rep-v1");
    m.update(&request_nonce.to_bytes());
    m.update(mac_input);
    m
}

/// Which field an AEAD nonce protects; each is used at most once per privacy key.
#[derive(Clone, Copy)]
#[repr(u8)]
pub enum Field {
    RequestArgs = 1,
    RequestData = 2,
    ReplyArgs = 3,
    ReplyData = 4,
}

impl Field {
    pub fn nonce(self) -> [u8; 12] {
        let mut n = [0u8; 12];
        n[11] = self as u8;
        n
    }
}

/// The privacy key of one request: derived from the request key and the request's nonce,
/// which the drive accepts only once, so AEAD nonces never repeat under a key.
pub fn privacy_key(suite: Suite, key: &Key, request_nonce: &Nonce) -> Key {
    derive(suite, key, "privacy", &request_nonce.to_bytes())
}

fn wrap_key_for(
    suite: Suite,
    authorizing: &Key,
    nonce: &Nonce,
    op: OpCode,
    partition: PartitionId,
) -> Key {
    let mut input = nonce.to_bytes().to_vec();
    input.push(op as u8);
    input.extend_from_slice(&partition.0.to_le_bytes());
    derive(suite, authorizing, "key-wrap", &input)
}

/// Encrypts a new key under the key that authorizes setting it, bound to the request's nonce,
/// operation and partition: keys never cross the network in clear, whatever the protection.
pub fn wrap_key(
    suite: Suite,
    authorizing: &Key,
    nonce: &Nonce,
    op: OpCode,
    partition: PartitionId,
    new_key: &Key,
) -> [u8; 48] {
    let k = wrap_key_for(suite, authorizing, nonce, op, partition);
    let v = aead::seal(&k, [0; 12], b"nasd-wrap-v1", new_key.expose());
    v.try_into().expect("32-byte key + 16-byte tag")
}

pub fn unwrap_key(
    suite: Suite,
    authorizing: &Key,
    nonce: &Nonce,
    op: OpCode,
    partition: PartitionId,
    wrapped: &[u8; 48],
) -> Option<Key> {
    let k = wrap_key_for(suite, authorizing, nonce, op, partition);
    let plain = aead::open(&k, [0; 12], b"nasd-wrap-v1", wrapped)?;
    Key::from_slice(&plain)
}
