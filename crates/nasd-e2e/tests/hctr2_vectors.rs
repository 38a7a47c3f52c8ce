//! HCTR2-AES-256 and its XCTR keystream against the official vectors of the HCTR2 authors
//! (`github.com/google/hctr2`, `test_vectors/ours/`), kept in `tests/vectors/`.

use nasd_e2e::hctr2::Hctr2;
use serde_json::Value;

fn vectors(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("vector file present");
    serde_json::from_str::<Vec<Value>>(&text).expect("vector file is JSON")
}

fn hex_field(v: &Value, path: &[&str]) -> Vec<u8> {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    hex::decode(cur.as_str().expect("hex string")).expect("valid hex")
}

#[test]
fn hctr2_aes256_official_vectors() {
    let vs = vectors("HCTR2_AES256.json");
    assert_eq!(vs.len(), 350, "the full AES-256 set");
    for (n, v) in vs.iter().enumerate() {
        let key: [u8; 32] = hex_field(v, &["input", "key_hex"]).try_into().unwrap();
        let tweak = hex_field(v, &["input", "tweak_hex"]);
        let pt = hex_field(v, &["plaintext_hex"]);
        let ct = hex_field(v, &["ciphertext_hex"]);
        let c = Hctr2::new(&key);
        let mut buf = pt.clone();
        c.encrypt(&tweak, &mut buf);
        assert_eq!(buf, ct, "vector {n} encrypt");
        c.decrypt(&tweak, &mut buf);
        assert_eq!(buf, pt, "vector {n} decrypt");
    }
}

#[test]
fn xctr_aes256_official_vectors() {
    let vs = vectors("XCTR_AES256.json");
    assert!(vs.len() >= 50);
    for (n, v) in vs.iter().enumerate() {
        let key: [u8; 32] = hex_field(v, &["input", "key_hex"]).try_into().unwrap();
        let nonce: [u8; 16] = hex_field(v, &["input", "nonce_hex"]).try_into().unwrap();
        let pt = hex_field(v, &["plaintext_hex"]);
        let ct = hex_field(v, &["ciphertext_hex"]);
        let mut buf = pt.clone();
        Hctr2::new(&key).xctr(&nonce, &mut buf);
        assert_eq!(buf, ct, "vector {n}");
    }
}
