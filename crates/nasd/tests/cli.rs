//! Black-box tests of the operator CLI: they run the built `nasd` binary against a drive it
//! started (`nasd drive run` on a free loopback port), as an operator's script would.

mod common;
use common::drive::*;
use std::path::Path;

#[test]
fn create_mint_write_read_round_trip() {
    let d = TestDrive::start();
    let id = d.create();
    assert!(id.parse::<u64>().is_ok(), "create printed {id:?}");
    let cap = d.mint("cap.json", &id, &[]);
    let bytes = data(100_000);
    let input = write_input(&d, &bytes);
    let out = ok(&[
        "obj", "write", "--drive", &d.addr, "--cap", &cap, "--offset", "0", "--in", &input,
    ]);
    assert!(out.contains("wrote 100000 bytes"), "{out}");
    let o = nasd(&[
        "obj", "read", "--drive", &d.addr, "--cap", &cap, "--offset", "0", "--len", "100000",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, bytes);
    // An odd offset, and a read past the end clamps at the object's size.
    let o = nasd(&[
        "obj", "read", "--drive", &d.addr, "--cap", &cap, "--offset", "99001", "--len", "5000",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, &bytes[99_001..]);
    let attrs = ok(&[
        "obj", "getattr", "--drive", &d.addr, "--cap", &cap, "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&attrs).unwrap();
    assert_eq!(v["logical_size"], 100_000);
    assert_eq!(v["scheme"], "tree");
}

#[test]
fn every_scheme_and_protection_round_trips() {
    let d = TestDrive::start();
    let creator = d.mint("create.json", "0", &["--rights", "create", "--sealed"]);
    let bytes = data(20_000);
    let input = write_input(&d, &bytes);
    for scheme in ["mac", "digest", "incremental", "tree"] {
        let id = ok(&[
            "obj", "create", "--drive", &d.addr, "--cap", &creator, "--scheme", scheme,
        ])
        .trim()
        .to_string();
        let cap = d.mint(
            "c.json",
            &id,
            &[
                "--rights",
                "all",
                "--sealed",
                "--min-protection",
                "integrity-args",
            ],
        );
        for p in [
            "integrity-args",
            "integrity-data",
            "privacy-args",
            "privacy-data",
            "privacy-data,privacy-capability",
        ] {
            ok(&[
                "obj",
                "write",
                "--drive",
                &d.addr,
                "--cap",
                &cap,
                "--offset",
                "7",
                "--in",
                &input,
                "--protection",
                p,
            ]);
            let o = nasd(&[
                "obj",
                "read",
                "--drive",
                &d.addr,
                "--cap",
                &cap,
                "--offset",
                "1000",
                "--len",
                "9000",
                "--protection",
                p,
            ]);
            assert!(
                o.status.success(),
                "{scheme} {p}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(o.stdout, &bytes[993..9993], "{scheme} {p}");
        }
    }
}

#[test]
fn replayed_request_is_refused() {
    let d = TestDrive::start();
    let id = d.create();
    let cap = d.mint("cap.json", &id, &[]);
    let input = write_input(&d, &data(5000));
    let saved = d.path("write.req");
    ok(&[
        "obj",
        "write",
        "--drive",
        &d.addr,
        "--cap",
        &cap,
        "--offset",
        "0",
        "--in",
        &input,
        "--save-request",
        saved.to_str().unwrap(),
    ]);
    let (_, err) = fails(&["obj", "replay", saved.to_str().unwrap(), "--drive", &d.addr]);
    assert!(err.contains("replay"), "{err}");
}

#[test]
fn wrong_rights_region_and_expiry_are_refused_without_data() {
    let d = TestDrive::start();
    let id = d.create();
    let full = d.mint("full.json", &id, &[]);
    let input = write_input(&d, &data(4000));
    ok(&[
        "obj", "write", "--drive", &d.addr, "--cap", &full, "--in", &input,
    ]);

    let read_only = d.mint("ro.json", &id, &["--rights", "read"]);
    let (_, err) = fails(&[
        "obj", "write", "--drive", &d.addr, "--cap", &read_only, "--in", &input,
    ]);
    assert!(err.contains("rights"), "{err}");

    let small = d.mint("small.json", &id, &["--offset", "0", "--len", "1000"]);
    let (out, err) = fails(&[
        "obj", "read", "--drive", &d.addr, "--cap", &small, "--offset", "500", "--len", "1000",
    ]);
    assert!(err.contains("region outside capability"), "{err}");
    assert!(out.is_empty());

    let short = d.mint("short.json", &id, &["--expires-in", "1s"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (out, err) = fails(&[
        "obj", "read", "--drive", &d.addr, "--cap", &short, "--len", "10",
    ]);
    assert!(err.contains("capability expired at"), "{err}");
    assert!(out.is_empty());

    // Under-protected request.
    let (_, err) = fails(&[
        "obj",
        "read",
        "--drive",
        &d.addr,
        "--cap",
        &full,
        "--len",
        "10",
        "--protection",
        "none",
    ]);
    assert!(err.contains("protection"), "{err}");

    // A capability for another object (the request names a different one).
    let other = d.create();
    let (_, err) = fails(&[
        "obj", "read", "--drive", &d.addr, "--cap", &full, "--object", &other, "--len", "10",
    ]);
    assert!(err.contains("refused"), "{err}");
}

/// Seed 001 §3.3.1 scheme 1 from the command line: a capability minted `--writer-key` makes
/// the drive store only what that key signed (`--sign-key`); an operator sees the drive refuse
/// an unsigned write (`--unsigned`) and the client refuse to send one, and nothing is stored.
#[test]
fn a_writer_key_capability_stores_only_signed_writes() {
    let d = TestDrive::start();
    let id = d.create();
    let alice = d.path("alice.key");
    let mallory = d.path("mallory.key");
    for k in [&alice, &mallory] {
        ok(&["user", "keygen", "--out", k.to_str().unwrap()]);
    }
    let alice_pub = format!("{}.pub", alice.display());
    let mallory_pub = format!("{}.pub", mallory.display());
    let cap = d.mint("signed.json", &id, &["--writer-key", &alice_pub]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cap).unwrap()).unwrap();
    let alice_hex = std::fs::read_to_string(&alice_pub).unwrap();
    assert_eq!(
        json["writer_key"].as_str(),
        alice_hex.lines().nth(1),
        "the capability file names alice's public key"
    );
    let first = data(6000);
    let input = write_input(&d, &first);
    let write = |extra: &[&str]| {
        let mut args = vec![
            "obj", "write", "--drive", &d.addr, "--cap", &cap, "--in", &input,
        ];
        args.extend(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| fails(&a.iter().map(String::as_str).collect::<Vec<_>>()).1;
    let out = ok(&write(&["--sign-key", alice.to_str().unwrap()])
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    assert!(out.contains("wrote 6000 bytes"), "{out}");

    // Unsigned: the client sends nothing; with --unsigned the drive refuses it.
    let other = write_input(&d, &vec![0x55; 6000]);
    let mut unsigned = write(&[]);
    unsigned[7] = other.clone();
    let err = run(unsigned.clone());
    assert!(
        err.contains("not sent") && err.contains("writer key"),
        "{err}"
    );
    unsigned.push("--unsigned".into());
    let err = run(unsigned);
    assert!(
        err.contains("refused by the drive")
            && err.contains("not signed by the capability's writer key"),
        "{err}"
    );
    // Another user's key is not the writer's: refused before anything is sent.
    let mut wrong = write(&["--sign-key", mallory.to_str().unwrap()]);
    wrong[7] = other.clone();
    let err = run(wrong);
    assert!(
        err.contains("not the key of the capability's writer"),
        "{err}"
    );
    // A capability file edited to name mallory instead: the drive's MAC check refuses it.
    let forged = d.path("forged.json");
    let mut j = json.clone();
    j["writer_key"] = std::fs::read_to_string(&mallory_pub)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .into();
    std::fs::write(&forged, j.to_string()).unwrap();
    let err = run(vec![
        "obj".into(),
        "write".into(),
        "--drive".into(),
        d.addr.clone(),
        "--cap".into(),
        forged.to_str().unwrap().into(),
        "--in".into(),
        other.clone(),
        "--sign-key".into(),
        mallory.to_str().unwrap().into(),
    ]);
    assert!(err.contains("digest does not verify"), "{err}");
    // A size change is signed too.
    let err = run(vec![
        "obj".into(),
        "setattr".into(),
        "--drive".into(),
        d.addr.clone(),
        "--cap".into(),
        cap.clone(),
        "--size".into(),
        "10".into(),
        "--unsigned".into(),
    ]);
    assert!(
        err.contains("not signed by the capability's writer key"),
        "{err}"
    );

    // None of the refused requests stored a byte.
    let o = nasd(&[
        "obj", "read", "--drive", &d.addr, "--cap", &cap, "--len", "100000",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stdout == first,
        "the object holds what alice signed, only"
    );

    // A writer key binds only under a digest: minting one for protection none is refused.
    let (_, err) = fails(&[
        "cap",
        "mint",
        "--key",
        &d.working_key(),
        "--partition",
        "1",
        "--object",
        &id,
        "--rights",
        "write",
        "--writer-key",
        &alice_pub,
        "--min-protection",
        "none",
    ]);
    assert!(err.contains("--writer-key needs"), "{err}");
}

#[test]
fn access_control_version_revokes_capabilities() {
    let d = TestDrive::start();
    let id = d.create();
    let cap = d.mint("cap.json", &id, &[]);
    let out = ok(&[
        "obj",
        "setattr",
        "--drive",
        &d.addr,
        "--cap",
        &cap,
        "--access-control-version",
        "1",
    ]);
    assert!(out.contains("access_control_version      1"), "{out}");
    let (_, err) = fails(&["obj", "getattr", "--drive", &d.addr, "--cap", &cap]);
    assert!(err.contains("refused"), "{err}");
    let fresh = d.mint("fresh.json", &id, &["--access-control-version", "1"]);
    ok(&["obj", "getattr", "--drive", &d.addr, "--cap", &fresh]);
}

#[test]
fn key_rotation_and_partition_commands() {
    let d = TestDrive::start();
    let drive_key = d.key(&["drive"], &[]);
    let pk2 = d.path("p2.key");
    let wk2 = d.path("p2-working.key");
    let out = ok(&[
        "partition",
        "create",
        "--drive",
        &d.addr,
        "--key",
        &drive_key,
        "--partition",
        "2",
        "--quota",
        "64M",
        "--out",
        pk2.to_str().unwrap(),
        "--working-out",
        wk2.to_str().unwrap(),
    ]);
    assert!(out.contains("created partition 2"), "{out}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&wk2).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let id = ok(&[
        "obj",
        "create",
        "--drive",
        &d.addr,
        "--key",
        pk2.to_str().unwrap(),
        "--partition",
        "2",
    ])
    .trim()
    .to_string();
    // Rotate: capabilities from the old working key keep working (previous key), and the new
    // key mints valid ones.
    let old_cap = ok(&[
        "cap",
        "mint",
        "--key",
        wk2.to_str().unwrap(),
        "--object",
        &id,
        "--rights",
        "getattr",
    ]);
    let old_cap_path = d.path("old.json");
    std::fs::write(&old_cap_path, old_cap).unwrap();
    let wk3 = d.path("p2-working-new.key");
    ok(&[
        "key",
        "rotate",
        "--drive",
        &d.addr,
        "--key",
        pk2.to_str().unwrap(),
        "--partition",
        "2",
        "--out",
        wk3.to_str().unwrap(),
    ]);
    ok(&[
        "obj",
        "getattr",
        "--drive",
        &d.addr,
        "--cap",
        old_cap_path.to_str().unwrap(),
    ]);
    let new_cap = d.path("new.json");
    ok(&[
        "cap",
        "mint",
        "--key",
        wk3.to_str().unwrap(),
        "--object",
        &id,
        "--rights",
        "getattr",
        "--out",
        new_cap.to_str().unwrap(),
    ]);
    ok(&[
        "obj",
        "getattr",
        "--drive",
        &d.addr,
        "--cap",
        new_cap.to_str().unwrap(),
    ]);
    let info = ok(&["drive", "info", "--drive", &d.addr, "--key", &drive_key]);
    assert!(info.contains("partition 2"), "{info}");
    let _ = Path::new(&drive_key);
}

/// The JSON objects of `--json` output, one per line.
fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// `nasd bench drive --json` prints one object per cell with the fields issue 2 names, in both
/// layouts; `tree` reads hash nothing on the drive, `mac` reads hash every byte, and the drive's
/// own CPU per request is measured (non-zero) so the drive-bound ratio means something.
#[test]
fn bench_drive_json_has_the_named_fields_in_both_layouts() {
    for layout in [&[][..], &["--shared-cores", "--depth", "1"][..]] {
        let mut args = vec![
            "bench",
            "drive",
            "--quick",
            "--json",
            "--schemes",
            "tree,mac",
            "--sizes",
            "4K",
        ];
        args.extend_from_slice(layout);
        let out = ok(&args);
        let cells = json_lines(&out);
        // 2 schemes x 2 offsets x 2 ops x 5 protection levels
        assert_eq!(cells.len(), 40, "{layout:?}");
        for c in &cells {
            for f in [
                "op",
                "scheme",
                "protection",
                "size_bytes",
                "offset_bytes",
                "mib_per_s",
                "ops_per_s",
                "drive_hashed_bytes_per_op",
                "drive_cpu_us_per_op",
                "drive_bound_ratio_vs_none",
            ] {
                assert!(c.get(f).is_some(), "{f} missing in {c}");
            }
            assert!(c["mib_per_s"].as_f64().unwrap() > 0.0, "{c}");
            assert!(c["drive_cpu_us_per_op"].as_f64().unwrap() > 0.0, "{c}");
            let read = c["op"] == "read";
            let hashed = c["drive_hashed_bytes_per_op"].as_f64().unwrap();
            if read && c["scheme"] == "tree" {
                assert_eq!(hashed, 0.0, "{c}");
            }
            if read && c["scheme"] == "mac" && c["protection"] == "integrity-data" {
                assert_eq!(hashed, 4096.0, "{c}");
            }
        }
    }
    // Filters keep `none`, which every ratio is taken against.
    let out = ok(&[
        "bench",
        "drive",
        "--quick",
        "--json",
        "--schemes",
        "tree",
        "--sizes",
        "4K",
        "--ops",
        "read",
        "--protections",
        "integrity-data",
    ]);
    let cells = json_lines(&out);
    assert_eq!(cells.len(), 4, "{out}");
    for c in &cells {
        assert_eq!(c["op"], "read", "{c}");
        assert!(["none", "integrity-data"].contains(&c["protection"].as_str().unwrap()));
        if c["protection"] == "none" {
            assert_eq!(c["ratio_vs_none"], 1.0, "{c}");
        }
    }
}
