//! The black-box cluster harness shared by the test files: `nasd up` as a real process
//! (manager and drives each their own process), driven through the CLI and the client library.
#![allow(dead_code)]

pub mod drive;

use nasd_client::session::SessionConfig;
use nasd_proto::manager::Credential;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const NASD: &str = env!("CARGO_BIN_EXE_nasd");

/// A running `nasd up`; dropping it stops the whole cluster.
pub struct Up {
    pub dir: tempfile::TempDir,
    pub child: Child,
    pub extra: Vec<Child>,
}

impl Up {
    pub fn start(drives: usize) -> Up {
        Up::start_with(drives, &[])
    }

    pub fn start_with(drives: usize, extra: &[&str]) -> Up {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(NASD)
            .args(["up", "--drives", &drives.to_string(), "--data"])
            .arg(dir.path().join("c"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let t0 = Instant::now();
        let mut seen = String::new();
        use std::io::Read;
        let mut buf = [0u8; 256];
        while !seen.contains("ctrl-c stops the cluster") {
            let n = out.read(&mut buf).unwrap();
            assert!(n > 0, "nasd up exited early: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "nasd up too slow: {seen}"
            );
        }
        Up {
            dir,
            child,
            extra: vec![],
        }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("c")
    }

    pub fn config(&self) -> PathBuf {
        self.data().join("client.json")
    }

    pub fn nasd(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(NASD);
        c.args(args)
            .env("NASD_CONFIG", self.config())
            .env_remove("NASD_USER")
            .env_remove("NASD_PASSWORD");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.nasd(args, &[]);
        assert!(
            o.status.success(),
            "nasd {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// Runs a command that must fail; returns its stderr.
    pub fn fails(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let o = self.nasd(args, env);
        assert!(!o.status.success(), "nasd {args:?} should have failed");
        String::from_utf8(o.stderr).unwrap()
    }

    pub fn pid(&self, name: &str) -> u32 {
        let t = std::fs::read_to_string(self.data().join("pids.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        v["pids"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p[0] == name)
            .map(|p| p[1].as_u64().unwrap() as u32)
            .unwrap()
    }

    pub fn session(&self, user: &str, password: &str) -> SessionConfig {
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(self.config()).unwrap()).unwrap();
        SessionConfig {
            manager: cfg["manager"].as_str().unwrap().into(),
            ca_der: std::fs::read(cfg["ca"].as_str().unwrap()).unwrap(),
            user: user.into(),
            credential: Credential::Password(password.into()),
            signing_key: None,
        }
    }

    pub fn admin_password(&self) -> String {
        std::fs::read_to_string(self.data().join("admin.password")).unwrap()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        for c in &mut self.extra {
            let _ = c.kill();
            let _ = c.wait();
        }
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn rand_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    v
}

pub fn tree_sums(root: &Path) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                out.push((
                    rel,
                    blake3::hash(&std::fs::read(&p).unwrap())
                        .to_hex()
                        .to_string(),
                ));
            }
        }
    }
    out.sort();
    out
}
