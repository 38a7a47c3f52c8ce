//! `nasd s3 serve` runs the S3 gateway ([`nasd_s3`]) as the configured user, who must be a
//! gateway (`nasd user gateway NAME on`); `nasd up --s3 ADDR` prepares a local cluster for S3
//! (a gateway user of its own, the bucket root) and runs the gateway beside it, stopped by
//! `nasd down` with the rest.

use anyhow::{bail, Context as _};
use nasd_client::config::{ClientFile, CLIENT_CONFIG_VERSION};
use nasd_client::files::Client;
use nasd_proto::manager::calls;
use nasd_proto::manager::{FileKind, MgrStatus};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where buckets live unless `--root` says otherwise: a directory users may create buckets
/// in (mode 1777, like `/tmp`: each bucket is its creator's).
pub const ROOT_DEFAULT: &str = "/s3";
/// The gateway user `nasd up --s3` makes.
pub const GATEWAY_USER: &str = "s3-gateway";
const GATEWAY_CONFIG: &str = "s3-gateway.json";
const GATEWAY_PASSWORD: &str = "s3-gateway.password";
const GATEWAY_PID: &str = "s3-gateway.pid";
const GATEWAY_LOG: &str = "s3-gateway.log";
/// Where the gateway `nasd up --s3` starts serves its metrics (`ADDR`, written at start).
pub const GATEWAY_METRICS: &str = "s3-gateway.metrics";
/// The access log `nasd up --s3` has the gateway write (one JSON line per request).
pub const ACCESS_LOG: &str = "s3-access.log";

#[derive(clap::Subcommand, Debug)]
pub enum S3Cmd {
    /// Serve the S3 API (path-style URLs) until ctrl-c or SIGTERM, as the configured user,
    /// who must be a gateway: requests signed with a user's access key (`nasd user s3-key
    /// create`) are served with that user's permissions.
    Serve(ServeArgs),
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9000")]
    pub listen: String,
    /// The directory whose subdirectories are the buckets.
    #[arg(long, value_name = "PATH", default_value = ROOT_DEFAULT)]
    pub root: String,
    /// Serve HTTPS with this certificate chain (PEM)...
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// ...and this private key (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Append a line per request (time, user, operation, bucket, key, status, bytes,
    /// duration; JSON) to this file, made private (0600).
    #[arg(long, value_name = "FILE")]
    pub access_log: Option<PathBuf>,
    /// Also serve requests signed with AWS's older SigV2 (off by default: its date is
    /// checked to 15 minutes and presigned URLs to 7 days, but it is weaker than SigV4).
    #[arg(long)]
    pub sigv2: bool,
    /// Serve SSE-KMS naming this key id, as a name of nasd's own end-to-end encryption: no
    /// key service is asked, the id is recorded and reported (repeatable; without one,
    /// SSE-KMS is refused). SSE-S3 and SSE-C need nothing.
    #[arg(long = "kms-key-id", value_name = "ID")]
    pub kms_key_ids: Vec<String>,
    /// Remove multipart uploads unchanged for this many seconds (abandoned: their parts
    /// count against their users' quotas).
    #[arg(long, value_name = "SECS", default_value_t = nasd_s3::stale::STALE_UPLOAD_SECS_DEFAULT)]
    pub stale_upload_secs: u64,
    /// Count a lifecycle rule's day as this many seconds (for tests, as RGW's
    /// `rgw_lc_debug_interval`).
    #[arg(long, value_name = "SECS", default_value_t = nasd_s3::lifecycle::DAY_SECS_DEFAULT)]
    pub lifecycle_day_secs: u64,
    /// The region the gateway serves: GetBucketLocation answers it, and CreateBucket refuses
    /// a LocationConstraint naming another.
    #[arg(long, value_name = "NAME", default_value = nasd_s3::server::REGION_DEFAULT)]
    pub region: String,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

pub fn run(c: S3Cmd) -> anyhow::Result<()> {
    match c {
        S3Cmd::Serve(a) => serve(a),
    }
}

fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => Some(nasd_s3::Tls::from_pem(c, k)?),
        _ => None,
    };
    let access_log = match &a.access_log {
        Some(p) => {
            Some(nasd_private::open_append(p).with_context(|| format!("opening {}", p.display()))?)
        }
        None => None,
    };
    let counters = a.metrics.metrics.is_some().then(Arc::default);
    let options = nasd_s3::Options {
        tls,
        sigv2: a.sigv2,
        access_log,
        metrics: counters.clone(),
        kms_key_ids: a.kms_key_ids.clone(),
        stale_upload_after: std::time::Duration::from_secs(a.stale_upload_secs.max(1)),
        lifecycle_day: std::time::Duration::from_secs(a.lifecycle_day_secs.max(1)),
        region: a.region.clone(),
    };
    // Warnings (each naming the request that caused it) to stderr, the gateway's log under
    // `nasd up`; s3s's own lines (one per refused request) only when RUST_LOG asks.
    crate::log_to_stderr("warn,s3s=off");
    crate::runtime()?.block_on(async move {
        let c = crate::cmd_fs::connect().await?;
        let root = crate::cmd_fs::remote(&a.root)?;
        check_root(&c, &root).await?;
        let listener = tokio::net::TcpListener::bind(&a.listen)
            .await
            .with_context(|| format!("listening on {}", a.listen))?;
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        println!(
            "S3 gateway on {scheme}://{} (buckets under nasd:{root}, acting as {})",
            listener.local_addr()?,
            c.user()
        );
        let access = nasd_s3::access::Access::new(c);
        if let Some(metrics) = counters {
            let source = Arc::new(nasd_s3::metrics::GatewaySource {
                metrics,
                access: access.clone(),
                root: root.clone(),
                runtime: tokio::runtime::Handle::current(),
            });
            a.metrics.start("s3", source).await?;
        }
        nasd_s3::serve(listener, access, &root, options, crate::terminated()).await;
        Ok(())
    })
}

/// Checks that the bucket root and its staging directory for multipart uploads exist (the
/// staging directory is made when the gateway may).
async fn check_root(c: &Client, root: &str) -> anyhow::Result<()> {
    match c.stat(root).await {
        Ok(st) if st.kind == FileKind::Dir => {}
        Ok(_) => bail!("nasd:{root} is not a directory"),
        Err(e) => bail!("the bucket root nasd:{root}: {e} (an admin makes it: nasd mkdir --mode 1777 nasd:{root})"),
    }
    let staging = format!(
        "{}/{}",
        root.trim_end_matches('/'),
        nasd_s3::multipart::STAGING_DIR
    );
    match c.stat(&staging).await {
        Ok(st) if st.kind == FileKind::Dir && st.mode & 0o1777 == 0o1777 => Ok(()),
        Ok(_) => bail!("nasd:{staging} must be a directory of mode 1777 (nasd chmod 1777 nasd:{staging})"),
        Err(e) if e.status() == Some(MgrStatus::NoSuchPath) => c
            .mkdir(&staging, 0o1777)
            .await
            .with_context(|| format!("making nasd:{staging} (or an admin makes it: nasd mkdir --mode 1777 nasd:{staging})")),
        Err(e) => Err(e.into()),
    }
}

/// Makes `dir` exist with `mode` (an admin's client).
async fn mkdir_mode(c: &Client, dir: &str, mode: u32) -> anyhow::Result<()> {
    match c.mkdir(dir, mode).await {
        Ok(()) => Ok(()),
        Err(e) if e.status() == Some(MgrStatus::Exists) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Prepares the cluster in `dir` (whose admin `admin` is) for the gateway: the gateway user
/// with a random password kept in the cluster directory, its config, and the bucket root.
/// Returns the gateway's config.
pub async fn setup(admin: &Arc<Client>, dir: &Path) -> anyhow::Result<PathBuf> {
    let pw_path = dir.join(GATEWAY_PASSWORD);
    let cfg_path = dir.join(GATEWAY_CONFIG);
    if !cfg_path.exists() {
        let mut pw = [0u8; 16];
        nasd_crypto::random_bytes(&mut pw);
        let password = hex::encode(pw);
        nasd_private::write_file(&pw_path, password.as_bytes())
            .with_context(|| format!("writing {}", pw_path.display()))?;
        // With its end-to-end keys: it deciphers the objects it serves (issue 10).
        let r = admin
            .add_user_enrolled(GATEWAY_USER, &password, false)
            .await;
        match r {
            Ok(_) => {}
            Err(e) if e.status() == Some(MgrStatus::Exists) => bail!(
                "the cluster has a user {GATEWAY_USER} but {} is missing; remove the user or \
                 restore the file",
                cfg_path.display()
            ),
            Err(e) => return Err(e.into()),
        }
        let admin_cfg = ClientFile::load(&dir.join(nasd_client::config::CONFIG_FILE_NAME))?;
        ClientFile {
            version: CLIENT_CONFIG_VERSION,
            manager: admin_cfg.manager,
            ca: admin_cfg.ca,
            user: GATEWAY_USER.into(),
            password_file: Some(pw_path),
            password_user: Some(GATEWAY_USER.into()),
        }
        .save(&cfg_path)?;
    }
    admin
        .call(
            "/",
            calls::UserGateway {
                name: GATEWAY_USER.into(),
                on: true,
            },
        )
        .await?;
    mkdir_mode(admin, ROOT_DEFAULT, 0o1777).await?;
    // Every object's key is also wrapped for the gateway, which acts for the users who read
    // and write them (docs/e2e.md).
    admin
        .layout_set(ROOT_DEFAULT, &format!("reader={GATEWAY_USER}"))
        .await?;
    let staging = format!("{ROOT_DEFAULT}/{}", nasd_s3::multipart::STAGING_DIR);
    mkdir_mode(admin, &staging, 0o1777).await?;
    Ok(cfg_path)
}

/// The gateway `nasd up --s3` starts: where it listens, and the options of `nasd s3 serve`
/// it passes on.
pub struct Up {
    pub listen: String,
    /// `--kms-key-id`s.
    pub kms_key_ids: Vec<String>,
    /// `--sigv2`.
    pub sigv2: bool,
    /// `--stale-upload-secs`, when not the default.
    pub stale_upload_secs: Option<u64>,
    /// `--lifecycle-day-secs`, when not the default.
    pub lifecycle_day_secs: Option<u64>,
    /// `--region`, when not the default.
    pub region: Option<String>,
}

impl Up {
    /// A gateway on `listen` with the defaults.
    pub fn on(listen: &str) -> Up {
        Up {
            listen: listen.into(),
            kms_key_ids: vec![],
            sigv2: false,
            stale_upload_secs: None,
            lifecycle_day_secs: None,
            region: None,
        }
    }
}

/// Starts `nasd s3 serve` for the cluster in `dir` as `g` says, in a process group of its
/// own, recording its pid for `nasd down` and the address of its metrics (a free loopback
/// port) in [`GATEWAY_METRICS`]; returns the pid and that address once it answers.
pub fn start(dir: &Path, g: &Up) -> anyhow::Result<(u32, String)> {
    let listen = g.listen.as_str();
    use std::os::unix::process::CommandExt as _;
    let cfg = crate::runtime()?.block_on(async {
        let admin_cfg =
            crate::cmd_fs::session_config(&dir.join(nasd_client::config::CONFIG_FILE_NAME))?;
        let admin = Client::connect(admin_cfg).await?;
        setup(&admin, dir).await
    })?;
    stop(dir);
    // The gateway's log names users, buckets and keys: private, like the access log.
    let log_path = dir.join(GATEWAY_LOG);
    nasd_private::write_file(&log_path, b"")?;
    let log = nasd_private::open_append(&log_path)?;
    let exe = std::env::current_exe()?;
    let metrics = nasd_cluster::ports::free_addrs(1)?.remove(0);
    nasd_private::write_file(&dir.join(GATEWAY_METRICS), metrics.as_bytes())?;
    let child = std::process::Command::new(exe)
        .args(["s3", "serve", "--listen", listen, "--root", ROOT_DEFAULT])
        .args(["--metrics", &metrics])
        .args(g.kms_key_ids.iter().flat_map(|id| ["--kms-key-id", id]))
        .args(g.sigv2.then_some("--sigv2"))
        .args(
            g.stale_upload_secs
                .iter()
                .flat_map(|s| ["--stale-upload-secs".to_string(), s.to_string()]),
        )
        .args(
            g.lifecycle_day_secs
                .iter()
                .flat_map(|s| ["--lifecycle-day-secs".to_string(), s.to_string()]),
        )
        .args(g.region.iter().flat_map(|r| ["--region", r.as_str()]))
        .arg("--access-log")
        .arg(dir.join(ACCESS_LOG))
        .env("NASD_CONFIG", &cfg)
        .env_remove("NASD_USER")
        .env_remove("NASD_PASSWORD")
        .env_remove("NASD_KEY")
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("starting the S3 gateway")?;
    let pid = child.id();
    nasd_private::write_file(&dir.join(GATEWAY_PID), pid.to_string().as_bytes())?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(listen).is_err() {
        if std::time::Instant::now() > deadline {
            bail!(
                "the S3 gateway did not start; see {}",
                dir.join(GATEWAY_LOG).display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok((pid, metrics))
}

/// Stops the gateway `start` left running for the cluster in `dir`, if any; its pid.
pub fn stop(dir: &Path) -> Option<u32> {
    let pid_path = dir.join(GATEWAY_PID);
    let pid: i32 = std::fs::read_to_string(&pid_path)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let _ = std::fs::remove_file(&pid_path);
    // The pid may have been reused since: only a gateway is stopped.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if !cmdline.split(|&b| b == 0).any(|a| a == b"serve") {
        return None;
    }
    // SAFETY: kill(2) with a pid read from our own pid file and a valid signal number.
    let alive = unsafe { libc::kill(pid, libc::SIGTERM) } == 0;
    alive.then_some(pid as u32)
}
