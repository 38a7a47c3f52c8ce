//! A drive served by `nasd drive run` on a free loopback port, driven through the operator
//! CLI as an operator's script would.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub use super::NASD;

pub fn nasd(args: &[&str]) -> Output {
    Command::new(NASD)
        .args(args)
        .output()
        .expect("running nasd")
}

pub fn ok(args: &[&str]) -> String {
    let o = nasd(args);
    assert!(
        o.status.success(),
        "nasd {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8 output")
}

/// Runs `nasd` expecting failure; returns stdout bytes and stderr text.
pub fn fails(args: &[&str]) -> (Vec<u8>, String) {
    let o = nasd(args);
    assert!(
        !o.status.success(),
        "nasd {args:?} succeeded: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    (o.stdout, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// A drive initialized in a temporary directory with partition 1, served by `nasd drive run`.
pub struct TestDrive {
    pub child: Child,
    pub addr: String,
    pub dir: tempfile::TempDir,
}

impl Drop for TestDrive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TestDrive {
    pub fn start() -> TestDrive {
        Self::start_with(&[])
    }

    /// [`TestDrive::start`] with more `nasd drive run` flags (`--cache-bytes`, `--seek-ms` ...).
    pub fn start_with(run_args: &[&str]) -> TestDrive {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("drive");
        ok(&[
            "drive",
            "init",
            "--data",
            data.to_str().unwrap(),
            "--partition",
            "1",
        ]);
        let (child, addr) = Self::run(&data, run_args);
        TestDrive { child, addr, dir }
    }

    /// Serves a drive already initialized in `dir/drive`.
    pub fn start_on(dir: tempfile::TempDir) -> TestDrive {
        let (child, addr) = Self::run(&dir.path().join("drive"), &[]);
        TestDrive { child, addr, dir }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("drive")
    }

    /// Stops the drive with `signal` (`SIGKILL`, `SIGTERM`), waits for it, and starts it again
    /// on the same data; the new address replaces the old.
    pub fn restart(&mut self, signal: i32) {
        unsafe { libc::kill(self.child.id() as i32, signal) };
        self.child.wait().unwrap();
        let (child, addr) = Self::run(&self.data(), &[]);
        self.child = child;
        self.addr = addr;
    }

    /// `nasd drive run` on a free loopback port: the process and its address.
    fn run(data: &Path, run_args: &[&str]) -> (Child, String) {
        let mut child = Command::new(NASD)
            .args([
                "drive",
                "run",
                "--data",
                data.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(run_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .expect("listening line")
            .to_string();
        assert!(addr.starts_with("127.0.0.1:"), "{line}");
        (child, addr)
    }

    pub fn key(&self, name_has: &[&str], name_lacks: &[&str]) -> String {
        let keys = self.dir.path().join("drive").join("keys");
        for e in std::fs::read_dir(&keys).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name_has.iter().all(|s| name.contains(s))
                && !name_lacks.iter().any(|s| name.contains(s))
            {
                return keys.join(name).to_str().unwrap().to_string();
            }
        }
        panic!("no key file with {name_has:?} in {}", keys.display());
    }

    pub fn partition_key(&self) -> String {
        self.key(&["partition"], &["working"])
    }

    pub fn working_key(&self) -> String {
        self.key(&["working"], &[])
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn create(&self) -> String {
        ok(&[
            "obj",
            "create",
            "--drive",
            &self.addr,
            "--key",
            &self.partition_key(),
            "--partition",
            "1",
        ])
        .trim()
        .to_string()
    }

    /// Mints a capability into a file and returns its path.
    pub fn mint(&self, name: &str, object: &str, extra: &[&str]) -> String {
        let wk = self.working_key();
        let mut args = vec![
            "cap",
            "mint",
            "--key",
            &wk,
            "--partition",
            "1",
            "--object",
            object,
        ];
        if !extra.contains(&"--expires-in") {
            args.extend(["--expires-in", "120s"]);
        }
        if !extra.contains(&"--rights") {
            args.extend(["--rights", "read,write,getattr,setattr"]);
        }
        args.extend(extra);
        let json = ok(&args);
        let p = self.path(name);
        std::fs::write(&p, json).unwrap();
        p.to_str().unwrap().to_string()
    }
}

pub fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8 + 1).collect()
}

pub fn write_input(d: &TestDrive, bytes: &[u8]) -> String {
    let p = d.path("input.bin");
    std::fs::write(&p, bytes).unwrap();
    p.to_str().unwrap().to_string()
}
