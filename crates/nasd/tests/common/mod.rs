//! The black-box cluster harness shared by the test files: a real cluster (manager and drives
//! each their own process, this package's `nasd` binary) started through `nasd-cluster`, the
//! library behind `nasd up`, and driven through the CLI and the client library.
#![allow(dead_code)]

pub mod drive;
pub mod mount;

use nasd_client::session::SessionConfig;
use nasd_cluster::{Cluster, NodeId, Options};
use nasd_proto::manager::Credential;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const NASD: &str = env!("CARGO_BIN_EXE_nasd");

/// A running cluster in a temporary directory; dropping it stops every component.
pub struct Up {
    /// Declared first, so it is dropped (its processes stopped) before the directory goes.
    pub cluster: Cluster,
    pub dir: tempfile::TempDir,
}

impl Up {
    pub fn start(drives: usize) -> Up {
        Up::start_with(Options::drives(drives))
    }

    /// Starts a fresh cluster. Its ports are drawn free and released for the components to
    /// bind, so a cluster that another test process starts at the same moment can take one
    /// first: a start that fails on a taken address is made again on other ports.
    pub fn start_with(options: Options) -> Up {
        for attempt in 1.. {
            let dir = tempfile::tempdir().unwrap();
            if options.meta == nasd_cluster::postgres::Meta::PrivatePostgres {
                // Run as root, PostgreSQL runs as its own account, which must pass through
                // the directories above DATA (docs/postgres.md).
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
                    .unwrap();
            }
            match Cluster::start(Path::new(NASD), &dir.path().join("c"), &options) {
                Ok(cluster) => return Up { cluster, dir },
                Err(e) if attempt < 3 && chain(&e).contains("Address already in use") => {
                    eprintln!("cluster start raced for a port, again: {}", chain(&e));
                }
                Err(e) => panic!("starting the cluster: {}", chain(&e)),
            }
        }
        unreachable!("the loop returns or panics")
    }

    pub fn data(&self) -> PathBuf {
        self.cluster.dir().to_path_buf()
    }

    pub fn config(&self) -> PathBuf {
        self.cluster.config_path()
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

    /// Runs a command with `env` that must succeed; returns its stdout.
    pub fn ok_env(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let o = self.nasd(args, env);
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

    /// The pid of the running component `name` (`manager`, `drive-N`).
    pub fn pid(&self, name: &str) -> u32 {
        let id: NodeId = name.parse().unwrap();
        self.cluster
            .pid(id)
            .unwrap_or_else(|| panic!("{name} is not running"))
    }

    /// Kills component `name` with SIGKILL and waits until it is gone.
    pub fn kill(&mut self, name: &str) {
        let id: NodeId = name.parse().unwrap();
        self.cluster
            .kill(id)
            .unwrap_or_else(|e| panic!("killing {name}: {}", chain(&e)));
    }

    /// Stops component `name` as an operator would (SIGTERM: it flushes and closes its
    /// store) and waits until it is gone.
    pub fn stop(&mut self, name: &str) {
        let id: NodeId = name.parse().unwrap();
        self.cluster
            .stop(id)
            .unwrap_or_else(|e| panic!("stopping {name}: {}", chain(&e)));
    }

    /// Starts component `name` again on its address and data.
    pub fn restart(&mut self, name: &str) {
        let id: NodeId = name.parse().unwrap();
        self.cluster
            .restart(id)
            .unwrap_or_else(|e| panic!("restarting {name}: {}", chain(&e)));
    }

    pub fn session(&self, user: &str, password: &str) -> SessionConfig {
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(self.config()).unwrap()).unwrap();
        SessionConfig {
            manager: serde_json::from_value(cfg["manager"].clone()).unwrap(),
            ca_der: std::fs::read(cfg["ca"].as_str().unwrap()).unwrap(),
            user: user.into(),
            credential: Credential::Password(password.into()),
            signing_key: None,
        }
    }

    /// Adds user `name` with `password` (as the admin, through the CLI: `user add
    /// --password`, which also makes the account's keys and group wraps).
    pub fn add_user(&self, name: &str, password: &str) {
        let o = self.nasd(
            &["user", "add", name, "--password"],
            &[("NASD_NEW_PASSWORD", password)],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    /// A client library connection as the admin.
    pub fn admin_client(
        &self,
        rt: &tokio::runtime::Runtime,
    ) -> std::sync::Arc<nasd_client::files::Client> {
        rt.block_on(nasd_client::files::Client::connect(
            self.session("admin", self.admin_password().trim()),
        ))
        .unwrap()
    }

    pub fn admin_password(&self) -> String {
        std::fs::read_to_string(self.data().join("admin.password")).unwrap()
    }
}

/// Runs `nasd ARGS` as a user would, with HOME `home` and nothing nasd-specific in the
/// environment: (succeeded, stdout, stderr).
pub fn nasd_at_home(home: &Path, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(NASD)
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("NASD_CONFIG")
        .env_remove("NASD_DATA")
        .env_remove("NASD_USER")
        .env_remove("NASD_PASSWORD")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.success(), out, err)
}

/// Runs `nasd ARGS` with no cluster configured (a fresh `HOME`, no `NASD_CONFIG` or
/// `NASD_DATA`), as the benchmarks that start clusters of their own are run; returns its
/// stdout and the JSON object on each line of it, and fails with both outputs if it fails.
pub fn json_lines_of(args: &[&str]) -> (String, Vec<serde_json::Value>) {
    let tmp = tempfile::tempdir().unwrap();
    // The Rust toolchain stays where it is installed (rustup finds it under HOME), for the
    // benches that build a crate.
    let rustup = std::env::var_os("RUSTUP_HOME").or_else(|| {
        let home = std::path::PathBuf::from(std::env::var_os("HOME")?).join(".rustup");
        home.is_dir().then(|| home.into_os_string())
    });
    let o = Command::new(NASD)
        .args(args)
        .envs(rustup.map(|r| ("RUSTUP_HOME", r)))
        .env("HOME", tmp.path())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("NASD_CONFIG")
        .env_remove("NASD_DATA")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out, lines)
}

/// `nasd lab EXPERIMENT --quick --json ARGS`: the JSON object of each line it prints.
pub fn lab_json(experiment: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["lab", experiment, "--quick", "--json"];
    all.extend_from_slice(args);
    json_lines_of(&all).1
}

/// `nasd bench meta --quick --json --duration 0.3 --clients 2 --meta META`: one line per
/// operation, each measured in every round, with positive rates and the manager's CPU per
/// operation; the database's CPU for a private PostgreSQL server only.
pub fn bench_meta_reports_every_operation(meta: &str) {
    let args = [
        "bench",
        "meta",
        "--quick",
        "--json",
        "--duration",
        "0.3",
        "--clients",
        "2",
        "--meta",
        meta,
    ];
    let (out, lines) = json_lines_of(&args);
    let ops: Vec<&str> = lines.iter().map(|c| c["op"].as_str().unwrap()).collect();
    assert_eq!(
        ops,
        ["create", "stat", "open", "rename", "list", "unlink"],
        "{out}"
    );
    for c in &lines {
        assert_eq!(c["rounds"], 3, "{c}");
        assert_eq!(c["clients"], 2, "{c}");
        assert_eq!(c["meta"], meta, "{c}");
        assert!(c["count"].as_u64().unwrap() >= 6, "{c}");
        assert!(c["ops_per_s"].as_f64().unwrap() > 0.0, "{c}");
        assert!(
            c["manager_round_trips_per_op"].as_f64().unwrap() >= 1.0,
            "{c}"
        );
        assert!(c["manager_cpu_us_per_op"].as_f64().is_some(), "{c}");
        assert_eq!(c["db_cpu_us_per_op"].is_number(), meta == "postgres", "{c}");
    }
}

pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

pub fn rand_bytes(n: usize, seed: u64) -> Vec<u8> {
    nasd_cluster::pseudo_random(n, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
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

/// A small deterministic generator (xorshift) for randomized tests: the same seed, the same
/// sequence, so a failure names the seed that reproduces it.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n` (below 1 for 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}
