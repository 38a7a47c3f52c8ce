//! `nasd drive init|run|info`, `nasd partition ...` and `nasd key rotate`.

use crate::cmd_obj::save_key_file;
use crate::parse;
use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use nasd_client::auth::load_key_file;
use nasd_client::object::Target;
use nasd_client::{Auth, DriveConn};
use nasd_crypto::keyfile::KeyFile;
use nasd_crypto::Key;
use nasd_proto::{KeyType, ObjectId, OpCode, PartitionId, Protection, Scheme, Suite};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Subcommand, Debug)]
pub enum DriveCmd {
    /// Rebuild every component held by drive OLD onto drive NEW (ids as `nasd status` prints
    /// them, or addresses), in the background on the manager, with a progress bar; reads and
    /// writes go on meanwhile. Admins only.
    Replace {
        old: String,
        new: String,
        /// Return once the manager has started (progress: `nasd status`).
        #[arg(long)]
        no_wait: bool,
    },
    /// Create a drive in DIR: master key (from --master-key or generated), drive key, and with
    /// --partition a partition with its partition and working key files under DIR/keys/.
    Init {
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        #[arg(long)]
        partition: Option<u16>,
        /// Master key file to use (default: generate one into DIR/keys/, mode 0600).
        #[arg(long, value_name = "FILE")]
        master_key: Option<PathBuf>,
        #[arg(long, value_parser = parse::suite, default_value = "blake3")]
        suite: Suite,
        /// Bytes the drive may hold (default: the file system's free space).
        #[arg(long, value_parser = parse::bytes)]
        capacity: Option<u64>,
        /// Quota of the --partition (default: the whole capacity).
        #[arg(long, value_parser = parse::bytes)]
        quota: Option<u64>,
        /// The drive's minimum protection (seed 002 Table 7; default: the drive's, integrity-args).
        #[arg(long, value_parser = parse::protection)]
        min_protection: Option<Protection>,
        /// Default integrity scheme of the --partition's objects.
        #[arg(long, value_parser = parse::scheme, default_value = "tree")]
        scheme: Scheme,
        /// Seal the key hierarchy in the drive's metadata under a passphrase ($NASD_DRIVE_PASSPHRASE,
        /// --passphrase-file, or asked); the drive then needs it to start.
        #[arg(long)]
        seal_keys: bool,
        #[command(flatten)]
        passphrase: PassphraseArgs,
    },
    /// Serve the drive in DIR on ADDR until SIGTERM or ctrl-c.
    Run {
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// HOST:PORT; port 0 picks a free one (printed on stdout).
        #[arg(long, value_name = "ADDR")]
        listen: String,
        /// For a drive with sealed keys.
        #[command(flatten)]
        passphrase: PassphraseArgs,
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        metrics: crate::metrics::MetricsArgs,
    },
    /// Seal the keys of a stopped drive under a passphrase, or change the passphrase of a sealed
    /// one (the new one from $NASD_DRIVE_NEW_PASSPHRASE, --new-passphrase-file, or asked).
    Seal {
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// The current passphrase, for a drive already sealed.
        #[command(flatten)]
        passphrase: PassphraseArgs,
        #[arg(long, value_name = "FILE")]
        new_passphrase_file: Option<PathBuf>,
    },
    /// Ask a drive what it is (inquiry, seed 002 Table 3).
    Info(AdminArgs),
}

/// Run-time options of `nasd drive run`: the block cache, the `prefetch` extension (seed 002
/// §4.6), and a slow and cold disk for experiments.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Bytes of the block cache (0: none, and no prefetch extension).
    #[arg(long, value_parser = parse::bytes, default_value_t = nasd_drive::cache::CACHE_BYTES_DEFAULT)]
    pub cache_bytes: u64,
    /// Keep blocks that reads used part of in the cache (off by default: a cached copy would
    /// hide at-rest damage from rereads such as the scrub's until it leaves the cache).
    #[arg(long)]
    pub cache_reads: bool,
    /// Serve no extension: the Drive Control object lists none.
    #[arg(long)]
    pub no_prefetch: bool,
    /// Bytes one hint stream may hold fetched ahead and not yet consumed.
    #[arg(long, value_parser = parse::bytes, default_value_t = nasd_drive::prefetch::AHEAD_BYTES_DEFAULT)]
    pub prefetch_ahead_bytes: u64,
    /// Prefetch reads in flight, drive-wide (fetcher threads).
    #[arg(long, default_value_t = nasd_drive::prefetch::FETCHERS_DEFAULT)]
    pub fetchers: usize,
    /// Experiments: wait this long before every data read (a simulated seek), milliseconds.
    #[arg(long, default_value_t = 0)]
    pub seek_ms: u64,
    /// Experiments: reads that may wait for a seek at once (simulated disks).
    #[arg(long, default_value_t = nasd_drive::options::SPINDLES_DEFAULT)]
    pub spindles: usize,
    /// Experiments: drop every data read's bytes from the page cache after it (cold reads).
    #[arg(long)]
    pub cold: bool,
}

impl RunArgs {
    pub fn options(&self) -> anyhow::Result<nasd_drive::DriveOptions> {
        use nasd_drive::{prefetch, storage};
        anyhow::ensure!(
            self.cache_bytes <= nasd_drive::cache::CACHE_BYTES_MAX,
            "--cache-bytes is at most {}",
            nasd_drive::cache::CACHE_BYTES_MAX
        );
        anyhow::ensure!(
            (1..=prefetch::FETCHERS_MAX).contains(&self.fetchers),
            "--fetchers must be 1 to {}",
            prefetch::FETCHERS_MAX
        );
        anyhow::ensure!(
            self.seek_ms <= storage::SEEK_MS_MAX,
            "--seek-ms is at most {}",
            storage::SEEK_MS_MAX
        );
        anyhow::ensure!(
            (1..=storage::SPINDLES_MAX).contains(&self.spindles),
            "--spindles must be 1 to {}",
            storage::SPINDLES_MAX
        );
        Ok(nasd_drive::DriveOptions {
            cache_bytes: self.cache_bytes,
            cache_reads: self.cache_reads,
            prefetch: (!self.no_prefetch).then_some(prefetch::PrefetchOptions {
                ahead_bytes: self.prefetch_ahead_bytes,
                fetchers: self.fetchers,
            }),
            seek_ms: self.seek_ms,
            spindles: self.spindles,
            cold: self.cold,
            cap_key_cache: true,
        })
    }
}

/// Where a sealed drive's passphrase comes from: $NASD_DRIVE_PASSPHRASE, this file (which
/// must be private to its owner), or a prompt.
#[derive(Args, Debug, Clone)]
pub struct PassphraseArgs {
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
}

/// The passphrase from `env`, `file`, or asked on the terminal with `prompt`.
pub(crate) fn passphrase(env: &str, file: Option<&Path>, prompt: &str) -> anyhow::Result<Vec<u8>> {
    if let Ok(p) = std::env::var(env) {
        return Ok(p.into_bytes());
    }
    if let Some(f) = file {
        nasd_private::check_tree(f)?;
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("reading the passphrase file {}", f.display()))?;
        let p = text.trim_end_matches(['\n', '\r']);
        if p.is_empty() {
            bail!("{} holds no passphrase", f.display());
        }
        return Ok(p.as_bytes().to_vec());
    }
    Ok(crate::cmd_fs::prompt_secret(prompt)?.into_bytes())
}

/// A drive and a key file of the hierarchy.
#[derive(Args, Debug, Clone)]
pub struct AdminArgs {
    #[arg(long, value_name = "ADDR")]
    pub drive: String,
    /// Key file that authorizes the operation.
    #[arg(long, value_name = "KEY_FILE")]
    pub key: PathBuf,
    /// Partition (default: the key file's, else 0).
    #[arg(long)]
    pub partition: Option<u16>,
    #[arg(long, value_parser = parse::protection, default_value = "integrity-data")]
    pub protection: Protection,
}

#[derive(Subcommand, Debug)]
pub enum PartitionCmd {
    /// Create a partition (drive key). With --out also set a fresh partition key and save it.
    Create {
        #[command(flatten)]
        admin: AdminArgs,
        #[arg(long, value_parser = parse::bytes)]
        quota: u64,
        /// Default integrity scheme of the partition's objects.
        #[arg(long, value_parser = parse::scheme, default_value = "tree")]
        scheme: Scheme,
        /// Set a fresh partition key and write it to FILE (mode 0600).
        #[arg(long, value_name = "PARTITION_KEY_FILE")]
        out: Option<PathBuf>,
        /// Also set a fresh working key (authorized by the new partition key) into FILE.
        #[arg(long, value_name = "WORKING_KEY_FILE", requires = "out")]
        working_out: Option<PathBuf>,
    },
    /// Remove a partition (drive key); --force also removes its objects.
    Remove {
        #[command(flatten)]
        admin: AdminArgs,
        #[arg(long)]
        force: bool,
    },
    /// Change a partition's quota (drive key).
    Resize {
        #[command(flatten)]
        admin: AdminArgs,
        #[arg(long, value_parser = parse::bytes)]
        quota: u64,
    },
    /// Set a fresh partition key (drive key) and write it to FILE.
    Setkey {
        #[command(flatten)]
        admin: AdminArgs,
        #[arg(long, value_name = "PARTITION_KEY_FILE")]
        out: PathBuf,
    },
    /// Set the minimum protection of the partition, or with --drive-wide of the drive.
    Protect {
        #[command(flatten)]
        admin: AdminArgs,
        #[arg(long = "min", value_parser = parse::protection)]
        min: Protection,
        #[arg(long)]
        drive_wide: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum KeyCmd {
    /// Set a fresh working key (partition key); the old one stays valid as the previous key.
    Rotate {
        #[command(flatten)]
        admin: AdminArgs,
        /// Where to write the new working key file (default: beside the partition key file).
        #[arg(long, value_name = "WORKING_KEY_FILE")]
        out: Option<PathBuf>,
    },
}

pub fn run_drive(c: DriveCmd) -> anyhow::Result<()> {
    match c {
        DriveCmd::Replace { old, new, no_wait } => {
            crate::runtime()?.block_on(crate::cmd_heal::drive_replace(old, new, no_wait))
        }
        DriveCmd::Init {
            data,
            partition,
            master_key,
            suite,
            capacity,
            quota,
            min_protection,
            scheme,
            seal_keys,
            passphrase: pf,
        } => {
            let mut opts = nasd_drive::InitOptions::new(data.clone());
            if seal_keys {
                opts.seal_passphrase = Some(passphrase(
                    "NASD_DRIVE_PASSPHRASE",
                    pf.passphrase_file.as_deref(),
                    "passphrase for the drive's keys: ",
                )?);
            }
            opts.master_key_file = master_key;
            opts.partition = partition.map(PartitionId);
            opts.suite = suite;
            opts.capacity_bytes = capacity;
            opts.quota_bytes = quota;
            opts.scheme = scheme;
            if let Some(p) = min_protection {
                opts.min_protection = p;
            }
            let r = nasd_drive::init(&opts)
                .with_context(|| format!("initializing a drive in {}", data.display()))?;
            outln!("drive {:016x} initialized in {}", r.drive.0, data.display());
            outln!("master key file    {}", r.master_key_file.display());
            outln!("drive key file     {}", r.drive_key_file.display());
            if let Some(p) = r.partition_key_file {
                outln!("partition key file {}", p.display());
            }
            if let Some(p) = r.working_key_file {
                outln!("working key file   {}", p.display());
            }
            Ok(())
        }
        DriveCmd::Seal {
            data,
            passphrase: pf,
            new_passphrase_file,
        } => {
            let sealed = nasd_drive::is_sealed(&data)
                .with_context(|| format!("opening the drive in {}", data.display()))?;
            let old = match sealed {
                true => Some(passphrase(
                    "NASD_DRIVE_PASSPHRASE",
                    pf.passphrase_file.as_deref(),
                    "current passphrase: ",
                )?),
                false => None,
            };
            let new = passphrase(
                "NASD_DRIVE_NEW_PASSPHRASE",
                new_passphrase_file.as_deref(),
                "new passphrase: ",
            )?;
            nasd_drive::seal_keys(&data, old.as_deref(), &new)
                .with_context(|| format!("sealing the keys of the drive in {}", data.display()))?;
            outln!("the keys of the drive in {} are sealed", data.display());
            Ok(())
        }
        DriveCmd::Run {
            data,
            listen,
            passphrase: pf,
            run,
            metrics,
        } => {
            let options = run.options()?;
            crate::log_to_stderr("info");
            let drive = match nasd_drive::Drive::open_with_options(&data, None, options) {
                Err(nasd_drive::DriveError::Sealed) => {
                    let p = passphrase(
                        "NASD_DRIVE_PASSPHRASE",
                        pf.passphrase_file.as_deref(),
                        "passphrase for the drive's keys: ",
                    )?;
                    nasd_drive::Drive::open_with_options(&data, Some(&p), options)
                }
                r => r,
            }
            .with_context(|| format!("opening the drive in {}", data.display()))?;
            crate::runtime()?.block_on(async {
                let source = Arc::new(nasd_drive::metrics::DriveSource(drive.clone()));
                metrics.start("drive", source).await?;
                serve(drive, &data, &listen).await
            })
        }
        DriveCmd::Info(a) => crate::runtime()?.block_on(async move {
            let (conn, auth, t) = admin_session(&a).await?;
            let d = conn.inquiry(&auth, t).await?;
            outln!("drive            {:016x}", d.drive.0);
            outln!("vendor           {}", d.vendor);
            outln!("suite            {}", d.suite.name());
            outln!(
                "block/chunk      {} / {} bytes",
                d.block_bytes,
                d.chunk_bytes
            );
            outln!("capacity         {} bytes", d.capacity_bytes);
            outln!("used             {} bytes", d.used_bytes);
            outln!("min protection   {}", d.min_protection);
            outln!("nonce window     {} ms", d.nonce_window_ms);
            outln!("block cache      {} bytes", d.cache_bytes);
            for e in &d.extensions {
                outln!(
                    "extension        {} v{} opcode {}",
                    e.name,
                    e.version,
                    e.opcode
                );
            }
            outln!(
                "clock offset     {} us (drive minus this host)",
                conn.welcome().clock_offset_us
            );
            for p in &d.partitions {
                outln!(
                    "partition {:<5} quota {} used {} objects {} scheme {} min protection {}",
                    p.id.0,
                    p.quota_bytes,
                    p.used_bytes,
                    p.objects,
                    p.default_scheme,
                    p.min_protection
                );
            }
            Ok(())
        }),
    }
}

async fn serve(drive: Arc<nasd_drive::Drive>, data: &Path, listen: &str) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let addr = listener.local_addr()?;
    outln!("nasd drive listening on {addr}");
    use std::io::Write as _;
    std::io::stdout().flush().ok();
    tracing::info!(%addr, data = %data.display(), "drive serving");
    let shutdown = async {
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("installing a SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutting down");
    };
    nasd_drive::serve(drive, listener, shutdown)
        .await
        .context("serving")?;
    Ok(())
}

async fn admin_session(a: &AdminArgs) -> anyhow::Result<(DriveConn, Auth, Target)> {
    let kf = load_key_file(&a.key)?;
    let partition = a
        .partition
        .map(PartitionId)
        .or(kf.partition)
        .unwrap_or(PartitionId(0));
    let conn = DriveConn::connect(&a.drive).await?;
    let t = Target {
        partition,
        object: ObjectId(0),
        protection: a.protection,
    };
    Ok((conn, Auth::from_key_file(&kf), t))
}

fn require_kind(a: &AdminArgs, auth: &Auth, want: &[KeyType]) -> anyhow::Result<()> {
    if !want.contains(&auth.key_type()) {
        bail!(
            "{} is a {} key file; this operation needs a {} key",
            a.key.display(),
            auth.key_type().name(),
            want.iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(" or ")
        );
    }
    Ok(())
}

/// Generates a key, sets it on the drive, and saves its key file.
async fn set_fresh_key(
    conn: &DriveConn,
    authorizing: &Auth,
    t: Target,
    op: OpCode,
    kind: KeyType,
    out: &Path,
) -> anyhow::Result<()> {
    let key = Key::generate();
    conn.set_key(authorizing, t, op, &key)
        .await
        .with_context(|| format!("setting the {} key", kind.name()))?;
    save_key_file(
        out,
        &KeyFile {
            kind,
            drive: conn.welcome().drive,
            suite: conn.welcome().suite,
            partition: Some(t.partition),
            key,
        },
    )
    .with_context(|| format!("the new {} key is set on the drive but", kind.name()))?;
    let said = format!(
        "{} key of partition {} written to {}",
        kind.name(),
        t.partition,
        if out == Path::new("-") {
            "stdout".into()
        } else {
            out.display().to_string()
        }
    );
    // With `--out -` the key itself is stdout: the note goes to stderr.
    if out == Path::new("-") {
        eprintln!("{said}");
    } else {
        outln!("{said}");
    }
    Ok(())
}

pub async fn run_partition(c: PartitionCmd) -> anyhow::Result<()> {
    match c {
        PartitionCmd::Create {
            admin,
            quota,
            scheme,
            out,
            working_out,
        } => {
            let (conn, auth, t) = admin_session(&admin).await?;
            require_kind(&admin, &auth, &[KeyType::Drive])?;
            conn.create_partition(&auth, t, quota, scheme).await?;
            outln!(
                "created partition {} (quota {quota} bytes, scheme {scheme})",
                t.partition
            );
            if let Some(out) = out {
                set_fresh_key(
                    &conn,
                    &auth,
                    t,
                    OpCode::SetPartitionKey,
                    KeyType::Partition,
                    &out,
                )
                .await?;
                if let Some(w) = working_out {
                    let pk = Auth::load_key_file(&out)?;
                    set_fresh_key(&conn, &pk, t, OpCode::SetWorkingKey, KeyType::Working, &w)
                        .await?;
                }
            }
        }
        PartitionCmd::Remove { admin, force } => {
            let (conn, auth, t) = admin_session(&admin).await?;
            require_kind(&admin, &auth, &[KeyType::Drive])?;
            conn.remove_partition(&auth, t, force).await?;
            outln!("removed partition {}", t.partition);
        }
        PartitionCmd::Resize { admin, quota } => {
            let (conn, auth, t) = admin_session(&admin).await?;
            require_kind(&admin, &auth, &[KeyType::Drive])?;
            conn.resize_partition(&auth, t, quota).await?;
            outln!("partition {} quota now {quota} bytes", t.partition);
        }
        PartitionCmd::Setkey { admin, out } => {
            let (conn, auth, t) = admin_session(&admin).await?;
            require_kind(&admin, &auth, &[KeyType::Drive])?;
            set_fresh_key(
                &conn,
                &auth,
                t,
                OpCode::SetPartitionKey,
                KeyType::Partition,
                &out,
            )
            .await?;
        }
        PartitionCmd::Protect {
            admin,
            min,
            drive_wide,
        } => {
            let (conn, auth, t) = admin_session(&admin).await?;
            conn.set_min_protection(&auth, t, drive_wide, min).await?;
            if drive_wide {
                outln!("drive minimum protection now {min}");
            } else {
                outln!("partition {} minimum protection now {min}", t.partition);
            }
        }
    }
    Ok(())
}

pub async fn run_key(c: KeyCmd) -> anyhow::Result<()> {
    let KeyCmd::Rotate { admin, out } = c;
    let (conn, auth, t) = admin_session(&admin).await?;
    require_kind(&admin, &auth, &[KeyType::Partition])?;
    let out = match out {
        Some(o) => o,
        None => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let dir = admin.key.parent().unwrap_or(Path::new("."));
            dir.join(format!("partition-{}-working-{secs}.key", t.partition))
        }
    };
    set_fresh_key(
        &conn,
        &auth,
        t,
        OpCode::SetWorkingKey,
        KeyType::Working,
        &out,
    )
    .await
}
