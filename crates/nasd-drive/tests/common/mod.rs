//! A drive on loopback for black-box tests: real files in a temp dir, a real TCP listener,
//! the real client library.

#![allow(dead_code)]

use nasd_client::{Auth, Capability, DriveConn, Target};
use nasd_crypto::keyfile::KeyFile;
use nasd_drive::{init, Drive, InitOptions};
use nasd_proto::{CapabilityArgs, ObjectId, PartitionId, Protection, Region, Rights, Scheme};
use std::sync::Arc;

pub const P: PartitionId = PartitionId(1);

pub struct TestDrive {
    pub dir: tempfile::TempDir,
    pub drive: Arc<Drive>,
    pub addr: String,
    pub partition_key: KeyFile,
    pub working_key: KeyFile,
    pub drive_key: KeyFile,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

pub fn load(path: &std::path::Path) -> KeyFile {
    KeyFile::decode(&std::fs::read_to_string(path).unwrap()).unwrap()
}

impl TestDrive {
    pub async fn start() -> TestDrive {
        Self::start_with(|_| {}).await
    }

    /// A drive without a block cache, for tests that change bytes under a running drive: a
    /// cache would (rightly) go on serving its checked copy and hide the change from them.
    pub async fn start_uncached() -> TestDrive {
        Self::start_with_options(
            |_| {},
            nasd_drive::DriveOptions {
                cache_bytes: 0,
                ..Default::default()
            },
        )
        .await
    }

    pub async fn start_with(f: impl FnOnce(&mut InitOptions)) -> TestDrive {
        Self::start_with_options(f, Default::default()).await
    }

    pub async fn start_with_options(
        f: impl FnOnce(&mut InitOptions),
        options: nasd_drive::DriveOptions,
    ) -> TestDrive {
        let dir = tempfile::tempdir().unwrap();
        let mut o = InitOptions::new(dir.path().join("drive"));
        o.partition = Some(P);
        o.min_protection = Protection::NONE;
        o.capacity_bytes = Some(1 << 30);
        f(&mut o);
        let r = init(&o).unwrap();
        let drive = Drive::open_with_options(&o.data_dir, None, options).unwrap();
        Self::serve(
            dir,
            drive,
            &r.drive_key_file,
            &r.partition_key_file.unwrap(),
            &r.working_key_file.unwrap(),
        )
        .await
    }

    pub async fn serve(
        dir: tempfile::TempDir,
        drive: Arc<Drive>,
        dk: &std::path::Path,
        pk: &std::path::Path,
        wk: &std::path::Path,
    ) -> TestDrive {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let d = drive.clone();
        let server = tokio::spawn(async move {
            nasd_drive::serve(d, listener, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        TestDrive {
            dir,
            drive,
            addr,
            partition_key: load(pk),
            working_key: load(wk),
            drive_key: load(dk),
            stop: Some(stop),
            server: Some(server),
        }
    }

    pub async fn stop(mut self) -> (tempfile::TempDir, Arc<Drive>) {
        let _ = self.stop.take().unwrap().send(());
        self.server.take().unwrap().await.unwrap();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        (dir, self.drive.clone())
    }

    pub async fn conn(&self) -> DriveConn {
        DriveConn::connect(&self.addr).await.unwrap()
    }

    pub fn partition_auth(&self) -> Auth {
        Auth::from_key_file(&self.partition_key)
    }
    pub fn drive_auth(&self) -> Auth {
        Auth::from_key_file(&self.drive_key)
    }

    pub fn cap_args(&self, object: ObjectId, rights: Rights) -> CapabilityArgs {
        CapabilityArgs {
            drive: self.working_key.drive,
            partition: P,
            object,
            region: Region::new(0, u64::MAX),
            rights,
            expiry_ms: (nasd_drive::now_us() / 1000) + 600_000,
            audit_id: 77,
            min_protection: Protection::NONE,
            writer_key: None,
        }
    }

    pub fn mint(&self, args: CapabilityArgs, acv: u64) -> Auth {
        Auth::Capability(Capability::mint(
            self.working_key.suite,
            &self.working_key.key,
            args,
            acv,
            false,
        ))
    }

    /// Creates an object with the partition key.
    pub async fn create(&self, conn: &DriveConn, scheme: Scheme) -> ObjectId {
        let t = Target {
            partition: P,
            object: ObjectId(0),
            protection: Protection::INTEGRITY_ARGS,
        };
        conn.create(&self.partition_auth(), t, Some(scheme))
            .await
            .unwrap()
            .0
    }
}

pub fn target(o: ObjectId, p: Protection) -> Target {
    Target {
        partition: P,
        object: o,
        protection: p,
    }
}

/// Deterministic pseudo-random bytes.
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
