//! The five phases of the Andrew benchmark (Howard88; seed 002 §4.2, Table 8), run as real
//! file-system calls from this process on a directory, whatever serves it:
//!
//! 1. **mkdir**: make the tree's directories;
//! 2. **copy**: copy every file in from a source tree on the local disk;
//! 3. **stat**: walk the tree and read every entry's attributes (`ls -lR`);
//! 4. **read**: walk the tree and read every byte of every file;
//! 5. **compile**: `make -j1` in the tree (a child process whose working directory is the
//!    target), which reads the sources and headers and writes the objects and the program.
//!
//! Each phase is timed alone. What the phases saw is checked afterwards: the walk found every
//! file, the bytes read back are the bytes written (one digest over all files), and the
//! program the compile built prints what the generator expects.

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::source::{contents_digest, Tree, PROGRAM};
use crate::error::LabError;

/// The phases, in order, as named in rows and tables.
pub const PHASES: [&str; 5] = ["mkdir", "copy", "stat", "read", "compile"];
/// How long the compile may take before the run fails (a hung mount must not hang the lab).
const COMPILE_TIMEOUT_MS: u64 = 600_000;
/// How long the built program may run.
const PROGRAM_TIMEOUT_MS: u64 = 30_000;

/// What one pass of the five phases measured and saw.
#[derive(Clone, Debug)]
pub struct Pass {
    /// Seconds per phase, in [`PHASES`] order.
    pub seconds: [f64; 5],
    /// Entries the stat walk found (directories and files, not the root).
    pub entries_stat: usize,
    /// Files and bytes the read phase read.
    pub files_read: usize,
    pub bytes_read: u64,
    /// The digest of what the read phase read ([`contents_digest`]).
    pub read_digest: String,
    /// What the built program printed.
    pub program_output: String,
}

fn fail(what: impl std::fmt::Display, path: &Path, e: std::io::Error) -> LabError {
    LabError::Andrew(format!("{what} {}: {e}", path.display()))
}

/// Writes the tree as the source of the copy phase (not timed).
pub fn write_source(tree: &Tree, dir: &Path) -> Result<(), LabError> {
    for d in &tree.dirs {
        let p = dir.join(d);
        fs::create_dir_all(&p).map_err(|e| fail("making", &p, e))?;
    }
    for (f, data) in &tree.files {
        let p = dir.join(f);
        fs::write(&p, data).map_err(|e| fail("writing", &p, e))?;
    }
    Ok(())
}

/// Runs the five phases into `target` (which must not exist; its parent must) from the
/// source tree at `source`, then runs the program built.
pub fn run(tree: &Tree, source: &Path, target: &Path) -> Result<Pass, LabError> {
    let mut seconds = [0.0; 5];
    let t = Instant::now();
    mkdir(tree, target)?;
    seconds[0] = t.elapsed().as_secs_f64();
    let t = Instant::now();
    copy(tree, source, target)?;
    seconds[1] = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let entries_stat = stat_walk(target)?;
    seconds[2] = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let files = read_walk(target)?;
    seconds[3] = t.elapsed().as_secs_f64();
    let t = Instant::now();
    compile(target)?;
    seconds[4] = t.elapsed().as_secs_f64();
    let read_digest = contents_digest(files.iter().map(|(p, d)| (p.as_str(), d.as_slice())));
    Ok(Pass {
        seconds,
        entries_stat,
        files_read: files.len(),
        bytes_read: files.iter().map(|(_, d)| d.len() as u64).sum(),
        read_digest,
        program_output: run_program(target)?,
    })
}

/// Phase 1: the target and every directory of the tree, parents first.
fn mkdir(tree: &Tree, target: &Path) -> Result<(), LabError> {
    fs::create_dir(target).map_err(|e| fail("making", target, e))?;
    for d in &tree.dirs {
        let p = target.join(d);
        fs::create_dir(&p).map_err(|e| fail("making", &p, e))?;
    }
    Ok(())
}

/// Phase 2: every file read from the source and written to the target.
fn copy(tree: &Tree, source: &Path, target: &Path) -> Result<(), LabError> {
    for (f, _) in &tree.files {
        let (from, to) = (source.join(f), target.join(f));
        let data = fs::read(&from).map_err(|e| fail("reading", &from, e))?;
        fs::write(&to, &data).map_err(|e| fail("writing", &to, e))?;
    }
    Ok(())
}

/// Phase 3: every entry under `dir`, recursively, with its attributes; returns how many.
fn stat_walk(dir: &Path) -> Result<usize, LabError> {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).map_err(|e| fail("listing", &d, e))? {
            let e = e.map_err(|e| fail("listing", &d, e))?;
            let p = e.path();
            let m = fs::symlink_metadata(&p).map_err(|e| fail("stat of", &p, e))?;
            n += 1;
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    Ok(n)
}

/// Phase 4: every file under `dir` read whole; (path relative to `dir`, bytes) per file.
fn read_walk(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, LabError> {
    let mut files = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).map_err(|e| fail("listing", &d, e))? {
            let e = e.map_err(|e| fail("listing", &d, e))?;
            let p = e.path();
            let ft = e.file_type().map_err(|e| fail("stat of", &p, e))?;
            if ft.is_dir() {
                stack.push(p);
                continue;
            }
            let mut data = vec![];
            fs::File::open(&p)
                .and_then(|mut f| f.read_to_end(&mut data))
                .map_err(|e| fail("reading", &p, e))?;
            let rel = p
                .strip_prefix(dir)
                .expect("walked under dir")
                .to_string_lossy()
                .into_owned();
            files.push((rel, data));
        }
    }
    Ok(files)
}

/// A command run in `dir` with a clean make environment, its output captured; fails with
/// the output's tail on a non-zero exit or after `timeout_ms`.
fn run_in(dir: &Path, program: &Path, args: &[&str], timeout_ms: u64) -> Result<String, LabError> {
    let what = format!("{} {}", program.display(), args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        // The lab may run under cargo or make: the build must not join their job server.
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .env_remove("CARGO_MAKEFLAGS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LabError::Andrew(format!("starting {what} in {}: {e}", dir.display())))?;
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() > Duration::from_millis(timeout_ms) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LabError::Andrew(format!(
                    "{what} in {} ran longer than {timeout_ms} ms",
                    dir.display()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(LabError::Andrew(format!("waiting for {what}: {e}"))),
        }
    };
    let stdout = reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    if !status.success() {
        let tail: String = {
            let all = format!("{stdout}{stderr}");
            let lines: Vec<&str> = all.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        return Err(LabError::Andrew(format!(
            "{what} in {} failed ({status}):\n{tail}",
            dir.display()
        )));
    }
    Ok(stdout)
}

/// Phase 5: `make -j1` in the tree.
fn compile(target: &Path) -> Result<(), LabError> {
    run_in(
        target,
        Path::new("make"),
        &["-j1", "-s"],
        COMPILE_TIMEOUT_MS,
    )
    .map(|_| ())
}

/// Runs the program the compile built (not timed) and returns what it printed.
fn run_program(target: &Path) -> Result<String, LabError> {
    let program: PathBuf = target.join(PROGRAM);
    run_in(target, &program, &[], PROGRAM_TIMEOUT_MS)
}

/// Whether `gcc` and `make` can be run here: `None` if so, else what is missing.
pub fn missing_tools() -> Option<String> {
    for tool in ["gcc", "make"] {
        let ok = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Some(format!(
                "{tool} is not installed (the compile phase runs it)"
            ));
        }
    }
    None
}

/// Removes a pass's target (not timed): the next run starts from nothing.
pub fn clean(target: &Path) -> Result<(), LabError> {
    match fs::remove_dir_all(target) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(fail("removing", target, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The five phases on a local directory: the tree compiles, the program prints what the
    /// generator worked out, and the walk saw every byte.
    #[test]
    fn the_phases_run_and_the_program_prints_its_checksum() {
        if let Some(why) = missing_tools() {
            eprintln!("skipped: {why}");
            return;
        }
        let tree = Tree::generate(3);
        let d = tempfile::tempdir().unwrap();
        write_source(&tree, &d.path().join("src")).unwrap();
        let target = d.path().join("t");
        let pass = run(&tree, &d.path().join("src"), &target).unwrap();
        assert_eq!(pass.program_output, tree.expected_output());
        assert_eq!(pass.entries_stat, tree.files.len() + tree.dirs.len());
        assert_eq!(pass.files_read, tree.files.len());
        assert_eq!(pass.bytes_read, tree.bytes());
        assert_eq!(pass.read_digest, tree.digest());
        assert!(pass.seconds.iter().all(|s| *s > 0.0), "{:?}", pass.seconds);
        clean(&target).unwrap();
        assert!(!target.exists());
        // A target that exists is refused: phase 1 makes it.
        fs::create_dir(&target).unwrap();
        assert!(run(&tree, &d.path().join("src"), &target).is_err());
    }
}
