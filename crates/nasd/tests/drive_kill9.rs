//! `kill -9` of a real drive process in the middle of a stream of writes: after a restart on the
//! same data directory every acknowledged write is intact and verifies, and the one in flight is
//! wholly there or wholly absent.

use nasd_client::{Auth, Capability, DriveConn, Target};
use nasd_crypto::keyfile::KeyFile;
use nasd_proto::{CapabilityArgs, ObjectId, PartitionId, Protection, Region, Rights, Scheme};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const P: PartitionId = PartitionId(1);

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn nasd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nasd"))
}

async fn start(dir: &std::path::Path, port: u16) -> (Proc, DriveConn) {
    let child = nasd()
        .args(["drive", "run", "--data"])
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    for _ in 0..200 {
        if let Ok(c) = DriveConn::connect(&format!("127.0.0.1:{port}")).await {
            return (p, c);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("drive did not start");
}

fn content(seed: u64, n: usize) -> Vec<u8> {
    (0..n).map(|i| (seed as usize * 31 + i * 7) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("drive");
    let st = nasd()
        .args(["drive", "init", "--data"])
        .arg(&dir)
        .args(["--partition", "1"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let pk = KeyFile::decode(&std::fs::read_to_string(dir.join("keys/partition-1.key")).unwrap())
        .unwrap();
    let wk = KeyFile::decode(
        &std::fs::read_to_string(dir.join("keys/partition-1-working.key")).unwrap(),
    )
    .unwrap();
    let port = free_port();

    for round in 0..3u64 {
        let (mut proc_, c) = start(&dir, port).await;
        let t = Target {
            partition: P,
            object: ObjectId(0),
            protection: Protection::INTEGRITY_DATA,
        };
        let scheme = [Scheme::Tree, Scheme::Digest, Scheme::Incremental][round as usize];
        let (o, _) = c
            .create(&Auth::from_key_file(&pk), t, Some(scheme))
            .await
            .unwrap();
        let args = CapabilityArgs {
            drive: wk.drive,
            partition: P,
            object: o,
            region: Region::new(0, u64::MAX),
            rights: Rights::ALL,
            expiry_ms: u64::MAX,
            audit_id: round,
            min_protection: Protection::INTEGRITY_DATA,
            writer_key: None,
        };
        let auth = Auth::Capability(Capability::mint(wk.suite, &wk.key, args, 0, false));
        let t = Target { object: o, ..t };
        // writes of 24 KiB, one region each, to distinct slots; kill at a random moment.
        let slot = 24 * 1024;
        // SIGKILL from another task while writes are in flight: no chance to flush anything.
        let pid = proc_.0.id().to_string();
        let killer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30 + round * 20)).await;
            let _ = Command::new("kill").args(["-9", &pid]).status();
        });
        let mut acked = vec![];
        let mut in_flight = None;
        for i in 0..400u64 {
            match c
                .write(&auth, t, i * slot, &content(i + round * 100, slot as usize))
                .await
            {
                Ok(_) => acked.push(i),
                Err(_) => {
                    in_flight = Some(i);
                    break;
                }
            }
        }
        killer.await.unwrap();
        let _ = proc_.0.wait();
        assert!(in_flight.is_some(), "the drive was killed while writing");
        drop(proc_);
        drop(c);
        let (_p2, c2) = start(&dir, port).await;
        for &i in &acked {
            let r = c2
                .read(&auth, t, vec![Region::new(i * slot, slot)])
                .await
                .expect("acknowledged data reads back verified");
            assert!(
                r.data == content(i + round * 100, slot as usize),
                "round {round}: acknowledged write {i} lost"
            );
        }
        if let Some(i) = in_flight {
            let r = c2
                .read(&auth, t, vec![Region::new(i * slot, slot)])
                .await
                .unwrap();
            assert!(
                r.data.is_empty()
                    || r.data == content(i + round * 100, slot as usize)
                    || r.data.iter().all(|&b| b == 0),
                "round {round}: torn write {i}"
            );
        }
    }
}
