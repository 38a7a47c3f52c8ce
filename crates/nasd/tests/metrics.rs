//! Issue 23 §6, the operator's view, on real processes over TCP: `nasd up --background`
//! starts every process with `--metrics` on a port of its own and records where; a copy in
//! and out moves their request counters; every /metrics has the metrics docs/metrics.md
//! names and /health answers ok; a gateway whose manager is gone answers 503 with its
//! reason. A `nasd mount --metrics` is scraped too where this process may mount.

mod common;
use common::mount::{can_mount, mounted, Mounted};
use common::{nasd_at_home, NASD};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `GET path` over a fresh connection: (status, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    if path == "/metrics" && status == 200 {
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4"),
            "{head}"
        );
    }
    (status, body.to_string())
}

/// The sum of the samples of `family` whose labels contain every one of `labels`.
fn sum(text: &str, family: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Every family in `names` has a `# TYPE` line in `text`.
fn has_families(what: &str, text: &str, names: &[&str]) {
    for n in names {
        assert!(
            text.contains(&format!("# TYPE {n} ")),
            "{what}: no {n} in\n{text}"
        );
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

const PER_OP: &[&str] = &[
    "requests_total",
    "errors_total",
    "request_bytes_total",
    "reply_bytes_total",
    "request_duration_seconds",
];

fn per_op(prefix: &str) -> Vec<String> {
    PER_OP.iter().map(|s| format!("{prefix}_{s}")).collect()
}

#[test]
fn every_process_serves_metrics_and_health_and_counts_what_it_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let data = tmp.path().join("c");
    let s3 = free_addr();
    struct Down<'a>(&'a Path, &'a Path);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = nasd_at_home(self.0, &["down", "--data", self.1.to_str().unwrap()]);
        }
    }
    let d = data.to_str().unwrap();
    let (ok, out, err) = nasd_at_home(
        &home,
        &[
            "up",
            "--background",
            "--drives",
            "2",
            "--data",
            d,
            "--s3",
            &s3,
        ],
    );
    let _down = Down(&home, &data);
    assert!(ok, "{out}{err}");

    // Where each process serves its metrics: said by `up`, recorded beside its address.
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("cluster.json")).unwrap()).unwrap();
    let manager = info["manager"]["metrics"].as_str().unwrap().to_string();
    let drives: Vec<String> = info["drives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metrics"].as_str().unwrap().to_string())
        .collect();
    let gateway = std::fs::read_to_string(data.join("s3-gateway.metrics")).unwrap();
    for m in drives.iter().chain([&manager, &gateway]) {
        assert!(
            out.contains(&format!("(metrics http://{m}/metrics)")),
            "{m}: {out}"
        );
        assert_eq!(get(m, "/health"), (200, "ok\n".to_string()), "{m}");
    }

    // Before any file: what the drives served so far (the manager's health checks).
    let writes_before: f64 = drives
        .iter()
        .map(|m| {
            sum(
                &get(m, "/metrics").1,
                "nasd_drive_requests_total",
                &["op=\"write\""],
            )
        })
        .sum();
    let file = tmp.path().join("f");
    let content: Vec<u8> = (0..(3u32 << 20))
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    std::fs::write(&file, &content).unwrap();
    let env = |c: &mut Command| {
        c.env("HOME", &home)
            .env("NASD_CONFIG", data.join("client.json"))
            .env_remove("NASD_USER")
            .env_remove("NASD_PASSWORD");
    };
    let mut cp = Command::new(NASD);
    cp.args(["cp", file.to_str().unwrap(), "nasd:/f"]);
    env(&mut cp);
    let o = cp.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let back = tmp.path().join("back");
    let mut cp = Command::new(NASD);
    cp.args(["cp", "nasd:/f", back.to_str().unwrap()]);
    env(&mut cp);
    let o = cp.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&back).unwrap() == content);

    // The manager: calls counted, by name, with bytes, latency and store time; its gauges.
    let (status, t) = get(&manager, "/metrics");
    assert_eq!(status, 200, "{t}");
    let mut names = per_op("nasd_manager");
    names.extend(
        [
            "nasd_manager_call_store_seconds",
            "nasd_manager_store_wait_seconds",
            "nasd_manager_store_hold_seconds",
            "nasd_manager_write_leases",
            "nasd_manager_lock_sessions",
            "nasd_manager_callbacks",
            "nasd_manager_callback_registrations_total",
            "nasd_manager_callback_breaks_total",
            "nasd_manager_drive_up",
            "nasd_manager_files",
            "nasd_manager_degraded_files",
            "nasd_manager_stale_files",
            "nasd_manager_stale_components",
            "nasd_manager_replace_files_done",
            "nasd_manager_scrub_passes_total",
            "nasd_manager_healthy",
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
        ]
        .map(String::from),
    );
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    has_families("manager", &t, &names);
    for call in ["opaque login start", "create", "open", "commit"] {
        let n = sum(
            &t,
            "nasd_manager_requests_total",
            &[&format!("op=\"{call}\"")],
        );
        assert!(n >= 1.0, "no {call} counted:\n{t}");
    }
    assert!(sum(&t, "nasd_manager_request_bytes_total", &[]) > 0.0);
    assert!(sum(&t, "nasd_manager_request_duration_seconds_count", &[]) >= 3.0);
    assert!(sum(&t, "nasd_manager_call_store_seconds_count", &[]) >= 1.0);
    assert_eq!(sum(&t, "nasd_manager_drive_up", &[]), 2.0, "{t}");
    assert!(sum(&t, "nasd_manager_files", &[]) >= 1.0);
    assert_eq!(sum(&t, "nasd_manager_healthy", &[]), 1.0);

    // The drives: the file's bytes went to one (or both), and came back out.
    let mut writes = 0.0;
    let mut written = 0.0;
    let mut read = 0.0;
    for m in &drives {
        let (status, t) = get(m, "/metrics");
        assert_eq!(status, 200);
        let mut names = per_op("nasd_drive");
        names.extend(
            [
                "nasd_drive_capacity_bytes",
                "nasd_drive_used_bytes",
                "nasd_drive_free_bytes",
                "nasd_drive_objects",
                "nasd_drive_healthy",
            ]
            .map(String::from),
        );
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        has_families("drive", &t, &names);
        assert!(sum(&t, "nasd_drive_capacity_bytes", &[]) > 0.0);
        assert_eq!(sum(&t, "nasd_drive_healthy", &[]), 1.0);
        writes += sum(&t, "nasd_drive_requests_total", &["op=\"write\""]);
        written += sum(&t, "nasd_drive_request_bytes_total", &["op=\"write\""]);
        read += sum(&t, "nasd_drive_reply_bytes_total", &["op=\"read\""]);
    }
    assert!(writes > writes_before, "no write counted");
    assert!(written >= content.len() as f64, "{written}");
    assert!(read >= content.len() as f64, "{read}");

    // The gateway: an unsigned request is refused, and counted with its status.
    let (status, _) = get(&s3, "/");
    assert_eq!(status, 403);
    let (status, t) = get(&gateway, "/metrics");
    assert_eq!(status, 200);
    let names = per_op("nasd_s3");
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    has_families("gateway", &t, &names);
    assert!(
        sum(&t, "nasd_s3_requests_total", &["op=\"ListBuckets\""]) >= 1.0,
        "{t}"
    );
    assert!(
        sum(&t, "nasd_s3_errors_total", &["status=\"403\""]) >= 1.0,
        "{t}"
    );

    if can_mount() {
        mount_is_counted(tmp.path(), &data);
    }

    // Malformed requests to a metrics port are refused; the server goes on.
    let mut s = std::net::TcpStream::connect(&manager).unwrap();
    s.write_all(b"BREW /metrics HTCPCP/1.0\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");

    // With the manager gone, the gateway cannot serve, and says so.
    let pids: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("pids.json")).unwrap()).unwrap();
    let manager_pid = pids["pids"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p[0] == "manager")
        .unwrap()[1]
        .as_u64()
        .unwrap();
    // SAFETY: kill(2) of the manager this test started.
    assert_eq!(unsafe { libc::kill(manager_pid as i32, libc::SIGKILL) }, 0);
    let t0 = Instant::now();
    loop {
        let (status, body) = get(&gateway, "/health");
        if status == 503 {
            assert!(body.starts_with("unhealthy: "), "{body}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{status} {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The drives do not need the manager to be healthy.
    for m in &drives {
        assert_eq!(get(m, "/health").0, 200);
    }
}

/// `nasd mount --metrics`: a file written and read through the kernel moves the mount's
/// counters.
fn mount_is_counted(tmp: &Path, data: &Path) {
    let dir = tmp.join("mnt");
    std::fs::create_dir_all(&dir).unwrap();
    let addr = free_addr();
    let child = Command::new(NASD)
        .args(["mount", "--metrics", &addr, "nasd:/"])
        .arg(&dir)
        .env("NASD_CONFIG", data.join("client.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let m = Mounted {
        child,
        dir: dir.clone(),
    };
    let t0 = Instant::now();
    while !mounted(&dir) {
        assert!(t0.elapsed() < Duration::from_secs(30), "not mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let bytes = vec![42u8; 200_000];
    std::fs::write(dir.join("through-the-mount"), &bytes).unwrap();
    assert!(std::fs::read(dir.join("through-the-mount")).unwrap() == bytes);
    assert!(std::fs::metadata(dir.join("not-there")).is_err());
    let (status, t) = get(&addr, "/metrics");
    assert_eq!(status, 200);
    let names = per_op("nasd_mount");
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    has_families("mount", &t, &names);
    for op in ["lookup", "create", "write", "flush"] {
        let n = sum(&t, "nasd_mount_requests_total", &[&format!("op=\"{op}\"")]);
        assert!(n >= 1.0, "no {op} counted:\n{t}");
    }
    assert!(sum(&t, "nasd_mount_request_bytes_total", &["op=\"write\""]) >= 200_000.0);
    assert!(
        sum(
            &t,
            "nasd_mount_errors_total",
            &["op=\"lookup\"", "status=\"ENOENT\""]
        ) >= 1.0,
        "{t}"
    );
    assert_eq!(get(&addr, "/health"), (200, "ok\n".to_string()));
    drop(m);
}
