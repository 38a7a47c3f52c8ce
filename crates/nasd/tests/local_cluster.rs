//! `nasd-cluster`, the library behind `nasd up`, against real processes (this package's
//! binary): one drive killed and restarted while a file on it is read before and after, the
//! manager stopped and restarted, a running cluster adopted by a second start, and a dropped
//! handle stopping every process. The tests live here because they need the `nasd` binary,
//! which only this package's tests get from cargo.

mod common;

use common::*;
use nasd_client::files::Client;
use nasd_cluster::{Cluster, NodeId, Options, Pids};
use std::path::Path;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn pids_file(c: &Cluster) -> Vec<(String, u32)> {
    let t = std::fs::read_to_string(Pids::path(c.dir())).unwrap();
    serde_json::from_str::<Pids>(&t).unwrap().pids
}

#[test]
fn a_killed_drive_restarts_and_serves_the_same_file() {
    let mut up = Up::start(3);
    let rt = rt();
    let admin = rt
        .block_on(Client::connect(up.cluster.session_config().unwrap()))
        .unwrap();
    // Plaintext, so the test can find the file's bytes on the drive's disk.
    rt.block_on(admin.layout_set("/", "plain")).unwrap();
    // New files go round robin over the drives: three of them touch each drive once.
    let files: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| (format!("/f{i}"), rand_bytes(300_000 + i, i as u64)))
        .collect();
    for (p, d) in &files {
        rt.block_on(admin.put_bytes(p, d, 0o644)).unwrap();
    }
    let (path, data) = &files[1];
    let addr = rt
        .block_on(admin.open(path, false))
        .unwrap()
        .layout
        .components[0]
        .addr
        .clone();
    let victim = up
        .cluster
        .drive_at(&addr)
        .expect("the file's drive is in the cluster");
    let NodeId::Drive(i) = victim else {
        panic!("{victim} is not a drive")
    };
    // The library says where the drive keeps its data: the file's bytes are in data.blk.
    let blk = std::fs::read(up.cluster.drive_dir(i).unwrap().join("data.blk")).unwrap();
    assert!(
        blk.windows(64).any(|w| w == &data[..64]),
        "the file's bytes are not in {victim}'s data.blk"
    );
    assert_eq!(rt.block_on(admin.get_bytes(path)).unwrap(), *data, "before");

    let pid = up.cluster.pid(victim).unwrap();
    up.cluster.kill(victim).unwrap();
    assert!(!up.cluster.is_running(victim));
    assert!(
        pids_file(&up.cluster).iter().all(|(_, p)| *p != pid),
        "pids.json still lists the killed drive"
    );
    let e = rt.block_on(admin.get_bytes(path)).unwrap_err();
    assert!(e.to_string().contains(&addr), "{e}");
    assert!(
        matches!(up.cluster.kill(victim), Err(nasd_cluster::ClusterError::NodeDown(id)) if id == victim),
        "a second kill of a dead drive is refused"
    );

    up.cluster.restart(victim).unwrap();
    let again = up.cluster.pid(victim).unwrap();
    assert_ne!(again, pid);
    assert!(pids_file(&up.cluster).contains(&(victim.to_string(), again)));
    assert_eq!(rt.block_on(admin.get_bytes(path)).unwrap(), *data, "after");
    // The other files, on drives that never stopped, read as before.
    for (p, d) in &files {
        assert_eq!(rt.block_on(admin.get_bytes(p)).unwrap(), *d, "{p}");
    }
}

#[test]
fn the_manager_stops_and_restarts_with_its_namespace() {
    let mut up = Up::start(1);
    let rt = rt();
    let admin = rt
        .block_on(Client::connect(up.cluster.session_config().unwrap()))
        .unwrap();
    rt.block_on(admin.put_bytes("/kept", b"kept", 0o644))
        .unwrap();
    up.cluster.stop(NodeId::Manager).unwrap();
    assert!(!up.cluster.is_running(NodeId::Manager));
    assert!(
        rt.block_on(Client::connect(up.cluster.session_config().unwrap()))
            .is_err(),
        "a login with the manager stopped"
    );
    up.cluster.restart(NodeId::Manager).unwrap();
    let fresh = rt
        .block_on(Client::connect(up.cluster.session_config().unwrap()))
        .unwrap();
    assert_eq!(rt.block_on(fresh.get_bytes("/kept")).unwrap(), b"kept");
    // A restart of a running component stops it first.
    let before = up.cluster.pid(NodeId::Drive(0)).unwrap();
    up.cluster.restart(NodeId::Drive(0)).unwrap();
    assert_ne!(up.cluster.pid(NodeId::Drive(0)).unwrap(), before);
    assert_eq!(rt.block_on(fresh.get_bytes("/kept")).unwrap(), b"kept");
    assert!(matches!(
        up.cluster.stop(NodeId::Drive(5)),
        Err(nasd_cluster::ClusterError::NoSuchNode(_))
    ));
}

#[test]
fn a_second_start_adopts_a_running_cluster_and_a_drop_stops_every_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let bin = Path::new(NASD);
    let first = Cluster::start(bin, &dir, &Options::drives(2)).unwrap();
    let pids: Vec<u32> = first
        .info()
        .ids()
        .into_iter()
        .map(|id| first.pid(id).unwrap())
        .collect();
    let second = Cluster::start(bin, &dir, &Options::drives(2)).unwrap();
    assert!(!second.started_any(), "the second start started something");
    assert_eq!(second.adopted().len(), 3);
    assert!(second.restarted().is_empty());
    second.detach();
    drop(first);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s
                    .rsplit(')')
                    .next()
                    .unwrap()
                    .trim_start()
                    .starts_with('Z')),
            "pid {pid} still runs after the drop"
        );
    }
    assert!(!Pids::path(&dir).exists(), "pids.json left behind");
    // A third start finds everything down and starts it all again.
    let third = Cluster::start(bin, &dir, &Options::drives(2)).unwrap();
    assert!(third.started_any());
    assert!(third.adopted().is_empty());
}

#[test]
fn a_second_start_restarts_only_a_killed_drive_and_records_every_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let bin = Path::new(NASD);
    let mut first = Cluster::start(bin, &dir, &Options::drives(2)).unwrap();
    let manager = first.pid(NodeId::Manager).unwrap();
    first.kill(NodeId::Drive(1)).unwrap();
    let second = Cluster::start(bin, &dir, &Options::drives(2)).unwrap();
    assert_eq!(second.restarted(), &[NodeId::Drive(1)]);
    assert_eq!(second.adopted().len(), 2);
    let mut names: Vec<String> = pids_file(&second).into_iter().map(|(n, _)| n).collect();
    names.sort();
    assert_eq!(names, ["drive-0", "drive-1", "manager"]);
    assert_eq!(second.pid(NodeId::Manager), Some(manager));
    drop(first);
    drop(second);
}

#[test]
fn a_bad_drive_count_is_refused_before_anything_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    for n in [0, nasd_cluster::DRIVES_MAX + 1] {
        let Err(e) = Cluster::start(Path::new(NASD), &dir, &Options::drives(n)) else {
            panic!("{n} drives accepted");
        };
        assert!(e.to_string().contains("between 1 and"), "{e}");
    }
    assert!(!Cluster::is_initialized(&dir));
}
