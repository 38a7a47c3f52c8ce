//! The key log's checks: chains, resets, legacy keys, forks, heads, the kept copy.

use super::*;
use ed25519_dalek::{Signer, SigningKey};
use nasd_crypto::keylog::sign_head;

/// Version `version` of `uid`'s keys with sign key `new` (seed byte), signed by `by`.
fn keys(uid: u32, version: u32, new: u8, by: u8) -> KeyLogEntry {
    let sign = SigningKey::from_bytes(&[new; 32]);
    let mut k = UserKeys {
        enc_public: [new; 32],
        sign_public: sign.verifying_key().to_bytes(),
        version,
        signature: [0; 64],
        sealed: vec![],
    };
    k.signature = SigningKey::from_bytes(&[by; 32])
        .sign(&k.change_message(uid))
        .to_bytes();
    KeyLogEntry::Keys { uid, keys: k }
}

fn reset(uid: u32, version: u32) -> KeyLogEntry {
    KeyLogEntry::Reset {
        uid,
        version,
        by: 0,
        at_ms: 1,
    }
}

fn view(entries: &[KeyLogEntry]) -> KeyLogView {
    let mut v = KeyLogView::default();
    for e in entries {
        v.apply(e.clone()).unwrap();
    }
    v
}

fn head_of(v: &KeyLogView, log: u8) -> KeyLogHead {
    let key = SigningKey::from_bytes(&[log; 32]);
    let r = v.root();
    KeyLogHead {
        size: v.len(),
        root: r,
        signature: sign_head(&key, v.len(), &r),
        log_key: key.verifying_key().to_bytes(),
    }
}

fn refused(v: &mut KeyLogView, e: KeyLogEntry) -> &'static str {
    match v.apply(e) {
        Err(KeyLogError::BadEntry { why, .. }) => why,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_chain_follows_only_changes_its_previous_key_signed() {
    let mut v = view(&[keys(7, 1, 1, 1), keys(7, 2, 2, 1), keys(8, 1, 9, 9)]);
    let fp = v.fingerprint(7).unwrap();
    assert!(matches!(v.trust(7), Trust::Trusted(k) if k.version == 2));
    // The manager's own key for user 7, signed by itself or by anyone but version 2's key.
    assert_eq!(
        refused(&mut v, keys(7, 3, 66, 66)),
        "the change is not signed by the user's previous key"
    );
    assert_eq!(
        refused(&mut v, keys(7, 3, 66, 1)),
        "the change is not signed by the user's previous key"
    );
    assert_eq!(refused(&mut v, keys(7, 4, 3, 2)), "a version out of order");
    assert_eq!(refused(&mut v, keys(9, 2, 3, 3)), "a version out of order");
    v.apply(keys(7, 3, 3, 2)).unwrap();
    assert_eq!(v.fingerprint(7), Some(fp), "rotations keep the fingerprint");
    assert_eq!(v.len(), 4);
}

#[test]
fn after_a_reset_keys_are_used_for_wraps_only_once_verified_here() {
    let mut v = view(&[keys(7, 1, 1, 1)]);
    let old = v.fingerprint(7).unwrap();
    v.apply(reset(7, 2)).unwrap();
    assert_eq!(v.trust(7), Trust::None);
    assert_eq!(refused(&mut v, reset(7, 2)), "a reset out of order");
    assert_eq!(
        refused(&mut v, reset(8, 1)),
        "a reset of a user with no keys"
    );
    // The next keys sign themselves.
    assert_eq!(
        refused(&mut v, keys(7, 3, 5, 1)),
        "the change is not signed by the user's previous key"
    );
    v.apply(keys(7, 3, 5, 5)).unwrap();
    let new = v.fingerprint(7).unwrap();
    assert_ne!(new, old);
    assert_eq!(v.trust(7), Trust::Unverified(new));
    assert!(!v.verify(7, old), "the old fingerprint verifies nothing");
    assert!(v.verify(7, new));
    assert!(matches!(v.trust(7), Trust::Trusted(k) if k.version == 3));
    // A later rotation stays verified; a second reset needs verifying again.
    v.apply(keys(7, 4, 6, 5)).unwrap();
    assert!(v.verified(7));
    v.apply(reset(7, 5)).unwrap();
    v.apply(keys(7, 6, 8, 8)).unwrap();
    assert!(matches!(v.trust(7), Trust::Unverified(_)));
}

#[test]
fn unsigned_legacy_keys_begin_chains_only_before_the_first_signed_entry() {
    let legacy = |uid| {
        let KeyLogEntry::Keys { uid, mut keys } = keys(uid, 1, uid as u8, uid as u8) else {
            unreachable!()
        };
        keys.signature = [0; 64];
        KeyLogEntry::Keys { uid, keys }
    };
    let mut v = view(&[legacy(1), legacy(2), keys(1, 2, 3, 1)]);
    assert!(matches!(v.trust(1), Trust::Trusted(_)));
    assert_eq!(
        refused(&mut v, legacy(4)),
        "unsigned keys after signed ones"
    );
    let KeyLogEntry::Keys { mut keys, .. } = keys(2, 2, 9, 2) else {
        unreachable!()
    };
    keys.signature = [0; 64];
    assert_eq!(
        refused(&mut v, KeyLogEntry::Keys { uid: 2, keys }),
        "the change is not signed by the user's previous key"
    );
}

#[test]
fn heads_must_be_signed_by_the_same_key_never_shorter_and_rooted_in_what_is_held() {
    let entries = [keys(7, 1, 1, 1), keys(8, 1, 2, 2)];
    let mut v = view(&entries);
    let h = head_of(&v, 40);
    v.check_head(&h).unwrap();
    assert_eq!(v.matches(&h), Ok(true));
    // Another log key.
    assert!(matches!(
        v.check_head(&head_of(&v, 41)),
        Err(KeyLogError::LogKeyChanged { .. })
    ));
    // A changed signature.
    let mut bad = h;
    bad.signature[0] ^= 1;
    assert_eq!(
        v.check_head(&bad),
        Err(KeyLogError::BadSignature { size: 2 })
    );
    // A shorter log: rolled back.
    let short = head_of(&view(&entries[..1]), 40);
    assert_eq!(
        v.check_head(&short),
        Err(KeyLogError::Shrunk { had: 2, now: 1 })
    );
    // Another history of the same size: a fork.
    let other = head_of(&view(&[keys(7, 1, 1, 1), keys(8, 1, 3, 3)]), 40);
    v.check_head(&other).unwrap();
    assert_eq!(v.matches(&other), Err(KeyLogError::Fork { size: 2 }));
    // A longer log is not matched until its entries are held.
    let mut longer = view(&entries);
    longer.apply(keys(9, 1, 4, 4)).unwrap();
    assert_eq!(v.matches(&head_of(&longer, 40)), Ok(false));
}

#[test]
fn answered_keys_must_be_the_logged_ones() {
    let v = view(&[keys(7, 1, 1, 1)]);
    let KeyLogEntry::Keys { keys: k, .. } = keys(7, 1, 1, 1) else {
        unreachable!()
    };
    assert_eq!(v.check_answered(7, &k), Ok(()));
    let KeyLogEntry::Keys { keys: swapped, .. } = keys(7, 1, 66, 66) else {
        unreachable!()
    };
    assert_eq!(
        v.check_answered(7, &swapped),
        Err(KeyLogError::NotLogged { uid: 7, version: 1 })
    );
    assert!(
        v.check_answered(8, &k).is_err(),
        "a user the log has no keys of"
    );
}

#[test]
fn the_kept_copy_comes_back_whole_and_a_damaged_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e2e-ann.keylog");
    assert_eq!(KeyLogView::load(&p).unwrap().len(), 0);
    let mut v = view(&[keys(7, 1, 1, 1), reset(7, 2), keys(7, 3, 5, 5)]);
    v.check_head(&head_of(&v, 40)).unwrap();
    assert!(v.verify(7, v.fingerprint(7).unwrap()));
    v.save(&p).unwrap();
    let back = KeyLogView::load(&p).unwrap();
    assert_eq!(
        (back.len(), back.root(), back.log_key()),
        (v.len(), v.root(), v.log_key())
    );
    assert!(back.verified(7));
    assert_eq!(back.trust(7), v.trust(7));
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&p, &bytes).unwrap();
    assert!(matches!(
        KeyLogView::load(&p),
        Err(KeyLogError::File { .. })
    ));
}

#[test]
fn fingerprints_print_and_parse_in_groups() {
    let fp = Fingerprint([0xab; FINGERPRINT_BYTES]);
    let shown = fp.to_string();
    assert_eq!(shown, "abab-abab-abab-abab-abab-abab-abab-abab");
    assert_eq!(shown.parse::<Fingerprint>(), Ok(fp));
    assert_eq!(shown.replace('-', " ").to_uppercase().parse(), Ok(fp));
    assert!("abab".parse::<Fingerprint>().is_err());
    assert!("zz".repeat(16).parse::<Fingerprint>().is_err());
}

/// `by`'s statement that `dir`'s readers are `readers`, signed with sign key seed `key`.
fn readers(by: u32, key: u8, dir: &str, readers: &[nasd_proto::e2e::Principal]) -> KeyLogEntry {
    let mut p = PolicyReaders {
        by,
        at_ms: 5,
        dir: dir.into(),
        readers: readers.to_vec(),
        signature: [0; 64],
    };
    p.signature = SigningKey::from_bytes(&[key; 32])
        .sign(&p.message())
        .to_bytes();
    KeyLogEntry::Readers(p)
}

#[test]
fn policy_readers_count_only_signed_by_their_setters_current_key_nearest_directory_first() {
    use nasd_proto::e2e::Principal::{Group, User};
    let mut v = view(&[
        keys(7, 1, 1, 1),
        readers(7, 1, "/s3", &[User(9)]),
        readers(7, 1, "/s3/private", &[]),
    ]);
    let over = |v: &KeyLogView, d: &str| v.readers_over(d).map(|p| p.readers.clone());
    assert_eq!(over(&v, "/s3"), Some(vec![User(9)]));
    assert_eq!(over(&v, "/s3/b/c"), Some(vec![User(9)]));
    assert_eq!(over(&v, "/s3/private/x"), Some(vec![]));
    assert_eq!(over(&v, "/s3x"), None, "a sibling whose name begins alike");
    assert_eq!(over(&v, "/"), None);
    // The latest statement for a directory counts; the root's covers everything else.
    v.apply(readers(7, 1, "/s3", &[User(9), Group(3)])).unwrap();
    v.apply(readers(7, 1, "/", &[Group(4)])).unwrap();
    assert_eq!(over(&v, "/s3/b"), Some(vec![User(9), Group(3)]));
    assert_eq!(over(&v, "/home/x"), Some(vec![Group(4)]));
    // Signed by another key than the setter's current one, or by a user without keys: the
    // manager made it, and the log is refused.
    assert_eq!(
        refused(&mut v, readers(7, 2, "/home", &[User(1)])),
        "policy readers not signed by their setter's key"
    );
    assert_eq!(
        refused(&mut v, readers(8, 8, "/home", &[User(1)])),
        "policy readers set by a user with no keys"
    );
    // After a key change the new key signs.
    v.apply(keys(7, 2, 2, 1)).unwrap();
    refused(&mut v, readers(7, 1, "/home", &[User(1)]));
    v.apply(readers(7, 2, "/home", &[User(1)])).unwrap();
    // The kept copy keeps them.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("log");
    v.save(&p).unwrap();
    let back = KeyLogView::load(&p).unwrap();
    assert_eq!(over(&back, "/home/a"), Some(vec![User(1)]));
    assert_eq!(back.root(), v.root());
}
