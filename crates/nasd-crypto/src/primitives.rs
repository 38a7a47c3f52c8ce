//! The two digest suites: BLAKE3 with keyed BLAKE3 as the MAC (default), and SHA-256 with
//! HMAC-SHA-256, the seeds' SHA-based construction. Everything above calls these; nothing
//! above touches a hash crate directly. Every call is metered by [`Cost`].

use crate::key::Key;
use crate::Cost;
use hmac::{KeyInit, Mac as _};
use nasd_proto::Suite;
use sha2::Digest as _;
use zeroize::Zeroize;

/// A digest or MAC value; 32 bytes in both suites.
pub type Digest = [u8; 32];

/// Constant-time equality of two MACs or digests.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// An unkeyed hash being computed.
#[derive(Clone)]
pub enum Hasher {
    Blake3(Box<blake3::Hasher>),
    Sha256(sha2::Sha256),
}

impl Hasher {
    pub fn new(suite: Suite) -> Self {
        match suite {
            Suite::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
            Suite::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
        }
    }
    pub fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Blake3(h) => {
                h.update(b);
            }
            Hasher::Sha256(h) => h.update(b),
        }
    }
    pub fn finalize(self) -> Digest {
        match self {
            Hasher::Blake3(h) => *h.finalize().as_bytes(),
            Hasher::Sha256(h) => h.finalize().into(),
        }
    }
}

/// `H(domain || data)`, counting `data` as object data hashed.
pub fn hash_data(suite: Suite, domain: &[u8], data: &[u8], cost: &mut Cost) -> Digest {
    cost.data(domain.len() + data.len(), data.len());
    let mut h = Hasher::new(suite);
    h.update(domain);
    h.update(data);
    h.finalize()
}

/// A MAC being computed: keyed BLAKE3 or HMAC-SHA-256. The BLAKE3 state lives inline: a drive
/// computes three MACs per request, and a 2 KiB heap block each cost more than the hashing of a
/// header. The state holds the key (BLAKE3's key words, HMAC's padded key blocks), so it is
/// zeroized when dropped, finalized or not (HMAC-SHA-256 by its crates' `zeroize` features).
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Mac {
    Blake3(blake3::Hasher, u64),
    Sha256(Box<hmac::Hmac<sha2::Sha256>>, u64),
}

impl Mac {
    pub fn new(suite: Suite, key: &Key) -> Self {
        match suite {
            Suite::Blake3 => Mac::Blake3(blake3::Hasher::new_keyed(key.expose()), 0),
            Suite::Sha256 => Mac::Sha256(
                Box::new(
                    <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key.expose())
                        .expect("HMAC takes any key length"),
                ),
                0,
            ),
        }
    }
    /// Feeds fixed-size metadata (headers, digests, roots): not counted as data hashed.
    pub fn update(&mut self, b: &[u8]) {
        match self {
            Mac::Blake3(h, n) => {
                h.update(b);
                *n += b.len() as u64;
            }
            Mac::Sha256(h, n) => {
                h.update(b);
                *n += b.len() as u64;
            }
        }
    }
    /// Feeds object data: counted as data hashed.
    pub fn update_data(&mut self, b: &[u8], cost: &mut Cost) {
        cost.data_bytes += b.len() as u64;
        self.update(b);
    }
    pub fn finalize(mut self, cost: &mut Cost) -> Digest {
        match &mut self {
            Mac::Blake3(h, n) => {
                cost.finish_call(*n);
                *h.finalize().as_bytes()
            }
            Mac::Sha256(h, n) => {
                // HMAC adds the inner key block and the two outer blocks (seed 000 §3.4).
                cost.finish_call(*n + 64);
                cost.blocks64 += 2;
                // `finalize` consumes: a copy goes, and both copies zeroize as they drop.
                (**h).clone().finalize().into_bytes().into()
            }
        }
    }
}

impl Drop for Mac {
    fn drop(&mut self) {
        if let Mac::Blake3(h, _) = self {
            h.zeroize();
        }
    }
}

/// Derives a subkey: `MAC(key, "nasd-kdf-v1" || context || input)`.
pub fn derive(suite: Suite, key: &Key, context: &str, input: &[u8]) -> Key {
    let mut m = Mac::new(suite, key);
    m.update(b"nasd-kdf-v1");
    m.update(&(context.len() as u32).to_le_bytes());
    m.update(context.as_bytes());
    m.update(input);
    Key::from_bytes(m.finalize(&mut Cost::default()))
}

/// The digest a drive stores with an object's attributes (seed 000 §3.2.2, "P2") and MACs on
/// every reply that returns them: `H("nasd-attr-v1" || encoded attributes)`.
pub fn attr_digest(suite: Suite, encoded: &[u8], cost: &mut Cost) -> Digest {
    hash_data(suite, b"nasd-attr-v1", encoded, cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The input of RFC 4231 test case 1 ("Hi There", key bytes 0x0b) with a 32-byte key, as
    /// our keys are; the expected value was computed independently with Python's `hmac`.
    #[test]
    fn hmac_sha256_known_answer() {
        let key = Key::from_bytes([0x0b; 32]);
        let mut m = Mac::new(Suite::Sha256, &key);
        m.update(b"Hi There");
        assert_eq!(
            hex::encode(m.finalize(&mut Cost::default())),
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7"
        );
    }

    /// BLAKE3 keyed hash of the empty input under key "whats the Elvish word for friend",
    /// from the official BLAKE3 test vectors (`test_vectors.json`, input_len 0).
    #[test]
    fn keyed_blake3_known_answer() {
        let key = Key::from_slice(b"whats the Elvish word for friend").unwrap();
        let m = Mac::new(Suite::Blake3, &key);
        assert_eq!(
            hex::encode(m.finalize(&mut Cost::default())),
            "92b2b75604ed3c761f9d6f62392c8a9227ad0ea3f09573e783f1498a4ed60d26"
        );
    }
}
