//! `nasd lab andrew --quick --json` end to end: every phase of every target has a time, the
//! program compiled on each target printed the checksum the generator expects, the bytes read
//! back on each target are the bytes of the generated tree, the verdict row agrees with the
//! ratio, and no mount of the run is left behind; and a run whose compile fails unmounts and
//! stops everything it started. It needs /dev/fuse, root (to mount), gcc and make; without
//! them it says why and passes (skips).

use std::process::{Command, Stdio};
use std::time::Instant;

use nasd_lab::andrew::source::Tree;

const NASD: &str = env!("CARGO_BIN_EXE_nasd");

/// The tests compare the mounts and processes of every run before and after theirs: one run at
/// a time.
static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("skipped: nasd lab andrew mounts FUSE file systems (root and /dev/fuse)");
        return false;
    }
    true
}

/// Processes whose command line names a work directory of `nasd lab andrew`.
fn processes_of_andrew() -> Vec<u32> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains("nasd-lab-andrew-") {
            v.push(pid);
        }
    }
    v.sort_unstable();
    v
}

fn mounts_of_andrew() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("nasd-lab-andrew-"))
        .map(str::to_string)
        .collect()
}

/// What `now` holds that `before` did not: what a run left behind. (Not an equality: a lab
/// killed earlier, by another test binary or a stopped CI job, has its mounts and servers end
/// themselves on their own time, so some of `before` may be gone by now.)
fn left_behind<T: PartialEq>(now: Vec<T>, before: &[T]) -> Vec<T> {
    now.into_iter().filter(|x| !before.contains(x)).collect()
}

#[test]
fn every_phase_runs_on_every_target_and_builds_the_right_program() {
    if !can_mount() {
        return;
    }
    let _one = ONE_RUN.lock().unwrap_or_else(|e| e.into_inner());
    let before = mounts_of_andrew();
    let out = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let o = Command::new(NASD)
        .args(["lab", "andrew", "--quick", "--json", "--seed", "7", "--out"])
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() && stderr.contains("unavailable here") {
        eprintln!("skipped: {stderr}");
        return;
    }
    assert!(o.status.success(), "{stderr}");
    eprintln!("nasd lab andrew --quick took {:?}", t0.elapsed());
    let rows: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(rows.iter().all(|r| r["experiment"] == "andrew"), "{rows:?}");
    let of = |table: &str| -> Vec<&serde_json::Value> {
        rows.iter().filter(|r| r["table"] == table).collect()
    };

    // Every phase (and the total) of every target has a positive time from one run.
    let times = of("andrew");
    let phases = ["mkdir", "copy", "stat", "read", "compile", "total"];
    let targets = ["local", "nasd", "baseline", "baseline-async"];
    assert_eq!(times.len(), phases.len() * targets.len(), "{times:?}");
    for t in targets {
        for p in phases {
            let r = times
                .iter()
                .find(|r| r["target"] == t && r["phase"] == p)
                .unwrap_or_else(|| panic!("no time for {p} on {t}"));
            let s = r["seconds"].as_f64().unwrap();
            assert!(s > 0.0 && s < 600.0, "{r}");
            assert_eq!(r["runs"], 1, "{r}");
            assert!(r["seconds_min"].as_f64().unwrap() <= s, "{r}");
        }
        let sum: f64 = phases[..5]
            .iter()
            .map(|p| {
                times
                    .iter()
                    .find(|r| r["target"] == t && r["phase"] == *p)
                    .unwrap()["seconds"]
                    .as_f64()
                    .unwrap()
            })
            .sum();
        let total = times
            .iter()
            .find(|r| r["target"] == t && r["phase"] == "total")
            .unwrap()["seconds"]
            .as_f64()
            .unwrap();
        assert!(
            (sum - total).abs() < 1e-9,
            "{t}: phases sum {sum}, total {total}"
        );
    }

    // What each target saw, against the tree generated here independently.
    let tree = Tree::generate(7);
    let checks = of("check");
    assert_eq!(checks.len(), targets.len(), "{checks:?}");
    for t in targets {
        let c = checks.iter().find(|r| r["target"] == t).unwrap();
        assert_eq!(c["program_output"], tree.expected_output(), "{t}: {c}");
        assert_eq!(c["read_digest"], tree.digest(), "{t}: {c}");
        assert_eq!(c["bytes_read"], tree.bytes(), "{t}: {c}");
        assert_eq!(c["files_read"], tree.files.len(), "{t}: {c}");
        assert_eq!(
            c["entries_stat"],
            tree.files.len() + tree.dirs.len(),
            "{t}: {c}"
        );
    }

    // The ratio rows divide nasd by baseline; the verdict follows the total's ratio.
    for r in of("ratio") {
        let want = r["nasd_s"].as_f64().unwrap() / r["baseline_s"].as_f64().unwrap();
        assert!(
            (r["nasd_over_baseline"].as_f64().unwrap() - want).abs() < 1e-9,
            "{r}"
        );
    }
    let verdict = of("verdict");
    assert_eq!(verdict.len(), 1);
    let ratio = verdict[0]["nasd_over_baseline"].as_f64().unwrap();
    assert_eq!(
        verdict[0]["holds"].as_bool().unwrap(),
        (ratio - 1.0).abs() <= 0.10 + 1e-9,
        "{}",
        verdict[0]
    );

    assert!(out.path().join("andrew.csv").exists());
    assert!(out.path().join("andrew.svg").exists());
    assert_eq!(
        left_behind(mounts_of_andrew(), &before),
        Vec::<String>::new(),
        "a mount of the run was left behind"
    );
}

/// A `make` that answers `--version` (so the lab finds it) and fails every build: the first
/// pass fails after the cluster, both servers and all three mounts are up, and the run must
/// take them all down again.
#[test]
fn a_failed_run_unmounts_and_stops_everything_it_started() {
    if !can_mount() {
        return;
    }
    let _one = ONE_RUN.lock().unwrap_or_else(|e| e.into_inner());
    let (mounts, procs) = (mounts_of_andrew(), processes_of_andrew());
    let bin = tempfile::tempdir().unwrap();
    let make = bin.path().join("make");
    std::fs::write(
        &make,
        "#!/bin/sh\n[ \"$1\" = --version ] && exit 0\necho 'make: the build is broken on purpose' >&2\nexit 2\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &make,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new(NASD)
        .args(["lab", "andrew", "--quick"])
        .env("PATH", path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() && stderr.contains("unavailable here") {
        eprintln!("skipped: {stderr}");
        return;
    }
    assert!(!o.status.success(), "the run passed with a broken make");
    assert!(stderr.contains("broken on purpose"), "{stderr}");
    // The first build is the warm-up, which runs once every mount is up.
    assert!(stderr.contains("warm-up"), "{stderr}");
    assert_eq!(
        left_behind(mounts_of_andrew(), &mounts),
        Vec::<String>::new(),
        "a mount of the failed run was left behind"
    );
    assert_eq!(
        left_behind(processes_of_andrew(), &procs),
        Vec::<u32>::new(),
        "a process of the failed run was left running"
    );
}
