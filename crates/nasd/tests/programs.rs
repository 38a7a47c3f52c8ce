//! Programs nobody here wrote, run on `nasd mount` the way a user runs them, each beside the
//! same work on a local directory and compared with it exactly: git (init, add, commit,
//! fsck, gc), GNU tar, `cp -a`, `rsync -a` both ways, sqlite (rollback journal and WAL), an
//! incremental Rust build, and two mounts of one cluster editing one tree. Needs root and
//! /dev/fuse (skipped otherwise) and the programs themselves (`.ci/run` installs them; a
//! missing one fails the test).

mod common;
use common::mount::*;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `script` under `sh -e` in `dir` with a fixed identity and clock for git, and returns
/// its standard output; a failure names the script and what it printed.
fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .args(["-ec", script])
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "nasd")
        .env("GIT_AUTHOR_EMAIL", "nasd@example.org")
        .env("GIT_COMMITTER_NAME", "nasd")
        .env("GIT_COMMITTER_EMAIL", "nasd@example.org")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .unwrap_or_else(|e| panic!("sh: {e}"));
    assert!(
        out.status.success(),
        "in {}: {script}\n--- stdout\n{}\n--- stderr\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Fails the test when `program` is not installed (CI installs every one).
fn need(programs: &[&str]) {
    for p in programs {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .unwrap()
            .status
            .success();
        assert!(found, "{p} is not installed (.ci/run installs it)");
    }
}

/// Every entry under `root` as a line: path, kind, mode, size, owner, links, modify time in
/// microseconds (the mount's resolution; seed 002 Table 5), link target, content hash.
/// Directories' sizes differ by file system and are left out, and so is the time of `root`
/// (each side's is made at its own moment).
fn listing(root: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        let mtime_us = m.mtime() * 1_000_000 + m.mtime_nsec() / 1000;
        let ft = m.file_type();
        let (kind, size, extra) = if ft.is_dir() {
            let mut names: Vec<PathBuf> = std::fs::read_dir(&p)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            names.sort();
            stack.extend(names);
            ("dir", 0, String::new())
        } else if ft.is_symlink() {
            let t = std::fs::read_link(&p).unwrap();
            ("link", m.size(), t.display().to_string())
        } else {
            let h = blake3::hash(&std::fs::read(&p).unwrap());
            ("file", m.size(), h.to_hex().to_string())
        };
        let time = match rel.is_empty() {
            true => "-".to_string(),
            false => mtime_us.to_string(),
        };
        // A link's mode is always 777.
        let mode = if ft.is_symlink() {
            0o777
        } else {
            m.mode() & 0o7777
        };
        out.push(format!(
            "{rel:?} {kind} {mode:o} {size} {}:{} n{} t{time} {extra}",
            m.uid(),
            m.gid(),
            if ft.is_dir() { 0 } else { m.nlink() },
        ));
    }
    out.sort();
    out
}

/// A tree with what copies must keep: sizes around block and piece edges, modes, a relative
/// link, a hard link, an empty directory, nested directories, times with nanoseconds.
fn sample_tree(root: &Path) {
    let dirs = ["a", "a/b", "a/b/c", "empty", "x y"];
    for d in dirs {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let files: [(&str, usize, u32); 7] = [
        ("zero", 0, 0o644),
        ("one", 1, 0o600),
        ("a/page", 4095, 0o644),
        ("a/b/piece", 70_001, 0o755),
        ("a/b/c/big", (1 << 20) + 17, 0o444),
        ("x y/spaced name", 300, 0o640),
        ("a/b/c/deep", 12, 0o700),
    ];
    for (i, (name, len, mode)) in files.iter().enumerate() {
        let p = root.join(name);
        std::fs::write(&p, rand_bytes(*len, i as u64 + 1)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    std::os::unix::fs::symlink("b/piece", root.join("a/link")).unwrap();
    std::fs::hard_link(root.join("a/page"), root.join("hard")).unwrap();
    // Times with nanoseconds, deepest first so a directory's time is its last change.
    sh(
        root,
        "find . -depth ! -type l -exec touch -m -d '2025-03-04 05:06:07.123456789' {} +
         touch -h -m -d '2024-01-02 03:04:05.5' a/link",
    );
}

/// A cluster of three drives (an erasure-coded directory among the default layout's) and a
/// mount of it; the tests' local counterpart is a directory beside it.
struct Bench {
    _mount: Mounted,
    mnt: PathBuf,
    local: PathBuf,
    src: PathBuf,
    up: Up,
}

impl Bench {
    fn start() -> Option<Bench> {
        if !can_mount() {
            return None;
        }
        let up = Up::start(3);
        let mnt = up.dir.path().join("m");
        let mount = Mounted::start(&up, "nasd:/", &mnt, &[]);
        let local = up.dir.path().join("local");
        let src = up.dir.path().join("src");
        std::fs::create_dir_all(&local).unwrap();
        std::fs::create_dir_all(&src).unwrap();
        sample_tree(&src);
        Some(Bench {
            _mount: mount,
            mnt,
            local,
            src,
            up,
        })
    }

    /// Runs `script` in `local/name` and in `mount/name` (each made first), and returns both
    /// outputs.
    fn both(&self, name: &str, script: &str) -> (String, String) {
        let (l, m) = (self.local.join(name), self.mnt.join(name));
        std::fs::create_dir_all(&l).unwrap();
        std::fs::create_dir_all(&m).unwrap();
        let script = script.replace("$SRC", self.src.to_str().unwrap());
        (sh(&l, &script), sh(&m, &script))
    }

    fn same_tree(&self, name: &str) {
        let l = listing(&self.local.join(name));
        let m = listing(&self.mnt.join(name));
        assert_eq!(
            m, l,
            "{name}: the mount's tree (left) against the local one"
        );
    }
}

#[test]
fn git_tar_cp_and_rsync_on_the_mount_match_a_local_directory() {
    need(&["git", "tar", "rsync", "diff"]);
    let Some(b) = Bench::start() else { return };

    // git: the same commits give the same hashes; the object store checks out whole.
    let git = "git init -q -b main r && cd r
        cp -r $SRC/a $SRC/one $SRC/zero .
        git add -A && git commit -qm first
        echo change >> one && git mv a/page a/moved && git commit -qam second
        git fsck --strict --no-progress 2>&1
        git gc -q --aggressive && git fsck --strict --no-progress 2>&1
        git rev-parse HEAD && git status --porcelain && git log --format=%s | wc -l
        git clone -q . ../clone && cd ../clone && git rev-parse HEAD";
    let (l, m) = b.both("git", git);
    assert_eq!(m, l, "git on the mount against a local repository");
    assert!(l.contains(&sh(&b.local.join("git/r"), "git rev-parse HEAD")));

    // GNU tar: what it extracts (modes, times, links) is what it extracts locally.
    let tarball = b.up.dir.path().join("src.tar");
    sh(
        &b.src,
        &format!("tar --format=gnu -cf {} .", tarball.display()),
    );
    b.both("tar", &format!("tar -xpf {}", tarball.display()));
    b.same_tree("tar");
    assert_eq!(
        sh(&b.mnt, "diff -r tar ../local/tar && echo same"),
        "same\n"
    );

    // cp -a keeps modes, times (to the microsecond), links and hard links.
    b.both("cp", "cp -a $SRC/. .");
    b.same_tree("cp");

    // rsync -a to the mount, back out of it, and again: nothing left to send.
    b.both("rsync", "rsync -a $SRC/ in/ && rsync -aH in/ out/");
    b.same_tree("rsync");
    let again = sh(
        &b.mnt.join("rsync"),
        &format!("rsync -ain {}/ in/", b.src.display()),
    );
    assert_eq!(again, "", "rsync finds nothing to send a second time");
}

#[test]
fn sqlite_on_the_mount_keeps_every_transaction_in_either_journal_mode() {
    need(&["sqlite3"]);
    let Some(b) = Bench::start() else { return };
    let rows: String = (0..2000)
        .map(|i| format!("insert into t values({i}, 'row {i}', randomblob(0));\n"))
        .collect();
    let sql = |name: &str, text: &str| {
        let p = b.up.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let fill = sql("fill.sql", &format!("begin;\n{rows}commit;\n"));
    let change = sql(
        "change.sql",
        "begin;\nupdate t set b = b || ' x' where a % 3 = 0;\ndelete from t where a % 7 = 0;\ncommit;\nvacuum;\n",
    );
    for mode in ["delete", "wal"] {
        let script = format!(
            "sqlite3 db 'pragma journal_mode={mode};' >/dev/null
             sqlite3 db 'create table t(a integer primary key, b text, c blob);'
             sqlite3 db < {fill}
             sqlite3 db < {change}
             sqlite3 db 'pragma integrity_check; select count(*), sum(a), group_concat(b) from t;' | md5sum"
        );
        let (l, m) = b.both(mode, &script);
        assert_eq!(m, l, "sqlite with journal_mode={mode}");
        let check = sh(&b.mnt.join(mode), "sqlite3 db 'pragma integrity_check;'");
        assert_eq!(check, "ok\n");
    }
}

#[test]
fn an_incremental_rust_build_on_the_mount_matches_a_local_one() {
    need(&["cargo"]);
    let Some(b) = Bench::start() else { return };
    // rustc's incremental cache keeps a lock file open beside a session directory and
    // deletes a session directory it finds without one: the lock file must be listed.
    let script = "cargo new -q --vcs none p && cd p
        printf 'fn main() { println!(\"{}\", f()); }\\nfn f() -> u32 { 41 }\\n' > src/main.rs
        CARGO_INCREMENTAL=1 cargo build -q --offline && ./target/debug/p
        sed -i 's/41/42/' src/main.rs
        CARGO_INCREMENTAL=1 cargo build -q --offline && ./target/debug/p";
    let (l, m) = b.both("rust", script);
    assert_eq!(l, "41\n42\n");
    assert_eq!(m, l, "an incremental build on the mount");
}

/// A file has its name from `create`, as on a local file system: listings show it, calls on
/// its name work, and another client sees the empty file while the first writes; an
/// exclusive create is exclusive across mounts.
#[test]
fn a_new_file_has_its_name_from_create_on_every_mount() {
    let Some(b) = Bench::start() else { return };
    let other = Mounted::start(&b.up, "nasd:/", &b.up.dir.path().join("m2"), &[]);
    let f = b.mnt.join("open");
    let mut w = std::fs::File::create(&f).unwrap();
    std::io::Write::write_all(&mut w, b"half").unwrap();
    let names: Vec<String> = std::fs::read_dir(&b.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.contains(&"open".to_string()), "{names:?}");
    w.set_permissions(std::fs::Permissions::from_mode(0o640))
        .unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    let seen = std::fs::metadata(other.dir.join("open")).unwrap();
    assert!(seen.is_file());
    assert!(b.up.ok(&["ls", "nasd:/"]).contains("open"));
    std::io::Write::write_all(&mut w, b" and the rest").unwrap();
    drop(w);
    assert_eq!(
        std::fs::read(other.dir.join("open")).unwrap(),
        b"half and the rest"
    );
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);

    // O_EXCL: one mount wins the name, the other gets EEXIST, every time.
    for i in 0..20 {
        let name = format!("lock{i}");
        let (p, q) = (b.mnt.join(&name), other.dir.join(&name));
        let excl = |p: PathBuf| {
            std::thread::spawn(move || {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(p)
                    .map(drop)
                    .map_err(|e| e.raw_os_error())
            })
        };
        let (x, y) = (excl(p), excl(q));
        let won = [x.join().unwrap(), y.join().unwrap()];
        assert_eq!(
            won.iter().filter(|r| r.is_ok()).count(),
            1,
            "{name}: {won:?}"
        );
        assert!(won.contains(&Err(Some(libc::EEXIST))), "{name}: {won:?}");
    }

    // mknod of a regular file in an encrypted directory: a file its writer can fill.
    let made = b.mnt.join("made");
    let c = std::ffi::CString::new(made.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    assert_eq!(
        unsafe { libc::mknod(c.as_ptr(), libc::S_IFREG | 0o644, 0) },
        0
    );
    std::fs::write(&made, b"filled").unwrap();
    assert_eq!(b.up.ok(&["cat", "nasd:/made"]), "filled");
}

/// Two mounts of one cluster take turns on one git repository and one tree, as two hosts
/// sharing an NFS export do; after each close the other mount sees the work.
#[test]
fn two_mounts_editing_one_tree_see_each_others_work() {
    need(&["git"]);
    let Some(b) = Bench::start() else { return };
    let other = Mounted::start(&b.up, "nasd:/", &b.up.dir.path().join("m2"), &[]);
    let (a, o) = (b.mnt.join("shared"), other.dir.join("shared"));
    std::fs::create_dir_all(&a).unwrap();
    sh(
        &a,
        "git init -q -b main . && cp -r $0/a . && git add -A && git commit -qm one"
            .replace("$0", b.src.to_str().unwrap())
            .as_str(),
    );
    sh(
        &o,
        "git status --porcelain | wc -l | grep -qx 0
        echo more >> a/page && git commit -qam two
        mkdir new && echo n > new/f && git add new && git commit -qm three",
    );
    let log = sh(
        &a,
        "git fsck --strict --no-progress && git log --format=%s && git status --porcelain",
    );
    assert_eq!(log, "three\ntwo\none\n");
    sh(
        &a,
        "rm -r new && git commit -qam four && mv a/b a/moved && git add -A && git commit -qm five",
    );
    assert_eq!(
        sh(
            &o,
            "git log -1 --format=%s && ls a && test ! -e new && echo gone"
        ),
        "five\nlink\nmoved\npage\ngone\n"
    );
    assert_eq!(listing(&a), listing(&o));
}

/// A link another cluster user stored cannot lead a write through the mount out of it: an
/// absolute target names the cluster's path under the mount point, and a relative one that
/// climbs past the mount's root dangles (crates/nasd-fuse/src/links.rs). Links made through
/// the mount to paths in it read back as made; relative links inside it are kept as they are.
#[test]
fn links_never_lead_a_write_out_of_the_mount() {
    let Some(b) = Bench::start() else { return };
    let host = b.up.dir.path().join("host-file");
    std::fs::write(&host, b"host").unwrap();
    let host = host.canonicalize().unwrap();
    let up_levels = "../".repeat(host.components().count() + 2);
    let climbing = format!(
        "{up_levels}{}",
        host.display().to_string().trim_start_matches('/')
    );
    b.up.ok(&["ln", "-s", host.to_str().unwrap(), "nasd:/abs"]);
    b.up.ok(&["mkdir", "nasd:/d"]);
    b.up.ok(&["ln", "-s", &climbing, "nasd:/d/climb"]);
    for link in ["abs", "d/climb"] {
        let p = b.mnt.join(link);
        let r = std::fs::write(&p, b"written through a link");
        assert!(r.is_err(), "{link}: a write through it landed somewhere");
        assert_eq!(
            std::fs::read(&host).unwrap(),
            b"host",
            "{link}: the host file changed"
        );
        let shown = std::fs::read_link(&p).unwrap();
        assert!(
            shown.starts_with(&b.mnt),
            "{link} reads as {}",
            shown.display()
        );
    }
    // Made through the mount: kept inside it, and read back as made.
    let mnt = b.mnt.canonicalize().unwrap();
    std::fs::write(mnt.join("target"), b"inside").unwrap();
    std::os::unix::fs::symlink(mnt.join("target"), mnt.join("to-abs")).unwrap();
    std::os::unix::fs::symlink("../target", mnt.join("d/to-rel")).unwrap();
    assert_eq!(
        std::fs::read_link(mnt.join("to-abs")).unwrap(),
        mnt.join("target")
    );
    assert_eq!(
        std::fs::read_link(mnt.join("d/to-rel")).unwrap(),
        Path::new("../target")
    );
    assert_eq!(b.up.ok(&["cat", "nasd:/to-abs"]), "inside");
    assert_eq!(std::fs::read(mnt.join("d/to-rel")).unwrap(), b"inside");
}
