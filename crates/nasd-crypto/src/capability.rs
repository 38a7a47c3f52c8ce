//! Capability keys (seed 002 §2.4, Fig 1) and sealed capabilities (Table 7 PRIVACY_CAPABILITY).
//!
//! `capability_key = MAC(working_key, "nasd-capkey-v1" || capability_args || access_control_version)`,
//! `capability_args` in their canonical encoding: 55 bytes, or 88 when they name a writer key,
//! so the writer key is bound like every other argument and a client can neither add, drop nor
//! change it (protocol version 4).
//! The file manager computes it when it issues a capability; the drive recomputes it on every
//! request from its own working keys and the object's current `access_control_version`, so
//! bumping that version kills every outstanding capability for the object at once.

use crate::aead;
use crate::key::Key;
use crate::primitives::Mac;
use crate::Cost;
use nasd_proto::{CapabilityArgs, DecodeError, Suite};

/// Derives the secret half of a capability.
pub fn capability_key(
    suite: Suite,
    working_key: &Key,
    args: &CapabilityArgs,
    access_control_version: u64,
) -> Key {
    let mut m = Mac::new(suite, working_key);
    m.update(b"nasd-capkey-v1");
    m.update(&args.encode());
    m.update(&access_control_version.to_le_bytes());
    Key::from_bytes(m.finalize(&mut Cost::default()))
}

/// Bytes of a sealed capability: 12-byte AEAD nonce, 55-byte args, 16-byte tag.
pub const SEALED_BYTES: usize = 12 + CapabilityArgs::BYTES + 16;
/// Bytes of a sealed capability whose args name a writer key (88 bytes of args).
pub const SEALED_WITH_WRITER_KEY_BYTES: usize = 12 + CapabilityArgs::BYTES_WITH_WRITER_KEY + 16;
const _: () =
    assert!(SEALED_WITH_WRITER_KEY_BYTES <= nasd_proto::message::SEALED_CAPABILITY_BYTES_MAX);

/// Encrypts `args` under the working key so the network (and the client) sees only an opaque
/// string; the drive opens it with its current or previous working key.
pub fn seal(suite: Suite, working_key: &Key, args: &CapabilityArgs) -> Vec<u8> {
    let k = crate::primitives::derive(suite, working_key, "capability-seal", &[]);
    let mut nonce = [0u8; 12];
    crate::random_bytes(&mut nonce);
    let mut out = nonce.to_vec();
    out.extend_from_slice(&aead::seal(
        &k,
        nonce,
        b"nasd-sealed-cap-v1",
        &args.encode(),
    ));
    out
}

/// Opens a sealed capability; `None` if it was not sealed under `working_key` or was altered.
pub fn unseal(suite: Suite, working_key: &Key, sealed: &[u8]) -> Option<CapabilityArgs> {
    if sealed.len() != SEALED_BYTES && sealed.len() != SEALED_WITH_WRITER_KEY_BYTES {
        return None;
    }
    let k = crate::primitives::derive(suite, working_key, "capability-seal", &[]);
    let nonce: [u8; 12] = sealed[..12].try_into().ok()?;
    let plain = aead::open(&k, nonce, b"nasd-sealed-cap-v1", &sealed[12..])?;
    CapabilityArgs::decode(&plain)
        .map_err(|_: DecodeError| ())
        .ok()
}
