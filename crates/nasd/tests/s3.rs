//! The S3 gateway against a real cluster, through real S3 clients: `nasd up --s3` on a
//! running cluster, users with access keys, then boto3 (tests/s3/s3_client.py: objects,
//! listings checked against an oracle, multipart uploads, conditional requests, checksums,
//! presigned URLs, and the error cases) and the AWS CLI (multipart copies, sync). Then the
//! faults: acknowledged objects survive a gateway killed with SIGKILL, a restarted drive and
//! a restarted manager; 10,000 idle connections and hostile peers leave it serving.
//!
//! Needs python3 with boto3 and the AWS CLI (`.ci/run` installs them with pip).

mod common;
use common::*;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/s3/s3_client.py");

/// A cluster with the gateway `nasd up --s3` started beside it, users alice and bob with
/// access keys, and buckets striped rs:2+1. Dropping it kills the gateway and the cluster.
struct S3 {
    up: Up,
    addr: String,
    env: Vec<(String, String)>,
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn python_ready() {
    let ok = Command::new("python3")
        .args(["-c", "import boto3"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "python3 with boto3 is needed (pip install boto3 awscli)"
    );
}

impl S3 {
    fn start() -> S3 {
        python_ready();
        let up = Up::start(3);
        let mut s3 = S3 {
            addr: free_addr(),
            up,
            env: vec![],
        };
        s3.start_gateway();
        s3.up.ok(&["layout", "set", "/s3", "rs:2+1"]);
        for user in ["alice", "bob"] {
            s3.up.add_user(user, &format!("{user}-pw"));
            let out = s3.up.ok(&["user", "s3-key", "create", user, "--json"]);
            let k: serde_json::Value = serde_json::from_str(&out).unwrap();
            let u = user.to_uppercase();
            s3.env.push((
                format!("{u}_KEY"),
                k["access_key_id"].as_str().unwrap().into(),
            ));
            s3.env.push((
                format!("{u}_SECRET"),
                k["secret_access_key"].as_str().unwrap().into(),
            ));
        }
        s3.env
            .push(("S3_ENDPOINT".into(), format!("http://{}", s3.addr)));
        s3
    }

    /// `nasd up --s3` on the running cluster: every component is up already, so it only
    /// prepares the cluster for S3 (the first time) and starts the gateway.
    fn start_gateway(&self) {
        let xdg = self.up.dir.path().join("xdg");
        let o = Command::new(NASD)
            .args(["up", "--background", "--s3", &self.addr, "--data"])
            .arg(self.up.data())
            .env("XDG_CONFIG_HOME", &xdg)
            .env_remove("NASD_CONFIG")
            .env_remove("NASD_DATA")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "nasd up --s3: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("every component was already running"), "{out}");
        assert!(
            out.contains(&format!("s3       http://{}", self.addr)),
            "{out}"
        );
    }

    fn gateway_pid(&self) -> i32 {
        std::fs::read_to_string(self.up.data().join("s3-gateway.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn kill_gateway(&self) {
        let pid = self.gateway_pid();
        // SAFETY: kill(2) on the gateway this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        while std::path::Path::new(&format!("/proc/{pid}/status")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/status"))
                .unwrap_or_default()
                .contains("State:\tZ")
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Runs the boto3 client script; its stdout. `input` goes to its stdin.
    fn client(&self, args: &[&str], input: &str) -> String {
        let mut c = Command::new("python3");
        c.arg(CLIENT)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "s3_client.py {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// Runs `aws --endpoint-url … ARGS` as alice.
    fn aws(&self, args: &[&str]) -> String {
        let get = |k: &str| self.env.iter().find(|(n, _)| n == k).unwrap().1.clone();
        let o = Command::new("aws")
            .args(["--endpoint-url", &format!("http://{}", self.addr)])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", get("ALICE_KEY"))
            .env("AWS_SECRET_ACCESS_KEY", get("ALICE_SECRET"))
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .output()
            .expect("the AWS CLI is needed (pip install awscli)");
        assert!(
            o.status.success(),
            "aws {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        if let Ok(s) = std::fs::read_to_string(self.up.data().join("s3-gateway.pid")) {
            if let Ok(pid) = s.trim().parse::<i32>() {
                // SAFETY: kill(2) on the gateway this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

#[test]
fn boto3_gets_what_it_puts_and_every_error_case_is_an_s3_error() {
    let s3 = S3::start();
    let out = s3.client(&["all"], "");
    for part in [
        "objects ok",
        "listing ok",
        "multipart ok",
        "errors ok",
        "hostile ok",
    ] {
        assert!(out.contains(part), "{out}");
    }
    // The objects are files of the namespace, seen by every client: the bucket is a
    // directory, the key a path, the ETag an extended attribute.
    let ls = s3.up.ok(&["ls", "nasd:/s3/objects/a/b"]);
    assert!(ls.contains("hello.txt"), "{ls}");
    assert_eq!(s3.up.ok(&["cat", "nasd:/s3/objects/a/b/hello.txt"]), "v2");
}

#[test]
fn the_aws_cli_copies_syncs_lists_and_removes() {
    let s3 = S3::start();
    let dir = tempfile::tempdir().unwrap();
    // Past the CLI's 8 MiB threshold: a multipart upload and a ranged, parallel download.
    let big = rand_bytes(20 << 20, 5);
    std::fs::write(dir.path().join("big"), &big).unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("x/y z")).unwrap();
    std::fs::write(tree.join("x/a"), b"a").unwrap();
    std::fs::write(tree.join("x/y z/ü b"), b"b").unwrap();
    let p = |x: &PathBuf| x.to_str().unwrap().to_string();
    s3.aws(&["s3", "mb", "s3://cli"]);
    s3.aws(&[
        "s3",
        "cp",
        "--only-show-errors",
        &p(&dir.path().join("big")),
        "s3://cli/d/big",
    ]);
    s3.aws(&[
        "s3",
        "cp",
        "--only-show-errors",
        "s3://cli/d/big",
        &p(&dir.path().join("back")),
    ]);
    assert!(std::fs::read(dir.path().join("back")).unwrap() == big);
    let head = s3.aws(&["s3api", "head-object", "--bucket", "cli", "--key", "d/big"]);
    assert!(head.contains("-3\\\""), "a multipart ETag: {head}");
    s3.aws(&[
        "s3",
        "sync",
        "--only-show-errors",
        &p(&tree),
        "s3://cli/tree",
    ]);
    let ls = s3.aws(&["s3", "ls", "--recursive", "s3://cli/"]);
    for k in ["d/big", "tree/x/a", "tree/x/y z/ü b"] {
        assert!(ls.contains(k), "{k} missing from {ls}");
    }
    // A second sync has nothing to copy.
    assert_eq!(
        s3.aws(&[
            "s3",
            "sync",
            "--only-show-errors",
            &p(&tree),
            "s3://cli/tree"
        ]),
        ""
    );
    s3.aws(&[
        "s3",
        "sync",
        "--only-show-errors",
        "s3://cli/tree",
        &p(&dir.path().join("down")),
    ]);
    assert_eq!(
        std::fs::read(dir.path().join("down/x/y z/ü b")).unwrap(),
        b"b"
    );
    s3.aws(&["s3", "rm", "--only-show-errors", "--recursive", "s3://cli/"]);
    s3.aws(&["s3", "rb", "s3://cli"]);
    assert!(!s3.up.ok(&["ls", "nasd:/s3"]).contains("cli"));
}

#[test]
fn acknowledged_objects_survive_a_killed_gateway_and_restarted_drives_and_manager() {
    let mut s3 = S3::start();
    let acked = s3.client(&["put-durable", "6"], "");
    assert_eq!(acked.lines().count(), 6, "{acked}");
    s3.kill_gateway();
    s3.start_gateway();
    s3.client(&["check-durable"], &acked);
    // Reads keep working across a drive restart and a manager restart (the gateway's
    // sessions and capabilities are renewed as needed).
    s3.up.stop("drive-1");
    s3.up.restart("drive-1");
    s3.client(&["check-durable"], &acked);
    s3.up.stop("manager");
    s3.up.restart("manager");
    s3.client(&["check-durable"], &acked);
    let more = s3.client(&["put-durable", "2"], "");
    s3.client(&["check-durable"], &more);
}

#[test]
fn ten_thousand_idle_connections_do_not_stop_the_gateway() {
    let s3 = S3::start();
    let idle: Vec<_> = (0..10_000)
        .map_while(|_| std::net::TcpStream::connect(&s3.addr).ok())
        .collect();
    assert_eq!(idle.len(), 10_000, "connections refused");
    // A half-sent request among them.
    let mut slow = std::net::TcpStream::connect(&s3.addr).unwrap();
    slow.write_all(b"GET /s3 HTTP/1.1\r\nHost: x\r\n").unwrap();
    let acked = s3.client(&["put-durable", "1"], "");
    s3.client(&["check-durable"], &acked);
    drop(idle);
    s3.client(&["check-durable"], &acked);
}
