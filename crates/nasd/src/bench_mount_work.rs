//! `nasd bench mount`'s workloads: metadata-heavy work by programs nobody here wrote (tar, cp,
//! git, sqlite3, cargo) through `nasd mount` beside the same work in a local directory on the
//! same machine, as `ratio_vs_local` = the mount's seconds over the local directory's (issue
//! 20 §3: each within 3x; 1 means as fast as local).
//!
//! Method: one generated source tree (`--tree-files` text files of 1-16 KiB in nested
//! directories, and a small Rust crate with no dependencies) is made on the local disk, with
//! a tarball and a git repository of it. Per round and workload, the command runs in a fresh
//! directory locally and in a fresh directory of the mount, which goes first alternating by
//! round; nothing is synced by the bench (the programs sync what they sync, as they would on
//! either). A workload's figure is the median over rounds, its ratio the median of the
//! per-round ratios. A program that is missing is reported as skipped, never timed. A
//! benchmark: it asserts nothing about speed.

use crate::bench::median;
use anyhow::{bail, Context as _};
use nasd_cluster::pseudo_random;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Files in the generated tree (and per untar, copy and commit).
pub(crate) const TREE_FILES: usize = 400;
pub(crate) const TREE_FILES_QUICK: usize = 60;
/// Files per directory of the generated tree.
const FILES_PER_DIR: usize = 16;
/// One-row transactions per sqlite workload.
const SQLITE_TRANSACTIONS: usize = 300;
const SQLITE_TRANSACTIONS_QUICK: usize = 50;
/// Modules of the generated crate.
const CRATE_MODULES: usize = 24;

/// A workload: its name, the programs it needs, and its shell command (run in a fresh
/// directory; `$SRC` names the prepared inputs).
struct Work {
    name: &'static str,
    needs: &'static [&'static str],
    command: &'static str,
}

const WORKS: [Work; 7] = [
    Work {
        name: "untar",
        needs: &["tar"],
        command: "tar -xf \"$SRC/tree.tar\"",
    },
    Work {
        name: "cp-a",
        needs: &["cp"],
        command: "cp -a \"$SRC/tree\" copy",
    },
    Work {
        name: "git-commit",
        needs: &["git", "tar"],
        command: "git init -q g && cd g && tar -xf \"$SRC/tree.tar\" && git add -A && \
                  git -c user.name=b -c user.email=b@b commit -qm one",
    },
    Work {
        name: "git-clone-status",
        needs: &["git"],
        command: "git clone -q --no-local \"$SRC/repo\" c && cd c && git status --porcelain && \
                  git status --porcelain",
    },
    Work {
        name: "sqlite-journal",
        needs: &["sqlite3"],
        command: "sqlite3 j.db 'create table t(a, b)' && sqlite3 j.db < \"$SRC/tx.sql\" && \
                  sqlite3 j.db 'pragma integrity_check' | grep -qx ok",
    },
    Work {
        name: "sqlite-wal",
        needs: &["sqlite3"],
        command: "sqlite3 w.db 'pragma journal_mode=wal; create table t(a, b)' && \
                  sqlite3 w.db < \"$SRC/tx.sql\" && \
                  sqlite3 w.db 'pragma integrity_check' | grep -qx ok",
    },
    Work {
        name: "cargo-build",
        needs: &["cargo"],
        command: "cp -r \"$SRC/crate\" k && cd k && cargo build -q --offline",
    },
];

/// One workload's seconds per round, locally and through the mount.
pub(crate) struct Timed {
    name: &'static str,
    local_s: Vec<f64>,
    mount_s: Vec<f64>,
    skipped: Option<String>,
}

/// Makes the inputs under `src` (on the local disk): the tree, its tarball, a git
/// repository of it, the sqlite transactions and the crate.
pub(crate) fn prepare(src: &Path, files: usize, quick: bool) -> anyhow::Result<()> {
    let tree = src.join("tree");
    for i in 0..files {
        let d = tree.join(format!(
            "d{}/s{}",
            i / (FILES_PER_DIR * 4),
            i / FILES_PER_DIR
        ));
        std::fs::create_dir_all(&d)?;
        let bytes = 1024 + (i * 977) % (15 << 10);
        // Printable text (a source tree's), so git's deltas and sqlite see ordinary data.
        let text: Vec<u8> = pseudo_random(bytes, i as u64 + 1)
            .iter()
            .map(|b| if b % 64 == 0 { b'\n' } else { b'a' + b % 26 })
            .collect();
        std::fs::write(d.join(format!("f{i}.txt")), text)?;
    }
    let tx = if quick {
        SQLITE_TRANSACTIONS_QUICK
    } else {
        SQLITE_TRANSACTIONS
    };
    let sql: String = (0..tx)
        .map(|i| format!("begin; insert into t values({i}, 'row {i}'); commit;\n"))
        .collect();
    std::fs::write(src.join("tx.sql"), sql)?;
    make_crate(&src.join("crate"))?;
    let tar = format!("cd '{}' && tar -cf ../tree.tar .", tree.display());
    let repo = format!(
        "git init -q '{r}' && cp -r '{t}/.' '{r}' && cd '{r}' && git add -A && \
         git -c user.name=b -c user.email=b@b commit -qm tree",
        r = src.join("repo").display(),
        t = tree.display()
    );
    for (what, cmd) in [("tar", tar), ("git", repo)] {
        if have(what) {
            shell(src, &cmd, src)?;
        }
    }
    Ok(())
}

/// A crate of [`CRATE_MODULES`] modules with no dependencies.
fn make_crate(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"k\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )?;
    let mut main = String::new();
    for m in 0..CRATE_MODULES {
        main += &format!("mod m{m};\n");
        std::fs::write(
            dir.join(format!("src/m{m}.rs")),
            format!(
                "pub fn f(x: u64) -> u64 {{\n    (0..x).map(|i| i * {m} + 1).sum::<u64>() ^ {m}\n}}\n"
            ),
        )?;
    }
    main += "fn main() {\n    let mut s = 0u64;\n";
    for m in 0..CRATE_MODULES {
        main += &format!("    s = s.wrapping_add(m{m}::f(s % 7 + {m}));\n");
    }
    main += "    println!(\"{s}\");\n}\n";
    std::fs::write(dir.join("src/main.rs"), main)?;
    Ok(())
}

/// Whether `program` runs (`--version`).
fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `cmd` with `bash` in `cwd` (`$SRC` = `src`) to success; its seconds.
fn shell(cwd: &Path, cmd: &str, src: &Path) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let o = Command::new("bash")
        .args(["-c", cmd])
        .current_dir(cwd)
        .env("SRC", src)
        .env("CARGO_TARGET_DIR", cwd.join("target"))
        .output()
        .with_context(|| format!("running {cmd}"))?;
    let s = t0.elapsed().as_secs_f64();
    if !o.status.success() {
        bail!(
            "`{cmd}` in {} failed: {}{}",
            cwd.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(s)
}

/// Runs every workload `rounds` times in `local` and in `mounted` (both existing, empty).
pub(crate) fn run(
    src: &Path,
    local: &Path,
    mounted: &Path,
    rounds: usize,
) -> anyhow::Result<Vec<Timed>> {
    let mut out: Vec<Timed> = vec![];
    for w in &WORKS {
        let missing: Vec<&str> = w.needs.iter().copied().filter(|p| !have(p)).collect();
        out.push(Timed {
            name: w.name,
            local_s: vec![],
            mount_s: vec![],
            skipped: (!missing.is_empty()).then(|| format!("needs {}", missing.join(", "))),
        });
    }
    for r in 0..rounds {
        for (w, t) in WORKS.iter().zip(out.iter_mut()) {
            if t.skipped.is_some() {
                continue;
            }
            let at = |base: &Path| -> anyhow::Result<PathBuf> {
                let d = base.join(format!("{}-{r}", w.name));
                std::fs::create_dir(&d)?;
                Ok(d)
            };
            let (l, m) = (at(local)?, at(mounted)?);
            let (ls, ms) = if r.is_multiple_of(2) {
                let ls = shell(&l, w.command, src)?;
                (ls, shell(&m, w.command, src)?)
            } else {
                let ms = shell(&m, w.command, src)?;
                (shell(&l, w.command, src)?, ms)
            };
            t.local_s.push(ls);
            t.mount_s.push(ms);
            std::fs::remove_dir_all(&l)?;
        }
    }
    Ok(out)
}

/// Prints one line (or JSON object) per workload.
pub(crate) fn report(works: &[Timed], rounds: usize, json: bool) {
    if !json {
        println!(
            "\n{:<18} {:>9} {:>9} {:>15}  per round",
            "workload", "local s", "mount s", "ratio_vs_local"
        );
    }
    for t in works {
        if let Some(why) = &t.skipped {
            match json {
                true => println!(
                    "{}",
                    serde_json::json!({"workload": t.name, "skipped": why})
                ),
                false => println!("{:<18} skipped: {why}", t.name),
            }
            continue;
        }
        let ratios: Vec<f64> = t
            .mount_s
            .iter()
            .zip(&t.local_s)
            .map(|(m, l)| m / l)
            .collect();
        let (l, m, ratio) = (
            median(t.local_s.clone()),
            median(t.mount_s.clone()),
            median(ratios.clone()),
        );
        if json {
            println!(
                "{}",
                serde_json::json!({"workload": t.name, "rounds": rounds, "local_s": l,
                    "mount_s": m, "ratio_vs_local": ratio, "ratios": ratios})
            );
        } else {
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.1}")).collect();
            println!(
                "{:<18} {l:>9.3} {m:>9.3} {ratio:>15.1}  {}",
                t.name,
                each.join(" ")
            );
        }
    }
}
