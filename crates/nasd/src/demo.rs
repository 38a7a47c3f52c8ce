//! `nasd demo`: a self-contained tour. Starts a cluster (manager + 6 drives, each its own
//! process) in a temporary directory, copies a directory tree in, reads it back and checks
//! every byte, shows a revoked capability refused by the drive, a block tampered with on a
//! drive's disk detected, prints throughput, then shows an erasure-coded file (`rs:4+2`, the
//! cluster's default at six drives) read whole while two of its drives are killed mid-read,
//! and a shard corrupted on disk read around and repaired. Exits 0 only if every step held.

use crate::cmd_cp::{download, upload};
use anyhow::{bail, Context as _};
use nasd_client::files::Client;
use nasd_client::session::SessionConfig;
use nasd_client::DriveConn;
use nasd_cluster::{Cluster, NodeId, Options};
use nasd_proto::manager::calls;
use nasd_proto::manager::{Credential, MgrStatus};
use nasd_proto::{Region, Status};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

fn rand_bytes(n: usize, seed: u64) -> Vec<u8> {
    nasd_cluster::pseudo_random(n, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// A 32-byte run from the middle of each non-empty file under `root`.
fn plaintext_samples(root: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut out = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
                continue;
            }
            let b = std::fs::read(e.path())?;
            if b.len() >= 32 {
                let at = b.len() / 2 - 16;
                out.push(b[at..at + 32].to_vec());
            }
        }
    }
    Ok(out)
}

/// The first file under `dir` that holds any of `needles`.
fn files_holding_any(
    dir: &Path,
    needles: &[Vec<u8>],
) -> anyhow::Result<Option<std::path::PathBuf>> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                let b = std::fs::read(e.path())?;
                if needles
                    .iter()
                    .any(|n| memchr::memmem::find(&b, n).is_some())
                {
                    return Ok(Some(e.path()));
                }
            }
        }
    }
    Ok(None)
}

/// Writes a small tree; returns relative path -> BLAKE3 of its contents.
fn make_tree(root: &Path) -> anyhow::Result<BTreeMap<String, blake3::Hash>> {
    let mut sums = BTreeMap::new();
    let files: &[(&str, usize)] = &[
        ("README.txt", 300),
        ("empty", 0),
        ("docs/notes.md", 5_000),
        ("docs/deep/er/leaf.bin", 70_000),
        ("data/small-0.bin", 4096),
        ("data/small-1.bin", 4097),
        ("data/one-mib.bin", 1 << 20),
        ("data/big.bin", 9 << 20),
    ];
    for (i, (rel, n)) in files.iter().enumerate() {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("has a parent"))?;
        let d = rand_bytes(*n, i as u64 + 1);
        std::fs::write(&p, &d)?;
        sums.insert(rel.to_string(), blake3::hash(&d));
    }
    Ok(sums)
}

fn check_tree(root: &Path, sums: &BTreeMap<String, blake3::Hash>) -> anyhow::Result<()> {
    for (rel, h) in sums {
        let d = std::fs::read(root.join(rel)).with_context(|| format!("reading back {rel}"))?;
        if blake3::hash(&d) != *h {
            bail!("{rel}: read back differs from what was written");
        }
    }
    Ok(())
}

/// Drives the demo starts: enough for `rs:4+2`, which survives two lost drives.
const DEMO_DRIVES: usize = 6;

fn step(n: u32, text: &str) {
    println!("[{n}] {text}");
}

pub fn run() -> anyhow::Result<()> {
    let t_all = Instant::now();
    let tmp = tempfile::tempdir()?;
    let rt = crate::runtime()?;
    let mut cluster = crate::cmd_up::start(
        &tmp.path().join("cluster"),
        &Options::drives(DEMO_DRIVES),
        false,
    )?;
    step(
        1,
        &format!(
            "started a cluster in {}: manager {} and {} drives, each its own process",
            cluster.dir().display(),
            cluster.manager_addr(),
            cluster.drives().len()
        ),
    );
    let result = rt.block_on(tour(&mut cluster, tmp.path()));
    drop(cluster);
    match result {
        Ok(()) => {
            println!(
                "demo passed: every step held ({:.1} s)",
                t_all.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Err(e) => Err(e.context("demo failed")),
    }
}

async fn tour(cluster: &mut Cluster, tmp: &Path) -> anyhow::Result<()> {
    let admin = Client::connect(cluster.session_config()?).await?;
    // Steps 2-5 show one object per file; the erasure-coded default comes in steps 6-7.
    admin.mkdir("/demo", 0o755).await?;
    admin.layout_set("/demo", "single").await?;

    // 2. A tree in and out, every byte checked.
    let src = tmp.join("tree");
    let sums = make_tree(&src)?;
    let t0 = Instant::now();
    let bytes = upload(&admin, &src, "/demo", true).await?;
    let back = tmp.join("back");
    download(&admin, "/demo", &back, true).await?;
    check_tree(&back, &sums)?;
    let secs = t0.elapsed().as_secs_f64();
    // Encrypted by the client: no 32-byte run of any file's content is on any disk.
    let samples = plaintext_samples(&src)?;
    if let Some(p) = files_holding_any(cluster.dir(), &samples)? {
        bail!("plaintext of the tree is on disk in {}", p.display());
    }
    step(
        2,
        &format!(
            "copied a tree of {} files ({:.1} MiB) to nasd:/demo and back in {secs:.2} s; every checksum matches, and no drive's or the manager's file holds a byte run of their plaintext (encrypted by the client, HCTR2 per 64 KiB block)",
            sums.len(),
            bytes as f64 / (1 << 20) as f64,
        ),
    );

    // 3. Revocation: alice holds a read capability; the owner's chmod bumps the object's
    //    access_control_version and the drive refuses the old capability.
    admin.add_user_enrolled("alice", "alice-pw", false).await?;
    admin
        .put_bytes("/demo/shared.txt", b"for alice's eyes until chmod\n", 0o644)
        .await?;
    let mut cfg: SessionConfig = cluster.session_config()?;
    cfg.user = "alice".into();
    cfg.credential = Credential::Password("alice-pw".into());
    let alice = Client::connect(cfg).await?;
    if alice.get_bytes("/demo/shared.txt").await? != b"for alice's eyes until chmod\n" {
        bail!("alice read the wrong bytes before the chmod");
    }
    let grant = alice.open("/demo/shared.txt", false).await?;
    let (addr, t, auth) = grant.component(0).context("the file has no component")?;
    let conn = DriveConn::connect(addr).await?;
    let before = conn.read(&auth, t, vec![Region::new(0, 100)]).await?;
    // What the drive holds is ciphertext: alice's client deciphered it above.
    if before.data.is_empty() || before.data.starts_with(b"for alice") {
        bail!("the drive holds the file's plaintext");
    }
    admin.chmod("/demo/shared.txt", 0o600).await?;
    match conn.read(&auth, t, vec![Region::new(0, 100)]).await {
        Err(e) if e.status() == Some(Status::BadDigest) => {}
        Err(e) => bail!("the revoked capability was refused for the wrong reason: {e}"),
        Ok(_) => bail!("the drive accepted a revoked capability"),
    }
    match alice.read_at("/demo/shared.txt", 0, 100).await {
        Err(e) if e.status() == Some(MgrStatus::PermissionDenied) => {}
        Err(e) => bail!("alice's fresh request failed for the wrong reason: {e}"),
        Ok(_) => bail!("alice read a file she may no longer read"),
    }
    step(3, "alice's read capability worked, then chmod 600 revoked it: the drive refused the old capability (digest does not verify) and the manager refused a new one");

    // 4. Tamper with a block on a drive's disk; the read is refused, no bad byte returned.
    //    The file is encrypted: its bytes on the disk are the drive's object, read raw.
    let mut victim = rand_bytes(64, 4242);
    victim.extend(rand_bytes(64 << 10, 4243));
    admin.put_bytes("/demo/victim.bin", &victim, 0o644).await?;
    let g = admin.open("/demo/victim.bin", false).await?;
    let (vaddr, vt, vauth) = g.component(0).context("the victim has no component")?;
    let marker = DriveConn::connect(vaddr)
        .await?
        .read(&vauth, vt, vec![Region::new(0, 64)])
        .await?
        .data;
    let node = cluster
        .drive_at(&g.layout.components[0].addr)
        .context("the victim's drive is not in the cluster")?;
    let blk = cluster.node(node)?.dir.join("data.blk");
    let disk = std::fs::read(&blk).with_context(|| format!("reading {}", blk.display()))?;
    let at = disk
        .windows(marker.len())
        .position(|w| w == marker.as_slice())
        .context("the victim's bytes were not found on the drive's disk")?;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&blk)?;
        let pos = (at + 1000) as u64;
        f.write_all_at(&[disk[at + 1000] ^ 0x5a], pos)?;
        f.sync_all()?;
    }
    match admin.get_bytes("/demo/victim.bin").await {
        Err(e) => step(
            4,
            &format!(
                "flipped one byte of the file on the drive's disk: the read was refused ({e})"
            ),
        ),
        Ok(d) if d == victim => {
            bail!("a tampered block was read back unchanged: the tamper missed")
        }
        Ok(_) => bail!("a tampered block was returned to the client"),
    }

    // 5. Throughput through the client (put then get of one 32 MiB file).
    let big = rand_bytes(32 << 20, 99);
    let t0 = Instant::now();
    admin.put_bytes("/demo/throughput.bin", &big, 0o644).await?;
    let put_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let back = admin.get_bytes("/demo/throughput.bin").await?;
    let get_s = t0.elapsed().as_secs_f64();
    if back != big {
        bail!("the 32 MiB file read back differs");
    }
    step(
        5,
        &format!(
            "throughput of one 32 MiB file: put {:.0} MiB/s, get {:.0} MiB/s (verified reads, integrity-data protection)",
            32.0 / put_s,
            32.0 / get_s
        ),
    );
    let _ = Arc::strong_count(&admin);
    erasure_coded(cluster, &admin).await
}

/// The drive holding component `k` of `path`.
async fn drive_of(
    cluster: &Cluster,
    admin: &Client,
    path: &str,
    k: usize,
) -> anyhow::Result<NodeId> {
    let g = admin.open(path, false).await?;
    let c = g.layout.components.get(k).context("no such component")?;
    cluster
        .drive_at(&c.addr)
        .context("a component's drive is not in the cluster")
}

async fn erasure_coded(cluster: &mut Cluster, admin: &Arc<Client>) -> anyhow::Result<()> {
    // 6. Two drives killed while a 48 MiB rs:4+2 file is being read.
    admin.mkdir("/ec", 0o755).await?;
    let spec = admin.layout_get("/ec").await?;
    let layout = spec.split(',').next().unwrap_or(&spec).to_string();
    let big = rand_bytes(48 << 20, 7);
    admin.put_bytes("/ec/big.bin", &big, 0o644).await?;
    let victims = [
        drive_of(cluster, admin, "/ec/big.bin", 0).await?,
        drive_of(cluster, admin, "/ec/big.bin", 1).await?,
    ];
    let reader = {
        let admin = admin.clone();
        tokio::spawn(async move { admin.get_bytes("/ec/big.bin").await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    for v in victims {
        cluster.kill(v)?;
    }
    let back = reader.await??;
    if back != big {
        bail!("the read during the kill returned wrong bytes");
    }
    let again = admin.get_bytes("/ec/big.bin").await?;
    if again != big {
        bail!("the read with two drives gone returned wrong bytes");
    }
    step(
        6,
        &format!(
            "a 48 MiB file of layout {layout} was read whole while two of its drives were killed (kill -9) mid-read, and again with them gone: every byte right"
        ),
    );
    for v in victims {
        cluster.restart(v)?;
    }
    // This client reads around a drive that failed for a while (the pool's down marker);
    // let it lapse so the restarted drives count again.
    tokio::time::sleep(std::time::Duration::from_millis(
        nasd_client::pool::DOWN_FOR_MS + 500,
    ))
    .await;

    // 7. A data shard corrupted on its drive's disk: read around and rewritten. Data unit
    //    2 of the first stripe is component 2's first 64 KiB (ciphertext: read it raw).
    let victim = rand_bytes(256 << 10, 78);
    admin.put_bytes("/ec/victim.bin", &victim, 0o644).await?;
    let g = admin.open("/ec/victim.bin", false).await?;
    let (saddr, st, sauth) = g.component(2).context("the victim has no component 2")?;
    let marker = DriveConn::connect(saddr)
        .await?
        .read(&sauth, st, vec![Region::new(0, 64)])
        .await?
        .data;
    let node = drive_of(cluster, admin, "/ec/victim.bin", 2).await?;
    let blk = cluster.node(node)?.dir.join("data.blk");
    let disk = std::fs::read(&blk).with_context(|| format!("reading {}", blk.display()))?;
    let at = disk
        .windows(marker.len())
        .position(|w| w == marker.as_slice())
        .context("the shard's bytes were not found on the drive's disk")?;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&blk)?;
        f.write_all_at(&[disk[at + 1000] ^ 0x5a], (at + 1000) as u64)?;
        f.sync_all()?;
    }
    if admin.get_bytes("/ec/victim.bin").await? != victim {
        bail!("a read around a corrupt shard returned wrong bytes");
    }
    // The read reported the damage; the manager rewrites it (read repair). A scrub confirms.
    let t0 = Instant::now();
    loop {
        let scrub = calls::Scrub {
            path: "/ec/victim.bin".into(),
            repair: false,
        };
        let r = admin.call("/ec/victim.bin", scrub).await?;
        if r.damaged == 0 && r.unrecoverable == 0 {
            break;
        }
        if t0.elapsed().as_secs() >= 5 {
            bail!("the corrupt shard was not repaired: {}", r.detail);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    step(
        7,
        "flipped one byte of a data shard on its drive's disk: the drive's tree refused it, the client rebuilt the bytes from the other shards, and the manager rewrote the shard (a scrub finds every shard whole)",
    );
    Ok(())
}
