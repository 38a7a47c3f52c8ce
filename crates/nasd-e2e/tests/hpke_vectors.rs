//! The HPKE suite of key wrapping against RFC 9180 Appendix A.2.1: DHKEM(X25519, HKDF-SHA256),
//! HKDF-SHA256, ChaCha20Poly1305, base mode, encryption sequence number 0. The values are the
//! RFC's (also in `tests/vectors/rfc9180_a2_1.txt`); a fixed generator replays `ikmE` so the
//! library's `GenerateKeyPair = DeriveKeyPair(random(32))` reproduces the vector's ephemeral key.

use nasd_e2e::keys::{hpke_open_base, hpke_seal_base, SecretKey};
use nasd_e2e::rand_core::{Infallible, TryCryptoRng, TryRng};

fn vector() -> std::collections::HashMap<String, Vec<u8>> {
    let path = format!(
        "{}/tests/vectors/rfc9180_a2_1.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path)
        .expect("vector file present")
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.trim().to_string(), hex::decode(v.trim()).expect("hex"))
        })
        .collect()
}

fn clamp(sk: &[u8]) -> Vec<u8> {
    let mut s = sk.to_vec();
    s[0] &= 248;
    s[31] &= 127;
    s[31] |= 64;
    s
}

/// Yields the bytes it was given, then panics: the test must consume exactly `ikmE`.
struct Replay(Vec<u8>);

impl TryRng for Replay {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0u8; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0u8; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        assert!(
            dst.len() <= self.0.len(),
            "asked for more randomness than the vector has"
        );
        let rest = self.0.split_off(dst.len());
        dst.copy_from_slice(&self.0);
        self.0 = rest;
        Ok(())
    }
}
impl TryCryptoRng for Replay {}

#[test]
fn rfc9180_a2_1_base_x25519_chacha20poly1305() {
    let v = vector();
    let recipient = SecretKey::derive(&v["ikmR"]);
    assert_eq!(recipient.public().0.as_slice(), v["pkRm"].as_slice());
    // The library stores X25519 secrets clamped (RFC 7748 §5), which X25519 applies anyway.
    assert_eq!(
        recipient.to_bytes().as_slice(),
        clamp(&v["skRm"]).as_slice()
    );
    let from_rfc = SecretKey::from_bytes(&v["skRm"].clone().try_into().unwrap()).unwrap();
    assert_eq!(from_rfc.public().0.as_slice(), v["pkRm"].as_slice());
    let ephemeral = SecretKey::derive(&v["ikmE"]);
    assert_eq!(
        ephemeral.to_bytes().as_slice(),
        clamp(&v["skEm"]).as_slice()
    );
    assert_eq!(ephemeral.public().0.as_slice(), v["pkEm"].as_slice());

    let mut rng = Replay(v["ikmE"].clone());
    let (enc, ct) = hpke_seal_base(
        recipient.public(),
        &v["info"],
        &v["aad0"],
        &v["pt"],
        &mut rng,
    )
    .unwrap();
    assert!(rng.0.is_empty(), "exactly ikmE was consumed");
    assert_eq!(enc.as_slice(), v["enc"].as_slice());
    assert_eq!(ct, v["ct0"]);

    let enc: [u8; 32] = v["enc"].clone().try_into().unwrap();
    let pt = hpke_open_base(&recipient, &enc, &v["info"], &v["aad0"], &v["ct0"]).unwrap();
    assert_eq!(pt.as_slice(), v["pt"].as_slice());
    let mut bad = v["ct0"].clone();
    bad[0] ^= 1;
    assert!(hpke_open_base(&recipient, &enc, &v["info"], &v["aad0"], &bad).is_err());
    assert!(hpke_open_base(&recipient, &enc, &v["info"], b"Count-1", &v["ct0"]).is_err());
}
